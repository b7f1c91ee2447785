"""Resize modes and interpolations: the names readers take, checked.

Each is defined by the ffmpeg CLI filters that give the same bytes
(docs/frame-index.md, "The exact CLI command"); the converter
(_convert.pyx) numbers them in the order of these tuples.
"""

from __future__ import annotations

from fluxon_video.errors import FluxonFsConfigError

# Scalers, as the names of this API; CLI_FLAGS gives the scale filter's.
INTERPOLATIONS = ("bilinear", "bicubic", "area", "nearest", "lanczos")
# What `scale=W:H:flags=<name>` calls each (swscale's name for nearest is "neighbor").
CLI_FLAGS = {"bilinear": "bilinear", "bicubic": "bicubic", "area": "area",
             "nearest": "neighbor", "lanczos": "lanczos"}
RESIZE_MODES = ("stretch", "shorter_side_crop", "letterbox")


def check_interpolation(value: object) -> str:
    if value not in INTERPOLATIONS:
        raise FluxonFsConfigError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}; "
                                  f"got {value!r}")
    return str(value)


def check_resize(value: object) -> str:
    if value not in RESIZE_MODES:
        raise FluxonFsConfigError(f"resize must be one of {', '.join(RESIZE_MODES)}; "
                                  f"got {value!r}")
    return str(value)
