/* QUIC's bookkeeping (csrc/http/h3/h3_int.h): the table that finds a
 * connection by any of its connection IDs, and the timers: a min-heap of
 * connections by expiry with one timerfd at its top. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>

#include "http/h3/h3_int.h"

/* ---- the connection ID table ---------------------------------------------------------------- */

/* A keyed hash (the seed is random per worker: a client choosing IDs
 * cannot aim them at one chain). */
static size_t cid_hash(const sws_engine_t *e, const uint8_t *id, size_t len)
{
    uint64_t h = e->h3.seed ^ (len * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < len; i++) {
        h ^= id[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return (size_t)(h & e->h3.tab_mask);
}

h3conn_t *h3_cid_find(sws_engine_t *e, const uint8_t *id, size_t len)
{
    if (!e->h3.tab)
        return NULL;
    for (cident_t *c = e->h3.tab[cid_hash(e, id, len)]; c; c = c->next)
        if (c->len == len && memcmp(c->id, id, len) == 0)
            return c->hc;
    return NULL;
}

static int tab_grow(sws_engine_t *e)
{
    size_t n = (e->h3.tab_mask + 1) * 2;
    cident_t **nt = calloc(n, sizeof *nt);
    if (!nt)
        return -1;
    size_t old = e->h3.tab_mask + 1;
    cident_t **ot = e->h3.tab;
    e->h3.tab = nt;
    e->h3.tab_mask = n - 1;
    for (size_t i = 0; i < old; i++)
        for (cident_t *c = ot[i], *nx; c; c = nx) {
            nx = c->next;
            size_t b = cid_hash(e, c->id, c->len);
            c->next = nt[b];
            nt[b] = c;
        }
    free(ot);
    return 0;
}

int h3_cid_add(sws_engine_t *e, h3conn_t *hc, const uint8_t *id, size_t len)
{
    if (len > NGTCP2_MAX_CIDLEN)
        return -1;
    if (h3_cid_find(e, id, len))
        return -1; /* taken (a client reusing an ID of another connection) */
    if (e->h3.n_cids >= e->h3.tab_mask + 1 && tab_grow(e) < 0)
        return -1;
    cident_t *c = malloc(sizeof *c);
    if (!c)
        return -1;
    c->hc = hc;
    c->len = (uint8_t)len;
    memcpy(c->id, id, len);
    size_t b = cid_hash(e, id, len);
    c->next = e->h3.tab[b];
    e->h3.tab[b] = c;
    e->h3.n_cids++;
    hc->n_cids++;
    return 0;
}

void h3_cid_del(sws_engine_t *e, const h3conn_t *hc, const uint8_t *id, size_t len)
{
    if (!e->h3.tab)
        return;
    for (cident_t **pp = &e->h3.tab[cid_hash(e, id, len)]; *pp; pp = &(*pp)->next) {
        cident_t *c = *pp;
        if (c->hc == hc && c->len == len && memcmp(c->id, id, len) == 0) {
            *pp = c->next;
            c->hc->n_cids--;
            e->h3.n_cids--;
            free(c);
            return;
        }
    }
}

/* Every entry naming hc (its IDs as ngtcp2 still knows them, then a sweep
 * for any it forgot). */
static void cid_forget(sws_engine_t *e, h3conn_t *hc)
{
    if (hc->qc) {
        size_t n = ngtcp2_conn_get_num_scid(hc->qc);
        ngtcp2_cid ids[n ? n : 1];
        n = ngtcp2_conn_get_scid(hc->qc, ids);
        for (size_t i = 0; i < n && hc->n_cids; i++)
            h3_cid_del(e, hc, ids[i].data, ids[i].datalen);
    }
    for (size_t b = 0; hc->n_cids && b <= e->h3.tab_mask; b++)
        for (cident_t **pp = &e->h3.tab[b]; *pp;) {
            cident_t *c = *pp;
            if (c->hc == hc) {
                *pp = c->next;
                hc->n_cids--;
                e->h3.n_cids--;
                free(c);
            } else {
                pp = &c->next;
            }
        }
}

/* ---- timers: a min-heap of connections by expiry, one timerfd at its top ------------------- */

static void heap_swap(sws_engine_t *e, size_t a, size_t b)
{
    h3conn_t **h = e->h3.heap;
    h3conn_t *t = h[a];
    h[a] = h[b];
    h[b] = t;
    h[a]->heap_at = a + 1;
    h[b]->heap_at = b + 1;
}

static void heap_up(sws_engine_t *e, size_t i)
{
    while (i) {
        size_t p = (i - 1) / 2;
        if (e->h3.heap[p]->expiry <= e->h3.heap[i]->expiry)
            break;
        heap_swap(e, p, i);
        i = p;
    }
}

void h3_heap_down(sws_engine_t *e, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < e->h3.n_heap && e->h3.heap[l]->expiry < e->h3.heap[m]->expiry)
            m = l;
        if (l + 1 < e->h3.n_heap && e->h3.heap[l + 1]->expiry < e->h3.heap[m]->expiry)
            m = l + 1;
        if (m == i)
            return;
        heap_swap(e, i, m);
        i = m;
    }
}

