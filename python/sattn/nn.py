# SPDX-License-Identifier: LGPL-2.1-or-later
"""A whole signal model per window, in PyTorch, as libsattn runs it.

    from sattn.nn import SignalTransformer, save_safetensors
    net = SignalTransformer(d_frame=8, d_model=16, heads=2, layers=2,
                            d_ff=32, classes=3, positions="learned",
                            max_window=64)
    ... train it ...
    save_safetensors(net.eval(), "model.safetensors", labels=["a", "b", "c"])
    model = sattn.Model.from_safetensors("model.safetensors")
    stream = sattn.Stream(model, window=64, hop=16, output="classes")

A window of n frames (B, n, d_frame) is standardised (optional
standardize.mean / .std buffers), divided by its own RMS or power
(input_norm, the model's AGC), goes through a front end (a Linear per
frame, embed.*, or a Conv1d stem, conv.*, with an optional activation),
optionally gets a learned CLS row (cls_token) and learned positions,
runs N nn.TransformerEncoderLayer (bidirectional unless causal), an
optional final LayerNorm, is pooled (mean, last, max, cls or attention
with a Linear(d_model, 1) named pool) and goes through a head (Linear, or
Linear-act-Linear) to class logits.  docs/models.md is the family, its
masks, tensor names and metadata.  The state dict keeps PyTorch's names
(standardize.*, embed.* | conv.*, cls_token, pos_embed,
encoder.layers.{i}.*, encoder.norm.*, pool.*, head.*, contract.*), which
is what sattn_model_load reads (include/sattn/sattn-weights.h);
save_safetensors adds what a state dict does not record (heads, norm
placement, activation, positions, pooling, the conv stem's geometry, the
input normalisation, labels, the input contract and its statistics) as
metadata.  fit_contract() computes the contract statistics from training
windows.

Semantics, the same as libsattn's for a whole model:
  - key_padding_mask (B, n) bool, True = masked (PyTorch's convention): a
    masked frame is never a key, is left out of pooling, and its samples
    are ignored (they may be NaN: a stream's invalid frames are masked so);
  - positions: "learned" adds pos_embed[:n] to the embedded rows (window
    row 0 = the window's oldest frame); "rope" / "rope-interleaved" rotate
    each head's Q and K after the projection and its bias at the window
    positions 0..n-1 (pairs (k, k + d_head/2) resp. (2k, 2k+1), angle
    p * rope_base^(-2k/d_head)); "alibi" adds -slope_h * |i - j| (causal:
    -slope_h * (i - j)) to the scaled scores, slopes of Press et al.;
  - a query row with no visible key (a masked row) gets a zero attention
    output, and rows of masked frames are zeros in features();
  - a window with no usable frame pools to a zero row;
  - a masked frame enters the front end as zeros (after the input
    normalisations), takes no part in the window's RMS / power, and still
    counts as a time step for the conv stem (its zero padding) and for
    positions; the CLS row is never masked.

The layers run in this module's own forward (the stock layer's parameters,
the stock layer's formula), which is what allows RoPE and ALiBi and keeps
every row finite whatever the mask; stock_features() runs the stock
nn.TransformerEncoder instead (positions "none" / "learned"), for checking
that both agree.

Only this module of the package needs torch.
"""

import json
import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SignalTransformer", "SplitAttention", "save_safetensors",
           "alibi_slopes"]

POSITIONS = ("none", "learned", "rope", "rope-interleaved", "alibi")
POOLINGS = ("mean", "last", "max", "cls", "attention")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}
FRONT_ENDS = ("linear", "conv")
CONV_ACTIVATIONS = ("none", "relu", "gelu")
INPUT_NORMS = ("none", "rms", "power")
# The input contract's metadata keys (docs/models.md), in writing order.
CONTRACT_KEYS = ("sample_rate", "channels", "frame_size", "window", "hop",
                 "min_probability")


