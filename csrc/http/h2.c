/* The HTTP/2 connection protocol on libnghttp2; contract in scalws/h2.h.
 *
 * Re-entry, the rule this file is built around: nghttp2 must not be
 * entered from inside its own callbacks (hc->busy), and a handler's hooks
 * (gone, body, drained) run only where no other handler is on the stack:
 * from the connection's own events (h2_event, h2_work) or, for a stream's
 * own handler, from the operation it called (flush, close). What happens
 * while a handler runs an operation (hc->in_op) and concerns another
 * stream, or the whole connection, is marked and done by h2_work, which
 * the core's ready list calls soon after (h2_wake). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "context.h"
#include "scalws/path.h"
#include "scalws/priority.h"

/* ---- streams ----------------------------------------------------------------------- */

/* A piece of a response body, or something to let go once the body before
 * it is written (a marker). */
enum { Q_COPY, Q_REF, Q_FILE, Q_HOLD_FILE, Q_HOLD_HEAP, Q_HOLD };

typedef struct qitem {
    sws_hold_t h;              /* a marker that reached the wire: net releases it */
    struct qitem *next;
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
    char *hb;                  /* head fields as "Name: value\r\n" lines; nghttp2 reads
                                * them in place (commit) until hb_release */
    size_t hb_len, hb_cap;
    uint32_t hb_lines;         /* field lines in hb (names lowercased as they came) */
    char date[SWS_HTTP_DATE_LEN];
    char st[3];                /* :status's digits */
    qitem_t *qh, *qt;
    nghttp2_nv *tr;            /* the trailer section (nv_copy), submitted at the body's end */
    size_t ntr;
    uint64_t q_bytes;          /* body bytes queued, not yet framed */
    uint64_t q_seq, commit_seq;
    uint64_t sent;             /* body bytes described, for the log */
    uint16_t status;
    /* RFC 9218 §8: a response's `priority` field merged with the client's
     * signal (SWS_PRI_* masks: which parameters each gave, and their values) */
    uint8_t pri_cli, cli_u, cli_i;
    uint8_t pri_rsp, rsp_u, rsp_i;
    unsigned open : 1,         /* nghttp2 has the stream */
        req_done : 1,          /* END_STREAM received */
        fin_given : 1,         /* the handler got body(done = 1) */
        too_big : 1,           /* the header list went over the limits: 431 */
        head_only : 1,         /* HEAD */
        head_ready : 1,        /* start_body was called */
        no_body : 1,           /* no DATA (HEAD, 204, 304, a length of 0) */
        submitted : 1,         /* the HEADERS went to nghttp2 */
        body_done : 1,         /* done was called */
        deferred : 1,          /* the data provider waits (NGHTTP2_ERR_DEFERRED) */
        end_sent : 1,          /* our END_STREAM went out */
        live : 1,              /* a handler that answers later holds resp */
        want_body : 1,
        gone_due : 1,          /* the gone hook is to run (h2_work) */
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

/* The PING of the graceful stop (goaway_notice). */
static const uint8_t stop_ping[8] = {'s', 'w', 's', '-', 's', 't', 'o', 'p'};
static void goaway(sws_engine_t *e, h2conn_t *hc);

static const sws_resp_ops_t h2_resp_ops;
static void h2_send(sws_engine_t *e, h2conn_t *hc);
static void h2_event(sws_engine_t *e, void *obj, uint32_t events);

/* Brings h2_event back soon (through the core's ready list): work that was
 * marked while a handler ran. */
static void h2_wake(sws_engine_t *e, h2conn_t *hc)
{
    sws_ready_add(e, &hc->c.ev, &hc->c.evmask);
}

/* The connection cannot go on: marked dead and closed from its next event
 * (h2_event, through the ready list; h2_settle and h2_expire close a dead
 * one at once when they are that event). Never closed here: closing runs
 * every stream's gone hook, and a handler may be on the stack even outside
 * in_op -- a proxy's data, file or hold op called from its upstream's
 * event, whose gone hook would free the exchange under it. */
static void h2_fail(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->c.fd < 0 || hc->closing)
        return; /* closing: never back on the ready list */
    hc->dead = 1;
    h2_wake(e, hc);
}

static void q_release(sws_hold_t *h)
{
    qitem_t *q = (qitem_t *)h;
    if (q->kind == Q_HOLD_FILE)
        sws_filecache_release(q->fc, q->f);
    else if (q->kind == Q_HOLD_HEAP)
        free(q->heap);
    free(q);
}

/* A marker whose body went into the batch: let go once the connection
 * wrote it (net's holds; the next out_flush, or the close). */
static void q_retire(h2conn_t *hc, qitem_t *q)
{
    if (q->kind == Q_HOLD) {
        conn_hold(&hc->c, q->hold);
        free(q);
    } else {
        q->h.release = q_release;
        conn_hold(&hc->c, &q->h);
    }
}

static void q_drop(qitem_t *q)
{
    if (q->kind == Q_FILE)
        sws_filecache_release(q->fc, q->f);
    free(q);
}

static int q_is_data(const qitem_t *q) { return q->kind <= Q_FILE; }

/* Markers at the head of the queue: everything before them is framed. */
static void q_pop_markers(h2s_t *s)
{
    while (s->qh && !q_is_data(s->qh)) {
        qitem_t *q = s->qh;
        s->qh = q->next;
        if (!s->qh)
            s->qt = NULL;
        q_retire(s->hc, q);
    }
}

static qitem_t *q_push(h2s_t *s, int kind, size_t extra)
{
    qitem_t *q = calloc(1, sizeof *q + extra);
    if (!q)
        return NULL;
    q->kind = kind;
    q->seq = s->q_seq++;
    if (s->qt)
        s->qt->next = q;
    else
        s->qh = q;
    s->qt = q;
    return q;
}

static void stream_free(sws_engine_t *e, h2s_t *s)
{
    h2conn_t *hc = s->hc;
    if (s->prev)
        s->prev->next = s->next;
    else
        hc->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    hc->n_streams--;
    tl_unlink(e, &s->bt.tn);
    if (hc->hdr_s == s)
        hc->hdr_s = NULL;
    if (s->open && hc->sess)
        nghttp2_session_set_stream_user_data(hc->sess, s->id, NULL);
    while (s->qh) {
        qitem_t *q = s->qh;
        s->qh = q->next;
        if (q_is_data(q))
            q_drop(q);
        else
            q_retire(hc, q); /* bytes before it may sit in pending output */
    }
    free(s->rq);
    free(s->hdr);
    free(s->bin);
    free(s->hb);
    free(s->tr);
    free(s);
}

/* The access-log line and counters of a stream's request. */
static void stream_log(sws_engine_t *e, h2s_t *s, const sws_request_t *r, int status)
{
    uint64_t ms = e->core.now - s->start;
    access_log(e, &s->hc->c, r, status, s->sent, ms);
    sws_stats_request(&e->core, s->route, status, ms);
    e->core.cnt.requests++;
}

/* The client owes s body: its request is open, and no tunnel. */
static int body_owed(const h2s_t *s) { return s->open && !s->req_done && !s->ws; }

/* s's body timer from now (its DATA came, or we gave it window), while
 * the client owes body; off its list otherwise. */
static void body_timer(sws_engine_t *e, h2s_t *s)
{
    if (body_owed(s))
        tl_set(e, &s->bt.tn, TL_BODY);
    else
        tl_unlink(e, &s->bt.tn);
}

/* nghttp2_session_consume (the window handed back for n bytes of stream
 * id), noting when the connection's window opens again after the client
 * had none: a stream that waited on it is not timed from before
 * (bodies_expired). */
static void consume(h2conn_t *hc, int32_t id, size_t n)
{
    int32_t before = nghttp2_session_get_local_window_size(hc->sess);
    nghttp2_session_consume(hc->sess, id, n);
    if (before <= 0 && nghttp2_session_get_local_window_size(hc->sess) > 0)
        hc->cwin_at = hc->e->core.now;
}

/* The handler lets go (the client reset the stream, or the connection
 * closes; why: SWS_GONE_*): its gone hook, and the log line (499 when no
 * answer started; log 0: the caller logs). */
static void stream_gone_log(sws_engine_t *e, h2s_t *s, int log, int why);
static void stream_gone(sws_engine_t *e, h2s_t *s) { stream_gone_log(e, s, 1, SWS_GONE_CLIENT); }

static void stream_gone_log(sws_engine_t *e, h2s_t *s, int log, int why)
{
    h2conn_t *hc = s->hc;
    sws_conn_t *c = &hc->c;
    s->live = 0;
    s->gone_due = 0;
    hc->n_live--;
    if (s->refs_out && c->fd >= 0 && !hc->closing && !hc->dead) {
        /* The handler frees what our pending output may still reference.
         * A dead connection never writes or owns its pending output again
         * (h2_event closes it first), so it may reference freed bytes. */
        if (e->net.niov && out_flush(e, c) < 0)
            hc->dead = 1;
        if (c->pend && conn_pend_own(c) < 0)
            hc->dead = 1;
        if (hc->dead)
            h2_wake(e, hc);
    }
    if (s->hooks)
        s->hooks->gone(e, s->ctx, why);
    s->hooks = NULL;
    if (log)
        stream_log(e, s, &s->log, s->submitted ? s->status : 499);
}

/* ---- the response interface ---------------------------------------------------------- */

/* Room for n more bytes in the head's field lines. */
static int hb_room(h2s_t *s, size_t n)
{
    if (s->submitted)
        return -1; /* nghttp2 reads hb as it is (commit); the head went already */
    if (s->hb_len + n > s->hb_cap) {
        size_t cap = s->hb_cap ? s->hb_cap * 2 : 512;
        while (cap < s->hb_len + n)
            cap *= 2;
        char *nb = realloc(s->hb, cap);
        if (!nb)
            return -1;
        s->hb = nb;
        s->hb_cap = cap;
    }
    return 0;
}

static int hb_put(h2s_t *s, const char *p, size_t n)
{
    if (hb_room(s, n) < 0)
        return -1;
    memcpy(s->hb + s->hb_len, p, n);
    s->hb_len += n;
    return 0;
}

/* The head's lines once nghttp2 has framed the HEADERS that point into
 * them (commit): its first DATA, or the END_STREAM of a head alone. */
static void hb_release(h2s_t *s)
{
    free(s->hb);
    s->hb = NULL;
    s->hb_len = s->hb_cap = 0;
}

/* The head's lines are dropped (out of memory): commit answers without them. */
static void hb_lost(h2s_t *s)
{
    s->hb_len = 0;
    s->hb_lines = 0;
}

static void h2_head(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                    size_t reason_len)
{
    h2s_t *s = H2S(r);
    /* A head starts a response: nothing of one described and discarded
     * before it carries over. HTTP/2 has no reason phrase. */
    if (s->ws && status >= 200 && status < 300)
        status = 502; /* not a 101: a 2xx would tell the client its WebSocket is open */
    s->status = (uint16_t)status;
    hb_lost(s);
    s->head_ready = 0;
    s->sent = 0;
    s->no_body = s->head_only || status == 204 || status == 304 || status < 200;
    memcpy(s->date, r->date ? r->date : e->core.date, SWS_HTTP_DATE_LEN);
    r->date = NULL;
}

