/* The dispatcher: a route's chain run by one switch; contract in
 * scalws/dispatch.h. */
#include "context.h"
#include "scalws/dispatch.h"

/* The start of h's handler, the one that answers later. */
static sws_start_fn start_of(const sws_handler_t *h)
{
    switch (h->kind) {
    case SWS_H_FASTCGI:
        return sws_fastcgi_start;
    default:
        return sws_proxy_start;
    }
}

/* FastCGI's local redirect to a route of another kind (e->fx.local_answer):
 * static and respond routes answer at once; a static one is a request
 * routed again (depth 1: it never reroutes). */
static int local_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                        const sws_handler_t *h)
{
    switch (h->kind) {
    case SWS_H_STATIC:
        return e->st.fc ? sws_static_answer(e, r, req, req->site, h->data, 1) : -1;
    case SWS_H_RESPOND:
        return sws_respond_answer(e, r, h->data);
    default:
        return -1;
    }
}

/* ---- cache peers (scalws/cache.h, sws_cache_peers_t) ------------------------------------ */

static int is_purge(const sws_request_t *req)
{
    return req->method_len == 5 && memcmp(req->method, "PURGE", 5) == 0;
}

/* The marker of a request from a peer: "SECRET http" or "SECRET https",
 * compared in constant time; 1 and the scheme set, else 0. */
static int peer_marked(sws_request_t *req, const sws_cache_peers_t *p)
{
    const sws_header_t *m = find_header(req, "x-scalws-peer", 13);
    if (!m || m->value_len < p->secret_len + 5)
        return 0;
    unsigned char diff = 0;
    for (size_t i = 0; i < p->secret_len; i++)
        diff |= (unsigned char)m->value[i] ^ (unsigned char)p->secret[i];
    const char *s = m->value + p->secret_len;
    size_t sl = m->value_len - p->secret_len;
    int https = sl == 6 && memcmp(s, " https", 6) == 0;
    if (diff || !(https || (sl == 5 && memcmp(s, " http", 5) == 0)))
        return 0;
    req->peer = 1;
    req->peer_https = (unsigned)https;
    return 1;
}

/* A PURGE this node accepted goes to every other node, marked; nobody
 * waits for their answers (a null response), which their logs show. */
static void purge_peers(sws_engine_t *e, sws_request_t *req, const sws_handler_t *h)
{
    const sws_cache_route_t *c = h->cache;
    const sws_handler_t *fwd = &c->peer_fwd[req->conn && sws_conn_secure(req->conn)];
    sws_upstream_t *up = c->peers->up;
    for (size_t i = 0; i < up->n_servers - up->n_removed; i++) {
        if (up->servers[i]->self)
            continue;
        sws_request_t one = *req;
        sws_resp_t *nr = sws_cache_null_resp(req->conn, &one.conn);
        if (!nr)
            return;
        one.peer_only = (uint32_t)i + 1;
        int rc = start_of(fwd)(e, nr, &one, fwd->data, NULL, 0, 1);
        if (rc != 0) { /* not started: nobody else frees it */
            nr->ops->finish(e, nr, 0);
            continue;
        }
        e->core.st->peer_purges++;
        req->peers_purged++;
    }
}

void sws_cache_route_set_peers(sws_cache_route_t *c, const sws_cache_peers_t *p, void *fwd_http,
                               void *fwd_https, uint32_t stat_id)
{
    c->peers = p;
    c->peer_fwd[0] = (sws_handler_t){.kind = SWS_H_PROXY, .data = fwd_http, .stat_id = stat_id};
    c->peer_fwd[1] = (sws_handler_t){.kind = SWS_H_PROXY, .data = fwd_https, .stat_id = stat_id};
}

/* Before the cache looks: 1 and *hp = the peers' proxy when another live
 * node owns the request's key, else 0 (served here: this node owns it, its
 * owner is down, it came from a peer, it is not a GET or HEAD). */
