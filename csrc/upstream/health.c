/* Active health checks: a non-blocking request, judged on the status line;
 * contract in scalws/upstream.h. */
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
    if (uc->hc_len < 12)
        return;
    /* "HTTP/1.x NNN" is all we need */
    const char *b = uc->hc_buf;
    if (memcmp(b, "HTTP/1.", 7) != 0 || b[8] != ' ' || b[9] < '1' || b[9] > '5' || b[10] < '0' ||
        b[10] > '9' || b[11] < '0' || b[11] > '9') {
        hc_done(e, uc, 0, "got an invalid response");
        return;
    }
    int status = (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
    int ok = 0;
    for (size_t i = 0; i < up->hc_n_expect; i++)
        if (status >= up->hc_expect[2 * i] && status <= up->hc_expect[2 * i + 1])
            ok = 1;
    hc_done(e, uc, ok, "got an unexpected status");
}

