/* csrc/http/fcgi.c (FastCGI records) and sws_parse_cgi_head (http1.c).
 * Inputs to the decoders end at a PROT_NONE page (guard.h), so a one-byte
 * over-read crashes the test. */
#include "guard.h"
#include "scalws/fcgi.h"
#include "scalws/http1.h"

#include <stdint.h>

/* ---- building streams ---------------------------------------------------- */

static char stream[8192];
static size_t slen;

static void s_reset(void) { slen = 0; }

static void s_rec(int ver, int type, uint16_t id, const void *c, size_t clen, size_t pad)
{
    sws_fcgi_header(stream + slen, type, id, clen, pad);
    stream[slen] = (char)ver;
    memcpy(stream + slen + 8, c, clen);
    memset(stream + slen + 8 + clen, 0x5a, pad); /* padding bytes are ignored, whatever they are */
    slen += 8 + clen + pad;
}

static void s_raw(const void *p, size_t n)
{
    memcpy(stream + slen, p, n);
    slen += n;
}

static void s_end(uint32_t app, uint8_t ps, size_t pad)
{
    uint8_t b[8] = {(uint8_t)(app >> 24), (uint8_t)(app >> 16), (uint8_t)(app >> 8), (uint8_t)app, ps,
                    0, 0, 0};
    s_rec(1, SWS_FCGI_END_REQUEST, 1, b, 8, pad);
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct {
    char out[8192], err[8192];
    size_t olen, elen, consumed;
    int error;
    sws_fcgi_dec_t d;
} dec_t;

static void grab_err(void *ctx, const char *p, size_t n)
{
    dec_t *r = ctx;
    memcpy(r->err + r->elen, p, n);
    r->elen += n;
}

/* Feeds stream[0..slen) in pieces of `step` bytes (0: whole), each placed
 * against the guard page. */
static void decode(dec_t *r, size_t step)
{
    memset(r, 0, sizeof(*r));
    r->d.id = 1;
    for (size_t off = 0; off < slen || (off == 0 && slen == 0);) {
        size_t k = step && slen - off > step ? step : slen - off, out = 0;
        char *p = guard_place(stream + off, k);
        ssize_t n = sws_fcgi_decode(&r->d, p, k, &out, grab_err, r);
        if (n < 0) {
            r->error = 1;
            return;
        }
        CHECK((size_t)n <= k && out <= (size_t)n, "consumed %zd of %zu, out %zu", n, k, out);
        memcpy(r->out + r->olen, p, out);
        r->olen += out;
        r->consumed += (size_t)n;
        off += k;
        if (k == 0)
            break;
    }
}

/* The stream decodes, whole and byte by byte, to these. */
static void dec_ok(const char *what, const char *out, size_t olen, const char *err, size_t elen,
                   size_t consumed, int ended, uint32_t app, uint8_t ps)
{
    static const size_t steps[] = {0, 1, 3, 8, 9};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        dec_t r;
        decode(&r, steps[i]);
        CHECK(!r.error, "%s step %zu: error", what, steps[i]);
        if (r.error)
            continue;
        CHECK(r.olen == olen && memcmp(r.out, out, olen) == 0, "%s step %zu: stdout %.*s", what,
              steps[i], (int)r.olen, r.out);
        CHECK(r.elen == elen && memcmp(r.err, err, elen) == 0, "%s step %zu: stderr %.*s", what,
              steps[i], (int)r.elen, r.err);
        CHECK(r.consumed == consumed, "%s step %zu: consumed %zu want %zu", what, steps[i],
              r.consumed, consumed);
        CHECK(r.d.ended == (unsigned)ended, "%s step %zu: ended %u", what, steps[i], r.d.ended);
        if (ended)
            CHECK(r.d.app_status == app && r.d.protocol_status == ps, "%s: app %u ps %u", what,
                  r.d.app_status, r.d.protocol_status);
    }
    t_end();
}

static void dec_bad(const char *what)
{
    static const size_t steps[] = {0, 1, 5};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        dec_t r;
        decode(&r, steps[i]);
        CHECK(r.error, "%s step %zu: no error", what, steps[i]);
    }
    t_end();
}

