"""Video metadata, time-based access and output options (autorotate is in
test_autorotate.py).

Every expected value comes from outside fluxon_video: ffprobe (the container's
view, and the decode's frame count with -count_frames), PyAV (its own FFmpeg
build: every decoded frame's pts, key flag and size) and the ffmpeg CLI's
frames (tests/media.py). Each oracle runs once per file per session.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import multiprocessing
import os
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from tests.helpers import make_patcher
from tests.media import CLIPS

av = pytest.importorskip("av")
pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(120)

# AVI clips whose decoded frames carry no pts in presentation order (reordered H.264, packed
# B-frames): PyAV's frame pts are no oracle for them. test_seeking.py reads them.
UNORDERED_PTS = ("h264.avi", "mpeg4_packed.avi")
# Well-formed clips (damaged ones have their own tests: test_damage.py).
VIDEO_CLIPS = [name for name, clip in CLIPS.items()
               if clip.video and not clip.broken and not name.startswith("long")
               and name not in UNORDERED_PTS]
VFR_CLIPS = ["h264_vfr.mkv", "h264_vfr.mp4"]
TRUNCATED = "h264_truncated.mp4"
H, W = 48, 64  # output size where the size does not matter


# ---- oracles ----

@dataclasses.dataclass(frozen=True)
class Decoded:
    """PyAV's sequential decode of the first video stream, one entry per output frame."""

    pts: tuple[Fraction, ...]  # pts x time_base, exact
    keyframes: tuple[int, ...]  # positions of the frames PyAV flags key_frame
    sizes: frozenset[tuple[int, int]]  # (width, height) of the frames

    @property
    def times(self) -> np.ndarray:
        """pts_time in seconds, correctly rounded (what ffprobe prints)."""
        return np.array([float(t) for t in self.pts], dtype=np.float64)

    def displayed_at(self, t: float) -> int:
        """The last frame whose pts_time <= t."""
        return max(i for i, time in enumerate(self.times) if time <= t)


@functools.cache
def pyav_decode(path: Path) -> Decoded:
    pts, keyframes, sizes = [], [], set()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for packet in container.demux(stream):
            try:
                frames = packet.decode()
            except av.error.InvalidDataError:  # a bad packet is skipped, as the CLI does
                continue
            for frame in frames:
                assert frame.pts is not None, f"{path.name}: PyAV gives a frame without pts"
                if frame.key_frame:
                    keyframes.append(len(pts))
                pts.append(Fraction(frame.pts) * frame.time_base)
                sizes.add((frame.width, frame.height))
    return Decoded(tuple(pts), tuple(keyframes), frozenset(sizes))


@functools.cache
def ffprobe(path: Path) -> dict:
    """ffprobe's description of the first video stream, with nb_read_frames (-count_frames)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
                          "-show_streams", "-of", "json", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["streams"][0]


def ratio(text: str) -> Fraction:
    """ffprobe's "24/1" or "4:3"."""
    num, den = text.replace(":", "/").split("/")
    return Fraction(int(num), int(den))


def nearest_even(value: Fraction) -> int:
    half = value / 2
    assert half - int(half) != Fraction(1, 2), f"{value} is a tie: pick another test size"
    return 2 * round(half)


def display_aspect(path: Path) -> Fraction:
    """width x sample aspect ratio / height, per ffprobe (checked against its display_aspect_ratio)."""
    probe = ffprobe(path)
    sar = ratio(probe.get("sample_aspect_ratio", "1:1"))
    aspect = Fraction(probe["width"]) * sar / probe["height"]
    assert aspect == ratio(probe["display_aspect_ratio"])
    return aspect


# ---- fixtures ----

@pytest.fixture(scope="module")
def local(media):
    """Export "train" is the media library's directory, served in-process (embedded KV)."""
    with make_patcher(None, media.root) as patcher:
        yield patcher


@pytest.fixture(scope="module")
def pool(local):
    with local.open_video_reader_pool(max_readers=8) as pool:
        yield pool


@dataclasses.dataclass(frozen=True)
class Observed:
    metadata: fv.FluxonFsVideoMetadata  # patcher.video_metadata
    reader_metadata: fv.FluxonFsVideoMetadata
    length: int  # len(reader)
    timestamps: np.ndarray  # reader.timestamps_s()


