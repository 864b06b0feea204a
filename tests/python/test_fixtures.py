# SPDX-License-Identifier: LGPL-2.1-or-later
"""The PyTorch fixtures of tests/data (fixtures.json, made by
tests/data/make-fixtures.py) through the Python package: each
nn.MultiheadAttention state dict loaded with Model.from_safetensors, run
by attend() and by a Stream (one window of the fixture's n frames, where
the fixture has no key padding), compared with PyTorch's float64 output
and attention weights; and modules of other layouts (Hugging Face,
LLaMA, the seeds' W_q/W_k/W_v) written here.  Bound (as
tests/weights/test-weights-parity.c):
max-abs <= 1e-5 * (1 + max |torch|), for the output and the weights.
Every fixture's figures are printed.  Also: the reader's errors.
Registered only when libsattn has the weights reader."""

import json
import os
import tempfile
import unittest

import numpy as np

import common
import sattn
from sattn import _lib

DATA = os.path.join(common.SOURCE_ROOT, "tests", "data")


def load_f64(fx):
    raw = np.fromfile(os.path.join(DATA, fx["data"]), dtype="<f8")
    sizes = [int(np.prod(fx[k])) for k in ("x_shape", "out_shape",
                                           "attn_shape")]
    if raw.size != sum(sizes):
        raise AssertionError("%s: %d doubles, expected %d"
                             % (fx["data"], raw.size, sum(sizes)))
    x, out, attn = np.split(raw, np.cumsum(sizes)[:2])
    return (x.reshape(fx["x_shape"]), out.reshape(fx["out_shape"]),
            attn.reshape(fx["attn_shape"]))


class TestFixtures(unittest.TestCase):
    worst_out = common.Worst("PyTorch fixtures, attend output")
    worst_w = common.Worst("PyTorch fixtures, attend weights")
    worst_s = common.Worst("PyTorch fixtures, stream output")

    @classmethod
    def tearDownClass(cls):
        cls.worst_out.report()
        cls.worst_w.report()
        cls.worst_s.report()

    def bound(self, d):
        return d.max_abs <= common.OUT_REL_BOUND * (1 + d.max_ref)

    def test_fixtures(self):
        with open(os.path.join(DATA, "fixtures.json")) as f:
            manifest = json.load(f)
        fixtures = manifest["fixtures"]
        self.assertGreater(len(fixtures), 0)
        for fx in fixtures:
            with self.subTest(fixture=fx["name"]):
                m = sattn.Model.from_safetensors(
                    os.path.join(DATA, fx["weights"]), fx["prefix"],
                    fx["heads"], add_zero_attn=fx["add_zero_attn"],
                    causal=fx["causal"], lookback=fx["lookback"])
                x, want, want_w = load_f64(fx)
                self.assertEqual(m.extra_keys, fx["extra_keys"])
                # the inputs are float32 values stored as float64
                x32 = x.astype(np.float32)
                self.assertTrue(np.array_equal(x32, x))
                out, wts = sattn.attend(m, x32, key_valid=fx["key_valid"],
                                        need_weights=True)
                d, dw = common.Diff(out, want), common.Diff(wts, want_w)
                self.worst_out.add(d)
                self.worst_w.add(dw)
                print("# %-32s output %s" % (fx["name"], d))
                print("# %-32s weights %s" % ("", dw))
                self.assertTrue(self.bound(d), "output %s" % d)
                self.assertTrue(self.bound(dw), "weights %s" % dw)
                if fx["key_valid"] is None:
                    n = x.shape[0]
                    s = sattn.Stream(m, n, n)
                    rows, info = s.push(x32)
                    ds = common.Diff(rows, want)
                    self.worst_s.add(ds)
                    self.assertTrue(self.bound(ds), "stream %s" % ds)
                    self.assertEqual(list(info["first"]), list(range(n)))


