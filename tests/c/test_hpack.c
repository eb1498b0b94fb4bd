/* hpack.c and huffman.c (RFC 7541), with libnghttp2's HPACK as the oracle:
 *  - Appendix C's examples (C.1 integers through a size update, C.2 to
 *    C.6) decoded by ours: exact field lists, table entries and sizes,
 *    and every prefix of their blocks refused without reading past it;
 *  - every static entry decoded alike by ours and nghttp2_hd_inflate;
 *  - our encoder -> nghttp2_hd_inflate, and nghttp2_hd_deflate -> our
 *    decoder, over thousands of generated header lists on one connection
 *    each way, with table size changes on both sides: the same lists, the
 *    same table sizes;
 *  - each of the decoder's refusals, one case each; TOO_BIG and emit's
 *    stop keep the table in step;
 *  - the encoder's policy on the wire: never indexed (0x10) for
 *    set-cookie and x-request-id, which nghttp2 reports as
 *    NGHTTP2_NV_FLAG_NO_INDEX; a second answer with the same server and
 *    content-type is shorter; content-length indexed on its second sight.
 * Every decoder input ends at a PROT_NONE page (guard_place).
 * `test_hpack --bench` times encoding and decoding of typical blocks
 * (build it without sanitizers for numbers that mean anything). */
#define _GNU_SOURCE
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <time.h>

#include "guard.h"
#include "http/h2/hpack.h"

/* ---- helpers: byte buffers, field lists as bytes ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf_t;

static void buf_put(buf_t *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* A field list serialized: nl, name, vl, value, flags per field. */
static void list_add(buf_t *b, const void *name, uint32_t nl, const void *value, uint32_t vl,
                     uint8_t flags)
{
    buf_put(b, &nl, 4);
    buf_put(b, name, nl);
    buf_put(b, &vl, 4);
    buf_put(b, value, vl);
    buf_put(b, &flags, 1);
}

static int list_eq(const buf_t *a, const buf_t *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

/* The list as text, for messages: "name: value\n" ("~" before a never-indexed one). */
static char *list_text(const buf_t *b)
{
    static char out[1 << 16];
    size_t o = 0;
    for (size_t i = 0; i < b->n && o < sizeof out - 600;) {
        uint32_t nl, vl;
        memcpy(&nl, b->p + i, 4);
        const uint8_t *name = b->p + i + 4;
        memcpy(&vl, name + nl, 4);
        const uint8_t *value = name + nl + 4;
        uint8_t fl = value[vl];
        o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s: %.*s\n", fl ? "~" : "",
                              (int)(nl > 200 ? 200 : nl), name, (int)(vl > 200 ? 200 : vl), value);
        i += 4 + nl + 4 + vl + 1;
    }
    out[o] = 0;
    return out;
}

/* "name: value" lines (a leading ~: never indexed) as a serialized list. */
static void list_from_text(buf_t *b, const char *text)
{
    b->n = 0;
    while (*text) {
        const char *eol = strchr(text, '\n');
        uint8_t fl = 0;
        if (*text == '~') {
            fl = SWS_HPACK_NEVER;
            text++;
        }
        const char *colon = strstr(text, ": ");
        list_add(b, text, (uint32_t)(colon - text), colon + 2, (uint32_t)(eol - colon - 2), fl);
        text = eol + 1;
    }
}

/* ---- our decoder and nghttp2's inflater, into lists ---- */

typedef struct {
    buf_t *out;
    int stop_after; /* emit returns `stop_rc` after this many fields (-1: never) */
    int stop_rc;
    int seen;
} emit_ctx_t;

static int emit_list(void *ctx, const sws_hpack_field_t *f)
{
    emit_ctx_t *c = ctx;
    /* the pointers must be good for nl / vl bytes: ASan checks this copy */
    list_add(c->out, f->name, f->nl, f->value, f->vl, f->flags);
    if (++c->seen == c->stop_after)
        return c->stop_rc;
    return 0;
}

static int ours(sws_hpack_dec_t *d, const uint8_t *in, size_t n, size_t list_max, buf_t *out)
{
    out->n = 0;
    emit_ctx_t c = {out, -1, 0, 0};
    const uint8_t *g = (const uint8_t *)guard_place(in, n);
    return sws_hpack_decode(d, g, n, list_max, emit_list, &c);
}

static int ng_inflate(nghttp2_hd_inflater *inf, const uint8_t *in, size_t n, buf_t *out)
{
    out->n = 0;
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, n, 1);
        if (r < 0)
            return -1;
        in += r;
        n -= (size_t)r;
        if (fl & NGHTTP2_HD_INFLATE_EMIT)
            list_add(out, nv.name, (uint32_t)nv.namelen, nv.value, (uint32_t)nv.valuelen,
                     (nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) ? SWS_HPACK_NEVER : 0);
        if (fl & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(inf);
            return 0;
        }
        if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && n == 0)
            return -1;
    }
}

/* The table's entries as "name: value\n", newest first. */
static char *table_text(const sws_hpack_table_t *t)
{
    static char out[1 << 16];
    size_t o = 0;
    for (uint32_t k = 1; k <= t->n; k++) {
        const sws_hpack_ent_t *e = &t->ent[(t->ins - k) & t->ent_mask];
        for (uint32_t i = 0; i < e->nl; i++)
            out[o++] = (char)t->bytes[(e->off + i) % t->cap];
        out[o++] = ':';
        out[o++] = ' ';
        for (uint32_t i = 0; i < e->vl; i++)
            out[o++] = (char)t->bytes[(e->off + e->nl + i) % t->cap];
        out[o++] = '\n';
    }
    out[o] = 0;
    return out;
}

