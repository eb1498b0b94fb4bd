/* csrc/cache/store.c: the shared-memory store of the response cache.
 * Random reserve / publish / unlink / ref / unref against the invariants
 * (sws_cs_check), eviction order with a second chance, and processes
 * killed with the mutex held or in the middle of a fill. */
#include "guard.h"
#include "scalws/cachestore.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

static sws_cs_t *new_zone(size_t size, sws_cs_registry_t **reg)
{
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    *reg = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || *reg == MAP_FAILED || sws_cs_attach(m, size, getpid()) < 0) {
        fprintf(stderr, "cannot make a zone\n");
        exit(2);
    }
    return m;
}

static sws_cent_t *put(sws_cs_t *z, int slot, uint64_t hash, size_t body)
{
    sws_cent_t *ent = sws_cs_reserve(z, sizeof(sws_cent_t) + 8 + body, slot, 0);
    if (!ent)
        return NULL;
    ent->hash = hash;
    ent->key_len = 8;
    ent->body_len = body;
    memcpy(ent->data, &hash, 8);
    memset(ent->data + 8, (int)(hash & 0xff), body);
    sws_cs_publish(z, ent, CS_READY);
    return ent;
}

static sws_cent_t *find(sws_cs_t *z, uint64_t hash)
{
    for (uint64_t o = sws_cs_chain(z, hash); o; o = sws_cs_ent(z, o)->bnext) {
        sws_cent_t *ent = sws_cs_ent(z, o);
        if (ent->hash == hash && ent->state == CS_READY)
            return ent;
    }
    return NULL;
}

static void t_random(void)
{
    sws_cs_registry_t *reg;
    sws_cs_t *z = new_zone(4u << 20, &reg);
    int slot = sws_cs_claim(reg, getpid(), &z, 1, alive);
    CHECK(slot == 0, "slot %d", slot);
    uint64_t refs[64] = {0};
    int nref = 0;
    srand(7);
    for (int i = 0; i < 200000; i++) {
        sws_cs_lock(z);
        int op = rand() % 10;
        uint64_t h = (uint64_t)(rand() % 5000) * 0x9e3779b97f4a7c15ull;
        if (op < 5) {
            sws_cent_t *old = find(z, h);
            if (old)
                sws_cs_unlink(z, old);
            size_t body = rand() % 4 == 0 ? (size_t)(rand() % 200000) : (size_t)(rand() % 3000);
            sws_cent_t *ent = put(z, slot, h, body);
            if (ent && ent->body_len && ent->data[8] != (char)(h & 0xff))
                CHECK(0, "bytes");
        } else if (op < 7) {
            sws_cent_t *ent = find(z, h);
            if (ent) {
                sws_cs_touch(ent);
                if (nref < 64 && sws_cs_ref(z, slot, ent) == 0)
                    refs[nref++] = sws_cs_off(z, ent);
            }
        } else if (op < 9 && nref) {
            int k = rand() % nref;
            sws_cs_unref(z, slot, refs[k]);
            refs[k] = refs[--nref];
        } else {
            sws_cent_t *ent = find(z, h);
            if (ent)
                sws_cs_unlink(z, ent);
        }
        if (i % 997 == 0) {
            int c = sws_cs_check(z);
            CHECK(c == 0, "check %d at step %d", c, i);
            if (c) {
                sws_cs_unlock(z);
                break;
            }
        }
        sws_cs_unlock(z);
    }
    while (nref)
        sws_cs_unref(z, slot, refs[--nref]);
    CHECK(sws_cs_check(z) == 0, "final check");
    CHECK(z->c.evictions > 0, "the zone filled and evicted");
    t_end();
}

/* An entry hit since the hand last passed it survives one more round. */
static void t_second_chance(void)
{
    sws_cs_registry_t *reg;
    sws_cs_t *z = new_zone(2u << 20, &reg);
    int slot = sws_cs_claim(reg, getpid(), &z, 1, alive);
    sws_cs_lock(z);
    put(z, slot, 1, 1000);
    put(z, slot, 2, 1000);
    sws_cs_touch(find(z, 1));
    for (uint64_t h = 3; h < 3000 && find(z, 2); h++)
        put(z, slot, h, 1000);
    CHECK(!find(z, 2), "the entry never hit was evicted");
    CHECK(find(z, 1) != NULL, "the entry hit was kept");
    CHECK(sws_cs_check(z) == 0, "check");
    sws_cs_unlock(z);
    t_end();
}

/* A referenced entry that is evicted keeps its bytes until unref. */
static void t_ref_keeps_bytes(void)
{
    sws_cs_registry_t *reg;
    sws_cs_t *z = new_zone(2u << 20, &reg);
    int slot = sws_cs_claim(reg, getpid(), &z, 1, alive);
    sws_cs_lock(z);
    sws_cent_t *ent = put(z, slot, 42, 100000);
    sws_cs_ref(z, slot, ent);
    uint64_t off = sws_cs_off(z, ent);
    for (uint64_t h = 100; h < 200; h++)
        put(z, slot, h, 100000);
    CHECK(!find(z, 42), "evicted from the index");
    CHECK(ent->state == CS_DEAD && ent->data[8] == 42, "bytes intact while referenced");
    uint64_t used = z->c.mem_used;
    sws_cs_unref(z, slot, off);
    CHECK(z->c.mem_used < used, "freed by the last unref");
    CHECK(sws_cs_check(z) == 0, "check");
    sws_cs_unlock(z);
    t_end();
}

