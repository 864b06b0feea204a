#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The recognition demo: a generated I/Q stream whose modulation and SNR
change every second, recognised live by the element.

    /usr/bin/python3 examples/recognizer/demo.py [OUT_DIR] [--seconds 40]
        [--seed 2026] [--model M] [--launch gst-launch-1.0]

The model: --model, else $SATTN_RECOGNISER, else the installed copy when
there is one (recogniser.safetensors in sattn/models of the user's data
directory, of /usr/local/share or /usr/share, or of $XDG_DATA_DIRS:
where the element's weights=recogniser looks), else the source tree's
examples/recognizer/recognizer.safetensors.  The demo prints which.

Needs numpy and gst-launch-1.0 only (no PyTorch, no matplotlib).

1. iqgen.py writes SECONDS one-second segments of 2-channel float32 I/Q
   at 64 kHz (raw f32le, I and Q interleaved) to OUT_DIR/iq.f32: the
   classes in a seeded random order, each of the ten the same number of
   times when SECONDS is a multiple of ten; SNRs from SNRS_DB (-5 to
   +20 dB in 5 dB steps), a class's segments each at a different one
   while they last; each segment through its own channel (fading with
   Doppler, echo, carrier and sample-rate offsets, phase noise, I/Q
   imbalance, DC, a gain of -50 ... +50 dB: iqgen.py's training
   ranges).  OUT_DIR/iq.json records the schedule.
2. A real pipeline, pinned to one CPU (taskset -c, threads=1) and timed
   by the wall clock around it (CPU seconds: the child's rusage):

     gst-launch-1.0 -q filesrc location=iq.f32
       ! rawaudioparse use-sink-caps=false format=pcm pcm-format=f32le
           sample-rate=64000 num-channels=2
       ! sattn weights=M frame-size=16 window=64 hop=64 threads=1
           output=classes
       ! filesink location=classes.f32

   classes.f32 holds one row of ten float32 probabilities per window of
   1024 samples (16 ms).  Real-time factor = stream seconds / wall
   seconds (and / CPU seconds, what an idle core would give).
3. The same pipeline again with gst-launch-1.0 -m (not timed: printing
   every bus message is gst-launch's work, not the element's), writing
   classes-m.f32: it prints the sattn-class messages (a decision change,
   otherwise at most one per message-interval, 100 ms).
4. The timeline from classes.f32, one line per segment, then the
   accuracy, the messages and the real-time factor.

Windows and segments: a segment is 64000 samples, a window 1024, so
62.5 windows per second and a window straddles the change at every odd
second.  Only windows wholly inside one segment are scored; the
straddling ones are counted apart (which side they took).

Checks (exit status 1 when one fails): both runs reached EOS; exactly one
row per window of the stream; every probability finite and every row
summing to 1; the two runs gave the same bytes; the sattn-class messages
are exactly those the element's rule gives for these rows (count,
timestamp, class, label, probability);
accuracy over the scored windows at least MIN_ACCURACY_HI at SNR >= 10 dB
and MIN_ACCURACY overall.  The thresholds sit below what the model
measures (evaluate.py on 6,600 held-out windows: 90.5 % at SNR >= 10 dB,
80.3 % overall; this stream 91.5 % and 84.4 %) and far above chance
(10 %) or a model that says one class (10 %); the stream is fixed by the
seed, so only rounding differences between CPUs can move a result, by a
few windows near a tie.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import iqgen  # noqa: E402

FRAME_SAMPLES, FRAMES = iqgen.FRAME_SAMPLES, iqgen.FRAMES
WINDOW = iqgen.WINDOW_SAMPLES            # samples per window
SEGMENT = iqgen.SAMPLE_RATE              # samples per segment (1 s)
SNRS_DB = (-5, 0, 5, 10, 15, 20)
MESSAGE_INTERVAL_NS = 100000000          # the element's default
MIN_ACCURACY_HI = 0.80
MIN_ACCURACY = 0.70
MEASURED = "90.5 % / 80.3 % on 6,600 held-out windows"

MESSAGE = re.compile(
    r'\(element\): sattn-class, label=\(string\)"?([^",]*)"?, '
    r'index=\(uint\)(\d+), probability=\(double\)([^,]+),.*'
    r'timestamp=\(guint64\)(\d+),.*in-contract=\(boolean\)(true|false),'
    r'.*rejected=\(string\)([a-z-]+)')
UNKNOWN = -1


def installed_model():
    """The installed recogniser, where the element's weights=recogniser
    looks (plugin/gstsattn.c): sattn/models/recogniser.safetensors under
    the user's data directory, /usr/local/share, /usr/share or
    $XDG_DATA_DIRS; None when there is none."""
    home = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share")
    dirs = [home, "/usr/local/share"] + (
        os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    ).split(":") + ["/usr/share"]
    for d in dirs:
        f = os.path.join(d, "sattn", "models", "recogniser.safetensors")
        if d and os.path.isfile(f):
            return f
    return None


def min_probability(path):
    """The file's min_probability metadata (0 when it records none)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        md = json.loads(f.read(n)).get("__metadata__", {})
    return float(md.get("min_probability", "0"))


def fail(what):
    print("demo: FAILED: " + what, file=sys.stderr)
    sys.exit(1)


def schedule(seed, segments):
    """(labels, snrs) per segment: shuffled rounds of all the classes;
    each class's SNRs drawn from SNRS_DB without repeating one before all
    have come (so up to six segments of a class see six different SNRs,
    and with four or more every class is seen both below and at or above
    10 dB)."""
    rng = np.random.default_rng(seed)
    c = iqgen.N_MOD
    rounds = [rng.permutation(c) for _ in range((segments + c - 1) // c)]
    labels = np.concatenate(rounds)[:segments]
    snrs = np.empty(segments, int)
    for k in range(c):
        at = np.flatnonzero(labels == k)
        pool = np.concatenate([rng.permutation(SNRS_DB) for _ in
                               range(len(at) // len(SNRS_DB) + 1)])
        snrs[at] = pool[:len(at)]
    return labels, snrs


def gst_env():
    """The environment for the GStreamer tools: SATTN_GST_PRELOAD (the
    sanitizer runtimes, see demo.sh) preloaded into them only."""
    env = dict(os.environ)
    pre = env.get("SATTN_GST_PRELOAD", "")
    if pre:
        env["LD_PRELOAD"] = (pre + " " + env["LD_PRELOAD"]
                             if env.get("LD_PRELOAD") else pre)
    return env


def run_pipeline(launch, src, model, dst, messages):
    """The pipeline, with -m (messages) or -q pinned to one CPU: (stdout,
    wall s, CPU s, the CPU or None, argv)."""
    cpu = min(os.sched_getaffinity(0))
    argv = iqgen.sattn_argv(launch, src, model, dst, ["threads=1"],
                            ["-m" if messages else "-q"])
    taskset = shutil.which("taskset")
    pin = taskset is not None and not messages
    cmd = ([taskset, "-c", str(cpu)] if pin else []) + argv
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=gst_env())
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime +
             after.ru_stime - before.ru_stime)
    if r.returncode != 0 or (messages and
                             "Got EOS from element" not in r.stdout):
        fail("the pipeline failed (status %d):\n%s\n%s"
             % (r.returncode, " ".join(cmd), r.stdout[-3000:] + r.stderr))
    return r.stdout, wall, cpu_s, (cpu if pin else None), argv


def expected_messages(pred, ts):
    """The element's rule: post on a change of decision (a class, or
    UNKNOWN), otherwise when message-interval has passed since the last
    post (running time = the row's timestamp here: one segment from 0).
    Returns the rows posted."""
    rows, last, last_post = [], -1, None
    for k, (p, t) in enumerate(zip(pred, ts)):
        if p == last and last_post is not None and \
                t < last_post + MESSAGE_INTERVAL_NS:
            continue
        rows.append(k)
        last, last_post = p, t
    return rows


def check_messages(out, P, pred, ts, min_p):
    """Parse the sattn-class messages -m printed and check them against
    the rows: each message's class and probability are its window's, its
    label the class's or `unknown` exactly when the window is out of the
    input contract (the message says which) or under min_p, and the
    messages are those the element's rule posts for these decisions.
    Returns (count, one message line, decisions of the posted windows)."""
    msgs = [(m.group(1), int(m.group(2)), float(m.group(3)),
             int(m.group(4)), m.group(5) == "true", m.group(6))
            for m in MESSAGE.finditer(out)]
    at = {t: i for i, t in enumerate(ts.tolist())}
    dec = np.where(P.max(1) < min_p, UNKNOWN, pred)
    for label, index, prob, t, inc, rej in msgs:
        if t not in at:
            fail("a message at %d ns, which is no window's timestamp" % t)
        k = at[t]
        if not inc:
            dec[k] = UNKNOWN
        want_rej = ("out-of-contract" if not inc else "low-probability"
                    if P[k].max() < min_p else "none")
        want_label = iqgen.LABELS[index] if want_rej == "none" \
            else iqgen.UNKNOWN
        if index != pred[k] or abs(prob - P[k, index]) > 1e-6 or \
                rej != want_rej or label != want_label:
            fail("message (%s, %d, %.6f, t=%d, in-contract %s, rejected "
                 "%s) disagrees with window %d (%s, %.6f)"
                 % (label, index, prob, t, inc, rej, k,
                    iqgen.LABELS[pred[k]], P[k, pred[k]]))
    want = expected_messages(dec, ts)
    if [t for _, _, _, t, _, _ in msgs] != [int(ts[k]) for k in want]:
        fail("%d sattn-class messages, the rows call for %d (or at other "
             "windows)" % (len(msgs), len(want)))
    line = next((ln for ln in out.splitlines() if "sattn-class" in ln), "")
    return len(msgs), line, dec


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", nargs="?", default="out/demo")
    p.add_argument("--seconds", type=int, default=40)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--model", default=None)
    p.add_argument("--launch", default="gst-launch-1.0")
    a = p.parse_args()
    if a.model is None:
        a.model = os.environ.get("SATTN_RECOGNISER") or installed_model()
        where = ("$SATTN_RECOGNISER" if os.environ.get("SATTN_RECOGNISER")
                 else "the installed copy")
        if a.model is None:
            a.model = os.path.join(HERE, "recognizer.safetensors")
            where = "the source tree's (no installed copy)"
    else:
        where = "--model"
    min_p = min_probability(a.model)
    launch = shutil.which(a.launch)
    if launch is None:
        fail("%s is needed" % a.launch)
    os.makedirs(a.out, exist_ok=True)
    src = os.path.join(a.out, "iq.f32")
    dst = os.path.join(a.out, "classes.f32")
    C = len(iqgen.LABELS)

    # 1. the stream
    labels, snrs = schedule(a.seed, a.seconds)
    iq, _, _ = iqgen.make_stream(a.seed + 1, a.seconds, SEGMENT,
                                 snrs=snrs, labels=labels)
    iq.astype("<f4").tofile(src)
    with open(os.path.join(a.out, "iq.json"), "w") as f:
        json.dump({"sample_rate": iqgen.SAMPLE_RATE, "channels": 2,
                   "format": "f32le", "seed": a.seed,
                   "segment_seconds": 1.0,
                   "labels": [iqgen.LABELS[c] for c in labels],
                   "snr_db": [int(s) for s in snrs]}, f, indent=1)

    # 2. the pipeline, timed; 3. again with -m for the messages
    _, wall, cpu_s, cpu, argv = run_pipeline(launch, src, a.model, dst,
                                             False)
    dst_m = os.path.join(a.out, "classes-m.f32")
    out, _, _, _, _ = run_pipeline(launch, src, a.model, dst_m, True)

    # 4. the rows, checked
    n_win = len(iq) // WINDOW
    rows = np.fromfile(dst, "<f4")
    if rows.size != n_win * C:
        fail("%d values in %s, expected %d windows x %d classes"
             % (rows.size, dst, n_win, C))
    P = rows.reshape(n_win, C)
    if not np.isfinite(P).all():
        fail("%d non-finite probabilities" % (~np.isfinite(P)).sum())
    if np.abs(P.sum(1) - 1).max() > 1e-4:
        fail("a row of probabilities sums to %.6f"
             % P.sum(1)[np.abs(P.sum(1) - 1).argmax()])
    with open(dst, "rb") as f1, open(dst_m, "rb") as f2:
        if f1.read() != f2.read():
            fail("%s and %s differ: the same pipeline gave other bytes"
                 % (dst, dst_m))
    pred = P.argmax(1)
    ts = np.arange(n_win, dtype=np.int64) * WINDOW * 1000000000 \
        // iqgen.SAMPLE_RATE
    n_msg, msg_line, dec = check_messages(out, P, pred, ts, min_p)

    first = np.arange(n_win) * WINDOW // SEGMENT
    last = (np.arange(n_win) * WINDOW + WINDOW - 1) // SEGMENT
    whole = first == last
    truth = labels[first]
    ok = whole & (pred == truth)
    hi = snrs[first] >= 10

    stream_s = len(iq) / iqgen.SAMPLE_RATE
    top = os.path.normpath(os.path.join(HERE, "..", ".."))
    shown = os.path.relpath(os.path.abspath(a.model), top)
    if shown.startswith(".."):
        shown = a.model
    launch_line = " ".join(argv[2:]).replace(src, "iq.f32").replace(
        dst, "classes.f32").replace(a.model, shown)
    print("sattn recognition demo: %d s of I/Q (2-channel F32, %d kHz), "
          "modulation and SNR changing every second (seed %d)"
          % (a.seconds, iqgen.SAMPLE_RATE // 1000, a.seed))
    print("model:    %s (%s)" % (shown, where))
    print("pipeline: gst-launch-1.0 %s" % launch_line)
    print("windows:  %d of %d samples (%.0f ms), one row of %d "
          "probabilities each; %d wholly inside a segment (scored), %d "
          "straddle a change"
          % (n_win, WINDOW, 1000 * WINDOW / iqgen.SAMPLE_RATE, C,
             whole.sum(), (~whole).sum()))
    print()
    print("  time (s)   true       SNR   recognised    windows right  "
          "mean p")
    for s in range(a.seconds):
        m = whole & (first == s)
        votes = np.bincount(pred[m], minlength=C)
        maj = votes.argmax()
        print("  %4.1f-%4.1f  %-7s %3d dB   %-7s %-4s  %3d/%-3d %5.1f %%  "
              "%.2f" % (s, s + 1, iqgen.LABELS[labels[s]], snrs[s],
                        iqgen.LABELS[maj],
                        "ok" if maj == labels[s] else "MISS",
                        ok[m].sum(), m.sum(), 100 * ok[m].mean(),
                        P[m, maj].mean()))
    print("  (recognised: the majority of the segment's scored windows; "
          "windows right: those\n   that said the true class; mean p: "
          "the recognised class's mean probability)")
    print()

    seg_ok = np.array([np.bincount(pred[whole & (first == s)],
                                   minlength=C).argmax() == labels[s]
                       for s in range(a.seconds)])
    acc = ok[whole].mean()
    acc_hi = ok[whole & hi].mean()
    print("accuracy: %.1f %% of %d scored windows overall, %.1f %% of %d "
          "at SNR >= 10 dB" % (100 * acc, whole.sum(), 100 * acc_hi,
                               (whole & hi).sum()))
    print("          segments by majority: %d/%d overall, %d/%d at "
          "SNR >= 10 dB" % (seg_ok.sum(), a.seconds, seg_ok[snrs >= 10].sum(),
                            (snrs >= 10).sum()))
    per = ["%s %.0f%%" % (iqgen.LABELS[c],
                          100 * ok[whole & (truth == c)].mean())
           for c in range(iqgen.N_MOD)]
    print("          per class: " + ", ".join(per))
    posted = np.zeros(n_win, bool)
    posted[[int(k) for k in np.searchsorted(ts, [int(m.group(4)) for m in
                                                 MESSAGE.finditer(out)])]] \
        = True
    unk = whole & hi & posted & (dec == UNKNOWN)
    print("          decided unknown (min-probability %.2f, input "
          "contract, or the unknown class): %d of the %d posted decisions "
          "at SNR >= 10 dB" % (min_p, (unk | (whole & hi & posted &
                                             (pred == iqgen.N_MOD))).sum(),
                              (whole & hi & posted).sum()))
    st = ~whole
    before = (pred[st] == labels[first[st]]).sum()
    after = (pred[st] == labels[last[st]]).sum()
    print("straddling windows: %d, recognised as the class before the "
          "change %d, after it %d, another %d"
          % (st.sum(), before, after, st.sum() - before - after))
    print("messages: the same pipeline with -m (same bytes out): %d "
          "sattn-class, on a change of decision\n          or every 100 ms, "
          "each matching its window's row, e.g." % n_msg)
    print("  " + msg_line)
    print("speed:    %.1f s of I/Q in %.2f s wall on one core (%s, "
          "threads=1): %.1fx real time;\n          %.2f s CPU (user + "
          "system, the whole gst-launch-1.0 run with its start-up): %.1fx "
          "real time per CPU second"
          % (stream_s, wall,
             "taskset -c %d" % cpu if cpu is not None else "not pinned",
             stream_s / wall, cpu_s, stream_s / cpu_s))
    print()
    if acc_hi < MIN_ACCURACY_HI or acc < MIN_ACCURACY:
        fail("accuracy %.1f %% at SNR >= 10 dB, %.1f %% overall: below "
             "%.0f %% / %.0f %% (the model measures %s)"
             % (100 * acc_hi, 100 * acc, 100 * MIN_ACCURACY_HI,
                100 * MIN_ACCURACY, MEASURED))
    print("checks passed: one row per window, all finite, rows sum to 1, "
          "messages match the rows, accuracy >= %.0f %% at SNR >= 10 dB "
          "and >= %.0f %% overall" % (100 * MIN_ACCURACY_HI,
                                      100 * MIN_ACCURACY))


if __name__ == "__main__":
    main()
