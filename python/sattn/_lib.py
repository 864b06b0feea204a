# SPDX-License-Identifier: LGPL-2.1-or-later
"""ctypes view of libsattn: the structs and functions of include/sattn/sattn.h
and include/sattn/sattn-weights.h, and where the library is found.

The struct mirrors below follow the C declarations field by field;
tests/python/test_layout.py compares their sizes and offsets with the C
compiler's (tests/python/struct-layout.c), so a change of the headers that
is not made here too fails the tests.
"""

import ctypes
import os

try:
    from . import _config  # written by meson at install time
except ImportError:  # the source tree: SATTN_LIBRARY says where it is
    _config = None

# ------------------------------------------------------------------ enums

# SattnStatus
OK = 0
E_INVAL = 1
E_SHAPE = 2
E_NOMEM = 3
E_NONFINITE = 4
E_SPACE = 5
E_IO = 6
E_FORMAT = 7
E_MISSING = 8
E_DTYPE = 9

STATUS_NAMES = {
    OK: "SATTN_OK", E_INVAL: "SATTN_E_INVAL", E_SHAPE: "SATTN_E_SHAPE",
    E_NOMEM: "SATTN_E_NOMEM", E_NONFINITE: "SATTN_E_NONFINITE",
    E_SPACE: "SATTN_E_SPACE", E_IO: "SATTN_E_IO",
    E_FORMAT: "SATTN_E_FORMAT", E_MISSING: "SATTN_E_MISSING",
    E_DTYPE: "SATTN_E_DTYPE",
}

# SattnOutputMode, SattnStartPolicy, SattnInvalidPolicy, SattnFrameFault
OUTPUT_MODES = {"frames": 0, "window": 1, "mean": 2, "last": 3, "classes": 4}
START_POLICIES = {"pad": 0, "wait": 1}
INVALID_POLICIES = {"mask": 0, "zero": 1, "error": 2}
PRECISIONS = {"exact": 0, "fast": 1}
FRAME_FAULTS = {"ok": 0, "flagged": 1, "nonfinite": 2, "overflow": 3}
# SattnPart: where an output row overflowed
PARTS = {"unknown": 0, "out_proj": 1, "norm1": 2, "linear1": 3,
         "linear2": 4, "norm2": 5, "residual": 6}
POSITIONS = {"none": 0, "rope": 1, "rope-interleaved": 2, "alibi": 3}
ACTIVATIONS = {"relu": 0, "gelu": 1}
# SattnModelKind, SattnPooling (whole models)
MODEL_KINDS = {"layer": 0, "whole": 1}
POOLINGS = {"mean": 0, "last": 1, "max": 2, "cls": 3, "attention": 4}
# SattnLoadOptions.set: options the caller chose on purpose (SATTN_SET_*)
SET_ACTIVATION = 1 << 0
SET_NORM_FIRST = 1 << 1
SET_NORM_EPS = 1 << 2
SET_POSITIONS = 1 << 3
SET_ROPE_BASE = 1 << 4
SET_CAUSAL = 1 << 5
# SattnSource (sattn-weights.h): where a value of a weights mapping came from
SOURCES = {"caller": 0, "metadata": 1, "shapes": 2, "default": 3}

# The soname whose structs the mirrors below describe: libsattn.so.1 (1
# moved threads from SattnConfig to SattnStreamConfig and gave the structs
# a caller fills their size, struct_size).
SONAME_MAJOR = 1

# ---------------------------------------------------------------- structs

_fp = ctypes.POINTER(ctypes.c_float)
_u8p = ctypes.POINTER(ctypes.c_uint8)
_size = ctypes.c_size_t


