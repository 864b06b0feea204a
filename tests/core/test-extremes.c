/* sattn_attend on extreme inputs: magnitudes up to 1e30 (and 1e38 with
 * identity projections), unit scale with d_head 512, fully masked rows,
 * all-equal scores, +-inf scores, NaN / Inf in masked and unmasked keys.
 *
 * Every case checks the properties the core promises for any input:
 *   - no non-finite output;
 *   - every weight finite, in [0, 1 + 1e-6], exactly 0 on hidden keys;
 *   - every weight row sums to 1 within 1e-6, or is all zero, and all zero
 *     only where the row may be fully masked (masks, non-finite query, or
 *     - for cases flagged so - NaN scores from overflowing products);
 *   - a query marked invalid gives a zero output row;
 *   - stats: fully_masked_rows matches the zero weight rows, masked_keys
 *     counts flagged and non-finite keys, invalid_frames at least the
 *     non-finite rows;
 *   - the output without statistics and weights is byte-identical.
 * Where the float64 reference is meaningful (no float overflow in the core's
 * scores) the output is also compared with it: NMSE <= 1e-10, max-abs <=
 * 1e-5 * (1 + max|ref|); exact closed forms are used where they exist.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "reference.h"
#include "testutil.h"

#define SUM_TOL 1e-6
#define NMSE_BOUND 1e-10
#define MAXABS_REL_BOUND 1e-5

static TuWorst worst_ref;

typedef struct {
  const float *x;
  size_t n;
  const uint8_t *kv, *qv, *allow;
  /* Overflowing products may make scores NaN (masked): 0 = no, 1 = not
   * the self score (identity projections: x.x has no sign mix), 2 = any. */
  int nan_scores_possible;
} ExCase;

typedef struct {
  float *out, *w;
  SattnStats stats;
  SattnStatus status;
} ExResult;

/* Whether mask rules (not scores) hide key j from query i. */
static int
hidden (const Fixture *f, const ExCase *c, size_t i, size_t j)
{
  const size_t n = c->n, d = f->ref.d_model;
  if (j >= n)
    return 0; /* extra keys are always visible */
  if (c->kv && !c->kv[j])
    return 1;
  if (!tu_all_finite (c->x + j * d, d))
    return 1;
  if (c->allow && !c->allow[i * n + j])
    return 1;
  if (f->ref.causal && j > i)
    return 1;
  if (f->ref.lookback && j < i && i - j > f->ref.lookback)
    return 1;
  return 0;
}

static void
run_attend (const Fixture *f, const ExCase *c, ExResult *r)
{
  const size_t n = c->n, nk = n + sattn_model_extra_keys (f->model);
  const size_t H = f->ref.heads, d_out = f->ref.d_out;
  r->out = malloc (n * d_out * sizeof (float));
  r->w = malloc (H * n * nk * sizeof (float));
  if (!r->out || !r->w)
    abort ();
  for (size_t i = 0; i < n * d_out; i++)
    r->out[i] = NAN;
  for (size_t i = 0; i < H * n * nk; i++)
    r->w[i] = NAN;
  SattnMask mask = { c->kv, c->qv, c->allow };
  sattn_stats_clear (&r->stats);
  r->status = sattn_attend (f->model, c->x, n, &mask, r->out, r->w, &r->stats);
  TU_CHECK_STATUS (r->status, SATTN_OK, "sattn_attend");
  /* Without statistics (and weights) the rows take the other softmax
   * entry where they can (the max from Q·Kᵀ, NaN scores found in the
   * sum): the same bytes. */
  float *o2 = malloc (n * d_out * sizeof (float));
  if (!o2)
    abort ();
  SattnStatus st2 = sattn_attend (f->model, c->x, n, &mask, o2, NULL, NULL);
  TU_CHECK_STATUS (st2, SATTN_OK, "sattn_attend without statistics");
  tu_check (memcmp (o2, r->out, n * d_out * sizeof (float)) == 0,
            "output without statistics differs from the output with");
  free (o2);
}

static void
free_result (ExResult *r)
{
  free (r->out);
  free (r->w);
}

