/* cachecc.c: the Age field (RFC 9111 §5.1) and RFC 9213's targeted fields
 * (CDN-Cache-Control and a cache's own) as RFC 8941 Dictionaries, and the
 * target list's choice over Cache-Control and Expires. Every input ends at
 * a PROT_NONE page (guard_place), so a one-byte over-read crashes the
 * test; every input is also tried cut at each byte, where a prefix must
 * never read past its end either. */
#define _GNU_SOURCE
#include "guard.h"
#include "scalws/cachecc.h"

#include <stdarg.h>

/* ---- Age ---------------------------------------------------------------------------- */

static void age(const char *s, int64_t want)
{
    const char *v = guard_place(s, strlen(s));
    int64_t got = sws_cc_age(v, strlen(s));
    CHECK(got == want, "Age \"%s\": %lld, want %lld", s, (long long)got, (long long)want);
    for (size_t n = 0; n < strlen(s); n++) {
        v = guard_place(s, n);
        got = sws_cc_age(v, n);
        CHECK(got >= SWS_CC_AGE_NONE && got <= SWS_CC_MAX_DELTA, "Age \"%.*s\": %lld", (int)n, s,
              (long long)got);
    }
    t_end();
}

/* Several Age lines, as the cache reads them (csrc/handlers/cache_tee.c,
 * tee_field): the first line with a member decides; INT64_MIN: absent. */
static void age_lines(int64_t want, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    int64_t a = SWS_CC_AGE_NONE;
    for (int i = 0; i < n; i++) {
        const char *s = va_arg(ap, const char *);
        if (a == SWS_CC_AGE_NONE)
            a = sws_cc_age(guard_place(s, strlen(s)), strlen(s));
    }
    va_end(ap);
    int64_t got = a >= 0 ? a : INT64_MIN;
    CHECK(got == want, "%d Age lines: %lld, want %lld", n, (long long)got, (long long)want);
    t_end();
}

/* ---- targeted fields ------------------------------------------------------------------- */

#define NONE SWS_CC_NONE

/* One field of its lines; checks validity, then (when valid) the flags
 * and max-age / s-maxage it gives. */
static void tcc_lines(const char *const *lines, int n, int valid, uint32_t flags, int64_t max_age,
                      int64_t s_maxage, const char *what)
{
    sws_tcc_t t;
    sws_tcc_init(&t);
    CHECK(!sws_tcc_valid(&t), "%s: an absent field is no policy", what);
    for (int i = 0; i < n; i++)
        sws_tcc_parse(&t, guard_place(lines[i], strlen(lines[i])), strlen(lines[i]));
    CHECK(sws_tcc_valid(&t) == valid, "%s: valid %d, want %d (state %d, bad %#x)", what,
          sws_tcc_valid(&t), valid, t.state, t.bad);
    if (valid && sws_tcc_valid(&t)) {
        CHECK(t.cc.flags == flags, "%s: flags %#x, want %#x", what, t.cc.flags, flags);
        CHECK(t.cc.max_age == max_age, "%s: max-age %lld, want %lld", what, (long long)t.cc.max_age,
              (long long)max_age);
        CHECK(t.cc.s_maxage == s_maxage, "%s: s-maxage %lld, want %lld", what,
              (long long)t.cc.s_maxage, (long long)s_maxage);
    }
    for (int i = 0; i < n; i++) /* every prefix of every line: no over-read */
        for (size_t k = 0; k < strlen(lines[i]); k++) {
            sws_tcc_t p;
            sws_tcc_init(&p);
            sws_tcc_parse(&p, guard_place(lines[i], k), k);
            CHECK(p.state != SWS_TCC_ABSENT, "%s: a line was seen", what);
            CHECK(p.cc.max_age == NONE || (p.cc.max_age >= 0 && p.cc.max_age <= SWS_CC_MAX_DELTA),
                  "%s: max-age out of range", what);
        }
    t_end();
}

static void tcc(const char *s, int valid, uint32_t flags, int64_t max_age)
{
    tcc_lines(&s, 1, valid, flags, max_age, NONE, s);
}

