/* FastCGI connections against the application's children (the FastCGI
 * handler's; contract in scalws/fastcgi.h, insides in fastcgi_int.h).
 *
 * PHP-FPM gives each open connection a child until the connection closes,
 * so a kept connection holds a child, and a connection opened while every
 * child holds one waits in FPM's accept queue, unanswered, for one of them
 * to close. A worker learns from that how many connections a server answers
 * at once, and past it its requests wait here, oldest first, for one of its
 * kept connections, instead of in the application's queue:
 *
 *   - A request on a new connection is watched (s->fcgi_new) until the
 *     first byte of its answer. Once the oldest there has waited
 *     FCGI_STALL_MS the server is stalled: connections that end a request
 *     meanwhile are closed, not pooled (fastcgi.c, reuse_refusal), so that
 *     FPM's children take the queued ones, and the first of them to end
 *     teaches the count: the connections busy less those unanswered
 *     (fq_learn; only ever lowered there).
 *   - With a count known, a request that finds none of the server's
 *     connections idle opens one only below the count, and not while the
 *     server is stalled; else it waits (s->fcgi_q), and each connection
 *     that ends a request goes to the oldest waiting (fq_kick).
 *   - The count grows: while requests wait, one connection past it is
 *     opened every FCGI_PROBE_MS; one answered at once raises the count to
 *     the connections answered (fq_heard), and the next may be opened at
 *     once, so a count learned low (a slow script on a new connection looks
 *     like a queued one) comes back in a few round trips.
 *   - A request waits at most its read_timeout (what it would have waited
 *     in the application's accept queue), then it is answered 504; a client
 *     that leaves only leaves the queue (nothing was sent).
 *
 * Without the count, 64 clients before 4 children kept about 60
 * connections in FPM's queue and the stall closed one connection in 11
 * (a reconnect every 11 requests, both sides paying for it); with it the
 * 4 connections are kept and the clients served in turn. nginx has no such
 * rule: with `keepalive` over the children it serves the clients on the
 * kept connections and leaves the others in FPM's queue until its
 * fastcgi_read_timeout (docs/adr/0038-fastcgi-children-learned.md).
 */
#include "fastcgi_int.h"

/* The three lists here (a server's new connections, its waiting requests,
 * its open ones) are intrusive and doubly linked, oldest first; the server
 * holds their ends as void pointers (upstream.h does not know fx_t). */
#define LIST_PUSH(head, tail, x, prev, next)                                                   \
    do {                                                                                       \
        (x)->next = NULL;                                                                      \
        (x)->prev = (fx_t *)(tail);                                                            \
        if ((x)->prev)                                                                         \
            (x)->prev->next = (x);                                                             \
        else                                                                                   \
            (head) = (x);                                                                      \
        (tail) = (x);                                                                          \
    } while (0)
#define LIST_DROP(head, tail, x, prev, next)                                                   \
    do {                                                                                       \
        if ((x)->prev)                                                                         \
            (x)->prev->next = (x)->next;                                                       \
        else                                                                                   \
            (head) = (x)->next;                                                                \
        if ((x)->next)                                                                         \
            (x)->next->prev = (x)->prev;                                                       \
        else                                                                                   \
            (tail) = (x)->prev;                                                                \
    } while (0)

void fq_watch(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s)
{
    x->fresh = 1;
    x->t_new = e->core.now;
    LIST_PUSH(s->fcgi_new, s->fcgi_new_tail, x, nprev, nnext);
    s->fcgi_n_new++;
}

void fq_unwatch(fx_t *x)
{
    if (!x->fresh)
        return;
    sws_upstream_server_t *s = x->uc->srv;
    LIST_DROP(s->fcgi_new, s->fcgi_new_tail, x, nprev, nnext);
    s->fcgi_n_new--;
    if (!s->fcgi_n_new)
        s->fcgi_freed = 0;
    x->fresh = 0;
}

