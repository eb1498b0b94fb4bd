/* The FastCGI handler; contract in scalws/fastcgi.h.
 *
 * A forwarded request is an `fx`, the proxy's px in FastCGI's shape: the
 * client's side (an sws_resp_t), one upstream connection at a time from the
 * shared pool, and one read buffer.
 *
 *   client --body (hooks->body)--> STDIN records in fx->w --> application
 *   application --> fx->rbuf: records decoded in place (sws_fcgi_decode),
 *   STDOUT bytes left at its front --> the CGI head, then the body, through
 *   the response interface (referenced while the client is slow; the
 *   application is not read again until the client has taken them all)
 *
 * The request is BEGIN_REQUEST, the PARAMS stream, then STDIN. Everything
 * up to the end of PARAMS (and the whole body when it came with the head) is
 * kept in head[] so that a failure before any response byte can go to the
 * next server (after a reset only a GET or HEAD: the application may have
 * run it; fx_retry_ok). A chunked request body is held whole before the
 * application is contacted: PHP reads exactly CONTENT_LENGTH bytes, so the
 * length must be known (nginx buffers such bodies too). A body of known
 * length streams.
 *
 * The response's length is known when END_REQUEST came in the same read as
 * the head and the whole body (small pages, the common case): it goes out
 * with Content-Length; otherwise it streams (chunked on HTTP/1.1). The
 * application's own Content-Length is not trusted for framing.
 *
 * One request per connection at a time (request id 1): PHP-FPM does not
 * multiplex. With keep_conn the connection returns to the pool after
 * END_REQUEST, unless reuse_refusal() says why not.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fastcgi_int.h"
#include "scalws/path.h"

static int fx_attempt(sws_engine_t *e, fx_t *x);
static void fx_finish(sws_engine_t *e, fx_t *x, int how);
static const char *reuse_refusal(const sws_engine_t *e, const fx_t *x, const upconn_t *uc);
static void up_read(sws_engine_t *e, fx_t *x);
static void fx_release(sws_engine_t *e, fx_t *x);
static int up_write(sws_engine_t *e, fx_t *x);
static const sws_upconn_ops_t fx_uc_ops;
static const sws_resp_hooks_t fx_hooks;

/* ---- start ------------------------------------------------------------------------ */

static void fx_free(sws_engine_t *e, fx_t *x)
{
    free(x->params);
    free(x->head);
    free(x->w);
    free(x->body);
    sws_rbuf_put(e, x->rbuf, x->rcap);
    free(x);
}

int sws_fastcgi_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                      const void *fc_conf, char *body, size_t n, int done)
{
    const sws_fastcgi_t *f = fc_conf;
    if (req->method_id == SWS_M_OPTIONS && req->target_len == 1 && req->target[0] == '*')
        return 404;
    fx_t *x = calloc(1, sizeof *x + req->method_len + req->target_len);
    if (!x)
        return 500;
    x->r = r;
    x->conn = req->conn;
    x->f = f;
    x->up = f->up;
    x->up_gen = f->up->gen;
    x->site = req->site;
    x->method = req->method_id;
    x->hold = req->info->chunked; /* its length is known only at its end */
    x->req_done = done;
    x->dec.id = FCGI_ID;
    if (req->rid_len) /* an internal request may have none (NULL) */
        memcpy(x->rid, req->rid, req->rid_len);
    x->rid_len = req->rid_len;
    x->method_len = (int)req->method_len;
    x->target_len = (int)req->target_len;
    memcpy(x->what, req->method, req->method_len);
    memcpy(x->what + req->method_len, req->target, req->target_len);
    if (x->up->balance == SWS_BAL_HASH) {
        char peer[64];
        const char *k = req->target;
        size_t kl = req->target_len;
        if (x->up->hash_key == SWS_HASH_CLIENT)
            client_key(e, req->conn, req, &k, &kl, peer);
        x->hash = hash_bytes(k, kl);
    }
    x->rcap = f->buffer_size;
    x->rbuf = sws_rbuf_get(e, x->rcap);
    int st = x->rbuf ? fx_build_params(e, x, req) : -1;
    if (st) {
        fx_free(e, x);
        return st < 0 ? 500 : st;
    }
    if (x->hold && !done) {
        if (n && (fx_grow(&x->body, &x->body_cap, n) < 0 || !memcpy(x->body, body, n))) {
            fx_free(e, x);
            return 500;
        }
        x->body_len = n;
        r->ops->attach(e, r, &fx_hooks, x);
        x->fs = FS_WAIT_BODY;
        r->ops->want_body(e, r, 1);
        e->core.up_inflight++;
        return 0;
    }
    if (x->hold)
        x->body_len = n; /* the whole chunked body came with the head */
    if (fx_frame_request(x, body, n, done) < 0) {
        fx_free(e, x);
        return 500;
    }
    r->ops->attach(e, r, &fx_hooks, x);
    x->in_start = 1;
    fx_attempt(e, x); /* cannot end the exchange while in_start */
    x->in_start = 0;
    if (x->early_status) {
        int status = x->early_status;
        if (x->uc) {
            if (x->behind)
                fq_unfollow(e, x);
            fq_unwatch(x);
            fq_close(x);
            fq_kick_later(e, x->uc->srv);
            uc_close(e, x->uc);
        }
        fq_leave(e, x);
        fx_free(e, x);
        return status;
    }
    e->core.up_inflight++;
    return 0;
}

