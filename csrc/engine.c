/* The HTTP/1.1 connection engine of one worker; contract in scalws/engine.h. */
#define _GNU_SOURCE
#include "scalws/engine.h"

#include <limits.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "scalws/http1.h"
#include "scalws/httpcond.h"
#include "scalws/httpdate.h"
#include "scalws/path.h"
#include "engine_int.h"

/* ---- error log ---------------------------------------------------------- */

static const char *LEVELS[] = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"};

void elog(sws_engine_t *e, int level, const char *fmt, ...)
{
    if (level > e->elog_level)
        return;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "%.*s [%s] %d#%d: ", SWS_ERR_TIME_LEN, e->err_time,
                     LEVELS[level], (int)getpid(), e->worker_id);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(e->elog_fd >= 0 ? e->elog_fd : 2, buf, (size_t)n);
    (void)w;
}

static void update_time(sws_engine_t *e)
{
    time_t wall;
    sws_engine_now(&e->now, &wall);
    if (wall != e->wall) {
        e->wall = wall;
        sws_http_date(wall, e->date);
        sws_log_times(wall, e->log_time, e->iso_time, e->err_time);
    }
}

void sws_engine_now(uint64_t *mono_ms, time_t *wall)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    *mono_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    *wall = ts.tv_sec;
}

/* ---- timeout lists -------------------------------------------------------- */

void tl_unlink(sws_engine_t *e, sws_conn_t *c)
{
    if (c->tlist == TL_NONE)
        return;
    tlist_t *l = &e->tl[(int)c->tlist];
    if (c->tprev)
        c->tprev->tnext = c->tnext;
    else
        l->head = c->tnext;
    if (c->tnext)
        c->tnext->tprev = c->tprev;
    else
        l->tail = c->tprev;
    c->tprev = c->tnext = NULL;
    c->tlist = TL_NONE;
}

/* Puts c at the tail of list `which` with deadline now + that list's timeout;
 * every entry of a list has the same timeout, so the list stays sorted. */
void tl_set(sws_engine_t *e, sws_conn_t *c, int which)
{
    tl_unlink(e, c);
    tlist_t *l = &e->tl[which];
    c->deadline = e->now + l->ms;
    c->tlist = (signed char)which;
    c->tprev = l->tail;
    c->tnext = NULL;
    if (l->tail)
        l->tail->tnext = c;
    else
        l->head = c;
    l->tail = c;
}

/* ---- engine lifecycle ----------------------------------------------------- */

sws_engine_t *sws_engine_new(const sws_limits_t *limits, const sws_respond_t *errors_,
                             int worker_id)
{
    sws_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    /* The batching window sleeps for tens of microseconds; with the default
     * 50 us timer slack a 20 us window would last 70. Per thread: this is
     * the worker's one thread. */
    if (limits->batch_window_us)
        prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0);
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0) {
        int err = errno;
        free(e);
        errno = err;
        return NULL;
    }
    e->lim = *limits;
    memcpy(e->err, errors_, sizeof e->err);
    e->worker_id = worker_id;
    e->in_cap = limits->max_header_bytes + IN_EXTRA;
    e->in = malloc(e->in_cap);
    e->path = malloc(limits->max_uri_bytes + 512); /* both hold a path plus a file name */
    e->path2 = malloc(limits->max_uri_bytes + 512);
    if (!e->in || !e->path || !e->path2) {
        free(e->in);
        free(e->path);
        free(e->path2);
        close(e->epfd);
        free(e);
        errno = ENOMEM;
        return NULL;
    }
    e->tl[TL_HEADER].ms = limits->header_timeout_ms;
    e->tl[TL_KEEPALIVE].ms = limits->keepalive_timeout_ms;
    e->tl[TL_SEND].ms = limits->send_timeout_ms;
    e->tl[TL_LINGER].ms = LINGER_MS;
    e->tl[TL_GRACE].ms = STOP_GRACE_MS;
    e->alog_fd = -1;
    e->elog_fd = -1;
    e->elog_level = SWS_L_NOTICE;
    if (getrandom(&e->rid_base, sizeof e->rid_base, GRND_NONBLOCK) != sizeof e->rid_base)
        e->rid_base = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    e->prng = e->rid_base | 1;
    e->wall = -1;
    update_time(e);
    return e;
}

int sws_engine_fd(const sws_engine_t *e) { return e->epfd; }



void sws_engine_free(sws_engine_t *e)
{
    if (!e)
        return;
    sws_engine_close_all(e);
    px_engine_free(e);
    sws_engine_flush(e);
    for (size_t i = 0; i < e->n_listeners; i++)
        if (e->listeners[i].fd >= 0)
            close(e->listeners[i].fd);
    free(e->listeners);
    free(e->alog);
    free(e->in);
    free(e->path);
    free(e->path2);
    sws_filecache_free(e->fc);
    close(e->epfd);
    free(e);
}

int sws_engine_add_listener(sws_engine_t *e, int fd, const sws_vhosts_t *vhosts)
{
    /* Listeners are few and added before the first event: a realloc here
     * cannot move a listener that epoll already points at. */
    listener_t *nl = realloc(e->listeners, (e->n_listeners + 1) * sizeof *nl);
    if (!nl)
        return -ENOMEM;
    e->listeners = nl;
    for (size_t i = 0; i < e->n_listeners; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e->listeners[i]};
        if (e->listeners[i].enabled)
            epoll_ctl(e->epfd, EPOLL_CTL_MOD, e->listeners[i].fd, &ev);
    }
    listener_t *l = &e->listeners[e->n_listeners];
    l->type = T_LISTENER;
    l->fd = fd;
    l->vh = vhosts;
    l->enabled = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    e->n_listeners++;
    return 0;
}

static void listeners_enable(sws_engine_t *e, int on)
{
    for (size_t i = 0; i < e->n_listeners; i++) {
        listener_t *l = &e->listeners[i];
        if (l->fd < 0 || l->enabled == on)
            continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        epoll_ctl(e->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, &ev);
        l->enabled = on;
    }
    e->accept_paused = !on;
}

int sws_engine_set_access_log(sws_engine_t *e, int fd, int format, size_t bufsize,
                              uint32_t flush_ms)
{
    sws_engine_flush(e);
    if (bufsize < 4096)
        bufsize = 4096;
    if (bufsize != e->alog_cap) {
        char *b = realloc(e->alog, bufsize);
        if (!b)
            return -ENOMEM;
        e->alog = b;
        e->alog_cap = bufsize;
    }
    e->alog_fd = fd;
    e->alog_format = fd < 0 ? SWS_LOG_OFF : format;
    e->alog_flush_ms = flush_ms;
    return 0;
}

int sws_engine_set_filecache(sws_engine_t *e, size_t max_entries, uint32_t valid_ms,
                             size_t mem_max)
{
    sws_filecache_free(e->fc);
    e->fc = sws_filecache_new(max_entries, valid_ms, mem_max);
    return e->fc ? 0 : -ENOMEM;
}

void sws_engine_set_server(sws_engine_t *e, const char *line, size_t len)
{
    e->server_line = line;
    e->server_line_len = len;
}

void sws_engine_set_error_log(sws_engine_t *e, int fd, int level)
{
    e->elog_fd = fd;
    e->elog_level = level;
}

void sws_engine_flush(sws_engine_t *e)
{
    size_t off = 0;
    while (off < e->alog_len && e->alog_fd >= 0) {
        ssize_t w = write(e->alog_fd, e->alog + off, e->alog_len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* a full disk loses log lines, never requests */
        off += (size_t)w;
    }
    e->alog_len = 0;
    e->alog_last_flush = e->now;
}

const sws_counters_t *sws_engine_counters(const sws_engine_t *e) { return &e->cnt; }

/* ---- access log ------------------------------------------------------------ */


static const char HEX[] = "0123456789abcdef";

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

/* JSON string body: '"', '\\' escaped; other bytes outside 0x20..0x7e as
 * \u00HH, so the line is valid JSON whatever the client sent. */
static char *esc_json(char *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *p++ = '\\';
            *p++ = (char)ch;
        } else if (ch < 0x20 || ch > 0x7e) {
            memcpy(p, "\\u00", 4);
            p += 4;
            *p++ = HEX[ch >> 4];
            *p++ = HEX[ch & 15];
        } else {
            *p++ = (char)ch;
        }
    }
    return p;
}

const sws_header_t *find_header(const reqview_t *r, const char *name, size_t len)
{
    for (size_t i = 0; i < r->nh; i++)
        if (r->h[i].name_len == len && strncasecmp(r->h[i].name, name, len) == 0)
            return &r->h[i];
    return NULL;
}

char *put_peer(char *p, const sws_conn_t *c)
{
    if (c->is_unix) {
        memcpy(p, "unix:", 5);
        return p + 5;
    }
    if (c->peer_family == AF_INET) {
        p += sprintf(p, "%u.%u.%u.%u", c->peer[0], c->peer[1], c->peer[2], c->peer[3]);
        return p;
    }
    /* IPv6: full form of 8 groups, with IPv4-mapped shown as IPv4. */
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(c->peer, mapped, 12) == 0)
        return p + sprintf(p, "%u.%u.%u.%u", c->peer[12], c->peer[13], c->peer[14], c->peer[15]);
    for (int i = 0; i < 16; i += 2)
        p += sprintf(p, "%s%x", i ? ":" : "", (unsigned)(c->peer[i] << 8 | c->peer[i + 1]));
    return p;
}

