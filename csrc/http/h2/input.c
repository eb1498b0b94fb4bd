/* What HTTP/2's session reports of the client (csrc/http/h2/h2_int.h):
 * frames against the budgets (ADR 0016), streams opened, request fields,
 * bodies, ends and resets, PINGs answered, priority signals, errors. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "http/h2/h2_int.h"
#include "scalws/priority.h"

/* ---- budgets ------------------------------------------------------------------------------ */

/* The connection went over a budget (ADR 0016): GOAWAY ENHANCE_YOUR_CALM
 * (RFC 9113 §5.4.1), one log line and one count per connection. */
void h2_calm(sws_engine_t *e, h2conn_t *hc, const char *what)
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
    sws_h2sess_goaway(hc->sess, H2_ENHANCE_YOUR_CALM);
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
 * since ADR 0019), DATA that is empty and does not end the stream.
 * Counted when their header arrives, before the session acts on them. -1:
 * over budget (the connection is ending). */
static int budget_frame(h2conn_t *hc, uint8_t type, uint8_t flags, uint32_t length)
{
    sws_engine_t *e = hc->e;
    budget_fill(e, hc);
    if (type > H2_CONTINUATION && type != H2_PRIORITY_UPDATE)
        return 0; /* an extension we do not know: skipped unread, it costs its bytes only */
    switch (type) {
    case H2_HEADERS:
    case H2_CONTINUATION: /* the session bounds them (max_continuations) */
    case H2_PUSH_PROMISE: /* a connection error by itself */
    case H2_GOAWAY:
        return 0;
    case H2_DATA:
        if (length || (flags & H2_F_END_STREAM))
            return 0;
        break;
    case H2_RST_STREAM:
        if (spend(&hc->rst_tokens) == 0)
            return 0;
        h2_calm(e, hc, "too many streams reset (rapid reset)");
        return -1;
    default:
        break;
    }
    if (spend(&hc->frame_tokens) == 0)
        return 0;
    h2_calm(e, hc, "too many control or empty frames (flood)");
    return -1;
}

/* A frame's header came: the budgets, and whether a header block is open
 * (header_timeout's business). */
static int on_frame(void *u, uint8_t type, uint8_t flags, int32_t id, uint32_t len)
{
    h2conn_t *hc = u;
    if (type != H2_HEADERS && type != H2_CONTINUATION)
        hc->hdr_open = 0;
    return budget_frame(hc, type, flags, len);
}

/* A request's HEADERS open stream id: its object, the response interface. */
static int on_begin(void *u, int32_t id)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = h2s_new(e);
    if (!s)
        return -1; /* the stream is reset */
    s->hc = hc;
    s->bt.tn.tlist = TL_NONE;
    s->bt.tn.sub = 1;
    s->bt.c = &hc->c;
    s->id = id;
    s->open = 1;
    s->resp.ops = &h2_resp_ops;
    s->start = e->core.now;
    s->next = hc->streams;
    if (hc->streams)
        hc->streams->prev = s;
    hc->streams = s;
    hc->n_streams++;
    hc->hdr_open = 1; /* until on_request */
    if (hc->early_pri.live)
        h2_pri_early_take(hc, s);
    sws_h2sess_set_user(hc->sess, id, s);
    /* limits.keepalive_requests, as nginx does on HTTP/2 since 1.19.7:
     * after that many streams the connection stops, in the graceful stop's
     * two steps (GOAWAY "no new streams" and a PING, then the final GOAWAY
     * with the last stream taken): the streams that crossed the first one
     * are served, none is refused, and the connection ends once they are
     * done. (One final GOAWAY at once, as nginx sends, refuses the streams
     * in flight: clients that retry a request once, curl's --parallel,
     * fail some.) */
    if (++hc->n_taken == e->core.lim.keepalive_requests) {
        h2_goaway_notice(e, hc);
        if (!hc->goaway)
            h2_goaway(e, hc);
    }
    return 0;
}

/* ---- requests ------------------------------------------------------------------------- */

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

/* A request field (the session checked it against RFC 9113 §8.2 and
 * §8.3; a trailer section's fields are not passed on). */
static int on_header(void *u, void *su, const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = su;
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
        return -1;
    if (pseudo) {
        /* the session checked them (RFC 9113 §8.3): known, once, before the rest */
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
        /* Applied once the block ended (on_request). The field replaces a
         * PRIORITY_UPDATE that came before the HEADERS. */
        if (h2_pri_client(s, value, valuelen, s->pri_early) >= 0)
            s->pri_early = 0; /* one that cannot be read leaves the update in place */
    }
    if (s->nh == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 16;
        hoff_t *nb = realloc(s->hdr, cap * sizeof *nb);
        if (!nb)
            return -1;
        s->hdr = nb;
        s->hcap = cap;
    }
    s->hdr[s->nh++] = h;
    return 0;
}


/* The request's header block ended, well formed: dispatched. */
static void on_request(void *u, void *su, int end_stream)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = su;
    hc->hdr_open = 0;
    if (!s || s->dispatched)
        return;
    if (end_stream)
        s->req_done = 1;
    if (s->pri_cli)
        h2_pri_set(hc, s);
    s->dispatched = 1;
    h2_dispatch(e, hc, s);
    h2s_body_timer(e, s); /* the client owes its body from here, whoever answers */
}

