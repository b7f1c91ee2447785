"""The FluxonFS client's parts: config, key encoding, single-flight, backfill, stores."""

from __future__ import annotations

import threading
import time

import pytest

from fluxon_video import errors
from fluxon_video.fs.client import FluxonFsClient
from fluxon_video.fs.concurrency import Backfiller, SingleFlight
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import FileRef
from fluxon_video.fs.config import (
    ClientSettings,
    FluxonFsConfig,
    FluxonFsExport,
    MissPolicy,
    RequestIdentity,
    load_config,
)
from fluxon_video.fs.kv import EmbeddedPieceStore, piece_key
from fluxon_video.fs.kv_seal import EntrySealer, Protection, Verdict
from fluxon_video.fs.routes import InProcessRoute
from fluxon_video.fs.origin import FileStat
from tests.helpers import IDENTITIES, KV_KEY, agent_config_text, run_in_threads

V = FileStat(100, 7)


# ---- configuration ----

def test_toml_config_round_trip(tmp_path, export_root):
    path = tmp_path / "c.toml"
    path.write_text('[client]\nredis_url = "redis://127.0.0.1:1/0"\nagent_timeout_s = 3\n\n'
                    + agent_config_text(export_root)
                    + 'kv_miss_policy = "StageToKvThenRead"\npiece_size = 65536\n')
    config = load_config(path)
    assert config.client.redis_url == "redis://127.0.0.1:1/0"
    assert config.client.agent_timeout_s == 3
    assert config.export("train").allow == ("alice",)
    shared = config.export("shared")
    assert shared.kv_miss_policy is MissPolicy.StageToKvThenRead and shared.piece_size == 65536
    assert config.identity("bob") == RequestIdentity("bob", IDENTITIES["bob"])
    with pytest.raises(errors.FluxonFsConfigError, match=r"'carol' .*\[identities\]: alice, bob"):
        config.identity("carol")


