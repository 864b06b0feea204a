/* Encoder layers (residual, LayerNorm, feed-forward around the attention)
 * against the float64 reference (ref_encoder in tests/core/reference.c):
 *  - sattn_attend for post-norm / pre-norm × relu / gelu × positions ×
 *    causal / lookback, with LayerNorm parameters given or left out;
 *  - a frames-mode stream with causal + lookback L and window = L + hop
 *    against the reference over the whole sequence;
 *  - a mean-mode stream pools the layer's rows;
 *  - byte-identical output for threads = 1, 2, 3;
 *  - refusals (no feed-forward weights, d_out != d_model);
 *  - rows that overflow float32 inside the layer are zeros, counted in
 *    overflow_rows and, by sattn_stream_overflow_parts, in the part that
 *    overflowed: the output projection, norm1, linear1, linear2, norm2 or
 *    the residual sum, for the layer kinds where each can.
 * Bounds: NMSE <= 1e-10 and max |out - ref| <= 2e-5 (1 + max |ref|).
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

typedef struct {
  Fixture f;
  RefLayer l;
  float *bufs[8];
} Enc;

static float *
normal (Enc *e, size_t k, TuRng *r, size_t n, double sigma, double mean)
{
  float *p = malloc (n * sizeof (float));
  tu_fill_normal (r, p, n, sigma);
  for (size_t i = 0; i < n; i++)
    p[i] += (float) mean;
  e->bufs[k] = p;
  return p;
}

static SattnStatus
enc_build (Enc *e, TuRng *r, size_t d, size_t heads, unsigned flags,
           size_t lookback, SattnPositions pos, int gelu, int norm_first,
           int affine)
{
  memset (e, 0, sizeof *e);
  SattnStatus st = fx_build (&e->f, r, d, heads, flags, lookback);
  if (st != SATTN_OK)
    return st;
  sattn_model_free (e->f.model);
  const size_t dff = 4 * d;
  SattnWeights *w = &e->f.w;
  w->w1 = normal (e, 0, r, dff * d, 1.0 / sqrt ((double) d), 0.0);
  w->b1 = normal (e, 1, r, dff, 0.1, 0.0);
  w->w2 = normal (e, 2, r, d * dff, 1.0 / sqrt ((double) dff), 0.0);
  w->b2 = normal (e, 3, r, d, 0.1, 0.0);
  if (affine) {
    w->norm1_w = normal (e, 4, r, d, 0.2, 1.0);
    w->norm1_b = normal (e, 5, r, d, 0.2, 0.0);
    w->norm2_w = normal (e, 6, r, d, 0.2, 1.0);
    w->norm2_b = normal (e, 7, r, d, 0.2, 0.0);
  }
  e->f.cfg.encoder = 1;
  e->f.cfg.d_ff = dff;
  e->f.cfg.activation = gelu ? SATTN_ACTIVATION_GELU : SATTN_ACTIVATION_RELU;
  e->f.cfg.norm_first = norm_first;
  e->f.cfg.norm_eps = 0.0;
  e->f.cfg.positions = pos;
  e->f.ref.positions = (int) pos;
  e->f.ref.rope_base = 10000.0;
  e->l = (RefLayer){ dff,        w->w1,      w->b1,      w->w2,
                     w->b2,      w->norm1_w, w->norm1_b, w->norm2_w,
                     w->norm2_b, gelu,       norm_first, 1e-5 };
  e->f.model = sattn_model_new (&e->f.cfg, w, &st);
  return e->f.model ? SATTN_OK : st;
}

static void
enc_free (Enc *e)
{
  fx_free (&e->f);
  for (size_t i = 0; i < 8; i++)
    free (e->bufs[i]);
}

static void
check_err (const TuErr *e, const char *what)
{
  double rel = e->max_abs / (1.0 + e->max_ref);
  tu_check (e->nonfinite == 0, "%s: %zu non-finite", what, e->nonfinite);
  tu_check (tu_err_nmse (e) <= NMSE_BOUND, "%s: NMSE %.3g > %.3g", what,
            tu_err_nmse (e), NMSE_BOUND);
  tu_check (rel <= MAXABS_REL, "%s: max-abs %.3g (rel %.3g) > %.3g", what,
            e->max_abs, rel, MAXABS_REL);
}

static double *
to_double (const float *x, size_t n)
{
  double *y = malloc (n * sizeof *y);
  for (size_t i = 0; i < n; i++)
    y[i] = x[i];
  return y;
}

/* d_model 32 (4 heads) in every combination; d_model 20 (2 heads, d_ff
 * 80) in the four layer kinds: widths that are no multiple of the vector
 * loops' column blocks (16 on AVX-512, 12 on AVX2), so their tails run. */
