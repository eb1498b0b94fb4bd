/* The reverse proxy of the connection engine (contract: scalws/engine.h,
 * "reverse proxy"; internals shared with engine.c in engine_int.h).
 *
 * A proxied request is a `px`: the client connection, one upstream
 * connection (`upconn`) at a time, and one read buffer. Bytes stream both
 * ways with backpressure and bounded memory:
 *
 *   client --body--> px->w (what the upstream has not taken yet) --> upstream
 *   upstream --> px->rbuf --> client (referenced by the client's pending
 *   output when the client is slow; the upstream is not read again until
 *   the client has taken it all)
 *
 * so a proxied request holds at most buffer_size bytes of response and one
 * client read (max_header_bytes + 64 KiB) of request body, whatever the
 * sizes. Request bodies are de-chunked and re-chunked on the way (one chunk
 * per read), response bodies likewise; Content-Length bodies are copied
 * through. Interest in events is recomputed from the state by px_sync()
 * after every step, so no path has to remember which mask it left behind.
 *
 * Upstream connections are kept per group in a most-recently-used pool;
 * whether one goes back is decided by reuse_refusal(), the one place that
 * lists every reason not to. Failures before any response byte reached the
 * client go to the next server when allowed (px_retry_ok), else become
 * 502/504; failures after it close the client connection so the truncation
 * shows. Timeouts of upstream connections are deadlines the 250 ms tick
 * scans: there are few of them (busy requests and the pools).
 */
#define _GNU_SOURCE
#include "engine_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define RESP_HEADERS_MAX 128     /* upstream response fields; more: 502 */
#define RESP_HEAD_MAX (24 * 1024) /* our rebuilt response head must fit the batch */
#define RING_POINTS 160          /* consistent-hash points per unit of weight */
#define RID_MAX 64
#define CONN_TOKENS_MAX 16

enum { UC_CONNECTING, UC_ACTIVE, UC_IDLE, UC_HEALTH };
enum { RS_HEAD, RS_BODY, RS_DONE, RS_TUNNEL };
enum { D_NONE, D_CONNECT, D_SEND, D_READ };
/* What went wrong, for retries, passive health and the log. */
enum { F_CONNECT, F_CONNECT_TIMEOUT, F_RESET, F_READ_TIMEOUT, F_SEND_TIMEOUT, F_BAD_RESPONSE };

typedef struct upconn {
    int type; /* T_UPSTREAM: first, as in sws_conn */
    int fd;
    struct upconn *prev, *next;   /* e->upconns */
    struct upconn *iprev, *inext; /* the group's idle pool */
    sws_upstream_t *up;
    sws_upstream_server_t *srv;
    struct px *px;
    int state;                    /* UC_* */
    int hc;                       /* a health check, not traffic */
    uint32_t evmask;
    uint64_t deadline;            /* monotonic ms; 0: none */
    int dkind;                    /* what the deadline is for: D_* */
    uint64_t created;
    uint32_t requests;            /* requests sent on it */
    size_t hc_sent;               /* health check: request bytes sent, */
    size_t hc_len;                /* response bytes read into hc_buf */
    char hc_buf[16];
} upconn_t;

typedef struct px {
    sws_conn_t *c;
    upconn_t *uc;
    const sws_proxy_t *p;
    sws_upstream_t *up;
    int method, minor, keepalive, upgrade;
    int rs;                       /* RS_* */
    int status;
    unsigned started : 1,         /* a response byte went to the client */
        req_done : 1,             /* the whole request body went into w */
        req_chunked : 1,
        can_retry : 1,            /* head[] holds the whole request */
        out_chunked : 1,          /* the client gets chunked framing from us */
        out_close : 1,            /* the client's response ends with the connection */
        junk : 1,                 /* bytes after the response: do not reuse */
        up_eof : 1,               /* tunnel: the upstream closed */
        in_start : 1,             /* px_start is on the stack: errors are returned, not sent */
        head_close : 1;           /* our head told the client Connection: close */
    int early_status;             /* the error px_start returns */
    uint32_t attempts;
    uint64_t t_sent;              /* CLOCK_MONOTONIC ns when the attempt began */
    uint64_t tried;               /* servers tried, by index (first 64) */
    uint64_t hash;                /* balance: hash */
    uint64_t req_left;            /* Content-Length body bytes still to come */
    sws_chunked_decoder_t rdec;   /* chunked request body */
    char *head;                   /* rebuilt head (+ the body when it came whole), for retries */
    size_t head_len;
    char *w;                      /* bytes for the upstream */
    size_t wlen, woff, wcap;
    sws_response_info_t ri;
    uint64_t resp_left;
    sws_chunked_decoder_t dec;
    size_t sent;                  /* body bytes to the client, for the log */
    char *rbuf;
    size_t rcap, rlen, last_len;
    reqview_t log;
    sws_header_t log_h[2];        /* Referer, User-Agent, for the log */
    char rid[RID_MAX];
    size_t rid_len;
    char logbuf[];                /* method, target, host, referer, user-agent */
} px_t;

static void px_sync(sws_engine_t *e, px_t *x);
/* Functions returning int here return 1 when the px is gone (finished,
 * failed over to an error page, or its client closed): the caller must not
 * touch it (nor its client) again; 0 when it goes on. */
static int px_attempt(sws_engine_t *e, px_t *x);
static void px_finish(sws_engine_t *e, px_t *x);
static void up_read(sws_engine_t *e, px_t *x);
static int up_write(sws_engine_t *e, px_t *x);

/* ---- small helpers ---------------------------------------------------------- */

static int name_is(const sws_header_t *h, const char *lower, size_t n)
{
    return h->name_len == n && strncasecmp(h->name, lower, n) == 0;
}

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return mix64(h);
}

static int idempotent(int m)
{
    return m == SWS_M_GET || m == SWS_M_HEAD || m == SWS_M_PUT || m == SWS_M_DELETE ||
           m == SWS_M_OPTIONS || m == SWS_M_TRACE;
}

/* Appends to px->w, growing it; -1 when out of memory. */
static int w_put(px_t *x, const char *p, size_t n)
{
    if (x->wlen + n > x->wcap) {
        if (x->woff) { /* what was written is dead: slide the rest down */
            memmove(x->w, x->w + x->woff, x->wlen - x->woff);
            x->wlen -= x->woff;
            x->woff = 0;
        }
        if (x->wlen + n > x->wcap) {
            size_t cap = x->wcap ? x->wcap : 4096;
            while (cap < x->wlen + n)
                cap *= 2;
            char *nw = realloc(x->w, cap);
            if (!nw)
                return -1;
            x->w = nw;
            x->wcap = cap;
        }
    }
    memcpy(x->w + x->wlen, p, n);
    x->wlen += n;
    return 0;
}

static int w_chunk(px_t *x, const char *p, size_t n)
{
    char line[24];
    int k = snprintf(line, sizeof line, "%zx\r\n", n);
    return w_put(x, line, (size_t)k) | w_put(x, p, n) | w_put(x, "\r\n", 2);
}

static const char *fail_text(int kind)
{
    switch (kind) {
    case F_CONNECT: return "connect() failed";
    case F_CONNECT_TIMEOUT: return "upstream timed out while connecting";
    case F_RESET: return "upstream closed or reset the connection";
    case F_READ_TIMEOUT: return "upstream timed out while reading the response";
    case F_SEND_TIMEOUT: return "upstream timed out while sending the request";
    default: return "upstream sent an invalid response";
    }
}

/* ---- trusted proxies --------------------------------------------------------- */

void sws_engine_set_trusted(sws_engine_t *e, const sws_cidr_t *list, size_t n)
{
    e->trusted = (sws_cidr_t *)list;
    e->n_trusted = n;
}

static int cidr_match(const sws_cidr_t *c, int family, const unsigned char *a)
{
    if (c->family != family)
        return 0;
    int bits = c->bits, i = 0;
    for (; bits >= 8; bits -= 8, i++)
        if (c->addr[i] != a[i])
            return 0;
    if (bits && ((c->addr[i] ^ a[i]) & (0xff00 >> bits) & 0xff))
        return 0;
    return 1;
}

