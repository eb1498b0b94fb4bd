/*
 * scalws/httpcond.h — the per-request decisions of the static-file handler:
 * HTTP-date parsing, conditional requests, If-Range, byte ranges and
 * Accept-Encoding negotiation (RFC 9110 §5.6.7, §8.8, §12.5.3, §13, §14).
 *
 * Ownership: every function is pure. Nothing here allocates, does I/O, reads
 * a clock, keeps a pointer between calls or calls back; the caller owns every
 * buffer, and time is passed in. Field values are (pointer, length) pairs, not
 * NUL-terminated, as sws_parse_request() returns them (OWS trimmed); no
 * function reads outside [value, value + len). A field the request lacks is
 * passed as NULL. A field sent on several lines is passed joined with ", "
 * (RFC 9110 §5.3).
 *
 * Units: times are Unix seconds (int64_t, UTC, leap seconds not counted);
 * sizes and offsets are bytes (uint64_t).
 *
 * Floor: a leaf (csrc/http/httpcond.c); it calls nothing of the engine's.
 */
#ifndef SCALWS_HTTPCOND_H
#define SCALWS_HTTPCOND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- HTTP-date (RFC 9110 §5.6.7) ---------------------------------------- */

/*
 * Parses s[0..len), which must be exactly one HTTP-date in one of the three
 * forms, and stores it in *t:
 *   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"
 *   rfc850-date  "Sunday, 06-Nov-94 08:49:37 GMT"      (obsolete)
 *   asctime-date "Sun Nov  6 08:49:37 1994"            (obsolete; day may
 *                                                       also be "06")
 * Returns 0, or -1 (and leaves *t alone) when the bytes are not such a date.
 *
 * Strict: no leading or trailing bytes, not even whitespace; names are
 * case-sensitive (%s"..." in the ABNF); single spaces exactly where the
 * grammar puts them; the day must exist in that month and year (Gregorian
 * leap years), hour 00-23, minute 00-59, second 00-60 (a leap second 60
 * reads as second 0 of the next minute). The day name must be a valid name
 * but is not checked against the date: it carries nothing the date does not,
 * and nginx and H2O ignore it too. Years are 0000-9999 in IMF-fixdate and
 * asctime-date.
 *
 * RFC 850 two-digit years: 70-99 are 1970-1999 and 00-69 are 2000-2069 (the
 * window nginx uses). RFC 9110 asks for "not more than 50 years in the
 * future", which needs the current time; the two rules differ only for
 * years 70 up to (current year - 1950), i.e. dates in the early 1970s or
 * in the 2070s, none of which a real validator carries.
 */
int sws_parse_http_date(const char *s, size_t len, int64_t *t);

/* ---- conditional requests (RFC 9110 §13.1, §13.2) ----------------------- */

/* Pass as last_modified when the representation has no modification date:
 * If-Unmodified-Since and If-Modified-Since are then ignored (RFC 9110
 * §13.1.3, §13.1.4) and If-Range with a date never matches. */
#define SWS_NO_LAST_MODIFIED INT64_MIN

/* Results of sws_evaluate_preconditions(); the non-zero ones are the status
 * codes to answer with. */
#define SWS_COND_PROCEED             0
#define SWS_COND_NOT_MODIFIED      304
#define SWS_COND_PRECONDITION_FAILED 412

/* The request's precondition fields, raw; NULL (length ignored) when absent. */
typedef struct {
    const char *if_match;
    size_t if_match_len;
    const char *if_unmodified_since;
    size_t if_unmodified_since_len;
    const char *if_none_match;
    size_t if_none_match_len;
    const char *if_modified_since;
    size_t if_modified_since_len;
} sws_cond_fields_t;

