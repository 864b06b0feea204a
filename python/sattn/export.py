# SPDX-License-Identifier: LGPL-2.1-or-later
"""Export a trained PyTorch module as safetensors for the sattn element.

sattn-export writes what INPUT (or --module NAME inside it) is, whole:

  * a whole model per window, recognised by what its forward computes
    (torch.fx), whatever its attribute names: [standardisation] ->
    [per-window RMS / power normalisation] -> a front end (nn.Linear per
    frame, or one nn.Conv1d over samples or frames, optional ReLU/GELU)
    -> [CLS token] -> [learned positions] -> nn.TransformerEncoder (or
    encoder layers; batch_first or not) -> [final LayerNorm] -> pooling
    (mean, max, CLS / first token, last, attention) -> [head: Linear, or
    Linear-act-Linear]; sattn.nn.SignalTransformer as it is.  Written
    under docs/models.md's names with its metadata, labels (--labels
    FILE, one per line) and input contract (--sample-rate, --channels,
    --frame-size, --window, --hop, --min-probability, and statistics from
    --contract-data FILE.npy); the element runs it on every window
    (output=classes, mean, last or window).  Anything else (an nn.GRU, a
    second conv, a tensor the written model would not use, ...) is
    refused with words naming what was met.  The tool then runs the
    module and libsattn (sattn.Model.from_safetensors, sattn.Stream) on
    the same random windows, start padding, a GAP and NaN frames masked
    included, and leaves the file behind only when they agree within
    PyTorch float32's own error on those windows (it says both figures);
  * an ONNX file (model.onnx, as torch.onnx.export writes such a model,
    opsets 14-17): mapped onto the same family, verified the same way
    with the graph evaluated by numpy (needs python3-onnx);
  * an nn.TransformerEncoderLayer: the whole layer (self_attn.*, linear1,
    linear2, norm1, norm2) with layer, activation, norm_first, norm_eps
    and positions (--positions) as metadata;
  * an attention module of a recognised layout: that module.

A module that is none of these (a container) is exported through its one
part that is: it says on stderr which part it wrote and which tensors it
left out; with several such parts it stops and lists them.  A part named
with --module (e.g. --module self_attn of a layer) is written alone, and
the tool says on stderr which part it wrote and what it left out.
--list shows every part INPUT holds.  After writing a layer the tool
loads the file through libsattn's loader (sattn_model_load, via the sattn
Python package) when it can, and says so; a whole model is verified as
above (and not written when it cannot be).

Recognised attention layouts (tensor names under the module's prefix; a
Linear "x" is x.weight and, optionally, x.bias; [..] may be absent):

  mha           nn.MultiheadAttention: in_proj_weight, [in_proj_bias],
                out_proj, [bias_k, bias_v]
  mha-separate  the same with q_proj_weight, k_proj_weight, v_proj_weight
  hf            q_proj, k_proj, v_proj, [out_proj | o_proj]  (Hugging Face)
  bert          query, key, value, [output.dense]; or self.query, ...
  diffusers     to_q, to_k, to_v, [to_out.0]
  llama         wq, wk, wv, [wo]  (LLaMA reference code)
  seeds         W_q, W_k, W_v, [W_o]  (a QKV module of three Linear layers)
  fused         qkv, [proj]  (timm: qkv rows are [Wq; Wk; Wv])

The output holds the module's tensors under their own names (no renaming)
and, in "__metadata__", what the tensors do not say: num_heads, head_dim,
value_dim, layout, embed_dim (and kdim, vdim, add_zero_attn, batch_first
for nn.MultiheadAttention).  libsattn reads them and checks them against
the element's properties.

Inputs (INPUT is a file written by torch.save):
  * a pickled module (torch.save(model, "model.pt")).  Classes defined in
    the current directory or next to INPUT are found (both are put on
    sys.path);
  * a state dict (torch.save(model.state_dict(), "sd.pt")): either give
    --factory to build the module first (then as above), or let the tool
    recognise the tensors by name.  A state dict does not record what the
    module's constructor was given: an attention module then needs
    --heads (except the single-head seeds layout), an encoder layer
    --heads, --activation, --norm-first and --norm-eps; a whole model
    needs --factory (e.g. sattn.nn:SignalTransformer with
    --factory-kwargs).
State dicts are loaded with torch.load(weights_only=True) where PyTorch
supports it; a whole-module pickle needs weights_only=False, which runs
code from the file: it is used only for files that need it, and refused
with --weights-only.

Examples (a model with one 64-wide, 4-head encoder layer, at 16 kHz and
at 44.1 kHz resampled to 16 kHz; frame-size 64 needs a rate it divides):
  sattn-export --list model.pt
  sattn-export model.pt layer.safetensors
  gst-launch-1.0 audiotestsrc num-buffers=50 ! audio/x-raw,format=F32LE,channels=1,rate=16000 ! sattn frame-size=64 weights=layer.safetensors ! fakesink
  gst-launch-1.0 audiotestsrc num-buffers=50 ! audio/x-raw,rate=44100 ! audioconvert ! audioresample ! audio/x-raw,format=F32LE,channels=1,rate=16000 ! sattn frame-size=64 weights=layer.safetensors ! fakesink
  sattn-export --module encoder.layers.0.self_attn model.pt l0.safetensors
  sattn-export --factory mymodels:build --module attn sd.pt a.safetensors
  sattn-export --labels labels.txt recogniser.pt recogniser.safetensors

Uses the safetensors package when installed, otherwise writes the format
itself (8-byte little-endian header length, JSON header, raw tensors).
As a module (sattn.export) it offers export_mha(), export_attention()
and save_safetensors(); it needs PyTorch, which it imports when used.
"""

import argparse
import collections
import importlib
import importlib.util
import json
import os
import sys

# The command's name in messages (main() sets it: sattn-export, or the
# source tree's examples/export-torch-mha.py).
PROG = "sattn-export"
MHA_SUFFIXES = ("in_proj_weight", "q_proj_weight", "k_proj_weight",
                "v_proj_weight", "in_proj_bias", "out_proj.weight",
                "out_proj.bias", "bias_k", "bias_v")

