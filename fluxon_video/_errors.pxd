cdef enum:
    # What native code returns, in place of AVERROR(ENOMEM), when an
    # allocation of our own fails (FFERRTAG('F', 'X', 'N', 'M'), a tag no
    # FFmpeg call returns): err_check makes it a MemoryError. FFmpeg's own
    # ENOMEM answers data that asks for too much, a decode error; keeping the
    # two apart by code, not by the name of the call, lets either message
    # change without moving an out-of-memory into the other class.
    FX_ERROR_OUT_OF_MEMORY = -1296980038

cdef str av_error_text(int code)
cdef int err_check(int code, str what, str name, str detail=*) except -1
