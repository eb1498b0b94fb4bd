/* Fair accept: new connections steered away from a worker that takes no
 * more (ADR 0023); contract in scalws/net.h.
 *
 * Each worker accepts on its own SO_REUSEPORT socket, and the kernel picks
 * the socket of a new connection by a hash of its addresses: a worker at
 * max_connections (or out of descriptors) leaves its listeners off, and the
 * connections hashed to it wait in its queue while its siblings have room.
 * So a worker that stops accepting says so in the steering page the master
 * shares with its workers (one slot per worker index: full, and the pid of
 * the worker that owns the slot), and attaches to its listeners' reuseport
 * groups a classic BPF program that sends the hash of a full worker's
 * socket to one that is not; the last one to leave that state detaches it,
 * so while nobody is full no program runs at all.
 *
 * The program, for n sockets and the full set F (|F| = f, n - f > 0):
 *     ld  rxhash ; jne #0, +1 ; ld rand     the flow hash (the skb's, set by
 *                                            TCP or the NIC; random when 0)
 *     mod #n
 *     jeq #F[k], +f   (k = 0 .. f-1)        each full index to its return
 *     ret a
 *     ret #R[k]       (k = 0 .. f-1)        R[k]: the not-full workers in turn
 * Socket index i of a group is worker i's: the master binds them in worker
 * order and only ever closes the last. Several workers may change state at
 * once: each rebuilds from the page after its own change and again while
 * the page's sequence moved during its attach, so the last program attached
 * reflects the last change. A slot belongs to the worker that claimed it
 * last (a restarted or reloaded worker of that index): an old worker that
 * still drains no longer writes it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "context.h"

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif
#ifndef SO_DETACH_REUSEPORT_BPF
#define SO_DETACH_REUSEPORT_BPF 68
#endif

/* The group's program from the page as it is; 0 instructions: none needed. */
static int build(const sws_steer_shm_t *s, uint32_t n, struct sock_filter *prog)
{
    uint32_t full[SWS_STEER_MAX], room[SWS_STEER_MAX];
    uint32_t nf = 0, nr = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (__atomic_load_n(&s->slot[i].full, __ATOMIC_ACQUIRE))
            full[nf++] = i;
        else
            room[nr++] = i;
    }
    if (nf == 0 || nr == 0)
        return 0; /* nobody full, or everybody: the kernel's own hash */
    int k = 0;
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_RXHASH);
    prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1);
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_RANDOM);
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, n);
    for (uint32_t j = 0; j < nf; j++)
        prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, full[j],
                                                 (unsigned char)nf, 0);
    prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
    for (uint32_t j = 0; j < nf; j++)
        prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, room[j % nr]);
    return k;
}

/* Attaches (or detaches) the program on each TCP listener of this worker:
 * one socket of a group is enough, and each listener is its own group. */
static void attach(sws_engine_t *e, struct sock_filter *prog, int len)
{
    struct sock_fprog fp = {.len = (unsigned short)len, .filter = prog};
    int unused = 0; /* the kernel reads an int of every option, this one's too */
    for (size_t i = 0; i < e->net.n_listeners; i++) {
        int fd = e->net.listeners[i].fd;
        if (fd < 0 || e->net.listeners[i].is_unix)
            continue;
        int rc = len ? setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fp, sizeof fp)
                     : setsockopt(fd, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &unused, sizeof unused);
        if (rc < 0 && !(len == 0 && errno == ENOENT) && !e->net.steer_warned) {
            e->net.steer_warned = 1; /* once: the kernel will not change its mind */
            elog(e, SWS_L_WARN, "worker %d: cannot steer new connections away from full "
                 "workers (%s): %s", e->core.worker_id,
                 len ? "SO_ATTACH_REUSEPORT_CBPF" : "SO_DETACH_REUSEPORT_BPF", strerror(errno));
        }
    }
}

static void apply(sws_engine_t *e)
{
    sws_steer_shm_t *s = e->net.steer;
    struct sock_filter prog[4 + 2 * SWS_STEER_MAX + 1];
    for (int tries = 0; tries < 8; tries++) {
        uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        attach(e, prog, build(s, e->net.steer_n, prog));
        if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) == seq)
            return; /* nobody changed state meanwhile: ours is the newest */
    }
}

void sws_steer_init(sws_engine_t *e, sws_steer_shm_t *s, uint32_t index, uint32_t n)
{
    if (!s || n < 2 || n > SWS_STEER_MAX || index >= n)
        return;
    e->net.steer = s;
    e->net.steer_index = index;
    e->net.steer_n = n;
    e->net.steer_pid = getpid();
    /* The slot is ours now; a predecessor that died full leaves it set. */
    __atomic_store_n(&s->slot[index].pid, e->net.steer_pid, __ATOMIC_RELEASE);
    if (__atomic_exchange_n(&s->slot[index].full, 0, __ATOMIC_ACQ_REL)) {
        __atomic_add_fetch(&s->seq, 1, __ATOMIC_ACQ_REL);
        apply(e);
    }
}

void sws_steer_set(sws_engine_t *e, int full)
{
    sws_steer_shm_t *s = e->net.steer;
    if (!s || e->net.steer_full == full)
        return;
    e->net.steer_full = full;
    if (__atomic_load_n(&s->slot[e->net.steer_index].pid, __ATOMIC_ACQUIRE) != e->net.steer_pid)
        return; /* a newer worker of this index owns the slot */
    __atomic_store_n(&s->slot[e->net.steer_index].full, (uint32_t)full, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->seq, 1, __ATOMIC_ACQ_REL);
    apply(e);
}

void sws_steer_room(sws_engine_t *e)
{
    /* Hysteresis: a worker at its limit that closes one connection and
     * accepts the next would otherwise attach and detach a program per
     * connection; it takes new ones again once an eighth below it. */
    uint64_t max = e->core.lim.max_connections;
    uint64_t margin = max / 8 ? max / 8 : 1;
    if (e->core.cnt.active + margin <= max && e->net.accept_resume == 0 &&
        !e->core.shutting_down)
        sws_steer_set(e, 0);
}
