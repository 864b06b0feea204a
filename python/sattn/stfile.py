# SPDX-License-Identifier: LGPL-2.1-or-later
"""The project's one safetensors writer for Python (the package, the
tests, the examples and the fixture generator all write through it).

The format: an 8-byte little-endian header length, a JSON header (each
tensor's dtype, shape and data_offsets; the optional "__metadata__" map of
strings), padded with spaces to a multiple of 8 bytes so that the data is
aligned, then the tensors' little-endian bytes in the header's order.
numpy only: callers with torch tensors pass their bytes (write_raw) or
arrays (write)."""
import json
import os
import struct

import numpy as np

# numpy dtypes written as themselves (little-endian); anything else is
# written as F32
_DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64",
           np.dtype("float16"): "F16", np.dtype("int64"): "I64",
           np.dtype("int32"): "I32"}


def write_raw(path, entries, metadata=None, atomic=False):
    """entries: (name, dtype name, shape, little-endian bytes) in file
    order; metadata: {key: value}, written as strings.  atomic: write
    path + ".tmp" and rename it over path."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": [int(s) for s in shape],
                        "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    dst = path + ".tmp" if atomic else path
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for e in entries:
            f.write(e[3])
    if atomic:
        os.replace(dst, path)


def write(path, tensors, metadata=None, keep_dtype=False):
    """tensors: {name: array-like} in file order, written as F32 (or, with
    keep_dtype, as F64 / F16 / I64 / I32 when that is the array's dtype);
    metadata: {key: value}."""
    entries = []
    for name, a in tensors.items():
        a = np.asarray(a)
        dt = _DTYPES.get(a.dtype) if keep_dtype else None
        if dt is None:
            a, dt = a.astype(np.float32), "F32"
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        entries.append((name, dt, a.shape, a.tobytes()))
    write_raw(path, entries, metadata)
