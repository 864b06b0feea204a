#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Attention features of a .npy recording, offline, through libsattn's
Python package (a sattn.Stream, exactly what the element computes live).

The input is either n × d_model float frames, or 1-D audio cut into frames
of --frame-size consecutive samples (the element's framing for one
channel; a last, partial frame is zero-padded and said so).  Frames go
through the stream in blocks of --block frames, as a file reader would
hand them over, then drain() gives the rows of the frames still pending,
so that in frames mode every input frame has exactly one output row.
Frames with NaN/Inf samples follow --invalid (mask: their rows are zeros
and flagged).

Writes the rows (float32, rows × row size) to --out as .npy when given,
the rows' (first frame, frame count, valid) records to --out with
"-info" before the suffix, and prints a summary with the stream's
numeric-health statistics.

Examples:
    python3 examples/offline-npy.py rec.npy --window 64 --hop 16 --heads 2
    python3 examples/offline-npy.py audio.npy --frame-size 32 --output mean \\
        --weights attn.safetensors --heads 4 --out features.npy

Needs the sattn package (installed by meson into Python's site directory;
from a build tree: PYTHONPATH=python SATTN_LIBRARY=build/core/libsattn.so).
"""
import argparse
import os
import sys

import numpy as np

import sattn


def frames_of(a, frame_size):
    """(frames, note): n × d_model float32 frames of the recording."""
    if a.ndim == 2:
        return np.ascontiguousarray(a, dtype=np.float32), None
    if a.ndim != 1:
        raise SystemExit("expected a 1-D recording or n × d_model frames, "
                         "got shape %s" % (a.shape,))
    n = -(-a.size // frame_size)
    x = np.zeros(n * frame_size, dtype=np.float32)
    x[:a.size] = a
    note = None
    if a.size % frame_size:
        note = ("last frame: %d of %d samples, zero-padded"
                % (a.size % frame_size, frame_size))
    return x.reshape(n, frame_size), note


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("input", help=".npy: n × d_model frames or 1-D audio")
    ap.add_argument("--frame-size", type=int, default=16,
                    help="samples per frame of 1-D audio (default 16)")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--hop", type=int, default=16)
    ap.add_argument("--heads", type=int, default=0,
                    help="attention heads (default: the weights file's "
                    "num_heads, required when it records none; without "
                    "--weights, 1)")
    ap.add_argument("--output", default="frames",
                    choices=["frames", "window", "mean", "last", "classes"],
                    help="classes: a whole model's class probabilities "
                    "per window")
    ap.add_argument("--causal", action="store_true",
                    help="causal attention (default: as the weights file "
                    "says; checked against it)")
    ap.add_argument("--lookback", type=int, default=0)
    ap.add_argument("--invalid", default="mask",
                    choices=["mask", "zero", "error"])
    ap.add_argument("--weights", help="safetensors file of an attention "
                    "module, any layout libsattn reads (default: identity "
                    "projections)")
    ap.add_argument("--prefix", default="", help="tensor name prefix")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads computing the stream (1 = this one only, "
                    "0 = one per CPU); the rows are the same bytes")
    ap.add_argument("--block", type=int, default=4096,
                    help="frames per push (default 4096)")
    ap.add_argument("--out", help="write the rows here (.npy)")
    a = ap.parse_args(argv)

    x, note = frames_of(np.load(a.input), a.frame_size)
    n, d_model = x.shape
    try:
        if a.weights:
            model = sattn.Model.from_safetensors(
                a.weights, a.prefix, a.heads, d_model=d_model,
                causal=a.causal or None, lookback=a.lookback)
        else:
            model = sattn.Model(d_model, a.heads or 1, causal=a.causal,
                                lookback=a.lookback)
        stream = sattn.Stream(model, a.window, a.hop, a.output,
                              invalid=a.invalid, collect_stats=True,
                              threads=a.threads)
        rows, infos = [], []
        for i in range(0, n, max(1, a.block)):
            r, info = stream.push(x[i:i + a.block])
            rows.append(r)
            infos.append(info)
        r, info = stream.drain()
    except sattn.SattnError as e:
        print("%s: %s (%s)" % (a.input, e, e.status_name), file=sys.stderr)
        return 1
    rows = np.concatenate(rows + [r])
    info = np.concatenate(infos + [info])
    st = stream.stats()

    print("input:    %s, %d frames of %d floats%s"
          % (a.input, n, d_model, "; " + note if note else ""))
    print("model:    %r" % model)
    print("stream:   window %d, hop %d, output %s, invalid %s"
          % (a.window, a.hop, a.output, a.invalid))
    print("rows:     %d of %d floats, %d flagged not valid"
          % (rows.shape[0], rows.shape[1], int((info["valid"] == 0).sum())))
    print("windows:  %d; invalid frames %d; fully masked rows %d; "
          "saturated rows %d" % (st["windows"], st["invalid_frames"],
                                 st["fully_masked_rows"],
                                 st["saturated_rows"]))
    if st["rows"]:
        print("softmax:  mean max weight %.3f, mean normalised entropy "
              "%.3f over %d rows" % (st["mean_max_weight"],
                                     st["mean_entropy"], st["rows"]))
    if rows.size:
        energy = np.sqrt((rows.astype(np.float64) ** 2).mean(axis=1))
        k = int(energy.argmax())
        print("features: rms %.4g, peak row %d (frames %d..%d) rms %.4g"
              % (float(np.sqrt((energy ** 2).mean())), k,
                 int(info["first"][k]),
                 int(info["first"][k] + info["n_frames"][k] - 1),
                 float(energy[k])))
    if a.out:
        base, ext = os.path.splitext(a.out)
        np.save(a.out, rows)
        np.save(base + "-info" + (ext or ".npy"), info)
        print("wrote:    %s, %s" % (a.out, base + "-info" + (ext or ".npy")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
