#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Watch sattn's numeric health while it runs, then plot it.

Runs appsrc ! sattn post-messages=true ! appsink with the attention map
(the element's `attn` pad) going to a second appsink, on a synthetic
multichannel signal whose middle third is much louder.  Prints every
`sattn` health message and every warning as they arrive, and saves one PNG
with, over time: the input, the attention features, the attention map
(one column per query frame: where in its window it looked), and the
health figures (mean max weight, normalised entropy, saturated rows).

    GST_PLUGIN_PATH=build/plugin examples/health-plot.py -o health.png
    GST_PLUGIN_PATH=build/plugin examples/health-plot.py --scale 1 --loud 1

Needs python3-gi, python3-gst-1.0, python3-numpy, python3-matplotlib.
"""
import argparse
import sys

import numpy as np

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402


def make_signal(args):
    """Channels of slow sines at different frequencies plus a little
    noise; the middle third is args.loud times louder."""
    rng = np.random.default_rng(1)
    n = int(args.seconds * args.rate)
    t = np.arange(n) / args.rate
    freqs = 3.0 + 2.5 * np.arange(args.channels)
    x = np.sin(2 * np.pi * np.outer(t, freqs) + rng.uniform(0, 6, args.channels))
    x += 0.2 * rng.standard_normal(x.shape)
    x *= args.amplitude
    third = n // 3
    x[third:2 * third] *= args.loud
    return x.astype(np.float32)


def describe(s):
    """One line for a `sattn` message structure."""
    g = s.get_value
    rows = max(g("rows"), 1)
    return ("t={:7.3f}s windows={:3d} max-weight={:.3f} entropy={:.3f} "
            "saturated-rows={}/{} ({:.0%}) score=[{:.3g}, {:.3g}] "
            "lse=[{:.3g}, {:.3g}] nonfinite={} invalid-frames={} "
            "masked-keys={}").format(
        g("timestamp") / Gst.SECOND, g("windows"), g("max-weight"),
        g("entropy"), g("saturated-rows"), g("rows"),
        g("saturated-rows") / rows, g("score-min"), g("score-max"),
        g("lse-min"), g("lse-max"), g("nonfinite-scores"),
        g("invalid-frames"), g("masked-keys"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="sattn-health.png",
                    help="PNG to write (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate", type=int, default=4000)
    ap.add_argument("--channels", type=int, default=8)
    ap.add_argument("--frame-size", type=int, default=4,
                    help="sample periods per frame (d_model = channels x "
                    "frame-size)")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--hop", type=int, default=8)
    ap.add_argument("--scale", type=float, default=0.0,
                    help="0 = 1/sqrt(head-dim), 1 = unscaled")
    ap.add_argument("--amplitude", type=float, default=0.5)
    ap.add_argument("--loud", type=float, default=4.0,
                    help="gain of the middle third of the signal")
    ap.add_argument("--interval-ms", type=float, default=100.0,
                    help="stream time per health message (0 = per window)")
    ap.add_argument("--quiet", action="store_true",
                    help="print a summary only")
    args = ap.parse_args()

    Gst.init(None)
    if Gst.ElementFactory.find("sattn") is None:
        sys.exit("the sattn element was not found: build the project and "
                 "set GST_PLUGIN_PATH to <build>/plugin")

    x = make_signal(args)
    caps = ("audio/x-raw,format=F32LE,layout=interleaved,rate={},channels={}"
            .format(args.rate, args.channels))
    desc = ("appsrc name=src format=time max-bytes=0 caps={caps} ! "
            "sattn name=s post-messages=true message-interval={iv} "
            "window={w} hop={h} heads={H} frame-size={fs} scale={sc} ! "
            "appsink name=features sync=false "
            "s.attn ! appsink name=maps sync=false").format(
        caps=caps, iv=int(args.interval_ms * Gst.MSECOND), w=args.window,
        h=args.hop, H=args.heads, fs=args.frame_size, sc=args.scale)
    pipeline = Gst.parse_launch(desc)

    features, maps, health = [], [], []

    def on_features(sink):
        sample = sink.emit("pull-sample")
        buf = sample.get_buffer()
        ch = sample.get_caps().get_structure(0).get_value("channels")
        data = buf.extract_dup(0, buf.get_size())
        features.append(np.frombuffer(data, np.float32).reshape(-1, ch))
        return Gst.FlowReturn.OK

    def on_map(sink):
        sample = sink.emit("pull-sample")
        buf = sample.get_buffer()
        st = sample.get_caps().get_structure(0)
        w, h = st.get_value("width"), st.get_value("height")
        stride = (w + 3) // 4 * 4          # GRAY8 rows are 4-byte aligned
        data = np.frombuffer(buf.extract_dup(0, buf.get_size()), np.uint8)
        maps.append(data.reshape(h, stride)[:, :w].copy())
        return Gst.FlowReturn.OK

    for name, cb in (("features", on_features), ("maps", on_map)):
        sink = pipeline.get_by_name(name)
        sink.set_property("emit-signals", True)
        sink.connect("new-sample", cb)

    # Queue the whole signal, then end the stream.
    src = pipeline.get_by_name("src")
    per_buf = 1024
    for i in range(0, len(x), per_buf):
        chunk = x[i:i + per_buf]
        buf = Gst.Buffer.new_wrapped(chunk.tobytes())
        buf.pts = i * Gst.SECOND // args.rate
        buf.duration = len(chunk) * Gst.SECOND // args.rate
        src.emit("push-buffer", buf)
    src.emit("end-of-stream")

    pipeline.set_state(Gst.State.PLAYING)
    bus = pipeline.get_bus()
    warnings = 0
    ok = True
    while True:
        msg = bus.timed_pop_filtered(
            30 * Gst.SECOND, Gst.MessageType.ELEMENT | Gst.MessageType.WARNING
            | Gst.MessageType.ERROR | Gst.MessageType.EOS)
        if msg is None:
            print("no EOS within 30 s", file=sys.stderr)
            ok = False
            break
        if msg.type == Gst.MessageType.ELEMENT:
            s = msg.get_structure()
            if s is not None and s.get_name() == "sattn":
                g = s.get_value
                health.append((g("timestamp") / Gst.SECOND,
                               g("duration") / Gst.SECOND, g("max-weight"),
                               g("entropy"),
                               g("saturated-rows") / max(g("rows"), 1)))
                if not args.quiet:
                    print(describe(s))
        elif msg.type == Gst.MessageType.WARNING:
            err, _ = msg.parse_warning()
            warnings += 1
            print("WARNING from {}: {}".format(msg.src.get_name(),
                                               err.message))
        elif msg.type == Gst.MessageType.ERROR:
            err, dbg = msg.parse_error()
            print("ERROR: {} ({})".format(err.message, dbg), file=sys.stderr)
            ok = False
            break
        else:
            break
    pipeline.set_state(Gst.State.NULL)
    if not ok:
        return 1

    feats = np.concatenate(features) if features else np.zeros((0, 1))
    attn = np.concatenate(maps) if maps else np.zeros((0, args.window))
    print("{} health messages, {} warnings, {} feature frames, {} maps"
          .format(len(health), warnings, len(feats), len(maps)))
    plot(args, x, feats, attn, np.array(health), args.output)
    print("wrote", args.output)
    return 0


def plot(args, x, feats, attn, health, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dur = len(x) / args.rate
    fig, ax = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    t = np.arange(len(x)) / args.rate
    for c in range(min(3, x.shape[1])):
        ax[0].plot(t, x[:, c], lw=0.6, label="channel {}".format(c))
    ax[0].set_ylabel("input")
    ax[0].legend(loc="upper right", fontsize=7)
    ax[0].set_title("sattn window={} hop={} heads={} d_model={} scale={}"
                    .format(args.window, args.hop, args.heads,
                            args.channels * args.frame_size,
                            args.scale or "1/sqrt(head-dim)"))

    ax[1].imshow(feats.T, aspect="auto", origin="lower", cmap="coolwarm",
                 extent=(0, dur, 0, feats.shape[1]), interpolation="nearest")
    ax[1].set_ylabel("feature")

    # One column per query frame: its weights over the window's keys,
    # scaled to its own maximum (the attn pad's mapping).
    ax[2].imshow(attn.T, aspect="auto", origin="lower", cmap="magma",
                 extent=(0, dur, 0, attn.shape[1]), interpolation="nearest")
    ax[2].set_ylabel("key in window\n(0 = oldest)")

    if len(health):
        mid = health[:, 0] + health[:, 1] / 2
        ax[3].step(mid, health[:, 2], where="mid", label="mean max weight")
        ax[3].step(mid, health[:, 3], where="mid", label="normalised entropy")
        ax[3].step(mid, health[:, 4], where="mid",
                   label="saturated rows (fraction)")
    ax[3].set_ylim(-0.05, 1.05)
    ax[3].set_ylabel("health")
    ax[3].set_xlabel("time (s)")
    ax[3].legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
