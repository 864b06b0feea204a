#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Generate a multichannel sensor recording for the sattn demo.

Writes raw interleaved float32 little-endian samples (one frame = one sample
of every sensor) and a JSON sidecar describing what was put where:

  - every sensor: a slow sine of its own frequency and phase, plus Gaussian
    noise;
  - a transient: a decaying burst on a few sensors at one moment;
  - a dropout: a few frames where one sensor reads NaN (a failed reading),
    which the element masks (invalid-frames=mask).

Usage: make-signal.py OUT.f32 [--rate 2000] [--seconds 10] [--channels 8]
                              [--transient-at 6.2] [--dropout-at 3.0]
                              [--seed 1]
"""
import argparse
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--transient-at", type=float, default=6.2)
    ap.add_argument("--transient-sensors", default="2,3,4")
    ap.add_argument("--dropout-at", type=float, default=3.0)
    ap.add_argument("--dropout-sensor", type=int, default=6)
    ap.add_argument("--dropout-frames", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    n = int(round(a.rate * a.seconds))
    t = np.arange(n) / a.rate
    c = np.arange(a.channels)
    freq = 1.0 + 0.75 * c                  # Hz, one per sensor
    phase = 0.9 * c
    x = np.sin(2 * np.pi * freq[None, :] * t[:, None] + phase[None, :])
    x += 0.3 * rng.standard_normal((n, a.channels))

    # transient: 100 ms of a decaying 80 Hz burst, amplitude 8
    sensors = [int(s) for s in a.transient_sensors.split(",")
               if s.strip() != "" and int(s) < a.channels]
    t0 = int(round(a.transient_at * a.rate))
    tlen = int(round(0.1 * a.rate))
    if t0 + tlen > n:
        sys.exit("make-signal: the transient does not fit in the recording")
    tb = np.arange(tlen) / a.rate
    burst = 8.0 * np.exp(-tb / 0.04) * np.sin(2 * np.pi * 80.0 * tb)
    for s in sensors:
        x[t0:t0 + tlen, s] += burst

    # dropout: NaN readings on one sensor
    d0 = int(round(a.dropout_at * a.rate))
    dropout = None
    if a.dropout_frames > 0 and a.dropout_sensor < a.channels:
        if d0 + a.dropout_frames > n:
            sys.exit("make-signal: the dropout does not fit in the recording")
        x[d0:d0 + a.dropout_frames, a.dropout_sensor] = np.nan
        dropout = {"frame": d0, "frames": a.dropout_frames,
                   "sensor": a.dropout_sensor}

    x.astype("<f4").tofile(a.out)
    meta = {
        "rate": a.rate, "channels": a.channels, "frames": n,
        "transient": {"frame": t0, "frames": tlen, "sensors": sensors},
        "dropout": dropout,
    }
    with open(a.out + ".json", "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
