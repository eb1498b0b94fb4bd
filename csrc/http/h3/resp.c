/* HTTP/3's response interface (sws_resp_t; csrc/http/h3/h3_int.h): a
 * handler's head becomes a QPACK-encoded HEADERS through the session
 * (h3sess.h), its body a queue of pieces that the session reads
 * (h3_read_data) and references until QUIC has them acknowledged
 * (h3s_acked).
 *
 * Body bytes are copied into the queue, also those given with SWS_REF:
 * QUIC may send them again until the peer acknowledges them, which may be
 * long after a handler has moved on (HTTP/2 writes its frames at once and
 * copies only what a finishing handler leaves). Files are not: one the
 * file cache holds in memory is sent from there, the cache's reference
 * held until the peer acknowledges it; another is read a chunk at a time
 * as the session asks for more, so a large file costs memory only for
 * what is in flight. Only what a flush (or done) committed is offered to
 * the session: discard can still take back what came after. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http/h3/h3_int.h"
#include "http/lower.h"
#include "scalws/priority.h"

/* ---- the head -------------------------------------------------------------------------------- */

static int hb_room(h3s_t *s, size_t n)
{
    if (s->hb_len + n <= s->hb_cap)
        return 0;
    size_t cap = s->hb_cap ? s->hb_cap * 2 : 512;
    while (cap < s->hb_len + n)
        cap *= 2;
    char *nb = realloc(s->hb, cap);
    if (!nb)
        return -1;
    s->hb = nb;
    s->hb_cap = cap;
    return 0;
}

/* A record: the name's and value's lengths (4 bytes each), the name
 * lowercased, the value without the blanks around it. */
static void put_field(h3s_t *s, const char *name, size_t nl, const char *value, size_t vl)
{
    while (vl && (*value == ' ' || *value == '\t'))
        value++, vl--;
    while (vl && (value[vl - 1] == ' ' || value[vl - 1] == '\t'))
        vl--;
    if (!nl || nl > 65535 || vl > UINT32_MAX || s->submitted || hb_room(s, 8 + nl + vl) < 0)
        return;
    char *p = s->hb + s->hb_len;
    lower_copy(p + 8, name, nl); /* HTTP/3's names are lowercase */
    if (sws_conn_specific(p + 8, nl))
        return; /* not HTTP/3's (RFC 9114 §4.2) */
    uint32_t l[2] = {(uint32_t)nl, (uint32_t)vl};
    memcpy(p, l, 8);
    memcpy(p + 8 + nl, value, vl);
    s->hb_len += 8 + nl + vl;
    s->hb_n++;
}

static void h3_head(sws_engine_t *e, sws_resp_t *r, int status, const char *reason, size_t rl)
{
    (void)reason, (void)rl;
    h3s_t *s = H3S(r);
    if (s->submitted)
        return;
    s->status = (uint16_t)status;
    s->hb_len = 0;
    s->hb_n = 0;
    s->head_ready = 0;
    s->sent = 0;
    s->no_body = s->head_only || status == 204 || status == 304 || status < 200;
    memcpy(s->date, r->date ? r->date : e->core.date, SWS_HTTP_DATE_LEN);
    r->date = NULL;
}

static void h3_field(sws_engine_t *e, sws_resp_t *r, const char *name, size_t nl,
                     const char *value, size_t vl)
{
    (void)e;
    put_field(H3S(r), name, nl, value, vl);
}

static void h3_fields(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len)
{
    (void)e;
    h3s_t *s = H3S(r);
    const char *p = lines, *end = lines + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon) {
            const char *v = colon + 1;
            size_t vl = (size_t)(le - v);
            if (vl && v[vl - 1] == '\r')
                vl--;
            put_field(s, p, (size_t)(colon - p), v, vl);
        }
        p = eol ? eol + 1 : end;
    }
}

static void h3_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    (void)e;
    h3s_t *s = H3S(r);
    s->head_ready = 1;
    s->body_len = kind == SWS_BODY_LENGTH ? len : UINT64_MAX;
    if (kind == SWS_BODY_NONE || (kind == SWS_BODY_LENGTH && len == 0))
        s->no_body = 1;
}