@pytest.mark.parametrize("text,message", [
    ('[client]\nredis_urll = "x"\n', r"client: unknown key\(s\) redis_urll"),
    ('colour = 1\n', r"top level: unknown key\(s\) colour"),
    ('[[exports]]\nname = "a"\nroot = "/r"\npiece_sise = 4096\n', r"exports\[0\]: unknown key\(s\) piece_sise"),
    ('[[exports]]\nname = "a"\nroot = "/r"\npiece_size = 10\n', "piece_size must be an int between"),
    ('[[exports]]\nname = "a"\nroot = "/r"\nkv_miss_policy = "Sometimes"\n', "kv_miss_policy must be one of"),
    ('[[exports]]\nname = "a"\nroot = "/r"\nagent_url = "ftp://x"\n', "agent_url must be an http"),
    ('[[exports]]\nname = "a"\n', r"exports\[0\]: missing required key\(s\) root"),
    ('[[exports]]\nname = "a"\nroot = "/r"\nallow = "trainer"\n',
     r'allow must be a list of identity names, got \'trainer\' \(write allow = \["trainer"\]\)'),
    ('[[exports]]\nname = "a"\nroot = "s3://b/p"\nstore = { region = 5 }\n',
     "store must be a table of option names to strings or booleans"),
    ('[[exports]]\nname = "a"\nroot = "/r"\nstore = { region = "x" }\n',
     "store options need an object-store root"),
    ('[client]\nredis_url = "http://x"\n', "redis_url must be a redis://"),
    ('[client]\nagent_timeout_s = 0\n', "agent_timeout_s must be a positive number"),
    ('[[exports]]\nname = "a"\nroot = "/r"\n[[exports]]\nname = "a"\nroot = "/s"\n', "defined twice"),
    ("[client\n", "not valid TOML"),
])
def test_config_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(errors.FluxonFsConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_a_config_path_that_is_no_toml_text_names_the_file(tmp_path):
    """A video or a directory given as --config: one line naming it, no traceback."""
    binary = tmp_path / "clip.mp4"
    binary.write_bytes(b"\x00\x00\x00\x18ftypmp42\xaf\xff")
    with pytest.raises(errors.FluxonFsConfigError, match="clip.mp4: not a TOML file"):
        load_config(binary)
    with pytest.raises(errors.FluxonFsConfigError, match=f"{tmp_path}: cannot read the config"):
        load_config(tmp_path)


def test_config_from_python_objects_is_validated():
    with pytest.raises(errors.FluxonFsConfigError, match="metadata_cache_ttl_ms"):
        FluxonFsExport("a", "/r", metadata_cache_ttl_ms=-1)
    with pytest.raises(errors.FluxonFsConfigError, match="share one token"):
        FluxonFsConfig.build([], {"a": "t", "b": "t"})
    with pytest.raises(errors.FluxonFsConfigError, match="reader_cache_bytes"):
        ClientSettings(reader_cache_bytes=0)
    with pytest.raises(errors.FluxonFsConfigError):
        RequestIdentity("x", "")
    assert "secret" not in repr(RequestIdentity("x", "secret"))


# ---- KV entries ----

def test_piece_keys_never_collide():
    tuples = [("a:b", "c"), ("a", "b:c"), ("a", "b:c:1"), ("a:1", "b")]
    keys = {piece_key("p", e, r, V, 4096, 1) for e, r in tuples}
    assert len(keys) == len(tuples)
    assert piece_key("p", "e", "r", V, 4096, 1) != piece_key("p", "e", "r", V, 4096, 11)
    assert piece_key("p", "e", "r", V, 4096, 1) != piece_key("p", "e", "r", FileStat(100, 8), 4096, 1)
    assert piece_key("p", "e", "r", V, 4096, 1) != piece_key("p", "e", "r", V, 8192, 1)


def test_an_object_version_keys_by_its_etag_and_a_file_version_as_documented():
    # docs/kv-format.md's example: a POSIX version keys as its four integers.
    assert piece_key("fluxonfs", "train", "a.mp4", FileStat(5, 7, 9, 11), 4096, 3) == (
        "fluxonfs:piece:5:train:5:a.mp4:5:7:9:11:4096:3")
    a, b = FileStat(100, 7, etag='"abc"'), FileStat(100, 7, etag='"abd"')
    assert len({V.key(), a.key(), b.key(), FileStat(100, 7, etag='"ab').key()}) == 4
    assert piece_key("p", "e", "r", a, 4096, 1) != piece_key("p", "e", "r", b, 4096, 1)
    for version in (V, a, FileStat(1, 2, 3, 4, etag="e#v1")):
        assert FileStat.from_fields(version.as_fields()) == version
    assert "etag" not in V.as_fields()  # the agent protocol of a POSIX export is unchanged
    assert "etag" in a.describe_change(b)


SECRET_A, SECRET_B = b"kv-secret-a-0123456789abcdefXYZ", b"kv-secret-b-0123456789abcdefXYZ"


@pytest.mark.parametrize("protection", list(Protection))
def test_piece_entries_are_sealed(protection):
    seal = EntrySealer([SECRET_A], protection)
    fields = seal.seal("e", "k", b"hello world", "bytes")
    assert (fields["bytes"] == b"hello world") is (protection is Protection.mac)

    def opened(fields, key="k", export="e", expected_len=11, sealer=seal):
        return sealer.open(export, key, fields, "bytes", expected_len=expected_len)

    assert opened(fields).data == b"hello world"
    assert opened(fields, expected_len=12).verdict is Verdict.CORRUPT  # not the file's length
    flipped = bytes([fields["bytes"][0] ^ 1]) + fields["bytes"][1:]
    assert opened({**fields, "bytes": flipped}).verdict is Verdict.CORRUPT
    # A valid entry under another key, or of another export, is caught like corruption.
    assert opened(fields, key="k2").verdict is Verdict.CORRUPT
    assert opened(fields, export="f").verdict is Verdict.CORRUPT
    assert opened(None).verdict is Verdict.ABSENT
    # The old unsealed format (a CRC anyone can recompute) is a miss, not an error.
    old = {"bytes": b"hello world", "len": b"11", "crc32": b"1"}
    assert opened(old).verdict is Verdict.FOREIGN
    # Sealed with a secret this process does not hold: a miss, and never served.
    assert opened(fields, sealer=EntrySealer([SECRET_B], protection)).verdict is Verdict.FOREIGN
    # Rotation: a keyring with the new secret first still opens the old one's entries,
    # and seals with the new one, which the old keyring cannot open.
    rotated = EntrySealer([SECRET_B, SECRET_A], protection)
    assert opened(fields, sealer=rotated).data == b"hello world"
    assert opened(rotated.seal("e", "k", b"hello world", "bytes")).verdict is Verdict.FOREIGN


def test_embedded_store_is_bounded():
    store = EmbeddedPieceStore(max_bytes=10_000)
    for i in range(10):
        store.put(f"k{i}", {"bytes": bytes(3000)})
    kept = [i for i in range(10) if store.get_many([f"k{i}"])[0]]
    assert kept == [7, 8, 9]
    store.put("huge", {"bytes": bytes(20_000)})  # larger than the store: skipped
    assert store.get_many(["huge"])[0] is None


# ---- single-flight and backfill ----

def test_single_flight_shares_one_call():
    calls = []
    flights = SingleFlight()
    gate = threading.Event()

    def slow():
        calls.append(1)
        gate.wait(5)
        return b"data"

    results = []
    threads = [threading.Thread(target=lambda: results.append(flights.do("k", slow)))
               for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert sorted(ran for _, ran in results) == [False] * 7 + [True]
    assert all(data == b"data" for data, _ in results)


def test_single_flight_shares_failures_and_forgets_them():
    flights = SingleFlight()
    with pytest.raises(KeyError):
        flights.do("k", lambda: {}["x"])
    assert flights.do("k", lambda: 5) == (5, True)


def test_backfill_is_bounded_deduplicated_and_never_blocks():
    backfill = Backfiller(workers=1, queue_size=1)
    gate = threading.Event()
    try:
        assert backfill.submit("a", gate.wait) is True  # running
        time.sleep(0.1)
        assert backfill.submit("a", gate.wait) is None  # same piece: deduplicated
        assert backfill.submit("b", lambda: None) is True  # queued
        t0 = time.monotonic()
        assert backfill.submit("c", lambda: None) is False  # full: dropped, at once
        assert time.monotonic() - t0 < 0.1
        gate.set()
        assert backfill.wait_idle()
        assert backfill.done == 2
    finally:
        gate.set()
        backfill.close()


def test_concurrent_misses_for_one_piece_are_fetched_once(export_root, monkeypatch):
    """A slow route (fault injected) makes eight readers miss the same piece at once."""
    export = FluxonFsExport("train", str(export_root), allow=["alice"],
                            kv_miss_policy=MissPolicy.StageToKvThenRead, piece_size=65536)
    config = FluxonFsConfig.build([export], {"alice": "token-alice"})
    client = FluxonFsClient(config)
    alice = config.identity("alice")
    relpath = "bucket/videos/hevc.mp4"
    file = client.files.stat(FileRef("train", relpath, alice))
    real = InProcessRoute.read_chunk

    def slow_read(self, *args):
        time.sleep(0.2)
        return real(self, *args)

    monkeypatch.setattr(InProcessRoute, "read_chunk", slow_read)
    counters = ReadCounters()
    out = []
    assert run_in_threads(lambda _: out.append(client.pieces.read_range(
        file, 1000, 5000, counters)), 8) == []
    client.close()
    expected = (export_root / relpath).read_bytes()[1000:6000]
    assert out == [expected] * 8
    assert counters.remote_reads == 1 and counters.remote_bytes == 65536


def _gated_kv_writes(monkeypatch) -> threading.Event:
    """KV writes that wait until the returned event is set (a slow KV, injected)."""
    gate = threading.Event()
    real = EmbeddedPieceStore.put

    def slow_put(self, *args, **kwargs):
        gate.wait(30)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(EmbeddedPieceStore, "put", slow_put)
    return gate


def test_pieces_on_their_way_into_the_kv_are_read_from_this_process(export_root, monkeypatch):
    """A second read of a piece whose backfill has not landed (a second reader of
    the file, a scan) takes it from this process, not from the route again:
    when the fetch is over, and while it is still in flight. A fetch that
    fails leaves nothing behind: the next read fetches for itself."""
    ps = 8 << 10  # the file: 9 pieces
    export = FluxonFsExport("train", str(export_root), allow=["alice"], piece_size=ps)
    config = FluxonFsConfig.build([export], {"alice": "token-alice"})
    client = FluxonFsClient(config)
    relpath = "bucket/videos/hevc.mp4"
    data = (export_root / relpath).read_bytes()
    file = client.files.stat(FileRef("train", relpath, config.identity("alice")))
    gate = _gated_kv_writes(monkeypatch)
    real, fail_next = InProcessRoute.read_chunk, []

    def slow_read(self, *args):
        time.sleep(0.3)
        if fail_next:
            fail_next.pop()
            raise errors.FluxonFsIOError("the route failed (injected)")
        return real(self, *args)

    monkeypatch.setattr(InProcessRoute, "read_chunk", slow_read)
    try:
        first, later = ReadCounters(), ReadCounters()
        assert client.pieces.read_range(file, 0, 2 * ps, first) == data[:2 * ps]
        # stored in the background, not yet in the KV: read from this process
        assert client.pieces.read_range(file, ps + 10, 100, later) == data[ps + 10:ps + 110]
        assert (first.remote_reads, later.remote_reads, later.kv_hits) == (1, 0, 0)
        # a fetch in flight: a read of another range inside it waits for it
        during = ReadCounters()
        fetch = threading.Thread(target=client.pieces.read_range,
                                 args=(file, 2 * ps, 2 * ps, ReadCounters()))
        fetch.start()
        time.sleep(0.1)
        assert client.pieces.read_range(file, 3 * ps + 5, 50, during) == data[3 * ps + 5:
                                                                            3 * ps + 55]
        fetch.join()
        assert during.remote_reads == 0
        # a failed fetch: the reader that waited for it fetches the piece itself
        fail_next.append(True)
        after = ReadCounters()
        failed = []

        def failing_fetch() -> None:
            try:
                client.pieces.read_range(file, 4 * ps, ps, ReadCounters())
            except errors.FluxonFsIOError as exc:
                failed.append(exc)

        fetch = threading.Thread(target=failing_fetch)
        fetch.start()
        time.sleep(0.1)
        assert client.pieces.read_range(file, 4 * ps, 10, after) == data[4 * ps:4 * ps + 10]
        fetch.join()
        assert len(failed) == 1 and after.remote_reads == 1
        gate.set()
        assert client.backfill.wait_idle()
        assert client._checkpid().pending._held == {}  # nothing held once stored
        stored = ReadCounters()
        assert client.pieces.read_range(file, 0, 4 * ps, stored) == data[:4 * ps]
        assert stored.kv_hits == 4 and stored.remote_reads == 0
    finally:
        gate.set()
        client.close()


def test_an_index_blob_being_written_is_read_from_this_process(export_root, monkeypatch):
    """A blob (a frame index) is written to the KV in the background; until the
    write is over, this process reads it from what it holds, so a second
    reader of the file does not scan it again."""
    export = FluxonFsExport("train", str(export_root), allow=["alice"])
    config = FluxonFsConfig.build([export], {"alice": "token-alice"})
    client = FluxonFsClient(config)
    file = client.files.stat(FileRef("train", "bucket/videos/hevc.mp4",
                                     config.identity("alice")))
    gate = _gated_kv_writes(monkeypatch)
    try:
        client.blobs.store(file, "index", b"the index")
        counters = ReadCounters()
        assert client.blobs.load(file, "index", counters) == b"the index"
        assert counters.kv_round_trips == 0
        assert client._checkpid().kv.get(client.blobs.key(file.file, "index")) == (True, None)
        gate.set()
        client._checkpid().alongside.submit(lambda: None).result()
        deadline = time.monotonic() + 10
        while client._checkpid().pending._held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client._checkpid().pending._held == {}
        assert client.blobs.load(file, "index", counters) == b"the index"  # from the KV now
        assert counters.kv_round_trips == 1
    finally:
        gate.set()
        client.close()


def test_a_node_keeps_waiting_for_pieces_whose_holders_are_still_fetching(tmp_path, redis_url):
    """Trainer nodes sharing Redis claim the pieces they fetch. Here another node
    holds the claims on pieces 3 and 4: it gives piece 3 up (its claim goes
    without an entry) and stores piece 4 later. Our node reads piece 3 itself
    and takes piece 4 from the KV: one origin read of one piece, not a second
    fetch of a piece its holder is still fetching."""
    from fluxon_video.fs.piece_layout import key_of

    ps = 16 << 10
    (tmp_path / "v").mkdir()
    data = bytes(range(256)) * (5 * ps // 256)
    (tmp_path / "v" / "f.bin").write_bytes(data)
    export = FluxonFsExport("train", str(tmp_path), allow=["alice"], piece_size=ps,
                            single_flight_across_nodes=True)
    config = FluxonFsConfig.build([export], {"alice": "token-alice"},
                                  client=ClientSettings(redis_url=redis_url, kv_keys=[KV_KEY]))
    node, other = FluxonFsClient(config), FluxonFsClient(config)
    file = node.files.stat(FileRef("train", "v/f.bin", config.identity("alice")))
    keys = [key_of(export, file, index) for index in (3, 4)]
    assert other.kv.claim_many(keys, "other-node", 10_000) == [True, True]

    def holder() -> None:
        time.sleep(0.15)
        other.kv.release(keys[0], "other-node")  # gave piece 3 up
        time.sleep(0.4)
        other._checkpid().put_verified(export, keys[1], data[4 * ps:5 * ps])
        other.kv.release(keys[1], "other-node")

    thread = threading.Thread(target=holder)
    thread.start()
    counters = ReadCounters()
    try:
        got = node.pieces.read_range(file, 3 * ps, 2 * ps, counters)
    finally:
        thread.join()
        node.close()
        other.close()
    assert got == data[3 * ps:5 * ps]
    assert (counters.remote_reads, counters.remote_bytes) == (1, ps)
