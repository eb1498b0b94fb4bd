/*
 * test_http1.c — unit tests of csrc/http/http1.c (scalws/http1.h).
 *
 * Every input is placed against a PROT_NONE page (guard.h), so an over-read
 * by one byte crashes the run. Each parse case (requests and responses) runs whole, at every prefix
 * without last_len, and as a buffer growing one byte at a time with
 * last_len; each chunked case runs whole, split at every byte, and one byte
 * per call, through sws_decode_chunked and sws_skip_chunked (the same
 * answers, and the input left as it was). The Makefile builds this file
 * with and without SSE4.2 and compares the `--digest` output of both builds
 * over a pseudo-random corpus. The cases themselves are in
 * test_http1_cases.h.
 *
 * Usage: test_http1            run the tests, print "N passed, M failed"
 *        test_http1 --digest   print a hash of results over a generated corpus
 */
#include "scalws/http1.h"

#include <inttypes.h>
#include <stdint.h>

#include "guard.h"

#define B(s) s, sizeof(s) - 1
#define ALL  1000000 /* expected rc: success consuming the whole input */
#define MAXH 64

#include "test_http1_cases.h"

/* ---- request parser -------------------------------------------------- */

/* A parse result with pointers turned into offsets, so results from
 * different placements of the same input compare equal. */
typedef struct {
    int rc, minor;
    size_t m_off, m_len, t_off, t_len, nh;
    size_t h[MAXH][4];
} presult_t;

static presult_t run_parse(const char *buf, size_t len, size_t cap, size_t last_len)
{
    presult_t r;
    const char *m = NULL, *t = NULL;
    sws_header_t h[MAXH];
    memset(&r, 0, sizeof(r));
    r.nh = cap;
    r.rc = sws_parse_request(buf, len, &m, &r.m_len, &t, &r.t_len, &r.minor, h, &r.nh, last_len);
    if (r.rc > 0) {
        r.m_off = (size_t)(m - buf);
        r.t_off = (size_t)(t - buf);
        for (size_t i = 0; i < r.nh; ++i) {
            r.h[i][0] = (size_t)(h[i].name - buf);
            r.h[i][1] = h[i].name_len;
            r.h[i][2] = (size_t)(h[i].value - buf);
            r.h[i][3] = h[i].value_len;
        }
    } else {
        r.m_len = r.t_len = r.nh = 0;
        r.minor = 0;
    }
    return r;
}

static int same_result(const presult_t *a, const presult_t *b)
{
    if (a->rc != b->rc)
        return 0;
    if (a->rc <= 0)
        return 1;
    if (a->minor != b->minor || a->m_off != b->m_off || a->m_len != b->m_len ||
        a->t_off != b->t_off || a->t_len != b->t_len || a->nh != b->nh)
        return 0;
    return memcmp(a->h, b->h, sizeof(a->h[0]) * a->nh) == 0;
}

static int has_head_end(const char *s, size_t len)
{
    for (size_t i = 0; i + 1 < len; ++i)
        if (s[i] == '\n' && (s[i + 1] == '\n' || (s[i + 1] == '\r' && i + 2 < len && s[i + 2] == '\n')))
            return 1;
    return 0;
}

