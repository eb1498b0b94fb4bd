"""The sandbox (ADR 0012): what a worker may still do once it serves.

After a web worker has its sockets, certificates and logs open (and has
dropped to `user:`), it confines itself, in this order:

1. PR_SET_NO_NEW_PRIVS: no execve can gain privileges (setuid binaries,
   file capabilities); required for an unprivileged process's Landlock and
   seccomp.
2. Landlock (ABI >= 1): the filesystem is closed except the document roots
   (static and fastcgi routes), read-only. Everything else a worker needs
   was opened or loaded before: its certificates and keys (the engine's
   TLS contexts), the system CA store when an upstream verifies against it
   (loaded whole, not looked up by hash later), the access and error logs
   (descriptors; after USR1 the master sends new ones over the worker's
   control socket) and every Python module it runs (`preload`). So a
   symlink in a root that points at a key, the configuration, a log or
   anything else is refused by the kernel (EACCES), whatever
   `follow_symlinks` says. ABI >= 4: TCP connect only to the configured
   upstreams' ports, TCP bind denied. ABI >= 6: signals and abstract unix
   sockets scoped to the worker itself.
3. seccomp (BPF, built here with struct): an allow-list of the system calls
   the data plane makes (measured with strace, listed in the ADR), the most
   frequent first since the filter runs on every call; any other call traps
   (SIGSYS), the engine's handler logs its name and the worker dies of
   SIGSYS, which the master reports and restarts.

App workers (control/apps.py) get a looser profile between fork and exec:
no_new_privs, Landlock read/execute on the whole filesystem with writes only
in their folder, /tmp, /dev and the socket folder, and a seccomp deny-list
(EPERM) of calls no web application needs (ptrace, mount, kexec, bpf, ...).

`sandbox: on` applies what the kernel supports and warns once (master) about
the rest; `required` refuses to start when a part is missing; `off` skips it.

Test hooks (environment only, not configuration; docs/operations.md):
SCALWS_SANDBOX_FAKE_MISSING=landlock,landlock-net,seccomp makes the probe
report those parts as unsupported; SCALWS_SANDBOX_PROBE=FILE makes each
worker open FILE before it confines itself and, on SIGUSR2, run the
operations it lists (see `run_probe`) and log their outcome.

Pure Python (ctypes, struct): imports nothing compiled of ours.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import struct

from scalws.control.logs import log

FAKE_ENV = "SCALWS_SANDBOX_FAKE_MISSING"
PROBE_ENV = "SCALWS_SANDBOX_PROBE"

# x86-64 numbers (landlock's are the same on every architecture but alpha).
NR_PRCTL = 157
NR_SECCOMP = 317
NR_LANDLOCK_CREATE_RULESET = 444
NR_LANDLOCK_ADD_RULE = 445
NR_LANDLOCK_RESTRICT_SELF = 446

PR_SET_NO_NEW_PRIVS = 38
PR_GET_SECCOMP = 21
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_GET_ACTION_AVAIL = 2

# <linux/landlock.h>
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13        # ABI 2
FS_TRUNCATE = 1 << 14     # ABI 3
FS_IOCTL_DEV = 1 << 15    # ABI 5
NET_BIND_TCP = 1 << 0     # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1         # ABI 6

_FS_ABI1 = (1 << 13) - 1
FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
RO = FS_READ_FILE | FS_READ_DIR
RX = RO | FS_EXECUTE
# A folder an app writes its files in.
RW = RO | FS_WRITE_FILE | FS_MAKE_REG

# <linux/seccomp.h>, <linux/filter.h>, <linux/audit.h>
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_TRAP = 0x00030000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
BPF_LD_W_ABS = 0x20        # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15           # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35           # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06           # BPF_RET | BPF_K
SECCOMP_DATA_NR = 0
SECCOMP_DATA_ARCH = 4

# The web worker's allow-list, most frequent first (ADR 0012 has the strace
# counts): the filter is a linear list of comparisons run on every call.
WORKER_SYSCALLS = (
    # seen under strace through the e2e suite, most frequent first
    "epoll_wait", "recvfrom", "sendmsg", "epoll_ctl", "sendto", "accept4", "close",
    "rt_sigaction", "epoll_pwait", "setsockopt", "ioctl", "write", "getpid", "sendfile",
    "socket", "connect", "getsockname", "read", "newfstatat", "getsockopt", "sched_yield",
    "pread64", "fcntl", "socketpair", "rt_sigprocmask", "rt_sigreturn", "exit_group",
    "openat", "clock_nanosleep", "brk", "shutdown", "lseek", "mremap", "openat2",
    "getdents64", "mmap", "munmap",
    # not seen, but on paths the suite does not reach: writev and readv (the
    # engine's gathered writes; TLS), recvmsg, statx/fstat (Python's os.stat),
    # memory and threads' futexes, the SIGSYS handler's raise (gettid, tgkill),
    # getpeername, getrandom (OpenSSL), timers
    "writev", "readv", "recvmsg", "fstat", "statx", "futex", "madvise", "mprotect",
    "getrandom", "getpeername", "gettid", "tgkill", "nanosleep", "clock_gettime",
    "gettimeofday", "dup", "dup3", "pipe2", "eventfd2", "poll", "ppoll",
    "restart_syscall", "exit",
    # the loop's creation, once, after the sandbox (see worker.py)
    "epoll_create1", "uname",
    # a graceful stop asks whether the master is gone (its PR_SET_PDEATHSIG)
    "getppid",
    # HTTP/3: QUIC's timer (csrc/http/h3/quic.c; the timerfd is made before the sandbox)
    "timerfd_settime",
)
# Answered ENOSYS instead of trapping, so that the library falls back:
# libuv's io_uring (its submissions would bypass this filter) and glibc's clone3.
WORKER_ENOSYS = ("io_uring_setup", "clone3")

# App workers: calls no web application needs, answered with EPERM.
APP_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick",
    "mount_setattr", "kexec_load", "kexec_file_load", "bpf", "perf_event_open",
    "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff",
    "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
    "setdomainname", "iopl", "ioperm", "quotactl", "quotactl_fd", "keyctl", "add_key",
    "request_key", "open_by_handle_at", "name_to_handle_at", "userfaultfd", "setns",
    "unshare", "lookup_dcookie", "syslog", "vhangup", "uselib", "personality",
)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class SandboxError(Exception):
    """A part of the sandbox could not be applied (with `required`: fatal)."""


def _syscall(nr, *args):
    rc = _libc.syscall(ctypes.c_long(nr), *args)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc


def syscall_numbers() -> dict[str, int]:
    """x86-64 names to numbers, from the kernel headers (build machine) or
    the table compiled into the engine; {} when neither is there."""
    for path in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
                 "/usr/include/asm/unistd_64.h"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read()
        except OSError:
            continue
        out = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_"):
                out[parts[1][5:]] = int(parts[2])
        return out
    return _FALLBACK_NUMBERS


# The numbers of every name above, for machines without kernel headers
# (Debian's scalws package does not depend on linux-libc-dev).
_FALLBACK_NUMBERS = {
    "read": 0, "write": 1, "close": 3, "fstat": 5, "poll": 7, "lseek": 8, "mmap": 9,
    "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
    "rt_sigreturn": 15, "ioctl": 16, "pread64": 17, "readv": 19, "writev": 20, "select": 23,
    "sched_yield": 24, "mremap": 25, "madvise": 28, "dup": 32, "nanosleep": 35,
    "getpid": 39, "sendfile": 40, "socket": 41, "connect": 42, "sendto": 44,
    "recvfrom": 45, "sendmsg": 46, "recvmsg": 47, "shutdown": 48, "getsockname": 51,
    "getpeername": 52, "setsockopt": 54, "getsockopt": 55, "exit": 60, "uname": 63,
    "kill": 62, "fcntl": 72, "fsync": 74, "fdatasync": 75, "getcwd": 79, "readlink": 89,
    "gettimeofday": 96, "getuid": 102, "getgid": 104, "geteuid": 107, "getegid": 108,
    "getppid": 110, "sigaltstack": 131, "prctl": 157, "gettid": 186, "futex": 202,
    "sched_getaffinity": 204, "getdents64": 217, "restart_syscall": 219,
    "clock_gettime": 228, "clock_nanosleep": 230, "exit_group": 231, "epoll_wait": 232,
    "epoll_ctl": 233, "tgkill": 234, "openat": 257, "newfstatat": 262, "pselect6": 270,
    "ppoll": 271, "set_robust_list": 273, "epoll_pwait": 281, "timerfd_settime": 286,
    "accept4": 288, "eventfd2": 290, "epoll_create1": 291, "dup3": 292, "pipe2": 293,
    "getrandom": 318, "membarrier": 324, "statx": 332, "rseq": 334, "socketpair": 53,
    "openat2": 437, "io_uring_setup": 425,
    "execve": 59, "execveat": 322, "bind": 49, "listen": 50, "clone": 56, "clone3": 435,
    "fork": 57, "vfork": 58,
}


# ---- what the kernel supports --------------------------------------------------

def probe() -> dict:
    """{"landlock": ABI (0 = none), "seccomp": bool}; the test hook
    SCALWS_SANDBOX_FAKE_MISSING hides parts (landlock, landlock-net, seccomp)."""
    fake = {p.strip() for p in os.environ.get(FAKE_ENV, "").split(",") if p.strip()}
    abi = 0
    if "landlock" not in fake:
        try:
            abi = _syscall(NR_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                           ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
        except OSError:
            abi = 0
        if "landlock-net" in fake:
            abi = min(abi, 3)
    seccomp = False
    if "seccomp" not in fake and platform.machine() == "x86_64":
        action = ctypes.c_uint32(SECCOMP_RET_TRAP)
        try:
            _syscall(NR_SECCOMP, ctypes.c_uint(SECCOMP_GET_ACTION_AVAIL), ctypes.c_uint(0),
                     ctypes.byref(action))
            seccomp = True
        except OSError:
            seccomp = False
    return {"landlock": abi, "seccomp": seccomp}


def missing(support: dict) -> list[str]:
    """What of the web workers' sandbox this kernel cannot apply, in words."""
    out = []
    if not support["landlock"]:
        out.append("Landlock (filesystem and TCP rules): not supported by this kernel "
                   "(needs Linux >= 5.13 with landlock in the lsm= list)")
    elif support["landlock"] < 4:
        out.append(f"Landlock TCP rules: this kernel has Landlock ABI {support['landlock']}, "
                   "they need ABI 4 (Linux >= 6.7)")
    if not support["seccomp"]:
        out.append("seccomp system call filter: not supported here "
                   "(needs seccomp filters on x86-64)")
    return out


