"""The drop-ins (fluxon_video.compat) against the real packages they replace.

torchcodec 0.13 and decord 0.6 are installed by ``make build`` (the Makefile
pins torchcodec to torch's minor version; decord is in the test extra). The
same calls on our layer and on the peer give the same shapes, dtypes, pts,
durations and metadata, and the same pixels wherever the peer's are the
ffmpeg CLI's (both are compared with the CLI's frames, tests/media.py);
where the peer's are not, ours are the CLI's, the peer's difference is
asserted here and written down in docs/compat.md. Sources: bytes, tensors,
file objects, and FluxonFS locations through a real agent and an S3 store.
"""

from __future__ import annotations

import dataclasses
import io
import math
import subprocess

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import compat, errors
from fluxon_video.audio import AudioSpec
from fluxon_video.sources import FileObjectRangeSource
from tests.helpers import IDENTITIES, make_patcher
from tests.media import reference_frames

torch = pytest.importorskip("torch", reason="fluxon_video.compat.torchcodec needs torch")

import fluxon_video.compat.decord as our_decord  # noqa: E402
import fluxon_video.compat.torchcodec as ours  # noqa: E402
from fluxon_video.compat.torchcodec import samplers as our_samplers  # noqa: E402
from fluxon_video.compat.torchcodec.decoders import AudioDecoder, VideoDecoder  # noqa: E402


def _peer(module: str):
    """The peer's module, or None when it is missing or does not load (torchcodec
    needs FFmpeg shared libraries of a version it supports)."""
    try:
        return __import__(module, fromlist=["_"])
    except Exception:  # noqa: BLE001 - ImportError, or OSError/RuntimeError loading FFmpeg
        return None


PEER = ("is not installed or does not load; `make build` installs the peers "
        "(torchcodec==0.13.* with torch 2.13, decord in the test extra)")
tc = _peer("torchcodec.decoders")
tc_samplers = _peer("torchcodec.samplers")
tc_transforms = _peer("torchcodec.transforms")
decord = _peer("decord")
needs_torchcodec = pytest.mark.skipif(tc is None, reason=f"torchcodec {PEER}")
needs_decord = pytest.mark.skipif(decord is None, reason=f"decord {PEER}")


@pytest.fixture(scope="module")
def rotated(media, tmp_path_factory):
    """h264_faststart.mp4 tagged to display turned by 90 degrees."""
    out = tmp_path_factory.mktemp("compat") / "rot90.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i",
                    str(media.path("h264_faststart.mp4")), "-c", "copy",
                    "-metadata:s:v:0", "rotate=90", str(out)], check=True)
    return out


def _cli(media, name: str) -> np.ndarray:
    """Every frame of a clip by the ffmpeg CLI, at its native size."""
    path = media.path(name)
    with fv.open_video(path) as reader:
        return media.reference(name, reader.height, reader.width)


def _nhwc(data) -> np.ndarray:
    return data.numpy()


def assert_same_batch(a, b) -> None:
    """Same shapes, dtypes, pts and durations (exactly) and pixels."""
    assert a.data.shape == b.data.shape and a.data.dtype == b.data.dtype
    assert torch.equal(a.data, b.data)
    for field in ("pts_seconds", "duration_seconds"):
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, float):
            assert isinstance(y, float) and x == y, (field, x, y)
        else:
            assert x.dtype == y.dtype == torch.float64 and torch.equal(x, y), (field, x, y)


# ---- torchcodec: VideoDecoder ----

# The fields equal on every file here; the rest differ as docs/compat.md says.
SAME_FIELDS = ("codec", "stream_index", "duration_seconds", "begin_stream_seconds",
               "begin_stream_seconds_from_content", "end_stream_seconds_from_content",
               "width", "height", "num_frames_from_content", "rotation", "pixel_format",
               "end_stream_seconds", "num_frames", "average_fps")


@needs_torchcodec
@pytest.mark.parametrize("name", ["h264_faststart.mp4", "vp9.webm", "h264_vfr.mp4"])
def test_video_decoder_equals_torchcodec_and_the_cli(media, name):
    """B-frames in MP4, Matroska's millisecond durations, variable frame rate."""
    path = str(media.path(name))
    cli = _cli(media, name)
    theirs, mine = tc.VideoDecoder(path), VideoDecoder(path)
    for field in SAME_FIELDS:
        assert getattr(mine.metadata, field) == pytest.approx(getattr(theirs.metadata, field),
                                                               abs=1e-9), field
    assert len(mine) == len(theirs) == len(cli) and mine.stream_index == theirs.stream_index
    n = len(cli)
    indices = [5, 0, n - 1, 5, -2]
    assert_same_batch(mine.get_frames_at(indices), theirs.get_frames_at(indices))
    batch = mine.get_frames_at(indices)
    assert batch.data.shape[1] == 3  # NCHW by default
    assert np.array_equal(batch.data.permute(0, 2, 3, 1).numpy(),
                          cli[[i % n for i in indices]])
    assert_same_batch(mine.get_frame_at(-1), theirs.get_frame_at(-1))
    assert torch.equal(mine[7], theirs[7]) and torch.equal(mine[3:20:4], theirs[3:20:4])
    assert_same_batch(mine.get_frames_in_range(2, 30, 7), theirs.get_frames_in_range(2, 30, 7))
    times = [0.0, 0.51, 1.25, 2.5]
    assert_same_batch(mine.get_frames_played_at(times), theirs.get_frames_played_at(times))
    assert_same_batch(mine.get_frames_played_at(torch.tensor(times)),
                      theirs.get_frames_played_at(times))
    for t in (0.0, 0.51, 1.04, 2.9):
        assert_same_batch(mine.get_frame_played_at(t), theirs.get_frame_played_at(t))
    for start, stop, fps in ((0.51, 1.3, None), (0.0, 1.0, None), (1.0, 1.0, None),
                             (0.2, 1.7, 10), (0.0, 2.0, 7.5)):
        assert_same_batch(mine.get_frames_played_in_range(start, stop, fps=fps),
                          theirs.get_frames_played_in_range(start, stop, fps=fps))
    assert_same_batch(mine.get_all_frames(), theirs.get_all_frames())
    mine.close()


