#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The installed library as a user sees it.
#
#   install-check.sh --doc docs/api.md examples/use-library.c
#       the page's "Use the library" C block is the example, verbatim;
#   install-check.sh --run EXE
#       run examples/use-library (built in-tree against libsattn.so) and
#       check its output (below);
#   install-check.sh --install MESON BUILD_ROOT SOURCE_ROOT INTREE_EXE CC NM PYTHON
#       `meson install --destdir` this build into a fresh directory, list
#       what it installed and require the plugin, libsattn.so (soname
#       links), the headers (with sattn-version.h) and sattn.pc; check
#       the installed plugin's and library's exports against the installed
#       headers; compile examples/use-library.c with
#       `pkg-config --cflags --libs sattn` alone, run it from the prefix
#       (LD_LIBRARY_PATH there, and checked to be the library it loads),
#       check its output and compare it with the in-tree build's; load the
#       installed element with gst-inspect-1.0 when there is one; with
#       the element: compile examples/print-window-meta.c with
#       `pkg-config --cflags --libs gstsattn-meta` alone and run it
#       through the installed element; with the Python package: run the
#       installed `sattn-export --help` from the prefix.
#
# The example's output ("frame i: in a b  out c d", identity projections,
# causal attention) must have: rows for frames 0, 1, ... in order; row 0
# equal to frame 0 (its only visible key is itself); every output value
# within the range of the inputs at or before its frame (a causal softmax
# average of identity-projected values is a convex combination of them).
set -eu

check_output () {
  awk '
    function fail(msg) { print "use-library output: " msg ": " $0; bad = 1; exit 1 }
    $1 != "frame" { fail("unexpected line") }
    {
      i = $2; sub(":", "", i)
      if (i + 0 != n + 0) fail("expected frame " n + 0)
      a = $4 + 0; b = $5 + 0; c = $7 + 0; d = $8 + 0
      if (n == 0) { lo1 = hi1 = a; lo2 = hi2 = b }
      if (a < lo1) lo1 = a; if (a > hi1) hi1 = a
      if (b < lo2) lo2 = b; if (b > hi2) hi2 = b
      tol = 1e-6
      if (n == 0 && (c - a > tol || a - c > tol || d - b > tol || b - d > tol))
        fail("row 0 is not frame 0")
      if (c < lo1 - tol || c > hi1 + tol || d < lo2 - tol || d > hi2 + tol)
        fail("row outside the range of the frames it averages")
      n++
    }
    END { if (bad) exit 1; if (n == 0) { print "use-library: no rows"; exit 1 }
          print "use-library output: " n " rows, row 0 = frame 0, every row within its frames range" }
  ' "$1"
}

if [ "${1:-}" = "--doc" ]; then
  # The page's (docs/api.md) "Use the library" C block is examples/use-library.c.
  awk '
    /^## / { insec = ($0 == "## Use the library") }
    insec && /^```c$/ { inblock = 1; next }
    inblock && /^```$/ { exit }
    inblock { print }
  ' "$2" >"${TMPDIR:-/tmp}/docs-use-library.$$"
  rc=0
  if ! cmp -s "${TMPDIR:-/tmp}/docs-use-library.$$" "$3"; then
    echo "$2 (Use the library) and $3 differ:"
    diff "$3" "${TMPDIR:-/tmp}/docs-use-library.$$" || true
    rc=1
  else
    echo "$2 shows $3 as it is ($(wc -l <"$3") lines)"
  fi
  rm -f "${TMPDIR:-/tmp}/docs-use-library.$$"
  exit $rc
fi

if [ "${1:-}" = "--run" ]; then
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  "$2" >"$out"
  cat "$out"
  check_output "$out"
  exit 0
fi

[ "${1:-}" = "--install" ] || { echo "usage: see the top of $0" >&2; exit 2; }
meson=$2 build=$3 src=$4 intree=$5 cc=$6 nm=$7 python=$8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/stage

"$meson" install -C "$build" --no-rebuild --quiet --destdir "$stage"

