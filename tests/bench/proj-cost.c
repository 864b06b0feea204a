/* What summing the V and output projections of an attention-only model in
 * double costs on W1 (64 channels, 4 heads, window 256, hop 16, random
 * weights, threads=1): CPU time per hop of three copies of one model,
 * pushed in interleaved blocks of hops in one process,
 *
 *   float         every projection summed in float (the library's
 *                 attention-only models before V and the output projection
 *                 were summed in double);
 *   out double    only the output projection summed in double;
 *   V+out double  V and the output projection summed in double
 *                 (sattn_linear_f): the library's attention-only model.
 *
 * The double copies are removed from the model by hand (SattnModel.wvd /
 * wod, which sattn_model_new gives every model with those weights): an
 * experiment, not a behaviour of the library.  It is the cost column of
 * docs/performance.md's "Numerical error" table; tests/layers/error-ablation.py
 * --schemes gives the accuracy of the same schemes.  The rows of the three
 * copies are compared (they differ by roundings only) and the run fails if
 * they do not agree to 1e-5.  Thread CPU time: immune to preemption, still
 * sensitive to what the other CPU does to caches and clocks.
 *
 * usage: proj-cost [BLOCKS [HOPS_PER_BLOCK]]   (default 300 × 100)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include "rng.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define VARIANTS 3

static TestRng rng = { 88172645463325252ull };

static double
cpu_seconds (void)
{
  struct timespec t;
  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &t);
  return (double) t.tv_sec + (double) t.tv_nsec * 1e-9;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

int
main (int argc, char **argv)
{
  const size_t d = 64, heads = 4, window = 256, hop = 16, nx = 64;
  const int blocks = argc > 1 ? atoi (argv[1]) : 300;
  const int per = argc > 2 ? atoi (argv[2]) : 100;
  if (blocks < 1 || per < 1) {
    fprintf (stderr, "usage: proj-cost [BLOCKS [HOPS_PER_BLOCK]]\n");
    return 2;
  }
  const float s = 1.0f / sqrtf ((float) d);
  float *wq = test_rng_floats (&rng, d * d, s);
  float *wk = test_rng_floats (&rng, d * d, s);
  float *wv = test_rng_floats (&rng, d * d, s);
  float *wo = test_rng_floats (&rng, d * d, s);
  float *bq = test_rng_floats (&rng, d, 0.1f);
  float *bk = test_rng_floats (&rng, d, 0.1f);
  float *bv = test_rng_floats (&rng, d, 0.1f);
  float *bo = test_rng_floats (&rng, d, 0.1f);
  float *x = test_rng_floats (&rng, nx * hop * d, 1.0f);
  SattnWeights w = { .wq = wq,
                     .bq = bq,
                     .wk = wk,
                     .bk = bk,
                     .wv = wv,
                     .bv = bv,
                     .wo = wo,
                     .bo = bo };
  SattnConfig c = { .d_model = d, .heads = heads, .d_out = d };
  SattnStreamConfig sc = { .window = window, .hop = hop, .threads = 1 };
  SattnModel *m[VARIANTS] = { NULL };
  SattnStream *ss[VARIANTS] = { NULL };
  float *out[VARIANTS] = { NULL };
  double *t[VARIANTS] = { NULL };
  static const char *names[VARIANTS] = { "float", "out double",
                                         "V+out double" };
  int fail = 0;

  for (int v = 0; v < VARIANTS; v++) {
    SattnStatus st;
    m[v] = sattn_model_new (&c, &w, &st);
    if (m[v] == NULL)
      return 1;
    if (m[v]->wvd == NULL || m[v]->wod == NULL)
      return 1;
    if (v < 1) {
      free (m[v]->wod);
      free (m[v]->bod);
      m[v]->wod = m[v]->bod = NULL;
    }
    if (v < 2) {
      free (m[v]->wvd);
      free (m[v]->bvd);
      m[v]->wvd = m[v]->bvd = NULL;
    }
    ss[v] = sattn_stream_new (m[v], &sc, &st);
    out[v] = malloc (hop * d * sizeof (float));
    t[v] = malloc ((size_t) blocks * sizeof (double));
    if (ss[v] == NULL || out[v] == NULL || t[v] == NULL)
      return 1;
  }

  /* Warm-up: fill the windows; then the same hops on the three copies
   * must give rows that agree (they differ by roundings only). */
  double diff = 0.0;
  for (size_t i = 0; i < 2 * window / hop; i++)
    for (int v = 0; v < VARIANTS; v++) {
      size_t rows = 0;
      if (sattn_stream_push (ss[v], x + (i % nx) * hop * d, hop, NULL, out[v],
                             hop, NULL, &rows) != SATTN_OK ||
          rows != hop)
        return 1;
      for (size_t j = 0; v > 0 && j < hop * d; j++) {
        double e = fabs ((double) out[v][j] - (double) out[0][j]);
        diff = e > diff || isnan (e) ? e : diff;
      }
    }

  for (int b = 0; b < blocks; b++)
    for (int k = 0; k < VARIANTS; k++) {
      /* A different variant first in each block. */
      const int v = (k + b) % VARIANTS;
      size_t rows;
      double t0 = cpu_seconds ();
      for (int i = 0; i < per; i++)
        sattn_stream_push (ss[v], x + (size_t) (i % nx) * hop * d, hop, NULL,
                           out[v], hop, NULL, &rows);
      t[v][b] = (cpu_seconds () - t0) / per * 1e6;
    }

  printf ("W1 attention-only, random weights, threads=1: CPU µs per hop "
          "over %d blocks of %d hops, interleaved\n\n",
          blocks, per);
  printf ("| projections | median | vs float | p10 | vs float | min | "
          "vs float |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (int v = 0; v < VARIANTS; v++)
    qsort (t[v], (size_t) blocks, sizeof (double), cmp_double);
  for (int v = 0; v < VARIANTS; v++) {
    const double md = t[v][blocks / 2], p10 = t[v][blocks / 10];
    const double mn = t[v][0];
    printf ("| %s | %.2f | %+.1f%% | %.2f | %+.1f%% | %.2f | %+.1f%% |\n",
            names[v], md, 100.0 * (md / t[0][blocks / 2] - 1.0), p10,
            100.0 * (p10 / t[0][blocks / 10] - 1.0), mn,
            100.0 * (mn / t[0][0] - 1.0));
  }
  printf ("\nrows of the variants against float: max-abs %.3g (%s: <= "
          "1e-5)\n",
          diff, diff <= 1e-5 ? "ok" : "FAIL");
  fail = !(diff <= 1e-5);

  for (int v = 0; v < VARIANTS; v++) {
    sattn_stream_free (ss[v]);
    sattn_model_free (m[v]);
    free (out[v]);
    free (t[v]);
  }
  free (wq);
  free (wk);
  free (wv);
  free (wo);
  free (bq);
  free (bk);
  free (bv);
  free (bo);
  free (x);
  return fail;
}