/* ---- errors and retries ------------------------------------------------------------- */

static const char *fail_text(int kind)
{
    switch (kind) {
    case G_CONNECT: return "connect() failed";
    case G_CONNECT_TIMEOUT: return "upstream timed out while connecting";
    case G_RESET: return "upstream closed or reset the connection";
    case G_READ_TIMEOUT: return "upstream timed out while reading the response";
    case G_SEND_TIMEOUT: return "upstream timed out while sending the request";
    case G_OVERLOADED: return "FastCGI application is overloaded or refused the request";
    default: return "upstream sent an invalid FastCGI response";
    }
}

static int fx_answer_error(sws_engine_t *e, fx_t *x, int status)
{
    if (x->in_start) {
        x->early_status = status;
        return 1;
    }
    x->status = status;
    x->fs = FS_DONE;
    x->junk = 1;
    x->r->ops->discard(e, x->r);
    x->r->local_answer = 1;
    sws_respond_answer(e, x->r, &e->rsp.err[err_index(status)]);
    x->started = 1;
    if (x->r->ops->flush(e, x->r) < 0)
        return 1;
    fx_finish(e, x, SWS_FIN_OK);
    return 1;
}

/* May this failure go to the next server? Only before the response began,
 * with the whole request at hand, and after a reset only for GET and HEAD:
 * the application may have run the request (a POST is never sent twice). A
 * reset of a pooled connection that had said nothing for this request (the
 * application had closed it) does not count as an attempt. */
static int fx_retry_ok(const sws_engine_t *e, const fx_t *x, int kind, int stale)
{
    if (x->started || !x->can_retry || e->core.shutting_down)
        return 0;
    if (kind == G_READ_TIMEOUT || kind == G_SEND_TIMEOUT || kind == G_BAD_RESPONSE)
        return 0;
    if (kind == G_RESET && x->method != SWS_M_GET && x->method != SWS_M_HEAD)
        return 0;
    if (kind == G_RESET && stale)
        return 1;
    return x->attempts <= x->f->retries;
}

static int fx_fail(sws_engine_t *e, fx_t *x, int kind, int err)
{
    upconn_t *uc = x->uc;
    int stale = 0;
    if (uc) {
        /* Stale: a pooled connection closed before any answer. One that
         * answered part of this request and then broke is not stale. */
        stale = uc->requests > 1 && !x->heard;
        /* one sent again for that is routine (a child leaving at
         * pm.max_requests with a request behind its last): not an error */
        int again = kind == G_RESET && stale && fx_retry_ok(e, x, kind, 1);
        char peer[64];
        *put_peer(peer, x->conn) = '\0';
        elog_folded(e, fail_text(kind), (uintptr_t)uc->srv, again ? SWS_L_INFO : SWS_L_ERROR,
             "%s%s%s, upstream: fastcgi://%s, request: \"%.*s %.*s\", client: %s, request id: "
             "%.*s%s", fail_text(kind), err ? ": " : "", err ? strerror(err) : "", uc->srv->name,
             x->method_len, x->what, TLOG(x), x->what + x->method_len, peer, (int)x->rid_len,
             x->rid, again ? " (a kept connection closed before its turn: sent again)" : "");
        if (kind == G_RESET && stale) {
            size_t i = uc->srv->index;
            if (i < 64)
                x->tried &= ~(1ull << i);
            x->attempts--;
        } else if (kind != G_OVERLOADED) {
            srv_fail(e, x->up, uc->srv);
        }
        if (x->behind)
            fq_unfollow(e, x);
        fq_unwatch(x);
        fq_close(x);
        x->uc = NULL;
        x->followed = 0;
        fq_kick_later(e, uc->srv);
        uc_close(e, uc);
    }
    x->fail_status = kind == G_OVERLOADED ? 503
                     : kind == G_READ_TIMEOUT || kind == G_CONNECT_TIMEOUT || kind == G_SEND_TIMEOUT
                         ? 504
                         : 502;
    if (fx_retry_ok(e, x, kind, stale)) {
        memcpy(x->w, x->head, x->head_len); /* w was made from head: big enough */
        x->wlen = x->head_len;
        x->woff = 0;
        x->olen = x->last_len = 0;
        memset(&x->dec, 0, sizeof x->dec);
        x->dec.id = FCGI_ID;
        return fx_attempt(e, x);
    }
    if (!x->started)
        return fx_answer_error(e, x, x->fail_status);
    x->status = x->status ? x->status : 502;
    x->junk = 1;
    fx_finish(e, x, SWS_FIN_ABORT);
    return 1;
}

