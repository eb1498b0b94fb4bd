/* QPACK (RFC 9204): the static table, the decoder (encoder-stream
 * instructions, field sections, the decoder stream) and the static-only
 * encoder. Contract in qpack.h. */
#include "http/h3/qpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the static table (RFC 9204 Appendix A) ---- */

#define S(n, v) {(const uint8_t *)n, (const uint8_t *)v, sizeof n - 1, sizeof v - 1}
typedef struct {
    const uint8_t *name, *value;
    uint8_t nl, vl;
} static_ent_t;

static const static_ent_t static_tab[SWS_QPACK_STATIC_N] = {
    S(":authority", ""), S(":path", "/"), S("age", "0"), S("content-disposition", ""),
    S("content-length", "0"), S("cookie", ""), S("date", ""), S("etag", ""),
    S("if-modified-since", ""), S("if-none-match", ""), S("last-modified", ""), S("link", ""),
    S("location", ""), S("referer", ""), S("set-cookie", ""), S(":method", "CONNECT"),
    S(":method", "DELETE"), S(":method", "GET"), S(":method", "HEAD"), S(":method", "OPTIONS"),
    S(":method", "POST"), S(":method", "PUT"), S(":scheme", "http"), S(":scheme", "https"),
    S(":status", "103"), S(":status", "200"), S(":status", "304"), S(":status", "404"),
    S(":status", "503"), S("accept", "*/*"), S("accept", "application/dns-message"),
    S("accept-encoding", "gzip, deflate, br"), S("accept-ranges", "bytes"),
    S("access-control-allow-headers", "cache-control"),
    S("access-control-allow-headers", "content-type"), S("access-control-allow-origin", "*"),
    S("cache-control", "max-age=0"), S("cache-control", "max-age=2592000"),
    S("cache-control", "max-age=604800"), S("cache-control", "no-cache"),
    S("cache-control", "no-store"), S("cache-control", "public, max-age=31536000"),
    S("content-encoding", "br"), S("content-encoding", "gzip"),
    S("content-type", "application/dns-message"), S("content-type", "application/javascript"),
    S("content-type", "application/json"), S("content-type", "application/x-www-form-urlencoded"),
    S("content-type", "image/gif"), S("content-type", "image/jpeg"), S("content-type", "image/png"),
    S("content-type", "text/css"), S("content-type", "text/html; charset=utf-8"),
    S("content-type", "text/plain"), S("content-type", "text/plain;charset=utf-8"),
    S("range", "bytes=0-"), S("strict-transport-security", "max-age=31536000"),
    S("strict-transport-security", "max-age=31536000; includesubdomains"),
    S("strict-transport-security", "max-age=31536000; includesubdomains; preload"),
    S("vary", "accept-encoding"), S("vary", "origin"), S("x-content-type-options", "nosniff"),
    S("x-xss-protection", "1; mode=block"), S(":status", "100"), S(":status", "204"),
    S(":status", "206"), S(":status", "302"), S(":status", "400"), S(":status", "403"),
    S(":status", "421"), S(":status", "425"), S(":status", "500"), S("accept-language", ""),
    S("access-control-allow-credentials", "FALSE"), S("access-control-allow-credentials", "TRUE"),
    S("access-control-allow-headers", "*"), S("access-control-allow-methods", "get"),
    S("access-control-allow-methods", "get, post, options"),
    S("access-control-allow-methods", "options"),
    S("access-control-expose-headers", "content-length"),
    S("access-control-request-headers", "content-type"),
    S("access-control-request-method", "get"), S("access-control-request-method", "post"),
    S("alt-svc", "clear"), S("authorization", ""),
    S("content-security-policy", "script-src 'none'; object-src 'none'; base-uri 'none'"),
    S("early-data", "1"), S("expect-ct", ""), S("forwarded", ""), S("if-range", ""),
    S("origin", ""), S("purpose", "prefetch"), S("server", ""), S("timing-allow-origin", "*"),
    S("upgrade-insecure-requests", "1"), S("user-agent", ""), S("x-forwarded-for", ""),
    S("x-frame-options", "deny"), S("x-frame-options", "sameorigin"),
};
#undef S

void sws_qpack_static(uint32_t i, sws_hpack_field_t *f)
{
    f->name = static_tab[i].name;
    f->nl = static_tab[i].nl;
    f->value = static_tab[i].value;
    f->vl = static_tab[i].vl;
    f->flags = 0;
}

