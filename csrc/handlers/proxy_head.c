/* The request head a proxied request sends upstream: the target
 * (rewritten or as sent), the client's fields less hop-by-hop ones, the
 * forwarding headers. Contract in proxy_int.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "proxy_int.h"

static size_t put_str(char *p, const char *s, size_t n)
{
    if (n) /* s may be NULL for an empty config string */
        memcpy(p, s, n);
    return n;
}
#define PUT(lit) (q += put_str(q, lit, sizeof lit - 1))
#define PUTN(s, n) (q += put_str(q, s, n))

static int pct_keep(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           strchr("-._~!$&'()*+,;=:@/", ch) != NULL;
}

/* The target sent upstream: the client's as sent when no rewrite applies,
 * else path_prefix + (the normalized path less strip_prefix), re-encoded,
 * plus the query. Writes to q (room: 3 * path + prefix + query). */
static size_t make_target(const sws_proxy_t *p, const sws_request_t *r, const char *path,
                          size_t path_len, const char *raw_path, char *q0)
{
    char *q = q0;
    const char *tend = r->target + r->target_len;
    if (!p->strip_prefix_len && !p->path_prefix_len) {
        if (raw_path < r->target || raw_path > tend) { /* "/" made up for an empty absolute-form path */
            const char *qm = memchr(r->target, '?', r->target_len);
            PUT("/");
            if (qm)
                PUTN(qm, (size_t)(tend - qm));
        } else {
            PUTN(raw_path, (size_t)(tend - raw_path));
        }
        return (size_t)(q - q0);
    }
    const char *rest = path;
    size_t rest_len = path_len;
    if (p->strip_prefix_len && rest_len >= p->strip_prefix_len &&
        memcmp(rest, p->strip_prefix, p->strip_prefix_len) == 0) {
        rest += p->strip_prefix_len;
        rest_len -= p->strip_prefix_len;
    }
    PUTN(p->path_prefix, p->path_prefix_len);
    if (q > q0 && q[-1] == '/' && rest_len && rest[0] == '/') {
        rest++;
        rest_len--;
    }
    if (q == q0 && (rest_len == 0 || rest[0] != '/'))
        PUT("/");
    for (size_t i = 0; i < rest_len; i++) {
        unsigned char ch = (unsigned char)rest[i];
        if (pct_keep(ch)) {
            *q++ = (char)ch;
        } else {
            static const char hx[] = "0123456789ABCDEF";
            *q++ = '%';
            *q++ = hx[ch >> 4];
            *q++ = hx[ch & 15];
        }
    }
    const char *qm = memchr(r->target, '?', r->target_len);
    if (qm)
        PUTN(qm, (size_t)(tend - qm));
    return (size_t)(q - q0);
}

int in_tokens(const sws_header_t *h, const char *const *tok, const size_t *tlen, int nt)
{
    for (int i = 0; i < nt; i++)
        if (h->name_len == tlen[i] && strncasecmp(h->name, tok[i], tlen[i]) == 0)
            return 1;
    return 0;
}

/* Splits the Connection option lists of headers[] into tok[] (at most
 * CONN_TOKENS_MAX). */
int conn_tokens(const sws_header_t *h, size_t nh, const char **tok, size_t *tlen)
{
    int nt = 0;
    for (size_t i = 0; i < nh; i++) {
        if (!name_is(&h[i], "connection", 10))
            continue;
        const char *s = h[i].value, *end = s + h[i].value_len;
        while (s < end && nt < CONN_TOKENS_MAX) {
            while (s < end && (*s == ',' || *s == ' ' || *s == '\t'))
                s++;
            const char *t = s;
            while (s < end && *s != ',' && *s != ' ' && *s != '\t')
                s++;
            if (s > t) {
                tok[nt] = t;
                tlen[nt++] = (size_t)(s - t);
            }
        }
    }
    return nt;
}

/* Request fields never passed on as the client sent them: hop-by-hop ones
 * (RFC 9110 §7.6.1), the ones we set, framing we redo. */
static int req_hop(const sws_header_t *h)
{
    int hop = 0;
    switch (h->name_len) {
    case 2: hop = name_is(h, "te", 2); break;
    case 4: hop = name_is(h, "host", 4); break;
    case 6: hop = name_is(h, "expect", 6); break;
    case 7: hop = name_is(h, "trailer", 7) || name_is(h, "upgrade", 7); break;
    case 10: hop = name_is(h, "connection", 10) || name_is(h, "keep-alive", 10); break;
    case 12: hop = name_is(h, "x-request-id", 12); break;
    case 13: hop = name_is(h, "x-scalws-peer", 13); break; /* cache peers' marker */
    case 15: hop = name_is(h, "x-forwarded-for", 15); break;
    case 16: hop = name_is(h, "x-forwarded-host", 16); break;
    case 17: hop = name_is(h, "transfer-encoding", 17) || name_is(h, "x-forwarded-proto", 17); break;
    default: break;
    }
    return hop || (h->name_len > 6 && strncasecmp(h->name, "proxy-", 6) == 0);
}

