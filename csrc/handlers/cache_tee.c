/* The storing tee (scalws/cache.h, cache_int.h): an sws_resp_t between the
 * handler (proxy, FastCGI) and the protocol on a miss. It keeps the head
 * and body it sees, decides at start_body whether the response is stored
 * (RFC 9111 3) and what the client gets (the response, a 304 for its own
 * conditionals, or nothing when a revalidation's 304 or stale standing in
 * for an error answers instead: cache_reval.c), stores at finish, and
 * invalidates on unsafe methods (RFC 9111 4.4). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cache_int.h"
#include "scalws/httpdate.h"

/* ---- the tee: between the handler and the protocol on a miss --------------------------- */

static const sws_resp_ops_t tee_ops;
static const sws_resp_hooks_t tee_hooks;

/* Ends our collapsed-miss lock: the pending entry goes and the workers
 * that wait on it are woken (they find the stored answer, or go upstream). */
static void release_pending(tee_t *t)
{
    if (!t->pending_off)
        return;
    sws_cs_t *z = t->z;
    uint64_t wake = 0;
    zlock(z);
    sws_cent_t *p = sws_cs_ent(z, t->pending_off);
    if (p->state == CS_PENDING && p->filler == t->e->ca.slot + 1) {
        wake = p->waiters;
        sws_cs_unlink(z, p);
    }
    sws_cs_unlock(z);
    t->pending_off = 0;
    for (int i = 0; wake && i < SWS_CS_HOLDERS; i++)
        if (wake & (1ull << i)) {
            uint64_t one = 1;
            if (write(t->e->ca.efds[i], &one, 8) < 0) {
                /* a full counter wakes it anyway */
            }
        }
}

void tee_free(tee_t *t)
{
    sws_cs_t *z = t->z;
    release_pending(t);
    if (t->stale_off || t->fresh_off) {
        zlock(z);
        if (t->stale_off)
            sws_cs_unref(z, t->e->ca.slot, t->stale_off);
        if (t->fresh_off)
            sws_cs_unref(z, t->e->ca.slot, t->fresh_off);
        sws_cs_unlock(z);
    }
    free(t->reason);
    free(t->fl);
    free(t->body);
    free(t->loc[0]);
    free(t->loc[1]);
    free(t->rh);
    free(t->rq);
    free(t);
}

static int fl_add(tee_t *t, const char *p, size_t n)
{
    if (!n)
        return 0; /* t->fl may be NULL yet: memcpy's arguments may not */
    if (t->fl_len + n > t->fl_cap) {
        size_t cap = t->fl_cap ? t->fl_cap * 2 : 1024;
        while (cap < t->fl_len + n)
            cap *= 2;
        char *nf = realloc(t->fl, cap);
        if (!nf)
            return -1;
        t->fl = nf;
        t->fl_cap = cap;
    }
    memcpy(t->fl + t->fl_len, p, n);
    t->fl_len += n;
    return 0;
}

static void tee_head(sws_engine_t *e, sws_resp_t *r, int status, const char *reason, size_t rl)
{
    tee_t *t = (tee_t *)r;
    t->status = status;
    t->fl_len = 0;
    t->stored_len = 0;
    free(t->reason);
    t->reason = NULL;
    if (reason && rl && (t->reason = malloc(rl)) != NULL) {
        memcpy(t->reason, reason, rl);
        t->reason_len = rl;
    }
    sws_cc_init(&t->cc);
    t->rs = (sws_cc_resp_t){status, INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, 0, 0};
    t->set_cookie = t->vary_star = t->age_seen = 0;
    for (size_t i = 0; i < SWS_CACHE_TARGETED_MAX; i++)
        sws_tcc_init(&t->tcc[i]);
    t->vary_names_len = t->tags_len = 0;
    t->etag_off = -1;
}

static void note_vary(tee_t *t, const char *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == ',' || v[i] == '\t'))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
            i++;
        if (i == s)
            continue;
        if (i - s == 1 && v[s] == '*') {
            t->vary_star = 1;
            continue;
        }
        if (t->vary_names_len + (i - s) + 1 > sizeof t->vary_names) {
            t->vary_star = 1; /* too many to key on: not stored */
            continue;
        }
        for (size_t k = s; k < i; k++) {
            char ch = v[k];
            t->vary_names[t->vary_names_len++] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
        t->vary_names[t->vary_names_len++] = '\0';
    }
}

