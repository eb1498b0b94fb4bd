/* HTTP/2's connections (contract in scalws/h2.h; what the files share in
 * csrc/http/h2/h2_int.h): the socket's events, the bytes to and from the
 * session, the graceful stop, timers, and the engine's part.
 *
 * Re-entry, the rule these files are built around: the session must not
 * be entered from inside its own callbacks (hc->busy), and a handler's hooks
 * (gone, body, drained) run only where no other handler is on the stack:
 * from the connection's own events (h2_event, h2_work), which is also the
 * only place the session runs. A handler's operations (flush, finish,
 * close) only queue and mark: the connection's output goes at the end of
 * the pass (h2_send_soon, sws_h2_after_pass), so no stream closes under a
 * handler that is running. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "http/h2/h2_int.h"

const uint8_t h2_stop_ping[8] = {'s', 'w', 's', '-', 's', 't', 'o', 'p'};

static void h2_event(sws_engine_t *e, void *obj, uint32_t events);
static void h2_event_run(sws_engine_t *e, h2conn_t *hc, uint32_t events);

/* Brings h2_event back soon (through the core's ready list): work that was
 * marked while a handler ran. */
void h2_wake(sws_engine_t *e, h2conn_t *hc)
{
    sws_ready_add(e, &hc->c.ev, &hc->c.evmask);
}

/* The connection cannot go on: marked dead and closed from its next event
 * (h2_event, through the ready list; h2_settle and h2_expire close a dead
 * one at once when they are that event). Never closed here: closing runs
 * every stream's gone hook, and a handler may be on the stack -- a proxy's
 * data, file or hold op called from its upstream's event, whose gone hook
 * would free the exchange under it. */
void h2_fail(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->c.fd < 0 || hc->closing)
        return; /* closing: never back on the ready list */
    hc->dead = 1;
    h2_wake(e, hc);
}

/* Output a handler gave (flush, finish, close) goes at the end of the
 * pass (sws_h2_after_pass): the answers of every upstream event of the pass
 * leave in one write, one run of TLS records, instead of one write each.
 * Inside the connection's own event nothing is listed: it writes at its end. */
void h2_send_soon(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->due || hc->in_event || hc->c.fd < 0 || hc->closing)
        return;
    if (!e->core.in_pass) {
        /* outside a pass (a timer's handler, the engine's tick): the
         * connection's event, through the ready list */
        h2_wake(e, hc);
        return;
    }
    hc->due = 1;
    hc->due_next = e->h2.due;
    e->h2.due = hc;
}

/* A closing connection leaves the list. */
static void due_remove(sws_engine_t *e, h2conn_t *hc)
{
    for (h2conn_t **pp = &e->h2.due; *pp; pp = &(*pp)->due_next)
        if (*pp == hc) {
            *pp = hc->due_next;
            break;
        }
    hc->due = 0;
}

void sws_h2_after_pass(sws_engine_t *e)
{
    /* A connection's event may list others (a hook's flush): a few rounds,
     * then the rest through the ready list, for the next pass */
    for (int round = 0; round < 4 && e->h2.due; round++) {
        h2conn_t *hc = e->h2.due;
        e->h2.due = NULL;
        while (hc) {
            h2conn_t *next = hc->due_next;
            hc->due = 0;
            hc->due_next = NULL;
            if (hc->c.fd >= 0)
                h2_event(e, hc, 0);
            hc = next;
        }
    }
    while (e->h2.due) {
        h2conn_t *hc = e->h2.due;
        e->h2.due = hc->due_next;
        hc->due = 0;
        hc->due_next = NULL;
        h2_wake(e, hc);
    }
}

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

/* What the session has to send, through the batch, until it has nothing
 * more or the socket is full (c->pend: the rest when it is writable). */
