/* core/cpu's own declarations: the kernel table of each SIMD level,
 * defined by the per-ISA files, and what those files share.
 *
 *   kernels-portable.c  plain C, any CPU (level 0)
 *   kernels-avx2.c      AVX2 + FMA (level 1)
 *   kernels-avx512.c    AVX-512 F, DQ, BW, VL (level 2)
 *   isa.c               detection, the one table chosen, the sattn_*
 *                       entry points that call through it
 *
 * Each table is complete: where a level has no loop of its own for an
 * entry it names the portable one (kernels-portable.h) or builds the entry
 * from its own kernels (the sattn_*_from helpers below), so the bytes
 * of every entry are those the level always gave.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_CPU_KERNELS_H
#define SATTN_CPU_KERNELS_H

#include "cpu/cpu.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#define SATTN_HAVE_X86 1
#endif

extern const SattnKernels sattn_kernels_portable;
#ifdef SATTN_HAVE_X86
extern const SattnKernels sattn_kernels_avx2;
extern const SattnKernels sattn_kernels_avx512;
#endif

/* The entries a level builds from its other kernels.  Always inlined
 * with the level's own functions as constants: direct calls, in a
 * function of the default target (as the run-time dispatch that called
 * them was). */
#define SATTN_FROM static inline __attribute__ ((always_inline))

/* sattn_qk_max without a max: rmax all NaN (see sattn_qk_max). */
SATTN_FROM void
sattn_qk_max_from (SattnQkFn qk, const float *q, size_t ldq, const float *kt,
                   size_t ldkt, size_t m, size_t nk, size_t dh, float *S,
                   size_t lds, float *rmax)
{
  qk (q, ldq, kt, ldkt, m, nk, dh, S, lds);
  for (size_t i = 0; i < m; i++)
    rmax[i] = NAN;
}

/* sattn_pv_norm as sattn_pv, then sattn_mul by each row's normaliser
 * (rows with 1 left alone) and sattn_finite. */
SATTN_FROM int
sattn_pv_norm_from (SattnPvFn pv, SattnMulFn mul, SattnFiniteFn finite,
                    const float *P, size_t ldp, size_t m, size_t nk,
                    const float *v, size_t ldv, size_t dv, const float *norm,
                    float *O, size_t ldo)
{
  pv (P, ldp, m, nk, v, ldv, dv, O, ldo);
  int fin = 1;
  for (size_t i = 0; i < m; i++) {
    if (norm[i] != 1.0f)
      mul (O + i * ldo, dv, norm[i]);
    fin &= finite (O + i * ldo, dv);
  }
  return fin;
}

/* sattn_softmax_rows by sattn_exp_sum per row, 64 rows at a time. */
SATTN_FROM void
sattn_softmax_rows_from (SattnExpSumFn exp_sum, float *S, size_t lds, size_t m,
                         size_t n, const float *qmax, float scale,
                         uint8_t *rows, float *norm)
{
  double sums[64];
  for (size_t i0 = 0; i0 < m; i0 += 64) {
    size_t i1 = m - i0 < 64 ? m : i0 + 64;
    for (size_t i = i0; i < i1; i++)
      if (rows[i] == 1)
        sums[i - i0] = exp_sum (S + i * lds, n, scale, qmax[i] * scale);
    /* The divisions after the passes: nothing waits for them. */
    for (size_t i = i0; i < i1; i++) {
      if (rows[i] != 1)
        continue;
      double sum = sums[i - i0];
      if (sum != sum)
        rows[i] = 2;
      else
        norm[i] = (float) (1.0 / sum);
    }
  }
}

/* max_avx2 and max_avx512 (see max_portable): four independent max and
 * NaN chains over vectors of W floats (each link has the latency of four
 * vector instructions), then tail (the vectors left, one at a time;
 * returns the first entry not read), the chains combined, and finish
 * (the horizontal max and the detector's test, and what is left). */
#define MAX_CHAINS(name, attr, T, W, set1, loadu, vmax, fmadd, add, tail, \
                   finish)                                                \
  attr static float name (const float *restrict s, size_t n, int *finite) \
  {                                                                       \
    const T zero = set1 (0.0f);                                           \
    T m0 = set1 (-INFINITY), m1 = m0, m2 = m0, m3 = m0;                   \
    T d0 = zero, d1 = zero, d2 = zero, d3 = zero;                         \
    size_t j = 0;                                                         \
    for (; j + 4 * (W) <= n; j += 4 * (W)) {                              \
      T v0 = loadu (s + j), v1 = loadu (s + j + (W));                     \
      T v2 = loadu (s + j + 2 * (W)), v3 = loadu (s + j + 3 * (W));       \
      m0 = vmax (m0, v0);                                                 \
      m1 = vmax (m1, v1);                                                 \
      m2 = vmax (m2, v2);                                                 \
      m3 = vmax (m3, v3);                                                 \
      d0 = fmadd (v0, zero, d0);                                          \
      d1 = fmadd (v1, zero, d1);                                          \
      d2 = fmadd (v2, zero, d2);                                          \
      d3 = fmadd (v3, zero, d3);                                          \
    }                                                                     \
    j = tail (s, n, j, &m0, &d0);                                         \
    m0 = vmax (vmax (m0, m1), vmax (m2, m3));                             \
    d0 = add (add (d0, d1), add (d2, d3));                                \
    return finish (s, n, j, m0, d0, finite);                              \
  }

#endif