/* x's request goes out on uc. 0, or 1 when x ended. */
static int fx_run_on(sws_engine_t *e, fx_t *x, upconn_t *uc)
{
    uc->owner = x;
    uc->ops = &fx_uc_ops;
    uc->requests++;
    uc->up->st->requests++;
    x->uc = uc;
    x->heard = 0;
    x->t_owner = e->core.now;
    if (uc->requests == 1)
        fq_watch(e, x, uc->srv);
    x->fs = FS_HEAD;
    uc->dkind = D_NONE;
    if (uc->state == UC_CONNECTING) {
        uc->deadline = e->core.now + x->f->connect_timeout_ms;
        uc->dkind = D_CONNECT;
    } else if (up_write(e, x)) {
        return 1;
    }
    fx_sync(e, x);
    return 0;
}

/* x on server s: a pooled connection, a new one, or (may_wait) the wait
 * for one. 0 on its way (or waiting), 1 when x ended, -1 when a connect
 * failed at once (errno). */
static int fx_use(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s, int may_wait)
{
    upconn_t *uc = may_wait && s->fcgi_q ? NULL : pool_take(e, x->up, s);
    if (!uc) {
        if (may_wait && (s->fcgi_q || !fq_may_connect(e, s))) {
            fx_t *x1 = !s->fcgi_q && fq_may_follow(x) ? fq_pick_open(e, s) : NULL;
            if (x1) {
                fq_behind(e, x1, x);
                return 0;
            }
            fq_wait(e, x, s); /* behind those that wait already */
            fq_kick_later(e, s);
            x->fs = FS_HEAD;
            fx_sync(e, x);
            return 0;
        }
        uc = uc_connect(e, x->up, s, UC_ACTIVE);
        if (!uc)
            return -1;
        s->active++;
    }
    return fx_run_on(e, x, uc);
}

/* A connect to s failed at once: logged, counted; 1 when x ended, 0 when
 * it may go to another server. */
static int connect_failed(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s, int err)
{
    elog_folded(e, fail_text(G_CONNECT), (uintptr_t)s, SWS_L_ERROR,
         "connect() failed: %s, upstream: fastcgi://%s, request: "
         "\"%.*s %.*s\"", strerror(err), s->name, x->method_len, x->what,
         x->target_len, x->what + x->method_len);
    srv_fail(e, x->up, s);
    if (fx_retry_ok(e, x, G_CONNECT, 0))
        return 0;
    return fx_answer_error(e, x, 502);
}

static int fx_attempt(sws_engine_t *e, fx_t *x)
{
    sws_upstream_t *up = x->up;
    for (;;) {
        if (x->up_gen != up->gen) { /* the set changed (DNS): old indexes mean nothing */
            x->tried = 0;
            x->up_gen = up->gen;
        }
        int i = sws_up_pick(e, up, x->tried, x->hash);
        if (i < 0) {
            elog_folded(e, "no live upstreams", (uintptr_t)up, SWS_L_ERROR, "no live upstreams "
                 "in \"%s\" while forwarding \"%.*s %.*s\" to FastCGI", up->name,
                 x->method_len, x->what, x->target_len, x->what + x->method_len);
            /* after a retry: what the last server's failure called for (503
             * overloaded, 504 timed out), not a plain 502 */
            return fx_answer_error(e, x, x->fail_status ? x->fail_status : 502);
        }
        sws_upstream_server_t *s = up->servers[i];
        if (i < 64)
            x->tried |= 1ull << i;
        x->attempts++;
        int rc = fx_use(e, x, s, 1);
        if (rc >= 0)
            return rc;
        if (connect_failed(e, x, s, errno))
            return 1;
    }
}

void fx_resume(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s)
{
    if (s->removed || s->hc_down || s->down_until > e->core.now) {
        fx_attempt(e, x); /* its server went while it waited: another, or 502 */
        return;
    }
    if (fx_use(e, x, s, 0) < 0 && !connect_failed(e, x, s, errno))
        fx_attempt(e, x);
}

void fx_wait_expired(sws_engine_t *e, fx_t *x, const sws_upstream_server_t *s)
{
    x->up->st->queue_timeouts++;
    elog_folded(e, "FastCGI wait", (uintptr_t)x->up, SWS_L_ERROR,
         "upstream timed out while waiting for a connection (every connection to "
         "fastcgi://%s busy), request: \"%.*s %.*s\", request id: %.*s", s->name,
         x->method_len, x->what, TLOG(x), x->what + x->method_len, (int)x->rid_len, x->rid);
    fx_answer_error(e, x, 504);
}

