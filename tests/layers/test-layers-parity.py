#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Encoder layers, positions and stacks through the element against
PyTorch (nn.TransformerEncoderLayer / nn.MultiheadAttention; RoPE and
ALiBi applied in PyTorch as sattn documents them), over the whole sequence
with a banded causal mask, in float64 and float32.

For every combination a row: layers, kind, norm placement, activation,
positions, lookback / hop, max-abs of sattn against PyTorch float64
(absolute and relative to max |ref|), PyTorch float32's own max-abs
against float64 on the same inputs, their ratio, and sattn against
PyTorch float32.

The bound (issue 12): sattn's max-abs error against float64 is at or
below PyTorch float32's own on the same inputs (ratio <= 1), asserted on
every row, attention-only rows (kind "attention") included.  Those hold
it because V and the output projection are summed in double and each
entry rounded once (Q and K too with RoPE), as encoder layers sum all
four: the rest (scores, softmax, P.V) is float32 like PyTorch's
(measured: ratios 0.42-0.64 with AVX-512 and AVX2, 0.43-0.64 with the
portable loops; summing every projection in float gave 0.91-1.74 here
and lost 15-23 of 64 draws by max-abs, see docs/performance.md,
"Numerical error").  A single draw's max-abs
is one element's rounding, so a second table also runs each
attention-only configuration on 16 random models and inputs and asserts
that sattn's RMS error against float64 over all of them is at or below
PyTorch float32's (measured 0.42-0.61 with AVX-512, 0.47-0.63 with AVX2,
0.47-0.66 with the portable loops); it also prints in how many draws
sattn's max-abs and RMS error are at or below PyTorch's (not asserted;
measured 15-16 and 16 of 16).  A row also fails when a frame is
missing.  Also: heads and the layer options come from the file's
metadata, and a property set to another value fails naming both values.

usage: test-layers-parity.py [--draws N] EXAMPLES_DIR   (N: draws of the
second table, 16 by default)
Exit 77 (skip) without PyTorch or gst-launch-1.0.
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("PyTorch / numpy not available: skipped")
    sys.exit(77)


