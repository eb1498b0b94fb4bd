/* The response cache's store: a zone of shared memory with an index, a
 * recency list with a second chance, and a heap with boundary tags
 * (scalws/cachestore.h says what each part is for). */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "scalws/cachestore.h"

#define MAGIC 0x3165686361637773ull /* "swscache1" */
#define MINB 48                     /* header, two links, footer; a multiple of 16 */
#define USED 1ull
#define BSIZE(v) ((v) & ~15ull)
#define EPI(z) ((z)->heap_end - 16) /* the epilogue: a used tag of size 0 */

/* The process's view of the registry, for a rebuild that must know which
 * fills are still alive (set by sws_cs_claim). */
static sws_cs_registry_t *g_reg;

static inline uint64_t *tagp(sws_cs_t *z, uint64_t b) { return (uint64_t *)((char *)z + b); }
static inline uint64_t *nextp(sws_cs_t *z, uint64_t b) { return tagp(z, b + 8); }
static inline uint64_t *prevp(sws_cs_t *z, uint64_t b) { return tagp(z, b + 16); }
static inline void set_tags(sws_cs_t *z, uint64_t b, uint64_t size, uint64_t used)
{
    *tagp(z, b + size - 8) = size | used; /* footer first: a walk reads only headers */
    *tagp(z, b) = size | used;
}
static inline sws_cs_ref_t *ref_table(sws_cs_t *z, int slot)
{
    return (sws_cs_ref_t *)((char *)z + z->refs_off) + (size_t)slot * SWS_CS_REF_SLOTS;
}
static inline uint64_t *bucket(sws_cs_t *z, uint64_t hash)
{
    return (uint64_t *)((char *)z + z->buckets_off) + (hash & (z->nbuckets - 1));
}
/* The entry of block b, and the block of an entry. */
static inline uint64_t ent_off(uint64_t b) { return b + 8; }
static inline uint64_t blk_of(uint64_t off) { return off - 8; }

/* ---- free lists ---------------------------------------------------------------------- */

static int bin_of(uint64_t s)
{
    int l = 63 - __builtin_clzll(s); /* s >= MINB: l >= 5 */
    int b = (l - 5) * 4 + (int)((s >> (l - 2)) & 3);
    return b < SWS_CS_BINS ? b : SWS_CS_BINS - 1;
}

static void fl_insert(sws_cs_t *z, uint64_t b, uint64_t size)
{
    int i = bin_of(size);
    *nextp(z, b) = z->bins[i];
    *prevp(z, b) = 0;
    if (z->bins[i])
        *prevp(z, z->bins[i]) = b;
    z->bins[i] = b;
    z->binmap[i / 64] |= 1ull << (i % 64);
}

static void fl_remove(sws_cs_t *z, uint64_t b, uint64_t size)
{
    int i = bin_of(size);
    uint64_t n = *nextp(z, b), p = *prevp(z, b);
    if (p)
        *nextp(z, p) = n;
    else
        z->bins[i] = n;
    if (n)
        *prevp(z, n) = p;
    if (!z->bins[i])
        z->binmap[i / 64] &= ~(1ull << (i % 64));
}

/* A used block of `need` bytes (tags included, a multiple of 16), or 0. */
static uint64_t blk_alloc(sws_cs_t *z, uint64_t need)
{
    int i = bin_of(need);
    uint64_t b = 0;
    int k = 0;
    for (uint64_t f = z->bins[i]; f && k < 16; f = *nextp(z, f), k++)
        if (BSIZE(*tagp(z, f)) >= need) {
            b = f;
            break;
        }
    for (int j = i + 1; !b && j < SWS_CS_BINS; j++) {
        uint64_t m = z->binmap[j / 64] >> (j % 64);
        if (!m) {
            j = (j / 64 + 1) * 64 - 1; /* the rest of this word is empty */
            continue;
        }
        j += __builtin_ctzll(m);
        b = z->bins[j];
    }
    if (!b)
        return 0;
    uint64_t s = BSIZE(*tagp(z, b));
    fl_remove(z, b, s);
    /* the entry's fixed part reads "free" before the tag says used: a
     * process killed between the two leaves nothing a rebuild would keep */
    memset(tagp(z, b + 8), 0, sizeof(sws_cent_t) < need - 16 ? sizeof(sws_cent_t) : need - 16);
    if (s - need >= MINB) {
        /* the rest's tags first, inside what still reads as one free block */
        set_tags(z, b + need, s - need, 0);
        fl_insert(z, b + need, s - need);
        s = need;
    }
    set_tags(z, b, s, USED);
    z->c.mem_used += s;
    return b;
}