static void nv_set(sws_hpack_field_t *nv, const char *n, size_t nl, const char *v, size_t vl)
{
    nv->name = (const uint8_t *)n;
    nv->nl = (uint32_t)nl;
    nv->value = (const uint8_t *)v;
    nv->vl = (uint32_t)vl;
    nv->flags = 0;
}

int h3_commit(sws_engine_t *e, h3s_t *s)
{
    h3conn_t *hc = s->hc;
    if (s->submitted || !s->open || !hc->h3)
        return 0;
    if (!s->head_ready)
        return 0; /* nothing described yet */
    s->submitted = 1;
    size_t max = 4 + s->hb_n;
    sws_hpack_field_t nva[max];
    char st[3] = {(char)('0' + s->status / 100 % 10), (char)('0' + s->status / 10 % 10),
                  (char)('0' + s->status % 10)};
    char cl[24];
    size_t n = 0;
    nv_set(&nva[n++], ":status", 7, st, 3);
    const char *sl = e->h1.server_line;
    size_t sll = e->h1.server_line_len;
    if (sll > 10) /* "Server: x\r\n" */
        nv_set(&nva[n++], "server", 6, sl + 8, sll - 10);
    nv_set(&nva[n++], "date", 4, s->date, SWS_HTTP_DATE_LEN);
    if (s->body_len != UINT64_MAX && s->status != 204 && s->status != 304 && s->status >= 200) {
        char *end = cl + sizeof cl, *d = end;
        uint64_t v = s->body_len;
        do
            *--d = (char)('0' + v % 10);
        while (v /= 10);
        nv_set(&nva[n++], "content-length", 14, d, (size_t)(end - d));
    }
    for (const char *p = s->hb, *end = s->hb + s->hb_len; p < end && n < max;) {
        uint32_t l[2];
        memcpy(l, p, 8);
        nv_set(&nva[n], p + 8, l[0], p + 8 + l[0], l[1]);
        /* the request id and cookies: never in QPACK's dynamic table (ADR 0022) */
        if ((l[0] == 12 && memcmp(p + 8, "x-request-id", 12) == 0) ||
            (l[0] == 10 && memcmp(p + 8, "set-cookie", 10) == 0))
            nva[n].flags = SWS_HPACK_NEVER;
        n++;
        p += 8 + l[0] + l[1];
    }
    for (size_t k = 0; k < n; k++) { /* the response's own priority (RFC 9218 §8) */
        int u = 0, i = 0, got;
        if (nva[k].nl != 8 || memcmp(nva[k].name, "priority", 8) != 0 ||
            (got = sws_parse_priority((const char *)nva[k].value, nva[k].vl, &u, &i)) <= 0)
            continue;
        int cu = 3, ci = 0; /* the client's signal, where the response gives none */
        sws_h3sess_get_priority(hc->h3, s->id, &cu, &ci);
        sws_h3sess_set_priority(hc->h3, s->id, got & SWS_PRI_U ? u : cu, got & SWS_PRI_I ? i : ci);
    }
    int rv = sws_h3sess_response(hc->h3, s->id, nva, n, !s->no_body);
    s->hb_len = 0; /* encoded already; the buffer stays for the next stream */
    if (rv != 0) {
        elog_folded(e, "h3 submit", 0, SWS_L_ERROR, "HTTP/3: cannot submit a response");
        return -1;
    }
    if (s->no_body)
        h3s_release(e, s); /* a body given anyway (a HEAD's) is not sent */
    h3_due(hc);
    return 0;
}

/* ---- the body -------------------------------------------------------------------------------- */

/* A new piece at the queue's tail. s->commit is the last piece a flush
 * (or done) committed: pieces after it are not offered to the session yet.
 * NULL: none is (nothing committed, or all of it acknowledged). */
