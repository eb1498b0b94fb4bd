"""Process titles, as nginx's: what `ps` and `top` show for each process.

    scalwsd: master process /etc/scalws/scalws.yaml
    scalwsd: worker 0
    scalwsd: worker 0 (shutting down)
    scalwsd: status
    scalwsd: TLS keeper
    scalws-controller: master process /etc/scalws/controller.yaml
    scalws-controller: instance 1 (cpus 2-3)

Two places hold a title on Linux:

- the argument strings the kernel put on the stack at exec, which
  /proc/PID/cmdline (ps, `pgrep -f`, top's command line) reads. Their
  address and length are fields 48 and 49 of /proc/self/stat (arg_start,
  arg_end); a process may write over them in place. The title is cut to
  that length (the original command line: the interpreter, the script and
  `--config PATH`, so at least as long as "scalwsd: master process PATH"),
  padded with NULs, and the last byte stays NUL, so the kernel reads the
  area alone and never what follows it (the environment). Python keeps its
  own copy of argv: sys.argv is unchanged.
- comm (/proc/PID/comm: top's default column, `pgrep NAME`, `pidof`, the
  OOM killer's log), at most 15 bytes, set with prctl(PR_SET_NAME): a short
  form of the title. The master keeps `scalwsd`, so `pidof scalwsd` and
  `pgrep -x scalwsd` name it alone; the others are `scalwsd-worker0` (from
  worker 10 on `scalwsd-w10`), `scalwsd-status`, `scalwsd-tls`; the
  controller is `scalws-ctl` (its full name does not fit), its status
  process `scalws-ctl-stat`, an instance's master `scalws-inst1`.

`init()` reads the area once in the master, before any fork; its children
inherit the same addresses, so they never read /proc (a sandboxed worker
could not). A process whose area is unknown (no /proc) keeps its command
line and gets only comm.
"""

from __future__ import annotations

import ctypes

__all__ = ["init", "set_title", "worker_comm", "cpu_list"]

PR_SET_NAME = 15
COMM_MAX = 15

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_area: tuple[int, int] | None = None  # (address, length) of the argument strings


def init() -> None:
    """Finds this process's argument area; call before forking. The area
    must hold exactly what /proc/self/cmdline shows: under valgrind the
    kernel's area is valgrind's own arguments (cmdline shows ours), which
    valgrind reads again in a forked child (its output file's name), so
    the title is left alone there (comm only)."""
    global _area
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        with open("/proc/self/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return
    # after the comm's closing parenthesis come fields 3, 4, ...; comm may
    # hold spaces and parentheses itself, so split after the last one
    fields = stat[stat.rindex(b")") + 2:].split()
    try:
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
    except (IndexError, ValueError):
        return
    if 0 < start < end and end - start == len(cmdline):
        _area = (start, end - start)


def set_title(title: str, comm: str | None = None) -> None:
    """Shows this process as `title` in ps and, when given, `comm` in top."""
    if _area is not None:
        addr, size = _area
        raw = title.encode("utf-8", "replace")[:size - 1]
        ctypes.memmove(addr, raw + b"\0" * (size - len(raw)), size)
    if comm is not None:
        _libc.prctl(PR_SET_NAME, comm.encode()[:COMM_MAX], 0, 0, 0)


def cpu_list(cpus) -> str:
    """{2, 3, 5} -> "2-3,5", as cpuset files write it."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def worker_comm(index: int) -> str:
    """comm for worker `index`: scalwsd-worker0 .. 9, then scalwsd-w10 .."""
    name = f"scalwsd-worker{index}"
    return name if len(name) <= COMM_MAX else f"scalwsd-w{index}"
