/* HTTP/2's requests (csrc/http/h2/h2_int.h): a stream whose header block
 * ended becomes the request view, is routed and handed to its handler
 * (HTTP/1's conn_process, without the framing); its body reaches the
 * handler as it wants it. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/h2/h2_int.h"
#include "scalws/path.h"

/* Hands the request body waiting in s to its handler (it wants it). */
void h2_body_to_handler(sws_engine_t *e, h2s_t *s)
{
    h2conn_t *hc = s->hc;
    static char none[1];
    if (!s->bin_len && !(s->req_done && !s->fin_given))
        return;
    char *b = s->bin;
    size_t n = s->bin_len;
    int done = s->req_done;
    s->bin = NULL;
    s->bin_len = s->bin_cap = 0;
    if (done)
        s->fin_given = 1;
    int32_t id = s->id;
    int open = s->open;
    int rc = s->hooks->body(e, s->ctx, b ? b : none, n, done);
    if (n && open && hc->sess)
        h2_consume(hc, id, n);
    if (rc == 0 && n && !done) /* (rc 0: the exchange goes on, s with it) */
        h2s_body_timer(e, s);      /* the client has its window back: timed from here */
    free(b);
    if (rc < 0 && s->live) {
        if (s->open)
            h2_rst(hc, s->id, H2_INTERNAL_ERROR);
        h2s_gone(e, s);
    }
}

/* Starts a handler that answers later: 0 when it took the request (s is
 * live), or a status to answer now. */
static int x_start(sws_engine_t *e, h2conn_t *hc, h2s_t *s, sws_request_t *req,
                   const sws_handler_t *h)
{
    const sws_header_t *rh = find_header(req, "x-request-id", 12);
    if (rh && peer_trusted(e, &hc->c) && sane_request_id(rh->value, rh->value_len)) {
        memcpy(s->rid, rh->value, rh->value_len);
        req->rid_len = rh->value_len;
    } else {
        format_request_id(next_request_id(e), s->rid);
        req->rid_len = 16;
    }
    req->rid = s->rid;
    /* What the log needs lives in s->rq for the stream's life. */
    s->log = *req;
    size_t nh = 0;
    const sws_header_t *ref = find_header(req, "referer", 7);
    const sws_header_t *ua = find_header(req, "user-agent", 10);
    if (ref)
        s->log_h[nh++] = *ref;
    if (ua)
        s->log_h[nh++] = *ua;
    s->log.h = s->log_h;
    s->log.nh = nh;
    s->log.path = s->log.raw_path = s->log.query = NULL;
    s->log.path_len = s->log.raw_len = s->log.query_len = 0;
    s->log.info = NULL;
    s->live = 1;
    hc->n_live++;
    /* A WebSocket's upgrade request is whole (HTTP/1's has no body): the
     * upstream's timeouts run, and a failed connect may be retried; what
     * the stream carries is the tunnel's, its END_STREAM a later done. */
    int done = s->req_done || s->ws;
    int status = sws_dispatch_start(e, &s->resp, req, h, NULL, 0, done);
    if (status == 0) {
        if (s->req_done && !s->ws)
            s->fin_given = 1; /* done came with the start */
        /* a WebSocket's END_STREAM on its CONNECT is the tunnel's end of
         * input: body(done) once the tunnel wants a body (h2_want_body) */
        return 0;
    }
    /* A start that fails has neither finished nor closed r (the handlers'
     * in_start rule) and the connection cannot close under it (we are in
     * sws_h2sess_recv: h2_fail only marks), so s is still live;
     * the test keeps one decrement should a handler close r before it
     * returns its error (h2_close already counted it). */
    if (s->live) {
        s->live = 0;
        hc->n_live--;
    }
    s->hooks = NULL;
    req->rid = NULL; /* the log makes its own */
    req->rid_len = 0;
    return status;
}

