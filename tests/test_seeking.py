"""The indexed path (keyframe seeks, clusters, persistent decoder) returns exactly
what the sequential reference returns, on every kind of test media."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from fluxon_video.frame_index import FrameIndex
from fluxon_video.sources import BytesRangeSource, LocalFileRangeSource
from tests.helpers import make_patcher, run_in_threads

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")
demux = pytest.importorskip("fluxon_video._demux")
decode_floor = pytest.importorskip("fluxon_video._floor").decode_floor
pytestmark = pytest.mark.timeout(120)

SEEK_CLIPS = ["h264_faststart.mp4", "h264_moov_end.mp4", "hevc.mp4", "vp9.webm", "av1.mkv",
              "mpeg4.avi", "mpeg4_nobf.avi", "mpeg4_gop3.avi", "odd_321x241.mp4", "fullrange.mp4",
              "h264_open_gop.mp4", "h264_bframes.mkv", "h264_editlist.mp4", "h264_340x194.mp4"]
H, W = 48, 64


class Opened:
    """A byte source, its frame index and a persistent decoder on one file."""

    def __init__(self, path, **source_options):
        self.src = LocalFileRangeSource(path)
        self.bytes = avio.ByteSource(self.src, self.src.size, **source_options)
        self.index = demux.scan_packets(self.bytes)
        self.decoder = decode.VideoDecoder(self.bytes, 2)
        self.decoder.index = self.index

    def read(self, indices):
        return self.decoder.decode(indices, H, W)

    def close(self):
        self.decoder.close()
        self.bytes.close()
        self.src.close()


@pytest.fixture
def opened(media):
    handles = []

    def open_(name, **options):
        handle = Opened(media.path(name), **options)
        handles.append(handle)
        return handle

    yield open_
    for handle in handles:
        handle.close()


def clip_plans(count: int, keyframes: list[int], seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    plans = []
    for _ in range(6):  # random clips, 16 frames stride 2 where they fit
        start = int(rng.integers(0, max(1, count - 30)))
        plans.append([i for i in range(start, start + 32, 2) if i < count])
    for k in keyframes[1:]:  # clips straddling each keyframe
        plans.append([i for i in (k - 3, k - 2, k - 1, k, k + 1, k + 2) if 0 <= i < count])
    plans.append([count - 1])  # the last frame alone
    plans.append([count - 3, count - 2, count - 1, 0])  # end and start in one call
    plans.append(sorted(rng.integers(0, count, 7).tolist()))  # scattered
    plans.append([5, 5, 3])  # duplicates, unsorted, and behind the decoder
    return plans


@pytest.mark.parametrize("name", SEEK_CLIPS)
def test_indexed_reads_equal_the_reference(media, opened, name):
    ref = media.reference(name, H, W)
    handle = opened(name)
    index = handle.index
    count = len(ref)
    assert index.trusted, index.reason
    assert index.frame_count == count
    keyframes = sorted(set(np.searchsorted(index.frame_dec, np.flatnonzero(index.pkt_key))))
    for plan in clip_plans(count, [int(k) for k in keyframes], seed=len(name)):
        frames, stats = handle.read(plan)
        np.testing.assert_array_equal(frames, ref[plan], err_msg=f"{name} {plan}")
        assert stats.path == "indexed", stats
        assert not stats.fallback, stats.fallback


@pytest.mark.parametrize("name", SEEK_CLIPS)
def test_two_threads_read_two_gop_sets_at_once_and_the_same_frames(media, name):
    """num_threads=2: a read whose frames start at different keyframes is split in
    two sets decoded at once by two decoders (the reader's, and a one-threaded
    second); every frame is still the CLI's, lone or in any batch."""
    import fluxon_video as fv

    ref = media.reference(name, H, W)
    with fv.open_video(media.path(name), H, W, num_threads=2) as reader:
        index = reader._decoder.index
        keyframes = sorted(set(np.searchsorted(index.frame_dec, np.flatnonzero(index.pkt_key))))
        plans = clip_plans(len(ref), [int(k) for k in keyframes], seed=len(name) + 1)
        for plan in plans:
            np.testing.assert_array_equal(reader.read_frames_numpy(plan), ref[plan],
                                          err_msg=f"{name} {plan}")
        if len(keyframes) > 2 and index.trusted:
            # the last frames of the first two GOPs: about as much decoding each
            pair = [int(keyframes[1]) - 1, int(keyframes[2]) - 1]
            splits = reader._split.reads
            np.testing.assert_array_equal(reader.read_frames_numpy(pair), ref[pair])
            assert reader._split.reads == splits + 1  # the split happened
            stats = reader.last_stats  # both decoders' work, counted once
            assert stats.frames_returned == 2 and stats.frames_decoded >= 2 and stats.path


