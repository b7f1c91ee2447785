"""The shared KV as a trust boundary (docs/security.md): whoever reaches Redis without
the trainers' key can neither make a reader return other bytes nor read what is cached.

Each attack is made with a plain Redis client, as an intruder on the Redis
network would: it rewrites entries as well as it can without the key (the
old format's CRC it can recompute; a MAC or a cipher it cannot), copies
valid entries under other keys, and reads everything with SCAN + HGETALL.
The oracle for frames is the ffmpeg CLI (tests.media).
"""

from __future__ import annotations

import hashlib
import hmac
import shutil
import subprocess
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from fluxon_video import errors
from fluxon_video.fs.client import FluxonFsClient
from fluxon_video.fs.config import ClientSettings, FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import FileRef
from fluxon_video.fs.kv import stat_key
from fluxon_video.fs.kv_seal import KEYS_ENV
from fluxon_video.testing import LOOPBACK, AgentProcess, free_port, wait_until
from tests.helpers import (IDENTITIES, KV_KEY, agent_config_text, make_certificate, make_patcher,
                           run_in_threads)
from tests.tcp_relay import DelayRelay

VIDEO, OTHER = "videos/h264_faststart.mp4", "videos/h264_moov_end.mp4"
H, W = 48, 64
PIECE = 16 << 10
FRAMES = [0, 20, 40, 71]
OTHER_KEY = "another-kv-key-Qw8Er5Ty2Ui9Op4As7Df1Gh3Jk6"


@pytest.fixture(scope="module")
def root(tmp_path_factory, media) -> Path:
    root = tmp_path_factory.mktemp("trust") / "root"
    (root / "videos").mkdir(parents=True)
    for name in ("h264_faststart.mp4", "h264_moov_end.mp4"):
        shutil.copy(media.path(name), root / "videos" / name)
    return root


def cache(root, redis_url, relpath=VIDEO, frames=FRAMES, **client) -> None:
    """Read frames of relpath in a patcher of its own, so their pieces and the
    index are in the KV when it returns."""
    with make_patcher(None, root, redis_url, piece_size=PIECE, client=client) as patcher:
        with patcher.open_video_reader("train", relpath, H, W) as reader:
            reader.read_frames_numpy(frames)
        patcher.client.backfill.wait_idle()


def read(root, redis_url, relpath=VIDEO, frames=FRAMES, **client):
    """(frames, stats) of a fresh trainer reading relpath through the KV."""
    with make_patcher(None, root, redis_url, piece_size=PIECE, client=client) as patcher:
        with patcher.open_video_reader("train", relpath, H, W) as reader:
            got = reader.read_frames_numpy(frames)
            stats = reader.last_stats
        patcher.client.backfill.wait_idle()
    return got, stats


def entries(r) -> dict[bytes, dict[str, bytes]]:
    """Every hash in Redis, as an intruder reads it: SCAN + HGETALL."""
    return {key: {k.decode(): v for k, v in r.hgetall(key).items()}
            for key in r.scan_iter(count=1000) if r.type(key) == b"hash"}


def forge(r, key: bytes, data: bytes) -> None:
    """Rewrite the entry at key to hold data, fixing up every check an intruder can:
    a CRC it recomputes; a MAC it can only compute with a key of its own guessing."""
    fields = {k.decode(): v for k, v in r.hgetall(key).items()}
    fields["bytes"] = data
    if "len" in fields:
        fields["len"] = str(len(data)).encode()
    if "crc32" in fields:  # the format before sealing: a checksum anyone recomputes
        fields["crc32"] = str(zlib.crc32(data, zlib.crc32(key))).encode()
    if "mac" in fields:
        fields["mac"] = hmac.new(b"a guess", key + data, hashlib.sha256).digest()
    r.delete(key)
    r.hset(key, mapping=fields)


# ---- forged entries are never served ----

@pytest.mark.parametrize("protection", ["encrypt", "mac"])
def test_forged_pieces_never_return_another_videos_bytes(media, root, redis_server, redis_url,
                                                          protection):
    r = redis_server.client()
    cache(root, redis_url, kv_protection=protection)
    other = (root / OTHER).read_bytes()
    pieces = [key for key in r.scan_iter("*:piece:*") if b"h264_faststart" in key]
    assert len(pieces) >= 3
    for key in pieces:  # every piece the reader needs now holds the other video's bytes
        index = int(key.rsplit(b":", 1)[1])
        forge(r, key, other[index * PIECE:(index + 1) * PIECE].ljust(
            len(r.hget(key, "bytes")) - (16 if protection == "encrypt" else 0), b"\0"))
    got, stats = read(root, redis_url, kv_protection=protection)
    np.testing.assert_array_equal(got, media.reference("h264_faststart.mp4", H, W)[FRAMES])
    assert stats.kv_hits == 0 and stats.kv_corrupt >= 1


