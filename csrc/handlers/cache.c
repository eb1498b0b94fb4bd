/* The response cache (scalws/cache.h): hits answered from the shared
 * store, misses collapsed onto one fill, the tee that stores, revalidates
 * and answers stale, PURGE. RFC 9111's arithmetic is in the leaf
 * csrc/http/cachecc.c; memory and the index in csrc/cache/store.c. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "context.h"
#include "proxy_int.h"
#include "scalws/cache.h"
#include "scalws/cachecc.h"
#include "scalws/httpcond.h"
#include "scalws/httpdate.h"

/* Semantic flags of a stored entry (sws_cent_t.hflags). */
enum {
    CE_NO_CACHE = 1,        /* revalidate before every use */
    CE_MUST_REVALIDATE = 2, /* never served stale */
    CE_AUTH_OK = 4,         /* may answer requests with Authorization */
    CE_HAS_LM = 8,
};

#define TAGS_MAX 1024
#define VARY_MAX 2048

static inline sws_cs_t *zone_of(sws_engine_t *e, const sws_cache_route_t *c)
{
    return e->ca.slot >= 0 && c->zone >= 0 && (size_t)c->zone < e->ca.n_zones ? e->ca.zones[c->zone]
                                                                            : NULL;
}

static inline void cnt(uint64_t *c) { __atomic_fetch_add(c, 1, __ATOMIC_RELAXED); }

/* The worker's engine, for the one log line below (one engine per process). */
static sws_engine_t *g_engine;

/* A zone's mutex; a previous owner that died holding it made the store
 * rebuild its index from the blocks: said once, at warn. */
static void zlock(sws_cs_t *z)
{
    if (sws_cs_lock(z) && g_engine)
        elog(g_engine, SWS_L_WARN, "cache: a process died holding a zone's lock; its index was "
             "rebuilt from the stored blocks (%llu entries)", (unsigned long long)z->c.entries);
}

static int name_eq(const sws_header_t *h, const char *lower, size_t n)
{
    return h->name_len == n && strncasecmp(h->name, lower, n) == 0;
}

/* ---- keys ---------------------------------------------------------------------------- */

static int put(char *out, size_t *len, const char *s, size_t n)
{
    if (*len + n > SWS_CACHE_KEY_MAX)
        return -1;
    memcpy(out + *len, s, n);
    *len += n;
    return 0;
}

/* The value of cookie `name` in the request's Cookie fields. */
static int cookie_value(const sws_request_t *r, const char *name, size_t nl, const char **v, size_t *vl)
{
    for (size_t i = 0; i < r->nh; i++) {
        if (!name_eq(&r->h[i], "cookie", 6))
            continue;
        const char *p = r->h[i].value, *end = p + r->h[i].value_len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == ';'))
                p++;
            const char *eq = memchr(p, '=', (size_t)(end - p));
            const char *semi = memchr(p, ';', (size_t)(end - p));
            if (!semi)
                semi = end;
            if (eq && eq < semi && (size_t)(eq - p) == nl && memcmp(p, name, nl) == 0) {
                *v = eq + 1;
                *vl = (size_t)(semi - eq - 1);
                return 1;
            }
            p = semi;
        }
    }
    return 0;
}

static int arg_value(const sws_request_t *r, const char *name, size_t nl, const char **v, size_t *vl)
{
    const char *p = r->query, *end = r->query + r->query_len;
    while (r->query_len && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        if (!amp)
            amp = end;
        const char *eq = memchr(p, '=', (size_t)(amp - p));
        const char *ne = eq ? eq : amp;
        if ((size_t)(ne - p) == nl && memcmp(p, name, nl) == 0) {
            *v = eq ? eq + 1 : amp;
            *vl = eq ? (size_t)(amp - eq - 1) : 0;
            return 1;
        }
        p = amp + 1;
    }
    return 0;
}

/* Expands a template for the request; uri (the target's path and query)
 * replaces the request's own when given (invalidation of Location). */
