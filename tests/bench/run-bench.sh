#!/bin/sh
# Run the sattn benchmark on an existing (release) build directory:
# the core and element figures from sattn-bench, then the PyTorch baseline
# on the same workloads when Debian's python3-torch is installed.
#   tests/bench/run-bench.sh <build-dir> [sattn-bench options, e.g. --quick]
# Builds nothing.  Set SATTN_BENCH_KEEP=1 to keep the working directory
# (JSON lines, dumped inputs/weights/outputs).
set -eu

if [ $# -lt 1 ]; then
  echo "usage: $0 <build-dir> [--quick] [sattn-bench options]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
bench="$build/tests/bench/sattn-bench"
if [ ! -x "$bench" ]; then
  echo "$bench not found: configure and build $build first" >&2
  exit 2
fi

# Our element from the build tree, the system's plugins, and a registry
# of our own so the user's registry is neither used nor touched.
export GST_PLUGIN_PATH="$build/plugin"
export GST_PLUGIN_PATH_1_0="$build/plugin"
export GST_REGISTRY="$build/tests/bench/registry.bin"
export GST_REGISTRY_1_0="$build/tests/bench/registry.bin"

work=$(mktemp -d "${TMPDIR:-/tmp}/sattn-bench.XXXXXX")
if [ "${SATTN_BENCH_KEEP:-0}" = 1 ]; then
  echo "working directory kept: $work"
else
  trap 'rm -rf "$work"' EXIT INT TERM
fi

quick=
for a in "$@"; do
  [ "$a" = --quick ] && quick=--quick
done

echo "== sattn-bench ($(uname -m), $(nproc) CPU(s): $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1))"
echo "\$ $bench --json $work/sattn.jsonl --dump $work/dump $*"
status=0
"$bench" --json "$work/sattn.jsonl" --dump "$work/dump" "$@" || status=$?

echo
echo "== PyTorch baseline"
# Debian's python3-torch lives in the system interpreter, which may not be
# the first python3 on PATH (e.g. under pyenv).
py=
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 &&
     "$cand" -c "import torch, numpy" >/dev/null 2>&1; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "PyTorch not found (install Debian's python3-torch): the PyTorch comparison is skipped."
elif [ ! -s "$work/sattn.jsonl" ]; then
  echo "no figures from sattn-bench: the PyTorch comparison is skipped."
else
  echo "\$ $py $here/torch_baseline.py --sattn-json $work/sattn.jsonl $quick"
  "$py" "$here/torch_baseline.py" --sattn-json "$work/sattn.jsonl" $quick || status=$?
fi
exit $status