/* A field of the request was over HPACK's 64 KiB: 431, as for a list
 * over max_header_list_size (on_header never saw that field). */
static void on_too_big(void *u, void *su)
{
    h2s_t *s = su;
    if (s)
        s->too_big = 1;
}

/* The client ended the request (END_STREAM on DATA or trailers). */
static void on_end_stream(void *u, void *su)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = su;
    hc->hdr_open = 0;
    if (!s)
        return;
    s->req_done = 1;
    tl_unlink(e, &s->bt.tn); /* the whole body is in */
    if (s->live && s->want_body)
        h2_body_to_handler(e, s); /* the end of the body */
}

/* Request body bytes of stream id (s: NULL once its object is freed). */
static int on_data(void *u, void *su, int32_t id, const uint8_t *data, size_t len)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = su;
    if (s && s->cl_known)
        s->cl_left -= len < s->cl_left ? len : s->cl_left;
    if (s && len)
        h2s_body_timer(e, s); /* progress restarts body_timeout */
    if (!s || !s->live) {
        h2_consume(hc, id, len); /* answered already: read past */
        if (s && s->end_sent && !s->req_done && s->discard_left) {
            if (s->discard_left <= len) {
                s->discard_left = 0;
                h2_rst(hc, id, H2_NO_ERROR);
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
        h2_consume(hc, id, len + s->bin_len);
        s->bin_len = 0;
        int started = s->submitted;
        h2s_gone_log(e, s, started, SWS_GONE_BODY_REFUSED);
        if (!started) {
            h2_q_cut(s, 0); /* nothing of it was framed */
            s->body_done = 0;
            sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_413]);
            h2s_log(e, s, &s->log, 413);
            if (h2_commit(e, s) < 0)
                h2_rst(hc, id, H2_INTERNAL_ERROR);
        } else {
            h2_rst(hc, id, H2_INTERNAL_ERROR);
        }
        return 0;
    }
    if (s->want_body && !s->bin_len && s->hooks) {
        int rc = s->hooks->body(e, s->ctx, (char *)data, len, 0);
        h2_consume(hc, id, len); /* the handler took it: the client may send more */
        if (rc < 0 && s->live) {
            h2_rst(hc, id, H2_INTERNAL_ERROR);
            h2s_gone(e, s);
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
            return -1;
        s->bin = nb;
        s->bin_cap = cap;
    }
    memcpy(s->bin + s->bin_len, data, len);
    s->bin_len += len;
    return 0;
}

static void on_close(void *u, void *su, int32_t id, uint32_t code)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    h2s_t *s = su;
    if (!s)
        return;
    s->open = 0;
    tl_unlink(e, &s->bt.tn);
    if (s->bin_len) {
        h2_consume(hc, id, s->bin_len); /* the connection's window */
        s->bin_len = 0;
    }
    if (s->live && !s->end_sent) {
        /* reset before the answer was complete: the handler lets go (no
         * handler runs: the session runs only from the connection's event) */
        h2s_gone(e, s);
    }
    if (!s->live)
        h2s_free(e, s);
    /* else its handler finishes: finish frees it */
}

static void on_ping_ack(void *u, const uint8_t opaque[8])
{
    h2conn_t *hc = u;
    if (memcmp(opaque, h2_stop_ping, 8) == 0)
        h2_goaway(hc->e, hc); /* the client saw the first GOAWAY: the final one */
}

/* A PRIORITY_UPDATE (RFC 9218 §7.1): the client's signal replaces what it
 * said before, merged with a response's own (h2_pri_set); for a stream
 * not opened yet, kept until it is. */
static void on_priority(void *u, void *su, int32_t id, const uint8_t *v, size_t n)
{
    h2conn_t *hc = u;
    h2s_t *s = su;
    if (s) {
        if (h2_pri_client(s, v, n, 1) >= 0)
            h2_pri_set(hc, s);
        s->pri_early = 0;
    } else {
        h2_pri_early_keep(hc, id, v, n);
    }
}

/* A connection error the session found: one log line (and the count of
 * the budgets' answers when it is theirs). */
static void on_error(void *u, uint32_t code, const char *what)
{
    h2conn_t *hc = u;
    sws_engine_t *e = hc->e;
    hc->goaway = 2;
    hc->hdr_open = 0;
    char peer[48];
    *put_peer(peer, &hc->c) = 0;
    if (code == H2_ENHANCE_YOUR_CALM && !hc->calmed) {
        hc->calmed = 1;
        e->core.st->h2_calm++;
        elog_folded(e, what, 0, SWS_L_INFO, "HTTP/2: %s, GOAWAY ENHANCE_YOUR_CALM, client: %s",
                    what, peer);
        return;
    }
    elog_folded(e, "h2 error", code, SWS_L_INFO, "HTTP/2: %s, GOAWAY %u, client: %s", what,
                (unsigned)code, peer);
}

const sws_h2cb_t h2_callbacks = {
    .frame = on_frame,
    .begin = on_begin,
    .header = on_header,
    .request = on_request,
    .too_big = on_too_big,
    .data = on_data,
    .end_stream = on_end_stream,
    .close = on_close,
    .sent_end = h2_sent_end,
    .ping_ack = on_ping_ack,
    .priority = on_priority,
    .error = on_error,
    .data_read = h2_data_read,
    .data_send = h2_data_send,
    .trailers = h2_trailers_due,
};
