/* Upstream connections: connect, the keep-alive pool, deadlines; contract
 * in scalws/upstream.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "context.h"

static void uc_event(sws_engine_t *e, void *obj, uint32_t events)
{
    upconn_t *uc = obj;
    if (uc->ssl) {
        /* a TLS read that waits for the socket to take bytes, or a write
         * that waits for input: the event they wait for is theirs */
        if ((events & EPOLLOUT) && uc->rd_want)
            events |= EPOLLIN;
        if ((events & EPOLLIN) && uc->wr_want)
            events |= EPOLLOUT;
    }
    if (uc->hc) {
        hc_event(e, uc, events);
        return;
    }
    if (uc->state == UC_IDLE) {
        /* an idle upstream spoke or closed: it cannot be used again */
        uc_close(e, uc);
        return;
    }
    uc->ops->event(e, uc, events);
}

int uc_set_mask(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    if (uc->ssl)
        events = uptls_mask(uc, events);
    if (uc->evmask == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = uc};
    uint32_t was = uc->evmask;
    uc->evmask = events;
    if ((events & EPOLLIN) && !(was & EPOLLIN) && e->core.n_ready)
        sws_ready_wants(e, &uc->ev); /* input OpenSSL holds: epoll will not say */
    return epoll_ctl(e->core.epfd, EPOLL_CTL_MOD, uc->fd, &ev);
}

static void pool_unlink(sws_upstream_t *up, upconn_t *uc)
{
    if (uc->iprev)
        uc->iprev->inext = uc->inext;
    else
        up->idle = uc->inext;
    if (uc->inext)
        uc->inext->iprev = uc->iprev;
    uc->iprev = uc->inext = NULL;
    up->n_idle--;
}

void uc_close(sws_engine_t *e, upconn_t *uc)
{
    if (uc->state == UC_IDLE)
        pool_unlink(uc->up, uc);
    else if (!uc->hc && uc->srv->active)
        uc->srv->active--;
    uc->srv->conns--;
    if (uc->srv->fcgi_drain == uc)
        uc->srv->fcgi_drain = NULL;
    if (uc->prev)
        uc->prev->next = uc->next;
    else
        e->up.upconns = uc->next;
    if (uc->next)
        uc->next->prev = uc->prev;
    if (uc->ssl)
        uptls_close(e, uc); /* close_notify when clean */
    else if (e->core.n_ready)
        sws_ready_remove(e, &uc->ev); /* an owner's bytes read ahead (FastCGI) */
    close(uc->fd); /* also leaves the epoll set (no fork shares it) */
    uc->fd = -1;
    sws_core_defer_free(e, &uc->ev); /* an event of this batch may still name it */
}

/* A non-blocking connect to srv; NULL with errno when it failed at once. */
upconn_t *uc_connect(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *srv,
                            int state)
{
    int family = srv->addr.ss_family;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    if (family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)&srv->addr, srv->addr_len);
    while (rc < 0 && errno == EINTR);
    if (rc < 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        errno = err == EAGAIN ? ECONNREFUSED : err; /* a full unix backlog refuses */
        return NULL;
    }
    upconn_t *uc = calloc(1, sizeof *uc);
    if (!uc) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    uc->ev.handler = uc_event;
    uc->fd = fd;
    uc->up = up;
    uc->srv = srv;
    srv->conns++;
    if (up->tls && uptls_attach(e, uc) < 0) {
        srv->conns--;
        close(fd);
        free(uc);
        errno = ENOMEM;
        return NULL;
    }
    /* A TLS connection connected at once still waits for EPOLLOUT, which
     * comes at once: its owner starts the handshake there. */
    int connected = rc == 0 && !uc->ssl;
    uc->state = connected ? UC_ACTIVE : UC_CONNECTING;
    if (state == UC_HEALTH) {
        uc->hc = 1;
        uc->state = connected ? UC_HEALTH : UC_CONNECTING;
    }
    uc->created = e->core.now;
    uc->evmask = EPOLLOUT;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = uc};
    if (epoll_ctl(e->core.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int err = errno;
        if (uc->ssl)
            uptls_close(e, uc);
        close(fd);
        free(uc);
        srv->conns--;
        errno = err;
        return NULL;
    }
    uc->next = e->up.upconns;
    if (e->up.upconns)
        e->up.upconns->prev = uc;
    e->up.upconns = uc;
    e->core.cnt.upstream_conns++;
    return uc;
}

const char *pool_refusal(const sws_engine_t *e, const upconn_t *uc)
{
    if (uc->srv->removed)
        return "the server left the group (DNS)";
    if (uc->requests >= uc->up->keepalive_requests)
        return "keepalive_requests reached";
    if (e->core.now - uc->created >= uc->up->keepalive_time_ms)
        return "connection too old";
    if (e->core.shutting_down)
        return "shutting down";
    if (uc->up->keepalive == 0)
        return "keepalive is 0";
    if (uc_tls_pending(uc))
        return "TLS input after the response";
    return NULL;
}

