#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The recogniser's edge cases through gst-launch-1.0 -m: what the element
says (its sattn-class messages) about a QPSK stream far quieter or louder
than unit power, and about signals that are no modulation at all.

    /usr/bin/python3 examples/recognizer/edge_cases.py [--model M] [--check]
        [--show 2]

Cases (one second each, 2-channel F32 at 64 kHz, every window's decision:
message-interval=0; the model's own frame size, window and hop, which the
element takes from the file):

  qpsk-x0.01   QPSK at 10 dB SNR (AWGN, iqgen.py) scaled by 0.01 (-40 dB)
  qpsk-x1      the same, unscaled
  qpsk-x100    the same scaled by 100 (+40 dB)
  silence      zeros from a file (input RMS 0: out of the input contract)
  sine         audiotestsrc wave=sine freq=1000 (the same sine on I and Q)
  silence-gap  audiotestsrc wave=silence, whose buffers are flagged GAP:
               their frames are masked and a window without a usable
               frame gets no decision at all (no message)
  white-noise  audiotestsrc wave=white-noise

    gst-launch-1.0 -m filesrc location=qpsk.f32 ! rawaudioparse
      use-sink-caps=false format=pcm pcm-format=f32le num-channels=2
      sample-rate=64000 ! sattn weights=M output=classes message-interval=0
      ! fakesink
    gst-launch-1.0 -m audiotestsrc wave=sine freq=1000 num-buffers=63
      ! audio/x-raw,format=F32LE,rate=64000,channels=2
      ! sattn weights=M output=classes message-interval=0 ! fakesink

It prints the first messages of each case and a summary line per case.
--check (the test): each QPSK case is recognised as QPSK (its most
frequent decision; the share of its windows is printed) and the three
give the same decision in every window (the model's own power
normalisation makes -40, 0 and +40 dB one input); no window of silence,
sine or white noise gets a modulation (each is `unknown`, by the unknown
class, min-probability or the input contract); GAP silence gets no
decision; exit status 1 otherwise.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import iqgen  # noqa: E402
from evaluate import gst_env  # noqa: E402

MSG = re.compile(r"sattn-class, .*")
LABEL = re.compile(r'label=\(string\)"?([^",]*)"?,')
FIELDS = re.compile(r"(probability|in-contract|rejected|input-rms)=\("
                    r"[a-z]+\)([^,;]+)")


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, env=gst_env())
    if r.returncode != 0 or "Got EOS" not in r.stdout:
        sys.exit("edge_cases: the pipeline failed (status %d):\n%s\n%s"
                 % (r.returncode, " ".join(argv),
                    r.stdout[-2000:] + r.stderr))
    return [m.group(0) for m in MSG.finditer(r.stdout)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(
        HERE, "recognizer.safetensors"))
    p.add_argument("--check", action="store_true")
    p.add_argument("--show", type=int, default=2,
                   help="messages printed per case")
    a = p.parse_args()
    launch = shutil.which("gst-launch-1.0")
    if launch is None:
        sys.exit("edge_cases: gst-launch-1.0 is needed")
    sattn = ["sattn", "weights=" + a.model, "output=classes",
             "message-interval=0", "!", "fakesink"]
    rate = "sample-rate=%d" % iqgen.SAMPLE_RATE
    iq, _, _ = iqgen.make_stream(
        39, 1, iqgen.SAMPLE_RATE, labels=[iqgen.LABELS.index("QPSK")],
        snrs=[10], spec=dict(iqgen.CLEAN, amp_db=(0.0, 0.0)))
    failures = []
    qpsk = []
    with tempfile.TemporaryDirectory() as d:
        cases = []
        for name, scale in (("qpsk-x0.01", 0.01), ("qpsk-x1", 1.0),
                            ("qpsk-x100", 100.0)):
            path = os.path.join(d, name + ".f32")
            (iq * scale).astype("<f4").tofile(path)
            cases.append((name, "QPSK", [
                launch, "-m", "filesrc", "location=" + path, "!",
                "rawaudioparse", "use-sink-caps=false", "format=pcm",
                "pcm-format=f32le", "num-channels=2", rate, "!"] + sattn))
        path = os.path.join(d, "zeros.f32")
        np.zeros_like(iq).astype("<f4").tofile(path)
        cases.append(("silence", None, [
            launch, "-m", "filesrc", "location=" + path, "!",
            "rawaudioparse", "use-sink-caps=false", "format=pcm",
            "pcm-format=f32le", "num-channels=2", rate, "!"] + sattn))
        for name, wave in (("sine", "sine freq=1000"),
                           ("silence-gap", "silence"),
                           ("white-noise", "white-noise")):
            cases.append((name, None, [
                launch, "-m", "audiotestsrc"] + ("wave=" + wave).split() +
                ["num-buffers=63", "!",
                 "audio/x-raw,format=F32LE,rate=%d,channels=2"
                 % iqgen.SAMPLE_RATE, "!"] + sattn))
        for name, want, argv in cases:
            msgs = run(argv)
            labels = [LABEL.search(m).group(1) for m in msgs]
            shown = " ".join(argv[1:]).replace(d + "/", "").replace(
                a.model, os.path.basename(a.model))
            print("== %s: gst-launch-1.0 %s" % (name, shown))
            for m in msgs[:a.show]:
                print("   " + m)
            counts = {k: labels.count(k) for k in sorted(set(labels))}
            f = [dict(FIELDS.findall(m)) for m in msgs]
            ooc = sum(x.get("in-contract") == "false" for x in f)
            print("   %d windows: %s; out of contract: %d"
                  % (len(labels), ", ".join("%s %d" % kv for kv in
                                            counts.items()), ooc))
            if name == "silence-gap":
                # audiotestsrc flags silent buffers GAP: their frames are
                # masked, a window without a usable frame has no decision
                if labels:
                    failures.append("%s: %d decisions for GAP buffers"
                                    % (name, len(labels)))
                else:
                    print("   (GAP buffers: masked frames, no decision)")
            elif not labels:
                failures.append("%s: no sattn-class message" % name)
            elif want is not None:
                qpsk.append(labels)
                top = max(counts, key=counts.get)
                print("   recognised as %s (%.1f %% of the windows %s)"
                      % (top, 100 * labels.count(want) / len(labels), want))
                if top != want:
                    failures.append("%s: most windows %s, not %s"
                                    % (name, top, want))
            else:
                bad = [x for x in labels if x != iqgen.UNKNOWN]
                if bad:
                    failures.append("%s: %d of %d windows got a modulation "
                                    "(%s)" % (name, len(bad), len(labels),
                                              ", ".join(sorted(set(bad)))))
    if any(q != qpsk[0] for q in qpsk):
        failures.append("the QPSK cases differ in their decisions: the "
                        "gain changed what the model saw")
    if failures:
        print("edge cases: " + "; ".join(failures))
        if a.check:
            sys.exit(1)
    else:
        print("edge cases: QPSK recognised at -40, 0 and +40 dB, the same "
              "decision in every window; silence, sine and white noise "
              "unknown in every window; GAP silence without a decision")


if __name__ == "__main__":
    main()
