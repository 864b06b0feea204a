/* core/model: immutable models -- a layer's constructor and checks
 * (model.c) and a whole model (net.c: its parts and blocks of windows;
 * front.c: its front end).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_MODEL_H
#define SATTN_MODEL_H

#include "nn/nn.h"

/* model/net.c: a whole model, [embed] -> layers[N] -> [final norm] ->
 * [pooling] -> [head].  Matrices transposed (in × out) in double: the
 * embedding, the head and the final norm sum in double, each result
 * rounded to float once where it leaves the model. */
typedef struct SattnNet {
  size_t d_frame, d; /* F floats per frame, D encoder width */
  size_t n_layers;
  SattnModel **layer; /* n_layers encoder-layer models on D */
  /* precision=fast (sattn_net_fast_init; each layer's feed-forward as
   * floats is its w1f ...): the front end's and the head's weights as
   * floats (NULL where the double ones are). */
  float *embed_wf, *embed_bf, *conv_wf, *conv_bf;
  float *head1_wf, *head1_bf, *head2_wf, *head2_bf;
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
/* The float copies precision=fast computes with (the layers' w1f ...,
 * embed_wf ...), built once the model is complete; SATTN_E_NOMEM when
 * they cannot be had. */
SattnStatus sattn_net_fast_init (SattnNet *net);

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
  int fast;                    /* precision=fast: the layers' and the
                                  head's float sums (the layers' fast) */
  struct SattnPool *pool;      /* not owned; NULL: serial */
  unsigned threads;
  float *x, *y;              /* rows × D: the layers' two buffers */
  uint8_t *kok;              /* rows: usable */
  uint8_t *qok;              /* rows shared between threads: kok as the
                                layer's attention saw it */
  float *q, *k, *v, *o;      /* rows × dq, dq, dv, dv (widest layer) */
  float *xn;                 /* rows × D: norm1 of pre-norm layers */
  float *kt;                 /* max_windows × dq × n: K transposed */
  float *S;                  /* threads × n × ncols scores */
  float *lscr;               /* threads × the layers' row scratch */
  size_t s_stride, l_stride; /* floats of S and lscr per thread */
  SattnStats *stats;         /* max_windows: each window's health */
  double *pooled;            /* max_windows × D */
  double *hidden, *logits;   /* the head's */
  float *headf;              /* D + hidden: the float head's rows */
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
 * strides F and D) = x W^T + b, one product (fast: summed in float). */
void sattn_net_embed (const SattnModel *m, const float *x, size_t rows,
                      double *e, int fast);
/* precision=fast's linear: y (rows × n doubles, stride ldy) = x W + b
 * summed in float (sattn_qk: one FMA chain per entry, the bias added
 * once), each entry widened; Wt din × n floats (row stride n). */
void sattn_net_linear_f32 (const float *x, size_t ldx, size_t rows,
                           const float *Wt, const float *b, size_t din,
                           size_t n, double *y, size_t ldy);
/* sattn_attend for a whole model: x (n × F frames) as one window,
 * mask->key_valid as key padding; out: n × D rows after the final norm;
 * weights: the last layer's. */
SattnStatus sattn_net_attend (const SattnModel *m, const float *x, size_t n,
                              const SattnMask *mask, float *out, float *weights,
                              SattnStats *stats);

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
 *   overflowed float32 here (then unusable); fast: the Linear or conv
 *   and its activation in float (precision=fast).  scratch: at least
 *   sattn_net_front_scratch (m, n) doubles. */
int sattn_net_standardize (const SattnModel *m, const float *x, double *xs,
                           double *ss, double *raw);
double sattn_net_window_rms (const double *raw, const uint8_t *ok, size_t n,
                             size_t values);
size_t sattn_net_front_scratch (const SattnModel *m, size_t n);
size_t sattn_net_front_window (const SattnModel *m, const double *xs,
                               const double *ss, const uint8_t *ok, size_t n,
                               float *x, uint8_t *kok, double *scratch,
                               uint64_t *overflow, int fast);
/* The contract's z of a pooled row p (D doubles): NaN when the model
 * records no pooled statistics. */
double sattn_net_pooled_z (const SattnModel *m, const double *p);

#endif
