#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Where sattn's float32 error against float64 comes from, by ablation.

A numpy emulation of one layer as sattn computes it (whole sequence with
the banded causal mask, as test-layers-parity.py checks it), where every
stage can be computed three ways:

  f32   float32 FMA chains and every rounding sattn made before the layer
        parts moved to double;
  once  in float64 from the stage's inputs, rounded to float32 once;
  exact in float64, not rounded.

For every configuration kind it prints the error against the float64
reference (max-abs and RMS over all outputs of all seeds) with every stage
f32, with the layer parts as core/nn/encoder.c computes them now ("layer parts
double"), with the projections in double too (what encoder layers do
now), with every stage rounded once, with only one stage f32 and the
others exact (that stage's own contribution), with all f32 but one stage
rounded once (what fixing that stage gains), and PyTorch float32's error
on the same inputs.  A tool for finding the stages that matter, not a
test.

With --schemes it prints instead, for the attention-only configurations
of test-layers-parity.py's second table (the same models and inputs), how
candidate ways of summing the projections compare with PyTorch float32
over N draws (--draws, 64 by default): the RMS ratio over all draws and
the number of draws in which the max-abs and the RMS error are at or below
PyTorch's.  Besides f32 / once, a projection can be summed as k float
chains over every k-th input (splitK, the chains added in float) or the
same chains added in double and rounded once (dsplitK).

usage: error-ablation.py [EXAMPLES_DIR] [--seeds N]
       error-ablation.py [EXAMPLES_DIR] --schemes [--draws N]
"""
import importlib.util
import math
import os
import sys

import numpy as np
import torch

F32, F64 = np.float32, np.float64


def r32(a):
    return np.asarray(a, F64).astype(F32).astype(F64)


def chain(x, w, mode):
    """x (n, k) @ w (k, m) in mode: f32 = a float32 FMA chain over k in
    order (each step rounds once), once = float64 product rounded once."""
    if mode == "exact":
        return x @ w
    if mode == "once":
        return r32(x @ w)
    acc = np.zeros((x.shape[0], w.shape[1]))
    for t in range(x.shape[1]):
        acc = r32(acc + np.outer(x[:, t], w[t]))
    return acc


def rnd(a, mode):
    return a if mode == "exact" else r32(a)


STAGES = ("proj", "vproj", "rope", "scores", "softmax", "pv", "outproj", "residual",
          "norm", "ff1", "act", "ff2")


# The layer parts as core/nn/encoder.c computes them since they moved to double:
# residual sums never rounded, LayerNorm rounded once, the feed-forward sums
# in double (the hidden row rounded once, linear2's output not rounded).
LAYER_DOUBLE = dict(residual="exact", norm="once", ff1="once", act="once",
                    ff2="exact")


# Encoder layers also project in double (core/cpu/linear.c), rounded once.
PROJ_DOUBLE = dict(proj="once", vproj="once", outproj="once")


def split_chains(x, w, b, k, dbl):
    """k float chains over every k-th input (the first from the bias),
    added in float (dbl False) or in double and rounded once."""
    wt = w.T
    accs = []
    for i in range(k):
        acc = np.zeros((x.shape[0], wt.shape[1]))
        if i == 0 and b is not None:
            acc = acc + b
        for t in range(i, x.shape[1], k):
            acc = r32(acc + np.outer(x[:, t], wt[t]))
        accs.append(acc)
    s = accs[0]
    for a in accs[1:]:
        s = s + a if dbl else r32(s + a)
    return r32(s)


def linear(x, w, b, mode):
    """sattn: the chain, then + bias (a second rounding)."""
    if mode.startswith("dsplit"):
        return split_chains(x, w, b, int(mode[6:]), True)
    if mode.startswith("split"):
        return split_chains(x, w, b, int(mode[5:]), False)
    if mode == "f32":
        y = chain(x, w.T, "f32")
        return y if b is None else r32(y + b)
    if mode == "fold":
        # The chain started from the bias: one rounding fewer.
        xb = np.hstack([np.ones((x.shape[0], 1)), x])
        wb = np.vstack([np.zeros((1, w.shape[0])) if b is None else b[None],
                        w.T])
        return chain(xb, wb, "f32")
    if mode == "dacc":
        # Accumulated in float64 from the bias, rounded once: "once".
        mode = "once"
    return rnd(x @ w.T + (0.0 if b is None else b), mode)


def layer_norm(x, w, b, eps, mode):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    v = (x - mean) / np.sqrt(var + eps)
    if mode == "f32":
        return r32(r32(r32(v) * w) + b)
    return rnd(v * w + b, mode)


def attention(a, x, mask, positions, md, ex):
    T, E = x.shape
    H = a.num_heads
    dh = E // H
    W = a.in_proj_weight.detach().double().numpy()
    B = a.in_proj_bias.detach().double().numpy()
    q, k, v = (linear(x, W[i * E:(i + 1) * E], B[i * E:(i + 1) * E],
                      md["vproj" if i == 2 else "proj"]) for i in range(3))
    pos = np.arange(T)
    if positions in ("rope", "rope-interleaved"):
        inter = positions == "rope-interleaved"
        kk = np.arange(dh // 2)
        theta = 10000.0 ** (-2.0 * kk / dh)
        ang = pos[:, None] * theta[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rot(u):
            u = u.reshape(T, H, dh).copy()
            if inter:
                ia, ib = slice(0, dh, 2), slice(1, dh, 2)
            else:
                ia, ib = slice(0, dh // 2), slice(dh // 2, dh)
            A, Bb = u[..., ia].copy(), u[..., ib].copy()
            u[..., ia] = rnd(A * c - Bb * s, md["rope"])
            u[..., ib] = rnd(Bb * c + A * s, md["rope"])
            return u.reshape(T, E)
        q, k = rot(q), rot(k)
    scale = 1.0 / math.sqrt(dh)
    out = np.zeros((T, E))
    slopes = ex.alibi_slopes(H)
    for h in range(H):
        qh, kh, vh = (u[:, h * dh:(h + 1) * dh] for u in (q, k, v))
        S = chain(qh, kh.T, md["scores"]) * scale
        if positions == "alibi":
            dist = np.abs(pos[:, None] - pos[None, :]).astype(F64)
            if md["scores"] == "f32":
                S = r32(S - r32(r32(slopes[h]) * dist))
            else:
                S = rnd(S - slopes[h] * dist, md["scores"])
        S = S + mask
        mx = S.max(-1, keepdims=True)
        sm = md["softmax"]
        if sm == "f32":
            e = r32(np.exp(r32(S - mx)))
            inv = r32(1.0 / e.sum(-1, keepdims=True))
            P = r32(e * inv)
        elif sm == "after":
            # Unnormalised weights through P.V, then o * (1 / sum).
            e = r32(np.exp(r32(S - mx)))
            inv = r32(1.0 / e.sum(-1, keepdims=True))
            out[:, h * dh:(h + 1) * dh] = r32(chain(e, vh, md["pv"]) * inv)
            continue
        else:
            e = np.exp(S - mx)
            P = rnd(e / e.sum(-1, keepdims=True), sm)
        out[:, h * dh:(h + 1) * dh] = chain(P, vh, md["pv"])
    Wo = a.out_proj.weight.detach().double().numpy()
    bo = a.out_proj.bias.detach().double().numpy()
    return linear(out, Wo, bo, md["outproj"])


def layer(L, x, mask, positions, att, md, ex):
    """The layer's output, rounded to float32 as the element outputs it."""
    return r32(layer_unrounded(L, x, mask, positions, att, md, ex))


def layer_unrounded(L, x, mask, positions, att, md, ex):
    if att:
        return attention(L.self_attn, x, mask, positions, md, ex)
    p = {n: t.detach().double().numpy() for n, t in L.state_dict().items()}
    gelu = L.activation is torch.nn.functional.gelu
    eps = L.norm1.eps

    def ff(u):
        h = linear(u, p["linear1.weight"], p["linear1.bias"], md["ff1"])
        if gelu:
            h = rnd(0.5 * h * (1.0 + np.vectorize(math.erf)(
                h / math.sqrt(2.0))), md["act"])
        else:
            h = np.maximum(h, 0.0)
        return linear(h, p["linear2.weight"], p["linear2.bias"], md["ff2"])

    ln = lambda u, n: layer_norm(u, p[n + ".weight"], p[n + ".bias"], eps,
                                 md["norm"])
    sa = lambda u: attention(L.self_attn, u, mask, positions, md, ex)
    if L.norm_first:
        x = rnd(x + sa(ln(x, "norm1")), md["residual"])
        return rnd(x + ff(ln(x, "norm2")), md["residual"])
    x = ln(rnd(x + sa(x), md["residual"]), "norm1")
    return ln(rnd(x + ff(x), md["residual"]), "norm2")


# Candidate schemes for attention-only models (--schemes): projection
# stages and how each sums; the others stay f32.
SCHEMES = (
    ("all f32 (sattn)", {}),
    ("Q/K/V/out split4", dict(proj="split4", vproj="split4",
                              outproj="split4")),
    ("V/out dsplit4", dict(vproj="dsplit4", outproj="dsplit4")),
    ("out once", dict(outproj="once")),
    ("out once, Q/K/V split4", dict(outproj="once", proj="split4",
                                    vproj="split4")),
    ("V/out once", dict(vproj="once", outproj="once")),
    ("Q/K/V/out once", dict(proj="once", vproj="once", outproj="once")),
)


def schemes(ex, draws):
    d, heads, dff, T, Lb = 16, 4, 64, 96, 12
    mask = ex.band_mask(T, Lb).numpy()
    print("| layers | positions | scheme | RMS ratio to PyTorch f32 | draws "
          "with max-abs <= PyTorch's | draws with RMS <= PyTorch's |")
    print("|---|---|---|---|---|---|")
    # The configurations and seeds of test-layers-parity.py's second table.
    for ci, (n, pos) in enumerate(((1, "none"), (1, "rope"),
                                   (1, "rope-interleaved"), (1, "alibi"),
                                   (3, "none"), (3, "rope"))):
        acc = {name: [0.0, 0, 0] for name, _ in SCHEMES}
        te = 0.0
        for s in range(draws):
            xs = np.random.default_rng(1000 + s).standard_normal(
                (T, d)).astype(F32)
            layers = ex.build_encoder(n, d, heads, dff, False, False,
                                      500 + 37 * ci + s)
            r64 = ex.stack_forward([l.double() for l in layers],
                                   torch.from_numpy(xs).double(),
                                   torch.from_numpy(mask), pos, True).numpy()
            t32 = ex.stack_forward([l.float() for l in layers],
                                   torch.from_numpy(xs),
                                   torch.from_numpy(mask).float(), pos,
                                   True).numpy().astype(F64) - r64
            for l in layers:
                l.double()
            te += float((t32 ** 2).sum())
            for name, ov in SCHEMES:
                md = dict({t: "f32" for t in STAGES}, **ov)
                y = xs.astype(F64)
                for L in layers:
                    y = layer(L, y, mask, pos, True, md, ex)
                e = y - r64
                a = acc[name]
                a[0] += float((e ** 2).sum())
                a[1] += np.abs(e).max() <= np.abs(t32).max()
                a[2] += (e ** 2).sum() <= (t32 ** 2).sum()
        for name, (se, w, wr) in acc.items():
            print("| %d | %s | %s | %.2f | %d/%d | %d/%d |"
                  % (n, pos, name, math.sqrt(se / te), w, draws, wr, draws))
        sys.stdout.flush()


def main():
    args = [a for i, a in enumerate(sys.argv[1:]) if not a.startswith("--")
            and sys.argv[i] not in ("--seeds", "--draws")]
    seeds = 6
    if "--seeds" in sys.argv:
        seeds = int(sys.argv[sys.argv.index("--seeds") + 1])
    exdir = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
    spec = importlib.util.spec_from_file_location(
        "encoder_stack", os.path.join(exdir, "encoder-stack.py"))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    torch.set_num_threads(1)
    if "--schemes" in sys.argv:
        draws = 64
        if "--draws" in sys.argv:
            draws = int(sys.argv[sys.argv.index("--draws") + 1])
        schemes(ex, draws)
        return
    d, heads, dff, T, Lb = 16, 4, 64, 96, 12
    kinds = [("attention", False, False, "none"),
             ("attention", False, False, "rope"),
             ("attention", False, False, "alibi"),
             ("encoder", False, False, "none"),
             ("encoder", False, True, "rope"),
             ("encoder", True, False, "none"),
             ("encoder", True, True, "alibi")]
    mask = ex.band_mask(T, Lb).numpy()
    for kind, nf, gelu, pos in kinds:
        att = kind == "attention"
        stages = STAGES[:7] if att else STAGES
        rows = {}
        for seed in range(seeds):
            L = ex.build_encoder(1, d, heads, dff, gelu, nf, 100 + seed)[0]
            rng = np.random.default_rng(seed)
            x32 = rng.standard_normal((T, d)).astype(F32)
            x = x32.astype(F64)
            ref = ex.stack_forward([L.double()], torch.from_numpy(x),
                                   torch.from_numpy(mask), pos, att).numpy()
            t32 = ex.stack_forward([L.float()], torch.from_numpy(x32),
                                   torch.from_numpy(mask).float(), pos,
                                   att).numpy().astype(F64)
            L.double()
            runs = {"torch f32": t32}
            exact = {s: "exact" for s in STAGES}
            runs["exact, output rounded"] = layer(L, x, mask, pos, att,
                                                   exact, ex)
            runs["all f32 (sattn)"] = layer(
                L, x, mask, pos, att, {s: "f32" for s in STAGES}, ex)
            runs["layer parts double"] = layer(
                L, x, mask, pos, att, dict({s: "f32" for s in STAGES},
                                           **LAYER_DOUBLE), ex)
            if not att:
                runs["sattn now (+ projections double)"] = layer(
                    L, x, mask, pos, att, dict({s: "f32" for s in STAGES},
                                               **LAYER_DOUBLE, **PROJ_DOUBLE),
                    ex)
            runs["all once"] = layer(
                L, x, mask, pos, att, {s: "once" for s in STAGES}, ex)
            for s in stages:
                runs["only " + s + " f32"] = layer(
                    L, x, mask, pos, att, dict(exact, **{s: "f32"}), ex)
                runs["all f32 but " + s + " once"] = layer(
                    L, x, mask, pos, att,
                    dict({t: "f32" for t in STAGES}, **{s: "once"}), ex)
            for name, y in runs.items():
                e = y - ref
                acc = rows.setdefault(name, [0.0, 0.0, 0])
                acc[0] = max(acc[0], float(np.abs(e).max()))
                acc[1] += float((e ** 2).sum())
                acc[2] += e.size
        print("\n%s%s%s positions=%s (%d seeds): max-abs / RMS error vs "
              "float64" % (kind, "" if att else (" pre" if nf else " post"),
                           "" if att else (" gelu" if gelu else " relu"),
                           pos, seeds))
        for name, (mx, ss, n) in rows.items():
            print("  %-28s %.3e  %.3e" % (name, mx, math.sqrt(ss / n)))


if __name__ == "__main__":
    main()
