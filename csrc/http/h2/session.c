/* The HTTP/2 session's streams, flow control and output (contract in
 * session.h); the input side is session_recv.c. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "http/h2/session.h"

/* What happens once a part of the control buffer is out. */
enum { EV_END = 1, EV_RST = 2, EV_GOAWAY = 3 };

/* ---- streams ------------------------------------------------------------------------------ */

static uint32_t slot(const sws_h2sess_t *s, int32_t id)
{
    return ((uint32_t)id >> 1) & s->tab_mask; /* client ids are odd: consecutive ones, consecutive slots */
}

sws_h2st_t *sws_h2sess_stream(const sws_h2sess_t *s, int32_t id)
{
    for (sws_h2st_t *st = s->tab[slot(s, id)]; st; st = st->hnext)
        if (st->id == id)
            return st;
    return NULL;
}

#define ST_SPARE 16 /* closed stream records a session keeps for its next streams */

sws_h2st_t *h2st_open(sws_h2sess_t *s, int32_t id)
{
    sws_h2st_t *st = s->st_spare;
    if (st) {
        s->st_spare = st->next;
        s->n_st_spare--;
        memset(st, 0, sizeof *st);
    } else if (!(st = calloc(1, sizeof *st))) {
        return NULL;
    }
    st->id = id;
    st->state = ST_OPEN;
    st->urgency = 3;
    st->seq = ++s->seq;
    st->send_win = s->peer_window;
    st->recv_avail = (int32_t)s->conf.stream_window;
    if (!s->settings_acked && s->conf.stream_window < H2_DEFAULT_WINDOW) {
        /* the client may still count on the default window (RFC 9113
         * §6.9.2): ours is in force from its ACK (on_settings) */
        st->recv_avail = H2_DEFAULT_WINDOW;
        st->pre_ack = 1;
    }
    uint32_t k = slot(s, id);
    st->hnext = s->tab[k];
    s->tab[k] = st;
    st->next = s->all;
    if (s->all)
        s->all->prev = st;
    s->all = st;
    s->n_open++;
    return st;
}

/* A closed stream's id and how it ended, among the last SWS_H2_CLOSED_KEEP. */
static void remember(sws_h2sess_t *s, int32_t id, int how)
{
    uint32_t k = s->n_closed++ % SWS_H2_CLOSED_KEEP;
    s->closed[k].id = id;
    s->closed[k].how = (uint8_t)how;
}

/* The stream is done: forgotten but for its id and how it ended, and its
 * owner told (the last thing done with st). */
void h2st_close(sws_h2sess_t *s, sws_h2st_t *st, uint32_t code, int how)
{
    sws_h2st_t **pp = &s->tab[slot(s, st->id)];
    while (*pp != st)
        pp = &(*pp)->hnext;
    *pp = st->hnext;
    if (st->prev)
        st->prev->next = st->next;
    else
        s->all = st->next;
    if (st->next)
        st->next->prev = st->prev;
    s->n_open--;
    remember(s, st->id, how);
    void *su = st->su;
    int32_t id = st->id;
    if (s->n_st_spare < ST_SPARE) {
        st->next = s->st_spare;
        s->st_spare = st;
        s->n_st_spare++;
    } else {
        free(st);
    }
    if (s->cb->close)
        s->cb->close(s->u, su, id, code);
}

int h2_closed_how(const sws_h2sess_t *s, int32_t id)
{
    uint32_t n = s->n_closed < SWS_H2_CLOSED_KEEP ? s->n_closed : SWS_H2_CLOSED_KEEP;
    for (uint32_t i = 0; i < n; i++)
        if (s->closed[i].id == id)
            return s->closed[i].how;
    return CLOSED_NONE;
}

int32_t sws_h2sess_last_stream(const sws_h2sess_t *s) { return s->last_proc; }

void sws_h2sess_set_user(sws_h2sess_t *s, int32_t id, void *su)
{
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (st)
        st->su = su;
}


/* ---- the control buffer --------------------------------------------------------------------- */

