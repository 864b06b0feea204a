# SPDX-License-Identifier: LGPL-2.1-or-later
"""sattn-export on the model variants a user brings (issue 36): PyTorch
modules with their own attribute names, pickled whole with
torch.save(model) (their classes live in this file, imported by the
exporter as test_model_variants: it is on PYTHONPATH), exported with the
command line (python3 -m sattn.export, what sattn-export runs), and the
outcome checked:

  * a variant of the family must export (exit 0, the file left behind,
    "verified" on stdout), and the written file, run by libsattn
    (sattn.Model.from_safetensors + sattn.Stream, output classes), must
    give the module's class probabilities on every full window of a frame
    sequence: max-abs against the module in float64 at or below the
    module's own float32 error on the same windows (an independent check
    of the exporter's own verification, which compares through the
    canonical module);
  * a module outside the family must be refused (non-zero exit, no file,
    no .unverified file left) with words naming what was met (the words
    each row checks are in VARIANTS).

Two rows are ONNX files written by torch.onnx.export of two modules of
the table (opsets 14 and 17), exported by the same command.  The table
(module | outcome | parity max-abs vs bound, or the refusal's words) is
printed.

Exit 77 (skip) without PyTorch; the ONNX rows are skipped (and said)
without python3-onnx.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest
import warnings

try:
    import torch
    from torch import nn
except ImportError:
    print("test_model_variants: needs python3-torch: skipped")
    sys.exit(77)
import numpy as np

torch.set_num_threads(1)

F_, D_, H_, FF_, C_, N_ = 8, 16, 2, 32, 3, 12   # frame, d_model, ... window


def _encoder(layers=2, batch_first=True, norm_first=False, act="relu"):
    lay = nn.TransformerEncoderLayer(D_, H_, FF_, 0.0, act,
                                     batch_first=batch_first,
                                     norm_first=norm_first)
    enc = nn.TransformerEncoder(lay, layers, enable_nested_tensor=False)
    # independent layers, as training leaves them
    enc.layers = nn.ModuleList(
        nn.TransformerEncoderLayer(D_, H_, FF_, 0.0, act,
                                   batch_first=batch_first,
                                   norm_first=norm_first)
        for _ in range(layers))
    return enc


class Classifier(nn.Module):
    """Linear embedding, nn.TransformerEncoder, mean pooling, Linear head,
    named as many user models are (input_proj / transformer /
    classifier); batch_first False transposes around the encoder."""

    def __init__(self, batch_first=True, norm_first=False, layers=2):
        super().__init__()
        self.bf = batch_first
        self.input_proj = nn.Linear(F_, D_)
        self.transformer = _encoder(layers, batch_first, norm_first)
        self.classifier = nn.Linear(D_, C_)

    def forward(self, x):
        h = self.input_proj(x)
        if not self.bf:
            h = h.transpose(0, 1)
        h = self.transformer(h)
        if not self.bf:
            h = h.transpose(0, 1)
        return self.classifier(h.mean(dim=1))


class ConvFrames(nn.Module):
    """Conv1d (kernel 3, padding 1) + ReLU over frames, then the encoder
    layers as a ModuleList, mean pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv1d(F_, D_, 3, padding=1)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(D_, H_, FF_, 0.0, batch_first=True)
            for _ in range(2))
        self.out = nn.Linear(D_, C_)

    def forward(self, x):
        h = self.act(self.stem(x.transpose(1, 2))).transpose(1, 2)
        for b in self.blocks:
            h = b(h)
        return self.out(h.mean(1))