static int trusted_addr(const sws_engine_t *e, int family, const unsigned char *a)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (family == AF_INET6 && memcmp(a, mapped, 12) == 0) {
        family = AF_INET;
        a += 12;
    }
    for (size_t i = 0; i < e->n_trusted; i++)
        if (cidr_match(&e->trusted[i], family, a))
            return 1;
    return 0;
}

static int trusted_text(const sws_engine_t *e, const char *s, size_t n)
{
    char buf[64];
    unsigned char a[16];
    if (n == 0 || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET, buf, a) == 1)
        return trusted_addr(e, AF_INET, a);
    if (inet_pton(AF_INET6, buf, a) == 1)
        return trusted_addr(e, AF_INET6, a);
    return 0;
}

static int peer_trusted(const sws_engine_t *e, const sws_conn_t *c)
{
    return !c->is_unix && e->n_trusted && trusted_addr(e, c->peer_family, c->peer);
}

/* ---- upstream connections ------------------------------------------------------ */

static int uc_set_mask(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    if (uc->evmask == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = uc};
    uc->evmask = events;
    return epoll_ctl(e->epfd, EPOLL_CTL_MOD, uc->fd, &ev);
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

static void uc_close(sws_engine_t *e, upconn_t *uc)
{
    if (uc->state == UC_IDLE)
        pool_unlink(uc->up, uc);
    else if (!uc->hc && uc->srv->active)
        uc->srv->active--;
    if (uc->prev)
        uc->prev->next = uc->next;
    else
        e->upconns = uc->next;
    if (uc->next)
        uc->next->prev = uc->prev;
    close(uc->fd); /* also leaves the epoll set (no fork shares it) */
    uc->type = T_DEAD; /* freed after this batch of events (px_bury) */
    uc->fd = -1;
    uc->next = e->dead_ups;
    e->dead_ups = uc;
}

void px_bury(sws_engine_t *e)
{
    while (e->dead_conns) {
        sws_conn_t *c = e->dead_conns;
        e->dead_conns = c->tnext;
        free(c);
    }
    while (e->dead_ups) {
        upconn_t *uc = e->dead_ups;
        e->dead_ups = uc->next;
        free(uc);
    }
}

/* A non-blocking connect to srv; NULL with errno when it failed at once. */
static upconn_t *uc_connect(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *srv,
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
    uc->type = T_UPSTREAM;
    uc->fd = fd;
    uc->up = up;
    uc->srv = srv;
    uc->state = rc < 0 ? UC_CONNECTING : UC_ACTIVE;
    if (state == UC_HEALTH) {
        uc->hc = 1;
        uc->state = rc < 0 ? UC_CONNECTING : UC_HEALTH;
    }
    uc->created = e->now;
    uc->evmask = EPOLLOUT;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = uc};
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int err = errno;
        close(fd);
        free(uc);
        errno = err;
        return NULL;
    }
    uc->next = e->upconns;
    if (e->upconns)
        e->upconns->prev = uc;
    e->upconns = uc;
    e->cnt.upstream_conns++;
    return uc;
}

/* The one place that says whether an upstream connection may serve another
 * request: NULL when it may, else why not (each reason has its test in
 * tests/e2e/test_proxy.py). */
static const char *reuse_refusal(const sws_engine_t *e, const px_t *x, const upconn_t *uc)
{
    if (x->rs == RS_TUNNEL)
        return "upgraded to a tunnel";
    if (x->rs != RS_DONE)
        return "response not fully read";
    if (!x->req_done || x->woff < x->wlen)
        return "request not fully sent";
    if (x->junk)
        return "bytes after the response";
    if (!x->ri.keepalive)
        return "upstream said Connection: close";
    if (uc->requests >= x->up->keepalive_requests)
        return "keepalive_requests reached";
    if (e->now - uc->created >= x->up->keepalive_time_ms)
        return "connection too old";
    if (e->shutting_down)
        return "shutting down";
    if (x->up->keepalive == 0)
        return "keepalive is 0";
    return NULL;
}

/* Puts uc in its group's pool (most recent first), evicting the oldest
 * when the pool is full. */
static void pool_put(sws_engine_t *e, upconn_t *uc)
{
    sws_upstream_t *up = uc->up;
    if (uc->srv->active)
        uc->srv->active--;
    uc->px = NULL;
    uc->state = UC_IDLE;
    uc->deadline = e->now + up->keepalive_timeout_ms;
    uc->inext = up->idle;
    uc->iprev = NULL;
    if (up->idle)
        up->idle->iprev = uc;
    up->idle = uc;
    up->n_idle++;
    uc_set_mask(e, uc, EPOLLIN | EPOLLRDHUP); /* anything from an idle upstream: it closed */
    if (up->n_idle > up->keepalive) {
        upconn_t *old = up->idle;
        while (old->inext)
            old = old->inext;
        uc_close(e, old);
    }
}

/* An idle connection to srv, most recent first, or NULL. */
static upconn_t *pool_take(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *srv)
{
    for (upconn_t *uc = up->idle; uc; uc = uc->inext) {
        if (uc->srv != srv)
            continue;
        pool_unlink(up, uc);
        uc->state = UC_ACTIVE;
        uc->deadline = 0;
        srv->active++;
        e->cnt.upstream_reused++;
        return uc;
    }
    return NULL;
}

/* ---- balancing and passive health --------------------------------------------- */

static int srv_usable(const sws_engine_t *e, const sws_upstream_server_t *s)
{
    return !s->hc_down && s->down_until <= e->now && (!s->max_conns || s->active < s->max_conns);
}

static int tried(const px_t *x, size_t i) { return i < 64 && (x->tried >> i) & 1; }

/* Smooth weighted round robin (as nginx) over the usable, untried servers
 * of one tier; least_conn first narrows them to the fewest connections per
 * weight. -1 when none. */
static int pick_rr(sws_engine_t *e, px_t *x, int backup, int least)
{
    sws_upstream_t *up = x->up;
    int best = -1;
    int64_t total = 0;
    size_t ai = 0, aw = 1; /* least_conn: the smallest active/weight seen */
    int have_least = 0;
    if (least) {
        for (size_t i = 0; i < up->n_servers; i++) {
            sws_upstream_server_t *s = &up->servers[i];
            if (s->backup != backup || tried(x, i) || !srv_usable(e, s))
                continue;
            if (!have_least || (uint64_t)s->active * aw < (uint64_t)ai * s->weight) {
                ai = s->active;
                aw = s->weight;
                have_least = 1;
            }
        }
    }
    for (size_t i = 0; i < up->n_servers; i++) {
        sws_upstream_server_t *s = &up->servers[i];
        if (s->backup != backup || tried(x, i) || !srv_usable(e, s))
            continue;
        if (least && (uint64_t)s->active * aw != (uint64_t)ai * s->weight)
            continue;
        s->cw += s->weight;
        total += s->weight;
        if (best < 0 || s->cw > up->servers[best].cw)
            best = (int)i;
    }
    if (best >= 0)
        up->servers[best].cw -= total;
    return best;
}

/* Consistent hashing: the first ring point at or after the key's hash whose
 * server is usable and untried. */
static int pick_hash(sws_engine_t *e, px_t *x)
{
    sws_upstream_t *up = x->up;
    if (!up->ring_len)
        return -1;
    uint64_t h = x->hash >> 16;
    size_t lo = 0, hi = up->ring_len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((up->ring[mid] >> 16) < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = 0; k < up->ring_len; k++) {
        size_t i = (size_t)(up->ring[(lo + k) % up->ring_len] & 0xffff);
        if (!tried(x, i) && srv_usable(e, &up->servers[i]))
            return (int)i;
    }
    return -1;
}

static int pick_server(sws_engine_t *e, px_t *x)
{
    sws_upstream_t *up = x->up;
    int i = -1;
    if (up->balance == SWS_BAL_HASH)
        i = pick_hash(e, x);
    else
        i = pick_rr(e, x, 0, up->balance == SWS_BAL_LEAST_CONN);
    if (i < 0)
        i = pick_rr(e, x, 1, up->balance == SWS_BAL_LEAST_CONN); /* the backups */
    return i;
}