/* ---- RFC 7541 Appendix C ---- */

typedef struct {
    const char *name, *hex, *list, *table;
    uint32_t size;
} example_t;

/* Decodes a sequence of blocks on one decoder (limit: the table size of
 * the section), checking lists, table entries and size after each; then
 * every prefix of each block, on a decoder that has seen the blocks
 * before it, is refused or decodes without reading past its end. */
static void examples(const example_t *ex, size_t n, uint32_t limit)
{
    sws_hpack_dec_t d;
    CHECK(sws_hpack_dec_init(&d, 4096) == 0, "init");
    sws_hpack_dec_set_limit(&d, limit);
    d.expect = 0; /* Appendix C takes the limit as known from the start: no update first */
    buf_t got = {0}, want = {0};
    uint8_t in[512];
    for (size_t i = 0; i < n; i++) {
        size_t len = unhex(ex[i].hex, in);
        int rc = ours(&d, in, len, 1 << 20, &got);
        list_from_text(&want, ex[i].list);
        CHECK(rc == 0, "%s: rc %d", ex[i].name, rc);
        CHECK(list_eq(&got, &want), "%s: list\n%s", ex[i].name, list_text(&got));
        CHECK(strcmp(table_text(&d.t), ex[i].table) == 0, "%s: table\n%s", ex[i].name,
              table_text(&d.t));
        CHECK(d.t.size == ex[i].size, "%s: table size %u, want %u", ex[i].name, d.t.size,
              ex[i].size);
        t_end();
    }
    sws_hpack_dec_free(&d);
    for (size_t i = 0; i < n; i++) {
        size_t len = unhex(ex[i].hex, in);
        for (size_t cut = 0; cut < len; cut++) {
            CHECK(sws_hpack_dec_init(&d, 4096) == 0, "init");
            sws_hpack_dec_set_limit(&d, limit);
            d.expect = 0;
            uint8_t before[512];
            for (size_t j = 0; j < i; j++) {
                size_t bl = unhex(ex[j].hex, before);
                CHECK(ours(&d, before, bl, 1 << 20, &got) == 0, "replay");
            }
            int rc = ours(&d, in, cut, 1 << 20, &got);
            /* a cut between representations is a valid (shorter) block */
            CHECK(rc == 0 || rc == SWS_HPACK_ERR, "%s cut at %zu: rc %d", ex[i].name, cut, rc);
            sws_hpack_dec_free(&d);
        }
    }
    t_end();
    free(got.p);
    free(want.p);
}

static void appendix_c(void)
{
    /* C.1.2: 1337 with a 5-bit prefix, read as a table size update */
    {
        sws_hpack_dec_t d;
        buf_t got = {0};
        sws_hpack_dec_init(&d, 4096);
        const uint8_t b[] = {0x3f, 0x9a, 0x0a};
        CHECK(ours(&d, b, 3, 1000, &got) == 0 && d.t.max == 1337, "max %u", d.t.max);
        /* C.1.1: 10 with a 5-bit prefix */
        const uint8_t c[] = {0x2a};
        CHECK(ours(&d, c, 1, 1000, &got) == 0 && d.t.max == 10, "max %u", d.t.max);
        sws_hpack_dec_free(&d);
        free(got.p);
        t_end();
    }
    static const example_t c2[] = {
        {"C.2.1", "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
         "custom-key: custom-header\n", "custom-key: custom-header\n", 55},
    };
    static const example_t c2_2[] = {
        {"C.2.2", "040c 2f73 616d 706c 652f 7061 7468", ":path: /sample/path\n", "", 0}};
    static const example_t c2_3[] = {{"C.2.3", "1008 7061 7373 776f 7264 0673 6563 7265 74",
                                      "~password: secret\n", "", 0}};
    static const example_t c2_4[] = {{"C.2.4", "82", ":method: GET\n", "", 0}};
    examples(c2, 1, 4096);
    examples(c2_2, 1, 4096);
    examples(c2_3, 1, 4096);
    examples(c2_4, 1, 4096);

#define REQ1 ":method: GET\n:scheme: http\n:path: /\n:authority: www.example.com\n"
#define REQ2 REQ1 "cache-control: no-cache\n"
#define REQ3 ":method: GET\n:scheme: https\n:path: /index.html\n:authority: www.example.com\n" \
             "custom-key: custom-value\n"
#define T1 ":authority: www.example.com\n"
#define T2 "cache-control: no-cache\n" T1
#define T3 "custom-key: custom-value\n" T2
    static const example_t c3[] = {
        {"C.3.1", "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", REQ1, T1, 57},
        {"C.3.2", "8286 84be 5808 6e6f 2d63 6163 6865", REQ2, T2, 110},
        {"C.3.3", "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", REQ3,
         T3, 164},
    };
    examples(c3, 3, 4096);
    static const example_t c4[] = {
        {"C.4.1", "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", REQ1, T1, 57},
        {"C.4.2", "8286 84be 5886 a8eb 1064 9cbf", REQ2, T2, 110},
        {"C.4.3", "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", REQ3, T3, 164},
    };
    examples(c4, 3, 4096);

#define RES1 ":status: 302\ncache-control: private\ndate: Mon, 21 Oct 2013 20:13:21 GMT\n" \
             "location: https://www.example.com\n"
#define RES2 ":status: 307\ncache-control: private\ndate: Mon, 21 Oct 2013 20:13:21 GMT\n" \
             "location: https://www.example.com\n"
#define COOKIE "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
#define RES3 ":status: 200\ncache-control: private\ndate: Mon, 21 Oct 2013 20:13:22 GMT\n" \
             "location: https://www.example.com\ncontent-encoding: gzip\nset-cookie: " COOKIE "\n"
#define RT1 "location: https://www.example.com\ndate: Mon, 21 Oct 2013 20:13:21 GMT\n" \
            "cache-control: private\n:status: 302\n"
#define RT2 ":status: 307\nlocation: https://www.example.com\n" \
            "date: Mon, 21 Oct 2013 20:13:21 GMT\ncache-control: private\n"
#define RT3 "set-cookie: " COOKIE "\ncontent-encoding: gzip\ndate: Mon, 21 Oct 2013 20:13:22 GMT\n"
    static const example_t c5[] = {
        {"C.5.1",
         "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133"
         "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70"
         "6c65 2e63 6f6d",
         RES1, RT1, 222},
        {"C.5.2", "4803 3330 37c1 c0bf", RES2, RT2, 222},
        {"C.5.3",
         "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d"
         "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049"
         "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e"
         "3d31",
         RES3, RT3, 215},
    };
    examples(c5, 3, 256);
    static const example_t c6[] = {
        {"C.6.1",
         "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6"
         "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
         RES1, RT1, 222},
        {"C.6.2", "4883 640e ffc1 c0bf", RES2, RT2, 222},
        {"C.6.3",
         "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab"
         "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f"
         "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
         RES3, RT3, 215},
    };
    examples(c6, 3, 256);
}