/* A field of the route's target list (RFC 9213): parsed unless the route
 * ignores Cache-Control (whose meaning it carries). 1 when the route
 * removes it from responses. */
static int targeted_field(tee_t *t, const sws_header_t *h)
{
    const sws_cache_route_t *c = t->c;
    for (size_t i = 0; i < c->n_targeted && i < SWS_CACHE_TARGETED_MAX; i++) {
        if (!name_eq(h, c->targeted[i].name, c->targeted[i].name_len))
            continue;
        if (!(c->ignore & SWS_CI_CACHE_CONTROL))
            sws_tcc_parse(&t->tcc[i], h->value, h->value_len);
        return (c->targeted_remove >> i) & 1;
    }
    return 0;
}

static void tee_field(sws_engine_t *e, sws_resp_t *r, const char *name, size_t nl, const char *value,
                      size_t vl)
{
    tee_t *t = (tee_t *)r;
    sws_header_t h = {name, nl, value, vl};
    int store_it = 1;
    if (name_eq(&h, "date", 4)) {
        int64_t d;
        if (sws_parse_http_date(value, vl, &d) == 0)
            t->rs.date = d;
        return; /* the protocol writes its own */
    }
    if (name_eq(&h, "age", 3)) {
        /* RFC 9111 5.1: the first member of the first line that has one;
         * an invalid one is ignored, as if absent */
        if (!t->age_seen) {
            int64_t a = sws_cc_age(value, vl);
            t->age_seen = a != SWS_CC_AGE_NONE;
            if (a >= 0)
                t->rs.age = a;
        }
        store_it = 0; /* hits compute their own */
    } else if (name_eq(&h, "cache-control", 13)) {
        if (!(t->c->ignore & SWS_CI_CACHE_CONTROL))
            sws_cc_parse(&t->cc, value, vl);
    } else if (name_eq(&h, "expires", 7)) {
        if (!(t->c->ignore & SWS_CI_EXPIRES)) {
            int64_t x;
            if (t->rs.expires != INT64_MIN || t->rs.expires_invalid)
                t->rs.expires_multiple = 1;
            if (sws_parse_http_date(value, vl, &x) == 0)
                t->rs.expires = x;
            else
                t->rs.expires_invalid = 1;
        }
    } else if (name_eq(&h, "last-modified", 13)) {
        int64_t x;
        if (sws_parse_http_date(value, vl, &x) == 0)
            t->rs.last_modified = x;
    } else if (name_eq(&h, "set-cookie", 10)) {
        t->set_cookie = 1;
        store_it = (t->c->ignore & SWS_CI_SET_COOKIE) != 0; /* then it goes out on every hit */
    } else if (name_eq(&h, "vary", 4)) {
        if (!(t->c->ignore & SWS_CI_VARY))
            note_vary(t, value, vl);
    } else if (name_eq(&h, "x-request-id", 12) || name_eq(&h, "cache-status", 12)) {
        store_it = 0;
    } else if (targeted_field(t, &h)) {
        return; /* removed: neither passed on nor stored */
    } else if (name_eq(&h, "location", 8) || name_eq(&h, "content-location", 16)) {
        int k = nl == 8 ? 0 : 1;
        free(t->loc[k]);
        if ((t->loc[k] = malloc(vl)) != NULL) {
            memcpy(t->loc[k], value, vl);
            t->loc_len[k] = vl;
        }
    }
    for (size_t i = 0; i < t->c->n_tags; i++)
        if (name_eq(&h, t->c->tags[i].name, t->c->tags[i].name_len) &&
            t->tags_len + vl + 1 <= sizeof t->tags) {
            memcpy(t->tags + t->tags_len, value, vl);
            t->tags_len += vl;
            t->tags[t->tags_len++] = ' ';
        }
    /* Stored fields first, then the per-request ones: fl is two runs. A
     * field that is not stored is kept after a marker byte. */
    size_t start = t->fl_len;
    if (fl_add(t, store_it ? "" : "\x01", store_it ? 0 : 1) < 0 || fl_add(t, name, nl) < 0 ||
        fl_add(t, ": ", 2) < 0) {
        t->fl_len = start; /* no half line: fl stays whole lines */
        t->oom = 1;
        return;
    }
    size_t voff = t->fl_len;
    if (fl_add(t, value, vl) < 0 || fl_add(t, "\r\n", 2) < 0) {
        t->fl_len = start;
        t->oom = 1;
        return;
    }
    if (name_eq(&h, "etag", 4) && store_it) {
        t->etag_off = (int64_t)voff;
        t->etag_len = vl;
    }
}

