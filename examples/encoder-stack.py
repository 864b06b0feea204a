#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A 3-layer transformer encoder built in PyTorch, run as a chain of three
sattn elements, compared frame for frame with PyTorch over the whole
sequence.

With causal=true, lookback=L, window=L+hop, every frame sees exactly the L
frames before it, so the chain

    sattn causal=true lookback=L window=L+h hop=h weights=layer0.safetensors
    ! sattn ... weights=layer1.safetensors ! sattn ... layer2.safetensors

equals nn.TransformerEncoder over the whole sequence with a banded causal
mask (key j visible from query i when i - L <= j <= i) in every layer.

    /usr/bin/python3 examples/encoder-stack.py [--positions rope] [--gelu]
        [--norm-first] [--frames 400] [--keep DIR] [--within-float32]

prints the gst-launch line it ran and the max-abs difference against
PyTorch in float64 and PyTorch's own float32 difference.  The plugin must
be on GST_PLUGIN_PATH (e.g. build/plugin).

Each layer is exported as a safetensors file holding the layer's state dict
(self_attn.in_proj_weight, ..., linear1, linear2, norm1, norm2) and a
__metadata__ with what the state dict does not say (num_heads, activation,
norm_first, norm_eps, positions): the element takes heads and the layer
options from there.  PyTorch has no RoPE / ALiBi of its own: with
--positions the reference below applies them to the layer's attention the
way sattn documents (RoPE after the projection and bias, at the absolute
frame index; ALiBi slopes of Press et al.).

The functions here are also used by tests/layers/test-layers-parity.py.
"""
import argparse
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    print("encoder-stack: needs python3-numpy and python3-torch: skipped")
    sys.exit(77)


# ------------------------------------------------------------ safetensors

def write_safetensors(path, tensors, metadata):
    """tensors: {name: torch tensor} written as F32; metadata: {str: str};
    through the package's one writer, python/sattn/stfile.py of this
    source tree (loaded by its path: the package needs no libsattn here)."""
    spec = importlib.util.spec_from_file_location("sattn_stfile", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), os.pardir, "python",
        "sattn", "stfile.py"))
    stfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stfile)
    stfile.write(path, {k: t.detach().to(torch.float32).numpy()
                        for k, t in tensors.items()}, metadata)


def layer_metadata(layer, positions):
    """__metadata__ of an nn.TransformerEncoderLayer, as sattn reads it."""
    act = "gelu" if layer.activation is F.gelu else "relu"
    a = layer.self_attn
    return {"format": "pt", "layer": "transformer-encoder-layer",
            "activation": act, "norm_first": int(layer.norm_first),
            "norm_eps": repr(float(layer.norm1.eps)),
            "positions": positions,
            "self_attn.num_heads": a.num_heads,
            "self_attn.embed_dim": a.embed_dim}


def export_layer(layer, path, positions="none", attention_only=False):
    sd = layer.self_attn.state_dict() if attention_only else layer.state_dict()
    meta = layer_metadata(layer, positions)
    if attention_only:
        meta = {"format": "pt", "num_heads": layer.self_attn.num_heads,
                "positions": positions}
    write_safetensors(path, {k: v for k, v in sd.items() if v is not None},
                      meta)


# ------------------------------------------------------------- reference

def alibi_slopes(h):
    """Press et al.'s get_slopes."""
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(h).is_integer():
        return pow2(h)
    p = 2 ** math.floor(math.log2(h))
    return pow2(p) + alibi_slopes(2 * p)[0::2][:h - p]


