/* The response cache's misses (scalws/cache.h, cache_int.h): a fill
 * started through the tee (sws_cache_fetch), with our validators when a
 * stale entry exists and its 304 merged into it (RFC 9111 4.3.4); stale
 * answers (stale-if-error, and stale-while-revalidate's background refresh
 * through a null response); and collapsed misses: a request that finds a
 * fill in progress for its key waits for the filler's eventfd or its lock
 * timeout, then looks again. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cache_int.h"
#include "scalws/httpdate.h"

/* ---- stale answers and revalidation ----------------------------------------------------- */

int stale_if_error_ok(tee_t *t)
{
    if (!t->stale_off || t->bg)
        return 0;
    sws_cs_t *z = t->z;
    int ok = 0;
    zlock(z);
    sws_cent_t *st = sws_cs_ent(z, t->stale_off);
    /* not one purged or invalidated meanwhile (DEAD), nor one that must be
     * validated before any use (no-cache) */
    if (st->state == CS_READY && !(st->hflags & CE_NO_CACHE)) {
        reqcc_t q;
        req_directives(&t->req, &q);
        uint32_t sie = q.cc.stale_if_error != SWS_CC_NONE ? (uint32_t)q.cc.stale_if_error
                       : st->sie ? st->sie : t->c->sie;
        int64_t over = ent_age(st, t->e->core.wall) - st->lifetime;
        ok = !(st->hflags & CE_MUST_REVALIDATE) && over < (int64_t)sie;
    }
    sws_cs_unlock(z);
    return ok;
}

/* Removes from lines[0..n) the fields a 304 must not update: the stored
 * body's own description. The ETag offset goes (it is the stored one that
 * stays). Returns the new length. */
static size_t drop_fields(char *lines, size_t n, int64_t *etag_off)
{
    static const char *const keep_stored[] = {"content-encoding", "content-length", "content-md5",
                                              "content-range", "etag"};
    size_t w = 0;
    for (size_t r = 0; r < n;) {
        const char *eol = memchr(lines + r, '\n', n - r);
        size_t len = (size_t)(eol - (lines + r) + 1);
        const char *colon = memchr(lines + r, ':', len);
        size_t nl = colon ? (size_t)(colon - (lines + r)) : 0;
        int drop = 0;
        for (size_t i = 0; i < sizeof keep_stored / sizeof keep_stored[0]; i++)
            if (nl == strlen(keep_stored[i]) && strncasecmp(lines + r, keep_stored[i], nl) == 0)
                drop = 1;
        if (!drop) {
            memmove(lines + w, lines + r, len);
            w += len;
        }
        r += len;
    }
    *etag_off = -1;
    return w;
}

/* A 304 to our revalidation: the stored entry again, with the 304's
 * fields in place of its own (RFC 9111 4.3.4) and fresh from now. */
