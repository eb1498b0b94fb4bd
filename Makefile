# ScalWS — the two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# What building needs (the engine's C: OpenSSL, and for HTTP/3 ngtcp2 with its
# GnuTLS helper and GnuTLS; nghttp3 for bench/h3load.c and as the tests' oracle
# of our HTTP/3 and QPACK); `make build` and `make run` install them when root.
BUILDPKGS := gcc make libssl-dev libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev libgnutls28-dev
SYSPKGS := $(BUILDPKGS) ngtcp2-client curl wrk nghttp2-client libnghttp2-dev php-fpm nginx-light nodejs strace gcc make libssl-dev openssl testssl.sh iproute2 man-db libjemalloc2 libmimalloc2.0 prometheus
STAMP_VENV := $(VENV)/.deps-stamp
STAMP_RUN  := $(VENV)/.run-deps-stamp
STAMP_EDIT := $(VENV)/.editable-stamp

.PHONY: all build build-run builddeps run test ctest pytest h2spec sysdeps clean bench-quick bench-deps debdeps deb pkgtest debtest pkg-side-by-side fuzz fuzz-deps test-sanitized \
        image imagedeps imagetest \
        cache-conformance cache-conformance-deps

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)

# What building and running need: requirements-dev.txt up to its "# Tests"
# line (as tools/pgo-build.sh reads it). `make run` installs only these; the
# test and benchmark packages come with `make test` (and `make bench-deps`).
$(STAMP_RUN): requirements-dev.txt | $(PY)
	sed -n '1,/^# Tests/p' requirements-dev.txt | grep -v '^#' > $(VENV)/run-requirements.txt
	$(PIP) install -q --disable-pip-version-check -r $(VENV)/run-requirements.txt
	touch $@

$(STAMP_VENV): requirements-dev.txt $(STAMP_RUN)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $@

