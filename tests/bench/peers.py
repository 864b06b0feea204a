#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The peers of the sattn benchmark, side by side with sattn in one run.

Three workloads, every peer on one intra-op thread:

  w1       W1 attention (64 channels, 4 heads, window 256, hop 16, random
           weights: the nn.MultiheadAttention file sattn-bench --dump wrote),
           frames/s;
  encoder  an nn.TransformerEncoderLayer on the W1 geometry (the file
           sattn-bench --encoder writes), frames/s;
  whole    the per-window recogniser geometry: sattn.nn.SignalTransformer,
           frame 16 values -> d_model 32, 4 heads, feed-forward 64, 2
           layers, 8 classes, learned positions, window 16 frames, hop 8,
           random weights, saved with sattn.nn.save_safetensors; windows/s;
  shipped  the shipped modulation recogniser
           (examples/recognizer/recognizer.safetensors: conv stem, power
           normalisation, CLS token, window 64 frames of 16 I/Q samples,
           hop 64) on I/Q windows of its training generator; windows/s.

Peers of w1 and encoder:
  naive          PyTorch, the whole window recomputed per hop (the hop's
                 rows kept): a baseline, not what an expert streams;
  ORT window     ONNX Runtime (CPU, MLAS), the same whole-window export;
  torch last-hop PyTorch, only the hop's queries against the window
                 (mha(x[-hop:], x, x), and the encoder's per-row parts on
                 those rows only);
  ORT last-hop   ONNX Runtime, the same last-hop export;
  torch KV cache PyTorch as an expert streams it: only the hop's new frames
                 are projected, K and V live in a preallocated ring, the
                 hop's queries attend to the window's keys, every
                 intermediate has a preallocated buffer (out= variants),
                 torch.inference_mode.
