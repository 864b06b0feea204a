/* What the A/B harnesses (ab-lib.c, ab-whole.c) share: the clock and the
 * quantiles of their per-pair figures.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_BENCH_AB_UTIL_H
#define SATTN_BENCH_AB_UTIL_H

#include <stddef.h>
#include <time.h>

static inline double
ab_now_us (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec * 1e-3;
}

/* qsort's comparison of doubles, ascending. */
static inline int
ab_cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* The q-quantile (0 <= q <= 1) of n > 0 sorted values, the nearest. */
static inline double
ab_quantile (const double *sorted, size_t n, double q)
{
  return sorted[(size_t) (q * (double) (n - 1) + 0.5)];
}

#endif
