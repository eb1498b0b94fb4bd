/*
 * http/h3/qpack.h — QPACK (RFC 9204): the field compression of HTTP/3, ours.
 *
 * A decoder for what a client sends (its encoder stream and the field
 * sections of its requests), with the dynamic table the client may fill up
 * to the capacity we announce, and an encoder for our responses that uses
 * the static table and literals only (no dynamic table: nothing to insert,
 * nothing to track, nothing a client's acknowledgements can block; nginx's
 * encoder does the same). The dynamic table is HPACK's ring
 * (csrc/http/h2/hpack.h), strings use HPACK's Huffman code (RFC 9204
 * 4.1.2).
 *
 * Ownership: the decoder allocates its table at the first capacity over 0
 * the client sets, its scratch buffer (Huffman-decoded strings, entries
 * copied out of the ring) as fields need it, and a buffer of the decoder
 * stream's bytes not yet taken. Nothing keeps a pointer into the caller's
 * memory after a call returns.
 *
 * Floor: a leaf beside hpack.c (only the ring and the Huffman code from it).
 * Blocked streams are the caller's to count and to hold (RFC 9204 2.1.2):
 * sws_qpack_decode says SWS_QPACK_BLOCKED and changes nothing.
 */
#ifndef SCALWS_H3_QPACK_H
#define SCALWS_H3_QPACK_H

#include "http/h2/hpack.h"

/* The HTTP/3 error codes of QPACK (RFC 9204 6). */
#define SWS_QPACK_DECOMPRESSION_FAILED 0x200
#define SWS_QPACK_ENCODER_STREAM_ERROR 0x201
#define SWS_QPACK_DECODER_STREAM_ERROR 0x202

enum {
    SWS_QPACK_OK = 0,
    SWS_QPACK_ERR = -1,        /* QPACK_DECOMPRESSION_FAILED: a connection error */
    SWS_QPACK_TOO_BIG = -2,    /* over list_max: a stream error (the section is read to its end) */
    SWS_QPACK_BLOCKED = -3,    /* the section needs inserts not received yet: call again later */
    SWS_QPACK_ENC_STREAM = -4, /* QPACK_ENCODER_STREAM_ERROR */
    SWS_QPACK_DEC_STREAM = -5, /* QPACK_DECODER_STREAM_ERROR */
    SWS_QPACK_NOMEM = -6,      /* out of memory: H3_INTERNAL_ERROR */
};

#define SWS_QPACK_STATIC_N 99 /* RFC 9204 Appendix A: indices 0..98 */
#define SWS_QPACK_INT_MAX ((UINT64_C(1) << 62) - 1)

/* ---- decoder ---- */

typedef struct sws_qpack_dec {
    sws_hpack_table_t t;     /* t.bytes NULL until the first capacity over 0 */
    uint32_t max_cap;        /* our SETTINGS_QPACK_MAX_TABLE_CAPACITY */
    uint32_t cap;            /* the capacity the client set (RFC 9204 3.2.3) */
    uint64_t inserts;        /* the Insert Count */
    uint64_t known;          /* the Known Received Count the client has from us */
    uint8_t *ebuf;           /* encoder-stream bytes of an instruction not yet whole */
    uint32_t elen, ecap;
    uint8_t *scratch;
    uint32_t scap;
    uint8_t *out;            /* decoder-stream bytes not yet taken */
    uint32_t olen, ocap;
    int bad;                 /* a connection error happened: every later call fails */
} sws_qpack_dec_t;

/* max_cap: the SETTINGS_QPACK_MAX_TABLE_CAPACITY we announce (at most
 * SWS_HPACK_FIELD_MAX). Allocates nothing. */
SWS_INTERNAL void sws_qpack_dec_init(sws_qpack_dec_t *d, uint32_t max_cap);
SWS_INTERNAL void sws_qpack_dec_free(sws_qpack_dec_t *d);

/* Bytes of the client's encoder stream, in order, cut anywhere (a partial
 * instruction is kept for the next call). Returns 0, SWS_QPACK_ENC_STREAM
 * (a capacity over max_cap, an insert that does not fit the capacity, a
 * reference to an entry evicted or not inserted, an integer over 2^62 - 1,
 * bad Huffman coding), or SWS_QPACK_NOMEM. */
SWS_INTERNAL int sws_qpack_dec_encoder(sws_qpack_dec_t *d, const uint8_t *p, size_t n);

