/* The FastCGI request as records (fastcgi_int.h): the CGI variables of
 * the PARAMS stream (nginx's fastcgi_params and what PHP-FPM reads), the
 * HTTP_* fields, and the framing of BEGIN_REQUEST, PARAMS and STDIN. */
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

/* ---- buffers ------------------------------------------------------------------- */

int fx_grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    char *nb = realloc(*buf, c);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int w_put(fx_t *x, const char *p, size_t n)
{
    if (x->woff && x->wlen + n > x->wcap) { /* what was written is dead */
        memmove(x->w, x->w + x->woff, x->wlen - x->woff);
        x->wlen -= x->woff;
        x->woff = 0;
    }
    if (fx_grow(&x->w, &x->wcap, x->wlen + n) < 0)
        return -1;
    memcpy(x->w + x->wlen, p, n);
    x->wlen += n;
    return 0;
}

/* Frames p[0..n) as records of `type` into w; n == 0 writes the stream's
 * empty closing record. */
int fx_w_records(fx_t *x, int type, const char *p, size_t n)
{
    char h[SWS_FCGI_HEADER_LEN];
    do {
        size_t k = n > STDIN_MAX ? STDIN_MAX : n;
        sws_fcgi_header(h, type, FCGI_ID, k, 0);
        if (w_put(x, h, sizeof h) < 0 || (k && w_put(x, p, k) < 0))
            return -1;
        p += k;
        n -= k;
    } while (n);
    return 0;
}

/* One parameter into the PARAMS content. */
static int param(fx_t *x, const char *n, size_t nl, const char *v, size_t vl)
{
    if (fx_grow(&x->params, &x->params_cap, x->params_len + sws_fcgi_nv_len(nl, vl)) < 0)
        return -1;
    x->params_len = (size_t)(sws_fcgi_nv(x->params + x->params_len, n, nl, v, vl) - x->params);
    return 0;
}
#define PARAM(x, lit, v, vl) param(x, lit, sizeof lit - 1, v, vl)

/* Two pieces joined into one value (SCRIPT_FILENAME = root + name). */
static int param2(fx_t *x, const char *n, size_t nl, const char *a, size_t al, const char *b,
                  size_t bl)
{
    if (fx_grow(&x->params, &x->params_cap, x->params_len + sws_fcgi_nv_len(nl, al + bl)) < 0)
        return -1;
    char *o = sws_fcgi_nv(x->params + x->params_len, n, nl, NULL, al + bl);
    if (al)
        memcpy(o - (al + bl), a, al);
    if (bl)
        memcpy(o - bl, b, bl);
    x->params_len = (size_t)(o - x->params);
    return 0;
}

/* ---- the parameters -------------------------------------------------------------- */

static int is_tls(const sws_conn_t *c) { return sws_conn_secure(c); }

/* HTTP_* for one request field: uppercase, '-' to '_'. Names with '_' are
 * skipped (they would alias a '-' name: nginx's underscores_in_headers off),
 * as are Proxy (httpoxy, CVE-2016-5385) and the two CGI takes without the
 * prefix. */
static int http_param(fx_t *x, const sws_header_t *h)
{
    size_t nl = h->name_len;
    if ((nl == 5 && strncasecmp(h->name, "proxy", 5) == 0) ||
        (nl == 13 && strncasecmp(h->name, "x-scalws-peer", 13) == 0)) /* the peers' secret */
        return 0;
    if ((nl == 12 && strncasecmp(h->name, "content-type", 12) == 0) ||
        (nl == 14 && strncasecmp(h->name, "content-length", 14) == 0))
        return 0;
    if (memchr(h->name, '_', nl))
        return 0;
    char name[5 + 256];
    if (nl > 256)
        return 0;
    memcpy(name, "HTTP_", 5);
    for (size_t i = 0; i < nl; i++) {
        char ch = h->name[i];
        name[5 + i] = ch == '-' ? '_' : (ch >= 'a' && ch <= 'z') ? (char)(ch - 32) : ch;
    }
    return param(x, name, 5 + nl, h->value, h->value_len);
}

