/* The HTTP/3 session's input (contract in h3sess.h): unidirectional
 * streams by their type, the client's control stream and SETTINGS, the
 * QPACK streams, request streams' frames, field sections decoded (held
 * while QPACK inserts are missing) and checked (http/reqcheck.h). */
#include "http/h3/h3sess_int.h"

#include <stdlib.h>
#include <string.h>

#include "scalws/priority.h"

/* HTTP/2's frame types, reserved in HTTP/3 (RFC 9114 7.2.8, 11.2.1). */
static int h2_type(uint64_t t) { return t == 0x02 || t == 0x06 || t == 0x08 || t == 0x09; }

/* The longest control frame payload we gather (SETTINGS, GOAWAY,
 * PRIORITY_UPDATE ...); a longer one is H3_EXCESSIVE_LOAD. */
#define CTRL_FRAME_MAX 16384

/* The longest HEADERS payload we gather: twice what we take decoded (a
 * Huffman code may be longer than its text), at least 64 KiB; a longer
 * one is read past and its request answered 431. */
static uint64_t headers_max(const sws_h3sess_t *s)
{
    uint64_t m = s->conf.max_field_section * 2;
    return m < 65536 ? 65536 : m;
}

static int buf_add(uint8_t **b, size_t *len, size_t *cap, const uint8_t *p, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        while (c < *len + n)
            c *= 2;
        uint8_t *nb = realloc(*b, c);
        if (!nb)
            return -1;
        *b = nb;
        *cap = c;
    }
    if (n)
        memcpy(*b + *len, p, n);
    *len += n;
    return 0;
}

/* A frame header (type, length) from st->hd and p: the bytes of p it
 * took, and 1 in *done when it is whole. */
static size_t frame_hd(sws_h3st_t *st, const uint8_t *p, size_t n, int *done)
{
    size_t take = sizeof st->hd - st->hdlen < n ? sizeof st->hd - st->hdlen : n;
    memcpy(st->hd + st->hdlen, p, take);
    size_t have = st->hdlen + take;
    uint64_t t, len;
    size_t l1 = h3_get_varint(st->hd, have, &t);
    size_t l2 = l1 ? h3_get_varint(st->hd + l1, have - l1, &len) : 0;
    if (!l2) {
        st->hdlen = (uint8_t)have;
        *done = 0;
        return take;
    }
    size_t used = l1 + l2 - st->hdlen;
    st->hdlen = 0;
    st->ftype = t;
    st->flen = len;
    st->fgot = 0;
    st->in_frame = 1;
    *done = 1;
    return used;
}

/* ---- field sections ---- */

typedef struct {
    sws_h3sess_t *s;
    sws_h3st_t *st;
    int trailers;
    int malformed, failed;
} sec_t;

static int on_field(void *ctx, const sws_hpack_field_t *f)
{
    sec_t *c = ctx;
    sws_h3st_t *st = c->st;
    if (sws_reqcheck_field(&st->chk, f->name, f->nl, f->value, f->vl, c->trailers, 0) < 0) {
        c->malformed = 1;
        return 1;
    }
    if (c->trailers) /* read, checked, not kept */
        return 0;
    if (f->nl == 8 && memcmp(f->name, "priority", 8) == 0 && !st->pri_update) { /* RFC 9218 5 */
        int u = st->urgency, i = st->inc;
        if (sws_parse_priority((const char *)f->value, f->vl, &u, &i) > 0)
            h3st_set_priority(c->s, st, u, i);
    }
    if (c->s->cb->header(c->s->u, st->su, f->name, f->nl, f->value, f->vl) < 0) {
        c->failed = 1;
        return 1;
    }
    return 0;
}

/* The HEADERS frame in st->blk is whole. 1: done (or the stream failed);
 * 0: blocked, the input after it is held; negative: a connection error. */
