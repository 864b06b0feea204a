#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Parity of libsattn with PyTorch for every attention layout it imports.

For each layout (nn.MultiheadAttention packed and separate, HF q/k/v_proj,
BERT query/key/value, diffusers to_q/to_k/to_v, LLaMA wq/wk/wv, the seeds'
W_q/W_k/W_v, timm's fused qkv) x biases / none x output projection / none
x d_k (the Q/K projection size, heads x head_dim) in {E/2, E, 2E}, plus
value sizes other than d_k: a module is built in PyTorch (its class
defined in a file of the working directory), saved whole with torch.save,
exported by examples/export-torch-mha.py (its main(), in process), run by
libsattn (weights-attend-file: sattn_attn_weights_load, sattn_attend,
heads and sizes read from the file's metadata) and compared with the
module evaluated in float64 by PyTorch.  nn.MultiheadAttention has no
d_k != E and always an output projection: those cells are "n/a".

Bound (the same as the weights-parity fixtures): max-abs <= 1e-5 *
(1 + max|reference|), for the output rows and for the attention weights.
The table prints max-abs and max-rel (max-abs / max|reference|) of the
output, the weights' max-abs, and PyTorch float32's own max-abs against
the same float64 reference for scale.

Then error cases: two layouts under one prefix (ambiguous, both named),
no layout under the prefix (the prefixes holding one are listed), a head
count contradicting the metadata (both values named), queries and keys of
different sizes.

Usage: test-layouts-parity.py EXPORTER ATTEND_FILE
Exit 77 (skip) when PyTorch is not importable.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: python3-torch not importable by %s" % sys.executable)
    sys.exit(77)
import numpy as np

E = 8          # d_model
N = 7          # frames
HEADS = 2
BOUND = 1e-5

# The layouts of the parity cases: name, the attribute recording the head
# count (None: the seeds' single-head module records none), the names of
# the Q, K and V Linears (one name: timm's fused [Q; K; V] Linear) and the
# name of the output Linear (dotted: inside submodules, as BERT's
# output.dense and diffusers' to_out.0).
LAYOUTS = [
    ("hf", "num_heads", ("q_proj", "k_proj", "v_proj"), "out_proj"),
    ("bert", "num_attention_heads", ("query", "key", "value"),
     "output.dense"),
    ("diffusers", "heads", ("to_q", "to_k", "to_v"), "to_out.0"),
    ("llama", "n_heads", ("wq", "wk", "wv"), "wo"),
    ("seeds", None, ("W_q", "W_k", "W_v"), "W_o"),
    ("fused", "num_heads", ("qkv",), "proj"),
]

# The module class of every layout, in a file of its own: torch.save keeps
# a whole module by its class's import path.
MODELS = '''
import torch
from torch import nn


class Attention(nn.Module):
    """An attention module named as one row of LAYOUTS says."""
    def __init__(self, heads_attr, qkv, out_name, e, h, dk, dv, bias, out):
        super().__init__()
        if heads_attr is not None:
            setattr(self, heads_attr, h)
        self.qkv_names, self.out_name = tuple(qkv), out_name
        self.dk, self.dv = dk, dv
        rows = (2 * dk + dv,) if len(qkv) == 1 else (dk, dk, dv)
        for name, r in zip(qkv, rows):
            self._put(name, nn.Linear(e, r, bias=bias))
        if out:
            self._put(out_name, nn.Linear(dv, e, bias=bias))

    def _put(self, dotted, module):
        *path, last = dotted.split(".")
        parent = self
        for p in path:
            if not hasattr(parent, p):
                parent.add_module(p, nn.Module())
            parent = getattr(parent, p)
        parent.add_module(last, module)

    def qkvo(self):
        try:
            o = self.get_submodule(self.out_name)
        except AttributeError:
            o = None
        if len(self.qkv_names) == 3:
            q, k, v = (getattr(self, n) for n in self.qkv_names)
            return q, k, v, o
        fused = getattr(self, self.qkv_names[0])
        w, b = fused.weight, fused.bias
        parts = []
        for lo, hi in ((0, self.dk), (self.dk, 2 * self.dk),
                       (2 * self.dk, 2 * self.dk + self.dv)):
            lin = nn.Linear(w.shape[1], hi - lo, bias=b is not None)
            lin.weight = nn.Parameter(w[lo:hi].clone())
            if b is not None:
                lin.bias = nn.Parameter(b[lo:hi].clone())
            parts.append(lin)
        return parts[0], parts[1], parts[2], o
'''


def attention64(x, q, k, v, o, heads):
    """softmax(q k^T / sqrt(head_dim)) v per head, concatenated, then o;
    all in float64 (torch ops on double copies)."""
    def lin(m, t):
        return torch.nn.functional.linear(
            t, m.weight.double(),
            None if m.bias is None else m.bias.double())
    Q, K, V = lin(q, x), lin(k, x), lin(v, x)
    n, dq = Q.shape
    dh, dvh = dq // heads, V.shape[1] // heads
    outs, ws = [], []
    for h in range(heads):
        s = Q[:, h * dh:(h + 1) * dh] @ K[:, h * dh:(h + 1) * dh].T
        p = torch.softmax(s / math.sqrt(dh), dim=-1)
        ws.append(p)
        outs.append(p @ V[:, h * dvh:(h + 1) * dvh])
    out = torch.cat(outs, dim=1)
    if o is not None:
        out = lin(o, out)
    return out, torch.stack(ws)


def attention32(x, q, k, v, o, heads):
    """The same formula in float32, for PyTorch's own float32 error."""
    Q, K, V = q(x), k(x), v(x)
    dh, dvh = Q.shape[1] // heads, V.shape[1] // heads
    outs = []
    for h in range(heads):
        s = Q[:, h * dh:(h + 1) * dh] @ K[:, h * dh:(h + 1) * dh].T
        outs.append(torch.softmax(s / math.sqrt(dh), dim=-1)
                    @ V[:, h * dvh:(h + 1) * dvh])
    out = torch.cat(outs, dim=1)
    return o(out) if o is not None else out


def run_attend(attend, weights, prefix, x, d, heads=0, head_dim=0):
    xf = os.path.join(d, "x.f32")
    of = os.path.join(d, "out.f64")
    x.numpy().astype("<f4").tofile(xf)
    r = subprocess.run([attend, weights, prefix, str(heads), str(head_dim),
                        "0", "0", "0", xf, of], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    rep = json.loads(r.stdout)
    raw = np.fromfile(of, dtype="<f8")
    n_out = rep["n"] * rep["d_out"]
    return (rep, raw[:n_out].reshape(rep["n"], rep["d_out"]),
            raw[n_out:].reshape(rep["heads"], rep["n"], -1)), None


def errs(got, want):
    ma = float(np.max(np.abs(got - want)))
    ref = float(np.max(np.abs(want)))
    return ma, ma / ref if ref > 0 else ma, ref


def main():
    exporter_path, attend = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("exporter", exporter_path)
    exporter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exporter)
    torch.set_grad_enabled(False)
    torch.manual_seed(5)
    failed = 0
    rows = []

    def export(argv):
        try:
            rc = exporter.main(argv)
        except SystemExit as e:
            rc = e.code
        return rc

    with tempfile.TemporaryDirectory(prefix="sattn-layouts-") as d:
        cwd = os.getcwd()
        os.chdir(d)
        with open("layout_models.py", "w") as f:
            f.write(MODELS)
        sys.path.insert(0, d)
        import layout_models as lm   # noqa: E402

        cases = []
        for layout, heads_attr, qkv, out_name in LAYOUTS:
            names = (heads_attr, qkv, out_name)
            heads = HEADS if heads_attr is not None else 1
            for dk in (E // 2, E, 2 * E):
                for bias in (True, False):
                    for out in (True, False):
                        cases.append((layout, names, heads, dk, dk, bias, out))
            # values of another size than queries and keys
            for dv in (E // 2, 3 * E):
                cases.append((layout, names, heads, E, dv, True, False))
                cases.append((layout, names, heads, E, dv, False, True))
        for bias in (True, False):
            cases.append(("mha", None, HEADS, E, E, bias, True))
            cases.append(("mha-separate", None, HEADS, E, E, bias, True))

        for i, (layout, names, heads, dk, dv, bias, out) in enumerate(cases):
            if names is None:
                m = torch.nn.MultiheadAttention(E, heads, bias=bias)
                if layout == "mha-separate":
                    # the separate form, as PyTorch builds it for kdim/vdim
                    m._qkv_same_embed_dim = False
                    w = m.in_proj_weight.detach()
                    m.q_proj_weight = torch.nn.Parameter(w[:E].clone())
                    m.k_proj_weight = torch.nn.Parameter(w[E:2 * E].clone())
                    m.v_proj_weight = torch.nn.Parameter(w[2 * E:].clone())
                    m.register_parameter("in_proj_weight", None)
            else:
                m = lm.Attention(*names, E, heads, dk, dv, bias, out)
            for p in m.parameters():
                p.copy_(torch.randn(p.shape) * 0.4)
            m.eval()
            pt = "m%d.pt" % i
            st = "m%d.safetensors" % i
            torch.save(m, pt)
            argv = [pt, st, "--no-package"]
            if layout == "fused" and dv != dk:
                argv += ["--head-dim", str(dk // heads)]
            with open(os.devnull, "w") as null:
                so = sys.stdout
                sys.stdout = null
                try:
                    rc = export(argv)
                finally:
                    sys.stdout = so
            if rc not in (0, None):
                print("FAIL export of case %d (%s): %s" % (i, layout, rc))
                failed += 1
                continue
            x = torch.randn(N, E)
            if names is None:
                ref = m.double()
                xb = x.double().unsqueeze(1)
                o64, w64 = ref(xb, xb, xb, need_weights=True,
                               average_attn_weights=False)
                o64, w64 = o64.squeeze(1), w64.squeeze(0)
                m32 = m.float()
                o32 = m32(x.unsqueeze(1), x.unsqueeze(1), x.unsqueeze(1),
                          need_weights=False)[0].squeeze(1)
            else:
                q, k, v, o = m.qkvo()
                o64, w64 = attention64(x.double(), q, k, v, o, heads)
                o32 = attention32(x, q, k, v, o, heads)
            res, err = run_attend(attend, st, "", x, d)
            label = (layout, "bias" if bias else "none",
                     "out" if out else "none", dk, dv)
            if res is None:
                print("FAIL %s: %s" % (label, err))
                failed += 1
                continue
            rep, got, gw = res
            want_layout = layout
            ok_meta = (rep["layout"] == want_layout and rep["heads"] == heads
                       and rep["heads_from"] == "metadata"
                       and rep["head_dim"] * heads == dk
                       and rep["value_dim"] * heads == dv
                       and rep["out_proj"] == int(out)
                       and rep["q_bias"] == int(bias)
                       and rep["d_out"] == (E if out else dv))
            om = errs(got, o64.numpy())
            wm = errs(gw, w64.numpy())
            tm = errs(o32.double().numpy(), o64.numpy())
            ok = ok_meta and om[0] <= BOUND * (1 + om[2]) and \
                wm[0] <= BOUND * (1 + wm[2])
            rows.append((ok, label, heads, om, wm, tm))
            if not ok:
                failed += 1
                if not ok_meta:
                    print("FAIL %s: report %s" % (label, rep))

        print("# bound: max-abs <= %g * (1 + max|ref|) for outputs and "
              "weights; d_k = heads x head_dim (Q/K size), d_v = heads x "
              "value_dim; E = %d, n = %d frames" % (BOUND, E, N))
        print("| layout | biases | out-proj | heads | d_k | d_v | out "
              "max-abs | out max-rel | weights max-abs | torch f32 max-abs "
              "| |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for ok, (lay, b, o, dk, dv), h, om, wm, tm in rows:
            print("| %s | %s | %s | %d | %d | %d | %.2e | %.2e | %.2e | "
                  "%.2e | %s |" % (lay, b, o, h, dk, dv, om[0], om[1],
                                   wm[0], tm[0], "ok" if ok else "FAIL"))
        print("| mha, mha-separate | any | none | | E/2, 2E | | n/a | | | | "
              "nn.MultiheadAttention has d_k = E and an out_proj |")
        worst = max(r[3][1] for r in rows) if rows else float("nan")
        print("# %d cases, worst out max-rel %.2e" % (len(rows), worst))

        # Error cases, through the same loader.
        x = torch.randn(N, E)
        lin = torch.randn
        t = {"q_proj.weight": lin(4, E), "k_proj.weight": lin(4, E),
             "v_proj.weight": lin(4, E), "W_q.weight": lin(4, E),
             "W_k.weight": lin(4, E), "W_v.weight": lin(4, E),
             "blk.wq.weight": lin(4, E), "blk.wk.weight": lin(4, E),
             "blk.wv.weight": lin(4, E)}
        exporter.save_safetensors("amb.safetensors", t, use_package=False)
        checks = []
        res, err = run_attend(attend, "amb.safetensors", "", x, d)
        checks.append(("two layouts under one prefix", res is None and
                       "ambiguous" in err and "hf" in err and "seeds" in err,
                       err))
        res, err = run_attend(attend, "amb.safetensors", "nope", x, d)
        checks.append(("no layout under the prefix", res is None and
                       "'blk.' (llama)" in err and "'' (hf)" in err, err))
        res, err = run_attend(attend, "amb.safetensors", "blk", x, d)
        checks.append(("a prefix with one layout loads", res is not None
                       and res[0]["layout"] == "llama", err or res[0]))
        exporter.save_safetensors(
            "meta.safetensors",
            {"wq.weight": lin(8, E), "wk.weight": lin(8, E),
             "wv.weight": lin(8, E)}, {"num_heads": "2"}, use_package=False)
        res, err = run_attend(attend, "meta.safetensors", "", x, d, heads=4)
        checks.append(("heads against metadata", res is None and
                       "heads = 4" in err and "num_heads = 2" in err, err))
        exporter.save_safetensors(
            "gqa.safetensors",
            {"wq.weight": lin(8, E), "wk.weight": lin(4, E),
             "wv.weight": lin(4, E)}, use_package=False)
        res, err = run_attend(attend, "gqa.safetensors", "", x, d)
        checks.append(("keys smaller than queries", res is None and
                       "grouped-query" in err, err))
        res, err = run_attend(attend, "meta.safetensors", "", x, d,
                              head_dim=3)
        checks.append(("head-dim not fitting the shapes", res is None and
                       "head_dim = 3" in err, err))
        for what, ok, msg in checks:
            print("%s %s: %s" % ("ok  " if ok else "FAIL", what, msg))
            failed += 0 if ok else 1
        os.chdir(cwd)
    print("# %d failures" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