static piece_t *piece_new(h3s_t *s, size_t room)
{
    piece_t *q = malloc(sizeof *q + room);
    if (!q)
        return NULL;
    memset(q, 0, sizeof *q);
    if (s->qt)
        s->qt->next = q;
    else
        s->qh = q;
    s->qt = q;
    if (!s->gv)
        s->gv = q;
    return q;
}

static void piece_free(sws_engine_t *e, piece_t *q)
{
    if (q->f)
        sws_filecache_release(e->net.fc, q->f);
    if (q->own != q->data)
        free(q->own);
    free(q);
}

/* Everything the stream holds for its body goes (the stream ends, or its
 * head says no body). */
void h3s_release(sws_engine_t *e, h3s_t *s)
{
    while (s->qh) {
        piece_t *q = s->qh;
        s->qh = q->next;
        piece_free(e, q);
    }
    s->qt = s->gv = s->commit = NULL;
    s->gv_off = s->q_head_acked = 0;
    s->queued = 0;
    free(s->tr);
    s->tr = NULL;
    s->ntr = 0;
}

static void h3_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags)
{
    (void)e, (void)flags;
    h3s_t *s = H3S(r);
    if (!n || s->no_body || s->reset)
        return;
    s->sent += n;
    s->queued += n;
    /* the tail grows in place while it is not committed (never offered) */
    piece_t *t = s->qt;
    if (t && t->kind == P_BYTES && s->commit != t && t->len + n <= H3_FILE_CHUNK) {
        if (t->len + n > t->cap) {
            size_t cap = t->cap * 2 < t->len + n ? t->len + n : t->cap * 2;
            char *nb = t->own == t->data ? malloc(cap) : realloc(t->own, cap);
            if (!nb)
                goto fail;
            if (t->own == t->data)
                memcpy(nb, t->data, t->len);
            t->own = nb;
            t->p = nb;
            t->cap = cap;
        }
        memcpy(t->own + t->len, p, n);
        t->len += n;
        return;
    }
    size_t cap = n < 1024 ? 1024 : n; /* room for a few more small pieces */
    piece_t *q = piece_new(s, cap);
    if (!q)
        goto fail;
    q->kind = P_BYTES;
    q->cap = cap;
    q->own = q->data;
    memcpy(q->own, p, n);
    q->p = q->own;
    q->len = n;
    return;
fail:
    h3s_reset(s, H3_INTERNAL_ERROR);
}

static void h3_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len,
                    size_t chunk)
{
    (void)chunk;
    h3s_t *s = H3S(r);
    if (s->no_body || s->reset || !len) {
        sws_filecache_release(e->net.fc, f);
        return;
    }
    piece_t *q = piece_new(s, 0);
    if (!q) {
        sws_filecache_release(e->net.fc, f);
        h3s_reset(s, H3_INTERNAL_ERROR);
        return;
    }
    q->f = f;
    if (f->mem) { /* a small file the cache holds in memory: sent from there, held */
        q->kind = P_REF;
        q->p = f->mem + off;
        q->len = (size_t)len;
    } else {
        q->kind = P_FILE;
        q->off = off;
        q->left = len;
    }
    s->sent += len;
    s->queued += len;
}

/* Every byte a handler gives is copied (h3_data): what it asks us to keep
 * alive for referenced bytes can go at once. */
static void h3_hold_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f)
{
    (void)r;
    sws_filecache_release(e->net.fc, f);
}

static void h3_hold_heap(sws_engine_t *e, sws_resp_t *r, char *buf)
{
    (void)e, (void)r;
    free(buf);
}

static void h3_hold(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h)
{
    (void)e, (void)r;
    h->release(h);
}

/* The session waited for data: it may read again. */
static void resume(h3s_t *s)
{
    if (s->blocked && s->submitted && s->open && s->hc->h3) {
        s->blocked = 0;
        sws_h3sess_resume(s->hc->h3, s->id);
    }
}

static void commit(h3s_t *s) { s->commit = s->qt; }

