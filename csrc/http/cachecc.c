/* RFC 9111's arithmetic: Cache-Control, Age, freshness lifetime, age; and
 * RFC 9213's targeted fields, parsed as RFC 8941 Dictionaries
 * (scalws/cachecc.h). */
#include <string.h>
#include <strings.h>

#include "scalws/cachecc.h"
#include "scalws/sfv.h"

void sws_cc_init(sws_cc_t *cc)
{
    cc->flags = 0;
    cc->max_age = cc->s_maxage = SWS_CC_NONE;
    cc->stale_while_revalidate = cc->stale_if_error = SWS_CC_NONE;
    cc->max_stale = cc->min_fresh = SWS_CC_NONE;
}

int64_t sws_cc_delta(const char *s, size_t n)
{
    if (n == 0)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (v < SWS_CC_MAX_DELTA)
            v = v * 10 + (s[i] - '0');
    }
    return v > SWS_CC_MAX_DELTA ? SWS_CC_MAX_DELTA : v;
}

static int is_ows(char c) { return c == ' ' || c == '\t'; }

static int dir_is(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n == l && strncasecmp(s, lit, l) == 0;
}

/* A delta directive's value: first one wins; a bad one marks the set
 * invalid when it is about freshness. */
static void set_delta(sws_cc_t *cc, int64_t *slot, const char *v, size_t vn, int has_value,
                      int freshness)
{
    int64_t d = has_value ? sws_cc_delta(v, vn) : -1;
    if (d < 0) {
        if (freshness)
            cc->flags |= SWS_CC_INVALID;
        return;
    }
    if (*slot == SWS_CC_NONE)
        *slot = d;
    else if (freshness && *slot != d)
        cc->flags |= SWS_CC_INVALID; /* two different values: treated as stale */
}

void sws_cc_parse(sws_cc_t *cc, const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_ows(p[i]) || p[i] == ','))
            i++;
        size_t ns = i;
        while (i < n && p[i] != '=' && p[i] != ',' && !is_ows(p[i]))
            i++;
        const char *name = p + ns;
        size_t nl = i - ns;
        while (i < n && is_ows(p[i]))
            i++;
        const char *v = NULL;
        size_t vn = 0;
        int has_value = 0;
        if (i < n && p[i] == '=') {
            i++;
            while (i < n && is_ows(p[i]))
                i++;
            has_value = 1;
            if (i < n && p[i] == '"') {
                size_t vs = ++i;
                while (i < n && p[i] != '"') {
                    if (p[i] == '\\' && i + 1 < n)
                        i++;
                    i++;
                }
                v = p + vs;
                vn = i - vs;
                if (i < n)
                    i++; /* closing quote */
            } else {
                size_t vs = i;
                while (i < n && p[i] != ',' && !is_ows(p[i]))
                    i++;
                v = p + vs;
                vn = i - vs;
            }
        }
        while (i < n && p[i] != ',')
            i++; /* anything else up to the comma is not ours */
        if (!nl)
            continue;
        if (dir_is(name, nl, "max-age"))
            set_delta(cc, &cc->max_age, v, vn, has_value, 1);
        else if (dir_is(name, nl, "s-maxage"))
            set_delta(cc, &cc->s_maxage, v, vn, has_value, 1);
        else if (dir_is(name, nl, "no-store"))
            cc->flags |= SWS_CC_NO_STORE;
        else if (dir_is(name, nl, "no-cache"))
            cc->flags |= SWS_CC_NO_CACHE;
        else if (dir_is(name, nl, "private"))
            cc->flags |= SWS_CC_PRIVATE;
        else if (dir_is(name, nl, "public"))
            cc->flags |= SWS_CC_PUBLIC;
        else if (dir_is(name, nl, "must-revalidate"))
            cc->flags |= SWS_CC_MUST_REVALIDATE;
        else if (dir_is(name, nl, "proxy-revalidate"))
            cc->flags |= SWS_CC_PROXY_REVALIDATE;
        else if (dir_is(name, nl, "stale-while-revalidate"))
            set_delta(cc, &cc->stale_while_revalidate, v, vn, has_value, 0);
        else if (dir_is(name, nl, "stale-if-error"))
            set_delta(cc, &cc->stale_if_error, v, vn, has_value, 0);
        else if (dir_is(name, nl, "max-stale")) {
            if (has_value)
                set_delta(cc, &cc->max_stale, v, vn, 1, 0);
            else
                cc->flags |= SWS_CC_MAX_STALE_ANY;
        } else if (dir_is(name, nl, "min-fresh"))
            set_delta(cc, &cc->min_fresh, v, vn, has_value, 0);
        else if (dir_is(name, nl, "only-if-cached"))
            cc->flags |= SWS_CC_ONLY_IF_CACHED;
        else if (dir_is(name, nl, "immutable"))
            cc->flags |= SWS_CC_IMMUTABLE;
        else if (dir_is(name, nl, "no-transform"))
            cc->flags |= SWS_CC_NO_TRANSFORM;
        else if (dir_is(name, nl, "must-understand"))
            cc->flags |= SWS_CC_MUST_UNDERSTAND;
    }
}