static int expand(const sws_cktmpl_t *t, const sws_request_t *r, const char *uri, size_t uri_len,
                  char *out, size_t *len)
{
    *len = 0;
    const char *target = uri ? uri : r->target;
    size_t target_len = uri ? uri_len : r->target_len;
    const char *q = memchr(target, '?', target_len);
    size_t path_len = q ? (size_t)(q - target) : target_len;
    for (size_t i = 0; i < t->n; i++) {
        const sws_ckpart_t *p = &t->parts[i];
        const char *v = "";
        size_t vl = 0;
        switch (p->kind) {
        case SWS_CK_LIT: v = p->s; vl = p->n; break;
        case SWS_CK_SCHEME:
            v = r->conn && r->conn->tls ? "https" : "http";
            vl = strlen(v);
            break;
        case SWS_CK_HOST: {
            /* lowercase, without the port */
            size_t hl = r->host ? r->host_len : 0;
            if (hl && r->host[0] != '[') {
                const char *colon = memchr(r->host, ':', hl);
                if (colon)
                    hl = (size_t)(colon - r->host);
            } else if (hl) {
                const char *rb = memchr(r->host, ']', hl);
                if (rb)
                    hl = (size_t)(rb - r->host + 1);
            }
            if (*len + hl > SWS_CACHE_KEY_MAX)
                return -1;
            for (size_t k = 0; k < hl; k++) {
                char ch = r->host[k];
                out[(*len)++] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
            }
            continue;
        }
        case SWS_CK_REQUEST_URI: v = target; vl = target_len; break;
        case SWS_CK_URI:
            if (uri) {
                v = target;
                vl = path_len;
            } else {
                v = r->path;
                vl = r->path_len;
            }
            break;
        case SWS_CK_ARGS:
            if (q) {
                v = q + 1;
                vl = target_len - path_len - 1;
            }
            break;
        case SWS_CK_IS_ARGS:
            if (q) {
                v = "?";
                vl = 1;
            }
            break;
        case SWS_CK_METHOD:
            v = uri ? "GET" : r->method;
            vl = uri ? 3 : r->method_len;
            break;
        case SWS_CK_HTTP: {
            const sws_header_t *h = find_header(r, p->s, p->n);
            if (h) {
                v = h->value;
                vl = h->value_len;
            }
            break;
        }
        case SWS_CK_COOKIE: cookie_value(r, p->s, p->n, &v, &vl); break;
        case SWS_CK_ARG: arg_value(r, p->s, p->n, &v, &vl); break;
        default: break;
        }
        if (put(out, len, v, vl) < 0)
            return -1;
    }
    return 0;
}

/* A bypass or no_store condition: any template that expands to a value
 * other than "" and "0". */
static int condition(const sws_cktmpl_t *t, size_t n, const sws_request_t *r)
{
    char buf[SWS_CACHE_KEY_MAX];
    for (size_t i = 0; i < n; i++) {
        size_t len;
        if (expand(&t[i], r, NULL, 0, buf, &len) < 0)
            return 1;
        if (len && !(len == 1 && buf[0] == '0'))
            return 1;
    }
    return 0;
}

static uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* ---- entries --------------------------------------------------------------------------- */

static inline const char *ent_key(const sws_cent_t *e) { return e->data; }
static inline const char *ent_vary(const sws_cent_t *e) { return e->data + e->key_len; }
static inline const char *ent_tags(const sws_cent_t *e) { return ent_vary(e) + e->vary_len; }
static inline const char *ent_head(const sws_cent_t *e) { return ent_tags(e) + e->tags_len; }
static inline const char *ent_body(const sws_cent_t *e) { return ent_head(e) + e->head_len; }

/* Decimal of v into out (at least 21 bytes); its length. snprintf was 2 %
 * of a hit's CPU. */
static size_t put_i64(char *out, int64_t v)
{
    char tmp[24];
    size_t n = 0, k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[k++] = '-';
    while (n)
        out[k++] = tmp[--n];
    return k;
}

static int64_t ent_age(const sws_cent_t *ent, int64_t now)
{
    int64_t resident = now - ent->response_time;
    return ent->initial_age + (resident > 0 ? resident : 0);
}

/* The request's value of a field, lines joined with ", " into buf: its
 * length, or -1 when the request has none. */
static ssize_t req_field(const sws_request_t *r, const char *name, size_t nl, char *buf, size_t cap)
{
    ssize_t len = -1;
    for (size_t i = 0; i < r->nh; i++) {
        if (!name_eq(&r->h[i], name, nl))
            continue;
        size_t at = len < 0 ? 0 : (size_t)len;
        size_t need = at + (len < 0 ? 0 : 2) + r->h[i].value_len;
        if (need > cap)
            return -2;
        if (len >= 0) {
            memcpy(buf + at, ", ", 2);
            at += 2;
        }
        memcpy(buf + at, r->h[i].value, r->h[i].value_len);
        len = (ssize_t)(at + r->h[i].value_len);
    }
    return len;
}

/* Vary values as stored: per field, "name\0" then '-' (absent) or '+'
 * and the value, then "\0". Does the request select this entry? */
static int vary_matches(const sws_cent_t *ent, const sws_request_t *r)
{
    const char *p = ent_vary(ent), *end = p + ent->vary_len;
    char buf[VARY_MAX];
    while (p < end) {
        size_t nl = strlen(p);
        const char *name = p;
        p += nl + 1;
        size_t vl = strlen(p);
        ssize_t got = req_field(r, name, nl, buf, sizeof buf);
        if (got == -2)
            return 0;
        if (p[0] == '-' ? got != -1 : (got < 0 || (size_t)got != vl - 1 || memcmp(buf, p + 1, vl - 1)))
            return 0;
        p += vl + 1;
    }
    return 1;
}