class ConvSamples(nn.Module):
    """A conv stem over the samples of 2 interleaved channels, 4 samples
    per channel per frame: kernel 8, stride 4 (= frame size), padding 2."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, D_, 8, stride=4, padding=2)
        self.encoder = _encoder(2)
        self.fc = nn.Linear(D_, C_)

    def forward(self, x):
        B, n, f = x.shape
        h = self.conv(x.reshape(B, n * 4, 2).transpose(1, 2))
        h = self.encoder(h.transpose(1, 2))
        return self.fc(h.mean(dim=1))


class ClsFirst(nn.Module):
    """A learned CLS token, learned positions (window + 1 rows), the first
    token's row pooled."""

    def __init__(self):
        super().__init__()
        self.to_model = nn.Linear(F_, D_)
        self.cls = nn.Parameter(torch.randn(1, 1, D_))
        self.positions = nn.Parameter(0.5 * torch.randn(1, N_ + 1, D_))
        self.enc = _encoder(2)
        self.logits = nn.Linear(D_, C_)

    def forward(self, x):
        h = self.to_model(x)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)
        h = h + self.positions[:, :h.shape[1]]
        return self.logits(self.enc(h)[:, 0])


class MaxPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_frames = nn.Linear(F_, D_)
        self.body = _encoder(2)
        self.norm = nn.LayerNorm(D_)
        self.head = nn.Sequential(nn.Linear(D_, 10), nn.GELU(),
                                  nn.Linear(10, C_))

    def forward(self, x):
        h = self.norm(self.body(self.embed_frames(x)))
        return self.head(h.max(dim=1).values)


class PowerNorm(nn.Module):
    """Per-window power normalisation (AGC) of a 2-channel (I/Q) stream
    before the embedding: mean |z|^2 per time step."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(F_, D_)
        self.tf = _encoder(2)
        self.cls_head = nn.Linear(D_, C_)

    def forward(self, x):
        B, n, f = x.shape
        p = x.reshape(B, n * (f // 2), 2).pow(2).sum(dim=-1).mean(dim=1)
        x = x / torch.sqrt(p + 1e-6)[:, None, None]
        return self.cls_head(self.tf(self.proj(x)).mean(dim=1))


class AttnPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(F_, D_)
        self.encoder = _encoder(2)
        self.score = nn.Linear(D_, 1)
        self.cls = nn.Linear(D_, C_)

    def forward(self, x):
        h = self.encoder(self.inp(x))
        w = torch.softmax(self.score(h), dim=1)
        return self.cls((w * h).sum(dim=1))


class Standardised(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mu", torch.randn(F_))
        self.register_buffer("sigma", 0.5 + torch.rand(F_))
        self.input_proj = nn.Linear(F_, D_)
        self.transformer = _encoder(2)
        self.classifier = nn.Linear(D_, C_)

    def forward(self, x):
        x = (x - self.mu) / self.sigma
        return self.classifier(self.transformer(self.input_proj(x))
                               .mean(dim=1))


class GruAfter(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_proj = nn.Linear(F_, D_)
        self.transformer = _encoder(1)
        self.gru = nn.GRU(D_, D_, batch_first=True)
        self.classifier = nn.Linear(D_, C_)

    def forward(self, x):
        h, _ = self.gru(self.transformer(self.input_proj(x)))
        return self.classifier(h[:, -1])


class LstmBefore(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(F_, D_, batch_first=True)
        self.transformer = _encoder(1)
        self.classifier = nn.Linear(D_, C_)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.classifier(self.transformer(h).mean(dim=1))


class Reciprocal(Classifier):
    def forward(self, x):
        return super().forward(torch.reciprocal(x))


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(F_, D_, 3, padding=1)
        self.c2 = nn.Conv1d(D_, D_, 3, padding=1)
        self.transformer = _encoder(1)
        self.classifier = nn.Linear(D_, C_)

    def forward(self, x):
        h = self.c2(torch.relu(self.c1(x.transpose(1, 2)))).transpose(1, 2)
        return self.classifier(self.transformer(h).mean(dim=1))


class UnusedTensor(Classifier):
    """A Linear the forward never calls: its tensors would be left out."""

    def __init__(self):
        super().__init__()
        self.aux = nn.Linear(D_, 5)


class MaskedInput(nn.Module):
    """A forward that takes PyTorch's key padding mask: the exporter
    compares it with sattn's masks directly.  masked_mean False pools the
    masked rows too (not the spec's masks: refused)."""

    def __init__(self, masked_mean=True):
        super().__init__()
        self.masked_mean = masked_mean
        self.input_proj = nn.Linear(F_, D_)
        self.transformer = _encoder(2)
        self.classifier = nn.Linear(D_, C_)

    def forward(self, x, src_key_padding_mask=None):
        m = src_key_padding_mask
        if m is not None:
            x = x.masked_fill(m[..., None], 0.0)
        h = self.transformer(self.input_proj(x), src_key_padding_mask=m)
        if m is None or not self.masked_mean:
            return self.classifier(h.mean(dim=1))
        keep = (~m).to(h.dtype)[..., None]
        return self.classifier((h * keep).sum(1) / keep.sum(1).clamp(min=1))


class TutorialPositions(nn.Module):
    """The PyTorch tutorial's sinusoidal table, a buffer (max_len, 1, D)
    added to sequence-first rows."""

    def __init__(self, d, max_len=500):
        super().__init__()
        self.dropout = nn.Dropout(0.1)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-np.log(10000.0) / d))
        pe = torch.zeros(max_len, 1, d)
        pe[:, 0, 0::2] = torch.sin(pos * div)
        pe[:, 0, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0)])