/* Every static entry (and one past) decoded alike by ours and nghttp2. */
static void static_table(void)
{
    buf_t a = {0}, b = {0};
    for (unsigned i = 1; i <= 62; i++) {
        sws_hpack_dec_t d;
        nghttp2_hd_inflater *inf;
        sws_hpack_dec_init(&d, 4096);
        nghttp2_hd_inflate_new(&inf);
        uint8_t in[2] = {0x80 | i};
        int r1 = ours(&d, in, 1, 1 << 20, &a), r2 = ng_inflate(inf, in, 1, &b);
        CHECK(i == 62 ? r1 == SWS_HPACK_ERR && r2 < 0 : r1 == 0 && r2 == 0 && list_eq(&a, &b),
              "static %u: ours %d %s, nghttp2 %d %s", i, r1, list_text(&a), r2, list_text(&b));
        sws_hpack_dec_free(&d);
        nghttp2_hd_inflate_del(inf);
    }
    free(a.p);
    free(b.p);
    t_end();
}

/* ---- Huffman ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void huffman(void)
{
    uint8_t s[600], enc[2400], dec[1200];
    /* every symbol, alone and all together; random strings of each kind */
    for (int round = 0; round < 3000; round++) {
        size_t n;
        if (round < 256) {
            s[0] = (uint8_t)round;
            n = 1;
        } else if (round == 256) {
            for (n = 0; n < 256; n++)
                s[n] = (uint8_t)n;
        } else {
            n = rnd() % 600;
            int kind = round % 3;
            for (size_t i = 0; i < n; i++)
                s[i] = kind == 0 ? (uint8_t)rnd() : kind == 1 ? (uint8_t)(' ' + rnd() % 95)
                                                              : (uint8_t)("etaoin /-0123"[rnd() % 13]);
        }
        size_t el = sws_huff_encode(enc, s, n);
        CHECK(el == sws_huff_encoded_len(s, n), "round %d: length %zu vs %zu", round, el,
              sws_huff_encoded_len(s, n));
        const uint8_t *g = (const uint8_t *)guard_place(enc, el);
        ssize_t dl = sws_huff_decode(dec, sizeof dec, g, el);
        CHECK(dl == (ssize_t)n && memcmp(dec, s, n) == 0, "round %d: decoded %zd of %zu", round,
              dl, n);
        /* with less room: the same length, only room bytes written */
        if (n > 3) {
            memset(dec, 0xa5, sizeof dec);
            dl = sws_huff_decode(dec, 3, g, el);
            CHECK(dl == (ssize_t)n && memcmp(dec, s, 3) == 0 && dec[3] == 0xa5, "round %d room",
                  round);
        }
    }
    t_end();
    /* nghttp2 inflates a literal whose value is our Huffman coding of every byte */
    {
        uint8_t blk[700], *o = blk;
        for (size_t i = 0; i < 256; i++)
            s[i] = (uint8_t)(255 - i);
        size_t el = sws_huff_encode(enc, s, 256);
        *o++ = 0x00;
        *o++ = 0x01;
        *o++ = 'x';
        *o++ = 0xff; /* Huffman, length 127 + (el - 127) */
        size_t v = el - 127;
        while (v >= 128) {
            *o++ = (uint8_t)(0x80 | (v & 0x7f));
            v >>= 7;
        }
        *o++ = (uint8_t)v;
        memcpy(o, enc, el);
        o += el;
        nghttp2_hd_inflater *inf;
        nghttp2_hd_inflate_new(&inf);
        buf_t got = {0}, want = {0};
        list_add(&want, "x", 1, s, 256, 0);
        CHECK(ng_inflate(inf, blk, (size_t)(o - blk), &got) == 0 && list_eq(&got, &want),
              "nghttp2 on our Huffman");
        nghttp2_hd_inflate_del(inf);
        free(got.p);
        free(want.p);
    }
    t_end();
}

