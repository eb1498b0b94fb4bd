/* test_hpack --bench (included by test_hpack.c after its helpers and the
 * generated lists, which it uses): times encoding and decoding of typical
 * blocks. Build test_hpack without sanitizers for numbers that mean
 * anything. */
#ifndef SCALWS_TEST_HPACK_BENCH_H
#define SCALWS_TEST_HPACK_BENCH_H

/* ---- --bench ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int count_emit(void *ctx, const sws_hpack_field_t *f)
{
    *(size_t *)ctx += f->vl;
    return 0;
}

static void bench(void)
{
    enum { N = 2000000 };
    sws_hpack_field_t res[] = {fld(":status", "200"), fld("server", "scalws"), fld("date", ""),
                               fld("content-type", "text/html; charset=utf-8"),
                               fld("content-length", "4096"), fld("cache-control", "max-age=60"),
                               fld("etag", "\"5f2b-1a3c\""), fld("x-request-id", "")};
    size_t nres = sizeof res / sizeof *res;
    static uint8_t out[4096];
    sws_hpack_enc_t e;
    sws_hpack_enc_init(&e);
    nghttp2_hd_deflater *def;
    nghttp2_hd_deflate_new(&def, 4096);
    nghttp2_nv nv[8];
    /* encode: a new request id every answer, a new date every 10,000
     * (formatted beforehand, 1,000 ids reused) */
    static char rids[1000][40], dates[N / 10000 + 1][40];
    for (int i = 0; i < 1000; i++)
        snprintf(rids[i], sizeof rids[i], "%032x", i * 7919);
    for (int i = 0; i <= N / 10000; i++)
        snprintf(dates[i], sizeof dates[i], "Mon, 21 Oct 2013 20:%02d:%02d GMT", i / 60 % 60, i % 60);
    double t0 = now_s();
    size_t total = 0;
    for (int i = 0; i < N; i++) {
        res[2] = fld("date", dates[i / 10000]);
        res[7] = fld("x-request-id", rids[i % 1000]);
        total += sws_hpack_encode(&e, res, nres, out);
    }
    double t1 = now_s();
    printf("encode, ours:    %.1f ns per answer of %zu fields, %.1f bytes\n", (t1 - t0) * 1e9 / N,
           nres, (double)total / N);
    total = 0;
    t0 = now_s();
    for (int i = 0; i < N; i++) {
        res[2] = fld("date", dates[i / 10000]);
        res[7] = fld("x-request-id", rids[i % 1000]);
        for (size_t k = 0; k < nres; k++)
            nv[k] = (nghttp2_nv){(uint8_t *)res[k].name, (uint8_t *)res[k].value, res[k].nl,
                                 res[k].vl,
                                 k == 7 ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE};
        total += (size_t)nghttp2_hd_deflate_hd(def, out, sizeof out, nv, nres);
    }
    t1 = now_s();
    printf("encode, nghttp2: %.1f ns per answer, %.1f bytes \n",
           (t1 - t0) * 1e9 / N, (double)total / N);
    nghttp2_hd_deflate_del(def);
    sws_hpack_enc_free(&e);

    /* decode: a browser-like request, first block then repeats (by nghttp2) */
    sws_hpack_field_t req[] = {
        fld(":method", "GET"), fld(":scheme", "https"), fld(":authority", "www.example.com"),
        fld(":path", "/assets/app.3f2a1b.js"),
        fld("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"),
        fld("accept", "*/*"), fld("accept-language", "en-US,en;q=0.5"),
        fld("accept-encoding", "gzip, deflate, br"), fld("referer", "https://www.example.com/"),
        fld("cookie", "session=0123456789abcdef0123456789abcdef"),
    };
    size_t nreq = sizeof req / sizeof *req;
    nghttp2_hd_deflate_new(&def, 4096);
    static uint8_t first[4096], rep[4096];
    nghttp2_nv rnv[10];
    for (size_t k = 0; k < nreq; k++)
        rnv[k] = (nghttp2_nv){(uint8_t *)req[k].name, (uint8_t *)req[k].value, req[k].nl,
                              req[k].vl, 0};
    ssize_t l1 = nghttp2_hd_deflate_hd(def, first, sizeof first, rnv, nreq);
    ssize_t l2 = nghttp2_hd_deflate_hd(def, rep, sizeof rep, rnv, nreq);
    nghttp2_hd_deflate_del(def);
    sws_hpack_dec_t d;
    sws_hpack_dec_init(&d, 4096);
    size_t sink = 0;
    sws_hpack_decode(&d, first, (size_t)l1, 1 << 20, count_emit, &sink);
    t0 = now_s();
    for (int i = 0; i < N; i++)
        sws_hpack_decode(&d, rep, (size_t)l2, 1 << 20, count_emit, &sink);
    t1 = now_s();
    printf("decode, ours:    %.1f ns per request of %zu fields (%zd bytes, repeat block)\n",
           (t1 - t0) * 1e9 / N, nreq, l2);
    nghttp2_hd_inflater *inf;
    nghttp2_hd_inflate_new(&inf);
    buf_t got = {0};
    ng_inflate(inf, first, (size_t)l1, &got);
    t0 = now_s();
    for (int i = 0; i < N; i++) {
        const uint8_t *in = rep;
        size_t left = (size_t)l2;
        for (;;) {
            nghttp2_nv o;
            int fl = 0;
            ssize_t r = nghttp2_hd_inflate_hd2(inf, &o, &fl, in, left, 1);
            in += r;
            left -= (size_t)r;
            if (fl & NGHTTP2_HD_INFLATE_EMIT)
                sink += o.valuelen;
            if (fl & NGHTTP2_HD_INFLATE_FINAL) {
                nghttp2_hd_inflate_end_headers(inf);
                break;
            }
        }
    }
    t1 = now_s();
    printf("decode, nghttp2: %.1f ns per request\n", (t1 - t0) * 1e9 / N);
    /* the first block: every value a Huffman literal */
    t0 = now_s();
    for (int i = 0; i < N / 4; i++) {
        d.t.n = 0, d.t.size = 0; /* reuse the arena: empty the table by hand */
        sws_hpack_decode(&d, first, (size_t)l1, 1 << 20, count_emit, &sink);
    }
    t1 = now_s();
    printf("decode, ours:    %.1f ns per first request (%zd bytes, literals, Huffman)\n",
           (t1 - t0) * 1e9 / (N / 4), l1);
    nghttp2_hd_inflate_del(inf);
    sws_hpack_dec_free(&d);
    free(got.p);
    printf("(sink %zu)\n", sink);
}

#endif
