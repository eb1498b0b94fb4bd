/*
 * h2sess_harness.h — our HTTP/2 session (csrc/http/h2/session.c,
 * session_recv.c) as a server, with libnghttp2 as the oracle, not the
 * engine (issue 31, point 5). Shared by tests/c/test_h2_oracle.c and
 * tests/fuzz/fuzz_h2sess.c; it links the session, hpack.c and huffman.c
 * alone (no engine) and -lnghttp2.
 *
 * An exchange (hx_t) is our sws_h2sess_t, with a small callback set that
 * records each request and answers it from a plan (hx_plan_t: the request
 * the client sends, the answer we give: an optional 1xx, the final head,
 * a body written through data_read/data_send, trailers), and a peer:
 *
 *  - oracle mode (hx_init): an nghttp2 client session (mem_send and
 *    mem_recv) that submits the plans' requests (bodies through a data
 *    provider, trailers), bytes moved both ways in memory, in chunks a
 *    caller may bound, until both sides are idle (hx_pump). hx_check then
 *    requires, per plan: our header callback saw the client's request
 *    list (names and values, in order), its body whole, its END_STREAM,
 *    and the stream closed with NO_ERROR (CANCEL where the plan resets
 *    it); nghttp2's on_header saw our blocks (1xx, final, trailers) as we
 *    submitted them, in order, with NGHTTP2_NV_FLAG_NO_INDEX exactly on
 *    the fields we flagged SWS_HPACK_NEVER and on set-cookie, cookie,
 *    authorization, proxy-authorization and x-request-id; the body
 *    whole, byte for byte; and over the connection: no nghttp2 error or
 *    invalid-frame callback, no frame nghttp2 would not send, no
 *    RST_STREAM or GOAWAY either way but those a plan asks for (the
 *    client's CANCEL mid-body, our NO_ERROR after a whole answer while
 *    the upload still came, a final GOAWAY NO_ERROR), no error
 *    callback of ours, every PING answered with its payload, and no
 *    stream left open on our side.
 *
 *  - raw mode (hx_init_raw): the client's bytes are given (hx_raw_feed);
 *    no client session can be the judge of what we answer (nghttp2
 *    refuses, as connection errors, HEADERS on streams it never opened
 *    and ACKs of SETTINGS it never sent), so hx_out_check parses every
 *    frame we write and requires: our first frame a SETTINGS; lengths
 *    at most 16384 and right for the type (SETTINGS a multiple of 6, its
 *    ACK empty, PING 8, RST_STREAM 4, WINDOW_UPDATE 4 with an increment
 *    of 1 to 2^31-1, GOAWAY at least 8); only the types and flags a
 *    server sends (no PUSH_PROMISE, no padding); control frames on
 *    stream 0 and stream frames on odd ids; CONTINUATION only inside a
 *    block, on its stream; each header block decoded by nghttp2's HPACK
 *    inflater, told the client's SETTINGS_HEADER_TABLE_SIZE when our ACK
 *    of that SETTINGS goes (as a client applies it), to the list we
 *    submitted next on that stream; DATA only after the final head, the
 *    body's own bytes in order, within the windows the client gave (a
 *    mirror of the client's SETTINGS_INITIAL_WINDOW_SIZE and
 *    WINDOW_UPDATEs, read from the frames the session's frame callback
 *    reports, checked against the same bytes); END_STREAM once, where the
 *    answer ends; nothing on a stream after our RST_STREAM, and nothing
 *    at all after a GOAWAY with an error code.
 */
#ifndef SCALWS_TEST_H2SESS_HARNESS_H
#define SCALWS_TEST_H2SESS_HARNESS_H

#include <nghttp2/nghttp2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/h2/session.h"
#include "h2sess_plan.h"

/* ---- the exchange ------------------------------------------------------------------------ */