static void check_parse_case(const pcase_t *c)
{
    /* cap: 0 in the table means MAXH, (size_t)-1 means a capacity of 0 */
    size_t cap = c->cap == 0 ? MAXH : c->cap == (size_t)-1 ? 0 : c->cap;
    int want = c->rc == ALL ? (int)c->in_len : c->rc;
    const char *buf = guard_place(c->in, c->in_len);
    presult_t whole = run_parse(buf, c->in_len, cap, 0);

    CHECK(whole.rc == want, "[%s] rc %d, want %d", c->name, whole.rc, want);
    if (whole.rc > 0 && whole.rc == want) {
        size_t i = 0;
        CHECK(whole.m_len == strlen(c->method) && memcmp(buf + whole.m_off, c->method, whole.m_len) == 0,
              "[%s] method %.*s", c->name, (int)whole.m_len, buf + whole.m_off);
        CHECK(whole.t_len == strlen(c->target) && memcmp(buf + whole.t_off, c->target, whole.t_len) == 0,
              "[%s] target %.*s", c->name, (int)whole.t_len, buf + whole.t_off);
        CHECK(whole.minor == c->minor, "[%s] minor %d", c->name, whole.minor);
        for (; c->hdrs[2 * i] != NULL; ++i) {
            const char *n = c->hdrs[2 * i], *v = c->hdrs[2 * i + 1];
            CHECK(i < whole.nh, "[%s] header %zu missing", c->name, i);
            if (i >= whole.nh)
                break;
            CHECK(whole.h[i][1] == strlen(n) && memcmp(buf + whole.h[i][0], n, whole.h[i][1]) == 0,
                  "[%s] header %zu name %.*s", c->name, i, (int)whole.h[i][1], buf + whole.h[i][0]);
            CHECK(whole.h[i][3] == strlen(v) && memcmp(buf + whole.h[i][2], v, whole.h[i][3]) == 0,
                  "[%s] header %zu value '%.*s'", c->name, i, (int)whole.h[i][3], buf + whole.h[i][2]);
        }
        CHECK(i == whole.nh, "[%s] %zu headers, want %zu", c->name, whole.nh, i);
    }

    /* Every prefix, no last_len: INCOMPLETE, or the final result once it is
     * decided (a decided prefix stays decided). */
    {
        int decided = 0;
        for (size_t k = 0; k < c->in_len; ++k) {
            const char *p = guard_place(c->in, k);
            presult_t r = run_parse(p, k, cap, 0);
            if (r.rc == SWS_PARSE_INCOMPLETE) {
                CHECK(!decided, "[%s] prefix %zu incomplete after being decided", c->name, k);
            } else {
                decided = 1;
                CHECK(same_result(&r, &whole), "[%s] prefix %zu rc %d, whole %d", c->name, k, r.rc,
                      whole.rc);
            }
            if (whole.rc > 0)
                CHECK((r.rc == SWS_PARSE_INCOMPLETE) == (k < (size_t)whole.rc),
                      "[%s] prefix %zu rc %d", c->name, k, r.rc);
        }
    }

    /* Growing buffer with last_len, as the connection reads: INCOMPLETE until
     * the end of the head arrives, then the whole-input result. */
    {
        size_t last = 0;
        presult_t r = {0};
        r.rc = SWS_PARSE_INCOMPLETE;
        for (size_t k = 1; k <= c->in_len; ++k) {
            const char *p = guard_place(c->in, k);
            r = run_parse(p, k, cap, last);
            if (r.rc != SWS_PARSE_INCOMPLETE) {
                CHECK(same_result(&r, &whole), "[%s] grown to %zu rc %d, whole %d", c->name, k, r.rc,
                      whole.rc);
                if (whole.rc > 0)
                    CHECK(k == (size_t)whole.rc, "[%s] completed at %zu", c->name, k);
                break;
            }
            last = k;
        }
        if (r.rc == SWS_PARSE_INCOMPLETE && whole.rc != SWS_PARSE_INCOMPLETE)
            /* Documented: with last_len an error is only seen with the head's end. */
            CHECK(whole.rc < 0 && !has_head_end(c->in, c->in_len), "[%s] never completed", c->name);
    }
    t_end();
}

/* Scans of 1..40-byte tokens, targets and values with one bad byte at every
 * position, so each SSE block boundary and the scalar tail see it. */
static void check_scan_boundaries(void)
{
    char req[256];
    static const unsigned char bad_value[] = {0x00, 0x01, 0x08, 0x0b, 0x1f, 0x7f, '\r'};
    static const unsigned char ok_value[] = {'\t', ' ', '~', 0x80, 0xff};
    static const unsigned char bad_token[] = {' ', '"', '(', ',', '/', ':', '@', '[', ']', '{', '}',
                                              0x7f, 0x80, 0x00};
    static const unsigned char ok_token[] = {'~', '!', '|', '^', '`', 'z', '0', '\''};
    for (size_t n = 1; n <= 40; ++n) {
        for (size_t pos = 0; pos < n; ++pos) {
            /* field-value */
            for (size_t b = 0; b < sizeof(bad_value) + sizeof(ok_value); ++b) {
                int ok = b >= sizeof(bad_value);
                unsigned char c = ok ? ok_value[b - sizeof(bad_value)] : bad_value[b];
                int len = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nX: v");
                memset(req + len, 'v', n);
                req[len + pos] = (char)c;
                len += (int)n;
                len += snprintf(req + len, sizeof(req) - len, "v\r\n\r\n");
                presult_t r = run_parse(guard_place(req, len), len, MAXH, 0);
                CHECK(ok ? r.rc == len : r.rc == SWS_PARSE_ERROR, "value n=%zu pos=%zu byte %02x rc %d", n,
                      pos, c, r.rc);
            }
            /* field-name and method */
            for (size_t b = 0; b < sizeof(bad_token) + sizeof(ok_token); ++b) {
                int ok = b >= sizeof(bad_token);
                unsigned char c = ok ? ok_token[b - sizeof(bad_token)] : bad_token[b];
                int len = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\n");
                memset(req + len, 'N', n);
                req[len + pos] = (char)c;
                len += (int)n;
                len += snprintf(req + len, sizeof(req) - len, ": v\r\n\r\n");
                presult_t r = run_parse(guard_place(req, len), len, MAXH, 0);
                /* "NN:N: v" is name "NN", value "N: v" */
                int name_ok = ok || (c == ':' && pos > 0);
                CHECK(name_ok ? r.rc == len : r.rc == SWS_PARSE_ERROR, "name n=%zu pos=%zu byte %02x rc %d", n, pos,
                      c, r.rc);
                if (c == ' ')
                    continue; /* SP ends the method: "NN N / ..." is another error path */
                memset(req, 'M', n);
                req[pos] = (char)c;
                len = (int)n + snprintf(req + n, sizeof(req) - n, " / HTTP/1.1\r\n\r\n");
                r = run_parse(guard_place(req, len), len, MAXH, 0);
                CHECK(ok ? r.rc == len : r.rc == SWS_PARSE_ERROR, "method n=%zu pos=%zu byte %02x rc %d", n,
                      pos, c, r.rc);
            }
            /* request-target */
            for (int c = 0; c < 256; c += 1) {
                int ok = c > 0x20 && c != 0x7f;
                int len = snprintf(req, sizeof(req), "GET /");
                memset(req + len, 't', n);
                req[len + pos] = (char)c;
                len += (int)n;
                len += snprintf(req + len, sizeof(req) - len, " HTTP/1.1\r\n\r\n");
                presult_t r = run_parse(guard_place(req, len), len, MAXH, 0);
                if (c == ' ')
                    ok = 0; /* "/tt t HTTP/1.1": junk where the version goes */
                CHECK(ok ? r.rc == len : r.rc == SWS_PARSE_ERROR, "target n=%zu pos=%zu byte %02x rc %d", n,
                      pos, c, r.rc);
            }
        }
    }
    t_end();
}

