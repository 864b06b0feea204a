#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Every source file of the tree carries the project's licence line,
#   SPDX-License-Identifier: LGPL-2.1-or-later
# and LICENSE holds the licence's text.  Source files: C and headers
# (.c, .h, .h.in), Python (.py, .py.in), shell (.sh, .ci/run), meson.build,
# meson_options.txt and the Makefile.  The files are git's tracked ones
# when the tree is a git checkout, else every file outside build
# directories.
#
# usage: check-spdx.sh SOURCE_ROOT
set -eu

cd "$1"
tag='SPDX-License-Identifier: LGPL-2.1-or-later'
list=$(mktemp)
trap 'rm -f "$list"' EXIT

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
   [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
  git ls-files >"$list"
else
  find . -path ./.git -prune -o -path './build*' -prune -o -type f -print |
    sed 's|^\./||' >"$list"
fi

bad=0
checked=0
while IFS= read -r f; do
  case "$f" in
    *.c | *.h | *.h.in | *.py | *.py.in | *.sh | .ci/run) ;;
    meson.build | */meson.build | meson_options.txt | Makefile) ;;
    *) continue ;;
  esac
  [ -f "$f" ] || continue
  checked=$((checked + 1))
  if ! grep -q "$tag" "$f"; then
    echo "no '$tag' line: $f"
    bad=$((bad + 1))
  fi
done <"$list"

if ! grep -q 'GNU LESSER GENERAL PUBLIC LICENSE' LICENSE 2>/dev/null ||
   ! grep -q 'Version 2.1, February 1999' LICENSE; then
  echo "LICENSE does not hold the text of the LGPL version 2.1"
  bad=$((bad + 1))
fi

echo "$checked source files checked, $bad problem(s)"
[ "$bad" -eq 0 ]
