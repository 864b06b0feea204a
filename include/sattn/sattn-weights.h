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
                                          SattnTensorFile **out,
                                          char *err, size_t err_len);

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
 * self-attention on frames and give SATTN_E_SHAPE.
 *
 * Metadata written by examples/export-torch-mha.py, when present, is
 * checked against the arguments: prefix + "num_heads" must equal heads and
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
 *   set; scale, causal, lookback and threads are left as the caller set
 *   them (PyTorch's scaling is scale = 0, i.e. 1/sqrt(d_head)).  Only
 *   written on success.
 * w_out: every field set (absent biases NULL); valid while *owner lives.
 *   Only written on success.
 * owner: receives the handle to free with sattn_mha_weights_free once the
 *   weights have been used (sattn_model_new copies them); NULL on failure.
 */
SattnStatus sattn_mha_weights_from_file (const SattnTensorFile *f,
                                         const char *prefix, size_t d_model,
                                         size_t heads, int add_zero_attn,
                                         SattnConfig *cfg_inout,
                                         SattnWeights *w_out,
                                         SattnMhaWeights **owner,
                                         char *err, size_t err_len);

/* sattn_tensor_file_load followed by sattn_mha_weights_from_file; the file
 * is released before returning.  Messages from the loader are prefixed
 * with the path. */
SattnStatus sattn_mha_weights_load (const char *path, const char *prefix,
                                    size_t d_model, size_t heads,
                                    int add_zero_attn,
                                    SattnConfig *cfg_inout,
                                    SattnWeights *w_out,
                                    SattnMhaWeights **owner,
                                    char *err, size_t err_len);

void sattn_mha_weights_free (SattnMhaWeights *mw);

SATTN_API_END
#ifdef __cplusplus
}
#endif
#endif /* SATTN_WEIGHTS_H */
