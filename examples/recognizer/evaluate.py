#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Evaluate the modulation recogniser THROUGH THE ELEMENT, on two
generators, against each impairment alone, and on signals it does not
know; PyTorch on the same windows for parity.

    /usr/bin/python3 examples/recognizer/evaluate.py [--model M] \\
        [--count 6600] [--count2 3000] [--seed 4242] [--out DIR] \\
        [--no-plots] [--quick]

Every figure comes from a real pipeline, a stream of window after window
(2-channel F32 at 64 kHz):

    gst-launch-1.0 -m filesrc ! rawaudioparse format=pcm pcm-format=f32le
      num-channels=2 sample-rate=64000 ! sattn weights=M frame-size=16
      window=64 hop=64 output=classes message-interval=0
      ! other/tensors ! filesink

hop = window: row k of the output is window k's probabilities, and with
message-interval=0 each window's sattn-class message carries the
element's decision (a label, or `unknown` when the window is out of the
model's input contract or under its min-probability).  Accuracy is the
row's most probable class (the "unknown" class counts as wrong for a
modulation); rejection is the message's decision.

1. the project's generator (iqgen.py, the training distribution, held-out
   seed 4242, the ten modulations, SNR -10 ... +20 dB): accuracy overall,
   at SNR >= 10 and >= 16 dB, per class; PyTorch float32 / float64 on the
   same windows (argmax agreement, probability max-abs);
2. the independent generator (evalgen.py, never used in training):
   the same figures;
3. each impairment alone (iqgen.py with everything else off, SNR 10 ...
   20 dB): carrier offset, sample-rate offset, Rayleigh fading against
   Doppler, roll-off, amplitude, I/Q imbalance;
4. rejection: tones, silence, white noise (the unknown class saw noise
   and tones in training), OFDM, AM-SSB, chirps (never seen), from
   evalgen.py at SNR 10 ... 20 dB, against the modulations at SNR >= 10
   dB of both generators: the share of windows whose decision is
   unknown;
5. cost: the project set again with -q, pinned to one CPU, threads=1:
   windows per CPU second and the real-time factor.

Written to OUT: results.json, accuracy.png, confusion.png,
robustness.png, and the tables (results.md).
"""
import argparse
import json
import os
import re
import resource
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
WIN = iqgen.WINDOW_SAMPLES
WIN_NS = WIN * 1000000000 // iqgen.SAMPLE_RATE
C = len(iqgen.LABELS)
M = iqgen.N_MOD

FIELD = {k: re.compile(k + r"=\(([a-z0-9]+)\)\"?([^\",;]*)\"?")
         for k in ("label", "timestamp", "in-contract", "rejected")}


def gst_env():
    env = dict(os.environ)
    pre = env.get("SATTN_GST_PRELOAD", "")
    if pre:
        env["LD_PRELOAD"] = (pre + " " + env["LD_PRELOAD"]
                             if env.get("LD_PRELOAD") else pre)
    return env


def run_element(model, X, messages=True, pin=False):
    """The windows X (N, 1024, 2) as one stream through the element:
    (rows (N, C), decisions (N,) label strings or None, in_contract (N,),
    wall s, CPU s)."""
    launch = shutil.which("gst-launch-1.0")
    if launch is None:
        sys.exit("evaluate: gst-launch-1.0 is needed")
    N = len(X)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "iq.f32"), os.path.join(d, "classes.f32")
        X.reshape(-1, 2).astype("<f4").tofile(src)
        argv = iqgen.sattn_argv(launch, src, model, dst,
                                ["message-interval=0"] if messages else
                                ["threads=1"],
                                ["-m"] if messages else ["-q"])
        if pin and shutil.which("taskset"):
            argv = [shutil.which("taskset"), "-c",
                    str(min(os.sched_getaffinity(0)))] + argv
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True,
                           env=gst_env())
        wall = time.monotonic() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime + after.ru_stime -
               before.ru_stime)
        if r.returncode != 0:
            sys.exit("evaluate: the pipeline failed:\n%s\n%s"
                     % (" ".join(argv), r.stdout[-3000:] + r.stderr))
        rows = np.fromfile(dst, "<f4")
    if rows.size != N * C:
        sys.exit("evaluate: %d values from the element, expected %d windows "
                 "x %d classes" % (rows.size, N, C))
    dec = np.full(N, None, object)
    inc = np.ones(N, bool)
    if messages:
        for line in r.stdout.splitlines():
            if "sattn-class," not in line:
                continue
            f = {k: rx.search(line) for k, rx in FIELD.items()}
            k = int(f["timestamp"].group(2)) // WIN_NS
            dec[k] = f["label"].group(2)
            inc[k] = f["in-contract"].group(2) == "true"
    return rows.reshape(N, C), dec, inc, wall, cpu


def load_torch(path):
    """The PyTorch module the file describes (train.py's configuration,
    recorded in its metadata), with the file's weights."""
    import train
    return train.load(path)[0]


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
    return hdr.get("__metadata__", {}), out


