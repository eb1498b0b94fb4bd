/* httpcond.c: HTTP-date, preconditions, If-Range, Range, Content-Range and
 * Accept-Encoding. Every input ends at a PROT_NONE page, so a one-byte
 * over-read crashes the test: single inputs through guard_place(), and the
 * functions that take several fields at once through slot_place(), which
 * gives each field its own guarded area. Outputs are sized exactly (malloc
 * for sws_range_t arrays, a buffer ending at the guard page for
 * Content-Range), so an over-write is caught too. */
#define _GNU_SOURCE
#include "guard.h"
#include "scalws/httpcond.h"

#include <inttypes.h>
#include <time.h>

/* ---- several guarded inputs at once ----------------------------------- */

#define SLOTS    6
#define SLOT_MAX (64u << 10)

static char *slot_end_[SLOTS];

/* Like guard_place(), with one guard area per slot: the pointers of
 * different slots stay valid together. NULL stays NULL. */
static const char *slot_place(int slot, const char *s, size_t len)
{
    if (s == NULL)
        return NULL;
    if (slot_end_[slot] == NULL) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        char *base = mmap(NULL, SLOT_MAX + page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED || mprotect(base + SLOT_MAX, page, PROT_NONE) != 0) {
            perror("slot mmap");
            exit(2);
        }
        slot_end_[slot] = base + SLOT_MAX;
    }
    if (len > SLOT_MAX) {
        fprintf(stderr, "slot_place: %zu bytes is too many\n", len);
        exit(2);
    }
    memmove(slot_end_[slot] - len, s, len);
    return slot_end_[slot] - len;
}

static size_t slen(const char *s) { return s ? strlen(s) : 0; }

/* ---- HTTP-date -------------------------------------------------------- */

static void date_ok(const char *s, int64_t want)
{
    size_t len = strlen(s);
    int64_t t = 12345;
    int rc = sws_parse_http_date(guard_place(s, len), len, &t);
    CHECK(rc == 0 && t == want, "\"%s\" -> rc %d t %" PRId64 " (want %" PRId64 ")", s, rc, t,
          want);
    t_end();
}

static void date_bad_n(const char *s, size_t len)
{
    int64_t t = 12345;
    int rc = sws_parse_http_date(guard_place(s, len), len, &t);
    CHECK(rc == -1 && t == 12345, "\"%.*s\" -> rc %d t %" PRId64 " (want -1, untouched)",
          (int)len, s, rc, t);
    t_end();
}

static void date_bad(const char *s) { date_bad_n(s, strlen(s)); }

/* Every proper prefix of a valid date is invalid (and read in bounds). */
static void date_prefixes_bad(const char *s)
{
    size_t len = strlen(s);
    for (size_t n = 0; n < len; ++n) {
        int64_t t = 7;
        int rc = sws_parse_http_date(guard_place(s, n), n, &t);
        CHECK(rc == -1 && t == 7, "prefix %zu of \"%s\" -> %d", n, s, rc);
    }
    t_end();
}

/* The three forms of each time, written by strftime (C locale), parse back
 * to it. RFC 850 only inside its 1970-2069 window. */
static void date_round_trips(void)
{
    static const char *const fmt[3] = {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT",
                                       "%a %b %e %H:%M:%S %Y"};
    uint64_t x = 88172645463325252ull; /* xorshift64: reproducible */
    int64_t t;
    char buf[64];

    for (int i = 0; i < 20000; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* 0001-01-01 .. 9999-12-31, plus a dense stretch around 1970-2070 */
        int64_t want = i & 1 ? (int64_t)(x % 3155760000ull)
                             : (int64_t)(x % 315537897600ull) - 62135596800ll;
        time_t tt = (time_t)want;
        struct tm tm;
        gmtime_r(&tt, &tm);
        for (int f = 0; f < 3; ++f) {
            if (f == 1 && (tm.tm_year < 70 || tm.tm_year > 169))
                continue;
            size_t len = strftime(buf, sizeof buf, fmt[f], &tm);
            if (f != 1 && tm.tm_year + 1900 < 1000)
                continue; /* %Y prints no leading zeros; the grammar wants 4DIGIT */
            t = 0;
            int rc = sws_parse_http_date(guard_place(buf, len), len, &t);
            CHECK(rc == 0 && t == want, "\"%s\" -> rc %d t %" PRId64 " (want %" PRId64 ")", buf,
                  rc, t, want);
        }
    }
    t_end();
}