/* The properties listed at the top of the file. */
static void
check_props (const Fixture *f, const ExCase *c, const ExResult *r)
{
  const size_t n = c->n, d = f->ref.d_model;
  const size_t nk = n + sattn_model_extra_keys (f->model);
  const size_t H = f->ref.heads, d_out = f->ref.d_out;
  size_t bad_out = 0, bad_w = 0, nonfin_rows = 0, masked_keys = 0;
  size_t zero_rows_lo = 0, zero_rows_hi = 0;

  if (r->status != SATTN_OK)
    return;
  for (size_t i = 0; i < n * d_out; i++)
    if (!isfinite (r->out[i]))
      bad_out++;
  tu_check (bad_out == 0, "%zu non-finite outputs", bad_out);

  for (size_t j = 0; j < n; j++) {
    int fin = tu_all_finite (c->x + j * d, d);
    nonfin_rows += !fin;
    masked_keys += !fin || (c->kv && !c->kv[j]);
  }

  for (size_t i = 0; i < n; i++) {
    int qvalid = !c->qv || c->qv[i];
    int qfinite = tu_all_finite (c->x + i * d, d);
    if (!qvalid) {
      int z = 1;
      for (size_t o = 0; o < d_out; o++)
        z &= r->out[i * d_out + o] == 0.0f;
      tu_check (z, "row %zu: invalid query, output row not zero", i);
    }
    size_t nvis = 0;
    int self_visible = i < n && !hidden (f, c, i, i);
    for (size_t j = 0; j < nk; j++)
      nvis += !hidden (f, c, i, j);
    for (size_t h = 0; h < H; h++) {
      const float *wr = r->w + (h * n + i) * nk;
      double sum = 0.0;
      int row_bad = 0;
      for (size_t j = 0; j < nk; j++) {
        if (!isfinite (wr[j]) || wr[j] < 0.0f || wr[j] > 1.0f + SUM_TOL)
          row_bad = 1;
        else if (hidden (f, c, i, j) && wr[j] != 0.0f)
          row_bad = 1;
        sum += wr[j];
      }
      if (row_bad && bad_w++ < 5)
        tu_check (0,
                  "head %zu row %zu: weight not finite, out of [0,1] or "
                  "nonzero on a hidden key",
                  h, i);
      if (!qvalid) {
        tu_check (sum == 0.0,
                  "head %zu row %zu: invalid query, weights "
                  "sum %.9g, want 0",
                  h, i, sum);
        continue;
      }
      int zero_ok = !qfinite || nvis == 0 || c->nan_scores_possible == 2 ||
                    (c->nan_scores_possible == 1 && !self_visible);
      if (sum == 0.0) {
        zero_rows_hi++;
        if (qfinite)
          zero_rows_lo++;
        tu_check (zero_ok,
                  "head %zu row %zu: all-zero weights but the row "
                  "has %zu visible keys",
                  h, i, nvis);
      } else {
        tu_check (fabs (sum - 1.0) <= SUM_TOL,
                  "head %zu row %zu: weights sum to %.9g", h, i, sum);
      }
      if (nvis == 0)
        tu_check (sum == 0.0,
                  "head %zu row %zu: no visible key, weights "
                  "sum %.9g, want 0",
                  h, i, sum);
    }
  }
  tu_check (r->stats.fully_masked_rows >= zero_rows_lo &&
                r->stats.fully_masked_rows <= zero_rows_hi,
            "stats.fully_masked_rows %llu, want within [%zu, %zu] (the "
            "zero weight rows)",
            (unsigned long long) r->stats.fully_masked_rows, zero_rows_lo,
            zero_rows_hi);
  tu_check (r->stats.masked_keys == masked_keys,
            "stats.masked_keys %llu, want %zu",
            (unsigned long long) r->stats.masked_keys, masked_keys);
  tu_check (r->stats.invalid_frames >= nonfin_rows,
            "stats.invalid_frames %llu, want >= %zu non-finite rows",
            (unsigned long long) r->stats.invalid_frames, nonfin_rows);
}

/* Compare with the float64 reference on the rows whose query is finite.
 * With score_scaled, the max-abs bounds (not the NMSE bound) grow with the
 * largest |score| / 10: float32 rounding of a score is proportional to its
 * magnitude, and N(0,1) inputs at default scale (the grid of test-attend)
 * keep |score| below about 10, while unit scale at d_head 512 reaches ~100
 * with projected inputs. */
