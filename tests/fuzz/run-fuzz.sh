#!/bin/sh
# Build the weights reader's libFuzzer target and run it for a bounded time.
#
#   tests/fuzz/run-fuzz.sh [SECONDS] [WORKDIR]
#
# SECONDS: fuzzing time (default 60).  WORKDIR: where the binary, the
# growing corpus and any crash artifact go (default build-fuzz/ in the
# source tree); the committed seed corpus is only read.  Builds with clang
# (CC overrides; clang-14 needs libclang-rt-14-dev), -fsanitize=fuzzer,
# address,undefined, from core/weights.c + core/status.c and GLib /
# json-glib.  Prints the executions; exits non-zero on a finding.
set -eu

secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
work=${2:-$src/build-fuzz}
cc=${CC:-}
if [ -z "$cc" ]; then
  for c in clang clang-14 clang-15 clang-16; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
if [ -z "$cc" ]; then
  echo "run-fuzz.sh: clang not found (apt install clang libclang-rt-14-dev)" >&2
  exit 2
fi
case $secs in
  ''|*[!0-9]*) echo "run-fuzz.sh: SECONDS must be a whole number" >&2; exit 2 ;;
esac

mkdir -p "$work/corpus"
# shellcheck disable=SC2046
"$cc" -g -O1 -std=gnu11 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src/include" \
  $(pkg-config --cflags glib-2.0 json-glib-1.0) \
  "$here/fuzz-weights.c" "$src/core/weights.c" "$src/core/status.c" \
  $(pkg-config --libs glib-2.0 json-glib-1.0) -lm \
  -o "$work/fuzz-weights"

log=$work/fuzz-weights.log
echo "fuzz-weights: fuzzing for ${secs} s (log: $log)"
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
"$work/fuzz-weights" \
  -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=1024 -dict="$here/safetensors.dict" \
  -print_final_stats=1 -artifact_prefix="$work/" \
  "$work/corpus" "$here/corpus" >"$log" 2>&1
rc=$?
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
peak=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
units=$(ls "$work/corpus" | wc -l)
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$log"
  echo "fuzz-weights: FINDING after ${execs:-?} executions (exit $rc);" \
       "artifacts in $work/" >&2
  exit 1
fi
echo "fuzz-weights: ${execs:-?} executions in ${secs} s, no finding" \
     "(corpus ${units} new inputs, peak RSS ${peak:-?} MB)"