def test_valid_entries_copied_under_other_keys_are_corrupt(media, root, redis_server, redis_url):
    """An intruder cannot seal, but it can copy: every entry of the other video (pieces
    and index) put under this video's keys, position for position."""
    r = redis_server.client()
    cache(root, redis_url)
    cache(root, redis_url, relpath=OTHER)
    mine = sorted(k for k in r.scan_iter("*h264_faststart*") if b":stat:" not in k)
    theirs = sorted(k for k in r.scan_iter("*h264_moov_end*") if b":stat:" not in k)
    for key, source in zip(mine, theirs):
        fields = r.hgetall(source)
        r.delete(key)
        r.hset(key, mapping=fields)
    got, stats = read(root, redis_url)
    np.testing.assert_array_equal(got, media.reference("h264_faststart.mp4", H, W)[FRAMES])
    assert stats.kv_corrupt >= 1


def test_redis_holds_only_ciphertext(root, redis_server, redis_url):
    """The Redis-reader row: an intruder with SCAN + HGETALL learns nothing of the file."""
    r = redis_server.client()
    cache(root, redis_url)
    data = (root / VIDEO).read_bytes()
    found = entries(r)
    assert any(b":piece:" in key for key in found) and any(b"frameindex" in key for key in found)
    windows = [data[offset:offset + 24] for offset in range(0, len(data) - 24, 997)]
    for key, fields in found.items():
        for value in fields.values():
            assert not any(window in value for window in windows), key
            assert b"h264" not in value and b"avc1" not in value, key  # the index's JSON


def test_entries_of_the_old_format_are_misses_then_rewritten(media, root, redis_server,
                                                             redis_url):
    r = redis_server.client()
    cache(root, redis_url)
    data = (root / VIDEO).read_bytes()
    pieces = [key for key in r.scan_iter("*:piece:*")]
    for key in pieces:  # as the unsealed format wrote them: bytes, len, crc32
        index = int(key.rsplit(b":", 1)[1])
        piece = data[index * PIECE:(index + 1) * PIECE]
        r.delete(key)
        r.hset(key, mapping={"bytes": piece, "len": str(len(piece)),
                             "crc32": str(zlib.crc32(piece, zlib.crc32(key)))})
    got, stats = read(root, redis_url)
    np.testing.assert_array_equal(got, media.reference("h264_faststart.mp4", H, W)[FRAMES])
    assert stats.kv_hits == 0 and stats.kv_corrupt == 0 and stats.kv_errors == 0
    rewritten = [r.hgetall(key) for key in pieces if r.exists(key)]
    assert rewritten and all(b"crc32" not in entry and entry[b"v"] == b"2"
                             for entry in rewritten)


# ---- keys: where they come from, rotation ----

def test_a_shared_kv_without_a_key_is_refused(root, redis_url, monkeypatch, tmp_path):
    monkeypatch.delenv(KEYS_ENV, raising=False)
    with pytest.raises(errors.FluxonFsConfigError, match="fluxon-video token new"):
        make_patcher(None, root, redis_url, client={"kv_keys": ()})
    with pytest.raises(errors.FluxonFsConfigError, match="128 bits"):
        make_patcher(None, root, redis_url, client={"kv_keys": ("short",)})
    key_file = tmp_path / "kv.key"
    key_file.write_text(f"# current\n{KV_KEY}\n")
    monkeypatch.setenv(KEYS_ENV, OTHER_KEY)
    for client in ({"kv_keys": (), "kv_key_file": str(key_file)}, {"kv_keys": ()}):
        make_patcher(None, root, redis_url, client=client).close()
    with pytest.raises(errors.FluxonFsConfigError, match="kv_key_file"):
        make_patcher(None, root, redis_url, client={"kv_keys": (),
                                                    "kv_key_file": str(tmp_path / "none")})


def test_keys_rotate_with_two_valid_at_once(media, root, redis_server, redis_url):
    ref = media.reference("h264_faststart.mp4", H, W)[FRAMES]
    cache(root, redis_url, kv_keys=(KV_KEY,))
    # Both keys held, the new one first: the old key's entries still serve.
    got, stats = read(root, redis_url, kv_keys=(OTHER_KEY, KV_KEY))
    np.testing.assert_array_equal(got, ref)
    assert stats.kv_hits > 0 and stats.remote_reads == 0 and stats.kv_corrupt == 0
    # The old key retired: its entries are misses (not corruption), read again, resealed.
    got, stats = read(root, redis_url, kv_keys=(OTHER_KEY,))
    np.testing.assert_array_equal(got, ref)
    assert stats.kv_hits == 0 and stats.kv_corrupt == 0
    got, stats = read(root, redis_url, kv_keys=(OTHER_KEY,))
    assert stats.kv_hits > 0 and stats.remote_reads == 0