def test_two_decoders_rows_go_to_their_places_in_one_array():
    """The split read's rows (left set, then right set) are put in request
    order in place: the same as numpy's scatter, for every permutation shape."""
    from fluxon_video.planning import place_rows

    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 40):
        rows = rng.integers(0, 255, size=(n, 2, 3, 3), dtype=np.uint8)
        positions = rng.permutation(n)
        want = np.empty_like(rows)
        want[positions] = rows
        np.testing.assert_array_equal(place_rows(rows.copy(), positions), want)


@pytest.mark.parametrize("name", ["mpeg4.avi", "mpeg4_nobf.avi", "mpeg4_gop3.avi"])
def test_mpeg4_avi_frames_alone_from_a_cold_decoder(media, opened, name):
    # Every frame on its own after a reset (a fresh decoder seeks to its
    # keyframe: open-GOP B-frames start one GOP earlier), then backwards in one
    # persistent decoder, across GOPs.
    ref = media.reference(name, H, W)
    handle = opened(name)
    for i in range(len(ref)):
        handle.decoder.reset()
        frames, stats = handle.read([i])
        np.testing.assert_array_equal(frames, ref[[i]], err_msg=f"{name} frame {i}")
        assert stats.path == "indexed" and not stats.fallback, stats
    for i in range(len(ref) - 1, -1, -7):
        frames, stats = handle.read([i, i, max(i - 30, 0)])
        np.testing.assert_array_equal(frames, ref[[i, i, max(i - 30, 0)]])
        assert stats.path == "indexed" and not stats.fallback, stats


@pytest.mark.parametrize("name, reason", [
    ("mpeg4_packed.avi", "packed B-frames (user data 'DivX503b1393p')"),
    ("h264.avi", "h264 in AVI: no pts give the order of reordered frames"),
])
def test_avi_streams_whose_packets_are_not_frames_in_order_stay_sequential(media, opened,
                                                                           name, reason):
    ref = media.reference(name, H, W)
    handle = opened(name)
    assert not handle.index.trusted and reason in handle.index.reason
    for plan in ([len(ref) - 1], [30, 31, 10], [5, 5, 3]):
        frames, stats = handle.read(plan)
        np.testing.assert_array_equal(frames, ref[plan], err_msg=f"{name} {plan}")
        assert stats.path == "sequential" and not stats.fallback, stats


@pytest.mark.parametrize("name", ["h264_open_gop.mp4", "hevc.mp4"])
def test_open_gop_leading_frames_start_from_the_previous_keyframe(media, opened, name):
    handle = opened(name)
    index = handle.index
    # Frames shown just before a keyframe but decoded after it need an earlier start.
    keys = np.flatnonzero(index.pkt_key)
    needs_previous = [i for i in range(index.frame_count)
                      if any(index.frame_dec[i] > d and index.pkt_pts[d] > index.frame_pts[i]
                             for d in keys)]
    assert needs_previous, "the clip has no open-GOP leading frames"
    for i in needs_previous:
        start = index.frame_key[i]
        assert index.pkt_pts[start] <= index.frame_pts[i] and start < index.frame_dec[i]
    ref = media.reference(name, H, W)
    frames, _ = handle.read(needs_previous)
    np.testing.assert_array_equal(frames, ref[needs_previous])
    for i in needs_previous:  # alone, each from a cold decoder
        handle.decoder.reset()
        np.testing.assert_array_equal(handle.read([i])[0], ref[[i]])