static void h2_field(sws_engine_t *e, sws_resp_t *r, const char *name, size_t nl,
                     const char *value, size_t vl)
{
    h2s_t *s = H2S(r);
    if (hb_room(s, nl + vl + 4) < 0) {
        hb_lost(s);
        return;
    }
    char *p = s->hb + s->hb_len; /* the name lowercased here (HTTP/2), not again by commit */
    for (size_t i = 0; i < nl; i++)
        p[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    p += nl;
    *p++ = ':';
    *p++ = ' ';
    memcpy(p, value, vl);
    p += vl;
    *p++ = '\r';
    *p++ = '\n';
    s->hb_len = (size_t)(p - s->hb);
    s->hb_lines++;
}

static void h2_fields(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len)
{
    h2s_t *s = H2S(r);
    if (!len)
        return;
    if (hb_put(s, lines, len) < 0) {
        hb_lost(s);
        return;
    }
    /* Each line's name lowercased here (HTTP/2), as h2_field does. A
     * handler may give a line in pieces (a redirect's Location): a piece
     * that does not start a line starts in a value, which stays as it is. */
    char *p = s->hb + s->hb_len - len, *end = s->hb + s->hb_len;
    if (p > s->hb && p[-1] != '\n') {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        p = eol ? eol + 1 : end;
    }
    while (p < end) {
        s->hb_lines++;
        for (; p < end && *p != ':' && *p != '\n'; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p + 32);
        char *eol = memchr(p, '\n', (size_t)(end - p));
        p = eol ? eol + 1 : end;
    }
}

static void h2_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    h2s_t *s = H2S(r);
    s->head_ready = 1;
    switch (kind) {
    case SWS_BODY_LENGTH:
        if (s->status >= 200 && s->status != 204) { /* RFC 9110 §8.6 */
            char num[24];
            char *p = num + sizeof num;
            uint64_t v = len;
            do
                *--p = (char)('0' + v % 10);
            while (v /= 10);
            h2_field(e, r, "content-length", 14, p, (size_t)(num + sizeof num - p));
        }
        if (len == 0)
            s->no_body = 1;
        break;
    case SWS_BODY_STREAM:
        break;
    case SWS_BODY_TUNNEL:
        /* The upstream's 101 to an extended CONNECT (RFC 8441 §5): a 2xx
         * opens the tunnel, and the stream's DATA frames carry it. */
        s->status = 200;
        s->no_body = 0;
        s->tunnel = 1;
        break;
    default:
        s->no_body = 1;
        break;
    }
}

static void h2_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags)
{
    h2s_t *s = H2S(r);
    if (s->no_body || !n)
        return;
    qitem_t *q = q_push(s, flags & SWS_REF ? Q_REF : Q_COPY, flags & SWS_REF ? 0 : n);
    if (!q) {
        h2_fail(e, s->hc); /* a body with a hole must not look complete */
        return;
    }
    if (flags & SWS_REF) {
        q->p = p;
    } else {
        memcpy(q->data, p, n);
        q->p = q->data;
    }
    q->len = n;
    s->q_bytes += n;
    s->sent += n;
}

static void h2_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len,
                    size_t chunk)
{
    h2s_t *s = H2S(r);
    if (s->no_body || len == 0) {
        sws_filecache_release(e->net.fc, f);
        return;
    }
    if (f->mem) { /* the cache's copy: referenced, the entry held until written */
        h2_data(e, r, f->mem + off, (size_t)len, SWS_REF);
        r->ops->hold_file(e, r, f);
        return;
    }
    qitem_t *q = q_push(s, Q_FILE, 0);
    if (!q) {
        sws_filecache_release(e->net.fc, f);
        h2_fail(e, s->hc);
        return;
    }
    q->f = f;
    q->fc = e->net.fc;
    q->off = off;
    q->len = len;
    s->q_bytes += len;
    s->sent += len;
}

static void marker(sws_engine_t *e, h2s_t *s, int kind, sws_file_t *f, char *heap, sws_hold_t *h)
{
    qitem_t *q = q_push(s, kind, 0);
    if (!q) {
        /* Nothing reads it once the connection is dead (stream_gone_log). */
        h2_fail(e, s->hc);
        if (f)
            sws_filecache_release(e->net.fc, f);
        free(heap);
        if (h)
            conn_hold(&s->hc->c, h);
        return;
    }
    q->f = f;
    q->fc = e->net.fc;
    q->heap = heap;
    q->hold = h;
}

static void h2_hold_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f)
{
    marker(e, H2S(r), Q_HOLD_FILE, f, NULL, NULL);
}

static void h2_hold_heap(sws_engine_t *e, sws_resp_t *r, char *buf)
{
    marker(e, H2S(r), Q_HOLD_HEAP, NULL, buf, NULL);
}

static void h2_hold(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h)
{
    marker(e, H2S(r), Q_HOLD, NULL, NULL, h);
}

static void h2_done(sws_engine_t *e, sws_resp_t *r) { H2S(r)->body_done = 1; }

/* Connection-specific fields have no place in HTTP/2 (RFC 9113 §8.2.2). */
static int conn_specific(const char *n, size_t nl)
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

/* h[0..nh) as nghttp2 fields in one allocation, `extra` empty slots first,
 * names lowercased, connection-specific ones left out (*n: the slots
 * used). Flags 0: nghttp2 copies them when they are submitted, so the
 * block is freed right after. NULL when out of memory. */
static nghttp2_nv *nv_copy(const sws_header_t *h, size_t nh, size_t extra, size_t *n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < nh; i++)
        bytes += h[i].name_len + h[i].value_len;
    nghttp2_nv *nva = malloc((extra + nh) * sizeof *nva + bytes + 1);
    if (!nva)
        return NULL;
    uint8_t *p = (uint8_t *)(nva + extra + nh);
    *n = extra;
    for (size_t i = 0; i < nh; i++) {
        nghttp2_nv *nv = &nva[*n];
        nv->name = p;
        for (size_t k = 0; k < h[i].name_len; k++)
            *p++ = (uint8_t)(h[i].name[k] >= 'A' && h[i].name[k] <= 'Z' ? h[i].name[k] + 32
                                                                         : h[i].name[k]);
        if (conn_specific((const char *)nv->name, h[i].name_len)) {
            p = nv->name;
            continue;
        }
        nv->namelen = h[i].name_len;
        nv->value = p;
        nv->valuelen = h[i].value_len;
        memcpy(p, h[i].value, h[i].value_len);
        p += h[i].value_len;
        nv->flags = NGHTTP2_NV_FLAG_NONE;
        (*n)++;
    }
    return nva;
}

/* An informational response: a HEADERS without END_STREAM before the
 * final one (RFC 9113 §8.1). Its frame may sit in pending output, so the
 * handler waits on it as on referenced bytes (refs_out): an upstream's
 * 1xx do not pile up for a client that does not read. */
static void h2_interim(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                       size_t reason_len, const sws_header_t *h, size_t nh)
{
    h2s_t *s = H2S(r);
    size_t n;
    if (!s->open || s->submitted || s->hc->dead || status < 102 || status > 199)
        return;
    nghttp2_nv *nva = nv_copy(h, nh, 1, &n);
    if (!nva)
        return; /* a hint lost, not the answer */
    char st[3] = {'1', (char)('0' + status / 10 % 10), (char)('0' + status % 10)};
    nva[0] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)st, 7, 3, NGHTTP2_NV_FLAG_NONE};
    if (nghttp2_submit_headers(s->hc->sess, NGHTTP2_FLAG_NONE, s->id, NULL, nva, n, NULL) == 0)
        s->refs_out = 1;
    free(nva);
}

/* Kept until the data provider reaches the body's end (read_cb): the
 * trailing HEADERS must follow the last DATA, which nghttp2 orders only
 * when it is submitted from there. */
static void h2_trailers(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh)
{
    h2s_t *s = H2S(r);
    if (s->no_body || s->tunnel || s->tr)
        return;
    s->tr = nv_copy(h, nh, 0, &s->ntr); /* NULL: dropped, as an HTTP/1 client may see them */
    if (s->tr && !s->ntr) {
        free(s->tr);
        s->tr = NULL;
    }
}

static void nv_set(nghttp2_nv *nv, const char *n, size_t nl, const char *v, size_t vl)
{
    nv->name = (uint8_t *)n;
    nv->namelen = nl;
    nv->value = (uint8_t *)v;
    nv->valuelen = vl;
    /* Not copied by nghttp2, which reads them when it frames the HEADERS:
     * literals, the engine's server line, or the stream's own st, date and
     * hb, which stay until that frame went (hb_release). A stream freed
     * before is one nghttp2 has closed, and nghttp2 drops a closed
     * stream's queued HEADERS unread. Names are lowercase already. */
    nv->flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
}

/* The stream's priority once a response named some of it (RFC 9218 §8):
 * each parameter the response gave, else the client's, else the default.
 * From then on nghttp2 ignores the client's signals for the stream, and
 * on_frame_recv merges its PRIORITY_UPDATEs here instead. */
static void pri_apply(h2conn_t *hc, h2s_t *s)
{
    nghttp2_extpri x = {NGHTTP2_EXTPRI_DEFAULT_URGENCY, 0};
    if (s->pri_cli & SWS_PRI_U)
        x.urgency = s->cli_u;
    if (s->pri_cli & SWS_PRI_I)
        x.inc = s->cli_i;
    if (s->pri_rsp & SWS_PRI_U)
        x.urgency = s->rsp_u;
    if (s->pri_rsp & SWS_PRI_I)
        x.inc = s->rsp_i;
    nghttp2_session_change_extpri_stream_priority(hc->sess, s->id, &x, 1);
}

/* A Priority field value of the client's (a request field line, or a
 * PRIORITY_UPDATE: `whole`, which replaces what the client said before). */
static int pri_client(h2s_t *s, const uint8_t *v, size_t n, int whole)
{
    int u = 0, i = 0;
    int got = sws_parse_priority((const char *)v, n, &u, &i);
    if (got < 0)
        return got;
    if (whole)
        s->pri_cli = 0;
    s->pri_cli |= (uint8_t)got;
    if (got & SWS_PRI_U)
        s->cli_u = (uint8_t)u;
    if (got & SWS_PRI_I)
        s->cli_i = (uint8_t)i;
    return got;
}

/* A PRIORITY_UPDATE for a stream the client has not opened yet (RFC 9218
 * §7.1): nghttp2 gives the idle stream that priority, and we keep the
 * signal for the merge with a response's own (pri_apply), which needs to
 * know what the client said. Up to SWS_H2_EARLY_PRI wait (nghttp2 keeps no
 * more idle streams than max_concurrent_streams); past that a new one
 * replaces one in turn, whose stream merges with the default. */
