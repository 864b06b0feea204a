#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Scaled vs unscaled attention, seen live through sattn's health messages.
#
# The same white noise (8 channels x frame-size 64 = 512 values per frame,
# one head, so head-dim 512) goes through sattn twice: once with the
# default scale 1/sqrt(head-dim), once with scale=1 ("unscaled").  Dot
# products of 512 terms have a spread that grows with sqrt(512): unscaled,
# every query's score for itself towers over the others and the softmax
# collapses into one-hot rows.  gst-launch-1.0 -m prints the element's
# 'sattn' messages; this script picks out, per half second:
#
#   max-weight      mean over softmax rows of the row's largest weight
#                   (1/32 = 0.031 would be uniform over a 32-frame window)
#   entropy         mean row entropy / log(keys): 1 = uniform, 0 = one-hot
#   saturated-rows  rows with more than 0.99 of their weight on one key
#
# and shows the warning the element posts for the unscaled run.
#
# Usage: examples/scaled-vs-unscaled.sh [BUILD_DIR]     (default: build)
set -euo pipefail

build=${1:-build}
build=$(cd "$build" && pwd)
export GST_PLUGIN_PATH="$build/plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"

# SATTN_GST_PRELOAD: libraries to preload into gst-launch-1.0 only (the
# sanitizer runtimes when the plugin is built with sanitizers).
gst () {
  if [ -n "${SATTN_GST_PRELOAD:-}" ]; then
    LD_PRELOAD="${SATTN_GST_PRELOAD}${LD_PRELOAD:+ $LD_PRELOAD}" "$@"
  else
    "$@"
  fi
}

if ! gst gst-inspect-1.0 sattn >/dev/null 2>&1; then
  echo "scaled-vs-unscaled: the sattn element is not available in" \
    "$build/plugin (build it first: make build)" >&2
  exit 1
fi

# 2 s of noise at 16 kHz, frames of 64 periods (250 frames/s), windows of
# 32 frames every 8, one message per 0.5 s.
run () {
  # shellcheck disable=SC2086
  gst gst-launch-1.0 -m \
    audiotestsrc wave=white-noise volume=0.5 num-buffers=20 \
      samplesperbuffer=1600 \
    ! audio/x-raw,format=F32LE,channels=8,rate=16000 \
    ! sattn frame-size=64 window=32 hop=8 scale="$1" post-messages=true \
      message-interval=500000000 \
    ! fakesink 2>&1
}

# "timestamp rows max-weight entropy saturated-rows" per message.
fields () {
  sed -n 's/.*(element): sattn, timestamp=(guint64)\([0-9]*\),.*, rows=(guint64)\([0-9]*\),.*max-weight=(double)\([^,]*\), entropy=(double)\([^,]*\), saturated-rows=(guint64)\([0-9]*\);.*/\1 \2 \3 \4 \5/p'
}

table () {
  awk '{ printf "  %6.2f s   %10.3f %8.3f   %5d of %d\n", $1 / 1e9, $3, $4, $5, $2;
         mw += $3; sat += $5; rows += $2; n++ }
       END { if (n) printf "  mean       %10.3f            %5d of %d\n", mw / n, sat, rows }'
}

declare -A mean_mw sat_rows
for scale in 0 1; do
  if [ "$scale" = 0 ]; then
    echo "scale=0 (the default, 1/sqrt(head-dim) = 1/sqrt(512) = 0.044):"
  else
    echo "scale=1 (unscaled):"
  fi
  out=$(run "$scale")
  if ! grep -q "Got EOS" <<<"$out"; then
    echo "$out" >&2
    echo "scaled-vs-unscaled: the pipeline did not reach EOS" >&2
    exit 1
  fi
  rows=$(fields <<<"$out")
  echo "  time        max-weight  entropy   saturated-rows"
  table <<<"$rows"
  grep "^WARNING" <<<"$out" | fold -s -w 76 | sed 's/^/  /' || true
  mean_mw[$scale]=$(awk '{ s += $3; n++ } END { printf "%.6f", s / n }' <<<"$rows")
  sat_rows[$scale]=$(awk '{ s += $5 } END { print s + 0 }' <<<"$rows")
  echo
done

# The claims above, checked.
if awk -v a="${mean_mw[0]}" -v b="${mean_mw[1]}" 'BEGIN { exit !(b > 2 * a) }' \
  && [ "${sat_rows[0]}" -eq 0 ] && [ "${sat_rows[1]}" -gt 0 ]; then
  echo "unscaled: mean max-weight ${mean_mw[1]} vs ${mean_mw[0]} scaled;" \
    "${sat_rows[1]} saturated rows vs none."
else
  echo "scaled-vs-unscaled: expected the unscaled run to saturate and the" \
    "scaled one not to (max-weight ${mean_mw[0]} / ${mean_mw[1]}," \
    "saturated rows ${sat_rows[0]} / ${sat_rows[1]})" >&2
  exit 1
fi
