/* The request checks HTTP/2 and HTTP/3 share (contract in reqcheck.h). */
#include "http/reqcheck.h"

#include <string.h>

/* Pseudo-header fields a request gave (RFC 9113 8.3.1, RFC 9114 4.3.1;
 * RFC 8441 4) ... */
enum { PH_METHOD = 1, PH_SCHEME = 2, PH_AUTHORITY = 4, PH_PATH = 8, PH_PROTOCOL = 16 };
/* ... and what they said. */
enum { SAID_SLASH = 1, SAID_STAR = 2, SAID_OPTIONS = 4, SAID_HOST = 8 };

/* tchar (RFC 9110 §5.6.2) without uppercase letters: a field name in HTTP/2 and HTTP/3. */
static const uint8_t name_ok[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

static int is(const uint8_t *p, size_t n, const char *lit, size_t ln)
{
    return n == ln && memcmp(p, lit, ln) == 0;
}

/* RFC 9113 §8.2.1: a value without NUL, CR or LF, and without whitespace
 * at either end. */
static int value_ok(const uint8_t *v, size_t n)
{
    if (n && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        return 0;
    /* eight bytes a step: w, cr or lf has a zero byte where the value has NUL, CR or LF */
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w, cr, lf;
        memcpy(&w, v + i, 8);
        cr = w ^ (ones * '\r');
        lf = w ^ (ones * '\n');
        if ((((w - ones) & ~w) | ((cr - ones) & ~cr) | ((lf - ones) & ~lf)) & highs)
            return 0;
    }
    for (; i < n; i++)
        if (v[i] == 0 || v[i] == '\r' || v[i] == '\n')
            return 0;
    return 1;
}

int sws_parse_content_length(const uint8_t *v, size_t n, uint64_t *out)
{
    uint64_t x = 0;
    if (!n || n > 19)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

int sws_reqcheck_field(sws_reqcheck_t *c, const uint8_t *n, size_t nl, const uint8_t *v,
                       size_t vl, int trailers, int connect_proto)
{
    int bad = nl == 0 || !value_ok(v, vl);
    if (!bad && n[0] == ':') {
        int ph = is(n, nl, ":method", 7) ? PH_METHOD : is(n, nl, ":scheme", 7) ? PH_SCHEME
               : is(n, nl, ":authority", 10) ? PH_AUTHORITY : is(n, nl, ":path", 5) ? PH_PATH
               : is(n, nl, ":protocol", 9) && connect_proto ? PH_PROTOCOL : 0;
        /* known, once, before every regular field, and never in trailers */
        bad = !ph || (c->pseudo & ph) || c->regular || trailers || (ph == PH_PATH && !vl);
        c->pseudo |= (uint8_t)ph;
        if (ph == PH_METHOD && is(v, vl, "CONNECT", 7))
            c->connect = 1;
        if (ph == PH_METHOD && is(v, vl, "OPTIONS", 7))
            c->said |= SAID_OPTIONS;
        if (ph == PH_PATH)
            c->said |= v[0] == '/' ? SAID_SLASH : is(v, vl, "*", 1) ? SAID_STAR : 0;
    } else if (!bad) {
        c->regular = 1;
        for (size_t i = 0; i < nl && !bad; i++)
            bad = !name_ok[n[i]];
        if (!bad) /* connection-specific fields (RFC 9113 8.2.2, RFC 9114 4.2) */
            bad = is(n, nl, "connection", 10) || is(n, nl, "keep-alive", 10) ||
                  is(n, nl, "proxy-connection", 16) || is(n, nl, "transfer-encoding", 17) ||
                  is(n, nl, "upgrade", 7) || (is(n, nl, "te", 2) && !is(v, vl, "trailers", 8));
        if (!bad && is(n, nl, "host", 4))
            c->said |= SAID_HOST;
        if (!bad && !trailers && is(n, nl, "content-length", 14)) {
            uint64_t cl = 0;
            bad = sws_parse_content_length(v, vl, &cl) < 0 || (c->cl_known && c->cl != cl);
            c->cl = cl;
            c->cl_known = 1;
        }
    }
    return bad ? -1 : 0;
}

int sws_reqcheck_pseudo_ok(const sws_reqcheck_t *c)
{
    int ph = c->pseudo, all = PH_SCHEME | PH_PATH | PH_AUTHORITY;
    if (!(ph & PH_METHOD))
        return 0;
    if (c->connect && !(ph & PH_PROTOCOL)) /* a tunnel: only :authority */
        return (ph & all) == PH_AUTHORITY;
    if (ph & PH_PROTOCOL) /* an extended CONNECT names all of them */
        return c->connect && (ph & all) == all && (c->said & SAID_SLASH);
    if ((ph & (PH_SCHEME | PH_PATH)) != (PH_SCHEME | PH_PATH))
        return 0;
    if (!(c->said & SAID_SLASH) && (c->said & (SAID_STAR | SAID_OPTIONS)) != (SAID_STAR | SAID_OPTIONS))
        return 0;
    return (ph & PH_AUTHORITY) || (c->said & SAID_HOST);
}
