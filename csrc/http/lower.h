/* http/lower.h — header names lowercased eight bytes a step, for the
 * HTTP/2 and HTTP/3 response heads (both send names in lowercase, RFC 9113
 * 8.2.1, RFC 9114 4.2). A leaf: inline functions, no state. */
#ifndef SCALWS_HTTP_LOWER_H
#define SCALWS_HTTP_LOWER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* x with A-Z lowercased in each byte: a byte is upper case when adding
 * 0x3f to its low seven bits carries into bit 7 ('A' and up) and adding
 * 0x25 does not ('Z' and below), and its own bit 7 is clear. */
static inline uint64_t lower8(uint64_t x)
{
    uint64_t low = x & 0x7f7f7f7f7f7f7f7full;
    uint64_t up = ((low + 0x3f3f3f3f3f3f3f3full) ^ (low + 0x2525252525252525ull)) & ~x &
                  0x8080808080808080ull;
    return x | up >> 2;
}

/* d[0..n) = s[0..n) lowercased, eight bytes a step; the tail (and a name
 * of 4 to 7 bytes) by loads that overlap what is done already. */
static inline void lower_copy(char *d, const char *s, size_t n)
{
    uint64_t x;
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&x, s + i, 8);
            x = lower8(x);
            memcpy(d + i, &x, 8);
        }
        if (i < n) {
            memcpy(&x, s + n - 8, 8);
            x = lower8(x);
            memcpy(d + n - 8, &x, 8);
        }
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        x = lower8(a | (uint64_t)b << 32);
        a = (uint32_t)x, b = (uint32_t)(x >> 32);
        memcpy(d + n - 4, &b, 4);
        memcpy(d, &a, 4);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    }
}

#endif
