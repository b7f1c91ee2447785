"""Image cameras: frames stored in the data tables, one encoded image per row.

LeRobot keeps a camera of ``dtype`` ``"image"`` as each row's image file (PNG
as LeRobot writes them; TIFF for depth maps, uint16 millimetres or float32
metres) inside the parquet, and decodes it with Pillow through torchvision's
``ToTensor`` (its own ``pil_to_chw_tensor`` for 16-bit ones). They are
decoded the same way here, with Pillow (the ``lerobot`` extra), so the
values are the ones LeRobot gives.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsConfigError, FluxonFsDecodeError


# Pillow's freed image blocks kept for reuse, unless $PILLOW_BLOCKS_MAX says
# otherwise (Pillow's default keeps none). Without them, each decoded ~1 MB image
# was memory the kernel faulted in afresh (perf: page faults in Pillow's unpack
# and pack): a DataLoader worker of an image dataset spent 8.5 ms of CPU per
# 480x640 item, 4.6 of them in the kernel, against 7.2 for LeRobot's worker on
# the same items. With 8 kept: 6.2 ms, 2.6 in the kernel. The cost: at most 8
# images' worth of memory per process.
PILLOW_BLOCKS = 8


@functools.cache
def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:  # an optional dependency: say how to get it
        raise FluxonFsConfigError(
            "fluxon_video.lerobot decodes image cameras with Pillow: "
            "pip install 'fluxon_video[lerobot]' (or pip install pillow)") from None
    if "PILLOW_BLOCKS_MAX" not in os.environ and Image.core.get_blocks_max() < PILLOW_BLOCKS:
        Image.core.set_blocks_max(PILLOW_BLOCKS)
    return Image


# Pillow's modes of a depth map LeRobot writes: 16-bit integers (its uint16 PIL
# modes) and 32-bit floats; both become float32 as they are
DEPTH_MODES = frozenset({"I;16", "I;16B", "I;16L", "F"})


def _open(image_module: Any, data: bytes | None, name: str) -> tuple[str, np.ndarray]:
    if data is None:
        raise FluxonFsDecodeError(f"{name}: the row has no image")
    try:
        with image_module.open(io.BytesIO(data)) as image:
            return image.mode, np.asarray(image)
    except (OSError, ValueError, SyntaxError) as exc:  # what Pillow raises on bad bytes
        raise FluxonFsDecodeError(f"{name}: not a readable image ({exc})") from exc


def _stacked(pixels: list[np.ndarray], names: Sequence[str]) -> np.ndarray:
    if len(pixels) == 1:
        return pixels[0][None]  # no copy
    if len({p.shape for p in pixels}) > 1:
        raise FluxonFsDecodeError(f"{names[0]}: the window's images differ in size "
                                  f"({', '.join(str(p.shape) for p in pixels)})")
    return np.stack(pixels)


def decode_depth_images(encoded: Sequence[bytes | None], names: Sequence[str]) -> np.ndarray:
    """Each depth image's values, (N, H, W) float32, in the unit it was recorded in
    (what LeRobot's ``pil_to_chw_tensor`` gives, before its unit conversion)."""
    image_module = _pillow()
    values = []
    for data, name in zip(encoded, names):
        mode, array = _open(image_module, data, name)
        if mode not in DEPTH_MODES or array.ndim != 2:
            raise FluxonFsDecodeError(f"{name}: a {mode} image where a depth map (16-bit or "
                                      "float, one band) was expected")
        values.append(array.astype(np.float32))
    return _stacked(values, names)


def decode_images(encoded: Sequence[bytes | None], names: Sequence[str]) -> np.ndarray:
    """Each image's pixels, (N, H, W, C) uint8 as ``ToTensor`` reads them before it
    divides (a one-band image: C = 1; a 1-bit one: 0 or 255). ``names[k]`` says
    which row ``encoded[k]`` is, for the errors."""
    image_module = _pillow()
    pixels = []
    for data, name in zip(encoded, names):
        mode, array = _open(image_module, data, name)
        if mode == "1":
            array = array.astype(np.uint8) * np.uint8(255)
        if array.dtype != np.uint8:
            raise FluxonFsDecodeError(
                f"{name}: a {mode} image ({array.dtype} samples) in a camera that is not a "
                "depth map; image cameras are 8-bit, and a depth map's feature says "
                "is_depth_map in its info")
        pixels.append(array if array.ndim == 3 else array[:, :, None])
    return _stacked(pixels, names)
