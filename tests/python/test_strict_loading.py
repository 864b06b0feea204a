#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The loader runs every tensor of a whole model or refuses the file,
naming what it would not use (docs/models.md "Tensors"), and reads every
metadata key with one vocabulary.

Each case writes a small whole model (a Linear front end, N encoder
layers, a head) with common.write_safetensors, changes one thing, and
loads it through sattn.Model.from_safetensors (the one loader):
  - layers numbered 0 and 2 (it ran as layer 0 alone, byte for byte);
  - a layer renamed encoder.layer.1.* (it was dropped);
  - 4097 layers (it ran 4096); a head of 65537 classes;
  - an unknown tensor, a tensor of a part the model does not have
    (pool.weight with mean pooling, embed.* beside conv.*), a
    non-canonical layer index (encoder.layers.01.*);
  - metadata the parser refuses (num_heads " 2", norm_eps nan, pooling
    "median", sample_rate -5, channels 1e9, frame_size 0, hop > window,
    norm_first "yes");
and the untouched file, which must load and run.
"""
import os
import sys
import tempfile
import unittest

import numpy as np

import sattn
from common import write_safetensors

D, F, FF, C, H = 8, 4, 16, 3, 2


def layer(rng, i):
    p = "encoder.layers.%d." % i
    return {
        p + "self_attn.in_proj_weight": rng.randn(3 * D, D) * 0.3,
        p + "self_attn.in_proj_bias": rng.randn(3 * D) * 0.1,
        p + "self_attn.out_proj.weight": rng.randn(D, D) * 0.3,
        p + "self_attn.out_proj.bias": rng.randn(D) * 0.1,
        p + "linear1.weight": rng.randn(FF, D) * 0.3,
        p + "linear1.bias": rng.randn(FF) * 0.1,
        p + "linear2.weight": rng.randn(D, FF) * 0.3,
        p + "linear2.bias": rng.randn(D) * 0.1,
        p + "norm1.weight": 1 + rng.randn(D) * 0.1,
        p + "norm1.bias": rng.randn(D) * 0.1,
        p + "norm2.weight": 1 + rng.randn(D) * 0.1,
        p + "norm2.bias": rng.randn(D) * 0.1,
    }


def model(layers=2, seed=0):
    rng = np.random.RandomState(seed)
    t = {"embed.weight": rng.randn(D, F) * 0.3, "embed.bias": rng.randn(D)}
    for i in layers if isinstance(layers, (list, tuple)) else range(layers):
        t.update(layer(rng, i))
    t["head.weight"] = rng.randn(C, D)
    t["head.bias"] = rng.randn(C)
    return t


class Strict(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.n = 0

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, tensors, meta=None):
        self.n += 1
        path = os.path.join(self.tmp.name, "m%d.safetensors" % self.n)
        md = {"num_heads": str(H)}
        md.update(meta or {})
        write_safetensors(path, tensors, md)
        return path

    def refused(self, tensors, meta, *words):
        path = self.write(tensors, meta)
        with self.assertRaises(sattn.SattnError) as cm:
            sattn.Model.from_safetensors(path)
        msg = str(cm.exception)
        for w in words:
            self.assertIn(w, msg)
        print("refused: %s" % msg.split(": ", 1)[-1])
        return msg

    def test_good_file_runs(self):
        m = sattn.Model.from_safetensors(self.write(model(2)))
        self.assertEqual(m.layers, 2)
        s = sattn.Stream(m, window=8, hop=4, output="classes")
        rows, _ = s.push(np.random.RandomState(1).randn(16, F)
                         .astype(np.float32))
        self.assertEqual(rows.shape, (4, C))
        self.assertTrue(np.allclose(rows.sum(1), 1.0, atol=1e-6))

    def test_gap_in_layers(self):
        self.refused(model([0, 2]), None, "numbered up to 2",
                     "no layer 1", "without gaps")

    def test_renamed_layer(self):
        t = model(2)
        t = {k.replace("encoder.layers.1.", "encoder.layer.1."): v
             for k, v in t.items()}
        self.refused(t, None, "would not use", "encoder.layer.1.")

    def test_too_many_layers(self):
        rng = np.random.RandomState(3)
        t = model(1)
        one = layer(rng, 0)
        for i in range(1, 4097):
            t.update({k.replace("layers.0.", "layers.%d." % i): v
                      for k, v in one.items()})
        self.refused(t, None, "4097 encoder layers", "at most 4096")

    def test_too_many_classes(self):
        # a head of 65537 classes is refused with the count (before its
        # rows are copied); 65536 loads
        t = model(1)
        for c, ok in ((65536, True), (65537, False)):
            t["head.weight"] = np.zeros((c, D))
            t["head.bias"] = np.zeros(c)
            if ok:
                m = sattn.Model.from_safetensors(self.write(t))
                self.assertEqual(m.classes, c)
            else:
                self.refused(t, None, "65537 classes", "at most 65536")

    def test_unused_tensors(self):
        t = model(1)
        t["extra.weight"] = np.zeros(3)
        self.refused(t, None, "1 tensor", "'extra.weight'")
        t = model(1)
        t["pool.weight"] = np.zeros((1, D))
        self.refused(t, {"pooling": "mean"}, "'pool.weight'")
        t = model(1)
        t["encoder.layers.01.linear1.weight"] = np.zeros((FF, D))
        self.refused(t, None, "'encoder.layers.01.linear1.weight'")
        t = model(1)
        t["conv.weight"] = np.zeros((D, F, 1))
        self.refused(t, {"conv_stride": "1"}, "two front ends")

    def test_metadata_vocabulary(self):
        cases = [
            ({"num_heads": " 2"}, "'num_heads' is ' 2'", "digits only"),
            ({"norm_eps": "nan"}, "'norm_eps' is 'nan'", "finite number"),
            ({"norm_eps": "-0.5"}, "'norm_eps' is '-0.5'", ">= 0"),
            ({"pooling": "median"}, "'pooling' is 'median'", "mean, last"),
            ({"sample_rate": "-5"}, "'sample_rate' is '-5'", "from 1"),
            ({"channels": "1e9"}, "'channels' is '1e9'", "digits only"),
            ({"frame_size": "0"}, "'frame_size' is '0'", "from 1"),
            ({"window": "8", "hop": "9"}, "'hop' (9) is longer"),
            ({"norm_first": "yes"}, "'norm_first' is 'yes'",
             "1, 0, true or false"),
            ({"channels": "3"}, "'channels' is 3, which does not divide"),
            ({"channels": "2", "frame_size": "4"}, "is 8 values per frame"),
        ]
        for meta, *words in cases:
            with self.subTest(meta=meta):
                self.refused(model(1), meta, *words)
        # the one vocabulary: "true" and "1" alike, for layers and models
        for v in ("true", "1", "True", "0", "false"):
            sattn.Model.from_safetensors(self.write(model(1),
                                                    {"norm_first": v}))


if __name__ == "__main__":
    if not hasattr(sattn.Model, "from_safetensors"):
        sys.exit(77)
    unittest.main(verbosity=2)