ssize_t fx_send_rest(sws_engine_t *e, upconn_t *uc, fx_t *y)
{
    size_t from = y->woff;
    while (y->woff < y->wlen) {
        ssize_t n = uc_send(e, uc, y->w + y->woff, y->wlen - y->woff);
        if (n < 0) {
            if (errno == EAGAIN)
                return (ssize_t)(y->woff - from);
            return -1;
        }
        y->woff += (size_t)n;
    }
    ssize_t sent = (ssize_t)(y->woff - from);
    y->woff = y->wlen = 0;
    return sent;
}

static int up_write(sws_engine_t *e, fx_t *x)
{
    upconn_t *uc = x->uc;
    ssize_t n = fx_send_rest(e, uc, x);
    if (n < 0)
        return fx_fail(e, x, G_RESET, errno);
    if (n > 0)
        uc->dkind = D_NONE;
    /* the request behind goes once x's is all written */
    if (!x->wlen && x->behind && fx_send_rest(e, uc, x->behind) < 0)
        return fx_fail(e, x, G_RESET, errno);
    return 0;
}

/* ---- the request body -------------------------------------------------------------- */

static int fx_body(sws_engine_t *e, void *ctx, char *p, size_t n, int done)
{
    fx_t *x = ctx;
    if (x->fs == FS_WAIT_BODY) { /* chunked: held until its end */
        if (x->body_len + n > e->core.lim.max_body_bytes) {
            x->req_done = 1; /* what is left of it is not read */
            fx_answer_error(e, x, 413);
            return 1;
        }
        if (n && fx_grow(&x->body, &x->body_cap, x->body_len + n) < 0)
            return -1;
        if (n)
            memcpy(x->body + x->body_len, p, n);
        x->body_len += n;
        if (!done)
            return 0;
        x->req_done = 1;
        if (fx_frame_request(x, x->body, x->body_len, 1) < 0)
            return -1;
        free(x->body);
        x->body = NULL;
        x->body_len = x->body_cap = 0;
        x->r->ops->want_body(e, x->r, 0);
        return fx_attempt(e, x);
    }
    if (n && fx_w_records(x, SWS_FCGI_STDIN, p, n) < 0)
        return -1;
    if (done) {
        x->req_done = 1;
        if (fx_w_records(x, SWS_FCGI_STDIN, NULL, 0) < 0)
            return -1;
    }
    if (x->uc && x->uc->state == UC_ACTIVE && up_write(e, x))
        return 1;
    fx_sync(e, x);
    return 0;
}

/* ---- state -> events ------------------------------------------------------------------- */

void fx_sync(sws_engine_t *e, fx_t *x)
{
    upconn_t *uc = x->uc;
    if (x->fs == FS_WAIT_BODY || x->fs == FS_BEHIND)
        return;
    int wpending = x->woff < x->wlen || (x->behind && x->behind->woff < x->behind->wlen);
    int connecting = uc && uc->state == UC_CONNECTING;
    if (uc) {
        uint32_t m;
        if (connecting) {
            m = EPOLLOUT;
        } else {
            int read_ok = x->fs != FS_DONE && !x->r->ops->backed_up(x->r);
            m = (wpending ? EPOLLOUT : 0) | (read_ok ? EPOLLIN | EPOLLRDHUP : 0);
            int want = wpending                               ? D_SEND
                       : !read_ok                             ? D_NONE
                       : !x->req_done && x->fs == FS_HEAD     ? D_NONE
                                                              : D_READ;
            if (want == D_NONE) {
                uc->dkind = D_NONE;
                uc->deadline = 0;
            } else if (want != uc->dkind) {
                uc->dkind = want;
                uc->deadline = e->core.now + (want == D_SEND ? x->f->send_timeout_ms
                                                               : x->f->read_timeout_ms);
            }
        }
        uc_set_mask(e, uc, m);
        /* all of it written on a connection that goes on: one may follow */
        if (!connecting && !wpending && x->req_done && !x->open && !x->followed && !x->fresh &&
            !x->ended && (x->fs == FS_HEAD || x->fs == FS_BODY) &&
            x->f->keep_conn && x->f->pipeline && !pool_refusal(e, uc) && !fq_drains(e, uc))
            fq_open(e, x);
    }
    x->r->ops->want_body(e, x->r, uc && !connecting && !wpending && !x->req_done);
}

/* ---- the response ----------------------------------------------------------------------- */

/* STDERR: one error-log line per line the application wrote (nginx logs
 * "FastCGI sent in stderr"), cut at ERRLINE_MAX. */
