"""Build the native data plane.

Switches (environment):
  SCALWS_DEBUG=1      -O0 -g, live-object counters compiled in (SWS_DEBUG)
  SCALWS_SANITIZE=1   -fsanitize=address,undefined (run with LD_PRELOAD of libasan)
  SCALWS_PGO=gen|use  profile-guided optimisation, driven by tools/pgo-build.sh
                      (docs/operations.md, "Profile-guided build"); profiles in
                      build/pgo/. `use` fails when a translation unit has no
                      profile or a profile does not match, never falls back.
  SCALWS_BOLT=instrument|use
                      BOLT (llvm-bolt, Debian's bolt-16) applied to the engine
                      after it is linked, driven by tools/pgo-build.sh --bolt:
                      `instrument` writes a training build whose workers
                      write build/pgo/bolt/engine.fdata.PID.fdata; `use`
                      lays the engine's code out by build/pgo/bolt/engine.fdata
                      (merged), and fails without it or with a stale one.
                      Both link with --emit-relocs (BOLT moves functions).
  SCALWS_MARCH=...    -march value; default: the compiler's own (x86-64) plus
                      SSE4.2 when this CPU has it
  SCALWS_COMMIT=...   the commit `scalwsd --version` names, for a build from a
                      tree without .git (default: git rev-parse HEAD, or unknown)

Every build writes scalws/_buildinfo.py (not in git): version, commit, compiler,
-march, PGO and BOLT state, which `scalwsd --version` prints. It holds nothing that
differs between two builds of one commit (no time, host or absolute path).

A module whose compile flags differ from those of its last build is rebuilt
even when its sources are older than it (distutils compares times only), so a
plain build after a PGO one, or a `use` build after new profiles, never keeps
the previous objects.

PGO profiles: gcc names each .gcda after the object it belongs to, made
relative to this folder (-fprofile-prefix-path), e.g.
build/pgo/build#temp.linux-x86_64-cpython-311#csrc#core#core.gcda. They fit a
build of the same sources with the same build folder (the default build_temp),
compiler, Python (its headers), Cython, flags and -march; build/pgo/STAMP
records what they were trained with, and a `use` build checks it.
"""
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
PGO_DIR = os.path.join(HERE, "build", "pgo")
PGO_GEN = os.path.join(PGO_DIR, "GEN")        # written by a `gen` build
PGO_STAMP = os.path.join(PGO_DIR, "STAMP")    # written by tools/pgo-build.sh after training
BOLT_DIR = os.path.join(PGO_DIR, "bolt")
BOLT_STAMP = os.path.join(BOLT_DIR, "STAMP")  # written by tools/pgo-build.sh --bolt after training
BOLT_MODULES = ("scalws.server.engine",)      # the request path (the parser module is the tests')
FLAGS_RECORD = "scalws-flags.json"            # in build_temp: the flags of each module's last build


def _cpu_has(flag):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return flag in line.split()
    except OSError:
        pass
    return False


def _pgo_mode():
    pgo = os.environ.get("SCALWS_PGO", "")
    if pgo not in ("", "gen", "use"):
        sys.exit(f"setup.py: SCALWS_PGO must be gen or use, not {pgo!r}")
    return pgo


def _bolt_mode():
    bolt = os.environ.get("SCALWS_BOLT", "")
    if bolt not in ("", "instrument", "use"):
        sys.exit(f"setup.py: SCALWS_BOLT must be instrument or use, not {bolt!r}")
    return bolt


def base_cflags():
    """The flags of every build, without the PGO ones."""
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
    return flags


def cflags():
    flags = base_cflags()
    pgo = _pgo_mode()
    # -fprofile-prefix-path: the .gcda names are the object paths relative to
    # this folder, not absolute ones.
    where = ["-fprofile-dir=" + PGO_DIR, "-fprofile-prefix-path=" + HERE]
    if pgo == "gen":
        # atomic: a worker's counters stay consistent whatever runs beside it
        flags += ["-fprofile-generate", "-fprofile-update=atomic"] + where
    elif pgo == "use":
        # partial-training: code the training load never ran is optimised as
        # without a profile, not for size. correction: smooths counts that
        # disagree slightly; it makes up no missing profile. A missing .gcda,
        # or one that no longer matches its source, is an error, never a
        # silent fallback.
        flags += ["-fprofile-use", "-fprofile-partial-training", "-fprofile-correction",
                  "-Werror=missing-profile", "-Werror=coverage-mismatch"] + where
    return flags


