# SPDX-License-Identifier: LGPL-2.1-or-later
"""ONNX files of the whole-model family (as torch.onnx.export writes them,
opsets 14-17) for the export tool: a small numpy evaluator of the
operations such a graph uses, and the mapping of the graph's parameters
onto sattn.nn.SignalTransformer (docs/models.md).

read(path) evaluates the graph (float64) on probe windows, lists every
operation that takes both a value computed from the input and a constant
held by the file (an initializer: a weight), in graph order, and parses
that list as the family:

  [Sub mean] [Div std] -> Conv | MatMul/Gemm (+ Add bias) -> [Concat CLS]
  -> [Add positions] -> N x layer (post-norm: in_proj, out_proj, norm1,
  linear1, linear2, norm2; pre-norm: norm1, in_proj, out_proj, norm2,
  linear1, linear2) -> [final norm] -> [pool Linear(D, 1)] -> [head]

The choices the weights do not show (heads, activation, pooling, the
input normalisation and its eps) are read from the graph's numbers: the
canonical module is run with each and must give the graph's output in
float64.  An operation outside the evaluator's list, or a weight the
mapping does not use, is refused with its name.

Needs python3-onnx (to parse the file) and numpy; never onnxruntime.
"""

import copy
import itertools
import math

import numpy as np
import torch

from sattn.nn import SignalTransformer
from sattn import whole

OPS = ("MatMul", "Gemm", "Add", "Mul", "Div", "Sub", "Sqrt", "Pow",
       "ReduceMean", "ReduceMax", "ReduceSum", "Softmax", "Transpose",
       "Reshape", "Concat", "Gather", "Slice", "LayerNormalization", "Relu",
       "Gelu", "Erf", "Conv", "Unsqueeze", "Squeeze", "Shape", "Constant",
       "Where", "Equal", "Expand", "Split", "Cast", "Identity",
       "ConstantOfShape", "Dropout", "Flatten", "ArgMax", "Range", "Neg",
       "Reciprocal", "Max", "Min", "Less", "Greater", "Not", "Tile")
# evaluated, but not in a model of the family
NOT_FAMILY = {"Reciprocal": "1/x"}

_NP = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16,
       11: np.float64}


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise whole.NotRepresentable(
            "reading an ONNX file needs the onnx package (Debian: apt "
            "install python3-onnx)") from None
    return onnx, numpy_helper


def _attrs(node):
    onnx, nh = _onnx()
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        if a.type == onnx.AttributeProto.TENSOR:
            v = nh.to_array(v)
        out[a.name] = v
    return out


def _axes(node, inputs, i, attrs, name="axes"):
    if len(inputs) > i and inputs[i] is not None:
        return [int(a) for a in np.asarray(inputs[i]).reshape(-1)]
    if name in attrs:
        return [int(a) for a in attrs[name]]
    return None


def _slice(x, starts, ends, axes, steps):
    sl = [slice(None)] * x.ndim
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[a] = slice(int(max(min(s, 2**62), -2**62)),
                      int(max(min(e, 2**62), -2**62)), int(st))
    return x[tuple(sl)]


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x):
    return _ERF(x).astype(x.dtype)


