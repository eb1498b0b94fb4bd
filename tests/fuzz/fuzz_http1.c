/*
 * fuzz_http1.c — fuzz driver for csrc/http/http1.c and http1_chunked.c:
 * every input goes through sws_parse_request (whole and grown with
 * last_len), sws_analyze_request on an accepted head, the connection's
 * decision on a head as it grows (sws_check_request_head), the same for
 * sws_parse_response / sws_analyze_response, and sws_decode_chunked (whole
 * and in two pieces) and sws_skip_chunked.
 * Besides the sanitizers it checks the contracts in scalws/http1.h: results
 * lie inside the input, the grown parse agrees with the whole one, a head
 * gets the same answer however it is split into reads (and an early one is
 * the answer of the whole), split chunked decoding agrees with whole
 * decoding, and skipping with decoding.
 *
 * With -DFUZZING it is a libFuzzer target (clang -fsanitize=fuzzer,address);
 * without, main() runs every file of a corpus directory through it and prints
 * "N passed, M failed" (tests/c/Makefile runs it that way under ASan).
 */
#include "scalws/http1.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXH 32

static int failures;

#ifdef FUZZING
#define FAIL(msg) __builtin_trap()
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

static void fuzz_parse(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data, *m = NULL, *t = NULL;
    size_t ml, tl, nh = MAXH;
    int minor;
    sws_header_t h[MAXH];
    int rc = sws_parse_request(buf, size, &m, &ml, &t, &tl, &minor, h, &nh, 0);

    if (rc > 0) {
        sws_request_info_t info;
        if ((size_t)rc > size || nh > MAXH || m < buf || m + ml > buf + rc || t < buf || t + tl > buf + rc ||
            minor < 0 || minor > 9)
            FAIL("parse result outside the input");
        for (size_t i = 0; i < nh; ++i)
            if (h[i].name < buf || h[i].name + h[i].name_len > buf + rc || h[i].value < buf ||
                h[i].value + h[i].value_len > buf + rc || h[i].name_len == 0)
                FAIL("header outside the head");
        int st = sws_analyze_request(m, ml, minor, h, nh, &info);
        if (st != 0 && st != 400 && st != 417 && st != 501)
            FAIL("analyze status");
        if (info.has_host && (info.host < buf || info.host + info.host_len > buf + rc))
            FAIL("host outside the head");
    } else if (rc < SWS_PARSE_TOO_MANY_HEADERS) {
        FAIL("parse return code");
    }

    /* Grown in 7-byte steps with last_len: must end where the whole parse
     * did, or stay incomplete only for an error without an end of head. */
    {
        size_t last = 0, k = 0, nh2;
        int rc2;
        for (;;) {
            k = size - k > 7 ? k + 7 : size;
            nh2 = MAXH;
            rc2 = sws_parse_request(buf, k, &m, &ml, &t, &tl, &minor, h, &nh2, last);
            if (rc2 != SWS_PARSE_INCOMPLETE || k == size)
                break;
            last = k;
        }
        if (rc2 != rc && !(rc2 == SWS_PARSE_INCOMPLETE && rc < 0))
            FAIL("grown parse disagrees with whole parse");
    }
}

#define WAIT 0
#define ACCEPTED 1

/* What the connection answers after a read that left buf[0..len) of a head
 * (csrc/http/h1.c's conn_process; tests/c/test_http1_head.c has the same):
 * WAIT, ACCEPTED (a complete head the analysis takes), or a status. */
static int decide(sws_head_check_t *s, const char *buf, size_t len, size_t last_len)
{
    static const sws_head_limits_t lim = {.max_head = 512, .max_target = 128, .max_fields = 8};
    sws_header_t h[8];
    size_t nh = lim.max_fields, ml, tl;
    const char *m, *t;
    int minor;
    size_t plen = len < lim.max_head ? len : lim.max_head;
    int rc = sws_parse_request(buf, plen, &m, &ml, &t, &tl, &minor, h, &nh,
                               len > lim.max_head ? 0 : last_len);
    if (rc < 0) {
        int st = sws_check_request_head(s, buf, len, last_len, rc, &lim);
        if (st != 0 && st != 400 && st != 414 && st != 431 && st != 505)
            FAIL("check_request_head status");
        return st;
    }
    if (tl > lim.max_target)
        return 414;
    sws_request_info_t info;
    int st = sws_analyze_request(m, ml, minor, h, nh, &info);
    return st ? st : ACCEPTED;
}

/* A head read whole, read in steps taken from the input (a client's
 * segments), and as a first read of some bytes then the rest: the first
 * answer of each must be the whole's. A fault inside a line that has not
 * ended may be seen only at the header timeout, which parses what is there
 * once more (h1.c, stalled_head_fault): then that answer. */
static void fuzz_head(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    sws_head_check_t s = {0};
    int whole = decide(&s, buf, size, 0), got = WAIT;
    size_t step = 1 + (size ? data[size - 1] % 23 : 0), last = 0;

    memset(&s, 0, sizeof s);
    for (size_t k = step < size ? step : size; got == WAIT; k = size - k > step ? k + step : size) {
        got = decide(&s, buf, k, last);
        last = k;
        if (k == size)
            break;
    }
    if (got == WAIT)
        got = decide(&s, buf, size, 0); /* the header timeout */
    if (got != whole)
        FAIL("a head grown in steps is answered otherwise than whole");

    size_t cut = size ? (size_t)data[0] * size / 256 : 0;
    memset(&s, 0, sizeof s);
    got = cut ? decide(&s, buf, cut, 0) : WAIT;
    if (got == WAIT)
        got = decide(&s, buf, size, cut);
    if (got == WAIT)
        got = decide(&s, buf, size, 0); /* the header timeout */
    if (got != whole)
        FAIL("a head read in two pieces is answered otherwise than whole");
}