/*
 * Evaluates the preconditions in the order of RFC 9110 §13.2.2 and returns
 * SWS_COND_PROCEED (0), SWS_COND_NOT_MODIFIED (304) or
 * SWS_COND_PRECONDITION_FAILED (412):
 *  1. If-Match present: false → 412. It is true when the value is "*", or a
 *     listed entity-tag matches etag by strong comparison (§8.8.3.2: neither
 *     weak, opaque-tags byte-equal).
 *  2. No If-Match, If-Unmodified-Since a valid HTTP-date and last_modified
 *     later than it → 412.
 *  3. If-None-Match present and "*" or a listed tag matching etag by weak
 *     comparison (opaque-tags byte-equal, W/ ignored) → 304 when get_or_head,
 *     else 412.
 *  4. No If-None-Match, get_or_head, If-Modified-Since a valid HTTP-date and
 *     last_modified not later than it → 304.
 * A date field that is not a valid HTTP-date is ignored (§13.1.3, §13.1.4);
 * so is a joined list of dates, which never parses as one date.
 *
 * etag[0..etag_len) is the representation's entity-tag as sent in ETag,
 * quotes included ("\"5f1a-3e8-1a2b\""); a W/ prefix makes it weak, so no
 * strong comparison matches it. NULL, empty or malformed means the
 * representation has none: only "*" matches it. last_modified is Unix
 * seconds, or SWS_NO_LAST_MODIFIED. get_or_head is non-zero for GET and HEAD.
 *
 * Entity-tag lists follow RFC 9110 §8.8.3 and §5.6.1: `"*" / #entity-tag`,
 * entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE with etagc = %x21 / %x23-7E /
 * obs-text, elements separated by OWS "," OWS, empty elements skipped ("*"
 * must be the whole value; "*, \"a\"" is malformed). A list with no element
 * matches nothing. A malformed list matches nothing, whatever tags precede
 * the fault: If-Match then fails (412), and If-None-Match counts as present
 * but not matching (so If-Modified-Since is still ignored, as §13.1.3 says
 * for any If-None-Match) — the request proceeds and gets a full 200, which is
 * always a correct answer to a GET.
 *
 * Call it only when the answer without the preconditions would be 2xx (the
 * file exists, the method is allowed): §13.2.1 says a 404 or 405 wins over
 * every precondition, and that methods which select no representation
 * (CONNECT, OPTIONS, TRACE) ignore them. If-Range is separate
 * (sws_if_range_matches), evaluated after a 0 here.
 */
int sws_evaluate_preconditions(const sws_cond_fields_t *f, const char *etag, size_t etag_len,
                               int64_t last_modified, int get_or_head);

/*
 * If-Range (RFC 9110 §13.1.5): returns 1 when the Range field should be
 * honoured, 0 when the whole representation should be sent (200) instead.
 * v NULL (no If-Range) returns 1. A value starting with DQUOTE or W/DQUOTE
 * is an entity-tag: 1 when it is exactly one entity-tag that matches etag by
 * strong comparison (so a weak tag on either side gives 0). Otherwise it must
 * be exactly one HTTP-date equal to last_modified. Anything malformed, or a
 * date when last_modified is SWS_NO_LAST_MODIFIED, gives 0.
 *
 * §13.1.5 also wants the date to be a strong validator (§8.8.2.2: Last-Modified
 * at least a second before the Date of the response that sent it); that is
 * not checked, as in nginx: the caller knows only the file's mtime.
 * The caller calls this only for GET requests that carry Range.
 */
int sws_if_range_matches(const char *v, size_t len, const char *etag, size_t etag_len,
                         int64_t last_modified);

/* ---- byte ranges (RFC 9110 §14.1.2, §14.2, §14.4) ----------------------- */

/* One satisfiable range: bytes [start, start + len), len >= 1. */
typedef struct {
    uint64_t start, len;
} sws_range_t;

