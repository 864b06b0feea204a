/* Attention kernel: scores, masked stable softmax, P·V, the output
 * projection, and the one-shot attention of a layer (sattn_attend_run;
 * the public sattn_attend is model/model.c's).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "nn/nn.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

/* Masked stable softmax of one row in place, normalisation deferred.
 * s: ncols raw (unscaled) scores: nk window keys then the extra keys.
 * Visible window keys are [lo, hi) filtered by key_ok and allow; extra keys
 * are always visible.  On return s[j] * *norm is the weight of entry j,
 * exactly 0 for every masked entry (masked scores are never read after the
 * first pass, so a NaN there cannot leak): s holds exp (x - max) and *norm
 * = 1 / sum, or s holds the weights and *norm = 1 (the limits, a fully
 * masked row).  Returns the number of unmasked entries. */
/* softmax_row's pass 1: scale; masked entries become -inf, NaN scores
 * stay NaN as a marker and are counted in counts (valid, NaN, +inf, -inf;
 * for the common row below, only the max is taken).  Returns the max over
 * the visible entries; *escale: the scale the exp pass applies (1 once
 * this pass has scaled). */
static float
softmax_scan_row (float *restrict s, size_t nk, size_t ncols, size_t lo,
                  size_t hi, const uint8_t *restrict key_ok,
                  const uint8_t *restrict allow, float scale, size_t counts[4],
                  float *escale)
{
  float mx = -INFINITY;

  *escale = 1.0f;
  for (size_t j = 0; j < lo; j++)
    s[j] = -INFINITY;
  for (size_t j = hi; j < nk; j++)
    s[j] = -INFINITY;
  /* The common row: no key masked in [lo, hi), no mask, every score
   * finite.  Pass 1 is then only the max of the raw scores: with
   * 0 < scale <= 1 every scaled score is finite, the max of the scaled
   * scores is the scaled max (rounding is monotonic), every entry is
   * valid, and the exp pass scales each entry exactly as the scan below
   * would have (same values).  A NaN or +-inf score sends the row to the
   * scan, which counts them. */
  int fast = 0;
  if (key_ok == NULL && allow == NULL && scale <= 1.0f &&
      hi - lo + (ncols - nk) > 0) {
    int fin1, fin2 = 1;
    float m1 = sattn_softmax_max (s + lo, hi - lo, &fin1);
    float m2 = ncols > nk ? sattn_softmax_max (s + nk, ncols - nk, &fin2)
                          : -INFINITY;
    if (fin1 && fin2) {
      fast = 1;
      mx = (m1 > m2 ? m1 : m2) * scale;
      counts[0] = hi - lo + (ncols - nk);
      *escale = scale;
    }
  }
  if (fast) {
    /* counts and mx set above */
  } else if (allow == NULL) {
    mx = sattn_softmax_scan (s + lo, hi - lo, key_ok ? key_ok + lo : NULL,
                             scale, counts);
  } else {
    for (size_t j = lo; j < hi; j++) {
      float v = s[j] * scale;
      if ((key_ok != NULL && !key_ok[j]) || !allow[j])
        s[j] = -INFINITY;
      else if (v != v) {
        counts[1]++;
        s[j] = NAN;
      } else {
        counts[0]++;
        counts[2] += v == INFINITY;
        counts[3] += v == -INFINITY;
        s[j] = v;
        mx = v > mx ? v : mx;
      }
    }
  }
  if (!fast && ncols > nk) {
    float mx2 = sattn_softmax_scan (s + nk, ncols - nk, NULL, scale, counts);
    mx = mx2 > mx ? mx2 : mx;
  }
  return mx;
}

/* softmax_row's row into the statistics: counts as softmax_scan_row
 * gives them, the row's score range, log-sum-exp, largest weight and
 * entropy. */
