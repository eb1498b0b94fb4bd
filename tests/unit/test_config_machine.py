"""What the configuration takes from the machine: batch_window and
busy_poll (their values and `auto`), whether it runs virtualized, and its
CPU quota from cgroup v1 or v2."""
import os

import pytest

from scalws.config.loader import load_config_text


def test_batch_window():
    from scalws.config.loader import load_config_text
    base = "sites: [{listen: ['127.0.0.1:8080'], routes: [{path: /, respond: {body: x}}]}]\n"
    assert load_config_text(base).batch_window == pytest.approx(20e-6)  # on by default
    assert load_config_text("batch_window: 0\n" + base).batch_window == 0
    assert load_config_text("batch_window: 50us\n" + base).batch_window == pytest.approx(0.00005)
    with pytest.raises(Exception, match=r"<string>:1:15: batch_window: expected at most 1ms"):
        load_config_text("batch_window: 2ms\n" + base)


def test_busy_poll():
    from scalws.config.machine import BUSY_POLL_AUTO, cpu_quota, virtualized
    base = "sites: [{listen: ['127.0.0.1:8080'], routes: [{path: /, respond: {body: x}}]}]\n"
    quota = cpu_quota()
    workers = len(os.sched_getaffinity(0))
    auto = BUSY_POLL_AUTO if virtualized() and (quota is None or quota[0] >= workers) else 0
    assert load_config_text(base).busy_poll_auto.startswith("50us" if auto else "off")
    assert load_config_text("busy_poll: 0\n" + base).busy_poll_auto == ""
    assert BUSY_POLL_AUTO == pytest.approx(50e-6)
    assert load_config_text(base).busy_poll == pytest.approx(auto)  # auto by default
    assert load_config_text("busy_poll: auto\n" + base).busy_poll == pytest.approx(auto)
    assert load_config_text("busy_poll: 0\n" + base).busy_poll == 0
    assert load_config_text("busy_poll: 20us\n" + base).busy_poll == pytest.approx(20e-6)
    assert load_config_text("busy_poll: 1ms\n" + base).busy_poll == pytest.approx(0.001)
    assert load_config_text("busy_poll: 5.0e-05\n" + base).busy_poll == pytest.approx(50e-6)  # seconds
    with pytest.raises(Exception, match=r"<string>:1:12: busy_poll: expected auto or at most 1ms "
                       r"\(0 turns it off\), got 2ms"):
        load_config_text("busy_poll: 2ms\n" + base)
    with pytest.raises(Exception, match=r"<string>:1:12: busy_poll: expected auto or a duration "
                       r"such as 50us \(0 turns it off\), got a string 'often'"):
        load_config_text("busy_poll: often\n" + base)
    with pytest.raises(Exception, match=r"<string>:1:1: busy_pol: unknown key.*did you mean 'busy_poll'"):
        load_config_text("busy_pol: 1ms\n" + base)


@pytest.mark.parametrize("flags, hypervisor, dmi, expected", [
    ("fpu vme de pse tsc msr hypervisor lahf_lm", None, None, True),   # x86 guest
    ("fpu vme de pse tsc msr lahf_lm", None, None, False),             # x86 bare metal
    ("fpu vme de pse tsc msr lahf_lm", "xen\n", None, True),           # the kernel knows a hypervisor
    (None, None, ("QEMU", "KVM Virtual Machine"), True),               # arm64 KVM guest
    (None, None, ("Amazon EC2", "c6g.large"), True),                   # arm64 EC2 instance
    (None, None, ("Amazon EC2", "c6g.metal"), False),                  # ... but not a metal one
    (None, None, ("Dell Inc.", "PowerEdge R650"), False),              # a server
    (None, None, None, False),                                         # nothing to go by
])
def test_virtualized(tmp_path, flags, hypervisor, dmi, expected):
    from scalws.config.machine import virtualized
    cpuinfo, hyp, dmi_dir = tmp_path / "cpuinfo", tmp_path / "hypervisor", tmp_path / "dmi"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    if hypervisor is not None:
        hyp.write_text(hypervisor)
    if dmi is not None:
        dmi_dir.mkdir()
        (dmi_dir / "sys_vendor").write_text(dmi[0] + "\n")
        (dmi_dir / "product_name").write_text(dmi[1] + "\n")
    assert virtualized(str(cpuinfo), str(hyp), str(dmi_dir)) is expected


def cgroup_tree(tmp_path, version, quotas, mount_root="/", path="/svc/instance-1"):
    """A fake /proc/self/cgroup, /proc/self/mountinfo and cgroup mount for
    cpu_quota: the process in `path`; quotas maps a directory under the
    mount ("" is its root) to (quota, period), quota None for none."""
    point = tmp_path / ("unified" if version == 2 else "cpu")
    if version == 2:
        mount = f"30 23 0:27 {mount_root} {point} rw - cgroup2 cgroup2 rw,nsdelegate"
        cg = f"0::{path}"
    else:
        mount = f"32 31 0:29 {mount_root} {point} rw,relatime - cgroup cgroup rw,cpu,cpuacct"
        cg = f"4:cpu,cpuacct:{path}\n0::/"
    rel = path[len(mount_root.rstrip("/")):] if mount_root != "/" else path
    (point / rel.lstrip("/")).mkdir(parents=True)
    for d, (quota, period) in quotas.items():
        where = point / d
        where.mkdir(parents=True, exist_ok=True)
        if version == 2:
            (where / "cpu.max").write_text(f"{'max' if quota is None else quota} {period}\n")
        else:
            (where / "cpu.cfs_quota_us").write_text(f"{-1 if quota is None else quota}\n")
            (where / "cpu.cfs_period_us").write_text(f"{period}\n")
    (tmp_path / "cgroup").write_text(cg + "\n1:name=systemd:/\n")
    (tmp_path / "mountinfo").write_text(
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        f"33 31 0:30 / {tmp_path}/cpuacct rw - cgroup cgroup rw,cpuacct\n{mount}\n")
    return str(tmp_path / "cgroup"), str(tmp_path / "mountinfo"), point


