"""FluxonFS end to end: the real agent process, a real redis-server, the native reader."""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode

import numpy as np
import pytest
import redis as redis_lib

from fluxon_video import errors
from fluxon_video.fs.config import MissPolicy, RequestIdentity
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import FileRef, VersionedFile
from fluxon_video.fs.kv import piece_key
from fluxon_video.fs.routes import AgentRoute
from fluxon_video.testing import AgentProcess, RedisServer
from tests.helpers import IDENTITIES, make_patcher, run_in_threads

pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(120)

VIDEO = "bucket/videos/h264_faststart.mp4"


def read(patcher, indices, relpath=VIDEO, export="train", size=(64, 64), threads=2):
    with patcher.open_video_reader(export, relpath, size[0], size[1], threads) as reader:
        frames = reader.read_frames_numpy(indices)
        return frames, reader.last_stats


# ---- correctness and cache sharing ----

def test_frames_through_agent_and_redis_equal_the_cli(media, agent, export_root, redis_url):
    ref = media.reference("h264_faststart.mp4", 64, 64)
    with make_patcher(agent.url, export_root, redis_url) as patcher:
        frames, stats = read(patcher, [0, 17, 71, 17])
    np.testing.assert_array_equal(frames, ref[[0, 17, 71, 17]])
    size = (export_root / VIDEO).stat().st_size
    assert stats.remote_bytes == size and stats.kv_hits == 0
    # The file is smaller than a piece: all of it came with the cold open's stat.
    assert stats.head_bytes == size and stats.remote_reads == 0
    assert stats.range_reads > 0 and stats.frames_returned == 4


@pytest.mark.parametrize("policy", list(MissPolicy))
def test_second_node_reads_nothing_from_the_agent(media, agent, export_root, redis_url, policy):
    """Two patchers standing for two nodes share the Redis piece cache."""
    relpath = "bucket/videos/hevc.mp4"
    ref = media.reference("hevc.mp4", 64, 64)
    with make_patcher(agent.url, export_root, redis_url, kv_miss_policy=policy,
                      piece_size=32 << 10) as node_a:
        cold, cold_stats = read(node_a, [3, 50], relpath)
        assert node_a.client.backfill.wait_idle()
    with make_patcher(agent.url, export_root, redis_url, kv_miss_policy=policy,
                      piece_size=32 << 10) as node_b:
        warm, warm_stats = read(node_b, [3, 50], relpath)
    np.testing.assert_array_equal(cold, ref[[3, 50]])
    np.testing.assert_array_equal(warm, cold)
    assert cold_stats.remote_bytes > 0
    assert warm_stats.remote_bytes == 0 and warm_stats.remote_reads == 0
    # The same pieces, less those holding only the container header (the
    # index carries it): the cold open's stat brought the first, the cold read
    # fetched the others.
    assert cold_stats.head_bytes == 32 << 10
    assert 1 < warm_stats.kv_hits <= cold_stats.kv_misses + 1
    if policy is MissPolicy.RemoteRead:
        # Every miss is backfilled, and the head. (The head told the scan where
        # the index is: no probe of the file's end read a piece in part.)
        assert cold_stats.backfills_queued == cold_stats.kv_misses + 1


def test_many_concurrent_clients(media, agent, export_root, redis_url):
    ref = media.reference("vp9.webm", 64, 64)
    results = []
    with make_patcher(agent.url, export_root, redis_url, piece_size=16 << 10) as patcher:
        def worker(seed):
            idx = sorted(np.random.default_rng(seed).integers(0, 72, 4).tolist())
            frames, _ = read(patcher, idx, "bucket/videos/vp9.webm")
            results.append((idx, frames))

        failures = run_in_threads(worker, 12)
    assert not failures
    for idx, frames in results:
        np.testing.assert_array_equal(frames, ref[idx])


