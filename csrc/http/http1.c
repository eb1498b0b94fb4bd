/*
 * http1.c — HTTP/1.x request- and response-head parsers and their
 * analysis (the chunked decoder is http1_chunked.c). Contracts are in
 * scalws/http1.h; this file states only how.
 *
 * Every scan checks p < end before reading *p, and the SSE4.2 scans load 16
 * bytes only while at least 16 remain, so no function reads past buf + len
 * (tests/c places every input against a PROT_NONE page to prove it).
 */
#include "scalws/http1.h"

#include <limits.h>
#include <string.h>

#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

#include "http1_chars.h"

#define LIKELY(x)   __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- scans ------------------------------------------------------------ */

#ifdef __SSE4_2__
/* Advances p by 16-byte blocks while a block holds no byte that `mode`
 * selects against the ranges; stops at the first such byte, or when fewer
 * than 16 bytes remain. The caller finishes with the scalar test, so the
 * ranges may be a subset of what the class allows. */
#define SSE_SKIP(p, end, ranges, nranges, mode)                                        \
    do {                                                                               \
        const __m128i r_ = _mm_loadu_si128((const __m128i *)(ranges));                \
        while ((end) - (p) >= 16) {                                                    \
            __m128i b_ = _mm_loadu_si128((const __m128i *)(p));                        \
            int i_ = _mm_cmpestri(r_, (nranges), b_, 16, (mode));                      \
            (p) += i_;                                                                 \
            if (i_ != 16)                                                              \
                break;                                                                 \
        }                                                                              \
    } while (0)

#define SSE_FIND_IN (_SIDD_UBYTE_OPS | _SIDD_CMP_RANGES | _SIDD_LEAST_SIGNIFICANT)
#define SSE_FIND_OUT (SSE_FIND_IN | _SIDD_NEGATIVE_POLARITY)

/* Eight of the nine tchar ranges (only 8 fit a register); '~' falls to the
 * scalar test. */
static const char tchar_ranges[16] __attribute__((aligned(16))) =
    "!!#'*+-.09AZ^z||";
/* Bytes that end a request-target: CTL, SP, DEL. */
static const char target_stop_ranges[16] __attribute__((aligned(16))) =
    "\x00\x20\x7f\x7f";
/* Bytes that end a field-value: CTL except HTAB, DEL. */
static const char value_stop_ranges[16] __attribute__((aligned(16))) =
    "\x00\x08\x0a\x1f\x7f\x7f";
#endif

/* Returns the first byte in [p, end) that is not a tchar, or end. */
static inline const char *scan_token(const char *p, const char *end)
{
    for (;;) {
#ifdef __SSE4_2__
        SSE_SKIP(p, end, tchar_ranges, 16, SSE_FIND_OUT);
#endif
        if (p == end || !is_tchar((unsigned char)*p))
            return p;
        ++p;
    }
}

static inline const char *scan_target(const char *p, const char *end)
{
#ifdef __SSE4_2__
    SSE_SKIP(p, end, target_stop_ranges, 4, SSE_FIND_IN);
#endif
    while (p != end && is_target_char((unsigned char)*p))
        ++p;
    return p;
}

static inline const char *scan_value(const char *p, const char *end)
{
#ifdef __SSE4_2__
    SSE_SKIP(p, end, value_stop_ranges, 6, SSE_FIND_IN);
#endif
    while (p != end && is_value_char((unsigned char)*p))
        ++p;
    return p;
}

/* Consumes a line end (CRLF or bare LF, RFC 9112 §2.2) at *pp.
 * Returns 0 and advances *pp, or SWS_PARSE_INCOMPLETE / SWS_PARSE_ERROR. */
static inline int take_eol(const char **pp, const char *end)
{
    const char *p = *pp;
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (*p == '\r') {
        if (++p == end)
            return SWS_PARSE_INCOMPLETE;
        if (*p != '\n')
            return SWS_PARSE_ERROR; /* bare CR */
    } else if (*p != '\n') {
        return SWS_PARSE_ERROR;
    }
    *pp = p + 1;
    return 0;
}

