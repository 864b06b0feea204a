#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Runs examples/health-plot.py on a short signal and checks what it
claims: one printed line per health message, a saturation warning for the
loud middle third and none for the quiet rest, and a PNG written.

Usage: test-health-plot.py <examples/health-plot.py>
Exit 77 (skipped) when python3-gi / GStreamer's typelib, numpy or
matplotlib cannot be imported by this interpreter.
"""
import os
import re
import subprocess
import sys
import tempfile

# run_bounded: a hang fails as "HANG:" with every thread's backtrace.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from common import run_bounded  # noqa: E402

try:
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst  # noqa: F401
    import numpy  # noqa: F401
    import matplotlib  # noqa: F401
except (ImportError, ValueError) as e:
    print("SKIP: {} cannot import what the example needs: {}".format(
        sys.executable, e))
    sys.exit(77)


def main():
    example = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "health.png")
        env = dict(os.environ, MPLCONFIGDIR=tmp, MPLBACKEND="Agg")
        # 1.5 s at 4 kHz, frames of 4 periods: 1500 frames, a window every
        # 8, one message per 100 ms: 15 messages.
        cmd = [sys.executable, example, "-o", png, "--seconds", "1.5",
               "--loud", "10", "--interval-ms", "100"]
        res = run_bounded(cmd, env=env, stderr=subprocess.STDOUT)
        print(res.stdout)
        if res.returncode != 0:
            print("FAIL: {} exited with {}".format(cmd, res.returncode))
            return 1
        lines = res.stdout.splitlines()
        health = [l for l in lines if l.startswith("t=")]
        warnings = [l for l in lines if l.startswith("WARNING")]
        errors = []
        if len(health) != 15:
            errors.append("{} health lines, want 15".format(len(health)))
        times = [float(re.match(r"t=\s*([0-9.]+)s", l).group(1))
                 for l in health]
        if times != sorted(times) or (times and times[0] != 0.0):
            errors.append("message times {} not increasing from 0"
                          .format(times))
        # Saturation only while the loud middle third (0.5 s to 1 s) is in
        # the window (64 ms).
        for t, l in zip(times, health):
            sat = int(re.search(r"saturated-rows=(\d+)/", l).group(1))
            if sat > 0 and not 0.4 <= t < 1.1:
                errors.append("saturated rows outside the loud part: " + l)
        if not any(int(re.search(r"saturated-rows=(\d+)/", l).group(1)) > 0
                   for l in health):
            errors.append("no saturated rows in the loud part")
        if len(warnings) != 1 or "saturated" not in warnings[0]:
            errors.append("want one saturation warning, got {}"
                          .format(warnings))
        if not re.search(r"15 health messages, 1 warnings, 1500 feature "
                         r"frames, 188 maps", res.stdout):
            errors.append("unexpected summary line")
        with open(png, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n":
            errors.append("{} is not a PNG".format(png))
        for e in errors:
            print("FAIL:", e)
        return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