static int section(sws_h3sess_t *s, sws_h3st_t *st, int fin_now)
{
    int trailers = st->phase == 1;
    if (!trailers && !st->su && !(st->su = s->cb->begin(s->u, st->id)))
        return h3_conn_error(s, H3_INTERNAL_ERROR);
    if (st->skip_hd) { /* too long to gather: answered 431 */
        st->skip_hd = 0;
        sws_qpack_dec_cancel(&s->dec, (uint64_t)st->id);
        if (trailers) {
            h3_stream_error(s, st, H3_MESSAGE_ERROR);
            return 1;
        }
        st->phase = 1;
        s->cb->too_big(s->u, st->su);
        s->cb->request(s->u, st->su, fin_now);
        st->fin_in = fin_now;
        return 1;
    }
    sec_t c = {s, st, trailers, 0, 0};
    int rc = sws_qpack_decode(&s->dec, (uint64_t)st->id, st->blk, st->blk_len,
                              s->conf.max_field_section, on_field, &c);
    if (rc == SWS_QPACK_BLOCKED) {
        if (!st->blocked_q) { /* RFC 9204 2.1.2: more than we announced is an error */
            if (s->n_blocked >= s->conf.qpack_blocked)
                return h3_conn_error(s, SWS_QPACK_DECOMPRESSION_FAILED);
            st->blocked_q = 1;
            s->n_blocked++;
            h3st_relist(s, st); /* unblock() finds it there */
        }
        return 0;
    }
    if (st->blocked_q) {
        st->blocked_q = 0;
        s->n_blocked--;
    }
    st->blk_len = 0;
    if (rc == SWS_QPACK_ERR)
        return h3_conn_error(s, SWS_QPACK_DECOMPRESSION_FAILED);
    if (rc == SWS_QPACK_NOMEM || c.failed || (rc < 0 && rc != SWS_QPACK_TOO_BIG))
        return h3_conn_error(s, H3_INTERNAL_ERROR);
    if (trailers) {
        st->phase = 2;
        if (c.malformed)
            h3_stream_error(s, st, H3_MESSAGE_ERROR);
        return 1;
    }
    st->phase = 1;
    if (rc == SWS_QPACK_TOO_BIG) {
        s->cb->too_big(s->u, st->su);
    } else if (c.malformed || !sws_reqcheck_pseudo_ok(&st->chk) ||
               (fin_now && st->chk.cl_known && st->chk.cl)) {
        h3_stream_error(s, st, H3_MESSAGE_ERROR); /* RFC 9114 4.1.2 */
        return 1;
    }
    s->cb->request(s->u, st->su, fin_now);
    st->fin_in = fin_now;
    return 1;
}

/* ---- request streams ---- */

static int hold(sws_h3st_t *st, const uint8_t *p, size_t n, int fin)
{
    st->held_fin |= fin;
    return buf_add(&st->held, &st->held_len, &st->held_cap, p, n);
}

/* A frame on a request stream begins: is it allowed (RFC 9114 4.1, 7.2)? */
static int req_frame(sws_h3sess_t *s, sws_h3st_t *st)
{
    switch (st->ftype) {
    case F_DATA:
        return st->phase == 1 ? 0 : h3_conn_error(s, H3_FRAME_UNEXPECTED);
    case F_HEADERS:
        if (st->phase == 2)
            return h3_conn_error(s, H3_FRAME_UNEXPECTED);
        st->blk_len = 0;
        st->skip_hd = st->flen > headers_max(s);
        return 0;
    case F_CANCEL_PUSH: case F_SETTINGS: case F_PUSH_PROMISE: case F_GOAWAY: case F_MAX_PUSH_ID:
        return h3_conn_error(s, H3_FRAME_UNEXPECTED);
    default:
        return h2_type(st->ftype) ? h3_conn_error(s, H3_FRAME_UNEXPECTED) : 0;
    }
}

/* Request stream bytes: the credit (bytes neither body nor held), or a
 * negative connection error. */
