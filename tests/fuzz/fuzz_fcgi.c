/*
 * fuzz_fcgi.c — fuzz driver for csrc/http/fcgi.c and sws_parse_cgi_head
 * (csrc/http/http1.c). Every input is taken as what a FastCGI application
 * sends back for request id 1:
 *
 *  - sws_fcgi_decode on the whole input is checked against a plain reference
 *    decoder written here from the specification (same error-or-not, consumed
 *    count, STDOUT and STDERR bytes, END_REQUEST fields), and against the
 *    same decode fed in pieces: byte by byte, in two pieces at every cut
 *    (short inputs) or at pseudo-random cuts derived from the input, and in
 *    pseudo-random chunks. Each piece sits in a malloc block of its exact
 *    size, so ASan sees an over-read. Contracts of scalws/fcgi.h: consumed
 *    <= len, *out <= consumed, fewer than len only after END_REQUEST, nothing
 *    consumed once ended; after an error nothing more is asserted.
 *  - the decoded STDOUT, and the raw input, go to sws_parse_cgi_head whole
 *    and grown with last_len (byte by byte and in input-derived steps): the
 *    same result, fields inside the head.
 *  - name-value pairs derived from the input are encoded with sws_fcgi_nv
 *    and read back with sws_fcgi_nv_each; sws_fcgi_nv_each on the raw input
 *    must stay inside it and report contiguous pairs.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it and prints "N passed, M failed"
 * (tests/c/Makefile runs it that way under ASan/UBSan).
 */
#include "scalws/fcgi.h"
#include "scalws/http1.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXH 32
#define REQ_ID 1

static int failures;

#ifdef FUZZING
#define FAIL(msg) __builtin_trap()
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

/* ---- a tiny deterministic PRNG seeded from the input ------------------- */

static uint64_t rng;

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ? h : 1;
}

static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* ---- decode results ------------------------------------------------------ */

typedef struct {
    int error;
    size_t consumed;
    uint8_t *out, *err; /* STDOUT and STDERR bytes, in order */
    size_t olen, elen;
    int ended, closed;
    uint32_t app_status;
    uint8_t protocol_status;
} result_t;

static void res_init(result_t *r, size_t size)
{
    memset(r, 0, sizeof(*r));
    r->out = malloc(size + 1);
    r->err = malloc(size + 1);
}

static void res_free(result_t *r)
{
    free(r->out);
    free(r->err);
}

/* Reference: the records of data[0..size) read one after another, as the
 * specification and the contract in scalws/fcgi.h say. */
static void reference(const uint8_t *data, size_t size, result_t *r)
{
    size_t pos = 0;
    while (pos < size && !r->ended) {
        if (size - pos < SWS_FCGI_HEADER_LEN) {
            pos = size; /* a partial header: kept for the next call */
            break;
        }
        const uint8_t *h = data + pos;
        unsigned type = h[1], id = (unsigned)h[2] << 8 | h[3];
        size_t clen = (size_t)h[4] << 8 | h[5], plen = h[6];
        int skip = 0;
        if (h[0] != 1) {
            r->error = 1;
            return;
        }
        if (id == 0) {
            if (type != SWS_FCGI_GET_VALUES_RESULT && type != SWS_FCGI_UNKNOWN_TYPE) {
                r->error = 1;
                return;
            }
            skip = 1;
        } else if (id != REQ_ID) {
            r->error = 1;
            return;
        } else if (type == SWS_FCGI_STDOUT) {
            if (r->closed) {
                r->error = 1;
                return;
            }
            if (clen == 0)
                r->closed = 1;
        } else if (type == SWS_FCGI_END_REQUEST) {
            if (clen != 8) {
                r->error = 1;
                return;
            }
        } else if (type != SWS_FCGI_STDERR) {
            r->error = 1;
            return;
        }
        pos += SWS_FCGI_HEADER_LEN;
        size_t avail = size - pos < clen ? size - pos : clen;
        if (!skip && type == SWS_FCGI_STDOUT) {
            memcpy(r->out + r->olen, data + pos, avail);
            r->olen += avail;
        } else if (!skip && type == SWS_FCGI_STDERR) {
            memcpy(r->err + r->elen, data + pos, avail);
            r->elen += avail;
        }
        if (avail < clen || size - pos - clen < plen) {
            pos = size;
            break;
        }
        if (!skip && type == SWS_FCGI_END_REQUEST) {
            const uint8_t *b = data + pos;
            r->app_status = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
            r->protocol_status = b[4];
            r->ended = 1;
        }
        pos += clen + plen;
    }
    r->consumed = pos;
}

