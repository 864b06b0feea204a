#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Generate the PyTorch parity fixtures of libsattn's weights layer.

Run from anywhere with Debian's python3-torch (torch 1.13):
    /usr/bin/python3 tests/data/make-fixtures.py [OUTDIR]
OUTDIR defaults to the directory of this script.  Writes, per fixture NAME:
  NAME.safetensors  the module's weights, written by examples/export-torch-mha.py
  NAME.f64          float64 little-endian: x (n, E), then PyTorch's output
                    (n, E), then its attention weights (H, n, n + extra),
                    need_weights=True, average_attn_weights=False
and fixtures.json, the manifest with every fixture's parameters.

PyTorch computes the reference in float64 from exactly the weights stored
in the file (rounded through F16/BF16 first for those fixtures) and from
inputs that are float32 values, so the only difference left to the float32
core is its own rounding.

Separate q/k/v projection weights: nn.MultiheadAttention only creates them
when kdim or vdim differ from embed_dim, which cannot serve self-attention
on frames.  The fixtures build the module with in_proj_weight and switch it
to the constructor's other layout (q/k/v_proj_weight parameters,
in_proj_weight registered as None, _qkv_same_embed_dim False), so that
PyTorch's forward takes its use_separate_proj_weight path.

Also written: kdim.safetensors, a genuine kdim/vdim != embed_dim module
(no expected outputs; the reader must refuse it with a shape error).
"""

import importlib.util
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTER = os.path.join(HERE, "..", "..", "examples", "export-torch-mha.py")


def load_exporter():
    spec = importlib.util.spec_from_file_location("export_torch_mha", EXPORTER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


exporter = load_exporter()

# name, E, H, n, options
FIXTURES = [
    ("e8_h1_basic", 8, 1, 6, {}),
    ("e16_h2_nobias", 16, 2, 7, {"bias": False}),
    ("e32_h4_causal", 32, 4, 9, {"causal": True}),
    ("e16_h4_separate", 16, 4, 8, {"separate": True}),
    ("e12_h3_separate_nobias_biaskv", 12, 3, 5,
     {"separate": True, "bias": False, "add_bias_kv": True}),
    ("e24_h3_biaskv", 24, 3, 6, {"add_bias_kv": True}),
    ("e16_h2_zeroattn", 16, 2, 6, {"add_zero_attn": True}),
    ("e32_h2_biaskv_zeroattn_causal", 32, 2, 8,
     {"add_bias_kv": True, "add_zero_attn": True, "causal": True}),
    ("e64_h4_n16", 64, 4, 16, {}),
    ("e64_h1_causal", 64, 1, 12, {"causal": True}),
    ("e16_h2_f16", 16, 2, 6, {"dtype": "F16"}),
    ("e16_h2_bf16", 16, 2, 6, {"dtype": "BF16", "add_bias_kv": True}),
    ("e16_h2_f64", 16, 2, 6, {"dtype": "F64"}),
    ("e16_h2_prefix", 16, 2, 6, {"prefix": True}),
    ("e16_h2_keypad", 16, 2, 8, {"key_valid": [1, 0, 1, 1, 0, 1, 1, 1]}),
    ("e16_h2_lookback", 16, 2, 10, {"causal": True, "lookback": 2}),
    ("e8_h4_loud_causal", 8, 4, 10, {"causal": True, "amplitude": 30.0}),
]


def randomize(module, scale):
    """Random values everywhere: PyTorch initialises biases to zero, which
    would leave the bias paths untested."""
    for p in module.parameters():
        p.copy_(torch.randn(p.shape, dtype=torch.float64) * scale)


def to_separate(mha):
    """Switch an in_proj module to the q/k/v_proj_weight layout."""
    e = mha.embed_dim
    w = mha.in_proj_weight.detach().clone()
    mha._qkv_same_embed_dim = False
    mha.q_proj_weight = torch.nn.Parameter(w[:e].clone())
    mha.k_proj_weight = torch.nn.Parameter(w[e:2 * e].clone())
    mha.v_proj_weight = torch.nn.Parameter(w[2 * e:].clone())
    mha.register_parameter("in_proj_weight", None)


def round_through(module, dtype):
    for p in module.parameters():
        p.copy_(p.to(dtype).to(p.dtype))


def make_one(outdir, name, e, h, n, opt, gen):
    bias = opt.get("bias", True)
    dtype = opt.get("dtype", "F32")
    causal = opt.get("causal", False)
    lookback = opt.get("lookback", 0)
    key_valid = opt.get("key_valid")
    prefix = ""
    model = None

    if opt.get("prefix"):
        # A larger model: the attention of the second encoder layer, in a
        # state dict with other layers, norms and an int64 buffer.
        layer = torch.nn.TransformerEncoderLayer(e, h, dim_feedforward=2 * e,
                                                 dropout=0.0)
        model = torch.nn.Sequential(collections_od([
            ("norm", torch.nn.BatchNorm1d(e)),
            ("encoder", torch.nn.TransformerEncoder(layer, num_layers=2,
                                                    enable_nested_tensor=False)),
        ])).double()
        randomize(model, 0.3)
        mha = model.encoder.layers[1].self_attn
        prefix = "encoder.layers.1.self_attn."
    else:
        mha = torch.nn.MultiheadAttention(
            e, h, bias=bias, add_bias_kv=opt.get("add_bias_kv", False),
            add_zero_attn=opt.get("add_zero_attn", False)).double()
        if opt.get("separate"):
            to_separate(mha)
        randomize(mha, 0.3)
    mha.eval()

    if dtype == "F16":
        round_through(mha, torch.float16)
    elif dtype == "BF16":
        round_through(mha, torch.bfloat16)
    elif dtype != "F64":
        round_through(mha, torch.float32)
    # F64: keep genuine double values; the core rounds them to float32.

    path = os.path.join(outdir, name + ".safetensors")
    if model is not None:
        tensors = model.state_dict()
        meta = {"format": "pt"}
        meta.update(exporter.mha_metadata(mha, prefix))
        write_mixed(path, tensors, meta)
    else:
        exporter.export_mha(mha, path, dtype=dtype, use_package=False)

    amp = opt.get("amplitude", 1.0)
    x = (torch.randn((n, e), generator=gen) * amp).to(torch.float32)
    x = x.to(torch.float64)
    mask = None
    if causal or lookback:
        i = torch.arange(n).unsqueeze(1)
        j = torch.arange(n).unsqueeze(0)
        hidden = torch.zeros((n, n), dtype=torch.bool)
        if causal:
            hidden |= j > i
        if lookback:
            hidden |= (i - j) > lookback
        mask = hidden
    kpm = None
    if key_valid is not None:
        kpm = torch.tensor([v == 0 for v in key_valid]).unsqueeze(0)
    xb = x.unsqueeze(1)  # (L, N=1, E): batch_first=False
    out, attn = mha(xb, xb, xb, need_weights=True, attn_mask=mask,
                    key_padding_mask=kpm, average_attn_weights=False)
    out = out.squeeze(1)
    attn = attn.squeeze(0)
    extra = (1 if mha.bias_k is not None else 0) + (1 if mha.add_zero_attn
                                                     else 0)
    assert tuple(attn.shape) == (h, n, n + extra), attn.shape
    assert torch.isfinite(out).all() and torch.isfinite(attn).all()

    with open(os.path.join(outdir, name + ".f64"), "wb") as f:
        for t in (x, out, attn):
            f.write(t.detach().contiguous().numpy().astype("<f8").tobytes())

    return {
        "name": name,
        "weights": name + ".safetensors",
        "prefix": prefix,
        "dtype": dtype,
        "d_model": e,
        "heads": h,
        "n": n,
        "bias": bias,
        "add_bias_kv": mha.bias_k is not None,
        "add_zero_attn": bool(mha.add_zero_attn),
        "separate_qkv": not mha._qkv_same_embed_dim,
        "causal": causal,
        "lookback": lookback,
        "key_valid": key_valid,
        "amplitude": amp,
        "extra_keys": extra,
        "data": name + ".f64",
        "x_shape": [n, e],
        "out_shape": [n, e],
        "attn_shape": [h, n, n + extra],
    }


def collections_od(items):
    import collections
    return collections.OrderedDict(items)


def write_mixed(path, tensors, meta):
    """A whole state dict: float tensors as F32, integer buffers as I64
    (through the package's one writer, the exporter's sattn.stfile)."""
    entries = []
    for k, v in tensors.items():
        v = v.detach().contiguous()
        if v.is_floating_point():
            data, dt = v.to(torch.float32).numpy().astype("<f4").tobytes(), "F32"
        else:
            data, dt = v.to(torch.int64).numpy().astype("<i8").tobytes(), "I64"
        entries.append((k, dt, list(v.shape), data))
    exporter.stfile.write_raw(path, entries, meta)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else HERE
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(20240601)
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(7)
    entries = [make_one(outdir, *f, gen=gen) for f in FIXTURES]

    kd = torch.nn.MultiheadAttention(8, 2, kdim=10, vdim=12).double()
    randomize(kd, 0.3)
    exporter.export_mha(kd, os.path.join(outdir, "kdim.safetensors"),
                        self_attention=False, use_package=False)

    manifest = {
        "format": 1,
        "generator": "tests/data/make-fixtures.py",
        "torch": torch.__version__,
        "layout": "x (n, E), out (n, E), attn (H, n, n + extra_keys); "
                  "float64 little-endian, concatenated",
        "fixtures": entries,
    }
    with open(os.path.join(outdir, "fixtures.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(outdir, p))
                for p in os.listdir(outdir))
    print("%d fixtures in %s (%d bytes)" % (len(entries), outdir, total))


if __name__ == "__main__":
    main()
