/*
 * httpcond.c — HTTP-date parsing, preconditions, If-Range, byte ranges and
 * Accept-Encoding negotiation. Contracts are in scalws/httpcond.h; this file
 * states only how.
 *
 * Every scan checks p < end (or the remaining length) before reading *p, so
 * no function reads past value + len (tests/c places every input against a
 * PROT_NONE page to prove it).
 */
#include "scalws/httpcond.h"

#include <limits.h>
#include <string.h>

/* ---- character classes ------------------------------------------------ */

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\t'; }
static inline int is_digit(unsigned char c) { return (unsigned char)(c - '0') <= 9; }

/* tchar (RFC 9110 §5.6.2): "!#$%&'*+-.^_`|~" DIGIT ALPHA. */
static inline int is_tchar(unsigned char c)
{
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return 1;
    if (is_digit(c))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* etagc (RFC 9110 §8.8.3): %x21 / %x23-7E / obs-text. */
static inline int is_etagc(unsigned char c) { return c == 0x21 || (c >= 0x23 && c != 0x7f); }

static inline const char *skip_ows(const char *p, const char *end)
{
    while (p != end && is_ws((unsigned char)*p))
        ++p;
    return p;
}

/* Skips OWS and empty list elements (RFC 9110 §5.6.1.2: a recipient accepts
 * "," and OWS with no element between). */
static inline const char *skip_list_gap(const char *p, const char *end)
{
    while (p != end && (is_ws((unsigned char)*p) || *p == ','))
        ++p;
    return p;
}

/* Whether s[0..n) equals the lower-case literal lit, ASCII case-insensitively. */
static int ieq(const char *s, size_t n, const char *lit)
{
    size_t i;
    for (i = 0; i < n; ++i)
        if (lit[i] == '\0' || ((unsigned char)s[i] | 0x20) != (unsigned char)lit[i])
            return 0;
    return lit[i] == '\0';
}

/* ---- HTTP-date (RFC 9110 §5.6.7) -------------------------------------- */

static const char MON[12][3] = {{'J', 'a', 'n'}, {'F', 'e', 'b'}, {'M', 'a', 'r'},
                                {'A', 'p', 'r'}, {'M', 'a', 'y'}, {'J', 'u', 'n'},
                                {'J', 'u', 'l'}, {'A', 'u', 'g'}, {'S', 'e', 'p'},
                                {'O', 'c', 't'}, {'N', 'o', 'v'}, {'D', 'e', 'c'}};
static const char *const WDAY_LONG[7] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                         "Friday", "Saturday", "Sunday"};

/* Month 1..12 of the 3 bytes at p, or 0. */
static int month_at(const char *p)
{
    for (int i = 0; i < 12; ++i)
        if (memcmp(p, MON[i], 3) == 0)
            return i + 1;
    return 0;
}

/* Whether the 3 bytes at p are a day-name. */
static int wday_at(const char *p)
{
    for (int i = 0; i < 7; ++i)
        if (memcmp(p, WDAY_LONG[i], 3) == 0)
            return 1;
    return 0;
}