static void test_dates(void)
{
    /* the three forms of RFC 9110 §5.6.7's example */
    date_ok("Sun, 06 Nov 1994 08:49:37 GMT", 784111777);
    date_ok("Sunday, 06-Nov-94 08:49:37 GMT", 784111777);
    date_ok("Sun Nov  6 08:49:37 1994", 784111777);
    date_ok("Sun Nov 06 08:49:37 1994", 784111777); /* 2DIGIT day is also asctime */
    date_prefixes_bad("Sun, 06 Nov 1994 08:49:37 GMT");
    date_prefixes_bad("Wednesday, 09-Nov-94 08:49:37 GMT");
    date_prefixes_bad("Sun Nov  6 08:49:37 1994");

    /* epoch, before it, 2^31, the ends of the 4-digit years */
    date_ok("Thu, 01 Jan 1970 00:00:00 GMT", 0);
    date_ok("Wed, 31 Dec 1969 23:59:59 GMT", -1);
    date_ok("Tue, 19 Jan 2038 03:14:08 GMT", 2147483648ll);
    date_ok("Fri, 31 Dec 9999 23:59:59 GMT", 253402300799ll);
    date_ok("Sat, 01 Jan 0000 00:00:00 GMT", -62167219200ll);
    date_ok("Thu Jan  1 00:00:00 1970", 0);
    date_ok("Fri Dec 31 23:59:59 9999", 253402300799ll);

    /* leap years and the leap second */
    date_ok("Tue, 29 Feb 2000 00:00:00 GMT", 951782400);
    date_ok("Thu, 29 Feb 2024 12:00:00 GMT", 1709208000);
    date_ok("Wed, 31 Dec 2008 23:59:60 GMT", 1230768000); /* = 2009-01-01 00:00:00 */
    date_bad("Thu, 29 Feb 1900 00:00:00 GMT");
    date_bad("Wed, 29 Feb 2023 00:00:00 GMT");
    date_bad("Thu Feb 29 00:00:00 2100");
    date_bad("Thursday, 29-Feb-01 00:00:00 GMT");

    /* RFC 850 two-digit years: 70-99 → 19xx, 00-69 → 20xx */
    date_ok("Thursday, 01-Jan-70 00:00:00 GMT", 0);
    date_ok("Friday, 31-Dec-99 23:59:59 GMT", 946684799);
    date_ok("Saturday, 01-Jan-00 00:00:00 GMT", 946684800);
    date_ok("Tuesday, 31-Dec-69 23:59:59 GMT", 3155759999ll);
    date_ok("Monday, 06-Nov-94 08:49:37 GMT", 784111777); /* weekday not cross-checked */
    date_ok("Mon, 06 Nov 1994 08:49:37 GMT", 784111777);

    /* invalid day, month, time */
    date_bad("Sun, 00 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 31 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 32 Jan 1994 08:49:37 GMT");
    date_bad("Sun, 06 Xyz 1994 08:49:37 GMT");
    date_bad("Sun, 06 nov 1994 08:49:37 GMT");
    date_bad("Sun, 06 NOV 1994 08:49:37 GMT");
    date_bad("Sun, 06 Nov 1994 24:00:00 GMT");
    date_bad("Sun, 06 Nov 1994 23:60:00 GMT");
    date_bad("Sun, 06 Nov 1994 23:59:61 GMT");
    date_bad("Sun, 06 Nov 1994 08-49-37 GMT");
    date_bad("Sun, 06 Nov 1994 08:4a:37 GMT");
    date_bad("Sun, 06 Nov 1994 8:49:37  GMT");
    date_bad("Sun, 06 Nov 19a4 08:49:37 GMT");
    date_bad("Sun Nov  0 08:49:37 1994");
    date_bad("Sun Nov 31 08:49:37 1994");
    date_bad("Sunday, 06-Nov-9x 08:49:37 GMT");
    date_bad("Sunday, 06-Nov-94 25:49:37 GMT");

    /* names, separators, zone, extra bytes */
    date_bad("sun, 06 Nov 1994 08:49:37 GMT");
    date_bad("Xyz, 06 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 06 Nov 1994 08:49:37 gmt");
    date_bad("Sun, 06 Nov 1994 08:49:37 UTC");
    date_bad("Sun, 06 Nov 1994 08:49:37 +0000");
    date_bad("Sun, 6 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 06 Nov 94 08:49:37 GMT");
    date_bad("Sun,  06 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 06-Nov-1994 08:49:37 GMT");
    date_bad("Sun,06 Nov 1994 08:49:37 GMT ");
    date_bad(" Sun, 06 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 06 Nov 1994 08:49:37 GMT ");
    date_bad("Sun, 06 Nov 1994 08:49:37 GMT\r");
    date_bad("Sun, 06 Nov 1994 08:49:37 GMTX");
    date_bad("Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT");
    date_bad_n("Sun, 06 Nov 1994\00008:49:37 GMT", 29);
    date_bad("Sun, 06 Nov 1994 08:49:37\tGMT");
    date_bad("Sunday, 06 Nov 1994 08:49:37 GMT");
    date_bad("Sun, 06-Nov-94 08:49:37 GMT");
    date_bad("Sunday,06-Nov-94 08:49:37 GMT ");
    date_bad("Sunday, 06-Nov-94 08:49:37 UTC");
    date_bad("Sundae, 06-Nov-94 08:49:37 GMT");
    date_bad("Sunday, 6-Nov-94 08:49:37 GMT ");
    date_bad("Sun Nov 6 08:49:37 1994");
    date_bad("Sun Nov  6 08:49:37 94");
    date_bad("Sun Nov  6 08:49:37 1994 GMT");
    date_bad("Sun Nov   6 08:49:37 1994");
    date_bad("Sun  Nov 6 08:49:37 1994");
    date_bad("Sun Nov 6  08:49:37 1994");
    date_bad("Sun Nov  6 08:49:37 19 4");
    date_bad("");
    date_bad("Sun");
    date_bad("Sun,");
    date_bad("1994-11-06T08:49:37Z");
    date_bad("784111777");

    date_round_trips();
}

/* ---- preconditions ---------------------------------------------------- */

#define ETAG "\"5f1a-3e8-1a2b\""
#define LM   784111777 /* Sun, 06 Nov 1994 08:49:37 GMT */
#define D_EQ     "Sun, 06 Nov 1994 08:49:37 GMT"
#define D_BEFORE "Sun, 06 Nov 1994 08:49:36 GMT"
#define D_AFTER  "Sun, 06 Nov 1994 08:49:38 GMT"

/* Evaluates with each field (and the representation's etag) in its own
 * guarded slot; NULL means the field is absent. */
