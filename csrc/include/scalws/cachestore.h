/* scalws/cachestore.h — the response cache's store: one zone in shared
 * memory, read and filled by every worker of an instance (issue 17;
 * docs/adr/0014-response-cache.md). The HTTP meaning of what is stored is
 * the cache handler's (csrc/handlers/cache_*.c); this is memory, an index,
 * recency and references.
 *
 * Layout of a zone (a MAP_SHARED mapping the master makes before it forks
 * and keeps for its life; zero-filled; the first worker to attach formats
 * it):
 *
 *   sws_cs_t        header: magic, the robust process-shared mutex, the
 *                   counters, the free-list bins, the recency list ends
 *   buckets         uint64_t offsets of hash chains (a power of two)
 *   ref tables      per holder slot: which entries it references, so the
 *                   references of a worker that died can be given back
 *   heap            blocks with boundary tags: [size|used] payload [size|used]
 *
 * Every entry is one used block: sws_cent_t, then its key, its Vary
 * values, its tags, its stored head and its body. Offsets, never pointers:
 * every process maps the zone at the same address (inherited), but the
 * format does not rely on it.
 *
 * Concurrency: one mutex per zone (PTHREAD_PROCESS_SHARED, ROBUST). Every
 * change to the index, the recency list, the heap or a reference count is
 * made with it held; the bytes of an entry being filled are copied with it
 * released, into a block nobody else can see (state CS_FILLING). A worker
 * killed with the mutex held leaves EOWNERDEAD to the next locker, which
 * rebuilds the index, the recency list and the free lists from the blocks
 * (sws_cs_lock): the heap's tags are written in an order that keeps it
 * walkable at every instant. A worker killed while filling leaves a
 * CS_FILLING block owned by its slot; the next process to claim a slot
 * whose owner is dead frees its fills and gives back its references.
 *
 * Holders: each process that uses any zone claims one slot (0..63) in the
 * registry (sws_cs_registry_t, one page made by the master), the same in
 * every zone; the slot also names the eventfd that wakes it when a fill it
 * waits for ends.
 *
 * Floor: a leaf. It calls nothing of the engine's: no logging, no
 * allocation outside the zone; time is passed in (the only clock read
 * bounds a contended wait for the mutex: sws_cs_lock).
 */
#ifndef SCALWS_CACHESTORE_H
#define SCALWS_CACHESTORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SWS_CS_HOLDERS 64
#define SWS_CS_REF_SLOTS 128       /* distinct entries one holder references at once */
#define SWS_CS_MIN_SIZE (1u << 20)

enum { CS_FREE = 0, CS_PENDING = 1, CS_FILLING = 2, CS_READY = 3, CS_DEAD = 4 };
enum { CS_F_HIT = 1 };             /* hit since the eviction hand last passed it */

/* The counters of a zone (relaxed atomic adds; the status process reads
 * them from its own mapping). Gauges are exact under the mutex. Every
 * field a uint64_t; scalws/control/stats.py reads them by position. */
typedef struct {
    uint64_t hits, misses, expired, stale, revalidated, bypassed, purged, evictions;
    uint64_t stored, store_failed, lock_waits, updating;
    uint64_t entries, bytes_stored, mem_used, mem_size;
} sws_cs_counters_t;

/* An entry. The store owns hash .. flags; the handler fills the rest
 * before sws_cs_publish and reads it under the mutex. */
typedef struct {
    uint64_t hash;
    uint64_t bnext;                /* next in its hash chain (offset), 0: end */
    uint64_t lprev, lnext;         /* recency list, most recent at the head */
    uint64_t waiters;              /* CS_PENDING: holder slots to wake */
    uint32_t refs;
    uint16_t filler;               /* CS_PENDING / CS_FILLING: holder slot + 1 */
    uint8_t state;
    uint8_t flags;
    uint64_t gen;                  /* the heap's format generation when it was reserved */
    /* the handler's */
    int64_t response_time;         /* Unix seconds the response arrived */
    int64_t initial_age;           /* corrected initial age (RFC 9111 4.2.3) */
    int64_t lifetime;              /* freshness lifetime; fresh while age < lifetime */
    int64_t last_modified;         /* SWS_NO_LAST_MODIFIED when none */
    int64_t pending_since;         /* CS_PENDING: Unix seconds */
    uint32_t swr, sie;             /* stale-while-revalidate, stale-if-error (s) */
    uint32_t hflags;               /* CE_* (cache_int.h) */
    uint16_t status;
    uint16_t nvary;
    uint32_t key_len, vary_len, tags_len, head_len;
    uint32_t etag_off, etag_len;   /* the ETag value inside the head; len 0: none */
    uint64_t body_len;
    char date[32];                 /* the response's Date (IMF-fixdate, 29 bytes) */
    char data[];                   /* key, vary, tags, head, body */
} sws_cent_t;

