/*
 * guard.h — test helpers: place an input so its last byte is the last byte
 * before a PROT_NONE page, so reading one byte past it faults (the method of
 * picohttpparser's tests), and a minimal pass/fail counter.
 *
 * One guard area per process, reused by every call: a pointer returned by
 * guard_place() is valid until the next call. Inputs up to GUARD_MAX bytes.
 */
#ifndef SCALWS_TEST_GUARD_H
#define SCALWS_TEST_GUARD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD_MAX (1u << 20)

static char *guard_end_; /* first byte of the PROT_NONE page */

/* Copies s[0..len) to end just before the guard page; returns where it starts. */
__attribute__((unused)) static char *guard_place(const void *s, size_t len)
{
    if (guard_end_ == NULL) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t data = (GUARD_MAX + page - 1) / page * page;
        char *base = mmap(NULL, data + page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED || mprotect(base + data, page, PROT_NONE) != 0) {
            perror("guard mmap");
            exit(2);
        }
        guard_end_ = base + data;
    }
    if (len > GUARD_MAX) {
        fprintf(stderr, "guard_place: %zu bytes is over GUARD_MAX\n", len);
        exit(2);
    }
    if (len)
        memmove(guard_end_ - len, s, len);
    return guard_end_ - len;
}

/* Bytes written in hex ("8286 84", blanks and newlines between pairs
 * ignored) into out; returns how many. */
__attribute__((unused)) static size_t unhex(const char *s, unsigned char *out)
{
    size_t n = 0;
    for (; *s; s++) {
        if (*s == ' ' || *s == '\n')
            continue;
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (unsigned char)v;
        s++;
    }
    return n;
}

/* Counters are per case: a case passes when none of its CHECKs failed. */
static int t_passed, t_failed, t_case_failures;

/* Records a failed check with its location; the case fails at t_end(). */
#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            ++t_case_failures;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)

static void t_end(void)
{
    if (t_case_failures)
        ++t_failed;
    else
        ++t_passed;
    t_case_failures = 0;
}

/* Prints the final "N passed, M failed" line; returns the exit status. */
static int t_summary(void)
{
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed != 0;
}

#endif