@needs_torchcodec
def test_nhwc_rotation_and_resize(media, rotated):
    """NHWC, a display rotation (both turn the frames upright as the CLI does),
    and the one decoder transform: a bilinear Resize, which here is the CLI's
    ``scale=W:H:flags=bilinear`` (torchcodec's own Resize is not)."""
    theirs = tc.VideoDecoder(str(rotated), dimension_order="NHWC")
    mine = VideoDecoder(str(rotated), dimension_order="NHWC")
    fields = ("rotation", "width", "height")
    assert [getattr(mine.metadata, f) for f in fields] == \
        [getattr(theirs.metadata, f) for f in fields] == [90.0, 144, 256]
    indices = [0, 30, 71]
    assert_same_batch(mine.get_frames_at(indices), theirs.get_frames_at(indices))
    assert np.array_equal(mine.get_frames_at(indices).data.numpy(),
                          reference_frames(rotated, 256, 144)[indices])
    name = "h264_faststart.mp4"
    path = str(media.path(name))
    resize = ours.transforms.Resize((72, 100))
    resized = VideoDecoder(path, dimension_order="NHWC", transforms=[resize])
    assert np.array_equal(resized.get_frames_at(indices).data.numpy(),
                          media.reference(name, 72, 100)[indices])
    theirs_resized = tc.VideoDecoder(path, dimension_order="NHWC",
                                     transforms=[tc_transforms.Resize((72, 100))])
    assert theirs_resized[0].shape == resized[0].shape
    assert not torch.equal(theirs_resized[0], resized[0])  # docs/compat.md: not the CLI's scale
    assert resized.metadata.width == theirs_resized.metadata.width == 256  # the stream's


@needs_torchcodec
def test_crops_cut_torchcodecs_windows(media):
    """CenterCrop and RandomCrop, alone, chained, or after our Resize: the windows
    torchcodec cuts (a centre at half a pixel goes to the even offset, as
    FFmpeg's lrint; RandomCrop's offsets drawn from torch's generator when the
    decoder is made), of the CLI's frames. Either side's transform objects work."""
    name = "h264_faststart.mp4"
    path = str(media.path(name))
    cli = _cli(media, name)
    indices = [0, 30, 71]
    t, their_t = ours.transforms, tc_transforms
    cases = [([t.CenterCrop((99, 121))], [their_t.CenterCrop((99, 121))]),  # offsets 22.5, 67.5
             ([t.CenterCrop((98, 122))], [their_t.CenterCrop((98, 122))]),  # an odd offset: 23
             ([t.RandomCrop((41, 77))], [their_t.RandomCrop((41, 77))]),
             ([t.CenterCrop((100, 120)), t.RandomCrop((31, 33))],
              [their_t.CenterCrop((100, 120)), their_t.RandomCrop((31, 33))]),
             ([their_t.RandomCrop((50, 50))], [their_t.RandomCrop((50, 50))])]
    for seed in (1, 2):
        for mine_t, theirs_t in cases:
            torch.manual_seed(seed)
            mine = VideoDecoder(path, dimension_order="NHWC", transforms=mine_t)
            torch.manual_seed(seed)
            theirs = tc.VideoDecoder(path, dimension_order="NHWC", transforms=theirs_t)
            assert_same_batch(mine.get_frames_at(indices), theirs.get_frames_at(indices))
            assert torch.equal(mine[5], theirs[5])
            assert (mine.metadata.height, mine.metadata.width) == (144, 256)
            mine.close()
    centre = VideoDecoder(path, dimension_order="NHWC", transforms=[t.CenterCrop((99, 121))])
    assert np.array_equal(centre.get_frames_at(indices).data.numpy(),
                          cli[indices, 22:121, 68:189])
    scaled = VideoDecoder(path, transforms=[t.Resize((72, 100)), t.CenterCrop((50, 51))])
    assert np.array_equal(scaled.get_frames_at(indices).data.permute(0, 2, 3, 1).numpy(),
                          media.reference(name, 72, 100)[indices, 11:61, 24:75])
    with pytest.raises(NotImplementedError, match="Resize"):  # one scale, while decoding
        VideoDecoder(path, transforms=[t.CenterCrop((100, 100)), t.Resize((50, 50))])
    with pytest.raises(NotImplementedError, match="decoder transforms"):
        VideoDecoder(path, transforms=[object()])
    for crop in (t.CenterCrop, t.RandomCrop):
        with pytest.raises(ValueError, match="smaller than the crop"):
            VideoDecoder(path, transforms=[crop((145, 10))])
    with pytest.raises(ValueError, match="pair"):
        t.CenterCrop((10,))