/* ---- the decoder's refusals ---- */

/* Decodes hex on a fresh decoder (limit 4096, list_max 1 MiB); the rc. */
static int dec_hex(const char *hex, uint32_t limit)
{
    static uint8_t in[1 << 17];
    size_t n = unhex(hex, in);
    sws_hpack_dec_t d;
    buf_t got = {0};
    sws_hpack_dec_init(&d, limit);
    int rc = ours(&d, in, n, 1 << 20, &got);
    /* and nghttp2 set up alike says the same: refused or not */
    nghttp2_hd_inflater *inf;
    nghttp2_hd_inflate_new(&inf);
    nghttp2_hd_inflate_change_table_size(inf, limit);
    buf_t ng = {0};
    int r2 = ng_inflate(inf, in, n, &ng);
    CHECK((rc == SWS_HPACK_ERR) == (r2 < 0), "%s: ours %d, nghttp2 %d", hex, rc, r2);
    if (rc == 0 && r2 == 0)
        CHECK(list_eq(&got, &ng), "%s: lists differ", hex);
    /* after a refusal, every later block is refused */
    if (rc == SWS_HPACK_ERR) {
        uint8_t ok[1] = {0x82};
        CHECK(ours(&d, ok, 1, 1 << 20, &got) == SWS_HPACK_ERR, "%s: decoder usable after ERR", hex);
    }
    nghttp2_hd_inflate_del(inf);
    sws_hpack_dec_free(&d);
    free(got.p);
    free(ng.p);
    return rc;
}

#define REFUSED(hex, limit, why)                                                                   \
    do {                                                                                           \
        CHECK(dec_hex(hex, limit) == SWS_HPACK_ERR, "%s: not refused", why);                       \
        t_end();                                                                                   \
    } while (0)
#define ACCEPTED(hex, limit, why)                                                                  \
    do {                                                                                           \
        CHECK(dec_hex(hex, limit) == 0, "%s: refused", why);                                       \
        t_end();                                                                                   \
    } while (0)

static void refusals(void)
{
    REFUSED("ff", 4096, "integer truncated after its prefix");
    REFUSED("ff 80", 4096, "integer truncated in its continuation");
    REFUSED("ff ff ff ff ff 0f", 4096, "integer over 2^32 - 1");
    REFUSED("ff 80 80 80 80 80 00", 4096, "integer of 6 bytes after its prefix");
    REFUSED("3f e1 ff ff ff 0f", 4096, "size update past 2^32 in its last byte");
    ACCEPTED("3f 80 80 80 80 00", 4096, "size update 31 in 5 continuation bytes (padded)");
    REFUSED("40 05 61 62", 4096, "string truncated");
    REFUSED("40", 4096, "literal with no name");
    REFUSED("41", 4096, "literal with no value");
    REFUSED("80", 4096, "indexed 0");
    REFUSED("be", 4096, "indexed 62 in an empty table");
    REFUSED("7e 01 61", 4096, "literal name index 62 in an empty table");
    REFUSED("0f 30 01 61", 4096, "literal name index 63 in an empty table");
    REFUSED("3f e2 1f", 4096, "size update to 4097 over the limit 4096");
    ACCEPTED("3f e1 1f", 4096, "size update to 4096");
    ACCEPTED("20 3f e1 1f 82", 4096, "two size updates first, then a field");
    REFUSED("82 20", 4096, "size update after the first field");
    REFUSED("82", 256, "no size update first when the limit is under 4096");
    REFUSED("", 256, "empty block when a size update is due");
    REFUSED("3f e2 01 82", 256, "size update to 257 when 256 is the limit");
    ACCEPTED("3f e1 01 82", 256, "size update to 256 when it is the limit");
    ACCEPTED("20 82", 0, "size update to 0 with limit 0");
    ACCEPTED("", 4096, "empty block");
    /* Huffman: 'a' is 00011; padding 111 */
    ACCEPTED("00 01 78 81 1f", 4096, "'a' with 3 bits of padding");
    REFUSED("00 01 78 82 1f ff", 4096, "padding of 11 bits");
    REFUSED("00 01 78 81 18", 4096, "padding not all 1s");
    REFUSED("00 01 78 84 ff ff ff ff", 4096, "EOS inside a string (30 1s, then 2)");
    REFUSED("00 01 78 85 1f ff ff ff ff", 4096, "EOS after a symbol");
    REFUSED("00 81 ff 01 61", 4096, "a Huffman name of padding only, 8 bits");
    ACCEPTED("00 80 80", 4096, "empty Huffman name and value");
}

/* TOO_BIG and emit's stop: the block is decoded to its end, the table stays
 * in step, the list stops where it went over. */
