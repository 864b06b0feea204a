#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# From PyTorch to a GStreamer pipeline, end to end.
#
# 1. PyTorch: build a small model (a linear embedding, a 2-layer
#    nn.TransformerEncoder, a linear head), train it briefly to denoise
#    multichannel sines, save it with torch.save.
# 2. export-torch-mha.py --module encoder.layers.1.self_attn: the second
#    layer's attention as safetensors (once with plain names, once with its
#    full names for weights-prefix=).
# 3. The frames that reach that attention inside the model (the output of
#    the embedding and of layer 0, window by window) are written as raw
#    float32: 8 channels, one frame of E = 16 values every 2 sample
#    periods (frame-size=2; the bytes are the frames in order).
# 4. gst-launch-1.0 filesrc ! rawaudioparse ! sattn weights=... ! filesink,
#    with output=window window=hop=N start=wait: one output frame per
#    window, all N rows.
# 5. The output is compared with PyTorch's output of the attention module
#    on the same windows (float64): PASS when
#    max-abs <= 1e-5 * (1 + max|torch|).
#
# Usage: examples/torch-to-pipeline.sh [BUILD_DIR] [WORK_DIR]
#   BUILD_DIR  the meson build directory whose plugin/ is used (default
#              ./build); the script checks that gst-inspect-1.0 finds the
#              element there and nowhere else.
#   WORK_DIR   where the files go (default: a temporary directory, removed
#              at the end).
# Exit status: 0 PASS, 1 FAIL or error, 77 skipped (no python3-torch /
# numpy, no gst-launch-1.0 or no rawaudioparse).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
if [ ! -d "$build/plugin" ]; then
  echo "torch-to-pipeline: $build/plugin does not exist (build first: meson setup $build && ninja -C $build)" >&2
  exit 1
fi
build=$(cd "$build" && pwd)
if [ -n "${2:-}" ]; then
  mkdir -p "$2"
  work=$(cd "$2" && pwd)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/sattn-torch-XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

# The build's element first, the system's plugins for filesrc,
# rawaudioparse and filesink; a registry of our own so that a cached entry
# of another sattn cannot be picked.  (meson test sets the _1_0 variants,
# which GStreamer prefers, to the same effect.)
export GST_PLUGIN_PATH="$build/plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
export GST_REGISTRY="${GST_REGISTRY:-$work/registry.bin}"

# SATTN_GST_PRELOAD: libraries preloaded into the GStreamer tools only (the
# sanitizer runtimes when the plugin is built with sanitizers).
gst () {
  if [ -n "${SATTN_GST_PRELOAD:-}" ]; then
    LD_PRELOAD="${SATTN_GST_PRELOAD}${LD_PRELOAD:+ $LD_PRELOAD}" "$@"
  else
    "$@"
  fi
}

# The Debian interpreter first: it is the one with python3-torch.
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
if ! "$python" -c "import torch, numpy" >/dev/null 2>&1; then
  echo "SKIP: $python cannot import torch and numpy (Debian: apt install python3-torch python3-numpy)"
  exit 77
fi
for tool in gst-launch-1.0 gst-inspect-1.0; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "SKIP: $tool not found (Debian: apt install gstreamer1.0-tools)"
    exit 77
  fi
done
if ! gst gst-inspect-1.0 rawaudioparse >/dev/null 2>&1; then
  echo "SKIP: rawaudioparse not found (gst-plugins-base, rawparse plugin)"
  exit 77
fi
plugin_file=$(gst gst-inspect-1.0 sattn 2>/dev/null | awk '$1 == "Filename" { print $2 }')
if [ -z "$plugin_file" ]; then
  echo "FAIL: gst-inspect-1.0 does not find the sattn element in $build/plugin" >&2
  exit 1
fi
if [ "$(readlink -f "$plugin_file")" != "$(readlink -f "$build/plugin/libgstsattn.so")" ]; then
  echo "FAIL: gst-inspect-1.0 finds sattn in $plugin_file, not in $build/plugin" >&2
  exit 1
fi
echo "element: $plugin_file"

# Geometry: frames of E = 16 values = 8 channels x frame-size 2 (with 16
# channels rawaudioparse would warn that it has no channel positions for
# them), 4 heads, windows of N = 16 frames, W = 8 windows; 16 kHz, so
# 8000 frames/s and a whole window rate of 8000 / N = 500 Hz.
E=16
CHANNELS=8
FRAME_SIZE=2
H=4
N=16
W=8
RATE=16000
MODULE=encoder.layers.1.self_attn

# ---------------------------------------------------------------- 1 + 3
"$python" - "$work" $E $H $N $W <<'PY'
import collections
import copy
import sys

import numpy as np
import torch

work, E, H, N, W = sys.argv[1], *map(int, sys.argv[2:])
torch.manual_seed(1234)


