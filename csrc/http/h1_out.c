/* HTTP/1's side of the response interface: the serializer (status line,
 * Date and Server, Content-Length or chunked framing, the Connection
 * header, bodies copied beside the head, referenced, or sent with
 * sendfile), and exchanges with handlers that answer later (the request
 * body, client backpressure, the end). Contract in scalws/h1.h and
 * scalws/response.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "context.h"
#include "scalws/proxy.h"

#define H1(r) ((h1conn_t *)((char *)(r) - offsetof(h1conn_t, resp)))

/* RFC 9110 §15 reason phrases of the statuses the engine makes itself (a
 * proxied status keeps the upstream's phrase; respond routes bring theirs). */
static const char *reason_of(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 102: return "Processing";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 412: return "Precondition Failed";
    case 416: return "Range Not Satisfiable";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
    }
}

void h1_resp_begin(h1conn_t *hc, int minor, int head_only, int keep)
{
    hc->r_minor = (unsigned char)minor;
    hc->r_head_only = head_only;
    hc->r_keep = keep;
    hc->r_close = 0;
    hc->r_chunked = 0;
    hc->r_close_delim = 0;
    hc->r_no_body = head_only;
    hc->r_status = 0;
    hc->r_sent = 0;
}

size_t h1_respond_size(const sws_engine_t *e, const void *resp_)
{
    const sws_respond_t *r = resp_;
    /* status line and Date (~60), Content-Length (~40), Connection (~26), plus
     * the parts copied; 100 Continue (25) fits the slack too */
    return 160 + SWS_TLS_FIELDS_MAX + r->reason_len + e->h1.server_line_len +
           (r->fields_len <= COPY_HEAD_MAX ? r->fields_len : 0) +
           (r->body_len <= COPY_BODY_MAX ? r->body_len : 0);
}

static void h1_head(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                    size_t reason_len)
{
    h1conn_t *hc = H1(r);
    /* A head starts a response: nothing of one described and discarded
     * before it (a 502 in place of a bad upstream answer) carries over. */
    hc->r_status = (uint16_t)status;
    hc->r_sent = 0;
    hc->r_close = 0;
    hc->r_chunked = 0;
    hc->r_close_delim = 0;
    hc->r_no_body = hc->r_head_only || status == 204 || status == 304 || status < 200;
    if (!reason) {
        reason = reason_of(status);
        reason_len = strlen(reason);
    }
    char line[16] = "HTTP/1.1 000 ";
    line[9] = (char)('0' + status / 100 % 10);
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    out_copy(e, line, 13);
    out_copy(e, reason, reason_len);
    out_copy(e, "\r\n", 2);
    out_copy(e, e->h1.server_line, e->h1.server_line_len);
    if (hc->c.tls && hc->r_site) {
        size_t n;
        const char *f = sws_site_tls_fields(hc->r_site, &n);
        if (n)
            out_copy(e, f, n); /* Strict-Transport-Security: answers over TLS only */
    }
    out_copy(e, "Date: ", 6);
    out_copy(e, r->date ? r->date : e->core.date, SWS_HTTP_DATE_LEN);
    out_copy(e, "\r\n", 2);
    r->date = NULL;
}

static void h1_field(sws_engine_t *e, sws_resp_t *r, const char *name, size_t nl,
                     const char *value, size_t vl)
{
    out_copy(e, name, nl);
    out_copy(e, ": ", 2);
    out_copy(e, value, vl);
    out_copy(e, "\r\n", 2);
}

static void h1_fields(sws_engine_t *e, sws_resp_t *r, const char *lines, size_t len)
{
    if (!len)
        return;
    if (len <= COPY_HEAD_MAX)
        out_copy(e, lines, len);
    else
        out_ref(e, lines, len);
}