static int64_t req_in(sws_h3sess_t *s, sws_h3st_t *st, const uint8_t *p, size_t n, int fin)
{
    const uint8_t *end = p + n;
    int64_t credit = 0;
    if (st->blocked_q) {
        if (hold(st, p, n, fin) < 0)
            return h3_conn_error(s, H3_INTERNAL_ERROR);
        return 0;
    }
    while (p < end && !st->read_shut) {
        if (!st->in_frame) {
            int done;
            size_t used = frame_hd(st, p, (size_t)(end - p), &done);
            p += used;
            credit += (int64_t)used;
            if (!done)
                continue;
            int r = req_frame(s, st);
            if (r < 0)
                return r;
        }
        size_t k = st->flen - st->fgot < (uint64_t)(end - p) ? (size_t)(st->flen - st->fgot)
                                                              : (size_t)(end - p);
        if (st->ftype == F_DATA) {
            st->body_got += k;
            if (st->chk.cl_known && st->body_got > st->chk.cl) {
                h3_stream_error(s, st, H3_MESSAGE_ERROR); /* more than content-length */
                break;
            }
            if (k && s->cb->data(s->u, st->su, p, k) < 0)
                return h3_conn_error(s, H3_INTERNAL_ERROR);
        } else {
            if (st->ftype == F_HEADERS && !st->skip_hd &&
                buf_add(&st->blk, &st->blk_len, &st->blk_cap, p, k) < 0)
                return h3_conn_error(s, H3_INTERNAL_ERROR);
            credit += (int64_t)k;
        }
        p += k;
        st->fgot += k;
        if (st->fgot < st->flen)
            continue;
        st->in_frame = 0;
        if (st->ftype != F_HEADERS)
            continue;
        int r = section(s, st, fin && p == end);
        if (r < 0)
            return r;
        if (r == 0) { /* blocked: what follows waits with it */
            if (hold(st, p, (size_t)(end - p), fin) < 0)
                return h3_conn_error(s, H3_INTERNAL_ERROR);
            return credit;
        }
    }
    if (st->read_shut)
        return credit + (int64_t)(end - p);
    if (fin && !st->fin_in) {
        if (st->in_frame || st->hdlen)
            return h3_conn_error(s, H3_FRAME_ERROR); /* RFC 9114 7.1: a truncated frame */
        st->fin_in = 1;
        if (st->phase == 0)
            h3_stream_error(s, st, H3_REQUEST_INCOMPLETE);
        else if (st->chk.cl_known && st->body_got != st->chk.cl)
            h3_stream_error(s, st, H3_MESSAGE_ERROR);
        else
            s->cb->end_stream(s->u, st->su);
    }
    return credit;
}

/* QPACK inserts came: sections that waited for them are read, and the
 * input held behind them. 0, or a negative connection error. */
static int unblock(sws_h3sess_t *s)
{
    for (sws_h3st_t *st = s->reqs; st && s->n_blocked; st = st->next) {
        if (!st->blocked_q)
            continue;
        uint8_t *held = st->held;
        size_t n = st->held_len;
        int fin = st->held_fin;
        int r = section(s, st, fin && !n);
        if (r < 0)
            return r;
        if (r == 0)
            continue;
        st->held = NULL;
        st->held_len = st->held_cap = 0;
        st->held_fin = 0;
        static const uint8_t none[1];
        int64_t credit = req_in(s, st, held ? held : none, n, fin && n);
        free(held);
        if (credit < 0)
            return (int)credit;
        if (credit)
            s->cb->consume(s->u, st->id, (size_t)credit);
    }
    return 0;
}

/* ---- the client's control stream ---- */

static int settings(sws_h3sess_t *s, const uint8_t *p, size_t n)
{
    uint64_t seen[16];
    size_t nseen = 0;
    while (n) {
        uint64_t id, v;
        size_t a = h3_get_varint(p, n, &id), b = a ? h3_get_varint(p + a, n - a, &v) : 0;
        if (!b)
            return h3_conn_error(s, H3_FRAME_ERROR);
        if (id >= 0x02 && id <= 0x05) /* HTTP/2's settings (RFC 9114 7.2.4.1) */
            return h3_conn_error(s, H3_SETTINGS_ERROR);
        for (size_t i = 0; i < nseen; i++)
            if (seen[i] == id)
                return h3_conn_error(s, H3_SETTINGS_ERROR);
        if (nseen < 16)
            seen[nseen++] = id;
        p += a + b;
        n -= a + b;
    }
    s->settings_in = 1;
    return 0;
}

/* A new request stream takes the PRIORITY_UPDATE that came before it:
 * its request, sent first, can come later, on a stream of its own, and
 * the update is the newer signal (RFC 9218 7: it overrides the Priority
 * field). */
static void early_take(sws_h3sess_t *s, sws_h3st_t *st)
{
    int u = 3, i = 0;
    int got = sws_pri_early_take(&s->early_pri, st->id, &u, &i);
    if (got < 0)
        return;
    h3st_set_priority(s, st, got & SWS_PRI_U ? u : 3, got & SWS_PRI_I ? i != 0 : 0);
    st->pri_update = 1;
}