static void
test_attend (TuRng *r)
{
  for (int g = 0; g < 2; g++)
    for (int pos = 0; pos <= 3; pos += 1)
      for (int v = 0; v < (g == 0 ? 16 : 4); v++) {
        const size_t H = g == 0 ? 4 : 2, d = g == 0 ? 32 : 20, n = 29;
        int gelu = v & 1, nf = (v >> 1) & 1, mask = (v >> 2) & 3;
        int affine = v % 5 != 4;
        unsigned flags = FX_PROJ | FX_BIAS | FX_OUT | FX_BO;
        if (mask & 1)
          flags |= FX_CAUSAL;
        if (mask & 2)
          flags |= FX_LOOKBACK;
        Enc e;
        char fl[128];
        tu_case_begin ("attend%s %s %s %s %s%s", g == 0 ? "" : " d_model 20",
                       pos_names[pos], nf ? "pre-norm" : "post-norm",
                       gelu ? "gelu" : "relu",
                       fx_flags_string (flags, fl, sizeof fl),
                       affine ? "" : " no-affine");
        SattnStatus st = enc_build (&e, r, d, H, flags, 6, (SattnPositions) pos,
                                    gelu, nf, affine);
        TuErr err;
        tu_err_clear (&err);
        if (TU_CHECK_STATUS (st, SATTN_OK, "model")) {
          float *x = malloc (n * d * sizeof (float));
          float *out = malloc (n * d * sizeof (float));
          double *ref = malloc (n * d * sizeof (double));
          tu_fill_normal (r, x, n * d, 1.0);
          TU_CHECK_STATUS (sattn_attend (e.f.model, x, n, NULL, out, NULL,
                                         NULL),
                           SATTN_OK, "attend");
          double *xd = to_double (x, n * d);
          ref_encoder (&e.f.ref, &e.l, xd, n, ref);
          tu_err_add_f (&err, out, ref, n * d);
          check_err (&err, "out");
          free (x);
          free (out);
          free (ref);
          free (xd);
        }
        tu_case_end ("max-abs %.3g nmse %.3g", err.max_abs, tu_err_nmse (&err));
        enc_free (&e);
      }
}

/* Frames-mode stream from frame p0 (pushes of varying size), T rows. */
static int
run_stream (SattnModel *m, int threads, size_t n, size_t h,
            SattnOutputMode mode, uint64_t p0, const float *x, size_t T,
            size_t d, TuRng *r, float *rows, size_t *n_rows)
{
  SattnStreamConfig sc = { .window = n,
                           .hop = h,
                           .output = mode,
                           .threads = threads,
                           .precision = fx_precision () };
  SattnStatus st;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "stream_new"))
    return 0;
  sattn_stream_reset_at (s, p0);
  const size_t rf = sattn_stream_row_floats (s);
  size_t got = 0, i = 0, cap = T + n;
  int ok = 1;
  while (i < T) {
    size_t k = r ? tu_rng_range (r, 1, 2 * h + 1) : h;
    if (k > T - i)
      k = T - i;
    size_t nr = 0;
    st = sattn_stream_push (s, x + i * d, k, NULL, rows + got * rf, cap - got,
                            NULL, &nr);
    ok &= TU_CHECK_STATUS (st, SATTN_OK, "push");
    got += nr;
    i += k;
  }
  size_t nr = 0;
  st = sattn_stream_drain (s, rows + got * rf, cap - got, NULL, &nr);
  ok &= TU_CHECK_STATUS (st, SATTN_OK, "drain");
  got += nr;
  *n_rows = got;
  sattn_stream_free (s);
  return ok;
}

