/* HPACK (RFC 7541): the static table, the dynamic tables as rings, the
 * decoder and the encoder with its indexing policy. Contract in hpack.h. */
#include "http/h2/hpack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the static table (RFC 7541 Appendix A) ---- */

#define S(n, v) {(const uint8_t *)n, (const uint8_t *)v, sizeof n - 1, sizeof v - 1}
typedef struct {
    const uint8_t *name, *value;
    uint8_t nl, vl;
} static_ent_t;

#define STATIC_N 61
static const static_ent_t static_tab[STATIC_N + 1] = {
    {0, 0, 0, 0}, /* index 0 is not an entry */
    S(":authority", ""), S(":method", "GET"), S(":method", "POST"), S(":path", "/"),
    S(":path", "/index.html"), S(":scheme", "http"), S(":scheme", "https"), S(":status", "200"),
    S(":status", "204"), S(":status", "206"), S(":status", "304"), S(":status", "400"),
    S(":status", "404"), S(":status", "500"), S("accept-charset", ""),
    S("accept-encoding", "gzip, deflate"), S("accept-language", ""), S("accept-ranges", ""),
    S("accept", ""), S("access-control-allow-origin", ""), S("age", ""), S("allow", ""),
    S("authorization", ""), S("cache-control", ""), S("content-disposition", ""),
    S("content-encoding", ""), S("content-language", ""), S("content-length", ""),
    S("content-location", ""), S("content-range", ""), S("content-type", ""), S("cookie", ""),
    S("date", ""), S("etag", ""), S("expect", ""), S("expires", ""), S("from", ""), S("host", ""),
    S("if-match", ""), S("if-modified-since", ""), S("if-none-match", ""), S("if-range", ""),
    S("if-unmodified-since", ""), S("last-modified", ""), S("link", ""), S("location", ""),
    S("max-forwards", ""), S("proxy-authenticate", ""), S("proxy-authorization", ""),
    S("range", ""), S("referer", ""), S("refresh", ""), S("retry-after", ""), S("server", ""),
    S("set-cookie", ""), S("strict-transport-security", ""), S("transfer-encoding", ""),
    S("user-agent", ""), S("vary", ""), S("via", ""), S("www-authenticate", ""),
};
#undef S

/* ---- dynamic tables: a ring of bytes and a ring of entries ---- */

