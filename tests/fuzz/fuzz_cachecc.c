/*
 * fuzz_cachecc.c — fuzz driver for csrc/http/cachecc.c (Cache-Control and
 * RFC 9111's freshness arithmetic). Besides the sanitizers it checks the
 * contract of scalws/cachecc.h:
 *  - a value parsed whole equals the same value parsed as two lines cut at
 *    any comma (sws_cc_parse accumulates: a field sent on several lines is
 *    one list, RFC 9110 5.3);
 *  - delta directives are SWS_CC_NONE or in [0, SWS_CC_MAX_DELTA];
 *  - sws_cc_delta agrees with a reference (all digits, clamped);
 *  - the lifetime is -1 or in [0, SWS_CC_MAX_DELTA] whatever the dates,
 *    and 0 when a freshness directive was invalid;
 *  - sws_cc_age agrees with a reference (the first non-empty member, all
 *    digits, clamped), and a value cut into two lines at any comma gives
 *    the first line's answer unless that line has no member;
 *  - a targeted field (sws_tcc_parse) is in a defined state with its
 *    deltas in range, and when it is valid, or when its two halves cut at
 *    a comma outside a String are, it parses the same as one line and as
 *    two; sws_tcc_apply takes it exactly when it is valid.
 * The input's first 16 bytes, when present, give the dates and status for
 * the lifetime; the rest is the value, read as Cache-Control, as Age and
 * as a targeted field.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include "scalws/cachecc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#ifdef FUZZING
#define FAIL(msg) __builtin_trap()
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

static int same(const sws_cc_t *a, const sws_cc_t *b)
{
    return a->flags == b->flags && a->max_age == b->max_age && a->s_maxage == b->s_maxage &&
           a->stale_while_revalidate == b->stale_while_revalidate &&
           a->stale_if_error == b->stale_if_error && a->max_stale == b->max_stale &&
           a->min_fresh == b->min_fresh;
}

static int64_t ref_delta(const uint8_t *s, size_t n)
{
    if (!n)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v > SWS_CC_MAX_DELTA)
            v = SWS_CC_MAX_DELTA;
    }
    return v;
}

static int in_range(int64_t v) { return v == SWS_CC_NONE || (v >= 0 && v <= SWS_CC_MAX_DELTA); }

static int is_ows(char c) { return c == ' ' || c == '\t'; }

/* Is p[i] inside a quoted-string that is a directive's value? The grammar
 * walked as the parser walks it (directive name, OWS, '=', OWS, then a
 * quoted-string or a token), without its meaning. */
static int in_quotes(const char *p, size_t n, size_t at)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_ows(p[i]) || p[i] == ','))
            i++;
        while (i < n && p[i] != '=' && p[i] != ',' && !is_ows(p[i]))
            i++;
        while (i < n && is_ows(p[i]))
            i++;
        if (i < n && p[i] == '=') {
            i++;
            while (i < n && is_ows(p[i]))
                i++;
            if (i < n && p[i] == '"') {
                size_t open = i++;
                while (i < n && p[i] != '"') {
                    if (p[i] == '\\' && i + 1 < n)
                        i++;
                    i++;
                }
                if (at > open && at <= i)
                    return 1;
                if (i < n)
                    i++;
            }
        }
        while (i < n && p[i] != ',')
            i++;
    }
    return 0;
}

static int64_t ref_age(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && (is_ows(p[i]) || p[i] == ','))
        i++;
    if (i == n)
        return SWS_CC_AGE_NONE;
    size_t s = i, e;
    while (i < n && p[i] != ',')
        i++;
    e = i;
    while (e > s && is_ows(p[e - 1]))
        e--;
    int64_t v = ref_delta((const uint8_t *)p + s, e - s);
    return v < 0 ? SWS_CC_AGE_INVALID : v;
}

static void check_age(const char *p, size_t n)
{
    int64_t whole = sws_cc_age(p, n);
    if (whole != ref_age(p, n))
        FAIL("sws_cc_age disagrees with the reference");
    for (size_t i = 0; i < n; i++) {
        if (p[i] != ',')
            continue;
        int64_t a = sws_cc_age(p, i);
        if (a == SWS_CC_AGE_NONE)
            a = sws_cc_age(p + i + 1, n - i - 1);
        if (a != whole)
            FAIL("an Age on two lines cut at a comma differs from one line");
    }
}

/* Is p[at] inside an RFC 8941 String, walking the quotes from the start? */
static int in_sf_string(const char *p, size_t at)
{
    int in = 0;
    for (size_t i = 0; i < at; i++) {
        if (in && p[i] == '\\')
            i++;
        else if (p[i] == '"')
            in = !in;
    }
    return in;
}

static int same_tcc(const sws_tcc_t *a, const sws_tcc_t *b)
{
    return a->state == b->state && a->bad == b->bad && same(&a->cc, &b->cc);
}