typedef struct hx {
    sws_h2sess_t sv;
    nghttp2_session *cl;     /* oracle mode's client */
    int raw;
    hx_plan_t **plans;
    size_t nplans, plans_cap;
    hx_buf_t c2s, s2c;
    size_t c2s_taken, c2s_avail, s2c_taken, s2c_avail;
    size_t s2c_fpos;             /* the next frame header in s2c */
    size_t c2s_chunk, s2c_chunk; /* bytes made available to a side per round (0: all) */
    size_t batch, batch_used;    /* bytes a send round takes before data_send says BLOCKED (0: no bound) */
    int consume_later;           /* request body handed back after sws_h2sess_recv returns */
    struct { int32_t id; size_t n; } *pend;
    size_t npend, pend_cap;
    int failures, printed;
    int srv_errors;              /* our error callback */
    int expect_goaway;           /* a GOAWAY of ours with NO_ERROR is expected */
    int goaway_seen;
    uint32_t goaway_last;
    int allow_srv_rst;           /* RST_STREAM from us is expected (a case's own) */
    int cl_pings, cl_ping_acks, sv_pings, sv_ping_acks;
    uint8_t ping_opaque[8];
    hx_rng_t *r;                 /* chunk sizes, raw-mode answers */
    uint8_t raw_flags;
    /* raw mode: the mirror of the client's frames, and our output parsed */
    size_t m_off;                /* the mirror's place in c2s (the preface skipped) */
    int m_bad;
    int64_t m_conn_win, m_init_win;
    int32_t m_max_id;
    uint32_t *m_tables;          /* per client SETTINGS taken: its HEADER_TABLE_SIZE + 1, or 0 */
    size_t m_nset, m_setcap, o_acks;
    nghttp2_hd_inflater *inf;
    hx_buf_t o_blk;
    int32_t o_blk_id;
    uint8_t o_blk_flags;
    size_t o_frames;
    int o_dead;                  /* a GOAWAY with an error went */
} hx_t;

static void hx_fail(hx_t *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hx_fail(hx_t *x, const char *fmt, ...)
{
    x->failures++;
    if (x->printed++ >= 12)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "h2sess: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static hx_plan_t *hx_find(hx_t *x, int32_t id)
{
    for (size_t i = x->nplans; i-- > 0;)
        if (x->plans[i]->id == id)
            return x->plans[i];
    return NULL;
}

static void hx_add_plan(hx_t *x, hx_plan_t *p)
{
    if (x->nplans == x->plans_cap) {
        x->plans_cap = x->plans_cap ? x->plans_cap * 2 : 16;
        x->plans = realloc(x->plans, x->plans_cap * sizeof *x->plans);
        if (!x->plans)
            abort();
    }
    x->plans[x->nplans++] = p;
}

/* ---- our session's callbacks --------------------------------------------------------------- */

static void hx_answer(hx_t *x, hx_plan_t *p);
static void hx_raw_mirror(hx_t *x, uint8_t type, uint8_t flags, int32_t id, uint32_t len);

static int sv_frame(void *u, uint8_t type, uint8_t flags, int32_t id, uint32_t len)
{
    hx_t *x = u;
    if (x->raw)
        hx_raw_mirror(x, type, flags, id, len);
    return 0;
}

static hx_plan_t *hx_raw_plan(hx_t *x, int32_t id);

static int sv_begin(void *u, int32_t id)
{
    hx_t *x = u;
    hx_plan_t *p = x->raw ? hx_raw_plan(x, id) : hx_find(x, id);
    if (!p) {
        hx_fail(x, "stream %d opened that the client did not submit", (int)id);
        return -1;
    }
    if (p->s_begin)
        hx_fail(x, "stream %d opened twice", (int)id);
    p->s_begin = 1;
    sws_h2sess_set_user(&x->sv, id, p);
    if (x->raw && (x->raw_flags & 0x10) && id % 7 == 5)
        return -1; /* refused by its owner: RST_STREAM INTERNAL_ERROR */
    return 0;
}

static int sv_header(void *u, void *su, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p) {
        hx_fail(x, "a header for a stream without its user pointer");
        return -1;
    }
    hl_add(&p->s_req, name, nl, value, vl, 0);
    if (x->raw && (x->raw_flags & 0x20) && p->s_req.n > 12)
        return -1;
    return 0;
}

static void sv_request(void *u, void *su, int end_stream)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    p->s_request = 1;
    if (end_stream)
        p->s_end = 1;
    if (x->raw && p->srv_rst) {
        sws_h2sess_rst(&x->sv, p->id, H2_CANCEL);
        return;
    }
    if (end_stream || p->early)
        hx_answer(x, p);
}

