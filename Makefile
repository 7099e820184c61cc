# plugflow's front doors. Each target installs what is missing (Debian packages, .venv)
# and builds incrementally into build/.
#   make build   build everything and install the Python package into .venv
#   make test    GoogleTest suites + pytest (exits non-zero on any failure)
#   make demo    the main job (examples/)
#   make bench   benchmarks against PyTorch in the same run
#   make test-sanitize  ASan + UBSan build (build-sanitize/) running the GoogleTest suites and a
#                pytest subset (tests/sanitize/run.sh; g++ ships the sanitizer runtimes)
#   make fuzz    randomized differential test against PyTorch, a new seed each run
#                (FUZZ_SEED=n to replay a run, FUZZ_CALLS, FUZZ_SECONDS to bound it)
SHELL := /bin/bash
VENV := .venv
PY := $(CURDIR)/$(VENV)/bin/python
BUILD := build
JOBS ?= $(shell nproc)
export PATH := /usr/local/cuda/bin:$(PATH)

APT_PACKAGES := meson ninja-build g++ pkg-config cmake pybind11-dev libyaml-cpp-dev libboost-dev \
  libboost-filesystem-dev libgtest-dev libdnnl-dev libopenblas-dev libopenblas0-pthread libgloo-dev \
  python3-dev python3-venv python3-yaml python3-numpy python3-pytest python3-pytest-xdist python3-torch \
  python3-torchvision python3-sklearn python3-tqdm python3-matplotlib

.PHONY: all deps venv build test test-cpp test-python test-sanitize demo demo-ddp bench fuzz clean

all: build

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

$(VENV)/bin/python:
	/usr/bin/python3 -m venv --system-site-packages $(VENV)

venv: deps $(VENV)/bin/python

$(BUILD)/build.ninja: | venv
	SITE=$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("platlib"))'); \
	meson setup $(BUILD) --prefix=$(CURDIR)/$(VENV) -Dpython_dir=$$SITE

build: venv $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)
	meson install -C $(BUILD) --quiet --no-rebuild >/dev/null

test-cpp: build
	meson test -C $(BUILD) --no-rebuild --print-errorlogs --num-processes $(JOBS)

test-python: build
	cd tests/python && $(PY) -m pytest -q -n $(JOBS) -p no:cacheprovider .

test: build
	@rc=0; $(MAKE) --no-print-directory test-cpp || rc=1; $(MAKE) --no-print-directory test-python || rc=1; exit $$rc

test-sanitize: venv
	JOBS=$(JOBS) tests/sanitize/run.sh

DEMO_ARGS ?= --config configs/cpu.yaml
demo: build
	$(PY) examples/train_digits.py $(DEMO_ARGS)

# The demo as 2 data-parallel processes (plugflow.distributed.run, DistributedDataParallel).
demo-ddp: build
	$(PY) -m plugflow.distributed.run --nproc-per-node 2 --standalone examples/train_digits.py $(DEMO_DDP_ARGS)

bench: build
	$(PY) benchmarks/run.py
	$(PY) benchmarks/ddp.py

FUZZ_SEED ?=
FUZZ_CALLS ?= 50000
FUZZ_SECONDS ?=
fuzz: build
	cd tests/python && $(PY) fuzz_harness.py --calls $(FUZZ_CALLS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) \
	  $(if $(FUZZ_SECONDS),--seconds $(FUZZ_SECONDS))

clean:
	rm -rf $(BUILD) build-sanitize
