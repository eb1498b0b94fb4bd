/*
 * fuzz_h2sess.c — fuzz driver for our HTTP/2 session alone
 * (csrc/http/h2/session.c, session_recv.c, hpack.c, huffman.c; no
 * engine), with libnghttp2 as the oracle (issue 31, point 5), on the
 * harness of tests/c/test_h2_oracle (h2sess_harness.h, which says what is
 * checked in each mode).
 *
 * Byte 0, bit 7 clear: raw mode. The rest of the input after byte 1 is
 * what a client sends, after the connection preface unless bit 0 says the
 * input holds its own; bits 1-2 pick our settings (CONF_RAW), bits 3-6 how
 * the answers go (bit 3: we reset streams 3 mod 5 when their head comes;
 * bit 4: begin refuses streams 5 mod 7; bit 5: the header callback
 * refuses a thirteenth field; bit 6: the data callback refuses a body
 * past 3000 bytes). Byte 1: bits 0-3 the most bytes the session is given
 * more each round (CHUNK; bytes come as the input says, whole frames
 * taken), bits 4-5 how much output a round takes before data_send says
 * BLOCKED (BATCH), bit 6 the body window handed back after recv returns,
 * not inside the data callback. The session must not crash or leak, and
 * every frame it writes must pass the harness's frame checker: types,
 * flags, lengths and streams a server may send, header blocks nghttp2's
 * inflater decodes to the lists the callbacks submitted, bodies in order
 * and within the client's windows, nothing after a stream's end or our
 * reset, nothing after a GOAWAY with an error code.
 *
 * Byte 0, bit 7 set: oracle mode, an exchange with an nghttp2 client.
 * Byte 0: bits 0-1 our stream window (65535, 1000, 16384, 1 MiB), bits
 * 2-3 our header table (4096, 0, 100, 65536), bit 4 the window handed
 * back after recv, bits 5-6 the client's initial window (its default, 7,
 * 1000, 65535). Byte 1: bits 0-3 and 4-7 the chunks each way (CHUNK).
 * Byte 2: bits 0-1 BATCH, bits 2-3 the client's first header table (its
 * default, 0, 100, 4096), bit 4 a GOAWAY NO_ERROR at the end. Then
 * actions, one byte each (and what they read), at most 40: 0-3 the client
 * submits a request (at most 16) generated from the bytes that follow
 * (op bit 3) or from a generator the next two seed, 4 a few
 * rounds of the exchange, 5 the client's SETTINGS_HEADER_TABLE_SIZE
 * changes, 6 a PING each way, 7 the next request is reset by the client
 * in the middle of a body. Then the exchange runs until idle and every
 * request and answer must have come whole, as test_h2_oracle requires.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2sess_harness.h"

static int failures;

static const size_t CHUNK[16] = {0, 1, 2, 3, 5, 8, 9, 13, 17, 64, 100, 1000, 4096, 16393, 0, 0};
static const size_t BATCH[4] = {0, 50, 2000, 17000};

static void fuzz_raw(const uint8_t *d, size_t n)
{
    static const sws_h2sess_conf_t CONF_RAW[4] = {
        {.max_streams = 100, .stream_window = 65535, .conn_window = 65535, .max_header_list = 1u << 16,
         .header_table = 4096, .max_continuations = 4},
        {.max_streams = 3, .stream_window = 1000, .conn_window = 1u << 20, .max_header_list = 1u << 16,
         .header_table = 0, .max_continuations = 2},
        {.max_streams = 100, .stream_window = 262144, .conn_window = 1u << 20,
         .max_header_list = 1u << 16, .header_table = 100, .max_continuations = 8},
        {.max_streams = 8, .stream_window = 16384, .conn_window = 65535, .max_header_list = 1u << 16,
         .header_table = 65536, .max_continuations = 4},
    };
    uint8_t f0 = n > 0 ? d[0] : 0, f1 = n > 1 ? d[1] : 0;
    size_t skip = n < 2 ? n : 2;
    hx_rng_t r = {.s = (uint64_t)f0 << 8 | f1};
    hx_t x;
    hx_init_raw(&x, &CONF_RAW[(f0 >> 1) & 3], &r, (uint8_t)(f0 & 0x78));
    x.c2s_chunk = CHUNK[f1 & 15];
    x.batch = BATCH[(f1 >> 4) & 3];
    x.consume_later = (f1 >> 6) & 1;
    hx_raw_feed(&x, d + skip, n - skip, !(f0 & 1));
    if (getenv("FUZZ_H2SESS_VERBOSE"))
        fprintf(stderr, "raw: %zu client bytes, %zu taken, %zu streams, %zu frames out, %d refusals\n",
                x.c2s.n, x.c2s_taken, x.nplans, x.o_frames, x.srv_errors);
    if (x.failures) {
        fprintf(stderr, "fuzz_h2sess raw: %d contract failures\n", x.failures);
        failures++;
#ifdef FUZZING
        __builtin_trap();
#endif
    }
    hx_free(&x);
}

static void fuzz_oracle(const uint8_t *d, size_t n)
{
    static const uint32_t SW[4] = {65535, 1000, 16384, 1u << 20};
    static const uint32_t TAB[4] = {4096, 0, 100, 65536};
    static const uint32_t CWIN[4] = {0, 7, 1000, 65535};
    static const uint32_t CTAB[4] = {0, 1, 101, 4097};
    static const uint32_t TABLES[5] = {0, 100, 4096, 1, 65536};
    static const size_t RS[] = {0, 1, 100, 16383, 16384, 16385, 40000};
    static const size_t SS[] = {0, 1, 100, 16383, 16384, 16385, 40000};
    static const size_t SS_SLOW[] = {0, 1, 100, 3000};
    uint8_t b0 = d[0], b1 = n > 1 ? d[1] : 0, b2 = n > 2 ? d[2] : 0;
    hx_rng_t r = {.p = d, .n = n, .i = n < 3 ? n : 3, .s = n};
    hx_rng_t cr = {.s = (uint64_t)b1 << 8 | b2}; /* chunk sizes: not the actions' bytes */
    sws_h2sess_conf_t conf = {.max_streams = 100, .stream_window = SW[b0 & 3],
                              .conn_window = b0 & 1 ? 65535 : 1u << 20, .max_header_list = 1u << 20,
                              .header_table = TAB[(b0 >> 2) & 3], .max_continuations = 16};
    uint32_t cwin = CWIN[(b0 >> 5) & 3];
    hx_t x;
    hx_init(&x, &conf, &cr, cwin, CTAB[(b2 >> 2) & 3]);
    x.c2s_chunk = CHUNK[b1 & 15];
    x.s2c_chunk = CHUNK[b1 >> 4];
    x.batch = BATCH[b2 & 3];
    x.consume_later = (b0 >> 4) & 1;
    int slow = cwin && cwin < 1000;
    hx_gen_t g = {RS, slow ? SS_SLOW : SS, sizeof RS / sizeof RS[0],
                  slow ? sizeof SS_SLOW / sizeof SS_SLOW[0] : sizeof SS / sizeof SS[0], 12, 6000};
    /* the client's first requests wait for our SETTINGS: a stream window
     * under 65535 is not ready for a body sent before them (a known bug,
     * test_h2_oracle's known case) */
    hx_pump(&x, 0);
    int reqs = 0, rst_next = 0;
    for (int a = 0; a < 40 && r.i < r.n; a++) {
        uint8_t op = hx_byte(&r);
        switch (op & 7) {
        case 0:
        case 1:
        case 2:
        case 3: {
            if (reqs == 16)
                break;
            /* op bit 3: generated from the input's bytes; else from a
             * generator seeded with the next two (many requests from a
             * short input) */
            uint64_t seed = (uint64_t)hx_byte(&r) << 8;
            hx_rng_t pr = {.s = seed | hx_byte(&r)};
            hx_plan_t *p = hx_plan_gen(op & 8 ? &r : &pr, &g);
            if (rst_next == 1 && p->slen > 1)
                p->rst_resp_at = (long)(p->slen * hx_below(&r, 8) / 8);
            if (rst_next == 2 && p->rlen > 1)
                p->rst_req_at = (long)(p->rlen * hx_below(&r, 8) / 8);
            rst_next = 0;
            hx_submit(&x, p);
            reqs++;
            break;
        }
        case 4:
            hx_pump(&x, 1 + (int)hx_below(&r, 16));
            break;
        case 5:
            hx_client_table(&x, TABLES[hx_below(&r, 5)]);
            break;
        case 6:
            hx_client_ping(&x);
            hx_server_ping(&x);
            break;
        case 7:
            rst_next = 1 + (op >> 7);
            break;
        }
    }
    hx_pump(&x, 0);
    if (b2 & 0x10) {
        x.expect_goaway = 1;
        sws_h2sess_goaway(&x.sv, H2_NO_ERROR);
        hx_pump(&x, 0);
    }
    hx_check(&x);
    if (getenv("FUZZ_H2SESS_VERBOSE")) {
        size_t rb = 0, sb = 0;
        for (size_t i = 0; i < x.nplans; i++)
            rb += x.plans[i]->s_got, sb += x.plans[i]->c_got;
        fprintf(stderr, "oracle: %zu streams, %zu request bytes, %zu response bytes\n", x.nplans, rb, sb);
    }
    if (x.failures) {
        fprintf(stderr, "fuzz_h2sess oracle: %d contract failures\n", x.failures);
        failures++;
#ifdef FUZZING
        __builtin_trap();
#endif
    }
    hx_free(&x);
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (size && (data[0] & 0x80))
        fuzz_oracle(data, size);
    else
        fuzz_raw(data, size);
}

#include "corpus_main.h"