def alibi_slopes(h):
    """ALiBi slopes of Press et al. for h heads: 2^(-8(i+1)/h) when h is a
    power of two, else those of the next lower power of two p followed by
    every other slope of 2p."""
    def pow2(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]
    if h & (h - 1) == 0:
        return pow2(h)
    p = 1 << (h.bit_length() - 1)
    return pow2(p) + alibi_slopes(2 * p)[0::2][:h - p]


def _rope(x, interleaved, base):
    """x: (B, H, n, dh), rotated at positions 0..n-1 (angles in float64,
    then in x's dtype)."""
    n, dh = x.shape[-2], x.shape[-1]
    k = torch.arange(dh // 2, dtype=torch.float64)
    theta = float(base) ** (-2.0 * k / dh)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * theta[None, :]
    c = torch.cos(ang).to(device=x.device, dtype=x.dtype)
    s = torch.sin(ang).to(device=x.device, dtype=x.dtype)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * c - b * s, b * c + a * s],
                           dim=-1).flatten(-2)
    a, b = x[..., :dh // 2], x[..., dh // 2:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


class SplitAttention(nn.Module):
    """Self-attention whose queries and keys have their own size: Linear
    projections q_proj, k_proj (d_model -> heads x head_dim), v_proj
    (d_model -> d_model, heads x d_model/heads) and out_proj, with biases
    (the names of the "hf" layout sattn_model_load reads).  Used by
    SignalTransformer when head_dim is not d_model/heads."""

    def __init__(self, d_model, heads, head_dim, dropout=0.0):
        super().__init__()
        self.num_heads, self.head_dim, self.dropout = heads, head_dim, dropout
        self.q_proj = nn.Linear(d_model, heads * head_dim)
        self.k_proj = nn.Linear(d_model, heads * head_dim)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)


class _Buffers(nn.Module):
    """A named group of buffers (standardize.mean / .std,
    contract.pooled_mean / .pooled_std): state dict names with a dot."""

    def __init__(self, **tensors):
        super().__init__()
        for k, v in tensors.items():
            self.register_buffer(k, v)


