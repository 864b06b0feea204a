#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What each choice of the recogniser buys: train.py's CONFIG, and that
CONFIG with one choice taken back, each trained on the same budget and the
same data, then run through the element on the same held-out windows.

    /usr/bin/python3 examples/recognizer/ablation.py [--epochs 4] \\
        [--per-epoch 8000] [--count 2200] [--only NAME,...] \\
        [--out out/ablation] [BUILD_DIR]

Variants (train.py --set overrides of CONFIG):

  final          CONFIG: input power normalisation (AGC), conv stem, CLS
                 token and CLS pooling, 2 pre-norm layers
  linear-embed   a Linear per frame instead of the conv stem
  no-agc         no input normalisation (the -50 ... +50 dB gains reach
                 the model as they are)
  mean-pool      mean pooling, no CLS token
  attn-pool      attention pooling, no CLS token

The budget is a fraction of the committed model's (by default 4 epochs of
8,000 windows against 16 of 32,000), the same for every variant: the
training sets of train.py (seeds 1000 + epoch, kept in OUT/data for all
variants), the same seed, batch order and schedule, the best validation
epoch kept.  Each model then runs held-out windows of the ten modulations
(iqgen.py, seed 4242) through gst-launch-1.0 ... sattn ... output=classes
(the element's figures, not PyTorch's).  Written: OUT/table.md,
OUT/results.json, the models and their logs.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import evaluate  # noqa: E402
import iqgen  # noqa: E402
import train  # noqa: E402

VARIANTS = [
    ("final", {}),
    ("linear-embed", dict(front_end="linear")),
    ("no-agc", dict(input_norm="none")),
    ("mean-pool", dict(pooling="mean", cls_token=False)),
    ("attn-pool", dict(pooling="attention", cls_token=False)),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--per-epoch", type=int, default=8000)
    p.add_argument("--count", type=int, default=2200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="")
    p.add_argument("--out", default="out/ablation")
    p.add_argument("build", nargs="?", default="build")
    a = p.parse_args()
    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    os.environ["SATTN_TRAIN_CACHE"] = os.path.join(a.out, "data")
    os.environ.setdefault("GST_PLUGIN_PATH",
                          os.path.join(os.path.abspath(a.build), "plugin"))
    from sattn.nn import save_safetensors
    X, y, snr = iqgen.make_windows(4242, a.count, classes=range(iqgen.N_MOD))
    only = set(s for s in a.only.split(",") if s)
    path_json = os.path.join(a.out, "results.json")
    results = json.load(open(path_json)) if os.path.exists(path_json) \
        else {}
    for name, over in VARIANTS:
        if only and name not in only:
            continue
        cfg = dict(train.CONFIG)
        cfg.update(over)
        budget = dict(train.BUDGET, epochs=a.epochs, per_epoch=a.per_epoch,
                      val_count=2000, warmup=100)
        logf = open(os.path.join(a.out, "train-%s.log" % name), "w")

        def log(s):
            print("  [%s] %s" % (name, s), flush=True)
            logf.write(s + "\n")
            logf.flush()
        net, cfg, val, ep, _, minutes = train.train(a.seed, cfg, budget,
                                                    log=log)
        logf.close()
        path = os.path.join(a.out, name + ".safetensors")
        save_safetensors(net, path, labels=list(iqgen.LABELS))
        P, _, _, _, _ = evaluate.run_element(path, X, messages=False)
        r = evaluate.summary(P.argmax(1), y, snr)
        results[name] = dict(
            overrides=over, parameters=sum(t.numel() for t in
                                           net.parameters()),
            best_epoch=ep, val_accuracy=val, minutes=round(minutes, 1),
            accuracy=r["accuracy"], accuracy_snr_ge_10=r["accuracy_snr_ge_10"],
            qam16=r["per_class_snr_ge_10"]["QAM16"],
            qam64=r["per_class_snr_ge_10"]["QAM64"])
        print("%s: %s" % (name, json.dumps(results[name])), flush=True)
        with open(path_json, "w") as f:
            json.dump(results, f, indent=1)
    lines = ["| variant | change | parameters | accuracy | at SNR >= 10 dB "
             "| QAM16 / QAM64 at >= 10 dB |", "|---|---|---:|---:|---:|---:|"]
    for name, over in VARIANTS:
        if name in results:
            r = results[name]
            lines.append("| %s | %s | %d | %.1f %% | %.1f %% | %.0f %% / "
                         "%.0f %% |" % (
                             name, ", ".join("%s=%s" % kv for kv in
                                             over.items()) or "(CONFIG)",
                             r["parameters"], 100 * r["accuracy"],
                             100 * r["accuracy_snr_ge_10"], 100 * r["qam16"],
                             100 * r["qam64"]))
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    return 0 if np.isfinite(len(results)) else 1


if __name__ == "__main__":
    sys.exit(main())
