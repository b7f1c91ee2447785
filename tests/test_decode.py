"""Decoding through the byte source: exact frames, index semantics, stats."""

from __future__ import annotations

import numpy as np
import pytest

from fluxon_video import errors
from fluxon_video.sources import BytesRangeSource, LocalFileRangeSource
from tests.media import CLIPS, ffprobe_frame_count

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")

# Well-formed clips (damaged ones have their own tests: test_damage.py).
VIDEO_CLIPS = [name for name, clip in CLIPS.items()
               if clip.video and not clip.broken and not name.startswith("long")]


def decode_file(path, indices, height, width, threads=2, **kw):
    with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size, **kw) as bs:
        return decode.decode_frames(bs, indices, height, width, threads)


def pick_indices(count: int) -> list[int]:
    rng = np.random.default_rng(count)
    return sorted({0, 1, count // 2, count - 2, count - 1, *rng.integers(0, count, 4).tolist()})


@pytest.mark.parametrize("name", VIDEO_CLIPS)
@pytest.mark.parametrize("size", ["native", (77, 101)])
def test_frames_equal_the_ffmpeg_cli(media, name, size):
    clip = CLIPS[name]
    height, width = (clip.height, clip.width) if size == "native" else size
    ref = media.reference(name, height, width)
    indices = pick_indices(len(ref))
    frames, stats = decode_file(media.path(name), indices, height, width)
    assert frames.dtype == np.uint8 and frames.shape == (len(indices), height, width, 3)
    assert frames.flags.owndata or frames.base is not None  # a numpy-owned array
    for k, i in enumerate(indices):
        np.testing.assert_array_equal(frames[k], ref[i], err_msg=f"{name} frame {i}")
    assert stats.frames_converted == len(indices)
    assert stats.frames_decoded == max(indices) + 1


@pytest.mark.parametrize("name", ["h264_faststart.mp4", "mpeg4.avi", "vp9.webm"])
def test_frame_count_matches_ffprobe(media, name):
    path = media.path(name)
    count = ffprobe_frame_count(path)
    frames, _ = decode_file(path, [count - 1], 32, 32)
    assert frames.shape[0] == 1
    with pytest.raises(errors.FluxonFsFrameIndexError, match=f"has {count} frames"):
        decode_file(path, [count], 32, 32)


def test_order_duplicates_and_unsorted(media):
    name = "h264_faststart.mp4"
    ref = media.reference(name, 144, 256)
    indices = [40, 3, 3, 71, 0, 40]
    frames, stats = decode_file(media.path(name), indices, 144, 256)
    np.testing.assert_array_equal(frames, ref[indices])
    assert stats.frames_converted == 4  # duplicates converted once


def test_numpy_integer_indices(media):
    ref = media.reference("vp9.webm", 144, 256)
    frames, _ = decode_file(media.path("vp9.webm"), np.array([5, 2], dtype=np.int32), 144, 256)
    np.testing.assert_array_equal(frames, ref[[5, 2]])


def test_only_targets_are_converted_and_decode_stops_at_the_last(media):
    _, stats = decode_file(media.path("h264_moov_end.mp4"), [10], 64, 64)
    assert stats.frames_converted == 1
    assert stats.frames_decoded == 11


def test_stats_count_callbacks_and_pages(media):
    path = media.path("h264_faststart.mp4")
    size = path.stat().st_size
    _, stats = decode_file(path, [71], 32, 32, page_size=16 << 10, readahead_pages=0)
    assert stats.range_reads > 0
    assert stats.range_bytes >= size * 0.9
    assert stats.page_misses == -(-size // (16 << 10))
    assert stats.bytes_fetched == size
    assert stats.decode_ms > 0 and stats.container_open_ms > 0


def test_second_decode_on_the_same_source_hits_the_page_cache(media):
    path = media.path("hevc.mp4")
    with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size) as bs:
        a, first = decode.decode_frames(bs, [30], 64, 64, 1)
        b, second = decode.decode_frames(bs, [30], 64, 64, 1)
    np.testing.assert_array_equal(a, b)
    assert first.bytes_fetched == path.stat().st_size
    assert second.bytes_fetched == 0 and second.page_misses == 0
    assert second.page_hits >= 1


def test_bytes_source_decodes_like_a_file(media):
    path = media.path("av1.mkv")
    ref = media.reference("av1.mkv", 144, 256)
    src = BytesRangeSource(path.read_bytes(), "av1.mkv")
    with avio.ByteSource(src, src.size) as bs:
        frames, _ = decode.decode_frames(bs, [0, 47], 144, 256, 2)
    np.testing.assert_array_equal(frames, ref[[0, 47]])


def test_thread_count_does_not_change_pixels(media):
    path = media.path("h264_faststart.mp4")
    one, _ = decode_file(path, [5, 50], 144, 256, threads=1)
    four, _ = decode_file(path, [5, 50], 144, 256, threads=4)
    np.testing.assert_array_equal(one, four)


def test_library_versions_are_reported():
    versions = decode.library_versions()
    assert set(versions) == {"libavutil", "libavcodec", "libavformat", "libswscale"}


@pytest.mark.parametrize("name", ["h264_moov_end.mp4", "vp9.webm", "mpeg4.avi"])
def test_a_local_reader_keeps_its_decoder_and_index_between_reads(media, name):
    import fluxon_video as fv

    ref = media.reference(name, 48, 64)
    reads = [[5, 6, 7], [30, 31], [2], [len(ref) - 1]]
    with fv.LocalVideoReader(media.path(name)) as reader:
        index = reader.index
        assert index is not None and index.frame_count == len(ref)
        got = [reader.read_frames_numpy(r, 48, 64) for r in reads]
    for r, (frames, _) in zip(reads, got):
        np.testing.assert_array_equal(frames, ref[r])
    # [30, 31] straight after [5, 6, 7] within one GOP continues without a seek
    # where the GOP allows; every read is indexed, none fell back.
    assert all(stats.path == "indexed" and not stats.fallback for _, stats in got)
    assert got[0][1].decoder_seeks + got[1][1].decoder_seeks <= 2
    # A second reader given the index does not scan again, and reads the same.
    with fv.LocalVideoReader(media.path(name), index=index) as again:
        assert again.index is index
        np.testing.assert_array_equal(again.read_frames_numpy([30], 48, 64)[0], ref[[30]])
    reader.close()  # twice is fine
    with pytest.raises(errors.FluxonFsClosedError):
        reader.read_frames_numpy([0], 48, 64)


# ---- the cold scan's probe of an MP4's end ----

class ProbeCountingSource(BytesRangeSource):
    """Records every read; the first read of the probe's range can be made to fail."""

    def __init__(self, data: bytes, fail_probe: bool = False) -> None:
        super().__init__(data, "probe.mp4")
        self.reads: list[tuple[int, int]] = []
        self.fail_probe = fail_probe

    def read_range(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        if self.fail_probe and offset + length == self.size and length % PROBE_PAGE:
            self.fail_probe = False
            raise errors.FluxonFsIOError("probe.mp4: the storage hiccuped")
        return super().read_range(offset, length)


PROBE_PAGE = 32 << 10


@pytest.mark.parametrize("name", ["h264_moov_end.mp4", "h264_faststart.mp4"])
@pytest.mark.parametrize("fail_probe", [False, True])
def test_a_cold_mp4_scan_reads_the_head_page_and_the_end_together(media, name, fail_probe):
    from fluxon_video import _avio
    from fluxon_video.indexing import load_or_build_index, tail_probe_bytes

    data = media.path(name).read_bytes()
    probe = tail_probe_bytes(len(data))
    assert len(data) > PROBE_PAGE + probe and probe % PROBE_PAGE
    source = ProbeCountingSource(data, fail_probe)
    with _avio.ByteSource(source, len(data), page_size=PROBE_PAGE) as bs:
        index, where, _ = load_or_build_index(bs, name)
        waits = bs.stats()["fetch_waits"]
    assert where == "scan" and index.frame_count == ffprobe_frame_count(media.path(name))
    if not fail_probe:
        # The first page and the end, one round trip; no other byte (a moov at
        # the end fits in the probe).
        assert sorted(source.reads) == [(0, PROBE_PAGE), (len(data) - probe, probe)]
        assert waits == 1
        assert index.open_extents and index.open_extents[-1][0] + len(
            index.open_extents[-1][1]) == len(data)
    else:
        # A failed probe is not the scan's failure: it reads the end from the pages.
        assert (len(data) - probe, probe) in source.reads
        assert any(off % PROBE_PAGE == 0 and off > 0 for off, _ in source.reads) == (
            name == "h264_moov_end.mp4")