static int priority_update(sws_h3sess_t *s, const uint8_t *p, size_t n)
{
    uint64_t id;
    size_t a = h3_get_varint(p, n, &id);
    if (!a)
        return h3_conn_error(s, H3_FRAME_ERROR);
    if ((id & 3) != 0) /* RFC 9218 7.2: not a request stream */
        return h3_conn_error(s, H3_ID_ERROR);
    if (s->conf.max_requests && id / 4 >= s->conf.max_requests + s->req_closed)
        return h3_conn_error(s, H3_ID_ERROR); /* ... or one the client cannot open yet */
    sws_h3st_t *st = h3st_find(s, (int64_t)id);
    int u = st ? st->urgency : 3, i = st ? st->inc : 0;
    int got = sws_parse_priority((const char *)p + a, n - a, &u, &i);
    if (got < 0)
        return 0; /* one that cannot be read is ignored (RFC 9218 7) */
    if (!st) {
        /* not open yet, or closed and forgotten (whose entry no stream
         * takes: stream IDs are not used twice) */
        sws_pri_early_keep(&s->early_pri, (int64_t)id, got, u, i);
        return 0;
    }
    if (got > 0)
        h3st_set_priority(s, st, u, i);
    return 0;
}

static int ctrl_frame_end(sws_h3sess_t *s, sws_h3st_t *st)
{
    const uint8_t *p = st->blk;
    size_t n = st->blk_len;
    uint64_t v;
    st->blk_len = 0;
    switch (st->ftype) {
    case F_SETTINGS:
        return settings(s, p, n);
    case F_GOAWAY: case F_MAX_PUSH_ID: case F_CANCEL_PUSH:
        return h3_get_varint(p, n, &v) == n && n ? 0 : h3_conn_error(s, H3_FRAME_ERROR);
    case F_PRIORITY_UPDATE_REQ:
        return priority_update(s, p, n);
    }
    return 0;
}

