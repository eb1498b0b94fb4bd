/*
 * scalws/http1.h — HTTP/1.x request-head parser and analysis, upstream
 * response-head parser and analysis (for the reverse proxy), and the
 * chunked-body decoder (RFC 9110, RFC 9112).
 *
 * Ownership: nothing here allocates, keeps a pointer between calls, or calls
 * back. The caller owns every buffer and the header array; every pointer the
 * parser returns points into the caller's buffer and is valid as long as that
 * buffer is. All lengths are in bytes.
 *
 * Floor: a leaf (csrc/http/http1.c, the heads; csrc/http/http1_chunked.c,
 * the chunked decoder); it calls nothing of the engine's.
 *
 * Return codes shared by the parser and the chunked decoder:
 *   >= 0                       success (meaning given per function)
 *   SWS_PARSE_ERROR            malformed input; answer 400 and close (a
 *                              response: answer 502, drop the upstream)
 *   SWS_PARSE_INCOMPLETE       need more input; call again with a longer buffer
 *   SWS_PARSE_VERSION          HTTP major version 2..9; answer 505 and close
 *   SWS_PARSE_TOO_MANY_HEADERS more fields than the caller's array; answer 431
 *
 * The parser is strict where RFC 9112 allows a choice, because a lenient
 * parser in front of a stricter (or differently lenient) one is how requests
 * are smuggled. What it accepts and rejects is listed on sws_parse_request.
 *
 * Built with -msse4.2 the scans use SSE4.2 (PCMPESTRI) 16 bytes at a time,
 * never reading past buf + len; without it a scalar loop gives identical
 * results (tests/c builds and compares both).
 */
#ifndef SCALWS_HTTP1_H
#define SCALWS_HTTP1_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWS_PARSE_ERROR            (-1)
#define SWS_PARSE_INCOMPLETE       (-2)
#define SWS_PARSE_VERSION          (-3)
#define SWS_PARSE_TOO_MANY_HEADERS (-4)

/* One header field; name and value point into the parsed buffer. The value
 * has leading and trailing OWS removed (RFC 9112 §5.1). */
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sws_header_t;

/*
 * Parses a request head (request-line and header section, RFC 9112 §2-§5)
 * from buf[0..len).
 *
 * Returns the number of bytes the head occupies, counting any empty lines
 * skipped before the request-line and the empty line ending the head (> 0);
 * or SWS_PARSE_INCOMPLETE, SWS_PARSE_ERROR, SWS_PARSE_VERSION,
 * SWS_PARSE_TOO_MANY_HEADERS. On success method, target, minor_version and
 * headers[0..*num_headers) are set; on any other return their contents are
 * unspecified. *num_headers is the capacity of headers on entry.
 *
 * last_len is len at the previous call on the same growing buffer that
 * returned SWS_PARSE_INCOMPLETE (0 on the first call): when it is not 0 the
 * parser first looks for the end of the head in the new bytes only and
 * returns SWS_PARSE_INCOMPLETE without parsing when it is absent. A
 * consequence: with last_len != 0 a malformed head is reported when its end
 * arrives, not earlier; sws_check_request_head finds the fault of a head
 * that is not complete, line by line as the lines arrive.
 *
 * Accepted grammar (anything else is SWS_PARSE_ERROR):
 *   *( [CR] LF ) method SP request-target SP HTTP-version [CR] LF
 *   *( field-name ":" OWS field-value OWS [CR] LF )
 *   [CR] LF
 * - method and field-name are 1*tchar (RFC 9110 §5.1, §5.6.2, §9.1).
 * - request-target is 1*( %x21-7E / %x80-FF ) minus DEL: no CTL, no SP.
 *   Its finer grammar (origin-form etc.) is the router's business.
 * - exactly one SP between the parts of the request-line (RFC 9112 §3).
 * - HTTP-version is "HTTP/" DIGIT "." DIGIT: major 1 gives minor_version =
 *   the minor digit; major 2..9 is SWS_PARSE_VERSION; major 0 an error.
 * - a bare LF ends a line (RFC 9112 §2.2 allows it); a CR not followed by LF
 *   is an error anywhere.
 * - no whitespace between field-name and ":" (RFC 9112 §5.1), no obs-fold
 *   (a field line starting with SP or HTAB, RFC 9112 §5.2), which also
 *   rejects whitespace between the request-line and the first field
 *   (RFC 9112 §2.2).
 * - field-value bytes are HTAB, SP, VCHAR or obs-text (%x80-FF); NUL, other
 *   CTLs and DEL are errors (RFC 9110 §5.5).
 * - empty lines before the request-line are skipped (RFC 9112 §2.2).
 */
