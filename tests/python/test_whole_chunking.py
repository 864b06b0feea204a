# SPDX-License-Identifier: LGPL-2.1-or-later
"""Whole models per window: the output bytes do not depend on how the
frames are cut into pushes, nor on the thread count.

The windows due in one push run together as one block (up to 64 windows
or 1024 rows), so one frame per push computes every window alone, a push
of one hop computes one or two windows together, and one push of every
frame computes blocks of many.  Each output byte (rows, row infos, the
statistics, the last window's weights) must be the same in every case:
every value is summed in an order of its own, whatever block or thread
computes it.

Models: random sattn.nn.SignalTransformer modules (2 layers) with
positions none, learned, RoPE and ALiBi, post- and pre-norm, ReLU and
GELU, a final norm and an MLP head on some, and docs/models.md's front
ends and poolings (conv stems over samples and over frames,
standardisation, RMS and power normalisation, a CLS token; max, attention,
cls and mean pooling), on the per-window geometry
of the bench (frame 16 values, d_model 32, 4 heads, d_ff 64, 8 classes,
window 16, hop 8) and on an uneven one (window 12, hop 5, start=wait).
Frames: a sequence with a GAP run (valid = 0) and frames with NaN samples
(invalid = "mask"; and "zero" once).  Every output mode is run: classes,
mean, last, window.

Pushes: one frame at a time, one hop at a time, random sizes (seeded),
all frames at once, and pushes that complete a full block of windows and
carry the frames of most of a hop more; each stream then drains.  Threads: 1, 2 and 3 with
random pushes and all at once; and 2 and 3 without statistics or weights
kept, one frame and one hop per push (a window's rows shared between the
threads), whose rows and row infos must be the same too.

  test_whole_chunking.py [--dump FILE]

--dump writes the rows of every case (one frame per push, threads 1) to
FILE (.npz) instead of testing: two builds of libsattn (SATTN_LIBRARY)
can then be compared byte for byte.

Registered only when libsattn has the weights reader; skipped (77)
without PyTorch."""

import os
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped")
    sys.exit(77)

import sattn
from sattn.nn import SignalTransformer, save_safetensors
import test_whole_models as whole_models

N_FRAMES = 700
GAP = range(420, 450)        # valid = 0: windows with no usable frame
NAN_FRAMES = (37, 38, 201)   # a NaN sample each


def randomise(net, seed):
    """test_whole_models' weights (outputs O(1), probabilities neither
    uniform nor one-hot)."""
    gen = torch.Generator().manual_seed(seed)
    net = whole_models.randomise(net, gen)
    with torch.no_grad():
        # the standardisation's buffers, not its identity defaults
        for name, b in net.named_buffers():
            if name == "standardize.mean":
                b.copy_(0.5 * torch.randn(b.shape, generator=gen))
            elif name == "standardize.std":
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
    return net


# name: (model arguments, stream geometry and policies)
BENCH = dict(d_frame=16, d_model=32, heads=4, layers=2, d_ff=64, classes=8)
UNEVEN = dict(d_frame=8, d_model=16, heads=2, layers=2, d_ff=32, classes=3)
CASES = {
    "none-post": (dict(BENCH), dict(window=16, hop=8)),
    "none-pre-gelu-mlp": (dict(BENCH, norm_first=True, activation="gelu",
                               final_norm=True, head_hidden=12,
                               head_activation="gelu"),
                          dict(window=16, hop=8)),
    "learned-post-last": (dict(BENCH, positions="learned", max_window=16,
                               pooling="last", final_norm=True),
                          dict(window=16, hop=8)),
    "rope-pre": (dict(BENCH, positions="rope", norm_first=True),
                 dict(window=16, hop=8)),
    "alibi-post-zero": (dict(BENCH, positions="alibi"),
                        dict(window=16, hop=8, invalid="zero")),
    "learned-uneven-wait": (dict(UNEVEN, positions="learned", max_window=12,
                                 norm_first=True, final_norm=True),
                            dict(window=12, hop=5, start="wait")),
    "rope-uneven-causal": (dict(UNEVEN, positions="rope", causal=True),
                           dict(window=12, hop=5)),
    # docs/models.md's front ends and poolings (per-window front ends)
    "conv-samples-power-max": (dict(BENCH, front_end="conv", in_channels=2,
                                    conv_kernel=12, conv_stride=8,
                                    conv_padding=2, conv_activation="gelu",
                                    input_norm="power", channels=2,
                                    pooling="max"),
                               dict(window=16, hop=8)),
    "conv-frames-std-attention": (dict(UNEVEN, front_end="conv",
                                       in_channels=8, conv_kernel=3,
                                       conv_stride=1, conv_padding=1,
                                       conv_activation="relu",
                                       standardize=True,
                                       pooling="attention"),
                                  dict(window=12, hop=5)),
    "cls-rope-rms": (dict(BENCH, cls_token=True, positions="rope",
                          input_norm="rms", pooling="cls"),
                     dict(window=16, hop=8)),
    "cls-learned-mean-zero": (dict(UNEVEN, cls_token=True,
                                   positions="learned", max_window=12,
                                   standardize=True, pooling="mean"),
                              dict(window=12, hop=5, invalid="zero")),
}
OUTPUTS = ("classes", "mean", "last", "window")


