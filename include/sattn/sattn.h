/* sattn — numerically stable masked multi-head self-attention for streams.
 *
 * Public C API of libsattn (the numeric core).  Depends on libc only; the
 * implementation uses cblas (OpenBLAS).  No GStreamer.
 *
 * Conventions
 *  - All matrices are row-major float32.
 *  - A "frame" is one row of d_model floats.
 *  - Projections follow PyTorch: y = x W^T + b, with W of shape
 *    (out_features × in_features).  Heads are split exactly as
 *    torch.nn.MultiheadAttention splits them: head h owns columns
 *    [h*d_head, (h+1)*d_head) of the projected Q and K, and
 *    [h*d_value, (h+1)*d_value) of the projected V.
 *  - Handles are opaque.  Every _new has a _free that accepts NULL.
 *  - Arguments are checked before anything is allocated.  The streaming
 *    functions (push / drain / reset / stats) never allocate.
 *
 * Threads
 *  - A SattnModel is immutable after sattn_model_new: any number of streams
 *    and threads may share one (it must outlive its streams).
 *  - A SattnStream is used by one thread at a time (calls on one stream
 *    must not overlap; which thread makes them may change).  Different
 *    streams may be used from different threads at the same time.
 *  - Threads are the stream's: SattnStreamConfig.threads is the number of
 *    threads that compute a stream's windows, so one model serves streams
 *    with any thread counts.  Each stream with threads != 1 starts its own
 *    workers in sattn_stream_new and joins them in sattn_stream_free; the
 *    thread that calls push / drain takes part in the work and returns
 *    when it is done.  Idle workers spin briefly, then sleep.  The work is
 *    cut into a fixed set of tasks (projections in blocks of rows ×
 *    columns, attention in (head, block of query rows) pairs, statistics
 *    merged in a fixed order; with threads >= 2, a push of one hop whose
 *    window has at most 16 query rows runs one task per head that
 *    projects that head's columns of the new frames and then attends), so
 *    output, row infos and statistics are byte-identical for every thread
 *    count and every run.  A run of fewer than 10^5 multiply-adds (a
 *    window of one head of 8 values over 64 keys, say) runs its tasks on
 *    the caller's thread alone: waking the workers would cost more.
 *    SATTN_PAR_MIN in the environment, read by sattn_stream_new, sets
 *    another bound (0: the workers share every run).
 *  - sattn_attend (the one-shot reference path) is single-threaded: it
 *    runs on the caller's thread.
 *  - The library never changes process-wide state: it never calls
 *    openblas_set_num_threads (or any other BLAS setting).  BLAS is used
 *    for large projection blocks only (cblas_sgemm, row-major, when rows,
 *    inputs and outputs are all >= 256), called from the thread that
 *    calls push / drain / attend, under whatever thread setting the
 *    process has chosen for its BLAS; everything else runs in the
 *    library's own register-tiled loops.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_H
#define SATTN_H

#include <stddef.h>
#include <stdint.h>

#include <sattn/sattn-version.h>
#include <sattn/sattn-export.h>

#ifdef __cplusplus
extern "C" {
#endif
SATTN_API_BEGIN

/* ---------------------------------------------------------------- status */

typedef enum {
  SATTN_OK = 0,
  SATTN_E_INVAL,     /* NULL pointer or a value out of range */
  SATTN_E_SHAPE,     /* dimensions that do not fit together */
  SATTN_E_NOMEM,     /* allocation failed or size overflows */
  SATTN_E_NONFINITE, /* NaN/Inf where it is not allowed (weights; a
                         frame under SATTN_INVALID_ERROR) */
  SATTN_E_SPACE,     /* caller's output buffer is too small */
  SATTN_E_IO,        /* a file cannot be opened or read */
  SATTN_E_FORMAT,    /* a malformed weights file */
  SATTN_E_MISSING,   /* a required tensor is absent from a weights file */
  SATTN_E_DTYPE,     /* a tensor dtype that is not supported */
} SattnStatus;

/* A static, human-readable English description; never NULL. */
const char *sattn_status_string (SattnStatus st);

/* ----------------------------------------------------------------- model */

/* Structs the caller fills (SattnConfig, SattnWeights, SattnStreamConfig)
 * carry their size in their first member:
 *
 *   size_t struct_size;  sizeof the struct the caller was compiled with;
 *                        0 = the size of this version's struct (soname 1),
 *                        so `= { 0 }` initialisers stay valid; a later
 *                        version reads only the fields that fit in
 *                        struct_size and gives the others their defaults.
 *
 * A struct_size that is neither 0 nor at least this version's struct (up
 * to the end of its last field) is refused with SATTN_E_INVAL and words.
 * A larger one (a caller built against a later version) is accepted when
 * the bytes this version does not know are all zero (the caller asked for
 * nothing this version lacks), refused with words otherwise.
 *
 * Structs the library fills (SattnStats, SattnRowInfo, SattnSkipped) never
 * grow in soname 1: new figures come through new functions. */

/* Positional encodings (SattnConfig.positions).  p is a frame's absolute
 * index, i a query's and j a key's.
 *  ROPE:             rotary, the half-split layout of GPT-NeoX / LLaMA
 *                    (rotate_half): per head, pair (k, k + d_head/2) of Q
 *                    and K is rotated by the angle p * theta_k after the
 *                    projection and its bias.  d_head must be even.
 *  ROPE_INTERLEAVED: the same on pairs (2k, 2k+1) (RoFormer, GPT-J).
 *  ALIBI:            a bias -slope_h * (i - j) added to the scaled score
 *                    with causal, -slope_h * |i - j| without; slopes of
 *                    Press et al.: 2^(-8(h+1)/H) for H a power of two, else
 *                    those of the next lower power of two followed by every
 *                    other slope of twice that power.
 * Angles keep their precision at any frame index: theta_k is computed in
 * long double (64-bit significand on x86-64) and held as the sum of two
 * doubles, p * theta_k is formed exactly as hi + lo (fma), only hi goes
 * through sin / cos (whose argument reduction is exact) and lo enters to
 * first order; at frame 1e9 the angle error is about 1e-10 rad, far below
 * float rounding, so scores there are as accurate as at frame 0.  Keys are
 * rotated once, when their frame is stored. */
