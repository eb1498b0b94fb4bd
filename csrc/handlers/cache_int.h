/* What the response cache's files share (csrc/handlers/cache_*.c): the
 * semantic flags of a stored entry, the layout of its block, the tee, and
 * the functions one file of the cache calls in another. Not an API: the
 * cache's contract is scalws/cache.h.
 *
 *   cache_key.c    key templates, bypass/no_store conditions, the hash,
 *                  Vary selection, the request's own directives
 *   cache_serve.c  the zones, lookup, usable, an answer from an entry (the
 *                  hit path: sws_cache_answer), setup
 *   cache_purge.c  PURGE (key, prefix, tags) and dropping a key
 *   cache_tee.c    the storing tee: its ops and hooks, the store decision,
 *                  commit, invalidation
 *   cache_reval.c  misses (sws_cache_fetch): fills, revalidation and its
 *                  304, stale-if-error, stale-while-revalidate's refresh,
 *                  waiting on another's fill (collapsed misses)
 */
#ifndef SCALWS_CACHE_INT_H
#define SCALWS_CACHE_INT_H

#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "context.h"
#include "scalws/cache.h"
#include "scalws/cachecc.h"
#include "scalws/httpcond.h"


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

static inline int name_eq(const sws_header_t *h, const char *lower, size_t n)
{
    return h->name_len == n && strncasecmp(h->name, lower, n) == 0;
}

static inline const char *ent_key(const sws_cent_t *e) { return e->data; }
static inline const char *ent_vary(const sws_cent_t *e) { return e->data + e->key_len; }
static inline const char *ent_tags(const sws_cent_t *e) { return ent_vary(e) + e->vary_len; }
static inline const char *ent_head(const sws_cent_t *e) { return ent_tags(e) + e->tags_len; }
static inline const char *ent_body(const sws_cent_t *e) { return ent_head(e) + e->head_len; }

static inline int64_t ent_age(const sws_cent_t *ent, int64_t now)
{
    int64_t resident = now - ent->response_time;
    return ent->initial_age + (resident > 0 ? resident : 0);
}

typedef struct {
    sws_cent_t *ready;     /* the newest entry the request selects */
    sws_cent_t *pending;   /* a fill in progress for the key */
    int vary_miss;         /* entries for the key, none selected */
} look_t;

typedef struct {
    sws_cc_t cc;
    int no_cache;          /* no-cache, or Pragma: no-cache without Cache-Control */
    int has_auth;
    int has_range;
    int conditional;       /* If-None-Match or If-Modified-Since */
} reqcc_t;

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
    sws_tcc_t tcc[SWS_CACHE_TARGETED_MAX]; /* the route's target list's fields (RFC 9213) */
    int set_cookie, vary_star, age_seen;
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

/* cache_key.c */
/* Expands a template for the request; uri (the target's path and query)
 * replaces the request's own when given (invalidation of Location). 0, or
 * -1 when the key would pass SWS_CACHE_KEY_MAX. */
SWS_INTERNAL int expand(const sws_cktmpl_t *t, const sws_request_t *r, const char *uri,
                        size_t uri_len, char *out, size_t *len);
/* A bypass or no_store condition: any template that expands to a value
 * other than "" and "0". */
SWS_INTERNAL int condition(const sws_cktmpl_t *t, size_t n, const sws_request_t *r);
SWS_INTERNAL uint64_t key_hash(const char *k, size_t n);
/* The request's value of a field a response varies on, as RFC 9111 §4.1
 * lets a cache compare it: read as a list, its members without the
 * whitespace around them, empty ones dropped, joined by "," across lines,
 * quoted strings as they are; lowercased for accept-encoding,
 * accept-language and accept-charset. A line with a quoted string that does
 * not end: the lines as sent, joined with ", ". Its length, -1 when the
 * request has no such field, -2 when it does not fit cap. */
SWS_INTERNAL ssize_t vary_value(const sws_request_t *r, const char *name, size_t nl, char *buf,
                                size_t cap);