static int sv_data(void *u, void *su, int32_t id, const uint8_t *d, size_t n)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p->s_request)
        hx_fail(x, "stream %d: DATA before its request ended", (int)id);
    for (size_t i = 0; i < n; i++)
        if (d[i] != hx_body_byte(p->rseed, p->s_got + i)) {
            p->s_bad = 1;
            break;
        }
    p->s_got += n;
    if (x->raw && (x->raw_flags & 0x40) && p->s_got > 3000)
        return -1; /* the owner refuses the body (RST_STREAM INTERNAL_ERROR) */
    if (x->consume_later) {
        if (x->npend == x->pend_cap) {
            x->pend_cap = x->pend_cap ? x->pend_cap * 2 : 16;
            x->pend = realloc(x->pend, x->pend_cap * sizeof *x->pend);
            if (!x->pend)
                abort();
        }
        x->pend[x->npend].id = id;
        x->pend[x->npend++].n = n;
    } else {
        sws_h2sess_consume(&x->sv, id, n);
    }
    return 0;
}

static void sv_end_stream(void *u, void *su)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (p->s_end)
        hx_fail(x, "stream %d: END_STREAM told twice", (int)p->id);
    p->s_end = 1;
    if (!p->s_answered)
        hx_answer(x, p);
}

static void sv_close(void *u, void *su, int32_t id, uint32_t code)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p) {
        hx_fail(x, "stream %d closed without its user pointer", (int)id);
        return;
    }
    if (p->s_closed)
        hx_fail(x, "stream %d closed twice", (int)id);
    p->s_closed = 1;
    p->s_code = code;
}

static void sv_sent_end(void *u, void *su)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    p->s_sent_end++;
    if (p->stop_upload && !p->s_end && !p->s_stopped) {
        p->s_stopped = 1;
        if (sws_h2sess_rst(&x->sv, p->id, H2_NO_ERROR) != 0)
            hx_fail(x, "stream %d: RST_STREAM NO_ERROR after our END_STREAM not taken", (int)p->id);
    }
}

static void sv_ping_ack(void *u, const uint8_t opaque[8])
{
    hx_t *x = u;
    if (!x->raw && memcmp(opaque, x->ping_opaque, 8) != 0) /* a raw client ACKs what it likes */
        hx_fail(x, "our PING came back with another payload");
    x->sv_ping_acks++;
}

static void sv_error(void *u, uint32_t code, const char *what)
{
    hx_t *x = u;
    x->srv_errors++;
    if (!x->raw)
        hx_fail(x, "our session refused the client: %s (code %u)", what, (unsigned)code);
}

static ssize_t sv_data_read(void *u, void *su, size_t max, int *flags)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p->body || p->s_off > p->slen) {
        hx_fail(x, "stream %d: data_read without a body", (int)p->id);
        return SWS_H2D_DEFERRED;
    }
    if (p->defer && !p->s_deferred) {
        p->s_deferred = 1;
        return SWS_H2D_DEFERRED;
    }
    if (max == 0)
        hx_fail(x, "stream %d: data_read with max 0", (int)p->id);
    size_t n = p->slen - p->s_off < max ? p->slen - p->s_off : max;
    if (p->s_off + n == p->slen)
        *flags |= SWS_H2D_EOF | (p->strailers ? SWS_H2D_TRAILERS : 0);
    return (ssize_t)n;
}

static int sv_data_send(void *u, void *su, const uint8_t hd[9], size_t n)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (x->batch && x->batch_used && x->batch_used + 9 + n > x->batch)
        return SWS_H2D_BLOCKED;
    if (p->s_off + n > p->slen) {
        hx_fail(x, "stream %d: data_send past the body", (int)p->id);
        return SWS_H2D_FAIL;
    }
    hx_put(&x->s2c, hd, 9);
    hx_put(&x->s2c, NULL, n); /* room, then the bytes */
    uint8_t *o = x->s2c.p + x->s2c.n - n;
    for (size_t i = 0; i < n; i++)
        o[i] = hx_body_byte(p->sseed, p->s_off + i);
    p->s_off += n;
    x->batch_used += 9 + n;
    return 0;
}

static void sv_trailers(void *u, void *su, int32_t id)
{
    hx_t *x = u;
    hx_plan_t *p = su;
    if (!p->strailers)
        hx_fail(x, "stream %d: trailers asked for, none planned", (int)id);
    else if (sws_h2sess_trailers(&x->sv, id, p->str.f, p->str.n) != 0)
        hx_fail(x, "stream %d: sws_h2sess_trailers failed", (int)id);
}

