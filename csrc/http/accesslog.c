/* The access log; contract in scalws/accesslog.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"

static const char HEX[] = "0123456789abcdef";

void sws_alog_init(sws_engine_t *e, uint64_t seed)
{
    e->alog.fd = -1;
    e->alog.rid_base = seed;
}

void sws_alog_free(sws_engine_t *e)
{
    sws_alog_flush(e);
    free(e->alog.buf);
}

int sws_engine_set_access_log(sws_engine_t *e, int fd, int format, size_t bufsize,
                              uint32_t flush_ms)
{
    sws_alog_flush(e);
    if (bufsize < 4096)
        bufsize = 4096;
    if (bufsize != e->alog.cap) {
        char *b = realloc(e->alog.buf, bufsize);
        if (!b)
            return -ENOMEM;
        e->alog.buf = b;
        e->alog.cap = bufsize;
    }
    e->alog.fd = fd;
    e->alog.format = fd < 0 ? SWS_LOG_OFF : format;
    e->alog.flush_ms = flush_ms;
    return 0;
}

void sws_alog_flush(sws_engine_t *e)
{
    size_t off = 0;
    while (off < e->alog.len && e->alog.fd >= 0) {
        ssize_t w = write(e->alog.fd, e->alog.buf + off, e->alog.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* a full disk loses log lines, never requests */
        off += (size_t)w;
    }
    e->alog.len = 0;
    e->alog.last_flush = e->core.now;
}

void sws_alog_maybe_flush(sws_engine_t *e)
{
    if (e->alog.len && e->core.now - e->alog.last_flush >= e->alog.flush_ms)
        sws_alog_flush(e);
}

uint64_t next_request_id(sws_engine_t *e)
{
    return e->alog.rid_base ^ (++e->alog.rid_seq * 0x9E3779B97F4A7C15ull);
}

int sane_request_id(const char *s, size_t n)
{
    if (n == 0 || n > RID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return 0;
    }
    return 1;
}

void format_request_id(uint64_t id, char out[16])
{
    for (int i = 0; i < 16; i++)
        out[i] = HEX[(id >> (60 - 4 * i)) & 15];
}

/* nginx's escaping for the combined format: '"', '\\' and bytes outside
 * 0x20..0x7e become \xHH. */
static char *esc_combined(char *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch > 0x7e || ch == '"' || ch == '\\') {
            *p++ = '\\';
            *p++ = 'x';
            *p++ = HEX[ch >> 4];
            *p++ = HEX[ch & 15];
        } else {
            *p++ = (char)ch;
        }
    }
    return p;
}

/* Bytes of a line besides its five client-supplied fields: literals (about
 * 200 in JSON), times, a 39-character IPv6 peer, numbers, request id, and
 * over TLS the protocol and cipher (at most 120). */
#define LOG_FIXED 640
#define LOG_FIELDS 5

