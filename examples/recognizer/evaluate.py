#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Evaluate the modulation recogniser through the element, next to
PyTorch on the same windows.

    /usr/bin/python3 examples/recognizer/evaluate.py [--model M] \\
        [--count 6200] [--seed 4242] [--out out/recognizer]

A held-out set (a seed the training never used) of 1024-sample windows,
balanced over the classes and SNRs -10..+20 dB, is written as one I/Q
stream (2-channel F32 at 64 kHz, window after window) and run through a
real pipeline:

    filesrc ! rawaudioparse format=pcm pcm-format=f32le num-channels=2
      sample-rate=64000 ! sattn weights=M frame-size=16 window=64 hop=64
      output=classes ! other/tensors ! filesink

hop = window = 64 frames: row k of the output is the classes of window k
exactly.  The same windows go through the PyTorch module (float32, and
float64 as the reference).  Printed: accuracy overall, at SNR >= 10 dB
and per class, element against PyTorch (argmax agreement, probability
max-abs), and the element's real-time factor; written: accuracy against
SNR (accuracy.png) and the confusion matrix at SNR >= 10 dB
(confusion.png), element and PyTorch side by side, plus results.json.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import iqgen  # noqa: E402

FRAME_SAMPLES, FRAMES = iqgen.FRAME_SAMPLES, iqgen.FRAMES


def run_element(model, iq, launch):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "iq.f32"), os.path.join(d, "classes.f32")
        iq.astype("<f4").tofile(src)
        cmd = iqgen.sattn_argv(launch, src, model, dst)
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - t
        if r.returncode != 0:
            sys.exit("evaluate: the pipeline failed:\n%s\n%s"
                     % (" ".join(cmd), r.stdout + r.stderr))
        return np.fromfile(dst, "<f4"), wall


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(
        HERE, "recognizer.safetensors"))
    p.add_argument("--count", type=int, default=6200)
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--out", default="out/recognizer")
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args()
    launch = shutil.which("gst-launch-1.0")
    if launch is None:
        sys.exit("evaluate: gst-launch-1.0 is needed")
    os.makedirs(a.out, exist_ok=True)

    X, y, snr = iqgen.make_windows(a.seed, a.count, FRAMES * FRAME_SAMPLES)
    C = len(iqgen.LABELS)
    rows, wall = run_element(a.model, X.reshape(-1, 2), launch)
    if rows.size != a.count * C:
        sys.exit("evaluate: %d values from the element, expected %d windows "
                 "x %d classes" % (rows.size, a.count, C))
    P = rows.reshape(a.count, C)
    pred = P.argmax(1)
    stream_s = a.count * FRAMES * FRAME_SAMPLES / iqgen.SAMPLE_RATE

    res = {"windows": a.count, "seed": a.seed,
           "accuracy": float((pred == y).mean()),
           "accuracy_snr_ge_10": float((pred[snr >= 10] ==
                                        y[snr >= 10]).mean()),
           "per_class_snr_ge_10": {}, "by_snr": {},
           "realtime_factor": stream_s / wall, "pipeline_seconds": wall}
    hi = snr >= 10
    for c, name in enumerate(iqgen.LABELS):
        m = hi & (y == c)
        res["per_class_snr_ge_10"][name] = float((pred[m] == c).mean())
    for s in range(iqgen.SNR_RANGE[0], iqgen.SNR_RANGE[1] + 1):
        m = snr == s
        if m.any():
            res["by_snr"][int(s)] = float((pred[m] == y[m]).mean())

    torch_pred = None
    try:
        import torch
        net = load_torch(a.model, None)
        with torch.no_grad():
            xf = torch.from_numpy(X.reshape(a.count, FRAMES, -1))
            p32 = torch.softmax(net(xf), -1).numpy()
            p64 = torch.softmax(net.double()(xf.double()), -1).numpy()
        torch_pred = p32.argmax(1)
        res["torch_accuracy"] = float((torch_pred == y).mean())
        res["torch_accuracy_snr_ge_10"] = float((torch_pred[hi] ==
                                                 y[hi]).mean())
        res["argmax_agreement"] = float((torch_pred == pred).mean())
        res["argmax_agreement_f64"] = float((p64.argmax(1) == pred).mean())
        res["prob_maxabs_vs_torch_f32"] = float(np.abs(P - p32).max())
        res["prob_maxabs_vs_torch_f64"] = float(np.abs(P - p64).max())
        res["torch_f32_maxabs_vs_f64"] = float(np.abs(p32 - p64).max())
        res["torch_by_snr"] = {
            int(s): float((torch_pred[snr == s] == y[snr == s]).mean())
            for s in range(iqgen.SNR_RANGE[0], iqgen.SNR_RANGE[1] + 1)
            if (snr == s).any()}
    except ImportError:
        print("(PyTorch not importable: the element's figures only)")

    print("held-out windows: %d (seed %d), %d classes, SNR %d..%d dB"
          % (a.count, a.seed, C, *iqgen.SNR_RANGE))
    print("element: accuracy %.4f overall, %.4f at SNR >= 10 dB"
          % (res["accuracy"], res["accuracy_snr_ge_10"]))
    print("per class at SNR >= 10 dB: " + ", ".join(
        "%s %.3f" % kv for kv in res["per_class_snr_ge_10"].items()))
    if torch_pred is not None:
        print("PyTorch float32: accuracy %.4f overall, %.4f at SNR >= 10 dB"
              % (res["torch_accuracy"], res["torch_accuracy_snr_ge_10"]))
        print("element vs PyTorch: same argmax on %.4f%% of windows "
              "(float32), %.4f%% (float64); probability max-abs %.2e vs "
              "float32, %.2e vs float64 (PyTorch float32's own: %.2e)"
              % (100 * res["argmax_agreement"],
                 100 * res["argmax_agreement_f64"],
                 res["prob_maxabs_vs_torch_f32"],
                 res["prob_maxabs_vs_torch_f64"],
                 res["torch_f32_maxabs_vs_f64"]))
    print("pipeline: %.1f s of I/Q in %.2f s: %.1fx real time"
          % (stream_s, wall, res["realtime_factor"]))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    if not a.no_plots:
        plots(a.out, y, snr, pred, torch_pred, res)


