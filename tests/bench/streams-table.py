#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Live streams per core: the streams/latency table of a whole model.

    streams-table.py --streams-bin BUILD/tests/bench/sattn-streams
                     --model FILE [--cpu K] [--seconds S] [--quick]

Runs sattn-streams pinned to one CPU (taskset -c K; default the highest
this process may use) at 1, 16 and 64 streams, as N pipelines in one
process and as one pipeline of N branches, with precision=exact and
precision=fast, and once more at 64 streams in lock-step (every stream's
window due at the same instant: the worst case).  Each run pushes 10 ms
buffers of the model's input contract in real time, ends every stream
with EOS and counts the windows: none may be missing.  Prints one
markdown table: CPU per second of stream (as % of one core), decision
latency p50 / p99 / max in microseconds, p50 of the first and last third
(rising latency = the core does not keep up), pacing lag, and whether the
run kept real time.  Exit status 1 when a run lost a window.
"""
import argparse
import json
import os
import subprocess
import sys


def default_cpu():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                last = line.split()[1].split(",")[-1]
                return int(last.split("-")[-1])
    return 0


def run(args, n, branches, precision, lockstep):
    cmd = ["taskset", "-c", str(args.cpu), args.streams_bin, "--model",
           args.model, "--streams", str(n), "--seconds", str(args.seconds),
           "--precision", precision]
    if branches:
        cmd.append("--branches")
    if lockstep:
        cmd.append("--lockstep")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    rec = None
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
    if rec is None:
        sys.stderr.write("$ %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    else:
        rec["status"] = p.returncode
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams-bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--quick", action="store_true",
                    help="3 s per run instead of --seconds")
    args = ap.parse_args()
    if args.cpu is None:
        args.cpu = default_cpu()
    if args.quick:
        args.seconds = 3.0
    runs = []
    for precision in ("exact", "fast"):
        for branches in (False, True):
            for n in (1, 16, 64):
                runs.append((n, branches, precision, False))
    runs.append((64, False, "fast", True))
    runs.append((64, False, "exact", True))
    print("Live streams of %s on CPU %d (taskset), %g s each, 10 ms "
          "buffers, real time:" % (os.path.basename(args.model), args.cpu,
                                   args.seconds))
    print()
    print("| precision | streams | as | CPU (% of one core) | windows "
          "(missing) | latency p50 µs | p99 µs | max µs | p50 first / last "
          "third µs | pacing lag ms | real time |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---:|---|")
    lost = 0
    for n, branches, precision, lockstep in runs:
        r = run(args, n, branches, precision, lockstep)
        how = ("branches" if branches else "pipelines") + \
            (", lock-step" if lockstep else "")
        if r is None:
            print("| %s | %d | %s | run failed (stderr above) | | | | | | "
                  "| |" % (precision, n, how))
            lost += 1
            continue
        lost += r["missing"] > 0
        # the tool's own verdict: no window lost, pushes never a buffer
        # behind, no rising latency
        kept = "yes" if r["status"] == 0 else "no"
        print("| %s | %d | %s | %.1f | %d (%d) | %.0f | %.0f | %.0f | "
              "%.0f / %.0f | %.2f | %s |"
              % (precision, n, how, 100 * r["cpu_per_s"], r["windows"],
                 r["missing"], r["p50_us"], r["p99_us"], r["max_us"],
                 r["first_p50_us"], r["last_p50_us"], r["behind_ms"], kept))
        sys.stdout.flush()
    print()
    print("latency: from the input buffer holding a window's last frame "
          "entering sattn to that window's row leaving it (after its "
          "sattn-class message, if any); real time: no window lost, the "
          "pushes never a buffer behind and no rising latency")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