class _Sized(ctypes.Structure):
    """A struct that carries its size (struct_size first, sattn.h): a new
    one says the size of this mirror, the layout of soname 1."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if not self.struct_size:
            self.struct_size = ctypes.sizeof(self)


class SattnConfig(_Sized):
    _fields_ = [
        ("struct_size", _size),
        ("d_model", _size),
        ("heads", _size),
        ("d_head", _size),
        ("d_value", _size),
        ("d_out", _size),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("lookback", _size),
        ("positions", ctypes.c_int),
        ("rope_base", ctypes.c_double),
        ("encoder", ctypes.c_int),
        ("d_ff", _size),
        ("activation", ctypes.c_int),
        ("norm_first", ctypes.c_int),
        ("norm_eps", ctypes.c_double),
    ]


class SattnWeights(_Sized):
    _fields_ = [
        ("struct_size", _size),
        ("wq", _fp), ("bq", _fp),
        ("wk", _fp), ("bk", _fp),
        ("wv", _fp), ("bv", _fp),
        ("wo", _fp), ("bo", _fp),
        ("bias_k", _fp), ("bias_v", _fp),
        ("add_zero_attn", ctypes.c_int),
        ("w1", _fp), ("b1", _fp), ("w2", _fp), ("b2", _fp),
        ("norm1_w", _fp), ("norm1_b", _fp),
        ("norm2_w", _fp), ("norm2_b", _fp),
    ]


class SattnStats(ctypes.Structure):
    _fields_ = [
        ("windows", ctypes.c_uint64),
        ("frames", ctypes.c_uint64),
        ("rows", ctypes.c_uint64),
        ("masked_keys", ctypes.c_uint64),
        ("invalid_frames", ctypes.c_uint64),
        ("overflow_frames", ctypes.c_uint64),
        ("overflow_rows", ctypes.c_uint64),
        ("fully_masked_rows", ctypes.c_uint64),
        ("nonfinite_scores", ctypes.c_uint64),
        ("saturated_rows", ctypes.c_uint64),
        ("score_min", ctypes.c_double),
        ("score_max", ctypes.c_double),
        ("lse_min", ctypes.c_double),
        ("lse_max", ctypes.c_double),
        ("max_weight_sum", ctypes.c_double),
        ("entropy_sum", ctypes.c_double),
    ]


class SattnMask(ctypes.Structure):
    _fields_ = [
        ("key_valid", _u8p),
        ("query_valid", _u8p),
        ("allow", _u8p),
    ]


class SattnStreamConfig(_Sized):
    _fields_ = [
        ("struct_size", _size),
        ("window", _size),
        ("hop", _size),
        ("output", ctypes.c_int),
        ("start", ctypes.c_int),
        ("collect_stats", ctypes.c_int),
        ("saturation_threshold", ctypes.c_float),
        ("keep_weights", ctypes.c_int),
        ("invalid_policy", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("precision", ctypes.c_int),
    ]


class SattnAttnReport(ctypes.Structure):
    _fields_ = [
        ("layout", ctypes.c_int),
        ("heads_from", ctypes.c_int),
        ("d_head_from", ctypes.c_int),
        ("d_value_from", ctypes.c_int),
        ("q_bias", ctypes.c_int),
        ("k_bias", ctypes.c_int),
        ("v_bias", ctypes.c_int),
        ("out_proj", ctypes.c_int),
        ("out_bias", ctypes.c_int),
        ("bias_kv", ctypes.c_int),
    ]


class SattnLoadOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("cfg", SattnConfig),
        ("add_zero_attn", ctypes.c_int),
        ("set", ctypes.c_uint),
    ]


class SattnLoadReport(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("kind", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("heads_from", ctypes.c_int),
        ("layers", _size),
        ("encoder", ctypes.c_int),
        ("out_proj", ctypes.c_int),
        ("classes", _size),
    ]


class SattnRowInfo(ctypes.Structure):
    _fields_ = [
        ("first", ctypes.c_uint64),
        ("n_frames", ctypes.c_uint32),
        ("valid", ctypes.c_uint8),
        ("window_end", ctypes.c_uint64),
        ("valid_keys", ctypes.c_uint32),
        ("masked_keys", ctypes.c_uint32),
        ("fully_masked", ctypes.c_uint32),
    ]


class SattnModelContract(ctypes.Structure):
    _fields_ = [
        ("recorded", ctypes.c_uint32),
        ("sample_rate", ctypes.c_uint32),
        ("channels", ctypes.c_uint32),
        ("frame_size", ctypes.c_uint32),
        ("window", ctypes.c_uint32),
        ("hop", ctypes.c_uint32),
        ("min_probability", ctypes.c_double),
        ("input_rms_lo", ctypes.c_double),
        ("input_rms_hi", ctypes.c_double),
        ("pooled_z_max", ctypes.c_double),
    ]


# SattnModelContract.recorded bits, by field.
CONTRACT_BITS = {"sample_rate": 1, "channels": 2, "frame_size": 4,
                 "window": 8, "hop": 16, "min_probability": 32,
                 "input_rms": 64, "pooled_z": 128}
# SattnRowCheck.outside bits.
OUTSIDE_BITS = {"rms_low": 1, "rms_high": 2, "features": 4}


class SattnRowCheck(ctypes.Structure):
    _fields_ = [
        ("in_contract", ctypes.c_uint8),
        ("outside", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 2),
        ("input_rms", ctypes.c_float),
        ("pooled_z", ctypes.c_float),
    ]


# Every mirrored struct, by its C name (tests/python/test_layout.py).
STRUCTS = {c.__name__: c for c in (SattnConfig, SattnWeights, SattnStats,
                                   SattnMask, SattnStreamConfig,
                                   SattnRowInfo, SattnAttnReport,
                                   SattnLoadOptions, SattnLoadReport,
                                   SattnModelContract, SattnRowCheck)}

# --------------------------------------------------------------- library


def _candidates():
    env = os.environ.get("SATTN_LIBRARY")
    if env:
        return [env]
    names = []
    if _config is not None:
        here = os.path.dirname(os.path.abspath(__file__))
        names.append(os.path.normpath(os.path.join(
            here, _config.LIBDIR_FROM_PACKAGE, _config.SONAME)))
        names.append(os.path.join(_config.LIBDIR, _config.SONAME))
    # the dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache)
    names.append(_config.SONAME if _config is not None
                 else "libsattn.so.%d" % SONAME_MAJOR)
    return names


def _load():
    tried = []
    for name in _candidates():
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append("%s (%s)" % (name, e))
    raise ImportError("sattn: cannot load libsattn; tried " + "; ".join(tried)
                      + ". Set SATTN_LIBRARY to the library's path.")


lib = _load()

_c = ctypes
_P = ctypes.POINTER
_vp = ctypes.c_void_p


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


sattn_status_string = _fn("sattn_status_string", _c.c_char_p, _c.c_int)
sattn_frame_fault_string = _fn("sattn_frame_fault_string", _c.c_char_p,
                               _c.c_int)
sattn_model_new = _fn("sattn_model_new", _vp, _P(SattnConfig),
                      _P(SattnWeights), _P(_c.c_int))
sattn_model_check = _fn("sattn_model_check", _c.c_int, _P(SattnConfig),
                        _P(SattnWeights), _c.c_char_p, _size)
sattn_model_free = _fn("sattn_model_free", None, _vp)
sattn_model_config = _fn("sattn_model_config", _P(SattnConfig), _vp)
sattn_model_d_out = _fn("sattn_model_d_out", _size, _vp)
sattn_model_extra_keys = _fn("sattn_model_extra_keys", _size, _vp)
sattn_stats_clear = _fn("sattn_stats_clear", None, _P(SattnStats))
sattn_stats_mean_max_weight = _fn("sattn_stats_mean_max_weight", _c.c_double,
                                  _P(SattnStats))
sattn_stats_mean_entropy = _fn("sattn_stats_mean_entropy", _c.c_double,
                               _P(SattnStats))
sattn_attend = _fn("sattn_attend", _c.c_int, _vp, _fp, _size, _P(SattnMask),
                   _fp, _fp, _P(SattnStats))
sattn_stream_new = _fn("sattn_stream_new", _vp, _vp, _P(SattnStreamConfig),
                       _P(_c.c_int))
sattn_stream_config_check = _fn("sattn_stream_config_check", _c.c_int, _vp,
                                _P(SattnStreamConfig), _c.c_char_p, _size)
sattn_stream_free = _fn("sattn_stream_free", None, _vp)
sattn_stream_bytes = _fn("sattn_stream_bytes", _size, _vp,
                         _P(SattnStreamConfig))
sattn_stream_row_floats = _fn("sattn_stream_row_floats", _size, _vp)
sattn_stream_max_rows = _fn("sattn_stream_max_rows", _size, _vp, _size)
sattn_stream_frames_to_window = _fn("sattn_stream_frames_to_window",
                                    _c.c_uint64, _vp)
sattn_stream_pending = _fn("sattn_stream_pending", _size, _vp)
sattn_stream_push = _fn("sattn_stream_push", _c.c_int, _vp, _fp, _size, _u8p,
                        _fp, _size, _P(SattnRowInfo), _P(_size))
sattn_stream_drain = _fn("sattn_stream_drain", _c.c_int, _vp, _fp, _size,
                         _P(SattnRowInfo), _P(_size))
sattn_stream_reset = _fn("sattn_stream_reset", None, _vp)


class SattnSkipped(ctypes.Structure):
    _fields_ = [("first", ctypes.c_uint64), ("end", ctypes.c_uint64),
                ("rows", ctypes.c_uint64)]


sattn_stream_skip_lead = _fn("sattn_stream_skip_lead", _c.c_uint64, _vp)
sattn_stream_skip = _fn("sattn_stream_skip", _c.c_int, _vp, _c.c_uint64, _fp,
                        _size, _P(SattnRowInfo), _P(_size), _P(SattnSkipped))
sattn_stream_frames = _fn("sattn_stream_frames", _c.c_uint64, _vp)
sattn_stream_set_invalid_policy = _fn("sattn_stream_set_invalid_policy",
                                      _c.c_int, _vp, _c.c_int)
sattn_stream_error_frame = _fn("sattn_stream_error_frame", _c.c_int, _vp,
                               _P(_c.c_uint64), _P(_c.c_int))
sattn_stream_get_stats = _fn("sattn_stream_get_stats", None, _vp,
                             _P(SattnStats), _c.c_int)
sattn_stream_last_weights = _fn("sattn_stream_last_weights", _c.c_int, _vp,
                                _c.c_int, _fp, _P(_size), _P(_size))


def _optional(name, restype, *argtypes):
    """A function the library may lack (an older libsattn, or one built
    without the weights layer): None then."""
    try:
        return _fn(name, restype, *argtypes)
    except AttributeError:
        return None


# Whole models (sattn.h)
sattn_model_kind = _optional("sattn_model_kind", _c.c_int, _vp)
sattn_model_layers = _optional("sattn_model_layers", _size, _vp)
sattn_model_classes = _optional("sattn_model_classes", _size, _vp)
sattn_model_label = _optional("sattn_model_label", _c.c_char_p, _vp, _size)
sattn_model_max_window = _optional("sattn_model_max_window", _size, _vp)
sattn_model_pooling = _optional("sattn_model_pooling", _c.c_int, _vp)
sattn_model_metadata = _optional("sattn_model_metadata", _c.c_char_p, _vp,
                                 _c.c_char_p)
sattn_model_contract = _optional("sattn_model_contract", None, _vp,
                                 _P(SattnModelContract))
sattn_stream_push_checked = _fn(
    "sattn_stream_push_checked", _c.c_int, _vp, _fp, _size, _u8p, _fp, _size,
    _P(SattnRowInfo), _P(SattnRowCheck), _P(_size))
sattn_stream_drain_checked = _fn(
    "sattn_stream_drain_checked", _c.c_int, _vp, _fp, _size, _P(SattnRowInfo),
    _P(SattnRowCheck), _P(_size))
sattn_stream_overflow_parts = _optional("sattn_stream_overflow_parts",
                                        _c.c_int, _vp, _P(_c.c_uint64),
                                        _size)

# The weights layer is built only with GLib and json-glib: its functions
# are None without it.
sattn_layout_name = _optional("sattn_layout_name", _c.c_char_p, _c.c_int)
sattn_load_options_init = _optional("sattn_load_options_init", None,
                                    _P(SattnLoadOptions))
sattn_model_load = _optional(
    "sattn_model_load", _c.c_int, _c.c_char_p, _c.c_char_p,
    _P(SattnLoadOptions), _P(_vp), _P(SattnLoadReport), _c.c_char_p, _size)