DTYPES = ("F32", "F16", "BF16", "F64")


def _load_stfile():
    """sattn/stfile.py, the package's one safetensors writer, loaded by
    its path beside this file: this module also runs from the source tree
    (examples/export-torch-mha.py), where the package itself may not
    import (no libsattn yet)."""
    spec = importlib.util.spec_from_file_location(
        "sattn_stfile", os.path.join(os.path.dirname(os.path.abspath(
            __file__)), "stfile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


stfile = _load_stfile()


def _torch():
    try:
        import torch
    except ImportError:
        sys.exit(PROG + ": PyTorch is needed (Debian: apt install "
                 "python3-torch)")
    return torch


def _torch_dtype(name):
    torch = _torch()
    return {"F32": torch.float32, "F16": torch.float16,
            "BF16": torch.bfloat16, "F64": torch.float64}[name]


def _raw_bytes(t, name):
    """Little-endian bytes of a contiguous CPU tensor of a float dtype."""
    torch = _torch()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    if t.dtype == torch.float32:
        return t.numpy().astype("<f4").tobytes()
    if t.dtype == torch.float64:
        return t.numpy().astype("<f8").tobytes()
    raise ValueError("tensor %s: dtype %s is not exported" % (name, t.dtype))


def _write_safetensors(path, tensors, metadata):
    """The safetensors format through the package's one writer
    (sattn.stfile): tensors in the given order, written atomically."""
    torch = _torch()
    tname = {torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.float64: "F64"}
    stfile.write_raw(path, [(name, tname[t.dtype], list(t.shape),
                             _raw_bytes(t, name))
                            for name, t in tensors.items()],
                     metadata, atomic=True)


def save_safetensors(path, tensors, metadata=None, dtype="F32",
                     use_package=True):
    """Save {name: tensor} as safetensors, converted to dtype (F32, F16,
    BF16 or F64).  metadata: {str: str}."""
    if dtype not in DTYPES:
        raise ValueError("dtype must be one of " + ", ".join(DTYPES))
    td = _torch_dtype(dtype)
    conv = collections.OrderedDict(
        (k, v.detach().to("cpu", td).contiguous()) for k, v in tensors.items())
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if use_package:
        try:
            from safetensors.torch import save_file
        except ImportError:
            save_file = None
        if save_file is not None:
            save_file(dict(conv), path, metadata=meta or None)
            return
    _write_safetensors(path, conv, meta)


def mha_tensors(mha, prefix=""):
    """The state dict entries of a MultiheadAttention, names prefixed."""
    return collections.OrderedDict(
        (prefix + k, v) for k, v in mha.state_dict().items() if v is not None)


def mha_metadata(mha, prefix=""):
    """What the state dict does not say, as safetensors metadata."""
    return {
        prefix + "num_heads": mha.num_heads,
        prefix + "embed_dim": mha.embed_dim,
        prefix + "kdim": mha.kdim,
        prefix + "vdim": mha.vdim,
        prefix + "add_zero_attn": int(bool(mha.add_zero_attn)),
        prefix + "batch_first": int(bool(getattr(mha, "batch_first", False))),
        prefix + "head_dim": mha.embed_dim // mha.num_heads,
        prefix + "value_dim": mha.embed_dim // mha.num_heads,
        prefix + "layout": ("mha" if mha._qkv_same_embed_dim
                            else "mha-separate"),
    }


def check_self_attention(mha, what="module"):
    """sattn feeds each frame as query, key and value."""
    if mha.kdim != mha.embed_dim or mha.vdim != mha.embed_dim:
        raise ValueError(
            "%s has kdim=%d, vdim=%d, embed_dim=%d: sattn computes "
            "self-attention on frames, which needs kdim = vdim = embed_dim"
            % (what, mha.kdim, mha.vdim, mha.embed_dim))


def export_mha(mha, path, dtype="F32", prefix="", extra_metadata=None,
               self_attention=True, use_package=True):
    """Write one nn.MultiheadAttention to path.  prefix is prepended to the
    tensor names (select it with the element's weights-prefix)."""
    torch = _torch()
    if not isinstance(mha, torch.nn.MultiheadAttention):
        raise TypeError("not a torch.nn.MultiheadAttention: %r" % type(mha))
    if self_attention:
        check_self_attention(mha)
    meta = {"format": "pt"}
    meta.update(mha_metadata(mha, prefix))
    meta.update(extra_metadata or {})
    save_safetensors(path, mha_tensors(mha, prefix), meta, dtype, use_package)


# ------------------------------------------------------------------ layouts

# (name, key tensor that marks the layout, q, k, v weights (None: fused),
#  output Linear names, the tensors that belong to the module).  The same
# table as libsattn's (core/io/layouts.c): keep them in step.
def _lin(*names):
    return tuple(n + s for n in names for s in (".weight", ".bias"))


LAYOUTS = (
    ("mha", "in_proj_weight", None, ("out_proj",),
     ("in_proj_weight", "in_proj_bias") + _lin("out_proj")
     + ("bias_k", "bias_v")),
    ("mha-separate", "q_proj_weight",
     ("q_proj_weight", "k_proj_weight", "v_proj_weight"), ("out_proj",),
     ("q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias")
     + _lin("out_proj") + ("bias_k", "bias_v")),
    ("hf", "q_proj.weight", ("q_proj.weight", "k_proj.weight",
                             "v_proj.weight"), ("out_proj", "o_proj"),
     _lin("q_proj", "k_proj", "v_proj", "out_proj", "o_proj")),
    ("bert", "query.weight", ("query.weight", "key.weight", "value.weight"),
     ("output.dense",), _lin("query", "key", "value", "output.dense")),
    ("bert", "self.query.weight", ("self.query.weight", "self.key.weight",
                                   "self.value.weight"), ("output.dense",),
     _lin("self.query", "self.key", "self.value", "output.dense")),
    ("diffusers", "to_q.weight", ("to_q.weight", "to_k.weight",
                                  "to_v.weight"), ("to_out.0",),
     _lin("to_q", "to_k", "to_v", "to_out.0")),
    ("llama", "wq.weight", ("wq.weight", "wk.weight", "wv.weight"), ("wo",),
     _lin("wq", "wk", "wv", "wo")),
    ("seeds", "W_q.weight", ("W_q.weight", "W_k.weight", "W_v.weight"),
     ("W_o",), _lin("W_q", "W_k", "W_v", "W_o")),
    ("fused", "qkv.weight", None, ("proj",), _lin("qkv", "proj")),
)

LAYOUT_NAMES = tuple(sorted(set(l[0] for l in LAYOUTS)))

# Attributes that hold the head count in common attention classes
# (nn.MultiheadAttention, HF, BERT, diffusers, LLaMA, timm).
HEAD_ATTRS = ("num_heads", "num_attention_heads", "heads", "n_heads",
              "n_local_heads", "nhead")


def find_layouts(state_dict):
    """{prefix: [layout, ...]} of the attention modules in a state dict,
    prefixes '' or 'a.b.', in order of appearance."""
    out = collections.OrderedDict()
    for k in state_dict:
        for name, key, _, _, _ in LAYOUTS:
            if k == key or k.endswith("." + key):
                out.setdefault(k[:len(k) - len(key)], []).append(name)
    return out


def _layout_def(state_dict, prefix, name):
    for d in LAYOUTS:
        if d[0] == name and prefix + d[1] in state_dict:
            return d
    raise KeyError(name)


def layout_tensors(state_dict, prefix, name):
    """The module's entries of state_dict, names relative to prefix."""
    d = _layout_def(state_dict, prefix, name)
    return collections.OrderedDict(
        (k, state_dict[prefix + k]) for k in d[4]
        if state_dict.get(prefix + k) is not None)


def layout_dims(tensors, name):
    """embed_dim, Q/K size, V size, d_out (None: no output projection) of
    a module's tensors (as given by layout_tensors)."""
    d = [l for l in LAYOUTS if l[0] == name and l[1] in tensors][0]
    if d[2] is None:
        w = tensors[d[1]]
        rows = w.shape[0]
        dq = dv = rows // 3
        e = w.shape[1]
    else:
        q, _, v = (tensors[n] for n in d[2])
        e, dq, dv = q.shape[1], q.shape[0], v.shape[0]
    d_out = None
    for o in d[3]:
        if o + ".weight" in tensors:
            d_out = tensors[o + ".weight"].shape[0]
    return e, dq, dv, d_out


def module_heads(module):
    """The head count a module records, or None."""
    for a in HEAD_ATTRS:
        v = getattr(module, a, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def attention_metadata(tensors, name, heads, prefix="", head_dim=None):
    """__metadata__ entries of one attention module."""
    e, dq, dv, d_out = layout_dims(tensors, name)
    if head_dim is not None and name == "fused":
        dq = heads * head_dim
        dv = tensors["qkv.weight"].shape[0] - 2 * dq
    if dq % heads or dv % heads:
        raise ValueError("%d heads do not divide the projections' sizes "
                         "(%d for queries and keys, %d for values)"
                         % (heads, dq, dv))
    return {prefix + "num_heads": heads,
            prefix + "head_dim": dq // heads,
            prefix + "value_dim": dv // heads,
            prefix + "layout": name,
            prefix + "embed_dim": e}


def export_attention(tensors, name, heads, path, dtype="F32", prefix="",
                     extra_metadata=None, use_package=True, head_dim=None):
    """Write one attention module (tensors named as in its layout) to
    path, with its metadata; prefix is prepended to every name."""
    meta = {"format": "pt"}
    meta.update(attention_metadata(tensors, name, heads, prefix, head_dim))
    meta.update(extra_metadata or {})
    save_safetensors(path, collections.OrderedDict(
        (prefix + k, v) for k, v in tensors.items()), meta, dtype,
        use_package)


def encoder_layer_metadata(layer, prefix=""):
    """__metadata__ of an nn.TransformerEncoderLayer (issue 12's layer
    options; the attention's own go under self_attn.)."""
    torch = _torch()
    act = getattr(layer, "activation", None)
    relu_or_gelu = getattr(layer, "activation_relu_or_gelu", 0)
    if act is torch.nn.functional.gelu or isinstance(act, torch.nn.GELU) \
            or relu_or_gelu == 2:
        act_name = "gelu"
    elif act is torch.nn.functional.relu or isinstance(act, torch.nn.ReLU) \
            or relu_or_gelu == 1:
        act_name = "relu"
    else:
        raise ValueError("activation %r is neither relu nor gelu" % (act,))
    meta = {prefix + "layer": "transformer-encoder-layer",
            prefix + "activation": act_name,
            prefix + "norm_first": int(bool(layer.norm_first)),
            prefix + "norm_eps": repr(float(layer.norm1.eps))}
    meta.update(mha_metadata(layer.self_attn, prefix + "self_attn."))
    return meta


def find_mha_modules(model):
    """[(name, module)] of every MultiheadAttention in model."""
    torch = _torch()
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, torch.nn.MultiheadAttention)]


def find_mha_prefixes(state_dict):
    """Prefixes ('' or 'a.b.') of the attention modules in a state dict."""
    out = []
    for k in state_dict:
        for s in ("in_proj_weight", "q_proj_weight"):
            if k == s or k.endswith("." + s):
                out.append(k[:len(k) - len(s)])
    return out


def _load_factory(spec, kwargs):
    mod_name, sep, attr = spec.partition(":")
    if not sep or not attr:
        sys.exit(PROG + ": --factory wants MODULE:CALLABLE or "
                 "FILE.py:CALLABLE, got %r" % spec)
    if mod_name.endswith(".py"):
        s = importlib.util.spec_from_file_location("sattn_factory", mod_name)
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
    else:
        sys.path.insert(0, os.getcwd())
        mod = importlib.import_module(mod_name)
    obj = mod
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj(**kwargs)


def _supports_weights_only():
    import inspect
    try:
        return "weights_only" in inspect.signature(
            _torch().load).parameters
    except (TypeError, ValueError):
        return False


def _unpickle_hint(e):
    """Words for a pickle whose class cannot be imported."""
    text = str(e)
    if "Can't get attribute" in text or isinstance(
            e, (AttributeError, ModuleNotFoundError)):
        return (" (the file pickles the module's class by its import path, "
                "and that class cannot be imported here: put the class in "
                "a module importable next to the file or in the current "
                "directory, e.g. mymodels.py, and save it from there; or "
                "save the state dict and give --factory module:callable "
                "(or FILE.py:callable) that builds the module)")
    return ""


def _load_input(path, weights_only=False):
    """torch.load, safely where possible: weights_only=True first; a whole
    model pickle needs weights_only=False (it runs code from the file),
    refused when weights_only is set.  Classes of the current directory
    and of the input's directory are importable while unpickling."""
    torch = _torch()
    for d in (os.path.dirname(os.path.abspath(path)), os.getcwd()):
        if d not in sys.path:
            sys.path.insert(0, d)
    if _supports_weights_only():
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unpickling problem
            if weights_only or isinstance(e, (OSError, EOFError)):
                sys.exit(PROG + ": cannot load %s with "
                         "weights_only=True: %s" % (path, e))
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001
            sys.exit(PROG + ": cannot load %s: %s%s"
                     % (path, e, _unpickle_hint(e)))
    if weights_only:
        sys.exit(PROG + ": this PyTorch's torch.load has no "
                 "weights_only")
    try:
        return torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - report any unpickling problem
        sys.exit(PROG + ": cannot load %s: %s%s"
                 % (path, e, _unpickle_hint(e)))


def _describe(tensors, name, heads):
    e, dq, dv, d_out = layout_dims(tensors, name)
    bias = any(k.endswith("bias") and not k.startswith(("out_proj", "o_proj",
               "output.", "to_out", "wo", "W_o", "proj")) for k in tensors)
    h = ("heads=%d head_dim=%s value_dim=%s" %
         (heads, dq // heads if dq % heads == 0 else "?",
          dv // heads if dv % heads == 0 else "?")) if heads \
        else "heads=? q/k size=%d v size=%d" % (dq, dv)
    return ("layout=%s embed_dim=%d %s qkv_bias=%s out_proj=%s"
            % (name, e, h, "yes" if bias else "no",
               "no" if d_out is None else "%d" % d_out))


def _list(obj, model):
    """--list: every whole model, encoder layer and attention module in
    INPUT."""
    torch = _torch()
    sd = obj.state_dict() if model else obj
    found = find_layouts(sd)
    if model:
        for n, m in obj.named_modules():
            if is_whole_model(m):
                try:
                    words = _whole().recognise(m).description
                except ValueError as e:
                    words = "not exportable: %s" % e
                print("%s\twhole model: %s" % (n or "''", words))
            elif isinstance(m, torch.nn.TransformerEncoderLayer):
                md = encoder_layer_metadata(m)
                print("%s\tlayer=transformer-encoder-layer activation=%s "
                      "norm_first=%s norm_eps=%s (written whole with "
                      "--module %s)" % (n or "''", md["activation"],
                                        md["norm_first"], md["norm_eps"],
                                        n or "''"))
    else:
        for pf in _prefixes(sd):
            kind = _sd_kind(sd, pf)
            if kind == "whole":
                print("%s\twhole model (a state dict: export it with "
                      "--factory)" % (pf[:-1] or "''"))
            elif kind == "layer":
                print("%s\tlayer=transformer-encoder-layer (a state dict: "
                      "give --heads, --activation, --norm-first, "
                      "--norm-eps)" % (pf[:-1] or "''"))
    for pf, names in found.items():
        label = pf[:-1] or "''"
        if len(names) > 1:
            print("%s\tambiguous: %s under one prefix" % (label,
                                                          ", ".join(names)))
            continue
        heads = None
        if model:
            try:
                heads = module_heads(obj.get_submodule(pf[:-1])
                                     if pf else obj)
            except AttributeError:
                heads = None
        if heads is None and names[0] == "seeds":
            heads = 1      # the seeds' QKV module is single-head
        t = layout_tensors(sd, pf, names[0])
        print("%s\t%s" % (label, _describe(t, names[0], heads)))
    if not found:
        print("no attention module (layouts recognised: %s)"
              % ", ".join(LAYOUT_NAMES), file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------- what INPUT points at

KIND_WORDS = {"whole": "whole model", "layer": "nn.TransformerEncoderLayer",
              "mha": "nn.MultiheadAttention", "attention": "attention module"}

LAYER_TENSORS = ("linear1.weight", "linear2.weight", "norm1.weight",
                 "norm2.weight")


def _prefixes(sd):
    """Every module prefix ('' or 'a.b.') of a state dict's names, in order
    of first appearance."""
    out = collections.OrderedDict()
    for k in sd:
        parts = k.split(".")
        for i in range(len(parts)):
            out.setdefault(".".join(parts[:i]) + ("." if i else ""), None)
    return list(out)


def _sd_kind(sd, pf):
    """What the tensors under prefix pf of a state dict are: "whole" (an
    embed Linear and encoder layers), "layer" (an nn.TransformerEncoderLayer:
    self_attn, linear1/2, norm1/2), "attention" (a recognised layout) or
    None."""
    if pf + "embed.weight" in sd and any(
            k.startswith(pf + "encoder.layers.") for k in sd):
        return "whole"
    if all(pf + k in sd for k in LAYER_TENSORS) and \
            pf + "self_attn.in_proj_weight" in sd:
        return "layer"
    if pf in find_layouts(sd):
        return "attention"
    return None


def _module_kind(m):
    """The same for a module: "whole", "layer", "mha", "attention" or
    None."""
    torch = _torch()
    if is_whole_model(m):
        return "whole"
    if isinstance(m, torch.nn.TransformerEncoderLayer):
        return "layer"
    if isinstance(m, torch.nn.MultiheadAttention):
        return "mha"
    if "" in find_layouts(m.state_dict()):
        return "attention"
    return None


def _parts(obj, is_model, pf):
    """[(name, kind)] of the outermost parts of the module at prefix pf
    (a module: obj itself) that sattn runs whole: a part inside another
    is not listed."""
    out = []
    if is_model:
        for n, m in obj.named_modules():
            if n and not any(n.startswith(p + ".") for p, _ in out):
                k = _module_kind(m)
                if k:
                    out.append((n, k))
        return out
    for p in _prefixes(obj):
        if p.startswith(pf) and p != pf and \
                not any(p.startswith(q + ".") for q, _ in out):
            k = _sd_kind(obj, p)
            if k:
                out.append((p[:-1], k))
    return [(n[len(pf):], k) for n, k in out]


def _describe_parts(parts, sd, pf):
    """Parts for a message; an encoder layer's attention is named too."""
    words = []
    for n, k in parts:
        inner = ""
        if k in ("layer", "whole"):
            sub = [q[:-1] for q in find_layouts(sd)
                   if q.startswith(pf + n + ".")]
            if sub:
                inner = "; attention: " + ", ".join(s[len(pf):] for s in sub)
        words.append("%s (%s%s)" % (n, KIND_WORDS[k], inner))
    return ", ".join(words)


def _left_out(sd, pf):
    """Names of sd outside prefix pf, for saying what a part leaves out."""
    out = [k for k in sd if not k.startswith(pf) and sd[k] is not None]
    shown = ", ".join(out[:6]) + (", ..." if len(out) > 6 else "")
    return "%d tensor(s): %s" % (len(out), shown) if out else "no tensor"


def _use_line(path, meta, prefix):
    return ("use: sattn weights=%s%s" %
            (path, " weights-prefix=%s" % prefix if prefix else ""))


def _whole():
    """sattn.whole (recognition and verification of whole models), also
    when this file runs from the source tree under another name."""
    try:
        from sattn import whole
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        if here + "/.." not in sys.path:
            sys.path.insert(0, os.path.join(here, os.pardir))
        from sattn import whole
    return whole


def is_whole_model(module):
    """Whether module is a whole model per window, recognised by what its
    forward computes (a transformer encoder reached through a front end:
    sattn.whole), not by its attribute names.  A container whose input
    goes straight into an encoder layer is not (its parts are)."""
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        return False
    w = _whole()
    return w.is_candidate(module) and w.has_front_end(module)


def whole_model_metadata(module, pooling="mean", positions=None,
                         labels=None, prefix=""):
    """__metadata__ of a whole model: the module's own (a SignalTransformer
    knows it) or what its parts say, completed by the arguments."""
    torch = _torch()
    if hasattr(module, "metadata") and callable(module.metadata):
        md = dict(module.metadata())
    else:
        layer = module.encoder.layers[0]
        md = {"format": "pt", "model": "signal-transformer",
              "num_heads": str(layer.self_attn.num_heads),
              "pooling": pooling,
              "positions": ("learned" if getattr(module, "pos_embed", None)
                            is not None else (positions or "none")),
              "causal": "0"}
        lm = encoder_layer_metadata(layer)
        for k in ("activation", "norm_first", "norm_eps"):
            md[k] = str(lm[k])
        head = getattr(module, "head", None)
        if isinstance(head, torch.nn.Sequential) and len(head) == 3:
            md["head_activation"] = ("gelu" if isinstance(
                head[1], torch.nn.GELU) else "relu")
    if positions is not None and md.get("positions") not in (None, positions):
        raise ValueError("--positions %s but the model says positions=%s"
                         % (positions, md["positions"]))
    if labels is not None:
        md["labels"] = json.dumps(list(labels))
    return {prefix + k: str(v) for k, v in md.items()}


def check_with_sattn(path, prefix=""):
    """Load the written file through libsattn's one loader
    (sattn_model_load, via the Python package) when the package is
    importable: the file is then known to run in the element.  Returns a
    line to print."""
    try:
        import sattn
        m = sattn.Model.from_safetensors(path, prefix)
    except ImportError:
        return "not checked with libsattn (the sattn package is not importable)"
    except Exception as e:   # SattnError and a missing library alike
        raise SystemExit(PROG + ": libsattn refuses %s: %s"
                         % (path, e))
    return "libsattn loads it: %s model, %d layer(s)%s" % (
        m.kind, m.layers, ", %d classes" % m.classes if m.classes else "")


def _contract_args(a):
    """The input contract options as SignalTransformer attributes."""
    out = {}
    for k in ("sample_rate", "channels", "frame_size", "window", "hop",
              "min_probability"):
        v = getattr(a, k, None)
        if v is not None:
            out[k] = v
    return out


def _export_whole(a, module, name, out_prefix, said_part, die, onnx=False):
    """A whole model: recognised by its forward (or an ONNX file's graph,
    onnx=True: module is then the file's name), written under the spec's
    names with its metadata and input contract, verified against the
    module (the graph) through libsattn before it is reported (and left
    behind)."""
    torch = _torch()
    w = _whole()
    labels = None
    if a.labels:
        with open(a.labels, encoding="utf-8") as f:
            labels = [ln.rstrip("\n") for ln in f if ln.strip()]
    try:
        if onnx:
            from sattn import onnx_in
            rec, module = onnx_in.recognise(module, window=a.window,
                                            channels=a.channels)
        else:
            rec = w.recognise(module, window=a.window, channels=a.channels,
                              pooling_hint=a.pooling)
    except ValueError as e:
        die("%s%s is not a model sattn runs exactly: %s; nothing written"
            % (a.input, " (%s)" % name if name else "", e))
    can = rec.canonical
    if a.positions is not None and a.positions != can.positions:
        die("--positions %s but the module's forward has %s positions "
            "(a whole model's positions are read from its forward); "
            "nothing written" % (a.positions, can.positions))
    if labels is not None:
        if len(labels) != can.classes:
            die("%d labels in %s for %d classes; nothing written"
                % (len(labels), a.labels, can.classes))
        can.labels = labels
    for k, v in _contract_args(a).items():
        if k == "channels" and can.channels not in (None, v):
            die("--channels %d but the model's power normalisation sums "
                "over %d" % (v, can.channels))
        setattr(can, k, v)
    if can.channels and can.frame_size is None and \
            can.d_frame % can.channels == 0:
        can.frame_size = can.d_frame // can.channels
    if can.channels and can.frame_size and \
            can.channels * can.frame_size != can.d_frame:
        die("--channels %d x --frame-size %d is not the model's %d values "
            "per frame" % (can.channels, can.frame_size, can.d_frame))
    if can.max_window and can.window and can.window > can.max_window:
        die("--window %d is longer than the learned positions' %d frames"
            % (can.window, can.max_window))
    if a.contract_data:
        import numpy as np
        data = np.load(a.contract_data)
        if data.ndim != 3 or data.shape[2] != can.d_frame:
            die("%s holds an array of shape %s: expected training windows "
                "(N, n, %d)" % (a.contract_data, data.shape, can.d_frame))
        masks = ~np.isfinite(data).all(axis=2)
        can.fit_contract(np.nan_to_num(data), masks)
    meta = {out_prefix + k: str(v) for k, v in can.metadata().items()}
    tensors = collections.OrderedDict(
        (out_prefix + k, v) for k, v in rec.tensors().items())
    # the file is written beside OUTPUT and renamed once verified
    tmp = a.output + ".unverified"
    save_safetensors(tmp, tensors, meta, a.dtype,
                     use_package=not a.no_package)
    try:
        ref = can
        if a.dtype not in ("F32", "F64"):
            # the file's weights are rounded: the model to compare is
            # the module with those weights
            import copy
            ref = copy.deepcopy(can)
            td = _torch_dtype(a.dtype)
            with torch.no_grad():
                for v in ref.state_dict().values():
                    v.copy_(v.to(td).to(v.dtype))
            rec.canonical = ref
        try:
            import sattn  # noqa: F401 - verify() needs it
        except ImportError as e:
            raise w.VerifyFailed("the sattn package (libsattn) is not "
                                 "importable (%s): a whole model is written "
                                 "only once libsattn ran it" % e)
        try:
            fig = w.verify(module if ref is can else ref, rec, tmp,
                           out_prefix, window=can.window, hop=can.hop)
        except w.VerifyFailed:
            raise
        except Exception as e:  # noqa: BLE001 - SattnError and the like
            raise w.VerifyFailed("libsattn refuses it: %s" % e)
    except w.VerifyFailed as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        die("%s%s: %s; nothing written" % (a.input, " (%s)" % name
                                          if name else "", e))
    os.replace(tmp, a.output)
    said_part("whole model")
    mu = fig["module_vs_canonical"]
    rounded = ""
    if ref is not can:
        import copy
        x = w._probe_windows(16, can.window or can.max_window or 12,
                             can.d_frame, gains=False)
        with torch.no_grad():
            dr = float((copy.deepcopy(can).double()(x) - copy.deepcopy(
                ref).double()(x)).abs().max())
        rounded = (" (against the module with its weights rounded to %s, "
                   "which itself moves the output by max-abs %.3g)"
                   % (a.dtype, dr))
    print("wrote %s: the whole model %s (%s), %s; verified: libsattn vs the "
          "module max-abs %.3g over %d windows (start padding, a GAP, a NaN "
          "frame masked; RMS of %d draws' max-abs) <= PyTorch float32's own "
          "%.3g%s; the module vs its sattn form %s%s" % (
              a.output, name or (a.input if onnx else
                                 type(module).__name__), rec.description,
              a.dtype, fig["sattn"], fig["windows"], fig["draws"],
              fig["bound"], rounded,
              "%.3g (float64)" % mu[0] if mu[0] is not None
              else "%.3g (float32)" % mu[1],
              "; with the module's own key padding mask %.3g"
              % fig["module_masked"] if fig.get("module_masked") is not None
              else ""))
    return 0

def _layer_metadata_from_args(a, tensors, prefix):
    """An encoder layer's metadata from the command line (a state dict
    does not record its constructor's arguments)."""
    missing = [f for f, v in (("--heads", a.heads),
                              ("--activation", a.activation),
                              ("--norm-first", a.norm_first),
                              ("--norm-eps", a.norm_eps)) if v is None]
    if missing:
        raise ValueError(
            "a state dict of an nn.TransformerEncoderLayer does not record "
            "how it was built: give %s (PyTorch's defaults are "
            "--activation relu --norm-first 0 --norm-eps 1e-05; the head "
            "count is the nhead it was built with), or --factory to build "
            "the module first" % ", ".join(missing))
    att = collections.OrderedDict(
        (k[len("self_attn."):], v) for k, v in tensors.items()
        if k.startswith("self_attn."))
    meta = {prefix + "layer": "transformer-encoder-layer",
            prefix + "activation": a.activation,
            prefix + "norm_first": int(a.norm_first),
            prefix + "norm_eps": repr(float(a.norm_eps))}
    meta.update(attention_metadata(att, "mha", a.heads,
                                   prefix + "self_attn."))
    meta[prefix + "self_attn.add_zero_attn"] = int(a.add_zero_attn)
    return meta


def _argparser(prog):
    doc = __doc__[__doc__.index("sattn-export writes"):].replace(
        "sattn-export ", prog + " ")
    p = argparse.ArgumentParser(
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Save a trained PyTorch module as safetensors for the "
        "sattn GStreamer element (properties weights=, weights-prefix=): a "
        "whole model per window as a whole model, an "
        "nn.TransformerEncoderLayer as a whole layer, an attention module "
        "(layouts: " + ", ".join(LAYOUT_NAMES) + ") as itself; a part of "
        "one with --module NAME, said on stderr.",
        epilog=doc)
    p.add_argument("input", metavar="INPUT",
                   help="file from torch.save: a module or a state dict")
    p.add_argument("output", metavar="OUTPUT", nargs="?",
                   help="safetensors file to write")
    p.add_argument("--module", metavar="NAME",
                   help="write only this part of INPUT (dotted name, e.g. "
                   "self_attn of a layer, encoder.layers.0 of a model); "
                   "the tool says on stderr what it left out.  Default: "
                   "INPUT itself, whole")
    p.add_argument("--factory", metavar="MODULE:CALLABLE",
                   help="for a state dict INPUT: build the module with this "
                   "callable (also FILE.py:CALLABLE), then load INPUT into it")
    p.add_argument("--factory-kwargs", metavar="JSON", default="{}",
                   help="keyword arguments for --factory, as a JSON object")
    p.add_argument("--heads", type=int,
                   help="the head count, for a module that does not record "
                   "it (a state dict without --factory; written as "
                   "metadata and checked against the element)")
    p.add_argument("--head-dim", type=int,
                   help="per-head query/key size of a fused qkv whose "
                   "values are not a third of its rows")
    p.add_argument("--add-zero-attn", action="store_true",
                   help="with --heads: record add_zero_attn=True")
    p.add_argument("--activation", choices=("relu", "gelu"),
                   help="an encoder layer's activation, for a state dict "
                   "INPUT (a module records it)")
    p.add_argument("--norm-first", type=int, choices=(0, 1),
                   help="an encoder layer's norm_first, for a state dict "
                   "INPUT")
    p.add_argument("--norm-eps", type=float,
                   help="an encoder layer's LayerNorm eps, for a state "
                   "dict INPUT")
    p.add_argument("--positions", metavar="KIND",
                   help="record the positional encoding the module was "
                   "trained with (e.g. rope, rope-interleaved, alibi)")
    p.add_argument("--dtype", choices=DTYPES, default="F32",
                   help="tensor dtype in the file (default F32; the element "
                   "computes in float32 anyway)")
    p.add_argument("--keep-prefix", action="store_true",
                   help="keep the part's full tensor names (then set the "
                   "element's weights-prefix to NAME.)")
    p.add_argument("--no-package", action="store_true",
                   help="write the format directly even if the safetensors "
                   "package is installed")
    p.add_argument("--weights-only", action="store_true",
                   help="refuse INPUT files that torch.load cannot read "
                   "with weights_only=True (whole-module pickles run code)")
    p.add_argument("--pooling", choices=("mean", "last", "max", "cls",
                                         "attention"), default=None,
                   help="a whole model's pooling when its forward does not "
                   "show it (it is read from the forward and verified)")
    g = p.add_argument_group(
        "input contract of a whole model (written as metadata; the "
        "element takes its defaults from it and refuses contradictions)")
    g.add_argument("--sample-rate", type=int, metavar="HZ",
                   help="the stream's sample rate the model was trained on")
    g.add_argument("--channels", type=int, metavar="N",
                   help="interleaved channels (also: the channels a power "
                   "normalisation sums over)")
    g.add_argument("--frame-size", type=int, metavar="N",
                   help="samples per channel per frame (channels x "
                   "frame-size = values per frame)")
    g.add_argument("--window", type=int, metavar="N",
                   help="frames per window")
    g.add_argument("--hop", type=int, metavar="N",
                   help="default frames between windows")
    g.add_argument("--min-probability", type=float, metavar="P",
                   help="below it a decision is `unknown` (0 ... 1)")
    g.add_argument("--contract-data", metavar="FILE.npy",
                   help="training windows (N, n, values per frame; NaN "
                   "frames masked) to compute the contract statistics "
                   "from: the input RMS range and the pooled rows' mean, "
                   "std and largest z")
    p.add_argument("--labels", metavar="FILE",
                   help="a whole model's class labels, one per line")
    p.add_argument("--list", action="store_true",
                   help="list the whole models, encoder layers and "
                   "attention modules in INPUT and exit")
    return p


def main(argv=None, prog="sattn-export"):
    global PROG
    PROG = prog
    p = _argparser(prog)
    a = p.parse_args(argv)
    torch = _torch()
    torch.set_grad_enabled(False)

    def die(msg):
        sys.exit("%s: %s" % (PROG, msg))

    if a.input.lower().endswith(".onnx"):
        _whole()   # the source tree's package on the path
        if a.list:
            from sattn import onnx_in
            try:
                rec, _ = onnx_in.recognise(a.input, window=a.window,
                                           channels=a.channels)
            except ValueError as e:
                print("''\tnot exportable: %s" % e)
                return 1
            print("''\twhole model: %s" % rec.description)
            return 0
        if a.output is None:
            p.error("OUTPUT is required")

        def die_onnx(msg):
            sys.exit("%s: %s" % (PROG, msg))
        return _export_whole(a, a.input, "", "", lambda desc: None,
                             die_onnx, onnx=True)
    obj = _load_input(a.input, a.weights_only)
    if a.factory:
        if not isinstance(obj, dict):
            die("--factory needs a state dict INPUT")
        model = _load_factory(a.factory, json.loads(a.factory_kwargs))
        model.load_state_dict(obj)
        obj = model

    is_model = isinstance(obj, torch.nn.Module)
    if not is_model and not isinstance(obj, dict):
        die("%s holds a %s, neither a module nor a state dict"
            % (a.input, type(obj).__name__))
    if a.list:
        return _list(obj, is_model)
    if a.output is None:
        p.error("OUTPUT is required")
    sd = obj.state_dict() if is_model else obj

    # What the user points at: INPUT itself, or --module NAME inside it.
    def kind_of(name):
        pf = name + "." if name else ""
        if is_model:
            try:
                sub = obj.get_submodule(name) if name else obj
            except AttributeError as e:
                die(str(e))
            return sub, _module_kind(sub), type(sub).__name__
        if name and not any(k.startswith(pf) for k in sd):
            die("%s has no tensor under %s" % (a.input, pf))
        return None, _sd_kind(sd, pf), "state dict"

    root_kind = kind_of("")[1]
    name = a.module or ""
    sub, kind, what = kind_of(name)
    chosen = False           # a part the tool chose in a container
    if kind is None:
        pf = name + "." if name else ""
        parts = _parts(sub if is_model else sd, is_model, pf)
        psd = sub.state_dict() if is_model else sd
        ppf = "" if is_model else pf
        if name:
            die("%s (a %s) is not an attention module of a known layout "
                "(%s), an encoder layer or a whole model; parts found: %s"
                % (name, what, ", ".join(LAYOUT_NAMES),
                   _describe_parts(parts, psd, ppf) or "none"))
        if not parts:
            die("no attention module, encoder layer or whole model in %s "
                "(layouts recognised: %s)"
                % (a.input, ", ".join(LAYOUT_NAMES)))
        if len(parts) > 1:
            die("%s (a %s) is not itself a module sattn runs; it holds %d "
                "parts that are: %s.  Choose one with --module (--list "
                "describes them)" % (a.input, what, len(parts),
                                     _describe_parts(parts, psd, ppf)))
        name = (name + "." if name else "") + parts[0][0]
        sub, kind, what = kind_of(name)
        chosen = True
    pf = name + "." if name else ""
    out_prefix = pf if a.keep_prefix else ""

    def said_part(desc):
        """A part of what INPUT is: say which, and what was left out."""
        if not name:
            return
        if chosen:
            why = ("%s is not itself a module sattn runs; this is the one "
                   "part of it that is" % a.input)
        else:
            why = ("asked for with --module; %s is %s" % (
                a.input, ("an " if root_kind in ("layer", "mha", "attention")
                          else "a ") + KIND_WORDS[root_kind] + ", written whole "
                "without --module" if root_kind else
                "a %s (--list shows its parts)"
                % ("state dict" if not is_model else type(obj).__name__)))
        print("%s: wrote the part %s (%s) of %s, not all of it: left out %s "
              "(%s)" % (PROG, name, desc, a.input, _left_out(sd, pf), why),
              file=sys.stderr)

    # A whole model per window (embed, encoder, [head]): written whole,
    # under its own names, with what its state dict does not record.
    if kind == "whole":
        if not is_model:
            die("%s is the state dict of a whole model%s: it does not "
                "record the heads, norm placement, activation, positions "
                "or pooling the model was built with; build it first with "
                "--factory (e.g. --factory sattn.nn:SignalTransformer "
                "--factory-kwargs '{\"d_frame\": ..., ...}')"
                % (a.input, " (%s)" % name if name else ""))
        return _export_whole(a, sub, name, out_prefix, said_part, die)

    # An encoder layer, exported whole.
    if kind == "layer":
        try:
            if is_model:
                check_self_attention(sub.self_attn,
                                     (pf or "") + "self_attn")
                meta = {"format": "pt"}
                meta.update(encoder_layer_metadata(sub, out_prefix))
                tensors = sub.state_dict()
            else:
                tensors = collections.OrderedDict(
                    (k[len(pf):], v) for k, v in sd.items()
                    if k.startswith(pf))
                meta = {"format": "pt"}
                meta.update(_layer_metadata_from_args(a, tensors,
                                                      out_prefix))
        except ValueError as e:
            die(str(e))
        if a.positions:
            meta[out_prefix + "positions"] = a.positions
        save_safetensors(a.output, collections.OrderedDict(
            (out_prefix + k, v) for k, v in tensors.items()
            if v is not None), meta, a.dtype,
            use_package=not a.no_package)
        said_part("nn.TransformerEncoderLayer")
        print("wrote %s: the whole nn.TransformerEncoderLayer %s(self_attn, "
              "linear1, linear2, norm1, norm2), %s; %s; %s"
              % (a.output, name + " " if name else "", a.dtype,
                 check_with_sattn(a.output, out_prefix),
                 _use_line(a.output, meta, out_prefix)))
        return 0

    # An attention module.
    found = find_layouts(sd)
    layouts = found.get(pf, [])
    if len(layouts) > 1:
        die("%s holds %s tensors under one prefix: ambiguous"
            % (name or "''", " and ".join(layouts)))
    extra = {}
    if a.positions:
        extra[out_prefix + "positions"] = a.positions
    if kind == "mha":
        try:
            check_self_attention(sub)
        except ValueError as e:
            die(str(e))
        if a.heads is not None and a.heads != sub.num_heads:
            die("--heads %d but the module has num_heads=%d"
                % (a.heads, sub.num_heads))
        export_mha(sub, a.output, a.dtype, out_prefix, extra,
                   use_package=not a.no_package)
        said_part("nn.MultiheadAttention")
        print("wrote %s: nn.MultiheadAttention embed_dim=%d num_heads=%d%s, "
              "%s; %s" % (a.output, sub.embed_dim, sub.num_heads,
                          " (prefix %s)" % out_prefix if out_prefix else "",
                          a.dtype, _use_line(a.output, None, out_prefix)))
        return 0

    layout = layouts[0]
    heads = module_heads(sub) if sub is not None else None
    if a.heads is not None:
        if heads is not None and heads != a.heads:
            die("--heads %d but the module records %d heads"
                % (a.heads, heads))
        heads = a.heads
    if heads is None:
        if layout == "seeds":
            heads = 1      # the seeds' QKV module is single-head
        else:
            die("%s (%s layout) does not record its head count: give "
                "--heads N" % (name or "''", layout))
    tensors = layout_tensors(sd, pf, layout)
    if layout.startswith("mha"):
        extra[out_prefix + "add_zero_attn"] = int(a.add_zero_attn)
    try:
        export_attention(tensors, layout, heads, a.output, a.dtype,
                         out_prefix, extra, use_package=not a.no_package,
                         head_dim=a.head_dim)
    except ValueError as e:
        die(str(e))
    said_part("attention module, %s layout" % layout)
    print("wrote %s: %s, %s%s; %s"
          % (a.output, _describe(tensors, layout, heads), a.dtype,
             " (prefix %s)" % out_prefix if out_prefix else "",
             _use_line(a.output, None, out_prefix)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
