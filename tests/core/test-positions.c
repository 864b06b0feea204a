/* Positional encodings (RoPE half-split and interleaved, ALiBi) against the
 * float64 reference (tests/core/reference.c, angles in long double):
 *  - sattn_attend over a block (positions 0..n-1);
 *  - a stream with causal + lookback L and window = L + hop, where every
 *    frame sees exactly the L frames before it, against one reference
 *    over the whole sequence (absolute positions), from frame 0 and from
 *    frame 1e9 (sattn_stream_reset_at): the errors must be alike;
 *  - a non-causal stream with hop = window (independent blocks);
 *  - byte-identical output for threads = 1, 2, 3;
 *  - the ALiBi slopes against Press et al.'s recursive rule;
 *  - refusals: extra keys with positions, odd head size for RoPE.
 * Bounds: NMSE <= 1e-10 and max |out - ref| <= 2e-5 (1 + max |ref|), the
 * bounds of test-attend with a little room for the rotation's rounding.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "fixture.h"
#include "reference.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMSE_BOUND 1e-10
#define MAXABS_REL 2e-5

static const char *pos_names[] = { "none", "rope", "rope-interleaved",
                                   "alibi" };

/* fx_build, then the model rebuilt with positions. */
static SattnStatus
build (Fixture *f, TuRng *r, size_t d, size_t heads, unsigned flags,
       size_t lookback, SattnPositions pos)
{
  SattnStatus st = fx_build (f, r, d, heads, flags, lookback);
  if (st != SATTN_OK)
    return st;
  sattn_model_free (f->model);
  f->cfg.positions = pos;
  f->cfg.rope_base = 0.0;
  f->ref.positions = (int) pos;
  f->ref.rope_base = 10000.0;
  f->model = sattn_model_new (&f->cfg, &f->w, &st);
  return f->model ? SATTN_OK : st;
}

static int
check_err (const TuErr *e, const char *what)
{
  double rel = e->max_abs / (1.0 + e->max_ref);
  int ok = tu_check (e->nonfinite == 0, "%s: %zu non-finite", what,
                     e->nonfinite);
  ok &= tu_check (tu_err_nmse (e) <= NMSE_BOUND, "%s: NMSE %.3g > %.3g", what,
                  tu_err_nmse (e), NMSE_BOUND);
  ok &= tu_check (rel <= MAXABS_REL, "%s: max-abs %.3g (rel %.3g) > %.3g", what,
                  e->max_abs, rel, MAXABS_REL);
  return ok;
}

static void
test_attend (TuRng *r)
{
  static const size_t heads[] = { 1, 2, 3, 4, 6 };
  for (int pos = 1; pos <= 3; pos++)
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
      for (unsigned v = 0; v < 4; v++) {
        unsigned flags = FX_PROJ | FX_BIAS | FX_OUT;
        if (v & 1)
          flags |= FX_CAUSAL;
        if (v & 2)
          flags |= FX_LOOKBACK;
        if (v == 3 && hi == 0)
          flags &= ~(FX_PROJ | FX_BIAS | FX_OUT); /* identity too */
        size_t H = heads[hi], d = H * 8, n = 37;
        Fixture f;
        char fl[128];
        tu_case_begin ("attend %s H=%zu %s", pos_names[pos], H,
                       fx_flags_string (flags, fl, sizeof fl));
        SattnStatus st = build (&f, r, d, H, flags, 5, (SattnPositions) pos);
        if (!TU_CHECK_STATUS (st, SATTN_OK, "model")) {
          tu_case_end ("%s", "");
          continue;
        }
        float *x = malloc (n * d * sizeof (float));
        float *out = malloc (n * f.ref.d_out * sizeof (float));
        double *ref = malloc (n * f.ref.d_out * sizeof (double));
        tu_fill_normal (r, x, n * d, 1.0);
        st = sattn_attend (f.model, x, n, NULL, out, NULL, NULL);
        TU_CHECK_STATUS (st, SATTN_OK, "attend");
        ref_attend (&f.ref, x, n, NULL, NULL, NULL, ref, NULL, NULL);
        TuErr e;
        tu_err_clear (&e);
        tu_err_add_f (&e, out, ref, n * f.ref.d_out);
        check_err (&e, "out");
        tu_case_end ("max-abs %.3g nmse %.3g", e.max_abs, tu_err_nmse (&e));
        free (x);
        free (out);
        free (ref);
        fx_free (&f);
      }
}

/* Push T frames (in pushes of varying sizes) into a frames-mode stream
 * started at absolute index p0; rows (T × d_out) after a drain. */
