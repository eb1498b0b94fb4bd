/* scalws/cache.h — the response cache (csrc/handlers/cache_*.c; issue 17,
 * docs/adr/0014-response-cache.md): RFC 9111 in front of a proxy or
 * FastCGI route, over the shared store (scalws/cachestore.h). Its files,
 * by concern: cache_key.c (key templates, conditions, hashing, Vary),
 * cache_serve.c (zones, lookup, the hit path), cache_purge.c, cache_tee.c
 * (the storing tee), cache_reval.c (misses: fills, revalidation, stale
 * answers, collapsed misses); what they share is csrc/handlers/cache_int.h.
 *
 * Two entry points, both called by the dispatcher (scalws/dispatch.h) for
 * a route whose handler (proxy or FastCGI) has a `cache`; the dispatcher
 * also gives the inner handler's start (sws_start_fn), so the cache never
 * names a handler:
 *   sws_cache_answer   at once, before any exchange exists: a hit (200,
 *                      206, 304, 416, HEAD), a PURGE, only-if-cached's 504;
 *                      or "go on" (SWS_CACHE_MISS) with nothing written. A
 *                      stale hit within stale-while-revalidate also starts
 *                      one background refresh through `start` (a null
 *                      response: the refresh owns itself and ends alone).
 *   sws_cache_fetch    in place of `start`, in an exchange: answers from a
 *                      fill that ended meanwhile, collapses the miss onto
 *                      another's fill (the request waits, its r attached to
 *                      the cache's hooks, until that fill ends or the lock
 *                      times out), or starts the handler through a tee in
 *                      front of r that stores, revalidates, or answers stale.
 * The tee speaks the response interface both ways, so the proxy and the
 * FastCGI handler know nothing of the cache. What a request owns and
 * returns is start's contract (scalws/response.h): 0 and the cache (a
 * waiter, or the tee around the handler) holds r until it calls finish;
 * SWS_ANSWERED, answered through r; or a status for the protocol to answer.
 * Assumes: one engine per process (the zones' holder slot is the
 * process's); the request's pointers valid during the call (what a fill or
 * a waiter keeps is copied).
 *
 * May call: the response interface, the start it is given, the respond
 * handler's error pages, the handlers' shared field helpers, net (peer
 * lists, holds), the core, the leaves (store, cachecc, httpcond, http1).
 * Config half: scalws/config/directives/cache.py.
 */
#ifndef SCALWS_CACHE_H
#define SCALWS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/cachestore.h"
#include "scalws/net.h"
#include "scalws/response.h"
#include "scalws/upstream.h"

/* Key template parts (directives/cache.py: RouteCache.key). */
enum { SWS_CK_LIT, SWS_CK_SCHEME, SWS_CK_HOST, SWS_CK_REQUEST_URI, SWS_CK_URI, SWS_CK_ARGS,
       SWS_CK_IS_ARGS, SWS_CK_METHOD, SWS_CK_HTTP, SWS_CK_COOKIE, SWS_CK_ARG };
typedef struct {
    int kind;
    const char *s;                /* the literal, or the name (lowercase for http) */
    size_t n;
} sws_ckpart_t;
typedef struct {
    const sws_ckpart_t *parts;
    size_t n;
} sws_cktmpl_t;

/* Response fields whose cache meaning a route ignores. */
enum { SWS_CI_CACHE_CONTROL = 1, SWS_CI_EXPIRES = 2, SWS_CI_SET_COOKIE = 4, SWS_CI_VARY = 8 };

typedef struct {
    int status;                   /* 0: any */
    int64_t secs;
} sws_cvalid_t;

/* A zone's cache peers (`cache_zones.NAME.peers`, issue 34): the nodes
 * that share its keys by consistent hashing. The dispatcher (dispatch.c)
 * sends a request whose key another live node owns to that node, marked
 * (`X-Scalws-Peer: SECRET http|https`), instead of looking here; a marked
 * request is served here as any other; a PURGE goes to every node. */
typedef struct sws_cache_peers {
    sws_upstream_t *up;           /* the nodes (balance hash); this one's server has self */
    const char *secret;
    size_t secret_len;
} sws_cache_peers_t;

