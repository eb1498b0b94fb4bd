/* FastCGI records; contract in scalws/fcgi.h. The specification is
 * "FastCGI Specification", Open Market, 1996 (version 1): records of an
 * 8-byte header (version, type, request id, content length, padding length)
 * then content and padding. */
#include <string.h>

#include "scalws/fcgi.h"

void sws_fcgi_header(char *out, int type, uint16_t id, size_t content_len, size_t pad_len)
{
    unsigned char *o = (unsigned char *)out;
    o[0] = 1;
    o[1] = (unsigned char)type;
    o[2] = (unsigned char)(id >> 8);
    o[3] = (unsigned char)id;
    o[4] = (unsigned char)(content_len >> 8);
    o[5] = (unsigned char)content_len;
    o[6] = (unsigned char)pad_len;
    o[7] = 0;
}

void sws_fcgi_begin(char *out, uint16_t id, int keep_conn)
{
    sws_fcgi_header(out, SWS_FCGI_BEGIN_REQUEST, id, 8, 0);
    unsigned char *b = (unsigned char *)out + SWS_FCGI_HEADER_LEN;
    memset(b, 0, 8);
    b[1] = 1; /* FCGI_RESPONDER */
    b[2] = keep_conn ? 1 : 0; /* FCGI_KEEP_CONN */
}

static char *put_len(char *out, size_t n)
{
    unsigned char *o = (unsigned char *)out;
    if (n < 128) {
        *o = (unsigned char)n;
        return out + 1;
    }
    o[0] = (unsigned char)(0x80 | (n >> 24));
    o[1] = (unsigned char)(n >> 16);
    o[2] = (unsigned char)(n >> 8);
    o[3] = (unsigned char)n;
    return out + 4;
}

char *sws_fcgi_nv(char *out, const char *name, size_t nl, const char *value, size_t vl)
{
    out = put_len(out, nl);
    out = put_len(out, vl);
    memcpy(out, name, nl);
    if (value) /* NULL: the caller writes the value (and memcpy's arguments may not be) */
        memcpy(out + nl, value, vl);
    return out + nl + vl;
}

/* One length of a pair: 0 and *n, or -1 when it runs past end. */
static int get_len(const unsigned char **pp, const unsigned char *end, size_t *n)
{
    const unsigned char *p = *pp;
    if (p == end)
        return -1;
    if (!(*p & 0x80)) {
        *n = *p;
        *pp = p + 1;
        return 0;
    }
    if (end - p < 4)
        return -1;
    *n = ((size_t)(p[0] & 0x7f) << 24) | ((size_t)p[1] << 16) | ((size_t)p[2] << 8) | p[3];
    *pp = p + 4;
    return 0;
}

int sws_fcgi_nv_each(const char *buf, size_t len,
                     void (*fn)(void *ctx, const char *n, size_t nl, const char *v, size_t vl),
                     void *ctx)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    while (p != end) {
        size_t nl, vl;
        if (get_len(&p, end, &nl) < 0 || get_len(&p, end, &vl) < 0)
            return -1;
        if (nl > (size_t)(end - p) || vl > (size_t)(end - p) - nl)
            return -1;
        fn(ctx, (const char *)p, nl, (const char *)p + nl, vl);
        p += nl + vl;
    }
    return 0;
}

/* The header in d->hdr is whole: check it against what may come, and start
 * its record. 0, or SWS_FCGI_ERROR. */
static int take_header(sws_fcgi_dec_t *d)
{
    const uint8_t *h = d->hdr;
    uint16_t id = (uint16_t)(h[2] << 8 | h[3]);
    uint32_t clen = (uint32_t)(h[4] << 8 | h[5]);
    if (h[0] != 1)
        return SWS_FCGI_ERROR;
    d->type = h[1];
    d->content_left = clen;
    d->pad_left = h[6];
    d->elen = 0;
    d->mgmt = id == 0;
    if (id == 0) /* answers to management records we never send; skipped */
        return d->type == SWS_FCGI_GET_VALUES_RESULT || d->type == SWS_FCGI_UNKNOWN_TYPE
                   ? 0
                   : SWS_FCGI_ERROR;
    if (id != d->id)
        return SWS_FCGI_ERROR; /* we never multiplex: one request per connection at a time */
    switch (d->type) {
    case SWS_FCGI_STDOUT:
        if (d->stdout_closed)
            return SWS_FCGI_ERROR;
        if (clen == 0)
            d->stdout_closed = 1;
        return 0;
    case SWS_FCGI_STDERR:
        return 0;
    case SWS_FCGI_END_REQUEST:
        return clen == 8 ? 0 : SWS_FCGI_ERROR;
    default:
        return SWS_FCGI_ERROR;
    }
}

ssize_t sws_fcgi_decode(sws_fcgi_dec_t *d, char *buf, size_t len, size_t *out,
                        void (*on_stderr)(void *ctx, const char *p, size_t n), void *ctx)
{
    size_t r = 0, w = 0;
    while (r < len && !d->ended) {
        if (d->hlen < SWS_FCGI_HEADER_LEN) {
            size_t take = SWS_FCGI_HEADER_LEN - d->hlen;
            if (take > len - r)
                take = len - r;
            memcpy(d->hdr + d->hlen, buf + r, take);
            d->hlen = (uint8_t)(d->hlen + take);
            r += take;
            if (d->hlen < SWS_FCGI_HEADER_LEN)
                break;
            if (take_header(d) < 0)
                return SWS_FCGI_ERROR;
        }
        if (d->content_left) {
            size_t n = d->content_left;
            if (n > len - r)
                n = len - r;
            if (!d->mgmt) {
                if (d->type == SWS_FCGI_STDOUT) {
                    memmove(buf + w, buf + r, n);
                    w += n;
                } else if (d->type == SWS_FCGI_STDERR) {
                    if (on_stderr && n)
                        on_stderr(ctx, buf + r, n);
                } else { /* END_REQUEST: 8 bytes, checked by take_header */
                    memcpy(d->end + d->elen, buf + r, n);
                    d->elen = (uint8_t)(d->elen + n);
                }
            }
            r += n;
            d->content_left -= (uint32_t)n;
            if (d->content_left)
                break;
        }
        if (d->pad_left) {
            size_t n = d->pad_left;
            if (n > len - r)
                n = len - r;
            r += n;
            d->pad_left -= (uint32_t)n;
            if (d->pad_left)
                break;
        }
        /* the record is whole */
        if (!d->mgmt && d->type == SWS_FCGI_END_REQUEST) {
            const uint8_t *b = d->end;
            d->app_status = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
            d->protocol_status = b[4];
            d->ended = 1;
        }
        d->hlen = 0;
    }
    *out = w;
    return (ssize_t)r;
}