static int
run_stream (const Fixture *f, int threads, size_t n, size_t h, uint64_t p0,
            const float *x, size_t T, TuRng *r, float *rows)
{
  SattnStreamConfig sc = { .window = n, .hop = h, .threads = threads };
  SattnStatus st;
  SattnStream *s = sattn_stream_new (f->model, &sc, &st);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "stream_new"))
    return 0;
  TU_CHECK_STATUS (sattn_stream_reset_at (s, p0), SATTN_OK, "reset_at");
  const size_t d = f->cfg.d_model, dout = sattn_model_d_out (f->model);
  float *buf = malloc ((T + n) * dout * sizeof (float));
  SattnRowInfo *info = malloc ((T + n) * sizeof *info);
  size_t got = 0, i = 0;
  int ok = 1;
  while (i < T) {
    size_t k = r ? tu_rng_range (r, 1, 2 * h + 1) : h;
    if (k > T - i)
      k = T - i;
    size_t nr = 0;
    st = sattn_stream_push (s, x + i * d, k, NULL, buf, T + n, info, &nr);
    ok &= TU_CHECK_STATUS (st, SATTN_OK, "push");
    for (size_t j = 0; j < nr; j++)
      ok &= tu_check (info[j].first == p0 + got + j, "row %zu first %llu",
                      got + j, (unsigned long long) info[j].first);
    memcpy (rows + got * dout, buf, nr * dout * sizeof (float));
    got += nr;
    i += k;
  }
  size_t nr = 0;
  st = sattn_stream_drain (s, buf, T + n, info, &nr);
  ok &= TU_CHECK_STATUS (st, SATTN_OK, "drain");
  memcpy (rows + got * dout, buf, nr * dout * sizeof (float));
  got += nr;
  ok &= tu_check (got == T, "rows %zu of %zu", got, T);
  free (buf);
  free (info);
  sattn_stream_free (s);
  return ok;
}

/* Causal + lookback L, window L + hop: the whole sequence at once in the
 * reference.  Returns the max-abs error (relative to 1 + max |ref|). */
static double
stream_case (TuRng *r, SattnPositions pos, size_t H, size_t L, size_t h,
             uint64_t p0, const float *x, size_t T, uint64_t seed)
{
  Fixture f;
  TuRng wr;
  tu_rng_init (&wr, seed); /* same weights for both origins */
  double rel = INFINITY;
  SattnStatus st = build (&f, &wr, H * 8, H,
                          FX_PROJ | FX_BIAS | FX_OUT | FX_CAUSAL | FX_LOOKBACK,
                          L, pos);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "model"))
    return rel;
  const size_t dout = f.ref.d_out;
  float *rows = calloc (T * dout, sizeof (float));
  double *ref = malloc (T * dout * sizeof (double));
  if (run_stream (&f, 1, L + h, h, p0, x, T, r, rows)) {
    f.ref.pos0 = p0;
    ref_attend (&f.ref, x, T, NULL, NULL, NULL, ref, NULL, NULL);
    TuErr e;
    tu_err_clear (&e);
    tu_err_add_f (&e, rows, ref, T * dout);
    check_err (&e, "stream");
    rel = e.max_abs / (1.0 + e.max_ref);
  }
  free (rows);
  free (ref);
  fx_free (&f);
  return rel;
}

static void
test_stream (TuRng *r)
{
  const size_t T = 160, H = 3, d = H * 8;
  float *x = malloc (T * d * sizeof (float));
  tu_fill_normal (r, x, T * d, 1.0);
  for (int pos = 0; pos <= 3; pos++)
    for (size_t hop = 1; hop <= 7; hop += 3) {
      const size_t L = 12;
      tu_case_begin ("stream %s causal lookback=%zu hop=%zu, from 0 and 1e9",
                     pos_names[pos], L, hop);
      uint64_t seed = 1000 + (uint64_t) pos;
      double e0 = stream_case (r, (SattnPositions) pos, H, L, hop, 0, x, T,
                               seed);
      double e9 = stream_case (r, (SattnPositions) pos, H, L, hop,
                               UINT64_C (1000000000), x, T, seed);
      tu_case_end ("max-abs rel: at 0 %.3g, at 1e9 %.3g", e0, e9);
    }
  free (x);
}

/* Non-causal, hop = window: each window is an independent block whose
 * rows sit at absolute positions p0 + k n ... */
static void
test_blocks (TuRng *r)
{
  const size_t n = 16, T = 64, H = 4, d = 32;
  for (int pos = 1; pos <= 3; pos++) {
    tu_case_begin ("stream %s non-causal blocks window=hop=%zu from 1e9+3",
                   pos_names[pos], n);
    Fixture f;
    SattnStatus st = build (&f, r, d, H, FX_PROJ | FX_BIAS | FX_OUT, 0,
                            (SattnPositions) pos);
    if (!TU_CHECK_STATUS (st, SATTN_OK, "model")) {
      tu_case_end ("%s", "");
      continue;
    }
    const uint64_t p0 = UINT64_C (1000000003);
    float *x = malloc (T * d * sizeof (float));
    float *rows = calloc (T * d, sizeof (float));
    double *ref = malloc (T * d * sizeof (double));
    tu_fill_normal (r, x, T * d, 1.0);
    TuErr e;
    tu_err_clear (&e);
    if (run_stream (&f, 1, n, n, p0, x, T, NULL, rows)) {
      for (size_t b = 0; b < T / n; b++) {
        f.ref.pos0 = p0 + b * n;
        ref_attend (&f.ref, x + b * n * d, n, NULL, NULL, NULL, ref + b * n * d,
                    NULL, NULL);
      }
      tu_err_add_f (&e, rows, ref, T * d);
      check_err (&e, "blocks");
    }
    tu_case_end ("max-abs %.3g", e.max_abs);
    free (x);
    free (rows);
    free (ref);
    fx_free (&f);
  }
}