def test_output_dtype_float32_is_the_frames_over_255(media):
    """torchcodec 0.17's output_dtype: "auto" is uint8 here (8-bit RGB frames),
    float32 the uint8 frames / 255 (docs/compat.md)."""
    path = str(media.path("h264_faststart.mp4"))
    frames = VideoDecoder(path).get_frames_at([0, 40]).data
    as_float = VideoDecoder(path, output_dtype=torch.float32, dimension_order="NHWC")
    got = as_float.get_frames_at([0, 40]).data
    assert got.dtype == torch.float32 and got.shape == (2, 144, 256, 3)
    assert torch.equal(got, frames.permute(0, 2, 3, 1).to(torch.float32) / 255)
    assert float(got.max()) <= 1.0 and as_float[0].dtype == torch.float32
    assert VideoDecoder(path, output_dtype="auto")[0].dtype == torch.uint8
    for bad in (torch.float16, "float32"):
        with pytest.raises(ValueError, match="output_dtype"):
            VideoDecoder(path, output_dtype=bad)


@needs_torchcodec
def test_where_torchcodec_is_not_the_cli_ours_is(media):
    """docs/compat.md's list: AVI's MPEG-4 with B-frames (torchcodec's frames and
    pts are others), MPEG-TS (torchcodec fails mid-file), a time just before a
    keyframe (torchcodec's get_frame_played_at gives the keyframe: its seek
    lands past the time) and seek_mode="approximate" (the header's guess)."""
    avi = "mpeg4.avi"
    cli = _cli(media, avi)
    mine, theirs = VideoDecoder(str(media.path(avi))), tc.VideoDecoder(str(media.path(avi)))
    indices = [5, 33, 61]
    assert np.array_equal(mine.get_frames_at(indices).data.permute(0, 2, 3, 1).numpy(),
                          cli[indices])
    assert not np.array_equal(theirs.get_frames_at(indices).data.permute(0, 2, 3, 1).numpy(),
                              cli[indices])
    ts = "h264.ts"
    mine = VideoDecoder(str(media.path(ts)), dimension_order="NHWC")
    assert np.array_equal(mine.get_all_frames().data.numpy(), _cli(media, ts))
    with pytest.raises(RuntimeError, match="no more frames"):
        tc.VideoDecoder(str(media.path(ts))).get_all_frames()
    webm = str(media.path("vp9.webm"))  # keyframes at 1.0 and 2.0 s
    mine, theirs = VideoDecoder(webm), tc.VideoDecoder(webm)
    shown = mine.get_frame_played_at(1.9999)
    assert shown.pts_seconds == 1.958 and theirs.get_frame_played_at(1.9999).pts_seconds == 2.0
    assert mine.get_frames_played_at([1.9999]).pts_seconds.tolist() == \
        theirs.get_frames_played_at([1.9999]).pts_seconds.tolist() == [1.958]
    hevc = "hevc.mp4"  # open GOPs: approximate seeking lands in the wrong GOP
    cli = _cli(media, hevc)
    mine = VideoDecoder(str(media.path(hevc)), seek_mode="approximate", dimension_order="NHWC")
    theirs = tc.VideoDecoder(str(media.path(hevc)), seek_mode="approximate",
                             dimension_order="NHWC")
    assert np.array_equal(mine.get_frames_at([45]).data.numpy(), cli[[45]])
    assert not np.array_equal(theirs.get_frames_at([45]).data.numpy(), cli[[45]])


@needs_torchcodec
def test_errors_are_torchcodecs_types(media):
    path = str(media.path("h264_faststart.mp4"))
    mine, theirs = VideoDecoder(path), tc.VideoDecoder(path)
    calls = [lambda d: d[72], lambda d: d[-73], lambda d: d.get_frame_at(72),
             lambda d: d.get_frames_at([0, 72]), lambda d: d.get_frame_played_at(3.0),
             lambda d: d.get_frame_played_at(-0.1)]
    for call in calls:
        for decoder in (mine, theirs):
            with pytest.raises(IndexError):
                call(decoder)
    for call in (lambda d: d.get_frames_played_at([3.0]), lambda d: d.get_frames_played_at([-1])):
        for decoder in (mine, theirs):
            with pytest.raises(RuntimeError):
                call(decoder)
    bad_ranges = [(1.0, 0.5), (0.0, 3.5), (3.0, 3.0), (-0.5, 1.0)]
    for start, stop in bad_ranges:
        for decoder in (mine, theirs):
            with pytest.raises(ValueError):
                decoder.get_frames_played_in_range(start, stop)
    for key in ("a", 1.0):
        for decoder in (mine, theirs):
            with pytest.raises(TypeError):
                decoder[key]
    for kwargs in ({"dimension_order": "CHW"}, {"seek_mode": "bogus"}, {"stream_index": 1},
                   {"stream_index": -1}, {"num_ffmpeg_threads": None}):
        for make in (VideoDecoder, tc.VideoDecoder):
            with pytest.raises(ValueError):
                make(path, **kwargs)
    for make in (VideoDecoder, tc.VideoDecoder):
        with pytest.raises(TypeError):
            make(123)
        with pytest.raises(ValueError):  # no video stream
            make(str(media.path("audio_only.m4a")))
    with pytest.raises(ValueError, match="CPU only"):  # torchcodec: a RuntimeError
        VideoDecoder(path, device="cuda")
    assert not mine.cpu_fallback and str(mine.cpu_fallback) == str(theirs.cpu_fallback)
    assert VideoDecoder(path, device=torch.device("cpu"), num_ffmpeg_threads=0)[0].shape == \
        theirs[0].shape
    chosen = VideoDecoder(path, stream_index=0, device="cpu", num_ffmpeg_threads=3)
    assert chosen.stream_index == tc.VideoDecoder(path, stream_index=0).stream_index == 0
    assert torch.equal(chosen.get_frames_at([9, 50]).data, theirs.get_frames_at([9, 50]).data)