static void h3_done(sws_engine_t *e, sws_resp_t *r)
{
    h3s_t *s = H3S(r);
    s->body_done = 1;
    commit(s);
    if (s->live && h3_commit(e, s) < 0)
        h3s_reset(s, H3_INTERNAL_ERROR);
    resume(s);
    h3_due(s->hc);
}

/* Materialises the next chunk of the file piece q: q becomes bytes, and
 * what is left of the file a piece after it. 0, or -1. */
static int file_chunk(sws_engine_t *e, h3s_t *s, piece_t *q)
{
    size_t want = q->left < H3_FILE_CHUNK ? (size_t)q->left : H3_FILE_CHUNK;
    char *buf = malloc(want);
    if (!buf)
        return -1;
    size_t got = 0;
    while (got < want) {
        ssize_t k = pread(q->f->fd, buf + got, want - got, (off_t)(q->off + got));
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            elog_folded(e, "h3 file read", 0, SWS_L_ERROR, "HTTP/3: reading a file body: %s",
                        k < 0 ? strerror(errno) : "it became shorter");
            free(buf);
            return -1;
        }
        got += (size_t)k;
    }
    if (q->left > want) {
        piece_t *rest = calloc(1, sizeof *rest);
        if (!rest) {
            free(buf);
            return -1;
        }
        *rest = *q;
        rest->off += want;
        rest->left -= want;
        rest->next = q->next;
        q->next = rest;
        if (s->qt == q)
            s->qt = rest;
        if (s->commit == q)
            s->commit = rest;
        q->f = NULL; /* the reference went with the rest */
    } else {
        sws_filecache_release(e->net.fc, q->f);
        q->f = NULL;
    }
    q->kind = P_BYTES;
    q->own = buf;
    q->p = buf;
    q->len = want;
    q->left = 0;
    return 0;
}

/* Is q at or before the last committed piece? */
static int committed(const h3s_t *s, const piece_t *q)
{
    if (!s->commit)
        return 0;
    for (const piece_t *c = q; c; c = c->next)
        if (c == s->commit)
            return 1;
    return 0;
}

ssize_t h3_read_data(void *cu, void *su, sws_h3vec_t *vec, size_t veccnt, uint32_t *pflags)
{
    h3s_t *s = su;
    h3conn_t *hc = cu;
    sws_engine_t *e = hc->e;
    if (!s)
        return SWS_H3D_FAIL;
    size_t n = 0;
    int in_commit = s->gv && committed(s, s->gv);
    while (n < veccnt && s->gv && in_commit) {
        piece_t *q = s->gv;
        if (q->kind == P_FILE && file_chunk(e, s, q) < 0)
            return SWS_H3D_FAIL;
        size_t k = q->len - s->gv_off;
        if (k) {
            vec[n].base = (const uint8_t *)q->p + s->gv_off;
            vec[n].len = k;
            n++;
            s->unacked += k;
            s->queued -= k;
        }
        int last = q == s->commit;
        s->gv = q->next;
        s->gv_off = 0;
        if (last)
            break;
    }
    if (!s->gv && s->body_done && s->commit == s->qt) {
        *pflags |= SWS_H3D_EOF;
        if (s->ntr)
            *pflags |= SWS_H3D_TRAILERS; /* h3_submit_trailers, after these bytes */
        return (ssize_t)n;
    }
    if (!n) {
        s->blocked = 1;
        return SWS_H3D_DEFERRED;
    }
    return (ssize_t)n;
}

void h3_submit_trailers(void *cu, void *su, int64_t id)
{
    h3s_t *s = su;
    sws_h3sess_trailers(((h3conn_t *)cu)->h3, id, s->tr, s->ntr);
}

void h3s_acked(sws_engine_t *e, h3s_t *s, uint64_t n)
{
    s->unacked -= n < s->unacked ? n : s->unacked;
    while (n && s->qh && s->qh != s->gv) {
        piece_t *q = s->qh;
        size_t avail = q->len - s->q_head_acked;
        if (n < avail) {
            s->q_head_acked += n;
            return;
        }
        n -= avail;
        s->qh = q->next;
        s->q_head_acked = 0;
        if (s->commit == q)
            s->commit = NULL; /* wholly given and acknowledged: nothing before the next */
        if (s->qt == q)
            s->qt = NULL;
        piece_free(e, q);
    }
    if (s->drain_due && s->live && s->unacked + s->queued < SWS_H3_BACKLOG) {
        s->drain_ready = 1;
        s->hc->work = 1;
    }
}