/* Feed-forward activation of an encoder layer (SattnConfig.activation). */
typedef enum {
  SATTN_ACTIVATION_RELU = 0,
  SATTN_ACTIVATION_GELU, /* exact: x/2 (1 + erf (x / sqrt 2)) */
} SattnActivation;

typedef enum {
  SATTN_POSITIONS_NONE = 0,
  SATTN_POSITIONS_ROPE,
  SATTN_POSITIONS_ROPE_INTERLEAVED,
  SATTN_POSITIONS_ALIBI,
} SattnPositions;

typedef struct {
  size_t struct_size; /* sizeof (SattnConfig) or 0; see above */
  size_t d_model;     /* E: floats per input frame, >= 1 */
  size_t heads;       /* H >= 1 */
  size_t d_head;      /* per-head Q/K size; 0 = d_model / heads (must divide) */
  size_t d_value;     /* per-head V size; 0 = d_head */
  size_t d_out;       /* output row size: the rows of wo, required when
                       wo is given; 0 without wo = heads * d_value */
  float scale;        /* score scale; 0 = 1/sqrt(d_head).  1 = "unscaled".
                       Must be finite and >= 0. */
  int causal;         /* nonzero: a query sees keys at or before its frame
                       (bottom-right aligned in the one-shot path) */
  size_t lookback;    /* > 0: a query at frame i sees keys j with i - j <=
                       lookback (keys after i are limited by causal only);
                       0 = the whole window */
  /* Positional encoding at the absolute frame index (frames since the
   * stream started or was reset, see sattn_stream_reset_at; rows 0..n-1 in
   * sattn_attend).  Not allowed with bias_k / add_zero_attn (extra keys
   * have no position): sattn_model_new fails with SATTN_E_INVAL. */
  SattnPositions positions;
  double rope_base; /* RoPE: theta_k = rope_base^(-2k/d_head); 0 = 10000.
                       Must be finite and > 1 (or 0). */
  /* Encoder layer (PyTorch nn.TransformerEncoderLayer) around the
   * attention, per output row, when encoder != 0 (needs w1 and w2 in
   * SattnWeights and d_out == d_model):
   *   post-norm (default): y = norm1 (x + SA (x)); out = norm2 (y + FF (y))
   *   pre-norm (norm_first): y = x + SA (norm1 (x)); out = y + FF (norm2 (y))
   *   FF (y) = linear2 (act (linear1 (y))),  norm = LayerNorm (eps).
   * x is the row's query frame; pooled outputs pool the layer's rows.
   * Precision: the Q/K/V and output projections, the residual sums,
   * LayerNorm and the feed-forward sums run in double; projected rows, a
   * LayerNorm output that feeds linear1 or the attention, the hidden
   * units after act and the layer's output are rounded to float once
   * each.  Attention-only models sum the V and output projections in
   * double (Q and K too with RoPE), each entry rounded to float once, and
   * Q and K otherwise in float.  The model holds the weights it sums in
   * double as doubles too (8 more bytes per weight). */
  int encoder;
  size_t d_ff; /* rows of linear1 (the feed-forward width), >= 1 */
  SattnActivation activation;
  int norm_first;
  double norm_eps; /* LayerNorm eps; 0 = 1e-5.  Must be finite, >= 0. */
} SattnConfig;

/* Weights in PyTorch layout.  Every pointer may be NULL:
 *  wq/wk/wv NULL = identity projection (needs heads*d_head == d_model, resp.
 *  heads*d_value == d_model); a bias NULL = zero bias; wo NULL = no output
 *  projection (bo is then still added if given, needs d_out == heads*d_value).
 *  bias_k / bias_v (PyTorch add_bias_kv) append one always-valid extra key /
 *  value; add_zero_attn appends one always-valid all-zero key and value after
 *  that (as PyTorch does).  Extra keys are never hidden by causal / lookback.
 *
 *  wq: (heads*d_head)  × d_model     bq: heads*d_head
 *  wk: (heads*d_head)  × d_model     bk: heads*d_head
 *  wv: (heads*d_value) × d_model     bv: heads*d_value
 *  wo: d_out × (heads*d_value)       bo: d_out
 *  bias_k: heads*d_head              bias_v: heads*d_value (both or neither)
 *
 * A row whose keys are all masked has a zero attention result; with an
 * output projection that row's output is then bo (zero without bo).
 *
 * sattn_model_new copies everything it needs; the caller keeps ownership.
 */
typedef struct {
  size_t struct_size; /* sizeof (SattnWeights) or 0; see SattnConfig */
  const float *wq, *bq;
  const float *wk, *bk;
  const float *wv, *bv;
  const float *wo, *bo;
  const float *bias_k, *bias_v;
  int add_zero_attn;
  /* Encoder layer parts (SattnConfig.encoder), PyTorch layout:
   *  w1: d_ff × d_model   b1: d_ff       (linear1; w1 required)
   *  w2: d_model × d_ff   b2: d_model    (linear2; w2 required)
   *  norm1_w, norm1_b, norm2_w, norm2_b: d_model (LayerNorm weight and
   *  bias; NULL = 1 and 0).  Ignored without encoder. */
  const float *w1, *b1, *w2, *b2;
  const float *norm1_w, *norm1_b, *norm2_w, *norm2_b;
} SattnWeights;

typedef struct SattnModel SattnModel;