static void err_flush(sws_engine_t *e, fx_t *x)
{
    if (!x->errlen)
        return;
    /* keyed by the text and the server: a warning on every request is
     * written once a second, different lines each */
    uint64_t who = sws_elog_hash(x->errline, x->errlen) ^ (x->uc ? (uintptr_t)x->uc->srv : 0);
    elog_folded(e, "FastCGI stderr", who, SWS_L_ERROR,
         "FastCGI sent in stderr: \"%.*s\", upstream: fastcgi://%s, request: "
         "\"%.*s %.*s\", request id: %.*s", (int)x->errlen, x->errline,
         x->uc ? x->uc->srv->name : "-", x->method_len, x->what, TLOG(x),
         x->what + x->method_len, (int)x->rid_len, x->rid);
    x->errlen = 0;
}

typedef struct {
    sws_engine_t *e;
    fx_t *x;
} err_ctx_t;

static void on_stderr(void *ctx, const char *p, size_t n)
{
    err_ctx_t *ec = ctx;
    fx_t *x = ec->x;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '\n') {
            err_flush(ec->e, x);
            continue;
        }
        if (ch == '\r')
            continue;
        if (x->errlen < sizeof x->errline)
            x->errline[x->errlen++] = (unsigned char)ch < 0x20 || ch == 0x7f ? '?' : ch;
    }
}

/* Headers the application does not decide: framing, hop-by-hop, ours. */
static int resp_hop(const sws_header_t *h)
{
    switch (h->name_len) {
    case 4: return name_is(h, "date", 4);
    case 6: return name_is(h, "status", 6) || name_is(h, "server", 6);
    case 7: return name_is(h, "trailer", 7) || name_is(h, "upgrade", 7);
    case 10: return name_is(h, "connection", 10) || name_is(h, "keep-alive", 10);
    case 12: return name_is(h, "x-request-id", 12);
    case 14: return name_is(h, "content-length", 14);
    case 17: return name_is(h, "transfer-encoding", 17);
    default: return 0;
    }
}

/* "Status: 404 Not Found" -> 404 and its reason; 0 when malformed. */
static int cgi_status(const sws_header_t *h, const char **reason, size_t *rl)
{
    const char *v = h->value;
    size_t n = h->value_len;
    if (n < 3)
        return 0;
    for (int i = 0; i < 3; i++)
        if (v[i] < '0' || v[i] > '9')
            return 0;
    if (n > 3 && v[3] != ' ')
        return 0;
    int s = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
    if (s < 200 || s > 599)
        return 0; /* no 1xx as a final answer */
    *reason = n > 4 ? v + 4 : NULL;
    *rl = n > 4 ? n - 4 : 0;
    return s;
}

static int local_redirect(sws_engine_t *e, fx_t *x, const char *loc, size_t len);

/* Parses the CGI head in rbuf[0..olen) once it is whole and describes the
 * response. 0 (the head is out or still incomplete), 1 when the fx is
 * gone. */
static int take_head(sws_engine_t *e, fx_t *x)
{
    sws_header_t h[RESP_HEADERS_MAX];
    size_t nh = RESP_HEADERS_MAX;
    int n = sws_parse_cgi_head(x->rbuf, x->olen, h, &nh, x->last_len);
    if (n == SWS_PARSE_INCOMPLETE) {
        if (x->ended || x->olen == x->rcap)
            return fx_fail(e, x, G_BAD_RESPONSE, 0); /* ended mid-head, or a head too big */
        x->last_len = x->olen;
        return 0;
    }
    if (n < 0)
        return fx_fail(e, x, G_BAD_RESPONSE, 0);
    int status = 200;
    const char *reason = NULL;
    size_t rl = 0;
    const sws_header_t *loc = NULL;
    for (size_t i = 0; i < nh; i++) {
        if (name_is(&h[i], "status", 6)) {
            status = cgi_status(&h[i], &reason, &rl);
            if (!status)
                return fx_fail(e, x, G_BAD_RESPONSE, 0);
        } else if (name_is(&h[i], "location", 8)) {
            loc = &h[i];
        }
    }
    int has_status = 0;
    for (size_t i = 0; i < nh; i++)
        has_status |= name_is(&h[i], "status", 6);
    /* RFC 3875 §6.2.2: a local-path Location without a Status is a local
     * redirect: the server answers the new path itself, as a GET. */
    if (loc && !has_status && loc->value_len && loc->value[0] == '/' &&
        !(loc->value_len > 1 && loc->value[1] == '/')) {
        if (!x->ended || x->olen != (size_t)n) /* it must have no body; wait for the end */
            return x->ended ? fx_fail(e, x, G_BAD_RESPONSE, 0) : (x->last_len = 0, 0);
        return local_redirect(e, x, loc->value, loc->value_len);
    }
    if (loc && !has_status)
        status = 302; /* §6.2.3/§6.2.4: a client redirect */
    x->status = status;
    sws_resp_t *r = x->r;
    const sws_fastcgi_t *f = x->f;
    resp_head(e, r, status, reason, rl);
    for (size_t i = 0; i < nh; i++) {
        if (resp_hop(&h[i]) || dropped(&h[i], f->resp_drop, f->n_resp_drop))
            continue;
        resp_field(e, r, h[i].name, h[i].name_len, h[i].value, h[i].value_len);
    }
    resp_fields(e, r, f->resp_set, f->resp_set_len);
    resp_field_lit(e, r, "X-Request-Id", x->rid, x->rid_len);
    size_t body = x->olen - (size_t)n;
    int no_body = status == 204 || status == 304 || x->method == SWS_M_HEAD;
    if (status == 204 || status == 304 || (x->method == SWS_M_HEAD && x->ended && !body))
        resp_start_body(e, r, SWS_BODY_NONE, 0); /* a HEAD answered bodiless: length unknown */
    else if (x->ended)
        resp_start_body(e, r, SWS_BODY_LENGTH, body);
    else
        resp_start_body(e, r, SWS_BODY_STREAM, 0);
    if (body && !no_body)
        resp_data(e, r, x->rbuf + n, body, SWS_REF);
    x->fs = FS_BODY;
    x->last_len = 0;
    return 0;
}