static void
test_stream (TuRng *r)
{
  const size_t H = 2, d = 16, T = 120, L = 10;
  float *x = malloc (T * d * sizeof (float));
  double *xd;
  tu_fill_normal (r, x, T * d, 1.0);
  xd = to_double (x, T * d);
  for (int pos = 0; pos <= 3; pos++)
    for (int v = 0; v < 4; v++) {
      int gelu = v & 1, nf = v >> 1;
      size_t hop = 1 + (size_t) (3 * v) % 7;
      Enc e;
      tu_case_begin ("stream %s %s %s causal lookback=%zu hop=%zu from 1e9",
                     pos_names[pos], nf ? "pre-norm" : "post-norm",
                     gelu ? "gelu" : "relu", L, hop);
      SattnStatus st = enc_build (&e, r, d, H,
                                  FX_PROJ | FX_BIAS | FX_OUT | FX_BO |
                                      FX_CAUSAL | FX_LOOKBACK,
                                  L, (SattnPositions) pos, gelu, nf, 1);
      TuErr err;
      tu_err_clear (&err);
      if (TU_CHECK_STATUS (st, SATTN_OK, "model")) {
        float *rows = calloc ((T + L + hop) * d, sizeof (float));
        double *ref = malloc (T * d * sizeof (double));
        size_t got = 0;
        if (run_stream (e.f.model, 1, L + hop, hop, SATTN_OUTPUT_FRAMES,
                        UINT64_C (1000000000), x, T, d, r, rows, &got) &&
            tu_check (got == T, "rows %zu", got)) {
          e.f.ref.pos0 = UINT64_C (1000000000);
          ref_encoder (&e.f.ref, &e.l, xd, T, ref);
          tu_err_add_f (&err, rows, ref, T * d);
          check_err (&err, "stream");
        }
        free (rows);
        free (ref);
      }
      tu_case_end ("max-abs %.3g", err.max_abs);
      enc_free (&e);
    }
  free (x);
  free (xd);
}

/* Mean mode, hop = window: one pooled row per block, the mean of the
 * layer's rows over the block (non-causal, independent blocks). */
static void
test_mean (TuRng *r)
{
  const size_t H = 2, d = 16, n = 8, T = 32;
  Enc e;
  tu_case_begin ("mean mode pools the layer's rows (rope, post-norm)");
  SattnStatus st = enc_build (&e, r, d, H, FX_PROJ | FX_BIAS | FX_OUT, 0,
                              SATTN_POSITIONS_ROPE, 0, 0, 1);
  TuErr err;
  tu_err_clear (&err);
  if (TU_CHECK_STATUS (st, SATTN_OK, "model")) {
    float *x = malloc (T * d * sizeof (float));
    float *rows = calloc ((T / n + 1) * d, sizeof (float));
    double *ref = malloc (n * d * sizeof (double));
    double *mean = calloc ((T / n) * d, sizeof (double));
    tu_fill_normal (r, x, T * d, 1.0);
    size_t got = 0;
    if (run_stream (e.f.model, 1, n, n, SATTN_OUTPUT_MEAN, 0, x, T, d, NULL,
                    rows, &got) &&
        tu_check (got == T / n, "rows %zu", got)) {
      for (size_t b = 0; b < T / n; b++) {
        double *xd = to_double (x + b * n * d, n * d);
        e.f.ref.pos0 = b * n;
        ref_encoder (&e.f.ref, &e.l, xd, n, ref);
        for (size_t i = 0; i < n; i++)
          for (size_t t = 0; t < d; t++)
            mean[b * d + t] += ref[i * d + t] / (double) n;
        free (xd);
      }
      tu_err_add_f (&err, rows, mean, (T / n) * d);
      check_err (&err, "mean");
    }
    free (x);
    free (rows);
    free (ref);
    free (mean);
  }
  tu_case_end ("max-abs %.3g", err.max_abs);
  enc_free (&e);
}

static void
test_threads (TuRng *r)
{
  const size_t H = 4, d = 64, T = 200, L = 40, h = 24;
  float *x = malloc (T * d * sizeof (float));
  tu_fill_normal (r, x, T * d, 1.0);
  for (int nf = 0; nf < 2; nf++) {
    tu_case_begin ("%s gelu rope: byte-identical for threads 1, 2, 3",
                   nf ? "pre-norm" : "post-norm");
    /* One model, streams of 1, 2 and 3 threads. */
    float *rows[3];
    Enc e;
    TuRng wr;
    tu_rng_init (&wr, 99);
    SattnStatus st = enc_build (&e, &wr, d, H,
                                FX_PROJ | FX_BIAS | FX_OUT | FX_CAUSAL |
                                    FX_LOOKBACK,
                                L, SATTN_POSITIONS_ROPE, 1, nf, 1);
    TU_CHECK_STATUS (st, SATTN_OK, "model");
    for (int t = 0; t < 3; t++) {
      size_t got = 0;
      rows[t] = calloc ((T + L + h) * d, sizeof (float));
      if (st == SATTN_OK)
        run_stream (e.f.model, t + 1, L + h, h, SATTN_OUTPUT_FRAMES, 0, x, T, d,
                    NULL, rows[t], &got);
    }
    enc_free (&e);
    tu_check_threads_identical (rows, 3, T * d);
    tu_case_end ("%s", "");
  }
  free (x);
}

