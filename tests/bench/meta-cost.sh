#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Cost of the Python-readable window metadata (the GstCustomMeta with a
# GstStructure that meta-structure=true attaches next to the C struct), in
# CPU seconds of the whole gst-launch-1.0 process.  Each geometry runs
# with meta-structure=false and =true, REPEATS times interleaved; the
# medians, the difference per output buffer and per output row, and the
# element's own share (minus source and sink alone) are shown:
#  - W1 (64 ch @ 16 kHz, heads 4, window 256, hop 16), output=frames:
#    160 rows per buffer, the sensor geometry of docs/element.md
#    ("Window metadata");
#  - tiny (2 ch, window 8, hop 1), output=frames: almost no arithmetic
#    per row, so the metadata's share is as large as it gets;
#  - tiny, output=mean with hop 4: 40 rows per buffer.
#   tests/bench/meta-cost.sh <build-dir> [buffers] [repeats]
set -eu
build=$(cd "$1" && pwd)
nbuf=${2:-2000}
reps=${3:-5}
export GST_PLUGIN_PATH="$build/plugin"
export GST_PLUGIN_PATH_1_0="$build/plugin"
export GST_REGISTRY="$build/tests/bench/registry.bin"
export GST_REGISTRY_1_0="$build/tests/bench/registry.bin"
mkdir -p "$build/tests/bench"

spb=160
sink="fakesink sync=false async=false"
src_of () {
  echo "audiotestsrc num-buffers=$nbuf samplesperbuffer=$spb wave=sine ! audio/x-raw,format=F32LE,layout=interleaved,channels=$1,rate=16000"
}
# geometry: channels, element properties, output rows per buffer
geoms="w1 tiny-frames tiny-mean"
chan_of () { case $1 in w1) echo 64 ;; *) echo 2 ;; esac; }
el_of () {
  case $1 in
    w1) echo "sattn heads=4 window=256 hop=16 threads=1" ;;
    tiny-frames) echo "sattn window=8 hop=1 threads=1" ;;
    tiny-mean) echo "sattn window=8 hop=4 output=mean threads=1" ;;
  esac
}
rows_of () { case $1 in tiny-mean) echo $((spb / 4)) ;; *) echo $spb ;; esac; }

work=$(mktemp -d "${TMPDIR:-/tmp}/sattn-meta.XXXXXX")
trap 'rm -rf "$work"' EXIT
run () { # name pipeline...
  n=$1; shift
  # shellcheck disable=SC2068  # the pipeline description is split on purpose
  /usr/bin/time -f "%U %S" -o "$work/t" gst-launch-1.0 -q $@ \
    >/dev/null 2>"$work/err" || { echo "$n failed:"; cat "$work/err"; exit 1; }
  awk '{ print $1 + $2 }' "$work/t" >> "$work/$n"
}
for _ in $(seq "$reps"); do
  for g in $geoms; do
    src=$(src_of "$(chan_of "$g")")
    # shellcheck disable=SC2086,SC2046  # descriptions split on purpose
    run "$g-base" $src ! $sink
    for m in false true; do
      # shellcheck disable=SC2086,SC2046
      run "$g-$m" $src ! $(el_of "$g") meta-structure=$m ! $sink
    done
  done
done

median () { sort -n "$1" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "Window metadata cost: $nbuf input buffers of $spb frames, CPU seconds of the whole process, median of $reps interleaved runs"
echo
echo "| geometry | rows/buffer | meta-structure=false | =true | difference per buffer | per row | element CPU (minus source+sink), false -> true |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for g in $geoms; do
  b=$(median "$work/$g-base")
  f=$(median "$work/$g-false")
  t=$(median "$work/$g-true")
  awk -v g="$g" -v r="$(rows_of "$g")" -v n="$nbuf" -v b="$b" -v f="$f" -v t="$t" 'BEGIN {
    d = (t - f) / n * 1e6;
    printf "| %s | %d | %.3f s | %.3f s | %.2f us | %.3f us | %.3f -> %.3f s (%+.1f%%) |\n",
      g, r, f, t, d, d / r, f - b, t - b, 100 * ((t - b) / (f - b) - 1) }'
done
