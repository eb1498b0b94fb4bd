/*
 * fuzz_hpack.c — fuzz driver for csrc/http/h2/hpack.c and huffman.c
 * (RFC 7541), with libnghttp2's HPACK as the oracle.
 *
 * Input byte 0 picks the mode (bit 7) and a table size (bits 0-3, from
 * SIZES). The rest:
 *
 * Decoder mode (bit 7 clear): byte 1 picks a header list limit (bits
 * 0-2, from LIST_MAX) and, when bit 3 is set, makes emit answer 1 (stop
 * emitting) at field (byte 1 >> 4) + 1 of every block. Then header
 * blocks, each behind a length byte L
 * (L < 0xe0: L bytes; 0xf0 | h, l: (h << 8 | l) bytes; the last block may
 * be short). A length byte 0xe0 | i instead lowers or raises our
 * SETTINGS_HEADER_TABLE_SIZE between blocks (set_limit on ours,
 * change_table_size on nghttp2: SIZES[i], capped at the first size, the
 * most our arena holds). Our decoder (limit SIZES[byte 0], list_max) and an
 * nghttp2 inflater set up alike (inflate_new, change_table_size) decode
 * each block; they must agree:
 *  - both refuse (COMPRESSION_ERROR), and the connection ends there; or
 *  - both decode, to the same fields, the same never-indexed flags, and
 *    then hold tables of the same size and entry count; or
 *  - ours says SWS_HPACK_TOO_BIG: what it emitted is the start of
 *    nghttp2's list, up to the field whose running sum of nl + vl + 32
 *    first went over list_max (nghttp2 has no such limit), and the tables
 *    are still in step;
 *  - and when emit said stop, ours emitted no field after that one, and
 *    still decoded the block to its end (same rc, tables in step).
 * Divergences kept on purpose: none reachable from these inputs (nghttp2
 * refuses a string over 64 KiB, ours makes that block TOO_BIG; inputs
 * are shorter).
 *
 * Encoder mode (bit 7 set): our table's cap is SIZES[byte 1 & 15]
 * (enc_init_cap), the peer's SETTINGS_HEADER_TABLE_SIZE SIZES[byte 0 &
 * 15]. Then records, each a field of a header list:
 *   [ctl][name: nl byte + bytes, or a name index][vl byte][value bytes]
 * ctl bit 6: end the block so far before this field; bit 7: then change
 * the peer's SETTINGS_HEADER_TABLE_SIZE to SIZES[ctl & 15] (enc_peer_max,
 * and the nghttp2 inflater's change_table_size; fields are encoded only
 * when their block ends, so this is between blocks) and read no field;
 * bit 5: the name is NAMES[next byte]; bit 0: SWS_HPACK_NEVER; bit 1: the
 * field is the previous block's at this position (no more bytes read;
 * ignored where that block had none); bit 4 with bit 6: the block that ends goes out
 * twice (the encoder's memo of positions, hpack.h). Each block our encoder writes must fit its bound and
 * inflate in nghttp2 to exactly the list given, never-indexed where asked
 * (and for set-cookie, cookie, authorization, proxy-authorization,
 * x-request-id), with the same table size on both sides.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/h2/hpack.h"

static int failures;

#ifdef FUZZING
#define FAIL(...) (fprintf(stderr, "contract broken: " __VA_ARGS__), fputc('\n', stderr), __builtin_trap())
#else
#define FAIL(...) (fprintf(stderr, "contract broken: " __VA_ARGS__), fputc('\n', stderr), ++failures)
#endif

static const uint32_t SIZES[16] = {4096, 0, 1, 31, 32, 33, 64, 100, 256, 1000, 2048, 4095, 4097, 8192, 16384, 65536};
static const size_t LIST_MAX[8] = {(size_t)1 << 40, 0, 32, 100, 300, 1000, 4096, 16384};

/* ---- field lists, serialized: nl, name, vl, value, flags ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf_t;

static void buf_put(buf_t *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

typedef struct {
    buf_t b;
    size_t fields;
    size_t sum; /* nl + vl + 32 over the fields */
} list_t;