static void
test_refusals (void)
{
  tu_case_begin ("refusals");
  float w1[32 * 8] = { 0 };
  SattnConfig c = { .d_model = 8, .heads = 2, .encoder = 1, .d_ff = 32 };
  SattnWeights w = { .w1 = w1 };
  SattnStatus st;
  tu_check (sattn_model_new (&c, &w, &st) == NULL, "no w2 accepted");
  TU_CHECK_STATUS (st, SATTN_E_MISSING, "no w2");
  char why[256];
  sattn_model_check (&c, &w, why, sizeof why);
  tu_check (strstr (why, "w2") != NULL, "no reason for no w2: %s", why);
  w.w2 = w1;
  c.d_ff = 0;
  tu_check (sattn_model_new (&c, &w, &st) == NULL, "d_ff 0 accepted");
  c.d_ff = 32;
  c.norm_eps = -1.0;
  tu_check (sattn_model_new (&c, &w, &st) == NULL, "eps -1 accepted");
  c.norm_eps = 0.0;
  float wo[4 * 8] = { 0 };
  w.wo = wo;
  c.d_out = 4;
  tu_check (sattn_model_new (&c, &w, &st) == NULL, "d_out 4 accepted");
  TU_CHECK_STATUS (st, SATTN_E_SHAPE, "d_out 4");
  w.wo = NULL;
  c.d_out = 0;
  SattnModel *m = sattn_model_new (&c, &w, &st);
  tu_check (m != NULL, "valid encoder refused");
  tu_check (m && sattn_model_config (m)->norm_eps == 1e-5, "eps default");
  sattn_model_free (m);
  tu_case_end ("%s", "");
}

/* d_model 2, 1 head, identity Q/K/V, d_ff 4, linear1 = [I; -I] (hidden =
 * relu (n, -n) of the LayerNorm output n = (+-1, -+1)), linear2 = [I, -I]
 * unless a case scales a part: each case makes exactly one part overflow
 * for every row and checks that the rows are zeros, counted, and all
 * counted in that part. */