static void srv_fail(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *s)
{
    e->cnt.upstream_errors++;
    /* A group of one has nowhere else to go: never mark it down (nginx). */
    if (up->n_servers < 2 || !s->max_fails)
        return;
    if (e->now - s->fail_start >= s->fail_timeout_ms) {
        s->fail_start = e->now;
        s->fails = 0;
    }
    if (++s->fails < s->max_fails)
        return;
    s->fails = 0;
    if (up->hc_request) {
        s->hc_down = 1; /* back when the active checks pass `rise` times */
        s->hc_pass = 0;
        elog(e, SWS_L_WARN, "upstream server %s of \"%s\" marked down after %u failures; "
             "health checks will bring it back", s->name, up->name, s->max_fails);
    } else {
        s->down_until = e->now + s->fail_timeout_ms;
        elog(e, SWS_L_WARN, "upstream server %s of \"%s\" marked down for %u ms after %u failures",
             s->name, up->name, s->fail_timeout_ms, s->max_fails);
    }
}

/* ---- starting a request ---------------------------------------------------------- */

static int sane_rid(const char *s, size_t n)
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

static size_t put_str(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return n;
}
#define PUT(lit) (q += put_str(q, lit, sizeof lit - 1))
#define PUTN(s, n) (q += put_str(q, s, n))

static int pct_keep(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           strchr("-._~!$&'()*+,;=:@/", ch) != NULL;
}

/* The target sent upstream: the client's as sent when no rewrite applies,
 * else path_prefix + (the normalized path less strip_prefix), re-encoded,
 * plus the query. Writes to q (room: 3 * path + prefix + query). */
static size_t make_target(const sws_proxy_t *p, const reqview_t *r, const char *path,
                          size_t path_len, const char *raw_path, char *q0)
{
    char *q = q0;
    const char *tend = r->target + r->target_len;
    if (!p->strip_prefix_len && !p->path_prefix_len) {
        if (raw_path < r->target || raw_path > tend) { /* "/" made up for an empty absolute-form path */
            const char *qm = memchr(r->target, '?', r->target_len);
            PUT("/");
            if (qm)
                PUTN(qm, (size_t)(tend - qm));
        } else {
            PUTN(raw_path, (size_t)(tend - raw_path));
        }
        return (size_t)(q - q0);
    }
    const char *rest = path;
    size_t rest_len = path_len;
    if (p->strip_prefix_len && rest_len >= p->strip_prefix_len &&
        memcmp(rest, p->strip_prefix, p->strip_prefix_len) == 0) {
        rest += p->strip_prefix_len;
        rest_len -= p->strip_prefix_len;
    }
    PUTN(p->path_prefix, p->path_prefix_len);
    if (q > q0 && q[-1] == '/' && rest_len && rest[0] == '/') {
        rest++;
        rest_len--;
    }
    if (q == q0 && (rest_len == 0 || rest[0] != '/'))
        PUT("/");
    for (size_t i = 0; i < rest_len; i++) {
        unsigned char ch = (unsigned char)rest[i];
        if (pct_keep(ch)) {
            *q++ = (char)ch;
        } else {
            static const char hx[] = "0123456789ABCDEF";
            *q++ = '%';
            *q++ = hx[ch >> 4];
            *q++ = hx[ch & 15];
        }
    }
    const char *qm = memchr(r->target, '?', r->target_len);
    if (qm)
        PUTN(qm, (size_t)(tend - qm));
    return (size_t)(q - q0);
}

static int in_tokens(const sws_header_t *h, const char *const *tok, const size_t *tlen, int nt)
{
    for (int i = 0; i < nt; i++)
        if (h->name_len == tlen[i] && strncasecmp(h->name, tok[i], tlen[i]) == 0)
            return 1;
    return 0;
}

/* Splits the Connection option lists of headers[] into tok[] (at most
 * CONN_TOKENS_MAX). */
static int conn_tokens(const sws_header_t *h, size_t nh, const char **tok, size_t *tlen)
{
    int nt = 0;
    for (size_t i = 0; i < nh; i++) {
        if (!name_is(&h[i], "connection", 10))
            continue;
        const char *s = h[i].value, *end = s + h[i].value_len;
        while (s < end && nt < CONN_TOKENS_MAX) {
            while (s < end && (*s == ',' || *s == ' ' || *s == '\t'))
                s++;
            const char *t = s;
            while (s < end && *s != ',' && *s != ' ' && *s != '\t')
                s++;
            if (s > t) {
                tok[nt] = t;
                tlen[nt++] = (size_t)(s - t);
            }
        }
    }
    return nt;
}

static int dropped(const sws_header_t *h, const sws_hname_t *drop, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (name_is(h, drop[i].name, drop[i].name_len))
            return 1;
    return 0;
}

/* Request fields never passed on as the client sent them: hop-by-hop ones
 * (RFC 9110 §7.6.1), the ones we set, framing we redo. */
static int req_hop(const sws_header_t *h)
{
    int hop = 0;
    switch (h->name_len) {
    case 2: hop = name_is(h, "te", 2); break;
    case 4: hop = name_is(h, "host", 4); break;
    case 6: hop = name_is(h, "expect", 6); break;
    case 7: hop = name_is(h, "trailer", 7) || name_is(h, "upgrade", 7); break;
    case 10: hop = name_is(h, "connection", 10) || name_is(h, "keep-alive", 10); break;
    case 12: hop = name_is(h, "x-request-id", 12); break;
    case 15: hop = name_is(h, "x-forwarded-for", 15); break;
    case 16: hop = name_is(h, "x-forwarded-host", 16); break;
    case 17: hop = name_is(h, "transfer-encoding", 17) || name_is(h, "x-forwarded-proto", 17); break;
    default: break;
    }
    return hop || (h->name_len > 6 && strncasecmp(h->name, "proxy-", 6) == 0);
}

static const char *hval(const reqview_t *r, const char *name, size_t n, size_t *len)
{
    const sws_header_t *h = find_header(r, name, n);
    if (!h)
        return NULL;
    *len = h->value_len;
    return h->value;
}

/* Builds x->head: the request line and fields for the upstream. */
static int build_head(sws_engine_t *e, px_t *x, const reqview_t *r, const sws_request_info_t *info,
                      const char *path, size_t path_len, const char *raw_path, size_t body_room)
{
    const sws_proxy_t *p = x->p;
    sws_conn_t *c = x->c;
    int trusted = peer_trusted(e, c);
    const char *tok[CONN_TOKENS_MAX];
    size_t tlen[CONN_TOKENS_MAX];
    int nt = conn_tokens(r->h, r->nh, tok, tlen);
    size_t cap = r->method_len + 3 * r->target_len + p->path_prefix_len + 64 + p->req_set_len + 512 +
                 2 * (r->host_len + 1) + p->host_len + RID_MAX + body_room;
    size_t xff_len = 0;
    for (size_t i = 0; i < r->nh; i++) {
        cap += r->h[i].name_len + r->h[i].value_len + 4;
        if (name_is(&r->h[i], "x-forwarded-for", 15))
            xff_len += r->h[i].value_len + 2;
    }
    cap += xff_len;
    char *q0 = malloc(cap);
    if (!q0)
        return -1;
    char *q = q0;
    PUTN(r->method, r->method_len);
    PUT(" ");
    q += make_target(p, r, path, path_len, raw_path, q);
    PUT(" HTTP/1.1\r\nHost: ");
    if (p->host)
        PUTN(p->host, p->host_len);
    else if (r->host)
        PUTN(r->host, r->host_len);
    else if (x->up->servers[0].addr.ss_family == AF_UNIX)
        PUT("localhost");
    else
        PUTN(x->up->servers[0].name, strlen(x->up->servers[0].name));
    PUT("\r\n");
    for (size_t i = 0; i < r->nh; i++) {
        const sws_header_t *h = &r->h[i];
        if (req_hop(h) || in_tokens(h, tok, tlen, nt) || dropped(h, p->req_drop, p->n_req_drop))
            continue;
        PUTN(h->name, h->name_len);
        PUT(": ");
        PUTN(h->value, h->value_len);
        PUT("\r\n");
    }
    /* X-Forwarded-For: a trusted peer's list, plus the peer. */
    PUT("X-Forwarded-For: ");
    if (trusted) {
        for (size_t i = 0; i < r->nh; i++) {
            if (!name_is(&r->h[i], "x-forwarded-for", 15) || !r->h[i].value_len)
                continue;
            PUTN(r->h[i].value, r->h[i].value_len);
            PUT(", ");
        }
    }
    char peer[64];
    size_t peer_len = (size_t)(put_peer(peer, c) - peer);
    PUTN(peer, peer_len);
    size_t vl;
    const char *v;
    PUT("\r\nX-Forwarded-Proto: ");
    if (trusted && (v = hval(r, "x-forwarded-proto", 17, &vl)))
        PUTN(v, vl);
    else
        PUT("http");
    if (trusted && (v = hval(r, "x-forwarded-host", 16, &vl))) {
        PUT("\r\nX-Forwarded-Host: ");
        PUTN(v, vl);
    } else if (r->host) {
        PUT("\r\nX-Forwarded-Host: ");
        PUTN(r->host, r->host_len);
    }
    PUT("\r\nX-Request-Id: ");
    PUTN(x->rid, x->rid_len);
    PUT("\r\n");
    PUTN(p->req_set, p->req_set_len);
    if (x->upgrade && (v = hval(r, "upgrade", 7, &vl))) {
        PUT("Connection: upgrade\r\nUpgrade: ");
        PUTN(v, vl);
        PUT("\r\n");
    }
    if (info->chunked)
        PUT("Transfer-Encoding: chunked\r\n");
    PUT("\r\n");
    x->head = q0;
    x->head_len = (size_t)(q - q0);
    return 0;
}

