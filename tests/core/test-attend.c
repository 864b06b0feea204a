/* sattn_attend against the float64 reference over a grid of shapes,
 * projections, masks and scales, with N(0,1) inputs.
 *
 * Pass criteria per case (stated bounds):
 *   output:  NMSE <= 1e-10 and max |out - ref| <= 1e-5 * k * (1 + max |ref|)
 *   weights: max |w - w_ref| <= 1e-5 * k (weights lie in [0, 1])
 *   with k = max (1, max |scaled score| / 10).  float32 rounding of a score
 *   grows with its magnitude, and a weight's error follows the score's:
 *   at default scale |score| stays near or below 10 (k ~ 1); at unit scale
 *   with d_head ~ 256 it reaches ~60 and even a plain float32 loop
 *   (sequential sums, expf) is off by ~1e-5 in the weights there.
 *   stats:   counters equal to the reference's where the header defines
 *            them unambiguously (see check_stats).
 * The worst NMSE and max-abs error per d_model and overall are printed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture.h"
#include "reference.h"
#include "testutil.h"

#define NMSE_BOUND 1e-10
#define MAXABS_REL_BOUND 1e-5
#define WEIGHT_BOUND 1e-5

static const unsigned variants[] = {
  0,
  FX_PROJ | FX_BIAS | FX_OUT | FX_BO,
  FX_PROJ | FX_UNIT | FX_CAUSAL,
  FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_CAUSAL | FX_LOOKBACK | FX_PAD,
  FX_UNIT | FX_ALLOW | FX_LOOKBACK,
  FX_PROJ | FX_BIAS | FX_BIASKV | FX_ZERO | FX_CAUSAL | FX_PAD,
  FX_PROJ | FX_OUT | FX_DIMS | FX_ALLOW | FX_UNIT,
  FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_UNIT | FX_CAUSAL | FX_LOOKBACK |
      FX_PAD | FX_ALLOW | FX_BIASKV | FX_ZERO,
  FX_BIAS | FX_BO | FX_BIASKV | FX_PAD | FX_CAUSAL | FX_LOOKBACK,
  /* heads x d_head != d_model: wider and narrower than the frame */
  FX_PROJ | FX_BIAS | FX_DK_WIDE | FX_CAUSAL | FX_BIASKV | FX_ZERO,
  FX_PROJ | FX_OUT | FX_BO | FX_DK_NARROW | FX_PAD | FX_LOOKBACK,
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static const size_t d_models[] = { 1, 3, 8, 64, 256 };
static const size_t head_counts[] = { 1, 2, 4, 8 };
static const size_t lengths[] = { 1, 2, 17, 64, 256, 1024 };
#define N_D (sizeof d_models / sizeof d_models[0])

static TuWorst worst_d[N_D], worst_all, worst_w;
static double worst_frac_out, worst_frac_w, worst_k = 1.0;

/* Stats checks.  Exact where the header is unambiguous for any mask:
 * frames (rows given), windows (one), masked_keys (keys flagged invalid or
 * non-finite), fully_masked_rows, nonfinite_scores.  The score / lse /
 * weight / entropy figures are compared only when every row sees every key
 * (no masks, no extra keys) so that "valid keys" has one meaning. */
static void
check_stats (const SattnStats *s, const RefStats *r, const Fixture *f, size_t n,
             const uint8_t *kv, const uint8_t *qv, unsigned flags)
{
  size_t H = f->ref.heads, masked = 0, nq = 0;
  for (size_t j = 0; j < n; j++) {
    if (kv && !kv[j])
      masked++;
    if (!qv || qv[j])
      nq++;
  }
  tu_check (s->frames == n, "stats.frames %llu, want %zu",
            (unsigned long long) s->frames, n);
  tu_check (s->windows == 1, "stats.windows %llu, want 1",
            (unsigned long long) s->windows);
  tu_check (s->masked_keys == masked, "stats.masked_keys %llu, want %zu",
            (unsigned long long) s->masked_keys, masked);
  tu_check (s->fully_masked_rows == r->fully_masked,
            "stats.fully_masked_rows %llu, want %zu",
            (unsigned long long) s->fully_masked_rows, r->fully_masked);
  tu_check (s->nonfinite_scores == 0, "stats.nonfinite_scores %llu, want 0",
            (unsigned long long) s->nonfinite_scores);
  tu_check (s->rows >= H * nq && s->rows <= H * n,
            "stats.rows %llu, want within [%zu, %zu]",
            (unsigned long long) s->rows, H * nq, H * n);

  if (flags &
      (FX_PAD | FX_ALLOW | FX_CAUSAL | FX_LOOKBACK | FX_BIASKV | FX_ZERO))
    return;
  tu_check (s->rows == H * n, "stats.rows %llu, want %zu",
            (unsigned long long) s->rows, H * n);
  double tol_s = 1e-5 * (1.0 + fmax (fabs (r->score_min), fabs (r->score_max)));
  tu_check (fabs (s->score_min - r->score_min) <= tol_s,
            "stats.score_min %.9g, want %.9g", s->score_min, r->score_min);
  tu_check (fabs (s->score_max - r->score_max) <= tol_s,
            "stats.score_max %.9g, want %.9g", s->score_max, r->score_max);
  double tol_l = 1e-5 * (1.0 + fmax (fabs (r->lse_min), fabs (r->lse_max)));
  tu_check (fabs (s->lse_min - r->lse_min) <= tol_l,
            "stats.lse_min %.9g, want %.9g", s->lse_min, r->lse_min);
  tu_check (fabs (s->lse_max - r->lse_max) <= tol_l,
            "stats.lse_max %.9g, want %.9g", s->lse_max, r->lse_max);
  double rows = (double) (H * n);
  tu_check (fabs (s->max_weight_sum - r->max_weight_sum) <= 1e-5 * rows,
            "stats.max_weight_sum %.9g, want %.9g", s->max_weight_sum,
            r->max_weight_sum);
  tu_check (fabs (s->entropy_sum - r->entropy_sum) <= 1e-4 * rows,
            "stats.entropy_sum %.9g, want %.9g", s->entropy_sum,
            r->entropy_sum);
  tu_check (s->saturated_rows >= r->sat_lo && s->saturated_rows <= r->sat_hi,
            "stats.saturated_rows %llu, want within [%zu, %zu]",
            (unsigned long long) s->saturated_rows, r->sat_lo, r->sat_hi);
}

