/* The fields of a proxied answer outside its final head: interim (1xx)
 * responses, passed on as they come, and the trailer section of a chunked
 * body, kept as it arrives and passed on before the end; each filtered as
 * RFC 9110 asks. Contract in proxy_int.h. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy_int.h"

int px_interim(sws_engine_t *e, px_t *x, int status, const char *reason, size_t reason_len,
               sws_header_t *h, size_t nh)
{
    const char *tok[CONN_TOKENS_MAX];
    size_t tlen[CONN_TOKENS_MAX];
    int nt = conn_tokens(h, nh, tok, tlen);
    size_t k = 0;
    for (size_t i = 0; i < nh; i++)
        if (!px_resp_hop(&h[i]) && !in_tokens(&h[i], tok, tlen, nt) &&
            !dropped(&h[i], x->p->resp_drop, x->p->n_resp_drop))
            h[k++] = h[i];
    x->r->ops->interim(e, x->r, status, reason, reason_len, h, k);
    return x->r->ops->flush(e, x->r); /* before the final answer, however late that comes */
}

int px_trailer_bytes(px_t *x, const char *p, size_t n)
{
    /* The decoder bounds the section (SWS_CHUNK_TRAILER_MAX), the final
     * CRLF px_trailers adds included. */
    char *t = realloc(x->tr, x->tr_len + n);
    if (!t)
        return -1;
    memcpy(t + x->tr_len, p, n);
    x->tr = t;
    x->tr_len += n;
    return 0;
}

/* Fields that must not be in a trailer section, or that we must not pass
 * on in one (RFC 9110 §6.5.1): those that frame or route the message, and
 * request modifiers, authentication, response control, the content's
 * format and state, whose meaning needs them before the content. The
 * hop-by-hop ones (px_resp_hop) and the conditionals (If-*) besides.
 * Authentication-Info, Content-Digest and the like are allowed there. */
static int trailer_forbidden(const sws_header_t *h)
{
    static const char *const names[] = {
        "host", "cache-control", "expect", "max-forwards", "pragma", "range", "authorization",
        "www-authenticate", "age", "expires", "location", "retry-after", "vary", "warning",
        "etag", "last-modified", "content-encoding", "content-type", "content-range",
        "content-language", "content-location", "content-disposition", "set-cookie", "cookie",
    };
    if (px_resp_hop(h) || (h->name_len > 3 && strncasecmp(h->name, "if-", 3) == 0))
        return 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (name_is(h, names[i], strlen(names[i])))
            return 1;
    return 0;
}

int px_trailers(sws_engine_t *e, px_t *x)
{
    if (px_trailer_bytes(x, "\r\n", 2) < 0)
        return -1;
    sws_header_t h[RESP_HEADERS_MAX];
    size_t nh = RESP_HEADERS_MAX;
    /* The decoder checked each line as RFC 9112 §7.1.2 has it, the
     * grammar of a head's field lines (here without a start line). */
    if (sws_parse_cgi_head(x->tr, x->tr_len, h, &nh, 0) < 0)
        return -1; /* more than RESP_HEADERS_MAX fields: as for a head */
    size_t k = 0;
    for (size_t i = 0; i < nh; i++)
        if (!trailer_forbidden(&h[i]) && !dropped(&h[i], x->p->resp_drop, x->p->n_resp_drop))
            h[k++] = h[i];
    if (k)
        x->r->ops->trailers(e, x->r, h, k);
    return 0;
}