static void pri_early_keep(h2conn_t *hc, const nghttp2_ext_priority_update *pu)
{
    int u = 0, i = 0;
    int got = sws_parse_priority((const char *)pu->field_value, pu->field_value_len, &u, &i);
    if (got < 0)
        return; /* nghttp2 ignores it too */
    uint32_t k = 0, free_k = SWS_H2_EARLY_PRI;
    for (; k < SWS_H2_EARLY_PRI && hc->early_pri[k].id != pu->stream_id; k++)
        if (!hc->early_pri[k].id && free_k == SWS_H2_EARLY_PRI)
            free_k = k;
    if (k == SWS_H2_EARLY_PRI) /* not there: a free entry, else one in turn */
        k = free_k < SWS_H2_EARLY_PRI ? free_k : hc->n_early_pri % SWS_H2_EARLY_PRI;
    hc->n_early_pri++;
    hc->early_pri[k].id = pu->stream_id;
    hc->early_pri[k].got = (uint8_t)got;
    hc->early_pri[k].u = (uint8_t)u;
    hc->early_pri[k].i = (uint8_t)i;
}

/* The new stream s takes the PRIORITY_UPDATE that came before it, if any. */
static void pri_early_take(h2conn_t *hc, h2s_t *s)
{
    for (uint32_t k = 0; k < SWS_H2_EARLY_PRI; k++) {
        if (hc->early_pri[k].id != s->id)
            continue;
        s->pri_cli = hc->early_pri[k].got;
        s->cli_u = hc->early_pri[k].u;
        s->cli_i = hc->early_pri[k].i;
        s->pri_early = 1;
        hc->early_pri[k].id = 0;
        return;
    }
}

/* Field lines of buf[0..len) into nva (names already lowercase). */
static size_t parse_lines(char *buf, size_t len, nghttp2_nv *nva, size_t n, size_t max)
{
    char *p = buf, *end = buf + len;
    while (p < end && n < max) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        char *le = eol ? eol : end;
        char *next = eol ? eol + 1 : end;
        if (le > p && le[-1] == '\r')
            le--;
        char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon && colon > p) {
            char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            char *ve = le;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            size_t nl = (size_t)(colon - p);
            if (!conn_specific(p, nl)) {
                nv_set(&nva[n], p, nl, v, (size_t)(ve - v));
                /* A value new with every answer (the proxy's and FastCGI's
                 * request id) would push the connection's useful entries
                 * out of both HPACK tables, one answer at a time */
                if (nl == 12 && memcmp(p, "x-request-id", 12) == 0)
                    nva[n].flags |= NGHTTP2_NV_FLAG_NO_INDEX;
                n++;
            }
        }
        p = next;
    }
    return n;
}

static ssize_t read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                       uint32_t *flags, nghttp2_data_source *src, void *user);

/* Hands the described head to nghttp2 (HEADERS, with the body's data
 * provider). -1 when it could not be. */
static int commit(sws_engine_t *e, h2s_t *s)
{
    h2conn_t *hc = s->hc;
    if (s->submitted || !s->head_ready)
        return 0;
    if (hc->c.tls && s->site) { /* Strict-Transport-Security */
        size_t n;
        const char *f = sws_site_tls_fields(s->site, &n);
        if (n && (h2_fields(e, &s->resp, f, n), !s->hb_len)) {
            s->submitted = 1;
            return -1;
        }
    }
    s->submitted = 1;
    size_t max = 3 + s->hb_lines; /* :status, server, date, the lines */
    if (max > e->h2.nva_cap) {
        size_t cap = e->h2.nva_cap ? e->h2.nva_cap : 32;
        while (cap < max)
            cap *= 2;
        nghttp2_nv *nv = realloc(e->h2.nva, cap * sizeof *nv);
        if (!nv)
            return -1;
        e->h2.nva = nv;
        e->h2.nva_cap = cap;
    }
    nghttp2_nv *nva = e->h2.nva;
    s->st[0] = (char)('0' + s->status / 100 % 10);
    s->st[1] = (char)('0' + s->status / 10 % 10);
    s->st[2] = (char)('0' + s->status % 10);
    size_t n = 0;
    nv_set(&nva[n++], ":status", 7, s->st, 3);
    const char *sl = e->h1.server_line;
    size_t sll = e->h1.server_line_len;
    if (sll > 10) /* "Server: x\r\n" */
        nv_set(&nva[n++], "server", 6, sl + 8, sll - 10);
    nv_set(&nva[n++], "date", 4, s->date, SWS_HTTP_DATE_LEN);
    size_t fields = n;
    n = parse_lines(s->hb, s->hb_len, nva, n, max);
    if (s->tunnel) { /* RFC 8441 §5: the handshake's proof is HTTP/1's, not ours to pass on */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!(nva[i].namelen == 20 && memcmp(nva[i].name, "sec-websocket-accept", 20) == 0))
                nva[k++] = nva[i];
        n = k;
    }
    for (size_t k = fields; k < n; k++) { /* the response's own priority (RFC 9218 §8) */
        int u = 0, i = 0, got;
        if (nva[k].namelen != 8 || memcmp(nva[k].name, "priority", 8) != 0 ||
            (got = sws_parse_priority((const char *)nva[k].value, nva[k].valuelen, &u, &i)) <= 0)
            continue;
        s->pri_rsp |= (uint8_t)got;
        if (got & SWS_PRI_U)
            s->rsp_u = (uint8_t)u;
        if (got & SWS_PRI_I)
            s->rsp_i = (uint8_t)i;
    }
    if (s->pri_rsp)
        pri_apply(hc, s); /* before the DATA is queued at the old urgency */
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_cb};
    int rv = nghttp2_submit_response(hc->sess, s->id, nva, n, s->no_body ? NULL : &prd);
    if (rv != 0) {
        elog_folded(e, "h2 submit", (uint64_t)rv, SWS_L_ERROR,
                    "HTTP/2: cannot submit a response: %s", nghttp2_strerror(rv));
        return -1;
    }
    return 0;
}

/* The body's next piece may go: the data provider waited. */
static void resume(h2s_t *s)
{
    if (s->submitted && s->deferred && s->open && (s->q_bytes || s->body_done)) {
        s->deferred = 0;
        nghttp2_session_resume_data(s->hc->sess, s->id);
    }
}

static void h2_attach(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *hooks, void *ctx)
{
    h2s_t *s = H2S(r);
    s->hooks = hooks;
    s->ctx = ctx;
}

/* This stream's own output waits: bytes queued, or referenced bytes framed
 * into output the socket has not taken. Other streams' output does not
 * count: a proxied answer on a connection busy with a large file would
 * otherwise wait on it, and its handler for a drained nobody marked due (a
 * stall the soak found). A handler told so waits for drained, so the
 * answer marks it due; h2_work delivers it once both are gone. */
static int h2_backed_up(const sws_resp_t *r)
{
    h2s_t *s = (h2s_t *)((const char *)r - offsetof(h2s_t, resp));
    int backed = s->q_bytes > 0 || (s->refs_out && s->hc->c.pend != NULL);
    if (backed)
        s->drain_due = 1;
    return backed;
}

static int h2_flush(sws_engine_t *e, sws_resp_t *r)
{
    h2s_t *s = H2S(r);
    h2conn_t *hc = s->hc;
    if (s->gone_due) { /* the client reset the stream while the handler worked */
        stream_gone(e, s);
        if (!s->open)
            stream_free(e, s);
        return -1;
    }
    s->commit_seq = s->q_seq;
    if (!s->open || hc->dead)
        return 0; /* sent nowhere; gone comes with the close */
    if (s->head_ready && !s->submitted && commit(e, s) < 0) {
        nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    }
    resume(s);
    hc->in_op++;
    h2_send(e, hc);
    hc->in_op--;
    if (s->gone_due) {
        stream_gone(e, s);
        if (!s->open)
            stream_free(e, s);
        return -1;
    }
    h2_backed_up(r); /* drained comes when what it gave is out */
    return 0;
}

static void h2_want_body(sws_engine_t *e, sws_resp_t *r, int on)
{
    h2s_t *s = H2S(r);
    s->want_body = on;
    if (on && (s->bin_len || (s->req_done && !s->fin_given)))
        h2_wake(e, s->hc); /* h2_work hands it over */
}

/* A marker dropped before its body was framed: nothing references it. */
static void q_release_now(qitem_t *q)
{
    if (q->kind == Q_HOLD) {
        q->hold->release(q->hold);
        free(q);
    } else {
        q_release(&q->h);
    }
}

/* Drops the queue from the first piece whose seq is `from` on. */
static void q_cut(h2s_t *s, uint64_t from)
{
    qitem_t **pp = &s->qh, *last = NULL;
    while (*pp && (*pp)->seq < from) {
        last = *pp;
        pp = &(*pp)->next;
    }
    qitem_t *q = *pp;
    *pp = NULL;
    s->qt = last;
    while (q) {
        qitem_t *next = q->next;
        if (q_is_data(q)) {
            s->q_bytes -= q->len;
            s->sent -= q->len;
            q_drop(q);
        } else {
            q_release_now(q);
        }
        q = next;
    }
}

static void h2_discard(sws_engine_t *e, sws_resp_t *r)
{
    h2s_t *s = H2S(r);
    if (!s->submitted) {
        s->hb_len = 0;
        s->head_ready = 0;
    }
    q_cut(s, s->commit_seq); /* what was given since the last flush */
    s->body_done = 0;
    free(s->tr);
    s->tr = NULL;
}

static void h2_finish(sws_engine_t *e, sws_resp_t *r, int how)
{
    h2s_t *s = H2S(r);
    h2conn_t *hc = s->hc;
    stream_log(e, s, &s->log, s->status);
    s->live = 0;
    s->hooks = NULL;
    hc->n_live--;
    if (!s->open) {
        stream_free(e, s); /* the client had all of it, or reset the stream */
        h2_wake(e, hc);    /* an idle connection's timer, or its end after GOAWAY */
        return;
    }
    if (how == SWS_FIN_ABORT || !s->head_ready || (!s->body_done && !s->no_body)) {
        /* cut short: the client must see it, never a complete-looking body */
        nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    } else {
        if (!s->submitted && commit(e, s) < 0)
            nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
        resume(s);
    }
    if (s->bin_len) { /* request body the handler never took */
        consume(hc, s->id, s->bin_len);
        s->bin_len = 0;
        body_timer(e, s); /* read past, with its window back */
    }
    hc->in_op++;
    h2_send(e, hc); /* s may be freed here (its stream closed) */
    hc->in_op--;
    h2_wake(e, hc); /* timers, an idle connection after GOAWAY */
}

static void h2_close(sws_engine_t *e, sws_resp_t *r)
{
    h2s_t *s = H2S(r);
    h2conn_t *hc = s->hc;
    if (!s->live)
        return;
    if (s->open)
        nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    stream_gone(e, s);
    if (!s->open) {
        stream_free(e, s);
    } else if (s->bin_len) {
        consume(hc, s->id, s->bin_len);
        s->bin_len = 0;
    }
    hc->in_op++;
    h2_send(e, hc);
    hc->in_op--;
}