class TestLayouts(unittest.TestCase):
    """Attention modules of other naming conventions, written here from
    random weights, loaded by Model.from_safetensors and compared with the
    shared float64 reference fed the same arrays (bound as above)."""

    worst = common.Worst("other layouts from safetensors, attend output")

    @classmethod
    def tearDownClass(cls):
        cls.worst.report()

    def test_layouts(self):
        rng = np.random.default_rng(40)
        e, h = 8, 2
        # (layout, d_head, names of q/k/v/out Linear layers, biases)
        cases = [
            ("seeds", 8, ("W_q", "W_k", "W_v", None), False),
            ("hf", 4, ("q_proj", "k_proj", "v_proj", "out_proj"), True),
            ("llama", 6, ("wq", "wk", "wv", "wo"), False),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            for layout, dh, names, bias in cases:
                w = common.random_weights(rng, e, h, dh, dh, e, bias=bias,
                                          out=names[3] is not None,
                                          bo=bias and names[3] is not None)
                tensors = {}
                for (wk, bk), name in zip((("wq", "bq"), ("wk", "bk"),
                                           ("wv", "bv"), ("wo", "bo")),
                                          names):
                    if name is None:
                        continue
                    tensors[name + ".weight"] = w[wk]
                    if w.get(bk) is not None:
                        tensors[name + ".bias"] = w[bk]
                path = os.path.join(tmp, layout + ".safetensors")
                common.write_safetensors(path, tensors, {"num_heads": str(h)})
                m = sattn.Model.from_safetensors(path, causal=True)
                self.assertEqual(m.layout, layout)
                self.assertEqual((m.heads, m.config["d_head"]), (h, dh))
                self.assertEqual(m.report["heads_from"], "metadata")
                x = rng.standard_normal((7, e)).astype(np.float32)
                ref, _ = common.reference(x, h, w, causal=True)
                d = common.Diff(sattn.attend(m, x), ref)
                self.worst.add(d)
                print("# %-8s d_head %d: %s" % (layout, dh, d))
                self.assertTrue(d.out_ok(), "%s: %s" % (layout, d))
                # a heads value the file contradicts is refused in words
                with self.assertRaises(sattn.SattnError) as cm:
                    sattn.Model.from_safetensors(path, heads=h * 2)
                self.assertIn(str(h), str(cm.exception))


class TestOverflowParts(unittest.TestCase):
    """Stream.stats()["overflow_parts"]: the rows of a pre-norm encoder
    layer whose linear2 overflows float32 (entries of 3e38 on hidden
    units of about 1) are all counted in "linear2"."""

    def test_linear2(self):
        eye = np.eye(2, dtype=np.float32)
        t = {"self_attn.in_proj_weight": np.vstack([eye] * 3),
             "self_attn.in_proj_bias": np.zeros(6),
             "self_attn.out_proj.weight": eye,
             "self_attn.out_proj.bias": np.zeros(2),
             "linear1.weight": np.vstack([eye, -eye]),
             "linear1.bias": np.zeros(4),
             "linear2.weight": np.full((2, 4), 3e38),
             "linear2.bias": np.zeros(2),
             "norm1.weight": np.ones(2), "norm1.bias": np.zeros(2),
             "norm2.weight": np.ones(2), "norm2.bias": np.zeros(2)}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "layer.safetensors")
            common.write_safetensors(path, t, {"norm_first": "true"})
            m = sattn.Model.from_safetensors(path, heads=1)
        s = sattn.Stream(m, 8, 4)
        x = np.random.default_rng(4).standard_normal((16, 2))
        rows, info = s.push(x)
        self.assertFalse(np.any(rows))
        self.assertFalse(np.any(info["valid"]))
        st = s.stats(clear=True)
        self.assertEqual(st["overflow_rows"], 16)
        self.assertEqual(st["overflow_parts"]["linear2"], 16)
        self.assertEqual(sum(st["overflow_parts"].values()), 16)
        self.assertEqual(s.stats()["overflow_parts"]["linear2"], 0)


class TestWeightsErrors(common.RaisesStatus, unittest.TestCase):
    """A weights file the reader refuses raises SattnError with the
    reader's message, naming the file and what is wrong."""

    def test_weights_file_errors(self):
        nobias = os.path.join(DATA, "e16_h2_nobias.safetensors")
        e = self.raises(_lib.E_IO, sattn.Model.from_safetensors,
                        os.path.join(DATA, "no-such-file.safetensors"))
        self.assertIn("no-such-file.safetensors", str(e))
        e = self.raises(_lib.E_SHAPE, sattn.Model.from_safetensors, nobias,
                        "", 3)
        self.assertIn("heads = 3", str(e))
        self.assertIn(nobias, str(e))
        e = self.raises(_lib.E_MISSING, sattn.Model.from_safetensors, nobias,
                        "encoder.", 2)
        self.assertIn("'encoder.'", str(e))
        e = self.raises(_lib.E_SHAPE, sattn.Model.from_safetensors,
                        os.path.join(DATA, "kdim.safetensors"), "", 2)
        self.assertIn("k_proj_weight", str(e))
        e = self.raises(_lib.E_FORMAT, sattn.Model.from_safetensors,
                        os.path.join(DATA, "fixtures.json"), "", 2)
        self.assertIn("fixtures.json", str(e))

if __name__ == "__main__":
    unittest.main(verbosity=2)