static void
run_case (TuRng *rng, size_t di, size_t heads, size_t n, size_t vi)
{
  const size_t d = d_models[di];
  const unsigned flags = variants[vi];
  char fs[160];
  size_t lookback = tu_rng_range (rng, 1, n / 3 > 1 ? n / 3 : 1);

  clock_t t0 = clock ();
  tu_case_begin ("attend d_model=%zu heads=%zu n=%zu v%zu[%s]", d, heads, n, vi,
                 fx_flags_string (flags, fs, sizeof fs));
  Fixture f;
  SattnStatus st = fx_build (&f, rng, d, heads, flags, lookback);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_model_new")) {
    fx_free (&f);
    tu_case_end (NULL);
    return;
  }
  const size_t ne = ref_extra_keys (&f.ref), nk = n + ne;
  const size_t d_out = f.ref.d_out;
  tu_check (sattn_model_d_out (f.model) == d_out,
            "sattn_model_d_out %zu, want %zu", sattn_model_d_out (f.model),
            d_out);
  tu_check (sattn_model_extra_keys (f.model) == ne,
            "sattn_model_extra_keys %zu, want %zu",
            sattn_model_extra_keys (f.model), ne);

  float *x = malloc (n * d * sizeof *x);
  float *out = malloc (n * d_out * sizeof *out);
  float *w = malloc (heads * n * nk * sizeof *w);
  double *rout = malloc (n * d_out * sizeof *rout);
  double *rw = malloc (heads * n * nk * sizeof *rw);
  uint8_t *kv = NULL, *qv = NULL, *allow = NULL;
  if (!x || !out || !w || !rout || !rw)
    abort ();
  tu_fill_normal (rng, x, n * d, 1.0);
  if (flags & FX_PAD) {
    kv = malloc (n);
    qv = malloc (n);
    size_t lead = n / 4;
    for (size_t j = 0; j < n; j++) {
      kv[j] = j >= lead && tu_rng_uniform (rng) < 0.85;
      qv[j] = j >= lead && tu_rng_uniform (rng) < 0.9;
    }
  }
  if (flags & FX_ALLOW) {
    allow = malloc (n * n);
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < n; j++)
        allow[i * n + j] = (i % 7 != 3) && tu_rng_uniform (rng) < 0.7;
  }
  /* Poison the outputs: every entry must be written. */
  for (size_t i = 0; i < n * d_out; i++)
    out[i] = NAN;
  for (size_t i = 0; i < heads * n * nk; i++)
    w[i] = NAN;

  SattnMask mask = { kv, qv, allow };
  SattnStats stats;
  sattn_stats_clear (&stats);
  st = sattn_attend (f.model, x, n, (kv || qv || allow) ? &mask : NULL, out, w,
                     &stats);
  TU_CHECK_STATUS (st, SATTN_OK, "sattn_attend");

  RefStats rs;
  memset (&rs, 0, sizeof rs);
  ref_attend (&f.ref, x, n, kv, qv, allow, rout, rw, &rs);

  TuErr e, ew;
  tu_err_clear (&e);
  tu_err_clear (&ew);
  tu_err_add_f (&e, out, rout, n * d_out);
  tu_err_add_f (&ew, w, rw, heads * n * nk);
  double nmse = tu_err_nmse (&e);
  double k = 1.0;
  if (rs.score_max >= rs.score_min)
    k = fmax (1.0, fmax (fabs (rs.score_min), fabs (rs.score_max)) / 10.0);
  double bound = k * MAXABS_REL_BOUND * (1.0 + e.max_ref);
  double wbound = k * WEIGHT_BOUND;
  tu_check (e.nonfinite == 0, "%zu non-finite outputs", e.nonfinite);
  tu_check (nmse <= NMSE_BOUND, "output NMSE %.3e > %.0e", nmse, NMSE_BOUND);
  tu_check (e.max_abs <= bound, "output max-abs %.3e > %.3e", e.max_abs, bound);
  tu_check (ew.nonfinite == 0, "%zu non-finite weights", ew.nonfinite);
  tu_check (ew.max_abs <= wbound, "weights max-abs %.3e > %.2e", ew.max_abs,
            wbound);
  if (st == SATTN_OK)
    check_stats (&stats, &rs, &f, n, kv, qv, flags);

  /* Without the optional outputs the result is the same. */
  if (st == SATTN_OK) {
    float *out2 = malloc (n * d_out * sizeof *out2);
    if (!out2)
      abort ();
    st = sattn_attend (f.model, x, n, (kv || qv || allow) ? &mask : NULL, out2,
                       NULL, NULL);
    TU_CHECK_STATUS (st, SATTN_OK, "sattn_attend without weights/stats");
    tu_check (memcmp (out, out2, n * d_out * sizeof *out) == 0,
              "output differs when weights/stats are not requested");
    free (out2);
  }

  worst_frac_out = fmax (worst_frac_out, e.max_abs / bound);
  worst_frac_w = fmax (worst_frac_w, ew.max_abs / wbound);
  worst_k = fmax (worst_k, k);
  tu_worst_add (&worst_d[di], &e);
  tu_worst_add (&worst_all, &e);
  tu_worst_add (&worst_w, &ew);
  tu_case_end ("nmse=%.2e maxabs=%.2e (bound %.1e) w_maxabs=%.2e (bound "
               "%.1e) cpu=%.2fs",
               nmse, e.max_abs, bound, ew.max_abs, wbound,
               (double) (clock () - t0) / CLOCKS_PER_SEC);

  free (x);
  free (out);
  free (w);
  free (rout);
  free (rw);
  free (kv);
  free (qv);
  free (allow);
  fx_free (&f);
}

