/* scalws/fastcgi.h — the FastCGI handler (csrc/handlers/fastcgi.c): a
 * request forwarded to a FastCGI application (PHP-FPM) in the Responder
 * role, on the upstream floor's groups, balancing, health and keep-alive
 * pool.
 *
 * Owns: a forwarded request (fx): the CGI parameters (RFC 3875 §4.1 and
 * what PHP expects), the request body as STDIN records (a chunked body is
 * held whole first: PHP needs CONTENT_LENGTH), the application's STDOUT
 * decoded and its CGI head turned into the response (Status, Location,
 * local redirects routed again), STDERR lines to the error log, retries,
 * 502/504, and the connection back to the pool after END_REQUEST when
 * FCGI_KEEP_CONN was asked.
 *
 * May call: the response interface, the upstream floor, the records
 * (scalws/fcgi.h, a leaf), the CGI head parser (scalws/http1.h), the open-file
 * cache (the script check), the router (local redirects), the respond
 * handler's error pages, the handlers' shared field helpers, net's peer
 * helpers, the core; a local redirect to a route of another kind goes up
 * to the dispatcher through e->fx.local_answer, which it registered.
 * Config half: scalws/config/directives/fastcgi.py.
 */
#ifndef SCALWS_FASTCGI_H
#define SCALWS_FASTCGI_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include "scalws/response.h"
#include "scalws/router.h"
#include "scalws/upstream.h"

typedef struct {
    sws_upstream_t *up;
    int root_fd;                   /* O_PATH | O_DIRECTORY of root; owned by the caller */
    const char *root;              /* DOCUMENT_ROOT, absolute, no trailing slash */
    size_t root_len;
    const char *index;             /* appended to a script path ending in '/' */
    size_t index_len;
    const regex_t *split;          /* split_path_info: group 1 the script, 2 PATH_INFO; NULL: none */
    int check_script;              /* 404 unless root + script name is a file */
    int fc_flags;                  /* SWS_FC_* for that check */
    int keep_conn;                 /* FCGI_KEEP_CONN: pooled connections */
    int pipeline;                  /* a GET/HEAD may go behind another (fastcgi_queue.c) */
    const char *params;            /* extra parameters, encoded name-value pairs, sent last */
    size_t params_len;
    uint32_t connect_timeout_ms, read_timeout_ms, send_timeout_ms;
    uint32_t retries;
    const sws_hname_t *resp_drop;  /* application headers not passed (removed or set) */
    size_t n_resp_drop;
    const char *resp_set;          /* header lines added to the response */
    size_t resp_set_len;
    size_t buffer_size;            /* the response head (after decoding) must fit */
} sws_fastcgi_t;

/* The FastCGI handler's part of the engine (e->fx). */
typedef struct {
    /* A local redirect (RFC 3875 §6.2.2) whose path routes to a route that
     * is not FastCGI's: answers req (a GET, no body) at once through r on
     * route h, and returns the status answered, or -1 with nothing written
     * when that route cannot answer at once (a proxy, a redirect: the
     * handler answers 500). A FastCGI route is the handler's own: it goes
     * on with the same request. Registered by the dispatcher (the floor
     * above: sws_dispatch_init), which alone answers through other routes. */
    int (*local_answer)(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                        const sws_handler_t *h);
    uint32_t n_waiting;            /* requests waiting for a connection (fastcgi_queue.c) */
    int kick_due;                  /* a server's waiting requests may go on (fq_run_kicks) */
} sws_fastcgi_state_t;

/* Starts the request (req->rid set) on the FastCGI route fc_conf of
 * req->site, like sws_proxy_start: 0 when the handler took it (it calls
 * finish when done), or a status to answer now with nothing written. */
SWS_INTERNAL int sws_fastcgi_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                   const void *fc_conf, char *body, size_t n, int done);

/* Each engine tick: requests that waited their connect_timeout for a
 * connection are answered 503, and the waits go on where a connection may
 * now be opened. */
SWS_INTERNAL void sws_fastcgi_tick(sws_engine_t *e);

#endif