static const sws_resp_ops_t h2_resp_ops = {
    h2_head, h2_field, h2_fields, h2_start_body, h2_data, h2_file, h2_hold_file, h2_hold_heap,
    h2_done, h2_attach, h2_flush, h2_backed_up, h2_want_body, h2_discard, h2_finish, h2_close,
    h2_hold, h2_interim, h2_trailers,
};

/* ---- nghttp2's callbacks: output ---------------------------------------------------------- */

static ssize_t read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                       uint32_t *flags, nghttp2_data_source *src, void *user)
{
    h2s_t *s = src->ptr;
    if (s->hb)
        hb_release(s); /* the HEADERS went before their DATA */
    q_pop_markers(s);
    qitem_t *q = s->qh;
    size_t n = 0;
    if (!q && !s->body_done) {
        s->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (q) {
        n = q->len < length ? (size_t)q->len : length; /* a frame never spans two pieces */
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    }
    if (s->body_done && n == s->q_bytes) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        /* The trailer section ends the stream in place of this DATA (the
         * way nghttp2 asks for it, from here). */
        if (s->tr && nghttp2_submit_trailer(sess, id, s->tr, s->ntr) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        free(s->tr);
        s->tr = NULL;
    }
    return (ssize_t)n;
}

/* A DATA frame of `length` bytes from the head of s's queue: its header
 * and payload into the batch (referenced, copied, or read from the file
 * into it). */
static int send_data_cb(nghttp2_session *sess, nghttp2_frame *frame, const uint8_t *framehd,
                        size_t length, nghttp2_data_source *src, void *user)
{
    h2conn_t *hc = user;
    sws_engine_t *e = hc->e;
    h2s_t *s = src->ptr;
    qitem_t *q = s->qh;
    size_t pad = frame->data.padlen;
    if (!q || q->len < length)
        return NGHTTP2_ERR_CALLBACK_FAILURE; /* cannot happen: read_cb said so */
    size_t copy = 9 + pad + (q->kind == Q_REF ? 0 : length);
    if (e->net.out_len + copy > OUT_BUF || e->net.niov + 4 > OUT_IOV) {
        hc->room_blocked = 1;
        return NGHTTP2_ERR_WOULDBLOCK; /* nghttp2 comes back with the same frame */
    }
    char *d = out_space(e);
    memcpy(d, framehd, 9);
    size_t at = 9;
    if (pad)
        d[at++] = (char)(pad - 1);
    if (q->kind == Q_FILE) {
        size_t got = 0;
        while (got < length) {
            ssize_t k = pread(q->f->fd, d + at + got, length - got, (off_t)(q->off + got));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                /* the file shrank or failed under us: the stream is reset,
                 * never a short body that looks whole */
                elog_folded(e, "h2 file read", 0, SWS_L_ERROR,
                            "HTTP/2: reading a file body failed (%s)",
                            k < 0 ? strerror(errno) : "unexpected end of file");
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
            }
            got += (size_t)k;
        }
        q->off += length;
        at += length;
    } else if (q->kind == Q_COPY) {
        memcpy(d + at, q->p, length);
        q->p += length;
        at += length;
    }
    if (q->kind == Q_REF) {
        out_commit(e, at);
        out_ref(e, q->p, length);
        q->p += length;
        s->refs_out = 1;
        if (pad > 1) {
            memset(out_space(e), 0, pad - 1);
            out_commit(e, pad - 1);
        }
    } else {
        if (pad > 1)
            memset(d + at, 0, pad - 1), at += pad - 1;
        out_commit(e, at);
    }
    q->len -= length;
    s->q_bytes -= length;
    hc->data_out = 1;
    /* A client acknowledges DATA with WINDOW_UPDATE (stream and
     * connection): two frames of credit per 16 KiB sent (thousandths: the
     * bytes x 2000 / 16384), by bytes, not frames, so that a client which
     * makes us send tiny frames (a 1-byte window) earns nothing for its
     * other frames from them. */
    uint32_t cap = e->h2.conf.frame_burst * 1000u, credit = (uint32_t)length * 125u / 1024u;
    hc->frame_tokens = hc->frame_tokens + credit < cap ? hc->frame_tokens + credit : cap;
    if (!q->len) {
        s->qh = q->next;
        if (!s->qh)
            s->qt = NULL;
        q_drop(q);
    }
    q_pop_markers(s);
    return 0;
}

static int on_frame_send(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
    h2conn_t *hc = user;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        hc->rst[hc->n_rst++ % SWS_H2_RST_KEEP] = frame->hd.stream_id;
        return 0;
    }
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    h2s_t *s = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
    if (!s)
        return 0;
    s->end_sent = 1;
    hb_release(s);
    if (!s->req_done && nghttp2_session_get_stream_remote_close(sess, s->id) == 0) {
        /* The answer is complete before the request. Up to SWS_H2_DISCARD
         * more body bytes are read and dropped, so that clients which
         * treat a reset of their upload as a failure (curl 7.88) still see
         * the answer; past that, RST_STREAM NO_ERROR tells the client to
         * stop (RFC 9113 §8.1), and at once after a body that stalled. */
        s->discard_left = SWS_H2_DISCARD;
        if (s->body_late || (s->cl_known && s->cl_left > SWS_H2_DISCARD)) {
            s->discard_left = 0;
            nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
        }
    }
    return 0;
}

/* ---- nghttp2's callbacks: input ---------------------------------------------------------- */

/* The connection went over a budget (ADR 0016): GOAWAY ENHANCE_YOUR_CALM
 * (RFC 9113 §5.4.1), one log line and one count per connection. */
static void calm(sws_engine_t *e, h2conn_t *hc, const char *what)
{
    if (hc->calmed || !hc->sess)
        return; /* (not goaway: a graceful stop's final GOAWAY does not end the budgets) */
    hc->calmed = 1;
    hc->goaway = 2;
    e->core.st->h2_calm++;
    char peer[48];
    *put_peer(peer, &hc->c) = 0;
    elog_folded(e, what, 0, SWS_L_INFO, "HTTP/2: %s, GOAWAY ENHANCE_YOUR_CALM, client: %s", what,
                peer);
    nghttp2_session_terminate_session(hc->sess, NGHTTP2_ENHANCE_YOUR_CALM);
}

/* Fills both buckets (thousandths of a frame) for the time since they
 * were last filled, at their rate a second, up to their burst. No system
 * call: the time is the pass's (e->core.now). */
static void budget_fill(sws_engine_t *e, h2conn_t *hc)
{
    const sws_h2_conf_t *cf = &e->h2.conf;
    uint64_t dt = (uint32_t)e->core.now - hc->budget_at; /* the difference survives the wrap */
    if (!dt)
        return;
    hc->budget_at = (uint32_t)e->core.now;
    uint64_t r = hc->rst_tokens + dt * cf->reset_rate, rcap = (uint64_t)cf->reset_burst * 1000u;
    uint64_t f = hc->frame_tokens + dt * cf->frame_rate, fcap = (uint64_t)cf->frame_burst * 1000u;
    hc->rst_tokens = (uint32_t)(r < rcap ? r : rcap);
    hc->frame_tokens = (uint32_t)(f < fcap ? f : fcap);
}

/* One frame from a bucket: 0, or -1 when it is empty. */
static int spend(uint32_t *tokens)
{
    if (*tokens < 1000u)
        return -1;
    *tokens -= 1000u;
    return 0;
}

/* The budgets of frames that ask the server for work without asking a
 * handler for anything: RST_STREAM (the rapid reset, CVE-2023-44487), and
 * SETTINGS, PING, WINDOW_UPDATE, PRIORITY, PRIORITY_UPDATE (RFC 9218, read
 * since ADR 0019), DATA that is empty and does not end the stream, and any
 * other type nghttp2 reports (it skips unknown extension frames without a
 * callback). Counted when their header arrives, before nghttp2 acts on
 * them. -1: over budget (the connection is ending). */
static int budget_frame(h2conn_t *hc, const nghttp2_frame_hd *hd)
{
    sws_engine_t *e = hc->e;
    budget_fill(e, hc);
    switch (hd->type) {
    case NGHTTP2_HEADERS:
    case NGHTTP2_CONTINUATION: /* nghttp2 bounds them (max_continuations) */
    case NGHTTP2_PUSH_PROMISE: /* a connection error by itself */
    case NGHTTP2_GOAWAY:
        return 0;
    case NGHTTP2_DATA:
        if (hd->length || (hd->flags & NGHTTP2_FLAG_END_STREAM))
            return 0;
        break;
    case NGHTTP2_RST_STREAM:
        if (spend(&hc->rst_tokens) == 0)
            return 0;
        calm(e, hc, "too many streams reset (rapid reset)");
        return -1;
    default:
        break;
    }
    if (spend(&hc->frame_tokens) == 0)
        return 0;
    calm(e, hc, "too many control or empty frames (flood)");
    return -1;
}

/* HEADERS that name a stream which is closed: the client sent END_STREAM
 * on it, so anything more is a connection error STREAM_CLOSED (RFC 9113
 * §5.1) -- unless we reset it, when its trailers may have crossed our
 * RST_STREAM. nghttp2 keeps no closed streams (we announce
 * SETTINGS_NO_RFC7540_PRIORITIES) and would drop such a block silently. */
static int on_begin_frame(nghttp2_session *sess, const nghttp2_frame_hd *hd, void *user)
{
    h2conn_t *hc = user;
    if (hd->type != NGHTTP2_HEADERS && hd->type != NGHTTP2_CONTINUATION)
        hc->hdr_open = 0;
    if (hd->type == NGHTTP2_PRIORITY && hd->stream_id == 0) {
        /* RFC 9113 §6.3: a connection error PROTOCOL_ERROR. nghttp2 skips
         * PRIORITY frames unread once RFC 7540 priorities are off. */
        hc->goaway = 2;
        nghttp2_session_terminate_session(sess, NGHTTP2_PROTOCOL_ERROR);
        return 0;
    }
    if (budget_frame(hc, hd) < 0)
        return 0;
    if (hd->type != NGHTTP2_HEADERS || !(hd->stream_id & 1))
        return 0;
    hc->hdr_open = 1; /* until on_frame_recv sees the block's end */
    if (hd->stream_id > hc->max_sid) {
        if (hd->stream_id - hc->max_sid > 2) { /* ids the client skipped */
            hc->skip_lo = hc->max_sid + 1;
            hc->skip_hi = hd->stream_id - 1;
        }
        hc->max_sid = hd->stream_id;
        return 0;
    }
    if (nghttp2_session_find_stream(sess, hd->stream_id))
        return 0;
    if (hd->stream_id >= hc->skip_lo && hd->stream_id <= hc->skip_hi) {
        /* A stream that was never opened: a new stream below the highest
         * one, PROTOCOL_ERROR (RFC 9113 §5.1.1), not STREAM_CLOSED. Only
         * the latest skipped range is known; an id of an older one gets
         * STREAM_CLOSED, a connection error all the same. */
        hc->goaway = 2;
        nghttp2_session_terminate_session(sess, NGHTTP2_PROTOCOL_ERROR);
        return 0;
    }
    uint32_t n = hc->n_rst < SWS_H2_RST_KEEP ? hc->n_rst : SWS_H2_RST_KEEP;
    for (uint32_t i = 0; i < n; i++)
        if (hc->rst[i] == hd->stream_id)
            return 0;
    hc->goaway = 2;
    nghttp2_session_terminate_session(sess, NGHTTP2_STREAM_CLOSED);
    return 0;
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
    h2conn_t *hc = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    h2s_t *s = calloc(1, sizeof *s);
    if (!s)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    s->hc = hc;
    s->bt.tn.tlist = TL_NONE;
    s->bt.tn.sub = 1;
    s->bt.c = &hc->c;
    s->id = frame->hd.stream_id;
    s->open = 1;
    s->resp.ops = &h2_resp_ops;
    s->start = hc->e->core.now;
    s->next = hc->streams;
    if (hc->streams)
        hc->streams->prev = s;
    hc->streams = s;
    hc->n_streams++;
    hc->hdr_s = s;
    if (hc->n_early_pri)
        pri_early_take(hc, s);
    nghttp2_session_set_stream_user_data(sess, s->id, s);
    return 0;
}

