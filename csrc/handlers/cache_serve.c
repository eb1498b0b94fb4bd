/* The response cache's hit path (scalws/cache.h, cache_int.h): the zones
 * attached at start, the lookup of a key under a zone's lock, whether an
 * entry may answer a request, and an answer from an entry (304, 206/416, or
 * the stored response, its body pinned until written): sws_cache_answer.
 * A stale hit within stale-while-revalidate starts its refresh
 * (cache_reval.c); PURGE is cache_purge.c's. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cache_int.h"

/* The worker's engine, for the one log line below (one engine per process). */
static sws_engine_t *g_engine;

/* A zone's mutex; a previous owner that died holding it made the store
 * rebuild its index from the blocks: said once, at warn. */
void zlock(sws_cs_t *z)
{
    if (sws_cs_lock(z) && g_engine)
        elog(g_engine, SWS_L_WARN, "cache: a process died holding a zone's lock; its index was "
             "rebuilt from the stored blocks (%llu entries)", (unsigned long long)z->c.entries);
}

/* ---- entries --------------------------------------------------------------------------- */

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

void lookup(sws_cs_t *z, uint64_t hash, const char *key, size_t kl, const sws_request_t *r,
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

/* Is the entry usable for this request without going upstream? 1 fresh,
 * 2 stale but allowed by the request's max-stale, 0 not. */
int usable(const sws_cent_t *ent, const reqcc_t *q, int64_t now)
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
void lines_out(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n,
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
const char *const not_modified_keep[NM_KEEP] = {"etag", "cache-control", "expires", "vary",
                                                 "content-location", "last-modified",
                                                 "x-request-id"};

/* The stored fields: one block when it is surely copied, else line by line. */
static void fields_out(sws_engine_t *e, sws_resp_t *r, const sws_cent_t *ent, int not_modified)
{
    if (!not_modified && ent->head_len <= 4096)
        resp_fields(e, r, ent_head(ent), ent->head_len);
    else
        lines_out(e, r, ent_head(ent), ent->head_len, not_modified ? not_modified_keep : NULL,
                  not_modified ? NM_KEEP : 0);
}

const char *hit_status(const sws_cent_t *ent, int64_t now, const char *more, char out[HIT_STATUS_MAX])
{
    static const char head[] = "scalws; hit";
    size_t n = sizeof head - 1, ml = strlen(more);
    memcpy(out, head, n);
    memcpy(out + n, more, ml); /* ours, short: "" or "; collapsed" */
    n += ml;
    memcpy(out + n, "; ttl=", 6);
    n += 6;
    n += put_i64(out + n, ent->lifetime - ent_age(ent, now));
    out[n] = '\0';
    return out;
}

/* Answers the request from ent: 304 for a matching conditional, 206/416
 * for a Range of a stored 200, else the stored response. Lock held.
 * 0, or -1 when out of memory with nothing written. */
int serve_entry(sws_engine_t *e, sws_resp_t *r, sws_cs_t *z, sws_cent_t *ent,
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

/* ---- the hit path ----------------------------------------------------------------------- */

int sws_cache_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req, const sws_handler_t *h,
                     sws_start_fn start)
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
        if (req->peer)
            e->core.st->peer_hits++;
        char st[HIT_STATUS_MAX];
        int rc = serve_entry(e, r, z, lk.ready, req, hit_status(lk.ready, now, "", st));
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
                start_refresh(e, req, h, start, z, key, kl, hash);
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