def summary(pred, y, snr):
    """Accuracy figures of predictions on modulation windows."""
    r = {"windows": int(len(y)),
         "accuracy": float((pred == y).mean()),
         "accuracy_snr_ge_10": float((pred[snr >= 10] == y[snr >= 10])
                                     .mean()),
         "accuracy_snr_ge_16": float((pred[snr >= 16] == y[snr >= 16])
                                     .mean()),
         "per_class_snr_ge_10": {}, "by_snr": {}, "by_snr_class": {}}
    hi = snr >= 10
    for c in range(M):
        m = hi & (y == c)
        r["per_class_snr_ge_10"][iqgen.LABELS[c]] = float((pred[m] == c)
                                                          .mean())
    for s in sorted(set(snr.tolist())):
        m = snr == s
        r["by_snr"][int(s)] = float((pred[m] == y[m]).mean())
    # per class in 3-dB bins (-10 ... -8, -7 ... -5, ...: about 60 windows
    # of a class each in a set of 6,600), keyed by the bin's centre
    for lo in range(-10, 20, 3):
        m = (snr >= lo) & (snr <= lo + 2)
        r["by_snr_class"][lo + 1] = [
            float((pred[m & (y == c)] == c).mean())
            if (m & (y == c)).any() else None for c in range(M)]
    return r


def rejected(dec, inc):
    return np.array([d == iqgen.UNKNOWN or not i for d, i in zip(dec, inc)])