static const sws_h2cb_t HX_CB = {
    .frame = sv_frame,
    .begin = sv_begin,
    .header = sv_header,
    .request = sv_request,
    .data = sv_data,
    .end_stream = sv_end_stream,
    .close = sv_close,
    .sent_end = sv_sent_end,
    .ping_ack = sv_ping_ack,
    .error = sv_error,
    .data_read = sv_data_read,
    .data_send = sv_data_send,
    .trailers = sv_trailers,
};

static void hx_answer(hx_t *x, hx_plan_t *p)
{
    if (p->s_answered)
        return;
    p->s_answered = 1;
    int copy = p->copy ? SWS_H2H_COPY : 0;
    if (p->info && sws_h2sess_headers(&x->sv, p->id, p->inf.f, p->inf.n, copy) != 0) {
        if (!x->raw)
            hx_fail(x, "stream %d: the 1xx was not taken", (int)p->id);
        return;
    }
    int fl = SWS_H2H_FINAL | (p->body ? SWS_H2H_BODY : 0) | copy;
    if (sws_h2sess_headers(&x->sv, p->id, p->resp.f, p->resp.n, fl) != 0 && !x->raw)
        hx_fail(x, "stream %d: the answer was not taken", (int)p->id);
}

/* ---- nghttp2's client callbacks ---------------------------------------------------------- */

static int cl_begin_headers(nghttp2_session *s, const nghttp2_frame *fr, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
    if (!p) {
        hx_fail(x, "client: HEADERS on stream %d it knows nothing of", (int)fr->hd.stream_id);
        return 0;
    }
    if (p->c_nblk == 4)
        hx_fail(x, "client: more than 4 header blocks on stream %d", (int)p->id);
    else
        p->c_nblk++;
    return 0;
}

static int cl_header(nghttp2_session *s, const nghttp2_frame *fr, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *u)
{
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
    if (p && p->c_nblk)
        hl_add(&p->c_blk[p->c_nblk - 1], name, nl, value, vl, (flags & NGHTTP2_NV_FLAG_NO_INDEX) ? 1 : 0);
    return 0;
}

