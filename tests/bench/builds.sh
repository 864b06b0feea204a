#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# The speed of the builds users get, side by side in one interleaved run:
#   release  meson setup --buildtype=release
#   debian   as dh_auto_configure builds the packages: --buildtype=plain
#            with CFLAGS from dpkg-buildflags (Debian's -g -O2 ...)
#   default  meson setup (debugoptimized), what make demo / make test build
# Each is configured and built (sattn-bench and the element only) under
# BENCH_DIR (default build-bench/), then every workload runs once per
# build in turn, R times (release, debian, default, release, ...), each
# build's own sattn-bench and element, pinned to one CPU; the table gives
# the medians and each build's ratio to release.
#
#   tests/bench/builds.sh [--repeats R] [--time S] [--whole FILE ...]
#
# Workloads: W1 and W3 (random weights; core and the element through a
# pipeline, frames per CPU second) and each --whole FILE (windows per CPU
# second through the pipeline; default: the shipped recogniser at its
# window and hop).  A compile-flags check (tests/lib/check-core-flags.py)
# of each build is printed first.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
R=5
T=1
wholes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) R=$2; shift 2 ;;
    --time) T=$2; shift 2 ;;
    --whole) wholes="$wholes $2"; shift 2 ;;
    *) echo "usage: $0 [--repeats R] [--time S] [--whole FILE ...]" >&2
       exit 2 ;;
  esac
done
[ -n "$wholes" ] || wholes="$src/examples/recognizer/recognizer.safetensors"
dir=${BENCH_DIR:-$src/build-bench}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3

cflags=$(dpkg-buildflags --get CFLAGS 2>/dev/null ||
  echo "-g -O2 -fstack-protector-strong -Wformat -Werror=format-security")
builds="release debian default"
for b in $builds; do
  d="$dir/$b"
  if [ ! -f "$d/build.ninja" ]; then
    case $b in
      release) meson setup "$d" "$src" --buildtype=release >/dev/null ;;
      debian) CFLAGS="$cflags" meson setup "$d" "$src" --buildtype=plain \
                >/dev/null ;;
      default) env -u CFLAGS meson setup "$d" "$src" >/dev/null ;;
    esac
  fi
  nice ninja -C "$d" tests/bench/sattn-bench plugin/libgstsattn.so >/dev/null
  "$py" "$src/tests/lib/check-core-flags.py" --build-dir "$d" --name "$b"
done

pin=
if command -v taskset >/dev/null 2>&1; then
  cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
    tr ',' '\n' | sed 's/.*-//' | sort -n | tail -n 1)
  taskset -c "$cpu" true 2>/dev/null && pin="taskset -c $cpu"
fi
out="$dir/runs"
rm -rf "$out"
mkdir -p "$out"

# one run of build b, repeat r: W1/W3 JSON lines and the whole models'
# tables, into $out
run () {
  b=$1 r=$2 d="$dir/$1"
  GST_PLUGIN_PATH="$d/plugin" GST_PLUGIN_PATH_1_0="$d/plugin" \
    GST_REGISTRY="$d/registry.bin" GST_REGISTRY_1_0="$d/registry.bin" \
    $pin "$d/tests/bench/sattn-bench" --only W1,W3 --weights random \
    --throughput-only --repeats 1 --time "$T" --json "$out/$b.$r.json" \
    >/dev/null
  i=0
  for f in $wholes; do
    i=$((i + 1))
    GST_PLUGIN_PATH="$d/plugin" GST_PLUGIN_PATH_1_0="$d/plugin" \
      GST_REGISTRY="$d/registry.bin" GST_REGISTRY_1_0="$d/registry.bin" \
      $pin "$d/tests/bench/sattn-bench" --whole "$f" \
      --repeats 1 --time "$T" >"$out/$b.$r.whole$i.txt" 2>&1 || true
  done
}

r=1
while [ "$r" -le "$R" ]; do
  for b in $builds; do
    run "$b" "$r"
  done
  r=$((r + 1))
done

"$py" - "$out" "$R" $wholes <<'EOF'
import json, os, re, statistics, sys
out, R, wholes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
builds = ["release", "debian", "default"]
rows = {}
for b in builds:
    for r in range(1, R + 1):
        with open(os.path.join(out, "%s.%d.json" % (b, r))) as f:
            for line in f:
                j = json.loads(line)
                for k, key in (("core", "core_fps"),
                               ("pipeline", "pipeline_fps")):
                    if j.get(key):
                        rows.setdefault(("%s %s" % (j["workload"], k),
                                         "frames/s"), {}).setdefault(
                            b, []).append(j[key])
        for i, f in enumerate(wholes, 1):
            text = open(os.path.join(out, "%s.%d.whole%d.txt" % (b, r, i))
                        ).read()
            m = re.search(r"\| sattn pipeline[^|]*\| (\d+)", text)
            c = re.search(r"\| sattn core, one hop[^|]*\| (\d+)", text)
            name = os.path.basename(f)
            for what, mm in (("core", c), ("pipeline", m)):
                if mm:
                    rows.setdefault(("%s %s" % (name, what), "windows/s"),
                                    {}).setdefault(b, []).append(
                        float(mm.group(1)))
print("\nBuilds side by side: %d interleaved repeats, medians per CPU "
      "second (one CPU); ratio to release in brackets" % R)
print("| workload | unit | release | debian (dpkg-buildflags) | default "
      "(debugoptimized) |")
print("|---|---|---:|---:|---:|")
for (name, unit), v in rows.items():
    med = {b: statistics.median(v[b]) for b in builds if b in v}
    rel = med.get("release")
    cells = []
    for b in builds:
        if b not in med:
            cells.append("-")
        elif b == "release" or not rel:
            cells.append("%.0f" % med[b])
        else:
            cells.append("%.0f (%.2f)" % (med[b], med[b] / rel))
    print("| %s | %s | %s |" % (name, unit, " | ".join(cells)))
EOF