/* The client address balance: hash uses: the peer, or with trusted proxies
 * the right-most untrusted X-Forwarded-For entry. */
static void client_key(const sws_engine_t *e, const sws_conn_t *c, const reqview_t *r,
                       const char **k, size_t *kl, char *peer)
{
    *kl = (size_t)(put_peer(peer, c) - peer);
    *k = peer;
    if (!peer_trusted(e, c))
        return;
    for (size_t i = r->nh; i-- > 0;) {
        if (!name_is(&r->h[i], "x-forwarded-for", 15))
            continue;
        const char *s = r->h[i].value, *end = s + r->h[i].value_len;
        while (end > s) {
            const char *t = end;
            while (t > s && t[-1] != ',')
                t--;
            const char *a = t, *b = end;
            while (a < b && (*a == ' ' || *a == '\t'))
                a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                b--;
            *k = a;
            *kl = (size_t)(b - a);
            if (!trusted_text(e, a, (size_t)(b - a)))
                return;
            end = t > s ? t - 1 : s;
        }
    }
}

/* Body bytes from the client: de-chunked and re-chunked, or counted down.
 * Returns the input bytes used (the rest is the next request) or -1 for a
 * malformed chunked body. */
static ssize_t body_in(sws_engine_t *e, px_t *x, char *buf, size_t len)
{
    if (x->req_done)
        return 0;
    if (!x->req_chunked) {
        size_t take = len < x->req_left ? len : (size_t)x->req_left;
        if (take && w_put(x, buf, take) < 0)
            return -1;
        x->req_left -= take;
        x->req_done = x->req_left == 0;
        return (ssize_t)take;
    }
    size_t n = len;
    ssize_t rest = sws_decode_chunked(&x->rdec, buf, &n);
    if (rest == SWS_PARSE_ERROR || x->rdec.total > e->lim.max_body_bytes)
        return -1;
    if (n && w_chunk(x, buf, n) < 0)
        return -1;
    if (rest == SWS_PARSE_INCOMPLETE)
        return (ssize_t)len;
    x->req_done = 1;
    if (w_put(x, "0\r\n\r\n", 5) < 0)
        return -1;
    /* sws_decode_chunked moved the bytes after the body to buf + n */
    memmove(buf + (len - (size_t)rest), buf + n, (size_t)rest);
    return (ssize_t)(len - (size_t)rest);
}

static void log_copy(px_t *x, const reqview_t *r)
{
    char *q = x->logbuf;
    x->log = *r;
    x->log.method = q;
    q += put_str(q, r->method, r->method_len);
    x->log.target = q;
    q += put_str(q, r->target, r->target_len);
    if (r->host) {
        x->log.host = q;
        q += put_str(q, r->host, r->host_len);
    }
    size_t nh = 0;
    const sws_header_t *ref = find_header(r, "referer", 7);
    const sws_header_t *ua = find_header(r, "user-agent", 10);
    if (ref) {
        x->log_h[nh] = (sws_header_t){"referer", 7, q, ref->value_len};
        q += put_str(q, ref->value, ref->value_len);
        nh++;
    }
    if (ua) {
        x->log_h[nh] = (sws_header_t){"user-agent", 10, q, ua->value_len};
        q += put_str(q, ua->value, ua->value_len);
        nh++;
    }
    x->log.h = x->log_h;
    x->log.nh = nh;
    x->log.rid = x->rid;
    x->log.rid_len = x->rid_len;
}

static void px_free(px_t *x)
{
    free(x->head);
    free(x->w);
    free(x->rbuf);
    free(x);
}

int px_start(sws_engine_t *e, sws_conn_t *c, const reqview_t *r, const sws_request_info_t *info,
             const sws_proxy_t *p, const char *path, size_t path_len, const char *raw_path,
             int keepalive, char *body_buf, size_t body_len, size_t *took)
{
    *took = 0;
    const sws_header_t *ref = find_header(r, "referer", 7);
    const sws_header_t *ua = find_header(r, "user-agent", 10);
    size_t logn = r->method_len + r->target_len + (r->host ? r->host_len : 0) +
                  (ref ? ref->value_len : 0) + (ua ? ua->value_len : 0);
    px_t *x = calloc(1, sizeof *x + logn);
    if (!x)
        return 500;
    x->c = c;
    x->p = p;
    x->up = p->up;
    x->method = sws_method_id(r->method, r->method_len);
    x->minor = r->minor;
    x->keepalive = keepalive;
    x->upgrade = info->upgrade;
    x->req_chunked = info->chunked;
    x->req_left = info->has_content_length ? info->content_length : 0;
    x->req_done = !info->chunked && x->req_left == 0;
    /* X-Request-Id: a trusted peer's sane one, else ours. */
    const sws_header_t *rh = find_header(r, "x-request-id", 12);
    if (rh && peer_trusted(e, c) && sane_rid(rh->value, rh->value_len)) {
        memcpy(x->rid, rh->value, rh->value_len);
        x->rid_len = rh->value_len;
    } else {
        static const char hx[] = "0123456789abcdef";
        uint64_t id = next_request_id(e);
        for (int i = 0; i < 16; i++)
            x->rid[i] = hx[(id >> (60 - 4 * i)) & 15];
        x->rid_len = 16;
    }
    log_copy(x, r);
    if (x->up->balance == SWS_BAL_HASH) {
        char peer[64];
        const char *k = NULL;
        size_t kl = 0;
        if (x->up->hash_key == SWS_HASH_URI) {
            k = r->target;
            kl = r->target_len;
        } else if (x->up->hash_key == SWS_HASH_HEADER) {
            const sws_header_t *hh = find_header(r, x->up->hash_header, x->up->hash_header_len);
            if (hh) {
                k = hh->value;
                kl = hh->value_len;
            } else {
                k = "";
            }
        } else {
            client_key(e, c, r, &k, &kl, peer);
        }
        x->hash = hash_bytes(k, kl);
    }
    x->rcap = p->buffer_size;
    x->rbuf = malloc(x->rcap);
    /* The body that came with the head is held in head[] too when it is
     * the whole body: then a retry can send it again. */
    size_t room = body_len + 32;
    if (!x->rbuf || build_head(e, x, r, info, path, path_len, raw_path, room) < 0) {
        px_free(x);
        return 500;
    }
    ssize_t used = body_in(e, x, body_buf, body_len);
    if (used < 0) {
        px_free(x);
        c->close_after = 1; /* the body's framing is lost */
        return 400;
    }
    *took = (size_t)used;
    x->can_retry = x->req_done;
    if (x->can_retry && x->wlen) { /* fold the whole body into head[] */
        memcpy(x->head + x->head_len, x->w, x->wlen);
        x->head_len += x->wlen;
        x->wlen = 0;
    }
    /* w = the head (and the body so far, which stays behind it) */
    size_t body_so_far = x->wlen;
    char *nw = malloc(x->head_len + body_so_far + 1);
    if (!nw) {
        px_free(x);
        return 500;
    }
    memcpy(nw, x->head, x->head_len);
    if (body_so_far)
        memcpy(nw + x->head_len, x->w, body_so_far);
    free(x->w);
    x->w = nw;
    x->wlen = x->head_len + body_so_far;
    x->wcap = x->wlen + 1;
    x->woff = 0;
    c->px = x;
    tl_unlink(e, c);
    x->in_start = 1;
    px_attempt(e, x); /* cannot close c or finish x while in_start */
    x->in_start = 0;
    if (x->early_status) {
        int status = x->early_status;
        c->px = NULL;
        if (x->uc)
            uc_close(e, x->uc);
        /* conn_process answers and reads past the body as for any answer,
         * unless decoding the chunked body in place destroyed its framing. */
        if (x->req_chunked && used)
            c->close_after = 1;
        px_free(x);
        return status;
    }
    e->px_inflight++;
    return 0;
}