/* Bytes of a line besides its five client-supplied fields: literals (about
 * 200 in JSON), times, a 39-character IPv6 peer, numbers, request id. */
#define LOG_FIXED 512
#define LOG_FIELDS 5

void access_log(sws_engine_t *e, sws_conn_t *c, const reqview_t *r, int status,
                       size_t body_bytes)
{
    if (e->alog_format == SWS_LOG_OFF)
        return;
    const sws_header_t *ref = r ? find_header(r, "referer", 7) : NULL;
    const sws_header_t *ua = r ? find_header(r, "user-agent", 10) : NULL;
    /* Escaping grows a byte to at most 4 (combined) or 6 (JSON) bytes; each
     * client field is cut to `fmax` so a line always fits the buffer and is
     * never dropped (a long User-Agent cannot hide a request). */
    size_t grow = e->alog_format == SWS_LOG_JSON ? 6 : 4;
    size_t fmax = (e->alog_cap - LOG_FIXED) / (grow * LOG_FIELDS);
    size_t ml = r ? (r->method_len < fmax ? r->method_len : fmax) : 0;
    size_t tl = r ? (r->target_len < fmax ? r->target_len : fmax) : 0;
    size_t hl = r && r->host ? (r->host_len < fmax ? r->host_len : fmax) : 0;
    size_t rl = ref ? (ref->value_len < fmax ? ref->value_len : fmax) : 0;
    size_t ul = ua ? (ua->value_len < fmax ? ua->value_len : fmax) : 0;
    size_t need = LOG_FIXED + grow * (ml + tl + hl + rl + ul);
    if (e->alog_len + need > e->alog_cap)
        sws_engine_flush(e);
    char *p = e->alog + e->alog_len;
    char ridbuf[16];
    const char *ridtxt = ridbuf;
    int rid_len = 16;
    if (r && r->rid) {
        ridtxt = r->rid; /* a proxied request's id, as sent upstream (at most 64 bytes) */
        rid_len = (int)r->rid_len;
    } else {
        uint64_t rid = next_request_id(e);
        for (int i = 0; i < 16; i++)
            ridbuf[i] = HEX[(rid >> (60 - 4 * i)) & 15];
    }
    /* Request time: head start to answer, at the loop's millisecond clock. */
    uint64_t ms = c->in_head || r ? e->now - c->req_start : 0;
    char reqt[32];
    snprintf(reqt, sizeof reqt, "%llu.%03llu", (unsigned long long)(ms / 1000),
             (unsigned long long)(ms % 1000));
    if (e->alog_format == SWS_LOG_COMBINED) {
        p = put_peer(p, c);
        memcpy(p, " - - [", 6);
        p += 6;
        memcpy(p, e->log_time, SWS_LOG_TIME_LEN);
        p += SWS_LOG_TIME_LEN;
        memcpy(p, "] \"", 3);
        p += 3;
        if (r) {
            p = esc_combined(p, r->method, ml);
            *p++ = ' ';
            p = esc_combined(p, r->target, tl);
            p += sprintf(p, " HTTP/1.%d", r->minor);
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
        p += sprintf(p, "\" %s %.*s\n", reqt, rid_len, ridtxt);
    } else {
        p += sprintf(p, "{\"time\":\"%.*s\",\"remote_addr\":\"", SWS_ISO_TIME_LEN, e->iso_time);
        p = put_peer(p, c);
        p += sprintf(p, "\",\"request_id\":\"%.*s\",\"method\":\"", rid_len, ridtxt);
        if (r)
            p = esc_json(p, r->method, ml);
        memcpy(p, "\",\"uri\":\"", 9);
        p += 9;
        if (r)
            p = esc_json(p, r->target, tl);
        p += sprintf(p, "\",\"protocol\":\"HTTP/1.%d\",\"status\":%d,\"body_bytes_sent\":%zu,"
                        "\"request_time\":%s,\"host\":\"",
                     r ? r->minor : 1, status, body_bytes, reqt);
        if (r && r->host)
            p = esc_json(p, r->host, hl);
        memcpy(p, "\",\"referer\":\"", 13);
        p += 13;
        if (ref)
            p = esc_json(p, ref->value, rl);
        memcpy(p, "\",\"user_agent\":\"", 16);
        p += 16;
        if (ua)
            p = esc_json(p, ua->value, ul);
        memcpy(p, "\"}\n", 3);
        p += 3;
    }
    e->alog_len = (size_t)(p - e->alog);
}

uint64_t next_request_id(sws_engine_t *e)
{
    return e->rid_base ^ (++e->rid_seq * 0x9E3779B97F4A7C15ull);
}

/* ---- output ------------------------------------------------------------------ */

void out_copy(sws_engine_t *e, const char *p, size_t n)
{
    struct iovec *last = e->niov ? &e->iov[e->niov - 1] : NULL;
    char *dst = e->out + e->out_len;
    memcpy(dst, p, n);
    e->out_len += n;
    if (last && (char *)last->iov_base + last->iov_len == dst) {
        last->iov_len += n;
    } else {
        e->iov[e->niov].iov_base = dst;
        e->iov[e->niov].iov_len = n;
        e->niov++;
    }
}

void out_ref(sws_engine_t *e, const char *p, size_t n)
{
    e->iov[e->niov].iov_base = (void *)p;
    e->iov[e->niov].iov_len = n;
    e->niov++;
}

/* Room for one more response of `need` copied bytes and two iovecs? */
int out_room(const sws_engine_t *e, size_t need)
{
    return e->out_len + need <= OUT_BUF && e->niov + 5 <= OUT_IOV;
}

/* writev that cannot raise SIGPIPE, whatever the process's disposition. */
static ssize_t send_iov(int fd, struct iovec *iov, int n)
{
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n)};
    return sendmsg(fd, &m, MSG_NOSIGNAL);
}