/* The connections to s that hold a child now: those open (busy or
 * pooled), less those not answered since they opened, but for those whose
 * child was freed by closing a kept one (FPM takes them in turn). */
static uint32_t answered(const sws_upstream_server_t *s)
{
    uint32_t waiting = s->fcgi_n_new > s->fcgi_freed ? s->fcgi_n_new - s->fcgi_freed : 0;
    return s->conns > waiting ? s->conns - waiting : 0;
}

void fq_heard(sws_engine_t *e, fx_t *x)
{
    if (!x->fresh)
        return;
    sws_upstream_server_t *s = x->uc->srv;
    int freed = s->fcgi_freed > 0; /* a child freed by closing a kept connection took it */
    if (freed)
        s->fcgi_freed--;
    fq_unwatch(x);
    if (!freed && s->fcgi_cap && answered(s) > s->fcgi_cap) {
        elog(e, SWS_L_DEBUG, "FastCGI server %s answers %u connections at once (was %u)",
             s->name, answered(s), s->fcgi_cap);
        s->fcgi_cap = answered(s);
        s->fcgi_probe_at = 0; /* it had room: the next may be tried at once */
    }
}

int fq_stalled(const sws_engine_t *e, const sws_upstream_server_t *s)
{
    const fx_t *oldest = s->fcgi_new;
    return oldest && e->core.now - oldest->t_new >= FCGI_STALL_MS;
}

void fq_freed(sws_upstream_server_t *s)
{
    s->fcgi_freed++;
}

void fq_learn(sws_engine_t *e, sws_upstream_server_t *s)
{
    uint32_t n = answered(s);
    if (n < 1)
        n = 1;
    if (!s->fcgi_cap || n < s->fcgi_cap) {
        elog(e, SWS_L_DEBUG, "FastCGI server %s answers %u connections at once (was %u)",
             s->name, n, s->fcgi_cap);
        s->fcgi_cap = n;
    }
    s->fcgi_probe_at = e->core.now;
}

int fq_may_connect(sws_engine_t *e, sws_upstream_server_t *s)
{
    if (s->max_conns && s->active >= s->max_conns)
        return 0;
    if (!s->fcgi_cap)
        return 1;
    if (fq_stalled(e, s))
        return 0;
    if (s->conns < s->fcgi_cap)
        return 1;
    if (e->core.now - s->fcgi_probe_at < FCGI_PROBE_MS)
        return 0;
    s->fcgi_probe_at = e->core.now; /* one past the count: does it answer at once? */
    return 1;
}

void fq_wait(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s)
{
    x->waiting = 1;
    x->wsrv = s;
    x->t_wait = e->core.now;
    x->wait_until = e->core.now + x->f->read_timeout_ms;
    x->up->st->queue_waits++;
    LIST_PUSH(s->fcgi_q, s->fcgi_q_tail, x, wprev, wnext);
    s->fcgi_n_q++;
    e->fx.n_waiting++;
    elog(e, SWS_L_DEBUG, "FastCGI request waits for a connection to %s (%u waiting)", s->name,
         s->fcgi_n_q);
}

void fq_leave(sws_engine_t *e, fx_t *x)
{
    if (!x->waiting)
        return;
    sws_upstream_server_t *s = x->wsrv;
    LIST_DROP(s->fcgi_q, s->fcgi_q_tail, x, wprev, wnext);
    s->fcgi_n_q--;
    e->fx.n_waiting--;
    x->up->st->queue_wait_ms += e->core.now - x->t_wait;
    x->waiting = 0;
    x->wsrv = NULL;
}

void fq_wait_front(sws_engine_t *e, fx_t *x, sws_upstream_server_t *s)
{
    fq_wait(e, x, s);
    if (s->fcgi_q == x)
        return;
    /* from the back to the front */
    x->wprev->wnext = NULL;
    s->fcgi_q_tail = x->wprev;
    x->wprev = NULL;
    x->wnext = s->fcgi_q;
    ((fx_t *)s->fcgi_q)->wprev = x;
    s->fcgi_q = x;
}

