/* busy_poll auto's measurement (sws_core_poll_tick, csrc/core/loop.c; ADR
 * 0027) driven tick by tick: the cases set the requests served between
 * ticks by hand (e->core.cnt.requests) and sleep 5 ms between ticks (more
 * where a case says) so that each has a duration (a tick's rate is its
 * requests over its length: a late wake-up lowers it, by less than 2x); the
 * thread's CPU clock is the real one (nearly nothing: the choices the cases
 * check do not depend on it, or are checked against the logged figures).
 * The log goes to a memfd the cases read back. Linked with core.c,
 * loop.c and httpdate.c alone. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "context.h"
#include "guard.h"

static sws_engine_t *e;

static void fresh(void)
{
    memset(&e->core, 0, sizeof e->core);
    e->core.elog_fd = memfd_create("elog", 0);
    e->core.elog_level = SWS_L_DEBUG;
    e->core.wall = 1000;
    memcpy(e->core.err_time, "2026/12/05 00:00:00", SWS_ERR_TIME_LEN);
    e->core.lim.busy_poll_us = 50;
    e->core.lim.busy_poll_measure = 1;
}

static void done(void)
{
    close(e->core.elog_fd);
    t_end();
}

/* One tick, `served` requests in the `ms` milliseconds after the previous. */
static void tick_ms(uint64_t served, long ms)
{
    struct timespec d = {0, ms * 1000000};
    nanosleep(&d, NULL);
    e->core.cnt.requests += served;
    sws_core_poll_tick(e);
}

static void tick(uint64_t served) { tick_ms(served, 5); }

/* The first tick starts the first window; PROBE_TICKS more measure it,
 * with `on` and `off` requests a tick in each mode. */
static void measure(uint64_t on, uint64_t off)
{
    for (int i = 0; i < PROBE_TICKS; i++)
        tick(e->core.poll_off ? off : on);
}

static int log_has(const char *s)
{
    char raw[1 << 15];
    ssize_t n = pread(e->core.elog_fd, raw, sizeof raw - 1, 0);
    raw[n > 0 ? n : 0] = 0;
    return strstr(raw, s) != NULL;
}

static void test_an_idle_start_polls_and_a_load_is_measured_at_once(void)
{
    fresh();
    tick(0);
    measure(0, 0);
    CHECK(!e->core.poll_off && e->core.probe_idle, "too few requests: it polls");
    CHECK(log_has("too few to tell"), "the debug line says why");
    CHECK(e->core.probe_tick == PROBE_TICKS, "holding: %u", e->core.probe_tick);
    tick_ms(3, 100); /* a trickle under PROBE_MIN_REQUESTS a second is no load */
    CHECK(e->core.probe_tick == PROBE_TICKS + 1, "still holding: %u", e->core.probe_tick);
    tick(5000); /* a load: measured from the next tick, not four later */
    CHECK(e->core.probe_tick == 0 && e->core.probe_moved == 0, "measuring again: tick %u, moved %u",
          e->core.probe_tick, e->core.probe_moved);
    measure(1000, 1000); /* the same rate either way: the CPU clock decides */
    CHECK(!e->core.probe_idle && e->core.probes == 1, "a measured choice: %u", e->core.probes);
    done();
}

static void test_a_measured_load_needs_four_ticks_to_count_as_moved(void)
{
    fresh();
    tick(0);
    measure(3000, 1000); /* 3x the rate with the poll (a tick's length varies): it polls */
    CHECK(!e->core.poll_off && !e->core.probe_idle && e->core.probes == 1, "polling, measured");
    CHECK(log_has("busy_poll auto: polling (polling"), "the info line");
    for (int i = 1; i < PROBE_MOVED_TICKS; i++) {
        tick(50000); /* 10x the rate: moved, but not for long enough yet */
        CHECK(e->core.probe_tick == PROBE_TICKS + (uint32_t)i && e->core.probe_moved == (uint32_t)i,
              "tick %d: holding (%u, moved %u)", i, e->core.probe_tick, e->core.probe_moved);
    }
    tick(50000);
    CHECK(e->core.probe_tick == 0 && e->core.probe_moved == 0, "measuring again after %d ticks",
          PROBE_MOVED_TICKS);
    /* a pause after a measured load waits as long (between two runs of a
     * load: the next run is measured as the one before was) */
    measure(50000, 50000);
    CHECK(e->core.probes == 2 && !e->core.probe_idle, "measured twice: %u", e->core.probes);
    for (int i = 1; i < PROBE_MOVED_TICKS; i++)
        tick(0);
    CHECK(e->core.probe_tick == PROBE_TICKS + PROBE_MOVED_TICKS - 1 &&
              e->core.probe_moved == PROBE_MOVED_TICKS - 1,
          "a pause: still holding (%u, moved %u)", e->core.probe_tick, e->core.probe_moved);
    tick(0);
    CHECK(e->core.probe_tick == 0, "measuring again after %d idle ticks", PROBE_MOVED_TICKS);
    done();
}