static void
softmax_row_stats (SattnStats *stats, const size_t counts[4], double smin,
                   double smax, double lse, float wmax, double ent,
                   float sat_threshold)
{
  const size_t n_valid = counts[0];

  stats->rows++;
  stats->nonfinite_scores += counts[1] + counts[2] + counts[3];
  if (n_valid == 0) {
    stats->fully_masked_rows++;
  } else {
    if (smin < stats->score_min)
      stats->score_min = smin;
    if (smax > stats->score_max)
      stats->score_max = smax;
    if (isfinite (lse)) {
      if (lse < stats->lse_min)
        stats->lse_min = lse;
      if (lse > stats->lse_max)
        stats->lse_max = lse;
    }
    stats->max_weight_sum += wmax;
    if (n_valid > 1)
      stats->entropy_sum += ent / log ((double) n_valid);
    /* A row with one visible key has no choice to saturate. */
    if (n_valid > 1 && wmax > sat_threshold)
      stats->saturated_rows++;
  }
}

static size_t
softmax_row (float *restrict s, size_t nk, size_t ncols, size_t lo, size_t hi,
             const uint8_t *restrict key_ok, const uint8_t *restrict allow,
             float scale, SattnStats *stats, float sat_threshold, float *norm)
{
  size_t counts[4] = { 0, 0, 0, 0 };
  float escale;
  const float mx = softmax_scan_row (s, nk, ncols, lo, hi, key_ok, allow, scale,
                                     counts, &escale);
  const size_t n_valid = counts[0], n_nan = counts[1], n_pinf = counts[2];

  double smin = INFINITY, smax = -INFINITY, lse = NAN, ent = NAN;
  float wmax = 0.0f;
  *norm = 1.0f;

  if (n_valid == 0) {
    memset (s, 0, ncols * sizeof (float));
  } else if (n_pinf > 0 || mx == -INFINITY) {
    /* The limit: the mass is shared by the +inf entries, or by every
     * visible entry when all of them are -inf. */
    if (stats != NULL)
      for (size_t j = 0; j < ncols; j++)
        if (isfinite (s[j])) {
          smin = s[j] < smin ? s[j] : smin;
          smax = s[j] > smax ? s[j] : smax;
        }
    size_t cnt = n_pinf > 0 ? n_pinf : n_valid;
    float w = 1.0f / (float) cnt;
    if (n_pinf > 0) {
      for (size_t j = 0; j < ncols; j++)
        s[j] = s[j] == INFINITY ? w : 0.0f;
    } else {
      /* Recompute visibility: every visible score is -inf here. */
      for (size_t j = 0; j < ncols; j++) {
        int vis = j >= nk ||
                  (j >= lo && j < hi && (key_ok == NULL || key_ok[j]) &&
                   (allow == NULL || allow[j]));
        s[j] = vis && !isnan (s[j]) ? w : 0.0f;
      }
    }
    lse = n_pinf > 0 ? INFINITY : -INFINITY;
    if (stats != NULL) {
      wmax = w;
      ent = log ((double) cnt);
    }
  } else if (stats != NULL) {
    /* The same as below, with the statistics from the same pass:
     * max weight = 1 / sum (the max entry has e = 1), entropy =
     * log (sum) - sum (e x) / sum with x = score - max. */
    if (n_nan > 0)
      for (size_t j = 0; j < ncols; j++)
        if (isnan (s[j]))
          s[j] = -INFINITY;
    double ex;
    float xmin;
    double sum = sattn_exp_sum_stats (s, ncols, escale, mx, &ex, &xmin);
    *norm = (float) (1.0 / sum);
    lse = (double) mx + log (sum);
    smax = mx;
    smin = (double) mx + xmin;
    wmax = (float) (1.0 / sum);
    ent = log (sum) - ex / sum;
    if (ent < 0.0)
      ent = 0.0;
  } else {
    /* Stable: subtract the max over unmasked entries; exp(-inf) = 0. */
    if (n_nan > 0)
      for (size_t j = 0; j < ncols; j++)
        if (isnan (s[j]))
          s[j] = -INFINITY;
    double sum = sattn_exp_sum (s, ncols, escale, mx);
    /* sum >= 1: the max entry contributes exp(0) = 1. */
    *norm = (float) (1.0 / sum);
    lse = (double) mx + log (sum);
  }

  if (stats != NULL)
    softmax_row_stats (stats, counts, smin, smax, lse, wmax, ent,
                       sat_threshold);
  return n_valid;
}