static int to_owner(sws_engine_t *e, sws_request_t *req, const sws_handler_t **hp,
                    const sws_handler_t *h)
{
    const sws_cache_route_t *c = h->cache;
    const sws_cache_peers_t *p = c->peers;
    if (peer_marked(req, p)) {
        if (!is_purge(req))
            e->core.st->peer_received++;
        return 0;
    }
    if (is_purge(req)) {
        if (sws_cache_purge_allowed(e, req, h))
            purge_peers(e, req, h);
        return 0;
    }
    if ((req->method_id != SWS_M_GET && req->method_id != SWS_M_HEAD) || req->info->upgrade)
        return 0;
    char key[SWS_CACHE_KEY_MAX];
    size_t kl;
    if (sws_cache_key(h, req, key, &kl) < 0)
        return 0;
    uint64_t hash = hash_bytes(key, kl);
    int i = sws_up_pick(e, p->up, 0, hash);
    if (i != sws_up_owner(p->up, hash))
        e->core.st->peer_owner_down++; /* the next node on the ring stands in */
    if (i < 0 || p->up->servers[i]->self) {
        e->core.st->peer_local++;
        return 0;
    }
    req->peer_hash = hash;
    *hp = &c->peer_fwd[req->conn && sws_conn_secure(req->conn)];
    e->core.st->peer_forwarded++;
    return 1;
}

/* A route whose handler answers later: a cached one's hit or PURGE is
 * answered at once; a key another cache peer owns goes to it; else *hp =
 * h, for the protocol's exchange. */
static int answer_later(sws_engine_t *e, sws_resp_t *r, sws_request_t *req,
                        const sws_handler_t **hp, const sws_handler_t *h)
{
    if (h->cache && h->cache->peers && to_owner(e, req, hp, h))
        return 0;
    if (h->cache && sws_cache_answer(e, r, req, h, start_of(h)) == SWS_CACHE_DONE) {
        *hp = NULL; /* a hit (or a PURGE): answered like a static file */
        return 1;
    }
    *hp = h;
    return 0;
}

void sws_dispatch_init(sws_engine_t *e) { e->fx.local_answer = local_answer; }

int sws_dispatch_answer(sws_engine_t *e, sws_resp_t *r, sws_request_t *req,
                        const sws_handler_t **hp)
{
    const sws_handler_t *h = *hp;
    switch (h ? h->kind : 0) {
    case SWS_H_RESPOND:
        sws_respond_answer(e, r, h->data);
        return 1;
    case SWS_H_REDIRECT_HTTPS:
        sws_redirect_answer(e, r, req, h->data);
        return 1;
    case SWS_H_STATIC:
        if (!e->st.fc)
            break; /* no open-file cache: nothing to serve files from */
        if (sws_static_answer(e, r, req, req->site, h->data, 0) != SWS_REROUTE)
            return 1;
        /* try_files fell back (or a folder's index file went) to a route
         * of another kind: nothing was written */
        h = e->st.reroute;
        if (h->kind == SWS_H_RESPOND) {
            sws_respond_answer(e, r, h->data);
            return 1;
        }
        /* FastCGI: its path, and the query only when the fallback says
         * "?$args" */
        req->path = e->st.reroute_path;
        req->path_len = e->st.reroute_len;
        if (!e->st.reroute_args)
            req->query_len = 0;
        return answer_later(e, r, req, hp, h);
    case SWS_H_PROXY:
    case SWS_H_FASTCGI:
        return answer_later(e, r, req, hp, h);
    default:
        break;
    }
    sws_respond_answer(e, r, &e->rsp.err[SWS_ERR_404]);
    return 1;
}

int sws_dispatch_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                       const sws_handler_t *h, char *body, size_t n, int done)
{
    sws_start_fn start = start_of(h);
    if (h->cache)
        return sws_cache_fetch(e, r, req, h, start, body, n, done);
    return start(e, r, req, h->data, body, n, done);
}
