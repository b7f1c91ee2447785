"""ReadOptions: the reader's options as one value, checked once, taken everywhere a reader is made."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from tests.helpers import make_patcher

H, W = 36, 64
NAME = "h264_faststart.mp4"


def test_bad_fields_are_refused_when_the_value_is_built():
    for bad, match in [({"height": 0}, "height"), ({"width": -3}, "width"),
                       ({"num_threads": 0}, "num_threads"), ({"resize": "pad"}, "resize"),
                       ({"interpolation": "cubic"}, "interpolation"),
                       ({"on_damage": "ignore"}, "on_damage"),
                       ({"stream_index": -1}, "stream")]:
        with pytest.raises(errors.FluxonFsConfigError, match=match):
            fv.ReadOptions(**bad)
    with pytest.raises(errors.FluxonFsConfigError, match="resize"):
        fv.ReadOptions(H, W).replace(resize="pad")  # a copy is checked too


def test_equal_options_are_one_key_and_auto_threads_are_a_number():
    assert fv.ReadOptions(H, W) == fv.ReadOptions(height=H, width=W, num_threads=1)
    assert len({fv.ReadOptions(H, W), fv.ReadOptions(H, W), fv.ReadOptions(W, H)}) == 2
    assert isinstance(fv.ReadOptions(num_threads="auto").num_threads, int)


def test_every_opener_reads_the_same_frames_with_options(media):
    options = fv.ReadOptions(H, W, num_threads=2)
    plain = media.reference(NAME, H, W)
    with fv.open_video(media.path(NAME), options=options) as reader:
        assert reader.options == options and (reader.height, reader.width) == (H, W)
        np.testing.assert_array_equal(reader.read_frames_numpy([0, 7]), plain[[0, 7]])
    with make_patcher(None, media.root) as patcher:
        with patcher.open_video_reader("train", NAME, options=options) as reader:
            np.testing.assert_array_equal(reader.read_frames_numpy([3]), plain[[3]])
        with patcher.open_video_reader_pool() as pool:
            request = fv.FluxonFsVideoReadRequest("train", NAME, indices=(1, 2), options=options)
            assert (request.height, request.width, request.num_threads) == (H, W, 2)
            assert request == fv.FluxonFsVideoReadRequest("train", NAME, H, W, 2, (1, 2))
            result, = pool.read_many_numpy_with_stats([request])
            np.testing.assert_array_equal(result.frames, plain[[1, 2]])
            key, = pool.idle_readers()
            assert key.options == options and key.relpath == NAME


def test_options_and_separate_arguments_are_not_mixed(media):
    options = fv.ReadOptions(H, W)
    with pytest.raises(errors.FluxonFsConfigError, match="pass options= or height=, not both"):
        fv.open_video(media.path(NAME), 48, options=options)
    with pytest.raises(errors.FluxonFsConfigError, match="not both"):
        fv.FluxonFsVideoReadRequest("train", NAME, H, W, options=options)
    with pytest.raises(TypeError, match="options must be a ReadOptions"):
        fv.open_video(media.path(NAME), options={"height": H})


@pytest.fixture(scope="module")
def with_audio(tmp_path_factory):
    path = tmp_path_factory.mktemp("options") / "av.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x36:r=10:d=2",
                    "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=24000:d=2",
                    "-ac", "2", "-c:v", "libx264", "-c:a", "aac", "-shortest", str(path)],
                   check=True)
    return path


def test_the_reads_defaults_come_from_the_options_and_do_not_split_the_pool(media, with_audio):
    import torch  # noqa: F401 - the torch reads

    spec = fv.AudioSpec(sample_rate=8000, num_channels=1)
    options = fv.ReadOptions(H, W, layout="NCHW", audio=spec)
    with fv.open_video(with_audio, options=options) as reader:
        assert tuple(reader.read_frames_torch([0]).shape) == (1, 3, H, W)
        assert tuple(reader.read_frames_torch([0], layout="NHWC").shape) == (1, H, W, 3)
        default = reader.read_audio(0.5, 1.0)
        np.testing.assert_array_equal(default.data, reader.read_audio(0.5, 1.0, spec).data)
        assert (default.sample_rate, default.num_channels) == (8000, 1)
        played = reader.get_audio_played_in_range(0.5, 1.0)
        assert (played.sample_rate, played.num_channels) == (8000, 1)
    with pytest.raises(TypeError, match="AudioSpec"):
        fv.ReadOptions(audio={"sample_rate": 8000})
    with pytest.raises(errors.FluxonFsConfigError, match="layout"):
        fv.ReadOptions(layout="CHW")
    with make_patcher(None, media.root) as patcher, patcher.open_video_reader_pool() as pool:
        requests = [fv.FluxonFsVideoReadRequest("train", NAME, indices=(0,), options=o)
                    for o in (fv.ReadOptions(H, W), options)]
        for result in pool.read_many_numpy_with_stats(requests):
            np.testing.assert_array_equal(result.frames, media.reference(NAME, H, W)[[0]])
        assert len(pool.idle_readers()) == 1  # one reader: layout and audio are the reads'


def test_the_dataset_takes_its_layout_from_the_options(media):
    from fluxon_video.torch import VideoClipDataset

    with make_patcher(None, media.root) as patcher:
        dataset = VideoClipDataset(patcher, "train", [NAME], clip_len=4,
                                   options=fv.ReadOptions(H, W, layout="NCHW"))
        assert dataset.layout == "TCHW" and tuple(dataset[0]["frames"].shape) == (4, 3, H, W)
        with pytest.raises(errors.FluxonFsConfigError, match="not both"):
            VideoClipDataset(patcher, "train", [NAME], layout="TCHW", options=fv.ReadOptions())
