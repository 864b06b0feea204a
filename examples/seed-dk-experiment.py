#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The seeds' own attention module, run by the sattn element.

The seed documents build self-attention from a module of three bias-free
Linear layers W_q, W_k, W_v mapping d_model to a free d_k, with no output
projection, and show why scores need 1/sqrt(d_k): unscaled, QK^T grows
with d_k and the softmax collapses to one-hot rows.  This script:

 1. builds that module at d_model 8 -> d_k 16 in PyTorch, exports it with
    examples/export-torch-mha.py (tensors W_q.weight, ... as they are),
    runs it through gst-launch-1.0 (filesrc ! rawaudioparse ! sattn
    weights=... ! filesink) and compares the element's 16-value rows with
    the module evaluated by PyTorch in float64;
 2. repeats the seeds' experiment on a live pipeline: d_model 64 -> d_k in
    {32, 128, 512}, weights N(0, 1/d_model) so that Q and K entries are
    about N(0, 1) as the seeds assume, the same frames through sattn with
    scale=1 and with the default scale 1/sqrt(d_k); the element's health
    messages (post-messages=true, one per window) give the mean over
    softmax rows of the largest weight and of the entropy / log(keys),
    printed next to PyTorch's on the same frames and windows (float64,
    and float32 for scale).

Windows are disjoint blocks (window = hop, start=wait), so every window
computes all its rows over all its keys: exactly PyTorch's attention on
each block.  --check makes the exit status say whether the element agrees
with PyTorch: output max-abs <= 1e-5 * (1 + max|ref|) (part 1), and each
table figure within 1e-6 of PyTorch float64 (part 2; both are means of
values in [0, 1] computed in float32 by the element).

Usage: seed-dk-experiment.py [--check] [--frames N] [--window W] [BUILD_DIR]
Needs PyTorch, numpy, gst-launch-1.0 with rawaudioparse (exit 77 without).
SATTN_GST_PRELOAD: libraries preloaded into gst-launch-1.0 only (the
sanitizer runtimes in a sanitizer build).
"""

import argparse
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


try:
    import numpy as np
    import torch
except ImportError as e:
    skip("%s (Debian: python3-torch, python3-numpy)" % e)


class QKVProjection(torch.nn.Module):
    """The seeds' module, as written there."""

    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = torch.nn.Linear(d_model, d_k, bias=False)
        self.W_k = torch.nn.Linear(d_model, d_k, bias=False)
        self.W_v = torch.nn.Linear(d_model, d_k, bias=False)

    def forward(self, x):
        return self.W_q(x), self.W_k(x), self.W_v(x)


def gst_env():
    env = dict(os.environ)
    pre = env.get("SATTN_GST_PRELOAD")
    if pre:
        env["LD_PRELOAD"] = pre + (" " + env["LD_PRELOAD"]
                                   if env.get("LD_PRELOAD") else "")
    return env


def gst_launch(args):
    line = ["gst-launch-1.0"] + args
    r = subprocess.run(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, env=gst_env())
    if r.returncode != 0 or ("-q" not in args and "Got EOS" not in r.stdout):
        print(r.stdout)
        sys.exit("seed-dk-experiment: the pipeline failed: " + " ".join(line))
    return r.stdout