static void cond_full(const char *im, const char *ius, const char *inm, const char *ims,
                      const char *etag, int64_t lm, int get_or_head, int want)
{
    sws_cond_fields_t f;
    f.if_match = slot_place(0, im, slen(im));
    f.if_match_len = slen(im);
    f.if_unmodified_since = slot_place(1, ius, slen(ius));
    f.if_unmodified_since_len = slen(ius);
    f.if_none_match = slot_place(2, inm, slen(inm));
    f.if_none_match_len = slen(inm);
    f.if_modified_since = slot_place(3, ims, slen(ims));
    f.if_modified_since_len = slen(ims);
    int rc = sws_evaluate_preconditions(&f, slot_place(4, etag, slen(etag)), slen(etag), lm,
                                        get_or_head);
    CHECK(rc == want,
          "IM %s | IUS %s | INM %s | IMS %s | etag %s lm %" PRId64 " %s -> %d (want %d)",
          im ? im : "-", ius ? ius : "-", inm ? inm : "-", ims ? ims : "-", etag ? etag : "-",
          lm, get_or_head ? "GET" : "POST", rc, want);
    t_end();
}

/* The usual representation: strong ETAG, Last-Modified LM, GET. */
static void cond(const char *im, const char *ius, const char *inm, const char *ims, int want)
{
    cond_full(im, ius, inm, ims, ETAG, LM, 1, want);
}

static void cond_post(const char *im, const char *ius, const char *inm, const char *ims, int want)
{
    cond_full(im, ius, inm, ims, ETAG, LM, 0, want);
}

