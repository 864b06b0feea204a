# SPDX-License-Identifier: LGPL-2.1-or-later
"""Whole models for the export tool: recognised by what their forward
computes, written as sattn.nn.SignalTransformer names them, verified
against libsattn before the tool reports success (docs/models.md).

recognise(module) reads the module's forward with torch.fx (a Tracer whose
leaf modules are the layers sattn knows: nn.TransformerEncoder and its
layers, nn.MultiheadAttention, nn.Linear, nn.Conv1d, nn.LayerNorm and the
recurrent layers, so that an unsupported one is a node it can name),
matches the graph onto the family

  [standardise] -> [window RMS / power norm] -> front end (Linear per frame
  | Conv1d over samples or frames, [activation]) -> [CLS concat]
  -> [learned positions] -> nn.TransformerEncoder (or encoder layers, batch
  first or not) -> [final LayerNorm] -> pooling (mean | max | first token
  | last | attention) -> [head: Linear | Linear-act-Linear]

and returns the canonical SignalTransformer with the module's weights,
checked stage by stage against the module itself in float64 (what enters
the front end, the front end's rows, the pooled row, the output).  What
does not fit raises NotRepresentable, whose words name what was met and
what fits.

verify(module, canonical, path) runs the written file through libsattn's
one loader (sattn.Model.from_safetensors, sattn.Stream) on random frame
sequences with stream-start padding, a GAP run and NaN frames (masked), and
compares it with the canonical module in float64; the bound is PyTorch
float32's own error on the same windows (the canonical module in float32
against float64).  The module itself is compared with the canonical one on
unmasked windows (and on masked ones when its forward takes a key padding
mask).

Needs PyTorch; verify() needs the sattn package (libsattn).
"""

import copy
import inspect
import math

import numpy as np
import torch
import torch.fx
from torch import nn

from sattn.nn import SignalTransformer

__all__ = ["NotRepresentable", "VerifyFailed", "recognise", "verify",
           "FAMILY"]

FAMILY = ("sattn runs: [standardisation (x - mean) / std] -> [per-window "
          "RMS or power normalisation] -> a front end (nn.Linear per frame, "
          "or one nn.Conv1d over samples or frames, with stride = time "
          "steps per frame, optionally ReLU/GELU) -> [a learned CLS token] "
          "-> [learned positions] -> nn.TransformerEncoder (or "
          "nn.TransformerEncoderLayer's in a ModuleList / Sequential) -> "
          "[final nn.LayerNorm] -> pooling (mean, max, CLS / first token, "
          "last, attention with nn.Linear(d_model, 1) + softmax) -> [head: "
          "nn.Linear, or nn.Linear-ReLU/GELU-nn.Linear]")


# the longest window probed when the caller gives none
PROBE_WINDOW = 32


class NotRepresentable(ValueError):
    """The module is not a model of the family (the words say why)."""


class VerifyFailed(ValueError):
    """libsattn or the canonical module differs from the user's module."""


LEAVES = (nn.TransformerEncoder, nn.TransformerEncoderLayer,
          nn.MultiheadAttention, nn.Linear, nn.Conv1d, nn.LayerNorm,
          nn.GRU, nn.LSTM, nn.RNN, nn.Conv2d, nn.BatchNorm1d, nn.ReLU,
          nn.GELU, nn.Dropout, nn.Identity, nn.Softmax)
MODULE_OK = (nn.TransformerEncoder, nn.TransformerEncoderLayer, nn.Linear,
             nn.Conv1d, nn.LayerNorm, nn.ReLU, nn.GELU, nn.Dropout,
             nn.Identity, nn.Softmax)
MASK_ARGS = ("key_padding_mask", "src_key_padding_mask", "padding_mask",
             "mask")

# Operations a forward of the family uses (torch functions, tensor
# methods, Python operators), by name.
OPS_OK = {
    "getitem", "getattr", "add", "sub", "mul", "truediv", "pow", "sqrt",
    "rsqrt", "mean", "sum", "max", "amax", "softmax", "cat", "concat",
    "transpose", "permute", "reshape", "view", "flatten", "unsqueeze",
    "squeeze", "expand", "expand_as", "contiguous", "size", "relu", "gelu",
    "dropout", "to", "float", "type_as", "matmul", "bmm", "iadd", "imul",
    "repeat", "t", "unflatten", "neg", "swapaxes", "movedim", "squeeze_",
    "clone", "detach", "select", "narrow", "floordiv",
    "assert_is_none", "assert",  # torch.fx guards of arguments traced as None
}
# The words for operations sattn does not run, when met
OP_WORDS = {
    "reciprocal": "1/x", "log": "a logarithm", "exp": "an exponential",
    "abs": "an absolute value", "tanh": "tanh", "sigmoid": "a sigmoid",
    "lstm": "nn.LSTM", "gru": "nn.GRU", "conv2d": "a 2-D convolution",
}


def _opname(node):
    t = node.target
    if node.op == "call_method":
        return t
    name = getattr(t, "__name__", str(t))
    return name.lstrip("_")


def _proxy_iter(self):
    """torch.fx's Proxy.__iter__ finds the caller's instruction by
    f_lasti // 2, which Python 3.11's inline caches break (`B, n, F =
    x.shape` then fails): the instruction at the byte offset f_lasti."""
    import dis
    frame = inspect.currentframe().f_back
    inst = None
    for i in dis.get_instructions(frame.f_code):
        if i.offset == frame.f_lasti:
            inst = i
            break
    if inst is not None and inst.opname == "UNPACK_SEQUENCE":
        return (self[i] for i in range(inst.argval))
    return self.tracer.iter(self)


class _Tracer(torch.fx.Tracer):
    # buffers as graph values too (self.pe[:x.size(0)] of a positional
    # table slices a proxy, not a tensor)
    proxy_buffer_attributes = True

    def trace(self, root, concrete_args=None):
        from torch.fx import proxy
        saved = proxy.Proxy.__iter__
        proxy.Proxy.__iter__ = _proxy_iter
        try:
            return super().trace(root, concrete_args)
        finally:
            proxy.Proxy.__iter__ = saved

    def is_leaf_module(self, m, qualname):
        if isinstance(m, LEAVES):
            return True
        return super().is_leaf_module(m, qualname)


def _kind(m):
    t = type(m)
    mod = t.__module__
    if mod.startswith("torch.nn"):
        return "nn." + t.__name__
    return t.__name__