typedef struct {
    sws_cent_t *ready;     /* the newest entry the request selects */
    sws_cent_t *pending;   /* a fill in progress for the key */
    int vary_miss;         /* entries for the key, none selected */
} look_t;

static void lookup(sws_cs_t *z, uint64_t hash, const char *key, size_t kl, const sws_request_t *r,
                   look_t *lk)
{
    memset(lk, 0, sizeof *lk);
    for (uint64_t o = sws_cs_chain(z, hash); o; o = sws_cs_ent(z, o)->bnext) {
        sws_cent_t *ent = sws_cs_ent(z, o);
        if (ent->hash != hash || ent->key_len != kl || memcmp(ent_key(ent), key, kl))
            continue;
        if (ent->state == CS_PENDING) {
            lk->pending = ent;
        } else if (ent->state == CS_READY) {
            if (r && !vary_matches(ent, r))
                lk->vary_miss = 1;
            else if (!lk->ready || ent->response_time > lk->ready->response_time)
                lk->ready = ent;
        }
    }
}

/* Unlinks every entry of the key (all variants); how many. Lock held. */
static size_t drop_key(sws_cs_t *z, uint64_t hash, const char *key, size_t kl)
{
    size_t n = 0;
    for (uint64_t o = sws_cs_chain(z, hash); o;) {
        sws_cent_t *ent = sws_cs_ent(z, o);
        o = ent->bnext;
        if (ent->state == CS_READY && ent->hash == hash && ent->key_len == kl &&
            !memcmp(ent_key(ent), key, kl)) {
            sws_cs_unlink(z, ent);
            n++;
        }
    }
    return n;
}

/* ---- the request's own directives --------------------------------------------------- */

typedef struct {
    sws_cc_t cc;
    int no_cache;          /* no-cache, or Pragma: no-cache without Cache-Control */
    int has_auth;
    int has_range;
    int conditional;       /* If-None-Match or If-Modified-Since */
} reqcc_t;

static void req_directives(const sws_request_t *r, reqcc_t *q)
{
    memset(q, 0, sizeof *q);
    sws_cc_init(&q->cc);
    int has_cc = 0, pragma = 0;
    for (size_t i = 0; i < r->nh; i++) {
        const sws_header_t *h = &r->h[i];
        if (name_eq(h, "cache-control", 13)) {
            sws_cc_parse(&q->cc, h->value, h->value_len);
            has_cc = 1;
        } else if (name_eq(h, "pragma", 6)) {
            pragma |= h->value_len >= 8 && strncasecmp(h->value, "no-cache", 8) == 0;
        } else if (name_eq(h, "authorization", 13)) {
            q->has_auth = 1;
        } else if (name_eq(h, "range", 5)) {
            q->has_range = 1;
        } else if (name_eq(h, "if-none-match", 13) || name_eq(h, "if-modified-since", 17)) {
            q->conditional = 1;
        }
    }
    q->no_cache = (q->cc.flags & SWS_CC_NO_CACHE) || (!has_cc && pragma);
}

/* Is the entry usable for this request without going upstream? 1 fresh,
 * 2 stale but allowed by the request's max-stale, 0 not. */
static int usable(const sws_cent_t *ent, const reqcc_t *q, int64_t now)
{
    if (q->no_cache || (ent->hflags & CE_NO_CACHE))
        return 0;
    if (q->has_auth && !(ent->hflags & CE_AUTH_OK))
        return 0;
    int64_t age = ent_age(ent, now);
    if (q->cc.max_age != SWS_CC_NONE && age > q->cc.max_age)
        return 0;
    int64_t left = ent->lifetime - age;
    if (q->cc.min_fresh != SWS_CC_NONE && left < q->cc.min_fresh)
        return 0;
    if (left > 0)
        return 1;
    if (ent->hflags & CE_MUST_REVALIDATE)
        return 0;
    if ((q->cc.flags & SWS_CC_MAX_STALE_ANY) ||
        (q->cc.max_stale != SWS_CC_NONE && -left <= q->cc.max_stale))
        return 2;
    return 0;
}

/* ---- answering from an entry ------------------------------------------------------------- */

typedef struct {
    sws_hold_t h;
    sws_cs_t *z;
    int slot;
    uint64_t off;
} chold_t;

static void chold_release(sws_hold_t *h)
{
    chold_t *c = (chold_t *)h;
    zlock(c->z);
    sws_cs_unref(c->z, c->slot, c->off);
    sws_cs_unlock(c->z);
    free(c);
}

/* A private copy of a body, freed once written (this worker references
 * too many entries at once to take another reference). */
typedef struct {
    sws_hold_t h;
    char data[];
} hcopy_t;

static void hcopy_release(sws_hold_t *h) { free(h); }

/* The body bytes of an answer, kept valid until the socket took them. */
typedef struct {
    const char *p;
    uint64_t len;
    sws_hold_t *hold;              /* NULL: copied into the batch (small) */
} pin_t;