static void test_preconditions(void)
{
    const int P = SWS_COND_PROCEED, NM = SWS_COND_NOT_MODIFIED,
              PF = SWS_COND_PRECONDITION_FAILED;

    cond(NULL, NULL, NULL, NULL, P);
    cond_post(NULL, NULL, NULL, NULL, P);

    /* If-Match: strong comparison, "*", lists, malformed → false */
    cond("*", NULL, NULL, NULL, P);
    cond(ETAG, NULL, NULL, NULL, P);
    cond_post(ETAG, NULL, NULL, NULL, P);
    cond("\"x\", " ETAG, NULL, NULL, NULL, P);
    cond("\"x\",\t" ETAG " , \"y\"", NULL, NULL, NULL, P);
    cond(",, " ETAG ",,", NULL, NULL, NULL, P);
    cond("W/" ETAG, NULL, NULL, NULL, PF);
    cond("\"x\"", NULL, NULL, NULL, PF);
    cond_post("\"x\"", NULL, NULL, NULL, PF);
    cond("\"5f1a-3e8-1a2B\"", NULL, NULL, NULL, PF); /* opaque-tags are case-sensitive */
    cond("5f1a-3e8-1a2b", NULL, NULL, NULL, PF);
    cond("", NULL, NULL, NULL, PF);
    cond(" , ", NULL, NULL, NULL, PF);
    cond(ETAG ", \"x", NULL, NULL, NULL, PF);
    cond(ETAG " \"x\"", NULL, NULL, NULL, PF);
    cond(ETAG ", garbage", NULL, NULL, NULL, PF);
    cond(ETAG ETAG, NULL, NULL, NULL, PF);
    cond("*, " ETAG, NULL, NULL, NULL, PF);
    cond("* *", NULL, NULL, NULL, PF);
    cond("**", NULL, NULL, NULL, PF);
    cond("w/" ETAG, NULL, NULL, NULL, PF);
    cond("\"a b\", " ETAG, NULL, NULL, NULL, PF);
    cond("\"", NULL, NULL, NULL, PF);
    cond("W/", NULL, NULL, NULL, PF);
    cond("W", NULL, NULL, NULL, PF);
    cond_full("W/\"a\"", NULL, NULL, NULL, "W/\"a\"", LM, 1, PF); /* weak never strong-equal */
    cond_full("\"a\"", NULL, NULL, NULL, "W/\"a\"", LM, 1, PF);
    cond_full("*", NULL, NULL, NULL, "W/\"a\"", LM, 1, P);
    cond_full("*", NULL, NULL, NULL, NULL, LM, 1, P);
    cond_full(ETAG, NULL, NULL, NULL, NULL, LM, 1, PF);
    cond_full(ETAG, NULL, NULL, NULL, "", LM, 1, PF);
    cond_full("\"\"", NULL, NULL, NULL, "\"\"", LM, 1, P); /* empty opaque-tag */
    cond_full("\"\x80\xff!\"", NULL, NULL, NULL, "\"\x80\xff!\"", LM, 1, P); /* obs-text */
    cond_full(ETAG, NULL, NULL, NULL, ETAG " ", LM, 1, PF); /* malformed own tag: none */

    /* If-Unmodified-Since: only without If-Match; invalid dates ignored */
    cond(NULL, D_BEFORE, NULL, NULL, PF);
    cond_post(NULL, D_BEFORE, NULL, NULL, PF);
    cond(NULL, D_EQ, NULL, NULL, P);
    cond(NULL, D_AFTER, NULL, NULL, P);
    cond(NULL, "Sunday, 06-Nov-94 08:49:36 GMT", NULL, NULL, PF);
    cond(NULL, "Sun Nov  6 08:49:36 1994", NULL, NULL, PF);
    cond(NULL, "Thu, 01 Jan 1970 00:00:00 GMT", NULL, NULL, PF);
    cond(NULL, "yesterday", NULL, NULL, P);
    cond(NULL, "", NULL, NULL, P);
    cond(NULL, D_BEFORE " ", NULL, NULL, P);
    cond(NULL, D_BEFORE ", " D_BEFORE, NULL, NULL, P); /* a joined list is no date */
    cond(ETAG, D_BEFORE, NULL, NULL, P);                /* If-Match wins */
    cond("*", D_BEFORE, NULL, NULL, P);
    cond("\"x\"", D_AFTER, NULL, NULL, PF);
    cond_full(NULL, D_BEFORE, NULL, NULL, ETAG, SWS_NO_LAST_MODIFIED, 1, P);

    /* If-None-Match: weak comparison; 304 for GET/HEAD, 412 otherwise */
    cond(NULL, NULL, ETAG, NULL, NM);
    cond_post(NULL, NULL, ETAG, NULL, PF);
    cond(NULL, NULL, "W/" ETAG, NULL, NM);
    cond_post(NULL, NULL, "W/" ETAG, NULL, PF);
    cond(NULL, NULL, "*", NULL, NM);
    cond(NULL, NULL, " * ", NULL, NM);
    cond_post(NULL, NULL, "*", NULL, PF);
    cond(NULL, NULL, "\"x\"", NULL, P);
    cond_post(NULL, NULL, "\"x\"", NULL, P);
    cond(NULL, NULL, "  \"a\" ,  W/" ETAG "  ,,", NULL, NM);
    cond(NULL, NULL, "\t\"a\",\t\"b\"\t", NULL, P);
    cond(NULL, NULL, "", NULL, P);
    cond_full(NULL, NULL, "\"a\"", NULL, "W/\"a\"", LM, 1, NM);
    cond_full(NULL, NULL, "W/\"a\"", NULL, "W/\"a\"", LM, 1, NM);
    cond_full(NULL, NULL, "\"a\"", NULL, NULL, LM, 1, P);
    cond_full(NULL, NULL, "*", NULL, NULL, LM, 1, NM);
    /* malformed If-None-Match: matches nothing, If-Modified-Since still ignored */
    cond(NULL, NULL, ETAG ", \"x", NULL, P);
    cond(NULL, NULL, ETAG ", x", D_AFTER, P);
    cond(NULL, NULL, "*, " ETAG, NULL, P);
    cond(NULL, NULL, "w/" ETAG, NULL, P);
    cond(NULL, NULL, ETAG ";", NULL, P);
    cond_post(NULL, NULL, ETAG " x", NULL, P);

    /* If-Modified-Since: GET/HEAD only, without If-None-Match */
    cond(NULL, NULL, NULL, D_EQ, NM);
    cond(NULL, NULL, NULL, D_AFTER, NM);
    cond(NULL, NULL, NULL, D_BEFORE, P);
    cond(NULL, NULL, NULL, "Sunday, 06-Nov-94 08:49:37 GMT", NM);
    cond(NULL, NULL, NULL, "Sun Nov  6 08:49:37 1994", NM);
    cond(NULL, NULL, NULL, "Fri, 31 Dec 9999 23:59:59 GMT", NM);
    cond_post(NULL, NULL, NULL, D_EQ, P);
    cond(NULL, NULL, NULL, "not a date", P);
    cond(NULL, NULL, NULL, D_EQ ", " D_EQ, P);
    cond(NULL, NULL, NULL, D_EQ "; length=3", P);
    cond(NULL, NULL, NULL, "Sun, 31 Nov 1994 08:49:37 GMT", P);
    cond(NULL, NULL, "\"x\"", D_EQ, P); /* If-None-Match present: IMS ignored */
    cond(NULL, NULL, "", D_AFTER, P);
    cond_full(NULL, NULL, NULL, D_EQ, ETAG, SWS_NO_LAST_MODIFIED, 1, P);
    cond_full(NULL, NULL, NULL, "Wed, 31 Dec 1969 23:59:59 GMT", ETAG, -1, 1, NM);
    cond_full(NULL, NULL, NULL, "Wed, 31 Dec 1969 23:59:59 GMT", ETAG, 0, 1, P);

    /* §13.2.2 order: 412 from step 1 or 2 before 304 from step 3 or 4 */
    cond("\"x\"", NULL, ETAG, NULL, PF);
    cond("\"x\"", NULL, NULL, D_EQ, PF);
    cond(NULL, D_BEFORE, ETAG, NULL, PF);
    cond(NULL, D_BEFORE, NULL, D_EQ, PF);
    cond(ETAG, NULL, ETAG, NULL, NM);
    cond(ETAG, D_BEFORE, NULL, D_EQ, NM);
    cond("*", NULL, "*", NULL, NM);
    cond_post("*", NULL, "*", NULL, PF);
    cond(ETAG, D_AFTER, "\"x\"", D_EQ, P);
    cond(ETAG, D_EQ, ETAG, D_EQ, NM);
}

/* ---- If-Range --------------------------------------------------------- */

static void ifr_full(const char *v, const char *etag, int64_t lm, int want)
{
    int rc = sws_if_range_matches(slot_place(0, v, slen(v)), slen(v),
                                  slot_place(1, etag, slen(etag)), slen(etag), lm);
    CHECK(rc == want, "If-Range %s, etag %s lm %" PRId64 " -> %d (want %d)", v ? v : "-",
          etag ? etag : "-", lm, rc, want);
    t_end();
}

static void ifr(const char *v, int want) { ifr_full(v, ETAG, LM, want); }

