"""Shared pieces of the Python package tests: an independent float64
reference of the attention, written here from the formula with numpy (no
code shared with libsattn or the package), random models, and the error
measures every test reports.

Reference, per head h (columns [h*d_head, (h+1)*d_head) of Q and K,
[h*d_value, (h+1)*d_value) of V, as torch.nn.MultiheadAttention splits):
    Q = x Wq^T + bq, K = x Wk^T + bk, V = x Wv^T + bv   (W None = identity)
    extra keys, always visible: bias_k / bias_v, then a zero key / value
    s_ij = scale * Q_i . K_j, softmax over the keys visible to query i
    (key_valid[j] != 0, row j finite, allow[i, j] != 0, causal: j <= i,
    lookback L > 0: i - j <= L), in float64 with the row max subtracted;
    no visible key: a zero row
    out_i = concat_h(P_i V) Wo^T + bo
    out_i = 0 (and P_i = 0) when query_valid[i] == 0 or row i is not finite
"""

import os
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


def reference(x, heads, w=None, d_head=None, d_value=None, scale=None,
              causal=False, lookback=0, key_valid=None, query_valid=None,
              allow=None):
    """Returns (out, weights) in float64: n × d_out and
    heads × n × (n + extra keys).  w: dict of float arrays (PyTorch layout)
    and add_zero_attn, any of them absent."""
    w = w or {}
    x = np.asarray(x, dtype=np.float64)
    n, e = x.shape
    finite = np.isfinite(x).all(axis=1)
    xs = np.where(finite[:, None], x, 0.0)

    def proj(wk, bk):
        y = xs @ np.asarray(w[wk], np.float64).T if w.get(wk) is not None \
            else xs.copy()
        if w.get(bk) is not None:
            y = y + np.asarray(w[bk], np.float64).reshape(-1)
        return y

    q, k, v = proj("wq", "bq"), proj("wk", "bk"), proj("wv", "bv")
    dh = d_head or q.shape[1] // heads
    dv = d_value or v.shape[1] // heads
    if w.get("bias_k") is not None:
        k = np.vstack([k, np.asarray(w["bias_k"], np.float64).reshape(1, -1)])
        v = np.vstack([v, np.asarray(w["bias_v"], np.float64).reshape(1, -1)])
    if w.get("add_zero_attn"):
        k = np.vstack([k, np.zeros((1, k.shape[1]))])
        v = np.vstack([v, np.zeros((1, v.shape[1]))])
    nk = k.shape[0]
    if scale is None or scale == 0:
        scale = 1.0 / np.sqrt(dh)

    qv = np.ones(n, bool) if query_valid is None \
        else np.asarray(query_valid) != 0
    qv &= finite
    kv = np.ones(n, bool) if key_valid is None else np.asarray(key_valid) != 0
    kv &= finite
    vis = np.ones((n, nk), bool)
    vis[:, :n] &= kv[None, :]
    if allow is not None:
        vis[:, :n] &= np.asarray(allow).reshape(n, n) != 0
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    if causal:
        vis[:, :n] &= j <= i
    if lookback:
        vis[:, :n] &= (i - j) <= lookback

    o = np.zeros((n, heads * dv))
    p_all = np.zeros((heads, n, nk))
    for h in range(heads):
        s = scale * (q[:, h * dh:(h + 1) * dh] @ k[:, h * dh:(h + 1) * dh].T)
        s = np.where(vis, s, -np.inf)
        for r in range(n):
            if not qv[r] or not vis[r].any():
                continue
            z = np.exp(s[r] - s[r][vis[r]].max())
            p_all[h, r] = z / z.sum()
        o[:, h * dv:(h + 1) * dv] = p_all[h] @ v[:, h * dv:(h + 1) * dv]
    out = o @ np.asarray(w["wo"], np.float64).T if w.get("wo") is not None \
        else o
    if w.get("bo") is not None:
        out = out + np.asarray(w["bo"], np.float64).reshape(-1)
    out[~qv] = 0.0
    return out, p_all


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
