#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The small whole model of tests/data/whole_f8_c4.safetensors (seeded):
sattn.nn.SignalTransformer on frames of 8 values (the demo's 8 sensors,
frame-size 1), d_model 16, 2 heads, 2 layers, learned positions for up to
64 frames, a final norm, mean pooling and a Linear head to 4 classes with
labels.  Untrained: a fixture for launch lines and tests, not a model of
anything.

    /usr/bin/python3 tests/data/make-whole-fixture.py tests/data/whole_f8_c4.safetensors
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
from sattn.nn import SignalTransformer, save_safetensors  # noqa: E402

torch.manual_seed(20261202)
net = SignalTransformer(d_frame=8, d_model=16, heads=2, layers=2, d_ff=32,
                        classes=4, positions="learned", max_window=64,
                        final_norm=True).eval()
save_safetensors(net, sys.argv[1], labels=["calm", "tonal", "transient",
                                           "dropout"])
