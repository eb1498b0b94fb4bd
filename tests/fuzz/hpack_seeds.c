/*
 * hpack_seeds.c — writes the seeds of tests/fuzz/corpus/hpack (fuzz_hpack.c's
 * input format): RFC 7541 Appendix C's blocks, the decoder's refusals,
 * blocks nghttp2's deflater makes of generated header lists (with table
 * size changes), and header lists for the encoder mode. From the
 * repository root:
 *
 *     cc -O1 -o /tmp/hpack_seeds tests/fuzz/hpack_seeds.c -lnghttp2 \
 *       && /tmp/hpack_seeds tests/fuzz/corpus/hpack
 *
 * The names (seed-*) stay apart from libFuzzer's (content hashes).
 */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;
static uint8_t seed[1 << 16];
static size_t sn;

static void start(uint8_t mode, uint8_t list)
{
    seed[0] = mode;
    seed[1] = list;
    sn = 2;
}

static void put(const void *p, size_t n)
{
    memcpy(seed + sn, p, n);
    sn += n;
}

static void block(const uint8_t *p, size_t n)
{
    if (n < 0xe0) {
        seed[sn++] = (uint8_t)n;
    } else {
        seed[sn++] = (uint8_t)(0xf0 | n >> 8);
        seed[sn++] = (uint8_t)n;
    }
    put(p, n);
}

static size_t unhex(const char *s, uint8_t *out)
{
    size_t n = 0;
    for (; *s; s++) {
        if (*s == ' ')
            continue;
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (uint8_t)v;
        s++;
    }
    return n;
}

static void hexblock(const char *hex)
{
    uint8_t b[1024];
    block(b, unhex(hex, b));
}