/* ---- sending the request ------------------------------------------------------------ */

/* Refills w with the head for another attempt. */
static int rearm_request(px_t *x)
{
    if (x->head_len > x->wcap) {
        char *nw = realloc(x->w, x->head_len);
        if (!nw)
            return -1;
        x->w = nw;
        x->wcap = x->head_len;
    }
    memcpy(x->w, x->head, x->head_len);
    x->wlen = x->head_len;
    x->woff = 0;
    return 0;
}

/* Answers the client with an error page in place of the upstream's
 * response, and ends the proxied request. */
static int px_answer_error(sws_engine_t *e, px_t *x, int status)
{
    sws_conn_t *c = x->c;
    if (x->in_start) {
        x->early_status = status; /* conn_process answers it like any other */
        return 1;
    }
    x->status = status;
    x->rs = RS_DONE;
    x->junk = 1; /* nothing here can go back to a pool */
    put_response(e, &e->err[err_index(status)], x->method == SWS_M_HEAD, x->minor,
                  x->keepalive && x->req_done && !e->shutting_down);
    x->sent = e->err[err_index(status)].body_len;
    x->started = 1;
    if (out_flush(e, c) < 0) {
        conn_close(e, c);
        return 1;
    }
    px_finish(e, x);
    return 1;
}

/* May this failure go to the next server? Only before the response began,
 * only with the whole request at hand, and a request that may have reached
 * the upstream only when its method is idempotent. A reset of a reused
 * connection (the upstream closed it while we sent) does not count as an
 * attempt: it says nothing about the server. */
static int px_retry_ok(const sws_engine_t *e, const px_t *x, int kind, int reused)
{
    if (x->started || !x->can_retry || e->shutting_down)
        return 0;
    if (kind == F_READ_TIMEOUT || kind == F_SEND_TIMEOUT || kind == F_BAD_RESPONSE)
        return 0;
    if (kind == F_RESET && !idempotent(x->method))
        return 0;
    if (kind == F_RESET && reused)
        return 1;
    return x->attempts <= x->p->retries;
}

/* The upstream side failed: log it with the address, count it for passive
 * health, then retry, answer 502/504, or cut the client connection short. */
static int px_fail(sws_engine_t *e, px_t *x, int kind, int err)
{
    upconn_t *uc = x->uc;
    sws_conn_t *c = x->c;
    int reused = 0;
    if (uc) {
        reused = uc->requests > 1;
        char peer[64];
        *put_peer(peer, c) = '\0';
        elog(e, SWS_L_ERROR, "%s%s%s, upstream: %s, request: \"%.*s %.*s\", client: %s",
             fail_text(kind), err ? ": " : "", err ? strerror(err) : "", uc->srv->name,
             (int)x->log.method_len, x->log.method, (int)x->log.target_len, x->log.target, peer);
        if (kind == F_RESET && reused) {
            /* The pool handed us a connection the server had closed: that
             * says nothing about the server, which may be tried again (the
             * next try takes another pooled connection or a fresh one). */
            size_t i = (size_t)(uc->srv - x->up->servers);
            if (i < 64)
                x->tried &= ~(1ull << i);
            x->attempts--;
        } else {
            srv_fail(e, x->up, uc->srv);
        }
        x->uc = NULL;
        uc_close(e, uc);
    }
    if (px_retry_ok(e, x, kind, reused)) {
        if (rearm_request(x) == 0)
            return px_attempt(e, x);
    }
    if (!x->started)
        return px_answer_error(e, x, kind == F_READ_TIMEOUT || kind == F_CONNECT_TIMEOUT ||
                                             kind == F_SEND_TIMEOUT ? 504 : 502);
    /* Mid-body: the client must see the truncation, never a complete-looking
     * response: what is pending goes out, then the connection ends. */
    x->status = x->status ? x->status : 502;
    x->junk = 1;
    c->close_after = 1;
    px_finish(e, x);
    return 1;
}

static int px_attempt(sws_engine_t *e, px_t *x)
{
    sws_upstream_t *up = x->up;
    for (;;) {
        int i = pick_server(e, x);
        if (i < 0) {
            elog(e, SWS_L_ERROR, "no live upstreams in \"%s\" while proxying \"%.*s %.*s\"", up->name,
                 (int)x->log.method_len, x->log.method, (int)x->log.target_len, x->log.target);
            return px_answer_error(e, x, 502);
        }
        sws_upstream_server_t *s = &up->servers[i];
        if (i < 64)
            x->tried |= 1ull << i;
        x->attempts++;
        upconn_t *uc = pool_take(e, up, s);
        if (!uc) {
            uc = uc_connect(e, up, s, UC_ACTIVE);
            if (!uc) {
                int err = errno;
                elog(e, SWS_L_ERROR, "connect() failed: %s, upstream: %s, request: \"%.*s %.*s\"",
                     strerror(err), s->name, (int)x->log.method_len, x->log.method,
                     (int)x->log.target_len, x->log.target);
                srv_fail(e, up, s);
                if (px_retry_ok(e, x, F_CONNECT, 0))
                    continue;
                return px_answer_error(e, x, 502);
            }
            s->active++;
        }
        uc->px = x;
        uc->requests++;
        x->uc = uc;
        x->rs = RS_HEAD;
        x->rlen = x->last_len = 0;
        if (e->lim.batch_window_us)
            x->t_sent = mono_ns(); /* only the batching window reads answer times */
        uc->dkind = D_NONE;
        if (uc->state == UC_CONNECTING) {
            uc->deadline = e->now + x->p->connect_timeout_ms;
            uc->dkind = D_CONNECT;
        } else if (up_write(e, x)) {
            return 1;
        }
        px_sync(e, x);
        return 0;
    }
}

/* Sends what w holds. */
static int up_write(sws_engine_t *e, px_t *x)
{
    upconn_t *uc = x->uc;
    while (x->woff < x->wlen) {
        ssize_t n = send(uc->fd, x->w + x->woff, x->wlen - x->woff, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return px_fail(e, x, F_RESET, errno);
        }
        x->woff += (size_t)n;
        uc->dkind = D_NONE; /* progress: px_sync starts the timeout again */
    }
    if (x->woff == x->wlen)
        x->woff = x->wlen = 0;
    return 0;
}

/* ---- state -> events ----------------------------------------------------------------- */