void h2_send(sws_engine_t *e, h2conn_t *hc)
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
            size_t n;
            int rc = sws_h2sess_send(hc->sess, &p, &n);
            if (rc == 0)
                break;
            if (rc == 2) { /* a DATA frame waits for room: the batch goes first */
                hc->room_blocked = 1;
                break;
            }
            if (n && put_bytes(e, c, p, n) < 0) {
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
        if (s->live && s->want_body && s->hooks && (s->bin_len || (s->req_done && !s->fin_given))) {
            h2_body_to_handler(e, s);
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
void h2_goaway_notice(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->goaway || !hc->sess)
        return;
    hc->goaway = 1;
    if (sws_h2sess_goaway_notice(hc->sess) != 0 || sws_h2sess_ping(hc->sess, h2_stop_ping) != 0)
        hc->goaway = 0; /* the final GOAWAY at once, then */
}

void h2_goaway(sws_engine_t *e, h2conn_t *hc)
{
    if (hc->goaway == 2 || !hc->sess)
        return;
    hc->goaway = 2;
    sws_h2sess_goaway(hc->sess, H2_NO_ERROR);
}

/* Body queued for a stream that the session could not frame although the
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
        h2_goaway_notice(e, hc);
        if (!hc->goaway)
            h2_goaway(e, hc);
        h2_send(e, hc);
        if (c->fd < 0 || hc->dead) {
            if (c->fd >= 0)
                conn_close(e, c);
            return;
        }
    }
    int idle = hc->n_streams == 0 && !hc->hdr_open;
    if (!c->pend && ((!sws_h2sess_want_read(hc->sess) && !sws_h2sess_want_write(hc->sess)) ||
                     (hc->goaway == 2 && idle))) {
        /* GOAWAY said and every stream done: the end. Lingering (our side
         * shut, the client's bytes read and dropped until its FIN): the
         * streams it sent before it read the GOAWAY must not turn the close
         * into a reset that destroys the GOAWAY, and the client retries
         * them elsewhere (limits.keepalive_requests, a reload) */
        if (c->fd >= 0 && !c->lingering) {
            sws_ready_remove(e, &c->ev);
            conn_linger(e, c);
            conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
        }
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
    if (c->lingering) {
        conn_linger_input(e, c, (size_t)(got > 0 ? got : 0));
        return;
    }
    if (!len)
        return;
    hc->busy = 1;
    ssize_t rv = sws_h2sess_recv(hc->sess, (const uint8_t *)e->net.in, len);
    hc->busy = 0;
    if (rv < 0) { /* not HTTP/2's preface: nothing to say to it */
        char peer[48];
        *put_peer(peer, c) = 0;
        elog_folded(e, "h2 recv", 0, SWS_L_INFO, "HTTP/2: not a client preface, client: %s", peer);
        conn_close(e, c);
        return;
    }
    /* a partial frame waits for the rest in the stash */
    const uint8_t *rest = (const uint8_t *)e->net.in + rv;
    if ((size_t)rv < len && conn_stash(c, (const char *)rest, len - (size_t)rv) < 0) {
        h2_fail(e, hc);
        return;
    }
    hc->hdr_open = sws_h2sess_in_block(hc->sess, rest, len - (size_t)rv);
}

static void h2_event(sws_engine_t *e, void *obj, uint32_t events)
{
    h2conn_t *hc = obj;
    hc->in_event = 1;
    h2_event_run(e, hc, events);
    if (hc->c.fd >= 0) { /* (a closed one is freed after the batch) */
        hc->in_event = 0;
        if (hc->work_due) { /* marked after h2_work's last round */
            hc->work_due = 0;
            h2_wake(e, hc);
        }
    }
}

static void h2_event_run(sws_engine_t *e, h2conn_t *hc, uint32_t events)
{
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
        if (c->fd < 0 || c->lingering)
            return; /* lingering: nothing more is read or written */
    }
    if (c->lingering)
        return;
    h2_send(e, hc);
    if (c->fd < 0)
        return;
    for (int round = 0;; round++) {
        hc->work_due = 0;
        h2_work(e, hc);
        if (c->fd < 0)
            return;
        h2_send(e, hc); /* what h2_work made: WINDOW_UPDATE for the body handlers took */
        if (c->fd < 0 || !hc->work_due || round == 3) /* more keeps coming: h2_event wakes it */
            break;
    }
    h2_settle(e, hc);
}

static void h2_open(sws_engine_t *e, sws_conn_t *c, const void *conf)
{
    h2conn_t *hc = (h2conn_t *)c;
    hc->e = e;
    hc->vh = conf;
    const sws_h2_conf_t *cf = &e->h2.conf;
    sws_h2sess_conf_t sc = {
        .max_streams = cf->max_streams,
        .stream_window = cf->stream_window,
        .conn_window = cf->conn_window,
        .max_header_list = cf->max_header_list,
        .header_table = cf->header_table,
        .max_continuations = cf->max_continuations,
        .pool = e->h2.hq_pool,
    };
    hc->sess = malloc(sizeof *hc->sess);
    if (!hc->sess || sws_h2sess_init(hc->sess, &sc, &h2_callbacks, hc) != 0 ||
        sws_h2sess_settings(hc->sess) != 0) {
        if (hc->sess && hc->sess->tab)
            sws_h2sess_free(hc->sess);
        free(hc->sess);
        hc->sess = NULL;
        conn_close(e, c);
        return;
    }
    hc->rst_tokens = cf->reset_burst * 1000u;
    hc->frame_tokens = cf->frame_burst * 1000u;
    hc->budget_at = (uint32_t)e->core.now;
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
        h2_consume(hc, s->id, s->bin_len);
        s->bin_len = 0;
    }
    if (live)
        h2s_gone_log(e, s, !answer, SWS_GONE_BODY_TIMEOUT); /* logged if the answer began */
    uint32_t code = s->end_sent ? H2_NO_ERROR : H2_INTERNAL_ERROR;
    if (answer) {
        h2_q_cut(s, 0); /* nothing of it was framed (as for a 413 in on_data_chunk) */
        s->body_done = 0;
        s->body_late = 1;
        sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_408]);
        h2s_log(e, s, &s->log, 408);
        if (h2_commit(e, s) == 0)
            return;
    } else if (!live && !s->end_sent) {
        s->body_late = 1; /* a whole answer still going out: h2_sent_end resets */
        return;
    }
    h2_rst(hc, s->id, code);
}