/* Returns the start of the free block b became part of. */
static uint64_t blk_free(sws_cs_t *z, uint64_t b)
{
    uint64_t s = BSIZE(*tagp(z, b));
    z->c.mem_used -= s;
    uint64_t nx = b + s;
    uint64_t nt = *tagp(z, nx);
    if (!(nt & USED)) {
        fl_remove(z, nx, BSIZE(nt));
        s += BSIZE(nt);
    }
    uint64_t pt = *tagp(z, b - 8);
    if (!(pt & USED)) {
        uint64_t p = b - BSIZE(pt);
        fl_remove(z, p, BSIZE(pt));
        s += BSIZE(pt);
        b = p;
    }
    set_tags(z, b, s, 0);
    fl_insert(z, b, s);
    return b;
}

/* ---- formatting and rebuilding ------------------------------------------------------- */

static void heap_format(sws_cs_t *z)
{
    z->gen++; /* every block reserved before is gone: fillers find out (ent->gen) */
    memset(z->bins, 0, sizeof z->bins);
    memset(z->binmap, 0, sizeof z->binmap);
    /* prologue: a used block of 16; epilogue: a used header of size 0 */
    set_tags(z, z->heap_off, 16, USED);
    *tagp(z, EPI(z)) = USED;
    uint64_t b = z->heap_off + 16, s = EPI(z) - b;
    set_tags(z, b, s, 0);
    fl_insert(z, b, s);
    z->c.mem_used = 0;
}

static void format(sws_cs_t *z, size_t size)
{
    z->size = size;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&z->mu, &a);
    pthread_mutexattr_destroy(&a);
    uint64_t nb = 256;
    while (nb * 2048 < size)
        nb *= 2;
    z->nbuckets = nb;
    z->buckets_off = (sizeof *z + 63) & ~63ull;
    z->refs_off = z->buckets_off + nb * 8;
    z->heap_off = (z->refs_off + (uint64_t)SWS_CS_HOLDERS * SWS_CS_REF_SLOTS * sizeof(sws_cs_ref_t) +
                   15) & ~15ull;
    z->heap_end = size & ~15ull;
    z->c.mem_size = z->heap_end - z->heap_off;
    heap_format(z);
    z->magic = MAGIC;
}

static int filler_alive(int filler)
{
    /* a dead owner's slot keeps its pid until a process claims slots
     * again (sws_cs_claim reaps it then): no system call here, the worker
     * may be sandboxed */
    if (!filler || !g_reg)
        return 0;
    return g_reg->pid[filler - 1] != 0;
}

static void lru_push_head(sws_cs_t *z, sws_cent_t *ent)
{
    uint64_t off = sws_cs_off(z, ent);
    ent->lprev = 0;
    ent->lnext = z->lru_head;
    if (z->lru_head)
        sws_cs_ent(z, z->lru_head)->lprev = off;
    else
        z->lru_tail = off;
    z->lru_head = off;
}

static void lru_push_tail(sws_cs_t *z, sws_cent_t *ent)
{
    uint64_t off = sws_cs_off(z, ent);
    ent->lnext = 0;
    ent->lprev = z->lru_tail;
    if (z->lru_tail)
        sws_cs_ent(z, z->lru_tail)->lnext = off;
    else
        z->lru_head = off;
    z->lru_tail = off;
}