static void tcc_apply(void)
{
    const char *own_s = "max-age=5", *cdn_s = "no-store", *bad_s = "max-age=\"5\"";
    sws_tcc_t list[2];
    sws_cc_t cc;
    sws_cc_resp_t rs = {200, 0, 100, INT64_MIN, INT64_MIN, 1, 1};

    /* no targeted field: Cache-Control and Expires stand */
    sws_tcc_init(&list[0]);
    sws_tcc_init(&list[1]);
    sws_cc_init(&cc);
    sws_cc_parse(&cc, "max-age=600", 11);
    CHECK(sws_tcc_apply(list, 2, &cc, &rs) == -1, "none applies");
    CHECK(cc.max_age == 600 && rs.expires == 100 && rs.expires_invalid == 1, "left alone");

    /* CDN-Cache-Control alone: it replaces Cache-Control and Expires */
    sws_tcc_parse(&list[1], cdn_s, strlen(cdn_s));
    CHECK(sws_tcc_apply(list, 2, &cc, &rs) == 1, "CDN-Cache-Control applies");
    CHECK(cc.max_age == NONE && cc.flags == SWS_CC_NO_STORE, "its directives only");
    CHECK(rs.expires == INT64_MIN && !rs.expires_invalid && !rs.expires_multiple, "Expires ignored");

    /* our own field first in the list: it wins */
    sws_tcc_parse(&list[0], own_s, strlen(own_s));
    sws_cc_init(&cc);
    CHECK(sws_tcc_apply(list, 2, &cc, &rs) == 0, "the first of the target list applies");
    CHECK(cc.max_age == 5 && cc.flags == 0, "own field's directives");

    /* an invalid own field is skipped for the next one */
    sws_tcc_init(&list[0]);
    sws_tcc_parse(&list[0], bad_s, strlen(bad_s));
    CHECK(sws_tcc_apply(list, 2, &cc, &rs) == 1, "an invalid field is as if absent");

    /* an empty own field is skipped too (§2.1: a valid, non-empty value) */
    sws_tcc_init(&list[0]);
    sws_tcc_parse(&list[0], "", 0);
    sws_tcc_parse(&list[0], NULL, 0);
    CHECK(list[0].state == SWS_TCC_EMPTY, "empty");
    CHECK(sws_tcc_apply(list, 2, &cc, &rs) == 1, "an empty field is as if absent");
    CHECK(sws_tcc_apply(list, 1, &cc, &rs) == -1, "a list of one: CDN-Cache-Control not on it");
    t_end();
}

