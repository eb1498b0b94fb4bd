# cython: language_level=3
"""Test-facing wrapper of the C HTTP/1 parser (csrc/http/http1.c, http1_chunked.c).

It copies bytes in and out, so it is for tests and tools, not the request
path (scalws.server.engine calls the C API directly). Return codes are the
C ones: INCOMPLETE, ERROR, VERSION, TOO_MANY_HEADERS.
"""
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE

from http1 cimport (
    SWS_PARSE_ERROR, SWS_PARSE_INCOMPLETE, SWS_PARSE_VERSION, SWS_PARSE_TOO_MANY_HEADERS,
    sws_header_t, sws_parse_request, sws_request_info_t, sws_analyze_request,
    sws_chunked_decoder_t, sws_decode_chunked, sws_skip_chunked,
    sws_head_check_t, sws_head_limits_t, sws_check_request_head,
    sws_parse_response, sws_response_info_t, sws_analyze_response,
    SWS_M_OTHER, SWS_M_GET, SWS_M_HEAD, SWS_M_POST, SWS_M_PUT, SWS_M_DELETE, SWS_M_OPTIONS,
    SWS_M_PATCH, SWS_M_CONNECT, SWS_M_TRACE,
)

INCOMPLETE = SWS_PARSE_INCOMPLETE
ERROR = SWS_PARSE_ERROR
VERSION = SWS_PARSE_VERSION
TOO_MANY_HEADERS = SWS_PARSE_TOO_MANY_HEADERS

# SWS_M_* method ids, for analyze_response(req_method, ...)
M_OTHER = SWS_M_OTHER
M_GET = SWS_M_GET
M_HEAD = SWS_M_HEAD
M_POST = SWS_M_POST
M_PUT = SWS_M_PUT
M_DELETE = SWS_M_DELETE
M_OPTIONS = SWS_M_OPTIONS
M_PATCH = SWS_M_PATCH
M_CONNECT = SWS_M_CONNECT
M_TRACE = SWS_M_TRACE


def parse_request(bytes data, size_t last_len=0, size_t max_headers=100):
    """Parse a request head.

    Returns the C error code (int < 0), or
    (consumed, method, target, minor_version, [(name, value), ...]).
    """
    cdef const char *buf = PyBytes_AS_STRING(data)
    cdef size_t n = <size_t>PyBytes_GET_SIZE(data)
    cdef const char *m = NULL
    cdef const char *t = NULL
    cdef size_t ml = 0, tl = 0, nh = max_headers, i
    cdef int minor = 0, rc
    cdef sws_header_t *h = <sws_header_t *>malloc(sizeof(sws_header_t) * (max_headers + 1))
    if h == NULL:
        raise MemoryError()
    try:
        rc = sws_parse_request(buf, n, &m, &ml, &t, &tl, &minor, h, &nh, last_len)
        if rc < 0:
            return rc
        headers = [(PyBytes_FromStringAndSize(h[i].name, h[i].name_len),
                    PyBytes_FromStringAndSize(h[i].value, h[i].value_len)) for i in range(nh)]
        return (rc, PyBytes_FromStringAndSize(m, ml), PyBytes_FromStringAndSize(t, tl), minor, headers)
    finally:
        free(h)


def parse_response(bytes data, size_t last_len=0, size_t max_headers=100):
    """Parse an upstream response head (sws_parse_response).

    Returns the C error code (int < 0), or
    (consumed, minor_version, status, reason, [(name, value), ...]).
    """
    cdef const char *buf = PyBytes_AS_STRING(data)
    cdef size_t n = <size_t>PyBytes_GET_SIZE(data)
    cdef const char *reason = NULL
    cdef size_t rl = 0, nh = max_headers, i
    cdef int minor = 0, status = 0, rc
    cdef sws_header_t *h = <sws_header_t *>malloc(sizeof(sws_header_t) * (max_headers + 1))
    if h == NULL:
        raise MemoryError()
    try:
        rc = sws_parse_response(buf, n, &minor, &status, &reason, &rl, h, &nh, last_len)
        if rc < 0:
            return rc
        headers = [(PyBytes_FromStringAndSize(h[i].name, h[i].name_len),
                    PyBytes_FromStringAndSize(h[i].value, h[i].value_len)) for i in range(nh)]
        return (rc, minor, status, PyBytes_FromStringAndSize(reason, rl), headers)
    finally:
        free(h)


cdef sws_header_t *_headers_array(list hs) except NULL:
    """A malloc'd sws_header_t array over the (bytes, bytes) pairs of hs,
    which must outlive it; the caller frees it."""
    cdef size_t n = len(hs), i
    cdef sws_header_t *h = <sws_header_t *>malloc(sizeof(sws_header_t) * (n + 1))
    cdef bytes k, v
    if h == NULL:
        raise MemoryError()
    for i in range(n):
        k, v = hs[i]
        h[i].name = PyBytes_AS_STRING(k)
        h[i].name_len = PyBytes_GET_SIZE(k)
        h[i].value = PyBytes_AS_STRING(v)
        h[i].value_len = PyBytes_GET_SIZE(v)
    return h


