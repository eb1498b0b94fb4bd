/* scalws/h1.h — the HTTP/1 connection protocol (csrc/http/h1.c) and its
 * serialization of the response interface (csrc/http/h1_out.c).
 *
 * Owns: a client connection's HTTP/1 state (h1conn_t, which begins with
 * net's sws_conn_t): request framing with the parser of scalws/http1.h,
 * pipelining (every request of a read answered into one batch, one write),
 * keep-alive, 100-continue, reading past the bodies of answered requests,
 * the header and body timeouts and their 408, the Connection header, status lines,
 * Content-Length and chunked framing, and the request body and client
 * backpressure of a handler that answers later (an exchange, h1x_t).
 *
 * May call: net (bytes in and out), the router, the handlers (respond,
 * static, proxy), the access log, the core. Handlers reach it only through
 * sws_resp_t (scalws/response.h).
 */
#ifndef SCALWS_H1_H
#define SCALWS_H1_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/http1.h"
#include "scalws/net.h"
#include "scalws/response.h"
#include "scalws/router.h"

#define COPY_HEAD_MAX 8192    /* header blocks up to this are copied; longer ones referenced */
#define RID_MAX 64            /* longest X-Request-Id taken from a trusted peer */
#define SWS_TLS_FIELDS_MAX 256 /* a site's header lines over TLS (HSTS); the config keeps them shorter */

enum { S_HEAD, S_BODY };

typedef struct h1x h1x_t;

typedef struct {
    sws_conn_t c;              /* first: net's part */
    sws_resp_t resp;           /* the response interface, HTTP/1's implementation */
    const sws_vhosts_t *vh;
    const sws_site_t *r_site;  /* the site of the response being written (TLS fields) */
    h1x_t *x;                  /* an exchange whose handler answers later */
    uint64_t req_start;        /* monotonic ms when the current head began */
    union {
        uint64_t body_left;    /* S_BODY: Content-Length bytes of an answered request to skip */
        sws_head_check_t hs;   /* S_HEAD: how far the lines of a head in progress were checked */
    };
    uint64_t r_sent;           /* body bytes of the response being written, for the log */
    sws_chunked_decoder_t *dec; /* the chunked body of an answered request, read past (malloc'd
                                   only while it goes on past a read: idle connections stay
                                   small) */
    uint32_t requests;
    uint16_t r_status;         /* the response being written */
    uint16_t r_route;          /* its route's stat_id (0: none; ids over 65535 are not counted) */
    unsigned char state;       /* S_* */
    unsigned char chunked : 1, /* the body being read past is chunked */
        close_after : 1,       /* close once the output is out */
        in_head : 1,           /* a head has begun */
        head_armed : 1,        /* the TL_HEADER deadline belongs to the current head */
        resume : 1;            /* the stash may hold whole requests (output stopped us) */
    unsigned char r_minor;     /* the response being written: its request's HTTP/1.minor */
    unsigned char r_head_only : 1, /* HEAD: no body bytes */
        r_keep : 1,            /* the request allows keep-alive */
        r_close : 1,           /* the head said Connection: close */
        r_chunked : 1,         /* body pieces get chunk framing */
        r_no_body : 1,         /* no body bytes go out (HEAD, 204, 304, 1xx) */
        r_close_delim : 1;     /* HTTP/1.0 and no length: the close ends the body */
} h1conn_t;

/* An exchange in progress: what HTTP/1 keeps for a handler that answers
 * later (the request for the log, the request body's framing). */
struct h1x {
    const sws_resp_hooks_t *hooks;
    void *ctx;
    unsigned req_done : 1,     /* the whole request body went to the handler */
        req_chunked : 1,
        want_body : 1,         /* the handler takes body bytes now */
        tunnel : 1,            /* 101: raw bytes both ways */
        broken : 1,            /* the tunnel could not take the client's first bytes */
        started : 1,           /* a byte of the final response went out */
        te_trailers : 1,       /* the client sent "TE: trailers": it takes a trailer section */
        trailed : 1;           /* the last chunk and trailer fields went: done ends the section */
    uint64_t req_left;         /* Content-Length body bytes still to come */
    sws_chunked_decoder_t rdec;
    sws_request_t log;
    sws_header_t log_h[2];     /* Referer, User-Agent */
    char rid[RID_MAX];
    char logbuf[];             /* method, target, host, referer, user-agent */
};

/* HTTP/1's part of the engine (e->h1). */
typedef struct {
    char *path;                /* the normalized path of the current request */
    const char *server_line;   /* "Server: x\r\n" or empty */
    size_t server_line_len;
} sws_h1_t;

extern const sws_proto_t sws_h1_proto;

SWS_INTERNAL int sws_h1_init(sws_engine_t *e);
SWS_INTERNAL void sws_h1_free(sws_engine_t *e);
/* The graceful stop's part: idle connections close, recently busy ones get
 * a grace period (see sws_engine_shutdown). */
SWS_INTERNAL void sws_h1_shutdown(sws_engine_t *e);

/* h1.c, for h1_out.c */
SWS_INTERNAL void conn_settle(sws_engine_t *e, h1conn_t *hc, const char *rest, size_t rest_len);
/* The body of an answered request is read past: `left` Content-Length
 * bytes, or a chunked body from the decoder state `from` (NULL: its start).
 * -1 when out of memory (the connection is then to close). */
SWS_INTERNAL int h1_skip_body(h1conn_t *hc, int chunked, uint64_t left,
                              const sws_chunked_decoder_t *from);

/* h1_out.c, for h1.c */
extern const sws_resp_ops_t sws_h1_resp_ops;
/* Prepares the response state for a request (before its handler runs). */
SWS_INTERNAL void h1_resp_begin(h1conn_t *hc, int minor, int head_only, int keep);
/* Batch bytes sws_respond_answer copies for resp (well inside OUT_BUF). */
SWS_INTERNAL size_t h1_respond_size(const sws_engine_t *e, const void *resp);
/* Answers the error page of `status` (logged for r, which may be NULL) and
 * marks the connection to close after it. */
SWS_INTERNAL void h1_conn_error(sws_engine_t *e, h1conn_t *hc, int status, const sws_request_t *r,
                                int head_only);
/* Starts an exchange with a handler that answers later (the proxy) for the
 * request `req` whose body begins at body[0..len). Returns 0 when the
 * handler took it (hc->x set; *took = the input bytes it consumed: what
 * follows is the next request), or a status to answer now (the rest of
 * the body, if any, is then read past as for any answered request). */
SWS_INTERNAL int h1_x_start(sws_engine_t *e, h1conn_t *hc, sws_request_t *req,
                            const sws_request_info_t *info, const sws_handler_t *h, char *body,
                            size_t len, size_t *took);
SWS_INTERNAL void h1_x_event(sws_engine_t *e, h1conn_t *hc, uint32_t events);
SWS_INTERNAL void h1_x_closing(sws_engine_t *e, h1conn_t *hc);
/* The exchange's request body stalled for body_timeout (hc->c's TL_BODY
 * entry expired, and is off its list): the handler lets go; the client
 * gets 408 and the close when no answer began, else the connection closes. */
SWS_INTERNAL void h1_x_body_timeout(sws_engine_t *e, h1conn_t *hc);

#endif
