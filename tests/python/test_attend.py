# SPDX-License-Identifier: LGPL-2.1-or-later
"""sattn.attend and sattn.Model (numpy weights) against the float64
reference shared by every suite (tests/common/reference.c), over random
models covering every weight, mask and geometry option; bounds in
common.py (output max-abs <= 1e-5 * (1 + max |ref|) and NMSE <= 1e-10,
weights max-abs <= 1e-5).  The worst figures are printed."""

import itertools
import unittest

import numpy as np

import common
import sattn


def build(rng, d_model, heads, flags, lookback=3):
    dims = "dims" in flags
    dh = d_model // heads + 2 if dims else d_model // heads
    dv = (d_model // heads) // 2 + 1 if dims else dh
    d_out = (d_model + 3 if dims else heads * dv) if "out" in flags \
        else heads * dv
    w = common.random_weights(
        rng, d_model, heads, dh, dv, d_out, proj="proj" in flags,
        bias="bias" in flags, out="out" in flags, bo="bo" in flags,
        biaskv="biaskv" in flags, zero="zero" in flags)
    kw = dict(scale=1.0 if "unit" in flags else 0.0,
              causal="causal" in flags,
              lookback=lookback if "lookback" in flags else 0)
    arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
    # d_head / d_value / d_out come from the arrays' shapes.
    m = sattn.Model(d_model, heads, add_zero_attn=w["add_zero_attn"],
                    **arrays, **kw)
    ref_kw = dict(kw, d_head=dh, d_value=dv)
    return m, w, ref_kw


FLAG_SETS = [
    (),
    ("proj",),
    ("proj", "bias"),
    ("proj", "bias", "out", "bo"),
    ("proj", "out", "causal"),
    ("proj", "bias", "out", "bo", "lookback", "causal"),
    ("proj", "bias", "out", "bo", "biaskv"),
    ("proj", "bias", "out", "zero", "causal"),
    ("proj", "bias", "out", "bo", "biaskv", "zero", "unit"),
    ("proj", "bias", "out", "bo", "dims"),
    ("proj", "out", "dims", "biaskv", "lookback"),
    ("bias", "bo"),
    ("lookback",),
]


class TestAttend(unittest.TestCase):
    worst_out = common.Worst("attend vs float64 reference, output")
    worst_w = common.Worst("attend vs float64 reference, weights")

    @classmethod
    def tearDownClass(cls):
        cls.worst_out.report()
        cls.worst_w.report()

    def check(self, m, w, ref_kw, x, masks, label):
        out, wts, st = sattn.attend(m, x, **masks, need_weights=True,
                                    need_stats=True)
        ref, ref_w = common.reference(x, m.heads, w, **ref_kw, **masks)
        d = common.Diff(out, ref)
        dw = common.Diff(wts, ref_w)
        self.worst_out.add(d)
        self.worst_w.add(dw)
        self.assertTrue(d.out_ok(), "%s: output %s" % (label, d))
        self.assertLessEqual(dw.max_abs, common.WEIGHT_BOUND,
                             "%s: weights %s" % (label, dw))
        self.assertEqual(out.shape, (x.shape[0], m.d_out))
        self.assertTrue(np.isfinite(out).all(), label)
        # one definition of an unusable frame: flagged or not finite
        unusable = ~np.isfinite(x).all(axis=1)
        if masks.get("key_valid") is not None:
            unusable |= np.asarray(masks["key_valid"]) == 0
        self.assertEqual(st["invalid_frames"], int(unusable.sum()), label)

    def test_random_models(self):
        rng = np.random.default_rng(10)
        for flags, (e, h), n in itertools.product(
                FLAG_SETS, [(8, 1), (12, 3), (16, 2), (32, 4)], [1, 5, 13]):
            m, w, ref_kw = build(rng, e, h, flags)
            x = rng.standard_normal((n, e)).astype(np.float32)
            self.check(m, w, ref_kw, x, {}, "%s e%d h%d n%d" % (
                "+".join(flags) or "identity", e, h, n))

    def test_masks(self):
        rng = np.random.default_rng(11)
        for flags in FLAG_SETS:
            m, w, ref_kw = build(rng, 16, 2, flags)
            n = 9
            x = rng.standard_normal((n, 16)).astype(np.float32)
            masks = dict(key_valid=rng.random(n) > 0.3,
                         query_valid=rng.random(n) > 0.2,
                         allow=rng.random((n, n)) > 0.3)
            self.check(m, w, ref_kw, x, masks, "+".join(flags) + " masks")
            # every key masked: zero attention, out = bo (or 0)
            masks = dict(key_valid=np.zeros(n))
            self.check(m, w, ref_kw, x, masks, "+".join(flags) + " all masked")

    def test_nonfinite_rows(self):
        rng = np.random.default_rng(12)
        m, w, ref_kw = build(rng, 16, 2, ("proj", "bias", "out", "bo"))
        x = rng.standard_normal((8, 16)).astype(np.float32)
        x[2, 3] = np.nan
        x[5, 0] = np.inf
        self.check(m, w, ref_kw, x, {}, "NaN/Inf rows")
        out = sattn.attend(m, x)
        self.assertTrue((out[[2, 5]] == 0).all())

    def test_large_amplitude(self):
        # scores of several hundred: the stable softmax must not overflow
        rng = np.random.default_rng(13)
        m, w, ref_kw = build(rng, 16, 2, ("proj", "bias", "out"))
        x = (60 * rng.standard_normal((12, 16))).astype(np.float32)
        self.check(m, w, ref_kw, x, {}, "amplitude 60")

    def test_positions(self):
        rng = np.random.default_rng(15)
        w = common.random_weights(rng, 16, 2, 8, 8, 16)
        arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
        x = rng.standard_normal((11, 16)).astype(np.float32)
        for positions in ("rope", "rope-interleaved", "alibi"):
            for causal in (False, True):
                m = sattn.Model(16, 2, positions=positions, causal=causal,
                                **arrays)
                self.assertEqual(m.config["positions"],
                                 common.REF_POSITIONS[positions])
                self.check(m, w, dict(causal=causal, positions=positions),
                           x, {}, "%s causal=%s" % (positions, causal))

    def test_threads_leave_the_model(self):
        # threads belong to the stream since libsattn.so.1: a model's
        # threads= is ignored with a DeprecationWarning, and the model
        # (attend on the caller's thread) gives the same bytes
        rng = np.random.default_rng(14)
        w = common.random_weights(rng, 16, 2, 8, 8, 16)
        arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
        x = rng.standard_normal((10, 16)).astype(np.float32)
        a = sattn.attend(sattn.Model(16, 2, **arrays), x)
        with self.assertWarns(DeprecationWarning):
            m = sattn.Model(16, 2, threads=2, **arrays)
        self.assertNotIn("threads", m.config)
        b = sattn.attend(m, x)
        self.assertTrue(np.array_equal(a, b))

    def test_model_config(self):
        m = sattn.Model(12, 3)
        c = m.config
        self.assertEqual((c["d_model"], c["heads"], c["d_head"],
                          c["d_value"], m.d_out, m.extra_keys),
                         (12, 3, 4, 4, 12, 0))
        self.assertAlmostEqual(c["scale"], 0.5, places=6)
        self.assertIsNone(m.layout)  # built from arrays, not a file


if __name__ == "__main__":
    unittest.main(verbosity=2)