class SignalTransformer(nn.Module):
    """Front end, encoder layers, pooling and head over a window of frames
    (docs/models.md is the family).

    d_frame: floats per frame (F = channels x frame-size); d_model, heads,
    layers, d_ff: the encoder (nn.TransformerEncoderLayer(d_model, heads,
    d_ff, dropout, activation, layer_norm_eps=norm_eps, batch_first=True,
    norm_first=norm_first)); classes: the head's outputs (0 = no head:
    forward returns the pooled row); head_hidden 0 = a Linear head, K > 0
    = Linear(d_model, K), head_activation, Linear(K, classes); positions:
    "none", "learned" (needs max_window, the frames pos_embed covers),
    "rope", "rope-interleaved", "alibi"; final_norm: a LayerNorm after the
    last layer (encoder.norm); pooling "mean", "last", "max", "cls" (needs
    cls_token) or "attention" (a Linear(d_model, 1) named pool scores each
    row); causal: a row sees only rows at or before its own; labels: the
    classes' names, kept for save_safetensors; head_dim: the query/key size
    per head (None = d_model/heads, the stock layer; another size gives
    each layer a SplitAttention, values stay d_model/heads per head);
    scale: the score scale (None = 1/sqrt(d_head), 1.0 = unscaled,
    recorded in the file's metadata).

    Keyword-only, the rest of the family (docs/models.md):
    front_end "linear" (embed: a Linear per frame) or "conv" (conv: a
    Conv1d stem over the window's n x S time steps of C = in_channels
    values each, C x S = d_frame; conv_stride = S (default d_frame / C),
    conv_kernel K, conv_padding P (default dilation x (K-1) / 2),
    conv_dilation L; one row per frame needs L(K-1)+1-S <= 2P <= L(K-1);
    conv_activation none, relu or gelu); standardize: per-feature
    (x - standardize.mean) / standardize.std buffers (set them, e.g. from
    the training data); input_norm "none", "rms" (each window divided by
    sqrt(mean(x^2) + eps) over its usable frames' values) or "power"
    (sqrt(channels * mean(x^2) + eps): needs channels), eps =
    input_norm_eps; cls_token: a learned row (cls_token, (1, 1, d_model))
    prepended to each window, never masked (pos_embed then has
    max_window + 1 rows, row 0 the CLS's; RoPE / ALiBi put it at window
    position 0 and frame i at i + 1).  The input contract, written as
    metadata: sample_rate, channels, frame_size (channels x frame_size =
    d_frame), window, hop, min_probability; fit_contract() adds the
    training statistics.
    """

    def __init__(self, d_frame, d_model, heads, layers, d_ff, classes=0,
                 positions="none", max_window=0, norm_first=False,
                 activation="relu", norm_eps=1e-5, final_norm=False,
                 head_hidden=0, head_activation="relu", pooling="mean",
                 causal=False, rope_base=10000.0, dropout=0.0, labels=None,
                 head_dim=None, scale=None, *, front_end="linear",
                 in_channels=None, conv_kernel=3, conv_stride=None,
                 conv_padding=None, conv_dilation=1, conv_activation="none",
                 standardize=False, input_norm="none", input_norm_eps=1e-8,
                 cls_token=False, sample_rate=None, channels=None,
                 frame_size=None, window=None, hop=None,
                 min_probability=None):
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError("positions=%r: expected one of %s"
                             % (positions, ", ".join(POSITIONS)))
        if pooling not in POOLINGS:
            raise ValueError("pooling=%r: expected one of %s"
                             % (pooling, ", ".join(POOLINGS)))
        if pooling == "cls" and not cls_token:
            raise ValueError("pooling='cls' needs cls_token=True")
        for name, v, allowed in (("front_end", front_end, FRONT_ENDS),
                                 ("conv_activation", conv_activation,
                                  CONV_ACTIVATIONS),
                                 ("input_norm", input_norm, INPUT_NORMS)):
            if v not in allowed:
                raise ValueError("%s=%r: expected one of %s"
                                 % (name, v, ", ".join(allowed)))
        for name, v in (("activation", activation),
                        ("head_activation", head_activation)):
            if v not in ACTIVATIONS:
                raise ValueError("%s=%r: expected relu or gelu" % (name, v))
        if layers < 1:
            raise ValueError("layers=%d: a model has at least one layer"
                             % layers)
        if d_model % heads:
            raise ValueError("heads=%d does not divide d_model=%d"
                             % (heads, d_model))
        if head_dim is not None and head_dim < 1:
            raise ValueError("head_dim=%r: expected None or >= 1"
                             % (head_dim,))
        if head_dim == d_model // heads:
            head_dim = None
        dk = d_model // heads if head_dim is None else head_dim
        if positions.startswith("rope") and dk % 2:
            raise ValueError("RoPE needs an even d_head (%d)" % dk)
        if scale is not None and not (0.0 < float(scale) < math.inf):
            raise ValueError("scale=%r: expected None (1/sqrt(d_head)) or "
                             "a finite number > 0" % (scale,))
        if positions == "learned" and max_window < 1:
            raise ValueError("positions='learned' needs max_window >= 1")
        if labels is not None and len(labels) != classes:
            raise ValueError("%d labels for %d classes"
                             % (len(labels), classes))
        if not (0.0 <= float(input_norm_eps) < math.inf):
            raise ValueError("input_norm_eps=%r: expected a finite number "
                             ">= 0" % (input_norm_eps,))
        if channels is not None and frame_size is None \
                and d_frame % channels == 0:
            frame_size = d_frame // channels
        if channels is not None and frame_size is not None \
                and channels * frame_size != d_frame:
            raise ValueError("channels=%d x frame_size=%d is not d_frame=%d"
                             % (channels, frame_size, d_frame))
        if input_norm == "power" and channels is None:
            raise ValueError("input_norm='power' needs channels (the mean "
                             "power per time step sums over them)")
        if min_probability is not None and \
                not 0.0 <= float(min_probability) <= 1.0:
            raise ValueError("min_probability=%r: expected 0 ... 1"
                             % (min_probability,))
        if window is not None and positions == "learned" \
                and window > max_window:
            raise ValueError("window=%d is longer than pos_embed's %d "
                             "frames (max_window)" % (window, max_window))
        if hop is not None and window is not None and not 1 <= hop <= window:
            raise ValueError("hop=%d: expected 1 ... window (%d)"
                             % (hop, window))
        self.d_frame, self.d_model, self.heads = d_frame, d_model, heads
        self.d_ff, self.classes = d_ff, classes
        self.positions, self.pooling = positions, pooling
        self.max_window = max_window if positions == "learned" else 0
        self.norm_first, self.activation = bool(norm_first), activation
        self.norm_eps, self.final_norm = float(norm_eps), bool(final_norm)
        self.head_hidden, self.head_activation = head_hidden, head_activation
        self.causal, self.rope_base = bool(causal), float(rope_base)
        self.labels = list(labels) if labels is not None else None
        self.head_dim, self.d_head = head_dim, dk
        self.scale = None if scale is None else float(scale)
        self.front_end = front_end
        self.input_norm, self.input_norm_eps = input_norm, float(
            input_norm_eps)
        self.has_cls = bool(cls_token)
        self.sample_rate, self.channels = sample_rate, channels
        self.frame_size, self.window, self.hop = frame_size, window, hop
        self.min_probability = (None if min_probability is None
                                else float(min_probability))
        self.contract_input_rms = None   # (lo, hi), fit_contract()
        self.contract_pooled_z = None

        if standardize:
            self.standardize = _Buffers(mean=torch.zeros(d_frame),
                                        std=torch.ones(d_frame))
        if front_end == "linear":
            self.embed = nn.Linear(d_frame, d_model)
        else:
            c = d_frame if in_channels is None else int(in_channels)
            if c < 1 or d_frame % c:
                raise ValueError("in_channels=%r does not divide d_frame=%d"
                                 % (in_channels, d_frame))
            s = d_frame // c if conv_stride is None else int(conv_stride)
            if c * s != d_frame:
                raise ValueError("in_channels=%d x conv_stride=%d is not "
                                 "d_frame=%d (a frame is S time steps of C "
                                 "values)" % (c, s, d_frame))
            k, dil = int(conv_kernel), int(conv_dilation)
            pad = dil * (k - 1) // 2 if conv_padding is None \
                else int(conv_padding)
            if k < 1 or dil < 1 or not (dil * (k - 1) + 1 - s <= 2 * pad
                                        <= dil * (k - 1)):
                raise ValueError(
                    "conv kernel %d, stride %d, padding %d, dilation %d: "
                    "one row per frame needs L(K-1)+1-S <= 2P <= L(K-1)"
                    % (k, s, pad, dil))
            self.in_channels, self.conv_stride = c, s
            self.conv_padding, self.conv_dilation = pad, dil
            self.conv_activation = conv_activation
            self.conv = nn.Conv1d(c, d_model, k, stride=s, padding=pad,
                                  dilation=dil)
        if cls_token:
            self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d_model))
        if positions == "learned":
            self.pos_embed = nn.Parameter(
                0.02 * torch.randn(max_window + self.has_cls, d_model))

        def layer():
            lay = nn.TransformerEncoderLayer(
                d_model, heads, d_ff, dropout, activation,
                layer_norm_eps=norm_eps, batch_first=True,
                norm_first=norm_first)
            if head_dim is not None:
                lay.self_attn = SplitAttention(d_model, heads, head_dim,
                                               dropout)
            return lay
        norm = nn.LayerNorm(d_model, eps=norm_eps) if final_norm else None
        try:
            self.encoder = nn.TransformerEncoder(layer(), layers, norm=norm,
                                                 enable_nested_tensor=False)
        except TypeError:  # a PyTorch without that argument
            self.encoder = nn.TransformerEncoder(layer(), layers, norm=norm)
        # TransformerEncoder clones one layer: give each its own
        # initialisation, as independently built layers have.
        self.encoder.layers = nn.ModuleList(layer() for _ in range(layers))

        if pooling == "attention":
            # "pool" is also this class's method: the Linear is reached as
            # self.attention_pool (its state dict names are pool.*)
            self._modules["pool"] = nn.Linear(d_model, 1)
        if classes:
            if head_hidden:
                self.head = nn.Sequential(
                    nn.Linear(d_model, head_hidden),
                    ACTIVATIONS[head_activation](),
                    nn.Linear(head_hidden, classes))
            else:
                self.head = nn.Linear(d_model, classes)

    @property
    def attention_pool(self):
        """The attention pooling's Linear(d_model, 1) (state dict pool.*),
        or None."""
        return self._modules.get("pool")

    # ------------------------------------------------------------ forward

    def _mask(self, x, key_padding_mask):
        B, n, _ = x.shape
        if key_padding_mask is None:
            return torch.zeros(B, n, dtype=torch.bool, device=x.device)
        m = torch.as_tensor(key_padding_mask, device=x.device)
        if m.shape != (B, n):
            raise ValueError("key_padding_mask has shape %s, expected %s"
                             % (tuple(m.shape), (B, n)))
        return m.to(torch.bool)

    def normalised(self, x, key_padding_mask=None):
        """What enters the front end (B, n, d_frame): standardised, masked
        frames zeros (their samples, NaN included, are never read), each
        window divided by its RMS / power (over its usable frames)."""
        mask = self._mask(x, key_padding_mask)
        m3 = mask[..., None]
        x = x.masked_fill(m3, 0.0)
        if hasattr(self, "standardize"):
            x = (x - self.standardize.mean) / self.standardize.std
            x = x.masked_fill(m3, 0.0)
        if self.input_norm != "none":
            cnt = (~mask).sum(dim=1).to(x.dtype) * x.shape[2]
            ms = (x * x).sum(dim=(1, 2)) / cnt.clamp(min=1.0)
            if self.input_norm == "power":
                ms = ms * self.channels
            r = torch.sqrt(ms + self.input_norm_eps)[:, None, None]
            x = torch.where(r > 0, x / torch.where(r > 0, r,
                                                   torch.ones_like(r)),
                            torch.zeros_like(x))
        return x

    def front(self, x):
        """The front end on normalised frames (B, n, d_frame): one row per
        frame (B, n, d_model)."""
        if self.front_end == "linear":
            return self.embed(x)
        B, n, _ = x.shape
        c, s = self.in_channels, self.conv_stride
        t = x.reshape(B, n * s, c).transpose(1, 2)
        h = self.conv(t).transpose(1, 2)
        if self.conv_activation == "relu":
            h = F.relu(h)
        elif self.conv_activation == "gelu":
            h = F.gelu(h)
        return h

    def _embed(self, x, mask):
        """The encoder's input rows (B, n [+ 1], d_model) and their mask
        (the CLS row, first, is never masked)."""
        n = x.shape[1]
        h = self.front(self.normalised(x, mask))
        if self.has_cls:
            h = torch.cat([self.cls_token.reshape(1, 1, -1)
                           .expand(h.shape[0], 1, -1).to(h.dtype), h], dim=1)
            mask = torch.cat([torch.zeros_like(mask[:, :1]), mask], dim=1)
        if self.positions == "learned":
            if n > self.max_window:
                raise ValueError("window of %d rows, pos_embed has %d"
                                 % (n, self.max_window))
            h = h + self.pos_embed[:h.shape[1]]
        return h, mask

    def _attention(self, a, x, mask):
        """nn.MultiheadAttention a as self-attention on x (B, n, E), keys
        masked where mask (B, n) is True, with this model's positions."""
        B, n, E = x.shape
        H = a.num_heads
        dh, dv = self.d_head, E // H
        if isinstance(a, SplitAttention):
            q, k, v = a.q_proj(x), a.k_proj(x), a.v_proj(x)
        else:
            q, k, v = F.linear(x, a.in_proj_weight,
                               a.in_proj_bias).chunk(3, dim=-1)
        q, k = (t.reshape(B, n, H, dh).transpose(1, 2) for t in (q, k))
        v = v.reshape(B, n, H, dv).transpose(1, 2)
        if self.positions in ("rope", "rope-interleaved"):
            inter = self.positions == "rope-interleaved"
            q = _rope(q, inter, self.rope_base)
            k = _rope(k, inter, self.rope_base)
        s = torch.matmul(q, k.transpose(-1, -2))
        s = s / math.sqrt(dh) if self.scale is None else s * self.scale
        i = torch.arange(n, device=x.device)
        if self.positions == "alibi":
            d = (i[:, None] - i[None, :]).to(x.dtype)
            if not self.causal:
                d = d.abs()
            sl = torch.tensor(alibi_slopes(H), dtype=x.dtype, device=x.device)
            s = s - sl[:, None, None] * d
        allowed = ~mask[:, None, None, :]
        if self.causal:
            allowed = allowed & (i[None, :] <= i[:, None])
        s = s.masked_fill(~allowed, float("-inf"))
        # a query with no visible key: zero output (not NaN)
        seen = allowed.any(dim=-1, keepdim=True)
        s = s.masked_fill(~seen, 0.0)
        p = torch.softmax(s, dim=-1) * seen
        p = F.dropout(p, a.dropout, self.training)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B, n, E)
        return a.out_proj(o)

    def _layer(self, layer, x, mask):
        """nn.TransformerEncoderLayer's formula with _attention."""
        def sa(u):
            return layer.dropout1(self._attention(layer.self_attn, u, mask))

        def ff(u):
            return layer.dropout2(layer.linear2(layer.dropout(
                layer.activation(layer.linear1(u)))))
        if layer.norm_first:
            x = x + sa(layer.norm1(x))
            return x + ff(layer.norm2(x))
        x = layer.norm1(x + sa(x))
        return layer.norm2(x + ff(x))

    def features(self, x, key_padding_mask=None):
        """The encoder's rows (B, n, d_model) after the final norm; with a
        CLS token (B, n + 1, d_model), row 0 the CLS's.  Rows of masked
        frames are zeros."""
        mask = self._mask(x, key_padding_mask)
        h, mask = self._embed(x, mask)
        for layer in self.encoder.layers:
            h = self._layer(layer, h, mask)
        if self.encoder.norm is not None:
            h = self.encoder.norm(h)
        return h.masked_fill(mask[..., None], 0.0)

    def stock_features(self, x, key_padding_mask=None):
        """features() through the stock nn.TransformerEncoder (positions
        "none" or "learned" only).  A row that sees no key is NaN there
        (and spreads to the next layer through the values of masked keys):
        use with masks that leave every row a key."""
        if self.positions not in ("none", "learned"):
            raise ValueError("the stock encoder has no %s positions"
                             % self.positions)
        if self.head_dim is not None or self.scale is not None:
            raise ValueError("the stock encoder has d_head = d_model/heads "
                             "and scale 1/sqrt(d_head) only")
        mask = self._mask(x, key_padding_mask)
        h, mask = self._embed(x, mask)
        n = h.shape[1]
        causal = None
        if self.causal:
            causal = torch.triu(torch.full((n, n), float("-inf"),
                                           dtype=h.dtype, device=h.device), 1)
        h = self.encoder(h, mask=causal, src_key_padding_mask=mask)
        return h.masked_fill(mask[..., None], 0.0)

    def pool(self, h, key_padding_mask=None, pooling=None):
        """Rows h (B, n, d_model), or (B, n + 1, d_model) with the CLS
        first, to one row each (B, d_model), key_padding_mask (B, n) the
        frames' mask: pooling (None = the model's) "mean" (of the usable
        rows, the CLS's included), "last" (the row of the last usable
        frame), "max" (per feature, over the usable rows), "cls" (row 0),
        "attention" (softmax of pool(h) over the usable rows, the rows
        summed with those weights).  A window with no usable frame pools
        to zeros."""
        pooling = pooling or self.pooling
        B, rows = h.shape[0], h.shape[1]
        cls = int(self.has_cls and rows > 0)
        fm = self._mask(h[:, cls:], key_padding_mask)
        mask = torch.cat([torch.zeros_like(fm[:, :1]), fm], 1) if cls else fm
        any_frame = (~fm).any(dim=1)
        keep = (~mask).to(h.dtype)
        if pooling == "mean":
            cnt = keep.sum(dim=1, keepdim=True)
            out = (h * keep[..., None]).sum(dim=1) / cnt.clamp(min=1.0)
        elif pooling == "max":
            out = h.masked_fill(mask[..., None], float("-inf")).max(dim=1)[0]
            out = torch.where(torch.isfinite(out), out,
                              torch.zeros_like(out))
        elif pooling == "cls":
            if not cls:
                raise ValueError("pooling 'cls' needs a CLS token")
            out = h[:, 0]
        elif pooling == "attention":
            lin = self.attention_pool
            if lin is None:
                raise ValueError("attention pooling needs pool (Linear)")
            s = lin(h)[..., 0].masked_fill(mask, float("-inf"))
            s = s.masked_fill(~(~mask).any(dim=1, keepdim=True), 0.0)
            w = torch.softmax(s, dim=1)
            out = (w[..., None] * h).sum(dim=1)
        elif pooling == "last":
            n = rows
            idx = torch.arange(n, device=h.device).expand_as(mask)
            idx = torch.where(mask, torch.full_like(idx, -1), idx)
            if cls:
                idx[:, 0] = -1
            last = idx.max(dim=1)[0]
            out = h[torch.arange(B, device=h.device), last.clamp(min=0)]
        else:
            raise ValueError("pooling=%r" % (pooling,))
        return out * any_frame.to(h.dtype)[:, None]

    def pooled(self, x, key_padding_mask=None):
        """The pooled row (B, d_model) of each window."""
        return self.pool(self.features(x, key_padding_mask),
                         key_padding_mask)

    def forward(self, x, key_padding_mask=None):
        """Class logits (B, classes); the pooled row when classes == 0."""
        p = self.pooled(x, key_padding_mask)
        return self.head(p) if self.classes else p

    # ------------------------------------------------------------ contract

    @staticmethod
    def window_rms(x, key_padding_mask=None):
        """Each window's RMS (B,) over every value of its usable frames,
        before any normalisation (0 for a window with none)."""
        x = torch.as_tensor(x)
        B, n, _ = x.shape
        m = (torch.zeros(B, n, dtype=torch.bool) if key_padding_mask is None
             else torch.as_tensor(key_padding_mask, dtype=torch.bool))
        x = x.to(torch.float64).masked_fill(m[..., None], 0.0)
        cnt = (~m).sum(dim=1).to(torch.float64) * x.shape[2]
        return torch.sqrt((x * x).sum(dim=(1, 2)) / cnt.clamp(min=1.0))

    def fit_contract(self, windows, masks=None, quantile=1.0):
        """The contract statistics from training windows (N, n, d_frame),
        masks (N, n) True = masked or None: contract_input_rms = the
        [1 - quantile, quantile] quantiles of the windows' input RMS,
        contract.pooled_mean / .pooled_std = the pooled rows' mean and
        standard deviation (floored at 1e-6 x (1 + |mean|)), and
        contract_pooled_z = the quantile of the windows' z.  Windows with
        no usable frame are left out.  Computed in float64 on a copy;
        returns self."""
        import copy as _copy
        q = float(quantile)
        if not 0.5 <= q <= 1.0:
            raise ValueError("quantile=%r: expected 0.5 ... 1" % (quantile,))
        x = torch.as_tensor(windows).to(torch.float64)
        if x.dim() != 3 or x.shape[2] != self.d_frame:
            raise ValueError("windows of shape %s: expected (N, n, %d)"
                             % (tuple(x.shape), self.d_frame))
        m = (torch.zeros(x.shape[:2], dtype=torch.bool) if masks is None
             else torch.as_tensor(masks, dtype=torch.bool))
        ok = (~m).any(dim=1)
        if not ok.any():
            raise ValueError("no window with a usable frame")
        x, m = x[ok], m[ok]
        r = self.window_rms(x, m)
        net = _copy.deepcopy(self).double().eval()
        with torch.no_grad():
            p = net.pooled(x, m)
        mu = p.mean(dim=0)
        sd = p.std(dim=0, unbiased=False)
        sd = torch.maximum(sd, 1e-6 * (1.0 + mu.abs()))
        z = torch.sqrt((((p - mu) / sd) ** 2).mean(dim=1))
        self.contract_input_rms = (float(torch.quantile(r, 1.0 - q)),
                                   float(torch.quantile(r, q)))
        self.contract_pooled_z = max(float(torch.quantile(z, q)), 1e-6)
        dt = next(self.parameters()).dtype
        self.contract = _Buffers(pooled_mean=mu.to(dt), pooled_std=sd.to(dt))
        return self

    def metadata(self):
        """What save_safetensors records besides the tensors (str values,
        without prefix)."""
        md = {
            "format": "pt",
            "model": "signal-transformer",
            "num_heads": str(self.heads),
            "norm_first": "1" if self.norm_first else "0",
            "activation": self.activation,
            "norm_eps": repr(self.norm_eps),
            "positions": self.positions,
            "rope_base": repr(self.rope_base),
            "causal": "1" if self.causal else "0",
            "pooling": self.pooling,
            "d_frame": str(self.d_frame),
        }
        if self.classes and self.head_hidden:
            md["head_activation"] = self.head_activation
        if self.labels is not None:
            md["labels"] = json.dumps(self.labels)
        if self.max_window:
            md["window"] = str(self.max_window)
        if self.head_dim is not None:
            md["head_dim"] = str(self.head_dim)
            md["value_dim"] = str(self.d_model // self.heads)
        if self.scale is not None:
            md["scale"] = repr(self.scale)
        if self.front_end == "conv":
            md["conv_stride"] = str(self.conv_stride)
            md["conv_padding"] = str(self.conv_padding)
            md["conv_dilation"] = str(self.conv_dilation)
            md["conv_activation"] = self.conv_activation
        if self.input_norm != "none":
            md["input_norm"] = self.input_norm
            md["input_norm_eps"] = repr(self.input_norm_eps)
        for k in CONTRACT_KEYS:
            v = getattr(self, k, None)
            if v is not None:
                md[k] = repr(float(v)) if k == "min_probability" \
                    else str(int(v))
        if self.contract_input_rms is not None:
            md["contract_input_rms"] = "%r %r" % self.contract_input_rms
        if self.contract_pooled_z is not None:
            md["contract_pooled_z"] = repr(self.contract_pooled_z)
        return md


# ------------------------------------------------------------ safetensors

def _write_safetensors(path, tensors, metadata):
    """tensors: {name: tensor}, written as little-endian F32 in this order
    through the package's one writer (sattn.stfile); metadata: {str: str}."""
    from . import stfile
    stfile.write(path, {name: t.detach().to(device="cpu",
                                            dtype=torch.float32).numpy()
                        for name, t in tensors.items()}, metadata)


def save_safetensors(module, path, labels=None, extra_metadata=None,
                     prefix=""):
    """Write module's state dict (float32) and its metadata to path, every
    name (tensors and metadata keys) prefixed with prefix.  labels
    overrides the module's; extra_metadata (str -> str) is added last
    (e.g. {"window": "64"}).  Uses the safetensors package when it is
    installed, else writes the format itself."""
    md = module.metadata()
    if labels is not None:
        labels = list(labels)
        if len(labels) != module.classes:
            raise ValueError("%d labels for %d classes"
                             % (len(labels), module.classes))
        md["labels"] = json.dumps(labels)
    for k, v in (extra_metadata or {}).items():
        md[str(k)] = str(v)
    pfx = prefix or ""
    if pfx and not pfx.endswith("."):
        pfx += "."
    md = {pfx + k: v for k, v in md.items()}
    tensors = {pfx + k: v.detach().to(device="cpu", dtype=torch.float32)
               .contiguous()
               for k, v in module.state_dict().items() if v is not None}
    try:
        from safetensors.torch import save_file
    except ImportError:
        _write_safetensors(path, tensors, md)
    else:
        save_file(tensors, str(path), metadata=md)