/* O rows [0, M) of one head = P V_h over the window keys plus the extra
 * values (P: M rows of S, stride ncols). */
static void
pv_rows (const SattnModel *m, const SattnAttnArgs *a, size_t h, const float *P,
         size_t M, float *Oh)
{
  const size_t dvh = m->cfg.d_value, nk = a->nk, ncols = nk + m->n_extra;
  const size_t ldo = a->ldo ? a->ldo : m->dv;
  sattn_pv (P, ncols, M, nk, a->v + h * (a->v_head ? a->v_head : dvh), a->ldv,
            dvh, Oh, ldo);
  for (size_t e = 0; e < m->n_extra; e++) {
    const float *ve = m->v_extra + e * m->dv + h * dvh;
    for (size_t i = 0; i < M; i++) {
      float p = P[i * ncols + nk + e];
      if (p == 0.0f)
        continue;
      float *oi = Oh + i * ldo;
      for (size_t t = 0; t < dvh; t++)
        oi[t] += p * ve[t];
    }
  }
}

/* Rows of O are convex combinations of finite values (the weights sum to
 * 1), so mathematically |O| <= max |V| <= FLT_MAX; float rounding of
 * weights summing to 1 + a few ulp can still carry a value at the very
 * edge of the range (|V| near FLT_MAX) past it.  Such values are clamped
 * back to +-FLT_MAX, within rounding of the exact result.
 * O was computed as (E V) / sum; E V (E = exp (x - max) <= 1) can
 * overflow where P V does not: such a row is first computed again from
 * the normalised weights. */
static void
clamp_context (const SattnModel *m, const SattnAttnArgs *a, size_t h, float *S,
               const float *norm, float *o, size_t rows)
{
  const size_t ld = a->ldo ? a->ldo : m->dv, dv = m->cfg.d_value;
  const size_t ncols = a->nk + m->n_extra;
  for (size_t i = 0; i < rows; i++) {
    float *r = o + i * ld;
    if (sattn_finite (r, dv))
      continue;
    if (norm[i] != 1.0f) {
      sattn_mul (S + i * ncols, ncols, norm[i]);
      pv_rows (m, a, h, S + i * ncols, 1, r);
      if (sattn_finite (r, dv))
        continue;
    }
    for (size_t t = 0; t < dv; t++) {
      if (r[t] > FLT_MAX)
        r[t] = FLT_MAX;
      else if (r[t] < -FLT_MAX)
        r[t] = -FLT_MAX;
      else if (r[t] != r[t])
        r[t] = 0.0f; /* cannot happen: no Inf - Inf above */
    }
  }
}

/* Query rows per block of sattn_attend_rows (a multiple of 8: every row
 * goes through the same P V code path as without blocks). */
#define ROWS_BLOCK 64

