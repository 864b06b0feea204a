#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs every gst-launch-1.0 line of the documentation as written, so the
# documented pipelines keep working.  Each must reach EOS (exit status 0).
#
# Usage: examples/check-launch-lines.sh BUILD_DIR FILE|DIR...
#   FILE: a Markdown file; DIR: a source tree, meaning its README.md and
#   every docs/*.md (meson's test `docs-launch-lines` passes the tree).
#
# What is run: in ```sh blocks (indented ones, in list items, too), every
# command line (continuations joined)
# that starts with gst-launch-1.0, optionally after `taskset -c CPUS`.
# A line that cannot run as written (it needs SRT peers, a broker, a
# network, or the user's own files) goes in a block fenced ```sh no-run:
# it is counted as skipped and listed.  A gst-launch-1.0 command line in
# any other code block (``` or ```text) fails the check, so that no
# launch line is left unchecked by accident; output samples, which
# never start with the command, are not affected.
#
# The lines run in a scratch directory that holds what they name:
#   out/demo/signal.f32             8 sensors at 2 kHz, 10 s (make-signal.py,
#                                   as `make demo` writes it)
#   out/demo/recognizer/iq.f32      2 s of 2-channel I/Q at 64 kHz
#                                   (recognizer/iqgen.py, as the demo's)
#   tests/, examples/               links to the source tree's
#   the installed recogniser        XDG_DATA_HOME holds
#                                   sattn/models/recogniser.safetensors (the
#                                   source tree's model), which is where
#                                   weights=recogniser finds an installed one
# SATTN_GST_PRELOAD: see demo.sh.  It prints, per file, the lines run and
# skipped, then the totals.
set -euo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 BUILD_DIR FILE|DIR..." >&2
  exit 2
fi
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/.." && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
export GST_PLUGIN_PATH="$build/plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"

files=()
for a in "$@"; do
  if [ -d "$a" ]; then
    files+=("$(cd "$a" && pwd)/README.md")
    for d in "$a"/docs/*.md; do files+=("$(cd "$(dirname "$d")" && pwd)/$(basename "$d")"); done
  else
    files+=("$(cd "$(dirname "$a")" && pwd)/$(basename "$a")")
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/out/demo/recognizer" "$work/share/sattn/models"
ln -s "$src/tests" "$work/tests"
ln -s "$src/examples" "$work/examples"
ln -s "$src/examples/recognizer/recognizer.safetensors" \
  "$work/share/sattn/models/recogniser.safetensors"
ln -s "$src/examples/recognizer/recognizer.labels" \
  "$work/share/sattn/models/recogniser.labels"
export XDG_DATA_HOME="$work/share"
"$python" "$here/make-signal.py" "$work/out/demo/signal.f32"
"$python" - "$src/examples/recognizer" "$work/out/demo/recognizer/iq.f32" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import iqgen
iq, _, _ = iqgen.make_stream(2026, 2, 64000)
iq.astype("<f4").tofile(sys.argv[2])
EOF

# One record per command line of a code block, continuation lines joined:
# KIND<TAB>LINE, KIND "run" (```sh), "skip" (```sh no-run) or "other".
extract() {
  awk '
    /^[ \t]*```/ {
      if (kind == "") {
        info = $0; sub(/^[ \t]*```/, "", info); sub(/[ \t]+$/, "", info)
        if (info == "sh") kind = "run"
        else if (info ~ /^sh[ \t]+no-run$/) kind = "skip"
        else kind = "other"
      } else { kind = ""; cont = "" }
      next
    }
    kind != "" {
      line = $0
      if (cont != "") line = cont " " line
      if (line ~ /\\$/) { sub(/\\$/, "", line); cont = line; next }
      cont = ""
      sub(/^[ \t]+/, "", line)
      if (line ~ /^(taskset -c [0-9,-]+ )?gst-launch-1\.0 /) print kind "\t" line
    }' "$1"
}

total_run=0 total_skip=0 failed=0 stray=0
cd "$work"
summary=()
for f in "${files[@]}"; do
  name=${f#"$src"/}
  n_run=0 n_skip=0
  while IFS=$'\t' read -r kind l; do
    case "$kind" in
      skip)
        echo "skip ($name, sh no-run): $l"
        n_skip=$((n_skip + 1))
        continue ;;
      other)
        echo "FAIL: $name: a gst-launch-1.0 line outside a \`\`\`sh block" \
          "(fence it \`\`\`sh to run it, or \`\`\`sh no-run): $l" >&2
        stray=$((stray + 1))
        continue ;;
    esac
    echo "+ ($name) $l"
    l=${l/gst-launch-1.0 /gst-launch-1.0 -q }
    # the line is shell text from the document: let bash parse it as written
    if [ -n "${SATTN_GST_PRELOAD:-}" ]; then
      l="LD_PRELOAD='$SATTN_GST_PRELOAD' $l"
    fi
    if ! bash -c "$l" </dev/null; then
      echo "FAIL: $name: $l" >&2
      failed=$((failed + 1))
    fi
    n_run=$((n_run + 1))
  done < <(extract "$f")
  summary+=("$(printf '%-24s %3d run, %2d skipped (sh no-run)' "$name:" "$n_run" "$n_skip")")
  total_run=$((total_run + n_run))
  total_skip=$((total_skip + n_skip))
done

printf '%s\n' "${summary[@]}"
echo "launch lines: $total_run run across ${#files[@]} files, $failed failed;" \
  "$total_skip skipped (sh no-run); $stray outside a sh block"
if [ "$total_run" -eq 0 ]; then
  echo "no gst-launch-1.0 line found" >&2
  exit 1
fi
[ "$failed" -eq 0 ] && [ "$stray" -eq 0 ]
