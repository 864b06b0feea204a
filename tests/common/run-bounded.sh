#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-bounded.sh SECONDS COMMAND [ARG...]
#
# Runs COMMAND (a test that starts pipelines: the examples' scripts and
# programs, gst-launch-1.0 lines) and passes its exit status on.  When it
# is still running after SECONDS (meson's tests set four fifths of their
# timeout), it fails as a hang instead of being killed by meson without a
# word:
#
#   HANG: COMMAND still running after SECONDS s
#
# then, for every process of its tree (the command, the gst-launch-1.0 or
# Python processes it started), its command line and every thread's
# backtrace (gdb -p, when gdb is installed); then the tree is killed and
# the status is 124 (as timeout(1)'s).
set -u

if [ $# -lt 2 ]; then
  echo "usage: run-bounded.sh SECONDS COMMAND [ARG...]" >&2
  exit 2
fi
bound=$1
shift

# The processes under $1 (itself first), parents before children.
tree () {
  ps -e -o pid= -o ppid= | awk -v root="$1" '
    { parent[$1] = $2; pids[NR] = $1 }
    END {
      keep[root] = 1; print root
      do {
        more = 0
        for (i = 1; i in pids; i++) {
          p = pids[i]
          if (!(p in keep) && (parent[p] in keep)) {
            keep[p] = 1; print p; more = 1
          }
        }
      } while (more)
    }'
}

report () {
  echo "HANG: $* still running after $bound s"
  for p in $(tree "$pid"); do
    args=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-300)
    [ -n "$args" ] || continue
    echo "---- pid $p: $args"
    if command -v gdb >/dev/null 2>&1; then
      timeout -k 2 30 gdb -p "$p" -batch -nx -q -ex 'set pagination off' \
        -ex 'info threads' -ex 'thread apply all bt' </dev/null 2>&1 \
        | grep -v '^\[New LWP\|^\[Thread debugging\|^Using host libthread'
    else
      echo "(gdb is not installed: no backtraces)"
    fi
  done
  echo "---- end of the HANG report"
}

# The command gets LD_PRELOAD (meson's sanitizer runtimes), the tools of
# this script (ps, gdb) do not: ps deadlocks under AddressSanitizer.
preload=${LD_PRELOAD-}
unset LD_PRELOAD
if [ -n "$preload" ]; then
  LD_PRELOAD=$preload "$@" &
else
  "$@" &
fi
pid=$!
sleep "$bound" </dev/null >/dev/null 2>&1 &
timer=$!
# whichever ends first: the command, or the bound
wait -n "$pid" "$timer"
if kill -0 "$pid" 2>/dev/null && ! kill -0 "$timer" 2>/dev/null; then
  report "$@" >&2
  for p in $(tree "$pid"); do
    kill -KILL "$p" 2>/dev/null
  done
  wait "$pid" 2>/dev/null
  exit 124
fi
kill "$timer" 2>/dev/null
wait "$pid"
