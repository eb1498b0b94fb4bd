/* The kernel's floor under `respond`: the least an HTTP/1 server can do per
 * request on this machine. Answers every request ("\r\n\r\n" counted in each
 * read) with a fixed 11-byte answer, no parsing, no state, one process:
 *   floor lt PORT     level-triggered epoll, recv + send per readable socket
 *   floor et PORT     the same, edge-triggered (nginx's mode)
 *   floor uring PORT  io_uring (built with -DWITH_URING, liburing >= 2.2):
 *                     multishot recv into a provided buffer ring, one send
 *                     per read, all submitted in one io_uring_enter a pass
 * Only for measurement (bench/prototypes/floor.sh; issue 36's report); not
 * part of the server. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef WITH_URING
#include <liburing.h>
#endif

static const char ANSWER[] = "HTTP/1.1 200 OK\r\nServer: floor\r\nContent-Length: 11\r\n"
                             "Content-Type: text/plain\r\n\r\nhello world";
#define ALEN (sizeof ANSWER - 1)
#define MAX_PIPE 64
static char answers[ALEN * MAX_PIPE];

static int count_requests(const char *b, int n)
{
    int c = 0;
    for (int i = 3; i < n; i++)
        c += b[i] == '\n' && b[i - 1] == '\r' && b[i - 2] == '\n' && b[i - 3] == '\r';
    return c < MAX_PIPE ? c : MAX_PIPE;
}

static int listener(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(fd, (void *)&a, sizeof a) < 0 || listen(fd, 1024) < 0) {
        perror("floor: bind");
        exit(1);
    }
    return fd;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void run_epoll(int lfd, int et)
{
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[256];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    char buf[8192];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    nodelay(c);
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLRDHUP | (et ? EPOLLET : 0), .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
                continue;
            }
            for (;;) { /* a short read drained the socket, as nginx assumes */
                ssize_t r = recv(fd, buf, sizeof buf, 0);
                if (r <= 0) {
                    if (r == 0 || errno != EAGAIN)
                        close(fd);
                    break;
                }
                int k = count_requests(buf, (int)r);
                if (k && send(fd, answers, ALEN * k, 0) < 0)
                    break;
                if ((size_t)r < sizeof buf)
                    break;
            }
        }
    }
}

#ifdef WITH_URING
#define NBUF 1024
#define BUFSZ 4096
enum { UD_ACCEPT, UD_RECV, UD_SEND };

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;

static struct io_uring_sqe *sqe(void)
{
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) {
        io_uring_submit(&ring);
        s = io_uring_get_sqe(&ring);
    }
    return s;
}

static void arm_recv(int fd)
{
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv_multishot(s, fd, NULL, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = 0;
    io_uring_sqe_set_data64(s, (uint64_t)fd << 2 | UD_RECV);
}

static void run_uring(int lfd)
{
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                         IORING_SETUP_CQSIZE,
                                .cq_entries = 4096};
    int ret = io_uring_queue_init_params(512, &ring, &p);
    if (ret < 0) {
        fprintf(stderr, "floor: io_uring_queue_init: %s\n", strerror(-ret));
        exit(1);
    }
    br = aligned_alloc(4096, NBUF * sizeof(struct io_uring_buf));
    bufs = aligned_alloc(4096, (size_t)NBUF * BUFSZ);
    io_uring_buf_ring_init(br);
    struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = NBUF, .bgid = 0};
    if ((ret = io_uring_register_buf_ring(&ring, &reg, 0)) < 0) {
        fprintf(stderr, "floor: io_uring_register_buf_ring: %s\n", strerror(-ret));
        exit(1);
    }
    for (int i = 0; i < NBUF; i++)
        io_uring_buf_ring_add(br, bufs + (size_t)i * BUFSZ, BUFSZ, i, io_uring_buf_ring_mask(NBUF), i);
    io_uring_buf_ring_advance(br, NBUF);
    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0);
    io_uring_sqe_set_data64(s, UD_ACCEPT);
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            seen++;
            int kind = cqe->user_data & 3, fd = (int)(cqe->user_data >> 2);
            if (kind == UD_ACCEPT) {
                if (cqe->res >= 0) {
                    nodelay(cqe->res);
                    arm_recv(cqe->res);
                }
                continue;
            }
            if (kind == UD_SEND)
                continue; /* only failures come back (IOSQE_CQE_SKIP_SUCCESS) */
            if (cqe->res <= 0) {
                if (cqe->res == -ENOBUFS)
                    arm_recv(fd);
                else
                    close(fd);
                continue;
            }
            int bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
            char *b = bufs + (size_t)bid * BUFSZ;
            int k = count_requests(b, cqe->res);
            io_uring_buf_ring_add(br, b, BUFSZ, bid, io_uring_buf_ring_mask(NBUF), 0);
            io_uring_buf_ring_advance(br, 1);
            if (k) {
                struct io_uring_sqe *w = sqe();
                io_uring_prep_send(w, fd, answers, ALEN * k, 0);
                w->flags |= IOSQE_CQE_SKIP_SUCCESS;
                io_uring_sqe_set_data64(w, (uint64_t)fd << 2 | UD_SEND);
            }
            if (!(cqe->flags & IORING_CQE_F_MORE))
                arm_recv(fd);
        }
        io_uring_cq_advance(&ring, seen);
    }
}
#endif

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: floor lt|et|uring PORT\n");
        return 2;
    }
    for (int i = 0; i < MAX_PIPE; i++)
        memcpy(answers + i * ALEN, ANSWER, ALEN);
    int lfd = listener(atoi(argv[2]));
    if (!strcmp(argv[1], "lt") || !strcmp(argv[1], "et"))
        run_epoll(lfd, !strcmp(argv[1], "et"));
#ifdef WITH_URING
    else if (!strcmp(argv[1], "uring"))
        run_uring(lfd);
#endif
    fprintf(stderr, "floor: mode %s not built\n", argv[1]);
    return 2;
}