int conn_set_mask(sws_engine_t *e, sws_conn_t *c, uint32_t events)
{
    if (c->evmask == events)
        return 0;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    c->evmask = events;
    return epoll_ctl(e->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static int conn_set_events(sws_engine_t *e, sws_conn_t *c, int want_out)
{
    return conn_set_mask(e, c, want_out ? EPOLLOUT : EPOLLIN | EPOLLRDHUP);
}

/* Writes the batch to c. Returns 0 when all of it went (or was queued in
 * c->pend), -1 on a socket error (the caller closes). Queued bytes that live
 * in the batch buffer are copied; handler-owned bytes are referenced. */
int out_flush(sws_engine_t *e, sws_conn_t *c)
{
    struct iovec *iov = e->iov;
    int niov = e->niov;
    while (niov > 0) {
        ssize_t w = send_iov(c->fd, iov, niov);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            e->niov = 0;
            e->out_len = 0;
            return -1;
        }
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
        size_t copy = 0;
        for (int i = 0; i < niov; i++)
            if ((char *)iov[i].iov_base >= e->out && (char *)iov[i].iov_base < e->out + OUT_BUF)
                copy += iov[i].iov_len;
        pend_t *p = malloc(sizeof *p + (size_t)niov * sizeof(struct iovec) + copy);
        if (!p) {
            e->niov = 0;
            e->out_len = 0;
            return -1;
        }
        char *data = (char *)&p->iov[niov];
        p->idx = 0;
        p->niov = niov;
        for (int i = 0; i < niov; i++) {
            p->iov[i] = iov[i];
            if ((char *)iov[i].iov_base >= e->out && (char *)iov[i].iov_base < e->out + OUT_BUF) {
                memcpy(data, iov[i].iov_base, iov[i].iov_len);
                p->iov[i].iov_base = data;
                data += iov[i].iov_len;
            }
        }
        c->pend = p;
        conn_set_events(e, c, 1);
        tl_set(e, c, TL_SEND);
    }
    e->niov = 0;
    e->out_len = 0;
    return 0;
}

/* Appends a prebuilt response to the batch. Returns body bytes sent. */
void out_str(sws_engine_t *e, const char *s) { out_copy(e, s, strlen(s)); }

/* Ends a head: the Connection header the keep-alive decision needs (none
 * for a kept HTTP/1.1 connection), then the empty line. */
void out_conn_end(sws_engine_t *e, int minor, int keepalive)
{
    if (!keepalive)
        out_str(e, "Connection: close\r\n");
    else if (minor == 0)
        out_str(e, "Connection: keep-alive\r\n");
    out_copy(e, "\r\n", 2);
}

size_t put_response(sws_engine_t *e, const sws_respond_t *r, int head_only, int minor,
                           int keepalive)
{
    if (r->head_a_len <= COPY_HEAD_MAX)
        out_copy(e, r->head_a, r->head_a_len);
    else
        out_ref(e, r->head_a, r->head_a_len);
    out_copy(e, e->date, SWS_HTTP_DATE_LEN);
    if (r->head_b_len <= COPY_HEAD_MAX)
        out_copy(e, r->head_b, r->head_b_len);
    else
        out_ref(e, r->head_b, r->head_b_len);
    out_conn_end(e, minor, keepalive);
    if (head_only || r->body_len == 0)
        return 0;
    if (r->body_len <= COPY_BODY_MAX)
        out_copy(e, r->body, r->body_len);
    else
        out_ref(e, r->body, r->body_len);
    return r->body_len;
}

/* Batch bytes put_response copies for r (at most 2 * COPY_HEAD_MAX +
 * COPY_BODY_MAX + 90, well inside OUT_BUF), and room for 100 Continue. */
size_t response_copy_size(const sws_respond_t *r)
{
    return (r->head_a_len <= COPY_HEAD_MAX ? r->head_a_len : 0) + SWS_HTTP_DATE_LEN +
           (r->head_b_len <= COPY_HEAD_MAX ? r->head_b_len : 0) + 32 + 26 +
           (r->body_len <= COPY_BODY_MAX ? r->body_len : 0);
}

/* ---- connections --------------------------------------------------------- */

void conn_close(sws_engine_t *e, sws_conn_t *c)
{
    if (c->px)
        px_client_gone(e, c); /* the upstream side goes too, never reused */
    tl_unlink(e, c);
    close(c->fd); /* also removes it from the epoll set */
    free(c->stash);
    free(c->pend);
    free(c->heap);
    if (c->file)
        sws_filecache_release(e->fc, c->file);
    c->type = T_DEAD; /* freed after this batch of events (px_bury) */
    c->fd = -1;
    c->tnext = e->dead_conns;
    e->dead_conns = c;
    e->cnt.active--;
    e->cnt.handled++;
    if (e->accept_paused && !e->shutting_down && e->cnt.active < e->lim.max_connections &&
        e->accept_resume == 0)
        listeners_enable(e, 1);
}

/* Our last response is out: half-close and read until the peer's FIN, so
 * unread input does not turn our close into a reset that could destroy the
 * response in flight (nginx's lingering close). */
void conn_linger(sws_engine_t *e, sws_conn_t *c)
{
    if (c->state == S_LINGER)
        return;
    shutdown(c->fd, SHUT_WR);
    c->state = S_LINGER;
    c->linger_bytes = 0;
    free(c->stash);
    c->stash = NULL;
    c->stash_len = 0;
    tl_set(e, c, TL_LINGER);
}

int err_index(int status)
{
    switch (status) {
    case 400: return SWS_ERR_400;
    case 403: return SWS_ERR_403;
    case 404: return SWS_ERR_404;
    case 405: return SWS_ERR_405;
    case 408: return SWS_ERR_408;
    case 412: return SWS_ERR_412;
    case 413: return SWS_ERR_413;
    case 414: return SWS_ERR_414;
    case 417: return SWS_ERR_417;
    case 431: return SWS_ERR_431;
    case 501: return SWS_ERR_501;
    case 502: return SWS_ERR_502;
    case 503: return SWS_ERR_503;
    case 504: return SWS_ERR_504;
    case 505: return SWS_ERR_505;
    default: return SWS_ERR_500;
    }
}

/* Queues an error response and marks the connection to close after it. */
static void conn_error(sws_engine_t *e, sws_conn_t *c, int status, const reqview_t *r,
                       int head_only)
{
    const sws_respond_t *resp = &e->err[err_index(status)];
    c->close_after = 1;
    if (!out_room(e, response_copy_size(resp)) && (out_flush(e, c) < 0 || c->pend))
        return; /* output backed up: close after it without this answer */
    size_t sent = put_response(e, resp, head_only, r ? r->minor : 1, 0);
    access_log(e, c, r, resp->status, sent);
    e->cnt.requests++;
    e->cnt.errors_4xx_close++;
}

/* Absolute-form target (RFC 9112 §3.2.2): the authority replaces Host. */
static void split_target(reqview_t *r, const char **path, size_t *path_len)
{
    const char *t = r->target;
    size_t n = r->target_len;
    size_t skip = 0;
    if (n > 7 && strncasecmp(t, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncasecmp(t, "https://", 8) == 0)
        skip = 8;
    if (skip) {
        const char *a = t + skip;
        const char *slash = memchr(a, '/', n - skip);
        const char *q = memchr(a, '?', n - skip);
        const char *end = slash && (!q || slash < q) ? slash : q ? q : t + n;
        r->host = a;
        r->host_len = (size_t)(end - a);
        t = end;
        n = (size_t)(r->target + r->target_len - end);
        if (n == 0 || *t == '?') {
            *path = "/";
            *path_len = 1;
            return;
        }
    }
    const char *q = memchr(t, '?', n);
    *path = t;
    *path_len = q ? (size_t)(q - t) : n;
}

/* Sends the rest of c->file: at most one chunk per call, so a fast client
 * of a large file does not starve the others (EPOLLOUT brings us back).
 * Returns 0 (done, or waiting for writability) or -1 to close: a socket
 * error, or a file that shrank under us — a short body must end the
 * connection, never look complete. */
static int conn_send_file(sws_engine_t *e, sws_conn_t *c)
{
    if (c->file_left) {
        size_t chunk = c->file_left < c->file_chunk ? (size_t)c->file_left : c->file_chunk;
        off_t off = (off_t)c->file_off;
        ssize_t w;
        do
            w = sendfile(c->fd, c->file->fd, &off, chunk);
        while (w < 0 && errno == EINTR);
        if (w < 0 && errno != EAGAIN)
            return -1;
        if (w == 0)
            return -1;
        if (w > 0) {
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
            conn_set_events(e, c, 1);
            tl_set(e, c, TL_SEND);
            return 0;
        }
    }
    sws_filecache_release(e->fc, c->file);
    c->file = NULL;
    if (c->corked) {
        int zero = 0;
        setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero); /* pushes the tail */
        c->corked = 0;
    }
    return 0;
}

static void out_u64(sws_engine_t *e, uint64_t v)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    out_copy(e, buf, (size_t)n);
}

static void out_status_line(sws_engine_t *e, const char *line)
{
    out_str(e, line);
    out_copy(e, e->server_line, e->server_line_len);
    out_copy(e, "Date: ", 6);
    out_copy(e, e->date, SWS_HTTP_DATE_LEN);
    out_copy(e, "\r\n", 2);
}

/* "/." anywhere but /.well-known/ (RFC 8615: ACME and friends need it). */
static int is_hidden(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '/' && p[i + 1] == '.') {
            if (i == 0 && n >= 12 && memcmp(p, "/.well-known", 12) == 0 && (n == 12 || p[12] == '/'))
                continue;
            return 1;
        }
    }
    return 0;
}