uint64_t refresh(tee_t *t)
{
    sws_engine_t *e = t->e;
    sws_cs_t *z = t->z;
    zlock(z);
    sws_cent_t *old = sws_cs_ent(z, t->stale_off);
    if (old->state != CS_READY) {
        sws_cs_unlock(z);
        return 0;
    }
    /* merged head: stored lines whose name the 304 does not carry, then the 304's */
    size_t cap = old->head_len + t->fl_len + 1;
    char *h = malloc(cap);
    if (!h) {
        sws_cs_unlock(z);
        return 0;
    }
    size_t n = 0;
    int64_t etag_off = -1;
    size_t etag_len = 0;
    const char *p = ent_head(old), *end = p + old->head_len;
    char *nh;
    int64_t noff;
    size_t nlen = stored_head(t, &nh, &noff);
    if (nh) /* fields a 304 does not change (RFC 9111 3.2): they describe the stored body */
        nlen = drop_fields(nh, nlen, &noff);
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)(eol - p + 1);
        const char *colon = memchr(p, ':', len);
        size_t nl = colon ? (size_t)(colon - p) : 0;
        int replaced = 0;
        for (const char *q = nh; nh && q < nh + nlen;) {
            const char *qe = memchr(q, '\n', (size_t)(nh + nlen - q));
            const char *qc = memchr(q, ':', (size_t)(qe - q));
            if (qc && (size_t)(qc - q) == nl && strncasecmp(q, p, nl) == 0)
                replaced = 1;
            q = qe + 1;
        }
        if (!replaced) {
            if (old->etag_len && (size_t)(p - ent_head(old)) <= old->etag_off &&
                old->etag_off < (size_t)(p - ent_head(old)) + len) {
                etag_off = (int64_t)(n + (old->etag_off - (size_t)(p - ent_head(old))));
                etag_len = old->etag_len;
            }
            memcpy(h + n, p, len);
            n += len;
        }
        p += len;
    }
    if (nh) {
        if (noff >= 0) {
            etag_off = (int64_t)(n + (size_t)noff);
            etag_len = t->etag_len;
        }
        memcpy(h + n, nh, nlen);
        n += nlen;
        free(nh);
    }
    if (n > SWS_CACHE_HEAD_MAX) { /* the merged fields would not fit an answer */
        sws_cs_unlock(z);
        free(h);
        return 0;
    }
    /* freshness: the 304's directives when it has any, else the stored ones' lifetime */
    int64_t life = old->lifetime;
    uint32_t hflags = old->hflags;
    if (t->cc.max_age != SWS_CC_NONE || t->cc.s_maxage != SWS_CC_NONE || t->rs.expires != INT64_MIN ||
        (t->cc.flags & SWS_CC_INVALID)) {
        t->status = old->status;
        life = lifetime_of(t);
        if (life < 0)
            life = 0;
        hflags = (hflags & CE_HAS_LM) | ((t->cc.flags & SWS_CC_NO_CACHE) ? CE_NO_CACHE : 0) |
                 ((t->cc.flags & (SWS_CC_MUST_REVALIDATE | SWS_CC_PROXY_REVALIDATE)) ||
                          t->cc.s_maxage != SWS_CC_NONE ? CE_MUST_REVALIDATE : 0) |
                 (hflags & CE_AUTH_OK);
    }
    uint64_t bytes = sizeof(sws_cent_t) + old->key_len + old->vary_len + old->tags_len + n + old->body_len;
    sws_cent_t *ent = sws_cs_reserve(z, bytes, e->ca.slot, 0);
    old = sws_cs_ent(z, t->stale_off); /* still referenced by us: never freed by reserve */
    if (!ent || old->state != CS_READY) {
        if (ent)
            sws_cs_abandon(z, ent);
        sws_cs_unlock(z);
        free(h);
        return 0;
    }
    uint64_t gen = ent->gen;
    memcpy(ent, old, sizeof *ent);
    ent->gen = gen;
    ent->refs = 0;
    ent->state = CS_FILLING;
    ent->filler = (uint16_t)(e->ca.slot + 1);
    int64_t now = (int64_t)e->core.wall;
    ent->response_time = now;
    ent->initial_age = sws_cc_initial_age(&t->rs, t->request_time, now);
    ent->lifetime = life;
    ent->hflags = hflags;
    if (t->rs.date != INT64_MIN)
        sws_http_date((time_t)t->rs.date, ent->date); /* the 304's Date replaces it */
    ent->head_len = (uint32_t)n;
    ent->etag_off = etag_off >= 0 ? (uint32_t)etag_off : 0;
    ent->etag_len = etag_off >= 0 ? (uint32_t)etag_len : 0;
    size_t pre = old->key_len + old->vary_len + old->tags_len;
    memcpy(ent->data, old->data, pre);
    memcpy(ent->data + pre, h, n);
    memcpy(ent->data + pre + n, ent_body(old), old->body_len);
    free(h);
    sws_cs_unlink(z, old); /* our reference keeps its bytes until tee_free */
    sws_cs_publish(z, ent, CS_READY);
    cnt(&z->c.revalidated);
    uint64_t off = sws_cs_off(z, ent);
    /* held until the tee ends: another process may purge or evict it
     * before we answer from it */
    if (sws_cs_ref(z, e->ca.slot, ent) == 0)
        t->fresh_off = off;
    else
        off = 0; /* the stale one (still ours) answers instead */
    sws_cs_unlock(z);
    return off;
}

/* Answers the client from the entry at off (one we hold a reference on);
 * 0, or -1 when out of memory (nothing written). */
int answer_from(tee_t *t, uint64_t off, const char *status_line)
{
    sws_engine_t *e = t->e;
    sws_cs_t *z = t->z;
    sws_resp_t *in = t->inner;
    zlock(z);
    sws_cent_t *ent = sws_cs_ent(z, off);
    int rc = serve_entry(e, in, z, ent, &t->req, status_line);
    sws_cs_unlock(z);
    return rc;
}
/* ---- the null response of a background refresh --------------------------------------- */