/* Whether buf[0..len) holds an empty line after a line end ("\n\n" or
 * "\n\r\n") ending at or after last_len. Only a hint: the full parse decides.
 * A terminator ending before last_len would have been found by the call that
 * returned INCOMPLETE at last_len, so only the last 3 old bytes are rescanned. */
static int head_may_be_complete(const char *buf, size_t len, size_t last_len)
{
    const char *end = buf + len;
    const char *p = buf + (last_len > 3 ? last_len - 3 : 0);

    while (p < end && (p = memchr(p, '\n', end - p)) != NULL) {
        if (++p == end)
            return 0;
        if (*p == '\n')
            return 1;
        if (*p == '\r' && p + 1 != end && p[1] == '\n')
            return 1;
    }
    return 0;
}

/* ---- header section (requests and responses) ------------------------- */

/* field-line = field-name ":" OWS field-value OWS, then its line end
 * (RFC 9112 §5), at *pp, which is not a line end. On 0 fills *h and
 * advances *pp past the line end; else SWS_PARSE_INCOMPLETE or
 * SWS_PARSE_ERROR. Inlined: the loop of parse_fields is the parser's hot
 * path. */
static inline __attribute__((always_inline)) int parse_field_line(const char **pp, const char *end,
                                                                   sws_header_t *h)
{
    const char *p = *pp, *name, *value, *vend;
    int rc;

    /* field-name ":" with nothing between (RFC 9112 §5.1). A line that
     * starts with SP/HTAB (obs-fold, §5.2) fails here as an empty name. */
    name = p;
    p = scan_token(p, end);
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (p == name || *p != ':')
        return SWS_PARSE_ERROR;
    h->name = name;
    h->name_len = (size_t)(p - name);
    ++p;

    while (p != end && is_ws((unsigned char)*p))
        ++p;
    value = p;
    p = scan_value(p, end);
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (*p != '\r' && *p != '\n')
        return SWS_PARSE_ERROR; /* NUL, CTL or DEL in the value */
    vend = p;
    while (vend != value && is_ws((unsigned char)vend[-1]))
        --vend;
    if ((rc = take_eol(&p, end)) != 0)
        return rc;
    h->value = value;
    h->value_len = (size_t)(vend - value);
    *pp = p;
    return 0;
}

/* *( field-line CRLF ) CRLF (RFC 9112 §5), shared by requests and responses.
 * Parses from *pp up to and including the empty line ending the head; on 0
 * advances *pp past it and sets *num_headers (capacity on entry). Returns 0,
 * SWS_PARSE_INCOMPLETE, SWS_PARSE_ERROR or SWS_PARSE_TOO_MANY_HEADERS. */
static inline int parse_fields(const char **pp, const char *end, sws_header_t *headers,
                               size_t *num_headers)
{
    const char *p = *pp;
    size_t cap = *num_headers, n = 0;
    int rc;

    for (;;) {
        if (p == end)
            return SWS_PARSE_INCOMPLETE;
        if (*p == '\r' || *p == '\n') {
            if ((rc = take_eol(&p, end)) != 0)
                return rc;
            break;
        }
        if (UNLIKELY(n == cap))
            return SWS_PARSE_TOO_MANY_HEADERS;
        if ((rc = parse_field_line(&p, end, &headers[n])) != 0)
            return rc;
        ++n;
    }
    *pp = p;
    *num_headers = n;
    return 0;
}

/* ---- request head ----------------------------------------------------- */

/* Empty lines before the request-line are ignored (RFC 9112 §2.2): skips
 * them from *pp. 0, SWS_PARSE_INCOMPLETE (input ends in them) or
 * SWS_PARSE_ERROR (a CR not followed by LF). */
static inline int skip_empty_lines(const char **pp, const char *end)
{
    int rc;
    while (*pp != end && (**pp == '\r' || **pp == '\n'))
        if ((rc = take_eol(pp, end)) != 0)
            return rc;
    return *pp == end ? SWS_PARSE_INCOMPLETE : 0;
}