def load_torch(path, model):
    """The PyTorch module (train.py's configuration) with the file's
    weights."""
    import torch
    import train
    net, _ = train.build()
    sd = read_safetensors(path)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    return net.eval()


def read_safetensors(path):
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], "<f4").reshape(v["shape"]).copy()
    return out


def plots(out, y, snr, pred, torch_pred, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = sorted(res["by_snr"])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(s, [res["by_snr"][k] for k in s], "o-", label="sattn element")
    if torch_pred is not None:
        ax.plot(s, [res["torch_by_snr"][k] for k in s], "x--",
                label="PyTorch float32")
    ax.set_xlabel("SNR (dB)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("Modulation recognition, %d held-out windows" % len(y))
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy.png"), dpi=100)
    C = len(iqgen.LABELS)
    hi = snr >= 10
    mats = [("sattn element", pred)]
    if torch_pred is not None:
        mats.append(("PyTorch float32", torch_pred))
    fig, axes = plt.subplots(1, len(mats), figsize=(6 * len(mats), 5.2))
    axes = np.atleast_1d(axes)
    for ax, (title, pr) in zip(axes, mats):
        cm = np.zeros((C, C))
        for t, q in zip(y[hi], pr[hi]):
            cm[t, q] += 1
        cm /= cm.sum(1, keepdims=True)
        ax.imshow(cm, vmin=0, vmax=1, cmap="Blues")
        ax.set_xticks(range(C))
        ax.set_yticks(range(C))
        ax.set_xticklabels(iqgen.LABELS, rotation=60, fontsize=8)
        ax.set_yticklabels(iqgen.LABELS, fontsize=8)
        ax.set_xlabel("recognised")
        ax.set_ylabel("true")
        ax.set_title("%s, SNR >= 10 dB" % title)
        for i in range(C):
            for j in range(C):
                if cm[i, j] >= 0.005:
                    ax.text(j, i, "%.2f" % cm[i, j], ha="center",
                            va="center", fontsize=6,
                            color="white" if cm[i, j] > 0.5 else "black")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "confusion.png"), dpi=100)
    print("wrote %s, %s" % (os.path.join(out, "accuracy.png"),
                            os.path.join(out, "confusion.png")))


if __name__ == "__main__":
    main()
