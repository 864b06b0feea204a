#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# make package-check: build the Debian packages, run lintian on them,
# install them into a clean root and use them there as a user would.
#
#   package-check.sh [--reuse] SOURCE_ROOT OUT_DIR
#
# --reuse: skip steps 1 and 2, install the packages OUT_DIR already holds.
#
# 1. The tree as git sees it (tracked and new files, no build directories)
#    is copied to OUT_DIR/src and built there with
#    `dpkg-buildpackage -us -uc -b` (the packages land in OUT_DIR, not
#    next to the source tree); the build log's last lines are printed.
# 2. lintian on the .changes: errors and warnings fail (each tag that is
#    accepted is overridden, with the reason, in debian/*.lintian-overrides);
#    informational and experimental tags (-I -E) are printed.
# 3. The clean root: a throwaway overlay of this machine's / (overlayfs in
#    a private mount namespace, chrooted into), with empty /tmp, /work and
#    /root over the source and build trees, checked to hold no file named
#    *sattn* before the install.  The packages are installed there with
#    `dpkg -i` (dpkg checks their dependencies and runs their maintainer
#    scripts: ldconfig, py3compile), used with no environment but PATH
#    (no GST_PLUGIN_PATH, LD_LIBRARY_PATH, PYTHONPATH or PKG_CONFIG_PATH),
#    then purged.  Every write goes to the overlay's upper layer, which is
#    deleted afterwards: the machine itself is never changed, which matters
#    on a machine other builds share (an installed libgstsattn.so would
#    otherwise be found by their GStreamer and Python processes).
#    Inside (tests/package/inside.sh): gst-inspect-1.0 sattn, a launch
#    line through the installed element, README.md's Python snippet with
#    the installed package, examples/use-library.c and
#    examples/print-window-meta.c built with pkg-config alone, the
#    installed sattn-export (--help, and a layer exported and run in
#    gst-launch-1.0 when python3-torch is there).
# The last line is the verdict.
set -eu

reuse=0
if [ "${1:-}" = "--reuse" ]; then reuse=1; shift; fi
src=$(cd "$1" && pwd -P)
mkdir -p "$2"
out=$(cd "$2" && pwd -P)
fail () { echo "package-check: FAIL: $*"; exit 1; }

rm -rf "$out/root"
if [ "$reuse" -eq 0 ]; then
rm -rf "$out/src" "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mkdir -p "$out/src"
(cd "$src" && git ls-files -z --cached --others --exclude-standard) |
  (cd "$src" && tar --null --ignore-failed-read -T - -cf -) |
  tar -C "$out/src" -xf -

echo "== dpkg-buildpackage -us -uc -b (log: $out/build.log)"
if ! (cd "$out/src" && nice dpkg-buildpackage -us -uc -b -j2) \
    >"$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  fail "dpkg-buildpackage failed"
fi
tail -n 12 "$out/build.log"
# debian/rules checks the core's compile flags in its build directory
grep '^Debian package build: ' "$out/build.log" ||
  fail "the package build printed no compile-flags check of the core"
grep -q '^Debian package build: .*NOT AS INTENDED' "$out/build.log" &&
  fail "the package build does not compile the core at -O3"
changes=$(ls "$out"/sattn_*.changes)
echo "== packages"
for deb in "$out"/*.deb; do
  echo "$(basename "$deb"): $(dpkg-deb -f "$deb" Description | head -n 1)"
done
ndebs=$(ls "$out"/*.deb | grep -vc -- '-dbgsym_' || true)
[ "$ndebs" -eq 4 ] || fail "expected 4 packages, got $ndebs"

echo "== lintian -I -E --show-overrides $(basename "$changes")"
lintian -I -E --show-overrides "$changes" >"$out/lintian.log" 2>&1 || true
cat "$out/lintian.log"
lerr=$(grep -c '^E: ' "$out/lintian.log" || true)
lwarn=$(grep -c '^W: ' "$out/lintian.log" || true)
linfo=$(grep -c '^I: ' "$out/lintian.log" || true)
lover=$(grep -c '^O: ' "$out/lintian.log" || true)
lexp=$(grep -c "^X: " "$out/lintian.log" || true)
echo "lintian: $lerr error(s), $lwarn warning(s), $linfo info, $lexp experimental, $lover overridden"
[ "$lerr" -eq 0 ] && [ "$lwarn" -eq 0 ] || fail "lintian errors or warnings"
verdict="4 packages built; lintian: 0 errors, 0 warnings, $linfo info, $lexp experimental, $lover overridden"
else
  verdict="4 packages of $(ls "$out"/sattn_*.changes) (reused, not rebuilt)"
fi

echo "== install into a clean root"
root=$out/root
mkdir -p "$root/upper" "$root/work" "$root/mnt"
pc=$root/pc
mkdir -p "$pc/tests/data"
cp "$out"/*.deb "$pc/"
rm -f "$pc"/*-dbgsym_*.deb
cp "$src/tests/package/inside.sh" "$src/tests/lib/install-check.sh" \
  "$src/examples/use-library.c" "$src/examples/print-window-meta.c" "$pc/"
cp "$src/tests/data/e16_h2_nobias.safetensors" "$pc/tests/data/"
awk '/^### Python$/ { f = 1 } f && /^```python$/ { p = 1; next }
     p && /^```$/ { exit } p' "$src/README.md" >"$pc/readme-snippet.py"
[ -s "$pc/readme-snippet.py" ] || fail "no Python snippet in README.md"

rc=0
unshare -m --propagation private sh -eu -c '
  root=$1; m=$root/mnt
  mount -t overlay overlay -o "lowerdir=/,upperdir=$root/upper,workdir=$root/work" "$m"
  mount -t proc proc "$m/proc"
  mount --rbind /dev "$m/dev"
  for d in tmp work root; do
    [ -d "$m/$d" ] && mount -t tmpfs tmpfs "$m/$d"
  done
  cp -a "$root/pc" "$m/tmp/pc"
  chroot "$m" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp/pc/home \
    LANG=C.UTF-8 sh /tmp/pc/inside.sh
' sh "$root" || rc=$?
rm -rf "$root"
[ "$rc" -eq 0 ] || fail "the installed packages (above)"
echo "package-check: PASS: $verdict; installed with dpkg -i into a clean root, used (gst-inspect, launch line, Python snippet, two C programs built with pkg-config alone, sattn-export), purged"
