"""What the machine is, as the configuration's defaults need it: the CPUs
this process may run on (`workers: auto`), whether it is a virtual machine
and the tightest cgroup CPU quota over it (`busy_poll: auto`, ADR 0004 and
ADR 0021). Read at load; nothing here may refuse a configuration.
"""
from __future__ import annotations

import ipaddress
import os
import re

# `busy_poll: auto` (the default): this long on a virtual machine, where
# waking a halted CPU is dear, off on bare metal (docs/adr/0004-busy-poll.md).
BUSY_POLL_AUTO = 50e-6


# DMI vendor and product names of virtual machines (what systemd-detect-virt
# also reads), for guests whose CPU does not say so (arm64).
_VM_DMI = ("KVM", "QEMU", "VMware", "VirtualBox", "Xen", "Bochs", "Virtual Machine",
           "Google Compute Engine", "OpenStack", "Parallels", "BHYVE")


def virtualized(cpuinfo="/proc/cpuinfo", hypervisor="/sys/hypervisor/type",
                dmi="/sys/class/dmi/id") -> bool:
    """True on a virtual machine: the CPU says it runs under a hypervisor
    (x86's `hypervisor` flag), the kernel knows one (/sys/hypervisor), or the
    firmware names a hypervisor's machine (DMI: KVM, QEMU, VMware, an EC2
    instance that is not `.metal`, ...)."""
    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""
    for line in read(cpuinfo).splitlines():
        if line.startswith("flags"):
            if "hypervisor" in line.split():
                return True
            break
    if read(hypervisor).strip():
        return True
    names = [read(f"{dmi}/{k}").strip() for k in ("sys_vendor", "product_name")]
    if any(v in name for name in names for v in _VM_DMI):
        return True
    vendor, product = names
    return vendor == "Amazon EC2" and not product.endswith(".metal")


def busy_poll_auto(workers: int) -> tuple:
    """What `busy_poll: auto` means here, and why: (seconds, reason). Off
    under a cgroup CPU quota smaller than `workers` CPUs, where the poll
    would spend the quota that serves requests; a worker is one thread, so
    with a quota of at least one CPU per worker polling can never be what
    throttles them (docs/adr/0021-busy-poll-under-a-cpu-quota.md). Else
    BUSY_POLL_AUTO on a virtual machine and off on bare metal."""
    quota = cpu_quota()
    if quota is not None and quota[0] < workers:
        cpus, where = quota
        return 0.0, f"off: a CPU quota of {cpus:g} CPUs for {workers} worker(s) on {where}"
    if not virtualized():
        return 0.0, "off: not a virtual machine"
    return BUSY_POLL_AUTO, f"{BUSY_POLL_AUTO * 1e6:g}us: a virtual machine"


def _unescape_mount(field: str) -> str:
    """A mountinfo path field as a path: the kernel writes space, tab,
    newline and backslash as \\ooo octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cpu_quota(proc_cgroup="/proc/self/cgroup", mountinfo="/proc/self/mountinfo"):
    """The tightest cgroup CPU quota on this process's cgroup or one of its
    ancestors that the cgroup mount shows, as (CPUs, the file that sets it),
    or None: cgroup v2's `cpu.max` ("max" is none), v1's `cpu.cfs_quota_us`
    (-1 is none) over `cpu.cfs_period_us`. Anything unreadable or
    malformed counts as no quota: this must never refuse a configuration."""
    def read(path):
        try:
            with open(path, errors="surrogateescape") as f:
                return f.read()
        except (OSError, ValueError):
            return ""

    # the hierarchies that can hold a CPU quota: (mount root, mount point, v2?)
    mounts = []
    for line in read(mountinfo).splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype, _, opts = (line.split(" - ", 1)[1].split() + ["", ""])[:3]
        root, point = _unescape_mount(fields[3]), _unescape_mount(fields[4])
        if fstype == "cgroup2":
            mounts.append((root, point, True))
        elif fstype == "cgroup" and "cpu" in opts.split(","):
            mounts.append((root, point, False))
    best = None
    for line in read(proc_cgroup).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        v2 = controllers == ""
        if not v2 and "cpu" not in controllers.split(","):
            continue
        for root, point, mount_v2 in mounts:
            # the mount that shows this group: its root is the group or an
            # ancestor of it (a bind mount of some other group is not)
            root = root.rstrip("/")
            if mount_v2 != v2 or not (path + "/").startswith(root + "/"):
                continue
            top = os.path.normpath(point)
            d = os.path.normpath(top + "/" + path[len(root):].lstrip("/"))
            if d != top and not d.startswith(top + "/"):
                continue  # "/.." under a cgroup namespace: not below this mount
            while True:
                cpus, where = _quota_in(d, v2, read)
                if cpus is not None and (best is None or cpus < best[0]):
                    best = (cpus, where)
                if d == top:
                    break
                d = os.path.dirname(d)
            break
    return best


def _quota_in(d, v2, read):
    """(CPUs, file) for the quota set in cgroup directory d, or (None, None)."""
    try:
        if v2:
            quota, period = read(d + "/cpu.max").split()
            if quota != "max":
                return int(quota) / int(period), d + "/cpu.max"
        else:
            quota = int(read(d + "/cpu.cfs_quota_us"))
            if quota > 0:
                return quota / int(read(d + "/cpu.cfs_period_us")), d + "/cpu.cfs_quota_us"
    except (ValueError, ZeroDivisionError):
        pass
    return None, None


def usable_cpus() -> list:
    """The CPUs this process may run on, sorted (worker i -> cpus[i % n])."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def local_addresses(fib="/proc/net/fib_trie", inet6="/proc/net/if_inet6") -> list:
    """This host's (this network namespace's) IP addresses: the IPv4 ones
    the kernel's local table holds and the IPv6 ones of its interfaces."""
    out = []
    try:
        with open(fib) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for prev, line in zip(lines, lines[1:]):
        if line.strip() == "/32 host LOCAL" and prev.strip().startswith("|--"):
            addr = prev.strip()[3:].strip()
            if addr not in out:
                out.append(addr)
    try:
        with open(inet6) as f:
            for line in f:
                hexaddr = line.split()[0] if line.split() else ""
                if len(hexaddr) == 32:
                    addr = ipaddress.IPv6Address(bytes.fromhex(hexaddr)).compressed
                    if addr not in out:
                        out.append(addr)
    except OSError:
        pass
    return out