static void tee_fields(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len)
{
    /* the route's own lines (headers.response.set): parsed like any field */
    const char *p = lines, *end = lines + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            break;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            const char *v = colon + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = eol;
            if (ve > v && ve[-1] == '\r')
                ve--;
            tee_field(e, r, p, (size_t)(colon - p), v, (size_t)(ve - v));
        }
        p = eol + 1;
    }
}

/* Builds the stored head from fl: the stored fields in order; the ETag
 * offset is moved with them. Returns its length in out (malloc'd). */
size_t stored_head(tee_t *t, char **out, int64_t *etag_off)
{
    char *h = malloc(t->fl_len + 1);
    size_t n = 0;
    *etag_off = -1;
    if (!h) {
        *out = NULL;
        return 0;
    }
    const char *p = t->fl, *end = t->fl + t->fl_len;
    while (p < end) {
        int keep = *p != '\x01';
        if (!keep)
            p++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)(eol - p + 1);
        if (keep) {
            if (t->etag_off >= 0 && (size_t)t->etag_off >= (size_t)(p - t->fl) &&
                (size_t)t->etag_off < (size_t)(p - t->fl) + len)
                *etag_off = (int64_t)(n + ((size_t)t->etag_off - (size_t)(p - t->fl)));
            memcpy(h + n, p, len);
            n += len;
        }
        p += len;
    }
    *out = h;
    return n;
}

/* Passes fl on to the inner response, field by field (copied: fl is
 * freed with the tee, maybe before the client took the output). */
static void forward_fields(tee_t *t, int not_modified)
{
    lines_out(t->e, t->inner, t->fl, t->fl_len, not_modified ? not_modified_keep : NULL,
              not_modified ? NM_KEEP : 0);
}

static int storable_status(int s)
{
    switch (s) {
    case 200: case 203: case 204: case 300: case 301: case 302: case 307: case 308:
    case 404: case 405: case 410: case 414: case 501:
        return 1;
    default:
        return 0;
    }
}

static int64_t valid_for(const sws_cache_route_t *c, int status)
{
    for (size_t i = 0; i < c->n_valid; i++)
        if (!c->valid[i].status || c->valid[i].status == status)
            return c->valid[i].secs;
    return -1;
}

int64_t lifetime_of(tee_t *t)
{
    if (t->rs.date == INT64_MIN)
        t->rs.date = t->e->core.wall; /* we are the first to see it */
    int heuristic = sws_cc_heuristic_status(t->status) || (t->cc.flags & SWS_CC_PUBLIC);
    int64_t l = sws_cc_lifetime(&t->cc, &t->rs, heuristic, valid_for(t->c, t->status));
    if (l < 0 && (t->cc.flags & SWS_CC_NO_CACHE) && (t->etag_off >= 0 || t->rs.last_modified != INT64_MIN))
        l = 0; /* stored to be revalidated every time */
    return l;
}