/* ---- method ids and analysis ---------------------------------------- */

static void check_method_ids(void)
{
    static const struct { const char *m; int id; } t[] = {
        {"GET", SWS_M_GET},         {"HEAD", SWS_M_HEAD},       {"POST", SWS_M_POST},
        {"PUT", SWS_M_PUT},         {"DELETE", SWS_M_DELETE},   {"OPTIONS", SWS_M_OPTIONS},
        {"PATCH", SWS_M_PATCH},     {"CONNECT", SWS_M_CONNECT}, {"TRACE", SWS_M_TRACE},
        {"get", SWS_M_OTHER},       {"GETS", SWS_M_OTHER},      {"", SWS_M_OTHER},
        {"PROPFIND", SWS_M_OTHER},  {"POS", SWS_M_OTHER},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); ++i) {
        const char *m = guard_place(t[i].m, strlen(t[i].m));
        CHECK(sws_method_id(m, strlen(t[i].m)) == t[i].id, "method %s", t[i].m);
    }
    t_end();
}

static void check_analyze_case(const acase_t *c)
{
    const char *m, *t;
    size_t ml, tl, nh = MAXH, len = strlen(c->head);
    int minor;
    sws_header_t h[MAXH];
    sws_request_info_t info;
    const char *buf = guard_place(c->head, len);
    int rc = sws_parse_request(buf, len, &m, &ml, &t, &tl, &minor, h, &nh, 0);
    CHECK(rc == (int)len, "[%s] parse rc %d", c->name, rc);
    if (rc != (int)len) {
        t_end();
        return;
    }
    int st = sws_analyze_request(m, ml, minor, h, nh, &info);
    CHECK(st == c->status, "[%s] status %d, want %d", c->name, st, c->status);
    if (c->cl >= 0)
        CHECK(info.has_content_length && info.content_length == (uint64_t)c->cl, "[%s] content_length %" PRIu64,
              c->name, info.content_length);
    else if (c->cl == -1)
        CHECK(!info.has_content_length, "[%s] has_content_length", c->name);
    CHECK(info.chunked == c->chunked, "[%s] chunked %u", c->name, info.chunked);
    CHECK(info.keepalive == c->keepalive, "[%s] keepalive %u", c->name, info.keepalive);
    CHECK(info.expect_continue == c->expect, "[%s] expect_continue %u", c->name, info.expect_continue);
    CHECK(info.upgrade == c->upgrade, "[%s] upgrade %u", c->name, info.upgrade);
    CHECK(info.method == c->method, "[%s] method %d", c->name, info.method);
    if (c->host) {
        CHECK(info.has_host && info.host_len == strlen(c->host) && memcmp(info.host, c->host, info.host_len) == 0,
              "[%s] host '%.*s'", c->name, (int)info.host_len, info.host ? info.host : "");
    } else {
        CHECK(!info.has_host && info.host == NULL, "[%s] has_host", c->name);
    }
    t_end();
}

/* ---- response parser ------------------------------------------------- */

typedef struct {
    int rc, minor, status;
    size_t r_off, r_len, nh;
    size_t h[MAXH][4];
} rresult_t;

static rresult_t run_parse_response(const char *buf, size_t len, size_t cap, size_t last_len)
{
    rresult_t r;
    const char *reason = NULL;
    sws_header_t h[MAXH];
    memset(&r, 0, sizeof(r));
    r.nh = cap;
    r.rc = sws_parse_response(buf, len, &r.minor, &r.status, &reason, &r.r_len, h, &r.nh, last_len);
    if (r.rc > 0) {
        r.r_off = (size_t)(reason - buf);
        for (size_t i = 0; i < r.nh; ++i) {
            r.h[i][0] = (size_t)(h[i].name - buf);
            r.h[i][1] = h[i].name_len;
            r.h[i][2] = (size_t)(h[i].value - buf);
            r.h[i][3] = h[i].value_len;
        }
    } else {
        r.minor = r.status = 0;
        r.r_len = r.nh = 0;
    }
    return r;
}

static int same_rresult(const rresult_t *a, const rresult_t *b)
{
    if (a->rc != b->rc)
        return 0;
    if (a->rc <= 0)
        return 1;
    if (a->minor != b->minor || a->status != b->status || a->r_off != b->r_off || a->r_len != b->r_len ||
        a->nh != b->nh)
        return 0;
    return memcmp(a->h, b->h, sizeof(a->h[0]) * a->nh) == 0;
}