# The prefix the build was configured with, relocated under the stage: a
# copy of the installed sattn.pc whose prefix= is the stage's (every other
# path in it must be relative to ${prefix}, as in a build configured with
# --prefix=<stage>).  pkg-config's --define-variable would redefine prefix
# in glib-2.0.pc and the other required packages too.
pc=$(find "$stage" -name sattn.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || { echo "sattn.pc was not installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
root=$stage$prefix
if grep -E '^(libdir|includedir)=' "$pc" | grep -vq '=${prefix}/'; then
  echo "sattn.pc is not relative to its prefix:"; cat "$pc"; exit 1
fi
mkdir -p "$tmp/pkgconfig"
sed "s|^prefix=.*|prefix=$root|" "$pc" >"$tmp/pkgconfig/sattn.pc"
export PKG_CONFIG_PATH="$tmp/pkgconfig"
libdir=$(pkg-config --variable=libdir sattn)
includedir=$(pkg-config --variable=includedir sattn)

echo "installed under $prefix:"
(cd "$root" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort \
  | while read -r f; do
      if [ -L "$f" ]; then echo "  $f -> $(readlink "$f")"; else echo "  $f"; fi
    done)

missing=0
need () {
  if [ ! -e "$1" ]; then echo "not installed: ${1#"$root"/}"; missing=1; fi
}
plugin=$libdir/gstreamer-1.0/libgstsattn.so
need "$plugin"
need "$libdir/libsattn.so"
soname=$(objdump -p "$libdir/libsattn.so" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
[ -n "$soname" ] || { echo "libsattn.so has no SONAME"; missing=1; }
need "$libdir/$soname"
need "$includedir/sattn/sattn.h"
need "$includedir/sattn/sattn-version.h"
need "$includedir/sattn/sattn-export.h"
need "$pc"
[ "$missing" -eq 0 ] || exit 1
# The soname is the major version the installed headers say.
major=$(sed -n 's/^#define SATTN_VERSION_MAJOR //p' \
  "$includedir/sattn/sattn-version.h")
if [ "$soname" != "libsattn.so.$major" ]; then
  echo "soname $soname, but sattn-version.h says major version '$major'"
  exit 1
fi
echo "soname: $soname"

# Exports of what was installed, against the installed headers.
"$python" "$src/tests/lib/check-exports.py" --nm "$nm" --plugin "$plugin"
"$python" "$src/tests/lib/check-exports.py" --nm "$nm" \
  --library "$libdir/libsattn.so" "$includedir"/sattn/*.h

# The example, with pkg-config alone (no path of the source or build tree).
flags=$(pkg-config --cflags --libs sattn)
echo "cc examples/use-library.c $flags"
case " $flags " in
  *"$src"*|*"$build"*) echo "pkg-config points into the tree: $flags"; exit 1 ;;
esac
cp "$src/examples/use-library.c" "$tmp/use-library.c"
# shellcheck disable=SC2086  # flags are words
(cd "$tmp" && "$cc" -std=c99 -Wall -Wextra -Werror use-library.c $flags \
  -o use-library)

loaded=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/use-library" | awk '/libsattn/ { print $3 }')
case $loaded in
  "$libdir"/*) echo "runs with $loaded" ;;
  *) echo "the example loads libsattn from '$loaded', not from the prefix"; exit 1 ;;
esac
LD_LIBRARY_PATH=$libdir "$tmp/use-library" >"$tmp/installed.out"
check_output "$tmp/installed.out"
"$intree" >"$tmp/intree.out"
if ! cmp -s "$tmp/installed.out" "$tmp/intree.out"; then
  echo "the installed build and the in-tree build disagree:"
  diff "$tmp/intree.out" "$tmp/installed.out" || true
  exit 1
fi
echo "same output as the in-tree build ($(wc -l <"$tmp/intree.out") rows)"

# The installed Python package (when meson's interpreter has numpy):
# found from the prefix alone (no SATTN_LIBRARY, no LD_LIBRARY_PATH), it
# loads the staged libsattn and computes what examples/use-library.c
# computes, printed the same way.
pkgdir=$(find "$stage" -path '*/sattn/_config.py' | head -n 1)
if [ -n "$pkgdir" ]; then
  pkgdir=$(dirname "$(dirname "$pkgdir")")
  env -u SATTN_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$pkgdir" "$python" -c '
import os, sys
import numpy as np
import sattn, sattn._lib
lib = os.path.realpath(sattn._lib.lib._name)
if not lib.startswith(os.path.realpath(sys.argv[1]) + "/"):
    sys.exit("the package loads %s, not the prefix'"'"'s library" % lib)
x = (np.arange(16) * 7 % 5 - 2).astype(np.float32).reshape(8, 2)
s = sattn.Stream(sattn.Model(2, 1, causal=True), 4, 2)
rows = np.concatenate([s.push(x)[0], s.drain()[0]])
for i, (a, r) in enumerate(zip(x, rows)):
    print("frame %d: in %5.1f %5.1f  out %9.6f %9.6f" % (i, a[0], a[1], r[0], r[1]))
' "$libdir" >"$tmp/python.out"
  if ! cmp -s "$tmp/python.out" "$tmp/intree.out"; then
    echo "the installed Python package and the C example disagree:"
    diff "$tmp/intree.out" "$tmp/python.out" || true
    exit 1
  fi
  echo "Python package ${pkgdir#"$stage"}/sattn: same rows as the C example"
else
  echo "no Python package installed (meson's Python has no numpy)"
fi

# The installed element loads from the prefix alone (it carries the core).
if command -v gst-inspect-1.0 >/dev/null 2>&1; then
  env -u LD_LIBRARY_PATH GST_PLUGIN_SYSTEM_PATH_1_0= \
    GST_PLUGIN_PATH_1_0="$libdir/gstreamer-1.0" \
    GST_REGISTRY_1_0="$tmp/registry.bin" \
    gst-inspect-1.0 sattn >"$tmp/inspect.out"
  grep -q 'Version' "$tmp/inspect.out"
  echo "gst-inspect-1.0 sattn: $(grep -m1 'Long-name' "$tmp/inspect.out" | sed 's/^ *//')"
fi

# The export tool as installed: bin/sattn-export finds its package in the
# prefix (no PYTHONPATH) and prints its help.
if [ -n "$pkgdir" ]; then
  exporter=$root/bin/sattn-export
  need "$exporter"
  [ "$missing" -eq 0 ] || exit 1
  [ -x "$exporter" ] || { echo "sattn-export is not executable"; exit 1; }
  env -u SATTN_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH "$exporter" --help \
    >"$tmp/export-help.out"
  grep -q '^usage: sattn-export' "$tmp/export-help.out" || {
    echo "sattn-export --help:"; cat "$tmp/export-help.out"; exit 1; }
  grep -q 'nn.TransformerEncoderLayer: the whole layer' "$tmp/export-help.out" \
    || { echo "sattn-export --help does not describe what it writes"; exit 1; }
  echo "sattn-export --help from ${exporter#"$stage"}: $(wc -l <"$tmp/export-help.out") lines"
fi

# The window metadata's header and its pkg-config file: print-window-meta
# built with `pkg-config --cflags --libs gstsattn-meta` alone, run through
# the installed element (and the system's audiotestsrc).
if [ -f "$plugin" ] && pkg-config --exists gstreamer-1.0 2>/dev/null; then
  mpc=$(find "$stage" -name gstsattn-meta.pc -path '*/pkgconfig/*' | head -n 1)
  need "$includedir/sattn/gstsattn-meta.h"
  [ -n "$mpc" ] || { echo "gstsattn-meta.pc was not installed"; exit 1; }
  [ "$missing" -eq 0 ] || exit 1
  sed "s|^prefix=.*|prefix=$root|" "$mpc" >"$tmp/pkgconfig/gstsattn-meta.pc"
  mflags=$(pkg-config --cflags --libs gstsattn-meta)
  echo "cc examples/print-window-meta.c $mflags"
  case " $mflags " in
    *"$src"*|*"$build"*) echo "pkg-config points into the tree: $mflags"; exit 1 ;;
  esac
  cp "$src/examples/print-window-meta.c" "$tmp/print-window-meta.c"
  # shellcheck disable=SC2086  # flags are words
  (cd "$tmp" && "$cc" -std=gnu11 -Wall -Wextra -Werror print-window-meta.c \
    $mflags -o print-window-meta)
  if command -v gst-inspect-1.0 >/dev/null 2>&1; then
    env -u LD_LIBRARY_PATH GST_PLUGIN_PATH_1_0="$libdir/gstreamer-1.0" \
      GST_REGISTRY_1_0="$tmp/registry-meta.bin" \
      "$tmp/print-window-meta" --buffers 1 >"$tmp/meta.out"
    echo "print-window-meta (installed header, installed element): $(tail -n 1 "$tmp/meta.out")"
  fi
fi
