# SPDX-License-Identifier: LGPL-2.1-or-later
"""The ctypes mirrors of python/sattn/_lib.py (and of the shared float64
reference's structs, tests/python/common.py) against the C compiler's
layout of the same structs (tests/python/struct-layout.c, built from the
headers): sizes, field names, offsets and sizes, and the enum values the
package names.  A field added to, removed from, moved or retyped in
sattn.h (or reference.h) without the same change in the mirror fails here.

Usage: test_layout.py STRUCT-LAYOUT-PROGRAM"""

import ctypes
import json
import os
import subprocess
import sys
import unittest

import common
from sattn import _lib

LAYOUT_PROGRAM = None
ALL_STRUCTS = dict(_lib.STRUCTS, **common.REF_STRUCTS)


def c_layout():
    out = subprocess.run([LAYOUT_PROGRAM], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def mirror_layout(cls):
    fields = {}
    for name, _ in cls._fields_:
        f = getattr(cls, name)
        fields[name] = [f.offset, f.size]
    return {"size": ctypes.sizeof(cls), "fields": fields}


def mismatches(c, structs):
    """Every difference between the C layout c and the mirrors, as text."""
    bad = []
    if set(c["structs"]) != set(structs):
        bad.append("structs: C %s, mirrors %s"
                   % (sorted(c["structs"]), sorted(structs)))
    for name, cls in structs.items():
        want = c["structs"].get(name)
        if want is None:
            continue
        got = mirror_layout(cls)
        if got["size"] != want["size"]:
            bad.append("%s: sizeof %d in C, %d in ctypes"
                       % (name, want["size"], got["size"]))
        if list(got["fields"]) != list(want["fields"]):
            bad.append("%s: fields %s in C, %s in ctypes"
                       % (name, list(want["fields"]), list(got["fields"])))
        for f, pos in want["fields"].items():
            if f in got["fields"] and got["fields"][f] != pos:
                bad.append("%s.%s: [offset, size] %s in C, %s in ctypes"
                           % (name, f, pos, got["fields"][f]))
    return bad


def mirror_enums():
    e = {"SATTN_OK": _lib.OK}
    for k, v in _lib.STATUS_NAMES.items():
        e[v] = k
    for prefix, table in (("SATTN_OUTPUT_", _lib.OUTPUT_MODES),
                          ("SATTN_START_", _lib.START_POLICIES),
                          ("SATTN_INVALID_", _lib.INVALID_POLICIES),
                          ("SATTN_PRECISION_", _lib.PRECISIONS),
                          ("SATTN_FRAME_", _lib.FRAME_FAULTS),
                          ("SATTN_FROM_", _lib.SOURCES),
                          ("SATTN_POSITIONS_", _lib.POSITIONS),
                          ("SATTN_ACTIVATION_", _lib.ACTIVATIONS),
                          ("SATTN_MODEL_", _lib.MODEL_KINDS),
                          ("SATTN_POOLING_", _lib.POOLINGS)):
        for k, v in table.items():
            e[prefix + k.upper().replace("-", "_")] = v
    for k, v in _lib.CONTRACT_BITS.items():
        e["SATTN_CONTRACT_" + k.upper()] = v
    for k, v in _lib.OUTSIDE_BITS.items():
        e["SATTN_OUTSIDE_" + k.upper()] = v
    # SattnLoadOptions.set bits
    for k in ("ACTIVATION", "NORM_FIRST", "NORM_EPS", "POSITIONS",
              "ROPE_BASE", "CAUSAL"):
        e["SATTN_SET_" + k] = getattr(_lib, "SET_" + k)
    return e


class TestLayout(unittest.TestCase):
    def test_structs(self):
        self.assertEqual(mismatches(c_layout(), ALL_STRUCTS), [])

    def test_enums(self):
        c = c_layout()
        self.assertEqual(c["enum_size"], ctypes.sizeof(ctypes.c_int))
        self.assertEqual(mirror_enums(), c["enums"])

    def test_soname(self):
        # the mirrors are of this soname's structs: the package asks for
        # libsattn.so.<SATTN_VERSION_MAJOR> and the library loaded is one
        c = c_layout()
        self.assertEqual(_lib.SONAME_MAJOR, c["version_major"])
        self.assertIn("libsattn.so.%d" % c["version_major"],
                      os.path.basename(_lib.lib._name))

    def test_sized_structs_say_their_size(self):
        # a new mirror of a struct that carries its size fills it in
        for cls in (_lib.SattnConfig, _lib.SattnWeights,
                    _lib.SattnStreamConfig):
            self.assertEqual(cls().struct_size, ctypes.sizeof(cls))

    def test_a_layout_change_is_caught(self):
        # the comparison itself: a mirror with two fields swapped, one
        # with a field missing, and one with a field of the wrong type
        c = c_layout()
        f = list(_lib.SattnStreamConfig._fields_)
        swapped = type("SattnStreamConfig", (ctypes.Structure,),
                       {"_fields_": [f[1], f[0]] + f[2:]})
        missing = type("SattnStreamConfig", (ctypes.Structure,),
                       {"_fields_": f[:-1]})
        retyped = type("SattnStreamConfig", (ctypes.Structure,),
                       {"_fields_": f[:2] + [(f[2][0], ctypes.c_uint8)]
                        + f[3:]})
        for cls in (swapped, missing, retyped):
            structs = dict(ALL_STRUCTS, SattnStreamConfig=cls)
            self.assertNotEqual(mismatches(c, structs), [])


if __name__ == "__main__":
    LAYOUT_PROGRAM = sys.argv.pop(1)
    unittest.main(verbosity=2)