static void check_response_case(const rcase_t *c)
{
    size_t cap = c->cap == 0 ? MAXH : c->cap == (size_t)-1 ? 0 : c->cap;
    int want = c->rc == ALL ? (int)c->in_len : c->rc;
    const char *buf = guard_place(c->in, c->in_len);
    rresult_t whole = run_parse_response(buf, c->in_len, cap, 0);

    CHECK(whole.rc == want, "[%s] rc %d, want %d", c->name, whole.rc, want);
    if (whole.rc > 0 && whole.rc == want) {
        size_t i = 0;
        CHECK(whole.minor == c->minor, "[%s] minor %d", c->name, whole.minor);
        CHECK(whole.status == c->status, "[%s] status %d", c->name, whole.status);
        CHECK(whole.r_len == strlen(c->reason) && memcmp(buf + whole.r_off, c->reason, whole.r_len) == 0 &&
                  whole.r_off + whole.r_len <= (size_t)whole.rc,
              "[%s] reason '%.*s'", c->name, (int)whole.r_len, buf + whole.r_off);
        for (; c->hdrs[2 * i] != NULL; ++i) {
            const char *n = c->hdrs[2 * i], *v = c->hdrs[2 * i + 1];
            CHECK(i < whole.nh, "[%s] header %zu missing", c->name, i);
            if (i >= whole.nh)
                break;
            CHECK(whole.h[i][1] == strlen(n) && memcmp(buf + whole.h[i][0], n, whole.h[i][1]) == 0,
                  "[%s] header %zu name %.*s", c->name, i, (int)whole.h[i][1], buf + whole.h[i][0]);
            CHECK(whole.h[i][3] == strlen(v) && memcmp(buf + whole.h[i][2], v, whole.h[i][3]) == 0,
                  "[%s] header %zu value '%.*s'", c->name, i, (int)whole.h[i][3], buf + whole.h[i][2]);
        }
        CHECK(i == whole.nh, "[%s] %zu headers, want %zu", c->name, whole.nh, i);
    }

    /* every prefix without last_len */
    {
        int decided = 0;
        for (size_t k = 0; k < c->in_len; ++k) {
            const char *p = guard_place(c->in, k);
            rresult_t r = run_parse_response(p, k, cap, 0);
            if (r.rc == SWS_PARSE_INCOMPLETE) {
                CHECK(!decided, "[%s] prefix %zu incomplete after being decided", c->name, k);
            } else {
                decided = 1;
                CHECK(same_rresult(&r, &whole), "[%s] prefix %zu rc %d, whole %d", c->name, k, r.rc,
                      whole.rc);
            }
            if (whole.rc > 0)
                CHECK((r.rc == SWS_PARSE_INCOMPLETE) == (k < (size_t)whole.rc), "[%s] prefix %zu rc %d",
                      c->name, k, r.rc);
        }
    }

    /* growing buffer with last_len */
    {
        size_t last = 0;
        rresult_t r = {0};
        r.rc = SWS_PARSE_INCOMPLETE;
        for (size_t k = 1; k <= c->in_len; ++k) {
            const char *p = guard_place(c->in, k);
            r = run_parse_response(p, k, cap, last);
            if (r.rc != SWS_PARSE_INCOMPLETE) {
                CHECK(same_rresult(&r, &whole), "[%s] grown to %zu rc %d, whole %d", c->name, k, r.rc,
                      whole.rc);
                if (whole.rc > 0)
                    CHECK(k == (size_t)whole.rc, "[%s] completed at %zu", c->name, k);
                break;
            }
            last = k;
        }
        if (r.rc == SWS_PARSE_INCOMPLETE && whole.rc != SWS_PARSE_INCOMPLETE)
            CHECK(whole.rc < 0 && !has_head_end(c->in, c->in_len), "[%s] never completed", c->name);
    }
    t_end();
}

/* A reason phrase of 1..40 bytes with one byte at every position: both the
 * SSE blocks and the scalar tail must judge it. */
static void check_reason_boundaries(void)
{
    char resp[128];
    for (size_t n = 1; n <= 40; ++n) {
        for (size_t pos = 0; pos < n; ++pos) {
            for (int c = 0; c < 256; ++c) {
                int ok = c == '\t' || (c >= 0x20 && c != 0x7f);
                int len = snprintf(resp, sizeof(resp), "HTTP/1.1 200 ");
                memset(resp + len, 'r', n);
                resp[len + pos] = (char)c;
                len += (int)n;
                len += snprintf(resp + len, sizeof(resp) - len, "r\r\n\r\n");
                rresult_t r = run_parse_response(guard_place(resp, len), len, MAXH, 0);
                /* CR or LF inside leaves "r..r\r\n" as a field line without ":" */
                CHECK(ok ? (r.rc == len && r.r_len == n + 1) : r.rc == SWS_PARSE_ERROR,
                      "reason n=%zu pos=%zu byte %02x rc %d", n, pos, c, r.rc);
            }
        }
    }
    t_end();
}

/* ---- response analysis ------------------------------------------------ */