static int cl_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t n, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, id);
    if (!p) {
        hx_fail(x, "client: DATA on stream %d it knows nothing of", (int)id);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (d[i] != hx_body_byte(p->sseed, p->c_got + i)) {
            p->c_bad = 1;
            break;
        }
    p->c_got += n;
    if (p->rst_resp_at >= 0 && p->c_got >= (size_t)p->rst_resp_at && !p->c_rst) {
        p->c_rst = 1;
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int cl_close(nghttp2_session *s, int32_t id, uint32_t code, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, id);
    if (!p)
        return 0;
    if (p->c_closed)
        hx_fail(x, "client: stream %d closed twice", (int)id);
    p->c_closed = 1;
    p->c_code = code;
    return 0;
}

static int cl_frame_recv(nghttp2_session *s, const nghttp2_frame *fr, void *u)
{
    hx_t *x = u;
    switch (fr->hd.type) {
    case NGHTTP2_RST_STREAM: {
        hx_plan_t *p = hx_find(x, fr->hd.stream_id); /* the client may have closed it */
        if (p && p->s_stopped && fr->rst_stream.error_code == NGHTTP2_NO_ERROR)
            break; /* the upload stopped after the whole answer */
        if (!x->allow_srv_rst)
            hx_fail(x, "client: RST_STREAM %u from us on stream %d", fr->rst_stream.error_code,
                    (int)fr->hd.stream_id);
        break;
    }
    case NGHTTP2_GOAWAY:
        x->goaway_seen++;
        x->goaway_last = (uint32_t)fr->goaway.last_stream_id;
        if (!x->expect_goaway || fr->goaway.error_code != NGHTTP2_NO_ERROR)
            hx_fail(x, "client: GOAWAY %u from us (last stream %d)", fr->goaway.error_code,
                    (int)fr->goaway.last_stream_id);
        break;
    case NGHTTP2_PING:
        if (fr->hd.flags & NGHTTP2_FLAG_ACK) {
            x->cl_ping_acks++;
            if (memcmp(fr->ping.opaque_data, x->ping_opaque, 8) != 0)
                hx_fail(x, "client: our PING's ACK has another payload");
        }
        break;
    case NGHTTP2_PUSH_PROMISE:
    case NGHTTP2_PRIORITY:
        hx_fail(x, "client: a frame of type %d from us", fr->hd.type);
        break;
    }
    return 0;
}

static int cl_frame_send(nghttp2_session *s, const nghttp2_frame *fr, void *u)
{
    hx_t *x = u;
    if (fr->hd.type == NGHTTP2_RST_STREAM) {
        hx_plan_t *p = hx_find(x, fr->hd.stream_id);
        if (!p || !p->c_rst)
            hx_fail(x, "client: nghttp2 reset stream %d (%u)", (int)fr->hd.stream_id,
                    fr->rst_stream.error_code);
    } else if (fr->hd.type == NGHTTP2_GOAWAY) {
        hx_fail(x, "client: nghttp2 sent GOAWAY %u", fr->goaway.error_code);
    }
    return 0;
}

static int cl_not_send(nghttp2_session *s, const nghttp2_frame *fr, int err, void *u)
{
    hx_t *x = u;
    hx_plan_t *p = nghttp2_session_get_stream_user_data(s, fr->hd.stream_id);
    if (fr->hd.type == NGHTTP2_RST_STREAM || (p && p->c_rst))
        return 0; /* a reset stream's frames */
    hx_fail(x, "client: nghttp2 could not send a frame of type %d on %d: %s", fr->hd.type,
            (int)fr->hd.stream_id, nghttp2_strerror(err));
    return 0;
}

static int cl_error(nghttp2_session *s, int code, const char *msg, size_t len, void *u)
{
    hx_t *x = u;
    hx_fail(x, "client: nghttp2 error %d: %.*s", code, (int)len, msg);
    return 0;
}

static int cl_invalid(nghttp2_session *s, const nghttp2_frame *fr, int code, void *u)
{
    hx_t *x = u;
    hx_fail(x, "client: nghttp2 found a frame of type %d on stream %d invalid: %s", fr->hd.type,
            (int)fr->hd.stream_id, nghttp2_strerror(code));
    return 0;
}

static ssize_t cl_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                       nghttp2_data_source *src, void *u)
{
    hx_plan_t *p = src->ptr;
    if (p->rst_req_at >= 0 && p->roff >= (size_t)p->rst_req_at) {
        p->c_rst_due = 1; /* hx_pump resets it */
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = p->rlen - p->roff < len ? p->rlen - p->roff : len;
    if (p->rst_req_at >= 0 && p->roff + n > (size_t)p->rst_req_at)
        n = (size_t)p->rst_req_at - p->roff;
    for (size_t i = 0; i < n; i++)
        buf[i] = hx_body_byte(p->rseed, p->roff + i);
    p->roff += n;
    if (p->roff == p->rlen && p->rst_req_at < 0) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (p->rtrailers) {
            nghttp2_nv nv[8];
            size_t k = 0;
            for (; k < p->rtr.n && k < 8; k++)
                nv[k] = (nghttp2_nv){(uint8_t *)p->rtr.f[k].name, (uint8_t *)p->rtr.f[k].value,
                                     p->rtr.f[k].nl, p->rtr.f[k].vl, NGHTTP2_NV_FLAG_NONE};
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            if (nghttp2_submit_trailer(s, id, nv, k) != 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
    }
    return (ssize_t)n;
}

/* ---- setting up, pumping, checking --------------------------------------------------------- */

/* Our session with conf, its SETTINGS queued. */
static void hx_init_common(hx_t *x, const sws_h2sess_conf_t *conf, hx_rng_t *r)
{
    memset(x, 0, sizeof *x);
    x->r = r;
    if (sws_h2sess_init(&x->sv, conf, &HX_CB, x) != 0 || sws_h2sess_settings(&x->sv) != 0) {
        fprintf(stderr, "sws_h2sess_init failed\n");
        abort();
    }
    memcpy(x->ping_opaque, "h2sess\0\1", 8);
}

/* Oracle mode: an nghttp2 client whose SETTINGS says initial_window
 * (0: its default) and header_table (0: its default; else the value - 1). */
__attribute__((unused))
static void hx_init(hx_t *x, const sws_h2sess_conf_t *conf, hx_rng_t *r, uint32_t initial_window,
                    uint32_t header_table)
{
    hx_init_common(x, conf, r);
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, cl_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, cl_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cl_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, cl_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cl_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, cl_frame_send);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, cl_not_send);
    nghttp2_session_callbacks_set_error_callback2(cb, cl_error);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, cl_invalid);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_max_send_header_block_length(opt, 1u << 20); /* long request lists */
    if (nghttp2_session_client_new2(&x->cl, cb, x, opt) != 0)
        abort();
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[3];
    size_t n = 0;
    iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_PUSH, 0};
    if (initial_window)
        iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, initial_window};
    if (header_table)
        iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, header_table - 1};
    nghttp2_submit_settings(x->cl, NGHTTP2_FLAG_NONE, iv, n);
}