int sws_parse_request(const char *buf, size_t len, const char **method, size_t *method_len,
                      const char **target, size_t *target_len, int *minor_version,
                      sws_header_t *headers, size_t *num_headers, size_t last_len);

/* What sws_check_request_head knows of a head between calls on its growing
 * buffer; zero it when a head starts. Eight bytes, so that a connection can
 * keep it at no cost while the head arrives. */
typedef struct {
    uint32_t checked;  /* bytes at the head's start whose lines were checked */
    uint16_t fields;   /* field lines among them */
    uint8_t minor;     /* the request-line's minor version, once checked */
    uint8_t flags;     /* SWS_HC_*; the other bits are private */
} sws_head_check_t;

#define SWS_HC_LINE 0x01 /* the request-line was checked and is sound */
#define SWS_HC_HEAD 0x02 /* its method is HEAD (a refusal then carries no body) */

/* The limits sws_check_request_head applies, as the caller applies them to
 * a complete head: a head of more than max_head bytes is 431 (414 when the
 * request-line alone is longer), a request-target over max_target bytes
 * 414, more than max_fields field lines 431. */
typedef struct {
    size_t max_head, max_target, max_fields;
} sws_head_limits_t;

/*
 * Decides a request head that sws_parse_request did not accept: whether it
 * is refused now, and with which status, or waits for more bytes.
 * buf[0..len) is the head so far, from its first byte (empty lines before
 * the request-line included); parse_rc what sws_parse_request returned for
 * buf[0..min(len, lim->max_head)) (SWS_PARSE_INCOMPLETE or an error; with
 * len > lim->max_head, from a call without last_len); last_len the len of
 * the previous call on the same head (0: none, or the bytes moved); *s the
 * state those calls left (zeroed when the head started).
 *
 * Returns 0 while no line so far is at fault and the head is within
 * lim->max_head bytes (wait for more), else the status to refuse the head
 * with (the caller answers it and closes):
 *   400  a line sws_parse_request refuses (syntax, bare CR, obs-fold, ...),
 *        or a field line after which sws_analyze_request's 400 is certain
 *        whatever follows: a Content-Length that is not 1*DIGIT or not the
 *        first, Content-Length together with Transfer-Encoding,
 *        Transfer-Encoding in HTTP/1.0, or with a coding that is not a
 *        token, one after chunked, chunked twice or with parameters; a
 *        second Host, or a Host value with bytes outside reg-name /
 *        IP-literal / port;
 *   414  a request-target over lim->max_target bytes, or a request-line not
 *        ended within the first lim->max_head bytes;
 *   431  more than lim->max_fields field lines, or a head not ended within
 *        the first lim->max_head bytes;
 *   505  an HTTP major version 2..9 (SWS_PARSE_VERSION).
 * The first fault in the head's bytes decides: a line's once its line end
 * is in buf (lines are checked in order), the size's once len passes
 * lim->max_head (bytes after that are not read), and parse_rc's, a fault
 * in the line not ended yet, which sws_parse_request sees when it parses
 * (with last_len 0, or once the head's end may be there).
 *
 * So the status does not depend on how the head was split into calls,
 * only when it comes: a fault inside a line at the latest with its line
 * end. And it is the status the head would get complete: sws_parse_request,
 * then a target over lim->max_target (414), then sws_analyze_request (whose
 * 400 comes before its 501 and 417) decide a complete head's lines in the
 * same order. What needs the whole head (no Host, a Transfer-Encoding
 * without a coding, codings other than chunked (501), Expect (417)) waits
 * for it.
 *
 * Cost: lines are looked for only when a line end arrived after last_len,
 * and each line is checked once, so a head costs one more pass over its
 * bytes in all, however it is split. Nothing is allocated; buf is only read.
 */
int sws_check_request_head(sws_head_check_t *s, const char *buf, size_t len, size_t last_len,
                           int parse_rc, const sws_head_limits_t *lim);