static void test_if_range(void)
{
    ifr(NULL, 1);
    ifr(ETAG, 1);
    ifr("W/" ETAG, 0);
    ifr("\"x\"", 0);
    ifr("\"5f1a-3e8-1a2b", 0);
    ifr(ETAG " ", 0);
    ifr(ETAG ", " ETAG, 0);
    ifr(ETAG "x", 0);
    ifr("\"", 0);
    ifr("W/\"", 0);
    ifr("W/", 0);
    ifr("W", 0);
    ifr("", 0);
    ifr("*", 0);
    ifr_full(ETAG, "W/" ETAG, LM, 0);
    ifr_full(ETAG, NULL, LM, 0);
    ifr_full("\"\"", "\"\"", LM, 1);
    ifr(D_EQ, 1);
    ifr("Sunday, 06-Nov-94 08:49:37 GMT", 1);
    ifr("Sun Nov  6 08:49:37 1994", 1);
    ifr(D_BEFORE, 0);
    ifr(D_AFTER, 0);
    ifr(D_EQ " ", 0);
    ifr("Sun, 06 Nov 1994 08:49:37 UTC", 0);
    ifr("tomorrow", 0);
    ifr_full(D_EQ, ETAG, SWS_NO_LAST_MODIFIED, 0);
    ifr_full(D_EQ, NULL, LM, 1);
    ifr_full("Thu, 01 Jan 1970 00:00:00 GMT", ETAG, 0, 1);
}

/* ---- Range ------------------------------------------------------------ */

/* Parses v against size with room for exactly max_ranges results (heap, so
 * ASan sees a write past them); want is the return value and, when > 0,
 * the (start, len) pairs in order. */
static void range_check(const char *v, size_t vlen, uint64_t size, size_t max_ranges, int want,
                        const uint64_t *pairs)
{
    sws_range_t *out = malloc((max_ranges ? max_ranges : 1) * sizeof *out);
    int rc = sws_parse_range(guard_place(v, vlen), vlen, size, out, max_ranges);
    CHECK(rc == want, "\"%.*s\" size %" PRIu64 " max %zu -> %d (want %d)", vlen > 200 ? 200 : (int)vlen,
          v, size, max_ranges, rc, want);
    for (int i = 0; rc == want && i < want; ++i)
        CHECK(out[i].start == pairs[2 * i] && out[i].len == pairs[2 * i + 1],
              "\"%s\" size %" PRIu64 ": range %d is (%" PRIu64 ", %" PRIu64 "), want (%" PRIu64
              ", %" PRIu64 ")",
              v, size, i, out[i].start, out[i].len, pairs[2 * i], pairs[2 * i + 1]);
    free(out);
    t_end();
}