static void px_sync(sws_engine_t *e, px_t *x)
{
    sws_conn_t *c = x->c;
    upconn_t *uc = x->uc;
    int wpending = x->woff < x->wlen;
    int connecting = uc && uc->state == UC_CONNECTING;
    if (uc) {
        uint32_t m;
        if (connecting) {
            m = EPOLLOUT;
        } else {
            int read_ok = x->rs != RS_DONE && !c->pend && !x->up_eof;
            m = (wpending ? EPOLLOUT : 0) | (read_ok ? EPOLLIN | EPOLLRDHUP : 0);
            /* Which timeout runs: sending (send_timeout), waiting for the
             * answer or tunnel traffic (read_timeout), or none while we wait
             * on the client (its body, or its slow reading: the client's own
             * timeouts rule). Progress resets dkind, restarting it. */
            int want = wpending                                   ? D_SEND
                       : !read_ok                                 ? D_NONE
                       : !x->req_done && x->rs == RS_HEAD         ? D_NONE
                                                                  : D_READ;
            if (want == D_NONE) {
                uc->dkind = D_NONE;
                uc->deadline = 0; /* also a deadline left from before the pause */
            } else if (want != uc->dkind) {
                uc->dkind = want;
                uc->deadline = want == D_SEND   ? e->now + x->p->send_timeout_ms
                               : want == D_READ ? e->now + x->p->read_timeout_ms
                                                : 0;
            }
        }
        uc_set_mask(e, uc, m);
    }
    uint32_t cm;
    int want_body = !x->req_done || x->rs == RS_TUNNEL;
    if (c->pend)
        cm = EPOLLOUT;
    else if (want_body)
        cm = uc && !connecting && !wpending ? EPOLLIN | EPOLLRDHUP : EPOLLRDHUP;
    else /* the next pipelined requests are read ahead into the stash, bounded */
        cm = c->stash_len < e->in_cap ? EPOLLIN | EPOLLRDHUP : EPOLLRDHUP;
    conn_set_mask(e, c, cm); /* usually unchanged: no system call */
    if (c->pend)
        ; /* out_flush armed TL_SEND */
    else if (want_body && (cm & EPOLLIN) && x->rs != RS_TUNNEL) {
        if (c->tlist != TL_HEADER)
            tl_set(e, c, TL_HEADER); /* the body read timeout */
    } else {
        tl_unlink(e, c);
    }
}

/* ---- the response ------------------------------------------------------------------------ */

static int resp_hop(const sws_header_t *h)
{
    int hop = 0;
    switch (h->name_len) {
    case 2: hop = name_is(h, "te", 2); break;
    case 4: hop = name_is(h, "date", 4); break;
    case 6: hop = name_is(h, "server", 6); break;
    case 7: hop = name_is(h, "trailer", 7) || name_is(h, "upgrade", 7); break;
    case 10: hop = name_is(h, "connection", 10) || name_is(h, "keep-alive", 10); break;
    case 12: hop = name_is(h, "x-request-id", 12); break;
    case 14: hop = name_is(h, "content-length", 14); break;
    case 17: hop = name_is(h, "transfer-encoding", 17); break;
    default: break;
    }
    return hop || (h->name_len > 6 && strncasecmp(h->name, "proxy-", 6) == 0);
}

/* Queues the client's response head for a parsed upstream head. */
static void put_head(sws_engine_t *e, px_t *x, int status, const char *reason, size_t reason_len,
                     const sws_header_t *h, size_t nh)
{
    const sws_proxy_t *p = x->p;
    const char *tok[CONN_TOKENS_MAX];
    size_t tlen[CONN_TOKENS_MAX];
    int nt = conn_tokens(h, nh, tok, tlen);
    char line[64];
    int n = snprintf(line, sizeof line, "HTTP/1.1 %03d ", status);
    out_copy(e, line, (size_t)n);
    out_copy(e, reason, reason_len);
    out_copy(e, "\r\n", 2);
    out_copy(e, e->server_line, e->server_line_len);
    out_copy(e, "Date: ", 6);
    out_copy(e, e->date, SWS_HTTP_DATE_LEN);
    out_copy(e, "\r\n", 2);
    const char *upg = NULL;
    size_t upg_len = 0;
    for (size_t i = 0; i < nh; i++) {
        if (name_is(&h[i], "upgrade", 7)) {
            upg = h[i].value;
            upg_len = h[i].value_len;
        }
        if (resp_hop(&h[i]) || in_tokens(&h[i], tok, tlen, nt) ||
            dropped(&h[i], p->resp_drop, p->n_resp_drop))
            continue;
        out_copy(e, h[i].name, h[i].name_len);
        out_copy(e, ": ", 2);
        out_copy(e, h[i].value, h[i].value_len);
        out_copy(e, "\r\n", 2);
    }
    out_copy(e, p->resp_set, p->resp_set_len);
    out_str(e, "X-Request-Id: ");
    out_copy(e, x->rid, x->rid_len);
    out_copy(e, "\r\n", 2);
    if (x->rs == RS_TUNNEL) {
        out_str(e, "Connection: upgrade\r\nUpgrade: ");
        out_copy(e, upg, upg_len);
        out_copy(e, "\r\n\r\n", 4);
        return;
    }
    if (x->ri.no_body) {
        if (x->ri.has_content_length && status != 204 && status >= 200) {
            n = snprintf(line, sizeof line, "Content-Length: %llu\r\n",
                         (unsigned long long)x->ri.content_length);
            out_copy(e, line, (size_t)n);
        }
    } else if (x->ri.chunked || x->ri.close_delimited) {
        if (x->minor >= 1) {
            out_str(e, "Transfer-Encoding: chunked\r\n");
            x->out_chunked = 1;
        } else {
            x->out_close = 1; /* HTTP/1.0: the end of the connection ends the body */
        }
    } else {
        n = snprintf(line, sizeof line, "Content-Length: %llu\r\n",
                     (unsigned long long)x->ri.content_length);
        out_copy(e, line, (size_t)n);
    }
    /* An answer that comes before the whole request body ends the connection:
     * the rest of the body is not read. */
    int keep = x->keepalive && !x->out_close && !e->shutting_down && x->req_done;
    x->head_close = !keep;
    out_conn_end(e, x->minor, keep);
}

/* Body bytes from the upstream into the batch (referenced in rbuf).
 * Returns 0, or -1 for malformed framing. */
static int body_out(sws_engine_t *e, px_t *x, char *data, size_t n)
{
    if (x->rs == RS_TUNNEL) {
        if (n)
            out_ref(e, data, n);
        return 0;
    }
    size_t m = n;
    int done = 0;
    if (x->ri.chunked) {
        ssize_t rest = sws_decode_chunked(&x->dec, data, &m);
        if (rest == SWS_PARSE_ERROR)
            return -1;
        if (rest >= 0) {
            done = 1;
            x->junk |= rest > 0;
        }
    } else if (!x->ri.close_delimited) {
        if (m > x->resp_left) {
            x->junk = 1;
            m = (size_t)x->resp_left;
        }
        x->resp_left -= m;
        done = x->resp_left == 0;
    }
    if (m) {
        if (x->out_chunked) {
            char line[24];
            int k = snprintf(line, sizeof line, "%zx\r\n", m);
            out_copy(e, line, (size_t)k);
            out_ref(e, data, m);
            out_copy(e, "\r\n", 2);
        } else {
            out_ref(e, data, m);
        }
        x->sent += m;
    }
    if (done) {
        if (x->out_chunked)
            out_copy(e, "0\r\n\r\n", 5);
        x->rs = RS_DONE;
    }
    return 0;
}

/* Sends the batch to the client; 0, or -1 when the client is gone (and
 * closed, the px with it). */
static int to_client(sws_engine_t *e, px_t *x)
{
    sws_conn_t *c = x->c;
    if (!e->niov)
        return 0;
    x->started = 1;
    if (out_flush(e, c) < 0) {
        conn_close(e, c);
        return -1;
    }
    return 0;
}

/* The upstream's end of a close-delimited body or tunnel, or a failure. */
static void up_eof(sws_engine_t *e, px_t *x, int err)
{
    if (x->rs == RS_TUNNEL) {
        x->up_eof = 1;
        if (x->uc) {
            uc_close(e, x->uc);
            x->uc = NULL;
        }
        if (!x->c->pend)
            conn_close(e, x->c);
        return;
    }
    if (x->rs == RS_BODY && x->ri.close_delimited && !err) {
        if (x->out_chunked)
            out_copy(e, "0\r\n\r\n", 5);
        x->rs = RS_DONE;
        x->junk = 1; /* it is closed anyway */
        if (to_client(e, x) < 0)
            return;
        px_finish(e, x);
        return;
    }
    if (x->rs == RS_HEAD && x->rlen)
        px_fail(e, x, F_BAD_RESPONSE, 0); /* a partial head, then nothing */
    else
        px_fail(e, x, F_RESET, err);
}