/* Decides whether this response is kept, from its fields. */
static int decide_store(tee_t *t, int kind, uint64_t len)
{
    const sws_cache_route_t *c = t->c;
    if (t->mode != M_FILL || t->discarded || t->oom || t->base.local_answer ||
        t->req.method_id != SWS_M_GET)
        return 0; /* local_answer: the handler's own error page, not the upstream's */
    if (kind == SWS_BODY_TUNNEL || t->status < 200 || t->status == 206 || t->status == 304)
        return 0;
    /* RFC 9111 3: a final status with explicit freshness, or one a cache
     * may give heuristic freshness (or `valid`) to; must-understand: only
     * statuses we understand, and then despite no-store (5.2.2.3) */
    int explicit = t->cc.max_age != SWS_CC_NONE || t->cc.s_maxage != SWS_CC_NONE ||
                   t->rs.expires != INT64_MIN || t->rs.expires_invalid;
    if (!explicit && !storable_status(t->status) && valid_for(c, t->status) < 0 &&
        !(t->cc.flags & SWS_CC_PUBLIC))
        return 0;
    if (t->cc.flags & SWS_CC_MUST_UNDERSTAND) {
        if (!sws_cc_understood_status(t->status))
            return 0;
    } else if (t->cc.flags & SWS_CC_NO_STORE) {
        return 0;
    }
    if (t->cc.flags & SWS_CC_PRIVATE)
        return 0;
    if (t->set_cookie && !(c->ignore & SWS_CI_SET_COOKIE))
        return 0;
    if (t->vary_star)
        return 0;
    if (find_header(&t->req, "authorization", 13) &&
        !(t->cc.flags & (SWS_CC_PUBLIC | SWS_CC_MUST_REVALIDATE)) && t->cc.s_maxage == SWS_CC_NONE)
        return 0;
    reqcc_t q;
    req_directives(&t->req, &q);
    if (q.cc.flags & SWS_CC_NO_STORE)
        return 0;
    if (c->n_no_store && condition(c->no_store, c->n_no_store, &t->req))
        return 0;
    if (kind == SWS_BODY_LENGTH && len > c->max_object_size)
        return 0;
    if (t->fl_len > SWS_CACHE_HEAD_MAX)
        return 0;
    return lifetime_of(t) >= 0; /* no freshness to give it: not kept */
}

/* Invalidation (RFC 9111 4.4): a non-error answer to an unsafe method
 * drops the stored responses of the target URI, and of Location and
 * Content-Location when they name the same host. */
static void invalidate(tee_t *t)
{
    char key[SWS_CACHE_KEY_MAX];
    size_t kl;
    sws_cs_t *z = t->z;
    size_t n = 0;
    zlock(z);
    if (expand(&t->c->key, &t->req, t->req.target, t->req.target_len, key, &kl) == 0)
        n += drop_key(z, key_hash(key, kl), key, kl);
    for (int i = 0; i < 2; i++) {
        const char *u = t->loc[i];
        size_t ul = t->loc_len[i];
        if (!u)
            continue;
        /* an absolute URL on the request's host, or a path */
        for (int s = 0; s < 2; s++) {
            const char *sc = s ? "https://" : "http://";
            size_t sl = strlen(sc);
            if (ul > sl && strncasecmp(u, sc, sl) == 0) {
                if (t->req.host && ul >= sl + t->req.host_len &&
                    strncasecmp(u + sl, t->req.host, t->req.host_len) == 0) {
                    u += sl + t->req.host_len;
                    ul -= sl + t->req.host_len;
                } else {
                    ul = 0;
                }
                break;
            }
        }
        if (!ul || u[0] != '/')
            continue;
        if (expand(&t->c->key, &t->req, u, ul, key, &kl) == 0)
            n += drop_key(z, key_hash(key, kl), key, kl);
    }
    __atomic_fetch_add(&z->c.purged, n, __ATOMIC_RELAXED);
    sws_cs_unlock(z);
}

/* The client's preconditions against the new response: 304? */
static int client_not_modified(tee_t *t)
{
    if (t->status != 200)
        return 0;
    sws_cond_fields_t f = {0};
    const sws_header_t *h = find_header(&t->req, "if-none-match", 13);
    if (h) {
        f.if_none_match = h->value;
        f.if_none_match_len = h->value_len;
    }
    h = find_header(&t->req, "if-modified-since", 17);
    if (h) {
        f.if_modified_since = h->value;
        f.if_modified_since_len = h->value_len;
    }
    if (!f.if_none_match && !f.if_modified_since)
        return 0;
    const char *etag = t->etag_off >= 0 ? t->fl + t->etag_off : NULL;
    int64_t lm = t->rs.last_modified != INT64_MIN ? t->rs.last_modified : SWS_NO_LAST_MODIFIED;
    return sws_evaluate_preconditions(&f, etag, t->etag_len, lm, 1) == SWS_COND_NOT_MODIFIED;
}

