/* Active health checks: a non-blocking request, judged on the status line
 * (a FastCGI group: on its first STDOUT record's "Status:", none meaning
 * 200, as PHP-FPM's ping.path answers); contract in scalws/upstream.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "context.h"

void hc_done(sws_engine_t *e, upconn_t *uc, int ok, const char *why)
{
    sws_upstream_t *up = uc->up;
    sws_upstream_server_t *s = uc->srv;
    s->hc_busy = 0;
    s->hc_next = e->core.now + up->hc_interval_ms;
    uc_close(e, uc);
    if (ok) {
        s->hc_fail = 0;
        if (s->hc_down && ++s->hc_pass >= up->hc_rise) {
            s->hc_down = 0;
            s->down_until = 0;
            s->fails = 0;
            elog(e, SWS_L_NOTICE, "upstream server %s of \"%s\" is up (health check passed %u times)",
                 s->name, up->name, up->hc_rise);
        }
    } else {
        s->hc_pass = 0;
        if (!s->hc_down && ++s->hc_fail >= up->hc_fall) {
            s->hc_down = 1;
            elog(e, SWS_L_WARN, "upstream server %s of \"%s\" is down: health check %s (%u times)",
                 s->name, up->name, why, up->hc_fall);
        }
    }
}

void hc_start(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *s)
{
    upconn_t *uc = uc_connect(e, up, s, UC_HEALTH);
    s->hc_busy = 1;
    if (!uc) {
        s->hc_busy = 0;
        s->hc_next = e->core.now + up->hc_interval_ms;
        s->hc_pass = 0;
        if (!s->hc_down && ++s->hc_fail >= up->hc_fall) {
            s->hc_down = 1;
            elog(e, SWS_L_WARN, "upstream server %s of \"%s\" is down: health check connect() failed (%s)",
                 s->name, up->name, strerror(errno));
        }
        return;
    }
    e->core.cnt.upstream_conns--; /* checks are not traffic */
    uc->deadline = e->core.now + up->hc_timeout_ms;
    if (uc->state == UC_HEALTH)
        hc_event(e, uc, EPOLLOUT);
}

/* A FastCGI check's answer in hc_buf[0..hc_len): records before the first
 * STDOUT (PHP-FPM's STDERR "Primary script unknown") are skipped; the
 * STDOUT's CGI head starts with "Status: NNN" when it is not 200. 1 with
 * *status set, 0 for more bytes, -1 for an invalid answer. */
static int fastcgi_status(upconn_t *uc, int *status)
{
    char *b = uc->hc_buf;
    for (;;) {
        if (uc->hc_skip) {
            size_t k = uc->hc_skip < uc->hc_len ? uc->hc_skip : uc->hc_len;
            memmove(b, b + k, uc->hc_len - k);
            uc->hc_len -= k;
            uc->hc_skip -= (uint32_t)k;
            if (uc->hc_skip)
                return 0;
        }
        if (uc->hc_len < 8)
            return 0;
        size_t clen = (size_t)((unsigned char)b[4] << 8 | (unsigned char)b[5]);
        if (b[0] != 1 || b[1] == 3 /* END_REQUEST before any output */)
            return -1;
        if (b[1] != 6 /* STDOUT */ || clen == 0) {
            uc->hc_skip = (uint32_t)(8 + clen + (unsigned char)b[6]);
            continue;
        }
        if (uc->hc_len < 8 + (clen < 11 ? clen : 11))
            return 0;
        const char *s = b + 8;
        *status = 200;
        if (clen >= 11 && memcmp(s, "Status: ", 8) == 0) {
            if (s[8] < '1' || s[8] > '5' || s[9] < '0' || s[9] > '9' || s[10] < '0' || s[10] > '9')
                return -1;
            *status = (s[8] - '0') * 100 + (s[9] - '0') * 10 + (s[10] - '0');
        }
        return 1;
    }
}

void hc_event(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    sws_upstream_t *up = uc->up;
    if (uc->state == UC_CONNECTING) {
        int err = 0;
        socklen_t sl = sizeof err;
        getsockopt(uc->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
        if (err) {
            hc_done(e, uc, 0, "connect() failed");
            return;
        }
        uc->state = uc->ssl ? UC_HANDSHAKE : UC_HEALTH;
    }
    if (uc->state == UC_HANDSHAKE) { /* a TLS group is checked over TLS */
        char why[320], what[360];
        int r = uc_handshake(e, uc, why, sizeof why);
        if (r == 0)
            return;
        if (r < 0) {
            snprintf(what, sizeof what, "failed: %s", why);
            hc_done(e, uc, 0, what);
            return;
        }
        uc->state = UC_HEALTH;
        events = EPOLLOUT;
    }
    while (uc->hc_sent < up->hc_request_len) {
        ssize_t n = uc_send(e, uc, up->hc_request + uc->hc_sent, up->hc_request_len - uc->hc_sent);
        if (n < 0 && errno == EAGAIN) {
            uc_set_mask(e, uc, EPOLLOUT);
            return;
        }
        if (n <= 0) {
            hc_done(e, uc, 0, "send failed");
            return;
        }
        uc->hc_sent += (size_t)n;
    }
    uc_set_mask(e, uc, EPOLLIN | EPOLLRDHUP);
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        return;
    int status;
    const char *b = uc->hc_buf;
    for (;;) {
        ssize_t n = uc_recv(e, uc, uc->hc_buf + uc->hc_len, sizeof uc->hc_buf - uc->hc_len);
        if (n < 0 && errno == EAGAIN) {
            uc_set_mask(e, uc, EPOLLIN | EPOLLRDHUP); /* a TLS read may wait for EPOLLOUT */
            return;
        }
        if (n <= 0) {
            hc_done(e, uc, 0, "got no answer");
            return;
        }
        uc->hc_len += (size_t)n;
        if (!up->hc_fastcgi)
            break;
        int r = fastcgi_status(uc, &status);
        if (r < 0) {
            hc_done(e, uc, 0, "got an invalid FastCGI response");
            return;
        }
        if (r > 0)
            break;
    }
    if (!up->hc_fastcgi) {
        if (uc->hc_len < 12)
            return;
        /* "HTTP/1.x NNN" is all we need */
        if (memcmp(b, "HTTP/1.", 7) != 0 || b[8] != ' ' || b[9] < '1' || b[9] > '5' ||
            b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9') {
            hc_done(e, uc, 0, "got an invalid response");
            return;
        }
        status = (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
    }
    int ok = 0;
    for (size_t i = 0; i < up->hc_n_expect; i++)
        if (status >= up->hc_expect[2 * i] && status <= up->hc_expect[2 * i + 1])
            ok = 1;
    hc_done(e, uc, ok, "got an unexpected status");
}