/* Puts uc in its group's pool, most recent first. Beyond `keepalive`
 * connections, uc gets the short deadline excess_ms (0: the oldest is
 * closed at once): the streams of HTTP/2 clients come in waves wider than
 * the pool, and closing the excess after each wave made nearly every
 * request of the next one connect (ADR 0020). At most `keepalive` pooled
 * connections have the long deadline (one gets it only while the pool is
 * within bounds), and the most recent are taken first, so the excess is
 * what the next wave reuses and what the tick closes once it stays idle. */
void pool_put(sws_engine_t *e, upconn_t *uc)
{
    sws_upstream_t *up = uc->up;
    if (uc->srv->active)
        uc->srv->active--;
    uc->owner = NULL;
    uc->ops = NULL;
    uc->state = UC_IDLE;
    uc->rd_want = uc->wr_want = 0;
    uc->deadline = e->core.now + up->keepalive_timeout_ms;
    uc->inext = up->idle;
    uc->iprev = NULL;
    if (up->idle)
        up->idle->iprev = uc;
    up->idle = uc;
    up->n_idle++;
    uc_set_mask(e, uc, EPOLLIN | EPOLLRDHUP); /* anything from an idle upstream: it closed */
    if (up->n_idle > up->keepalive && up->excess_ms) {
        uc->deadline = e->core.now + up->excess_ms;
    } else if (up->n_idle > up->keepalive) {
        upconn_t *old = up->idle;
        while (old->inext)
            old = old->inext;
        uc_close(e, old);
    }
}

/* An idle connection to srv, most recent first, or NULL. */
upconn_t *pool_take(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *srv)
{
    for (upconn_t *uc = up->idle; uc; uc = uc->inext) {
        if (uc->srv != srv)
            continue;
        pool_unlink(up, uc);
        uc->state = UC_ACTIVE;
        uc->deadline = 0;
        srv->active++;
        e->core.cnt.upstream_reused++;
        return uc;
    }
    return NULL;
}

void sws_up_tick(sws_engine_t *e)
{
    /* Restart the scan after each expiry of a busy connection: its owner
     * may close others. Closing an idle one closes only it (a burst's
     * extra connections expire together: no restart for each). */
    for (upconn_t *uc = e->up.upconns; uc;) {
        if (!uc->deadline || uc->deadline > e->core.now) {
            uc = uc->next;
            continue;
        }
        int dkind = uc->dkind;
        uc->deadline = 0;
        uc->dkind = 0;
        if (uc->state == UC_IDLE) {
            upconn_t *next = uc->next;
            uc_close(e, uc);
            uc = next;
            continue;
        }
        if (uc->hc)
            hc_done(e, uc, 0, "timed out");
        else
            uc->ops->expire(e, uc, dkind);
        uc = e->up.upconns;
    }
    /* The health gauges of the shared counters: this worker's view. */
    for (size_t i = 0; i < e->up.n_upstreams; i++) {
        sws_upstream_t *up = e->up.upstreams[i];
        uint64_t down = 0, conns = 0, busy = 0;
        if (up->n_removed)
            up_sweep_removed(e, up);
        size_t live = up->n_servers - up->n_removed; /* removed ones are last */
        for (size_t k = 0; k < live; k++)
            down += up->servers[k]->hc_down || up->servers[k]->down_until > e->core.now;
        for (size_t k = 0; k < up->n_servers; k++) {
            conns += up->servers[k]->conns;
            busy += up->servers[k]->active;
        }
        up->st->servers_down = down;
        up->st->servers_up = live - down;
        up->st->conns_busy = busy;
        up->st->conns_idle = conns > busy ? conns - busy : 0;
    }
    if (e->core.shutting_down)
        return;
    for (size_t i = 0; i < e->up.n_upstreams; i++) {
        sws_upstream_t *up = e->up.upstreams[i];
        if (!up->hc_request)
            continue;
        for (size_t k = 0; k < up->n_servers - up->n_removed; k++) {
            sws_upstream_server_t *s = up->servers[k];
            if (!s->hc_busy && s->hc_next <= e->core.now)
                hc_start(e, up, s);
        }
    }
}

void sws_up_shutdown(sws_engine_t *e)
{
    for (upconn_t *uc = e->up.upconns, *next; uc; uc = next) {
        next = uc->next;
        if (uc->state == UC_IDLE || uc->hc)
            uc_close(e, uc);
    }
}

void sws_up_close_all(sws_engine_t *e)
{
    while (e->up.upconns) {
        upconn_t *uc = e->up.upconns;
        if (uc->owner && uc->state != UC_IDLE && !uc->hc)
            uc->ops->kill(e, uc); /* closes uc too */
        else
            uc_close(e, uc);
    }
}

void sws_up_free(sws_engine_t *e)
{
    sws_up_close_all(e);
    for (size_t i = 0; i < e->up.n_upstreams; i++) {
        sws_upstream_t *up = e->up.upstreams[i];
        for (size_t k = 0; k < up->n_servers; k++)
            srv_free(up->servers[k]);
        free(up->servers);
        up->servers = NULL;
        up->n_servers = up->n_removed = 0;
        free(up->ring);
        up->ring = NULL;
    }
    free(e->up.upstreams);
    e->up.upstreams = NULL;
}
