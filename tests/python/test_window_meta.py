#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The window metadata read from Python (PyGObject), as an application
reads it: `appsrc ! sattn meta-structure=true ! ... ! appsink`, then
buf.get_custom_meta("GstSattnWindowMeta").get_structure() on every
buffer.  Every field of every row is checked against what this file
works out on its own from the frames pushed (which are GAP, which hold a
NaN sample), the window schedule (a window every hop frames, the rest at
the drain) and the segment (running time = PTS here): which input frames
a row accounts for, the window's span in running time, its valid and
masked key positions, and whether the row is valid.  The rows of all
buffers must account for every input frame once, in order, and each
buffer's PTS is its first row's frame.

Covered: output=frames and output=mean as audio/x-raw (many rows per
buffer), output=mean as other/tensors (the element splits its buffers
into one row each: the metadata follows through the copy), the metadata
through audiobuffersplit (exact or absent: a buffer that holds rows of
two of the element's buffers carries none, the others exactly their
rows), the default (meta-structure=false: no custom meta), and docs/element.md's
snippet in "## Window metadata", run as written: it prints one dict per
row, checked against the same expectation.

Exit 77 (skip) without PyGObject's GStreamer bindings.
"""
import ast
import os
import re
import subprocess
import sys
import unittest

try:
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst
except (ImportError, ValueError):
    print("PyGObject with Gst 1.0 not available: skipped")
    sys.exit(77)

import numpy as np

NAME = "GstSattnWindowMeta"
RATE = 1000
CHANNELS = 2
CHUNK = 7              # frames per pushed buffer
NS = 1_000_000_000
PULL_TIMEOUT = 10 * Gst.SECOND


def frame_ns(f):
    """PTS (= running time, the segment starts at 0) of frame f."""
    return max(f, 0) * NS // RATE


def stream(T, gap, nan_at):
    """T frames of a test signal; frames [gap[0], gap[1]) are pushed as
    GAP buffers, frame nan_at holds a NaN.  Returns (x, usable)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, size=(T, CHANNELS)).astype(np.float32)
    usable = np.ones(T, dtype=bool)
    usable[gap[0]:gap[1]] = False
    x[gap[0]:gap[1]] = 0
    x[nan_at, 1] = np.nan
    usable[nan_at] = False
    return x, usable


def expected_rows(T, usable, window, hop, output):
    """The metadata rows this file expects, one dict per output row, in
    stream order.  A window ends every hop frames (frame counts since the
    start) and at the drain; it covers the window key positions before
    its end, those before the start counted as masked."""
    ends = list(range(hop, T + 1, hop))
    if not ends or ends[-1] != T:
        ends.append(T)

    def window_fields(end):
        keys = range(end - window, end)
        masked = sum(1 for p in keys if p < 0 or not usable[p])
        return {"valid-keys": window - masked, "masked-keys": masked,
                "fully-masked-rows": 0,
                "window-start": frame_ns(end - window),
                "window-end": frame_ns(end)}

    rows = []
    prev = 0
    for end in ends:
        w = window_fields(end)
        if output == "frames":
            # one row per new frame, valid when its own frame is usable
            for f in range(prev, end):
                rows.append(dict(w, **{"first-frame": f, "n-frames": 1,
                                       "valid": bool(usable[f])}))
        else:
            # mean: one pooled row per window, valid when any key is
            rows.append(dict(w, **{"first-frame": prev, "n-frames": end - prev,
                                   "valid": w["valid-keys"] > 0}))
        prev = end
    return rows