#define RANGE(v, size, want, ...)                                                       \
    do {                                                                                \
        const uint64_t pairs_[] = {0, 0, ##__VA_ARGS__};                         \
        range_check(v, strlen(v), size, 16, want, pairs_ + 2);                          \
    } while (0)
#define RANGE_BAD(v, size)   range_check(v, strlen(v), size, 16, -1, NULL)
#define RANGE_NONE(v, size)  range_check(v, strlen(v), size, 16, 0, NULL)

static void range_many(void)
{
    /* "bytes=0-0,2-2,4-4,..." with k ranges */
    static char buf[1 << 17];
    uint64_t *pairs = malloc(20000 * sizeof *pairs);
    size_t n = (size_t)sprintf(buf, "bytes=");
    for (int k = 0; k < 10000; ++k) {
        n += (size_t)sprintf(buf + n, "%s%d-%d", k ? "," : "", 2 * k, 2 * k);
        pairs[2 * k] = (uint64_t)(2 * k);
        pairs[2 * k + 1] = 1;
    }
    /* the first 100 ranges: exactly max_ranges passes, one more is refused */
    size_t n100 = 0;
    for (int commas = 0; n100 < n; ++n100)
        if (buf[n100] == ',' && ++commas == 100)
            break;
    range_check(buf, n100, 1000000, 100, 100, pairs);
    range_check(buf, n100, 1000000, 99, -1, NULL);
    range_check(buf, n100, 1000000, 1000, 100, pairs);
    range_check(buf, n, 1000000, 10000, 10000, pairs);
    range_check(buf, n, 1000000, 16, -1, NULL);
    /* unsatisfiable specs count against max_ranges too */
    range_check(buf, n, 10, 10000, 5, pairs);
    range_check(buf, n100, 10, 16, -1, NULL);
    free(pairs);
}

static void test_ranges(void)
{
    const uint64_t M = UINT64_MAX;

    /* single ranges, size 1000 */
    RANGE("bytes=0-499", 1000, 1, 0, 500);
    RANGE("bytes=500-999", 1000, 1, 500, 500);
    RANGE("bytes=500-1500", 1000, 1, 500, 500);
    RANGE("bytes=999-", 1000, 1, 999, 1);
    RANGE("bytes=999-999", 1000, 1, 999, 1);
    RANGE("bytes=0-", 1000, 1, 0, 1000);
    RANGE("bytes=0-0", 1000, 1, 0, 1);
    RANGE("bytes=-500", 1000, 1, 500, 500);
    RANGE("bytes=-1", 1000, 1, 999, 1);
    RANGE("bytes=-1000", 1000, 1, 0, 1000);
    RANGE("bytes=-5000", 1000, 1, 0, 1000);
    RANGE("bytes=0-999", 1000, 1, 0, 1000);
    RANGE("bytes=0-998", 1000, 1, 0, 999);
    RANGE("bytes=00010-0020", 1000, 1, 10, 11);
    RANGE("BYTES=0-1", 1000, 1, 0, 2);
    RANGE("Bytes=0-1", 1000, 1, 0, 2);
    RANGE("bytes=0-1 ", 1000, 1, 0, 2);
    RANGE("bytes=0-1\t", 1000, 1, 0, 2);
    RANGE("bytes=,0-1", 1000, 1, 0, 2);
    RANGE("bytes=0-1,,", 1000, 1, 0, 2);
    RANGE_NONE("bytes=1000-", 1000);
    RANGE_NONE("bytes=1000-1000", 1000);
    RANGE_NONE("bytes=5000-6000", 1000);
    RANGE_NONE("bytes=-0", 1000);
    RANGE_NONE("bytes=-000", 1000);

    /* several: request order, unsatisfiable ones dropped, OWS at commas */
    RANGE("bytes=0-1,5-9", 1000, 2, 0, 2, 5, 5);
    RANGE("bytes=5-9, 0-1", 1000, 2, 5, 5, 0, 2);
    RANGE("bytes=0-1 ,\t-2", 1000, 2, 0, 2, 998, 2);
    RANGE("bytes=0-1,2000-3000", 1000, 1, 0, 2);
    RANGE("bytes=2000-3000,0-1", 1000, 1, 0, 2);
    RANGE("bytes=0-1, -0", 1000, 1, 0, 2);
    RANGE("bytes=0-499,500-999", 1000, 2, 0, 500, 500, 500);
    RANGE("bytes=0-0,0-0", 1000, 2, 0, 1, 0, 1); /* small overlap: not coalesced */
    RANGE_NONE("bytes=2000-,3000-", 1000);
    RANGE_NONE("bytes=-0,1000-", 1000);

    /* refused: total over size (overlap amplification) */
    RANGE_BAD("bytes=0-,0-", 1000);
    RANGE_BAD("bytes=0-500,500-999", 1000);
    RANGE_BAD("bytes=-600,0-500", 1000);
    RANGE_BAD("bytes=0-,-1", 1000);

    /* malformed or another unit: ignore the field */
    RANGE_BAD("", 1000);
    RANGE_BAD("bytes", 1000);
    RANGE_BAD("bytes=", 1000);
    RANGE_BAD("bytes=,", 1000);
    RANGE_BAD("bytes= ,", 1000);
    RANGE_BAD("bytes =0-1", 1000);
    RANGE_BAD("bytes= 0-1", 1000);
    RANGE_BAD("bytes:0-1", 1000);
    RANGE_BAD("bytesx=0-1", 1000);
    RANGE_BAD("byte=0-1", 1000);
    RANGE_BAD("items=0-1", 1000);
    RANGE_BAD("none", 1000);
    RANGE_BAD("bytes=-", 1000);
    RANGE_BAD("bytes=1", 1000);
    RANGE_BAD("bytes=a-b", 1000);
    RANGE_BAD("bytes=5-4", 1000);
    RANGE_BAD("bytes=0-1,5-4", 1000);
    RANGE_BAD("bytes=5000-4000", 1000);
    RANGE_BAD("bytes=0-1;x", 1000);
    RANGE_BAD("bytes=0-1 2-3", 1000);
    RANGE_BAD("bytes=0 -1", 1000);
    RANGE_BAD("bytes=0- 1", 1000);
    RANGE_BAD("bytes=--1", 1000);
    RANGE_BAD("bytes=1--2", 1000);
    RANGE_BAD("bytes=+1-2", 1000);
    RANGE_BAD("bytes=0x10-20", 1000);
    RANGE_BAD("bytes=1-2-3", 1000);
    RANGE_BAD("bytes=0-1,x", 1000);
    RANGE_BAD("bytes=0-1,2000-1000", 1000); /* invalid beats unsatisfiable */
    RANGE_BAD("bytes=\xff", 1000);
    range_check("bytes=0\0-1", 10, 1000, 16, -1, NULL);

    /* size 0: nothing satisfiable; size 1 */
    RANGE_NONE("bytes=0-", 0);
    RANGE_NONE("bytes=0-0", 0);
    RANGE_NONE("bytes=-1", 0);
    RANGE_NONE("bytes=-1,0-", 0);
    RANGE_BAD("bytes=5-4", 0);
    RANGE_BAD("bytes=", 0);
    RANGE("bytes=0-0", 1, 1, 0, 1);
    RANGE("bytes=0-", 1, 1, 0, 1);
    RANGE("bytes=0-99", 1, 1, 0, 1);
    RANGE("bytes=-1", 1, 1, 0, 1);
    RANGE("bytes=-2", 1, 1, 0, 1);
    RANGE_NONE("bytes=1-", 1);
    RANGE_NONE("bytes=-0", 1);

    /* 64-bit edges: saturation, huge sizes */
    RANGE("bytes=0-18446744073709551615", 1000, 1, 0, 1000);
    RANGE("bytes=0-99999999999999999999999", 1000, 1, 0, 1000);
    RANGE("bytes=-18446744073709551616", 1000, 1, 0, 1000);
    RANGE_NONE("bytes=18446744073709551615-", 1000);
    RANGE_NONE("bytes=99999999999999999999-", 1000);
    RANGE_BAD("bytes=99999999999999999999-1", 1000);
    RANGE_NONE("bytes=18446744073709551615-", M);
    RANGE_NONE("bytes=99999999999999999999-99999999999999999999", M);
    RANGE("bytes=18446744073709551614-", M, 1, M - 1, 1);
    RANGE("bytes=0-", M, 1, 0, M);
    RANGE("bytes=-1", M, 1, M - 1, 1);
    RANGE("bytes=-18446744073709551615", M, 1, 0, M);
    RANGE("bytes=0-18446744073709551613", M, 1, 0, M - 1);
    RANGE("bytes=1-", M, 1, 1, M - 1);
    RANGE("bytes=0-9223372036854775806", 9223372036854775807ull, 1, 0, 9223372036854775807ull);
    RANGE("bytes=9223372036854775806-", 9223372036854775807ull, 1, 9223372036854775806ull, 1);
    RANGE_BAD("bytes=0-,1-", M);
    RANGE("bytes=0-0,-1", M, 2, 0, 1, M - 1, 1);

    /* max_ranges */
    range_check("bytes=0-1", 9, 1000, 0, -1, NULL);
    {
        static const uint64_t p4[] = {0, 1, 2, 1, 4, 1, 6, 1};
        range_check("bytes=0-0,2-2,4-4,6-6", 21, 1000, 4, 4, p4);
        range_check("bytes=0-0,2-2,4-4,6-6", 21, 1000, 3, -1, NULL);
        range_check("bytes=0-0,2-2,4-4,6-6,", 22, 1000, 4, 4, p4); /* empty element: no spec */
        range_check("bytes=0-0", 9, 1000, 1, 1, p4);
        range_check("bytes=2000-,2001-", 17, 1000, 1, -1, NULL);
    }
    range_many();
}

/* ---- Content-Range ---------------------------------------------------- */

/* Formats into a buffer of exactly cap bytes that ends at the guard page,
 * pre-filled with '#', so a write past cap faults and a refused call can
 * be seen to leave it alone. */
static void cr(size_t cap, uint64_t start, uint64_t len, uint64_t size, const char *want)
{
    char fill[128];
    memset(fill, '#', sizeof fill);
    char *out = guard_place(fill, cap);
    int rc = sws_format_content_range(out, cap, start, len, size);
    if (want == NULL) {
        int untouched = 1;
        for (size_t i = 0; i < cap; ++i)
            untouched &= out[i] == '#';
        CHECK(rc == -1 && untouched, "cap %zu (%" PRIu64 ", %" PRIu64 ", %" PRIu64
              ") -> %d (want -1, out untouched)", cap, start, len, size, rc);
    } else {
        CHECK(rc >= 0 && (size_t)rc == strlen(want) && memcmp(out, want, (size_t)rc) == 0,
              "cap %zu (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") -> %d \"%.*s\" (want \"%s\")", cap,
              start, len, size, rc, rc < 0 ? 0 : rc, out, want);
    }
    t_end();
}

