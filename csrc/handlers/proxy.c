/* The reverse proxy handler; contract in scalws/proxy.h.
 *
 * A proxied request is a `px`: the client's side (an sws_resp_t, the
 * protocol's), one upstream connection (`upconn`, csrc/upstream/) at a time,
 * and one read buffer. Bytes stream both ways with backpressure and bounded
 * memory:
 *
 *   client --body (hooks->body)--> px->w (what the upstream has not taken
 *   yet) --> upstream
 *   upstream --> px->rbuf --> the response interface (referenced by the
 *   client's pending output when the client is slow; the upstream is not
 *   read again until the client has taken it all: hooks->drained)
 *
 * so a proxied request holds at most buffer_size bytes of response and one
 * client read of request body, whatever the sizes. Request bodies arrive
 * unframed from the protocol and are re-chunked here when their length is
 * unknown (one chunk per read); response bodies are unframed here and
 * framed by the protocol. Interest in events is recomputed from the state
 * by px_sync() after every step, so no path has to remember which mask it
 * left behind; the client's half of it is the protocol's (want_body).
 *
 * Whether an upstream connection goes back to the pool is decided by
 * reuse_refusal(), the one place that lists every reason not to (with the
 * pool's own, pool_refusal). Failures before any response byte reached the
 * client go to the next server when allowed (px_retry_ok), else become
 * 502/504; failures after it end the client connection so the truncation
 * shows.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "context.h"

#include "proxy_int.h"

static void px_sync(sws_engine_t *e, px_t *x);
/* Functions returning int here return 1 when the px is gone (finished,
 * failed over to an error page, or its client closed): the caller must not
 * touch it again; 0 when it goes on. */
static int px_attempt(sws_engine_t *e, px_t *x);
static void px_finish(sws_engine_t *e, px_t *x, int how);
static void up_read(sws_engine_t *e, px_t *x);
static int up_write(sws_engine_t *e, px_t *x);
static const sws_upconn_ops_t px_uc_ops;
static const sws_resp_hooks_t px_hooks;

/* ---- small helpers ---------------------------------------------------------- */

static int idempotent(int m)
{
    return m == SWS_M_GET || m == SWS_M_HEAD || m == SWS_M_PUT || m == SWS_M_DELETE ||
           m == SWS_M_OPTIONS || m == SWS_M_TRACE;
}

/* Appends to px->w, growing it; -1 when out of memory. */
static int w_put(px_t *x, const char *p, size_t n)
{
    if (x->wlen + n > x->wcap) {
        if (x->woff) { /* what was written is dead: slide the rest down */
            memmove(x->w, x->w + x->woff, x->wlen - x->woff);
            x->wlen -= x->woff;
            x->woff = 0;
        }
        if (x->wlen + n > x->wcap) {
            size_t cap = x->wcap ? x->wcap : 4096;
            while (cap < x->wlen + n)
                cap *= 2;
            char *nw = realloc(x->w, cap);
            if (!nw)
                return -1;
            x->w = nw;
            x->wcap = cap;
        }
    }
    memcpy(x->w + x->wlen, p, n);
    x->wlen += n;
    return 0;
}

static int w_chunk(px_t *x, const char *p, size_t n)
{
    char line[24];
    int k = snprintf(line, sizeof line, "%zx\r\n", n);
    return w_put(x, line, (size_t)k) | w_put(x, p, n) | w_put(x, "\r\n", 2);
}

static const char *fail_text(int kind)
{
    switch (kind) {
    case F_CONNECT: return "connect() failed";
    case F_CONNECT_TIMEOUT: return "upstream timed out while connecting";
    case F_RESET: return "upstream closed or reset the connection";
    case F_READ_TIMEOUT: return "upstream timed out while reading the response";
    case F_SEND_TIMEOUT: return "upstream timed out while sending the request";
    case F_TLS: return "SSL handshake with the upstream failed";
    case F_TLS_TIMEOUT: return "upstream timed out while SSL handshaking";
    default: return "upstream sent an invalid response";
    }
}

static void px_free(sws_engine_t *e, px_t *x)
{
    free(x->tr);
    free(x->head);
    free(x->w);
    sws_rbuf_put(e, x->rbuf, x->rcap);
    free(x);
}