@pytest.fixture(scope="module")
def observe(media, local):
    """What fluxon_video says of a clip, once per clip (no decode)."""
    cache: dict[str, Observed] = {}

    def observe_(name: str) -> Observed:
        if name not in cache:
            media.path(name)
            metadata = local.video_metadata("train", name)
            with local.open_video_reader("train", name, 32, 32) as reader:
                cache[name] = Observed(metadata, reader.metadata, len(reader),
                                       reader.timestamps_s())
        return cache[name]

    return observe_


# ---- 1. metadata against ffprobe and PyAV, on every test video ----

@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_reader_and_patcher_agree(observe, name):
    seen = observe(name)
    assert isinstance(seen.metadata, fv.FluxonFsVideoMetadata)
    assert seen.reader_metadata == seen.metadata
    assert seen.length == seen.metadata.num_frames
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen.metadata.num_frames = 1  # type: ignore[misc]


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_frame_count_is_the_sequential_decode_count(media, observe, name):
    path = media.path(name)
    assert observe(name).metadata.num_frames == len(pyav_decode(path).pts)
    assert observe(name).metadata.num_frames == int(ffprobe(path)["nb_read_frames"])


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_timestamps_are_pts_times_time_base(media, observe, name):
    timestamps = observe(name).timestamps
    assert timestamps.dtype == np.float64 and timestamps.ndim == 1
    np.testing.assert_allclose(timestamps, pyav_decode(media.path(name)).times, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_begin_end_duration_and_fps(media, observe, name):
    md = observe(name).metadata
    times = pyav_decode(media.path(name)).times
    probe = ffprobe(media.path(name))
    intervals = np.diff(times)
    assert md.begin_stream_seconds == pytest.approx(times[0], abs=1e-9)
    assert md.end_stream_seconds - md.begin_stream_seconds == pytest.approx(md.duration_seconds, abs=1e-9)
    # The last frame is shown for a while, and not longer than the longest frame interval.
    assert times[-1] < md.end_stream_seconds <= times[-1] + intervals.max() + 1e-3
    if "duration" in probe:  # MP4/AVI say; Matroska does not
        assert abs(md.duration_seconds - float(probe["duration"])) <= intervals[-1] + 1e-3
    if name in VFR_CLIPS:
        assert 1 / intervals.max() < md.average_fps < 1 / intervals.min()
    else:  # Ogg's demuxer leaves the average unknown (0/0): its stream rate then
        rate = probe["avg_frame_rate"] if probe["avg_frame_rate"] != "0/0" else probe["r_frame_rate"]
        assert md.average_fps == pytest.approx(float(ratio(rate)), rel=1e-3)


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_size_codec_and_format(media, observe, name):
    md = observe(name).metadata
    probe = ffprobe(media.path(name))
    assert pyav_decode(media.path(name)).sizes == {(md.width, md.height)}
    assert (md.width, md.height) == (probe["width"], probe["height"])
    assert md.codec == probe["codec_name"]
    assert md.pix_fmt == probe["pix_fmt"]
    assert Fraction(*md.sample_aspect_ratio) == ratio(probe.get("sample_aspect_ratio", "1:1"))
    assert md.color_range == probe.get("color_range", "unknown")
    assert md.color_space == probe.get("color_space", "unknown")
    assert md.rotation_deg == 0


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_keyframe_indices_are_the_decoded_key_frames(media, observe, name):
    assert observe(name).metadata.keyframe_indices == pyav_decode(media.path(name)).keyframes


@pytest.mark.parametrize("name", VIDEO_CLIPS)
def test_file_version(media, observe, name):
    st = os.stat(media.path(name))
    md = observe(name).metadata
    assert (md.size_bytes, md.mtime_ns) == (st.st_size, st.st_mtime_ns)


# ---- 2. time-based access: variable frame rate and an edit list ----

TIME_CLIPS = [*VFR_CLIPS, "h264_editlist.mp4"]


def probe_times(decoded: Decoded, md: fv.FluxonFsVideoMetadata) -> np.ndarray:
    """Every frame's time, the midpoints, both ends of [begin_s, end_s), and random times."""
    times = decoded.times
    rng = np.random.default_rng(len(times))
    return np.concatenate([times, (times[:-1] + times[1:]) / 2,
                           [md.begin_stream_seconds, np.nextafter(md.end_stream_seconds, -np.inf)],
                           rng.uniform(md.begin_stream_seconds, md.end_stream_seconds, 40)])


@pytest.mark.parametrize("name", TIME_CLIPS)
def test_indices_at_times_are_the_frames_displayed(media, local, name):
    decoded = pyav_decode(media.path(name))
    with local.open_video_reader("train", name, H, W) as reader:
        ts = probe_times(decoded, reader.metadata)
        got = reader.indices_at_times(ts)
        assert got == [decoded.displayed_at(t) for t in ts]
        assert reader.indices_at_times(reader.timestamps_s()) == list(range(len(reader)))
        assert reader.indices_at_times(float(ts[5])) == [decoded.displayed_at(ts[5])]
        # A time that float arithmetic left a hair below a frame's pts (0.587 + 1.5 is
        # 2.0869999999999997) is that frame's time, not the previous frame's.
        below = np.nextafter(reader.timestamps_s()[1:], -np.inf)
        assert reader.indices_at_times(below) == list(range(1, len(reader)))


@pytest.mark.parametrize("name", TIME_CLIPS)
def test_times_outside_begin_end_raise(local, name):
    with local.open_video_reader("train", name, H, W) as reader:
        md = reader.metadata
        for bad in [md.begin_stream_seconds - 1e-3, md.end_stream_seconds, md.end_stream_seconds + 1.0, -5.0, float("nan")]:
            with pytest.raises(fv.FluxonFsFrameIndexError) as info:
                reader.indices_at_times([md.begin_stream_seconds, bad])
            assert isinstance(info.value, IndexError)
        # A hair before the first frame is frame 0 within the default tolerance
        # (float32 rounding), outside the video without one (test_time_tolerance.py).
        hair = np.nextafter(md.begin_stream_seconds, -np.inf)
        assert reader.indices_at_times([hair]) == [0]
        with pytest.raises(fv.FluxonFsFrameIndexError):
            reader.indices_at_times([hair], tolerance_s=0)
        assert reader.indices_at_times([md.begin_stream_seconds]) == [0]  # still usable


@pytest.mark.parametrize("name", TIME_CLIPS)
def test_reading_by_time_equals_the_cli(media, local, name):
    decoded = pyav_decode(media.path(name))
    ref = media.reference(name, H, W)
    with local.open_video_reader("train", name, H, W) as reader:
        ts = probe_times(decoded, reader.metadata)[len(decoded.pts):][::4]  # midpoints, ends, random
        frames = reader.read_frames_numpy(reader.indices_at_times(ts))
    np.testing.assert_array_equal(frames, ref[[decoded.displayed_at(t) for t in ts]])


@pytest.mark.parametrize("name", VFR_CLIPS)
def test_vfr_file_defeats_indices_from_the_average_fps(media, observe, name):
    """Sanity: the file is really VFR, so the test above is one an fps-based rule fails."""
    decoded = pyav_decode(media.path(name))
    md = observe(name).metadata
    intervals = {round(float(b - a), 3) for a, b in zip(decoded.pts, decoded.pts[1:])}
    assert len(intervals) >= 3  # 1/24, 1/8 and 1/12 s
    ts = np.linspace(md.begin_stream_seconds, md.end_stream_seconds, 200, endpoint=False)
    truth = np.array([decoded.displayed_at(t) for t in ts])
    naive = np.minimum(np.floor((ts - md.begin_stream_seconds) * md.average_fps).astype(int), md.num_frames - 1)
    assert (naive != truth).mean() > 0.5
    assert np.abs(decoded.times[naive] - ts).max() > 0.5  # seconds off


# ---- 3. negative indices ----

@pytest.mark.parametrize("name", ["h264_moov_end.mp4", "vp9.webm", "mpeg4.avi"])
def test_negative_indices_on_the_reader(media, local, name):
    count = int(ffprobe(media.path(name))["nb_read_frames"])
    ref = media.reference(name, H, W)
    with local.open_video_reader("train", name, H, W) as reader:
        frames = reader.read_frames_numpy([-1, 0, -2, -count])
        np.testing.assert_array_equal(frames, ref[[count - 1, 0, count - 2, 0]])
        for bad in (-count - 1, count):
            with pytest.raises(fv.FluxonFsFrameIndexError,
                               match=rf"frame index {bad} is out of range: the video has {count} frames"):
                reader.read_frames_numpy([0, bad])
        np.testing.assert_array_equal(reader.read_frames_numpy([-3]), ref[[count - 3]])


def test_negative_indices_in_the_pool_and_requests(media, pool):
    a, b = "h264_faststart.mp4", "hevc.mp4"
    n_a, n_b = (int(ffprobe(media.path(x))["nb_read_frames"]) for x in (a, b))
    ref_a, ref_b = media.reference(a, H, W), media.reference(b, H, W)
    frames = pool.read_frames_numpy(export_name="train", relpath=a, height=H, width=W,
                                    num_threads=1, indices=[-1, 0, -2])
    np.testing.assert_array_equal(frames, ref_a[[n_a - 1, 0, n_a - 2]])
    with pytest.raises(fv.FluxonFsFrameIndexError, match=f"the video has {n_a} frames"):
        pool.read_frames_numpy(export_name="train", relpath=a, height=H, width=W,
                               num_threads=1, indices=[-n_a - 1])

    request = fv.FluxonFsVideoReadRequest
    results = pool.read_many_numpy_with_stats([
        request("train", a, H, W, 1, (-1, 0)),
        request("train", a, H, W, 1, (n_a - 1, -n_a, -5)),  # same key: one union decode
        request("train", b, H, W, 1, (-3, 2)),
    ])
    np.testing.assert_array_equal(results[0].frames, ref_a[[n_a - 1, 0]])
    np.testing.assert_array_equal(results[1].frames, ref_a[[n_a - 1, 0, n_a - 5]])
    np.testing.assert_array_equal(results[2].frames, ref_b[[n_b - 3, 2]])
    assert results[0].group_size == results[1].group_size == 2
    for bad in (-n_b - 1, n_b):
        with pytest.raises(fv.FluxonFsFrameIndexError,
                           match=rf"requests\[1\]: .*the video has {n_b} frames"):
            pool.read_many_numpy_with_stats([request("train", a, H, W, 1, (-1,)),
                                             request("train", b, H, W, 1, (bad,))])


# ---- 4. out= ----

def test_out_decodes_into_a_slot_of_a_batch(media, local, pool):
    name = "h264_moov_end.mp4"
    ref = media.reference(name, H, W)
    indices = [3, 40, -1]
    batch = np.zeros((4, len(indices), H, W, 3), np.uint8)
    with local.open_video_reader("train", name, H, W) as reader:
        slot = batch[1]
        assert reader.read_frames_numpy(indices, out=slot) is slot
    np.testing.assert_array_equal(batch[1], ref[[3, 40, len(ref) - 1]])
    assert not batch[[0, 2, 3]].any()

    slot = batch[2]
    got = pool.read_frames_numpy(export_name="train", relpath=name, height=H, width=W,
                                 num_threads=1, indices=[5, 6, 7], out=slot)
    assert got is slot
    np.testing.assert_array_equal(batch[2], ref[[5, 6, 7]])
    assert not batch[[0, 3]].any()


def bad_outs(count: int) -> dict[str, object]:
    shape = (count, H, W, 3)
    readonly = np.zeros(shape, np.uint8)
    readonly.setflags(write=False)
    return {
        "too few frames": np.zeros((count - 1, H, W, 3), np.uint8),
        "height and width swapped": np.zeros((count, W, H, 3), np.uint8),
        "four channels": np.zeros((count, H, W, 4), np.uint8),
        "no frame axis": np.zeros((H, W, 3), np.uint8),
        "float32": np.zeros(shape, np.float32),
        "int16": np.zeros(shape, np.int16),
        "a strided slot of a batch": np.zeros((count, 2, H, W, 3), np.uint8)[:, 0],
        "every other channel": np.zeros((count, H, W, 6), np.uint8)[..., ::2],
        "transposed": np.zeros((3, W, H, count), np.uint8).T,
        "Fortran order": np.asfortranarray(np.zeros(shape, np.uint8)),
        "read-only": readonly,
        "a list": [[0]] * count,
    }


def test_bad_out_raises_value_error_before_decoding(local):
    indices = [10, 20, 30]
    outs = bad_outs(len(indices))
    for label in ("a strided slot of a batch", "every other channel", "transposed", "Fortran order",
                  "read-only"):  # only the layout is wrong
        assert outs[label].shape == (3, H, W, 3) and outs[label].dtype == np.uint8, label
    with local.open_video_reader("train", "h264_moov_end.mp4", H, W) as reader:
        for label, out in outs.items():  # on a fresh reader...
            with pytest.raises(ValueError):
                reader.read_frames_numpy(indices, out=out)
            assert reader.last_stats is None, label
        reader.read_frames_numpy([0])
        stats = reader.last_stats
        for label, out in outs.items():  # ...and after a read
            with pytest.raises(ValueError):
                reader.read_frames_numpy(indices, out=out)
            assert reader.last_stats is stats, label
            if isinstance(out, np.ndarray):
                assert not out.any(), f"{label}: written to"
        assert reader.read_frames_numpy(indices).shape == (3, H, W, 3)  # still usable


# ---- 5. native size and kept aspect ratio ----

SIZE_CLIPS = ["h264_340x194.mp4", "odd_321x241.mp4", "vp9.webm", "h264_sar4x3.mp4"]


@pytest.mark.parametrize("name", SIZE_CLIPS)
def test_native_size_is_the_decoded_size(media, local, pool, name):
    (width, height), = pyav_decode(media.path(name)).sizes
    ref = media.reference(name, height, width)
    with local.open_video_reader("train", name) as reader:
        assert (reader.height, reader.width) == (height, width)
        frames = reader.read_frames_numpy([0, len(ref) // 2, -1])
    assert frames.shape == (3, height, width, 3)
    np.testing.assert_array_equal(frames, ref[[0, len(ref) // 2, len(ref) - 1]])
    frames = pool.read_frames_numpy(export_name="train", relpath=name, height=None, width=None,
                                    num_threads=1, indices=[1])
    np.testing.assert_array_equal(frames, ref[[1]])


@pytest.mark.parametrize("name", SIZE_CLIPS)
@pytest.mark.parametrize("given", [("width", 110), ("height", 50)])
def test_one_size_keeps_the_display_aspect(media, local, name, given):
    aspect = display_aspect(media.path(name))
    side, value = given
    if side == "width":
        expected = (nearest_even(value / aspect), value)
        kwargs = {"height": None, "width": value}
    else:
        expected = (value, nearest_even(value * aspect))
        kwargs = {"height": value, "width": None}
    if name == "h264_sar4x3.mp4":  # the sample aspect ratio really changes the answer
        probe = ffprobe(media.path(name))
        square = Fraction(probe["width"], probe["height"])
        assert expected != ((nearest_even(value / square), value) if side == "width"
                            else (value, nearest_even(value * square)))
    ref = media.reference(name, *expected)
    with local.open_video_reader("train", name, **kwargs) as reader:
        assert (reader.height, reader.width) == expected
        frames = reader.read_frames_numpy([0, -1])
    np.testing.assert_array_equal(frames, ref[[0, len(ref) - 1]])


# ---- 6. a truncated MP4 ----

def test_truncated_mp4_counts_the_frames_that_decode(media, local):
    path = media.path(TRUNCATED)
    probe = ffprobe(path)
    count = int(probe["nb_read_frames"])
    assert (count, int(probe["nb_frames"])) == (89, 90)  # the sample table lists one frame more
    ref = media.reference(TRUNCATED, H, W)
    assert len(ref) == count
    assert local.video_metadata("train", TRUNCATED).num_frames == count
    with local.open_video_reader("train", TRUNCATED, H, W) as reader:
        assert len(reader) == count
        np.testing.assert_array_equal(reader.read_frames_numpy([count - 1, -1]), ref[[-1, -1]])
        with pytest.raises(fv.FluxonFsFrameIndexError,
                           match=rf"frame index {count} is out of range: the video has {count} frames"):
            reader.read_frames_numpy([count])
        np.testing.assert_array_equal(reader.read_frames_numpy(range(count)), ref)


# ---- 7. numpy integers ----

def test_numpy_integers_for_sizes_and_indices(media, local, pool):
    name = "h264_faststart.mp4"
    ref = media.reference(name, 32, 48)
    n = len(ref)
    with local.open_video_reader("train", name, np.int64(32), np.int32(48), np.int64(1)) as reader:
        assert (reader.height, reader.width, reader.num_threads) == (32, 48, 1)
        np.testing.assert_array_equal(
            reader.read_frames_numpy([np.int64(5), np.int32(-1), np.uint8(7)]), ref[[5, n - 1, 7]])
        np.testing.assert_array_equal(reader.read_frames_numpy(np.array([9, -2], np.int64)),
                                      ref[[9, n - 2]])
        np.testing.assert_array_equal(reader.read_frames_numpy(np.arange(3, 6, dtype=np.uint16)),
                                      ref[3:6])
    frames = pool.read_frames_numpy(export_name="train", relpath=name, height=np.int64(32),
                                    width=np.int32(48), num_threads=np.int64(1),
                                    indices=np.array([0, -1], np.int32))
    np.testing.assert_array_equal(frames, ref[[0, n - 1]])
    request = fv.FluxonFsVideoReadRequest("train", name, np.int64(32), np.int16(48), np.int8(1),
                                          (np.int64(2), np.int32(-2)))
    assert request.indices == (2, -2) and request.height == 32
    result, = pool.read_many_numpy_with_stats([request])
    np.testing.assert_array_equal(result.frames, ref[[2, n - 2]])


# ---- 8. metadata from the KV in another process ----

def metadata_in_this_process(agent_url: str, root: str, redis_url: str, relpath: str):
    """Run in a fresh (spawned) process: a new patcher on the same Redis."""
    with make_patcher(agent_url, root, redis_url) as patcher:
        metadata, stats = patcher.video_metadata_with_stats("train", relpath)
    return metadata, stats


@pytest.mark.parametrize("name", ["h264_moov_end.mp4", "vp9.webm"])
def test_second_process_gets_metadata_from_the_kv(agent, export_root, redis_url, name):
    relpath = f"bucket/videos/{name}"
    with make_patcher(agent.url, export_root, redis_url) as patcher:
        first, stats = patcher.video_metadata_with_stats("train", relpath)
        assert stats.index_source == "scan"
        assert stats.remote_bytes > 0  # from the agent (with the stat, or read)
        with patcher.open_video_reader_pool() as pool:
            assert pool.video_metadata("train", relpath) == patcher.video_metadata("train", relpath)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as executor:
        second, stats = executor.submit(metadata_in_this_process, agent.url, str(export_root),
                                        redis_url, relpath).result(timeout=60)
    assert stats.index_source == "kv"
    assert (stats.remote_reads, stats.remote_bytes) == (0, 0)
    assert second == first


# ---- 9. a file that is not a video ----

@pytest.fixture(scope="module")
def exported(export_root):
    with make_patcher(None, export_root) as patcher:
        yield patcher


@pytest.mark.parametrize("name", ["garbage.mp4", "audio_only.m4a"])
def test_not_a_video(exported, name):
    relpath = f"bucket/videos/{name}"
    with pytest.raises(fv.FluxonFsDecodeError, match=name):
        exported.video_metadata("train", relpath)
    with exported.open_video_reader("train", relpath, 32, 32) as reader:
        for what in (lambda: reader.metadata, lambda: len(reader), reader.timestamps_s,
                     lambda: reader.indices_at_times([0.0])):
            with pytest.raises(fv.FluxonFsDecodeError, match=name):
                what()
    for height, width in [(None, None), (None, 32), (32, None)]:
        if name == "garbage.mp4":
            with pytest.raises(fv.FluxonFsDecodeError, match=name):
                exported.open_video_reader("train", relpath, height, width)
            continue
        # An audio-only file opens for its audio (docs/audio.md); it has no frames.
        with exported.open_video_reader("train", relpath, height, width) as reader:
            assert not reader.has_video
            assert reader.read_frames_numpy([]).shape[0] == 0
            with pytest.raises(fv.FluxonFsNoVideoStreamError, match=name):
                reader.read_frames_numpy([0])


# ---- the audio stream, from the header ----

def ffprobe_audio(path) -> dict | None:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                          "stream=index,codec_name,sample_rate,channels,channel_layout,"
                          "start_time,duration", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    streams = json.loads(out)["streams"]
    return streams[0] if streams else None


@pytest.fixture(scope="module")
def stereo_webm(tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "stereo.webm"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    "testsrc2=size=64x48:rate=24", "-f", "lavfi", "-i",
                    "sine=frequency=440:sample_rate=48000", "-filter_complex",
                    "[1:a]pan=stereo|c0=c0|c1=c0[a]", "-map", "0:v", "-map", "[a]", "-t", "2",
                    "-c:v", "libvpx-vp9", "-deadline", "realtime", "-c:a", "libopus",
                    str(path)], check=True)
    return path


@pytest.mark.parametrize("which", ["h264_faststart.mp4", "stereo", "vp9.webm"])
def test_audio_metadata_is_ffprobes(media, stereo_webm, tmp_path, which):
    path = stereo_webm if which == "stereo" else media.path(which)
    expected = ffprobe_audio(path)
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(path, root / path.name)
    with make_patcher(None, root) as patcher:
        audio = patcher.video_metadata("train", path.name).audio  # from the index: no decode
    if expected is None:
        assert audio is None
        return
    assert (audio.stream_index, audio.codec, audio.sample_rate, audio.num_channels, audio.layout) == (
        expected["index"], expected["codec_name"], int(expected["sample_rate"]),
        expected["channels"], expected["channel_layout"])
    assert audio.begin_stream_seconds == pytest.approx(float(expected["start_time"]), abs=1e-3)
    if "duration" in expected:
        assert audio.duration_seconds == pytest.approx(float(expected["duration"]), abs=1e-3)
