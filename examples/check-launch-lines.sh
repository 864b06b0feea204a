#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs every gst-launch-1.0 line of README.md as written, so the documented
# pipelines keep working.  Each must reach EOS (exit status 0).
#
# Usage: examples/check-launch-lines.sh README.md BUILD_DIR
# Runs in a scratch directory that has out/demo/signal.f32 (as make demo
# writes it).  SATTN_GST_PRELOAD: see demo.sh.
set -euo pipefail

readme=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
export GST_PLUGIN_PATH="$build/plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/out/demo"
# README lines name files of the source tree (tests/data/...) relative to it.
ln -s "$(dirname "$readme")/tests" "$work/tests"
"$python" "$here/make-signal.py" "$work/out/demo/signal.f32"

# The shell code blocks of the README, continuation lines joined; keep the
# commands that start with gst-launch-1.0.
mapfile -t lines < <(awk '
  /^```sh/ { inblock = 1; next }
  /^```/   { inblock = 0; next }
  inblock {
    line = $0
    if (cont != "") line = cont " " line
    if (line ~ /\\$/) { sub(/\\$/, "", line); cont = line; next }
    cont = ""
    sub(/^[ \t]+/, "", line)
    if (line ~ /^gst-launch-1.0 /) print line
  }' "$readme")

if [ "${#lines[@]}" -eq 0 ]; then
  echo "no gst-launch-1.0 line found in $readme" >&2
  exit 1
fi

failed=0
cd "$work"
for l in "${lines[@]}"; do
  echo "+ $l"
  l=${l/gst-launch-1.0 /gst-launch-1.0 -q }
  # the line is shell text from the README: let bash parse it as written
  if [ -n "${SATTN_GST_PRELOAD:-}" ]; then
    l="LD_PRELOAD='$SATTN_GST_PRELOAD' $l"
  fi
  if ! bash -c "$l"; then
    echo "FAIL: $l" >&2
    failed=$((failed + 1))
  fi
done
echo "${#lines[@]} launch lines, $failed failed"
[ "$failed" -eq 0 ]
