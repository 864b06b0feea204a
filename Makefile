# SPDX-License-Identifier: LGPL-2.1-or-later
# sattn — one-command entry points.
#
#   make demo        install what the demo needs, build, run the demo:
#                    sensor features, then live modulation recognition
#                    with the trained model (examples/recognizer/demo.py)
#   make deps        install every Debian package (demo, tests, examples)
#   make test        install what is missing, build, run every test
#   make test-asan   the same under AddressSanitizer + UBSan (build-asan/)
#   make test-tsan   the same under ThreadSanitizer (build-tsan/)
#   make seed        the scaled-vs-unscaled softmax experiment (core only)
#   make install-check  meson install into a scratch prefix, build
#                    examples/use-library.c there with pkg-config alone and
#                    run it (part of make test too: suite 'install')
#   make bench       release build (build-release/) + the benchmark script
#                    (then tests/bench/builds.sh: the release, Debian-flags
#                    and default builds side by side, in build-bench/):
#                    sattn's figures and its peers side by side (PyTorch
#                    naive, last-hop and KV cache; ONNX Runtime 1.30,
#                    which the script installs with npm into
#                    build-release/bench-peers/, for the bench only)
#   make soak        release build + 10^8 frames of a W1-like stream through
#                    the element (SOAK_FRAMES=...; not in CI, ~10+ minutes),
#                    then one weights swap storm under valgrind (0 bytes
#                    definitely lost, or it fails)
#   make fuzz-stream SECONDS=600 [SEED=n]
#                    the element's stream fuzzer for that long (new seeds
#                    each run unless SEED is given)
#   make fuzz SECONDS=60
#                    the weights reader's libFuzzer target for that long
#                    (tests/fuzz/run-fuzz.sh into build-fuzz/, as CI runs it)
#   make package-check
#                    build the Debian packages (debian/) with
#                    dpkg-buildpackage into build-deb/, run lintian, install
#                    them into a clean root (a throwaway overlay of /) and
#                    use them there (tests/package/package-check.sh; not in
#                    CI, a few minutes)
#   make clean       remove the build directories and demo output
#
# MESON_ARGS is passed to `meson setup` (and to `meson configure` when the
# build directory exists), e.g. `make test MESON_ARGS=--werror`.

SHELL := /bin/bash

BUILD         ?= build
BUILD_ASAN    ?= build-asan
BUILD_TSAN    ?= build-tsan
BUILD_RELEASE ?= build-release
DEMO_OUT      ?= out/demo
MESON_ARGS    ?=
TEST_ARGS     ?=
BENCH_ARGS    ?=
SOAK_FRAMES   ?= 100000000
JOBS          ?= $(shell nproc 2>/dev/null || echo 2)
# The Debian interpreter (python3-numpy, python3-gi), not whatever python3
# comes first in PATH.
PYTHON        ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)

# Debian 12 packages.  What `make demo` needs: the toolchain, BLAS,
# GLib/json-glib (weights reader), GStreamer 1.22 with the base plugins
# (filesrc, rawaudioparse, filesink) and python3-numpy (the demo's signal,
# I/Q and summary scripts; no PyTorch or matplotlib).
DEMO_PACKAGES := build-essential meson ninja-build pkg-config \
	libopenblas-dev libglib2.0-dev libjson-glib-dev \
	libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev \
	gstreamer1.0-tools gstreamer1.0-plugins-base python3 python3-numpy

# Everything (`make deps`, the tests; CI installs both lists): the demo's,
# plus the good and bad plugins (gdppay/gdpdepay and srtsrc/srtsink for the
# scale-out tests, which read command lines with ps from procps),
# Python with GStreamer bindings, clang for the fuzzers,
# torch/matplotlib for the parity fixtures, the Python example and plots,
# scipy for the recogniser's evaluation generator (examples/recognizer/
# evalgen.py), clang-format and indent for scripts/format.sh, gdb for the
# backtraces of every thread a test that hangs prints (tests/common/
# watchdog.c, run-bounded.sh, tests/python/common.py's run_bounded), and
# the MQTT broker, its clients and the Python client (examples/sattn_mqtt.py;
# the scale-out tests start their own mosquitto on 127.0.0.1 with a password
# file and a certificate that openssl makes at test time).
DEB_PACKAGES := $(DEMO_PACKAGES) \
	gstreamer1.0-plugins-good gstreamer1.0-plugins-bad \
	python3-gi python3-gst-1.0 gir1.2-gstreamer-1.0 \
	clang libclang-rt-14-dev python3-torch python3-matplotlib time procps \
	clang-format indent gdb python3-onnx python3-scipy \
	mosquitto mosquitto-clients python3-paho-mqtt openssl

# Debian's packaging tools, for `make package-check` only (CI builds no
# packages, so they are not in DEB_PACKAGES).
PACKAGE_PACKAGES := dpkg-dev debhelper dh-python lintian fakeroot
BUILD_DEB     ?= build-deb

comma := ,

SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

# Targets run one after the other (deps before build before test); ninja
# and meson test parallelise inside.
.NOTPARALLEL:

.PHONY: all deps deps-demo build build-asan build-tsan build-release test test-asan \
	test-tsan demo seed bench soak fuzz-stream fuzz clean install-check \
	package-check

all: build

# $(call install_missing,PACKAGES): apt-get install those not installed.
define install_missing
	@missing=""; \
	for p in $(1); do \
	  dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null \
	    | grep -q '^install ok installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call install_missing,$(DEB_PACKAGES))