static int ctl_room(sws_h2sess_t *s, size_t n)
{
    if (s->ctl_off && s->ctl_off == s->ctl_len) /* what was handed out is written */
        s->ctl_off = s->ctl_len = 0;
    if (s->ctl_len + n <= s->ctl_cap)
        return 0;
    size_t cap = s->ctl_cap ? s->ctl_cap * 2 : 1024;
    while (cap < s->ctl_len + n)
        cap *= 2;
    uint8_t *nb = realloc(s->ctl, cap);
    if (!nb)
        return -1;
    s->ctl = nb;
    s->ctl_cap = cap;
    return 0;
}

int h2_frame_out(sws_h2sess_t *s, uint8_t type, uint8_t flags, int32_t id, const void *p, size_t n)
{
    if (ctl_room(s, 9 + n) < 0)
        return -1;
    h2_put_hd(s->ctl + s->ctl_len, (uint32_t)n, type, flags, id);
    if (n)
        memcpy(s->ctl + s->ctl_len + 9, p, n);
    s->ctl_len += 9 + n;
    return 0;
}

/* kind happens to stream id once the control buffer up to here is out. */
static int ev_add(sws_h2sess_t *s, int kind, int32_t id, uint32_t code)
{
    if (s->n_ev == s->ev_cap) {
        size_t cap = s->ev_cap ? s->ev_cap * 2 : 8;
        struct h2ev *nb = realloc(s->ev, cap * sizeof *nb);
        if (!nb)
            return -1;
        s->ev = nb;
        s->ev_cap = cap;
    }
    s->ev[s->n_ev++] = (struct h2ev){id, (uint8_t)kind, code};
    return 0;
}

int h2_window_update(sws_h2sess_t *s, int32_t id, uint32_t n)
{
    uint8_t b[4] = {(uint8_t)(n >> 24 & 0x7f), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    return h2_frame_out(s, H2_WINDOW_UPDATE, 0, id, b, 4);
}

/* ---- the session ------------------------------------------------------------------------------ */

int sws_h2sess_init(sws_h2sess_t *s, const sws_h2sess_conf_t *conf, const sws_h2cb_t *cb, void *u)
{
    memset(s, 0, sizeof *s);
    s->cb = cb;
    s->u = u;
    s->conf = *conf;
    uint32_t n = 16;
    while (n < conf->max_streams * 2 && n < 65536)
        n *= 2;
    s->tab = calloc(n, sizeof *s->tab);
    if (!s->tab)
        return -1;
    s->tab_mask = n - 1;
    s->send_win = H2_DEFAULT_WINDOW;
    s->recv_avail = H2_DEFAULT_WINDOW;
    s->recv_window = H2_DEFAULT_WINDOW;
    s->peer_window = H2_DEFAULT_WINDOW;
    s->peer_frame = H2_FRAME_MAX;
    s->goaway_last = H2_WINDOW_MAX;
    s->hq_tail = &s->hq;
    /* Until the client acknowledged our SETTINGS, its encoder may use the
     * protocol's 4096 bytes; a smaller table of ours is in force from the
     * ACK on (on_settings) */
    uint32_t first = conf->header_table > SWS_HPACK_DEFAULT_TABLE ? conf->header_table
                                                                  : SWS_HPACK_DEFAULT_TABLE;
    if (sws_hpack_dec_init(&s->dec, first) < 0) {
        free(s->tab);
        s->tab = NULL;
        return -1;
    }
    if (sws_hpack_enc_init_cap(&s->enc, conf->header_table) < 0) {
        sws_hpack_dec_free(&s->dec);
        free(s->tab);
        s->tab = NULL;
        return -1;
    }
    return 0;
}

/* A header block's memory back to the pool, or freed. */
static void hq_put(sws_h2sess_t *s, struct h2hq *q)
{
    sws_h2pool_t *pool = s->conf.pool;
    if (pool && pool->n < pool->max && q->cap == SWS_H2_HQ_MIN) {
        q->next = pool->spare;
        pool->spare = q;
        pool->n++;
    } else {
        free(q);
    }
}

void sws_h2pool_free(sws_h2pool_t *p)
{
    while (p->spare) {
        struct h2hq *q = p->spare;
        p->spare = q->next;
        free(q);
    }
    p->n = 0;
}

void sws_h2sess_free(sws_h2sess_t *s)
{
    while (s->all) { /* no callbacks: the owner is going too */
        sws_h2st_t *st = s->all;
        s->all = st->next;
        free(st);
    }
    while (s->hq) {
        struct h2hq *q = s->hq;
        s->hq = q->next;
        hq_put(s, q);
    }
    while (s->st_spare) {
        sws_h2st_t *st = s->st_spare;
        s->st_spare = st->next;
        free(st);
    }
    free(s->tab);
    free(s->blk);
    free(s->ctl);
    free(s->ev);
    free(s->hbuf);
    sws_hpack_dec_free(&s->dec);
    sws_hpack_enc_free(&s->enc);
    s->tab = NULL;
}

int sws_h2sess_settings(sws_h2sess_t *s)
{
    const sws_h2sess_conf_t *c = &s->conf;
    struct { uint16_t id; uint32_t v; } set[] = {
        {H2_SET_MAX_CONCURRENT_STREAMS, c->max_streams},
        {H2_SET_INITIAL_WINDOW_SIZE, c->stream_window},
        {H2_SET_MAX_HEADER_LIST_SIZE, c->max_header_list},
        {H2_SET_HEADER_TABLE_SIZE, c->header_table},
        {H2_SET_NO_RFC7540_PRIORITIES, 1},
        {H2_SET_ENABLE_CONNECT_PROTOCOL, 1}, /* RFC 8441: WebSocket to proxy routes */
    };
    uint8_t b[sizeof set / sizeof set[0] * 6], *p = b;
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++, p += 6) {
        p[0] = (uint8_t)(set[i].id >> 8);
        p[1] = (uint8_t)set[i].id;
        p[2] = (uint8_t)(set[i].v >> 24);
        p[3] = (uint8_t)(set[i].v >> 16);
        p[4] = (uint8_t)(set[i].v >> 8);
        p[5] = (uint8_t)set[i].v;
    }
    s->connect_proto = 1;
    if (h2_frame_out(s, H2_SETTINGS, 0, 0, b, sizeof b) < 0)
        return -1;
    if (c->conn_window > H2_DEFAULT_WINDOW) {
        if (h2_window_update(s, 0, c->conn_window - H2_DEFAULT_WINDOW) < 0)
            return -1;
        s->recv_avail = (int32_t)c->conn_window;
        s->recv_window = c->conn_window;
    }
    return 0;
}