static void limits(void)
{
    sws_hpack_dec_t d;
    buf_t got = {0};
    uint8_t in[256];
    sws_hpack_dec_init(&d, 4096);
    /* C.3.1 then C.3.2 with list_max under C.3.2's list: TOO_BIG, the table
     * still has cache-control: no-cache (C.3.3 decodes) */
    size_t n = unhex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", in);
    CHECK(ours(&d, in, n, 1 << 20, &got) == 0, "C.3.1");
    n = unhex("8286 84be 5808 6e6f 2d63 6163 6865", in);
    /* sizes: 42 + 43 + 38 + 57 = 180 for the first four, 233 with the fifth */
    int rc = ours(&d, in, n, 180, &got);
    buf_t want = {0};
    list_from_text(&want, REQ1);
    CHECK(rc == SWS_HPACK_TOO_BIG && list_eq(&got, &want), "rc %d, list\n%s", rc, list_text(&got));
    CHECK(d.t.size == 110, "size %u", d.t.size);
    n = unhex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", in);
    list_from_text(&want, REQ3);
    CHECK(ours(&d, in, n, 1 << 20, &got) == 0 && list_eq(&got, &want) && d.t.size == 164,
          "C.3.3 after TOO_BIG");
    sws_hpack_dec_free(&d);
    t_end();

    /* emit says stop (1) after 2 fields: 0 returned, the table in step */
    sws_hpack_dec_init(&d, 4096);
    n = unhex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", in);
    emit_ctx_t c = {&got, 2, 1, 0};
    got.n = 0;
    rc = sws_hpack_decode(&d, (const uint8_t *)guard_place(in, n), n, 1 << 20, emit_list, &c);
    CHECK(rc == 0 && c.seen == 2 && d.t.size == 57, "stop: rc %d, seen %d", rc, c.seen);
    /* emit aborts (-7): returned, and the decoder refuses from then on */
    c = (emit_ctx_t){&got, 1, -7, 0};
    rc = sws_hpack_decode(&d, (const uint8_t *)guard_place(in, n), n, 1 << 20, emit_list, &c);
    CHECK(rc == -7 && c.seen == 1, "abort: rc %d", rc);
    CHECK(ours(&d, in, 1, 1 << 20, &got) == SWS_HPACK_ERR, "usable after abort");
    sws_hpack_dec_free(&d);
    t_end();

    /* a field over SWS_HPACK_FIELD_MAX: TOO_BIG, not ERR, with indexing it
     * empties the table; nghttp2 refuses the block (its own 64 KiB limit) */
    {
        size_t vl = SWS_HPACK_FIELD_MAX + 10;
        uint8_t *blk = malloc(vl + 64), *o = blk;
        *o++ = 0x82;
        *o++ = 0x41; /* with indexing, name :authority */
        *o++ = 0x7f;
        size_t v = vl - 127;
        while (v >= 128) {
            *o++ = (uint8_t)(0x80 | (v & 0x7f));
            v >>= 7;
        }
        *o++ = (uint8_t)v;
        memset(o, 'a', vl);
        o += vl;
        *o++ = 0x84;
        sws_hpack_dec_init(&d, 4096);
        uint8_t pre[] = {0x41, 0x01, 'x'}; /* one entry, to see it go */
        CHECK(ours(&d, pre, 3, 1 << 20, &got) == 0 && d.t.n == 1, "pre");
        rc = ours(&d, blk, (size_t)(o - blk), 1 << 30, &got);
        list_from_text(&want, ":method: GET\n");
        CHECK(rc == SWS_HPACK_TOO_BIG && list_eq(&got, &want) && d.t.n == 0 && d.t.size == 0,
              "over FIELD_MAX: rc %d, n %u", rc, d.t.n);
        sws_hpack_dec_free(&d);
        /* the same value Huffman-coded ('a' is 5 bits): decoded past the
         * scratch's bound, still TOO_BIG */
        o = blk;
        *o++ = 0x41;
        *o++ = 0xff;
        size_t hl = (vl * 5 + 7) / 8;
        v = hl - 127;
        while (v >= 128) {
            *o++ = (uint8_t)(0x80 | (v & 0x7f));
            v >>= 7;
        }
        *o++ = (uint8_t)v;
        uint8_t *a = malloc(vl);
        memset(a, 'a', vl);
        o += sws_huff_encode(o, a, vl);
        sws_hpack_dec_init(&d, 4096);
        rc = ours(&d, blk, (size_t)(o - blk), 1 << 30, &got);
        CHECK(rc == SWS_HPACK_TOO_BIG && got.n == 0 && d.t.n == 0 && d.scap <= SWS_HPACK_FIELD_MAX,
              "Huffman over FIELD_MAX: rc %d, scratch %u", rc, d.scap);
        sws_hpack_dec_free(&d);
        free(a);
        free(blk);
    }
    t_end();
    free(got.p);
    free(want.p);
}

/* ---- generated header lists, both ways ---- */

static const char *const gen_names[] = {
    ":status", "server", "content-type", "content-length", "date", "set-cookie", "x-request-id",
    "cache-control", "etag", "vary", "location", "x-custom", "x-powered-by", "last-modified",
    "access-control-allow-origin", "age", "cookie", "authorization", "content-encoding",
    "strict-transport-security", ":path", ":authority", "x-trace", "link", "accept-ranges", "via",
};
static const char *const never_names[] = {"set-cookie", "cookie", "authorization",
                                          "proxy-authorization", "x-request-id"};

static int is_never_name(const uint8_t *n, uint32_t nl)
{
    for (size_t i = 0; i < sizeof never_names / sizeof *never_names; i++)
        if (strlen(never_names[i]) == nl && memcmp(never_names[i], n, nl) == 0)
            return 1;
    return 0;
}

/* Random bytes for names and values live here for the block's lifetime. */
static uint8_t gen_arena[1 << 18];