static void fuzz_response(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data, *reason = NULL;
    size_t rl, nh = MAXH;
    int minor, status;
    sws_header_t h[MAXH];
    int rc = sws_parse_response(buf, size, &minor, &status, &reason, &rl, h, &nh, 0);

    if (rc > 0) {
        static const int methods[] = {SWS_M_GET, SWS_M_HEAD, SWS_M_CONNECT};
        if ((size_t)rc > size || nh > MAXH || reason < buf || reason + rl > buf + rc || minor < 0 ||
            minor > 1 || status < 100 || status > 599)
            FAIL("response result outside the input");
        for (size_t i = 0; i < nh; ++i)
            if (h[i].name < buf || h[i].name + h[i].name_len > buf + rc || h[i].value < buf ||
                h[i].value + h[i].value_len > buf + rc || h[i].name_len == 0)
                FAIL("response header outside the head");
        for (int m = 0; m < 3; ++m) {
            sws_response_info_t info;
            int st = sws_analyze_response(methods[m], minor, status, h, nh, &info);
            if ((st != 0 && st != -1) || info.chunked + info.close_delimited + info.no_body > 1 ||
                (info.close_delimited && info.keepalive) || (st != 0 && info.keepalive))
                FAIL("analyze_response result");
        }
    } else if (rc < SWS_PARSE_TOO_MANY_HEADERS || rc == SWS_PARSE_VERSION) {
        FAIL("response return code");
    }

    /* grown in 5-byte steps with last_len, as for requests */
    {
        size_t last = 0, k = 0, nh2;
        int rc2;
        for (;;) {
            k = size - k > 5 ? k + 5 : size;
            nh2 = MAXH;
            rc2 = sws_parse_response(buf, k, &minor, &status, &reason, &rl, h, &nh2, last);
            if (rc2 != SWS_PARSE_INCOMPLETE || k == size)
                break;
            last = k;
        }
        if (rc2 != rc && !(rc2 == SWS_PARSE_INCOMPLETE && rc < 0))
            FAIL("grown response parse disagrees with whole parse");
    }
}

static void fuzz_chunked(const uint8_t *data, size_t size)
{
    char *whole = malloc(size + 1), *split = malloc(size + 1);
    sws_chunked_decoder_t d1 = {0}, d2 = {0};
    size_t sz1 = size, cut = size ? data[0] % (size + 1) : 0, sz2a = cut, sz2b = size - cut;
    ssize_t r1, r2;

    memcpy(whole, data, size);
    memcpy(split, data, size);
    r1 = sws_decode_chunked(&d1, whole, &sz1);
    if (sz1 > size || (r1 >= 0 && sz1 + (size_t)r1 > size) || d1.total < sz1)
        FAIL("chunked result outside the input");

    r2 = sws_decode_chunked(&d2, split, &sz2a);
    if (r2 == SWS_PARSE_INCOMPLETE) {
        /* second piece decoded on its own, appended after the first's output */
        memmove(split + sz2a, split + cut, sz2b);
        r2 = sws_decode_chunked(&d2, split + sz2a, &sz2b);
        sz2a += sz2b;
        /* the bytes after the body now follow the decoded body in both */
        if (r2 >= 0 && r1 == r2 && memcmp(whole + sz1, split + sz2a, (size_t)r2) != 0)
            FAIL("split chunked decoding leaves different bytes after the body");
    } else if (r2 >= 0) {
        r2 += (ssize_t)(size - cut); /* the unfed second piece also follows the body */
    }
    if (r1 != r2 || (r1 != SWS_PARSE_ERROR && (sz1 != sz2a || memcmp(whole, split, sz1) != 0)))
        FAIL("split chunked decoding disagrees with whole");

    /* skipped (it only reads: data is libFuzzer's, read-only to us), in
     * the same two pieces */
    {
        sws_chunked_decoder_t d3 = {0};
        ssize_t r3 = sws_skip_chunked(&d3, (const char *)data, cut);
        if (r3 == SWS_PARSE_INCOMPLETE)
            r3 = sws_skip_chunked(&d3, (const char *)data + cut, size - cut);
        else if (r3 >= 0)
            r3 += (ssize_t)(size - cut);
        if (r3 != r1 || (r1 != SWS_PARSE_ERROR && d3.total != d1.total))
            FAIL("skipping a chunked body disagrees with decoding it");
    }
    free(whole);
    free(split);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_parse(data, size);
    fuzz_head(data, size);
    fuzz_response(data, size);
    fuzz_chunked(data, size);
    return 0;
}

#ifndef FUZZING
/* Runs every regular file of argv[1] (default tests/fuzz/corpus/http1)
 * through the target, each in a malloc block of its exact size so ASan
 * catches an over-read. */
int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "tests/fuzz/corpus/http1";
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
        /* exact-size copy: malloc(n) with n > 0 so ASan's redzone follows it */
        {
            uint8_t *exact = malloc(n > 0 ? (size_t)n : 1);
            memcpy(exact, data, (size_t)n);
            int before = failures;
            LLVMFuzzerTestOneInput(exact, (size_t)n);
            if (failures != before) {
                fprintf(stderr, "FAIL %s\n", path);
                ++failed;
            } else {
                ++passed;
            }
            free(exact);
        }
        free(data);
    }
    closedir(dp);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0 || passed == 0;
}
#endif
