/* scalws/response.h — what a protocol and a handler share: the request
 * view and the response interface (csrc/http/ implements the interface for
 * HTTP/1, h1_out.c, and for HTTP/2, h2.c).
 *
 * A protocol parses a request into an sws_request_t and hands it, with an
 * sws_resp_t, to the handler its router chose. The handler describes its
 * answer through the interface — status, header fields, then a body as
 * bytes (copied or referenced), a file segment, or a stream of pieces whose
 * length is unknown — and never writes protocol bytes itself: the status
 * line, Content-Length, chunk framing and the Connection header are the
 * protocol's. Calls come in this order:
 *
 *   interim*, head, (field | fields)*, start_body, (data | file)*, trailers?, done
 *
 * interim (an informational 1xx before the final answer: an upstream's 103
 * Early Hints) and trailers (a trailer section after a stream's last data)
 * are given by the proxy alone, with fields it has already filtered, and
 * each is copied before it returns. The protocol decides whether the
 * client gets them: HTTP/1 sends no 1xx to an HTTP/1.0 client (RFC 9110
 * §15.2) and trailers only in a chunked body to a client that sent
 * "TE: trailers" (§6.5.1, §10.1.4); HTTP/2 sends both (a HEADERS without
 * END_STREAM before the final one; a trailing HEADERS with END_STREAM).
 * Our own 100 Continue is the protocol's, never an interim call.
 *
 * A handler that answers at once (respond, static) makes those calls and
 * returns. One that waits on something (the proxy) attaches its hooks and
 * keeps the sws_resp_t until it calls finish: meanwhile the protocol feeds
 * it the request body (hooks->body, as much as it asks for with
 * want_body), tells it when the client has taken what was written
 * (hooks->drained), and that the exchange is over on the client's side
 * (hooks->gone, with why: the client left, or its body stalled; after it
 * the handler must not touch the sws_resp_t again).
 *
 * Ownership: bytes given with SWS_REF (and files given to `file` or
 * `hold_file`, buffers given to `hold_heap`) stay valid, or are the
 * protocol's, until the client has taken them; everything else is copied.
 * May call: nothing; it is an interface. Its users: protocols (above) and
 * handlers (below them).
 */
#ifndef SCALWS_RESPONSE_H
#define SCALWS_RESPONSE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "scalws/core.h"
#include "scalws/filecache.h"
#include "scalws/http1.h"

typedef struct sws_conn sws_conn_t;

/* One request, as every protocol presents it to handlers. Pointers are
 * valid while the handler's first call runs (the protocol's buffer);
 * a handler that answers later copies what it keeps. */
typedef struct {
    const char *method, *target;
    size_t method_len, target_len;
    int method_id;                /* SWS_M_* */
    int minor;                    /* HTTP/1.minor; for logs (1 for HTTP/2: its semantics) */
    int http2;                    /* it came over HTTP/2 or HTTP/3 (their semantics) */
    const sws_header_t *h;
    size_t nh;
    const char *host;             /* Host, or the authority of an absolute target */
    size_t host_len;
    const char *path;             /* normalized (what routes match): decoded, no dot segments */
    size_t path_len;
    const char *raw_path;         /* the target's path as sent */
    size_t raw_len;
    const char *query;            /* after the target's '?' (without it); query_len 0: none */
    size_t query_len;
    const struct sws_site *site;  /* the site the request was routed in */
    const sws_request_info_t *info; /* framing: body length or chunked, upgrade, expect */
    const sws_conn_t *conn;       /* where it came from: the peer, its trust */
    const char *rid;              /* request id (X-Request-Id); NULL: the log makes one */
    size_t rid_len;
    /* Cache peers (dispatch.c), zero otherwise: */
    uint64_t peer_hash;           /* the cache key's hash: the peers' proxy picks its owner by it */
    uint32_t peer_only;           /* > 0: the peers' proxy sends to server peer_only - 1 alone */
    uint32_t peers_purged;        /* a PURGE: the peers it was sent to (its answer says) */
    unsigned peer : 1,            /* it came from a peer (its marker checked): served here */
             peer_https : 1,      /* the scheme the first node saw (the marker says) */
             http3 : 1,           /* it came over HTTP/3 (the log says HTTP/3.0; else
                                     http2: HTTP/2.0) */
             head_refused : 1,    /* a head refused before it parsed (the access log's view
                                     alone): method is its first line as it came, cut */
             early : 1;           /* it came in TLS early data (0-RTT), before the
                                     handshake ended: a replay is possible (RFC 8470) */
} sws_request_t;

