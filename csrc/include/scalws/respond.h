/* scalws/respond.h — the `respond` handler: a fixed response built at
 * config load (scalws/handlers/respond.py), and the engine's own error
 * pages, which are fixed responses too (csrc/handlers/respond.c).
 *
 * May call: the response interface (scalws/response.h). Nothing here runs
 * per request but the calls that describe the answer.
 */
#ifndef SCALWS_RESPOND_H
#define SCALWS_RESPOND_H

#include <stddef.h>
#include <stdint.h>

#include "scalws/response.h"

/* A fixed response. `fields` holds whole header lines (Content-Type and the
 * route's headers, each "Name: value\r\n"); has_length is 0 for 204 and
 * 304, which have neither a body nor a Content-Length. */
typedef struct {
    int status;
    const char *reason;
    size_t reason_len;
    const char *fields;
    size_t fields_len;
    const char *body;
    size_t body_len;
    int has_length;
} sws_respond_t;

/* Error responses the engine sends itself, indexed by SWS_ERR_*. */
enum {
    SWS_ERR_400, SWS_ERR_403, SWS_ERR_404, SWS_ERR_405, SWS_ERR_408, SWS_ERR_412, SWS_ERR_413,
    SWS_ERR_414, SWS_ERR_417, SWS_ERR_425, SWS_ERR_431, SWS_ERR_500, SWS_ERR_501, SWS_ERR_502,
    SWS_ERR_503, SWS_ERR_504, SWS_ERR_505, SWS_ERR_COUNT
};
/* Their statuses in that order (scalws/handlers/respond.py ERROR_STATUSES
 * builds the pages; tests/unit/test_respond_errors.py holds the two equal). */
#define SWS_ERR_STATUSES                                                                          \
    {400, 403, 404, 405, 408, 412, 413, 414, 417, 425, 431, 500, 501, 502, 503, 504, 505}

#define COPY_BODY_MAX 4096    /* bodies up to this are copied beside the head */

/* A plain listener's answer for a site that is served over TLS (`tls:
 * {redirect: on}`): 301 (308 for methods other than GET and HEAD) to
 * https://HOST[:port]/target. */
typedef struct {
    uint16_t port;             /* the site's TLS port; 443 is left out of Location */
    const char *host;          /* for a request without Host: the site's first name */
    size_t host_len;
} sws_redirect_t;

/* Bytes of the batch a redirect may take beyond its target and host. */
#define REDIRECT_SIZE 512

/* Describes resp through r; returns its status. */
SWS_INTERNAL int sws_respond_answer(sws_engine_t *e, sws_resp_t *r, const sws_respond_t *resp);
SWS_INTERNAL int sws_redirect_answer(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                                     const sws_redirect_t *rd);
/* SWS_ERR_* for a status (500 for one without a page). */
SWS_INTERNAL int err_index(int status);

#endif