static int rq_put(h2s_t *s, const uint8_t *p, size_t n, uint32_t *off)
{
    if (s->rq_len + n > s->rq_cap) {
        size_t cap = s->rq_cap ? s->rq_cap * 2 : 1024;
        while (cap < s->rq_len + n)
            cap *= 2;
        char *nb = realloc(s->rq, cap);
        if (!nb)
            return -1;
        s->rq = nb;
        s->rq_cap = cap;
    }
    memcpy(s->rq + s->rq_len, p, n);
    *off = (uint32_t)s->rq_len;
    s->rq_len += n;
    return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    h2conn_t *hc = user;
    sws_engine_t *e = hc->e;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers: dropped */
    h2s_t *s = hc->hdr_s; /* on_begin_headers made it: no lookup per field */
    if (!s || s->id != frame->hd.stream_id)
        s = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
    if (!s || s->too_big)
        return 0;
    s->hsize += (uint32_t)(namelen + valuelen + 32);
    int pseudo = namelen && name[0] == ':';
    if (s->hsize > e->h2.conf.max_header_list ||
        (!pseudo && s->nh >= e->core.lim.max_headers)) {
        s->too_big = 1; /* 431 once the block has ended */
        return 0;
    }
    hoff_t h = {0, (uint32_t)namelen, 0, (uint32_t)valuelen};
    if (rq_put(s, name, namelen, &h.n) < 0 || rq_put(s, value, valuelen, &h.v) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (pseudo) {
        /* nghttp2 checked them (RFC 9113 §8.3): known, once, before the rest */
        if (namelen == 7 && memcmp(name, ":method", 7) == 0)
            s->pm = h;
        else if (namelen == 5 && memcmp(name, ":path", 5) == 0)
            s->pp = h;
        else if (namelen == 10 && memcmp(name, ":authority", 10) == 0)
            s->pa = h;
        else if (namelen == 9 && memcmp(name, ":protocol", 9) == 0)
            s->pr = h;
        return 0;
    }
    if (namelen == 8 && memcmp(name, "priority", 8) == 0) {
        /* nghttp2 applies it; we keep it for merging. Like nghttp2, the
         * field replaces a PRIORITY_UPDATE that came before the HEADERS. */
        if (pri_client(s, value, valuelen, s->pri_early) >= 0)
            s->pri_early = 0; /* one nghttp2 cannot parse leaves the update in place */
    }
    if (s->nh == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 16;
        hoff_t *nb = realloc(s->hdr, cap * sizeof *nb);
        if (!nb)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        s->hdr = nb;
        s->hcap = cap;
    }
    s->hdr[s->nh++] = h;
    return 0;
}

static void dispatch(sws_engine_t *e, h2conn_t *hc, h2s_t *s);
static void body_to_handler(sws_engine_t *e, h2s_t *s);

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user)
{
    h2conn_t *hc = user;
    sws_engine_t *e = hc->e;
    h2s_t *s = nghttp2_session_get_stream_user_data(sess, id);
    if (s && s->cl_known)
        s->cl_left -= len < s->cl_left ? len : s->cl_left;
    if (s && len)
        body_timer(e, s); /* progress restarts body_timeout */
    if (!s || !s->live) {
        consume(hc, id, len); /* answered already: read past */
        if (s && s->end_sent && !s->req_done && s->discard_left) {
            if (s->discard_left <= len) {
                s->discard_left = 0;
                nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
            } else {
                s->discard_left -= len;
            }
        }
        return 0;
    }
    s->body_total += len;
    if (s->body_total > e->core.lim.max_body_bytes && !s->ws) { /* a tunnel is no body */
        /* RFC 9110 §15.5.14, as nginx's client_max_body_size: the handler
         * lets go; 413 when no answer began, else the stream is reset. */
        consume(hc, id, len + s->bin_len);
        s->bin_len = 0;
        int started = s->submitted;
        stream_gone_log(e, s, started, SWS_GONE_CLIENT);
        if (!started) {
            q_cut(s, 0); /* nothing of it was framed */
            s->body_done = 0;
            sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_413]);
            stream_log(e, s, &s->log, 413);
            if (commit(e, s) < 0)
                nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
        } else {
            nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
        }
        return 0;
    }
    if (s->want_body && !s->bin_len && s->hooks) {
        int rc = s->hooks->body(e, s->ctx, (char *)data, len, 0);
        consume(hc, id, len); /* the handler took it: the client may send more */
        if (rc < 0 && s->live) {
            nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
            stream_gone(e, s);
        }
        return 0;
    }
    /* Kept (not consumed: the window bounds it) until the handler wants it. */
    if (s->bin_len + len > s->bin_cap) {
        size_t cap = s->bin_cap ? s->bin_cap * 2 : 16384;
        while (cap < s->bin_len + len)
            cap *= 2;
        char *nb = realloc(s->bin, cap);
        if (!nb)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        s->bin = nb;
        s->bin_cap = cap;
    }
    memcpy(s->bin + s->bin_len, data, len);
    s->bin_len += len;
    return 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
    h2conn_t *hc = user;
    sws_engine_t *e = hc->e;
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) &&
        memcmp(frame->ping.opaque_data, stop_ping, 8) == 0) {
        goaway(e, hc); /* the client saw the first GOAWAY: the final one */
        return 0;
    }
    if (frame->hd.type == NGHTTP2_HEADERS)
        hc->hdr_open = 0;
    if (frame->hd.type == NGHTTP2_PRIORITY_UPDATE) {
        /* nghttp2 applied it, unless a response's priority took over the
         * stream (pri_apply): then the merge is ours to redo */
        const nghttp2_ext_priority_update *pu = frame->ext.payload;
        h2s_t *s = nghttp2_session_get_stream_user_data(sess, pu->stream_id);
        if (s) {
            pri_client(s, pu->field_value, pu->field_value_len, 1);
            s->pri_early = 0;
            if (s->pri_rsp)
                pri_apply(hc, s);
        } else if (pu->stream_id > hc->max_sid) {
            pri_early_keep(hc, pu);
        }
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    h2s_t *s = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
    if (!s)
        return 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
        s->req_done = 1;
        tl_unlink(e, &s->bt.tn); /* the whole body is in */
    }
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
        !s->dispatched) {
        s->dispatched = 1;
        dispatch(e, hc, s);
        body_timer(e, s); /* the client owes its body from here, whoever answers */
        return 0;
    }
    if (s->req_done && s->live && s->want_body)
        body_to_handler(e, s); /* the end of the body */
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code, void *user)
{
    h2conn_t *hc = user;
    sws_engine_t *e = hc->e;
    h2s_t *s = nghttp2_session_get_stream_user_data(sess, id);
    if (!s)
        return 0;
    s->open = 0;
    tl_unlink(e, &s->bt.tn);
    if (s->bin_len) {
        consume(hc, id, s->bin_len); /* the connection's window */
        s->bin_len = 0;
    }
    if (s->live && !s->end_sent) {
        /* reset before the answer was complete: the handler lets go */
        if (hc->in_op) {
            s->gone_due = 1;
            h2_wake(e, hc);
            return 0;
        }
        stream_gone(e, s);
    }
    if (!s->live)
        stream_free(e, s);
    /* else its handler finishes: finish frees it */
    return 0;
}

/* A frame nghttp2 refused. For HEADERS that is the end of the block for
 * us (a field RFC 9113 §8.2 forbids, a pseudo-header out of place: the
 * stream is reset and on_frame_recv never sees the block): the connection
 * is back to waiting for the next request, timed by keepalive_timeout.
 * nghttp2 says so at the bad field; what is left of the block it reads and
 * drops, within keepalive_timeout (set once, not renewed by the trickle)
 * and max_continuations, no longer header_timeout. */
static int on_invalid_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, int code, void *user)
{
    h2conn_t *hc = user;
    (void)sess;
    (void)code;
    if (frame->hd.type == NGHTTP2_HEADERS)
        hc->hdr_open = 0;
    return 0;
}