#define S(lit) lit, sizeof(lit) - 1

static void test_encoder(void)
{
    unsigned char h[8], b[SWS_FCGI_BEGIN_LEN];
    static const unsigned char want_h[8] = {1, 5, 0x12, 0x34, 0xab, 0xcd, 7, 0};
    sws_fcgi_header((char *)h, SWS_FCGI_STDIN, 0x1234, 0xabcd, 7);
    CHECK(memcmp(h, want_h, 8) == 0, "header bytes");
    t_end();

    static const unsigned char keep[16] = {1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
    static const unsigned char nokeep[16] = {1, 1, 0x01, 0x02, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
    memset(b, 0xee, sizeof(b));
    sws_fcgi_begin((char *)b, 1, 1);
    CHECK(memcmp(b, keep, 16) == 0, "BEGIN_REQUEST with KEEP_CONN");
    memset(b, 0xee, sizeof(b));
    sws_fcgi_begin((char *)b, 0x0102, 0);
    CHECK(memcmp(b, nokeep, 16) == 0, "BEGIN_REQUEST without KEEP_CONN");
    t_end();
}

typedef struct {
    int n;
    const char *name[4], *value[4];
    size_t nl[4], vl[4];
} pairs_t;

static void grab_pair(void *ctx, const char *n, size_t nl, const char *v, size_t vl)
{
    pairs_t *p = ctx;
    if (p->n < 4) {
        p->name[p->n] = n;
        p->nl[p->n] = nl;
        p->value[p->n] = v;
        p->vl[p->n] = vl;
    }
    p->n++;
}

static void test_nv(void)
{
    static char name[200], value[70000], buf[71000];
    memset(name, 'N', sizeof(name));
    memset(value, 'v', sizeof(value));

    /* 127: one length byte; 128: four, high bit set */
    CHECK(sws_fcgi_nv_len(127, 127) == 1 + 1 + 254, "nv_len 127");
    CHECK(sws_fcgi_nv_len(128, 0) == 4 + 1 + 128, "nv_len 128");
    CHECK(sws_fcgi_nv_len(0, 70000) == 1 + 4 + 70000, "nv_len large");
    char *e = sws_fcgi_nv(buf, name, 127, value, 128);
    CHECK(e == buf + sws_fcgi_nv_len(127, 128), "nv end");
    CHECK((unsigned char)buf[0] == 127 && memcmp(buf + 1, "\x80\x00\x00\x80", 4) == 0 &&
              buf[5] == 'N' && buf[5 + 126] == 'N' && buf[5 + 127] == 'v',
          "nv 127/128 bytes");
    t_end();

    e = sws_fcgi_nv(buf, "BIG", 3, value, 70000); /* 70000 = 0x11170 */
    CHECK(e == buf + 1 + 4 + 3 + 70000 && buf[0] == 3 && memcmp(buf + 1, "\x80\x01\x11\x70", 4) == 0,
          "nv large value");
    t_end();

    /* value NULL: an empty one (as PATH_INFO without a split) copies nothing
     * (UBSan: memcpy from NULL), a long one leaves its bytes to the caller
     * (SCRIPT_FILENAME, root and name) */
    memset(buf, '?', 16);
    e = sws_fcgi_nv(buf, "PATH_INFO", 9, NULL, 0);
    CHECK(e == buf + 2 + 9 && buf[0] == 9 && buf[1] == 0 && memcmp(buf + 2, "PATH_INFO", 9) == 0,
          "nv NULL empty value");
    memset(buf, '?', 300);
    e = sws_fcgi_nv(buf, "S", 1, NULL, 200);
    CHECK(e == buf + 1 + 4 + 1 + 200 && buf[5] == 'S' && buf[6] == '?' && e[-1] == '?',
          "nv NULL value left to the caller");
    t_end();

    /* round trip of three pairs, empty ones included */
    {
        pairs_t p = {0};
        e = sws_fcgi_nv(buf, name, 128, value, 127);
        e = sws_fcgi_nv(e, "QUERY_STRING", 12, "", 0);
        e = sws_fcgi_nv(e, "", 0, value, 70000);
        char *g = guard_place(buf, (size_t)(e - buf));
        CHECK(sws_fcgi_nv_each(g, (size_t)(e - buf), grab_pair, &p) == 0 && p.n == 3, "each: %d", p.n);
        CHECK(p.nl[0] == 128 && p.vl[0] == 127 && p.name[0] == g + 5 && p.value[0] == g + 5 + 128,
              "pair 0");
        CHECK(p.nl[1] == 12 && memcmp(p.name[1], "QUERY_STRING", 12) == 0 && p.vl[1] == 0, "pair 1");
        CHECK(p.nl[2] == 0 && p.vl[2] == 70000 && p.value[2][69999] == 'v', "pair 2");
        t_end();
    }
    /* a 4-byte length of a small value is accepted on reading */
    {
        pairs_t p = {0};
        char *g = guard_place(S("\x01\x80\x00\x00\x02" "ab!"));
        CHECK(sws_fcgi_nv_each(g, 8, grab_pair, &p) == 0 && p.n == 1 && p.vl[0] == 2, "4-byte small");
        t_end();
    }
    /* malformed: each placed against the guard page */
    {
        static const struct {
            const char *s;
            size_t n;
        } bad[] = {
            {S("\x01")},                        /* no value length */
            {S("\x80\x00\x00")},                /* 4-byte name length cut */
            {S("\x01\x80\x00")},                /* 4-byte value length cut */
            {S("\x02\x01" "ab")},               /* value missing */
            {S("\x05\x00" "abc")},              /* name past the end */
            {S("\x00\x00\x01")},                /* a second pair cut */
            {S("\xff\xff\xff\xff\x00")},        /* 2^31-1 bytes of name */
            {S("\x01\xff\xff\xff\xff" "a")},    /* 2^31-1 bytes of value */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            pairs_t p = {0};
            char *g = guard_place(bad[i].s, bad[i].n);
            CHECK(sws_fcgi_nv_each(g, bad[i].n, grab_pair, &p) == -1, "bad nv %zu", i);
        }
        pairs_t p = {0};
        CHECK(sws_fcgi_nv_each(guard_place("", 0), 0, grab_pair, &p) == 0 && p.n == 0, "empty");
        t_end();
    }
}

static void test_decoder(void)
{
    static const char head[] = "Status: 201 Created\r\nContent-Type: text/plain\r\n\r\n";
    char body[] = "hello, world";
    char all[200];
    size_t hl = sizeof(head) - 1, bl = sizeof(body) - 1;
    memcpy(all, head, hl);
    memcpy(all + hl, body, bl);

    /* STDOUT over records with padding, STDERR between, END_REQUEST, junk */
    s_reset();
    s_rec(1, SWS_FCGI_STDOUT, 1, head, 10, 6);
    s_rec(1, SWS_FCGI_STDERR, 1, S("warn 1\n"), 1);
    s_rec(1, SWS_FCGI_STDOUT, 1, head + 10, hl - 10, 255);
    s_rec(1, SWS_FCGI_STDERR, 1, S("warn 2"), 0);
    s_rec(1, SWS_FCGI_STDOUT, 1, body, bl, 4);
    s_rec(1, SWS_FCGI_STDOUT, 1, "", 0, 0);
    s_end(0x01020304, SWS_FCGI_REQUEST_COMPLETE, 3);
    size_t at_end = slen;
    s_raw(S("junk: the next request's bytes"));
    dec_ok("full stream", all, hl + bl, S("warn 1\nwarn 2"), at_end, 1, 0x01020304, 0);

    /* management records (id 0) are skipped wherever they come */
    s_reset();
    s_rec(1, SWS_FCGI_GET_VALUES_RESULT, 0, S("\x0e\x02" "FCGI_MAX_CONNS10"), 2);
    s_rec(1, SWS_FCGI_STDOUT, 1, S("A: b\n\n"), 0);
    s_rec(1, SWS_FCGI_UNKNOWN_TYPE, 0, S("\x09\0\0\0\0\0\0\0"), 0);
    s_end(0, 0, 0);
    dec_ok("management records", S("A: b\n\n"), "", 0, slen, 1, 0, 0);

    /* END_REQUEST fields; nothing after it is consumed, even in a later call */
    s_reset();
    s_end(0xffffffff, SWS_FCGI_OVERLOADED, 0);
    at_end = slen;
    s_rec(1, SWS_FCGI_STDOUT, 1, S("x"), 0);
    dec_ok("overloaded", "", 0, "", 0, at_end, 1, 0xffffffff, SWS_FCGI_OVERLOADED);
    s_reset();
    s_end(3, SWS_FCGI_UNKNOWN_ROLE, 0);
    dec_ok("unknown role", "", 0, "", 0, slen, 1, 3, SWS_FCGI_UNKNOWN_ROLE);
    {
        sws_fcgi_dec_t d = {.id = 1};
        size_t out = 99;
        char buf[64];
        s_reset();
        s_end(0, 0, 0);
        s_rec(1, SWS_FCGI_STDOUT, 1, S("x"), 0);
        memcpy(buf, stream, slen);
        CHECK(sws_fcgi_decode(&d, buf, slen, &out, NULL, NULL) == 16 && d.ended && out == 0, "end");
        CHECK(sws_fcgi_decode(&d, buf + 16, slen - 16, &out, NULL, NULL) == 0 && out == 0,
              "a call after END_REQUEST consumes nothing");
        t_end();
    }

    /* a stream not finished yet: everything consumed, not ended; the partial
     * header is kept in the state */
    s_reset();
    s_rec(1, SWS_FCGI_STDOUT, 1, S("A: b\r\n\r\nbod"), 0);
    s_raw(S("\x01\x06\x00"));
    dec_ok("unfinished", S("A: b\r\n\r\nbod"), "", 0, slen, 0, 0, 0);
    /* STDERR after the STDOUT's end is allowed; no on_stderr is fine */
    s_reset();
    s_rec(1, SWS_FCGI_STDOUT, 1, "", 0, 0);
    s_rec(1, SWS_FCGI_STDERR, 1, S("late"), 0);
    s_end(0, 0, 0);
    dec_ok("stderr after stdout end", "", 0, S("late"), slen, 1, 0, 0);
    {
        sws_fcgi_dec_t d = {.id = 1};
        size_t out;
        char buf[64];
        memcpy(buf, stream, slen);
        CHECK(sws_fcgi_decode(&d, buf, slen, &out, NULL, NULL) == (ssize_t)slen && d.ended,
              "on_stderr NULL");
        t_end();
    }
    /* empty input */
    s_reset();
    dec_ok("empty input", "", 0, "", 0, 0, 0, 0, 0);

    /* errors named in fcgi.h */
    s_reset();
    s_rec(2, SWS_FCGI_STDOUT, 1, S("x"), 0);
    dec_bad("version 2");
    s_reset();
    s_rec(0, SWS_FCGI_STDOUT, 1, S("x"), 0);
    dec_bad("version 0");
    s_reset();
    s_rec(1, SWS_FCGI_STDOUT, 1, S("A: b\n\n"), 0);
    s_rec(1, SWS_FCGI_STDOUT, 2, S("x"), 0);
    dec_bad("a record of another request");
    s_reset();
    s_rec(1, SWS_FCGI_END_REQUEST, 0x0101, "\0\0\0\0\0\0\0\0", 8, 0);
    dec_bad("END_REQUEST of another request");
    {
        static const int types[] = {SWS_FCGI_BEGIN_REQUEST, SWS_FCGI_ABORT_REQUEST, SWS_FCGI_PARAMS,
                                    SWS_FCGI_STDIN, SWS_FCGI_DATA, SWS_FCGI_GET_VALUES,
                                    SWS_FCGI_GET_VALUES_RESULT, SWS_FCGI_UNKNOWN_TYPE, 12, 255};
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
            char what[64];
            snprintf(what, sizeof(what), "type %d from the application", types[i]);
            s_reset();
            s_rec(1, types[i], 1, "\0\0\0\0\0\0\0\0", 8, 0);
            dec_bad(what);
        }
        static const int mgmt_bad[] = {SWS_FCGI_STDOUT, SWS_FCGI_STDERR, SWS_FCGI_END_REQUEST,
                                       SWS_FCGI_GET_VALUES, SWS_FCGI_BEGIN_REQUEST};
        for (size_t i = 0; i < sizeof(mgmt_bad) / sizeof(mgmt_bad[0]); i++) {
            char what[64];
            snprintf(what, sizeof(what), "type %d with id 0", mgmt_bad[i]);
            s_reset();
            s_rec(1, mgmt_bad[i], 0, "\0\0\0\0\0\0\0\0", 8, 0);
            dec_bad(what);
        }
    }
    s_reset();
    s_rec(1, SWS_FCGI_STDOUT, 1, S("A: b\n\n"), 0);
    s_rec(1, SWS_FCGI_STDOUT, 1, "", 0, 0);
    s_rec(1, SWS_FCGI_STDOUT, 1, S("more"), 0);
    dec_bad("STDOUT after its end");
    s_reset();
    s_rec(1, SWS_FCGI_STDOUT, 1, "", 0, 0);
    s_rec(1, SWS_FCGI_STDOUT, 1, "", 0, 0);
    dec_bad("two empty STDOUT records");
    {
        static const size_t lens[] = {0, 7, 9, 16};
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            char what[64], z[16] = {0};
            snprintf(what, sizeof(what), "END_REQUEST of %zu bytes", lens[i]);
            s_reset();
            s_rec(1, SWS_FCGI_END_REQUEST, 1, z, lens[i], 0);
            dec_bad(what);
        }
    }
}

