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

Sensors name themselves (--id, default srt-PORT): a worker calls with
SRT's streamid "#!::r=SENSOR,u=WORKER,s=EPOCH", the sensor refuses a
stream id that does not name it (or an epoch below the highest it has
accepted), and names itself in the stream (a tag event that gdppay's
stream headers repeat to every caller), which the worker checks.

A worker runs one pipeline per sensor: an error in one (bad GDP, caps
it cannot take, a stream that names another sensor) restarts that one
alone, with backoff; a sensor that keeps failing is cut off (see Branch).
With --mqtt (examples/sattn_mqtt.py) it publishes decisions and health
and shares its sensors with standby workers through the broker.

Usage (HOST:PORT lists are comma-separated, one per stream):
  scale-out-node.py sensor --listen HOST:PORT [--id ID] [--buffers N] [--start-ns T]
  scale-out-node.py worker --sensors [ID=]HOST:PORT,... [--listen HOST:PORT,...]
                           [--id WORKER] [--mqtt mqtts://HOST:PORT]
                           [--sattn "frame-size=16 window=32 hop=8 heads=4"]
  scale-out-node.py collector --workers HOST:PORT,... --out PREFIX
  scale-out-node.py local --out PREFIX [--buffers N] [--start-ns T]
                          [--from-buffer B]  (sattn on this machine, no network)
The collector and `local` write PREFIX[-i].f32 (rows) and PREFIX[-i].ts
(one line per buffer: pts duration rows flags).
"""

import argparse
import collections
import os
import re
import resource
import signal
import sys
import threading
import time

import numpy as np
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gio, GLib, Gst  # noqa: E402,F401 (Gio: socket addresses)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sattn_mqtt  # noqa: E402 (examples/sattn_mqtt.py, beside this file)

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
        # A listener's buffers for each handshake (libsrt allocates them
        # before it checks the passphrase): the flight window in packets
        # (SRT's default 25600 makes its loss lists ~160 KB a handshake)
        # and the receive buffer in bytes (default ~12 MB).
        self.fc = env_int("SATTN_SRT_FC", 1024)
        self.rcvbuf = env_int("SATTN_SRT_RCVBUF", 1024 * 1456)
        self.handshakes = env_int("SATTN_SRT_HANDSHAKES", 10)

    def uri(self, addr, mode):
        host, port = split_addr(addr)
        sndbuf = f"&sndbuf={self.sndbuf}" if self.sndbuf else ""
        bufs = f"&fc={self.fc}&rcvbuf={self.rcvbuf}" if mode == "listener" else ""
        return (f"srt://{host}:{port}?mode={mode}&tlpktdrop=0"
                f"&peeridletimeo={self.idle}&conntimeo=1000{sndbuf}{bufs}")

    def configure(self, element, addr, mode, streamid=None):
        # The uri first: setting it resets the other SRT parameters.
        element.set_property("uri", self.uri(addr, mode))
        element.set_property("latency", self.latency)
        Gst.util_set_object_arg(element, "pbkeylen", str(self.pbkeylen))
        element.set_property("passphrase", self.passphrase)
        if streamid is not None:
            element.set_property("streamid", streamid)

    @staticmethod
    def admit(element, admission):
        """A listener asks `admission` about every handshake (srtsink
        emits caller-connecting only with authentication=true)."""
        element.set_property("authentication", True)
        element.connect("caller-connecting", admission)


_libc = None


def trim_memory():
    """Give the heap's free pages back to the system (glibc malloc_trim),
    after refused handshakes have come and gone."""
    if _libc is not None:
        _libc.malloc_trim(0)


def return_freed_memory():
    """glibc keeps freed blocks of up to 32 MB in the heap once its mmap
    threshold has adapted, so a burst of handshakes would never give its
    memory back: blocks of 64 KB and more are mmapped (and unmapped when
    freed) from here on (mallopt M_MMAP_THRESHOLD, as the
    MALLOC_MMAP_THRESHOLD_ variable does)."""
    global _libc
    try:
        import ctypes
        _libc = ctypes.CDLL("libc.so.6")
        _libc.mallopt(-3, 64 * 1024)
    except (OSError, AttributeError):
        _libc = None


def parse_streamid(sid):
    """SRT's access-control syntax: '#!::r=SENSOR,u=WORKER,s=EPOCH'."""
    out = {}
    if sid and sid.startswith("#!::"):
        for kv in sid[4:].split(","):
            k, _, v = kv.partition("=")
            out[k] = v
    return out


def make_streamid(sensor, worker, epoch):
    return f"#!::r={sensor},u={worker},s={epoch}"


class Admission:
    """Who may start an SRT handshake with a listener.  srtsink's
    `caller-connecting` runs in libsrt's accept hook, before libsrt
    allocates the connection (its buffers, then the passphrase check), so
    a refusal here costs nothing.  Refused: a stream id that does not
    name this listener's resource, an epoch below the highest accepted
    (a worker that lost the sensor to a standby), and any handshake beyond
    SATTN_SRT_HANDSHAKES a second (a token bucket, burst of the same
    size): what refused callers can make libsrt hold is bounded by that
    rate, not by how many of them there are."""

    def __init__(self, node, resource=None, rate=10):
        self.node = node
        self.resource = resource
        self.rate = float(rate)
        self.tokens = float(rate)
        self.t = time.monotonic()
        self.epoch = -1
        self.refused = {}
        self.accepted = 0
        self.last_log = 0.0
        self.lock = threading.Lock()
        self.trim_due = False
        GLib.timeout_add(1000, self._trim)

    def _trim(self):
        """Handshakes refused in the last second: once libsrt has freed
        what they held (a closed socket lives about a second), trim."""
        if self.trim_due:
            self.trim_due = False
            GLib.timeout_add(1500, lambda: (trim_memory(), GLib.SOURCE_REMOVE)[1])
        return GLib.SOURCE_CONTINUE

    def __call__(self, _element, addr, streamid):
        who = addr.get_address().to_string() if addr is not None else "?"
        ok, why = self.decide(streamid)
        self.trim_due = True
        if not ok:
            with self.lock:
                self.refused[why] = self.refused.get(why, 0) + 1
                now = time.monotonic()
                if now - self.last_log >= 1.0:
                    self.last_log = now
                    self.node.log(f"refused a caller from {who}: {why} (refused so far: "
                                  + ", ".join(f"{k}: {v}" for k, v in self.refused.items())
                                  + ")")
        return ok

    def decide(self, streamid):
        sid = parse_streamid(streamid)
        with self.lock:
            if self.resource is not None and sid.get("r") != self.resource:
                return False, (f"stream id {streamid!r} does not name sensor "
                               f"{self.resource!r}")
            try:
                epoch = int(sid.get("s", "0") or 0)
            except ValueError:
                return False, f"stream id {streamid!r}: epoch is not a number"
            if epoch < self.epoch:
                return False, (f"epoch {epoch} of worker {sid.get('u')!r} is below "
                               f"{self.epoch}, the highest accepted (it lost the sensor)")
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.t) * self.rate)
            self.t = now
            if self.tokens < 1.0:
                return False, "handshake rate limit"
            self.tokens -= 1.0
            self.epoch = max(self.epoch, epoch)
            self.accepted += 1
            return True, None


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
        self.loop = GLib.MainLoop()
        self.status = 0
        self.on_eos = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, self._stop)
        if desc is None:          # a worker: one pipeline per stream
            return
        try:
            self.pipeline = Gst.parse_launch(desc)
        except GLib.Error as e:
            die(f"{name}: {e.message}")
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message", self._message)

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


