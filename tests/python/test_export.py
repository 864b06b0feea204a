# SPDX-License-Identifier: LGPL-2.1-or-later
"""The export tool (sattn.export, the command sattn-export) writes what it
is pointed at, whole, and says which part it wrote when it writes a part.

Run as `python3 -m sattn.export` (the module the installed command runs)
for the first file, then through its main() in this process (PyTorch is
imported once), on files written by torch.save:

  1. a pickled nn.TransformerEncoderLayer (pre-norm, gelu, eps 1e-6):
     written whole without --module; the file's metadata says
     layer=transformer-encoder-layer with the layer's options, libsattn
     loads it (sattn.Model.from_safetensors) and its output on a window
     (sattn.attend, every frame a query) matches the same layer run by
     PyTorch in float64: max-abs <= 1e-5 * (1 + max|ref|) (PyTorch
     float32's own error is printed beside it);
  2. the same layer's state dict: refused without --heads, --activation,
     --norm-first, --norm-eps (the error names them), written whole with
     them, same bound; a post-norm relu layer's state dict too;
  3. --module self_attn of the pickled layer: the file holds the attention
     alone and stderr says "wrote the part self_attn" and names what it
     left out (linear1.weight, ...); the whole-layer exports say nothing
     on stderr;
  4. a container holding one encoder layer (and a Linear the element
     cannot run): the layer is written whole and stderr names the part
     and the left-out Linear;
  5. a pickled whole model (sattn.nn.SignalTransformer): written as a whole
     model (libsattn loads it as kind "whole" with its classes), nothing on
     stderr, stdout saying it was verified against the module with the
     measured error and PyTorch float32's (no more "libsattn loads it").

Exit 77 (skip) when PyTorch is not importable.
"""

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: python3-torch not importable by %s" % sys.executable)
    sys.exit(77)
import numpy as np

import sattn
import sattn.export

BOUND = 1e-5


def metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header.get("__metadata__", {}), sorted(
        k for k in header if k != "__metadata__")


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def export(d, *args, ok=True, process=False):
    """sattn-export ARGS in directory d: as a process (python3 -m
    sattn.export, what the installed command runs) or, to save importing
    PyTorch again, its main() in this process, stdout and stderr
    captured (an error's sys.exit message is its stderr)."""
    if process:
        r = subprocess.run([sys.executable, "-m", "sattn.export"]
                           + list(args), cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=120)
    else:
        out, err, rc = io.StringIO(), io.StringIO(), 0
        cwd = os.getcwd()
        os.chdir(d)
        try:
            with contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(err):
                rc = sattn.export.main(list(args))
        except SystemExit as e:
            if isinstance(e.code, str):
                err.write(e.code + "\n")
                rc = 1
            else:
                rc = e.code or 0
        finally:
            os.chdir(cwd)
        r = Result(rc, out.getvalue(), err.getvalue())
    print("$ sattn-export " + " ".join(args))
    print(r.stdout + r.stderr, end="")
    if ok and r.returncode != 0:
        sys.exit("FAIL: exit status %d" % r.returncode)
    if not ok and r.returncode == 0:
        sys.exit("FAIL: expected an error")
    return r


def random_layer(norm_first, activation, eps, seed):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(
        16, 4, dim_feedforward=32, dropout=0.0, activation=activation,
        norm_first=norm_first, layer_norm_eps=eps, batch_first=True)
    for p in layer.parameters():
        p.copy_(torch.randn(p.shape) * 0.3)
    return layer.eval()


def check_layer(path, layer, what):
    """The file loads as this encoder layer and computes what it does."""
    md, _ = metadata(path)
    want = {"layer": "transformer-encoder-layer",
            "activation": "gelu" if layer.activation_relu_or_gelu == 2
            else "relu",
            "norm_first": str(int(layer.norm_first)),
            "self_attn.num_heads": "4"}
    for k, v in want.items():
        assert md.get(k) == v, (what, k, md)
    assert float(md["norm_eps"]) == layer.norm1.eps, (what, md)
    m = sattn.Model.from_safetensors(path)
    assert m.kind == "layer" and m.layers == 1, (what, m.kind, m.layers)
    x = np.random.default_rng(5).standard_normal((11, 16)).astype(np.float32)
    got = sattn.attend(m, x).astype(np.float64)
    ref64 = torch.nn.TransformerEncoderLayer(
        16, 4, dim_feedforward=32, dropout=0.0, activation=layer.activation,
        layer_norm_eps=layer.norm1.eps, batch_first=True,
        norm_first=layer.norm_first).double().eval()
    ref64.load_state_dict(layer.state_dict())
    ref = ref64(torch.from_numpy(x.astype(np.float64))[None])[0].numpy()
    f32 = layer(torch.from_numpy(x)[None])[0].numpy().astype(np.float64)
    err = np.abs(got - ref).max()
    err32 = np.abs(f32 - ref).max()
    bound = BOUND * (1 + np.abs(ref).max())
    print("%s: max-abs %.3g against PyTorch float64 (bound %.3g; PyTorch "
          "float32 %.3g)" % (what, err, bound, err32))
    assert err <= bound, (what, err, bound)