static void tee_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    tee_t *t = (tee_t *)r;
    t->expect_len = kind == SWS_BODY_LENGTH ? len : 0;
    t->body_len = 0;
    t->complete = 0;
    /* RFC 9213 2.1: a targeted field, when valid, is the policy from here on */
    sws_tcc_apply(t->tcc, t->c->n_targeted < SWS_CACHE_TARGETED_MAX ? t->c->n_targeted
                                                                   : SWS_CACHE_TARGETED_MAX,
                  &t->cc, &t->rs);
    if (t->mode == M_INVALIDATE && t->status < 400)
        invalidate(t);
    /* a revalidation answered 304, or an error with a stale entry that may
     * stand in: the upstream's answer is not passed on (tee_finish) */
    if (t->stale_off && (t->status == 304 || (t->status >= 500 && stale_if_error_ok(t)))) {
        t->swallow = 1;
        return;
    }
    t->store = decide_store(t, kind, len);
    if (!t->store)
        release_pending(t); /* nothing to wait for: the waiters go upstream now */
    if (t->store && kind == SWS_BODY_LENGTH && len) {
        t->body = malloc(len);
        t->body_cap = t->body ? len : 0;
        if (!t->body)
            t->store = 0;
    }
    if (t->bg) {
        t->swallow = 1; /* nobody to answer: only the store */
        return;
    }
    t->not_mod = t->mode == M_FILL && t->store && client_not_modified(t);
    sws_resp_t *in = t->inner;
    in->ops->head(e, in, t->not_mod ? 304 : t->status, t->not_mod ? NULL : t->reason,
                  t->not_mod ? 0 : t->reason_len);
    forward_fields(t, t->not_mod);
    {
        char st[96];
        snprintf(st, sizeof st, "scalws; fwd=%s; fwd-status=%d%s", t->cs_fwd, t->status,
                 t->store ? "; stored" : "");
        resp_field_lit(e, in, "Cache-Status", st, strlen(st));
    }
    t->fwd_started = 1;
    if (t->not_mod)
        in->ops->start_body(e, in, SWS_BODY_NONE, 0);
    else
        in->ops->start_body(e, in, kind, len);
}

static void tee_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags)
{
    tee_t *t = (tee_t *)r;
    if (t->store) {
        if (t->body_len + n > t->c->max_object_size) {
            t->store = 0;
        } else {
            if (t->body_len + n > t->body_cap) {
                uint64_t cap = t->body_cap ? t->body_cap * 2 : 16384;
                while (cap < t->body_len + n)
                    cap *= 2;
                char *nb = realloc(t->body, cap);
                if (!nb) {
                    t->store = 0;
                    goto fwd;
                }
                t->body = nb;
                t->body_cap = cap;
            }
            memcpy(t->body + t->body_len, p, n);
            t->body_len += n;
        }
    }
fwd:
    if (!t->swallow && !t->not_mod)
        t->inner->ops->data(e, t->inner, p, n, flags);
}

static void tee_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len,
                     size_t chunk)
{
    tee_t *t = (tee_t *)r;
    t->store = 0; /* handlers of this cache never send files */
    t->inner->ops->file(e, t->inner, f, off, len, chunk);
}

static void tee_hold_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f)
{
    tee_t *t = (tee_t *)r;
    t->inner->ops->hold_file(e, t->inner, f);
}

static void tee_hold_heap(sws_engine_t *e, sws_resp_t *r, char *buf)
{
    tee_t *t = (tee_t *)r;
    t->inner->ops->hold_heap(e, t->inner, buf);
}

static void tee_hold(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h)
{
    tee_t *t = (tee_t *)r;
    t->inner->ops->hold(e, t->inner, h);
}

static void tee_done(sws_engine_t *e, sws_resp_t *r)
{
    tee_t *t = (tee_t *)r;
    t->complete = 1;
    if (!t->swallow)
        t->inner->ops->done(e, t->inner);
}

static void tee_attach(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *hooks, void *ctx)
{
    tee_t *t = (tee_t *)r;
    t->hooks = hooks;
    t->hctx = ctx;
    t->inner->ops->attach(e, t->inner, &tee_hooks, t);
}