typedef struct {
    uint64_t off;                  /* entry offset; 0 free */
    uint64_t count;
} sws_cs_ref_t;

#define SWS_CS_BINS 128

typedef struct {
    uint64_t magic;
    volatile uint32_t state;       /* 0 zero-filled, 1 formatting, 2 ready */
    uint32_t formatter;            /* pid formatting it */
    sws_cs_counters_t c;           /* at offset 16: scalws/control/cacheshared.py reads it there */
    uint64_t size;
    pthread_mutex_t mu;
    uint64_t gen;                  /* bumped when the heap is formatted (again) */
    uint64_t nbuckets;             /* power of two */
    uint64_t buckets_off, refs_off, heap_off, heap_end;
    uint64_t lru_head, lru_tail;   /* offsets of entries; 0: none */
    uint64_t binmap[SWS_CS_BINS / 64];
    uint64_t bins[SWS_CS_BINS];
} sws_cs_t;

/* The holders' registry: one page the master makes before it forks. */
typedef struct {
    volatile int32_t pid[SWS_CS_HOLDERS];
} sws_cs_registry_t;

/* Formats a zero-filled zone (the first caller) or waits for the one
 * formatting it. 0, or -1 when size is too small. */
int sws_cs_attach(void *mem, size_t size, int self_pid);

/* Claims a registry slot for self_pid. First every slot whose process is
 * dead (alive(pid) returns 0) has its fills and references given back in
 * every zone of zones[0..n) and is freed; then a free one is taken.
 * Returns the slot, or -1 when all are in use. */
int sws_cs_claim(sws_cs_registry_t *reg, int self_pid, sws_cs_t *const *zones, size_t n,
                 int (*alive)(int pid));
/* Gives back everything slot holds in z (the caller holds no lock). */
void sws_cs_reap(sws_cs_t *z, int slot);

/* The mutex; returns 1 when the previous owner died and the index was
 * rebuilt, 0 otherwise. */
int sws_cs_lock(sws_cs_t *z);
void sws_cs_unlock(sws_cs_t *z);

static inline sws_cent_t *sws_cs_ent(sws_cs_t *z, uint64_t off)
{
    return off ? (sws_cent_t *)((char *)z + off) : NULL;
}
static inline uint64_t sws_cs_off(sws_cs_t *z, const sws_cent_t *ent)
{
    return (uint64_t)((const char *)ent - (const char *)z);
}
/* The first entry of hash's chain (walk with bnext); lock held. */
uint64_t sws_cs_chain(sws_cs_t *z, uint64_t hash);

/* An entry of `bytes` (sws_cent_t included), evicting by recency with a
 * second chance; state CS_FILLING (or CS_PENDING when pending), owned by
 * slot, unlinked. Lock held. NULL when it cannot fit. */
sws_cent_t *sws_cs_reserve(sws_cs_t *z, uint64_t bytes, int slot, int pending);
/* Links a reserved entry into the index (and, when READY, at the head of
 * the recency list) as `state`. Lock held. */
void sws_cs_publish(sws_cs_t *z, sws_cent_t *ent, int state);
/* Takes an entry out of the index and the recency list; its block is freed
 * now, or by the last unref. Lock held. */
void sws_cs_unlink(sws_cs_t *z, sws_cent_t *ent);
/* Frees a reserved entry that was never published. Lock held. */
void sws_cs_abandon(sws_cs_t *z, sws_cent_t *ent);
/* A hit: the eviction hand gives it a second chance. Lock held. */
static inline void sws_cs_touch(sws_cent_t *ent) { ent->flags |= CS_F_HIT; }

/* References keep an entry's bytes while a socket sends them. Lock held.
 * ref returns -1 when slot's table is full (copy instead). */
int sws_cs_ref(sws_cs_t *z, int slot, sws_cent_t *ent);
void sws_cs_unref(sws_cs_t *z, int slot, uint64_t off);

/* Calls fn for every linked entry (READY and PENDING); fn returns 1 to
 * unlink it. Lock held. Returns how many were unlinked. */
size_t sws_cs_sweep(sws_cs_t *z, int (*fn)(sws_cent_t *ent, void *arg), void *arg);

/* For tests: checks every invariant (walk, free lists, index, recency
 * list, counters); 0 or a negative number naming the first broken one. */
int sws_cs_check(sws_cs_t *z);

#endif
