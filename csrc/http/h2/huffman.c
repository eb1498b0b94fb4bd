/* HPACK's Huffman code (RFC 7541 5.2, Appendix B): encoding, and decoding
 * with the padding and EOS rules; the tables are generated
 * (huffman_table.h, whose comment says how decoding uses them). Contract
 * in hpack.h. */
#include "http/h2/hpack.h"
#include "http/h2/huffman_table.h"

#include <stdint.h>
#include <string.h>

size_t sws_huff_encoded_len(const uint8_t *s, size_t n)
{
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++)
        bits += sws_huff_len[s[i]];
    return (size_t)((bits + 7) >> 3);
}

size_t sws_huff_encode(uint8_t *dst, const uint8_t *s, size_t n)
{
    return sws_huff_encode_max(dst, s, n, SIZE_MAX);
}

size_t sws_huff_encode_max(uint8_t *dst, const uint8_t *s, size_t n, size_t max)
{
    /* acc holds `bits` pending bits in its low end; whole bytes leave as
     * soon as there are 32, so a 30-bit code always fits. */
    uint64_t acc = 0;
    unsigned bits = 0;
    uint8_t *o = dst;
    for (size_t i = 0; i < n; i++) {
        acc = acc << sws_huff_len[s[i]] | sws_huff_code[s[i]];
        bits += sws_huff_len[s[i]];
        if (bits >= 32) {
            if ((size_t)(o - dst) + 4 > max)
                return SIZE_MAX;
            bits -= 32;
            uint32_t w = (uint32_t)(acc >> bits);
            o[0] = (uint8_t)(w >> 24);
            o[1] = (uint8_t)(w >> 16);
            o[2] = (uint8_t)(w >> 8);
            o[3] = (uint8_t)w;
            o += 4;
        }
    }
    if ((size_t)(o - dst) + (bits + 7) / 8 > max)
        return SIZE_MAX;
    while (bits >= 8) {
        bits -= 8;
        *o++ = (uint8_t)(acc >> bits);
    }
    if (bits) /* the padding: the most significant bits of EOS, all 1s */
        *o++ = (uint8_t)(acc << (8 - bits)) | (uint8_t)(0xff >> bits);
    return (size_t)(o - dst);
}

static inline uint64_t load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

ssize_t sws_huff_decode(uint8_t *dst, size_t room, const uint8_t *s, size_t n)
{
    /* acc holds the next input bits from its most significant end; `bits`
     * of them are counted. Bits below those may already hold the bytes
     * that follow (the 8-byte refill reads ahead), which a later refill
     * ORs in again unchanged. */
    const uint8_t *end = s + n;
    uint64_t acc = 0;
    unsigned bits = 0;
    size_t out = 0;
    for (;;) {
        if (bits < 30) { /* a code is 30 bits at most: refill only below that */
            if (end - s >= 8) {
                acc |= load_be64(s) >> bits;
                s += (63 - bits) >> 3;
                bits |= 56;
            } else {
                while (bits <= 56 && s < end) {
                    acc |= (uint64_t)*s++ << (56 - bits);
                    bits += 8;
                }
                if (bits == 0)
                    break;
            }
        }
        unsigned e = sws_huff_fast[acc >> (64 - SWS_HUFF_FAST_BITS)], len, sym;
        if (e) {
            len = e >> 8;
            sym = e & 0xff;
        } else { /* a code longer than the first look-up: its length by the canonical bounds */
            uint32_t w = (uint32_t)(acc >> 32);
            for (len = SWS_HUFF_FAST_BITS + 1; len < 30 && w >= sws_huff_limit[len]; len++)
                ;
            sym = sws_huff_sym[(uint32_t)((w >> (32 - len)) + sws_huff_base[len])];
        }
        if (len > bits) /* no whole code left: the rest is padding (or bad) */
            break;
        if (sym == SWS_HUFF_EOS) /* RFC 7541 5.2: EOS inside a string is an error */
            return -1;
        if (out < room)
            dst[out] = (uint8_t)sym;
        out++;
        acc <<= len;
        bits -= len;
    }
    /* RFC 7541 5.2: padding longer than 7 bits, or not EOS's 1s, is an error */
    if (bits > 7 || (bits && (acc >> (64 - bits)) != (1u << bits) - 1))
        return -1;
    return (ssize_t)out;
}