static uint32_t pow2_at_least(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* One allocation: cap bytes, then the entries (extra bytes per entry slot
 * after those, for the encoder's hashes and links). An entry takes 32 of
 * the table's size at least, so cap / 32 entries fit at most (128 for
 * 4096: 1 KiB of entries). */
int sws_hpack_tab_init(sws_hpack_table_t *t, uint32_t cap, size_t extra_per_ent)
{
    memset(t, 0, sizeof *t);
    uint32_t slots = pow2_at_least(cap / SWS_HPACK_OVERHEAD);
    size_t at = ((size_t)cap + 7) & ~(size_t)7;
    t->bytes = malloc(at + slots * (sizeof(sws_hpack_ent_t) + extra_per_ent) + 1);
    if (!t->bytes)
        return -1;
    t->ent = (sws_hpack_ent_t *)(t->bytes + at);
    t->cap = cap;
    t->ent_mask = slots - 1;
    t->max = cap < SWS_HPACK_DEFAULT_TABLE ? cap : SWS_HPACK_DEFAULT_TABLE;
    return 0;
}

static void tab_evict_oldest(sws_hpack_table_t *t)
{
    const sws_hpack_ent_t *e = sws_hpack_tab_get(t, t->n);
    t->size -= e->nl + e->vl + SWS_HPACK_OVERHEAD;
    if (--t->n == 0)
        t->head = 0; /* start the ring over: fewer entries wrap */
}

void sws_hpack_tab_set_max(sws_hpack_table_t *t, uint32_t max)
{
    t->max = max;
    while (t->size > t->max)
        tab_evict_oldest(t);
}

/* Copies len bytes of the ring from off into dst (the ring may wrap). */
void sws_hpack_ring_read(const sws_hpack_table_t *t, uint32_t off, uint32_t len, uint8_t *dst)
{
    uint32_t first = t->cap - off < len ? t->cap - off : len;
    memcpy(dst, t->bytes + off, first);
    memcpy(dst + first, t->bytes, len - first);
}

static void ring_write(sws_hpack_table_t *t, uint32_t off, const uint8_t *src, uint32_t len)
{
    uint32_t first = t->cap - off < len ? t->cap - off : len;
    memcpy(t->bytes + off, src, first);
    memcpy(t->bytes, src + first, len - first);
}

/* RFC 7541 4.4: evicts until the entry fits, then adds it; one bigger than
 * the maximum empties the table and is not added (returns 0). The bytes
 * of the live entries are the ring from the oldest's offset up to head,
 * at most max - 32 n < cap of them, so the new entry's bytes never land on
 * a live entry's. They may land on an evicted one's: a name taken from the
 * table must be copied out first (the decoder does). */
int sws_hpack_tab_add(sws_hpack_table_t *t, const uint8_t *name, uint32_t nl, const uint8_t *value,
                   uint32_t vl)
{
    uint64_t sz = (uint64_t)nl + vl + SWS_HPACK_OVERHEAD;
    while (t->n && t->size + sz > t->max)
        tab_evict_oldest(t);
    if (sz > t->max)
        return 0;
    sws_hpack_ent_t *e = &t->ent[t->ins & t->ent_mask];
    e->off = t->head;
    e->nl = (uint16_t)nl;
    e->vl = (uint16_t)vl;
    ring_write(t, t->head, name, nl);
    ring_write(t, (t->head + nl) % t->cap, value, vl);
    t->head = (t->head + nl + vl) % t->cap;
    t->ins++;
    t->n++;
    t->size += (uint32_t)sz;
    return 1;
}

/* ---- decoder ---- */

int sws_hpack_dec_init(sws_hpack_dec_t *d, uint32_t limit)
{
    memset(d, 0, sizeof *d);
    if (limit > SWS_HPACK_FIELD_MAX)
        limit = SWS_HPACK_FIELD_MAX;
    /* a ring of at least one byte keeps `% cap` defined when limit is 0 */
    if (sws_hpack_tab_init(&d->t, limit ? limit : 1, 0) < 0)
        return -1;
    d->t.max = limit < SWS_HPACK_DEFAULT_TABLE ? limit : SWS_HPACK_DEFAULT_TABLE;
    d->limit = limit;
    if (limit < SWS_HPACK_DEFAULT_TABLE) /* the peer starts from 4096 and must say it shrank */
        d->expect = 1 + limit;
    d->scap = 256;
    d->scratch = malloc(d->scap);
    if (!d->scratch) {
        free(d->t.bytes);
        d->t.bytes = NULL;
        return -1;
    }
    return 0;
}

void sws_hpack_dec_free(sws_hpack_dec_t *d)
{
    free(d->t.bytes);
    free(d->scratch);
    d->t.bytes = d->scratch = NULL;
}

void sws_hpack_dec_set_limit(sws_hpack_dec_t *d, uint32_t limit)
{
    if (limit > d->t.cap)
        limit = d->t.cap;
    d->limit = limit;
    if (limit < d->t.max) {
        /* the table shrinks now; the peer's next block must confirm it */
        sws_hpack_tab_set_max(&d->t, limit);
        if (!d->expect || limit + 1 < d->expect)
            d->expect = 1 + limit;
    }
}

/* Makes the scratch buffer at least need bytes (need <= 2 * FIELD_MAX). */
static int scratch_reserve(sws_hpack_dec_t *d, size_t need)
{
    if (need <= d->scap)
        return 0;
    size_t cap = d->scap;
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(d->scratch, cap);
    if (!p)
        return -1;
    d->scratch = p;
    d->scap = (uint32_t)cap;
    return 0;
}

/* RFC 7541 5.1: an integer with a prefix of `bits` bits at *pp. The
 * value must fit 32 bits and take at most 5 bytes after the prefix (as
 * nghttp2 allows: 7 * 5 = 35 bits cover any uint32). */
static inline int get_int(const uint8_t **pp, const uint8_t *end, unsigned bits, uint32_t *out)
{
    const uint8_t *p = *pp;
    uint32_t mask = (1u << bits) - 1, v = *p++ & mask;
    if (v == mask) {
        for (unsigned shift = 0;; shift += 7) {
            if (p == end || shift >= 32)
                return -1;
            uint32_t add = *p & 0x7f;
            if ((UINT32_MAX >> shift) < add)
                return -1;
            add <<= shift;
            if (UINT32_MAX - add < v)
                return -1;
            v += add;
            if (!(*p++ & 0x80))
                break;
        }
    }
    *pp = p;
    *out = v;
    return 0;
}

/* A string literal (RFC 7541 5.2) at *pp: *s points at it in the input, or
 * at its Huffman decoding in scratch[at..]. Decoding writes at most up to
 * FIELD_MAX in scratch; a longer string's *len is still exact (its field
 * is too big, nothing reads its bytes). Returns 0, or -1 when malformed. */
static int get_str(sws_hpack_dec_t *d, const uint8_t **pp, const uint8_t *end, uint32_t at,
                   const uint8_t **s, uint32_t *len)
{
    const uint8_t *p = *pp;
    if (p == end)
        return -1;
    int huff = *p & 0x80;
    uint32_t n;
    if (get_int(&p, end, 7, &n) < 0 || n > (size_t)(end - p))
        return -1;
    *pp = p + n;
    if (!huff) {
        *s = p;
        *len = n;
        return 0;
    }
    /* 5 bits is the shortest code: n bytes decode to at most 8n / 5 */
    size_t room = (size_t)n * 8 / 5;
    if (room > SWS_HPACK_FIELD_MAX - at)
        room = SWS_HPACK_FIELD_MAX - at;
    if (scratch_reserve(d, at + room) < 0)
        return -1;
    ssize_t r = sws_huff_decode(d->scratch + at, room, p, n);
    if (r < 0)
        return -1;
    *s = d->scratch + at;
    *len = (uint32_t)r;
    return 0;
}

/* What sws_hpack_decode carries from field to field. */
typedef struct {
    sws_hpack_emit_fn emit;
    void *ctx;
    size_t total, list_max;
    int emitting, rc;
} dec_out_t;

/* Counts a field against list_max and hands it on while emitting. */
static int put_field(dec_out_t *o, const sws_hpack_field_t *f)
{
    o->total += (size_t)f->nl + f->vl + SWS_HPACK_OVERHEAD;
    if (o->total > o->list_max || (size_t)f->nl + f->vl > SWS_HPACK_FIELD_MAX) {
        o->rc = SWS_HPACK_TOO_BIG;
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

/* Index idx's name (and value) from the static or dynamic table, with
 * pointers good until the table or scratch changes: a dynamic entry that
 * wraps at the ring's end is copied into scratch[at..]. */
static int lookup(sws_hpack_dec_t *d, uint32_t idx, uint32_t at, sws_hpack_field_t *f)
{
    if (idx == 0)
        return -1;
    if (idx <= STATIC_N) {
        f->name = static_tab[idx].name;
        f->nl = static_tab[idx].nl;
        f->value = static_tab[idx].value;
        f->vl = static_tab[idx].vl;
        return 0;
    }
    if (idx - STATIC_N > d->t.n)
        return -1;
    const sws_hpack_ent_t *e = sws_hpack_tab_get(&d->t, idx - STATIC_N);
    f->nl = e->nl;
    f->vl = e->vl;
    if (e->off + e->nl + e->vl <= d->t.cap) {
        f->name = d->t.bytes + e->off;
    } else {
        if (scratch_reserve(d, at + e->nl + e->vl) < 0)
            return -1;
        sws_hpack_ring_read(&d->t, e->off, e->nl + e->vl, d->scratch + at);
        f->name = d->scratch + at;
    }
    f->value = f->name + e->nl;
    return 0;
}

/* A literal (RFC 7541 6.2) whose first byte is at *pp, `bits` the prefix of
 * its name index; `index` for 6.2.1's incremental indexing. */
static int literal(sws_hpack_dec_t *d, const uint8_t **pp, const uint8_t *end, unsigned bits,
                   int index, uint8_t flags, dec_out_t *o)
{
    sws_hpack_field_t f = {.flags = flags};
    uint32_t idx;
    int name_in_scratch = 0;
    if (get_int(pp, end, bits, &idx) < 0)
        return SWS_HPACK_ERR;
    if (idx == 0) {
        if (get_str(d, pp, end, 0, &f.name, &f.nl) < 0)
            return SWS_HPACK_ERR;
        name_in_scratch = f.name == d->scratch && f.nl;
    } else {
        if (lookup(d, idx, 0, &f) < 0)
            return SWS_HPACK_ERR;
        name_in_scratch = f.name == d->scratch;
        if (index && idx > STATIC_N && !name_in_scratch) {
            /* the new entry may overwrite the bytes of the one named (RFC
             * 7541 4.4 warns of exactly this): keep a copy */
            if (scratch_reserve(d, f.nl) < 0)
                return SWS_HPACK_ERR;
            memcpy(d->scratch, f.name, f.nl);
            f.name = d->scratch;
            name_in_scratch = 1;
        }
    }
    /* the value goes after a name in scratch; past FIELD_MAX it is only checked */
    uint32_t at = !name_in_scratch ? 0 : f.nl < SWS_HPACK_FIELD_MAX ? f.nl : SWS_HPACK_FIELD_MAX;
    if (get_str(d, pp, end, at, &f.value, &f.vl) < 0)
        return SWS_HPACK_ERR;
    if (name_in_scratch)
        f.name = d->scratch; /* get_str may have moved the scratch buffer */
    if (index) /* a field over FIELD_MAX (its bytes not all kept) empties the table, adds nothing */
        (void)sws_hpack_tab_add(&d->t, f.name, f.nl, f.value, f.vl);
    return put_field(o, &f);
}

int sws_hpack_decode(sws_hpack_dec_t *d, const uint8_t *p, size_t n, size_t list_max,
                     sws_hpack_emit_fn emit, void *ctx)
{
    const uint8_t *end = p + n;
    dec_out_t o = {emit, ctx, 0, list_max, 1, SWS_HPACK_OK};
    int at_start = 1, r = 0;
    if (d->bad)
        return SWS_HPACK_ERR;
    if (d->expect && (n == 0 || (*p & 0xe0) != 0x20))
        goto fail; /* RFC 7541 4.2: the shrink must be confirmed first thing */
    while (p < end) {
        uint8_t b = *p;
        if (b & 0x80) { /* 6.1 indexed */
            uint32_t idx;
            sws_hpack_field_t f = {0};
            if (get_int(&p, end, 7, &idx) < 0 || lookup(d, idx, 0, &f) < 0)
                goto fail;
            r = put_field(&o, &f);
        } else if (b & 0x40) { /* 6.2.1 with incremental indexing */
            r = literal(d, &p, end, 6, 1, 0, &o);
        } else if (b & 0x20) { /* 6.3 dynamic table size update */
            uint32_t v;
            if (!at_start || get_int(&p, end, 5, &v) < 0)
                goto fail;
            if (v > (d->expect ? d->expect - 1 : d->limit))
                goto fail;
            d->expect = 0;
            sws_hpack_tab_set_max(&d->t, v);
            continue;
        } else { /* 6.2.2 without indexing (0000), 6.2.3 never indexed (0001) */
            r = literal(d, &p, end, 4, 0, b & 0x10 ? SWS_HPACK_NEVER : 0, &o);
        }
        at_start = 0;
        if (r == SWS_HPACK_ERR)
            goto fail;
        if (r < 0) {
            d->bad = 1;
            return r;
        }
    }
    return o.rc;
fail:
    d->bad = 1;
    return SWS_HPACK_ERR;
}

/* ---- encoder ---- */

/* What the encoder does with a field that no table holds whole. */
enum {
    P_REPEAT,  /* indexed on the second sight of the same value (index-on-repeat) */
    P_INDEX,   /* incremental indexing: it repeats on a connection */
    P_LITERAL, /* without indexing: new nearly every time */
    P_NEVER,   /* never indexed: a secret, or new every time by construction */
};

/* The names with a rule of their own; every other name is P_REPEAT, but
 * access-control-* and cross-origin-* (P_INDEX). content-length and the
 * names we know nothing of (a backend's own fields) go in the table only
 * when a value comes twice, so that one new per answer (a trace id, a
 * length) never churns the table, while one that repeats (x-powered-by)
 * is indexed from its second answer on. */
static const struct {
    const char *name;
    uint8_t policy;
} policies[] = {
    /* RFC 9113 8.3 pseudo-fields: :path is new per request */
    {":authority", P_INDEX}, {":method", P_INDEX}, {":scheme", P_INDEX}, {":status", P_INDEX},
    {":protocol", P_INDEX}, {":path", P_LITERAL},
    /* secrets (RFC 7541 7.1.3) and the request id (ADR 0022) */
    {"set-cookie", P_NEVER}, {"cookie", P_NEVER}, {"authorization", P_NEVER},
    {"proxy-authorization", P_NEVER}, {"x-request-id", P_NEVER},
    /* what a site sends alike on answer after answer */
    {"server", P_INDEX}, {"content-type", P_INDEX}, {"cache-control", P_INDEX}, {"etag", P_INDEX},
    {"vary", P_INDEX}, {"content-encoding", P_INDEX}, {"content-language", P_INDEX},
    {"accept-ranges", P_INDEX}, {"alt-svc", P_INDEX}, {"x-content-type-options", P_INDEX},
    {"strict-transport-security", P_INDEX}, {"x-frame-options", P_INDEX},
    {"x-xss-protection", P_INDEX}, {"referrer-policy", P_INDEX},
    {"content-security-policy", P_INDEX}, {"content-security-policy-report-only", P_INDEX},
    {"permissions-policy", P_INDEX}, {"priority", P_INDEX}, {"via", P_INDEX}, {"allow", P_INDEX},
    {"x-powered-by", P_INDEX}, {"www-authenticate", P_INDEX}, {"proxy-authenticate", P_INDEX},
    {"x-cache", P_INDEX}, {"accept", P_INDEX}, {"accept-encoding", P_INDEX},
    {"accept-language", P_INDEX}, {"user-agent", P_INDEX},
    /* the same for every answer of a second: a busy connection sends it as
     * one byte from its second answer of each second on (one entry a second) */
    {"date", P_INDEX},
    /* the same for every answer of one resource (a static file's), new for
     * another: indexed on a value's second sight */
    {"content-length", P_REPEAT}, {"last-modified", P_REPEAT}, {"expires", P_REPEAT},
    {"content-location", P_REPEAT},
    /* new on nearly every answer */
    {"location", P_LITERAL},
    {"age", P_LITERAL}, {"content-range", P_LITERAL}, {"retry-after", P_LITERAL},
    {"if-modified-since", P_LITERAL}, {"if-unmodified-since", P_LITERAL},
    {"if-none-match", P_LITERAL}, {"if-match", P_LITERAL}, {"if-range", P_LITERAL},
    {"range", P_LITERAL}, {"referer", P_LITERAL}, {"refresh", P_LITERAL},
    {"content-disposition", P_LITERAL}, {"x-forwarded-for", P_LITERAL},
};

/* The names of the static table and of policies[], by hash: built once
 * per process (pthread_once), read-only after. */
typedef struct {
    const uint8_t *name;
    uint32_t hash;
    uint8_t nl, first, count, policy; /* first: its static index (0: none), count: entries */
} known_t;

#define KNOWN_MAX 128
#define KNOWN_SLOTS 256
static known_t known[KNOWN_MAX];
static uint8_t known_slot[KNOWN_SLOTS]; /* 1 + index into known[], 0: free */
static pthread_once_t known_once = PTHREAD_ONCE_INIT;

#define HASH_SEED 2166136261u

/* Eight bytes a step, a multiply and a shift each: a name is hashed once
 * per field for every look-up, a value once more where a table may hold
 * it. Not for untrusted keys' sake: a collision costs a memcmp. */
static inline uint32_t hash_bytes(const uint8_t *s, size_t n, uint32_t h)
{
    uint64_t x = h ^ ((uint64_t)n << 40);
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        x = (x ^ w) * 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
    }
    if (n) { /* 1..7 bytes: two loads that may overlap (n is in x already) */
        uint64_t w;
        if (n >= 4) {
            uint32_t lo, hi;
            memcpy(&lo, s, 4);
            memcpy(&hi, s + n - 4, 4);
            w = lo | (uint64_t)hi << 32;
        } else {
            w = s[0] | (uint64_t)s[n >> 1] << 8 | (uint64_t)s[n - 1] << 16;
        }
        x = (x ^ w) * 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
    }
    x *= 0xbf58476d1ce4e5b9ull;
    return (uint32_t)(x >> 32);
}

static known_t *known_find(uint32_t h, const uint8_t *name, size_t nl)
{
    for (uint32_t i = h;; i++) {
        uint8_t k = known_slot[i & (KNOWN_SLOTS - 1)];
        if (!k)
            return NULL;
        known_t *e = &known[k - 1];
        if (e->hash == h && e->nl == nl && sws_bytes_eq(e->name, name, nl))
            return e;
    }
}

static known_t *known_add(const uint8_t *name, size_t nl)
{
    uint32_t h = hash_bytes(name, nl, HASH_SEED);
    known_t *e = known_find(h, name, nl);
    if (e)
        return e;
    static unsigned n;
    uint32_t i = h;
    while (known_slot[i & (KNOWN_SLOTS - 1)])
        i++;
    e = &known[n];
    known_slot[i & (KNOWN_SLOTS - 1)] = (uint8_t)++n;
    *e = (known_t){name, h, (uint8_t)nl, 0, 0, P_REPEAT};
    return e;
}

static void known_build(void)
{
    for (unsigned i = 1; i <= STATIC_N; i++) {
        known_t *e = known_add(static_tab[i].name, static_tab[i].nl);
        if (!e->first)
            e->first = (uint8_t)i;
        e->count++; /* a name's static entries are consecutive */
    }
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
        known_add((const uint8_t *)policies[i].name, strlen(policies[i].name))->policy =
            policies[i].policy;
}

static int unknown_policy(const uint8_t *name, size_t nl)
{
    if ((nl > 15 && memcmp(name, "access-control-", 15) == 0) ||
        (nl > 13 && memcmp(name, "cross-origin-", 13) == 0))
        return P_INDEX;
    return P_REPEAT;
}

int sws_hpack_enc_init_cap(sws_hpack_enc_t *e, uint32_t cap)
{
    pthread_once(&known_once, known_build);
    memset(e, 0, sizeof *e);
    if (cap > SWS_HPACK_FIELD_MAX)
        cap = SWS_HPACK_FIELD_MAX;
    if (sws_hpack_tab_init(&e->t, cap ? cap : 1, 4 * sizeof(uint32_t)) < 0)
        return -1;
    e->hash = (uint32_t *)(e->t.ent + e->t.ent_mask + 1);
    e->next = e->hash + 2 * (e->t.ent_mask + 1);
    e->cap_max = cap;
    /* the peer's decoder starts at 4096: a smaller table must be announced */
    e->t.max = SWS_HPACK_DEFAULT_TABLE;
    sws_hpack_enc_peer_max(e, SWS_HPACK_DEFAULT_TABLE);
    return 0;
}

int sws_hpack_enc_init(sws_hpack_enc_t *e)
{
    return sws_hpack_enc_init_cap(e, SWS_HPACK_DEFAULT_TABLE);
}

void sws_hpack_enc_free(sws_hpack_enc_t *e)
{
    free(e->t.bytes);
    e->t.bytes = NULL;
}

void sws_hpack_enc_peer_max(sws_hpack_enc_t *e, uint32_t max)
{
    uint32_t v = max < e->cap_max ? max : e->cap_max;
    if (!e->pending) {
        if (v == e->t.max)
            return;
        e->pending = 1;
        e->pend_min = v;
    } else if (v < e->pend_min) {
        e->pend_min = v;
    }
    e->pend_final = v;
}

size_t sws_hpack_encode_bound(const sws_hpack_field_t *f, size_t n)
{
    size_t b = 2 * 6; /* two size updates */
    for (size_t i = 0; i < n; i++) /* prefix byte, index or length (6), name, length (6), value */
        b += 1 + 6 + f[i].nl + 6 + f[i].vl;
    return b;
}

/* RFC 7541 5.1, after the representation's bits in `first`. */
static inline uint8_t *put_int(uint8_t *o, uint8_t first, unsigned bits, uint32_t v)
{
    uint32_t mask = (1u << bits) - 1;
    if (v < mask) {
        *o++ = (uint8_t)(first | v);
        return o;
    }
    *o++ = (uint8_t)(first | mask);
    v -= mask;
    while (v >= 0x80) {
        *o++ = (uint8_t)(0x80 | (v & 0x7f));
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

static inline unsigned int_len(unsigned bits, uint32_t v)
{
    unsigned len = 1;
    if (v >= (1u << bits) - 1)
        for (v -= (1u << bits) - 1, len++; v >= 0x80; v >>= 7)
            len++;
    return len;
}

/* RFC 7541 5.2: Huffman-coded when that is shorter. One pass: the coding
 * goes where the raw string would, and stops as soon as it is as long. */
static uint8_t *put_str(uint8_t *o, const uint8_t *s, uint32_t n)
{
    unsigned il = int_len(7, n);
    size_t h = n > 1 ? sws_huff_encode_max(o + il, s, n, n - 1) : SIZE_MAX;
    if (h != SIZE_MAX) {
        unsigned hl = int_len(7, (uint32_t)h);
        if (hl < il) /* a shorter length prefix: the coding moves down */
            memmove(o + hl, o + il, h);
        put_int(o, 0x80, 7, (uint32_t)h);
        return o + hl + h;
    }
    o = put_int(o, 0, 7, n);
    if (n)
        memcpy(o, s, n);
    return o + n;
}

/* A literal: `first` and `bits` are 6.2's pattern and index prefix. */
static uint8_t *put_literal(uint8_t *o, uint8_t first, unsigned bits, uint32_t name_idx,
                            const sws_hpack_field_t *f)
{
    o = put_int(o, first, bits, name_idx);
    if (!name_idx)
        o = put_str(o, f->name, f->nl);
    return put_str(o, f->value, f->vl);
}

/* Whether the ring holds s[0..n) at off (it may wrap). */
static inline int ring_eq(const sws_hpack_table_t *t, uint32_t off, const uint8_t *s, uint32_t n)
{
    if (t->cap - off >= n)
        return sws_bytes_eq(t->bytes + off, s, n);
    uint32_t first = t->cap - off;
    return sws_bytes_eq(t->bytes + off, s, first) && sws_bytes_eq(t->bytes, s + first, n - first);
}

/* The dynamic index (1: newest) of the newest entry with f's name (by_value
 * 0) or f's name and value (1), 0 when none. Chains link entries of one
 * bucket newest first by insert number + 1; the first one evicted ends the
 * walk, as every entry after it is older. */
static uint32_t enc_find(const sws_hpack_enc_t *e, const sws_hpack_field_t *f, uint32_t h,
                         int by_value)
{
    uint32_t slots = e->t.ent_mask + 1;
    const uint32_t *hashes = e->hash + (by_value ? slots : 0);
    const uint32_t *links = e->next + (by_value ? slots : 0);
    uint32_t q1 = (by_value ? e->by_field : e->by_name)[h & (SWS_HPACK_BUCKETS - 1)];
    while (q1) {
        uint32_t q = q1 - 1, k = e->t.ins - q, slot = q & e->t.ent_mask;
        if (k == 0 || k > e->t.n)
            return 0;
        const sws_hpack_ent_t *en = &e->t.ent[slot];
        if (hashes[slot] == h && en->nl == f->nl && ring_eq(&e->t, en->off, f->name, f->nl)) {
            if (!by_value)
                return k;
            uint32_t vo = en->off + en->nl; /* the value follows the name in the ring */
            if (vo >= e->t.cap)
                vo -= e->t.cap;
            if (en->vl == f->vl && ring_eq(&e->t, vo, f->value, f->vl))
                return k;
        }
        q1 = links[slot];
    }
    return 0;
}

static void enc_add(sws_hpack_enc_t *e, const sws_hpack_field_t *f, uint32_t hn, uint32_t hf)
{
    uint32_t q = e->t.ins, slots = e->t.ent_mask + 1, slot = q & e->t.ent_mask;
    if (!sws_hpack_tab_add(&e->t, f->name, f->nl, f->value, f->vl))
        return;
    uint32_t *bn = &e->by_name[hn & (SWS_HPACK_BUCKETS - 1)];
    uint32_t *bf = &e->by_field[hf & (SWS_HPACK_BUCKETS - 1)];
    e->hash[slot] = hn;
    e->hash[slots + slot] = hf;
    e->next[slot] = *bn;
    e->next[slots + slot] = *bf;
    *bn = *bf = q + 1;
}

/* Index-on-repeat: 1 when this field (by hash) was sent literal lately.
 * Two slots a field may take (by two parts of its hash), a free one
 * first, else each in turn: with one, two fields of an answer that share
 * it would clear each other's mark on every answer and never be indexed
 * (24 names of one block lost 13 so). A field indexed frees its slot. */
static int seen_again(sws_hpack_enc_t *e, uint32_t hf)
{
    uint32_t v = hf | 1, *a = &e->seen[(hf >> 7) % SWS_HPACK_SEEN],
             *b = &e->seen[(hf >> 19) % SWS_HPACK_SEEN];
    if (*a == v || *b == v) {
        *(*a == v ? a : b) = 0;
        return 1;
    }
    if (*a && (!*b || (e->seen_turn++ & 1)))
        a = b;
    *a = v;
    return 0;
}

/* *code: what the field went out as, for the memo (hpack.h). */
static uint8_t *encode_field(sws_hpack_enc_t *e, const sws_hpack_field_t *f, uint8_t *o,
                             uint32_t *code)
{
    uint32_t hn = hash_bytes(f->name, f->nl, HASH_SEED), hf = 0, name_idx = 0;
    const known_t *k = f->nl <= 255 ? known_find(hn, f->name, f->nl) : NULL;
    int pol = k ? k->policy : unknown_policy(f->name, f->nl);
    *code = 0;
    if (f->flags & SWS_HPACK_NEVER)
        pol = P_NEVER; /* and no indexed form either: the caller asked for a literal */
    if (k && k->first) {
        name_idx = k->first;
        if (pol != P_NEVER)
            for (uint32_t i = k->first; i < k->first + k->count; i++)
                if (static_tab[i].vl == f->vl && sws_bytes_eq(static_tab[i].value, f->value, f->vl)) {
                    *code = i;
                    return put_int(o, 0x80, 7, i);
                }
    }
    if (pol == P_INDEX || pol == P_REPEAT) {
        hf = hash_bytes(f->value, f->vl, hn);
        uint32_t d = e->t.n ? enc_find(e, f, hf, 1) : 0;
        if (d) {
            *code = SWS_HPACK_MEMO_DYN | (e->t.ins - d);
            return put_int(o, 0x80, 7, STATIC_N + d);
        }
    }
    if (!name_idx && e->t.n) {
        uint32_t d = enc_find(e, f, hn, 0);
        if (d)
            name_idx = STATIC_N + d;
    }
    switch (pol) {
    case P_NEVER:
        return put_literal(o, 0x10, 4, name_idx, f);
    case P_LITERAL:
        return put_literal(o, 0x00, 4, name_idx, f);
    case P_REPEAT:
        if (!seen_again(e, hf))
            return put_literal(o, 0x00, 4, name_idx, f);
        /* fall through */
    default:
        /* one that would not fit would empty the table: send it without */
        if ((uint64_t)f->nl + f->vl + SWS_HPACK_OVERHEAD > e->t.max)
            return put_literal(o, 0x00, 4, name_idx, f);
        o = put_literal(o, 0x40, 6, name_idx, f);
        uint32_t q = e->t.ins;
        enc_add(e, f, hn, hf);
        if (e->t.ins != q) /* added: the next block may find it by position */
            *code = SWS_HPACK_MEMO_DYN | q;
        return o;
    }
}

/* f as the memo's code has it, or NULL: its index written at o when the
 * static entry, or the dynamic entry of that insert number while it is
 * still held, has f's name and value. The insert number loses its top bit
 * to the tag: past 2^31 inserts a code may name no entry or another one,
 * and the compare sends the index only for an entry equal to f. */
static uint8_t *memo_put(const sws_hpack_enc_t *e, const sws_hpack_field_t *f, uint32_t code,
                         uint8_t *o)
{
    if (f->flags & SWS_HPACK_NEVER)
        return NULL;
    if (!(code & SWS_HPACK_MEMO_DYN)) {
        const static_ent_t *s = &static_tab[code];
        if (s->nl != f->nl || s->vl != f->vl || !sws_bytes_eq(s->name, f->name, f->nl) ||
            !sws_bytes_eq(s->value, f->value, f->vl))
            return NULL;
        return put_int(o, 0x80, 7, code);
    }
    uint32_t q = code & ~SWS_HPACK_MEMO_DYN, k = e->t.ins - q;
    if (k == 0 || k > e->t.n)
        return NULL;
    const sws_hpack_ent_t *en = &e->t.ent[q & e->t.ent_mask];
    if (en->nl != f->nl || en->vl != f->vl || !ring_eq(&e->t, en->off, f->name, f->nl))
        return NULL;
    uint32_t vo = en->off + en->nl;
    if (vo >= e->t.cap)
        vo -= e->t.cap;
    if (!ring_eq(&e->t, vo, f->value, f->vl))
        return NULL;
    return put_int(o, 0x80, 7, STATIC_N + k);
}

size_t sws_hpack_encode(sws_hpack_enc_t *e, const sws_hpack_field_t *f, size_t n, uint8_t *out)
{
    uint8_t *o = out;
    if (e->pending) { /* RFC 7541 4.2: the smallest size since the last block, then the last */
        if (e->pend_min < e->pend_final) {
            o = put_int(o, 0x20, 5, e->pend_min);
            sws_hpack_tab_set_max(&e->t, e->pend_min);
        }
        o = put_int(o, 0x20, 5, e->pend_final);
        sws_hpack_tab_set_max(&e->t, e->pend_final);
        e->pending = 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t code;
        if (i < SWS_HPACK_MEMO) {
            uint8_t *p = e->memo[i] ? memo_put(e, &f[i], e->memo[i], o) : NULL;
            if (p) {
                o = p;
                continue;
            }
            o = encode_field(e, &f[i], o, &code);
            e->memo[i] = code;
        } else {
            o = encode_field(e, &f[i], o, &code);
        }
    }
    return (size_t)(o - out);
}
