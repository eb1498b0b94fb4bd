#include "scalws/path.h"

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

ssize_t sws_normalize_path(const char *in, size_t len, char *out)
{
    if (len == 0 || in[0] != '/')
        return -1;
    size_t o = 0;   /* bytes written to out */
    size_t seg = 0; /* start of the current segment in out (just after its '/') */
    int prev = -1;  /* previous decoded byte, for the overlong UTF-8 checks */
    for (size_t i = 0; i <= len; i++) {
        int c;
        if (i == len) {
            c = -1; /* end: close the last segment */
        } else if (in[i] == '%') {
            int h, l;
            if (i + 2 >= len)
                return -1; /* "%" or "%4" at the end */
            h = hexval((unsigned char)in[i + 1]);
            l = hexval((unsigned char)in[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            c = h << 4 | l;
            if (c == 0)
                return -1;
            i += 2;
        } else {
            c = (unsigned char)in[i];
        }
        if (c == 0xC0 || c == 0xC1 || (prev == 0xE0 && c >= 0x80 && c < 0xA0) ||
            (prev == 0xF0 && c >= 0x80 && c < 0x90))
            return -1;
        prev = c;
        if (c != '/' && c != -1) {
            out[o++] = (char)c;
            continue;
        }
        /* A segment out[seg..o) is complete. */
        size_t n = o - seg;
        if (o > 0 && n == 0 && c == '/')
            continue; /* "//": merge */
        if (n == 1 && out[seg] == '.') {
            o = seg; /* "." : drop */
        } else if (n == 2 && out[seg] == '.' && out[seg + 1] == '.') {
            if (seg <= 1)
                return -1; /* ".." above the root */
            /* drop this segment and the one before it */
            o = seg - 1;
            while (o > 0 && out[o - 1] != '/')
                o--;
        }
        if (c == '/') {
            if (o == 0 || out[o - 1] != '/')
                out[o++] = '/';
            seg = o;
        }
    }
    if (o == 0)
        out[o++] = '/';
    return (ssize_t)o;
}
