#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Summarise meson test logs as one line: "N passed, N failed[, N skipped]".

Reads one or more meson-logs/testlog.json files (one JSON object per line).
OK and EXPECTEDFAIL count as passed, SKIP as skipped, anything else (FAIL,
UNEXPECTEDPASS, TIMEOUT, ERROR, INTERRUPT) as failed.

  --runner-status RC   exit status of `meson test`; if it is nonzero but the
                       logs show no failure (meson itself failed, or the log
                       is missing), one failure is counted for it
  --extra-passed N / --extra-failed N
                       add results from elsewhere (e.g. a fuzz run)
  --counts             print "passed failed skipped" instead (for scripts)

Exit status: 0 when nothing failed, 1 otherwise.
"""
import argparse
import json
import os
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}


def read_log(path):
    passed = failed = skipped = 0
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            result = rec.get("result", "")
            if result in PASSED:
                passed += 1
            elif result in SKIPPED:
                skipped += 1
            else:
                failed += 1
                names.append("%s (%s)" % (rec.get("name", "?"), result))
    return passed, failed, skipped, names


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*")
    ap.add_argument("--runner-status", type=int, default=0)
    ap.add_argument("--extra-passed", type=int, default=0)
    ap.add_argument("--extra-failed", type=int, default=0)
    ap.add_argument("--counts", action="store_true")
    a = ap.parse_args()

    passed, failed, skipped = a.extra_passed, a.extra_failed, 0
    log_failed = 0
    for path in a.logs:
        if not os.path.isfile(path):
            print("test-summary: no test log at %s" % path, file=sys.stderr)
            continue
        p, f, s, names = read_log(path)
        passed += p
        failed += f
        log_failed += f
        skipped += s
        for n in names:
            print("test-summary: failed: %s" % n, file=sys.stderr)
    if a.runner_status != 0 and log_failed == 0:
        print("test-summary: meson test exited with status %d but no test "
              "failed: counting one failure" % a.runner_status,
              file=sys.stderr)
        failed += 1

    if a.counts:
        print(passed, failed, skipped)
    else:
        line = "%d passed, %d failed" % (passed, failed)
        if skipped:
            line += ", %d skipped" % skipped
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
