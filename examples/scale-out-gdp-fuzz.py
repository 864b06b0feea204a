#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Fuzzing what a worker receives from a sensor: GDP bytes, mutated, into
the worker's own receiving chain (scale-out-node.py's GdpGuard, gdpdepay,
the end marker and reconnection probes, the sensor-name check, a queue,
sattn), one pipeline per episode, in 1316-byte pieces as SRT delivers
them.

Each episode takes a valid stream (the sensor's tag, caps, segment and 40
buffers, as gdppay writes them) and applies one mutation: bits flipped
anywhere or in a header, a payload length rewritten (CRC made valid, so
only the bound stops it), caps rewritten (other formats, channel counts,
rates, junk; CRC valid), packets dropped, duplicated or swapped, bytes
inserted, the stream cut, a packet type rewritten, or random bytes.

Checked for every episode: it ends (EOS or an error message) within 5 s;
the process survives, with no GLib critical (they are made fatal); its
RSS stays within 64 MiB of the start (the 4 GiB length a header can
declare never gets buffered).  Printed: the episode
count and how the episodes ended, by kind.

Usage: scale-out-gdp-fuzz.py [--episodes N] [--seconds S] [--seed N]
(meson's examples suite runs 300 episodes with a fixed seed; with
--seconds it runs until then, new seeds each run unless --seed is given).
"""

import argparse
import collections
import importlib.util
import os
import random
import re
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _scale_out_test():
    """examples/scale-out-test.py as a module (its name has dashes): the
    node loader and GDP's header CRC, written once there."""
    spec = importlib.util.spec_from_file_location(
        "scale_out_test", os.path.join(HERE, "scale-out-test.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_SOT = _scale_out_test()
load_node, crc = _SOT.load_node, _SOT.gdp_crc


def valid_stream(node, buffers=40):
    """[packet bytes] as the sensor's gdppay writes them."""
    p = Gst.parse_launch(f"appsrc name=src format=time caps={node.CAPS} ! gdppay "
                         "! appsink name=sink sync=false")
    src, sink = p.get_by_name("src"), p.get_by_name("sink")
    p.set_state(Gst.State.PLAYING)
    tags = Gst.TagList.new_empty()
    tags.add_value(Gst.TagMergeMode.APPEND, "extended-comment", "sattn-sensor=fuzz")
    src.send_event(Gst.Event.new_tag(tags))
    for k in range(buffers):
        b = Gst.Buffer.new_wrapped(node.signal_block(k * 160, 160).tobytes())
        b.pts = node.buffer_pts(0, k)
        b.duration = node.buffer_pts(0, k + 1) - b.pts
        src.emit("push-buffer", b)
    src.emit("end-of-stream")
    out = []
    while True:
        s = sink.emit("try-pull-sample", 2 * Gst.SECOND)
        if s is None:
            break
        b = s.get_buffer()
        out.append(bytearray(b.extract_dup(0, b.get_size())))
    p.set_state(Gst.State.NULL)
    return out


def fix_crc(pk):
    pk[58:60] = crc(bytes(pk[:58])).to_bytes(2, "big")


CAPS_JUNK = [
    "audio/x-raw, format=(string)S16LE, layout=(string)interleaved, channels=(int)4, rate=(int)16000",
    "audio/x-raw, format=(string)F32LE, layout=(string)interleaved, channels=(int)3, rate=(int)16000",
    "audio/x-raw, format=(string)F32LE, layout=(string)interleaved, channels=(int)4, rate=(int)0",
    "audio/x-raw, format=(string)F32LE, layout=(string)non-interleaved, channels=(int)4, rate=(int)16000",
    "audio/x-raw, format=(string)F32LE, layout=(string)interleaved, channels=(int)65535, rate=(int)2147483647",
    "video/x-raw, format=(string)GRAY8, width=(int)4, height=(int)4",
    "ANY", "EMPTY", "audio/x-raw, channels=(int)", "\x00\x01junk",
]


def mutate(rng, packets):
    """(kind, bytes)."""
    pk = [bytearray(p) for p in packets]
    kind = rng.choice(["bits", "header-bit", "length", "caps", "drop", "dup",
                       "swap", "insert", "cut", "type", "random"])
    if kind == "bits":
        data = bytearray(b"".join(pk))
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        return kind, bytes(data)
    if kind == "header-bit":
        p = rng.choice(pk)
        i = rng.randrange(58)
        p[i] ^= 1 << rng.randrange(8)
    elif kind == "length":
        p = rng.choice(pk)
        n = rng.choice([0, 1, 61, 2559, 2561, 1 << 20, (1 << 20) + 1, 64 << 20,
                        (1 << 32) - 1, rng.randrange(1 << 32)])
        p[6:10] = n.to_bytes(4, "big")
        fix_crc(p)
    elif kind == "caps":
        i = next(j for j, p in enumerate(pk) if int.from_bytes(p[4:6], "big") == 2)
        body = rng.choice(CAPS_JUNK).encode() + b"\x00"
        h = bytearray(pk[i][:62])
        h[6:10] = len(body).to_bytes(4, "big")
        fix_crc(h)
        new = h + body
        # the caps at the start, or again in the middle (a caps change)
        if rng.random() < 0.5:
            pk[i] = new
        else:
            pk.insert(rng.randrange(i + 1, len(pk)), new)
    elif kind == "drop":
        del pk[rng.randrange(len(pk))]
    elif kind == "dup":
        i = rng.randrange(len(pk))
        pk.insert(i, bytearray(pk[i]))
    elif kind == "swap":
        i, j = rng.randrange(len(pk)), rng.randrange(len(pk))
        pk[i], pk[j] = pk[j], pk[i]
    elif kind == "insert":
        data = bytearray(b"".join(pk))
        i = rng.randrange(len(data))
        data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        return kind, bytes(data)
    elif kind == "cut":
        data = b"".join(pk)
        return kind, data[:rng.randrange(len(data))]
    elif kind == "type":
        p = rng.choice(pk)
        p[4:6] = rng.choice([0, 1, 2, 3, 63, 64, 65, 0x1000, 0xFFFF,
                             rng.randrange(1 << 16)]).to_bytes(2, "big")
        fix_crc(p)
    elif kind == "random":
        return kind, bytes(rng.randrange(256) for _ in range(rng.randint(1, 20000)))
    return kind, bytes(b"".join(pk))


class FakeWorker:
    def __init__(self, node):
        self.node = node.Node(None, "fuzz")


def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def episode(node, fake, data, limit):
    """Run one stream through the worker's receiving chain: 'eos' or the
    error's source and message."""
    p = Gst.parse_launch(
        "appsrc name=in format=bytes caps=application/x-gdp ! gdpdepay name=depay "
        "! queue max-size-buffers=256 max-size-bytes=0 max-size-time=0 "
        f"! sattn {node.SATTN_DEFAULT} ! fakesink name=sink sync=false")
    src, depay = p.get_by_name("in"), p.get_by_name("depay")
    branch = node.Branch.__new__(node.Branch)
    branch.w, branch.sensor, branch.wall, branch.probes = fake, "fuzz", None, []
    guard = node.GdpGuard(lambda why: branch.fail_from_thread(src, why), limit)
    node.add_probe(src.get_static_pad("src"), Gst.PadProbeType.BUFFER, guard.probe,
                   branch.probes)
    node.eos_on_end_marker(depay, branch.probes)
    node.discont_after_reconnect(depay, branch.probes)
    branch.name_check(depay)
    p.set_state(Gst.State.PLAYING)
    for i in range(0, len(data), 1316):
        if src.emit("push-buffer", Gst.Buffer.new_wrapped(data[i:i + 1316])) \
                != Gst.FlowReturn.OK:
            break
    src.emit("end-of-stream")
    msg = p.get_bus().timed_pop_filtered(5 * Gst.SECOND,
                                         Gst.MessageType.EOS | Gst.MessageType.ERROR)
    p.set_state(Gst.State.NULL)
    # as the worker's teardown: the probes go, and with them the pipeline
    for pad, pid in branch.probes:
        pad.remove_probe(pid)
    if msg is None:
        return "HANG"
    if msg.type == Gst.MessageType.EOS:
        return "eos"
    err, _ = msg.parse_error()
    # one line per kind of ending: numbers and element indexes folded
    return re.sub(r"\d+", "N", f"error from {msg.src.get_name()}: "
                  f"{err.message.split(';')[0][:70]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--seed", type=int)
    a = ap.parse_args()
    # a GLib critical (an assertion in GStreamer, gdpdepay setting caps it
    # should not) ends the run: that is a finding
    GLib.log_set_always_fatal(GLib.LogLevelFlags.LEVEL_CRITICAL |
                              GLib.LogLevelFlags.LEVEL_ERROR)
    Gst.init(None)
    node = load_node()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    base = valid_stream(node)
    limit = 1 << 20
    start_rss = peak = rss_kib()
    outcomes = collections.Counter()
    by_kind = collections.defaultdict(collections.Counter)
    hangs = []
    t0 = time.monotonic()
    n = 0
    fake = FakeWorker(node)
    ok = episode(node, fake, b"".join(base), limit)
    print(f"seed {seed}; the unmutated stream: {ok}", flush=True)
    while (n < a.episodes) if not a.seconds else (time.monotonic() - t0 < a.seconds):
        kind, data = mutate(rng, base)
        r = episode(node, fake, data, limit)
        n += 1
        outcomes[r] += 1
        by_kind[kind]["eos" if r == "eos" else ("HANG" if r == "HANG" else "error")] += 1
        if r == "HANG":
            hangs.append((n, kind))
        peak = max(peak, rss_kib())
        GLib.MainContext.default().iteration(False)
    dt = time.monotonic() - t0
    print(f"{n} episodes in {dt:.1f} s (seed {seed}), RSS {start_rss} KiB at the "
          f"start, peak {peak} KiB")
    for k in sorted(by_kind):
        print(f"  {k:10s} " + ", ".join(f"{v} {o}" for o, v in sorted(by_kind[k].items())))
    print("how they ended:")
    for o, v in outcomes.most_common():
        print(f"  {v:5d}  {o}")
    good = ok == "eos" and not hangs and peak - start_rss < 64 * 1024
    if hangs:
        print(f"episodes that did not end within 5 s: {hangs[:10]}")
    print("scale-out-gdp-fuzz: OK" if good else "scale-out-gdp-fuzz: FAILED")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