static void
attend_block (const SattnModel *m, const SattnAttnArgs *a, size_t h, size_t r0,
              size_t r1, float *S, SattnStats *stats)
{
  const SattnConfig *c = &m->cfg;
  const size_t dh = c->d_head, dvh = c->d_value;
  const size_t nk = a->nk, ncols = nk + m->n_extra, M = r1 - r0;
  const size_t ldo = a->ldo ? a->ldo : m->dv;
  const float *Qh = a->q + r0 * a->ldq + h * (a->q_head ? a->q_head : dh);
  const float *Kth = a->kt + h * dh * a->ldkt;
  float *Oh = a->o + r0 * ldo + h * (a->o_head ? a->o_head : dvh);
  const uint8_t *query_ok = a->query_ok ? a->query_ok + r0 : NULL;
  float norm[ROWS_BLOCK];

  /* Raw scores for the window keys, then the extra keys by hand.  Rows
   * that may take softmax_row_qmax get their max from Q·Kᵀ. */
  float qmax[ROWS_BLOCK];
  const int use_qmax = stats == NULL && a->allow == NULL && m->alibi == NULL &&
                       m->n_extra == 0 && c->scale > 0.0f && c->scale <= 1.0f;
  if (use_qmax)
    sattn_qk_max (Qh, a->ldq, Kth, a->ldkt, M, nk, dh, S, ncols, qmax);
  else
    sattn_qk (Qh, a->ldq, Kth, a->ldkt, M, nk, dh, S, ncols);
  for (size_t e = 0; e < m->n_extra; e++) {
    const float *ke = m->k_extra + e * m->dq + h * dh;
    for (size_t i = 0; i < M; i++) {
      const float *qi = Qh + i * a->ldq;
      float acc = 0.0f;
      for (size_t t = 0; t < dh; t++)
        acc += qi[t] * ke[t];
      S[i * ncols + nk + e] = acc;
    }
  }

  /* Every key usable (the common window): the softmax need not look. */
  const uint8_t *key_ok = a->key_ok != NULL && memchr (a->key_ok, 0, nk)
                              ? a->key_ok
                              : NULL;
  /* The common rows without statistics when Q·Kᵀ took their max (qmax,
   * NaN scores skipped; see sattn_qk_max): every key visible, nothing
   * masked, 0 < scale <= 1, no extra keys, qmax finite.  Their values
   * are those of softmax_row's common row: the same max (a +-inf score
   * makes qmax infinite; -inf scores are valid entries whose exponential
   * is 0 either way, and only the statistics count them), the same exp
   * pass, all rows in one call.  A NaN score, which the max skipped,
   * makes the sum NaN (fast[i] = 2): the row takes softmax_row below, its
   * scores computed again (the exp pass overwrote them). */
  uint8_t fast[ROWS_BLOCK];
  int any_fast = 0;
  for (size_t i = 0; i < M; i++) {
    size_t lo, hi;
    sattn_visible_keys (c, a->q0 + r0 + i, nk, &lo, &hi);
    fast[i] = (uint8_t) (use_qmax && key_ok == NULL && lo == 0 && hi == nk &&
                         (query_ok == NULL || query_ok[i]) &&
                         qmax[i] > -INFINITY && qmax[i] < INFINITY);
    any_fast |= fast[i];
  }
  if (any_fast)
    sattn_softmax_rows (S, ncols, M, nk, qmax, c->scale, fast, norm);
  for (size_t i = 0; i < M; i++) {
    float *row = S + i * ncols;
    if (fast[i] == 1)
      continue;
    norm[i] = 1.0f;
    if (query_ok != NULL && !query_ok[i]) {
      memset (row, 0, ncols * sizeof (float));
      continue;
    }
    size_t qpos = a->q0 + r0 + i;
    size_t lo, hi;
    sattn_visible_keys (c, qpos, nk, &lo, &hi);
    if (fast[i] == 2)
      sattn_qk (Qh + i * a->ldq, a->ldq, Kth, a->ldkt, 1, nk, dh, row, ncols);
    float scale = c->scale;
    if (m->alibi != NULL) {
      /* ALiBi: scaled score - slope * |i - j| over the visible range (no
       * extra keys with positions); the softmax then scales by 1. */
      const float slope = m->alibi[h];
      for (size_t j = lo; j < hi; j++) {
        size_t dist = j > qpos ? j - qpos : qpos - j;
        row[j] = row[j] * scale - slope * (float) dist;
      }
      scale = 1.0f;
    }
    softmax_row (row, nk, ncols, lo, hi, key_ok,
                 a->allow ? a->allow + (r0 + i) * a->ld_allow : NULL, scale,
                 stats, a->sat_threshold, norm + i);
  }

  /* The weights, when kept: S normalised, the same product as the
   * normalisation pass this replaces. */
  if (a->weights != NULL)
    for (size_t i = 0; i < M; i++) {
      float *w = a->weights + (h * a->m + r0 + i) * ncols;
      memcpy (w, S + i * ncols, ncols * sizeof (float));
      if (norm[i] != 1.0f)
        sattn_mul (w, ncols, norm[i]);
    }

  /* O_h = (E V_h) / sum: dvh products per row instead of ncols.  The
   * same whether or not the weights are kept. */
  int finite = 0;
  if (m->n_extra == 0) {
    /* Normalised as the rows are stored, tested for NaN/+-inf there: the
     * rows need no second pass when all are finite. */
    finite = sattn_pv_norm (S, ncols, M, nk,
                            a->v + h * (a->v_head ? a->v_head : dvh), a->ldv,
                            dvh, norm, Oh, ldo);
  } else {
    pv_rows (m, a, h, S, M, Oh);
    for (size_t i = 0; i < M; i++)
      if (norm[i] != 1.0f)
        sattn_mul (Oh + i * ldo, dvh, norm[i]);
  }
  /* This task's rows and head columns only: tasks stay disjoint. */
  if (!finite)
    clamp_context (m, a, h, S, norm, Oh, M);
}

