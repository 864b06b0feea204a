/* sattn — trained weights: safetensors reader and PyTorch
 * nn.MultiheadAttention mapping.
 *
 * Part of libsattn; available when the library was built with the weights
 * layer (GLib and json-glib found, meson option `weights`).  The header
 * itself depends on sattn.h only.
 *
 * The safetensors format: an 8-byte little-endian unsigned header length N,
 * N bytes of UTF-8 JSON, then the data buffer.  The JSON object maps each
 * tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin,
 * end]} (byte offsets into the data buffer, end exclusive) and may hold a
 * "__metadata__" object of string -> string.  Tensors are little-endian,
 * row-major, and must cover the data buffer exactly (no overlap, no gap,
 * nothing after the last one).
 *
 * Typical use, e.g. from an application or the GStreamer element:
 *
 *   SattnConfig cfg = { 0 };
 *   SattnWeights w;
 *   SattnMhaWeights *owner = NULL;
 *   char err[512];
 *   cfg.heads = 4;  cfg.causal = 1;
 *   if (sattn_mha_weights_load ("attn.safetensors", "", 0, cfg.heads, 0,
 *           &cfg, &w, &owner, err, sizeof err) != SATTN_OK) {
 *     fprintf (stderr, "%s\n", err);
 *     ...
 *   }
 *   SattnModel *m = sattn_model_new (&cfg, &w, &status);
 *   sattn_mha_weights_free (owner);   // the model made its own copies
 *
 * Errors are reported as a SattnStatus plus an English message written to
 * the caller's err buffer (err may be NULL; err_len includes the NUL; the
 * message is truncated to fit and always NUL-terminated; it is set to ""
 * on success).  Messages name the file or tensor concerned and, for shape
 * errors, the shape found and the shape expected.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_WEIGHTS_H
#define SATTN_WEIGHTS_H

#include <sattn/sattn.h>

#ifdef __cplusplus
extern "C" {
#endif
SATTN_API_BEGIN

/* Largest JSON header accepted, in bytes (the limit of the reference
 * safetensors implementation). */
#define SATTN_TENSOR_MAX_HEADER ((uint64_t) 100000000)

/* ------------------------------------------------------ safetensors file */

/* A parsed safetensors file.  Every tensor of dtype F32, F16, BF16 or F64
 * is converted to float32 at load time and owned by the handle; tensors of
 * the other safetensors dtypes (BOOL, U8, I8, I16, U16, I32, U32, I64, U64,
 * F8_E4M3, F8_E5M2) are validated and listed but carry no data.  A dtype
 * outside that list fails the load.  Immutable after load: concurrent
 * readers are safe. */
typedef struct SattnTensorFile SattnTensorFile;

/* Read and validate the file at path (a regular file).  Memory used is
 * about three times the file size at most (the file while it is parsed,
 * plus float32 copies of its tensors) plus json-glib's tree of the header
 * (tens of bytes per JSON value), never more whatever the header claims.
 * SATTN_E_IO: cannot open/read, not a regular file.
 * SATTN_E_FORMAT: truncated, header length past the end or over
 *   SATTN_TENSOR_MAX_HEADER, invalid JSON, a header over the parser limits
 *   (nesting deeper than 32, more than 10^6 values, an object with more
 *   than 65536 members or with over 32 keys sharing a g_str_hash value),
 *   bad shape/offsets, offsets out of range, overlapping, leaving gaps, or
 *   not matching the element count, duplicate keys.
 * SATTN_E_DTYPE: a dtype that is not a safetensors dtype.
 * SATTN_E_NOMEM: out of memory.
 * On success *out receives a new handle (free with sattn_tensor_file_free);
 * on failure *out is set to NULL. */
SattnStatus sattn_tensor_file_load (const char *path, SattnTensorFile **out,
                                    char *err, size_t err_len);

/* The same from a memory image of a file (len bytes at data; data may be
 * NULL when len is 0).  data is not referenced after the call returns. */
SattnStatus sattn_tensor_file_load_bytes (const uint8_t *data, size_t len,
                                          SattnTensorFile **out, char *err,
                                          size_t err_len);

void sattn_tensor_file_free (SattnTensorFile *f);

/* Number of tensors, and the name of tensor i (0 <= i < n), in order of
 * their data offsets.  The string is owned by f. */