def check(config) -> None:
    """The master, at start and on reload: `required` raises SandboxError when
    a part is missing; `on` warns once."""
    if config.sandbox == "off":
        return
    gaps = missing(probe())
    if not gaps:
        return
    if config.sandbox == "required":
        raise SandboxError("sandbox: required, but this kernel cannot apply: " + "; ".join(gaps))
    for gap in gaps:
        log.warning("sandbox: on, but the workers run without %s", gap)


# ---- Landlock ----------------------------------------------------------------

def _fs_mask(abi: int) -> int:
    mask = _FS_ABI1
    if abi >= 2:
        mask |= FS_REFER
    if abi >= 3:
        mask |= FS_TRUNCATE
    if abi >= 5:
        mask |= FS_IOCTL_DEV
    return mask


def open_rules(rules: dict) -> list:
    """Opens each path of `rules` ({path: access}) with O_PATH, now: a
    worker does it before it switches to its user, who may not be able to
    walk to its roots (a root in a 0700 folder it was opened from). Paths
    that do not exist are skipped. Returns [(fd, access, is_dir)]."""
    out = []
    for path, access in rules.items():
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        out.append((fd, access, os.path.isdir(path)))
    return out


def close_rules(opened: list) -> None:
    for fd, _access, _is_dir in opened:
        os.close(fd)


