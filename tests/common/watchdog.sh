#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# watchdog.sh PID SECONDS PROGRAM: the watcher process of
# tests/common/watchdog.c, started by the test program PID (PROGRAM is its
# name) when it starts, and killed when it ends (PR_SET_PDEATHSIG).
#
# Still alive SECONDS later, PID hangs: "HANG: PROGRAM (pid PID) still
# running after SECONDS s", every thread's backtrace of PID and of its
# child processes (gdb -p, when gdb is installed), the children killed,
# PID aborted (SIGABRT; SIGKILL 10 s later if that did not end it).
#
# On fd 3, lines "C FORKER MS TIMEOUT" from PID's processes: FORKER just
# forked a check test case whose own timeout is TIMEOUT s; a child of
# FORKER still running MS ms later gets the same report and is killed
# (check then fails that case and goes on), before check would kill it
# without a word.
#
# Only bash builtins while waiting, so that nothing of ours outlives the
# test holding its output open.  SATTN_TEST_WATCHDOG=S in the environment
# of a test program that links watchdog.c starts this.
set -u
pid=$1
bound=$2
prog=$3

ms () {
  local t=${EPOCHREALTIME/./}
  echo $(( ${t:0:-3} ))
}
start=$(ms)
end=$(( start + bound * 1000 ))
declare -A due=() since=() tmo=()

# The child processes of $1 but this watcher.
children () {
  local c
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    [ "$c" = "$$" ] || echo "$c"
  done
}

dump () {
  echo "---- pid $1: $(tr '\0' ' ' </proc/"$1"/cmdline 2>/dev/null |
    cut -c1-300)"
  if command -v gdb >/dev/null 2>&1; then
    timeout -k 2 30 gdb -p "$1" -batch -nx -q -ex 'set pagination off' \
      -ex 'info threads' -ex 'thread apply all bt' </dev/null 2>&1 |
      grep -v '^\[New LWP\|^\[Thread debugging\|^Using host libthread'
  else
    echo "(gdb is not installed: no backtraces)"
  fi
}

# The children of $1, reported and killed.
report_children () {
  local c
  for c in $(children "$1"); do
    dump "$c"
    kill -KILL "$c" 2>/dev/null
  done
}

exec 1>&2
# fd 4: a FIFO nobody writes to, for waits that end by their timeout only
fifo=$(mktemp -u "${TMPDIR:-/tmp}/sattn-watchdog.XXXXXX")
mkfifo "$fifo" && exec 4<>"$fifo"
rm -f "$fifo"
while :; do
  now=$(ms)
  if [ "$now" -ge "$end" ]; then
    echo
    echo "HANG: $prog (pid $pid) still running after $(( (now - start) /
      1000 )) s (SATTN_TEST_WATCHDOG=$bound s); every thread's backtrace" \
      "follows"
    dump "$pid"
    report_children "$pid"
    echo "---- end of the HANG report: $prog (pid $pid) aborts"
    kill -ABRT "$pid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$pid" 2>/dev/null || exit 0
      read -r -t 1 <&4
    done
    kill -KILL "$pid" 2>/dev/null
    exit 0
  fi
  next=$end
  for f in "${!due[@]}"; do
    if [ "${due[$f]}" -le "$now" ]; then
      if [ -n "$(children "$f")" ]; then
        echo
        echo "HANG: $prog (pid $f): its check test case is still running" \
          "after $(( (now - since[$f]) / 1000 )) s (the case's timeout:" \
          "${tmo[$f]} s); every thread's backtrace of its process follows," \
          "then it is killed"
        report_children "$f"
        echo "---- end of the HANG report of pid $f's test case"
      fi
      unset "due[$f]"
    elif [ "${due[$f]}" -lt "$next" ]; then
      next=${due[$f]}
    fi
  done
  wait_ms=$(( next - now ))
  [ "$wait_ms" -gt 0 ] || continue
  if read -r -t "$(( wait_ms / 1000 )).$(printf %03d $(( wait_ms % 1000 )))" \
      kind forker after timeout <&3; then
    if [ "$kind" = C ]; then
      now=$(ms)
      due[$forker]=$(( now + after ))
      since[$forker]=$now
      tmo[$forker]=$timeout
    fi
  elif [ $? -le 128 ]; then
    # end of file: every process of the test has ended
    exit 0
  fi
done
