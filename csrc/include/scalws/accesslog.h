/* scalws/accesslog.h — the access log and request ids (csrc/http/accesslog.c).
 *
 * Owns: the per-worker log buffer (`combined` or `json` lines, written when
 * it fills, every flush interval, and at exit) and the request-id sequence
 * (16 hex digits from a random per-worker base and a counter).
 * May call: the core (time strings, the clock), net (the peer as text).
 * Called by the protocols, once per answered request.
 */
#ifndef SCALWS_ACCESSLOG_H
#define SCALWS_ACCESSLOG_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/net.h"
#include "scalws/response.h"

enum { SWS_LOG_OFF = 0, SWS_LOG_COMBINED = 1, SWS_LOG_JSON = 2 };

/* The access log's part of the engine (e->alog). */
typedef struct {
    int fd, format;
    char *buf;
    size_t len, cap;
    uint32_t flush_ms;
    uint64_t last_flush;
    uint64_t rid_base, rid_seq;
} sws_alog_t;

SWS_INTERNAL void sws_alog_init(sws_engine_t *e, uint64_t seed);
SWS_INTERNAL void sws_alog_free(sws_engine_t *e);
/* Logs one request: r may be NULL (a request too broken to parse); `ms`
 * is the request's time. A line never gets dropped: client fields are cut
 * so that it fits the buffer. */
SWS_INTERNAL void access_log(sws_engine_t *e, const sws_conn_t *c, const sws_request_t *r,
                             int status, size_t body_bytes, uint64_t ms);
/* sws_alog_flush writes the buffer out (sws_engine_flush calls it at exit);
 * sws_alog_maybe_flush only once flush_ms passed since the last write. */
SWS_INTERNAL void sws_alog_flush(sws_engine_t *e);
SWS_INTERNAL void sws_alog_maybe_flush(sws_engine_t *e);
SWS_INTERNAL uint64_t next_request_id(sws_engine_t *e);
/* A request id as 16 hex digits (no NUL). */
SWS_INTERNAL void format_request_id(uint64_t id, char out[16]);
/* May a trusted peer's X-Request-Id be kept: 1 to RID_MAX bytes of letters,
 * digits, '-', '_' and '.' (HTTP/1 and HTTP/2 take it alike). */
SWS_INTERNAL int sane_request_id(const char *s, size_t n);

#endif