static void h1_start_body(sws_engine_t *e, sws_resp_t *r, int kind, uint64_t len)
{
    h1conn_t *hc = H1(r);
    h1x_t *x = hc->x;
    switch (kind) {
    case SWS_BODY_LENGTH:
        if (hc->r_status >= 200 && hc->r_status != 204) { /* RFC 9110 §8.6 */
            out_copy(e, "Content-Length: ", 16);
            out_u64(e, len);
            out_copy(e, "\r\n", 2);
        }
        break;
    case SWS_BODY_STREAM:
        if (hc->r_no_body)
            break;
        if (hc->r_minor >= 1) {
            out_copy(e, "Transfer-Encoding: chunked\r\n", 28);
            hc->r_chunked = 1;
        } else {
            hc->r_close_delim = 1; /* HTTP/1.0: the end of the connection ends the body */
        }
        break;
    case SWS_BODY_TUNNEL:
        out_copy(e, "Connection: upgrade\r\n\r\n", 23);
        hc->r_no_body = 0;
        hc->r_close = 1;
        if (x) {
            x->tunnel = 1;
            sws_conn_t *c = &hc->c;
            if (c->stash) {
                /* bytes the client sent after its upgrade request belong to the tunnel */
                char *s = c->stash;
                size_t n = c->stash_len;
                c->stash = NULL;
                c->stash_len = 0;
                hc->resume = 0;
                if (x->hooks->body(e, x->ctx, s, n, 0) < 0)
                    x->broken = 1; /* the next flush closes, as the tunnel lost bytes */
                free(s);
            }
        }
        return;
    default:
        break;
    }
    /* An answer that comes before the whole request body ends the
     * connection: the rest of the body is not read. */
    int keep = hc->r_keep && !hc->r_close_delim && !e->core.shutting_down && (!x || x->req_done);
    hc->r_close = !keep;
    if (!keep)
        out_copy(e, "Connection: close\r\n\r\n", 21);
    else if (hc->r_minor == 0)
        out_copy(e, "Connection: keep-alive\r\n\r\n", 26);
    else
        out_copy(e, "\r\n", 2);
}

static void h1_data(sws_engine_t *e, sws_resp_t *r, const char *p, size_t n, int flags)
{
    h1conn_t *hc = H1(r);
    if (hc->r_no_body || !n)
        return;
    hc->r_sent += n;
    if (hc->r_chunked) {
        char line[24];
        int k = snprintf(line, sizeof line, "%zx\r\n", n);
        out_copy(e, line, (size_t)k);
    }
    if (flags & SWS_REF)
        out_ref(e, p, n);
    else
        out_copy(e, p, n);
    if (hc->r_chunked)
        out_copy(e, "\r\n", 2);
}

/* A file segment of a body whose length was given (never chunked). */
static void h1_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f, uint64_t off, uint64_t len,
                    size_t chunk)
{
    h1conn_t *hc = H1(r);
    sws_conn_t *c = &hc->c;
    if (hc->r_no_body || len == 0) {
        sws_filecache_release(e->net.fc, f); /* nothing to send: back to the cache */
        return;
    }
    hc->r_sent += len;
    if (f->mem && len <= COPY_BODY_MAX) {
        out_copy(e, f->mem + off, (size_t)len); /* head and body in one write */
        sws_filecache_release(e->net.fc, f);
    } else if (f->mem) {
        out_ref(e, f->mem + off, (size_t)len); /* still one writev; the entry stays referenced */
        c->file = f;
        c->file_left = 0;
    } else {
        conn_file_start(e, c, f, off, len, chunk);
    }
}

static void h1_hold_file(sws_engine_t *e, sws_resp_t *r, sws_file_t *f)
{
    sws_conn_t *c = &H1(r)->c;
    c->file = f;
    c->file_left = 0;
}

static void h1_hold_heap(sws_engine_t *e, sws_resp_t *r, char *buf)
{
    sws_conn_t *c = &H1(r)->c;
    free(c->heap);
    c->heap = buf;
}

static void h1_done(sws_engine_t *e, sws_resp_t *r)
{
    h1conn_t *hc = H1(r);
    if (hc->r_chunked && !hc->r_no_body) {
        if (hc->x && hc->x->trailed)
            out_copy(e, "\r\n", 2); /* the end of the trailer section */
        else
            out_copy(e, "0\r\n\r\n", 5);
    }
}

/* Whether n more bytes in one more iovec fit the batch. The proxy bounds
 * what it gives (a 1xx head within RESP_HEAD_MAX, a trailer section within
 * SWS_CHUNK_TRAILER_MAX), so this holds; it guards the batch, not a path. */