/* RFC 9113 §8.1: an interim 100 before the final answer, so that a client
 * that sent "Expect: 100-continue" sends its body now (RFC 9110 §10.1.1).
 * Only a handler that reads the body asks for it; every other answer is
 * final without one, and the body that follows it is read past. */
static void send_continue(h2conn_t *hc, h2s_t *s)
{
    sws_h2field_t f = {(const uint8_t *)":status", (const uint8_t *)"100", 7, 3, 0};
    if (s->open && !s->submitted)
        sws_h2sess_headers(hc->sess, s->id, &f, 1, 0); /* literals: nothing to copy */
}

/* An extended CONNECT for WebSocket (RFC 8441 §5) as the HTTP/1.1 upgrade
 * request an HTTP/1 client would have sent (RFC 6455 §4.1): GET with
 * Upgrade (the proxy adds Connection: upgrade), a Sec-WebSocket-Key of
 * ours (16 random bytes, base64: key holds 24 characters) and version 13;
 * the client's Sec-WebSocket-Protocol and -Extensions pass on as they are.
 * hdrs has room for three more fields. The body of the stream is the
 * tunnel: no length, no chunking. */
static void ws_request(sws_engine_t *e, sws_request_t *r, sws_request_info_t *info,
                       sws_header_t *hdrs, char *key)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t raw[18] = {0};
    uint64_t *prng = &e->st.prng; /* seeded by getrandom; a nonce, not a secret */
    for (int i = 0; i < 16; i += 8) {
        *prng ^= *prng << 13;
        *prng ^= *prng >> 7;
        *prng ^= *prng << 17;
        memcpy(raw + i, prng, 8);
    }
    for (int i = 0, o = 0; i < 18; i += 3, o += 4) {
        uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 | raw[i + 2];
        key[o] = b64[v >> 18 & 63];
        key[o + 1] = b64[v >> 12 & 63];
        key[o + 2] = b64[v >> 6 & 63];
        key[o + 3] = b64[v & 63];
    }
    key[22] = key[23] = '='; /* 16 bytes: two padding characters */
    sws_header_t *h = hdrs; /* r->h */
    size_t nh = r->nh;
    h[nh++] = (sws_header_t){"upgrade", 7, "websocket", 9};
    h[nh++] = (sws_header_t){"sec-websocket-key", 17, key, 24};
    h[nh++] = (sws_header_t){"sec-websocket-version", 21, "13", 2};
    r->nh = nh;
    r->method = "GET";
    r->method_len = 3;
    r->method_id = SWS_M_GET;
    info->method = SWS_M_GET;
    info->upgrade = 1;
    info->chunked = 0;
    info->expect_continue = 0;
}

/* A request whose header block ended: the request view, the route, the
 * handler (HTTP/1's conn_process, without the framing). */