int sws_cc_heuristic_status(int status)
{
    switch (status) {
    case 200: case 203: case 204: case 206: case 300: case 301: case 308:
    case 404: case 405: case 410: case 414: case 501:
        return 1;
    default:
        return 0;
    }
}

int sws_cc_understood_status(int status)
{
    switch (status) {
    case 200: case 201: case 202: case 203: case 204: case 205: case 206:
    case 300: case 301: case 302: case 303: case 304: case 305: case 307: case 308:
    case 400: case 401: case 402: case 403: case 404: case 405: case 406: case 407: case 408:
    case 409: case 410: case 411: case 412: case 413: case 414: case 415: case 416: case 417:
    case 418: case 421: case 422: case 426: case 428: case 429: case 431: case 451:
    case 500: case 501: case 502: case 503: case 504: case 505: case 511:
        return 1;
    default:
        return 0;
    }
}

int64_t sws_cc_lifetime(const sws_cc_t *cc, const sws_cc_resp_t *rs, int heuristic, int64_t fallback)
{
    if (cc->flags & SWS_CC_INVALID)
        return 0; /* present but unusable: stale at once (§4.2.1) */
    if (cc->s_maxage != SWS_CC_NONE)
        return cc->s_maxage;
    if (cc->max_age != SWS_CC_NONE)
        return cc->max_age;
    if (rs->expires_invalid || rs->expires_multiple)
        return 0;
    if (rs->expires != INT64_MIN) {
        int64_t d = rs->expires - rs->date;
        return d <= 0 ? 0 : d > SWS_CC_MAX_DELTA ? SWS_CC_MAX_DELTA : d;
    }
    if (fallback >= 0)
        return fallback > SWS_CC_MAX_DELTA ? SWS_CC_MAX_DELTA : fallback;
    if (heuristic && rs->last_modified != INT64_MIN && rs->date > rs->last_modified) {
        int64_t h = (rs->date - rs->last_modified) / 10;
        return h > 86400 ? 86400 : h;
    }
    return -1;
}

int64_t sws_cc_initial_age(const sws_cc_resp_t *rs, int64_t request_time, int64_t response_time)
{
    int64_t apparent = rs->date != INT64_MIN ? response_time - rs->date : 0;
    if (apparent < 0)
        apparent = 0;
    int64_t delay = response_time - request_time;
    if (delay < 0)
        delay = 0;
    int64_t corrected = (rs->age != INT64_MIN ? rs->age : 0) + delay;
    return apparent > corrected ? apparent : corrected;
}

/* ---- Age (§5.1) ------------------------------------------------------------------------- */

int64_t sws_cc_age(const char *v, size_t n)
{
    size_t i = 0;
    while (i < n && (is_ows(v[i]) || v[i] == ','))
        i++; /* empty members are not members (RFC 9110 §5.6.1) */
    if (i == n)
        return SWS_CC_AGE_NONE;
    size_t s = i;
    while (i < n && v[i] != ',')
        i++;
    while (i > s && is_ows(v[i - 1]))
        i--;
    int64_t a = sws_cc_delta(v + s, i - s);
    return a < 0 ? SWS_CC_AGE_INVALID : a;
}