def ldflags():
    flags = []
    if os.environ.get("SCALWS_SANITIZE") == "1":
        flags += ["-fsanitize=address,undefined"]
    if _pgo_mode() == "gen":
        # __gcov_dump linked in and exported: processes that end with
        # os._exit write their counters through it (scalws/control/profiles.py)
        flags += ["-fprofile-generate", "-Wl,--require-defined=__gcov_dump"]
    if _bolt_mode():
        # relocations kept in the output: BOLT can move whole functions
        flags += ["-Wl,--emit-relocs"]
    return flags


def ext(name, sources, libraries=()):
    return Extension(
        name, sources,
        include_dirs=["csrc/include", "csrc"],
        extra_compile_args=cflags(),
        extra_link_args=ldflags(),
        libraries=["ssl", "crypto"] + list(libraries),   # Debian's libssl (OpenSSL 3): TLS
    )


# ---- build information --------------------------------------------------------

def _version():
    with open(os.path.join(HERE, "scalws", "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        sys.exit("setup.py: no __version__ in scalws/__init__.py")
    return m.group(1)


def _git(*args):
    # --no-optional-locks: asking must not rewrite the index of someone
    # working in this tree
    return subprocess.run(["git", "--no-optional-locks", "-C", HERE, *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _commit():
    if os.environ.get("SCALWS_COMMIT"):
        return os.environ["SCALWS_COMMIT"]
    try:
        commit = _git("rev-parse", "--short=12", "HEAD")
        if _git("status", "--porcelain", "--untracked-files=no"):
            commit += "-dirty"
        return commit
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cc_version(cc):
    """('gcc 12.2.0', 'gcc version 12.2.0 (Debian 12.2.0-14)') from `CC -v`."""
    try:
        out = subprocess.run([cc, "-v"], capture_output=True, text=True).stderr
    except OSError:
        return "unknown compiler", "unknown compiler"
    for line in out.splitlines():
        m = re.match(r"^(?:.* )?(gcc|clang) version (\S+)", line)
        if m:
            return f"{m.group(1)} {m.group(2)}", line.strip()
    return os.path.basename(cc), out.strip().splitlines()[-1] if out.strip() else cc


def _cc_march(cc, march):
    """What -march the compiler uses: its default, or what `native` is here."""
    args = [cc, "-Q", "--help=target"] + (["-march=" + march] if march else [])
    try:
        out = subprocess.run(args, capture_output=True, text=True).stdout
    except OSError:
        return None
    m = re.search(r"^\s*-march=\s+(\S+)", out, re.M)
    return m.group(1) if m else None


def march_description(cc):
    march = os.environ.get("SCALWS_MARCH")
    if march:
        if march == "native":
            resolved = _cc_march(cc, march)
            return f"-march=native ({resolved})" if resolved else "-march=native"
        return "-march=" + march
    desc = "-march=" + (_cc_march(cc, None) or "default")
    if "-msse4.2" in base_cflags():
        desc += " -msse4.2"
    return desc


def _read_keys(path):
    keys = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                keys[k] = v
    return keys


def pgo_signature(cc):
    """What profiles depend on besides the sources: a profile trained with one
    of these different does not fit (or fits only in part, which gcc does not
    always notice)."""
    import Cython
    env = {k: os.environ.get(k, "") for k in ("CC", "CFLAGS", "CPPFLAGS")}
    return {
        "cc": _cc_version(cc)[1],
        "flags": " ".join(base_cflags()),
        "march": march_description(cc),
        "env": " ".join(f"{k}={v!r}" for k, v in env.items()),
        "python": f"{sys.implementation.name} {sys.version.split()[0]} "
                  f"{sysconfig.get_config_var('INCLUDEPY')}",
        "cython": Cython.__version__,
        "sources": _sources_hash(),
    }


def _sources_hash():
    """sha256 over what the modules are compiled from: the C and generated
    Cython sources and every header of ours (the commit alone would miss an
    uncommitted change, and say nothing in a tree without .git)."""
    files = set()
    for e in extensions:
        files.update(e.sources)
    for top in ("csrc", os.path.join("scalws", "includes")):
        for folder, _, names in os.walk(os.path.join(HERE, top)):
            files.update(os.path.relpath(os.path.join(folder, n), HERE)
                         for n in names if n.endswith((".h", ".pxd")))
    h = hashlib.sha256()
    for rel in sorted(files):
        with open(os.path.join(HERE, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _gcda_name(obj):
    """The .gcda gcc writes for object `obj` under -fprofile-dir with
    -fprofile-prefix-path=HERE: the object's path relative to HERE (absolute
    when outside it), '/' as '#', '.gcda' for the suffix."""
    path = os.path.abspath(obj)
    if path.startswith(HERE + os.sep):
        path = path[len(HERE) + 1:]
    return os.path.splitext(path)[0].replace(os.sep, "#") + ".gcda"


def _training_info():
    s = _read_keys(PGO_STAMP)
    return (f"on: trained at commit {s.get('commit', 'unknown')} on "
            f"{s.get('scenarios', '?')} ({s.get('duration', '?')} s each)")


def _bolt_info(bolt):
    if bolt == "instrument":
        return "instrumented (training build)"
    if bolt == "use":
        s = _read_keys(BOLT_STAMP) if os.path.exists(BOLT_STAMP) else {}
        return (f"on: trained at commit {s.get('commit', 'unknown')} on "
                f"{s.get('scenarios', '?')} ({s.get('duration', '?')} s each)")
    return "off"


def write_buildinfo(paths, pgo, cc):
    if pgo == "use":
        state = _training_info()
    elif pgo == "gen":
        state = "gen (instrumented training build)"
    else:
        state = "off"
    text = ("# Generated by setup.py for `scalwsd --version`: DO NOT EDIT (not in git).\n"
            f"VERSION = {_version()!r}\n"
            f"COMMIT = {_commit()!r}\n"
            f"PGO = {state!r}\n"
            f"BOLT = {_bolt_info(_bolt_mode())!r}\n"
            f"MARCH = {march_description(cc)!r}\n"
            f"CC = {_cc_version(cc)[0]!r}\n")
    for path in paths:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue      # untouched: nothing that imports it goes stale
        except OSError:
            pass
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def _parallel_compile(self, sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                      extra_preargs=None, extra_postargs=None, depends=None):
    """distutils' CCompiler.compile with the objects compiled side by side
    (it compiles one module's sources one after another: the engine's 66
    files took 41 s of one core, Cython's engine.c alone 15 s of them). The
    sources go in their order, the longest first (engine.c); an error
    raises as it would have."""
    from concurrent.futures import ThreadPoolExecutor
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs)
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)

    def one(obj):
        src, ext = build[obj]
        self._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

    with ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
        list(pool.map(one, [o for o in objects if o in build]))
    return objects


class BuildExt(build_ext):
    """build_ext that checks PGO profiles, writes scalws/_buildinfo.py, and
    rebuilds a module whose flags changed since its last build."""

    def run(self):
        # setuptools clears `inplace` while it builds (then copies the
        # modules into the checkout): remember what was asked.
        self._in_place = bool(self.inplace)
        super().run()

    def build_extensions(self):
        self.compiler.compile = _parallel_compile.__get__(self.compiler)
        cc = self.compiler.compiler_so[0]
        if os.path.basename(cc) == "ccache":
            cc = self.compiler.compiler_so[1]
        pgo = _pgo_mode()
        objects = {}     # gcda name -> source, for every object of every module
        for e in self.extensions:
            objs = self.compiler.object_filenames(e.sources, output_dir=self.build_temp)
            for src, obj in zip(e.sources, objs):
                objects[_gcda_name(obj)] = src
        if pgo == "use":
            self._check_profiles(cc, objects)
        if _bolt_mode() == "use":
            for name in BOLT_MODULES:
                if not os.path.isfile(_bolt_profile(name)):
                    sys.exit(f"setup.py: SCALWS_BOLT=use: no BOLT profile "
                             f"{os.path.relpath(_bolt_profile(name), HERE)}: make it with "
                             "tools/pgo-build.sh --bolt (docs/operations.md)")
        elif pgo == "gen":
            # A new training build: profiles of an earlier one would not
            # merge with its counters (libgcov skips them with a message).
            os.makedirs(PGO_DIR, exist_ok=True)
            for name in os.listdir(PGO_DIR):
                if name.endswith(".gcda") or name == "STAMP":
                    os.unlink(os.path.join(PGO_DIR, name))
            with open(PGO_GEN, "w", encoding="utf-8") as f:
                f.write("# The training build (setup.py, SCALWS_PGO=gen). tools/pgo-build.sh\n"
                        "# copies it into STAMP once the training has made every profile.\n")
                f.write(f"commit={_commit()}\n")
                for k, v in pgo_signature(cc).items():
                    f.write(f"{k}={v}\n")
                for name, src in sorted(objects.items()):
                    f.write(f"profile={name} {src}\n")
        # In place: the checkout's (what .venv imports). Into a build folder
        # (the Debian package's, pip's): there only, so a package build never
        # rewrites what the checkout's `scalwsd --version` says.
        if self._in_place:
            paths = [os.path.join(HERE, "scalws", "_buildinfo.py")]
        else:
            paths = [os.path.join(self.build_lib, "scalws", "_buildinfo.py")]
        write_buildinfo(paths, pgo, cc)
        self._forget_stale(self._flags_signature(objects if pgo == "use" else {}))
        super().build_extensions()
        self._record_flags()

    def build_extension(self, ext):
        super().build_extension(ext)
        if _bolt_mode() and ext.name in BOLT_MODULES:
            _bolt(_bolt_mode(), self.get_ext_fullpath(ext.name), ext.name)

    def _check_profiles(self, cc, objects):
        def fail(msg):
            sys.exit(f"setup.py: SCALWS_PGO=use: {msg}\n"
                     "  Make the profiles with tools/pgo-build.sh (docs/operations.md, "
                     "\"Profile-guided build\") in this folder, with the Python, -march "
                     "and flags of this build.")
        if not os.path.exists(PGO_STAMP):
            fail(f"no trained profiles: {os.path.relpath(PGO_STAMP, HERE)} does not exist")
        stamp = _read_keys(PGO_STAMP)
        mine = pgo_signature(cc)
        diff = [f"  {k}: trained with {stamp.get(k, '(not recorded)')!r}, this build has {v!r}"
                for k, v in mine.items() if stamp.get(k) != v]
        if diff:
            fail("the profiles in build/pgo/ were trained for another build:\n" + "\n".join(diff))
        missing = [f"  {src} (build/pgo/{name})" for name, src in sorted(objects.items())
                   if not os.path.isfile(os.path.join(PGO_DIR, name))]
        if missing:
            fail(f"no profile for {len(missing)} of {len(objects)} translation units "
                 f"(build folder {self.build_temp}):\n" + "\n".join(missing))

    def _flags_signature(self, profiles):
        sig = {"cflags": cflags(), "ldflags": ldflags(),
               "env": {k: os.environ.get(k, "") for k in ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS")},
               # two Pythons of one version share build/lib.<platform>-cpython-3XX
               "python": [sys.version, sysconfig.get_config_var("INCLUDEPY")]}
        if profiles:   # new profiles make a new build
            h = hashlib.sha256()
            for name in sorted(profiles):
                with open(os.path.join(PGO_DIR, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
            sig["profiles"] = h.hexdigest()
        bolt = _bolt_mode()
        if bolt:       # an instrumented engine, or one laid out by new profiles
            sig["bolt"] = bolt
            if bolt == "use":
                with open(_bolt_profile(BOLT_MODULES[0]), "rb") as f:
                    sig["bolt_profile"] = hashlib.sha256(f.read()).hexdigest()
        return hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()

    def _flags_record(self):
        path = os.path.join(self.build_temp, FLAGS_RECORD)
        try:
            with open(path, encoding="utf-8") as f:
                return path, json.load(f)
        except (OSError, ValueError):
            return path, {}

    def _forget_stale(self, sig):
        """Removes each built module whose last build had other flags, so
        distutils builds it again."""
        self._sig = sig
        _, record = self._flags_record()
        for e in self.extensions:
            out = self.get_ext_fullpath(e.name)
            key = os.path.relpath(os.path.abspath(out), HERE)
            if record.get(key) != sig and os.path.exists(out):
                os.unlink(out)

    def _record_flags(self):
        path, record = self._flags_record()
        for e in self.extensions:
            out = self.get_ext_fullpath(e.name)
            record[os.path.relpath(os.path.abspath(out), HERE)] = self._sig
        os.makedirs(self.build_temp, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)


# ---- BOLT ---------------------------------------------------------------------

def _bolt_profile(name):
    return os.path.join(BOLT_DIR, name.rsplit(".", 1)[1] + ".fdata")


def _bolt_tool(name):
    """llvm-bolt or merge-fdata by its real path: llvm-bolt finds its
    instrumentation runtime in ../lib beside the file it runs from, which
    for Debian's /usr/bin/llvm-bolt-16 link would be /usr/lib."""
    import shutil
    for cand in (os.environ.get("SCALWS_" + name.upper().replace("-", "_")),
                 name, name + "-16", f"/usr/lib/llvm-16/bin/{name}"):
        path = cand and shutil.which(cand)
        if path:
            return os.path.realpath(path)
    sys.exit(f"setup.py: SCALWS_BOLT: no {name} (Debian: apt-get install bolt-16)")


def _bolt(mode, path, name):
    """Rewrites the linked module at `path` with llvm-bolt: instrumented, or
    laid out by its profile. distutils relinks a module only when its flags
    or sources changed; one it kept is already rewritten."""
    with open(path, "rb") as f:
        if b".note.bolt_info" in f.read():
            return
    os.makedirs(BOLT_DIR, exist_ok=True)
    if mode == "instrument":
        # each process writes its own file at exit (scalws/control/profiles.py
        # makes workers do so before os._exit); tools/pgo-build.sh merges them
        args = ["-instrument", "-instrumentation-file=" + _bolt_profile(name),
                "-instrumentation-file-append-pid"]
    else:
        # BOLT's usual layout (its docs' "optimize" line): blocks and
        # functions by the profile, cold parts split off, identical
        # functions folded
        args = ["-data=" + _bolt_profile(name), "-reorder-blocks=ext-tsp",
                "-reorder-functions=hfsort", "-split-functions", "-split-all-cold",
                "-split-eh", "-icf=1", "-dyno-stats"]
    log = os.path.join(BOLT_DIR, name.rsplit(".", 1)[1] + f".{mode}.log")
    tmp = path + ".bolt"
    with open(log, "w") as out:
        r = subprocess.run([_bolt_tool("llvm-bolt"), path, "-o", tmp, *args],
                           stdout=out, stderr=subprocess.STDOUT)
    text = open(log, encoding="utf-8", errors="replace").read()
    if r.returncode != 0 or not os.path.exists(tmp):
        sys.exit(f"setup.py: SCALWS_BOLT={mode}: llvm-bolt failed on {name} "
                 f"(whole output: {log}):\n" + "\n".join(text.splitlines()[-15:]))
    if mode == "use" and "possibly stale" in text:
        os.unlink(tmp)
        sys.exit(f"setup.py: SCALWS_BOLT=use: the BOLT profile of {name} does not fit this "
                 f"build (possibly stale; {log}): train again with tools/pgo-build.sh --bolt")
    os.chmod(tmp, os.stat(path).st_mode & 0o7777)  # llvm-bolt writes its output 0777
    os.replace(tmp, path)


# The engine's C, floor by floor (docs/architecture.md, ADR 0005).
CORE_C = ["csrc/core/core.c", "csrc/core/loop.c", "csrc/core/httpdate.c", "csrc/core/filecache.c",
          "csrc/net/listen.c", "csrc/net/steer.c", "csrc/net/conn.c", "csrc/net/peer.c", "csrc/net/tls.c", "csrc/net/sni.c",
          "csrc/http/http1.c", "csrc/http/http1_chunked.c", "csrc/http/path.c", "csrc/http/httpcond.c", "csrc/http/router.c",
          "csrc/http/h1.c", "csrc/http/h1_out.c", "csrc/http/priority.c", "csrc/http/sfv.c",
          "csrc/http/h2/conn.c", "csrc/http/h2/input.c", "csrc/http/h2/request.c",
          "csrc/http/h2/resp.c", "csrc/http/h2/streams.c", "csrc/http/h2/session.c",
          "csrc/http/h2/session_recv.c", "csrc/http/h2/hpack.c", "csrc/http/h2/huffman.c",
          "csrc/http/reqcheck.c", "csrc/http/accesslog.c",
          "csrc/handlers/dispatch.c",
          "csrc/handlers/respond.c", "csrc/handlers/static.c", "csrc/handlers/autoindex.c",
          "csrc/handlers/proxy.c", "csrc/handlers/proxy_head.c", "csrc/handlers/proxy_fields.c",
          "csrc/handlers/fields.c",
          "csrc/handlers/fastcgi.c", "csrc/handlers/fastcgi_params.c",
          "csrc/handlers/fastcgi_queue.c",
          "csrc/http/fcgi.c",
          "csrc/upstream/pool.c", "csrc/upstream/balance.c", "csrc/upstream/health.c",
          "csrc/upstream/uptls.c",
          "csrc/core/sandbox.c",
          "csrc/cache/store.c", "csrc/http/cachecc.c", "csrc/handlers/cache_key.c",
          "csrc/handlers/cache_serve.c", "csrc/handlers/cache_purge.c", "csrc/handlers/cache_tee.c",
          "csrc/handlers/cache_reval.c",
          "csrc/engine.c"]

# HTTP/3 (csrc/http/h3/) with Debian's libngtcp2 (+ its GnuTLS crypto helper)
# and GnuTLS, our own HTTP/3 and QPACK on them (ADR 0034): `make build`
# installs their -dev packages when root.
# Without their headers the engine is built without it (csrc/http/h3/none.c)
# and a `quic` listener is refused with the packages' names.
H3_HEADERS = ["/usr/include/ngtcp2/ngtcp2_crypto_gnutls.h", "/usr/include/gnutls/gnutls.h"]
HAVE_H3 = all(os.path.exists(h) for h in H3_HEADERS) and os.environ.get("SCALWS_NO_H3") != "1"
H3_C = (["csrc/http/h3/quic.c", "csrc/http/h3/table.c", "csrc/http/h3/conn.c", "csrc/http/h3/request.c",
         "csrc/http/h3/resp.c", "csrc/http/h3/tls.c", "csrc/http/h3/early.c",
         "csrc/http/h3/h3sess.c", "csrc/http/h3/h3sess_recv.c", "csrc/http/h3/qpack.c"]
        if HAVE_H3 else ["csrc/http/h3/none.c"])
H3_LIBS = ["ngtcp2_crypto_gnutls", "ngtcp2", "gnutls"] if HAVE_H3 else []

# csrc/core/sandbox.c's system call names, from this machine's kernel headers.
subprocess.run([sys.executable, os.path.join(HERE, "tools", "gen_syscall_names.py")], check=True)

extensions = [
    ext("scalws.http.parser", ["scalws/http/parser.pyx", "csrc/http/http1.c",
                               "csrc/http/http1_chunked.c"]),
    ext("scalws.server.engine", ["scalws/server/engine.pyx"] + CORE_C + H3_C, H3_LIBS),
]

def _trained_c_sources(exts):
    """A `use` build compiles the C that Cython made for the training build,
    never a new one: Cython heads its C with the compile flags, which differ
    between the two builds, and the lines that moves are enough for gcc to
    refuse every profile of the file (coverage-mismatch). The .pyx has not
    changed since, or the STAMP's source hash says so."""
    for e in exts:
        for i, src in enumerate(e.sources):
            if src.endswith(".pyx"):
                c = src[:-4] + ".c"
                if not os.path.exists(os.path.join(HERE, c)):
                    sys.exit(f"setup.py: SCALWS_PGO=use: {c} (Cython's C of the training build) "
                             "is missing: train again with tools/pgo-build.sh")
                e.sources[i] = c
    return exts


if _pgo_mode() == "use" and "build_ext" in sys.argv:
    extensions = _trained_c_sources(extensions)
elif "build_ext" in sys.argv or "develop" in sys.argv or "install" in sys.argv \
        or "bdist_wheel" in sys.argv or "editable_wheel" in sys.argv:
    from Cython.Build import cythonize
    extensions = cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False,
                             "cdivision": True, "embedsignature": True},
        include_path=["scalws/includes"],
    )

# Every header: distutils rebuilds a module when one of its sources or of
# its depends is newer than it (it knows nothing of which file includes
# which), so a change to a struct in a header never leaves objects built
# with the old one. Added after cythonize, which copies an Extension's
# depends into the C it writes: a header the build generates
# (csrc/core/syscall_names.h), there in one build and not yet in another,
# would make two builds of one commit differ.
HEADERS = sorted(os.path.relpath(p, HERE)
                 for p in glob.glob(os.path.join(HERE, "csrc", "**", "*.h"), recursive=True))
for _e in extensions:
    _e.depends = list(_e.depends) + HEADERS

setup(ext_modules=extensions, cmdclass={"build_ext": BuildExt})