SWEEPS = [
    ("CFO (Hz)", "cfo", [0, 250, 500, 1000, 1500, 2000, 3000],
     lambda v: dict(cfo_hz=(v, v))),
    ("sample-rate offset (ppm)", "sro", [0, 250, 500, 1000, 2000, 5000],
     lambda v: dict(sro_ppm=(v, v))),
    ("Rayleigh fading: max Doppler (Hz)", "doppler",
     [0, 10, 30, 60, 100, 200],
     lambda v: dict(fading=(0.0, 0.0, 1.0), doppler_hz=(v, v))),
    ("roll-off", "rolloff", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
     lambda v: dict(rolloff=(v, v))),
    ("amplitude (dB re unit power)", "amplitude",
     [-60, -40, -20, 0, 20, 40, 60], lambda v: dict(amp_db=(v, v))),
    ("I/Q imbalance (dB, x5 degrees)", "iq", [0, 0.5, 1, 2, 3],
     lambda v: dict(iq_gain_db=(v, v), iq_phase_deg=(5 * v, 5 * v))),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(
        HERE, "recognizer.safetensors"))
    p.add_argument("--count", type=int, default=6600)
    p.add_argument("--count2", type=int, default=3000)
    p.add_argument("--sweep-count", type=int, default=550)
    p.add_argument("--other-count", type=int, default=400)
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--out", default="out/recognizer")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--min-accuracy-10", type=float, default=None,
                   help="fail (exit 1) when the element's accuracy at SNR "
                   ">= 10 dB on the project's generator is lower")
    p.add_argument("--check-parity", action="store_true",
                   help="fail when the element and PyTorch float32 differ: "
                   "argmax on fewer than 99.9 %% of the windows, or a "
                   "probability by more than 1e-5")
    p.add_argument("--skip", default="",
                   help="comma-separated parts to skip: independent, "
                   "sweeps, reject, cost, torch")
    a = p.parse_args()
    skip = set(s for s in a.skip.split(",") if s)
    os.makedirs(a.out, exist_ok=True)
    res = {"model": os.path.basename(a.model), "seed": a.seed}
    md = read_safetensors(a.model)[0]
    res["min_probability"] = float(md.get("min_probability", "0"))

    # 1. the project's generator
    X, y, snr = iqgen.make_windows(a.seed, a.count, classes=range(M))
    P, dec, inc, wall, _ = run_element(a.model, X)
    pred = P.argmax(1)
    res["project"] = summary(pred, y, snr)
    res["project"]["pipeline_seconds"] = wall
    if "torch" not in skip:
        import torch
        net = load_torch(a.model)
        with torch.no_grad():
            xf = torch.from_numpy(X.reshape(len(X), FRAMES, -1))
            p32 = np.concatenate([torch.softmax(net(xf[i:i + 500]), -1)
                                  .numpy() for i in range(0, len(X), 500)])
            n64 = net.double()
            p64 = np.concatenate([torch.softmax(n64(xf[i:i + 500].double()),
                                                -1).numpy()
                                  for i in range(0, len(X), 500)])
        tp = p32.argmax(1)
        res["torch"] = summary(tp, y, snr)
        res["parity"] = {
            "argmax_agreement_f32": float((tp == pred).mean()),
            "argmax_agreement_f64": float((p64.argmax(1) == pred).mean()),
            "prob_maxabs_vs_f32": float(np.abs(P - p32).max()),
            "prob_maxabs_vs_f64": float(np.abs(P - p64).max()),
            "torch_f32_maxabs_vs_f64": float(np.abs(p32 - p64).max())}
    rej_in = {"project": float(rejected(dec, inc)[snr >= 10].mean())}
    cm = np.zeros((M, C), int)
    for t, q in zip(y[snr >= 10], pred[snr >= 10]):
        cm[t, q] += 1

    # 2. the independent generator
    if "independent" not in skip:
        import evalgen
        X2, y2, snr2 = evalgen.make_windows(a.seed + 1, a.count2)
        P2, dec2, inc2, _, _ = run_element(a.model, X2)
        res["independent"] = summary(P2.argmax(1), y2, snr2)
        rej_in["independent"] = float(rejected(dec2, inc2)[snr2 >= 10]
                                      .mean())
    res["in_class_rejected_snr_ge_10"] = rej_in

    # 3. each impairment alone
    if "sweeps" not in skip:
        res["robustness"] = {}
        base = dict(iqgen.CLEAN, snr_db=(10, 20))
        for i, (title, key, values, spec) in enumerate(SWEEPS):
            pts = []
            for j, v in enumerate(values):
                sp = dict(base)
                sp.update(spec(v))
                Xs, ys, _ = iqgen.make_windows(a.seed + 100 + 10 * i + j,
                                               a.sweep_count, spec=sp,
                                               classes=range(M))
                Ps, _, _, _, _ = run_element(a.model, Xs, messages=False)
                pts.append(float((Ps.argmax(1) == ys).mean()))
            res["robustness"][key] = {"title": title, "values": values,
                                      "accuracy": pts}

    # 4. rejection of what the model does not know
    if "reject" not in skip:
        import evalgen
        res["rejection"] = {}
        for i, kind in enumerate(evalgen.OTHERS):
            Xo = evalgen.make_others(a.seed + 200 + i, kind, a.other_count)
            _, deco, inco, _, _ = run_element(a.model, Xo)
            r = rejected(deco, inco)
            res["rejection"][kind] = {
                "windows": int(len(Xo)), "rejected": float(r.mean()),
                "out_of_contract": float((~inco).mean()),
                "unknown_class_or_low_p": float(np.mean(
                    [d == iqgen.UNKNOWN for d in deco]) - 0.0),
                "seen_in_training": kind in ("tone", "noise")}

    # 5. cost: one core, threads=1, no messages
    if "cost" not in skip:
        _, _, _, wall, cpu = run_element(a.model, X, messages=False,
                                         pin=True)
        stream_s = len(X) * WIN / iqgen.SAMPLE_RATE
        res["cost"] = {"windows": int(len(X)), "stream_seconds": stream_s,
                       "wall_seconds": wall, "cpu_seconds": cpu,
                       "windows_per_cpu_second": len(X) / cpu,
                       "realtime_factor_wall": stream_s / wall,
                       "realtime_factor_cpu": stream_s / cpu}

    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    text = report(res)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text)
    print(text)
    if not a.no_plots:
        plots(a.out, res, cm)
    bad = []
    if a.min_accuracy_10 is not None and \
            res["project"]["accuracy_snr_ge_10"] < a.min_accuracy_10:
        bad.append("accuracy at SNR >= 10 dB %.4f < %.4f"
                   % (res["project"]["accuracy_snr_ge_10"],
                      a.min_accuracy_10))
    if a.check_parity:
        q = res.get("parity")
        if q is None:
            bad.append("no parity figures (PyTorch skipped)")
        elif q["argmax_agreement_f32"] < 0.999 or \
                q["prob_maxabs_vs_f32"] > 1e-5:
            bad.append("element vs PyTorch: argmax agreement %.5f, "
                       "probability max-abs %.2e" % (q["argmax_agreement_f32"],
                                                     q["prob_maxabs_vs_f32"]))
    if bad:
        print("evaluate: FAILED: " + "; ".join(bad))
        sys.exit(1)
    if a.min_accuracy_10 is not None or a.check_parity:
        print("evaluate: checks passed%s%s" % (
            ": accuracy at SNR >= 10 dB >= %.2f" % a.min_accuracy_10
            if a.min_accuracy_10 is not None else "",
            "; element = PyTorch (argmax >= 99.9 %, max-abs <= 1e-5)"
            if a.check_parity else ""))