void access_log(sws_engine_t *e, const sws_conn_t *c, const sws_request_t *r, int status,
                size_t body_bytes, uint64_t ms)
{
    if (e->alog.format == SWS_LOG_OFF)
        return;
    const sws_header_t *ref = r ? find_header(r, "referer", 7) : NULL;
    const sws_header_t *ua = r ? find_header(r, "user-agent", 10) : NULL;
    /* Escaping grows a byte to at most 4 (combined) or 6 (JSON) bytes; each
     * client field is cut to `fmax` so a line always fits the buffer and is
     * never dropped (a long User-Agent cannot hide a request). */
    size_t grow = e->alog.format == SWS_LOG_JSON ? 6 : 4;
    size_t fmax = (e->alog.cap - LOG_FIXED) / (grow * LOG_FIELDS);
    size_t ml = r ? (r->method_len < fmax ? r->method_len : fmax) : 0;
    size_t tl = r ? (r->target_len < fmax ? r->target_len : fmax) : 0;
    size_t hl = r && r->host ? (r->host_len < fmax ? r->host_len : fmax) : 0;
    size_t rl = ref ? (ref->value_len < fmax ? ref->value_len : fmax) : 0;
    size_t ul = ua ? (ua->value_len < fmax ? ua->value_len : fmax) : 0;
    size_t need = LOG_FIXED + grow * (ml + tl + hl + rl + ul);
    if (e->alog.len + need > e->alog.cap)
        sws_alog_flush(e);
    char *p = e->alog.buf + e->alog.len;
    char ridbuf[16];
    const char *ridtxt = ridbuf;
    int rid_len = 16;
    if (r && r->rid) {
        ridtxt = r->rid; /* a proxied request's id, as sent upstream (at most 64 bytes) */
        rid_len = (int)r->rid_len;
    } else {
        format_request_id(next_request_id(e), ridbuf);
    }
    /* Request time: head start to answer, at the loop's millisecond clock. */
    char reqt[32];
    snprintf(reqt, sizeof reqt, "%llu.%03llu", (unsigned long long)(ms / 1000),
             (unsigned long long)(ms % 1000));
    if (e->alog.format == SWS_LOG_COMBINED) {
        p = put_peer(p, c);
        memcpy(p, " - - [", 6);
        p += 6;
        memcpy(p, e->core.log_time, SWS_LOG_TIME_LEN);
        p += SWS_LOG_TIME_LEN;
        memcpy(p, "] \"", 3);
        p += 3;
        if (r && r->head_refused) { /* as nginx's $request: the line as it came */
            p = esc_combined(p, r->method, ml);
        } else if (r) {
            p = esc_combined(p, r->method, ml);
            *p++ = ' ';
            p = esc_combined(p, r->target, tl);
            p += r->http3   ? sprintf(p, " HTTP/3.0")
                 : r->http2 ? sprintf(p, " HTTP/2.0")
                            : sprintf(p, " HTTP/1.%d", r->minor);
        }
        p += sprintf(p, "\" %d %zu \"", status, body_bytes);
        if (ref)
            p = esc_combined(p, ref->value, rl);
        else
            *p++ = '-';
        memcpy(p, "\" \"", 3);
        p += 3;
        if (ua)
            p = esc_combined(p, ua->value, ul);
        else
            *p++ = '-';
        p += sprintf(p, "\" %s %.*s", reqt, rid_len, ridtxt);
        if (c->tls) /* nginx's $ssl_protocol $ssl_cipher */
            p += sprintf(p, " %.16s %.64s", sws_tls_protocol(c), sws_tls_cipher(c));
        *p++ = '\n';
    } else {
        p += sprintf(p, "{\"time\":\"%.*s\",\"remote_addr\":\"", SWS_ISO_TIME_LEN, e->core.iso_time);
        p = put_peer(p, c);
        p += sprintf(p, "\",\"request_id\":\"%.*s\",\"method\":\"", rid_len, ridtxt);
        int refused = r && r->head_refused; /* uri: the first line as it came */
        if (r && !refused)
            p = sws_json_escape(p, r->method, ml);
        memcpy(p, "\",\"uri\":\"", 9);
        p += 9;
        if (r)
            p = refused ? sws_json_escape(p, r->method, ml) : sws_json_escape(p, r->target, tl);
        if (refused)
            p += sprintf(p, "\",\"protocol\":\"");
        else
            p += sprintf(p, "\",\"protocol\":\"HTTP/%d.%d", r && r->http3 ? 3 : r && r->http2 ? 2 : 1,
                         r ? (r->http2 ? 0 : r->minor) : 1);
        p += sprintf(p, "\",\"status\":%d,\"body_bytes_sent\":%zu,\"request_time\":%s,\"host\":\"",
                     status, body_bytes, reqt);
        if (r && r->host)
            p = sws_json_escape(p, r->host, hl);
        memcpy(p, "\",\"referer\":\"", 13);
        p += 13;
        if (ref)
            p = sws_json_escape(p, ref->value, rl);
        memcpy(p, "\",\"user_agent\":\"", 16);
        p += 16;
        if (ua)
            p = sws_json_escape(p, ua->value, ul);
        *p++ = '"';
        if (c->tls)
            p += sprintf(p, ",\"ssl_protocol\":\"%.16s\",\"ssl_cipher\":\"%.64s\"",
                         sws_tls_protocol(c), sws_tls_cipher(c));
        memcpy(p, "}\n", 2);
        p += 2;
    }
    e->alog.len = (size_t)(p - e->alog.buf);
}

