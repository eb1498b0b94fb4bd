/* ADR 0023 measurement: what fair accept's classic BPF program costs.
 *
 *   gcc -O2 -pthread -o /tmp/steer_cost bench/steer_cost.c && /tmp/steer_cost [N]
 *
 * (a) attach + detach of the program net/steer.c builds for 2 sockets, one
 *     full (SO_ATTACH_REUSEPORT_CBPF / SO_DETACH_REUSEPORT_BPF): µs per pair;
 * (b) N connections over loopback to a group of two SO_REUSEPORT listeners,
 *     each with its own accept thread (accept, close), from one client that
 *     connects and closes: connections per second with no program, and with
 *     the program (socket 0 full: every connection to socket 1).
 * The program is the one build() makes in net/steer.c for n = 2, F = {0}.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif
#ifndef SO_DETACH_REUSEPORT_BPF
#define SO_DETACH_REUSEPORT_BPF 68
#endif

static struct sock_filter prog[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_RXHASH),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_RANDOM),
    BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, 2),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0),
    BPF_STMT(BPF_RET | BPF_A, 0),
    BPF_STMT(BPF_RET | BPF_K, 1),
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int listener(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1024) < 0) {
        perror("listener");
        exit(1);
    }
    return fd;
}

static long accepted[2];

static void *acceptor(void *arg)
{
    int i = (int)(long)arg & 1, fd = (int)(long)arg >> 1;
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINVAL || errno == EBADF)
                return NULL;
            continue;
        }
        __atomic_add_fetch(&accepted[i], 1, __ATOMIC_RELAXED);
        close(c);
    }
}

static double run(int port, long n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct linger lg = {1, 0}; /* RST: no TIME_WAIT filling the port range */
        setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        if (connect(c, (struct sockaddr *)&a, sizeof a) < 0) {
            perror("connect");
            exit(1);
        }
        close(c);
    }
    return n / (now() - t0);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int port = 18700;
    int s0 = listener(port), s1 = listener(port);
    struct sock_fprog fp = {.len = sizeof prog / sizeof prog[0], .filter = prog};
    int unused = 0;

    double t0 = now();
    int pairs = 20000;
    for (int i = 0; i < pairs; i++) {
        if (setsockopt(s0, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fp, sizeof fp) < 0 ||
            setsockopt(s0, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &unused, sizeof unused) < 0) {
            perror("attach/detach");
            return 1;
        }
    }
    printf("attach + detach: %.2f us per pair\n", (now() - t0) / pairs * 1e6);

    pthread_t t[2];
    pthread_create(&t[0], NULL, acceptor, (void *)(long)(s0 << 1 | 0));
    pthread_create(&t[1], NULL, acceptor, (void *)(long)(s1 << 1 | 1));
    for (int round = 0; round < 3; round++) {
        accepted[0] = accepted[1] = 0;
        double plain = run(port, n);
        long p0 = accepted[0], p1 = accepted[1];
        setsockopt(s0, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fp, sizeof fp);
        usleep(100000);
        accepted[0] = accepted[1] = 0;
        double steered = run(port, n);
        usleep(100000);
        long q0 = accepted[0], q1 = accepted[1];
        setsockopt(s0, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, &unused, sizeof unused);
        printf("round %d: no program %.0f conn/s (%ld / %ld); steered %.0f conn/s (%ld / %ld)\n",
               round, plain, p0, p1, steered, q0, q1);
    }
    return 0;
}
