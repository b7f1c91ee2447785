# cython: language_level=3
"""The one path from an AVERROR code to a Python exception.

Call err_check after the GIL is back; native code only records codes.
"""
from libc.errno cimport EAGAIN, EINVAL, EIO, ENOENT, ENOMEM, EACCES, EPERM, ETIMEDOUT

from fluxon_video.libav.avutil cimport (
    AVERROR, AVERROR_DECODER_NOT_FOUND, AVERROR_DEMUXER_NOT_FOUND, AVERROR_EOF,
    AVERROR_INVALIDDATA, AVERROR_PATCHWELCOME, AVERROR_STREAM_NOT_FOUND, av_strerror,
)

from fluxon_video import errors


cdef dict _ERROR_TABLE = {
    AVERROR_INVALIDDATA: errors.FluxonFsDecodeError,
    AVERROR_DEMUXER_NOT_FOUND: errors.FluxonFsDecodeError,
    AVERROR_DECODER_NOT_FOUND: errors.FluxonFsDecodeError,
    AVERROR_PATCHWELCOME: errors.FluxonFsDecodeError,
    AVERROR_STREAM_NOT_FOUND: errors.FluxonFsNoVideoStreamError,
    AVERROR_EOF: errors.FluxonFsDecodeError,
    AVERROR(EIO): errors.FluxonFsIOError,
    AVERROR(ENOENT): errors.FluxonFsNotFoundError,
    AVERROR(EACCES): errors.FluxonFsPermissionError,
    AVERROR(EPERM): errors.FluxonFsPermissionError,
    AVERROR(ETIMEDOUT): errors.FluxonFsTimeoutError,
    AVERROR(EINVAL): errors.FluxonFsDecodeError,
    AVERROR(EAGAIN): errors.FluxonFsDecodeError,
}


cdef str av_error_text(int code):
    cdef char buf[128]
    if av_strerror(code, buf, sizeof(buf)) < 0:
        return f"unknown FFmpeg error {code}"
    return buf.decode("utf-8", "replace")


cdef int err_check(int code, str what, str name, str detail=None) except -1:
    """Raise the exception for a negative libav return code, else return it."""
    if code >= 0:
        return code
    if code == AVERROR(ENOMEM):
        raise MemoryError(f"{name}: {what}: out of memory")
    cls = _ERROR_TABLE.get(code, errors.FluxonFsDecodeError)
    if code == AVERROR_STREAM_NOT_FOUND:
        message = f"{name}: no video stream"
    elif what == "avformat_open_input" and code in (AVERROR_INVALIDDATA, AVERROR_EOF):
        message = f"{name}: not a recognised video container"
    else:
        message = f"{name}: {what} failed: {av_error_text(code)}"
    if detail:
        message += f" ({detail})"
    raise cls(message)


def check(int code, str what="call", str name="<native>"):
    """Python entry to err_check (tests exercise the table through it)."""
    return err_check(code, what, name)