Peers of whole: PyTorch and ONNX Runtime at batch 1 (one window per call,
as a live stream runs it) and at batch 64 (64 windows per call: the
offline way), both on the module as one deploys it for full windows
(whole: StockRecogniser, the stock nn.TransformerEncoder, no mask;
shipped: the module's own forward), checked against the module's
forward.

sattn's figures come from sattn-bench in the same repeats (--throughput-only
for W1, --encoder, --whole), and the one-thread FMA peak (sattn-bench
--fma-peak) too.  Every ratio is the median of per-repeat ratios, the
peers and sattn measured back to back in each repeat.  Rates are per CPU
second: of the computing thread for PyTorch and sattn (time.thread_time,
CLOCK_THREAD_CPUTIME_ID), of the node process for ONNX Runtime (its CPU
provider runs on the calling thread; the process's other threads idle),
so preemption by other tenants does not count.

Models are exported with torch.onnx.export (opset 14) from the same
PyTorch modules.  Before timing, the exports' outputs (run by ONNX Runtime)
and the KV-cache peer's are checked against PyTorch's module on the same
input; the exit status is 1 when one disagrees.

Usage (run-bench.sh runs it):
  peers.py --bench SATTN-BENCH --ort ORT-DIR --work DIR
           [--sattn-json FILE] [--quick]
           [--only w1,encoder,whole,shipped]
ORT-DIR holds node_modules/onnxruntime-node (npm install --ignore-scripts
onnxruntime-node@1.30.0); without it (or without node) the ORT peers are
left out and said so.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch_baseline as tb  # noqa: E402  (sets the one-thread env first)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import warnings  # noqa: E402
warnings.filterwarnings("ignore")

# ------------------------------------------------------------ helpers


def med(v):
    v = [x for x in v if x is not None and math.isfinite(x)]
    return statistics.median(v) if v else None


def ratio_med(num, den):
    return med([a / b for a, b in zip(num, den)
                if a is not None and b and math.isfinite(a)])


def fmt_rate(v):
    return "n/a" if v is None else "{:,.0f}".format(v)


def fmt_x(v):
    return "n/a" if v is None else "%.2fx" % v


def run_json(cmd):
    """Run cmd, return the JSON lines it wrote to the file named after
    --json in it (or printed on stdout when there is none)."""
    if "--json" in cmd:
        path = cmd[cmd.index("--json") + 1]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
        try:
            with open(path) as f:
                return [json.loads(x) for x in f if x.strip()]
        except (OSError, ValueError):
            return []
    p = subprocess.run(cmd, check=False, stdout=subprocess.PIPE, text=True)
    return [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]


def timed_loop(step, budget, per_call):
    """Call step() for `budget` seconds; units per CPU second of this
    thread, per_call units per call."""
    calls = 0
    c0, t0 = time.thread_time(), time.perf_counter()
    while True:
        for _ in range(4):
            step()
        calls += 4
        if time.perf_counter() - t0 >= budget:
            break
    return calls * per_call / (time.thread_time() - c0)


class Ort:
    """ONNX Runtime through ort_peer.js (node)."""

    def __init__(self, ort_dir, work):
        self.dir = os.path.abspath(ort_dir) if ort_dir else None
        self.work = work
        self.node = shutil.which("node") or shutil.which("nodejs")
        self.ok = bool(ort_dir and self.node and os.path.isdir(
            os.path.join(ort_dir, "node_modules", "onnxruntime-node")))

    def run(self, models, budget):
        """models: dicts name, path, shape[, check_in, check_out]; returns
        name -> units per CPU second (per_call units per run)."""
        if not self.ok:
            return {}
        job = os.path.join(self.work, "ort-job.json")
        with open(job, "w") as f:
            json.dump({"ort": self.dir, "budget": budget,
                       "models": models}, f)
        p = subprocess.run([self.node, os.path.join(HERE, "ort_peer.js"),
                            job], stdout=subprocess.PIPE, text=True,
                           check=False)
        if p.returncode != 0:
            print("  ONNX Runtime run failed (status %d)" % p.returncode)
            return {}
        per = {m["name"]: m.get("per_call", 1) for m in models}
        out = {}
        for line in p.stdout.splitlines():
            r = json.loads(line)
            out[r["name"]] = r["runs"] * per[r["name"]] / r["cpu_s"]
        return out

    def check(self, name, onnx_path, x, want, tol_rel=1e-4):
        """ORT's output of onnx_path on x (numpy) against want (numpy)."""
        if not self.ok:
            return None
        xin = os.path.join(self.work, name + ".in.f32")
        yout = os.path.join(self.work, name + ".out.f32")
        x.astype("<f4").tofile(xin)
        self.run([{"name": name, "path": onnx_path, "shape": list(x.shape),
                   "check_in": xin, "check_out": yout}], 0.01)
        if not os.path.exists(yout):
            return float("inf"), 0.0
        y = np.fromfile(yout, dtype="<f4")
        if y.size != want.size:
            return float("inf"), 0.0
        err = float(np.abs(y - want.ravel()).max())
        tol = tol_rel * (1.0 + float(np.abs(want).max()))
        return err, tol


def export(module, example, path):
    """torch.onnx.export with gradients enabled: under no_grad,
    nn.MultiheadAttention takes its fused inference path, which has no
    ONNX export; the graph is the same either way."""
    module.eval()
    with torch.enable_grad():
        torch.onnx.export(module, (example,), path, opset_version=14,
                          input_names=["x"], output_names=["y"])


def fma_peak(bench):
    r = run_json([bench, "--fma-peak"])
    return r[0].get("peak_gflops") if r else None


# ------------------------------------------------- attention modules


class WindowAttn(nn.Module):
    """The whole window: mha(x, x, x), every row (x: (1, n, E))."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class LastHopAttn(nn.Module):
    """Only the hop's queries: mha(x[:, -h:], x, x)."""

    def __init__(self, mha, h):
        super().__init__()
        self.mha, self.h = mha, h

    def forward(self, x):
        q = x[:, x.shape[1] - self.h:]
        return self.mha(q, x, x, need_weights=False)[0]


class EncoderRows(nn.Module):
    """nn.TransformerEncoderLayer's formula (post-norm, relu) on the last
    `rows` rows of the window as queries, every row as keys: rows = n is
    the whole layer, rows = h the hop's rows only (the per-row parts run
    on those rows alone).  Written out so that the export and PyTorch run
    the same operations (the stock layer's inference fast path has no
    ONNX export)."""

    def __init__(self, layer, rows):
        super().__init__()
        self.layer, self.rows = layer, rows

    def forward(self, x):
        L = self.layer
        q = x[:, x.shape[1] - self.rows:]
        a = L.self_attn(q, x, x, need_weights=False)[0]
        y = L.norm1(q + a)
        return L.norm2(y + L.linear2(torch.relu(L.linear1(y))))


class KVCache:
    """Multi-head attention over a sliding window, streamed: each hop
    projects only its h new frames (one GEMM for Q, K and V, the 1/sqrt(dk)
    scale folded into the Q weights), writes K and V into a preallocated
    ring of the window's n positions, and attends with the hop's queries
    to all n keys.  Order within the ring does not matter: attention
    without positions or mask is invariant under a permutation of the
    keys.  Every intermediate has a buffer allocated here; push() calls
    out= variants only.  With `layer`, the encoder layer's per-row parts
    (residual, LayerNorm, feed-forward) follow on the h rows."""

    def __init__(self, mha, n, h, layer=None):
        E, H = mha.embed_dim, mha.num_heads
        dk = E // H
        if n % h:
            raise ValueError("the ring needs hop | window")
        self.E, self.H, self.dk, self.n, self.h = E, H, dk, n, h
        W = mha.in_proj_weight.detach()
        b = mha.in_proj_bias.detach()
        s = 1.0 / math.sqrt(dk)
        self.w_qkv_t = torch.cat([W[:E] * s, W[E:]], 0).t().contiguous()
        self.b_qkv = torch.cat([b[:E] * s, b[E:]]).contiguous()
        self.w_o_t = mha.out_proj.weight.detach().t().contiguous()
        self.b_o = mha.out_proj.bias.detach().contiguous()
        self.K = torch.zeros(H, n, dk)
        self.V = torch.zeros(H, n, dk)
        self.qkv = torch.empty(h, 3 * E)
        self.q = torch.empty(H, h, dk)
        self.s = torch.empty(H, h, n)
        self.p = torch.empty(H, h, n)
        self.o = torch.empty(H, h, dk)
        self.ot = torch.empty(h, H, dk)
        self.y = torch.empty(h, E)
        self.slot = 0
        self.layer = layer
        if layer is not None:
            F = layer.linear1.out_features
            self.w1_t = layer.linear1.weight.detach().t().contiguous()
            self.b1 = layer.linear1.bias.detach()
            self.w2_t = layer.linear2.weight.detach().t().contiguous()
            self.b2 = layer.linear2.bias.detach()
            self.n1 = (layer.norm1.weight.detach(), layer.norm1.bias.detach(),
                       layer.norm1.eps)
            self.n2 = (layer.norm2.weight.detach(), layer.norm2.bias.detach(),
                       layer.norm2.eps)
            self.r1 = torch.empty(h, E)
            self.f = torch.empty(h, F)
            self.r2 = torch.empty(h, E)
        self.softmax_out = torch.ops.aten._softmax.out

    def push(self, x):
        """x: (h, E) new frames; returns the (h, E) output rows (a buffer
        reused by the next push)."""
        E, H, dk, h = self.E, self.H, self.dk, self.h
        torch.addmm(self.b_qkv, x, self.w_qkv_t, out=self.qkv)
        qkv = self.qkv.view(h, 3, H, dk)
        sl = slice(self.slot, self.slot + h)
        self.K[:, sl].copy_(qkv[:, 1].transpose(0, 1))
        self.V[:, sl].copy_(qkv[:, 2].transpose(0, 1))
        self.q.copy_(qkv[:, 0].transpose(0, 1))
        self.slot = (self.slot + h) % self.n
        torch.bmm(self.q, self.K.transpose(1, 2), out=self.s)
        self.softmax_out(self.s, -1, False, out=self.p)
        torch.bmm(self.p, self.V, out=self.o)
        self.ot.copy_(self.o.transpose(0, 1))
        torch.addmm(self.b_o, self.ot.view(h, E), self.w_o_t, out=self.y)
        if self.layer is None:
            return self.y
        torch.add(x, self.y, out=self.r1)
        y1 = torch.layer_norm(self.r1, (E,), *self.n1)
        torch.addmm(self.b1, y1, self.w1_t, out=self.f)
        self.f.relu_()
        torch.addmm(self.b2, self.f, self.w2_t, out=self.r2)
        self.r2.add_(y1)
        return torch.layer_norm(self.r2, (E,), *self.n2)


def kv_check(kv, ref, x, n, h):
    """Stream x through the KV cache; compare the rows of the windows
    once full against ref(window) (the last h rows)."""
    worst, refmax = 0.0, 0.0
    with torch.inference_mode():
        for end in range(h, x.shape[0] + 1, h):
            y = kv.push(x[end - h:end]).clone()
            if end >= n:
                r = ref(x[end - n:end].unsqueeze(0))[0, -h:]
                worst = max(worst, (y - r).abs().max().item())
                refmax = max(refmax, r.abs().max().item())
    return worst, 1e-4 * (1.0 + refmax)


# ---------------------------------------------------- W1 and encoder


def stream_peers(title, unit_name, n, h, E, modules, kv_factory, sattn_fn,
                 flops, args, ort, tag):
    """The five peers of a streaming workload and sattn, side by side.
    modules: (whole-window module, last-hop module, naive callable on a
    (1, n, E) window returning the hop's rows); kv_factory() a fresh
    KVCache; sattn_fn(seconds) -> {"core", "pipe"[, "core_fast",
    "pipe_fast"]} frames/s (the _fast ones with precision=fast); flops:
    useful FLOP per frame (sattn's count) for the % of peak."""
    whole_m, last_m, naive = modules
    failures = 0
    x = torch.randn(max(8 * n, 4096), E)
    ex = x[:n].unsqueeze(0).contiguous()
    paths = {}
    with torch.inference_mode():
        want_w = whole_m(ex)[0].numpy()
        want_l = last_m(ex)[0].numpy()
    for key, mod, want in (("window", whole_m, want_w),
                           ("lasthop", last_m, want_l)):
        paths[key] = os.path.join(args.work, "%s-%s.onnx" % (tag, key))
        export(mod, ex, paths[key])
        chk = ort.check("%s-%s" % (tag, key), paths[key], ex.numpy(), want)
        if chk is not None:
            ok = chk[0] <= chk[1]
            failures += not ok
            print("  ORT %s export agrees with PyTorch: max-abs %.3g "
                  "(tol %.3g) %s" % (key, chk[0], chk[1],
                                     "ok" if ok else "FAILED"))
    kv = kv_factory()
    worst, tol = kv_check(kv, last_m, x[:4 * n], n, h)
    failures += worst > tol
    print("  KV-cache peer agrees with PyTorch's module: max-abs %.3g "
          "(tol %.3g) %s" % (worst, tol, "ok" if worst <= tol else "FAILED"))

    budget = 0.15 if args.quick else args.time
    reps = 1 if args.quick else args.repeats
    wins = x.unfold(0, n, h).transpose(1, 2)        # (B, n, E) views
    B = wins.shape[0]
    names = ["naive", "ort_window", "torch_lasthop", "ort_lasthop", "kv"]
    sides = ["core", "pipe", "core_fast", "pipe_fast"]
    v = {k: [] for k in names + sides + ["peak"]}
    state = {"i": 0, "pos": 0}

    def step_naive():
        i = state["i"] = (state["i"] + 1) % B
        naive(wins[i:i + 1])

    def step_last():
        i = state["i"] = (state["i"] + 1) % B
        last_m(wins[i:i + 1])

    kv = kv_factory()

    def step_kv():
        p = state["pos"]
        if p + h > x.shape[0]:
            p = 0
        kv.push(x[p:p + h])
        state["pos"] = p + h
    with torch.inference_mode():
        for _ in range(n // h):
            step_kv()
    for rep in range(reps):
        with torch.inference_mode():
            v["naive"].append(timed_loop(step_naive, budget, h))
            v["torch_lasthop"].append(timed_loop(step_last, budget, h))
            v["kv"].append(timed_loop(step_kv, budget, h))
        o = ort.run([{"name": "window", "path": paths["window"],
                      "shape": [1, n, E], "per_call": h},
                     {"name": "lasthop", "path": paths["lasthop"],
                      "shape": [1, n, E], "per_call": h}], budget)
        v["ort_window"].append(o.get("window"))
        v["ort_lasthop"].append(o.get("lasthop"))
        got = sattn_fn(budget)
        for k in sides:
            v[k].append(got.get(k))
        v["peak"].append(fma_peak(args.bench))
        print("  repeat %d/%d done" % (rep + 1, reps))
        sys.stdout.flush()

    label = {
        "naive": "PyTorch, whole window per hop (naive peer)",
        "ort_window": "ONNX Runtime 1.30, whole window per hop",
        "torch_lasthop": "PyTorch, the hop's %d queries against the window" % h,
        "ort_lasthop": "ONNX Runtime 1.30, the same last-hop export",
        "kv": "PyTorch with a KV cache (the hop's frames projected, "
              "ring of K/V, %d x %d)" % (h, n),
    }
    print()
    print("%s, %s per CPU second, one thread; medians of %d interleaved "
          "repeats (ratios: medians of per-repeat ratios):" % (
              title, unit_name, reps))
    print()
    print("| peer | %s | sattn core ÷ peer | sattn pipeline ÷ peer |"
          % unit_name)
    print("|---|---:|---:|---:|")
    res = {}
    for k in names:
        r = med(v[k])
        rc, rp = ratio_med(v["core"], v[k]), ratio_med(v["pipe"], v[k])
        res[k] = (r, rc, rp)
        print("| %s | %s | %s | %s |" % (label[k], fmt_rate(r), fmt_x(rc),
                                         fmt_x(rp)))
    core, pipe, peak = med(v["core"]), med(v["pipe"]), med(v["peak"])
    fast = any(v["core_fast"])
    print("| **sattn core** (one hop per push) | %s | | |" % fmt_rate(core))
    print("| **sattn pipeline** (appsrc ! sattn ! fakesink) | %s | | |"
          % fmt_rate(pipe))
    if fast:
        print("| **sattn core, precision=fast** | %s | | |"
              % fmt_rate(med(v["core_fast"])))
        print("| **sattn pipeline, precision=fast** | %s | | |"
              % fmt_rate(med(v["pipe_fast"])))
        print()
        print("precision=fast (the projections summed in float, "
              "SattnStreamConfig.precision) ÷ each peer, same repeats:")
        print()
        print("| peer | sattn core fast ÷ peer | sattn pipeline fast ÷ peer |")
        print("|---|---:|---:|")
        for k in names:
            res[k] = res[k] + (ratio_med(v["core_fast"], v[k]),
                               ratio_med(v["pipe_fast"], v[k]))
            print("| %s | %s | %s |" % (label[k], fmt_x(res[k][3]),
                                        fmt_x(res[k][4])))
        print("| sattn exact (the default), same side | %s | %s |"
              % (fmt_x(ratio_med(v["core_fast"], v["core"])),
                 fmt_x(ratio_med(v["pipe_fast"], v["pipe"]))))

    def frac(key):
        return med([a * flops * 1e-9 / k for a, k in zip(v[key], v["peak"])
                    if a and k])
    pf = pff = None
    if peak and pipe:
        pf, cf = frac("pipe"), frac("core")
        print()
        print("useful work %.0f FLOP per frame; one-thread FMA peak %.1f "
              "GFLOP/s (per CPU second, same repeats): sattn core %.1f "
              "GFLOP/s = %.1f%% of peak, pipeline %.1f GFLOP/s = %.1f%%"
              % (flops, peak, core * flops * 1e-9, 100 * cf,
                 pipe * flops * 1e-9, 100 * pf))
        if fast:
            pff = frac("pipe_fast")
            print("precision=fast: core %.1f%% of peak, pipeline %.1f%%"
                  % (100 * frac("core_fast"), 100 * pff))
    best = None
    for k in ("kv", "ort_lasthop"):
        if res[k][0] is not None and (best is None
                                       or res[k][0] > res[best][0]):
            best = k
    return res, best, pf, pff, failures


def w1_main(args, ort):
    with open(args.sattn_json) as f:
        cfgs = [json.loads(x) for x in f if x.strip()]
    cfg = next((c for c in cfgs if c["workload"] == "W1"
                and c["weights"] == "random" and c.get("dump")), None)
    if cfg is None:
        print("no W1 random configuration with a dump in %s: skipped"
              % args.sattn_json)
        return 0, []
    n, h, E = cfg["window"], cfg["hop"], cfg["d_model"]
    mha = tb.build_mha(cfg, cfg["dump"])

    def naive(w):
        return mha(w, w, w, need_weights=False)[0][:, n - h:]

    def sattn_fn(sec):
        got = {}
        for prec, sfx in (("exact", ""), ("fast", "_fast")):
            with tempfile.NamedTemporaryFile(suffix=".jsonl") as t:
                r = run_json([args.bench, "--throughput-only", "--only",
                              "W1", "--weights", "random", "--time",
                              "%.3f" % sec, "--repeats", "1", "--precision",
                              prec, "--json", t.name])
            if r:
                got["core" + sfx] = r[0].get("core_fps")
                got["pipe" + sfx] = r[0].get("pipeline_fps")
        return got
    print("== W1 attention (64 channels, 4 heads, window 256, hop 16, "
          "random weights): the peers")
    res, best, pf, pff, fail = stream_peers(
        "W1 attention (d_model %d, %d heads, window %d, hop %d, random "
        "weights)" % (E, cfg["heads"], n, h), "frames/s", n, h, E,
        (WindowAttn(mha).eval(), LastHopAttn(mha, h).eval(), naive),
        lambda: KVCache(mha, n, h), sattn_fn, cfg["flops_per_frame"], args,
        ort, "w1")
    targets = []
    if best:
        rp = res[best][2]
        name = {"kv": "PyTorch KV cache",
                "ort_lasthop": "ONNX Runtime last-hop"}[best]
        targets.append(("W1 through the pipeline >= 3.5x the best expert "
                        "peer (%s)" % name, rp, 3.5))
    targets.append(("W1 through the pipeline >= 55% of the FMA peak", pf,
                    0.55))
    if best and len(res[best]) > 4:
        targets.append(("W1 through the pipeline, precision=fast, >= 3.5x "
                        "the best expert peer (%s)" % name, res[best][4],
                        3.5))
    if pff is not None:
        targets.append(("W1 through the pipeline, precision=fast, >= 55% of "
                        "the FMA peak", pff, 0.55))
    return fail, targets


def encoder_main(args, ort):
    ed = os.path.join(args.work, "encoder")
    os.makedirs(ed, exist_ok=True)
    ej = os.path.join(args.work, "encoder-first.jsonl")
    cfgs = run_json([args.bench, "--encoder", "--quick", "--json", ej,
                     "--dump", ed, "--no-pipeline"])
    if not cfgs:
        print("sattn-bench --encoder wrote nothing: encoder peers skipped")
        return 1, []
    cfg = cfgs[0]
    E, H, Fd = cfg["d_model"], cfg["heads"], cfg["d_ff"]
    n, h = cfg["window"], cfg["hop"]
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=Fd, dropout=0.0,
                                       batch_first=True)
    layer.load_state_dict(tb.load_safetensors(cfg["weights"]), strict=True)
    layer.eval()

    def naive(w):
        return layer(w)[:, n - h:]

    def sattn_fn(sec):
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as t:
            r = run_json([args.bench, "--encoder", "--time", "%.3f" % sec,
                          "--repeats", "1", "--json", t.name, "--dump", ed])
        return {"core": r[0].get("core_fps"),
                "pipe": r[0].get("pipeline_fps") or None} if r else {}
    print()
    print("== Encoder layer on W1 (feed-forward %d, random weights): the "
          "peers" % Fd)
    print("  (sattn's layer has RoPE positions; PyTorch's and ONNX "
          "Runtime's have none: slightly less work)")
    flops = tb_flops_w1(E, H, n) + 4.0 * E * Fd
    res, best, pf, _, fail = stream_peers(
        "Encoder layer on W1 (d_model %d, %d heads, window %d, hop %d, "
        "feed-forward %d)" % (E, H, n, h, Fd), "frames/s", n, h, E,
        (EncoderRows(layer, n).eval(), EncoderRows(layer, h).eval(), naive),
        lambda: KVCache(layer.self_attn, n, h, layer), sattn_fn, flops,
        args, ort, "enc")
    return fail, []


def tb_flops_w1(E, H, n):
    dk = E / H
    return 2.0 * n * H * dk * 2 + 2.0 * E * H * dk * 3 + 2.0 * H * dk * E


# ------------------------------------------------------- whole model


class StockRecogniser(nn.Module):
    """A SignalTransformer (learned positions, mean pooling, a Linear
    head) on full windows, written the way one deploys it: the embedding
    plus positions, the stock nn.TransformerEncoder (PyTorch's inference
    fast path; a plain graph for the export), the mean over rows, the
    head.  No key-padding mask: every frame of a full window is usable,
    so the result equals the module's forward."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        net = self.net
        h = net.embed(x) + net.pos_embed[:x.shape[1]]
        return net.head(net.encoder(h).mean(dim=1))



def whole_main(args, ort):
    """The bench's per-window model: random weights, written here."""
    _use_build_lib(args)
    from sattn.nn import SignalTransformer, save_safetensors
    n, h, Fr, D, H, Df, L, C = 16, 8, 16, 32, 4, 64, 2, 8
    torch.manual_seed(0)
    net = SignalTransformer(d_frame=Fr, d_model=D, heads=H, layers=L,
                            d_ff=Df, classes=C, positions="learned",
                            max_window=n).eval()
    path = os.path.join(args.work, "recogniser.safetensors")
    save_safetensors(net, path, extra_metadata={"window": str(n)})
    print()
    print("== Per-window recogniser (frame %d -> d_model %d, %d heads, "
          "feed-forward %d, %d layers, %d classes, learned positions, window "
          "%d, hop %d; sattn.nn.SignalTransformer, random weights): the peers"
          % (Fr, D, H, Df, L, C, n, h))
    x = torch.randn(4096, Fr)
    wins = x.unfold(0, n, h).transpose(1, 2).contiguous()     # (B, n, Fr)
    return whole_peers(args, ort, "Per-window recogniser", "recogniser",
                       net, StockRecogniser(net).eval(), path, wins, n, h)


def shipped_main(args, ort):
    """The shipped modulation recogniser (examples/recognizer): its file,
    and its PyTorch module as train.py loads it (conv stem, power
    normalisation, CLS token), on I/Q windows of its training generator."""
    _use_build_lib(args)
    rec_dir = os.path.join(HERE, "..", "..", "examples", "recognizer")
    sys.path.insert(0, rec_dir)
    import iqgen
    import train
    path = os.path.normpath(os.path.join(rec_dir, "recognizer.safetensors"))
    net, md = train.load(path)
    n = int(md.get("window", train.FRAMES))
    h = int(md.get("hop", n))
    print()
    print("== The shipped recogniser (%s: %d parameters, window %d frames of "
          "%d I/Q samples, hop %d; conv stem, power normalisation, CLS "
          "token): the peers" % (os.path.relpath(path), sum(
              t.numel() for t in net.parameters()), n, train.FRAME_SAMPLES,
              h))
    X, _, _ = iqgen.make_windows(5, 256)
    wins = torch.from_numpy(train.frames(X).astype(np.float32))
    # the module as it runs full windows is its own forward (no mask)
    return whole_peers(args, ort, "Shipped recogniser", "shipped", net,
                       net, path, wins, n, h)


def _use_build_lib(args):
    # the package loads libsattn on import: the build's own
    lib = os.path.join(os.path.dirname(os.path.abspath(args.bench)), "..",
                       "..", "core", "libsattn.so.1")
    if "SATTN_LIBRARY" not in os.environ and os.path.exists(lib):
        os.environ["SATTN_LIBRARY"] = os.path.normpath(lib)


def whole_peers(args, ort, title, tag, net, stock, path, wins, n, h):
    """PyTorch and ONNX Runtime at batch 1 and 64 on `stock` (checked
    against net's forward), and sattn-bench --whole on path, in
    interleaved repeats; prints the table; returns (failures, targets)."""
    failures = 0
    B = wins.shape[0]
    Fr = wins.shape[2]
    paths = {}
    with torch.inference_mode():
        ex = wins[:64].contiguous()
        want = net(ex)
        d = (stock(ex) - want).abs().max().item()
        tol = 1e-4 * (1.0 + want.abs().max().item())
    failures += d > tol
    print("  the deployed form agrees with the module's forward: "
          "max-abs %.3g (tol %.3g) %s" % (d, tol, "ok" if d <= tol
                                          else "FAILED"))
    for bs in (1, 64):
        ex = wins[:bs].contiguous()
        paths[bs] = os.path.join(args.work, "%s-b%d.onnx" % (tag, bs))
        export(stock, ex, paths[bs])
        with torch.inference_mode():
            want = net(ex).numpy()
        chk = ort.check("%s-b%d" % (tag, bs), paths[bs], ex.numpy(), want)
        if chk is not None:
            ok = chk[0] <= chk[1]
            failures += not ok
            print("  ORT batch-%d export agrees with PyTorch: max-abs %.3g "
                  "(tol %.3g) %s" % (bs, chk[0], chk[1],
                                     "ok" if ok else "FAILED"))
    budget = 0.15 if args.quick else args.time
    reps = 1 if args.quick else args.repeats
    keys = ["torch1", "torch64", "ort1", "ort64", "core", "core_buf", "pipe",
            "fast_core", "fast_core_buf", "fast_pipe", "peak"]
    v = {k: [] for k in keys}
    fpw = None
    state = {"i": 0}

    def step(bs):
        def f():
            i = state["i"]
            if i + bs > B:
                i = 0
            stock(wins[i:i + bs])
            state["i"] = i + bs
        return f
    for rep in range(reps):
        with torch.inference_mode():
            v["torch1"].append(timed_loop(step(1), budget, 1))
            v["torch64"].append(timed_loop(step(64), budget, 64))
        o = ort.run([{"name": "b1", "path": paths[1], "shape": [1, n, Fr],
                      "per_call": 1},
                     {"name": "b64", "path": paths[64],
                      "shape": [64, n, Fr], "per_call": 64}], budget)
        v["ort1"].append(o.get("b1"))
        v["ort64"].append(o.get("b64"))
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as t:
            r = run_json([args.bench, "--whole", path, "--window", str(n),
                          "--hop", str(h), "--time", "%.3f" % budget,
                          "--repeats", "1", "--json", t.name])
        r = r[0] if r else {}
        v["core"].append(r.get("core_wps"))
        v["core_buf"].append(r.get("core_buffer_wps"))
        v["pipe"].append(r.get("pipeline_wps"))
        v["fast_core"].append(r.get("fast_core_wps"))
        v["fast_core_buf"].append(r.get("fast_core_buffer_wps"))
        v["fast_pipe"].append(r.get("fast_pipeline_wps"))
        v["peak"].append(r.get("peak_gflops"))
        fpw = r.get("flops_per_window", fpw)
        print("  repeat %d/%d done" % (rep + 1, reps))
        sys.stdout.flush()
    form = "stock encoder" if stock is not net else "the module's forward"
    label = {
        "torch1": "PyTorch (%s), batch 1 (one window per call)" % form,
        "torch64": "PyTorch (%s), batch 64" % form,
        "ort1": "ONNX Runtime 1.30, batch 1",
        "ort64": "ONNX Runtime 1.30, batch 64",
    }
    print()
    print("%s, windows/s per CPU second, one thread; "
          "medians of %d interleaved repeats (ratios: medians of "
          "per-repeat ratios):" % (title, reps))
    print()
    print("| peer | windows/s | sattn core (10 ms buffers) ÷ peer | "
          "sattn pipeline ÷ peer | precision=fast: core ÷ peer | "
          "precision=fast: pipeline ÷ peer |")
    print("|---|---:|---:|---:|---:|---:|")
    res = {}
    for k in ("torch1", "ort1", "torch64", "ort64"):
        r = med(v[k])
        rc, rp = ratio_med(v["core_buf"], v[k]), ratio_med(v["pipe"], v[k])
        fc = ratio_med(v["fast_core_buf"], v[k])
        fp = ratio_med(v["fast_pipe"], v[k])
        res[k] = (r, rc, rp, fc, fp)
        print("| %s | %s | %s | %s | %s | %s |"
              % (label[k], fmt_rate(r), fmt_x(rc), fmt_x(rp), fmt_x(fc),
                 fmt_x(fp)))
    print("| **sattn core**, one hop per push | %s | | |"
          % fmt_rate(med(v["core"])))
    print("| **sattn core**, 10 ms buffers per push | %s | | |"
          % fmt_rate(med(v["core_buf"])))
    print("| **sattn pipeline** (appsrc ! sattn output=classes ! fakesink, "
          "10 ms buffers) | %s | | |" % fmt_rate(med(v["pipe"])))
    print("| **sattn core, precision=fast**, 10 ms buffers per push | %s "
          "| | |" % fmt_rate(med(v["fast_core_buf"])))
    print("| **sattn pipeline, precision=fast** | %s | | |"
          % fmt_rate(med(v["fast_pipe"])))
    pf = ff = None
    if fpw and med(v["peak"]):
        fr = {k: med([a * fpw * 1e-9 / p for a, p in zip(v[k], v["peak"])
                      if a and p]) for k in ("core", "core_buf", "pipe",
                                             "fast_core_buf", "fast_pipe")}
        pf, ff = fr["pipe"], fr["fast_pipe"]
        print()
        print("useful work %.0f FLOP per window; one-thread FMA peak %.1f "
              "GFLOP/s (per CPU second, same repeats): sattn core (one hop "
              "per push) %.1f%%, core (10 ms buffers) %.1f%%, pipeline "
              "%.1f%% of peak" % (fpw, med(v["peak"]), 100 * fr["core"],
                                  100 * fr["core_buf"], 100 * fr["pipe"]))
        print("precision=fast: core (10 ms buffers) %.1f%%, pipeline %.1f%% "
              "of peak" % (100 * fr["fast_core_buf"], 100 * fr["fast_pipe"]))
        bestpeer = max((res[k][0] or 0) for k in res)
        print("best peer at the same count: %.1f%% of peak"
              % (100 * bestpeer * fpw * 1e-9 / med(v["peak"])))
    best1 = max(("torch1", "ort1"), key=lambda k: res[k][0] or 0)
    targets = [
        ("%s through the pipeline >= 2x the best batch-1 peer (%s)"
         % (title, label[best1]), res[best1][2], 2.0),
        ("%s through the pipeline >= 1x ONNX Runtime batch 64" % title,
         res["ort64"][2], 1.0),
        ("%s (pipeline) >= 50%% of the FMA peak" % title, pf, 0.5),
        ("precision=fast: %s through the pipeline >= 4x the best "
         "batch-1 peer (%s)" % (title, label[best1]), res[best1][4], 4.0),
        ("precision=fast: %s through the pipeline >= 2x ONNX "
         "Runtime batch 64" % title, res["ort64"][4], 2.0),
        ("precision=fast: %s (pipeline) >= 35%% of the FMA "
         "peak" % title, ff, 0.35),
    ]
    return failures, targets


# ------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="sattn-bench executable")
    ap.add_argument("--ort", help="directory holding "
                    "node_modules/onnxruntime-node")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--sattn-json", help="sattn-bench --json --dump lines "
                    "(for W1's weights)")
    ap.add_argument("--time", type=float, default=1.0,
                    help="seconds per peer per repeat (1.0)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="w1,encoder,whole,shipped")
    args = ap.parse_args()
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(0)
    os.makedirs(args.work, exist_ok=True)
    ort = Ort(args.ort, args.work)
    print("peers: torch %s (%d thread), %s; OPENBLAS_CORETYPE=%s" % (
        torch.__version__, torch.get_num_threads(),
        "ONNX Runtime via %s" % ort.node if ort.ok else
        "ONNX Runtime not available (its peers are left out)",
        os.environ.get("OPENBLAS_CORETYPE", "(default)")))
    failures, targets = 0, []
    only = args.only.split(",")
    if "w1" in only and args.sattn_json:
        f, t = w1_main(args, ort)
        failures += f
        targets += t
    if "encoder" in only:
        f, t = encoder_main(args, ort)
        failures += f
        targets += t
    if "whole" in only:
        f, t = whole_main(args, ort)
        failures += f
        targets += t
    if "shipped" in only:
        f, t = shipped_main(args, ort)
        failures += f
        targets += t
    print()
    print("Targets (single thread, figures of the tables above):")
    for what, got, want in targets:
        if got is None:
            print("  %s: n/a (peer or figure missing)" % what)
        elif want < 1.0:
            print("  %s: %.1f%% -> %s" % (what, 100 * got,
                                          "met" if got >= want else "MISSED"))
        else:
            print("  %s: %.2fx -> %s" % (what, got,
                                         "met" if got >= want else "MISSED"))
    print("agreement checks: %d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
