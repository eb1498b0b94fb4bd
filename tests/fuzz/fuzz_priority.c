/*
 * fuzz_priority.c — fuzz driver for csrc/http/priority.c (RFC 9218's
 * Priority field). Besides the sanitizers (each input sits in a block of
 * exactly its size, so a read past it is caught) it checks the contract of
 * scalws/priority.h:
 *  - the result is -1 or a subset of SWS_PRI_U | SWS_PRI_I;
 *  - -1 stores nothing; a parameter not given is left alone; a given urgency
 *    is in 0..7 and a given incremental is 0 or 1;
 *  - a valid, non-empty Dictionary followed by ", u=7" is still valid and
 *    ends with urgency 7 (a key given twice counts with its last value,
 *    RFC 8941 §3.2), keeping what it said about `i`.
 *
 * With -DFUZZING it is a libFuzzer target; without, main() runs every file
 * of a corpus directory through it (tests/c/Makefile runs it under ASan).
 */
#include "scalws/priority.h"

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

enum { UNSET = 99 };

static void fuzz_one(const uint8_t *data, size_t size)
{
    char *v = malloc(size ? size : 1);
    if (!v)
        return;
    memcpy(v, data, size);
    int u = UNSET, i = UNSET;
    int got = sws_parse_priority(v, size, &u, &i);
    if (got < -1 || got > (SWS_PRI_U | SWS_PRI_I))
        FAIL("result out of range");
    if (got == -1 && (u != UNSET || i != UNSET))
        FAIL("an invalid field stored a parameter");
    if (got >= 0 && !(got & SWS_PRI_U) && u != UNSET)
        FAIL("urgency stored though not given");
    if (got >= 0 && !(got & SWS_PRI_I) && i != UNSET)
        FAIL("incremental stored though not given");
    if (got > 0 && (got & SWS_PRI_U) && (u < 0 || u > 7))
        FAIL("urgency out of 0..7");
    if (got > 0 && (got & SWS_PRI_I) && i != 0 && i != 1)
        FAIL("incremental not a boolean");

    /* Appending a member: only for a valid field with a member and no
     * trailing whitespace (where RFC 8941 leaves the joint to the parser). */
    size_t lead = 0;
    while (lead < size && v[lead] == ' ')
        lead++;
    if (got >= 0 && lead < size && v[size - 1] != ' ' && v[size - 1] != '\t') {
        size_t n = size + 5;
        char *w = malloc(n);
        if (w) {
            memcpy(w, v, size);
            memcpy(w + size, ", u=7", 5);
            int u2 = UNSET, i2 = UNSET;
            int got2 = sws_parse_priority(w, n, &u2, &i2);
            if (got2 < 0 || !(got2 & SWS_PRI_U) || u2 != 7)
                FAIL("a valid field followed by \", u=7\" does not end at urgency 7");
            else if ((got2 & SWS_PRI_I) != (got & SWS_PRI_I) || ((got & SWS_PRI_I) && i2 != i))
                FAIL("appending u=7 changed what the field said about i");
            free(w);
        }
    }
    free(v);
}

#include "corpus_main.h"
