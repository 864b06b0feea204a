#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The naive PyTorch peer of the sattn benchmark workloads W1-W4.

PyTorch recomputing windows: a baseline, not what an expert streams (the
expert peers, a KV cache and ONNX Runtime, are in peers.py; run-bench.sh
runs both).

Reads the JSON lines written by `sattn-bench --json FILE --dump DIR` (one
object per workload and weight set, with sattn's frames/s and the directory
holding that configuration's inputs, weights and first outputs) and runs
the same workloads with torch.nn.MultiheadAttention on one thread:

  streaming  one window per call (n frames in, the last hop's rows kept),
             need_weights=False: what a per-window prototype does live;
  batched    every window of a long signal at once (Tensor.unfold), in
             batches that bound memory: the offline way;
  batched, new rows only
             the same, but only the hop's new query rows per window
             (query = last h frames, keys = the window): the least work
             torch can do on this problem without a K/V cache.

First it checks that torch's outputs on sattn's dumped inputs agree with
sattn's dumped output rows (max-abs <= 1e-4 * (1 + max|torch|)), then it
prints frames/s and the ratios sattn / torch.  With --bench (the
sattn-bench executable), sattn's core and pipeline frames/s are measured
again in each repeat, right after torch's (sattn-bench --throughput-only),
and every ratio is the median of per-repeat ratios: on a shared, noisy
machine both sides then see the same conditions.  Without it, sattn's
figures come from the JSON file.  Exit status 1 when an agreement check
fails.  Timings are medians over interleaved repeats.

Frames/s are per second of CPU time of the computing thread
(time.thread_time), as sattn-bench reports them, so that preemption by
other processes on a shared machine does not count; the wall-clock figures
are kept in the JSON output.
"""

import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

# One thread for real: torch.set_num_threads does not reach the OpenBLAS
# that Debian's torch calls for its matrix products, which would otherwise
# start a second thread of its own.  Must be set before torch loads.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402


def load_safetensors(path):
    """Minimal safetensors reader (F32 only), enough for the bench files."""
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError("%s: dtype %s not supported here" % (name, info["dtype"]))
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def build_mha(cfg, dump_dir):
    E, H = cfg["d_model"], cfg["heads"]
    mha = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True)
    mha.eval()
    with torch.no_grad():
        if cfg["weights"] == "random":
            sd = load_safetensors(os.path.join(dump_dir, "weights.safetensors"))
            mha.in_proj_weight.copy_(sd["in_proj_weight"])
            mha.in_proj_bias.copy_(sd["in_proj_bias"])
            mha.out_proj.weight.copy_(sd["out_proj.weight"])
            mha.out_proj.bias.copy_(sd["out_proj.bias"])
        else:
            eye = torch.eye(E)
            mha.in_proj_weight.copy_(torch.cat([eye, eye, eye], 0))
            mha.in_proj_bias.zero_()
            mha.out_proj.weight.copy_(eye)
            mha.out_proj.bias.zero_()
    return mha


def causal_mask(n_q, n, causal):
    """Bool mask (True = hidden) for the last n_q query rows of an n-window."""
    if not causal:
        return None
    q_pos = torch.arange(n - n_q, n).unsqueeze(1)
    k_pos = torch.arange(n).unsqueeze(0)
    return k_pos > q_pos


def check_agreement(mha, cfg, dump_dir):
    with open(os.path.join(dump_dir, "meta.json")) as f:
        meta = json.load(f)
    F, E, n, h = meta["frames"], meta["d_model"], meta["window"], meta["hop"]
    x = torch.from_numpy(np.fromfile(os.path.join(dump_dir, "input.f32"),
                                     dtype="<f4").reshape(F, E).copy())
    ys = torch.from_numpy(np.fromfile(os.path.join(dump_dir, "output.f32"),
                                      dtype="<f4").reshape(F, E).copy())
    mask = causal_mask(n, n, cfg["causal"])
    worst, refmax = 0.0, 0.0
    with torch.inference_mode():
        # streaming: one window per call
        for end in range(n, F + 1, h):
            w = x[end - n:end].unsqueeze(0)
            y = mha(w, w, w, need_weights=False, attn_mask=mask)[0][0]
            d = (y[n - h:] - ys[end - h:end]).abs().max().item()
            worst = max(worst, d)
            refmax = max(refmax, y.abs().max().item())
        # batched over all windows
        wins = x.unfold(0, n, h).transpose(1, 2)
        y = mha(wins, wins, wins, need_weights=False, attn_mask=mask)[0]
        for b in range(wins.shape[0]):
            end = b * h + n
            d = (y[b, n - h:] - ys[end - h:end]).abs().max().item()
            worst = max(worst, d)
    tol = 1e-4 * (1.0 + refmax)
    return worst, tol, worst <= tol


def time_streaming(mha, x, n, h, causal, budget):
    mask = causal_mask(n, n, causal)
    T = x.shape[0]
    pos, calls = 0, 0
    with torch.inference_mode():
        t0, c0 = time.perf_counter(), time.thread_time()
        while True:
            if pos + n > T:
                pos = 0
            w = x[pos:pos + n].unsqueeze(0)
            y = mha(w, w, w, need_weights=False, attn_mask=mask)[0]
            out = y[0, n - h:]
            pos += h
            calls += 1
            t = time.perf_counter()
            if t - t0 >= budget and calls >= 2:
                break
        c = time.thread_time()
    del out
    return calls * h / (c - c0), calls * h / (t - t0)


def max_batch(n, E, H, n_q):
    # keep the scores (bs*H*n_q*n floats) and activations to about 64 MiB
    per = 4 * (H * n_q * n + 8 * n * E)
    return max(1, min(256, (64 << 20) // per))


def best_batch(mha, x, n, h, causal, new_rows_only, budget):
    """The batch size (of 1, 4, 16, 64, 256 windows, memory permitting)
    at which torch runs fastest here: torch is measured at its best."""
    E, H = mha.embed_dim, mha.num_heads
    n_q = h if new_rows_only else n
    B = x.unfold(0, n, h).shape[0]
    cands = [c for c in (1, 4, 16, 64, 256)
             if c <= min(B, max_batch(n, E, H, n_q))] or [1]
    per = budget / len(cands)
    rates = [(time_batched(mha, x, n, h, causal, per, new_rows_only, c)[0], c)
             for c in cands]
    return max(rates)[1]


def time_batched(mha, x, n, h, causal, budget, new_rows_only, bs):
    n_q = h if new_rows_only else n
    mask = causal_mask(n_q, n, causal)
    wins_all = x.unfold(0, n, h).transpose(1, 2)          # (B, n, E) view
    B = wins_all.shape[0]
    bs = min(B, bs)
    done, b = 0, 0
    with torch.inference_mode():
        t0, c0 = time.perf_counter(), time.thread_time()
        while True:
            if b + bs > B:
                b = 0
            wins = wins_all[b:b + bs]
            if new_rows_only:
                q = wins[:, n - h:]
                y = mha(q, wins, wins, need_weights=False, attn_mask=mask)[0]
            else:
                y = mha(wins, wins, wins, need_weights=False, attn_mask=mask)[0]
                y = y[:, n - h:]
            b += bs
            done += bs
            t = time.perf_counter()
            if t - t0 >= budget and done >= 2:
                break
        c = time.thread_time()
    del y
    return done * h / (c - c0), done * h / (t - t0)


def sattn_throughput(bench, cfg, seconds):
    """sattn core and pipeline frames/s for one configuration, measured now."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        cmd = [bench, "--throughput-only", "--only", cfg["workload"],
               "--weights", cfg["weights"], "--time", "%.3f" % seconds,
               "--repeats", "3", "--json", tmp.name]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
        with open(tmp.name) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    if not lines:
        return None, None
    return lines[0].get("core_fps"), lines[0].get("pipeline_fps")


def med(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def fmt(v, spec=".4g"):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return format(v, spec)


def fx(v):
    return "n/a" if v is None else "%.1fx" % v


def encoder_main(a):
    """--encoder-json: nn.TransformerEncoderLayer on the layer file written
    by sattn-bench --encoder (W1 geometry, feed-forward 4 d), one thread:
    per window (streaming recompute: n frames in, the hop's rows kept) and
    batched (windows of a long signal at once, the best of batch sizes 1,
    4, 16, 64).  PyTorch has no RoPE of its own: its layer runs without
    positions, slightly less work than sattn's.  Frames/s per CPU second;
    medians over repeats; sattn's figures from the JSON line."""
    with open(a.encoder_json) as f:
        cfg = [json.loads(line) for line in f if line.strip()][0]
    E, H, F = cfg["d_model"], cfg["heads"], cfg["d_ff"]
    n, h = cfg["window"], cfg["hop"]
    torch.set_num_threads(1)
    layer = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=F,
                                             dropout=0.0, batch_first=True)
    layer.load_state_dict(load_safetensors(cfg["weights"]), strict=True)
    layer.eval()
    x = torch.randn(64 * n, E)
    budget = 0.3 if a.quick else a.time
    reps = 2 if a.quick else a.repeats

    def stream_once():
        pos, calls = 0, 0
        with torch.inference_mode():
            c0, t0 = time.thread_time(), time.perf_counter()
            while True:
                if pos + n > x.shape[0]:
                    pos = 0
                y = layer(x[pos:pos + n].unsqueeze(0))[0, n - h:]
                pos += h
                calls += 1
                if time.perf_counter() - t0 >= budget and calls >= 2:
                    break
            c = time.thread_time()
        del y
        return calls * h / (c - c0)

    wins_all = x.unfold(0, n, h).transpose(1, 2)

    def batched_once(bs):
        B = wins_all.shape[0]
        bs = min(bs, B)
        done, b = 0, 0
        with torch.inference_mode():
            c0, t0 = time.thread_time(), time.perf_counter()
            while True:
                if b + bs > B:
                    b = 0
                y = layer(wins_all[b:b + bs])[:, n - h:]
                b += bs
                done += bs
                if time.perf_counter() - t0 >= budget and done >= 2:
                    break
            c = time.thread_time()
        del y
        return done * h / (c - c0)

    best = max((batched_once(bs), bs) for bs in (1, 4, 16, 64))[1]
    st = statistics.median([stream_once() for _ in range(reps)])
    bt = statistics.median([batched_once(best) for _ in range(reps)])
    core, pipe = cfg["core_fps"], cfg["pipeline_fps"] or None
    print("encoder layer on W1 (d_model %d, %d heads, window %d, hop %d, "
          "feed-forward %d), frames/s per CPU second, one thread:"
          % (E, H, n, h, F))
    print("| torch streaming (per window) | torch batched (batch %d) | "
          "sattn core | sattn pipeline | pipeline / streaming | "
          "pipeline / batched | core / streaming | core / batched |" % best)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")

    def r(u, v):
        return "%.1fx" % (u / v) if u and v else "n/a"
    print("| %s | %s | %s | %s | %s | %s | %s | %s |"
          % (fmt(st), fmt(bt), fmt(core), fmt(pipe), r(pipe, st),
             r(pipe, bt), r(core, st), r(core, bt)))
    print("naive-peer figures through the pipeline: >= 10x torch streaming "
          "(%s), >= 3x torch batched (%s)"
          % ("met" if pipe and pipe >= 10 * st else "NOT met",
             "met" if pipe and pipe >= 3 * bt else "NOT met"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sattn-json",
                    help="JSON lines written by sattn-bench --json --dump")
    ap.add_argument("--encoder-json",
                    help="the JSON line of sattn-bench --encoder: the "
                    "encoder-layer workload instead")
    ap.add_argument("--time", type=float, default=1.5,
                    help="seconds per torch mode per configuration (1.5)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write torch figures as JSON lines here")
    ap.add_argument("--bench", help="sattn-bench executable: measure sattn "
                    "again in each repeat, side by side with torch")
    args = ap.parse_args()
    if args.encoder_json:
        return encoder_main(args)
    if not args.sattn_json:
        ap.error("--sattn-json or --encoder-json is required")
    if args.quick:
        args.time, args.repeats = 0.05, 1

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(0)

    with open(args.sattn_json) as f:
        configs = [json.loads(line) for line in f if line.strip()]

    print("torch %s, %d thread(s), nn.MultiheadAttention(batch_first=True), "
          "inference_mode, need_weights=False; medians of %d interleaved "
          "repeats, %.2g s per mode; OPENBLAS_CORETYPE=%s" % (
              torch.__version__, torch.get_num_threads(), args.repeats,
              args.time, os.environ.get("OPENBLAS_CORETYPE", "(default)")))
    rows, failures, jout = [], 0, []
    for cfg in configs:
        name = "%s %s" % (cfg["workload"], cfg["weights"])
        if not cfg.get("dump"):
            print("  %s: no dump directory in the sattn JSON, skipped" % name)
            continue
        n, h, E = cfg["window"], cfg["hop"], cfg["d_model"]
        t_start = time.perf_counter()
        mha = build_mha(cfg, cfg["dump"])
        worst, tol, ok = check_agreement(mha, cfg, cfg["dump"])
        if not ok:
            failures += 1
        pool_frames = max(4 * n, 4096)
        if pool_frames * E > (8 << 20):
            pool_frames = max((8 << 20) // E, 2 * n + 8 * h)
        x = torch.randn(pool_frames, E)
        st, bt, nt, cs, ps = [], [], [], [], []
        stw, btw, ntw = [], [], []
        per = args.time / args.repeats
        bs_full = best_batch(mha, x, n, h, cfg["causal"], False, per)
        bs_new = best_batch(mha, x, n, h, cfg["causal"], True, per)
        for _ in range(args.repeats):
            for cpu_l, wall_l, f in (
                    (st, stw, lambda: time_streaming(mha, x, n, h,
                                                     cfg["causal"], per)),
                    (bt, btw, lambda: time_batched(mha, x, n, h, cfg["causal"],
                                                   per, False, bs_full)),
                    (nt, ntw, lambda: time_batched(mha, x, n, h, cfg["causal"],
                                                   per, True, bs_new))):
                c, w = f()
                cpu_l.append(c)
                wall_l.append(w)
            if args.bench:
                c, p = sattn_throughput(args.bench, cfg, per)
            else:
                c, p = cfg.get("core_fps"), cfg.get("pipeline_fps")
            cs.append(c)
            ps.append(p)

        def ratios(num, den):
            return med([a / b if a is not None and b else None
                        for a, b in zip(num, den)])
        r = {
            "workload": cfg["workload"], "weights": cfg["weights"],
            "agree_maxabs": worst, "agree_tol": tol, "agree_ok": ok,
            "torch_stream_fps": statistics.median(st),
            "torch_batched_fps": statistics.median(bt),
            "torch_batched_newrows_fps": statistics.median(nt),
            "torch_stream_fps_wall": statistics.median(stw),
            "torch_batched_fps_wall": statistics.median(btw),
            "torch_batched_newrows_fps_wall": statistics.median(ntw),
            "sattn_core_fps": med(cs),
            "sattn_pipeline_fps": med(ps),
            "core_vs_stream": ratios(cs, st),
            "pipeline_vs_stream": ratios(ps, st),
            "core_vs_batched": ratios(cs, bt),
            "pipeline_vs_batched": ratios(ps, bt),
            "core_vs_newrows": ratios(cs, nt),
            "side_by_side": bool(args.bench),
            "batch_full": bs_full, "batch_new_rows": bs_new,
            "frame_rate": cfg["frame_rate"],
        }
        rows.append(r)
        jout.append(r)
        print("  %s: agreement max-abs %.3g (tol %.3g) %s; best batch %d "
              "windows (full), %d (new rows); %.1f s" % (
                  name, worst, tol, "ok" if ok else "FAILED", bs_full, bs_new,
                  time.perf_counter() - t_start))
        sys.stdout.flush()

    print()
    print("Naive peer, PyTorch recomputing windows, side by side (frames "
          "per CPU second of the computing "
          "thread; ratio = sattn frames/s / torch frames/s, %s):" % (
              "median of per-repeat ratios, sattn measured in the same "
              "repeats" if args.bench else
              "sattn figures from the sattn-bench run"))
    print()
    print("| workload | weights | torch streaming | torch batched | "
          "torch batched, new rows | sattn core | sattn pipeline | "
          "core / streaming | pipeline / streaming | core / batched | "
          "pipeline / batched | core / batched new rows |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c, p = r["sattn_core_fps"], r["sattn_pipeline_fps"]
        s, b, nr = (r["torch_stream_fps"], r["torch_batched_fps"],
                    r["torch_batched_newrows_fps"])
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["workload"], r["weights"], fmt(s), fmt(b), fmt(nr), fmt(c),
            fmt(p), fx(r["core_vs_stream"]), fx(r["pipeline_vs_stream"]),
            fx(r["core_vs_batched"]), fx(r["pipeline_vs_batched"]),
            fx(r["core_vs_newrows"])))
    print()
    for r in rows:
        if r["workload"] != "W1":
            continue
        rs, rb = r["pipeline_vs_stream"], r["pipeline_vs_batched"]
        if rs is None or rb is None:
            print("target W1 %s: pipeline figure missing (element not built "
                  "or without weights support)" % r["weights"])
            continue
        print("naive-peer figures, W1 %s through the pipeline: %.1fx torch "
              "streaming (>= 20x: %s), %.1fx torch batched (>= 5x: %s)" % (
                  r["weights"], rs, "met" if rs >= 20 else "NOT met",
                  rb, "met" if rb >= 5 else "NOT met"))
    print("agreement with sattn: %d of %d configuration(s) failed" % (
        failures, len(rows)))
    if args.json:
        with open(args.json, "w") as f:
            for r in jout:
                f.write(json.dumps(r) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