static void check_ranalyze_case(const racase_t *c)
{
    const char *reason;
    size_t rl, nh = MAXH, len = strlen(c->head);
    int minor, status;
    sws_header_t h[MAXH];
    sws_response_info_t info;
    const char *buf = guard_place(c->head, len);
    int rc = sws_parse_response(buf, len, &minor, &status, &reason, &rl, h, &nh, 0);
    CHECK(rc == (int)len, "[%s] parse rc %d", c->name, rc);
    if (rc != (int)len) {
        t_end();
        return;
    }
    memset(&info, 0xa5, sizeof(info)); /* every field must be written */
    rc = sws_analyze_response(c->req_method, minor, status, h, nh, &info);
    CHECK(rc == c->rc, "[%s] rc %d, want %d", c->name, rc, c->rc);
    if (c->cl >= 0)
        CHECK(info.has_content_length && info.content_length == (uint64_t)c->cl, "[%s] content_length %" PRIu64,
              c->name, info.content_length);
    else if (c->cl == -1)
        CHECK(!info.has_content_length, "[%s] has_content_length", c->name);
    CHECK(info.chunked == c->chunked, "[%s] chunked %u", c->name, info.chunked);
    CHECK(info.close_delimited == c->close_delimited, "[%s] close_delimited %u", c->name, info.close_delimited);
    CHECK(info.no_body == c->no_body, "[%s] no_body %u", c->name, info.no_body);
    CHECK(info.keepalive == c->keepalive, "[%s] keepalive %u", c->name, info.keepalive);
    CHECK(info.upgrade == c->upgrade, "[%s] upgrade %u", c->name, info.upgrade);
    CHECK(info.chunked + info.close_delimited + info.no_body <= 1, "[%s] one framing", c->name);
    if (rc == 0)
        CHECK(info.chunked || info.close_delimited || info.no_body || info.has_content_length,
              "[%s] some framing", c->name);
    t_end();
}

/* ---- chunked decoder -------------------------------------------------- */

static void build_big_inputs(ccase_t *cases, size_t n)
{
    /* "1;" + name: SWS_CHUNK_EXT_MAX - 1 + 2 bytes of extension. */
    memcpy(big_ext, "1;", 2);
    memset(big_ext + 2, 'a', sizeof(big_ext) - 2);
    /* "1;" + name: exactly SWS_CHUNK_EXT_MAX bytes of chunk-ext, then CRLF. */
    size_t len = 0;
    memcpy(ok_ext, "1;", 2);
    len = 2;
    memset(ok_ext + len, 'e', SWS_CHUNK_EXT_MAX - 1);
    len += SWS_CHUNK_EXT_MAX - 1;
    memcpy(ok_ext + len, "\r\na\r\n0\r\n\r\n", 10);
    len += 10;
    for (size_t i = 0; i < n; ++i)
        if (cases[i].in == ok_ext)
            cases[i].in_len = len;
    memcpy(big_trailer, "0\r\nX: ", 6);
    memset(big_trailer + 6, 'v', sizeof(big_trailer) - 6);
}

/* Feeds the pieces split at the given offsets (ascending, ending at len);
 * returns the final status, the decoded body and the rest. */
static int feed_chunked(const char *in, size_t len, const size_t *cuts, size_t ncuts, char *body,
                        size_t *body_len, char *rest, size_t *rest_len, uint64_t *total)
{
    sws_chunked_decoder_t d;
    size_t from = 0;
    ssize_t rc = SWS_PARSE_INCOMPLETE;
    memset(&d, 0, sizeof(d));
    *body_len = *rest_len = 0;
    for (size_t i = 0; i < ncuts; ++i) {
        size_t n = cuts[i] - from;
        char *buf = guard_place(in + from, n);
        size_t sz = n;
        rc = sws_decode_chunked(&d, buf, &sz);
        if (sz > n)
            return 99;
        memcpy(body + *body_len, buf, sz);
        *body_len += sz;
        from = cuts[i];
        if (rc >= 0) {
            if ((size_t)rc + sz > n)
                return 98;
            memcpy(rest, buf + sz, (size_t)rc);
            memcpy(rest + rc, in + from, len - from);
            *rest_len = (size_t)rc + (len - from);
            rc = (ssize_t)*rest_len; /* bytes after the body, over all pieces */
            break;
        }
        if (rc == SWS_PARSE_ERROR)
            break;
    }
    *total = d.total;
    return (int)rc;
}

/* The same pieces through sws_skip_chunked: the status (bytes after the
 * body, over all pieces), the body bytes counted; *moved when a piece
 * changed. */
static int feed_skip(const char *in, size_t len, const size_t *cuts, size_t ncuts, uint64_t *total,
                     int *moved)
{
    sws_chunked_decoder_t d = {0};
    size_t from = 0;
    ssize_t rc = SWS_PARSE_INCOMPLETE;
    *moved = 0;
    for (size_t i = 0; i < ncuts; ++i) {
        size_t n = cuts[i] - from;
        const char *buf = guard_place(in + from, n);
        rc = sws_skip_chunked(&d, buf, n);
        *moved |= memcmp(buf, in + from, n) != 0;
        from = cuts[i];
        if (rc >= 0) {
            rc += (ssize_t)(len - from);
            break;
        }
        if (rc == SWS_PARSE_ERROR)
            break;
    }
    *total = d.total;
    return (int)rc;
}

