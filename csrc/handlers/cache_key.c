/* The response cache's keys (scalws/cache.h, cache_int.h): a route's key
 * template expanded for a request, the bypass and no_store conditions, the
 * key's hash, the request's values of a stored response's Vary fields, and
 * the request's own Cache-Control. No zone is touched here. */
#include <string.h>
#include <strings.h>

#include "cache_int.h"

/* ---- keys ---------------------------------------------------------------------------- */

static int put(char *out, size_t *len, const char *s, size_t n)
{
    if (*len + n > SWS_CACHE_KEY_MAX)
        return -1;
    memcpy(out + *len, s, n);
    *len += n;
    return 0;
}

/* The value of cookie `name` in the request's Cookie fields. */
static int cookie_value(const sws_request_t *r, const char *name, size_t nl, const char **v, size_t *vl)
{
    for (size_t i = 0; i < r->nh; i++) {
        if (!name_eq(&r->h[i], "cookie", 6))
            continue;
        const char *p = r->h[i].value, *end = p + r->h[i].value_len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == ';'))
                p++;
            const char *eq = memchr(p, '=', (size_t)(end - p));
            const char *semi = memchr(p, ';', (size_t)(end - p));
            if (!semi)
                semi = end;
            if (eq && eq < semi && (size_t)(eq - p) == nl && memcmp(p, name, nl) == 0) {
                *v = eq + 1;
                *vl = (size_t)(semi - eq - 1);
                return 1;
            }
            p = semi;
        }
    }
    return 0;
}

static int arg_value(const sws_request_t *r, const char *name, size_t nl, const char **v, size_t *vl)
{
    const char *p = r->query, *end = r->query + r->query_len;
    while (r->query_len && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        if (!amp)
            amp = end;
        const char *eq = memchr(p, '=', (size_t)(amp - p));
        const char *ne = eq ? eq : amp;
        if ((size_t)(ne - p) == nl && memcmp(p, name, nl) == 0) {
            *v = eq ? eq + 1 : amp;
            *vl = eq ? (size_t)(amp - eq - 1) : 0;
            return 1;
        }
        p = amp + 1;
    }
    return 0;
}

/* Expands a template for the request; uri (the target's path and query)
 * replaces the request's own when given (invalidation of Location). */
int expand(const sws_cktmpl_t *t, const sws_request_t *r, const char *uri, size_t uri_len,
           char *out, size_t *len)
{
    *len = 0;
    const char *target = uri ? uri : r->target;
    size_t target_len = uri ? uri_len : r->target_len;
    const char *q = memchr(target, '?', target_len);
    size_t path_len = q ? (size_t)(q - target) : target_len;
    for (size_t i = 0; i < t->n; i++) {
        const sws_ckpart_t *p = &t->parts[i];
        const char *v = "";
        size_t vl = 0;
        switch (p->kind) {
        case SWS_CK_LIT: v = p->s; vl = p->n; break;
        case SWS_CK_SCHEME:
            /* a peer's request: the scheme its client used (dispatch.c) */
            v = (r->peer ? r->peer_https : r->conn && sws_conn_secure(r->conn)) ? "https" : "http";
            vl = strlen(v);
            break;
        case SWS_CK_HOST: {
            /* lowercase, without the port */
            size_t hl = r->host ? r->host_len : 0;
            if (hl && r->host[0] != '[') {
                const char *colon = memchr(r->host, ':', hl);
                if (colon)
                    hl = (size_t)(colon - r->host);
            } else if (hl) {
                const char *rb = memchr(r->host, ']', hl);
                if (rb)
                    hl = (size_t)(rb - r->host + 1);
            }
            if (*len + hl > SWS_CACHE_KEY_MAX)
                return -1;
            for (size_t k = 0; k < hl; k++) {
                char ch = r->host[k];
                out[(*len)++] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
            }
            continue;
        }
        case SWS_CK_REQUEST_URI: v = target; vl = target_len; break;
        case SWS_CK_URI:
            if (uri) {
                v = target;
                vl = path_len;
            } else {
                v = r->path;
                vl = r->path_len;
            }
            break;
        case SWS_CK_ARGS:
            if (q) {
                v = q + 1;
                vl = target_len - path_len - 1;
            }
            break;
        case SWS_CK_IS_ARGS:
            if (q) {
                v = "?";
                vl = 1;
            }
            break;
        case SWS_CK_METHOD:
            v = uri ? "GET" : r->method;
            vl = uri ? 3 : r->method_len;
            break;
        case SWS_CK_HTTP: {
            const sws_header_t *h = find_header(r, p->s, p->n);
            if (h) {
                v = h->value;
                vl = h->value_len;
            }
            break;
        }
        case SWS_CK_COOKIE: cookie_value(r, p->s, p->n, &v, &vl); break;
        case SWS_CK_ARG: arg_value(r, p->s, p->n, &v, &vl); break;
        default: break;
        }
        if (put(out, len, v, vl) < 0)
            return -1;
    }
    return 0;
}

/* A bypass or no_store condition: any template that expands to a value
 * other than "" and "0". */
int condition(const sws_cktmpl_t *t, size_t n, const sws_request_t *r)
{
    char buf[SWS_CACHE_KEY_MAX];
    for (size_t i = 0; i < n; i++) {
        size_t len;
        if (expand(&t[i], r, NULL, 0, buf, &len) < 0)
            return 1;
        if (len && !(len == 1 && buf[0] == '0'))
            return 1;
    }
    return 0;
}

