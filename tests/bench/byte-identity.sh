#!/bin/sh
# Byte identity of two builds of libsattn: every output byte of
# sattn-dump-outputs' workloads, at every SIMD level this CPU has, with
# the library of BASE_LIB_DIR and then of NEW_LIB_DIR, compared with cmp.
#
#   tests/bench/byte-identity.sh BASE_LIB_DIR NEW_LIB_DIR [WORKDIR]
#
# BASE_LIB_DIR and NEW_LIB_DIR hold a libsattn.so.0 (a build's core/
# directory, e.g. build/core).  The same sattn-dump-outputs binary runs
# against both (LD_LIBRARY_PATH takes precedence over its RUNPATH); it is
# $DUMP_TOOL, or build/tests/bench/sattn-dump-outputs of this source tree.
# WORKDIR (default: a new directory under /tmp) keeps the dumps and their
# indexes (one line per workload: name, offset, bytes, hash); on a
# difference the workloads that differ are listed.  Exit status 0 when
# every level is identical, 1 when one differs, 2 on a usage or run error.
# Not part of the test suite: run it by hand when the core changes.
set -eu

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 BASE_LIB_DIR NEW_LIB_DIR [WORKDIR]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
tool=${DUMP_TOOL:-$src/build/tests/bench/sattn-dump-outputs}
work=${3:-$(mktemp -d /tmp/sattn-byte-identity.XXXXXX)}
mkdir -p "$work"
if [ ! -x "$tool" ]; then
  echo "byte-identity: $tool not found (ninja -C build" \
       "tests/bench/sattn-dump-outputs, or set DUMP_TOOL)" >&2
  exit 2
fi
for d in "$1" "$2"; do
  if [ ! -e "$d/libsattn.so.0" ]; then
    echo "byte-identity: no libsattn.so.0 in $d" >&2
    exit 2
  fi
done
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)

# The SIMD levels of this CPU (core/cpu: 1 = AVX2 + FMA, 2 = AVX-512 F,
# DQ, BW and VL).
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has () { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
levels=0
if has avx2 && has fma; then
  levels="0 1"
  if has avx512f && has avx512dq && has avx512bw && has avx512vl; then
    levels="0 1 2"
  fi
fi

status=0
total=0
for lvl in $levels; do
  for side in base new; do
    eval dir=\$$side
    lib=$(LD_LIBRARY_PATH=$dir ldd "$tool" | sed -n 's/.*libsattn\.so\.0 => \([^ ]*\).*/\1/p')
    case $lib in
      "$dir"/*) ;;
      *) echo "byte-identity: the tool loads $lib, not $dir/libsattn.so.0" >&2
         exit 2 ;;
    esac
    if ! SATTN_SIMD=$lvl LD_LIBRARY_PATH=$dir "$tool" "$work/$side-$lvl.bin" \
        --index "$work/$side-$lvl.idx" >"$work/$side-$lvl.log" 2>&1; then
      cat "$work/$side-$lvl.log" >&2
      echo "byte-identity: the dump failed ($side, SATTN_SIMD=$lvl)" >&2
      exit 2
    fi
  done
  bytes=$(wc -c <"$work/base-$lvl.bin")
  nbytes=$(wc -c <"$work/new-$lvl.bin")
  cases=$(wc -l <"$work/base-$lvl.idx")
  if cmp -s "$work/base-$lvl.bin" "$work/new-$lvl.bin"; then
    echo "SATTN_SIMD=$lvl: identical: $bytes bytes compared ($cases workloads)"
  else
    status=1
    echo "SATTN_SIMD=$lvl: DIFFERENT ($bytes bytes vs $nbytes): " \
         "$(cmp "$work/base-$lvl.bin" "$work/new-$lvl.bin" 2>&1 | head -n 1)"
    # The workloads whose bytes differ (name, bytes, hash per side).
    awk 'NR == FNR { h[$1] = $3 " " $4; next }
         !($1 in h) || h[$1] != $3 " " $4 {
           print "  differs: " $1 " (base " (($1 in h) ? h[$1] : "absent") \
                 ", new " $3 " " $4 ")" }' \
      "$work/base-$lvl.idx" "$work/new-$lvl.idx"
  fi
  total=$((total + bytes))
done
echo "byte-identity: $total bytes compared over levels $levels" \
     "(base $base, new $new; dumps in $work)"
exit $status
