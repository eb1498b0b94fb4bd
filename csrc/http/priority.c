/* The Priority field (RFC 9218 §4) as an RFC 8941 Dictionary; contract in
 * scalws/priority.h. The members we do not use are still parsed, items,
 * inner lists and parameters alike: a field that is not a Dictionary is
 * ignored whole, so its malformed tail must be seen. */
#include "scalws/priority.h"

#include <stdint.h>

typedef struct {
    const char *p, *end;
} cur_t;

enum { V_NONE, V_INT, V_BOOL, V_OTHER }; /* what a member's value was */

static int lcalpha(int c) { return c >= 'a' && c <= 'z'; }
static int digit(int c) { return c >= '0' && c <= '9'; }
static int alpha(int c) { return lcalpha(c) || (c >= 'A' && c <= 'Z'); }

static int peek(const cur_t *c) { return c->p < c->end ? (unsigned char)*c->p : -1; }

static void skip_sp(cur_t *c)
{
    while (c->p < c->end && *c->p == ' ')
        c->p++;
}

static void skip_ows(cur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

/* key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ):
 * its length, 0 when there is none. */
static size_t key(cur_t *c, const char **k)
{
    int ch = peek(c);
    if (!lcalpha(ch) && ch != '*')
        return 0;
    *k = c->p;
    while (c->p < c->end) {
        ch = (unsigned char)*c->p;
        if (!lcalpha(ch) && !digit(ch) && ch != '_' && ch != '-' && ch != '.' && ch != '*')
            break;
        c->p++;
    }
    return (size_t)(c->p - *k);
}

static int tchar(int ch)
{
    if (alpha(ch) || digit(ch))
        return 1;
    switch (ch) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
        return 1;
    default:
        return 0;
    }
}

static int b64char(int ch) { return alpha(ch) || digit(ch) || ch == '+' || ch == '/' || ch == '='; }

/* A Bare Item (RFC 8941 §4.2.3.1): its kind (V_INT with *num, V_BOOL with
 * *num, V_OTHER), or -1. */
static int bare_item(cur_t *c, int64_t *num)
{
    int ch = peek(c);
    if (ch == '-' || digit(ch)) { /* Integer or Decimal, §4.2.4 */
        int neg = ch == '-', n = 0, frac = -1;
        int64_t v = 0;
        if (neg)
            c->p++;
        if (!digit(peek(c)))
            return -1;
        while (c->p < c->end) {
            ch = (unsigned char)*c->p;
            if (digit(ch)) {
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
        return frac < 0 ? V_INT : V_OTHER;
    }
    if (ch == '"') { /* String, §4.2.5 */
        for (c->p++; c->p < c->end; c->p++) {
            ch = (unsigned char)*c->p;
            if (ch == '"') {
                c->p++;
                return V_OTHER;
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
    if (ch == '*' || alpha(ch)) { /* Token, §4.2.6 */
        while (c->p < c->end && (tchar((unsigned char)*c->p) || *c->p == ':' || *c->p == '/'))
            c->p++;
        return V_OTHER;
    }
    if (ch == ':') { /* Byte Sequence, §4.2.7 */
        for (c->p++; c->p < c->end && *c->p != ':'; c->p++)
            if (!b64char((unsigned char)*c->p))
                return -1;
        if (c->p == c->end)
            return -1;
        c->p++;
        return V_OTHER;
    }
    if (ch == '?') { /* Boolean, §4.2.8 */
        c->p++;
        ch = peek(c);
        if (ch != '0' && ch != '1')
            return -1;
        c->p++;
        *num = ch == '1';
        return V_BOOL;
    }
    return -1;
}

/* Parameters (§4.2.3.2), parsed and dropped: 0 or -1. */
static int parameters(cur_t *c)
{
    while (peek(c) == ';') {
        const char *k;
        int64_t num;
        c->p++;
        skip_sp(c);
        if (!key(c, &k))
            return -1;
        if (peek(c) == '=') {
            c->p++;
            if (bare_item(c, &num) < 0)
                return -1;
        }
    }
    return 0;
}

/* An Item or an Inner List (§4.2.1.1): the Item's kind (inner lists are
 * V_OTHER), or -1. */
static int member_value(cur_t *c, int64_t *num)
{
    if (peek(c) != '(') {
        int kind = bare_item(c, num);
        return kind < 0 || parameters(c) < 0 ? -1 : kind;
    }
    c->p++;
    for (;;) {
        skip_sp(c);
        if (peek(c) == ')') {
            c->p++;
            return parameters(c) < 0 ? -1 : V_OTHER;
        }
        int64_t n;
        if (bare_item(c, &n) < 0 || parameters(c) < 0)
            return -1;
        if (peek(c) != ' ' && peek(c) != ')')
            return -1;
    }
}

int sws_parse_priority(const char *v, size_t len, int *urgency, int *incremental)
{
    if (!len)
        return 0; /* an empty field (v may be NULL: nghttp2's empty PRIORITY_UPDATE) */
    cur_t c = {v, v + len};
    int u_kind = V_NONE, i_kind = V_NONE;
    int64_t u = 0, i = 0;
    skip_sp(&c);
    if (c.p == c.end)
        return 0; /* an empty field: an empty Dictionary */
    for (;;) {
        const char *k;
        size_t kl = key(&c, &k);
        if (!kl)
            return -1;
        int kind = V_BOOL;
        int64_t num = 1; /* a bare key is Boolean true */
        if (peek(&c) == '=') {
            c.p++;
            kind = member_value(&c, &num);
        } else if (parameters(&c) < 0) {
            kind = -1;
        }
        if (kind < 0)
            return -1;
        if (kl == 1 && *k == 'u') {
            u_kind = kind;
            u = num;
        } else if (kl == 1 && *k == 'i') {
            i_kind = kind;
            i = num;
        }
        skip_ows(&c);
        if (c.p == c.end)
            break;
        if (*c.p != ',')
            return -1;
        c.p++;
        skip_ows(&c);
        if (c.p == c.end)
            return -1; /* a trailing comma */
    }
    int got = 0;
    if (u_kind == V_INT && u >= 0 && u <= 7) {
        *urgency = (int)u;
        got |= SWS_PRI_U;
    }
    if (i_kind == V_BOOL) {
        *incremental = (int)i;
        got |= SWS_PRI_I;
    }
    return got;
}
