/*
 * fuzz_h3sess.c — fuzz driver for csrc/http/h3/h3sess.c and h3sess_recv.c
 * (RFC 9114) alone: a client's stream bytes, made up, into our server
 * session, which answers every request it is given at once (a small
 * head, a body in two pieces, trailers for every third), while its
 * output is taken, sometimes only in part, and acknowledged, sometimes
 * late. Byte 0 picks our QPACK table (0, 220 or 4096) and blocked-stream
 * budget (0, 1 or 100), and bit 7 no pool of spares (else a small one).
 * Then records [stream][flags][len][bytes]:
 * stream: the low 2 bits a kind (client request 4k, client uni 4k+2),
 * the rest k; flags bit 0: the stream ends with these bytes; bit 1: take
 * the output now; bit 2: take only part of it (ngtcp2 taking fewer bytes
 * than offered); bit 3: acknowledge all written so far; bit 4: close the
 * stream (ngtcp2's stream_close); bit 5: GOAWAY; bit 6: block, bit 7:
 * unblock the stream's sending side.
 *
 * Contracts checked: a read returns at most its length, or a negative
 * H3 or QPACK code, and then every later read and writev returns the same
 * one; writev offers at most 16 vectors, nothing after a stream's end,
 * and never more than it has unwritten; acknowledged body never passes
 * what read_data gave; a closed stream's owner state is told once;
 * everything freed (ASan's leak check).
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/h3/h3sess_int.h"

static int failures;

#ifdef FUZZING
#define FAIL(...) (fprintf(stderr, "contract broken: " __VA_ARGS__), fputc('\n', stderr), __builtin_trap())
#else
#define FAIL(...) (fprintf(stderr, "contract broken: " __VA_ARGS__), fputc('\n', stderr), ++failures)
#endif

typedef struct {
    int used, closed, given;
    uint64_t body_given, acked;
} req_t;

typedef struct {
    sws_h3sess_t s;
    req_t req[64];
    int64_t id_of[64];
} fz_t;

static req_t *R(void *su) { return su; }

static void *c_begin(void *u, int64_t id)
{
    fz_t *f = u;
    req_t *r = &f->req[(id / 4) % 64];
    if (r->used && !r->closed)
        return NULL; /* an id the table wrapped onto: the session takes it as out of memory */
    memset(r, 0, sizeof *r);
    r->used = 1;
    f->id_of[(id / 4) % 64] = id;
    return r;
}

static int c_header(void *u, void *su, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
    (void)u, (void)su, (void)v, (void)vl;
    if (!nl || n[0] == 0)
        FAIL("an empty name passed the checks");
    return 0;
}

static void c_too_big(void *u, void *su) { (void)u, (void)su; }

static void c_request(void *u, void *su, int fin)
{
    (void)fin;
    fz_t *f = u;
    req_t *r = su;
    int64_t id = f->id_of[r - f->req];
    static const sws_hpack_field_t head[] = {
        {(const uint8_t *)":status", (const uint8_t *)"200", 7, 3, 0},
        {(const uint8_t *)"server", (const uint8_t *)"fuzz", 6, 4, 0}};
    if (id % 3 == 0) {
        static const sws_hpack_field_t info[] = {{(const uint8_t *)":status", (const uint8_t *)"103", 7, 3, 0}};
        sws_h3sess_info(&f->s, id, info, 1);
    }
    sws_h3sess_response(&f->s, id, head, 2, id % 8 != 4);
}

static int c_data(void *u, void *su, const uint8_t *p, size_t n)
{
    (void)u, (void)su, (void)p, (void)n;
    return 0;
}

static void c_end(void *u, void *su) { (void)u, (void)su; }
static void c_consume(void *u, int64_t id, size_t n) { (void)u, (void)id, (void)n; }

static void c_close(void *u, void *su, int64_t id, uint64_t code)
{
    (void)u, (void)id, (void)code;
    if (R(su)->closed)
        FAIL("a stream closed twice");
    R(su)->closed = 1;
}

static void c_acked(void *u, void *su, uint64_t n)
{
    (void)u;
    req_t *r = su;
    r->acked += n;
    if (r->acked > r->body_given)
        FAIL("acknowledged %llu of %llu body bytes given", (unsigned long long)r->acked,
             (unsigned long long)r->body_given);
}

static const char *PIECES[2] = {"first piece, ", "second piece"};

static ssize_t c_read(void *u, void *su, sws_h3vec_t *vec, size_t nvec, uint32_t *flags)
{
    (void)u, (void)nvec;
    req_t *r = su;
    if (r->given >= 2) {
        *flags |= SWS_H3D_EOF;
        return 0;
    }
    vec[0].base = (const uint8_t *)PIECES[r->given];
    vec[0].len = strlen(PIECES[r->given]);
    r->body_given += vec[0].len;
    if (++r->given == 2)
        *flags |= SWS_H3D_EOF | ((r - ((fz_t *)u)->req) % 3 == 0 ? SWS_H3D_TRAILERS : 0);
    return 1;
}

