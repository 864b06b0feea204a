#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# launch-loop.sh [--build DIR] [--widen MS] [--bound S] [N]
#
# Runs issue 42's launch line N times (default 100):
#
#   gst-launch-1.0 -m filesrc location=in.f32 ! rawaudioparse
#     use-sink-caps=false format=pcm pcm-format=f32le num-channels=8
#     sample-rate=2000 ! sattn weights=tests/data/whole_f8_c4.safetensors
#     window=64 hop=16 output=classes ! audio/x-raw ! fakesink
#
# output=classes gives other/tensors only, so sattn must refuse, and
# refuse in gst_element_set_state (READY -> PAUSED): an error posted from
# the streaming thread while gst-launch-1.0 starts its main loop hangs
# it now and then (tests/element/slow-main-loop.c says how).  Each run
# must end within S seconds (default 10) with a non-zero status, sattn's
# one error and "Failed to set pipeline to PAUSED".  A run still going
# then is a hang: "HANG:", every thread's backtrace (gdb), killed
# (tests/common/run-bounded.sh).
#
# --widen MS preloads slow-main-loop.so (built in DIR/tests/element): the
# main loop starts MS ms late on every run, so an error that is not
# synchronous hangs every run instead of about one in twenty.  A run of
# the same line with other/tensors downstream checks first that the
# module is loaded and delays the loop.
#
# Prints the runs, the hangs, the wrong results and how long a run took
# (gst-launch-1.0 from start to exit: median, 99th percentile, max, in
# ms); exits 1 if any run hung or went wrong.  The build tree: DIR, else
# SATTN_BUILD_ROOT, else ./build (its plugin only, and a registry of its
# own, unless GST_PLUGIN_PATH_1_0 is already set, as meson test sets it).
set -u

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${SATTN_BUILD_ROOT:-$top/build}
widen=
bound=10
n=100
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --widen) widen=$2; shift 2 ;;
    --bound) bound=$2; shift 2 ;;
    -h|--help) sed -n '3,33p' "$0"; exit 0 ;;
    *) n=$1; shift ;;
  esac
done
build=$(cd "$build" && pwd) || exit 2

if [ -z "${GST_PLUGIN_PATH_1_0:-}" ]; then
  sys=$(pkg-config --variable=pluginsdir gstreamer-1.0 2>/dev/null || true)
  export GST_PLUGIN_SYSTEM_PATH_1_0=
  export GST_PLUGIN_PATH_1_0=$build/plugin:$sys
  export GST_REGISTRY_1_0=$build/tests/element/registry-launch-loop.bin
fi
bounded=$top/tests/common/run-bounded.sh
weights=$top/tests/data/whole_f8_c4.safetensors
tmp=$(mktemp -d "${TMPDIR:-/tmp}/launch-loop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# 1600 frames of 8 channels (they never flow: the refusal comes first)
head -c $((1600 * 8 * 4)) /dev/zero >"$tmp/in.f32"

preload=
if [ -n "$widen" ]; then
  preload=$build/tests/element/libsattn-slow-main-loop.so
  if [ ! -f "$preload" ]; then
    echo "launch-loop: $preload is not built" >&2
    exit 2
  fi
fi

# launch SINK...: the issue's line with SINK downstream, in $tmp, under
# run-bounded.sh; its output in $tmp/out, its status in $rc.
launch () {
  local pre=()
  [ -n "$preload" ] && pre=(env "LD_PRELOAD=$preload" \
    "SATTN_SLOW_MAIN_LOOP_MS=$widen")
  (cd "$tmp" && "$bounded" "$bound" "${pre[@]}" gst-launch-1.0 -m \
    filesrc location=in.f32 ! rawaudioparse use-sink-caps=false format=pcm \
    pcm-format=f32le num-channels=8 sample-rate=2000 ! \
    sattn "weights=$weights" window=64 hop=16 output=classes ! "$@") \
    >"$tmp/out" 2>&1
  rc=$?
}

if [ -n "$widen" ]; then
  launch other/tensors ! fakesink
  if [ "$rc" -ne 0 ] || ! grep -q "^slow-main-loop: g_main_loop_run waits" \
      "$tmp/out"; then
    echo "launch-loop: the preloaded module did not delay the main loop" \
      "of a line that runs (status $rc):" >&2
    cat "$tmp/out" >&2
    exit 1
  fi
fi

hangs=0 wrong=0
: >"$tmp/ms"
for i in $(seq 1 "$n"); do
  t0=$(date +%s%N)
  launch audio/x-raw ! fakesink
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 )) >>"$tmp/ms"
  why=
  if [ "$rc" -eq 124 ]; then
    hangs=$((hangs + 1))
    why="hang"
  elif [ "$rc" -eq 0 ]; then
    why="status 0"
  elif [ "$(grep -c '^ERROR: from element .*GstSattn:sattn0: Downstream takes none of the output: output=classes gives class probabilities as other/tensors only' "$tmp/out")" -ne 1 ] \
      || [ "$(grep -c '^ERROR: from element' "$tmp/out")" -ne 1 ]; then
    why="not exactly one error, sattn's"
  elif ! grep -q "^Failed to set pipeline to PAUSED" "$tmp/out"; then
    why="not refused by the state change"
  fi
  if [ -n "$why" ]; then
    [ "$why" = hang ] || wrong=$((wrong + 1))
    echo "launch-loop: run $i: $why (status $rc):"
    sed 's/^/  /' "$tmp/out"
  fi
done

sort -n "$tmp/ms" >"$tmp/sorted"
pick () {  # pick FRACTION: that quantile of the sorted times
  awk -v f="$1" '{ v[NR] = $1 } END { i = int(f * NR + 0.999999);
    if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }' "$tmp/sorted"
}
echo "launch-loop: $n runs${widen:+ (main loop started $widen ms late)}:" \
  "$hangs hangs, $wrong wrong; gst-launch-1.0 ended after median" \
  "$(pick 0.5) ms, 99th percentile $(pick 0.99) ms, max $(pick 1) ms"
[ "$hangs" -eq 0 ] && [ "$wrong" -eq 0 ]
