#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The recogniser's training, checked (make test: meson test
# recognizer-quick-train).  train.py --quick trains the small model
# (seeded, a few minutes on one core), then evaluate.py runs 1,100
# held-out windows of the project's generator (seed 4242) through the
# element and PyTorch, and fails when the element's accuracy at SNR >= 10
# dB is under FLOOR or the element and PyTorch differ (argmax on fewer
# than 99.9 % of the windows, a probability by more than 1e-5).
#
#   quick-check.sh OUT_DIR [FLOOR]
#
# Exit 77 (skipped) when the Debian python3 has no PyTorch.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$1
floor=${2:-0.35}
py=${PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "quick-check: $py cannot import torch: skipped"
  exit 77
fi
mkdir -p "$out"
start=$(date +%s)
"$py" "$here/train.py" --quick --out "$out/quick.safetensors" \
  --log "$out/train.log"
mid=$(date +%s)
"$py" "$here/evaluate.py" --model "$out/quick.safetensors" --count 1100 \
  --skip independent,sweeps,reject,cost --no-plots --out "$out" \
  --min-accuracy-10 "$floor" --check-parity
end=$(date +%s)
echo "quick-check: training $((mid - start)) s, evaluation $((end - mid)) s"
