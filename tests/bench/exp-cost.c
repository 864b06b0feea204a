/* The exp pass alone: CPU time of sattn_softmax_rows on one W1 head block
 * (16 query rows x 256 scores, row stride 256, scale 1/4 as for d_head
 * 16), for scores spread over a few units (the common case), tens and
 * hundreds (most exponentials below the subnormal range, where a result
 * that underflows can cost a microcode assist per vector).  Each call
 * gets fresh scores (a copy from a source block, timed separately and
 * subtracted).  Prints the minimum over REPEATS of the mean ns per call
 * and per score vector, at the SIMD level the library picked (set
 * SATTN_SIMD=1 for AVX2, 0 for the portable code).  Thread CPU time:
 * immune to preemption, still sensitive to what the other CPU does.
 *
 * It also checks each row's normaliser against exp summed in double
 * (relative 1e-6) and fails if one disagrees: the figures are of a pass
 * that computed the right thing.
 *
 * usage: exp-cost [CALLS [REPEATS]]   (default 20000 x 7)
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

#define ROWS 16
#define COLS 256

static double
cpu_seconds (void)
{
  struct timespec t;
  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &t);
  return (double) t.tv_sec + (double) t.tv_nsec * 1e-9;
}

int
main (int argc, char **argv)
{
  long calls = argc > 1 ? atol (argv[1]) : 20000;
  int repeats = argc > 2 ? atoi (argv[2]) : 7;
  if (calls < 1 || repeats < 1) {
    fprintf (stderr, "usage: exp-cost [CALLS [REPEATS]]\n");
    return 2;
  }
  const float scale = 0.25f;
  const float spreads[] = { 4.0f, 40.0f, 400.0f };
  static float src[ROWS * COLS], S[ROWS * COLS];
  float qmax[ROWS], norm[ROWS];
  uint8_t rows[ROWS];
  int failed = 0;
  uint64_t seed = 88172645463325252ull;

  printf ("sattn_softmax_rows, %d rows x %d scores, scale %g, SIMD level "
          "%d\n",
          ROWS, COLS, scale, sattn_simd_level ());
  for (size_t k = 0; k < sizeof spreads / sizeof spreads[0]; k++) {
    /* Normal scores (Box-Muller) of standard deviation spreads[k]. */
    for (size_t i = 0; i < ROWS; i++) {
      float mx = -INFINITY;
      for (size_t j = 0; j < COLS; j++) {
        double u = test_splitmix_uniform (&seed);
        double v = test_splitmix_uniform (&seed);
        float y = (float) (sqrt (-2.0 * log (u)) * cos (6.283185307179586 * v) *
                           spreads[k]);
        src[i * COLS + j] = y;
        mx = y > mx ? y : mx;
      }
      qmax[i] = mx;
    }
    double best = INFINITY, best_copy = INFINITY;
    for (int r = 0; r < repeats; r++) {
      double t0 = cpu_seconds ();
      for (long c = 0; c < calls; c++) {
        memcpy (S, src, sizeof S);
        __asm__ volatile("" : : "r"(S) : "memory");
      }
      double t1 = cpu_seconds ();
      for (long c = 0; c < calls; c++) {
        memcpy (S, src, sizeof S);
        memset (rows, 1, sizeof rows);
        sattn_softmax_rows (S, COLS, ROWS, COLS, qmax, scale, rows, norm);
      }
      double t2 = cpu_seconds ();
      best_copy = fmin (best_copy, (t1 - t0) / (double) calls);
      best = fmin (best, (t2 - t1) / (double) calls);
    }
    double ns = (best - best_copy) * 1e9;
    printf ("spread %5g: %8.1f ns per call, %6.2f ns per score vector "
            "(copy %.1f ns subtracted)\n",
            spreads[k], ns, ns / (ROWS * COLS / 16), best_copy * 1e9);
    for (size_t i = 0; i < ROWS; i++) {
      double sum = 0.0;
      for (size_t j = 0; j < COLS; j++)
        sum += exp ((double) (src[i * COLS + j] * scale) -
                    (double) (qmax[i] * scale));
      double want = 1.0 / sum;
      if (rows[i] != 1 || !(fabs (norm[i] - want) <= 1e-6 * want)) {
        printf ("FAIL spread %g row %zu: norm %.9g, want %.9g\n", spreads[k], i,
                norm[i], want);
        failed = 1;
      }
    }
  }
  return failed;
}
