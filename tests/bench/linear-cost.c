/* What the double-precision products cost the per-window executor: the
 * linear layers of one window of a whole model (rows × din into n, bias
 * added), timed three ways side by side in one process, blocks of each
 * interleaved,
 *
 *   double    the library's loops (sattn_linear_f for the projections:
 *             float rows in, widened, summed in double from the bias,
 *             rounded once; sattn_linear_d for the feed-forward: double
 *             rows in and out);
 *   sgemm     cblas_sgemm on float copies of the weights (the bias copied
 *             into the output first, beta = 1), float rows in and out;
 *   float     a register-tiled AVX-512 loop in float (8 rows × 32
 *             columns of FMA chains from the bias, the library's tile
 *             shape in float lanes), float rows in and out,
 *   fast      what a whole model's precision=fast runs: sattn_qk (the
 *             tiled float product of QKᵀ, chains from 0) and the bias
 *             added once,
 *
 * on the shapes of a window (default: the benchmark's per-window model,
 * 16 rows, d_model 32, d_ff 64: Q|K|V 32 -> 96, out 32 -> 32, linear1
 * 32 -> 64, linear2 64 -> 32, each twice for two layers), and the error
 * of each way against the same product in long double (max-abs over the
 * outputs, relative to max |y|).  Prints the median time of one window's
 * products per way over the blocks, the ratios to double, and the share
 * of the one-thread FMA peak (ab_fma_peak, measured between the blocks)
 * each reaches.  Wall clock; pin it (taskset).
 *
 * usage: sattn-linear-cost [--rows N] [--d-model D] [--d-ff F]
 *                          [--blocks B]
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ab-util.h"
#include "rng.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LC_AVX512 __attribute__ ((target ("avx512f,avx512dq,avx512vl,fma")))

/* y (rows × n, stride ldy) = b + x (rows × din) W (din × n), n a
 * multiple of 16: tiles of up to 8 rows × 32 columns. */
LC_AVX512 static void
float_tiles (const float *x, size_t rows, const float *W, const float *b,
             size_t din, size_t n, float *y)
{
  for (size_t i0 = 0; i0 < rows; i0 += 8) {
    const size_t R = rows - i0 < 8 ? rows - i0 : 8;
    for (size_t j = 0; j < n; j += 32) {
      const int two = j + 32 <= n;
      __m512 a[8][2];
      for (size_t r = 0; r < R; r++) {
        a[r][0] = _mm512_loadu_ps (b + j);
        a[r][1] = two ? _mm512_loadu_ps (b + j + 16) : a[r][0];
      }
      for (size_t t = 0; t < din; t++) {
        const __m512 w0 = _mm512_loadu_ps (W + t * n + j);
        const __m512 w1 = two ? _mm512_loadu_ps (W + t * n + j + 16) : w0;
        for (size_t r = 0; r < R; r++) {
          const __m512 xv = _mm512_set1_ps (x[(i0 + r) * din + t]);
          a[r][0] = _mm512_fmadd_ps (xv, w0, a[r][0]);
          a[r][1] = _mm512_fmadd_ps (xv, w1, a[r][1]);
        }
      }
      for (size_t r = 0; r < R; r++) {
        _mm512_storeu_ps (y + (i0 + r) * n + j, a[r][0]);
        if (two)
          _mm512_storeu_ps (y + (i0 + r) * n + j + 16, a[r][1]);
      }
    }
  }
}
#define HAVE_FLOAT_TILES 1
#endif

typedef struct {
  size_t din, n;
  int dbl_in; /* 1: double rows in and out (feed-forward) */
  float *W, *b, *xf, *yf;
  double *Wd, *bd, *xd, *yd;
  long double *ref;
  float *xsum;
} Shape;

