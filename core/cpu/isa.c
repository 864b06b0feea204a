/* ISA detection and the one kernel table: the CPU's SIMD level is found
 * once (cpuid, capped by SATTN_SIMD in the environment), which chooses
 * the table of kernels (kernels-portable.c, kernels-avx2.c,
 * kernels-avx512.c) every sattn_* kernel below calls through.
 * sattn_simd_force (tests and probes) switches both.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels.h"

#include <stdlib.h>

static int g_isa = -1; /* -1 unknown, 0 portable, 1 AVX2+FMA, 2 AVX-512 */
static const SattnKernels *g_kernels; /* NULL until chosen */

int
sattn_simd_level (void)
{
  int v = __atomic_load_n (&g_isa, __ATOMIC_RELAXED);
  if (v < 0) {
    v = 0;
#ifdef SATTN_HAVE_X86
    __builtin_cpu_init ();
    v = __builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma");
    if (v && __builtin_cpu_supports ("avx512f") &&
        __builtin_cpu_supports ("avx512dq") &&
        __builtin_cpu_supports ("avx512bw") &&
        __builtin_cpu_supports ("avx512vl"))
      v = 2;
#endif
    /* SATTN_SIMD=0 / 1 caps the level (portable / AVX2). */
    const char *env = getenv ("SATTN_SIMD");
    if (env != NULL && env[0] >= '0' && env[0] <= '2' && env[0] - '0' < v)
      v = env[0] - '0';
    __atomic_store_n (&g_isa, v, __ATOMIC_RELAXED);
  }
  return v;
}

/* The table of a level: the best this build has at or below it. */
static const SattnKernels *
table_of (int level)
{
#ifdef SATTN_HAVE_X86
  if (level >= 2)
    return &sattn_kernels_avx512;
  if (level == 1)
    return &sattn_kernels_avx2;
#endif
  (void) level;
  return &sattn_kernels_portable;
}

/* The tables are constant: a thread that finds the pointer NULL chooses
 * the same table as any other would. */
static const SattnKernels *
choose (void)
{
  const SattnKernels *k = table_of (sattn_simd_level ());
  __atomic_store_n (&g_kernels, k, __ATOMIC_RELAXED);
  return k;
}

static inline const SattnKernels *
kernels (void)
{
  const SattnKernels *k = __atomic_load_n (&g_kernels, __ATOMIC_RELAXED);
  return __builtin_expect (k != NULL, 1) ? k : choose ();
}

const SattnKernels *
sattn_kernels (void)
{
  return kernels ();
}

void
sattn_simd_force (int level)
{
  __atomic_store_n (&g_isa, level, __ATOMIC_RELAXED);
  __atomic_store_n (&g_kernels, table_of (level), __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------- entry points */

void
sattn_qk (const float *q, size_t ldq, const float *kt, size_t ldkt, size_t m,
          size_t nk, size_t dh, float *S, size_t lds)
{
  kernels ()->qk (q, ldq, kt, ldkt, m, nk, dh, S, lds);
}

void
sattn_qk_max (const float *q, size_t ldq, const float *kt, size_t ldkt,
              size_t m, size_t nk, size_t dh, float *S, size_t lds, float *rmax)
{
  kernels ()->qk_max (q, ldq, kt, ldkt, m, nk, dh, S, lds, rmax);
}

void
sattn_softmax_rows (float *S, size_t lds, size_t m, size_t n, const float *qmax,
                    float scale, uint8_t *rows, float *norm)
{
  kernels ()->softmax_rows (S, lds, m, n, qmax, scale, rows, norm);
}

void
sattn_pv (const float *P, size_t ldp, size_t m, size_t nk, const float *v,
          size_t ldv, size_t dv, float *O, size_t ldo)
{
  kernels ()->pv (P, ldp, m, nk, v, ldv, dv, O, ldo);
}

int
sattn_pv_norm (const float *P, size_t ldp, size_t m, size_t nk, const float *v,
               size_t ldv, size_t dv, const float *norm, float *O, size_t ldo)
{
  return kernels ()->pv_norm (P, ldp, m, nk, v, ldv, dv, norm, O, ldo);
}

float
sattn_softmax_scan (float *s, size_t n, const uint8_t *ok, float scale,
                    size_t counts[4])
{
  return kernels ()->softmax_scan (s, n, ok, scale, counts);
}

float
sattn_softmax_max (const float *s, size_t n, int *finite)
{
  return kernels ()->softmax_max (s, n, finite);
}

double
sattn_exp_sum (float *y, size_t n, float scale, float mx)
{
  return kernels ()->exp_sum (y, n, scale, mx);
}

double
sattn_exp_sum_stats (float *y, size_t n, float scale, float mx, double *ex,
                     float *xmin)
{
  return kernels ()->exp_sum_stats (y, n, scale, mx, ex, xmin);
}

void
sattn_mul (float *y, size_t n, float a)
{
  kernels ()->mul (y, n, a);
}

int
sattn_finite (const float *x, size_t n)
{
  return kernels ()->finite (x, n);
}

void
sattn_copy_rows (const float *x, size_t ldx, const uint8_t *ok, size_t cnt,
                 size_t w, float *dst, size_t ldd, size_t mir)
{
  kernels ()->copy_rows (x, ldx, ok, cnt, w, dst, ldd, mir);
}

void
sattn_transpose_rows (const float *x, size_t ldx, const uint8_t *ok, size_t cnt,
                      size_t w, float *dst, size_t ldd, size_t mir)
{
  kernels ()->transpose_rows (x, ldx, ok, cnt, w, dst, ldd, mir);
}

void
sattn_add_bias (float *y, size_t ldy, size_t n, const float *b, size_t k)
{
  kernels ()->add_bias (y, ldy, n, b, k);
}

void
sattn_norm_rows_f32 (const float *x, size_t ldx, float *y, size_t ldy,
                     size_t rows, size_t d, const float *w, const float *b,
                     float eps)
{
  if (rows > 0 && d > 0)
    kernels ()->norm_f (x, ldx, y, ldy, rows, d, w, b, eps);
}

void
sattn_add_rows (const float *x, size_t ldx, float *y, size_t ldy, size_t rows,
                size_t d)
{
  kernels ()->add_rows (x, ldx, y, ldy, rows, d);
}

void
sattn_gelu_f32 (float *h, size_t n)
{
  kernels ()->gelu_f (h, n);
}

size_t
sattn_first_nonfinite (const float *x, size_t n)
{
  if (sattn_finite (x, n))
    return n;
  size_t i = 0;
  while (i < n && isfinite (x[i]))
    i++;
  return i;
}
