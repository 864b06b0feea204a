# SPDX-License-Identifier: LGPL-2.1-or-later
"""The whole-model family of docs/models.md in sattn.nn.SignalTransformer
(front ends, input normalisations, CLS token, poolings, the input
contract), against float64 references written here from the spec's
formulas with numpy, and against libsattn.

TestModule (PyTorch and numpy only):
  * the conv stem: y[i][o] = b[o] + sum_c sum_k W[o][c][k] x[i S - P + k L][c]
    over the window's n S time steps (zero outside and at masked frames),
    over frames and over samples, several kernels / paddings / dilations;
  * rms / power normalisation: the mean over the usable frames' values
    only, power scaled by channels, eps;
  * standardisation before everything, masked frames zeros after it;
  * poolings max, attention, cls, mean with the CLS row, last, against
    their formulas on the module's own rows, masked rows left out, a
    window with no usable frame pooled to zeros;
  * CLS + learned positions: pos_embed row 0 is the CLS's; RoPE puts the
    CLS at position 0 (the rows equal a model without CLS fed the CLS row
    as its first frame's embedding);
  * masked frames' samples (NaN, Inf) change nothing;
  * fit_contract against numpy, and the file: every tensor and metadata
    key of the spec, old configurations' files byte-identical to before
    (the tensor names and metadata of test_whole_models' test_file).
  Each bound is 1e-12 (float64 against float64).

TestParity: each new front end, input normalisation and pooling through
libsattn (sattn.Model.from_safetensors, sattn.Stream, output classes) on
frame sequences with start padding, a GAP run and a NaN frame masked,
against the module in float64; bound: PyTorch float32's own error on the
same windows (RMS over 4 draws of each draw's max-abs).  These need the
core of docs/models.md (until it lands libsattn refuses the files).

Exit 77 without PyTorch.
"""

import copy
import json
import os
import struct
import sys
import tempfile
import unittest

import numpy as np

try:
    import torch
except ImportError:
    print("test_family: needs python3-torch: skipped")
    sys.exit(77)

import sattn
from sattn.nn import SignalTransformer, save_safetensors

torch.set_num_threads(1)
F_, D_, N_ = 8, 16, 12


def net_of(seed=0, **kw):
    torch.manual_seed(seed)
    args = dict(d_frame=F_, d_model=D_, heads=2, layers=2, d_ff=32,
                classes=3)
    args.update(kw)
    net = SignalTransformer(**args)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen)
                        / np.sqrt(p[0].numel()))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        if hasattr(net, "standardize"):
            net.standardize.mean.copy_(torch.randn(F_, generator=gen))
            net.standardize.std.copy_(0.5 + torch.rand(F_, generator=gen))
    return net.eval()


def masks(B, n, seed=1):
    rng = np.random.default_rng(seed)
    m = rng.random((B, n)) < 0.25
    m[0, :5] = True          # start padding
    m[1, :] = True           # nothing usable
    m[2, :] = False
    return torch.from_numpy(m)


def conv_ref(x, W, b, S, P, L, mask):
    """The spec's conv stem in numpy float64: x (B, n, F) normalised
    frames, masked frames zero."""
    x = np.where(mask[..., None], 0.0, x)
    B, n, Fr = x.shape
    Dn, C, K = W.shape
    t = x.reshape(B, n * S, C)
    y = np.zeros((B, n, Dn))
    for i in range(n):
        y[:, i] += b
        for k in range(K):
            j = i * S - P + k * L
            if 0 <= j < n * S:
                y[:, i] += t[:, j] @ W[:, :, k].T
    return y


