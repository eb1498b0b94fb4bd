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
 *    and 0 when a freshness directive was invalid.
 * The input's first 16 bytes, when present, give the dates and status for
 * the lifetime; the rest is the Cache-Control value.
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
}

#include "corpus_main.h"