/* on_stderr: the bytes must lie inside the piece being decoded. */
typedef struct {
    result_t *r;
    const char *lo, *hi;
} errctx_t;

static void on_stderr(void *ctx, const char *p, size_t n)
{
    errctx_t *c = ctx;
    if (n == 0 || p < c->lo || p + n > c->hi || p + n < p)
        FAIL("stderr bytes outside the piece");
    else {
        memcpy(c->r->err + c->r->elen, p, n);
        c->r->elen += n;
    }
}

/* Decodes data[0..size) fed as pieces of the lengths in cuts[0..ncuts)
 * (their sum is size), each in its own exact-size block, as the engine
 * calls it: one decoder state, STDOUT appended after each call. */
static void decode_pieces(const uint8_t *data, size_t size, const size_t *cuts, size_t ncuts,
                          result_t *r)
{
    sws_fcgi_dec_t d;
    size_t off = 0;
    memset(&d, 0, sizeof(d));
    d.id = REQ_ID;
    for (size_t i = 0; i < ncuts; i++) {
        size_t k = cuts[i], out = (size_t)-1;
        char *piece = malloc(k ? k : 1);
        errctx_t ec = {r, piece, piece + k};
        int was_ended = d.ended;
        memcpy(piece, data + off, k);
        ssize_t n = sws_fcgi_decode(&d, piece, k, &out, on_stderr, &ec);
        if (n == SWS_FCGI_ERROR) {
            r->error = 1;
            free(piece);
            return;
        }
        if (n < 0 || (size_t)n > k || out > (size_t)n)
            FAIL("decode: consumed outside the piece or out > consumed");
        else if ((size_t)n < k && !d.ended)
            FAIL("decode: stopped short without END_REQUEST");
        else if (was_ended && (n != 0 || out != 0))
            FAIL("decode: consumed after END_REQUEST");
        else {
            memcpy(r->out + r->olen, piece, out);
            r->olen += out;
            r->consumed += (size_t)n;
        }
        free(piece);
        off += k;
    }
    r->ended = d.ended;
    r->closed = d.stdout_closed;
    if (d.ended) {
        r->app_status = d.app_status;
        r->protocol_status = d.protocol_status;
    }
}

static int same(const result_t *a, const result_t *b)
{
    if (a->error || b->error)
        return a->error == b->error;
    return a->consumed == b->consumed && a->olen == b->olen && a->elen == b->elen &&
           memcmp(a->out, b->out, a->olen) == 0 && memcmp(a->err, b->err, a->elen) == 0 &&
           a->ended == b->ended && a->closed == b->closed && a->app_status == b->app_status &&
           a->protocol_status == b->protocol_status;
}

static void fuzz_decode(const uint8_t *data, size_t size, result_t *whole)
{
    size_t *cuts = malloc((size + 2) * sizeof(size_t)), nc;
    result_t ref, r;

    /* whole */
    res_init(whole, size);
    cuts[0] = size;
    decode_pieces(data, size, cuts, 1, whole);
    res_init(&ref, size);
    reference(data, size, &ref);
    if (!same(whole, &ref))
        FAIL("decode disagrees with the reference decoder");

    /* byte by byte */
    for (nc = 0; nc < size; nc++)
        cuts[nc] = 1;
    res_init(&r, size);
    decode_pieces(data, size, cuts, nc, &r);
    if (!same(whole, &r))
        FAIL("byte-by-byte decode disagrees with whole");
    res_free(&r);

    /* two pieces: every cut of a short input, else 16 cuts from the input */
    {
        size_t tries = size <= 160 ? size + 1 : 16;
        for (size_t t = 0; t < tries; t++) {
            size_t cut = size <= 160 ? t : rnd() % (size + 1);
            size_t c2[2] = {cut, size - cut};
            res_init(&r, size);
            decode_pieces(data, size, c2, 2, &r);
            if (!same(whole, &r))
                FAIL("two-piece decode disagrees with whole");
            res_free(&r);
        }
    }

    /* pseudo-random pieces, empty ones included */
    for (int t = 0; t < 4; t++) {
        size_t left = size, maxp = 1 + rnd() % (t & 1 ? 300 : 20);
        nc = 0;
        while (left && nc < size + 1) {
            size_t k = rnd() % (maxp + 1);
            if (k > left)
                k = left;
            cuts[nc++] = k;
            left -= k;
        }
        if (left)
            cuts[nc++] = left;
        res_init(&r, size);
        decode_pieces(data, size, cuts, nc, &r);
        if (!same(whole, &r))
            FAIL("chunked-piece decode disagrees with whole");
        res_free(&r);
    }
    res_free(&ref);
    free(cuts);
}