void
sattn_attend_rows (const SattnModel *m, const SattnAttnArgs *a, size_t h,
                   size_t r0, size_t r1, float *S, SattnStats *stats)
{
  for (size_t b = r0; b < r1; b += ROWS_BLOCK)
    attend_block (m, a, h, b, r1 - b < ROWS_BLOCK ? r1 : b + ROWS_BLOCK, S,
                  stats);
}

void
sattn_attend_window (const SattnModel *m, const SattnAttnArgs *a)
{
  /* Every head over all rows, scores in the (m × ncols) scratch. */
  for (size_t h = 0; h < m->cfg.heads; h++)
    sattn_attend_rows (m, a, h, 0, a->m, a->scores, a->stats);
}

/* The frame rule over cnt contiguous frames (x, q, k, v: cnt rows each):
 * SATTN_FRAME_OK when every frame passes, else the first test that fails
 * for some frame. */
static SattnFrameFault
frames_fault (const SattnModel *m, size_t cnt, int flagged, const float *x,
              const float *q, const float *k, const float *v)
{
  if (flagged)
    return SATTN_FRAME_FLAGGED;
  if (x != NULL && !sattn_finite (x, cnt * m->cfg.d_model))
    return SATTN_FRAME_NONFINITE;
  /* An identity projection without bias copies x: finite already (unless
   * RoPE rotated it). */
  const int rope = sattn_model_rope (m);
  if (q != NULL && (m->wq != NULL || m->bq != NULL || rope) &&
      !sattn_finite (q, cnt * m->dq))
    return SATTN_FRAME_OVERFLOW;
  if (k != NULL && (m->wk != NULL || m->bk != NULL || rope) &&
      !sattn_finite (k, cnt * m->dq))
    return SATTN_FRAME_OVERFLOW;
  if (v != NULL && (m->wv != NULL || m->bv != NULL) &&
      !sattn_finite (v, cnt * m->dv))
    return SATTN_FRAME_OVERFLOW;
  return SATTN_FRAME_OK;
}

SattnFrameFault
sattn_frame_fault (const SattnModel *m, int flagged, const float *x,
                   const float *q, const float *k, const float *v)
{
  return frames_fault (m, 1, flagged, x, q, k, v);
}

int
sattn_frames_ok (const SattnModel *m, size_t cnt, const uint8_t *valid,
                 const float *x, const float *q, const float *k, const float *v)
{
  const int flagged = valid != NULL && memchr (valid, 0, cnt) != NULL;
  return frames_fault (m, cnt, flagged, x, q, k, v) == SATTN_FRAME_OK;
}

size_t
sattn_zero_overflowed_rows (const SattnModel *m, float *out, size_t rows,
                            size_t ldo, uint8_t *row_ok, const uint8_t *part,
                            uint64_t *counts)
{
  size_t bad = 0;
  /* Without an output projection or an encoder layer the rows are rows of
   * O, which the attention leaves finite (clamp_context) or zero. */
  if (m->wo == NULL && m->bo == NULL && !m->cfg.encoder)
    return 0;
  /* Contiguous rows, all finite (the common window): one test. */
  if (ldo == m->d_out && sattn_finite (out, rows * m->d_out))
    return 0;
  for (size_t i = 0; i < rows; i++) {
    float *r = out + i * ldo;
    if (sattn_finite (r, m->d_out))
      continue;
    memset (r, 0, m->d_out * sizeof (float));
    if (row_ok)
      row_ok[i] = 0;
    if (counts)
      counts[part ? part[i] : SATTN_PART_OUT_PROJ]++;
    bad++;
  }
  return bad;
}