# ---- torchcodec: samplers ----

SAMPLER_CALLS = [
    ("clips_at_random_indices", {"num_clips": 4, "num_frames_per_clip": 3,
                                 "num_indices_between_frames": 2}),
    ("clips_at_regular_indices", {"num_clips": 5, "num_frames_per_clip": 2}),
    ("clips_at_regular_indices", {"num_clips": 3, "num_frames_per_clip": 5,
                                  "sampling_range_end": -1, "policy": "wrap"}),
    ("clips_at_random_timestamps", {"num_clips": 4, "num_frames_per_clip": 3}),
    ("clips_at_regular_timestamps", {"seconds_between_clip_starts": 0.7,
                                     "num_frames_per_clip": 4, "seconds_between_frames": 0.1}),
    ("clips_at_random_timestamps", {"num_clips": 2, "num_frames_per_clip": 4,
                                    "sampling_range_start": 2.5, "sampling_range_end": 2.9,
                                    "seconds_between_frames": 0.2, "policy": "repeat_last"}),
]


@needs_torchcodec
@pytest.mark.parametrize("name", ["h264_faststart.mp4", "h264_vfr.mp4"])
def test_samplers_pick_torchcodecs_clips_under_the_same_seed(media, name):
    path = str(media.path(name))
    mine, theirs = VideoDecoder(path), tc.VideoDecoder(path)
    for sampler, kwargs in SAMPLER_CALLS:
        torch.manual_seed(7)
        expected = getattr(tc_samplers, sampler)(theirs, **kwargs)
        torch.manual_seed(7)
        got = getattr(our_samplers, sampler)(mine, **kwargs)
        assert isinstance(got, ours.FrameBatch) and got.data.ndim == 5
        assert_same_batch(got, expected)
    # Either side's samplers take the other side's decoder.
    torch.manual_seed(3)
    a = tc_samplers.clips_at_random_indices(mine, num_clips=2, num_frames_per_clip=2)
    torch.manual_seed(3)
    b = our_samplers.clips_at_random_indices(theirs, num_clips=2, num_frames_per_clip=2)
    assert torch.equal(a.data, b.data) and torch.equal(a.pts_seconds, b.pts_seconds)
    for decoder, module in ((mine, our_samplers), (theirs, tc_samplers)):
        with pytest.raises(ValueError):
            module.clips_at_random_indices(decoder, num_clips=0)
        with pytest.raises(ValueError):
            module.clips_at_regular_timestamps(decoder, seconds_between_clip_starts=-1)


@needs_torchcodec
def test_stream_metadata_is_built_as_torchcodecs(media):
    """VideoStreamMetadata and AudioStreamMetadata take torchcodec's fields in its
    order, by keyword or position, and hold and print them as its classes do;
    computed fields left None are derived (torchcodec keeps None: docs/compat.md)."""
    path = str(media.path("h264_faststart.mp4"))
    for peer, cls in ((tc.VideoDecoder(path).metadata, ours.decoders.VideoStreamMetadata),
                      (tc.AudioDecoder(path).metadata, ours.decoders.AudioStreamMetadata)):
        fields = dataclasses.asdict(peer)
        assert [f.name for f in dataclasses.fields(cls)] == list(fields)
        by_keyword, by_position = cls(**fields), cls(*dataclasses.astuple(peer))
        assert dataclasses.asdict(by_keyword) == dataclasses.asdict(by_position) == fields
        assert repr(by_keyword) == repr(peer)
    computed = {"duration_seconds": None, "begin_stream_seconds": None, "num_frames": None,
                "average_fps": None, "end_stream_seconds": None}
    video = tc.VideoDecoder(path).metadata
    derived = ours.decoders.VideoStreamMetadata(**{**dataclasses.asdict(video), **computed})
    assert {name: getattr(derived, name) for name in computed} == \
        {name: getattr(video, name) for name in computed}
    header_only = ours.decoders.VideoStreamMetadata(
        **{**dataclasses.asdict(video), **computed, "begin_stream_seconds_from_content": None,
           "end_stream_seconds_from_content": None, "num_frames_from_content": None,
           "duration_seconds_from_header": None})
    assert (header_only.num_frames, header_only.duration_seconds, header_only.average_fps) == \
        (72, 3.0, 24)


