# SPDX-License-Identifier: LGPL-2.1-or-later
"""Threads and the Python package: a Model is immutable and shared by any
number of threads and streams (attend() and Streams of one model in
several threads give the bytes one thread gives); a Stream is used by one
thread at a time, and a call from a second thread while another is inside
a call on the same Stream raises SattnError instead of touching the
stream's memory.  ctypes releases the GIL around every libsattn call, so
without that check two pushes would run inside the core at once."""

import threading
import unittest

import numpy as np

import common
import sattn
from sattn import _lib


def _model(seed=0, d=16, heads=2):
    rng = np.random.default_rng(seed)
    w = common.random_weights(rng, d, heads, d // heads, d // heads, d)
    w.pop("add_zero_attn")
    return sattn.Model(d, heads, **w)


def _run_threads(n, target):
    errors = []

    def run(i):
        try:
            target(i)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


class TestThreads(common.RaisesStatus, unittest.TestCase):
    def test_model_shared_by_attend(self):
        m = _model()
        rng = np.random.default_rng(1)
        blocks = [rng.standard_normal((48, m.d_model)).astype(np.float32)
                  for _ in range(4)]
        want = [sattn.attend(m, b) for b in blocks]
        got = [[None] * 4 for _ in range(4)]

        def work(i):
            for r in range(20):
                for j, b in enumerate(blocks):
                    if r == 19:
                        got[i][j] = sattn.attend(m, b)
                    else:
                        sattn.attend(m, b)
        self.assertEqual(_run_threads(4, work), [])
        for i in range(4):
            for j in range(4):
                self.assertTrue(np.array_equal(got[i][j], want[j]))

    def test_model_shared_by_streams(self):
        # one Model, a Stream per thread (with threads of its own too)
        m = _model()
        x = np.random.default_rng(2).standard_normal(
            (600, m.d_model)).astype(np.float32)

        def run_stream(threads):
            s = sattn.Stream(m, 32, 8, threads=threads)
            parts = [s.push(x[i:i + 37])[0] for i in range(0, len(x), 37)]
            parts.append(s.drain()[0])
            return np.concatenate(parts)
        want = run_stream(1)
        got = [None] * 4

        def work(i):
            got[i] = run_stream(1 + i % 2)
        self.assertEqual(_run_threads(4, work), [])
        for g in got:
            self.assertTrue(np.array_equal(g, want))

    def test_second_thread_refused(self):
        # Thread A is inside push (converting its frames); a push, a drain,
        # a reset and stats() from the main thread meanwhile are refused
        # with words that say why, and A's push completes untouched.
        m = _model()
        s = sattn.Stream(m, 8, 4)
        inside, release = threading.Event(), threading.Event()
        x = np.ones((8, m.d_model), np.float32)

        class Slow:
            def __array__(self, dtype=None, copy=None):
                inside.set()
                release.wait(30)
                return x if dtype is None else x.astype(dtype)
        result = {}

        def a():
            result["rows"] = s.push(Slow())[0]
        t = threading.Thread(target=a, name="pusher")
        t.start()
        try:
            self.assertTrue(inside.wait(30))
            e = self.raises(_lib.E_INVAL, s.push, x)
            self.assertIn("Stream.push", str(e))
            self.assertIn("'pusher'", str(e))
            self.assertIn("one thread at a time", str(e))
            self.raises(_lib.E_INVAL, s.drain)
            self.raises(_lib.E_INVAL, s.reset)
            self.raises(_lib.E_INVAL, s.stats)
        finally:
            release.set()
            t.join()
        self.assertEqual(result["rows"].shape, (8, m.d_model))
        # the refused calls changed nothing; the stream serves the next
        # caller, from any thread
        self.assertEqual(s.frames, 8)
        ref = sattn.Stream(m, 8, 4)
        ref.push(x)
        self.assertTrue(np.array_equal(s.push(x)[0], ref.push(x)[0]))

    def test_four_threads_one_stream(self):
        # The misuse itself: four threads push one stream.  Each push
        # either runs alone or raises SattnError; the stream stays
        # consistent: it holds every accepted frame, and every accepted
        # frame gets exactly one row by the end of the stream.
        m = _model()
        s = sattn.Stream(m, 16, 4)
        x = np.random.default_rng(3).standard_normal(
            (64, m.d_model)).astype(np.float32)
        lock = threading.Lock()
        count = {"frames": 0, "rows": 0, "refused": 0}

        def work(i):
            for _ in range(200):
                try:
                    rows, info = s.push(x[:13 + i])
                except sattn.SattnError as e:
                    self.assertIn("one thread at a time", str(e))
                    with lock:
                        count["refused"] += 1
                    continue
                with lock:
                    count["frames"] += 13 + i
                    count["rows"] += int(info["n_frames"].sum())
        self.assertEqual(_run_threads(4, work), [])
        self.assertEqual(s.frames, count["frames"])
        rows, info = s.drain()
        self.assertEqual(count["rows"] + int(info["n_frames"].sum()),
                         count["frames"])
        self.assertTrue(np.all(np.isfinite(rows)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
