/* core/nn: the operations of one layer on a SattnModel (the layer's
 * configuration and weights, defined here): the attention (plain tensors
 * and strides), positions (RoPE, ALiBi), the projections at the layer's
 * precision, the frame rule, the encoder layer's per-row parts.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_NN_H
#define SATTN_NN_H

#include "cpu/cpu.h"

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
   * register-tiled loop (see project_head in stream/incremental.c);
   * V's columns only when V sums in float (wvd NULL), the only case that
   * reads them (precision=fast streams of a model with wvd project from
   * wq, wk and wv instead).  Built whatever streams the model will serve
   * (a model holds no thread count): only streams with workers read it;
   * NULL otherwise. */
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
  /* The same as floats (w1f: d_model × d_ff, w2f: d_ff × d_model; b1f,
   * b2f NULL without bias) in a whole model's layers, built at load
   * (sattn_net_fast_init): at precision=fast (sattn_layer_rows' fast) their
   * feed-forward sums in float, their residuals are float adds and their
   * LayerNorms float lanes; NULL in a layer model, whose feed-forward
   * stays in double at either precision. */
  float *w1f, *b1f, *w2f, *b2f;
  float *n1w, *n1b, *n2w, *n2b;
  float *zq, *zk, *zv;
  /* Projections summed in double (linear.c): double copies of their
   * weights and biases, NULL for those summed in float (and for identity
   * projections).  V and the output projection always sum in double:
   * that puts attention-only models at or below PyTorch float32's error
   * in nearly every draw, where summing in float lands around it
   * (docs/performance.md, "Numerical error").  Encoder layers and
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
 * projections taken from scr->q, scr->k, scr->v.  fast: precision=fast
 * (see sattn_project_cols_prec); the one-shot run computes exactly. */
void sattn_attend_project (const SattnModel *m, int fast, const float *x,
                           size_t n, float *xn, float *q, float *k, float *v,
                           uint64_t pos0);
void sattn_attend_finish (const SattnModel *m, const float *x, size_t n,
                          const SattnMask *mask, float *out, float *weights,
                          SattnStats *stats, int count_rows,
                          SattnAttendScratch *scr);

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
 * SATTN_PART_UNKNOWN.  fast: precision=fast (see w1f). */
void sattn_layer_rows (const SattnModel *m, int fast, const float *x,
                       size_t ldx, float *y, size_t ldy, size_t rows,
                       float *scratch, uint8_t *part);
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
 * parameters, from x into y (fast: as sattn_layer_rows'). */
void sattn_layer_norm1 (const SattnModel *m, int fast, const float *x,
                        size_t ldx, float *y, size_t ldy, size_t rows);

/* Rotate the Q and K rows q and k (heads * d_head floats each,
 * head-major) of the frame at absolute index pos by the model's RoPE (the
 * angles computed once for both); no-op without RoPE. */
void sattn_rope_qk (const SattnModel *m, float *q, float *k, uint64_t pos);
/* Nonzero when the model rotates Q and K. */
int sattn_model_rope (const SattnModel *m);

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

/* Output projection of m rows of O (m × dv) into out (stride ldo), fast
 * as sattn_project_prec's. */
void sattn_output_project (const SattnModel *m, int fast, const float *o,
                           size_t rows, float *out, size_t ldo);

/* One head, query rows [r0, r1) of the window described by a: scores in
 * S (scratch, (r1 - r0) × (nk + n_extra)), output into the rows of a->o and
 * a->weights (when set) that belong to them; statistics into stats (may be
 * NULL; a->stats is not used).  Tasks on different (head, row range) pairs
 * write disjoint memory. */
void sattn_attend_rows (const SattnModel *m, const SattnAttnArgs *a, size_t h,
                        size_t r0, size_t r1, float *S, SattnStats *stats);

/* Columns [c0, c1) of the projection with weights Wt (one of m's wq, wk,
 * wv, wo, or NULL) and bias b: summed in double (sattn_linear_f) when m
 * keeps a double copy of Wt (see SattnModel) and fast is 0, else
 * sattn_project_cols.  fast: precision=fast, every projection in float
 * (the executors pass it; the model is the same at either precision). */
void sattn_project_cols_prec (const SattnModel *m, int fast, const float *Wt,
                              const float *b, const float *x, size_t n,
                              size_t d_in, size_t d_out, size_t c0, size_t c1,
                              size_t ldx, float *y, size_t ldy);
/* The same over all columns, or sattn_project (BLAS for large blocks)
 * for the projections that sum in float. */
void sattn_project_prec (const SattnModel *m, int fast, const float *Wt,
                         const float *b, const float *x, size_t n, size_t d_in,
                         size_t d_out, size_t ldx, float *y, size_t ldy);
/* Nonzero when m sums the projection with weights Wt in double at
 * precision fast. */
int sattn_project_is_double (const SattnModel *m, int fast, const float *Wt);

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

#endif
