/* scalws/proxy.h — the reverse proxy handler (csrc/handlers/proxy.c).
 *
 * Owns: a proxied request (px): the request head rebuilt for the upstream,
 * the request body on its way there (re-chunked when its length is
 * unknown), the upstream's response parsed and relayed through the
 * response interface, retries, 502/504, tunnels after a 101.
 *
 * May call: the response interface (the client's side is the protocol's),
 * the upstream floor (servers, the pool, connections), net's peer helpers,
 * the respond handler (error pages), the core.
 * Config half: scalws/config/directives/proxy.py.
 */
#ifndef SCALWS_PROXY_H
#define SCALWS_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/response.h"
#include "scalws/upstream.h"

typedef struct {
    sws_upstream_t *up;
    const char *path_prefix;   /* prepended after strip_prefix */
    size_t path_prefix_len;
    const char *strip_prefix;
    size_t strip_prefix_len;
    const char *host;          /* Host sent upstream; NULL: the client's */
    size_t host_len;
    uint32_t connect_timeout_ms, read_timeout_ms, send_timeout_ms;
    uint32_t retries;
    const sws_hname_t *req_drop;   /* client headers not passed (removed or set) */
    size_t n_req_drop;
    const char *req_set;           /* header lines added upstream */
    size_t req_set_len;
    const sws_hname_t *resp_drop;
    size_t n_resp_drop;
    const char *resp_set;
    size_t resp_set_len;
    size_t buffer_size;            /* upstream read buffer: the response head must fit */
    /* A managed app's route (`app:`): no server to take the request (none
     * live, or every connect refused: its workers are down or restarting)
     * answers 503 with Retry-After instead of 502. */
    int unavailable_503;
} sws_proxy_t;

/* Starts proxying req (with req->rid set) through r; body[0..n) is the
 * request body that came with the head, unframed, done = it is all of it.
 * Returns 0 when the proxy took the request (it attached its hooks to r and
 * calls finish when done), or a status to answer now: nothing was written. */
SWS_INTERNAL int sws_proxy_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                 const void *proxy_conf, char *body, size_t n, int done);

#endif
