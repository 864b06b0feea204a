#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The export script's --help examples, run as written.

Every example line of `export-torch-mha.py --help` is run in a scratch
directory that holds what the examples name: model.pt (a model whose
class lives in that directory, with one 64-wide, 4-head attention module
at encoder.layers.0.self_attn), mymodels.py with build(), sd.pt, and
recogniser.pt (a whole model: embed, encoder, mean pooling, head; its
forward says so) with labels.txt.
Script lines run the script; gst-launch-1.0 lines run as printed (the
16 kHz one and the 44.1 kHz one resampled).  Each must succeed.

Usage: test-export-help.py EXPORTER
SATTN_GST_PRELOAD: libraries preloaded into gst-launch-1.0 only.
Exit 77 (skip) without PyTorch or gst-launch-1.0.
"""

import os
import shlex
import shutil
import subprocess
import sys
import tempfile

# run_bounded: a hang fails as "HANG:" with every thread's backtrace.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from common import run_bounded  # noqa: E402

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: python3-torch not importable")
    sys.exit(77)
if shutil.which("gst-launch-1.0") is None:
    print("SKIP: gst-launch-1.0 not found")
    sys.exit(77)

MODELS = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128,
                                                 dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(
            layer, num_layers=1, enable_nested_tensor=False)


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(64, 4)


def build():
    return Small()


class Recogniser(torch.nn.Module):
    """A whole model per window: embed, encoder, head."""
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32,
                                                 dropout=0.0,
                                                 batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(
            layer, num_layers=2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        # a whole model is recognised by what its forward computes
        return self.head(self.encoder(self.embed(x)).mean(dim=1))
'''


def main():
    exporter = sys.argv[1]
    r = subprocess.run([sys.executable, exporter, "--help"],
                       stdout=subprocess.PIPE, universal_newlines=True,
                       check=True)
    text = r.stdout
    examples = [ln.strip() for ln in
                text[text.index("Examples"):].splitlines()
                if ln.strip().startswith(("export-torch-mha.py ",
                                          "gst-launch-1.0 "))]
    assert len(examples) >= 5, examples
    assert any("rate=44100" in e for e in examples), examples
    env = dict(os.environ)
    gst_env = dict(env)
    if env.get("SATTN_GST_PRELOAD"):
        gst_env["LD_PRELOAD"] = env["SATTN_GST_PRELOAD"]
    with tempfile.TemporaryDirectory(prefix="sattn-help-") as d:
        with open(os.path.join(d, "mymodels.py"), "w") as f:
            f.write(MODELS)
        subprocess.run([sys.executable, "-c",
                        "import torch, mymodels; torch.save(mymodels.Net()"
                        ".eval(), 'model.pt'); torch.save(mymodels.build()"
                        ".state_dict(), 'sd.pt'); torch.save("
                        "mymodels.Recogniser().eval(), 'recogniser.pt')"],
                       cwd=d, check=True)
        with open(os.path.join(d, "labels.txt"), "w") as f:
            f.write("a\nb\nc\n")
        failed = 0
        for ex in examples:
            argv = shlex.split(ex)
            if argv[0] == "export-torch-mha.py":
                cmd, e = [sys.executable, exporter] + argv[1:], env
            else:
                cmd, e = argv, gst_env
            r = run_bounded(cmd, cwd=d, env=e, stderr=subprocess.STDOUT)
            ok = r.returncode == 0
            print("%s $ %s" % ("ok  " if ok else "FAIL", ex))
            if not ok:
                print(r.stdout)
                failed += 1
    print("%d of %d examples ran" % (len(examples) - failed, len(examples)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
