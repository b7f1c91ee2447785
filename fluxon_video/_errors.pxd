cdef str av_error_text(int code)
cdef int err_check(int code, str what, str name, str detail=*) except -1