static void lru_remove(sws_cs_t *z, sws_cent_t *ent)
{
    if (ent->lprev)
        sws_cs_ent(z, ent->lprev)->lnext = ent->lnext;
    else
        z->lru_head = ent->lnext;
    if (ent->lnext)
        sws_cs_ent(z, ent->lnext)->lprev = ent->lprev;
    else
        z->lru_tail = ent->lprev;
    ent->lprev = ent->lnext = 0;
}

static uint64_t ent_bytes(const sws_cent_t *ent)
{
    return ent->key_len + ent->vary_len + ent->tags_len + ent->head_len + ent->body_len;
}

/* The index, the recency list, the free lists and the gauges again, from
 * the blocks: what a worker that died holding the mutex may have left half
 * changed. Entries keep their bytes; the recency order becomes address
 * order. A heap whose tags do not walk is formatted again (only when
 * nothing references it). */
static void rebuild(sws_cs_t *z)
{
    memset((char *)z + z->buckets_off, 0, z->nbuckets * 8);
    memset(z->bins, 0, sizeof z->bins);
    memset(z->binmap, 0, sizeof z->binmap);
    z->lru_head = z->lru_tail = 0;
    z->c.entries = z->c.bytes_stored = z->c.mem_used = 0;
    /* first a walk that only checks */
    uint64_t b = z->heap_off;
    int ok = BSIZE(*tagp(z, b)) == 16;
    while (ok && b < EPI(z)) {
        uint64_t s = BSIZE(*tagp(z, b));
        if (s < 16 || s % 16 || b + s > EPI(z))
            ok = 0;
        b += s;
    }
    if (!ok || b != EPI(z)) {
        memset((char *)z + z->refs_off, 0,
               (size_t)SWS_CS_HOLDERS * SWS_CS_REF_SLOTS * sizeof(sws_cs_ref_t));
        heap_format(z);
        return;
    }
    /* references, from the holders' tables */
    for (b = z->heap_off + 16; b < EPI(z); b += BSIZE(*tagp(z, b)))
        if (*tagp(z, b) & USED)
            sws_cs_ent(z, ent_off(b))->refs = 0;
    for (int s = 0; s < SWS_CS_HOLDERS; s++) {
        sws_cs_ref_t *t = ref_table(z, s);
        for (int i = 0; i < SWS_CS_REF_SLOTS; i++) {
            uint64_t o = t[i].off;
            if (!o)
                continue;
            if (o < z->heap_off + 24 || o >= z->heap_end || !(*tagp(z, blk_of(o)) & USED)) {
                t[i].off = t[i].count = 0;
                continue;
            }
            sws_cs_ent(z, o)->refs += (uint32_t)t[i].count;
        }
    }
    uint64_t run = 0; /* start of a run of free blocks */
    for (b = z->heap_off + 16;; b += BSIZE(*tagp(z, b))) {
        int at_end = b >= EPI(z);
        int is_free = !at_end && !(*tagp(z, b) & USED);
        if (!at_end && !is_free) {
            sws_cent_t *ent = sws_cs_ent(z, ent_off(b));
            uint64_t room = BSIZE(*tagp(z, b)) - 16 - sizeof(sws_cent_t);
            int sane = (uint64_t)ent->key_len + ent->vary_len + ent->tags_len + ent->head_len <= room &&
                       ent->body_len <= room;
            int keep = (ent->state == CS_READY && sane) || (ent->state == CS_DEAD && ent->refs) ||
                       ((ent->state == CS_PENDING || ent->state == CS_FILLING) &&
                        filler_alive(ent->filler));
            if (!keep) {
                uint64_t s = BSIZE(*tagp(z, b));
                set_tags(z, b, s, 0);
                is_free = 1;
            } else {
                z->c.mem_used += BSIZE(*tagp(z, b));
                if (ent->state == CS_READY || ent->state == CS_PENDING) {
                    uint64_t *bk = bucket(z, ent->hash);
                    ent->bnext = *bk;
                    *bk = ent_off(b);
                }
                if (ent->state == CS_READY) {
                    lru_push_tail(z, ent);
                    z->c.entries++;
                    z->c.bytes_stored += ent_bytes(ent);
                }
            }
        }
        if (is_free) {
            if (!run)
                run = b;
            continue;
        }
        if (run) {
            set_tags(z, run, b - run, 0);
            fl_insert(z, run, b - run);
            run = 0;
        }
        if (at_end)
            break;
    }
}