/* ---- errors and GOAWAY ---------------------------------------------------------------------- */

static void goaway_out(sws_h2sess_t *s, int32_t last, uint32_t code)
{
    uint8_t b[8] = {(uint8_t)(last >> 24 & 0x7f), (uint8_t)(last >> 16), (uint8_t)(last >> 8),
                    (uint8_t)last, (uint8_t)(code >> 24), (uint8_t)(code >> 16),
                    (uint8_t)(code >> 8), (uint8_t)code};
    if (h2_frame_out(s, H2_GOAWAY, 0, 0, b, 8) == 0)
        ev_add(s, EV_GOAWAY, last, code);
}

void sws_h2sess_goaway(sws_h2sess_t *s, uint32_t code)
{
    if (s->fatal || (s->goaway_sent && code == H2_NO_ERROR))
        return;
    s->goaway_sent = 1;
    s->goaway_last = s->last_proc;
    s->goaway_code = code;
    if (code != H2_NO_ERROR)
        s->fatal = 1; /* nothing more is read; the connection ends once it is out */
    goaway_out(s, s->last_proc, code);
}

int sws_h2sess_goaway_notice(sws_h2sess_t *s)
{
    if (s->fatal || s->goaway_sent)
        return -1;
    goaway_out(s, H2_WINDOW_MAX, H2_NO_ERROR);
    return 0;
}

void h2_conn_error(sws_h2sess_t *s, uint32_t code, const char *what)
{
    if (s->fatal)
        return;
    if (s->cb->error)
        s->cb->error(s->u, code, what);
    sws_h2sess_goaway(s, code);
}