@needs_torchcodec
def test_frame_batches_index_as_torchcodecs():
    """Indexing (negative, slices, masks, index tensors), iteration, len and repr
    of a FrameBatch; a Frame and AudioSamples unpack and print as torchcodec's."""
    import torchcodec

    data = torch.arange(4 * 3 * 2 * 2, dtype=torch.uint8).reshape(4, 3, 2, 2)
    pts = torch.arange(4, dtype=torch.float64) / 10
    duration = torch.full((4,), 0.1, dtype=torch.float64)
    mine, theirs = ours.FrameBatch(data, pts, duration), torchcodec.FrameBatch(data, pts, duration)
    keys = [0, -1, -4, 3, slice(1, 3), slice(-3, None), slice(None, None, 2),
            torch.tensor([2, 0, 2]), torch.tensor([True, False, True, False])]
    for key in keys:
        assert_same_batch(mine[key], theirs[key])
        assert repr(mine[key]) == repr(theirs[key])
    for batch in (mine, theirs):
        with pytest.raises(IndexError):
            batch[4]
        with pytest.raises(IndexError):
            batch[-5]
    assert len(mine) == len(theirs) == 4
    for a, b in zip(mine, theirs, strict=True):
        assert_same_batch(a, b)
    frame, their_frame = ours.Frame(data[1], pts[1], 0.1), torchcodec.Frame(data[1], pts[1], 0.1)
    assert repr(frame) == repr(their_frame)
    assert [x if isinstance(x, float) else x.tolist() for x in frame] == \
        [x if isinstance(x, float) else x.tolist() for x in their_frame]
    samples = ours.AudioSamples(torch.zeros(2, 10), 0.5, 10 / 16000, 16000)
    assert repr(samples) == repr(torchcodec.AudioSamples(torch.zeros(2, 10), 0.5, 10 / 16000,
                                                         16000))


def test_frame_containers_behave_as_torchcodecs():
    batch = ours.FrameBatch(torch.zeros(2, 3, 3, 4, 5, dtype=torch.uint8),
                            torch.zeros(2, 3, dtype=torch.float64),
                            torch.ones(2, 3, dtype=torch.float64))
    assert len(batch) == 2 and [b.data.shape for b in batch] == [(3, 3, 4, 5)] * 2
    assert batch[1].pts_seconds.shape == (3,) and batch[:, 0].data.shape == (2, 3, 4, 5)
    with pytest.raises(ValueError, match="leading dimensions"):
        ours.FrameBatch(torch.zeros(2, 3, 4, 5), torch.zeros(3), torch.zeros(3))
    _, pts, duration = ours.Frame(torch.zeros(3, 4, 5), 1, 0.5)
    assert (pts, duration) == (1.0, 0.5) and isinstance(pts, float)
    with pytest.raises(ValueError):
        ours.Frame(torch.zeros(4, 5), 0, 0)
    samples = ours.AudioSamples(torch.zeros(2, 10), 0, 10 / 16000, 16000.0)
    assert samples.sample_rate == 16000 and "data (shape): torch.Size([2, 10])" in repr(samples)
    # Built directly from the header fields, the computed ones are derived.
    md = ours.decoders.VideoStreamMetadata(num_frames_from_header=48, average_fps_from_header=24,
                                           width=256, height=144)
    assert (md.num_frames, md.duration_seconds, md.average_fps, md.begin_stream_seconds) == \
        (48, 2.0, 24, 0.0)


# ---- torchcodec: AudioDecoder ----

def _cli_audio(path, rate=None, channels=None) -> np.ndarray:
    options = (["-af", f"aresample={rate}"] if rate else []) + \
        (["-ac", str(channels)] if channels else [])
    raw = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a:0",
                          *options, "-f", "f32le", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.float32)


@needs_torchcodec
@pytest.mark.parametrize("name", ["h264_faststart.mp4", "audio_only.m4a"])
def test_audio_decoder_equals_torchcodec_and_the_cli(media, name):
    """All samples, ranges that start mid-frame and run past the end, and a
    resampled, remixed stream. Mid-stream ranges: ours are the CLI's
    decode-from-the-start samples, torchcodec's come from a seek (docs/compat.md)."""
    path = media.path(name)
    for rate, channels in ((None, None), (8000, 2)):
        mine = AudioDecoder(str(path), sample_rate=rate, num_channels=channels)
        theirs = tc.AudioDecoder(str(path), sample_rate=rate, num_channels=channels)
        for field in ("sample_rate", "num_channels", "codec", "stream_index", "duration_seconds",
                      "begin_stream_seconds"):
            assert getattr(mine.metadata, field) == getattr(theirs.metadata, field), field
        out_rate = rate or mine.metadata.sample_rate
        cli = _cli_audio(path, rate, channels).reshape(-1, channels or 1).T
        every = mine.get_all_samples()
        assert_same_batch(every, theirs.get_all_samples())
        assert np.array_equal(every.data.numpy(), cli) and every.sample_rate == out_rate
        spans = [(0.5, 1.25), (0.77, None), (0.9, 5.0)]
        if rate is None:
            spans.append((0.1234567, 0.7654321))  # off the grid: torchcodec rounds the same
        for start, stop in spans:
            got = mine.get_samples_played_in_range(start, stop)
            expected = theirs.get_samples_played_in_range(start, stop)
            assert got.data.shape == expected.data.shape and got.data.dtype == torch.float32
            assert (got.pts_seconds, got.duration_seconds, got.sample_rate) == \
                (expected.pts_seconds, expected.duration_seconds, expected.sample_rate)
            first = round(start * out_rate)
            assert np.array_equal(got.data.numpy(), cli[:, first:first + got.data.shape[1]])
    for decoder in (mine, theirs):
        with pytest.raises(ValueError):
            decoder.get_samples_played_in_range(1.0, 0.5)
        with pytest.raises(RuntimeError):  # past the end: no samples
            decoder.get_samples_played_in_range(30.0)
    with pytest.raises(ValueError):  # no audio stream
        AudioDecoder(str(media.path("hevc.mp4")))