def add_probe(pad, mask, cb, probes=None):
    """pad.add_probe, recorded in `probes` (a list) when given: a pipeline
    that is torn down and rebuilt (a worker's branch) removes its probes,
    whose Python closures would otherwise keep it alive (a reference
    cycle through C that Python's collector cannot see)."""
    pid = pad.add_probe(mask, cb)
    if probes is not None:
        probes.append((pad, pid))
    return pid


def send_end_marker(gdppay, probes=None):
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

    add_probe(pad, Gst.PadProbeType.EVENT_DOWNSTREAM, probe, probes)


def eos_on_end_marker(gdpdepay, probes=None):
    pad = gdpdepay.get_static_pad("src")

    def probe(_pad, info):
        ev = info.get_event()
        if ev.type == Gst.EventType.SEGMENT_DONE:
            pad.push_event(Gst.Event.new_eos())
            return Gst.PadProbeReturn.DROP
        return Gst.PadProbeReturn.OK

    add_probe(pad, Gst.PadProbeType.EVENT_DOWNSTREAM, probe, probes)


def discont_after_reconnect(gdpdepay, probes=None):
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

    add_probe(pad, Gst.PadProbeType.BUFFER | Gst.PadProbeType.EVENT_DOWNSTREAM, probe,
              probes)


def default_id(addr):
    """A sensor's id when none is given: srt-PORT (its listening port,
    which the workers that call it know too)."""
    return f"srt-{split_addr(addr)[1]}"