static int tee_flush(sws_engine_t *e, sws_resp_t *r)
{
    tee_t *t = (tee_t *)r;
    return t->inner->ops->flush(e, t->inner); /* -1: gone ran, t is freed */
}

static int tee_backed_up(const sws_resp_t *r)
{
    const tee_t *t = (const tee_t *)r;
    return t->inner->ops->backed_up(t->inner);
}

static void tee_want_body(sws_engine_t *e, sws_resp_t *r, int on)
{
    tee_t *t = (tee_t *)r;
    t->inner->ops->want_body(e, t->inner, on);
}

static void tee_discard(sws_engine_t *e, sws_resp_t *r)
{
    tee_t *t = (tee_t *)r;
    t->discarded = 1;
    t->store = 0;
    t->swallow = 0;
    t->fwd_started = 0;
    t->inner->ops->discard(e, t->inner);
}

/* Stores the response (a reserved entry, filled outside the lock). */
static void commit(tee_t *t)
{
    sws_engine_t *e = t->e;
    sws_cs_t *z = t->z;
    int64_t life = lifetime_of(t);
    if (life < 0)
        return;
    char *head;
    int64_t etag_off;
    size_t head_len = stored_head(t, &head, &etag_off);
    if (!head)
        return;
    /* Vary: the request's values of the named fields */
    char vary[VARY_MAX * 2];
    size_t vlen = 0;
    int nvary = 0;
    for (size_t i = 0; i < t->vary_names_len;) {
        const char *name = t->vary_names + i;
        size_t nl = strlen(name);
        i += nl + 1;
        char val[VARY_MAX];
        ssize_t got = vary_value(&t->req, name, nl, val, sizeof val);
        if (got == -2 || vlen + nl + (got > 0 ? (size_t)got : 0) + 4 > sizeof vary) {
            free(head);
            return;
        }
        memcpy(vary + vlen, name, nl + 1);
        vlen += nl + 1;
        vary[vlen++] = got < 0 ? '-' : '+';
        if (got > 0) {
            memcpy(vary + vlen, val, (size_t)got);
            vlen += (size_t)got;
        }
        vary[vlen++] = '\0';
        nvary++;
    }
    size_t kl = strlen(t->key);
    uint64_t bytes = sizeof(sws_cent_t) + kl + vlen + t->tags_len + head_len + t->body_len;
    zlock(z);
    sws_cent_t *ent = sws_cs_reserve(z, bytes, e->ca.slot, 0);
    sws_cs_unlock(z);
    if (!ent) {
        cnt(&z->c.store_failed);
        free(head);
        return;
    }
    ent->hash = t->hash;
    int64_t now = (int64_t)e->core.wall;
    ent->response_time = now;
    ent->initial_age = sws_cc_initial_age(&t->rs, t->request_time, now);
    ent->lifetime = life;
    ent->last_modified = t->rs.last_modified;
    sws_http_date((time_t)t->rs.date, ent->date); /* lifetime_of set it (now when absent) */
    ent->swr = t->cc.stale_while_revalidate != SWS_CC_NONE ? (uint32_t)t->cc.stale_while_revalidate : 0;
    ent->sie = t->cc.stale_if_error != SWS_CC_NONE ? (uint32_t)t->cc.stale_if_error : 0;
    ent->hflags = ((t->cc.flags & SWS_CC_NO_CACHE) ? CE_NO_CACHE : 0) |
                  ((t->cc.flags & (SWS_CC_MUST_REVALIDATE | SWS_CC_PROXY_REVALIDATE)) ||
                           t->cc.s_maxage != SWS_CC_NONE ? CE_MUST_REVALIDATE : 0) |
                  ((t->cc.flags & (SWS_CC_PUBLIC | SWS_CC_MUST_REVALIDATE)) ||
                           t->cc.s_maxage != SWS_CC_NONE ? CE_AUTH_OK : 0) |
                  (t->rs.last_modified != INT64_MIN ? CE_HAS_LM : 0);
    if (!(t->cc.flags & (SWS_CC_MUST_REVALIDATE | SWS_CC_PROXY_REVALIDATE)))
        ent->hflags &= ~(uint32_t)CE_MUST_REVALIDATE; /* s-maxage: proxy-revalidate only with it */
    if (t->cc.s_maxage != SWS_CC_NONE)
        ent->hflags |= CE_MUST_REVALIDATE; /* RFC 9111 5.2.2.10 */
    ent->status = (uint16_t)t->status;
    ent->nvary = (uint16_t)nvary;
    ent->key_len = (uint32_t)kl;
    ent->vary_len = (uint32_t)vlen;
    ent->tags_len = (uint32_t)t->tags_len;
    ent->head_len = (uint32_t)head_len;
    ent->etag_off = etag_off >= 0 ? (uint32_t)etag_off : 0;
    ent->etag_len = etag_off >= 0 ? (uint32_t)t->etag_len : 0;
    ent->body_len = t->body_len;
    char *d = ent->data;
    memcpy(d, t->key, kl);
    memcpy(d + kl, vary, vlen);
    memcpy(d + kl + vlen, t->tags, t->tags_len);
    memcpy(d + kl + vlen + t->tags_len, head, head_len);
    if (t->body_len)
        memcpy(d + kl + vlen + t->tags_len + head_len, t->body, t->body_len);
    free(head);
    zlock(z);
    if (ent->gen != z->gen || ent->state != CS_FILLING || ent->filler != e->ca.slot + 1) {
        sws_cs_unlock(z); /* the heap was formatted again: the block is not ours any more */
        return;
    }
    /* the entries this one replaces: same key, same Vary values */
    for (uint64_t o = sws_cs_chain(z, t->hash); o;) {
        sws_cent_t *old = sws_cs_ent(z, o);
        o = old->bnext;
        if (old->state == CS_READY && old->hash == t->hash && old->key_len == kl &&
            !memcmp(ent_key(old), t->key, kl) && vary_matches(old, &t->req))
            sws_cs_unlink(z, old);
    }
    sws_cs_publish(z, ent, CS_READY);
    cnt(&z->c.stored);
    sws_cs_unlock(z);
}