void h2_stream_error(sws_h2sess_t *s, sws_h2st_t *st, int32_t id, uint32_t code)
{
    if (st) {
        sws_h2sess_rst(s, st->id, code);
        return;
    }
    /* a stream we keep nothing of (refused, or closed already): what
     * crossed this RST_STREAM is ignored from now on */
    uint8_t b[4] = {(uint8_t)(code >> 24), (uint8_t)(code >> 16), (uint8_t)(code >> 8), (uint8_t)code};
    if (h2_frame_out(s, H2_RST_STREAM, 0, id, b, 4) == 0)
        remember(s, id, CLOSED_BY_US);
}

/* ---- submitting --------------------------------------------------------------------------- */

int sws_h2sess_rst(sws_h2sess_t *s, int32_t id, uint32_t code)
{
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (!st || st->rst_queued)
        return -1;
    uint8_t b[4] = {(uint8_t)(code >> 24), (uint8_t)(code >> 16), (uint8_t)(code >> 8), (uint8_t)code};
    if (h2_frame_out(s, H2_RST_STREAM, 0, id, b, 4) < 0 || ev_add(s, EV_RST, id, code) < 0)
        return -1;
    st->rst_queued = 1;
    st->body = 0;
    return 0;
}

int sws_h2sess_ping(sws_h2sess_t *s, const uint8_t opaque[8])
{
    return h2_frame_out(s, H2_PING, 0, 0, opaque, 8);
}

/* A header block as HEADERS and CONTINUATION frames of at most the
 * client's frame size (ours at most). */
static int block_out(sws_h2sess_t *s, int32_t id, const sws_h2field_t *f, size_t n, uint8_t flags)
{
    size_t bound = sws_hpack_encode_bound(f, n);
    if (bound > s->hbuf_cap) {
        uint8_t *nb = realloc(s->hbuf, bound);
        if (!nb)
            return -1;
        s->hbuf = nb;
        s->hbuf_cap = bound;
    }
    size_t max = s->peer_frame < H2_FRAME_MAX ? s->peer_frame : H2_FRAME_MAX;
    if (ctl_room(s, bound + 9 * (bound / max + 1)) < 0)
        return -1;
    size_t len = sws_hpack_encode(&s->enc, f, n, s->hbuf);
    size_t at = 0;
    uint8_t type = H2_HEADERS;
    do {
        size_t k = len - at < max ? len - at : max;
        uint8_t fl = (uint8_t)(type == H2_HEADERS ? flags : 0);
        if (at + k == len)
            fl |= H2_F_END_HEADERS;
        h2_frame_out(s, type, fl, id, s->hbuf + at, k); /* room made above */
        at += k;
        type = H2_CONTINUATION;
    } while (at < len);
    return 0;
}

/* A header block to encode when it goes out (hq_encode). */
static int hq_add(sws_h2sess_t *s, int32_t id, const sws_h2field_t *f, size_t n, int copy,
                  uint8_t flags)
{
    size_t bytes = 0;
    if (copy)
        for (size_t i = 0; i < n; i++)
            bytes += f[i].nl + f[i].vl;
    size_t need = n * sizeof *f + bytes;
    sws_h2pool_t *pool = s->conf.pool;
    struct h2hq *q = pool ? pool->spare : NULL;
    if (q && need <= SWS_H2_HQ_MIN) {
        pool->spare = q->next;
        pool->n--;
    } else {
        size_t cap = pool && need < SWS_H2_HQ_MIN ? SWS_H2_HQ_MIN : need;
        q = malloc(sizeof *q + cap);
        if (!q)
            return -1;
        q->cap = cap;
    }
    q->next = NULL;
    q->id = id;
    q->flags = flags;
    q->n = n;
    memcpy(q->f, f, n * sizeof *f);
    if (copy) {
        uint8_t *p = (uint8_t *)(q->f + n);
        for (size_t i = 0; i < n; i++) {
            memcpy(p, f[i].name, f[i].nl);
            q->f[i].name = p;
            p += f[i].nl;
            memcpy(p, f[i].value, f[i].vl);
            q->f[i].value = p;
            p += f[i].vl;
        }
    }
    *s->hq_tail = q;
    s->hq_tail = &q->next;
    return 0;
}