/* ---- targeted fields (RFC 9213) as Structured Fields Dictionaries ------------------------ */

/* The directives a targeted field carries for us: the delta ones first
 * (their bit in sws_tcc_t.bad is their index), then the flags. */
static const struct {
    const char *name;
    uint32_t flag;                /* 0: a delta directive */
    int string_ok;                /* a String value is allowed (field names) */
} tdir[] = {
    {"max-age", 0, 0},
    {"s-maxage", 0, 0},
    {"stale-while-revalidate", 0, 0},
    {"stale-if-error", 0, 0},
    {"no-store", SWS_CC_NO_STORE, 0},
    {"no-cache", SWS_CC_NO_CACHE, 1},
    {"private", SWS_CC_PRIVATE, 1},
    {"public", SWS_CC_PUBLIC, 0},
    {"must-revalidate", SWS_CC_MUST_REVALIDATE, 0},
    {"proxy-revalidate", SWS_CC_PROXY_REVALIDATE, 0},
    {"immutable", SWS_CC_IMMUTABLE, 0},
    {"no-transform", SWS_CC_NO_TRANSFORM, 0},
    {"must-understand", SWS_CC_MUST_UNDERSTAND, 0},
};

static int64_t *tdelta(sws_cc_t *cc, size_t i)
{
    switch (i) {
    case 0: return &cc->max_age;
    case 1: return &cc->s_maxage;
    case 2: return &cc->stale_while_revalidate;
    default: return &cc->stale_if_error;
    }
}

/* One member's last value so far (a later one replaces it, RFC 8941 §4.2.2). */
static void tcc_member(sws_tcc_t *t, const char *k, size_t kl, int kind, int64_t num)
{
    for (size_t i = 0; i < sizeof tdir / sizeof tdir[0]; i++) {
        if (strlen(tdir[i].name) != kl || memcmp(tdir[i].name, k, kl) != 0)
            continue;
        int ok;
        if (!tdir[i].flag) {
            ok = kind == SWS_SF_INT && num >= 0;
            *tdelta(&t->cc, i) = ok ? (num > SWS_CC_MAX_DELTA ? SWS_CC_MAX_DELTA : num) : SWS_CC_NONE;
        } else {
            ok = kind == SWS_SF_BOOL || (kind == SWS_SF_STR && tdir[i].string_ok);
            if (ok && (kind == SWS_SF_STR || num))
                t->cc.flags |= tdir[i].flag;
            else
                t->cc.flags &= ~tdir[i].flag;
        }
        if (ok)
            t->bad &= ~(1u << i);
        else
            t->bad |= 1u << i;
        return;
    }
}

void sws_tcc_init(sws_tcc_t *t)
{
    sws_cc_init(&t->cc);
    t->state = SWS_TCC_ABSENT;
    t->bad = 0;
}

static void tcc_member_cb(void *arg, const char *k, size_t kl, int kind, int64_t num)
{
    tcc_member(arg, k, kl, kind, num);
}

void sws_tcc_parse(sws_tcc_t *t, const char *v, size_t n)
{
    if (t->state == SWS_TCC_SYNTAX)
        return;
    if (t->state == SWS_TCC_ABSENT)
        t->state = SWS_TCC_EMPTY;
    /* the members go into a copy, kept only when the whole line parses */
    sws_tcc_t nt = *t;
    int members = sws_sf_dict(v, n, tcc_member_cb, &nt);
    if (members < 0) {
        t->state = SWS_TCC_SYNTAX;
    } else if (members > 0) { /* an empty line is an empty Dictionary */
        nt.state = SWS_TCC_MEMBERS;
        *t = nt;
    }
}

int sws_tcc_valid(const sws_tcc_t *t) { return t->state == SWS_TCC_MEMBERS && !t->bad; }

int sws_tcc_apply(const sws_tcc_t *list, size_t n, sws_cc_t *cc, sws_cc_resp_t *rs)
{
    for (size_t i = 0; i < n; i++) {
        if (!sws_tcc_valid(&list[i]))
            continue;
        *cc = list[i].cc;
        rs->expires = INT64_MIN;
        rs->expires_invalid = rs->expires_multiple = 0;
        return (int)i;
    }
    return -1;
}