static void test_a_load_that_starts_during_a_measurement_is_measured_again(void)
{
    fresh();
    tick(0);
    /* the first measurement after the start: the load comes at its fourth
     * tick, so the polling ticks (0, 3, 4, 7) have three loaded and the
     * others two: 1.5x the rate "with the poll" that the poll did not make */
    for (int i = 0; i < PROBE_TICKS; i++)
        tick(i < 3 ? 0 : 1000);
    CHECK(e->core.probe_tick == 0 && e->core.probe_again && e->core.probes == 0,
          "measuring again, nothing chosen (tick %u, probes %u)", e->core.probe_tick, e->core.probes);
    CHECK(log_has("the rate moved during the measurement"), "the debug line says why");
    measure(1000, 1000);
    CHECK(e->core.probes == 1 && !e->core.probe_again && e->core.probe_tick == PROBE_TICKS,
          "then chosen (probes %u)", e->core.probes);
    done();
}

static void test_a_load_that_moves_twice_is_chosen_for_the_second_time(void)
{
    fresh();
    tick(0);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < PROBE_TICKS; i++)
            tick(i % 4 == 1 ? 0 : 1000); /* a burst load: each mode has an empty tick */
    CHECK(e->core.probes == 1 && !e->core.probe_again, "measured again once, then chosen: %u",
          e->core.probes);
    done();
}

static void test_the_choice_follows_the_rule(void)
{
    /* 8 % more requests with the poll, under PROBE_GAIN: it polls only if
     * that cost no more CPU per request (the real clock decides; the rule
     * is checked against the sums the choice was made from); 3x more
     * requests: it polls if the CPU per request rose at most 3x */
    fresh();
    tick(0);
    measure(1080, 1000);
    const uint64_t *off = e->core.probe_sum[0], *on = e->core.probe_sum[1];
    double ron = (double)on[0] / (double)on[2], roff = (double)off[0] / (double)off[2];
    double con = (double)on[1] / (double)on[0], coff = (double)off[1] / (double)off[0];
    int pays = con <= coff;
    CHECK(e->core.probes == 1 && e->core.poll_off == !pays,
          "polling %.0f/s at %.0f ns, not %.0f/s at %.0f ns", ron * 1e9, con, roff * 1e9, coff);
    CHECK(log_has(pays ? "busy_poll auto: polling (" : "busy_poll auto: not polling ("),
          "the info line");
    done();
    fresh();
    tick(0);
    measure(3000, 1000);
    ron = (double)on[0] / (double)on[2], roff = (double)off[0] / (double)off[2];
    con = (double)on[1] / (double)on[0], coff = (double)off[1] / (double)off[0];
    pays = con <= coff || (ron >= PROBE_GAIN * roff && ron / roff >= con / coff);
    CHECK(e->core.probes == 1 && e->core.poll_off == !pays,
          "polling %.0f/s at %.0f ns, not %.0f/s at %.0f ns", ron * 1e9, con, roff * 1e9, coff);
    done();
}

int main(void)
{
    e = calloc(1, sizeof *e);
    test_an_idle_start_polls_and_a_load_is_measured_at_once();
    test_a_measured_load_needs_four_ticks_to_count_as_moved();
    test_a_load_that_starts_during_a_measurement_is_measured_again();
    test_a_load_that_moves_twice_is_chosen_for_the_second_time();
    test_the_choice_follows_the_rule();
    free(e);
    return t_summary();
}