static void
test_overflow_parts (void)
{
  enum { D = 2, FF = 4, T = 8 };
  static const struct {
    const char *name;
    SattnPart part;
    int norm_first;
    float amp, wo, n1, l1b, l2, l2b, n2;
  } cases[] = {
    /* rows of 1e10 × W_o = 1e30 I: 1e40 */
    { "out_proj", SATTN_PART_OUT_PROJ, 0, 1e10f, 1e30f, 1, 0, 1, 0, 1 },
    /* norm1 = 3e38 n + 3e38: 6e38 */
    { "norm1", SATTN_PART_NORM1, 0, 1, 1, 3e38f, 0, 1, 0, 1 },
    /* linear1 = 3e38 [I; -I], bias 3e38: 3e38 n + 3e38 */
    { "linear1 post", SATTN_PART_LINEAR1, 0, 1, 1, 1, 3e38f, 1, 0, 1 },
    { "linear1 pre", SATTN_PART_LINEAR1, 1, 1, 1, 1, 3e38f, 1, 0, 1 },
    /* pre-norm: linear2 = 3e38 [I, -I] */
    { "linear2", SATTN_PART_LINEAR2, 1, 1, 1, 1, 0, 3e38f, 0, 1 },
    /* norm2 = 3e38 n + 3e38 */
    { "norm2 post", SATTN_PART_NORM2, 0, 1, 1, 1, 0, 1, 0, 3e38f },
    { "norm2 pre", SATTN_PART_NORM2, 1, 1, 1, 1, 0, 1, 0, 3e38f },
    /* pre-norm: x of +-2e38 plus linear2's +-2e38 (its bias): each term
     * fits, the sum does not */
    { "residual", SATTN_PART_RESIDUAL, 1, 2e38f, 1, 1, 0, 1, 2e38f, 1 },
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    tu_case_begin ("overflow part: %s", cases[c].name);
    float wo[D * D] = { cases[c].wo, 0, 0, cases[c].wo };
    float w1[FF * D] = { 1, 0, 0, 1, -1, 0, 0, -1 };
    float b1[FF];
    float w2[D * FF] = { 1, 0, -1, 0, 0, 1, 0, -1 };
    float b2[D] = { cases[c].l2b, -cases[c].l2b };
    float n1[D] = { cases[c].n1, cases[c].n1 };
    float n2[D] = { cases[c].n2, cases[c].n2 };
    float x[T * D];
    for (size_t i = 0; i < FF; i++)
      b1[i] = cases[c].l1b;
    for (size_t i = 0; cases[c].l1b != 0.0f && i < FF * D; i++)
      w1[i] *= cases[c].l1b;
    for (size_t i = 0; i < D * FF; i++)
      w2[i] *= cases[c].l2;
    for (size_t i = 0; i < T; i++) {
      x[i * D] = cases[c].amp * (1.0f + 0.125f * (float) i);
      x[i * D + 1] = -x[i * D];
    }
    if (cases[c].part == SATTN_PART_RESIDUAL)
      for (size_t i = 0; i < T * D; i++)
        x[i] = i % 2 ? -2e38f : 2e38f;
    SattnConfig cfg = { .d_model = D,
                        .heads = 1,
                        .d_out = D,
                        .encoder = 1,
                        .d_ff = FF,
                        .norm_first = cases[c].norm_first };
    SattnWeights w = { .wo = wo,
                       .w1 = w1,
                       .b1 = b1,
                       .w2 = w2,
                       .b2 = b2,
                       .norm1_w = n1,
                       .norm1_b = n1,
                       .norm2_w = n2,
                       .norm2_b = n2 };
    /* threads 1 and 2 in turn: the layer runs on the workers too */
    SattnStreamConfig sc = { .window = 4,
                             .hop = 4,
                             .threads = 1 + (int) (c % 2) };
    SattnStatus st;
    SattnModel *m = sattn_model_new (&cfg, &w, &st);
    SattnStream *s = m ? sattn_stream_new (m, &sc, &st) : NULL;
    char why[256] = "";
    if (m == NULL)
      sattn_model_check (&cfg, &w, why, sizeof why);
    tu_check (s != NULL, "model or stream refused: %s %s",
              sattn_status_string (st), why);
    if (s == NULL) {
      sattn_model_free (m);
      tu_case_end ("%s", "");
      continue;
    }
    float out[T * D];
    size_t rows = 0;
    st = sattn_stream_push (s, x, T, NULL, out, T, NULL, &rows);
    TU_CHECK_STATUS (st, SATTN_OK, "push");
    tu_check (rows == T, "%zu rows", rows);
    for (size_t i = 0; i < rows * D; i++)
      tu_check (out[i] == 0.0f, "out[%zu] = %g, not zero", i, out[i]);
    uint64_t parts[SATTN_PART_COUNT + 2];
    memset (parts, 0xff, sizeof parts);
    st = sattn_stream_overflow_parts (s, parts, SATTN_PART_COUNT + 2);
    TU_CHECK_STATUS (st, SATTN_OK, "overflow parts");
    SattnStats stats;
    sattn_stream_get_stats (s, &stats, 1);
    tu_check (stats.overflow_rows == T, "overflow_rows %llu",
              (unsigned long long) stats.overflow_rows);
    tu_check (stats.overflow_frames == 0 && stats.invalid_frames == 0,
              "frames counted as invalid");
    for (size_t p = 0; p < SATTN_PART_COUNT + 2; p++)
      tu_check (parts[p] == (p == (size_t) cases[c].part ? T : 0),
                "%s: %llu rows, expected them in %s",
                sattn_part_string ((SattnPart) p),
                (unsigned long long) parts[p],
                sattn_part_string (cases[c].part));
    /* cleared with the statistics */
    st = sattn_stream_overflow_parts (s, parts, SATTN_PART_COUNT);
    for (size_t p = 0; p < SATTN_PART_COUNT; p++)
      tu_check (parts[p] == 0, "part %zu not cleared", p);
    TU_CHECK_STATUS (sattn_stream_overflow_parts (s, NULL, 1), SATTN_E_INVAL,
                     "NULL counts");
    sattn_stream_free (s);
    sattn_model_free (m);
    tu_case_end ("%s", "");
  }
}

int
main (void)
{
  TuRng r;
  tu_rng_init (&r, 20240613);
  test_refusals ();
  test_overflow_parts ();
  test_attend (&r);
  test_stream (&r);
  test_mean (&r);
  test_threads (&r);
  return tu_summary ("test-encoder");
}
