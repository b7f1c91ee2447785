"""Frames by time with a tolerance (docs/frame-index.md, "Frames by time").

LeRobot stores its rows' timestamps as float32, so ``from_timestamp +
timestamp`` lands up to a few float32 ulp from the frame's pts, below it for
about a third of the frames; under "last pts <= t" those rows got the previous
frame. A time within ``tolerance_s`` (1e-4 s by default) of a frame's pts now
names that frame, the nearest; any other time keeps "last pts <= t", and a
time neither near a frame nor inside ``[begin_s, end_s)`` is
FluxonFsFrameIndexError.

Oracles from outside fluxon_video: every frame's exact time from ffprobe
(integer pts x time_base) and every frame from the ffmpeg CLI (tests/media.py).
Checked through the reader, the pool's requests, the dataset and the CLI.
"""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import cli
from tests.helpers import IDENTITIES, make_patcher

pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(120)

H, W = 48, 64
TOL = 1e-4  # the documented default
# Codecs and containers: H.264/MP4 with B-frames, HEVC, VP9/WebM, AV1/Matroska,
# MPEG-TS (starts at 1.48 s), MPEG-4 part 2/AVI, and both VFR clips.
CLIPS = ["h264_moov_end.mp4", "hevc.mp4", "vp9.webm", "av1.mkv", "h264.ts",
         "mpeg4_nobf.avi", "h264_vfr.mkv", "h264_vfr.mp4"]
VFR = "h264_vfr.mkv"


def ffprobe_times(path: Path) -> np.ndarray:
    """Every frame's time in output order, from ffprobe's integer timestamps:
    pts x time_base exactly, then rounded once to float64."""
    out = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "stream=time_base:frame=best_effort_timestamp", "-of", "json", str(path)],
        check=True, capture_output=True, text=True).stdout)
    base = Fraction(out["streams"][0]["time_base"])
    return np.array([float(int(f["best_effort_timestamp"]) * base) for f in out["frames"]])