/* request-line = method SP request-target SP HTTP-version, then its line
 * end (RFC 9112 §3), at *pp. On 0 (HTTP/1.x) or SWS_PARSE_VERSION (major
 * 2..9, once the line has ended) sets the outputs and advances *pp past
 * the line end; else SWS_PARSE_INCOMPLETE or SWS_PARSE_ERROR. */
static inline __attribute__((always_inline)) int
parse_request_line(const char **pp, const char *end, const char **method, size_t *method_len,
                   const char **target, size_t *target_len, int *minor_version)
{
    const char *p = *pp, *start;
    int rc, major;

    /* method SP (RFC 9112 §3) */
    start = p;
    p = scan_token(p, end);
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (p == start || *p != ' ')
        return SWS_PARSE_ERROR;
    *method = start;
    *method_len = (size_t)(p - start);
    ++p;

    /* request-target SP: exactly one SP on each side (RFC 9112 §3). */
    start = p;
    p = scan_target(p, end);
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (p == start || *p != ' ')
        return SWS_PARSE_ERROR;
    *target = start;
    *target_len = (size_t)(p - start);
    ++p;

    /* HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3), case-sensitive. */
    static const char proto[] = "HTTP/";
    for (int i = 0; i < 5; ++i, ++p) {
        if (p == end)
            return SWS_PARSE_INCOMPLETE;
        if (*p != proto[i])
            return SWS_PARSE_ERROR;
    }
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if ((unsigned char)(*p - '0') > 9)
        return SWS_PARSE_ERROR;
    major = *p++ - '0';
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (*p++ != '.')
        return SWS_PARSE_ERROR;
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if ((unsigned char)(*p - '0') > 9)
        return SWS_PARSE_ERROR;
    *minor_version = *p++ - '0';
    if ((rc = take_eol(&p, end)) != 0)
        return rc;
    *pp = p;
    if (major != 1)
        return major == 0 ? SWS_PARSE_ERROR : SWS_PARSE_VERSION;
    return 0;
}

int sws_parse_request(const char *buf, size_t len, const char **method, size_t *method_len,
                      const char **target, size_t *target_len, int *minor_version,
                      sws_header_t *headers, size_t *num_headers, size_t last_len)
{
    const char *p = buf, *end = buf + len;
    int rc;

    if (last_len != 0 && last_len <= len && !head_may_be_complete(buf, len, last_len))
        return SWS_PARSE_INCOMPLETE;
    if ((rc = skip_empty_lines(&p, end)) != 0)
        return rc;
    if ((rc = parse_request_line(&p, end, method, method_len, target, target_len,
                                 minor_version)) != 0)
        return rc;
    if ((rc = parse_fields(&p, end, headers, num_headers)) != 0)
        return rc;
    if (UNLIKELY(p - buf > INT_MAX))
        return SWS_PARSE_ERROR; /* cannot report the length; callers cap heads far below */
    return (int)(p - buf);
}

/* ---- CGI response head ----------------------------------------------- */

int sws_parse_cgi_head(const char *buf, size_t len, sws_header_t *headers, size_t *num_headers,
                       size_t last_len)
{
    const char *p = buf, *end = buf + len;
    int rc;

    /* (an empty head, a lone line end, has no line end before it: no hint) */
    if (last_len != 0 && last_len <= len && *buf != '\r' && *buf != '\n' &&
        !head_may_be_complete(buf, len, last_len))
        return SWS_PARSE_INCOMPLETE;
    if ((rc = parse_fields(&p, end, headers, num_headers)) != 0)
        return rc;
    if (UNLIKELY(p - buf > INT_MAX))
        return SWS_PARSE_ERROR;
    return (int)(p - buf);
}

/* ---- response head ---------------------------------------------------- */