static void test_content_range(void)
{
    const uint64_t M = UINT64_MAX;
    const size_t C = SWS_CONTENT_RANGE_MAX;

    cr(C, 0, 500, 1000, "bytes 0-499/1000");
    cr(C, 500, 500, 1000, "bytes 500-999/1000");
    cr(C, 999, 1, 1000, "bytes 999-999/1000");
    cr(C, 0, 1, 1, "bytes 0-0/1");
    cr(C, 0, 0, 1000, "bytes */1000");
    cr(C, 12345, 0, 1000, "bytes */1000");
    cr(C, 0, 0, 0, "bytes */0");
    cr(C, 0, 0, M, "bytes */18446744073709551615");
    cr(C, 0, M, M, "bytes 0-18446744073709551614/18446744073709551615");
    cr(C, M - 1, 1, M,
       "bytes 18446744073709551614-18446744073709551614/18446744073709551615");
    cr(68, M - 1, 1, M,
       "bytes 18446744073709551614-18446744073709551614/18446744073709551615");
    cr(67, M - 1, 1, M, NULL);
    cr(16, 0, 500, 1000, "bytes 0-499/1000");
    cr(15, 0, 500, 1000, NULL);
    cr(12, 0, 0, 1000, "bytes */1000");
    cr(11, 0, 0, 1000, NULL);
    cr(0, 0, 0, 0, NULL);
    cr(C, 1000, 1, 1000, NULL);
    cr(C, 0, 1001, 1000, NULL);
    cr(C, 999, 2, 1000, NULL);
    cr(C, 5, M, 1000, NULL);
    cr(C, M, 1, M, NULL);
    cr(C, 0, 1, 0, NULL);

    /* every satisfiable range sws_parse_range returns formats */
    {
        sws_range_t r[2];
        char out[SWS_CONTENT_RANGE_MAX];
        const char *v = "bytes=-1,0-0";
        int n = sws_parse_range(guard_place(v, strlen(v)), strlen(v), 7, r, 2);
        int a = n == 2 ? sws_format_content_range(out, sizeof out, r[0].start, r[0].len, 7) : -1;
        CHECK(a == 11 && memcmp(out, "bytes 6-6/7", 11) == 0, "n %d a %d", n, a);
        t_end();
    }
}

/* ---- Accept-Encoding -------------------------------------------------- */

#define ALL (SWS_ENC_BR | SWS_ENC_ZSTD | SWS_ENC_GZIP)

static void ae_n(const char *v, size_t len, unsigned avail, int want)
{
    int rc = sws_pick_encoding(v ? guard_place(v, len) : NULL, len, avail);
    CHECK(rc == want, "Accept-Encoding \"%.*s\" avail %u -> %d (want %d)", v ? (int)len : 6,
          v ? v : "(none)", avail, rc, want);
    t_end();
}

static void ae(const char *v, unsigned avail, int want) { ae_n(v, slen(v), avail, want); }