void
sattn_output_project (const SattnModel *m, int fast, const float *o,
                      size_t rows, float *out, size_t ldo)
{
  if (m->wo == NULL && m->bo == NULL) {
    if (o != out || ldo != m->dv)
      for (size_t i = 0; i < rows; i++)
        memcpy (out + i * ldo, o + i * m->dv, m->dv * sizeof (float));
    return;
  }
  sattn_project_prec (m, fast, m->wo, m->bo, o, rows, m->dv, m->d_out, m->dv,
                      out, ldo);
}

SattnStatus
sattn_attend_scratch_new (const SattnModel *m, size_t n,
                          SattnAttendScratch *scr)
{
  const SattnConfig *c = &m->cfg;
  memset (scr, 0, sizeof (*scr));
  const size_t ncols = n + m->n_extra;
  if (n == 0 || n > SIZE_MAX / 4 / ncols || n > (size_t) INT32_MAX)
    return SATTN_E_NOMEM;
  scr->n = n;
  scr->q = malloc (n * m->dq * sizeof (float));
  scr->k = malloc (n * m->dq * sizeof (float));
  scr->kt = malloc (n * m->dq * sizeof (float));
  scr->v = malloc (n * m->dv * sizeof (float));
  scr->o = malloc (n * m->dv * sizeof (float));
  scr->S = malloc (n * ncols * sizeof (float));
  scr->kok = malloc (n);
  scr->qok = malloc (n);
  scr->part = calloc (n, 1);
  /* Encoder layer: norm1 (x) for pre-norm, the layer's scratch. */
  scr->xn = c->encoder && c->norm_first
                ? malloc (n * c->d_model * sizeof (float))
                : NULL;
  scr->lscr = c->encoder ? malloc (sattn_layer_scratch (m) * sizeof (float))
                         : NULL;
  if (!scr->q || !scr->k || !scr->kt || !scr->v || !scr->o || !scr->S ||
      !scr->kok || !scr->qok || !scr->part ||
      (c->encoder && c->norm_first && !scr->xn) || (c->encoder && !scr->lscr)) {
    sattn_attend_scratch_free (scr);
    return SATTN_E_NOMEM;
  }
  return SATTN_OK;
}

void
sattn_attend_scratch_free (SattnAttendScratch *scr)
{
  free (scr->q);
  free (scr->k);
  free (scr->kt);
  free (scr->v);
  free (scr->o);
  free (scr->S);
  free (scr->kok);
  free (scr->qok);
  free (scr->part);
  free (scr->xn);
  free (scr->lscr);
  memset (scr, 0, sizeof (*scr));
}

void
sattn_attend_project (const SattnModel *m, int fast, const float *x, size_t n,
                      float *xn, float *q, float *k, float *v, uint64_t pos0)
{
  const SattnConfig *c = &m->cfg;
  const float *xp = x;
  if (c->encoder && c->norm_first) {
    sattn_layer_norm1 (m, fast, x, c->d_model, xn, c->d_model, n);
    xp = xn;
  }
  sattn_project_prec (m, fast, m->wq, m->bq, xp, n, c->d_model, m->dq,
                      c->d_model, q, m->dq);
  sattn_project_prec (m, fast, m->wk, m->bk, xp, n, c->d_model, m->dq,
                      c->d_model, k, m->dq);
  sattn_project_prec (m, fast, m->wv, m->bv, xp, n, c->d_model, m->dv,
                      c->d_model, v, m->dv);
  for (size_t j = 0; j < n && sattn_model_rope (m); j++)
    sattn_rope_qk (m, q + j * m->dq, k + j * m->dq, pos0 + j);
}