/* ---- integers and strings (RFC 9204 4.1) ---- */

/* An integer with an n-bit prefix at *pp: 1 read (and *pp moved), 0 the
 * input ends inside it, -1 over 2^62 - 1 (or more than 62 bits of
 * continuation, as nghttp3 counts them). */
static int get_int(const uint8_t **pp, const uint8_t *end, unsigned bits, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p == end)
        return 0;
    uint64_t mask = (1u << bits) - 1, v = *p++ & mask;
    if (v == mask) {
        for (unsigned shift = 0;; shift += 7) {
            if (p == end)
                return 0;
            uint64_t add = *p & 0x7f;
            if (shift > 62 || (SWS_QPACK_INT_MAX >> shift) < add)
                return -1;
            add <<= shift;
            if (SWS_QPACK_INT_MAX - add < v)
                return -1;
            v += add;
            if (!(*p++ & 0x80))
                break;
        }
    }
    *pp = p;
    *out = v;
    return 1;
}

static int reserve(uint8_t **buf, uint32_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    if (need > UINT32_MAX / 2)
        return -1;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    uint8_t *p = realloc(*buf, c);
    if (!p)
        return -1;
    *buf = p;
    *cap = (uint32_t)c;
    return 0;
}

/* The longest string we take, as its bytes on the wire: a name 256, a
 * value 64 KiB (nghttp3's limits, kept so that clients see no change).
 * A string over them is an error of its stream or section. */
#define NAME_MAX_WIRE 256
#define VALUE_MAX_WIRE 65536
/* An encoder-stream instruction can be no longer than a name, a value and
 * their integers: more bytes than that without a whole one is an error. */
#define PARTIAL_MAX (NAME_MAX_WIRE + VALUE_MAX_WIRE + 32)

/* A string whose first byte is at *pp: the H bit is `hbit` of that byte,
 * the length an integer with a `bits` prefix, at most `max` bytes on the
 * wire. *s points at it in the input, or at its Huffman decoding in
 * scratch[at..]. Returns 1, 0 when the input ends inside it, -1 malformed
 * or too long, SWS_QPACK_NOMEM. */
static int get_str(sws_qpack_dec_t *d, const uint8_t **pp, const uint8_t *end, uint8_t hbit,
                   unsigned bits, size_t at, size_t max, const uint8_t **s, uint32_t *len)
{
    const uint8_t *p = *pp;
    if (p == end)
        return 0;
    int huff = *p & hbit;
    uint64_t n;
    int r = get_int(&p, end, bits, &n);
    if (r <= 0)
        return r;
    if (n > max)
        return -1;
    if (n > (size_t)(end - p))
        return 0;
    *pp = p + n;
    if (!huff) {
        *s = p;
        *len = (uint32_t)n;
        return 1;
    }
    size_t room = (size_t)n * 8 / 5; /* 5 bits is the shortest code */
    if (reserve(&d->scratch, &d->scap, at + room + 1) < 0)
        return SWS_QPACK_NOMEM;
    ssize_t got = sws_huff_decode(d->scratch + at, room, p, (size_t)n);
    if (got < 0 || (size_t)got > room)
        return -1;
    *s = d->scratch + at;
    *len = (uint32_t)got;
    return 1;
}

static int out_int(sws_qpack_dec_t *d, uint8_t first, unsigned bits, uint64_t v)
{
    if (reserve(&d->out, &d->ocap, (size_t)d->olen + 11) < 0)
        return SWS_QPACK_NOMEM;
    uint8_t *o = d->out + d->olen;
    uint64_t mask = (1u << bits) - 1;
    if (v < mask) {
        *o++ = (uint8_t)(first | v);
    } else {
        *o++ = (uint8_t)(first | mask);
        for (v -= mask; v >= 0x80; v >>= 7)
            *o++ = (uint8_t)(v | 0x80);
        *o++ = (uint8_t)v;
    }
    d->olen = (uint32_t)(o - d->out);
    return 0;
}

/* ---- the decoder's table ---- */

void sws_qpack_dec_init(sws_qpack_dec_t *d, uint32_t max_cap)
{
    memset(d, 0, sizeof *d);
    d->max_cap = max_cap < SWS_HPACK_FIELD_MAX ? max_cap : SWS_HPACK_FIELD_MAX;
}