/*
 * Parses a Range value v[0..len) against a representation of `size` bytes
 * into out[0..max_ranges) (out must hold max_ranges entries).
 *
 * Returns:
 *  n > 0  the number of satisfiable ranges, in out[0..n), in request order;
 *         answer 206 (multipart/byteranges when n > 1).
 *  0      the field is valid but no range is satisfiable: answer 416 with
 *         Content-Range "bytes *" "/" size (sws_format_content_range, len 0).
 *  -1     ignore the field and answer 200 with the whole representation:
 *         malformed, a unit other than "bytes", or refused (below).
 *
 * Grammar: "bytes" (case-insensitive) "=" range-set, no whitespace before
 * or after "="; range-set = 1#range-spec, elements separated by OWS "," OWS, empty
 * elements skipped, at least one spec; range-spec = first-pos "-" [last-pos]
 * or "-" suffix-length, all 1*DIGIT with no whitespace inside. A last-pos
 * below its first-pos makes the whole field invalid (§14.1.1). Numbers above
 * UINT64_MAX saturate to it (a saturated first-pos is never satisfiable; a
 * saturated last-pos or suffix-length reaches the end of the file).
 *
 * Satisfiable (§14.1.1): first-pos < size, last-pos clamped to size - 1; a
 * suffix-length > 0, clamped to size, meaning the last bytes. Unsatisfiable
 * specs are dropped from out. A suffix of 0 is never satisfiable, and with
 * size 0 nothing is: §14.1.1 calls a non-zero suffix satisfiable on an
 * empty representation, but no Content-Range can describe an empty range,
 * so an empty file gets 416 (a caller that prefers 200 tests size == 0).
 *
 * Refused, as §14.2 allows against broken clients and amplification
 * attacks: more than max_ranges specs (satisfiable or not; max_ranges 0
 * refuses every Range), and several ranges whose lengths add up to more than
 * size (overlap: sending the whole file once is cheaper than the multipart,
 * as nginx does). Ranges are not coalesced or sorted: out follows the request,
 * as nginx sends them; the two refusals bound the cost instead.
 */
int sws_parse_range(const char *v, size_t len, uint64_t size, sws_range_t *out,
                    size_t max_ranges);

/* Longest Content-Range value: "bytes " + three 20-digit numbers + "-/". */
#define SWS_CONTENT_RANGE_MAX 68

/*
 * Writes a Content-Range value (RFC 9110 §14.4) to out[0..cap), with no NUL:
 * "bytes START-END/SIZE" with END = start + len - 1, or, when len is 0,
 * the unsatisfied form for a 416: "bytes *", then "/SIZE" (start ignored).
 * Returns the number of bytes written, or -1 (out untouched) when cap is too
 * small or the range is not inside [0, size). SWS_CONTENT_RANGE_MAX bytes
 * always suffice.
 */
int sws_format_content_range(char *out, size_t cap, uint64_t start, uint64_t len, uint64_t size);

/* ---- content codings (RFC 9110 §12.5.3) --------------------------------- */

#define SWS_ENC_IDENTITY 0
#define SWS_ENC_BR       1
#define SWS_ENC_ZSTD     2
#define SWS_ENC_GZIP     4

/*
 * Chooses the coding to answer an Accept-Encoding value ae[0..len) with,
 * among `available`, a mask of SWS_ENC_BR | SWS_ENC_ZSTD | SWS_ENC_GZIP (the
 * precompressed siblings of the file that exist).
 *
 * Returns an SWS_ENC_* bit: the available coding with the highest q > 0, ties
 * going to br, then zstd, then gzip; or SWS_ENC_IDENTITY to send the file as
 * it is; or -1 when identity is refused (identity;q=0, or *;q=0 with no
 * identity member) and no available coding is acceptable. On -1 the caller
 * sends identity anyway, as nginx does (§12.5.3 allows it instead of 406).
 *
 * - ae NULL (no field): SWS_ENC_IDENTITY. Sending a coding the client never
 *   named is allowed by §12.5.3 but breaks clients; nginx does not either.
 * - Empty value, or only empty elements: SWS_ENC_IDENTITY (§12.5.3).
 * - Members are coding [ OWS ";" OWS "q=" qvalue ] separated by OWS "," OWS;
 *   codings and "q" are case-insensitive; "x-gzip" is gzip (§8.4.1.3).
 *   qvalue = "0" [ "." 0*3DIGIT ] / "1" [ "." 0*3"0" ] (§12.4.2). A member
 *   with an invalid qvalue or any other parameter is ignored (skipping
 *   quoted-strings correctly); unknown codings are ignored.
 * - A coding listed twice counts with its highest q.
 * - "*" gives its q to every coding not listed, identity included.
 * - identity with a weight (listed, or through "*") beats the best coding
 *   only when its q is strictly higher; identity without any weight is
 *   acceptable but loses to every coding with q > 0.
 */
int sws_pick_encoding(const char *ae, size_t len, unsigned available);

#ifdef __cplusplus
}
#endif

#endif /* SCALWS_HTTPCOND_H */