static int batch_fits(const sws_engine_t *e, size_t n)
{
    return e->net.out_len + n <= OUT_BUF && e->net.niov + 1 < OUT_IOV;
}

static size_t lines_size(const sws_header_t *h, size_t nh)
{
    size_t n = 0;
    for (size_t i = 0; i < nh; i++)
        n += h[i].name_len + h[i].value_len + 4;
    return n;
}

static void put_lines(sws_engine_t *e, const sws_header_t *h, size_t nh)
{
    for (size_t i = 0; i < nh; i++)
        h1_field(e, NULL, h[i].name, h[i].name_len, h[i].value, h[i].value_len);
}

/* An informational response, copied into the batch as it comes: never to
 * an HTTP/1.0 client, which knows no 1xx (RFC 9110 §15.2). The response
 * being described is untouched (its status, framing, the log's). */
static void h1_interim(sws_engine_t *e, sws_resp_t *r, int status, const char *reason,
                       size_t reason_len, const sws_header_t *h, size_t nh)
{
    h1conn_t *hc = H1(r);
    if (hc->r_minor < 1 || status < 102 || status > 199)
        return;
    if (!reason) {
        reason = reason_of(status);
        reason_len = strlen(reason);
    }
    if (!batch_fits(e, 16 + reason_len + lines_size(h, nh)))
        return;
    char line[16] = "HTTP/1.1 1xx ";
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    out_copy(e, line, 13);
    out_copy(e, reason, reason_len);
    out_copy(e, "\r\n", 2);
    put_lines(e, h, nh);
    out_copy(e, "\r\n", 2);
}

/* The trailer section, as the last chunk and its fields (RFC 9112 §7.1.2),
 * to a client that said it takes one ("TE: trailers", RFC 9110 §10.1.4);
 * else dropped, as RFC 9110 §6.5.1 lets a recipient do (the proxy passes
 * on no field that must not be: what is left is safe to drop). */
static void h1_trailers(sws_engine_t *e, sws_resp_t *r, const sws_header_t *h, size_t nh)
{
    h1conn_t *hc = H1(r);
    h1x_t *x = hc->x;
    if (!x || !x->te_trailers || x->trailed || !hc->r_chunked || hc->r_no_body ||
        !batch_fits(e, 3 + lines_size(h, nh)))
        return;
    out_copy(e, "0\r\n", 3);
    put_lines(e, h, nh);
    x->trailed = 1;
}

/* ---- exchanges with handlers that answer later ------------------------------------ */

/* The client connection's interest and timer, from the exchange's state:
 * output it has not taken comes first; then the request body, read while
 * the handler wants it (a client that leaves is seen either way); once the
 * body is in, the next pipelined requests are read ahead into the stash,
 * bounded by the read buffer. */
static void x_sync(sws_engine_t *e, h1conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    h1x_t *x = hc->x;
    int body_open = !x->req_done || x->tunnel;
    uint32_t cm;
    if (c->pend)
        cm = EPOLLOUT;
    else if (body_open)
        cm = x->want_body ? EPOLLIN | EPOLLRDHUP : EPOLLRDHUP;
    else
        cm = c->stash_len < e->net.in_cap ? EPOLLIN | EPOLLRDHUP : EPOLLRDHUP;
    conn_set_mask(e, c, cm); /* usually unchanged: no system call */
    if (c->pend)
        ; /* out_flush armed TL_SEND */
    else if (body_open && (cm & EPOLLIN) && !x->tunnel) {
        if (c->tn.tlist != TL_BODY)
            tl_set(e, &c->tn, TL_BODY); /* from when we read: the client is not timed while
                                           the handler takes no body */
    } else {
        tl_unlink(e, &c->tn);
    }
}

static void h1_attach(sws_engine_t *e, sws_resp_t *r, const sws_resp_hooks_t *hooks, void *ctx)
{
    h1x_t *x = H1(r)->x;
    x->hooks = hooks;
    x->ctx = ctx;
}

static int h1_flush(sws_engine_t *e, sws_resp_t *r)
{
    h1conn_t *hc = H1(r);
    if (hc->x && hc->x->broken) {
        out_discard(e);
        conn_close(e, &hc->c);
        return -1;
    }
    if (!e->net.niov)
        return 0;
    if (hc->x && hc->r_status)
        hc->x->started = 1; /* (1xx alone: a 408 or 413 may still answer) */
    if (out_flush(e, &hc->c) < 0) {
        conn_close(e, &hc->c);
        return -1;
    }
    return 0;
}

