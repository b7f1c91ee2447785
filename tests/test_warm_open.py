"""Warm opens: the frame index carries the container's header bytes, and with
metadata_cache_shared (the default) the stat rides in the same KV round trip as
the index. Tests of the per-process stat say metadata_cache_shared=False.

Real agent process, real redis-server; frames checked against the ffmpeg CLI.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import numpy as np
import pytest

from fluxon_video import errors
from fluxon_video.fs.pieces import PieceReads
from tests.helpers import make_patcher

pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(120)

SIZE = (48, 64)
PIECE = 4096  # small pieces: container bytes and packets land in different pieces


def read(patcher, relpath, indices, export="shared"):
    with patcher.open_video_reader(export, relpath, *SIZE) as reader:
        frames = reader.read_frames_numpy(indices)
        return frames, reader.last_stats, reader._decoder.index


def record_fetches(monkeypatch) -> list[tuple[int, int]]:
    """Every (offset, length) the readers' byte sources ask the client for."""
    fetched: list[tuple[int, int]] = []
    real = PieceReads.read_range

    def spy(self, file, offset, length, counters, **kw):
        fetched.append((offset, length))
        return real(self, file, offset, length, counters, **kw)

    monkeypatch.setattr(PieceReads, "read_range", spy)
    return fetched


@pytest.mark.parametrize("name", ["h264_faststart.mp4", "h264_moov_end.mp4", "hevc.mp4",
                                  "vp9.webm"])
def test_a_warm_open_fetches_no_container_byte(media, agent, export_root, redis_url,
                                               monkeypatch, name):
    relpath = f"bucket/videos/{name}"
    data = (export_root / relpath).read_bytes()
    ref = media.reference(name, *SIZE)
    own_stats = dict(piece_size=PIECE, metadata_cache_shared=False)  # the agent's stat each time
    with make_patcher(agent.url, export_root, redis_url, **own_stats) as cold:
        # The same frames as the warm read: it then needs no piece the cold
        # read did not store.
        _, cold_stats, _ = read(cold, relpath, [40, 41])
        assert cold_stats.index_source == "scan"
        assert cold.client.backfill.wait_idle()
    fetched = record_fetches(monkeypatch)
    with make_patcher(agent.url, export_root, redis_url, **own_stats) as warm:
        frames, stats, index = read(warm, relpath, [40, 41])
    np.testing.assert_array_equal(frames, ref[[40, 41]])
    assert stats.index_source == "kv" and stats.path == "indexed" and not stats.fallback
    # The index brought the header bytes the scan had read (not, say, the audio
    # after the last video packet): they are the file's own bytes...
    extents = index.open_extents
    assert extents
    for off, n in index.container_ranges(len(data)):
        covered = any(x <= off and off + n <= x + len(chunk) for x, chunk in extents)
        assert covered or off > 0  # the head always; a tail the scan never read may be left out
    assert all(x >= index.pkt_pos.max() for x, _ in extents[1:])  # at most the last packet more
    for off, chunk in index.open_extents:
        assert chunk == data[off:off + len(chunk)]
    # ...so every piece the warm read fetched holds packet bytes.
    starts, ends = index.pkt_pos, index.pkt_pos + index.pkt_size
    for off, length in fetched:
        assert ((starts < off + length) & (ends > off)).any(), (off, length)
    assert stats.remote_reads == 0 and stats.stat_requests == 1
    # The stat with the index alongside; then waits for fetch jobs (the
    # cluster's pieces go out as a few jobs, not one wait per piece).
    assert stats.open_round_trips == 1
    assert stats.first_frame_waits <= 3 < stats.kv_hits


def test_shared_stats_make_a_warm_open_one_kv_round_trip(media, agent, export_root, redis_url):
    relpath = "bucket/videos/hevc.mp4"
    ref = media.reference("hevc.mp4", *SIZE)
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_shared=True) as node_a:
        read(node_a, relpath, [3])
        assert node_a.client.backfill.wait_idle()
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_shared=True) as node_b:
        meta, meta_stats = node_b.video_metadata_with_stats("shared", relpath)
    assert meta.num_frames == ref.shape[0]
    # The stat another process had authorised and the index: one pipeline, no agent.
    assert meta_stats.stat_requests == 0 and meta_stats.kv_round_trips == 1
    assert meta_stats.index_source == "kv"
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_shared=True) as node_c:
        frames, stats, _ = read(node_c, relpath, [3, 50])
    np.testing.assert_array_equal(frames, ref[[3, 50]])
    assert stats.stat_requests == 0 and stats.remote_reads == 0
    # Off: every new process asks the agent.
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_shared=False) as node_d:
        _, default_stats = node_d.video_metadata_with_stats("shared", relpath)
    assert default_stats.stat_requests == 1


