/* The worker's passes over the inner epoll and the serve loop: busy
 * polling, the batching window; contract in scalws/core.h and, for the
 * public entry points, scalws/engine.h (sws_engine_run, sws_engine_serve). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

#include "context.h"

/* Every event goes to its object's handler; an object closed by an earlier
 * event of the batch has none. Closed objects are freed after the batch. */
static void dispatch(sws_engine_t *e, int n)
{
    for (int i = 0; i < n; i++) {
        sws_evobj_t *o = e->core.ev[i].data.ptr;
        if (o->handler)
            o->handler(e, o, e->core.ev[i].events);
    }
    sws_core_bury(e);
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
    return e->core.lim.batch_window_us && e->core.up_inflight >= BATCH_MIN_INFLIGHT &&
           e->core.up_wait_ns >= BATCH_WAIT_RATIO * (e->core.lim.batch_window_us * 1000u + TIMER_SLACK_NS);
}

static int batch_due(const sws_engine_t *e)
{
    return batch_regime(e) && e->core.last_events >= BATCH_MIN_PASS &&
           e->core.last_events < BATCH_SHORT_PASS;
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
    while ((n = epoll_wait(e->core.epfd, e->core.ev, EV_BATCH, 0)) == 0 &&
           mono_ns() - since < e->core.spin_ns)
        sched_yield();
    if (n > 0)
        e->core.cnt.polls_caught++;
    else
        e->core.cnt.polls_missed++;
    return n;
}

/* After an idle wait of idle_ns (UINT64_MAX: it found nothing). */
static void spin_adapt(sws_engine_t *e, uint64_t idle_ns)
{
    uint64_t max = (uint64_t)e->core.lim.busy_poll_us * 1000u;
    if (idle_ns <= max) {
        uint64_t next = e->core.spin_ns ? e->core.spin_ns * 2 : SPIN_START_NS;
        e->core.spin_ns = next < max ? next : max;
    } else if (e->core.spin_ns) {
        e->core.spin_ns /= 2;
        if (e->core.spin_ns < SPIN_START_NS)
            e->core.spin_ns = 0;
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
            n = epoll_wait(e->core.epfd, e->core.ev, EV_BATCH, 0);
        if (n <= 0)
            break;
        dispatch(e, n);
        total += n;
        if (n < EV_BATCH)
            break;
    }
    e->core.last_events = total;
    e->core.after_pass(e);
    return total;
}

/* Sleeps the batching window; 0, or -1 if a signal cut it short. */
static int batch_sleep(sws_engine_t *e)
{
    e->core.waiting = 1; /* idle time, for the busy/idle counters */
    struct timespec ts = {0, (long)e->core.lim.batch_window_us * 1000L};
    return nanosleep(&ts, NULL);
}

int sws_core_run(sws_engine_t *e)
{
    if (batch_due(e))
        batch_sleep(e);
    int n = run_pass(e, -1);
    e->core.waiting = 1; /* back to the caller's loop, to wait */
    return n;
}

int sws_core_serve(sws_engine_t *e, int max_ms)
{
    int signalled = batch_due(e) && batch_sleep(e) < 0;
    int total = run_pass(e, -1); /* reads the clock */
    uint64_t end = e->core.now + (uint64_t)(max_ms > 0 ? max_ms : 0);
    /* Shutting down, the worker's loop checks for the drain after every
     * pass; after a signal, uvloop runs its handler. While a batching
     * window is due, the engine polls on its own timer instead of being
     * woken by each upstream answer; otherwise, with busy_poll, it polls
     * for a while before it blocks. */
    while (!signalled && !e->core.shutting_down) {
        update_time(e); /* the pass took time too */
        if (e->core.now >= end)
            break;
        int n = -1;
        if (batch_due(e)) {
            if (batch_sleep(e) < 0)
                break;
        } else {
            /* Idle from the end of a pass that did something: a wait that
             * follows an empty pass (the first of a serve call that found
             * nothing) is no gap between events. */
            uint64_t idle0 = e->core.lim.busy_poll_us && e->core.last_events > 0 && !batch_regime(e)
                                 ? mono_ns() : 0;
            if (idle0 && e->core.spin_ns) {
                n = spin_poll(e, idle0);
                if (n > 0) {
                    total += run_pass(e, n);
                    continue;
                }
                update_time(e); /* the poll took time too */
                if (e->core.now >= end)
                    break;
            }
            e->core.waiting = 1; /* until run_pass's clock reading: idle */
            n = epoll_wait(e->core.epfd, e->core.ev, EV_BATCH, (int)(end - e->core.now));
            if (idle0)
                spin_adapt(e, n > 0 ? mono_ns() - idle0 : UINT64_MAX);
            if (n <= 0) {
                e->core.last_events = 0; /* an empty wait closes the window too */
                break; /* quiet for the rest of max_ms, or a signal (EINTR) */
            }
        }
        total += run_pass(e, n);
    }
    /* Back to uvloop, which blocks until the next event: idle until the
     * next clock reading (a signal's Python handler counts there too). */
    e->core.waiting = 1;
    return total;
}

int sws_core_pass(sws_engine_t *e) { return run_pass(e, -1); }
