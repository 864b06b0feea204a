/* sattn-ab: two builds of libsattn side by side in one process, on one
 * stream geometry, for A/B measurements on a noisy machine.
 *
 *   sattn-ab LIB_A LIB_B [--weights random|identity] [--d-model N]
 *            [--heads N] [--window N] [--hop N] [--threads N]
 *            [--seconds S] [--slice K] [--push N] [--precision-b P]
 *
 * Each library is loaded with dlopen (RTLD_LOCAL: two copies of the same
 * symbols side by side) and gets its own model and stream, built from the
 * same weights; both are fed the same frames.  The streams take turns, K
 * pushes of N frames each (defaults: 32 pushes of one hop, about 0.5 ms
 * of W1), A first and B first alternately, for S seconds (default 10).
 * Each pair of turns ran
 * within a millisecond of each other, so the ratio of their times is
 * measured under the same conditions: on this kind of machine the same
 * binary's speed moves by up to 1.5x for seconds at a time (other tenants
 * of the host), far more than the changes one wants to measure, and two
 * runs one after the other cannot tell a 2 % change from that.
 *
 * The run has two halves: the models and streams created A then B, then
 * B then A (a stream created second measured about 1 % slower than the
 * same code created first).  Prints B's time over A's (below 1: B is
 * faster): the median per pair of turns of each half and their geometric
 * mean, the estimate; the quantiles over both halves and the µs per push
 * of each side, with its useful GFLOP/s (bench.c's count per frame: the
 * new frame's Q, K, V and output projections with random weights, 2 n d
 * for Q K^T and P V) as a share of the one-thread FMA peak measured
 * after every pair of turns (ab_fma_peak, the median).  Every push's output rows
 * of B are compared with A's byte for byte; the exit status is 1 when they
 * differ (the change under test is not byte-identical), 2 on a usage or
 * load error.  Defaults: W1 (d_model 64, 4 heads, window 256, hop 16),
 * random weights, threads=1.  Pin it (taskset -c 1) for single-thread
 * measurements.  Both libraries must have the ABI of the headers this is
 * built with (the same soname: libsattn.so.1 and later 1.x).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include <sattn/sattn.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ab-util.h"
#include "rng.h"

typedef SattnModel *(*ModelNewFn) (const SattnConfig *, const SattnWeights *,
                                   SattnStatus *);
typedef SattnStream *(*StreamNewFn) (const SattnModel *,
                                     const SattnStreamConfig *, SattnStatus *);
typedef SattnStatus (*PushFn) (SattnStream *, const float *, size_t,
                               const uint8_t *, float *, size_t, SattnRowInfo *,
                               size_t *);
typedef void (*StreamFreeFn) (SattnStream *);
typedef void (*ModelFreeFn) (SattnModel *);

typedef struct {
  void *dl;
  ModelNewFn model_new;
  StreamNewFn stream_new;
  PushFn push;
  StreamFreeFn stream_free;
  ModelFreeFn model_free;
  SattnModel *model;
  SattnStream *stream;
} Side;

static int
side_load (Side *sd, const char *path)
{
  memset (sd, 0, sizeof (*sd));
  sd->dl = dlopen (path, RTLD_NOW | RTLD_LOCAL);
  if (sd->dl == NULL) {
    fprintf (stderr, "sattn-ab: %s\n", dlerror ());
    return -1;
  }
  sd->model_new = (ModelNewFn) dlsym (sd->dl, "sattn_model_new");
  sd->stream_new = (StreamNewFn) dlsym (sd->dl, "sattn_stream_new");
  sd->push = (PushFn) dlsym (sd->dl, "sattn_stream_push");
  sd->stream_free = (StreamFreeFn) dlsym (sd->dl, "sattn_stream_free");
  sd->model_free = (ModelFreeFn) dlsym (sd->dl, "sattn_model_free");
  if (!sd->model_new || !sd->stream_new || !sd->push || !sd->stream_free ||
      !sd->model_free) {
    fprintf (stderr, "sattn-ab: %s is not a libsattn\n", path);
    return -1;
  }
  return 0;
}

static int
side_open (Side *sd, const char *path, const SattnConfig *cfg,
           const SattnWeights *w, const SattnStreamConfig *sc)
{
  SattnStatus st = SATTN_OK;
  sd->model = sd->model_new (cfg, w, &st);
  if (sd->model != NULL)
    sd->stream = sd->stream_new (sd->model, sc, &st);
  if (sd->stream == NULL) {
    fprintf (stderr, "sattn-ab: %s: model or stream refused (status %d)\n",
             path, (int) st);
    return -1;
  }
  return 0;
}

static void
side_close (Side *sd)
{
  sd->stream_free (sd->stream);
  sd->model_free (sd->model);
  sd->stream = NULL;
  sd->model = NULL;
}

static void
usage (void)
{
  fprintf (stderr,
           "usage: sattn-ab LIB_A LIB_B [--weights random|identity] "
           "[--d-model N] [--heads N] [--window N] [--hop N] [--threads N] "
           "[--seconds S] [--slice K] [--push N] [--precision-b exact|fast]"
           "\n");
}

int
main (int argc, char **argv)
{
  size_t E = 64, heads = 4, window = 256, hop = 16, slice = 32, push = 0;
  int random_weights = 1, threads = 1;
  /* --precision-b fast: B's stream sums its projections in float
   * (SattnStreamConfig.precision; both sides may be the same library):
   * what the option saves, side by side.  Its outputs then differ from
   * A's by design: the largest difference is printed instead. */
  SattnPrecision prec_b = SATTN_PRECISION_EXACT;
  double seconds = 10.0;
  if (argc < 3) {
    usage ();
    return 2;
  }
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) {
      usage ();
      return 2;
    }
    if (strcmp (a, "--weights") == 0 &&
        (strcmp (v, "random") == 0 || strcmp (v, "identity") == 0))
      random_weights = strcmp (v, "random") == 0;
    else if (strcmp (a, "--d-model") == 0)
      E = strtoul (v, NULL, 10);
    else if (strcmp (a, "--heads") == 0)
      heads = strtoul (v, NULL, 10);
    else if (strcmp (a, "--window") == 0)
      window = strtoul (v, NULL, 10);
    else if (strcmp (a, "--hop") == 0)
      hop = strtoul (v, NULL, 10);
    else if (strcmp (a, "--threads") == 0)
      threads = atoi (v);
    else if (strcmp (a, "--seconds") == 0)
      seconds = atof (v);
    else if (strcmp (a, "--slice") == 0)
      slice = strtoul (v, NULL, 10);
    else if (strcmp (a, "--push") == 0)
      push = strtoul (v, NULL, 10);
    else if (strcmp (a, "--precision-b") == 0 && strcmp (v, "fast") == 0)
      prec_b = SATTN_PRECISION_FAST;
    else if (strcmp (a, "--precision-b") == 0 && strcmp (v, "exact") == 0)
      prec_b = SATTN_PRECISION_EXACT;
    else {
      usage ();
      return 2;
    }
    i++;
  }
  if (E == 0 || heads == 0 || window == 0 || hop == 0 || slice == 0 ||
      !(seconds > 0.0) || E > 4096 || hop > 4096 || push > 4096) {
    usage ();
    return 2;
  }
  if (push == 0)
    push = hop;

  /* nn.MultiheadAttention-like weights (N (0, 1 / d_model)), biases
   * N (0, 0.01), frames N (0, 1): uniform draws of the same variance. */
  TestRng rng = { 0x5a77a11ull + E };
  const float ws = (float) sqrt (3.0 / (double) E);
  float *wt = test_rng_floats (&rng, 4 * E * E, ws);
  float *bias = test_rng_floats (&rng, 4 * E, (float) sqrt (0.03));
  const size_t pool_frames = 4096 > 4 * window ? 4096 : 4 * window;
  float *pool = test_rng_floats (&rng, pool_frames * E, (float) sqrt (3.0));
  float *out[2] = { NULL, NULL };
  out[0] = malloc (slice * push * E * sizeof (float));
  out[1] = malloc (slice * push * E * sizeof (float));
  const size_t max_pairs = (size_t) (seconds * 1e5) + 16;
  double *ratio = malloc (max_pairs * sizeof (double));
  double *us[2] = { malloc (max_pairs * sizeof (double)),
                    malloc (max_pairs * sizeof (double)) };
  double *peak = malloc (max_pairs * sizeof (double));
  unsigned long peak_iters = 1000;
  if (!wt || !bias || !pool || !out[0] || !out[1] || !ratio || !us[0] ||
      !us[1] || !peak) {
    fprintf (stderr, "sattn-ab: out of memory\n");
    return 2;
  }

  SattnConfig cfg;
  memset (&cfg, 0, sizeof (cfg));
  cfg.d_model = E;
  cfg.heads = heads;
  SattnWeights w;
  memset (&w, 0, sizeof (w));
  if (random_weights) {
    w.wq = wt;
    w.wk = wt + E * E;
    w.wv = wt + 2 * E * E;
    w.wo = wt + 3 * E * E;
    w.bq = bias;
    w.bk = bias + E;
    w.bv = bias + 2 * E;
    w.bo = bias + 3 * E;
    cfg.d_out = E;
  }
  SattnStreamConfig sc;
  memset (&sc, 0, sizeof (sc));
  sc.window = window;
  sc.hop = hop;
  sc.threads = threads;
  Side sd[2];
  for (int t = 0; t < 2; t++)
    if (side_load (&sd[t], argv[1 + t]) != 0)
      return 2;

  /* Two halves: the models and streams created A then B, then B then A
   * (a stream created second measured about 1 % slower than the same
   * code created first, from where its buffers fell); each half's median
   * ratio, and their geometric mean as the estimate. */
  size_t pairs = 0, compared = 0, differ = 0, half_start[3] = { 0, 0, 0 };
  double max_diff = 0.0;
  double half_median[2];
  for (int half = 0; half < 2; half++) {
    for (int k = 0; k < 2; k++) {
      const int t = k ^ half;
      SattnStreamConfig sct = sc;
      if (t == 1)
        sct.precision = prec_b;
      if (side_open (&sd[t], argv[1 + t], &cfg, random_weights ? &w : NULL,
                     &sct) != 0)
        return 2;
    }
    size_t pos = 0;
    half_start[half] = pairs;
    const double t_end = ab_now_us () + 0.5 * seconds * 1e6;
    while (ab_now_us () < t_end && pairs < max_pairs) {
      double d[2];
      for (int k = 0; k < 2; k++) {
        const int t = k ^ (int) (pairs & 1); /* A first, then B first */
        size_t p = pos;
        const double t0 = ab_now_us ();
        for (size_t j = 0; j < slice; j++) {
          size_t got = 0;
          SattnStatus st = sd[t].push (sd[t].stream, pool + p * E, push, NULL,
                                       out[t] + j * push * E, push, NULL, &got);
          if (st != SATTN_OK || got != push) {
            fprintf (stderr,
                     "sattn-ab: %s: push failed (status %d, %zu "
                     "rows)\n",
                     argv[1 + t], (int) st, got);
            return 2;
          }
          p = p + 2 * push > pool_frames ? 0 : p + push;
        }
        d[t] = (ab_now_us () - t0) / (double) slice;
      }
      for (size_t j = 0; j < slice; j++) {
        compared++;
        if (memcmp (out[0] + j * push * E, out[1] + j * push * E,
                    push * E * sizeof (float)) != 0)
          differ++;
        for (size_t i = 0; prec_b != SATTN_PRECISION_EXACT && i < push * E;
             i++) {
          const double dd = fabs ((double) out[0][j * push * E + i] -
                                  (double) out[1][j * push * E + i]);
          max_diff = dd > max_diff ? dd : max_diff;
        }
        pos = pos + 2 * push > pool_frames ? 0 : pos + push;
      }
      us[0][pairs] = d[0];
      us[1][pairs] = d[1];
      /* The peak turn, towards the shorter turn's length (at most
       * doubled or halved per pair: see sattn-ab-whole). */
      const double p0 = ab_now_us ();
      peak[pairs] = ab_fma_peak (peak_iters);
      const double pt = ab_now_us () - p0;
      if (pt > 0.0) {
        double f = (d[0] < d[1] ? d[0] : d[1]) * (double) slice / pt;
        f = f > 2.0 ? 2.0 : f < 0.5 ? 0.5 : f;
        peak_iters = (unsigned long) ((double) peak_iters * f) + 1;
      }
      ratio[pairs++] = d[1] / d[0];
    }
    for (int t = 0; t < 2; t++)
      side_close (&sd[t]);
    const size_t np = pairs - half_start[half];
    if (np == 0) {
      fprintf (stderr, "sattn-ab: no pair of turns in %g s\n", 0.5 * seconds);
      return 2;
    }
    qsort (ratio + half_start[half], np, sizeof (double), ab_cmp_double);
    half_median[half] = ab_quantile (ratio + half_start[half], np, 0.5);
  }
  qsort (ratio, pairs, sizeof (double), ab_cmp_double);
  qsort (us[0], pairs, sizeof (double), ab_cmp_double);
  qsort (us[1], pairs, sizeof (double), ab_cmp_double);
  qsort (peak, pairs, sizeof (double), ab_cmp_double);
  const double peak_med = ab_quantile (peak, pairs, 0.5);
  const double flop_frame =
      2.0 * ((random_weights ? 4.0 * (double) E * (double) E : 0.0) +
             2.0 * (double) window * (double) E);
  printf ("sattn-ab: d_model %zu, %zu heads, window %zu, hop %zu, %s "
          "weights, threads=%d; %zu pairs of %zu pushes of %zu frames\n",
          E, heads, window, hop, random_weights ? "random" : "identity",
          threads, pairs, slice, push);
  printf ("B/A time: %.3f (median per pair: %.3f with A's stream created "
          "first, %.3f with B's)\n",
          sqrt (half_median[0] * half_median[1]), half_median[0],
          half_median[1]);
  printf ("B/A time per pair, both halves: p10 %.3f  p25 %.3f  median %.3f  "
          "p75 %.3f  p90 %.3f\n",
          ab_quantile (ratio, pairs, 0.1), ab_quantile (ratio, pairs, 0.25),
          ab_quantile (ratio, pairs, 0.5), ab_quantile (ratio, pairs, 0.75),
          ab_quantile (ratio, pairs, 0.9));
  printf ("one-thread FMA peak between the turns: median %.1f GFLOP/s  "
          "p10 %.1f  p90 %.1f; useful work %.0f FLOP per frame\n",
          peak_med, ab_quantile (peak, pairs, 0.1),
          ab_quantile (peak, pairs, 0.9), flop_frame);
  for (int t = 0; t < 2; t++) {
    const double g = (double) push * flop_frame /
                     ab_quantile (us[t], pairs, 0.5) * 1e-3;
    printf ("%s us/push: p10 %.2f  median %.2f  p90 %.2f  useful GFLOP/s "
            "%.2f = %.1f%% of peak  (%s)\n",
            t ? "B" : "A", ab_quantile (us[t], pairs, 0.1),
            ab_quantile (us[t], pairs, 0.5), ab_quantile (us[t], pairs, 0.9), g,
            100.0 * g / peak_med, argv[1 + t]);
  }
  printf ("outputs: %zu of %zu pushes compared differ\n", differ, compared);
  if (prec_b != SATTN_PRECISION_EXACT) {
    printf ("B precision=fast: largest |B - A| %.3g (differences expected)\n",
            max_diff);
    differ = 0;
  }
  free (wt);
  free (bias);
  free (pool);
  free (out[0]);
  free (out[1]);
  free (ratio);
  free (us[0]);
  free (us[1]);
  free (peak);
  return differ ? 1 : 0;
}
