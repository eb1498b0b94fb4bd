/*
 * http/h2/hpack.h — HPACK (RFC 7541): the header compression of HTTP/2, ours.
 * A decoder for the blocks a client sends and an encoder for the blocks we
 * send, one of each per connection, each with its dynamic table.
 *
 * Ownership: each table is one arena allocated at init (a ring of name and
 * value bytes as long as the table's limit, plus a ring of entries), freed
 * by *_free; nothing is allocated per block, except that the decoder's
 * scratch buffer (Huffman-decoded strings) grows to the longest field seen,
 * at most SWS_HPACK_FIELD_MAX bytes. Nothing keeps a pointer into the
 * caller's memory after a call returns.
 *
 * Floor: a leaf (hpack.c, huffman.c, and the tables tools/gen_huffman.py
 * makes from RFC 7541 Appendix B); the session (session.c) calls it.
 */
#ifndef SCALWS_H2_HPACK_H
#define SCALWS_H2_HPACK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#ifndef SWS_INTERNAL
#define SWS_INTERNAL __attribute__((visibility("hidden")))
#endif

#define SWS_HPACK_NEVER 1 /* field flag: never indexed (RFC 7541 6.2.3), on encode and as decoded */

/* a[0..n) == b[0..n): header names and values are mostly short, and a
 * hash or a position already matched, so the answer is mostly yes; inline
 * up to 16 bytes rather than a call to memcmp. HPACK's and QPACK's encoders. */
static inline int sws_bytes_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint64_t x, y, u, v;
    if (n >= 8 && n <= 16) { /* two loads that may overlap */
        memcpy(&x, a, 8), memcpy(&y, b, 8), memcpy(&u, a + n - 8, 8), memcpy(&v, b + n - 8, 8);
        return ((x ^ y) | (u ^ v)) == 0;
    }
    if (n >= 4 && n < 8) {
        uint32_t p, q, r, t;
        memcpy(&p, a, 4), memcpy(&q, b, 4), memcpy(&r, a + n - 4, 4), memcpy(&t, b + n - 4, 4);
        return ((p ^ q) | (r ^ t)) == 0;
    }
    if (n < 4) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i])
                return 0;
        return 1;
    }
    return memcmp(a, b, n) == 0;
}

typedef struct {
    const uint8_t *name, *value;
    uint32_t nl, vl;
    uint8_t flags; /* SWS_HPACK_NEVER */
} sws_hpack_field_t;

enum {
    SWS_HPACK_OK = 0,
    SWS_HPACK_ERR = -1,     /* COMPRESSION_ERROR: the connection's tables are out of step */
    SWS_HPACK_TOO_BIG = -2, /* the header list is over list_max: a stream error, tables in step */
};

#define SWS_HPACK_DEFAULT_TABLE 4096u /* SETTINGS_HEADER_TABLE_SIZE's initial value */
/* The most a table may hold (the session's header_table_size is capped at
 * 64 KiB too), and the longest name + value a decoded field may have: a
 * longer one makes its block SWS_HPACK_TOO_BIG, never an error (RFC 7541
 * 7.4 lets a decoder limit string lengths; a stream error costs the client
 * less than a connection error). nghttp2 answers a string over 64 KiB
 * with a connection error instead. */
#define SWS_HPACK_FIELD_MAX 65536u
#define SWS_HPACK_OVERHEAD 32u /* RFC 7541 4.1: an entry's size is nl + vl + 32 */

/* One table: the ring of bytes (cap) and of entries (ent_mask + 1); entry
 * k (k = 1 the newest) is ent[(ins - k) & ent_mask]. An entry's name and
 * value are consecutive in the ring and may wrap at its end. */
typedef struct {
    uint32_t off;    /* ring offset of the name; the value follows */
    uint16_t nl, vl; /* < SWS_HPACK_FIELD_MAX as the table is at most that */
} sws_hpack_ent_t;

typedef struct {
    uint8_t *bytes;       /* the arena: bytes[cap], then ent[] */
    sws_hpack_ent_t *ent;
    uint32_t cap;         /* bytes in the ring: the most this table may hold */
    uint32_t ent_mask;
    uint32_t ins;         /* entries inserted since init (wraps) */
    uint32_t n;           /* entries held */
    uint32_t head;        /* ring offset where the next entry's bytes go */
    uint32_t size, max;   /* RFC 7541 4.1's size; the maximum now in force */
} sws_hpack_table_t;