def pct(v):
    return "%.1f %%" % (100 * v)


def report(res):
    L = []
    L.append("model %s (min_probability %.2f)" % (res["model"],
                                                  res["min_probability"]))
    L.append("")
    L.append("| generator | windows | overall | SNR >= 10 dB | SNR >= 16 dB |")
    L.append("|---|---:|---:|---:|---:|")
    for key, name in (("project", "iqgen.py (project, held out), "
                       "element"), ("torch", "iqgen.py, PyTorch float32"),
                      ("independent", "evalgen.py (independent), "
                       "element")):
        if key in res:
            r = res[key]
            L.append("| %s | %d | %s | %s | %s |"
                     % (name, r["windows"], pct(r["accuracy"]),
                        pct(r["accuracy_snr_ge_10"]),
                        pct(r["accuracy_snr_ge_16"])))
    L.append("")
    L.append("per class at SNR >= 10 dB (element):")
    L.append("")
    L.append("| generator | " + " | ".join(iqgen.MODULATIONS) + " |")
    L.append("|---|" + "---:|" * M)
    for key in ("project", "independent"):
        if key in res:
            L.append("| %s | " % key + " | ".join(
                "%.1f" % (100 * res[key]["per_class_snr_ge_10"][n])
                for n in iqgen.MODULATIONS) + " |")
    if "parity" in res:
        q = res["parity"]
        L.append("")
        L.append("element vs PyTorch: same argmax on %.3f %% of windows "
                 "(float32), %.3f %% (float64); probability max-abs %.2e vs "
                 "float32, %.2e vs float64 (PyTorch float32 vs float64: "
                 "%.2e)" % (100 * q["argmax_agreement_f32"],
                            100 * q["argmax_agreement_f64"],
                            q["prob_maxabs_vs_f32"], q["prob_maxabs_vs_f64"],
                            q["torch_f32_maxabs_vs_f64"]))
    if "robustness" in res:
        L.append("")
        L.append("each impairment alone (iqgen.py, everything else off, "
                 "SNR 10 ... 20 dB), element accuracy:")
        L.append("")
        for key, r in res["robustness"].items():
            L.append("- %s: " % r["title"] + ", ".join(
                "%s: %.1f %%" % (v, 100 * acc)
                for v, acc in zip(r["values"], r["accuracy"])))
    if "rejection" in res:
        L.append("")
        L.append("decision `unknown` (unknown class, under min-probability "
                 "or out of contract), element, SNR 10 ... 20 dB:")
        L.append("")
        L.append("| signal | seen in training | windows | unknown | of "
                 "which out of contract |")
        L.append("|---|---|---:|---:|---:|")
        for kind, r in res["rejection"].items():
            L.append("| %s | %s | %d | %s | %s |"
                     % (kind, "yes (class unknown)" if r["seen_in_training"]
                        else ("no" if kind != "silence" else "no (zeros)"),
                        r["windows"], pct(r["rejected"]),
                        pct(r["out_of_contract"])))
        for key, v in res["in_class_rejected_snr_ge_10"].items():
            L.append("| the ten modulations, %s, SNR >= 10 dB | yes | | %s "
                     "| |" % (key, pct(v)))
    if "cost" in res:
        c = res["cost"]
        L.append("")
        L.append("cost: %d windows (%.1f s of I/Q) through the element on "
                 "one core (taskset, threads=1): %.2f s wall, %.2f s CPU: "
                 "%.0f windows per CPU second, %.1fx real time (wall), "
                 "%.1fx per CPU second"
                 % (c["windows"], c["stream_seconds"], c["wall_seconds"],
                    c["cpu_seconds"], c["windows_per_cpu_second"],
                    c["realtime_factor_wall"], c["realtime_factor_cpu"]))
    return "\n".join(L) + "\n"