/* ---- the handler's side ---------------------------------------------------------------------- */

static void h3_attach(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *hooks, void *ctx)
{
    (void)e;
    h3s_t *s = H3S(r);
    s->hooks = hooks;
    s->ctx = ctx;
}

static int h3_backed_up(const sws_resp_t *r)
{
    h3s_t *s = (h3s_t *)((const char *)r - offsetof(h3s_t, resp));
    if (s->unacked + s->queued < SWS_H3_BACKLOG)
        return 0;
    s->drain_due = 1;
    return 1;
}

static int h3_flush(sws_engine_t *e, sws_resp_t *r)
{
    h3s_t *s = H3S(r);
    commit(s);
    if (!s->open || s->hc->dead)
        return 0; /* sent nowhere: gone comes with the close */
    if (s->head_ready && !s->submitted && h3_commit(e, s) < 0)
        h3s_reset(s, H3_INTERNAL_ERROR);
    resume(s);
    h3_due(s->hc);
    h3_backed_up(r);
    return 0;
}

static void h3_want_body(sws_engine_t *e, sws_resp_t *r, int on)
{
    (void)e;
    h3s_t *s = H3S(r);
    s->want_body = on;
    if (on && (s->bin_len || (s->req_done && !s->fin_given))) {
        s->body_due = 1; /* handed over at the end of the batch, not inside the handler's call */
        s->hc->work = 1;
        h3_due(s->hc);
    }
}

static void h3_discard(sws_engine_t *e, sws_resp_t *r)
{
    h3s_t *s = H3S(r);
    if (!s->submitted) {
        s->hb_len = 0;
        s->hb_n = 0;
        s->head_ready = 0;
    }
    /* the pieces after the last commit (all of them when none is): never offered */
    piece_t *q = s->commit ? s->commit->next : s->qh;
    if (s->commit)
        s->commit->next = NULL;
    else
        s->qh = NULL;
    s->qt = s->commit;
    while (q) {
        piece_t *nx = q->next;
        s->queued -= q->kind == P_FILE ? q->left : q->len;
        if (s->gv == q)
            s->gv = NULL;
        piece_free(e, q);
        q = nx;
    }
    s->body_done = 0;
    free(s->tr);
    s->tr = NULL;
    s->ntr = 0;
}

static void h3_finish(sws_engine_t *e, sws_resp_t *r, int how)
{
    h3s_t *s = H3S(r);
    if (!s->logged)
        h3s_log(e, s, &s->log, s->status);
    s->live = 0;
    s->hooks = NULL;
    s->drain_due = s->drain_ready = s->body_due = 0;
    if (!s->open)
        return; /* the stream is gone on the session's side; freed with its close */
    if (how == SWS_FIN_ABORT || !s->head_ready || (!s->body_done && !s->no_body)) {
        /* cut short: the client must see it, never a complete-looking body */
        h3s_reset(s, H3_INTERNAL_ERROR);
    } else {
        if (!s->submitted && h3_commit(e, s) < 0)
            h3s_reset(s, H3_INTERNAL_ERROR);
        resume(s);
    }
    if (s->bin_len) { /* request body the handler never took */
        h3_consume(s->hc, s->id, s->bin_len);
        s->bin_len = 0;
    }
    h3_due(s->hc);
}

void h3s_reset(h3s_t *s, uint64_t code)
{
    h3conn_t *hc = s->hc;
    if (s->reset)
        return;
    s->reset = 1;
    if (hc->qc && s->open)
        ngtcp2_conn_shutdown_stream(hc->qc, s->id, code);
    h3_due(hc);
}