static inline const sws_header_t *find_header(const sws_request_t *r, const char *name, size_t len)
{
    for (size_t i = 0; i < r->nh; i++)
        if (r->h[i].name_len == len && strncasecmp(r->h[i].name, name, len) == 0)
            return &r->h[i];
    return NULL;
}

/* A field HTTP/2 and HTTP/3 never carry (RFC 9113 §8.2.2, RFC 9114
 * §4.2): n[0..nl) lowercase. */
static inline int sws_conn_specific(const char *n, size_t nl)
{
    switch (nl) {
    case 2: return memcmp(n, "te", 2) == 0;
    case 7: return memcmp(n, "upgrade", 7) == 0;
    case 10: return memcmp(n, "connection", 10) == 0 || memcmp(n, "keep-alive", 10) == 0;
    case 16: return memcmp(n, "proxy-connection", 16) == 0;
    case 17: return memcmp(n, "transfer-encoding", 17) == 0;
    default: return 0;
    }
}

/* A header name (lowercase). */
typedef struct {
    const char *name;
    size_t name_len;
} sws_hname_t;

/* Body kinds for start_body. */
enum {
    SWS_BODY_NONE,    /* no body and no length (304, 204, 1xx, an answer to HEAD without one) */
    SWS_BODY_LENGTH,  /* `len` bytes (for HEAD: the length a GET would have) */
    SWS_BODY_STREAM,  /* length unknown: pieces until done */
    SWS_BODY_TUNNEL   /* 101: from here on, raw bytes both ways (HTTP/2: RFC 8441's 200) */
};
enum { SWS_REF = 1 };            /* data(): reference the bytes instead of copying */
enum { SWS_FIN_OK = 0, SWS_FIN_ABORT = 1 }; /* finish(): abort = the body is cut short */

typedef struct sws_resp sws_resp_t;

/* Why a protocol lets go of a waiting handler (hooks->gone). */
enum {
    SWS_GONE_CLIENT,       /* the client left (closed, reset the stream), or the connection failed */
    SWS_GONE_BODY_TIMEOUT, /* the request body stalled for body_timeout: the protocol answers 408
                              (or ends the connection, or the stream, once an answer began) and
                              logs it; the handler abandons its upstream side without a line */
    SWS_GONE_BODY_REFUSED  /* the request body grew past max_body_bytes (413), or its chunked
                              framing broke (400): the protocol answers (the access log says
                              which); the handler lets go without a line, the client is there */
};

/* A waiting handler's side. body: request body bytes in order, already
 * unframed (a tunnel: the client's raw bytes); done = the last piece.
 * Returns 0, 1 when the exchange ended inside (touch nothing), or -1 when
 * the handler failed (the protocol closes the connection). gone: why is a
 * SWS_GONE_*. */
typedef struct {
    int (*body)(sws_engine_t *e, void *ctx, char *p, size_t n, int done);
    void (*drained)(sws_engine_t *e, void *ctx);
    void (*gone)(sws_engine_t *e, void *ctx, int why);
} sws_resp_hooks_t;