def test_exports_can_have_keys_of_their_own(root, redis_server, redis_url, tmp_path):
    key_file = tmp_path / "train.key"
    key_file.write_text(OTHER_KEY + "\n")
    export = FluxonFsExport("train", str(root), allow=["alice"], kv_key_file=str(key_file))
    config = FluxonFsConfig.build([export], IDENTITIES, ClientSettings(redis_url=redis_url))
    client = FluxonFsClient(config)  # no client-wide key is needed: every export has one
    try:
        file = client.files.stat(FileRef("train", VIDEO, config.identity("alice")))
        client._checkpid().put_verified(export, "k", b"payload")
        assert client.kv.get("k")[1] is not None
    finally:
        client.close()
    assert file.size == (root / VIDEO).stat().st_size


# ---- shared stats (the agent's authorisation, shared through the KV) ----

@pytest.fixture(scope="module")
def trust_agent(tmp_path_factory, root):
    path = tmp_path_factory.mktemp("trust-agent") / "agent.toml"
    path.write_text(agent_config_text(root))
    path.chmod(0o600)
    with AgentProcess(path) as process:
        yield process


def test_a_forged_shared_stat_lets_no_refused_identity_read(root, trust_agent, redis_server,
                                                            redis_url):
    """bob may read "shared" but not "train"; an intruder without the KV key gives
    him a stat for train's video (a copy of alice's, and a recomputed old-format one)."""
    r = redis_server.client()
    with make_patcher(trust_agent.url, root, redis_url, metadata_cache_ttl_ms=3_600_000) as alice:
        with alice.open_video_reader("train", VIDEO, H, W) as reader:
            reader.read_frames_numpy(FRAMES)
        alice.client.backfill.wait_idle()
        alice.client._checkpid().alongside.submit(lambda: None).result()
    with make_patcher(None, root, redis_url) as trainer:  # the tags need the KV key
        alices, bobs = (stat_key("fluxonfs", "train", VIDEO, trainer.client.seal.identity_tag(
            "train", IDENTITIES[name])).encode() for name in ("alice", "bob"))
    assert r.exists(alices)
    for attempt in ("copy", "recompute"):
        fields = r.hgetall(alices)
        r.delete(bobs)
        r.hset(bobs, mapping=fields)
        if attempt == "recompute":
            forge(r, bobs, fields[b"bytes"])
        with make_patcher(trust_agent.url, root, redis_url, identity="bob",
                          metadata_cache_ttl_ms=3_600_000) as bob:
            with pytest.raises(errors.FluxonFsPermissionError):
                with bob.open_video_reader("train", VIDEO, H, W) as reader:
                    reader.read_frames_numpy(FRAMES)


def test_a_shared_stat_is_trusted_no_longer_than_the_readers_ttl(root, trust_agent, redis_url):
    def stat(ttl_ms: int) -> int:
        with make_patcher(trust_agent.url, root, redis_url,
                          metadata_cache_ttl_ms=ttl_ms) as patcher:
            client = patcher.client
            counters = ReadCounters()
            client.files.stat(FileRef("train", VIDEO, client.config.identity("alice")), counters)
            client._checkpid().alongside.submit(lambda: None).result()  # the shared write
        return counters.stat_requests

    assert stat(3_600_000) == 1  # the writer lets it be used for an hour
    assert stat(2_000) == 0  # young enough for a reader trusting 2 s
    time.sleep(1.2)
    assert stat(1_000) == 1  # too old for one trusting 1 s: the agent is asked


# ---- Redis Cluster with ACL users and TLS ----