def analyze_response(int req_method, int minor, int status, headers):
    """Run sws_analyze_response over (name, value) byte pairs of a response
    to a request with method id req_method (M_*).

    Returns (rc, info): rc 0, or -1 for framing the proxy answers with 502;
    info a dict of the sws_response_info_t fields.
    """
    cdef list hs = [(bytes(k), bytes(v)) for k, v in headers]  # keep the bytes alive
    cdef sws_header_t *h = _headers_array(hs)
    cdef sws_response_info_t info
    cdef int rc
    try:
        rc = sws_analyze_response(req_method, minor, status, h, len(hs), &info)
        return rc, {
            "content_length": info.content_length if info.has_content_length else None,
            "has_content_length": bool(info.has_content_length),
            "chunked": bool(info.chunked),
            "keepalive": bool(info.keepalive),
            "close_delimited": bool(info.close_delimited),
            "no_body": bool(info.no_body),
            "upgrade": bool(info.upgrade),
        }
    finally:
        free(h)


def analyze(bytes method, int minor, headers):
    """Run sws_analyze_request over (name, value) byte pairs.

    Returns (status, info) where status is 0 or the HTTP status to refuse
    with, and info a dict of the sws_request_info_t fields.
    """
    cdef list hs = [(bytes(k), bytes(v)) for k, v in headers]  # keep the bytes alive
    cdef size_t n = len(hs), i
    cdef sws_header_t *h = <sws_header_t *>malloc(sizeof(sws_header_t) * (n + 1))
    cdef sws_request_info_t info
    cdef bytes k, v
    cdef int status
    if h == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            k, v = hs[i]
            h[i].name = PyBytes_AS_STRING(k)
            h[i].name_len = PyBytes_GET_SIZE(k)
            h[i].value = PyBytes_AS_STRING(v)
            h[i].value_len = PyBytes_GET_SIZE(v)
        status = sws_analyze_request(PyBytes_AS_STRING(method), PyBytes_GET_SIZE(method), minor,
                                     h, n, &info)
        return status, {
            "content_length": info.content_length if info.has_content_length else None,
            "host": PyBytes_FromStringAndSize(info.host, info.host_len) if info.has_host else None,
            "method": info.method,
            "has_content_length": bool(info.has_content_length),
            "chunked": bool(info.chunked),
            "keepalive": bool(info.keepalive),
            "expect_continue": bool(info.expect_continue),
            "upgrade": bool(info.upgrade),
            "has_host": bool(info.has_host),
        }
    finally:
        free(h)


COMPLETE = 1  # HeadChecker.feed: the head is complete (parse_request and analyze judge it)


cdef class HeadChecker:
    """A request head as the connection reads it (csrc/http/h1.c): feed()
    the whole buffer so far after each read. sws_parse_request looks at the
    first max_head bytes; what it does not accept, sws_check_request_head
    decides. Returns 0 (wait for more), COMPLETE, or the status to refuse
    the head with now."""
    cdef sws_head_check_t s
    cdef sws_head_limits_t lim
    cdef size_t last_len

    def __cinit__(self, size_t max_head=16384, size_t max_target=8192, size_t max_fields=100):
        memset(&self.s, 0, sizeof(self.s))
        self.lim.max_head = max_head
        self.lim.max_target = max_target
        self.lim.max_fields = max_fields
        self.last_len = 0

    def feed(self, bytes data):
        cdef const char *buf = PyBytes_AS_STRING(data)
        cdef size_t n = <size_t>PyBytes_GET_SIZE(data)
        cdef size_t plen = n if n < self.lim.max_head else self.lim.max_head
        cdef const char *m = NULL
        cdef const char *t = NULL
        cdef size_t ml = 0, tl = 0, nh = self.lim.max_fields
        cdef int minor = 0, rc
        cdef sws_header_t *h = <sws_header_t *>malloc(sizeof(sws_header_t) * (nh + 1))
        if h == NULL:
            raise MemoryError()
        try:
            rc = sws_parse_request(buf, plen, &m, &ml, &t, &tl, &minor, h, &nh,
                                   0 if n > self.lim.max_head else self.last_len)
            if rc >= 0:
                return COMPLETE
            rc = sws_check_request_head(&self.s, buf, n, self.last_len, rc, &self.lim)
            self.last_len = n
            return rc
        finally:
            free(h)


cdef class ChunkedDecoder:
    """Incremental chunked-body decoder (sws_decode_chunked)."""
    cdef sws_chunked_decoder_t d

    def __cinit__(self):
        memset(&self.d, 0, sizeof(self.d))

    @property
    def total(self):
        """Decoded body bytes so far."""
        return self.d.total

    def feed(self, bytes data):
        """Decode the next piece of input.

        Returns (status, decoded, rest): status INCOMPLETE, ERROR, or >= 0
        when the body ended (then rest holds the status bytes that followed
        it); decoded holds the body bytes this piece produced.
        """
        cdef size_t n = <size_t>PyBytes_GET_SIZE(data)
        cdef size_t sz = n
        cdef ssize_t rc
        cdef char *buf = <char *>malloc(n + 1)
        if buf == NULL:
            raise MemoryError()
        try:
            memcpy(buf, PyBytes_AS_STRING(data), n)
            rc = sws_decode_chunked(&self.d, buf, &sz)
            decoded = PyBytes_FromStringAndSize(buf, sz)
            rest = PyBytes_FromStringAndSize(buf + sz, rc) if rc > 0 else b""
            return rc, decoded, rest
        finally:
            free(buf)

    def skip(self, bytes data):
        """Read past the next piece of input without keeping it
        (sws_skip_chunked). Returns status as feed() does: INCOMPLETE,
        ERROR, or the count of bytes after the body (data's last ones)."""
        return sws_skip_chunked(&self.d, PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
