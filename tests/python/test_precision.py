# SPDX-License-Identifier: LGPL-2.1-or-later
"""Stream(precision="fast") and the element's precision=fast: an
attention layer's projections summed in float.  The package's rows
against a float64 reference written here (numpy: Q/K/V, scores, stable
softmax, output projection, each window), within the float32 parity
bound max-abs <= 1e-5 (1 + max |reference|), "fast" differing from
"exact" in its bytes; the element's rows (precision=fast) equal to the
package's byte for byte, for an attention layer and for a whole model;
an unknown precision name refused.

The element cases are skipped without gst-launch-1.0, the whole-model
case without PyTorch."""
import os
import shutil
import tempfile
import unittest

import numpy as np

import common
import sattn

GST_LAUNCH = shutil.which("gst-launch-1.0")

D, HEADS, N, HOP = 32, 4, 32, 8


def _weights(seed):
    rng = np.random.default_rng(seed)
    w = common.random_weights(rng, D, HEADS, D // HEADS, D // HEADS, D)
    w.pop("add_zero_attn")
    w.pop("bias_k", None)
    w.pop("bias_v", None)
    return w


def _reference(w, x):
    """Rows of a start=wait frames stream (window N, hop HOP) in float64:
    the first window's N rows, then each window's last HOP rows."""
    f = {k: (None if v is None else np.asarray(v, np.float64))
         for k, v in w.items()}

    def lin(a, wt, b):
        y = a if wt is None else a @ wt.T
        return y if b is None else y + b

    rows = []
    dh = D // HEADS
    for end in range(N, len(x) + 1, HOP):
        xw = x[end - N:end].astype(np.float64)
        q = lin(xw, f.get("wq"), f.get("bq"))
        k = lin(xw, f.get("wk"), f.get("bk"))
        v = lin(xw, f.get("wv"), f.get("bv"))
        o = np.empty((N, D))
        for h in range(HEADS):
            s = q[:, h * dh:(h + 1) * dh] @ k[:, h * dh:(h + 1) * dh].T
            s /= np.sqrt(dh)
            s -= s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True)
            o[:, h * dh:(h + 1) * dh] = p @ v[:, h * dh:(h + 1) * dh]
        y = lin(o, f.get("wo"), f.get("bo"))
        rows.append(y if end == N else y[N - HOP:])
    return np.concatenate(rows)


def _stream_rows(model, x, precision):
    s = sattn.Stream(model, N, HOP, "frames", start="wait",
                     precision=precision)
    rows, _ = s.push(x)
    return np.asarray(rows, np.float32)


