#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The seeds' experiment, trained: the modulation recogniser with scaled
and with unscaled attention for d_k in {32, 128, 512}.

    /usr/bin/python3 examples/recognizer/seed_experiment.py \\
        [--dk 32,128,512] [--epochs 3] [--per-epoch 8000] [--seed 0] \\
        [--count 2200] [--out out/seed-experiment] [--resume] [BUILD_DIR]

The seed documents say that without 1/sqrt(d_k) the scores grow with d_k,
the softmax saturates and learning suffers.  Here the claim meets a task:
the recogniser of train.py (its CONFIG: input power normalisation, the
conv stem, CLS token, learned positions, 2 pre-norm layers, final norm, CLS
pooling, MLP head, eleven classes; the impaired windows of iqgen.py) with
one attention head whose queries and keys have d_k values
(SignalTransformer head_dim=d_k: sattn.nn.SplitAttention; values stay
d_model = 64), trained once with scores scaled by 1/sqrt(d_k) and once
unscaled (scale=1, which the model file records, so the element runs it as
trained).  Every run has the same budget and the same data: the same number
of epochs and steps, the training sets of train.py (seeds 1000 + epoch,
kept in OUT/data and shared by the six runs), the same initial seed, batch
order and learning-rate schedule; the best validation epoch is kept.

Each trained model then runs held-out windows of the ten modulations
(seed 4242, as evaluate.py uses) through a real pipeline,

    filesrc ! rawaudioparse (2-channel F32, 64 kHz) ! sattn weights=M
      frame-size=F window=W hop=W output=classes post-messages=true
      message-interval=0 ! filesink

and the figures come from the element: accuracy (overall, at SNR >= 10 dB)
from the class rows it wrote, and its health figures from its 'sattn'
messages (gst-launch-1.0 -m), summed over every window: the share of
softmax rows that are saturated (largest weight above the element's
saturation threshold), the mean largest weight and the mean normalised
entropy (1 = uniform over the visible keys, 0 = one-hot), over all layers
and rows.  PyTorch's accuracy on the same windows is printed next to the
element's.  Written to OUT: the models, train-<run>.log, results.json and
table.md (the table of docs/recognizer.md).
Needs PyTorch and numpy, gst-launch-1.0 with rawaudioparse; the element
from BUILD_DIR (default build).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import iqgen  # noqa: E402
import train  # noqa: E402

MSG = re.compile(r'from element "[^"]*" \(element\): sattn, (.*)$')
FIELD = re.compile(r'([a-z-]+)=\((?:guint64|double)\)([-+0-9.eE]+|inf|nan)')


def run_element(build, model, iq, count):
    """The held-out stream through the element: (class rows (count, C),
    health sums, wall seconds)."""
    env = dict(os.environ)
    env["GST_PLUGIN_PATH"] = os.path.join(build, "plugin")
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "iq.f32"), os.path.join(d, "classes.f32")
        iq.astype("<f4").tofile(src)
        cmd = iqgen.sattn_argv("gst-launch-1.0", src, model, dst,
                               ["post-messages=true", "message-interval=0"],
                               ["-m"])
        t = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t
        if r.returncode != 0:
            sys.exit("seed_experiment: the pipeline failed:\n%s\n%s"
                     % (" ".join(cmd), r.stdout + r.stderr))
        rows = np.fromfile(dst, "<f4")
    h = dict(windows=0, rows=0, saturated=0, max_weight=0.0, entropy=0.0,
             score_max=-np.inf, messages=0)
    for line in r.stdout.splitlines():
        m = MSG.search(line)
        if not m:
            continue
        f = {k: float(v) for k, v in FIELD.findall(m.group(1))}
        if "rows" not in f:
            continue
        h["messages"] += 1
        h["windows"] += int(f["windows"])
        h["rows"] += int(f["rows"])
        h["saturated"] += int(f["saturated-rows"])
        h["max_weight"] += f["max-weight"] * f["rows"]
        h["entropy"] += f["entropy"] * f["rows"]
        h["score_max"] = max(h["score_max"], f["score-max"])
    if h["windows"] != count or h["rows"] == 0:
        sys.exit("seed_experiment: the element's messages cover %d windows "
                 "(%d rows); expected %d windows" % (h["windows"], h["rows"],
                                                      count))
    return rows.reshape(count, -1), h, wall


