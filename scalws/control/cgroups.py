"""Control groups for scalws-controller's instances, cgroup v1 and v2.

    detect(root, name) -> CgroupV2 | CgroupV1 | None

v2 (the unified hierarchy) is recognised by ROOT/cgroup.controllers; the
controller's groups are ROOT/NAME/instance-I, with cpuset.cpus, cpu.max and
memory.max, and `+cpu +cpuset +memory` enabled in the subtree_control of
ROOT and ROOT/NAME. Otherwise v1: one folder per controller,
ROOT/{cpu,cpuset,memory}/NAME/instance-I, with cpu.cfs_period_us and
cpu.cfs_quota_us, cpuset.cpus and cpuset.mems (copied from the parent, or no
task may join), memory.limit_in_bytes. A process joins by writing its pid to
cgroup.procs of each of its folders (the instance does that itself, between
fork and exec, so its workers are born inside).

ROOT is /sys/fs/cgroup unless `scalws-controller --cgroup-root` or
SCALWS_CGROUP_ROOT says otherwise (tests point it at a fake folder).
"""
from __future__ import annotations

import os

DEFAULT_ROOT = "/sys/fs/cgroup"
PERIOD_US = 100_000
V2_CONTROLLERS = ("cpu", "cpuset", "memory")
V1_CONTROLLERS = ("cpu", "cpuset", "memory")


def _read(path) -> str:
    with open(path) as f:
        return f.read().strip()


def _write(path, value) -> None:
    with open(path, "w") as f:
        f.write(f"{value}\n")


def _cpus_text(cpus) -> str:
    return ",".join(str(c) for c in cpus)


class CgroupV2:
    version = 2

    def __init__(self, root, name):
        self.root = root
        self.base = os.path.join(root, name)

    def setup(self) -> None:
        have = _read(os.path.join(self.root, "cgroup.controllers")).split()
        want = " ".join(f"+{c}" for c in V2_CONTROLLERS if c in have)
        os.makedirs(self.base, exist_ok=True)
        for folder in (self.root, self.base):
            _write(os.path.join(folder, "cgroup.subtree_control"), want)

    def dirs(self, slot) -> list:
        return [os.path.join(self.base, f"instance-{slot}")]

    def create(self, slot, cpus, memory_limit=None, cpu_quota=None) -> None:
        d = self.dirs(slot)[0]
        os.makedirs(d, exist_ok=True)
        _write(os.path.join(d, "cpuset.cpus"), _cpus_text(cpus))
        quota = "max" if cpu_quota is None else str(int(cpu_quota * PERIOD_US))
        _write(os.path.join(d, "cpu.max"), f"{quota} {PERIOD_US}")
        _write(os.path.join(d, "memory.max"), "max" if memory_limit is None else memory_limit)

    def join(self, slot, pid) -> None:
        for d in self.dirs(slot):
            _write(os.path.join(d, "cgroup.procs"), pid)

    def remove(self, slot) -> None:
        for d in self.dirs(slot):
            try:
                os.rmdir(d)
            except OSError:
                pass

    def close(self) -> None:
        try:
            os.rmdir(self.base)
        except OSError:
            pass


class CgroupV1(CgroupV2):
    version = 1

    def __init__(self, root, name):
        self.root = root
        self.name = name
        self.bases = {c: os.path.join(root, c, name) for c in V1_CONTROLLERS}

    def setup(self) -> None:
        for c, base in self.bases.items():
            os.makedirs(base, exist_ok=True)
        cs = self.bases["cpuset"]
        for key in ("cpuset.cpus", "cpuset.mems"):
            if not _read(os.path.join(cs, key)):
                _write(os.path.join(cs, key), _read(os.path.join(self.root, "cpuset", key)))

    def dirs(self, slot) -> list:
        return [os.path.join(base, f"instance-{slot}") for base in self.bases.values()]

    def create(self, slot, cpus, memory_limit=None, cpu_quota=None) -> None:
        cpu, cpuset, memory = self.dirs(slot)
        for d in (cpu, cpuset, memory):
            os.makedirs(d, exist_ok=True)
        _write(os.path.join(cpuset, "cpuset.cpus"), _cpus_text(cpus))
        _write(os.path.join(cpuset, "cpuset.mems"),
               _read(os.path.join(self.bases["cpuset"], "cpuset.mems")))
        _write(os.path.join(cpu, "cpu.cfs_period_us"), PERIOD_US)
        _write(os.path.join(cpu, "cpu.cfs_quota_us"),
               -1 if cpu_quota is None else int(cpu_quota * PERIOD_US))
        # -1: no limit (the kernel rounds it to its largest value).
        _write(os.path.join(memory, "memory.limit_in_bytes"),
               -1 if memory_limit is None else memory_limit)

    def close(self) -> None:
        for base in self.bases.values():
            try:
                os.rmdir(base)
            except OSError:
                pass


def detect(root=None, name="scalws"):
    """The hierarchy under `root`, or None when there is none we can use."""
    root = root or os.environ.get("SCALWS_CGROUP_ROOT") or DEFAULT_ROOT
    if os.path.exists(os.path.join(root, "cgroup.controllers")):
        return CgroupV2(root, name)
    if all(os.path.isdir(os.path.join(root, c)) for c in V1_CONTROLLERS):
        return CgroupV1(root, name)
    return None