def test_edit_list_frames_follow_the_reference(media, opened):
    handle = opened("h264_editlist.mp4")
    assert handle.index.pkt_discard.any()
    assert handle.index.frame_count == len(media.reference("h264_editlist.mp4", H, W))


def test_clusters_follow_gop_structure(media, opened):
    handle = opened("long_640x360.mp4")  # GOP 24, 288 frames
    ref = media.reference("long_640x360.mp4", H, W)
    same_gop = [50, 54, 58, 62, 66]
    frames, stats = handle.read(same_gop)
    np.testing.assert_array_equal(frames, ref[same_gop])
    assert stats.decoder_seeks == 1
    assert stats.frames_decoded < 30  # from the keyframe at 48, not from frame 0
    three_gops = [10, 130, 250]
    handle.decoder.reset()  # forget the position
    frames, stats = handle.read(three_gops)
    np.testing.assert_array_equal(frames, ref[three_gops])
    assert stats.decoder_seeks == 3


@pytest.mark.parametrize("name", ["long_640x360.mp4", "h264_bframes.mkv", "vp9.webm",
                                  "mpeg4.avi", "mpeg4_gop3.avi"])
def test_a_seek_lands_on_the_named_keyframe_not_before(media, opened, name):
    handle = opened(name)
    index = handle.index
    ref = media.reference(name, H, W)
    for key in np.flatnonzero(index.pkt_key)[1:]:
        first = int(np.flatnonzero(index.frame_dec == key)[0])  # the keyframe's frame
        target = min(first + 2, index.frame_count - 1)
        handle.decoder.reset()
        frames, stats = handle.read([target])
        np.testing.assert_array_equal(frames, ref[[target]])
        assert stats.frames_decoded <= 3 + 4, (key, stats)  # 3 frames + reorder slack


def test_the_decoder_continues_forward_without_seeking(media, opened):
    handle = opened("long_640x360.mp4")
    ref = media.reference("long_640x360.mp4", H, W)
    _, first = handle.read([100, 102])
    assert first.decoder_seeks == 1
    frames, second = handle.read([104, 110, 118])  # same GOP, ahead: no seek
    np.testing.assert_array_equal(frames, ref[[104, 110, 118]])
    assert second.decoder_seeks == 0
    assert second.frames_decoded <= 20
    frames, third = handle.read([101])  # behind: must seek back
    np.testing.assert_array_equal(frames, ref[[101]])
    assert third.decoder_seeks == 1
    frames, fourth = handle.read([200])  # far ahead, past a keyframe: seek
    np.testing.assert_array_equal(frames, ref[[200]])
    assert fourth.decoder_seeks == 1


def test_a_failed_landing_check_falls_back_to_the_sequential_path(media, opened):
    handle = opened("long_640x360.mp4")
    ref = media.reference("long_640x360.mp4", H, W)
    index = handle.index
    # Point every keyframe's seek timestamp at the last keyframe: the demuxer
    # lands after the keyframe the plan names, which the check must catch.
    last_key_pts = index.pkt_pts[np.flatnonzero(index.pkt_key)[-1]]

    class LandsLate(FrameIndex):
        def plan(self, targets):
            clusters = super().plan(targets)
            clusters["seek_ts"] = np.full_like(clusters["seek_ts"], last_key_pts)
            return clusters

    handle.decoder.index = bad = LandsLate(index.format_name, index.codec_name, index.stream_index,
                                           index.pkt_pts, index.pkt_pos, index.pkt_size,
                                           index.pkt_key, index.pkt_discard)
    frames, stats = handle.read([30, 31, 100])
    np.testing.assert_array_equal(frames, ref[[30, 31, 100]])
    assert stats.path == "sequential"
    assert "landed after the keyframe" in stats.fallback
    assert not bad.trusted  # later reads go sequential straight away
    frames, stats = handle.read([5])
    np.testing.assert_array_equal(frames, ref[[5]])
    assert stats.path == "sequential" and not stats.fallback