class TestPrecision(unittest.TestCase):
    def test_fast_against_float64(self):
        ratios = []
        for seed in range(6):
            w = _weights(seed)
            model = sattn.Model(D, HEADS, **w)
            x = np.random.default_rng(100 + seed).standard_normal(
                (N + 10 * HOP, D)).astype(np.float32)
            ref = _reference(w, x)
            exact = _stream_rows(model, x, "exact")
            fast = _stream_rows(model, x, "fast")
            self.assertEqual(fast.shape, ref.shape)
            self.assertTrue(np.isfinite(fast).all())
            self.assertNotEqual(fast.tobytes(), exact.tobytes(),
                                "fast gave exact's bytes")
            bound = 1e-5 * (1.0 + np.abs(ref).max())
            e_fast = np.abs(fast - ref).max()
            e_exact = np.abs(exact - ref).max()
            self.assertLessEqual(e_fast, bound)
            self.assertLessEqual(e_exact, bound)
            ratios.append(e_fast / e_exact)
        print("fast / exact max-abs error, 6 draws: %s" %
              ", ".join("%.2f" % r for r in ratios))

    def test_unknown_precision(self):
        model = sattn.Model(D, HEADS, **_weights(0))
        with self.assertRaises(sattn.SattnError) as cm:
            sattn.Stream(model, N, HOP, precision="faster")
        self.assertIn("precision", str(cm.exception))

    @unittest.skipIf(GST_LAUNCH is None, "gst-launch-1.0 not available")
    def test_element_fast_equals_package(self):
        w = _weights(3)
        x = np.random.default_rng(7).standard_normal(
            (N + 12 * HOP, D)).astype(np.float32)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.safetensors")
            _save_q_proj(path, w)
            model = sattn.Model.from_safetensors(path)
            want = _stream_rows(model, x, "fast")
            self.assertNotEqual(want.tobytes(),
                                _stream_rows(model, x, "exact").tobytes())
            got = _element_rows(d, path, x, "precision=fast")
            self.assertEqual(got.tobytes(), want.tobytes())

    def test_whole_model_fast(self):
        # a whole model takes "fast" (tests/python/test_whole_models.py
        # checks its error): the package's rows differ from "exact"'s, and
        # the element's (precision=fast) equal them byte for byte
        try:
            import torch
            from sattn.nn import SignalTransformer, save_safetensors
        except ImportError:
            self.skipTest("PyTorch not available")
        torch.manual_seed(0)
        net = SignalTransformer(d_frame=D, d_model=16, heads=2, layers=1,
                                d_ff=32, classes=3, positions="learned",
                                max_window=N).eval()
        x = np.random.default_rng(5).standard_normal(
            (N + 12 * HOP, D)).astype(np.float32)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "whole.safetensors")
            save_safetensors(net, path)
            model = sattn.Model.from_safetensors(path)
            rows = {}
            for p in ("exact", "fast"):
                s = sattn.Stream(model, N, HOP, "classes", start="wait",
                                 precision=p)
                rows[p] = np.asarray(s.push(x)[0], np.float32)
            self.assertEqual(rows["fast"].shape, (13, 3))
            self.assertNotEqual(rows["fast"].tobytes(),
                                rows["exact"].tobytes())
            self.assertLess(np.abs(rows["fast"] - rows["exact"]).max(), 1e-5)
            if GST_LAUNCH is None:
                return
            r = _element_run(d, path, x, "precision=fast output=classes")
            if r.returncode != 0:
                raise AssertionError("gst-launch-1.0 failed: " + r.stderr)
            got = np.fromfile(os.path.join(d, "out.f32"), "<f4")
            self.assertEqual(got.tobytes(), rows["fast"].tobytes())


def _save_q_proj(path, w):
    """w as a safetensors file in the q_proj / k_proj / v_proj / out_proj
    layout, num_heads in its metadata."""
    names = {"wq": "q_proj.weight", "bq": "q_proj.bias",
             "wk": "k_proj.weight", "bk": "k_proj.bias",
             "wv": "v_proj.weight", "bv": "v_proj.bias",
             "wo": "out_proj.weight", "bo": "out_proj.bias"}
    common.write_safetensors(path, {names[k]: w[k] for k in names},
                             {"num_heads": str(HEADS)})


def _element_run(d, path, x, props):
    src = os.path.join(d, "in.f32")
    dst = os.path.join(d, "out.f32")
    x.astype("<f4").tofile(src)
    cmd = [GST_LAUNCH, "-q", "filesrc", "location=" + src, "!",
           "rawaudioparse", "format=pcm", "pcm-format=f32le",
           "num-channels=%d" % D, "sample-rate=1000", "!", "sattn",
           "weights=" + path, "window=%d" % N, "hop=%d" % HOP,
           "start=wait"] + props.split() + ["!", "filesink",
                                            "location=" + dst]
    return common.run_bounded(cmd)


def _element_rows(d, path, x, props):
    r = _element_run(d, path, x, props)
    if r.returncode != 0:
        raise AssertionError("gst-launch-1.0 failed: " + r.stderr)
    return np.fromfile(os.path.join(d, "out.f32"), "<f4").reshape(-1, D)


if __name__ == "__main__":
    unittest.main(verbosity=2)
