/*
 * qpack_seeds.c — writes the seeds of tests/fuzz/corpus/qpack (fuzz_qpack.c's
 * input format): RFC 9204 Appendix B's exchange, connections of nghttp3's
 * encoder (its encoder stream cut into records, sections before and after
 * their inserts) at several table capacities, and field lists with client
 * decoder streams for the encoder mode. From the repository root:
 *
 *     cc -O1 -o /tmp/qpack_seeds tests/fuzz/qpack_seeds.c -lnghttp3 \
 *       && /tmp/qpack_seeds tests/fuzz/corpus/qpack
 *
 * The names (seed-*) stay apart from libFuzzer's (content hashes).
 */
#include <nghttp3/nghttp3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;
static uint8_t seed[1 << 16];
static size_t sn;
static int count;

static void put(const void *p, size_t n)
{
    memcpy(seed + sn, p, n);
    sn += n;
}

/* A record of fuzz_qpack's decoder mode; longer encoder bytes are cut. */
static void rec(uint8_t ctl, const uint8_t *p, size_t n)
{
    do {
        size_t k = n > 255 ? 255 : n;
        seed[sn++] = ctl;
        seed[sn++] = (uint8_t)k;
        put(p, k);
        p += k;
        n -= k;
    } while (n && (ctl & 3) == 0);
}

static void save(const char *what)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%03d-%s", dir, count++, what);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seed, 1, sn, f) != sn) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static size_t unhex(const char *h, uint8_t *out)
{
    size_t n = 0;
    for (; *h; h++) {
        if (*h == ' ')
            continue;
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (uint8_t)v;
        h++;
    }
    return n;
}

static void rec_hex(uint8_t ctl, const char *hex)
{
    uint8_t b[256];
    rec(ctl, b, unhex(hex, b));
}

static uint64_t rng = 88172645463325252u;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static const char *NAMES[] = {":method", ":path", ":authority", ":scheme", "user-agent", "accept",
                              "cookie", "accept-encoding", "x-thing", "referer"};
static const char *VALUES[] = {"GET", "/", "/index.html", "www.example.com", "https", "curl/8",
                               "*/*", "sid=123456", "gzip, deflate, br", "a longer value, repeated"};

/* fuzz_qpack's SIZES, by index */
static const uint32_t SIZES[16] = {4096, 0, 1, 31, 32, 33, 64, 100, 220, 256, 1000, 2048, 4095, 8192, 16384, 65536};