/* The header blocks waiting, encoded into the control buffer in order;
 * those of streams reset meanwhile are dropped unread. */
static void hq_encode(sws_h2sess_t *s)
{
    while (s->hq) {
        struct h2hq *q = s->hq;
        s->hq = q->next;
        sws_h2st_t *st = sws_h2sess_stream(s, q->id);
        if (st && !st->rst_queued && !s->fatal) {
            if (block_out(s, q->id, q->f, q->n, q->flags) < 0 ||
                ((q->flags & H2_F_END_STREAM) && ev_add(s, EV_END, q->id, 0) < 0))
                h2_conn_error(s, H2_INTERNAL_ERROR, "out of memory for a header block");
        }
        hq_put(s, q);
    }
    s->hq_tail = &s->hq;
}

int sws_h2sess_headers(sws_h2sess_t *s, int32_t id, const sws_h2field_t *f, size_t n, int flags)
{
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (!st || st->rst_queued || st->end_queued || st->final_sent || s->fatal)
        return -1;
    int final = flags & SWS_H2H_FINAL, body = final && (flags & SWS_H2H_BODY);
    int end = final && !body;
    if (hq_add(s, id, f, n, flags & SWS_H2H_COPY, end ? H2_F_END_STREAM : 0) < 0)
        return -1;
    if (final) {
        st->final_sent = 1;
        st->body = (unsigned)body;
        st->end_queued = (unsigned)end;
    }
    return 0;
}

int sws_h2sess_trailers(sws_h2sess_t *s, int32_t id, const sws_h2field_t *f, size_t n)
{
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (!st || st->rst_queued || s->fatal)
        return -1;
    if (hq_add(s, id, f, n, 1, H2_F_END_STREAM) < 0)
        return -1;
    st->end_queued = 1;
    return 0;
}

void sws_h2sess_resume(sws_h2sess_t *s, int32_t id)
{
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (st)
        st->deferred = 0;
}

void sws_h2sess_priority(sws_h2sess_t *s, int32_t id, int urgency, int incremental)
{
    sws_h2st_t *st = sws_h2sess_stream(s, id);
    if (!st)
        return;
    st->urgency = (uint8_t)(urgency < 0 ? 0 : urgency > 7 ? 7 : urgency);
    st->incremental = incremental != 0;
}

/* ---- flow control, receiving ---------------------------------------------------------------- */

void sws_h2sess_consume(sws_h2sess_t *s, int32_t id, size_t n)
{
    if (!n || s->fatal)
        return;
    s->recv_unacked += (uint32_t)n;
    if (s->recv_unacked >= s->recv_window / 2 && h2_window_update(s, 0, s->recv_unacked) == 0) {
        s->recv_avail += (int32_t)s->recv_unacked;
        s->recv_unacked = 0;
    }
    sws_h2st_t *st = id ? sws_h2sess_stream(s, id) : NULL;
    if (!st || st->state == ST_HALF_REMOTE || st->rst_queued)
        return; /* the client sends no more on it */
    st->recv_unacked += (uint32_t)n;
    if (st->recv_unacked >= s->conf.stream_window / 2 &&
        h2_window_update(s, id, st->recv_unacked) == 0) {
        st->recv_avail += (int32_t)st->recv_unacked;
        st->recv_unacked = 0;
    }
}

int32_t sws_h2sess_recv_window(const sws_h2sess_t *s, int32_t id)
{
    if (!id)
        return s->recv_avail;
    const sws_h2st_t *st = sws_h2sess_stream(s, id);
    return st ? st->recv_avail : 0;
}

/* ---- output ------------------------------------------------------------------------------------ */

/* Our END_STREAM on st went out. */
static void sent_end(sws_h2sess_t *s, sws_h2st_t *st)
{
    st->end_queued = 1;
    st->body = 0;
    if (s->cb->sent_end)
        s->cb->sent_end(s->u, st->su); /* may queue RST_STREAM NO_ERROR (an unread upload) */
    if (st->state == ST_HALF_REMOTE)
        h2st_close(s, st, H2_NO_ERROR, CLOSED_BOTH);
    else
        st->state = ST_HALF_LOCAL;
}

