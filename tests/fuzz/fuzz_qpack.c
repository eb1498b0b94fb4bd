/*
 * fuzz_qpack.c — fuzz driver for csrc/http/h3/qpack.c (RFC 9204), with
 * libnghttp3's QPACK as the oracle.
 *
 * Byte 0, bit 7 clear: decoder mode. Bits 0-3 pick the table capacity we
 * announce (SIZES), given to our decoder and to an nghttp3 decoder alike.
 * The rest are records [ctl][len][len bytes] (the last may be short):
 *  - ctl & 3 == 0: bytes of the client's encoder stream, to both. Both
 *    take them, with the same Insert Count after; or both refuse, and the
 *    connection ends there. One divergence is allowed: nghttp3 judges a
 *    Huffman string's bytes as they come, ours when the instruction is
 *    whole, so nghttp3 may refuse while ours still waits for the rest
 *    (elen > 0); the input ends there too.
 *  - ctl & 3 == 1: a field section of stream 4 * (ctl >> 2), to both:
 *    both decode it to the same fields and never-indexed flags, or both
 *    say blocked, or both refuse (and the connection ends).
 *  - ctl & 3 == 2: every section that was blocked, again (in order).
 *  - ctl & 3 == 3: the decoder-stream bytes ours has pending are taken.
 * Sections blocked are kept (at most 16) for ctl 2.
 *
 * Bit 7 set: encoder mode. The rest are records making one field list:
 * [ctl][nl][name][vl][value]: ctl bit 0 flags the field never-indexed,
 * bit 1 takes the name from NAMES[nl byte] (no name bytes), bit 2 ends
 * the list here, and the input's remainder is a client's decoder stream.
 * Our encoding must fit its bound, be the same bytes through the encoder's
 * memo (empty, then holding the list), and decode in nghttp3 to the list,
 * never-indexed where asked (and for the names ADR 0022 names); the
 * decoder stream is given to ours and to an nghttp3 encoder that inserted
 * nothing: both take it or both refuse it.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include <stdio.h>

#include "qpack_oracle.h"

static int failures;

#ifdef FUZZING
#define FAIL(...) (fprintf(stderr, "contract broken: " __VA_ARGS__), fputc('\n', stderr), __builtin_trap())
#else
#define FAIL(...) (fprintf(stderr, "contract broken: " __VA_ARGS__), fputc('\n', stderr), ++failures)
#endif

static const uint32_t SIZES[16] = {4096, 0, 1, 31, 32, 33, 64, 100, 220, 256, 1000, 2048, 4095, 8192, 16384, 65536};
static const char *NAMES[8] = {":status", "content-type", "set-cookie", "x-request-id",
                               "server", "cookie", "x-unknown", "authorization"};

typedef struct {
    uint64_t sid;
    qbuf_t sec;
} held_t;

/* One section to both decoders: 1 go on, 0 the connection ended. */
static int section(sws_qpack_dec_t *d, nghttp3_qpack_decoder *ng, uint64_t sid, const uint8_t *p,
                   size_t n, held_t *held, size_t *nheld)
{
    qbuf_t a = {0}, b = {0};
    int ro = ours_section(d, sid, p, n, &a);
    int rn = ng_section(ng, (int64_t)sid, p, n, &b);
    int go = 1;
    if (ro == 0 && rn == NG_OK) {
        if (!qlist_eq(&a, &b))
            FAIL("stream %llu: the lists differ", (unsigned long long)sid);
    } else if (ro == SWS_QPACK_BLOCKED && rn == NG_BLOCKED) {
        if (*nheld < 16) {
            held[*nheld].sid = sid;
            held[*nheld].sec = (qbuf_t){0};
            qbuf_put(&held[(*nheld)++].sec, p, n);
        }
    } else if (ro == SWS_QPACK_ERR && rn == NG_ERR) {
        go = 0;
    } else {
        FAIL("stream %llu: ours %d, nghttp3 %d", (unsigned long long)sid, ro, rn);
        go = 0;
    }
    free(a.p), free(b.p);
    return go;
}

