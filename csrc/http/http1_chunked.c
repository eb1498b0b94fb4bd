/*
 * http1_chunked.c — the chunked body decoder (RFC 9112 §7.1) of the HTTP/1
 * leaf. Contract in scalws/http1.h; this file states only how.
 *
 * Every byte is looked at once, in order, and never past buf + len.
 */
#include <stdint.h>
#include <string.h>

#include "scalws/http1.h"
#include "http1_chars.h"

enum {
    CS_SIZE = 0,      /* chunk-size digits; zeroed decoder starts here */
    CS_EXT_BWS,       /* BWS seen after the size or a value: ";" must follow */
    CS_EXT_NAME_BWS,  /* after ";": BWS, then chunk-ext-name */
    CS_EXT_NAME,      /* in chunk-ext-name */
    CS_EXT_NAME_END,  /* BWS after the name: "=" or ";" must follow */
    CS_EXT_VAL_BWS,   /* after "=": BWS, then token or quoted-string */
    CS_EXT_VAL_TOKEN, /* in a token value */
    CS_EXT_VAL_QUOTED,/* in a quoted-string value */
    CS_EXT_VAL_QPAIR, /* after "\" in a quoted-string */
    CS_EXT_VAL_END,   /* after the closing quote */
    CS_SIZE_LF,       /* CR of the size line seen */
    CS_DATA,          /* chunk-data */
    CS_DATA_CR,       /* CRLF after chunk-data */
    CS_DATA_LF,
    CS_TRAILER_START, /* start of a trailer field line or of the final CRLF */
    CS_TRAILER_NAME,
    CS_TRAILER_VALUE,
    CS_TRAILER_LF,    /* CR of a trailer line seen */
    CS_END_LF,        /* CR of the final empty line seen */
    CS_DONE,
    CS_ERROR
};

static inline int hex_value(unsigned char c)
{
    if ((unsigned char)(c - '0') < 10)
        return c - '0';
    c = ascii_lower(c);
    if ((unsigned char)(c - 'a') < 6)
        return c - 'a' + 10;
    return -1;
}

/* qdtext and the second byte of quoted-pair (RFC 9110 §5.6.4). */
static inline int is_qdtext(unsigned char c)
{
    return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) ||
           (c >= 0x5d && c <= 0x7e) || c >= 0x80;
}
static inline int is_qpair_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

/* The decoder of sws_decode_chunked (out == buf: body bytes moved down to
 * out[0..*outsz)) and of sws_skip_chunked (out NULL: nothing written, *outsz
 * untouched); inlined into both, so each keeps only its own path. */