def run_node(op, a, inp, dt):
    """One ONNX operation on numpy inputs; returns a list of outputs."""
    x = inp[0] if inp else None
    if op == "Identity" or op == "Dropout":
        return [x]
    if op == "Constant":
        v = a.get("value")
        if v is None:
            v = np.asarray(a.get("value_float", a.get("value_int")))
        return [v.astype(dt) if v.dtype.kind == "f" else v]
    if op == "MatMul":
        return [np.matmul(x, inp[1])]
    if op == "Gemm":
        A, B = inp[0], inp[1]
        if a.get("transA"):
            A = A.T
        if a.get("transB"):
            B = B.T
        y = a.get("alpha", 1.0) * (A @ B)
        if len(inp) > 2 and inp[2] is not None:
            y = y + a.get("beta", 1.0) * inp[2]
        return [y]
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater",
              "Max", "Min"):
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
             "Div": None, "Pow": np.power, "Equal": np.equal,
             "Less": np.less, "Greater": np.greater, "Max": np.maximum,
             "Min": np.minimum}[op]
        if op == "Div":
            if x.dtype.kind in "iu" and inp[1].dtype.kind in "iu":
                return [x // inp[1]]
            return [x / inp[1]]
        return [f(x, inp[1])]
    if op == "Sqrt":
        return [np.sqrt(x)]
    if op == "Neg":
        return [-x]
    if op == "Reciprocal":
        return [1.0 / x]
    if op == "Not":
        return [np.logical_not(x)]
    if op == "Erf":
        return [_erf(x)]
    if op == "Relu":
        return [np.maximum(x, 0)]
    if op == "Gelu":
        return [0.5 * x * (1 + _erf(x / math.sqrt(2)))]
    if op in ("ReduceMean", "ReduceMax", "ReduceSum"):
        ax = _axes(None, inp, 1, a)
        keep = bool(a.get("keepdims", 1))
        f = {"ReduceMean": np.mean, "ReduceMax": np.max,
             "ReduceSum": np.sum}[op]
        return [f(x, axis=None if ax is None else tuple(ax), keepdims=keep)]
    if op == "ArgMax":
        y = np.argmax(x, axis=a.get("axis", 0))
        if a.get("keepdims", 1):
            y = np.expand_dims(y, a.get("axis", 0))
        return [y.astype(np.int64)]
    if op == "Softmax":
        ax = a.get("axis", -1)
        m = np.max(x, axis=ax, keepdims=True)
        e = np.exp(x - m)
        return [e / e.sum(axis=ax, keepdims=True)]
    if op == "Transpose":
        return [np.transpose(x, a.get("perm"))]
    if op == "Reshape":
        shape = [int(s) for s in inp[1]]
        shape = [x.shape[i] if s == 0 and not a.get("allowzero") else s
                 for i, s in enumerate(shape)]
        return [np.reshape(x, shape)]
    if op == "Flatten":
        ax = a.get("axis", 1)
        return [x.reshape(int(np.prod(x.shape[:ax])), -1)]
    if op == "Concat":
        return [np.concatenate(inp, axis=a["axis"])]
    if op == "Gather":
        return [np.take(x, inp[1].astype(np.int64), axis=a.get("axis", 0))]
    if op == "Slice":
        return [_slice(x, inp[1], inp[2], _axes(None, inp, 3, {}),
                       _axes(None, inp, 4, {}))]
    if op == "LayerNormalization":
        ax = a.get("axis", -1)
        eps = a.get("epsilon", 1e-5)
        axes = tuple(range(ax % x.ndim, x.ndim))
        mu = x.mean(axis=axes, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mu) / np.sqrt(var + eps) * inp[1]
        if len(inp) > 2 and inp[2] is not None:
            y = y + inp[2]
        return [y]
    if op == "Conv":
        W = inp[1]
        b = inp[2] if len(inp) > 2 and inp[2] is not None else None
        if x.ndim != 3:
            raise whole.NotRepresentable("a Conv over %d dimensions: sattn "
                                         "runs a 1-D conv" % (x.ndim - 2))
        s = a.get("strides", [1])[0]
        d = a.get("dilations", [1])[0]
        p = a.get("pads", [0, 0])
        if a.get("group", 1) != 1:
            raise whole.NotRepresentable("a grouped Conv (group %d)"
                                         % a["group"])
        xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[1])))
        K = W.shape[2]
        T = (xp.shape[2] - d * (K - 1) - 1) // s + 1
        cols = np.stack([xp[:, :, k * d: k * d + s * (T - 1) + 1: s]
                         for k in range(K)], axis=-1)  # B, C, T, K
        y = np.einsum("bctk,ock->bot", cols, W)
        if b is not None:
            y = y + b[None, :, None]
        return [y]
    if op == "Unsqueeze":
        ax = _axes(None, inp, 1, a)
        y = x
        for i in sorted(ax):
            y = np.expand_dims(y, i if i >= 0 else i + y.ndim + 1)
        return [y]
    if op == "Squeeze":
        ax = _axes(None, inp, 1, a)
        return [np.squeeze(x, axis=None if ax is None else tuple(ax))]
    if op == "Shape":
        return [np.array(x.shape, np.int64)]
    if op == "ConstantOfShape":
        v = a.get("value")
        v = np.zeros(1, np.float32) if v is None else v
        return [np.full([int(s) for s in x], v.reshape(-1)[0],
                        dtype=v.dtype)]
    if op == "Where":
        return [np.where(x, inp[1], inp[2])]
    if op == "Expand":
        shape = [int(s) for s in inp[1]]
        return [x * np.ones(shape, dtype=x.dtype)]
    if op == "Tile":
        return [np.tile(x, [int(s) for s in inp[1]])]
    if op == "Range":
        return [np.arange(x, inp[1], inp[2])]
    if op == "Split":
        ax = a.get("axis", 0)
        sp = inp[1] if len(inp) > 1 and inp[1] is not None else a.get("split")
        if sp is None:
            return list(np.split(x, a["_nout"], axis=ax))
        idx = np.cumsum([int(v) for v in sp])[:-1]
        return list(np.split(x, idx, axis=ax))
    if op == "Cast":
        to = _NP.get(a["to"])
        if to is None:
            raise whole.NotRepresentable("a Cast to ONNX type %d" % a["to"])
        if to in (np.float32, np.float16):
            to = dt   # the evaluation's precision
        return [x.astype(to)]
    raise whole.NotRepresentable("the ONNX graph uses %s, which sattn does "
                                 "not run" % op)