def test_a_shared_stat_serves_only_the_identity_it_was_authorised_for(agent, export_root,
                                                                       redis_url):
    relpath = "bucket/videos/h264_faststart.mp4"
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_shared=True) as alice:
        alice.video_metadata("train", relpath)
        alice.video_metadata("shared", relpath)
    with make_patcher(agent.url, export_root, redis_url, identity="bob",
                      metadata_cache_shared=True) as bob:
        # bob may not read "train": alice's cached stat does not let him in.
        with pytest.raises(errors.FluxonFsPermissionError):
            bob.video_metadata("train", relpath)
        _, stats = bob.video_metadata_with_stats("shared", relpath)
    assert stats.stat_requests == 1  # his own stat, from the agent


def test_a_shared_stat_expires_with_the_metadata_ttl(media, agent, export_root, redis_url):
    relpath = "bucket/videos/warm_open_rewritten.mp4"
    target = export_root / relpath
    shutil.copy(media.path("h264_faststart.mp4"), target)
    options = dict(metadata_cache_shared=True, metadata_cache_ttl_ms=400)
    try:
        with make_patcher(agent.url, export_root, redis_url, **options) as node_a:
            read(node_a, relpath, [5])
        shutil.copy(media.path("hevc.mp4"), target)
        time.sleep(0.5)
        with make_patcher(agent.url, export_root, redis_url, **options) as node_b:
            frames, stats, _ = read(node_b, relpath, [5, 60])
        np.testing.assert_array_equal(frames, media.reference("hevc.mp4", *SIZE)[[5, 60]])
        assert stats.stat_requests == 1  # the shared stat had expired
        # The index stored for the old version is another version's: a miss, not damage.
        assert stats.index_source == "scan" and stats.kv_corrupt == 0
    finally:
        target.unlink()


# ---- cold opens ----

@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("moov", ["first", "at the end"])
def test_a_cold_mp4_open_takes_its_head_with_the_stat(media, agent, export_root, redis_url,
                                                      moov, shared):
    """The stat brings the first piece, whose boxes say where the moov is: in
    it (nothing more to read before the scan), or after the media (exactly the
    file's end from there, one more round trip). Without a shared stat the head
    is asked beside the plain stat once the KV has said it holds no index; with
    one, the stat that follows the KV's answer brings it."""
    relpath = "bucket/videos/warm_open_long.mp4"
    target = export_root / relpath
    flags = ["-movflags", "+faststart"] if moov == "first" else []
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(media.path("long_640x360.mp4")),
                    "-c", "copy", *flags, str(target)], check=True)
    try:
        piece = 262080
        data = target.read_bytes()
        size = len(data)
        assert size > 3 * piece
        # The moov box starts 4 bytes before its type; where the file has it.
        at = data.find(b"moov") - 4 if moov == "first" else data.rfind(b"moov") - 4
        assert (at < piece) == (moov == "first")
        if moov == "first":
            tail = 0
        else:  # from the piece it starts in
            tail = size - (at - at % piece)
        with make_patcher(agent.url, export_root, redis_url, piece_size=piece,
                          metadata_cache_shared=shared) as cold:
            meta, stats = cold.video_metadata_with_stats("shared", relpath)
            assert cold.client.backfill.wait_idle()
        assert stats.index_source == "scan" and meta.num_frames == 12 * 24
        assert stats.remote_bytes == piece + tail
        assert stats.remote_reads == (tail > 0)
        # Shared: the KV's answer, then the stat with the head. Else the stat (the
        # index and the head beside it). Then the moov, if the head lacks it.
        assert stats.open_round_trips == int(shared) + 1 + (tail > 0)
        assert stats.stat_requests == (1 if shared else 2)
        # The index keeps what the open read, and the head went to the KV as its
        # piece: a warm read fetches nothing for frame 0, packets only for 200.
        with make_patcher(agent.url, export_root, redis_url, piece_size=piece,
                          metadata_cache_shared=False) as warm:
            frames, warm_stats, _ = read(warm, relpath, [0])
            assert warm_stats.remote_bytes == 0 and warm_stats.kv_hits >= 1
            frames2, warm_stats2, _ = read(warm, relpath, [200])
        expected = media.reference("long_640x360.mp4", *SIZE)
        np.testing.assert_array_equal(frames, expected[[0]])
        np.testing.assert_array_equal(frames2, expected[[200]])
        assert warm_stats.index_source == "kv" and warm_stats.open_round_trips == 1
    finally:
        target.unlink()