size_t sattn_tensor_file_n_tensors (const SattnTensorFile *f);
const char *sattn_tensor_file_name (const SattnTensorFile *f, size_t i);

/* The dtype string of the named tensor ("F32", "BF16", ...), or NULL if the
 * file has no tensor of that name.  Owned by f. */
const char *sattn_tensor_file_dtype (const SattnTensorFile *f,
                                     const char *name);

/* The named tensor as float32, row-major, with *ndim dimensions whose sizes
 * are (*shape)[0..*ndim-1] (ndim 0: a scalar, one element).  Returns NULL
 * if there is no such tensor or its dtype is not one of F32, F16, BF16,
 * F64 (use sattn_tensor_file_dtype to tell them apart); ndim and shape are
 * then left untouched.  A tensor with zero elements returns a non-NULL
 * pointer that must not be dereferenced.  ndim and shape may be NULL.
 * Values are returned as converted: NaN/Inf are not checked here.  The
 * memory is owned by f. */
const float *sattn_tensor_file_get (const SattnTensorFile *f, const char *name,
                                    size_t *ndim, const size_t **shape);

/* Number of elements of the named tensor (product of its shape), or 0 when
 * absent.  */
size_t sattn_tensor_file_numel (const SattnTensorFile *f, const char *name);

/* A "__metadata__" string value, or NULL.  Owned by f. */
const char *sattn_tensor_file_metadata (const SattnTensorFile *f,
                                        const char *key);

/* ------------------------------------------ nn.MultiheadAttention mapping */

/* Float arrays for one attention module, owned by this handle; the
 * SattnWeights filled by the functions below point into it. */
typedef struct SattnMhaWeights SattnMhaWeights;

/* Map the state dict of a torch.nn.MultiheadAttention found under prefix
 * onto a SattnConfig and SattnWeights for self-attention on frames of
 * d_model floats with `heads` heads.
 *
 * prefix: prepended to every tensor name, e.g. "encoder.layers.0.self_attn."
 *   (NULL or "" = top level; a '.' is appended when it does not end in one).
 * d_model: the frame size E; 0 = take it from the file.
 * heads: H >= 1; must divide E (a state dict does not record it).
 * add_zero_attn: copied into w_out->add_zero_attn (PyTorch's constructor
 *   argument; not recorded in a state dict either).
 *
 * Tensors used (E = embedding size = d_model):
 *   in_proj_weight  (3E, E): rows [Wq; Wk; Wv]        } exactly one of
 *   q_proj_weight, k_proj_weight, v_proj_weight (E, E) } these two forms
 *   in_proj_bias    (3E)      optional (absent when bias=False)
 *   out_proj.weight (E, E)    required
 *   out_proj.bias   (E)       optional
 *   bias_k, bias_v  (1, 1, E) optional, both or neither (add_bias_kv);
 *                             any shape of E elements whose leading
 *                             dimensions are 1 is accepted.
 * Separate q/k/v weights with kdim or vdim != E cannot serve
 * self-attention on frames and give SATTN_E_SHAPE.  Only this layout, with
 * d_head = E / heads: sattn_attn_weights_from_file (below) reads the other
 * layouts and any head size.
 *
 * Metadata written by examples/export-torch-mha.py, when present, is
 * checked against the arguments: prefix + "num_heads" must equal heads
 * (unless it is 0, which means "not given", for every mapper) and
 * prefix + "add_zero_attn" ("0"/"1") must equal add_zero_attn
 * (SATTN_E_SHAPE / SATTN_E_INVAL otherwise), so that a wrong heads value
 * cannot silently compute something else than the trained module.
 *
 * Every value used is checked to be finite (SATTN_E_NONFINITE names the
 * tensor and the index).  Other errors: SATTN_E_INVAL (NULL arguments,
 * heads 0), SATTN_E_MISSING (tensor absent; the message lists the prefixes
 * in the file that do hold attention weights), SATTN_E_DTYPE (a needed
 * tensor with a non-float dtype), SATTN_E_SHAPE (shape found vs expected),
 * SATTN_E_FORMAT (both weight forms present), SATTN_E_NOMEM.
 *
 * cfg_inout: d_model, heads, d_head (E/H), d_value (E/H) and d_out (E) are
 *   set; scale, causal and lookback are left as the caller set them
 *   (PyTorch's scaling is scale = 0, i.e. 1/sqrt(d_head)).  Only written
 *   on success.
 * w_out: every field set (absent biases NULL, struct_size = sizeof
 *   (SattnWeights) of this version); valid while *owner lives.  Only
 *   written on success.
 * owner: receives the handle to free with sattn_mha_weights_free once the
 *   weights have been used (sattn_model_new copies them); NULL on failure.
 */