/* ---- sws_parse_cgi_head --------------------------------------------------- */

#define MAXH 8

/* Parses s whole (against the guard page), then grown byte by byte with
 * last_len; both must give want_rc and the same fields. */
static int cgi(const char *s, size_t len, size_t cap, sws_header_t *h, size_t *nh)
{
    char *p = guard_place(s, len);
    sws_header_t h2[MAXH];
    size_t nh2 = cap, last = 0;
    *nh = cap;
    int rc = sws_parse_cgi_head(p, len, h, nh, 0), rc2 = SWS_PARSE_INCOMPLETE;
    for (size_t k = 0; k <= len; k++) {
        nh2 = cap;
        rc2 = sws_parse_cgi_head(p, k, h2, &nh2, last);
        if (rc2 != SWS_PARSE_INCOMPLETE)
            break;
        last = k;
    }
    CHECK(rc2 == rc || (rc2 == SWS_PARSE_INCOMPLETE && rc < 0), "%.*s: grown %d whole %d", (int)len, s,
          rc2, rc);
    if (rc > 0)
        CHECK(nh2 == *nh && memcmp(h, h2, *nh * sizeof(h[0])) == 0, "grown fields differ");
    /* fields are returned relative to s */
    if (rc > 0)
        for (size_t i = 0; i < *nh; i++) {
            h[i].name = s + (h[i].name - p);
            h[i].value = s + (h[i].value - p);
        }
    return rc;
}