typedef struct sws_cache_route {
    int zone;                     /* index into the engine's zones */
    /* Cache peers: NULL, or the zone's; peer_fwd[https] is a plain proxy
     * to them (no cache) whose request field set carries the marker */
    const sws_cache_peers_t *peers;
    sws_handler_t peer_fwd[2];
    uint64_t max_object_size;
    sws_cktmpl_t key;
    const sws_cktmpl_t *bypass, *no_store;
    size_t n_bypass, n_no_store;
    const sws_cvalid_t *valid;
    size_t n_valid;
    uint32_t ignore;              /* SWS_CI_* */
    int lock;
    uint32_t lock_timeout_ms;
    uint32_t swr, sie;            /* route defaults, seconds */
    const sws_hname_t *tags;      /* response fields that carry tags */
    size_t n_tags;
    int purge;                    /* PURGE handled here */
    const sws_cidr_t *purge_allow; /* n 0: trusted_proxies */
    size_t n_purge_allow;
    /* RFC 9213's target list, most precedent first: the first of these
     * fields a response carries validly replaces its Cache-Control and
     * Expires (scalws/cachecc.h, sws_tcc_apply) */
    const sws_hname_t *targeted;
    size_t n_targeted;            /* at most SWS_CACHE_TARGETED_MAX */
    uint32_t targeted_remove;     /* bit i: targeted[i] is neither passed on nor stored */
} sws_cache_route_t;

#define SWS_CACHE_TARGETED_MAX 2  /* the route's own field and CDN-Cache-Control */

#define SWS_CACHE_KEY_MAX 4096    /* longer keys are not cached */
#define SWS_CACHE_HEAD_MAX 8192   /* stored fields; more: not stored */
/* What a hit may copy into the batch: the stored fields, Age and
 * Cache-Status, a Content-Range, and a small body. */
#define SWS_CACHE_ANSWER_MAX (SWS_CACHE_HEAD_MAX + 512 + COPY_BODY_MAX)

enum { SWS_CACHE_MISS = 0, SWS_CACHE_DONE = 1 };

typedef struct cwait cwait_t;

/* The cache's part of the engine (e->ca). */
typedef struct {
    sws_cs_t **zones;
    size_t n_zones;
    sws_cs_registry_t *reg;
    int slot;                     /* this process's holder slot; -1: caching off */
    const int *efds;              /* SWS_CS_HOLDERS eventfds, inherited from the master */
    sws_evobj_t wake;             /* efds[slot] in the inner epoll */
    cwait_t *waiters;             /* requests waiting for another's fill */
    uint64_t seq;                 /* request ids of background refreshes */
} sws_cache_state_t;

/* The engine's zones (mapped by the master; attached here), the registry
 * page and the eventfds. 0, or -1 with the reason logged (caching is then
 * off: every cached route goes straight to its handler). */
SWS_INTERNAL int sws_cache_init(sws_engine_t *e, void *const *zones, const size_t *sizes, size_t n,
                                void *registry, const int *efds);
SWS_INTERNAL void sws_cache_free(sws_engine_t *e);
/* From the tick: waiters past their lock timeout go upstream themselves. */
SWS_INTERNAL void sws_cache_tick(sws_engine_t *e);

/* A request on a cached route (h->cache set; start: h's handler, for a
 * background refresh). SWS_CACHE_DONE when it was answered through r (a
 * hit, a PURGE, a 504 for only-if-cached), else SWS_CACHE_MISS with
 * nothing written: the protocol starts an exchange and calls fetch. */
SWS_INTERNAL int sws_cache_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                  const sws_handler_t *h, sws_start_fn start);
/* In place of start (h's handler; same contract), or SWS_ANSWERED when it
 * answered at once through r (a fill that ended meanwhile, stale on an
 * error). Caching off or an upgrade: start itself, no tee. */
SWS_INTERNAL int sws_cache_fetch(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                 const sws_handler_t *h, sws_start_fn start, char *body, size_t n,
                                 int done);

/* The request's cache key on h's route; 0, or -1 when longer than
 * SWS_CACHE_KEY_MAX (such a request is not cached). */
SWS_INTERNAL int sws_cache_key(const sws_handler_t *h, const sws_request_t *req, char *out,
                               size_t *len);
/* Whether the client of req may PURGE on h's route (purge.allow, else
 * trusted_proxies; a marked peer always). */
SWS_INTERNAL int sws_cache_purge_allowed(sws_engine_t *e, const sws_request_t *req,
                                         const sws_handler_t *h);
/* A response that discards what it is given and frees itself at finish:
 * for exchanges nobody waits for (a PURGE sent to a peer); NULL when out
 * of memory. *conn: its copy of client (fd -1), which lives as long as it,
 * for the exchange's request in place of the client's connection (that
 * one may close first), or NULL. */
SWS_INTERNAL sws_resp_t *sws_cache_null_resp(const sws_conn_t *client, const sws_conn_t **conn);

#endif
