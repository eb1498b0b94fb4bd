/* csrc/http/h3/qpack.c (RFC 9204), with libnghttp3's QPACK as the oracle:
 *  - Appendix B's examples (B.1 to B.5) decoded by ours: the field lists,
 *    the decoder-stream bytes, the table after each step, and every
 *    prefix of their field sections refused without reading past it;
 *  - every static entry decoded alike by ours and nghttp3's decoder;
 *  - our encoder -> nghttp3's decoder over thousands of generated lists:
 *    the same lists, never-indexed where asked; the static table used;
 *  - nghttp3's encoder (dynamic table, blocked streams allowed) -> our
 *    decoder, the encoder stream cut at random: the same lists, sections
 *    blocked until their inserts arrive, and what our decoder stream says
 *    taken by nghttp3's encoder without error, at table capacities that
 *    evict;
 *  - each of the decoder's refusals, one case each, and the decoder
 *    stream instructions our encoder takes and refuses.
 * Every decoder input ends at a PROT_NONE page (guard_place).
 * `test_qpack --bench` times encoding an answer and decoding a request
 * against nghttp3's (build it without sanitizers for numbers that mean
 * anything). */
#define _GNU_SOURCE
#include <stdint.h>
#include <time.h>

#include "../fuzz/qpack_oracle.h"
#include "guard.h"

static int enc_hex(sws_qpack_dec_t *d, const char *hex)
{
    uint8_t b[256];
    size_t n = unhex(hex, b);
    return sws_qpack_dec_encoder(d, (const uint8_t *)guard_place(b, n), n);
}

/* Decodes the section in hex; the fields as "name: value\n" lines. */
static int dec_hex(sws_qpack_dec_t *d, uint64_t sid, const char *hex, char *text, size_t room)
{
    uint8_t b[256];
    size_t n = unhex(hex, b);
    qbuf_t l = {0};
    int rc = ours_section(d, sid, (const uint8_t *)guard_place(b, n), n, &l);
    size_t at = 0;
    text[0] = 0;
    for (size_t i = 0; i < l.n;) {
        uint32_t nl, vl;
        memcpy(&nl, l.p + i, 4);
        memcpy(&vl, l.p + i + 4 + nl, 4);
        at += (size_t)snprintf(text + at, room - at, "%.*s: %.*s\n", (int)nl, l.p + i + 4, (int)vl,
                               l.p + i + 8 + nl);
        i += 9 + nl + vl;
    }
    free(l.p);
    return rc;
}

static int pending_is(sws_qpack_dec_t *d, const char *hex)
{
    uint8_t want[64];
    size_t n = unhex(hex, want);
    const uint8_t *p;
    size_t got = sws_qpack_dec_pending(d, &p);
    int ok = got == n && (n == 0 || memcmp(p, want, n) == 0);
    sws_qpack_dec_taken(d, got);
    return ok;
}

/* Every proper prefix of a section (a HEADERS frame is whole) is refused,
 * but for those that end between field lines (`whole`: their lengths, 0
 * ended), which decode to the fields before; read past, guard_place
 * faults. */
static void prefixes(uint32_t max_cap, const char *setup, const char *hex, const size_t *whole)
{
    uint8_t b[256];
    size_t n = unhex(hex, b);
    for (size_t k = 0; k < n; k++) {
        sws_qpack_dec_t d;
        sws_qpack_dec_init(&d, max_cap);
        if (setup)
            enc_hex(&d, setup);
        int ends_whole = 0;
        for (const size_t *w = whole; *w; w++)
            ends_whole |= *w == k;
        qbuf_t l = {0};
        int rc = ours_section(&d, 0, (const uint8_t *)guard_place(b, k), k, &l);
        CHECK(rc == (ends_whole ? 0 : SWS_QPACK_ERR), "prefix %zu of %s: %d", k, hex, rc);
        free(l.p);
        sws_qpack_dec_free(&d);
    }
}

