# cython: language_level=3
"""ADR 0001 prototype (a): uvloop transports with a Cython BufferedProtocol.

Answers every request with a fixed `respond`-style response, parsing with the
same C parser as the engine, one transport.write per read batch. Only for
measurement (docs/adr/0001-connection-io.md); not part of the server.
"""
from libc.string cimport memcpy

from scalws.includes.http1 cimport sws_header_t, sws_parse_request

cdef bytes RESPONSE = (b"HTTP/1.1 200 OK\r\nServer: scalws\r\nDate: Wed, 02 Dec 2026 12:00:00 GMT\r\n"
                       b"Content-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world")


cdef class Proto:
    cdef object transport
    cdef bytearray buf
    cdef object view
    cdef Py_ssize_t used

    def connection_made(self, transport):
        self.transport = transport
        self.buf = bytearray(65536)
        self.view = memoryview(self.buf)
        self.used = 0

    def get_buffer(self, Py_ssize_t hint):
        return self.view[self.used:]

    def buffer_updated(self, Py_ssize_t n):
        cdef char *b = self.buf
        cdef Py_ssize_t total = self.used + n, off = 0
        cdef const char *m
        cdef const char *t
        cdef size_t ml, tl, nh
        cdef int minor, r, count = 0
        cdef sws_header_t hdrs[64]
        while off < total:
            nh = 64
            r = sws_parse_request(b + off, total - off, &m, &ml, &t, &tl, &minor, hdrs, &nh, 0)
            if r == -2:
                break
            if r < 0:
                self.transport.close()
                return
            off += r
            count += 1
        if off and off < total:
            memcpy(b, b + off, total - off)
        self.used = total - off
        if count == 1:
            self.transport.write(RESPONSE)
        elif count:
            self.transport.write(RESPONSE * count)

    def eof_received(self):
        return False

    def connection_lost(self, exc):
        self.transport = None