/* w == NULL: identity projections.  Non-finite weights -> SATTN_E_NONFINITE.
 * On failure returns NULL and sets *status (status may be NULL);
 * sattn_model_check says why in words. */
SattnModel *sattn_model_new (const SattnConfig *cfg, const SattnWeights *w,
                             SattnStatus *status);

/* Whether sattn_model_new (cfg, w) accepts this configuration and these
 * weights, without allocating anything: the same rules, written once.
 * Returns the status sattn_model_new would fail with (SATTN_OK when it
 * would only fail for want of memory) and, when it is not SATTN_OK,
 * writes into err (err_len bytes, NUL-terminated, cut to fit; err may be
 * NULL) an English sentence that names the offending values and values
 * that work, e.g. "heads=3 does not divide d_model=8; heads values that
 * work: 1, 2, 4, 8".  Field names are SattnConfig's.  The rules:
 *  - struct_size as described at SattnConfig (for cfg and w);
 *  - d_model >= 1, heads >= 1;
 *  - scale finite, and 0 (the default) or a normal float (>= FLT_MIN);
 *  - d_head = 0 needs heads to divide d_model;
 *  - identity projections (wq / wk / wv NULL) need heads * d_head (resp.
 *    heads * d_value) == d_model;
 *  - d_out: required with wo, heads * d_value (or 0) without;
 *  - bias_k and bias_v both or neither; every weight finite (the message
 *    names the tensor and the index of the first NaN / Inf);
 *  - positions: none with bias_k / add_zero_attn; RoPE needs an even
 *    d_head and rope_base 0 or > 1;
 *  - encoder: w1 and w2 given (SATTN_E_MISSING otherwise), d_ff >= 1,
 *    activation relu or gelu, norm_eps finite >= 0, d_out == d_model. */
SattnStatus sattn_model_check (const SattnConfig *cfg, const SattnWeights *w,
                               char *err, size_t err_len);
void sattn_model_free (SattnModel *m);

/* ALiBi slope of head h of H (Press et al.; see SattnPositions). */
double sattn_alibi_slope (size_t h, size_t heads);

/* The configuration with every 0-default resolved (struct_size =
 * sizeof (SattnConfig) of this version). */
const SattnConfig *sattn_model_config (const SattnModel *m);
size_t sattn_model_d_out (const SattnModel *m);
/* Number of always-valid extra keys (bias_k, zero-attn): 0, 1 or 2. */
size_t sattn_model_extra_keys (const SattnModel *m);

/* ---------------------------------------------------------- whole models */

/* What a model computes.
 *  LAYER: one attention (optionally with its encoder-layer parts), run
 *         incrementally on a stream: each frame projected once, each hop's
 *         new rows computed (any output mode).
 *  WHOLE: a whole trained model run on every window as one sequence:
 *         [embed] -> layers[N] -> [final norm] -> [pooling] -> [head], the
 *         state dict of python/sattn/nn.py's SignalTransformer.  Built by
 *         the loader only (sattn_model_load, sattn-weights.h).  For such a
 *         model sattn_model_config describes its first layer, except that
 *         d_model is the input frame size (floats per frame, the embedding's
 *         input) and d_out the encoder's width (the pooled row); outputs are
 *         SATTN_OUTPUT_CLASSES (needs a head; pooled as the model records),
 *         MEAN (the mean of the window's usable rows after the final norm),
 *         LAST (the row of its last usable frame) and WINDOW (the last
 *         layer's rows after the final norm, masked rows zeros); FRAMES is
 *         refused (a window has no row per new frame: every row depends on
 *         the whole window).
 * The windows of a whole model due in one push run together as blocks;
 * with SattnStreamConfig.threads the workers share their rows and
 * windows, and the output bytes are the same for every thread count and
 * however the frames are cut into pushes.  Its statistics
 * (collect_stats) count windows, frames, masked keys and unusable frames
 * as a layer's do, and the softmax rows of every layer (rows, saturation,
 * entropy, score ranges: N layers × heads × window rows per window);
 * keep_weights keeps the last layer's weights (heads × window × window).
 * A frame whose embedding overflows float32 is unusable
 * (SATTN_FRAME_OVERFLOW); a row that becomes unusable inside the model (a
 * layer's output overflows) is dropped from the pooling and counted in
 * overflow_rows. */
typedef enum {
  SATTN_MODEL_LAYER = 0,
  SATTN_MODEL_WHOLE,
} SattnModelKind;

/* Pooling of a whole model's rows into one (masked rows left out; a
 * model's CLS row is pooled by CLS only). */
typedef enum {
  SATTN_POOLING_MEAN = 0,  /* mean of the window's usable rows */
  SATTN_POOLING_LAST,      /* the row of the window's last usable frame */
  SATTN_POOLING_MAX,       /* per feature, the largest over usable rows */
  SATTN_POOLING_CLS,       /* the row of the model's CLS token */
  SATTN_POOLING_ATTENTION, /* sum_i w_i h_i, w = softmax over the usable
                              rows of (pool.weight . h_i + pool.bias) */
} SattnPooling;

SattnModelKind sattn_model_kind (const SattnModel *m);
/* Encoder layers: N for a whole model, 1 for a layer. */
size_t sattn_model_layers (const SattnModel *m);
/* Classes of the head (the rows of its last Linear); 0 without a head
 * (and for a layer). */
size_t sattn_model_classes (const SattnModel *m);
/* The label of class i from the file's metadata, or NULL (none recorded,
 * i out of range).  Owned by m. */
const char *sattn_model_label (const SattnModel *m, size_t i);
/* The longest window a whole model accepts: the rows of its learned
 * positions (pos_embed); 0 = any window (no learned positions, a layer). */
