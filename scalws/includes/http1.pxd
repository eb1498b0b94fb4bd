# Declarations of csrc/include/scalws/http1.h used from Cython; the contracts
# (ownership, units, return codes) are stated in the header.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "scalws/http1.h" nogil:
    enum:
        SWS_PARSE_ERROR
        SWS_PARSE_INCOMPLETE
        SWS_PARSE_VERSION
        SWS_PARSE_TOO_MANY_HEADERS

    enum:
        SWS_M_OTHER
        SWS_M_GET
        SWS_M_HEAD
        SWS_M_POST
        SWS_M_PUT
        SWS_M_DELETE
        SWS_M_OPTIONS
        SWS_M_PATCH
        SWS_M_CONNECT
        SWS_M_TRACE

    ctypedef struct sws_header_t:
        const char *name
        size_t name_len
        const char *value
        size_t value_len

    int sws_parse_request(const char *buf, size_t len, const char **method, size_t *method_len,
                          const char **target, size_t *target_len, int *minor_version,
                          sws_header_t *headers, size_t *num_headers, size_t last_len)

    int sws_method_id(const char *m, size_t len)

    ctypedef struct sws_head_check_t:
        uint32_t checked
        uint16_t fields
        uint8_t minor
        uint8_t flags

    ctypedef struct sws_head_limits_t:
        size_t max_head
        size_t max_target
        size_t max_fields

    int sws_check_request_head(sws_head_check_t *s, const char *buf, size_t len, size_t last_len,
                               int parse_rc, const sws_head_limits_t *lim)

    int sws_parse_response(const char *buf, size_t len, int *minor_version, int *status,
                           const char **reason, size_t *reason_len, sws_header_t *headers,
                           size_t *num_headers, size_t last_len)

    ctypedef struct sws_response_info_t:
        uint64_t content_length
        unsigned has_content_length
        unsigned chunked
        unsigned keepalive
        unsigned close_delimited
        unsigned no_body
        unsigned upgrade

    int sws_analyze_response(int req_method, int minor_version, int status,
                             const sws_header_t *headers, size_t num_headers,
                             sws_response_info_t *info)

    ctypedef struct sws_request_info_t:
        uint64_t content_length
        const char *host
        size_t host_len
        int method
        unsigned has_content_length
        unsigned chunked
        unsigned keepalive
        unsigned expect_continue
        unsigned upgrade
        unsigned has_host

    int sws_analyze_request(const char *method, size_t method_len, int minor_version,
                            const sws_header_t *headers, size_t num_headers,
                            sws_request_info_t *info)

    ctypedef struct sws_chunked_decoder_t:
        uint64_t bytes_left_in_chunk
        uint64_t total

    ssize_t sws_decode_chunked(sws_chunked_decoder_t *d, char *buf, size_t *bufsz)
    ssize_t sws_skip_chunked(sws_chunked_decoder_t *d, const char *buf, size_t len)