static void hx_free(hx_t *x)
{
    if (x->cl)
        nghttp2_session_del(x->cl);
    if (x->inf)
        nghttp2_hd_inflate_del(x->inf);
    sws_h2sess_free(&x->sv);
    for (size_t i = 0; i < x->nplans; i++)
        hx_plan_free(x->plans[i]);
    free(x->plans);
    free(x->c2s.p);
    free(x->s2c.p);
    free(x->pend);
    free(x->m_tables);
    free(x->o_blk.p);
}

/* The client submits p (oracle mode); its stream id is p->id. */
__attribute__((unused))
static void hx_submit(hx_t *x, hx_plan_t *p)
{
    nghttp2_nv nv[64];
    size_t n = 0;
    for (; n < p->req.n && n < 64; n++)
        nv[n] = (nghttp2_nv){(uint8_t *)p->req.f[n].name, (uint8_t *)p->req.f[n].value,
                             p->req.f[n].nl, p->req.f[n].vl, NGHTTP2_NV_FLAG_NONE};
    if (p->req.n > 64)
        abort(); /* hx_gen_t.max_fields is at most 40 */
    nghttp2_data_provider prd = {.source.ptr = p, .read_callback = cl_read};
    int32_t id = nghttp2_submit_request(x->cl, NULL, nv, n, p->rprov ? &prd : NULL, p);
    if (id <= 0) {
        hx_fail(x, "nghttp2_submit_request: %s", nghttp2_strerror(id));
        hx_plan_free(p);
        return;
    }
    p->id = id;
    hx_add_plan(x, p);
}

static void hx_out_check(hx_t *x, size_t from);
static uint32_t hx_get24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }

/* Moves bytes both ways until neither side has more to say (and deferred
 * bodies resumed), at most rounds rounds (0: until idle). Returns 0 when
 * idle, 1 when rounds ran out. */