size_t sattn_model_max_window (const SattnModel *m);
/* A whole model's pooling (SATTN_POOLING_MEAN for a layer). */
SattnPooling sattn_model_pooling (const SattnModel *m);
/* A whole model's file metadata: the value recorded under the model's
 * prefix for key (given without the prefix), e.g. "sample_rate",
 * "channels", "frame_size" as the project's training scripts record
 * them, or NULL (not recorded; a layer).  Owned by m. */
const char *sattn_model_metadata (const SattnModel *m, const char *key);

/* A whole model's input contract: what it was trained on, as its file
 * records it (docs/models.md).  Filled by the library; fixed for soname
 * 1 (it never grows).  A field is meaningful when its bit is in
 * `recorded`; the others are 0. */
enum {
  SATTN_CONTRACT_SAMPLE_RATE = 1 << 0,
  SATTN_CONTRACT_CHANNELS = 1 << 1,
  SATTN_CONTRACT_FRAME_SIZE = 1 << 2,
  SATTN_CONTRACT_WINDOW = 1 << 3,
  SATTN_CONTRACT_HOP = 1 << 4,
  SATTN_CONTRACT_MIN_PROBABILITY = 1 << 5,
  SATTN_CONTRACT_INPUT_RMS = 1 << 6, /* input_rms_lo / hi */
  SATTN_CONTRACT_POOLED_Z = 1 << 7,  /* pooled_z_max */
};
typedef struct {
  uint32_t recorded;      /* SATTN_CONTRACT_* bits */
  uint32_t sample_rate;   /* Hz */
  uint32_t channels;      /* interleaved channels */
  uint32_t frame_size;    /* samples per channel per frame */
  uint32_t window;        /* frames per window */
  uint32_t hop;           /* frames between windows (the default) */
  double min_probability; /* below it a decision is "unknown" */
  double input_rms_lo;    /* a window's input RMS seen in training: */
  double input_rms_hi;    /*   [lo, hi] (see SattnRowCheck) */
  double pooled_z_max;    /* the largest pooled-row z seen in training */
} SattnModelContract;

/* The contract of a whole model into *out (all zeros for a layer, or a
 * model that records none). */
void sattn_model_contract (const SattnModel *m, SattnModelContract *out);

/* ----------------------------------------------------------------- stats */

/* Numeric health, accumulated over (head, query row) pairs; a "row" below
 * is one head's softmax row.  Filled by sattn_attend and by streams created
 * with collect_stats; a stream counts invalid_frames, overflow_frames and
 * overflow_rows even without collect_stats (they cost nothing), so a caller
 * can always tell why frames or rows were unusable.
 * Fixed for soname 1: this struct never grows (new figures come through
 * new functions), so callers allocate it with sizeof. */
typedef struct {
  uint64_t windows;            /* windows computed */
  uint64_t frames;             /* frames pushed (stream) / rows given */
  uint64_t rows;               /* (head, query) softmax rows computed */
  uint64_t masked_keys;        /* sum over windows of key positions that are
                                  invalid (padding, flagged, non-finite) */
  uint64_t invalid_frames;     /* frames unusable for any reason (see
                                  SattnFrameFault): flagged invalid,
                                  NaN/Inf samples, or a Q/K/V projection
                                  that overflows float32; whatever the
                                  invalid policy then did with them */
  uint64_t overflow_frames;    /* of those: finite frames whose Q/K/V
                                  projection overflowed float32 */
  uint64_t overflow_rows;      /* output rows (one per query frame) that
                                  overflowed float32 after the attention
                                  (output projection, or an encoder
                                  layer's parts: sattn_stream_overflow_parts
                                  says which): written as zeros, flagged
                                  not valid, under every invalid policy */
  uint64_t fully_masked_rows;  /* rows with every key masked (output 0) */
  uint64_t nonfinite_scores;   /* NaN scores (masked) and +-Inf scores */
  uint64_t saturated_rows;     /* rows with >= 2 visible keys whose max
                                  weight > threshold */
  double score_min, score_max; /* over finite unmasked scaled scores;
                                  +inf / -inf when none seen */
  double lse_min, lse_max;     /* log-sum-exp of each row's scaled scores */
  double max_weight_sum;       /* sum over rows of the row's max weight */
  double entropy_sum;          /* sum over rows of entropy / log(valid keys)
                                  (rows with 1 valid key count as 0) */
} SattnStats;

/* Empty statistics: counts 0, score / lse min +inf and max -inf. */
void sattn_stats_clear (SattnStats *st);

/* Add the statistics `from` (of other windows, e.g. one window taken with
 * sattn_stream_get_stats (s, &w, 1)) into `into`: counts and sums added,
 * minima and maxima combined.  Merging parts in a fixed order gives the
 * same bytes every run; into == from is not allowed.  NULL: nothing. */
void sattn_stats_merge (SattnStats *into, const SattnStats *from);

/* The mean over rows of the row's largest weight (max_weight_sum / rows),
 * and of the normalised entropy (entropy_sum / rows): 1 / visible keys and
 * 1 for uniform rows, 1 and 0 for saturated ones.  0 without rows (or st
 * NULL). */
double sattn_stats_mean_max_weight (const SattnStats *st);
double sattn_stats_mean_entropy (const SattnStats *st);

/* -------------------------------------------------------- overflow parts */

/* The part of a layer where an output row overflowed float32 (the rows
 * SattnStats.overflow_rows counts), in the order a layer computes them.
 * An encoder layer (PyTorch nn.TransformerEncoderLayer) computes its parts
 * in double and rounds to float where PyTorch's float32 would hold them:
 * a part overflows when a value it gives exceeds the float range there.
 * More parts may come in later versions (SATTN_PART_COUNT grows). */