void sws_qpack_dec_free(sws_qpack_dec_t *d)
{
    free(d->t.bytes);
    free(d->ebuf);
    free(d->scratch);
    free(d->out);
    memset(d, 0, sizeof *d);
}

/* Absolute index a's name and value, if the table holds it: pointers into
 * the ring, or into scratch[at..] when the entry wraps at its end (or
 * always, with copy: an insert may overwrite an evicted entry's bytes). */
static int dyn_get(sws_qpack_dec_t *d, uint64_t a, size_t at, int copy, sws_hpack_field_t *f)
{
    if (a >= d->inserts || d->inserts - a > d->t.n)
        return -1;
    const sws_hpack_ent_t *e = sws_hpack_tab_get(&d->t, (uint32_t)(d->inserts - a));
    f->nl = e->nl;
    f->vl = e->vl;
    if (!copy && e->off + e->nl + e->vl <= d->t.cap) {
        f->name = d->t.bytes + e->off;
    } else {
        if (reserve(&d->scratch, &d->scap, at + e->nl + e->vl + 1) < 0)
            return SWS_QPACK_NOMEM;
        sws_hpack_ring_read(&d->t, e->off, e->nl + e->vl, d->scratch + at);
        f->name = d->scratch + at;
    }
    f->value = f->name + e->nl;
    return 0;
}

static int dyn_insert(sws_qpack_dec_t *d, const sws_hpack_field_t *f)
{
    if ((uint64_t)f->nl + f->vl + SWS_HPACK_OVERHEAD > d->cap)
        return -1; /* RFC 9204 3.2.2: bigger than the capacity */
    (void)sws_hpack_tab_add(&d->t, f->name, f->nl, f->value, f->vl);
    d->inserts++;
    return 0;
}

/* One encoder-stream instruction at *pp (RFC 9204 4.3): 1 done, 0 not all
 * there yet (nothing changed), -1 an error, SWS_QPACK_NOMEM. */
static int enc_instruction(sws_qpack_dec_t *d, const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    uint8_t b = *p;
    uint64_t v;
    int r;
    sws_hpack_field_t f = {0};
    if ((b & 0xe0) == 0x20) { /* Set Dynamic Table Capacity */
        if ((r = get_int(&p, end, 5, &v)) <= 0)
            return r;
        if (v > d->max_cap)
            return -1;
        if (v && !d->t.bytes && sws_hpack_tab_init(&d->t, d->max_cap, 0) < 0)
            return SWS_QPACK_NOMEM;
        d->cap = (uint32_t)v;
        if (d->t.bytes)
            sws_hpack_tab_set_max(&d->t, d->cap);
    } else if (b & 0x80) { /* Insert with Name Reference */
        if ((r = get_int(&p, end, 6, &v)) <= 0)
            return r;
        /* the value first: an incomplete instruction must change nothing */
        const uint8_t *vp = p;
        if ((r = get_str(d, &vp, end, 0x80, 7, 0, VALUE_MAX_WIRE, &f.value, &f.vl)) <= 0)
            return r;
        if (b & 0x40) {
            if (v >= SWS_QPACK_STATIC_N)
                return -1;
            f.name = static_tab[v].name;
            f.nl = static_tab[v].nl;
        } else {
            sws_hpack_field_t ref;
            /* a Huffman-coded value sits at scratch[0]: the name goes after it */
            int in_scratch = f.vl && f.value == d->scratch;
            if (v >= d->inserts)
                return -1;
            if ((r = dyn_get(d, d->inserts - 1 - v, in_scratch ? f.vl : 0, 1, &ref)) < 0)
                return r;
            if (in_scratch)
                f.value = d->scratch; /* dyn_get may have moved scratch */
            f.name = ref.name;
            f.nl = ref.nl;
        }
        p = vp;
        if (dyn_insert(d, &f) < 0)
            return -1;
    } else if (b & 0x40) { /* Insert with Literal Name */
        if ((r = get_str(d, &p, end, 0x20, 5, 0, NAME_MAX_WIRE, &f.name, &f.nl)) <= 0)
            return r;
        int in_scratch = f.nl && f.name == d->scratch;
        if ((r = get_str(d, &p, end, 0x80, 7, in_scratch ? f.nl : 0, VALUE_MAX_WIRE, &f.value,
                         &f.vl)) <= 0)
            return r;
        if (in_scratch)
            f.name = d->scratch;
        if (dyn_insert(d, &f) < 0)
            return -1;
    } else { /* Duplicate */
        if ((r = get_int(&p, end, 5, &v)) <= 0)
            return r;
        if (v >= d->inserts)
            return -1;
        if ((r = dyn_get(d, d->inserts - 1 - v, 0, 1, &f)) < 0)
            return r;
        if (dyn_insert(d, &f) < 0)
            return -1;
    }
    *pp = p;
    return 1;
}

