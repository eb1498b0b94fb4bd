/* HTTP/3's requests (csrc/http/h3/h3_int.h): a request stream's field
 * section becomes the request view, is routed and handed to its handler
 * (HTTP/2's h2_dispatch, over QPACK's fields); its body reaches the
 * handler as it wants it, and its flow-control credit goes back to the
 * client as the handler takes it. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/h3/h3_int.h"
#include "scalws/path.h"

/* Buffers a spare stream keeps (larger ones are freed). */
#define KEEP_RQ 4096
#define KEEP_HDR 64
#define KEEP_HB 2048

h3s_t *h3s_new(h3conn_t *hc, int64_t id)
{
    sws_engine_t *e = hc->e;
    h3s_t *s = e->h3.spare;
    if (s) { /* a spare, with the buffers it kept */
        e->h3.spare = s->next;
        e->h3.n_spare--;
        char *rq = s->rq, *hb = s->hb;
        h3hoff_t *hdr = s->hdr;
        size_t rq_cap = s->rq_cap, hcap = s->hcap, hb_cap = s->hb_cap;
        /* all but the log's copy of the request (log, log_h, rid: five
         * cache lines), which only a handler that answers later reads,
         * after x_start wrote it whole: a spare is cold by now, and
         * clearing lines no answer reads cost it misses */
        memset(s, 0, offsetof(h3s_t, log));
        memset(&s->hb, 0, sizeof *s - offsetof(h3s_t, hb));
        s->rq = rq, s->rq_cap = rq_cap;
        s->hdr = hdr, s->hcap = hcap;
        s->hb = hb, s->hb_cap = hb_cap;
    } else if (!(s = calloc(1, sizeof *s))) {
        return NULL;
    }
    s->resp.ops = &h3_resp_ops;
    s->hc = hc;
    s->id = id;
    s->open = 1;
    s->start = hc->e->core.now;
    s->next = hc->streams;
    if (s->next)
        s->next->prev = s;
    hc->streams = s;
    hc->n_streams++;
    return s;
}

void h3s_log(sws_engine_t *e, h3s_t *s, const sws_request_t *r, int status)
{
    uint64_t ms = e->core.now - s->start;
    access_log(e, &s->hc->c, r, status, s->sent, ms);
    sws_stats_request(&e->core, s->route, status, ms);
    e->core.cnt.requests++;
    s->logged = 1;
}

void h3s_gone(sws_engine_t *e, h3s_t *s, int why)
{
    if (!s->live)
        return;
    s->live = 0;
    const sws_resp_hooks_t *hooks = s->hooks;
    s->hooks = NULL;
    if (!s->logged)
        h3s_log(e, s, &s->log, s->submitted ? s->status : 499);
    hooks->gone(e, s->ctx, why);
}

void h3s_free(sws_engine_t *e, h3s_t *s)
{
    h3conn_t *hc = s->hc;
    h3s_gone(e, s, SWS_GONE_CLIENT);
    if (hc->h3 && s->open)
        sws_h3sess_set_user(hc->h3, s->id, NULL);
    h3s_release(e, s);
    if (s->prev)
        s->prev->next = s->next;
    else
        hc->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    hc->n_streams--;
    if (s->id >= 0 && ngtcp2_is_bidi_stream(s->id))
        h3_drain_check(e, hc);
    free(s->bin);
    if (e->h3.n_spare < SWS_H3_SPARE && !e->core.shutting_down) {
        if (s->rq_cap > KEEP_RQ) {
            free(s->rq);
            s->rq = NULL;
            s->rq_cap = 0;
        }
        if (s->hcap > KEEP_HDR) {
            free(s->hdr);
            s->hdr = NULL;
            s->hcap = 0;
        }
        if (s->hb_cap > KEEP_HB) {
            free(s->hb);
            s->hb = NULL;
            s->hb_cap = 0;
        }
        s->next = e->h3.spare;
        e->h3.spare = s;
        e->h3.n_spare++;
        return;
    }
    free(s->rq);
    free(s->hdr);
    free(s->hb);
    free(s);
}