static size_t gen_list(sws_hpack_field_t *f, size_t max)
{
    size_t n = rnd() % (max + 1), used = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        const char *nm = gen_names[r % (sizeof gen_names / sizeof *gen_names)];
        f[i].name = (const uint8_t *)nm;
        f[i].nl = (uint32_t)strlen(nm);
        f[i].flags = rnd() % 23 == 0 ? SWS_HPACK_NEVER : 0;
        uint8_t *v = gen_arena + used;
        size_t vl;
        switch ((r >> 8) % 8) {
        case 0: /* from a small pool: repeats */
        case 1:
        case 2:
            vl = (size_t)snprintf((char *)v, 64, "v%u", (unsigned)((r >> 16) % 6));
            break;
        case 3: /* a number, often repeated */
            vl = (size_t)snprintf((char *)v, 64, "%u", (unsigned)((r >> 16) % 40) * 1000);
            break;
        case 4: /* printable, random */
            vl = (r >> 16) % 60;
            for (size_t j = 0; j < vl; j++)
                v[j] = (uint8_t)(' ' + rnd() % 95);
            break;
        case 5: /* any byte */
            vl = (r >> 16) % 40;
            for (size_t j = 0; j < vl; j++)
                v[j] = (uint8_t)rnd();
            break;
        case 6: /* long: table-sized and over */
            vl = (r >> 16) % 5000;
            for (size_t j = 0; j < vl; j++)
                v[j] = (uint8_t)("abcdefgh"[rnd() % 8]);
            break;
        default:
            vl = 0;
        }
        used += vl;
        f[i].value = v;
        f[i].vl = (uint32_t)vl;
        if (rnd() % 30 == 0) { /* a random name, any bytes, maybe empty */
            uint8_t *nb = gen_arena + used;
            size_t nl = rnd() % 12;
            for (size_t j = 0; j < nl; j++)
                nb[j] = (uint8_t)(rnd() % 3 ? 'a' + rnd() % 26 : rnd());
            used += nl;
            f[i].name = nb;
            f[i].nl = (uint32_t)nl;
        }
    }
    return n;
}

/* Our encoder -> nghttp2's inflater, 6,000 blocks on one connection; the
 * peer's SETTINGS_HEADER_TABLE_SIZE changes now and then, once or twice
 * between two blocks. */
static void encode_to_nghttp2(void)
{
    static const uint32_t sizes[] = {0, 64, 100, 256, 1000, 4096, 8192, 65536};
    sws_hpack_enc_t e;
    nghttp2_hd_inflater *inf;
    CHECK(sws_hpack_enc_init(&e) == 0, "init");
    nghttp2_hd_inflate_new(&inf);
    sws_hpack_field_t f[40];
    buf_t got = {0}, want = {0};
    static uint8_t out[1 << 18];
    size_t blocks = 0, bytes = 0, raw = 0, failures = 0;
    for (int b = 0; b < 6000 && failures < 5; b++) {
        if (rnd() % 40 == 0) {
            for (int k = 1 + (int)(rnd() % 2); k > 0; k--) {
                uint32_t s = sizes[rnd() % 8];
                sws_hpack_enc_peer_max(&e, s);
                nghttp2_hd_inflate_change_table_size(inf, s);
            }
        }
        size_t n = gen_list(f, 30);
        size_t bound = sws_hpack_encode_bound(f, n);
        size_t len = sws_hpack_encode(&e, f, n, out);
        want.n = 0;
        for (size_t i = 0; i < n; i++) {
            list_add(&want, f[i].name, f[i].nl, f[i].value, f[i].vl,
                     (f[i].flags & SWS_HPACK_NEVER) || is_never_name(f[i].name, f[i].nl)
                         ? SWS_HPACK_NEVER
                         : 0);
            raw += f[i].nl + f[i].vl;
        }
        int r = ng_inflate(inf, out, len, &got);
        int ok = len <= bound && r == 0 && list_eq(&got, &want) &&
                 nghttp2_hd_inflate_get_dynamic_table_size(inf) == e.t.size &&
                 nghttp2_hd_inflate_get_num_table_entries(inf) == 61 + e.t.n;
        CHECK(ok, "block %d: len %zu bound %zu, nghttp2 %d, sizes %zu / %u, entries %zu / %u\n"
                  "sent:\n%s",
              b, len, bound, r, nghttp2_hd_inflate_get_dynamic_table_size(inf), e.t.size,
              nghttp2_hd_inflate_get_num_table_entries(inf), e.t.n, list_text(&want));
        if (!ok) {
            fprintf(stderr, "got:\n%s", list_text(&got));
            failures++;
        }
        blocks++;
        bytes += len;
    }
    printf("encode -> nghttp2: %zu blocks, %zu bytes of fields in %zu bytes\n", blocks, raw, bytes);
    nghttp2_hd_inflate_del(inf);
    sws_hpack_enc_free(&e);
    free(got.p);
    free(want.p);
    t_end();
}

/* nghttp2's deflater -> our decoder, 6,000 blocks; our limit changes now
 * and then (set_limit, and the deflater told the same). */