def signal(batch, n, e, gen):
    """Noisy multichannel sines, (n, batch, e): clean, noisy."""
    t = torch.arange(n, dtype=torch.float32).view(n, 1, 1)
    f = torch.rand((1, batch, e), generator=gen) * 0.4 + 0.05
    ph = torch.rand((1, batch, e), generator=gen) * 6.28
    clean = torch.sin(f * t + ph)
    return clean, clean + 0.3 * torch.randn((n, batch, e), generator=gen)


layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=2 * E,
                                         dropout=0.0)
model = torch.nn.Sequential(collections.OrderedDict([
    ("embed", torch.nn.Linear(E, E)),
    ("encoder", torch.nn.TransformerEncoder(layer, num_layers=2,
                                            enable_nested_tensor=False)),
    ("head", torch.nn.Linear(E, E)),
]))

# A short training run: denoise (batch_first=False: (N, batch, E)).
gen = torch.Generator().manual_seed(5)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
model.train()
for step in range(60):
    clean, noisy = signal(16, N, E, gen)
    loss = torch.nn.functional.mse_loss(model(noisy), clean)
    if step == 0:
        first = loss.item()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained: denoising loss %.4f -> %.4f (60 Adam steps)"
      % (first, loss.item()))
model.eval()
torch.save(model, "%s/model.pt" % work)

with torch.no_grad():
    # What reaches encoder.layers[1].self_attn inside the model, window by
    # window: norm_first=False, so its input is layer 0's output.
    _, noisy = signal(W, N, E, gen)
    x = model.encoder.layers[0](model.embed(noisy))      # (N, W, E) float32
    frames = x.permute(1, 0, 2).contiguous()            # (W, N, E)
    frames.numpy().astype("<f4").tofile("%s/in.raw" % work)

    # PyTorch's output of the submodule on the same windows, in float64
    # from the same float32 inputs.
    mha = copy.deepcopy(model.encoder.layers[1].self_attn).double().eval()
    x64 = frames.double().permute(1, 0, 2)              # (N, W, E)
    ref, _ = mha(x64, x64, x64, need_weights=False)
    ref.permute(1, 0, 2).contiguous().numpy().astype("<f8").tofile(
        "%s/ref.f64" % work)
print("input: %d windows x %d frames x %d values -> in.raw; PyTorch's "
      "output of the attention -> ref.f64" % (W, N, E))
PY

# ---------------------------------------------------------------------- 2
"$python" "$here/export-torch-mha.py" --module $MODULE \
  "$work/model.pt" "$work/attn.safetensors"
"$python" "$here/export-torch-mha.py" --module $MODULE --keep-prefix \
  "$work/model.pt" "$work/attn-prefixed.safetensors"

# ---------------------------------------------------------------------- 4
src="filesrc location=$work/in.raw ! rawaudioparse use-sink-caps=false format=pcm pcm-format=f32le sample-rate=$RATE num-channels=$CHANNELS"
geom="frame-size=$FRAME_SIZE heads=$H output=window window=$N hop=$N start=wait"
run () {
  local out=$1
  shift
  echo "+ gst-launch-1.0 -q $src ! sattn $* $geom ! filesink location=$out"
  # shellcheck disable=SC2086  # the launch line is split into words on purpose
  gst gst-launch-1.0 -q $src ! sattn "$@" $geom ! filesink location="$out"
}
run "$work/out.raw" weights="$work/attn.safetensors"
run "$work/out-prefixed.raw" weights="$work/attn-prefixed.safetensors" \
  weights-prefix=$MODULE.

# ---------------------------------------------------------------------- 5
"$python" - "$work" $E $N $W <<'PY'
import sys

import numpy as np

work, E, N, W = sys.argv[1], *map(int, sys.argv[2:])
ref = np.fromfile("%s/ref.f64" % work, dtype="<f8").reshape(W, N, E)
bound = 1e-5 * (1 + np.abs(ref).max())
ok = True
for name in ("out.raw", "out-prefixed.raw"):
    got = np.fromfile("%s/%s" % (work, name), dtype="<f4").astype(np.float64)
    if got.size != ref.size:
        print("FAIL %s: %d floats, expected %d (%d windows of %d x %d)"
              % (name, got.size, ref.size, W, N, E))
        ok = False
        continue
    got = got.reshape(W, N, E)
    err = np.abs(got - ref)
    per_window = err.reshape(W, -1).max(axis=1)
    nmse = ((got - ref) ** 2).sum() / (ref ** 2).sum()
    verdict = "PASS" if np.isfinite(err).all() and err.max() <= bound \
        else "FAIL"
    ok = ok and verdict == "PASS"
    print("%s %-16s max-abs %.3e (bound %.3e = 1e-5 * (1 + max|torch| "
          "%.3f)), nmse %.2e, per window: %s"
          % (verdict, name, err.max(), bound, np.abs(ref).max(), nmse,
             " ".join("%.1e" % v for v in per_window)))
sys.exit(0 if ok else 1)
PY
