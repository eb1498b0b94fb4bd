/*
 * qpack_oracle.h — what tests/c/test_qpack.c and tests/fuzz/fuzz_qpack.c
 * share: field lists as bytes, and one field section decoded by our QPACK
 * decoder and by libnghttp3's (the oracle) into such a list.
 */
#ifndef SCALWS_TEST_QPACK_ORACLE_H
#define SCALWS_TEST_QPACK_ORACLE_H

#include <nghttp3/nghttp3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/h3/qpack.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} qbuf_t;

static inline void qbuf_put(qbuf_t *b, const void *s, size_t n)
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

/* A field list serialized: nl, name, vl, value, never per field. */
static inline void qlist_add(qbuf_t *b, const void *name, uint32_t nl, const void *value,
                             uint32_t vl, int never)
{
    uint8_t fl = never ? 1 : 0;
    qbuf_put(b, &nl, 4);
    qbuf_put(b, name, nl);
    qbuf_put(b, &vl, 4);
    qbuf_put(b, value, vl);
    qbuf_put(b, &fl, 1);
}

static inline int qlist_eq(const qbuf_t *a, const qbuf_t *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

static int qlist_emit(void *ctx, const sws_hpack_field_t *f)
{
    qlist_add(ctx, f->name, f->nl, f->value, f->vl, f->flags & SWS_HPACK_NEVER);
    return 0;
}

/* Ours: sws_qpack_decode's result, the fields in *out. */
static inline int ours_section(sws_qpack_dec_t *d, uint64_t sid, const uint8_t *p, size_t n,
                               qbuf_t *out)
{
    out->n = 0;
    return sws_qpack_decode(d, sid, p, n, SIZE_MAX, qlist_emit, out);
}

enum { NG_OK = 0, NG_BLOCKED = 1, NG_ERR = -1 };

/* nghttp3's: the whole section with fin, a fresh stream context each time
 * (a blocked one is read again from its start, as ours is). */
static inline int ng_section(nghttp3_qpack_decoder *dec, int64_t sid, const uint8_t *p, size_t n,
                             qbuf_t *out)
{
    nghttp3_qpack_stream_context *sc;
    if (nghttp3_qpack_stream_context_new(&sc, sid, nghttp3_mem_default()) != 0)
        abort();
    out->n = 0;
    int rc = NG_ERR;
    for (;;) {
        nghttp3_qpack_nv nv;
        uint8_t fl = 0;
        nghttp3_ssize r = nghttp3_qpack_decoder_read_request(dec, sc, &nv, &fl, p, n, 1);
        if (r < 0)
            break;
        p += r;
        n -= (size_t)r;
        if (fl & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
            nghttp3_vec nm = nghttp3_rcbuf_get_buf(nv.name), v = nghttp3_rcbuf_get_buf(nv.value);
            qlist_add(out, nm.base, (uint32_t)nm.len, v.base, (uint32_t)v.len,
                      nv.flags & NGHTTP3_NV_FLAG_NEVER_INDEX);
            nghttp3_rcbuf_decref(nv.name);
            nghttp3_rcbuf_decref(nv.value);
        }
        if (fl & NGHTTP3_QPACK_DECODE_FLAG_FINAL) {
            rc = NG_OK;
            break;
        }
        if (fl & NGHTTP3_QPACK_DECODE_FLAG_BLOCKED) {
            rc = NG_BLOCKED;
            break;
        }
        if (r == 0 && !(fl & NGHTTP3_QPACK_DECODE_FLAG_EMIT))
            break; /* no progress: cannot happen with fin, but never loop */
    }
    nghttp3_qpack_stream_context_del(sc);
    return rc;
}

#endif