/* Pins [off, off + len) of ent (lock held): small bodies are copied with
 * the head; larger ones referenced (the entry held until written), or
 * copied to the heap when this worker's reference table is full. -1 when
 * out of memory: nothing was written, the caller answers otherwise. */
static int pin_body(sws_engine_t *e, sws_cs_t *z, sws_cent_t *ent, uint64_t off, uint64_t len,
                    pin_t *b)
{
    b->p = ent_body(ent) + off;
    b->len = len;
    b->hold = NULL;
    if (len <= COPY_BODY_MAX)
        return 0;
    chold_t *c = malloc(sizeof *c);
    if (c && sws_cs_ref(z, e->ca.slot, ent) == 0) {
        c->h.release = chold_release;
        c->z = z;
        c->slot = e->ca.slot;
        c->off = sws_cs_off(z, ent);
        b->hold = &c->h;
        return 0;
    }
    free(c);
    hcopy_t *hc = malloc(sizeof *hc + len);
    if (!hc)
        return -1;
    memcpy(hc->data, b->p, len);
    hc->h.release = hcopy_release;
    b->p = hc->data;
    b->hold = &hc->h;
    return 0;
}

static void pin_out(sws_engine_t *e, sws_resp_t *r, pin_t *b)
{
    if (!b->hold) {
        resp_data(e, r, b->p, (size_t)b->len, 0);
        return;
    }
    resp_data(e, r, b->p, (size_t)b->len, SWS_REF);
    r->ops->hold(e, r, b->hold);
}

/* Stored "Name: value\r\n" lines through r, each copied (resp_field):
 * a block of fields may be referenced by the protocol instead, and these
 * bytes are not ours to keep. keep: only those names (a 304's). */
static void lines_out(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n,
                      const char *const *keep, size_t nkeep)
{
    const char *end = p + n;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            return;
        if (*p == '\x01') /* the tee's marker of a field not stored */
            p++;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            size_t nl = (size_t)(colon - p);
            int pass = !keep;
            for (size_t i = 0; i < nkeep && !pass; i++)
                pass = nl == strlen(keep[i]) && strncasecmp(p, keep[i], nl) == 0;
            const char *v = colon + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            const char *ve = eol;
            if (ve > v && ve[-1] == '\r')
                ve--;
            if (pass)
                resp_field(e, r, p, nl, v, (size_t)(ve - v));
        }
        p = eol + 1;
    }
}

/* RFC 9110 15.4.5: what a 200 would carry of these; the rest is the body's. */
static const char *const not_modified_keep[] = {"etag", "cache-control", "expires", "vary",
                                                "content-location", "last-modified",
                                                "x-request-id"};
#define NM_KEEP (sizeof not_modified_keep / sizeof not_modified_keep[0])

/* The stored fields: one block when it is surely copied, else line by line. */
static void fields_out(sws_engine_t *e, sws_resp_t *r, const sws_cent_t *ent, int not_modified)
{
    if (!not_modified && ent->head_len <= 4096)
        resp_fields(e, r, ent_head(ent), ent->head_len);
    else
        lines_out(e, r, ent_head(ent), ent->head_len, not_modified ? not_modified_keep : NULL,
                  not_modified ? NM_KEEP : 0);
}

/* Answers the request from ent: 304 for a matching conditional, 206/416
 * for a Range of a stored 200, else the stored response. Lock held.
 * 0, or -1 when out of memory with nothing written. */