static void up_read(sws_engine_t *e, px_t *x)
{
    upconn_t *uc = x->uc;
    sws_conn_t *c = x->c;
    if (x->rlen == x->rcap) {
        px_fail(e, x, F_BAD_RESPONSE, 0); /* a head bigger than buffer_size */
        return;
    }
    ssize_t got;
    do
        got = recv(uc->fd, x->rbuf + x->rlen, x->rcap - x->rlen, 0);
    while (got < 0 && errno == EINTR);
    if (got < 0 && errno == EAGAIN)
        return;
    if (got <= 0) {
        up_eof(e, x, got < 0 ? errno : 0);
        return;
    }
    x->rlen += (size_t)got;
    uc->dkind = D_NONE; /* progress */
    size_t body_off = 0;
    while (x->rs == RS_HEAD) {
        int minor, status;
        const char *reason;
        size_t reason_len, nh = RESP_HEADERS_MAX;
        sws_header_t h[RESP_HEADERS_MAX];
        int n = sws_parse_response(x->rbuf, x->rlen, &minor, &status, &reason, &reason_len, h, &nh,
                                   x->last_len);
        if (n == SWS_PARSE_INCOMPLETE) {
            x->last_len = x->rlen;
            if (x->rlen == x->rcap)
                px_fail(e, x, F_BAD_RESPONSE, 0);
            else
                px_sync(e, x); /* restarts the read timeout */
            return;
        }
        if (n < 0) {
            px_fail(e, x, F_BAD_RESPONSE, 0);
            return;
        }
        x->last_len = 0;
        if (status >= 100 && status < 200 && status != 101) {
            /* interim (100, 103): not passed on; the final answer follows */
            memmove(x->rbuf, x->rbuf + n, x->rlen - (size_t)n);
            x->rlen -= (size_t)n;
            continue;
        }
        if (sws_analyze_response(x->method, minor, status, h, nh, &x->ri) < 0 ||
            (status == 101 && (!x->upgrade || !x->ri.upgrade)) || (size_t)n > RESP_HEAD_MAX) {
            px_fail(e, x, F_BAD_RESPONSE, 0);
            return;
        }
        uc->srv->fails = 0;
        if (e->lim.batch_window_us) { /* how long upstreams take to answer: its signal */
            uint64_t took = mono_ns() - x->t_sent;
            e->up_wait_ns = e->up_wait_ns - e->up_wait_ns / 16 + took / 16;
        }
        x->status = status;
        x->resp_left = x->ri.content_length;
        if (status == 101) {
            x->rs = RS_TUNNEL;
            x->keepalive = 0;
        } else {
            x->rs = x->ri.no_body || (!x->ri.chunked && !x->ri.close_delimited && !x->resp_left)
                        ? RS_DONE
                        : RS_BODY;
        }
        put_head(e, x, status, reason, reason_len, h, nh);
        body_off = (size_t)n;
        if (x->rs == RS_TUNNEL && c->stash) {
            /* bytes the client sent after its upgrade request belong to the tunnel */
            if (w_put(x, c->stash, c->stash_len) < 0) {
                e->niov = 0; /* the 101 head queued for this client goes nowhere */
                e->out_len = 0;
                conn_close(e, c);
                return;
            }
            free(c->stash);
            c->stash = NULL;
            c->stash_len = 0;
            c->resume = 0;
        }
        if (x->rs == RS_DONE)
            x->junk |= x->rlen > body_off;
    }
    if (x->rs != RS_DONE && x->rlen > body_off &&
        body_out(e, x, x->rbuf + body_off, x->rlen - body_off) < 0) {
        e->niov = 0; /* a head queued with this body must not go out: a 502 replaces it */
        e->out_len = 0;
        px_fail(e, x, F_BAD_RESPONSE, 0);
        return;
    }
    if (to_client(e, x) < 0)
        return;
    if (!c->pend)
        x->rlen = 0; /* all of it went; else rbuf stays referenced until it has */
    if (x->rs == RS_DONE) {
        px_finish(e, x);
        return;
    }
    if (x->rs == RS_TUNNEL && x->wlen > x->woff && up_write(e, x))
        return;
    px_sync(e, x);
}

/* ---- the end of a proxied request --------------------------------------------------- */

static void px_finish(sws_engine_t *e, px_t *x)
{
    sws_conn_t *c = x->c;
    upconn_t *uc = x->uc;
    access_log(e, c, &x->log, x->status, x->sent);
    e->cnt.requests++;
    if (uc) {
        const char *why = reuse_refusal(e, x, uc);
        x->uc = NULL;
        if (why) {
            elog(e, SWS_L_DEBUG, "upstream connection to %s not kept: %s", uc->srv->name, why);
            uc_close(e, uc);
        } else {
            pool_put(e, uc);
        }
    }
    c->px = NULL;
    e->px_inflight--;
    if (c->pend) { /* the last bytes are still referenced: rbuf goes with them */
        c->heap = x->rbuf;
        x->rbuf = NULL;
    }
    int close = !x->keepalive || x->out_close || !x->req_done || e->shutting_down ||
                c->close_after || x->rs == RS_TUNNEL || x->head_close;
    px_free(x);
    if (close)
        c->close_after = 1;
    if (c->pend)
        return; /* conn_write finishes: then conn_settle closes or goes on */
    conn_set_mask(e, c, EPOLLIN | EPOLLRDHUP);
    conn_settle(e, c, NULL, 0);
}

/* ---- events ---------------------------------------------------------------------------- */

/* The client socket is writable again: send what it owes, then resume. */
static void client_write(sws_engine_t *e, sws_conn_t *c)
{
    int rc = pend_send(e, c);
    if (rc < 0)
        conn_close(e, c);
    if (rc)
        return;
    px_t *x = c->px;
    if (x->rs != RS_HEAD)
        x->rlen = 0; /* the client has all of rbuf (a head still arriving stays) */
    if (x->up_eof) {
        conn_close(e, c);
        return;
    }
    px_sync(e, x);
}

void px_client_event(sws_engine_t *e, sws_conn_t *c, uint32_t events)
{
    px_t *x = c->px;
    if (c->pend) {
        client_write(e, c);
        return;
    }
    if (!(c->evmask & EPOLLIN)) {
        /* Reading is paused: only a client that went away matters (the
         * event may also be an EPOLLIN from before the mask changed in this
         * batch). px_client_gone logs it. */
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_close(e, c);
        return;
    }
    int want_body = !x->req_done || x->rs == RS_TUNNEL;
    size_t room = want_body ? e->in_cap : e->in_cap - c->stash_len;
    ssize_t got;
    do
        got = recv(c->fd, e->in, room, 0);
    while (got < 0 && errno == EINTR);
    if (got < 0 && errno == EAGAIN)
        return;
    if (got <= 0) {
        conn_close(e, c); /* the client left: the upstream request is void */
        return;
    }
    size_t len = (size_t)got;
    if (!want_body) { /* the next request, pipelined: kept for later */
        char *s = realloc(c->stash, c->stash_len + len);
        if (!s) {
            conn_close(e, c);
            return;
        }
        memcpy(s + c->stash_len, e->in, len);
        c->stash = s;
        c->stash_len += (uint32_t)len;
        c->resume = 1;
        px_sync(e, x);
        return;
    }
    if (x->rs == RS_TUNNEL) {
        if (w_put(x, e->in, len) < 0) {
            conn_close(e, c);
            return;
        }
    } else {
        ssize_t used = body_in(e, x, e->in, len);
        if (used < 0) {
            conn_close(e, c); /* malformed chunked body: framing lost */
            return;
        }
        tl_set(e, c, TL_HEADER);
        if ((size_t)used < len) { /* the next request, pipelined: kept for later */
            size_t rest = len - (size_t)used;
            char *s = realloc(c->stash, c->stash_len + rest);
            if (!s) {
                conn_close(e, c);
                return;
            }
            memcpy(s + c->stash_len, e->in + used, rest);
            c->stash = s;
            c->stash_len += (uint32_t)rest;
            c->resume = 1;
        }
        x->can_retry = 0; /* the body is no longer all in head[] */
    }
    if (x->rs == RS_TUNNEL && x->uc)
        x->uc->dkind = D_NONE; /* tunnel traffic either way keeps it open */
    if (x->uc && x->uc->state != UC_CONNECTING && up_write(e, x))
        return;
    px_sync(e, x);
}

static void hc_event(sws_engine_t *e, upconn_t *uc, uint32_t events);