def run_sensor(a):
    return_freed_memory()
    srt = Srt()
    node = Node(f"appsrc name=src format=time is-live=true caps={CAPS} "
                "! gdppay name=pay ! srtsink name=sink sync=false async=false "
                "wait-for-connection=true", "sensor")
    sink = node.el("sink")
    srt.configure(sink, a.listen, "listener")
    sensor_id = a.id or default_id(a.listen)
    admission = Admission(node, sensor_id, srt.handshakes)
    srt.admit(sink, admission)
    src = node.el("src")
    send_end_marker(node.el("pay"))
    node.log(f"sensor {sensor_id} listening on {a.listen}")
    pushed = [0]
    connected = threading.Event()

    def added(_sink, _id, addr):
        node.log(f"worker connected from {addr.get_address().to_string()} "
                 f"(epoch {admission.epoch}), {pushed[0]} buffers pushed")
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
        # The sensor names itself in the stream, and says which wall-clock
        # time its first timestamp is: a tag event, which GDP carries and
        # gdppay's stream headers repeat to every new caller.
        tags = Gst.TagList.new_empty()
        tags.add_value(Gst.TagMergeMode.APPEND, "extended-comment",
                       f"sattn-sensor={sensor_id}")
        tags.add_value(Gst.TagMergeMode.APPEND, "extended-comment",
                       f"sattn-wallclock={time.time_ns()}@{a.start_ns}")
        src.send_event(Gst.Event.new_tag(tags))
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


