#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Write the seed corpus of fuzz-weights into tests/fuzz/corpus/.

Small safetensors files (valid attention modules in every supported dtype,
with prefixes, metadata, integer and empty tensors) and a few malformed
ones.  Plain Python: no PyTorch needed.
"""

import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")

PACK = {"F32": "<f", "F64": "<d", "I64": "<q", "I32": "<i", "U8": "<B"}


def f16(x):
    return struct.pack("<e", x)


def bf16(x):
    return struct.pack("<f", x)[2:]


def enc(dtype, values):
    if dtype == "F16":
        return b"".join(f16(v) for v in values)
    if dtype == "BF16":
        return b"".join(bf16(v) for v in values)
    return b"".join(struct.pack(PACK[dtype], v) for v in values)


def vals(n, k):
    return [((i * 37 + k * 11) % 17 - 8) / 16.0 for i in range(n)]


def image(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, values)]"""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dt, shape, v in tensors:
        b = enc(dt, v)
        header[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def mha(e, dtype="F32", prefix="", bias=True, bias_kv=False, separate=False):
    t = []
    if separate:
        for k, n in enumerate(("q", "k", "v")):
            t.append((prefix + n + "_proj_weight", dtype, [e, e],
                      vals(e * e, k)))
    else:
        t.append((prefix + "in_proj_weight", dtype, [3 * e, e],
                  vals(3 * e * e, 0)))
    if bias:
        t.append((prefix + "in_proj_bias", dtype, [3 * e], vals(3 * e, 4)))
    t.append((prefix + "out_proj.weight", dtype, [e, e], vals(e * e, 5)))
    if bias:
        t.append((prefix + "out_proj.bias", dtype, [e], vals(e, 6)))
    if bias_kv:
        t.append((prefix + "bias_k", dtype, [1, 1, e], vals(e, 7)))
        t.append((prefix + "bias_v", dtype, [1, 1, e], vals(e, 8)))
    return t


def linears(layout, e, dk, dv, bias=True, out=True, prefix="", dtype="F32"):
    """An attention module of another layout: [(name, dtype, shape, v)]."""
    names = {"hf": ("q_proj", "k_proj", "v_proj", "out_proj"),
             "hf-o": ("q_proj", "k_proj", "v_proj", "o_proj"),
             "bert": ("query", "key", "value", "output.dense"),
             "bert-attn": ("self.query", "self.key", "self.value",
                           "output.dense"),
             "diffusers": ("to_q", "to_k", "to_v", "to_out.0"),
             "llama": ("wq", "wk", "wv", "wo"),
             "seeds": ("W_q", "W_k", "W_v", "W_o")}
    t = []
    if layout == "fused":
        t.append((prefix + "qkv.weight", dtype, [2 * dk + dv, e],
                  vals((2 * dk + dv) * e, 1)))
        if bias:
            t.append((prefix + "qkv.bias", dtype, [2 * dk + dv],
                      vals(2 * dk + dv, 2)))
        o = "proj"
    else:
        q, k, v, o = names[layout]
        for i, (n, rows) in enumerate(((q, dk), (k, dk), (v, dv))):
            t.append((prefix + n + ".weight", dtype, [rows, e],
                      vals(rows * e, i)))
            if bias:
                t.append((prefix + n + ".bias", dtype, [rows],
                          vals(rows, i + 3)))
    if out:
        t.append((prefix + o + ".weight", dtype, [e, dv], vals(e * dv, 6)))
        if bias:
            t.append((prefix + o + ".bias", dtype, [e], vals(e, 7)))
    return t


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "mha-e4-f32": image(mha(4)),
        "mha-e4-f16-separate-biaskv": image(mha(4, "F16", separate=True,
                                                bias_kv=True)),
        "mha-e4-bf16-prefix-meta": image(
            mha(4, "BF16", prefix="enc.0.attn."),
            {"format": "pt", "enc.0.attn.num_heads": "2",
             "enc.0.attn.add_zero_attn": "0"}),
        "mha-e2-f64-nobias": image(mha(2, "F64", bias=False)),
        "mha-e8-f32-biaskv": image(mha(8, bias_kv=True)),
        "mixed-dtypes": image([
            ("norm.num_batches_tracked", "I64", [], [3]),
            ("empty", "F32", [0, 3], []),
            ("mask", "U8", [4], [1, 0, 1, 1]),
            ("idx", "I32", [2], [7, -1]),
            ("scalar", "F32", [], [2.5]),
        ] + mha(2, prefix="m.")),
        "empty": image([]),
        "seeds-e8-dk16": image(linears("seeds", 8, 16, 16, bias=False,
                                       out=False),
                               {"num_heads": "1", "head_dim": "16",
                                "layout": "seeds"}),
        "hf-e4-dk8-dv4-meta": image(linears("hf", 4, 8, 4, prefix="a."),
                                    {"a.num_heads": "2", "a.head_dim": "4",
                                     "a.value_dim": "2"}),
        "hf-o-e4-f16": image(linears("hf-o", 4, 4, 4, dtype="F16")),
        "bert-attn-e6-dk3": image(linears("bert-attn", 6, 3, 3,
                                          prefix="enc.layer.0.attention.")),
        "diffusers-e4-nobias": image(linears("diffusers", 4, 2, 6,
                                             bias=False)),
        "llama-e8-bf16": image(linears("llama", 8, 8, 8, bias=False,
                                       dtype="BF16")),
        "fused-e6-dk4-dv2": image(linears("fused", 6, 4, 2),
                                  {"num_heads": "2", "head_dim": "2"}),
        "ambiguous-hf-seeds": image(linears("hf", 4, 4, 4)
                                    + linears("seeds", 4, 4, 4)),
        "bad-gqa-llama": image(linears("llama", 8, 8, 8, out=False)[:1]
                               + [("wk.weight", "F32", [4, 8],
                                   vals(32, 1)),
                                  ("wv.weight", "F32", [4, 8],
                                   vals(32, 2))]),
        "unpadded": image(mha(2), pad=False),
    }
    # Whole models per window (sattn_model_load): embed, layers, head.
    def layer(i, d, ff, prefix=""):
        p = "%sencoder.layers.%d." % (prefix, i)
        return ([(p + "self_attn.in_proj_weight", "F32", [3 * d, d],
                  vals(3 * d * d, 10 + i)),
                 (p + "self_attn.in_proj_bias", "F32", [3 * d],
                  vals(3 * d, 11 + i)),
                 (p + "self_attn.out_proj.weight", "F32", [d, d],
                  vals(d * d, 12 + i)),
                 (p + "linear1.weight", "F32", [ff, d], vals(ff * d, 13)),
                 (p + "linear1.bias", "F32", [ff], vals(ff, 14)),
                 (p + "linear2.weight", "F32", [d, ff], vals(ff * d, 15)),
                 (p + "norm1.weight", "F32", [d], [1.0] * d),
                 (p + "norm2.bias", "F32", [d], vals(d, 16))])

    def whole(f, d, ff, classes, layers=1, pos=0, mlp=0, prefix=""):
        t = [(prefix + "embed.weight", "F32", [d, f], vals(d * f, 1)),
             (prefix + "embed.bias", "F32", [d], vals(d, 2))]
        if pos:
            t.append((prefix + "pos_embed", "F32", [pos, d],
                      vals(pos * d, 3)))
        for i in range(layers):
            t += layer(i, d, ff, prefix)
        if mlp:
            t += [(prefix + "head.0.weight", "F32", [mlp, d],
                   vals(mlp * d, 4)),
                  (prefix + "head.2.weight", "F32", [classes, mlp],
                   vals(classes * mlp, 5)),
                  (prefix + "head.2.bias", "F32", [classes],
                   vals(classes, 6))]
        elif classes:
            t += [(prefix + "head.weight", "F32", [classes, d],
                   vals(classes * d, 4))]
        return t
    seeds["whole-f2-d4-c3"] = image(whole(2, 4, 4, 3),
                                    {"num_heads": "2",
                                     "labels": '["a","b","c"]'})
    seeds["whole-f3-d4-pos5-mlp-2l"] = image(
        whole(3, 4, 6, 2, layers=2, pos=5, mlp=3, prefix="net."),
        {"net.num_heads": "1", "net.positions": "learned",
         "net.pooling": "last", "net.norm_first": "1",
         "net.activation": "gelu", "net.head_activation": "gelu"})
    seeds["whole-d4-rope-nohead"] = image(
        whole(2, 4, 4, 0) + [("encoder.norm.weight", "F32", [4],
                              [1.0] * 4)],
        {"num_heads": "2", "positions": "rope", "causal": "1"})
    seeds["bad-whole-labels"] = image(whole(2, 4, 4, 3),
                                      {"num_heads": "2",
                                       "labels": '["a","b"]'})
    good = seeds["mha-e4-f32"]
    hlen = struct.unpack("<Q", good[:8])[0]
    seeds["bad-truncated"] = good[:-5]
    seeds["bad-header-past-end"] = struct.pack("<Q", hlen + 1000) + good[8:]
    seeds["bad-json"] = struct.pack("<Q", 9) + b'{"a":[1,}'
    ov = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
    t = json.dumps(ov).encode()
    seeds["bad-overlap"] = struct.pack("<Q", len(t)) + t + bytes(12)
    nan = mha(2)
    nan[0] = (nan[0][0], "F32", nan[0][2],
              [float("nan")] + nan[0][3][1:])
    seeds["bad-nan"] = image(nan)
    for name, data in seeds.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