static void tee_finish(sws_engine_t *e, sws_resp_t *r, int how)
{
    tee_t *t = (tee_t *)r;
    sws_resp_t *in = t->inner;
    t->finishing = 1;
    /* whole: done was called (a stream's end), or every byte of a length
     * arrived (a body of none or a length gets no done from the proxy) */
    int ok = how == SWS_FIN_OK && !t->discarded && (t->complete || t->body_len == t->expect_len);
    if (t->store && ok && (!t->expect_len || t->body_len == t->expect_len))
        commit(t);
    if (t->swallow && t->bg) {
        if (t->status == 304 && ok)
            refresh(t); /* a background revalidation: the entry is fresh again */
    } else if (t->swallow) {
        /* a revalidation's 304, or stale standing in for an error */
        uint64_t off = 0;
        char line[96];
        snprintf(line, sizeof line, "scalws; fwd=%s; fwd-status=304", t->cs_fwd);
        if (t->status == 304 && ok)
            off = refresh(t);
        if (!off) {
            off = t->stale_off; /* referenced by us: its bytes are there, stored or not */
            if (t->status != 304) {
                snprintf(line, sizeof line, "scalws; hit; detail=stale-if-error");
                cnt(&t->z->c.stale);
            }
        }
        if (answer_from(t, off, line) < 0)
            sws_respond_answer(e, in, &e->rsp.err[SWS_ERR_500]);
        if (in->ops->flush(e, in) < 0) {
            tee_free(t); /* the client left: its exchange is gone */
            return;
        }
        how = SWS_FIN_OK;
    }
    tee_free(t);
    in->ops->finish(e, in, how);
}

static void tee_close(sws_engine_t *e, sws_resp_t *r)
{
    tee_t *t = (tee_t *)r;
    t->inner->ops->close(e, t->inner); /* gone runs: t is freed */
}

/* A 1xx goes to the client as it comes and is never stored (RFC 9111 §3:
 * what a cache stores is a final response). */
static void tee_interim(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                        size_t rl, const sws_header_t *h, size_t nh)
{
    tee_t *t = (tee_t *)r;
    t->inner->ops->interim(e, t->inner, status, reason, rl, h, nh); /* a refresh's: dropped */
}

/* Trailers reach the client whole and are not stored: RFC 9111 §3.1 lets
 * a cache discard them, and a hit answers without. */