/* A field line's value as an HTTP parser hands it over: OWS trimmed. */
static void trim(const char **p, size_t *n)
{
    while (*n && is_ows(**p))
        (*p)++, (*n)--;
    while (*n && is_ows((*p)[*n - 1]))
        (*n)--;
}

static void check_targeted(const char *p, size_t n)
{
    trim(&p, &n);
    sws_tcc_t whole;
    sws_tcc_init(&whole);
    sws_tcc_parse(&whole, p, n);
    if (whole.state != SWS_TCC_EMPTY && whole.state != SWS_TCC_MEMBERS &&
        whole.state != SWS_TCC_SYNTAX)
        FAIL("a targeted field in no state");
    if (!in_range(whole.cc.max_age) || !in_range(whole.cc.s_maxage) ||
        !in_range(whole.cc.stale_while_revalidate) || !in_range(whole.cc.stale_if_error) ||
        whole.cc.max_stale != SWS_CC_NONE || whole.cc.min_fresh != SWS_CC_NONE ||
        (whole.cc.flags & (SWS_CC_ONLY_IF_CACHED | SWS_CC_MAX_STALE_ANY | SWS_CC_INVALID)))
        FAIL("a targeted field gave a value out of range or a request directive");
    int valid = sws_tcc_valid(&whole);
    if (valid != (whole.state == SWS_TCC_MEMBERS && !whole.bad))
        FAIL("sws_tcc_valid");
    sws_cc_t cc;
    sws_cc_init(&cc);
    cc.max_age = 7;
    sws_cc_resp_t rs = {200, 0, 5, INT64_MIN, INT64_MIN, 1, 1};
    int k = sws_tcc_apply(&whole, 1, &cc, &rs);
    if (valid ? k != 0 || !same(&cc, &whole.cc) || rs.expires != INT64_MIN || rs.expires_invalid
              : k != -1 || cc.max_age != 7 || rs.expires != 5 || !rs.expires_invalid)
        FAIL("sws_tcc_apply takes the field exactly when it is valid");
    for (size_t i = 0; i < n; i++) {
        if (p[i] != ',' || in_sf_string(p, i))
            continue;
        const char *a = p, *b = p + i + 1;
        size_t an = i, bn = n - i - 1;
        trim(&a, &an);
        trim(&b, &bn);
        if (!an || !bn)
            continue; /* an empty line is no member; one comma too many is */
        sws_tcc_t two;
        sws_tcc_init(&two);
        sws_tcc_parse(&two, a, an);
        sws_tcc_parse(&two, b, bn);
        if ((valid || sws_tcc_valid(&two)) && !same_tcc(&whole, &two))
            FAIL("a targeted field on two lines cut at a comma differs from one line");
    }
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    int64_t d = sws_cc_delta((const char *)data, size < 24 ? size : 24);
    if (d != ref_delta(data, size < 24 ? size : 24))
        FAIL("sws_cc_delta disagrees with the reference");
    sws_cc_resp_t rs = {200, INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, 0, 0};
    if (size >= 16) {
        int32_t w[4];
        memcpy(w, data, 16);
        rs.status = 100 + (int)((uint32_t)w[0] % 500);
        rs.date = w[1];
        rs.expires = w[2] & 1 ? INT64_MIN : w[2];
        rs.last_modified = w[3] & 1 ? INT64_MIN : w[3];
        rs.expires_invalid = (w[0] >> 16) & 1;
        data += 16;
        size -= 16;
    }
    const char *p = (const char *)data;
    sws_cc_t whole;
    sws_cc_init(&whole);
    sws_cc_parse(&whole, p, size);
    if (!in_range(whole.max_age) || !in_range(whole.s_maxage) ||
        !in_range(whole.stale_while_revalidate) || !in_range(whole.stale_if_error) ||
        !in_range(whole.max_stale) || !in_range(whole.min_fresh))
        FAIL("a delta out of range");
    for (size_t i = 0; i < size; i++) {
        if (p[i] != ',' || in_quotes(p, size, i))
            continue;
        sws_cc_t two;
        sws_cc_init(&two);
        sws_cc_parse(&two, p, i);
        sws_cc_parse(&two, p + i + 1, size - i - 1);
        if (!same(&whole, &two))
            FAIL("two lines cut at a comma parse differently from one");
    }
    int64_t l = sws_cc_lifetime(&whole, &rs, sws_cc_heuristic_status(rs.status), -1);
    if (l < -1 || l > SWS_CC_MAX_DELTA)
        FAIL("lifetime out of range");
    if ((whole.flags & SWS_CC_INVALID) && l != 0)
        FAIL("an invalid freshness directive must make it stale");
    int64_t age = sws_cc_initial_age(&rs, rs.date, rs.date + 5);
    if (age < 0)
        FAIL("negative age");
    check_age(p, size);
    check_targeted(p, size);
}

#include "corpus_main.h"