/* ---- the field section ---------------------------------------------------------------------- */

static int rq_put(h3s_t *s, const uint8_t *p, size_t n, uint32_t *at)
{
    if (s->rq_len + n > s->rq_cap) {
        size_t cap = s->rq_cap ? s->rq_cap * 2 : 1024;
        while (cap < s->rq_len + n)
            cap *= 2;
        char *nr = realloc(s->rq, cap);
        if (!nr)
            return -1;
        s->rq = nr;
        s->rq_cap = cap;
    }
    memcpy(s->rq + s->rq_len, p, n);
    *at = (uint32_t)s->rq_len;
    s->rq_len += n;
    return 0;
}

int h3s_header(h3s_t *s, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl)
{
    sws_engine_t *e = s->hc->e;
    /* RFC 9114 §4.2.2: a field's size is its name's and value's plus 32 */
    s->hsize += nl + vl + 32;
    if (s->too_big || s->hsize > e->core.lim.max_header_bytes + 32 * e->core.lim.max_headers ||
        s->nh >= e->core.lim.max_headers) {
        s->too_big = 1; /* read to its end, answered 431 */
        return 0;
    }
    h3hoff_t f = {0, (uint32_t)nl, 0, (uint32_t)vl};
    if (rq_put(s, name, nl, &f.n) < 0 || rq_put(s, value, vl, &f.v) < 0)
        return -1;
    if (nl && name[0] == ':') { /* the session let known ones through, once each */
        if (nl == 7 && memcmp(name, ":method", 7) == 0)
            s->pm = f;
        else if (nl == 5 && memcmp(name, ":path", 5) == 0)
            s->pp = f;
        else if (nl == 10 && memcmp(name, ":authority", 10) == 0)
            s->pa = f;
        else if (nl == 7 && memcmp(name, ":scheme", 7) == 0)
            s->ps = f;
        return 0;
    }
    if (s->nh == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 16;
        h3hoff_t *nh = realloc(s->hdr, cap * sizeof *nh);
        if (!nh)
            return -1;
        s->hdr = nh;
        s->hcap = cap;
    }
    s->hdr[s->nh++] = f;
    return 0;
}

/* ---- the request body ----------------------------------------------------------------------- */

void h3_body_to_handler(sws_engine_t *e, h3s_t *s)
{
    static char none[1];
    if (!s->live || !s->want_body)
        return;
    if (!s->bin_len && !(s->req_done && !s->fin_given))
        return;
    h3conn_t *hc = s->hc;
    char *b = s->bin;
    size_t n = s->bin_len;
    int done = s->req_done;
    s->bin = NULL;
    s->bin_len = s->bin_cap = 0;
    if (done)
        s->fin_given = 1;
    int rc = s->hooks->body(e, s->ctx, b ? b : none, n, done);
    h3_consume(hc, s->id, n); /* the client may send as much again */
    free(b);
    if (rc < 0 && s->live) {
        h3s_reset(s, H3_INTERNAL_ERROR);
        h3s_gone(e, s, SWS_GONE_CLIENT);
    }
    h3_due(hc);
}

void h3s_body_in(sws_engine_t *e, h3s_t *s, const uint8_t *p, size_t n)
{
    h3conn_t *hc = s->hc;
    s->body_total += n;
    if (!s->live) {
        h3_consume(hc, s->id, n); /* answered already: read past */
        return;
    }
    if (s->body_total > e->core.lim.max_body_bytes) {
        /* a body without a content-length grew past the limit: 413 when
         * nothing went yet, else the stream ends; the log line says which */
        s->logged = 1;
        h3s_gone(e, s, SWS_GONE_BODY_REFUSED);
        s->logged = 0;
        if (!s->submitted) {
            sws_respond_answer(e, &s->resp, &e->rsp.err[SWS_ERR_413]);
            h3s_log(e, s, &s->log, 413);
            if (h3_commit(e, s) < 0)
                h3s_reset(s, H3_INTERNAL_ERROR);
        } else {
            h3s_log(e, s, &s->log, s->status);
            h3s_reset(s, H3_INTERNAL_ERROR);
        }
        h3_consume(hc, s->id, n + s->bin_len);
        s->bin_len = 0;
        return;
    }
    if (s->bin_len + n > s->bin_cap) {
        size_t cap = s->bin_cap ? s->bin_cap * 2 : 16384;
        while (cap < s->bin_len + n)
            cap *= 2;
        char *nb = realloc(s->bin, cap);
        if (!nb) {
            h3s_reset(s, H3_INTERNAL_ERROR);
            h3s_gone(e, s, SWS_GONE_CLIENT);
            return;
        }
        s->bin = nb;
        s->bin_cap = cap;
    }
    memcpy(s->bin + s->bin_len, p, n);
    s->bin_len += n;
    if (s->want_body)
        h3_body_to_handler(e, s);
}