int sws_qpack_dec_encoder(sws_qpack_dec_t *d, const uint8_t *in, size_t n)
{
    if (d->bad)
        return SWS_QPACK_ENC_STREAM;
    if (!n)
        return 0;
    const uint8_t *p = in, *end = in + n;
    int buffered = d->elen != 0;
    if (buffered) { /* finish what the last call left, from one buffer */
        if (reserve(&d->ebuf, &d->ecap, (size_t)d->elen + n) < 0)
            goto nomem;
        memcpy(d->ebuf + d->elen, in, n);
        d->elen += (uint32_t)n;
        p = d->ebuf;
        end = d->ebuf + d->elen;
    }
    while (p < end) {
        int r = enc_instruction(d, &p, end);
        if (r == 0)
            break;
        if (r == SWS_QPACK_NOMEM)
            goto nomem;
        if (r < 0) {
            d->bad = 1;
            return SWS_QPACK_ENC_STREAM;
        }
    }
    size_t left = (size_t)(end - p);
    if (left > PARTIAL_MAX) {
        d->bad = 1;
        return SWS_QPACK_ENC_STREAM;
    }
    if (left && !buffered && reserve(&d->ebuf, &d->ecap, left) < 0)
        goto nomem;
    if (left)
        memmove(d->ebuf, p, left);
    d->elen = (uint32_t)left;
    return 0;
nomem:
    d->bad = 1;
    return SWS_QPACK_NOMEM;
}

/* ---- field sections ---- */

typedef struct {
    sws_hpack_emit_fn emit;
    void *ctx;
    size_t total, list_max;
    int emitting, rc;
} dec_out_t;

static int put_field(dec_out_t *o, const sws_hpack_field_t *f)
{
    o->total += (size_t)f->nl + f->vl + SWS_HPACK_OVERHEAD;
    if (o->total > o->list_max) {
        o->rc = SWS_QPACK_TOO_BIG;
        o->emitting = 0;
    }
    if (!o->emitting)
        return 0;
    int r = o->emit(o->ctx, f);
    if (r < 0)
        return r;
    if (r > 0)
        o->emitting = 0;
    return 0;
}

/* RFC 9204 4.5.1.1: the Required Insert Count from its encoding. */
static int required_count(const sws_qpack_dec_t *d, uint64_t enc, uint64_t *ric)
{
    *ric = 0;
    if (enc == 0)
        return 0;
    uint64_t max_entries = d->max_cap / SWS_HPACK_OVERHEAD, full = 2 * max_entries;
    if (enc > full)
        return -1;
    uint64_t max_value = d->inserts + max_entries;
    uint64_t r = max_value / full * full + enc - 1;
    if (r > max_value) {
        if (r <= full)
            return -1;
        r -= full;
    }
    if (r == 0)
        return -1;
    *ric = r;
    return 0;
}

/* A field line's table reference: static index v, or dynamic absolute a
 * (which must be under ric). */
static int ref_get(sws_qpack_dec_t *d, int is_static, uint64_t v, uint64_t ric,
                   sws_hpack_field_t *f)
{
    if (is_static) {
        if (v >= SWS_QPACK_STATIC_N)
            return -1;
        f->name = static_tab[v].name;
        f->nl = static_tab[v].nl;
        f->value = static_tab[v].value;
        f->vl = static_tab[v].vl;
        return 0;
    }
    if (v >= ric)
        return -1;
    return dyn_get(d, v, 0, 0, f);
}