static int ctrl_in(sws_h3sess_t *s, sws_h3st_t *st, const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    while (p < end) {
        if (!st->in_frame) {
            int done;
            p += frame_hd(st, p, (size_t)(end - p), &done);
            if (!done)
                continue;
            uint64_t t = st->ftype;
            if (!s->settings_in && t != F_SETTINGS)
                return h3_conn_error(s, H3_MISSING_SETTINGS);
            if ((t == F_SETTINGS && s->settings_in) || t == F_DATA || t == F_HEADERS ||
                t == F_PUSH_PROMISE || h2_type(t))
                return h3_conn_error(s, H3_FRAME_UNEXPECTED);
            int kept = t == F_SETTINGS || t == F_GOAWAY || t == F_MAX_PUSH_ID ||
                       t == F_CANCEL_PUSH || t == F_PRIORITY_UPDATE_REQ;
            if (kept && st->flen > CTRL_FRAME_MAX)
                return h3_conn_error(s, H3_EXCESSIVE_LOAD);
            st->blk_len = 0;
        }
        size_t k = st->flen - st->fgot < (uint64_t)(end - p) ? (size_t)(st->flen - st->fgot)
                                                              : (size_t)(end - p);
        uint64_t t = st->ftype;
        int kept = t == F_SETTINGS || t == F_GOAWAY || t == F_MAX_PUSH_ID || t == F_CANCEL_PUSH ||
                   t == F_PRIORITY_UPDATE_REQ;
        if (kept && buf_add(&st->blk, &st->blk_len, &st->blk_cap, p, k) < 0)
            return h3_conn_error(s, H3_INTERNAL_ERROR);
        p += k;
        st->fgot += k;
        if (st->fgot == st->flen) {
            st->in_frame = 0;
            int r = kept ? ctrl_frame_end(s, st) : 0;
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* ---- streams by kind ---- */

/* A client's unidirectional stream tells its type first (RFC 9114 6.2). */
static int uni_type(sws_h3sess_t *s, sws_h3st_t *st, const uint8_t **pp, const uint8_t *end)
{
    if (*pp == end)
        return 0; /* closed (or empty) before its type: tolerated (RFC 9114 6.2) */
    size_t take = sizeof st->hd - st->hdlen < (size_t)(end - *pp) ? sizeof st->hd - st->hdlen
                                                                  : (size_t)(end - *pp);
    memcpy(st->hd + st->hdlen, *pp, take);
    uint64_t t;
    size_t l = h3_get_varint(st->hd, st->hdlen + take, &t);
    if (!l) {
        st->hdlen = (uint8_t)(st->hdlen + take);
        *pp += take;
        return 0;
    }
    *pp += l - st->hdlen;
    st->hdlen = 0;
    int64_t *mine = t == U_CONTROL ? &s->peer_ctrl : t == U_QENC ? &s->peer_qenc
                  : t == U_QDEC ? &s->peer_qdec : NULL;
    if (t == U_PUSH || (mine && *mine >= 0))
        return h3_conn_error(s, H3_STREAM_CREATION_ERROR); /* a push, or a second one */
    if (!mine) { /* unknown or reserved: read past (RFC 9114 6.2.3) */
        st->kind = K_IGNORED;
        st->read_shut = 1;
        s->cb->stop_sending(s->u, st->id, H3_STREAM_CREATION_ERROR);
        return 0;
    }
    *mine = st->id;
    st->kind = t == U_CONTROL ? K_CONTROL : t == U_QENC ? K_QENC : K_QDEC;
    return 0;
}

int64_t sws_h3sess_read(sws_h3sess_t *s, int64_t id, const uint8_t *p, size_t n, int fin)
{
    static const uint8_t none[1];
    if (s->fatal)
        return -s->fatal;
    if (!p) /* a STREAM frame with only its FIN */
        p = none;
    sws_h3st_t *st = h3st_find(s, id);
    if (!st) {
        if (id & 1) /* ours: the client sends nothing on them */
            return (int64_t)n;
        if (!(id & 2) && id >= s->goaway_id) { /* after our GOAWAY (RFC 9114 5.2) */
            if (!(st = h3st_new(s, id, K_IGNORED)))
                return h3_conn_error(s, H3_INTERNAL_ERROR);
            h3_stream_error(s, st, H3_REQUEST_REJECTED);
            return (int64_t)n;
        }
        if (!(st = h3st_new(s, id, id & 2 ? K_UNI_NEW : K_REQUEST)))
            return h3_conn_error(s, H3_INTERNAL_ERROR);
        if (s->early_pri.live && !(id & 2))
            early_take(s, st);
        if (!(id & 2) && id > s->max_bidi)
            s->max_bidi = id;
    }
    if (st->read_shut)
        return (int64_t)n;
    const uint8_t *end = p + n;
    if (st->kind == K_REQUEST)
        return req_in(s, st, p, n, fin);
    int r = 0;
    if (st->kind == K_UNI_NEW && (r = uni_type(s, st, &p, end)) < 0)
        return r;
    switch (p < end ? st->kind : K_IGNORED) {
    case K_CONTROL:
        r = ctrl_in(s, st, p, (size_t)(end - p));
        break;
    case K_QENC:
        r = sws_qpack_dec_encoder(&s->dec, p, (size_t)(end - p));
        r = r == SWS_QPACK_ENC_STREAM ? h3_conn_error(s, SWS_QPACK_ENCODER_STREAM_ERROR)
          : r < 0 ? h3_conn_error(s, H3_INTERNAL_ERROR) : unblock(s);
        break;
    case K_QDEC:
        if (sws_qpack_enc_decoder(&s->enc, p, (size_t)(end - p)) < 0)
            r = h3_conn_error(s, SWS_QPACK_DECODER_STREAM_ERROR);
        break;
    }
    if (r < 0)
        return r;
    if (fin && (st->kind == K_CONTROL || st->kind == K_QENC || st->kind == K_QDEC))
        return h3_conn_error(s, H3_CLOSED_CRITICAL_STREAM);
    return (int64_t)n;
}

void sws_h3sess_shutdown_read(sws_h3sess_t *s, int64_t id)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (!st)
        return;
    st->read_shut = 1;
    if (st->blocked_q) {
        st->blocked_q = 0;
        s->n_blocked--;
        sws_qpack_dec_cancel(&s->dec, (uint64_t)id);
    }
}