/*
 * Decodes ONE whole field section (a HEADERS frame's payload) of stream
 * stream_id, calling emit for each field line in order (f->flags has
 * SWS_HPACK_NEVER for a literal whose N bit is set; pointers are good
 * during the call). emit's return as for HPACK: 0 go on, 1 stop emitting
 * (the section is still read to its end), negative: abort with it.
 *
 * Returns 0; SWS_QPACK_BLOCKED when the section's Required Insert Count is
 * over the inserts received (nothing emitted, nothing changed); SWS_QPACK_
 * TOO_BIG when the sum of nl + vl + 32 passes list_max (RFC 9114 4.2.2;
 * emit is not called from that field on); emit's negative value; or
 * SWS_QPACK_ERR (QPACK_DECOMPRESSION_FAILED) for a Required Insert Count
 * that cannot be (RFC 9204 4.5.1.1), a negative Base, an index past the
 * static table, a dynamic reference at or past the Required Insert Count or
 * evicted, anything truncated, an integer over 2^62 - 1, bad Huffman
 * coding. After 0 or TOO_BIG with a Required Insert Count over 0, a Section
 * Acknowledgment of stream_id is queued on the decoder stream.
 */
SWS_INTERNAL int sws_qpack_decode(sws_qpack_dec_t *d, uint64_t stream_id, const uint8_t *p,
                                  size_t n, size_t list_max, sws_hpack_emit_fn emit, void *ctx);

/* Stream stream_id ended before its field section was decoded (reset, or
 * blocked when the request was abandoned): queues a Stream Cancellation
 * (RFC 9204 4.4.2), when there can be a dynamic table. */
SWS_INTERNAL int sws_qpack_dec_cancel(sws_qpack_dec_t *d, uint64_t stream_id);

/* What to write on our decoder stream: the acknowledgements and
 * cancellations queued, then one Insert Count Increment for the inserts
 * not acknowledged yet. *p is good until the next call on d; taken(n)
 * drops the first n bytes once written. */
SWS_INTERNAL size_t sws_qpack_dec_pending(sws_qpack_dec_t *d, const uint8_t **p);
SWS_INTERNAL void sws_qpack_dec_taken(sws_qpack_dec_t *d, size_t n);

/* ---- encoder ---- */

/* What the client's decoder stream left unfinished (an instruction is at
 * most 11 bytes). */
typedef struct sws_qpack_enc {
    uint8_t part[12];
    uint8_t plen;
    int bad;
} sws_qpack_enc_t;

/* The client's decoder stream. We insert nothing, so a Section
 * Acknowledgment and any Insert Count Increment are errors (RFC 9204
 * 4.4.1, 4.4.3); a Stream Cancellation is fine. Returns 0 or
 * SWS_QPACK_DEC_STREAM. */
SWS_INTERNAL int sws_qpack_enc_decoder(sws_qpack_enc_t *e, const uint8_t *p, size_t n);

/* An upper bound of a section's bytes. */
SWS_INTERNAL size_t sws_qpack_encode_bound(const sws_hpack_field_t *f, size_t n);
/*
 * Encodes f[0..n) as one field section into out (room for
 * sws_qpack_encode_bound bytes); returns the bytes written. Required
 * Insert Count 0 and Base 0. Per field: a name and value in the static
 * table go out as its index; otherwise a literal, with the static table's
 * index of the name where it has one, the N bit (never indexed) for a field
 * flagged SWS_HPACK_NEVER and for set-cookie, cookie, authorization,
 * proxy-authorization and x-request-id (ADR 0022). Strings are
 * Huffman-coded when shorter. Names are taken as given (lowercase).
 */
SWS_INTERNAL size_t sws_qpack_encode(const sws_hpack_field_t *f, size_t n, uint8_t *out);

/* The same bytes, with a memo of the field lines encoded lately (one per
 * worker: the answers of all its connections repeat server, date,
 * content-type, a file's etag and length ...): a field seen before is
 * copied, not looked up in the static table and Huffman-coded again.
 * Two parts: what each of the first SWS_QPACK_MEMO_POS positions of the
 * last block held (answers of one handler list their fields in one order:
 * a field equal to its position's costs a compare and a copy, and no two
 * fields of an answer can push each other out), then, for a field that
 * moved, a table direct-mapped by a hash of name and value. Fields whose
 * name and value are over SWS_QPACK_MEMO_KEY bytes, and never-indexed
 * ones, are not kept. NULL: no memo. */
#define SWS_QPACK_MEMO 64
#define SWS_QPACK_MEMO_KEY 80
#define SWS_QPACK_MEMO_POS 16
typedef struct {
    uint64_t h;
    uint8_t nl, vl, elen;      /* elen 0: empty */
    uint8_t key[SWS_QPACK_MEMO_KEY];
    uint8_t enc[SWS_QPACK_MEMO_KEY + 12];
} sws_qpack_memo_ent_t;
typedef struct sws_qpack_memo {
    sws_qpack_memo_ent_t pos[SWS_QPACK_MEMO_POS]; /* by position in the block */
    sws_qpack_memo_ent_t e[SWS_QPACK_MEMO];       /* by hash */
    uint64_t hits, misses;
} sws_qpack_memo_t;
SWS_INTERNAL size_t sws_qpack_encode_memo(sws_qpack_memo_t *m, const sws_hpack_field_t *f,
                                          size_t n, uint8_t *out);

/* Static entry i (< SWS_QPACK_STATIC_N), for tests. */
SWS_INTERNAL void sws_qpack_static(uint32_t i, sws_hpack_field_t *f);

#endif