typedef enum {
  SATTN_PART_UNKNOWN = 0, /* not told apart (the layers of a whole model
                              per window) */
  SATTN_PART_OUT_PROJ,    /* the attention's output projection */
  SATTN_PART_NORM1,       /* post-norm: LayerNorm norm1 after the attention
                              (pre-norm's norm1 feeds the Q/K/V projections:
                              a frame fault, SATTN_FRAME_OVERFLOW) */
  SATTN_PART_LINEAR1,     /* the feed-forward's first Linear (linear1):
                              its hidden row */
  SATTN_PART_LINEAR2,     /* the feed-forward's second Linear (linear2) */
  SATTN_PART_NORM2,       /* LayerNorm norm2 (pre-norm: its output enters
                              linear1; post-norm: the layer's output) */
  SATTN_PART_RESIDUAL,    /* pre-norm: the residual sum (input + attention
                              + feed-forward) while each term fits */
  SATTN_PART_COUNT        /* parts this version tells apart */
} SattnPart;

/* A static English name of a part ("the output projection", "the
 * feed-forward's linear2", ...), to precede "overflows"; never NULL. */
const char *sattn_part_string (SattnPart p);

/* --------------------------------------------------------- frame faults */

/* Why a frame is unusable.  One rule, the same for streams and
 * sattn_attend, checked in this order:
 *  - FLAGGED:   the caller marked it invalid (valid[i] == 0 in a push, a
 *               GAP; key_valid[j] == 0 in sattn_attend);
 *  - NONFINITE: one of its samples is NaN or +-Inf;
 *  - OVERFLOW:  its samples are finite but its Q, K or V projection
 *               overflows float32 (trained weights with large values, or
 *               large inputs): NaN/Inf in a projection.
 * An unusable frame is never a key, and the row of its query is zeros,
 * flagged not valid -- except under SATTN_INVALID_ZERO (below). */
typedef enum {
  SATTN_FRAME_OK = 0,
  SATTN_FRAME_FLAGGED,
  SATTN_FRAME_NONFINITE,
  SATTN_FRAME_OVERFLOW,
} SattnFrameFault;

/* A static English description of a fault ("has NaN or Inf samples", ...),
 * to follow "frame N"; never NULL. */
const char *sattn_frame_fault_string (SattnFrameFault f);

/* ------------------------------------------------------------- one-shot */

/* The masks of a one-shot block.  Fixed for soname 1: this struct never
 * grows (other masks would come through new functions). */
typedef struct {
  const uint8_t *key_valid;   /* n: 0 = key masked; NULL = all valid */
  const uint8_t *query_valid; /* n: 0 = row output is zeros; NULL = all */
  const uint8_t *allow;       /* n × n: allow[i*n+j] == 0 hides key j from
                                 query i; NULL = no such mask */
} SattnMask;

/* Attention over a block x (n × d_model) as one window: queries and keys
 * are the n rows (plus the model's extra keys), the model's causal /
 * lookback apply, combined with mask (may be NULL).
 *   out:     n × d_out (required)
 *   weights: heads × n × (n + extra_keys), may be NULL
 *   stats:   accumulated into when non-NULL (call sattn_stats_clear first)
 * Rows are checked with the frame rule above and masked when unusable
 * (SATTN_INVALID_MASK): a row with key_valid[j] == 0 is a masked key (its
 * query row follows query_valid); a row with NaN/Inf samples or an
 * overflowing projection is a masked key and its output row is zeros.
 * Each unusable row counts once in invalid_frames.  A row whose output
 * projection overflows is zeros and counted in overflow_rows.  This is the
 * reference path: it allocates scratch per call. */
SattnStatus sattn_attend (const SattnModel *m, const float *x, size_t n,
                          const SattnMask *mask, float *out, float *weights,
                          SattnStats *stats);

/* ------------------------------------------------------------ streaming */

typedef enum {
  SATTN_OUTPUT_FRAMES = 0, /* one row per input frame (the hop's new rows) */
  SATTN_OUTPUT_WINDOW,     /* one row per window: all n rows flattened */
  SATTN_OUTPUT_MEAN,       /* one row per window: mean of valid rows */
  SATTN_OUTPUT_LAST,       /* one row per window: the last frame's row */
  SATTN_OUTPUT_CLASSES,    /* whole models with a head: one row per window,
                              the classes' softmax probabilities */
} SattnOutputMode;

typedef enum {
  SATTN_START_PAD = 0, /* compute from the first hop, padding masked */
  SATTN_START_WAIT,    /* first window when n frames are in */
} SattnStartPolicy;

/* What a stream does with a frame that is unusable because of its data
 * (SATTN_FRAME_NONFINITE or SATTN_FRAME_OVERFLOW).  Frames flagged invalid
 * by the caller (GAPs) are masked under every policy: they are not bad
 * data.  The policy is about input frames only: an output row that
 * overflows after the attention (the output projection, or an encoder
 * layer's LayerNorm, feed-forward or residual sum; see SattnPart) is
 * zeros, flagged not valid and counted in overflow_rows under every
 * policy, SATTN_INVALID_ERROR included (the push goes on). */
typedef enum {
  SATTN_INVALID_MASK = 0, /* never a key; its query row is zeros, flagged
                             not valid */
  SATTN_INVALID_ZERO,     /* replaced by an all-zero frame, which is valid
                             (projected to the biases) */
  SATTN_INVALID_ERROR,    /* sattn_stream_push stops before it and returns
                             SATTN_E_NONFINITE; see
                             sattn_stream_error_frame */
} SattnInvalidPolicy;