static void
check_ref (const Fixture *f, const ExCase *c, const ExResult *r,
           int compare_weights, int score_scaled)
{
  const size_t n = c->n, d = f->ref.d_model, d_out = f->ref.d_out;
  const size_t nk = n + ref_extra_keys (&f->ref), H = f->ref.heads;
  if (r->status != SATTN_OK)
    return;
  double *ro = malloc (n * d_out * sizeof *ro);
  double *rw = malloc (H * n * nk * sizeof *rw);
  if (!ro || !rw)
    abort ();
  RefStats rs;
  memset (&rs, 0, sizeof rs);
  ref_attend (&f->ref, c->x, n, c->kv, c->qv, c->allow, ro, rw, &rs);
  double factor = 1.0;
  if (score_scaled)
    factor = fmax (1.0, fmax (fabs (rs.score_min), fabs (rs.score_max)) / 10);
  TuErr e, ew;
  tu_err_clear (&e);
  tu_err_clear (&ew);
  for (size_t i = 0; i < n; i++) {
    if (!tu_all_finite (c->x + i * d, d))
      continue;
    tu_err_add_f (&e, r->out + i * d_out, ro + i * d_out, d_out);
    for (size_t h = 0; h < H; h++)
      tu_err_add_f (&ew, r->w + (h * n + i) * nk, rw + (h * n + i) * nk, nk);
  }
  double nmse = tu_err_nmse (&e);
  double bound = factor * MAXABS_REL_BOUND * (1 + e.max_ref);
  double wbound = factor * 1e-5;
  tu_check (nmse <= NMSE_BOUND, "reference: NMSE %.3e > %.0e", nmse,
            NMSE_BOUND);
  tu_check (e.max_abs <= bound, "reference: max-abs %.3e > %.3e", e.max_abs,
            bound);
  if (compare_weights)
    tu_check (ew.max_abs <= wbound, "reference: weights max-abs %.3e > %.1e",
              ew.max_abs, wbound);
  tu_worst_add (&worst_ref, &e);
  printf ("     vs float64 reference: NMSE=%.2e max-abs=%.2e (bound %.1e) "
          "weights max-abs=%.2e (bound %.1e)\n",
          nmse, e.max_abs, bound, ew.max_abs, wbound);
  free (ro);
  free (rw);
}

static float *
normal_block (TuRng *rng, size_t n, size_t d, double sigma)
{
  float *x = malloc (n * d * sizeof *x);
  if (!x)
    abort ();
  tu_fill_normal (rng, x, n * d, sigma);
  return x;
}

static uint8_t *
random_mask (TuRng *rng, size_t n, double p_valid, size_t lead)
{
  uint8_t *m = malloc (n);
  if (!m)
    abort ();
  for (size_t j = 0; j < n; j++)
    m[j] = j >= lead && tu_rng_uniform (rng) < p_valid;
  return m;
}

/* ---------------------------------------------------------------- cases */

/* A case's model (fx_build): 0, with the case ended as failed, when it
 * cannot be built. */
static int
case_fixture (Fixture *f, TuRng *rng, size_t d, size_t heads, unsigned flags,
              size_t lookback)
{
  if (TU_CHECK_STATUS (fx_build (f, rng, d, heads, flags, lookback), SATTN_OK,
                       "sattn_model_new"))
    return 1;
  tu_case_end (NULL);
  return 0;
}

/* A case's run: sattn_attend on c, then the properties every case
 * checks. */
static void
run_case (const Fixture *f, const ExCase *c, ExResult *r)
{
  run_attend (f, c, r);
  check_props (f, c, r);
}

/* Inputs ~ amp * N(0,1), a few entries exactly +-amp, with and without
 * masks, for several model shapes. */
static void
case_big (TuRng *rng, double amp, size_t d, size_t heads, unsigned flags,
          size_t n, int expect_nonfinite_scores)
{
  char fs[160];
  tu_case_begin ("big inputs |x|~%.0e d_model=%zu heads=%zu n=%zu [%s]", amp, d,
                 heads, n, fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, 3))
    return;
  float *x = normal_block (rng, n, d, amp);
  for (size_t k = 0; k < n * d; k += 7)
    x[k] = (float) ((k & 8) ? amp : -amp);
  uint8_t *kv = NULL, *qv = NULL;
  if (flags & FX_PAD) {
    kv = random_mask (rng, n, 0.8, n / 4);
    qv = random_mask (rng, n, 0.9, n / 4);
  }
  ExCase c = { x, n, kv, qv, NULL, (flags & FX_PROJ) ? 2 : d > 1 };
  ExResult r;
  run_case (&f, &c, &r);
  if (expect_nonfinite_scores)
    tu_check (r.stats.nonfinite_scores > 0,
              "stats.nonfinite_scores is 0, "
              "but products of two 1e30 floats overflow single precision");
  tu_case_end ("nonfinite_scores=%llu fully_masked_rows=%llu",
               (unsigned long long) r.stats.nonfinite_scores,
               (unsigned long long) r.stats.fully_masked_rows);
  free_result (&r);
  free (x);
  free (kv);
  free (qv);
  fx_free (&f);
}

