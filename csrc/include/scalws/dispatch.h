/* scalws/dispatch.h — where a request meets its route's chain
 * (csrc/handlers/dispatch.c; issue 32): the one place that answers through
 * a route's handler or starts one. Both protocols call it with the request
 * and the route their router chose; no handler calls another.
 *
 * A route's chain is what the configuration made it (sws_handler_t: its
 * kind and its cache, set at load), run here by a switch:
 *
 *   respond | redirect_https                 answered at once
 *   static [try_files or an index file ─▶ a respond or FastCGI route]
 *                                            answered at once, or rerouted
 *   [cache ─▶] proxy | fastcgi               a hit or PURGE at once, else
 *                                            an exchange the protocol opens
 *
 * in two calls, because between them the protocol makes the exchange (its
 * request id, the log's copy, the body's framing): sws_dispatch_answer,
 * then, when it did not answer, sws_dispatch_start. Handlers that must route
 * again return it (static: SWS_REROUTE) or reach up through a hook the
 * dispatcher registered in their part of the engine (FastCGI's local
 * redirect: e->fx.local_answer); the cache is given its inner handler's
 * start (sws_start_fn).
 *
 * Floor: its own, between the protocols and the handlers
 * (tools/check_layers.py): it calls the handlers, the protocols call it,
 * and nothing below calls it but through the hooks it registered. It keeps
 * no state and allocates nothing.
 */
#ifndef SCALWS_DISPATCH_H
#define SCALWS_DISPATCH_H

#include "scalws/response.h"

/* Does h's handler answer later (an exchange: proxy, FastCGI)? What a
 * protocol sizes and reads the body for; the chain itself is run here. */
static inline int sws_answers_later(const sws_handler_t *h)
{
    return h && (h->kind == SWS_H_PROXY || h->kind == SWS_H_FASTCGI);
}

/* Registers the dispatcher's hooks in the handlers that reach up (FastCGI's
 * local redirect). Once, from the engine's construction. */
SWS_INTERNAL void sws_dispatch_init(sws_engine_t *e);

/* What can be answered before any exchange: *h is the route the router
 * chose for req (NULL: none, a 404). Returns 1 when req was answered
 * through r (respond, redirect, static and what its try_files falls back
 * to at once, a cached route's hit or PURGE, the 404), or 0 with *h the
 * route whose handler answers later (proxy or FastCGI, perhaps the
 * try_files fallback or index file of a static route: req's path and query
 * are then the fallback's), for the protocol to open an exchange and call
 * sws_dispatch_start. req->site must be set. */
SWS_INTERNAL int sws_dispatch_answer(sws_engine_t *e, sws_resp_t *r, sws_request_t *req,
                                     const sws_handler_t **h);

/* Starts the chain of h (left by sws_dispatch_answer) in the exchange r:
 * the cache in front of the handler when the route has one, else the
 * handler. The contract of sws_start_fn (scalws/response.h): 0 when it
 * took the request, SWS_ANSWERED when it answered at once through r, or a
 * status to answer now with nothing written. */
SWS_INTERNAL int sws_dispatch_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                    const sws_handler_t *h, char *body, size_t n, int done);

#endif
