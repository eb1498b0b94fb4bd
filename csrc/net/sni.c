/* The server_name extension of a ClientHello; contract in scalws/sni.h. */
#include <string.h>

#include "scalws/sni.h"

static int name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int sws_sni_name(const unsigned char *p, size_t len, char *out)
{
    /* ServerNameList: a 2-byte length, then entries of a 1-byte type and a
     * 2-byte-length name; only host_name (0) is defined. */
    if (len < 2)
        return -1;
    size_t list = (size_t)p[0] << 8 | p[1];
    if (list != len - 2)
        return -1;
    const unsigned char *q = p + 2, *end = p + len;
    while (end - q >= 3) {
        unsigned type = q[0];
        size_t n = (size_t)q[1] << 8 | q[2];
        q += 3;
        if ((size_t)(end - q) < n)
            return -1;
        if (type != 0) {
            q += n;
            continue;
        }
        if (n && q[n - 1] == '.')
            n--; /* a fully qualified name */
        if (n == 0 || n > SWS_SNI_MAX)
            return -1;
        size_t label = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = q[i];
            if (c >= 'A' && c <= 'Z')
                c = (unsigned char)(c + 32);
            if (c == '.') {
                if (label == 0)
                    return -1;
                label = 0;
            } else if (name_char(c)) {
                label++;
            } else {
                return -1;
            }
            out[i] = (char)c;
        }
        if (label == 0)
            return -1;
        out[n] = 0;
        return (int)n;
    }
    return -1;
}
