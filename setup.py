"""Build the native data plane.

Switches (environment):
  SCALWS_DEBUG=1      -O0 -g, live-object counters compiled in (SWS_DEBUG)
  SCALWS_SANITIZE=1   -fsanitize=address,undefined (run with LD_PRELOAD of libasan)
  SCALWS_PGO=gen|use  profile-guided optimisation; profiles in build/pgo/
  SCALWS_MARCH=...    -march value; default: x86-64 plus SSE4.2 when this CPU has it
"""
import os
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _cpu_has(flag):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return flag in line.split()
    except OSError:
        pass
    return False


def cflags():
    flags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
             "-Wno-sign-compare", "-Wno-missing-field-initializers",
             "-fno-strict-aliasing"]
    if os.environ.get("SCALWS_DEBUG") == "1":
        flags += ["-O0", "-g", "-DSWS_DEBUG=1"]
    else:
        flags += ["-O3", "-DNDEBUG"]
    march = os.environ.get("SCALWS_MARCH")
    if march:
        flags.append("-march=" + march)
    elif _cpu_has("sse4_2"):
        flags.append("-msse4.2")
    if os.environ.get("SCALWS_SANITIZE") == "1":
        flags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    pgo = os.environ.get("SCALWS_PGO")
    pgo_dir = os.path.join(HERE, "build", "pgo")
    if pgo == "gen":
        flags += ["-fprofile-generate", "-fprofile-update=atomic",
                  "-fprofile-dir=" + pgo_dir]
    elif pgo == "use":
        flags += ["-fprofile-use", "-fprofile-correction",
                  "-Wno-missing-profile", "-fprofile-dir=" + pgo_dir]
    return flags


def ldflags():
    flags = []
    if os.environ.get("SCALWS_SANITIZE") == "1":
        flags += ["-fsanitize=address,undefined"]
    if os.environ.get("SCALWS_PGO") == "gen":
        flags += ["-fprofile-generate"]
    return flags


def ext(name, sources):
    return Extension(
        name, sources,
        include_dirs=["csrc/include", "csrc"],
        extra_compile_args=cflags(),
        extra_link_args=ldflags(),
        libraries=["ssl", "crypto"],   # Debian's libssl (OpenSSL 3): TLS
    )


# The engine's C, floor by floor (docs/architecture.md, ADR 0005).
CORE_C = ["csrc/core/core.c", "csrc/core/loop.c", "csrc/core/httpdate.c", "csrc/core/filecache.c",
          "csrc/net/listen.c", "csrc/net/conn.c", "csrc/net/peer.c", "csrc/net/tls.c", "csrc/net/sni.c",
          "csrc/http/http1.c", "csrc/http/path.c", "csrc/http/httpcond.c", "csrc/http/router.c",
          "csrc/http/h1.c", "csrc/http/h1_out.c", "csrc/http/accesslog.c",
          "csrc/handlers/respond.c", "csrc/handlers/static.c", "csrc/handlers/autoindex.c",
          "csrc/handlers/proxy.c", "csrc/handlers/proxy_head.c",
          "csrc/upstream/pool.c", "csrc/upstream/balance.c", "csrc/upstream/health.c",
          "csrc/upstream/uptls.c",
          "csrc/engine.c"]

extensions = [
    ext("scalws.http.parser", ["scalws/http/parser.pyx", "csrc/http/http1.c"]),
    ext("scalws.server.engine", ["scalws/server/engine.pyx"] + CORE_C),
]

if "build_ext" in sys.argv or "develop" in sys.argv or "install" in sys.argv \
        or "bdist_wheel" in sys.argv or "editable_wheel" in sys.argv:
    from Cython.Build import cythonize
    extensions = cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False,
                             "cdivision": True, "embedsignature": True},
        include_path=["scalws/includes"],
    )

setup(ext_modules=extensions)
