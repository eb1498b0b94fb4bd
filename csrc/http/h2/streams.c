/* HTTP/2's streams (csrc/http/h2/h2_int.h): their response queues, their
 * life and log line, the request body's window, and the DATA frames the
 * session asks for (h2_data_read, h2_data_send). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/h2/h2_int.h"

/* Queue items without data of their own (a reference, a file, a hold:
 * every kind but Q_COPY) go back to the engine's spares: a small static
 * answer takes two, and a pass that answers h2load's ten streams frees
 * more than malloc's per-size cache holds, which sent a third of them to
 * its slow path (3 % of the answer's instructions). */
static void h2_q_free(qitem_t *q)
{
    sws_h2_t *h2 = q->h2;
    if (q->kind != Q_COPY && h2->n_q_spare < SWS_H2_SPARE) {
        q->next = h2->q_spare;
        h2->q_spare = q;
        h2->n_q_spare++;
    } else {
        free(q);
    }
}

void h2_q_spare_free(sws_h2_t *h2)
{
    while (h2->q_spare) {
        qitem_t *q = h2->q_spare;
        h2->q_spare = q->next;
        free(q);
    }
    h2->n_q_spare = 0;
}

void h2_q_release(sws_hold_t *h)
{
    qitem_t *q = (qitem_t *)h;
    if (q->kind == Q_HOLD_FILE)
        sws_filecache_release(q->fc, q->f);
    else if (q->kind == Q_HOLD_HEAP)
        free(q->heap);
    h2_q_free(q);
}

/* A marker whose body went into the batch: let go once the connection
 * wrote it (net's holds; the next out_flush, or the close). */
void h2_q_retire(h2conn_t *hc, qitem_t *q)
{
    if (q->kind == Q_HOLD) {
        conn_hold(&hc->c, q->hold);
        h2_q_free(q);
    } else {
        q->h.release = h2_q_release;
        conn_hold(&hc->c, &q->h);
    }
}

void h2_q_drop(qitem_t *q)
{
    if (q->kind == Q_FILE)
        sws_filecache_release(q->fc, q->f);
    h2_q_free(q);
}

int h2_q_is_data(const qitem_t *q) { return q->kind <= Q_FILE; }

/* Markers at the head of the queue: everything before them is framed. */
void h2_q_pop_markers(h2s_t *s)
{
    while (s->qh && !h2_q_is_data(s->qh)) {
        qitem_t *q = s->qh;
        s->qh = q->next;
        if (!s->qh)
            s->qt = NULL;
        h2_q_retire(s->hc, q);
    }
}

qitem_t *h2_q_push(h2s_t *s, int kind, size_t extra)
{
    sws_h2_t *h2 = &s->hc->e->h2;
    qitem_t *q;
    if (kind != Q_COPY && h2->q_spare) {
        q = h2->q_spare;
        h2->q_spare = q->next;
        h2->n_q_spare--;
    } else if (!(q = malloc(sizeof *q + extra))) { /* not calloc: glibc's skips its per-size cache */
        return NULL;
    }
    memset(q, 0, sizeof *q);
    q->h2 = h2;
    q->kind = kind;
    q->seq = s->q_seq++;
    if (s->qt)
        s->qt->next = q;
    else
        s->qh = q;
    s->qt = q;
    return q;
}

void h2s_free(sws_engine_t *e, h2s_t *s)
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
    if (s->open && hc->sess)
        sws_h2sess_set_user(hc->sess, s->id, NULL);
    while (s->qh) {
        qitem_t *q = s->qh;
        s->qh = q->next;
        if (h2_q_is_data(q))
            h2_q_drop(q);
        else
            h2_q_retire(hc, q); /* bytes before it may sit in pending output */
    }
    free(s->bin);
    free(s->tr);
    if (e->h2.n_spare < SWS_H2_SPARE && s->rq_cap <= 4096 && s->hcap <= 64 &&
        s->hb_cap <= H2S_HB_KEEP) {
        /* kept for the next stream, with its request and head buffers (h2s_new) */
        char *rq = s->rq, *hb = s->hb;
        hoff_t *hdr = s->hdr;
        size_t rq_cap = s->rq_cap, hcap = s->hcap, hb_cap = s->hb_cap;
        memset(s, 0, sizeof *s);
        s->rq = rq;
        s->rq_cap = rq_cap;
        s->hdr = hdr;
        s->hcap = hcap;
        s->hb = hb;
        s->hb_cap = hb_cap;
        s->next = e->h2.spare;
        e->h2.spare = s;
        e->h2.n_spare++;
        return;
    }
    free(s->hb);
    free(s->rq);
    free(s->hdr);
    free(s);
}

/* A zeroed stream object: a spare one (its request buffers kept, empty),
 * else a new one. Streams come and go by the thousand a second on a busy
 * connection: five allocations each, otherwise. */
h2s_t *h2s_new(sws_engine_t *e)
{
    h2s_t *s = e->h2.spare;
    if (!s)
        return calloc(1, sizeof *s);
    e->h2.spare = s->next;
    e->h2.n_spare--;
    s->next = NULL;
    return s;
}

