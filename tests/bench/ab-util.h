/* What the A/B harnesses (ab-lib.c, ab-whole.c) share: the clock and the
 * quantiles of their per-pair figures.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_BENCH_AB_UTIL_H
#define SATTN_BENCH_AB_UTIL_H

#include <math.h>
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

/* The one-thread FMA peak, measured between the turns of an A/B run so
 * that a ratio to it shares the run's conditions: the register-only loop
 * of `sattn-bench --fma-peak` (bench.c: twelve independent accumulators,
 * nothing but FMAs), on the widest vectors this CPU has (AVX-512 or
 * AVX2 + FMA; the level the core chooses).  ab_fma_peak (iters) returns
 * GFLOP/s per wall-clock second of `iters` iterations; NaN without
 * either ISA. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AB_FMA12(fma)    \
  a0 = fma (a0, x, y);   \
  a1 = fma (a1, x, y);   \
  a2 = fma (a2, x, y);   \
  a3 = fma (a3, x, y);   \
  a4 = fma (a4, x, y);   \
  a5 = fma (a5, x, y);   \
  a6 = fma (a6, x, y);   \
  a7 = fma (a7, x, y);   \
  a8 = fma (a8, x, y);   \
  a9 = fma (a9, x, y);   \
  a10 = fma (a10, x, y); \
  a11 = fma (a11, x, y)

#define AB_PEAK_LOOP(name, isa, T, set1, fma, add, store, W)                  \
  __attribute__ ((target (isa), noinline, unused)) static float name (        \
      unsigned long iters)                                                    \
  {                                                                           \
    const T x = set1 (0.999f), y = set1 (1e-7f);                              \
    T a0 = set1 (0.f), a1 = set1 (1.f), a2 = set1 (2.f), a3 = set1 (3.f),     \
      a4 = set1 (4.f), a5 = set1 (5.f), a6 = set1 (6.f), a7 = set1 (7.f),     \
      a8 = set1 (8.f), a9 = set1 (9.f), a10 = set1 (10.f), a11 = set1 (11.f); \
    for (unsigned long k = 0; k < iters; k++) {                               \
      AB_FMA12 (fma);                                                         \
    }                                                                         \
    T s = add (add (add (a0, a1), add (a2, a3)),                              \
               add (add (a4, a5), add (a6, a7)));                             \
    s = add (s, add (add (a8, a9), add (a10, a11)));                          \
    float l[W], sum = 0.0f;                                                   \
    store (l, s);                                                             \
    for (int i = 0; i < (W); i++)                                             \
      sum += l[i];                                                            \
    return sum;                                                               \
  }

AB_PEAK_LOOP (ab_peak_avx512, "avx512f", __m512, _mm512_set1_ps,
              _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16)
AB_PEAK_LOOP (ab_peak_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps,
              _mm256_add_ps, _mm256_storeu_ps, 8)

static volatile float ab_peak_sink __attribute__ ((unused));

static inline double
ab_fma_peak (unsigned long iters)
{
  const int w = __builtin_cpu_supports ("avx512f") ? 16
                : __builtin_cpu_supports ("avx2") &&
                        __builtin_cpu_supports ("fma")
                    ? 8
                    : 0;
  if (w == 0 || iters == 0)
    return NAN;
  const double t0 = ab_now_us ();
  ab_peak_sink = w == 16 ? ab_peak_avx512 (iters) : ab_peak_avx2 (iters);
  const double t = ab_now_us () - t0;
  return (double) iters * 12.0 * (double) w * 2.0 / t * 1e-3;
}
#else
static inline double
ab_fma_peak (unsigned long iters)
{
  (void) iters;
  return NAN;
}
#endif

#endif
