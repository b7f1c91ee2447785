from libc.stdint cimport int64_t

from fluxon_video._pagecache cimport fx_cursor, fx_pagecache
from fluxon_video.libav.avformat cimport AVIOContext


# What an AVIOContext's opaque points at: the shared cache and this stream's cursor.
cdef struct fx_avio_opaque:
    fx_pagecache *pc
    fx_cursor cursor


cdef class _FetchCore:
    cdef fx_pagecache *pc
    cdef object read_range
    cdef dict fetch_errors      # page -> exception of its last failed fetch
    cdef dict recovered_errors  # the same, for the last few pages fetched fine since
    cdef str name
    cdef int pid


cdef class ByteSource:
    cdef _FetchCore core
    cdef object range_source
    cdef readonly int64_t size
    cdef readonly int64_t page_size
    cdef readonly str name
    cdef readonly int pid
    cdef list workers
    cdef bint closed
    cdef object __weakref__
    cdef fx_pagecache *pagecache(self) except NULL
    cdef object fetch_error(self, fx_cursor *cursor)


cdef AVIOContext *fx_avio_open(ByteSource source) except NULL
cdef fx_cursor *fx_avio_cursor(AVIOContext *pb) noexcept nogil
cdef void fx_avio_limit_readahead(AVIOContext *pb, int64_t end) noexcept nogil
cdef void fx_avio_zero_fill(AVIOContext *pb, bint zero_fill) noexcept nogil
cdef void fx_avio_close(AVIOContext **pb) noexcept nogil
cdef int64_t fx_source_prefetch(fx_pagecache *pc, int64_t offset, int64_t length) noexcept nogil
cdef int64_t fx_source_cancel_prefetch(fx_pagecache *pc) noexcept nogil
cdef int64_t fx_source_fetch_waits(fx_pagecache *pc) noexcept nogil