int sws_qpack_decode(sws_qpack_dec_t *d, uint64_t stream_id, const uint8_t *p, size_t n,
                     size_t list_max, sws_hpack_emit_fn emit, void *ctx)
{
    if (d->bad)
        return SWS_QPACK_ERR;
    if (!n) /* not even the prefix */
        goto fail;
    const uint8_t *end = p + n;
    uint64_t enc, delta, ric, base;
    if (get_int(&p, end, 8, &enc) <= 0 || required_count(d, enc, &ric) < 0 || p == end)
        goto fail;
    int neg = *p & 0x80;
    if (get_int(&p, end, 7, &delta) <= 0)
        goto fail;
    if (neg) {
        if (ric <= delta)
            goto fail;
        base = ric - delta - 1;
    } else {
        base = ric + delta;
    }
    if (ric > d->inserts)
        return SWS_QPACK_BLOCKED;

    dec_out_t o = {emit, ctx, 0, list_max, 1, SWS_QPACK_OK};
    int r;
    while (p < end) {
        uint8_t b = *p;
        sws_hpack_field_t f = {0};
        uint64_t v;
        int value = 0; /* a literal's value follows */
        if (b & 0x80) { /* Indexed Field Line: T, 6-bit index */
            if (get_int(&p, end, 6, &v) <= 0 || (!(b & 0x40) && v >= base))
                goto fail;
            if ((r = ref_get(d, b & 0x40, b & 0x40 ? v : base - 1 - v, ric, &f)) < 0)
                goto fail_r;
        } else if (b & 0x40) { /* Literal Field Line with Name Reference: N, T, 4-bit index */
            if (get_int(&p, end, 4, &v) <= 0 || (!(b & 0x10) && v >= base))
                goto fail;
            if ((r = ref_get(d, b & 0x10, b & 0x10 ? v : base - 1 - v, ric, &f)) < 0)
                goto fail_r;
            f.flags = b & 0x20 ? SWS_HPACK_NEVER : 0;
            value = 1;
        } else if (b & 0x20) { /* Literal Field Line with Literal Name */
            f.flags = b & 0x10 ? SWS_HPACK_NEVER : 0;
            if ((r = get_str(d, &p, end, 0x08, 3, 0, NAME_MAX_WIRE, &f.name, &f.nl)) <= 0)
                goto fail_r;
            value = 1;
        } else if (b & 0x10) { /* Indexed Field Line with Post-Base Index */
            if (get_int(&p, end, 4, &v) <= 0)
                goto fail;
            if ((r = ref_get(d, 0, base + v, ric, &f)) < 0)
                goto fail_r;
        } else { /* Literal Field Line with Post-Base Name Reference */
            if (get_int(&p, end, 3, &v) <= 0)
                goto fail;
            if ((r = ref_get(d, 0, base + v, ric, &f)) < 0)
                goto fail_r;
            f.flags = b & 0x08 ? SWS_HPACK_NEVER : 0;
            value = 1;
        }
        if (value) {
            /* a name in scratch (Huffman-decoded, or an entry across the
             * ring's end) is at scratch[0]: the value goes after it */
            int in_scratch = f.nl && f.name == d->scratch;
            if ((r = get_str(d, &p, end, 0x80, 7, in_scratch ? f.nl : 0, VALUE_MAX_WIRE,
                             &f.value, &f.vl)) <= 0)
                goto fail_r;
            if (in_scratch)
                f.name = d->scratch; /* get_str may have moved scratch */
        }
        if ((r = put_field(&o, &f)) < 0) {
            d->bad = 1;
            return r;
        }
    }
    if (ric && out_int(d, 0x80, 7, stream_id) < 0) /* Section Acknowledgment */
        goto nomem;
    if (ric > d->known)
        d->known = ric;
    return o.rc;
fail_r:
    if (r == SWS_QPACK_NOMEM)
        goto nomem;
fail:
    d->bad = 1;
    return SWS_QPACK_ERR;
nomem:
    d->bad = 1;
    return SWS_QPACK_NOMEM;
}

/* ---- the decoder stream ---- */

int sws_qpack_dec_cancel(sws_qpack_dec_t *d, uint64_t stream_id)
{
    if (!d->max_cap)
        return 0; /* RFC 9204 4.4.2: no table, nothing to cancel */
    return out_int(d, 0x40, 6, stream_id);
}

size_t sws_qpack_dec_pending(sws_qpack_dec_t *d, const uint8_t **p)
{
    if (d->inserts > d->known && out_int(d, 0x00, 6, d->inserts - d->known) == 0)
        d->known = d->inserts; /* Insert Count Increment */
    *p = d->out;
    return d->olen;
}

void sws_qpack_dec_taken(sws_qpack_dec_t *d, size_t n)
{
    if (n >= d->olen) {
        d->olen = 0;
        return;
    }
    memmove(d->out, d->out + n, d->olen - n);
    d->olen -= (uint32_t)n;
}

/* ---- the encoder ---- */

