/* The worker's passes over the inner epoll and the serve loop: busy
 * polling, the batching window; contract in scalws/core.h and, for the
 * public entry points, scalws/engine.h (sws_engine_run, sws_engine_serve). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
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

/* `busy_poll: auto` measures whether the poll pays, per worker (ADR 0027).
 * On a virtual machine it can double the rate of a worker whose requests
 * arrive one by one (one client; an application on another core, which
 * every wake-up of this one interrupts), and cost 10 % more CPU per request
 * for 3 % more rate where the worker is the bottleneck and events queue up
 * anyway. So the engine tick runs PROBE_TICKS ticks with the poll on and
 * off in turn (on, off, off, on, ...: a steady drift of the load falls on
 * both alike) and keeps polling if that cost no more CPU per request (the
 * thread's CPU clock), or served PROBE_GAIN (10 %) more requests per
 * second for at most as much more CPU per request (PHP-FPM on the other
 * core: 21 % more rate for 61 % more CPU is not kept; one client coming
 * back at once: 3x the rate for less CPU is); too few requests to tell, it
 * polls (the poll adapts itself to long gaps). A measurement during which
 * a tick's rate was over twice another's of the same mode (a load that
 * started or stopped in it) is made again, once.
 * The choice holds PROBE_HOLD_TICKS ticks, or until the request rate
 * has halved or doubled for a second. */
static const uint8_t probe_on[PROBE_TICKS] = {1, 0, 0, 1, 1, 0, 0, 1};

static void probe_read(const sws_engine_t *e, uint64_t v[3])
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    v[0] = e->core.cnt.requests;
    v[1] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    v[2] = mono_ns();
}

static void probe_decide(sws_engine_t *e)
{
    const uint64_t *off = e->core.probe_sum[0], *on = e->core.probe_sum[1];
    int was = e->core.poll_chose_off;
    if (off[0] < PROBE_MIN_REQUESTS || on[0] < PROBE_MIN_REQUESTS || !off[2] || !on[2]) {
        elog(e, SWS_L_DEBUG, "busy_poll auto: polling (%lu and %lu requests: too few to tell)",
             (unsigned long)on[0], (unsigned long)off[0]);
        e->core.poll_off = e->core.poll_chose_off = 0;
        e->core.probe_rate = (double)(off[0] + on[0]) * 1e9 / (double)(off[2] + on[2] + 1);
        e->core.probe_idle = 1;
        return;
    }
    e->core.probe_idle = 0;
    double rate_off = (double)off[0] * 1e9 / (double)off[2], rate_on = (double)on[0] * 1e9 / (double)on[2];
    double cpu_off = (double)off[1] / 1e3 / (double)off[0], cpu_on = (double)on[1] / 1e3 / (double)on[0];
    int pays = cpu_on <= cpu_off ||
               (rate_on >= rate_off * PROBE_GAIN && rate_on / rate_off >= cpu_on / cpu_off);
    e->core.poll_off = e->core.poll_chose_off = !pays;
    e->core.probe_rate = e->core.poll_off ? rate_off : rate_on;
    int first = e->core.probes++ == 0;
    elog(e, e->core.poll_off != was || first ? SWS_L_INFO : SWS_L_DEBUG,
         "busy_poll auto: %s (polling %.0f requests/s at %.2f us CPU each, not polling %.0f at %.2f us)",
         e->core.poll_off ? "not polling" : "polling", rate_on, cpu_on, rate_off, cpu_off);
}

void sws_core_poll_tick(sws_engine_t *e)
{
    sws_core_t *k = &e->core;
    if (!k->lim.busy_poll_measure || !k->lim.busy_poll_us)
        return;
    uint64_t now[3];
    probe_read(e, now);
    uint64_t d[3] = {now[0] - k->probe_at[0], now[1] - k->probe_at[1], now[2] - k->probe_at[2]};
    int first = !k->probe_at[2];
    memcpy(k->probe_at, now, sizeof now);
    if (first)
        return; /* the first tick starts the first window */
    if (k->probe_tick < PROBE_TICKS) { /* measuring: the window that just ended */
        int on = probe_on[k->probe_tick];
        for (int i = 0; i < 3; i++)
            k->probe_sum[on][i] += d[i];
        double r = d[2] ? (double)d[0] * 1e9 / (double)d[2] : 0;
        if (k->probe_tick < 2 || r < k->probe_lo[on]) /* ticks 0 and 1: each mode's first */
            k->probe_lo[on] = r;
        if (k->probe_tick < 2 || r > k->probe_hi[on])
            k->probe_hi[on] = r;
        if (++k->probe_tick < PROBE_TICKS) {
            k->poll_off = !probe_on[k->probe_tick];
            return;
        }
        /* a load that started or stopped within the measurement fills one
         * mode's ticks more than the other's: its rates say nothing of the
         * poll (within a mode, what the poll does is the same each tick) */
        int moved = 0;
        for (int m = 0; m < 2; m++)
            moved |= k->probe_hi[m] >= PROBE_MIN_REQUESTS && k->probe_hi[m] > 2 * k->probe_lo[m];
        if (!k->probe_again && moved) {
            elog(e, SWS_L_DEBUG, "busy_poll auto: the rate moved during the measurement (polling %.0f "
                 "to %.0f requests/s a tick, not polling %.0f to %.0f): measuring again",
                 k->probe_lo[1], k->probe_hi[1], k->probe_lo[0], k->probe_hi[0]);
            k->probe_again = 1;
            k->probe_tick = 0;
            memset(k->probe_sum, 0, sizeof k->probe_sum);
            k->poll_off = !probe_on[0];
            return;
        }
        k->probe_again = 0;
        probe_decide(e);
        return;
    }
    /* holding: measure again after PROBE_HOLD_TICKS, or when the rate has
     * been off by 2x for PROBE_MOVED_TICKS ticks in a row (a pause between
     * two runs of a load is not a new load); after a measurement that found
     * too few requests, at the first tick with a load (nothing was known
     * of it: measured at once, the choice is made 2 s after it starts, not
     * 3, and a benchmark's warm-up of 3 s holds the whole measurement) */
    double rate = d[2] ? (double)d[0] * 1e9 / (double)d[2] : 0;
    int moved = (rate > 2 * k->probe_rate || rate < k->probe_rate / 2) &&
                (rate >= PROBE_MIN_REQUESTS || k->probe_rate >= PROBE_MIN_REQUESTS);
    k->probe_moved = moved ? k->probe_moved + 1 : 0;
    if (++k->probe_tick >= PROBE_TICKS + PROBE_HOLD_TICKS ||
        k->probe_moved >= (k->probe_idle ? 1 : PROBE_MOVED_TICKS)) {
        k->probe_tick = k->probe_moved = 0;
        memset(k->probe_sum, 0, sizeof k->probe_sum);
        k->poll_off = !probe_on[0];
    }
}

/* One pass: the `n` events a blocking wait already returned (n < 0: none,
 * poll first), then more rounds while they come back full, up to
 * RUN_ROUNDS, so the outer loop stays fair. */
static int run_pass(sws_engine_t *e, int n)
{
    update_time(e);
    int total = 0;
    e->core.in_pass = 1;
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
    e->core.in_pass = 0;
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
            int poll = e->core.lim.busy_poll_us && !e->core.poll_off && e->core.last_events > 0 &&
                       !batch_regime(e);
            uint64_t idle0 = poll ? mono_ns() : 0;
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