int sws_cs_attach(void *mem, size_t size, int self_pid)
{
    sws_cs_t *z = mem;
    if (size < SWS_CS_MIN_SIZE)
        return -1;
    for (;;) {
        uint32_t st = __atomic_load_n(&z->state, __ATOMIC_ACQUIRE);
        if (st == 2)
            return z->magic == MAGIC && z->size == size ? 0 : -1;
        uint32_t zero = 0;
        if (st == 0 && __atomic_compare_exchange_n(&z->state, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                                   __ATOMIC_ACQUIRE)) {
            z->formatter = (uint32_t)self_pid;
            format(z, size);
            __atomic_store_n(&z->state, 2, __ATOMIC_RELEASE);
            return 0;
        }
        sched_yield(); /* another worker formats it: a few microseconds */
    }
}

/* The mutex. A robust futex wakes one waiter when its owner dies; if that
 * waiter dies too before it takes the lock (two workers killed at once),
 * the others would sleep for ever. So a contended wait is bounded (50 ms)
 * and tried again, which sees the dead owner. The uncontended path is one
 * compare-and-swap, as pthread_mutex_lock's. */
static int lock_robust(pthread_mutex_t *mu)
{
    int r = pthread_mutex_trylock(mu);
    while (r == EBUSY) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts); /* timedlock's clock; a jump only changes one wait */
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        r = pthread_mutex_timedlock(mu, &ts);
        if (r == ETIMEDOUT)
            r = EBUSY;
    }
    return r;
}

int sws_cs_lock(sws_cs_t *z)
{
    int r = lock_robust(&z->mu);
    if (r == EOWNERDEAD) {
        rebuild(z);
        pthread_mutex_consistent(&z->mu);
        return 1;
    }
    return 0;
}

void sws_cs_unlock(sws_cs_t *z) { pthread_mutex_unlock(&z->mu); }

/* ---- holders ------------------------------------------------------------------------- */

static void free_or_dead(sws_cs_t *z, sws_cent_t *ent)
{
    if (ent->refs)
        ent->state = CS_DEAD;
    else {
        ent->state = CS_FREE;
        blk_free(z, blk_of(sws_cs_off(z, ent)));
    }
}

void sws_cs_reap(sws_cs_t *z, int slot)
{
    sws_cs_lock(z);
    sws_cs_ref_t *t = ref_table(z, slot);
    for (int i = 0; i < SWS_CS_REF_SLOTS; i++) {
        if (!t[i].off)
            continue;
        sws_cent_t *ent = sws_cs_ent(z, t[i].off);
        ent->refs -= (uint32_t)t[i].count;
        t[i].off = t[i].count = 0;
        if (!ent->refs && ent->state == CS_DEAD)
            free_or_dead(z, ent);
    }
    for (uint64_t b = z->heap_off + 16; b < EPI(z);) {
        if (*tagp(z, b) & USED) {
            sws_cent_t *ent = sws_cs_ent(z, ent_off(b));
            if (ent->filler == slot + 1 && ent->state == CS_PENDING && !ent->refs) {
                uint64_t *p = bucket(z, ent->hash), off = ent_off(b);
                while (*p && *p != off)
                    p = &sws_cs_ent(z, *p)->bnext;
                if (*p)
                    *p = ent->bnext; /* its waiters go upstream after their timeout */
                ent->state = CS_FREE;
                b = blk_free(z, b); /* may have merged with its neighbours */
            } else if (ent->filler == slot + 1 && ent->state == CS_FILLING && !ent->refs) {
                ent->state = CS_FREE;
                b = blk_free(z, b);
            }
        }
        b += BSIZE(*tagp(z, b));
    }
    sws_cs_unlock(z);
}

