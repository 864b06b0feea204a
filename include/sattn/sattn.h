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
 */
#ifndef SATTN_H
#define SATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SATTN_VERSION_MAJOR 0
#define SATTN_VERSION_MINOR 1

/* ---------------------------------------------------------------- status */

typedef enum {
  SATTN_OK = 0,
  SATTN_E_INVAL,      /* NULL pointer or a value out of range */
  SATTN_E_SHAPE,      /* dimensions that do not fit together */
  SATTN_E_NOMEM,      /* allocation failed or size overflows */
  SATTN_E_NONFINITE,  /* NaN/Inf where it is not allowed (weights) */
  SATTN_E_SPACE,      /* caller's output buffer is too small */
  SATTN_E_IO,         /* a file cannot be opened or read */
  SATTN_E_FORMAT,     /* a malformed weights file */
  SATTN_E_MISSING,    /* a required tensor is absent from a weights file */
  SATTN_E_DTYPE,      /* a tensor dtype that is not supported */
} SattnStatus;

/* A static, human-readable English description; never NULL. */
const char *sattn_status_string (SattnStatus st);

/* ----------------------------------------------------------------- model */

typedef struct {
  size_t d_model;   /* E: floats per input frame, >= 1 */
  size_t heads;     /* H >= 1 */
  size_t d_head;    /* per-head Q/K size; 0 = d_model / heads (must divide) */
  size_t d_value;   /* per-head V size; 0 = d_head */
  size_t d_out;     /* output row size: the rows of wo, required when
                       wo is given; 0 without wo = heads * d_value */
  float scale;      /* score scale; 0 = 1/sqrt(d_head).  1 = "unscaled".
                       Must be finite and >= 0. */
  int causal;       /* nonzero: a query sees keys at or before its frame
                       (bottom-right aligned in the one-shot path) */
  size_t lookback;  /* > 0: a query at frame i sees keys j with i - j <=
                       lookback (keys after i are limited by causal only);
                       0 = the whole window */
  int threads;      /* OpenBLAS threads used by this model's calls;
                       0 = leave the process-wide setting alone */
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
  const float *wq, *bq;
  const float *wk, *bk;
  const float *wv, *bv;
  const float *wo, *bo;
  const float *bias_k, *bias_v;
  int add_zero_attn;
} SattnWeights;

typedef struct SattnModel SattnModel;

/* w == NULL: identity projections.  Non-finite weights -> SATTN_E_NONFINITE.
 * On failure returns NULL and sets *status (status may be NULL). */
SattnModel *sattn_model_new (const SattnConfig *cfg, const SattnWeights *w,
                             SattnStatus *status);
void sattn_model_free (SattnModel *m);

/* The configuration with every 0-default resolved. */
const SattnConfig *sattn_model_config (const SattnModel *m);
size_t sattn_model_d_out (const SattnModel *m);
/* Number of always-valid extra keys (bias_k, zero-attn): 0, 1 or 2. */
size_t sattn_model_extra_keys (const SattnModel *m);

/* ----------------------------------------------------------------- stats */

/* Numeric health, accumulated over (head, query row) pairs; a "row" below
 * is one head's softmax row.  Filled by sattn_attend and by streams created
 * with collect_stats. */
