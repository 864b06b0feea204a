#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Cost of the element's observability on W1 (64 ch @ 16 kHz, heads 4,
# window 256, hop 16): bus messages and the attention map, in CPU seconds
# of the whole gst-launch-1.0 process (the map pad pushes from a thread of
# its own, so the streaming thread alone would miss it).  Every
# configuration runs REPEATS times, interleaved, and the median is shown;
# the source and sink alone are measured too, so the element's own share
# can be read off.
#   tests/bench/obs-cost.sh <build-dir> [seconds-of-signal] [repeats]
set -eu
build=$(cd "$1" && pwd)
secs=${2:-20}
reps=${3:-5}
export GST_PLUGIN_PATH="$build/plugin"
export GST_PLUGIN_PATH_1_0="$build/plugin"
export GST_REGISTRY="$build/tests/bench/registry.bin"
export GST_REGISTRY_1_0="$build/tests/bench/registry.bin"

nbuf=$((secs * 100))
src="audiotestsrc num-buffers=$nbuf samplesperbuffer=160 wave=sine ! audio/x-raw,format=F32LE,layout=interleaved,channels=64,rate=16000"
el="sattn name=s heads=4 window=256 hop=16 threads=1"
sink="fakesink sync=false async=false"
mapsink="s.attn ! $sink"

names="source+sink off messages-100ms messages-every-window map map+messages-100ms"
pipe_of () {
  case $1 in
    source+sink) echo "$src ! $sink" ;;
    off) echo "$src ! $el ! $sink" ;;
    messages-100ms) echo "$src ! $el post-messages=true message-interval=100000000 ! $sink" ;;
    messages-every-window) echo "$src ! $el post-messages=true ! $sink" ;;
    map) echo "$src ! $el ! $sink $mapsink" ;;
    map+messages-100ms) echo "$src ! $el post-messages=true message-interval=100000000 ! $sink $mapsink" ;;
  esac
}

work=$(mktemp -d "${TMPDIR:-/tmp}/sattn-obs.XXXXXX")
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$reps"); do
  for n in $names; do
    # shellcheck disable=SC2046  # the pipeline description is split on purpose
    /usr/bin/time -f "%U %S" -o "$work/t" gst-launch-1.0 -q $(pipe_of "$n") \
      >/dev/null 2>"$work/err" || { echo "$n failed:"; cat "$work/err"; exit 1; }
    awk '{ print $1 + $2 }' "$work/t" >> "$work/$n"
  done
done

median () { sort -n "$1" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
base=$(median "$work/source+sink")
off=$(median "$work/off")
frames=$((nbuf * 160))
echo "W1 observability cost: $secs s of signal ($frames frames), CPU seconds of the whole process, median of $reps interleaved runs"
echo
echo "| configuration | CPU s | element CPU s (minus source+sink) | frames/s of element CPU | element cost vs off |"
echo "|---|---:|---:|---:|---:|"
for n in $names; do
  m=$(median "$work/$n")
  awk -v n="$n" -v m="$m" -v b="$base" -v o="$off" -v f="$frames" 'BEGIN {
    if (n == "source+sink") { printf "| %s | %.2f | | | |\n", n, m; exit }
    e = m - b; eo = o - b;
    printf "| %s | %.2f | %.2f | %.3g | %+.0f%% |\n", n, m, e, (e > 0 ? f / e : 0), (n == "off") ? 0 : 100 * (e / eo - 1) }'
done