def landlock(abi: int, rules, ports=None, scope: bool = True) -> None:
    """Restricts this process: `rules` maps a path to the access it keeps
    (paths that do not exist are skipped), or is open_rules()'s list (then
    closed here); `ports` (a set of TCP ports; None = network not handled)
    are the only ones it may connect to, and it may bind none. Raises
    OSError."""
    opened = open_rules(rules) if isinstance(rules, dict) else rules
    fs = _fs_mask(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if (ports is not None and abi >= 4) else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if (scope and abi >= 6) else 0
    attr = struct.pack("=QQQ", fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr[:size], size)
    try:
        fd = _syscall(NR_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(size),
                      ctypes.c_uint32(0))
        try:
            for pfd, access, is_dir in opened:
                if not is_dir:
                    access &= FILE_ONLY
                access &= fs
                if not access:
                    continue
                rule = ctypes.create_string_buffer(struct.pack("=Qi", access, pfd), 12)
                _syscall(NR_LANDLOCK_ADD_RULE, ctypes.c_int(fd),
                         ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0))
            if net:
                for port in sorted(ports):
                    rule = ctypes.create_string_buffer(struct.pack("=QQ", NET_CONNECT_TCP, port),
                                                       16)
                    _syscall(NR_LANDLOCK_ADD_RULE, ctypes.c_int(fd),
                             ctypes.c_int(LANDLOCK_RULE_NET_PORT), rule, ctypes.c_uint32(0))
            _syscall(NR_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0))
        finally:
            os.close(fd)
    finally:
        close_rules(opened)


