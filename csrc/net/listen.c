/* Listening sockets and accept; contract in scalws/net.h. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "context.h"

#define ACCEPT_BATCH 64       /* accepts per listener event */

static void net_expire(sws_engine_t *e, sws_tnode_t *n, int which)
{
    sws_conn_t *c = CONN_OF_TNODE(n);
    c->proto->expire(e, c, which);
}

int sws_net_init(sws_engine_t *e)
{
    e->net.in_cap = e->core.lim.max_header_bytes + IN_EXTRA;
    e->net.in = malloc(e->net.in_cap);
    if (!e->net.in)
        return -ENOMEM;
    e->core.on_expire = net_expire;
    return 0;
}

void sws_net_free(sws_engine_t *e)
{
    for (size_t i = 0; i < e->net.n_listeners; i++)
        if (e->net.listeners[i].fd >= 0)
            close(e->net.listeners[i].fd);
    free(e->net.listeners);
    free(e->net.in);
    sws_net_tls_free(e);
}

static void do_accept(sws_engine_t *e, void *obj, uint32_t events);

/* An IPv4 or IPv6 address as text, and its port; the length, 0 for other
 * families. */
static size_t sockaddr_text(const struct sockaddr_storage *ss, char *addr, size_t cap, uint16_t *port)
{
    const void *a;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        a = &s4->sin_addr, *port = ntohs(s4->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        a = &s6->sin6_addr, *port = ntohs(s6->sin6_port);
    } else {
        return 0;
    }
    if (!inet_ntop(ss->ss_family, a, addr, (socklen_t)cap))
        return 0;
    return strlen(addr);
}

/* Bound to every address of its family (0.0.0.0, ::) or not an IP socket:
 * each connection's local address must be asked for. */
static int sockaddr_is_wildcard(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (ss->ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
    return 1;
}

void sws_listener_set_local(listener_t *l, int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int named = getsockname(fd, (struct sockaddr *)&ss, &sl) == 0;
    l->is_unix = named && ss.ss_family == AF_UNIX;
    if (named && !sockaddr_is_wildcard(&ss))
        l->local_len = (unsigned char)sockaddr_text(&ss, l->local_addr, sizeof l->local_addr, &l->local_port);
}

size_t sws_conn_local_addr(const sws_conn_t *c, char *addr, size_t cap, unsigned *port)
{
    const listener_t *l = c->lst;
    if (l && l->is_unix)
        return 0;
    if (l && l->local_len && cap > l->local_len) {
        memcpy(addr, l->local_addr, (size_t)l->local_len + 1);
        *port = l->local_port;
        return l->local_len;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    uint16_t p = 0;
    if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) < 0)
        return 0;
    size_t n = sockaddr_text(&ss, addr, cap, &p);
    *port = p;
    return n;
}

