/* What the files of HTTP/2's connection protocol share (csrc/http/h2/:
 * conn.c the connection and its events, input.c what the session reports
 * of the client, request.c a request's dispatch, resp.c the response
 * interface, streams.c the streams' queues and their DATA). The contract
 * is scalws/h2.h; the protocol itself is session.h. */
#ifndef SCALWS_H2_INT_H
#define SCALWS_H2_INT_H

#include "context.h"
#include "http/h2/session.h"

/* ---- streams ----------------------------------------------------------------------- */

/* A piece of a response body, or something to let go once the body before
 * it is written (a marker). */
enum { Q_COPY, Q_REF, Q_FILE, Q_HOLD_FILE, Q_HOLD_HEAP, Q_HOLD };

typedef struct qitem {
    sws_hold_t h;              /* a marker that reached the wire: net releases it */
    struct qitem *next;
    sws_h2_t *h2;              /* the engine's HTTP/2 part: its spare items (h2_q_free) */
    int kind;
    uint64_t seq;              /* for discard: pieces given since the last flush */
    const char *p;             /* Q_COPY, Q_REF: the bytes still to send */
    uint64_t off, len;         /* Q_FILE: the range still to send; len: bytes left (data kinds) */
    sws_file_t *f;             /* Q_FILE, Q_HOLD_FILE */
    sws_filecache_t *fc;
    char *heap;                /* Q_HOLD_HEAP */
    sws_hold_t *hold;          /* Q_HOLD */
    char data[];               /* Q_COPY */
} qitem_t;

/* A request header as stored in the stream's buffer (offsets: it grows). */
typedef struct {
    uint32_t n, nl, v, vl;
} hoff_t;

struct h2s {
    sws_resp_t resp;           /* the response interface, HTTP/2's implementation */
    h2conn_t *hc;
    sws_subtimer_t bt;         /* body_timeout while the client owes body (body_timer) */
    h2s_t *prev, *next;        /* hc->streams */
    int32_t id;
    /* the request */
    char *rq;                  /* names and values, as received */
    size_t rq_len, rq_cap;
    hoff_t *hdr;
    size_t nh, hcap;
    hoff_t pm, pp, pa;         /* :method, :path, :authority (n = 0: absent) */
    hoff_t pr;                 /* :protocol (RFC 8441's extended CONNECT) */
    uint32_t hsize;            /* RFC 9113 §6.5.2's size of the list so far */
    uint64_t body_total;
    uint64_t cl_left;          /* content-length bytes still to come (cl_known) */
    uint64_t discard_left;     /* body bytes still read past after a complete answer */
    char *bin;                 /* request body the handler has not taken yet (unconsumed) */
    size_t bin_len, bin_cap;
    uint64_t start;            /* monotonic ms when the stream opened */
    const sws_site_t *site;
    uint16_t route;
    /* a handler that answers later */
    const sws_resp_hooks_t *hooks;
    void *ctx;
    sws_request_t log;
    sws_header_t log_h[2];
    char rid[RID_MAX];
    /* the response */
    char *hb;                  /* the head's fields as records (resp.c), until encoded */
    size_t hb_len, hb_cap;
    uint32_t hb_lines;         /* fields in hb, at most (names lowercased as they came) */
    uint32_t hb_run;           /* 1 + where the last record's length is, when it is a run of lines */
    char date[SWS_HTTP_DATE_LEN];
    char st[3];                /* :status's digits */
    qitem_t *qh, *qt;
    sws_h2field_t *tr;         /* the trailer section (fields_copy), submitted at the body's end */
    size_t ntr;
    uint64_t q_bytes;          /* body bytes queued, not yet framed */
    uint64_t q_seq, commit_seq;
    uint64_t sent;             /* body bytes described, for the log */
    uint16_t status;
    /* RFC 9218 §8: a response's `priority` field merged with the client's
     * signal (SWS_PRI_* masks: which parameters each gave, and their values) */
    uint8_t pri_cli, cli_u, cli_i;
    uint8_t pri_rsp, rsp_u, rsp_i;
    unsigned open : 1,         /* the session has the stream */
        req_done : 1,          /* END_STREAM received */
        fin_given : 1,         /* the handler got body(done = 1) */
        too_big : 1,           /* the header list went over the limits: 431 */
        head_only : 1,         /* HEAD */
        head_ready : 1,        /* start_body was called */
        no_body : 1,           /* no DATA (HEAD, 204, 304, a length of 0) */
        submitted : 1,         /* the HEADERS went to the session */
        body_done : 1,         /* done was called */
        deferred : 1,          /* data_read said SWS_H2D_DEFERRED: resume when more comes */
        end_sent : 1,          /* our END_STREAM went out */
        live : 1,              /* a handler that answers later holds resp */
        want_body : 1,
        drain_due : 1,         /* the handler saw backed_up and waits for drained */
        refs_out : 1,          /* referenced bytes were framed (may sit in pending output) */
        cl_known : 1,          /* the request had a content-length */
        dispatched : 1,
        ws : 1,                /* an extended CONNECT for WebSocket went to the proxy */
        pri_early : 1,         /* pri_cli came from a PRIORITY_UPDATE before the HEADERS */
        tunnel : 1,            /* RFC 8441: the 101 became 200, DATA carries the tunnel */
        body_late : 1;         /* its body timed out: our END_STREAM brings RST_STREAM NO_ERROR */
};

