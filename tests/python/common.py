# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shared pieces of the Python package tests: the float64 reference every
suite shares (tests/common/reference.c, written from the formula, no code
shared with libsattn; built as a small shared library for these tests and
called through ctypes), random models, and the error measures every test
reports.

reference() takes the same weights as sattn.Model (numpy, PyTorch layout)
and resolves the dimensions as sattn.h documents them: d_head from wq's
rows (else d_model / heads), d_value from wv's (else d_head), d_out from
wo's (else heads * d_value), scale 0 = 1 / sqrt(d_head); and a row of x
with NaN/Inf samples gets a zero output row (query_valid 0), as sattn.h's
frame rule says (the reference hides such a row as a key by itself).
"""

import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np

BUILD_ROOT = os.environ.get("SATTN_BUILD_ROOT", "")
SOURCE_ROOT = os.environ.get(
    "SATTN_SOURCE_ROOT",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# Bounds, shared with tests/core (test-attend.c, test-stream.c):
#   output:  max |got - ref| <= 1e-5 * (1 + max |ref|) and NMSE <= 1e-10
#   weights: max |got - ref| <= 1e-5 (weights lie in [0, 1])
OUT_REL_BOUND = 1e-5
NMSE_BOUND = 1e-10
WEIGHT_BOUND = 1e-5

# ------------------------------------------- tests/common/reference.h

_fp = ctypes.POINTER(ctypes.c_float)
_dp = ctypes.POINTER(ctypes.c_double)
_u8p = ctypes.POINTER(ctypes.c_uint8)


class RefModel(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("d_model", "heads", "d_head", "d_value", "d_out")] + [
        ("scale", ctypes.c_double),
        ("causal", ctypes.c_int),
        ("lookback", ctypes.c_size_t)] + [
        (f, _fp) for f in ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
                           "bias_k", "bias_v")] + [
        ("add_zero_attn", ctypes.c_int),
        ("f32_scores", ctypes.c_int),
        ("positions", ctypes.c_int),
        ("rope_base", ctypes.c_double),
        ("pos0", ctypes.c_uint64)]


class RefStats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("rows", "fully_masked", "nonfinite")] + [
        (f, ctypes.c_double) for f in
        ("score_min", "score_max", "lse_min", "lse_max", "max_weight_sum",
         "entropy_sum")] + [
        (f, ctypes.c_size_t) for f in ("saturated", "sat_lo", "sat_hi")] + [
        ("sat_margin", ctypes.c_double),
        ("sat_threshold", ctypes.c_double)]


# Mirrored structs of the reference, by C name (test_layout.py).
REF_STRUCTS = {"RefModel": RefModel, "RefStats": RefStats}

_ref = None


def _ref_lib():
    global _ref
    if _ref is None:
        path = os.environ.get("SATTN_TEST_REFERENCE")
        if not path:
            raise RuntimeError("SATTN_TEST_REFERENCE is not set (the "
                               "tests/common reference as a shared library)")
        _ref = ctypes.CDLL(path)
        _ref.ref_attend.restype = None
        _ref.ref_attend.argtypes = [
            ctypes.POINTER(RefModel), _fp, ctypes.c_size_t, _u8p, _u8p, _u8p,
            _dp, _dp, ctypes.POINTER(RefStats)]
        _ref.ref_extra_keys.restype = ctypes.c_size_t
        _ref.ref_extra_keys.argtypes = [ctypes.POINTER(RefModel)]
    return _ref


def _mask(a, n):
    if a is None:
        return None
    return np.ascontiguousarray(np.asarray(a).reshape(-1) != 0, np.uint8)


# RefModel.positions: the values of SattnPositions (reference.h)
REF_POSITIONS = {"none": 0, "rope": 1, "rope-interleaved": 2, "alibi": 3}


def reference(x, heads, w=None, d_head=None, d_value=None, scale=None,
              causal=False, lookback=0, key_valid=None, query_valid=None,
              allow=None, positions="none", rope_base=10000.0, pos0=0):
    """ref_attend of tests/common/reference.c: returns (out, weights) in
    float64, n × d_out and heads × n × (n + extra keys).  w: dict of
    arrays (PyTorch layout) and add_zero_attn, any of them absent;
    positions at absolute frame indices pos0, pos0 + 1, ..."""
    lib = _ref_lib()
    w = w or {}
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, e = x.shape
    keep = {k: np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
            for k, v in w.items() if k != "add_zero_attn" and v is not None}
    rows = {k: np.shape(w[k])[0] for k in ("wq", "wv", "wo")
            if w.get(k) is not None}
    m = RefModel()
    m.d_model, m.heads = e, heads
    m.d_head = d_head or (rows["wq"] // heads if "wq" in rows else e // heads)
    m.d_value = d_value or (rows["wv"] // heads if "wv" in rows
                            else m.d_head)
    m.d_out = rows.get("wo", heads * m.d_value)
    m.scale = scale if scale else 1.0 / np.sqrt(m.d_head)
    m.causal = 1 if causal else 0
    m.lookback = lookback
    m.positions = REF_POSITIONS[positions]
    m.rope_base = rope_base
    m.pos0 = pos0
    for k, a in keep.items():
        setattr(m, k, a.ctypes.data_as(_fp))
    m.add_zero_attn = 1 if w.get("add_zero_attn") else 0
    extra = lib.ref_extra_keys(ctypes.byref(m))
    out = np.zeros((n, m.d_out))
    wts = np.zeros((heads, n, n + extra))
    # sattn.h's frame rule for queries: a row with NaN/Inf samples has a
    # zero output row (the reference itself hides it as a key only)
    qv = np.isfinite(x).all(axis=1)
    if query_valid is not None:
        qv &= np.asarray(query_valid).reshape(-1) != 0
    masks = [_mask(key_valid, n), _mask(qv, n), _mask(allow, n * n)]
    lib.ref_attend(ctypes.byref(m), x.ctypes.data_as(_fp), n,
                   *[None if a is None else a.ctypes.data_as(_u8p)
                     for a in masks],
                   out.ctypes.data_as(_dp), wts.ctypes.data_as(_dp), None)
    return out, wts


def random_weights(rng, d_model, heads, d_head, d_value, d_out, proj=True,
                   bias=True, out=True, bo=True, biaskv=False, zero=False):
    """Weights ~ N(0, 1/fan_in) (PyTorch's default scale), biases
    ~ N(0, 0.25), bias_k / bias_v ~ N(0, 1); float32."""
    def normal(shape, sigma):
        return (rng.standard_normal(shape) * sigma).astype(np.float32)
    dq, dvt = heads * d_head, heads * d_value
    w = {}
    if proj:
        for k, rows in (("wq", dq), ("wk", dq), ("wv", dvt)):
            w[k] = normal((rows, d_model), 1 / np.sqrt(d_model))
    if bias:
        for k, rows in (("bq", dq), ("bk", dq), ("bv", dvt)):
            w[k] = normal(rows, 0.5)
    if out:
        w["wo"] = normal((d_out, dvt), 1 / np.sqrt(dvt))
    if bo:
        w["bo"] = normal(d_out, 0.5)
    if biaskv:
        w["bias_k"] = normal(dq, 1.0)
        w["bias_v"] = normal(dvt, 1.0)
    w["add_zero_attn"] = zero
    return w


class Diff:
    """max-abs, max |ref|, NMSE and the relative figure
    max-rel = max-abs / max |ref| of one comparison."""

    def __init__(self, got, ref):
        got = np.asarray(got, np.float64)
        ref = np.asarray(ref, np.float64)
        assert got.shape == ref.shape, (got.shape, ref.shape)
        d = np.abs(got - ref)
        self.max_abs = float(d.max()) if d.size else 0.0
        if np.isnan(d).any():
            self.max_abs = float("inf")
        self.max_ref = float(np.abs(ref).max()) if ref.size else 0.0
        r2 = float((ref ** 2).sum())
        e2 = float(((got - ref) ** 2).sum())
        self.nmse = e2 / r2 if r2 > 0 else e2
        self.max_rel = self.max_abs / self.max_ref if self.max_ref > 0 \
            else self.max_abs

    def out_ok(self):
        return (self.max_abs <= OUT_REL_BOUND * (1 + self.max_ref)
                and self.nmse <= NMSE_BOUND)

    def __str__(self):
        return "max-abs %.3g  max-rel %.3g  NMSE %.3g (max |ref| %.3g)" % (
            self.max_abs, self.max_rel, self.nmse, self.max_ref)


class Worst:
    """The worst figures over many comparisons, printed at the end."""

    def __init__(self, what):
        self.what = what
        self.max_abs = self.max_rel = self.nmse = 0.0
        self.count = 0

    def add(self, d):
        self.max_abs = max(self.max_abs, d.max_abs)
        self.max_rel = max(self.max_rel, d.max_rel)
        self.nmse = max(self.nmse, d.nmse)
        self.count += 1

    def report(self):
        print("# %s: %d comparisons, worst max-abs %.3g, max-rel %.3g, "
              "NMSE %.3g" % (self.what, self.count, self.max_abs,
                             self.max_rel, self.nmse))
        sys.stdout.flush()


class RaisesStatus:
    """unittest.TestCase mixin: raises(status, fn, *args, **kw) asserts
    that fn(*args, **kw) raises sattn.SattnError with that status, its
    name and a message, and returns the exception."""

    def raises(self, status, fn, *args, **kw):
        import sattn
        from sattn import _lib
        with self.assertRaises(sattn.SattnError) as cm:
            fn(*args, **kw)
        e = cm.exception
        self.assertEqual(e.status, status, str(e))
        self.assertEqual(e.status_name, _lib.STATUS_NAMES[status])
        self.assertTrue(str(e), "empty message")
        return e


def write_safetensors(path, tensors, metadata=None):
    """A safetensors file of float32 tensors, through the package's one
    writer (sattn.stfile)."""
    from sattn import stfile
    stfile.write(path, tensors, metadata)


# ------------------------------------------------- bounded subprocesses

# Seconds a command run by run_bounded may take (a gst-launch-1.0 line of
# these tests takes well under one); well below each test's meson timeout.
RUN_BOUND = 60


def backtraces(pid):
    """Every thread's backtrace of process pid (gdb -p), as text; or why
    there is none."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(gdb is not installed: no backtraces)"
    try:
        r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-q",
                            "-ex", "set pagination off",
                            "-ex", "info threads",
                            "-ex", "thread apply all bt"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        return r.stdout
    except subprocess.TimeoutExpired as e:
        return "(gdb did not finish within 30 s)\n" + (e.output or "")


class Hang(AssertionError):
    """A command still running at its bound (run_bounded)."""


def run_bounded(cmd, timeout=RUN_BOUND, **kw):
    """subprocess.run(cmd, capture_output=True, text=True, **kw) (kw may
    name stdout and stderr, e.g. stderr=subprocess.STDOUT) that
    fails as a hang: a command still running after timeout seconds gets
    gdb attached (every thread's backtrace) before it is killed, and
    raises Hang, whose message starts with "HANG:" and holds the
    backtraces and what the command printed so far.  Returns the
    CompletedProcess otherwise, whatever its exit status."""
    kw.setdefault("text", True)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = backtraces(p.pid)
            p.kill()
            out, err = p.communicate()
            msg = ("HANG: still running after %g s, killed: %s\n"
                   "---- every thread's backtrace\n%s\n"
                   "---- its stdout so far\n%s\n---- its stderr so far\n%s"
                   % (timeout, " ".join(map(str, cmd)), stacks, out, err))
            print(msg, file=sys.stderr, flush=True)
            raise Hang(msg) from None
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)