void h3s_body_end(sws_engine_t *e, h3s_t *s)
{
    s->req_done = 1;
    if (s->live && s->want_body)
        h3_body_to_handler(e, s);
}

/* ---- the request view ----------------------------------------------------------------------- */

/* Starts a handler that answers later: 0 when it took the request (s is
 * live), or a status to answer now. */
static int x_start(sws_engine_t *e, h3conn_t *hc, h3s_t *s, sws_request_t *req,
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
    int status = sws_dispatch_start(e, &s->resp, req, h, NULL, 0, s->req_done);
    if (status == 0) {
        if (s->req_done)
            s->fin_given = 1; /* done came with the start */
        return 0;
    }
    s->live = 0;
    s->hooks = NULL;
    req->rid = NULL; /* the log makes its own */
    req->rid_len = 0;
    return status;
}

/* The first status a request's fields earn before routing (0: none). */
static int refuse(sws_engine_t *e, h3s_t *s, const sws_request_t *r, const sws_request_info_t *info,
                  int host_differs, int bad_expect)
{
    if (s->too_big)
        return 431;
    if (r->method_id == SWS_M_CONNECT)
        return 501; /* not a forward proxy; no extended CONNECT over HTTP/3 yet */
    if (h3_early_refused(r))
        return 425;
    if (!r->target_len)
        return 400;
    if (r->target_len > e->core.lim.max_uri_bytes)
        return 414;
    if (r->target[0] != '/' &&
        !(r->target_len == 1 && r->target[0] == '*' && r->method_id == SWS_M_OPTIONS))
        return 400;
    if (!r->host_len || host_differs || memchr(r->host, '@', r->host_len))
        return 400; /* RFC 9114 §4.3.1: an authority, and a Host that names the same one */
    if (bad_expect)
        return 417;
    if (info->has_content_length && info->content_length > e->core.lim.max_body_bytes)
        return 413;
    return 0;
}

/* content-length as RFC 9110 §8.6 has it: digits alone. */
static int parse_cl(const char *p, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (!n || n > 19)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = v;
    return 0;
}

static void answer_now(sws_engine_t *e, h3s_t *s, sws_request_t *r, int status)
{
    sws_respond_answer(e, &s->resp, &e->rsp.err[err_index(status)]);
    h3s_log(e, s, r, s->status);
    if (h3_commit(e, s) < 0)
        h3s_reset(s, H3_INTERNAL_ERROR);
}

