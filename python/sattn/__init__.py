# SPDX-License-Identifier: LGPL-2.1-or-later
"""sattn: numerically stable masked multi-head self-attention on streams of
frames, from Python (numpy in, numpy out), over libsattn.

    import numpy as np, sattn
    model = sattn.Model.from_safetensors("attn.safetensors", heads=4)
    stream = sattn.Stream(model, window=64, hop=16)
    rows, info = stream.push(frames)      # frames: (n, d_model) float32
    rows2, info2 = stream.drain()         # the frames still pending
    out = sattn.attend(model, block)      # one window, the reference path

A whole trained model per window (embedding, encoder layers, pooling, a
classification head) is loaded the same way and gives, with
output="classes", the classes' probabilities per window; sattn.nn (which
needs PyTorch, unlike the rest of the package) holds its PyTorch module,
SignalTransformer, and save_safetensors.

The semantics are libsattn's (include/sattn/sattn.h): this module only
converts arrays and turns a status into a SattnError carrying the core's
message.  A Model is immutable and holds no thread count: it may be shared
by any number of streams and threads (attend() included), each Stream with
its own threads=.  A Stream is used by one thread at a time: a call on a
Stream while another thread is inside a call on it raises SattnError
(ctypes releases the GIL, so the two would otherwise run in the core at
once).  The library is the
one meson installed next to this package, or the file named by the
environment variable SATTN_LIBRARY.
"""

import ctypes
import os
import threading
import warnings

import numpy as np

from . import _lib

__all__ = ["SattnError", "SattnTypeError", "SattnValueError",
           "SattnMemoryError", "Model", "Stream", "attend", "ROW_INFO_DTYPE",
           "ROW_CHECK_DTYPE"]

# One record per output row (SattnRowInfo): first input frame it accounts
# for, how many frames, whether it holds a computed result (0: zeros), and
# its window: the frame count it ends at, its usable and masked keys, the
# fully masked (head, query) rows.
ROW_INFO_DTYPE = np.dtype(_lib.SattnRowInfo)
# One record per output row (SattnRowCheck): whether its window is within
# the model's input contract, the SattnRowCheck.outside bits of the ranges
# it left (1 RMS below, 2 RMS above, 4 pooled features), the window's
# input RMS and its pooled row's z (NaN where there is none).
ROW_CHECK_DTYPE = np.dtype(_lib.SattnRowCheck)


class SattnError(Exception):
    """A libsattn failure.

    status: the SattnStatus value (int); status_name: e.g. "SATTN_E_SHAPE";
    message (str(e)): the core's words.  Stream.push under invalid="error"
    adds frame (the index of the frame that stopped it), fault (why:
    "nonfinite" or "overflow") and the rows / info computed before it.
    Where Python would raise a builtin exception the package raises a
    SattnError that is that builtin too (SattnTypeError, SattnValueError,
    SattnMemoryError), so that existing except clauses still work."""

    def __init__(self, status, message=None):
        self.status = int(status)
        self.status_name = _lib.STATUS_NAMES.get(self.status, "unknown")
        if not message:
            message = _status_string(status)
        super().__init__(message)


class SattnTypeError(SattnError, TypeError):
    """A SattnError that is also a TypeError: an argument of a type the
    package does not take (a path that is not a file name, complex
    numbers, an object that is no array of numbers)."""


class SattnValueError(SattnError, ValueError):
    """A SattnError that is also a ValueError: a value Python cannot turn
    into the number or array asked for (e.g. heads="two")."""


class SattnMemoryError(SattnError, MemoryError):
    """A SattnError that is also a MemoryError: no memory for an array the
    call needs (e.g. the float32 copy of a huge broadcast input)."""


def _status_string(status):
    return _lib.sattn_status_string(int(status)).decode()


def _words(check, *args):
    """The English sentence a sattn_*_check function writes (None when it
    finds nothing wrong, e.g. when only memory ran out)."""
    err = ctypes.create_string_buffer(1024)
    if check(*args, err, len(err)) == _lib.OK:
        return None
    return err.value.decode(errors="replace")


def _check(status, message=None):
    if status != _lib.OK:
        raise SattnError(status, message)


def _fptr(a):
    return None if a is None else a.ctypes.data_as(_lib._fp)


def _u8ptr(a):
    return None if a is None else a.ctypes.data_as(_lib._u8p)


def _f32(a, name):
    """a as a C-contiguous float32 array; complex numbers are refused
    (casting would drop the imaginary parts without a word)."""
    try:
        a = np.asarray(a)  # a view when a is an array already
        if np.issubdtype(a.dtype, np.complexfloating):
            raise SattnTypeError(_lib.E_DTYPE, (
                "%s has dtype %s: complex values are refused (pass the real "
                "part, the magnitude or both parts as frames of their own)")
                % (name, a.dtype))
        return np.ascontiguousarray(a, dtype=np.float32)
    except MemoryError as e:
        if isinstance(e, SattnError):
            raise
        shape = getattr(a, "shape", None)
        raise SattnMemoryError(_lib.E_NOMEM, (
            "%s%s: no memory for its float32 copy (%s)")
            % (name, "" if shape is None else " of shape %s" % (shape,), e)) \
            from None
    except TypeError as e:
        if isinstance(e, SattnError):
            raise
        raise SattnTypeError(_lib.E_INVAL, "%s: %s" % (name, e)) from None
    except ValueError as e:
        raise SattnValueError(_lib.E_INVAL, "%s: %s" % (name, e)) from None