/* The ring as a table of its own, for QPACK's decoder too (RFC 9204 3.2
 * keeps HPACK's entry size and eviction order). init: one allocation of
 * cap bytes and cap / 32 entry slots (extra bytes per slot after them),
 * max = min(cap, 4096); 0, or -1 when out of memory. set_max evicts the
 * oldest entries until size <= max. add evicts until the entry fits, then
 * adds it (1); one bigger than max empties the table and is not added (0);
 * a name or value read out of this table must be copied first (the bytes
 * of an evicted entry may be overwritten). ring_read copies len bytes at
 * off, across the ring's end. get(k): k = 1 the newest entry, k <= n. */
SWS_INTERNAL int sws_hpack_tab_init(sws_hpack_table_t *t, uint32_t cap, size_t extra_per_ent);
SWS_INTERNAL void sws_hpack_tab_set_max(sws_hpack_table_t *t, uint32_t max);
SWS_INTERNAL int sws_hpack_tab_add(sws_hpack_table_t *t, const uint8_t *name, uint32_t nl,
                                   const uint8_t *value, uint32_t vl);
SWS_INTERNAL void sws_hpack_ring_read(const sws_hpack_table_t *t, uint32_t off, uint32_t len,
                                      uint8_t *dst);
static inline const sws_hpack_ent_t *sws_hpack_tab_get(const sws_hpack_table_t *t, uint32_t k)
{
    return &t->ent[(t->ins - k) & t->ent_mask];
}

/* ---- decoder ---- */

typedef struct sws_hpack_dec {
    sws_hpack_table_t t;
    uint32_t limit;        /* what we advertise: a size update may not go over it */
    uint32_t expect;       /* 0, or 1 + the most the next block's first update may set */
    uint8_t *scratch;      /* Huffman output and copies out of the ring */
    uint32_t scap;
    int bad;               /* a block failed: the table is out of step, every later block fails */
} sws_hpack_dec_t;

/* limit: the SETTINGS_HEADER_TABLE_SIZE we advertise, in force from the
 * first block (at most SWS_HPACK_FIELD_MAX). The table starts at
 * min(limit, 4096), the protocol's initial size; below 4096, the first
 * block must start with a dynamic table size update (RFC 7541 4.2), as
 * nghttp2's inflater set up the same way requires. A client may send
 * blocks before it has our SETTINGS, at 4096: a session that advertises
 * less may init at 4096 and set_limit when the SETTINGS is acknowledged
 * (what nghttp2's session does). Returns 0, or -1 when out of memory. */
SWS_INTERNAL int sws_hpack_dec_init(sws_hpack_dec_t *d, uint32_t limit);
SWS_INTERNAL void sws_hpack_dec_free(sws_hpack_dec_t *d);
/* Our SETTINGS_HEADER_TABLE_SIZE changed to limit (at most the init
 * limit: the arena is not grown) and the peer acknowledged it: below the
 * table's current maximum, the next block must start with a size update
 * to at most the lowest limit set since the last update. */
SWS_INTERNAL void sws_hpack_dec_set_limit(sws_hpack_dec_t *d, uint32_t limit);

/* emit's return: 0 go on; 1 stop emitting for this block but keep decoding
 * it to the end (the table stays in sync: the caller will reset that
 * stream); negative: abort, sws_hpack_decode returns it (and the decoder is
 * out of step from then on: a connection error). */
typedef int (*sws_hpack_emit_fn)(void *ctx, const sws_hpack_field_t *f);

/*
 * Decodes ONE complete header block (HEADERS + CONTINUATION payloads,
 * already joined), calling emit for each field in order; f->flags has
 * SWS_HPACK_NEVER for a literal never indexed. name/value pointers are
 * valid only during the emit call.
 *
 * Returns 0; SWS_HPACK_TOO_BIG when the sum over fields of nl + vl + 32
 * exceeds list_max, or a field's nl + vl exceeds SWS_HPACK_FIELD_MAX (the
 * block is still decoded to its end so that the table stays in step, and
 * emit is not called from that field on); emit's negative value; or
 * SWS_HPACK_ERR (COMPRESSION_ERROR), for: an integer truncated, over
 * 2^32 - 1 or longer than 5 bytes after its prefix; a string truncated;
 * index 0 or past the tables; a dynamic table size update over the limit
 * (or over the lowest limit of set_limit while one is expected), or after
 * the block's first field; a block not starting with a size update when
 * one is expected (empty blocks included); Huffman padding longer than 7
 * bits or not all 1s; EOS decoded inside a string. After SWS_HPACK_ERR
 * (or emit's abort) every later call returns SWS_HPACK_ERR.
 */
SWS_INTERNAL int sws_hpack_decode(sws_hpack_dec_t *d, const uint8_t *p, size_t n, size_t list_max,
                                  sws_hpack_emit_fn emit, void *ctx);

/* ---- encoder ---- */

#define SWS_HPACK_BUCKETS 64 /* hash chains into the encoder's table, by name and by field */
#define SWS_HPACK_SEEN 64    /* fields seen once, for the index-on-repeat rule */
#define SWS_HPACK_MEMO 16    /* positions of the last block whose index is remembered */
#define SWS_HPACK_MEMO_DYN 0x80000000u