def mask_argument(module):
    """The name of the forward's key padding mask argument, or None."""
    try:
        params = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return None
    for p in params[1:]:
        if p in MASK_ARGS:
            return p
    return None


def trace(module):
    """(GraphModule, the mask argument's name or None) of module's
    forward."""
    fwd = type(module).forward
    if fwd is nn.Module.forward or getattr(
            fwd, "__name__", "") == "_forward_unimplemented":
        raise NotRepresentable(
            "%s has no forward(): sattn recognises a whole model by what "
            "its forward computes, not by its attribute names"
            % type(module).__name__)
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        sig = None
    concrete = {}
    margs = None
    if sig is not None:
        ps = list(sig.parameters.values())
        for p in ps[1:]:
            if p.default is inspect.Parameter.empty and \
                    p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise NotRepresentable(
                    "%s.forward takes a second input %r without a default: "
                    "sattn feeds a model one window of frames (and, "
                    "optionally, a key padding mask)"
                    % (type(module).__name__, p.name))
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                concrete[p.name] = p.default
                if p.name in MASK_ARGS:
                    margs = p.name
    try:
        graph = _Tracer().trace(module, concrete_args=concrete or None)
        gm = torch.fx.GraphModule(module, graph)
    except Exception as e:  # noqa: BLE001 - any tracing failure
        raise NotRepresentable(
            "%s.forward could not be read with torch.fx (%s: %s): sattn "
            "reads a model's forward to recognise it, and a forward whose "
            "path depends on tensor values cannot be read; "
            % (type(module).__name__, type(e).__name__,
               str(e).splitlines()[0] if str(e) else "") + FAMILY) from None
    return gm, margs


def _ancestors(node):
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        for a in n.all_input_nodes:
            if a not in seen:
                seen.add(a)
                todo.append(a)
    return seen


def _descendants(node):
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen


def _const_args(node):
    """The Python numbers among node's arguments."""
    out = []
    for a in list(node.args) + list(node.kwargs.values()):
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            out.append(a)
    return out


class _Capture(torch.fx.Interpreter):
    """Runs a traced module, keeping the values of chosen nodes."""

    def __init__(self, gm, keep):
        super().__init__(gm)
        self.keep, self.values = set(keep), {}

    def run_node(self, n):
        v = super().run_node(n)
        if n.name in self.keep:
            self.values[n.name] = v
        return v


def _activation_name(layer):
    act = getattr(layer, "activation", None)
    rg = getattr(layer, "activation_relu_or_gelu", 0)
    F = torch.nn.functional
    if act is F.gelu or isinstance(act, nn.GELU) or rg == 2:
        return "gelu"
    if act is F.relu or isinstance(act, nn.ReLU) or rg == 1:
        return "relu"
    raise NotRepresentable("an encoder layer's activation %r is neither "
                           "relu nor gelu" % (act,))