void h2_dispatch(sws_engine_t *e, h2conn_t *hc, h2s_t *s)
{
    sws_conn_t *c = &hc->c;
    sws_request_t r;
    memset(&r, 0, sizeof r);
    r.conn = c;
    r.http2 = 1;
    r.minor = 1;
    sws_request_info_t info;
    memset(&info, 0, sizeof info);
    info.keepalive = 1;
    const char *q = s->rq ? s->rq : "";
    /* RFC 8441: CONNECT with :protocol (the session checked that :scheme,
     * :path and :authority came with it). */
    int ext = s->pr.nl && s->pm.vl == 7 && memcmp(q + s->pm.v, "CONNECT", 7) == 0;
    int ws = ext && s->pr.vl == 9 && strncasecmp(q + s->pr.v, "websocket", 9) == 0;
    size_t nh = 0;
    sws_header_t hdrs[s->nh + 4]; /* + the upgrade's three (ws_request) */
    size_t cookie_len = 0, n_cookies = 0;
    for (size_t i = 0; i < s->nh; i++) {
        sws_header_t *h = &hdrs[nh];
        h->name = q + s->hdr[i].n;
        h->name_len = s->hdr[i].nl;
        h->value = q + s->hdr[i].v;
        h->value_len = s->hdr[i].vl;
        if (ws && ((h->name_len == 17 && memcmp(h->name, "sec-websocket-key", 17) == 0) ||
                   (h->name_len == 21 && memcmp(h->name, "sec-websocket-version", 21) == 0)))
            continue; /* ours to set for the HTTP/1 handshake (ws_request) */
        if (h->name_len == 6 && memcmp(h->name, "cookie", 6) == 0) {
            n_cookies++;
            cookie_len += h->value_len + 2;
            if (n_cookies > 1)
                continue; /* merged below */
        }
        nh++;
    }
    char *merged = NULL;
    if (n_cookies > 1) {
        /* RFC 9113 §8.2.3: crumbs become one field for HTTP/1 (upstreams, FastCGI). */
        merged = malloc(cookie_len);
        if (merged) {
            size_t m = 0;
            for (size_t i = 0; i < s->nh; i++) {
                if (s->hdr[i].nl != 6 || memcmp(q + s->hdr[i].n, "cookie", 6) != 0)
                    continue;
                if (m) {
                    memcpy(merged + m, "; ", 2);
                    m += 2;
                }
                memcpy(merged + m, q + s->hdr[i].v, s->hdr[i].vl);
                m += s->hdr[i].vl;
            }
            for (size_t i = 0; i < nh; i++)
                if (hdrs[i].name_len == 6 && memcmp(hdrs[i].name, "cookie", 6) == 0) {
                    hdrs[i].value = merged;
                    hdrs[i].value_len = m;
                }
        }
    }
    r.h = hdrs;
    r.nh = nh;
    r.method = q + s->pm.v;
    r.method_len = s->pm.vl;
    r.target = s->pp.nl ? q + s->pp.v : "";
    r.target_len = s->pp.nl ? s->pp.vl : 0;
    int method = sws_method_id(r.method, r.method_len);
    r.method_id = method;
    info.method = method;
    s->head_only = method == SWS_M_HEAD;
    int host_differs = 0;
    if (s->pa.nl && s->pa.vl) {
        r.host = q + s->pa.v;
        r.host_len = s->pa.vl;
        const sws_header_t *hh = find_header(&r, "host", 4);
        host_differs = hh && (hh->value_len != r.host_len ||
                              strncasecmp(hh->value, r.host, r.host_len) != 0);
    } else {
        const sws_header_t *hh = find_header(&r, "host", 4);
        if (hh) {
            r.host = hh->value;
            r.host_len = hh->value_len;
        }
    }
    info.host = r.host;
    info.host_len = r.host_len;
    info.has_host = r.host != NULL;
    int status = 0;
    const sws_header_t *cl = find_header(&r, "content-length", 14);
    if (cl) {
        if (sws_parse_content_length((const uint8_t *)cl->value, cl->value_len, &info.content_length) < 0)
            status = 400;
        info.has_content_length = 1;
        s->cl_known = !status;
        s->cl_left = info.content_length;
    }
    /* Expect, as HTTP/1 reads it: 100-continue is met, any other
     * expectation cannot be (417, RFC 9110 §10.1.1) */
    int bad_expect = 0;
    for (size_t i = 0; i < r.nh; i++) {
        const sws_header_t *ex = &r.h[i]; /* every Expect field: a list may span several */
        if (ex->name_len != 6 || memcmp(ex->name, "expect", 6) != 0) /* names are lowercase here */
            continue;
        const char *p = ex->value, *el;
        size_t el_len;
        while (sws_list_next(&p, ex->value + ex->value_len, &el, &el_len)) {
            if (el_len == 12 && strncasecmp(el, "100-continue", 12) == 0)
                info.expect_continue = 1;
            else
                bad_expect = 1;
        }
    }
    /* a body whose length is unknown goes to HTTP/1 upstreams chunked */
    info.chunked = !s->req_done && !info.has_content_length;
    r.info = &info;
    if (status) {
    } else if (s->too_big) {
        status = 431;
    } else if (method == SWS_M_CONNECT && !ws) {
        /* Not a forward proxy, and WebSocket is the only protocol extended
         * CONNECT can ask for (RFC 9110 §15.6.2: the functionality is not
         * there, for any target). */
        status = 501;
    } else if (!r.target_len) {
        status = 400;
    } else if (r.target_len > e->core.lim.max_uri_bytes) {
        status = 414;
    } else if (r.target[0] != '/' && !(r.target_len == 1 && r.target[0] == '*' && method == SWS_M_OPTIONS)) {
        status = 400;
    } else if (!r.host_len || host_differs || memchr(r.host, '@', r.host_len)) {
        /* RFC 9113 §8.3.1: an authority, without userinfo (the session lets '@'
         * through: it checks authority characters), and a Host that names
         * the same one; a malformed request may be answered (§8.1.1). The
         * proxy sends this authority upstream as Host. */
        status = 400;
    } else if (bad_expect) {
        status = 417;
    } else if (info.has_content_length && info.content_length > e->core.lim.max_body_bytes) {
        status = 413;
    }
    const char *path = r.target;
    size_t path_len = r.target_len;
    if (!status) {
        const char *qm = memchr(r.target, '?', r.target_len);
        path_len = qm ? (size_t)(qm - r.target) : r.target_len;
        r.raw_path = path;
        r.raw_len = path_len;
        if (qm) {
            r.query = qm + 1;
            r.query_len = (size_t)(r.target + r.target_len - r.query);
        }
        if (path[0] == '/') {
            ssize_t nl = sws_normalize_path(path, path_len, e->h2.path);
            if (nl < 0) {
                status = 400;
            } else {
                path = e->h2.path;
                path_len = (size_t)nl;
            }
        }
    }
    if (status) {
        s->site = NULL;
        sws_respond_answer(e, &s->resp, &e->rsp.err[err_index(status)]);
        h2s_log(e, s, &r, s->status);
        e->core.cnt.errors_4xx_close++;
        if (h2_commit(e, s) < 0)
            h2_rst(hc, s->id, H2_INTERNAL_ERROR);
        free(merged);
        return;
    }
    r.path = path;
    r.path_len = path_len;
    const sws_site_t *site = sws_vhosts_find(hc->vh, r.host, r.host_len);
    s->site = site;
    r.site = site;
    const sws_handler_t *h = site ? sws_site_route(site, path, path_len) : NULL;
    s->route = h && h->stat_id <= UINT16_MAX ? (uint16_t)h->stat_id : 0;
    const sws_handler_t *later = h;
    char ws_key[24];
    int answered;
    if (ws && !(h && h->kind == SWS_H_PROXY)) {
        /* Only a proxy route can tunnel: 501, as for a plain CONNECT (a
         * 405 would have to list the methods the route takes in Allow). */
        sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_501]);
        answered = 1;
    } else {
        if (ws) {
            ws_request(e, &r, &info, hdrs, ws_key);
            s->ws = 1;
        }
        answered = sws_dispatch_answer(e, &s->resp, &r, &later);
    }
    if (!answered) { /* a handler that answers later: the stream is its exchange */
        int rc = x_start(e, hc, s, &r, later);
        if (rc == 0) {
            if (ws) { /* the log names what the client asked for */
                s->log.method = q + s->pm.v;
                s->log.method_len = s->pm.vl;
            }
            if (info.expect_continue && !s->req_done && !ws)
                send_continue(hc, s); /* the handler reads the body: the client may send it */
            free(merged); /* the handler copied what it keeps */
            return;
        }
        if (rc != SWS_ANSWERED)
            sws_respond_answer(e, &s->resp, &e->rsp.err[err_index(rc)]);
    }
    h2s_log(e, s, &r, s->status);
    free(merged);
    if (h2_commit(e, s) < 0)
        h2_rst(hc, s->id, H2_INTERNAL_ERROR);
}

/* ---- the connection ------------------------------------------------------------------------- */