@pytest.mark.parametrize("version", [1, 2])
def test_cpu_quota(tmp_path, version):
    from scalws.config.machine import cpu_quota
    name = "cpu.max" if version == 2 else "cpu.cfs_quota_us"
    # none anywhere
    cg, mi, point = cgroup_tree(tmp_path / "a", version, {"": (None, 100000), "svc/instance-1": (None, 100000)})
    assert cpu_quota(cg, mi) is None
    # on the process's own group
    cg, mi, point = cgroup_tree(tmp_path / "b", version, {"svc/instance-1": (150000, 100000)})
    assert cpu_quota(cg, mi) == (1.5, f"{point}/svc/instance-1/{name}")
    # on an ancestor only, and the tightest of two
    cg, mi, point = cgroup_tree(tmp_path / "c", version, {"svc": (60000, 100000)})
    assert cpu_quota(cg, mi) == (0.6, f"{point}/svc/{name}")
    cg, mi, point = cgroup_tree(tmp_path / "d", version,
                                {"svc": (20000, 100000), "svc/instance-1": (6000, 10000)})
    assert cpu_quota(cg, mi) == (0.2, f"{point}/svc/{name}")
    # a container whose cgroup mount starts below the hierarchy's root
    cg, mi, point = cgroup_tree(tmp_path / "e", version, {"inst": (50000, 100000)},
                                mount_root="/docker/abc", path="/docker/abc/inst")
    assert cpu_quota(cg, mi) == (0.5, f"{point}/inst/{name}")
    # nothing readable
    assert cpu_quota(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_cpu_quota_edge_cases(tmp_path):
    from scalws.config.machine import cpu_quota
    # a mount point with a space, which mountinfo writes as \040
    point = tmp_path / "cg root" / "cpu"
    (point / "svc").mkdir(parents=True)
    (point / "svc" / "cpu.cfs_quota_us").write_text("25000\n")
    (point / "svc" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/svc\n0::/\n")
    esc = str(point).replace(" ", "\\040")
    mi = tmp_path / "mountinfo"
    mi.write_text(f"32 31 0:29 / {esc} rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) == (0.25, f"{point}/svc/cpu.cfs_quota_us")
    # a bind mount of another group listed first does not hide the hierarchy's mount
    other = tmp_path / "other"
    other.mkdir()
    mi.write_text(f"31 30 0:29 /elsewhere {other} rw - cgroup cgroup rw,cpu,cpuacct\n"
                  f"32 31 0:29 / {esc} rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) == (0.25, f"{point}/svc/cpu.cfs_quota_us")
    # a group above the mount (a cgroup namespace's "/..") is not looked for below it
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/../svc\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) is None
    # bytes that are not UTF-8, a zero period, garbage: no quota, no exception
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/svc\n")
    mi.write_bytes(b"40 31 0:40 / /media/caf\xe9 rw - ext4 /dev/sda1 rw\n" +
                   f"32 31 0:29 / {esc} rw - cgroup cgroup rw,cpu,cpuacct\n".encode())
    (point / "svc" / "cpu.cfs_period_us").write_text("0\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) is None
    (point / "svc" / "cpu.cfs_quota_us").write_text("lots\n")
    assert cpu_quota(str(tmp_path / "cgroup"), str(mi)) is None


def test_busy_poll_auto_and_the_quota(monkeypatch):
    # Off under a quota smaller than the workers' CPUs; a quota of a CPU per
    # worker or more cannot be spent by polling, so a virtual machine polls.
    from scalws.config import machine
    monkeypatch.setattr(machine, "virtualized", lambda: True)
    monkeypatch.setattr(machine, "cpu_quota", lambda: (1.5, "/cg/cpu.max"))
    assert machine.busy_poll_auto(2) == (0.0, "off: a CPU quota of 1.5 CPUs for 2 worker(s) on /cg/cpu.max")
    assert machine.busy_poll_auto(1) == (machine.BUSY_POLL_AUTO, "50us: a virtual machine")
    monkeypatch.setattr(machine, "cpu_quota", lambda: None)
    assert machine.busy_poll_auto(4) == (machine.BUSY_POLL_AUTO, "50us: a virtual machine")
    monkeypatch.setattr(machine, "virtualized", lambda: False)
    assert machine.busy_poll_auto(4) == (0.0, "off: not a virtual machine")
    monkeypatch.setattr(machine, "cpu_quota", lambda: (0.5, "/cg/cpu.max"))
    assert machine.busy_poll_auto(1)[0] == 0.0
