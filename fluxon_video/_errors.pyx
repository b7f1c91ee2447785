# cython: language_level=3
"""The one path from an AVERROR code to a Python exception.

Call err_check after the GIL is back; native code only records codes.

Callers raise the byte source's own exception first (a failed fetch, a
timeout, a closed source: the cursor records it, and FFmpeg only ever sees
EIO/ETIMEDOUT for it). Every FFmpeg code that reaches err_check is therefore
FFmpeg's verdict on the data, a FluxonFsDecodeError (FluxonFsNoVideoStreamError
for a container without video), even when FFmpeg spells it as an errno: a
demuxer's EIO for an element the file ends inside, av_seek_frame's bare -1
(which av_strerror reads as EPERM), ENOMEM for an allocation a corrupt size
field asks for. Only FX_ERROR_OUT_OF_MEMORY, which native code returns when an
allocation of our own fails, is a MemoryError.
"""
from libc.errno cimport EIO, ENOMEM

from fluxon_video.libav.avutil cimport (
    AVERROR, AVERROR_EOF, AVERROR_INVALIDDATA, AVERROR_STREAM_NOT_FOUND, av_strerror,
)

from fluxon_video import errors


# Allocations of our own return FX_ERROR_OUT_OF_MEMORY: those whose size does
# not depend on the file (contexts, packet, frame) or that we size
# ourselves (the scan's packet log, conversion buffers). Every call that
# answers AVERROR(ENOMEM) (opening, demuxing, decoding) was refused an
# allocation the file's data asked for, typically a corrupt size or count
# field: that is a file FFmpeg cannot read, a FluxonFsDecodeError.
OUT_OF_MEMORY = FX_ERROR_OUT_OF_MEMORY


cdef str av_error_text(int code):
    cdef char buf[128]
    if av_strerror(code, buf, sizeof(buf)) < 0:
        return f"unknown FFmpeg error {code}"
    return buf.decode("utf-8", "replace")


cdef int err_check(int code, str what, str name, str detail=None) except -1:
    """Raise the exception for a negative libav return code, else return it."""
    if code >= 0:
        return code
    if code == FX_ERROR_OUT_OF_MEMORY:
        raise MemoryError(f"{name}: {what}: out of memory")
    cls = (errors.FluxonFsNoVideoStreamError if code == AVERROR_STREAM_NOT_FOUND
           else errors.FluxonFsDecodeError)
    if code == AVERROR(ENOMEM):
        message = (f"{name}: {what} failed: FFmpeg could not allocate the memory the file's "
                   f"data asks for (a corrupt or implausible size or count)")
    elif code == AVERROR_STREAM_NOT_FOUND:
        message = f"{name}: no video stream"
    elif what == "avformat_open_input" and code in (AVERROR_INVALIDDATA, AVERROR_EOF):
        message = f"{name}: not a recognised video container"
    elif code == AVERROR(EIO):
        message = (f"{name}: {what} failed: the data ends early or is inconsistent "
                   f"({av_error_text(code)} reading it)")
    elif code == -1:  # FFmpeg's generic failure (seeking, mostly), not EPERM
        message = f"{name}: {what} failed (error -1)"
    else:
        message = f"{name}: {what} failed: {av_error_text(code)}"
    if detail:
        message += f" ({detail})"
    raise cls(message)


def check(int code, str what="call", str name="<native>"):
    """Python entry to err_check (tests exercise the table through it)."""
    return err_check(code, what, name)
