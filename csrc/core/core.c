/* The core's clocks, error log, timeout lists and deferred frees; contract
 * in scalws/core.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "context.h"

#define LINGER_MS 2000        /* wait for the peer's FIN after our last response */
#define STOP_GRACE_MS 500     /* see sws_engine_shutdown */

int sws_core_init(sws_engine_t *e, const sws_limits_t *limits, int worker_id)
{
    sws_core_t *k = &e->core;
    /* The batching window sleeps for tens of microseconds; with the default
     * 50 us timer slack a 20 us window would last 70. Per thread: this is
     * the worker's one thread. */
    if (limits->batch_window_us)
        prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0);
    k->relay_fd = -1;
    k->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (k->epfd < 0)
        return -errno;
    /* uvloop watches the relay, never the inner epoll itself: adding an
     * epoll to an epoll walks every socket the added one holds (the
     * kernel's loop and wake-up path checks), and that is what uvloop's
     * add_reader did each time a serve call returned, 10,000 sockets deep
     * per worker at 40,000 clients. The relay holds the inner epoll from
     * the start, while it is empty, and is only ever modified after. */
    k->relay_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event rev = {.events = EPOLLIN};
    if (k->relay_fd < 0 || epoll_ctl(k->relay_fd, EPOLL_CTL_ADD, k->epfd, &rev) < 0)
        return -errno;
    k->lim = *limits;
    k->worker_id = worker_id;
    k->tl[TL_HEADER].ms = limits->header_timeout_ms;
    k->tl[TL_BODY].ms = limits->body_timeout_ms;
    k->tl[TL_KEEPALIVE].ms = limits->keepalive_timeout_ms;
    k->tl[TL_SEND].ms = limits->send_timeout_ms;
    k->tl[TL_LINGER].ms = LINGER_MS;
    k->tl[TL_GRACE].ms = STOP_GRACE_MS;
    k->elog_fd = -1;
    k->ready_fd = -1;
    k->elog_level = SWS_L_NOTICE;
    k->wall = -1;
    k->st = &k->st_own; /* until the engine is given a shared slot */
    update_time(e);
    k->waiting = 1; /* set-up until the first pass is not loop work */
    return 0;
}

void sws_core_free(sws_engine_t *e)
{
    sws_core_bury(e);
    sws_rbuf_drain(e);
    if (e->core.ready_fd >= 0)
        close(e->core.ready_fd);
    free(e->core.ready);
    if (e->core.relay_fd >= 0)
        close(e->core.relay_fd);
    if (e->core.epfd >= 0)
        close(e->core.epfd);
}

/* ---- upstream read buffers --------------------------------------------------------- */

void *sws_rbuf_get(sws_engine_t *e, size_t size)
{
    sws_core_t *k = &e->core;
    for (int i = k->n_rbuf - 1; i >= 0; i--) {
        if (k->rbuf[i].size == size) {
            void *p = k->rbuf[i].p;
            k->rbuf[i] = k->rbuf[--k->n_rbuf];
            return p;
        }
    }
    return malloc(size);
}

void sws_rbuf_put(sws_engine_t *e, void *buf, size_t size)
{
    sws_core_t *k = &e->core;
    if (buf && k->n_rbuf < RBUF_KEEP && !k->shutting_down)
        k->rbuf[k->n_rbuf++] = (sws_rbuf_t){buf, size};
    else
        free(buf);
}

void sws_rbuf_drain(sws_engine_t *e)
{
    while (e->core.n_rbuf)
        free(e->core.rbuf[--e->core.n_rbuf].p);
}

int sws_core_watch(sws_engine_t *e, int on)
{
    /* Disarmed, an event on a connection still runs the relay's callback,
     * which finds no event wanted and returns; armed again, the kernel
     * looks at the inner epoll's ready list at once, so nothing that came
     * meanwhile is missed. */
    struct epoll_event ev = {.events = on ? EPOLLIN : 0};
    return epoll_ctl(e->core.relay_fd, EPOLL_CTL_MOD, e->core.epfd, &ev) < 0 ? -errno : 0;
}