static void
shape_init (Shape *s, TestRng *rng, size_t rows, size_t din, size_t n,
            int dbl_in)
{
  s->din = din;
  s->n = n;
  s->dbl_in = dbl_in;
  s->W = test_rng_floats (rng, din * n, 1.0f / sqrtf ((float) din));
  s->b = test_rng_floats (rng, n, 0.1f);
  s->xf = test_rng_floats (rng, rows * din, 1.0f);
  s->yf = malloc (rows * n * sizeof (float));
  s->Wd = malloc (din * n * sizeof (double));
  s->bd = malloc (n * sizeof (double));
  s->xd = malloc (rows * din * sizeof (double));
  s->yd = malloc (rows * n * sizeof (double));
  s->ref = malloc (rows * n * sizeof (long double));
  for (size_t k = 0; k < din * n; k++)
    s->Wd[k] = (double) s->W[k];
  for (size_t k = 0; k < n; k++)
    s->bd[k] = (double) s->b[k];
  for (size_t k = 0; k < rows * din; k++)
    s->xd[k] = (double) s->xf[k];
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < n; j++) {
      long double acc = s->b[j];
      for (size_t t = 0; t < din; t++)
        acc += (long double) s->xf[i * din + t] * s->W[t * n + j];
      s->ref[i * n + j] = acc;
    }
}

enum { WAY_DOUBLE, WAY_SGEMM, WAY_FLOAT, WAY_FAST, WAYS };
static const char *const way_name[WAYS] = { "double (the library)",
                                            "cblas_sgemm (float)",
                                            "float tiles (AVX-512)",
                                            "precision=fast (sattn_qk)" };

static void
run_way (int way, Shape *s, size_t rows)
{
  const size_t din = s->din, n = s->n;
  switch (way) {
    case WAY_DOUBLE:
      if (s->dbl_in)
        sattn_linear_d (s->xd, din, rows, s->Wd, n, s->bd, din, n, s->yd, n);
      else
        sattn_linear_f (s->xf, din, rows, s->Wd, n, s->bd, din, n, s->yf, n);
      break;
    case WAY_SGEMM:
      for (size_t i = 0; i < rows; i++)
        memcpy (s->yf + i * n, s->b, n * sizeof (float));
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) rows,
                   (int) n, (int) din, 1.0f, s->xf, (int) din, s->W, (int) n,
                   1.0f, s->yf, (int) n);
      break;
    case WAY_FAST:
      sattn_qk (s->xf, din, s->W, n, rows, n, din, s->yf, n);
      sattn_add_bias (s->yf, n, rows, s->b, n);
      break;
    default:
#ifdef HAVE_FLOAT_TILES
      float_tiles (s->xf, rows, s->W, s->b, din, n, s->yf);
#endif
      break;
  }
}

/* Max-abs error of the last run_way against the reference, relative to
 * max |ref|. */
static double
way_error (int way, const Shape *s, size_t rows)
{
  double err = 0.0, mx = 0.0;
  for (size_t k = 0; k < rows * s->n; k++) {
    const double got = way == WAY_DOUBLE && s->dbl_in ? s->yd[k]
                                                      : (double) s->yf[k];
    const double e = fabs (got - (double) s->ref[k]);
    err = e > err ? e : err;
    mx = fabs ((double) s->ref[k]) > mx ? fabs ((double) s->ref[k]) : mx;
  }
  return err / mx;
}

int
main (int argc, char **argv)
{
  size_t rows = 16, D = 32, F = 64, blocks = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp (argv[i], "--rows") == 0)
      rows = strtoul (argv[i + 1], NULL, 10);
    else if (strcmp (argv[i], "--d-model") == 0)
      D = strtoul (argv[i + 1], NULL, 10);
    else if (strcmp (argv[i], "--d-ff") == 0)
      F = strtoul (argv[i + 1], NULL, 10);
    else if (strcmp (argv[i], "--blocks") == 0)
      blocks = strtoul (argv[i + 1], NULL, 10);
    else {
      fprintf (stderr, "usage: sattn-linear-cost [--rows N] [--d-model D] "
                       "[--d-ff F] [--blocks B]\n");
      return 2;
    }
  }
  if (rows == 0 || D == 0 || F == 0 || D % 16 || F % 16 || blocks == 0 ||
      rows > 4096 || D > 4096 || F > 4096) {
    fprintf (stderr, "sattn-linear-cost: rows 1-4096, d_model and d_ff "
                     "multiples of 16 up to 4096, blocks > 0\n");
    return 2;
  }
#ifndef HAVE_FLOAT_TILES
  fprintf (stderr, "sattn-linear-cost: x86 only\n");
  return 77;