typedef struct {
    /* reason NULL: the standard phrase */
    void (*head)(sws_engine_t *e, sws_resp_t *r, int status, const char *reason, size_t reason_len);
    void (*field)(sws_engine_t *e, sws_resp_t *r, const char *name, size_t name_len,
                  const char *value, size_t value_len);
    /* Whole "Name: value\r\n" lines built at config load. */
    void (*fields)(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len);
    void (*start_body)(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len);
    void (*data)(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags);
    /* A segment of a file; the protocol takes over the reference. */
    void (*file)(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len,
                 size_t chunk);
    /* Keep f (referenced by data given with SWS_REF) until it is written. */
    void (*hold_file)(sws_engine_t *e, sws_resp_t *r, sws_file_t *f);
    /* Free buf (referenced by data given with SWS_REF) once it is written. */
    void (*hold_heap)(sws_engine_t *e, sws_resp_t *r, char *buf);
    void (*done)(sws_engine_t *e, sws_resp_t *r);

    /* For handlers that answer later. */
    void (*attach)(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *hooks, void *ctx);
    /* Sends what was given so far: 0, or -1 when the client is gone (the
     * gone hook ran: touch nothing). */
    int (*flush)(sws_engine_t *e, sws_resp_t *r);
    /* Output the client has not taken yet (the handler waits for drained). */
    int (*backed_up)(const sws_resp_t *r);
    /* Whether the handler can take request body bytes now. */
    void (*want_body)(sws_engine_t *e, sws_resp_t *r, int on);
    /* Forgets what was given since the last flush (a head whose body turned out bad). */
    void (*discard)(sws_engine_t *e, sws_resp_t *r);
    /* The handler is done with r (SWS_FIN_*); the protocol logs it and goes on. */
    void (*finish)(sws_engine_t *e, sws_resp_t *r, int how);
    /* Drops the client connection now; the gone hook runs. */
    void (*close)(sws_engine_t *e, sws_resp_t *r);
    /* Calls h->release once what was given so far is written (or the
     * client is gone): memory referenced with SWS_REF that is not the
     * handler's to free (the cache's shared store). */
    void (*hold)(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h);

    /* An informational response (status 102..199, not 101) before head;
     * reason NULL: the standard phrase. h[0..nh) are its fields. Any number
     * of them; the caller flushes after each (it must go before the final
     * answer, which may be long in coming). */
    void (*interim)(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                    size_t reason_len, const sws_header_t *h, size_t nh);
    /* The trailer section of a SWS_BODY_STREAM body: after its last data,
     * before done; h[0..nh) (nh > 0) hold no field RFC 9110 §6.5.1 keeps
     * out of trailers. */
    void (*trailers)(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh);
} sws_resp_ops_t;

struct sws_resp {
    const sws_resp_ops_t *ops;
    /* A Date for the next head in place of now (the cache's stored one,
     * RFC 9110 6.6.1); the protocol copies it and clears it. */
    const char *date;
    /* Set by the cache's tee: the proxy passes the upstream's Date on
     * (the protocol writes its own; the cache needs the origin's). */
    unsigned char upstream_date;
    /* Set by a handler before it answers with its own page (a 502 when the
     * upstream failed), not the upstream's: the cache never stores it. */
    unsigned char local_answer;
};

/* A start that answered at once through r (not an error status). */
#define SWS_ANSWERED 1

/* The start of a handler that answers later (sws_proxy_start,
 * sws_fastcgi_start): req (req->rid set) on the route whose config is conf
 * (its sws_handler_t.data), through r; body[0..n) is the request body that
 * came with the head, unframed, done = it is all of it. 0 when the handler
 * took the request (it attached its hooks to r and calls finish when
 * done), or a status to answer now with nothing written. The dispatcher
 * (scalws/dispatch.h) picks it; the cache gets it from there and starts
 * the handler through its tee, never naming one. */
typedef int (*sws_start_fn)(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                            const void *conf, char *body, size_t n, int done);

/* What a route maps to: the handler kind and its config (owned by the
 * caller, scalws/server/engine.pyx, for the engine's life). */
enum { SWS_H_RESPOND = 1, SWS_H_STATIC = 2, SWS_H_PROXY = 3, SWS_H_REDIRECT_HTTPS = 4,
       SWS_H_FASTCGI = 5 };
struct sws_cache_route;
typedef struct {
    int kind; /* SWS_H_* */
    void *data;
    uint32_t stat_id; /* the route's counters (scalws/stats.h): index + 1; 0: none */
    const struct sws_cache_route *cache; /* proxy and fastcgi: the response cache, NULL: none */
} sws_handler_t;

static inline void resp_head(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                             size_t reason_len)
{
    r->ops->head(e, r, status, reason, reason_len);
}
static inline void resp_field(sws_engine_t *e, sws_resp_t *r, const char *name, size_t nl,
                              const char *value, size_t vl)
{
    r->ops->field(e, r, name, nl, value, vl);
}
#define resp_field_lit(e, r, name, value, vl) resp_field(e, r, name, sizeof name - 1, value, vl)
static inline void resp_fields(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len)
{
    r->ops->fields(e, r, lines, len);
}
static inline void resp_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    r->ops->start_body(e, r, kind, len);
}
static inline void resp_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags)
{
    r->ops->data(e, r, p, n, flags);
}
static inline void resp_done(sws_engine_t *e, sws_resp_t *r) { r->ops->done(e, r); }

#endif