static int h1_backed_up(const sws_resp_t *r) { return H1(r)->c.pend != NULL; }

static void h1_want_body(sws_engine_t *e, sws_resp_t *r, int on)
{
    h1conn_t *hc = H1(r);
    hc->x->want_body = on;
    x_sync(e, hc);
}

static void h1_discard(sws_engine_t *e, sws_resp_t *r)
{
    h1conn_t *hc = H1(r);
    if (hc->x)
        hc->x->trailed = 0;
    out_discard(e);
}

static void h1_finish(sws_engine_t *e, sws_resp_t *r, int how)
{
    h1conn_t *hc = H1(r);
    sws_conn_t *c = &hc->c;
    h1x_t *x = hc->x;
    access_log(e, c, &x->log, hc->r_status, hc->r_sent, e->core.now - hc->req_start);
    sws_stats_request(&e->core, hc->r_route, hc->r_status, e->core.now - hc->req_start);
    e->core.cnt.requests++;
    hc->x = NULL;
    int close = how == SWS_FIN_ABORT || !hc->r_keep || hc->r_close || hc->r_close_delim ||
                !x->req_done || x->tunnel || e->core.shutting_down;
    free(x);
    if (close)
        hc->close_after = 1;
    if (c->pend)
        return; /* conn_write finishes: then conn_settle closes or goes on */
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
    conn_settle(e, hc, NULL, 0);
}

static void h1_close(sws_engine_t *e, sws_resp_t *r) { conn_close(e, &H1(r)->c); }

static void h1_hold(sws_engine_t *e, sws_resp_t *r, sws_hold_t *h) { conn_hold(&H1(r)->c, h); }

const sws_resp_ops_t sws_h1_resp_ops = {
    h1_head, h1_field, h1_fields, h1_start_body, h1_data, h1_file, h1_hold_file, h1_hold_heap,
    h1_done, h1_attach, h1_flush, h1_backed_up, h1_want_body, h1_discard, h1_finish, h1_close,
    h1_hold, h1_interim, h1_trailers,
};

static size_t put_str(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return n;
}

/* What the log needs of the request, copied: the head's buffer is reused
 * before the answer comes. */
static void log_copy(h1x_t *x, const sws_request_t *r)
{
    char *q = x->logbuf;
    x->log = *r;
    x->log.method = q;
    q += put_str(q, r->method, r->method_len);
    x->log.target = q;
    q += put_str(q, r->target, r->target_len);
    if (r->host) {
        x->log.host = q;
        q += put_str(q, r->host, r->host_len);
    }
    size_t nh = 0;
    const sws_header_t *ref = find_header(r, "referer", 7);
    const sws_header_t *ua = find_header(r, "user-agent", 10);
    if (ref) {
        x->log_h[nh] = (sws_header_t){"referer", 7, q, ref->value_len};
        q += put_str(q, ref->value, ref->value_len);
        nh++;
    }
    if (ua) {
        x->log_h[nh] = (sws_header_t){"user-agent", 10, q, ua->value_len};
        q += put_str(q, ua->value, ua->value_len);
        nh++;
    }
    x->log.h = x->log_h;
    x->log.nh = nh;
    x->log.path = x->log.raw_path = NULL;
    x->log.path_len = x->log.raw_len = 0;
    x->log.info = NULL;
}

/* Unframes request body bytes in buf[0..len): the payload is then
 * buf[0..*n), *done when the body ended. Returns the input bytes consumed
 * (the bytes after the body then start at buf + ret), or -1 for a malformed
 * chunked body or one over max_body_bytes. */
