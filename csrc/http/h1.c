/* The HTTP/1 connection protocol; contract in scalws/h1.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "context.h"
#include "scalws/path.h"

int sws_h1_init(sws_engine_t *e)
{
    e->h1.path = malloc(e->core.lim.max_uri_bytes + 512);
    return e->h1.path ? 0 : -ENOMEM;
}

void sws_h1_free(sws_engine_t *e) { free(e->h1.path); }

static void h1_open(sws_engine_t *e, sws_conn_t *c, const void *conf)
{
    h1conn_t *hc = (h1conn_t *)c;
    hc->resp.ops = &sws_h1_resp_ops;
    hc->resp.upstream_date = 0;
    hc->resp.date = NULL;
    hc->resp.local_answer = 0;
    hc->vh = conf;
    hc->state = S_HEAD;
    tl_set(e, &c->tn, TL_HEADER); /* the first request has header_timeout to arrive */
    hc->head_armed = 1;
}

/* Answers an error page and marks the connection to close after it. */
void h1_conn_error(sws_engine_t *e, h1conn_t *hc, int status, const sws_request_t *r,
                   int head_only)
{
    const sws_respond_t *resp = &e->rsp.err[err_index(status)];
    hc->close_after = 1;
    if (!out_room(e, h1_respond_size(e, resp)) && (out_flush(e, &hc->c) < 0 || hc->c.pend))
        return; /* output backed up: close after it without this answer */
    h1_resp_begin(hc, r ? r->minor : 1, head_only, 0);
    sws_respond_answer(e, &hc->resp, resp);
    uint64_t ms = hc->in_head || (r && !r->head_refused) ? e->core.now - hc->req_start : 0;
    access_log(e, &hc->c, r, resp->status, hc->r_sent, ms);
    sws_stats_request(&e->core, 0, resp->status, ms);
    e->core.cnt.requests++;
    e->core.cnt.errors_4xx_close++;
}

/* A head refused before it parsed (or timed out unfinished): answered as
 * h1_conn_error does, and logged with its first line as it came (nginx's
 * $request), cut at REFUSED_LINE_MAX bytes; raw may be empty. */
#define REFUSED_LINE_MAX 256
static void head_refused(sws_engine_t *e, h1conn_t *hc, int status, const char *raw, size_t len,
                         int head_only)
{
    sws_request_t r;
    memset(&r, 0, sizeof r);
    const char *nl = len ? memchr(raw, '\n', len) : NULL;
    size_t n = nl ? (size_t)(nl - raw) : len;
    if (n && raw[n - 1] == '\r')
        n--;
    r.method = raw;
    r.method_len = n < REFUSED_LINE_MAX ? n : REFUSED_LINE_MAX;
    r.target = "";
    r.minor = 1;
    r.conn = &hc->c;
    r.head_refused = 1;
    h1_conn_error(e, hc, status, &r, head_only);
}