typedef struct {
    sws_resp_t base;
    const sws_resp_hooks_t *hooks; /* the tee's, when the handler attached */
    void *ctx;
    sws_conn_t conn;               /* sws_cache_null_resp's copy of the client's (fd -1) */
} nullresp_t;

static void n_head(sws_engine_t *e, sws_resp_t *r, int s, const char *rs, size_t rl) {}
static void n_field(sws_engine_t *e, sws_resp_t *r, const char *n, size_t nl, const char *v, size_t vl) {}
static void n_fields(sws_engine_t *e, sws_resp_t *r, const char *l, size_t n) {}
static void n_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len) {}
static void n_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags) {}
static void n_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len, size_t chunk)
{
    sws_filecache_release(e->net.fc, f);
}
static void n_hold_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f) { sws_filecache_release(e->net.fc, f); }
static void n_hold_heap(sws_engine_t *e, sws_resp_t *r, char *buf) { free(buf); }
static void n_done(sws_engine_t *e, sws_resp_t *r) {}
static void n_attach(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *h, void *ctx)
{
    nullresp_t *n = (nullresp_t *)r;
    n->hooks = h;
    n->ctx = ctx;
}
static int n_flush(sws_engine_t *e, sws_resp_t *r) { return 0; }
static int n_backed_up(const sws_resp_t *r) { return 0; }
static void n_want_body(sws_engine_t *e, sws_resp_t *r, int on) {}
static void n_discard(sws_engine_t *e, sws_resp_t *r) {}
static void n_finish(sws_engine_t *e, sws_resp_t *r, int how) { free(r); }
/* The handler drops the exchange (the engine stops, a tunnel ends): the
 * gone hooks run as for a client that left, then the null response goes. */
static void n_close(sws_engine_t *e, sws_resp_t *r)
{
    nullresp_t *n = (nullresp_t *)r;
    if (n->hooks)
        n->hooks->gone(e, n->ctx, SWS_GONE_CLIENT);
    free(n);
}
static void n_hold(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h) { h->release(h); }
static void n_interim(sws_engine_t *e, sws_resp_t *r, int s, const char *rs, size_t rl,
                      const sws_header_t *h, size_t nh) {}
static void n_trailers(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh) {}

static const sws_resp_ops_t null_ops = {
    n_head, n_field, n_fields, n_start_body, n_data, n_file, n_hold_file, n_hold_heap, n_done,
    n_attach, n_flush, n_backed_up, n_want_body, n_discard, n_finish, n_close, n_hold, n_interim,
    n_trailers,
};

sws_resp_t *sws_cache_null_resp(const sws_conn_t *client, const sws_conn_t **conn)
{
    nullresp_t *nr = calloc(1, sizeof *nr);
    if (!nr)
        return NULL;
    nr->base.ops = &null_ops;
    *conn = NULL;
    if (client) { /* the client's connection may close before the exchange ends */
        memcpy(&nr->conn, client, sizeof nr->conn);
        nr->conn.fd = -1;
        *conn = &nr->conn;
    }
    return &nr->base;
}

/* ---- starting a fill -------------------------------------------------------------------- */

/* The request the handler sends: the client's, without the fields a fill
 * must not pass (its conditionals: we want a whole response to keep; Range
 * never reaches a fill), with our validators when revalidating. */
static size_t upstream_fields(const sws_request_t *r, sws_header_t *out, const char *inm,
                              size_t inm_len, const char *ims, size_t ims_len, int strip)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nh; i++) {
        const sws_header_t *h = &r->h[i];
        if (strip && (name_eq(h, "if-none-match", 13) || name_eq(h, "if-modified-since", 17) ||
                      name_eq(h, "if-match", 8) || name_eq(h, "if-unmodified-since", 19) ||
                      name_eq(h, "if-range", 8) || name_eq(h, "range", 5) ||
                      name_eq(h, "upgrade", 7)))
            continue;
        out[n++] = *h;
    }
    if (inm_len)
        out[n++] = (sws_header_t){"If-None-Match", 13, inm, inm_len};
    if (ims_len)
        out[n++] = (sws_header_t){"If-Modified-Since", 17, ims, ims_len};
    return n;
}

