/*
 * fuzz_sni.c — fuzz driver for csrc/net/sni.c: every input is taken as the
 * body of a ClientHello's server_name extension. Besides the sanitizers it
 * checks the contract of scalws/sni.h: a name comes out only when the list
 * length is exact; it is 1 to SWS_SNI_MAX bytes, NUL-terminated, lowercase,
 * of letters, digits, '-', '_' and dots between non-empty labels, and it is
 * the (lowercased) bytes of a host_name entry of the input.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include "scalws/sni.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#ifdef FUZZING
#define FAIL(msg) __builtin_trap()
#else
#define FAIL(msg) (fprintf(stderr, "contract broken: %s\n", msg), ++failures)
#endif

static int found_in(const uint8_t *data, size_t size, const char *name, size_t n)
{
    for (size_t i = 0; i + n <= size; i++) {
        size_t k = 0;
        while (k < n && tolower(data[i + k]) == name[k])
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    char out[SWS_SNI_MAX + 1];
    memset(out, 'X', sizeof out);
    int n = sws_sni_name(data, size, out);
    if (n < 0)
        return;
    if (n == 0 || n > SWS_SNI_MAX)
        FAIL("length out of range");
    if (size < 2 || ((size_t)data[0] << 8 | data[1]) != size - 2)
        FAIL("a name from a list of the wrong length");
    if (out[n] != 0 || strlen(out) != (size_t)n)
        FAIL("not NUL-terminated at its length");
    if (out[0] == '.' || out[n - 1] == '.' || strstr(out, ".."))
        FAIL("an empty label");
    for (int i = 0; i < n; i++) {
        char c = out[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            FAIL("a character outside the DNS set");
    }
    if (!found_in(data, size, out, (size_t)n))
        FAIL("the name is not in the input");
}

#include "corpus_main.h"