int sws_proxy_start(sws_engine_t *e, sws_resp_t *r, const sws_request_t *req,
                    const void *proxy_conf, char *body, size_t n, int done)
{
    const sws_proxy_t *p = proxy_conf;
    px_t *x = calloc(1, sizeof *x + req->method_len + req->target_len);
    if (!x)
        return 500;
    x->r = r;
    x->conn = req->conn;
    x->p = p;
    x->up = p->up;
    x->method = req->method_id;
    x->minor = req->minor;
    x->upgrade = req->info->upgrade;
    x->req_chunked = req->info->chunked;
    x->req_done = done;
    x->dec.keep_trailers = 1;
    if (req->rid_len) /* none on a cache peer's own PURGE to another */
        memcpy(x->rid, req->rid, req->rid_len);
    x->rid_len = req->rid_len;
    x->method_len = (int)req->method_len;
    x->target_len = (int)req->target_len;
    memcpy(x->what, req->method, req->method_len);
    memcpy(x->what + req->method_len, req->target, req->target_len);
    x->only = req->peer_only;
    x->up_gen = x->up->gen;
    if (req->peer_hash) {
        x->hash = req->peer_hash; /* a cache peer's forward: the key's owner (dispatch.c) */
    } else if (x->up->balance == SWS_BAL_HASH) {
        char peer[64];
        const char *k = NULL;
        size_t kl = 0;
        if (x->up->hash_key == SWS_HASH_URI) {
            k = req->target;
            kl = req->target_len;
        } else if (x->up->hash_key == SWS_HASH_HEADER) {
            const sws_header_t *hh = find_header(req, x->up->hash_header, x->up->hash_header_len);
            if (hh) {
                k = hh->value;
                kl = hh->value_len;
            } else {
                k = "";
            }
        } else {
            client_key(e, req->conn, req, &k, &kl, peer);
        }
        x->hash = hash_bytes(k, kl);
    }
    x->rcap = p->buffer_size;
    x->rbuf = sws_rbuf_get(e, x->rcap);
    /* The body that came with the head is held in head[] too when it is
     * the whole body: then a retry can send it again. */
    size_t room = n + 32;
    if (!x->rbuf ||
        build_head(e, x, req, req->info, req->path, req->path_len, req->raw_path, room) < 0) {
        px_free(e, x);
        return 500;
    }
    if (n && (x->req_chunked ? w_chunk(x, body, n) : w_put(x, body, n)) < 0) {
        px_free(e, x);
        return 500;
    }
    if (done && x->req_chunked && w_put(x, "0\r\n\r\n", 5) < 0) {
        px_free(e, x);
        return 500;
    }
    x->can_retry = x->req_done;
    if (x->can_retry && x->wlen) { /* fold the whole body into head[] */
        memcpy(x->head + x->head_len, x->w, x->wlen);
        x->head_len += x->wlen;
        x->wlen = 0;
    }
    /* w = the head (and the body so far, which stays behind it) */
    size_t body_so_far = x->wlen;
    char *nw = malloc(x->head_len + body_so_far + 1);
    if (!nw) {
        px_free(e, x);
        return 500;
    }
    memcpy(nw, x->head, x->head_len);
    if (body_so_far)
        memcpy(nw + x->head_len, x->w, body_so_far);
    free(x->w);
    x->w = nw;
    x->wlen = x->head_len + body_so_far;
    x->wcap = x->wlen + 1;
    x->woff = 0;
    r->ops->attach(e, r, &px_hooks, x);
    x->in_start = 1;
    px_attempt(e, x); /* cannot end the exchange while in_start */
    x->in_start = 0;
    if (x->early_status) {
        int status = x->early_status;
        if (x->uc)
            uc_close(e, x->uc);
        px_free(e, x);
        return status;
    }
    e->core.up_inflight++;
    return 0;
}

/* ---- the request body ------------------------------------------------------------------- */