/* Starts the handler (start: h's, as the dispatcher gave it) through a
 * tee. mode M_FILL may revalidate stale (stale_off, referenced) and owns
 * pending_off. Returns as start, or SWS_ANSWERED. */
static int start_tee(sws_engine_t *e, tee_t *t, const sws_handler_t *h, sws_start_fn start,
                     const sws_request_t *req, char *body, size_t n, int done)
{
    sws_cs_t *z = t->z;
    char inm[512], ims[SWS_HTTP_DATE_LEN + 1];
    size_t inm_len = 0, ims_len = 0;
    int strip = t->mode == M_FILL;
    if (t->stale_off) {
        zlock(z);
        sws_cent_t *st = sws_cs_ent(z, t->stale_off);
        if (st->etag_len && st->etag_len < sizeof inm) {
            memcpy(inm, ent_head(st) + st->etag_off, st->etag_len);
            inm_len = st->etag_len;
        }
        if (st->hflags & CE_HAS_LM) {
            sws_http_date((time_t)st->last_modified, ims);
            ims_len = SWS_HTTP_DATE_LEN;
        }
        sws_cs_unlock(z);
        if (!inm_len && !ims_len) {
            /* nothing to validate with: a plain fill, the stale one stands in for errors only */
        }
    }
    sws_header_t hs[req->nh + 2];
    sws_request_t up = *req;
    up.nh = upstream_fields(req, hs, inm, inm_len, ims, ims_len, strip);
    up.h = hs;
    int rc = start(e, &t->base, &up, h->data, body, n, done);
    if (rc == 0)
        return 0;
    /* the handler could not start: stale may stand in for the error */
    if (rc >= 500 && !t->bg && t->stale_off && stale_if_error_ok(t) &&
        answer_from(t, t->stale_off, "scalws; hit; detail=stale-if-error") == 0) {
        cnt(&z->c.stale);
        tee_free(t);
        return SWS_ANSWERED;
    }
    tee_free(t);
    return rc;
}

void start_refresh(sws_engine_t *e, const sws_request_t *req, const sws_handler_t *h,
                   sws_start_fn start, sws_cs_t *z, const char *key, size_t kl, uint64_t hash)
{
    look_t lk;
    nullresp_t *nr = calloc(1, sizeof *nr);
    if (!nr)
        return;
    nr->base.ops = &null_ops;
    tee_t *t = tee_new(e, &nr->base, h->cache, z, req, key, kl, hash);
    if (!t) {
        free(nr);
        return;
    }
    t->bg = 1;
    t->mode = M_FILL;
    /* the client's connection may close before the refresh ends */
    if (req->conn) {
        memcpy(&t->conn, req->conn, sizeof t->conn);
        t->conn.fd = -1;
        t->req.conn = &t->conn;
    }
    zlock(z);
    lookup(z, hash, key, kl, req, &lk);
    sws_cent_t *p = NULL;
    if (!lk.pending && lk.ready && sws_cs_ref(z, e->ca.slot, lk.ready) == 0) {
        t->stale_off = sws_cs_off(z, lk.ready);
        p = sws_cs_reserve(z, sizeof(sws_cent_t) + kl, e->ca.slot, 1);
    }
    if (p) {
        p->hash = hash;
        p->key_len = (uint32_t)kl;
        memcpy(p->data, key, kl);
        p->pending_since = (int64_t)e->core.wall;
        sws_cs_publish(z, p, CS_PENDING);
        t->pending_off = sws_cs_off(z, p);
        cnt(&z->c.updating);
    }
    sws_cs_unlock(z);
    if (!p) {
        tee_free(t);
        free(nr);
        return;
    }
    /* a request id of our own: the client's answer is already written */
    char rid[24];
    int rl = snprintf(rid, sizeof rid, "refresh-%llx", (unsigned long long)++e->ca.seq);
    t->req.rid = rid;
    t->req.rid_len = (size_t)rl;
    /* a plain GET whatever the client asked (HEAD, Range, an upgrade):
     * the refresh must bring back a whole, storable response */
    sws_request_info_t info = *req->info;
    info.upgrade = 0;
    info.expect_continue = 0;
    t->req.method = "GET";
    t->req.method_len = 3;
    t->req.method_id = SWS_M_GET;
    sws_request_t r2 = t->req;
    r2.info = &info;
    int rc = start_tee(e, t, h, start, &r2, NULL, 0, 1);
    if (rc != 0)
        free(nr); /* start_tee freed t */
}