def load_example(examples):
    spec = importlib.util.spec_from_file_location(
        "encoder_stack", os.path.join(examples, "encoder-stack.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    args = sys.argv[1:]
    draws = 16
    if "--draws" in args:
        i = args.index("--draws")
        draws = int(args[i + 1])
        del args[i:i + 2]
    ex = load_example(args[0] if args else
                      os.path.join(os.environ["SATTN_SOURCE_ROOT"],
                                   "examples"))
    torch.set_num_threads(1)
    d, heads, dff, T = 16, 4, 64, 96
    rng = np.random.default_rng(3)
    x = rng.standard_normal((T, d)).astype(np.float32)
    cases = []
    for pos in ("none", "rope", "rope-interleaved", "alibi"):
        cases.append((1, "attention", False, False, pos, 12, 4))
    for nf in (False, True):
        for gelu in (False, True):
            for pos in ("none", "rope", "rope-interleaved", "alibi"):
                cases.append((1, "encoder", nf, gelu, pos, 12, 4))
    cases += [(1, "encoder", False, True, "rope", 5, 1),
              (1, "encoder", True, False, "alibi", 20, 7),
              (3, "attention", False, False, "none", 12, 4),
              (3, "attention", False, False, "rope", 12, 4),
              (3, "encoder", False, False, "none", 12, 4),
              (3, "encoder", False, False, "rope", 12, 4),
              (3, "encoder", True, True, "alibi", 8, 3),
              (3, "encoder", True, True, "rope-interleaved", 8, 3)]
    fails = 0
    print("| layers | kind | norm | act | positions | lookback/hop | "
          "sattn vs f64 max-abs (rel) | torch f32 vs f64 max-abs (rel) | "
          "ratio | bound | sattn vs f32 max-abs | |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="sattn-layers-") as wd:
        for i, (n, kind, nf, gelu, pos, L, hop) in enumerate(cases):
            att = kind == "attention"
            layers = ex.build_encoder(n, d, heads, dff, gelu, nf, 100 + i)
            files = []
            for k, layer in enumerate(layers):
                f = "c%d-l%d.safetensors" % (i, k)
                ex.export_layer(layer, os.path.join(wd, f), pos, att)
                files.append(f)
            mask = ex.band_mask(T, L)
            ref64 = ex.stack_forward([l.double() for l in layers],
                                     torch.from_numpy(x).double(), mask,
                                     pos, att)
            ref32 = ex.stack_forward([l.float() for l in layers],
                                     torch.from_numpy(x), mask, pos, att)
            try:
                got, _ = ex.run_pipeline(wd, x, files, L, hop)
            except RuntimeError as e:
                print("FAIL: %s" % e)
                fails += 1
                continue
            ok = got.shape[0] == T
            e = rel = e32 = rel32 = ef = float("nan")
            # The bound, on every row.
            bound = 1.0
            if ok:
                e, rel, e32, rel32 = ex.compare(got, ref64, ref32)
                ef = float(np.abs(got - ref32.numpy()).max())
                ok = e <= bound * e32
            fails += not ok
            print("| %d | %s | %s | %s | %s | %d/%d | %.2e (%.2e) | "
                  "%.2e (%.2e) | %.2f | <= %g | %.2e | %s |"
                  % (n, kind, "-" if att else ("pre" if nf else "post"),
                     "-" if att else ("gelu" if gelu else "relu"), pos, L,
                     hop, e, rel, e32, rel32, e / e32 if e32 > 0 else
                     float("inf"), bound, ef, "ok" if ok else "FAIL"))

        # Attention-only rows over many draws: a single draw's max-abs
        # is one element's rounding luck, so the bound is also checked on
        # the error over 16 random models and inputs per configuration
        # (root of the summed squared errors against float64, sattn and
        # PyTorch float32 on the same draws): asserted at ratio <= 1.
        print()
        print("| layers | positions | draws | sattn RMS vs f64 | torch f32 RMS "
              "vs f64 | RMS ratio | draws with sattn max-abs <= torch's | "
              "draws with sattn RMS <= torch's | |")
        print("|---|---|---|---|---|---|---|---|---|")
        for ci, (n, pos) in enumerate(((1, "none"), (1, "rope"),
                                       (1, "rope-interleaved"),
                                       (1, "alibi"), (3, "none"),
                                       (3, "rope"))):
            se = te = 0.0
            wins = rwins = 0
            for s in range(draws):
                xs = np.random.default_rng(1000 + s).standard_normal(
                    (T, d)).astype(np.float32)
                layers = ex.build_encoder(n, d, heads, dff, False, False,
                                          500 + 37 * ci + s)
                files = []
                for k, layer in enumerate(layers):
                    f = "r%d-%d-%d.safetensors" % (ci, s, k)
                    ex.export_layer(layer, os.path.join(wd, f), pos, True)
                    files.append(f)
                mask = ex.band_mask(T, 12)
                r64 = ex.stack_forward([l.double() for l in layers],
                                       torch.from_numpy(xs).double(), mask,
                                       pos, True).numpy()
                r32 = ex.stack_forward([l.float() for l in layers],
                                       torch.from_numpy(xs), mask, pos,
                                       True).numpy()
                try:
                    got, _ = ex.run_pipeline(wd, xs, files, 12, 4)
                except RuntimeError as e:
                    print("FAIL: %s" % e)
                    fails += 1
                    break
                if got.shape[0] != T:
                    print("FAIL: %d of %d frames" % (got.shape[0], T))
                    fails += 1
                    break
                a = got.astype(np.float64) - r64
                b = r32.astype(np.float64) - r64
                se += float((a * a).sum())
                te += float((b * b).sum())
                wins += np.abs(a).max() <= np.abs(b).max()
                rwins += (a * a).sum() <= (b * b).sum()
            else:
                m = draws * T * d
                rs, rt = (se / m) ** 0.5, (te / m) ** 0.5
                ok = rs <= rt
                fails += not ok
                print("| %d | %s | %d | %.3e | %.3e | %.2f | %d/%d | %d/%d | "
                      "%s |" % (n, pos, draws, rs, rt, rs / rt, wins, draws,
                                rwins, draws, "ok" if ok else "FAIL"))
        cases += [None] * 6

        # Metadata: the file says 4 heads and relu; heads=2 or
        # activation=gelu set on the element are refused naming both.
        layers = ex.build_encoder(1, d, heads, dff, False, False, 7)
        ex.export_layer(layers[0], os.path.join(wd, "m.safetensors"), "rope")
        for extra, words in ((" heads=2", ("heads = 2", "num_heads = 4")),
                             (" activation=gelu", ("activation=gelu",
                                                   "activation=relu")),
                             (" positions=alibi", ("positions=alibi",
                                                   "positions=rope"))):
            try:
                ex.run_pipeline(wd, x, ["m.safetensors"], 12, 4, extra)
                print("FAIL: %s accepted against the file's metadata"
                      % extra.strip())
                fails += 1
            except RuntimeError as e:
                msg = str(e)
                if all(w in msg for w in words):
                    print("ok: %s refused: %s" % (extra.strip(), [
                        l for l in msg.splitlines() if "ERROR" in l][0]
                        .strip()[:200]))
                else:
                    print("FAIL: %s refused without naming %s: %s"
                          % (extra.strip(), words, msg))
                    fails += 1
        # Set to the file's own values: accepted.
        try:
            ex.run_pipeline(wd, x, ["m.safetensors"], 12, 4,
                            " heads=4 activation=relu positions=rope")
            print("ok: the file's own values set explicitly are accepted")
        except RuntimeError as e:
            print("FAIL: matching explicit values refused: %s" % e)
            fails += 1
    print("%d passed, %d failed" % (len(cases) + 4 - fails, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