/* Body bytes from the client, unframed by the protocol (a tunnel: raw). */
static int px_body(sws_engine_t *e, void *ctx, char *p, size_t n, int done)
{
    px_t *x = ctx;
    if (x->rs == RS_TUNNEL) {
        if (w_put(x, p, n) < 0)
            return -1;
        x->cl_eof |= done; /* up_write passes it on once w is written */
        if (x->in_relay)
            return 0; /* up_read sends it */
        if (x->uc)
            x->uc->dkind = D_NONE; /* tunnel traffic either way keeps it open */
    } else {
        if (n && (x->req_chunked ? w_chunk(x, p, n) : w_put(x, p, n)) < 0)
            return -1;
        if (done) {
            /* An end after the whole request (HTTP/2's END_STREAM on a
             * WebSocket before the 101): the tunnel starts half-closed. */
            x->cl_eof = x->upgrade && x->req_done;
            x->req_done = 1;
            if (x->req_chunked && w_put(x, "0\r\n\r\n", 5) < 0)
                return -1;
        }
        if (n || (done && x->req_chunked))
            x->can_retry = 0; /* the body is no longer all in head[] */
    }
    if (x->uc && x->uc->state == UC_ACTIVE && up_write(e, x))
        return 1;
    px_sync(e, x);
    return 0;
}

/* ---- sending the request ------------------------------------------------------------ */

/* Refills w with the head for another attempt. */
static int rearm_request(px_t *x)
{
    if (x->head_len > x->wcap) {
        char *nw = realloc(x->w, x->head_len);
        if (!nw)
            return -1;
        x->w = nw;
        x->wcap = x->head_len;
    }
    memcpy(x->w, x->head, x->head_len);
    x->wlen = x->head_len;
    x->woff = 0;
    return 0;
}

/* 502, or 503 on an app's route: its workers are down or restarting. */
static int px_unreachable(const px_t *x)
{
    return x->p->unavailable_503 ? 503 : 502;
}

/* Answers the client with an error page in place of the upstream's
 * response, and ends the proxied request. */
static int px_answer_error(sws_engine_t *e, px_t *x, int status)
{
    if (x->in_start) {
        x->early_status = status; /* the protocol answers it like any other */
        return 1;
    }
    x->status = status;
    x->rs = RS_DONE;
    x->junk = 1; /* nothing here can go back to a pool */
    x->r->local_answer = 1;
    sws_respond_answer(e, x->r, &e->rsp.err[err_index(status)]);
    x->started = 1;
    if (x->r->ops->flush(e, x->r) < 0)
        return 1;
    px_finish(e, x, SWS_FIN_OK);
    return 1;
}

/* May this failure go to the next server? Only before the response began,
 * only with the whole request at hand, and a request that may have reached
 * the upstream only when its method is idempotent. A reset of a reused
 * connection (the upstream closed it while we sent) does not count as an
 * attempt: it says nothing about the server. */
static int px_retry_ok(const sws_engine_t *e, const px_t *x, int kind, int reused)
{
    if (x->started || !x->can_retry || e->core.shutting_down)
        return 0;
    if (kind == F_READ_TIMEOUT || kind == F_SEND_TIMEOUT || kind == F_BAD_RESPONSE)
        return 0;
    if (kind == F_RESET && !idempotent(x->method))
        return 0;
    if (kind == F_RESET && reused)
        return 1;
    return x->attempts <= x->p->retries;
}

/* The upstream side failed: log it with the address (and `why`, when
 * given, in place of the kind's text), count it for passive health, then
 * retry, answer 502/504, or cut the client connection short. */
static int px_fail_why(sws_engine_t *e, px_t *x, int kind, int err, const char *why)
{
    upconn_t *uc = x->uc;
    const sws_conn_t *c = x->conn;
    int reused = 0;
    if (uc) {
        reused = uc->requests > 1;
        char peer[64];
        *put_peer(peer, c) = '\0';
        elog_folded(e, fail_text(kind), (uintptr_t)uc->srv, SWS_L_ERROR,
                    "%s%s%s, upstream: %s, request: \"%.*s %.*s\", client: %s",
                    why ? why : fail_text(kind), err ? ": " : "", err ? strerror(err) : "",
                    uc->srv->name, x->method_len, x->what, x->target_len,
                    x->what + x->method_len, peer);
        if (kind == F_RESET && reused) {
            /* The pool handed us a connection the server had closed: that
             * says nothing about the server, which may be tried again (the
             * next try takes another pooled connection or a fresh one). */
            size_t i = uc->srv->index;
            if (i < 64)
                x->tried &= ~(1ull << i);
            x->attempts--;
        } else {
            srv_fail(e, x->up, uc->srv);
        }
        x->uc = NULL;
        uc_close(e, uc);
    }
    if (px_retry_ok(e, x, kind, reused)) {
        if (rearm_request(x) == 0)
            return px_attempt(e, x);
    }
    if (!x->started)
        return px_answer_error(e, x, kind == F_READ_TIMEOUT || kind == F_CONNECT_TIMEOUT ||
                                             kind == F_SEND_TIMEOUT || kind == F_TLS_TIMEOUT
                                         ? 504
                                         : kind == F_CONNECT ? px_unreachable(x) : 502);
    /* Mid-body: the client must see the truncation, never a complete-looking
     * response: what is pending goes out, then the connection ends. */
    x->status = x->status ? x->status : 502;
    x->junk = 1;
    px_finish(e, x, SWS_FIN_ABORT);
    return 1;
}