/* A local redirect (the application's Location: /path, no body): the new
 * path is routed in the request's site; a FastCGI route forwards it again,
 * as a GET without a body; static and respond routes answer it (through
 * the dispatcher's e->fx.local_answer). */
static int local_redirect(sws_engine_t *e, fx_t *x, const char *loc, size_t len)
{
    if (++x->redirects > REDIRECTS_MAX || !x->site || len >= 4096) {
        elog_folded(e, "FastCGI local redirect", 0, SWS_L_ERROR,
             "FastCGI local redirect to \"%.*s\" not followed (%s), request: "
             "\"%.*s %.*s\"", (int)(len > 200 ? 200 : len), loc,
             x->redirects > REDIRECTS_MAX ? "too many redirects" : "too long", x->method_len,
             x->what, x->target_len, x->what + x->method_len);
        return fx_answer_error(e, x, 500);
    }
    char target[4096], path[4096];
    memcpy(target, loc, len);
    const char *q = memchr(target, '?', len);
    size_t plen = q ? (size_t)(q - target) : len;
    ssize_t nl = sws_normalize_path(target, plen, path);
    const sws_handler_t *h = nl < 0 ? NULL : sws_site_route(x->site, path, (size_t)nl);
    /* The application's connection is done with this request. */
    if (x->uc)
        fx_release(e, x);
    if (!h)
        return fx_answer_error(e, x, nl < 0 ? 400 : 404);
    sws_request_info_t info = {0};
    sws_request_t req = {0};
    req.method = "GET";
    req.method_len = 3;
    req.method_id = SWS_M_GET;
    req.target = target;
    req.target_len = len;
    req.minor = 1;
    req.path = path;
    req.path_len = (size_t)nl;
    req.raw_path = target;
    req.raw_len = plen;
    req.query = q ? q + 1 : NULL;
    req.query_len = q ? len - plen - 1 : 0;
    req.info = &info;
    req.conn = x->conn;
    req.rid = x->rid;
    req.rid_len = x->rid_len;
    req.site = x->site;
    if (h->kind == SWS_H_FASTCGI) {
        const sws_fastcgi_t *f = h->data;
        /* The same fx goes on with the new request: REQUEST_URI stays the
         * client's, as with nginx's internal redirects. */
        free(x->head);
        x->head = NULL;
        x->head_len = 0;
        x->f = f;
        x->up = f->up;
        x->method = SWS_M_GET;
        x->fs = FS_HEAD;
        x->olen = x->last_len = 0;
        x->ended = x->junk = 0;
        x->tried = 0;
        x->up_gen = f->up->gen;
        x->attempts = 0;
        x->fail_status = 0;
        x->req_done = 1;
        x->hold = 0;
        memset(&x->dec, 0, sizeof x->dec);
        x->dec.id = FCGI_ID;
        if (f->buffer_size > x->rcap) {
            char *nb = realloc(x->rbuf, f->buffer_size);
            if (!nb)
                return fx_answer_error(e, x, 500);
            x->rbuf = nb;
            x->rcap = f->buffer_size;
        }
        /* The method becomes GET: the target stays the client's. */
        memmove(x->what + 3, x->what + x->method_len, (size_t)x->target_len);
        memcpy(x->what, "GET", 3);
        x->method_len = 3;
        int st = fx_build_params(e, x, &req);
        if (st)
            return fx_answer_error(e, x, st < 0 ? 500 : st);
        if (fx_frame_request(x, NULL, 0, 1) < 0)
            return fx_answer_error(e, x, 500);
        return fx_attempt(e, x);
    }
    x->fs = FS_DONE;
    x->junk = 1;
    x->r->local_answer = 1; /* a local redirect: our answer, not the application's */
    /* static and respond routes answer at once; the dispatcher runs them */
    int status = e->fx.local_answer ? e->fx.local_answer(e, x->r, &req, h) : -1;
    if (status < 0)
        return fx_answer_error(e, x, 500); /* a proxy route: not followed */
    x->status = status;
    x->started = 1;
    if (x->r->ops->flush(e, x->r) < 0)
        return 1;
    fx_finish(e, x, SWS_FIN_OK);
    return 1;
}

