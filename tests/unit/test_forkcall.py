"""scalws/control/forkcall.py and cfgload.py: work done in a throwaway
child, whose imports do not stay in the caller (issue 37)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from scalws.config.errors import ConfigError
from scalws.control import cfgload, forkcall


def _imports_and_returns(name):
    __import__(name)
    return (os.getpid(), name in sys.modules, {"nested": [1, 2.5, b"x"]})


def test_returns_what_the_child_returned_and_the_childs_imports_stay_there():
    name = "wave"  # a standard module nothing here imports
    assert name not in sys.modules
    pid, imported, data = forkcall.call(_imports_and_returns, name)
    assert pid != os.getpid() and imported
    assert data == {"nested": [1, 2.5, b"x"]}
    assert name not in sys.modules


def _raises(problems):
    raise ConfigError(problems)


def test_an_exception_of_the_child_is_raised_in_the_caller():
    with pytest.raises(ConfigError) as err:
        forkcall.call(_raises, [("f.yaml", 3, 7, "sites[0].listen", "bad")])
    assert str(err.value) == "f.yaml:3:7: sites[0].listen: bad"


def _dies():
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_child_that_dies_is_childfailed_with_the_signal():
    with pytest.raises(forkcall.ChildFailed, match="killed by signal 9"):
        forkcall.call(_dies)


def _unpicklable():
    return lambda: None


def test_an_answer_that_cannot_be_sent_is_childfailed_with_the_traceback():
    with pytest.raises(forkcall.ChildFailed, match="(?s)Traceback.*pickle"):
        forkcall.call(_unpicklable)


def test_a_large_answer_comes_whole():
    data = forkcall.call(os.urandom, 3 << 20)
    assert len(data) == 3 << 20


def _waits_for(r):
    return os.read(r, 10)


@pytest.mark.timeout(5)
def test_start_returns_while_the_child_works():
    """The child waits for a byte that the caller writes only after start()
    returned: a start() that waited for the child would hang here."""
    r, w = os.pipe()
    try:
        pending = forkcall.start(_waits_for, r)
        os.write(w, b"go")
        assert pending.result() == b"go"
    finally:
        os.close(r)
        os.close(w)


def test_the_config_is_loaded_in_a_child_and_equals_the_loaders(tmp_path):
    from scalws.config.loader import load_config
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""
        workers: 3
        sites:
          - listen: "127.0.0.1:8080"
            routes:
              - {path: /, respond: {body: "hi"}}
    """))
    assert cfgload.load(str(path)) == load_config(str(path))


def test_a_wrong_config_is_refused_with_file_line_and_key(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workers: 3\nsites:\n  - listen: \"127.0.0.1:8080\"\n    routes: 7\n")
    with pytest.raises(ConfigError) as err:
        cfgload.load(str(path))
    assert str(err.value).startswith(f"{path}:4:13: sites[0].routes: ")


def test_a_loader_that_dies_is_a_config_error_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(cfgload, "_load", lambda path: _dies())
    with pytest.raises(ConfigError) as err:
        cfgload.load(str(tmp_path / "s.yaml"))
    assert str(err.value).startswith(f"{tmp_path / 's.yaml'}:0:0: the configuration loader "
                                     "failed: the child process")
    assert "killed by signal 9" in str(err.value)


def test_the_master_imports_nothing_of_the_loader():
    """What the master, the TLS keeper and the controller import: no
    PyYAML, no directive module, no pyOpenSSL or cryptography."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys, scalws.control.master, scalws.control.tlskeeper, "
         "scalws.control.controller; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in "
         "('yaml', 'OpenSSL', 'cryptography') or m.startswith('scalws.config.directives') "
         "or m == 'scalws.config.loader'))"],
        capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_media_type_maps_are_shared_within_and_across_loads(tmp_path):
    """An unpickled config brings its own copy of each static route's map
    (2,000 entries): equal maps become one object, the previous config's."""
    (tmp_path / "www").mkdir()
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(f"""
        sites:
          - listen: "127.0.0.1:8080"
            routes:
              - {{path: /a/, static: {{root: "{tmp_path}/www"}}}}
              - {{path: /b/, static: {{root: "{tmp_path}/www"}}}}
              - {{path: /c/, static: {{root: "{tmp_path}/www", mime_types: {{x: text/x-x}}}}}}
    """))
    first = cfgload.load(str(path))
    a, b, c = (r.handler.mime_types for r in first.sites[0].routes)
    assert a is b and a is not c and c["x"] == "text/x-x" and len(a) > 1000
    second = cfgload.load(str(path), first)
    assert [r.handler.mime_types for r in second.sites[0].routes] == [a, a, c]
    assert all(r2.handler.mime_types is r1.handler.mime_types
               for r1, r2 in zip(first.sites[0].routes, second.sites[0].routes))


def test_what_the_workers_are_forked_with_has_no_asyncio_ssl_or_uvloop():
    """The master imports what a worker runs before it forks (the engine,
    control/loop.py): none of asyncio, uvloop, Python's ssl, or hashlib
    (whose import initialises OpenSSL) comes with it (ADR 0035)."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys, scalws.control.master, scalws.server.engine, "
         "scalws.control.statusd; scalws.control.master.Master._load_data_plane(); "
         "print(sorted(m for m in ('asyncio', 'uvloop', 'ssl', '_ssl', 'hashlib', '_hashlib') "
         "if m in sys.modules))"],
        capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