static void c_trailers(void *u, void *su, int64_t id)
{
    (void)su;
    static const sws_hpack_field_t tr[] = {{(const uint8_t *)"x-t", (const uint8_t *)"1", 3, 1, 0}};
    sws_h3sess_trailers(&((fz_t *)u)->s, id, tr, 1);
}

static void c_stop(void *u, int64_t id, uint64_t code) { (void)u, (void)id, (void)code; }
static void c_reset(void *u, int64_t id, uint64_t code) { (void)u, (void)id, (void)code; }

static const sws_h3cb_t cb = {c_begin, c_header, c_too_big, c_request, c_data, c_end, c_consume,
                              c_close, c_acked, c_read, c_trailers, c_stop, c_reset};

/* Written, per stream, and not yet acknowledged (bounded ids). */
static uint64_t written_not_acked[256];

static int take_output(fz_t *f, int partial, int *fatal)
{
    for (int guard = 0; guard < 200; guard++) {
        int64_t id;
        int fin;
        sws_h3vec_t v[16];
        ssize_t k = sws_h3sess_writev(&f->s, &id, &fin, v, 16);
        if (k < 0) {
            if (*fatal && k != *fatal)
                FAIL("writev said %zd after %d", k, *fatal);
            *fatal = (int)k;
            return 0;
        }
        if (id < 0)
            return 0;
        if (k > 16)
            FAIL("%zd vectors", k);
        size_t total = 0;
        for (ssize_t i = 0; i < k; i++)
            total += v[i].len;
        if (!total && !fin)
            FAIL("stream %lld offered nothing", (long long)id);
        size_t took = partial && total > 1 ? total / 2 : total;
        sws_h3sess_written(&f->s, id, took);
        if (id < 256)
            written_not_acked[id] += took;
        if (!total && fin)
            continue;
    }
    return 0;
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    static const uint32_t tables[3] = {0, 220, 4096}, blocked[3] = {0, 1, 100};
    fz_t *f = calloc(1, sizeof *f);
    /* a small pool of spares (a worker's), so that it fills and empties */
    sws_h3pool_t pool = {.max_runs = 4, .max_sts = 2};
    sws_h3sess_conf_t conf = {tables[data[0] % 3], blocked[data[0] / 3 % 3], 1024,
                              data[0] & 0x80 ? NULL : &pool};
    if (sws_h3sess_init(&f->s, &conf, &cb, f) != 0 || sws_h3sess_bind(&f->s, 3, 7, 11) != 0)
        abort();
    memset(written_not_acked, 0, sizeof written_not_acked);
    int fatal = 0;
    const uint8_t *p = data + 1, *end = data + size;
    while (end - p >= 3) {
        uint8_t sel = p[0], fl = p[1];
        size_t len = p[2];
        p += 3;
        if (len > (size_t)(end - p))
            len = (size_t)(end - p);
        int64_t id = (int64_t)(sel >> 2) * 4 + ((sel & 1) ? 2 : 0);
        int64_t r = sws_h3sess_read(&f->s, id, p, len, fl & 1);
        if (r > (int64_t)len)
            FAIL("read gave %lld credit for %zu bytes", (long long)r, len);
        if (r < 0) {
            if (fatal && r != fatal)
                FAIL("read said %lld after %d", (long long)r, fatal);
            fatal = (int)r;
        } else if (fatal) {
            FAIL("read took bytes after the connection error %d", fatal);
        }
        p += len;
        if (fl & 0x40)
            sws_h3sess_block(&f->s, id);
        if (fl & 0x80)
            sws_h3sess_unblock(&f->s, id);
        if (fl & 0x20)
            sws_h3sess_goaway(&f->s);
        if (fl & 2)
            take_output(f, fl & 4, &fatal);
        if (fl & 8) {
            for (int64_t i = 0; i < 256; i++)
                if (written_not_acked[i]) {
                    sws_h3sess_acked_bytes(&f->s, i, written_not_acked[i]);
                    written_not_acked[i] = 0;
                }
        }
        if (fl & 0x10 && !(id & 2)) {
            int rc = sws_h3sess_close_stream(&f->s, id, H3_NO_ERROR);
            if (rc < 0)
                FAIL("closing request stream %lld: %d", (long long)id, rc);
            written_not_acked[id < 256 ? id : 0] = 0;
        }
    }
    take_output(f, 0, &fatal);
    sws_h3sess_free(&f->s);
    if (pool.n_runs > pool.max_runs || pool.n_sts > pool.max_sts)
        FAIL("the pool holds %u runs and %u streams", pool.n_runs, pool.n_sts);
    sws_h3pool_free(&pool);
    free(f);
}

#include "corpus_main.h"
