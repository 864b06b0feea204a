# SPDX-License-Identifier: LGPL-2.1-or-later
"""sattn.Stream against sattn.attend, window by window, and both against
the shared float64 reference (tests/common/reference.c).

The schedule is stated here from sattn.h, not read from the stream: with
start "pad" a window ends after every hop frames (h, 2h, ...), with
"wait" at n, n+h, ...; drain() ends one more window at the last frame when
frames are pending.  A window ending at frame e covers frames
[max(0, e-n), e): its rows equal attend() of that block.  frames mode: each
frame's row comes from the first window ending after it; window mode: the
n rows (padding rows zeros) flattened; mean: the mean of the rows; last:
the last row.  Pushes are cut at random sizes.  Bound: max |stream -
attend| <= 1e-5 * (1 + max |attend|) (tests/core/test-stream.c's).
"""

import unittest

import numpy as np

import common
import sattn


def schedule(n_frames, window, hop, start):
    """Window ends (exclusive frame index) of push() and of drain()."""
    first = hop if start == "pad" else window
    ends = list(range(first, n_frames + 1, hop))
    last = ends[-1] if ends else 0
    drained = n_frames if n_frames > last else None
    return ends, drained


def expected(model, x, window, hop, output, start):
    """The rows and (first, n_frames) infos push + drain must give."""
    n_frames = len(x)
    ends, drained = schedule(n_frames, window, hop, start)
    all_ends = ends + ([drained] if drained is not None else [])
    rows, infos = [], []
    prev = 0
    for e in all_ends:
        b = max(0, e - window)
        block = sattn.attend(model, x[b:e]).astype(np.float64)
        if output == "frames":
            for i in range(prev, e):
                rows.append(block[i - b])
                infos.append((i, 1))
        else:
            if output == "window":
                full = np.zeros((window, block.shape[1]))
                full[window - (e - b):] = block
                rows.append(full.reshape(-1))
            elif output == "mean":
                rows.append(block.mean(axis=0))
            else:
                rows.append(block[-1])
            infos.append((prev, e - prev))
        prev = e
    return np.array(rows), infos


def run(stream, x, rng):
    rows, infos = [], []
    i = 0
    while i < len(x):
        k = int(rng.integers(1, 12))
        r, inf = stream.push(x[i:i + k])
        rows.append(r)
        infos.append(inf)
        i += k
    r, inf = stream.drain()
    rows.append(r)
    infos.append(inf)
    info = np.concatenate(infos)
    return np.concatenate(rows), info