def _max_abs(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    return float((a - b).abs().max())


class Recognised:
    """What recognise() found: canonical (a SignalTransformer holding the
    module's weights, eval, float32), mapping {module tensor: canonical
    name}, absent (canonical tensors the module lacks: zero biases, not
    written), description (a short phrase), user_mask (the forward's mask
    argument or None), checks (the stage comparisons made, words)."""

    def __init__(self, canonical, mapping, absent, description, user_mask,
                 checks):
        self.canonical, self.mapping, self.absent = canonical, mapping, absent
        self.description, self.user_mask = description, user_mask
        self.checks = checks

    def tensors(self):
        """The written tensors: the canonical state dict, less the absent
        ones."""
        return {k: v for k, v in self.canonical.state_dict().items()
                if k not in self.absent and v is not None}


_OWN = ("forward", "pooled", "pool", "features", "_embed", "normalised",
        "front", "_layer", "_attention", "_mask")


def _is_canonical(module):
    """A SignalTransformer (or a subclass that computes as it does)."""
    return isinstance(module, SignalTransformer) and all(
        getattr(type(module), m) is getattr(SignalTransformer, m)
        for m in _OWN)


def is_candidate(module):
    """Whether module holds a transformer encoder below itself (then the
    export tool reads it as a whole model)."""
    if _is_canonical(module):
        return True
    if isinstance(module, (nn.TransformerEncoder,
                           nn.TransformerEncoderLayer)):
        return False
    return any(isinstance(m, (nn.TransformerEncoder,
                              nn.TransformerEncoderLayer))
               for n, m in module.named_modules() if n)


def has_front_end(module):
    """Whether module's forward reaches its encoder through something
    (a front end): a container whose input goes straight into an encoder
    layer is not a whole model (its parts are exported instead)."""
    if _is_canonical(module):
        return True
    fwd = type(module).forward
    if fwd is nn.Module.forward or getattr(
            fwd, "__name__", "") == "_forward_unimplemented":
        return False     # no forward: a container of parts
    try:
        gm, _ = trace(module)
    except NotRepresentable:
        return True     # let recognise() say why
    g = gm.graph
    mods = dict(gm.named_modules())
    x = [n for n in g.nodes if n.op == "placeholder"]
    if not x:
        return False
    for n in g.nodes:
        if n.op == "call_module" and isinstance(
                mods[n.target], (nn.TransformerEncoder,
                                 nn.TransformerEncoderLayer)):
            before = [a for a in _ancestors(n) if a.op == "call_module"]
            return bool(before)
    return True


# ------------------------------------------------------------ recognise

def recognise(module, window=None, channels=None, frame_size=None,
              pooling_hint=None):
    """The canonical SignalTransformer equal to module (see the module
    docstring); raises NotRepresentable with words."""
    module = module.eval()
    if _is_canonical(module):
        can = copy.deepcopy(module).float().eval()
        mp = {k: k for k in module.state_dict()}
        return Recognised(can, mp, set(), "sattn.nn.SignalTransformer",
                          "key_padding_mask", ["the module is the "
                                               "canonical one"])
    gm, margs = trace(module)
    g = gm.graph
    mods = dict(gm.named_modules())
    ph = [n for n in g.nodes if n.op == "placeholder"]
    x_node = ph[0]
    dep = _descendants(x_node)

    # every module called, and every operation, must be one sattn runs
    for n in g.nodes:
        if n.op == "call_module":
            m = mods[n.target]
            if isinstance(m, (nn.GRU, nn.LSTM, nn.RNN)):
                raise NotRepresentable(
                    "the module's forward uses `%s` (%s), which sattn does "
                    "not run (a recurrent layer); " % (n.target, _kind(m))
                    + FAMILY)
            if isinstance(m, nn.MultiheadAttention):
                raise NotRepresentable(
                    "the module's forward calls `%s` (nn.MultiheadAttention)"
                    " itself: sattn runs attention inside "
                    "nn.TransformerEncoderLayer's only; " % n.target
                    + FAMILY)
            if not isinstance(m, MODULE_OK):
                raise NotRepresentable(
                    "the module's forward uses `%s` (%s), which sattn does "
                    "not run; " % (n.target, _kind(m)) + FAMILY)
        elif n.op in ("call_function", "call_method"):
            op = _opname(n)
            if op not in OPS_OK:
                raise NotRepresentable(
                    "the module's forward uses `%s`%s, which sattn does not "
                    "run; " % (op, " (%s)" % OP_WORDS[op] if op in OP_WORDS
                               else "") + FAMILY)
            if op == "truediv" and not isinstance(n.args[0], torch.fx.Node) \
                    and isinstance(n.args[1], torch.fx.Node) \
                    and n.args[1] in dep:
                raise NotRepresentable(
                    "the module's forward divides a constant (%r) by a "
                    "value computed from the input (%s = 1/x), which sattn "
                    "does not run; " % (n.args[0], n.name) + FAMILY)

    calls = [n for n in g.nodes if n.op == "call_module"]
    enc = [n for n in calls if isinstance(
        mods[n.target], (nn.TransformerEncoder, nn.TransformerEncoderLayer))]
    if not enc:
        raise NotRepresentable("the module's forward runs no "
                               "nn.TransformerEncoder; " + FAMILY)
    if isinstance(mods[enc[0].target], nn.TransformerEncoder):
        if len(enc) > 1:
            raise NotRepresentable(
                "the module's forward runs %d encoders (%s): sattn runs one "
                "stack of layers" % (len(enc), ", ".join(n.target
                                                         for n in enc)))
        te = mods[enc[0].target]
        layers = list(te.layers)
        enc_norm = te.norm
        enc_prefix = [enc[0].target + ".layers.%d." % i
                      for i in range(len(layers))]
        enc_norm_prefix = enc[0].target + ".norm." if enc_norm else None
    else:
        if any(isinstance(mods[n.target], nn.TransformerEncoder)
               for n in enc):
            raise NotRepresentable("the module's forward runs an "
                                   "nn.TransformerEncoder and other "
                                   "encoder layers")
        layers = [mods[n.target] for n in enc]
        enc_norm, enc_norm_prefix = None, None
        enc_prefix = [n.target + "." for n in enc]
        for a, b in zip(enc, enc[1:]):
            if a not in _ancestors(b):
                raise NotRepresentable("the encoder layers %s and %s do not "
                                       "run one after the other"
                                       % (a.target, b.target))
        if len(set(enc_prefix)) != len(enc_prefix):
            raise NotRepresentable("the forward runs one encoder layer "
                                   "more than once (%s)" % ", ".join(
                                       sorted(set(p[:-1] for p in enc_prefix
                                                  if enc_prefix.count(p) > 1)
                                              )))
    first_enc, last_enc = enc[0], enc[-1]
    for n in enc:
        extra = [a for a in list(n.args[1:]) + list(n.kwargs.values())
                 if isinstance(a, torch.fx.Node)]
        for a in extra:
            if a in ph:
                continue     # the forward's own mask argument
            raise NotRepresentable(
                "the encoder `%s` is called with an attention mask (%s): "
                "sattn takes a key padding mask only (a causal model "
                "exports from sattn.nn.SignalTransformer(causal=True))"
                % (n.target, a.name))
        if (n.kwargs.get("is_causal")):
            raise NotRepresentable("the encoder `%s` is causal (is_causal): "
                                   "export it from "
                                   "sattn.nn.SignalTransformer(causal=True)"
                                   % n.target)

    # the layers: stock, alike
    cfgs = []
    for i, L in enumerate(layers):
        sa = L.self_attn
        if not isinstance(sa, nn.MultiheadAttention):
            raise NotRepresentable("encoder layer %d's self_attn is a %s, "
                                   "not nn.MultiheadAttention" % (i,
                                                                 _kind(sa)))
        if not sa._qkv_same_embed_dim or sa.bias_k is not None or \
                sa.add_zero_attn:
            raise NotRepresentable("encoder layer %d's attention has "
                                   "kdim/vdim, bias_k/bias_v or "
                                   "add_zero_attn, which a whole model of "
                                   "sattn does not run" % i)
        cfgs.append((sa.embed_dim, sa.num_heads, L.linear1.out_features,
                     bool(L.norm_first), _activation_name(L),
                     float(L.norm1.eps), float(L.norm2.eps),
                     bool(getattr(sa, "batch_first", False)),
                     sa.in_proj_bias is not None))
    if len(set(cfgs)) != 1:
        raise NotRepresentable(
            "the encoder layers are not alike (d_model, heads, d_ff, "
            "norm_first, activation, eps, batch_first: %s): sattn runs N "
            "layers of one configuration" % "; ".join(
                "layer %d %s" % (i, c[:8]) for i, c in enumerate(cfgs)))
    D, heads, d_ff, norm_first, act, eps, eps2, batch_first, qbias = cfgs[0]
    if eps != eps2:
        raise NotRepresentable("norm1 and norm2 have different eps")
    if not qbias:
        raise NotRepresentable("the attention has no in_proj_bias "
                               "(bias=False), which the whole-model file "
                               "does not express")

    # the front end: the one Linear / Conv1d the input reaches the encoder
    # through
    before = _ancestors(first_enc)
    front = [n for n in calls if n in before and isinstance(
        mods[n.target], (nn.Linear, nn.Conv1d))]
    if not front:
        raise NotRepresentable("the input reaches the encoder through no "
                               "nn.Linear or nn.Conv1d front end; " + FAMILY)
    if len(front) > 1:
        raise NotRepresentable(
            "the input goes through %d layers before the encoder (%s): "
            "sattn runs one front end (one nn.Linear per frame or one "
            "nn.Conv1d stem); " % (len(front), ", ".join(
                "`%s` (%s)" % (n.target, _kind(mods[n.target]))
                for n in front)) + FAMILY)
    fnode = front[0]
    fmod = mods[fnode.target]
    others = [n for n in calls if n in before and n is not fnode
              and not isinstance(mods[n.target], (nn.ReLU, nn.GELU,
                                                  nn.Dropout, nn.Identity))]
    if others:
        raise NotRepresentable(
            "before the encoder the forward also uses %s; " % ", ".join(
                "`%s` (%s)" % (n.target, _kind(mods[n.target]))
                for n in others) + FAMILY)
    if isinstance(fmod, nn.Conv1d):
        if fmod.groups != 1 or fmod.padding_mode != "zeros" or \
                isinstance(fmod.padding, str) and fmod.padding != "same":
            raise NotRepresentable("the Conv1d front end `%s` has groups=%d,"
                                   " padding %r (%s): sattn runs groups=1 "
                                   "with zero padding"
                                   % (fnode.target, fmod.groups,
                                      fmod.padding, fmod.padding_mode))
        C, S = fmod.in_channels, fmod.stride[0]
        K, dil = fmod.kernel_size[0], fmod.dilation[0]
        if isinstance(fmod.padding, str):
            tot = dil * (K - 1)
            P = tot // 2
            if tot % 2:
                raise NotRepresentable("Conv1d padding='same' with an even "
                                       "span pads unevenly")
        else:
            P = fmod.padding[0]
        Fr = C * S
        front_end = "conv"
        if fmod.out_channels != D:
            raise NotRepresentable("the Conv1d front end gives %d channels,"
                                   " the encoder takes d_model=%d"
                                   % (fmod.out_channels, D))
    else:
        Fr = fmod.in_features
        front_end = "linear"
        if fmod.out_features != D:
            raise NotRepresentable("the Linear front end gives %d features,"
                                   " the encoder takes d_model=%d"
                                   % (fmod.out_features, D))
    # between the front end and the encoder: activation, CLS, positions
    mid = [n for n in g.nodes if n in before and n in _descendants(fnode)]
    conv_act = "none"
    for n in mid:
        a = None
        if n.op == "call_module" and isinstance(mods[n.target],
                                                (nn.ReLU, nn.GELU)):
            a = "relu" if isinstance(mods[n.target], nn.ReLU) else "gelu"
            if isinstance(mods[n.target], nn.GELU) and \
                    mods[n.target].approximate != "none":
                raise NotRepresentable("GELU(approximate='tanh') after the "
                                       "front end: sattn runs the exact GELU")
        elif n.op in ("call_function", "call_method") and \
                _opname(n) in ("relu", "gelu"):
            a = _opname(n)
            if n.kwargs.get("approximate", "none") != "none":
                raise NotRepresentable("gelu(approximate='tanh') after the "
                                       "front end")
        if a:
            if front_end == "linear":
                raise NotRepresentable(
                    "the forward applies %s after its Linear front end `%s`:"
                    " sattn runs an activation after a Conv1d stem only; "
                    % (a, fnode.target) + FAMILY)
            if conv_act != "none":
                raise NotRepresentable("two activations after the front "
                                       "end")
            conv_act = a
    # a constant scale of the front end's rows (the PyTorch tutorial's
    # embedding * sqrt(d_model)): folded into the front end's weights (the
    # numbers below check that it may be)
    scale = 1.0
    for n in mid:
        if n.op in ("call_function", "call_method") and _opname(n) in (
                "mul", "truediv", "imul") and len(n.args) == 2:
            a0, a1 = n.args
            num = [v for v in (a0, a1) if isinstance(v, (int, float))
                   and not isinstance(v, bool)]
            if len(num) == 1 and any(isinstance(v, torch.fx.Node)
                                     and v in dep for v in (a0, a1)):
                if _opname(n) == "truediv":
                    if not isinstance(a0, torch.fx.Node):
                        continue   # c / x: left to the numbers
                    scale /= float(num[0])
                else:
                    scale *= float(num[0])
    params = dict(module.named_parameters())
    params.update(dict(module.named_buffers()))
    attrs = [n for n in g.nodes if n.op == "get_attr"]
    cls_t = pos_t = None
    std_mean = std_std = None
    mapping = {}
    for n in attrs:
        users = _descendants(n)
        t = params.get(n.target)
        if t is None:
            t = getattr(gm, n.target, None) if "." not in n.target else None
        if t is None:
            raise NotRepresentable("the forward reads %s, neither a "
                                   "parameter nor a buffer" % n.target)
        if fnode in users:          # before the front end
            uses = [u for u in n.users]
            op = _opname(uses[0]) if uses else ""
            if op == "sub" and std_mean is None:
                std_mean = n.target
            elif op == "truediv" and std_std is None:
                std_std = n.target
            else:
                raise NotRepresentable(
                    "the forward uses the tensor %s (%s) on the input "
                    "before the front end: sattn runs a standardisation "
                    "(x - mean) / std there only" % (n.target, op))
        elif first_enc in users:    # between the front end and encoder
            use = _first_use(n)
            if use in ("cat", "concat") and t.numel() == D and cls_t is None:
                cls_t = n.target
            elif use in ("add", "iadd") and t.shape[-1] == D and \
                    pos_t is None:
                pos_t = n.target
            else:
                raise NotRepresentable("the forward uses the tensor %s %s "
                                       "before the encoder, neither a CLS "
                                       "token nor learned positions"
                                       % (n.target, tuple(t.shape)))
        else:
            raise NotRepresentable("the forward uses the tensor %s %s after"
                                   " the encoder, which sattn does not run"
                                   % (n.target, tuple(t.shape)))

    # after the encoder: final norm, pooling, head
    after = _descendants(last_enc)
    post = [n for n in calls if n in after]
    lnorm = [n for n in post if isinstance(mods[n.target], nn.LayerNorm)]
    lins = [n for n in post if isinstance(mods[n.target], nn.Linear)]
    post_acts = [n for n in post if isinstance(mods[n.target],
                                               (nn.ReLU, nn.GELU))]
    if len(lnorm) > 1 or (lnorm and enc_norm is not None):
        raise NotRepresentable("more than one LayerNorm after the encoder")
    fin = lnorm[0] if lnorm else None
    pool_lin = None
    softmax_after = [n for n in g.nodes if n in after and
                     (_opname(n) == "softmax" or (
                         n.op == "call_module" and
                         isinstance(mods[n.target], nn.Softmax)))]
    for n in lins:
        m = mods[n.target]
        if m.out_features == 1 and any(s in _descendants(n)
                                       for s in softmax_after):
            pool_lin = n
    head_lins = [n for n in lins if n is not pool_lin]
    if len(head_lins) > 2:
        raise NotRepresentable(
            "a head of %d Linear layers (%s): sattn runs a Linear or a "
            "Linear-act-Linear head" % (len(head_lins), ", ".join(
                n.target for n in head_lins)))
    head_hidden, head_act, classes = 0, "relu", 0
    if head_lins:
        h0 = mods[head_lins[0].target]
        if h0.in_features != D:
            raise NotRepresentable("the head `%s` takes %d features, the "
                                   "pooled row has d_model=%d"
                                   % (head_lins[0].target, h0.in_features, D))
        if len(head_lins) == 2:
            h1 = mods[head_lins[1].target]
            acts = [n for n in g.nodes if n in _descendants(head_lins[0])
                    and n in _ancestors(head_lins[1]) and (
                        n in post_acts or _opname(n) in ("relu", "gelu"))]
            if len(acts) != 1:
                raise NotRepresentable(
                    "the head %s, %s has %d activations between its Linear "
                    "layers: sattn runs Linear-ReLU/GELU-Linear"
                    % (head_lins[0].target, head_lins[1].target, len(acts)))
            an = acts[0]
            head_act = ("gelu" if (an.op == "call_module" and isinstance(
                mods[an.target], nn.GELU)) or _opname(an) == "gelu"
                else "relu")
            head_hidden, classes = h0.out_features, h1.out_features
        else:
            classes = h0.out_features
    # pooling candidates, from the operations between the encoder and the
    # head
    head_in = head_lins[0] if head_lins else None
    seg = [n for n in g.nodes if n in after and (
        head_in is None or n in _ancestors(head_in))]
    ops = [_opname(n) for n in seg if n.op != "call_module"]
    if pool_lin is not None:
        pooling = "attention"
    elif "max" in ops or "amax" in ops:
        pooling = "max"
    elif "mean" in ops or "sum" in ops:
        pooling = "mean"
    else:
        idx = []
        for n in seg:
            if _opname(n) in ("getitem", "select"):
                for a in n.args[1:]:
                    items = a if isinstance(a, tuple) else (a,)
                    idx += [i for i in items if isinstance(i, int)]
        if -1 in idx:
            pooling = "last"
        elif 0 in idx:
            pooling = "cls" if cls_t else "first"
        else:
            pooling = pooling_hint or "mean"
    if pooling == "first":
        raise NotRepresentable(
            "the forward pools the first frame's row without a CLS token: "
            "sattn pools mean, max, last, attention, or the row of a "
            "learned CLS token")

    # input normalisation: any arithmetic on the input before the front
    # end other than the standardisation
    pre = [n for n in g.nodes if n in dep and n in _ancestors(fnode)]
    norm_ops = [n for n in pre if _opname(n) in ("sqrt", "rsqrt", "pow",
                                                 "mean", "sum")]
    has_norm = bool(norm_ops) or any(
        _opname(n) == "mul" and len(n.all_input_nodes) == 2
        and all(a in dep for a in n.all_input_nodes) for n in pre)
    eps_c = [c for n in pre if _opname(n) == "add" for c in _const_args(n)]

    # learned positions / CLS shapes
    max_window = 0
    has_cls = cls_t is not None
    if pos_t is not None:
        shp = tuple(params[pos_t].shape)
        rows = [d for d in shp[:-1] if d != 1]
        if len(shp) < 2 or len(rows) > 1:
            raise NotRepresentable("learned positions %s of shape %s: sattn"
                                   " takes a table of P rows of d_model, "
                                   "(P, D), (1, P, D) or (P, 1, D)"
                                   % (pos_t, shp))
        P = rows[0] if rows else 1
        max_window = P - int(has_cls)
    if window is None:
        # the probes' window: the positions' length, at most PROBE_WINDOW
        # (a sinusoidal table of 5000 rows need not be probed whole)
        window = min(max_window, PROBE_WINDOW) if max_window else 12
    if max_window and window > max_window:
        raise NotRepresentable("window %d is longer than the learned "
                               "positions' %d frames" % (window, max_window))

    final_norm = enc_norm is not None or fin is not None
    fin_mod = enc_norm if enc_norm is not None else (
        mods[fin.target] if fin is not None else None)
    kw = dict(d_frame=Fr, d_model=D, heads=heads, layers=len(layers),
              d_ff=d_ff, classes=classes,
              positions="learned" if pos_t else "none",
              max_window=max_window, norm_first=norm_first, activation=act,
              norm_eps=eps, final_norm=final_norm, head_hidden=head_hidden,
              head_activation=head_act, pooling=pooling,
              front_end=front_end, cls_token=has_cls,
              standardize=std_mean is not None or std_std is not None)
    if front_end == "conv":
        kw.update(in_channels=C, conv_kernel=K, conv_stride=S,
                  conv_padding=P, conv_dilation=dil,
                  conv_activation=conv_act)
    if channels is not None:
        kw["channels"] = channels
    if final_norm and fin_mod.eps != eps:
        kw["norm_eps"] = eps   # (checked below: one eps in the file)
        if fin_mod.eps != eps:
            raise NotRepresentable("the final LayerNorm's eps (%g) is not "
                                   "the layers' (%g): the file has one "
                                   "norm_eps" % (fin_mod.eps, eps))
    try:
        can = SignalTransformer(**kw)
    except ValueError as e:
        raise NotRepresentable(str(e)) from None
    can = can.eval()

    # weights
    absent = set()
    sd = can.state_dict()

    def put(dst, src_t, src_name):
        with torch.no_grad():
            if src_t is None:
                sd[dst].zero_()
                absent.add(dst)
                return
            sd[dst].copy_(src_t.detach().reshape(sd[dst].shape))
        if src_name is not None:
            mapping[src_name] = dst

    pf = fnode.target + "."
    fe = "embed" if front_end == "linear" else "conv"
    put(fe + ".weight", fmod.weight * scale, pf + "weight")
    put(fe + ".bias", fmod.bias * scale if fmod.bias is not None else None,
        pf + "bias" if fmod.bias is not None else None)
    if has_cls:
        put("cls_token", params[cls_t], cls_t)
    if pos_t:
        put("pos_embed", params[pos_t], pos_t)
    if std_mean:
        put("standardize.mean", params[std_mean], std_mean)
    if std_std:
        put("standardize.std", params[std_std], std_std)
    for i, (L, p) in enumerate(zip(layers, enc_prefix)):
        for k, v in L.state_dict().items():
            put("encoder.layers.%d.%s" % (i, k), v, p + k)
    if final_norm:
        fp = enc_norm_prefix or fin.target + "."
        for k, v in fin_mod.state_dict().items():
            put("encoder.norm." + k, v, fp + k)
    if pool_lin is not None:
        m = mods[pool_lin.target]
        put("pool.weight", m.weight, pool_lin.target + ".weight")
        put("pool.bias", m.bias, pool_lin.target + ".bias"
            if m.bias is not None else None)
    if head_lins:
        names = ["head.0", "head.2"] if head_hidden else ["head"]
        for dn, n in zip(names, head_lins):
            m = mods[n.target]
            put(dn + ".weight", m.weight, n.target + ".weight")
            put(dn + ".bias", m.bias, n.target + ".bias"
                if m.bias is not None else None)
    can.load_state_dict(sd)
    unused = [k for k in module.state_dict() if k not in mapping]
    if unused:
        raise NotRepresentable(
            "the module has %d tensor(s) the written model would not use: "
            "%s (a file runs every tensor it holds, and holds every tensor "
            "the module has)" % (len(unused), ", ".join(unused[:8])
                                 + (", ..." if len(unused) > 8 else "")))
    desc = "%s front end%s%s, %d encoder layer(s)%s%s, %s pooling%s" % (
        "Linear" if front_end == "linear" else
        "Conv1d (kernel %d, stride %d%s)" % (
            K, S, ", %s" % conv_act if conv_act != "none" else ""),
        ", CLS token" if has_cls else "",
        ", a positions table (%d rows)" % (max_window + has_cls) if pos_t
        else "", len(layers),
        "" if batch_first else " (batch_first=False)",
        ", final LayerNorm" if final_norm else "", pooling,
        (", MLP head" if head_hidden else ", Linear head") if classes else "")

    # the numbers: the module against the canonical one, stage by stage,
    # in float64
    checks = _match(module, gm, can, fnode, first_enc, head_in, has_norm,
                    eps_c, window, Fr, front_end, batch_first, classes,
                    channels, absent)
    if scale != 1.0:
        checks.insert(0, "front end rows scaled by %g: folded into its "
                      "weights" % scale)
    if can.input_norm != "none":
        desc = "%s normalisation, " % can.input_norm + desc
    if hasattr(can, "standardize"):
        desc = "standardisation, " + desc
    return Recognised(can, mapping, absent, desc, margs, checks)


SHAPE_OPS = ("expand", "expand_as", "reshape", "view", "repeat", "unsqueeze",
             "squeeze", "getitem", "to", "type_as", "transpose", "permute",
             "contiguous", "float", "flatten", "clone", "detach")


def _first_use(node):
    """The first operation node's value reaches past shape changes."""
    while True:
        us = list(node.users)
        if len(us) != 1:
            return _opname(us[0]) if us else ""
        u = us[0]
        if u.op in ("call_function", "call_method") and \
                _opname(u) in SHAPE_OPS:
            node = u
            continue
        return _opname(u) if u.op != "call_module" else u.target


def _double(module):
    try:
        return copy.deepcopy(module).double().eval()
    except Exception:  # noqa: BLE001
        return None


def _probe_windows(B, n, Fr, seed=1234, gains=True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, n, Fr, generator=gen, dtype=torch.float64)
    if gains:
        # windows of very different loudness, so that a per-window
        # normalisation shows (and its eps)
        g = 10.0 ** torch.linspace(-5, 1.5, B, dtype=torch.float64)
        x = x * g[:, None, None]
    return x


def fit_input_norm(c64, can, x, u_frames, has_norm, eps_c, channels,
                   front_end, checks):
    """What enters the front end (u_frames, (B, n, F) in frame order) for
    windows x: none, or the standardised input divided per window by
    sqrt(a * mean(x^2) + eps), a = 1 (rms) or channels (power); sets it on
    can and c64 (float64 twin), or raises NotRepresentable."""
    B = x.shape[0]
    Fr = x.shape[2]
    with torch.no_grad():
        c64.input_norm = "none"
        xs = c64.normalised(x)
    d_plain = _max_abs(u_frames, xs)
    scale = float(xs.abs().max())
    tiny = 1e-9 * (1.0 + scale)
    if has_norm or d_plain > tiny:
        ok = xs.abs() > 1e-6 * xs.abs().amax(dim=(1, 2), keepdim=True)
        ratio = torch.where(ok, xs / torch.where(ok, u_frames, torch.ones_like(
            u_frames)), torch.zeros_like(xs))
        r = torch.stack([ratio[b][ok[b]].median() for b in range(B)])
        spread = max(float((ratio[b][ok[b]] - r[b]).abs().max() / r[b])
                     for b in range(B))
        if spread > 1e-6:
            raise NotRepresentable(
                "what enters the front end is not the %sinput divided by "
                "one number per window (relative spread %.2g): sattn runs a "
                "standardisation and a per-window RMS or power "
                "normalisation there only" % (
                    "standardised " if hasattr(can, "standardize") else "",
                    spread))
        m = (xs * xs).mean(dim=(1, 2))
        # r^2 = a * m + eps
        A = torch.stack([m, torch.ones_like(m)], 1)
        sol = torch.linalg.lstsq(A, (r * r)[:, None]).solution[:, 0]
        a, b = float(sol[0]), float(sol[1])
        ch = channels
        if abs(a - 1.0) < 1e-6:
            kind = "rms"
        elif ch and abs(a - ch) < 1e-6 * ch:
            kind = "power"
        elif front_end == "conv" and abs(a - can.in_channels) < 1e-6 * a:
            kind, ch = "power", can.in_channels
        else:
            raise NotRepresentable(
                "what enters the front end is the input divided by "
                "sqrt(%.6g x mean(x^2) + %.3g) per window: sattn divides by "
                "sqrt(mean(x^2) + eps) (rms) or sqrt(channels x mean(x^2) "
                "+ eps) (power; give --channels)" % (a, b))
        cands = [c for c in eps_c if c >= 0]
        eps = min(cands, key=lambda c: abs(c - b)) if cands else max(b, 0.0)
        if abs(eps - b) > 1e-6 * (1 + abs(eps)) + 1e-12:
            eps = max(b, 0.0)
        for mdl in (can, c64):
            mdl.input_norm, mdl.input_norm_eps = kind, float(eps)
            if kind == "power":
                mdl.channels = ch
                if mdl.frame_size is None and Fr % ch == 0:
                    mdl.frame_size = Fr // ch
        with torch.no_grad():
            d = _max_abs(u_frames, c64.normalised(x))
        checks.append("input: %s normalisation, eps %g (front end input "
                      "max-abs %.3g)" % (kind, eps, d))
        if d > 1e-9 * (1 + float(u_frames.abs().max())):
            raise NotRepresentable(
                "what enters the front end differs from sattn's %s "
                "normalisation (max-abs %.3g)" % (kind, d))
    else:
        c64.input_norm = "none"
        checks.append("input: no normalisation (front end input max-abs "
                      "%.3g)" % d_plain)


def _match(module, gm, can, fnode, first_enc, head_in, has_norm, eps_c,
           n, Fr, front_end, batch_first, classes, channels, absent):
    """Compare the module with the canonical one (float64), fixing what
    the numbers say (the input normalisation) and naming what differs."""
    checks = []
    u64 = _double(gm)
    if u64 is None:
        raise NotRepresentable("the module cannot run in float64 (needed "
                               "to compare it with sattn's model)")
    c64 = copy.deepcopy(can).double().eval()
    x = _probe_windows(24, n, Fr)
    hin = head_in.args[0] if head_in is not None else None
    keep = [fnode.name, first_enc.name] + ([hin.name] if hin is not None
                                           else [])
    cap = _Capture(u64, keep)
    with torch.no_grad():
        try:
            out_u = cap.run(x)
        except Exception as e:  # noqa: BLE001
            raise NotRepresentable(
                "the module does not run on windows of %d frames of %d "
                "values (%s: %s)" % (n, Fr, type(e).__name__, e)) from None
    vals = cap.values
    fin_in = fnode.args[0]
    with torch.no_grad():
        cap2 = _Capture(u64, [fin_in.name] if isinstance(
            fin_in, torch.fx.Node) else [])
        cap2.run(x)
    f_in = cap2.values.get(fin_in.name)
    if f_in is None:
        raise NotRepresentable("the front end's input is not a value of "
                               "the forward")
    # canonical frames entering the front end, in the front end's layout
    B = x.shape[0]
    if front_end == "conv":
        c, s = can.in_channels, can.conv_stride
        if f_in.dim() != 3 or f_in.shape[1] != c or f_in.shape[2] != n * s:
            raise NotRepresentable(
                "the Conv1d front end takes %s, not the window's %d time "
                "steps of %d channels (B, C, n x S): sattn reads a frame as "
                "S = stride time steps of C = in_channels values"
                % (tuple(f_in.shape[1:]), n * s, c))
        u_frames = f_in.transpose(1, 2).reshape(B, n, Fr)
    else:
        if f_in.dim() != 3 or tuple(f_in.shape[:2]) not in ((B, n), (n, B)):
            raise NotRepresentable("the Linear front end takes %s, not one "
                                   "frame per row" % (tuple(f_in.shape),))
        u_frames = f_in if tuple(f_in.shape[:2]) == (B, n) else \
            f_in.transpose(0, 1)
    fit_input_norm(c64, can, x, u_frames, has_norm, eps_c, channels,
                   front_end, checks)
    # the pooled row: diagnose pooling
    with torch.no_grad():
        feats = c64.features(x)
    if head_in is not None:
        pu = vals[hin.name]
        # the head's input: (B, D) (after any transposes)
        if pu.dim() != 2 or pu.shape[0] != B:
            raise NotRepresentable("the head takes %s, not one pooled row "
                                   "per window" % (tuple(pu.shape),))
        with torch.no_grad():
            alts = {}
            for p in ("mean", "max", "last", "cls", "attention"):
                if p == "cls" and not c64.has_cls:
                    continue
                if p == "attention" and c64.attention_pool is None:
                    continue
                alts[p] = _max_abs(pu, c64.pool(feats, None, p))
        bound = 1e-8 * (1 + float(pu.abs().max()))
        if alts[c64.pooling] > bound:
            best = min(alts, key=alts.get)
            if alts[best] <= bound:
                raise NotRepresentable(
                    "the pooled row differs from the module's (max-abs "
                    "%.3g): pooling looks like %s, sattn pooled %s"
                    % (alts[c64.pooling], best, c64.pooling))
            raise NotRepresentable(
                "the head's input differs from every pooling sattn runs "
                "(max-abs: %s): the encoder's rows or the pooling are not "
                "the family's" % ", ".join(
                    "%s %.3g" % kv for kv in sorted(alts.items())))
        checks.append("pooled row: %s (max-abs %.3g)" % (c64.pooling,
                                                          alts[c64.pooling]))
    with torch.no_grad():
        out_c = c64(x)
    if out_u.shape != out_c.shape:
        raise NotRepresentable("the module's output has shape %s, sattn's "
                               "model gives %s"
                               % (tuple(out_u.shape), tuple(out_c.shape)))
    d = _max_abs(out_u, out_c)
    checks.append("output: max-abs %.3g (float64)" % d)
    if d > 1e-8 * (1 + float(out_u.abs().max())):
        raise NotRepresentable(
            "the module's output differs from sattn's model of it (max-abs "
            "%.3g in float64) although each part matched" % d)
    return checks


# ------------------------------------------------------------ verify

def _windows_from_sequence(x, usable, ends, n):
    B = len(ends)
    Fr = x.shape[1]
    xw = np.zeros((B, n, Fr), np.float64)
    mask = np.ones((B, n), bool)
    for b, t in enumerate(ends):
        for r in range(n):
            f = int(t) - n + r
            if 0 <= f < len(x) and usable[f]:
                xw[b, r] = x[f]
                mask[b, r] = False
    return xw, mask


def _probs(net, xw, mask, classes):
    dt = next(net.parameters()).dtype
    with torch.no_grad():
        y = net(torch.from_numpy(xw).to(dt), torch.from_numpy(mask))
        if classes:
            y = torch.softmax(y, dim=-1)
    return y.to(torch.float64).numpy()


def _rms(v):
    return float(np.sqrt(np.mean(np.square(v))))


def verify(module, rec, path, prefix="", window=None, hop=None, draws=6,
           seed=7):
    """Run the file written for rec (recognise()) through libsattn and the
    modules; returns a dict of figures and words, raises VerifyFailed."""
    import sattn
    can = rec.canonical
    n = window or can.window or min(can.max_window, PROBE_WINDOW) or 12
    hop = hop or max(1, n // 4)
    Fr = can.d_frame
    classes = can.classes
    model = sattn.Model.from_safetensors(path, prefix)
    out = {"windows": 0}
    c64 = copy.deepcopy(can).double().eval()
    c32 = copy.deepcopy(can).float().eval()
    # 1. the module against the canonical one, unmasked, float32 and 64
    u64 = _double(module)
    u32 = copy.deepcopy(module).float().eval()
    x = _probe_windows(32, n, Fr, seed, gains=False).numpy()
    nomask = np.zeros(x.shape[:2], bool)
    ref = _probs(c64, x, nomask, classes)
    e32 = float(np.abs(_probs(c32, x, nomask, classes) - ref).max())

    def user(net, xw, mask=None):
        dt = next(net.parameters()).dtype
        with torch.no_grad():
            if mask is not None and rec.user_mask:
                y = net(torch.from_numpy(xw).to(dt),
                        **{rec.user_mask: torch.from_numpy(mask)})
            else:
                y = net(torch.from_numpy(xw).to(dt))
            if classes:
                y = torch.softmax(y, dim=-1)
        return y.to(torch.float64).numpy()
    eu64 = float(np.abs(user(u64, x) - ref).max()) if u64 is not None \
        else None
    eu32 = float(np.abs(user(u32, x) - ref).max())
    out["module_vs_canonical"] = (eu64, eu32, e32)
    # the module in float64 against the canonical module in float64: a
    # structural match agrees to far below PyTorch float32's own error (an
    # ONNX graph's float32 constants, e.g. its 1/sqrt(d_head), stay within
    # it)
    if (eu64 if eu64 is not None else eu32) > (
            max(1e-9, e32) if eu64 is not None else 4 * e32):
        raise VerifyFailed(
            "the module and sattn's model of it differ on unmasked windows "
            "(max-abs %.3g; PyTorch float32's own error %.3g)"
            % (eu64 if eu64 is not None else eu32, e32))
    # 2. libsattn against the canonical module (masks), float32 bound
    rng = np.random.default_rng(seed)
    es, e32s = [], []
    um = []
    for d in range(draws):
        N = 5 * n + 7
        xs = rng.standard_normal((N, Fr)).astype(np.float32)
        xs *= np.float32(10.0 ** rng.uniform(-1, 1))
        valid = np.ones(N, np.uint8)
        g0 = 2 * n + d
        valid[g0:g0 + n + 2] = 0           # a GAP run: one window empty
        valid[n // 2 + d] = 0
        xs[n + 1 + d, d % Fr] = np.nan     # a NaN frame, masked
        usable = (valid != 0) & np.isfinite(xs).all(axis=1)
        s = sattn.Stream(model, window=n, hop=hop,
                         output="classes" if classes else "mean",
                         invalid="mask")
        rows, infos, i = [], [], 0
        for blk in (3, 7, 1, 11, 5):
            pass
        b = 0
        blocks = (3, 7, 1, 11, 5, 2)
        while i < N:
            k = blocks[b % len(blocks)]
            r, info = s.push(xs[i:i + k], valid=valid[i:i + k])
            rows.append(r.copy())
            infos.append(info.copy())
            i, b = i + k, b + 1
        r, info = s.drain()
        rows.append(r.copy())
        infos.append(info.copy())
        rows = np.concatenate(rows).astype(np.float64)
        info = np.concatenate(infos)
        ends = info["window_end"].astype(np.int64)
        xw, mask = _windows_from_sequence(xs.astype(np.float64), usable,
                                          ends, n)
        ok = ~mask.all(axis=1)
        if list(info["valid"]) != [int(v) for v in ok]:
            raise VerifyFailed("libsattn flags windows valid %s where the "
                               "masks give %s" % (list(info["valid"]),
                                                  [int(v) for v in ok]))
        if not np.all(rows[~ok] == 0):
            raise VerifyFailed("libsattn's rows of windows with no usable "
                               "frame are not zeros")
        ref = _probs(c64, xw[ok], mask[ok], classes)
        f32 = _probs(c32, xw[ok].astype(np.float32).astype(np.float64),
                     mask[ok], classes)
        es.append(float(np.abs(rows[ok] - ref).max()))
        e32s.append(float(np.abs(f32 - ref).max()))
        out["windows"] += int(ok.sum())
        if rec.user_mask and u64 is not None:
            xm = xw[ok].copy()
            um.append(float(np.abs(user(u64, xm, mask[ok]) - ref).max()))
    # each draw's max-abs error, as the RMS over the draws: a single
    # draw's is a few float32 ulps and too noisy to hold libsattn to
    # (tests/python/test_whole_models.py measured the spread)
    e, b32 = _rms(es), _rms(e32s)
    out["sattn"], out["bound"] = e, b32
    out["draws"] = draws
    out["module_masked"] = max(um) if um else None
    if e > b32:
        why = _diagnose(c64, rows[ok], xw[ok], mask[ok], classes, b32)
        raise VerifyFailed(
            "libsattn's output differs from the module (max-abs %.3g over "
            "%d windows, masked frames included; PyTorch float32's own "
            "error %.3g)%s" % (e, out["windows"], b32, why))
    # the module's own masks, float64 against float64: within PyTorch
    # float32's error (the float64 twin agrees far closer when the
    # semantics are the spec's)
    if um and max(um) > max(1e-9, b32):
        raise VerifyFailed(
            "the module given a key padding mask (%s) differs from sattn's "
            "masks (max-abs %.3g): docs/models.md's masked frames are never "
            "keys, never pooled, and enter the front end as zeros"
            % (rec.user_mask, max(um)))
    return out


def _diagnose(c64, rows, xw, mask, classes, bound):
    """Words on what libsattn seems to have run instead: the canonical
    module with one part changed at a time, against libsattn's rows."""
    alts = []
    for p in ("mean", "last", "max", "cls", "attention"):
        if p != c64.pooling and (p != "cls" or c64.has_cls) and (
                p != "attention" or c64.attention_pool is not None):
            alts.append(("pooling looks like %s, sattn pooled %s"
                         % (c64.pooling, p), dict(pooling=p)))
    if c64.input_norm != "none":
        alts.append(("the module normalises each window (%s), sattn did "
                     "not" % c64.input_norm, dict(input_norm="none")))
    if c64.front_end == "conv" and c64.conv_activation != "none":
        alts.append(("the module applies %s after its conv stem, sattn "
                     "did not" % c64.conv_activation,
                     dict(conv_activation="none")))
    best = None
    for words, change in alts:
        alt = copy.deepcopy(c64)
        for k, v in change.items():
            setattr(alt, k, v)
        try:
            d = float(np.abs(_probs(alt, xw, mask, classes) - rows).max())
        except Exception:  # noqa: BLE001
            continue
        if d <= 10 * bound and (best is None or d < best[0]):
            best = (d, words)
    return ": " + best[1] if best else ""