/* ---- one request behind another ------------------------------------------------- */

int fq_may_follow(const fx_t *x)
{
    return (x->method == SWS_M_GET || x->method == SWS_M_HEAD) && x->can_retry &&
           x->req_done && x->f->keep_conn && x->f->pipeline && !x->woff;
}

int fq_drains(sws_engine_t *e, const upconn_t *uc)
{
    sws_upstream_server_t *s = uc->srv;
    if (!fq_stalled(e, s)) {
        s->fcgi_drain = NULL;
        return 0;
    }
    if (!s->fcgi_drain)
        s->fcgi_drain = uc; /* cleared by uc_close */
    return s->fcgi_drain == uc;
}

void fq_close(fx_t *x)
{
    if (!x->open)
        return;
    sws_upstream_server_t *s = x->uc->srv;
    LIST_DROP(s->fcgi_open, s->fcgi_open_tail, x, oprev, onext);
    x->open = 0;
}

void fq_open(sws_engine_t *e, fx_t *x)
{
    sws_upstream_server_t *s = x->uc->srv;
    fx_t *w = s->fcgi_q;
    if (w && fq_may_follow(w)) {
        fq_leave(e, w);
        fq_behind(e, x, w);
        return;
    }
    x->open = 1;
    LIST_PUSH(s->fcgi_open, s->fcgi_open_tail, x, oprev, onext);
}

fx_t *fq_pick_open(sws_engine_t *e, sws_upstream_server_t *s)
{
    while (s->fcgi_open) {
        fx_t *x = s->fcgi_open;
        fq_close(x);
        /* the oldest first: it should end first, unless it is a slow one, and
         * then those after it are younger still */
        if (e->core.now - x->t_owner < FCGI_PIPE_MS)
            return x;
    }
    return NULL;
}

/* One request behind another on a connection: PHP-FPM
 * reads the next request when it has answered one, so a child that ends
 * x1's finds x2's already there instead of waiting for this worker to
 * wake up, read the answer and write the next (on a virtual machine a
 * wake-up is the bulk of a short script's round trip). x2 is written at
 * once (what the socket does not take goes after, with x1's writes); when
 * x1's answer ends, the connection is x2's, with the bytes read after
 * x1's END_REQUEST. If the connection fails first, x2 goes back to the
 * front of the wait: it is a GET or HEAD whose request is all at hand. */
void fq_behind(sws_engine_t *e, fx_t *x1, fx_t *x2)
{
    upconn_t *uc = x1->uc;
    elog(e, SWS_L_DEBUG, "FastCGI request written behind another on a connection to %s",
         uc->srv->name);
    x1->behind = x2;
    x1->followed = 1;
    x2->ahead = x1;
    x2->fs = FS_BEHIND;
    uc->requests++;
    uc->up->st->requests++;
    uc->up->st->pipelined++;
    (void)fx_send_rest(e, uc, x2); /* the rest with x1's writes; a failure shows on x1's side */
    fx_sync(e, x1);
}

/* x1 has ended: the connection goes to x2 behind it. */
void fq_hand_on(sws_engine_t *e, fx_t *x1, upconn_t *uc)
{
    fx_t *x2 = x1->behind;
    x1->behind = NULL;
    x1->followed = 0; /* the connection is x2's now */
    x2->ahead = NULL;
    uc->owner = x2;
    x2->uc = uc;
    x2->heard = 0;
    x2->t_owner = e->core.now;
    x2->fs = FS_HEAD;
    uc->dkind = D_NONE;
    if (x1->left_len) { /* x2's answer began in x1's last read */
        memcpy(x2->rbuf, x1->rbuf + x1->left_at, x1->left_len);
        x2->pend = x1->left_len;
        x1->left_len = 0;
        sws_ready_add(e, &uc->ev, &uc->evmask); /* read there, as if it came now */
    }
    fx_sync(e, x2);
}

