/* The HTTP/3 session's streams and output: the stream table, our
 * unidirectional streams, responses as runs of frames and body, RFC
 * 9218's order, what QUIC took and what the peer acknowledged, GOAWAY.
 * Input is h3sess_recv.c's. Contract in h3sess.h. */
#include "http/h3/h3sess_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- the stream table ---- */

static inline uint32_t id_hash(int64_t id) { return (uint32_t)((uint64_t)id >> 2) * 0x9e3779b1u; }

sws_h3st_t *h3st_find(const sws_h3sess_t *s, int64_t id)
{
    for (sws_h3st_t *st = s->tab[id_hash(id) & s->tab_mask]; st; st = st->hnext)
        if (st->id == id)
            return st;
    return NULL;
}

static int tab_grow(sws_h3sess_t *s)
{
    uint32_t n = (s->tab_mask + 1) * 2;
    sws_h3st_t **t = calloc(n, sizeof *t);
    if (!t)
        return -1;
    for (uint32_t i = 0; i <= s->tab_mask; i++)
        for (sws_h3st_t *st = s->tab[i], *nx; st; st = nx) {
            nx = st->hnext;
            st->hnext = t[id_hash(st->id) & (n - 1)];
            t[id_hash(st->id) & (n - 1)] = st;
        }
    free(s->tab);
    s->tab = t;
    s->tab_mask = n - 1;
    return 0;
}

/* ---- the thread's spares ---- */

void sws_h3pool_free(sws_h3pool_t *p)
{
    for (h3out_t *o = p->runs, *nx; o; o = nx) {
        nx = o->next;
        free(o);
    }
    for (sws_h3st_t *st = p->sts, *nx; st; st = nx) {
        nx = st->hnext;
        free(st->blk);
        free(st);
    }
    free(p->memo);
    memset(p, 0, sizeof *p);
}

#define ST_KEEP_BLK 1024 /* a spare stream keeps a HEADERS buffer this big */

static sws_h3st_t *st_alloc(sws_h3sess_t *s)
{
    sws_h3pool_t *p = s->conf.pool;
    sws_h3st_t *st = p ? p->sts : NULL;
    if (!st)
        return calloc(1, sizeof *st);
    p->sts = st->hnext;
    p->n_sts--;
    uint8_t *blk = st->blk;
    size_t cap = st->blk_cap;
    memset(st, 0, sizeof *st);
    st->blk = blk;
    st->blk_cap = cap;
    return st;
}

static void st_release(sws_h3sess_t *s, sws_h3st_t *st)
{
    sws_h3pool_t *p = s->conf.pool;
    free(st->held);
    if (p && p->n_sts < p->max_sts) {
        if (st->blk_cap > ST_KEEP_BLK) {
            free(st->blk);
            st->blk = NULL;
            st->blk_cap = 0;
        }
        st->hnext = p->sts;
        p->sts = st;
        p->n_sts++;
        return;
    }
    free(st->blk);
    free(st);
}

static h3out_t *run_alloc(sws_h3sess_t *s)
{
    sws_h3pool_t *p = s->conf.pool;
    h3out_t *o = p ? p->runs : NULL;
    if (!o)
        return calloc(1, sizeof *o);
    p->runs = o->next;
    p->n_runs--;
    memset(o, 0, offsetof(h3out_t, inl));
    return o;
}

static void run_release(sws_h3sess_t *s, h3out_t *o)
{
    sws_h3pool_t *p = s->conf.pool;
    free(o->own);
    if (p && p->n_runs < p->max_runs) {
        o->next = p->runs;
        p->runs = o;
        p->n_runs++;
        return;
    }
    free(o);
}

sws_h3st_t *h3st_new(sws_h3sess_t *s, int64_t id, uint8_t kind)
{
    if (s->n_st > s->tab_mask && tab_grow(s) < 0)
        return NULL;
    sws_h3st_t *st = st_alloc(s);
    if (!st)
        return NULL;
    st->id = id;
    st->kind = kind;
    st->urgency = 3; /* RFC 9218 4.1 */
    st->hnext = s->tab[id_hash(id) & s->tab_mask];
    s->tab[id_hash(id) & s->tab_mask] = st;
    s->n_st++;
    if (kind == K_REQUEST) {
        st->unlisted = 1;
        h3st_relist(s, st);
    }
    return st;
}