static void list_add(list_t *l, const void *name, uint32_t nl, const void *value, uint32_t vl,
                     uint8_t flags)
{
    buf_put(&l->b, &nl, 4);
    buf_put(&l->b, name, nl);
    buf_put(&l->b, &vl, 4);
    buf_put(&l->b, value, vl);
    buf_put(&l->b, &flags, 1);
    l->fields++;
    l->sum += (size_t)nl + vl + 32;
}

static void list_reset(list_t *l)
{
    l->b.n = 0;
    l->fields = 0;
    l->sum = 0;
}

/* Bytes of l's first k fields, and their size sum in *sum. */
static size_t list_prefix(const list_t *l, size_t k, size_t *sum)
{
    size_t i = 0;
    *sum = 0;
    for (size_t f = 0; f < k; f++) {
        uint32_t nl, vl;
        memcpy(&nl, l->b.p + i, 4);
        memcpy(&vl, l->b.p + i + 4 + nl, 4);
        *sum += (size_t)nl + vl + 32;
        i += 9 + nl + vl;
    }
    return i;
}

static size_t stop_at; /* emit answers 1 at this field (0: never) */

/* How many of l's first fields keep the running sum of nl + vl + 32 within max. */
static size_t fields_fitting(const list_t *l, size_t max)
{
    size_t i = 0, sum = 0, f = 0;
    for (; f < l->fields; f++) {
        uint32_t nl, vl;
        memcpy(&nl, l->b.p + i, 4);
        memcpy(&vl, l->b.p + i + 4 + nl, 4);
        sum += (size_t)nl + vl + 32;
        if (sum > max)
            break;
        i += 9 + nl + vl;
    }
    return f;
}

static int emit(void *ctx, const sws_hpack_field_t *f)
{
    list_t *l = ctx;
    list_add(l, f->name, f->nl, f->value, f->vl, f->flags);
    return l->fields == stop_at;
}

/* nghttp2 inflates one whole block into l; 0, or -1 when it refuses. */
static int ng_inflate(nghttp2_hd_inflater *inf, const uint8_t *in, size_t n, list_t *l)
{
    list_reset(l);
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, n, 1);
        if (r < 0)
            return -1;
        in += r;
        n -= (size_t)r;
        if (fl & NGHTTP2_HD_INFLATE_EMIT)
            list_add(l, nv.name, (uint32_t)nv.namelen, nv.value, (uint32_t)nv.valuelen,
                     (nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) ? SWS_HPACK_NEVER : 0);
        if (fl & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(inf);
            return 0;
        }
        if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && n == 0)
            return -1;
    }
}

static list_t ours_l, ng_l;

/* ---- decoder mode ---- */