static ssize_t x_deframe(sws_engine_t *e, h1x_t *x, char *buf, size_t len, size_t *n, int *done)
{
    if (!x->req_chunked) {
        size_t take = len < x->req_left ? len : (size_t)x->req_left;
        x->req_left -= take;
        x->req_done = x->req_left == 0;
        *n = take;
        *done = x->req_done;
        return (ssize_t)take;
    }
    size_t m = len;
    ssize_t rest = sws_decode_chunked(&x->rdec, buf, &m);
    if (rest == SWS_PARSE_ERROR || x->rdec.total > e->core.lim.max_body_bytes)
        return -1;
    *n = m;
    if (rest == SWS_PARSE_INCOMPLETE) {
        *done = 0;
        return (ssize_t)len;
    }
    x->req_done = 1;
    *done = 1;
    /* sws_decode_chunked moved the bytes after the body to buf + m */
    memmove(buf + (len - (size_t)rest), buf + m, (size_t)rest);
    return (ssize_t)(len - (size_t)rest);
}

int h1_x_start(sws_engine_t *e, h1conn_t *hc, sws_request_t *req, const sws_request_info_t *info,
               const sws_handler_t *h, char *body, size_t len, size_t *took)
{
    sws_conn_t *c = &hc->c;
    *took = 0;
    const sws_header_t *ref = find_header(req, "referer", 7);
    const sws_header_t *ua = find_header(req, "user-agent", 10);
    size_t logn = req->method_len + req->target_len + (req->host ? req->host_len : 0) +
                  (ref ? ref->value_len : 0) + (ua ? ua->value_len : 0);
    h1x_t *x = calloc(1, sizeof *x + logn);
    if (!x) {
        hc->close_after = 1; /* the body, if any, is not read past: the connection ends */
        return 500;
    }
    x->req_chunked = info->chunked;
    x->te_trailers = info->te_trailers;
    x->req_left = info->has_content_length ? info->content_length : 0;
    x->req_done = !info->chunked && x->req_left == 0;
    /* X-Request-Id: a trusted peer's sane one, else ours. */
    const sws_header_t *rh = find_header(req, "x-request-id", 12);
    if (rh && peer_trusted(e, c) && sane_request_id(rh->value, rh->value_len)) {
        memcpy(x->rid, rh->value, rh->value_len);
        req->rid_len = rh->value_len;
    } else {
        format_request_id(next_request_id(e), x->rid);
        req->rid_len = 16;
    }
    req->rid = x->rid;
    log_copy(x, req);
    size_t n = 0;
    int done = x->req_done;
    if (!x->req_done) {
        ssize_t used = x_deframe(e, x, body, len, &n, &done);
        if (used < 0) {
            int too_large = x->rdec.total > e->core.lim.max_body_bytes;
            req->rid = NULL; /* it lived in x */
            req->rid_len = 0;
            free(x);
            hc->close_after = 1; /* the body's framing is lost, or it is not read further */
            return too_large ? 413 : 400;
        }
        *took = (size_t)used;
    }
    hc->x = x;
    tl_unlink(e, &c->tn);
    int status = sws_dispatch_start(e, &hc->resp, req, h, body, n, done);
    if (status == 0)
        return 0;
    hc->x = NULL;
    req->rid = NULL; /* it lived in x: the log makes its own */
    req->rid_len = 0;
    /* the rest of the body is read past, as for any answer */
    if (!x->req_done && h1_skip_body(hc, x->req_chunked, x->req_left, &x->rdec) < 0)
        hc->close_after = 1;
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
    free(x);
    return status;
}

/* The client side of an exchange: output to finish, the request body, a
 * client that leaves, or pipelined requests read ahead. */