/* ---- the ready list ------------------------------------------------------------ */

static void ready_signal(sws_engine_t *e)
{
    uint64_t one = 1;
    if (write(e->core.ready_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        elog(e, SWS_L_ALERT, "eventfd write failed (%s)", strerror(errno));
}

static size_t ready_find(const sws_engine_t *e, const sws_evobj_t *obj)
{
    size_t i = 0;
    while (i < e->core.n_ready && e->core.ready[i].obj != obj)
        i++;
    return i;
}

/* Each listed object that wants input gets EPOLLIN, once per wake-up (one
 * still full of input lists itself again, for the next). A handler may
 * close objects or list others: the list is searched again after each. */
static void ready_event(sws_engine_t *e, void *obj, uint32_t events)
{
    uint64_t n;
    if (read(e->core.ready_fd, &n, sizeof n) < 0 && errno != EAGAIN)
        return;
    size_t budget = e->core.n_ready;
    while (budget--) {
        size_t i = 0;
        while (i < e->core.n_ready && !(*e->core.ready[i].mask & EPOLLIN))
            i++;
        if (i == e->core.n_ready)
            return; /* the rest want nothing now: sws_ready_wants brings them */
        sws_evobj_t *o = e->core.ready[i].obj;
        e->core.ready[i] = e->core.ready[--e->core.n_ready];
        if (o->handler)
            o->handler(e, o, EPOLLIN);
    }
    for (size_t i = 0; i < e->core.n_ready; i++) {
        if (*e->core.ready[i].mask & EPOLLIN) {
            ready_signal(e); /* the rest next pass */
            return;
        }
    }
}

int sws_ready_add(sws_engine_t *e, sws_evobj_t *obj, const uint32_t *mask)
{
    sws_core_t *k = &e->core;
    if (ready_find(e, obj) < k->n_ready)
        return 0;
    if (k->ready_fd < 0) {
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0)
            return -1;
        k->ready_ev.handler = ready_event;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &k->ready_ev};
        if (epoll_ctl(k->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            return -1;
        }
        k->ready_fd = fd;
    }
    if (k->n_ready == k->cap_ready) {
        size_t cap = k->cap_ready ? k->cap_ready * 2 : 16;
        sws_ready_t *r = realloc(k->ready, cap * sizeof *r);
        if (!r)
            return -1;
        k->ready = r;
        k->cap_ready = cap;
    }
    k->ready[k->n_ready++] = (sws_ready_t){obj, mask};
    if (*mask & EPOLLIN)
        ready_signal(e);
    return 0;
}

void sws_ready_remove(sws_engine_t *e, sws_evobj_t *obj)
{
    size_t i = ready_find(e, obj);
    if (i < e->core.n_ready)
        e->core.ready[i] = e->core.ready[--e->core.n_ready];
}

void sws_ready_wants(sws_engine_t *e, sws_evobj_t *obj)
{
    if (ready_find(e, obj) < e->core.n_ready)
        ready_signal(e);
}

/* ---- clocks ------------------------------------------------------------------ */

void sws_engine_now(uint64_t *mono_ms, time_t *wall)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    *mono_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    *wall = ts.tv_sec;
}

void update_time(sws_engine_t *e)
{
    sws_core_t *k = &e->core;
    struct timespec ts;
    /* The fine clock (vDSO, as mono_ns), not the coarse one: busy and idle
     * intervals are microseconds long, under a coarse tick (1-4 ms). */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    k->now = ns / 1000000u;
    if (k->clock_ns) { /* busy or idle since the previous reading (core.h) */
        if (k->waiting)
            k->st->idle_ns += ns - k->clock_ns;
        else
            k->st->busy_ns += ns - k->clock_ns;
    }
    k->clock_ns = ns;
    k->waiting = 0;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    time_t wall = ts.tv_sec;
    if (wall != k->wall) {
        k->wall = wall;
        sws_http_date(wall, k->date);
        sws_log_times(wall, k->log_time, k->iso_time, k->err_time);
    }
}

