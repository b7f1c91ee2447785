"""Bad arguments and malformed files: a clear exception each, never a crash or hang."""

from __future__ import annotations

import pytest

from fluxon_video import errors
from fluxon_video.sources import BytesRangeSource
from tests.helpers import RaisingSource

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")

pytestmark = pytest.mark.timeout(60)


def run(data: bytes, indices=(0,), height=32, width=32, threads=1, name="bad.mp4"):
    src = BytesRangeSource(data, name)
    with avio.ByteSource(src, src.size, name=name) as bs:
        return decode.decode_frames(bs, list(indices), height, width, threads)


@pytest.fixture(scope="module")
def good(media) -> bytes:
    return media.path("h264_faststart.mp4").read_bytes()


def test_negative_index(good):
    with pytest.raises(errors.FluxonFsFrameIndexError, match="-3 is negative") as info:
        run(good, [0, -3])
    assert isinstance(info.value, IndexError)


def test_index_past_the_end_names_the_frame_count(good):
    with pytest.raises(IndexError, match=r"bad.mp4: frame index 72 is out of range: the video has 72"):
        run(good, [5, 72])


def test_huge_index_ends_without_hanging(good):
    with pytest.raises(IndexError):
        run(good, [10**15])


def test_empty_index_list_gives_an_empty_batch(good):
    frames, _ = run(good, [], 20, 30)
    assert frames.shape == (0, 20, 30, 3)


@pytest.mark.parametrize("height,width,threads", [(0, 32, 1), (32, -1, 1), (32, 32, 0),
                                                  (-5, 32, 1), (32, 32, -2)])
def test_non_positive_sizes_and_threads(good, height, width, threads):
    with pytest.raises(errors.FluxonFsConfigError, match="must be a positive int"):
        run(good, [0], height, width, threads)


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_non_integer_index(good, bad):
    with pytest.raises(TypeError, match="position 1"):
        run(good, [0, bad])


def test_garbage_bytes():
    with pytest.raises(errors.FluxonFsDecodeError, match="garbage.bin: not a recognised video container"):
        run(bytes(range(256)) * 64, name="garbage.bin")


def test_zero_byte_file():
    with pytest.raises(errors.FluxonFsDecodeError, match="empty.mp4: not a recognised"):
        run(b"", name="empty.mp4")


def test_truncated_moov_at_end_file(media):
    data = media.path("h264_moov_end.mp4").read_bytes()
    with pytest.raises(errors.FluxonFsDecodeError, match="cut.mp4"):
        run(data[: len(data) // 2], name="cut.mp4")


def test_truncated_faststart_file_serves_what_is_there(media, good):
    ref = media.reference("h264_faststart.mp4", 32, 32)
    cut = good[: len(good) // 2]
    frames, _ = run(cut, [0, 10], name="cut.mp4")
    assert (frames == ref[[0, 10]]).all()
    with pytest.raises(IndexError, match="cut.mp4: frame index 71 is out of range"):
        run(cut, [71], name="cut.mp4")


def test_audio_only_file(media):
    data = media.path("audio_only.m4a").read_bytes()
    with pytest.raises(errors.FluxonFsNoVideoStreamError, match="tone.m4a: no video stream"):
        run(data, name="tone.m4a")


def test_source_exception_keeps_type_and_message(good):
    src = RaisingSource(good, fail_from=len(good) // 3)
    with avio.ByteSource(src, src.size, page_size=8192, readahead_pages=0) as bs:
        with pytest.raises(RaisingSource.Boom, match="storage exploded"):
            decode.decode_frames(bs, [70], 32, 32, 1)


def test_short_source_fails_the_decode(good):
    class Short(BytesRangeSource):
        def read_range(self, offset, length):
            return super().read_range(offset, length)[: length // 2]

    src = Short(good, "short.mp4")
    with avio.ByteSource(src, src.size) as bs:
        with pytest.raises(errors.FluxonFsShortReadError, match="short.mp4"):
            decode.decode_frames(bs, [0], 32, 32, 1)


def test_closed_source_refuses_to_decode(good):
    src = BytesRangeSource(good)
    bs = avio.ByteSource(src, src.size)
    bs.close()
    with pytest.raises(errors.FluxonFsClosedError):
        decode.decode_frames(bs, [0], 32, 32, 1)


def test_random_corruption_never_crashes(good):
    import random

    rnd = random.Random(7)
    for trial in range(12):
        data = bytearray(good)
        for _ in range(40):
            pos = rnd.randrange(len(data))
            data[pos] = rnd.randrange(256)
        try:
            frames, _ = run(bytes(data), [0, 30, 71])
        except errors.FluxonFsError:
            continue
        assert frames.shape == (3, 32, 32, 3)


def test_err_check_table():
    from fluxon_video import _errors

    def fferrtag(a, b, c, d):  # FFERRTAG from libavutil/error.h
        return -(a | b << 8 | c << 16 | d << 24)

    cases = {
        fferrtag(*b"INDA"): errors.FluxonFsDecodeError,
        fferrtag(0xF8, *b"STR"): errors.FluxonFsNoVideoStreamError,
        -5: errors.FluxonFsIOError,  # EIO
        -2: errors.FluxonFsNotFoundError,  # ENOENT
        -13: errors.FluxonFsPermissionError,  # EACCES
        -110: errors.FluxonFsTimeoutError,  # ETIMEDOUT
        -12: MemoryError,  # ENOMEM
    }
    for code, cls in cases.items():
        with pytest.raises(cls) as info:
            _errors.check(code, "thing", "x.mp4")
        assert "x.mp4" in str(info.value)
    assert _errors.check(3) == 3
    assert issubclass(errors.FluxonFsNotFoundError, FileNotFoundError)