void h3_dispatch(sws_engine_t *e, h3conn_t *hc, h3s_t *s)
{
    sws_request_t r;
    memset(&r, 0, sizeof r);
    r.conn = &hc->c;
    r.http2 = 1; /* HTTP/2's semantics: no connection-specific fields, no chunking */
    r.http3 = 1;
    r.minor = 1;
    sws_request_info_t info;
    memset(&info, 0, sizeof info);
    info.keepalive = 1;
    s->dispatched = 1;
    const char *q = s->rq ? s->rq : "";
    sws_header_t hdrs[s->nh ? s->nh : 1];
    size_t nh = 0, cookie_len = 0, n_cookies = 0;
    for (size_t i = 0; i < s->nh; i++) {
        sws_header_t *h = &hdrs[nh];
        h->name = q + s->hdr[i].n;
        h->name_len = s->hdr[i].nl;
        h->value = q + s->hdr[i].v;
        h->value_len = s->hdr[i].vl;
        if (h->name_len == 6 && memcmp(h->name, "cookie", 6) == 0) {
            n_cookies++;
            cookie_len += h->value_len + 2;
            if (n_cookies > 1)
                continue; /* merged below */
        }
        nh++;
    }
    char *merged = NULL;
    if (n_cookies > 1 && (merged = malloc(cookie_len)) != NULL) {
        /* RFC 9114 §4.2.1: crumbs become one field for HTTP/1 upstreams */
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
    r.h = hdrs;
    r.nh = nh;
    r.method = q + s->pm.v;
    r.method_len = s->pm.vl;
    r.target = s->pp.nl ? q + s->pp.v : "";
    r.target_len = s->pp.nl ? s->pp.vl : 0;
    r.method_id = info.method = sws_method_id(r.method, r.method_len);
    r.early = !hc->handshaken; /* a server takes no 1-RTT packet before (RFC 9001 §5.7) */
    s->head_only = r.method_id == SWS_M_HEAD;
    int host_differs = 0;
    const sws_header_t *hh = find_header(&r, "host", 4);
    if (s->pa.nl && s->pa.vl) {
        r.host = q + s->pa.v;
        r.host_len = s->pa.vl;
        host_differs = hh && (hh->value_len != r.host_len ||
                              strncasecmp(hh->value, r.host, r.host_len) != 0);
    } else if (hh) {
        r.host = hh->value;
        r.host_len = hh->value_len;
    }
    info.host = r.host;
    info.host_len = r.host_len;
    info.has_host = r.host != NULL;
    int status = 0;
    const sws_header_t *cl = find_header(&r, "content-length", 14);
    if (cl) {
        if (parse_cl(cl->value, cl->value_len, &info.content_length) < 0)
            status = 400;
        info.has_content_length = 1;
    }
    int bad_expect = 0;
    for (size_t i = 0; i < r.nh; i++) {
        const sws_header_t *ex = &r.h[i];
        if (ex->name_len != 6 || memcmp(ex->name, "expect", 6) != 0)
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
    info.chunked = !s->req_done && !info.has_content_length;
    r.info = &info;
    if (!status)
        status = refuse(e, s, &r, &info, host_differs, bad_expect);
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
            ssize_t nl = sws_normalize_path(path, path_len, e->h3.path);
            if (nl < 0) {
                status = 400;
            } else {
                path = e->h3.path;
                path_len = (size_t)nl;
            }
        }
    }
    if (status) {
        s->site = NULL;
        e->core.cnt.errors_4xx_close++;
        answer_now(e, s, &r, status);
        free(merged);
        return;
    }
    r.path = path;
    r.path_len = path_len;
    const sws_site_t *site = sws_vhosts_find(hc->ql->vh, r.host, r.host_len);
    s->site = site;
    r.site = site;
    const sws_handler_t *h = site ? sws_site_route(site, path, path_len) : NULL;
    s->route = h && h->stat_id <= UINT16_MAX ? (uint16_t)h->stat_id : 0;
    const sws_handler_t *later = h;
    int answered = sws_dispatch_answer(e, &s->resp, &r, &later);
    if (!answered) {
        int rc = x_start(e, hc, s, &r, later);
        if (rc == 0) {
            if (info.expect_continue && !s->req_done) {
                /* RFC 9110 §10.1.1: the handler reads the body; the client may send it */
                static const sws_hpack_field_t cont[] = {
                    {(const uint8_t *)":status", (const uint8_t *)"100", 7, 3, 0}};
                if (!s->submitted)
                    sws_h3sess_info(hc->h3, s->id, cont, 1);
            }
            free(merged);
            h3_due(hc);
            return;
        }
        if (rc != SWS_ANSWERED)
            sws_respond_answer(e, &s->resp, &e->rsp.err[err_index(rc)]);
    }
    h3s_log(e, s, &r, s->status);
    free(merged);
    if (h3_commit(e, s) < 0)
        h3s_reset(s, H3_INTERNAL_ERROR);
}
