/*
 * h2wire.h — HTTP/2 bytes written by hand for the C tests and fuzz targets
 * (fuzz_h2, tests/c/test_h2_fail): a frame header and an HPACK literal.
 */
#ifndef SCALWS_TEST_H2WIRE_H
#define SCALWS_TEST_H2WIRE_H

#include <stdint.h>
#include <string.h>

/* A frame header (RFC 9113 §4.1) at p; returns its 9 bytes. */
__attribute__((unused)) static size_t h2_frame_head(uint8_t *p, size_t len, uint8_t type, uint8_t flags,
                                                    uint32_t sid)
{
    p[0] = (uint8_t)(len >> 16);
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)len;
    p[3] = type;
    p[4] = flags;
    p[5] = (uint8_t)(sid >> 24);
    p[6] = (uint8_t)(sid >> 16);
    p[7] = (uint8_t)(sid >> 8);
    p[8] = (uint8_t)sid;
    return 9;
}

/* An HPACK literal field without indexing (RFC 7541 §6.2.2) at p, name and
 * value under 127 bytes (no Huffman, one-byte lengths); returns its size. */
__attribute__((unused)) static size_t h2_literal(uint8_t *p, const char *n, const char *v)
{
    size_t nl = strlen(n), vl = strlen(v);
    p[0] = 0;
    p[1] = (uint8_t)nl;
    memcpy(p + 2, n, nl);
    p[2 + nl] = (uint8_t)vl;
    memcpy(p + 3 + nl, v, vl);
    return 3 + nl + vl;
}

#endif
