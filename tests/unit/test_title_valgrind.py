"""control/title.py leaves the argument area alone when it is not ours:
under valgrind /proc/self/stat's arg_start..arg_end is valgrind's own
command line (which it reads again in a forked child, to name its output
file) while /proc/self/cmdline shows the client's."""
import io

from scalws.control import title


def fake_proc(monkeypatch, cmdline: bytes, start: int, end: int):
    fields = ["0"] * 60
    fields[47], fields[48] = str(start), str(end)   # fields 48 and 49 (1-based) after comm
    stat = b"1 (python3) " + " ".join(fields[2:]).encode()

    def fake_open(path, mode="r", *a, **k):
        data = {"/proc/self/stat": stat, "/proc/self/cmdline": cmdline}[path]
        return io.BytesIO(data)
    monkeypatch.setattr(title, "open", fake_open, raising=False)
    monkeypatch.setattr(title, "_area", None)


def test_our_own_area_is_used(monkeypatch):
    fake_proc(monkeypatch, b"python3\0-m\0scalws\0", 1000, 1000 + 18)
    title.init()
    assert title._area == (1000, 18)


def test_an_area_longer_than_our_command_line_is_not_ours(monkeypatch):
    fake_proc(monkeypatch, b"python3\0-m\0scalws\0", 1000, 1000 + 90)
    title.init()
    assert title._area is None