int main(void)
{
    /* Age: one non-negative integer */
    age("0", 0);
    age("60", 60);
    age("007", 7);
    age(" 60\t", 60);
    age("2147483647", 2147483647);
    /* huge values are 2^31 (§1.2.2) */
    age("2147483648", SWS_CC_MAX_DELTA);
    age("2147483649", SWS_CC_MAX_DELTA);
    age("99999999999999999999999999", SWS_CC_MAX_DELTA);
    /* a list: its first member, the rest discarded (§5.1) */
    age("0,7200", 0);
    age("7200,0", 7200);
    age("0, 0", 0);
    age("3600, 3600", 3600);
    age(" , ,5, x", 5); /* empty members are not members */
    /* an invalid first member: the field is ignored */
    age("abc", SWS_CC_AGE_INVALID);
    age("-1", SWS_CC_AGE_INVALID);
    age("-7200", SWS_CC_AGE_INVALID);
    age("+5", SWS_CC_AGE_INVALID);
    age("1.5", SWS_CC_AGE_INVALID);
    age("7200.0", SWS_CC_AGE_INVALID);
    age("1 2", SWS_CC_AGE_INVALID);
    age("10abc", SWS_CC_AGE_INVALID);
    age("7200;foo=bar", SWS_CC_AGE_INVALID);
    age("7200;foo=111", SWS_CC_AGE_INVALID);
    age("\"5\"", SWS_CC_AGE_INVALID);
    age("abc, 5", SWS_CC_AGE_INVALID);
    age("0x10", SWS_CC_AGE_INVALID);
    /* no member at all */
    age("", SWS_CC_AGE_NONE);
    age("  ", SWS_CC_AGE_NONE);
    age(" , ,\t,", SWS_CC_AGE_NONE);
    /* several lines: the first line's first member */
    age_lines(0, 2, "0", "7200");
    age_lines(7200, 2, "7200", "0");
    age_lines(0, 2, "0", "0");
    age_lines(INT64_MIN, 2, "abc", "5");
    age_lines(INT64_MIN, 2, "10abc", "0");
    age_lines(5, 2, "", "5");
    age_lines(5, 3, " , ", "5, 9", "7");
    age_lines(INT64_MIN, 1, "");

    /* targeted fields: what each directive gives */
    tcc("max-age=60", 1, 0, 60);
    tcc("max-age=0", 1, 0, 0);
    tcc("no-store", 1, SWS_CC_NO_STORE, NONE);
    tcc("no-cache", 1, SWS_CC_NO_CACHE, NONE);
    tcc("private", 1, SWS_CC_PRIVATE, NONE);
    tcc("private=\"set-cookie\"", 1, SWS_CC_PRIVATE, NONE);
    tcc("no-cache=\"set-cookie, x\"", 1, SWS_CC_NO_CACHE, NONE);
    tcc("max-age=60, no-store", 1, SWS_CC_NO_STORE, 60);
    tcc("public,must-revalidate,proxy-revalidate, immutable, no-transform, must-understand", 1,
        SWS_CC_PUBLIC | SWS_CC_MUST_REVALIDATE | SWS_CC_PROXY_REVALIDATE | SWS_CC_IMMUTABLE |
            SWS_CC_NO_TRANSFORM | SWS_CC_MUST_UNDERSTAND,
        NONE);
    {
        const char *l[] = {"s-maxage=10, stale-while-revalidate=5, stale-if-error=7"};
        tcc_lines(l, 1, 1, 0, NONE, 10, l[0]);
        sws_tcc_t t;
        sws_tcc_init(&t);
        sws_tcc_parse(&t, l[0], strlen(l[0]));
        CHECK(t.cc.stale_while_revalidate == 5 && t.cc.stale_if_error == 7, "stale-*");
        t_end();
    }
    /* RFC 9213 §3.1's example: a field with no directive of ours is a
     * policy (nothing from Cache-Control applies) */
    tcc("none", 1, 0, NONE);
    tcc("foobar, max-age=3600", 1, 0, 3600);
    tcc("max-age=99999999999", 1, 0, SWS_CC_MAX_DELTA);
    tcc("max-age=2147483648", 1, 0, SWS_CC_MAX_DELTA);
    /* parameters are ignored */
    tcc("max-age=60;foo=bar, no-store;x;y=?0", 1, SWS_CC_NO_STORE, 60);
    /* Boolean false: the directive is absent; the last value counts */
    tcc("no-store=?0", 1, 0, NONE);
    tcc("no-store, no-store=?0", 1, 0, NONE);
    tcc("no-store=?0, no-store", 1, SWS_CC_NO_STORE, NONE);
    tcc("max-age=5, max-age=9", 1, 0, 9);
    tcc("max-age=\"x\", max-age=5", 1, 0, 5);
    /* request-only directives and unknown keys, any type: ignored */
    tcc("max-stale=\"x\", min-fresh=?1, only-if-cached=1.5, max-age=3", 1, 0, 3);
    tcc("x=(1 2 \"t\";a=1);b, y=:aGVsbG8=:, z=-1.25, *w, v=tok/en:1, max-age=4", 1, 0, 4);
    /* a directive of ours with the wrong type: the field is ignored */
    tcc("max-age=\"10000\"", 0, 0, NONE);
    tcc("max-age=1.5", 0, 0, NONE);
    tcc("max-age=-1", 0, 0, NONE);
    tcc("max-age", 0, 0, NONE);
    tcc("max-age=?1", 0, 0, NONE);
    tcc("max-age=abc", 0, 0, NONE);
    tcc("max-age=(1)", 0, 0, NONE);
    tcc("max-age=5, max-age=\"x\"", 0, 0, NONE);
    tcc("no-store=1", 0, 0, NONE);
    tcc("no-store=\"x\"", 0, 0, NONE);
    tcc("public=\"x\"", 0, 0, NONE);
    tcc("private=tok", 0, 0, NONE);
    tcc("s-maxage=1.0", 0, 0, NONE);
    /* not a Dictionary: the field is ignored */
    tcc("max-age =100", 0, 0, NONE);
    tcc("max-age= 100", 0, 0, NONE);
    tcc("MaX-aGe=3600", 0, 0, NONE);
    tcc("max-age=10000, &&&&&", 0, 0, NONE);
    tcc("max-age=1,", 0, 0, NONE);
    tcc(",max-age=1", 0, 0, NONE);
    tcc("max-age=1 no-store", 0, 0, NONE);
    tcc("max-age=1;", 0, 0, NONE);
    tcc("\tmax-age=1", 0, 0, NONE);
    tcc("max-age=1234567890123456", 0, 0, NONE);
    tcc("max-age=1, x=\"open", 0, 0, NONE);
    tcc("max-age=1, x=1.2345", 0, 0, NONE);
    tcc("max-age=1, x=?2", 0, 0, NONE);
    tcc("max-age=1, x=:abc", 0, 0, NONE);
    tcc("max-age=1, x=\x7f", 0, 0, NONE);
    /* empty: no policy */
    tcc("", 0, 0, NONE);
    tcc("   ", 0, 0, NONE);
    /* several lines: one Dictionary */
    {
        const char *a[] = {"max-age=1", "max-age=2"};
        tcc_lines(a, 2, 1, 0, 2, NONE, "two lines, the last value");
        const char *b[] = {"", "no-store"};
        tcc_lines(b, 2, 1, SWS_CC_NO_STORE, NONE, NONE, "an empty line, then members");
        const char *c[] = {"max-age=1", "&&"};
        tcc_lines(c, 2, 0, 0, NONE, NONE, "a line that is not a Dictionary");
        const char *d[] = {"max-age=\"x\"", "max-age=5"};
        tcc_lines(d, 2, 1, 0, 5, NONE, "a wrong type replaced on a later line");
        const char *e[] = {"&&", "max-age=5"};
        tcc_lines(e, 2, 0, 0, NONE, NONE, "a syntax error stays");
        const char *f[] = {"no-store", "no-store=?0, max-age=3"};
        tcc_lines(f, 2, 1, 0, 3, NONE, "a flag cleared on a later line");
    }
    tcc_apply();
    return t_summary();
}