class GdpGuard:
    """The GDP framing of what a sensor sends, checked before gdpdepay
    sees it (gdpdepay checks each header's CRC, and trusts the rest):
    - a packet (62-byte header, then the payload its header declares) may
      declare at most SATTN_GDP_MAX_PAYLOAD bytes (default 1 MiB), so a
      sensor cannot make a worker hold 64 MB (or 4 GB) for one buffer;
    - every connection begins with a stream-start event, then caps, then
      a segment before any buffer, and holds only the packet types a
      sensor sends;
    - a caps packet holds fixed audio/x-raw caps (gdpdepay would set any
      caps it is given, unfixed ones with a GLib critical).
    A violation is a stream error in the branch: it restarts alone."""

    HEADER = 62
    BUFFER, CAPS = 1, 2                       # GST_DP_PAYLOAD_BUFFER, _CAPS
    STREAM_START = 64 + int(Gst.EventType.STREAM_START)
    SEGMENT = 64 + int(Gst.EventType.SEGMENT)
    # what a sensor sends: buffers, caps, and these events (SEGMENT_DONE
    # is the end marker)
    ALLOWED = {BUFFER, CAPS, STREAM_START, SEGMENT} | {
        64 + int(e) for e in (Gst.EventType.TAG, Gst.EventType.SEGMENT_DONE,
                              Gst.EventType.GAP)}
    # An event's payload is a serialised GstStructure that gdpdepay parses
    # with gst_structure_from_string, which hits a GLib critical on some
    # malformed names (the fuzzer found one): each event must be what
    # gdppay writes for it, with values of these types only.
    EVENT_PREFIX = {
        STREAM_START: "GstEventStreamStart, ",
        SEGMENT: 'GstEventSegment, segment=(GstSegment)"segment, ',
        64 + int(Gst.EventType.TAG): 'GstTagList-stream, taglist=(taglist)"taglist',
        64 + int(Gst.EventType.SEGMENT_DONE): "GstEventSegmentDone, ",
        64 + int(Gst.EventType.GAP): "GstEventGap, ",
    }
    VALUE_TYPES = {"string", "uint", "int", "int64", "uint64", "guint64", "gint64",
                   "guint", "gint", "double", "gdouble", "boolean", "gboolean",
                   "GstStreamFlags", "GstSegmentFlags", "GstFormat", "GstGapFlags",
                   "GstSegment", "taglist"}
    TYPE_RE = re.compile(r"\\?=\\?\(([^()\\]*)\\?\)")

    def __init__(self, fail, limit):
        self.fail = fail
        self.limit = limit
        self.dead = False
        self.reset()

    def reset(self):
        self.hdr = bytearray()
        self.skip = 0
        self.caps = None
        self.first = True
        self.segment = self.caps_seen = False

    def check_payload(self, ptype, payload):
        """None, or why the caps or event payload is refused."""
        try:
            text = payload.split(b"\0", 1)[0].decode("utf-8")
        except UnicodeDecodeError:
            return "a GDP caps or event packet that is not UTF-8"
        if any(ord(c) < 32 or ord(c) == 127 for c in text):
            return "a GDP caps or event packet with control characters"
        if ptype == self.CAPS:
            caps = Gst.Caps.from_string(text) if text.startswith("audio/x-raw, ") \
                else None
            if caps is None or not caps.is_fixed() or caps.get_size() != 1 or \
                    caps.get_structure(0).get_name() != "audio/x-raw":
                return f"a GDP caps packet holds {text[:80]!r}, not fixed audio/x-raw caps"
            return None
        if not text.startswith(self.EVENT_PREFIX[ptype]):
            return f"a GDP event packet (type {ptype}) holds {text[:60]!r}"
        for t in self.TYPE_RE.findall(text):
            if t not in self.VALUE_TYPES:
                return f"a GDP event packet with a value of type {t[:40]!r}"
        return None

    def _bad(self, why):
        self.dead = True
        self.fail(why)
        return Gst.PadProbeReturn.DROP

    def probe(self, _pad, info):
        buf = info.get_buffer()
        if self.dead:
            return Gst.PadProbeReturn.DROP
        if buf.has_flags(Gst.BufferFlags.DISCONT):
            self.reset()             # a new connection: gdpdepay starts afresh too
        data = buf.extract_dup(0, buf.get_size())
        i, n = 0, len(data)
        while i < n:
            if self.skip:
                take = min(self.skip, n - i)
                if self.caps is not None:
                    self.caps += data[i:i + take]
                self.skip -= take
                i += take
                if self.skip == 0 and self.caps is not None:
                    why = self.check_payload(self.ptype, bytes(self.caps))
                    self.caps = None
                    if why:
                        return self._bad(why)
                continue
            take = min(self.HEADER - len(self.hdr), n - i)
            self.hdr += data[i:i + take]
            i += take
            if len(self.hdr) == self.HEADER:
                size = int.from_bytes(self.hdr[6:10], "big")
                ptype = int.from_bytes(self.hdr[4:6], "big")
                if size > self.limit:
                    return self._bad(f"a GDP packet declares a payload of {size} bytes, "
                                     f"over the bound of {self.limit} "
                                     "(SATTN_GDP_MAX_PAYLOAD)")
                if self.first and ptype != self.STREAM_START:
                    return self._bad("the stream does not begin with stream-start "
                                     f"(GDP packet type {ptype})")
                self.first = False
                if ptype not in self.ALLOWED:
                    return self._bad(f"a GDP packet of type {ptype}, which a sensor "
                                     "does not send")
                if ptype == self.SEGMENT:
                    if not self.caps_seen:
                        return self._bad("a GDP segment before any caps")
                    self.segment = True
                elif ptype == self.BUFFER and not self.segment:
                    return self._bad("a GDP buffer before any segment")
                if ptype == self.CAPS:
                    self.caps_seen = True
                if ptype != self.BUFFER:
                    if size > 65536:
                        return self._bad(f"a GDP caps or event packet of {size} bytes")
                    self.caps = bytearray()       # the payload, checked when whole
                    self.ptype = ptype
                    if size == 0:
                        why = self.check_payload(ptype, b"")
                        self.caps = None
                        if why:
                            return self._bad(why)
                self.skip = size
                self.hdr.clear()
        return Gst.PadProbeReturn.OK