def exporter():
    spec = importlib.util.spec_from_file_location(
        "export_torch_mha", os.path.join(HERE, "export-torch-mha.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def export(mod, m, path):
    """Through the export script's command line, as a user would."""
    pt = path[:-len(".safetensors")] + ".pt"
    torch.save(m.state_dict(), pt)
    so, sys.stdout = sys.stdout, open(os.devnull, "w")
    try:
        rc = mod.main([pt, path, "--no-package"])
    except SystemExit as e:
        rc = e.code
    finally:
        sys.stdout.close()
        sys.stdout = so
    if rc not in (0, None):
        sys.exit("seed-dk-experiment: export failed: %s" % rc)


def block_attention(x, m, scale, dtype):
    """Per block of W frames: softmax(Q K^T * scale) V and the weights."""
    wq = m.W_q.weight.to(dtype)
    wk = m.W_k.weight.to(dtype)
    wv = m.W_v.weight.to(dtype)
    xb = x.to(dtype)
    q, k, v = xb @ wq.T, xb @ wk.T, xb @ wv.T
    p = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
    return p @ v, p


def health(p):
    """Mean over rows of the largest weight and of entropy / log(keys)."""
    keys = p.shape[-1]
    mw = p.max(dim=-1).values.mean().item()
    ent = -(p * torch.log(p.clamp_min(1e-300))).sum(-1) / math.log(keys)
    return mw, ent.mean().item()


MSG = re.compile(r"\(element\): sattn, .*?rows=\(guint64\)(\d+),.*?"
                 r"max-weight=\(double\)([^,]+), entropy=\(double\)([^,]+),")


def element_health(out):
    rows = mw = ent = 0.0
    n = 0
    for m in MSG.finditer(out):
        r = int(m.group(1))
        rows += r
        mw += r * float(m.group(2))
        ent += r * float(m.group(3))
        n += 1
    if rows == 0:
        sys.exit("seed-dk-experiment: no health message from the element")
    return mw / rows, ent / rows, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default=None,
                    help="build directory (its plugin/ is put on "
                    "GST_PLUGIN_PATH); default: the environment's")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the element agrees with PyTorch")
    ap.add_argument("--frames", type=int, default=512)
    ap.add_argument("--window", type=int, default=32)
    a = ap.parse_args()
    if a.build:
        os.environ["GST_PLUGIN_PATH"] = os.path.join(
            os.path.abspath(a.build), "plugin") + (
            ":" + os.environ["GST_PLUGIN_PATH"]
            if os.environ.get("GST_PLUGIN_PATH") else "")
    if shutil.which("gst-launch-1.0") is None:
        skip("gst-launch-1.0 not found")
    r = subprocess.run(["gst-inspect-1.0", "rawaudioparse"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=gst_env())
    if r.returncode != 0:
        skip("rawaudioparse (gst-plugins-bad) not found")
    torch.set_grad_enabled(False)
    torch.manual_seed(2024)
    mod = exporter()
    n, w = a.frames - a.frames % a.window, a.window
    bad = 0

    with tempfile.TemporaryDirectory(prefix="sattn-seed-dk-") as d:
        # --- 1. d_model 8 -> d_k 16 through gst-launch-1.0 ---------------
        m = QKVProjection(8, 16).eval()
        st = os.path.join(d, "seeds-8-16.safetensors")
        export(mod, m, st)
        x = torch.randn(n, 8)
        xf = os.path.join(d, "x8.f32")
        x.numpy().astype("<f4").tofile(xf)
        of = os.path.join(d, "out16.f32")
        line = ["-q", "filesrc", "location=" + xf, "!", "rawaudioparse",
                "use-sink-caps=false", "format=pcm", "pcm-format=f32le",
                "sample-rate=1000", "num-channels=8", "!", "sattn",
                "weights=" + st, "window=%d" % w, "hop=%d" % w, "start=wait",
                "!", "filesink", "location=" + of]
        print("1. the seeds' module, d_model 8 -> d_k 16:")
        print("   gst-launch-1.0 " + " ".join(
            s.replace(d + os.sep, "") for s in line))
        gst_launch(line)
        got = np.fromfile(of, dtype="<f4").astype(np.float64)
        ref, _ = block_attention(x.view(-1, w, 8), m, 1 / math.sqrt(16),
                                 torch.float64)
        ref = ref.reshape(-1).numpy()
        if got.size != ref.size:
            print("   the element wrote %d values, PyTorch %d" %
                  (got.size, ref.size))
            bad += 1
        else:
            err = float(np.max(np.abs(got - ref)))
            bound = 1e-5 * (1 + float(np.max(np.abs(ref))))
            ok = err <= bound
            bad += 0 if ok else 1
            print("   %d frames of 8 values -> %d rows of 16 values; max-abs "
                  "vs PyTorch float64 %.2e (bound %.2e) %s"
                  % (n, n, err, bound, "ok" if ok else "FAIL"))

        # --- 2. the seeds' table on a live pipeline ----------------------
        print("\n2. d_model 64, window %d, %d frames of N(0, 1) values, "
              "weights N(0, 1/64):" % (w, n))
        x = torch.randn(n, 64)
        xf = os.path.join(d, "x64.f32")
        x.numpy().astype("<f4").tofile(xf)
        print("   %-5s %-10s | %-21s | %-21s | %s" % (
            "d_k", "scale", "max weight: sattn", "entropy: sattn",
            "PyTorch f64 (f32)"))
        rows_out = []
        for dk in (32, 128, 512):
            m = QKVProjection(64, dk).eval()
            for p in m.parameters():
                torch.nn.init.normal_(p, std=1 / math.sqrt(64))
            st = os.path.join(d, "seeds-64-%d.safetensors" % dk)
            export(mod, m, st)
            for scale in (1.0, 0.0):
                eff = scale if scale else 1 / math.sqrt(dk)
                out = gst_launch([
                    "-m", "filesrc", "location=" + xf, "!", "rawaudioparse",
                    "use-sink-caps=false", "format=pcm", "pcm-format=f32le",
                    "sample-rate=1000", "num-channels=64", "!", "sattn",
                    "weights=" + st, "window=%d" % w, "hop=%d" % w,
                    "start=wait", "scale=%g" % scale, "post-messages=true",
                    "message-interval=0", "!", "fakesink"])
                emw, eent, nmsg = element_health(out)
                _, p64 = block_attention(x.view(-1, w, 64), m, eff,
                                         torch.float64)
                _, p32 = block_attention(x.view(-1, w, 64), m, eff,
                                         torch.float32)
                tmw, tent = health(p64)
                fmw, fent = health(p32.double())
                ok = abs(emw - tmw) <= 1e-6 and abs(eent - tent) <= 1e-6
                bad += 0 if ok else 1
                label = "1" if scale else "1/sqrt(dk)"
                print("   %-5d %-10s | %.4f vs %.4f (%.4f) | %.4f vs %.4f "
                      "(%.4f) | %s, %d windows" % (
                          dk, label, emw, tmw, fmw, eent, tent, fent,
                          "agree" if ok else "DIFFER", nmsg))
                rows_out.append((dk, label, emw, tmw, eent, tent))
        print("   largest |sattn - PyTorch f64|: max weight %.1e, entropy "
              "%.1e" % (max(abs(r[2] - r[3]) for r in rows_out),
                        max(abs(r[4] - r[5]) for r in rows_out)))
        print("   (max weight: mean over softmax rows of the largest weight, "
              "1/%d = %.3f is uniform;\n    entropy: mean of entropy / "
              "log(%d keys), 1 = uniform, 0 = one-hot; agreement bound "
              "1e-6)" % (w, 1 / w, w))
    if a.check and bad:
        print("seed-dk-experiment: %d figure(s) disagree with PyTorch" % bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