SattnStatus sattn_mha_weights_from_file (
    const SattnTensorFile *f, const char *prefix, size_t d_model, size_t heads,
    int add_zero_attn, SattnConfig *cfg_inout, SattnWeights *w_out,
    SattnMhaWeights **owner, char *err, size_t err_len);

/* sattn_tensor_file_load followed by sattn_mha_weights_from_file; the file
 * is released before returning.  Messages from the loader are prefixed
 * with the path. */
SattnStatus sattn_mha_weights_load (const char *path, const char *prefix,
                                    size_t d_model, size_t heads,
                                    int add_zero_attn, SattnConfig *cfg_inout,
                                    SattnWeights *w_out,
                                    SattnMhaWeights **owner, char *err,
                                    size_t err_len);

void sattn_mha_weights_free (SattnMhaWeights *mw);

/* ------------------------------------- nn.TransformerEncoderLayer mapping */

/* Nonzero when the file holds prefix + "linear1.weight" and prefix +
 * "linear2.weight": an encoder layer whose attention is under prefix +
 * "self_attn.". */
int sattn_encoder_layer_present (const SattnTensorFile *f, const char *prefix);

/* The prefix of the attention module that prefix names: prefix +
 * "self_attn." when prefix holds an encoder layer
 * (sattn_encoder_layer_present), else prefix; in both cases with the
 * mappers' rule for prefixes applied (NULL or "" = top level, a '.'
 * appended when it does not end in one), e.g. "enc.0" gives
 * "enc.0.self_attn." for a layer, "attn" gives "attn." for a bare module.
 * Pass it to sattn_attn_weights_from_file, and prefix itself to
 * sattn_options_from_file and sattn_encoder_weights_from_file.  f NULL:
 * the rule for prefixes alone (no layer is looked for).  A new string,
 * released with free (); NULL when out of memory. */
char *sattn_attn_prefix (const SattnTensorFile *f, const char *prefix);

typedef struct SattnLayerWeights SattnLayerWeights;

/* The feed-forward and LayerNorm parts of the nn.TransformerEncoderLayer
 * under prefix (as for sattn_mha_weights_from_file), for frames of
 * cfg_inout->d_model floats (E, required: the attention's mapping sets it):
 *   linear1.weight (F, E), [linear1.bias (F)], linear2.weight (E, F),
 *   [linear2.bias (E)], [norm1.weight, norm1.bias, norm2.weight,
 *   norm2.bias (E)]   (brackets: may be absent; F = feed-forward width)
 * On success sets cfg_inout->encoder = 1 and d_ff = F and the encoder
 * fields of w_inout (the attention fields are left alone); *owner holds
 * the arrays (free with sattn_layer_weights_free after sattn_model_new).
 * Errors as for sattn_mha_weights_from_file, with a message. */
SattnStatus sattn_encoder_weights_from_file (const SattnTensorFile *f,
                                             const char *prefix,
                                             SattnConfig *cfg_inout,
                                             SattnWeights *w_inout,
                                             SattnLayerWeights **owner,
                                             char *err, size_t err_len);

void sattn_layer_weights_free (SattnLayerWeights *lw);

/* Options of SattnConfig that a caller set on purpose (bit mask for
 * sattn_options_from_file). */
enum {
  SATTN_SET_ACTIVATION = 1 << 0,
  SATTN_SET_NORM_FIRST = 1 << 1,
  SATTN_SET_NORM_EPS = 1 << 2,
  SATTN_SET_POSITIONS = 1 << 3,
  SATTN_SET_ROPE_BASE = 1 << 4,
};