typedef struct {
  uint64_t windows;            /* windows computed */
  uint64_t frames;             /* frames pushed (stream) / rows given */
  uint64_t rows;               /* (head, query) softmax rows computed */
  uint64_t masked_keys;        /* sum over windows of key positions that are
                                  invalid (padding, flagged, non-finite) */
  uint64_t invalid_frames;     /* frames flagged invalid or with NaN/Inf */
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

void sattn_stats_clear (SattnStats *st);

/* ------------------------------------------------------------- one-shot */

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
 * Rows of x with NaN/Inf are treated as masked keys (and counted).  This is
 * the reference path: it allocates scratch per call. */
SattnStatus sattn_attend (const SattnModel *m, const float *x, size_t n,
                          const SattnMask *mask, float *out, float *weights,
                          SattnStats *stats);

/* ------------------------------------------------------------ streaming */

typedef enum {
  SATTN_OUTPUT_FRAMES = 0, /* one row per input frame (the hop's new rows) */
  SATTN_OUTPUT_WINDOW,     /* one row per window: all n rows flattened */
  SATTN_OUTPUT_MEAN,       /* one row per window: mean of valid rows */
  SATTN_OUTPUT_LAST,       /* one row per window: the last frame's row */
} SattnOutputMode;

typedef enum {
  SATTN_START_PAD = 0,  /* compute from the first hop, padding masked */
  SATTN_START_WAIT,     /* first window when n frames are in */
} SattnStartPolicy;

typedef struct {
  size_t window;                /* n >= 1 */
  size_t hop;                   /* 1 <= h <= n */
  SattnOutputMode output;
  SattnStartPolicy start;
  int collect_stats;            /* accumulate SattnStats */
  float saturation_threshold;   /* 0 = 0.99 */
  int keep_weights;             /* keep the last window's weights for
                                   sattn_stream_last_weights */
} SattnStreamConfig;

/* What one output row accounts for.  Frame indices count frames pushed
 * since creation or the last reset, from 0. */
typedef struct {
  uint64_t first;     /* first input frame this row accounts for */
  uint32_t n_frames;  /* how many (frames mode: 1) */
  uint8_t valid;      /* 0: the row's query frame(s) were all invalid and
                         the row is zeros */
} SattnRowInfo;

typedef struct SattnStream SattnStream;

/* The stream keeps a reference-free pointer to m: m must outlive it. */
SattnStream *sattn_stream_new (const SattnModel *m,
                               const SattnStreamConfig *sc,
                               SattnStatus *status);
void sattn_stream_free (SattnStream *s);

/* Floats per output row: d_out, or window * d_out in window mode. */
size_t sattn_stream_row_floats (const SattnStream *s);

/* Upper bound on the rows a push of n_frames (n_frames = 0: a drain) can
 * write, given what the stream holds now. */
size_t sattn_stream_max_rows (const SattnStream *s, size_t n_frames);

/* Frames received but not yet accounted for by an output row. */
size_t sattn_stream_pending (const SattnStream *s);

/* Push n_frames frames (n_frames × d_model floats).  valid (n_frames, may
 * be NULL = all valid): 0 marks a frame invalid (a GAP, a masked sample):
 * it is never a key and its query row is zeros.  Frames with NaN/Inf are
 * treated as invalid too.  Every window that completes is computed and its
 * rows written to out (room for out_rows rows of row_floats each) with
 * info (may be NULL) describing each; *n_rows receives the count.  Fails
 * with SATTN_E_SPACE, consuming nothing, if out_rows <
 * sattn_stream_max_rows (s, n_frames). */
SattnStatus sattn_stream_push (SattnStream *s, const float *frames,
                               size_t n_frames, const uint8_t *valid,
                               float *out, size_t out_rows,
                               SattnRowInfo *info, size_t *n_rows);

/* Emit rows for every pending frame (end of stream): in frames mode each
 * pending frame gets its row; in pooled modes one more window is computed
 * if any frame arrived since the last one.  The stream stays usable: the
 * next window is then due hop frames after the drain. */
SattnStatus sattn_stream_drain (SattnStream *s, float *out, size_t out_rows,
                                SattnRowInfo *info, size_t *n_rows);

/* Forget every frame: the next frame is frame 0 of a new stream.
 * Statistics are kept. */
void sattn_stream_reset (SattnStream *s);

/* Copy the accumulated statistics; clear them after if clear != 0. */
void sattn_stream_get_stats (SattnStream *s, SattnStats *out, int clear);

/* The last computed window's weights (needs keep_weights): rows × cols with
 * rows = query rows computed in that window, cols = window + extra keys.
 * head = -1 averages the heads.  out may be NULL to query the size.
 * Returns SATTN_E_INVAL when there is no window yet or keep_weights is off. */
SattnStatus sattn_stream_last_weights (const SattnStream *s, int head,
                                       float *out, size_t *rows,
                                       size_t *cols);

/* Bytes sattn_stream_new allocates for a stream of model m with
 * configuration sc (the stream and every buffer it holds), so a caller can
 * check a configuration against the memory it may use before creating it.
 * SIZE_MAX when the size does not fit in size_t; 0 when m or sc is NULL. */
size_t sattn_stream_bytes (const SattnModel *m, const SattnStreamConfig *sc);

/* Rows that sattn_stream_skip accounted for without writing them: rows
 * [first, end) in frame terms (the input frames they account for, counted
 * as SattnRowInfo.first counts), `rows` of them (frames mode: end - first;
 * pooled modes: one per window).  Every such row is zeros with valid = 0,
 * and they follow the rows the call wrote, in order.  rows == 0: none. */
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
 * room for sattn_stream_max_rows (s, that many) rows; may be NULL when it
 * is 0); after them every window holds only invalid frames, so the rest
 * costs O(window) time whatever n_frames is: the rows of their windows
 * are zeros with valid = 0 and are described by *skipped, not written.
 * Fails with SATTN_E_INVAL, consuming nothing, when the frame count would
 * pass UINT64_MAX - window; SATTN_E_SPACE as push does. */
SattnStatus sattn_stream_skip (SattnStream *s, uint64_t n_frames, float *out,
                               size_t out_rows, SattnRowInfo *info,
                               size_t *n_rows, SattnSkipped *skipped);

#ifdef __cplusplus
}
#endif
#endif /* SATTN_H */