# System packages the tests and benchmarks use; installed only when root and missing.
# npm is checked as a command: Debian's nodejs comes without it (package npm),
# NodeSource's nodejs includes it and conflicts with Debian's npm package.
sysdeps:
	@missing=""; for p in $(SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v kubectl >/dev/null 2>&1 || missing="$$missing kubernetes-client"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: missing system packages:$$missing (tests that need them fail)"; fi; \
	fi

build: $(STAMP_VENV) build-run

# The -dev packages the C needs, when root and missing (a fresh machine's
# `make run`); without root, setup.py builds without HTTP/3 if its headers
# are absent (a quic listener is then refused, naming the packages).
builddeps:
	@missing=""; for p in $(BUILDPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: missing build packages:$$missing"; fi; \
	fi

# The native modules (build_ext compiles only what changed, and writes
# scalws/_buildinfo.py with the commit every time) and, once per
# virtual environment or when the project's metadata changes, the editable
# install that makes .venv/bin/scalwsd: a second `make run` starts at once.
build-run: builddeps $(STAMP_RUN)
	$(PY) setup.py -q build_ext --inplace -j 2
	@if [ ! $(STAMP_EDIT) -nt pyproject.toml ] || [ ! $(STAMP_EDIT) -nt setup.py ] || \
	    [ ! -x $(VENV)/bin/scalwsd ]; then \
	  echo "$(PIP) install -q --no-deps --no-build-isolation -e ."; \
	  $(PIP) install -q --no-deps --no-build-isolation -e . && touch $(STAMP_EDIT); \
	fi

run: build-run
	$(VENV)/bin/scalwsd

# The test binaries are built side by side (each links its own sources,
# the engine's under ASan: most of ctest's time), then run one by one.
ctest:
	$(MAKE) -C tests/c -j$$(nproc) build
	$(MAKE) -C tests/c run

pytest: build cache-conformance-deps h2spec
	$(PY) -m pytest -q -p no:cacheprovider tests

# h2spec (the HTTP/2 conformance suite H2O runs in CI) from ../shared's
# source with our own main: tests/e2e/test_h2spec.py runs it against every
# HTTP/2 listener kind. Without ../shared (status 3) the test skips, saying so.
h2spec:
	@tools/build-h2spec.sh build/h2spec || { rc=$$?; [ $$rc = 3 ] || exit $$rc; \
	  echo "h2spec: ../shared/tools/h2spec is not there: tests/e2e/test_h2spec.py will skip"; }

# The http-cache-tests suite (tests/cache_conformance/README.md), exactly as
# package-lock.json pins it; without npm the e2e test that needs it skips.
CC_DIR   := tests/cache_conformance
CC_STAMP := $(CC_DIR)/node_modules/.ci-stamp
$(CC_STAMP): $(CC_DIR)/package.json $(CC_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  cd $(CC_DIR) && npm ci --ignore-scripts --no-audit --no-fund && touch node_modules/.ci-stamp; \
	else echo "npm not found: the cache conformance suite is not installed (make sysdeps as root)"; fi
cache-conformance-deps: $(CC_STAMP)

# The suite against nginx's proxy_cache and against ScalWS's cache, each in
# front of the suite's origin, then the tests whose results differ
# (results/cache-conformance/*.json; figures in tests/cache_conformance/README.md).
CC_OUT := results/cache-conformance
cache-conformance: build cache-conformance-deps
	$(PY) $(CC_DIR)/run.py --server nginx --json $(CC_OUT)/nginx.json
	$(PY) $(CC_DIR)/run.py --server scalws --json $(CC_OUT)/scalws.json
	$(PY) $(CC_DIR)/run.py --compare $(CC_OUT)/nginx.json $(CC_OUT)/scalws.json

# The package and image checks need root (debootstrap, chroot, namespaces,
# podman); CI is root. One make run: the package is built once for all.
# Its second build (repro.sh: CPU), the image (build-image.sh) and the
# check of the package in a clean root (test-deb.sh; both of these mostly
# debootstrap and the network) run side by side, the first two's output
# shown when all three are done, before the image is tested.
test: sysdeps build ctest pytest
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) imagedeps pkg-side-by-side; \
	else echo "make test: not root: the package and image checks (make pkgtest imagetest) were not run"; fi
pkg-side-by-side: deb
	@mkdir -p build; tests/pkg/repro.sh $(DEB) >build/repro.log 2>&1 & rp=$$!; \
	tools/build-image.sh $(DEB) >build/image.log 2>&1 & ip=$$!; \
	tests/pkg/test-deb.sh $(DEB); td=$$?; \
	wait $$ip; ib=$$?; cat build/image.log; wait $$rp; rr=$$?; cat build/repro.log; \
	[ $$td = 0 ] && [ $$ib = 0 ] && [ $$rr = 0 ]
	tests/pkg/test-image.sh

# libFuzzer runs of every target in tests/fuzz/ under ASan/UBSan, FUZZ_SECONDS
# each (60 by default; FUZZ="h2 priority" for some): tests/fuzz/libfuzzer.sh.
# Not part of `make test`, which runs the committed corpora (ctest).
# libclang-rt-14-dev holds the sanitizer and fuzzer runtimes clang links in:
# clang-14 only recommends it, and --no-install-recommends leaves it out.
FUZZ_SYSPKGS := clang-14 libfuzzer-14-dev libclang-rt-14-dev
fuzz-deps:
	@missing=""; for p in $(FUZZ_SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: missing system packages:$$missing"; exit 2; fi; \
	fi
fuzz: build fuzz-deps
	tests/fuzz/libfuzzer.sh

# The e2e tests against an engine built with ASan and UBSan, in a worktree
# of HEAD (this checkout's build is left alone); fails on any sanitizer
# report in a server's log. Not in `make test`: about 24 min on the 2-CPU
# box. tools/e2e-sanitized.sh [pytest args] runs a part.
test-sanitized: sysdeps
	tools/e2e-sanitized.sh

# The other servers Debian packages, compared when present (h2o, lighttpd;
# their columns say n/a without them). uvicorn and matplotlib come with
# requirements-dev.txt, so bench/multi.sh runs whole after `make test`.
BENCH_SYSPKGS := h2o lighttpd lighttpd-mod-openssl haproxy caddy
bench-deps: sysdeps $(STAMP_VENV)
	@missing=""; for p in $(BENCH_SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; fi

# Quick side-by-side pass (2 s warm-up + 5 s) on the scenarios ScalWS can run
# today (scalwsd --check-config decides); the others are listed as n/a.
bench-quick: build bench-deps
	mkdir -p results/quick
	MODE=quick SERVERS="scalws nginx" ONLY_WHERE=scalws \
	  OUT=results/quick/$$(date +%Y%m%d-%H%M%S).csv bench/run.sh

# The Debian package (debian/, ADR 0007): dist/scalws_VERSION-1_amd64.deb.
# PGO=1 first trains profiles with Debian's python (tools/pgo-build.sh) and
# builds the package with them; BOLT=1 (with PGO=1) also lays the engine out
# with llvm-bolt, trained by the same load (docs/adr/0024-bolt.md: not the
# default, it gains under 5 %); MARCH=... picks -march (both builds).
DEB_SYSPKGS := debhelper dh-python python3.11-dev python3.11-venv python3-yaml libssl-dev gcc \
               fakeroot lintian debootstrap systemd-container $(if $(filter 1,$(BOLT)),bolt-16)
DEB_VERSION = $(shell dpkg-parsechangelog -S Version)
debdeps:
	@missing=""; for p in $(DEB_SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: missing packages to build the .deb:$$missing"; exit 1; fi; \
	fi

# The package's -march: x86-64-v2 (SSE4.2, every x86-64 CPU since 2008),
# whatever CPU builds it; MARCH=... for another.
DEB_MARCH = $(or $(MARCH),x86-64-v2)
# The compiler flags debian/rules builds with; a PGO training must use the
# same (their -D_FORTIFY_SOURCE=2 changes what the profiles describe).
DEB_BUILDFLAGS = DEB_BUILD_MAINT_OPTIONS=hardening=+all DEB_CFLAGS_MAINT_APPEND=-Wno-error dpkg-buildflags --export=sh
deb: debdeps
	@if [ "$(BOLT)" = 1 ] && [ "$(PGO)" != 1 ]; then echo "BOLT=1 needs PGO=1 (BOLT is trained on the PGO build)"; exit 1; fi
	@if [ "$(PGO)" = 1 ]; then \
	  eval "$$($(DEB_BUILDFLAGS))" && \
	  tools/pgo-build.sh --python /usr/bin/python3.11 --install none --march $(DEB_MARCH) \
	    $(if $(filter 1,$(BOLT)),--bolt); fi
	$(if $(filter 1,$(PGO)),SCALWS_PGO=use) $(if $(filter 1,$(BOLT)),SCALWS_BOLT=use) \
	  SCALWS_MARCH=$(DEB_MARCH) dpkg-buildpackage -us -uc -b
	mkdir -p dist
	mv ../scalws_$(DEB_VERSION)_amd64.deb ../scalws-dbgsym_$(DEB_VERSION)_amd64.deb \
	   ../scalws_$(DEB_VERSION)_amd64.buildinfo ../scalws_$(DEB_VERSION)_amd64.changes dist/
	lintian --fail-on error --info --display-info dist/scalws_$(DEB_VERSION)_amd64.deb

# Installs, upgrades, removes and purges the package in a clean Debian 12
# root, under systemd (systemd-nspawn --boot) and under the init script
# (chroot): tests/pkg/test-deb.sh; then checks that a second build of the
# commit gives the same bytes: tests/pkg/repro.sh. Needs root.
DEB = dist/scalws_$(DEB_VERSION)_amd64.deb
pkgtest: debtest
	tests/pkg/repro.sh $(DEB)
debtest: deb
	tests/pkg/test-deb.sh $(DEB)

# The OCI image (tools/build-image.sh; docs/operations.md, "Kubernetes"):
# the package on a Debian 12 root, in podman's local store as
# localhost/scalws:VERSION and in dist/scalws_VERSION_oci.tar. imagetest runs
# it (tests/pkg/test-image.sh): read-only root, user scalws, sandboxed
# workers, probes, HUP, watch_config, TERM. runc: crun refuses this box's
# hybrid cgroup v1 layout.
IMAGE_SYSPKGS := podman runc debootstrap
imagedeps:
	@missing=""; for p in $(IMAGE_SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: missing packages to build the image:$$missing"; exit 1; fi; \
	fi
image: deb imagedeps
	tools/build-image.sh $(DEB)
imagetest: image
	tests/pkg/test-image.sh

clean:
	rm -rf build *.egg-info scalws/*/*.so scalws/*/*.c tests/c/bin

# Profile-guided build into .venv (tools/pgo-build.sh; docs/operations.md,
# "Profile-guided build"): instrumented build, training load, optimised
# build, the tests. MARCH=... picks -march, PGO_DURATION the seconds of load
# per scenario, BOLT=1 adds BOLT. `make build` afterwards goes back to the
# plain build.
PGO_DURATION ?= 10
.PHONY: pgo
pgo:
	tools/pgo-build.sh --duration $(PGO_DURATION) $(if $(MARCH),--march $(MARCH)) $(if $(filter 1,$(BOLT)),--bolt)