static const char *hval(const sws_request_t *r, const char *name, size_t n, size_t *len)
{
    const sws_header_t *h = find_header(r, name, n);
    if (!h)
        return NULL;
    *len = h->value_len;
    return h->value;
}

/* Builds x->head: the request line and fields for the upstream. */
int build_head(sws_engine_t *e, px_t *x, const sws_request_t *r, const sws_request_info_t *info,
                      const char *path, size_t path_len, const char *raw_path, size_t body_room)
{
    const sws_proxy_t *p = x->p;
    const sws_conn_t *c = x->conn;
    int trusted = peer_trusted(e, c);
    const char *tok[CONN_TOKENS_MAX];
    size_t tlen[CONN_TOKENS_MAX];
    int nt = conn_tokens(r->h, r->nh, tok, tlen);
    size_t cap = r->method_len + 3 * r->target_len + p->path_prefix_len + 64 + p->req_set_len + 512 +
                 2 * (r->host_len + 1) + p->host_len + RID_MAX + body_room;
    size_t xff_len = 0;
    for (size_t i = 0; i < r->nh; i++) {
        cap += r->h[i].name_len + r->h[i].value_len + 4;
        if (name_is(&r->h[i], "x-forwarded-for", 15))
            xff_len += r->h[i].value_len + 2;
    }
    cap += xff_len;
    char *q0 = malloc(cap);
    if (!q0)
        return -1;
    char *q = q0;
    PUTN(r->method, r->method_len);
    PUT(" ");
    q += make_target(p, r, path, path_len, raw_path, q);
    PUT(" HTTP/1.1\r\nHost: ");
    if (p->host)
        PUTN(p->host, p->host_len);
    else if (r->host)
        PUTN(r->host, r->host_len);
    else if (x->up->servers[0]->addr.ss_family == AF_UNIX)
        PUT("localhost");
    else
        PUTN(x->up->servers[0]->name, strlen(x->up->servers[0]->name));
    PUT("\r\n");
    for (size_t i = 0; i < r->nh; i++) {
        const sws_header_t *h = &r->h[i];
        if (req_hop(h) || in_tokens(h, tok, tlen, nt) || dropped(h, p->req_drop, p->n_req_drop))
            continue;
        PUTN(h->name, h->name_len);
        PUT(": ");
        PUTN(h->value, h->value_len);
        PUT("\r\n");
    }
    /* X-Forwarded-For: a trusted peer's list, plus the peer. */
    PUT("X-Forwarded-For: ");
    if (trusted) {
        for (size_t i = 0; i < r->nh; i++) {
            if (!name_is(&r->h[i], "x-forwarded-for", 15) || !r->h[i].value_len)
                continue;
            PUTN(r->h[i].value, r->h[i].value_len);
            PUT(", ");
        }
    }
    char peer[64];
    size_t peer_len = (size_t)(put_peer(peer, c) - peer);
    PUTN(peer, peer_len);
    size_t vl;
    const char *v;
    PUT("\r\nX-Forwarded-Proto: ");
    if (trusted && (v = hval(r, "x-forwarded-proto", 17, &vl)))
        PUTN(v, vl);
    else if (sws_conn_secure(c))
        PUT("https");
    else
        PUT("http");
    if (trusted && (v = hval(r, "x-forwarded-host", 16, &vl))) {
        PUT("\r\nX-Forwarded-Host: ");
        PUTN(v, vl);
    } else if (r->host) {
        PUT("\r\nX-Forwarded-Host: ");
        PUTN(r->host, r->host_len);
    }
    if (r->early && !hval(r, "early-data", 10, &vl))
        PUT("\r\nEarly-Data: 1"); /* RFC 8470 §5.1: the origin may answer 425 */
    PUT("\r\nX-Request-Id: ");
    PUTN(x->rid, x->rid_len);
    PUT("\r\n");
    PUTN(p->req_set, p->req_set_len);
    if (x->upgrade && (v = hval(r, "upgrade", 7, &vl))) {
        PUT("Connection: upgrade\r\nUpgrade: ");
        PUTN(v, vl);
        PUT("\r\n");
    }
    if (info->chunked)
        PUT("Transfer-Encoding: chunked\r\n");
    PUT("\r\n");
    x->head = q0;
    x->head_len = (size_t)(q - q0);
    return 0;
}