static void nghttp2_to_decode(void)
{
    static const uint32_t sizes[] = {0, 64, 100, 256, 1000, 2048, 4096};
    nghttp2_hd_deflater *def;
    sws_hpack_dec_t d;
    nghttp2_hd_deflate_new(&def, 4096);
    CHECK(sws_hpack_dec_init(&d, 4096) == 0, "init");
    sws_hpack_field_t f[40];
    nghttp2_nv nv[40];
    buf_t got = {0}, want = {0};
    static uint8_t out[1 << 18];
    size_t failures = 0;
    for (int b = 0; b < 6000 && failures < 5; b++) {
        if (rnd() % 40 == 0) {
            for (int k = 1 + (int)(rnd() % 2); k > 0; k--) {
                uint32_t s = sizes[rnd() % 7];
                nghttp2_hd_deflate_change_table_size(def, s);
                sws_hpack_dec_set_limit(&d, s);
            }
        }
        size_t n = gen_list(f, 30);
        want.n = 0;
        for (size_t i = 0; i < n; i++) {
            nv[i] = (nghttp2_nv){(uint8_t *)f[i].name, (uint8_t *)f[i].value, f[i].nl, f[i].vl,
                                 (f[i].flags & SWS_HPACK_NEVER) ? NGHTTP2_NV_FLAG_NO_INDEX : 0};
            list_add(&want, f[i].name, f[i].nl, f[i].value, f[i].vl, 0);
        }
        ssize_t len = nghttp2_hd_deflate_hd(def, out, sizeof out, nv, n);
        CHECK(len >= 0, "deflate %zd", len);
        int rc = ours(&d, out, (size_t)len, 1 << 20, &got);
        /* flags: nghttp2 chooses never-indexed for some fields of its own
         * (authorization, short cookies); ours must report at least what
         * was asked. Compare without them. */
        for (size_t i = 0, j = 0; i < got.n; j++) {
            uint32_t nl, vl;
            memcpy(&nl, got.p + i, 4);
            memcpy(&vl, got.p + i + 4 + nl, 4);
            uint8_t *fl = got.p + i + 8 + nl + vl;
            if (j < n && (f[j].flags & SWS_HPACK_NEVER))
                CHECK(*fl == SWS_HPACK_NEVER, "block %d field %zu: not never-indexed", b, j);
            *fl = 0;
            i += 9 + nl + vl;
        }
        int ok = rc == 0 && list_eq(&got, &want) &&
                 nghttp2_hd_deflate_get_dynamic_table_size(def) == d.t.size;
        CHECK(ok, "block %d: rc %d, sizes %zu / %u\nsent:\n%s", b, rc,
              nghttp2_hd_deflate_get_dynamic_table_size(def), d.t.size, list_text(&want));
        if (!ok)
            failures++;
    }
    nghttp2_hd_deflate_del(def);
    sws_hpack_dec_free(&d);
    free(got.p);
    free(want.p);
    t_end();
}

/* ---- the encoder's policy, on the wire ---- */

static sws_hpack_field_t fld(const char *n, const char *v)
{
    return (sws_hpack_field_t){(const uint8_t *)n, (const uint8_t *)v, (uint32_t)strlen(n),
                               (uint32_t)strlen(v), 0};
}

