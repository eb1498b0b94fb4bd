/* scalws/cachecc.h — what RFC 9111 says about one response and one request:
 * Cache-Control parsed (§5.2), Age parsed (§5.1), freshness lifetime
 * (§4.2.1, heuristics in §4.2.2), age (§4.2.3), and whether a shared cache
 * may store it (§3); and RFC 9213's targeted fields (CDN-Cache-Control),
 * which take Cache-Control's place for the cache they target. The cache
 * handler (csrc/handlers/cache_*.c) applies it.
 *
 * Ownership: pure functions over caller-owned bytes, no allocation, no
 * clock (times are passed in, Unix seconds). Field values are (pointer,
 * length) as the parsers return them; a field sent on several lines is
 * parsed line by line into the same sws_cc_t (sws_cc_parse accumulates).
 *
 * Floor: a leaf (csrc/http/cachecc.c).
 */
#ifndef SCALWS_CACHECC_H
#define SCALWS_CACHECC_H

#include <stddef.h>
#include <stdint.h>

#define SWS_CC_NONE (-1)          /* a delta-seconds directive that is absent */
#define SWS_CC_MAX_DELTA 2147483648LL /* §1.2.2: larger values are this */

enum {
    SWS_CC_NO_STORE = 1 << 0,
    SWS_CC_NO_CACHE = 1 << 1,     /* qualified or not: a qualified one is treated as unqualified */
    SWS_CC_PRIVATE = 1 << 2,      /* likewise */
    SWS_CC_PUBLIC = 1 << 3,
    SWS_CC_MUST_REVALIDATE = 1 << 4,
    SWS_CC_PROXY_REVALIDATE = 1 << 5,
    SWS_CC_ONLY_IF_CACHED = 1 << 6,
    SWS_CC_IMMUTABLE = 1 << 7,
    SWS_CC_MAX_STALE_ANY = 1 << 8, /* request max-stale without a value */
    SWS_CC_INVALID = 1 << 9,      /* a freshness directive with a bad or repeated value */
    SWS_CC_NO_TRANSFORM = 1 << 10,
    SWS_CC_MUST_UNDERSTAND = 1 << 11,
};

typedef struct {
    uint32_t flags;               /* SWS_CC_* */
    int64_t max_age, s_maxage;    /* SWS_CC_NONE when absent */
    int64_t stale_while_revalidate, stale_if_error;
    int64_t max_stale, min_fresh; /* request directives */
} sws_cc_t;

void sws_cc_init(sws_cc_t *cc);
/* Adds the directives of one Cache-Control line. Unknown directives are
 * ignored (§5.2.3); a duplicated delta directive keeps its first value and
 * a freshness directive with a value that is not delta-seconds (quoted or
 * not) sets SWS_CC_INVALID (§4.2.1: such a response is treated as stale). */
void sws_cc_parse(sws_cc_t *cc, const char *v, size_t n);

/* Delta-seconds (§1.2.2): the whole of s[0..n) digits, clamped; -1 when not. */
int64_t sws_cc_delta(const char *s, size_t n);

/* The Age field (§5.1), one field line v[0..n). A list-based value counts
 * by its first member and the rest is discarded; a field on several lines
 * is one list (RFC 9110 §5.3), so its first line with a member decides.
 * Returns the first member's delta-seconds (clamped to SWS_CC_MAX_DELTA,
 * §1.2.2); SWS_CC_AGE_INVALID when that member is not delta-seconds
 * (a sign, a fraction, a parameter, junk after the digits: the cache
 * then ignores the field, as if absent); SWS_CC_AGE_NONE when the line
 * has no member (empty, or only commas and OWS: RFC 9110 §5.6.1), so the
 * next line's first member is the field's. */
#define SWS_CC_AGE_INVALID (-1)
#define SWS_CC_AGE_NONE (-2)
int64_t sws_cc_age(const char *v, size_t n);