deps-demo:
	$(call install_missing,$(DEMO_PACKAGES))

# $(call meson_dir,DIR,EXTRA-ARGS): configure DIR if it has no build.ninja
# yet; otherwise apply EXTRA-ARGS + MESON_ARGS to it (if any).
define meson_dir
	@if [ ! -f $(1)/build.ninja ]; then \
	  meson setup $(1) $(2) $(MESON_ARGS); \
	elif [ -n "$(strip $(2) $(MESON_ARGS))" ]; then \
	  meson configure $(1) $(2) $(MESON_ARGS); \
	fi
	ninja -C $(1) -j $(JOBS)
endef

# $(call meson_test,DIR): run the suite, then print "N passed, N failed".
define meson_test
	@rm -f $(1)/meson-logs/testlog.json; rc=0; \
	meson test -C $(1) --print-errorlogs --num-processes $(JOBS) \
	  $(TEST_ARGS) || rc=$$?; \
	$(PYTHON) scripts/test-summary.py --runner-status $$rc \
	  $(1)/meson-logs/testlog.json || rc=1; \
	exit $$rc
endef

build:
	$(call meson_dir,$(BUILD),)

build-asan:
	$(call meson_dir,$(BUILD_ASAN),-Db_sanitize=address$(comma)undefined -Db_lundef=false)

build-tsan:
	$(call meson_dir,$(BUILD_TSAN),-Db_sanitize=thread -Db_lundef=false)

build-release:
	$(call meson_dir,$(BUILD_RELEASE),--buildtype=release)

test: deps build
	$(call meson_test,$(BUILD))

test-asan: deps build-asan
	$(call meson_test,$(BUILD_ASAN))

test-tsan: deps build-tsan
	$(call meson_test,$(BUILD_TSAN))

demo: deps-demo build
	PYTHON=$(PYTHON) examples/demo.sh $(BUILD) $(DEMO_OUT)

seed: deps build
	$(BUILD)/examples/seed-experiment

install-check: deps build
	meson test -C $(BUILD) --suite install --print-errorlogs

bench: deps build-release
	@if [ -f tests/bench/run-bench.sh ]; then \
	  sh tests/bench/run-bench.sh $(BUILD_RELEASE) $(BENCH_ARGS); \
	else \
	  echo "tests/bench/run-bench.sh does not exist: nothing to run"; \
	fi
	sh tests/bench/builds.sh

# The soak's own tools (not in CI, so not in DEB_PACKAGES).
SOAK_PACKAGES := valgrind
SOAK_STORM_SETS ?= 200
# A leak that is certain fails the run; GLib's type system and
# GStreamer's registry keep memory "possibly" or "still reachable" by
# design, which is reported, not failed.
VALGRIND      ?= valgrind --leak-check=full --show-leak-kinds=definite \
	--errors-for-leak-kinds=definite --error-exitcode=1 --num-callers=30

# The element from build-release/plugin plus the system's plugins, with a
# registry of its own (as the test suite runs it); then the weights swap
# storm (tests/element/test-element-swap-storm.c) under valgrind, with our
# plugin alone, GSlice off and in one process (CK_FORK=no).
soak: deps build-release
	$(call install_missing,$(SOAK_PACKAGES))
	GST_PLUGIN_SYSTEM_PATH_1_0= \
	GST_PLUGIN_PATH_1_0=$(BUILD_RELEASE)/plugin:$$(pkg-config --variable=pluginsdir gstreamer-1.0) \
	GST_REGISTRY_1_0=$(BUILD_RELEASE)/soak-registry.bin \
	  $(BUILD_RELEASE)/tests/soak/sattn-soak stream $(SOAK_FRAMES)
	GST_PLUGIN_SYSTEM_PATH_1_0= \
	GST_PLUGIN_PATH_1_0=$(BUILD_RELEASE)/plugin \
	GST_REGISTRY_1_0=$(BUILD_RELEASE)/soak-storm-registry.bin \
	GST_REGISTRY_FORK=no CK_FORK=no G_SLICE=always-malloc G_DEBUG=gc-friendly \
	SATTN_STORM_SETS=$(SOAK_STORM_SETS) \
	  $(VALGRIND) $(BUILD_RELEASE)/tests/element/test-element-swap-storm

# Episodes of the stream fuzzer for SECONDS seconds (the test suite runs
# a fixed 10,000); a failure prints its seed and a one-line reproducer.
SECONDS_FUZZ := $(if $(SECONDS),$(SECONDS),600)
SEED         ?= $(shell date +%s)

fuzz-stream: deps build
	SATTN_FUZZ_SECONDS=$(SECONDS_FUZZ) SATTN_FUZZ_SEED=$(SEED) \
	  meson test -C $(BUILD) element-fuzz-stream --timeout-multiplier 0 \
	  --print-errorlogs --verbose

# The weights reader's libFuzzer target for SECONDS seconds (default 60).
fuzz: deps
	sh tests/fuzz/run-fuzz.sh $(if $(SECONDS),$(SECONDS),60) $(CURDIR)/build-fuzz

# The packages' Build-Depends are in DEB_PACKAGES.
package-check: deps
	$(call install_missing,$(PACKAGE_PACKAGES))
	sh tests/package/package-check.sh $(CURDIR) $(BUILD_DEB)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_RELEASE) build-fuzz $(BUILD_DEB) \
	  build-bench out
