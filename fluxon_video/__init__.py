"""fluxon_video: decode frames from FluxonFS videos into uint8 NHWC RGB arrays."""

from fluxon_video.errors import *  # noqa: F401,F403
from fluxon_video.errors import __all__ as _error_names
from fluxon_video.local import decode_local_frames
from fluxon_video.native import HAVE_FFMPEG
from fluxon_video.sources import BytesRangeSource, LocalFileRangeSource, RangeSource

__version__ = "0.1.0"

__all__ = [
    *_error_names,
    "HAVE_FFMPEG",
    "BytesRangeSource",
    "LocalFileRangeSource",
    "RangeSource",
    "decode_local_frames",
]