@needs_torchcodec
def test_audio_stream_index_wav_and_half_sample_times(media, tmp_path):
    """stream_index names the audio stream; WavDecoder (torchcodec 0.15+) reads a
    WAV file as AudioDecoder does; a time half-way between two samples rounds up
    (torchcodec 0.14+; 0.13 rounds it to even, here 0.25 s at 22050 Hz)."""
    path = str(media.path("h264_faststart.mp4"))
    assert AudioDecoder(path, stream_index=1).stream_index == \
        tc.AudioDecoder(path, stream_index=1).stream_index == 1
    for decoder in (AudioDecoder, tc.AudioDecoder):
        with pytest.raises(ValueError):
            decoder(path, stream_index=0)  # the video's
    wav = tmp_path / "tones.wav"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                    "sine=frequency=440:sample_rate=22050", "-f", "lavfi", "-i",
                    "sine=frequency=660:sample_rate=22050", "-filter_complex",
                    "amerge=inputs=2", "-t", "1", "-c:a", "pcm_s16le", str(wav)], check=True)
    cli = _cli_audio(wav).reshape(-1, 2).T
    theirs = tc.AudioDecoder(str(wav))
    for source in (str(wav), wav.read_bytes()):
        mine = ours.decoders.WavDecoder(source)
        for field in ("sample_rate", "num_channels", "codec", "stream_index", "duration_seconds",
                      "begin_stream_seconds", "begin_stream_seconds_from_header"):
            assert getattr(mine.metadata, field) == getattr(theirs.metadata, field), field
        every = mine.get_all_samples()
        assert_same_batch(every, theirs.get_all_samples())
        assert np.array_equal(every.data.numpy(), cli)
        half = mine.get_samples_played_in_range(0.25, 0.5)  # 5512.5 to 11025
        assert half.pts_seconds == 0.25 and half.duration_seconds == 5512 / 22050
        assert np.array_equal(half.data.numpy(), cli[:, 5513:11025])
        mine.close()
    assert theirs.get_samples_played_in_range(0.25, 0.5).data.shape[1] == 5513  # 0.13's


# ---- sources ----

class StrictFile:
    """A file-like object as torchcodec documents them: read(size) and
    seek(offset, whence), whence required (the issue's custom reader)."""

    def __init__(self, data: bytes) -> None:
        self._file = io.BytesIO(data)

    def read(self, size: int) -> bytes:
        return self._file.read(size)

    def seek(self, offset: int, whence: int) -> int:
        return self._file.seek(offset, whence)


def test_a_source_is_a_path_bytes_a_tensor_or_a_file_object(media):
    name = "h264_moov_end.mp4"
    path = media.path(name)
    data = path.read_bytes()
    cli = _cli(media, name)
    sources = [path, str(path), f"file://{path}", data, bytearray(data),
               torch.frombuffer(bytearray(data), dtype=torch.uint8), StrictFile(data),
               open(path, "rb")]  # noqa: SIM115 - closed below
    for source in sources:
        decoder = VideoDecoder(source, dimension_order="NHWC")
        assert np.array_equal(decoder.get_frames_at([3, 40]).data.numpy(), cli[[3, 40]]), source
        decoder.close()
    sources[-1].close()
    for source in (data, StrictFile(data), str(path)):
        with our_decord.VideoReader(source) as reader:
            assert np.array_equal(reader.get_batch([3, 40]).asnumpy(), cli[[3, 40]])
    with pytest.raises(TypeError):
        VideoDecoder(io.StringIO("text"))
    with_audio = media.path("h264_faststart.mp4")
    expected = AudioDecoder(str(with_audio)).get_all_samples().data
    assert expected.shape[1] > 0
    for source in (with_audio.read_bytes(), StrictFile(with_audio.read_bytes())):
        assert torch.equal(AudioDecoder(source).get_all_samples().data, expected)
    # The two findings, at the bottom: seek(offset) without whence, and
    # a source of no known type raising ValueError where TypeError is expected.
    assert FileObjectRangeSource(StrictFile(data)).read_range(10, 5) == data[10:15]
    with pytest.raises(TypeError, match="video source"):
        fv.open_video(123)
    with pytest.raises(errors.FluxonFsBadRequestError):  # as before, too
        fv.open_video(123)
    with pytest.raises(errors.FluxonFsConfigError, match="no FluxonFS is configured"):
        VideoDecoder("s3://bucket/key.mp4")


@pytest.fixture
def compat_cleared():
    """No FluxonFS configured for the drop-ins, before and after the test."""
    compat.use(None)
    yield
    compat.use(None)


