# SPDX-License-Identifier: LGPL-2.1-or-later
"""Error paths of the Python package: each failure raises sattn.SattnError
with the core's status and the core's words: sattn_model_check /
sattn_stream_config_check for a refused configuration (the weights
reader's messages: test_fixtures.py); the frame index and sattn_frame_fault_string
when a push stops at a bad frame.  The package adds words of its own only
for what it checks before calling the core (array shapes, mode names,
argument types and values); where Python would raise a builtin exception
the SattnError is that builtin too.  The objects stay usable afterwards."""

import unittest

import numpy as np

import common
import sattn
from sattn import _lib


class TestErrors(common.RaisesStatus, unittest.TestCase):
    def test_model_errors(self):
        # sattn_model_check's words: the tensor, the index, what works
        wq = np.zeros((8, 8))
        wq[2, 5] = np.inf
        e = self.raises(_lib.E_NONFINITE, sattn.Model, 8, 2, wq=wq)
        self.assertIn("wq", str(e))
        self.assertIn("[2, 5]", str(e))
        # d_model not a multiple of heads, no shapes to say otherwise
        e = self.raises(_lib.E_SHAPE, sattn.Model, 16, 3)
        self.assertIn("heads=3 does not divide d_model=16", str(e))
        e = self.raises(_lib.E_INVAL, sattn.Stream, sattn.Model(8, 2), 4,
                        threads=-1)
        self.assertIn("threads=-1", str(e))
        e = self.raises(_lib.E_SHAPE, sattn.Model, 8, 2, wq=np.zeros((8, 7)))
        self.assertIn("wq has shape (8, 7), expected (8, 8)", str(e))
        e = self.raises(_lib.E_SHAPE, sattn.Model, 8, 2, bo=np.zeros(7))
        self.assertIn("bo", str(e))
        e = self.raises(_lib.E_INVAL, sattn.Model, 8, 2, positions="sine")
        self.assertIn("rope, rope-interleaved, alibi", str(e))
        # positions with an extra key (no position): the core's words
        e = self.raises(_lib.E_INVAL, sattn.Model, 8, 2, positions="rope",
                        bias_k=np.zeros(8), bias_v=np.zeros(8))
        self.assertIn("positional encodings", str(e))
        self.raises(_lib.E_INVAL, sattn.Model, 8, 0)
        self.raises(_lib.E_INVAL, sattn.Model, -8, 2)
        self.raises(_lib.E_INVAL, sattn.Model, 8, 2, scale=float("nan"))

    def test_stream_config_errors(self):
        m = sattn.Model(8, 2)
        self.raises(_lib.E_INVAL, sattn.Stream, m, 0)
        # sattn_stream_config_check's words
        e = self.raises(_lib.E_INVAL, sattn.Stream, m, 4, 5)
        self.assertIn("hop=5 is larger than window=4", str(e))
        e = self.raises(_lib.E_INVAL, sattn.Stream, m, 4,
                        saturation_threshold=2)
        self.assertIn("saturation_threshold=2", str(e))
        e = self.raises(_lib.E_INVAL, sattn.Stream, m, 4, 2, "median")
        self.assertIn("frames, window, mean, last", str(e))
        self.raises(_lib.E_INVAL, sattn.Stream, m, 4, start="later")
        self.raises(_lib.E_INVAL, sattn.Stream, m, 4, invalid="ignore")
        self.raises(_lib.E_INVAL, sattn.Stream(m, 4).last_weights)

    def test_shapes(self):
        m = sattn.Model(8, 2)
        s = sattn.Stream(m, 4, 2)
        e = self.raises(_lib.E_SHAPE, s.push, np.zeros((3, 7), np.float32))
        self.assertIn("d_model = 8", str(e))
        self.raises(_lib.E_SHAPE, s.push, np.zeros((3, 8)), valid=[1, 1])
        self.raises(_lib.E_SHAPE, sattn.attend, m, np.zeros((3, 8)),
                    key_valid=[1])
        self.raises(_lib.E_SHAPE, sattn.attend, m, np.zeros((3, 8)),
                    allow=np.ones((3, 2)))
        self.raises(_lib.E_INVAL, sattn.attend, m, "not numbers")
        # nothing consumed by the refused pushes
        self.assertEqual(s.frames, 0)

    def test_push_stops_at_bad_frame(self):
        m = sattn.Model(8, 2)
        s = sattn.Stream(m, 4, 2, invalid="error")
        x = np.ones((7, 8), np.float32)
        x[5, 2] = np.inf
        e = self.raises(_lib.E_NONFINITE, s.push, x)
        words = _lib.sattn_frame_fault_string(
            _lib.FRAME_FAULTS["nonfinite"]).decode()
        self.assertEqual(str(e), "frame 5 " + words)
        self.assertEqual((e.frame, e.fault), (5, "nonfinite"))
        # the frames before it were consumed and their rows returned
        self.assertEqual(s.frames, 5)
        self.assertEqual(list(e.info["first"]), [0, 1, 2, 3])
        self.assertEqual(e.rows.shape, (4, 8))
        # the stream goes on from the frame after the bad one
        rows, info = s.push(x[6:])
        self.assertEqual(list(info["first"]), [4, 5])
        s.set_invalid_policy("mask")
        rows, info = s.push(x[5:])
        self.assertEqual(list(info["valid"]), [0, 1])

    def test_every_failure_is_sattn_error(self):
        # Failures Python itself would report (numpy's MemoryError, a
        # TypeError from a path, a silent complex cast) are SattnErrors
        # that are also the builtin a caller may already catch, with words
        # that name the argument and its value.
        m = sattn.Model(8, 2)
        s = sattn.Stream(m, 4, 2)
        # a broadcast view of 2**40 frames: no memory for its float32 copy
        huge = np.broadcast_to(np.zeros(8), (2 ** 40, 8))
        e = self.raises(_lib.E_NOMEM, s.push, huge)
        self.assertIsInstance(e, MemoryError)
        self.assertIn("frames", str(e))
        self.assertIn("(1099511627776, 8)", str(e))
        e = self.raises(_lib.E_NOMEM, sattn.attend, m, huge)
        self.assertIsInstance(e, MemoryError)
        self.assertIn("x", str(e))
        # a path that is not a file name
        e = self.raises(_lib.E_INVAL, sattn.Model.from_safetensors, 3)
        self.assertIsInstance(e, TypeError)
        self.assertIn("path=3", str(e))
        self.assertIn("int", str(e))
        e = self.raises(_lib.E_INVAL, sattn.Model.from_safetensors,
                        "x.safetensors", 4)
        self.assertIsInstance(e, TypeError)
        self.assertIn("prefix=4", str(e))
        # whole numbers that are not numbers
        e = self.raises(_lib.E_INVAL, sattn.Model, 8, "two")
        self.assertIsInstance(e, ValueError)
        self.assertIn("heads='two'", str(e))
        e = self.raises(_lib.E_INVAL, sattn.Stream, m, None)
        self.assertIsInstance(e, TypeError)
        self.assertIn("window=None", str(e))
        # complex input is refused, not cast to its real part
        z = np.ones((4, 8), np.complex64)
        for fn, args, name in ((s.push, (z,), "frames"),
                               (sattn.attend, (m, z), "x")):
            e = self.raises(_lib.E_DTYPE, fn, *args)
            self.assertIsInstance(e, TypeError)
            self.assertIn(name, str(e))
            self.assertIn("complex64", str(e))
        e = self.raises(_lib.E_DTYPE, sattn.Model, 8, 2,
                        wq=np.eye(8, dtype=complex))
        self.assertIn("wq", str(e))
        self.assertIn("complex128", str(e))
        self.assertEqual(s.frames, 0)
        # attend needs a frame
        e = self.raises(_lib.E_INVAL, sattn.attend, m, np.zeros((0, 8)))
        self.assertIn("x has 0 frames", str(e))
        self.assertNotIn("NULL pointer", str(e))
        # the objects stay usable
        self.assertEqual(s.push(np.ones((4, 8)))[0].shape, (4, 8))
        self.assertEqual(sattn.attend(m, np.ones((3, 8))).shape, (3, 8))


if __name__ == "__main__":
    unittest.main(verbosity=2)
