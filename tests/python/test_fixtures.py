"""The PyTorch fixtures of tests/data (fixtures.json, made by
tests/data/make-fixtures.py) through the Python package: each
nn.MultiheadAttention state dict loaded with Model.from_safetensors, run
by attend() and by a Stream (one window of the fixture's n frames, where
the fixture has no key padding), compared with PyTorch's float64 output
and attention weights.  Bound (as tests/weights/test-weights-parity.c):
max-abs <= 1e-5 * (1 + max |torch|), for the output and the weights.
Every fixture's figures are printed."""

import json
import os
import unittest

import numpy as np

import common
import sattn

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
