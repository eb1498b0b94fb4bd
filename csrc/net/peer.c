/* The peer's address as text, and whether it is a trusted proxy; contract
 * in scalws/net.h. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "context.h"

void sws_engine_set_trusted(sws_engine_t *e, const sws_cidr_t *list, size_t n)
{
    e->net.trusted = list;
    e->net.n_trusted = n;
}

/* Written by hand: sprintf was 1,670 instructions of a proxied request's
 * 12,200 (callgrind, docs/benchmarks/2026-12-05-issue36.md); every
 * proxied, FastCGI and logged request writes the peer. */
static char *put_dec8(char *p, unsigned v)
{
    if (v >= 100) {
        *p++ = (char)('0' + v / 100);
        v %= 100;
        *p++ = (char)('0' + v / 10);
    } else if (v >= 10) {
        *p++ = (char)('0' + v / 10);
    }
    *p++ = (char)('0' + v % 10);
    return p;
}

static char *put_v4(char *p, const unsigned char *a)
{
    for (int i = 0; i < 4; i++) {
        if (i)
            *p++ = '.';
        p = put_dec8(p, a[i]);
    }
    return p;
}

static char *put_hex16(char *p, unsigned v) /* as "%x": no leading zeros */
{
    static const char hex[] = "0123456789abcdef";
    int shift = 12;
    while (shift > 0 && !(v >> shift))
        shift -= 4;
    for (; shift >= 0; shift -= 4)
        *p++ = hex[(v >> shift) & 15];
    return p;
}

char *put_peer(char *p, const sws_conn_t *c)
{
    if (c->is_unix) {
        memcpy(p, "unix:", 5);
        return p + 5;
    }
    if (c->peer_family == AF_INET)
        return put_v4(p, c->peer);
    /* IPv6: full form of 8 groups, with IPv4-mapped shown as IPv4. */
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(c->peer, mapped, 12) == 0)
        return put_v4(p, c->peer + 12);
    for (int i = 0; i < 16; i += 2) {
        if (i)
            *p++ = ':';
        p = put_hex16(p, (unsigned)(c->peer[i] << 8 | c->peer[i + 1]));
    }
    return p;
}

static int cidr_match(const sws_cidr_t *c, int family, const unsigned char *a)
{
    if (c->family != family)
        return 0;
    int bits = c->bits, i = 0;
    for (; bits >= 8; bits -= 8, i++)
        if (c->addr[i] != a[i])
            return 0;
    if (bits && ((c->addr[i] ^ a[i]) & (0xff00 >> bits) & 0xff))
        return 0;
    return 1;
}

static int in_list(const sws_cidr_t *list, size_t n, int family, const unsigned char *a)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (family == AF_INET6 && memcmp(a, mapped, 12) == 0) {
        family = AF_INET;
        a += 12;
    }
    for (size_t i = 0; i < n; i++)
        if (cidr_match(&list[i], family, a))
            return 1;
    return 0;
}

static int trusted_addr(const sws_engine_t *e, int family, const unsigned char *a)
{
    return in_list(e->net.trusted, e->net.n_trusted, family, a);
}

int peer_in(const sws_conn_t *c, const sws_cidr_t *list, size_t n)
{
    return !c->is_unix && in_list(list, n, c->peer_family, c->peer);
}

int text_in(const sws_cidr_t *list, size_t ln, const char *s, size_t n)
{
    char buf[64];
    unsigned char a[16];
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET, buf, a) == 1)
        return in_list(list, ln, AF_INET, a);
    if (inet_pton(AF_INET6, buf, a) == 1)
        return in_list(list, ln, AF_INET6, a);
    return 0;
}

int trusted_text(const sws_engine_t *e, const char *s, size_t n)
{
    return text_in(e->net.trusted, e->net.n_trusted, s, n);
}

int peer_trusted(const sws_engine_t *e, const sws_conn_t *c)
{
    return !c->is_unix && e->net.n_trusted && trusted_addr(e, c->peer_family, c->peer);
}