class Graph:
    """An ONNX graph, evaluated in float64 or float32 by run()."""

    def __init__(self, path):
        onnx, nh = _onnx()
        try:
            m = onnx.load(path)
        except Exception as e:  # noqa: BLE001
            raise whole.NotRepresentable("cannot read %s as ONNX: %s"
                                         % (path, e)) from None
        g = m.graph
        self.opset = max([o.version for o in m.opset_import
                          if o.domain in ("", "ai.onnx")] or [0])
        self.inits = {i.name: nh.to_array(i) for i in g.initializer}
        self.nodes = list(g.node)
        self.attrs = [_attrs(n) for n in self.nodes]
        for n, a in zip(self.nodes, self.attrs):
            a["_nout"] = len(n.output)
        names = set(self.inits)
        self.inputs = [i.name for i in g.input if i.name not in names]
        self.outputs = [o.name for o in g.output]
        bad = sorted(set(n.op_type for n in self.nodes if n.domain not in
                         ("", "ai.onnx") or n.op_type not in OPS))
        if bad:
            raise whole.NotRepresentable(
                "the ONNX graph uses %s, which sattn does not run; %s"
                % (", ".join(bad), whole.FAMILY))
        for n in self.nodes:
            if n.op_type in NOT_FAMILY:
                raise whole.NotRepresentable(
                    "the ONNX graph uses %s (%s) on %s, which sattn does not"
                    " run; %s" % (n.op_type, NOT_FAMILY[n.op_type],
                                  n.input[0], whole.FAMILY))
        if len(self.inputs) != 1:
            raise whole.NotRepresentable(
                "the ONNX graph takes %d inputs (%s): sattn feeds a model "
                "one window of frames" % (len(self.inputs),
                                          ", ".join(self.inputs)))
        if len(self.outputs) != 1:
            raise whole.NotRepresentable("the ONNX graph has %d outputs"
                                         % len(self.outputs))

    def run(self, x, dt=np.float64, keep_all=False):
        env = {}
        for k, v in self.inits.items():
            env[k] = v.astype(dt) if v.dtype.kind == "f" else v
        env[self.inputs[0]] = x.astype(dt)
        for n, a in zip(self.nodes, self.attrs):
            inp = [env[i] if i else None for i in n.input]
            outs = run_node(n.op_type, a, inp, dt)
            for name, v in zip(n.output, outs):
                if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                    v = v.astype(dt)
                env[name] = v
        return env if keep_all else env[self.outputs[0]]