/* Splits the script path into SCRIPT_NAME and PATH_INFO with split_path_info
 * (regexec needs a NUL-terminated string: the path is copied). */
static void split_script(const sws_fastcgi_t *f, char *path, size_t len, size_t *script_len,
                         const char **info, size_t *info_len)
{
    *script_len = len;
    *info = path + len;
    *info_len = 0;
    if (!f->split)
        return;
    regmatch_t m[3];
    if (regexec(f->split, path, 3, m, 0) != 0 || m[1].rm_so != 0 || m[1].rm_eo < 0)
        return;
    *script_len = (size_t)m[1].rm_eo;
    if (m[2].rm_so >= 0) {
        *info = path + m[2].rm_so;
        *info_len = (size_t)(m[2].rm_eo - m[2].rm_so);
    }
}

/* The CGI parameters of req (RFC 3875 §4.1, plus what PHP reads). Returns 0,
 * a status to answer (404: no such script), or -1 when out of memory. The
 * script path is the normalized request path (with the index file appended
 * to a folder), split by split_path_info. */
int fx_build_params(sws_engine_t *e, fx_t *x, const sws_request_t *req)
{
    const sws_fastcgi_t *f = x->f;
    char *path = e->st.path3; /* max_uri_bytes + 512 */
    size_t plen = req->path_len;
    if (plen + f->index_len + 1 > e->core.lim.max_uri_bytes + 512)
        return 414;
    memcpy(path, req->path, plen);
    if (plen && path[plen - 1] == '/' && f->index_len) {
        memcpy(path + plen, f->index, f->index_len);
        plen += f->index_len;
    }
    path[plen] = '\0';
    size_t script_len, info_len;
    const char *info;
    split_script(f, path, plen, &script_len, &info, &info_len);
    if (f->check_script && e->st.fc) {
        sws_file_t *g;
        int rc = sws_filecache_get(e->st.fc, f->root_fd, path, script_len, f->fc_flags,
                                   e->core.now, &g);
        if (rc < 0)
            return rc == -ENOMEM ? 500 : 404;
        int dir = g->is_dir;
        sws_filecache_release(e->st.fc, g);
        if (dir)
            return 404;
    }
    char num[24], peer[64];
    int k;
    int rc = 0;
    rc |= param2(x, "SCRIPT_FILENAME", 15, f->root, f->root_len, path, script_len);
    rc |= PARAM(x, "SCRIPT_NAME", path, script_len);
    rc |= PARAM(x, "PATH_INFO", info, info_len);
    if (info_len)
        rc |= param2(x, "PATH_TRANSLATED", 15, f->root, f->root_len, info, info_len);
    rc |= PARAM(x, "DOCUMENT_ROOT", f->root, f->root_len);
    rc |= PARAM(x, "DOCUMENT_URI", path, plen);
    rc |= PARAM(x, "REQUEST_URI", x->what + x->method_len, (size_t)x->target_len);
    rc |= PARAM(x, "QUERY_STRING", req->query, req->query_len);
    rc |= PARAM(x, "REQUEST_METHOD", x->what, (size_t)x->method_len);
    const sws_header_t *ct = find_header(req, "content-type", 12);
    if (ct)
        rc |= PARAM(x, "CONTENT_TYPE", ct->value, ct->value_len);
    if (!x->hold && req->info->has_content_length) {
        k = snprintf(num, sizeof num, "%llu", (unsigned long long)req->info->content_length);
        rc |= PARAM(x, "CONTENT_LENGTH", num, (size_t)k);
    }
    rc |= PARAM(x, "GATEWAY_INTERFACE", "CGI/1.1", 7);
    rc |= PARAM(x, "SERVER_SOFTWARE", "scalws", 6);
    /* nginx's $server_protocol: what the client spoke */
    rc |= PARAM(x, "SERVER_PROTOCOL", req->http3 ? "HTTP/3.0" : req->http2 ? "HTTP/2.0" :
                req->minor ? "HTTP/1.1" : "HTTP/1.0", 8);
    rc |= PARAM(x, "REQUEST_SCHEME", is_tls(x->conn) ? "https" : "http", is_tls(x->conn) ? 5 : 4);
    if (is_tls(x->conn))
        rc |= PARAM(x, "HTTPS", "on", 2);
    /* REMOTE_ADDR: the peer, or with trusted_proxies the right-most
     * untrusted X-Forwarded-For entry; the port only when it is the peer's. */
    const char *ra;
    size_t ral;
    client_key(e, x->conn, req, &ra, &ral, peer);
    rc |= PARAM(x, "REMOTE_ADDR", ra, ral);
    if (ra == peer) {
        k = snprintf(num, sizeof num, "%u", (unsigned)x->conn->peer_port);
        rc |= PARAM(x, "REMOTE_PORT", num, (size_t)k);
    }
    /* SERVER_ADDR / SERVER_PORT: the address the client connected to. */
    char la[64];
    unsigned lport;
    size_t lal = sws_conn_local_addr(x->conn, la, sizeof la, &lport);
    if (lal) {
        rc |= PARAM(x, "SERVER_ADDR", la, lal);
        k = snprintf(num, sizeof num, "%u", lport);
        rc |= PARAM(x, "SERVER_PORT", num, (size_t)k);
    }
    /* SERVER_NAME: the Host without its port. */
    const char *hn = req->host ? req->host : "";
    size_t hl = req->host ? req->host_len : 0;
    if (hl && hn[0] == '[') {
        const char *rb = memchr(hn, ']', hl);
        if (rb)
            hl = (size_t)(rb - hn + 1);
    } else {
        const char *colon = memchr(hn, ':', hl);
        if (colon)
            hl = (size_t)(colon - hn);
    }
    rc |= PARAM(x, "SERVER_NAME", hn, hl);
    rc |= PARAM(x, "HTTP_X_REQUEST_ID", x->rid, x->rid_len);
    if (req->early && !find_header(req, "early-data", 10))
        rc |= PARAM(x, "HTTP_EARLY_DATA", "1", 1); /* RFC 8470: as a proxy's Early-Data */
    for (size_t i = 0; i < req->nh; i++)
        if (!(req->h[i].name_len == 12 && strncasecmp(req->h[i].name, "x-request-id", 12) == 0))
            rc |= http_param(x, &req->h[i]);
    if (f->params_len) { /* the operator's, last: they win over ours */
        if (fx_grow(&x->params, &x->params_cap, x->params_len + f->params_len) < 0)
            return -1;
        memcpy(x->params + x->params_len, f->params, f->params_len);
        x->params_len += f->params_len;
    }
    return rc ? -1 : 0;
}