/* A process killed with the mutex held: the next locker rebuilds; one
 * killed mid-fill: its block is freed when its slot is claimed again. */
static void t_killed(void)
{
    sws_cs_registry_t *reg;
    sws_cs_t *z = new_zone(4u << 20, &reg);
    int slot = sws_cs_claim(reg, getpid(), &z, 1, alive);
    sws_cs_lock(z);
    for (uint64_t h = 1; h <= 100; h++)
        put(z, slot, h, 2000);
    sws_cs_unlock(z);
    int pipefd[2];
    if (pipe(pipefd) < 0)
        exit(2);
    pid_t pid = fork();
    if (pid == 0) {
        int s = sws_cs_claim(reg, getpid(), &z, 1, alive);
        sws_cs_lock(z);
        sws_cent_t *f = sws_cs_reserve(z, 50000, s, 0); /* a fill in progress */
        f->hash = 7777;
        sws_cs_ref(z, s, find(z, 5));
        /* half an unlink: out of the recency list, still in its chain */
        sws_cent_t *ent = find(z, 6);
        if (ent->lprev)
            sws_cs_ent(z, ent->lprev)->lnext = ent->lnext;
        if (write(pipefd[1], "x", 1) != 1)
            _exit(3);
        pause(); /* killed here, mutex held */
        _exit(0);
    }
    char b;
    CHECK(read(pipefd[0], &b, 1) == 1, "child ready");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int rebuilt = sws_cs_lock(z);
    CHECK(rebuilt == 1, "the next locker saw EOWNERDEAD");
    CHECK(sws_cs_check(z) == 0, "consistent after the rebuild: %d", sws_cs_check(z));
    CHECK(find(z, 5) && find(z, 6) && find(z, 100), "entries kept");
    CHECK(find(z, 5)->refs == 1, "the dead process's reference is still counted");
    sws_cs_unlock(z);
    /* a new process claims the dead one's slot: its reference goes */
    int s2 = sws_cs_claim(reg, getpid() + 100000, &z, 1, alive);
    CHECK(s2 == 1, "slot %d", s2);
    sws_cs_lock(z);
    CHECK(find(z, 5)->refs == 0, "reference given back");
    CHECK(sws_cs_check(z) == 0, "check");
    sws_cs_unlock(z);
    t_end();
}

/* Several processes at once, some killed at random moments (inside the
 * mutex or not): the survivors and a final claim leave a consistent store. */
static void child_work(sws_cs_t *z, sws_cs_registry_t *reg, unsigned seed, int ops)
{
    int slot = sws_cs_claim(reg, getpid(), &z, 1, alive);
    if (slot < 0)
        _exit(3);
    uint64_t refs[32];
    int nref = 0;
    srand(seed);
    for (int i = 0; i < ops; i++) {
        uint64_t h = (uint64_t)(rand() % 3000) * 0x9e3779b97f4a7c15ull;
        sws_cs_lock(z);
        int op = rand() % 10;
        if (op < 4) {
            sws_cent_t *old = find(z, h);
            if (old)
                sws_cs_unlink(z, old);
            put(z, slot, h, (size_t)(rand() % (rand() % 8 ? 2000 : 60000)));
        } else if (op < 7) {
            sws_cent_t *ent = find(z, h);
            if (ent && nref < 32 && sws_cs_ref(z, slot, ent) == 0)
                refs[nref++] = sws_cs_off(z, ent);
        } else if (nref) {
            sws_cs_unref(z, slot, refs[--nref]);
        }
        sws_cs_unlock(z);
    }
    _exit(0);
}

static void t_processes(void)
{
    sws_cs_registry_t *reg;
    sws_cs_t *z = new_zone(4u << 20, &reg);
    pid_t kids[6];
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 6; k++) {
            kids[k] = fork();
            if (kids[k] == 0)
                child_work(z, reg, (unsigned)(round * 10 + k), 30000);
        }
        /* kill two of them somewhere in the middle */
        usleep(20000 + (unsigned)round * 10000);
        kill(kids[1], SIGKILL);
        kill(kids[4], SIGKILL);
        for (int k = 0; k < 6; k++) {
            int st;
            waitpid(kids[k], &st, 0);
            if (k != 1 && k != 4)
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d ended %d", k, st);
        }
    }
    /* the dead ones' slots are given back by the next claim */
    int slot = sws_cs_claim(reg, getpid(), &z, 1, alive);
    CHECK(slot >= 0, "a slot is free again");
    sws_cs_lock(z);
    int c = sws_cs_check(z);
    CHECK(c == 0, "consistent after killed processes: %d", c);
    sws_cs_unlock(z);
    t_end();
}

int main(void)
{
    t_random();
    t_second_chance();
    t_ref_keeps_bytes();
    t_killed();
    t_processes();
    return t_summary();
}