static int px_fail(sws_engine_t *e, px_t *x, int kind, int err)
{
    return px_fail_why(e, x, kind, err, NULL);
}

static int px_attempt(sws_engine_t *e, px_t *x)
{
    sws_upstream_t *up = x->up;
    for (;;) {
        if (x->up_gen != up->gen) { /* the set changed (DNS): old indexes mean nothing */
            x->tried = 0;
            if (x->only)
                x->only = UINT32_MAX; /* that index may be another server now: it stops */
            x->up_gen = up->gen;
        }
        int i = sws_up_pick(e, up, x->tried, x->hash);
        if (x->only) /* one server alone (a PURGE sent to each peer), one attempt */
            i = x->only <= up->n_servers && !x->attempts && !up->servers[x->only - 1]->removed
                    ? (int)x->only - 1 : -1;
        if (i < 0 && x->only)
            return px_answer_error(e, x, 502); /* its own log line says why */
        if (i < 0) {
            elog_folded(e, "no live upstreams", (uintptr_t)up, SWS_L_ERROR,
                        "no live upstreams in \"%s\" while proxying \"%.*s %.*s\"", up->name,
                        x->method_len, x->what, x->target_len, x->what + x->method_len);
            return px_answer_error(e, x, px_unreachable(x));
        }
        sws_upstream_server_t *s = up->servers[i];
        if (i < 64)
            x->tried |= 1ull << i;
        x->attempts++;
        upconn_t *uc = pool_take(e, up, s);
        if (!uc) {
            uc = uc_connect(e, up, s, UC_ACTIVE);
            if (!uc) {
                int err = errno;
                elog_folded(e, fail_text(F_CONNECT), (uintptr_t)s, SWS_L_ERROR,
                            "connect() failed: %s, upstream: %s, request: \"%.*s %.*s\"",
                            strerror(err), s->name, x->method_len, x->what,
                            x->target_len, x->what + x->method_len);
                srv_fail(e, up, s);
                if (px_retry_ok(e, x, F_CONNECT, 0))
                    continue;
                return px_answer_error(e, x, px_unreachable(x));
            }
            s->active++;
        }
        uc->owner = x;
        uc->ops = &px_uc_ops;
        uc->requests++;
        uc->up->st->requests++;
        x->uc = uc;
        x->rs = RS_HEAD;
        x->rlen = x->last_len = 0;
        if (e->core.lim.batch_window_us)
            x->t_sent = mono_ns(); /* only the batching window reads answer times */
        uc->dkind = D_NONE;
        if (uc->state == UC_CONNECTING) {
            uc->deadline = e->core.now + x->p->connect_timeout_ms;
            uc->dkind = D_CONNECT;
        } else if (up_write(e, x)) {
            return 1;
        }
        px_sync(e, x);
        return 0;
    }
}

/* Sends what w holds. */
static int up_write(sws_engine_t *e, px_t *x)
{
    upconn_t *uc = x->uc;
    while (x->woff < x->wlen) {
        ssize_t n = uc_send(e, uc, x->w + x->woff, x->wlen - x->woff);
        if (n < 0) {
            if (errno == EAGAIN)
                break;
            return px_fail(e, x, F_RESET, errno);
        }
        x->woff += (size_t)n;
        uc->dkind = D_NONE; /* progress: px_sync starts the timeout again */
    }
    if (x->woff == x->wlen) {
        x->woff = x->wlen = 0;
        if (x->rs == RS_TUNNEL && x->cl_eof && !x->wr_shut) {
            /* The client's half-close (HTTP/2's END_STREAM on an extended
             * CONNECT) is the upstream's: it reads its end and can still
             * answer. Over TLS the connection stays as it is (a
             * close_notify would end both directions). */
            x->wr_shut = 1;
            if (!uc->ssl)
                shutdown(uc->fd, SHUT_WR);
        }
    }
    return 0;
}