/* How a stream of an attention or encoder layer sums its projections
 * (SattnStreamConfig.precision).
 *  EXACT (default): as SattnConfig says: V and the output projection
 *    (and Q and K in encoder layers and with RoPE) sum in double, each
 *    entry rounded to float once, which keeps the error at or below
 *    PyTorch float32's.
 *  FAST: the Q, K, V and output projections sum in float, as PyTorch
 *    float32 does; the model's float weights are used, its double copies
 *    are not read.  About 13% less time per hop on W1 (64 channels, 4
 *    heads, window 256, hop 16); the error is then about PyTorch float32's
 *    (0.9 to 1.8 times it in docs/performance.md's draws) instead
 *    of at or below it.  The feed-forward, LayerNorm, softmax and output
 *    normalisation are unchanged, and the bytes still depend neither on
 *    how frames come in pushes nor on the thread count.
 *    For a whole model (SATTN_MODEL_WHOLE) FAST sums every linear in
 *    float, as PyTorch float32 does: the embedding or conv stem, each
 *    layer's Q, K, V and output projections and feed-forward, and the
 *    head; the residuals, activations and LayerNorms are float too (the
 *    pooling and the head's softmax stay in double).  About 1.7 times the
 *    windows per CPU second of EXACT on the shipped recogniser; the error
 *    is about PyTorch float32's (tests/python/test_whole_models.py bounds
 *    it at 4 times), the bytes depend on the SIMD level but neither on
 *    pushes nor on threads, and masks behave as in EXACT. */
typedef enum {
  SATTN_PRECISION_EXACT = 0,
  SATTN_PRECISION_FAST,
} SattnPrecision;

/* The saturation threshold a stream uses when its configuration says 0:
 * a row counts as saturated when its largest weight exceeds it. */
#define SATTN_DEFAULT_SATURATION 0.99f
/* A threshold of zero ("every row with a choice is saturated"), which 0
 * cannot say (it means the default): a row with >= 2 visible keys has a
 * largest weight >= 1 / (window + extra keys), far above this, so the
 * count is the same as with a threshold of 0.  It is FLT_MIN. */
#define SATTN_SATURATION_EVERY_ROW 1.17549435082228750797e-38f

typedef struct {
  size_t struct_size; /* sizeof (SattnStreamConfig) or 0; see
                                   SattnConfig */
  size_t window;      /* n >= 1 */
  size_t hop;         /* 1 <= h <= n */
  SattnOutputMode output;
  SattnStartPolicy start;
  int collect_stats;                 /* accumulate SattnStats */
  float saturation_threshold;        /* in [0, 1]; 0 = SATTN_DEFAULT_SATURATION
                                   (kept for compatibility); a threshold
                                   of zero is SATTN_SATURATION_EVERY_ROW */
  int keep_weights;                  /* keep the last window's weights for
                                   sattn_stream_last_weights */
  SattnInvalidPolicy invalid_policy; /* unusable frames; default MASK */
  int threads;                       /* threads computing this stream's windows
                                   (see "Threads" above): 1 = none besides
                                   the caller, N > 1 = the caller plus
                                   N - 1 workers, 0 = one per CPU available
                                   to the process (its affinity mask); at
                                   most 256 are used.  Must be >= 0.
                                   0 is "one per CPU", not "default":
                                   initialise with threads = 1 for the
                                   caller's thread alone. */
  SattnPrecision precision;          /* see SattnPrecision; default EXACT */
} SattnStreamConfig;

/* What one output row accounts for.  Frame indices count frames pushed
 * since creation or the last reset, from 0.  Fixed for soname 1: this
 * struct never grows (new figures come through new functions), so arrays
 * of it keep their stride. */
typedef struct {
  uint64_t first;    /* first input frame this row accounts for */
  uint32_t n_frames; /* how many (frames mode: 1) */
  uint8_t valid;     /* 0: the row's query frame(s) were all unusable
                         (or their output projection overflowed) and the
                         row is zeros (window mode: those sub-rows) */
  /* The window the row was computed in: the n key positions ending
   * before frame window_end (positions before frame 0 are padding).
   * valid_keys + masked_keys = n; extra keys (bias_k, zero-attn) are in
   * neither.  masked_keys counts positions as SattnStats.masked_keys does
   * (padding, flagged, unusable frames); fully_masked as
   * SattnStats.fully_masked_rows does: (head, query) softmax rows of the
   * row's usable query frames whose visible keys were all masked (their
   * attention result is zeros).  Filled whether or not statistics are
   * collected. */
  uint64_t window_end;
  uint32_t valid_keys;
  uint32_t masked_keys;
  uint32_t fully_masked;
} SattnRowInfo;

typedef struct SattnStream SattnStream;

/* The stream keeps a reference-free pointer to m: m must outlive it. */
SattnStream *sattn_stream_new (const SattnModel *m, const SattnStreamConfig *sc,
                               SattnStatus *status);
void sattn_stream_free (SattnStream *s);

/* Whether sattn_stream_new (m, sc) accepts sc, without allocating: the
 * same rules, written once (struct_size as described at SattnConfig,
 * window >= 1, 1 <= hop <= window, the enums in range,
 * saturation_threshold in [0, 1], threads >= 0; with m, sizes that fit
 * the address space).  m may be NULL to check sc alone (before a model
 * exists).  Returns the status sattn_stream_new would fail with
 * (SATTN_OK when it would only fail for want of memory) and, when not
 * SATTN_OK, writes an English sentence naming the offending values and
 * what would work into err (err_len bytes, NUL-terminated, cut to fit;
 * err may be NULL), e.g. "hop=20 is larger than window=8; hop must be
 * between 1 and the window (or the window at least 20)". */
SattnStatus sattn_stream_config_check (const SattnModel *m,
                                       const SattnStreamConfig *sc, char *err,
                                       size_t err_len);

/* The bytes sattn_stream_new (m, sc) would allocate: buffers, statistics
 * parts and the worker threads' stacks (with threads resolved as the
 * stream would resolve them).  The score scratch is 16 rows ×
 * (window + extra keys) per thread, so it grows linearly with the window;
 * keep_weights adds heads × window × (window + extra keys) floats; an
 * encoder layer adds 2 × window × d_model floats (the frames, for the
 * residual), window × d_model more with norm_first, and 16 × (d_ff +
 * d_model) floats of scratch per thread.
 * Returns 0 when sc is invalid or the size overflows size_t; use it to
 * refuse a configuration before trying.  sattn_stream_new fails with
 * SATTN_E_NOMEM (nothing leaked) when an allocation or a thread creation
 * fails. */