static void save(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seed, 1, sn, f) != sn) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static const char *C3[] = {
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"};
static const char *C4[] = {"8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                           "8286 84be 5886 a8eb 1064 9cbf",
                           "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"};
/* C.5 and C.6 behind a size update to 256 (Appendix C's SETTINGS value) */
static const char *C5[] = {
    "3fe101 4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133"
    "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63"
    "6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04"
    "677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49"
    "553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31"};
static const char *C6[] = {
    "3fe101 4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b"
    "ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7"
    "821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed"
    "4ee5 b106 3d50 07"};

static void appendix_c(void)
{
    const char **secs[] = {C3, C4, C5, C6};
    const char *names[] = {"c3", "c4", "c5", "c6"};
    for (int s = 0; s < 4; s++) {
        for (int lm = 0; lm < 3; lm++) { /* list_max: none, 300, 100 (TOO_BIG in the middle) */
            start(0, (uint8_t[]){0, 4, 3}[lm]);
            for (int b = 0; b < 3; b++)
                hexblock(secs[s][b]);
            char nm[32];
            snprintf(nm, sizeof nm, "%s-list%d", names[s], lm);
            save(nm);
        }
    }
    static const char *c2[] = {"400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
                               "040c 2f73 616d 706c 652f 7061 7468",
                               "1008 7061 7373 776f 7264 0673 6563 7265 74", "82"};
    start(0, 0);
    for (int i = 0; i < 4; i++)
        hexblock(c2[i]);
    save("c2");
}

/* The decoder's refusals and edges, one seed each (limit 4096 unless said). */
static void refusals(void)
{
    static const struct {
        const char *name, *hex;
        uint8_t mode;
    } r[] = {
        {"int-truncated", "ff 80", 0},
        {"int-overflow", "ff ff ff ff ff 0f", 0},
        {"int-six-bytes", "ff 80 80 80 80 80 00", 0},
        {"string-truncated", "40 05 61 62", 0},
        {"index-0", "80", 0},
        {"index-62-empty", "be", 0},
        {"name-index-62-empty", "7e 01 61", 0},
        {"update-over-limit", "3f e2 1f", 0},
        {"update-two-then-field", "20 3f e1 1f 82", 0},
        {"update-after-field", "82 20", 0},
        {"update-expected-missing", "82", 8},  /* limit 256 */
        {"update-expected-256", "3f e1 01 82", 8},
        {"update-expected-over", "3f e2 01 82", 8},
        {"huffman-padding-3", "00 01 78 81 1f", 0},
        {"huffman-padding-11", "00 01 78 82 1f ff", 0},
        {"huffman-padding-zeros", "00 01 78 81 18", 0},
        {"huffman-eos", "00 01 78 84 ff ff ff ff", 0},
        {"huffman-eos-after", "00 01 78 85 1f ff ff ff ff", 0},
        {"huffman-empty", "00 80 80", 0},
        {"huffman-padding-8", "00 81 ff 01 61", 0},
        {"huffman-padding-7", "00 81 fe 01 61", 0},
        {"never-indexed", "10 01 61 01 62 1f 28 01 63", 0},
        {"limit-0", "20 82 40 01 61 01 62", 1},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        start(r[i].mode, 0);
        hexblock(r[i].hex);
        hexblock("82 be"); /* a block after: refused after an error, else looks at the table */
        save(r[i].name);
    }
    /* list_max 100 met exactly (42 + 58), then passed by one byte */
    start(0, 3);
    hexblock("82 00 01 78 19 61616161616161616161616161616161616161616161616161");
    hexblock("82 00 01 78 1a 6161616161616161616161616161616161616161616161616161");
    save("list-max-exact");
    /* set_limit events between blocks: down to 100, up again, then updates */
    start(0, 0);
    hexblock("40 01 61 20 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 78 "
             "78 78 78 78 78 78 78");
    put("\xe7", 1); /* SIZES[7] = 100 */
    put("\xe0", 1); /* SIZES[0] = 4096 */
    hexblock("3f 45 3f e1 1f be");
    put("\xe8", 1);
    hexblock("3f e1 01 be");
    save("set-limit");
}

/* Rings that wrap: a table of 256 (and 100) bytes filled over and over by
 * literals with indexing, each then referenced, its name too. */
static void wraps(void)
{
    for (int k = 0; k < 3; k++) {
        start(k == 1 ? 7 : 8, k == 2 ? (uint8_t)(8 | 2 << 4) : 0); /* limit 256 or 100 */
        uint8_t b[1024];
        size_t n = 0;
        b[n++] = 0x3f; /* the update the limit requires: 100 (0x45) or 256 (0xe1 0x01) */
        if (k == 1) {
            b[n++] = 0x45;
        } else {
            b[n++] = 0xe1;
            b[n++] = 0x01;
        }
        for (int i = 0; i < 24; i++) {
            b[n++] = 0x40; /* new name "n<i>", value of 11 + i % 7 bytes */
            b[n++] = 2;
            b[n++] = 'n';
            b[n++] = (uint8_t)('a' + i);
            b[n++] = (uint8_t)(11 + i % 7);
            for (int j = 0; j < 11 + i % 7; j++)
                b[n++] = (uint8_t)('0' + (i + j) % 10);
            b[n++] = 0xbe;       /* the entry just added */
            b[n++] = 0x7e;       /* with indexing, the name of 62: it may be evicted by this */
            b[n++] = 0x01;
            b[n++] = 'v';
        }
        block(b, n);
        hexblock("be bf");
        char nm[32];
        snprintf(nm, sizeof nm, "wrap-%d", k);
        save(nm);
    }
}

/* nghttp2's deflater on generated lists, several blocks a seed, with
 * table size changes on both sides. */
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static const char *const NAMES[] = {":status", ":path", ":authority", "server", "content-type",
                                    "content-length", "date", "set-cookie", "cookie",
                                    "x-request-id", "etag", "user-agent", "accept", "x-a"};

static size_t gen(nghttp2_nv *nv, uint8_t *arena)
{
    size_t n = 1 + rnd() % 8, used = 0;
    for (size_t i = 0; i < n; i++) {
        const char *nm = NAMES[rnd() % (sizeof NAMES / sizeof *NAMES)];
        uint8_t *v = arena + used;
        size_t vl = rnd() % 3 == 0 ? (size_t)snprintf((char *)v, 32, "v%u", (unsigned)(rnd() % 4))
                                   : rnd() % 40;
        if (vl > 6 || v[0] != 'v')
            for (size_t j = 0; j < vl; j++)
                v[j] = (uint8_t)(rnd() % 4 ? 'a' + rnd() % 26 : rnd());
        used += vl;
        nv[i] = (nghttp2_nv){(uint8_t *)nm, v, strlen(nm), vl,
                             rnd() % 7 == 0 ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE};
    }
    return n;
}

static void deflated(void)
{
    static const uint8_t sizes_idx[] = {0, 7, 8, 9, 10, 1}; /* 4096 100 256 1000 2048 0 */
    static const uint32_t sizes[] = {4096, 100, 256, 1000, 2048, 0};
    for (int s = 0; s < 24; s++) {
        nghttp2_hd_deflater *def;
        nghttp2_hd_deflate_new(&def, 4096);
        start(0, s % 3 == 2 ? 5 : 0);
        for (int b = 0; b < 2 + s % 5; b++) {
            if (rnd() % 4 == 0) {
                int k = (int)(rnd() % 6);
                nghttp2_hd_deflate_change_table_size(def, sizes[k]);
                seed[sn++] = (uint8_t)(0xe0 | sizes_idx[k]);
            }
            nghttp2_nv nv[8];
            static uint8_t arena[512], out[4096];
            size_t n = gen(nv, arena);
            ssize_t len = nghttp2_hd_deflate_hd(def, out, sizeof out, nv, n);
            if (len < 0)
                exit(1);
            block(out, (size_t)len);
        }
        nghttp2_hd_deflate_del(def);
        char nm[32];
        snprintf(nm, sizeof nm, "deflated-%02d", s);
        save(nm);
    }
}

/* Encoder mode: answers on one connection, some with a peer size change. */
static void encoder(void)
{
    for (int s = 0; s < 12; s++) {
        /* peer 4096, or 256; our cap 4096, or 100, 256, 1000 */
        start((uint8_t)(0x80 | (s % 3 == 1 ? 8 : 0)), (uint8_t[]){0, 7, 8, 9}[s % 4]);
        for (int b = 0; b < 3 + s % 4; b++) {
            if (b && rnd() % 4 == 0) /* one or two peer size changes between blocks */
                for (int c = 1 + (int)(rnd() % 2); c; c--)
                    seed[sn++] = (uint8_t)(0x80 | (rnd() % 16));
            size_t n = 1 + rnd() % 7;
            for (size_t i = 0; i < n; i++) {
                uint8_t ctl = (uint8_t)(0x20 | (i == 0 ? 0x40 : 0) | (rnd() % 9 == 0));
                seed[sn++] = ctl;
                seed[sn++] = (uint8_t)(rnd() % 32);
                const char *vals[] = {"200", "scalws", "text/html", "1234", "Mon, 21 Oct 2013",
                                      "a=b", "4bf92f3577b34da6", "\"etag\"", "/index.html", ""};
                const char *v = vals[rnd() % 10];
                seed[sn++] = (uint8_t)strlen(v);
                put(v, strlen(v));
            }
        }
        /* a literal name of any bytes */
        put("\x00\x03X\xffy\x02\x00\x01", 8);
        char nm[32];
        snprintf(nm, sizeof nm, "encoder-%02d", s);
        save(nm);
    }
}

/* Encoder mode: the answers of one route on a connection, the same list
 * again and again with a field changed now and then (a new date, another
 * length, a request id), through the positions' memo (hpack.h): ctl bit 1
 * copies the previous block's field, bit 4 with bit 6 sends a block twice. */
static void repeats(void)
{
    static const uint8_t names[] = {0, 5, 8, 6, 7, 18, 15, 22}; /* NAMES[] of fuzz_hpack.c */
    static const char *const vals[] = {"200", "scalws", "Sun, 06 Dec 2026 07:15:05 GMT",
                                       "text/html", "1024", "Sat, 05 Dec 2026 10:00:00 GMT",
                                       "\"65f2a1-400\"", "bytes"};
    for (int s = 0; s < 6; s++) {
        /* peer 4096 or 256; our cap 4096, 100, 256 */
        start((uint8_t)(0x80 | (s % 2 ? 8 : 0)), (uint8_t[]){0, 7, 8}[s % 3]);
        for (int b = 0; b < 6 + s; b++) {
            if (b && s >= 4 && rnd() % 3 == 0) /* a peer size change between blocks */
                seed[sn++] = (uint8_t)(0x80 | (rnd() % 16));
            for (size_t i = 0; i < 8; i++) {
                uint8_t first = i == 0 ? 0x40 | (rnd() % 3 == 0 ? 0x10 : 0) : 0;
                if (b && rnd() % 4) { /* as before */
                    seed[sn++] = (uint8_t)(first | 2);
                    continue;
                }
                seed[sn++] = (uint8_t)(first | 0x20 | (s == 3 && i == 2)); /* s 3: a never-indexed date */
                if (i == 4 && rnd() % 2) { /* a request id in place of the length */
                    seed[sn++] = 13;
                    put("\x10", 1);
                    put("4bf92f3577b34da6", 16);
                    continue;
                }
                seed[sn++] = names[i];
                char v[40];
                snprintf(v, sizeof v, "%s", vals[i]);
                if (i == 2 || i == 4) /* another second, another length */
                    v[i == 2 ? 23 : 0] = (char)('1' + rnd() % 8);
                seed[sn++] = (uint8_t)strlen(v);
                put(v, strlen(v));
            }
        }
        seed[sn++] = 0x50; /* the last block twice */
        put("\x20\x00\x03" "200", 6);
        char nm[32];
        snprintf(nm, sizeof nm, "repeats-%02d", s);
        save(nm);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    appendix_c();
    refusals();
    wraps();
    deflated();
    encoder();
    repeats();
    return 0;
}