/* ---- state -> events ----------------------------------------------------------------- */

static void px_sync(sws_engine_t *e, px_t *x)
{
    upconn_t *uc = x->uc;
    int wpending = x->woff < x->wlen;
    int connecting = uc && (uc->state == UC_CONNECTING || uc->state == UC_HANDSHAKE);
    if (uc) {
        uint32_t m;
        if (connecting) {
            /* the handshake set what it waits for */
            m = uc->state == UC_CONNECTING ? EPOLLOUT : uc->evmask;
        } else {
            int read_ok = x->rs != RS_DONE && !x->r->ops->backed_up(x->r) && !x->up_eof;
            m = (wpending ? EPOLLOUT : 0) | (read_ok ? EPOLLIN | EPOLLRDHUP : 0);
            /* Which timeout runs: sending (send_timeout), waiting for the
             * answer or tunnel traffic (read_timeout), or none while we wait
             * on the client (its body, or its slow reading: the client's own
             * timeouts rule). Progress resets dkind, restarting it. */
            int want = wpending                                   ? D_SEND
                       : !read_ok                                 ? D_NONE
                       : !x->req_done && x->rs == RS_HEAD         ? D_NONE
                                                                  : D_READ;
            if (want == D_NONE) {
                uc->dkind = D_NONE;
                uc->deadline = 0; /* also a deadline left from before the pause */
            } else if (want != uc->dkind) {
                uc->dkind = want;
                uc->deadline = want == D_SEND   ? e->core.now + x->p->send_timeout_ms
                               : want == D_READ ? e->core.now + x->p->read_timeout_ms
                                                : 0;
            }
        }
        uc_set_mask(e, uc, m);
    }
    /* The client's side: its body is read while the upstream can take it. */
    x->r->ops->want_body(e, x->r, uc && !connecting && !wpending);
}

/* ---- the response ------------------------------------------------------------------------ */

/* Describes the client's response head for a parsed upstream head. */
static void put_head(sws_engine_t *e, px_t *x, int status, const char *reason, size_t reason_len,
                     const sws_header_t *h, size_t nh)
{
    const sws_proxy_t *p = x->p;
    sws_resp_t *r = x->r;
    const char *tok[CONN_TOKENS_MAX];
    size_t tlen[CONN_TOKENS_MAX];
    int nt = conn_tokens(h, nh, tok, tlen);
    resp_head(e, r, status, reason, reason_len);
    const char *upg = NULL;
    size_t upg_len = 0;
    for (size_t i = 0; i < nh; i++) {
        if (name_is(&h[i], "upgrade", 7)) {
            upg = h[i].value;
            upg_len = h[i].value_len;
        }
        if (r->upstream_date && name_is(&h[i], "date", 4)) {
            resp_field(e, r, h[i].name, h[i].name_len, h[i].value, h[i].value_len);
            continue; /* the cache's tee takes it (freshness, age) and drops it */
        }
        if (px_resp_hop(&h[i]) || in_tokens(&h[i], tok, tlen, nt) ||
            dropped(&h[i], p->resp_drop, p->n_resp_drop))
            continue;
        resp_field(e, r, h[i].name, h[i].name_len, h[i].value, h[i].value_len);
    }
    resp_fields(e, r, p->resp_set, p->resp_set_len);
    resp_field_lit(e, r, "X-Request-Id", x->rid, x->rid_len);
    if (x->rs == RS_TUNNEL) {
        resp_field_lit(e, r, "Upgrade", upg, upg_len);
        resp_start_body(e, r, SWS_BODY_TUNNEL, 0);
    } else if (x->ri.no_body) {
        int has_len = x->ri.has_content_length && status != 204 && status >= 200;
        resp_start_body(e, r, has_len ? SWS_BODY_LENGTH : SWS_BODY_NONE, x->ri.content_length);
    } else if (x->ri.chunked || x->ri.close_delimited) {
        resp_start_body(e, r, SWS_BODY_STREAM, 0);
    } else {
        resp_start_body(e, r, SWS_BODY_LENGTH, x->ri.content_length);
    }
}