def test_files_over_cache_max_bytes_bypass_the_kv(agent, export_root, redis_url, redis_server):
    with make_patcher(agent.url, export_root, redis_url, cache_max_bytes=1000) as patcher:
        _, stats = read(patcher, [5])
        patcher.client.backfill.wait_idle()
    assert stats.kv_hits == stats.kv_misses == 0 and stats.remote_bytes > 0
    # Neither pieces nor the index went to the KV; the authorised stat is shared
    # whatever the file's size (metadata_cache_shared, on by default).
    keys = redis_server.client().keys("*")
    assert [k for k in keys if b":stat:" not in k] == [] and len(keys) == 1


def test_embedded_defaults_need_no_server(media, export_root):
    ref = media.reference("h264_moov_end.mp4", 64, 64)
    with make_patcher(None, export_root) as patcher:
        frames, cold = read(patcher, [10, 60], "bucket/videos/h264_moov_end.mp4")
        patcher.client.backfill.wait_idle()
        again, warm = read(patcher, [10, 60], "bucket/videos/h264_moov_end.mp4")
    np.testing.assert_array_equal(frames, ref[[10, 60]])
    np.testing.assert_array_equal(again, frames)
    assert cold.remote_bytes > 0 and warm.remote_bytes == 0 and warm.kv_hits > 0


# ---- the contract's failure table ----

@pytest.mark.parametrize("route", ["agent", "in_process"])
def test_failure_table_on_open(agent, export_root, route):
    url = agent.url if route == "agent" else None
    with make_patcher(url, export_root) as patcher:
        with pytest.raises(errors.FluxonFsNotFoundError, match="unknown export 'nope'"):
            patcher.open_video_reader("nope", VIDEO, 8, 8, 1)
        with pytest.raises(errors.FluxonFsNotFoundError, match="train:bucket/missing.mp4"):
            patcher.open_video_reader("train", "bucket/missing.mp4", 8, 8, 1)
        with pytest.raises(errors.FluxonFsNotFoundError, match="not a regular file"):
            patcher.open_video_reader("train", "bucket/videos/a_directory.mp4", 8, 8, 1)
        for h, w, t in ((0, 8, 1), (8, -1, 1), (8, 8, 0)):
            with pytest.raises(errors.FluxonFsConfigError, match="must be a positive int"):
                patcher.open_video_reader("train", VIDEO, h, w, t)
    with make_patcher(url, export_root, identity="bob") as patcher:
        with pytest.raises(errors.FluxonFsPermissionError, match="'bob' is not allowed"):
            patcher.open_video_reader("train", VIDEO, 8, 8, 1)
        # bob may read the shared export of the same files
        frames, _ = read(patcher, [0], export="shared")
        assert frames.shape == (1, 64, 64, 3)


def test_failure_table_on_read(agent, export_root):
    with make_patcher(agent.url, export_root) as patcher:
        reader = patcher.open_video_reader("train", VIDEO, 16, 16, 1)
        np.testing.assert_array_equal(reader.read_frames_numpy([-1]), reader.read_frames_numpy([71]))
        with pytest.raises(errors.FluxonFsFrameIndexError,
                           match="-73 is out of range: the video has 72 frames"):
            reader.read_frames_numpy([-73])
        with pytest.raises(IndexError, match=f"train:{VIDEO}: frame index 500 is out of range"):
            reader.read_frames_numpy([500])
        assert reader.read_frames_numpy([3]).shape == (1, 16, 16, 3)  # still usable
        reader.close()
        reader.close()
        with pytest.raises(errors.FluxonFsClosedError, match="closed"):
            reader.read_frames_numpy([0])
        for relpath, cls, message in [
            ("bucket/videos/garbage.mp4", errors.FluxonFsDecodeError, "not a recognised"),
            ("bucket/videos/audio_only.m4a", errors.FluxonFsNoVideoStreamError, "no video stream"),
        ]:
            with patcher.open_video_reader("train", relpath, 16, 16, 1) as bad:
                with pytest.raises(cls, match=f"train:{relpath}: {message}"):
                    bad.read_frames_numpy([0])