/* TL_BODY entries of c's streams are due (at least one is, the list's
 * head). A stream whose client had no window to send in, on the stream
 * or the connection, at some time since its timer started waited on us
 * (a handler that took no body): timed again from now. */
static void bodies_expired(sws_engine_t *e, h2conn_t *hc)
{
    int32_t cw = sws_h2sess_recv_window(hc->sess, 0);
    for (h2s_t *s = hc->streams; s; s = s->next) {
        sws_tnode_t *n = &s->bt.tn;
        if (n->tlist != TL_BODY || n->deadline > e->core.now)
            continue;
        if (cw <= 0 || hc->cwin_at + e->core.tl[TL_BODY].ms > n->deadline ||
            sws_h2sess_recv_window(hc->sess, s->id) <= 0) {
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
    if (c->lingering) {
        conn_close(e, c);
        return;
    }
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
        h2_goaway(e, hc);
        h2_send(e, hc);
        if (c->fd >= 0)
            conn_close(e, c);
        return;
    }
    char peer[48]; /* (counted in timeouts by sws_core_expire, as every expiry) */
    *put_peer(peer, c) = 0;
    elog_folded(e, "h2 timeout", (uint64_t)which, SWS_L_INFO,
                "HTTP/2: client timed out %s, client: %s",
                which == TL_SEND ? "reading the response" : "sending a request", peer);
    /* the streams are dropped; GOAWAY says which ones were taken (RFC 9113
     * §6.8), written if the socket takes it */
    tl_unlink(e, &c->tn);
    if (!c->pend) {
        h2_goaway(e, hc);
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
    if (hc->due)
        due_remove(e, hc);
    while (hc->streams) {
        h2s_t *s = hc->streams;
        if (s->live)
            h2s_gone(e, s);
        h2s_free(e, s);
    }
    if (hc->sess) {
        sws_h2sess_free(hc->sess);
        free(hc->sess);
        hc->sess = NULL;
    }
}

const sws_proto_t sws_h2_proto = {sizeof(h2conn_t), h2_event, h2_open, h2_expire, h2_closing};

int sws_h2_preface(const char *buf, size_t len)
{
    static const char pf[] = H2_PREFACE;
    size_t n = len < sizeof pf - 1 ? len : sizeof pf - 1;
    if (memcmp(buf, pf, n) != 0)
        return -1;
    return n == sizeof pf - 1;
}

int sws_h2_init(sws_engine_t *e)
{
    e->h2.path = malloc(e->core.lim.max_uri_bytes + 512);
    e->h2.hq_pool = calloc(1, sizeof *e->h2.hq_pool);
    if (!e->h2.path || !e->h2.hq_pool)
        return -ENOMEM;
    e->h2.hq_pool->max = SWS_H2_SPARE;
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
    e->h2.conf = *conf;
    if (!conf->max_header_list) /* RFC 9113 §6.5.2's size of what HTTP/1 would take */
        e->h2.conf.max_header_list =
            (uint32_t)(e->core.lim.max_header_bytes + 32 * e->core.lim.max_headers);
    return 0;
}

void sws_h2_free(sws_engine_t *e)
{
    while (e->h2.spare) {
        h2s_t *s = e->h2.spare;
        e->h2.spare = s->next;
        free(s->hb);
        free(s->rq);
        free(s->hdr);
        free(s);
    }
    h2_q_spare_free(&e->h2);
    if (e->h2.hq_pool)
        sws_h2pool_free(e->h2.hq_pool);
    free(e->h2.hq_pool);
    e->h2.hq_pool = NULL;
    free(e->h2.path);
    free(e->h2.nva);
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