void px_upstream_event(sws_engine_t *e, upconn_t *uc, uint32_t events)
{
    if (uc->hc) {
        hc_event(e, uc, events);
        return;
    }
    if (uc->state == UC_IDLE) {
        /* an idle upstream spoke or closed: it cannot be used again */
        uc_close(e, uc);
        return;
    }
    px_t *x = uc->px;
    if (uc->state == UC_CONNECTING) {
        int err = 0;
        socklen_t sl = sizeof err;
        getsockopt(uc->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
        if (err) {
            px_fail(e, x, F_CONNECT, err);
            return;
        }
        uc->state = UC_ACTIVE;
        uc->deadline = 0;
        uc->dkind = D_NONE;
        if (up_write(e, x))
            return;
        px_sync(e, x);
        return;
    }
    if ((events & EPOLLOUT) && x->woff < x->wlen && up_write(e, x))
        return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        if (x->c->pend || x->rs == RS_DONE) {
            if (events & (EPOLLHUP | EPOLLERR)) {
                px_fail(e, x, F_RESET, ECONNRESET);
                return;
            }
        } else {
            up_read(e, x);
            return;
        }
    }
    px_sync(e, x);
}

void px_client_gone(sws_engine_t *e, sws_conn_t *c)
{
    px_t *x = c->px;
    c->px = NULL;
    if (!x)
        return;
    e->px_inflight--;
    if (x->uc) {
        if (!x->started)
            elog(e, SWS_L_INFO, "client closed the connection before the upstream %s answered "
                 "\"%.*s %.*s\"", x->uc->srv->name, (int)x->log.method_len, x->log.method,
                 (int)x->log.target_len, x->log.target);
        uc_close(e, x->uc); /* never reused: its response was not read to the end */
    }
    /* px_finish did not run: the request is logged here, 499 (nginx's
     * "client closed") when no answer had started */
    access_log(e, c, &x->log, x->started ? x->status : 499, x->sent);
    e->cnt.requests++;
    px_free(x);
}

/* ---- active health checks ---------------------------------------------------------------- */

static void hc_done(sws_engine_t *e, upconn_t *uc, int ok, const char *why)
{
    sws_upstream_t *up = uc->up;
    sws_upstream_server_t *s = uc->srv;
    s->hc_busy = 0;
    s->hc_next = e->now + up->hc_interval_ms;
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

static void hc_start(sws_engine_t *e, sws_upstream_t *up, sws_upstream_server_t *s)
{
    upconn_t *uc = uc_connect(e, up, s, UC_HEALTH);
    s->hc_busy = 1;
    if (!uc) {
        s->hc_busy = 0;
        s->hc_next = e->now + up->hc_interval_ms;
        s->hc_pass = 0;
        if (!s->hc_down && ++s->hc_fail >= up->hc_fall) {
            s->hc_down = 1;
            elog(e, SWS_L_WARN, "upstream server %s of \"%s\" is down: health check connect() failed (%s)",
                 s->name, up->name, strerror(errno));
        }
        return;
    }
    e->cnt.upstream_conns--; /* checks are not traffic */
    uc->deadline = e->now + up->hc_timeout_ms;
    if (uc->state == UC_HEALTH)
        hc_event(e, uc, EPOLLOUT);
}

static void hc_event(sws_engine_t *e, upconn_t *uc, uint32_t events)
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
        uc->state = UC_HEALTH;
    }
    while (uc->hc_sent < up->hc_request_len) {
        ssize_t n = send(uc->fd, up->hc_request + uc->hc_sent, up->hc_request_len - uc->hc_sent,
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
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
    ssize_t n = recv(uc->fd, uc->hc_buf + uc->hc_len, sizeof uc->hc_buf - uc->hc_len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
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

/* ---- registration, tick, stop ------------------------------------------------------------- */

static int ring_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int sws_upstream_server_set_addr(sws_upstream_server_t *s, const char *host, int port,
                                 const char *unix_path)
{
    memset(&s->addr, 0, sizeof s->addr);
    if (!host) {
        struct sockaddr_un *sun = (struct sockaddr_un *)&s->addr;
        size_t n = strlen(unix_path);
        if (n >= sizeof sun->sun_path)
            return -EINVAL;
        sun->sun_family = AF_UNIX;
        memcpy(sun->sun_path, unix_path, n + 1);
        s->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        return 0;
    }
    struct sockaddr_in *sin = (struct sockaddr_in *)&s->addr;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&s->addr;
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        s->addr_len = sizeof *sin;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        s->addr_len = sizeof *sin6;
        return 0;
    }
    return -EINVAL;
}

int sws_engine_add_upstream(sws_engine_t *e, sws_upstream_t *u)
{
    sws_upstream_t **nu = realloc(e->upstreams, (e->n_upstreams + 1) * sizeof *nu);
    if (!nu)
        return -ENOMEM;
    e->upstreams = nu;
    if (u->balance == SWS_BAL_HASH) {
        size_t total = 0;
        for (size_t i = 0; i < u->n_servers; i++)
            if (!u->servers[i].backup)
                total += (size_t)u->servers[i].weight * RING_POINTS;
        u->ring = malloc((total ? total : 1) * sizeof *u->ring);
        if (!u->ring)
            return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < u->n_servers && i < 0x10000; i++) {
            if (u->servers[i].backup)
                continue;
            const char *nm = u->servers[i].name;
            for (uint32_t pt = 0; pt < u->servers[i].weight * RING_POINTS; pt++) {
                char key[160];
                int kl = snprintf(key, sizeof key, "%s-%u", nm, pt);
                u->ring[k++] = (hash_bytes(key, (size_t)kl) & ~0xffffull) | i;
            }
        }
        qsort(u->ring, k, sizeof *u->ring, ring_cmp);
        u->ring_len = k;
    }
    for (size_t i = 0; i < u->n_servers; i++)
        u->servers[i].hc_next = e->now; /* first check at the first tick */
    e->upstreams[e->n_upstreams++] = u;
    return 0;
}

void px_tick(sws_engine_t *e)
{
    /* Restart the scan after each expiry: handling one may close others. */
    for (upconn_t *uc = e->upconns; uc;) {
        if (!uc->deadline || uc->deadline > e->now) {
            uc = uc->next;
            continue;
        }
        int dkind = uc->dkind;
        uc->deadline = 0;
        uc->dkind = D_NONE;
        if (uc->state == UC_IDLE) {
            uc_close(e, uc);
        } else if (uc->hc) {
            hc_done(e, uc, 0, "timed out");
        } else {
            px_t *x = uc->px;
            int kind = dkind == D_CONNECT ? F_CONNECT_TIMEOUT
                       : dkind == D_SEND  ? F_SEND_TIMEOUT
                                          : F_READ_TIMEOUT;
            if (x->rs == RS_TUNNEL) {
                conn_close(e, x->c);
            } else {
                px_fail(e, x, kind, 0);
            }
        }
        uc = e->upconns;
    }
    if (e->shutting_down)
        return;
    for (size_t i = 0; i < e->n_upstreams; i++) {
        sws_upstream_t *up = e->upstreams[i];
        if (!up->hc_request)
            continue;
        for (size_t k = 0; k < up->n_servers; k++) {
            sws_upstream_server_t *s = &up->servers[k];
            if (!s->hc_busy && s->hc_next <= e->now)
                hc_start(e, up, s);
        }
    }
}

void px_shutdown(sws_engine_t *e)
{
    for (upconn_t *uc = e->upconns, *next; uc; uc = next) {
        next = uc->next;
        if (uc->state == UC_IDLE || uc->hc)
            uc_close(e, uc);
    }
}

void px_close_all(sws_engine_t *e)
{
    while (e->upconns) {
        upconn_t *uc = e->upconns;
        if (uc->px)
            conn_close(e, uc->px->c); /* closes uc too */
        else
            uc_close(e, uc);
    }
}

void px_engine_free(sws_engine_t *e)
{
    px_close_all(e);
    px_bury(e);
    for (size_t i = 0; i < e->n_upstreams; i++) {
        free(e->upstreams[i]->ring);
        e->upstreams[i]->ring = NULL;
    }
    free(e->upstreams);
    e->upstreams = NULL;
}
