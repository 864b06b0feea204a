#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Feature options fail at configure time, never by skipping silently.
#
#   configure-check.sh MESON SOURCE_ROOT
#
# Runs `meson setup` of the source tree in scratch directories:
#  - -Dplugin=enabled -Dweights=disabled must fail (the element needs the
#    weights reader);
#  - with json-glib-1.0 hidden from pkg-config (a pkg-config directory of
#    links to every .pc file but that one): -Dweights=enabled must fail
#    naming json-glib-1.0, -Dplugin=enabled must fail naming the weights
#    reader, and the defaults (auto) must configure, without the element.
set -eu
meson=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fails=0 n=0
expect_fail () {  # expect_fail WORD-IN-OUTPUT ARGS...
  word=$1; shift
  n=$((n + 1)); dir=$tmp/b$n
  if "$meson" setup "$dir" "$src" "$@" >"$tmp/log" 2>&1; then
    echo "FAIL: meson setup $* configured"; fails=1
  elif ! grep -q "ERROR.*$word" "$tmp/log"; then
    echo "FAIL: meson setup $* failed without naming $word:"
    grep ERROR "$tmp/log" || tail -n 5 "$tmp/log"; fails=1
  else
    echo "ok: meson setup $* -> $(grep -m1 ERROR "$tmp/log" | sed 's/^.*ERROR: //')"
  fi
}

expect_fail 'weights reader' -Dplugin=enabled -Dweights=disabled

mkdir -p "$tmp/pc"
for d in $(pkg-config --variable pc_path pkg-config | tr : ' '); do
  [ -d "$d" ] || continue
  for f in "$d"/*.pc; do
    [ -e "$f" ] || continue
    case $(basename "$f") in json-glib-1.0.pc) continue ;; esac
    [ -e "$tmp/pc/$(basename "$f")" ] || ln -s "$f" "$tmp/pc/"
  done
done
export PKG_CONFIG_LIBDIR="$tmp/pc"
unset PKG_CONFIG_PATH
expect_fail 'json-glib-1.0' -Dweights=enabled
expect_fail 'weights reader' -Dplugin=enabled
# (the element is libgstsattn.so; build.ninja names gstsattn-meta.h in any
# configuration, copied to include/sattn/ for in-tree programs)
if "$meson" setup "$tmp/auto" "$src" >"$tmp/log" 2>&1; then
  if [ -n "$(find "$tmp/auto" -name build.ninja)" ] \
     && grep -q 'libgstsattn\.so' "$tmp/auto/build.ninja"; then
    echo "FAIL: without json-glib the defaults still build the element"; fails=1
  else
    echo "ok: meson setup (defaults, no json-glib-1.0) configures, without the element"
  fi
else
  echo "FAIL: meson setup with the defaults and no json-glib-1.0 failed:"
  grep ERROR "$tmp/log" || tail -n 5 "$tmp/log"; fails=1
fi
exit $fails