def lerobot_times(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, the frame each one means) as LeRobot makes them: each frame's pts
    stored as float32, and rows of episodes starting at several frames, a
    float32 ``from_timestamp`` plus the row's float32 ``timestamp``, summed in
    float32 (torch tensors) and in float64 (LeRobot's Python floats)."""
    n = len(times)
    out, frames = [times.astype(np.float32).astype(np.float64)], [np.arange(n)]
    for start in (0, n // 3, 2 * n // 3):
        begin = np.float32(times[start])
        rows = (times[start:] - times[start]).astype(np.float32)
        out += [(begin + rows).astype(np.float64), np.float64(begin) + rows.astype(np.float64)]
        frames += [np.arange(start, n)] * 2
    return np.concatenate(out), np.concatenate(frames)


def named_frame(times: np.ndarray, t: float, tolerance: float) -> int | None:
    """The documented rule restated on ffprobe's times: the nearest frame within
    the tolerance (a tie: the earlier), else the last frame whose time <= t
    (1 ns slack), for t inside the video; None for a time that names no frame."""
    distance = np.abs(times - t)
    nearest = int(np.argmin(distance))  # the first of equals: the earlier frame
    if distance[nearest] <= tolerance:
        return nearest
    shown = np.flatnonzero(times <= t + 1e-9)
    return int(shown[-1]) if shown.size else None


@pytest.fixture(scope="module")
def oracle(media):
    """name -> (ffprobe's times, the CLI's frames at H x W)."""
    return {name: (ffprobe_times(media.path(name)), media.reference(name, H, W)) for name in CLIPS}


@pytest.fixture(scope="module")
def local(media):
    """Export "train" over the media library, served in-process."""
    with make_patcher(None, media.root) as patcher:
        yield patcher


# ---- the reader ----

@pytest.mark.parametrize("name", CLIPS)
def test_float32_times_select_the_frame_they_came_from(media, oracle, name):
    """Every frame, by its pts and LeRobot's row sums through float32: the
    nearest frame of ffprobe's, and the CLI's pixels (0 wrong). Before the
    tolerance about a third of these got the previous frame."""
    times, ref = oracle[name]
    probes, meant = lerobot_times(times)
    # The oracle: each probe is nearest the frame it came from, well within 1e-4 s.
    assert [named_frame(times, t, TOL) for t in probes] == meant.tolist()
    assert np.abs(probes - times[meant]).max() < 1e-6
    with fv.open_video(media.path(name), H, W) as reader:
        assert reader.indices_at_times(probes) == meant.tolist()
        batch = reader.get_frames_played_at(probes)
    assert batch.indices.tolist() == meant.tolist()
    wrong = [int(k) for k in np.flatnonzero(np.any(batch.data != ref[meant], axis=(1, 2, 3)))]
    assert wrong == [], f"{name}: frames {wrong} differ from the CLI's"


@pytest.mark.parametrize("name", CLIPS)
def test_without_the_tolerance_float32_times_miss(media, oracle, name):
    """tolerance_s=0 is the old rule ("last pts <= t" within 1 ns), exactly:
    the float32 times that fall below their pts get the previous frame."""
    times, _ = oracle[name]
    probes, meant = lerobot_times(times)
    inside = probes >= times[0]  # the old rule has no frame before the first
    rng = np.random.default_rng(7)
    others = np.concatenate([times, (times[:-1] + times[1:]) / 2, times[1:] - 2e-4,
                             times[1:] - 5e-5, np.nextafter(times[1:], -np.inf),
                             rng.uniform(times[0], times[-1], 50)])
    with fv.open_video(media.path(name)) as reader:
        strict = reader.indices_at_times(probes[inside], tolerance_s=0)
        assert strict == [int(np.searchsorted(times, t + 1e-9, side="right") - 1)
                          for t in probes[inside]]
        missed = np.flatnonzero(np.array(strict) != meant[inside])
        assert missed.size > 0 and (probes[inside][missed] < times[meant[inside][missed]]).all()
        assert (np.array(strict)[missed] == meant[inside][missed] - 1).all()
        assert reader.indices_at_times(others, tolerance_s=0) == [
            named_frame(times, t, 0.0) for t in others]


@pytest.mark.parametrize("name", CLIPS)
def test_times_at_below_and_above_a_frame(media, oracle, name):
    times, _ = oracle[name]
    n = len(times)
    with fv.open_video(media.path(name)) as reader:
        # Exactly at a pts: that frame, with any tolerance.
        assert reader.indices_at_times(times) == list(range(n))
        assert reader.indices_at_times(times, tolerance_s=0) == list(range(n))
        # Below a pts by more than the tolerance: the frame shown then, the previous one.
        assert reader.indices_at_times(times[1:] - 1.5 * TOL) == list(range(n - 1))
        # Within it, below or above: that frame.
        assert reader.indices_at_times(times[1:] - 0.9 * TOL) == list(range(1, n))
        assert reader.indices_at_times(times + 0.9 * TOL) == list(range(n))
        # Above by more: still that frame (the one shown then).
        assert reader.indices_at_times(times + 1.5 * TOL) == list(range(n))
        # A tolerance of a third of a frame: each time goes to the nearest frame.
        wide = float(np.diff(times).min()) / 3
        probes = np.concatenate([times[1:] - 0.9 * wide, times[:-1] + 0.9 * wide])
        assert reader.indices_at_times(probes, tolerance_s=wide) == [
            *range(1, n), *range(n - 1)]


@pytest.mark.parametrize("name", CLIPS)
def test_the_first_frame_and_the_ends_of_the_video(media, oracle, name):
    times, _ = oracle[name]
    with fv.open_video(media.path(name)) as reader:
        md = reader.metadata
        assert md.begin_stream_seconds == times[0]
        # float32 rounding below the start: frame 0, not an error.
        for t in (times[0] - 0.5 * TOL, np.nextafter(times[0], -np.inf), times[0] - 0.99 * TOL):
            assert reader.indices_at_times([t]) == [0]
            assert reader.get_frames_played_at([t]).indices.tolist() == [0]
        assert reader.indices_at_times([times[0] - 0.004], tolerance_s=0.005) == [0]
        # Neither within the tolerance of a frame nor inside [begin_s, end_s).
        for bad in (times[0] - 1.5 * TOL, md.end_stream_seconds, md.end_stream_seconds + 0.5 * TOL, md.end_stream_seconds + 1.0):
            with pytest.raises(fv.FluxonFsFrameIndexError, match="outside the video"):
                reader.indices_at_times([times[0], bad])
        with pytest.raises(fv.FluxonFsFrameIndexError, match="outside the video"):
            reader.indices_at_times([np.nextafter(times[0], -np.inf)], tolerance_s=0)
        # The last frame is shown until end_s (exclusive).
        assert reader.indices_at_times([np.nextafter(md.end_stream_seconds, -np.inf)]) == [len(times) - 1]


def test_a_tie_goes_to_the_frame_shown_then(media, oracle):
    """Halfway between two frames, with a tolerance that reaches both: the
    earlier one (what "last pts <= t" shows then). Frame 0 is at 0 s, so the
    midpoint and both distances are exact."""
    times, _ = oracle[VFR]
    assert times[0] == 0.0
    half = times[1] / 2
    with fv.open_video(media.path(VFR)) as reader:
        assert reader.indices_at_times([half], tolerance_s=half) == [0]
        assert reader.indices_at_times([np.nextafter(half, np.inf)], tolerance_s=half) == [1]


@pytest.mark.parametrize("name", [VFR, "h264.ts"])
def test_ranges_by_time_take_float32_bounds(media, oracle, name):
    """``get_frames_played_in_range(start, stop)``: a pts within the tolerance of
    a bound is at it (in at the start, out at the stop); with ``fps`` each
    sample time names its frame; a float32 start below the first frame is in."""
    times, ref = oracle[name]
    n = len(times)
    with fv.open_video(media.path(name), H, W) as reader:
        for first, last in [(0, n // 2), (3, n - 1), (n // 3, n)]:
            stop = reader.metadata.end_stream_seconds if last == n else times[last]
            for start_s, stop_s in [(np.float32(times[first]), np.float32(stop)),
                                    (times[first] - 0.5 * TOL, stop - 0.5 * TOL),
                                    (times[first] + 0.5 * TOL, stop + 0.5 * TOL)]:
                got = reader.get_frames_played_in_range(float(start_s), float(stop_s))
                assert got.indices.tolist() == list(range(first, last)), (start_s, stop_s)
        assert np.array_equal(got.data, ref[first:last])
        start = float(np.float32(times[0]))
        sampled = reader.get_frames_played_in_range(start, start + 1.0, fps=8)
        assert sampled.indices.tolist() == [named_frame(times, start + k / 8, TOL)
                                            for k in range(8)]
        strict = reader.get_frames_played_in_range(times[1] + 0.5 * TOL, times[5], tolerance_s=0)
        assert strict.indices.tolist() == [2, 3, 4]
        with pytest.raises(fv.FluxonFsFrameIndexError):
            reader.get_frames_played_in_range(times[0] - 1.5 * TOL, times[5])
        with pytest.raises(fv.FluxonFsFrameIndexError):
            reader.get_frames_played_in_range(times[0], reader.metadata.end_stream_seconds + 1.5 * TOL)


BAD_TOLERANCES = [-1e-4, float("nan"), float("inf"), "1e-4", None, True]


def test_bad_tolerances_are_config_errors(media):
    with fv.open_video(media.path("h264_faststart.mp4")) as reader:
        calls = [lambda t: reader.indices_at_times([0.5], tolerance_s=t),
                 lambda t: reader.get_frames_played_at([0.5], tolerance_s=t),
                 lambda t: reader.get_frames_played_in_range(0.0, 1.0, tolerance_s=t),
                 lambda t: reader.get_frames_played_in_range(0.0, 1.0, fps=4, tolerance_s=t),
                 lambda t: reader.get_clip_played_in_range(0.0, 1.0, tolerance_s=t)]
        for call in calls:
            for bad in BAD_TOLERANCES:
                with pytest.raises(fv.FluxonFsConfigError, match="tolerance_s must be a finite"):
                    call(bad)
        assert reader.indices_at_times([0.5], tolerance_s=np.float32(0.01)) == [12]
        assert reader.indices_at_times([0.5], tolerance_s=0) == [12]  # an int is a number


# ---- the pool's requests ----

def test_pool_requests_by_time(local, oracle):
    """``FluxonFsVideoReadRequest(times_s=...)``: float32 times select the CLI's
    frames, every frame of three videos, mixed with requests by index in one
    batched read."""
    names = [VFR, "h264_moov_end.mp4", "vp9.webm"]

    def requests_for(parts_of) -> tuple[list, list]:
        requests, expected = [], []
        for name in names:
            times, ref = oracle[name]
            probes, meant = lerobot_times(times)
            for part in parts_of(len(probes)):
                requests.append(fv.FluxonFsVideoReadRequest("train", name, H, W, 1,
                                                            times_s=probes[part]))
                expected.append(ref[meant[part]])
            requests.append(fv.FluxonFsVideoReadRequest("train", name, H, W, 1, (2, 5)))
            expected.append(ref[[2, 5]])
        return requests, expected

    with local.open_video_reader_pool() as pool:
        requests, expected = requests_for(lambda n: np.array_split(np.arange(n), 3))
        for result, want in zip(pool.read_many_numpy_with_stats(requests), expected):
            np.testing.assert_array_equal(result.frames, want)
        # With idle readers and spare cores, a group of clips far apart is split in two
        # (pool._split_groups): its plan maps the times through an idle reader.
        ends, end_frames = requests_for(lambda n: [np.arange(10), np.arange(n - 4, n)])
        before = pool.counters().native_calls
        for result, want in zip(pool.read_many_numpy_with_stats(ends, max_workers=6), end_frames):
            np.testing.assert_array_equal(result.frames, want)
        assert pool.counters().native_calls - before > len(names)
        # Without the tolerance, some of those frames are the previous ones.
        strict = [fv.FluxonFsVideoReadRequest("train", VFR, H, W, 1, times_s=r.times_s,
                                              tolerance_s=0.0) for r in requests[:3]]
        got = np.concatenate([r.frames for r in pool.read_many_numpy_with_stats(strict)])
        assert not np.array_equal(got, np.concatenate(expected[:3]))
        # A time that names no frame: the documented error, naming the requests.
        late = fv.FluxonFsVideoReadRequest("train", VFR, H, W, 1, times_s=[0.5, 99.0])
        with pytest.raises(fv.FluxonFsFrameIndexError, match=r"requests\[0, 1\]: .*outside"):
            pool.read_many_numpy_with_stats([requests[0], late])


def test_bad_requests_by_time():
    make = fv.FluxonFsVideoReadRequest
    for bad in BAD_TOLERANCES:
        with pytest.raises(fv.FluxonFsConfigError, match="tolerance_s must be a finite"):
            make("train", "a.mp4", H, W, 1, times_s=[0.5], tolerance_s=bad)
    with pytest.raises(fv.FluxonFsConfigError, match="by indices or by times_s, not both"):
        make("train", "a.mp4", H, W, 1, (0,), times_s=[0.5])
    for bad in ("0.5", 0.5, ["a"], [None]):
        with pytest.raises(TypeError, match="times must be a sequence of seconds"):
            make("train", "a.mp4", H, W, 1, times_s=bad)
    request = make("train", "a.mp4", H, W, 1, times_s=np.float32([0.1]))
    assert request.times_s == (float(np.float32(0.1)),) and request.tolerance_s == TOL


# ---- the dataset ----

def test_dataset_time_clips_follow_the_rule(media, local, oracle):
    """Time-based clips name their frames by the same rule, with the dataset's
    ``tolerance_s``: 0 is "last pts <= t", a third of a frame rounds each sample
    time to a near frame; frames are the CLI's either way."""
    torch_module = pytest.importorskip("fluxon_video.torch")
    times, ref = oracle[VFR]
    wide = float(np.diff(times).min()) / 3
    for tolerance in (0.0, TOL, wide):
        dataset = torch_module.VideoClipDataset(
            local, "train", [VFR], clip_duration_s=1.0, fps=10, clips_per_video=4, height=H,
            width=W, seed=5, tolerance_s=tolerance)
        for i in range(len(dataset)):
            _, indices, when = dataset.clip_with_times(i)
            assert indices == [named_frame(times, t, tolerance) for t in when]
        for item in dataset.__getitems__([0, 3]):
            np.testing.assert_array_equal(item["frames"].numpy(), ref[item["indices"].numpy()])
    for bad in BAD_TOLERANCES:
        with pytest.raises(fv.FluxonFsConfigError, match="tolerance_s must be a finite"):
            torch_module.VideoClipDataset(local, "train", [VFR], clip_duration_s=1.0, fps=10,
                                          tolerance_s=bad)


# ---- the CLI ----

@pytest.fixture(scope="module")
def config_file(tmp_path_factory, media) -> Path:
    path = tmp_path_factory.mktemp("tolerance-config") / "fluxon.toml"
    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    path.write_text(f'[identities]\n{identities}\n\n[[exports]]\nname = "train"\n'
                    f'root = "{media.root}"\nallow = ["alice"]\n')
    path.chmod(0o600)
    return path


def test_cli_read_times_with_a_tolerance(oracle, config_file, tmp_path, capsys):
    times, ref = oracle[VFR]
    probes, meant = lerobot_times(times)
    below = np.flatnonzero(probes < times[meant] - 1e-9)[:4]  # float32 times under their pts
    assert below.size == 4
    listed = ",".join(repr(float(t)) for t in probes[below])

    def read(*extra: str) -> list[dict]:
        code = cli.main(["read", f"train:{VFR}", "--times", listed, "--size", f"{W}x{H}",
                         "--format", "npy", "--out", str(tmp_path), "--json",
                         "--config", str(config_file), "--identity", "alice", *extra])
        assert code == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    rows = read()
    assert [row["frame"] for row in rows] == meant[below].tolist()
    for row in rows:
        np.testing.assert_array_equal(np.load(row["file"]), ref[row["frame"]])
    assert [row["frame"] for row in read("--tolerance-s", "0")] == (meant[below] - 1).tolist()
    for bad in ("-1", "nan"):
        assert cli.main(["read", f"train:{VFR}", "--times", "0.5", "--out", str(tmp_path),
                         "--tolerance-s", bad, "--config", str(config_file),
                         "--identity", "alice"]) == 1
        assert "tolerance_s must be a finite number" in capsys.readouterr().err
    assert cli.main(["read", f"train:{VFR}", "--times", repr(float(times[0] - 1.5 * TOL)),
                     "--out", str(tmp_path), "--config", str(config_file),
                     "--identity", "alice"]) == 1
    assert "outside the video" in capsys.readouterr().err