static int on_error(nghttp2_session *sess, int code, const char *msg, size_t len, void *user)
{
    h2conn_t *hc = user;
    char peer[48];
    *put_peer(peer, &hc->c) = 0;
    elog_folded(hc->e, "h2 error", (uint64_t)code, SWS_L_INFO, "HTTP/2: %.*s, client: %s",
                (int)len, msg, peer);
    return 0;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* Hands the request body waiting in s to its handler (it wants it). */
static void body_to_handler(sws_engine_t *e, h2s_t *s)
{
    h2conn_t *hc = s->hc;
    static char none[1];
    if (!s->bin_len && !(s->req_done && !s->fin_given))
        return;
    char *b = s->bin;
    size_t n = s->bin_len;
    int done = s->req_done;
    s->bin = NULL;
    s->bin_len = s->bin_cap = 0;
    if (done)
        s->fin_given = 1;
    int32_t id = s->id;
    int open = s->open;
    int rc = s->hooks->body(e, s->ctx, b ? b : none, n, done);
    if (n && open && hc->sess)
        consume(hc, id, n);
    if (rc == 0 && n && !done) /* (rc 0: the exchange goes on, s with it) */
        body_timer(e, s);      /* the client has its window back: timed from here */
    free(b);
    if (rc < 0 && s->live) {
        if (s->open)
            nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
        stream_gone(e, s);
    }
}

/* Starts a handler that answers later: 0 when it took the request (s is
 * live), or a status to answer now. */
static int x_start(sws_engine_t *e, h2conn_t *hc, h2s_t *s, sws_request_t *req,
                   const sws_handler_t *h)
{
    const sws_header_t *rh = find_header(req, "x-request-id", 12);
    if (rh && peer_trusted(e, &hc->c) && sane_request_id(rh->value, rh->value_len)) {
        memcpy(s->rid, rh->value, rh->value_len);
        req->rid_len = rh->value_len;
    } else {
        format_request_id(next_request_id(e), s->rid);
        req->rid_len = 16;
    }
    req->rid = s->rid;
    /* What the log needs lives in s->rq for the stream's life. */
    s->log = *req;
    size_t nh = 0;
    const sws_header_t *ref = find_header(req, "referer", 7);
    const sws_header_t *ua = find_header(req, "user-agent", 10);
    if (ref)
        s->log_h[nh++] = *ref;
    if (ua)
        s->log_h[nh++] = *ua;
    s->log.h = s->log_h;
    s->log.nh = nh;
    s->log.path = s->log.raw_path = s->log.query = NULL;
    s->log.path_len = s->log.raw_len = s->log.query_len = 0;
    s->log.info = NULL;
    s->live = 1;
    hc->n_live++;
    /* A WebSocket's upgrade request is whole (HTTP/1's has no body): the
     * upstream's timeouts run, and a failed connect may be retried; what
     * the stream carries is the tunnel's, its END_STREAM a later done. */
    int done = s->req_done || s->ws;
    int status = sws_dispatch_start(e, &s->resp, req, h, NULL, 0, done);
    if (status == 0) {
        if (s->req_done && !s->ws)
            s->fin_given = 1; /* done came with the start */
        /* a WebSocket's END_STREAM on its CONNECT is the tunnel's end of
         * input: body(done) once the tunnel wants a body (h2_want_body) */
        return 0;
    }
    /* A start that fails has neither finished nor closed r (the handlers'
     * in_start rule) and the connection cannot close under it (we are in
     * nghttp2_session_mem_recv: h2_fail only marks), so s is still live;
     * the test keeps one decrement should a handler close r before it
     * returns its error (h2_close already counted it). */
    if (s->live) {
        s->live = 0;
        hc->n_live--;
    }
    s->hooks = NULL;
    req->rid = NULL; /* the log makes its own */
    req->rid_len = 0;
    return status;
}

/* RFC 9113 §8.1: an interim 100 before the final answer, so that a client
 * that sent "Expect: 100-continue" sends its body now (RFC 9110 §10.1.1).
 * Only a handler that reads the body asks for it; every other answer is
 * final without one, and the body that follows it is read past. */
static void send_continue(h2conn_t *hc, h2s_t *s)
{
    nghttp2_nv nv;
    nv_set(&nv, ":status", 7, "100", 3);
    if (s->open && !s->submitted)
        nghttp2_submit_headers(hc->sess, NGHTTP2_FLAG_NONE, s->id, NULL, &nv, 1, NULL);
}

/* An extended CONNECT for WebSocket (RFC 8441 §5) as the HTTP/1.1 upgrade
 * request an HTTP/1 client would have sent (RFC 6455 §4.1): GET with
 * Upgrade (the proxy adds Connection: upgrade), a Sec-WebSocket-Key of
 * ours (16 random bytes, base64: key holds 24 characters) and version 13;
 * the client's Sec-WebSocket-Protocol and -Extensions pass on as they are.
 * hdrs has room for three more fields. The body of the stream is the
 * tunnel: no length, no chunking. */
static void ws_request(sws_engine_t *e, sws_request_t *r, sws_request_info_t *info,
                       sws_header_t *hdrs, char *key)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t raw[18] = {0};
    uint64_t *prng = &e->st.prng; /* seeded by getrandom; a nonce, not a secret */
    for (int i = 0; i < 16; i += 8) {
        *prng ^= *prng << 13;
        *prng ^= *prng >> 7;
        *prng ^= *prng << 17;
        memcpy(raw + i, prng, 8);
    }
    for (int i = 0, o = 0; i < 18; i += 3, o += 4) {
        uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 | raw[i + 2];
        key[o] = b64[v >> 18 & 63];
        key[o + 1] = b64[v >> 12 & 63];
        key[o + 2] = b64[v >> 6 & 63];
        key[o + 3] = b64[v & 63];
    }
    key[22] = key[23] = '='; /* 16 bytes: two padding characters */
    sws_header_t *h = hdrs; /* r->h */
    size_t nh = r->nh;
    h[nh++] = (sws_header_t){"upgrade", 7, "websocket", 9};
    h[nh++] = (sws_header_t){"sec-websocket-key", 17, key, 24};
    h[nh++] = (sws_header_t){"sec-websocket-version", 21, "13", 2};
    r->nh = nh;
    r->method = "GET";
    r->method_len = 3;
    r->method_id = SWS_M_GET;
    info->method = SWS_M_GET;
    info->upgrade = 1;
    info->chunked = 0;
    info->expect_continue = 0;
}

/* Content-Length as 1*DIGIT (nghttp2 checks it against the DATA frames). */
static int parse_cl(const char *v, size_t n, uint64_t *out)
{
    uint64_t x = 0;
    if (!n || n > 19)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

/* A request whose header block ended: the request view, the route, the
 * handler (HTTP/1's conn_process, without the framing). */
static void dispatch(sws_engine_t *e, h2conn_t *hc, h2s_t *s)
{
    sws_conn_t *c = &hc->c;
    sws_request_t r;
    memset(&r, 0, sizeof r);
    r.conn = c;
    r.http2 = 1;
    r.minor = 1;
    sws_request_info_t info;
    memset(&info, 0, sizeof info);
    info.keepalive = 1;
    const char *q = s->rq ? s->rq : "";
    /* RFC 8441: CONNECT with :protocol (nghttp2 checked that :scheme,
     * :path and :authority came with it). */
    int ext = s->pr.nl && s->pm.vl == 7 && memcmp(q + s->pm.v, "CONNECT", 7) == 0;
    int ws = ext && s->pr.vl == 9 && strncasecmp(q + s->pr.v, "websocket", 9) == 0;
    size_t nh = 0;
    sws_header_t hdrs[s->nh + 4]; /* + the upgrade's three (ws_request) */
    size_t cookie_len = 0, n_cookies = 0;
    for (size_t i = 0; i < s->nh; i++) {
        sws_header_t *h = &hdrs[nh];
        h->name = q + s->hdr[i].n;
        h->name_len = s->hdr[i].nl;
        h->value = q + s->hdr[i].v;
        h->value_len = s->hdr[i].vl;
        if (ws && ((h->name_len == 17 && memcmp(h->name, "sec-websocket-key", 17) == 0) ||
                   (h->name_len == 21 && memcmp(h->name, "sec-websocket-version", 21) == 0)))
            continue; /* ours to set for the HTTP/1 handshake (ws_request) */
        if (h->name_len == 6 && memcmp(h->name, "cookie", 6) == 0) {
            n_cookies++;
            cookie_len += h->value_len + 2;
            if (n_cookies > 1)
                continue; /* merged below */
        }
        nh++;
    }
    char *merged = NULL;
    if (n_cookies > 1) {
        /* RFC 9113 §8.2.3: crumbs become one field for HTTP/1 (upstreams, FastCGI). */
        merged = malloc(cookie_len);
        if (merged) {
            size_t m = 0;
            for (size_t i = 0; i < s->nh; i++) {
                if (s->hdr[i].nl != 6 || memcmp(q + s->hdr[i].n, "cookie", 6) != 0)
                    continue;
                if (m) {
                    memcpy(merged + m, "; ", 2);
                    m += 2;
                }
                memcpy(merged + m, q + s->hdr[i].v, s->hdr[i].vl);
                m += s->hdr[i].vl;
            }
            for (size_t i = 0; i < nh; i++)
                if (hdrs[i].name_len == 6 && memcmp(hdrs[i].name, "cookie", 6) == 0) {
                    hdrs[i].value = merged;
                    hdrs[i].value_len = m;
                }
        }
    }
    r.h = hdrs;
    r.nh = nh;
    r.method = q + s->pm.v;
    r.method_len = s->pm.vl;
    r.target = s->pp.nl ? q + s->pp.v : "";
    r.target_len = s->pp.nl ? s->pp.vl : 0;
    int method = sws_method_id(r.method, r.method_len);
    r.method_id = method;
    info.method = method;
    s->head_only = method == SWS_M_HEAD;
    int host_differs = 0;
    if (s->pa.nl && s->pa.vl) {
        r.host = q + s->pa.v;
        r.host_len = s->pa.vl;
        const sws_header_t *hh = find_header(&r, "host", 4);
        host_differs = hh && (hh->value_len != r.host_len ||
                              strncasecmp(hh->value, r.host, r.host_len) != 0);
    } else {
        const sws_header_t *hh = find_header(&r, "host", 4);
        if (hh) {
            r.host = hh->value;
            r.host_len = hh->value_len;
        }
    }
    info.host = r.host;
    info.host_len = r.host_len;
    info.has_host = r.host != NULL;
    int status = 0;
    const sws_header_t *cl = find_header(&r, "content-length", 14);
    if (cl) {
        if (parse_cl(cl->value, cl->value_len, &info.content_length) < 0)
            status = 400;
        info.has_content_length = 1;
        s->cl_known = !status;
        s->cl_left = info.content_length;
    }
    /* Expect, as HTTP/1 reads it: 100-continue is met, any other
     * expectation cannot be (417, RFC 9110 §10.1.1) */
    int bad_expect = 0;
    for (size_t i = 0; i < r.nh; i++) {
        const sws_header_t *ex = &r.h[i]; /* every Expect field: a list may span several */
        if (ex->name_len != 6 || memcmp(ex->name, "expect", 6) != 0) /* names are lowercase here */
            continue;
        const char *p = ex->value, *el;
        size_t el_len;
        while (sws_list_next(&p, ex->value + ex->value_len, &el, &el_len)) {
            if (el_len == 12 && strncasecmp(el, "100-continue", 12) == 0)
                info.expect_continue = 1;
            else
                bad_expect = 1;
        }
    }
    /* a body whose length is unknown goes to HTTP/1 upstreams chunked */
    info.chunked = !s->req_done && !info.has_content_length;
    r.info = &info;
    if (status) {
    } else if (s->too_big) {
        status = 431;
    } else if (method == SWS_M_CONNECT && !ws) {
        /* Not a forward proxy, and WebSocket is the only protocol extended
         * CONNECT can ask for (RFC 9110 §15.6.2: the functionality is not
         * there, for any target). */
        status = 501;
    } else if (!r.target_len) {
        status = 400;
    } else if (r.target_len > e->core.lim.max_uri_bytes) {
        status = 414;
    } else if (r.target[0] != '/' && !(r.target_len == 1 && r.target[0] == '*' && method == SWS_M_OPTIONS)) {
        status = 400;
    } else if (!r.host_len || host_differs || memchr(r.host, '@', r.host_len)) {
        /* RFC 9113 §8.3.1: an authority, without userinfo (nghttp2 lets '@'
         * through: it checks authority characters), and a Host that names
         * the same one; a malformed request may be answered (§8.1.1). The
         * proxy sends this authority upstream as Host. */
        status = 400;
    } else if (bad_expect) {
        status = 417;
    } else if (info.has_content_length && info.content_length > e->core.lim.max_body_bytes) {
        status = 413;
    }
    const char *path = r.target;
    size_t path_len = r.target_len;
    if (!status) {
        const char *qm = memchr(r.target, '?', r.target_len);
        path_len = qm ? (size_t)(qm - r.target) : r.target_len;
        r.raw_path = path;
        r.raw_len = path_len;
        if (qm) {
            r.query = qm + 1;
            r.query_len = (size_t)(r.target + r.target_len - r.query);
        }
        if (path[0] == '/') {
            ssize_t nl = sws_normalize_path(path, path_len, e->h2.path);
            if (nl < 0) {
                status = 400;
            } else {
                path = e->h2.path;
                path_len = (size_t)nl;
            }
        }
    }
    if (status) {
        s->site = NULL;
        sws_respond_answer(e, &s->resp, &e->rsp.err[err_index(status)]);
        stream_log(e, s, &r, s->status);
        e->core.cnt.errors_4xx_close++;
        if (commit(e, s) < 0)
            nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
        free(merged);
        return;
    }
    r.path = path;
    r.path_len = path_len;
    const sws_site_t *site = sws_vhosts_find(hc->vh, r.host, r.host_len);
    s->site = site;
    r.site = site;
    const sws_handler_t *h = site ? sws_site_route(site, path, path_len) : NULL;
    s->route = h && h->stat_id <= UINT16_MAX ? (uint16_t)h->stat_id : 0;
    const sws_handler_t *later = h;
    char ws_key[24];
    int answered;
    if (ws && !(h && h->kind == SWS_H_PROXY)) {
        /* Only a proxy route can tunnel: 501, as for a plain CONNECT (a
         * 405 would have to list the methods the route takes in Allow). */
        sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_501]);
        answered = 1;
    } else {
        if (ws) {
            ws_request(e, &r, &info, hdrs, ws_key);
            s->ws = 1;
        }
        answered = sws_dispatch_answer(e, &s->resp, &r, &later);
    }
    if (!answered) { /* a handler that answers later: the stream is its exchange */
        int rc = x_start(e, hc, s, &r, later);
        if (rc == 0) {
            if (ws) { /* the log names what the client asked for */
                s->log.method = q + s->pm.v;
                s->log.method_len = s->pm.vl;
            }
            if (info.expect_continue && !s->req_done && !ws)
                send_continue(hc, s); /* the handler reads the body: the client may send it */
            free(merged); /* the handler copied what it keeps */
            return;
        }
        if (rc != SWS_ANSWERED)
            sws_respond_answer(e, &s->resp, &e->rsp.err[err_index(rc)]);
    }
    stream_log(e, s, &r, s->status);
    free(merged);
    if (commit(e, s) < 0)
        nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
}

