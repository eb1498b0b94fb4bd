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

/* A route whose handler answers later: a cached one's hit or PURGE is
 * answered at once; else *hp = h, for the protocol's exchange. */
static int answer_later(sws_engine_t *e, sws_resp_t *r, sws_request_t *req,
                        const sws_handler_t **hp, const sws_handler_t *h)
{
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