/* head[] = BEGIN_REQUEST + the PARAMS stream (+ CONTENT_LENGTH of a held
 * body) + its end, then the STDIN given (all of it when done). */
int fx_frame_request(fx_t *x, const char *body, size_t n, int done)
{
    char begin[SWS_FCGI_BEGIN_LEN];
    sws_fcgi_begin(begin, FCGI_ID, x->f->keep_conn);
    x->wlen = x->woff = 0;
    if (x->hold) { /* a chunked body, whole now */
        char num[24];
        int k = snprintf(num, sizeof num, "%zu", x->body_len);
        if (PARAM(x, "CONTENT_LENGTH", num, (size_t)k) < 0)
            return -1;
    }
    if (w_put(x, begin, sizeof begin) < 0 || fx_w_records(x, SWS_FCGI_PARAMS, x->params, x->params_len) < 0 ||
        fx_w_records(x, SWS_FCGI_PARAMS, NULL, 0) < 0)
        return -1;
    free(x->params);
    x->params = NULL;
    x->params_len = x->params_cap = 0;
    if (n && fx_w_records(x, SWS_FCGI_STDIN, body, n) < 0)
        return -1;
    if (done && fx_w_records(x, SWS_FCGI_STDIN, NULL, 0) < 0)
        return -1;
    x->can_retry = done;
    if (done) { /* the whole request: kept for a retry */
        x->head = malloc(x->wlen);
        if (!x->head)
            return -1;
        memcpy(x->head, x->w, x->wlen);
        x->head_len = x->wlen;
    }
    return 0;
}