static void run_events(sws_h2sess_t *s)
{
    for (size_t i = 0; i < s->n_ev; i++) { /* callbacks may add more: n_ev is read again */
        struct h2ev ev = s->ev[i];
        sws_h2st_t *st = ev.id ? sws_h2sess_stream(s, ev.id) : NULL;
        switch (ev.kind) {
        case EV_END:
            if (st && !st->rst_queued)
                sent_end(s, st);
            break;
        case EV_RST:
            if (st)
                h2st_close(s, st, ev.code, CLOSED_BY_US);
            break;
        case EV_GOAWAY:
            if (s->fatal)
                s->goaway_out = 1;
            break;
        }
    }
    s->n_ev = 0;
}

/* The stream whose DATA goes next: the most urgent (RFC 9218 §4), and
 * within an urgency the lowest order (a non-incremental stream keeps its
 * place until its body is out; an incremental one goes behind after each
 * frame). Only streams with window to send in. */
static sws_h2st_t *pick(const sws_h2sess_t *s)
{
    sws_h2st_t *best = NULL;
    if (s->send_win <= 0)
        return NULL;
    for (sws_h2st_t *st = s->all; st; st = st->next) {
        if (!st->body || st->deferred || st->send_win <= 0)
            continue;
        if (!best || st->urgency < best->urgency ||
            (st->urgency == best->urgency && st->seq < best->seq))
            best = st;
    }
    return best;
}

int sws_h2sess_send(sws_h2sess_t *s, const uint8_t **p, size_t *n)
{
    *n = 0;
    if (s->ctl_off && s->ctl_off == s->ctl_len)
        s->ctl_off = s->ctl_len = 0;
    if (s->hq)
        hq_encode(s);
    if (s->ctl_len > s->ctl_off) {
        /* Every frame serialized so far goes now: its stream changes apply
         * (callbacks may serialize more, which goes with it). */
        s->acks = 0;
        run_events(s);
        *p = s->ctl + s->ctl_off;
        *n = s->ctl_len - s->ctl_off;
        s->ctl_off = s->ctl_len;
        return 1;
    }
    if (s->goaway_out)
        return 0;
    for (;;) {
        sws_h2st_t *st = pick(s);
        if (!st)
            return 0;
        int64_t max = st->send_win < s->send_win ? st->send_win : s->send_win;
        if (max > H2_FRAME_MAX)
            max = H2_FRAME_MAX;
        if (max > s->peer_frame)
            max = s->peer_frame;
        int flags = 0;
        ssize_t k = s->cb->data_read(s->u, st->su, (size_t)max, &flags);
        if (k == SWS_H2D_DEFERRED) {
            st->deferred = 1;
            continue;
        }
        uint8_t hd[9];
        int end = (flags & SWS_H2D_EOF) && !(flags & SWS_H2D_TRAILERS);
        h2_put_hd(hd, (uint32_t)k, H2_DATA, end ? H2_F_END_STREAM : 0, st->id);
        int rc = s->cb->data_send(s->u, st->su, hd, (size_t)k);
        if (rc == SWS_H2D_BLOCKED)
            return 2;
        if (rc == SWS_H2D_FAIL) {
            sws_h2sess_rst(s, st->id, H2_INTERNAL_ERROR);
            return sws_h2sess_send(s, p, n);
        }
        st->send_win -= k;
        s->send_win -= k;
        if (st->incremental)
            st->seq = ++s->seq;
        if (flags & SWS_H2D_EOF) {
            st->body = 0;
            if (end)
                sent_end(s, st); /* st may be gone */
            else if (s->cb->trailers)
                s->cb->trailers(s->u, st->su, st->id); /* their HEADERS end the stream */
        }
        return 1;
    }
}

int sws_h2sess_want_read(const sws_h2sess_t *s)
{
    if (s->fatal)
        return 0;
    return !(s->peer_goaway && !s->n_open && !s->blk_id);
}

int sws_h2sess_want_write(const sws_h2sess_t *s)
{
    if (s->ctl_len > s->ctl_off || s->hq)
        return 1;
    if (s->goaway_out)
        return 0;
    return pick(s) != NULL;
}