/* ---- the CGI head -------------------------------------------------------- */

static int cgi_parse(const char *buf, size_t len, size_t cap, sws_header_t *h, size_t *nh,
                     size_t last)
{
    *nh = cap;
    return sws_parse_cgi_head(buf, len, h, nh, last);
}

static void fuzz_cgi_head(const uint8_t *data, size_t size, size_t cap)
{
    char *buf = malloc(size ? size : 1);
    sws_header_t h[MAXH], h2[MAXH];
    size_t nh, nh2;
    memcpy(buf, data, size);
    int rc = cgi_parse(buf, size, cap, h, &nh, 0);

    if (rc >= 0) {
        if (rc == 0 || (size_t)rc > size || nh > cap)
            FAIL("cgi head length or count");
        for (size_t i = 0; i < nh && i < cap; ++i)
            if (h[i].name < buf || h[i].name + h[i].name_len > buf + rc || h[i].value < buf ||
                h[i].value + h[i].value_len > buf + rc || h[i].name_len == 0 ||
                h[i].name[h[i].name_len] != ':')
                FAIL("cgi header outside the head");
    } else if (rc != SWS_PARSE_ERROR && rc != SWS_PARSE_INCOMPLETE &&
               rc != SWS_PARSE_TOO_MANY_HEADERS) {
        FAIL("cgi head return code");
    }
    if (rc == SWS_PARSE_INCOMPLETE && size &&
        (buf[0] == '\n' || (size > 1 && buf[0] == '\r' && buf[1] == '\n')))
        FAIL("cgi head: a leading empty line is a whole (empty) head");

    /* grown with last_len, byte by byte (short inputs) and in steps derived
     * from the input: the same result, the same fields */
    for (int pass = 0; pass < 2; pass++) {
        size_t step = pass == 0 ? 1 : 2 + rnd() % 9, last = 0, k = 0;
        int rc2;
        if (pass == 0 && size > 1024)
            continue;
        for (;;) {
            k = size - k > step ? k + step : size;
            rc2 = cgi_parse(buf, k, cap, h2, &nh2, last);
            if (rc2 != SWS_PARSE_INCOMPLETE || k == size)
                break;
            last = k;
        }
        if (rc2 != rc && !(rc2 == SWS_PARSE_INCOMPLETE && rc < 0))
            FAIL("grown cgi head parse disagrees with whole parse");
        else if (rc >= 0 && (nh2 != nh || memcmp(h, h2, nh * sizeof(h[0])) != 0))
            FAIL("grown cgi head parse gives other fields");
        /* asked again with nothing new (the engine does when a record
         * brought no STDOUT) */
        if (rc2 == SWS_PARSE_INCOMPLETE && cgi_parse(buf, k, cap, h2, &nh2, k) != SWS_PARSE_INCOMPLETE)
            FAIL("cgi head: same bytes again, other answer");
    }
    free(buf);
}

/* ---- name-value pairs ---------------------------------------------------- */

typedef struct {
    const uint8_t *base;
    size_t len;
    const char *last_end; /* raw input: where the previous pair ended */
    size_t n;
    /* expected pairs (round trip) */
    const char **en, **ev;
    size_t *enl, *evl, want;
} nvctx_t;

static void nv_raw(void *ctx, const char *n, size_t nl, const char *v, size_t vl)
{
    nvctx_t *c = ctx;
    const char *lo = (const char *)c->base, *hi = lo + c->len;
    size_t gap = (size_t)(n - c->last_end);
    if (n < lo || v < n || nl > (size_t)(hi - n) || v != n + nl || vl > (size_t)(hi - v) ||
        n < c->last_end || (gap != 2 && gap != 5 && gap != 8))
        FAIL("nv_each: a pair outside the input or not contiguous");
    else
        c->last_end = v + vl;
    c->n++;
}

static void nv_check(void *ctx, const char *n, size_t nl, const char *v, size_t vl)
{
    nvctx_t *c = ctx;
    size_t i = c->n++;
    if (i >= c->want || nl != c->enl[i] || vl != c->evl[i] || memcmp(n, c->en[i], nl) != 0 ||
        memcmp(v, c->ev[i], vl) != 0)
        FAIL("nv round trip: another pair read back");
}