#define H2S(r) ((h2s_t *)((char *)(r) - offsetof(h2s_t, resp)))

/* The head's lines, once the session encoded the HEADERS that point into
 * them: at the stream's first DATA, or the END_STREAM of a head alone. The
 * buffer stays with the stream (and its spare, h2s_free) up to this size. */
#define H2S_HB_KEEP 2048
static inline void h2s_hb_release(h2s_t *s)
{
    if (s->hb_cap > H2S_HB_KEEP) {
        free(s->hb);
        s->hb = NULL;
        s->hb_cap = 0;
    }
    s->hb_len = 0;
    s->hb_lines = 0;
    s->hb_run = 0;
}

/* The PING of the graceful stop (h2_goaway_notice). */
extern const uint8_t h2_stop_ping[8];
extern const sws_resp_ops_t h2_resp_ops;
extern const sws_h2cb_t h2_callbacks;

/* conn.c */
SWS_INTERNAL void h2_wake(sws_engine_t *e, h2conn_t *hc);
SWS_INTERNAL void h2_fail(sws_engine_t *e, h2conn_t *hc);
SWS_INTERNAL void h2_send(sws_engine_t *e, h2conn_t *hc);
SWS_INTERNAL void h2_send_soon(sws_engine_t *e, h2conn_t *hc);
SWS_INTERNAL void h2_goaway(sws_engine_t *e, h2conn_t *hc);
SWS_INTERNAL void h2_goaway_notice(sws_engine_t *e, h2conn_t *hc);
SWS_INTERNAL void h2_calm(sws_engine_t *e, h2conn_t *hc, const char *what);

/* streams.c */
SWS_INTERNAL qitem_t *h2_q_push(h2s_t *s, int kind, size_t extra);
SWS_INTERNAL void h2_q_drop(qitem_t *q);
SWS_INTERNAL int h2_q_is_data(const qitem_t *q);
SWS_INTERNAL void h2_q_cut(h2s_t *s, uint64_t from);
SWS_INTERNAL void h2_q_pop_markers(h2s_t *s);
SWS_INTERNAL void h2_q_retire(h2conn_t *hc, qitem_t *q);
SWS_INTERNAL void h2_q_release(sws_hold_t *h);
SWS_INTERNAL void h2_q_spare_free(sws_h2_t *h2);
SWS_INTERNAL void h2s_free(sws_engine_t *e, h2s_t *s);
SWS_INTERNAL h2s_t *h2s_new(sws_engine_t *e);
SWS_INTERNAL void h2s_log(sws_engine_t *e, h2s_t *s, const sws_request_t *r, int status);
SWS_INTERNAL void h2s_body_timer(sws_engine_t *e, h2s_t *s);
SWS_INTERNAL void h2_consume(h2conn_t *hc, int32_t id, size_t n);
SWS_INTERNAL void h2s_gone_log(sws_engine_t *e, h2s_t *s, int log, int why);
SWS_INTERNAL void h2s_gone(sws_engine_t *e, h2s_t *s);
SWS_INTERNAL void h2_rst(h2conn_t *hc, int32_t id, uint32_t code);
SWS_INTERNAL ssize_t h2_data_read(void *u, void *su, size_t max, int *flags);
SWS_INTERNAL int h2_data_send(void *u, void *su, const uint8_t hd[9], size_t n);
SWS_INTERNAL void h2_trailers_due(void *u, void *su, int32_t id);
SWS_INTERNAL void h2_sent_end(void *u, void *su);

/* resp.c */
SWS_INTERNAL int h2_commit(sws_engine_t *e, h2s_t *s);
SWS_INTERNAL void h2_pri_set(h2conn_t *hc, h2s_t *s);
SWS_INTERNAL int h2_pri_client(h2s_t *s, const uint8_t *v, size_t n, int whole);
SWS_INTERNAL void h2_pri_early_keep(h2conn_t *hc, int32_t id, const uint8_t *v, size_t n);
SWS_INTERNAL void h2_pri_early_take(h2conn_t *hc, h2s_t *s);

/* request.c */
SWS_INTERNAL void h2_dispatch(sws_engine_t *e, h2conn_t *hc, h2s_t *s);
SWS_INTERNAL void h2_body_to_handler(sws_engine_t *e, h2s_t *s);

#endif
