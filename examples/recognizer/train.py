#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Train the modulation recogniser: sattn.nn.SignalTransformer on windows
of I/Q from iqgen.py, in PyTorch on the CPU, seeded, with a budget of
epochs.

    /usr/bin/python3 examples/recognizer/train.py [--epochs 12] \\
        [--run-epochs 11] [--minutes 0] \\
        [--out examples/recognizer/recognizer.safetensors]

The committed model is the defaults' run: the learning-rate schedule is
planned for --epochs 12 and training stops after --run-epochs 11 (what a
19-minute budget allowed on a quiet 2-core machine, which is how the
model was first trained: results/train.log).  The budget is counted in
epochs, not in wall time, so the run is the same on any machine; --minutes
(0 = none) adds a wall-time limit for a quick try.

Window: 1024 samples (128 symbols at 8 samples per symbol) as 64 frames of
16 I/Q samples (frame-size 16 on a 2-channel stream: 32 values per frame),
hop 32 frames in the element.  Model: d_model 64, 4 heads, 2 post-norm
encoder layers (ff 128, GELU), learned positions, a final LayerNorm, mean
pooling, an MLP head (64 -> 64 -> 10).  Data: a fresh training set per
epoch (seeds 1000 + epoch), SNR uniform in [-10, 20] dB; a fixed
validation set (seed 7).  AdamW (lr 2e-3, weight decay 0.01), cosine
decay over the planned steps, batch 128, 2 threads.  The best validation
epoch is kept and written with its labels; the log (per epoch: loss,
validation accuracy overall and at SNR >= 10 dB, time) goes to stdout.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import iqgen  # noqa: E402

WINDOW_SAMPLES = iqgen.WINDOW_SAMPLES
FRAME_SAMPLES = iqgen.FRAME_SAMPLES
FRAMES = iqgen.FRAMES

CONFIG = dict(d_frame=2 * FRAME_SAMPLES, d_model=64, heads=4, layers=2,
              d_ff=128, classes=len(iqgen.LABELS), positions="learned",
              max_window=FRAMES, norm_first=False, activation="gelu",
              final_norm=True, head_hidden=64, head_activation="relu",
              pooling="mean")


def build(config=None, **over):
    from sattn.nn import SignalTransformer
    cfg = dict(CONFIG if config is None else config)
    cfg.update(over)
    return SignalTransformer(**cfg, labels=list(iqgen.LABELS)), cfg


def frames(X):
    """(N, 1024, 2) I/Q -> (N, 64, 32): frames of 16 samples, I/Q
    interleaved in memory order (as the element takes frame-size 16 on
    2 channels)."""
    return X.reshape(X.shape[0], FRAMES, 2 * FRAME_SAMPLES)


def evaluate(net, X, y, snr, batch=500):
    net.eval()
    pred = []
    with torch.no_grad():
        for i in range(0, len(X), batch):
            pred.append(net(torch.from_numpy(frames(X[i:i + batch])))
                        .argmax(-1).numpy())
    pred = np.concatenate(pred)
    hi = snr >= 10
    return float((pred == y).mean()), float((pred[hi] == y[hi]).mean())


def train(minutes=0.0, seed=0, per_epoch=40000, epochs=12, config=None,
          log=print, val_count=4000, run_epochs=None, **over):
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(2)
    net, cfg = build(config, **over)
    Xv, yv, sv = iqgen.make_windows(7, val_count, WINDOW_SAMPLES)
    steps_per_epoch = per_epoch // 128
    total = steps_per_epoch * epochs
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    best = (-1.0, None, None)
    t0 = time.time()
    for ep in range(epochs if run_epochs is None else min(run_epochs,
                                                           epochs)):
        X, y, _ = iqgen.make_windows(1000 + ep, per_epoch, WINDOW_SAMPLES)
        Xf = torch.from_numpy(frames(X))
        yt = torch.from_numpy(y.astype(np.int64))
        g = torch.Generator().manual_seed(seed * 100 + ep)
        order = torch.randperm(len(X), generator=g)
        net.train()
        tot = 0.0
        for b in range(steps_per_epoch):
            idx = order[b * 128:(b + 1) * 128]
            logits = net(Xf[idx])           # the head's logits
            loss = torch.nn.functional.cross_entropy(logits, yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss)
        acc, acc_hi = evaluate(net, Xv, yv, sv)
        el = (time.time() - t0) / 60
        log("epoch %2d  loss %.4f  val acc %.4f  at SNR >= 10 dB %.4f  "
            "%.1f min" % (ep, tot / steps_per_epoch, acc, acc_hi, el))
        if acc > best[0]:
            best = (acc, {k: v.clone() for k, v in
                          net.state_dict().items()}, ep)
        if minutes and el * (ep + 2) / (ep + 1) > minutes:
            log("time budget: stopping after epoch %d" % ep)
            break
    net.load_state_dict(best[1])
    net.eval()
    return net, cfg, best[0], best[2]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--run-epochs", type=int, default=11)
    p.add_argument("--per-epoch", type=int, default=40000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE,
                                                  "recognizer.safetensors"))
    a = p.parse_args()
    from sattn.nn import save_safetensors
    net, cfg, acc, ep = train(a.minutes, a.seed, a.per_epoch, a.epochs,
                              run_epochs=a.run_epochs)
    save_safetensors(net, a.out, labels=list(iqgen.LABELS),
                     extra_metadata={"window": str(FRAMES),
                                     "frame_size": str(FRAME_SAMPLES),
                                     "channels": "2",
                                     "sample_rate": str(iqgen.SAMPLE_RATE),
                                     "val_accuracy": "%.4f" % acc})
    print("wrote %s (epoch %d, validation accuracy %.4f); config %s"
          % (a.out, ep, acc, json.dumps(cfg)))


if __name__ == "__main__":
    main()