/* Does the request select this entry (its stored Vary values)? */
SWS_INTERNAL int vary_matches(const sws_cent_t *ent, const sws_request_t *r);
SWS_INTERNAL void req_directives(const sws_request_t *r, reqcc_t *q);

/* cache_serve.c */
/* A zone's mutex (sws_cs_lock), the rebuild after a dead owner logged. */
SWS_INTERNAL void zlock(sws_cs_t *z);
/* The entries of the key (lock held): the newest the request selects
 * (r NULL: any), a fill in progress, whether variants exist but none is
 * selected. */
SWS_INTERNAL void lookup(sws_cs_t *z, uint64_t hash, const char *key, size_t kl,
                         const sws_request_t *r, look_t *lk);
/* 1 fresh, 2 stale but allowed by the request's max-stale, 0 not usable. */
SWS_INTERNAL int usable(const sws_cent_t *ent, const reqcc_t *q, int64_t now);
/* Stored "Name: value\r\n" lines through r, copied; keep: only those names. */
SWS_INTERNAL void lines_out(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n,
                            const char *const *keep, size_t nkeep);
/* RFC 9110 15.4.5: the fields a 304 carries. */
#define NM_KEEP 7
SWS_INTERNAL extern const char *const not_modified_keep[NM_KEEP];
/* "scalws; hit<more>; ttl=N" for a hit on ent into out; out. */
#define HIT_STATUS_MAX 64
SWS_INTERNAL const char *hit_status(const sws_cent_t *ent, int64_t now, const char *more,
                                    char out[HIT_STATUS_MAX]);
/* Answers the request from ent (lock held): 0, or -1 when out of memory
 * with nothing written. */
SWS_INTERNAL int serve_entry(sws_engine_t *e, sws_resp_t *r, sws_cs_t *z, sws_cent_t *ent,
                             const sws_request_t *req, const char *status_line);

/* cache_purge.c */
/* Unlinks every entry of the key (all variants); how many. Lock held. */
SWS_INTERNAL size_t drop_key(sws_cs_t *z, uint64_t hash, const char *key, size_t kl);
/* Answers a PURGE through r (403 for a client not allowed). */
SWS_INTERNAL void purge(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                        const sws_cache_route_t *c, sws_cs_t *z);

/* cache_tee.c */
/* A tee in front of inner for the request (copied), or NULL when out of
 * memory. tee_free ends its pending lock, drops its references, frees it. */
SWS_INTERNAL tee_t *tee_new(sws_engine_t *e, sws_resp_t *inner, const sws_cache_route_t *c,
                            sws_cs_t *z, const sws_request_t *req, const char *key, size_t kl,
                            uint64_t hash);
SWS_INTERNAL void tee_free(tee_t *t);
/* The stored fields of the response so far (malloc'd into *out, NULL when
 * out of memory), the ETag's offset in them (-1 none); the length. */
SWS_INTERNAL size_t stored_head(tee_t *t, char **out, int64_t *etag_off);
/* The response's freshness lifetime in seconds; < 0: none to give it. */
SWS_INTERNAL int64_t lifetime_of(tee_t *t);

/* cache_reval.c */
/* May the stale entry the tee holds stand in for an error (stale-if-error)? */
SWS_INTERNAL int stale_if_error_ok(tee_t *t);
/* A 304 to our revalidation: the stored entry again with its fields,
 * published and referenced; its offset, or 0 when it could not be. */
SWS_INTERNAL uint64_t refresh(tee_t *t);
/* Answers the client from the entry at off (referenced by the tee); 0, or
 * -1 when out of memory with nothing written. */
SWS_INTERNAL int answer_from(tee_t *t, uint64_t off, const char *status_line);
/* stale-while-revalidate: one background fill for the key through start
 * (h's handler), with a null response, unless one is in progress. */
SWS_INTERNAL void start_refresh(sws_engine_t *e, const sws_request_t *req, const sws_handler_t *h,
                                sws_start_fn start, sws_cs_t *z, const char *key, size_t kl,
                                uint64_t hash);
/* The holder's eventfd: a fill this worker waits on ended. */
SWS_INTERNAL void cache_wake(sws_engine_t *e, void *obj, uint32_t events);

#endif