/* Magnitudes spread over 60 decades: row i scaled by 10^u, u in [-30, 30]. */
static void
case_mixed_magnitudes (TuRng *rng, size_t d, size_t heads, unsigned flags)
{
  char fs[160];
  const size_t n = 48;
  tu_case_begin ("mixed magnitudes 1e-30..1e30 d_model=%zu heads=%zu [%s]", d,
                 heads, fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, 5))
    return;
  float *x = normal_block (rng, n, d, 1.0);
  for (size_t i = 0; i < n; i++) {
    double sc = pow (10.0, -30.0 + 60.0 * tu_rng_uniform (rng));
    for (size_t k = 0; k < d; k++)
      x[i * d + k] = (float) (x[i * d + k] * sc);
  }
  ExCase c = { x, n, NULL, NULL, NULL, (flags & FX_PROJ) ? 2 : 1 };
  ExResult r;
  run_case (&f, &c, &r);
  tu_case_end ("nonfinite_scores=%llu fully_masked_rows=%llu",
               (unsigned long long) r.stats.nonfinite_scores,
               (unsigned long long) r.stats.fully_masked_rows);
  free_result (&r);
  free (x);
  fx_free (&f);
}

/* Identity projections keep V = x, so the output is a convex combination
 * of finite rows and must stay finite even near FLT_MAX. */
static void
case_near_flt_max (TuRng *rng, size_t d, size_t heads, unsigned flags)
{
  char fs[160];
  const size_t n = 33;
  tu_case_begin ("identity |x| up to 1e38 d_model=%zu heads=%zu [%s]", d, heads,
                 fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, 4))
    return;
  float *x = malloc (n * d * sizeof *x);
  if (!x)
    abort ();
  for (size_t k = 0; k < n * d; k++) {
    double u = 0.5 + 0.5 * tu_rng_uniform (rng);
    x[k] = (float) ((tu_rng_u64 (rng) & 1) ? 1e38 * u : -1e38 * u);
  }
  ExCase c = { x, n, NULL, NULL, NULL, d > 1 };
  ExResult r;
  run_case (&f, &c, &r);
  tu_case_end ("nonfinite_scores=%llu",
               (unsigned long long) r.stats.nonfinite_scores);
  free_result (&r);
  free (x);
  fx_free (&f);
}

/* Values near FLT_MAX under equal scores (zero Q and K projections, V =
 * x): every visible weight is 1 / count and the output is the mean of the
 * visible V rows, while the unnormalised sum E V (every e = 1) overflows.
 * The output must still be finite and match the mean computed here in
 * double (relative 1e-5). */
static void
case_huge_values_equal_scores (TuRng *rng, size_t d, size_t heads,
                               unsigned flags)
{
  char fs[160];
  const size_t n = 40;
  tu_case_begin ("V near 1e38 under equal scores d_model=%zu heads=%zu [%s]", d,
                 heads, fx_flags_string (flags | FX_PROJ, fs, sizeof fs));
  Fixture f;
  SattnStatus st = fx_build (&f, rng, d, heads, flags | FX_PROJ, 0);
  if (st == SATTN_OK) {
    /* Default dimensions: Q, K and V are d wide. */
    memset ((float *) f.w.wq, 0, d * d * sizeof (float));
    memset ((float *) f.w.wk, 0, d * d * sizeof (float));
    float *wv = (float *) f.w.wv;
    for (size_t k = 0; k < d * d; k++)
      wv[k] = k % (d + 1) == 0 ? 1.0f : 0.0f;
    sattn_model_free (f.model);
    f.model = sattn_model_new (&f.cfg, &f.w, &st);
  }
  if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_model_new")) {
    tu_case_end (NULL);
    return;
  }
  float *x = malloc (n * d * sizeof *x);
  if (!x)
    abort ();
  for (size_t k = 0; k < n * d; k++)
    x[k] = (float) (1e38 * (0.5 + 0.5 * tu_rng_uniform (rng)));
  ExCase c = { x, n, NULL, NULL, NULL, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  double worst = 0.0;
  for (size_t i = 0; i < n && r.status == SATTN_OK; i++) {
    size_t cnt = f.cfg.causal ? i + 1 : n;
    for (size_t t = 0; t < d; t++) {
      double mean = 0.0;
      for (size_t j = 0; j < cnt; j++)
        mean += x[j * d + t];
      mean /= (double) cnt;
      double e = fabs (r.out[i * d + t] - mean) / mean;
      worst = e > worst ? e : worst;
    }
  }
  tu_check (worst <= 1e-5, "output vs mean of V: relative error %.3g > 1e-5",
            worst);
  tu_case_end ("relative error vs mean %.3g", worst);
  free_result (&r);
  free (x);
  fx_free (&f);
}

