#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Run by package-check.sh inside the clean root (a chroot, environment
# PATH only), in /tmp/pc: the four .deb files, README.md's Python snippet
# and the example programs.  Installs the packages with dpkg -i, uses
# them as a user would, purges them.  Every check prints one "ok" line;
# the first that fails stops the script.
set -eu
cd /tmp/pc
mkdir -p home
n=0
ok () { n=$((n + 1)); echo "ok $n - $*"; }
fail () { echo "not ok - $*"; exit 1; }

multiarch=$(gcc -print-multiarch)
found=$(find /usr /etc /opt /var/lib/dpkg/info -name '*sattn*' 2>/dev/null | head -n 3)
[ -z "$found" ] || fail "the root is not clean: $found"
[ ! -e /work/wt-pkg ] || fail "the source tree is visible"
ok "clean root: no file named *sattn* under /usr /etc /opt /var/lib/dpkg/info, no source tree"

dpkg -i ./*.deb >dpkg.log 2>&1 || { cat dpkg.log; fail "dpkg -i"; }
dpkg-query -W -f '${Package} ${Version} ${Architecture}\n' \
  gstreamer1.0-sattn libsattn1 libsattn-dev python3-sattn
ok "dpkg -i: 4 packages installed, their dependencies satisfied"

# the element, from GStreamer's own plugin directory
gst-inspect-1.0 sattn >inspect.out 2>&1 || { cat inspect.out; fail "gst-inspect-1.0 sattn"; }
file=$(awk '/^  Filename/ { print $2 }' inspect.out)
# (/lib is /usr/lib on a merged-/usr system: compare real paths)
[ "$(readlink -f "$file")" = "$(readlink -f "/usr/lib/$multiarch/gstreamer-1.0/libgstsattn.so")" ] ||
  fail "gst-inspect-1.0 found the element in '$file'"
grep -E '^  (Filename|Version|License|Source module|Binary package|Origin URL)' inspect.out
ok "gst-inspect-1.0 sattn: $(grep -m1 'Long-name' inspect.out | sed 's/^ *Long-name *//')"

# a launch line: 20 buffers of 1024 frames (2 channels), a pooled row per
# hop of 8 frames (start=pad: every hop from the first frame)
gst-launch-1.0 -q audiotestsrc num-buffers=20 \
  ! audio/x-raw,format=F32LE,channels=2,rate=16000 \
  ! sattn window=32 hop=8 output=mean ! filesink location=rows.f32 \
  >launch.log 2>&1 || { cat launch.log; fail "gst-launch-1.0"; }
frames=$((20 * 1024)) size=$(stat -c %s rows.f32)
[ "$size" -eq $((frames / 8 * 2 * 4)) ] ||
  fail "the launch line wrote $size bytes, expected $((frames / 8)) rows of 2 floats"
ok "gst-launch-1.0 audiotestsrc ! sattn window=32 hop=8 output=mean ! filesink: $((size / 8)) rows for $frames frames"

# the installed recogniser, by its short name: 0.5 s of I/Q noise
# (2 channels at 64 kHz) gives one row of 11 probabilities per window of
# 64 frames of 16 samples (the model's contract, which the element takes)
[ -f /usr/share/sattn/models/recogniser.safetensors ] &&
  [ -f /usr/share/sattn/models/recogniser.labels ] ||
  fail "no /usr/share/sattn/models/recogniser.{safetensors,labels}"
gst-launch-1.0 -q audiotestsrc wave=white-noise num-buffers=31 \
  ! audio/x-raw,format=F32LE,channels=2,rate=64000 \
  ! sattn weights=recogniser output=classes ! filesink location=classes.f32 \
  >recog.log 2>&1 || { cat recog.log; fail "sattn weights=recogniser"; }
size=$(stat -c %s classes.f32)
[ "$size" -eq $((31 * 1024 / 1024 * 11 * 4)) ] ||
  fail "weights=recogniser wrote $size bytes, expected 31 rows of 11 floats"
ok "sattn weights=recogniser (/usr/share/sattn/models/recogniser.safetensors): $((size / 44)) rows of 11 class probabilities"

# README.md's Python snippet with the installed package and library
python3 -c 'import os, sattn, sattn._lib
print("sattn package:", os.path.dirname(sattn.__file__))
print("library:", os.path.realpath(sattn._lib.lib._name))' >py.out
cat py.out
grep -q "^sattn package: /usr/lib/python3/dist-packages/sattn$" py.out ||
  fail "python3 imports sattn from elsewhere"
lib=$(sed -n 's/^library: //p' py.out)
[ "$(readlink -f "$lib")" = "$(readlink -f "/usr/lib/$multiarch/libsattn.so.1")" ] ||
  fail "the package loads another libsattn"
python3 readme-snippet.py >snippet.out 2>&1 || { cat snippet.out; fail "README's Python snippet"; }
cat snippet.out
ok "README.md's Python snippet with the installed python3-sattn"

# C programs built with pkg-config alone
flags=$(pkg-config --cflags --libs sattn)
echo "cc use-library.c $flags"
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -Werror use-library.c $flags -o use-library
sh install-check.sh --run ./use-library | tail -n 1
ok "examples/use-library.c built with pkg-config --cflags --libs sattn, runs"
flags=$(pkg-config --cflags --libs gstsattn-meta)
echo "cc print-window-meta.c $flags"
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Wextra -Werror print-window-meta.c $flags -o print-window-meta
./print-window-meta --buffers 1 >meta.out 2>&1 || { cat meta.out; fail "print-window-meta"; }
head -n 3 meta.out
tail -n 1 meta.out
ok "examples/print-window-meta.c built with pkg-config --cflags --libs gstsattn-meta, runs through the installed element"

# the export tool
command -v sattn-export >/dev/null || fail "sattn-export is not on PATH"
sattn-export --help >help.out
grep -q '^usage: sattn-export' help.out || fail "sattn-export --help"
[ -f /usr/share/man/man1/sattn-export.1.gz ] || fail "no manual page"
ok "$(command -v sattn-export) --help ($(wc -l <help.out) lines), man page"
if python3 -c 'import torch' 2>/dev/null; then
  python3 -c 'import torch
torch.manual_seed(0)
l = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
torch.save(l.eval(), "layer.pt")'
  sattn-export layer.pt layer.safetensors
  gst-launch-1.0 -q audiotestsrc num-buffers=4 \
    ! audio/x-raw,format=F32LE,channels=8,rate=16000 \
    ! sattn weights=layer.safetensors window=16 hop=4 output=last \
    ! fakesink >export-launch.log 2>&1 || { cat export-launch.log; fail "the exported layer in gst-launch-1.0"; }
  ok "sattn-export of a pickled encoder layer, run by the installed element"
else
  echo "(python3-torch not installed: the export itself is not run)"
fi

dpkg --purge python3-sattn libsattn-dev gstreamer1.0-sattn libsattn1 >purge.log 2>&1 ||
  { cat purge.log; fail "dpkg --purge"; }
left=$(find /usr /etc -name '*sattn*' 2>/dev/null | head -n 3)
[ -z "$left" ] || fail "left after purge: $left"
ok "dpkg --purge: nothing named *sattn* left under /usr and /etc"
