/* sattn-ab-whole: a whole model (a SATTN_MODEL_WHOLE file) through two
 * builds of libsattn side by side in one process, for A/B measurements of
 * the per-window executor on a noisy machine.
 *
 *   sattn-ab-whole LIB_A LIB_B MODEL.safetensors [--window N] [--hop N]
 *                  [--push N] [--threads N] [--threads-b N]
 *                  [--output classes|mean]
 *                  [--seconds S] [--slice K]
 *
 * Each library is loaded with dlopen (RTLD_LOCAL) and loads the file
 * through its own loader (sattn_model_load); both streams get the same
 * frames (uniform draws of variance 1).  As in sattn-ab (ab-lib.c): the
 * streams take turns, K pushes of N frames each (defaults: a push of one
 * hop, 32 pushes a turn), A first and B first alternately, for S seconds
 * (default 10), in two halves (the streams created A then B, then B then
 * A).  Every push's output rows of B are compared with A's byte for byte:
 * exit status 1 when they differ, 2 on a usage or load error.  Defaults:
 * the window the file records (or 16), hop = window / 2, threads=1 (B:
 * --threads-b when given: the same library on both sides then measures
 * what threads bring, the outputs still compared),
 * output=classes.  Pin it (taskset) for single-thread figures.
 *
 * Prints windows/s of each side (the median turn, and p10 / p90), B's
 * time over A's (the median per pair of turns, geometric mean of the
 * halves), the one-thread FMA peak measured after every pair of turns
 * (ab_fma_peak, the median; a peak turn lasts about as long as the
 * shorter turn of the pair)
 * and useful GFLOP/s, also as a share of that peak: the multiply-adds a
 * window needs (x2),
 * counting the work done once per frame where the model allows it (no
 * learned positions: the embedding and the first layer's Q, K and V of
 * the hop's new frames only) --
 *   embed      r F D            (r = hop without learned positions, else
 *   Q, K, V    3 r D^2 (first layer), 3 n D^2 (the others)      window n)
 *   out proj   n D^2 per layer
 *   attention  2 n^2 D per layer (Q K^T and P V)
 *   FF         2 n D d_ff per layer
 *   head       D C (a hidden layer of an MLP head is not counted)
 * with F the frame size, D the model width, C the classes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include <sattn/sattn.h>
#include <sattn/sattn-weights.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ab-util.h"
#include "rng.h"

typedef SattnStatus (*LoadFn) (const char *, const char *,
                               const SattnLoadOptions *, SattnModel **,
                               SattnLoadReport *, char *, size_t);
typedef void (*OptInitFn) (SattnLoadOptions *);
typedef SattnStream *(*StreamNewFn) (const SattnModel *,
                                     const SattnStreamConfig *, SattnStatus *);
typedef SattnStatus (*PushFn) (SattnStream *, const float *, size_t,
                               const uint8_t *, float *, size_t, SattnRowInfo *,
                               size_t *);
typedef size_t (*RowFloatsFn) (const SattnStream *);
typedef void (*StreamFreeFn) (SattnStream *);
typedef void (*ModelFreeFn) (SattnModel *);
typedef const SattnConfig *(*ConfigFn) (const SattnModel *);
typedef size_t (*ModelSizeFn) (const SattnModel *);

typedef struct {
  void *dl;
  LoadFn load;
  OptInitFn opt_init;
  StreamNewFn stream_new;
  PushFn push;
  RowFloatsFn row_floats;
  StreamFreeFn stream_free;
  ModelFreeFn model_free;
  ConfigFn config;
  ModelSizeFn layers, classes, max_window, d_out;
  SattnModel *model;
  SattnStream *stream;
} Side;

static int
side_load (Side *sd, const char *path)
{
  memset (sd, 0, sizeof (*sd));
  sd->dl = dlopen (path, RTLD_NOW | RTLD_LOCAL);
  if (sd->dl == NULL) {
    fprintf (stderr, "sattn-ab-whole: %s\n", dlerror ());
    return -1;
  }
#define SYM(field, T, name) sd->field = (T) dlsym (sd->dl, name)
  SYM (load, LoadFn, "sattn_model_load");
  SYM (opt_init, OptInitFn, "sattn_load_options_init");
  SYM (stream_new, StreamNewFn, "sattn_stream_new");
  SYM (push, PushFn, "sattn_stream_push");
  SYM (row_floats, RowFloatsFn, "sattn_stream_row_floats");
  SYM (stream_free, StreamFreeFn, "sattn_stream_free");
  SYM (model_free, ModelFreeFn, "sattn_model_free");
  SYM (config, ConfigFn, "sattn_model_config");
  SYM (layers, ModelSizeFn, "sattn_model_layers");
  SYM (classes, ModelSizeFn, "sattn_model_classes");
  SYM (max_window, ModelSizeFn, "sattn_model_max_window");
  SYM (d_out, ModelSizeFn, "sattn_model_d_out");
#undef SYM
  if (!sd->load || !sd->opt_init || !sd->stream_new || !sd->push ||
      !sd->row_floats || !sd->stream_free || !sd->model_free || !sd->config ||
      !sd->layers || !sd->classes || !sd->max_window || !sd->d_out) {
    fprintf (stderr,
             "sattn-ab-whole: %s is not a libsattn with the "
             "loader\n",
             path);
    return -1;
  }
  return 0;
}

static int
side_open (Side *sd, const char *lib, const char *file,
           const SattnStreamConfig *sc)
{
  SattnLoadOptions opt;
  char err[512] = "";
  SattnStatus st;
  sd->opt_init (&opt);
  st = sd->load (file, "", &opt, &sd->model, NULL, err, sizeof err);
  if (st != SATTN_OK) {
    fprintf (stderr, "sattn-ab-whole: %s: %s\n", lib, err);
    return -1;
  }
  sd->stream = sd->stream_new (sd->model, sc, &st);
  if (sd->stream == NULL) {
    fprintf (stderr, "sattn-ab-whole: %s: stream refused (status %d)\n", lib,
             (int) st);
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
           "usage: sattn-ab-whole LIB_A LIB_B MODEL.safetensors "
           "[--window N] [--hop N] [--push N] [--threads N] [--threads-b N] "
           "[--output classes|mean] [--seconds S] [--slice K]\n");
}

int
main (int argc, char **argv)
{
  size_t window = 0, hop = 0, push = 0, slice = 32;
  int threads = 1, threads_b = -1;
  SattnOutputMode output = SATTN_OUTPUT_CLASSES;
  double seconds = 10.0;
  if (argc < 4) {
    usage ();
    return 2;
  }
  for (int i = 4; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) {
      usage ();
      return 2;
    }
    if (strcmp (a, "--window") == 0)
      window = strtoul (v, NULL, 10);
    else if (strcmp (a, "--hop") == 0)
      hop = strtoul (v, NULL, 10);
    else if (strcmp (a, "--push") == 0)
      push = strtoul (v, NULL, 10);
    else if (strcmp (a, "--threads") == 0)
      threads = atoi (v);
    else if (strcmp (a, "--threads-b") == 0)
      threads_b = atoi (v);
    else if (strcmp (a, "--output") == 0 &&
             (strcmp (v, "classes") == 0 || strcmp (v, "mean") == 0))
      output = strcmp (v, "mean") == 0 ? SATTN_OUTPUT_MEAN
                                       : SATTN_OUTPUT_CLASSES;
    else if (strcmp (a, "--seconds") == 0)
      seconds = atof (v);
    else if (strcmp (a, "--slice") == 0)
      slice = strtoul (v, NULL, 10);
    else {
      usage ();
      return 2;
    }
    i++;
  }
  Side sd[2];
  for (int t = 0; t < 2; t++)
    if (side_load (&sd[t], argv[1 + t]) != 0)
      return 2;

  /* The model's geometry, from A's loader. */
  SattnLoadOptions opt;
  char err[512] = "";
  SattnModel *probe = NULL;
  sd[0].opt_init (&opt);
  if (sd[0].load (argv[3], "", &opt, &probe, NULL, err, sizeof err) !=
      SATTN_OK) {
    fprintf (stderr, "sattn-ab-whole: %s\n", err);
    return 2;
  }
  const SattnConfig *cfg = sd[0].config (probe);
  const size_t F = cfg->d_model, D = sd[0].d_out (probe);
  const size_t heads = cfg->heads, dff = cfg->d_ff;
  const size_t L = sd[0].layers (probe), C = sd[0].classes (probe);
  const size_t learned = sd[0].max_window (probe);
  if (window == 0)
    window = learned ? learned : 16;
  if (hop == 0)
    hop = window / 2 ? window / 2 : 1;
  if (push == 0)
    push = hop;
  sd[0].model_free (probe);
  if (slice == 0 || !(seconds > 0.0) || hop > window || push > (1u << 20)) {
    usage ();
    return 2;
  }

  const double n = (double) window, r = learned ? n : (double) hop;
  const double macs =
      r * (double) F * (double) D +
      (3.0 * r + 3.0 * n * (double) (L - 1)) * (double) D * (double) D +
      (double) L * (n * (double) D * (double) D + 2.0 * n * n * (double) D +
                    2.0 * n * (double) D * (double) dff) +
      (double) D * (double) C;
  const double flop_window = 2.0 * macs;

  SattnStreamConfig sc;
  memset (&sc, 0, sizeof (sc));
  sc.window = window;
  sc.hop = hop;
  sc.output = output;
  sc.threads = threads;
  if (threads_b < 0)
    threads_b = threads;
  SattnStreamConfig scs[2] = { sc, sc };
  scs[1].threads = threads_b;

  TestRng rng = { 0x3a11c0deull + F };
  const size_t pool_frames = 8 * push + 4 * window + 4096;
  float *pool = test_rng_floats (&rng, pool_frames * F, (float) sqrt (3.0));
  /* Rows per push at most: push / hop + 1. */
  const size_t max_rows = push / hop + 1;
  const size_t rf = output == SATTN_OUTPUT_CLASSES ? C : D;
  float *out[2] = { malloc (slice * max_rows * rf * sizeof (float)),
                    malloc (slice * max_rows * rf * sizeof (float)) };
  size_t *rows[2] = { malloc (slice * sizeof (size_t)),
                      malloc (slice * sizeof (size_t)) };
  const size_t max_pairs = (size_t) (seconds * 1e5) + 16;
  double *ratio = malloc (max_pairs * sizeof (double));
  double *wps[2] = { malloc (max_pairs * sizeof (double)),
                     malloc (max_pairs * sizeof (double)) };
  double *peak = malloc (max_pairs * sizeof (double));
  unsigned long peak_iters = 1000;
  double peak_us = 0.0, turn_us = 0.0;
  if (!pool || !out[0] || !out[1] || !rows[0] || !rows[1] || !ratio ||
      !wps[0] || !wps[1] || !peak) {
    fprintf (stderr, "sattn-ab-whole: out of memory\n");
    return 2;
  }

  size_t pairs = 0, compared = 0, differ = 0, half_start[2] = { 0, 0 };
  double half_median[2];
  for (int half = 0; half < 2; half++) {
    for (int k = 0; k < 2; k++) {
      const int t = k ^ half;
      if (side_open (&sd[t], argv[1 + t], argv[3], &scs[t]) != 0)
        return 2;
    }
    size_t pos = 0;
    half_start[half] = pairs;
    const double t_end = ab_now_us () + 0.5 * seconds * 1e6;
    while (ab_now_us () < t_end && pairs < max_pairs) {
      double d[2];
      size_t windows[2] = { 0, 0 };
      for (int k = 0; k < 2; k++) {
        const int t = k ^ (int) (pairs & 1); /* A first, then B first */
        size_t p = pos;
        const double t0 = ab_now_us ();
        for (size_t j = 0; j < slice; j++) {
          SattnStatus st = sd[t].push (sd[t].stream, pool + p * F, push, NULL,
                                       out[t] + j * max_rows * rf, max_rows,
                                       NULL, &rows[t][j]);
          if (st != SATTN_OK) {
            fprintf (stderr,
                     "sattn-ab-whole: %s: push failed (status "
                     "%d)\n",
                     argv[1 + t], (int) st);
            return 2;
          }
          windows[t] += rows[t][j];
          p = p + 2 * push > pool_frames ? 0 : p + push;
        }
        d[t] = ab_now_us () - t0;
      }
      for (size_t j = 0; j < slice; j++) {
        compared++;
        if (rows[0][j] != rows[1][j] ||
            memcmp (out[0] + j * max_rows * rf, out[1] + j * max_rows * rf,
                    rows[0][j] * rf * sizeof (float)) != 0)
          differ++;
        pos = pos + 2 * push > pool_frames ? 0 : pos + push;
      }
      for (int t = 0; t < 2; t++)
        wps[t][pairs] = (double) windows[t] / d[t] * 1e6;
      /* The peak turn, sized to last about as long as A's turn. */
      const double p0 = ab_now_us ();
      peak[pairs] = ab_fma_peak (peak_iters);
      const double pt = ab_now_us () - p0;
      peak_us += pt;
      turn_us += d[0] + d[1];
      /* Towards the shorter turn of the pair (a turn stretched by a
       * preemption would stretch the peak turns after it), at most
       * doubled or halved per pair. */
      if (pt > 0.0) {
        double f = (d[0] < d[1] ? d[0] : d[1]) / pt;
        f = f > 2.0 ? 2.0 : f < 0.5 ? 0.5 : f;
        peak_iters = (unsigned long) ((double) peak_iters * f) + 1;
      }
      ratio[pairs++] = d[1] / d[0];
    }
    for (int t = 0; t < 2; t++)
      side_close (&sd[t]);
    const size_t np = pairs - half_start[half];
    if (np == 0) {
      fprintf (stderr, "sattn-ab-whole: no pair of turns in %g s\n",
               0.5 * seconds);
      return 2;
    }
    qsort (ratio + half_start[half], np, sizeof (double), ab_cmp_double);
    half_median[half] = ab_quantile (ratio + half_start[half], np, 0.5);
  }
  qsort (ratio, pairs, sizeof (double), ab_cmp_double);
  qsort (wps[0], pairs, sizeof (double), ab_cmp_double);
  qsort (wps[1], pairs, sizeof (double), ab_cmp_double);
  qsort (peak, pairs, sizeof (double), ab_cmp_double);
  const double peak_med = ab_quantile (peak, pairs, 0.5);
  printf ("sattn-ab-whole: %s: frame %zu -> d_model %zu, %zu heads, d_ff "
          "%zu, %zu layers, %zu classes, %s positions; window %zu, hop %zu, "
          "pushes of %zu frames, threads=%d (B: %d); %zu pairs of %zu "
          "pushes; "
          "%.0f useful FLOP per window\n",
          argv[3], F, D, heads, dff, L, C, learned ? "learned" : "no learned",
          window, hop, push, threads, threads_b, pairs, slice, flop_window);
  printf ("B/A time: %.3f (median per pair: %.3f with A's stream created "
          "first, %.3f with B's); per pair p10 %.3f  p90 %.3f\n",
          sqrt (half_median[0] * half_median[1]), half_median[0],
          half_median[1], ab_quantile (ratio, pairs, 0.1),
          ab_quantile (ratio, pairs, 0.9));
  printf ("one-thread FMA peak between the turns: median %.1f GFLOP/s  "
          "p10 %.1f  p90 %.1f  (%.0f%% of the run's time)\n",
          peak_med, ab_quantile (peak, pairs, 0.1),
          ab_quantile (peak, pairs, 0.9),
          100.0 * peak_us / (peak_us + turn_us));
  for (int t = 0; t < 2; t++) {
    const double med = ab_quantile (wps[t], pairs, 0.5);
    printf ("%s windows/s: median %.0f  p10 %.0f  p90 %.0f  useful GFLOP/s "
            "%.2f = %.1f%% of peak  (%s)\n",
            t ? "B" : "A", med, ab_quantile (wps[t], pairs, 0.1),
            ab_quantile (wps[t], pairs, 0.9), med * flop_window * 1e-9,
            100.0 * med * flop_window * 1e-9 / peak_med, argv[1 + t]);
  }
  printf ("outputs: %zu of %zu pushes compared differ\n", differ, compared);
  free (pool);
  for (int t = 0; t < 2; t++) {
    free (out[t]);
    free (rows[t]);
    free (wps[t]);
  }
  free (ratio);
  free (peak);
  return differ ? 1 : 0;
}
