/* Private declarations shared by the files of libsattn.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_INTERNAL_H
#define SATTN_INTERNAL_H

#include "sattn/sattn.h"

#include <stdint.h>
#include <stddef.h>

struct SattnModel {
  SattnConfig cfg; /* resolved: no 0-defaults left */
  size_t dq;       /* heads * d_head */
  size_t dv;       /* heads * d_value */
  size_t d_out;
  /* Owned copies; NULL = identity projection / zero bias.  Weight
   * matrices are stored transposed (in_features × out_features). */
  float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
  /* Q, K and V weights of narrow heads (d_head and d_value below 32, all
   * three given, no encoder or RoPE) packed head by head: d_model rows of
   * heads × sattn_wqkv_head_width floats, head h's Q | K (| V) columns
   * from h times that width, so that a stream's task projects a head's
   * columns of new frames in one block product wide enough for the
   * register-tiled loop (see project_head in stream/incremental.c); V's columns only
   * when V sums in float (wvd NULL), the only case that reads them.  Built
   * whatever streams the model will serve (a model holds no thread
   * count): only streams with workers read it; NULL otherwise. */
  float *wqkv;
  /* Extra always-valid keys, projected space: n_extra × dq and × dv. */
  float *k_extra, *v_extra;
  size_t n_extra;
  /* Positions: RoPE frequencies theta_k = theta_hi[k] + theta_lo[k]
   * (d_head / 2 each, NULL without RoPE); ALiBi slopes (heads, NULL
   * without ALiBi). */
  double *theta_hi, *theta_lo;
  float *alibi;
  /* Encoder layer (cfg.encoder): linear1 / linear2 transposed (d_model ×
   * d_ff, d_ff × d_model) and their biases as doubles (the feed-forward
   * sums run in double), LayerNorm parameters (NULL = 0 / 1);
   * with norm_first, zq / zk / zv are the projections of an all-zero
   * frame (norm1 of it is norm1's bias), NULL otherwise. */
  double *w1, *b1, *w2, *b2;
  float *n1w, *n1b, *n2w, *n2b;
  float *zq, *zk, *zv;
  /* Projections summed in double (linear.c): double copies of their
   * weights and biases, NULL for those summed in float (and for identity
   * projections).  V and the output projection always sum in double:
   * that puts attention-only models at or below PyTorch float32's error
   * in nearly every draw, where summing in float lands around it
   * (tests/bench/PERFORMANCE.md, "Numerical error").  Encoder layers and
   * RoPE models sum Q and K in double too (RoPE rounds Q and K once more:
   * in float, one of layers-parity's fixed draws lands 1.17x above
   * PyTorch with AVX2).  Other attention-only models keep Q and K in
   * float: that keeps the per-head path's packed float product for them
   * (see wqkv), and their error stays below PyTorch's without. */
  double *wqd, *bqd, *wkd, *bkd, *wvd, *bvd, *wod, *bod;
  /* The weight matrices above (wq ... wo, wqd ... wod, w1, w2), all in
   * one region on huge pages when they are large together (model/model.c,
   * copy_matrices), NULL otherwise. */
  void *region;
  /* A whole model (SATTN_MODEL_WHOLE, model/net.c): its parts; NULL for a
   * layer.  cfg then describes the first layer with d_model the frame
   * size, d_out the encoder's width; the weight pointers above are NULL. */
  struct SattnNet *net;
};

/* Blocks that outlive a call (models, weights, stream state), base/mem.c:
 * at least `align` aligned (a power of two), blocks of SATTN_MEM_MAP_MIN
 * bytes or more mapped from the system and returned to it by
 * sattn_mem_free (and only by it; NULL is ignored).  NULL when out of
 * memory or align is not a power of two. */
#define SATTN_MEM_MAP_MIN ((size_t) 128 << 10)
void *sattn_mem_alloc (size_t size, size_t align);
void *sattn_mem_calloc (size_t n, size_t size, size_t align);
void sattn_mem_free (void *p);

/* Sizes without wrapping: a * b and a + b, SIZE_MAX when they do not fit
 * (so a sum of saturated terms stays saturated). */