def rope(x, pos, interleaved, base=10000.0):
    """x: (T, H, dh) rotated at positions pos (T,)."""
    dh = x.shape[-1]
    k = torch.arange(dh // 2, dtype=torch.float64)
    theta = base ** (-2.0 * k / dh)
    ang = (pos.to(torch.float64)[:, None] * theta[None, :]).to(x.dtype)
    c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = b * c + a * s
        return out
    a, b = x[..., :dh // 2], x[..., dh // 2:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def band_mask(T, L, causal=True, dtype=torch.float64):
    """Additive mask: key j visible from query i when i - L <= j <= i
    (L = 0: no lookback limit; causal False: no upper limit)."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    ok = torch.ones(T, T, dtype=torch.bool)
    if causal:
        ok &= j <= i
    if L > 0:
        ok &= (i - j) <= L
    m = torch.zeros(T, T, dtype=dtype)
    m[~ok] = float("-inf")
    return m


def attention(a, x, mask, positions, pos0=0):
    """nn.MultiheadAttention a (self-attention, batch of one) on x (T, E),
    with positions applied as sattn does."""
    T, E = x.shape
    H = a.num_heads
    dh = E // H
    q, k, v = F.linear(x, a.in_proj_weight, a.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(T, H, dh) for t in (q, k, v))
    pos = torch.arange(T) + pos0
    if positions in ("rope", "rope-interleaved"):
        inter = positions == "rope-interleaved"
        q, k = rope(q, pos, inter), rope(k, pos, inter)
    s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(dh)
    if positions == "alibi":
        dist = (pos[:, None] - pos[None, :]).abs().to(x.dtype)
        sl = torch.tensor(alibi_slopes(H), dtype=x.dtype)
        s = s - sl[:, None, None] * dist[None]
    s = s + mask.to(x.dtype)[None]
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("hij,jhd->ihd", p, v).reshape(T, E)
    return F.linear(o, a.out_proj.weight, a.out_proj.bias)


def layer_forward(layer, x, mask, positions, attention_only=False):
    """The layer on x (T, E), positions applied as sattn applies them; for
    positions "none" this is the module's own forward."""
    if positions == "none":
        # (T, batch 1, E): the modules are not batch_first.
        u = x[:, None]
        if attention_only:
            return layer.self_attn(u, u, u, attn_mask=mask.to(x.dtype),
                                   need_weights=False)[0][:, 0]
        return layer(u, src_mask=mask.to(x.dtype))[:, 0]
    if attention_only:
        return attention(layer.self_attn, x, mask, positions)
    sa = lambda u: attention(layer.self_attn, u, mask, positions)
    ff = lambda u: layer.linear2(layer.activation(layer.linear1(u)))
    if layer.norm_first:
        x = x + sa(layer.norm1(x))
        return x + ff(layer.norm2(x))
    x = layer.norm1(x + sa(x))
    return layer.norm2(x + ff(x))


def stack_forward(layers, x, mask, positions, attention_only=False):
    with torch.no_grad():
        for layer in layers:
            x = layer_forward(layer, x, mask, positions, attention_only)
    return x


# -------------------------------------------------------------- pipeline

def launch_line(d, rate, files, L, hop, extra=""):
    """gst-launch-1.0 pipeline: raw float frames (d values each, as one
    channel at rate d x frame rate) from in.raw through one sattn per
    weights file into out.raw.  The first element cuts frames of d
    samples; its output rows are d channels at the frame rate, which the
    next elements take as frames of frame-size 1."""
    line = ("filesrc location=in.raw ! rawaudioparse format=pcm "
            "pcm-format=f32le sample-rate=%d num-channels=1" % rate)
    for i, f in enumerate(files):
        line += (" ! sattn frame-size=%d causal=true lookback=%d window=%d "
                 "hop=%d weights=%s%s" % (d if i == 0 else 1, L, L + hop,
                                          hop, f, extra))
    return line + " ! filesink location=out.raw"


def run_pipeline(workdir, x, files, L, hop, extra="", frame_rate=100):
    """x: (T, d) float32 frames; returns the output rows (T, d) and the
    pipeline."""
    T, d = x.shape
    x.astype("<f4").tofile(os.path.join(workdir, "in.raw"))
    line = launch_line(d, d * frame_rate, files, L, hop, extra)
    env = dict(os.environ)
    if env.get("SATTN_GST_PRELOAD"):
        # Sanitizer builds: their runtimes first in gst-launch-1.0.
        env["LD_PRELOAD"] = env["SATTN_GST_PRELOAD"]
    r = subprocess.run(["gst-launch-1.0", "-q"] + line.split(), cwd=workdir,
                       capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != 0:
        raise RuntimeError("gst-launch-1.0 %s\n%s%s" % (line, r.stdout,
                                                        r.stderr))
    out = np.fromfile(os.path.join(workdir, "out.raw"), dtype="<f4")
    return out.reshape(-1, d), line


def compare(got, ref64, ref32):
    """max-abs and max-abs / max|ref| of sattn and PyTorch float32 vs
    float64."""
    r = ref64.numpy()
    den = max(1e-30, float(np.abs(r).max()))
    e = float(np.abs(got.astype(np.float64) - r).max())
    e32 = float(np.abs(ref32.numpy().astype(np.float64) - r).max())
    return e, e / den, e32, e32 / den


def build_encoder(n_layers, d, heads, dff, gelu, norm_first, seed):
    torch.manual_seed(seed)
    layers = []
    for _ in range(n_layers):
        layer = torch.nn.TransformerEncoderLayer(
            d, heads, dim_feedforward=dff, dropout=0.0,
            activation="gelu" if gelu else "relu", norm_first=norm_first)
        # Non-trivial LayerNorm parameters (a trained model has them).
        with torch.no_grad():
            for n in (layer.norm1, layer.norm2):
                n.weight.add_(0.2 * torch.randn(d))
                n.bias.add_(0.2 * torch.randn(d))
        layer.eval()
        layers.append(layer)
    return layers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--positions", default="rope",
                    choices=["none", "rope", "rope-interleaved", "alibi"])
    ap.add_argument("--gelu", action="store_true")
    ap.add_argument("--norm-first", action="store_true")
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--lookback", type=int, default=24)
    ap.add_argument("--hop", type=int, default=8)
    ap.add_argument("--keep", help="directory to keep the files in")
    ap.add_argument("--max-abs", type=float, default=0.0,
                    help="exit 1 when the difference exceeds this (0: never)")
    ap.add_argument("--within-float32", action="store_true",
                    help="exit 1 when the difference exceeds PyTorch "
                    "float32's own against float64")
    a = ap.parse_args()

    d, heads, dff = 32, 4, 128
    layers = build_encoder(3, d, heads, dff, a.gelu, a.norm_first, 12)
    workdir = a.keep or tempfile.mkdtemp(prefix="sattn-stack-")
    os.makedirs(workdir, exist_ok=True)
    files = []
    for i, layer in enumerate(layers):
        f = "layer%d.safetensors" % i
        export_layer(layer, os.path.join(workdir, f), a.positions)
        files.append(f)
    rng = np.random.default_rng(5)
    t = np.arange(a.frames)[:, None] / 100.0
    x = (np.sin(2 * math.pi * (3 + np.arange(d))[None, :] * t)
         + 0.3 * rng.standard_normal((a.frames, d))).astype(np.float32)
    got, line = run_pipeline(workdir, x, files, a.lookback, a.hop)
    mask = band_mask(a.frames, a.lookback)
    ref64 = stack_forward([l.double() for l in layers],
                          torch.from_numpy(x).double(), mask, a.positions)
    ref32 = stack_forward([l.float() for l in layers],
                          torch.from_numpy(x), mask, a.positions)
    e, rel, e32, rel32 = compare(got, ref64, ref32)
    print("gst-launch-1.0 -q " + line)
    print("3-layer encoder (d_model %d, %d heads, feed-forward %d, %s, %s, "
          "positions %s), %d frames, lookback %d, hop %d:"
          % (d, heads, dff, "gelu" if a.gelu else "relu",
             "pre-norm" if a.norm_first else "post-norm", a.positions,
             a.frames, a.lookback, a.hop))
    print("  sattn chain    vs PyTorch float64: max-abs %.3g (relative %.3g)"
          % (e, rel))
    print("  PyTorch float32 vs PyTorch float64: max-abs %.3g (relative %.3g)"
          % (e32, rel32))
    if not a.keep:
        shutil.rmtree(workdir)
    if got.shape[0] != a.frames:
        print("expected %d output frames, got %d" % (a.frames, got.shape[0]))
        return 1
    if a.within_float32 and not e <= e32:
        print("sattn's error exceeds PyTorch float32's")
        return 1
    return 1 if (a.max_abs > 0 and not e <= a.max_abs) else 0


if __name__ == "__main__":
    sys.exit(main())
