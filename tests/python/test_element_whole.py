#!/usr/bin/python3
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