def _empty(shape, dtype, what):
    """np.empty, with SattnMemoryError naming what when memory runs out."""
    try:
        return np.empty(shape, dtype=dtype)
    except MemoryError as e:
        raise SattnMemoryError(_lib.E_NOMEM, "no memory for %s of shape %s "
                               "(%s)" % (what, shape, e)) from None


def _mask(a, n, name):
    """A 0/1 mask of n entries as uint8 (nonzero = 1), or None."""
    if a is None:
        return None
    m = np.asarray(a)
    if m.size != n:
        raise SattnError(_lib.E_SHAPE, "%s has %d entries, expected %d"
                         % (name, m.size, n))
    return np.ascontiguousarray(m.reshape(-1) != 0, dtype=np.uint8)


def _pick(table, value, name):
    try:
        return table[value]
    except KeyError:
        raise SattnError(_lib.E_INVAL, "%s=%r: expected one of %s"
                         % (name, value, ", ".join(table))) from None


# ------------------------------------------------------------------ model

_WEIGHT_NAMES = ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
                 "bias_k", "bias_v")


class _Owned:
    """A C handle and the function that frees it: freed once, when the
    last Python reference to this object goes.  Copies of a Model share
    one (copy.copy and copy.deepcopy return it as it is), so no copy can
    outlive the C object or free it twice."""

    __slots__ = ("value", "_free")

    def __init__(self, value, free):
        self.value = value
        self._free = free

    def __del__(self):
        v, self.value = self.value, None
        if v:
            self._free(v)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise SattnError(_lib.E_INVAL, "a libsattn handle cannot be pickled")


