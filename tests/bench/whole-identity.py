# SPDX-License-Identifier: LGPL-2.1-or-later
"""Byte identity of whole models per window (which sattn-dump-outputs,
tied to the API of 580feba, does not cover): one line per workload, its
SHA-256 over every row and row info, for the library SATTN_LIBRARY names
at the SIMD level SATTN_SIMD says.  Run it per library and level, then
compare the listings:

    for lib in OLD NEW; do for l in 0 1 2; do
      SATTN_SIMD=$l SATTN_LIBRARY=$lib/core/libsattn.so \\
        PYTHONPATH=python:tests/python \\
        python3 tests/bench/whole-identity.py /tmp/wi-$(basename $lib)-$l
    done; done; cmp ...

The workloads (precision=exact, the default): the shipped recogniser
(its file's window and hop) and random sattn.nn.SignalTransformer models (every
third configuration of tests/python/test_whole_models.py's matrix, its
extras and its front ends: conv stems, RMS and power normalisation, CLS
rows, standardisation, attention and max pooling; window 12, hop 4);
each with a NaN frame and a GAP run, outputs classes, mean and window,
threads 1 and 2, one push or pushes of 1, 5 and 17 frames, then a
drain.  Needs PyTorch (the random models are written with it)."""
import hashlib
import os
import sys
import tempfile

import numpy as np

import sattn
from sattn.nn import save_safetensors
from test_whole_models import EXTRAS, FAST_EXTRAS, make_net, matrix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def models(tmp):
    rec = os.path.join(ROOT, "examples", "recognizer",
                       "recognizer.safetensors")
    k = sattn.Model.from_safetensors(rec).contract
    yield ("recognizer", rec, k["window"], k["hop"],
           k["frame_size"] * k["channels"])
    for i, c in enumerate(matrix()[::3] + EXTRAS + FAST_EXTRAS):
        path = os.path.join(tmp, "m%d.safetensors" % i)
        save_safetensors(make_net(900 + i, **c), path)
        yield "m%d" % i, path, 12, 4, 8


def digest(m, n, h, output, threads, blocks, x, valid, precision="exact"):
    """sha256 of every row and row info of a stream pushed in blocks
    (sizes cycled), then drained."""
    s = sattn.Stream(m, n, h, output, threads=threads, collect_stats=True,
                     precision=precision)
    hs = hashlib.sha256()
    i, b = 0, 0
    while i < len(x):
        k = blocks[b % len(blocks)]
        r, info = s.push(x[i:i + k], valid=valid[i:i + k])
        hs.update(np.ascontiguousarray(r).tobytes())
        hs.update(info.tobytes())
        i, b = i + k, b + 1
    r, info = s.drain()
    hs.update(np.ascontiguousarray(r).tobytes())
    hs.update(info.tobytes())
    return hs.hexdigest()


def main(out_path):
    with tempfile.TemporaryDirectory() as tmp, open(out_path, "w") as out:
        for name, path, n, h, F in models(tmp):
            m = sattn.Model.from_safetensors(path)
            rng = np.random.default_rng(5)
            x = rng.standard_normal((n * 20 + 7, F)).astype(np.float32)
            x[n + 3, 1] = np.nan
            valid = np.ones(len(x), np.uint8)
            valid[2 * n:2 * n + h + 2] = 0
            for output in ("classes", "mean", "window"):
                for threads in (1, 2):
                    for blocks in ((len(x),), (1, 5, 17)):
                        out.write("%s %s t%d %s %s\n" % (
                            name, output, threads,
                            "x".join(map(str, blocks)),
                            digest(m, n, h, output, threads, blocks, x,
                                   valid)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: whole-identity.py OUT")
    main(sys.argv[1])