/* ---- error log --------------------------------------------------------------- */

static const char *LEVELS[] = {"emerg", "alert", "crit", "error", "warn", "notice", "info", "debug"};

#define ELOG_COUNT_MAX 64 /* " (and 4294967295 more like this in the last ...s)" fits */

static const char JSON_HEX[] = "0123456789abcdef";

char *sws_json_escape(char *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *p++ = '\\';
            *p++ = (char)ch;
        } else if (ch < 0x20 || ch > 0x7e) {
            memcpy(p, "\\u00", 4);
            p += 4;
            *p++ = JSON_HEX[ch >> 4];
            *p++ = JSON_HEX[ch & 15];
        } else {
            *p++ = (char)ch;
        }
    }
    return p;
}

/* log.error_format json: the line `text` (its prefix left out) as
 * {"time":..,"level":..,"pid":..,"worker":..,"msg":".."}, written at once. */
static void elog_json(sws_engine_t *e, int level, const char *text, size_t len)
{
    sws_core_t *k = &e->core;
    char out[1024 * 6 + 160];
    int head = snprintf(out, 160, "{\"time\":\"%.*s\",\"level\":\"%s\",\"pid\":%d,"
                        "\"worker\":%d,\"msg\":\"", SWS_ISO_TIME_LEN, k->iso_time, LEVELS[level],
                        (int)getpid(), k->worker_id);
    char *p = sws_json_escape(out + head, text, len); /* 6 bytes a byte at most */
    memcpy(p, "\"}\n", 3);
    p += 3;
    ssize_t w = write(k->elog_fd >= 0 ? k->elog_fd : 2, out, (size_t)(p - out));
    (void)w;
}

/* Writes one line: the prefix, the message, and when `folded` the count of
 * the key's lines folded since its previous line (`span` seconds ago). With
 * `key`, the message is kept in key->text for the tick's count line, and
 * cut so that the count always fits. */
static void elog_line(sws_engine_t *e, int level, sws_elog_key_t *key, uint32_t folded,
                      long span, const char *fmt, va_list ap)
{
    sws_core_t *k = &e->core;
    char buf[1024];
    int head = snprintf(buf, sizeof buf, "%.*s [%s] %d#%d: ", SWS_ERR_TIME_LEN, k->err_time,
                        LEVELS[level], (int)getpid(), k->worker_id);
    int room = (int)sizeof buf - head - 1 - (key ? ELOG_COUNT_MAX : 0); /* with its NUL */
    int n = vsnprintf(buf + head, (size_t)room, fmt, ap);
    if (n < 0)
        n = 0;
    if (n > room - 1)
        n = room - 1;
    if (key) {
        key->len = (uint16_t)(n < SWS_ELOG_TEXT ? n : SWS_ELOG_TEXT);
        memcpy(key->text, buf + head, key->len);
    }
    n += head;
    if (folded) {
        int c = snprintf(buf + n, ELOG_COUNT_MAX, " (and %u more like this in the last %lds)",
                         folded, span);
        n += c < ELOG_COUNT_MAX ? c : ELOG_COUNT_MAX - 1;
    }
    if (k->elog_json) {
        elog_json(e, level, buf + head, (size_t)(n - head));
        return;
    }
    buf[n++] = '\n';
    ssize_t w = write(k->elog_fd >= 0 ? k->elog_fd : 2, buf, (size_t)n);
    (void)w;
}