class OnnxModule(torch.nn.Module):
    """The graph as a module for sattn.whole.verify(): forward(x) evaluates
    it with numpy in the dtype of the module (float64 after .double())."""

    def __init__(self, graph):
        super().__init__()
        self.graph = graph
        self.register_buffer("_dtype", torch.zeros(1))

    def forward(self, x):
        dt = np.float64 if self._dtype.dtype == torch.float64 else np.float32
        y = self.graph.run(x.detach().cpu().numpy(), dt)
        return torch.from_numpy(np.asarray(y)).to(self._dtype.dtype)

    def parameters(self, recurse=True):
        yield self._dtype


def _data_deps(G):
    """Names whose values depend on the input's data (Shape cuts it)."""
    dep = {G.inputs[0]}
    for n in G.nodes:
        if n.op_type == "Shape":
            continue
        if any(i in dep for i in n.input if i):
            dep.update(n.output)
    return dep


def _from_inits(G):
    """Names computed from float initializers (weights), not only from
    Constants or integer (shape) initializers."""
    src = set(k for k, v in G.inits.items() if v.dtype.kind == "f")
    for n in G.nodes:
        if n.op_type == "Shape":
            continue
        if any(i in src for i in n.input if i):
            src.update(n.output)
    return src


def recognise(path, window=None, channels=None):
    """read() as a sattn.whole.Recognised and the graph as a module."""
    can, mod, desc, checks, absent = read(path, window, channels)
    return whole.Recognised(can, {}, absent, desc, None, checks), mod


def read(path, window=None, channels=None):
    """(canonical SignalTransformer, the graph as a module, description,
    checks, absent tensors) for an ONNX file; raises
    whole.NotRepresentable."""
    G = Graph(path)
    dep = _data_deps(G)
    wsrc = _from_inits(G)
    # the probe: windows of very different loudness
    # the input's frame size from the first weighted operation
    events = []
    for i, n in enumerate(G.nodes):
        ins = [j for j in n.input if j]
        d = [j for j in ins if j in dep]
        c = [j for j in ins if j not in dep and j in wsrc]
        if d and c:
            events.append((i, n, d, c))
        elif d and n.op_type in ("Mul", "Div") and len(ins) == 2 and \
                ins[1] not in dep:
            # a constant scale (the tutorial's embedding * sqrt(d_model),
            # attention's 1 / sqrt(d_head)): folded into the front end
            # right after it, skipped elsewhere (the numbers check)
            events.append((i, n, d, ["scale"]))
    if not events:
        raise whole.NotRepresentable("the ONNX graph holds no weight "
                                     "applied to its input")
    # frame size: the Conv's or the first MatMul's input
    first = [e for e in events if e[1].op_type in ("Conv", "MatMul", "Gemm")]
    if not first:
        raise whole.NotRepresentable("no front end (Conv, MatMul or Gemm) "
                                     "in the ONNX graph")
    n0 = window or 12
    # evaluate weights and constants once (any input shape will do for
    # them): run on a probe of the right width, found by trying
    env = None
    for Fr in _frame_sizes(G, first[0]):
        x = whole._probe_windows(16, n0, Fr).numpy()
        try:
            env = G.run(x, keep_all=True)
            break
        except Exception:  # noqa: BLE001
            continue
    if env is None:
        raise whole.NotRepresentable("the ONNX graph does not run on "
                                     "windows of %d frames" % n0)

    def val(name):
        return np.asarray(env[name], np.float64)

    # the stream of weights, in graph order
    stream = []
    for i, n, d, c in events:
        op = n.op_type
        a = G.attrs[i]
        if op == "MatMul":
            w = val(c[0])
            stream.append(("mm", w.T, n, d[0]))
        elif op == "Gemm":
            B = val(n.input[1])
            stream.append(("mm", B if a.get("transB") else B.T, n,
                           n.input[0]))
            if len(n.input) > 2 and n.input[2]:
                stream.append(("add", val(n.input[2]), n, None))
        elif op == "Conv":
            stream.append(("conv", val(n.input[1]), n, n.input[0]))
            if len(n.input) > 2 and n.input[2]:
                stream.append(("convb", val(n.input[2]), n, None))
        elif op == "LayerNormalization":
            stream.append(("mul", val(n.input[1]), n, a.get("epsilon",
                                                             1e-5)))
            stream.append(("add", val(n.input[2]) if len(n.input) > 2
                           else None, n, None))
        elif c == ["scale"]:
            v = np.asarray(env[n.input[1]], np.float64)
            if v.size != 1:
                continue
            v = float(v.reshape(-1)[0])
            stream.append(("scale", v if op == "Mul" else 1.0 / v, n, None))
        elif op == "Add" and _table(G, c[0]) is not None:
            stream.append(("add", _table(G, c[0]), n, val(c[0])))
        elif op in ("Add", "Mul", "Sub", "Div", "Concat"):
            stream.append((op.lower() if op != "Concat" else "cat",
                           val(c[0]), n, None))
        else:
            raise whole.NotRepresentable(
                "the ONNX graph applies a weight (%s) with %s, which sattn "
                "does not run" % (c[0], op))
    return _parse(G, env, stream, n0, channels)


