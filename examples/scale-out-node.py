#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""One role of the scale-out recipe over SRT with AES encryption.

    sensor (listens)  <--SRT--  worker: sattn (calls; listens)  <--SRT--  collector (calls)

Frames and features travel as the GStreamer Data Protocol (gdppay /
gdpdepay) over SRT (srtsink / srtsrc, gst-plugins-bad): GDP carries each
buffer's PTS, duration and flags and the caps and segment, so features
come back with the sensor's timestamps to the nanosecond (SRT's own
timestamps are the receiver's clock at microsecond resolution and cut
buffers into 1316-byte packets: they cannot).

Who listens: data flows from a listener to its callers.  srtsink in
listener mode sends the GDP stream headers (caps, segment) to every new
caller, and srtsrc in caller mode reconnects by itself and flags the
first buffer of a new connection DISCONT (gdpdepay then drops any half
packet and starts on the new headers).  So the sensor listens and never
has to notice anything: a restarted worker calls it again and gets a
stream it can decode; the collector calls the worker and comes back to a
restarted worker the same way.  (A sender that calls instead does
reconnect, but GStreamer 1.22's srtsink sends the headers only on its
first connection, so a restarted receiver would get buffers without caps.)

Secrets: the passphrase comes from SATTN_SRT_PASSPHRASE or from the file
named by SATTN_SRT_PASSPHRASE_FILE, never from the command line (which
`ps` shows to every user); it is set on the elements as a property.
Every connection is encrypted (AES, key length SATTN_SRT_PBKEYLEN, 16, 24
or 32 bytes, default 32) and a peer without the passphrase is refused in
the SRT handshake.

Transport policy (GDP needs every byte of a connection): SRT's
too-late packet drop is off, so a late packet is retransmitted, never
skipped; a connection that stays silent for SATTN_SRT_IDLE_MS (default
2000 ms) is dropped and the caller reconnects.  SATTN_SRT_LATENCY (ms,
default 200) is the receive latency budget for retransmissions.

Worker queues: each stream is its own branch (srtsrc ! gdpdepay ! queue !
sattn ! queue ! gdppay ! srtsink) with two queues of at most
--queue-buffers (default 256: 2.5 s of 10 ms sensor buffers, 2 s of
8-frame hops at 16 kHz) buffers each, leaky downstream: a branch that
cannot send (no collector, or a collector that fell behind) drops its
oldest features and flags the next one DISCONT; a sattn that cannot keep
up drops the oldest frames and restarts its window (DISCONT).  No branch
ever waits for another, and memory stays bounded.

Usage (HOST:PORT lists are comma-separated, one per stream):
  scale-out-node.py sensor --listen HOST:PORT [--buffers N] [--start-ns T]
  scale-out-node.py worker --sensors HOST:PORT,... --listen HOST:PORT,...
                           [--sattn "frame-size=16 window=32 hop=8 heads=4"]
  scale-out-node.py collector --workers HOST:PORT,... --out PREFIX
  scale-out-node.py local --out PREFIX [--buffers N] [--start-ns T]
                          [--from-buffer B]  (sattn on this machine, no network)
