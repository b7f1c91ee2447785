"""What a torchcodec or decord user reaches for: frames with their times,
time and index ranges, indexing and iteration, torch tensors and layouts.
Oracles: the ffmpeg CLI's frames and ffprobe's frame times."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors

torch = pytest.importorskip("torch")
pytest.importorskip("fluxon_video._decode")

H, W = 36, 64
CLIPS = ["h264_moov_end.mp4", "h264_vfr.mkv", "vp9.webm"]


def ffprobe_times(path) -> np.ndarray:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "frame=best_effort_timestamp_time", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return np.array([float(f["best_effort_timestamp_time"]) for f in json.loads(out)["frames"]])


@pytest.mark.parametrize("name", CLIPS)
def test_frames_come_with_their_times(media, name):
    path, expected = media.path(name), media.reference(name, H, W)
    times = ffprobe_times(path)
    with fv.open_video(path, H, W) as reader:
        batch = reader.get_frames_at([3, -1, 10])
        assert np.array_equal(batch.data, expected[[3, -1, 10]])
        assert batch.indices.tolist() == [3, len(expected) - 1, 10]
        assert np.allclose(batch.pts_seconds, times[batch.indices], atol=1e-6)
        inner = [3, 10]  # a frame lasts until the next one starts
        assert np.allclose(batch.duration_seconds[[0, 2]], times[[4, 11]] - times[inner], atol=1e-6)
        assert batch.duration_seconds[1] > 0

        probes = [times[5] + 1e-3, (times[20] + times[21]) / 2, times[-1] + 1e-3]  # ffprobe: 6 decimals
        played = reader.get_frames_played_at(probes)
        assert played.indices.tolist() == [5, 20, len(times) - 1]
        assert np.array_equal(played.data, expected[played.indices])


@pytest.mark.parametrize("name", CLIPS)
def test_ranges_by_index_and_by_time(media, name):
    path, expected = media.path(name), media.reference(name, H, W)
    times = ffprobe_times(path)
    with fv.open_video(path, H, W) as reader:
        by_index = reader.get_frames_in_range(2, 20, 5)
        assert by_index.indices.tolist() == list(range(2, 20, 5))
        assert np.array_equal(by_index.data, expected[2:20:5])
        # Mid-frame bounds: ffprobe prints times to 6 decimals.
        start, stop = (times[3] + times[4]) / 2, (times[29] + times[30]) / 2
        shown = reader.get_frames_played_in_range(start, stop)
        assert shown.indices.tolist() == list(range(4, 30))
        sampled = reader.get_frames_played_in_range(start, stop, fps=5)
        want = [int(np.searchsorted(times, t, side="right") - 1)
                for t in start + np.arange(int(np.ceil((stop - start) * 5))) / 5]
        assert sampled.indices.tolist() == want
        with pytest.raises(errors.FluxonFsFrameIndexError):
            reader.get_frames_played_in_range(-5.0, 1.0)


def test_indexing_slicing_and_iteration(media):
    name = "h264_moov_end.mp4"
    expected = media.reference(name, H, W)
    with fv.open_video(media.path(name), H, W) as reader:
        assert np.array_equal(reader[7], expected[7])
        assert np.array_equal(reader[-2], expected[-2])
        assert np.array_equal(reader[10:40:7], expected[10:40:7])
        assert np.array_equal(np.stack(list(reader)), expected)
        with pytest.raises(TypeError):
            reader["7"]
        with pytest.raises(errors.FluxonFsFrameIndexError):
            reader[len(expected)]


def test_torch_tensors_share_memory_in_either_layout(media, tmp_path):
    name = "hevc.mp4"
    expected = media.reference(name, H, W).copy()  # writable, as torch.from_numpy likes
    with fv.open_video(media.path(name), H, W) as reader:
        nhwc = reader.read_frames_torch([1, 2])
        nchw = reader.read_frames_torch([1, 2], layout="NCHW")
        batch = reader.get_frames_at([4]).to_torch("NCHW")
    assert nhwc.dtype == torch.uint8 and tuple(nhwc.shape) == (2, H, W, 3)
    assert np.array_equal(nhwc.numpy(), expected[[1, 2]])
    assert tuple(nchw.shape) == (2, 3, H, W)
    assert torch.equal(nchw, torch.from_numpy(expected[[1, 2]]).permute(0, 3, 1, 2))
    assert not nchw.is_contiguous()  # a view of the decoded array, not a copy
    assert torch.equal(batch[0], torch.from_numpy(expected[4]).permute(2, 0, 1))
    with pytest.raises(errors.FluxonFsConfigError):
        fv.frames.as_torch(expected[:1], "CHWN")

    import shutil

    from tests.helpers import make_patcher
    (tmp_path / "v").mkdir()
    shutil.copy(media.path(name), tmp_path / "v" / name)
    with make_patcher(None, tmp_path / "v") as patcher, patcher.open_video_reader_pool() as pool:
        tensor = pool.read_frames_torch(export_name="train", relpath=name, height=H, width=W,
                                        num_threads=1, indices=[0, 5], layout="NCHW")
    assert torch.equal(tensor, torch.from_numpy(expected[[0, 5]]).permute(0, 3, 1, 2))


def test_the_old_time_names_still_work_and_warn(media):
    """Renamed to torchcodec's words (issue 37.2); the old names read the same
    values for a release, each with a DeprecationWarning naming the new one."""
    with fv.open_video(media.path("vp9.webm"), H, W) as reader:
        md = reader.metadata
        for old, new in [("duration_s", "duration_seconds"), ("begin_s", "begin_stream_seconds"),
                         ("end_s", "end_stream_seconds")]:
            with pytest.warns(DeprecationWarning, match=f"use {new}"):
                assert getattr(md, old) == getattr(md, new)
        batch = reader.get_frames_at([0, 5])
        for old, new in [("pts_s", "pts_seconds"), ("duration_s", "duration_seconds")]:
            with pytest.warns(DeprecationWarning, match=f"use {new}"):
                assert np.array_equal(getattr(batch, old), getattr(batch, new))
        start, stop = float(batch.pts_seconds[0]), float(batch.pts_seconds[1])
        new = reader.get_frames_played_in_range(start_seconds=start, stop_seconds=stop)
        with pytest.warns(DeprecationWarning) as caught:
            old = reader.get_frames_played_in_range(start_s=start, stop_s=stop)
        assert ["use start_seconds=" in str(w.message) for w in caught] == [True, False]
        assert np.array_equal(old.indices, new.indices) and len(new.indices) == 5
        with pytest.raises(TypeError, match="twice"):
            reader.get_frames_played_in_range(start, stop_s=stop, stop_seconds=stop)
        with pytest.raises(TypeError, match="unexpected keyword argument 'begin'"):
            reader.get_frames_played_in_range(start, stop, begin=1)


def test_single_frames_with_their_times(media):
    """get_frame_at / get_frame_played_at and batch[k] give one Frame (torchcodec's
    names), the CLI's pixels and ffprobe's time; slices stay batches."""
    name = "h264_vfr.mkv"
    path, expected = media.path(name), media.reference(name, H, W)
    times = ffprobe_times(path)
    with fv.open_video(path, H, W) as reader:
        frame = reader.get_frame_at(-1)
        assert isinstance(frame, fv.Frame) and frame.index == len(expected) - 1
        assert np.array_equal(frame.data, expected[-1]) and frame.data.shape == (H, W, 3)
        assert frame.pts_seconds == pytest.approx(times[-1], abs=1e-6)
        played = reader.get_frame_played_at(times[7] + 1e-3)
        assert played.index == 7 and np.array_equal(played.data, expected[7])
        batch = reader.get_frames_at([2, 5, 9])
        assert batch[1].index == 5 and batch[-1].index == 9
        assert batch[1].duration_seconds == pytest.approx(float(batch.duration_seconds[1]))
        assert [f.index for f in batch] == [2, 5, 9]
        assert isinstance(batch[1:], fv.FrameBatch) and batch[1:].indices.tolist() == [5, 9]
        with pytest.raises(IndexError):
            batch[3]
        with pytest.raises(errors.FluxonFsFrameIndexError):
            reader.get_frame_at(len(expected))