/* Unit scale with d_head = 512: scores of N(0,1) inputs reach hundreds; the
 * softmax saturates but must stay exact against the reference. */
static void
case_unit_dhead512 (TuRng *rng, size_t d, size_t heads, unsigned flags,
                    size_t n)
{
  char fs[160];
  tu_case_begin ("unit scale d_head=%zu d_model=%zu heads=%zu n=%zu [%s]",
                 d / heads, d, heads, n,
                 fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, 7))
    return;
  float *x = normal_block (rng, n, d, 1.0);
  ExCase c = { x, n, NULL, NULL, NULL, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  check_ref (&f, &c, &r, 1, 1);
  tu_check (r.stats.nonfinite_scores == 0,
            "stats.nonfinite_scores %llu, "
            "want 0",
            (unsigned long long) r.stats.nonfinite_scores);
  tu_check (r.stats.saturated_rows > 0, "stats.saturated_rows is 0 but unit "
                                        "scale at d_head 512 saturates");
  tu_case_end ("saturated_rows=%llu of %llu, score range [%.1f, %.1f]",
               (unsigned long long) r.stats.saturated_rows,
               (unsigned long long) r.stats.rows, r.stats.score_min,
               r.stats.score_max);
  free_result (&r);
  free (x);
  fx_free (&f);
}

/* Rows with every key masked: via key_valid, via allow, via causal with
 * leading invalid keys; with extra keys the extras take all the mass. */
static void
case_fully_masked (TuRng *rng, const char *how, size_t d, size_t heads,
                   unsigned flags)
{
  char fs[160];
  const size_t n = 24;
  tu_case_begin ("fully masked rows (%s) d_model=%zu heads=%zu [%s]", how, d,
                 heads, fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, 3))
    return;
  float *x = normal_block (rng, n, d, 1.0);
  uint8_t *kv = NULL, *allow = NULL;
  size_t want_full = 0;
  const size_t ne = ref_extra_keys (&f.ref);
  if (!strcmp (how, "no valid key")) {
    kv = calloc (n, 1);
    want_full = ne ? 0 : heads * n;
  } else if (!strcmp (how, "allow all zero")) {
    allow = calloc (n * n, 1);
    want_full = ne ? 0 : heads * n;
  } else { /* "leading invalid keys": causal model, keys 0..7 invalid */
    kv = malloc (n);
    for (size_t j = 0; j < n; j++)
      kv[j] = j >= 8;
    want_full = ne ? 0 : heads * 8;
  }
  ExCase c = { x, n, kv, NULL, allow, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  check_ref (&f, &c, &r, 1, 0);
  tu_check (r.stats.fully_masked_rows == want_full,
            "stats.fully_masked_rows %llu, want %zu",
            (unsigned long long) r.stats.fully_masked_rows, want_full);
  if (ne == 0 && !(flags & (FX_OUT | FX_BO)) && r.status == SATTN_OK) {
    /* no output projection: fully masked rows are exactly zero */
    size_t rows = !strcmp (how, "leading invalid keys") ? 8 : n, nz = 0;
    for (size_t i = 0; i < rows * f.ref.d_out; i++)
      nz += r.out[i] != 0.0f;
    tu_check (nz == 0, "%zu nonzero outputs in fully masked rows", nz);
  }
  tu_case_end ("fully_masked_rows=%llu",
               (unsigned long long) r.stats.fully_masked_rows);
  free_result (&r);
  free (x);
  free (kv);
  free (allow);
  fx_free (&f);
}

/* All keys equal: the weights are uniform over the visible keys, in closed
 * form 1 / visible(i); the output is the common row. */