def worker_rules(config) -> tuple[dict, set]:
    """The web worker's Landlock rules: ({path: access}, {TCP ports}). Only
    the document roots: what else the worker reads was opened before it
    confined itself (docs/operations.md, "The sandbox")."""
    rules: dict[str, int] = {}
    for root in document_roots(config):
        rules[root] = rules.get(root, 0) | RO
    ports = set()
    for up in config.upstreams.values():
        for s in up.servers:
            if s.port:
                ports.add(s.port)
    return rules, ports


def document_roots(config) -> list[str]:
    """The folders the workers serve files from (static and fastcgi routes),
    in configuration order, each once."""
    out: list[str] = []
    for site in config.sites:
        for route in site.routes:
            root = getattr(route.handler, "root", None)
            if isinstance(root, str) and root not in out:
                out.append(root)
    return out


# Modules a worker may import after it confined itself (a lazy import in
# the standard library or in ours): imported by `preload` while the Python
# installation is still readable, since Landlock closes it afterwards (and
# `user:` may not read it at all: a pyenv under /root).
PRELOAD = (
    "encodings.idna", "encodings.latin_1", "encodings.ascii", "errno", "linecache",
    "signal", "socket", "struct", "traceback",
    "tokenize", "weakref",
)


def preload() -> None:
    """In a worker, before `user:` and the sandbox: every module it may
    import later, so that no import needs the filesystem once it serves."""
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)


# ---- seccomp -------------------------------------------------------------------