#else
  if (!__builtin_cpu_supports ("avx512f")) {
    fprintf (stderr, "sattn-linear-cost: needs AVX-512\n");
    return 77;
  }
  TestRng rng = { 0x1234567887654321ull };
  /* One layer's products (the per-window model has two such layers). */
  Shape sh[4];
  shape_init (&sh[0], &rng, rows, D, 3 * D, 0); /* Q | K | V */
  shape_init (&sh[1], &rng, rows, D, D, 0);     /* out */
  shape_init (&sh[2], &rng, rows, D, F, 1);     /* linear1 */
  shape_init (&sh[3], &rng, rows, F, D, 1);     /* linear2 */
  const double flop = 2.0 * 2.0 * (double) rows *
                      (3.0 * D * D + D * D + 2.0 * D * F); /* two layers */
  const size_t reps = 64; /* windows per timed block */
  double *t[WAYS], *peak = malloc (blocks * sizeof (double));
  for (int w = 0; w < WAYS; w++)
    t[w] = malloc (blocks * sizeof (double));
  double err[WAYS] = { 0.0 };
  for (int w = 0; w < WAYS; w++)
    for (int k = 0; k < 4; k++) {
      run_way (w, &sh[k], rows);
      double e = way_error (w, &sh[k], rows);
      err[w] = e > err[w] ? e : err[w];
    }
  unsigned long peak_iters = 1000;
  for (size_t bl = 0; bl < blocks; bl++) {
    for (int k0 = 0; k0 < WAYS; k0++) {
      const int w = (int) ((k0 + bl) % WAYS);
      const double t0 = ab_now_us ();
      for (size_t r = 0; r < reps; r++)
        for (int l = 0; l < 2; l++)
          for (int k = 0; k < 4; k++)
            run_way (w, &sh[k], rows);
      t[w][bl] = (ab_now_us () - t0) / (double) reps;
    }
    const double p0 = ab_now_us ();
    peak[bl] = ab_fma_peak (peak_iters);
    const double pt = ab_now_us () - p0;
    if (pt > 0.0) {
      double f = t[WAY_DOUBLE][bl] * (double) reps / pt;
      f = f > 2.0 ? 2.0 : f < 0.5 ? 0.5 : f;
      peak_iters = (unsigned long) ((double) peak_iters * f) + 1;
    }
  }
  double ratio[WAYS];
  double *rr = malloc (blocks * sizeof (double));
  for (int w = 0; w < WAYS; w++) {
    for (size_t bl = 0; bl < blocks; bl++)
      rr[bl] = t[w][bl] / t[WAY_DOUBLE][bl];
    qsort (rr, blocks, sizeof (double), ab_cmp_double);
    ratio[w] = ab_quantile (rr, blocks, 0.5);
    qsort (t[w], blocks, sizeof (double), ab_cmp_double);
  }
  qsort (peak, blocks, sizeof (double), ab_cmp_double);
  const double pk = ab_quantile (peak, blocks, 0.5);
  printf ("sattn-linear-cost: one window's linear layers, %zu rows, "
          "d_model %zu, d_ff %zu, two layers (Q|K|V, out, linear1, linear2): "
          "%.0f FLOP; %zu blocks of %zu windows; one-thread FMA peak "
          "between the blocks %.1f GFLOP/s (median)\n",
          rows, D, F, flop, blocks, reps, pk);
  for (int w = 0; w < WAYS; w++) {
    const double med = ab_quantile (t[w], blocks, 0.5);
    printf ("%-22s %7.3f us per window  time / double %.3f  %6.1f "
            "GFLOP/s = %4.1f%% of peak  max-abs error / max|y| %.2e\n",
            way_name[w], med, ratio[w], flop / med * 1e-3,
            100.0 * flop / med * 1e-3 / pk, err[w]);
  }
  for (int k = 0; k < 4; k++) {
    free (sh[k].W);
    free (sh[k].b);
    free (sh[k].xf);
    free (sh[k].yf);
    free (sh[k].Wd);
    free (sh[k].bd);
    free (sh[k].xd);
    free (sh[k].yd);
    free (sh[k].ref);
  }
  for (int w = 0; w < WAYS; w++)
    free (t[w]);
  free (peak);
  free (rr);
  return 0;
#endif
}