static void fuzz_decode(const uint8_t *p, size_t n, uint32_t limit, size_t list_max)
{
    sws_hpack_dec_t d;
    nghttp2_hd_inflater *inf;
    if (sws_hpack_dec_init(&d, limit) < 0 || nghttp2_hd_inflate_new(&inf) != 0)
        abort();
    nghttp2_hd_inflate_change_table_size(inf, limit);
    size_t blk = 0;
    while (n) {
        size_t len = p[0];
        p++, n--;
        if (len >= 0xe0 && len < 0xf0) { /* our SETTINGS_HEADER_TABLE_SIZE changes */
            uint32_t v = SIZES[len & 15] < limit ? SIZES[len & 15] : limit;
            sws_hpack_dec_set_limit(&d, v);
            nghttp2_hd_inflate_change_table_size(inf, v);
            continue;
        }
        if (len >= 0xf0) {
            len = (len & 15) << 8 | (n ? p[0] : 0);
            if (n)
                p++, n--;
        }
        if (len > n)
            len = n;
        /* each block in a heap block of exactly its size: ASan sees a read past it */
        uint8_t *in = malloc(len ? len : 1);
        memcpy(in, p, len);
        p += len, n -= len;
        list_reset(&ours_l);
        int rc = sws_hpack_decode(&d, in, len, list_max, emit, &ours_l);
        int ng = ng_inflate(inf, in, len, &ng_l);
        free(in);
        if (rc != SWS_HPACK_OK && rc != SWS_HPACK_ERR && rc != SWS_HPACK_TOO_BIG)
            FAIL("block %zu: rc %d", blk, rc);
        if ((rc == SWS_HPACK_ERR) != (ng < 0)) {
            FAIL("block %zu: ours %d, nghttp2 %s", blk, rc, ng < 0 ? "refuses" : "accepts");
            break;
        }
        if (rc == SWS_HPACK_ERR)
            break; /* a connection error: nothing follows */
        size_t fit = fields_fitting(&ng_l, list_max), sum;
        size_t want = fit < stop_at || !stop_at ? fit : stop_at;
        size_t bytes = list_prefix(&ng_l, want, &sum);
        if (rc != (fit < ng_l.fields ? SWS_HPACK_TOO_BIG : SWS_HPACK_OK))
            FAIL("block %zu: rc %d, yet %zu of nghttp2's %zu fields fit in %zu", blk, rc, fit,
                 ng_l.fields, list_max);
        else if (ours_l.fields != want || bytes != ours_l.b.n ||
                 (bytes && memcmp(ours_l.b.p, ng_l.b.p, bytes)))
            FAIL("block %zu: ours emitted %zu fields, not nghttp2's first %zu", blk,
                 ours_l.fields, want);
        if (d.t.size != nghttp2_hd_inflate_get_dynamic_table_size(inf) ||
            61 + d.t.n != nghttp2_hd_inflate_get_num_table_entries(inf))
            FAIL("block %zu: tables out of step: %u bytes %u entries, nghttp2 %zu %zu", blk,
                 d.t.size, d.t.n, nghttp2_hd_inflate_get_dynamic_table_size(inf),
                 nghttp2_hd_inflate_get_num_table_entries(inf) - 61);
        blk++;
    }
    sws_hpack_dec_free(&d);
    nghttp2_hd_inflate_del(inf);
}

/* ---- encoder mode ---- */

static const char *const NAMES[] = {
    ":status", ":authority", ":method", ":path", ":scheme", "server", "content-type",
    "content-length", "date", "set-cookie", "cookie", "authorization", "proxy-authorization",
    "x-request-id", "cache-control", "etag", "vary", "location", "last-modified", "expires", "age",
    "content-encoding", "accept-ranges", "alt-svc", "access-control-allow-origin",
    "access-control-expose-headers", "strict-transport-security", "x-content-type-options",
    "x-powered-by", "link", "x-custom", "accept-encoding",
};
#define N_NAMES (sizeof NAMES / sizeof *NAMES)

static int never_name(const uint8_t *n, uint32_t nl)
{
    static const char *const never[] = {"set-cookie", "cookie", "authorization",
                                        "proxy-authorization", "x-request-id"};
    for (size_t i = 0; i < 5; i++)
        if (strlen(never[i]) == nl && memcmp(never[i], n, nl) == 0)
            return 1;
    return 0;
}

#define MAX_FIELDS 256