int
main (void)
{
  TuRng rng;
  tu_rng_init (&rng, 0x5a77e5eedull);
  size_t combo = 0;

  for (size_t di = 0; di < N_D; di++) {
    size_t d = d_models[di];
    for (size_t hi = 0; hi < sizeof head_counts / sizeof head_counts[0]; hi++) {
      size_t h = head_counts[hi];
      if (d % h != 0)
        continue;
      for (size_t ni = 0; ni < sizeof lengths / sizeof lengths[0]; ni++) {
        size_t n = lengths[ni];
        /* Reference cost ~ projections + scores + P.V + the per-entry
         * softmax work (exp, masks, weights); run every variant on cheap
         * shapes and a rotating sample on the costly ones. */
        double cost = (double) n * d * 4.0 * d + 2.0 * n * n * d +
                      40.0 * n * n * h;
        size_t k = cost <= 4e7 ? N_VARIANTS : cost <= 2.5e8 ? 3 : 1;
        size_t start = (combo * 5) % N_VARIANTS;
        for (size_t t = 0; t < k; t++)
          run_case (&rng, di, h, n, (start + t) % N_VARIANTS);
        combo++;
      }
    }
  }

  printf ("\nworst case per d_model (output vs float64 reference):\n");
  for (size_t di = 0; di < N_D; di++)
    printf ("  d_model=%-4zu cases=%-4zu NMSE=%.3e  max-abs=%.3e  "
            "max-abs/(1+max|ref|)=%.3e\n",
            d_models[di], worst_d[di].cases, worst_d[di].nmse,
            worst_d[di].max_abs, worst_d[di].max_abs_rel);
  printf ("  all          cases=%-4zu NMSE=%.3e  max-abs=%.3e  "
          "max-abs/(1+max|ref|)=%.3e\n",
          worst_all.cases, worst_all.nmse, worst_all.max_abs,
          worst_all.max_abs_rel);
  printf ("  weights      cases=%-4zu max-abs=%.3e\n", worst_w.cases,
          worst_w.max_abs);
  printf ("bounds: NMSE <= %.0e, max-abs <= %.0e * k * (1 + max|ref|), "
          "weights max-abs <= %.0e * k, k = max(1, max|score|/10)\n",
          NMSE_BOUND, MAXABS_REL_BOUND, WEIGHT_BOUND);
  printf ("largest k=%.2f; worst max-abs / bound: output %.2f, weights "
          "%.2f\n",
          worst_k, worst_frac_out, worst_frac_w);
  return tu_summary ("test-attend");
}