static void up_read(sws_engine_t *e, fx_t *x)
{
    upconn_t *uc = x->uc;
    if (x->olen == x->rcap) {
        fx_fail(e, x, G_BAD_RESPONSE, 0);
        return;
    }
    ssize_t got = (ssize_t)x->pend; /* read with the answer before (hand_on) */
    x->pend = 0;
    if (!got)
        got = uc_recv(e, uc, x->rbuf + x->olen, x->rcap - x->olen);
    if (got < 0 && errno == EAGAIN)
        return;
    if (got <= 0) {
        err_flush(e, x);
        fx_fail(e, x, G_RESET, got < 0 ? errno : 0);
        return;
    }
    uc->dkind = D_NONE;
    x->heard = 1;
    fq_heard(e, x);
    size_t out;
    err_ctx_t ec = {e, x};
    ssize_t used = sws_fcgi_decode(&x->dec, x->rbuf + x->olen, (size_t)got, &out, on_stderr, &ec);
    if (used < 0) {
        err_flush(e, x);
        x->r->ops->discard(e, x->r);
        fx_fail(e, x, G_BAD_RESPONSE, 0);
        return;
    }
    size_t stdout_from = x->olen;
    x->olen += out;
    if (x->dec.ended) {
        err_flush(e, x);
        x->ended = 1;
        if (x->behind && (size_t)used < (size_t)got) { /* the next answer's beginning */
            x->left_at = stdout_from + (size_t)used;
            x->left_len = (size_t)got - (size_t)used;
        } else {
            x->junk |= (size_t)used < (size_t)got;
        }
        if (x->dec.protocol_status != SWS_FCGI_REQUEST_COMPLETE && !x->started &&
            x->fs == FS_HEAD) {
            fx_fail(e, x, x->dec.protocol_status == SWS_FCGI_OVERLOADED ? G_OVERLOADED
                                                                          : G_BAD_RESPONSE, 0);
            return;
        }
    }
    if (x->fs == FS_HEAD) {
        if (take_head(e, x))
            return;
        if (x->fs == FS_HEAD) {
            if (!out && x->ended) {
                fx_fail(e, x, G_BAD_RESPONSE, 0); /* END_REQUEST with no head */
                return;
            }
            fx_sync(e, x);
            return;
        }
    } else if (out && x->method != SWS_M_HEAD && x->status != 204 && x->status != 304) {
        resp_data(e, x->r, x->rbuf + stdout_from, out, SWS_REF);
    }
    if (x->ended) {
        resp_done(e, x->r);
        x->fs = FS_DONE;
    }
    x->started = 1;
    if (x->r->ops->flush(e, x->r) < 0)
        return;
    if (!x->r->ops->backed_up(x->r))
        x->olen = 0; /* all of it went; else rbuf stays referenced until it has */
    if (x->fs == FS_DONE) {
        fx_finish(e, x, SWS_FIN_OK);
        return;
    }
    fx_sync(e, x);
}

/* ---- the end ----------------------------------------------------------------------------- */

/* The one place that says whether the application's connection may serve
 * another request: NULL when it may, else why not. */
static const char *reuse_refusal(const sws_engine_t *e, const fx_t *x, const upconn_t *uc)
{
    if (!x->f->keep_conn)
        return "keep_conn is off";
    if (!x->ended)
        return "response not fully read";
    if (!x->req_done || x->woff < x->wlen)
        return "request not fully sent";
    if (x->junk)
        return "bytes after END_REQUEST";
    if (x->followed) /* and not handed on: its client left, or it went elsewhere */
        return "a request was written behind this one";
    if (fq_stalled(e, uc->srv))
        return "a request on a new connection waits for a child (fastcgi_queue.c)";
    return pool_refusal(e, uc);
}

/* x's connection is done with it: pooled, or closed with the reason
 * logged; the requests waiting for a connection to its server are told. */