class Model:
    """Configuration and weights of one attention, immutable.

    Model(d_model, heads, wq=..., bq=..., ...): weights as numpy arrays in
    PyTorch layout (y = x W^T + b), any of them None (see SattnWeights in
    sattn.h: wq/wk/wv None = identity, a bias None = zero, wo None = no
    output projection):

        wq, wk: (heads*d_head, d_model)   bq, bk, bias_k: heads*d_head
        wv:     (heads*d_value, d_model)  bv, bias_v:     heads*d_value
        wo:     (d_out, heads*d_value)    bo:             d_out

    d_head, d_value and d_out default (0) to what the arrays' shapes say,
    else to sattn.h's defaults (d_model/heads, d_head, heads*d_value).
    scale 0 = 1/sqrt(d_head); causal and lookback as in SattnConfig;
    positions "none", "rope", "rope-interleaved" or "alibi" at the
    absolute frame index, rope_base 0 = 10000.  Weights are copied: the
    arrays may change afterwards.  threads is not a model's any more
    (libsattn.so.1): give it to each Stream; a value here is ignored with
    a DeprecationWarning.
    """

    def __init__(self, d_model, heads, *, wq=None, bq=None, wk=None,
                 bk=None, wv=None, bv=None, wo=None, bo=None, bias_k=None,
                 bias_v=None, add_zero_attn=False, d_head=0, d_value=0,
                 d_out=0, scale=0.0, causal=False, lookback=0, threads=None,
                 positions="none", rope_base=0.0):
        _threads_ignored(threads)
        arrays = {}
        given = dict(wq=wq, bq=bq, wk=wk, bk=bk, wv=wv, bv=bv, wo=wo, bo=bo,
                     bias_k=bias_k, bias_v=bias_v)
        for k in _WEIGHT_NAMES:
            if given[k] is not None:
                arrays[k] = _f32(given[k], k)
        cfg = _config(d_model, heads, d_head, d_value, d_out, scale, causal,
                      lookback, positions, rope_base)
        # The shapes the arrays give fill the dimensions left at 0, so
        # that (heads*d_head, d_model) weights need no d_head argument.
        h = cfg.heads
        if h:
            for dim, names in (("d_head", ("wq", "wk")), ("d_value", ("wv",))):
                for k in names:
                    a = arrays.get(k)
                    if (getattr(cfg, dim) == 0 and a is not None
                            and a.ndim == 2 and a.shape[0] % h == 0):
                        setattr(cfg, dim, a.shape[0] // h)
        if cfg.d_out == 0 and "wo" in arrays and arrays["wo"].ndim == 2:
            cfg.d_out = arrays["wo"].shape[0]
        w = _lib.SattnWeights()
        w.add_zero_attn = 1 if add_zero_attn else 0
        sizes = _weight_shapes(cfg)
        if sizes is None:
            # No size can be derived: the core says why (it refuses the
            # configuration before reading any weight).
            self._new(cfg, None)
            return
        for k, a in arrays.items():
            want = sizes[k]
            # biases: any shape of that many elements (torch's bias_k is
            # (1, 1, E)); matrices: exactly that shape
            if a.shape != want and not (len(want) == 1 and a.size == want[0]):
                raise SattnError(_lib.E_SHAPE, "%s has shape %s, expected %s"
                                 % (k, a.shape, want))
            setattr(w, k, _fptr(a))
        self._new(cfg, w)

    def _new(self, cfg, w):
        st = ctypes.c_int(_lib.E_INVAL)
        self._o = None
        self._source = None
        self.report = None  # what a weights file held (from_safetensors)
        h = _lib.sattn_model_new(ctypes.byref(cfg),
                                 None if w is None else ctypes.byref(w),
                                 ctypes.byref(st))
        if not h:
            # the core's words for what it refused
            raise SattnError(st.value, _words(
                _lib.sattn_model_check, ctypes.byref(cfg),
                None if w is None else ctypes.byref(w)))
        self._adopt(h)

    @property
    def _h(self):
        o = getattr(self, "_o", None)
        return o.value if o is not None else None

    def _adopt(self, h):
        self._o = _Owned(h, _lib.sattn_model_free)
        c = _lib.sattn_model_config(h).contents
        self._cfg = {f: getattr(c, f) for f, _ in c._fields_
                     if f != "struct_size"}

    @classmethod
    def from_safetensors(cls, path, prefix="", heads=0, *, d_model=0,
                         d_head=0, d_value=0, add_zero_attn=False,
                         scale=0.0, causal=None, lookback=0, threads=None,
                         positions=None, rope_base=None, activation=None,
                         norm_first=None, norm_eps=None):
        """The model stored under prefix in a safetensors file, through
        libsattn's one loader (sattn_model_load, sattn-weights.h), which
        finds there one of:
          - a whole model per window (sattn.nn.SignalTransformer's state
            dict: embedding, encoder layers, pooling, head; Model.kind
            "whole");
          - an nn.TransformerEncoderLayer (Model.kind "layer");
          - an attention module in any layout sattn-weights.h lists
            (torch nn.MultiheadAttention, Hugging Face q_proj/k_proj/
            v_proj, BERT, diffusers, LLaMA, W_q/W_k/W_v, fused qkv).
        heads, d_head, d_value 0 = from the file (its num_heads metadata;
        a file that records no head count needs heads= or d_head=);
        d_model 0 = from the file (floats per input frame); a value given
        must agree with the file.  causal, positions ("none", "rope",
        "rope-interleaved", "alibi"), rope_base, activation ("relu",
        "gelu"), norm_first and norm_eps: None = the file's metadata (else
        the core's default); a value given is checked against the
        metadata, and a contradiction is refused.  scale and lookback as in
        SattnConfig (scale 0 = PyTorch's 1/sqrt(d_head)); threads belong
        to each Stream (a value here is ignored with a
        DeprecationWarning).
        add_zero_attn: PyTorch's constructor argument (attention modules).
        Model.layout names the attention layout found, Model.report says
        what the file held.  Failures raise SattnError with the loader's
        message, which names the file."""
        _threads_ignored(threads)
        if _lib.sattn_model_load is None or \
                _lib.sattn_load_options_init is None:
            raise SattnError(_lib.E_INVAL, "libsattn has no sattn_model_load "
                             "(built without the weights reader, GLib and "
                             "json-glib, or older than this package)")
        if positions == "learned":
            raise SattnError(_lib.E_INVAL, "positions='learned': learned "
                             "positions are the file's pos_embed, not an "
                             "option (leave positions None)")
        opt = _lib.SattnLoadOptions()
        _lib.sattn_load_options_init(ctypes.byref(opt))
        c = opt.cfg
        c.d_model = _uint(d_model, "d_model")
        c.heads = _uint(heads, "heads")
        c.d_head = _uint(d_head, "d_head")
        c.d_value = _uint(d_value, "d_value")
        c.scale = _number(scale, "scale", float)
        c.lookback = _uint(lookback, "lookback")
        opt.add_zero_attn = 1 if add_zero_attn else 0
        given = 0
        if causal is not None:
            c.causal = 1 if causal else 0
            given |= _lib.SET_CAUSAL
        if positions is not None:
            c.positions = _pick(_lib.POSITIONS, positions, "positions")
            given |= _lib.SET_POSITIONS
        if rope_base is not None:
            c.rope_base = _number(rope_base, "rope_base", float)
            given |= _lib.SET_ROPE_BASE
        if activation is not None:
            c.activation = _pick(_lib.ACTIVATIONS, activation, "activation")
            given |= _lib.SET_ACTIVATION
        if norm_first is not None:
            c.norm_first = 1 if norm_first else 0
            given |= _lib.SET_NORM_FIRST
        if norm_eps is not None:
            c.norm_eps = _number(norm_eps, "norm_eps", float)
            given |= _lib.SET_NORM_EPS
        opt.set = given
        h = ctypes.c_void_p()
        rep = _lib.SattnLoadReport()
        rep.struct_size = ctypes.sizeof(rep)
        err = ctypes.create_string_buffer(1024)
        st = _lib.sattn_model_load(_path_bytes(path),
                                   _text(prefix or "", "prefix"),
                                   ctypes.byref(opt),
                                   ctypes.byref(h), ctypes.byref(rep), err,
                                   len(err))
        if st != _lib.OK or not h.value:
            if h.value:
                _lib.sattn_model_free(h.value)
            msg = err.value.decode(errors="replace")
            name = os.fsdecode(path)
            if name not in msg:  # say which file, as the loader does
                msg = "'%s': %s" % (name, msg)
            raise SattnError(st if st != _lib.OK else _lib.E_INVAL, msg)
        self = cls.__new__(cls)
        self._o = None
        self._adopt(h.value)
        # how to build it again (pickle): the same file and options
        self._source = (os.fspath(path), prefix or "", dict(
            heads=heads, d_model=d_model, d_head=d_head, d_value=d_value,
            add_zero_attn=add_zero_attn, scale=scale, causal=causal,
            lookback=lookback, positions=positions, rope_base=rope_base,
            activation=activation, norm_first=norm_first,
            norm_eps=norm_eps))
        sources = {v: k for k, v in _lib.SOURCES.items()}
        kinds = {v: k for k, v in _lib.MODEL_KINDS.items()}
        self.report = {f: getattr(rep, f) for f, _ in rep._fields_
                       if f != "struct_size"}
        self.report["kind"] = kinds.get(rep.kind, rep.kind)
        self.report["layout"] = _lib.sattn_layout_name(rep.layout).decode()
        self.report["heads_from"] = sources.get(rep.heads_from,
                                                rep.heads_from)
        return self

    @property
    def layout(self):
        """The weights file's attention layout ("mha", "hf", "seeds", ...;
        None for a model built from arrays)."""
        return self.report["layout"] if self.report else None

    def __copy__(self):
        """A Model is immutable: a copy shares its C model (freed when the
        last copy goes)."""
        c = self.__class__.__new__(self.__class__)
        c.__dict__.update(self.__dict__)
        return c

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        """A Model pickles as what builds it again: the weights file, its
        prefix and the options it was loaded with (the file must still be
        there, and is read again, through the one loader).  A Model built
        from arrays does not pickle (SattnError): save its weights instead
        (sattn.nn.save_safetensors, sattn-export)."""
        if getattr(self, "_source", None) is None:
            raise SattnError(_lib.E_INVAL, (
                "a Model built from arrays cannot be pickled: it holds a C "
                "model; save its weights as a safetensors file and pickle a "
                "Model loaded with Model.from_safetensors (which pickles as "
                "its file, prefix and options)"))
        path, prefix, kw = self._source
        return (_from_source, (path, prefix, kw))

    @property
    def config(self):
        """The configuration with every 0-default resolved (a dict of the
        SattnConfig fields)."""
        return dict(self._cfg)

    d_model = property(lambda self: self._cfg["d_model"],
                       doc="Floats per input frame.")
    heads = property(lambda self: self._cfg["heads"])
    d_out = property(lambda self: _lib.sattn_model_d_out(self._h),
                     doc="Floats per output row of a layer; a whole "
                     "model's encoder width (its pooled row).")
    extra_keys = property(lambda self: _lib.sattn_model_extra_keys(self._h))

    @property
    def kind(self):
        """"layer" (one attention or encoder layer, run incrementally) or
        "whole" (a whole model run on every window)."""
        if _lib.sattn_model_kind is None:
            return "layer"
        k = _lib.sattn_model_kind(self._h)
        return {v: n for n, v in _lib.MODEL_KINDS.items()}.get(k, k)

    @property
    def layers(self):
        """Encoder layers: N for a whole model, 1 for a layer."""
        if _lib.sattn_model_layers is None:
            return 1
        return _lib.sattn_model_layers(self._h)

    @property
    def classes(self):
        """Classes of a whole model's head (0: no head, or a layer)."""
        if _lib.sattn_model_classes is None:
            return 0
        return _lib.sattn_model_classes(self._h)

    @property
    def labels(self):
        """The classes' labels recorded in the file (a list of str), or
        None."""
        n = self.classes
        if not n or _lib.sattn_model_label is None:
            return None
        out = []
        for i in range(n):
            s = _lib.sattn_model_label(self._h, i)
            if s is None:
                return None
            out.append(s.decode(errors="replace"))
        return out

    @property
    def max_window(self):
        """The longest window a whole model accepts (the rows of its
        learned positions); 0 = any."""
        if _lib.sattn_model_max_window is None:
            return 0
        return _lib.sattn_model_max_window(self._h)

    @property
    def contract(self):
        """A whole model's input contract (SattnModelContract): a dict of
        what its file records, among sample_rate, channels, frame_size,
        window, hop, min_probability, input_rms (lo, hi) and pooled_z
        (the largest z seen in training); {} for a layer or a model that
        records none."""
        if _lib.sattn_model_contract is None:
            return {}
        c = _lib.SattnModelContract()
        _lib.sattn_model_contract(self._h, ctypes.byref(c))
        out = {}
        for name, bit in _lib.CONTRACT_BITS.items():
            if not c.recorded & bit:
                continue
            if name == "input_rms":
                out[name] = (c.input_rms_lo, c.input_rms_hi)
            elif name == "pooled_z":
                out[name] = c.pooled_z_max
            else:
                out[name] = getattr(c, name)
        return out

    @property
    def pooling(self):
        """A whole model's pooling, "mean", "last", "max", "cls" or
        "attention" ("mean" for a
        layer)."""
        if _lib.sattn_model_pooling is None:
            return "mean"
        p = _lib.sattn_model_pooling(self._h)
        return {v: n for n, v in _lib.POOLINGS.items()}.get(p, p)

    def metadata(self, key):
        """A whole model's file metadata value for key (without the
        prefix), e.g. "sample_rate", as a str, or None (not recorded; a
        layer)."""
        if _lib.sattn_model_metadata is None:
            return None
        v = _lib.sattn_model_metadata(self._h, _text(key, "key"))
        return None if v is None else v.decode(errors="replace")

    def __repr__(self):
        c = self._cfg
        if self.kind == "whole":
            return ("sattn.Model(whole, d_frame=%d, d_model=%d, layers=%d, "
                    "heads=%d, classes=%d, pooling=%s, causal=%s)"
                    % (c["d_model"], self.d_out, self.layers, c["heads"],
                       self.classes, self.pooling, bool(c["causal"])))
        return ("sattn.Model(d_model=%d, heads=%d, d_head=%d, d_value=%d, "
                "d_out=%d, causal=%s, lookback=%d)"
                % (c["d_model"], c["heads"], c["d_head"], c["d_value"],
                   self.d_out, bool(c["causal"]), c["lookback"]))


def _from_source(path, prefix, kw):
    """Model.__reduce__'s rebuild: the file again through the loader."""
    return Model.from_safetensors(path, prefix, **kw)


def _path_bytes(path):
    try:
        return os.fsencode(path)
    except TypeError:
        raise SattnTypeError(_lib.E_INVAL, (
            "path=%r: expected a file name (str, bytes or os.PathLike), got "
            "%s") % (path, type(path).__name__)) from None


def _text(v, name):
    """A str argument as UTF-8 bytes, with SattnTypeError naming it."""
    if not isinstance(v, str):
        raise SattnTypeError(_lib.E_INVAL, "%s=%r: expected a str, got %s"
                             % (name, v, type(v).__name__))
    return v.encode()


def _number(v, name, kind):
    """int(v) or float(v) (kind), with SattnError naming the argument."""
    try:
        return kind(v)
    except TypeError:
        raise SattnTypeError(_lib.E_INVAL, "%s=%r: expected a number, got %s"
                             % (name, v, type(v).__name__)) from None
    except (ValueError, OverflowError):
        raise SattnValueError(_lib.E_INVAL, "%s=%r: expected %s"
                              % (name, v, "a whole number" if kind is int
                                 else "a number")) from None


def _uint(v, name):
    """A size_t argument: a whole number (16.5 and "16" are refused, not
    rounded), 0 <= v < 2^64 (2^64 would wrap to 0 in C)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        elif isinstance(v, (float, np.floating, str, bytes)):
            raise SattnValueError(_lib.E_INVAL, "%s=%r: expected a whole "
                                  "number" % (name, v))
        else:
            raise SattnTypeError(_lib.E_INVAL, "%s=%r: expected a whole "
                                 "number, got %s"
                                 % (name, v, type(v).__name__))
    v = int(v)
    if v < 0:
        raise SattnError(_lib.E_INVAL, "%s=%d: must be >= 0" % (name, v))
    if v >= 1 << 64:
        raise SattnValueError(_lib.E_INVAL, "%s=%d: must be < 2^64" % (name, v))
    return v


def _threads_ignored(threads):
    if threads is not None:
        warnings.warn("threads= belongs to the stream since libsattn.so.1: "
                      "give it to sattn.Stream (it is ignored here)",
                      DeprecationWarning, stacklevel=3)


def _config(d_model, heads, d_head, d_value, d_out, scale, causal, lookback,
            positions="none", rope_base=0.0):
    c = _lib.SattnConfig()
    c.d_model = _uint(d_model, "d_model")
    c.heads = _uint(heads, "heads")
    c.d_head = _uint(d_head, "d_head")
    c.d_value = _uint(d_value, "d_value")
    c.d_out = _uint(d_out, "d_out")
    c.scale = _number(scale, "scale", float)
    c.causal = 1 if causal else 0
    c.lookback = _uint(lookback, "lookback")
    c.positions = _pick(_lib.POSITIONS, positions, "positions")
    c.rope_base = _number(rope_base, "rope_base", float)
    return c


def _weight_shapes(cfg):
    """The array shapes sattn_model_new will read for cfg, by sattn.h's
    defaults; None when the defaults do not resolve (the core refuses)."""
    e, h = cfg.d_model, cfg.heads
    dh = cfg.d_head
    if dh == 0:
        if h == 0 or e % h:
            return None
        dh = e // h
    dv = cfg.d_value or dh
    dout = cfg.d_out or h * dv
    return {"wq": (h * dh, e), "wk": (h * dh, e), "wv": (h * dv, e),
            "bq": (h * dh,), "bk": (h * dh,), "bv": (h * dv,),
            "wo": (dout, h * dv), "bo": (dout,),
            "bias_k": (h * dh,), "bias_v": (h * dv,)}


# --------------------------------------------------------------- one-shot

def _frames(model, x, name="x"):
    a = _f32(x, name)
    e = model.d_model
    if a.ndim == 1 and a.size == e:
        a = a.reshape(1, e)
    if a.ndim != 2 or a.shape[1] != e:
        raise SattnError(_lib.E_SHAPE, "%s has shape %s, expected (n, %d) "
                         "(d_model = %d)" % (name, a.shape, e, e))
    return a


def _stats_dict(s):
    """SattnStats as a dict, with the core's means over rows:
    mean_max_weight and mean_entropy (normalised, 0..1)."""
    d = {f: getattr(s, f) for f, _ in s._fields_}
    d["mean_max_weight"] = _lib.sattn_stats_mean_max_weight(ctypes.byref(s))
    d["mean_entropy"] = _lib.sattn_stats_mean_entropy(ctypes.byref(s))
    return d


def attend(model, x, key_valid=None, query_valid=None, allow=None, *,
           need_weights=False, need_stats=False):
    """Attention over the rows of x (n × d_model) as one window
    (sattn_attend, single-threaded): returns out (n × d_out, float32);
    with need_weights also the weights (heads × n × (n + extra_keys)), with
    need_stats also a dict of SattnStats, in that order, as a tuple.
    key_valid / query_valid: n entries, 0 = masked; allow: n × n, 0 hides
    key j from query i.  Rows with NaN/Inf are masked keys with zero
    output rows (the frame rule of sattn.h)."""
    a = _frames(model, x)
    n = a.shape[0]
    if n == 0:
        raise SattnError(_lib.E_INVAL, "x has 0 frames: attend computes one "
                         "window of n >= 1 frames")
    d_out = model.d_out
    out = _empty((n, d_out), np.float32, "the output rows")
    wts = None
    if need_weights:
        wts = _empty((model.heads, n, n + model.extra_keys), np.float32,
                     "the weights")
    kv = _mask(key_valid, n, "key_valid")
    qv = _mask(query_valid, n, "query_valid")
    al = _mask(allow, n * n, "allow")
    mask = None
    if kv is not None or qv is not None or al is not None:
        mask = _lib.SattnMask(_u8ptr(kv), _u8ptr(qv), _u8ptr(al))
    st = None
    if need_stats:
        st = _lib.SattnStats()
        _lib.sattn_stats_clear(ctypes.byref(st))
    _check(_lib.sattn_attend(model._h, _fptr(a), n,
                             None if mask is None else ctypes.byref(mask),
                             _fptr(out), _fptr(wts),
                             None if st is None else ctypes.byref(st)))
    res = [out]
    if need_weights:
        res.append(wts)
    if need_stats:
        res.append(_stats_dict(st))
    return res[0] if len(res) == 1 else tuple(res)


# ----------------------------------------------------------------- stream

def _one_thread(method):
    """A Stream method that holds the stream for the time of the call
    (Stream._enter): a second thread's call meanwhile raises SattnError."""
    def call(self, *args, **kw):
        self._enter(method.__name__)
        try:
            return method(self, *args, **kw)
        finally:
            self._leave()
    call.__name__ = method.__name__
    call.__qualname__ = method.__qualname__
    call.__doc__ = method.__doc__
    return call


class Stream:
    """One stream's sliding-window state over a Model (sattn_stream_*).

    window, hop: n >= 1 frames per window, a window every 1 <= hop <= n
    frames (hop None = window).  output: "frames" (a row per input frame),
    "window" (all n rows of a window flattened), "mean" or "last" (a pooled
    row per window), "classes" (a whole model with a head: the classes'
    softmax probabilities per window; Model.labels names them).  A whole
    model takes every output but "frames" ("mean" and "last" give its
    pooled row, "window" its last layer's rows, sattn.h).  start: "pad"
    (compute from the first hop, padding masked) or "wait" (first window
    when n frames are in).  invalid: what a frame with NaN/Inf samples (or
    an overflowing projection) becomes: "mask", "zero" or "error" (push
    raises SattnError).  collect_stats, saturation_threshold (0 = the
    core's default), keep_weights as in SattnStreamConfig.  threads: the
    threads computing this stream's windows (SattnStreamConfig.threads: 1
    = the calling thread only, N > 1 = it and N - 1 workers, 0 = one per
    CPU); the output is byte-identical for every count.  precision:
    "exact" (the default: V and the output projection summed in double,
    error at or below PyTorch float32's) or "fast" (an attention or encoder
    layer's projections, or every linear of a whole model, summed in float
    as PyTorch float32 does: faster, error about PyTorch float32's).  The
    stream keeps its model alive.

    One thread at a time: a Stream may pass from thread to thread, but a
    call on it (push, drain, reset, stats, set_invalid_policy, the
    properties, last_weights) while another thread is inside one raises
    SattnError (status SATTN_E_INVAL) naming both calls and that thread,
    and leaves the stream as it was.  Calls are refused rather than
    queued: frames pushed from several threads at once would enter the
    window in no defined order.  Give each thread its own Stream (they
    may share one Model), or serialise the calls with a lock of your
    own."""

    def __init__(self, model, window, hop=None, output="frames", *,
                 start="pad", invalid="mask", collect_stats=False,
                 saturation_threshold=0.0, keep_weights=False, threads=1,
                 precision="exact"):
        self._o = None
        self._busy = threading.Lock()
        self._user = None  # (thread name, method) inside a call
        sc = _lib.SattnStreamConfig()
        sc.window = _uint(window, "window")
        sc.hop = _uint(window if hop is None else hop, "hop")
        sc.output = _pick(_lib.OUTPUT_MODES, output, "output")
        sc.start = _pick(_lib.START_POLICIES, start, "start")
        sc.invalid_policy = _pick(_lib.INVALID_POLICIES, invalid, "invalid")
        sc.collect_stats = 1 if collect_stats else 0
        sc.saturation_threshold = _number(saturation_threshold,
                                          "saturation_threshold", float)
        sc.keep_weights = 1 if keep_weights else 0
        sc.threads = _number(threads, "threads", int)
        sc.precision = _pick(_lib.PRECISIONS, precision, "precision")
        st = ctypes.c_int(_lib.E_INVAL)
        h = _lib.sattn_stream_new(model._h, ctypes.byref(sc),
                                  ctypes.byref(st))
        if not h:
            raise SattnError(st.value, _words(
                _lib.sattn_stream_config_check, model._h, ctypes.byref(sc)))
        self._o = _Owned(h, _lib.sattn_stream_free)
        # the model's handle lives as long as this stream does
        self.model = model
        self.output = output
        self.row_floats = _lib.sattn_stream_row_floats(h)

    def _enter(self, what):
        """Take the stream for one call of method what, or raise
        SattnError when another thread is inside a call on it."""
        if not self._busy.acquire(blocking=False):
            user = self._user or ("?", "?")
            raise SattnError(_lib.E_INVAL, (
                "Stream.%s from thread %r while thread %r is inside "
                "Stream.%s: a Stream is used by one thread at a time (give "
                "each thread its own Stream, or serialise the calls with a "
                "lock)") % (what, threading.current_thread().name,
                            user[0], user[1]))
        self._user = (threading.current_thread().name, what)

    def _leave(self):
        self._user = None
        self._busy.release()

    @property
    def _h(self):
        o = getattr(self, "_o", None)
        return o.value if o is not None else None

    def __copy__(self):
        raise SattnError(_lib.E_INVAL, (
            "a Stream cannot be copied: it is one stream's state (its window, "
            "schedule and statistics) in C; make another Stream on the same "
            "Model"))

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        raise SattnError(_lib.E_INVAL, (
            "a Stream cannot be pickled: it is one stream's state in C; "
            "pickle its Model (which pickles as its weights file) and make a "
            "new Stream from it"))

    def _rows(self, n_frames):
        m = _lib.sattn_stream_max_rows(self._h, n_frames)
        out = _empty((m, self.row_floats), np.float32, "the output rows")
        info = _empty(m, ROW_INFO_DTYPE, "the row records")
        return out, info

    @_one_thread
    def push(self, frames, valid=None, checks=False):
        """Push frames (n × d_model; one frame may be 1-D) and return
        (rows, info) for every window they complete: rows is k × row_floats
        float32, info a structured array (first, n_frames, valid,
        window_end, valid_keys, masked_keys, fully_masked) of k.
        valid (n entries, may be None): 0 marks a frame invalid (a gap).
        checks=True returns (rows, info, checks) with checks a
        ROW_CHECK_DTYPE array of k: each window against the model's input
        contract (sattn_stream_push_checked)."""
        a = _frames(self.model, frames, "frames")
        n = a.shape[0]
        v = _mask(valid, n, "valid")
        out, info = self._rows(n)
        chk = _empty(out.shape[0], ROW_CHECK_DTYPE, "the row checks")
        n_rows = ctypes.c_size_t(0)
        st = _lib.sattn_stream_push_checked(
            self._h, _fptr(a), n, _u8ptr(v), _fptr(out), out.shape[0],
            info.ctypes.data_as(ctypes.POINTER(_lib.SattnRowInfo)),
            chk.ctypes.data_as(ctypes.POINTER(_lib.SattnRowCheck))
            if checks else None, ctypes.byref(n_rows))
        k = n_rows.value
        if st == _lib.E_NONFINITE:
            idx = ctypes.c_uint64()
            fault = ctypes.c_int()
            _check(_lib.sattn_stream_error_frame(self._h, ctypes.byref(idx),
                                                 ctypes.byref(fault)))
            words = _lib.sattn_frame_fault_string(fault.value).decode()
            e = SattnError(st, "frame %d %s" % (idx.value, words))
            e.frame = idx.value
            e.fault = {v: k for k, v in _lib.FRAME_FAULTS.items()}.get(
                fault.value, fault.value)
            e.rows, e.info = out[:k], info[:k]
            if checks:
                e.checks = chk[:k]
            raise e
        _check(st)
        if checks:
            return out[:k], info[:k], chk[:k]
        return out[:k], info[:k]

    @_one_thread
    def skip(self, n_frames):
        """Advance by n_frames invalid frames (a GAP) in closed form, as
        push of that many frames flagged invalid would (sattn_stream_skip):
        returns (rows, info, skipped) with the rows of the windows that
        still hold usable frames, as push returns them, and skipped a dict
        (first, end, rows) describing the rows of the windows that held
        none (zero rows, valid 0), which are not returned."""
        n = _uint(n_frames, "n_frames")
        if n >= 1 << 64:
            raise SattnValueError(_lib.E_INVAL, "n_frames=%d: must be < 2^64"
                                  % n)
        lead = _lib.sattn_stream_skip_lead(self._h)
        out, info = self._rows(min(n, lead))
        n_rows = ctypes.c_size_t(0)
        sk = _lib.SattnSkipped()
        _check(_lib.sattn_stream_skip(
            self._h, n, _fptr(out), out.shape[0],
            info.ctypes.data_as(ctypes.POINTER(_lib.SattnRowInfo)),
            ctypes.byref(n_rows), ctypes.byref(sk)))
        k = n_rows.value
        return out[:k], info[:k], dict(first=sk.first, end=sk.end,
                                       rows=sk.rows)

    @_one_thread
    def drain(self, checks=False):
        """Rows for every pending frame (end of stream), as push returns
        them (checks=True: with their checks); the stream stays usable."""
        out, info = self._rows(0)
        chk = _empty(out.shape[0], ROW_CHECK_DTYPE, "the row checks")
        n_rows = ctypes.c_size_t(0)
        _check(_lib.sattn_stream_drain_checked(
            self._h, _fptr(out), out.shape[0],
            info.ctypes.data_as(ctypes.POINTER(_lib.SattnRowInfo)),
            chk.ctypes.data_as(ctypes.POINTER(_lib.SattnRowCheck))
            if checks else None, ctypes.byref(n_rows)))
        k = n_rows.value
        if checks:
            return out[:k], info[:k], chk[:k]
        return out[:k], info[:k]

    @_one_thread
    def reset(self):
        """Forget every frame: the next one is frame 0 (statistics kept)."""
        _lib.sattn_stream_reset(self._h)

    @_one_thread
    def stats(self, clear=False):
        """The accumulated SattnStats as a dict; cleared after if clear.
        "overflow_parts" counts the rows of overflow_rows by the part of
        the layer that overflowed (sattn_stream_overflow_parts): a dict
        from "out_proj", "norm1", "linear1", "linear2", "norm2",
        "residual" and "unknown" (whole models) to counts."""
        parts = None
        if _lib.sattn_stream_overflow_parts is not None:
            c = (ctypes.c_uint64 * len(_lib.PARTS))()
            _check(_lib.sattn_stream_overflow_parts(self._h, c, len(c)))
            parts = {k: c[v] for k, v in _lib.PARTS.items()}
        s = _lib.SattnStats()
        _lib.sattn_stream_get_stats(self._h, ctypes.byref(s),
                                    1 if clear else 0)
        d = _stats_dict(s)
        if parts is not None:
            d["overflow_parts"] = parts
        return d

    @_one_thread
    def set_invalid_policy(self, invalid):
        """"mask", "zero" or "error", from the next frame pushed."""
        _check(_lib.sattn_stream_set_invalid_policy(
            self._h, _pick(_lib.INVALID_POLICIES, invalid, "invalid")))

    @property
    @_one_thread
    def frames(self):
        """Frames pushed since creation or the last reset."""
        return _lib.sattn_stream_frames(self._h)

    @property
    @_one_thread
    def frames_to_window(self):
        """Frames to push before the next window is computed."""
        return _lib.sattn_stream_frames_to_window(self._h)

    @property
    @_one_thread
    def pending(self):
        """Frames received but not yet accounted for by an output row."""
        return _lib.sattn_stream_pending(self._h)

    @_one_thread
    def last_weights(self, head=-1):
        """The last window's weights (needs keep_weights): rows × (window +
        extra keys); head -1 averages the heads."""
        r, c = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_lib.sattn_stream_last_weights(self._h, int(head), None,
                                              ctypes.byref(r),
                                              ctypes.byref(c)))
        out = np.empty((r.value, c.value), dtype=np.float32)
        _check(_lib.sattn_stream_last_weights(self._h, int(head), _fptr(out),
                                              ctypes.byref(r),
                                              ctypes.byref(c)))
        return out
