/* What csrc/handlers/proxy.c and proxy_head.c share: the proxied request
 * (px_t) and the building of the request head sent upstream; fastcgi.c
 * uses its limits and deadline kinds (D_*). Not an API: the handler's
 * contract is scalws/proxy.h. */
#ifndef SCALWS_PROXY_INT_H
#define SCALWS_PROXY_INT_H

#include "context.h"
#include "fields_int.h"

#define RESP_HEADERS_MAX 128     /* upstream response fields; more: 502 */
#define RESP_HEAD_MAX (24 * 1024) /* our rebuilt response head must fit the batch */
/* Interim (1xx) answers taken per request; one more is a bad response
 * (502): each read restarts the read timeout, so an upstream sending 1xx
 * without end would hold the client, and fill its link, for ever. */
#define PX_INTERIM_MAX 16
#define CONN_TOKENS_MAX 16

enum { RS_HEAD, RS_BODY, RS_DONE, RS_TUNNEL };
enum { D_NONE, D_CONNECT, D_SEND, D_READ };
/* What went wrong, for retries, passive health and the log. */
enum { F_CONNECT, F_CONNECT_TIMEOUT, F_RESET, F_READ_TIMEOUT, F_SEND_TIMEOUT, F_BAD_RESPONSE,
       F_TLS, F_TLS_TIMEOUT };

typedef struct px {
    sws_resp_t *r;                /* the client's side */
    const sws_conn_t *conn;       /* the client connection: its peer, for keys and logs */
    upconn_t *uc;
    const sws_proxy_t *p;
    sws_upstream_t *up;
    int method, minor, upgrade;
    int rs;                       /* RS_* */
    int status;
    unsigned started : 1,         /* a response byte went to the client */
        req_done : 1,             /* the whole request body went into w */
        req_chunked : 1,
        can_retry : 1,            /* head[] holds the whole request */
        junk : 1,                 /* bytes after the response: do not reuse */
        up_eof : 1,               /* tunnel: the upstream closed */
        in_start : 1,             /* sws_proxy_start is on the stack: errors are returned, not sent */
        in_relay : 1,             /* up_read is putting a head through: body bytes only queue */
        cl_eof : 1,               /* tunnel: the client ended its side (HTTP/2 END_STREAM) */
        wr_shut : 1;              /* tunnel: the upstream was told (shutdown SHUT_WR) */
    int early_status;             /* the error sws_proxy_start returns */
    uint32_t n_interim;           /* interim (1xx) heads read for this request, every attempt */
    uint32_t attempts;
    uint64_t t_sent;              /* CLOCK_MONOTONIC ns when the attempt began */
    uint64_t tried;               /* servers tried, by index (first 64) */
    uint32_t up_gen;              /* the group's gen those indexes belong to */
    uint64_t hash;                /* balance: hash */
    uint32_t only;                /* > 0: server only - 1 alone, one attempt (req->peer_only) */
    char *head;                   /* rebuilt head (+ the body when it came whole), for retries */
    size_t head_len;
    char *w;                      /* bytes for the upstream */
    size_t wlen, woff, wcap;
    sws_response_info_t ri;
    uint64_t resp_left;
    sws_chunked_decoder_t dec;    /* keeps the trailer section (keep_trailers) */
    char *tr;                     /* the trailer section so far (malloc'd only when there is one) */
    size_t tr_len;
    char *rbuf;
    size_t rcap, rlen, last_len;
    char rid[RID_MAX];
    size_t rid_len;
    int method_len;               /* what[0..method_len) is the method, then the target */
    int target_len;
    char what[];
} px_t;

/* proxy_head.c */
/* Splits the Connection option lists of headers[] into tok[] (at most
 * CONN_TOKENS_MAX); in_tokens says whether h is one of them. */
SWS_INTERNAL int conn_tokens(const sws_header_t *h, size_t nh, const char **tok, size_t *tlen);
SWS_INTERNAL int in_tokens(const sws_header_t *h, const char *const *tok, const size_t *tlen, int nt);
/* Builds x->head: the request line and fields for the upstream, with room
 * for body_room more bytes. 0, or -1 when out of memory. */
SWS_INTERNAL int build_head(sws_engine_t *e, px_t *x, const sws_request_t *r,
                            const sws_request_info_t *info, const char *path, size_t path_len,
                            const char *raw_path, size_t body_room);

/* An upstream response field the client never gets as it came: hop-by-hop
 * (RFC 9110 §7.6.1), framing we redo, the ones we set. Inline: put_head
 * asks it of every field of every answer. */
static inline int px_resp_hop(const sws_header_t *h)
{
    int hop = 0;
    switch (h->name_len) {
    case 2: hop = name_is(h, "te", 2); break;
    case 4: hop = name_is(h, "date", 4); break;
    case 6: hop = name_is(h, "server", 6); break;
    case 7: hop = name_is(h, "trailer", 7) || name_is(h, "upgrade", 7); break;
    case 10: hop = name_is(h, "connection", 10) || name_is(h, "keep-alive", 10); break;
    case 12: hop = name_is(h, "x-request-id", 12); break;
    case 14: hop = name_is(h, "content-length", 14); break;
    case 17: hop = name_is(h, "transfer-encoding", 17); break;
    default: break;
    }
    return hop || (h->name_len > 6 && strncasecmp(h->name, "proxy-", 6) == 0);
}

/* proxy_fields.c */
/* Passes an upstream's 1xx (not 100 or 101) to the client, less px_resp_hop,
 * its Connection options and the route's removed fields (h is filtered in
 * place), and flushes it. 0, or -1 when the client is gone (and x with
 * it: touch nothing). */
SWS_INTERNAL int px_interim(sws_engine_t *e, px_t *x, int status, const char *reason,
                            size_t reason_len, sws_header_t *h, size_t nh);
/* Keeps n more bytes of the trailer section (what the decoder left,
 * dec.trailer_out). 0, or -1 when out of memory. */
SWS_INTERNAL int px_trailer_bytes(px_t *x, const char *p, size_t n);
/* The body ended after a trailer section: its fields, less those RFC 9110
 * §6.5.1 keeps out of trailers and the route's removed ones, go to the
 * client (resp trailers). 0, or -1 for a section we refuse (more than
 * RESP_HEADERS_MAX fields) or out of memory: a bad response. */
SWS_INTERNAL int px_trailers(sws_engine_t *e, px_t *x);

#endif