def _table(G, name):
    """The whole initializer a positions table is sliced from (Slice from
    row 0, through Identity / Squeeze / Unsqueeze), or None."""
    prod = {o: n for n in G.nodes for o in n.output}
    seen_slice = False
    while name not in G.inits:
        n = prod.get(name)
        if n is None or n.op_type not in ("Slice", "Identity", "Squeeze",
                                          "Unsqueeze"):
            return None
        seen_slice |= n.op_type == "Slice"
        name = n.input[0]
    t = G.inits[name]
    return t.astype(np.float64) if seen_slice and t.dtype.kind == "f" \
        and t.ndim >= 2 else None


def _frame_sizes(G, ev):
    i, n, d, c = ev
    w = G.inits.get(n.input[1])
    if w is None:
        return [8, 16, 32, 64]
    if n.op_type == "Conv":
        # C x S: S = the stride
        s = _attrs(n).get("strides", [1])[0]
        return [w.shape[1] * s]
    if n.op_type == "Gemm":
        return [w.shape[1] if _attrs(n).get("transB") else w.shape[0]]
    return [w.shape[0]]


def _parse(G, env, stream, n0, channels):
    # constant scales: one right after the front end is folded into it;
    # the others (attention's 1 / sqrt(d_head)) are the layers' own
    fe_i = next((i for i, e in enumerate(stream)
                 if e[0] in ("conv", "mm")), None)
    scale = 1.0
    kept = []
    for i, e in enumerate(stream):
        if e[0] != "scale":
            kept.append(e)
            continue
        after = [k for k in stream[fe_i + 1:i] if k[0] != "scale"]
        if fe_i is not None and i > fe_i and all(
                k[0] in ("add", "convb") and k[1] is not None
                and k[1].ndim == 1 for k in after) and len(after) <= 1:
            scale *= e[1]
    stream = kept
    pos = 0
    checks = []

    def peek(k=0):
        return stream[pos + k] if pos + k < len(stream) else (None,) * 4

    def take(kind):
        nonlocal pos
        e = peek()
        if e[0] != kind:
            raise whole.NotRepresentable(
                "the ONNX graph's weights do not follow the family: expected"
                " %s, met %s%s at node %s; %s" % (
                    kind, e[0], " %s" % (tuple(e[1].shape),) if e[1] is not
                    None else "", e[2].name if e[2] is not None else "-",
                    whole.FAMILY))
        pos += 1
        return e

    std_mean = std_std = None
    if peek()[0] == "sub":
        std_mean = take("sub")[1]
    if peek()[0] == "div":
        std_std = take("div")[1]
    if peek()[0] == "mul" and peek(1)[0] != "add":
        std_std = 1.0 / take("mul")[1]
    fe = peek()
    if fe[0] == "conv":
        take("conv")
        W = fe[1]
        a = _attrs(fe[2])
        bias = take("convb")[1] if peek()[0] == "convb" else None
        D, C, K = W.shape
        S = a.get("strides", [1])[0]
        dil = a.get("dilations", [1])[0]
        pads = a.get("pads", [0, 0])
        if pads[0] != pads[1]:
            raise whole.NotRepresentable("the Conv pads %s unevenly" % pads)
        W, bias = W * scale, None if bias is None else bias * scale
        front = dict(front_end="conv", in_channels=C, conv_kernel=K,
                     conv_stride=S, conv_padding=pads[0],
                     conv_dilation=dil)
        Fr = C * S
    elif fe[0] == "mm":
        take("mm")
        W = fe[1]
        D, Fr = W.shape
        bias = take("add")[1] if peek()[0] == "add" and \
            peek()[1].size == D and peek()[1].ndim == 1 else None
        W, bias = W * scale, None if bias is None else bias * scale
        front = dict(front_end="linear")
    else:
        raise whole.NotRepresentable("the ONNX graph's first weight is a "
                                     "%s, not a front end" % fe[0])
    cls = posw = None
    if peek()[0] == "cat":
        cls = take("cat")[1].reshape(-1, D)[0]
    if peek()[0] == "add" and peek()[1].ndim >= 2:
        posw = take("add")[1].reshape(-1, D)
    if scale != 1.0:
        checks.append("front end rows scaled by %g: folded into its weights"
                      % scale)
    layers = []
    enc_start = pos
    # layers: post-norm (mm 3D) or pre-norm (mul, add, mm 3D)
    while True:
        e = peek()
        if e[0] == "mm" and e[1].shape == (3 * D, D):
            nf = False
        elif e[0] == "mul" and peek(2)[0] == "mm" and \
                peek(2)[1].shape == (3 * D, D):
            nf = True
        else:
            break
        L = {}
        if nf:
            L["norm1.weight"], L["eps"] = take("mul")[1], peek(-1)[3]
            L["norm1.bias"] = take("add")[1]
        L["self_attn.in_proj_weight"] = take("mm")[1]
        L["self_attn.in_proj_bias"] = take("add")[1]
        L["self_attn.out_proj.weight"] = take("mm")[1]
        L["self_attn.out_proj.bias"] = take("add")[1]
        if not nf:
            L["norm1.weight"], L["eps"] = take("mul")[1], peek(-1)[3]
            L["norm1.bias"] = take("add")[1]
        else:
            L["norm2.weight"] = take("mul")[1]
            L["norm2.bias"] = take("add")[1]
        L["linear1.weight"] = take("mm")[1]
        L["linear1.bias"] = take("add")[1]
        L["linear2.weight"] = take("mm")[1]
        L["linear2.bias"] = take("add")[1]
        if not nf:
            L["norm2.weight"] = take("mul")[1]
            L["norm2.bias"] = take("add")[1]
        L["nf"] = nf
        layers.append(L)
    if not layers:
        e = peek()
        raise whole.NotRepresentable(
            "no transformer encoder layer in the ONNX graph after its front"
            " end (met %s at node %s); %s" % (
                e[0], e[2].name if e[2] is not None else "-", whole.FAMILY))
    if len(set(L["nf"] for L in layers)) > 1:
        raise whole.NotRepresentable("the encoder layers mix pre- and "
                                     "post-norm")
    fin = None
    if peek()[0] == "mul" and peek()[1].size == D:
        fin = (take("mul")[1], take("add")[1])
    poolw = None
    if peek()[0] == "mm" and peek()[1].shape == (1, D):
        poolw = (take("mm")[1], take("add")[1] if peek()[0] == "add" and
                 peek()[1].size == 1 else None)
    head = []
    while peek()[0] == "mm":
        w = take("mm")[1]
        b = take("add")[1] if peek()[0] == "add" and \
            peek()[1].size == w.shape[0] else None
        head.append((w, b))
    if pos != len(stream):
        e = peek()
        raise whole.NotRepresentable(
            "the ONNX graph applies more weights after the head (%s at node "
            "%s): %s" % (e[0], e[2].name if e[2] is not None else "-",
                         whole.FAMILY))
    if len(head) > 2:
        raise whole.NotRepresentable("a head of %d Linear layers"
                                     % len(head))
    # the ONNX graph's own eps for decomposed LayerNorms: the scalar
    # constants added in it
    eps = layers[0]["eps"]
    if eps is None:
        first = G.nodes.index(stream[enc_start][2])
        eps_c = [float(np.asarray(env[n.input[1]]).reshape(-1)[0])
                 for n in G.nodes[first:] if n.op_type == "Add"
                 and n.input[1] in env and np.asarray(
                     env[n.input[1]]).size == 1
                 and np.asarray(env[n.input[1]]).dtype.kind == "f"]
        eps = next((c for c in eps_c if 0 < c < 1e-3), 1e-5)
    eps = float(str(np.float32(eps)))   # the float32 constant's decimal
    classes = head[-1][0].shape[0] if head else 0
    d_ff = layers[0]["linear1.weight"].shape[0]
    heads_c = [h for h in range(1, D + 1) if D % h == 0]
    pools = (["attention"] if poolw is not None else
             ["mean", "max", "last"] + (["cls"] if cls is not None else []))
    acts = ("relu", "gelu")
    ops = set(n.op_type for n in G.nodes)
    if "Erf" in ops or "Gelu" in ops:
        acts = ("gelu", "relu")
    x = whole._probe_windows(24, n0, Fr)
    ref = torch.from_numpy(np.asarray(G.run(x.numpy()), np.float64))
    # the input normalisation, from what enters the front end (it does not
    # depend on the choices below)
    skel = SignalTransformer(d_frame=Fr, d_model=D, heads=1, layers=1,
                             d_ff=1, standardize=std_mean is not None or
                             std_std is not None, **dict(
                                 front, conv_activation="none")
                             if front["front_end"] == "conv" else front)
    with torch.no_grad():
        if std_mean is not None:
            skel.standardize.mean.copy_(torch.from_numpy(std_mean))
        if std_std is not None:
            skel.standardize.std.copy_(torch.from_numpy(std_std))
    norm = _fit_norm(G, skel, x, front, channels, checks)
    conv_acts = ("none", "relu", "gelu") if front["front_end"] == "conv" \
        else ("none",)
    tol = 1e-6 * (1 + float(ref.abs().max()))
    best = None
    max_window = posw.shape[0] - (1 if cls is not None else 0) \
        if posw is not None else 0
    for h, act, pool, cact in itertools.product(
            sorted(heads_c, key=lambda h: (abs(D // h - 8), h)), acts, pools,
            conv_acts):
        kw = dict(d_frame=Fr, d_model=D, heads=h, layers=len(layers),
                  d_ff=d_ff, classes=classes,
                  positions="learned" if posw is not None else "none",
                  max_window=max_window, norm_first=layers[0]["nf"],
                  activation=act, norm_eps=float(eps),
                  final_norm=fin is not None,
                  head_hidden=head[0][0].shape[0] if len(head) == 2 else 0,
                  pooling=pool, cls_token=cls is not None,
                  standardize=std_mean is not None or std_std is not None,
                  **front)
        kw.update(norm)
        if front["front_end"] == "conv":
            kw["conv_activation"] = cact
        if len(head) == 2:
            kw["head_activation"] = _head_act(G)
        try:
            can = SignalTransformer(**kw)
        except ValueError as e:
            raise whole.NotRepresentable(str(e)) from None
        sd = can.state_dict()
        absent = set()

        def put(k, v):
            if v is None:
                sd[k].zero_()
                absent.add(k)
            else:
                sd[k].copy_(torch.from_numpy(np.asarray(v)).reshape(
                    sd[k].shape))
        fe_name = "embed" if front["front_end"] == "linear" else "conv"
        put(fe_name + ".weight", W)
        put(fe_name + ".bias", bias)
        if cls is not None:
            put("cls_token", cls)
        if posw is not None:
            put("pos_embed", posw)
        if std_mean is not None or std_std is not None:
            put("standardize.mean", std_mean if std_mean is not None
                else np.zeros(Fr))
            put("standardize.std", std_std if std_std is not None
                else np.ones(Fr))
        for i, L in enumerate(layers):
            for k, v in L.items():
                if k not in ("nf", "eps"):
                    put("encoder.layers.%d.%s" % (i, k), v)
        if fin is not None:
            put("encoder.norm.weight", fin[0])
            put("encoder.norm.bias", fin[1])
        if poolw is not None:
            put("pool.weight", poolw[0])
            put("pool.bias", poolw[1])
        names = ["head.0", "head.2"] if len(head) == 2 else ["head"]
        for nm, (w, b) in zip(names, head):
            put(nm + ".weight", w)
            put(nm + ".bias", b)
        can.load_state_dict(sd)
        can = can.eval()
        c64 = copy.deepcopy(can).double()
        try:
            with torch.no_grad():
                y = c64(x)
        except Exception:  # noqa: BLE001
            continue
        d = whole._max_abs(y, ref)
        if best is None or d < best[0]:
            best = (d, can, absent, h, act, pool)
        if d <= tol:
            break
    d, can, absent, h, act, pool = best
    desc = "ONNX opset %d: %s front end%s, %d encoder layer(s), %d heads, " \
        "%s pooling%s" % (G.opset, "Linear" if front["front_end"] == "linear"
                          else "Conv1d", ", CLS token" if cls is not None
                          else "", len(layers), h, pool,
                          ", head" if head else "")
    if can.input_norm != "none":
        desc = "%s normalisation, " % can.input_norm + desc
    if d > tol:
        raise whole.NotRepresentable(
            "the ONNX graph's output differs from every model of the family "
            "its weights fit (closest: %d heads, %s, %s pooling: max-abs "
            "%.3g in float64); %s" % (h, act, pool, d, whole.FAMILY))
    checks.append("output vs the graph: max-abs %.3g (float64)" % d)
    return can, OnnxModule(G).eval(), desc, checks, absent


def _head_act(G):
    ops = [n.op_type for n in G.nodes]
    # the activation between the head's Linear layers: the last Relu or
    # Erf (GELU) of the graph
    for op in reversed(ops):
        if op == "Relu":
            return "relu"
        if op in ("Erf", "Gelu"):
            return "gelu"
    return "relu"


def _fit_norm(G, skel, x, front, channels, checks):
    """The input normalisation ({input_norm, input_norm_eps, channels}),
    from what enters the graph's front end."""
    fi = None
    for i, n in enumerate(G.nodes):
        if n.op_type in ("Conv", "MatMul", "Gemm"):
            fi = i
            break
    fnode = G.nodes[fi]
    has_norm = any(n.op_type in ("Sqrt", "ReduceMean", "Pow", "ReduceSum")
                   for n in G.nodes[:fi])
    env = G.run(x.numpy(), keep_all=True)
    u = torch.from_numpy(np.asarray(env[fnode.input[0]], np.float64))
    B, n, Fr = x.shape
    if front["front_end"] == "conv":
        u = u.transpose(1, 2).reshape(B, n, Fr)
    elif u.shape[:2] != (B, n) and u.shape[:2] == (n, B):
        u = u.transpose(0, 1)
    c64 = copy.deepcopy(skel).double().eval()
    eps_c = [float(str(np.float32(np.asarray(env[i]).reshape(-1)[0])))
             for m in G.nodes[:fi] if m.op_type == "Add" for i in m.input
             if isinstance(env.get(i), np.ndarray) and env[i].size == 1
             and env[i].dtype.kind == "f"]
    whole.fit_input_norm(c64, skel, x, u.reshape(B, n, Fr), has_norm, eps_c,
                         channels, front["front_end"], checks)
    out = {}
    if skel.input_norm != "none":
        out = dict(input_norm=skel.input_norm,
                   input_norm_eps=skel.input_norm_eps)
        if skel.input_norm == "power":
            out["channels"] = skel.channels
    return out
