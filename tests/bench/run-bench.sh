#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Run the sattn benchmark on an existing (release) build directory:
# the core and element figures from sattn-bench, then the peers side by
# side with sattn (peers.py: PyTorch recomputing windows, PyTorch and ONNX
# Runtime on the hop's queries only, PyTorch with a KV cache, ONNX Runtime
# on whole windows; the encoder layer; the per-window recogniser at batch
# 1 and 64; the shipped recogniser at batch 1 and 64; the recogniser with
# threads=1 and 2), the live streams per core of the shipped recogniser
# (streams-table.py), and the naive PyTorch baseline on W1-W4.
#   tests/bench/run-bench.sh <build-dir> [sattn-bench options, e.g. --quick]
# Builds nothing.  ONNX Runtime (onnxruntime-node 1.30.0, its CPU build)
# is installed here, for the bench only, into <build-dir>/bench-peers/ort
# with npm (node and npm from Debian's nodejs/npm when missing);
# SATTN_BENCH_NO_ORT=1 leaves its peers out.  Set SATTN_BENCH_KEEP=1 to
# keep the working directory (JSON lines, dumped inputs/weights/outputs,
# ONNX exports).
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

# OpenBLAS 0.3.21 (Debian 12) does not know recent CPUs (e.g. family 6
# model 207) and falls back to its generic "Prescott" SSE3 kernels, several
# times slower than the AVX2/AVX-512 ones: the sgemm roofline and every
# BLAS call of sattn and of PyTorch (which uses the same OpenBLAS) would be
# measured on the wrong kernels.  Select the right ones explicitly, for
# both sides alike, unless the caller chose or asked to keep the default.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "${SATTN_BENCH_KEEP_BLAS:-0}" != 1 ]; then
  blas_core=$("$bench" --blas-info 2>/dev/null || true)
  case "$blas_core" in
    Prescott|Core2|Katmai|Coppermine|Northwood|Banias|Unknown|"")
      flags=$(grep -m 1 '^flags' /proc/cpuinfo || true)
      want=
      case " $flags " in
        *" avx512f "*" avx512bw "*|*" avx512bw "*" avx512f "*) want=SkylakeX ;;
        *" avx2 "*) want=Haswell ;;
      esac
      if [ -n "$want" ]; then
        echo "note: OpenBLAS picked its generic '$blas_core' kernels for this CPU; using OPENBLAS_CORETYPE=$want for sattn and PyTorch alike (SATTN_BENCH_KEEP_BLAS=1 keeps '$blas_core')"
        export OPENBLAS_CORETYPE=$want
      fi
      ;;
  esac
fi

# Pin everything (sattn-bench, its pipeline threads, PyTorch) to one CPU:
# the core-alone and pipeline measurements, and sattn and PyTorch, then run
# on the same CPU, so that what else runs on a CPU of a shared machine
# cannot favour one side.  SATTN_BENCH_CPU=N picks the CPU, =none disables.
pin=
cpu=${SATTN_BENCH_CPU:-}
if [ "$cpu" != none ] && command -v taskset >/dev/null 2>&1; then
  if [ -z "$cpu" ]; then
    # the highest-numbered CPU this process may use (CPU 0 usually takes
    # more of the interrupts)
    cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
      tr ',' '\n' | sed 's/.*-//' | sort -n | tail -n 1)
  fi
  if [ -n "$cpu" ] && taskset -c "$cpu" true 2>/dev/null; then
    pin="taskset -c $cpu"
  fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sattn-bench.XXXXXX")
if [ "${SATTN_BENCH_KEEP:-0}" = 1 ]; then
  echo "working directory kept: $work"
else
  trap 'rm -rf "$work"' EXIT
  trap 'exit 130' HUP INT PIPE TERM
fi

quick=
for a in "$@"; do
  [ "$a" = --quick ] && quick=--quick
done

echo "== sattn-bench ($(uname -m), $(nproc) CPU(s): $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1))"
[ -n "$pin" ] && echo "pinned to CPU $cpu (SATTN_BENCH_CPU=none to disable)"
echo "\$ $pin $bench --json $work/sattn.jsonl --dump $work/dump $*"
status=0
$pin "$bench" --json "$work/sattn.jsonl" --dump "$work/dump" "$@" || status=$?

echo
echo "== Worker threads: threads=1 vs threads=2 on W1 and W3"
# Not pinned: two threads need two CPUs.
echo "\$ $bench --threads-scaling $*"
"$bench" --threads-scaling "$@" || status=$?

echo
echo "== FMA peak: every workload as a fraction of it, threads=1 and 2, AVX-512 and AVX2"
# Not pinned: the two-thread peak and threads=2 need two CPUs.
echo "\$ $bench --peak $*"
"$bench" --peak "$@" || status=$?