The collector and `local` write PREFIX[-i].f32 (rows) and PREFIX[-i].ts
(one line per buffer: pts duration rows flags).
"""

import argparse
import os
import resource
import signal
import sys
import threading
import time

import numpy as np
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gio, GLib, Gst  # noqa: E402,F401 (Gio: socket addresses)

CHANNELS = 4
RATE = 16000
SAMPLES_PER_BUFFER = 160
CAPS = (f"audio/x-raw,format=F32LE,layout=interleaved,channels={CHANNELS},"
        f"rate={RATE}")
SATTN_DEFAULT = "frame-size=16 window=32 hop=8 heads=4"


def die(msg):
    print(f"scale-out-node: {msg}", file=sys.stderr)
    sys.exit(2)


def signal_block(first, n, stream=0):
    """The sensor's samples first..first+n-1 (n x CHANNELS, float32): a
    function of the absolute sample index, so a local run sees the same."""
    t = np.arange(first, first + n, dtype=np.float64)[:, None] / RATE
    c = np.arange(CHANNELS, dtype=np.float64)[None, :]
    x = (np.sin(2 * np.pi * (330.0 + 110.0 * c + 17.0 * stream) * t)
         + 0.25 * np.sin(2 * np.pi * 7.3 * t + c + stream))
    return np.ascontiguousarray(x, dtype=np.float32)


def buffer_pts(start_ns, k):
    return start_ns + Gst.util_uint64_scale_int(k * SAMPLES_PER_BUFFER,
                                                Gst.SECOND, RATE)


def read_passphrase():
    value = os.environ.get("SATTN_SRT_PASSPHRASE")
    path = os.environ.get("SATTN_SRT_PASSPHRASE_FILE")
    if value and path:
        die("set SATTN_SRT_PASSPHRASE or SATTN_SRT_PASSPHRASE_FILE, not both")
    if path:
        try:
            st = os.stat(path)
            with open(path, encoding="utf-8") as f:
                value = f.read().rstrip("\r\n")
        except OSError as e:
            die(f"cannot read SATTN_SRT_PASSPHRASE_FILE: {e}")
        if st.st_mode & 0o077:
            print(f"scale-out-node: warning: {path} is readable by others "
                  "(chmod 600 it)", file=sys.stderr)
    if not value:
        die("no passphrase: set SATTN_SRT_PASSPHRASE or "
            "SATTN_SRT_PASSPHRASE_FILE (SRT needs 10 to 79 characters; "
            "use examples/scale-out.sh --transport tcp on trusted links)")
    if not 10 <= len(value.encode()) <= 79:
        die(f"the passphrase has {len(value.encode())} bytes; SRT needs 10 to 79")
    return value


def env_int(name, default, allowed=None):
    s = os.environ.get(name)
    if s is None or s == "":
        return default
    try:
        v = int(s)
    except ValueError:
        die(f"{name}={s!r} is not an integer")
    if allowed is not None and v not in allowed:
        die(f"{name}={v} is not one of {sorted(allowed)}")
    if v < 0:
        die(f"{name}={v} is negative")
    return v


class Srt:
    """SRT settings shared by every element of one process."""

    def __init__(self):
        self.passphrase = read_passphrase()
        self.pbkeylen = env_int("SATTN_SRT_PBKEYLEN", 32, {16, 24, 32})
        self.latency = env_int("SATTN_SRT_LATENCY", 200)
        self.idle = env_int("SATTN_SRT_IDLE_MS", 2000)
        self.sndbuf = env_int("SATTN_SRT_SNDBUF", 0)

    def uri(self, addr, mode):
        host, port = split_addr(addr)
        sndbuf = f"&sndbuf={self.sndbuf}" if self.sndbuf else ""
        return (f"srt://{host}:{port}?mode={mode}&tlpktdrop=0"
                f"&peeridletimeo={self.idle}&conntimeo=1000{sndbuf}")

    def configure(self, element, addr, mode):
        # The uri first: setting it resets the other SRT parameters.
        element.set_property("uri", self.uri(addr, mode))
        element.set_property("latency", self.latency)
        Gst.util_set_object_arg(element, "pbkeylen", str(self.pbkeylen))
        element.set_property("passphrase", self.passphrase)


def split_addr(addr):
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        die(f"{addr!r} is not HOST:PORT")
    return host, int(port)


def addr_list(s):
    out = [a for a in s.split(",") if a]
    for a in out:
        split_addr(a)
    return out


class Node:
    """A pipeline, its bus and its exit status."""

    def __init__(self, desc, name):
        self.name = name
        try:
            self.pipeline = Gst.parse_launch(desc)
        except GLib.Error as e:
            die(f"{name}: {e.message}")
        self.loop = GLib.MainLoop()
        self.status = 0
        self.on_eos = None
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message", self._message)
        for sig in (signal.SIGTERM, signal.SIGINT):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, self._stop)

    def el(self, name):
        return self.pipeline.get_by_name(name)

    def log(self, msg):
        print(f"{self.name} [{time.monotonic():.3f}]: {msg}", flush=True)

    def _stop(self):
        self.log("stopped by signal")
        self.loop.quit()
        return GLib.SOURCE_CONTINUE

    def _message(self, _bus, msg):
        t = msg.type
        if t == Gst.MessageType.ERROR:
            err, dbg = msg.parse_error()
            self.log(f"error from {msg.src.get_name()}: {err.message}")
            self.status = 1
            self.loop.quit()
        elif t == Gst.MessageType.WARNING:
            err, _dbg = msg.parse_warning()
            self.log(f"warning from {msg.src.get_name()}: {err.message}")
        elif t == Gst.MessageType.EOS:
            if self.on_eos:
                self.on_eos()
            else:
                self.loop.quit()

    def run(self, before_stop=None):
        if self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            msg = self.pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
            why = ""
            if msg is not None:
                err, dbg = msg.parse_error()
                why = f": {msg.src.get_name()}: {err.message} ({dbg})"
            self.log(f"cannot start the pipeline{why}")
            self.status = 1
            return
        self.loop.run()
        if before_stop:
            before_stop()
        self.pipeline.set_state(Gst.State.NULL)

    def linger_then_quit(self, sinks, seconds):
        """After EOS: SRT closes without flushing, so stay until every
        caller of these listener sinks has gone (it closes when it has
        the end marker), at most `seconds`."""
        deadline = time.monotonic() + seconds

        def poll():
            live = 0
            for s in sinks:
                st = s.get_property("stats")
                cs = st.get_value("callers") if st.has_field("callers") else None
                live += len(cs) if cs else 0
            if live == 0 or time.monotonic() > deadline:
                self.loop.quit()
                return GLib.SOURCE_REMOVE
            return GLib.SOURCE_CONTINUE

        GLib.timeout_add(50, poll)


def send_end_marker(gdppay):
    """GDP does not carry EOS (gdppay keeps it): send an event that it
    does carry just before EOS, so the receiver knows the stream ended (a
    closed SRT connection only means the peer went away).  The marker is
    a SEGMENT_DONE (a live stream has no other use for it; GDP's 16-bit
    event type field cannot carry custom events)."""
    pad = gdppay.get_static_pad("sink")

    def probe(_pad, info):
        ev = info.get_event()
        if ev.type == Gst.EventType.EOS:
            pad.send_event(Gst.Event.new_segment_done(Gst.Format.TIME, 0))
        return Gst.PadProbeReturn.OK

    pad.add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, probe)


def eos_on_end_marker(gdpdepay):
    pad = gdpdepay.get_static_pad("src")

    def probe(_pad, info):
        ev = info.get_event()
        if ev.type == Gst.EventType.SEGMENT_DONE:
            pad.push_event(Gst.Event.new_eos())
            return Gst.PadProbeReturn.DROP
        return Gst.PadProbeReturn.OK

    pad.add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, probe)


def discont_after_reconnect(gdpdepay):
    """A new connection brings the stream headers again (stream-start,
    caps, segment): flag the first buffer after them DISCONT, so sattn
    restarts its window there and the collector sees where rows are
    missing (frames sent into a connection that broke are lost)."""
    pad = gdpdepay.get_static_pad("src")
    state = {"starts": 0, "mark": False, "pushing": False}

    def probe(_pad, info):
        if info.type & Gst.PadProbeType.EVENT_DOWNSTREAM:
            if info.get_event().type == Gst.EventType.STREAM_START:
                state["starts"] += 1
                state["mark"] = state["starts"] > 1
            return Gst.PadProbeReturn.OK
        if not state["mark"] or state["pushing"]:
            return Gst.PadProbeReturn.OK
        state["mark"] = False
        buf = info.get_buffer().copy()
        buf.set_flags(Gst.BufferFlags.DISCONT)
        state["pushing"] = True
        ret = pad.push(buf)
        state["pushing"] = False
        return Gst.PadProbeReturn.DROP if ret == Gst.FlowReturn.OK else Gst.PadProbeReturn.OK

    pad.add_probe(Gst.PadProbeType.BUFFER | Gst.PadProbeType.EVENT_DOWNSTREAM, probe)


def run_sensor(a):
    srt = Srt()
    node = Node(f"appsrc name=src format=time is-live=true caps={CAPS} "
                "! gdppay name=pay ! srtsink name=sink sync=false async=false "
                "wait-for-connection=true", "sensor")
    sink = node.el("sink")
    srt.configure(sink, a.listen, "listener")
    src = node.el("src")
    send_end_marker(node.el("pay"))
    pushed = [0]
    connected = threading.Event()

    def added(_sink, _id, addr):
        node.log(f"worker connected from {addr.get_address().to_string()}, "
                 f"{pushed[0]} buffers pushed")
        # Live from here on: frames go to whoever is connected, and with
        # no worker they are dropped, never held back.
        sink.set_property("wait-for-connection", False)
        connected.set()

    sink.connect("caller-added", added)
    sink.connect("caller-removed",
                 lambda *_: node.log(f"worker gone, {pushed[0]} buffers pushed"))

    push_log = open(a.push_log, "w") if a.push_log else None

    def feed():
        # This synthetic sensor starts when its first worker connects (so
        # nothing waits in a backlog); a real one captures regardless.
        connected.wait()
        t0 = time.monotonic()
        period = SAMPLES_PER_BUFFER / RATE / a.speed if a.speed > 0 else 0
        for k in range(a.buffers):
            if period:
                delay = t0 + k * period - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            data = signal_block(k * SAMPLES_PER_BUFFER, SAMPLES_PER_BUFFER,
                                a.stream)
            buf = Gst.Buffer.new_wrapped(data.tobytes())
            buf.pts = buffer_pts(a.start_ns, k)
            buf.duration = buffer_pts(a.start_ns, k + 1) - buf.pts
            if push_log:
                push_log.write(f"{k} {time.monotonic_ns()}\n")
                push_log.flush()
            if src.emit("push-buffer", buf) != Gst.FlowReturn.OK:
                return
            pushed[0] = k + 1
        src.emit("end-of-stream")

    node.on_eos = lambda: node.linger_then_quit([sink], a.linger)
    threading.Thread(target=feed, daemon=True).start()
    node.run()
    node.log(f"{pushed[0]} buffers pushed")
    return node.status


def run_worker(a):
    srt = Srt()
    sensors, listens = addr_list(a.sensors), addr_list(a.listen)
    if len(sensors) != len(listens):
        die("worker: one --listen address per --sensors address")
    # Bounded in buffers, not time: queue's time level counts from the
    # segment start, so a stream whose first timestamp is far from it
    # (a sensor that has run for a while) would leak at once.
    q = (f"queue leaky=downstream max-size-buffers={a.queue_buffers} "
         "max-size-bytes=0 max-size-time=0")
    desc = " ".join(
        f"srtsrc name=in{i} ! gdpdepay name=depay{i} ! {q} name=qin{i} ! sattn name=sattn{i} "
        f"{a.sattn} ! {q} name=qout{i} ! gdppay name=pay{i} ! srtsink name=out{i} "
        f"sync=false async=false wait-for-connection=true"
        for i in range(len(sensors)))
    node = Node(desc, "worker")
    counts = [[0, 0] for _ in sensors]
    sinks = []
    for i, (s_addr, l_addr) in enumerate(zip(sensors, listens)):
        srt.configure(node.el(f"in{i}"), s_addr, "caller")
        eos_on_end_marker(node.el(f"depay{i}"))
        discont_after_reconnect(node.el(f"depay{i}"))
        send_end_marker(node.el(f"pay{i}"))
        out = node.el(f"out{i}")
        srt.configure(out, l_addr, "listener")
        sinks.append(out)

        def count(_pad, info, slot):
            slot[0] += 1
            slot[1] += info.get_buffer().get_size() // 4
            return Gst.PadProbeReturn.OK

        node.el(f"sattn{i}").get_static_pad("sink").add_probe(
            Gst.PadProbeType.BUFFER, count, counts[i])

    def report():
        fs = int(dict(kv.split("=") for kv in a.sattn.split()).get("frame-size", 1))
        for i, (nb, ns) in enumerate(counts):
            node.log(f"stream {i}: sattn took {nb} buffers, "
                     f"{ns // (CHANNELS * fs)} frames")
        # sattn's model cache (elements with the same weights share one
        # model): its counters, through the query every sattn answers.
        q = Gst.Query.new_custom(Gst.QueryType.CUSTOM,
                                 Gst.Structure.new_empty("GstSattnModelCache"))
        if node.el("sattn0").query(q):
            st = q.get_structure()
            node.log(f"model cache: models {st.get_value('models')}, "
                     f"users {st.get_value('users')}, builds {st.get_value('builds')}")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        node.log(f"max RSS {rss} KiB")

    node.log("started")
    node.on_eos = lambda: node.linger_then_quit(sinks, a.linger)
    node.run(report)
    return node.status


def run_collector(a):
    srt = Srt()
    workers = addr_list(a.workers)
    desc = " ".join(f"srtsrc name=in{i} ! gdpdepay name=depay{i} ! appsink name=sink{i} "
                    "sync=false emit-signals=true"
                    for i in range(len(workers)))
    node = Node(desc, "collector")
    for i, w in enumerate(workers):
        srt.configure(node.el(f"in{i}"), w, "caller")
        eos_on_end_marker(node.el(f"depay{i}"))
        discont_after_reconnect(node.el(f"depay{i}"))
        suffix = f"-{i}" if len(workers) > 1 else ""
        attach_writer(node.el(f"sink{i}"), a.out + suffix)
    node.run()
    return node.status


def attach_writer(sink, prefix):
    rows_f = open(prefix + ".f32", "wb")
    ts_f = open(prefix + ".ts", "w")
    def new_sample(s):
        sample = s.emit("pull-sample")
        buf = sample.get_buffer()
        ok, m = buf.map(Gst.MapFlags.READ)
        data = bytes(m.data)
        buf.unmap(m)
        d = sample.get_caps().get_structure(0).get_value("channels")
        rows = len(data) // (4 * d)
        rows_f.write(data)
        ts_f.write(f"{buf.pts} {buf.duration} {rows} {d} "
                   f"{1 if buf.has_flags(Gst.BufferFlags.DISCONT) else 0} "
                   f"{time.monotonic_ns()}\n")
        rows_f.flush()
        ts_f.flush()
        return Gst.FlowReturn.OK

    sink.connect("new-sample", new_sample)


def run_local(a):
    node = Node(f"appsrc name=src format=time caps={CAPS} ! sattn {a.sattn} "
                "! appsink name=sink sync=false emit-signals=true", "local")
    attach_writer(node.el("sink"), a.out)
    src = node.el("src")

    def feed():
        for k in range(a.from_buffer, a.buffers):
            data = signal_block(k * SAMPLES_PER_BUFFER, SAMPLES_PER_BUFFER,
                                a.stream)
            buf = Gst.Buffer.new_wrapped(data.tobytes())
            buf.pts = buffer_pts(a.start_ns, k)
            buf.duration = buffer_pts(a.start_ns, k + 1) - buf.pts
            if src.emit("push-buffer", buf) != Gst.FlowReturn.OK:
                return
        src.emit("end-of-stream")

    threading.Thread(target=feed, daemon=True).start()
    node.run()
    return node.status


def main():
    Gst.init(None)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("sensor")
    s.add_argument("--listen", required=True)
    s.add_argument("--buffers", type=int, default=200)
    s.add_argument("--start-ns", type=int, default=0)
    s.add_argument("--stream", type=int, default=0, help="which signal")
    s.add_argument("--speed", type=float, default=1.0,
                   help="x real time (0 = as fast as possible)")
    s.add_argument("--linger", type=float, default=10.0)
    s.add_argument("--push-log", help="write 'buffer monotonic-ns' per buffer")
    w = sub.add_parser("worker")
    w.add_argument("--sensors", required=True)
    w.add_argument("--listen", required=True)
    w.add_argument("--sattn", default=SATTN_DEFAULT)
    w.add_argument("--queue-buffers", type=int, default=256)
    w.add_argument("--linger", type=float, default=10.0)
    c = sub.add_parser("collector")
    c.add_argument("--workers", required=True)
    c.add_argument("--out", required=True)
    loc = sub.add_parser("local")
    loc.add_argument("--out", required=True)
    loc.add_argument("--buffers", type=int, default=200)
    loc.add_argument("--start-ns", type=int, default=0)
    loc.add_argument("--from-buffer", type=int, default=0)
    loc.add_argument("--stream", type=int, default=0)
    loc.add_argument("--sattn", default=SATTN_DEFAULT)
    a = p.parse_args()
    return {"sensor": run_sensor, "worker": run_worker,
            "collector": run_collector, "local": run_local}[a.role](a)


if __name__ == "__main__":
    sys.exit(main())