static void nghttp3_connection(uint8_t size_idx, int lists)
{
    const nghttp3_mem *mem = nghttp3_mem_default();
    nghttp3_qpack_encoder *enc;
    nghttp3_qpack_encoder_new(&enc, SIZES[size_idx], mem);
    nghttp3_qpack_encoder_set_max_dtable_capacity(enc, SIZES[size_idx]);
    nghttp3_qpack_encoder_set_max_blocked_streams(enc, 100);
    sn = 0;
    seed[sn++] = size_idx;
    for (int i = 0; i < lists; i++) {
        nghttp3_nv nva[8];
        size_t n = 1 + rnd(8);
        for (size_t k = 0; k < n; k++) {
            const char *nm = NAMES[rnd(10)], *v = VALUES[rnd(10)];
            nva[k] = (nghttp3_nv){(uint8_t *)nm, (uint8_t *)v, strlen(nm), strlen(v),
                                  rnd(8) ? 0 : NGHTTP3_NV_FLAG_NEVER_INDEX};
        }
        nghttp3_buf pb, rb, eb;
        nghttp3_buf_init(&pb), nghttp3_buf_init(&rb), nghttp3_buf_init(&eb);
        int64_t sid = 4 * (i % 64);
        if (nghttp3_qpack_encoder_encode(enc, &pb, &rb, &eb, sid, nva, n) != 0)
            abort();
        uint8_t sec[512];
        size_t sl = nghttp3_buf_len(&pb) + nghttp3_buf_len(&rb);
        if (sl <= 255) {
            memcpy(sec, pb.pos, nghttp3_buf_len(&pb));
            memcpy(sec + nghttp3_buf_len(&pb), rb.pos, nghttp3_buf_len(&rb));
        }
        int early = rnd(2);
        if (early && sl <= 255)
            rec((uint8_t)(1 | (sid / 4) << 2), sec, sl);
        rec(0, eb.pos, nghttp3_buf_len(&eb));
        if (early)
            rec(2, NULL, 0);
        else if (sl <= 255)
            rec((uint8_t)(1 | (sid / 4) << 2), sec, sl);
        if (rnd(3) == 0)
            rec(3, NULL, 0);
        /* everything received: acknowledge as a decoder would */
        nghttp3_qpack_encoder_ack_everything(enc);
        nghttp3_buf_free(&pb, mem), nghttp3_buf_free(&rb, mem), nghttp3_buf_free(&eb, mem);
    }
    nghttp3_qpack_encoder_del(enc);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    /* RFC 9204 Appendix B, capacity 220 (SIZES[8]) */
    sn = 0;
    seed[sn++] = 8;
    rec_hex(1, "0000 510b 2f69 6e64 6578 2e68 746d 6c");
    rec_hex(1 | 1 << 2, "0381 10 11");
    rec_hex(0, "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468");
    rec_hex(2, "");
    rec_hex(3, "");
    rec_hex(0, "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565");
    rec_hex(0, "02");
    rec_hex(1 | 2 << 2, "0500 80 c1 81");
    rec_hex(0, "810d 6375 7374 6f6d 2d76 616c 7565 32");
    rec_hex(1 | 3 << 2, "0600 80 83");
    rec_hex(1 | 4 << 2, "0600 84");
    save("appendix-b");
    /* refusals, one per seed */
    static const char *bad_enc[] = {"3fbe01", "3f01 c000", "3fbd01 ff24 00", "3fbd01 8000",
                                    "3fbd01 00", "3fbd01 c081 ff", "3fbd01 c081 00", "5fe2 01",
                                    "3fbd01 c0"};
    for (size_t i = 0; i < sizeof bad_enc / sizeof *bad_enc; i++) {
        sn = 0;
        seed[sn++] = 8;
        rec_hex(0, bad_enc[i]);
        save("bad-encoder");
    }
    static const char *bad_sec[] = {"", "00", "0d00", "0080", "0000 5f", "0000 5185 ffff ffff ff",
                                    "0000 2ffa 01", "0300 c0", "0000 ff24"};
    for (size_t i = 0; i < sizeof bad_sec / sizeof *bad_sec; i++) {
        sn = 0;
        seed[sn++] = 8;
        rec_hex(0, "3fbd01 c000");
        rec_hex(1, bad_sec[i]);
        save("bad-section");
    }
    /* nghttp3's encoder at capacities that evict, and at none */
    static const uint8_t caps[] = {0, 1, 7, 8, 9, 10, 13, 15};
    for (size_t i = 0; i < sizeof caps; i++)
        for (int k = 0; k < 3; k++) {
            nghttp3_connection(caps[i], 6 + 10 * k);
            save("nghttp3");
        }
    /* the encoder mode: lists, then a decoder stream */
    static const char *dstream[] = {"", "48", "7f81 01", "84", "01", "00", "40 41 42"};
    for (size_t i = 0; i < sizeof dstream / sizeof *dstream; i++) {
        sn = 0;
        seed[sn++] = 0x80;
        for (int k = 0; k < 6; k++) {
            int named = rnd(2);
            seed[sn++] = (uint8_t)(rnd(2) | named << 1);
            if (named) {
                seed[sn++] = (uint8_t)rnd(8);
            } else {
                const char *nm = NAMES[rnd(10)];
                seed[sn++] = (uint8_t)strlen(nm);
                put(nm, strlen(nm));
            }
            const char *v = VALUES[rnd(10)];
            seed[sn++] = (uint8_t)strlen(v);
            put(v, strlen(v));
        }
        seed[sn++] = 4;
        uint8_t b[64];
        put(b, unhex(dstream[i], b));
        save("encoder");
    }
    printf("%d seeds in %s\n", count, dir);
    return 0;
}
