# SPDX-License-Identifier: LGPL-2.1-or-later
"""examples/offline-npy.py on small generated recordings: a 1-D signal cut
into frames (with a NaN dropout and a partial last frame) and n × d_model
frames, in frames and mean modes.  Checks what the example promises: one
row per input frame in frames mode (a row per window in mean mode), rows
equal to the shared float64 reference window by window (bound
max-abs <= 1e-5 * (1 + max |ref|)), the dropout's row zeros and flagged,
the summary printed, a weights file (heads from its metadata), and a
clear error with exit status 1 under --invalid error.

Usage: test_example.py EXAMPLE"""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import common
import sattn

EXAMPLE = None


def run(*args):
    return subprocess.run([sys.executable, EXAMPLE] + [str(a) for a in args],
                          capture_output=True, text=True)


class TestExample(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_audio_frames(self):
        rng = np.random.default_rng(30)
        fs, window, hop = 8, 12, 4
        t = np.arange(50 * fs - 3)
        a = (np.sin(0.07 * t) + 0.1 * rng.standard_normal(t.size)).astype(
            np.float32)
        a[101] = np.nan                  # frame 12
        np.save(self.path("a.npy"), a)
        r = run(self.path("a.npy"), "--frame-size", fs, "--window", window,
                "--hop", hop, "--heads", 2, "--block", 7,
                "--out", self.path("f.npy"))
        self.assertEqual(r.returncode, 0, r.stderr)
        print(r.stdout)
        self.assertIn("last frame: 5 of 8 samples, zero-padded", r.stdout)
        rows = np.load(self.path("f.npy"))
        info = np.load(self.path("f-info.npy"))
        x = np.zeros(50 * fs, np.float32)
        x[:a.size] = a
        x = x.reshape(50, fs)
        self.assertEqual(rows.shape, (50, fs))
        self.assertEqual(list(info["first"]), list(range(50)))
        self.assertEqual(list(np.flatnonzero(info["valid"] == 0)), [12])
        self.assertTrue((rows[12] == 0).all())
        # window ends h, 2h, ... and 50 (the drain)
        ref, prev = [], 0
        for e in list(range(hop, 50, hop)) + [50]:
            b = max(0, e - window)
            out, _ = common.reference(x[b:e], 2)
            ref.extend(out[prev - b:])
            prev = e
        d = common.Diff(rows, np.array(ref))
        print("# offline-npy frames vs float64 reference: %s" % d)
        self.assertTrue(d.out_ok(), str(d))

    def test_frames_mean(self):
        rng = np.random.default_rng(31)
        x = rng.standard_normal((37, 6)).astype(np.float32)
        np.save(self.path("x.npy"), x)
        r = run(self.path("x.npy"), "--window", 10, "--hop", 5, "--heads", 3,
                "--output", "mean", "--causal", "--out", self.path("m.npy"))
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = np.load(self.path("m.npy"))
        ends = list(range(5, 38, 5)) + [37]
        self.assertEqual(rows.shape, (len(ends), 6))
        ref = [common.reference(x[max(0, e - 10):e], 3, causal=True)[0]
               .mean(axis=0) for e in ends]
        d = common.Diff(rows, np.array(ref))
        print("# offline-npy mean vs float64 reference: %s" % d)
        self.assertTrue(d.out_ok(), str(d))
        self.assertIn("windows:  %d;" % len(ends), r.stdout)

    @unittest.skipIf(sattn._lib.sattn_model_load is None,
                     "libsattn was built without the weights reader")
    def test_weights_file(self):
        # a trained module from a file: rows equal attend() of each window
        # with the same file (window == hop: windows end at 8, 16, 24, and
        # the drain's at 30 covers frames 22..29, of which 24.. are new)
        weights = os.path.join(common.SOURCE_ROOT, "tests", "data",
                               "e16_h2_nobias.safetensors")
        rng = np.random.default_rng(32)
        x = rng.standard_normal((30, 16)).astype(np.float32)
        np.save(self.path("w.npy"), x)
        r = run(self.path("w.npy"), "--weights", weights, "--window", 8,
                "--hop", 8, "--out", self.path("o.npy"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("heads=2", r.stdout)
        rows = np.load(self.path("o.npy"))
        m = sattn.Model.from_safetensors(weights, heads=2)
        want = np.concatenate([sattn.attend(m, x[b:b + 8])
                               for b in range(0, 24, 8)]
                              + [sattn.attend(m, x[22:30])[2:]])
        d = common.Diff(rows, want)
        self.assertLessEqual(d.max_abs,
                             common.OUT_REL_BOUND * (1 + d.max_ref), str(d))

    def test_invalid_error(self):
        x = np.ones((20, 4), np.float32)
        x[9, 0] = np.inf
        np.save(self.path("bad.npy"), x)
        r = run(self.path("bad.npy"), "--window", 4, "--hop", 2,
                "--invalid", "error")
        self.assertEqual(r.returncode, 1)
        self.assertIn("frame 9 has NaN or Inf samples", r.stderr)


if __name__ == "__main__":
    EXAMPLE = sys.argv.pop(1)
    unittest.main(verbosity=2)