class Branch:
    """One sensor in a worker: a pipeline of its own (srtsrc ! gdpdepay !
    queue ! sattn ! queue ! gdppay ! srtsink, or fakesink without an
    output address), so that an error in it stops it alone.  It restarts
    with backoff (0.25 s, doubling to 8 s; a fresh pipeline, whose first
    row is DISCONT); SATTN_CUTOFF_ERRORS errors (5) within
    SATTN_CUTOFF_WINDOW_S (60) cut the sensor off for SATTN_CUTOFF_S
    (300) seconds, with the reason logged (and published)."""

    def __init__(self, w, i, sensor, addr, listen):
        self.w, self.i, self.sensor, self.addr, self.listen = w, i, sensor, addr, listen
        self.p = None
        self.epoch = 0
        self.buffers = self.frames = 0
        self.restarts = 0
        self.errors = collections.deque()
        self.error_total = 0
        self.cutoffs = 0
        self.state = "idle"        # idle running restarting cut-off ended fenced
        self.timer = None
        self.disconts = collections.deque()
        self.wall = None           # (unix ns, pts) from the sensor's tag
        self.admission = None
        self.prepared = False
        self.probes = []
        self.bus_handler = None

    def log(self, msg):
        self.w.node.log(f"sensor {self.sensor}: {msg}")

    def build(self):
        a, w = self.w.a, self.w
        q = (f"queue leaky=downstream max-size-buffers={a.queue_buffers} "
             "max-size-bytes=0 max-size-time=0")
        out = ("gdppay name=pay ! srtsink name=out sync=false async=false "
               "wait-for-connection=true") if self.listen else \
            "fakesink name=out sync=false async=false"
        desc = (f"srtsrc name=in ! gdpdepay name=depay ! {q} name=qin ! "
                f"sattn name=sattn{self.i} {a.sattn} ! {q} name=qout ! {out}")
        p = Gst.parse_launch(desc)
        self.p = p
        self.probes = []
        el = p.get_by_name
        w.srt.configure(el("in"), self.addr, "caller",
                        make_streamid(self.sensor, w.id, self.epoch))
        guard = GdpGuard(lambda why: self.fail_from_thread(el("in"), why),
                         w.gdp_limit)
        add_probe(el("in").get_static_pad("src"), Gst.PadProbeType.BUFFER, guard.probe,
                  self.probes)
        depay = el("depay")
        eos_on_end_marker(depay, self.probes)
        discont_after_reconnect(depay, self.probes)
        self.name_check(depay)
        if self.listen:
            send_end_marker(el("pay"), self.probes)
            w.srt.configure(el("out"), self.listen, "listener")
            self.admission = Admission(w.node, None, w.srt.handshakes)
            w.srt.admit(el("out"), self.admission)

        first = [True]

        def count(_pad, info):
            buf = info.get_buffer()
            self.buffers += 1
            self.frames += buf.get_size() // (4 * CHANNELS * w.frame_size)
            # a new pipeline's first buffer starts sattn's window as a
            # DISCONT does: its first decision is flagged
            if first[0] or buf.has_flags(Gst.BufferFlags.DISCONT):
                self.disconts.append(buf.pts)
            if first[0]:
                first[0] = False
                self.log(f"first buffer (pts {buf.pts}) in sattn, epoch {self.epoch}")
            return Gst.PadProbeReturn.OK

        add_probe(el(f"sattn{self.i}").get_static_pad("sink"), Gst.PadProbeType.BUFFER,
                  count, self.probes)
        bus = p.get_bus()
        bus.add_signal_watch()
        self.bus_handler = bus.connect("message", self.message)

    def name_check(self, depay):
        """The stream must name this branch's sensor (the sensor's tag)
        before its first buffer, on every connection."""
        pad = depay.get_static_pad("src")
        st = {"named": False, "started": False}

        def probe(_pad, info):
            if info.type & Gst.PadProbeType.EVENT_DOWNSTREAM:
                ev = info.get_event()
                if ev.type == Gst.EventType.STREAM_START:
                    st["named"] = False
                    st["started"] = True
                elif not st["started"]:
                    # a stream that does not start with stream-start (GDP
                    # bytes lost or forged): nothing of it goes on, and if
                    # it ends so, that is its error
                    if ev.type == Gst.EventType.EOS:
                        self.fail_from_thread(depay, "the stream ended before it "
                                              "started (no stream-start)")
                    return Gst.PadProbeReturn.DROP
                elif ev.type == Gst.EventType.TAG:
                    tl = ev.parse_tag()
                    for k in range(tl.get_tag_size("extended-comment")):
                        ok, v = tl.get_string_index("extended-comment", k)
                        key, _, val = (v or "").partition("=")
                        if key == "sattn-sensor":
                            if val != self.sensor:
                                self.fail_from_thread(depay, (
                                    f"the stream names itself {val!r}, not {self.sensor!r}: "
                                    "refused"))
                                return Gst.PadProbeReturn.DROP
                            st["named"] = True
                        elif key == "sattn-wallclock":
                            ns, _, pts = val.partition("@")
                            try:
                                self.wall = (int(ns), int(pts))
                            except ValueError:
                                pass
                return Gst.PadProbeReturn.OK
            if not st["named"]:
                self.fail_from_thread(depay, "the stream did not name its sensor "
                                      "(no sattn-sensor tag): refused")
                return Gst.PadProbeReturn.DROP
            return Gst.PadProbeReturn.OK

        add_probe(pad, Gst.PadProbeType.BUFFER | Gst.PadProbeType.EVENT_DOWNSTREAM, probe,
                  self.probes)

    def fail_from_thread(self, element, why):
        err = GLib.Error.new_literal(Gst.stream_error_quark(), why,
                                     int(Gst.StreamError.DECODE))
        element.post_message(Gst.Message.new_error(element, err, why))

    def prepare(self):
        """A standby's branch: built and in READY (sockets not opened), so
        that a takeover only names its epoch and plays it."""
        if self.p is None and self.state not in ("running", "ending"):
            self.build()
            self.p.set_state(Gst.State.READY)
            self.prepared = True
        return GLib.SOURCE_REMOVE

    def start(self, epoch=None):
        if epoch is not None:
            self.epoch = epoch
        if self.timer:
            GLib.source_remove(self.timer)
            self.timer = None
        if self.prepared and self.p is not None:
            self.p.get_by_name("in").set_property(
                "streamid", make_streamid(self.sensor, self.w.id, self.epoch))
        else:
            self.teardown()
            self.build()
        self.prepared = False
        if self.w.pub is not None:
            self.w.pub.mark(self.sensor)
        self.state = "running"
        self.started = time.monotonic()
        self.log(f"calling {self.addr} (epoch {self.epoch})")
        if self.p.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            self.failed("the pipeline", "cannot start (port in use?)")
        return GLib.SOURCE_REMOVE

    def teardown(self):
        self.prepared = False
        if self.p is not None:
            bus = self.p.get_bus()
            bus.remove_signal_watch()
            if self.bus_handler is not None:
                bus.disconnect(self.bus_handler)
                self.bus_handler = None
            self.p.set_state(Gst.State.NULL)
            for pad, pid in self.probes:
                pad.remove_probe(pid)
            self.probes = []
            self.p = None

    def stop(self, state, why=None):
        if self.timer:
            GLib.source_remove(self.timer)
            self.timer = None
        if why:
            self.log(f"stopped: {why}")
        self.teardown()
        self.state = state
        self.w.check_done()
        return GLib.SOURCE_REMOVE

    def message(self, _bus, msg):
        t = msg.type
        if t == Gst.MessageType.ERROR:
            err, _dbg = msg.parse_error()
            self.failed(msg.src.get_name(), err.message)
        elif t == Gst.MessageType.WARNING:
            err, _dbg = msg.parse_warning()
            self.log(f"warning from {msg.src.get_name()}: {err.message}")
        elif t == Gst.MessageType.EOS:
            self.log("end of stream")
            self.state = "ending"
            self.w.ended(self)
            sinks = [self.p.get_by_name("out")] if self.listen else []
            linger(sinks, self.w.a.linger, lambda: self.stop("ended"))
        elif t == Gst.MessageType.ELEMENT and self.w.pub is not None:
            s = msg.get_structure()
            if s is not None and s.get_name() in ("sattn-class", "sattn", "sattn-health"):
                self.w.publish(self, s)

    def failed(self, where, text):
        if self.state != "running":
            return
        now = time.monotonic()
        self.error_total += 1
        self.errors.append(now)
        while self.errors and now - self.errors[0] > self.w.cut_window:
            self.errors.popleft()
        self.teardown()
        n = len(self.errors)
        if n >= self.w.cut_errors:
            self.state = "cut-off"
            self.cutoffs += 1
            self.errors.clear()
            why = (f"cut off: {n} errors within {self.w.cut_window:.0f} s, the last "
                   f"from {where}: {text}; calling it again in {self.w.cut_s:.0f} s")
            self.log(why)
            self.w.status(self, "cut-off", why=why)
            self.timer = GLib.timeout_add(int(self.w.cut_s * 1000), self._retry)
            return
        delay = min(0.25 * 2 ** (n - 1), 8.0)
        self.state = "restarting"
        self.restarts += 1
        self.log(f"error from {where}: {text}; this stream alone restarts in "
                 f"{delay:.2f} s (error {n} of {self.w.cut_errors} within "
                 f"{self.w.cut_window:.0f} s)")
        self.timer = GLib.timeout_add(int(delay * 1000), self._retry)

    def _retry(self):
        self.timer = None
        if self.state in ("restarting", "cut-off"):
            self.start()
        return GLib.SOURCE_REMOVE

    def wall_of(self, ts):
        if self.wall is None or ts is None:
            return None
        return self.wall[0] + (ts - self.wall[1])