static int field_is(const sws_header_t *h, const char *n, const char *v)
{
    return h->name_len == strlen(n) && memcmp(h->name, n, h->name_len) == 0 &&
           h->value_len == strlen(v) && memcmp(h->value, v, h->value_len) == 0;
}

static void test_cgi_head(void)
{
    sws_header_t h[MAXH];
    size_t nh;
    static const char a[] = "Status: 404 Not Found\r\nContent-Type:text/plain \r\nX-Empty:\r\n\r\nbody";
    int rc = cgi(a, sizeof(a) - 1, MAXH, h, &nh);
    CHECK(rc == (int)sizeof(a) - 1 - 4 && nh == 3, "rc %d nh %zu", rc, nh);
    if (rc > 0 && nh == 3)
        CHECK(field_is(&h[0], "Status", "404 Not Found") && field_is(&h[1], "Content-Type", "text/plain") &&
                  field_is(&h[2], "X-Empty", ""),
              "fields");
    t_end();

    static const char lf[] = "Location: /index.php\nX: 1\n\nrest";
    rc = cgi(lf, sizeof(lf) - 1, MAXH, h, &nh);
    CHECK(rc == (int)sizeof(lf) - 1 - 4 && nh == 2 && field_is(&h[0], "Location", "/index.php"),
          "bare LF: rc %d", rc);
    t_end();
    static const char mixed[] = "X: 1\n\r\n";
    rc = cgi(mixed, sizeof(mixed) - 1, MAXH, h, &nh);
    CHECK(rc == 7 && nh == 1, "LF then CRLF: rc %d", rc);
    t_end();

    /* a head that is only the empty line */
    rc = cgi(S("\r\nbody"), MAXH, h, &nh);
    CHECK(rc == 2 && nh == 0, "empty head CRLF: rc %d nh %zu", rc, nh);
    rc = cgi(S("\n"), MAXH, h, &nh);
    CHECK(rc == 1 && nh == 0, "empty head LF: rc %d nh %zu", rc, nh);
    t_end();

    /* incomplete */
    static const char *inc[] = {"", "\r", "Content-Type: text/html", "A: b\r\n", "A: b\r\n\r", "A: b\n",
                                "A", "A:"};
    for (size_t i = 0; i < sizeof(inc) / sizeof(inc[0]); i++) {
        rc = cgi(inc[i], strlen(inc[i]), MAXH, h, &nh);
        CHECK(rc == SWS_PARSE_INCOMPLETE, "incomplete %zu: rc %d", i, rc);
    }
    t_end();

    /* errors */
    static const char *bad[] = {
        "Content-Type text/html\r\n\r\n", /* no colon */
        "A : b\r\n\r\n",                    /* space before the colon */
        ": b\r\n\r\n",                      /* empty name */
        "A: b\r\n c\r\n\r\n",               /* obs-fold */
        "A: b\rC: d\r\n\r\n",               /* bare CR */
        "\rX",                              /* bare CR as the empty line */
        "HTTP/1.1 200 OK\r\n\r\n",          /* a status line */
        "A: b\x7f\r\n\r\n",                 /* DEL in the value */
        "A: b\x01\r\n\r\n",                 /* CTL in the value */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rc = cgi(bad[i], strlen(bad[i]), MAXH, h, &nh);
        CHECK(rc == SWS_PARSE_ERROR, "bad %zu: rc %d", i, rc);
    }
    rc = cgi(S("A: b\0c\r\n\r\n"), MAXH, h, &nh);
    CHECK(rc == SWS_PARSE_ERROR, "NUL in the value: rc %d", rc);
    t_end();

    /* too many headers for the caller's array */
    static const char three[] = "A: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    rc = cgi(three, sizeof(three) - 1, 2, h, &nh);
    CHECK(rc == SWS_PARSE_TOO_MANY_HEADERS, "3 fields, room for 2: rc %d", rc);
    rc = cgi(three, sizeof(three) - 1, 3, h, &nh);
    CHECK(rc == (int)sizeof(three) - 1 && nh == 3, "3 fields, room for 3: rc %d", rc);
    rc = cgi(S("\r\n"), 0, h, &nh);
    CHECK(rc == 2 && nh == 0, "empty head, no room: rc %d", rc);
    t_end();

    /* last_len: asked again with no new bytes (the engine does when a record
     * brought no STDOUT), still incomplete; then complete */
    {
        static const char g[] = "A: b\r\n\r\n";
        char *p = guard_place(g, 6);
        nh = MAXH;
        CHECK(sws_parse_cgi_head(p, 6, h, &nh, 0) == SWS_PARSE_INCOMPLETE, "first");
        nh = MAXH;
        CHECK(sws_parse_cgi_head(p, 6, h, &nh, 6) == SWS_PARSE_INCOMPLETE, "again");
        p = guard_place(g, 8);
        nh = MAXH;
        CHECK(sws_parse_cgi_head(p, 8, h, &nh, 6) == 8 && nh == 1, "then whole");
        t_end();
    }
}

int main(void)
{
    test_encoder();
    test_nv();
    test_decoder();
    test_cgi_head();
    return t_summary();
}