def test_short_read_from_the_remote_fails_that_read(agent, export_root, monkeypatch):
    """The agent cannot be made to send short bodies, so the fault is injected below it."""
    real_get = AgentRoute._get

    def short_get(self, path, params, token, what):
        data = real_get(self, path, params, token, what)
        return data[:-10] if path == "/v1/read" else data

    # Small pieces, an early frame: its bytes were not fetched when the reader opened
    # (the open read the first piece and the file's end).
    with make_patcher(agent.url, export_root, piece_size=4096) as patcher:
        reader = patcher.open_video_reader("train", VIDEO, 16, 16, 1)
        monkeypatch.setattr(AgentRoute, "_get", short_get)
        with pytest.raises(errors.FluxonFsShortReadError, match="returned .* of .* bytes"):
            reader.read_frames_numpy([10])
        monkeypatch.undo()
        assert reader.read_frames_numpy([10]).shape == (1, 16, 16, 3)  # the next read retries
        reader.close()


# ---- identity and paths ----

def test_identity_checked_even_when_pieces_are_in_redis(agent, export_root, redis_url):
    with make_patcher(agent.url, export_root, redis_url) as alice:
        read(alice, [0, 71])
        alice.client.backfill.wait_idle()
        version = alice.file_version("train", VIDEO)
    strangers = [RequestIdentity("bob", IDENTITIES["bob"]), RequestIdentity("mallory", "forged")]
    for stranger in strangers:
        with make_patcher(agent.url, export_root, redis_url, identity=stranger) as patcher:
            with pytest.raises(errors.FluxonFsPermissionError):
                patcher.open_video_reader("train", VIDEO, 8, 8, 1)
            ref = FileRef("train", VIDEO, stranger)
            with pytest.raises(errors.FluxonFsPermissionError):
                patcher.client.files.stat(ref)
            # Even a direct range read with a known version is refused, though Redis holds it.
            with pytest.raises(errors.FluxonFsPermissionError):
                patcher.client.pieces.read_range(VersionedFile("train", VIDEO, stranger, version),
                                                 0, 100, ReadCounters())


def test_metadata_cache_is_keyed_by_identity(agent, export_root):
    with make_patcher(agent.url, export_root, metadata_cache_ttl_ms=60_000) as patcher:
        alice = patcher.identity
        patcher.file_version("train", VIDEO, identity=alice)
        with patcher.using_identity("bob"):
            assert patcher.identity.name == "bob"
            with pytest.raises(errors.FluxonFsPermissionError):
                patcher.open_video_reader("train", VIDEO, 8, 8, 1)
        assert patcher.identity == alice


def test_reader_keeps_the_identity_it_was_opened_with(agent, export_root):
    with make_patcher(agent.url, export_root) as patcher:
        with patcher.using_identity("bob"):
            reader = patcher.open_video_reader("shared", VIDEO, 8, 8, 1)
        assert reader.identity.name == "bob"
        patcher.identity = "alice"
        assert reader.read_frames_numpy([1]).shape == (1, 8, 8, 3)
        assert reader.identity.name == "bob"
        reader.close()


@pytest.mark.parametrize("relpath", ["../secret.mp4", "bucket/../../secret.mp4", "/etc/passwd",
                                     "bucket/videos/escape.mp4", "bucket/\x00.mp4"])