static void test_accept_encoding(void)
{
    const int ID = SWS_ENC_IDENTITY, BR = SWS_ENC_BR, ZS = SWS_ENC_ZSTD, GZ = SWS_ENC_GZIP;

    /* absent, empty */
    ae(NULL, ALL, ID);
    ae("", ALL, ID);
    ae(" , ,\t,", ALL, ID);
    ae("gzip", 0, ID);

    /* preference among equal q: br > zstd > gzip */
    ae("gzip", ALL, GZ);
    ae("gzip, br", ALL, BR);
    ae("gzip, deflate, br, zstd", ALL, BR);
    ae("gzip, deflate, br, zstd", ZS | GZ, ZS);
    ae("zstd, gzip", ALL, ZS);
    ae("gzip,br", GZ, GZ);
    ae("br", GZ, ID);
    ae("br", 0, ID);
    ae("deflate, compress", ALL, ID);

    /* highest q wins */
    ae("br;q=0.5, gzip", ALL, GZ);
    ae("gzip;q=1.000, br;q=0.999", ALL, GZ);
    ae("br;q=0.2, gzip;q=0.8", ALL, GZ);
    ae("br;q=0.8, zstd;q=0.8, gzip;q=0.9", ALL, GZ);
    ae("zstd;q=0.5, gzip;q=0.5", ZS | GZ, ZS);
    ae("gzip;q=0.001", ALL, GZ);
    ae("gzip;q=0.000", ALL, ID);
    ae("gzip;q=0", ALL, ID);
    ae("gzip;q=0.", ALL, ID);
    ae("gzip;q=1.", ALL, GZ);
    ae("gzip;q=1", ALL, GZ);
    ae("gzip;q=0.1, br;q=0.01", ALL, GZ);
    ae("gzip;q=0.09, br;q=0.1", ALL, BR);
    ae("br;q=0", ALL, ID);
    ae("gzip, gzip;q=0", ALL, GZ); /* listed twice: highest q */
    ae("gzip;q=0, gzip;q=0.3", GZ, GZ);

    /* case, x-gzip, OWS */
    ae("GZIP", ALL, GZ);
    ae("X-Gzip", ALL, GZ);
    ae("x-gzip;q=0.5, br;q=0.4", ALL, GZ);
    ae("Br, ZSTD", ALL, BR);
    ae("gzip;Q=0.5", ALL, GZ);
    ae("gzip ; q=0.5", ALL, GZ);
    ae("gzip\t;\tq=0.5\t,\tbr;q=0.4", ALL, GZ);
    ae("  br  ", ALL, BR);

    /* "*" and identity */
    ae("*", ALL, BR);
    ae("*", GZ, GZ);
    ae("*", 0, ID);
    ae("*;q=0", ALL, -1);
    ae("*;q=0", 0, -1);
    ae("*;q=0, identity", ALL, ID);
    ae("*;q=0, identity;q=0.1", 0, ID);
    ae("*;q=0, gzip", ALL, GZ);
    ae("*;q=0, gzip", BR, -1);
    ae("identity;q=0", 0, -1);
    ae("identity;q=0", ALL, -1);
    ae("identity;q=0, gzip", GZ, GZ);
    ae("identity;q=0, gzip", BR, -1);
    ae("identity", ALL, ID);
    ae("identity;q=0.5", ALL, ID);
    ae("gzip;q=0.5, identity", GZ, ID);    /* identity weighted higher */
    ae("gzip, identity", GZ, GZ);          /* a tie goes to the coding */
    ae("gzip;q=0.5, identity;q=0.5", GZ, GZ);
    ae("gzip;q=0.5, *", GZ, ID);           /* "*" weights identity at 1 */
    ae("gzip;q=0.5, *", ALL, BR);          /* and br, zstd at 1 */
    ae("*;q=0.3, gzip;q=0.4", GZ, GZ);
    ae("*;q=0.5, br;q=0.1", ALL, ZS);
    ae("br;q=0, *", ALL, ZS);
    ae("*;q=0.5, identity;q=0", GZ, GZ);
    ae("*, *;q=0", ALL, BR);

    /* invalid members are ignored, the rest still counts */
    ae("gzip;q= 0.5", ALL, ID);
    ae("gzip;q =0.5", ALL, ID);
    ae("gzip;q=0.5000", ALL, ID);
    ae("gzip;q=1.001", ALL, ID);
    ae("gzip;q=1.5", ALL, ID);
    ae("gzip;q=2", ALL, ID);
    ae("gzip;q=10", ALL, ID);
    ae("gzip;q=.5", ALL, ID);
    ae("gzip;q=-1", ALL, ID);
    ae("gzip;q=", ALL, ID);
    ae("gzip;q", ALL, ID);
    ae("gzip;", ALL, ID);
    ae("gzip;;q=1", ALL, ID);
    ae("gzip;level=9", ALL, ID);
    ae("gzip;q=0.5;x=1", ALL, ID);
    ae("gzip;q=0.5 garbage", ALL, ID);
    ae("gz ip", ALL, ID);
    ae("gzip;q=0.5000, br", ALL, BR);
    ae("br;q=2, gzip;q=0.1", ALL, GZ);
    ae("identity;q=x, *;q=0", ALL, -1);
    ae("*;q=0.0001, gzip", BR, ID); /* the invalid "*" member is ignored */
    ae("gzip;x=\"a,br\",zstd", ALL, ZS); /* the comma in the quoted-string splits nothing */
    ae("gzip;x=\"a\\\",br\",zstd;q=0.1", ALL, ZS);
    ae("gzip;x=\"a,br", ALL, ID);
    ae("gzip;x=\"a\\", ALL, ID);
    ae("\"br\", gzip", ALL, GZ);
    ae(";q=1, gzip", ALL, GZ);
    ae("brotli, gzipx, b, *x", ALL, ID);
    ae("\x80\xff, gzip", ALL, GZ);
    ae_n("gzip\0, br", 9, ALL, BR);

    /* many members, the one that counts last */
    {
        static char buf[40000];
        size_t n = 0;
        for (int i = 0; i < 4000; ++i)
            n += (size_t)sprintf(buf + n, "x%d, ", i);
        n += (size_t)sprintf(buf + n, "gzip;q=0.7");
        ae_n(buf, n, ALL, GZ);
        ae_n(buf, n - 4, ALL, ID); /* ends at "gzip;q": invalid, read in bounds */
    }
}

int main(void)
{
    test_dates();
    test_preconditions();
    test_if_range();
    test_ranges();
    test_content_range();
    test_accept_encoding();
    return t_summary();
}