static void enc_block(sws_hpack_enc_t *e, nghttp2_hd_inflater *inf, sws_hpack_field_t *f,
                      size_t nf, size_t blk)
{
    size_t bound = sws_hpack_encode_bound(f, nf);
    uint8_t *out = malloc(bound);
    size_t len = sws_hpack_encode(e, f, nf, out);
    if (len > bound)
        FAIL("encoder block %zu: %zu bytes over the bound %zu", blk, len, bound);
    list_t *want = &ours_l;
    list_reset(want);
    for (size_t i = 0; i < nf; i++)
        list_add(want, f[i].name, f[i].nl, f[i].value, f[i].vl,
                 (f[i].flags & SWS_HPACK_NEVER) || never_name(f[i].name, f[i].nl) ? SWS_HPACK_NEVER
                                                                                   : 0);
    if (ng_inflate(inf, out, len, &ng_l) < 0)
        FAIL("encoder block %zu: nghttp2 refuses it", blk);
    else if (want->b.n != ng_l.b.n || (want->b.n && memcmp(want->b.p, ng_l.b.p, want->b.n)))
        FAIL("encoder block %zu: nghttp2 inflates another list (%zu fields, %zu given)", blk,
             ng_l.fields, nf);
    else if (e->t.size != nghttp2_hd_inflate_get_dynamic_table_size(inf))
        FAIL("encoder block %zu: tables out of step", blk);
    free(out);
}

static void fuzz_encode(const uint8_t *p, size_t n, uint32_t peer, uint32_t cap)
{
    sws_hpack_enc_t e;
    nghttp2_hd_inflater *inf;
    if (sws_hpack_enc_init_cap(&e, cap) < 0 || nghttp2_hd_inflate_new(&inf) != 0)
        abort();
    sws_hpack_enc_peer_max(&e, peer);
    nghttp2_hd_inflate_change_table_size(inf, peer);
    static sws_hpack_field_t f[MAX_FIELDS], prev[MAX_FIELDS];
    size_t nf = 0, nprev = 0, blk = 0;
    const uint8_t *end = p + n;
    while (p < end) {
        uint8_t ctl = *p++;
        if ((ctl & 0x40) || nf == MAX_FIELDS) {
            enc_block(&e, inf, f, nf, blk++);
            if ((ctl & 0x50) == 0x50)
                enc_block(&e, inf, f, nf, blk++);
            memcpy(prev, f, nf * sizeof *f);
            nprev = nf;
            nf = 0;
        }
        if (ctl & 0x80) {
            sws_hpack_enc_peer_max(&e, SIZES[ctl & 15]);
            nghttp2_hd_inflate_change_table_size(inf, SIZES[ctl & 15]);
            continue;
        }
        sws_hpack_field_t *x = &f[nf];
        if ((ctl & 2) && nf < nprev) {
            *x = prev[nf++];
            continue;
        }
        if (ctl & 0x20) {
            const char *nm = NAMES[(p < end ? *p++ : 0) % N_NAMES];
            x->name = (const uint8_t *)nm;
            x->nl = (uint32_t)strlen(nm);
        } else {
            size_t nl = p < end ? *p++ : 0;
            if (nl > (size_t)(end - p))
                nl = (size_t)(end - p);
            x->name = p;
            x->nl = (uint32_t)nl;
            p += nl;
        }
        size_t vl = p < end ? *p++ : 0;
        if (vl > (size_t)(end - p))
            vl = (size_t)(end - p);
        x->value = p;
        x->vl = (uint32_t)vl;
        p += vl;
        x->flags = ctl & 1 ? SWS_HPACK_NEVER : 0;
        nf++;
    }
    enc_block(&e, inf, f, nf, blk);
    sws_hpack_enc_free(&e);
    nghttp2_hd_inflate_del(inf);
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    uint32_t size_pick = SIZES[data[0] & 15];
    stop_at = data[1] & 8 ? (size_t)(data[1] >> 4) + 1 : 0;
    if (data[0] & 0x80)
        fuzz_encode(data + 2, size - 2, size_pick, SIZES[data[1] & 15]);
    else
        fuzz_decode(data + 2, size - 2, size_pick, LIST_MAX[data[1] & 7]);
}

#define FUZZ_CORPUS_DONE()                                                                         \
    do {                                                                                           \
        free(ours_l.b.p);                                                                          \
        free(ng_l.b.p);                                                                            \
    } while (0)
#include "corpus_main.h"