def frames(d_frame, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N_FRAMES, d_frame)).astype(np.float32)
    for f in NAN_FRAMES:
        x[f, 1] = np.nan
    valid = np.ones(N_FRAMES, np.uint8)
    valid[list(GAP)] = 0
    return x, valid


def chunkings(hop, seed):
    rng = np.random.default_rng(seed)
    sizes = []
    while sum(sizes) < N_FRAMES:
        sizes.append(int(rng.integers(1, 3 * hop + 40)))
    return {
        "one": [1] * N_FRAMES,
        "hop": [hop] * (N_FRAMES // hop + 1),
        "random": sizes,
        "all": [N_FRAMES],
        # a full block (64 windows) and a hop less one frame more
        "edge": [64 * hop + hop - 1] * (N_FRAMES // (64 * hop) + 1),
    }


def run(model, geom, output, x, valid, sizes, threads, observe=True):
    g = dict(geom)
    s = sattn.Stream(model, g.pop("window"), g.pop("hop"), output,
                     collect_stats=observe, keep_weights=observe,
                     threads=threads, **g)
    rows, infos = [], []
    at = 0
    for k in sizes:
        k = min(k, N_FRAMES - at)
        if k == 0:
            break
        r, i = s.push(x[at:at + k], valid[at:at + k])
        rows.append(r.copy())
        infos.append(i.copy())
        at += k
    weights = s.last_weights().copy() if observe else None
    r, i = s.drain()
    rows.append(r.copy())
    infos.append(i.copy())
    if not observe:
        return np.concatenate(rows), np.concatenate(infos)
    return (np.concatenate(rows), np.concatenate(infos), s.stats(),
            weights, s.last_weights().copy())


def same(a, b):
    ra, ia = a[:2]
    rb, ib = b[:2]
    problems = []
    if ra.shape != rb.shape or ra.tobytes() != rb.tobytes():
        problems.append("rows")
    # field by field: numpy copies structured arrays field by field, so
    # their padding bytes are not the library's
    if ia.shape != ib.shape or any(
            ia[f].tobytes() != ib[f].tobytes() for f in ia.dtype.names):
        problems.append("row infos")
    if len(b) == 2:
        return problems
    sa, wa, da = a[2:]
    sb, wb, db = b[2:]
    if sa != sb:
        problems.append("statistics")
    if wa.tobytes() != wb.tobytes() or da.tobytes() != db.tobytes():
        problems.append("last weights")
    return problems


def models(tmp):
    for seed, (name, (args, geom)) in enumerate(CASES.items()):
        net = randomise(SignalTransformer(**args), 100 + seed)
        path = os.path.join(tmp, name + ".safetensors")
        save_safetensors(net, path)
        yield name, sattn.Model.from_safetensors(path), args, geom, seed


def main(argv):
    dump = argv[2] if len(argv) > 2 and argv[1] == "--dump" else None
    failures, checked, dumped = 0, 0, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, args, geom, seed in models(tmp):
            x, valid = frames(args["d_frame"], 200 + seed)
            cuts = chunkings(geom["hop"], 300 + seed)
            for output in OUTPUTS:
                ref = run(model, geom, output, x, valid, cuts["one"], 1)
                if dump:
                    dumped["%s-%s" % (name, output)] = ref[0]
                    continue
                if ref[0].shape[0] < (N_FRAMES - geom["window"]) \
                        // geom["hop"]:
                    print("FAIL %s %s: %d rows" % (name, output,
                                                   ref[0].shape[0]))
                    failures += 1
                runs = [(c, 1) for c in ("hop", "random", "all", "edge")]
                runs += [(c, t) for c in ("random", "all") for t in (2, 3)]
                runs += [("one", 2)]
                # without statistics and weights, a block of fewer windows
                # than two per thread shares each window's rows between
                # the threads: one frame or one hop per push
                runs += [(c, t, False) for c in ("one", "hop") for t in (2, 3)]
                runs += [("random", 2, False)]
                for cut, threads, *obs in runs:
                    observe = obs[0] if obs else True
                    got = run(model, geom, output, x, valid, cuts[cut],
                              threads, observe)
                    bad = same(ref, got)
                    checked += 1
                    if bad:
                        failures += 1
                        print("FAIL %s output=%s pushes=%s threads=%d%s: %s "
                              "differ from one frame per push, threads=1"
                              % (name, output, cut, threads,
                                 "" if observe else " (no statistics or "
                                 "weights kept)", ", ".join(bad)))
    if dump:
        np.savez(dump, **dumped)
        print("%d outputs written to %s" % (len(dumped), dump))
        return 0
    print("%d runs compared byte for byte, %d differ" % (checked, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