/* ---- waiting for another's fill ---------------------------------------------------------- */

struct cwait {
    struct cwait *prev, *next;
    sws_engine_t *e;
    sws_resp_t *r;
    const sws_handler_t *h;
    sws_start_fn start;           /* h's handler */
    sws_cs_t *z;
    uint64_t deadline;            /* monotonic ms */
    tee_t *req;                   /* holds the request's copy (never started) */
    sws_request_info_t info;
};

static void wait_unlink(sws_engine_t *e, cwait_t *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        e->ca.waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

static int w_body_hook(sws_engine_t *e, void *ctx, char *p, size_t n, int done) { return 0; }
static void w_drained(sws_engine_t *e, void *ctx) {}
static void w_gone(sws_engine_t *e, void *ctx, int why)
{
    cwait_t *w = ctx;
    wait_unlink(e, w);
    tee_free(w->req);
    free(w);
}
static const sws_resp_hooks_t wait_hooks = {w_body_hook, w_drained, w_gone};

/* Between a handler that could not start (its tee is gone) and the error
 * page we answer with: nothing of ours is left for the protocol to call. */
static void w_nothing(sws_engine_t *e, void *ctx, int why) {}
static const sws_resp_hooks_t idle_hooks = {w_body_hook, w_drained, w_nothing};

static int fetch(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h,
                 sws_start_fn start, char *body, size_t n, int done, int may_wait, int may_lock);

/* A waiter's turn: a hit now, wait more, or go upstream itself. */
static void wait_retry(sws_engine_t *e, cwait_t *w, int timed_out)
{
    wait_unlink(e, w);
    sws_resp_t *r = w->r;
    tee_t *q = w->req;
    q->req.info = &w->info;
    /* Still filling: wait on (unless timed out). Done without storing:
     * upstream, without taking the lock again (nginx's waiters do the
     * same; an uncacheable answer must not be fetched one at a time). */
    int rc = fetch(e, r, &q->req, w->h, w->start, NULL, 0, 1, !timed_out, 0);
    if (rc == SWS_ANSWERED || rc > 1) {
        r->ops->attach(e, r, &idle_hooks, NULL); /* a failed start left the freed tee's */
        if (rc > 1)
            sws_respond_answer(e, r, &e->rsp.err[err_index(rc)]);
        tee_free(q);
        free(w);
        if (r->ops->flush(e, r) == 0)
            r->ops->finish(e, r, SWS_FIN_OK);
        return;
    }
    tee_free(q);
    free(w);
}

void cache_wake(sws_engine_t *e, void *obj, uint32_t events)
{
    uint64_t v;
    if (read(e->ca.efds[e->ca.slot], &v, 8) < 0 && errno != EAGAIN)
        return;
    cwait_t *list = e->ca.waiters;
    e->ca.waiters = NULL;
    /* every waiter looks again: the fill it waited for may be any of them */
    while (list) {
        cwait_t *w = list;
        list = w->next;
        w->prev = w->next = NULL;
        /* put it back first, so retry's unlink finds it */
        w->next = e->ca.waiters;
        if (e->ca.waiters)
            e->ca.waiters->prev = w;
        e->ca.waiters = w;
        wait_retry(e, w, 0);
    }
}

void sws_cache_tick(sws_engine_t *e)
{
    for (cwait_t *w = e->ca.waiters, *nx; w; w = nx) {
        nx = w->next;
        if (e->core.now >= w->deadline)
            wait_retry(e, w, 1);
    }
}

/* Registers a waiter on pending (lock held); the request waits. */
static int wait_for(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h,
                    sws_start_fn start, sws_cs_t *z, sws_cent_t *pending, uint64_t deadline)
{
    cwait_t *w = calloc(1, sizeof *w);
    tee_t *q = w ? tee_new(e, r, h->cache, z, req, "", 0, 0) : NULL;
    if (!q) {
        free(w);
        return -1;
    }
    pending->waiters |= 1ull << e->ca.slot;
    w->e = e;
    w->r = r;
    w->h = h;
    w->start = start;
    w->z = z;
    w->req = q;
    w->info = *req->info;
    w->deadline = deadline;
    w->next = e->ca.waiters;
    if (e->ca.waiters)
        e->ca.waiters->prev = w;
    e->ca.waiters = w;
    r->ops->attach(e, r, &wait_hooks, w);
    r->ops->want_body(e, r, 0);
    cnt(&z->c.lock_waits);
    return 0;
}

static int fetch(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h,
                 sws_start_fn start, char *body, size_t n, int done, int may_wait, int may_lock)
{
    const sws_cache_route_t *c = h->cache;
    sws_cs_t *z = zone_of(e, c);
    char key[SWS_CACHE_KEY_MAX];
    size_t kl;
    if (!z || req->info->upgrade || expand(&c->key, req, NULL, 0, key, &kl) < 0)
        return start(e, r, req, h->data, body, n, done); /* an upgrade: a tunnel, not ours */
    uint64_t hash = key_hash(key, kl);
    int cacheable = req->method_id == SWS_M_GET || req->method_id == SWS_M_HEAD;
    int unsafe = !cacheable && req->method_id != SWS_M_OPTIONS && req->method_id != SWS_M_TRACE;
    reqcc_t q;
    req_directives(req, &q);
    int bypass = c->n_bypass && condition(c->bypass, c->n_bypass, req);
    int has_body = (req->info->has_content_length && req->info->content_length) || req->info->chunked;
    if (!cacheable || has_body || q.has_range || req->method_id == SWS_M_HEAD) {
        /* Passed through (with Cache-Status): other methods (the unsafe
         * ones invalidate), bodies, Range, and HEAD, which a stored GET
         * answers (sws_cache_answer) but whose miss is not stored. */
        tee_t *t = tee_new(e, r, c, z, req, key, kl, hash);
        if (!t)
            return 500;
        t->mode = unsafe ? M_INVALIDATE : M_PASS;
        t->cs_fwd = !cacheable || has_body ? "method"
                    : q.has_range          ? "miss; detail=range"
                                           : "miss; detail=head";
        if (cacheable)
            cnt(bypass ? &z->c.bypassed : &z->c.misses);
        return start_tee(e, t, h, start, req, body, n, done);
    }
    tee_t *t = tee_new(e, r, c, z, req, key, kl, hash);
    if (!t)
        return 500;
    t->mode = M_FILL;
    int64_t now = (int64_t)e->core.wall;
    look_t lk;
    char st[HIT_STATUS_MAX];
    zlock(z);
    lookup(z, hash, key, kl, req, &lk);
    if (!bypass && lk.ready && usable(lk.ready, &q, now) &&
        serve_entry(e, r, z, lk.ready, req, hit_status(lk.ready, now, "; collapsed", st)) == 0) {
        /* filled while we waited */
        cnt(&z->c.hits);
        if (req->peer)
            e->core.st->peer_hits++;
        sws_cs_unlock(z);
        tee_free(t);
        return SWS_ANSWERED;
    }
    if (!bypass && lk.pending && c->lock && may_wait &&
        now - lk.pending->pending_since < (int64_t)(c->lock_timeout_ms / 1000 + 1)) {
        int rc = wait_for(e, r, req, h, start, z, lk.pending, e->core.now + c->lock_timeout_ms);
        sws_cs_unlock(z);
        tee_free(t);
        return rc < 0 ? 500 : 0;
    }
    if (lk.ready && sws_cs_ref(z, e->ca.slot, lk.ready) == 0) {
        t->stale_off = sws_cs_off(z, lk.ready);
        t->cs_fwd = q.no_cache ? "request" : "stale";
        cnt(&z->c.expired);
    } else if (bypass) {
        t->cs_fwd = "bypass";
        cnt(&z->c.bypassed);
    } else {
        t->cs_fwd = lk.vary_miss ? "vary-miss" : "miss";
        cnt(&z->c.misses);
    }
    if (!bypass && c->lock && !lk.pending && may_lock) {
        sws_cent_t *p = sws_cs_reserve(z, sizeof(sws_cent_t) + kl, e->ca.slot, 1);
        if (p) {
            p->hash = hash;
            p->key_len = (uint32_t)kl;
            memcpy(p->data, key, kl);
            p->pending_since = now;
            sws_cs_publish(z, p, CS_PENDING);
            t->pending_off = sws_cs_off(z, p);
        }
    }
    sws_cs_unlock(z);
    return start_tee(e, t, h, start, req, body, n, done);
}

int sws_cache_fetch(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h,
                    sws_start_fn start, char *body, size_t n, int done)
{
    return fetch(e, r, req, h, start, body, n, done, 1, 1);
}