def test_a_wrong_pts_in_the_index_falls_back(media, opened):
    handle = opened("hevc.mp4")
    index = handle.index
    pts = index.pkt_pts.copy()
    pts[30] += 1  # one frame the decoder will output under another pts
    handle.decoder.index = FrameIndex(index.format_name, index.codec_name, index.stream_index,
                                      pts, index.pkt_pos, index.pkt_size, index.pkt_key,
                                      index.pkt_discard)
    ref = media.reference("hevc.mp4", H, W)
    frames, stats = handle.read(list(range(24, 48)))
    np.testing.assert_array_equal(frames, ref[24:48])
    assert stats.fallback


def test_out_of_range_is_known_from_the_index(opened):
    handle = opened("long_640x360.mp4")
    t0 = time.perf_counter()
    with pytest.raises(IndexError, match="frame index 288 is out of range: the video has 288"):
        handle.read([3, 288])
    assert time.perf_counter() - t0 < 1.0
    assert handle.read([287])[0].shape == (1, H, W, 3)


def test_index_scan_of_mp4_reads_no_media_bytes(media):
    path = media.path("long_640x360.mp4")
    src = LocalFileRangeSource(path)
    with avio.ByteSource(src, src.size, page_size=8192, readahead_pages=0) as bs:
        index = demux.scan_packets(bs)
        fetched = bs.stats()["bytes_fetched"]
    assert index.trusted and index.frame_count == 288
    assert fetched < 0.1 * src.size, fetched


def test_index_round_trips_through_bytes(opened):
    index = opened("h264_open_gop.mp4").index
    again = FrameIndex.from_bytes(index.to_bytes())
    assert again is not None and again.trusted
    for field in ("pkt_pts", "pkt_dts", "pkt_pos", "pkt_size", "pkt_key", "pkt_discard",
                  "frame_pts", "frame_key"):
        np.testing.assert_array_equal(getattr(again, field), getattr(index, field))
    assert FrameIndex.from_bytes(b"garbage") is None


