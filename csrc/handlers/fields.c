/* Request-field helpers the handlers share (fields_int.h): a field's name,
 * a configured drop list, and the client's key (the peer, or behind
 * trusted proxies the right-most untrusted X-Forwarded-For entry), which
 * the proxy's and FastCGI's hash balancing and the cache's PURGE use.
 * Moved from proxy_head.c so that no handler calls another's file. */
#include <strings.h>

#include "fields_int.h"

int name_is(const sws_header_t *h, const char *lower, size_t n)
{
    return h->name_len == n && strncasecmp(h->name, lower, n) == 0;
}

int dropped(const sws_header_t *h, const sws_hname_t *drop, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (name_is(h, drop[i].name, drop[i].name_len))
            return 1;
    return 0;
}

/* The client address balance: hash uses: the peer, or with trusted proxies
 * the right-most untrusted X-Forwarded-For entry. */
void client_key(const sws_engine_t *e, const sws_conn_t *c, const sws_request_t *r,
                const char **k, size_t *kl, char *peer)
{
    *kl = (size_t)(put_peer(peer, c) - peer);
    *k = peer;
    if (!peer_trusted(e, c))
        return;
    for (size_t i = r->nh; i-- > 0;) {
        if (!name_is(&r->h[i], "x-forwarded-for", 15))
            continue;
        const char *s = r->h[i].value, *end = s + r->h[i].value_len;
        while (end > s) {
            const char *t = end;
            while (t > s && t[-1] != ',')
                t--;
            const char *a = t, *b = end;
            while (a < b && (*a == ' ' || *a == '\t'))
                a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                b--;
            *k = a;
            *kl = (size_t)(b - a);
            if (!trusted_text(e, a, (size_t)(b - a)))
                return;
            end = t > s ? t - 1 : s;
        }
    }
}