def linger(sinks, seconds, then):
    """After EOS: SRT closes without flushing, so stay until every caller
    of these listener sinks has gone (it closes when it has the end
    marker), at least 1 s (a caller that is reconnecting, or that srtsink
    has not counted yet, still gets the end) and at most `seconds`."""
    t0 = time.monotonic()
    deadline = t0 + seconds

    def poll():
        live = 0
        for s in sinks:
            st = s.get_property("stats")
            cs = st.get_value("callers") if st.has_field("callers") else None
            live += len(cs) if cs else 0
        now = time.monotonic()
        if (live == 0 and now - t0 >= min(1.0, seconds)) or now > deadline:
            then()
            return GLib.SOURCE_REMOVE
        return GLib.SOURCE_CONTINUE

    GLib.timeout_add(50, poll)


class Worker:
    def __init__(self, a):
        self.a = a
        self.srt = Srt()
        self.node = Node(None, "worker")
        self.id = a.id or f"worker-{os.getpid()}"
        sensors = sensor_list(a.sensors)
        listens = addr_list(a.listen) if a.listen else [None] * len(sensors)
        if len(sensors) != len(listens):
            die("worker: one --listen address per --sensors address")
        self.frame_size = int(dict(kv.split("=", 1) for kv in a.sattn.split()
                                   if "=" in kv).get("frame-size", 1))
        self.gdp_limit = env_int("SATTN_GDP_MAX_PAYLOAD", 1 << 20)
        self.cut_errors = env_int("SATTN_CUTOFF_ERRORS", 5)
        self.cut_window = float(env_int("SATTN_CUTOFF_WINDOW_S", 60))
        self.cut_s = float(env_int("SATTN_CUTOFF_S", 300))
        self.branches = [Branch(self, i, sid, addr, l)
                         for i, ((sid, addr), l) in enumerate(zip(sensors, listens))]
        self.by_sensor = {b.sensor: b for b in self.branches}
        if len(self.by_sensor) != len(self.branches):
            die("worker: a sensor id appears twice")
        self.pub = self.coord = self.cache = self.warm = None
        if a.mqtt:
            try:
                cfg = sattn_mqtt.Config(a.mqtt)
                sattn_mqtt.check_id("worker id", self.id)
                self.pub = sattn_mqtt.Publisher(self.id, cfg, self.node.log)
                for b in self.branches:
                    self.pub.add_sensor(b.sensor)
                self.coord = sattn_mqtt.Coordinator(
                    self.pub, self.id, list(self.by_sensor),
                    lambda s, e: GLib.idle_add(self.by_sensor[s].start, e),
                    lambda s, why: GLib.idle_add(self.by_sensor[s].stop, "fenced", why),
                    self.node.log,
                    on_standby=lambda s: GLib.idle_add(self.standby, s))
                self.pub.may_send = self.coord.may_send
            except sattn_mqtt.ConfigError as e:
                die(str(e))

    def standby(self, sensor):
        """Hot standby: the branch built and in READY, and the model loaded
        (a sattn with the same properties kept in PAUSED holds it in
        sattn's model cache, which the takeover's sattn then shares)."""
        if self.warm is None:
            self.warm = Gst.parse_launch(
                f"appsrc caps={CAPS} format=time ! sattn {self.a.sattn} ! "
                "fakesink async=false")
            self.warm.set_state(Gst.State.PAUSED)
        b = self.by_sensor[sensor]
        if b.state in ("idle", "fenced"):
            b.prepare()
        return GLib.SOURCE_REMOVE

    def publish(self, b, s):
        name = s.get_name()
        extra = {"sensor": b.sensor, "worker": self.id, "epoch": b.epoch}
        if name == "sattn-class":
            d = sattn_mqtt.class_json(s)
            ts = d.get("timestamp")
            disc = False
            while b.disconts and ts is not None and ts >= b.disconts[0]:
                b.disconts.popleft()
                disc = True
            d["discont"] = disc
        else:
            d = sattn_mqtt.structure_dict(s)
            ts = d.get("timestamp")
        wall = b.wall_of(ts)
        d.update(extra)
        d["wall-clock"] = sattn_mqtt.wall_iso(wall)
        d["wall-clock-ns"] = wall
        if name == "sattn-class":
            self.pub.decision(b.sensor, d)
        else:
            self.pub.health(b.sensor, d)

    def status(self, b, state, **extra):
        if self.coord is not None:
            self.coord.set_state(b.sensor, state, restarts=b.restarts,
                                 errors=b.error_total, cutoffs=b.cutoffs, **extra)

    def ended(self, b):
        self.status(b, "ended")

    def watch_cache(self):
        """sattn's model cache (elements with the same weights share one
        model): its counters, through the query every sattn answers, kept
        when the most streams use it."""
        for b in self.branches:
            el = b.p.get_by_name(f"sattn{b.i}") if b.p is not None else None
            if el is None:
                continue
            q = Gst.Query.new_custom(Gst.QueryType.CUSTOM,
                                     Gst.Structure.new_empty("GstSattnModelCache"))
            if el.query(q):
                st = q.get_structure()
                snap = (st.get_value("users"), st.get_value("models"),
                        st.get_value("users"), st.get_value("builds"))
                if self.cache is None or snap >= self.cache:
                    self.cache = snap
            break

    def check_done(self):
        def done(b):
            if b.state in ("ended",):
                return True
            if self.coord is not None and self.coord.role.get(b.sensor) in (
                    "ended", "ending") and b.state in ("idle", "fenced", "ended"):
                return True
            return False
        if all(done(b) for b in self.branches):
            self.node.loop.quit()

    def report(self):
        for b in self.branches:
            self.node.log(f"stream {b.i} ({b.sensor}): sattn took {b.buffers} buffers, "
                          f"{b.frames} frames; restarts {b.restarts}, errors "
                          f"{b.error_total}, cut off {b.cutoffs} times, state {b.state}")
        if self.cache:
            self.node.log("model cache: models %d, users %d, builds %d" % self.cache[1:])
        if self.pub is not None:
            self.node.log("mqtt: " + ", ".join(
                f"{b.sensor} published {self.pub.published[b.sensor]} dropped "
                f"{self.pub.dropped[b.sensor]} fenced {self.pub.fenced[b.sensor]}"
                for b in self.branches))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.node.log(f"max RSS {rss} KiB")

    def run(self):
        self.node.log(f"started ({self.id})")
        if self.coord is None:
            for b in self.branches:
                b.start(0)
        else:
            self.pub.start()
            self.coord.start()
        GLib.timeout_add(200, lambda: (self.watch_cache(), self.check_done(),
                                       GLib.SOURCE_CONTINUE)[2])
        self.node.loop.run()
        for b in self.branches:
            if b.state not in ("ended",):
                b.teardown()
        if self.warm is not None:
            self.warm.set_state(Gst.State.NULL)
        if self.coord is not None:
            # What is queued goes out while this worker still holds its
            # sensors (the lease runs on), then they are released.
            self.pub.drain(5.0)
            for b in self.branches:
                if self.coord.role.get(b.sensor) == "serving":
                    self.coord.set_state(b.sensor, "released")
            self.pub.stop({"state": "offline", "worker": self.id, "why": "stopped"})
            self.coord.stop()
        self.report()
        return 0


