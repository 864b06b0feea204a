/* The float64 reference of masked multi-head self-attention shared by
 * every test suite (core, element, weights), written straight from the
 * formula (no code shared with libsattn):
 *
 *   Q = x Wq^T + bq,  K = x Wk^T + bk,  V = x Wv^T + bv   (W NULL = identity)
 *   head h: columns [h*d_head, (h+1)*d_head) of Q and K,
 *           columns [h*d_value, (h+1)*d_value) of V      (nn.MultiheadAttention)
 *   extra keys (always visible): bias_k / bias_v, then the zero key / value
 *   s_ij = scale * Q_i,h . K_j,h   (f32_scores: a dot product or scaled
 *     score beyond the float32 range is +-inf, as float32 arithmetic makes
 *     it; the scale is then usually given rounded to float)
 *   key j hidden from query i when: key_valid[j] == 0, row j of x is not
 *     finite, allow[i*n+j] == 0, causal and j > i, lookback L > 0 and
 *     i - j > L; NaN scores are hidden too
 *   P_i = softmax over the visible keys, max-subtracted, in double; +inf
 *     scores share the mass equally, as do all visible keys when every
 *     visible score is -inf; no visible key: P_i = 0 (context 0)
 *   O_i = concat_h P_i,h V_h;  out_i = O_i Wo^T + bo (Wo NULL = identity)
 *   query_valid[i] == 0: out_i = 0 and P_i = 0.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_REFERENCE_H
#define SATTN_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  size_t d_model, heads, d_head, d_value, d_out; /* all resolved (no 0) */
  double scale;                                  /* resolved */
  int causal;
  size_t lookback;
  const float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
  const float *bias_k, *bias_v;
  int add_zero_attn;
  int f32_scores; /* scores overflow as float32 scores do (above) */
  /* Positions (0 none, 1 rope, 2 rope-interleaved, 3 alibi: the values of
   * SattnPositions), from the formula in long double:
   *   rope: theta_k = base^(-2k/d_head), angle = (pos0 + i) theta_k,
   *         pairs (k, k + d_head/2) (interleaved: (2k, 2k+1)) of each
   *         head of Q_i and K_i rotated by it after the bias;
   *   alibi: s_ij += -slope_h |i - j|, slope_h of Press et al. written
   *         from their recursive rule. */
  int positions;
  double rope_base; /* resolved (10000 for the default) */
  uint64_t pos0;    /* absolute index of row 0 */
} RefModel;

/* Encoder layer (nn.TransformerEncoderLayer) around the model's attention:
 *   post-norm: y = LN1 (x + SA (x)); out = LN2 (y + FF (y))
 *   pre-norm:  y = x + SA (LN1 (x)); out = y + FF (LN2 (y))
 *   FF (u) = W2 act (W1 u + b1) + b2, act = relu or exact gelu;
 *   LN (u) = (u - mean) / sqrt (var + eps) * w + b (biased variance). */
typedef struct {
  size_t d_ff;
  const float *w1, *b1, *w2, *b2;     /* PyTorch layout */
  const float *n1w, *n1b, *n2w, *n2b; /* NULL = 1 / 0 */
  int gelu, norm_first;
  double eps;
} RefLayer;

/* x: n × d_model (double, all valid), out: n × d_model. */
void ref_encoder (const RefModel *m, const RefLayer *l, const double *x,
                  size_t n, double *out);

/* ALiBi slopes of Press et al. (their get_slopes), heads of them. */
void ref_alibi_slopes (size_t heads, double *slopes);

typedef struct {
  size_t rows;         /* (head, valid query) rows */
  size_t fully_masked; /* of those, rows without a visible key */
  size_t nonfinite;    /* NaN / inf scores among not-otherwise-hidden keys */
  double score_min, score_max; /* finite visible scaled scores */
  double lse_min, lse_max;     /* rows whose log-sum-exp is finite */
  double max_weight_sum;
  double entropy_sum; /* entropy / log(visible keys); 1 key: 0 */
  /* Saturation: rows with >= 2 visible keys whose max weight exceeds the
   * threshold (`saturated`), or exceeds it by the margin 1e-6 (sat_lo) or
   * comes within 1e-6 of it (sat_hi): a float32 implementation lies in
   * [sat_lo, sat_hi].  sat_margin: min over rows with a visible key of
   * |max weight - threshold| (how close a row came to the line). */
  size_t saturated, sat_lo, sat_hi;
  double sat_margin;
  double sat_threshold; /* set by the caller before the call (0 = 0.99) */
} RefStats;

size_t ref_extra_keys (const RefModel *m);

/* out: n × d_out; weights (may be NULL): heads × n × (n + extra);
 * st (may be NULL): filled (sat_threshold read first). */
void ref_attend (const RefModel *m, const float *x, size_t n,
                 const uint8_t *key_valid, const uint8_t *query_valid,
                 const uint8_t *allow, double *out, double *weights,
                 RefStats *st);

/* Whether the float32 Q, K or V projection of frame x (d_model floats,
 * finite) overflows: some entry of it, computed in double, rounds to float
 * infinity. */
int ref_projection_overflows (const RefModel *m, const float *x);

/* Errors of computed values against their references, for parity checks:
 * max-abs (a NaN error counts as the worst, +inf), the largest reference
 * magnitude, the sums of squared errors and of squared references, the
 * count.  Start from { 0 }. */
typedef struct {
  double max_abs, max_ref, err2, ref2;
  size_t count;
} RefDiff;

void ref_diff_add (RefDiff *d, double got, double want);
/* err2 / ref2, or err2 when every reference is 0. */
double ref_diff_nmse (const RefDiff *d);
/* The parity bound of float32 against a float64 reference that the
 * weights suites (reader, element) assert: max-abs <= 1e-5 (1 + the
 * largest reference magnitude). */
double ref_diff_bound (const RefDiff *d);

#endif
