/* The SIGSYS handler of a sandboxed worker: see scalws/sandbox.h, ADR 0012. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "scalws/sandbox.h"
#include "core/syscall_names.h"   /* generated at build time */

static const volatile int *g_log_fd;
static const char *g_time;
static int g_time_len;
static int g_json;  /* log.error_format json: g_time is then the ISO 8601 time */
static int g_worker;

const char *sws_syscall_name(long nr)
{
    if (nr < 0 || nr >= SWS_SYSCALL_NAMES_LEN)
        return NULL;
    return sws_syscall_names[nr];
}

/* Appends s (at most n bytes) to buf at *at; bounded by cap. */
static void put(char *buf, size_t cap, size_t *at, const char *s, size_t n)
{
    if (n > cap - *at)
        n = cap - *at;
    memcpy(buf + *at, s, n);
    *at += n;
}

static void put_str(char *buf, size_t cap, size_t *at, const char *s)
{
    put(buf, cap, at, s, strlen(s));
}

static void put_long(char *buf, size_t cap, size_t *at, long v)
{
    char tmp[24];
    int i = (int)sizeof tmp;
    unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--i] = '-';
    put(buf, cap, at, tmp + i, sizeof tmp - (size_t)i);
}

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    long nr = si->si_syscall;
    const char *name = sws_syscall_name(nr);
    char buf[256];
    size_t at = 0;
    if (g_json) { /* the same fields as core.c's elog_json; nothing here needs escaping */
        put_str(buf, sizeof buf, &at, "{\"time\":\"");
        if (g_time && g_time_len > 0)
            put(buf, sizeof buf, &at, g_time, (size_t)g_time_len);
        put_str(buf, sizeof buf, &at, "\",\"level\":\"crit\",\"pid\":");
        put_long(buf, sizeof buf, &at, (long)getpid());
        put_str(buf, sizeof buf, &at, ",\"worker\":");
        put_long(buf, sizeof buf, &at, g_worker);
        put_str(buf, sizeof buf, &at, ",\"msg\":\"");
    } else {
        if (g_time && g_time_len > 0) {
            put(buf, sizeof buf, &at, g_time, (size_t)g_time_len);
            put_str(buf, sizeof buf, &at, " ");
        }
        put_str(buf, sizeof buf, &at, "[crit] ");
        put_long(buf, sizeof buf, &at, (long)getpid());
        put_str(buf, sizeof buf, &at, "#");
        put_long(buf, sizeof buf, &at, g_worker);
        put_str(buf, sizeof buf, &at, ": ");
    }
    put_str(buf, sizeof buf, &at, "worker ");
    put_long(buf, sizeof buf, &at, g_worker);
    put_str(buf, sizeof buf, &at, ": seccomp: system call ");
    put_str(buf, sizeof buf, &at, name ? name : "?");
    put_str(buf, sizeof buf, &at, " (");
    put_long(buf, sizeof buf, &at, nr);
    put_str(buf, sizeof buf, &at, g_json ? ") is not allowed; exiting\"}\n" : ") is not allowed; exiting\n");
    int fd = g_log_fd && *g_log_fd >= 0 ? *g_log_fd : 2;
    ssize_t w = write(fd, buf, at);
    (void)w;
    /* SA_RESETHAND restored SIG_DFL on entry and SA_NODEFER left SIGSYS
     * unblocked: this kills the process (the master sees SIGSYS). */
    raise(sig);
    errno = saved;
}

int sws_sigsys_install(const volatile int *log_fd, const char *err_time, int time_len,
                       int json, int worker_id)
{
    g_log_fd = log_fd;
    g_time = err_time;
    g_time_len = time_len;
    g_json = json;
    g_worker = worker_id;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSYS, &sa, NULL) < 0)
        return -errno;
    return 0;
}
