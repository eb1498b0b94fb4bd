/* Client connections' bytes: the output batch, pending output, file
 * segments, stashed input, lingering close, close, and the plain transport;
 * contract in scalws/net.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "context.h"

/* ---- the plain transport ------------------------------------------------------ */

static ssize_t plain_recv(sws_conn_t *c, char *buf, size_t len)
{
    ssize_t got;
    do
        got = recv(c->fd, buf, len, 0);
    while (got < 0 && errno == EINTR);
    return got;
}

/* sendmsg, so that no write can raise SIGPIPE, whatever the process's
 * disposition. */
static ssize_t plain_sendv(sws_conn_t *c, const struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = (struct iovec *)iov,
                       .msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n)};
    ssize_t w;
    do
        w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w;
}

static ssize_t plain_sendfile(sws_conn_t *c, int fd, off_t *off, size_t len)
{
    ssize_t w;
    do
        w = sendfile(c->fd, fd, off, len);
    while (w < 0 && errno == EINTR);
    return w;
}

static void plain_shutdown(sws_conn_t *c) { shutdown(c->fd, SHUT_WR); }

const sws_transport_t sws_plain_transport = {plain_recv, plain_sendv, plain_sendfile,
                                             plain_shutdown};

ssize_t conn_recv(sws_conn_t *c, char *buf, size_t len) { return c->tr->recv(c, buf, len); }

/* ---- the output batch ------------------------------------------------------------ */

/* A caller put more in the batch than out_room granted it (a bug): the
 * worker stops (the master starts another) rather than write past the
 * batch, which is beside the engine's other state. */
__attribute__((noreturn, cold)) static void out_overflow(sws_engine_t *e, size_t n)
{
    elog(e, SWS_L_CRIT, "output batch overflow: %zu more bytes after %zu, %d iovecs of %d; "
         "stopping this worker", n, e->net.out_len, e->net.niov, OUT_IOV);
    abort();
}

#define OUT_CHECK(e, n, copied)                                                               \
    do {                                                                                      \
        if (__builtin_expect((e)->net.niov >= OUT_IOV ||                                      \
                                 ((copied) && (e)->net.out_len + (n) > OUT_BUF), 0))          \
            out_overflow(e, n);                                                               \
    } while (0)

void out_copy(sws_engine_t *e, const char *p, size_t n)
{
    OUT_CHECK(e, n, 1);
    sws_net_t *t = &e->net;
    struct iovec *last = t->niov ? &t->iov[t->niov - 1] : NULL;
    char *dst = t->out + t->out_len;
    memcpy(dst, p, n);
    t->out_len += n;
    if (last && (char *)last->iov_base + last->iov_len == dst) {
        last->iov_len += n;
    } else {
        t->iov[t->niov].iov_base = dst;
        t->iov[t->niov].iov_len = n;
        t->niov++;
    }
}

char *out_space(sws_engine_t *e) { return e->net.out + e->net.out_len; }

void out_commit(sws_engine_t *e, size_t n)
{
    OUT_CHECK(e, n, 1);
    sws_net_t *t = &e->net;
    struct iovec *last = t->niov ? &t->iov[t->niov - 1] : NULL;
    char *dst = t->out + t->out_len;
    t->out_len += n;
    if (last && (char *)last->iov_base + last->iov_len == dst) {
        last->iov_len += n;
    } else {
        t->iov[t->niov].iov_base = dst;
        t->iov[t->niov].iov_len = n;
        t->niov++;
    }
}

void out_ref(sws_engine_t *e, const char *p, size_t n)
{
    OUT_CHECK(e, n, 0);
    sws_net_t *t = &e->net;
    t->iov[t->niov].iov_base = (void *)p;
    t->iov[t->niov].iov_len = n;
    t->niov++;
}

void out_u64(sws_engine_t *e, uint64_t v)
{
    char buf[24], *p = buf + sizeof buf;
    do
        *--p = (char)('0' + v % 10);
    while (v /= 10);
    out_copy(e, p, (size_t)(buf + sizeof buf - p));
}

int out_room(const sws_engine_t *e, size_t need)
{
    return e->net.out_len + need <= OUT_BUF && e->net.niov + 5 <= OUT_IOV;
}

void out_discard(sws_engine_t *e)
{
    e->net.niov = 0;
    e->net.out_len = 0;
}