/* The options the file's __metadata__ records under prefix (written by
 * examples/export-torch-mha.py): "activation" (relu | gelu), "norm_first"
 * (0 | 1), "norm_eps", "positions" (none | rope | rope-interleaved |
 * alibi), "rope_base".  Each option found becomes cfg_inout's value unless
 * its bit is in `set` (the caller chose it): then the two must agree, and
 * SATTN_E_INVAL with a message naming both values is returned when they do
 * not.  Values the core cannot run (an unknown activation) are
 * SATTN_E_INVAL too.  Absent options leave cfg_inout as it is.  cfg_inout
 * is written only on success. */
SattnStatus sattn_options_from_file (const SattnTensorFile *f,
                                     const char *prefix, unsigned set,
                                     SattnConfig *cfg_inout, char *err,
                                     size_t err_len);

/* ------------------------------------------- attention modules, any layout */

/* The attention layouts recognised under a prefix P (every name below is
 * P + name; a Linear "x" means tensors "x.weight" and, optionally,
 * "x.bias"; brackets mark what may be absent):
 *
 *  SATTN_LAYOUT_MHA        torch nn.MultiheadAttention, packed:
 *                          in_proj_weight, [in_proj_bias], out_proj,
 *                          [bias_k, bias_v]
 *  SATTN_LAYOUT_MHA_SEPARATE  the same with q_proj_weight, k_proj_weight,
 *                          v_proj_weight (kdim/vdim form), [in_proj_bias]
 *  SATTN_LAYOUT_HF         q_proj, k_proj, v_proj, [out_proj or o_proj]
 *                          (Hugging Face style)
 *  SATTN_LAYOUT_BERT       query, key, value, [output.dense]; also
 *                          self.query, self.key, self.value,
 *                          [output.dense] (P = a BertAttention).  Only the
 *                          dense projection is applied, not BERT's
 *                          residual LayerNorm.
 *  SATTN_LAYOUT_DIFFUSERS  to_q, to_k, to_v, [to_out.0]
 *  SATTN_LAYOUT_LLAMA      wq, wk, wv, [wo] (LLaMA reference code)
 *  SATTN_LAYOUT_SEEDS      W_q, W_k, W_v, [W_o] (a QKV module with three
 *                          Linear layers; commonly bias-free, no W_o)
 *  SATTN_LAYOUT_FUSED      qkv, [proj] (timm): qkv.weight holds the rows
 *                          [Wq; Wk; Wv] as in_proj_weight does; in
 *                          thirds unless a head_dim is given (caller or
 *                          metadata), then 2 heads head_dim rows of Q
 *                          and K and the rest V.  in_proj_weight is
 *                          always in thirds.
 *
 * Shapes (E = d_model, Dq = heads * d_head, Dv = heads * d_value):
 *   Q and K weights (Dq, E), V (Dv, E), fused (2 Dq + Dv, E), biases of
 *   the rows' size, output projection (d_out, Dv), its bias (d_out).
 * Q and K must have the same size: keys with fewer heads than queries
 * (grouped-query attention) are refused (SATTN_E_SHAPE). */
typedef enum {
  SATTN_LAYOUT_NONE = 0,
  SATTN_LAYOUT_MHA,
  SATTN_LAYOUT_MHA_SEPARATE,
  SATTN_LAYOUT_HF,
  SATTN_LAYOUT_BERT,
  SATTN_LAYOUT_DIFFUSERS,
  SATTN_LAYOUT_LLAMA,
  SATTN_LAYOUT_SEEDS,
  SATTN_LAYOUT_FUSED,
} SattnLayout;

/* A short static name ("mha", "mha-separate", "hf", "bert", "diffusers",
 * "llama", "seeds", "fused"; "none"), the one written as metadata
 * "<prefix>layout" by examples/export-torch-mha.py; never NULL. */
const char *sattn_layout_name (SattnLayout layout);

/* Where a value of the mapping came from. */
typedef enum {
  SATTN_FROM_CALLER = 0, /* the caller's configuration */
  SATTN_FROM_METADATA,   /* the file's __metadata__ */
  SATTN_FROM_SHAPES,     /* the tensors' shapes */
  SATTN_FROM_DEFAULT,    /* nothing said it: the default (heads = 1) */
} SattnSource;

/* What sattn_attn_weights_from_file found.  Fixed for soname 1: this
 * struct never grows (SattnLoadReport, which carries its size, reports
 * more). */