class TestModule(unittest.TestCase):

    def test_conv_stem(self):
        worst = 0.0
        for C, S, K, P, L in ((F_, 1, 3, 1, 1), (F_, 1, 5, 2, 1),
                              (F_, 1, 3, 2, 2), (2, 4, 8, 2, 1),
                              (2, 4, 8, 3, 1), (1, 8, 4, 0, 1),
                              (4, 2, 3, 1, 1)):
            net = net_of(3, front_end="conv", in_channels=C, conv_stride=S,
                         conv_kernel=K, conv_padding=P,
                         conv_dilation=L).double()
            x = torch.randn(4, N_, F_, dtype=torch.float64)
            m = masks(4, N_)
            with torch.no_grad():
                got = net.front(net.normalised(x, m)).numpy()
            ref = conv_ref(x.numpy(), net.conv.weight.detach().numpy(),
                           net.conv.bias.detach().numpy(), S, P, L,
                           m.numpy())
            d = float(np.abs(got - ref).max())
            worst = max(worst, d)
            self.assertLessEqual(d, 1e-12, (C, S, K, P, L))
        # padding that gives another row count is refused
        with self.assertRaises(ValueError):
            SignalTransformer(F_, D_, 2, 1, 32, front_end="conv",
                              conv_kernel=3, conv_padding=0)
        print("# conv stem vs the spec's formula: max-abs %.3g" % worst)

    def test_input_norms(self):
        for norm, ch in (("rms", None), ("power", 2), ("power", 4)):
            for std in (False, True):
                net = net_of(4, input_norm=norm, channels=ch,
                             input_norm_eps=1e-3, standardize=std).double()
                x = 3 * torch.randn(4, N_, F_, dtype=torch.float64)
                x[0, :5] = float("nan")
                m = masks(4, N_)
                with torch.no_grad():
                    got = net.normalised(x, m).numpy()
                xs = x.numpy().copy()
                mk = m.numpy()
                xs[mk] = 0.0
                if std:
                    xs = (xs - net.standardize.mean.numpy()) \
                        / net.standardize.std.numpy()
                    xs[mk] = 0.0
                for b in range(4):
                    use = xs[b][~mk[b]]
                    ms = (use ** 2).mean() if use.size else 0.0
                    r = np.sqrt((ch or 1) * ms + 1e-3)
                    want = xs[b] / r
                    d = float(np.abs(got[b] - want).max())
                    self.assertLessEqual(d, 1e-12, (norm, ch, std, b))
                self.assertTrue(np.all(got[mk] == 0))
        # r = 0 (eps 0, a silent window): zeros, not NaN
        net = net_of(4, input_norm="rms", input_norm_eps=0.0).double()
        with torch.no_grad():
            z = net.normalised(torch.zeros(1, N_, F_, dtype=torch.float64))
        self.assertTrue(torch.equal(z, torch.zeros_like(z)))
        with self.assertRaises(ValueError):
            SignalTransformer(F_, D_, 2, 1, 32, input_norm="power")

    def test_poolings(self):
        x = torch.randn(4, N_, F_, dtype=torch.float64)
        m = masks(4, N_)
        mk = m.numpy()
        for pooling, cls in (("max", False), ("attention", False),
                             ("cls", True), ("mean", True), ("last", True),
                             ("max", True), ("attention", True)):
            net = net_of(5, pooling=pooling, cls_token=cls).double()
            with torch.no_grad():
                h = net.features(x, m).numpy()
                p = net.pooled(x, m).numpy()
            for b in range(4):
                rows = list(np.flatnonzero(~mk[b]) + int(cls))
                keep = ([0] if cls else []) + rows
                if not rows:
                    want = np.zeros(D_)
                elif pooling == "max":
                    want = h[b, keep].max(axis=0)
                elif pooling == "mean":
                    want = h[b, keep].mean(axis=0)
                elif pooling == "last":
                    want = h[b, rows[-1]]
                elif pooling == "cls":
                    want = h[b, 0]
                else:
                    lin = net.attention_pool
                    s = h[b, keep] @ lin.weight.detach().numpy()[0] \
                        + lin.bias.detach().numpy()[0]
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    want = (w[:, None] * h[b, keep]).sum(axis=0)
                d = float(np.abs(p[b] - want).max())
                self.assertLessEqual(d, 1e-12, (pooling, cls, b))
            self.assertTrue(np.all(p[1] == 0), pooling)
            self.assertGreater(float(np.abs(p[2]).max()), 0.05, pooling)

    def test_cls_positions(self):
        # learned: pos_embed has window + 1 rows, row 0 the CLS's
        net = net_of(6, cls_token=True, pooling="cls", positions="learned",
                     max_window=N_).double()
        self.assertEqual(tuple(net.pos_embed.shape), (N_ + 1, D_))
        x = torch.randn(2, N_, F_, dtype=torch.float64)
        with torch.no_grad():
            h, _ = net._embed(x, torch.zeros(2, N_, dtype=torch.bool))
            want0 = net.cls_token.reshape(-1) + net.pos_embed[0]
            want1 = net.embed(x[:, 0]) + net.pos_embed[1]
        self.assertLessEqual(float((h[:, 0] - want0).abs().max()), 1e-12)
        self.assertLessEqual(float((h[:, 1] - want1).abs().max()), 1e-12)
        # RoPE: the CLS at position 0, frame i at i + 1: the same rows as
        # a model without CLS whose first row is the CLS row
        for pos in ("rope", "alibi"):
            a = net_of(7, cls_token=True, pooling="cls", positions=pos)
            a = a.double()
            b = copy.deepcopy(a)
            b.has_cls = False
            with torch.no_grad():
                ha = a.features(x)
                e = torch.cat([a.cls_token.reshape(1, 1, -1).expand(2, 1, -1),
                               a.embed(x)], 1)
                hb = e
                for layer in b.encoder.layers:
                    hb = b._layer(layer, hb, torch.zeros(2, N_ + 1,
                                                         dtype=torch.bool))
            self.assertLessEqual(float((ha - hb).abs().max()), 1e-12, pos)

    def test_masked_frames_ignored(self):
        for kw in (dict(front_end="conv", conv_kernel=5, conv_activation=
                        "gelu"), dict(input_norm="rms", standardize=True),
                   dict(cls_token=True, pooling="attention",
                        positions="rope"),
                   dict(pooling="max", input_norm="power", channels=2)):
            net = net_of(8, **kw)
            x = torch.randn(3, N_, F_)
            m = masks(3, N_)
            y = x.clone()
            y[m] = float("nan")
            y[0, 0] = float("inf")
            with torch.no_grad():
                a, b = net(x, m), net(y, m)
            self.assertTrue(torch.isfinite(b).all(), kw)
            self.assertTrue(torch.equal(a, b), kw)

    def test_contract(self):
        net = net_of(9, channels=2, sample_rate=16000, window=N_, hop=4,
                     min_probability=0.6, input_norm="rms")
        rng = np.random.default_rng(3)
        w = rng.standard_normal((40, N_, F_)) * rng.uniform(0.1, 10, 40)[
            :, None, None]
        mk = rng.random((40, N_)) < 0.2
        mk[5] = True   # a window with no usable frame: left out
        net.fit_contract(w, mk, quantile=1.0)
        ok = ~mk.all(axis=1)
        r = np.array([np.sqrt((w[i][~mk[i]] ** 2).mean())
                      for i in range(40) if ok[i]])
        lo, hi = net.contract_input_rms
        self.assertAlmostEqual(lo, r.min(), delta=1e-12 * r.max())
        self.assertAlmostEqual(hi, r.max(), delta=1e-12 * r.max())
        n64 = copy.deepcopy(net).double()
        with torch.no_grad():
            p = n64.pooled(torch.from_numpy(w[ok]), torch.from_numpy(
                mk[ok])).numpy()
        mu, sd = p.mean(0), p.std(0)
        z = np.sqrt((((p - mu) / sd) ** 2).mean(1))
        self.assertLessEqual(float(np.abs(net.contract.pooled_mean.numpy()
                                          - mu).max()), 1e-6)
        self.assertLessEqual(float(np.abs(net.contract.pooled_std.numpy()
                                          - sd).max()), 1e-6)
        self.assertAlmostEqual(net.contract_pooled_z, z.max(), delta=1e-9)
        md = net.metadata()
        for k, v in (("sample_rate", "16000"), ("channels", "2"),
                     ("frame_size", "4"), ("window", str(N_)), ("hop", "4"),
                     ("min_probability", "0.6"), ("input_norm", "rms"),
                     ("input_norm_eps", "1e-08")):
            self.assertEqual(md.get(k), v, k)
        lo_s, hi_s = md["contract_input_rms"].split(" ")
        self.assertEqual((float(lo_s), float(hi_s)), (lo, hi))
        self.assertGreater(float(md["contract_pooled_z"]), 0)

    def test_file_names(self):
        net = net_of(10, front_end="conv", in_channels=2, conv_kernel=8,
                     conv_padding=2, conv_activation="relu",
                     standardize=True, cls_token=True, pooling="attention",
                     positions="learned", max_window=N_, channels=2,
                     final_norm=True, head_hidden=5)
        net.fit_contract(np.random.default_rng(1).standard_normal(
            (10, N_, F_)))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.safetensors")
            save_safetensors(net, path)
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
        md = header.pop("__metadata__")
        want = {"standardize.mean": [F_], "standardize.std": [F_],
                "conv.weight": [D_, 2, 8], "conv.bias": [D_],
                "cls_token": [1, 1, D_], "pos_embed": [N_ + 1, D_],
                "pool.weight": [1, D_], "pool.bias": [1],
                "head.0.weight": [5, D_], "head.2.weight": [3, 5],
                "encoder.norm.weight": [D_],
                "contract.pooled_mean": [D_], "contract.pooled_std": [D_]}
        for k, shape in want.items():
            self.assertEqual(header[k]["shape"], shape, k)
        self.assertNotIn("embed.weight", header)
        for k, v in (("conv_stride", "4"), ("conv_padding", "2"),
                     ("conv_dilation", "1"), ("conv_activation", "relu"),
                     ("pooling", "attention"), ("window", str(N_))):
            self.assertEqual(md.get(k), v, k)
        self.assertIn("contract_pooled_z", md)
        self.assertIn("contract_input_rms", md)