/* Body bytes from the upstream, unframed, to the client (referenced in
 * rbuf). Returns 0, or -1 for malformed framing. */
static int body_out(sws_engine_t *e, px_t *x, char *data, size_t n)
{
    if (x->rs == RS_TUNNEL) {
        resp_data(e, x->r, data, n, SWS_REF);
        return 0;
    }
    size_t m = n;
    int done = 0;
    if (x->ri.chunked) {
        ssize_t rest = sws_decode_chunked(&x->dec, data, &m);
        if (rest == SWS_PARSE_ERROR ||
            (x->dec.trailer_out && px_trailer_bytes(x, data + m, x->dec.trailer_out) < 0))
            return -1;
        if (rest >= 0) {
            done = 1;
            x->junk |= rest > 0;
        }
    } else if (!x->ri.close_delimited) {
        if (m > x->resp_left) {
            x->junk = 1;
            m = (size_t)x->resp_left;
        }
        x->resp_left -= m;
        done = x->resp_left == 0;
    }
    if (m)
        resp_data(e, x->r, data, m, SWS_REF);
    if (done) {
        if (x->tr && px_trailers(e, x) < 0)
            return -1;
        resp_done(e, x->r);
        x->rs = RS_DONE;
    }
    return 0;
}

/* Sends what was described to the client; 0, or -1 when the client is gone
 * (and the px with it). */
static int to_client(sws_engine_t *e, px_t *x)
{
    x->started = 1;
    return x->r->ops->flush(e, x->r);
}

/* A tunnel whose upstream closed, and the client has all it sent. */
static void tunnel_end(sws_engine_t *e, px_t *x)
{
    resp_done(e, x->r);
    if (to_client(e, x) < 0)
        return;
    px_finish(e, x, SWS_FIN_OK);
}

/* The upstream's end of a close-delimited body or tunnel, or a failure. */
static void up_eof(sws_engine_t *e, px_t *x, int err)
{
    if (x->rs == RS_TUNNEL) {
        /* The upstream's close ends the client's side once it has what
         * came before: cleanly (HTTP/2: END_STREAM) when it was an end,
         * as a reset when it was a failure. */
        x->up_eof = 1;
        x->junk = 1;
        if (x->uc) {
            uc_close(e, x->uc);
            x->uc = NULL;
        }
        if (err)
            x->r->ops->close(e, x->r);
        else if (!x->r->ops->backed_up(x->r))
            tunnel_end(e, x);
        return;
    }
    if (x->rs == RS_BODY && x->ri.close_delimited && !err) {
        resp_done(e, x->r);
        x->rs = RS_DONE;
        x->junk = 1; /* it is closed anyway */
        if (to_client(e, x) < 0)
            return;
        px_finish(e, x, SWS_FIN_OK);
        return;
    }
    if (x->rs == RS_HEAD && x->rlen)
        px_fail(e, x, F_BAD_RESPONSE, 0); /* a partial head, then nothing */
    else
        px_fail(e, x, F_RESET, err);
}