def run(x, gap, launch_tail, props, chunk=CHUNK):
    """Push x through appsrc ! sattn <props> ! <launch_tail> ! appsink in
    buffers of chunk frames; return the output buffers (Gst.Buffer, in
    order)."""
    pipe = Gst.parse_launch(
        "appsrc name=src format=time caps=audio/x-raw,format=F32LE,"
        "layout=interleaved,channels=%d,rate=%d ! sattn %s ! %s "
        "appsink name=out sync=false" % (CHANNELS, RATE, props, launch_tail))
    src = pipe.get_by_name("src")
    sink = pipe.get_by_name("out")
    bus = pipe.get_bus()
    pipe.set_state(Gst.State.PLAYING)
    for f in range(0, len(x), chunk):
        part = x[f:f + chunk]
        buf = Gst.Buffer.new_wrapped(part.tobytes())
        buf.pts = frame_ns(f)
        buf.duration = frame_ns(f + len(part)) - buf.pts
        if gap[0] <= f < gap[1]:
            buf.set_flags(Gst.BufferFlags.GAP)
        assert src.emit("push-buffer", buf) == Gst.FlowReturn.OK
    src.emit("end-of-stream")
    bufs = []
    while True:
        sample = sink.emit("try-pull-sample", PULL_TIMEOUT)
        if sample is None:
            break
        bufs.append(sample.get_buffer())
    err = bus.pop_filtered(Gst.MessageType.ERROR)
    eos = sink.get_property("eos")
    pipe.set_state(Gst.State.NULL)
    if err is not None:
        raise AssertionError("pipeline error: %s" % (err.parse_error(),))
    assert eos, "HANG: no EOS within %d s of the last buffer" % (
        PULL_TIMEOUT // Gst.SECOND)
    return bufs


def meta_rows(s):
    """The rows of a metadata structure, one dict per row."""
    n = s["n-rows"]
    fields = ["first-frame", "n-frames", "valid-keys", "masked-keys",
              "fully-masked-rows", "valid", "window-start", "window-end"]
    arrays = {k: list(s[k]) for k in fields}
    for k in fields:
        assert len(arrays[k]) == n, (k, len(arrays[k]), n)
    return [{k: arrays[k][i] for k in fields} for i in range(n)]


class WindowMeta(unittest.TestCase):
    T = 200
    GAP = (70, 70 + CHUNK * 6)
    NAN_AT = 150

    def check(self, output, window, hop, tail="", row_floats=CHANNELS,
              one_row=False):
        x, usable = stream(self.T, self.GAP, self.NAN_AT)
        bufs = run(x, self.GAP, tail, "window=%d hop=%d output=%s "
                   "meta-structure=true" % (window, hop, output))
        want = expected_rows(self.T, usable, window, hop, output)
        got = []
        self.assertGreater(len(bufs), 1)
        for b in bufs:
            cm = b.get_custom_meta(NAME)
            self.assertIsNotNone(cm, "a buffer without the window metadata")
            s = cm.get_structure()
            self.assertEqual(s.get_name(), NAME)
            self.assertEqual(s["version"], 2)
            # no model with a contract here: every row in it, no figures
            self.assertEqual(list(s["in-contract"]), [True] * s["n-rows"])
            self.assertTrue(all(v != v for v in s["input-rms"]))
            self.assertEqual(s["window"], window)
            self.assertEqual(s["row-bytes"], row_floats * 4)
            self.assertEqual(s["n-rows"] * s["row-bytes"], b.get_size())
            if one_row:
                self.assertEqual(s["n-rows"], 1)
            rows = meta_rows(s)
            # the buffer starts at its first row's first frame
            self.assertEqual(b.pts, frame_ns(rows[0]["first-frame"]))
            got += rows
        self.assertEqual(len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(g, w, "row %d" % i)
        # the stream's rows account for every frame once, in order
        self.assertEqual(sum(r["n-frames"] for r in got), self.T)
        self.assertGreater(sum(r["masked-keys"] for r in got), 0)
        self.assertIn(False, [r["valid"] for r in got])
        return bufs

    def test_frames(self):
        self.check("frames", 16, 5)

    def test_mean(self):
        self.check("mean", 12, 4)

    def test_mean_tensors(self):
        # other/tensors: one row per buffer, cut out of the element's
        # buffers by a region copy that the metadata follows
        self.check("mean", 12, 4, tail="other/tensors !", one_row=True)

    def test_audiobuffersplit(self):
        # 3 rows per buffer out of the element's buffers of 7 rows (28
        # input frames, output=mean, hop 4: 250 rows/s): exact or absent
        if Gst.ElementFactory.find("audiobuffersplit") is None:
            self.skipTest("audiobuffersplit (gstreamer1.0-plugins-bad) "
                          "not installed")
        window, hop = 8, 4
        gap = (56, 112)
        x, usable = stream(self.T, gap, self.NAN_AT)
        want = expected_rows(self.T, usable, window, hop, "mean")
        bufs = run(x, gap, "audiobuffersplit "
                   "output-buffer-duration=3/250 !",
                   "window=%d hop=%d output=mean meta-structure=true" % (
                       window, hop), chunk=28)
        kept = dropped = 0
        for b in bufs:
            cm = b.get_custom_meta(NAME)
            if cm is None:
                dropped += 1
                continue
            kept += 1
            s = cm.get_structure()
            self.assertEqual(s["n-rows"] * s["row-bytes"], b.get_size())
            first = b.pts * RATE // NS // hop   # the buffer's first row
            self.assertEqual(meta_rows(s),
                             want[first:first + s["n-rows"]])
        print("audiobuffersplit 3/250: %d buffers with the metadata, %d "
              "without" % (kept, dropped))
        self.assertGreater(kept, 0)
        self.assertGreater(dropped, 0)

    def test_default_off(self):
        x, _ = stream(40, (0, 0), 3)
        bufs = run(x, (0, 0), "", "window=8 hop=4")
        self.assertGreater(len(bufs), 0)
        for b in bufs:
            self.assertIsNone(b.get_custom_meta(NAME))

    def test_docs_snippet(self):
        root = os.environ.get("SATTN_SOURCE_ROOT", os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", ".."))
        with open(os.path.join(root, "docs", "element.md"),
                  encoding="utf-8") as f:
            text = f.read()
        head = text.find("\n## Window metadata\n")
        self.assertGreaterEqual(head, 0,
                                "docs/element.md has no '## Window metadata'")
        end = text.find("\n## ", head + 1)
        m = re.compile(r"```python\n(.*?)```", re.S).search(text, head, end)
        self.assertIsNotNone(m, "no ```python block in '## Window metadata'")
        code = m.group(1)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                           text=True, timeout=60)
        print(code)
        print(r.stdout, r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [ast.literal_eval(line) for line in r.stdout.splitlines()]
        # its pipeline: 2 buffers of 8 frames at 1000 Hz, all usable
        geo = re.search(r"num-buffers=(\d+) samplesperbuffer=(\d+)", code)
        win = re.search(r"window=(\d+) hop=(\d+) output=mean", code)
        self.assertIsNotNone(geo)
        self.assertIsNotNone(win)
        T = int(geo.group(1)) * int(geo.group(2))
        want = expected_rows(T, np.ones(T, dtype=bool), int(win.group(1)),
                             int(win.group(2)), "mean")
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertEqual(g, {k: w[k] for k in g})
            self.assertEqual(len(g), 7)


if __name__ == "__main__":
    Gst.init(None)
    unittest.main(verbosity=2)