int sws_cs_claim(sws_cs_registry_t *reg, int self_pid, sws_cs_t *const *zones, size_t n,
                 int (*alive)(int pid))
{
    g_reg = reg;
    int mine = -1;
    /* every slot whose process is gone is given back (a worker that was
     * killed: its fills and references), then one is ours */
    for (int i = 0; i < SWS_CS_HOLDERS; i++) {
        int pid = reg->pid[i];
        if (pid == self_pid) {
            mine = i;
            continue;
        }
        if (!pid || alive(pid))
            continue;
        if (!__atomic_compare_exchange_n(&reg->pid[i], &pid, -1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue; /* another process is reclaiming it */
        for (size_t k = 0; k < n; k++)
            sws_cs_reap(zones[k], i);
        __atomic_store_n(&reg->pid[i], 0, __ATOMIC_RELEASE);
    }
    for (int i = 0; mine < 0 && i < SWS_CS_HOLDERS; i++) {
        int zero = 0;
        if (__atomic_compare_exchange_n(&reg->pid[i], &zero, self_pid, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            mine = i;
    }
    return mine;
}

/* ---- the index ------------------------------------------------------------------------- */

uint64_t sws_cs_chain(sws_cs_t *z, uint64_t hash) { return *bucket(z, hash); }

sws_cent_t *sws_cs_reserve(sws_cs_t *z, uint64_t bytes, int slot, int pending)
{
    uint64_t need = (bytes + 16 + 15) & ~15ull;
    if (need < MINB)
        need = MINB;
    if (need > z->c.mem_size / 2)
        return NULL;
    uint64_t b = 0;
    uint64_t second = z->c.entries; /* each entry gets at most one more chance */
    for (int evicted = 0; !(b = blk_alloc(z, need));) {
        sws_cent_t *t = sws_cs_ent(z, z->lru_tail);
        if (!t || evicted >= 4096)
            return NULL;
        if ((t->flags & CS_F_HIT) && second) {
            second--;
            t->flags &= (uint8_t)~CS_F_HIT;
            lru_remove(z, t);
            lru_push_head(z, t);
            continue;
        }
        sws_cs_unlink(z, t);
        z->c.evictions++;
        evicted++;
    }
    sws_cent_t *ent = sws_cs_ent(z, ent_off(b));
    memset(ent, 0, sizeof *ent);
    ent->state = pending ? CS_PENDING : CS_FILLING;
    ent->filler = (uint16_t)(slot + 1);
    ent->gen = z->gen;
    return ent;
}

void sws_cs_publish(sws_cs_t *z, sws_cent_t *ent, int state)
{
    uint64_t off = sws_cs_off(z, ent);
    uint64_t *bk = bucket(z, ent->hash);
    ent->bnext = *bk;
    ent->state = (uint8_t)state;
    if (state == CS_READY) {
        ent->filler = 0;
        ent->flags = 0;
        lru_push_head(z, ent);
        z->c.entries++;
        z->c.bytes_stored += ent_bytes(ent);
    }
    *bk = off; /* last: the chain reads whole before it */
}

void sws_cs_unlink(sws_cs_t *z, sws_cent_t *ent)
{
    uint64_t off = sws_cs_off(z, ent);
    uint64_t *p = bucket(z, ent->hash);
    while (*p && *p != off)
        p = &sws_cs_ent(z, *p)->bnext;
    if (*p)
        *p = ent->bnext;
    ent->bnext = 0;
    if (ent->state == CS_READY) {
        lru_remove(z, ent);
        z->c.entries--;
        z->c.bytes_stored -= ent_bytes(ent);
    }
    free_or_dead(z, ent);
}

void sws_cs_abandon(sws_cs_t *z, sws_cent_t *ent)
{
    if (ent->gen != z->gen || ent->state != CS_FILLING)
        return; /* the heap was formatted again, or a reap took it back */
    ent->state = CS_FREE;
    blk_free(z, blk_of(sws_cs_off(z, ent)));
}

/* ---- references ------------------------------------------------------------------------ */

int sws_cs_ref(sws_cs_t *z, int slot, sws_cent_t *ent)
{
    uint64_t off = sws_cs_off(z, ent);
    sws_cs_ref_t *t = ref_table(z, slot), *fr = NULL;
    for (int i = 0; i < SWS_CS_REF_SLOTS; i++) {
        if (t[i].off == off) {
            t[i].count++;
            ent->refs++;
            return 0;
        }
        if (!t[i].off && !fr)
            fr = &t[i];
    }
    if (!fr)
        return -1;
    fr->off = off;
    fr->count = 1;
    ent->refs++;
    return 0;
}

void sws_cs_unref(sws_cs_t *z, int slot, uint64_t off)
{
    sws_cs_ref_t *t = ref_table(z, slot);
    for (int i = 0; i < SWS_CS_REF_SLOTS; i++) {
        if (t[i].off != off)
            continue;
        sws_cent_t *ent = sws_cs_ent(z, off);
        if (!--t[i].count)
            t[i].off = 0;
        if (!--ent->refs && ent->state == CS_DEAD)
            free_or_dead(z, ent);
        return;
    }
}

size_t sws_cs_sweep(sws_cs_t *z, int (*fn)(sws_cent_t *ent, void *arg), void *arg)
{
    size_t n = 0;
    uint64_t *bk = (uint64_t *)((char *)z + z->buckets_off);
    for (uint64_t i = 0; i < z->nbuckets; i++) {
        uint64_t off = bk[i];
        while (off) {
            sws_cent_t *ent = sws_cs_ent(z, off);
            off = ent->bnext;
            if (fn(ent, arg)) {
                sws_cs_unlink(z, ent);
                n++;
            }
        }
    }
    return n;
}

/* ---- checks ---------------------------------------------------------------------------- */

int sws_cs_check(sws_cs_t *z)
{
    uint64_t used = 0, nfree = 0, ready = 0, bytes = 0;
    int prev_free = 0;
    uint64_t b = z->heap_off + 16;
    for (; b < EPI(z);) {
        uint64_t t = *tagp(z, b), s = BSIZE(t);
        if (s < MINB || b + s > EPI(z))
            return -1;
        if (*tagp(z, b + s - 8) != t)
            return -2;
        if (!(t & USED)) {
            if (prev_free)
                return -3; /* two free neighbours were not merged */
            nfree++;
        } else {
            used += s;
            sws_cent_t *ent = sws_cs_ent(z, ent_off(b));
            if (ent->state == CS_READY) {
                ready++;
                bytes += ent_bytes(ent);
            }
        }
        prev_free = !(t & USED);
        b += s;
    }
    if (b != EPI(z))
        return -4;
    if (used != z->c.mem_used)
        return -5;
    uint64_t listed = 0;
    for (int i = 0; i < SWS_CS_BINS; i++)
        for (uint64_t f = z->bins[i]; f; f = *nextp(z, f)) {
            if (*tagp(z, f) & USED || bin_of(BSIZE(*tagp(z, f))) != i)
                return -6;
            listed++;
        }
    if (listed != nfree)
        return -7;
    if (ready != z->c.entries || bytes != z->c.bytes_stored)
        return -8;
    uint64_t n = 0;
    for (uint64_t o = z->lru_head; o; o = sws_cs_ent(z, o)->lnext)
        if (++n > ready || sws_cs_ent(z, o)->state != CS_READY)
            return -9;
    if (n != ready)
        return -10;
    n = 0;
    uint64_t *bk = (uint64_t *)((char *)z + z->buckets_off);
    for (uint64_t i = 0; i < z->nbuckets; i++)
        for (uint64_t o = bk[i]; o; o = sws_cs_ent(z, o)->bnext) {
            sws_cent_t *ent = sws_cs_ent(z, o);
            if ((ent->hash & (z->nbuckets - 1)) != i)
                return -11;
            if (ent->state == CS_READY)
                n++;
            else if (ent->state != CS_PENDING)
                return -12;
        }
    return n == ready ? 0 : -13;
}