def test_paths_escaping_the_root_are_refused(agent, export_root, relpath):
    with make_patcher(agent.url, export_root) as patcher:
        with pytest.raises((errors.FluxonFsBadRequestError, errors.FluxonFsPermissionError)):
            patcher.open_video_reader("train", relpath, 8, 8, 1)
    # And by the agent itself, whatever a client sends.
    query = urlencode({"export": "train", "path": relpath})
    request = urllib.request.Request(f"{agent.url}/v1/stat?{query}",
                                     headers={"Authorization": f"Bearer {IDENTITIES['alice']}"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code in (400, 403)


def test_symlink_inside_the_root_is_served(media, agent, export_root):
    with make_patcher(agent.url, export_root) as patcher:
        frames, _ = read(patcher, [2], "bucket/videos/inside_link.mp4")
    np.testing.assert_array_equal(frames, media.reference("hevc.mp4", 64, 64)[[2]])


def test_agent_status_codes(agent):
    def status(path, token=IDENTITIES["alice"]):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(agent.url + path, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=5).status
        except urllib.error.HTTPError as exc:
            return exc.code

    q = urlencode({"export": "train", "path": VIDEO})
    assert status(f"/v1/stat?{q}") == 200
    assert status(f"/v1/stat?{q}", token=None) == 401
    assert status(f"/v1/stat?{q}", token=IDENTITIES["bob"]) == 403
    assert status("/v1/stat?" + urlencode({"export": "train", "path": "nope.mp4"})) == 404
    assert status("/v1/stat?" + urlencode({"export": "zzz", "path": VIDEO})) == 404
    assert status(f"/v1/read?{q}&offset=0&length=10&size=1&mtime_ns=1&ctime_ns=1&inode=1") == 409
    assert status(f"/v1/read?{q}&offset=x&length=10&size=1&mtime_ns=1&ctime_ns=1&inode=1") == 400


# ---- file versions ----

@pytest.mark.parametrize("change", ["append", "touch"])
def test_a_rewritten_file_fails_reads_and_never_mixes_versions(agent, export_root, redis_url, change):
    relpath = f"bucket/videos/rewritten_{change}.mp4"
    path = export_root / relpath
    shutil.copy(export_root / VIDEO, path)
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_ttl_ms=0,
                      piece_size=16 << 10) as patcher:
        reader = patcher.open_video_reader("train", relpath, 16, 16, 1)
        reader.read_frames_numpy([0])
        if change == "append":
            with open(path, "ab") as f:
                f.write(b"\0" * 100)
        else:
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        with pytest.raises(errors.FluxonFsFileChangedError, match="changed"):
            reader.read_frames_numpy([70])
        reader.close()
        # A new reader sees the new version and works again.
        with patcher.open_video_reader("train", relpath, 16, 16, 1) as fresh:
            assert fresh.version != reader.version
            assert fresh.read_frames_numpy([0]).shape == (1, 16, 16, 3)


def test_a_held_range_source_reads_its_version_and_fails_once_the_file_changed(
        agent, export_root, redis_url):
    """patcher.open_range_source: the bytes of the version it was opened at, and a
    check_current that fails once the file is rewritten (fluxon_video.lerobot reads
    its tables through it)."""
    relpath = "bucket/videos/rewritten_held.mp4"
    path = export_root / relpath
    shutil.copy(export_root / VIDEO, path)
    want = path.read_bytes()
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_ttl_ms=0,
                      piece_size=16 << 10) as patcher:
        source = patcher.open_range_source("train", relpath)
        assert source.size == len(want)
        assert source.read_range(1000, 5000) == want[1000:6000]
        source.check_current()
        with open(path, "ab") as f:
            f.write(b"\0" * 100)
        with pytest.raises(errors.FluxonFsFileChangedError, match="changed"):
            source.check_current()
        with pytest.raises(errors.FluxonFsNotFoundError):
            patcher.open_range_source("train", "bucket/videos/nope.mp4")


def test_agent_refuses_stale_versions_even_with_a_long_metadata_ttl(agent, export_root):
    relpath = "bucket/videos/rewritten_ttl.mp4"
    path = export_root / relpath
    shutil.copy(export_root / VIDEO, path)
    with make_patcher(agent.url, export_root, metadata_cache_ttl_ms=600_000,
                      piece_size=4096) as patcher:
        reader = patcher.open_video_reader("train", relpath, 16, 16, 1)
        with open(path, "ab") as f:
            f.write(b"\0")
        with pytest.raises(errors.FluxonFsFileChangedError):
            reader.read_frames_numpy([10])  # pages not fetched at open (its head and end were)
        reader.close()


# ---- Redis and agent failures ----