static void fuzz_nv(const uint8_t *data, size_t size)
{
    /* raw input */
    {
        uint8_t *raw = malloc(size ? size : 1);
        memcpy(raw, data, size);
        nvctx_t c = {raw, size, (const char *)raw, 0, NULL, NULL, NULL, NULL, 0};
        int rc = sws_fcgi_nv_each((const char *)raw, size, nv_raw, &c);
        if (rc != 0 && rc != -1)
            FAIL("nv_each return code");
        if (rc == 0 && c.last_end != (const char *)raw + size)
            FAIL("nv_each: 0 but the pairs do not cover the input");
        free(raw);
    }

    /* round trip of pairs cut from the input: lengths 0..511 from pairs of
     * bytes, sometimes one large value */
    {
        enum { MAXP = 64 };
        const char *en[MAXP + 1], *ev[MAXP + 1];
        size_t enl[MAXP + 1], evl[MAXP + 1], np = 0, total = 0, pos = 0;
        const char *s = (const char *)data;
        char *big = NULL;
        while (np < MAXP && pos + 4 <= size) {
            size_t nl = data[pos] | (size_t)(data[pos + 1] & 1) << 8;
            size_t vl = data[pos + 2] | (size_t)(data[pos + 3] & 1) << 8;
            pos += 4;
            if (nl > size - pos)
                nl = size - pos;
            en[np] = s + pos;
            enl[np] = nl;
            pos += nl;
            if (vl > size - pos)
                vl = size - pos;
            ev[np] = s + pos;
            evl[np] = vl;
            pos += vl;
            np++;
        }
        if ((rng & 63) == 0) { /* a value past 2^16 (FCGI_MAX_CONTENT: split by the caller) */
            size_t bl = 65536 + rnd() % 70000;
            big = malloc(bl);
            memset(big, 'a' + (int)(rnd() % 26), bl);
            en[np] = "BIG";
            enl[np] = 3;
            ev[np] = big;
            evl[np] = bl;
            np++;
        }
        for (size_t i = 0; i < np; i++)
            total += sws_fcgi_nv_len(enl[i], evl[i]);
        char *enc = malloc(total ? total : 1), *w = enc;
        for (size_t i = 0; i < np; i++) {
            char *e = sws_fcgi_nv(w, en[i], enl[i], ev[i], evl[i]);
            if (e != w + sws_fcgi_nv_len(enl[i], evl[i]))
                FAIL("sws_fcgi_nv wrote other than sws_fcgi_nv_len bytes");
            w = w + sws_fcgi_nv_len(enl[i], evl[i]);
        }
        nvctx_t c = {(const uint8_t *)enc, total, enc, 0, en, ev, enl, evl, np};
        if (sws_fcgi_nv_each(enc, total, nv_check, &c) != 0 || c.n != np)
            FAIL("nv round trip: pairs lost");
        /* a strict prefix of a non-empty encoding cut inside its last pair is refused */
        if (np && total) {
            size_t lastlen = sws_fcgi_nv_len(enl[np - 1], evl[np - 1]);
            size_t cut = total - 1 - rnd() % (lastlen - 1); /* inside the last pair */
            char *pre = malloc(cut ? cut : 1);
            memcpy(pre, enc, cut);
            c.n = 0;
            if (sws_fcgi_nv_each(pre, cut, nv_check, &c) != -1)
                FAIL("nv_each accepted a cut pair");
            free(pre);
        }
        free(enc);
        free(big);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    result_t whole;
    rng = fnv(data, size);
    fuzz_decode(data, size, &whole);
    if (!whole.error)
        fuzz_cgi_head(whole.out, whole.olen, (rng & 3) == 0 ? 1 + rnd() % 4 : MAXH);
    fuzz_cgi_head(data, size, MAXH);
    res_free(&whole);
    fuzz_nv(data, size);
    return 0;
}

#ifndef FUZZING
/* Runs every regular file of argv[1] (default tests/fuzz/corpus/fcgi)
 * through the target, each in a malloc block of its exact size. */
int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "tests/fuzz/corpus/fcgi";
    DIR *dp = opendir(dir);
    struct dirent *e;
    int passed = 0, failed = 0;

    if (dp == NULL) {
        perror(dir);
        return 2;
    }
    while ((e = readdir(dp)) != NULL) {
        char path[4096];
        FILE *f;
        long n;
        uint8_t *data;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if ((f = fopen(path, "rb")) == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        data = malloc(n > 0 ? (size_t)n : 1);
        if (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)
            n = 0;
        fclose(f);
        int before = failures;
        LLVMFuzzerTestOneInput(data, (size_t)n);
        if (failures != before) {
            fprintf(stderr, "FAIL %s\n", path);
            ++failed;
        } else {
            ++passed;
        }
        free(data);
    }
    closedir(dp);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0 || passed == 0;
}
#endif
