#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Formats the C sources of the tree in one of two styles:
#  - GStreamer's (gst-indent: GNU indent with the options of GStreamer
#    1.22's scripts/gst-indent, run twice as it does): the .c files of
#    plugin/ and of the code that drives the element or follows its
#    style, tests/element, tests/soak, tests/tsan, tests/python and
#    examples/ (but the two examples of the core alone).  Their headers
#    are laid out by hand, as GStreamer's own pre-commit hook indents
#    only .c files: GNU indent takes G_BEGIN_DECLS and G_DECLARE_* for
#    declarations and misplaces what follows them;
#  - the core's GNU-like style (clang-format 14, Debian 12's, with
#    .clang-format at the top): core/, include/ and the core's tests,
#    tests/core, tests/common, tests/kernel, tests/weights, tests/bench,
#    tests/fuzz (.c and .h), and examples/use-library.c (which docs/api.md
#    shows, verbatim: docs-use-library checks it) and
#    examples/seed-experiment.c.
# Each directory takes the style its code was written in (the one whose
# one-time reformat changed fewer lines; the core's examples go with the
# core).  Only files git tracks are
# formatted.
#
#   scripts/format.sh            format in place
#   scripts/format.sh --check    change nothing: list the files that
#                                differ from their formatted form and
#                                exit 1 if there are any
#   scripts/format.sh [--check] FILE...   only these files
#
# Needs the Debian packages indent and clang-format (Makefile's
# DEB_PACKAGES).
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi

GST_INDENT_OPTS="--braces-on-if-line --case-brace-indentation0
  --case-indentation2 --braces-after-struct-decl-line --line-length80
  --no-tabs --cuddle-else --dont-line-up-parentheses
  --continuation-indentation4 --honour-newlines --tab-size8
  --indent-level2 --leave-preprocessor-space"
GST_DIRS="plugin tests/element tests/soak tests/tsan tests/python examples"
CORE_DIRS="core include tests/core tests/common tests/kernel tests/weights
  tests/bench tests/fuzz examples/use-library.c examples/seed-experiment.c"

for tool in indent clang-format; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "format.sh: $tool is not installed (apt-get install $tool)" >&2
    exit 2
  fi
done
case $(indent --version 2>/dev/null) in
  GNU*) ;;
  *) echo "format.sh: indent is not GNU indent" >&2; exit 2 ;;
esac

# style_of FILE: gst, core or nothing (not a C file of a formatted dir).
style_of () {
  case $1 in
    *.c|*.h) ;;
    *) return 0 ;;
  esac
  for d in $CORE_DIRS; do
    case $1 in "$d"|"$d"/*) echo core; return 0 ;; esac
  done
  for d in $GST_DIRS; do
    case $1 in "$d"/*.c) echo gst; return 0 ;; "$d"/*) return 0 ;; esac
  done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sattn-format.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# format STYLE FILE OUT: the formatted FILE into OUT.
format () {
  if [ "$1" = gst ]; then
    # GNU indent glues C99 designators to the comma or brace before them
    # ("{.a = 1,.b = 2 }"); the sed puts the space back.
    # shellcheck disable=SC2086  # one word per option
    indent $GST_INDENT_OPTS -st < "$2" > "$tmp/pass1" &&
      indent $GST_INDENT_OPTS -st < "$tmp/pass1" |
      sed -e 's/\([{,]\)\.\([A-Za-z_][A-Za-z0-9_]* =\)/\1 .\2/g' > "$3"
  else
    clang-format --style=file:"$top/.clang-format" "$2" > "$3"
  fi
}

if [ $# -gt 0 ]; then
  files=$(printf '%s\n' "$@")
else
  # shellcheck disable=SC2086  # one word per directory
  files=$(git ls-files -- $GST_DIRS $CORE_DIRS)
fi

differ=0 changed=0 failed=0
for f in $files; do
  style=$(style_of "$f")
  [ -n "$style" ] || continue
  if ! format "$style" "$f" "$tmp/out" 2>"$tmp/err"; then
    echo "format.sh: formatting $f failed:" >&2
    cat "$tmp/err" >&2
    failed=1
    continue
  fi
  if ! cmp -s "$f" "$tmp/out"; then
    if [ "$check" -eq 1 ]; then
      echo "$f"
      differ=$((differ + 1))
    else
      cat "$tmp/out" > "$f"
      changed=$((changed + 1))
    fi
  fi
done

if [ "$failed" -ne 0 ]; then
  exit 2
fi
if [ "$check" -eq 1 ]; then
  if [ "$differ" -ne 0 ]; then
    echo "format.sh: $differ file(s) differ from their formatted form;" \
      "run scripts/format.sh" >&2
    exit 1
  fi
  echo "format.sh: every file is formatted"
else
  echo "format.sh: $changed file(s) formatted"
fi