static int serve_entry(sws_engine_t *e, sws_resp_t *r, sws_cs_t *z, sws_cent_t *ent,
                       const sws_request_t *req, const char *status_line)
{
    int64_t now = (int64_t)e->core.wall;
    int64_t lm = ent->hflags & CE_HAS_LM ? ent->last_modified : SWS_NO_LAST_MODIFIED;
    const char *etag = ent->etag_len ? ent_head(ent) + ent->etag_off : NULL;
    int status = ent->status;
    int get_or_head = req->method_id == SWS_M_GET || req->method_id == SWS_M_HEAD;
    if (status == 200 && get_or_head) {
        sws_cond_fields_t f = {0};
        const sws_header_t *h = find_header(req, "if-none-match", 13);
        if (h) {
            f.if_none_match = h->value;
            f.if_none_match_len = h->value_len;
        }
        h = find_header(req, "if-modified-since", 17);
        if (h) {
            f.if_modified_since = h->value;
            f.if_modified_since_len = h->value_len;
        }
        if ((f.if_none_match || f.if_modified_since) &&
            sws_evaluate_preconditions(&f, etag, ent->etag_len, lm, 1) == SWS_COND_NOT_MODIFIED)
            status = 304;
    }
    sws_range_t rg = {0, 0};
    int nr = -1;
    const sws_header_t *range = status == 200 && req->method_id == SWS_M_GET
                                    ? find_header(req, "range", 5) : NULL;
    if (range) {
        const sws_header_t *ir = find_header(req, "if-range", 8);
        if (!ir || sws_if_range_matches(ir->value, ir->value_len, etag, ent->etag_len, lm))
            nr = sws_parse_range(range->value, range->value_len, ent->body_len, &rg, 1);
        if (nr == 0)
            status = 416;
        else if (nr > 0)
            status = 206;
    }
    pin_t body = {NULL, 0, NULL};
    int has_body = req->method_id != SWS_M_HEAD && status != 304 && status != 416 &&
                   status != 204 && ent->status != 304;
    if (has_body && pin_body(e, z, ent, status == 206 ? rg.start : 0,
                             status == 206 ? rg.len : ent->body_len, &body) < 0)
        return -1;
    r->date = ent->date; /* the stored response's, not now (RFC 9110 6.6.1) */
    resp_head(e, r, status, NULL, 0);
    fields_out(e, r, ent, status == 304);
    char line[64];
    int n = (int)put_i64(line, ent_age(ent, now));
    resp_field_lit(e, r, "Age", line, (size_t)n);
    if (status_line)
        resp_field_lit(e, r, "Cache-Status", status_line, strlen(status_line));
    if (status == 304 || status == 204 || ent->status == 304) {
        resp_start_body(e, r, SWS_BODY_NONE, 0);
    } else if (status == 416) {
        n = sws_format_content_range(line, sizeof line, 0, 0, ent->body_len);
        resp_field_lit(e, r, "Content-Range", line, (size_t)n);
        resp_start_body(e, r, SWS_BODY_LENGTH, 0);
    } else if (status == 206) {
        n = sws_format_content_range(line, sizeof line, rg.start, rg.len, ent->body_len);
        resp_field_lit(e, r, "Content-Range", line, (size_t)n);
        resp_start_body(e, r, SWS_BODY_LENGTH, rg.len);
    } else {
        resp_start_body(e, r, SWS_BODY_LENGTH, ent->body_len);
    }
    if (has_body && body.len)
        pin_out(e, r, &body);
    else if (body.hold)
        body.hold->release(body.hold);
    resp_done(e, r);
    return 0;
}

/* ---- PURGE -------------------------------------------------------------------------------- */

typedef struct {
    const char *prefix;
    size_t n;
    const char *tags;      /* space-separated request tags */
    size_t tags_len;
} sweep_arg_t;

static int sweep_prefix(sws_cent_t *ent, void *arg)
{
    const sweep_arg_t *a = arg;
    return ent->state == CS_READY && ent->key_len >= a->n && memcmp(ent_key(ent), a->prefix, a->n) == 0;
}

static int is_sep(char c) { return c == ' ' || c == ',' || c == '\t'; }

/* Does the space- or comma-separated list l contain token t? */
static int has_token(const char *l, size_t ln, const char *t, size_t tn)
{
    size_t i = 0;
    while (i < ln) {
        while (i < ln && is_sep(l[i]))
            i++;
        size_t s = i;
        while (i < ln && !is_sep(l[i]))
            i++;
        if (i - s == tn && memcmp(l + s, t, tn) == 0)
            return 1;
    }
    return 0;
}

static int sweep_tags(sws_cent_t *ent, void *arg)
{
    const sweep_arg_t *a = arg;
    if (ent->state != CS_READY || !ent->tags_len)
        return 0;
    size_t i = 0;
    while (i < a->tags_len) {
        while (i < a->tags_len && is_sep(a->tags[i]))
            i++;
        size_t s = i;
        while (i < a->tags_len && !is_sep(a->tags[i]))
            i++;
        if (i > s && has_token(ent_tags(ent), ent->tags_len, a->tags + s, i - s))
            return 1;
    }
    return 0;
}

static void small_answer(sws_engine_t *e, sws_resp_t *r, int status, const char *body, size_t n)
{
    resp_head(e, r, status, NULL, 0);
    resp_field_lit(e, r, "Content-Type", "application/json", 16);
    resp_start_body(e, r, SWS_BODY_LENGTH, n);
    resp_data(e, r, body, n, 0);
    resp_done(e, r);
}