void elog(sws_engine_t *e, int level, const char *fmt, ...)
{
    if (level > e->core.elog_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    elog_line(e, level, NULL, 0, 0, fmt, ap);
    va_end(ap);
}

/* Seconds from `since` to now, at least 1: what "in the last Ns" says. */
static long elog_span(const sws_core_t *k, time_t since)
{
    return k->wall > since ? (long)(k->wall - since) : 1;
}

static void elog_count(sws_engine_t *e, sws_elog_key_t *key)
{
    elog(e, key->level, "%u more like this in the last %lds: %.*s", key->folded,
         elog_span(&e->core, key->sec), (int)key->len, key->text);
    key->folded = 0;
}

/* The slot of (cause, who); else a free one, else the one idle longest
 * among those not used this second (its count written first: nothing is
 * lost); NULL when every slot was used this second. */
static sws_elog_key_t *elog_key(sws_engine_t *e, const char *cause, uint64_t who)
{
    sws_core_t *k = &e->core;
    sws_elog_key_t *spare = NULL;
    for (sws_elog_key_t *key = k->elog_keys; key < k->elog_keys + SWS_ELOG_KEYS; key++) {
        if (key->cause == cause && key->who == who)
            return key;
        if (spare && !spare->cause)
            continue;
        if (!key->cause || (key->sec != k->wall && (!spare || key->sec < spare->sec)))
            spare = key;
    }
    if (spare && spare->folded)
        elog_count(e, spare);
    if (spare)
        spare->cause = NULL;
    return spare;
}

void elog_folded(sws_engine_t *e, const char *cause, uint64_t who, int level,
                 const char *fmt, ...)
{
    sws_core_t *k = &e->core;
    if (level > k->elog_level)
        return;
    sws_elog_key_t *key = elog_key(e, cause, who);
    if (!key) {
        if (!k->elog_others || level < k->elog_others_level)
            k->elog_others_level = level;
        if (!k->elog_others++)
            k->elog_others_sec = k->wall;
        return;
    }
    if (key->cause && key->sec == k->wall) {
        key->folded++;
        return;
    }
    uint32_t folded = key->cause ? key->folded : 0;
    long span = elog_span(k, key->sec);
    *key = (sws_elog_key_t){.cause = cause, .who = who, .sec = k->wall, .level = (uint8_t)level};
    va_list ap;
    va_start(ap, fmt);
    elog_line(e, level, key, folded, span, fmt, ap);
    va_end(ap);
}

void sws_elog_flush(sws_engine_t *e, int all)
{
    sws_core_t *k = &e->core;
    for (sws_elog_key_t *key = k->elog_keys; key < k->elog_keys + SWS_ELOG_KEYS; key++)
        if (key->folded && (all || key->sec != k->wall))
            elog_count(e, key);
    if (k->elog_others && (all || k->elog_others_sec != k->wall)) {
        elog(e, k->elog_others_level, "%u more lines of other kinds in the last %lds "
             "(the error-log budget tracks %d kinds at once)", k->elog_others,
             elog_span(k, k->elog_others_sec), SWS_ELOG_KEYS);
        k->elog_others = 0;
    }
}

/* ---- timeout lists ------------------------------------------------------------- */

void tl_unlink(sws_engine_t *e, sws_tnode_t *c)
{
    if (c->tlist == TL_NONE)
        return;
    tlist_t *l = &e->core.tl[(int)c->tlist];
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
    l->n--;
}

void tl_set(sws_engine_t *e, sws_tnode_t *c, int which)
{
    tl_unlink(e, c);
    tlist_t *l = &e->core.tl[which];
    c->deadline = e->core.now + l->ms;
    c->tlist = (signed char)which;
    c->tprev = l->tail;
    c->tnext = NULL;
    if (l->tail)
        l->tail->tnext = c;
    else
        l->head = c;
    l->tail = c;
    l->n++;
}

void sws_core_expire(sws_engine_t *e)
{
    for (int which = 0; which < TL_COUNT; which++) {
        tlist_t *l = &e->core.tl[which];
        while (l->head && l->head->deadline <= e->core.now) {
            e->core.cnt.timeouts++;
            e->core.on_expire(e, l->head, which);
        }
    }
}

/* ---- deferred frees -------------------------------------------------------------- */

void sws_core_defer_free(sws_engine_t *e, sws_evobj_t *obj)
{
    obj->handler = NULL; /* an event still in this batch finds it dead and skips it */
    obj->dead_next = e->core.dead;
    e->core.dead = obj;
}

void sws_core_bury(sws_engine_t *e)
{
    while (e->core.dead) {
        sws_evobj_t *o = e->core.dead;
        e->core.dead = o->dead_next;
        free(o);
    }
}