/* Method identifiers; SWS_M_OTHER for any other token. */
enum {
    SWS_M_OTHER = 0,
    SWS_M_GET,
    SWS_M_HEAD,
    SWS_M_POST,
    SWS_M_PUT,
    SWS_M_DELETE,
    SWS_M_OPTIONS,
    SWS_M_PATCH,
    SWS_M_CONNECT,
    SWS_M_TRACE
};

/* Returns the SWS_M_* of m[0..len); method names are case-sensitive
 * (RFC 9110 §9.1), so "get" is SWS_M_OTHER. */
int sws_method_id(const char *m, size_t len);

/* Iterates a #rule list (RFC 9110 §5.6.1): sets [*el, *el + *el_len) to the
 * next non-empty element with OWS trimmed and returns 1, or returns 0 at the
 * end. Empty elements (", ,") are skipped as the RFC requires of recipients. */
int sws_list_next(const char **pp, const char *end, const char **el, size_t *el_len);

/* Largest Content-Length accepted: the value must fit an off_t/ssize_t. */
#define SWS_MAX_CONTENT_LENGTH ((uint64_t)INT64_MAX)

typedef struct {
    uint64_t content_length;   /* valid when has_content_length */
    const char *host;          /* Host value as sent, NULL if absent */
    size_t host_len;
    int method;                /* SWS_M_* */
    unsigned has_content_length:1, chunked:1, keepalive:1, expect_continue:1, upgrade:1,
        has_host:1, te_trailers:1;
} sws_request_info_t;

/*
 * Framing and connection semantics of a parsed request (RFC 9112 §6, §9.3;
 * RFC 9110 §7.2, §10.1.1). Reads headers[0..num_headers) as produced by
 * sws_parse_request; fills *info in every case.
 *
 * Returns 0 when the request is acceptable, else the status to refuse it with
 * (the caller answers and closes the connection):
 *  400  Content-Length together with Transfer-Encoding (RFC 9112 §6.3 p3);
 *       more than one Content-Length, even with equal values ("5, 5" too);
 *       Content-Length not 1*DIGIT or above SWS_MAX_CONTENT_LENGTH;
 *       Transfer-Encoding in HTTP/1.0 (RFC 9112 §6.1); "chunked" not the
 *       last coding, or present twice, or with parameters; a
 *       Transfer-Encoding with no coding or a coding that is not a token;
 *       HTTP/1.1 without Host, more than one Host, or a Host value with
 *       bytes outside reg-name / IP-literal / port (RFC 9110 §7.2,
 *       RFC 3986 §3.2.2).
 *  501  a transfer coding other than chunked (RFC 9112 §6.1).
 *  417  an expectation other than 100-continue (RFC 9110 §10.1.1).
 * Checks run in that order, so a request with several faults gets the first.
 *
 * keepalive: on by default for HTTP/1.1 (any minor >= 1), off for 1.0;
 * Connection options (comma lists, case-insensitive, any number of fields):
 * "close" turns it off and wins, "keep-alive" turns it on for 1.0
 * (RFC 9112 §9.3). upgrade: a Connection "upgrade" option together with an
 * Upgrade field (RFC 9110 §7.8). expect_continue: "Expect: 100-continue"
 * in HTTP/1.1; ignored in 1.0 as RFC 9110 §10.1.1 requires. te_trailers:
 * a TE list with "trailers" in HTTP/1.1 (RFC 9110 §10.1.4: the client
 * takes a trailer section).
 */
int sws_analyze_request(const char *method, size_t method_len, int minor_version,
                        const sws_header_t *headers, size_t num_headers,
                        sws_request_info_t *info);