/* Value of the n digits at p, or -1 if any is not a DIGIT. */
static int num_at(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; ++i) {
        if (!is_digit((unsigned char)p[i]))
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

static int is_leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar
 * (H. Hinnant's days_from_civil); exact for every year 0..9999. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* Checks the date and the 8-byte time-of-day "HH:MM:SS" at tod and stores
 * the Unix time; returns 0 or -1. */
static int make_time(int year, int mon, int day, const char *tod, int64_t *t)
{
    static const unsigned char mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int h, m, s;

    if (year < 0 || mon < 1 || day < 1)
        return -1;
    if (day > mdays[mon - 1] + (mon == 2 && is_leap(year)))
        return -1;
    if (tod[2] != ':' || tod[5] != ':')
        return -1;
    h = num_at(tod, 2);
    m = num_at(tod + 3, 2);
    s = num_at(tod + 6, 2);
    if (h < 0 || h > 23 || m < 0 || m > 59 || s < 0 || s > 60)
        return -1;
    *t = days_from_civil(year, (unsigned)mon, (unsigned)day) * 86400 + h * 3600 + m * 60 + s;
    return 0;
}

int sws_parse_http_date(const char *s, size_t len, int64_t *t)
{
    if (len < 4)
        return -1;

    if (s[3] == ',') {
        /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
        if (len != 29 || !wday_at(s) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
            s[16] != ' ' || s[25] != ' ' || memcmp(s + 26, "GMT", 3) != 0)
            return -1;
        return make_time(num_at(s + 12, 4), month_at(s + 8), num_at(s + 5, 2), s + 17, t);
    }

    if (s[3] == ' ') {
        /* asctime-date: "Sun Nov  6 08:49:37 1994"; day is 2DIGIT / ( SP DIGIT ). */
        int day;
        if (len != 24 || !wday_at(s) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ')
            return -1;
        day = s[8] == ' ' ? num_at(s + 9, 1) : num_at(s + 8, 2);
        return make_time(num_at(s + 20, 4), month_at(s + 4), day, s + 11, t);
    }

    /* rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT" — day-name-l, then 24 bytes. */
    for (int i = 0; i < 7; ++i) {
        size_t n = strlen(WDAY_LONG[i]);
        if (len == n + 24 && memcmp(s, WDAY_LONG[i], n) == 0) {
            const char *p = s + n;
            int yy;
            if (p[0] != ',' || p[1] != ' ' || p[4] != '-' || p[8] != '-' || p[11] != ' ' ||
                p[20] != ' ' || memcmp(p + 21, "GMT", 3) != 0)
                return -1;
            yy = num_at(p + 9, 2);
            if (yy < 0)
                return -1;
            return make_time(yy < 70 ? 2000 + yy : 1900 + yy, month_at(p + 5), num_at(p + 2, 2),
                             p + 12, t);
        }
    }
    return -1;
}

/* ---- entity-tags (RFC 9110 §8.8.3) ------------------------------------ */

typedef struct {
    const char *opaque; /* opaque-tag, both DQUOTEs included */
    size_t len;
    int weak;
} etag_t;

/* Reads one entity-tag at *pp; returns 0 and advances *pp past it, or -1. */
static int take_etag(const char **pp, const char *end, etag_t *e)
{
    const char *p = *pp, *q;

    e->weak = 0;
    if (end - p >= 2 && p[0] == 'W' && p[1] == '/') { /* %s"W/": case-sensitive */
        e->weak = 1;
        p += 2;
    }
    if (p == end || *p != '"')
        return -1;
    for (q = p + 1; q != end && *q != '"'; ++q)
        if (!is_etagc((unsigned char)*q))
            return -1;
    if (q == end)
        return -1;
    e->opaque = p;
    e->len = (size_t)(q + 1 - p);
    *pp = q + 1;
    return 0;
}

/* The representation's own tag, or NULL when it has none or it is malformed. */
static const etag_t *current_etag(const char *etag, size_t len, etag_t *e)
{
    const char *p = etag;
    if (etag == NULL || take_etag(&p, etag + len, e) != 0 || p != etag + len)
        return NULL;
    return e;
}

/* §8.8.3.2: strong comparison needs both tags strong; weak ignores W/. */
static int etag_eq(const etag_t *a, const etag_t *b, int strong)
{
    if (strong && (a->weak || b->weak))
        return 0;
    return a->len == b->len && memcmp(a->opaque, b->opaque, a->len) == 0;
}

#define LIST_MALFORMED (-1)

/* Evaluates `"*" / #entity-tag` v[0..len) against cur (NULL: no tag).
 * Returns 1 when "*" or a member matches, 0 when none does, LIST_MALFORMED
 * when the value does not follow the grammar (whatever matched before). */
static int etag_list_matches(const char *v, size_t len, const etag_t *cur, int strong)
{
    const char *p = v, *end = v + len;
    int matched = 0;

    p = skip_ows(p, end);
    if (p != end && *p == '*') /* "*": the representation exists (caller's contract) */
        return skip_ows(p + 1, end) == end ? 1 : LIST_MALFORMED;
    for (;;) {
        etag_t e;
        p = skip_list_gap(p, end);
        if (p == end)
            return matched;
        if (take_etag(&p, end, &e) != 0)
            return LIST_MALFORMED;
        if (cur != NULL && etag_eq(&e, cur, strong))
            matched = 1;
        p = skip_ows(p, end);
        if (p != end && *p != ',')
            return LIST_MALFORMED;
    }
}

/* ---- preconditions (RFC 9110 §13.2.2) --------------------------------- */

int sws_evaluate_preconditions(const sws_cond_fields_t *f, const char *etag, size_t etag_len,
                               int64_t last_modified, int get_or_head)
{
    etag_t cur_buf;
    const etag_t *cur = current_etag(etag, etag_len, &cur_buf);
    int has_lm = last_modified != SWS_NO_LAST_MODIFIED;
    int64_t d;

    /* Steps 1-2: If-Match (§13.1.1), else If-Unmodified-Since (§13.1.4). */
    if (f->if_match != NULL) {
        if (etag_list_matches(f->if_match, f->if_match_len, cur, 1) != 1)
            return SWS_COND_PRECONDITION_FAILED;
    } else if (f->if_unmodified_since != NULL && has_lm &&
               sws_parse_http_date(f->if_unmodified_since, f->if_unmodified_since_len, &d) == 0 &&
               last_modified > d) {
        return SWS_COND_PRECONDITION_FAILED;
    }

    /* Steps 3-4: If-None-Match (§13.1.2), else If-Modified-Since (§13.1.3),
     * which only GET and HEAD use. A malformed If-None-Match matches nothing. */
    if (f->if_none_match != NULL) {
        if (etag_list_matches(f->if_none_match, f->if_none_match_len, cur, 0) == 1)
            return get_or_head ? SWS_COND_NOT_MODIFIED : SWS_COND_PRECONDITION_FAILED;
    } else if (get_or_head && f->if_modified_since != NULL && has_lm &&
               sws_parse_http_date(f->if_modified_since, f->if_modified_since_len, &d) == 0 &&
               last_modified <= d) {
        return SWS_COND_NOT_MODIFIED;
    }
    return SWS_COND_PROCEED;
}

int sws_if_range_matches(const char *v, size_t len, const char *etag, size_t etag_len,
                         int64_t last_modified)
{
    int64_t d;

    if (v == NULL)
        return 1;
    /* §13.1.5: a DQUOTE in the first three bytes tells an entity-tag from a date. */
    if ((len >= 1 && v[0] == '"') || (len >= 3 && v[0] == 'W' && v[1] == '/' && v[2] == '"')) {
        etag_t e, cur_buf;
        const etag_t *cur = current_etag(etag, etag_len, &cur_buf);
        const char *p = v;
        if (take_etag(&p, v + len, &e) != 0 || p != v + len || cur == NULL)
            return 0;
        return etag_eq(&e, cur, 1);
    }
    return last_modified != SWS_NO_LAST_MODIFIED && sws_parse_http_date(v, len, &d) == 0 &&
           d == last_modified;
}

/* ---- byte ranges (RFC 9110 §14.1.2, §14.2) ---------------------------- */

/* Reads 1*DIGIT at *pp (the caller checked the first), saturating at
 * UINT64_MAX, and advances *pp past every digit. */
static uint64_t take_u64(const char **pp, const char *end)
{
    const char *p = *pp;
    uint64_t v = 0;

    for (; p != end && is_digit((unsigned char)*p); ++p) {
        unsigned dgt = (unsigned)(*p - '0');
        v = v > (UINT64_MAX - dgt) / 10 ? UINT64_MAX : v * 10 + dgt;
    }
    *pp = p;
    return v;
}

int sws_parse_range(const char *v, size_t len, uint64_t size, sws_range_t *out,
                    size_t max_ranges)
{
    const char *p = v, *end = v + len;
    size_t specs = 0;
    int n = 0;
    uint64_t total = 0;
    int too_much = 0;

    if (max_ranges > INT_MAX)
        max_ranges = INT_MAX;
    if (len < 6 || !ieq(v, 5, "bytes") || v[5] != '=')
        return -1;
    p += 6;
    if (p != end && is_ws((unsigned char)*p))
        return -1; /* range-set starts with an element or "," (§5.6.1.2) */

    for (;;) {
        uint64_t first = 0, last = 0, start, rlen;
        int has_first = 0, has_last = 0;

        p = skip_list_gap(p, end);
        if (p == end)
            break;
        if (is_digit((unsigned char)*p)) {
            first = take_u64(&p, end);
            has_first = 1;
        }
        if (p == end || *p != '-')
            return -1;
        ++p;
        if (p != end && is_digit((unsigned char)*p)) {
            last = take_u64(&p, end);
            has_last = 1;
        }
        if (!has_first && !has_last)
            return -1;
        p = skip_ows(p, end);
        if (p != end && *p != ',')
            return -1;
        if (has_first && has_last && last < first)
            return -1; /* §14.1.1: an invalid int-range */
        if (++specs > max_ranges)
            return -1;

        if (has_first) {
            if (first >= size)
                continue;
            start = first;
            rlen = (has_last && last < size - 1 ? last + 1 : size) - first;
        } else {
            if (last == 0 || size == 0)
                continue;
            rlen = last < size ? last : size;
            start = size - rlen;
        }
        if (rlen > size - total)
            too_much = 1; /* stops total short of overflow; the answer is -1 */
        else
            total += rlen;
        out[n].start = start;
        out[n].len = rlen;
        ++n;
    }
    if (specs == 0 || too_much)
        return -1;
    return n;
}

/* Writes v in decimal at p; returns the number of digits. */
static size_t put_u64(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; ++i)
        p[i] = tmp[n - 1 - i];
    return n;
}

int sws_format_content_range(char *out, size_t cap, uint64_t start, uint64_t len, uint64_t size)
{
    char buf[SWS_CONTENT_RANGE_MAX];
    size_t n = 6;

    memcpy(buf, "bytes ", 6);
    if (len == 0) {
        buf[n++] = '*';
    } else {
        if (start >= size || len > size - start)
            return -1;
        n += put_u64(buf + n, start);
        buf[n++] = '-';
        n += put_u64(buf + n, start + len - 1);
    }
    buf[n++] = '/';
    n += put_u64(buf + n, size);
    if (n > cap)
        return -1;
    memcpy(out, buf, n);
    return (int)n;
}

/* ---- Accept-Encoding (RFC 9110 §12.5.3) ------------------------------- */

/* Reads `"q=" qvalue` (§12.4.2) at *pp as thousandths; returns 0 and
 * advances *pp, or -1. A fourth digit or "1.5" is left for the caller to
 * reject as a stray byte after the member. */
static int take_q(const char **pp, const char *end, int *q)
{
    const char *p = *pp;
    int v, i, scale = 100;

    if (end - p < 3 || ((unsigned char)p[0] | 0x20) != 'q' || p[1] != '=')
        return -1;
    p += 2;
    if (*p == '0') {
        v = 0;
        if (++p != end && *p == '.')
            for (++p, i = 0; i < 3 && p != end && is_digit((unsigned char)*p); ++i, ++p) {
                v += (*p - '0') * scale;
                scale /= 10;
            }
    } else if (*p == '1') {
        v = 1000;
        if (++p != end && *p == '.')
            for (++p, i = 0; i < 3 && p != end && *p == '0'; ++i, ++p)
                ;
    } else {
        return -1;
    }
    *q = v;
    *pp = p;
    return 0;
}

/* Advances to the ',' ending the current member (or end), stepping over
 * quoted-strings so a comma inside one does not split the member. */
static const char *skip_member(const char *p, const char *end)
{
    int quoted = 0;
    for (; p != end; ++p) {
        if (quoted) {
            if (*p == '\\') {
                if (p + 1 != end)
                    ++p;
            } else if (*p == '"') {
                quoted = 0;
            }
        } else if (*p == '"') {
            quoted = 1;
        } else if (*p == ',') {
            break;
        }
    }
    return p;
}

int sws_pick_encoding(const char *ae, size_t len, unsigned available)
{
    /* Highest q seen per coding, in thousandths; -1 when not listed.
     * Index 0 br, 1 zstd, 2 gzip (the order ties are broken in). */
    static const int bits[3] = {SWS_ENC_BR, SWS_ENC_ZSTD, SWS_ENC_GZIP};
    int qc[3] = {-1, -1, -1}, q_id = -1, q_star = -1;
    const char *p = ae, *end = ae + len;
    int best = -1, best_q = 0;

    if (ae == NULL)
        return SWS_ENC_IDENTITY;

    for (;;) {
        const char *tok;
        size_t tlen;
        int q = 1000, *slot = NULL;

        p = skip_list_gap(p, end);
        if (p == end)
            break;
        for (tok = p; p != end && is_tchar((unsigned char)*p); ++p)
            ;
        tlen = (size_t)(p - tok);
        p = skip_ows(p, end);
        if (tlen != 0 && p != end && *p == ';') {
            p = skip_ows(p + 1, end);
            if (take_q(&p, end, &q) != 0)
                tlen = 0;
            p = skip_ows(p, end);
        }
        if (tlen == 0 || (p != end && *p != ',')) {
            p = skip_member(p, end); /* ignore the whole member */
            continue;
        }
        if (ieq(tok, tlen, "br"))
            slot = &qc[0];
        else if (ieq(tok, tlen, "zstd"))
            slot = &qc[1];
        else if (ieq(tok, tlen, "gzip") || ieq(tok, tlen, "x-gzip"))
            slot = &qc[2];
        else if (ieq(tok, tlen, "identity"))
            slot = &q_id;
        else if (tlen == 1 && *tok == '*')
            slot = &q_star;
        if (slot != NULL && q > *slot)
            *slot = q;
    }

    for (int i = 0; i < 3; ++i) {
        int q = qc[i] >= 0 ? qc[i] : q_star;
        if ((available & (unsigned)bits[i]) && q > best_q) {
            best = bits[i];
            best_q = q;
        }
    }
    if (q_id < 0)
        q_id = q_star;
    if (best > 0 && !(q_id > best_q))
        return best;
    /* No acceptable coding, or identity weighted above it. Identity with no
     * weight at all is acceptable (§12.5.3). */
    return q_id != 0 ? SWS_ENC_IDENTITY : -1;
}
