#!/usr/bin/env python3
"""Export a torch.nn.MultiheadAttention as safetensors for the sattn element.

The output holds the module's state dict (in_proj_weight or
q/k/v_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias, bias_k,
bias_v, whichever the module has) and, in "__metadata__", the constructor
arguments a state dict does not record (num_heads, add_zero_attn,
embed_dim, ...), which libsattn checks against the element's properties.

Inputs (INPUT is a file written by torch.save):
  * a whole model (torch.save(model, "model.pt")): the attention module is
    MODEL itself, --module NAME (e.g. "encoder.layers.0.self_attn"), or the
    only MultiheadAttention inside MODEL;
  * a state dict (torch.save(model.state_dict(), "sd.pt")): either give
    --factory to build the model class first (then as above), or let the
    tool pick the module's tensors by name (--module NAME or the only
    module in the dict; num_heads then comes from --heads if given).

Examples:
  export-torch-mha.py model.pt attn.safetensors
  export-torch-mha.py --module encoder.layers.0.self_attn model.pt l0.safetensors
  export-torch-mha.py --factory mymodels:build --module attn sd.pt a.safetensors
  export-torch-mha.py --list model.pt
then:
  gst-launch-1.0 ... ! sattn weights=attn.safetensors heads=4 ! ...

Uses the safetensors package when installed, otherwise writes the format
itself (8-byte little-endian header length, JSON header, raw tensors).
It can also be imported (importlib) for export_mha() and save_safetensors().
"""

import argparse
import collections
import importlib
import importlib.util
import json
import os
import struct
import sys

MHA_SUFFIXES = ("in_proj_weight", "q_proj_weight", "k_proj_weight",
                "v_proj_weight", "in_proj_bias", "out_proj.weight",
                "out_proj.bias", "bias_k", "bias_v")

DTYPES = ("F32", "F16", "BF16", "F64")


