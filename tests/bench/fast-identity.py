# SPDX-License-Identifier: LGPL-2.1-or-later
"""Byte identity at precision=fast (which sattn-dump-outputs and
whole-identity.py, both at precision=exact, do not cover): one line per
workload, its SHA-256 over every row and row info, for the library
SATTN_LIBRARY names at the SIMD level SATTN_SIMD says.  Run it per
library and level, then compare the listings:

    for lib in OLD NEW; do for l in 0 1 2; do
      SATTN_SIMD=$l SATTN_LIBRARY=$lib/core/libsattn.so \\
        PYTHONPATH=python:tests/python \\
        python3 tests/bench/fast-identity.py /tmp/fi-$(basename $lib)-$l
    done; done; cmp ...

The workloads: attention layers (the incremental executor) -- narrow
heads whose Q, K (and V) the per-head tasks project from the packed
weights, wide heads, RoPE, ALiBi, causal and lookback, extra keys, no
projections, outputs frames, window, mean and last -- and encoder layers
(post-norm relu, pre-norm gelu), each at threads 1 and 2 with one push
or pushes of 1, 5 and 17 frames; then whole-identity.py's whole models
(outputs classes, mean and window).  Every stream at precision=fast, with
a NaN frame and a GAP run.  Needs PyTorch (encoder layers and whole
models are written with it)."""
import importlib.util
import os
import sys
import tempfile

import numpy as np

import common
import sattn
from sattn.export import encoder_layer_metadata, save_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))


def _whole_identity():
    spec = importlib.util.spec_from_file_location(
        "whole_identity", os.path.join(HERE, "whole-identity.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# d_model, heads, d_head, keyword arguments of sattn.Model, extra weights
LAYERS = [
    ("narrow", 32, 4, 8, {}, {}),
    ("narrow-nobias", 24, 3, 8, {}, {"bias": False}),
    ("narrow-causal", 32, 2, 16, {"causal": True}, {}),
    ("wide", 64, 2, 32, {}, {}),
    ("rope", 32, 4, 8, {"positions": "rope"}, {}),
    ("alibi", 32, 4, 8, {"positions": "alibi", "causal": True}, {}),
    ("lookback", 16, 2, 8, {"lookback": 5}, {}),
    ("extra-keys", 24, 3, 8, {}, {"biaskv": True, "zero": True}),
    ("no-proj", 16, 2, 8, {}, {"proj": False, "out": False, "bo": False}),
]


def layer_models(tmp):
    for i, (name, d, heads, dh, kw, wkw) in enumerate(LAYERS):
        w = common.random_weights(np.random.default_rng(700 + i), d, heads,
                                  dh, dh, d, **wkw)
        zero = w.pop("add_zero_attn")
        yield name, sattn.Model(d, heads, add_zero_attn=zero, **kw, **w), d
    import torch
    for i, (norm_first, act) in enumerate(((False, "relu"), (True, "gelu"))):
        torch.manual_seed(800 + i)
        layer = torch.nn.TransformerEncoderLayer(
            32, 4, dim_feedforward=64, dropout=0.0, activation=act,
            norm_first=norm_first, batch_first=True)
        with torch.no_grad():
            for p in layer.parameters():
                p.copy_(torch.randn(p.shape) * 0.3)
        path = os.path.join(tmp, "enc%d.safetensors" % i)
        save_safetensors(path, layer.state_dict(),
                         encoder_layer_metadata(layer.eval()))
        yield "encoder-%s" % act, sattn.Model.from_safetensors(path), 32


def frames(n, h, F):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n * 20 + 7, F)).astype(np.float32)
    x[n + 3, 1] = np.nan
    valid = np.ones(len(x), np.uint8)
    valid[2 * n:2 * n + h + 2] = 0
    return x, valid


def run(out, digest, name, m, n, h, F, outputs):
    x, valid = frames(n, h, F)
    for output in outputs:
        for threads in (1, 2):
            for blocks in ((len(x),), (1, 5, 17)):
                out.write("%s %s t%d %s %s\n" % (
                    name, output, threads, "x".join(map(str, blocks)),
                    digest(m, n, h, output, threads, blocks, x, valid,
                           precision="fast")))


def main(out_path):
    wi = _whole_identity()
    with tempfile.TemporaryDirectory() as tmp, open(out_path, "w") as out:
        for name, m, d in layer_models(tmp):
            run(out, wi.digest, name, m, 16, 4, d,
                ("frames", "window", "mean", "last"))
        for name, path, n, h, F in wi.models(tmp):
            run(out, wi.digest, name, sattn.Model.from_safetensors(path), n,
                h, F,
                ("classes", "mean", "window"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fast-identity.py OUT")
    main(sys.argv[1])