def test_fluxonfs_locations_through_the_agent(media, agent, export_root, tmp_path, monkeypatch,
                                              compat_cleared):
    """A path under an export's root and EXPORT:RELPATH, read through a real
    agent: by use(patcher), and by $FLUXON_VIDEO_CONFIG as the CLI reads it."""
    cli = _cli(media, "hevc.mp4")
    uri = f"{export_root}/bucket/videos/hevc.mp4"
    # bob may read only "shared": the path is under one export's root for him.
    with make_patcher(agent.url, export_root, identity="bob") as patcher:
        compat.use(patcher)
        decoder = VideoDecoder(uri, dimension_order="NHWC")
        assert decoder._reader.export_name == "shared"
        assert np.array_equal(decoder.get_frames_at([0, 30]).data.numpy(), cli[[0, 30]])
        decoder.close()
        with our_decord.VideoReader("shared:bucket/videos/hevc.mp4") as reader:
            assert reader._reader.export_name == "shared"
            assert np.array_equal(reader[30].asnumpy(), cli[30])
        with pytest.raises(errors.FluxonFsPermissionError):
            VideoDecoder("train:bucket/videos/hevc.mp4")
        audio = AudioDecoder(f"{export_root}/bucket/videos/h264_faststart.mp4")
        assert audio._reader.export_name == "shared"
        assert audio.get_all_samples().data.shape == (1, 48128)
        audio.close()
        compat.use(None)
    config = tmp_path / "trainer.toml"
    config.write_text(f'[identities]\nbob = "{IDENTITIES["bob"]}"\n\n'
                      f'[[exports]]\nname = "shared"\nroot = "{export_root}"\n'
                      f'agent_url = "{agent.url}"\nallow = ["bob"]\n')
    config.chmod(0o600)
    monkeypatch.setenv("FLUXON_VIDEO_CONFIG", str(config))
    monkeypatch.delenv("FLUXON_VIDEO_IDENTITY", raising=False)
    decoder = VideoDecoder(uri)
    assert decoder._reader.export_name == "shared" and compat.configured_patcher() is not None
    assert np.array_equal(decoder[30].permute(1, 2, 0).numpy(), cli[30])
    decoder.close()
    # route_paths=False: an absolute path is the local file even under a root.
    compat.use(str(config), route_paths=False)
    local = VideoDecoder(str(media.path("hevc.mp4")))
    assert local._reader.export_name is None
    local.close()


def test_an_s3_uri_through_an_in_process_export(media, s3_server, compat_cleared):
    name = "h264_faststart.mp4"
    s3_server.upload("compat", {f"train/clips/{name}": media.path(name)})
    with make_patcher(None, "s3://compat/train", identity="bob", store=s3_server.store_options(),
                      store_timeout_s=5.0, store_retries=1) as patcher:
        compat.use(patcher)
        decoder = VideoDecoder(f"s3://compat/train/clips/{name}", dimension_order="NHWC")
        assert np.array_equal(decoder.get_frames_at([1, 50]).data.numpy(),
                              _cli(media, name)[[1, 50]])
        decoder.close()
        compat.use(None)


# ---- decord ----

@needs_decord
@pytest.mark.parametrize("name", ["h264_faststart.mp4", "h264_vfr.mkv"])
def test_video_reader_equals_decord_and_the_cli(media, name):
    path = str(media.path(name))
    cli = _cli(media, name)
    theirs, mine = decord.VideoReader(path), our_decord.VideoReader(path, ctx=our_decord.cpu(0))
    n = len(cli)
    assert len(mine) == len(theirs) == n
    assert mine.get_avg_fps() == theirs.get_avg_fps()
    assert mine.get_key_indices() == theirs.get_key_indices()
    every = list(range(n))
    stamps = mine.get_frame_timestamp(every)
    assert stamps.dtype == np.float32 and np.array_equal(stamps, theirs.get_frame_timestamp(every))
    assert np.array_equal(mine.get_frame_timestamp(-1), theirs.get_frame_timestamp(-1))
    indices = [0, n - 1, 7, 7, -3]
    batch = mine.get_batch(indices)
    assert batch.shape == theirs.get_batch(indices).shape and batch.dtype == "uint8"
    assert np.array_equal(batch.asnumpy(), theirs.get_batch(indices).asnumpy())
    assert np.array_equal(batch.asnumpy(), cli[[i % n for i in indices]])
    assert np.array_equal(mine[-1].asnumpy(), theirs[-1].asnumpy())
    assert np.array_equal(mine[2:12:3].asnumpy(), theirs[2:12:3].asnumpy())
    explicit = our_decord.VideoReader(path, ctx=our_decord.cpu(0), width=-1, height=-1,
                                      num_threads=0)
    fresh = decord.VideoReader(path, ctx=decord.cpu(0), width=-1, height=-1, num_threads=0)
    for _ in range(3):
        assert np.array_equal(explicit.next().asnumpy(), fresh.next().asnumpy())
    assert np.array_equal(np.stack([frame.asnumpy() for frame in explicit]), cli)
    explicit.close()
    mine.seek(10)
    assert np.array_equal(mine.next().asnumpy(), cli[10])  # exact (decord's seek: a keyframe)
    mine.skip_frames(4)
    assert np.array_equal(mine.next().asnumpy(), cli[15])
    mine.seek(n - 1)
    mine.next()
    with pytest.raises(StopIteration):
        mine.next()
    for reader in (mine, theirs):
        with pytest.raises(IndexError):
            reader[n]
        with pytest.raises(IndexError):
            reader.get_batch([0, n])
    for size in ({"width": 100, "height": 60}, {"width": 128}):  # one side: the other native
        theirs_sized, mine_sized = decord.VideoReader(path, **size), our_decord.VideoReader(path,
                                                                                           **size)
        assert np.array_equal(mine_sized.get_batch([1, 20]).asnumpy(),
                              theirs_sized.get_batch([1, 20]).asnumpy())
    mine.close()