int sws_parse_response(const char *buf, size_t len, int *minor_version, int *status,
                       const char **reason, size_t *reason_len, sws_header_t *headers,
                       size_t *num_headers, size_t last_len)
{
    const char *p = buf, *end = buf + len, *start;
    int rc, code = 0;

    if (last_len != 0 && last_len <= len && !head_may_be_complete(buf, len, last_len))
        return SWS_PARSE_INCOMPLETE;

    /* HTTP-version = "HTTP/1." ("0" / "1") SP (RFC 9112 §2.3, §4); no empty
     * lines are skipped before a status-line (§2.2 allows that for
     * request-lines only). */
    {
        static const char proto[] = "HTTP/1.";
        for (int i = 0; i < 7; ++i, ++p) {
            if (p == end)
                return SWS_PARSE_INCOMPLETE;
            if (*p != proto[i])
                return SWS_PARSE_ERROR;
        }
        if (p == end)
            return SWS_PARSE_INCOMPLETE;
        if (*p != '0' && *p != '1')
            return SWS_PARSE_ERROR;
        *minor_version = *p++ - '0';
        if (p == end)
            return SWS_PARSE_INCOMPLETE;
        if (*p++ != ' ')
            return SWS_PARSE_ERROR;
    }

    /* status-code = 3DIGIT, in 100..599 (RFC 9110 §15) */
    for (int i = 0; i < 3; ++i, ++p) {
        if (p == end)
            return SWS_PARSE_INCOMPLETE;
        if ((unsigned char)(*p - '0') > 9)
            return SWS_PARSE_ERROR;
        code = code * 10 + (*p - '0');
    }
    if (code < 100 || code > 599)
        return SWS_PARSE_ERROR;
    *status = code;

    /* SP reason-phrase, or (lenient, see the header) a line end right after
     * the code. */
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (*p == ' ')
        ++p;
    else if (*p != '\r' && *p != '\n')
        return SWS_PARSE_ERROR;
    start = p;
    p = scan_value(p, end);
    if (p == end)
        return SWS_PARSE_INCOMPLETE;
    if (*p != '\r' && *p != '\n')
        return SWS_PARSE_ERROR; /* NUL, CTL or DEL in the reason */
    *reason = start;
    *reason_len = (size_t)(p - start);
    if ((rc = take_eol(&p, end)) != 0)
        return rc;

    if ((rc = parse_fields(&p, end, headers, num_headers)) != 0)
        return rc;
    if (UNLIKELY(p - buf > INT_MAX))
        return SWS_PARSE_ERROR;
    return (int)(p - buf);
}

int sws_method_id(const char *m, size_t len)
{
#define M_IS(s) (memcmp(m, s, sizeof(s) - 1) == 0)
    switch (len) {
    case 3:
        if (M_IS("GET"))
            return SWS_M_GET;
        if (M_IS("PUT"))
            return SWS_M_PUT;
        break;
    case 4:
        if (M_IS("POST"))
            return SWS_M_POST;
        if (M_IS("HEAD"))
            return SWS_M_HEAD;
        break;
    case 5:
        if (M_IS("PATCH"))
            return SWS_M_PATCH;
        if (M_IS("TRACE"))
            return SWS_M_TRACE;
        break;
    case 6:
        if (M_IS("DELETE"))
            return SWS_M_DELETE;
        break;
    case 7:
        if (M_IS("OPTIONS"))
            return SWS_M_OPTIONS;
        if (M_IS("CONNECT"))
            return SWS_M_CONNECT;
        break;
    }
    return SWS_M_OTHER;
#undef M_IS
}

/* ---- request analysis ------------------------------------------------- */

/* Whether s[0..len) equals the lower-case literal lit, ignoring ASCII case. */
static int eq_ci(const char *s, size_t len, const char *lit, size_t lit_len)
{
    if (len != lit_len)
        return 0;
    for (size_t i = 0; i < len; ++i)
        if (ascii_lower((unsigned char)s[i]) != (unsigned char)lit[i])
            return 0;
    return 1;
}
#define EQ_CI(s, len, lit) eq_ci((s), (len), lit, sizeof(lit) - 1)