class TestStream(unittest.TestCase):
    worst = common.Worst("stream vs attend per window")
    worst_ref = common.Worst("stream (frames mode) vs float64 reference")

    @classmethod
    def tearDownClass(cls):
        cls.worst.report()
        cls.worst_ref.report()

    def test_stream_equals_attend(self):
        rng = np.random.default_rng(20)
        cases = [
            (16, 2, dict(), 8, 3),
            (16, 2, dict(causal=True), 8, 4),
            (16, 4, dict(causal=True, lookback=3), 7, 2),
            (12, 3, dict(biaskv=True), 6, 6),
            (12, 3, dict(zero=True, causal=True), 5, 1),
            (8, 1, dict(proj=False, bias=False, out=False, bo=False), 9, 4),
        ]
        for e, h, opts, window, hop in cases:
            causal = opts.pop("causal", False)
            lookback = opts.pop("lookback", 0)
            w = common.random_weights(rng, e, h, e // h, e // h, e, **opts)
            arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
            m = sattn.Model(e, h, add_zero_attn=w["add_zero_attn"],
                            causal=causal, lookback=lookback, **arrays)
            x = rng.standard_normal((41, e)).astype(np.float32)
            for output in ("frames", "window", "mean", "last"):
                for start in ("pad", "wait"):
                    label = "e%d h%d %s window %d hop %d %s %s" % (
                        e, h, opts, window, hop, output, start)
                    s = sattn.Stream(m, window, hop, output, start=start)
                    got, info = run(s, x, rng)
                    want, want_info = expected(m, x, window, hop, output,
                                               start)
                    self.assertEqual(got.shape, want.shape, label)
                    d = common.Diff(got, want)
                    self.worst.add(d)
                    self.assertLessEqual(
                        d.max_abs, common.OUT_REL_BOUND * (1 + d.max_ref),
                        "%s: %s" % (label, d))
                    self.assertEqual(
                        [(int(a), int(b)) for a, b in
                         zip(info["first"], info["n_frames"])],
                        want_info, label)
                    self.assertTrue((info["valid"] == 1).all(), label)
                    self.assertEqual(s.frames, len(x), label)
                    self.assertEqual(s.pending, 0, label)
                    if output == "frames":
                        # and the same rows straight from the formula
                        ref = self.reference_rows(m, w, x, window, hop,
                                                  start, causal, lookback)
                        dr = common.Diff(got, ref)
                        self.worst_ref.add(dr)
                        self.assertTrue(dr.out_ok(), "%s: reference %s"
                                        % (label, dr))

    @staticmethod
    def reference_rows(m, w, x, window, hop, start, causal, lookback):
        ends, drained = schedule(len(x), window, hop, start)
        rows, prev = [], 0
        for e in ends + ([drained] if drained is not None else []):
            b = max(0, e - window)
            out, _ = common.reference(x[b:e], m.heads, w, causal=causal,
                                      lookback=lookback)
            rows.extend(out[prev - b:e - b])
            prev = e
        return np.array(rows)

    def test_positions_absolute(self):
        # positions count frames since the stream started: the window
        # ending at e is the reference's block x[b:e] at positions b, ...
        rng = np.random.default_rng(25)
        w = common.random_weights(rng, 16, 2, 8, 8, 16)
        arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
        x = rng.standard_normal((29, 16)).astype(np.float32)
        window, hop = 8, 3
        for positions in ("rope", "rope-interleaved", "alibi"):
            m = sattn.Model(16, 2, positions=positions, causal=True, **arrays)
            got, _ = run(sattn.Stream(m, window, hop), x, rng)
            ends, drained = schedule(len(x), window, hop, "pad")
            want, prev = [], 0
            for e in ends + ([drained] if drained is not None else []):
                b = max(0, e - window)
                out, _ = common.reference(x[b:e], 2, w, causal=True,
                                          positions=positions, pos0=b)
                want.extend(out[prev - b:])
                prev = e
            d = common.Diff(got, np.array(want))
            self.worst_ref.add(d)
            self.assertTrue(d.out_ok(), "%s: %s" % (positions, d))

    def test_threads_byte_identical(self):
        rng = np.random.default_rng(21)
        w = common.random_weights(rng, 32, 4, 8, 8, 32)
        arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
        x = rng.standard_normal((50, 32)).astype(np.float32)
        outs = []
        m = sattn.Model(32, 4, **arrays)  # one model, any thread count
        for threads in (1, 2, 0):
            s = sattn.Stream(m, 16, 4, threads=threads)
            r, _ = s.push(x)
            r2, _ = s.drain()
            outs.append(np.concatenate([r, r2]))
        self.assertTrue(np.array_equal(outs[0], outs[1]))

    def test_reset_and_stats(self):
        rng = np.random.default_rng(22)
        m = sattn.Model(8, 2)
        x = rng.standard_normal((20, 8)).astype(np.float32)
        s = sattn.Stream(m, 8, 4, collect_stats=True)
        a, ia = s.push(x)
        s.reset()
        self.assertEqual(s.frames, 0)
        b, ib = s.push(x)
        # after a reset the stream starts afresh: the same rows and infos
        self.assertTrue(np.array_equal(a, b))
        self.assertTrue(np.array_equal(ia, ib))
        st = s.stats()
        self.assertEqual(st["frames"], 40)
        self.assertEqual(st["windows"], 10)
        self.assertEqual(st["invalid_frames"], 0)
        st2 = s.stats(clear=True)
        self.assertEqual(st2["frames"], 40)
        self.assertEqual(s.stats()["frames"], 0)

    def test_gaps_and_invalid_policies(self):
        rng = np.random.default_rng(23)
        m = sattn.Model(8, 2)
        x = rng.standard_normal((12, 8)).astype(np.float32)
        x[5, 1] = np.nan
        valid = np.ones(12, np.uint8)
        valid[8] = 0
        s = sattn.Stream(m, 12, 12, collect_stats=True)
        rows, info = s.push(x, valid=valid)
        self.assertEqual(list(np.flatnonzero(info["valid"] == 0)), [5, 8])
        self.assertTrue((rows[[5, 8]] == 0).all())
        kv = valid.copy()
        ref, _ = common.reference(x, 2, key_valid=kv, query_valid=kv)
        d = common.Diff(rows, ref)
        self.assertTrue(d.out_ok(), str(d))
        self.assertEqual(s.stats()["invalid_frames"], 2)
        # "zero": the NaN frame becomes an all-zero, valid frame
        z = sattn.Stream(m, 12, 12, invalid="zero")
        rows, info = z.push(x)
        xz = x.copy()
        xz[5] = 0
        ref, _ = common.reference(xz, 2)
        self.assertTrue(common.Diff(rows, ref).out_ok())
        self.assertTrue((info["valid"] == 1).all())

    def test_last_weights(self):
        rng = np.random.default_rng(24)
        w = common.random_weights(rng, 16, 2, 8, 8, 16)
        arrays = {k: v for k, v in w.items() if k != "add_zero_attn"}
        m = sattn.Model(16, 2, **arrays)
        x = rng.standard_normal((8, 16)).astype(np.float32)
        s = sattn.Stream(m, 8, 8, output="window", keep_weights=True)
        s.push(x)
        _, ref_w = common.reference(x, 2, w)
        for head in (0, 1):
            d = common.Diff(s.last_weights(head), ref_w[head])
            self.assertLessEqual(d.max_abs, common.WEIGHT_BOUND, str(d))
        d = common.Diff(s.last_weights(), ref_w.mean(axis=0))
        self.assertLessEqual(d.max_abs, common.WEIGHT_BOUND, str(d))


if __name__ == "__main__":
    unittest.main(verbosity=2)