size_t sattn_stream_bytes (const SattnModel *m, const SattnStreamConfig *sc);

/* Floats per output row: d_out, or window * d_out in window mode, or the
 * classes in classes mode. */
size_t sattn_stream_row_floats (const SattnStream *s);

/* Upper bound on the rows a push of n_frames (n_frames = 0: a drain) can
 * write, given what the stream holds now. */
size_t sattn_stream_max_rows (const SattnStream *s, size_t n_frames);

/* Frames received but not yet accounted for by an output row. */
size_t sattn_stream_pending (const SattnStream *s);

/* The window schedule, for callers that must know where windows fall
 * (e.g. to hand the stream one window per push and read each window's
 * statistics and weights on its own).
 *
 * Frames to push before the next window is computed (>= 1 for a valid
 * stream; 0 for s NULL): a push of exactly that many frames ends with
 * that window, a shorter one computes none.  hop after each window; after
 * creation or a reset, hop (SATTN_START_PAD) or window (SATTN_START_WAIT);
 * after a drain, hop. */
uint64_t sattn_stream_frames_to_window (const SattnStream *s);

/* The query rows the next window computes (the rows of
 * sattn_stream_last_weights after it): drain == 0 for the window a push
 * completes (see sattn_stream_frames_to_window), drain != 0 for the one
 * sattn_stream_drain would compute now (0 when nothing is pending).
 *   SATTN_OUTPUT_FRAMES: the frames that have no row yet when the window
 *     comes: hop; the whole window for the first window under
 *     SATTN_START_WAIT; the pending frames in a drain;
 *   SATTN_OUTPUT_WINDOW, SATTN_OUTPUT_MEAN: window;
 *   SATTN_OUTPUT_LAST: 1. */
size_t sattn_stream_window_rows (const SattnStream *s, int drain);

/* The query rows of a window in the steady state of a stream configured
 * with sc (no stream needed): hop in frames mode, window in window and
 * mean modes, 1 in last mode.  0 when sc fails sattn_stream_config_check
 * (m NULL). */
size_t sattn_stream_config_window_rows (const SattnStreamConfig *sc);

/* Push n_frames frames (n_frames × d_model floats).  valid (n_frames, may
 * be NULL = all valid): 0 marks a frame invalid (a GAP, a masked sample):
 * it is never a key and its query row is zeros.  Frames with NaN/Inf
 * samples or an overflowing Q/K/V projection follow the stream's
 * invalid_policy.  Every window that completes is computed and its
 * rows written to out (room for out_rows rows of row_floats each) with
 * info (may be NULL) describing each; *n_rows receives the count.  Fails
 * with SATTN_E_SPACE, consuming nothing, if out_rows <
 * sattn_stream_max_rows (s, n_frames).
 *
 * Under SATTN_INVALID_ERROR, the first frame with bad data stops the push:
 * the frames before it are consumed (their windows computed, their rows
 * written and counted in *n_rows), that frame and the ones after it are
 * not, and SATTN_E_NONFINITE is returned.  The stream stays usable.
 *
 * Output rows are finite whenever the frames are: a row whose output
 * projection overflows float32 (a trained wo with large values) is written
 * as zeros, flagged not valid in its info, left out of the mean in
 * SATTN_OUTPUT_MEAN, and counted in overflow_rows.  Means are accumulated
 * in double, so the mean of finite rows is finite. */
SattnStatus sattn_stream_push (SattnStream *s, const float *frames,
                               size_t n_frames, const uint8_t *valid,
                               float *out, size_t out_rows, SattnRowInfo *info,
                               size_t *n_rows);

/* Emit rows for every pending frame (end of stream): in frames mode each
 * pending frame gets its row; in pooled modes one more window is computed
 * if any frame arrived since the last one.  The stream stays usable: the
 * next window is then due hop frames after the drain. */
SattnStatus sattn_stream_drain (SattnStream *s, float *out, size_t out_rows,
                                SattnRowInfo *info, size_t *n_rows);

/* Whether an output row's window is within the model's input contract
 * (SattnModelContract): filled by the library, fixed for soname 1.
 *  input_rms: the RMS of every value of the window's usable frames
 *    (before any of the model's normalisations); NaN when the window has
 *    no usable frame;
 *  pooled_z: sqrt (mean_d ((p_d - mu_d) / sigma_d)^2) of the pooled row
 *    p against the training statistics the model records; NaN when it
 *    records none or the row is not valid;
 *  outside: SATTN_OUTSIDE_* bits of the recorded ranges the window is
 *    outside of; in_contract = (outside == 0).  A window with no usable
 *    frame is in contract (it has no statistics; its row is flagged not
 *    valid).  Rows of a layer (not a whole model), and of models that
 *    record no range, are always in contract. */
enum {
  SATTN_OUTSIDE_RMS_LOW = 1 << 0,  /* input_rms < input_rms_lo */
  SATTN_OUTSIDE_RMS_HIGH = 1 << 1, /* input_rms > input_rms_hi */
  SATTN_OUTSIDE_FEATURES = 1 << 2, /* pooled_z > pooled_z_max */
};
typedef struct {
  uint8_t in_contract;
  uint8_t outside;
  uint8_t reserved[2];
  float input_rms;
  float pooled_z;
} SattnRowCheck;

/* sattn_stream_push / sattn_stream_drain that also fill checks (may be
 * NULL; room for as many rows as out) with each row's SattnRowCheck. */
SattnStatus sattn_stream_push_checked (SattnStream *s, const float *frames,
                                       size_t n_frames, const uint8_t *valid,
                                       float *out, size_t out_rows,
                                       SattnRowInfo *info,
                                       SattnRowCheck *checks, size_t *n_rows);
