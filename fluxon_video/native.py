"""The one place that imports the compiled extensions.

The package imports without them (built with FLUXON_VIDEO_WITHOUT_FFMPEG=1
or before `make build`); anything that needs FFmpeg calls require_native()
and gets a FluxonFsUnavailableError that says how to get it.
"""

from __future__ import annotations

from types import ModuleType

from fluxon_video.errors import FluxonFsUnavailableError

try:
    from fluxon_video import _audio, _avio, _decode
except ImportError as exc:  # built without FFmpeg, or not built yet
    _audio = _avio = _decode = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

HAVE_FFMPEG = _IMPORT_ERROR is None


def require_native(what: str = "opening a video reader") -> tuple[ModuleType, ModuleType]:
    """(_avio, _decode), or FluxonFsUnavailableError when FFmpeg support is missing."""
    if _IMPORT_ERROR is not None:
        raise FluxonFsUnavailableError(
            f"{what} needs fluxon_video's FFmpeg support, which this installation lacks "
            f"({_IMPORT_ERROR}). Install the FFmpeg development packages "
            "(libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev "
            "pkg-config) and "
            "rebuild (`make build`, or `pip install -e .` without FLUXON_VIDEO_WITHOUT_FFMPEG)."
        )
    return _avio, _decode


def require_audio(what: str = "reading audio") -> ModuleType:
    """_audio (the audio decoder and resampler), or FluxonFsUnavailableError."""
    require_native(what)
    return _audio