/* RFC 9218 4: the most urgent first; in one urgency, a non-incremental
 * stream alone in stream order, else incremental ones in turn. */
static int before(const sws_h3st_t *a, const sws_h3st_t *b)
{
    if (a->urgency != b->urgency)
        return a->urgency < b->urgency;
    if (a->inc != b->inc)
        return !a->inc;
    return a->inc ? a->seq < b->seq : a->id < b->id;
}

/* s->reqs is kept in before()'s order, so that the scheduler takes the
 * first stream with something to send instead of comparing them all on
 * every packet. A stream goes after those it does not come before (the
 * older of two alike first), looked for from the tail: a new stream of
 * the default priority, and an incremental one after its turn, belong
 * there. */
static void reqs_place(sws_h3sess_t *s, sws_h3st_t *st)
{
    sws_h3st_t *p = s->reqs_tail;
    while (p && before(st, p))
        p = p->prev;
    st->prev = p;
    st->next = p ? p->next : s->reqs;
    if (st->next)
        st->next->prev = st;
    else
        s->reqs_tail = st;
    if (p)
        p->next = st;
    else
        s->reqs = st;
    st->unlisted = 0;
}

void h3st_relist(sws_h3sess_t *s, sws_h3st_t *st)
{
    if (st->unlisted)
        reqs_place(s, st);
}

/* Off the scheduler's list: a stream whose output QUIC has all taken
 * (its end too) has nothing more to give, and would otherwise be looked at
 * on every writev until the client acknowledges it. */
static void reqs_unlink(sws_h3sess_t *s, sws_h3st_t *st)
{
    if (st->kind != K_REQUEST || st->unlisted)
        return;
    if (st->prev)
        st->prev->next = st->next;
    else
        s->reqs = st->next;
    if (st->next)
        st->next->prev = st->prev;
    else
        s->reqs_tail = st->prev;
    st->prev = st->next = NULL;
    st->unlisted = 1;
}

void h3st_set_priority(sws_h3sess_t *s, sws_h3st_t *st, int urgency, int inc)
{
    st->urgency = (uint8_t)urgency;
    st->inc = inc != 0;
    if (st->kind == K_REQUEST && !st->unlisted) {
        reqs_unlink(s, st);
        reqs_place(s, st);
    }
}

static void out_free(sws_h3sess_t *s, sws_h3st_t *st)
{
    for (h3out_t *o = st->oh, *nx; o; o = nx) {
        nx = o->next;
        run_release(s, o);
    }
    st->oh = st->ot = st->ow = NULL;
}

static void h3st_free(sws_h3sess_t *s, sws_h3st_t *st)
{
    sws_h3st_t **pp = &s->tab[id_hash(st->id) & s->tab_mask];
    while (*pp != st)
        pp = &(*pp)->hnext;
    *pp = st->hnext;
    s->n_st--;
    reqs_unlink(s, st);
    if (st->blocked_q)
        s->n_blocked--;
    if (s->offered == st)
        s->offered = NULL;
    out_free(s, st);
    st_release(s, st);
}

int sws_h3sess_init(sws_h3sess_t *s, const sws_h3sess_conf_t *conf, const sws_h3cb_t *cb, void *u)
{
    memset(s, 0, sizeof *s);
    s->cb = cb;
    s->u = u;
    s->conf = *conf;
    s->tab = calloc(16, sizeof *s->tab);
    if (!s->tab)
        return -1;
    s->tab_mask = 15;
    s->peer_ctrl = s->peer_qenc = s->peer_qdec = -1;
    s->max_bidi = -1;
    s->goaway_id = INT64_MAX;
    sws_qpack_dec_init(&s->dec, conf->qpack_table);
    return 0;
}