/* x1's connection failed or will not go on: x2 behind it waits again,
 * first in line, for another. */
void fq_unfollow(sws_engine_t *e, fx_t *x1)
{
    fx_t *x2 = x1->behind;
    x1->behind = NULL;
    x2->ahead = NULL;
    memcpy(x2->w, x2->head, x2->head_len);
    x2->wlen = x2->head_len;
    x2->woff = 0;
    x2->fs = FS_HEAD;
    fq_wait_front(e, x2, x1->uc->srv);
    fq_kick_later(e, x1->uc->srv);
}

/* An idle pooled connection to s? */
static int has_idle(const sws_upstream_server_t *s, const sws_upstream_t *up)
{
    for (const upconn_t *uc = up->idle; uc; uc = uc->inext)
        if (uc->srv == s)
            return 1;
    return 0;
}

void fq_kick_later(sws_engine_t *e, sws_upstream_server_t *s)
{
    if (s->fcgi_q && !s->fcgi_kick_due) {
        s->fcgi_kick_due = 1;
        e->fx.kick_due = 1;
    }
}

/* The waiting requests of s, oldest first, while a connection is idle or
 * may be opened (or the server left: they go elsewhere). fx_resume may
 * end a request, whose connection only marks s due again. */
static void kick(sws_engine_t *e, sws_upstream_server_t *s)
{
    s->fcgi_kick_due = 0;
    while (s->fcgi_q) {
        fx_t *x = s->fcgi_q;
        int gone = s->removed || s->hc_down || s->down_until > e->core.now;
        if (!gone && !has_idle(s, x->up) && !fq_may_connect(e, s))
            break;
        fq_leave(e, x);
        fx_resume(e, x, s);
    }
}

void fq_run_kicks(sws_engine_t *e)
{
    while (e->fx.kick_due) {
        e->fx.kick_due = 0;
        for (size_t i = 0; i < e->up.n_upstreams; i++) {
            sws_upstream_t *up = e->up.upstreams[i];
            for (size_t k = 0; k < up->n_servers; k++)
                if (up->servers[k]->fcgi_kick_due)
                    kick(e, up->servers[k]);
        }
    }
}

/* The gauges of the shared counters: what this worker learned of each
 * group's servers, and its requests waiting for them. */
static void gauges(sws_engine_t *e)
{
    for (size_t i = 0; i < e->up.n_upstreams; i++) {
        sws_upstream_t *up = e->up.upstreams[i];
        uint64_t cap = 0, queued = 0;
        for (size_t k = 0; k < up->n_servers; k++) {
            cap += up->servers[k]->fcgi_cap;
            queued += up->servers[k]->fcgi_n_q;
        }
        up->st->capacity = cap;
        up->st->queued = queued;
    }
}

void sws_fastcgi_tick(sws_engine_t *e)
{
    fq_run_kicks(e);
    gauges(e);
    if (!e->fx.n_waiting)
        return;
    for (size_t i = 0; i < e->up.n_upstreams; i++) {
        sws_upstream_t *up = e->up.upstreams[i];
        for (size_t k = 0; k < up->n_servers; k++) {
            sws_upstream_server_t *s = up->servers[k];
            /* the oldest wait first: a later one with a shorter read_timeout
             * (another route) is found by the walk */
            for (fx_t *x = s->fcgi_q, *next; x; x = next) {
                next = x->wnext;
                if (x->wait_until <= e->core.now) {
                    fq_leave(e, x);
                    fx_wait_expired(e, x, s);
                    next = s->fcgi_q; /* answering may have changed the queue */
                }
            }
            if (s->fcgi_q)
                kick(e, s);
        }
    }
    fq_run_kicks(e); /* an answer above may have freed a connection */
}