static void up_read(sws_engine_t *e, px_t *x)
{
    upconn_t *uc = x->uc;
    if (x->rlen == x->rcap) {
        px_fail(e, x, F_BAD_RESPONSE, 0); /* a head bigger than buffer_size */
        return;
    }
    /* With TLS, what is left decrypted inside OpenSSL when rbuf is full
     * comes back as an EPOLLIN (the upstream floor's ready list) once the
     * px wants input again: px_sync() below, or after the client drained. */
    ssize_t got = uc_recv(e, uc, x->rbuf + x->rlen, x->rcap - x->rlen);
    if (got < 0 && errno == EAGAIN) {
        if (uc->ssl)
            px_sync(e, x); /* a TLS read may wait for EPOLLOUT */
        return;
    }
    if (got <= 0) {
        up_eof(e, x, got < 0 ? errno : 0);
        return;
    }
    x->rlen += (size_t)got;
    uc->dkind = D_NONE; /* progress */
    size_t body_off = 0;
    while (x->rs == RS_HEAD) {
        int minor, status;
        const char *reason;
        size_t reason_len, nh = RESP_HEADERS_MAX;
        sws_header_t h[RESP_HEADERS_MAX];
        int n = sws_parse_response(x->rbuf, x->rlen, &minor, &status, &reason, &reason_len, h, &nh,
                                   x->last_len);
        if (n == SWS_PARSE_INCOMPLETE) {
            x->last_len = x->rlen;
            if (x->rlen == x->rcap)
                px_fail(e, x, F_BAD_RESPONSE, 0);
            else
                px_sync(e, x); /* restarts the read timeout */
            return;
        }
        if (n < 0) {
            px_fail(e, x, F_BAD_RESPONSE, 0);
            return;
        }
        x->last_len = 0;
        if (status >= 100 && status < 200 && status != 101) {
            /* An interim answer; the final one follows. A proxy passes 1xx
             * on (RFC 9110 §15.2), but 100: the client's expectation was
             * ours to meet (the protocol sent its 100, and the upstream got
             * no Expect), so the upstream's would be a second. */
            if ((size_t)n > RESP_HEAD_MAX || ++x->n_interim > PX_INTERIM_MAX) {
                px_fail(e, x, F_BAD_RESPONSE, 0);
                return;
            }
            if (status != 100 && px_interim(e, x, status, reason, reason_len, h, nh) < 0)
                return;
            memmove(x->rbuf, x->rbuf + n, x->rlen - (size_t)n);
            x->rlen -= (size_t)n;
            continue;
        }
        if (sws_analyze_response(x->method, minor, status, h, nh, &x->ri) < 0 ||
            (status == 101 && (!x->upgrade || !x->ri.upgrade)) || (size_t)n > RESP_HEAD_MAX) {
            px_fail(e, x, F_BAD_RESPONSE, 0);
            return;
        }
        uc->srv->fails = 0;
        if (e->core.lim.batch_window_us) { /* how long upstreams take to answer: its signal */
            uint64_t took = mono_ns() - x->t_sent;
            e->core.up_wait_ns = e->core.up_wait_ns - e->core.up_wait_ns / 16 + took / 16;
        }
        x->status = status;
        x->resp_left = x->ri.content_length;
        if (status == 101) {
            x->rs = RS_TUNNEL;
        } else {
            x->rs = x->ri.no_body || (!x->ri.chunked && !x->ri.close_delimited && !x->resp_left)
                        ? RS_DONE
                        : RS_BODY;
        }
        /* A tunnel's start hands over what the client sent after its
         * upgrade request (px_body queues it: in_relay). */
        x->in_relay = 1;
        put_head(e, x, status, reason, reason_len, h, nh);
        x->in_relay = 0;
        body_off = (size_t)n;
        if (x->rs == RS_DONE)
            x->junk |= x->rlen > body_off;
    }
    if (x->rs != RS_DONE && x->rlen > body_off &&
        body_out(e, x, x->rbuf + body_off, x->rlen - body_off) < 0) {
        x->r->ops->discard(e, x->r); /* a head queued with this body must not go out: a 502 replaces it */
        px_fail(e, x, F_BAD_RESPONSE, 0);
        return;
    }
    if (to_client(e, x) < 0)
        return;
    if (!x->r->ops->backed_up(x->r))
        x->rlen = 0; /* all of it went; else rbuf stays referenced until it has */
    if (x->rs == RS_DONE) {
        px_finish(e, x, SWS_FIN_OK);
        return;
    }
    if (x->rs == RS_TUNNEL && up_write(e, x)) /* the client's bytes so far, or its end */
        return;
    px_sync(e, x);
}


/* ---- the end of a proxied request --------------------------------------------------- */

/* The one place that says whether an upstream connection may serve another
 * request: NULL when it may, else why not (each reason has its test in
 * tests/e2e/test_proxy.py). */
static const char *reuse_refusal(const sws_engine_t *e, const px_t *x, const upconn_t *uc)
{
    if (x->rs == RS_TUNNEL)
        return "upgraded to a tunnel";
    if (x->rs != RS_DONE)
        return "response not fully read";
    if (!x->req_done || x->woff < x->wlen)
        return "request not fully sent";
    if (x->junk)
        return "bytes after the response";
    if (!x->ri.keepalive)
        return "upstream said Connection: close";
    return pool_refusal(e, uc);
}