static void h3_rclose(sws_engine_t *e, sws_resp_t *r)
{
    h3s_t *s = H3S(r);
    if (!s->live)
        return;
    h3s_reset(s, H3_INTERNAL_ERROR);
    h3s_gone(e, s, SWS_GONE_CLIENT);
    if (s->bin_len) {
        h3_consume(s->hc, s->id, s->bin_len);
        s->bin_len = 0;
    }
}

static void h3_interim(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                       size_t reason_len, const sws_header_t *h, size_t nh)
{
    (void)e, (void)reason, (void)reason_len;
    h3s_t *s = H3S(r);
    if (s->submitted || !s->open || !s->hc->h3 || status < 100 || status > 199)
        return;
    sws_hpack_field_t nva[1 + nh];
    char st[3] = {(char)('0' + status / 100), (char)('0' + status / 10 % 10),
                  (char)('0' + status % 10)};
    size_t n = 0, names = 0;
    for (size_t i = 0; i < nh; i++)
        names += h[i].name_len;
    char *low = malloc(names + 1); /* HTTP/3's names are lowercase (RFC 9114 4.2) */
    if (!low)
        return;
    nv_set(&nva[n++], ":status", 7, st, 3);
    char *lp = low;
    for (size_t i = 0; i < nh; i++) { /* names the proxy filtered */
        if (sws_conn_specific(h[i].name, h[i].name_len))
            continue;
        for (size_t k = 0; k < h[i].name_len; k++)
            lp[k] = (char)(h[i].name[k] >= 'A' && h[i].name[k] <= 'Z' ? h[i].name[k] + 32
                                                                      : h[i].name[k]);
        nv_set(&nva[n++], lp, h[i].name_len, h[i].value, h[i].value_len);
        lp += h[i].name_len;
    }
    sws_h3sess_info(s->hc->h3, s->id, nva, n);
    free(low);
    h3_due(s->hc);
}

static void h3_trailers(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh)
{
    (void)e;
    h3s_t *s = H3S(r);
    size_t bytes = 0;
    for (size_t i = 0; i < nh; i++)
        bytes += h[i].name_len + h[i].value_len;
    free(s->tr);
    s->ntr = 0;
    s->tr = malloc(nh * sizeof *s->tr + bytes + 1);
    if (!s->tr)
        return;
    char *p = (char *)(s->tr + nh);
    for (size_t i = 0; i < nh; i++) {
        if (sws_conn_specific(h[i].name, h[i].name_len))
            continue;
        for (size_t k = 0; k < h[i].name_len; k++)
            p[k] = (char)(h[i].name[k] >= 'A' && h[i].name[k] <= 'Z' ? h[i].name[k] + 32
                                                                     : h[i].name[k]);
        memcpy(p + h[i].name_len, h[i].value, h[i].value_len);
        nv_set(&s->tr[s->ntr++], p, h[i].name_len, p + h[i].name_len, h[i].value_len);
        p += h[i].name_len + h[i].value_len;
    }
}

/* Deferred work of hc's streams: drained after acknowledgements, and
 * request body a handler asked for. Runs at the end of the batch, out of
 * ngtcp2's and the session's calls. */
void h3_work(sws_engine_t *e, h3conn_t *hc)
{
    hc->work = 0;
    for (h3s_t *s = hc->streams, *nx; s; s = nx) {
        nx = s->next;
        if (s->body_due) {
            s->body_due = 0;
            h3_body_to_handler(e, s);
        }
        if (s->drain_ready && s->live) {
            s->drain_ready = 0;
            s->drain_due = 0;
            s->hooks->drained(e, s->ctx);
        }
    }
}

const sws_resp_ops_t h3_resp_ops = {
    h3_head, h3_field, h3_fields, h3_start_body, h3_data, h3_file, h3_hold_file, h3_hold_heap,
    h3_done, h3_attach, h3_flush, h3_backed_up, h3_want_body, h3_discard, h3_finish, h3_rclose,
    h3_hold, h3_interim, h3_trailers,
};
