/* http/reqcheck.h — the checks of a request's fields that HTTP/2 (RFC
 * 9113 8.2-8.3) and HTTP/3 (RFC 9114 4.2-4.3) share: lowercase tokens for
 * names, values without NUL, CR, LF or blanks at either end, no
 * connection-specific field, pseudo-header fields known, once, before
 * the regular ones and never in trailers, one content-length; and, at the
 * end of the section, the pseudo-header fields the method needs. A leaf:
 * csrc/http/h2/session_recv.c and csrc/http/h3/h3sess_recv.c call it. */
#ifndef SCALWS_HTTP_REQCHECK_H
#define SCALWS_HTTP_REQCHECK_H

#include <stddef.h>
#include <stdint.h>

#ifndef SWS_INTERNAL
#define SWS_INTERNAL __attribute__((visibility("hidden")))
#endif

/* What a request's fields said so far; zeroed for each request. */
typedef struct {
    uint64_t cl;               /* content-length, when cl_known */
    uint8_t pseudo;            /* the pseudo-header fields seen (reqcheck.c's PH_*) */
    uint8_t said;              /* what they said (SAID_*) */
    unsigned regular : 1,      /* a regular field came: no pseudo-header field after it */
        connect : 1,           /* :method CONNECT */
        cl_known : 1;
} sws_reqcheck_t;

/* One field of a request's section (trailers: of its trailer section);
 * connect_proto: :protocol is allowed (RFC 8441 / RFC 9220). 0, or -1:
 * the request is malformed. */
SWS_INTERNAL int sws_reqcheck_field(sws_reqcheck_t *c, const uint8_t *n, size_t nl,
                                    const uint8_t *v, size_t vl, int trailers, int connect_proto);
/* At the end of the request's section: its pseudo-header fields are those
 * its method needs, :path in origin form (or `*` for OPTIONS), and an
 * authority in :authority or host. 1 yes, 0 malformed. */
SWS_INTERNAL int sws_reqcheck_pseudo_ok(const sws_reqcheck_t *c);
/* Content-Length as 1*DIGIT, at most 19 digits: 0, or -1. */
SWS_INTERNAL int sws_parse_content_length(const uint8_t *v, size_t n, uint64_t *out);

#endif