static int hx_pump(hx_t *x, int rounds)
{
    for (int round = 0; rounds == 0 || round < rounds; round++) {
        int moved = 0;
        if (round > 3000000) {
            hx_fail(x, "the exchange never ends");
            return 0;
        }
        /* the client's output */
        if (x->cl) {
            for (size_t i = 0; i < x->nplans; i++) {
                hx_plan_t *p = x->plans[i];
                if (p->c_rst_due && !p->c_rst) {
                    p->c_rst = 1;
                    nghttp2_submit_rst_stream(x->cl, NGHTTP2_FLAG_NONE, p->id, NGHTTP2_CANCEL);
                }
            }
            for (;;) {
                const uint8_t *d;
                ssize_t k = nghttp2_session_mem_send(x->cl, &d);
                if (k < 0) {
                    hx_fail(x, "nghttp2_session_mem_send: %s", nghttp2_strerror((int)k));
                    return 0;
                }
                if (k == 0)
                    break;
                hx_put(&x->c2s, d, (size_t)k);
                moved = 1;
            }
        }
        /* our input, as much as the chunk lets through */
        if (x->c2s_avail < x->c2s.n) {
            size_t add = x->c2s.n - x->c2s_avail;
            if (x->c2s_chunk && hx_below(x->r, 4)) { /* and now and then all of it */
                size_t c = 1 + hx_below(x->r, (uint32_t)x->c2s_chunk);
                add = add < c ? add : c;
            }
            x->c2s_avail += add;
            moved = 1;
        }
        if (x->c2s_avail > x->c2s_taken) {
            ssize_t t = sws_h2sess_recv(&x->sv, x->c2s.p + x->c2s_taken, x->c2s_avail - x->c2s_taken);
            if (t < 0) {
                if (!x->raw)
                    hx_fail(x, "sws_h2sess_recv refused the client's preface");
                return 0;
            }
            x->c2s_taken += (size_t)t;
            for (size_t i = 0; i < x->npend; i++)
                sws_h2sess_consume(&x->sv, x->pend[i].id, x->pend[i].n);
            x->npend = 0;
        }
        /* our output */
        size_t out_from = x->s2c.n;
        x->batch_used = 0;
        for (;;) {
            const uint8_t *d;
            size_t n;
            int rc = sws_h2sess_send(&x->sv, &d, &n);
            if (rc == 0)
                break;
            moved = 1;
            if (rc == 2)
                break; /* data_send had no room: what we have goes first */
            if (rc == 1 && n) {
                hx_put(&x->s2c, d, n);
                x->batch_used += n;
            }
        }
        if (getenv("H2SESS_TRACE"))
            for (size_t o = out_from; o + 9 <= x->s2c.n; o += 9 + hx_get24(x->s2c.p + o))
                fprintf(stderr, "out: type %u flags %#x stream %u, %u bytes\n", x->s2c.p[o + 3],
                        x->s2c.p[o + 4], h2_get32(x->s2c.p + o + 5), hx_get24(x->s2c.p + o));
        if (x->raw)
            hx_out_check(x, out_from);
        else if (x->s2c.n > out_from || x->s2c_avail < x->s2c.n) {
            /* the client's input */
            size_t add = x->s2c.n - x->s2c_avail;
            if (x->s2c_chunk && hx_below(x->r, 4)) { /* and now and then all of it */
                size_t c = 1 + hx_below(x->r, (uint32_t)x->s2c_chunk);
                add = add < c ? add : c;
            }
            x->s2c_avail += add;
            /* libnghttp2 1.52 (Debian's, with the CONTINUATION limit
             * backported) counts a CONTINUATION each time its frame
             * header arrives in pieces: such a header is never cut */
            while (x->s2c_fpos + 9 <= x->s2c.n && x->s2c_fpos < x->s2c_avail) {
                if (x->s2c_avail < x->s2c_fpos + 9 && x->s2c.p[x->s2c_fpos + 3] == H2_CONTINUATION)
                    x->s2c_avail = x->s2c_fpos + 9;
                x->s2c_fpos += 9 + hx_get24(x->s2c.p + x->s2c_fpos);
            }
            if (add) {
                ssize_t k = nghttp2_session_mem_recv(x->cl, x->s2c.p + x->s2c_taken,
                                                     x->s2c_avail - x->s2c_taken);
                if (k < 0) {
                    hx_fail(x, "nghttp2_session_mem_recv: %s", nghttp2_strerror((int)k));
                    return 0;
                }
                x->s2c_taken += (size_t)k;
                moved = 1;
            }
        }
        /* keep the buffers short: what both sides took goes */
        if (x->c2s_taken == x->c2s.n && !x->raw) {
            x->c2s.n = x->c2s_taken = x->c2s_avail = 0;
            x->m_off = 0;
        }
        if (x->s2c_taken == x->s2c.n && x->s2c_fpos == x->s2c.n)
            x->s2c.n = x->s2c_taken = x->s2c_avail = x->s2c_fpos = 0;
        if (!moved) {
            for (size_t i = 0; i < x->nplans; i++) {
                hx_plan_t *p = x->plans[i];
                if (p->s_deferred == 1) {
                    p->s_deferred = 2;
                    sws_h2sess_resume(&x->sv, p->id);
                    moved = 1;
                }
            }
            if (x->cl)
                for (size_t i = 0; i < x->nplans; i++) {
                    hx_plan_t *p = x->plans[i];
                    if (p->c_rst_due && !p->c_rst)
                        moved = 1;
                }
            if (!moved)
                return 0;
        }
    }
    return 1;
}

