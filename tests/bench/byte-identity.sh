#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Byte identity of two builds of libsattn: every output byte of
# sattn-dump-outputs' workloads, at every SIMD level this CPU has, with
# the library of BASE_LIB_DIR and then of NEW_LIB_DIR, compared with cmp.
#
#   tests/bench/byte-identity.sh BASE_LIB_DIR NEW_LIB_DIR [WORKDIR]
#
# BASE_LIB_DIR and NEW_LIB_DIR are meson build directories' core/ (they
# hold libsattn.so.<major>).  When both libraries have the soname of
# $DUMP_TOOL (default: build/tests/bench/sattn-dump-outputs of this
# source tree), that one binary runs against both (LD_LIBRARY_PATH takes
# precedence over its RUNPATH).  Otherwise (a soname change between them)
# this tree's dump-outputs.c is compiled for each side against that
# side's own headers (its build directory's meson-info names its source
# tree) and linked to that side's library: the same workloads, through
# each version's API.  WORKDIR (default: a new directory under /tmp)
# keeps the dumps and their indexes (one line per workload: name,
# offset, bytes, hash); on a difference the workloads that differ are
# listed.  Exit status 0 when every level is identical, 1 when one
# differs, 2 on a usage or run error.  Not part of the test suite: run it
# by hand when the core changes.
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
work=$(cd "$work" && pwd)

# The soname of the library in a directory: libsattn.so.<major>.
soname_in () {
  for f in "$1"/libsattn.so.[0-9]*; do
    case ${f##*/} in
      libsattn.so.*.*) ;;
      *) if [ -e "$f" ]; then echo "${f##*/}"; return 0; fi ;;
    esac
  done
  return 1
}

tool_soname=
if [ -x "$tool" ]; then
  tool_soname=$(readelf -d "$tool" 2>/dev/null |
                sed -n 's/.*NEEDED.*\[\(libsattn\.so\.[0-9]*\)\].*/\1/p')
fi

# The dump tool of one side: $tool when its soname matches, else this
# tree's source compiled against that side's headers.
tool_for () {
  side=$1 dir=$2 so=$3
  if [ "$so" = "$tool_soname" ]; then
    echo "$tool"
    return 0
  fi
  info=$dir/../meson-info/meson-info.json
  if [ ! -e "$info" ]; then
    echo "byte-identity: $dir has $so, $tool links ${tool_soname:-nothing};" \
         "no $info to find that side's headers" >&2
    return 1
  fi
  side_src=$(sed -n 's/.*"source": *"\([^"]*\)".*/\1/p' "$info" | head -n 1)
  side_build=$(cd "$dir/.." && pwd)
  out=$work/sattn-dump-outputs-$side
  if ! ${CC:-cc} -O2 -std=gnu11 -I"$side_src/include" \
      -I"$side_build/include" -I"$src/tests/common" \
      "$here/dump-outputs.c" "$src/tests/common/rng.c" \
      -L"$dir" -l:"$so" -Wl,-rpath,"$dir" -lm -o "$out" \
      >"$work/build-$side.log" 2>&1; then
    cat "$work/build-$side.log" >&2
    echo "byte-identity: cannot build the dump tool against $side_src" >&2
    return 1
  fi
  echo "$out"
}

base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
for side in base new; do
  eval dir=\$$side
  if ! so=$(soname_in "$dir"); then
    echo "byte-identity: no libsattn.so.<major> in $dir" >&2
    exit 2
  fi
  t=$(tool_for "$side" "$dir" "$so") || exit 2
  eval "${side}_so=\$so ${side}_tool=\$t"
  lib=$(LD_LIBRARY_PATH=$dir ldd "$t" |
        sed -n "s/.*$so => \([^ ]*\).*/\1/p")
  case $lib in
    "$dir"/*) ;;
    *) echo "byte-identity: $t loads ${lib:-no $so}, not $dir/$so" >&2
       exit 2 ;;
  esac
  echo "$side: $dir/$so, dumped by $t"
done

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
    eval dir=\$$side t=\$${side}_tool
    if ! SATTN_SIMD=$lvl LD_LIBRARY_PATH=$dir "$t" "$work/$side-$lvl.bin" \
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