void sws_h3sess_free(sws_h3sess_t *s)
{
    if (!s->tab)
        return;
    for (uint32_t i = 0; i <= s->tab_mask; i++)
        for (sws_h3st_t *st = s->tab[i], *nx; st; st = nx) {
            nx = st->hnext;
            out_free(s, st);
            st_release(s, st);
        }
    free(s->tab);
    sws_qpack_dec_free(&s->dec);
    memset(s, 0, sizeof *s);
}

void sws_h3sess_set_user(sws_h3sess_t *s, int64_t id, void *su)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (st)
        st->su = su;
}

int h3_conn_error(sws_h3sess_t *s, uint64_t code)
{
    if (!s->fatal)
        s->fatal = (int)code;
    return -s->fatal;
}

void h3_stream_error(sws_h3sess_t *s, sws_h3st_t *st, uint64_t code)
{
    if (!st->read_shut) {
        st->read_shut = 1;
        s->cb->stop_sending(s->u, st->id, code);
    }
    if (!st->wr_shut) {
        st->wr_shut = 1;
        s->cb->reset_stream(s->u, st->id, code);
    }
    if (st->blocked_q) {
        st->blocked_q = 0;
        s->n_blocked--;
        sws_qpack_dec_cancel(&s->dec, (uint64_t)st->id);
    }
}

/* ---- output runs ---- */

static h3out_t *out_add(sws_h3sess_t *s, sws_h3st_t *st)
{
    h3out_t *o = run_alloc(s);
    if (!o)
        return NULL;
    if (st->ot)
        st->ot->next = o;
    else
        st->oh = o;
    st->ot = o;
    if (!st->ow) {
        st->ow = o;
        st->ow_off = 0;
    }
    return o;
}

/* Run o's length is set: it counts as not written. */
static void out_len(sws_h3st_t *st, h3out_t *o, size_t n)
{
    o->len = n;
    st->unwritten += n;
}

int h3_out_copy(sws_h3sess_t *s, sws_h3st_t *st, const uint8_t *p, size_t n)
{
    if (!n)
        return 0;
    uint8_t *b = malloc(n);
    h3out_t *o = b ? out_add(s, st) : NULL;
    if (!o) {
        free(b);
        return -1;
    }
    memcpy(b, p, n);
    o->own = b;
    o->p = b;
    out_len(st, o, n);
    return 0;
}

/* A HEADERS frame of fields f[0..n), in the run itself when it fits. */
static int out_headers(sws_h3sess_t *s, sws_h3st_t *st, const sws_hpack_field_t *f, size_t n)
{
    size_t bound = sws_qpack_encode_bound(f, n);
    sws_h3pool_t *p = s->conf.pool;
    h3out_t *o = out_add(s, st);
    if (!o)
        return -1;
    uint8_t *b = o->inl;
    if (16 + bound > sizeof o->inl) {
        if (p && 16 + bound <= sizeof p->hbuf)
            b = p->hbuf; /* copied to the run below */
        else if (!(b = o->own = malloc(16 + bound)))
            return -1; /* the run stays, empty */
    }
    /* the section first, at the end of the frame header's longest room */
    size_t len = sws_qpack_encode_memo(p ? p->memo : NULL, f, n, b + 16);
    uint8_t hd[16], *h = hd;
    h = h3_put_varint(h, F_HEADERS);
    h = h3_put_varint(h, len);
    size_t hl = (size_t)(h - hd);
    memcpy(b + 16 - hl, hd, hl);
    o->p = b + 16 - hl;
    if (p && b == p->hbuf) {
        uint8_t *to = hl + len <= sizeof o->inl ? o->inl : (o->own = malloc(hl + len));
        if (!to)
            return -1;
        memcpy(to, o->p, hl + len);
        o->p = to;
    }
    out_len(st, o, hl + len);
    return 0;
}

static sws_h3st_t *req(sws_h3sess_t *s, int64_t id)
{
    sws_h3st_t *st = h3st_find(s, id);
    return st && st->kind == K_REQUEST && !st->wr_shut && !st->fin_due ? st : NULL;
}