static void
case_all_equal (TuRng *rng, double amp, size_t d, size_t heads, unsigned flags,
                size_t lookback)
{
  char fs[160];
  const size_t n = 20;
  tu_case_begin ("all-equal scores rows=%.0e*v d_model=%zu heads=%zu [%s]", amp,
                 d, heads, fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, lookback))
    return;
  float *row = normal_block (rng, 1, d, 1.0);
  for (size_t k = 0; k < d; k++)
    row[k] = (float) (amp * (row[k] >= 0 ? 1.0 : -1.0) * (0.5 + fabs (row[k])));
  if (amp == 0.0)
    for (size_t k = 0; k < d; k++)
      row[k] = 0.0f;
  float *x = malloc (n * d * sizeof *x);
  if (!x)
    abort ();
  for (size_t i = 0; i < n; i++)
    memcpy (x + i * d, row, d * sizeof *x);
  ExCase c = { x, n, NULL, NULL, NULL, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  if (amp <= 1.0)
    check_ref (&f, &c, &r, 1, 0);
  if (r.status == SATTN_OK) {
    double max_w = 0.0, max_o = 0.0;
    for (size_t i = 0; i < n; i++) {
      size_t vis = 0;
      for (size_t j = 0; j < n; j++)
        vis += !hidden (&f, &c, i, j);
      for (size_t h = 0; h < heads; h++)
        for (size_t j = 0; j < n; j++) {
          double want = hidden (&f, &c, i, j) ? 0.0 : 1.0 / (double) vis;
          double e = fabs (r.w[(h * n + i) * n + j] - want);
          if (e > max_w)
            max_w = e;
        }
      if (!(flags & (FX_PROJ | FX_OUT | FX_BIAS | FX_BO)))
        for (size_t k = 0; k < d; k++) {
          double e = fabs (r.out[i * d + k] - row[k]) / (fabs (row[k]) + 1e-30);
          if (amp == 0.0)
            e = fabs (r.out[i * d + k]);
          if (e > max_o)
            max_o = e;
        }
    }
    tu_check (max_w <= SUM_TOL, "weights differ from 1/visible by %.3e", max_w);
    /* n equal float terms v/n summed: relative error <= n * FLT_EPSILON */
    tu_check (max_o <= n * FLT_EPSILON,
              "output differs from the common row "
              "by %.3e (relative), bound %.2e",
              max_o, n * FLT_EPSILON);
    tu_case_end ("max |w - 1/visible|=%.2e, output rel err=%.2e", max_w, max_o);
  } else {
    tu_case_end (NULL);
  }
  free_result (&r);
  free (row);
  free (x);
  fx_free (&f);
}

/* d_model = 1, identity, unit scale: scores are single products, so the
 * +inf entries are known exactly.  x = [1e30, 1e30, 1, 2, -3, ...]. */