static void policy(void)
{
    sws_hpack_enc_t e;
    nghttp2_hd_inflater *inf;
    uint8_t out[4096];
    buf_t got = {0};
    sws_hpack_enc_init(&e);
    nghttp2_hd_inflate_new(&inf);

    /* :status 200 is static index 8 */
    sws_hpack_field_t s200 = fld(":status", "200");
    CHECK(sws_hpack_encode(&e, &s200, 1, out) == 1 && out[0] == 0x88, "status 200: %02x", out[0]);
    CHECK(ng_inflate(inf, out, 1, &got) == 0, "inflate");
    t_end();

    /* set-cookie: name index 55 never indexed: 0001 1111, 55 - 15 = 40 */
    sws_hpack_field_t sc = fld("set-cookie", "id=42; Secure");
    size_t n = sws_hpack_encode(&e, &sc, 1, out);
    CHECK(n > 2 && out[0] == 0x1f && out[1] == 40, "set-cookie: %02x %02x", out[0], out[1]);
    CHECK(ng_inflate(inf, out, n, &got) == 0 && got.p[got.n - 1] == SWS_HPACK_NEVER,
          "nghttp2 does not report NO_INDEX for set-cookie");
    t_end();

    /* x-request-id: no static name: 0x10, then the name literal */
    sws_hpack_field_t rid = fld("x-request-id", "4bf92f3577b34da6a3ce929d0e0e4736");
    for (int i = 0; i < 2; i++) { /* the second time too: nothing was indexed */
        n = sws_hpack_encode(&e, &rid, 1, out);
        CHECK(out[0] == 0x10 && e.t.n == 0, "x-request-id: %02x, %u entries", out[0], e.t.n);
        CHECK(ng_inflate(inf, out, n, &got) == 0 && got.p[got.n - 1] == SWS_HPACK_NEVER,
              "nghttp2 does not report NO_INDEX for x-request-id");
    }
    /* any field flagged SWS_HPACK_NEVER, even one the static table has whole */
    sws_hpack_field_t nev = s200;
    nev.flags = SWS_HPACK_NEVER;
    n = sws_hpack_encode(&e, &nev, 1, out);
    CHECK(n == 4 && out[0] == 0x18 && out[1] == 0x82, "never :status 200: %02x %02x", out[0],
          out[1]);
    CHECK(ng_inflate(inf, out, n, &got) == 0 && got.p[got.n - 1] == SWS_HPACK_NEVER, "flag");
    t_end();

    /* the same answer twice: server, date and content-type indexed, the
     * second block shorter */
    sws_hpack_field_t res[] = {fld(":status", "200"), fld("server", "scalws"),
                               fld("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                               fld("content-type", "text/html; charset=utf-8"),
                               fld("content-length", "1234")};
    size_t n1 = sws_hpack_encode(&e, res, 5, out);
    CHECK(ng_inflate(inf, out, n1, &got) == 0, "inflate 1");
    uint32_t entries = e.t.n;
    CHECK(entries == 3, "entries after the first answer: %u", entries);
    size_t n2 = sws_hpack_encode(&e, res, 5, out);
    CHECK(ng_inflate(inf, out, n2, &got) == 0, "inflate 2");
    /* 88, server, date, content-type 1 each, content-length 5c 83 + 3 */
    CHECK(n2 < n1 && n2 == 1 + 1 + 1 + 1 + 5, "sizes %zu then %zu", n1, n2);
    CHECK(e.t.n == 4, "content-length indexed on its second sight: %u entries", e.t.n);
    /* third time: content-length indexed too */
    size_t n3 = sws_hpack_encode(&e, res, 5, out);
    CHECK(ng_inflate(inf, out, n3, &got) == 0, "inflate 3");
    CHECK(n3 == n2 - 4 && out[n3 - 1] >= 0xbe, "third %zu", n3);
    t_end();

    /* content-length: a new value each time is never indexed */
    char v[16];
    for (int i = 0; i < 50; i++) {
        snprintf(v, sizeof v, "%d", 100000 + i);
        sws_hpack_field_t cl = fld("content-length", v);
        n = sws_hpack_encode(&e, &cl, 1, out);
        CHECK(out[0] == 0x0f && out[1] == 28 - 15, "content-length %s: %02x", v, out[0]);
        CHECK(ng_inflate(inf, out, n, &got) == 0, "inflate");
    }
    CHECK(e.t.n == 4, "entries %u", e.t.n);
    t_end();

    /* a new date: indexed at once (name index 33), then one byte */
    sws_hpack_field_t date = fld("date", "Tue, 22 Oct 2013 20:13:21 GMT");
    for (int i = 0; i < 3; i++) {
        n = sws_hpack_encode(&e, &date, 1, out);
        CHECK(i ? n == 1 && out[0] == 0xbe : out[0] == 0x40 + 33, "date %d: %02x", i, out[0]);
        CHECK(e.t.n == 5 && ng_inflate(inf, out, n, &got) == 0, "inflate");
    }
    /* location: without indexing, name index 46 (0x0f 0x1f) */
    sws_hpack_field_t loc = fld("location", "https://www.example.com/a");
    for (int i = 0; i < 2; i++) {
        n = sws_hpack_encode(&e, &loc, 1, out);
        CHECK(out[0] == 0x0f && out[1] == 46 - 15 && e.t.n == 5, "location: %02x %02x", out[0],
              out[1]);
        CHECK(ng_inflate(inf, out, n, &got) == 0, "inflate");
    }
    t_end();

    /* a name only the dynamic table has: the literal indexes it there */
    sws_hpack_field_t a1 = fld("x-powered-by", "PHP/8.2"), a2 = fld("x-powered-by", "PHP/8.3");
    n = sws_hpack_encode(&e, &a1, 1, out);
    CHECK(out[0] == 0x40 && e.t.n == 6, "x-powered-by: %02x", out[0]);
    CHECK(ng_inflate(inf, out, n, &got) == 0, "inflate");
    n = sws_hpack_encode(&e, &a2, 1, out);
    CHECK(out[0] == 0x7e, "x-powered-by, name index 62: %02x", out[0]);
    CHECK(ng_inflate(inf, out, n, &got) == 0, "inflate");
    t_end();

    /* the peer shrinks its table to 100 then grows it to 4096 before our
     * next block: two updates, 100 then 4096; the table keeps <= 100 */
    sws_hpack_enc_peer_max(&e, 100);
    nghttp2_hd_inflate_change_table_size(inf, 100);
    sws_hpack_enc_peer_max(&e, 4096);
    nghttp2_hd_inflate_change_table_size(inf, 4096);
    n = sws_hpack_encode(&e, &s200, 1, out);
    CHECK(n == 6 && out[0] == 0x3f && out[1] == 100 - 31 && out[2] == 0x3f && out[5] == 0x88,
          "updates: %zu bytes, %02x %02x %02x", n, out[0], out[1], out[2]);
    CHECK(e.t.size <= 100, "size %u", e.t.size);
    CHECK(ng_inflate(inf, out, n, &got) == 0, "inflate updates");
    /* a change back to the same size before the next block: nothing sent */
    sws_hpack_enc_peer_max(&e, 8192);
    n = sws_hpack_encode(&e, &s200, 1, out);
    CHECK(n == 1, "no update for a size we do not use: %zu", n);
    CHECK(ng_inflate(inf, out, n, &got) == 0, "inflate");
    t_end();

    nghttp2_hd_inflate_del(inf);
    sws_hpack_enc_free(&e);

    /* a table capped under 4096: the first block announces it */
    sws_hpack_enc_init_cap(&e, 512);
    nghttp2_hd_inflate_new(&inf);
    n = sws_hpack_encode(&e, res, 5, out);
    CHECK(out[0] == 0x3f && out[1] == 0xe1 && out[2] == 0x03, "cap 512: %02x %02x %02x", out[0],
          out[1], out[2]);
    CHECK(ng_inflate(inf, out, n, &got) == 0 && nghttp2_hd_inflate_get_max_dynamic_table_size(inf) == 512,
          "cap 512 inflate");
    nghttp2_hd_inflate_del(inf);
    sws_hpack_enc_free(&e);
    free(got.p);
    t_end();
}

#include "hpack_bench.h" /* --bench */

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench();
        return 0;
    }
    appendix_c();
    static_table();
    huffman();
    refusals();
    limits();
    policy();
    encode_to_nghttp2();
    nghttp2_to_decode();
    return t_summary();
}