echo
echo "== Observability cost (bus messages, attention map) on W1"
if command -v gst-launch-1.0 >/dev/null 2>&1 && [ -x /usr/bin/time ]; then
  if [ -n "$quick" ]; then obs_args="2 1"; else obs_args="10 9"; fi
  # Not pinned: the map pad's thread and the streaming thread squeezed on
  # one CPU measured scheduling more than work.
  echo "\$ $here/obs-cost.sh $build $obs_args"
  # shellcheck disable=SC2086  # two numbers
  "$here/obs-cost.sh" "$build" $obs_args || status=$?
else
  echo "gst-launch-1.0 or /usr/bin/time missing: skipped."
fi

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

echo
echo "== Peers side by side: PyTorch (naive, last-hop, KV cache) and ONNX Runtime 1.30 (whole window, last-hop; batch 1 and 64)"
# ONNX Runtime for the bench only: onnxruntime-node's package brings its
# CPU library; --ignore-scripts skips its install script, which only
# fetches GPU parts.  Never a test or runtime dependency.
ort_dir="$build/bench-peers/ort"
if [ "${SATTN_BENCH_NO_ORT:-0}" = 1 ]; then
  echo "SATTN_BENCH_NO_ORT=1: the ONNX Runtime peers are left out."
  ort_dir=
elif [ ! -d "$ort_dir/node_modules/onnxruntime-node" ]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    sudo=
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "Installing Debian packages: nodejs npm (for the ONNX Runtime peers)"
    if ! { $sudo apt-get update &&
           $sudo env DEBIAN_FRONTEND=noninteractive \
             apt-get install -y --no-install-recommends nodejs npm; }; then
      echo "could not install nodejs and npm"
    fi
  fi
  mkdir -p "$ort_dir"
  echo "\$ (cd $ort_dir && npm install --ignore-scripts onnxruntime-node@1.30.0)"
  if ! (cd "$ort_dir" && npm install --ignore-scripts --no-audit --no-fund \
          --loglevel=error onnxruntime-node@1.30.0); then
    echo "npm install failed: the ONNX Runtime peers are left out."
    ort_dir=
  fi
fi
if [ -z "$py" ]; then
  echo "PyTorch not found (install Debian's python3-torch): the peers are skipped."
elif [ ! -s "$work/sattn.jsonl" ]; then
  echo "no figures from sattn-bench: the peers are skipped."
else
  echo "\$ $pin $py $here/peers.py --bench $bench --ort $ort_dir --work $work/peers --sattn-json $work/sattn.jsonl $quick"
  $pin "$py" "$here/peers.py" --bench "$bench" ${ort_dir:+--ort "$ort_dir"} \
    --work "$work/peers" --sattn-json "$work/sattn.jsonl" $quick || status=$?
fi

echo
echo "== Per-window recogniser: threads=1 vs threads=2 (outputs compared byte for byte)"
# Not pinned: two threads need two CPUs.  The model is the file peers.py
# wrote for its peers.
rec="$work/peers/recogniser.safetensors"
if [ -s "$rec" ]; then
  echo "\$ $bench --whole $rec --threads-scaling $*"
  "$bench" --whole "$rec" --threads-scaling "$@" || status=$?
else
  echo "no recogniser file from peers.py: skipped."
fi

echo
echo "== Live streams per core: the shipped recogniser at 1, 16 and 64 real-time streams (pipelines and branches, exact and fast)"
# Pinned to one CPU: "per core".  No PyTorch needed.
streams_bin="$build/tests/bench/sattn-streams"
shipped="$here/../../examples/recognizer/recognizer.safetensors"
if [ -x "$streams_bin" ] && [ -s "$shipped" ]; then
  echo "\$ $here/streams-table.py --streams-bin $streams_bin --model $shipped ${pin:+--cpu $cpu} $quick"
  python3 "$here/streams-table.py" --streams-bin "$streams_bin" \
    --model "$shipped" ${pin:+--cpu "$cpu"} $quick || status=$?
else
  echo "sattn-streams or the shipped recogniser missing: skipped."
fi

echo
echo "== Naive peer on W1-W4: PyTorch recomputing every window (streaming and batched)"
if [ -z "$py" ]; then
  echo "PyTorch not found (install Debian's python3-torch): skipped."
elif [ ! -s "$work/sattn.jsonl" ]; then
  echo "no figures from sattn-bench: skipped."
else
  echo "\$ $pin $py $here/torch_baseline.py --sattn-json $work/sattn.jsonl --bench $bench $quick"
  $pin "$py" "$here/torch_baseline.py" --sattn-json "$work/sattn.jsonl" --bench "$bench" $quick || status=$?
fi
exit $status