SattnStatus sattn_stream_drain_checked (SattnStream *s, float *out,
                                        size_t out_rows, SattnRowInfo *info,
                                        SattnRowCheck *checks, size_t *n_rows);

/* Forget every frame: the next frame is frame 0 of a new stream.
 * Statistics are kept. */
void sattn_stream_reset (SattnStream *s);

/* Forget every frame, as sattn_stream_reset does, and give the next frame
 * the absolute index first_frame (resuming a stream whose earlier frames
 * were handled elsewhere: positional encodings and row infos continue from
 * there).  first_frame must be below 2^53 (exact in a double).
 * SATTN_E_INVAL otherwise. */
SattnStatus sattn_stream_reset_at (SattnStream *s, uint64_t first_frame);

/* Frames pushed since creation or the last reset (the index the next
 * frame will have). */
uint64_t sattn_stream_frames (const SattnStream *s);

/* Change the invalid-frames policy of a running stream; it applies from
 * the next frame pushed.  SATTN_E_INVAL for a value out of range. */
SattnStatus sattn_stream_set_invalid_policy (SattnStream *s,
                                             SattnInvalidPolicy policy);

/* After sattn_stream_push returned SATTN_E_NONFINITE: the index of the
 * frame that stopped it (frames since creation or the last reset, as in
 * SattnRowInfo) and why it is unusable (NONFINITE or OVERFLOW).  Either
 * pointer may be NULL.  SATTN_E_INVAL when no push has stopped so since
 * the stream was created or reset. */
SattnStatus sattn_stream_error_frame (const SattnStream *s, uint64_t *index,
                                      SattnFrameFault *fault);

/* Copy the accumulated statistics; clear them after if clear != 0 (the
 * counts of sattn_stream_overflow_parts too). */
void sattn_stream_get_stats (SattnStream *s, SattnStats *out, int clear);

/* The output rows counted in the statistics' overflow_rows, by the part
 * where each overflowed: counts[p] for the SattnPart p < n_counts (0 for
 * p >= SATTN_PART_COUNT), over the same period as the statistics (since
 * the stream was created or sattn_stream_get_stats last cleared them);
 * their sum is overflow_rows.  Rows of a whole model per window count as
 * SATTN_PART_UNKNOWN.  SATTN_E_INVAL when s or counts is NULL. */
SattnStatus sattn_stream_overflow_parts (const SattnStream *s, uint64_t *counts,
                                         size_t n_counts);

/* The last computed window's weights (needs keep_weights): rows × cols with
 * rows = query rows computed in that window, cols = window + extra keys.
 * head = -1 averages the heads.  out may be NULL to query the size.
 * Returns SATTN_E_INVAL when there is no window yet or keep_weights is off. */
SattnStatus sattn_stream_last_weights (const SattnStream *s, int head,
                                       float *out, size_t *rows, size_t *cols);

/* The largest rows and cols sattn_stream_last_weights can give for this
 * stream, known from sattn_stream_new on (0 and 0 without keep_weights or
 * s NULL): window × (window + extra keys) for a layer, (lead + window)
 * squared for a whole model (lead 1 with a CLS token, whose row and
 * column come first). */
void sattn_stream_weights_size (const SattnStream *s, size_t *rows,
                                size_t *cols);

/* Rows that sattn_stream_skip accounted for without writing them: rows
 * [first, end) in frame terms (the input frames they account for, counted
 * as SattnRowInfo.first counts), `rows` of them (frames mode: end - first;
 * pooled modes: one per window).  Every such row is zeros with valid = 0,
 * and they follow the rows the call wrote, in order.  rows == 0: none.
 * Fixed for soname 1: this struct never grows. */
typedef struct {
  uint64_t first;
  uint64_t end;
  uint64_t rows;
} SattnSkipped;

/* Invalid frames still to go through the window computation before a run
 * of invalid frames can be skipped in closed form: 1 + the position in the
 * current window of its last usable frame, 0 when it holds none. */
uint64_t sattn_stream_skip_lead (const SattnStream *s);

/* Advance the stream by n_frames invalid frames (a GAP), exactly as
 * sattn_stream_push of n_frames frames all flagged invalid would: the same
 * frame count, window schedule, pending frames, statistics and last
 * weights afterwards, and the same output rows.  The first
 * min (n_frames, sattn_stream_skip_lead (s)) frames are pushed and their
 * rows written to out / info as sattn_stream_push writes them (out needs
 * room for sattn_stream_max_rows (s, that many) rows when that many is
 * not 0; none otherwise, and out may then be NULL); after them every window holds only invalid frames, so the rest
 * costs O(window) time whatever n_frames is: the rows of their windows
 * are zeros with valid = 0 and are described by *skipped, not written.
 * Fails with SATTN_E_INVAL, consuming nothing, when the frame count would
 * pass UINT64_MAX - window; SATTN_E_SPACE as push does.
 * Positions: RoPE turns a frame by its index p (angles exact while p <
 * 2^53).  A skip that leaves the frame count at 2^52 or more past the
 * positions' origin moves the origin to the frame after the GAP: every
 * key before it is masked and RoPE scores depend on offsets only, so the
 * rows after the GAP are, byte for byte, those of the same frames at the
 * stream start, however long the GAP (frame counts, row info and
 * metadata keep counting from the real start).  Only 2^52 frames of
 * data without such a GAP (143 years at 1 MHz) reach the limit. */
SattnStatus sattn_stream_skip (SattnStream *s, uint64_t n_frames, float *out,
                               size_t out_rows, SattnRowInfo *info,
                               size_t *n_rows, SattnSkipped *skipped);

SATTN_API_END
#ifdef __cplusplus
}
#endif
#endif /* SATTN_H */