def plots(out, res, cm):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # accuracy against SNR
    fig, ax = plt.subplots(figsize=(9, 5.5))
    r = res["project"]
    s = sorted(r["by_snr"], key=int)
    cmap = plt.get_cmap("tab10")
    b = sorted(r["by_snr_class"], key=int)
    for c in range(M):
        ax.plot([int(k) for k in b], [r["by_snr_class"][k][c] for k in b],
                "-", color=cmap(c), lw=1, alpha=0.8,
                label=iqgen.MODULATIONS[c] + " (3-dB bins)")
    ax.plot([int(k) for k in s], [r["by_snr"][k] for k in s], "k-", lw=3,
            label="all, iqgen.py (element)")
    if "torch" in res:
        t = res["torch"]
        ax.plot([int(k) for k in s], [t["by_snr"][k] for k in s], "wo",
                mec="k", ms=5, label="all, iqgen.py (PyTorch)")
    if "independent" in res:
        q = res["independent"]
        s2 = sorted(q["by_snr"], key=int)
        ax.plot([int(k) for k in s2], [q["by_snr"][k] for k in s2], "k--",
                lw=2.5, label="all, evalgen.py (element)")
    ax.axhline(1.0 / M, color="grey", ls=":", lw=1.5, label="chance (10 %)")
    ax.set_xlabel("SNR (dB)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.01)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, ncol=2, loc="lower right")
    ax.set_title("Modulation recognition through the sattn element "
                 "(%d + %d held-out windows)"
                 % (r["windows"], res.get("independent", {})
                    .get("windows", 0)), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy.png"), dpi=110)
    plt.close(fig)

    # confusion at SNR >= 10 dB
    fig, ax = plt.subplots(figsize=(8, 6.4))
    frac = cm / np.maximum(cm.sum(1, keepdims=True), 1)
    ax.imshow(frac, vmin=0, vmax=1, cmap="Blues")
    ax.set_xticks(range(C))
    ax.set_yticks(range(M))
    ax.set_xticklabels(iqgen.LABELS, rotation=45, ha="right")
    ax.set_yticklabels(iqgen.MODULATIONS)
    ax.set_xlabel("recognised")
    ax.set_ylabel("true")
    for i in range(M):
        for j in range(C):
            if cm[i, j]:
                ax.text(j, i, "%.0f" % (100 * frac[i, j]) if frac[i, j] >=
                        0.005 else "<1", ha="center", va="center",
                        fontsize=9, color="white" if frac[i, j] > 0.5
                        else "black")
    ax.set_title("Confusion (%% of each true class), SNR >= 10 dB, %d "
                 "windows through the element" % cm.sum(), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "confusion.png"), dpi=110)
    plt.close(fig)

    # robustness
    if "robustness" in res:
        rb = res["robustness"]
        fig, axes = plt.subplots(2, 3, figsize=(11, 6.5))
        for ax, (key, r) in zip(axes.flat, rb.items()):
            ax.plot(r["values"], r["accuracy"], "o-")
            ax.set_title(r["title"], fontsize=9)
            ax.set_ylim(0, 1.01)
            ax.axhline(1.0 / M, color="grey", ls=":")
            ax.grid(True, alpha=0.3)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy")
        fig.suptitle("Each impairment alone (SNR 10 ... 20 dB, iqgen.py; "
                     "shaded: the training range)", fontsize=10)
        shade = {"cfo": (0, 1000), "sro": (0, 500), "doppler": (0, 60),
                 "rolloff": (0.2, 0.5), "amplitude": (-50, 50),
                 "iq": (0, 1)}
        for ax, key in zip(axes.flat, rb):
            lo, hi = shade[key]
            ax.axvspan(lo, hi, color="green", alpha=0.08)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "robustness.png"), dpi=110)
        plt.close(fig)
    print("wrote %s" % ", ".join(os.path.join(out, f) for f in
                                 ("accuracy.png", "confusion.png",
                                  "robustness.png")))


if __name__ == "__main__":
    main()