/*
 * Parses an upstream response head (status-line and header section,
 * RFC 9112 §4, §5) from buf[0..len), zero-copy, with the conventions of
 * sws_parse_request: same return codes (never SWS_PARSE_VERSION), same
 * last_len contract, *num_headers the capacity on entry and the count on
 * success; on success minor_version, status, reason/reason_len and headers
 * are set (pointers into buf). The caller answers SWS_PARSE_ERROR and
 * SWS_PARSE_TOO_MANY_HEADERS with 502 and does not reuse the connection;
 * nothing of a refused head is passed through.
 *
 * Accepted grammar (anything else is SWS_PARSE_ERROR):
 *   "HTTP/1." ( "0" / "1" ) SP 3DIGIT [ SP reason-phrase ] [CR] LF
 *   *( field-name ":" OWS field-value OWS [CR] LF )
 *   [CR] LF
 * - version HTTP/1.0 or HTTP/1.1 only (case-sensitive); HTTP/1.2..1.9,
 *   HTTP/2+ and anything else are errors: an upstream we talk HTTP/1.1 to
 *   answers with one of those two.
 * - status-code is exactly 3 digits and must lie in 100..599 (RFC 9110 §15);
 *   600..999 and 000..099 are errors. A fourth digit is an error.
 * - reason-phrase = *( HTAB / SP / VCHAR / obs-text ), returned as sent
 *   (not trimmed), possibly empty. Leniency, documented: RFC 9112 §4 requires
 *   the SP after the code even before an empty reason, but "HTTP/1.1 200"
 *   + line end is common in the wild and unambiguous, so it is accepted
 *   (reason_len 0, *reason points at the line end).
 * - no empty lines are skipped before the status-line (RFC 9112 §2.2's
 *   allowance is for request-lines; stray bytes between responses mean the
 *   previous response's framing was wrong).
 * - line ends, field lines and field-value bytes as for sws_parse_request:
 *   bare LF ok, bare CR an error, no obs-fold, no whitespace before ":",
 *   no CTL (other than HTAB) or DEL in values.
 */
int sws_parse_response(const char *buf, size_t len, int *minor_version, int *status,
                       const char **reason, size_t *reason_len, sws_header_t *headers,
                       size_t *num_headers, size_t last_len);

/*
 * Parses the head of a CGI response (RFC 3875 §6: what a FastCGI
 * application writes to STDOUT before the body): header fields up to and
 * including the empty line, with no status line. Same returns, field
 * grammar and last_len as sws_parse_request; a head that is only the empty
 * line has no fields.
 */
int sws_parse_cgi_head(const char *buf, size_t len, sws_header_t *headers, size_t *num_headers,
                       size_t last_len);

typedef struct {
    uint64_t content_length;  /* valid when has_content_length */
    unsigned has_content_length:1, chunked:1, keepalive:1, close_delimited:1, no_body:1, upgrade:1;
} sws_response_info_t;

/*
 * Framing and connection semantics of a parsed response to a request whose
 * method was req_method (SWS_M_*) (RFC 9112 §6.3, §9.3; RFC 9110 §6.4.1).
 * Reads headers[0..num_headers) as produced by sws_parse_response; fills
 * *info in every case.
 *
 * Framing, exactly one of, first match wins (RFC 9112 §6.3):
 *  no_body          request HEAD; status 1xx, 204 or 304; a 2xx to CONNECT
 *                   (the connection becomes a tunnel; CL and TE in it are
 *                   ignored, not checked, as RFC 9110 §9.3.6 requires).
 *  chunked          Transfer-Encoding whose final coding is "chunked"; decode
 *                   with sws_decode_chunked.
 *  close_delimited  Transfer-Encoding whose final coding is not chunked
 *                   (§6.3 p4: the body runs until the server closes), or
 *                   neither Transfer-Encoding nor Content-Length.
 *  (none set)       Content-Length: body of content_length bytes.
 * has_content_length/content_length report a valid Content-Length in any
 * case (a HEAD or 304 response's CL describes the representation).
 *
 * keepalive: on for HTTP/1.1, off for 1.0; Connection "close" turns it off
 * and wins, "keep-alive" turns it on for 1.0; always off when
 * close_delimited and when -1 is returned. upgrade: status 101 with a
 * Connection "upgrade" option and a non-empty Upgrade field (an Upgrade field
 * in another response only advertises, RFC 9110 §7.8).
 *
 * Returns 0, or -1: the framing is unusable; the caller answers 502, passes
 * nothing of the response on and does not reuse the connection. -1 for:
 *  - Content-Length together with Transfer-Encoding (RFC 9112 §6.3 p3; a
 *    proxy must not forward such a message, and refusing beats guessing);
 *  - more than one Content-Length, even equal ("5, 5" or two fields), and a
 *    Content-Length that is not 1*DIGIT or exceeds SWS_MAX_CONTENT_LENGTH;
 *  - "chunked" not the last coding, "chunked" twice or with parameters, a
 *    coding that is not a token, or a Transfer-Encoding with no coding;
 *  - Transfer-Encoding in an HTTP/1.0 response (RFC 9112 §6.1: faulty
 *    framing);
 *  - our choice for 1xx and 204, which must not carry a body
 *    (RFC 9110 §8.6, RFC 9112 §6.1): any Transfer-Encoding, or a
 *    Content-Length other than 0 ("Content-Length: 0" is tolerated as
 *    harmless). A 304's Content-Length is allowed (RFC 9110 §8.6).
 * A response that is -1 still has *info filled as far as it could be.
 */