typedef struct {
  SattnLayout layout;
  SattnSource heads_from;  /* heads: caller, metadata, derived from
                                   the caller's d_head (SHAPES), default */
  SattnSource d_head_from; /* caller, metadata or shapes */
  SattnSource d_value_from;
  int q_bias, k_bias, v_bias; /* nonzero when present */
  int out_proj, out_bias;     /* output projection present, its bias */
  int bias_kv;                /* MultiheadAttention add_bias_kv */
} SattnAttnReport;

/* Map the attention module found under prefix, in any layout above, onto
 * a SattnConfig and SattnWeights for self-attention on frames.  The
 * tensors keep their names: nothing needs renaming.
 *
 * prefix: as for sattn_mha_weights_from_file (NULL or "" = top level; a
 *   '.' is appended when it does not end in one).
 * cfg_inout: on entry d_model, heads, d_head and d_value are requests, 0
 *   meaning "from the file":
 *     d_model  0 = the projections' input size; else must equal it;
 *     heads    0 = metadata "<prefix>num_heads", else
 *              Dq / d_head when d_head is given, else 1;
 *     d_head   0 = metadata "<prefix>head_dim", else Dq / heads;
 *     d_value  0 = metadata "<prefix>value_dim", else Dv / heads.
 *   A size of 0 in the metadata means "not given", as if it were absent.
 *   A request that contradicts the shapes or the metadata is an error
 *   naming both values (SATTN_E_SHAPE).  d_out is always taken from the
 *   file (output projection rows, or Dv without one).  scale, causal
 *   and lookback are left as set.  Written only on success, with
 *   d_model, heads, d_head, d_value and d_out resolved.
 * add_zero_attn: as for sattn_mha_weights_from_file (only the MHA layouts
 *   can record it; checked against metadata "<prefix>add_zero_attn").
 * report: may be NULL; filled on success.
 *
 * Errors: SATTN_E_MISSING when no layout is found under prefix (the
 * message lists the names looked for and the prefixes of the file that
 * hold a known layout) or when a layout is incomplete (naming the absent
 * tensor); SATTN_E_FORMAT when two layouts (or two output projections)
 * are found under one prefix, listing them; SATTN_E_SHAPE, SATTN_E_DTYPE,
 * SATTN_E_NONFINITE, SATTN_E_INVAL, SATTN_E_NOMEM as for
 * sattn_mha_weights_from_file.  *owner as there. */
SattnStatus sattn_attn_weights_from_file (
    const SattnTensorFile *f, const char *prefix, int add_zero_attn,
    SattnConfig *cfg_inout, SattnWeights *w_out, SattnMhaWeights **owner,
    SattnAttnReport *report, char *err, size_t err_len);

/* sattn_tensor_file_load followed by sattn_attn_weights_from_file. */
SattnStatus sattn_attn_weights_load (const char *path, const char *prefix,
                                     int add_zero_attn, SattnConfig *cfg_inout,
                                     SattnWeights *w_out,
                                     SattnMhaWeights **owner,
                                     SattnAttnReport *report, char *err,
                                     size_t err_len);

/* ------------------------------------------------------------ the loader */

/* More options a caller may have chosen (bits of SattnLoadOptions.set,
 * with the SATTN_SET_* bits above). */
enum {
  SATTN_SET_CAUSAL = 1 << 5,
};

/* What a caller asks of the loader.  Initialise with
 * sattn_load_options_init (which sets struct_size, so that a caller built
 * against this header keeps working when later versions add fields at the
 * end).
 *  cfg: d_model (floats per input frame), heads, d_head and d_value are
 *    requests, 0 = from the file (as for sattn_attn_weights_from_file);
 *    scale and lookback are the caller's (a file does not record them,
 *    except a whole model trained with another scale than 1/sqrt(d_head):
 *    its metadata 'scale' is used, and a nonzero cfg.scale must agree);
 *    causal, positions, rope_base, activation, norm_first and norm_eps
 *    are used where the file's metadata is silent and checked against it
 *    where their bit is in `set` (SATTN_SET_*); d_out, encoder and d_ff
 *    come from the file.  cfg.struct_size as described at SattnConfig
 *    (sattn_load_options_init sets it), at most sizeof (SattnConfig):
 *    the struct is held within this one, whose struct_size tells a later
 *    version the caller's layout.  A model holds no thread count: give
 *    it to each stream (SattnStreamConfig.threads).
 *  add_zero_attn: PyTorch's constructor argument (attention layouts
 *    only).
 *  set: SATTN_SET_* bits of the options the caller chose on purpose. */
