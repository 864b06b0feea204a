#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Hostile side inputs of the element, each bounded in time and memory
(issue "Trust at the edges"):

  - labels= naming a FIFO (it blocked start-up forever), /dev/zero (it grew
    the process to 2.1 GB), a file over the size bound, a file with a NUL
    byte (it was counted as one label): refused with words, in well under
    a second;
  - a 2 GiB sparse weights file under a 4 GB address-space limit: refused
    before it is read, with the figures, the process staying small;
  - output=classes with invalid-frames=error and tensor output: every
    output buffer, those just before the error included, carries its
    window metadata;
  - an explicit tensor capsfilter with each output's real dimensions
    links and runs (the template carried dimensions=(string)ANY);
  - the top-k labels and probabilities of sattn-class messages against a
    brute-force ordering (most probable first, ties: the lower index).

Every pipeline runs in a child process under a timeout, its bus polled
directly (no main loop to miss an error).
"""
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import numpy as np

import sattn
from common import write_safetensors

RUNNER = textwrap.dedent("""
    import sys, json, gi
    gi.require_version("Gst", "1.0")
    from gi.repository import Gst
    Gst.init(None)
    pipe = Gst.parse_launch(sys.argv[1])
    bus = pipe.get_bus()
    out = {"errors": [], "warnings": [], "classes": [], "metas": [],
           "buffers": 0, "rows": []}
    sink = pipe.get_by_name("out")
    def on_buffer(s):
        b = s.emit("pull-sample").get_buffer()
        cm = b.get_custom_meta("GstSattnWindowMeta")
        out["buffers"] += 1
        out["metas"].append(cm is not None)
        import struct as st
        data = b.extract_dup(0, b.get_size())
        out["rows"].append(list(st.unpack("<%df" % (len(data) // 4), data)))
        return Gst.FlowReturn.OK
    if sink is not None:
        sink.set_property("emit-signals", True)
        sink.connect("new-sample", on_buffer)
    pipe.set_state(Gst.State.PLAYING)
    while True:
        m = bus.timed_pop(20 * Gst.SECOND)
        if m is None:
            out["errors"].append("HANG")
            break
        if m.type == Gst.MessageType.ERROR:
            out["errors"].append(m.parse_error()[0].message)
            break
        if m.type == Gst.MessageType.WARNING:
            out["warnings"].append(m.parse_warning()[0].message)
        if m.type == Gst.MessageType.ELEMENT and \\
                m.get_structure().get_name() == "sattn-class":
            s = m.get_structure()
            out["classes"].append([list(s.get_value("top-k-labels")),
                                   list(s.get_value("top-k-probabilities"))])
        if m.type == Gst.MessageType.EOS:
            break
    pipe.set_state(Gst.State.NULL)
    print(json.dumps(out))
""")


def run(desc, limit_as=None, timeout=60):
    """The pipeline in a child: (result dict, seconds, max RSS in MB)."""
    def pre():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", RUNNER, desc],
                       capture_output=True, text=True, timeout=timeout,
                       preexec_fn=pre)
    secs = time.monotonic() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    if r.returncode != 0:
        raise AssertionError("the pipeline's process failed (%d): %s"
                             % (r.returncode, r.stderr[-1500:]))
    return json.loads(r.stdout.strip().splitlines()[-1]), secs, rss


def classes_model(path, classes=4, d=8, f=8, seed=0):
    rng = np.random.RandomState(seed)
    t = {"embed.weight": rng.randn(d, f) * 0.5, "embed.bias": rng.randn(d)}
    p = "encoder.layers.0."
    t.update({p + "self_attn.in_proj_weight": rng.randn(3 * d, d) * 0.3,
              p + "self_attn.out_proj.weight": rng.randn(d, d) * 0.3,
              p + "linear1.weight": rng.randn(16, d) * 0.3,
              p + "linear2.weight": rng.randn(d, 16) * 0.3})
    t["head.weight"] = rng.randn(classes, d) * 2.0
    t["head.bias"] = np.zeros(classes)
    write_safetensors(path, t, {"num_heads": "2"})


class Hostile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.model = os.path.join(self.tmp.name, "m.safetensors")
        classes_model(self.model)
        self.src = ("audiotestsrc num-buffers=20 wave=white-noise ! "
                    "audio/x-raw,format=F32LE,channels=8,rate=8000")

    def tearDown(self):
        self.tmp.cleanup()

    def classes_line(self, extra, sink="fakesink"):
        return ("%s ! sattn weights=%s window=16 hop=8 output=classes %s ! %s"
                % (self.src, self.model, extra, sink))

    def test_labels_files(self):
        fifo = os.path.join(self.tmp.name, "fifo")
        os.mkfifo(fifo)
        big = os.path.join(self.tmp.name, "big.txt")
        with open(big, "w") as f:
            f.write("x" * (2 << 20))
        nul = os.path.join(self.tmp.name, "nul.txt")
        with open(nul, "wb") as f:
            f.write(b"a\nb\x00\nc\nd\n")
        cases = [(fifo, "is not a regular file"),
                 ("/dev/zero", "is not a regular file"),
                 (big, "is 2097152 bytes; a labels file is at most 1048576"),
                 (nul, "has a NUL byte on line 2")]
        for path, words in cases:
            r, secs, _ = run(self.classes_line("labels=" + path))
            print("labels=%s: %.2f s: %s" % (path, secs, r["errors"]))
            self.assertEqual(len(r["errors"]), 1)
            self.assertIn(words, r["errors"][0])
            self.assertLess(secs, 15)

    @unittest.skipIf("libasan" in os.environ.get("LD_PRELOAD", ""),
                     "AddressSanitizer reserves terabytes of address space "
                     "at start-up, so RLIMIT_AS cannot bound the child; the "
                     "plain build runs this test")
    def test_sparse_weights_refused_before_reading(self):
        sparse = os.path.join(self.tmp.name, "sparse.safetensors")
        n = 1 << 29
        h = json.dumps({"embed.weight": {"dtype": "F32",
                                         "shape": [1 << 15, 1 << 14],
                                         "data_offsets": [0, 4 * n]}})
        h = h.encode() + b" " * (-len(h) % 8)
        with open(sparse, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            f.truncate(8 + len(h) + 4 * n)
        r, secs, rss = run("%s ! sattn weights=%s ! fakesink"
                           % (self.src, sparse), limit_as=4 << 30)
        print("2 GiB sparse weights under RLIMIT_AS 4 GiB: %.2f s, child "
              "max RSS %.0f MB: %s" % (secs, rss, r["errors"]))
        self.assertIn("Not enough memory to load the weights file", r["errors"][0])
        self.assertIn("bytes are available", r["errors"][0])
        self.assertLess(rss, 500)

    def test_meta_on_rows_before_an_error(self):
        # frames from a file: NaN in the middle, invalid-frames=error
        x = np.random.RandomState(1).randn(400, 8).astype(np.float32)
        x[300, 3] = np.nan
        src = os.path.join(self.tmp.name, "in.f32")
        x.astype("<f4").tofile(src)
        desc = ("filesrc location=%s ! rawaudioparse use-sink-caps=false "
                "format=pcm pcm-format=f32le num-channels=8 sample-rate=8000 ! "
                "sattn weights=%s window=16 hop=8 output=classes "
                "invalid-frames=error meta-structure=true ! "
                "other/tensors ! appsink name=out sync=false"
                % (src, self.model))
        r, _, _ = run(desc)
        print("invalid-frames=error, tensor rows: %d buffers, %d with meta, "
              "errors %s" % (r["buffers"], sum(r["metas"]), r["errors"]))
        self.assertEqual(len(r["errors"]), 1)
        self.assertIn("Input frame 300", r["errors"][0])
        self.assertGreater(r["buffers"], 30)
        self.assertTrue(all(r["metas"]))

    def test_explicit_tensor_caps(self):
        for output, dims in (("classes", "4:1"), ("mean", "8:1"),
                             ("window", "8:16")):
            desc = ("%s ! sattn weights=%s window=16 hop=16 output=%s ! "
                    "other/tensors,num_tensors=1,dimensions=(string)%s ! "
                    "appsink name=out sync=false"
                    % (self.src, self.model, output, dims))
            r, _, _ = run(desc)
            print("output=%s ! other/tensors,dimensions=%s: %d buffers, "
                  "errors %s" % (output, dims, r["buffers"], r["errors"]))
            self.assertEqual(r["errors"], [])
            self.assertGreater(r["buffers"], 0)

    def test_top_k_order(self):
        path = os.path.join(self.tmp.name, "many.safetensors")
        classes_model(path, classes=300, seed=2)
        self.model = path
        r, _, _ = run(self.classes_line(
            "top-k=64 message-interval=0",
            "other/tensors ! appsink name=out sync=false"))
        self.assertEqual(r["errors"], [])
        self.assertGreater(len(r["classes"]), 5)
        self.assertEqual(len(r["classes"]), len(r["rows"]))
        for (labels, probs), row in zip(r["classes"], r["rows"]):
            # brute force: every class, most probable first, ties by index
            want = sorted(range(len(row)), key=lambda i: (-row[i], i))[:64]
            self.assertEqual([int(l) for l in labels], want)
            self.assertTrue(np.allclose(probs, [row[i] for i in want]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