uint64_t key_hash(const char *k, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)k[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The request's value of a field, lines joined with ", " into buf: its
 * length, -1 when the request has none, -2 when it does not fit cap. */
static ssize_t req_field(const sws_request_t *r, const char *name, size_t nl, char *buf, size_t cap)
{
    ssize_t len = -1;
    for (size_t i = 0; i < r->nh; i++) {
        if (!name_eq(&r->h[i], name, nl))
            continue;
        size_t at = len < 0 ? 0 : (size_t)len;
        size_t need = at + (len < 0 ? 0 : 2) + r->h[i].value_len;
        if (need > cap)
            return -2;
        if (len >= 0) {
            memcpy(buf + at, ", ", 2);
            at += 2;
        }
        memcpy(buf + at, r->h[i].value, r->h[i].value_len);
        len = (ssize_t)(at + r->h[i].value_len);
    }
    return len;
}

/* Fields whose values are case-insensitive (RFC 9110 §12.5: content-codings,
 * language tags, charsets). */
static const struct { const char *name; size_t len; } LOWER[] = {
    {"accept-encoding", 15}, {"accept-language", 15}, {"accept-charset", 14}};

/* One field line's value appended to buf as RFC 9111 §4.1 lets a cache
 * compare it: a list's members without the whitespace around them, empty
 * ones dropped, joined by ","; lowercased where the values are
 * case-insensitive; quoted strings as they are. Returns the new length, or
 * -2 when it does not fit cap. */
static ssize_t list_put(char *buf, size_t at, size_t cap, const char *v, size_t n, int lower)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        if (i == n)
            break;
        if (at && buf[at - 1] != ',') {
            if (at >= cap)
                return -2;
            buf[at++] = ',';
        }
        size_t keep = at; /* the member's end without trailing whitespace */
        int quoted = 0;
        for (; i < n && (quoted || v[i] != ','); i++) {
            char ch = v[i];
            if (ch == '"' && (i == 0 || v[i - 1] != '\\'))
                quoted = !quoted;
            if (lower && !quoted && ch >= 'A' && ch <= 'Z')
                ch = (char)(ch + 32);
            if (at >= cap)
                return -2;
            buf[at++] = ch;
            if (quoted || (ch != ' ' && ch != '\t'))
                keep = at;
        }
        at = keep;
    }
    return (ssize_t)at;
}

/* Does a quoted string of v end before v does? */
static int quotes_closed(const char *v, size_t n)
{
    int quoted = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] == '"' && (i == 0 || v[i - 1] != '\\'))
            quoted = !quoted;
    return !quoted;
}

ssize_t vary_value(const sws_request_t *r, const char *name, size_t nl, char *buf, size_t cap)
{
    int lower = 0;
    for (size_t k = 0; k < sizeof LOWER / sizeof LOWER[0]; k++)
        lower |= LOWER[k].len == nl && memcmp(LOWER[k].name, name, nl) == 0;
    /* A line whose quoted string does not end is no list: compared as it came. */
    for (size_t i = 0; i < r->nh; i++)
        if (name_eq(&r->h[i], name, nl) && !quotes_closed(r->h[i].value, r->h[i].value_len))
            return req_field(r, name, nl, buf, cap);
    ssize_t len = -1;
    for (size_t i = 0; i < r->nh; i++) {
        if (!name_eq(&r->h[i], name, nl))
            continue;
        len = list_put(buf, len < 0 ? 0 : (size_t)len, cap, r->h[i].value, r->h[i].value_len, lower);
        if (len == -2)
            return -2;
    }
    return len;
}

/* Vary values as stored: per field, "name\0" then '-' (absent) or '+'
 * and the value (vary_value's), then "\0". Does the request select this
 * entry? */
int vary_matches(const sws_cent_t *ent, const sws_request_t *r)
{
    const char *p = ent_vary(ent), *end = p + ent->vary_len;
    char buf[VARY_MAX];
    while (p < end) {
        size_t nl = strlen(p);
        const char *name = p;
        p += nl + 1;
        size_t vl = strlen(p);
        ssize_t got = vary_value(r, name, nl, buf, sizeof buf);
        if (got == -2)
            return 0;
        if (p[0] == '-' ? got != -1 : (got < 0 || (size_t)got != vl - 1 || memcmp(buf, p + 1, vl - 1)))
            return 0;
        p += vl + 1;
    }
    return 1;
}

/* ---- the request's own directives --------------------------------------------------- */

void req_directives(const sws_request_t *r, reqcc_t *q)
{
    memset(q, 0, sizeof *q);
    sws_cc_init(&q->cc);
    int has_cc = 0, pragma = 0;
    for (size_t i = 0; i < r->nh; i++) {
        const sws_header_t *h = &r->h[i];
        if (name_eq(h, "cache-control", 13)) {
            sws_cc_parse(&q->cc, h->value, h->value_len);
            has_cc = 1;
        } else if (name_eq(h, "pragma", 6)) {
            pragma |= h->value_len >= 8 && strncasecmp(h->value, "no-cache", 8) == 0;
        } else if (name_eq(h, "authorization", 13)) {
            q->has_auth = 1;
        } else if (name_eq(h, "range", 5)) {
            q->has_range = 1;
        } else if (name_eq(h, "if-none-match", 13) || name_eq(h, "if-modified-since", 17)) {
            q->conditional = 1;
        }
    }
    q->no_cache = (q->cc.flags & SWS_CC_NO_CACHE) || (!has_cc && pragma);
}

int sws_cache_key(const sws_handler_t *h, const sws_request_t *req, char *out, size_t *len)
{
    return expand(&h->cache->key, req, NULL, 0, out, len);
}
