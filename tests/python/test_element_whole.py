#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Whole models through the element against the Python package, byte for
byte: the same weights file and the same frames (NaN frames, masked under
invalid-frames=mask), through `filesrc ! rawaudioparse ! sattn ... !
filesink` and through sattn.Stream, for every output mode a whole model
has (classes, mean, last, window), several positions and poolings, and
hops that do and do not divide the stream.  Both go through the one loader
(sattn_model_load) and the per-window executor, so every byte must agree;
a frame count (the element's rows against the stream's) is checked too.

Exit 77 (skip) without PyTorch or gst-launch-1.0.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

try:
    import torch
    from sattn.nn import SignalTransformer, save_safetensors
except ImportError:
    print("PyTorch not available: skipped")
    sys.exit(77)

import sattn
from common import run_bounded

GST_LAUNCH = shutil.which("gst-launch-1.0")
if GST_LAUNCH is None:
    print("gst-launch-1.0 not available: skipped")
    sys.exit(77)

RATE = 1000
CHANNELS = 2
FRAME = 4              # frame-size: 8 values per frame (2 channels x 4)


def run_element(weights, frames, window, hop, output, heads=None):
    """The element's output bytes for frames (n × channels*frame floats)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.f32")
        dst = os.path.join(d, "out.f32")
        # interleaved samples: frame i = FRAME sample periods of CHANNELS
        frames.astype("<f4").tofile(src)
        props = ["weights=%s" % weights, "window=%d" % window,
                 "hop=%d" % hop, "output=%s" % output,
                 "frame-size=%d" % FRAME, "invalid-frames=mask"]
        if heads:
            props.append("heads=%d" % heads)
        cmd = [GST_LAUNCH, "-q", "filesrc", "location=" + src, "!",
               "rawaudioparse", "format=pcm", "pcm-format=f32le",
               "num-channels=%d" % CHANNELS, "sample-rate=%d" % RATE, "!",
               "sattn"] + props + ["!", "other/tensors", "!", "filesink",
                                   "location=" + dst]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError("gst-launch failed: %s\n%s" % (
                " ".join(cmd), r.stdout + r.stderr))
        return np.fromfile(dst, dtype="<f4")


def run_python(weights, frames, window, hop, output):
    model = sattn.Model.from_safetensors(weights)
    s = sattn.Stream(model, window=window, hop=hop, output=output,
                     invalid="mask")
    rows, _ = s.push(frames)
    tail, _ = s.drain()
    return np.concatenate([rows, tail]).reshape(-1)


class WholeModelElement(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def model(self, **kw):
        torch.manual_seed(kw.pop("seed", 0))
        net = SignalTransformer(d_frame=CHANNELS * FRAME, d_model=16,
                                heads=2, layers=2, d_ff=32, **kw).eval()
        path = os.path.join(self.tmp.name, "m%d.safetensors" % id(kw))
        labels = (["c%d" % i for i in range(kw["classes"])]
                  if kw.get("classes") else None)
        save_safetensors(net, path, labels=labels)
        return path

    def frames(self, n, seed=1):
        x = np.random.RandomState(seed).randn(n, CHANNELS * FRAME)
        x = x.astype(np.float32)
        x[n // 3, 1] = np.nan        # masked under invalid-frames=mask
        return x

    def check(self, path, window, hop, output, n=203):
        x = self.frames(n)
        el = run_element(path, x, window, hop, output)
        py = run_python(path, x, window, hop, output)
        self.assertEqual(el.size, py.size,
                         "%s: %d values from the element, %d from Python"
                         % (output, el.size, py.size))
        self.assertGreater(el.size, 0)
        self.assertTrue(np.array_equal(el.view(np.uint32),
                                       py.view(np.uint32)),
                        "%s: max |diff| %g" % (output, np.abs(el - py).max()))
        return el.size

    def test_outputs(self):
        total = 0
        cases = [dict(classes=5, positions="learned", max_window=24,
                      pooling="mean", final_norm=True),
                 dict(classes=3, positions="rope", pooling="last",
                      head_hidden=12, head_activation="gelu"),
                 dict(classes=4, positions="alibi", norm_first=True,
                      activation="gelu"),
                 dict(classes=0, positions="none")]
        for i, kw in enumerate(cases):
            path = self.model(seed=i, **kw)
            outputs = (["classes"] if kw["classes"] else []) + \
                ["mean", "last", "window"]
            for output in outputs:
                for window, hop in ((24, 8), (16, 5)):
                    with self.subTest(case=i, output=output, window=window,
                                      hop=hop):
                        total += self.check(path, window, hop, output)
        print("element vs Python: %d values (%d bytes) compared, all equal"
              % (total, 4 * total))


class ClassMessages(unittest.TestCase):
    """output=classes: sattn-class element messages as gst-launch-1.0 -m
    prints them, against the Python stream's rows; labels; caps."""

    FIXTURE = os.path.join(os.environ.get("SATTN_SOURCE_ROOT", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")), "tests",
        "data", "whole_f8_c4.safetensors")

    def launch(self, src, extra, sink="fakesink"):
        cmd = [GST_LAUNCH, "-m", "filesrc", "location=" + src, "!",
               "rawaudioparse", "use-sink-caps=false", "format=pcm",
               "pcm-format=f32le", "num-channels=8", "sample-rate=2000", "!",
               "sattn", "weights=" + self.FIXTURE, "window=64", "hop=16",
               "output=classes"] + extra + ["!"] + sink.split()
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=120)

    def messages(self, text):
        out = []
        for line in text.splitlines():
            if "sattn-class," not in line:
                continue
            idx = int(line.split("index=(uint)")[1].split(",")[0])
            prob = float(line.split("probability=(double)")[1].split(",")[0])
            ts = int(line.split("timestamp=(guint64)")[1].split(",")[0])
            label = line.split("label=(string)")[1].split(",")[0]
            top = line.split("top-k-labels=(string)<")[1].split(">")[0]
            out.append((idx, prob, ts, label, [t.strip() for t in
                                               top.split(",")]))
        return out

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        x = np.random.RandomState(3).randn(1600, 8).astype(np.float32)
        x[700:900] *= 6.0      # a louder stretch: decisions change
        self.x = x
        self.src = os.path.join(self.tmp.name, "in.f32")
        x.astype("<f4").tofile(self.src)
        model = sattn.Model.from_safetensors(self.FIXTURE)
        s = sattn.Stream(model, window=64, hop=16, output="classes")
        rows, info = s.push(x)
        self.rows, self.info = rows, info
        self.labels = model.labels

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_window(self):
        r = self.launch(self.src, ["message-interval=0", "top-k=2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        msgs = self.messages(r.stdout)
        self.assertEqual(len(msgs), len(self.rows))
        for (idx, prob, ts, label, top), row, inf in zip(msgs, self.rows,
                                                         self.info):
            self.assertEqual(idx, int(np.argmax(row)))
            self.assertEqual(np.float32(prob), row.max())
            self.assertEqual(label, self.labels[idx])
            self.assertEqual(len(top), 2)
            self.assertEqual(top[0], label)
            # the row's timestamp: its first frame at 2000 frames/s
            self.assertEqual(ts, int(inf["first"]) * 500000)

    def test_changes_only(self):
        r = self.launch(self.src, ["message-interval=3600000000000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [m[0] for m in self.messages(r.stdout)]
        want = [int(np.argmax(row)) for row in self.rows]
        changes = [want[0]] + [b for a, b in zip(want, want[1:]) if a != b]
        self.assertGreater(len(changes), 1, "the input must change decisions")
        self.assertEqual(got, changes)

    def test_labels_file(self):
        p = os.path.join(self.tmp.name, "labels.txt")
        with open(p, "w") as f:
            f.write("w\nx\ny\nz\n")
        r = self.launch(self.src, ["message-interval=0", "labels=" + p])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.messages(r.stdout)[0][3],
                         "wxyz"[int(np.argmax(self.rows[0]))])
        with open(p, "w") as f:
            f.write("w\nx\ny\n")
        r = self.launch(self.src, ["labels=" + p])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("has 3 labels but the model's head has 4 classes",
                      r.stdout + r.stderr)

    def test_tensor_caps_only(self):
        # Refused at READY -> PAUSED, in the thread that sets the state:
        # gst-launch-1.0 sees the failure as the state change's result, not
        # as an error from the streaming thread that its main loop may miss.
        r = self.launch(self.src, [], sink="audio/x-raw ! fakesink")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("output=classes gives class probabilities as "
                      "other/tensors only", r.stdout + r.stderr)
        self.assertIn("Failed to set pipeline to PAUSED", r.stdout + r.stderr)
        self.assertEqual((r.stdout + r.stderr).count("ERROR: from element"),
                         1, r.stdout + r.stderr)
        r = self.launch(self.src, [], sink="other/tensors ! fakesink")
        self.assertEqual(r.returncode, 0, r.stderr)


def gst_errors(description, timeout=30):
    """Run a pipeline description in this process until EOS or an error,
    polling its bus directly (no main loop: an error posted while the
    pipeline is still starting cannot be missed, as gst-launch-1.0's
    quit can be); returns (errors, warnings) as lists of message texts.
    A pipeline that neither ends nor fails within timeout is a hang."""
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst
    Gst.init(None)
    pipe = Gst.parse_launch(description)
    bus = pipe.get_bus()
    errors, warnings = [], []
    try:
        if pipe.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            pass  # the error message says why
        deadline = timeout * Gst.SECOND
        while True:
            msg = bus.timed_pop_filtered(
                deadline, Gst.MessageType.ERROR | Gst.MessageType.WARNING |
                Gst.MessageType.EOS)
            if msg is None:
                raise AssertionError("HANG: %s did not end or fail in %d s"
                                     % (description, timeout))
            if msg.type == Gst.MessageType.WARNING:
                warnings.append(msg.parse_warning()[0].message)
                continue
            if msg.type == Gst.MessageType.ERROR:
                errors.append(msg.parse_error()[0].message)
            break
        # errors posted right after the first one (upstream's own)
        while True:
            msg = bus.pop_filtered(Gst.MessageType.ERROR)
            if msg is None:
                break
            errors.append(msg.parse_error()[0].message)
    finally:
        pipe.set_state(Gst.State.NULL)
    return errors, warnings


class Contract(unittest.TestCase):
    """A model that records its input contract (sample_rate, channels,
    frame_size, window, hop: the shipped recogniser) gives the element
    every property left unset, steers upstream to its rate and channels,
    refuses a stream that contradicts it with both values named (contract=
    enforce, the default) and runs one with a warning under
    contract=warn."""

    MODEL = os.path.join(os.environ.get("SATTN_SOURCE_ROOT", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")), "examples",
        "recognizer", "recognizer.safetensors")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.src = os.path.join(self.tmp.name, "in.f32")
        self.dst = os.path.join(self.tmp.name, "out.f32")
        np.random.RandomState(5).randn(64 * 32 * 3).astype("<f4").tofile(
            self.src)

    def tearDown(self):
        self.tmp.cleanup()

    def line(self, rate, channels, props):
        return ("filesrc location=%s ! rawaudioparse use-sink-caps=false "
                "format=pcm pcm-format=f32le num-channels=%d sample-rate=%d "
                "! sattn weights=%s output=classes %s ! filesink location=%s"
                % (self.src, channels, rate, self.MODEL, props, self.dst))

    def run_at(self, rate, channels, props=""):
        errors, warnings = gst_errors(self.line(rate, channels, props))
        self.assertEqual(errors, [])
        classes = len(sattn.Model.from_safetensors(self.MODEL).labels)
        rows = np.fromfile(self.dst, "<f4").reshape(-1, classes)
        self.assertTrue(np.allclose(rows.sum(1), 1.0, atol=1e-5))
        return rows, warnings

    def windows(self, values=64 * 32 * 3, values_per_frame=None):
        """Windows of the input file (values floats) at the file's frame
        size (values_per_frame: the file's frame_size x channels unless
        given), window and hop (the element's default hop, 16, when it
        records none)."""
        k = sattn.Model.from_safetensors(self.MODEL).contract
        frames = values // (values_per_frame or
                            k["frame_size"] * k["channels"])
        window, hop = k["window"], min(k.get("hop", 16), k["window"])
        return len(range(hop, frames + 1, hop)) + (frames % hop != 0)

    def test_as_trained(self):
        # no frame-size, window or hop: the file's
        rows, warnings = self.run_at(64000, 2)
        self.assertEqual(warnings, [])
        self.assertEqual(len(rows), self.windows())

    def test_refused_rate(self):
        errors, _ = gst_errors(self.line(48000, 2, ""))
        self.assertIn("The stream's rate 48000 Hz contradicts the model's "
                      "input contract: it was trained on 64000 Hz streams "
                      "(metadata 'sample_rate')", errors[0])
        self.assertIn("set contract=warn", errors[0])

    def test_refused_channels(self):
        errors, _ = gst_errors(self.line(64000, 1, "frame-size=32"))
        self.assertTrue(errors)
        self.assertIn("frame-size=32 contradicts the model's input "
                      "contract", errors[0])
        errors, _ = gst_errors(self.line(64000, 4, ""))
        self.assertIn("The stream's 4 channels contradict the model's input "
                      "contract: it was trained on 2-channel streams",
                      errors[0])

    def test_warn_rate(self):
        rows, warnings = self.run_at(48000, 2, "contract=warn")
        self.assertEqual(len(rows), self.windows())
        text = " ".join(warnings)
        self.assertIn("The model was trained on 64000 Hz streams (metadata "
                      "'sample_rate') and this stream is 48000 Hz", text)
        self.assertIn("Resample to 64000 Hz", text)

    def test_warn_layout(self):
        rows, warnings = self.run_at(64000, 1, "contract=warn frame-size=32")
        k = sattn.Model.from_safetensors(self.MODEL).contract
        self.assertNotEqual(k["frame_size"], 32)
        text = " ".join(warnings)
        self.assertIn("trained with channels=2 (metadata 'channels') but "
                      "this stream has channels=1", text)
        self.assertIn("trained with frame-size=%d (metadata 'frame_size') "
                      "but this stream has frame-size=32" % k["frame_size"],
                      text)


class InstalledModel(unittest.TestCase):
    """weights=NAME (no '/', no such file here): the element reads
    NAME.safetensors from sattn/models of the user's data directory, of
    its own data directory or of $XDG_DATA_DIRS (an installed model, as
    the Debian package installs /usr/share/sattn/models/recogniser.*);
    reading the property gives the file found; a name found nowhere is
    refused by the loader, naming it."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        os.makedirs(os.path.join(d, "share", "sattn", "models"))
        self.installed = os.path.join(d, "share", "sattn", "models",
                                      "test-recogniser.safetensors")
        shutil.copy(Contract.MODEL, self.installed)
        self.env = dict(os.environ, XDG_DATA_DIRS=os.path.join(d, "share"),
                        XDG_DATA_HOME=os.path.join(d, "home"))
        self.src = os.path.join(d, "in.f32")
        np.random.RandomState(3).randn(1024 * 2 * 4).astype("<f4").tofile(
            self.src)

    def tearDown(self):
        self.tmp.cleanup()

    def launch(self, name):
        dst = os.path.join(self.tmp.name, "out.f32")
        cmd = [GST_LAUNCH, "-q", "filesrc", "location=" + self.src, "!",
               "rawaudioparse", "use-sink-caps=false", "format=pcm",
               "pcm-format=f32le", "num-channels=2", "sample-rate=64000",
               "!", "sattn", "weights=" + name, "output=classes", "!",
               "filesink", "location=" + dst]
        r = run_bounded(cmd, env=self.env, cwd=self.tmp.name)
        return r, dst

    def test_short_name(self):
        r, dst = self.launch("test-recogniser")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        m = sattn.Model.from_safetensors(self.installed)
        # 4096 samples as frames of the model's frame size, a window
        # every hop (the model's, else 16)
        frames = 4096 // m.contract["frame_size"]
        hop = min(m.contract.get("hop", 16), m.contract["window"])
        self.assertEqual(np.fromfile(dst, "<f4").size,
                         len(range(hop, frames + 1, hop)) * len(m.labels))

    def test_property_names_the_file(self):
        code = ("import gi; gi.require_version('Gst', '1.0'); "
                "from gi.repository import Gst; Gst.init(None); "
                "e = Gst.ElementFactory.make('sattn'); "
                "e.set_property('weights', 'test-recogniser'); "
                "print(e.get_property('weights')); "
                "e.set_property('weights', 'test-recogniser.safetensors'); "
                "print(e.get_property('weights')); "
                "e.set_property('weights', 'no-such-model'); "
                "print(e.get_property('weights'))")
        r = run_bounded([sys.executable, "-c", code], env=self.env,
                        cwd=self.tmp.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [self.installed, self.installed,
                                            "no-such-model"])

    def test_not_found(self):
        r, _ = self.launch("no-such-model")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no-such-model", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