/* Absolute-form target (RFC 9112 §3.2.2): the authority replaces Host. */
static void split_target(sws_request_t *r, const char **path, size_t *path_len)
{
    const char *t = r->target;
    size_t n = r->target_len;
    size_t skip = 0;
    if (n > 7 && strncasecmp(t, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncasecmp(t, "https://", 8) == 0)
        skip = 8;
    if (skip) {
        const char *a = t + skip;
        const char *slash = memchr(a, '/', n - skip);
        const char *q = memchr(a, '?', n - skip);
        const char *end = slash && (!q || slash < q) ? slash : q ? q : t + n;
        r->host = a;
        r->host_len = (size_t)(end - a);
        t = end;
        n = (size_t)(r->target + r->target_len - end);
        if (n == 0 || *t == '?') {
            *path = "/";
            *path_len = 1;
            return;
        }
    }
    const char *q = memchr(t, '?', n);
    *path = t;
    *path_len = q ? (size_t)(q - t) : n;
}

/* The status a head that sws_parse_request did not accept is refused with
 * now, or 0 while it may still become a request (sws_check_request_head:
 * a line already at fault is answered when its line end arrives, not at
 * the header timeout). head[0..avail) is the head so far; parse_rc what
 * the parser said of its first max_header_bytes. */
static int head_fault(const sws_engine_t *e, h1conn_t *hc, const char *head, size_t avail,
                      size_t last_len, int parse_rc)
{
    const sws_head_limits_t lim = {e->core.lim.max_header_bytes, e->core.lim.max_uri_bytes,
                                   e->core.lim.max_headers};
    return sws_check_request_head(&hc->hs, head, avail, last_len, parse_rc, &lim);
}

/* Parses and answers the requests in buf[0..len) until one is incomplete,
 * output backs up, or the connection is to close. Returns bytes consumed;
 * the unconsumed rest is buf[ret..len). */
static size_t conn_process(sws_engine_t *e, h1conn_t *hc, char *buf, size_t len, size_t last_len)
{
    sws_conn_t *c = &hc->c;
    size_t off = 0;
    while (off < len && !hc->close_after && !c->pend && !c->file && !c->heap && !hc->x) {
        if (c->lingering) {
            c->linger_bytes += len - off;
            return len;
        }
        if (hc->state == S_BODY) {
            /* The answer went out already; the body is read and dropped so the
             * next request on this connection starts where it should. */
            if (!hc->chunked) {
                size_t take = len - off < hc->body_left ? len - off : (size_t)hc->body_left;
                off += take;
                hc->body_left -= take;
                if (hc->body_left) {
                    tl_set(e, &c->tn, TL_BODY); /* progress restarts body_timeout */
                    return off;
                }
            } else {
                /* The body of an answered request, as it comes after the
                 * answer went out (what came with the head was sound):
                 * broken framing now can only end the connection. */
                ssize_t rest = sws_skip_chunked(hc->dec, buf + off, len - off);
                if (rest == SWS_PARSE_ERROR || hc->dec->total > e->core.lim.max_body_bytes) {
                    hc->close_after = 1; /* framing lost: nothing after this can be trusted */
                    return len;
                }
                if (rest == SWS_PARSE_INCOMPLETE) {
                    tl_set(e, &c->tn, TL_BODY); /* progress restarts body_timeout */
                    return len;
                }
                off = len - (size_t)rest; /* the next request */
                free(hc->dec);
                hc->dec = NULL;
            }
            hc->state = S_HEAD;
            tl_set(e, &c->tn, TL_HEADER);
            continue;
        }

        /* S_HEAD */
        sws_request_t r;
        sws_header_t hdrs[e->core.lim.max_headers];
        hc->r_site = NULL;
        size_t nh = e->core.lim.max_headers;
        memset(&r, 0, sizeof r);
        r.conn = c;
        if (!hc->in_head) {
            hc->in_head = 1;
            hc->req_start = e->core.now;
            memset(&hc->hs, 0, sizeof hc->hs);
        }
        /* Nothing past max_header_bytes is parsed: a head that has not
         * ended by then is refused, so one that ends is never too long. */
        size_t avail = len - off, lim_head = e->core.lim.max_header_bytes;
        size_t plen = avail < lim_head ? avail : lim_head, prev = off ? 0 : last_len;
        int n = sws_parse_request(buf + off, plen, &r.method, &r.method_len, &r.target,
                                  &r.target_len, &r.minor, hdrs, &nh, avail > lim_head ? 0 : prev);
        if (n < 0) {
            int status = head_fault(e, hc, buf + off, avail, prev, n);
            if (status) {
                head_refused(e, hc, status, buf + off, avail, !!(hc->hs.flags & SWS_HC_HEAD));
                return len;
            }
            /* header_timeout runs from the head's first byte (from the accept
             * for a connection's first request), not from the last read: a
             * client dribbling a byte a second still gets its 408. */
            if (!hc->head_armed) {
                hc->head_armed = 1;
                tl_set(e, &c->tn, TL_HEADER);
            }
            return off;
        }
        r.h = hdrs;
        r.nh = nh;
        hc->in_head = 0;
        hc->head_armed = 0;
        off += (size_t)n;
        int method = sws_method_id(r.method, r.method_len);
        r.method_id = method;
        int head_only = method == SWS_M_HEAD;
        if (r.target_len > e->core.lim.max_uri_bytes) {
            h1_conn_error(e, hc, 414, &r, head_only);
            return len;
        }
        sws_request_info_t info;
        int status = sws_analyze_request(r.method, r.method_len, r.minor, hdrs, nh, &info);
        r.info = &info;
        r.host = info.host;
        r.host_len = info.host_len;
        /* RFC 9112 §3.2: origin-form, absolute-form, or "*" for OPTIONS; we
         * are not a forward proxy, so CONNECT (authority-form) is 501 rather
         * than a 2xx that would put intermediaries into tunnel mode. */
        if (!status) {
            if (method == SWS_M_CONNECT)
                status = 501;
            else if (r.target[0] != '/' &&
                     !(r.target_len == 1 && r.target[0] == '*' && method == SWS_M_OPTIONS) &&
                     !(r.target_len > 7 && strncasecmp(r.target, "http://", 7) == 0) &&
                     !(r.target_len > 8 && strncasecmp(r.target, "https://", 8) == 0))
                status = 400;
        }
        if (status) {
            h1_conn_error(e, hc, status, &r, head_only);
            return len;
        }
        if (info.has_content_length && info.content_length > e->core.lim.max_body_bytes) {
            h1_conn_error(e, hc, 413, &r, head_only); /* before reading any of it */
            return len;
        }
        const char *path;
        size_t path_len;
        split_target(&r, &path, &path_len);
        r.raw_path = path;
        r.raw_len = path_len;
        if (path[0] == '/') {
            /* Routes see the decoded, dot-free path (csrc/http/path.c), so
             * "/a/../b", "//b" and "/%62" reach the route of "/b". */
            ssize_t nl = sws_normalize_path(path, path_len, e->h1.path);
            if (nl < 0) {
                h1_conn_error(e, hc, 400, &r, head_only);
                return len;
            }
            path = e->h1.path;
            path_len = (size_t)nl;
        }
        r.path = path;
        r.path_len = path_len;
        if (r.raw_path + r.raw_len < r.target + r.target_len && r.raw_path[r.raw_len] == '?') {
            r.query = r.raw_path + r.raw_len + 1;
            r.query_len = (size_t)(r.target + r.target_len - r.query);
        }
        const sws_site_t *site = sws_vhosts_find(hc->vh, r.host, r.host_len);
        hc->r_site = site;
        r.site = site;
        const sws_handler_t *h = site ? sws_site_route(site, path, path_len) : NULL;
        hc->r_route = h && h->stat_id <= UINT16_MAX ? (uint16_t)h->stat_id : 0;
        /* The route's kind sizes the answer and says who reads the body;
         * the dispatcher runs its chain. */
        const sws_respond_t *resp = h && h->kind == SWS_H_RESPOND ? h->data : &e->rsp.err[SWS_ERR_404];
        const sws_static_t *st = h && h->kind == SWS_H_STATIC && e->st.fc ? h->data : NULL;
        const sws_handler_t *pxc = sws_answers_later(h) ? h : NULL;
        const sws_redirect_t *rdr = h && h->kind == SWS_H_REDIRECT_HTTPS ? h->data : NULL;
        /* What this answer may copy into the batch: a static head is at
         * most a few hundred bytes, the extra headers, a Location of the
         * raw path, and a body up to COPY_BODY_MAX. */
        size_t need = st    ? STATIC_ANSWER_MAX + SWS_TLS_FIELDS_MAX + e->h1.server_line_len + st->extra_len +
                                  r.raw_len + r.target_len + COPY_BODY_MAX
                      : pxc ? h1_respond_size(e, &e->rsp.err[SWS_ERR_504]) + 32 +
                                  (pxc->cache ? SWS_CACHE_ANSWER_MAX + e->h1.server_line_len : 0)
                      : rdr ? REDIRECT_SIZE + e->h1.server_line_len + r.host_len + r.target_len +
                                  rdr->host_len
                            : h1_respond_size(e, resp) + 32;
        if (need > OUT_BUF / 2) {
            h1_conn_error(e, hc, 414, &r, head_only); /* a Location that long is not worth making */
            return len;
        }

        /* A chunked body nobody reads is read past before the answer, as far
         * as it came with the head (nginx's ngx_http_discard_request_body
         * does the same): broken framing there is a 400, not an answer
         * followed by a close; a body over max_body_bytes a 413, as the
         * proxy answers it. The proxy and FastCGI unframe theirs
         * (h1_x_start, the same statuses); a cached route's PURGE answers
         * here. Only read, so a static route whose try_files goes to FastCGI
         * hands the body on as it came. */
        sws_chunked_decoder_t pre;
        ssize_t pre_rest = SWS_PARSE_INCOMPLETE;
        int skipped = info.chunked && (!pxc || pxc->cache);
        if (skipped) {
            memset(&pre, 0, sizeof pre);
            pre_rest = sws_skip_chunked(&pre, buf + off, len - off);
            if (pre_rest == SWS_PARSE_ERROR || pre.total > e->core.lim.max_body_bytes) {
                h1_conn_error(e, hc, pre.total > e->core.lim.max_body_bytes ? 413 : 400, &r, head_only);
                return len;
            }
        }

        hc->requests++;
        int keepalive = info.keepalive && !e->core.shutting_down && e->core.lim.keepalive_timeout_ms &&
                        hc->requests < e->core.lim.keepalive_requests;
        int has_body = (info.has_content_length && info.content_length) || info.chunked;
        if (!out_room(e, need)) {
            if (out_flush(e, c) < 0) {
                hc->close_after = 1;
                return len;
            }
            if (c->pend) {
                off -= (size_t)n; /* answer it once the backlog is written */
                hc->requests--;
                return off;
            }
        }
        if (info.expect_continue && has_body && (keepalive || pxc || (st && st->try_uri_len)))
            /* the proxy or FastCGI (perhaps through try_files) reads it */
            out_copy(e, "HTTP/1.1 100 Continue\r\n\r\n", 25); /* we will read the body */
        h1_resp_begin(hc, r.minor, head_only, keepalive);
        const sws_handler_t *later = h;
        if (!sws_dispatch_answer(e, &hc->resp, &r, &later)) {
            /* a handler that answers later (perhaps a static route's
             * try_files fallback): an exchange */
            size_t took = 0;
            int answered = h1_x_start(e, hc, &r, &info, later, buf + off, len - off, &took);
            off += took; /* the body so far; what follows waits in the stash */
            if (hc->x)
                return off;
            if (answered != SWS_ANSWERED) {
                /* answered at once (no live upstream, a bad body): an error page */
                h1_resp_begin(hc, r.minor, head_only, keepalive && !hc->close_after);
                sws_respond_answer(e, &hc->resp, &e->rsp.err[err_index(answered)]);
            }
            has_body = 0; /* h1_x_start left what remains of it to S_BODY */
        }
        e->core.cnt.requests++;
        access_log(e, c, &r, hc->r_status, hc->r_sent, e->core.now - hc->req_start);
        sws_stats_request(&e->core, hc->r_route, hc->r_status, e->core.now - hc->req_start);
        if (!keepalive || hc->close_after) {
            hc->close_after = 1;
            return len;
        }
        if (has_body && skipped && pre_rest >= 0) {
            off = len - (size_t)pre_rest; /* the body is behind us: the next request */
        } else if (has_body && skipped) {
            off = len; /* all of it was body; more comes */
            if (h1_skip_body(hc, 1, 0, &pre) < 0) {
                hc->close_after = 1;
                return len;
            }
        } else if (has_body && h1_skip_body(hc, info.chunked, info.content_length, NULL) < 0) {
            hc->close_after = 1;
            return len;
        }
    }
    return off;
}

int h1_skip_body(h1conn_t *hc, int chunked, uint64_t left, const sws_chunked_decoder_t *from)
{
    hc->state = S_BODY;
    hc->chunked = chunked;
    hc->body_left = chunked ? 0 : left;
    if (!chunked)
        return 0;
    hc->dec = calloc(1, sizeof *hc->dec);
    if (!hc->dec)
        return -1;
    if (from)
        *hc->dec = *from;
    return 0;
}

/* After input was handled: flush, stash the unparsed tail, pick the timer. */
void conn_settle(sws_engine_t *e, h1conn_t *hc, const char *rest, size_t rest_len)
{
    sws_conn_t *c = &hc->c;
    for (;;) {
        if (e->net.niov && out_flush(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (rest_len && !hc->close_after) {
            if (conn_stash(c, rest, rest_len) < 0) {
                conn_close(e, c);
                return;
            }
            /* Processing stopped for output, not for lack of input: the stash
             * may hold whole requests, to be answered once the output is out. */
            hc->resume = c->pend || c->file || c->heap || hc->x;
        }
        if (c->heap && !c->pend) {
            free(c->heap); /* the listing went out */
            c->heap = NULL;
        }
        if (hc->x)
            return; /* the handler drives the connection until its answer is done */
        if (c->file && !c->pend && conn_send_file(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (c->pend || c->file)
            return; /* the send timeout runs; conn_write comes back here */
        if (hc->close_after) {
            conn_linger(e, c);
            return;
        }
        if (hc->resume && c->stash) {
            /* A loop, not recursion: a thousand pipelined requests for files
             * must not take a thousand stack frames. */
            size_t len = conn_unstash(e, c);
            hc->resume = 0;
            size_t used = conn_process(e, hc, e->net.in, len, 0);
            rest = e->net.in + used;
            rest_len = len - used;
            continue;
        }
        hc->resume = 0;
        if (hc->state == S_HEAD && !hc->in_head) {
            if (!e->core.shutting_down)
                tl_set(e, &c->tn, TL_KEEPALIVE);
            else if (c->tn.tlist != TL_GRACE)
                tl_set(e, &c->tn, TL_GRACE); /* answered during the stop: its next request gets
                                                Connection: close, or the grace list closes it */
        } else if (hc->state == S_BODY && c->tn.tlist != TL_BODY) {
            tl_set(e, &c->tn, TL_BODY); /* conn_process restarts it on progress */
        }
        return;
    }
}

static void conn_read(sws_engine_t *e, h1conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    size_t len = conn_unstash(e, c), last_len = len;
    ssize_t got = conn_recv(c, e->net.in + len, e->net.in_cap - len);
    if (got > 0)
        e->core.st->bytes_in += (uint64_t)got;
    if (got <= 0) {
        if (got < 0 && errno == EAGAIN) {
            conn_settle(e, hc, e->net.in, len);
            return;
        }
        /* EOF or error. Complete requests were answered as they arrived;
         * what is left is a partial head, or lingering. */
        conn_close(e, c);
        return;
    }
    len += (size_t)got;
    if (c->lingering) {
        conn_linger_input(e, c, (size_t)got);
        return;
    }
    if (hc->requests == 0 && hc->state == S_HEAD && !c->tls && c->lst && c->lst->alt) {
        /* An h2c listener: a client with prior knowledge starts with the
         * HTTP/2 preface (RFC 9113 §3.3); HTTP/1 requests are served too. */
        int pf = sws_h2_preface(e->net.in, len);
        if (pf >= 0) {
            if (conn_stash(c, e->net.in, len) < 0) {
                conn_close(e, c);
                return;
            }
            if (pf == 1)
                conn_switch(e, c); /* HTTP/2 takes the stash; hc is no more */
            return;
        }
    }
    size_t used = conn_process(e, hc, e->net.in, len, last_len);
    conn_settle(e, hc, e->net.in + used, len - used);
}

static void conn_write(sws_engine_t *e, h1conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    int rc = pend_send(e, c);
    if (rc < 0)
        conn_close(e, c);
    if (rc)
        return;
    free(c->heap);
    c->heap = NULL;
    if (c->file) {
        if (conn_send_file(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (c->file)
            return; /* more when the socket is writable again */
    }
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
    /* Requests that arrived while we were writing wait in the stash
     * (hc->resume); conn_settle answers them or closes. */
    conn_settle(e, hc, NULL, 0);
}

static void h1_event(sws_engine_t *e, void *obj, uint32_t events)
{
    h1conn_t *hc = obj;
    if (hc->x)
        h1_x_event(e, hc, events);
    else if (hc->c.pend || hc->c.file)
        conn_write(e, hc);
    else
        conn_read(e, hc);
}

/* The fault of a head that stopped inside a line: the parses of the reads
 * after the first look for the head's end only, and sws_check_request_head
 * judges a line at its line end, so a fault in the unended line is found
 * now, with a parse of the whole stash (once, at the timeout); the head
 * gets the status it would have had in one read. 0: none. */
static int stalled_head_fault(sws_engine_t *e, h1conn_t *hc)
{
    sws_conn_t *c = &hc->c;
    if (!hc->in_head || !c->stash)
        return 0;
    sws_header_t hdrs[e->core.lim.max_headers];
    size_t nh = e->core.lim.max_headers, ml, tl;
    const char *m, *t;
    int minor;
    size_t plen = c->stash_len < e->core.lim.max_header_bytes ? c->stash_len
                                                              : e->core.lim.max_header_bytes;
    int n = sws_parse_request(c->stash, plen, &m, &ml, &t, &tl, &minor, hdrs, &nh, 0);
    return n < 0 ? head_fault(e, hc, c->stash, c->stash_len, c->stash_len, n) : 0;
}

static void h1_expire(sws_engine_t *e, sws_conn_t *c, int which)
{
    h1conn_t *hc = (h1conn_t *)c;
    if (which == TL_HEADER && !hc->x && hc->state == S_HEAD && !c->lingering &&
        (hc->in_head || c->stash)) {
        int status = stalled_head_fault(e, hc);
        /* RFC 9110 §15.5.9: the head did not arrive in time. */
        if (!status)
            elog_folded(e, "request head timeout", 0, SWS_L_INFO,
                        "client timed out reading the request head");
        tl_unlink(e, &c->tn);
        head_refused(e, hc, status ? status : 408, c->stash, c->stash ? c->stash_len : 0,
                     status && (hc->hs.flags & SWS_HC_HEAD));
        if (out_flush(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (!c->pend)
            conn_linger(e, c);
        else
            tl_set(e, &c->tn, TL_SEND);
        return;
    }
    if (which == TL_BODY && hc->x) {
        h1_x_body_timeout(e, hc); /* 408, or the close once an answer began */
        return;
    }
    if (which == TL_BODY) {
        /* The body of a request already answered, read past: nothing
         * is left to say, and the rest of it would be read as a request. */
        char peer[48];
        *put_peer(peer, c) = 0;
        elog_folded(e, "body timeout after the answer", 0, SWS_L_INFO,
                    "client timed out sending the request body of an answered request, "
                    "connection closed, client: %s", peer);
    }
    conn_close(e, c);
}

static void h1_closing(sws_engine_t *e, sws_conn_t *c)
{
    h1conn_t *hc = (h1conn_t *)c;
    free(hc->dec);
    hc->dec = NULL;
    if (hc->x)
        h1_x_closing(e, hc); /* the handler's side goes too */
}

const sws_proto_t sws_h1_proto = {sizeof(h1conn_t), h1_event, h1_open, h1_expire, h1_closing};

void sws_h1_shutdown(sws_engine_t *e)
{
    /* Connections idle for a while close now. One that was answered or
     * accepted in the last STOP_GRACE_MS gets that long again: a busy client
     * is likely sending its next request right now, and closing under it is
     * the keep-alive race that loses a request (RFC 9112 §9.3.1 lets a client
     * retry, but not every client does). Its next request is answered with
     * Connection: close; if none comes, the grace list closes it. The others
     * finish their request. */
    uint64_t grace = e->core.tl[TL_GRACE].ms;
    uint64_t ka = e->core.tl[TL_KEEPALIVE].ms;
    sws_tnode_t *n = e->core.tl[TL_KEEPALIVE].head;
    while (n) {
        sws_tnode_t *next = n->tnext;
        if (CONN_OF_TNODE(n)->proto != &sws_h1_proto) {
            n = next; /* HTTP/2's: sws_h2_shutdown */
            continue;
        }
        if (n->deadline - ka + grace <= e->core.now)
            conn_close(e, CONN_OF_TNODE(n));
        else
            tl_set(e, n, TL_GRACE);
        n = next;
    }
    uint64_t ht = e->core.tl[TL_HEADER].ms;
    n = e->core.tl[TL_HEADER].head;
    while (n) {
        sws_tnode_t *next = n->tnext;
        h1conn_t *hc = (h1conn_t *)CONN_OF_TNODE(n);
        if (hc->c.proto != &sws_h1_proto) {
            n = next;
            continue;
        }
        if (hc->state == S_HEAD && !hc->in_head && !hc->c.stash && !hc->x) { /* connected, nothing sent yet */
            if (n->deadline - ht + grace <= e->core.now)
                conn_close(e, &hc->c);
            else
                tl_set(e, n, TL_GRACE);
        }
        n = next;
    }
}