int sws_h3sess_info(sws_h3sess_t *s, int64_t id, const sws_hpack_field_t *f, size_t n)
{
    sws_h3st_t *st = req(s, id);
    if (!st || st->final_sent)
        return -1;
    return out_headers(s, st, f, n);
}

int sws_h3sess_response(sws_h3sess_t *s, int64_t id, const sws_hpack_field_t *f, size_t n,
                        int body)
{
    sws_h3st_t *st = req(s, id);
    if (!st || st->final_sent || out_headers(s, st, f, n) < 0)
        return -1;
    st->final_sent = 1;
    st->body = body != 0;
    if (!body)
        st->fin_due = 1;
    return 0;
}

int sws_h3sess_trailers(sws_h3sess_t *s, int64_t id, const sws_hpack_field_t *f, size_t n)
{
    sws_h3st_t *st = req(s, id);
    if (!st || !st->final_sent || out_headers(s, st, f, n) < 0)
        return -1;
    st->eof = 1;
    st->fin_due = 1;
    return 0;
}

void sws_h3sess_resume(sws_h3sess_t *s, int64_t id)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (st)
        st->deferred = 0;
}

void sws_h3sess_set_priority(sws_h3sess_t *s, int64_t id, int urgency, int inc)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (st && urgency >= 0 && urgency <= 7)
        h3st_set_priority(s, st, urgency, inc);
}

int sws_h3sess_get_priority(const sws_h3sess_t *s, int64_t id, int *urgency, int *inc)
{
    const sws_h3st_t *st = h3st_find(s, id);
    if (!st)
        return -1;
    *urgency = st->urgency;
    *inc = st->inc;
    return 0;
}

/* ---- our unidirectional streams ---- */

int sws_h3sess_bind(sws_h3sess_t *s, int64_t ctrl, int64_t qenc, int64_t qdec)
{
    uint8_t b[64], *p = b;
    s->ctrl = h3st_new(s, ctrl, K_OURS);
    s->qenc = h3st_new(s, qenc, K_OURS);
    s->qdec = h3st_new(s, qdec, K_OURS);
    if (!s->ctrl || !s->qenc || !s->qdec)
        return -1;
    /* the control stream: its type, then SETTINGS (RFC 9114 6.2.1) */
    uint8_t set[40], *q = set;
    q = h3_put_varint(q, SET_QPACK_MAX_TABLE_CAPACITY);
    q = h3_put_varint(q, s->conf.qpack_table);
    q = h3_put_varint(q, SET_QPACK_BLOCKED_STREAMS);
    q = h3_put_varint(q, s->conf.qpack_blocked);
    q = h3_put_varint(q, SET_MAX_FIELD_SECTION_SIZE);
    q = h3_put_varint(q, s->conf.max_field_section);
    p = h3_put_varint(p, U_CONTROL);
    p = h3_put_varint(p, F_SETTINGS);
    p = h3_put_varint(p, (uint64_t)(q - set));
    memcpy(p, set, (size_t)(q - set));
    p += q - set;
    uint8_t te = U_QENC, td = U_QDEC;
    if (h3_out_copy(s, s->ctrl, b, (size_t)(p - b)) < 0 || h3_out_copy(s, s->qenc, &te, 1) < 0 ||
        h3_out_copy(s, s->qdec, &td, 1) < 0)
        return -1;
    return 0;
}

static int goaway_at(sws_h3sess_t *s, int64_t id)
{
    if (!s->ctrl)
        return -1;
    if (id > s->goaway_id)
        id = s->goaway_id; /* a later GOAWAY may not raise it (RFC 9114 5.2) */
    uint8_t b[24], *p = b;
    p = h3_put_varint(p, F_GOAWAY);
    p = h3_put_varint(p, h3_varint_len((uint64_t)id));
    p = h3_put_varint(p, (uint64_t)id);
    if (h3_out_copy(s, s->ctrl, b, (size_t)(p - b)) < 0)
        return -1;
    s->goaway_id = id;
    s->goaway_queued = 1;
    return 0;
}

