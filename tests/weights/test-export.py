#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""End-to-end test of examples/export-torch-mha.py.

Models built in PyTorch are saved (whole, or as a state dict with a model
factory), exported by the tool's command line, then loaded by libsattn and
compared with PyTorch by the parity program of this directory (same bound:
max-abs <= 1e-5 * (1 + max|torch|)).  Also checks --help, --list, and the
tool's error for an ambiguous model.

Usage: test-export.py EXPORTER PARITY_PROGRAM
Exit 77 (skip) when PyTorch is not importable.
"""

import copy
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: python3-torch not importable by %s" % sys.executable)
    sys.exit(77)

FACTORY = '''
import torch

class Net(torch.nn.Module):
    def __init__(self, e=12, h=3):
        super().__init__()
        self.inp = torch.nn.Linear(e, e)
        self.attn = torch.nn.MultiheadAttention(e, h, add_bias_kv=True)
        self.head = torch.nn.Linear(e, 2)
'''


def metadata(path):
    """The __metadata__ of a safetensors file."""
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


SEEDS = '''
import torch


class QKVProjection(torch.nn.Module):
    def __init__(self, d_model=8, d_k=16):
        super().__init__()
        self.W_q = torch.nn.Linear(d_model, d_k, bias=False)
        self.W_k = torch.nn.Linear(d_model, d_k, bias=False)
        self.W_v = torch.nn.Linear(d_model, d_k, bias=False)


class Wrapper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = QKVProjection()
        self.head = torch.nn.Linear(16, 2)
'''


def run(cmd, ok=True, cwd=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, cwd=cwd)
    print("$ " + " ".join(cmd))
    print(r.stdout + r.stderr, end="")
    if ok and r.returncode != 0:
        sys.exit("FAIL: exit status %d" % r.returncode)
    if not ok and r.returncode == 0:
        sys.exit("FAIL: expected an error")
    return r


def fixture(d, name, weights, prefix, mha, n, dtype, causal, gen):
    """PyTorch's float64 result for mha on n random frames, as a fixture of
    the manifest format of tests/data/make-fixtures.py."""
    ref = copy.deepcopy(mha).double().eval()
    if dtype in ("F16", "BF16"):
        td = torch.float16 if dtype == "F16" else torch.bfloat16
        for p in ref.parameters():
            p.copy_(p.to(td).to(torch.float64))
    e, h = ref.embed_dim, ref.num_heads
    x = torch.randn((n, e), generator=gen).to(torch.float32).double()
    mask = None
    if causal:
        mask = torch.triu(torch.ones((n, n), dtype=torch.bool), diagonal=1)
    xb = x.unsqueeze(1)
    out, attn = ref(xb, xb, xb, need_weights=True, attn_mask=mask,
                    average_attn_weights=False)
    extra = (ref.bias_k is not None) + bool(ref.add_zero_attn)
    with open(os.path.join(d, name + ".f64"), "wb") as f:
        for t in (x, out.squeeze(1), attn.squeeze(0)):
            f.write(t.contiguous().numpy().astype("<f8").tobytes())
    return {"name": name, "weights": os.path.basename(weights),
            "prefix": prefix, "dtype": dtype, "d_model": e, "heads": h,
            "n": n, "causal": causal, "lookback": 0, "key_valid": None,
            "add_zero_attn": bool(ref.add_zero_attn), "extra_keys": extra,
            "data": name + ".f64"}


def main():
    exporter, parity = sys.argv[1], sys.argv[2]
    py = [sys.executable, exporter]
    torch.manual_seed(3)
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(11)

    run(py + ["--help"])
    with tempfile.TemporaryDirectory(prefix="sattn-export-") as d:
        fixtures = []

        # 1. a whole model with two attention modules
        layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32,
                                                 dropout=0.0)
        model = torch.nn.TransformerEncoder(layer, num_layers=2,
                                            enable_nested_tensor=False)
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
        model.eval()
        mp = os.path.join(d, "model.pt")
        torch.save(model, mp)
        r = run(py + ["--list", mp])
        assert "layers.0.self_attn" in r.stdout and "layers.1.self_attn" in \
            r.stdout, r.stdout
        r = run(py + [mp, os.path.join(d, "x.safetensors")], ok=False)
        assert "--module" in r.stderr and "layers.1.self_attn" in r.stderr
        r = run(py + [mp, os.path.join(d, "x.safetensors"), "--module",
                      "layers.0.linear1"], ok=False)
        assert "not an attention module" in r.stderr, r.stderr

        w1 = os.path.join(d, "l1.safetensors")
        run(py + ["--module", "layers.1.self_attn", "--no-package", mp, w1])
        fixtures.append(fixture(d, "model-l1", w1, "",
                                model.layers[1].self_attn, 9, "F32", True,
                                gen))
        w1p = os.path.join(d, "l1-prefix.safetensors")
        run(py + ["--module", "layers.1.self_attn", "--keep-prefix",
                  "--dtype", "F16", "--no-package", mp, w1p])
        fixtures.append(fixture(d, "model-l1-prefix-f16", w1p,
                                "layers.1.self_attn.",
                                model.layers[1].self_attn, 7, "F16", False,
                                gen))

        # 2. a bare MultiheadAttention with add_zero_attn, BF16
        mha = torch.nn.MultiheadAttention(8, 2, add_zero_attn=True,
                                          bias=False)
        for p in mha.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
        ap = os.path.join(d, "mha.pt")
        torch.save(mha, ap)
        w2 = os.path.join(d, "mha.safetensors")
        run(py + ["--dtype", "BF16", ap, w2])
        fixtures.append(fixture(d, "mha-zeroattn-bf16", w2, "", mha, 6,
                                "BF16", True, gen))

        # 3. a state dict and a model factory from a file
        with open(os.path.join(d, "netdef.py"), "w") as f:
            f.write(FACTORY)
        sys.path.insert(0, d)
        import netdef  # noqa: E402
        net = netdef.Net()
        for p in net.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
        sp = os.path.join(d, "net-sd.pt")
        torch.save(net.state_dict(), sp)
        w3 = os.path.join(d, "net.safetensors")
        run(py + ["--factory", os.path.join(d, "netdef.py") + ":Net",
                  "--factory-kwargs", '{"e": 12, "h": 3}', sp, w3])
        fixtures.append(fixture(d, "factory-biaskv", w3, "", net.attn, 5,
                                "F32", False, gen))

        # 4. the same state dict without the class: tensors picked by name
        w4 = os.path.join(d, "net-byname.safetensors")
        run(py + ["--heads", "3", "--keep-prefix", sp, w4])
        fixtures.append(fixture(d, "statedict-byname", w4, "attn.", net.attn,
                                5, "F32", True, gen))

        # 5. metadata: what the tensors do not say
        md = metadata(w1)
        for k, v in (("num_heads", "4"), ("head_dim", "4"),
                     ("value_dim", "4"), ("layout", "mha"),
                     ("embed_dim", "16")):
            assert md.get(k) == v, (k, md)
        md = metadata(w1p)
        assert md.get("layers.1.self_attn.num_heads") == "4", md
        md = metadata(w4)
        assert md.get("attn.num_heads") == "3" and \
            md.get("attn.layout") == "mha", md
        # a state dict without --heads records no guess: refused
        r = run(py + [sp, os.path.join(d, "x.safetensors")], ok=False)
        assert "--heads" in r.stderr, r.stderr

        # 6. a whole encoder layer: the layer's options as metadata
        wl = os.path.join(d, "layer0.safetensors")
        run(py + ["--module", "layers.0", "--positions", "rope", mp, wl])
        md = metadata(wl)
        for k, v in (("layer", "transformer-encoder-layer"),
                     ("activation", "relu"), ("norm_first", "0"),
                     ("norm_eps", "1e-05"), ("positions", "rope"),
                     ("self_attn.num_heads", "4"),
                     ("self_attn.head_dim", "4")):
            assert md.get(k) == v, (k, md)

        # 7. whole-model pickles whose classes live in the working
        # directory (not on sys.path): --list finds them; --weights-only
        # refuses them (loading them runs code), state dicts load safely
        with open(os.path.join(d, "seedsmod.py"), "w") as f:
            f.write(SEEDS)
        r = run([sys.executable, "-c", "import torch, seedsmod; torch.save("
                 "seedsmod.Wrapper(), 'wrapped.pt'); torch.save("
                 "seedsmod.Wrapper().state_dict(), 'wrapped-sd.pt')"], cwd=d)
        r = run(py + ["--list", "wrapped.pt"], cwd=d)
        assert "qkv\tlayout=seeds embed_dim=8 heads=1 head_dim=16" in \
            r.stdout, r.stdout
        r = run(py + ["--list", "--weights-only", "wrapped.pt"], ok=False,
                cwd=d)
        assert "weights_only" in r.stderr, r.stderr
        r = run(py + ["--list", "--weights-only", "wrapped-sd.pt"], cwd=d)
        assert "qkv\tlayout=seeds" in r.stdout, r.stdout
        run(py + ["wrapped.pt", "seeds.safetensors"], cwd=d)
        md = metadata(os.path.join(d, "seeds.safetensors"))
        assert md.get("layout") == "seeds" and md.get("head_dim") == "16" \
            and md.get("num_heads") == "1", md

        manifest = os.path.join(d, "fixtures.json")
        with open(manifest, "w") as f:
            json.dump({"format": 1, "fixtures": fixtures}, f, indent=1)
        run([parity, manifest])
    print("export tool: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