int sws_analyze_response(int req_method, int minor_version, int status, const sws_header_t *headers,
                         size_t num_headers, sws_response_info_t *info);

/* Framing limits of the chunked decoder: chunk extensions are skipped, not
 * stored, so these bound the work a peer can make us do without sending
 * body bytes. Exceeding either is SWS_PARSE_ERROR. */
#define SWS_CHUNK_EXT_MAX      4096  /* bytes of chunk-ext on one size line */
#define SWS_CHUNK_TRAILER_MAX 16384  /* bytes of the whole trailer section */

/* State of a chunked decoder; zero it (memset or = {0}) to start. */
typedef struct {
    uint64_t bytes_left_in_chunk; /* chunk-data bytes still to come */
    uint64_t total;               /* decoded body bytes so far, all calls */
    int state;                    /* private */
    int hex_count;                /* hex digits read of the current size */
    uint32_t framing_bytes;       /* chunk-ext or trailer bytes, for the limits */
    uint32_t trailer_out;         /* keep_trailers: trailer bytes the last call left (below) */
    unsigned char keep_trailers;  /* set by the caller: the trailer section is kept, not dropped */
} sws_chunked_decoder_t;

/*
 * Decodes a chunked message body (RFC 9112 §7.1) in place, incrementally.
 * buf[0..*bufsz) is the next stretch of input; on return buf[0..*bufsz) holds
 * the body bytes it decoded (possibly 0). Trailer fields are checked and
 * discarded.
 *
 * Returns SWS_PARSE_INCOMPLETE when every input byte was used and the body
 * goes on; >= 0 when the body ended: the return value is the number of input
 * bytes that followed it (the next request, pipelined), which have been moved
 * to buf + *bufsz; SWS_PARSE_ERROR for malformed framing: a size that is not
 * 1*HEXDIG or has more than 16 digits, total overflow, data not followed by
 * CRLF, a CR not followed by LF, a bare LF, a malformed chunk-ext (RFC 9112
 * §7.1.1) or trailer field (§7.1.2), or exceeding the limits above. The
 * decoder stays in the error state. Called again after the end, it treats
 * all input as following the body.
 *
 * Lines here must end in CRLF: RFC 9112 §2.2's bare-LF allowance covers only
 * the start-line and header fields, and body framing is where a proxy and a
 * server that disagree get smuggled past.
 *
 * With d->keep_trailers set (a proxy that passes trailers on), the trailer
 * section's field lines, checked as above, each with its CRLF and without
 * the final empty line, are not dropped: the d->trailer_out bytes at
 * buf + *bufsz, right after the body bytes of this call, are the part of
 * the section this call read (a section that spans calls comes in pieces,
 * in order; the caller keeps them). Bytes after the body then follow the
 * trailer bytes. trailer_out is 0 after a call that read none.
 */
ssize_t sws_decode_chunked(sws_chunked_decoder_t *d, char *buf, size_t *bufsz);

/*
 * Reads past a chunked body without keeping it: the same decoder, states,
 * limits, returns and errors as sws_decode_chunked over buf[0..len), but
 * buf is only read and nothing is moved. d->total counts the body bytes
 * passed. Returns SWS_PARSE_INCOMPLETE (all of buf was body), >= 0 when the
 * body ended: the number of bytes after it (the next request, which starts
 * at buf + len - ret), or SWS_PARSE_ERROR. For a body nobody reads (the
 * protocol discards it), so it can be checked before the answer, and the
 * bytes stay as they were for a handler that turns out to want them.
 */
ssize_t sws_skip_chunked(sws_chunked_decoder_t *d, const char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SCALWS_HTTP1_H */