int sws_h3sess_goaway(sws_h3sess_t *s)
{
    return goaway_at(s, s->max_bidi < 0 ? 0 : s->max_bidi + 4);
}

int sws_h3sess_goaway_soon(sws_h3sess_t *s)
{
    return goaway_at(s, ((int64_t)1 << 62) - 4);
}

/* ---- writing ---- */

/* Asks the owner for body: a DATA frame's header, then its bytes. 1
 * something was queued (or the end), 0 nothing now. */
static int fill(sws_h3sess_t *s, sws_h3st_t *st)
{
    sws_h3vec_t v[16];
    uint32_t flags = 0;
    ssize_t k = s->cb->read_data(s->u, st->su, v, 16, &flags);
    if (k == SWS_H3D_DEFERRED) {
        st->deferred = 1;
        return 0;
    }
    if (k < 0) {
        h3_stream_error(s, st, H3_INTERNAL_ERROR);
        return 0;
    }
    size_t total = 0;
    for (ssize_t i = 0; i < k; i++)
        total += v[i].len;
    if (total) {
        h3out_t *o = out_add(s, st);
        if (!o) {
            h3_stream_error(s, st, H3_INTERNAL_ERROR);
            return 0;
        }
        uint8_t *h = h3_put_varint(o->inl, F_DATA);
        h = h3_put_varint(h, total);
        o->p = o->inl;
        out_len(st, o, (size_t)(h - o->inl));
        for (ssize_t i = 0; i < k; i++) {
            if (!v[i].len)
                continue;
            if (!(o = out_add(s, st))) {
                h3_stream_error(s, st, H3_INTERNAL_ERROR);
                return 0;
            }
            o->p = v[i].base;
            o->body = 1;
            out_len(st, o, v[i].len);
        }
    }
    if (flags & SWS_H3D_EOF) {
        st->eof = 1;
        if (flags & SWS_H3D_TRAILERS)
            s->cb->trailers(s->u, st->su, st->id); /* after the last DATA; they end it */
        else
            st->fin_due = 1;
    }
    return total || st->eof;
}

/* Whether st has bytes (or its end) to give now, asking for body. */
static int ready(sws_h3sess_t *s, sws_h3st_t *st)
{
    if (st->wr_blocked || st->wr_shut || st->fin_out)
        return 0;
    if (st->unwritten)
        return 1;
    if (st->body && !st->eof && !st->deferred && st->final_sent && fill(s, st))
        return st->unwritten || st->fin_due;
    return st->fin_due && !st->fin_out;
}

/* The first stream in RFC 9218's order (s->reqs's) with something to send. */
static sws_h3st_t *pick(sws_h3sess_t *s)
{
    for (sws_h3st_t *st = s->reqs; st; st = st->next)
        if (ready(s, st))
            return st;
    return NULL;
}

static ssize_t give(sws_h3sess_t *s, sws_h3st_t *st, int64_t *id, int *fin, sws_h3vec_t *vec,
                    size_t nvec)
{
    size_t n = 0;
    size_t off = st->ow_off;
    for (h3out_t *o = st->ow; o && n < nvec; o = o->next, off = 0) {
        vec[n].base = o->p + off;
        vec[n].len = o->len - off;
        n++;
    }
    *id = st->id;
    /* the end goes with the last run, when it is given */
    uint64_t given = 0;
    for (size_t i = 0; i < n; i++)
        given += vec[i].len;
    *fin = st->fin_due && given == st->unwritten;
    if (*fin) {
        st->fin_offered = 1;
        s->offered = st;
    }
    return (ssize_t)n;
}