int conn_set_mask(sws_engine_t *e, sws_conn_t *c, uint32_t events)
{
    if (c->evmask == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    c->evmask = events;
    if ((events & EPOLLIN) && e->core.n_ready)
        sws_tls_wants_input(e, c); /* input OpenSSL holds: epoll will not say */
    return epoll_ctl(e->core.epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

void conn_limit_unsent(sws_conn_t *c, int bytes)
{
    if (!c->is_unix)
        setsockopt(c->fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes, sizeof bytes);
}

static int in_batch(const sws_engine_t *e, const void *p)
{
    return (const char *)p >= e->net.out && (const char *)p < e->net.out + OUT_BUF;
}

static int in_pend(const pend_t *p, const void *b)
{
    const char *data = (const char *)&p->iov[p->niov];
    return (const char *)b >= data && (const char *)b < data + p->dlen;
}

/* c->pend becomes what it still held followed by iov[0..niov): bytes in the
 * batch or in the old pending output are copied, the others stay
 * referenced. -1 when out of memory. */
static int pend_queue(sws_engine_t *e, sws_conn_t *c, const struct iovec *iov, int niov)
{
    pend_t *o = c->pend;
    int on = o ? o->niov - o->idx : 0;
    size_t copy = 0;
    for (int i = 0; i < on; i++)
        if (in_pend(o, o->iov[o->idx + i].iov_base))
            copy += o->iov[o->idx + i].iov_len;
    for (int i = 0; i < niov; i++)
        if (in_batch(e, iov[i].iov_base))
            copy += iov[i].iov_len;
    pend_t *p = malloc(sizeof *p + (size_t)(on + niov) * sizeof(struct iovec) + copy);
    if (!p)
        return -1;
    char *data = (char *)&p->iov[on + niov];
    p->idx = 0;
    p->niov = on + niov;
    p->dlen = copy;
    for (int i = 0; i < on + niov; i++) {
        const struct iovec *v = i < on ? &o->iov[o->idx + i] : &iov[i - on];
        p->iov[i] = *v;
        if (i < on ? in_pend(o, v->iov_base) : in_batch(e, v->iov_base)) {
            memcpy(data, v->iov_base, v->iov_len);
            p->iov[i].iov_base = data;
            data += v->iov_len;
        }
    }
    free(o);
    c->pend = p;
    return 0;
}

int conn_pend_own(sws_conn_t *c)
{
    pend_t *o = c->pend;
    if (!o)
        return 0;
    int n = o->niov - o->idx;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += o->iov[o->idx + i].iov_len;
    pend_t *p = malloc(sizeof *p + sizeof(struct iovec) + total);
    if (!p)
        return -1;
    char *data = (char *)&p->iov[1];
    p->idx = 0;
    p->niov = 1;
    p->dlen = total;
    p->iov[0].iov_base = data;
    p->iov[0].iov_len = total;
    for (int i = 0; i < n; i++) {
        memcpy(data, o->iov[o->idx + i].iov_base, o->iov[o->idx + i].iov_len);
        data += o->iov[o->idx + i].iov_len;
    }
    free(o);
    c->pend = p;
    return 0;
}

void conn_hold(sws_conn_t *c, sws_hold_t *h)
{
    h->next = c->holds;
    c->holds = h;
}

static void release_holds(sws_conn_t *c)
{
    while (c->holds) {
        sws_hold_t *h = c->holds;
        c->holds = h->next;
        h->release(h);
    }
}

int out_flush(sws_engine_t *e, sws_conn_t *c)
{
    if (c->pend) { /* what the socket has not taken yet goes first */
        int rc = e->net.niov ? pend_queue(e, c, e->net.iov, e->net.niov) : 0;
        out_discard(e);
        return rc;
    }
    struct iovec *iov = e->net.iov;
    int niov = e->net.niov;
    while (niov > 0) {
        ssize_t w = c->tr->sendv(c, iov, niov);
        if (w < 0) {
            if (errno == EAGAIN)
                break;
            out_discard(e);
            return -1;
        }
        e->core.st->bytes_out += (uint64_t)w;
        size_t n = (size_t)w;
        while (niov > 0 && n >= iov->iov_len) {
            n -= iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0 && n) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= n;
        }
    }
    if (niov > 0) {
        if (pend_queue(e, c, iov, niov) < 0) {
            out_discard(e);
            return -1;
        }
        conn_set_mask(e, c, EPOLLOUT);
        tl_set(e, &c->tn, TL_SEND);
    } else if (c->holds) {
        release_holds(c);
    }
    out_discard(e);
    return 0;
}

int pend_send(sws_engine_t *e, sws_conn_t *c)
{
    pend_t *p = c->pend;
    while (p && p->idx < p->niov) {
        int cnt = p->niov - p->idx;
        ssize_t w = c->tr->sendv(c, p->iov + p->idx, cnt);
        if (w < 0)
            return errno == EAGAIN ? 1 : -1;
        e->core.st->bytes_out += (uint64_t)w;
        tl_set(e, &c->tn, TL_SEND); /* progress restarts the send timeout */
        size_t n = (size_t)w;
        while (p->idx < p->niov && n >= p->iov[p->idx].iov_len)
            n -= p->iov[p->idx++].iov_len;
        if (p->idx < p->niov && n) {
            p->iov[p->idx].iov_base = (char *)p->iov[p->idx].iov_base + n;
            p->iov[p->idx].iov_len -= n;
        }
    }
    free(p);
    c->pend = NULL;
    release_holds(c);
    return 0;
}

/* ---- file segments ------------------------------------------------------------------ */

void conn_file_start(sws_engine_t *e, sws_conn_t *c, sws_file_t *f, uint64_t off, uint64_t len,
                     uint32_t chunk)
{
    c->file = f;
    c->file_off = off;
    c->file_left = len;
    c->file_chunk = chunk;
    if (len && !c->is_unix) {
        /* The head and the first file bytes in full segments (nginx's
         * tcp_nopush); uncorked after the first sendfile. */
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
        c->corked = 1;
    }
}

/* At most one chunk per call, so a fast client of a large file does not
 * starve the others (EPOLLOUT brings us back). A file that shrank under us
 * ends the connection: a short body must never look complete. */
int conn_send_file(sws_engine_t *e, sws_conn_t *c)
{
    if (c->file_left) {
        size_t chunk = c->file_left < c->file_chunk ? (size_t)c->file_left : c->file_chunk;
        off_t off = (off_t)c->file_off;
        ssize_t w = c->tr->sendfile(c, c->file->fd, &off, chunk);
        if (w < 0 && errno != EAGAIN)
            return -1;
        if (w == 0)
            return -1;
        if (w > 0) {
            e->core.st->bytes_out += (uint64_t)w;
            c->file_off += (uint64_t)w;
            c->file_left -= (uint64_t)w;
            if (c->corked) {
                /* The head went out with the first file bytes; staying corked
                 * would stall a client whose window is smaller than a full
                 * segment (200 ms a segment on loopback's 64 KiB MSS). */
                int zero = 0;
                setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
                c->corked = 0;
            }
        }
        if (c->file_left) {
            conn_set_mask(e, c, EPOLLOUT);
            tl_set(e, &c->tn, TL_SEND);
            return 0;
        }
    }
    sws_filecache_release(e->net.fc, c->file);
    c->file = NULL;
    if (c->corked) {
        int zero = 0;
        setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero); /* pushes the tail */
        c->corked = 0;
    }
    return 0;
}

/* ---- input ---------------------------------------------------------------------------- */

int conn_stash(sws_conn_t *c, const char *p, size_t n)
{
    char *s = realloc(c->stash, c->stash_len + n);
    if (!s)
        return -1;
    memcpy(s + c->stash_len, p, n);
    c->stash = s;
    c->stash_len += (uint32_t)n;
    return 0;
}

size_t conn_unstash(sws_engine_t *e, sws_conn_t *c)
{
    size_t len = c->stash_len;
    if (c->stash) {
        memcpy(e->net.in, c->stash, len);
        free(c->stash);
        c->stash = NULL;
        c->stash_len = 0;
    }
    return len;
}

/* ---- the end ------------------------------------------------------------------------------ */

void conn_close(sws_engine_t *e, sws_conn_t *c)
{
    c->proto->closing(e, c);
    tl_unlink(e, &c->tn);
    if (c->tls) {
        e->core.st->conns_tls_active--;
        sws_tls_conn_free(e, c);
    }
    close(c->fd); /* also removes it from the epoll set */
    free(c->stash);
    free(c->pend);
    free(c->heap);
    release_holds(c);
    if (c->file)
        sws_filecache_release(e->net.fc, c->file);
    c->fd = -1;
    sws_core_defer_free(e, &c->ev);
    e->core.cnt.active--;
    e->core.cnt.handled++;
    if (!e->core.cnt.active && e->core.n_rbuf)
        sws_rbuf_drain(e); /* idle: the upstream read buffers kept go */
    if (e->net.accept_paused && !e->core.shutting_down &&
        e->core.cnt.active < e->core.lim.max_connections && e->net.accept_resume == 0)
        listeners_enable(e, 1);
    if (e->net.steer_full)
        sws_steer_room(e);
}

/* Unread input does not turn our close into a reset that could destroy the
 * response in flight (nginx's lingering close). */
void conn_linger(sws_engine_t *e, sws_conn_t *c)
{
    if (c->lingering)
        return;
    c->tr->shutdown(c);
    c->lingering = 1;
    c->linger_bytes = 0;
    free(c->stash);
    c->stash = NULL;
    c->stash_len = 0;
    tl_set(e, &c->tn, TL_LINGER);
}

int conn_linger_input(sws_engine_t *e, sws_conn_t *c, size_t n)
{
    c->linger_bytes += (uint32_t)n; /* n is at most a read buffer */
    if (c->linger_bytes > LINGER_BYTES) {
        conn_close(e, c);
        return 1;
    }
    return 0;
}
