#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Summarise the feature files of the sattn demo, and check them.

Reads the recording written by make-signal.py (raw F32LE + .json sidecar),
the per-frame features (sattn output=frames) and, optionally, the pooled
features (sattn output=mean), all raw F32LE interleaved.  Prints per-sensor
statistics, where the transient shows up, and what became of the dropout.

Exits with status 1 when the features break the element's contract:
  - output=frames: one feature frame per input frame, all finite;
  - frames whose input had a NaN (invalid-frames=mask) come out as zeros;
  - output=mean with start=pad: ceil(frames / hop) rows, all finite;
  - the feature energy peaks within a window of the transient.

Usage: summarise-features.py SIGNAL.f32 FRAMES.f32 [--pooled MEAN.f32]
           [--window 64] [--hop 16] [--launch "pipeline text"]
"""
import argparse
import json
import math
import sys

import numpy as np

LEVELS = " .:-=+*#%@"


def sparkline(values, width):
    """One character per column: the column's largest value, 0..max."""
    cols = np.array_split(values, width)
    peak = np.array([c.max() if len(c) else 0.0 for c in cols])
    top = peak.max() if peak.size and peak.max() > 0 else 1.0
    idx = np.clip((peak / top * (len(LEVELS) - 1)).round().astype(int),
                  0, len(LEVELS) - 1)
    return "".join(LEVELS[i] for i in idx)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("signal")
    ap.add_argument("features")
    ap.add_argument("--pooled")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--hop", type=int, default=16)
    ap.add_argument("--launch", default="")
    a = ap.parse_args()

    with open(a.signal + ".json", encoding="utf-8") as f:
        meta = json.load(f)
    rate, ch, n = meta["rate"], meta["channels"], meta["frames"]
    x = np.fromfile(a.signal, dtype="<f4").reshape(n, ch).astype(np.float64)
    raw = np.fromfile(a.features, dtype="<f4")
    problems = []

    print("sattn demo: %d sensors at %d Hz, %.1f s (%d frames)"
          % (ch, rate, n / rate, n))
    if a.launch:
        print("pipeline:   %s" % a.launch)

    if raw.size != n * ch:
        problems.append("output=frames gave %d floats, expected %d (%d "
                        "frames x %d channels)" % (raw.size, n * ch, n, ch))
        y = None
    else:
        y = raw.reshape(n, ch).astype(np.float64)
        print("features:   %d frames out for %d in" % (n, n))

    if y is not None:
        bad = int((~np.isfinite(y)).sum())
        if bad:
            problems.append("%d non-finite feature values" % bad)
        else:
            print("            every feature value finite")

        # the dropout: NaN input frames must give zero rows
        d = meta.get("dropout")
        if d:
            rows = y[d["frame"]:d["frame"] + d["frames"]]
            zero = int((np.abs(rows).max(axis=1) == 0).sum())
            print("dropout:    sensor %d read NaN for %d frames at t = "
                  "%.3f s: %d of those rows are zeros (masked), no NaN "
                  "reached the other frames"
                  % (d["sensor"], d["frames"], d["frame"] / rate, zero))
            if zero != d["frames"]:
                problems.append("%d of %d NaN frames did not give a zero "
                                "row" % (d["frames"] - zero, d["frames"]))

        # per-sensor statistics over finite input samples / all features
        xm = np.where(np.isfinite(x), x, np.nan)
        print("\n%6s  %9s  %9s  %9s  %9s  %8s"
              % ("sensor", "in mean", "in energy", "feat mean",
                 "feat enrg", "ratio"))
        for c in range(ch):
            ie = np.nanmean(xm[:, c] ** 2)
            fe = np.mean(y[:, c] ** 2)
            print("%6d  %9.4f  %9.4f  %9.4f  %9.4f  %8.3f"
                  % (c, np.nanmean(xm[:, c]), ie, np.mean(y[:, c]), fe,
                     fe / ie if ie > 0 else float("nan")))
        print("(energy = mean square; ratio = feature / input energy)")

        # where the transient shows up: feature energy per 50 ms block
        tr = meta["transient"]
        block = max(1, rate // 20)
        nb = n // block
        e = (y[:nb * block] ** 2).sum(axis=1).reshape(nb, block).mean(axis=1)
        med = float(np.median(e))
        peak = int(np.argmax(e))
        t_peak = peak * block / rate
        t_tr = tr["frame"] / rate
        per_sensor = (y[peak * block:(peak + 1) * block] ** 2).mean(axis=0)
        base = np.median((y[:nb * block] ** 2).reshape(nb, block, ch)
                         .mean(axis=1), axis=0)
        lift = per_sensor / np.maximum(base, 1e-30)
        loud = [c for c in range(ch) if lift[c] > 4.0]
        print("\ntransient:  injected at t = %.3f s on sensors %s"
              % (t_tr, ",".join(str(s) for s in tr["sensors"])))
        print("            feature energy peaks at t = %.3f-%.3f s, %.1fx "
              "the median 50 ms block; sensors above 4x their median: %s"
              % (t_peak, t_peak + block / rate,
                 e[peak] / med if med > 0 else float("inf"),
                 ",".join(str(c) for c in loud) or "none"))
        lo = t_tr - (a.window + block) / rate
        hi = t_tr + tr["frames"] / rate
        if not lo <= t_peak <= hi:
            problems.append("feature energy peaks at %.3f s, outside "
                            "[%.3f, %.3f] around the transient"
                            % (t_peak, lo, hi))
        width = 60
        print("\nfeature energy above its median over time (%d columns "
              "of %.2f s, '@' = peak):" % (width, n / rate / width))
        print("  |%s|" % sparkline(np.maximum(e - med, 0.0), width))
        print("  0 s%s%.0f s" % (" " * (width - 4), n / rate))

    if a.pooled:
        p = np.fromfile(a.pooled, dtype="<f4")
        want = math.ceil(n / a.hop)
        if p.size != want * ch:
            problems.append("output=mean gave %d floats, expected %d rows "
                            "x %d" % (p.size, want, ch))
        else:
            p = p.reshape(want, ch).astype(np.float64)
            if not np.isfinite(p).all():
                problems.append("non-finite values in the pooled features")
            print("\npooled (output=mean): %d windows, one per %d frames "
                  "(%g per second), all finite" % (want, a.hop, rate / a.hop))

    if problems:
        for msg in problems:
            print("FAIL: %s" % msg, file=sys.stderr)
        return 1
    print("\nchecks passed: frames in == frames out, all finite, dropout "
          "masked, transient located")
    return 0


if __name__ == "__main__":
    sys.exit(main())
