/*
 * http1_chars.h — the byte classes of RFC 9110 that the HTTP/1 leaf's files
 * (http1.c, http1_chunked.c) share. Internal to csrc/http; static inline,
 * so each file keeps its own copy of the table.
 */
#ifndef SCALWS_HTTP1_CHARS_H
#define SCALWS_HTTP1_CHARS_H

/* tchar (RFC 9110 §5.6.2): "!#$%&'*+-.^_`|~" DIGIT ALPHA. */
static const unsigned char tchar_map[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

static inline int is_tchar(unsigned char c) { return tchar_map[c]; }

/* request-target bytes: no CTL, SP or DEL; obs-text passes (the router
 * decides what a target may contain). */
static inline int is_target_char(unsigned char c) { return c > 0x20 && c != 0x7f; }

/* field-value bytes (RFC 9110 §5.5): HTAB, SP, VCHAR, obs-text. */
static inline int is_value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\t'; }

static inline unsigned char ascii_lower(unsigned char c)
{
    return (unsigned char)(c - 'A') < 26 ? (unsigned char)(c | 0x20) : c;
}

#endif