static void decoder_mode(const uint8_t *data, size_t size)
{
    uint32_t cap = SIZES[data[0] & 15];
    sws_qpack_dec_t d;
    sws_qpack_dec_init(&d, cap);
    nghttp3_qpack_decoder *ng;
    if (nghttp3_qpack_decoder_new(&ng, cap, 100, nghttp3_mem_default()) != 0)
        abort();
    held_t held[16];
    size_t nheld = 0;
    const uint8_t *p = data + 1, *end = data + size;
    while (end - p >= 2) {
        uint8_t ctl = p[0];
        size_t len = p[1];
        p += 2;
        if (len > (size_t)(end - p))
            len = (size_t)(end - p);
        const uint8_t *rec = p;
        p += len;
        int go = 1;
        switch (ctl & 3) {
        case 0: {
            int ro = sws_qpack_dec_encoder(&d, rec, len);
            nghttp3_ssize rn = nghttp3_qpack_decoder_read_encoder(ng, rec, len);
            if (ro == 0 && rn == (nghttp3_ssize)len) {
                if (nghttp3_qpack_decoder_get_icnt(ng) != d.inserts)
                    FAIL("insert counts: nghttp3 %llu, ours %llu",
                         (unsigned long long)nghttp3_qpack_decoder_get_icnt(ng),
                         (unsigned long long)d.inserts);
            } else if (ro == SWS_QPACK_ENC_STREAM && rn < 0) {
                go = 0;
            } else if (ro == 0 && rn < 0 && d.elen > 0) {
                go = 0; /* nghttp3 refused a string ours has not all of yet */
            } else {
                FAIL("encoder stream: ours %d, nghttp3 %lld", ro, (long long)rn);
                go = 0;
            }
            break;
        }
        case 1:
            go = section(&d, ng, 4u * (ctl >> 2), rec, len, held, &nheld);
            break;
        case 2: {
            held_t again[16];
            size_t n = nheld;
            memcpy(again, held, sizeof held);
            nheld = 0;
            for (size_t i = 0; i < n; i++) {
                if (go)
                    go = section(&d, ng, again[i].sid, again[i].sec.p, again[i].sec.n, held, &nheld);
                free(again[i].sec.p);
            }
            break;
        }
        case 3: {
            const uint8_t *o;
            sws_qpack_dec_taken(&d, sws_qpack_dec_pending(&d, &o));
            break;
        }
        }
        if (!go)
            break;
    }
    for (size_t i = 0; i < nheld; i++)
        free(held[i].sec.p);
    sws_qpack_dec_free(&d);
    nghttp3_qpack_decoder_del(ng);
}

static int sensitive(const sws_hpack_field_t *f)
{
    static const char *s[] = {"set-cookie", "cookie", "authorization", "proxy-authorization",
                              "x-request-id"};
    for (size_t i = 0; i < 5; i++)
        if (f->nl == strlen(s[i]) && memcmp(f->name, s[i], f->nl) == 0)
            return 1;
    return (f->flags & SWS_HPACK_NEVER) != 0;
}

static void encoder_mode(const uint8_t *data, size_t size)
{
    sws_hpack_field_t f[64];
    size_t n = 0;
    const uint8_t *p = data + 1, *end = data + size;
    while (n < 64 && p < end) {
        uint8_t ctl = p[0];
        if (ctl & 4) {
            p++;
            break;
        }
        if (end - p < 3)
            break;
        sws_hpack_field_t *x = &f[n];
        x->flags = ctl & 1 ? SWS_HPACK_NEVER : 0;
        if (ctl & 2) {
            const char *nm = NAMES[p[1] & 7];
            x->name = (const uint8_t *)nm;
            x->nl = (uint32_t)strlen(nm);
            p += 2;
        } else {
            size_t nl = p[1];
            if (nl > (size_t)(end - p - 2))
                break;
            x->name = p + 2;
            x->nl = (uint32_t)nl;
            p += 2 + nl;
        }
        if (p == end)
            break;
        size_t vl = *p++;
        if (vl > (size_t)(end - p))
            vl = (size_t)(end - p);
        x->value = p;
        x->vl = (uint32_t)vl;
        p += vl;
        n++;
    }
    size_t bound = sws_qpack_encode_bound(f, n);
    uint8_t *out = malloc(bound), *again = malloc(bound);
    size_t len = sws_qpack_encode(f, n, out);
    if (len > bound)
        FAIL("%zu bytes over the bound %zu", len, bound);
    /* the memo's encoding is the same bytes, when it is empty and when it
     * holds the list (a field may meet another's entry in its slot) */
    static sws_qpack_memo_t memo;
    memset(&memo, 0, sizeof memo);
    for (int k = 0; k < 2; k++)
        if (sws_qpack_encode_memo(&memo, f, n, again) != len || memcmp(again, out, len) != 0)
            FAIL("the memo's encoding differs (pass %d)", k);
    free(again);
    nghttp3_qpack_decoder *ng;
    if (nghttp3_qpack_decoder_new(&ng, 0, 0, nghttp3_mem_default()) != 0)
        abort();
    qbuf_t got = {0}, want = {0};
    for (size_t i = 0; i < n; i++)
        qlist_add(&want, f[i].name, f[i].nl, f[i].value, f[i].vl, sensitive(&f[i]));
    int rc = ng_section(ng, 0, out, len, &got);
    if (rc != NG_OK || !qlist_eq(&got, &want))
        FAIL("our section of %zu fields: nghttp3 says %d%s", n, rc,
             rc == NG_OK ? ", another list" : "");
    free(got.p), free(want.p), free(out);
    nghttp3_qpack_decoder_del(ng);

    /* the rest: a client's decoder stream, to an encoder that inserted nothing */
    nghttp3_qpack_encoder *ne;
    if (nghttp3_qpack_encoder_new(&ne, 0, nghttp3_mem_default()) != 0)
        abort();
    sws_qpack_enc_t e = {0};
    size_t rest = (size_t)(end - p);
    int ro = sws_qpack_enc_decoder(&e, p, rest);
    nghttp3_ssize rn = nghttp3_qpack_encoder_read_decoder(ne, p, rest);
    if ((ro == 0) != (rn == (nghttp3_ssize)rest))
        FAIL("decoder stream of %zu bytes: ours %d, nghttp3 %lld", rest, ro, (long long)rn);
    nghttp3_qpack_encoder_del(ne);
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    if (data[0] & 0x80)
        encoder_mode(data, size);
    else
        decoder_mode(data, size);
}

#include "corpus_main.h"