static inline size_t
sattn_size_mul (size_t a, size_t b)
{
  return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

static inline size_t
sattn_size_add (size_t a, size_t b)
{
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* model/net.c: a whole model, [embed] -> layers[N] -> [final norm] ->
 * [pooling] -> [head].  Matrices transposed (in × out) in double: the
 * embedding, the head and the final norm sum in double, each result
 * rounded to float once where it leaves the model. */
typedef struct SattnNet {
  size_t d_frame, d; /* F floats per frame, D encoder width */
  size_t n_layers;
  SattnModel **layer; /* n_layers encoder-layer models on D */
  /* The front end (docs/models.md): a Linear per frame (embed_wt) or a
   * Conv1d stem (conv_wt), after the optional per-feature
   * standardisation and per-window RMS / power normalisation. */
  double *embed_wt, *embed_b; /* F × D, D (NULL: no bias); with a linear
                                 front end and no per-window part, the
                                 standardisation is folded in here */
  double *std_mean, *std_std; /* F each: standardisation, NULL without
                                 (or folded into embed_wt / embed_b) */
  int input_norm;             /* 0 none, 1 rms, 2 power */
  double in_eps, in_gain;     /* r = sqrt (in_gain mean (x^2) + in_eps) */
  int conv;                   /* the front end is the conv stem */
  size_t conv_c, conv_s, conv_k, conv_p, conv_l; /* C, S, K, P, L */
  int conv_act;                                  /* 0 none, 1 relu, 2 gelu */
  double *conv_wt, *conv_b; /* (C K) × D (row c K + k), D (NULL: none) */
  double *cls;              /* D: the CLS token, NULL without */
  size_t lead;              /* rows before the frames' in a window: 1 with
                               a CLS token, else 0 */
  /* The front end depends on the window (conv stem, per-window
   * normalisation, CLS): each window's rows are made from its frames
   * (stream/whole.c), not once per frame. */
  int per_window;
  double *pos; /* max_window (+ lead) × D, NULL without learned */
  size_t max_window;
  float *norm_w, *norm_b; /* final LayerNorm (NULL: 1, 0) */
  double norm_eps;
  int final_norm;
  double *pool_w, pool_b;     /* attention pooling: D, its bias */
  size_t hidden, classes;     /* MLP head: hidden > 0; classes 0: no head */
  double *head1_wt, *head1_b; /* D × (hidden or classes) */
  double *head2_wt, *head2_b; /* hidden × classes (MLP) */
  SattnActivation head_act;
  SattnPooling pooling;
  SattnModelContract contract;
  double *pooled_mean, *pooled_std; /* D each: the contract's, or NULL */
  char **labels;                    /* classes strings, NULL when none */
  char **meta;                      /* the file's metadata under the prefix:
                               * key, value, ..., NULL (sorted by key) */
} SattnNet;

void sattn_net_free (SattnNet *net);

/* The windows of a whole model computed together (model/net.c): up to
 * max_windows windows of n rows each, one block of rows (window w's rows
 * are rows [w n, (w + 1) n)).  The per-row parts of every layer (norms,
 * projections, output projection, feed-forward) run as products over all
 * rows of the block, the attention per window and head; every value is
 * summed in an order that depends on neither the number of windows in
 * the block nor the thread that computes it (linear.c's loops: one chain
 * per entry), so the bytes are those of each window computed alone.
 * Allocated once; the caller fills x, kok (and, with the first layer's
 * projections kept per frame, q, k, v) and runs sattn_net_block_run. */
typedef struct SattnNetBlock {
  size_t n, max_windows, rows; /* rows = n * max_windows; n = the model's
                                  lead rows (CLS) + the window's frames */
  size_t lead;                 /* net->lead: rows before the frames' */
  struct SattnPool *pool;      /* not owned; NULL: serial */
  unsigned threads;
  float *x, *y;              /* rows × D: the layers' two buffers */
  uint8_t *kok, *qok;        /* rows: key / query usable */
  float *q, *k, *v, *o;      /* rows × dq, dq, dv, dv (widest layer) */
  float *xn;                 /* rows × D: norm1 of pre-norm layers */
  float *kt;                 /* max_windows × dq × n: K transposed */
  float *S;                  /* threads × n × ncols scores */
  float *lscr;               /* threads × the layers' row scratch */
  size_t s_stride, l_stride; /* floats of S and lscr per thread */
  SattnStats *stats;         /* max_windows: each window's health */
  double *pooled;            /* max_windows × D */
  double *hidden, *logits;   /* the head's */
  size_t *usable;            /* max_windows: usable frame rows after it
                                (0 also when the pooled row is not: a
                                CLS row that overflowed) */
  double *z;                 /* max_windows: the pooled rows' contract z */
} SattnNetBlock;
SattnNetBlock *sattn_net_block_new (const SattnModel *m, size_t n,
                                    size_t max_windows, struct SattnPool *pool);
void sattn_net_block_free (SattnNetBlock *b);
size_t sattn_net_block_bytes (const SattnModel *m, size_t n, size_t max_windows,
                              unsigned threads);

/* The windows [0, nw) of the block through the model.  x: each window's
 * rows (the embedded frames with their positions; masked rows zeros,
 * kok 0).  l0_ready: q, k and v already hold the first layer's
 * projections of those rows (zeros for masked rows).  Runs the layers
 * and the final norm; afterwards *out points at the rows (b->x or b->y;
 * rows of unusable queries zeros) and kok says which rows are usable.
 * weights (may be NULL): the last layer's, heads × n × n, of window
 * wwin.  stats: each window's attention health summed into b->stats[w]
 * (the caller clears them), else none.  Then each window's pooled row
 * (b->pooled[w], as pooling says) and count of usable rows
 * (b->usable[w]).  The pool's threads take groups of whole windows,
 * each through every layer. */
void sattn_net_block_run (const SattnModel *m, SattnNetBlock *b, size_t nw,
                          int l0_ready, float *weights, size_t wwin, int stats,
                          SattnPooling pooling, float **out);

/* The head on a pooled row: probs (classes floats) = softmax (head
 * (pooled)); 0 when the logits overflow (probs then zeros). */
int sattn_net_classify (const SattnModel *m, SattnNetBlock *b,
                        const double *pooled, float *probs);
/* The embedding of rows frames of F floats: e (rows × D doubles, row
 * strides F and D) = x W^T + b, one product. */
void sattn_net_embed (const SattnModel *m, const float *x, size_t rows,
                      double *e);
/* sattn_attend for a whole model: x (n × F frames) as one window,
 * mask->key_valid as key padding; out: n × D rows after the final norm;
 * weights: the last layer's. */
SattnStatus sattn_net_attend (const SattnModel *m, const float *x, size_t n,
                              const SattnMask *mask, float *out, float *weights,
                              SattnStats *stats);

/* nn/attention.c: the one-shot attention (sattn_attend) over scratch allocated
 * once, for callers that run it on many windows. */
typedef struct {
  size_t n;
  float *q, *k, *kt, *v, *o, *S, *xn, *lscr;
  uint8_t *kok, *qok;   /* after a run: qok[i] = row i usable (its output
                           computed and finite) */
  uint8_t *part;        /* n: an encoder layer's SattnPart per row */
  size_t overflow_rows; /* after a run: rows whose output overflowed */
  uint64_t overflow_parts[SATTN_PART_COUNT]; /* after a run: those rows by
                                                the part that overflowed */
} SattnAttendScratch;
SattnStatus sattn_attend_scratch_new (const SattnModel *m, size_t n,
                                      SattnAttendScratch *scr);
void sattn_attend_scratch_free (SattnAttendScratch *scr);
/* sattn_attend's work on n rows (n == the scratch's): count_rows 0 leaves
 * the per-row counts (masked keys, invalid frames, overflows) out of
 * stats; windows and frames are never counted here. */
void sattn_attend_run (const SattnModel *m, const float *x, size_t n,
                       const SattnMask *mask, float *out, float *weights,
                       SattnStats *stats, int count_rows,
                       SattnAttendScratch *scr);
/* sattn_attend_run's two halves: the projections of n rows x into q, k
 * (n × dq) and v (n × dv), RoPE at positions pos0 + j (xn: n × d_model
 * scratch for norm1 of pre-norm layers; unused otherwise) -- the same
 * bytes whether rows come one at a time or in a block -- and the rest
 * (frame rule, attention, output projection, layer parts) with the
 * projections taken from scr->q, scr->k, scr->v. */
void sattn_attend_project (const SattnModel *m, const float *x, size_t n,
                           float *xn, float *q, float *k, float *v,
                           uint64_t pos0);
void sattn_attend_finish (const SattnModel *m, const float *x, size_t n,
                          const SattnMask *mask, float *out, float *weights,
                          SattnStats *stats, int count_rows,
                          SattnAttendScratch *scr);
/* Whether the first layer's projections of a frame do not depend on the
 * window (no learned positions: none, RoPE, ALiBi), so that a stream may
 * project each frame once (RoPE then at the frame's absolute index: the
 * scores depend on offsets only). */
int sattn_net_frame_reuse (const SattnModel *m);

/* model/front.c: the front end of a model whose rows depend on the
 * window (net->per_window).
 * sattn_net_standardize: frame x (F floats) standardised into xs (F
 *   doubles; x itself without standardisation), *ss = sum of xs^2, *raw
 *   = sum of x^2; 0 when a sum is not finite (the frame is unusable).
 * sattn_net_window_rms: sqrt (sum of raw[i] over ok frames / (usable x
 *   values)), NaN without a usable frame (the contract's input RMS).
 * sattn_net_front_window: a window of n frames (xs: n × F, zeros where
 *   !ok; ss as above) to its lead + n rows of D floats in x (the CLS row,
 *   then the frames': per-window normalisation, front end, activation,
 *   learned position, rounded once; unusable rows zeros) and kok; returns
 *   the usable frame rows; *overflow (may be NULL) counts frame rows that
 *   overflowed float32 here (then unusable).  scratch: at least
 *   sattn_net_front_scratch (m, n) doubles. */
int sattn_net_standardize (const SattnModel *m, const float *x, double *xs,
                           double *ss, double *raw);
double sattn_net_window_rms (const double *raw, const uint8_t *ok, size_t n,
                             size_t values);
size_t sattn_net_front_scratch (const SattnModel *m, size_t n);
size_t sattn_net_front_window (const SattnModel *m, const double *xs,
                               const double *ss, const uint8_t *ok, size_t n,
                               float *x, uint8_t *kok, double *scratch,
                               uint64_t *overflow);
/* The contract's z of a pooled row p (D doubles): NaN when the model
 * records no pooled statistics. */
double sattn_net_pooled_z (const SattnModel *m, const double *p);

/* Floats of one head's columns in wqkv: its Q and K columns, and its V
 * columns when V sums in float (wvd NULL). */
static inline size_t
sattn_wqkv_head_width (const SattnModel *m)
{
  return 2 * m->cfg.d_head + (m->wvd != NULL ? 0 : m->cfg.d_value);
}

/* nn/encoder.c: the per-row parts of an encoder layer. */
#define SATTN_LAYER_ROWS 16
/* Floats of scratch sattn_layer_rows needs for up to SATTN_LAYER_ROWS
 * rows. */
size_t sattn_layer_scratch (const SattnModel *m);
/* y (rows × d_model, stride ldy, rows <= SATTN_LAYER_ROWS) holds the
 * attention's output rows, x (stride ldx) their query frames: y becomes
 * the layer's output (rows of unusable queries are zeroed by the caller
 * afterwards).  part (rows entries, may be NULL): for a row whose output
 * is not finite, the SattnPart that overflowed first; else
 * SATTN_PART_UNKNOWN. */
void sattn_layer_rows (const SattnModel *m, const float *x, size_t ldx,
                       float *y, size_t ldy, size_t rows, float *scratch,
                       uint8_t *part);
/* Rows of y (stride ldy) = LayerNorm (x) * w + b over d values (w, b
 * NULL: 1, 0), read from rows of xf (floats, stride ldxf) or, when xf is
 * NULL, of xd (doubles, stride ldxd), in double, each output rounded to
 * float once; yd (may be NULL; stride ldyd) gets the same values as
 * doubles.  y may be xf.  Each row's bytes do not depend on the rows
 * around it.  The one LayerNorm of the library: the encoder layer's two
 * and a whole model's final norm. */
void sattn_layer_norm_rows (const float *xf, size_t ldxf, const double *xd,
                            size_t ldxd, float *y, size_t ldy, double *yd,
                            size_t ldyd, size_t rows, size_t d, const float *w,
                            const float *b, double eps);
/* LayerNorm of rows (stride ld) of d_model floats with norm1's
 * parameters, from x into y. */
void sattn_layer_norm1 (const SattnModel *m, const float *x, size_t ldx,
                        float *y, size_t ldy, size_t rows);

/* Rotate the Q and K rows q and k (heads * d_head floats each,
 * head-major) of the frame at absolute index pos by the model's RoPE (the
 * angles computed once for both); no-op without RoPE. */
void sattn_rope_qk (const SattnModel *m, float *q, float *k, uint64_t pos);
/* Nonzero when the model rotates Q and K. */
int sattn_model_rope (const SattnModel *m);

/* Project n rows: y (n × d_out, row stride ldy) = x (n × d_in, stride ldx)
 * W^T + b, given Wt = W^T (d_in × d_out).  Wt NULL = identity (d_in ==
 * d_out); b NULL = no bias. */
void sattn_project (const float *Wt, const float *b, const float *x, size_t n,
                    size_t d_in, size_t d_out, size_t ldx, float *y,
                    size_t ldy);

/* One window of attention for every head, pre output projection.
 * Positions are window indices: keys 0..nk-1, query i sits at q0 + i.
 * Keys whose key_ok is 0 must have finite (zeroed) K and V rows. */
typedef struct {
  const float *q; /* m × dq, row stride ldq */
  size_t ldq;
  const float *kt; /* K transposed: dq × nk, row stride ldkt */
  size_t ldkt;
  const float *v; /* nk × dv, row stride ldv */
  size_t ldv;
  const uint8_t *key_ok;   /* nk, NULL = all */
  const uint8_t *query_ok; /* m, NULL = all; 0 -> zero row */
  const uint8_t *allow;    /* m × nk (row stride ld_allow), NULL = none */
  size_t ld_allow;
  size_t m, nk, q0;
  float *scores; /* scratch: m × (nk + n_extra) */
  float *o;      /* out: m × dv */
  /* Head-major layouts (0 = the default, heads side by side in a row):
   * floats from head h's Q, V and O columns to head h + 1's, and O's row
   * stride (0 = dv).  With q_head, head h's Q rows start at q + h *
   * q_head (row stride ldq); likewise V and O. */
  size_t q_head, v_head, o_head, ldo;
  float *weights;    /* optional out: heads × m × (nk + n_extra) */
  SattnStats *stats; /* optional */
  float sat_threshold;
} SattnAttnArgs;

void sattn_attend_window (const SattnModel *m, const SattnAttnArgs *a);

/* The keys a query at window position qpos may see among nk window keys:
 * [*lo, *hi), limited by causal and lookback (extra keys are always
 * visible).  The one home of that rule: the attention and the row
 * descriptions of a stream both ask it. */
static inline void
sattn_visible_keys (const SattnConfig *c, size_t qpos, size_t nk, size_t *lo,
                    size_t *hi)
{
  size_t h = c->causal ? (qpos + 1 < nk ? qpos + 1 : nk) : nk;
  size_t l = (c->lookback > 0 && qpos > c->lookback) ? qpos - c->lookback : 0;
  *hi = h;
  *lo = l > h ? h : l;
}

/* Output projection of m rows of O (m × dv) into out (stride ldo). */
void sattn_output_project (const SattnModel *m, const float *o, size_t rows,
                           float *out, size_t ldo);

/* The index of the first NaN / Inf among n floats, n when all are finite
 * (sattn_finite first: the vectorised test, then the scan only on
 * failure).  The one finite check of the library: the model's weights,
 * the weights reader's tensors and the frame rule all go through it or
 * through sattn_finite. */
size_t sattn_first_nonfinite (const float *x, size_t n);

/* Writes the message (printf format) into err (err_len bytes, may be NULL
 * / 0) and returns st: the error words of the configuration checks. */
SattnStatus sattn_fail (SattnStatus st, char *err, size_t err_len,
                        const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

/* A caller's struct that carries its size (size_t struct_size first,
 * sattn.h at SattnConfig) read into dst, a struct of this version of size
 * bytes: zeroed, then the min (struct_size, size) bytes of src (0 =
 * size), then dst's struct_size set to size.  SATTN_E_INVAL with words
 * naming the argument (what, e.g. "SattnConfig" or
 * "SattnLoadOptions.cfg") and its type when struct_size is below
 * min_size (the end of the last field of soname 1) or above max_size
 * (SIZE_MAX: no bound; a struct held within another has one), or when it
 * is above size and the bytes past size are not all zero (fields of a
 * later version, which this one cannot honour). */
SattnStatus sattn_struct_in (const char *what, const char *type,
                             const void *src, void *dst, size_t size,
                             size_t min_size, size_t max_size, char *err,
                             size_t err_len);
/* min_size of the caller-filled structs of soname 1. */
#define SATTN_CONFIG_MIN_SIZE \
  (offsetof (SattnConfig, norm_eps) + sizeof (double))
#define SATTN_WEIGHTS_MIN_SIZE \
  (offsetof (SattnWeights, norm2_b) + sizeof (const float *))
#define SATTN_STREAM_CONFIG_MIN_SIZE \
  (offsetof (SattnStreamConfig, threads) + sizeof (int))

/* Up to 16 divisors of value, those nearest to wanted, ascending, as
 * "a, b, c" in buf (len bytes): the values that work, for messages. */
void sattn_divisors (char *buf, size_t len, size_t value, size_t wanted);

/* One head, query rows [r0, r1) of the window described by a: scores in
 * S (scratch, (r1 - r0) × (nk + n_extra)), output into the rows of a->o and
 * a->weights (when set) that belong to them; statistics into stats (may be
 * NULL; a->stats is not used).  Tasks on different (head, row range) pairs
 * write disjoint memory. */
void sattn_attend_rows (const SattnModel *m, const SattnAttnArgs *a, size_t h,
                        size_t r0, size_t r1, float *S, SattnStats *stats);

/* Nonzero when sattn_project would use cblas_sgemm for this shape (large
 * blocks only; the caller's thread runs those). */
int sattn_project_uses_blas (const float *Wt, size_t n, size_t d_in,
                             size_t d_out);

/* Columns [c0, c1) of sattn_project (y's other columns untouched), with
 * the register-tiled loop (never BLAS). */
void sattn_project_cols (const float *Wt, const float *b, const float *x,
                         size_t n, size_t d_in, size_t d_out, size_t c0,
                         size_t c1, size_t ldx, float *y, size_t ldy);

/* linear.c: linear layers summed in double, one chain per entry over the
 * inner index in order from the bias (NULL: 0), weights Wt (din × n at
 * row stride ldw) and bias as doubles.  The inputs must hold float values
 * (then every product is exact and every ISA gives the same bytes).
 * sattn_linear_d: double rows in and out (the feed-forward, a whole
 * model's head);
 * sattn_linear_f: float rows in, each entry rounded to float once. */
void sattn_linear_d (const double *x, size_t ldx, size_t rows, const double *Wt,
                     size_t ldw, const double *b, size_t din, size_t n,
                     double *y, size_t ldy);
void sattn_linear_f (const float *x, size_t ldx, size_t rows, const double *Wt,
                     size_t ldw, const double *b, size_t din, size_t n,
                     float *y, size_t ldy);
/* Float rows in, double rows out (a whole model's embedding). */
void sattn_linear_fd (const float *x, size_t ldx, size_t rows, const double *Wt,
                      size_t ldw, const double *b, size_t din, size_t n,
                      double *y, size_t ldy);
/* Columns [c0, c1) of the projection with weights Wt (one of m's wq, wk,
 * wv, wo, or NULL) and bias b: summed in double (sattn_linear_f) when m
 * keeps a double copy of Wt (see SattnModel), else sattn_project_cols. */
void sattn_project_cols_prec (const SattnModel *m, const float *Wt,
                              const float *b, const float *x, size_t n,
                              size_t d_in, size_t d_out, size_t c0, size_t c1,
                              size_t ldx, float *y, size_t ldy);
/* The same over all columns, or sattn_project (BLAS for large blocks)
 * for the projections that sum in float. */
void sattn_project_prec (const SattnModel *m, const float *Wt, const float *b,
                         const float *x, size_t n, size_t d_in, size_t d_out,
                         size_t ldx, float *y, size_t ldy);
/* Nonzero when m sums the projection with weights Wt in double. */
int sattn_project_is_double (const SattnModel *m, const float *Wt);

/* pool.c: the worker threads of one stream. */
#define SATTN_MAX_THREADS 256
typedef struct SattnPool SattnPool;
typedef void (*SattnTaskFn) (void *ctx, size_t task, unsigned worker);
/* CPUs this process may run on (affinity mask), at least 1. */
unsigned sattn_available_cpus (void);
/* SattnStreamConfig.threads -> total threads (caller included), >= 1. */
unsigned sattn_resolve_threads (int threads);
/* n_threads total threads, caller included: n_threads - 1 workers.
 * Returns NULL for n_threads <= 1 and on failure (tell them apart by
 * n_threads). */
SattnPool *sattn_pool_new (unsigned n_threads);
void sattn_pool_free (SattnPool *p);
/* Bytes sattn_pool_new allocates, worker stacks included. */
size_t sattn_pool_bytes (unsigned n_threads);
unsigned sattn_pool_threads (const SattnPool *p);
/* fn (ctx, i, worker) for every i in [0, n), worker in [0, threads): the
 * caller is worker 0.  Returns when all are done.  p NULL: serial. */
void sattn_pool_run (SattnPool *p, size_t n, SattnTaskFn fn, void *ctx);
/* The same, then fn2 (ctx2, i, worker) for every i in [0, n2) once all of
 * the first n are done, in the same run: one publication, each thread
 * goes on to the second phase as soon as the first is complete (no
 * second wake-up).  n2 = 0: sattn_pool_run. */
void sattn_pool_run2 (SattnPool *p, size_t n, SattnTaskFn fn, void *ctx,
                      size_t n2, SattnTaskFn fn2, void *ctx2);
/* The frame-usability rule (SattnFrameFault in sattn.h), the one place it
 * is written: x is the frame (d_model floats), q / k (dq) and v (dv) its
 * projections; flagged: the caller marked it invalid.  q, k and v NULL:
 * the input's part of the rule only (flagged, non-finite samples), for a
 * frame not projected yet; x NULL too: the flag only. */
SattnFrameFault sattn_frame_fault (const SattnModel *m, int flagged,
                                   const float *x, const float *q,
                                   const float *k, const float *v);
/* Whether sattn_frame_fault (m, valid && !valid[i], x + i d_model,
 * q + i dq, k + i dq, v + i dv) is SATTN_FRAME_OK for every i < cnt (rows
 * contiguous; valid and the rows NULL as there), with one test per block
 * instead of one per frame: a push whose frames are all usable (the
 * common one) then needs no test per frame.  0 does not say which frames
 * are unusable: ask sattn_frame_fault. */
int sattn_frames_ok (const SattnModel *m, size_t cnt, const uint8_t *valid,
                     const float *x, const float *q, const float *k,
                     const float *v);

/* Output rows (rows × d_out, stride ldo) that overflowed (their output
 * projection, or an encoder layer's parts) become zeros; row_ok[i] (may
 * be NULL) is cleared for them.  Each is counted in counts[part[i]]
 * (counts may be NULL; part NULL: the output projection, the only part
 * outside an encoder layer).  Returns how many there were. */
size_t sattn_zero_overflowed_rows (const SattnModel *m, float *out, size_t rows,
                                   size_t ldo, uint8_t *row_ok,
                                   const uint8_t *part, uint64_t *counts);

/* core/cpu: the kernels, one table per SIMD level (kernels-portable.c,
 * kernels-avx2.c, kernels-avx512.c), the CPU's chosen once (isa.c); the
 * functions below call through it.  Every level gives each function's
 * result to the byte that level always gave.  SATTN_SIMD=0 / 1 in the
 * environment caps the level (portable / AVX2). */
int sattn_simd_level (void); /* 0 portable, 1 AVX2+FMA, 2 AVX-512 */
/* Tests only: the level (and its table) from now on, in every thread. */
void sattn_simd_force (int level);
void sattn_qk (const float *q, size_t ldq, const float *kt, size_t ldkt,
               size_t m, size_t nk, size_t dh, float *S, size_t lds);
/* sattn_qk, also giving rmax[i] = the max of row i's nk scores, NaN scores
 * skipped, or NaN where it was not taken (only the AVX-512 tiles of eight
 * rows take it, as they store the scores).  A caller that skips the NaN
 * test on the strength of rmax tests the row sum instead: the exp pass
 * turns a NaN input into a NaN sum. */
void sattn_qk_max (const float *q, size_t ldq, const float *kt, size_t ldkt,
                   size_t m, size_t nk, size_t dh, float *S, size_t lds,
                   float *rmax);
/* The exp pass of the rows i < m of S (stride lds, n scores each) with
 * rows[i] == 1, x = S * scale - qmax[i] * scale (qmax from sattn_qk_max,
 * finite): norm[i] = 1 / the row sum; rows[i] = 2 instead where the sum is
 * NaN (a NaN score; the row's scores are then overwritten). */
void sattn_softmax_rows (float *S, size_t lds, size_t m, size_t n,
                         const float *qmax, float scale, uint8_t *rows,
                         float *norm);
void sattn_pv (const float *P, size_t ldp, size_t m, size_t nk, const float *v,
               size_t ldv, size_t dv, float *O, size_t ldo);
/* sattn_pv, each row i of O then multiplied by norm[i] (as sattn_mul
 * would: the same bytes); nonzero when every value of O is finite. */
int sattn_pv_norm (const float *P, size_t ldp, size_t m, size_t nk,
                   const float *v, size_t ldv, size_t dv, const float *norm,
                   float *O, size_t ldo);
/* Softmax pass 1 over s[0, n): scale; entries with ok[j] == 0 (ok may be
 * NULL) become -inf; NaN scores become NaN markers.  counts[] += {valid,
 * NaN, +inf, -inf}.  Returns the max over valid entries (-inf if none). */
float sattn_softmax_scan (float *s, size_t n, const uint8_t *ok, float scale,
                          size_t counts[4]);
void sattn_mul (float *y, size_t n, float a);
/* Nonzero when every one of n floats is finite (tested on the bits:
 * vectorised, exact). */
int sattn_finite (const float *x, size_t n);
/* Softmax pass 1 when nothing is masked: the max of s[0, n) (-inf when
 * n = 0); *finite = 0 when some entry is NaN or +-inf (the caller then
 * takes sattn_softmax_scan). */
float sattn_softmax_max (const float *s, size_t n, int *finite);
/* y[i] = exp (y[i] * scale - mx) with x_i = y[i] * scale rounded first
 * (all x_i <= mx, -inf allowed; scale > 0); returns the sum. */
double sattn_exp_sum (float *y, size_t n, float scale, float mx);
/* The same, also returning *ex = sum of e_i x_i over entries with
 * x_i > -inf and *xmin = min x_i over those (for statistics), where
 * x_i = y_i * scale - mx. */
double sattn_exp_sum_stats (float *y, size_t n, float scale, float mx,
                            double *ex, float *xmin);
/* Rows x[i * ldx] (i < cnt), columns [0, w), into rows i of dst (stride
 * ldd) and again mir floats further (the ring's mirror), zeros where
 * ok[i] == 0 (ok NULL: every row copied); sattn_transpose_rows writes
 * them transposed: dst[t * ldd + i] and dst[t * ldd + i + mir]. */
void sattn_copy_rows (const float *x, size_t ldx, const uint8_t *ok, size_t cnt,
                      size_t w, float *dst, size_t ldd, size_t mir);
void sattn_transpose_rows (const float *x, size_t ldx, const uint8_t *ok,
                           size_t cnt, size_t w, float *dst, size_t ldd,
                           size_t mir);
/* y[i * ldy + j] += b[j] for rows i < n and columns j < k. */
void sattn_add_bias (float *y, size_t ldy, size_t n, const float *b, size_t k);

/* The kernel table of one level: the functions above (sattn_qk is qk,
 * and so on) and linear.c's loops (see sattn_linear_d): double rows into
 * double (linear_dd) or float (linear_df) rows, float rows into float
 * rows (linear_ff), each with the signature of sattn_linear_d; widen:
 * rows × din floats (row stride ldx) into rows of din doubles; erf: y[i]
 * = erf (x[i]) in float, within 0.68 ulp (kernels-portable.h says how);
 * gelu: h[i] = GELU (h[i]) rounded to float, by that erf (see
 * core/nn/encoder.c); relu: h[i] = max (h[i] rounded to float, 0) (NaN and
 * -0 give +0); these three give the same bytes at every level. */
typedef void (*SattnQkFn) (const float *q, size_t ldq, const float *kt,
                           size_t ldkt, size_t m, size_t nk, size_t dh,
                           float *S, size_t lds);
typedef void (*SattnQkMaxFn) (const float *q, size_t ldq, const float *kt,
                              size_t ldkt, size_t m, size_t nk, size_t dh,
                              float *S, size_t lds, float *rmax);
typedef void (*SattnSoftmaxRowsFn) (float *S, size_t lds, size_t m, size_t n,
                                    const float *qmax, float scale,
                                    uint8_t *rows, float *norm);
typedef void (*SattnPvFn) (const float *P, size_t ldp, size_t m, size_t nk,
                           const float *v, size_t ldv, size_t dv, float *O,
                           size_t ldo);
typedef int (*SattnPvNormFn) (const float *P, size_t ldp, size_t m, size_t nk,
                              const float *v, size_t ldv, size_t dv,
                              const float *norm, float *O, size_t ldo);
typedef float (*SattnScanFn) (float *s, size_t n, const uint8_t *ok,
                              float scale, size_t counts[4]);
typedef float (*SattnMaxFn) (const float *s, size_t n, int *finite);
typedef double (*SattnExpSumFn) (float *y, size_t n, float scale, float mx);
typedef double (*SattnExpSumStatsFn) (float *y, size_t n, float scale, float mx,
                                      double *ex, float *xmin);
typedef void (*SattnMulFn) (float *y, size_t n, float a);
typedef int (*SattnFiniteFn) (const float *x, size_t n);
typedef void (*SattnRowsFn) (const float *x, size_t ldx, const uint8_t *ok,
                             size_t cnt, size_t w, float *dst, size_t ldd,
                             size_t mir);
typedef void (*SattnAddBiasFn) (float *y, size_t ldy, size_t n, const float *b,
                                size_t k);
typedef void (*SattnLinearDDFn) (const double *x, size_t ldx, size_t rows,
                                 const double *Wt, size_t ldw, const double *b,
                                 size_t din, size_t n, double *y, size_t ldy);
typedef void (*SattnLinearDFFn) (const double *x, size_t ldx, size_t rows,
                                 const double *Wt, size_t ldw, const double *b,
                                 size_t din, size_t n, float *y, size_t ldy);
typedef void (*SattnLinearFFFn) (const float *x, size_t ldx, size_t rows,
                                 const double *Wt, size_t ldw, const double *b,
                                 size_t din, size_t n, float *y, size_t ldy);
typedef void (*SattnWidenFn) (const float *x, size_t ldx, size_t rows,
                              size_t din, double *xb);
typedef void (*SattnErfFn) (const float *x, float *y, size_t n);
typedef void (*SattnActFn) (double *h, size_t n);

typedef struct {
  const char *name; /* "portable", "avx2", "avx512" */
  SattnQkFn qk;
  SattnQkMaxFn qk_max;
  SattnSoftmaxRowsFn softmax_rows;
  SattnPvFn pv;
  SattnPvNormFn pv_norm;
  SattnScanFn softmax_scan;
  SattnMaxFn softmax_max;
  SattnExpSumFn exp_sum;
  SattnExpSumStatsFn exp_sum_stats;
  SattnMulFn mul;
  SattnFiniteFn finite;
  SattnRowsFn copy_rows, transpose_rows;
  SattnAddBiasFn add_bias;
  SattnLinearDDFn linear_dd;
  SattnLinearDFFn linear_df;
  SattnLinearFFFn linear_ff;
  SattnWidenFn widen;
  SattnErfFn erf;
  SattnActFn gelu, relu;
} SattnKernels;

/* The table of the level sattn_simd_level () says (chosen at the first
 * call; sattn_simd_force switches it).  A caller that makes many calls
 * in a row may take it once. */
const SattnKernels *sattn_kernels (void);

#endif