int sws_list_next(const char **pp, const char *end, const char **el, size_t *el_len)
{
    const char *p = *pp;
    for (;;) {
        const char *s, *e;
        while (p != end && (is_ws((unsigned char)*p) || *p == ','))
            ++p;
        if (p == end) {
            *pp = p;
            return 0;
        }
        s = p;
        while (p != end && *p != ',')
            ++p;
        e = p;
        while (e != s && is_ws((unsigned char)e[-1]))
            --e;
        if (e != s) {
            *el = s;
            *el_len = (size_t)(e - s);
            *pp = p;
            return 1;
        }
    }
}

/* Host = uri-host [ ":" port ] (RFC 9110 §7.2): bytes of reg-name
 * (unreserved, pct-encoded, sub-delims), IP-literal brackets and ":". */
static int host_value_ok(const char *v, size_t len)
{
    static const unsigned char ok[256] = {
        ['-'] = 1, ['.'] = 1, ['_'] = 1, ['~'] = 1, ['%'] = 1,
        ['!'] = 1, ['$'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1, [')'] = 1,
        ['*'] = 1, ['+'] = 1, [','] = 1, [';'] = 1, ['='] = 1,
        [':'] = 1, ['['] = 1, [']'] = 1,
        ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
        ['8'] = 1, ['9'] = 1,
        ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
        ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
        ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
        ['Y'] = 1, ['Z'] = 1,
        ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
        ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
        ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
        ['y'] = 1, ['z'] = 1,
    };
    for (size_t i = 0; i < len; ++i)
        if (!ok[(unsigned char)v[i]])
            return 0;
    return 1;
}

/* Content-Length = 1*DIGIT (RFC 9110 §8.6); a list, even of equal values,
 * is refused rather than collapsed. Returns 0 or -1. */
static int parse_content_length(const char *v, size_t len, uint64_t *out)
{
    uint64_t n = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; ++i) {
        unsigned d = (unsigned char)v[i] - '0';
        if (d > 9 || n > (SWS_MAX_CONTENT_LENGTH - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *out = n;
    return 0;
}

/* What the Transfer-Encoding fields of a message say, over all of them. */
typedef struct {
    int seen, codings, chunked_seen, chunked_last, unknown_coding, bad;
} te_state_t;

/* Adds one Transfer-Encoding field value to *te:
 * transfer-coding = token *( OWS ";" OWS transfer-parameter ) (RFC 9112 §7).
 * bad: a coding that is not a token, a coding after chunked, chunked twice
 * or with parameters. */
static void te_field(te_state_t *te, const char *v, size_t len)
{
    const char *p = v, *end = v + len, *el;
    size_t el_len;

    te->seen = 1;
    while (sws_list_next(&p, end, &el, &el_len)) {
        const char *q = scan_token(el, el + el_len);
        size_t name_len = (size_t)(q - el);
        int has_params = 0;
        ++te->codings;
        while (q != el + el_len && is_ws((unsigned char)*q))
            ++q;
        if (q != el + el_len) {
            if (*q != ';')
                te->bad = 1;
            has_params = 1;
        }
        if (name_len == 0)
            te->bad = 1;
        if (te->chunked_last)
            te->bad = 1; /* a coding after chunked (RFC 9112 §6.3 p4) */
        if (EQ_CI(el, name_len, "chunked")) {
            if (te->chunked_seen || has_params)
                te->bad = 1;
            te->chunked_seen = te->chunked_last = 1;
        } else {
            te->chunked_last = 0;
            te->unknown_coding = 1;
        }
    }
}

int sws_analyze_request(const char *method, size_t method_len, int minor_version,
                        const sws_header_t *headers, size_t num_headers,
                        sws_request_info_t *info)
{
    int bad = 0, bad_expect = 0;
    te_state_t te = {0};
    int host_count = 0, conn_close = 0, conn_keepalive = 0, conn_upgrade = 0;
    int upgrade_field = 0, expect_continue = 0, te_trailers = 0;

    memset(info, 0, sizeof(*info));
    info->method = sws_method_id(method, method_len);

    for (size_t i = 0; i < num_headers; ++i) {
        const sws_header_t *h = &headers[i];
        const char *p = h->value, *end = h->value + h->value_len, *el;
        size_t el_len;

        switch (h->name_len) {
        case 2:
            if (EQ_CI(h->name, h->name_len, "te"))
                while (sws_list_next(&p, end, &el, &el_len))
                    te_trailers |= EQ_CI(el, el_len, "trailers");
            break;
        case 4:
            if (EQ_CI(h->name, h->name_len, "host")) {
                if (++host_count == 1) {
                    info->host = h->value;
                    info->host_len = h->value_len;
                    info->has_host = 1;
                }
                if (host_count > 1 || !host_value_ok(h->value, h->value_len))
                    bad = 1;
            }
            break;
        case 6:
            if (EQ_CI(h->name, h->name_len, "expect")) {
                while (sws_list_next(&p, end, &el, &el_len)) {
                    if (EQ_CI(el, el_len, "100-continue"))
                        expect_continue = 1;
                    else
                        bad_expect = 1;
                }
            }
            break;
        case 7:
            if (EQ_CI(h->name, h->name_len, "upgrade") && h->value_len != 0)
                upgrade_field = 1;
            break;
        case 10:
            if (EQ_CI(h->name, h->name_len, "connection")) {
                while (sws_list_next(&p, end, &el, &el_len)) {
                    if (EQ_CI(el, el_len, "close"))
                        conn_close = 1;
                    else if (EQ_CI(el, el_len, "keep-alive"))
                        conn_keepalive = 1;
                    else if (EQ_CI(el, el_len, "upgrade"))
                        conn_upgrade = 1;
                }
            }
            break;
        case 14:
            if (EQ_CI(h->name, h->name_len, "content-length")) {
                /* Any second Content-Length is refused (RFC 9112 §6.3 p5). */
                if (info->has_content_length ||
                    parse_content_length(h->value, h->value_len, &info->content_length) != 0)
                    bad = 1;
                info->has_content_length = 1;
            }
            break;
        case 17:
            if (EQ_CI(h->name, h->name_len, "transfer-encoding"))
                te_field(&te, h->value, h->value_len);
            break;
        }
    }

    if (te.seen) {
        /* RFC 9112 §6.1: HTTP/1.0 framing with Transfer-Encoding is faulty;
         * §6.3 p3: CL with TE is a smuggling attempt until proven otherwise. */
        if (te.bad || minor_version == 0 || info->has_content_length || te.codings == 0)
            bad = 1;
        info->chunked = te.chunked_last ? 1 : 0;
    }
    if (minor_version >= 1 && host_count == 0)
        bad = 1; /* RFC 9112 §3.2 */

    info->keepalive = conn_close ? 0 : (minor_version >= 1 || conn_keepalive);
    info->upgrade = (conn_upgrade && upgrade_field) ? 1 : 0;
    /* RFC 9110 §10.1.1: a 100-continue expectation in HTTP/1.0 is ignored. */
    info->expect_continue = (expect_continue && minor_version >= 1) ? 1 : 0;
    info->te_trailers = (te_trailers && minor_version >= 1) ? 1 : 0; /* TE is HTTP/1.1's */

    if (bad)
        return 400;
    if (te.unknown_coding)
        return 501;
    if (bad_expect)
        return 417;
    return 0;
}

/* ---- early refusal of an incomplete request head ---------------------- */

/* Private bits of sws_head_check_t.flags beside SWS_HC_LINE, SWS_HC_HEAD:
 * the fields checked so far, as far as a later field can conflict. */
enum { HC_CL = 0x04, HC_TE = 0x08, HC_HOST = 0x10, HC_CHUNKED = 0x20, HC_CHUNKED_LAST = 0x40 };

/* What one field line adds to sws_analyze_request's 400s that no later line
 * can take back (its other checks need the whole head). 0, or 400. */
static int field_fault(sws_head_check_t *s, const sws_header_t *h)
{
    uint64_t cl;
    switch (h->name_len) {
    case 4:
        if (EQ_CI(h->name, h->name_len, "host")) {
            if ((s->flags & HC_HOST) || !host_value_ok(h->value, h->value_len))
                return 400;
            s->flags |= HC_HOST;
        }
        break;
    case 14:
        if (EQ_CI(h->name, h->name_len, "content-length")) {
            if ((s->flags & (HC_CL | HC_TE)) || parse_content_length(h->value, h->value_len, &cl) != 0)
                return 400;
            s->flags |= HC_CL;
        }
        break;
    case 17:
        if (EQ_CI(h->name, h->name_len, "transfer-encoding")) {
            te_state_t te = {.chunked_seen = !!(s->flags & HC_CHUNKED),
                             .chunked_last = !!(s->flags & HC_CHUNKED_LAST)};
            te_field(&te, h->value, h->value_len);
            if (te.bad || (s->flags & HC_CL) || s->minor == 0)
                return 400;
            s->flags = (uint8_t)((s->flags & ~(HC_CHUNKED | HC_CHUNKED_LAST)) | HC_TE |
                                 (te.chunked_seen ? HC_CHUNKED : 0) |
                                 (te.chunked_last ? HC_CHUNKED_LAST : 0));
        }
        break;
    }
    return 0;
}

static int status_of(int parse_rc)
{
    return parse_rc == SWS_PARSE_VERSION ? 505 : parse_rc == SWS_PARSE_TOO_MANY_HEADERS ? 431 : 400;
}

int sws_check_request_head(sws_head_check_t *s, const char *buf, size_t len, size_t last_len,
                           int parse_rc, const sws_head_limits_t *lim)
{
    size_t cap = len < lim->max_head ? len : lim->max_head;
    size_t from = last_len > s->checked ? last_len : s->checked;
    const char *end = buf + cap;

    /* Lines complete only at a line end: without a new one, what was
     * checked stands. (A first call, last_len 0, looks from s->checked.) */
    if (from < cap && memchr(buf + from, '\n', cap - from) != NULL) {
        const char *p = buf + s->checked;
        for (;;) {
            const char *eol = memchr(p, '\n', (size_t)(end - p));
            const char *q = p;
            int rc;
            if (!eol)
                break;
            ++eol; /* the line is [p, eol): parsed against eol, it cannot be incomplete */
            if (!(s->flags & SWS_HC_LINE)) {
                const char *m, *t;
                size_t ml, tl;
                int minor;
                if (*q == '\r' || *q == '\n') { /* an empty line before the request-line */
                    if (take_eol(&q, eol) != 0)
                        return 400; /* a bare CR */
                    p = eol;
                    s->checked = (uint32_t)(p - buf);
                    continue;
                }
                rc = parse_request_line(&q, eol, &m, &ml, &t, &tl, &minor);
                if (rc != 0)
                    return status_of(rc);
                if (tl > lim->max_target)
                    return 414;
                s->minor = (uint8_t)minor;
                s->flags |= SWS_HC_LINE | (ml == 4 && memcmp(m, "HEAD", 4) == 0 ? SWS_HC_HEAD : 0);
            } else {
                sws_header_t h;
                if (*q == '\r' || *q == '\n') { /* the empty line ending the head */
                    if (take_eol(&q, eol) != 0)
                        return 400; /* a bare CR */
                    break; /* the whole-head checks are the caller's */
                }
                if (s->fields >= lim->max_fields)
                    return 431;
                rc = parse_field_line(&q, eol, &h);
                if (rc != 0)
                    return status_of(rc);
                if ((rc = field_fault(s, &h)) != 0)
                    return rc;
                s->fields++;
            }
            p = eol;
            s->checked = (uint32_t)(p - buf);
        }
    }
    /* A fault sws_parse_request found in the line not ended yet: it lies
     * within max_head, so before the size's. */
    if (parse_rc < 0 && parse_rc != SWS_PARSE_INCOMPLETE)
        return status_of(parse_rc);
    if (len > lim->max_head) /* RFC 9112 §3: 414 for a request-line longer than we take */
        return (s->flags & SWS_HC_LINE) ? 431 : 414;
    return 0;
}

/* ---- response analysis ------------------------------------------------ */

int sws_analyze_response(int req_method, int minor_version, int status, const sws_header_t *headers,
                         size_t num_headers, sws_response_info_t *info)
{
    int bad = 0, conn_close = 0, conn_keepalive = 0, conn_upgrade = 0, upgrade_field = 0;
    /* RFC 9110 §9.3.6: a client MUST ignore CL and TE in a 2xx to CONNECT. */
    int tunnel = req_method == SWS_M_CONNECT && status >= 200 && status < 300;
    te_state_t te = {0};

    memset(info, 0, sizeof(*info));

    for (size_t i = 0; i < num_headers; ++i) {
        const sws_header_t *h = &headers[i];
        const char *p = h->value, *end = h->value + h->value_len, *el;
        size_t el_len;

        switch (h->name_len) {
        case 7:
            if (EQ_CI(h->name, h->name_len, "upgrade") && h->value_len != 0)
                upgrade_field = 1;
            break;
        case 10:
            if (EQ_CI(h->name, h->name_len, "connection")) {
                while (sws_list_next(&p, end, &el, &el_len)) {
                    if (EQ_CI(el, el_len, "close"))
                        conn_close = 1;
                    else if (EQ_CI(el, el_len, "keep-alive"))
                        conn_keepalive = 1;
                    else if (EQ_CI(el, el_len, "upgrade"))
                        conn_upgrade = 1;
                }
            }
            break;
        case 14:
            if (!tunnel && EQ_CI(h->name, h->name_len, "content-length")) {
                /* A second Content-Length is refused even when equal
                 * (RFC 9112 §6.3 p5 lets a recipient reject it). */
                if (info->has_content_length ||
                    parse_content_length(h->value, h->value_len, &info->content_length) != 0)
                    bad = 1;
                info->has_content_length = 1;
            }
            break;
        case 17:
            if (!tunnel && EQ_CI(h->name, h->name_len, "transfer-encoding"))
                te_field(&te, h->value, h->value_len);
            break;
        }
    }

    if (te.seen) {
        /* §6.3 p3: CL with TE; §6.1: TE in an HTTP/1.0 message is faulty
         * framing; a malformed coding list is garbage. */
        if (te.bad || te.codings == 0 || info->has_content_length || minor_version == 0)
            bad = 1;
        /* §6.1: a server MUST NOT send TE in a 1xx or 204. */
        if (status < 200 || status == 204)
            bad = 1;
    }
    /* RFC 9110 §8.6: a server MUST NOT send Content-Length in a 1xx or 204;
     * "0" is tolerated as harmless, anything else is refused. */
    if (info->has_content_length && info->content_length != 0 && (status < 200 || status == 204))
        bad = 1;

    /* RFC 9112 §6.3, in order. */
    if (tunnel || req_method == SWS_M_HEAD || status < 200 || status == 204 || status == 304)
        info->no_body = 1;
    else if (te.seen && te.chunked_last)
        info->chunked = 1;
    else if (te.seen || !info->has_content_length)
        info->close_delimited = 1;

    info->keepalive = conn_close ? 0 : (minor_version >= 1 || conn_keepalive);
    if (info->close_delimited)
        info->keepalive = 0;
    /* RFC 9110 §7.8: only a 101 switches; Upgrade elsewhere only advertises. */
    info->upgrade = (status == 101 && conn_upgrade && upgrade_field) ? 1 : 0;

    if (bad) {
        info->keepalive = 0;
        return -1;
    }
    return 0;
}