static void check_chunked_case(const ccase_t *c)
{
    static char body[2 * GUARD_MAX / 16], rest[2 * GUARD_MAX / 16];
    static size_t cuts[SWS_CHUNK_TRAILER_MAX + 256];
    size_t blen, rlen, want_body = strlen(c->body);
    uint64_t total;
    int rc;

    /* whole, then split once at every offset, then one byte per call */
    for (size_t mode = 0; mode <= c->in_len + 1; ++mode) {
        size_t ncuts;
        if (mode == 0 || mode == c->in_len) {
            cuts[0] = c->in_len;
            ncuts = 1;
        } else if (mode < c->in_len) {
            cuts[0] = mode;
            cuts[1] = c->in_len;
            ncuts = 2;
        } else {
            for (ncuts = 0; ncuts < c->in_len; ++ncuts)
                cuts[ncuts] = ncuts + 1;
        }
        if (c->in_len > 2000 && mode > 0 && mode <= c->in_len)
            continue; /* the large limit cases run whole and byte by byte only */
        rc = feed_chunked(c->in, c->in_len, cuts, ncuts, body, &blen, rest, &rlen, &total);
        CHECK(rc == c->rc, "[%s] mode %zu rc %d, want %d", c->name, mode, rc, c->rc);
        if (c->rc == SWS_PARSE_ERROR)
            CHECK(blen <= want_body && memcmp(body, c->body, blen) == 0, "[%s] mode %zu body before error",
                  c->name, mode);
        else
            CHECK(blen == want_body && memcmp(body, c->body, blen) == 0 && total == want_body,
                  "[%s] mode %zu body '%.*s'", c->name, mode, (int)blen, body);
        if (rc >= 0)
            CHECK(rlen == (size_t)c->rc &&
                      memcmp(rest, c->in + c->in_len - rlen, rlen) == 0,
                  "[%s] mode %zu rest", c->name, mode);
        /* skipping: the same answer and count, and the input untouched */
        uint64_t stotal;
        int moved, src = feed_skip(c->in, c->in_len, cuts, ncuts, &stotal, &moved);
        CHECK(src == rc && (rc == SWS_PARSE_ERROR || stotal == total) && !moved,
              "[%s] mode %zu skip rc %d total %" PRIu64 " moved %d", c->name, mode, src, stotal, moved);
    }
    t_end();
}

static void check_chunked_after_end(void)
{
    sws_chunked_decoder_t d = {0};
    char *buf = guard_place(B("0\r\n\r\nXY"));
    size_t sz = 7;
    CHECK(sws_decode_chunked(&d, buf, &sz) == 2 && sz == 0 && memcmp(buf, "XY", 2) == 0, "first");
    buf = guard_place(B("abc"));
    sz = 3;
    CHECK(sws_decode_chunked(&d, buf, &sz) == 3 && sz == 0, "after end: all input follows the body");
    /* an error is sticky */
    memset(&d, 0, sizeof(d));
    buf = guard_place(B("z"));
    sz = 1;
    CHECK(sws_decode_chunked(&d, buf, &sz) == SWS_PARSE_ERROR, "error");
    buf = guard_place(B("0\r\n\r\n"));
    sz = 5;
    CHECK(sws_decode_chunked(&d, buf, &sz) == SWS_PARSE_ERROR && sz == 0, "error is sticky");
    /* an empty call changes nothing */
    memset(&d, 0, sizeof(d));
    buf = guard_place("", 0);
    sz = 0;
    CHECK(sws_decode_chunked(&d, buf, &sz) == SWS_PARSE_INCOMPLETE && sz == 0, "empty");
    t_end();
}

/* te_trailers: "trailers" in a TE list, any field, any case; HTTP/1.1 only. */
static void check_te_trailers(void)
{
    static const struct {
        const char *req;
        unsigned want;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nHost: a\r\nte: deflate;q=0.5 , Trailers\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nHost: a\r\nTE: gzip\r\nTE: ,trailers\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nHost: a\r\nTE: trailers-x, gzip\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a\r\nX-TE: trailers\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nTE: trailers\r\n\r\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *m, *t;
        size_t ml, tl, nh = MAXH;
        int minor;
        sws_header_t h[MAXH];
        sws_request_info_t info;
        size_t len = strlen(cases[i].req);
        int n = sws_parse_request(guard_place(cases[i].req, len), len, &m, &ml, &t, &tl, &minor,
                                  h, &nh, 0);
        CHECK(n > 0 && sws_analyze_request(m, ml, minor, h, nh, &info) == 0, "[%zu] parsed", i);
        CHECK(info.te_trailers == cases[i].want, "[%zu] te_trailers %u", i, info.te_trailers);
    }
    t_end();
}

/* keep_trailers: the trailer section's field lines come out after the body
 * bytes of each call, in order, whatever the split; the status, body and
 * bytes after the body are those of the plain decoder. */
