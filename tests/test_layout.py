"""_layout.frames_to_planes: uint8 NHWC rows to float32 NCHW planes through a
256-entry table, value for value what torch's `uint8 tensor / 255` gives."""

import numpy as np
import pytest
import torch

from fluxon_video._layout import frames_to_planes
from fluxon_video.lerobot.dataset import _unit_table


@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (3, 17, 33, 3), (2, 5, 7, 1), (16, 48, 64, 3)])
def test_planes_equal_torchs_division(shape):
    frames = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    frames[0, 0, 0] = 255  # both ends of the table
    frames[-1, -1, -1] = 0
    n, h, w, c = shape
    out = np.full((n, c, h, w), np.nan, np.float32)
    frames_to_planes(frames, _unit_table(), out)
    want = torch.from_numpy(frames).permute(0, 3, 1, 2).type(torch.float32) / 255
    assert np.array_equal(out, want.numpy())  # bit for bit, and no NaN left


def test_rows_pick_frames_in_the_same_pass():
    frames = np.random.default_rng(1).integers(0, 256, (5, 9, 11, 3), dtype=np.uint8)
    rows = np.array([4, 0, 0, 2], np.int64)  # any order, repeats
    out = np.full((4, 3, 9, 11), np.nan, np.float32)
    frames_to_planes(frames, _unit_table(), out, rows)
    want = torch.from_numpy(frames[rows]).permute(0, 3, 1, 2).type(torch.float32) / 255
    assert np.array_equal(out, want.numpy())
    with pytest.raises(IndexError, match="rows\\[1\\] = 5"):
        frames_to_planes(frames, _unit_table(), out[:2], np.array([0, 5], np.int64))


def test_the_table_is_torchs_division():
    table = _unit_table()
    assert table.dtype == np.float32 and table.shape == (256,)
    assert np.array_equal(table, (torch.arange(256, dtype=torch.uint8).float() / 255).numpy())
    assert table[0] == 0 and table[255] == 1


def test_shapes_that_do_not_fit_are_refused():
    frames = np.zeros((2, 4, 6, 3), np.uint8)
    with pytest.raises(ValueError, match="the frames need"):
        frames_to_planes(frames, _unit_table(), np.zeros((2, 3, 6, 4), np.float32))
    with pytest.raises(ValueError, match="not 256"):
        frames_to_planes(frames, np.zeros(255, np.float32), np.zeros((2, 3, 4, 6), np.float32))
    with pytest.raises(ValueError):  # a strided view is not C-contiguous
        frames_to_planes(frames[:, ::2], _unit_table(), np.zeros((2, 3, 2, 6), np.float32))