static void purge(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                  const sws_cache_route_t *c, sws_cs_t *z)
{
    /* the client as we see it: the peer, or behind trusted proxies the
     * right-most untrusted X-Forwarded-For entry */
    char peer[64];
    const char *ca;
    size_t cal;
    client_key(e, req->conn, req, &ca, &cal, peer);
    int ok = c->n_purge_allow ? text_in(c->purge_allow, c->n_purge_allow, ca, cal)
                              : trusted_text(e, ca, cal);
    if (!ok) {
        sws_respond_answer(e, r, &e->rsp.err[SWS_ERR_403]);
        return;
    }
    char key[SWS_CACHE_KEY_MAX];
    size_t kl = 0;
    size_t n = 0;
    sweep_arg_t a = {0};
    const sws_header_t *tag = find_header(req, "cache-tag", 9);
    int prefix = req->target_len && req->target[req->target_len - 1] == '*';
    if (!tag && expand(&c->key, req, req->target, req->target_len - (size_t)prefix, key, &kl) < 0) {
        sws_respond_answer(e, r, &e->rsp.err[SWS_ERR_414]);
        return;
    }
    zlock(z);
    if (tag) {
        a.tags = tag->value;
        a.tags_len = tag->value_len;
        n = sws_cs_sweep(z, sweep_tags, &a);
    } else if (prefix) {
        a.prefix = key;
        a.n = kl;
        n = sws_cs_sweep(z, sweep_prefix, &a);
    } else {
        n = drop_key(z, key_hash(key, kl), key, kl);
    }
    __atomic_fetch_add(&z->c.purged, n, __ATOMIC_RELAXED);
    sws_cs_unlock(z);
    char body[64];
    int bl = snprintf(body, sizeof body, "{\"purged\": %zu}\n", n);
    small_answer(e, r, n ? 200 : 404, body, (size_t)bl);
}

/* ---- the hit path ----------------------------------------------------------------------- */

static void start_refresh(sws_engine_t *e, const sws_request_t *req, const sws_handler_t *h,
                          sws_cs_t *z, const char *key, size_t kl, uint64_t hash);

int sws_cache_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h)
{
    const sws_cache_route_t *c = h->cache;
    sws_cs_t *z = zone_of(e, c);
    if (!z)
        return SWS_CACHE_MISS;
    if (c->purge && req->method_id == SWS_M_OTHER && req->method_len == 5 &&
        memcmp(req->method, "PURGE", 5) == 0) {
        purge(e, r, req, c, z);
        return SWS_CACHE_DONE;
    }
    if ((req->method_id != SWS_M_GET && req->method_id != SWS_M_HEAD) || req->info->upgrade)
        return SWS_CACHE_MISS;
    if ((req->info->has_content_length && req->info->content_length) || req->info->chunked)
        return SWS_CACHE_MISS;
    if (c->n_bypass && condition(c->bypass, c->n_bypass, req))
        return SWS_CACHE_MISS;
    reqcc_t q;
    req_directives(req, &q);
    char key[SWS_CACHE_KEY_MAX];
    size_t kl;
    if (expand(&c->key, req, NULL, 0, key, &kl) < 0)
        return SWS_CACHE_MISS;
    uint64_t hash = key_hash(key, kl);
    int64_t now = (int64_t)e->core.wall;
    look_t lk;
    zlock(z);
    lookup(z, hash, key, kl, req, &lk);
    int u = lk.ready ? usable(lk.ready, &q, now) : 0;
    if (u) {
        sws_cs_touch(lk.ready);
        cnt(u == 1 ? &z->c.hits : &z->c.stale);
        char st[64] = "scalws; hit; ttl=";
        size_t sl = 17;
        sl += put_i64(st + sl, lk.ready->lifetime - ent_age(lk.ready, now));
        st[sl] = '\0';
        int rc = serve_entry(e, r, z, lk.ready, req, st);
        sws_cs_unlock(z);
        return rc == 0 ? SWS_CACHE_DONE : SWS_CACHE_MISS;
    }
    /* stale-while-revalidate: answer stale, one refresh in the background */
    sws_cent_t *st = lk.ready;
    if (st && !q.no_cache && !(st->hflags & (CE_NO_CACHE | CE_MUST_REVALIDATE)) &&
        (!q.has_auth || (st->hflags & CE_AUTH_OK))) {
        int64_t over = ent_age(st, now) - st->lifetime;
        uint32_t swr = st->swr ? st->swr : c->swr;
        if (over >= 0 && over < (int64_t)swr) {
            sws_cs_touch(st);
            cnt(&z->c.stale);
            int refresh = !lk.pending;
            if (serve_entry(e, r, z, st, req, "scalws; hit; detail=stale-while-revalidate") < 0) {
                sws_cs_unlock(z);
                return SWS_CACHE_MISS;
            }
            sws_cs_unlock(z);
            if (refresh)
                start_refresh(e, req, h, z, key, kl, hash);
            return SWS_CACHE_DONE;
        }
    }
    sws_cs_unlock(z);
    if (q.cc.flags & SWS_CC_ONLY_IF_CACHED) {
        resp_head(e, r, 504, NULL, 0);
        resp_field_lit(e, r, "Cache-Status", "scalws; fwd=miss; detail=only-if-cached", 39);
        resp_start_body(e, r, SWS_BODY_LENGTH, 0);
        resp_done(e, r);
        return SWS_CACHE_DONE;
    }
    return SWS_CACHE_MISS;
}

/* ---- the tee: between the handler and the protocol on a miss --------------------------- */

enum { M_PASS, M_FILL, M_INVALIDATE };

