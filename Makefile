# ScalWS — the two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
SYSPKGS := curl wrk nghttp2-client php-fpm nginx-light nodejs strace gcc make libssl-dev openssl testssl.sh iproute2
STAMP_VENV := $(VENV)/.deps-stamp

.PHONY: all build run test ctest pytest sysdeps clean bench-quick bench-deps

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP_VENV): requirements-dev.txt | $(PY)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $@

# System packages the tests and benchmarks use; installed only when root and missing.
sysdeps:
	@missing=""; for p in $(SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: missing system packages:$$missing (tests that need them fail)"; fi; \
	fi

build: $(STAMP_VENV)
	$(PY) setup.py -q build_ext --inplace -j 2
	$(PIP) install -q --no-deps --no-build-isolation -e .

run: build
	$(VENV)/bin/scalwsd

ctest:
	$(MAKE) -C tests/c

pytest: build
	$(PY) -m pytest -q -p no:cacheprovider tests

test: sysdeps build ctest pytest

# The other servers Debian packages, compared when present (h2o, lighttpd;
# their columns say n/a without them). uvicorn and matplotlib come with
# requirements-dev.txt, so bench/multi.sh runs whole after `make test`.
BENCH_SYSPKGS := h2o lighttpd lighttpd-mod-openssl
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

clean:
	rm -rf build *.egg-info scalws/*/*.so scalws/*/*.c tests/c/bin
