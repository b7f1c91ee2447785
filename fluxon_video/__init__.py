"""fluxon_video: decode frames from FluxonFS videos into uint8 NHWC RGB arrays.

The public API lives in :mod:`fluxon_video.video` and is re-exported here.
"""

from fluxon_video import logs as _logs  # noqa: F401 - installs the NullHandler
from fluxon_video.local import LocalVideoReader, decode_local_frames
from fluxon_video.native import HAVE_FFMPEG
from fluxon_video.opening import open_video
from fluxon_video.sources import (
    BytesRangeSource,
    FileObjectRangeSource,
    LocalFileRangeSource,
    RangeSource,
)
from fluxon_video.video import *  # noqa: F401,F403
from fluxon_video.video import __all__ as _video_names

__version__ = "0.1.0"

__all__ = [
    *_video_names,
    "HAVE_FFMPEG",
    "BytesRangeSource",
    "FileObjectRangeSource",
    "LocalFileRangeSource",
    "open_video",
    "RangeSource",
    "LocalVideoReader",
    "decode_local_frames",
]


def __dir__() -> list[str]:
    """The public API (its subpackages are imported, not listed: fluxon_video.torch,
    .lerobot, .compat, .testing)."""
    return sorted([*__all__, "__version__"])