/* ---- the connection ------------------------------------------------------------------------- */

/* Copies n serialized bytes into the batch, writing it out when full. */
static int put_bytes(sws_engine_t *e, sws_conn_t *c, const uint8_t *p, size_t n)
{
    while (n) {
        size_t room = OUT_BUF - e->net.out_len;
        if (room == 0 || e->net.niov + 2 > OUT_IOV) {
            if (out_flush(e, c) < 0)
                return -1;
            continue;
        }
        size_t k = n < room ? n : room;
        out_copy(e, (const char *)p, k);
        p += k;
        n -= k;
    }
    return 0;
}

/* What nghttp2 has to send, through the batch, until it has nothing more
 * or the socket is full (c->pend: the rest when it is writable). */
static void h2_send(sws_engine_t *e, h2conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    if (hc->busy) {
        hc->send_due = 1;
        return;
    }
    if (c->fd < 0 || hc->dead || !hc->sess)
        return;
    hc->busy = 1;
    int failed = 0;
    for (;;) {
        hc->send_due = 0;
        hc->room_blocked = 0;
        while (!c->pend) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(hc->sess, &p);
            if (n < 0) {
                elog_folded(e, "h2 send", (uint64_t)n, SWS_L_INFO, "HTTP/2: %s",
                            nghttp2_strerror((int)n));
                failed = 1;
                break;
            }
            if (n == 0)
                break;
            if (put_bytes(e, c, p, (size_t)n) < 0) {
                failed = 1;
                break;
            }
        }
        if (failed || out_flush(e, c) < 0) {
            failed = 1;
            out_discard(e);
            break;
        }
        if (c->pend || !(hc->room_blocked || hc->send_due))
            break;
    }
    hc->busy = 0;
    if (failed)
        h2_fail(e, hc);
}

/* Work marked for the connection's own time: hooks that could not run
 * while another handler was on the stack, request bodies handlers asked
 * for, and drained for handlers that waited on our output. After any hook
 * the walk starts over: a hook may free streams. */
static void h2_work(sws_engine_t *e, h2conn_t *hc)
{
    sws_conn_t *c = &hc->c;
again:
    for (h2s_t *s = hc->streams; s; s = s->next) {
        if (c->fd < 0 || hc->dead)
            return;
        if (s->gone_due && s->live) {
            stream_gone(e, s);
            if (!s->open)
                stream_free(e, s);
            goto again;
        }
        if (s->live && s->want_body && s->hooks && (s->bin_len || (s->req_done && !s->fin_given))) {
            body_to_handler(e, s);
            goto again;
        }
        if (!c->pend)
            s->refs_out = 0; /* written: nothing of it is referenced any more */
        if (s->live && s->hooks && s->drain_due && !s->q_bytes && !s->refs_out) {
            s->drain_due = 0;
            s->hooks->drained(e, s->ctx);
            goto again;
        }
    }
}

/* The stop, in two steps (RFC 9113 §6.8): a GOAWAY that says "no new
 * streams" with the largest id, and a PING; once the client acknowledged
 * the PING, every stream it opened before it saw the first GOAWAY has
 * arrived, and the final GOAWAY names the last one. Streams that crossed
 * the first GOAWAY are served, not refused. */
static void goaway_notice(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->goaway || !hc->sess)
        return;
    hc->goaway = 1;
    if (nghttp2_submit_shutdown_notice(hc->sess) != 0 ||
        nghttp2_submit_ping(hc->sess, NGHTTP2_FLAG_NONE, stop_ping) != 0)
        hc->goaway = 0; /* the final GOAWAY at once, then */
}

static void goaway(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->goaway == 2 || !hc->sess)
        return;
    hc->goaway = 2;
    nghttp2_submit_goaway(hc->sess, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(hc->sess), NGHTTP2_NO_ERROR,
                          NULL, 0);
}

/* Body queued for a stream that nghttp2 could not frame although the
 * socket takes bytes: the client's flow-control window is closed. */
static int window_stalled(const h2conn_t *hc)
{
    for (const h2s_t *s = hc->streams; s; s = s->next)
        if (s->q_bytes && s->submitted && s->open && !s->deferred)
            return 1;
    return 0;
}

/* After the connection's work: its end, its timer and its epoll mask. */
static void h2_settle(sws_engine_t *e, h2conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    if (c->fd < 0)
        return;
    if (hc->dead) {
        conn_close(e, c);
        return;
    }
    if (e->core.shutting_down && !hc->goaway) {
        goaway_notice(e, hc);
        if (!hc->goaway)
            goaway(e, hc);
        h2_send(e, hc);
        if (c->fd < 0 || hc->dead) {
            if (c->fd >= 0)
                conn_close(e, c);
            return;
        }
    }
    int idle = hc->n_streams == 0 && !hc->hdr_open;
    if (!c->pend && ((!nghttp2_session_want_read(hc->sess) && !nghttp2_session_want_write(hc->sess)) ||
                     (hc->goaway == 2 && idle))) {
        conn_close(e, c); /* GOAWAY said and every stream done: the end */
        return;
    }
    if (c->pend) {
        if (c->tn.tlist != TL_SEND)
            tl_set(e, &c->tn, TL_SEND);
    } else if (idle && hc->goaway == 1) {
        if (c->tn.tlist != TL_GRACE)
            tl_set(e, &c->tn, TL_GRACE); /* a client that never answers the PING */
    } else if (idle) {
        if (c->tn.tlist != TL_KEEPALIVE)
            tl_set(e, &c->tn, TL_KEEPALIVE);
    } else if (window_stalled(hc)) {
        /* Answers wait for the client's WINDOW_UPDATE: timed as a socket
         * that does not drain, renewed only when DATA goes out. */
        if (c->tn.tlist != TL_SEND || hc->data_out)
            tl_set(e, &c->tn, TL_SEND);
    } else if (hc->hdr_open) {
        /* A header block in pieces: timed from its start, whatever else
         * trickles in (slowloris) */
        if (c->tn.tlist != TL_HEADER)
            tl_set(e, &c->tn, TL_HEADER);
    } else {
        /* Streams at work: each one the client owes body to has its own
         * timer (TL_BODY), handlers have their upstreams'. The connection
         * stays in a list (sws_h2_shutdown finds it there) as a watch
         * that times nothing out (h2_expire); renewed here, so that a
         * header block starting at the next event has about its time. */
        tl_set(e, &c->tn, TL_HEADER);
    }
    hc->data_out = 0;
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP | (c->pend ? EPOLLOUT : 0));
}

static void h2_read(sws_engine_t *e, h2conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    size_t len = conn_unstash(e, c);
    ssize_t got = conn_recv(c, e->net.in + len, e->net.in_cap - len);
    if (got > 0) {
        e->core.st->bytes_in += (uint64_t)got;
        len += (size_t)got;
    } else if (got == 0 || errno != EAGAIN) {
        conn_close(e, c); /* the client left; its streams are void */
        return;
    }
    if (!len)
        return;
    hc->busy = 1;
    ssize_t rv = nghttp2_session_mem_recv(hc->sess, (const uint8_t *)e->net.in, len);
    hc->busy = 0;
    if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
        /* ACKs piling up unread (max_outbound_ack), or a header block in
         * too many pieces (max_continuations, CVE-2024-27316) */
        calm(e, hc, rv == NGHTTP2_ERR_FLOODED ? "too many frames to acknowledge (flood)"
                                              : "too many CONTINUATION frames");
        return;
    }
    if (rv < 0) {
        char peer[48];
        *put_peer(peer, c) = 0;
        elog_folded(e, "h2 recv", (uint64_t)rv, SWS_L_INFO, "HTTP/2: %s, client: %s",
                    nghttp2_strerror((int)rv), peer);
        if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
            conn_close(e, c);
            return;
        }
        /* nghttp2 queued its GOAWAY; it goes out, then the connection ends */
        if (hc->goaway != 2) {
            hc->goaway = 2;
            nghttp2_session_terminate_session(hc->sess, NGHTTP2_PROTOCOL_ERROR);
        }
    }
}