static void appendix_b(void)
{
    char t[512];
    sws_qpack_dec_t d;
    sws_qpack_dec_init(&d, 220);
    /* B.1: a literal with a static name reference */
    CHECK(dec_hex(&d, 0, "0000 510b 2f69 6e64 6578 2e68 746d 6c", t, sizeof t) == 0, "B.1");
    CHECK(strcmp(t, ":path: /index.html\n") == 0, "B.1: %s", t);
    CHECK(pending_is(&d, ""), "B.1 acknowledges nothing");
    prefixes(220, NULL, "0000 510b 2f69 6e64 6578 2e68 746d 6c", (const size_t[]){2, 0});
    t_end();

    /* B.2: the section arrives before the inserts it needs */
    CHECK(dec_hex(&d, 4, "0381 10 11", t, sizeof t) == SWS_QPACK_BLOCKED, "B.2 blocked");
    CHECK(enc_hex(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d") == 0, "B.2 enc 1");
    CHECK(dec_hex(&d, 4, "0381 10 11", t, sizeof t) == SWS_QPACK_BLOCKED, "B.2 still blocked");
    CHECK(enc_hex(&d, "c10c 2f73 616d 706c 652f 7061 7468") == 0, "B.2 enc 2");
    CHECK(d.cap == 220 && d.inserts == 2 && d.t.size == 106, "B.2 table: %u %u", d.t.size,
          (unsigned)d.inserts);
    CHECK(dec_hex(&d, 4, "0381 10 11", t, sizeof t) == 0, "B.2");
    CHECK(strcmp(t, ":authority: www.example.com\n:path: /sample/path\n") == 0, "B.2: %s", t);
    CHECK(pending_is(&d, "84"), "B.2: Section Acknowledgment of stream 4");
    t_end();

    /* B.3: a speculative insert, acknowledged by an Insert Count Increment */
    CHECK(enc_hex(&d, "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565") == 0, "B.3");
    CHECK(pending_is(&d, "01"), "B.3: Insert Count Increment 1");
    CHECK(d.t.size == 160, "B.3 size %u", d.t.size);
    t_end();

    /* B.4: Duplicate; stream 8 read, and a cancellation */
    CHECK(enc_hex(&d, "02") == 0, "B.4 duplicate");
    CHECK(d.t.size == 217 && d.inserts == 4, "B.4 size %u", d.t.size);
    CHECK(dec_hex(&d, 8, "0500 80 c1 81", t, sizeof t) == 0, "B.4");
    CHECK(strcmp(t, ":authority: www.example.com\n:path: /\ncustom-key: custom-value\n") == 0,
          "B.4: %s", t);
    CHECK(pending_is(&d, "88"), "B.4: Section Acknowledgment of stream 8 (the increment is in it)");
    CHECK(sws_qpack_dec_cancel(&d, 8) == 0 && pending_is(&d, "48"), "Stream Cancellation 8");
    prefixes(220, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c "
                          "652f 7061 7468 4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c "
                          "7565 02",
             "0500 80 c1 81", (const size_t[]){2, 3, 4, 0});
    t_end();

    /* B.5: an insert that evicts the oldest entry (absolute 0) */
    CHECK(enc_hex(&d, "810d 6375 7374 6f6d 2d76 616c 7565 32") == 0, "B.5");
    CHECK(d.t.size == 215 && d.t.n == 4 && d.inserts == 5, "B.5 size %u n %u", d.t.size, d.t.n);
    CHECK(pending_is(&d, "01"), "B.5: Insert Count Increment 1");
    /* absolute 4 (custom-key: custom-value2) and 1 (:path) are there ... */
    CHECK(dec_hex(&d, 12, "0600 80 83", t, sizeof t) == 0, "after B.5");
    CHECK(strcmp(t, "custom-key: custom-value2\n:path: /sample/path\n") == 0, "after B.5: %s", t);
    /* ... absolute 0 is not: Base 5, relative 4 */
    CHECK(dec_hex(&d, 16, "0600 84", t, sizeof t) == SWS_QPACK_ERR, "evicted entry refused");
    CHECK(sws_qpack_decode(&d, 0, (const uint8_t *)"\0\0", 2, SIZE_MAX, qlist_emit, &(qbuf_t){0}) ==
              SWS_QPACK_ERR,
          "after an error every call fails");
    sws_qpack_dec_free(&d);
    t_end();
}

static void static_table(void)
{
    nghttp3_qpack_decoder *ng;
    nghttp3_qpack_decoder_new(&ng, 0, 0, nghttp3_mem_default());
    sws_qpack_dec_t d;
    sws_qpack_dec_init(&d, 0);
    for (uint32_t i = 0; i < SWS_QPACK_STATIC_N; i++) {
        uint8_t b[4] = {0, 0};
        size_t n = 3;
        if (i < 63) {
            b[2] = (uint8_t)(0xc0 | i);
        } else {
            b[2] = 0xff;
            b[3] = (uint8_t)(i - 63);
            n = 4;
        }
        qbuf_t a = {0}, o = {0}, want = {0};
        const uint8_t *p = (const uint8_t *)guard_place(b, n);
        CHECK(ng_section(ng, 0, p, n, &a) == NG_OK, "nghttp3 static %u", i);
        CHECK(ours_section(&d, 0, p, n, &o) == 0, "ours static %u", i);
        sws_hpack_field_t f;
        sws_qpack_static(i, &f);
        qlist_add(&want, f.name, f.nl, f.value, f.vl, 0);
        CHECK(qlist_eq(&a, &o) && qlist_eq(&a, &want), "static %u: %.*s", i, (int)f.nl, f.name);
        free(a.p), free(o.p), free(want.p);
    }
    /* index 99 is past the table */
    qbuf_t o = {0};
    CHECK(ours_section(&d, 0, (const uint8_t *)guard_place("\0\0\xff\x24", 4), 4, &o) ==
              SWS_QPACK_ERR,
          "static index 99");
    free(o.p);
    sws_qpack_dec_free(&d);
    nghttp3_qpack_decoder_del(ng);
    t_end();
}

/* ---- generated lists ---- */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static const char *NAMES[] = {":status", "content-type", "content-length", "server", "date",
                              "etag", "cache-control", "set-cookie", "x-request-id", "vary",
                              "last-modified", "accept-ranges", "x-custom-thing", "alt-svc",
                              "cookie", "authorization", ":path", ":authority", "user-agent",
                              "accept-encoding", "strict-transport-security", "x-frame-options"};
static const char *VALUES[] = {"200", "404", "text/html; charset=utf-8", "text/css", "scalws",
                               "bytes", "max-age=0", "no-cache", "origin", "deny", "0", "/",
                               "gzip, deflate, br", "www.example.com", "\"abc-123\"", "",
                               "sess=4f2a; Path=/; HttpOnly", "Mon, 07 Dec 2026 10:00:00 GMT"};
#define NELEM(a) (sizeof a / sizeof a[0])

/* A list of 1..max fields into f[], the bytes made up for it in store[]. */
static size_t gen_list(sws_hpack_field_t *f, size_t max, char *store, size_t room)
{
    size_t n = 1 + rnd((uint32_t)max), at = 0;
    for (size_t i = 0; i < n; i++) {
        if (at + 1100 > room)
            return i;
        const char *nm = NAMES[rnd(NELEM(NAMES))], *v = VALUES[rnd(NELEM(VALUES))];
        size_t nl = strlen(nm), vl = strlen(v);
        if (rnd(5) == 0) { /* a name of its own */
            nl = 1 + rnd(40);
            for (size_t k = 0; k < nl; k++)
                store[at + k] = "abcdefghijklmnopqrstuvwxyz-0123456789_"[rnd(38)];
            nm = store + at;
            at += nl;
        }
        if (rnd(3) == 0) { /* a value of its own, any byte but NUL, sometimes long */
            vl = rnd(4) ? rnd(30) : 100 + rnd(900);
            for (size_t k = 0; k < vl; k++)
                store[at + k] = (char)(1 + rnd(rnd(2) ? 126 : 255));
            v = store + at;
            at += vl;
        }
        f[i] = (sws_hpack_field_t){(const uint8_t *)nm, (const uint8_t *)v, (uint32_t)nl,
                                   (uint32_t)vl, rnd(6) == 0 ? SWS_HPACK_NEVER : 0};
    }
    return n;
}

static int must_be_never(const sws_hpack_field_t *f)
{
    static const char *s[] = {"set-cookie", "cookie", "authorization", "proxy-authorization",
                              "x-request-id"};
    if (f->flags & SWS_HPACK_NEVER)
        return 1;
    for (size_t i = 0; i < NELEM(s); i++)
        if (f->nl == strlen(s[i]) && memcmp(f->name, s[i], f->nl) == 0)
            return 1;
    return 0;
}

static void encode_to_nghttp3(void)
{
    nghttp3_qpack_decoder *ng;
    nghttp3_qpack_decoder_new(&ng, 0, 0, nghttp3_mem_default());
    static char store[1 << 16];
    static uint8_t out[1 << 17], again[1 << 17];
    static sws_qpack_memo_t memo;
    sws_hpack_field_t f[40];
    for (int round = 0; round < 5000; round++) {
        size_t n = gen_list(f, 40, store, sizeof store);
        size_t len = sws_qpack_encode(f, n, out);
        CHECK(len <= sws_qpack_encode_bound(f, n), "bound");
        /* the memo gives the same bytes, on first sight and on the next */
        for (int k = 0; k < 2; k++)
            CHECK(sws_qpack_encode_memo(&memo, f, n, again) == len && memcmp(again, out, len) == 0,
                  "round %d: the memo's encoding differs (pass %d)", round, k);
        qbuf_t got = {0}, want = {0};
        for (size_t i = 0; i < n; i++)
            qlist_add(&want, f[i].name, f[i].nl, f[i].value, f[i].vl, must_be_never(&f[i]));
        int rc = ng_section(ng, 4 * round, (const uint8_t *)guard_place(out, len), len, &got);
        CHECK(rc == NG_OK && qlist_eq(&got, &want), "round %d: rc %d, %zu fields", round, rc, n);
        free(got.p), free(want.p);
        if (t_case_failures)
            break;
    }
    CHECK(memo.hits > 0, "memo: no hit");
    /* an answer of a static file, again and again: after the first, every
     * field comes from the memo but the request id (never indexed) */
    sws_qpack_memo_t m2 = {0};
    sws_hpack_field_t res[] = {{(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0},
                               {(const uint8_t *)"server", (const uint8_t *)"scalws", 6, 6, 0},
                               {(const uint8_t *)"content-length", (const uint8_t *)"612", 14, 3, 0},
                               {(const uint8_t *)"etag", (const uint8_t *)"\"6754-264\"", 4, 10, 0},
                               {(const uint8_t *)"x-request-id", (const uint8_t *)"abc", 12, 3, 0}};
    for (int i = 0; i < 100; i++)
        sws_qpack_encode_memo(&m2, res, 5, again);
    CHECK(m2.misses == 4 && m2.hits == 4 * 99, "memo of one answer: %llu hits, %llu misses",
          (unsigned long long)m2.hits, (unsigned long long)m2.misses);
    /* answers of many files, each like a static answer (9 fields; etag,
     * last-modified and length its own), each file asked 4 times in a row:
     * after its first answer, every field comes from the memo. With one
     * slot per hash, two of an answer's fields that shared it pushed each
     * other out on every answer (about a third of the files). */
    for (int file = 0; file < 300; file++) {
        sws_qpack_memo_t m3 = {0};
        char etag[32], lm[40], len[16];
        snprintf(etag, sizeof etag, "\"%x-%x\"", 0x6b15de15u + rnd(1u << 30), 1 + rnd(5000));
        snprintf(lm, sizeof lm, "Sun, %02u Dec 2026 %02u:%02u:%02u GMT", 1 + rnd(28), rnd(24),
                 rnd(60), rnd(60));
        snprintf(len, sizeof len, "%u", 1 + rnd(100000));
        const char *fl[][2] = {{":status", "200"}, {"server", "scalws"},
                               {"date", "Sun, 06 Dec 2026 22:15:04 GMT"},
                               {"content-type", "text/html"}, {"accept-ranges", "bytes"},
                               {"last-modified", lm}, {"etag", etag},
                               {"vary", "Accept-Encoding"}, {"content-length", len}};
        sws_hpack_field_t st[NELEM(fl)];
        for (size_t i = 0; i < NELEM(fl); i++)
            st[i] = (sws_hpack_field_t){(const uint8_t *)fl[i][0], (const uint8_t *)fl[i][1],
                                        (uint32_t)strlen(fl[i][0]), (uint32_t)strlen(fl[i][1]), 0};
        size_t first = sws_qpack_encode_memo(&m3, st, NELEM(st), out);
        for (int k = 0; k < 3; k++)
            CHECK(sws_qpack_encode_memo(&m3, st, NELEM(st), again) == first &&
                      memcmp(again, out, first) == 0,
                  "file %d: the memo's bytes differ", file);
        CHECK(m3.misses == NELEM(st), "file %d: %llu misses in 4 answers of %zu fields", file,
              (unsigned long long)m3.misses, NELEM(st));
        if (t_case_failures)
            break;
    }
    t_end();

    /* the static table used: :status 200 is one byte; a name it has, its index */
    sws_hpack_field_t a[] = {{(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0},
                             {(const uint8_t *)"content-type", (const uint8_t *)"text/x", 12, 6, 0},
                             {(const uint8_t *)"set-cookie", (const uint8_t *)"", 10, 0, 0}};
    size_t len = sws_qpack_encode(a, 3, out);
    CHECK(len >= 5 && out[0] == 0 && out[1] == 0 && out[2] == (0xc0 | 25), "indexed :status 200");
    CHECK(out[3] == (0x50 | 0x0f) && out[4] == 44 - 15, "content-type by its static index 44");
    /* set-cookie: never indexed, by name index 14, though name and value are in the table */
    CHECK(out[len - 2] == (0x70 | 14) && out[len - 1] == 0, "set-cookie N bit");
    nghttp3_qpack_decoder_del(ng);
    t_end();
}

/* nghttp3's encoder and our decoder on one connection: sections and
 * encoder-stream bytes given to ours in shuffled order. */
static void nghttp3_to_decode_at(size_t cap, int rounds)
{
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_encoder_new(&enc, cap, mem);
    nghttp3_qpack_encoder_set_max_dtable_capacity(enc, cap);
    nghttp3_qpack_encoder_set_max_blocked_streams(enc, 100);
    sws_qpack_dec_t d;
    sws_qpack_dec_init(&d, (uint32_t)cap);
    static char store[1 << 16];
    sws_hpack_field_t f[30];
    nghttp3_nv nva[30];
    qbuf_t estream = {0}; /* encoder-stream bytes not yet given to ours */
    int blocked_seen = 0;
    for (int round = 0; round < rounds && !t_case_failures; round++) {
        size_t n = gen_list(f, 30, store, sizeof store);
        for (size_t i = 0; i < n; i++)
            nva[i] = (nghttp3_nv){(uint8_t *)f[i].name, (uint8_t *)f[i].value, f[i].nl, f[i].vl,
                                  f[i].flags ? NGHTTP3_NV_FLAG_NEVER_INDEX : 0};
        nghttp3_buf pb, rb, eb;
        nghttp3_buf_init(&pb), nghttp3_buf_init(&rb), nghttp3_buf_init(&eb);
        int64_t sid = 4 * round;
        if (nghttp3_qpack_encoder_encode(enc, &pb, &rb, &eb, sid, nva, n) != 0)
            abort();
        qbuf_put(&estream, eb.pos, nghttp3_buf_len(&eb));
        qbuf_t sec = {0}, want = {0}, got = {0};
        qbuf_put(&sec, pb.pos, nghttp3_buf_len(&pb));
        qbuf_put(&sec, rb.pos, nghttp3_buf_len(&rb));
        for (size_t i = 0; i < n; i++)
            qlist_add(&want, f[i].name, f[i].nl, f[i].value, f[i].vl, f[i].flags != 0);
        nghttp3_buf_free(&pb, mem), nghttp3_buf_free(&rb, mem), nghttp3_buf_free(&eb, mem);

        /* the section first, sometimes: blocked while inserts are missing */
        int rc = 1;
        if (rnd(2)) {
            rc = ours_section(&d, (uint64_t)sid, (const uint8_t *)guard_place(sec.p, sec.n), sec.n,
                              &got);
            CHECK(rc == 0 || rc == SWS_QPACK_BLOCKED, "round %d early: %d", round, rc);
            blocked_seen += rc == SWS_QPACK_BLOCKED;
        }
        /* the encoder stream in random pieces */
        for (size_t at = 0; at < estream.n;) {
            size_t k = 1 + rnd((uint32_t)(estream.n - at));
            int r = sws_qpack_dec_encoder(&d, (const uint8_t *)guard_place(estream.p + at, k), k);
            CHECK(r == 0, "round %d: encoder stream %d", round, r);
            at += k;
        }
        estream.n = 0;
        if (rc != 0)
            rc = ours_section(&d, (uint64_t)sid, (const uint8_t *)guard_place(sec.p, sec.n), sec.n,
                              &got);
        CHECK(rc == 0 && qlist_eq(&got, &want), "round %d: rc %d", round, rc);
        /* what our decoder stream says, nghttp3's encoder must take */
        const uint8_t *dp;
        size_t dn = sws_qpack_dec_pending(&d, &dp);
        nghttp3_ssize taken = nghttp3_qpack_encoder_read_decoder(enc, dp, dn);
        CHECK(taken == (nghttp3_ssize)dn, "round %d: decoder stream refused: %zd", round, taken);
        sws_qpack_dec_taken(&d, dn);
        free(sec.p), free(want.p), free(got.p);
    }
    CHECK(cap == 0 || blocked_seen > 0, "cap %zu: no section was ever blocked", cap);
    CHECK(cap == 0 || d.inserts > 0, "cap %zu: nothing inserted", cap);
    free(estream.p);
    sws_qpack_dec_free(&d);
    nghttp3_qpack_encoder_del(enc);
    t_end();
}

static void nghttp3_to_decode(void)
{
    nghttp3_to_decode_at(0, 300);
    nghttp3_to_decode_at(100, 1000);
    nghttp3_to_decode_at(220, 1000);
    nghttp3_to_decode_at(4096, 3000);
    nghttp3_to_decode_at(65536, 1000);
}

static void refusal(uint32_t max_cap, const char *setup, const char *section, int want,
                    const char *what)
{
    sws_qpack_dec_t d;
    sws_qpack_dec_init(&d, max_cap);
    char t[256];
    int rc = setup ? enc_hex(&d, setup) : 0;
    if (section && rc == 0)
        rc = dec_hex(&d, 0, section, t, sizeof t);
    CHECK(rc == want, "%s: %d, not %d", what, rc, want);
    sws_qpack_dec_free(&d);
    t_end();
}

static void refusals(void)
{
    /* encoder stream */
    refusal(220, "3fbe01", NULL, SWS_QPACK_ENC_STREAM, "a capacity over ours (221)");
    refusal(0, "c0 00", NULL, SWS_QPACK_ENC_STREAM, "an insert at capacity 0");
    refusal(220, "3f01 c0 00", NULL, SWS_QPACK_ENC_STREAM, "an insert over the capacity (32)");
    refusal(220, "3fbd01 ff24 00", NULL, SWS_QPACK_ENC_STREAM, "static index 99");
    refusal(220, "3fbd01 80 00", NULL, SWS_QPACK_ENC_STREAM, "a name from an empty table");
    refusal(220, "3fbd01 00", NULL, SWS_QPACK_ENC_STREAM, "a duplicate of nothing");
    refusal(220, "3fbd01 c0 81 ff", NULL, SWS_QPACK_ENC_STREAM, "a Huffman value of EOS bits");
    refusal(220, "3fbd01 c0 81 00", NULL, SWS_QPACK_ENC_STREAM, "Huffman padding of 0s");
    refusal(220, "3fff ffff ffff ffff ffff 7f", NULL, SWS_QPACK_ENC_STREAM, "an integer over 2^62");
    refusal(220, "5fe2 01", NULL, SWS_QPACK_ENC_STREAM, "a name over 256 bytes");
    refusal(220, "3fbd01 c0", NULL, 0, "an instruction cut short waits");
    /* sections */
    refusal(220, NULL, "", SWS_QPACK_ERR, "an empty section");
    refusal(220, NULL, "00", SWS_QPACK_ERR, "no Base");
    refusal(0, NULL, "01 00", SWS_QPACK_ERR, "a Required Insert Count without a table");
    refusal(220, NULL, "0d 00", SWS_QPACK_ERR, "an encoded insert count over 2 x 6");
    refusal(220, NULL, "00 80", SWS_QPACK_ERR, "a negative Base");
    refusal(220, "3fbd01 c0 00", "02 81", SWS_QPACK_ERR, "Base = RIC - 1 - 1 = -1");
    refusal(220, "3fbd01 c0 00", "02 00 81", SWS_QPACK_ERR, "relative index past Base");
    refusal(220, "3fbd01 c0 00 c0 00", "02 00 11", SWS_QPACK_ERR, "post-base at RIC");
    refusal(220, "3fbd01 c0 00", "00 00 80", SWS_QPACK_ERR, "a dynamic reference with RIC 0");
    refusal(220, NULL, "0000 5f", SWS_QPACK_ERR, "a field line cut short");
    refusal(220, NULL, "0000 51 85 ffff ffff ff", SWS_QPACK_ERR, "EOS inside a Huffman string");
    refusal(220, NULL, "0000 2ffa 01", SWS_QPACK_ERR, "a literal name over 256 bytes");
    refusal(220, NULL, "0000 d1", 0, "a plain section decodes");
    refusal(220, "3fbd01 c0 00", "0300 c0", SWS_QPACK_BLOCKED, "a section ahead of its inserts");

    /* TOO_BIG: the list is over list_max, the section still read to its end */
    sws_qpack_dec_t d;
    sws_qpack_dec_init(&d, 220);
    enc_hex(&d, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d");
    uint8_t b[8];
    size_t n = unhex("0200 80 d1 d1", b);
    qbuf_t l = {0};
    int rc = sws_qpack_decode(&d, 4, (const uint8_t *)guard_place(b, n), n, 32 + 25 + 32 + 8,
                              qlist_emit, &l);
    CHECK(rc == SWS_QPACK_TOO_BIG && l.n == 9 + 10 + 15, "TOO_BIG after one field: %d %zu", rc,
          l.n);
    CHECK(pending_is(&d, "84"), "TOO_BIG still acknowledges the section");
    free(l.p);
    sws_qpack_dec_free(&d);
    t_end();

    /* our encoder's side of the client's decoder stream */
    sws_qpack_enc_t e = {0};
    CHECK(sws_qpack_enc_decoder(&e, (const uint8_t *)"\x48\x7f", 2) == 0, "cancellation 8, then a part");
    CHECK(sws_qpack_enc_decoder(&e, (const uint8_t *)"\x81\x01", 2) == 0, "... cancellation 192");
    CHECK(sws_qpack_enc_decoder(&e, (const uint8_t *)"\x84", 1) == SWS_QPACK_DEC_STREAM,
          "a Section Acknowledgment: we never referenced the table");
    sws_qpack_enc_t e2 = {0};
    CHECK(sws_qpack_enc_decoder(&e2, (const uint8_t *)"\x01", 1) == SWS_QPACK_DEC_STREAM,
          "an Insert Count Increment: we never inserted");
    sws_qpack_enc_t e3 = {0};
    CHECK(sws_qpack_enc_decoder(&e3, (const uint8_t *)"\x7f\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12) ==
              SWS_QPACK_DEC_STREAM,
          "an endless integer");
    t_end();
}

/* ---- --bench ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int count_emit(void *ctx, const sws_hpack_field_t *f)
{
    *(size_t *)ctx += f->vl;
    return 0;
}

#define FLD(n, v) {(const uint8_t *)n, (const uint8_t *)v, sizeof n - 1, sizeof v - 1, 0}

/* One section by nghttp3's decoder, counting value bytes into *sink. */
static void ng_count(nghttp3_qpack_decoder *dec, const uint8_t *p, size_t n, size_t *sink)
{
    nghttp3_qpack_stream_context *sc;
    nghttp3_qpack_stream_context_new(&sc, 0, nghttp3_mem_default());
    for (;;) {
        nghttp3_qpack_nv nv;
        uint8_t fl = 0;
        nghttp3_ssize r = nghttp3_qpack_decoder_read_request(dec, sc, &nv, &fl, p, n, 1);
        if (r < 0) {
            fprintf(stderr, "nghttp3: %s\n", nghttp3_strerror((int)r));
            abort();
        }
        p += r;
        n -= (size_t)r;
        if (fl & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
            *sink += nghttp3_rcbuf_get_buf(nv.value).len;
            nghttp3_rcbuf_decref(nv.name);
            nghttp3_rcbuf_decref(nv.value);
        }
        if (fl & NGHTTP3_QPACK_DECODE_FLAG_FINAL)
            break;
    }
    nghttp3_qpack_stream_context_del(sc);
    /* the decoder stream, taken as a connection takes it */
    static uint8_t dbuf[256];
    nghttp3_buf b;
    b.begin = b.pos = b.last = dbuf;
    b.end = dbuf + sizeof dbuf;
    if (nghttp3_qpack_decoder_get_decoder_streamlen(dec) <= sizeof dbuf)
        nghttp3_qpack_decoder_write_decoder(dec, &b);
}

/* Encoding an answer and decoding a request, ours against nghttp3's, as
 * an HTTP/3 worker does them (our encoder_table default 0: nghttp3's
 * encoder without a dynamic table too). Build without sanitizers. */
static void bench(void)
{
    enum { N = 2000000 };
    const nghttp3_mem *mem = nghttp3_mem_default();
    sws_hpack_field_t res[] = {FLD(":status", "200"), FLD("server", "scalws"),
                               FLD("date", "Mon, 07 Dec 2026 10:00:00 GMT"),
                               FLD("content-type", "text/html; charset=utf-8"),
                               FLD("content-length", "612"),
                               FLD("last-modified", "Sun, 06 Dec 2026 16:36:00 GMT"),
                               FLD("etag", "\"6754a8a0-264\""), FLD("accept-ranges", "bytes")};
    size_t nres = sizeof res / sizeof *res;
    static uint8_t out[4096];
    double t0 = now_s();
    size_t total = 0;
    for (int i = 0; i < N; i++)
        total += sws_qpack_encode(res, nres, out);
    double t1 = now_s();
    printf("encode, ours:    %.1f ns per answer of %zu fields, %.1f bytes\n", (t1 - t0) * 1e9 / N,
           nres, (double)total / N);
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_encoder_new(&enc, 0, mem);
    nghttp3_nv nv[8];
    for (size_t k = 0; k < nres; k++)
        nv[k] = (nghttp3_nv){(uint8_t *)res[k].name, (uint8_t *)res[k].value, res[k].nl, res[k].vl, 0};
    total = 0;
    t0 = now_s();
    for (int i = 0; i < N; i++) {
        nghttp3_buf pb, rb, eb;
        nghttp3_buf_init(&pb), nghttp3_buf_init(&rb), nghttp3_buf_init(&eb);
        nghttp3_qpack_encoder_encode(enc, &pb, &rb, &eb, 4 * i, nv, nres);
        total += nghttp3_buf_len(&pb) + nghttp3_buf_len(&rb);
        nghttp3_buf_free(&pb, mem), nghttp3_buf_free(&rb, mem), nghttp3_buf_free(&eb, mem);
    }
    t1 = now_s();
    printf("encode, nghttp3: %.1f ns per answer, %.1f bytes\n", (t1 - t0) * 1e9 / N,
           (double)total / N);
    nghttp3_qpack_encoder_del(enc);

    /* decode: a browser-like request, by nghttp3's encoder with a 4 KiB
     * table (the first section fills it, the repeats reference it), and
     * the same request with no table (literals, Huffman: h3load's) */
    sws_hpack_field_t req[] = {
        FLD(":method", "GET"), FLD(":scheme", "https"), FLD(":authority", "www.example.com"),
        FLD(":path", "/assets/app.3f2a1b.js"),
        FLD("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"),
        FLD("accept", "*/*"), FLD("accept-language", "en-US,en;q=0.5"),
        FLD("accept-encoding", "gzip, deflate, br"), FLD("referer", "https://www.example.com/"),
        FLD("cookie", "session=0123456789abcdef0123456789abcdef")};
    size_t nreq = sizeof req / sizeof *req;
    nghttp3_nv rnv[10];
    for (size_t k = 0; k < nreq; k++)
        rnv[k] = (nghttp3_nv){(uint8_t *)req[k].name, (uint8_t *)req[k].value, req[k].nl, req[k].vl, 0};
    for (int dyn = 1; dyn >= 0; dyn--) {
        uint32_t cap = dyn ? 4096 : 0;
        nghttp3_qpack_encoder_new(&enc, cap, mem);
        nghttp3_qpack_encoder_set_max_dtable_capacity(enc, cap);
        nghttp3_qpack_encoder_set_max_blocked_streams(enc, 100);
        qbuf_t es = {0}, sec = {0};
        for (int r = 0; r < 2; r++) { /* the second section is the one timed */
            nghttp3_buf pb, rb, eb;
            nghttp3_buf_init(&pb), nghttp3_buf_init(&rb), nghttp3_buf_init(&eb);
            nghttp3_qpack_encoder_encode(enc, &pb, &rb, &eb, 4 * r, rnv, nreq);
            nghttp3_qpack_encoder_ack_everything(enc);
            qbuf_put(&es, eb.pos, nghttp3_buf_len(&eb));
            sec.n = 0;
            qbuf_put(&sec, pb.pos, nghttp3_buf_len(&pb));
            qbuf_put(&sec, rb.pos, nghttp3_buf_len(&rb));
            nghttp3_buf_free(&pb, mem), nghttp3_buf_free(&rb, mem), nghttp3_buf_free(&eb, mem);
        }
        nghttp3_qpack_encoder_del(enc);
        sws_qpack_dec_t d;
        sws_qpack_dec_init(&d, cap);
        sws_qpack_dec_encoder(&d, es.p, es.n);
        size_t sink = 0;
        t0 = now_s();
        for (int i = 0; i < N; i++) {
            sws_qpack_decode(&d, 4, sec.p, sec.n, 1 << 20, count_emit, &sink);
            d.olen = 0; /* the acknowledgements, dropped */
        }
        t1 = now_s();
        printf("decode, ours:    %.1f ns per request of %zu fields (%zu bytes, %s)\n",
               (t1 - t0) * 1e9 / N, nreq, sec.n, dyn ? "4 KiB table" : "literals");
        nghttp3_qpack_decoder *ng;
        nghttp3_qpack_decoder_new(&ng, cap, 100, mem);
        nghttp3_qpack_decoder_read_encoder(ng, es.p, es.n);
        t0 = now_s();
        for (int i = 0; i < N; i++)
            ng_count(ng, sec.p, sec.n, &sink);
        t1 = now_s();
        printf("decode, nghttp3: %.1f ns per request\n", (t1 - t0) * 1e9 / N);
        nghttp3_qpack_decoder_del(ng);
        sws_qpack_dec_free(&d);
        free(es.p), free(sec.p);
        printf("(sink %zu)\n", sink);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench();
        return 0;
    }
    appendix_b();
    static_table();
    encode_to_nghttp3();
    nghttp3_to_decode();
    refusals();
    return t_summary();
}