static void content_type(const sws_static_t *st, const char *p, size_t n, const char **line,
                         size_t *line_len)
{
    *line = st->default_type;
    *line_len = st->default_type_len;
    size_t i = n;
    while (i > 0 && p[i - 1] != '/' && p[i - 1] != '.')
        i--;
    if (i == 0 || p[i - 1] != '.' || n - i == 0 || n - i > 16)
        return;
    char ext[16];
    size_t el = n - i;
    for (size_t k = 0; k < el; k++) {
        char ch = p[i + k];
        ext[k] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    size_t lo = 0, hi = st->n_mime;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const sws_mime_entry_t *m = &st->mime[mid];
        int cmp = m->ext_len != el ? (m->ext_len < el ? -1 : 1) : memcmp(m->ext, ext, el);
        if (cmp == 0) {
            *line = m->line;
            *line_len = m->line_len;
            return;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
}

/* Validators and caching headers shared by 200 and 304. */
static void out_validators(sws_engine_t *e, const sws_static_t *st, const sws_file_t *f)
{
    char date[SWS_HTTP_DATE_LEN];
    out_copy(e, "Last-Modified: ", 15);
    out_copy(e, f->last_modified, SWS_HTTP_DATE_LEN); /* formatted when the file was opened */
    out_copy(e, "\r\nETag: ", 8);
    out_copy(e, f->etag, f->etag_len);
    out_copy(e, "\r\n", 2);
    if (st->expires >= 0) {
        sws_http_date(e->wall + (time_t)st->expires, date);
        out_copy(e, "Expires: ", 9);
        out_copy(e, date, SWS_HTTP_DATE_LEN);
        out_str(e, "\r\nCache-Control: max-age=");
        out_u64(e, (uint64_t)st->expires);
        out_copy(e, "\r\n", 2);
    }
    if (st->precompressed)
        out_str(e, "Vary: Accept-Encoding\r\n"); /* the answer depends on it */
    out_copy(e, st->extra, st->extra_len);
}

/* multipart/byteranges (RFC 9110 §14.6) for several ranges. Parts of a
 * file held in memory are referenced; from a file on disk the ranges are
 * read into one buffer when they total at most MULTIPART_READ_MAX (else -1:
 * the caller sends the whole file, as a server may). 0 when answered; the
 * file reference is released or handed to the connection. */
static int serve_multipart(sws_engine_t *e, sws_conn_t *c, const reqview_t *r,
                           const sws_static_t *st, sws_file_t *f, const char *path,
                           size_t path_len, const sws_range_t *rs, size_t n, int head_only,
                           int keepalive, size_t *sent)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += rs[i].len;
    if ((!f->mem && total > MULTIPART_READ_MAX) || e->niov + 2 * n + 8 > OUT_IOV)
        return -1;
    char *buf = NULL;
    if (!f->mem && !head_only) {
        buf = malloc(total ? total : 1);
        if (!buf)
            return -1;
        uint64_t o = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t got = 0;
            while (got < rs[i].len) {
                ssize_t k = pread(f->fd, buf + o + got, rs[i].len - got, (off_t)(rs[i].start + got));
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0) {
                    free(buf);
                    return -1; /* shrank under us: the caller sends what stat says, or closes */
                }
                got += (uint64_t)k;
            }
            o += rs[i].len;
        }
    }
    /* A boundary no part can contain by chance: 64 random bits per answer. */
    e->prng ^= e->prng << 13;
    e->prng ^= e->prng >> 7;
    e->prng ^= e->prng << 17;
    char bnd[17];
    for (int i = 0; i < 16; i++)
        bnd[i] = HEX[(e->prng >> (60 - 4 * i)) & 15];
    bnd[16] = '\0';
    const char *ct;
    size_t ct_len;
    content_type(st, path, path_len, &ct, &ct_len);
    /* Part heads, built once to count the length and once to send. */
    char crange[SWS_CONTENT_RANGE_MAX];
    uint64_t body_len = 0;
    for (size_t i = 0; i < n; i++) {
        int cl = sws_format_content_range(crange, sizeof crange, rs[i].start, rs[i].len, f->size);
        body_len += 2 + 2 + 16 + 2 + ct_len + 15 + (uint64_t)cl + 2 + 2 + rs[i].len;
    }
    body_len += 2 + 2 + 16 + 2 + 2;
    out_status_line(e, "HTTP/1.1 206 Partial Content\r\n");
    out_str(e, "Content-Type: multipart/byteranges; boundary=");
    out_copy(e, bnd, 16);
    out_str(e, "\r\nContent-Length: ");
    out_u64(e, body_len);
    out_str(e, "\r\nAccept-Ranges: bytes\r\n");
    out_validators(e, st, f);
    out_conn_end(e, r->minor, keepalive);
    if (head_only) {
        sws_filecache_release(e->fc, f);
        return 0;
    }
    uint64_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int cl = sws_format_content_range(crange, sizeof crange, rs[i].start, rs[i].len, f->size);
        out_copy(e, "\r\n--", 4);
        out_copy(e, bnd, 16);
        out_copy(e, "\r\n", 2);
        out_copy(e, ct, ct_len); /* "Content-Type: ...\r\n" */
        out_copy(e, "Content-Range: ", 15);
        out_copy(e, crange, (size_t)cl);
        out_copy(e, "\r\n\r\n", 4);
        const char *data = f->mem ? f->mem + rs[i].start : buf + o;
        out_ref(e, data, (size_t)rs[i].len);
        o += rs[i].len;
    }
    out_copy(e, "\r\n--", 4);
    out_copy(e, bnd, 16);
    out_copy(e, "--\r\n", 4);
    *sent = (size_t)body_len;
    if (buf) {
        c->heap = buf; /* freed once written */
        sws_filecache_release(e->fc, f);
    } else {
        c->file = f; /* the memory copy stays referenced until written */
        c->file_left = 0;
    }
    return 0;
}

/* Answers a request on a static route into the batch. Returns the status
 * (for the log) and *sent, the body bytes. A file body that is not copied
 * into the batch leaves c->file referenced until it is written. */
/* The first index file of the folder `dir` (with a '/' added when it does
 * not end in one): 0 with *f referenced and *fpath (in e->path2) set, or
 * -EACCES when there is none (a folder is not listed). */
static int find_index(sws_engine_t *e, const sws_static_t *st, const char *dir, size_t len,
                      sws_file_t **f, const char **fpath, size_t *fpath_len)
{
    int slash = len == 0 || dir[len - 1] != '/';
    memmove(e->path2, dir, len);
    if (slash)
        e->path2[len++] = '/';
    for (size_t i = 0; i < st->n_index; i++) {
        size_t nl = strlen(st->index[i]);
        memcpy(e->path2 + len, st->index[i], nl);
        sws_file_t *g = NULL;
        if (sws_filecache_get(e->fc, st->root_fd, e->path2, len + nl, st->fc_flags, e->now, &g) ==
            0) {
            if (!g->is_dir) {
                *f = g;
                *fpath = e->path2;
                *fpath_len = len + nl;
                return 0;
            }
            sws_filecache_release(e->fc, g);
        }
    }
    return -EACCES;
}

static int serve_static(sws_engine_t *e, sws_conn_t *c, const reqview_t *r, const sws_site_t *site,
                        const sws_static_t *st, const char *path, size_t path_len,
                        const char *raw_path, size_t raw_len, int method, int keepalive,
                        int depth, size_t *sent);

/* ---- folder listings (autoindex) ------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_str(sbuf_t *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Text for HTML: & < > " ' escaped; other bytes as they are (names are
 * usually UTF-8). */
static void sb_html(sbuf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&': sb_str(b, "&amp;"); break;
        case '<': sb_str(b, "&lt;"); break;
        case '>': sb_str(b, "&gt;"); break;
        case '"': sb_str(b, "&quot;"); break;
        case '\'': sb_str(b, "&#39;"); break;
        default: sb_put(b, s + i, 1);
        }
    }
}

/* A path segment for an href: every byte but unreserved ones (RFC 3986
 * §2.3) percent-encoded, so no name can end the attribute or the URL. */
static void sb_href(sbuf_t *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            sb_put(b, s + i, 1);
        } else {
            static const char UHEX[] = "0123456789ABCDEF";
            char esc[3] = {'%', UHEX[ch >> 4], UHEX[ch & 15]};
            sb_put(b, esc, 3);
        }
    }
}

typedef struct {
    char *name;
    int is_dir;
    uint64_t size;
    time_t mtime;
} dentry_t;

static int dentry_cmp(const void *a, const void *b)
{
    const dentry_t *x = a, *y = b;
    if (x->is_dir != y->is_dir)
        return y->is_dir - x->is_dir; /* folders first, as nginx */
    return strcmp(x->name, y->name);
}

/* The HTML listing of the folder `path` (ending in '/'), malloc'd, or NULL
 * with *err set (-errno). Runs readdir and one fstatat per entry on the
 * loop: listings are off by default and meant for small folders. */