def test_prefetch_is_bounded_and_cancellable():
    calls = []

    class Slow(BytesRangeSource):
        def read_range(self, offset, length):
            calls.append(length // 4096)
            time.sleep(0.05)
            return super().read_range(offset, length)

    data = bytes(4096 * 512)
    with avio.ByteSource(Slow(data), len(data), page_size=4096, cache_bytes=256 * 4096,
                         readahead_pages=0, fetch_workers=1) as bs:
        queued = bs.prefetch(0, len(data))
        assert queued == 254  # bounded by the cache (256 pages) minus the reader's two
        time.sleep(0.12)
        cancelled = bs.cancel_prefetch()
        stats = bs.stats()
    # One fetch carries at most 16 queued neighbours; what no worker took is dropped.
    assert max(calls) <= 16
    assert cancelled >= 254 - 16 * len(calls) and stats["readahead_cancelled"] == cancelled
    assert cancelled > 254 // 2  # a 0.12 s wait lets a worker with 0.05 s calls take a few


# ---- through FluxonFS ----

def test_readers_share_the_index_through_the_kv(media, agent, export_root, redis_url):
    relpath = "bucket/videos/vp9.webm"
    ref = media.reference("vp9.webm", 32, 32)
    with make_patcher(agent.url, export_root, redis_url) as node_a:
        with node_a.open_video_reader("train", relpath, 32, 32, 1) as reader:
            frames = reader.read_frames_numpy([40, 44])
            assert reader.last_stats.index_source == "scan"
            assert reader.last_stats.path == "indexed"
    with make_patcher(agent.url, export_root, redis_url) as node_b:
        with node_b.open_video_reader("train", relpath, 32, 32, 1) as reader:
            again = reader.read_frames_numpy([40, 44])
            assert reader.last_stats.index_source == "kv"
            second = reader.read_frames_numpy([60])
            assert reader.last_stats.index_ms == 0
    np.testing.assert_array_equal(frames, ref[[40, 44]])
    np.testing.assert_array_equal(again, frames)
    np.testing.assert_array_equal(second, ref[[60]])


def test_cold_read_of_one_clip_fetches_little_of_the_file(media, agent, export_root, redis_url,
                                                          tmp_path):
    import shutil

    relpath = "bucket/videos/long_640x360.mp4"
    shutil.copy(media.path("long_640x360.mp4"), export_root / relpath)
    size = (export_root / relpath).stat().st_size
    with make_patcher(agent.url, export_root, redis_url, piece_size=16 << 10,
                      client={"readahead_pages": 1}) as patcher:
        with patcher.open_video_reader("train", relpath, 32, 32, 1) as reader:
            reader.read_frames_numpy(list(range(200, 216, 4)))
            stats = reader.last_stats
    index_and_gop = stats.remote_bytes
    assert stats.path == "indexed" and stats.decoder_seeks == 1
    assert index_and_gop < 0.3 * size, (index_and_gop, size)


def test_indexed_reads_are_thread_safe_across_readers(media, export_root):
    ref = media.reference("hevc.mp4", 32, 32)
    with make_patcher(None, export_root) as patcher:
        def worker(seed):
            rng = np.random.default_rng(seed)
            with patcher.open_video_reader("train", "bucket/videos/hevc.mp4", 32, 32, 2) as r:
                for _ in range(5):
                    idx = sorted(rng.integers(0, 72, 4).tolist())
                    np.testing.assert_array_equal(r.read_frames_numpy(idx), ref[idx])

        failures = run_in_threads(worker, 6)
    assert not failures, failures[0]


def test_sequential_reference_is_still_available(media):
    import fluxon_video as fv

    path = media.path("h264_open_gop.mp4")
    fast, fast_stats = fv.decode_local_frames(path, [70, 3], H, W)
    slow, slow_stats = fv.decode_local_frames(path, [70, 3], H, W, seek=False)
    np.testing.assert_array_equal(fast, slow)
    assert fast_stats.path == "indexed" and slow_stats.path == "sequential"
    assert fast_stats.frames_decoded < slow_stats.frames_decoded


def test_stats_dataclass_sums():
    from fluxon_video.stats import FluxonFsVideoReadStats

    a = FluxonFsVideoReadStats(kv_hits=1, path="indexed", total_ms=2.0)
    b = FluxonFsVideoReadStats(kv_hits=2, path="", total_ms=1.0)
    total = a + b
    assert total.kv_hits == 3 and total.total_ms == 3.0 and total.path == "indexed"
    assert dataclasses.asdict(total)["kv_hits"] == 3


def test_decode_floor_decodes_from_the_keyframe_without_skipping(opened):
    handle = opened("long_640x360.mp4")  # GOP 24: keyframe at 192 before frame 200
    floor = decode_floor(handle.bytes, [200, 202], 2)
    assert floor["decoder_seeks"] == 1
    assert 11 <= floor["frames_decoded"] <= 11 + 4  # 192..202, plus reorder slack
    handle.decoder.reset()
    _, stats = handle.read([200, 202])
    assert stats.frames_decoded <= floor["frames_decoded"]  # skipping non-ref frames
    with pytest.raises(IndexError):
        decode_floor(handle.bytes, [288], 2)


def test_read_stats_describe_one_call_on_a_persistent_decoder(opened):
    handle = opened("long_640x360.mp4", page_size=16 << 10)
    per_call = []
    for _ in range(3):
        _, stats = handle.read([100, 150])  # two keyframe seeks each time
        per_call.append((stats.range_reads, stats.range_bytes, stats.seeks,
                         stats.decoder_seeks))
    assert per_call[1] == per_call[2], per_call  # same work, same counts: not running totals
    assert per_call[1][0] > 0 and per_call[1][3] == 2