@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """Three TLS-only cluster masters (TLS on the bus too) whose default user needs a
    password, and an ACL user "trainer"; (admin client factory, trainer URLs, CA)."""
    import redis

    if shutil.which("redis-cli") is None:
        pytest.skip("needs the redis-cli command")
    work = tmp_path_factory.mktemp("tls-cluster")
    cert, key = make_certificate(work)
    (work / "acl.conf").write_text("user trainer on >trainer-pw ~* &* +@all\n")
    ports = []
    while len(ports) < 6:
        port = free_port()
        if port not in ports:
            ports.append(port)
    procs = []
    tls = ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file",
           str(cert), "--tls-auth-clients", "no"]
    try:
        for port, bus in zip(ports[:3], ports[3:]):
            node = work / str(port)
            node.mkdir()
            procs.append(subprocess.Popen(
                ["redis-server", str(work / "acl.conf"), "--port", "0", "--tls-port", str(port),
                 "--bind", LOOPBACK, "--save", "", "--appendonly", "no", *tls,
                 "--tls-cluster", "yes", "--cluster-enabled", "yes", "--cluster-port", str(bus),
                 "--cluster-config-file", "nodes.conf", "--requirepass", "admin-pw",
                 "--masterauth", "admin-pw", "--dir", str(node)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def admin(port: int) -> redis.Redis:
            return redis.Redis(host=LOOPBACK, port=port, password="admin-pw", ssl=True,
                               ssl_ca_certs=str(cert), socket_timeout=2)

        for port in ports[:3]:
            wait_until(lambda port=port: admin(port).ping(), f"TLS redis on {port}")
        subprocess.run(["redis-cli", "--tls", "--cacert", str(cert), "-a", "admin-pw",
                        "--no-auth-warning", "--cluster", "create",
                        *(f"{LOOPBACK}:{port}" for port in ports[:3]),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        wait_until(lambda: all(b"cluster_state:ok" in admin(port).execute_command(
            "CLUSTER", "INFO") for port in ports[:3]), "the TLS cluster", 30)
        urls = [f"rediss://trainer:trainer-pw@{LOOPBACK}:{port}" for port in ports[:3]]
        yield admin, ports[:3], urls, str(cert)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def test_a_cluster_with_acl_users_and_tls_is_used(media, root, tls_cluster, caplog):
    admin, ports, urls, ca = tls_cluster
    options = {"redis_cluster": True, "redis_ca_bundle": ca}
    cache(root, urls, **options)
    cached = sum(len(list(admin(port).scan_iter("*:piece:*"))) for port in ports)
    assert cached >= 3
    got, stats = read(root, urls, **options)
    np.testing.assert_array_equal(got, media.reference("h264_faststart.mp4", H, W)[FRAMES])
    assert stats.kv_hits > 0 and stats.remote_reads == 0
    # A wrong password is a KV that cannot be used: reads go on from the origin.
    wrong = [url.replace("trainer-pw", "wrong") for url in urls]
    with caplog.at_level("WARNING", logger="fluxon_video"):
        got, stats = read(root, wrong, **options)
    assert "invalid username-password" in caplog.text
    np.testing.assert_array_equal(got, media.reference("h264_faststart.mp4", H, W)[FRAMES])
    assert stats.kv_hits == 0 and stats.remote_reads > 0


# ---- a KV that answers, slower than the origin ----

def test_a_slow_kv_is_bypassed_then_measured_again(media, root, redis_server, redis_url):
    cache(root, redis_url)
    ref = media.reference("h264_faststart.mp4", H, W)[FRAMES]
    with DelayRelay(redis_server.port, delay_s=0.2) as relay:
        url = f"redis://{LOOPBACK}:{relay.port}/0"
        client = {"redis_timeout_s": 2.0, "redis_retry_after_s": 1.0}
        with make_patcher(None, root, url, piece_size=PIECE, client=client) as patcher:

            def read_anew():  # a new reader each time: its page cache holds nothing yet
                with patcher.open_video_reader("train", VIDEO, H, W) as reader:
                    np.testing.assert_array_equal(reader.read_frames_numpy(FRAMES), ref)
                    return reader.last_stats

            read_anew()  # slow KV answers, until the circuit opens
            assert patcher.client.kv.circuit_open
            bypassed = read_anew()
            relay.delay_s = 0.0
            time.sleep(1.2)  # redis_retry_after_s: the next read measures the KV again
            healthy = read_anew()
    assert bypassed.kv_hits == 0 and bypassed.kv_errors > 0 and bypassed.remote_reads > 0
    assert healthy.kv_errors == 0 and healthy.kv_hits > 0


# ---- per-process state under threads ----

def fluxon_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("fluxon")}


def test_threads_racing_to_a_fresh_client_build_one_state(root, redis_url):
    before = fluxon_threads()
    for _ in range(20):
        with make_patcher(None, root, redis_url) as patcher:
            client = patcher.client
            barrier = threading.Barrier(8)
            states = []

            def first_call(_: int) -> None:
                barrier.wait()
                states.append(client._checkpid())

            assert run_in_threads(first_call, 8) == []
            assert len({id(state) for state in states}) == 1
            pool = patcher.open_video_reader_pool(max_readers=2)
            barrier = threading.Barrier(8)
            pools = []

            def first_pool_call(_: int) -> None:
                barrier.wait()
                pools.append(pool._local())

            assert run_in_threads(first_pool_call, 8) == []
            assert len({id(state) for state in pools}) == 1
            pool.close()
    wait_until(lambda: fluxon_threads() <= before, "the clients' threads to end", 10)