void h1_x_event(sws_engine_t *e, h1conn_t *hc, uint32_t events)
{
    sws_conn_t *c = &hc->c;
    h1x_t *x = hc->x;
    if (c->pend) {
        int rc = pend_send(e, c);
        if (rc < 0)
            conn_close(e, c);
        if (rc == 0)
            x->hooks->drained(e, x->ctx);
        return;
    }
    if (!(c->evmask & EPOLLIN)) {
        /* Reading is paused: only a client that went away matters (the
         * event may also be an EPOLLIN from before the mask changed in this
         * batch). */
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_close(e, c);
        return;
    }
    int body_open = !x->req_done || x->tunnel;
    size_t room = body_open ? e->net.in_cap : e->net.in_cap - c->stash_len;
    ssize_t got = conn_recv(c, e->net.in, room);
    if (got > 0)
        e->core.st->bytes_in += (uint64_t)got;
    if (got < 0 && errno == EAGAIN)
        return;
    if (got <= 0) {
        conn_close(e, c); /* the client left: the exchange is void */
        return;
    }
    size_t len = (size_t)got;
    if (!body_open) { /* the next request, pipelined: kept for later */
        if (conn_stash(c, e->net.in, len) < 0) {
            conn_close(e, c);
            return;
        }
        hc->resume = 1;
        x_sync(e, hc);
        return;
    }
    if (x->tunnel) {
        if (x->hooks->body(e, x->ctx, e->net.in, len, 0) < 0)
            conn_close(e, c);
        return;
    }
    size_t n;
    int done;
    ssize_t used = x_deframe(e, x, e->net.in, len, &n, &done);
    if (used < 0 && !x->started) {
        /* A chunked body outgrew max_body_bytes, or its framing broke,
         * before any answer: the handler lets go as if the client had left
         * (the upstream connection is not reused), and the client gets 413
         * (as nginx's client_max_body_size) or 400 (as nginx's "client sent
         * invalid chunked body"), then the connection ends. */
        int status = x->rdec.total > e->core.lim.max_body_bytes ? 413 : 400;
        hc->x = NULL;
        x->hooks->gone(e, x->ctx, SWS_GONE_BODY_REFUSED);
        out_discard(e);
        h1_conn_error(e, hc, status, &x->log, x->log.method_id == SWS_M_HEAD);
        free(x);
        conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
        conn_settle(e, hc, NULL, 0);
        return;
    }
    if (used < 0) {
        conn_close(e, c); /* an answer is under way and the framing is lost: only the close is left */
        return;
    }
    if (x->req_done)
        tl_unlink(e, &c->tn);
    else
        tl_set(e, &c->tn, TL_BODY); /* progress restarts body_timeout */
    if ((size_t)used < len) { /* the next request, pipelined: kept for later */
        if (conn_stash(c, e->net.in + used, len - (size_t)used) < 0) {
            conn_close(e, c);
            return;
        }
        hc->resume = 1;
    }
    if ((n || done) && x->hooks->body(e, x->ctx, e->net.in, n, done) < 0)
        conn_close(e, c);
}

/* The handler lets go (why: SWS_GONE_*) of an exchange that did not
 * finish: logged here, 499 (nginx's "client closed") when no answer had
 * started. */
static void x_abandon(sws_engine_t *e, h1conn_t *hc, int why)
{
    h1x_t *x = hc->x;
    hc->x = NULL;
    x->hooks->gone(e, x->ctx, why);
    access_log(e, &hc->c, &x->log, x->started ? hc->r_status : 499, hc->r_sent,
               e->core.now - hc->req_start);
    sws_stats_request(&e->core, hc->r_route, x->started ? hc->r_status : 499,
                      e->core.now - hc->req_start);
    e->core.cnt.requests++;
    free(x);
}

void h1_x_closing(sws_engine_t *e, h1conn_t *hc) { x_abandon(e, hc, SWS_GONE_CLIENT); }

void h1_x_body_timeout(sws_engine_t *e, h1conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    h1x_t *x = hc->x;
    char peer[48];
    *put_peer(peer, c) = 0;
    /* nginx's "client timed out ... while reading client request body" */
    elog_folded(e, "body timeout", 0, SWS_L_INFO,
                "client timed out sending the request body, %s, client: %s, "
                "request: \"%.*s %.*s\"", x->started ? "connection closed" : "408",
                peer, (int)x->log.method_len, x->log.method, (int)x->log.target_len,
                x->log.target);
    if (x->started) {
        /* The answer began: it cannot become a 408, and the rest of the
         * body would be read as the next request. */
        x_abandon(e, hc, SWS_GONE_BODY_TIMEOUT);
        conn_close(e, c);
        return;
    }
    /* RFC 9110 §15.5.9, then the close (as for a 413 in h1_x_event). The
     * batch is empty: timeouts expire between passes. */
    hc->x = NULL;
    x->hooks->gone(e, x->ctx, SWS_GONE_BODY_TIMEOUT);
    h1_conn_error(e, hc, 408, &x->log, x->log.method_id == SWS_M_HEAD);
    free(x);
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
    conn_settle(e, hc, NULL, 0);
}
