/* scalws/fcgi.h — FastCGI 1.0 records (csrc/http/fcgi.c), a leaf.
 *
 * Owns: the bytes of the records a web server sends in the Responder role
 * (BEGIN_REQUEST, PARAMS with their name-value pairs, STDIN) and an
 * incremental decoder of what the application sends back (STDOUT, STDERR,
 * END_REQUEST), which unframes STDOUT in place the way sws_decode_chunked
 * unframes a chunked body.
 *
 * May call: nothing of ours; pure functions over caller-owned memory.
 * Fuzzed by tests/fuzz/fuzz_fcgi.c.
 */
#ifndef SCALWS_FCGI_H
#define SCALWS_FCGI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    SWS_FCGI_BEGIN_REQUEST = 1,
    SWS_FCGI_ABORT_REQUEST = 2,
    SWS_FCGI_END_REQUEST = 3,
    SWS_FCGI_PARAMS = 4,
    SWS_FCGI_STDIN = 5,
    SWS_FCGI_STDOUT = 6,
    SWS_FCGI_STDERR = 7,
    SWS_FCGI_DATA = 8,
    SWS_FCGI_GET_VALUES = 9,
    SWS_FCGI_GET_VALUES_RESULT = 10,
    SWS_FCGI_UNKNOWN_TYPE = 11
};
/* END_REQUEST protocolStatus */
enum { SWS_FCGI_REQUEST_COMPLETE = 0, SWS_FCGI_CANT_MPX_CONN = 1, SWS_FCGI_OVERLOADED = 2,
       SWS_FCGI_UNKNOWN_ROLE = 3 };

#define SWS_FCGI_HEADER_LEN 8
#define SWS_FCGI_MAX_CONTENT 65535
#define SWS_FCGI_BEGIN_LEN 16   /* a BEGIN_REQUEST record, header included */

/* A record header: version 1, type, request id, content and padding lengths. */
void sws_fcgi_header(char *out, int type, uint16_t id, size_t content_len, size_t pad_len);
/* BEGIN_REQUEST, role Responder; keep_conn: FCGI_KEEP_CONN (the application
 * keeps the connection open after END_REQUEST). Writes SWS_FCGI_BEGIN_LEN bytes. */
void sws_fcgi_begin(char *out, uint16_t id, int keep_conn);
/* Bytes one name-value pair takes in a PARAMS stream (lengths < 128 take one
 * byte, others four: a length must be below 2^31). */
static inline size_t sws_fcgi_nv_len(size_t nl, size_t vl)
{
    return (nl < 128 ? 1 : 4) + (vl < 128 ? 1 : 4) + nl + vl;
}
/* Writes one pair; returns the end. value NULL: the lengths and the name
 * only, the vl bytes before the end left for the caller to fill. */
char *sws_fcgi_nv(char *out, const char *name, size_t nl, const char *value, size_t vl);

/* Reads the pairs of a PARAMS stream body (tests and the fuzzer check the
 * encoder with it): calls fn for each; 0, or -1 when p[0..len) is not a
 * whole number of well-formed pairs. */
int sws_fcgi_nv_each(const char *p, size_t len,
                     void (*fn)(void *ctx, const char *n, size_t nl, const char *v, size_t vl),
                     void *ctx);

/* The application's side of one request, decoded incrementally. Zero it
 * (and set id) before the first call. */
typedef struct {
    uint16_t id;                  /* the request id we sent */
    uint8_t hdr[SWS_FCGI_HEADER_LEN];
    uint8_t hlen;                 /* header bytes collected so far */
    uint8_t type;                 /* of the record being read */
    uint32_t content_left, pad_left;
    uint8_t end[8];               /* END_REQUEST's body, collected */
    uint8_t elen;
    uint32_t app_status;          /* END_REQUEST: the application's exit status */
    uint8_t protocol_status;      /* END_REQUEST: SWS_FCGI_REQUEST_COMPLETE... */
    unsigned stdout_closed : 1,   /* an empty STDOUT record came */
        mgmt : 1,                 /* the record being read is a management one (id 0) */
        ended : 1;                /* END_REQUEST came: nothing more belongs to this request */
} sws_fcgi_dec_t;

#define SWS_FCGI_ERROR (-1)

/* Decodes buf[0..len): STDOUT content moves to buf[0..*out) (in place; the
 * bytes are the response's, in order), STDERR content goes to
 * on_stderr(ctx, p, n) while p is valid (the callee copies), management
 * records (request id 0: GET_VALUES_RESULT, UNKNOWN_TYPE) are skipped. Stops
 * after END_REQUEST (d->ended). Returns the input bytes consumed (len, or
 * fewer when END_REQUEST came before the end: the rest is not this
 * request's), or SWS_FCGI_ERROR: a version other than 1, a record of another
 * request, a type the application must not send, STDOUT after its end, an
 * END_REQUEST whose body is not 8 bytes. */
ssize_t sws_fcgi_decode(sws_fcgi_dec_t *d, char *buf, size_t len, size_t *out,
                        void (*on_stderr)(void *ctx, const char *p, size_t n), void *ctx);

#endif