def test_reads_survive_redis_going_away_and_use_it_again_when_back(tmp_path, agent, export_root):
    server = RedisServer(tmp_path).start()
    try:
        with make_patcher(agent.url, export_root, server.url,
                          client={"redis_retry_after_s": 0.3, "redis_timeout_s": 0.2}) as patcher:
            frames, _ = read(patcher, [5, 40])
            server.stop()
            t0 = time.monotonic()
            during, stats = read(patcher, [5, 40])
            assert time.monotonic() - t0 < 10
            np.testing.assert_array_equal(during, frames)
            assert stats.kv_errors >= 1 and stats.remote_bytes > 0
            server.start()
            time.sleep(0.4)  # let the circuit's retry time pass
            read(patcher, [5, 40])  # probe succeeds, pieces get stored again
            patcher.client.backfill.wait_idle()
            _, after = read(patcher, [5, 40])
            assert after.kv_hits >= 1 and after.remote_bytes == 0 and after.kv_errors == 0
    finally:
        server.stop()


def test_corrupt_and_truncated_pieces_are_detected_and_repaired(media, agent, export_root,
                                                                redis_url, redis_server):
    piece = 16 << 10
    with make_patcher(agent.url, export_root, redis_url, piece_size=piece) as patcher:
        read(patcher, [0, 71])
        patcher.client.backfill.wait_idle()
        version = patcher.file_version("train", VIDEO)
    r = redis_server.client()
    keys = [piece_key("fluxonfs", "train", VIDEO, version, piece, i)
            for i in range(-(-version.size // piece))]
    good = {key: r.hget(key, "bytes") for key in keys if r.exists(key)}
    assert len(good) >= 2
    # Damage every piece the first read stored: one way or the other, alternately.
    for n, (key, data) in enumerate(good.items()):
        if n % 2:
            r.hset(key, mapping={"bytes": data[:100], "len": "100"})  # truncated, self-consistent
        else:
            r.hset(key, "bytes", bytes([data[0] ^ 0xFF]) + data[1:])  # bit flip, same length
    with make_patcher(agent.url, export_root, redis_url, piece_size=piece) as patcher:
        frames, stats = read(patcher, [0, 71])
        patcher.client.backfill.wait_idle()
    np.testing.assert_array_equal(frames, media.reference("h264_faststart.mp4", 64, 64)[[0, 71]])
    # Every piece the second read found was damaged: each was detected, dropped,
    # read from the agent and stored again intact.
    assert stats.kv_hits == 0 and stats.kv_corrupt == stats.kv_misses >= 2
    file = (export_root / VIDEO).read_bytes()
    with make_patcher(agent.url, export_root, redis_url, piece_size=piece) as checker:
        seal = checker.client.seal  # opens entries with the trainers' key

        def intact(key: str) -> bool:
            index = int(key.rsplit(":", 1)[1])
            entry = {k.decode(): v for k, v in r.hgetall(key).items()}
            return (seal.open("train", key, entry, "bytes").data
                    == file[index * piece:(index + 1) * piece])

        assert sum(map(intact, good)) == stats.kv_corrupt


def test_agent_stopped_gives_a_clear_error_within_the_timeout(agent_config, export_root):
    process = AgentProcess(agent_config).start()
    try:
        # The error is the point: a short retry window (the default, 30 s, would
        # wait out a restart; tests/test_agent_outage.py).
        with make_patcher(process.url, export_root, piece_size=4096,
                          client={"agent_timeout_s": 1.0, "agent_connect_timeout_s": 0.5,
                                  "agent_retry_window_s": 1.0}) as patcher:
            reader = patcher.open_video_reader("train", VIDEO, 16, 16, 1)
            process.stop()
            t0 = time.monotonic()
            with pytest.raises(errors.FluxonFsIOError, match=f"train:{VIDEO}.*unreachable"):
                reader.read_frames_numpy([10])  # pages not fetched at open (its head and end were)
            assert time.monotonic() - t0 < 5
            reader.close()
    finally:
        process.stop()


def test_hiredis_parser_is_in_use():
    assert redis_lib.utils.HIREDIS_AVAILABLE