int sws_qpack_enc_decoder(sws_qpack_enc_t *e, const uint8_t *in, size_t n)
{
    for (size_t i = 0; i < n && !e->bad; i++) {
        e->part[e->plen++] = in[i];
        const uint8_t *p = e->part;
        uint8_t b = e->part[0];
        uint64_t v;
        int r = get_int(&p, e->part + e->plen, b & 0x80 ? 7 : 6, &v);
        if (r == 0 && e->plen < sizeof e->part)
            continue;
        /* a Stream Cancellation is the one instruction we can be sent */
        if (r <= 0 || (b & 0xc0) != 0x40)
            e->bad = 1;
        e->plen = 0;
    }
    return e->bad ? SWS_QPACK_DEC_STREAM : 0;
}

/* The static table by name: each distinct name, its indices; a small open
 * hash over them, built once. */
#define NAMES_MAX 64
#define NAME_SLOTS 128
typedef struct {
    const uint8_t *name;
    uint8_t nl, n;
    uint8_t idx[14];
} qname_t;
static qname_t qnames[NAMES_MAX];
static uint8_t qname_slot[NAME_SLOTS]; /* 1 + index into qnames, 0: free */
static pthread_once_t qnames_once = PTHREAD_ONCE_INIT;

static inline uint32_t name_hash(const uint8_t *s, size_t n)
{
    uint32_t h = (uint32_t)n * 0x9e3779b1u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x01000193u;
    return h ^ (h >> 15);
}

static qname_t *qname_find(const uint8_t *name, size_t nl)
{
    for (uint32_t h = name_hash(name, nl);; h++) {
        uint8_t s = qname_slot[h & (NAME_SLOTS - 1)];
        if (!s)
            return NULL;
        qname_t *q = &qnames[s - 1];
        if (q->nl == nl && memcmp(q->name, name, nl) == 0)
            return q;
    }
}

static void qnames_build(void)
{
    size_t used = 0;
    for (uint8_t i = 0; i < SWS_QPACK_STATIC_N; i++) {
        const static_ent_t *s = &static_tab[i];
        qname_t *q = qname_find(s->name, s->nl);
        if (!q) {
            q = &qnames[used++];
            q->name = s->name;
            q->nl = s->nl;
            uint32_t h = name_hash(s->name, s->nl);
            while (qname_slot[h & (NAME_SLOTS - 1)])
                h++;
            qname_slot[h & (NAME_SLOTS - 1)] = (uint8_t)used;
        }
        q->idx[q->n++] = i;
    }
}

static int sensitive(const uint8_t *n, size_t l)
{
    switch (l) {
    case 6:
        return memcmp(n, "cookie", 6) == 0;
    case 10:
        return memcmp(n, "set-cookie", 10) == 0;
    case 12:
        return memcmp(n, "x-request-id", 12) == 0;
    case 13:
        return memcmp(n, "authorization", 13) == 0;
    case 19:
        return memcmp(n, "proxy-authorization", 19) == 0;
    }
    return 0;
}

size_t sws_qpack_encode_bound(const sws_hpack_field_t *f, size_t n)
{
    size_t b = 2;
    for (size_t i = 0; i < n; i++) /* a prefix integer takes at most 6 bytes here */
        b += 12 + f[i].nl + f[i].vl;
    return b;
}

static uint8_t *put_int(uint8_t *o, uint8_t first, unsigned bits, uint32_t v)
{
    uint32_t mask = (1u << bits) - 1;
    if (v < mask) {
        *o++ = (uint8_t)(first | v);
        return o;
    }
    *o++ = (uint8_t)(first | mask);
    for (v -= mask; v >= 0x80; v >>= 7)
        *o++ = (uint8_t)(v | 0x80);
    *o++ = (uint8_t)v;
    return o;
}

/* A string with its H bit at `hbit` and a `bits` prefix, Huffman-coded
 * when that is shorter. */
static uint8_t *put_str(uint8_t *o, uint8_t first, uint8_t hbit, unsigned bits, const uint8_t *s,
                        uint32_t n)
{
    size_t h = sws_huff_encoded_len(s, n);
    if (h < n) {
        o = put_int(o, first | hbit, bits, (uint32_t)h);
        return o + sws_huff_encode(o, s, n);
    }
    o = put_int(o, first, bits, n);
    memcpy(o, s, n);
    return o + n;
}