typedef struct {
  size_t struct_size;
  SattnConfig cfg;
  int add_zero_attn;
  unsigned set;
} SattnLoadOptions;

void sattn_load_options_init (SattnLoadOptions *opt);

/* What the loader found.  struct_size as for SattnLoadOptions (set by the
 * caller, e.g. SattnLoadReport r = { sizeof r }; 0 = the size of this
 * version's struct). */
typedef struct {
  size_t struct_size;
  SattnModelKind kind;
  SattnLayout layout;     /* the (first) attention's layout */
  SattnSource heads_from; /* where the head count came from */
  size_t layers;          /* 1 for a layer, N for a whole model */
  int encoder;            /* the layers are encoder layers */
  int out_proj;           /* the attention has an output projection */
  size_t classes;         /* whole models: the head's classes, 0 none */
} SattnLoadReport;

/* THE loader: the one function that turns a safetensors file into a model.
 * Everything that reads weights (the GStreamer element at READY and in a
 * swap while PLAYING, its model cache, the Python package, the bench and
 * the tools) calls it, so every place accepts the same files and builds
 * the same model from them.
 *
 * prefix (NULL or "" = top level; a '.' is appended when it does not end
 * in one) names one of:
 *  - a whole model: prefix + "embed.weight" and prefix +
 *    "encoder.layers.0.linear1.weight" present.  Tensors (PyTorch names of
 *    python/sattn/nn.py's SignalTransformer):
 *      embed.weight (D, F), [embed.bias (D)]      F = floats per frame
 *      [pos_embed (P, D)]                           learned positions
 *      encoder.layers.{i}.self_attn.*, .linear1.*, .linear2.*, .norm1.*,
 *        .norm2.* (i = 0..N-1, nn.TransformerEncoderLayer)
 *      [encoder.norm.weight, encoder.norm.bias (D)] final LayerNorm
 *      [head.weight (C, D), [head.bias (C)]]         a Linear head, or
 *      [head.0.weight (K, D), [head.0.bias], head.2.weight (C, K),
 *        [head.2.bias]]                             an MLP head
 *    and metadata (prefix + key): num_heads (required unless cfg.heads is
 *    given), norm_first, activation, norm_eps, positions (none | learned |
 *    rope | rope-interleaved | alibi), rope_base, causal, pooling (mean |
 *    last), head_activation (relu | gelu, MLP heads), labels (a JSON array
 *    of C strings);
 *  - an nn.TransformerEncoderLayer (prefix + "linear1.weight" and
 *    "linear2.weight"), its attention under prefix + "self_attn.";
 *  - an attention module in any layout of sattn_attn_weights_from_file.
 * The prefix must hold exactly one of these: a whole model's tensors mixed
 * with another module's directly under prefix is refused (SATTN_E_FORMAT,
 * naming both).
 *
 * The head count must be recorded (metadata num_heads) or given
 * (cfg.heads, or cfg.d_head from which it follows): a file that records
 * neither is refused (SATTN_E_MISSING, naming "heads"), since a state dict
 * does not say how its projections are split and a wrong guess computes
 * something else silently.
 *
 * On success *out is a new model (free with sattn_model_free) and report
 * (may be NULL) says what was found; on failure *out is NULL and err
 * holds an English sentence naming the file, the tensor or metadata and
 * the values concerned. */
SattnStatus sattn_model_load (const char *path, const char *prefix,
                              const SattnLoadOptions *opt, SattnModel **out,
                              SattnLoadReport *report, char *err,
                              size_t err_len);

/* The same from a file already read (sattn_tensor_file_load); f is not
 * referenced after the call. */
SattnStatus sattn_model_load_tensors (const SattnTensorFile *f,
                                      const char *prefix,
                                      const SattnLoadOptions *opt,
                                      SattnModel **out, SattnLoadReport *report,
                                      char *err, size_t err_len);

SATTN_API_END
#ifdef __cplusplus
}
#endif
#endif /* SATTN_WEIGHTS_H */