static void tee_trailers(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh)
{
    tee_t *t = (tee_t *)r;
    if (!t->swallow && !t->not_mod)
        t->inner->ops->trailers(e, t->inner, h, nh);
}

static const sws_resp_ops_t tee_ops = {
    tee_head, tee_field, tee_fields, tee_start_body, tee_data, tee_file, tee_hold_file,
    tee_hold_heap, tee_done, tee_attach, tee_flush, tee_backed_up, tee_want_body, tee_discard,
    tee_finish, tee_close, tee_hold, tee_interim, tee_trailers,
};

/* The protocol's hooks, passed on to the handler. */
static int th_body(sws_engine_t *e, void *ctx, char *p, size_t n, int done)
{
    tee_t *t = ctx;
    return t->hooks->body(e, t->hctx, p, n, done);
}

static void th_drained(sws_engine_t *e, void *ctx)
{
    tee_t *t = ctx;
    t->hooks->drained(e, t->hctx);
}

static void th_gone(sws_engine_t *e, void *ctx, int why)
{
    tee_t *t = ctx;
    if (t->finishing) {
        t->client_gone = 1; /* tee_finish sees the flush fail and frees */
        return;
    }
    t->hooks->gone(e, t->hctx, why);
    tee_free(t);
}

static const sws_resp_hooks_t tee_hooks = {th_body, th_drained, th_gone};

/* ---- a tee for a request ---------------------------------------------------------------- */

/* A copy of the request in one allocation, with the conditional fields
 * replaced: the client's own are kept for its answer (t->req), the
 * upstream gets ours (out). */
static int copy_request(tee_t *t, const sws_request_t *r)
{
    size_t bytes = r->method_len + r->target_len + r->host_len + r->path_len + r->raw_len;
    for (size_t i = 0; i < r->nh; i++)
        bytes += r->h[i].name_len + r->h[i].value_len;
    t->rq = malloc(bytes + 1);
    t->rh = malloc((r->nh + 3) * sizeof(sws_header_t));
    if (!t->rq || !t->rh)
        return -1;
    char *q = t->rq;
#define CP(dst, src, n)                                                                            \
    do {                                                                                           \
        memcpy(q, src, n);                                                                         \
        dst = q;                                                                                   \
        q += n;                                                                                    \
    } while (0)
    t->req = *r;
    CP(t->req.method, r->method, r->method_len);
    CP(t->req.target, r->target, r->target_len);
    if (r->host)
        CP(t->req.host, r->host, r->host_len);
    CP(t->req.path, r->path, r->path_len);
    /* raw_path and query point into the target */
    t->req.raw_path = t->req.target + (r->raw_path - r->target);
    if (r->raw_path < r->target || r->raw_path > r->target + r->target_len)
        CP(t->req.raw_path, r->raw_path, r->raw_len);
    t->req.query = r->query_len ? t->req.target + (r->query - r->target) : NULL;
    for (size_t i = 0; i < r->nh; i++) {
        CP(t->rh[i].name, r->h[i].name, r->h[i].name_len);
        CP(t->rh[i].value, r->h[i].value, r->h[i].value_len);
        t->rh[i].name_len = r->h[i].name_len;
        t->rh[i].value_len = r->h[i].value_len;
    }
#undef CP
    t->req.h = t->rh;
    t->req.info = r->info; /* used only during start */
    return 0;
}

tee_t *tee_new(sws_engine_t *e, sws_resp_t *inner, const sws_cache_route_t *c, sws_cs_t *z,
               const sws_request_t *req, const char *key, size_t kl, uint64_t hash)
{
    tee_t *t = calloc(1, sizeof *t + kl + 1);
    if (!t)
        return NULL;
    t->base.ops = &tee_ops;
    t->base.upstream_date = 1;
    t->inner = inner;
    t->e = e;
    t->c = c;
    t->z = z;
    t->hash = hash;
    memcpy(t->key, key, kl);
    t->etag_off = -1;
    t->request_time = (int64_t)e->core.wall;
    t->cs_fwd = "miss";
    if (copy_request(t, req) < 0) {
        tee_free(t);
        return NULL;
    }
    return t;
}