static void px_finish(sws_engine_t *e, px_t *x, int how)
{
    sws_resp_t *r = x->r;
    upconn_t *uc = x->uc;
    if (uc) {
        const char *why = reuse_refusal(e, x, uc);
        x->uc = NULL;
        if (why) {
            elog(e, SWS_L_DEBUG, "upstream connection to %s not kept: %s", uc->srv->name, why);
            uc_close(e, uc);
        } else {
            pool_put(e, uc);
        }
    }
    e->core.up_inflight--;
    if (r->ops->backed_up(r)) { /* the last bytes are still referenced: rbuf goes with them */
        r->ops->hold_heap(e, r, x->rbuf);
        x->rbuf = NULL;
    }
    px_free(e, x);
    r->ops->finish(e, r, how); /* may start the next request on this connection */
}

/* ---- the client's side ---------------------------------------------------------------- */

/* The client took all the output: rbuf is free again. */
static void px_drained(sws_engine_t *e, void *ctx)
{
    px_t *x = ctx;
    if (x->rs != RS_HEAD)
        x->rlen = 0; /* the client has all of rbuf (a head still arriving stays) */
    if (x->up_eof) {
        tunnel_end(e, x);
        return;
    }
    px_sync(e, x);
}

/* The client connection closes under the proxy, or its body timed out (the
 * protocol logs that): the upstream side goes too. */
static void px_gone(sws_engine_t *e, void *ctx, int why)
{
    px_t *x = ctx;
    e->core.up_inflight--;
    if (x->uc) {
        if (!x->started && why == SWS_GONE_CLIENT) /* else the protocol answered (408, 413, 400) */
            elog_folded(e, "client closed", (uintptr_t)x->uc->srv, SWS_L_INFO,
                        "client closed the connection before the upstream %s answered "
                        "\"%.*s %.*s\"", x->uc->srv->name, x->method_len, x->what,
                        x->target_len, x->what + x->method_len);
        uc_close(e, x->uc); /* never reused: its response was not read to the end */
    }
    px_free(e, x);
}

static const sws_resp_hooks_t px_hooks = {px_body, px_drained, px_gone};

/* ---- the upstream's side ---------------------------------------------------------------- */

static void px_up_event(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    px_t *x = uc->owner;
    if (uc->state == UC_CONNECTING || uc->state == UC_HANDSHAKE) {
        if (uc->state == UC_CONNECTING) {
            int err = 0;
            socklen_t sl = sizeof err;
            getsockopt(uc->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
            if (err) {
                px_fail(e, x, F_CONNECT, err);
                return;
            }
            if (uc->ssl)
                uc->state = UC_HANDSHAKE; /* still under the connect timeout */
        }
        if (uc->state == UC_HANDSHAKE) {
            char why[320];
            int r = uc_handshake(e, uc, why, sizeof why);
            if (r == 0)
                return; /* it set the mask for what it waits for */
            if (r < 0) {
                px_fail_why(e, x, F_TLS, 0, why);
                return;
            }
        }
        uc->state = UC_ACTIVE;
        uc->deadline = 0;
        uc->dkind = D_NONE;
        if (up_write(e, x))
            return;
        px_sync(e, x);
        return;
    }
    if ((events & EPOLLOUT) && x->woff < x->wlen && up_write(e, x))
        return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        if (x->r->ops->backed_up(x->r) || x->rs == RS_DONE) {
            if (events & (EPOLLHUP | EPOLLERR)) {
                px_fail(e, x, F_RESET, ECONNRESET);
                return;
            }
        } else {
            up_read(e, x);
            return;
        }
    }
    px_sync(e, x);
}

static void px_up_expire(sws_engine_t *e, upconn_t *uc, int dkind)
{
    px_t *x = uc->owner;
    int kind = dkind == D_CONNECT ? (uc->state == UC_HANDSHAKE ? F_TLS_TIMEOUT : F_CONNECT_TIMEOUT)
               : dkind == D_SEND  ? F_SEND_TIMEOUT
                                  : F_READ_TIMEOUT;
    if (x->rs == RS_TUNNEL)
        x->r->ops->close(e, x->r);
    else
        px_fail(e, x, kind, 0);
}

static void px_up_kill(sws_engine_t *e, upconn_t *uc)
{
    px_t *x = uc->owner;
    x->r->ops->close(e, x->r); /* px_gone closes uc */
}

static const sws_upconn_ops_t px_uc_ops = {px_up_event, px_up_expire, px_up_kill};
