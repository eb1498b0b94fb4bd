/*
 * fuzz_vary.c — fuzz driver for vary_value (csrc/handlers/cache_key.c): the
 * request's value of a field a cached response varies on, normalised as
 * RFC 9111 §4.1 lets a cache compare it. Besides the sanitizers it checks:
 *  - the result fits the buffer (or is -2), and -1 only when the field is
 *    absent; a 16-byte buffer gives the same result or -2;
 *  - it is a fixed point: the result sent again as one field line gives
 *    itself (a line with a quoted string that does not end is no list: its
 *    value is compared as it came, and only the first check applies);
 *  - outside quoted strings, no whitespace next to a comma, no empty member,
 *    and no upper-case letter in a case-insensitive field's value;
 *  - cutting a line at a comma outside quotes into two lines changes
 *    nothing (several lines are one list).
 * The input's first byte picks the field (three with case-insensitive
 * values, accept and user-agent); the rest, cut at '\n', is up to 4 field
 * lines of it, with an unrelated field between them.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/cache_int.h"

static int failures;

#ifdef FUZZING
#define FAIL(msg) __builtin_trap()
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

static const struct { const char *name; int lower; } FIELDS[] = {
    {"accept", 0}, {"accept-encoding", 1}, {"accept-language", 1}, {"accept-charset", 1},
    {"user-agent", 0}};
#define NF (sizeof FIELDS / sizeof FIELDS[0])

static ssize_t value_of(const char *name, const char *const *v, const size_t *vl, size_t n, char *out,
                        size_t cap)
{
    sws_header_t h[9];
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        h[nh++] = (sws_header_t){.name = name, .name_len = strlen(name), .value = v[i],
                                 .value_len = vl[i]};
        h[nh++] = (sws_header_t){.name = "host", .name_len = 4, .value = "x", .value_len = 1};
    }
    sws_request_t r;
    memset(&r, 0, sizeof r);
    r.h = h;
    r.nh = nh;
    return vary_value(&r, name, strlen(name), out, cap);
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    size_t f = data[0] % NF;
    const char *name = FIELDS[f].name;
    int list = 1;
    const char *v[4];
    size_t vl[4], n = 0;
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p <= end && n < 4) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        v[n] = p, vl[n] = (size_t)(e - p), n++;
        if (!nl)
            break;
        p = nl + 1;
    }
    char out[VARY_MAX], again[VARY_MAX], small[16];
    ssize_t got = value_of(name, v, vl, n, out, sizeof out);
    if (got < -2 || got == -1 || got > (ssize_t)sizeof out)
        FAIL("length out of range");
    /* A small buffer: the same answer, or -2 (a member's trailing blanks
     * count until they are dropped, so -2 may come a little early). */
    ssize_t sm = value_of(name, v, vl, n, small, sizeof small);
    if (sm < -2 || sm == -1 || sm > (ssize_t)sizeof small ||
        (sm >= 0 && (sm != got || memcmp(small, out, (size_t)sm))))
        FAIL("a small buffer gives another answer");
    if (got < 0)
        return;
    /* A line with a quoted string that does not end: the value as it came. */
    for (size_t i = 0; list && i < n; i++) {
        int q = 0;
        for (size_t k = 0; k < vl[i]; k++)
            if (v[i][k] == '"' && (k == 0 || v[i][k - 1] != '\\'))
                q = !q;
        if (q)
            list = 0;
    }
    const char *one[1] = {out};
    size_t onel[1] = {(size_t)got};
    ssize_t fix = value_of(name, one, onel, 1, again, sizeof again);
    if (list && (fix != got || memcmp(again, out, (size_t)got)))
        FAIL("not a fixed point");
    if (!list)
        return;
    int quoted = 0;
    for (ssize_t i = 0; i < got; i++) {
        char ch = out[i];
        if (ch == '"' && (i == 0 || out[i - 1] != '\\'))
            quoted = !quoted;
        if (quoted || ch == '"')
            continue;
        if (ch == ',' && (i == 0 || i == got - 1 || out[i + 1] == ',' || out[i + 1] == ' ' ||
                          out[i + 1] == '\t' || out[i - 1] == ' ' || out[i - 1] == '\t'))
            FAIL("whitespace or an empty member at a comma");
        if (FIELDS[f].lower && ch >= 'A' && ch <= 'Z')
            FAIL("upper case in a case-insensitive value");
    }
    /* The first line cut at its first comma outside quotes: the same list. */
    if (n < 4 && vl[0]) {
        int q = 0;
        for (size_t i = 0; i < vl[0]; i++) {
            if (v[0][i] == '"' && (i == 0 || v[0][i - 1] != '\\'))
                q = !q;
            if (!q && v[0][i] == ',') {
                const char *v2[5] = {v[0], v[0] + i + 1};
                size_t vl2[5] = {i, vl[0] - i - 1};
                for (size_t k = 1; k < n; k++)
                    v2[k + 1] = v[k], vl2[k + 1] = vl[k];
                ssize_t cut = value_of(name, v2, vl2, n + 1, again, sizeof again);
                if (cut != got || memcmp(again, out, (size_t)got))
                    FAIL("a line cut at a comma gives another list");
                break;
            }
        }
    }
}

#include "corpus_main.h"