typedef struct tee {
    sws_resp_t base;              /* what the handler talks to */
    sws_resp_t *inner;            /* the protocol's (or the null one of a refresh) */
    sws_engine_t *e;
    const sws_cache_route_t *c;
    sws_cs_t *z;
    const sws_resp_hooks_t *hooks; /* the handler's */
    void *hctx;
    int mode;                     /* M_* */
    unsigned bg : 1,              /* a background refresh: nobody to answer */
        swallow : 1,              /* the upstream's answer is not passed on */
        store : 1,                /* the body is being kept */
        complete : 1,             /* done was called */
        finishing : 1,
        client_gone : 1,
        fwd_started : 1,
        head_only : 1,            /* the client asked HEAD */
        not_mod : 1,              /* the client gets a 304 of the new response */
        discarded : 1,
        oom : 1;                  /* a field was lost: nothing is stored */
    uint64_t stale_off;           /* a stale entry we hold a reference on; 0 none */
    uint64_t pending_off;         /* our CS_PENDING entry; 0 none */
    uint64_t fresh_off;           /* the entry a 304 refreshed, referenced; 0 none */
    uint64_t hash;
    int64_t request_time;
    int status;
    char *reason;
    size_t reason_len;
    /* the response's fields as they come (forwarded at start_body) */
    char *fl;
    size_t fl_len, fl_cap;
    size_t stored_len;            /* the part of fl that is stored (a prefix: the rest is per request) */
    sws_cc_t cc;
    sws_cc_resp_t rs;
    int set_cookie, vary_star, age_invalid;
    char vary_names[VARY_MAX];    /* "a\0b\0" */
    size_t vary_names_len;
    char tags[TAGS_MAX];
    size_t tags_len;
    int64_t etag_off;             /* inside fl; -1 none */
    size_t etag_len;
    char *loc[2];                 /* Location, Content-Location (invalidation) */
    size_t loc_len[2];
    char *body;
    uint64_t body_len, body_cap;
    uint64_t expect_len;
    const char *cs_fwd;           /* Cache-Status fwd= value */
    /* the client's request, for what the answer depends on */
    sws_request_t req;            /* pointers into rq below */
    sws_header_t *rh;
    char *rq;
    sws_conn_t conn;              /* a refresh's copy of the client connection (fd -1) */
    char key[];
} tee_t;

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

static void tee_free(tee_t *t)
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
    t->set_cookie = t->vary_star = t->age_invalid = 0;
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
        /* one non-negative integer, or the response is treated as stale
         * (several lines, lists, signs, fractions, parameters) */
        int64_t a = sws_cc_delta(value, vl);
        if (a >= 0 && t->rs.age == INT64_MIN)
            t->rs.age = a;
        else
            t->age_invalid = 1;
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
static size_t stored_head(tee_t *t, char **out, int64_t *etag_off)
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

