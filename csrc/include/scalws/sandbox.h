/* The SIGSYS handler of a sandboxed worker (ADR 0012).
 *
 * The seccomp filter (scalws/control/sandbox.py) answers a system call that
 * is not on the worker's allow-list with SECCOMP_RET_TRAP: the kernel sends
 * SIGSYS with the call's number in si_syscall. The handler writes one line to
 * the error log, in the engine's format,
 *
 *   2026/12/02 12:00:00 [crit] 1234#0: worker 0: seccomp: system call execve (59) is not allowed; exiting
 *
 * then dies of SIGSYS (default action restored), so the master logs
 * "killed by signal 31 (SIGSYS)" and restarts the worker. Only
 * async-signal-safe calls: write(2), sigaction(2), raise(3).
 *
 * The pointers are the engine's and must outlive the process's sandboxed
 * life: *log_fd (-1 = stderr) is read at each signal, so a log reopened on
 * USR1 is the one written; err_time is the cached time string
 * (SWS_ERR_TIME_LEN bytes, "YYYY/MM/DD HH:MM:SS"), or with `json` (the line
 * as one JSON object, log.error_format json) the ISO 8601 one
 * (SWS_ISO_TIME_LEN bytes). Leaf: calls nothing of ours.
 */
#ifndef SCALWS_SANDBOX_H
#define SCALWS_SANDBOX_H

/* Installs the handler (SA_SIGINFO | SA_RESETHAND | SA_NODEFER). 0 or -errno. */
int sws_sigsys_install(const volatile int *log_fd, const char *err_time, int time_len, int json,
                       int worker_id);

/* The name of x86-64 system call `nr`, or NULL (generated table). */
const char *sws_syscall_name(long nr);

#endif