def run_training(a, name, logpath, dk, scale, path):
    """One run of the budget: (net, best validation accuracy, its epoch,
    minutes); the model is written to path, the log to logpath."""
    from sattn.nn import save_safetensors
    with open(logpath, "w") as logf:
        def log(s):
            print("  [%s] %s" % (name, s), flush=True)
            logf.write(s + "\n")
            logf.flush()
        budget = dict(train.BUDGET, epochs=a.epochs, per_epoch=a.per_epoch,
                      val_count=a.val_count, warmup=100)
        net, _, val, ep, _, minutes = train.train(
            seed=a.seed, budget=budget, log=log, heads=1, head_dim=dk,
            scale=scale)
    save_safetensors(net, path, labels=list(iqgen.LABELS))
    return net, val, ep, minutes


def resume(path, logpath, dk, scale):
    """A run trained before (--resume): its model from path, and its best
    validation epoch and minutes from its log."""
    from evaluate import read_safetensors
    net, _ = train.build(heads=1, head_dim=dk, scale=scale)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in
                         read_safetensors(path)[1].items()})
    epochs = [re.match(r"epoch +(\d+) .*val acc ([0-9.]+) .* ([0-9.]+) min",
                       line) for line in open(logpath)]
    epochs = [(float(m.group(2)), int(m.group(1)), float(m.group(3)))
              for m in epochs if m]
    val, ep = max(epochs, key=lambda e: (e[0], -e[1]))[:2]
    return net.eval(), val, ep, epochs[-1][2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dk", default="32,128,512")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--per-epoch", type=int, default=8000)
    p.add_argument("--val-count", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=2200)
    p.add_argument("--out", default="out/seed-experiment")
    p.add_argument("--resume", action="store_true",
                   help="evaluate runs whose model and log are in OUT "
                   "instead of training them again")
    p.add_argument("build", nargs="?", default="build")
    a = p.parse_args()
    build = os.path.abspath(a.build)
    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    os.environ["SATTN_TRAIN_CACHE"] = os.path.join(a.out, "data")

    X, y, snr = iqgen.make_windows(4242, a.count,
                                   classes=range(iqgen.N_MOD))
    iq = X.reshape(-1, 2)
    hi = snr >= 10
    results = []
    for dk in [int(v) for v in a.dk.split(",")]:
        for scaled in (True, False):
            name = "dk%d-%s" % (dk, "scaled" if scaled else "unscaled")
            path = os.path.join(a.out, name + ".safetensors")
            logpath = os.path.join(a.out, "train-%s.log" % name)
            scale = None if scaled else 1.0
            if a.resume and os.path.exists(path) and os.path.exists(logpath):
                net, val, ep, minutes = resume(path, logpath, dk, scale)
                print("%s: trained before (%s), evaluating" % (name, path))
            else:
                net, val, ep, minutes = run_training(a, name, logpath, dk,
                                                     scale, path)

            with torch.no_grad():
                tp = np.concatenate([
                    net(torch.from_numpy(train.frames(X[i:i + 500])))
                    .argmax(-1).numpy() for i in range(0, len(X), 500)])
            rows, h, wall = run_element(build, path, iq, a.count)
            pred = rows.argmax(1)
            r = dict(
                dk=dk, scaled=scaled, best_epoch=ep, val_accuracy=val,
                train_minutes=round(minutes, 2),
                accuracy=float((pred == y).mean()),
                accuracy_snr10=float((pred[hi] == y[hi]).mean()),
                torch_accuracy=float((tp == y).mean()),
                argmax_agree=float((tp == pred).mean()),
                saturated_share=h["saturated"] / h["rows"],
                mean_max_weight=h["max_weight"] / h["rows"],
                mean_entropy=h["entropy"] / h["rows"],
                score_max=h["score_max"], rows=h["rows"],
                windows=h["windows"], element_seconds=round(wall, 2))
            results.append(r)
            print("%s: element accuracy %.4f (SNR >= 10 dB %.4f), PyTorch "
                  "%.4f, saturated rows %.4f, max weight %.3f, entropy %.3f"
                  % (name, r["accuracy"], r["accuracy_snr10"],
                     r["torch_accuracy"], r["saturated_share"],
                     r["mean_max_weight"], r["mean_entropy"]), flush=True)

    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(dict(epochs=a.epochs, per_epoch=a.per_epoch, seed=a.seed,
                       held_out=a.count, held_out_seed=4242,
                       results=results), f, indent=1)
    lines = ["| d_k | scores | accuracy | at SNR >= 10 dB | saturated rows "
             "| mean max weight | mean entropy | largest score |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append("| %d | %s | %.1f %% | %.1f %% | %.1f %% | %.3f | %.3f "
                     "| %.3g |"
                     % (r["dk"], "× 1/√d_k" if r["scaled"] else "unscaled",
                        100 * r["accuracy"], 100 * r["accuracy_snr10"],
                        100 * r["saturated_share"], r["mean_max_weight"],
                        r["mean_entropy"], r["score_max"]))
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