def test_a_head_that_does_not_say_where_the_moov_is_falls_back_to_the_probe(
        agent, export_root, redis_url, monkeypatch):
    """Bytes that are no MP4 boxes under an .mp4 name: the open probes the end as
    before, and the scan's error is the file's."""
    from fluxon_video.indexing import mp4_moov_range, tail_probe_bytes

    relpath = "bucket/videos/not_boxes.mp4"
    target = export_root / relpath
    size = 1 << 20
    target.write_bytes(bytes(range(256)) * (size // 256))  # no box
    fetched = record_fetches(monkeypatch)
    try:
        assert mp4_moov_range(target.read_bytes()[:262080], size) is None
        with make_patcher(agent.url, export_root, redis_url, metadata_cache_shared=False) as cold:
            with pytest.raises(errors.FluxonFsDecodeError, match="not_boxes.mp4"):
                with cold.open_video_reader("shared", relpath, *SIZE) as reader:
                    reader.read_frames_numpy([0])
    finally:
        target.unlink()
    # The head came with the stat (no read of offset 0); the probe read the end.
    assert all(offset > 0 for offset, _ in fetched)
    probe = tail_probe_bytes(size)
    assert any(offset <= size - probe and offset + length == size for offset, length in fetched)


def test_the_moov_walk_reads_boxes_not_bytes():
    """mp4_moov_range on hand-made box layouts (sizes in the box headers)."""
    from fluxon_video.indexing import mp4_moov_range

    def box(kind: bytes, body: int) -> bytes:
        return (8 + body).to_bytes(4, "big") + kind + bytes(body)

    moov_first = box(b"ftyp", 16) + box(b"moov", 100) + box(b"mdat", 1000)
    assert mp4_moov_range(moov_first, len(moov_first)) == (24, 108)
    # The head ends inside the mdat: the moov is the rest after it.
    head = box(b"ftyp", 16) + (8 + 5000).to_bytes(4, "big") + b"mdat" + bytes(100)
    assert mp4_moov_range(head, 24 + 5008 + 300) == (24 + 5008, 300)
    # A 64-bit mdat size.
    big = box(b"ftyp", 16) + (1).to_bytes(4, "big") + b"mdat" + (5016).to_bytes(8, "big")
    assert mp4_moov_range(big, 24 + 5016 + 300) == (24 + 5016, 300)
    # No moov after the last box: nothing to say.
    assert mp4_moov_range(moov_first[:24] + box(b"mdat", 1000), 24 + 1008) is None
    # A size that runs past the file, or a header smaller than itself: not boxes.
    assert mp4_moov_range((10 ** 6).to_bytes(4, "big") + b"ftyp", 100) is None
    assert mp4_moov_range((4).to_bytes(4, "big") + b"ftyp" + bytes(100), 108) is None


def test_a_cold_webm_is_fetched_in_parallel_batches_and_its_open_counted(media, agent,
                                                                         export_root, redis_url):
    relpath = "bucket/videos/vp9.webm"
    size = (export_root / relpath).stat().st_size
    assert size > 20 * PIECE
    with make_patcher(agent.url, export_root, redis_url, piece_size=PIECE) as cold:
        frames, stats, _ = read(cold, relpath, [10])
    np.testing.assert_array_equal(frames, media.reference("vp9.webm", *SIZE)[[10]])
    # The scan reads the whole file: asked for at once, it comes in jobs of
    # 16 pieces (a worker takes a run of queued pieces in one step, so the
    # other worker cannot split it), not a readahead window at a time.
    assert stats.remote_bytes == size
    assert stats.remote_reads == -(-size // (16 * PIECE))
    # The stat with the index read alongside, the scan's waits, the index's
    # write; the frame's packets were read by the scan already.
    assert stats.open_round_trips <= 2 + stats.remote_reads
    assert stats.first_frame_waits == 0
    with make_patcher(agent.url, export_root, redis_url, piece_size=PIECE) as warm:
        _, warm_stats, _ = read(warm, relpath, [10])
    assert warm_stats.open_round_trips == 1 and warm_stats.first_frame_waits <= 3


def test_by_default_a_cold_open_asks_the_kv_for_a_shared_stat_first(agent, export_root,
                                                                    redis_url):
    """The default's price: a cold open looks for a stat another process shared (with the
    index, one KV pipeline) before asking the agent, one more round trip; a new process
    then opens the same file with no agent request."""
    relpath = "bucket/videos/h264_moov_end.mp4"
    with make_patcher(agent.url, export_root, redis_url) as node_a:
        _, cold = node_a.video_metadata_with_stats("shared", relpath)
    assert cold.stat_requests == 1 and cold.index_source == "scan"
    with make_patcher(agent.url, export_root, redis_url) as node_b:
        _, warm = node_b.video_metadata_with_stats("shared", relpath)
    assert warm.stat_requests == 0 and warm.kv_round_trips == 1 and warm.index_source == "kv"