def _insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter(numbers: list[int], match: int, default: int, enosys=()) -> bytes:
    """A classic BPF program: kill any other architecture (and x32 calls),
    then `match` for each number in order, ENOSYS for those in `enosys`,
    `default` for the rest."""
    prog = [_insn(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
            _insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
            _insn(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
            _insn(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
            _insn(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
            _insn(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    n = len(numbers)
    for i, nr in enumerate(numbers):
        # equal: jump over the remaining comparisons and the default to `match`
        prog.append(_insn(BPF_JEQ_K, n - i + 2 * len(enosys), 0, nr))
    for nr in enosys:
        prog.append(_insn(BPF_JEQ_K, 0, 1, nr))
        prog.append(_insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS))
    prog.append(_insn(BPF_RET_K, 0, 0, default))
    prog.append(_insn(BPF_RET_K, 0, 0, match))
    return b"".join(prog)


def install_seccomp(program: bytes) -> None:
    count = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer(struct.pack("=HxxxxxxQ", count, ctypes.addressof(buf)), 16)
    _syscall(NR_SECCOMP, ctypes.c_uint(SECCOMP_SET_MODE_FILTER), ctypes.c_uint(0), fprog)


def _numbers(names) -> list[int]:
    table = syscall_numbers()
    out, seen = [], set()
    for name in names:
        nr = table.get(name)
        if nr is not None and nr not in seen:
            seen.add(nr)
            out.append(nr)
    return out


def worker_filter() -> bytes:
    return seccomp_filter(_numbers(WORKER_SYSCALLS), SECCOMP_RET_ALLOW, SECCOMP_RET_TRAP,
                          _numbers(WORKER_ENOSYS))


def app_filter() -> bytes:
    return seccomp_filter(_numbers(APP_DENIED), SECCOMP_RET_ERRNO | errno.EPERM,
                          SECCOMP_RET_ALLOW)


def no_new_privs() -> None:
    _syscall(NR_PRCTL, ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
             ctypes.c_ulong(0), ctypes.c_ulong(0))


# ---- applying it ---------------------------------------------------------------

class WorkerPlan:
    """What a web worker prepares while it still runs as it was started:
    its Landlock rules, their paths opened (open_rules)."""

    def __init__(self, config):
        self.support = probe() if config.sandbox != "off" else {"landlock": 0, "seccomp": False}
        self.rules, self.ports = worker_rules(config)
        self.opened = open_rules(self.rules) if self.support["landlock"] else []

    def discard(self):
        close_rules(self.opened)
        self.opened = []


def apply_worker(config, index: int, trap_sigsys, plan: WorkerPlan | None = None) -> list[str]:
    """Confines this web worker (after its sockets, files and `user:`), with
    the `plan` it made before switching users (made now when None).
    `trap_sigsys` installs the engine's SIGSYS handler. Returns what was
    applied; raises SandboxError when `required` and a part fails."""
    if config.sandbox == "off":
        if plan is not None:
            plan.discard()
        return []
    plan = plan or WorkerPlan(config)
    required = config.sandbox == "required"
    support = plan.support
    done, failed = [], []
    try:
        no_new_privs()
        done.append("no_new_privs")
    except OSError as exc:
        failed.append(f"no_new_privs: {exc.strerror}")
    if support["landlock"] and "no_new_privs" in done:
        try:
            landlock(support["landlock"], plan.opened, plan.ports)
            done.append(f"landlock (ABI {support['landlock']})")
        except OSError as exc:
            failed.append(f"landlock: {exc.strerror}")
        plan.opened = []
    plan.discard()
    if support["seccomp"] and "no_new_privs" in done:
        try:
            trap_sigsys()
            install_seccomp(worker_filter())
            done.append("seccomp")
        except OSError as exc:
            failed.append(f"seccomp: {exc.strerror}")
    if failed:
        msg = f"worker {index}: sandbox: could not apply " + "; ".join(failed)
        if required:
            raise SandboxError(msg)
        log.warning("%s", msg)
    return done


def app_rules(app, sock_dir: str) -> dict:
    rules = {"/": RX, "/tmp": RX | RW | FS_REMOVE_FILE | FS_REMOVE_DIR | FS_MAKE_DIR
             | FS_TRUNCATE | FS_MAKE_SOCK | FS_MAKE_SYM | FS_REFER,
             "/dev": RO | FS_WRITE_FILE | FS_IOCTL_DEV}
    full = (RX | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG
            | FS_MAKE_SOCK | FS_MAKE_SYM | FS_MAKE_FIFO | FS_REFER | FS_TRUNCATE)
    for p in (app.dir, sock_dir):
        if p:
            rules[p] = rules.get(p, 0) | full
    return rules


def apply_app(config, app, sock_dir: str) -> None:
    """In an app worker's child, before exec: the looser profile. Errors
    propagate (the child reports them and exits 127) only when `required`."""
    if config.sandbox == "off":
        return
    support = probe()
    try:
        no_new_privs()
        if support["landlock"]:
            landlock(support["landlock"], app_rules(app, sock_dir), ports=None, scope=False)
        if support["seccomp"]:
            install_seccomp(app_filter())
    except OSError as exc:
        if config.sandbox == "required":
            raise SandboxError(f"sandbox: {exc.strerror}") from None


# ---- the test hook ---------------------------------------------------------------

def open_probe():
    """SCALWS_SANDBOX_PROBE=FILE: an fd kept open across the sandbox, or -1."""
    path = os.environ.get(PROBE_ENV)
    if not path:
        return -1
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def _attempt(op: str, args: list[str]) -> str:
    try:
        if op == "read":
            fd = os.open(args[0], os.O_RDONLY)
            try:
                os.read(fd, 1)
            finally:
                os.close(fd)
        elif op == "write":
            fd = os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.close(fd)
        elif op in ("connect", "bind"):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                if op == "connect":
                    s.connect((args[0], int(args[1])))
                else:
                    s.bind((args[0], int(args[1])))
                    s.listen(1)
            finally:
                s.close()
        elif op == "connect_unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(args[0])
            finally:
                s.close()
        elif op == "listen":  # autobind: listen on a fresh, unbound socket
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.listen(1)
            finally:
                s.close()
        elif op == "exec":
            os.execv(args[0], args)
        else:
            return "unknown operation"
    except OSError as exc:
        return f"{errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})"
    return "ok"


def run_probe(fd: int, index: int) -> None:
    """SIGUSR2 in a worker started with SCALWS_SANDBOX_PROBE: each line of the
    file is `OP ARG...` (read PATH, write PATH, connect HOST PORT, bind HOST
    PORT, listen, connect_unix PATH, exec PATH); each outcome is logged as
    `worker N: sandbox probe: LINE: ok | ERRNO (message)`."""
    data = os.pread(fd, 65536, 0).decode()
    for line in data.splitlines():
        parts = line.split()
        if not parts:
            continue
        log.warning("worker %d: sandbox probe: %s: %s", index, line.strip(),
                    _attempt(parts[0], parts[1:]))