static char *make_listing(const sws_static_t *st, const char *path, size_t path_len, size_t *len,
                          int *err)
{
    int fd = sws_filecache_open_dir(st->root_fd, path, path_len, st->fc_flags);
    if (fd < 0) {
        *err = fd;
        return NULL;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        *err = -errno;
        close(fd);
        return NULL;
    }
    dentry_t *ents = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' &&
            (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
            continue;
        if (de->d_name[0] == '.' && st->deny_hidden)
            continue;
        struct stat sb;
        int at = (st->fc_flags & SWS_FC_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0;
        if (fstatat(dirfd(d), de->d_name, &sb, at) < 0)
            continue;
        if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
            continue; /* links refused, devices, fifos: not listed */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            dentry_t *ne = realloc(ents, cap * sizeof *ents);
            if (!ne)
                break;
            ents = ne;
        }
        ents[n].name = strdup(de->d_name);
        if (!ents[n].name)
            break;
        ents[n].is_dir = S_ISDIR(sb.st_mode);
        ents[n].size = (uint64_t)sb.st_size;
        ents[n].mtime = sb.st_mtim.tv_sec;
        n++;
    }
    closedir(d);
    if (n)
        qsort(ents, n, sizeof *ents, dentry_cmp);
    sbuf_t b = {0};
    sb_str(&b, "<!DOCTYPE html>\n<html>\n<head><meta charset=\"utf-8\"><title>Index of ");
    sb_html(&b, path, path_len);
    sb_str(&b, "</title></head>\n<body>\n<h1>Index of ");
    sb_html(&b, path, path_len);
    sb_str(&b, "</h1><hr><pre><a href=\"../\">../</a>\n");
    for (size_t i = 0; i < n; i++) {
        const char *nm = ents[i].name;
        size_t nl = strlen(nm);
        sb_str(&b, "<a href=\"");
        sb_href(&b, nm, nl);
        if (ents[i].is_dir)
            sb_put(&b, "/", 1);
        sb_str(&b, "\">");
        sb_html(&b, nm, nl);
        if (ents[i].is_dir)
            sb_put(&b, "/", 1);
        char meta[96];
        char date[SWS_HTTP_DATE_LEN + 1];
        sws_http_date(ents[i].mtime, date);
        date[SWS_HTTP_DATE_LEN] = '\0';
        int ml = ents[i].is_dir ? snprintf(meta, sizeof meta, "</a>  %s  -\n", date)
                                : snprintf(meta, sizeof meta, "</a>  %s  %llu\n", date,
                                           (unsigned long long)ents[i].size);
        sb_put(&b, meta, (size_t)ml);
        free(ents[i].name);
    }
    free(ents);
    sb_str(&b, "</pre><hr></body>\n</html>\n");
    if (b.failed) {
        free(b.p);
        *err = -ENOMEM;
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* try_files (nginx's): candidates in order; the first that exists is
 * served; else the fallback status, or the fallback URI routed again (once:
 * a fallback that falls back again is a configuration loop, answered 500). */
static int serve_try_files(sws_engine_t *e, sws_conn_t *c, const reqview_t *r,
                           const sws_site_t *site, const sws_static_t *st, const char *path,
                           size_t path_len, int method, int keepalive, int depth,
                           sws_file_t **found, const char **fpath, size_t *fpath_len, size_t *sent)
{
    for (size_t i = 0; i < st->n_try; i++) {
        const char *item = st->try_items[i];
        size_t il = strlen(item);
        sws_file_t *g = NULL;
        if (strcmp(item, "$uri/") == 0) {
            sws_file_t *d = NULL;
            if (sws_filecache_get(e->fc, st->root_fd, path, path_len, st->fc_flags, e->now, &d) ==
                0) {
                int isdir = d->is_dir;
                sws_filecache_release(e->fc, d);
                if (isdir && find_index(e, st, path, path_len, found, fpath, fpath_len) == 0)
                    return 0;
            }
            continue;
        }
        const char *cand = strcmp(item, "$uri") == 0 ? path : item;
        size_t cl = cand == path ? path_len : il;
        if (sws_filecache_get(e->fc, st->root_fd, cand, cl, st->fc_flags, e->now, &g) == 0) {
            if (!g->is_dir) {
                *found = g;
                *fpath = cand;
                *fpath_len = cl;
                return 0;
            }
            sws_filecache_release(e->fc, g);
        }
    }
    int head_only = method == SWS_M_HEAD;
    if (st->try_status) {
        *sent = put_response(e, st->try_status, head_only, r->minor, keepalive);
        return st->try_status->status;
    }
    if (st->try_uri_len) {
        const sws_handler_t *h = depth ? NULL : sws_site_route(site, st->try_uri, st->try_uri_len);
        if (!h) {
            *sent = put_response(e, &e->err[depth ? SWS_ERR_500 : SWS_ERR_404], head_only,
                                 r->minor, keepalive);
            return depth ? 500 : 404;
        }
        if (h->kind == SWS_H_STATIC)
            return serve_static(e, c, r, site, h->data, st->try_uri, st->try_uri_len, st->try_uri,
                                st->try_uri_len, method, keepalive, depth + 1, sent);
        const sws_respond_t *resp = h->data;
        *sent = put_response(e, resp, head_only, r->minor, keepalive);
        return resp->status;
    }
    *sent = put_response(e, &e->err[SWS_ERR_404], head_only, r->minor, keepalive);
    return 404;
}

static int serve_static(sws_engine_t *e, sws_conn_t *c, const reqview_t *r, const sws_site_t *site,
                        const sws_static_t *st, const char *path, size_t path_len,
                        const char *raw_path, size_t raw_len, int method, int keepalive,
                        int depth, size_t *sent)
{
    int head_only = method == SWS_M_HEAD;
    *sent = 0;
    const sws_respond_t *err = NULL;
    sws_file_t *f = NULL;
    if (method != SWS_M_GET && method != SWS_M_HEAD) {
        err = &e->err[SWS_ERR_405];
    } else if (st->deny_hidden && is_hidden(path, path_len)) {
        err = &e->err[SWS_ERR_404];
    } else if (st->n_try) {
        const char *fp = NULL;
        size_t fl = 0;
        int done = serve_try_files(e, c, r, site, st, path, path_len, method, keepalive, depth, &f,
                                   &fp, &fl, sent);
        if (!f)
            return done; /* answered by the fallback */
        path = fp;
        path_len = fl;
    } else {
        int rc = sws_filecache_get(e->fc, st->root_fd, path, path_len, st->fc_flags, e->now, &f);
        if (rc == 0 && f->is_dir) {
            sws_filecache_release(e->fc, f);
            f = NULL;
            if (path[path_len - 1] != '/') {
                /* RFC 9110 §15.4.2: the folder's URL ends with a slash; the
                 * query string goes along. */
                const char *q = memchr(r->target, '?', r->target_len);
                size_t qlen = q ? (size_t)(r->target + r->target_len - q) : 0;
                out_status_line(e, "HTTP/1.1 301 Moved Permanently\r\n");
                out_copy(e, "Location: ", 10);
                out_copy(e, raw_path, raw_len);
                out_copy(e, "/", 1);
                out_copy(e, q, qlen);
                out_str(e, "\r\nContent-Length: 0\r\n");
                out_conn_end(e, r->minor, keepalive);
                return 301;
            }
            rc = find_index(e, st, path, path_len, &f, &path, &path_len);
            if (rc < 0 && st->autoindex) {
                size_t blen = 0;
                char *body = make_listing(st, path, path_len, &blen, &rc);
                if (body) {
                    out_status_line(e, "HTTP/1.1 200 OK\r\n");
                    out_str(e, "Content-Type: text/html; charset=utf-8\r\nContent-Length: ");
                    out_u64(e, blen);
                    out_copy(e, "\r\n", 2);
                    out_conn_end(e, r->minor, keepalive);
                    if (head_only) {
                        free(body);
                    } else {
                        out_ref(e, body, blen); /* freed once written (c->heap) */
                        c->heap = body;
                        *sent = blen;
                    }
                    return 200;
                }
            }
        }
        if (rc < 0)
            err = rc == -ENOENT || rc == -ENOTDIR || rc == -ENAMETOOLONG ? &e->err[SWS_ERR_404]
                  : rc == -EACCES || rc == -EPERM || rc == -ELOOP || rc == -EXDEV
                      ? &e->err[SWS_ERR_403]
                      : &e->err[SWS_ERR_500];
    }
    if (err) {
        *sent = put_response(e, err, head_only, r->minor, keepalive);
        return err->status;
    }

    /* The fields a file answer depends on, in one pass over the head (the
     * first of each counts). */
    sws_cond_fields_t cf;
    memset(&cf, 0, sizeof cf);
    const sws_header_t *ae = NULL, *rg = NULL, *ir = NULL;
    for (size_t i = 0; i < r->nh; i++) {
        const sws_header_t *h = &r->h[i];
        const char *nm = h->name;
        switch (h->name_len) {
        case 5:
            if (!rg && strncasecmp(nm, "range", 5) == 0)
                rg = h;
            break;
        case 8:
            if (!cf.if_match && strncasecmp(nm, "if-match", 8) == 0)
                cf.if_match = h->value, cf.if_match_len = h->value_len;
            else if (!ir && strncasecmp(nm, "if-range", 8) == 0)
                ir = h;
            break;
        case 13:
            if (!cf.if_none_match && strncasecmp(nm, "if-none-match", 13) == 0)
                cf.if_none_match = h->value, cf.if_none_match_len = h->value_len;
            break;
        case 15:
            if (!ae && strncasecmp(nm, "accept-encoding", 15) == 0)
                ae = h;
            break;
        case 17:
            if (!cf.if_modified_since && strncasecmp(nm, "if-modified-since", 17) == 0)
                cf.if_modified_since = h->value, cf.if_modified_since_len = h->value_len;
            break;
        case 19:
            if (!cf.if_unmodified_since && strncasecmp(nm, "if-unmodified-since", 19) == 0)
                cf.if_unmodified_since = h->value, cf.if_unmodified_since_len = h->value_len;
            break;
        }
    }
    if (method != SWS_M_GET)
        rg = NULL; /* Range is for GET (RFC 9110 §14.2) */
    /* Precompressed siblings (FILE.br, FILE.zst, FILE.gz): the one the client
     * prefers is served in FILE's place, with its own validators (RFC 9110
     * §8.8.3: each representation has its own ETag); Range applies to it. */
    const char *encoding = NULL;
    if (st->precompressed) {
        if (ae && path_len + 4 < e->lim.max_uri_bytes + 512) { /* room for the suffix */
            static const struct { const char *sfx; int bit; const char *name; } SIB[] = {
                {".br", SWS_ENC_BR, "br"}, {".zst", SWS_ENC_ZSTD, "zstd"}, {".gz", SWS_ENC_GZIP, "gzip"}};
            sws_file_t *sib[3] = {NULL, NULL, NULL};
            unsigned avail = 0;
            char *p2 = path == e->path2 ? e->path : e->path2; /* not the buffer `path` is in */
            memcpy(p2, path, path_len);
            for (int i = 0; i < 3; i++) {
                size_t sl = strlen(SIB[i].sfx);
                memcpy(p2 + path_len, SIB[i].sfx, sl);
                if (sws_filecache_get(e->fc, st->root_fd, p2, path_len + sl, st->fc_flags, e->now,
                                      &sib[i]) == 0) {
                    if (sib[i]->is_dir) {
                        sws_filecache_release(e->fc, sib[i]);
                        sib[i] = NULL;
                    } else {
                        avail |= (unsigned)SIB[i].bit;
                    }
                }
            }
            int pick = avail ? sws_pick_encoding(ae->value, ae->value_len, avail) : 0;
            for (int i = 0; i < 3; i++) {
                if (!sib[i])
                    continue;
                if (pick == SIB[i].bit) {
                    sws_filecache_release(e->fc, f);
                    f = sib[i];
                    encoding = SIB[i].name;
                } else {
                    sws_filecache_release(e->fc, sib[i]);
                }
            }
        }
    }
    int cond = sws_evaluate_preconditions(&cf, f->etag, f->etag_len, f->mtime, 1);
    if (cond == SWS_COND_PRECONDITION_FAILED) {
        sws_filecache_release(e->fc, f);
        *sent = put_response(e, &e->err[SWS_ERR_412], head_only, r->minor, keepalive);
        return 412;
    }
    if (cond == SWS_COND_NOT_MODIFIED) {
        out_status_line(e, "HTTP/1.1 304 Not Modified\r\n");
        out_validators(e, st, f);
        out_conn_end(e, r->minor, keepalive);
        sws_filecache_release(e->fc, f);
        return 304;
    }
    /* Range (RFC 9110 §14.2), for GET, unless If-Range says the client's
     * copy is stale. One range is answered 206; several get the whole file
     * (a server may ignore Range) until multipart/byteranges is built. */
    uint64_t start = 0, blen = f->size;
    int status = 200;
    char crange[SWS_CONTENT_RANGE_MAX];
    int crange_len = 0;
    if (rg) {
        if (!ir || sws_if_range_matches(ir->value, ir->value_len, f->etag, f->etag_len, f->mtime)) {
            sws_range_t rs[RANGES_MAX];
            int n = sws_parse_range(rg->value, rg->value_len, f->size, rs, RANGES_MAX);
            if (n == 0) {
                out_status_line(e, "HTTP/1.1 416 Range Not Satisfiable\r\n");
                out_copy(e, "Content-Range: bytes */", 23);
                out_u64(e, f->size);
                out_str(e, "\r\nContent-Length: 0\r\n");
                out_conn_end(e, r->minor, keepalive);
                sws_filecache_release(e->fc, f);
                return 416;
            }
            if (n == 1) {
                start = rs[0].start;
                blen = rs[0].len;
                status = 206;
                crange_len = sws_format_content_range(crange, sizeof crange, start, blen, f->size);
            } else if (n > 1 && serve_multipart(e, c, r, st, f, path, path_len, rs, (size_t)n,
                                                head_only, keepalive, sent) == 0) {
                return 206;
            }
        }
    }
    const char *ct;
    size_t ct_len;
    content_type(st, path, path_len, &ct, &ct_len);
    out_status_line(e, status == 206 ? "HTTP/1.1 206 Partial Content\r\n" : "HTTP/1.1 200 OK\r\n");
    out_copy(e, ct, ct_len);
    out_copy(e, "Content-Length: ", 16);
    out_u64(e, blen);
    if (crange_len > 0) {
        out_copy(e, "\r\nContent-Range: ", 17);
        out_copy(e, crange, (size_t)crange_len);
    }
    out_str(e, "\r\nAccept-Ranges: bytes\r\n");
    if (encoding) {
        out_str(e, "Content-Encoding: ");
        out_str(e, encoding);
        out_copy(e, "\r\n", 2);
    }
    out_validators(e, st, f);
    out_conn_end(e, r->minor, keepalive);
    if (head_only || blen == 0) {
        sws_filecache_release(e->fc, f);
        return status;
    }
    *sent = (size_t)blen;
    if (f->mem && blen <= COPY_BODY_MAX) {
        out_copy(e, f->mem + start, (size_t)blen); /* head and body in one write */
        sws_filecache_release(e->fc, f);
    } else if (f->mem) {
        out_ref(e, f->mem + start, (size_t)blen); /* still one writev; the entry stays referenced */
        c->file = f;
        c->file_left = 0;
    } else {
        c->file = f;
        c->file_off = start;
        c->file_left = blen;
        c->file_chunk = st->sendfile_chunk;
        if (!c->is_unix) {
            /* The head and the first file bytes in full segments (nginx's
             * tcp_nopush); uncorked after the first sendfile. */
            int one = 1;
            setsockopt(c->fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
            c->corked = 1;
        }
    }
    return status;
}

/* Parses and answers the requests in buf[0..*lenp) until one is incomplete,
 * output backs up, or the connection is to close. Returns bytes consumed;
 * the unconsumed rest is buf[ret..*lenp) (*lenp shrinks when a chunked body
 * is decoded in place). */
static size_t conn_process(sws_engine_t *e, sws_conn_t *c, char *buf, size_t *lenp,
                           size_t last_len)
{
    size_t off = 0, len = *lenp;
    while (off < len && !c->close_after && !c->pend && !c->file && !c->heap && !c->px) {
        if (c->state == S_LINGER) {
            c->linger_bytes += len - off;
            return len;
        }
        if (c->state == S_BODY) {
            /* The answer went out already; the body is read and dropped so the
             * next request on this connection starts where it should. */
            if (!c->chunked) {
                size_t take = len - off < c->body_left ? len - off : (size_t)c->body_left;
                off += take;
                c->body_left -= take;
                if (c->body_left)
                    return off;
            } else {
                size_t n = len - off;
                ssize_t rest = sws_decode_chunked(&c->dec, buf + off, &n);
                if (rest == SWS_PARSE_ERROR || c->dec.total > e->lim.max_body_bytes) {
                    c->close_after = 1; /* framing lost: nothing after this can be trusted */
                    return len;
                }
                if (rest == SWS_PARSE_INCOMPLETE)
                    return len;
                /* The bytes after the body now sit at buf + off + n. */
                off += n;
                len = off + (size_t)rest;
                *lenp = len;
            }
            c->state = S_HEAD;
            tl_set(e, c, TL_HEADER);
            continue;
        }

        /* S_HEAD */
        reqview_t r;
        sws_header_t hdrs[e->lim.max_headers];
        size_t nh = e->lim.max_headers;
        memset(&r, 0, sizeof r);
        if (!c->in_head) {
            c->in_head = 1;
            c->req_start = e->now;
        }
        int n = sws_parse_request(buf + off, len - off, &r.method, &r.method_len, &r.target,
                                  &r.target_len, &r.minor, hdrs, &nh, off ? 0 : last_len);
        if (n == SWS_PARSE_INCOMPLETE) {
            /* header_timeout runs from the head's first byte (from the accept
             * for a connection's first request), not from the last read: a
             * client dribbling a byte a second still gets its 408. */
            if (!c->head_armed) {
                c->head_armed = 1;
                tl_set(e, c, TL_HEADER);
            }
            size_t avail = len - off;
            if (avail > e->lim.max_header_bytes) {
                /* RFC 9112 §3: a request-line longer than any URI we take
                 * is 414; a long header section is 431 (RFC 6585 §5). */
                int line_done = memchr(buf + off, '\n', e->lim.max_uri_bytes + 64 < avail
                                                            ? e->lim.max_uri_bytes + 64
                                                            : avail) != NULL;
                conn_error(e, c, line_done ? 431 : 414, NULL, 0);
                return len;
            }
            return off;
        }
        if (n < 0) {
            conn_error(e, c, n == SWS_PARSE_VERSION ? 505 : n == SWS_PARSE_TOO_MANY_HEADERS ? 431 : 400,
                       NULL, 0);
            return len;
        }
        r.h = hdrs;
        r.nh = nh;
        c->in_head = 0;
        c->head_armed = 0;
        off += (size_t)n;
        int method = sws_method_id(r.method, r.method_len);
        int head_only = method == SWS_M_HEAD;
        if ((size_t)n > e->lim.max_header_bytes) {
            conn_error(e, c, r.target_len > e->lim.max_uri_bytes ? 414 : 431, &r, head_only);
            return len;
        }
        if (r.target_len > e->lim.max_uri_bytes) {
            conn_error(e, c, 414, &r, head_only);
            return len;
        }
        sws_request_info_t info;
        int status = sws_analyze_request(r.method, r.method_len, r.minor, hdrs, nh, &info);
        r.host = info.host;
        r.host_len = info.host_len;
        /* RFC 9112 §3.2: origin-form, absolute-form, or "*" for OPTIONS; we
         * are not a forward proxy, so CONNECT (authority-form) is 501 rather
         * than a 2xx that would put intermediaries into tunnel mode. */
        if (!status) {
            if (method == SWS_M_CONNECT)
                status = 501;
            else if (r.target[0] != '/' &&
                     !(r.target_len == 1 && r.target[0] == '*' && method == SWS_M_OPTIONS) &&
                     !(r.target_len > 7 && strncasecmp(r.target, "http://", 7) == 0) &&
                     !(r.target_len > 8 && strncasecmp(r.target, "https://", 8) == 0))
                status = 400;
        }
        if (status) {
            conn_error(e, c, status, &r, head_only);
            return len;
        }
        if (info.has_content_length && info.content_length > e->lim.max_body_bytes) {
            conn_error(e, c, 413, &r, head_only); /* before reading any of it */
            return len;
        }
        const char *path;
        size_t path_len;
        split_target(&r, &path, &path_len);
        const char *raw_path = path;
        size_t raw_len = path_len;
        if (path[0] == '/') {
            /* Routes see the decoded, dot-free path (csrc/path.c), so "/a/../b",
             * "//b" and "/%62" reach the route of "/b". */
            ssize_t nl = sws_normalize_path(path, path_len, e->path);
            if (nl < 0) {
                conn_error(e, c, 400, &r, head_only);
                return len;
            }
            path = e->path;
            path_len = (size_t)nl;
        }
        const sws_site_t *site = sws_vhosts_find(c->vh, r.host, r.host_len);
        const sws_handler_t *h = site ? sws_site_route(site, path, path_len) : NULL;
        const sws_respond_t *resp = h && h->kind == SWS_H_RESPOND ? h->data : &e->err[SWS_ERR_404];
        const sws_static_t *st = h && h->kind == SWS_H_STATIC && e->fc ? h->data : NULL;
        const sws_proxy_t *pxc = h && h->kind == SWS_H_PROXY ? h->data : NULL;
        /* What this answer may copy into the batch: a static head is at
         * most a few hundred bytes, the extra headers, a Location of the
         * raw path, and a body up to COPY_BODY_MAX. */
        size_t need = st    ? 1024 + st->extra_len + raw_len + r.target_len + COPY_BODY_MAX
                      : pxc ? response_copy_size(&e->err[SWS_ERR_504]) + 32
                            : response_copy_size(resp) + 32;
        if (need > OUT_BUF / 2) {
            conn_error(e, c, 414, &r, head_only); /* a Location that long is not worth making */
            return len;
        }

        c->requests++;
        int keepalive = info.keepalive && !e->shutting_down && e->lim.keepalive_timeout_ms &&
                        c->requests < e->lim.keepalive_requests;
        int has_body = (info.has_content_length && info.content_length) || info.chunked;
        if (!out_room(e, need)) {
            if (out_flush(e, c) < 0) {
                c->close_after = 1;
                return len;
            }
            if (c->pend) {
                off -= (size_t)n; /* answer it once the backlog is written */
                c->requests--;
                return off;
            }
        }
        if (info.expect_continue && has_body && (keepalive || pxc)) /* the proxy reads it */
            out_copy(e, "HTTP/1.1 100 Continue\r\n\r\n", 25); /* we will read the body */
        size_t sent;
        int answered;
        if (pxc) {
            size_t took = 0;
            answered = px_start(e, c, &r, &info, pxc, path, path_len, raw_path, keepalive,
                                buf + off, len - off, &took);
            if (c->px) {
                off += took; /* the body so far; what follows waits in the stash */
                return off;
            }
            /* answered at once (no live upstream): an error page */
            sent = put_response(e, &e->err[err_index(answered)], head_only, r.minor, keepalive);
        } else if (st) {
            answered = serve_static(e, c, &r, site, st, path, path_len, raw_path, raw_len, method,
                                    keepalive, 0, &sent);
        } else {
            sent = put_response(e, resp, head_only, r.minor, keepalive);
            answered = resp->status;
        }
        e->cnt.requests++;
        access_log(e, c, &r, answered, sent);
        if (!keepalive) {
            c->close_after = 1;
            return len;
        }
        if (has_body) {
            c->state = S_BODY;
            c->chunked = info.chunked;
            c->body_left = info.chunked ? 0 : info.content_length;
            memset(&c->dec, 0, sizeof c->dec);
        }
    }
    return off;
}

/* After input was handled: flush, stash the unparsed tail, pick the timer. */
void conn_settle(sws_engine_t *e, sws_conn_t *c, const char *rest, size_t rest_len)
{
    for (;;) {
        if (e->niov && out_flush(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (rest_len && !c->close_after) {
            char *s = malloc(rest_len);
            if (!s) {
                conn_close(e, c);
                return;
            }
            memcpy(s, rest, rest_len);
            c->stash = s;
            c->stash_len = (uint32_t)rest_len;
            /* Processing stopped for output, not for lack of input: the stash
             * may hold whole requests, to be answered once the output is out. */
            c->resume = c->pend || c->file || c->heap || c->px;
        }
        if (c->heap && !c->pend) {
            free(c->heap); /* the listing went out */
            c->heap = NULL;
        }
        if (c->px)
            return; /* the proxy drives the connection until its answer is done */
        if (c->file && !c->pend && conn_send_file(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (c->pend || c->file)
            return; /* the send timeout runs; conn_write comes back here */
        if (c->close_after) {
            conn_linger(e, c);
            return;
        }
        if (c->resume && c->stash) {
            /* A loop, not recursion: a thousand pipelined requests for files
             * must not take a thousand stack frames. */
            size_t len = c->stash_len;
            memcpy(e->in, c->stash, len);
            free(c->stash);
            c->stash = NULL;
            c->stash_len = 0;
            c->resume = 0;
            size_t used = conn_process(e, c, e->in, &len, 0);
            rest = e->in + used;
            rest_len = len - used;
            continue;
        }
        c->resume = 0;
        if (c->state == S_HEAD && !c->in_head) {
            if (!e->shutting_down)
                tl_set(e, c, TL_KEEPALIVE);
            else if (c->tlist != TL_GRACE)
                tl_set(e, c, TL_GRACE); /* answered during the stop: its next request gets
                                           Connection: close, or the grace list closes it */
        } else if (c->state == S_BODY) {
            tl_set(e, c, TL_HEADER); /* body progress restarts the read timeout */
        }
        return;
    }
}

static void conn_read(sws_engine_t *e, sws_conn_t *c)
{
    size_t len = 0, last_len = 0;
    if (c->stash) {
        memcpy(e->in, c->stash, c->stash_len);
        len = last_len = c->stash_len;
        free(c->stash);
        c->stash = NULL;
        c->stash_len = 0;
    }
    ssize_t got;
    for (;;) {
        got = recv(c->fd, e->in + len, e->in_cap - len, 0);
        if (got >= 0 || errno != EINTR)
            break;
    }
    if (got <= 0) {
        if (got < 0 && errno == EAGAIN) {
            conn_settle(e, c, e->in, len);
            return;
        }
        /* EOF or error. Complete requests were answered as they arrived;
         * what is left is a partial head, or lingering. */
        conn_close(e, c);
        return;
    }
    len += (size_t)got;
    if (c->state == S_LINGER) {
        c->linger_bytes += (size_t)got;
        if (c->linger_bytes > LINGER_BYTES)
            conn_close(e, c);
        return;
    }
    size_t used = conn_process(e, c, e->in, &len, last_len);
    conn_settle(e, c, e->in + used, len - used);
}

int pend_send(sws_engine_t *e, sws_conn_t *c)
{
    pend_t *p = c->pend;
    while (p && p->idx < p->niov) {
        int cnt = p->niov - p->idx;
        ssize_t w = send_iov(c->fd, p->iov + p->idx, cnt);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return 1;
            return -1;
        }
        tl_set(e, c, TL_SEND); /* progress restarts the send timeout */
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
    return 0;
}

static void conn_write(sws_engine_t *e, sws_conn_t *c)
{
    int rc = pend_send(e, c);
    if (rc < 0)
        conn_close(e, c);
    if (rc)
        return;
    free(c->heap);
    c->heap = NULL;
    if (c->file) {
        if (conn_send_file(e, c) < 0) {
            conn_close(e, c);
            return;
        }
        if (c->file)
            return; /* more when the socket is writable again */
    }
    conn_set_events(e, c, 0);
    /* Requests that arrived while we were writing wait in the stash
     * (c->resume); conn_settle answers them or closes. */
    conn_settle(e, c, NULL, 0);
}

static void do_accept(sws_engine_t *e, listener_t *l)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        if (e->cnt.active >= e->lim.max_connections) {
            listeners_enable(e, 0); /* back on when a connection closes */
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
                e->accept_resume = e->now + EMFILE_PAUSE_MS;
                return;
            }
            elog(e, SWS_L_ALERT, "accept() failed (%s)", strerror(errno));
            return;
        }
        sws_conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            return;
        }
        c->type = T_CONN;
        c->fd = fd;
        c->vh = l->vh;
        c->tlist = TL_NONE;
        c->state = S_HEAD;
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
        /* EPOLLRDHUP: while a request is proxied the connection is left as
         * it is and a client that leaves is still seen (csrc/proxy.c) */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        c->evmask = EPOLLIN | EPOLLRDHUP;
        e->cnt.accepted++;
        e->cnt.active++;
        tl_set(e, c, TL_HEADER); /* the first request has header_timeout to arrive */
        c->head_armed = 1;
    }
}

static void dispatch(sws_engine_t *e, int n)
{
    for (int i = 0; i < n; i++) {
        int type = *(int *)e->ev[i].data.ptr;
        if (type == T_DEAD)
            continue; /* closed by an earlier event of this batch */
        if (type == T_LISTENER) {
            listener_t *l = e->ev[i].data.ptr;
            if (l->enabled)
                do_accept(e, l);
            continue;
        }
        if (type == T_UPSTREAM) {
            px_upstream_event(e, e->ev[i].data.ptr, e->ev[i].events);
            continue;
        }
        sws_conn_t *c = e->ev[i].data.ptr;
        if (c->px)
            px_client_event(e, c, e->ev[i].events);
        else if (c->pend || c->file)
            conn_write(e, c);
        else
            conn_read(e, c);
    }
    px_bury(e);
}

/* The batching window (ADR 0002, ADR 0003; `batch_window`, 20 us by
 * default): with several proxied requests in flight, a previous pass that
 * found a few events (two or more, but fewer than BATCH_SHORT_PASS), and
 * upstreams that take at least BATCH_WAIT_RATIO times the wait to answer,
 * sleep the window and then poll, instead of blocking until the next answer
 * wakes the worker. Answers and upstream requests then go out in bursts, and
 * an upstream (or load) on a contended core is not interrupted once per
 * answer. A poll that finds fewer than two events ends it: the next wait
 * blocks. Fast upstreams, light load and routes that are not proxied never
 * wait. */
static int batch_regime(const sws_engine_t *e)
{
    return e->lim.batch_window_us && e->px_inflight >= BATCH_MIN_INFLIGHT &&
           e->up_wait_ns >= BATCH_WAIT_RATIO * (e->lim.batch_window_us * 1000u + TIMER_SLACK_NS);
}

static int batch_due(const sws_engine_t *e)
{
    return batch_regime(e) && e->last_events >= BATCH_MIN_PASS &&
           e->last_events < BATCH_SHORT_PASS;
}

/* Busy polling (`busy_poll`; docs/adr/0004-busy-poll.md). A worker that has
 * caught up would block in epoll_wait, and the next request would have to
 * wake it: on a virtual machine that costs the *sender's* core an IPI exit
 * worth about one request, and the worker tens of microseconds of wake-up.
 * So before blocking it polls for up to spin_ns, adapted as cpuidle-haltpoll
 * adapts its guest poll: an idle wait that ended within busy_poll_us (the
 * poll would have caught it) doubles the poll, from SPIN_START_NS (or the
 * bound, if lower) up to busy_poll_us; a longer one (or none at all)
 * halves it, and below SPIN_START_NS it stops. A worker under steady load
 * polls through the short gaps; one that sees requests seldom, or one at a
 * time with long pauses, never polls. Each round yields the CPU, so a peer
 * that shares it (an upstream, a client on the same machine) runs instead
 * of waiting for the poll to end. Where the batching window applies
 * (proxied requests waiting on slow upstreams) the worker does not poll: a
 * poll would take the answers one at a time, which is what the window is
 * there to avoid. epoll_wait(0) is never interrupted by a signal: one that
 * arrives while the worker polls is handled when sws_engine_serve returns
 * to uvloop, within its max_ms. */
static int spin_poll(sws_engine_t *e, uint64_t since)
{
    int n;
    while ((n = epoll_wait(e->epfd, e->ev, EV_BATCH, 0)) == 0 &&
           mono_ns() - since < e->spin_ns)
        sched_yield();
    if (n > 0)
        e->cnt.polls_caught++;
    else
        e->cnt.polls_missed++;
    return n;
}

/* After an idle wait of idle_ns (UINT64_MAX: it found nothing). */
static void spin_adapt(sws_engine_t *e, uint64_t idle_ns)
{
    uint64_t max = (uint64_t)e->lim.busy_poll_us * 1000u;
    if (idle_ns <= max) {
        uint64_t next = e->spin_ns ? e->spin_ns * 2 : SPIN_START_NS;
        e->spin_ns = next < max ? next : max;
    } else if (e->spin_ns) {
        e->spin_ns /= 2;
        if (e->spin_ns < SPIN_START_NS)
            e->spin_ns = 0;
    }
}

/* One pass: the `n` events a blocking wait already returned (n < 0: none,
 * poll first), then more rounds while they come back full, up to
 * RUN_ROUNDS, so the outer loop stays fair. */
static int run_pass(sws_engine_t *e, int n)
{
    update_time(e);
    int total = 0;
    for (int round = 0; round < RUN_ROUNDS; round++) {
        if (round > 0 || n < 0)
            n = epoll_wait(e->epfd, e->ev, EV_BATCH, 0);
        if (n <= 0)
            break;
        dispatch(e, n);
        total += n;
        if (n < EV_BATCH)
            break;
    }
    e->last_events = total;
    if (e->alog_len && e->now - e->alog_last_flush >= e->alog_flush_ms)
        sws_engine_flush(e);
    return total;
}

/* Sleeps the batching window; 0, or -1 if a signal cut it short. */
static int batch_sleep(const sws_engine_t *e)
{
    struct timespec ts = {0, (long)e->lim.batch_window_us * 1000L};
    return nanosleep(&ts, NULL);
}

int sws_engine_run(sws_engine_t *e)
{
    if (batch_due(e))
        batch_sleep(e);
    return run_pass(e, -1);
}

int sws_engine_serve(sws_engine_t *e, int max_ms)
{
    int signalled = batch_due(e) && batch_sleep(e) < 0;
    int total = run_pass(e, -1); /* reads the clock */
    uint64_t end = e->now + (uint64_t)(max_ms > 0 ? max_ms : 0);
    /* Shutting down, the worker's loop checks for the drain after every
     * pass; after a signal, uvloop runs its handler. While a batching
     * window is due, the engine polls on its own timer instead of being
     * woken by each upstream answer; otherwise, with busy_poll, it polls
     * for a while before it blocks. */
    while (!signalled && !e->shutting_down) {
        update_time(e); /* the pass took time too */
        if (e->now >= end)
            break;
        int n = -1;
        if (batch_due(e)) {
            if (batch_sleep(e) < 0)
                break;
        } else {
            /* Idle from the end of a pass that did something: a wait that
             * follows an empty pass (the first of a serve call that found
             * nothing) is no gap between events. */
            uint64_t idle0 = e->lim.busy_poll_us && e->last_events > 0 && !batch_regime(e)
                                 ? mono_ns() : 0;
            if (idle0 && e->spin_ns) {
                n = spin_poll(e, idle0);
                if (n > 0) {
                    total += run_pass(e, n);
                    continue;
                }
                update_time(e); /* the poll took time too */
                if (e->now >= end)
                    break;
            }
            n = epoll_wait(e->epfd, e->ev, EV_BATCH, (int)(end - e->now));
            if (idle0)
                spin_adapt(e, n > 0 ? mono_ns() - idle0 : UINT64_MAX);
            if (n <= 0) {
                e->last_events = 0; /* an empty wait closes the window too */
                break; /* quiet for the rest of max_ms, or a signal (EINTR) */
            }
        }
        total += run_pass(e, n);
    }
    return total;
}

void sws_engine_tick(sws_engine_t *e)
{
    update_time(e);
    for (int which = 0; which < TL_COUNT; which++) {
        tlist_t *l = &e->tl[which];
        while (l->head && l->head->deadline <= e->now) {
            sws_conn_t *c = l->head;
            e->cnt.timeouts++;
            if (which == TL_HEADER && !c->px && c->state == S_HEAD && (c->in_head || c->stash)) {
                /* RFC 9110 §15.5.9: the head did not arrive in time. */
                elog(e, SWS_L_INFO, "client timed out reading the request head");
                tl_unlink(e, c);
                conn_error(e, c, 408, NULL, 0);
                if (out_flush(e, c) < 0) {
                    conn_close(e, c);
                    continue;
                }
                if (!c->pend)
                    conn_linger(e, c);
                else
                    tl_set(e, c, TL_SEND);
                continue;
            }
            conn_close(e, c);
        }
    }
    px_tick(e);
    px_bury(e);
    if (e->accept_paused && e->accept_resume && e->now >= e->accept_resume && !e->shutting_down) {
        e->accept_resume = 0;
        if (e->cnt.active < e->lim.max_connections)
            listeners_enable(e, 1);
    }
    if (e->alog_len && e->now - e->alog_last_flush >= e->alog_flush_ms)
        sws_engine_flush(e);
}

void sws_engine_shutdown(sws_engine_t *e)
{
    /* Answer what already sits in socket buffers first: closing a connection
     * with a request unread would reset it. */
    while (run_pass(e, -1) >= RUN_ROUNDS * EV_BATCH)
        ;
    e->shutting_down = 1;
    px_shutdown(e); /* pooled upstream connections close; busy ones finish */
    listeners_enable(e, 0);
    for (size_t i = 0; i < e->n_listeners; i++) {
        if (e->listeners[i].fd >= 0) {
            close(e->listeners[i].fd); /* the master keeps its copy for the next workers */
            e->listeners[i].fd = -1;
        }
    }
    /* Connections idle for a while close now. One that was answered or
     * accepted in the last STOP_GRACE_MS gets that long again: a busy client
     * is likely sending its next request right now, and closing under it is
     * the keep-alive race that loses a request (RFC 9112 §9.3.1 lets a client
     * retry, but not every client does). Its next request is answered with
     * Connection: close; if none comes, the grace list closes it. The others
     * finish their request. */
    uint64_t ka = e->tl[TL_KEEPALIVE].ms;
    sws_conn_t *c = e->tl[TL_KEEPALIVE].head;
    while (c) {
        sws_conn_t *next = c->tnext;
        if (c->deadline - ka + STOP_GRACE_MS <= e->now)
            conn_close(e, c);
        else
            tl_set(e, c, TL_GRACE);
        c = next;
    }
    uint64_t ht = e->tl[TL_HEADER].ms;
    c = e->tl[TL_HEADER].head;
    while (c) {
        sws_conn_t *next = c->tnext;
        if (c->state == S_HEAD && !c->in_head && !c->stash && !c->px) { /* connected, nothing sent yet */
            if (c->deadline - ht + STOP_GRACE_MS <= e->now)
                conn_close(e, c);
            else
                tl_set(e, c, TL_GRACE);
        }
        c = next;
    }
}

void sws_engine_close_all(sws_engine_t *e)
{
    px_close_all(e); /* proxied clients are in no timeout list */
    for (int which = 0; which < TL_COUNT; which++)
        while (e->tl[which].head)
            conn_close(e, e->tl[which].head);
    px_bury(e);
}