static void
case_inf_scores (void)
{
  tu_case_begin ("+inf scores share the mass (d_model=1 identity unit)");
  Fixture f;
  TuRng rng;
  tu_rng_init (&rng, 99);
  if (!case_fixture (&f, &rng, 1, 1, FX_UNIT, 0))
    return;
  float x[6] = { 1e30f, 1e30f, 1.0f, 2.0f, -3.0f, 0.5f };
  const size_t n = 6;
  ExCase c = { x, n, NULL, NULL, NULL, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  check_ref (&f, &c, &r, 1, 0);
  if (r.status == SATTN_OK) {
    /* query 0: scores inf, inf, 1e30, 2e30, -3e30, 5e29 */
    tu_check (fabs (r.w[0] - 0.5) <= SUM_TOL && fabs (r.w[1] - 0.5) <= SUM_TOL,
              "row 0 weights %.9g %.9g, want 0.5 0.5", r.w[0], r.w[1]);
    tu_check (r.out[0] == 1e30f, "row 0 output %.9g, want 1e30", r.out[0]);
    tu_check (r.stats.nonfinite_scores >= 4,
              "stats.nonfinite_scores %llu, "
              "want >= 4 (+inf scores of rows 0 and 1)",
              (unsigned long long) r.stats.nonfinite_scores);
  }
  tu_case_end ("nonfinite_scores=%llu",
               (unsigned long long) r.stats.nonfinite_scores);
  free_result (&r);
  fx_free (&f);

  /* Every visible score -inf: the limit is uniform over the visible keys. */
  tu_case_begin ("all visible scores -inf (d_model=1 identity unit)");
  tu_rng_init (&rng, 98);
  if (!case_fixture (&f, &rng, 1, 1, FX_UNIT, 0))
    return;
  float y[4] = { -1e30f, 1e30f, 2e30f, 3e30f };
  uint8_t kv[4] = { 0, 1, 1, 1 };
  ExCase c2 = { y, 4, kv, NULL, NULL, 0 };
  run_case (&f, &c2, &r);
  if (r.status == SATTN_OK)
    tu_check (isfinite (r.out[0]) && fabs (r.out[0]) <= 3e30f,
              "row 0 output %.9g, want a finite convex combination", r.out[0]);
  tu_case_end ("row 0 weights %.3g %.3g %.3g %.3g", r.w[0], r.w[1], r.w[2],
               r.w[3]);
  free_result (&r);
  fx_free (&f);
}

/* Non-finite rows in x: whole-row NaN, one NaN, +Inf, -Inf, some flagged
 * invalid (masked keys) and some not (unmasked keys).  Finite rows must
 * equal the reference with those keys hidden; nothing may leak. */
static void
case_nonfinite_keys (TuRng *rng, size_t d, size_t heads, unsigned flags,
                     int invalidate_queries)
{
  char fs[160];
  const size_t n = 32;
  tu_case_begin ("NaN/Inf keys d_model=%zu heads=%zu [%s]%s", d, heads,
                 fx_flags_string (flags, fs, sizeof fs),
                 invalidate_queries ? " non-finite queries invalid" : "");
  Fixture f;
  if (!case_fixture (&f, rng, d, heads, flags, 6))
    return;
  float *x = normal_block (rng, n, d, 1.0);
  uint8_t *kv = malloc (n), *qv = malloc (n);
  if (!kv || !qv)
    abort ();
  for (size_t j = 0; j < n; j++)
    kv[j] = qv[j] = 1;
  for (size_t k = 0; k < d; k++) {
    x[3 * d + k] = NAN;      /* masked NaN row */
    x[7 * d + k] = NAN;      /* unmasked NaN row */
    x[0 * d + k] = INFINITY; /* unmasked +Inf row, first key */
  }
  x[11 * d + d / 2] = NAN;       /* unmasked, one NaN */
  x[13 * d + 0] = INFINITY;      /* masked, one +Inf */
  x[17 * d + d - 1] = -INFINITY; /* unmasked, one -Inf */
  x[19 * d + 0] = NAN;           /* unmasked, mixed */
  x[19 * d + d - 1] = INFINITY;
  kv[3] = kv[13] = 0;
  if (invalidate_queries)
    qv[0] = qv[3] = qv[7] = qv[11] = qv[13] = qv[17] = qv[19] = 0;
  ExCase c = { x, n, kv, qv, NULL, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  check_ref (&f, &c, &r, 1, 0);
  tu_check (r.stats.masked_keys == 7, "stats.masked_keys %llu, want 7",
            (unsigned long long) r.stats.masked_keys);
  tu_case_end ("invalid_frames=%llu masked_keys=%llu nonfinite_scores=%llu",
               (unsigned long long) r.stats.invalid_frames,
               (unsigned long long) r.stats.masked_keys,
               (unsigned long long) r.stats.nonfinite_scores);
  free_result (&r);
  free (x);
  free (kv);
  free (qv);
  fx_free (&f);
}

/* +inf and -inf scores among finite ones in windows of 64 keys (the
 * Q·Kᵀ tiles of eight rows that also take each row's max): frame 5 is
 * 1e18 in every dimension (its scores with frame 40 are -inf, with itself
 * finite), frame 40 is -1e21 (its score with itself is +inf).  Checked as
 * every case, so also byte for byte without statistics. */
static void
case_inf_scores_tiles (TuRng *rng)
{
  const size_t n = 64, d = 16;
  tu_case_begin ("+-inf scores in 8-row tiles (d_model=%zu identity, "
                 "window %zu)",
                 d, n);
  Fixture f;
  if (!case_fixture (&f, rng, d, 1, 0, 0))
    return;
  float *x = malloc (n * d * sizeof (float));
  if (!x)
    abort ();
  tu_fill_normal (rng, x, n * d, 1.0);
  for (size_t t = 0; t < d; t++) {
    x[5 * d + t] = 1e18f;
    x[40 * d + t] = -1e21f;
  }
  ExCase c = { x, n, NULL, NULL, NULL, 0 };
  ExResult r;
  run_case (&f, &c, &r);
  tu_check (r.stats.nonfinite_scores >= 3,
            "stats.nonfinite_scores %llu, "
            "want >= 3 (5-40, 40-5, 40-40)",
            (unsigned long long) r.stats.nonfinite_scores);
  tu_case_end ("nonfinite_scores=%llu",
               (unsigned long long) r.stats.nonfinite_scores);
  free_result (&r);
  free (x);
  fx_free (&f);
}

int
main (void)
{
  TuRng rng;
  tu_rng_init (&rng, 0xe7e3e5ull);
  const unsigned P = FX_PROJ | FX_BIAS | FX_OUT | FX_BO;

  /* magnitudes up to 1e30 */
  case_big (&rng, 1e30, 1, 1, FX_UNIT, 64, 1);
  case_big (&rng, 1e30, 1, 1, FX_UNIT | FX_CAUSAL | FX_PAD, 64, 1);
  case_big (&rng, 1e30, 8, 2, 0, 64, 0);
  case_big (&rng, 1e30, 8, 2, FX_UNIT | FX_CAUSAL | FX_LOOKBACK | FX_PAD, 64,
            0);
  case_big (&rng, 1e30, 64, 4, P, 64, 0);
  case_big (&rng, 1e30, 64, 4,
            P | FX_UNIT | FX_BIASKV | FX_ZERO | FX_CAUSAL | FX_PAD, 64, 0);
  case_big (&rng, 1e20, 64, 8, P | FX_DIMS, 40, 0);
  case_big (&rng, 1e15, 16, 2, FX_UNIT, 40, 0);
  case_mixed_magnitudes (&rng, 8, 2, 0);
  case_mixed_magnitudes (&rng, 32, 4, P | FX_CAUSAL);
  case_near_flt_max (&rng, 4, 1, 0);
  case_near_flt_max (&rng, 4, 2, FX_UNIT | FX_CAUSAL | FX_LOOKBACK);
  case_near_flt_max (&rng, 1, 1, FX_UNIT);
  case_huge_values_equal_scores (&rng, 8, 2, 0);
  case_huge_values_equal_scores (&rng, 16, 4, FX_CAUSAL);

  /* unit scale, d_head 512 */
  case_unit_dhead512 (&rng, 512, 1, FX_UNIT, 64);
  case_unit_dhead512 (&rng, 512, 1, FX_UNIT | P, 64);
  case_unit_dhead512 (&rng, 1024, 2, FX_UNIT | FX_PROJ | FX_CAUSAL, 32);

  /* fully masked rows */
  case_fully_masked (&rng, "no valid key", 8, 2, 0);
  case_fully_masked (&rng, "no valid key", 16, 4, P);
  case_fully_masked (&rng, "no valid key", 16, 4, FX_PROJ | FX_BIASKV);
  case_fully_masked (&rng, "allow all zero", 8, 2, FX_UNIT);
  case_fully_masked (&rng, "allow all zero", 16, 2, FX_PROJ | FX_ZERO);
  case_fully_masked (&rng, "leading invalid keys", 8, 2, FX_CAUSAL);
  case_fully_masked (&rng, "leading invalid keys", 16, 4, P | FX_CAUSAL);

  /* all-equal scores */
  case_all_equal (&rng, 1.0, 8, 2, 0, 0);
  case_all_equal (&rng, 1.0, 8, 2, FX_CAUSAL | FX_LOOKBACK, 5);
  case_all_equal (&rng, 1.0, 8, 4, FX_LOOKBACK, 3);
  case_all_equal (&rng, 0.0, 8, 2, FX_PROJ | FX_BIAS | FX_OUT, 0);
  case_all_equal (&rng, 1e30, 4, 1, FX_UNIT, 0);
  case_all_equal (&rng, 1e30, 4, 2, FX_CAUSAL, 0);
  case_inf_scores ();
  case_inf_scores_tiles (&rng);

  /* NaN / Inf in masked and unmasked keys */
  case_nonfinite_keys (&rng, 8, 2, 0, 0);
  case_nonfinite_keys (&rng, 8, 2, FX_CAUSAL | FX_LOOKBACK, 1);
  case_nonfinite_keys (&rng, 16, 4, P, 0);
  case_nonfinite_keys (&rng, 16, 4, P | FX_BIASKV | FX_ZERO | FX_CAUSAL, 1);
  case_nonfinite_keys (&rng, 1, 1, FX_UNIT, 0);

  printf ("\nworst case vs float64 reference where compared: NMSE=%.3e "
          "max-abs=%.3e max-abs/(1+max|ref|)=%.3e (%zu cases)\n",
          worst_ref.nmse, worst_ref.max_abs, worst_ref.max_abs_rel,
          worst_ref.cases);
  return tu_summary ("test-extremes");
}