typedef struct sws_hpack_enc {
    sws_hpack_table_t t;
    uint32_t *hash;          /* per entry slot: the name's hash, then the field's (ent_mask+1 each) */
    uint32_t *next;          /* per entry slot: chain links (insert numbers), by name then by field */
    uint32_t by_name[SWS_HPACK_BUCKETS], by_field[SWS_HPACK_BUCKETS]; /* newest insert number + 1 */
    uint32_t seen[SWS_HPACK_SEEN]; /* hashes of fields sent literal once */
    uint32_t seen_turn;      /* which of a field's two seen[] slots a miss takes when both are used */
    /* Per position of the last block, what its field went out as: 0 a
     * literal, 1..61 a static index, SWS_HPACK_MEMO_DYN | an entry's insert
     * number. A hint: the next block's field there is compared with that
     * entry, and sent as its index only when name and value are the same. */
    uint32_t memo[SWS_HPACK_MEMO];
    uint32_t cap_max;        /* the most our table uses (enc_init: 4096) */
    uint32_t pend_min, pend_final; /* size updates due at the next block, when pending */
    int pending;
} sws_hpack_enc_t;

/* Dynamic table 4096 (the peer's initial SETTINGS_HEADER_TABLE_SIZE).
 * Returns 0, or -1 when out of memory. */
SWS_INTERNAL int sws_hpack_enc_init(sws_hpack_enc_t *e);
/* The same with our own cap on the table (at most SWS_HPACK_FIELD_MAX):
 * below 4096, the first block starts with a size update to it. */
SWS_INTERNAL int sws_hpack_enc_init_cap(sws_hpack_enc_t *e, uint32_t cap);
SWS_INTERNAL void sws_hpack_enc_free(sws_hpack_enc_t *e);
/* The peer's SETTINGS_HEADER_TABLE_SIZE: we use min(max, cap); a change
 * emits a dynamic table size update at the start of the next block (RFC
 * 7541 4.2: the smallest value seen, then the final one, if it shrank and
 * grew between blocks). */
SWS_INTERNAL void sws_hpack_enc_peer_max(sws_hpack_enc_t *e, uint32_t max);
/* An upper bound of the block's bytes. */
SWS_INTERNAL size_t sws_hpack_encode_bound(const sws_hpack_field_t *f, size_t n);
/*
 * Encodes f[0..n) as one header block into out (room for
 * sws_hpack_encode_bound bytes); returns the bytes written. Names are
 * taken as given (HTTP/2 wants them lowercase). Per field, in order: a
 * full match in the static or dynamic table goes out indexed; a field
 * flagged SWS_HPACK_NEVER, and set-cookie, cookie, authorization,
 * proxy-authorization and x-request-id (ADR 0022), as literals never
 * indexed; the fields that repeat on a connection (server, content-type,
 * cache-control, etag, vary, date, ... see hpack.c's policy list) with
 * incremental indexing; content-length, last-modified, expires and names
 * we know nothing of only on the second sight of the same value (a static
 * file's answers repeat them); location, age, :path and the like without
 * indexing. A literal's name is
 * indexed when a table has it; strings are Huffman-coded when shorter.
 * A field equal to the one at the same position of the previous block,
 * when that one went out indexed and its entry is still in the table,
 * takes that index without a look-up (answers of one kind repeat their
 * list on a connection).
 */
SWS_INTERNAL size_t sws_hpack_encode(sws_hpack_enc_t *e, const sws_hpack_field_t *f, size_t n,
                                     uint8_t *out);

/* ---- Huffman (huffman.c; RFC 7541 5.2 and Appendix B) ---- */

/* Bytes that s[0..n) takes Huffman-coded. */
SWS_INTERNAL size_t sws_huff_encoded_len(const uint8_t *s, size_t n);
/* Writes s[0..n) Huffman-coded, padded with 1 bits; returns the bytes written. */
SWS_INTERNAL size_t sws_huff_encode(uint8_t *dst, const uint8_t *s, size_t n);
/* The same, writing at most max bytes: SIZE_MAX (and some bytes written)
 * when the coding is longer than max. */
SWS_INTERNAL size_t sws_huff_encode_max(uint8_t *dst, const uint8_t *s, size_t n, size_t max);
/* Decodes s[0..n) into dst, writing at most room bytes. Returns the decoded
 * length (which may be over room: the bytes past room are not written), or
 * -1 for padding over 7 bits or not all 1s, or an EOS inside. */
SWS_INTERNAL ssize_t sws_huff_decode(uint8_t *dst, size_t room, const uint8_t *s, size_t n);

#endif