void
sattn_attend_run (const SattnModel *m, const float *x, size_t n,
                  const SattnMask *mask, float *out, float *weights,
                  SattnStats *stats, int count_rows, SattnAttendScratch *scr)
{
  sattn_attend_project (m, 0, x, n, scr->xn, scr->q, scr->k, scr->v, 0);
  sattn_attend_finish (m, x, n, mask, out, weights, stats, count_rows, scr);
}

void
sattn_attend_finish (const SattnModel *m, const float *x, size_t n,
                     const SattnMask *mask, float *out, float *weights,
                     SattnStats *stats, int count_rows, SattnAttendScratch *scr)
{
  const SattnConfig *c = &m->cfg;
  float *q = scr->q, *k = scr->k, *kt = scr->kt, *v = scr->v, *o = scr->o;
  uint8_t *kok = scr->kok, *qok = scr->qok;

  /* The frame rule: a row is a key when the caller does not flag it and
   * its data is usable; a row with bad data (NaN/Inf, overflowing
   * projection) has no query either.  Unusable rows get zero Q/K/V so
   * nothing can leak. */
  for (size_t j = 0; j < n; j++) {
    int flagged = mask != NULL && mask->key_valid != NULL &&
                  !mask->key_valid[j];
    SattnFrameFault data = sattn_frame_fault (m, 0, x + j * c->d_model,
                                              q + j * m->dq, k + j * m->dq,
                                              v + j * m->dv);
    kok[j] = (uint8_t) (!flagged && data == SATTN_FRAME_OK);
    qok[j] = (uint8_t) (data == SATTN_FRAME_OK &&
                        (mask == NULL || mask->query_valid == NULL ||
                         mask->query_valid[j]));
    if (data != SATTN_FRAME_OK)
      memset (q + j * m->dq, 0, m->dq * sizeof (float));
    if (!kok[j]) {
      memset (k + j * m->dq, 0, m->dq * sizeof (float));
      memset (v + j * m->dv, 0, m->dv * sizeof (float));
    }
    if (stats && count_rows) {
      stats->masked_keys += !kok[j];
      stats->invalid_frames += flagged || data != SATTN_FRAME_OK;
      stats->overflow_frames += !flagged && data == SATTN_FRAME_OVERFLOW;
    }
  }

  for (size_t j = 0; j < n; j++)
    for (size_t t = 0; t < m->dq; t++)
      kt[t * n + j] = k[j * m->dq + t];

  SattnAttnArgs a = {
    .q = q,
    .ldq = m->dq,
    .kt = kt,
    .ldkt = n,
    .v = v,
    .ldv = m->dv,
    .key_ok = kok,
    .query_ok = qok,
    .allow = mask ? mask->allow : NULL,
    .ld_allow = n,
    .m = n,
    .nk = n,
    .q0 = 0,
    .scores = scr->S,
    .o = o,
    .weights = weights,
    .stats = stats,
    .sat_threshold = SATTN_DEFAULT_SATURATION,
  };
  sattn_attend_window (m, &a);
  sattn_output_project (m, 0, o, n, out, m->d_out);
  for (size_t i0 = 0; c->encoder && i0 < n; i0 += SATTN_LAYER_ROWS) {
    size_t r = n - i0 < SATTN_LAYER_ROWS ? n - i0 : SATTN_LAYER_ROWS;
    sattn_layer_rows (m, 0, x + i0 * c->d_model, c->d_model,
                      out + i0 * m->d_out, m->d_out, r, scr->lscr,
                      scr->part + i0);
  }
  for (size_t i = 0; i < n; i++)
    if (!qok[i])
      memset (out + i * m->d_out, 0, m->d_out * sizeof (float));
  /* The rows whose output overflowed are no longer usable either. */
  memset (scr->overflow_parts, 0, sizeof (scr->overflow_parts));
  size_t ovf = sattn_zero_overflowed_rows (m, out, n, m->d_out, qok,
                                           c->encoder ? scr->part : NULL,
                                           scr->overflow_parts);
  if (stats && count_rows)
    stats->overflow_rows += ovf;
  scr->overflow_rows = ovf;
}