/* One field line (never: the N bit). */
static uint8_t *encode_field(const sws_hpack_field_t *x, int never, uint8_t *o)
{
    const qname_t *q = x->nl < 256 ? qname_find(x->name, x->nl) : NULL;
    if (q && !never)
        for (unsigned k = 0; k < q->n; k++) {
            const static_ent_t *s = &static_tab[q->idx[k]];
            if (s->vl == x->vl && memcmp(s->value, x->value, x->vl) == 0)
                return put_int(o, 0xc0, 6, q->idx[k]); /* Indexed, static */
        }
    if (q) /* Literal with Name Reference, static: 01NT */
        o = put_int(o, never ? 0x70 : 0x50, 4, q->idx[0]);
    else /* Literal with Literal Name: 001NH */
        o = put_str(o, never ? 0x30 : 0x20, 0x08, 3, x->name, x->nl);
    return put_str(o, 0x00, 0x80, 7, x->value, x->vl);
}

/* A field's key for the memo: name and value, 8 bytes a step (the tail in
 * two loads that may overlap, no call to memcpy). */
static inline uint64_t memo_hash(const uint8_t *p, size_t n, uint64_t h)
{
    uint64_t w = 0;
    for (; n > 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    if (n == 8) {
        memcpy(&w, p, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4), memcpy(&b, p + n - 4, 4);
        w = (uint64_t)a << 32 | b;
    } else if (n) {
        w = (uint64_t)p[0] << 16 | (uint64_t)p[n / 2] << 8 | p[n - 1];
    }
    h = (h ^ w ^ n) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}

static inline int memo_eq(const sws_qpack_memo_ent_t *e, const sws_hpack_field_t *x)
{
    return e->nl == x->nl && e->vl == x->vl && e->elen && sws_bytes_eq(e->key, x->name, x->nl) &&
           sws_bytes_eq(e->key + x->nl, x->value, x->vl);
}

static void memo_set(sws_qpack_memo_ent_t *e, uint64_t h, const sws_hpack_field_t *x,
                     const uint8_t *enc, size_t len)
{
    e->h = h;
    e->nl = (uint8_t)x->nl;
    e->vl = (uint8_t)x->vl;
    e->elen = (uint8_t)len;
    memcpy(e->key, x->name, x->nl);
    memcpy(e->key + x->nl, x->value, x->vl);
    memcpy(e->enc, enc, len);
}

size_t sws_qpack_encode_memo(sws_qpack_memo_t *m, const sws_hpack_field_t *f, size_t n,
                             uint8_t *out)
{
    pthread_once(&qnames_once, qnames_build);
    uint8_t *o = out;
    *o++ = 0; /* Required Insert Count 0 */
    *o++ = 0; /* Base 0 */
    for (size_t i = 0; i < n; i++) {
        const sws_hpack_field_t *x = &f[i];
        int never = (x->flags & SWS_HPACK_NEVER) || sensitive(x->name, x->nl);
        /* never-indexed fields are not kept: they are the secrets and
         * what changes on every answer */
        if (!m || never || x->nl + x->vl > SWS_QPACK_MEMO_KEY) {
            o = encode_field(x, never, o);
            continue;
        }
        sws_qpack_memo_ent_t *p = i < SWS_QPACK_MEMO_POS ? &m->pos[i] : NULL;
        if (p && memo_eq(p, x)) {
            memcpy(o, p->enc, p->elen);
            o += p->elen;
            m->hits++;
            continue;
        }
        uint64_t h = memo_hash(x->value, x->vl, memo_hash(x->name, x->nl, x->nl));
        sws_qpack_memo_ent_t *e = &m->e[h & (SWS_QPACK_MEMO - 1)];
        if (e->h == h && memo_eq(e, x)) {
            memcpy(o, e->enc, e->elen);
            if (p)
                memo_set(p, h, x, e->enc, e->elen);
            o += e->elen;
            m->hits++;
            continue;
        }
        uint8_t *start = o;
        o = encode_field(x, never, o);
        size_t len = (size_t)(o - start);
        m->misses++;
        if (len > sizeof e->enc) {
            e->elen = 0;
            if (p)
                p->elen = 0;
            continue;
        }
        memo_set(e, h, x, start, len);
        if (p)
            memo_set(p, h, x, start, len);
    }
    return (size_t)(o - out);
}

size_t sws_qpack_encode(const sws_hpack_field_t *f, size_t n, uint8_t *out)
{
    return sws_qpack_encode_memo(NULL, f, n, out);
}