static int64_t lifetime_of(tee_t *t)
{
    if (t->rs.date == INT64_MIN)
        t->rs.date = t->e->core.wall; /* we are the first to see it */
    int heuristic = sws_cc_heuristic_status(t->status) || (t->cc.flags & SWS_CC_PUBLIC);
    int64_t l = sws_cc_lifetime(&t->cc, &t->rs, heuristic, valid_for(t->c, t->status));
    if (l > 0 && t->age_invalid)
        l = 0; /* stored, but stale: revalidated before use */
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

static int stale_if_error_ok(tee_t *t)
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

static void tee_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    tee_t *t = (tee_t *)r;
    t->expect_len = kind == SWS_BODY_LENGTH ? len : 0;
    t->body_len = 0;
    t->complete = 0;
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
        ssize_t got = req_field(&t->req, name, nl, val, sizeof val);
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
static uint64_t refresh(tee_t *t)
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
static int answer_from(tee_t *t, uint64_t off, const char *status_line)
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

/* ---- the null response of a background refresh --------------------------------------- */

typedef struct {
    sws_resp_t base;
    const sws_resp_hooks_t *hooks; /* the tee's, when the handler attached */
    void *ctx;
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

/* ---- starting a fill ------------------------------------------------------------------- */

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

static tee_t *tee_new(sws_engine_t *e, sws_resp_t *inner, const sws_cache_route_t *c, sws_cs_t *z,
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

static int handler_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                         const sws_handler_t *h, char *body, size_t n, int done)
{
    return h->kind == SWS_H_FASTCGI ? sws_fastcgi_start(e, r, req, h->data, body, n, done)
                                    : sws_proxy_start(e, r, req, h->data, body, n, done);
}

/* Starts the handler through a tee. mode M_FILL may revalidate stale
 * (stale_off, referenced) and owns pending_off. Returns as handler_start,
 * or SWS_ANSWERED. */
static int start_tee(sws_engine_t *e, tee_t *t, const sws_handler_t *h, const sws_request_t *req,
                     char *body, size_t n, int done)
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
    int rc = handler_start(e, &t->base, &up, h, body, n, done);
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

static void start_refresh(sws_engine_t *e, const sws_request_t *req, const sws_handler_t *h,
                          sws_cs_t *z, const char *key, size_t kl, uint64_t hash)
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
    int rc = start_tee(e, t, h, &r2, NULL, 0, 1);
    if (rc != 0)
        free(nr); /* start_tee freed t */
}

/* ---- waiting for another's fill ---------------------------------------------------------- */

struct cwait {
    struct cwait *prev, *next;
    sws_engine_t *e;
    sws_resp_t *r;
    const sws_handler_t *h;
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
                 char *body, size_t n, int done, int may_wait, int may_lock);

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
    int rc = fetch(e, r, &q->req, w->h, NULL, 0, 1, !timed_out, 0);
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

static void cache_wake(sws_engine_t *e, void *obj, uint32_t events)
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
                    sws_cs_t *z, sws_cent_t *pending, uint64_t deadline)
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
                 char *body, size_t n, int done, int may_wait, int may_lock)
{
    const sws_cache_route_t *c = h->cache;
    sws_cs_t *z = zone_of(e, c);
    char key[SWS_CACHE_KEY_MAX];
    size_t kl;
    if (!z || req->info->upgrade || expand(&c->key, req, NULL, 0, key, &kl) < 0)
        return handler_start(e, r, req, h, body, n, done); /* an upgrade: a tunnel, not ours */
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
        return start_tee(e, t, h, req, body, n, done);
    }
    tee_t *t = tee_new(e, r, c, z, req, key, kl, hash);
    if (!t)
        return 500;
    t->mode = M_FILL;
    int64_t now = (int64_t)e->core.wall;
    look_t lk;
    zlock(z);
    lookup(z, hash, key, kl, req, &lk);
    if (!bypass && lk.ready && usable(lk.ready, &q, now) &&
        serve_entry(e, r, z, lk.ready, req, "scalws; hit; collapsed") == 0) {
        /* filled while we waited */
        cnt(&z->c.hits);
        sws_cs_unlock(z);
        tee_free(t);
        return SWS_ANSWERED;
    }
    if (!bypass && lk.pending && c->lock && may_wait &&
        now - lk.pending->pending_since < (int64_t)(c->lock_timeout_ms / 1000 + 1)) {
        int rc = wait_for(e, r, req, h, z, lk.pending, e->core.now + c->lock_timeout_ms);
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
    return start_tee(e, t, h, req, body, n, done);
}

int sws_cache_fetch(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h,
                    char *body, size_t n, int done)
{
    return fetch(e, r, req, h, body, n, done, 1, 1);
}

/* ---- setup --------------------------------------------------------------------------------- */

static int pid_alive(int pid) { return kill(pid, 0) == 0 || errno == EPERM; }

int sws_cache_init(sws_engine_t *e, void *const *zones, const size_t *sizes, size_t n, void *registry,
                   const int *efds)
{
    e->ca.slot = -1;
    if (!n)
        return 0;
    g_engine = e;
    e->ca.zones = calloc(n, sizeof *e->ca.zones);
    if (!e->ca.zones)
        return -1;
    int self = (int)getpid();
    for (size_t i = 0; i < n; i++) {
        if (sws_cs_attach(zones[i], sizes[i], self) < 0) {
            elog(e, SWS_L_ERROR, "cache zone %zu cannot be used (size %zu): caching is off", i, sizes[i]);
            return -1;
        }
        e->ca.zones[i] = zones[i];
    }
    e->ca.n_zones = n;
    e->ca.reg = registry;
    e->ca.efds = efds;
    int slot = sws_cs_claim(registry, self, e->ca.zones, n, pid_alive);
    if (slot < 0) {
        elog(e, SWS_L_ERROR, "no free cache holder slot (%d in use): caching is off", SWS_CS_HOLDERS);
        return -1;
    }
    e->ca.wake.handler = cache_wake;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e->ca.wake};
    if (epoll_ctl(e->core.epfd, EPOLL_CTL_ADD, efds[slot], &ev) < 0) {
        elog(e, SWS_L_ERROR, "cache: epoll_ctl: %s: caching is off", strerror(errno));
        return -1;
    }
    e->ca.slot = slot;
    return 0;
}

void sws_cache_free(sws_engine_t *e)
{
    /* waiters went with their connections (their gone hooks) */
    if (e->ca.slot >= 0) {
        epoll_ctl(e->core.epfd, EPOLL_CTL_DEL, e->ca.efds[e->ca.slot], NULL);
        /* our references and fills go back; the slot is free for the next process */
        for (size_t i = 0; i < e->ca.n_zones; i++)
            sws_cs_reap(e->ca.zones[i], e->ca.slot);
        __atomic_store_n(&e->ca.reg->pid[e->ca.slot], 0, __ATOMIC_RELEASE);
    }
    free(e->ca.zones);
    e->ca.zones = NULL;
    e->ca.slot = -1;
}