int sws_net_add_listener(sws_engine_t *e, int fd, const sws_proto_t *proto,
                         const sws_proto_t *alt, const void *conf, const sws_tls_listen_t *tls)
{
    /* Listeners are few and added before the first event: a realloc here
     * cannot move a listener that epoll already points at. */
    listener_t *nl = realloc(e->net.listeners, (e->net.n_listeners + 1) * sizeof *nl);
    if (!nl)
        return -ENOMEM;
    e->net.listeners = nl;
    for (size_t i = 0; i < e->net.n_listeners; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e->net.listeners[i]};
        if (e->net.listeners[i].enabled)
            epoll_ctl(e->core.epfd, EPOLL_CTL_MOD, e->net.listeners[i].fd, &ev);
    }
    listener_t *l = &e->net.listeners[e->net.n_listeners];
    memset(l, 0, sizeof *l);
    l->ev.handler = do_accept;
    l->fd = fd;
    l->proto = proto;
    l->alt = alt;
    l->conf = conf;
    l->tls = tls;
    l->enabled = 1;
    sws_listener_set_local(l, fd);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    if (epoll_ctl(e->core.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    e->net.n_listeners++;
    return 0;
}

void listeners_enable(sws_engine_t *e, int on)
{
    for (size_t i = 0; i < e->net.n_listeners; i++) {
        listener_t *l = &e->net.listeners[i];
        if (l->fd < 0 || l->enabled == on)
            continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        epoll_ctl(e->core.epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, &ev);
        l->enabled = on;
    }
    e->net.accept_paused = !on;
}

void sws_net_stop_listening(sws_engine_t *e)
{
    sws_steer_set(e, 0); /* the next worker of this index takes connections */
    listeners_enable(e, 0);
    for (size_t i = 0; i < e->net.n_listeners; i++) {
        if (e->net.listeners[i].fd >= 0) {
            close(e->net.listeners[i].fd); /* the master keeps its copy for the next workers */
            e->net.listeners[i].fd = -1;
        }
    }
}

void sws_net_tick(sws_engine_t *e)
{
    if (e->net.accept_paused && e->net.accept_resume && e->core.now >= e->net.accept_resume &&
        !e->core.shutting_down) {
        e->net.accept_resume = 0;
        if (e->core.cnt.active < e->core.lim.max_connections) {
            listeners_enable(e, 1);
            sws_steer_set(e, 0);
        }
    }
}

void conn_switch(sws_engine_t *e, sws_conn_t *c)
{
    const sws_proto_t *p = c->lst->alt;
    memset((char *)c + sizeof *c, 0, p->conn_size - sizeof *c);
    c->proto = p;
    c->ev.handler = p->event;
    p->open(e, c, c->lst->conf);
}

static void do_accept(sws_engine_t *e, void *obj, uint32_t events)
{
    listener_t *l = obj;
    if (!l->enabled)
        return;
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        if (e->core.cnt.active >= e->core.lim.max_connections) {
            listeners_enable(e, 0); /* back on when a connection closes */
            sws_steer_set(e, 1);
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                elog(e, SWS_L_CRIT, "accept() failed (%s): pausing new connections for %d ms",
                     strerror(errno), EMFILE_PAUSE_MS);
                listeners_enable(e, 0);
                sws_steer_set(e, 1);
                e->net.accept_resume = e->core.now + EMFILE_PAUSE_MS;
                return;
            }
            elog_folded(e, "accept() failed", (uint64_t)errno, SWS_L_ALERT, "accept() failed (%s)",
                        strerror(errno));
            return;
        }
        size_t size = l->proto->conn_size;
        if (l->alt && l->alt->conn_size > size)
            size = l->alt->conn_size;
        sws_conn_t *c = calloc(1, size);
        if (!c) {
            close(fd);
            return;
        }
        c->ev.handler = l->proto->event;
        c->fd = fd;
        c->proto = l->proto;
        c->lst = l;
        c->tr = &sws_plain_transport;
        c->tn.tlist = TL_NONE;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            c->peer_family = AF_INET;
            memcpy(c->peer, &sin->sin_addr, 4);
            c->peer_port = ntohs(sin->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            c->peer_family = AF_INET6;
            memcpy(c->peer, &sin6->sin6_addr, 16);
            c->peer_port = ntohs(sin6->sin6_port);
        } else {
            c->is_unix = 1;
        }
        if (!c->is_unix) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        /* EPOLLRDHUP: a client that leaves is seen even while the protocol
         * does not read (a request waiting on an upstream). */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(e->core.epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        c->evmask = EPOLLIN | EPOLLRDHUP;
        if (l->tls && sws_tls_accept(e, c, l->tls) < 0) {
            close(fd);
            free(c);
            continue;
        }
        e->core.cnt.accepted++;
        e->core.cnt.active++;
        e->core.st->conns_accepted++;
        if (l->tls) {
            e->core.st->conns_tls_accepted++;
            e->core.st->conns_tls_active++;
        }
        l->proto->open(e, c, l->conf);
        if (e->core.cnt.active >= e->core.lim.max_connections) {
            /* Full now: steer the next connections away before they queue
             * here (the check at the top would see it only at the next). */
            listeners_enable(e, 0);
            sws_steer_set(e, 1);
            return;
        }
    }
}
