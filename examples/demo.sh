#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The sattn pipeline demo (`make demo`).
#
# 1. make-signal.py writes 10 s of 8 simulated sensors at 2 kHz (sines +
#    noise, a transient at 6.2 s on sensors 2-4, NaN readings on sensor 6
#    at 3.0 s) as raw float32.
# 2. gst-launch-1.0 runs it through sattn twice, saving the features:
#      per frame   (output=frames)  -> features.f32
#      per window  (output=mean)    -> features-mean.f32
# 3. summarise-features.py prints what came out and checks it.
# 4. recognizer/demo.py, the recognition demo: 40 s of generated I/Q
#    (2-channel F32 at 64 kHz) whose modulation and SNR change every
#    second, through filesrc ! rawaudioparse ! sattn output=classes with
#    the trained recogniser: $SATTN_RECOGNISER when set, else the
#    installed copy when there is one (/usr/share/sattn/models/
#    recogniser.safetensors from the Debian package, or under
#    /usr/local/share, where weights=recogniser finds it), else
#    examples/recognizer/recognizer.safetensors;
#    it prints the timeline, the accuracy, the sattn-class messages and
#    the real-time factor on one core, and checks them (files in
#    OUT_DIR/recognizer).
#
# Usage: examples/demo.sh [BUILD_DIR] [OUT_DIR]    (defaults: build out/demo)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
out=${2:-out/demo}
build=$(cd "$build" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Our element first; the system's plugins stay reachable.  (The test suite
# sets GST_PLUGIN_PATH_1_0 itself, which GStreamer prefers.)
export GST_PLUGIN_PATH="$build/plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"

# SATTN_GST_PRELOAD: libraries to preload into the GStreamer tools only
# (the sanitizer runtimes when the plugin is built with sanitizers).
gst () {
  if [ -n "${SATTN_GST_PRELOAD:-}" ]; then
    LD_PRELOAD="${SATTN_GST_PRELOAD}${LD_PRELOAD:+ $LD_PRELOAD}" "$@"
  else
    "$@"
  fi
}

if ! gst gst-inspect-1.0 sattn >/dev/null 2>&1; then
  echo "demo: the sattn element is not available in $build/plugin" >&2
  echo "      (build it first: make build)" >&2
  exit 1
fi

# The Debian interpreter: it has python3-numpy (a python3 earlier in PATH,
# e.g. a pyenv one, may not).
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi

rate=2000
channels=8
window=64
hop=16

"$python" "$here/make-signal.py" "$out/signal.f32" --rate $rate \
  --channels $channels --seconds 10

src="filesrc location=$out/signal.f32 ! rawaudioparse use-sink-caps=false format=pcm pcm-format=f32le sample-rate=$rate num-channels=$channels"
att="sattn window=$window hop=$hop heads=2 invalid-frames=mask"

# shellcheck disable=SC2086  # the launch lines are split into words on purpose
gst gst-launch-1.0 -q $src ! $att output=frames \
  ! filesink location="$out/features.f32"
# shellcheck disable=SC2086
gst gst-launch-1.0 -q $src ! $att output=mean \
  ! filesink location="$out/features-mean.f32"

"$python" "$here/summarise-features.py" "$out/signal.f32" \
  "$out/features.f32" --pooled "$out/features-mean.f32" \
  --window $window --hop $hop \
  --launch "filesrc ! rawaudioparse ! $att output=frames ! filesink"
echo
echo "files in $out: signal.f32 (+ .json), features.f32, features-mean.f32"

echo
"$python" "$here/recognizer/demo.py" "$out/recognizer"
echo
echo "files in $out/recognizer: iq.f32 (+ .json), classes.f32, classes-m.f32"