def main():
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory(prefix="sattn-export-whole-") as d:
        # 1. a pickled encoder layer, written whole
        layer = random_layer(True, "gelu", 1e-6, 1)
        torch.save(layer, os.path.join(d, "layer.pt"))
        r = export(d, "layer.pt", "layer.safetensors", process=True)
        assert r.stderr == "", r.stderr
        assert "whole nn.TransformerEncoderLayer" in r.stdout, r.stdout
        _, names = metadata(os.path.join(d, "layer.safetensors"))
        assert names == sorted(k for k, v in layer.state_dict().items()
                               if v is not None), names
        check_layer(os.path.join(d, "layer.safetensors"), layer,
                    "pickled layer (pre-norm, gelu)")

        # 2. its state dict: the constructor's arguments are needed
        torch.save(layer.state_dict(), os.path.join(d, "layer-sd.pt"))
        r = export(d, "layer-sd.pt", "x.safetensors", ok=False)
        for flag in ("--heads", "--activation", "--norm-first",
                     "--norm-eps"):
            assert flag in r.stderr, (flag, r.stderr)
        assert not os.path.exists(os.path.join(d, "x.safetensors"))
        r = export(d, "--heads", "4", "--activation", "gelu", "--norm-first",
                   "1", "--norm-eps", "1e-6", "layer-sd.pt",
                   "layer-sd.safetensors")
        assert r.stderr == "", r.stderr
        check_layer(os.path.join(d, "layer-sd.safetensors"), layer,
                    "state dict layer (pre-norm, gelu)")
        post = random_layer(False, "relu", 1e-5, 2)
        torch.save(post.state_dict(), os.path.join(d, "post-sd.pt"))
        export(d, "--heads", "4", "--activation", "relu", "--norm-first",
               "0", "--norm-eps", "1e-5", "post-sd.pt", "post.safetensors")
        check_layer(os.path.join(d, "post.safetensors"), post,
                    "state dict layer (post-norm, relu)")

        # 3. a part, asked for: written alone, and said
        r = export(d, "--module", "self_attn", "layer.pt", "sa.safetensors")
        assert "wrote the part self_attn" in r.stderr, r.stderr
        assert "linear1.weight" in r.stderr and "left out 8" in r.stderr, \
            r.stderr
        md, names = metadata(os.path.join(d, "sa.safetensors"))
        assert "layer" not in md and md.get("layout") == "mha", md
        assert all(not n.startswith(("linear", "norm")) for n in names), \
            names

        # 4. a container with one encoder layer: the layer, said
        net = torch.nn.Sequential(random_layer(False, "relu", 1e-5, 3),
                                  torch.nn.Linear(16, 2)).eval()
        torch.save(net, os.path.join(d, "seq.pt"))
        r = export(d, "seq.pt", "seq.safetensors")
        assert "wrote the part 0 " in r.stderr and "1.weight" in r.stderr, \
            r.stderr
        check_layer(os.path.join(d, "seq.safetensors"), net[0],
                    "the one layer of a container")

        # 5. a pickled whole model: written as a whole model
        from sattn.nn import SignalTransformer
        torch.manual_seed(4)
        whole = SignalTransformer(d_frame=8, d_model=16, heads=2, layers=2,
                                  d_ff=32, classes=3).eval()
        torch.save(whole, os.path.join(d, "whole.pt"))
        r = export(d, "whole.pt", "whole.safetensors")
        assert r.stderr == "", r.stderr
        assert "verified: libsattn vs the module max-abs" in r.stdout, \
            r.stdout
        assert "PyTorch float32's own" in r.stdout, r.stdout
        assert "libsattn loads it" not in r.stdout, r.stdout
        m = sattn.Model.from_safetensors(os.path.join(d, "whole.safetensors"))
        assert m.kind == "whole" and m.layers == 2 and m.classes == 3, \
            (m.kind, m.layers, m.classes)
        _, names = metadata(os.path.join(d, "whole.safetensors"))
        assert names == sorted(k for k, v in whole.state_dict().items()
                               if v is not None), names
    print("export tool: whole layers, parts said, whole models: all checks "
          "passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