# ---------------------------------------------------------- libsattn

CONFIGS = [
    ("conv over frames k3 relu", dict(front_end="conv", conv_kernel=3,
                                      conv_activation="relu")),
    ("conv over samples C2 S4 k8 p2", dict(front_end="conv", in_channels=2,
                                           conv_kernel=8, conv_padding=2)),
    ("conv k5 dil2 gelu", dict(front_end="conv", conv_kernel=5,
                               conv_dilation=2, conv_padding=4,
                               conv_activation="gelu")),
    ("standardize", dict(standardize=True)),
    ("rms norm", dict(input_norm="rms")),
    ("power norm, 2 channels", dict(input_norm="power", channels=2)),
    ("std + rms, eps 1e-3", dict(standardize=True, input_norm="rms",
                                 input_norm_eps=1e-3)),
    ("max pooling", dict(pooling="max")),
    ("attention pooling", dict(pooling="attention")),
    ("cls pooling, learned", dict(cls_token=True, pooling="cls",
                                  positions="learned", max_window=N_)),
    ("cls pooling, rope", dict(cls_token=True, pooling="cls",
                               positions="rope")),
    ("cls + mean pooling, alibi", dict(cls_token=True, pooling="mean",
                                       positions="alibi")),
]


def rms(v):
    return float(np.sqrt(np.mean(np.square(v))))