/* The access-log line and counters of a stream's request. */
void h2s_log(sws_engine_t *e, h2s_t *s, const sws_request_t *r, int status)
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
void h2s_body_timer(sws_engine_t *e, h2s_t *s)
{
    if (body_owed(s))
        tl_set(e, &s->bt.tn, TL_BODY);
    else
        tl_unlink(e, &s->bt.tn);
}

/* sws_h2sess_consume (the window handed back for n bytes of stream id),
 * noting when the connection's window opens again after the client
 * had none: a stream that waited on it is not timed from before
 * (bodies_expired). */
void h2_consume(h2conn_t *hc, int32_t id, size_t n)
{
    int32_t before = sws_h2sess_recv_window(hc->sess, 0);
    sws_h2sess_consume(hc->sess, id, n);
    if (before <= 0 && sws_h2sess_recv_window(hc->sess, 0) > 0)
        hc->cwin_at = hc->e->core.now;
}

/* The handler lets go (the client reset the stream, or the connection
 * closes; why: SWS_GONE_*): its gone hook, and the log line (499 when no
 * answer started; log 0: the caller logs). */
void h2s_gone(sws_engine_t *e, h2s_t *s) { h2s_gone_log(e, s, 1, SWS_GONE_CLIENT); }

void h2s_gone_log(sws_engine_t *e, h2s_t *s, int log, int why)
{
    h2conn_t *hc = s->hc;
    sws_conn_t *c = &hc->c;
    s->live = 0;
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
        h2s_log(e, s, &s->log, s->submitted ? s->status : 499);
}

/* ---- output: DATA -------------------------------------------------------------------------- */


/* The session's data_read: how much of s's queue one DATA frame of at
 * most max bytes carries (a frame never spans two pieces), and whether it
 * ends the body (and trailers follow). */
ssize_t h2_data_read(void *u, void *su, size_t max, int *flags)
{
    h2s_t *s = su;
    if (s->hb_len)
        h2s_hb_release(s); /* the HEADERS went before their DATA */
    h2_q_pop_markers(s);
    qitem_t *q = s->qh;
    size_t n = 0;
    if (!q && !s->body_done) {
        s->deferred = 1;
        return SWS_H2D_DEFERRED;
    }
    if (q)
        n = q->len < max ? (size_t)q->len : max;
    if (s->body_done && n == s->q_bytes)
        *flags |= SWS_H2D_EOF | (s->tr ? SWS_H2D_TRAILERS : 0);
    return (ssize_t)n;
}

/* The body's last DATA went without END_STREAM: the trailer section ends
 * the stream. */
void h2_trailers_due(void *u, void *su, int32_t id)
{
    h2conn_t *hc = u;
    h2s_t *s = su;
    if (!s || sws_h2sess_trailers(hc->sess, id, s->tr, s->ntr) < 0)
        h2_rst(hc, id, H2_INTERNAL_ERROR); /* never a body that looks complete without them */
    if (s) {
        free(s->tr);
        s->tr = NULL;
    }
}

/* A DATA frame of `length` bytes from the head of s's queue: its header
 * and payload into the batch (referenced, copied, or read from the file
 * into it). */
int h2_data_send(void *u, void *su, const uint8_t framehd[9], size_t length)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = su;
    qitem_t *q = s->qh;
    if (length && (!q || q->len < length))
        return SWS_H2D_FAIL; /* cannot happen: h2_data_read said so */
    size_t copy = 9 + (q && q->kind == Q_REF ? 0 : length);
    if (e->net.out_len + copy > OUT_BUF || e->net.niov + 4 > OUT_IOV) {
        hc->room_blocked = 1;
        return SWS_H2D_BLOCKED; /* the session comes back with the same frame */
    }
    char *d = out_space(e);
    memcpy(d, framehd, 9);
    size_t at = 9;
    if (!length) { /* the body's empty end */
        out_commit(e, at);
        hc->data_out = 1;
        return 0;
    }
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
                return SWS_H2D_FAIL;
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
    } else {
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
        h2_q_drop(q);
    }
    h2_q_pop_markers(s);
    return 0;
}


/* Our END_STREAM on s went out: the answer is complete. */
void h2_sent_end(void *u, void *su)
{
    h2conn_t *hc = u;
    h2s_t *s = su;
    if (!s)
        return;
    s->end_sent = 1;
    h2s_hb_release(s);
    sws_h2st_t *st = sws_h2sess_stream(hc->sess, s->id);
    if (!s->req_done && st && st->state != ST_HALF_REMOTE) {
        /* The answer is complete before the request. Up to SWS_H2_DISCARD
         * more body bytes are read and dropped, so that clients which
         * treat a reset of their upload as a failure (curl 7.88) still see
         * the answer; past that, RST_STREAM NO_ERROR tells the client to
         * stop (RFC 9113 §8.1), and at once after a body that stalled. */
        s->discard_left = SWS_H2_DISCARD;
        if (s->body_late || (s->cl_known && s->cl_left > SWS_H2_DISCARD)) {
            s->discard_left = 0;
            h2_rst(hc, s->id, H2_NO_ERROR);
        }
    }
}

/* RST_STREAM for id (sent before the stream's later frames are dropped). */
void h2_rst(h2conn_t *hc, int32_t id, uint32_t code)
{
    sws_h2sess_rst(hc->sess, id, code);
}