static void fx_release(sws_engine_t *e, fx_t *x)
{
    upconn_t *uc = x->uc;
    fq_unwatch(x);
    fq_close(x);
    int stalled = fq_stalled(e, uc->srv);
    if (stalled)
        fq_learn(e, uc->srv);
    if (x->behind) {
        /* the one behind is written: the connection goes on with it if it
         * is clean, whatever the pool's limits say (they apply after it) */
        if (x->f->keep_conn && x->ended && x->req_done && x->woff >= x->wlen && !x->junk &&
            x->left_len <= x->behind->rcap) {
            x->uc = NULL;
            fq_hand_on(e, x, uc);
            return;
        }
        fq_unfollow(e, x);
    }
    const char *why = reuse_refusal(e, x, uc);
    x->uc = NULL;
    x->followed = 0;
    fq_kick_later(e, uc->srv);
    if (why && stalled)
        fq_freed(uc->srv);
    if (why) {
        elog(e, SWS_L_DEBUG, "FastCGI connection to %s not kept: %s", uc->srv->name, why);
        uc_close(e, uc);
    } else {
        pool_put(e, uc);
    }
}

static void fx_finish(sws_engine_t *e, fx_t *x, int how)
{
    sws_resp_t *r = x->r;
    if (x->uc)
        fx_release(e, x);
    e->core.up_inflight--;
    if (r->ops->backed_up(r)) {
        r->ops->hold_heap(e, r, x->rbuf);
        x->rbuf = NULL;
    }
    fx_free(e, x);
    r->ops->finish(e, r, how);
}

/* ---- the client's side ---------------------------------------------------------------------- */

static void fx_drained(sws_engine_t *e, void *ctx)
{
    fx_t *x = ctx;
    if (x->fs != FS_HEAD)
        x->olen = 0;
    fx_sync(e, x);
    if (x->pend && x->uc)
        sws_ready_add(e, &x->uc->ev, &x->uc->evmask); /* handed on, not read yet */
}

static void fx_gone(sws_engine_t *e, void *ctx, int why)
{
    fx_t *x = ctx;
    e->core.up_inflight--;
    if (x->uc) {
        if (!x->started && why == SWS_GONE_CLIENT) /* else the protocol answered (408, 413, 400) */
            elog_folded(e, "client closed", (uintptr_t)x->uc->srv, SWS_L_INFO,
                 "client closed the connection before the FastCGI application %s "
                 "answered \"%.*s %.*s\"", x->uc->srv->name, x->method_len, x->what,
                 x->target_len, x->what + x->method_len);
        if (x->behind)
            fq_unfollow(e, x);
        fq_unwatch(x);
        fq_close(x);
        fq_kick_later(e, x->uc->srv);
        uc_close(e, x->uc); /* the rest of its answer would be junk on a pooled connection */
    }
    if (x->ahead) { /* written behind another: its answer will follow that one's */
        x->ahead->behind = NULL; /* its answer follows: that connection is not kept */
    }
    fq_leave(e, x);
    fx_free(e, x);
}

static const sws_resp_hooks_t fx_hooks = {fx_body, fx_drained, fx_gone};

/* ---- the application's side ------------------------------------------------------------------- */

static void up_event(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    fx_t *x = uc->owner;
    if (uc->state == UC_CONNECTING) {
        int err = 0;
        socklen_t sl = sizeof err;
        getsockopt(uc->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
        if (err) {
            fx_fail(e, x, G_CONNECT, err);
            return;
        }
        uc->state = UC_ACTIVE;
        uc->deadline = 0;
        uc->dkind = D_NONE;
        if (up_write(e, x))
            return;
        fx_sync(e, x);
        return;
    }
    if ((events & EPOLLOUT) && (x->woff < x->wlen || x->behind) && up_write(e, x))
        return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        if (x->r->ops->backed_up(x->r) || x->fs == FS_DONE) {
            if (events & (EPOLLHUP | EPOLLERR)) {
                fx_fail(e, x, G_RESET, ECONNRESET);
                return;
            }
        } else {
            up_read(e, x);
            return;
        }
    }
    fx_sync(e, x);
}

/* The requests that wait for a connection get those this event freed
 * here, where no exchange is on the stack. */
static void fx_up_event(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    up_event(e, uc, events);
    if (e->fx.kick_due)
        fq_run_kicks(e);
}

static void fx_up_expire(sws_engine_t *e, upconn_t *uc, int dkind)
{
    fx_t *x = uc->owner;
    fx_fail(e, x, dkind == D_CONNECT ? G_CONNECT_TIMEOUT : dkind == D_SEND ? G_SEND_TIMEOUT
                                                                             : G_READ_TIMEOUT, 0);
    if (e->fx.kick_due)
        fq_run_kicks(e);
}

static void fx_up_kill(sws_engine_t *e, upconn_t *uc)
{
    fx_t *x = uc->owner;
    x->r->ops->close(e, x->r); /* fx_gone closes uc */
}

static const sws_upconn_ops_t fx_uc_ops = {fx_up_event, fx_up_expire, fx_up_kill};
