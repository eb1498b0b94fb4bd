/* RFC 8941 Dictionaries (§3.2, parsed as §4.2 says); contract in
 * scalws/sfv.h. Every member is parsed, ours or not, items, inner lists and
 * parameters alike: a field that is not a Dictionary is ignored whole, so
 * its malformed tail must be seen. */
#include "scalws/sfv.h"

typedef struct {
    const char *p, *end;
} sfc_t;

static int sf_lcalpha(int c) { return c >= 'a' && c <= 'z'; }
static int sf_digit(int c) { return c >= '0' && c <= '9'; }
static int sf_alpha(int c) { return sf_lcalpha(c) || (c >= 'A' && c <= 'Z'); }
static int sf_peek(const sfc_t *c) { return c->p < c->end ? (unsigned char)*c->p : -1; }

static void sf_skip_sp(sfc_t *c)
{
    while (c->p < c->end && *c->p == ' ')
        c->p++;
}

/* key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ):
 * its length, 0 when there is none. */
static size_t sf_key(sfc_t *c, const char **k)
{
    int ch = sf_peek(c);
    if (!sf_lcalpha(ch) && ch != '*')
        return 0;
    *k = c->p;
    while (c->p < c->end) {
        ch = (unsigned char)*c->p;
        if (!sf_lcalpha(ch) && !sf_digit(ch) && ch != '_' && ch != '-' && ch != '.' && ch != '*')
            break;
        c->p++;
    }
    return (size_t)(c->p - *k);
}

static int sf_tchar(int ch)
{
    if (sf_alpha(ch) || sf_digit(ch))
        return 1;
    switch (ch) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
        return 1;
    default:
        return 0;
    }
}

/* A Bare Item (§4.2.3.1): its SF_* kind (*num: an Integer's value, a
 * Boolean's 0 or 1), or -1. */
static int sf_bare_item(sfc_t *c, int64_t *num)
{
    int ch = sf_peek(c);
    if (ch == '-' || sf_digit(ch)) { /* Integer or Decimal, §4.2.4 */
        int neg = ch == '-', n = 0, frac = -1;
        int64_t v = 0;
        if (neg)
            c->p++;
        if (!sf_digit(sf_peek(c)))
            return -1;
        while (c->p < c->end) {
            ch = (unsigned char)*c->p;
            if (sf_digit(ch)) {
                if (frac >= 0) {
                    if (++frac > 3)
                        return -1;
                } else {
                    if (++n > 15)
                        return -1;
                    v = v * 10 + (ch - '0');
                }
            } else if (ch == '.' && frac < 0) {
                if (n > 12)
                    return -1;
                frac = 0;
            } else {
                break;
            }
            c->p++;
        }
        if (frac == 0)
            return -1; /* "1." */
        *num = neg ? -v : v;
        return frac < 0 ? SWS_SF_INT : SWS_SF_DEC;
    }
    if (ch == '"') { /* String, §4.2.5 */
        for (c->p++; c->p < c->end; c->p++) {
            ch = (unsigned char)*c->p;
            if (ch == '"') {
                c->p++;
                return SWS_SF_STR;
            }
            if (ch == '\\') {
                if (++c->p == c->end || (*c->p != '"' && *c->p != '\\'))
                    return -1;
            } else if (ch < 0x20 || ch > 0x7e) {
                return -1;
            }
        }
        return -1;
    }
    if (ch == '*' || sf_alpha(ch)) { /* Token, §4.2.6 */
        while (c->p < c->end && (sf_tchar((unsigned char)*c->p) || *c->p == ':' || *c->p == '/'))
            c->p++;
        return SWS_SF_TOKEN;
    }
    if (ch == ':') { /* Byte Sequence, §4.2.7 */
        for (c->p++; c->p < c->end && *c->p != ':'; c->p++) {
            ch = (unsigned char)*c->p;
            if (!sf_alpha(ch) && !sf_digit(ch) && ch != '+' && ch != '/' && ch != '=')
                return -1;
        }
        if (c->p == c->end)
            return -1;
        c->p++;
        return SWS_SF_BYTES;
    }
    if (ch == '?') { /* Boolean, §4.2.8 */
        c->p++;
        ch = sf_peek(c);
        if (ch != '0' && ch != '1')
            return -1;
        c->p++;
        *num = ch == '1';
        return SWS_SF_BOOL;
    }
    return -1;
}

/* Parameters (§4.2.3.2), parsed and dropped: 0 or -1. */
static int sf_params(sfc_t *c)
{
    while (sf_peek(c) == ';') {
        const char *k;
        int64_t num;
        c->p++;
        sf_skip_sp(c);
        if (!sf_key(c, &k))
            return -1;
        if (sf_peek(c) == '=') {
            c->p++;
            if (sf_bare_item(c, &num) < 0)
                return -1;
        }
    }
    return 0;
}

/* An Item or an Inner List (§4.2.1.1): the Item's kind, SWS_SF_INNER, or -1. */
static int sf_member_value(sfc_t *c, int64_t *num)
{
    if (sf_peek(c) != '(') {
        int kind = sf_bare_item(c, num);
        return kind < 0 || sf_params(c) < 0 ? -1 : kind;
    }
    c->p++;
    for (;;) {
        sf_skip_sp(c);
        if (sf_peek(c) == ')') {
            c->p++;
            return sf_params(c) < 0 ? -1 : SWS_SF_INNER;
        }
        int64_t n;
        if (sf_bare_item(c, &n) < 0 || sf_params(c) < 0)
            return -1;
        if (sf_peek(c) != ' ' && sf_peek(c) != ')')
            return -1;
    }
}

static void skip_ows(sfc_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

int sws_sf_dict(const char *v, size_t n, sws_sf_member_fn member, void *arg)
{
    if (!n)
        return 0; /* v may be NULL */
    sfc_t c = {v, v + n};
    sf_skip_sp(&c);
    if (c.p == c.end)
        return 0; /* an empty Dictionary */
    int members = 0;
    for (;;) {
        const char *k;
        size_t kl = sf_key(&c, &k);
        if (!kl)
            return -1;
        int kind = SWS_SF_BOOL;
        int64_t num = 1; /* a bare key is Boolean true */
        if (sf_peek(&c) == '=') {
            c.p++;
            kind = sf_member_value(&c, &num);
        } else if (sf_params(&c) < 0) {
            kind = -1;
        }
        if (kind < 0)
            return -1;
        member(arg, k, kl, kind, num);
        members++;
        skip_ows(&c);
        if (c.p == c.end)
            return members;
        if (*c.p != ',')
            return -1;
        c.p++;
        skip_ows(&c);
        if (c.p == c.end)
            return -1; /* a trailing comma */
    }
}