def sensor_list(s):
    """ID=HOST:PORT,... (ID defaults to srt-PORT)."""
    out = []
    for item in [x for x in s.split(",") if x]:
        sid, eq, addr = item.partition("=")
        if not eq:
            sid, addr = default_id(item), item
        split_addr(addr)
        try:
            sattn_mqtt.check_id("sensor id", sid)
        except sattn_mqtt.ConfigError as e:
            die(str(e))
        out.append((sid, addr))
    return out


def run_worker(a):
    return_freed_memory()
    return Worker(a).run()


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
        st = sample.get_caps().get_structure(0)
        # audio/x-raw: channels values a row; other/tensors (a fractional
        # row rate, output=classes): the tensor's first dimension
        d = st.get_value("channels")
        if d is None:
            d = int(str(st.get_value("dimensions")).split(":")[0].split(",")[0])
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
    s.add_argument("--id", default=os.environ.get("SATTN_SENSOR_ID"),
                   help="the sensor's id (default $SATTN_SENSOR_ID, else srt-PORT)")
    s.add_argument("--buffers", type=int, default=200)
    s.add_argument("--start-ns", type=int, default=0)
    s.add_argument("--stream", type=int, default=0, help="which signal")
    s.add_argument("--speed", type=float, default=1.0,
                   help="x real time (0 = as fast as possible)")
    s.add_argument("--linger", type=float, default=10.0)
    s.add_argument("--push-log", help="write 'buffer monotonic-ns' per buffer")
    w = sub.add_parser("worker")
    w.add_argument("--sensors", required=True, help="[ID=]HOST:PORT,...")
    w.add_argument("--listen", help="HOST:PORT,... (rows out; none: rows stay)")
    w.add_argument("--id", default=os.environ.get("SATTN_WORKER_ID"),
                   help="this worker's id (default $SATTN_WORKER_ID, else worker-PID)")
    w.add_argument("--mqtt", default=os.environ.get("SATTN_MQTT_URL"),
                   help="mqtts://HOST[:PORT] (default $SATTN_MQTT_URL): decisions, "
                   "health, leases (examples/sattn_mqtt.py)")
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
