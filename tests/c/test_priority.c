/* priority.c: the Priority field of RFC 9218 §4 as an RFC 8941 Dictionary.
 * Every input ends at a PROT_NONE page (guard_place), so a one-byte
 * over-read crashes the test; every input is also tried cut at each byte,
 * where a prefix must never read past its end either. */
#define _GNU_SOURCE
#include "guard.h"
#include "scalws/priority.h"

/* want: the mask; u, i: the values it must store (-9: left alone). */
static void pri(const char *s, int want, int u_want, int i_want)
{
    int u = -9, i = -9;
    const char *v = guard_place(s, strlen(s));
    int got = sws_parse_priority(v, strlen(s), &u, &i);
    CHECK(got == want, "\"%s\": returned %d, want %d", s, got, want);
    CHECK(u == u_want && i == i_want, "\"%s\": u %d i %d, want u %d i %d", s, u, i, u_want,
          i_want);
    for (size_t n = 0; n < strlen(s); n++) { /* every prefix: no over-read, no crash */
        u = i = -9;
        v = guard_place(s, n);
        got = sws_parse_priority(v, n, &u, &i);
        CHECK(got >= -1 && got <= 3, "\"%.*s\": returned %d", (int)n, s, got);
    }
    t_end();
}

int main(void)
{
    /* RFC 9218 §4's own examples and the usual browser values */
    pri("u=5", SWS_PRI_U, 5, -9);
    pri("u=5, i", SWS_PRI_U | SWS_PRI_I, 5, 1);
    pri("i", SWS_PRI_I, -9, 1);
    pri("u=0", SWS_PRI_U, 0, -9);
    pri("u=7,i=?0", SWS_PRI_U | SWS_PRI_I, 7, 0);
    pri("i=?1", SWS_PRI_I, -9, 1);
    pri("", 0, -9, -9);
    { /* nghttp2 hands an empty PRIORITY_UPDATE value over as NULL, 0 */
        int u = -9, i = -9;
        CHECK(sws_parse_priority(NULL, 0, &u, &i) == 0 && u == -9 && i == -9, "NULL, 0");
    }
    pri("   ", 0, -9, -9);
    pri("  u=2", SWS_PRI_U, 2, -9);
    pri("u=2  ", SWS_PRI_U, 2, -9);
    pri("u=2 ,\ti", SWS_PRI_U | SWS_PRI_I, 2, 1);
    pri("u=03", SWS_PRI_U, 3, -9); /* leading zeros: still an Integer */
    /* the last value of a key counts, even when it is the wrong one */
    pri("u=1, u=4", SWS_PRI_U, 4, -9);
    pri("u=1, u=9", 0, -9, -9);
    pri("i, i=?0", SWS_PRI_I, -9, 0);
    /* out of range or of another type: that parameter is ignored (§4) */
    pri("u=8", 0, -9, -9);
    pri("u=-1", 0, -9, -9);
    pri("u=1.5, i", SWS_PRI_I, -9, 1);
    pri("u=\"1\"", 0, -9, -9);
    pri("u=?1", 0, -9, -9);
    pri("u, i=1", 0, -9, -9); /* u as Boolean true, i as an Integer */
    pri("u=a", 0, -9, -9);
    /* unknown members of every shape are skipped */
    pri("x=\"a, \\\"b\\\" u=1\", u=2", SWS_PRI_U, 2, -9);
    pri("x=(1 2 \"t\";a=1);b, i", SWS_PRI_I, -9, 1);
    pri("x=:aGVsbG8=:, y=tok/en:1, z=-1.25, *w, u=6", SWS_PRI_U, 6, -9);
    pri("u=4;p=?1;q=x, i;r", SWS_PRI_U | SWS_PRI_I, 4, 1); /* parameters on ours, dropped */
    pri("x=()", 0, -9, -9);
    /* not a Dictionary: the whole field is ignored (RFC 8941 §4.2) */
    pri("u=1,", -1, -9, -9);
    pri(",u=1", -1, -9, -9);
    pri("u=1 i", -1, -9, -9);
    pri("U=1", -1, -9, -9);
    pri("u=1;", -1, -9, -9);
    pri("u=", -1, -9, -9);
    pri("u=1, x=\"open", -1, -9, -9);
    pri("u=1, x=\"\\n\"", -1, -9, -9);
    pri("u=1, x=(1 2", -1, -9, -9);
    pri("u=1, x=(1,2)", -1, -9, -9);
    pri("u=1, x=:abc", -1, -9, -9);
    pri("u=1, x=?2", -1, -9, -9);
    pri("u=1, x=1.2345", -1, -9, -9);
    pri("u=1, x=1234567890123456", -1, -9, -9);
    pri("u=1, x=1.", -1, -9, -9);
    pri("u=1, x=-", -1, -9, -9);
    pri("u=1, x=\x7f", -1, -9, -9);
    pri("\tu=1", -1, -9, -9); /* only SP may lead */
    return t_summary();
}