void h3_heap_del(sws_engine_t *e, h3conn_t *hc)
{
    if (!hc->heap_at)
        return;
    size_t i = hc->heap_at - 1;
    hc->heap_at = 0;
    size_t last = --e->h3.n_heap;
    if (i != last) {
        e->h3.heap[i] = e->h3.heap[last];
        e->h3.heap[i]->heap_at = i + 1;
        heap_up(e, i);
        h3_heap_down(e, i);
    }
}

/* The timerfd fires at or before the heap's top (at most H3_TIMER_SLACK
 * late). It is set again only when the top comes earlier than it: a
 * setting costs a system call and a hrtimer reprogramming (on a VM 23 % of
 * the worker's time when it followed every write, as expiries move with
 * each packet). A timer that fires early finds nothing due and is set to
 * the top then. */
void h3_arm(sws_engine_t *e)
{
    uint64_t at = e->h3.n_heap ? e->h3.heap[0]->expiry : UINT64_MAX;
    if (at == UINT64_MAX)
        return; /* nothing to wait for: an armed timer fires once more, harmlessly */
    if (e->h3.armed_ns && e->h3.armed_ns <= at + H3_TIMER_SLACK)
        return;
    struct itimerspec its = {{0, 0}, {0, 0}};
    its.it_value.tv_sec = (time_t)(at / 1000000000u);
    its.it_value.tv_nsec = (long)(at % 1000000000u);
    if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
        its.it_value.tv_nsec = 1;
    if (timerfd_settime(e->h3.tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        e->h3.armed_ns = at;
}

/* hc's next expiry from ngtcp2 (or its closing period's end), in the heap. */
void h3_timer(sws_engine_t *e, h3conn_t *hc)
{
    uint64_t at = (hc->closing || hc->draining) ? hc->close_until
                                                : (uint64_t)ngtcp2_conn_get_expiry(hc->qc);
    if (hc->goaway_until && (!hc->n_streams || !hc->goaway_final) && !hc->closing &&
        !hc->draining && hc->goaway_until < at)
        at = hc->goaway_until;
    if (e->h3.stopping && !hc->closing && !hc->draining && hc->last_rx + H3_DRAIN_SILENCE < at)
        at = hc->last_rx + H3_DRAIN_SILENCE;
    hc->expiry = at;
    if (!hc->heap_at) {
        if (e->h3.n_heap == e->h3.cap_heap) {
            size_t cap = e->h3.cap_heap ? e->h3.cap_heap * 2 : 64;
            h3conn_t **nh = realloc(e->h3.heap, cap * sizeof *nh);
            if (!nh)
                return; /* no timer: the connection ends at the next datagram's error, or idles */
            e->h3.heap = nh;
            e->h3.cap_heap = cap;
        }
        e->h3.heap[e->h3.n_heap] = hc;
        hc->heap_at = ++e->h3.n_heap;
        heap_up(e, hc->heap_at - 1);
    } else {
        heap_up(e, hc->heap_at - 1);
        h3_heap_down(e, hc->heap_at - 1);
    }
    h3_arm(e);
}

void h3_conn_forget(sws_engine_t *e, h3conn_t *hc)
{
    cid_forget(e, hc);
    h3_heap_del(e, hc);
}