def stream_windows(model, x, valid, hop):
    s = sattn.Stream(model, window=N_, hop=hop, output="classes",
                     invalid="mask")
    rows, infos, i, b = [], [], 0, 0
    while i < len(x):
        k = (5, 11, 1, 16, 3)[b % 5]
        r, info = s.push(x[i:i + k], valid=valid[i:i + k])
        rows.append(r.copy())
        infos.append(info.copy())
        i, b = i + k, b + 1
    r, info = s.drain()
    return (np.concatenate(rows + [r]).astype(np.float64),
            np.concatenate(infos + [info]))


class TestParity(unittest.TestCase):
    table = []

    @classmethod
    def tearDownClass(cls):
        print("\n# libsattn vs PyTorch float64 (RMS of 4 draws' max-abs)")
        for row in cls.table:
            print("# %-32s %s" % row)

    def test_configs(self):
        bad = []
        for label, kw in CONFIGS:
            es, e32s = [], []
            try:
                for d in range(4):
                    net = net_of(20 + d, **kw)
                    rng = np.random.default_rng(30 + d)
                    n = 62
                    x = (rng.standard_normal((n, F_))
                         * 10 ** rng.uniform(-1, 1)).astype(np.float32)
                    valid = np.ones(n, np.uint8)
                    valid[40:54] = 0
                    valid[21:24] = 0
                    x[31, 3] = np.nan
                    usable = (valid != 0) & np.isfinite(x).all(axis=1)
                    with tempfile.TemporaryDirectory() as t:
                        p = os.path.join(t, "m.safetensors")
                        save_safetensors(net, p)
                        model = sattn.Model.from_safetensors(p)
                    rows, info = stream_windows(model, x, valid, 4)
                    ends = info["window_end"].astype(np.int64)
                    xw = np.zeros((len(ends), N_, F_))
                    mk = np.ones((len(ends), N_), bool)
                    for b, t_end in enumerate(ends):
                        for r in range(N_):
                            f = int(t_end) - N_ + r
                            if 0 <= f < n and usable[f]:
                                xw[b, r], mk[b, r] = x[f], False
                    ok = ~mk.all(axis=1)
                    self.assertTrue(np.all(rows[~ok] == 0), label)
                    n64 = copy.deepcopy(net).double()
                    with torch.no_grad():
                        ref = torch.softmax(n64(torch.from_numpy(xw[ok]),
                                                torch.from_numpy(mk[ok])),
                                            -1).numpy()
                        f32 = torch.softmax(net(torch.from_numpy(
                            xw[ok]).float(), torch.from_numpy(mk[ok])),
                            -1).double().numpy()
                    es.append(float(np.abs(rows[ok] - ref).max()))
                    e32s.append(float(np.abs(f32 - ref).max()))
            except sattn.SattnError as e:
                self.table.append((label, "libsattn refuses: %s"
                                   % str(e)[-110:]))
                bad.append("%s: %s" % (label, e))
                continue
            ok = rms(es) <= rms(e32s)
            self.table.append((label, "%.3g vs torch-f32 %.3g %s"
                               % (rms(es), rms(e32s), "ok" if ok
                                  else "EXCEEDS")))
            if not ok:
                bad.append("%s: %.3g > %.3g" % (label, rms(es), rms(e32s)))
        self.assertEqual(bad, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