/* Oracle mode, once idle: every plan's request and answer came whole. */
__attribute__((unused))
static void hx_check(hx_t *x)
{
    for (size_t i = 0; i < x->nplans; i++) {
        hx_plan_t *p = x->plans[i];
        int id = (int)p->id;
        size_t at;
        if (!p->s_begin || !p->s_request) {
            hx_fail(x, "stream %d: our session never saw its request", id);
            continue;
        }
        if (!hl_eq(&p->s_req, &p->req, 0, &at)) {
            hx_fail(x, "stream %d: the request's fields differ at %zu", id, at);
            hl_print("got", &p->s_req);
            hl_print("sent", &p->req);
        }
        if (p->s_bad)
            hx_fail(x, "stream %d: request body bytes differ", id);
        if (!p->s_closed)
            hx_fail(x, "stream %d: never closed on our side", id);
        if (p->c_rst) {
            if (!p->c_closed || (p->c_code != NGHTTP2_CANCEL && p->c_code != NGHTTP2_NO_ERROR))
                hx_fail(x, "stream %d: the client's reset: closed %d code %u", id, p->c_closed,
                        p->c_code);
            if (p->s_closed && p->s_code != H2_CANCEL && p->s_code != H2_NO_ERROR)
                hx_fail(x, "stream %d: reset by the client, closed here with %u", id, p->s_code);
            continue; /* prefixes only */
        }
        if (p->s_stopped) {
            if (p->s_got > p->rlen || p->s_code != H2_NO_ERROR)
                hx_fail(x, "stream %d: upload stopped at %zu of %zu bytes, closed with %u", id,
                        p->s_got, p->rlen, p->s_code);
        } else if (p->s_got != p->rlen || !p->s_end)
            hx_fail(x, "stream %d: request body %zu of %zu bytes, end %d", id, p->s_got, p->rlen,
                    p->s_end);
        if (p->s_closed && p->s_code != H2_NO_ERROR)
            hx_fail(x, "stream %d: closed with %u", id, p->s_code);
        if (p->s_sent_end != 1)
            hx_fail(x, "stream %d: our END_STREAM told %d times", id, p->s_sent_end);
        const hx_list_t *want[3];
        int nw = hx_plan_blocks(p, want);
        if (p->c_nblk != nw)
            hx_fail(x, "stream %d: the client got %d header blocks, we sent %d", id, p->c_nblk, nw);
        for (int k = 0; k < nw && k < p->c_nblk; k++)
            if (!hl_eq(&p->c_blk[k], want[k], 1, &at)) {
                hx_fail(x, "stream %d: block %d differs at field %zu", id, k, at);
                hl_print("got", &p->c_blk[k]);
                hl_print("sent", want[k]);
            }
        if (p->c_got != p->slen || p->c_bad)
            hx_fail(x, "stream %d: response body %zu of %zu bytes%s", id, p->c_got, p->slen,
                    p->c_bad ? ", bytes differ" : "");
        if (!p->c_closed || p->c_code != NGHTTP2_NO_ERROR)
            hx_fail(x, "stream %d: the client's stream closed %d with %u", id, p->c_closed, p->c_code);
    }
    if (x->sv.n_open || x->sv.all)
        hx_fail(x, "%u streams left open on our side", x->sv.n_open);
    if (x->srv_errors)
        hx_fail(x, "our error callback ran %d times", x->srv_errors);
    if (x->cl_ping_acks != x->cl_pings)
        hx_fail(x, "client: %d PINGs, %d ACKs", x->cl_pings, x->cl_ping_acks);
    if (x->sv_ping_acks != x->sv_pings)
        hx_fail(x, "ours: %d PINGs, %d ACKs", x->sv_pings, x->sv_ping_acks);
    if (x->expect_goaway && x->goaway_seen != 1)
        hx_fail(x, "client: %d GOAWAYs, one expected", x->goaway_seen);
}

__attribute__((unused))
static void hx_client_ping(hx_t *x)
{
    nghttp2_submit_ping(x->cl, NGHTTP2_FLAG_NONE, x->ping_opaque);
    x->cl_pings++;
}

__attribute__((unused))
static void hx_server_ping(hx_t *x)
{
    sws_h2sess_ping(&x->sv, x->ping_opaque);
    x->sv_pings++;
}

/* The client's SETTINGS_HEADER_TABLE_SIZE changes mid-connection. */
__attribute__((unused))
static void hx_client_table(hx_t *x, uint32_t size)
{
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, size};
    nghttp2_submit_settings(x->cl, NGHTTP2_FLAG_NONE, &iv, 1);
}

#include "h2sess_raw.h" /* raw mode, on the exchange above */

#endif