static void h2_event(sws_engine_t *e, void *obj, uint32_t events)
{
    h2conn_t *hc = obj;
    sws_conn_t *c = &hc->c;
    if (hc->dead) {
        conn_close(e, c);
        return;
    }
    if (c->pend && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int rc = pend_send(e, c);
        if (rc < 0) {
            conn_close(e, c);
            return;
        }
    }
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) || c->stash) {
        h2_read(e, hc);
        if (c->fd < 0)
            return;
    }
    h2_send(e, hc);
    if (c->fd < 0)
        return;
    h2_work(e, hc);
    if (c->fd < 0)
        return;
    h2_send(e, hc); /* what h2_work made: WINDOW_UPDATE for the body handlers took */
    h2_settle(e, hc);
}

static void h2_open(sws_engine_t *e, sws_conn_t *c, const void *conf)
{
    h2conn_t *hc = (h2conn_t *)c;
    hc->e = e;
    hc->vh = conf;
    if (nghttp2_session_server_new2(&hc->sess, e->h2.cbs, hc, e->h2.opt) != 0) {
        hc->sess = NULL;
        conn_close(e, c);
        return;
    }
    const sws_h2_conf_t *cf = &e->h2.conf;
    hc->rst_tokens = cf->reset_burst * 1000u;
    hc->frame_tokens = cf->frame_burst * 1000u;
    hc->budget_at = (uint32_t)e->core.now;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cf->max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cf->stream_window},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, cf->max_header_list},
        {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, cf->header_table},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
        {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1}, /* RFC 8441: WebSocket to proxy routes */
    };
    if (nghttp2_submit_settings(hc->sess, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
        nghttp2_session_set_local_window_size(hc->sess, NGHTTP2_FLAG_NONE, 0, cf->conn_window) != 0) {
        conn_close(e, c);
        return;
    }
    /* What the kernel holds unsent is out of the scheduler's reach: an
     * urgent stream waits behind it (RFC 9218; ADR 0019). */
    if (cf->unsent_limit)
        conn_limit_unsent(c, (int)cf->unsent_limit);
    tl_set(e, &c->tn, TL_HEADER); /* the preface and a first request */
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
    h2_event(e, c, 0); /* our SETTINGS; with h2c, the stashed preface and what followed */
}

/* The request body of s stalled for body_timeout (its entry is off its
 * list): 408 when no answer began, else RST_STREAM (NO_ERROR after a
 * whole answer, once that is out); a handler lets go. */
static void body_stalled(sws_engine_t *e, h2conn_t *hc, h2s_t *s)
{
    int live = s->live, answer = live && !s->submitted;
    char peer[48];
    *put_peer(peer, &hc->c) = 0;
    const char *q = s->rq ? s->rq : "";
    elog_folded(e, "h2 body timeout", 0, SWS_L_INFO,
                "HTTP/2: client timed out sending the request body, %s, client: %s, "
                "request: \"%.*s %.*s\" (stream %d)", answer ? "408" : "stream reset", peer,
                (int)s->pm.vl, q + s->pm.v, (int)s->pp.vl, q + s->pp.v, s->id);
    if (s->bin_len) {
        consume(hc, s->id, s->bin_len);
        s->bin_len = 0;
    }
    if (live)
        stream_gone_log(e, s, !answer, SWS_GONE_BODY_TIMEOUT); /* logged if the answer began */
    int code = s->end_sent ? NGHTTP2_NO_ERROR : NGHTTP2_INTERNAL_ERROR;
    if (answer) {
        q_cut(s, 0); /* nothing of it was framed (as for a 413 in on_data_chunk) */
        s->body_done = 0;
        s->body_late = 1;
        sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_408]);
        stream_log(e, s, &s->log, 408);
        if (commit(e, s) == 0)
            return;
    } else if (!live && !s->end_sent) {
        s->body_late = 1; /* a whole answer still going out: on_frame_send resets */
        return;
    }
    nghttp2_submit_rst_stream(hc->sess, NGHTTP2_FLAG_NONE, s->id, code);
}

/* TL_BODY entries of c's streams are due (at least one is, the list's
 * head). A stream whose client had no window to send in, on the stream
 * or the connection, at some time since its timer started waited on us
 * (a handler that took no body): timed again from now. */
static void bodies_expired(sws_engine_t *e, h2conn_t *hc)
{
    int32_t cw = nghttp2_session_get_local_window_size(hc->sess);
    for (h2s_t *s = hc->streams; s; s = s->next) {
        sws_tnode_t *n = &s->bt.tn;
        if (n->tlist != TL_BODY || n->deadline > e->core.now)
            continue;
        if (cw <= 0 || hc->cwin_at + e->core.tl[TL_BODY].ms > n->deadline ||
            nghttp2_session_get_stream_local_window_size(hc->sess, s->id) <= 0) {
            tl_set(e, n, TL_BODY);
            continue;
        }
        tl_unlink(e, n);
        body_stalled(e, hc, s); /* frees nothing: a reset stream closes in h2_send */
    }
    h2_send(e, hc);
    h2_settle(e, hc);
}

static void h2_expire(sws_engine_t *e, sws_conn_t *c, int which)
{
    h2conn_t *hc = (h2conn_t *)c;
    if (which == TL_BODY) {
        if (hc->dead)
            conn_close(e, c); /* its streams' entries go with them */
        else
            bodies_expired(e, hc);
        return;
    }
    if (which == TL_HEADER && !hc->hdr_open && hc->n_streams) {
        /* The watch of streams at work (h2_settle). A handler may have
         * queued body since h2_settle ran: the client's window decides. */
        tl_set(e, &c->tn, window_stalled(hc) ? TL_SEND : TL_HEADER);
        return;
    }
    if (which == TL_KEEPALIVE || which == TL_GRACE ||
        (!hc->n_streams && !hc->hdr_open && !c->pend)) {
        /* idle: say so before closing (RFC 9113 §6.8) */
        tl_unlink(e, &c->tn);
        goaway(e, hc);
        h2_send(e, hc);
        if (c->fd >= 0)
            conn_close(e, c);
        return;
    }
    if (which == TL_HEADER || which == TL_SEND)
        e->core.cnt.timeouts++;
    char peer[48];
    *put_peer(peer, c) = 0;
    elog_folded(e, "h2 timeout", (uint64_t)which, SWS_L_INFO,
                "HTTP/2: client timed out %s, client: %s",
                which == TL_SEND ? "reading the response" : "sending a request", peer);
    /* the streams are dropped; GOAWAY says which ones were taken (RFC 9113
     * §6.8), written if the socket takes it */
    tl_unlink(e, &c->tn);
    if (!c->pend) {
        goaway(e, hc);
        h2_send(e, hc);
    }
    if (c->fd >= 0)
        conn_close(e, c);
}

static void h2_closing(sws_engine_t *e, sws_conn_t *c)
{
    h2conn_t *hc = (h2conn_t *)c;
    hc->closing = 1;
    sws_ready_remove(e, &c->ev);
    while (hc->streams) {
        h2s_t *s = hc->streams;
        if (s->live)
            stream_gone(e, s);
        stream_free(e, s);
    }
    nghttp2_session_del(hc->sess);
    hc->sess = NULL;
}

const sws_proto_t sws_h2_proto = {sizeof(h2conn_t), h2_event, h2_open, h2_expire, h2_closing};

int sws_h2_preface(const char *buf, size_t len)
{
    static const char pf[] = NGHTTP2_CLIENT_MAGIC;
    size_t n = len < sizeof pf - 1 ? len : sizeof pf - 1;
    if (memcmp(buf, pf, n) != 0)
        return -1;
    return n == sizeof pf - 1;
}

int sws_h2_init(sws_engine_t *e)
{
    e->h2.path = malloc(e->core.lim.max_uri_bytes + 512);
    nghttp2_session_callbacks *cb;
    if (!e->h2.path || nghttp2_session_callbacks_new(&cb) != 0)
        return -ENOMEM;
    e->h2.cbs = cb;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, on_invalid_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, send_data_cb);
    nghttp2_session_callbacks_set_error_callback2(cb, on_error);
    const sws_h2_conf_t defaults = {
        .max_streams = SWS_H2_MAX_STREAMS,
        .stream_window = SWS_H2_STREAM_WINDOW,
        .conn_window = SWS_H2_CONN_WINDOW,
        .header_table = SWS_H2_TABLE,
        .max_continuations = SWS_H2_CONTINUATIONS,
        .unsent_limit = SWS_H2_UNSENT,
        .reset_burst = SWS_H2_RESET_BURST,
        .reset_rate = SWS_H2_RESET_RATE,
        .frame_burst = SWS_H2_FRAME_BURST,
        .frame_rate = SWS_H2_FRAME_RATE,
    };
    return sws_h2_configure(e, &defaults);
}

int sws_h2_configure(sws_engine_t *e, const sws_h2_conf_t *conf)
{
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0)
        return -ENOMEM;
    nghttp2_option_del(e->h2.opt);
    e->h2.opt = opt;
    e->h2.conf = *conf;
    if (!conf->max_header_list) /* RFC 9113 §6.5.2's size of what HTTP/1 would take */
        e->h2.conf.max_header_list =
            (uint32_t)(e->core.lim.max_header_bytes + 32 * e->core.lim.max_headers);
    /* WINDOW_UPDATE only for what handlers took (nghttp2_session_consume) */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    /* RFC 9218: nghttp2 schedules by urgency and incremental once we send
     * SETTINGS_NO_RFC7540_PRIORITIES = 1, and reads the `priority` request
     * field itself; PRIORITY_UPDATE frames it drops unless asked to read them. */
    nghttp2_option_set_builtin_recv_extension_type(opt, NGHTTP2_PRIORITY_UPDATE);
    /* nghttp2's own bounds, from the same settings: its reset limiter
     * backs ours (ours counts first and says ENHANCE_YOUR_CALM, its says
     * INTERNAL_ERROR), its decoder and encoder tables, its CONTINUATION
     * count (CVE-2024-27316) */
    nghttp2_option_set_stream_reset_rate_limit(opt, conf->reset_burst, conf->reset_rate);
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, conf->header_table);
    nghttp2_option_set_max_continuations(opt, conf->max_continuations);
    return 0;
}

void sws_h2_free(sws_engine_t *e)
{
    free(e->h2.path);
    free(e->h2.nva);
    nghttp2_session_callbacks_del(e->h2.cbs);
    nghttp2_option_del(e->h2.opt);
}

void sws_h2_shutdown(sws_engine_t *e)
{
    /* Every HTTP/2 connection is in a timeout list: GOAWAY to each, with
     * the last stream it took (RFC 9113 §6.8); the ones with nothing in
     * flight close once it is written, the others when their streams end. */
    for (int which = 0; which < TL_COUNT; which++) {
        sws_tnode_t *n = e->core.tl[which].head;
        while (n) {
            sws_tnode_t *next = n->tnext;
            sws_conn_t *c = CONN_OF_TNODE(n);
            if (!n->sub && c->proto == &sws_h2_proto && !((h2conn_t *)c)->goaway)
                h2_settle(e, (h2conn_t *)c); /* shutting_down: the first GOAWAY */
            n = next;
        }
    }
}