def _torch():
    try:
        import torch
    except ImportError:
        sys.exit("export-torch-mha: PyTorch is needed (Debian: apt install "
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
    """The safetensors format, written directly: tensors in the given order,
    contiguous, header padded with spaces to a multiple of 8 bytes."""
    torch = _torch()
    tname = {torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.float64: "F64"}
    header = collections.OrderedDict()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        data = _raw_bytes(t, name)
        header[name] = {"dtype": tname[t.dtype],
                        "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


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
        sys.exit("export-torch-mha: --factory wants MODULE:CALLABLE or "
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


def _load_input(path):
    torch = _torch()
    try:
        return torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - report any unpickling problem
        sys.exit("export-torch-mha: cannot load %s: %s" % (path, e))


def _pick(names, wanted, what):
    """Resolve --module against a list of module names / prefixes."""
    if wanted is not None:
        return wanted
    if len(names) == 1:
        return names[0]
    if not names:
        sys.exit("export-torch-mha: no MultiheadAttention in " + what)
    sys.exit("export-torch-mha: %s holds %d MultiheadAttention modules; "
             "choose one with --module: %s"
             % (what, len(names), ", ".join(n or "''" for n in names)))


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="export-torch-mha.py",
        description="Save a torch.nn.MultiheadAttention (or a named "
        "submodule of a model) as safetensors for the sattn GStreamer "
        "element (properties weights=, weights-prefix=, heads=).",
        epilog="Example: export-torch-mha.py --module encoder.layers.0."
        "self_attn model.pt attn.safetensors && gst-launch-1.0 "
        "audiotestsrc ! audio/x-raw,format=F32LE,channels=1 ! sattn "
        "frame-size=64 heads=4 weights=attn.safetensors ! fakesink")
    p.add_argument("input", metavar="INPUT",
                   help="file from torch.save: a model or a state dict")
    p.add_argument("output", metavar="OUTPUT", nargs="?",
                   help="safetensors file to write")
    p.add_argument("--module", metavar="NAME",
                   help="dotted name of the attention module inside the "
                   "model, e.g. encoder.layers.0.self_attn (default: the "
                   "only one)")
    p.add_argument("--factory", metavar="MODULE:CALLABLE",
                   help="for a state dict INPUT: build the model with this "
                   "callable (also FILE.py:CALLABLE), then load INPUT into it")
    p.add_argument("--factory-kwargs", metavar="JSON", default="{}",
                   help="keyword arguments for --factory, as a JSON object")
    p.add_argument("--heads", type=int,
                   help="num_heads, for a state dict without --factory "
                   "(recorded as metadata; checked against the element)")
    p.add_argument("--add-zero-attn", action="store_true",
                   help="with --heads: record add_zero_attn=True")
    p.add_argument("--dtype", choices=DTYPES, default="F32",
                   help="tensor dtype in the file (default F32; the element "
                   "computes in float32 anyway)")
    p.add_argument("--keep-prefix", action="store_true",
                   help="keep the module's full tensor names (then set the "
                   "element's weights-prefix to NAME.)")
    p.add_argument("--no-package", action="store_true",
                   help="write the format directly even if the safetensors "
                   "package is installed")
    p.add_argument("--list", action="store_true",
                   help="list the attention modules in INPUT and exit")
    a = p.parse_args(argv)
    torch = _torch()
    torch.set_grad_enabled(False)

    obj = _load_input(a.input)
    if a.factory:
        if not isinstance(obj, dict):
            sys.exit("export-torch-mha: --factory needs a state dict INPUT")
        model = _load_factory(a.factory, json.loads(a.factory_kwargs))
        model.load_state_dict(obj)
        obj = model

    if isinstance(obj, torch.nn.Module):
        mods = find_mha_modules(obj)
        if a.list:
            for n, m in mods:
                print("%s\tembed_dim=%d num_heads=%d kdim=%d vdim=%d "
                      "bias=%s add_bias_kv=%s add_zero_attn=%s"
                      % (n or "''", m.embed_dim, m.num_heads, m.kdim, m.vdim,
                         m.in_proj_bias is not None, m.bias_k is not None,
                         m.add_zero_attn))
            return 0
        name = _pick([n for n, _ in mods], a.module, a.input)
        try:
            mha = obj.get_submodule(name) if name else obj
        except AttributeError as e:
            sys.exit("export-torch-mha: %s" % e)
        if not isinstance(mha, torch.nn.MultiheadAttention):
            sys.exit("export-torch-mha: %s is a %s, not a MultiheadAttention"
                     % (name, type(mha).__name__))
        if a.output is None:
            p.error("OUTPUT is required")
        prefix = name + "." if (a.keep_prefix and name) else ""
        try:
            export_mha(mha, a.output, a.dtype, prefix,
                       use_package=not a.no_package)
        except ValueError as e:
            sys.exit("export-torch-mha: " + str(e))
        print("wrote %s: embed_dim=%d num_heads=%d%s, %s; use: sattn "
              "weights=%s heads=%d%s%s"
              % (a.output, mha.embed_dim, mha.num_heads,
                 " (prefix %s)" % prefix if prefix else "", a.dtype, a.output,
                 mha.num_heads,
                 " weights-prefix=%s" % prefix if prefix else "",
                 " add-zero-attn=true" if mha.add_zero_attn else ""))
        return 0

    if not isinstance(obj, dict):
        sys.exit("export-torch-mha: %s holds a %s, neither a module nor a "
                 "state dict" % (a.input, type(obj).__name__))
    prefixes = find_mha_prefixes(obj)
    if a.list:
        for pf in prefixes:
            w = obj.get(pf + "in_proj_weight", obj.get(pf + "q_proj_weight"))
            e = w.shape[1] if w is not None and w.dim() == 2 else "?"
            print("%s\tembed_dim=%s" % (pf[:-1] or "''", e))
        return 0
    if a.output is None:
        p.error("OUTPUT is required")
    pf = _pick(prefixes, None if a.module is None else
               (a.module + "." if a.module else ""), a.input)
    tensors = collections.OrderedDict(
        (k, v) for k, v in obj.items()
        if k.startswith(pf) and k[len(pf):] in MHA_SUFFIXES)
    if not tensors:
        sys.exit("export-torch-mha: no attention tensors under %r" % pf)
    out_prefix = pf if a.keep_prefix else ""
    tensors = collections.OrderedDict(
        (out_prefix + k[len(pf):], v) for k, v in tensors.items())
    meta = {"format": "pt"}
    if a.heads is not None:
        meta[out_prefix + "num_heads"] = a.heads
        meta[out_prefix + "add_zero_attn"] = int(a.add_zero_attn)
    save_safetensors(a.output, tensors, meta, a.dtype,
                     use_package=not a.no_package)
    print("wrote %s: %d tensors%s" % (a.output, len(tensors),
                                      " (prefix %s)" % out_prefix
                                      if out_prefix else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