static void check_kept_trailers(void)
{
    static const struct {
        const char *name, *in;
        size_t in_len;
        int rc;
        const char *body, *trailers;
    } cases[] = {
        {"trailers", B("2\r\nab\r\n0\r\nX: y\r\nZ:\r\nW: \x80\t\r\n\r\nNEXT"), 4, "ab",
         "X: y\r\nZ:\r\nW: \x80\t\r\n"},
        {"no body", B("0\r\nChecksum: abc\r\n\r\n"), 0, "", "Checksum: abc\r\n"},
        {"none", B("3\r\nabc\r\n0\r\n\r\nXY"), 2, "abc", ""},
        {"incomplete", B("1\r\na\r\n0\r\nA: 1\r\nB"), SWS_PARSE_INCOMPLETE, "a", "A: 1\r\nB"},
        {"bad line", B("1\r\na\r\n0\r\nA : 1\r\n\r\n"), SWS_PARSE_ERROR, "a", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len = cases[k].in_len;
        for (size_t cut = 0; cut <= len + 1; cut++) { /* whole, one split, byte by byte */
            sws_chunked_decoder_t d = {0};
            d.keep_trailers = 1;
            char body[256], tr[256], rest[256];
            size_t blen = 0, tlen = 0, rlen = 0, from = 0;
            int rc = SWS_PARSE_INCOMPLETE;
            while (from < len && rc == SWS_PARSE_INCOMPLETE) {
                size_t n = cut == 0 || cut == len ? len : cut < len ? (from < cut ? cut : len) - from : 1;
                char *buf = guard_place(cases[k].in + from, n);
                size_t sz = n;
                rc = (int)sws_decode_chunked(&d, buf, &sz);
                CHECK(sz + d.trailer_out <= n, "[%s] cut %zu: within the piece", cases[k].name, cut);
                memcpy(body + blen, buf, sz);
                blen += sz;
                memcpy(tr + tlen, buf + sz, d.trailer_out);
                tlen += d.trailer_out;
                from += n;
                if (rc >= 0) {
                    memcpy(rest, buf + sz + d.trailer_out, (size_t)rc);
                    memcpy(rest + rc, cases[k].in + from, len - from);
                    rlen = (size_t)rc + len - from;
                    rc = (int)rlen;
                }
            }
            CHECK(rc == cases[k].rc, "[%s] cut %zu: rc %d", cases[k].name, cut, rc);
            CHECK(blen == strlen(cases[k].body) && memcmp(body, cases[k].body, blen) == 0,
                  "[%s] cut %zu: body", cases[k].name, cut);
            if (cases[k].trailers)
                CHECK(tlen == strlen(cases[k].trailers) && memcmp(tr, cases[k].trailers, tlen) == 0,
                      "[%s] cut %zu: trailers '%.*s'", cases[k].name, cut, (int)tlen, tr);
            if (rc >= 0)
                CHECK(memcmp(rest, cases[k].in + len - rlen, rlen) == 0, "[%s] cut %zu: rest",
                      cases[k].name, cut);
        }
    }
    t_end();
}

/* ---- digest: SSE and scalar builds must agree ------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static int digest(void)
{
    static const char *seeds[] = {
        "GET /index.html?a=b HTTP/1.1\r\nHost: example.com\r\nUser-Agent: scalws-test/1.0 (x86_64)\r\n"
        "Accept: */*\r\nX-Long-Header-Name-For-SSE~: value with\ttab and \x80\xff obs-text\r\n\r\n",
        "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: keep-alive, Upgrade\r\n"
        "Upgrade: websocket\r\nExpect: 100-continue\r\n\r\nhello",
        "PUT /x HTTP/1.0\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "5;ext=\"v\"\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n\r\n",
    };
    static const char noise[] = " \t\r\n\0:;,\"\x7f\x80\xff~!/?HTP10.";
    char in[512];
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int iter = 0; iter < 300000; ++iter) {
        const char *s = seeds[rng() % 4];
        size_t len = strlen(s);
        memcpy(in, s, len);
        for (int k = (int)(rng() % 4); k > 0; --k) {
            size_t pos = rng() % len;
            switch (rng() % 3) {
            case 0:
                in[pos] = noise[rng() % (sizeof(noise) - 1)];
                break;
            case 1:
                if (len < sizeof(in) - 1) {
                    memmove(in + pos + 1, in + pos, len - pos);
                    in[pos] = noise[rng() % (sizeof(noise) - 1)];
                    ++len;
                }
                break;
            default:
                memmove(in + pos, in + pos + 1, len - pos - 1);
                --len;
            }
        }
        {
            presult_t r = run_parse(guard_place(in, len), len, 8, 0);
            h = fnv(h, &r.rc, sizeof(r.rc));
            if (r.rc > 0) {
                sws_request_info_t info;
                const char *buf = guard_place(in, len);
                sws_header_t hd[8];
                h = fnv(h, &r.minor, sizeof(r.minor));
                h = fnv(h, &r.m_len, sizeof(r.m_len));
                h = fnv(h, &r.t_len, sizeof(r.t_len));
                h = fnv(h, r.h, sizeof(r.h[0]) * r.nh);
                for (size_t i = 0; i < r.nh; ++i) {
                    hd[i].name = buf + r.h[i][0];
                    hd[i].name_len = r.h[i][1];
                    hd[i].value = buf + r.h[i][2];
                    hd[i].value_len = r.h[i][3];
                }
                int st = sws_analyze_request(buf + r.m_off, r.m_len, r.minor, hd, r.nh, &info);
                unsigned flags = info.has_content_length | info.chunked << 1 | info.keepalive << 2 |
                                 info.expect_continue << 3 | info.upgrade << 4 | info.has_host << 5;
                h = fnv(h, &st, sizeof(st));
                h = fnv(h, &flags, sizeof(flags));
            }
        }
        {
            sws_chunked_decoder_t d = {0};
            char *buf = guard_place(in, len);
            size_t sz = len;
            ssize_t rc = sws_decode_chunked(&d, buf, &sz);
            h = fnv(h, &rc, sizeof(rc));
            h = fnv(h, buf, sz);
        }
        {
            /* an incomplete head: what its lines decide (the scans of
             * sws_check_request_head are the parser's) */
            static const sws_head_limits_t lim = {256, 64, 8};
            sws_head_check_t hs = {0};
            int st = sws_check_request_head(&hs, guard_place(in, len), len, 0, SWS_PARSE_INCOMPLETE, &lim);
            h = fnv(h, &st, sizeof(st));
            h = fnv(h, &hs, sizeof(hs));
        }
    }
    /* responses: the same mutations over response heads */
    {
        static const char *rseeds[] = {
            "HTTP/1.1 200 OK, and a reason longer than sixteen\r\nContent-Length: 5\r\n"
            "X-Long-Header-Name-For-SSE~: value with\ttab and \x80\xff obs-text\r\n\r\nhello",
            "HTTP/1.0 101\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
            "Transfer-Encoding: gzip, chunked\r\n\r\n",
        };
        static const int methods[] = {SWS_M_GET, SWS_M_HEAD, SWS_M_CONNECT};
        for (int iter = 0; iter < 100000; ++iter) {
            const char *s = rseeds[rng() % 2];
            size_t len = strlen(s);
            memcpy(in, s, len);
            for (int k = (int)(rng() % 4); k > 0; --k) {
                size_t pos = rng() % len;
                switch (rng() % 3) {
                case 0:
                    in[pos] = noise[rng() % (sizeof(noise) - 1)];
                    break;
                case 1:
                    if (len < sizeof(in) - 1) {
                        memmove(in + pos + 1, in + pos, len - pos);
                        in[pos] = noise[rng() % (sizeof(noise) - 1)];
                        ++len;
                    }
                    break;
                default:
                    memmove(in + pos, in + pos + 1, len - pos - 1);
                    --len;
                }
            }
            const char *buf = guard_place(in, len);
            rresult_t r = run_parse_response(buf, len, 8, 0);
            h = fnv(h, &r.rc, sizeof(r.rc));
            if (r.rc > 0) {
                sws_header_t hd[8];
                sws_response_info_t info;
                h = fnv(h, &r.minor, sizeof(r.minor));
                h = fnv(h, &r.status, sizeof(r.status));
                h = fnv(h, &r.r_off, sizeof(r.r_off));
                h = fnv(h, &r.r_len, sizeof(r.r_len));
                h = fnv(h, r.h, sizeof(r.h[0]) * r.nh);
                for (size_t i = 0; i < r.nh; ++i) {
                    hd[i].name = buf + r.h[i][0];
                    hd[i].name_len = r.h[i][1];
                    hd[i].value = buf + r.h[i][2];
                    hd[i].value_len = r.h[i][3];
                }
                int st = sws_analyze_response(methods[iter % 3], r.minor, r.status, hd, r.nh, &info);
                unsigned flags = info.has_content_length | info.chunked << 1 | info.keepalive << 2 |
                                 info.close_delimited << 3 | info.no_body << 4 | info.upgrade << 5;
                h = fnv(h, &st, sizeof(st));
                h = fnv(h, &flags, sizeof(flags));
            }
        }
    }
    printf("%016" PRIx64 "\n", h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--digest") == 0)
        return digest();

    for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]); ++i)
        check_parse_case(&parse_cases[i]);
    check_scan_boundaries();
    check_method_ids();
    for (size_t i = 0; i < sizeof(analyze_cases) / sizeof(analyze_cases[0]); ++i)
        check_analyze_case(&analyze_cases[i]);
    build_big_inputs(chunked_cases, sizeof(chunked_cases) / sizeof(chunked_cases[0]));
    for (size_t i = 0; i < sizeof(chunked_cases) / sizeof(chunked_cases[0]); ++i)
        check_chunked_case(&chunked_cases[i]);
    check_chunked_after_end();
    check_kept_trailers();
    check_te_trailers();
    for (size_t i = 0; i < sizeof(response_cases) / sizeof(response_cases[0]); ++i)
        check_response_case(&response_cases[i]);
    check_reason_boundaries();
    for (size_t i = 0; i < sizeof(ranalyze_cases) / sizeof(ranalyze_cases[0]); ++i)
        check_ranalyze_case(&ranalyze_cases[i]);
    return t_summary();
}
