"""ReadOptions: the reader's options as one value, checked once, taken everywhere a reader is made."""

from __future__ import annotations

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