@needs_decord
def test_video_reader_turns_frames_upright_and_bridges_to_torch(rotated):
    theirs, mine = decord.VideoReader(str(rotated)), our_decord.VideoReader(str(rotated))
    assert np.array_equal(mine.get_batch([0, 40]).asnumpy(), theirs.get_batch([0, 40]).asnumpy())
    our_decord.bridge.set_bridge("torch")
    try:
        frames = mine.get_batch([0, 40])
        assert isinstance(frames, torch.Tensor) and frames.shape == (2, 256, 144, 3)
    finally:
        our_decord.bridge.set_bridge("native")
    with our_decord.bridge.use_torch():
        assert isinstance(mine[0], torch.Tensor)
    assert isinstance(mine[0], our_decord.NDArray)
    with pytest.raises(ValueError, match="CPU only"):
        our_decord.gpu(0)


@needs_decord
def test_where_decord_is_not_the_cli_ours_is(media):
    """docs/compat.md: decord decodes the frames an edit list hides, names
    keyframes by decode position (open GOPs) and shifts times to start at 0."""
    cut = "h264_editlist.mp4"
    cli = _cli(media, cut)
    mine, theirs = our_decord.VideoReader(str(media.path(cut))), decord.VideoReader(
        str(media.path(cut)))
    assert len(mine) == len(cli) == 58 and len(theirs) == 72
    assert np.array_equal(mine.get_batch([0, 57]).asnumpy(), cli[[0, 57]])
    hevc = str(media.path("hevc.mp4"))
    assert our_decord.VideoReader(hevc).get_key_indices() == [0, 24, 48]
    assert decord.VideoReader(hevc).get_key_indices() == [0, 21, 45]
    fragmented = str(media.path("h264_fragmented.mp4"))
    first = our_decord.VideoReader(fragmented).get_frame_timestamp(0)
    assert first[0] == np.float32(VideoDecoder(fragmented).get_frame_at(0).pts_seconds) > 0
    assert decord.VideoReader(fragmented).get_frame_timestamp(0)[0] == 0


@needs_decord
def test_av_reader_equals_decord(media):
    """Each frame's samples: at the stream's own rate decord's exactly; resampled
    (decord's default 44.1 kHz mono), the same counts, and the CLI's samples."""
    name = "h264_faststart.mp4"
    path = str(media.path(name))
    mine, theirs = our_decord.AVReader(path, sample_rate=16000), decord.AVReader(
        path, sample_rate=16000)
    assert len(mine) == len(theirs) == 72
    got, frames = mine.get_batch([0, 1, 2, 10, 71])
    expected, expected_frames = theirs.get_batch([0, 1, 2, 10, 71])
    assert np.array_equal(frames.asnumpy(), expected_frames.asnumpy())
    for a, b in zip(got, expected):
        assert a.shape == b.shape and np.array_equal(a.asnumpy(), b.asnumpy())
    audio, frame = mine[5]
    their_audio, their_frame = theirs[5]
    assert np.array_equal(audio.asnumpy(), their_audio.asnumpy())
    assert np.array_equal(frame.asnumpy(), their_frame.asnumpy())
    mine, theirs = our_decord.AVReader(path), decord.AVReader(path)
    got, _ = mine.get_batch(list(range(72)))
    expected, _ = theirs.get_batch(list(range(72)))
    assert [a.shape for a in got] == [b.shape for b in expected]
    joined = np.concatenate([a.asnumpy() for a in got], axis=1)
    assert joined.shape[1] == math.ceil(3.0 * 44100)
    assert np.array_equal(joined[0], _cli_audio(path, 44100, 1)[:joined.shape[1]])


# ---- what the drop-ins need underneath (fluxon_video.audio) ----

@pytest.mark.parametrize("rate", [None, 8000])
def test_audio_trim_and_spans_past_the_end(media, rate):
    """AudioSpec(trim=True) gives only the samples the stream has (AudioDecoder's
    reads); pad=False refuses a span past the end whether or not it resamples."""
    path = media.path("h264_faststart.mp4")
    cli = _cli_audio(path, rate)
    out_rate = rate or 16000
    with fv.open_video(path) as reader:
        tail = reader.read_audio(2.5, 11.0, AudioSpec(sample_rate=rate, trim=True))
        assert tail.pts_seconds == 2.5 and tail.data.shape == (1, len(cli) - round(2.5 * out_rate))
        assert np.array_equal(tail.data[0], cli[round(2.5 * out_rate):])
        head = reader.read_audio(-1.0, 0.5, AudioSpec(sample_rate=rate, trim=True))
        assert head.pts_seconds == 0.0 and np.array_equal(head.data[0], cli[:out_rate // 2])
        past = reader.read_audio(10.0, 11.0, AudioSpec(sample_rate=rate, trim=True))
        assert past.data.shape == (1, 0)
        padded = reader.read_audio(2.5, 11.0, AudioSpec(sample_rate=rate))
        assert padded.data.shape == (1, round(8.5 * out_rate)) and not padded.data[0, -100:].any()
        for start in (2.5, 10.0):
            with pytest.raises(errors.FluxonFsAudioRangeError):
                reader.read_audio(start, 11.0, AudioSpec(sample_rate=rate, pad=False))