/* Statuses a cache may give heuristic freshness to (§4.2.2, RFC 9110 §15.1). */
int sws_cc_heuristic_status(int status);
/* Final statuses whose semantics RFC 9110 defines (for must-understand). */
int sws_cc_understood_status(int status);

/* What the response says about itself, for sws_cc_lifetime. Times are Unix
 * seconds; absent fields are INT64_MIN. expires_invalid: Expires was
 * present but not an HTTP-date (it then means "already expired"). */
typedef struct {
    int status;
    int64_t date, expires, last_modified, age;
    int expires_invalid;
    int expires_multiple;
} sws_cc_resp_t;

/* The freshness lifetime in seconds (§4.2.1): s-maxage, max-age, then
 * Expires - Date; otherwise the heuristic (10 % of Date - Last-Modified,
 * at most a day) when `heuristic` allows it; otherwise `fallback`
 * (the route's `valid`, < 0 when none). Returns -1 when the response has
 * no lifetime at all (not storable for that reason). */
int64_t sws_cc_lifetime(const sws_cc_t *cc, const sws_cc_resp_t *rs, int heuristic, int64_t fallback);

/* The corrected initial age (§4.2.3) of a response received at
 * response_time for a request sent at request_time. */
int64_t sws_cc_initial_age(const sws_cc_resp_t *rs, int64_t request_time, int64_t response_time);

/* Targeted cache-control fields (RFC 9213): CDN-Cache-Control, or a
 * cache's own, with Cache-Control's directives and meaning but the syntax
 * of a Structured Fields Dictionary (RFC 8941 §3.2). A cache keeps one
 * sws_tcc_t per field of its target list and feeds it the field's lines
 * in the order they came: a field on several lines is one Dictionary
 * (RFC 8941 §4.2), in which a key given again keeps its last value.
 *
 * The field is ignored whole, as if absent (§2.2), when a line is not a
 * Dictionary, or when the last value of a directive we implement has the
 * wrong type: max-age, s-maxage, stale-while-revalidate and stale-if-error
 * take a non-negative Integer (clamped to SWS_CC_MAX_DELTA); no-store,
 * no-cache, private, public, must-revalidate, proxy-revalidate, immutable,
 * no-transform and must-understand a Boolean (?0: the directive is
 * absent), no-cache and private also a String (field names: treated as
 * unqualified, as in Cache-Control). Parameters are ignored, as are
 * unknown keys and the request-only directives (max-stale, min-fresh,
 * only-if-cached), whatever their values. */
enum {
    SWS_TCC_ABSENT,               /* no line */
    SWS_TCC_EMPTY,                /* only empty lines: not a policy (§2.1 wants a non-empty value) */
    SWS_TCC_MEMBERS,              /* at least one member, every line a Dictionary */
    SWS_TCC_SYNTAX,               /* a line that is not a Dictionary */
};
typedef struct {
    sws_cc_t cc;                  /* the directives' last values */
    int state;                    /* SWS_TCC_* */
    uint32_t bad;                 /* directives whose last value has the wrong type (a bit each) */
} sws_tcc_t;

void sws_tcc_init(sws_tcc_t *t);
/* Adds one field line v[0..n) (v may be NULL when n is 0). */
void sws_tcc_parse(sws_tcc_t *t, const char *v, size_t n);
/* Is the field a valid, non-empty policy (§2.1)? */
int sws_tcc_valid(const sws_tcc_t *t);

/* RFC 9213 §2.1: the first field of the target list (list[0..n), in the
 * cache's order of precedence) with a valid, non-empty value is the
 * response's caching policy: its directives replace *cc (Cache-Control's)
 * and Expires is ignored (rs's expires fields cleared). Returns its index,
 * or -1 when no field qualifies (cc and rs untouched: Cache-Control and
 * Expires apply). */
int sws_tcc_apply(const sws_tcc_t *list, size_t n, sws_cc_t *cc, sws_cc_resp_t *rs);

#endif
