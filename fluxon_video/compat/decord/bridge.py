"""decord.bridge: what VideoReader and AVReader return frames and samples as.

``set_bridge("native")`` (the default): an :class:`NDArray` (``.asnumpy()``);
``set_bridge("torch")``: a torch tensor sharing the array's memory. The
choice is the process's (decord keeps it per thread, inconsistently).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from fluxon_video.compat.decord._context import DECORDContext, cpu

__all__ = ["NDArray", "bridge_out", "reset_bridge", "set_bridge", "use_torch"]

BRIDGES = ("native", "torch")
_current = "native"


class NDArray:
    """decord's array: ``asnumpy()``, ``shape``, ``dtype``, ``len()``; also
    ``numpy.asarray(it)``."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def asnumpy(self) -> np.ndarray:
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def dtype(self) -> str:
        return str(self._array.dtype)

    @property
    def ctx(self) -> DECORDContext:
        return cpu(0)

    def __len__(self) -> int:
        return len(self._array)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array if dtype is None else self._array.astype(dtype)

    def __repr__(self) -> str:
        return f"<NDArray {'x'.join(map(str, self.shape))} @cpu(0)>"


def set_bridge(new_bridge: str) -> None:
    """"native" (NDArray) or "torch" (torch tensors)."""
    global _current
    if new_bridge not in BRIDGES:
        raise ValueError(f"fluxon_video.compat.decord bridges: {', '.join(BRIDGES)}; "
                         f"got {new_bridge!r}")
    if new_bridge == "torch":
        import torch  # noqa: F401 - the bridge needs it: fail now, not at the first read
    _current = new_bridge


def reset_bridge() -> None:
    set_bridge("native")


@contextlib.contextmanager
def use_torch() -> Iterator[None]:
    """The torch bridge for the ``with`` block."""
    before = _current
    set_bridge("torch")
    try:
        yield
    finally:
        set_bridge(before)


def bridge_out(array: np.ndarray) -> Any:
    """``array`` as the current bridge returns it."""
    if _current == "torch":
        import torch

        return torch.from_numpy(array)
    return NDArray(array)