class Tutorial(nn.Module):
    """The PyTorch tutorial's TransformerModel as a classifier: sequence
    first, the embedding scaled by sqrt(d_model), the sinusoidal table."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(F_, D_)
        self.pos_encoder = TutorialPositions(D_)
        self.transformer_encoder = _encoder(2, batch_first=False)
        self.decoder = nn.Linear(D_, C_)

    def forward(self, src):
        src = self.encoder(src.transpose(0, 1)) * np.sqrt(D_)
        out = self.transformer_encoder(self.pos_encoder(src))
        return self.decoder(out.mean(dim=0))


def build_signal(kind):
    from sattn.nn import SignalTransformer
    if kind == "cls-rope":
        return SignalTransformer(F_, D_, H_, 2, FF_, C_, positions="rope",
                                 pooling="cls", cls_token=True)
    raise KeyError(kind)


# name, builder, command-line options, expected: "ok" or words of the
# refusal, ONNX opset (None: the pickled module)
VARIANTS = [
    ("1 Linear+TransformerEncoder+Linear (input_proj/transformer/"
     "classifier)", lambda: Classifier(), [], "ok", None),
    ("2 the same, batch_first=False", lambda: Classifier(batch_first=False),
     [], "ok", None),
    ("3 Conv1d(k3,p1)+ReLU over frames, ModuleList of layers",
     ConvFrames, [], "ok", None),
    ("4 learned CLS token + positions, first-token pooling", ClsFirst, [],
     "ok", None),
    ("5 max pooling, final LayerNorm, MLP head", MaxPool, [], "ok", None),
    ("6 per-window power normalisation (AGC, I/Q)", PowerNorm,
     ["--channels", "2"], "ok", None),
    ("7 nn.GRU after the encoder", GruAfter, [], "nn.GRU", None),
    ("8 conv stem over samples, stride = frame size", ConvSamples,
     ["--channels", "2", "--frame-size", "4"], "ok", None),
    ("9 SignalTransformer CLS + RoPE", lambda: build_signal("cls-rope"), [],
     "ok", None),
    ("10 attention pooling", AttnPool, [], "ok", None),
    ("11 standardisation (x - mean) / std", Standardised, [], "ok", None),
    ("12 pre-norm layers", lambda: Classifier(norm_first=True), [], "ok",
     None),
    ("13 6 layers", lambda: Classifier(layers=6), [], "ok", None),
    ("14 ONNX (opset 14) of 1", lambda: Classifier(), [], "ok", 14),
    ("15 ONNX (opset 17) of 3", ConvFrames, [], "ok", 17),
    ("16 nn.LSTM front end", LstmBefore, [], "nn.LSTM", None),
    ("17 1/x of the input", Reciprocal, [], "reciprocal", None),
    ("18 a second conv layer", TwoConvs, [], "2 layers before the encoder",
     None),
    ("19 a tensor the forward never uses", UnusedTensor, [],
     "would not use: aux.weight, aux.bias", None),
    ("20 forward(x, src_key_padding_mask), masked mean", MaskedInput, [],
     "ok", None),
    ("21 the same, pooling masked rows too",
     lambda: MaskedInput(masked_mean=False), [],
     "differs from sattn's masks", None),
    ("22 PyTorch tutorial: seq-first, x sqrt(d), sinusoidal buffer",
     Tutorial, [], "ok", None),
    ("23 ONNX (opset 15) of 22", Tutorial, [], "ok", 15),
    ("24 ONNX (opset 16) of 6", PowerNorm, ["--channels", "2"], "ok", 16),
    ("25 ONNX (opset 14) of 7 (nn.GRU)", GruAfter, [], "uses GRU", 14),
]


def randomise(net, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if p.dim() >= 2:
                fan = p[0].numel() if p.dim() > 1 else 1
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(fan))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return net.eval()


def run(args, cwd):
    return subprocess.run([sys.executable, "-m", "sattn.export"] + args,
                          cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=600)


def rms(v):
    return float(np.sqrt(np.mean(np.square(v))))


def file_parity(net, path, window=N_, hop=3, draws=6):
    """libsattn running the file against the module itself: the class
    probabilities of every full window of frame sequences, max-abs
    against the module in float64, and the module's own float32 error on
    the same windows; each the RMS over draws of a draw's max-abs (a
    single draw's is a few float32 ulps, too noisy a bound:
    test_whole_models.py measured it)."""
    import copy
    import sattn
    model = sattn.Model.from_safetensors(path)
    n64 = copy.deepcopy(net).double().eval()
    es, e32s, nw = [], [], 0
    for d in range(draws):
        rng = np.random.default_rng(5 + d)
        x = rng.standard_normal((6 * window, F_)).astype(np.float32)
        s = sattn.Stream(model, window=window, hop=hop, output="classes",
                         start="wait")
        rows, info = s.push(x)
        ends = info["window_end"].astype(np.int64)
        xw = np.stack([x[t - window:t] for t in ends])
        with torch.no_grad():
            ref = torch.softmax(n64(torch.from_numpy(xw).double()),
                                -1).numpy()
            f32 = torch.softmax(net(torch.from_numpy(xw)),
                                -1).double().numpy()
        es.append(float(np.abs(rows - ref).max()))
        e32s.append(float(np.abs(f32 - ref).max()))
        nw += len(ends)
    return rms(es), rms(e32s), nw


def short_reason(said):
    """The gist of a refusal, for the table."""
    said = said.replace("; nothing written", "")
    m = re.search(r"metadata '\w+' is '\w+'", said)
    if m:
        return "libsattn refuses: " + m.group(0)
    if "no attention weights under prefix" in said:
        return "libsattn refuses: the conv.* front end is not known to it"
    m = re.search(r"libsattn's output differs from the module \(max-abs "
                  r"(\S+) .*own error (\S+)\)(: .*)?", said)
    if m:
        return "libsattn differs: %s vs %s%s" % (m.group(1), m.group(2),
                                                 m.group(3) or "")
    return said[-160:]


def pytorch_side(net, src, opts):
    """What the exporter's recognition made of a module libsattn refused
    (the module against its canonical form, float64): words."""
    from sattn import whole
    ch = int(opts[opts.index("--channels") + 1]) if "--channels" in opts \
        else None
    try:
        if src.endswith(".onnx"):
            from sattn import onnx_in
            rec, _ = onnx_in.recognise(src, window=N_, channels=ch)
        else:
            rec = whole.recognise(net, window=N_, channels=ch)
    except ValueError as e:
        return "not recognised: %s" % str(e)[:120]
    return "recognised as %s; %s" % (rec.description, rec.checks[-1])


class TestVariants(unittest.TestCase):
    table = []

    @classmethod
    def tearDownClass(cls):
        print("\n# sattn-export on the model variants")
        print("# %-62s | %-8s | %s" % ("module", "outcome", "parity max-abs "
                                       "vs bound / the refusal's words"))
        for name, outcome, words in cls.table:
            print("# %-62s | %-8s | %s" % (name, outcome, words))
        sys.stdout.flush()

    def test_variants(self):
        import test_model_variants as me   # pickles name this module
        try:
            import onnx  # noqa: F401
            have_onnx = True
        except ImportError:
            have_onnx = False
        failures = []
        with tempfile.TemporaryDirectory() as d:
            # the builders of the imported module: their classes pickle as
            # test_model_variants.X, which the exporter imports
            for i, (name, build, opts, want, opset) in enumerate(
                    me.VARIANTS):
                torch.manual_seed(100 + i)
                net = randomise(build(), 100 + i)
                src = os.path.join(d, "m%d.pt" % i)
                if opset:
                    if not have_onnx:
                        self.table.append((name, "skipped",
                                           "python3-onnx not installed"))
                        continue
                    src = os.path.join(d, "m%d.onnx" % i)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        torch.onnx.export(
                            net, torch.randn(1, N_, F_), src,
                            opset_version=opset, input_names=["x"],
                            output_names=["y"],
                            dynamic_axes={"x": {0: "batch"}})
                else:
                    torch.save(net, src)
                out = os.path.join(d, "m%d.safetensors" % i)
                r = run(opts + ["--window", str(N_), src, out], d)
                said = (r.stdout + r.stderr).strip()
                left = [f for f in os.listdir(d)
                        if f.startswith("m%d.safetensors" % i)]
                if want == "ok":
                    if r.returncode != 0 or not os.path.exists(out):
                        if left:
                            failures.append("%s: refused, but left %s"
                                            % (name, left))
                        self.table.append((name, "REFUSED", "%s [%s]" % (
                            short_reason(said.replace(d + "/", "")),
                            pytorch_side(net, src, opts))))
                        failures.append("%s: %s" % (name, said))
                        continue
                    m = re.search(r"max-abs (\S+) over (\d+) windows .*?"
                                  r" own (\S+);", r.stdout)
                    self.assertIsNotNone(m, r.stdout)
                    self.assertIn("verified", r.stdout)
                    e, e32, nw = file_parity(net, out)
                    ok = e <= e32
                    self.table.append((name, "exported" if ok else "WRONG",
                                       "%.3g vs %.3g (%d windows, masked "
                                       "frames: exporter %s vs %s)"
                                       % (e, e32, nw, m.group(1),
                                          m.group(3))))
                    if not ok:
                        failures.append("%s: file parity %.3g > %.3g"
                                        % (name, e, e32))
                else:
                    words = said.split(": ", 1)[-1]
                    if r.returncode == 0 or left or want not in said:
                        self.table.append((name, "WRONG", said[-300:]))
                        failures.append("%s: wanted a refusal with %r, "
                                        "got rc %d, files %s: %s"
                                        % (name, want, r.returncode, left,
                                           said))
                        continue
                    self.table.append((name, "refused",
                                       re.sub(r"; sattn runs: .*", "",
                                              words.replace(d + "/", ""))
                                       [:170]))
        self.assertEqual(failures, [])

    def test_unimportable_class_hint(self):
        # a pickle of a class defined in __main__ (a training script)
        with tempfile.TemporaryDirectory() as d:
            script = ("import torch, sys\n"
                      "sys.path.insert(0, %r)\n"
                      "from test_model_variants import Classifier\n"
                      "class Net(Classifier):\n    pass\n"
                      "torch.save(Net().eval(), 'net.pt')\n"
                      % os.path.dirname(os.path.abspath(__file__)))
            subprocess.run([sys.executable, "-c", script], cwd=d,
                           check=True)
            r = run(["net.pt", "net.safetensors"], d)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("Can't get attribute 'Net'", r.stderr)
            self.assertIn("--factory module:callable", r.stderr)
            self.assertIn("importable", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(
                d, "net.safetensors")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