ssize_t sws_h3sess_writev(sws_h3sess_t *s, int64_t *id, int *fin, sws_h3vec_t *vec, size_t nvec)
{
    *id = -1;
    *fin = 0;
    if (s->fatal)
        return -s->fatal;
    if (!s->ctrl)
        return 0;
    if (s->offered) { /* an end offered before and not taken is offered again */
        s->offered->fin_offered = 0;
        s->offered = NULL;
    }
    /* what our decoder stream has to say joins its queue */
    const uint8_t *dp;
    size_t dn = sws_qpack_dec_pending(&s->dec, &dp);
    if (dn) {
        if (h3_out_copy(s, s->qdec, dp, dn) < 0)
            return h3_conn_error(s, H3_INTERNAL_ERROR);
        sws_qpack_dec_taken(&s->dec, dn);
    }
    sws_h3st_t *ours[3] = {s->ctrl, s->qenc, s->qdec};
    for (int i = 0; i < 3; i++)
        if (ours[i]->unwritten && !ours[i]->wr_blocked && !ours[i]->wr_shut)
            return give(s, ours[i], id, fin, vec, nvec);
    sws_h3st_t *st = pick(s);
    if (!st)
        return 0;
    if (st->inc) { /* its turn taken: after the others of its urgency */
        st->seq = ++s->seq;
        reqs_unlink(s, st);
        reqs_place(s, st);
    }
    return give(s, st, id, fin, vec, nvec);
}

void sws_h3sess_written(sws_h3sess_t *s, int64_t id, size_t n)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (!st)
        return;
    st->unwritten -= n < st->unwritten ? n : st->unwritten;
    while (n && st->ow) {
        size_t left = st->ow->len - st->ow_off;
        if (n < left) {
            st->ow_off += n;
            n = 0;
            break;
        }
        n -= left;
        st->ow = st->ow->next;
        st->ow_off = 0;
    }
    if (st->fin_offered && !st->unwritten) {
        st->fin_out = 1; /* QUIC took it all, and the end with it */
        if (!st->blocked_q) /* unblock() walks the list */
            reqs_unlink(s, st);
    }
}

void sws_h3sess_acked_bytes(sws_h3sess_t *s, int64_t id, uint64_t n)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (!st)
        return;
    uint64_t body = 0;
    while (n && st->oh && st->oh != st->ow) {
        h3out_t *o = st->oh;
        if (n < o->len) { /* part of a run: it stays, shorter */
            if (o->body)
                body += n;
            o->p += n;
            o->len -= n;
            n = 0;
            break;
        }
        n -= o->len;
        if (o->body)
            body += o->len;
        st->oh = o->next;
        if (!st->oh)
            st->ot = NULL;
        run_release(s, o);
    }
    /* bytes of the run being written, up to where it was written */
    if (n && st->oh && st->oh == st->ow && n <= st->ow_off) {
        h3out_t *o = st->oh;
        if (o->body)
            body += n;
        o->p += n;
        o->len -= n;
        st->ow_off -= n;
    }
    if (body && st->su)
        s->cb->acked(s->u, st->su, body);
}

void sws_h3sess_block(sws_h3sess_t *s, int64_t id)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (st)
        st->wr_blocked = 1;
}

void sws_h3sess_unblock(sws_h3sess_t *s, int64_t id)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (st)
        st->wr_blocked = 0;
}

void sws_h3sess_shut_wr(sws_h3sess_t *s, int64_t id)
{
    sws_h3st_t *st = h3st_find(s, id);
    if (st)
        st->wr_shut = 1;
}

int sws_h3sess_close_stream(sws_h3sess_t *s, int64_t id, uint64_t code)
{
    if ((id & 3) == 0)
        s->req_closed++; /* the client may open one more (conf.max_requests) */
    sws_h3st_t *st = h3st_find(s, id);
    if (!st)
        return 0;
    if (st->kind != K_REQUEST && st->kind != K_IGNORED && st->kind != K_UNI_NEW)
        return h3_conn_error(s, H3_CLOSED_CRITICAL_STREAM);
    if (st->blocked_q)
        sws_qpack_dec_cancel(&s->dec, (uint64_t)id);
    if (st->kind == K_REQUEST && st->su)
        s->cb->close(s->u, st->su, id, code);
    h3st_free(s, st);
    return 0;
}