static inline __attribute__((always_inline)) ssize_t
chunked_run(sws_chunked_decoder_t *d, const char *buf, char *out, size_t len, size_t *outsz)
{
    size_t src = 0, dst = 0, tkept = 0;
    int state = d->state;
    /* keep_trailers: trailer field-line bytes go to out[dst + tkept], after
     * the body bytes (never past src: each was read first). */
    char *tr = out && d->keep_trailers ? out : NULL;
    d->trailer_out = 0;

    if (state == CS_ERROR)
        goto error;

    while (src < len) {
        unsigned char c;

        if (state == CS_DATA) {
            size_t n = len - src;
            if (n > d->bytes_left_in_chunk)
                n = (size_t)d->bytes_left_in_chunk;
            if (out && dst != src)
                memmove(out + dst, buf + src, n);
            dst += n;
            src += n;
            d->bytes_left_in_chunk -= n;
            d->total += n;
            if (d->bytes_left_in_chunk == 0)
                state = CS_DATA_CR;
            continue;
        }
        if (state == CS_DONE)
            break;

        c = (unsigned char)buf[src++];

        /* chunk-ext (RFC 9112 §7.1.1) is skipped but bounded. */
        if (state >= CS_EXT_BWS && state <= CS_EXT_VAL_END &&
            ++d->framing_bytes > SWS_CHUNK_EXT_MAX)
            goto error;
        if (state >= CS_TRAILER_START && state <= CS_END_LF) {
            if (++d->framing_bytes > SWS_CHUNK_TRAILER_MAX)
                goto error;
            if (tr && state != CS_END_LF && !(state == CS_TRAILER_START && c == '\r'))
                tr[dst + tkept++] = (char)c; /* a field line's byte (checked below) */
        }

        switch (state) {
        case CS_SIZE: {
            int h = hex_value(c);
            if (h >= 0) {
                if (++d->hex_count > 16)
                    goto error;
                d->bytes_left_in_chunk = (d->bytes_left_in_chunk << 4) | (unsigned)h;
                break;
            }
            if (d->hex_count == 0)
                goto error;
            if (c == '\r')
                state = CS_SIZE_LF;
            else if (c == ';')
                state = CS_EXT_NAME_BWS;
            else if (is_ws(c))
                state = CS_EXT_BWS;
            else
                goto error;
            break;
        }
        case CS_EXT_BWS:
            if (c == ';')
                state = CS_EXT_NAME_BWS;
            else if (!is_ws(c))
                goto error;
            break;
        case CS_EXT_NAME_BWS:
            if (is_tchar(c))
                state = CS_EXT_NAME;
            else if (!is_ws(c))
                goto error;
            break;
        case CS_EXT_NAME:
            if (is_tchar(c))
                break;
            if (c == '\r')
                state = CS_SIZE_LF;
            else if (c == ';')
                state = CS_EXT_NAME_BWS;
            else if (c == '=')
                state = CS_EXT_VAL_BWS;
            else if (is_ws(c))
                state = CS_EXT_NAME_END;
            else
                goto error;
            break;
        case CS_EXT_NAME_END:
            if (c == '=')
                state = CS_EXT_VAL_BWS;
            else if (c == ';')
                state = CS_EXT_NAME_BWS;
            else if (!is_ws(c))
                goto error;
            break;
        case CS_EXT_VAL_BWS:
            if (c == '"')
                state = CS_EXT_VAL_QUOTED;
            else if (is_tchar(c))
                state = CS_EXT_VAL_TOKEN;
            else if (!is_ws(c))
                goto error;
            break;
        case CS_EXT_VAL_TOKEN:
        case CS_EXT_VAL_END:
            if (state == CS_EXT_VAL_TOKEN && is_tchar(c))
                break;
            if (c == '\r')
                state = CS_SIZE_LF;
            else if (c == ';')
                state = CS_EXT_NAME_BWS;
            else if (is_ws(c))
                state = CS_EXT_BWS;
            else
                goto error;
            break;
        case CS_EXT_VAL_QUOTED:
            if (c == '"')
                state = CS_EXT_VAL_END;
            else if (c == '\\')
                state = CS_EXT_VAL_QPAIR;
            else if (!is_qdtext(c))
                goto error;
            break;
        case CS_EXT_VAL_QPAIR:
            if (!is_qpair_char(c))
                goto error;
            state = CS_EXT_VAL_QUOTED;
            break;
        case CS_SIZE_LF:
            if (c != '\n')
                goto error;
            /* total must stay representable (the caller enforces its limit). */
            if (d->bytes_left_in_chunk > UINT64_MAX - d->total)
                goto error;
            d->hex_count = 0;
            d->framing_bytes = 0;
            state = d->bytes_left_in_chunk == 0 ? CS_TRAILER_START : CS_DATA;
            break;
        case CS_DATA_CR:
            if (c != '\r')
                goto error;
            state = CS_DATA_LF;
            break;
        case CS_DATA_LF:
            if (c != '\n')
                goto error;
            state = CS_SIZE;
            break;
        case CS_TRAILER_START:
            /* trailer-section = *( field-line CRLF ) (RFC 9112 §7.1.2) */
            if (c == '\r')
                state = CS_END_LF;
            else if (is_tchar(c))
                state = CS_TRAILER_NAME;
            else
                goto error;
            break;
        case CS_TRAILER_NAME:
            if (c == ':')
                state = CS_TRAILER_VALUE;
            else if (!is_tchar(c))
                goto error;
            break;
        case CS_TRAILER_VALUE:
            if (c == '\r')
                state = CS_TRAILER_LF;
            else if (!is_value_char(c))
                goto error;
            break;
        case CS_TRAILER_LF:
            if (c != '\n')
                goto error;
            state = CS_TRAILER_START;
            break;
        case CS_END_LF:
            if (c != '\n')
                goto error;
            state = CS_DONE;
            break;
        default:
            goto error;
        }
    }

    d->state = state;
    d->trailer_out = (uint32_t)tkept;
    if (out)
        *outsz = dst;
    if (state != CS_DONE)
        return SWS_PARSE_INCOMPLETE;
    if (out && src < len && dst + tkept != src)
        memmove(out + dst + tkept, buf + src, len - src);
    return (ssize_t)(len - src);

error:
    d->state = CS_ERROR;
    d->trailer_out = 0;
    if (out)
        *outsz = dst;
    return SWS_PARSE_ERROR;
}

ssize_t sws_decode_chunked(sws_chunked_decoder_t *d, char *buf, size_t *bufsz)
{
    return chunked_run(d, buf, buf, *bufsz, bufsz);
}

ssize_t sws_skip_chunked(sws_chunked_decoder_t *d, const char *buf, size_t len)
{
    return chunked_run(d, buf, NULL, len, NULL);
}