static void
test_threads (TuRng *r)
{
  const size_t T = 300, H = 4, d = 64, L = 40, h = 24;
  float *x = malloc (T * d * sizeof (float));
  tu_fill_normal (r, x, T * d, 1.0);
  for (int pos = 1; pos <= 3; pos++) {
    tu_case_begin ("%s byte-identical for threads 1, 2, 3", pos_names[pos]);
    /* One model, streams of 1, 2 and 3 threads. */
    float *rows[3];
    Fixture f;
    TuRng wr;
    tu_rng_init (&wr, 77);
    SattnStatus st = build (&f, &wr, d, H,
                            FX_PROJ | FX_BIAS | FX_OUT | FX_CAUSAL |
                                FX_LOOKBACK,
                            L, (SattnPositions) pos);
    TU_CHECK_STATUS (st, SATTN_OK, "model");
    for (int t = 0; t < 3; t++) {
      rows[t] = calloc (T * d, sizeof (float));
      if (st == SATTN_OK)
        run_stream (&f, t + 1, L + h, h, 12345, x, T, NULL, rows[t]);
    }
    fx_free (&f);
    tu_check_threads_identical (rows, 3, T * d);
    tu_case_end ("%s", "");
  }
  free (x);
}

static void
test_slopes (void)
{
  tu_case_begin ("alibi slopes, heads 1..64, against Press et al.");
  for (size_t H = 1; H <= 64; H++) {
    double ref[64];
    ref_alibi_slopes (H, ref);
    for (size_t h = 0; h < H; h++)
      tu_check (fabs (sattn_alibi_slope (h, H) - ref[h]) <= 1e-14 * ref[h],
                "H=%zu h=%zu: %.17g vs %.17g", H, h, sattn_alibi_slope (h, H),
                ref[h]);
  }
  tu_case_end ("%s", "");
}

static void
test_refusals (void)
{
  tu_case_begin ("refusals");
  float bk[8] = { 0 }, bv[8] = { 0 };
  SattnConfig c = { .d_model = 8,
                    .heads = 2,
                    .positions = SATTN_POSITIONS_ROPE };
  SattnWeights w = { .bias_k = bk, .bias_v = bv };
  SattnStatus st;
  SattnModel *m = sattn_model_new (&c, &w, &st);
  tu_check (m == NULL, "bias_k + rope accepted");
  TU_CHECK_STATUS (st, SATTN_E_INVAL, "bias_k + rope");
  char why[256];
  sattn_model_check (&c, &w, why, sizeof why);
  tu_check (strstr (why, "add_bias_kv") != NULL, "no reason for bias_k: %s",
            why);
  SattnWeights z = { .add_zero_attn = 1 };
  c.positions = SATTN_POSITIONS_ALIBI;
  m = sattn_model_new (&c, &z, &st);
  tu_check (m == NULL, "zero_attn + alibi accepted");
  c.positions = SATTN_POSITIONS_ROPE_INTERLEAVED;
  c.d_model = 6;
  c.heads = 2;
  m = sattn_model_new (&c, NULL, &st);
  tu_check (m == NULL, "odd head size accepted");
  TU_CHECK_STATUS (st, SATTN_E_SHAPE, "odd head size");
  TU_CHECK_STATUS (sattn_model_check (&c, NULL, why, sizeof why), SATTN_E_SHAPE,
                   "check odd head size");
  tu_check (strstr (why, "d_head=3") != NULL, "no reason for odd: %s", why);
  c.d_model = 8;
  c.rope_base = 0.5;
  m = sattn_model_new (&c, NULL, &st);
  tu_check (m == NULL, "rope_base 0.5 accepted");
  c.rope_base = 0.0;
  c.positions = (SattnPositions) 9;
  m = sattn_model_new (&c, NULL, &st);
  tu_check (m == NULL, "positions 9 accepted");
  c.positions = SATTN_POSITIONS_ROPE;
  m = sattn_model_new (&c, NULL, &st);
  tu_check (m != NULL, "rope refused");
  SattnStreamConfig sc = { .window = 4, .hop = 1, .threads = 1 };
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  TU_CHECK_STATUS (sattn_stream_reset_at (s, UINT64_C (1) << 53), SATTN_E_INVAL,
                   "reset_at 2^53");
  TU_CHECK_STATUS (sattn_stream_reset_at (s, (UINT64_C (1) << 53) - 1),
                   SATTN_OK, "reset_at 2^53 - 1");
  tu_check (sattn_stream_frames (s) == (UINT64_C (1) << 53) - 1, "frames");
  sattn_stream_free (s);
  sattn_model_free (m);
  tu_case_end ("%s", "");
}

int
main (void)
{
  TuRng r;
  tu_rng_init (&r, 20240612);
  test_slopes ();
  test_refusals ();
  test_attend (&r);
  test_stream (&r);
  test_blocks (&r);
  test_threads (&r);
  return tu_summary ("test-positions");
}
