/*
 * test_hpack_memo.c — the HPACK encoder's memo of positions (hpack.h): a
 * field equal to the one at its position in the previous block goes out as
 * that block's index without a look-up, and only then. Each block is
 * inflated by nghttp2 and must give back the list given, so a wrong index
 * fails here even where the bytes look plausible. Also the index-on-repeat
 * rule's marks (seen_again) for many fields of one block.
 */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

#include "guard.h"
#include "http/h2/hpack.h"

static sws_hpack_enc_t enc;
static nghttp2_hd_inflater *inf;
static uint8_t out[8192];

static sws_hpack_field_t fld(const char *n, const char *v)
{
    return (sws_hpack_field_t){(const uint8_t *)n, (const uint8_t *)v, (uint32_t)strlen(n),
                               (uint32_t)strlen(v), 0};
}

/* Encodes f[0..n), inflates it with nghttp2; returns the block's length,
 * or 0 (a failed CHECK) when nghttp2 refuses it or gives another list. */
static size_t round_trip(const sws_hpack_field_t *f, size_t n)
{
    size_t len = sws_hpack_encode(&enc, f, n, out);
    CHECK(len <= sws_hpack_encode_bound(f, n), "over the bound");
    const uint8_t *in = out;
    size_t left = len, i = 0;
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, left, 1);
        if (r < 0) {
            CHECK(0, "nghttp2 refuses the block: %zd", r);
            return 0;
        }
        in += r, left -= (size_t)r;
        if (fl & NGHTTP2_HD_INFLATE_EMIT) {
            int same = i < n && nv.namelen == f[i].nl && nv.valuelen == f[i].vl &&
                       memcmp(nv.name, f[i].name, f[i].nl) == 0 &&
                       memcmp(nv.value, f[i].value, f[i].vl) == 0 &&
                       !(nv.flags & NGHTTP2_NV_FLAG_NO_INDEX) == !(f[i].flags & SWS_HPACK_NEVER);
            CHECK(same, "field %zu: nghttp2 gives %.*s: %.*s", i, (int)nv.namelen, nv.name,
                  (int)nv.valuelen, nv.value);
            if (!same)
                return 0;
            i++;
        }
        if (fl & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(inf);
            break;
        }
    }
    CHECK(i == n, "%zu fields inflated, %zu given", i, n);
    CHECK(nghttp2_hd_inflate_get_dynamic_table_size(inf) == enc.t.size, "tables out of step");
    return len;
}

static void start(uint32_t cap)
{
    if (inf)
        nghttp2_hd_inflate_del(inf), sws_hpack_enc_free(&enc);
    CHECK(sws_hpack_enc_init_cap(&enc, cap) == 0 && nghttp2_hd_inflate_new(&inf) == 0, "init");
}

int main(void)
{
    sws_hpack_field_t a[] = {
        fld(":status", "200"),          fld("server", "scalws"),
        fld("date", "Sun, 06 Dec 2026 07:15:05 GMT"), fld("content-type", "text/html"),
        fld("content-length", "1024"),  fld("etag", "\"65f2a1-400\""),
        fld("accept-ranges", "bytes"),
    };
    size_t n = sizeof a / sizeof *a;

    /* One answer's list, then the same: the second block is one byte a
     * field (content-length went literal once, then indexed on its second
     * sight: the third block is all indexes too). */
    start(4096);
    round_trip(a, n);
    round_trip(a, n);
    CHECK(round_trip(a, n) == n, "third block: not one byte a field");
    for (size_t i = 0; i < n; i++)
        CHECK(enc.memo[i] != 0, "position %zu has no index", i);
    t_end();

    /* Another value at a position: a literal there (date, index on repeat),
     * the neighbours still indexes, and the block inflates to the list. */
    sws_hpack_field_t b[sizeof a / sizeof *a];
    memcpy(b, a, sizeof a);
    b[2] = fld("date", "Sun, 06 Dec 2026 07:15:06 GMT");
    size_t len = round_trip(b, n);
    CHECK(len > n + 10, "a new date costs a literal: %zu bytes", len);
    CHECK(round_trip(b, n) == n, "the new date is indexed on its second sight");
    /* the old date is still in the table: back to it by position */
    CHECK(round_trip(a, n) == n, "the old date by its entry");
    t_end();

    /* The same field flagged never-indexed at a memo's position: a literal
     * never indexed, whatever the memo holds. */
    sws_hpack_field_t c[sizeof a / sizeof *a];
    memcpy(c, a, sizeof a);
    c[1].flags = SWS_HPACK_NEVER;
    round_trip(c, n);
    CHECK(out[1] >> 4 == 1, "server flagged never: first byte %02x", out[1]);
    t_end();

    /* Fields moved to other positions: found by look-up, not by the memo. */
    sws_hpack_field_t d[sizeof a / sizeof *a];
    for (size_t i = 0; i < n; i++)
        d[i] = a[n - 1 - i];
    CHECK(round_trip(d, n) == n, "reversed list: all indexes");
    CHECK(round_trip(a, n) == n, "and back");
    t_end();

    /* Entries the memo names evicted: the peer shrinks the table to 0 and
     * back, the memo's insert numbers name nothing, and the block is
     * literals again (no index into an empty table). */
    sws_hpack_enc_peer_max(&enc, 0);
    nghttp2_hd_inflate_change_table_size(inf, 0);
    sws_hpack_enc_peer_max(&enc, 4096);
    nghttp2_hd_inflate_change_table_size(inf, 4096);
    len = round_trip(a, n);
    CHECK(len > 2 * n, "after the table emptied: %zu bytes", len);
    round_trip(a, n);
    CHECK(round_trip(a, n) == n, "indexed again");
    t_end();

    /* A small table whose entries are evicted by the block's own adds: a
     * position's entry gone by the next block is looked up or sent literal,
     * never named by a stale index (nghttp2 would refuse or differ). */
    start(100);
    for (int r = 0; r < 50; r++) {
        sws_hpack_field_t e[sizeof a / sizeof *a];
        memcpy(e, a, sizeof a);
        char len_v[8];
        snprintf(len_v, sizeof len_v, "%d", 1000 + r % 3);
        e[4] = fld("content-length", len_v);
        if (!round_trip(e, n))
            break;
    }
    t_end();

    /* Past the memo's positions, 24 names we know nothing of (indexed on
     * their second sight): all indexes by the fourth block. With one seen[]
     * slot a field, 13 of these shared slots, cleared each other's mark
     * on every block and were never indexed. */
    start(4096);
    sws_hpack_field_t many[SWS_HPACK_MEMO + 8];
    char names[SWS_HPACK_MEMO + 8][8];
    for (size_t i = 0; i < SWS_HPACK_MEMO + 8; i++) {
        snprintf(names[i], sizeof names[i], "x-f%zu", i);
        many[i] = fld(names[i], "v");
    }
    for (int r = 0; r < 3; r++)
        round_trip(many, SWS_HPACK_MEMO + 8);
    CHECK(round_trip(many, SWS_HPACK_MEMO + 8) == SWS_HPACK_MEMO + 8, "fourth block: all indexes");
    t_end();

    nghttp2_hd_inflate_del(inf);
    sws_hpack_enc_free(&enc);
    return t_summary();
}
