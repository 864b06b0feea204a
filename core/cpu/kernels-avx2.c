/* The AVX2 + FMA kernels (level 1).
 *
 * The vectorised exp is a Cephes-style range reduction (x = n ln2 + r,
 * |r| <= ln2/2) with a degree-6 minimax polynomial for e^r and 2^n applied
 * so that results in the subnormal range round once, like expf (in two
 * halves here, by scalef at AVX-512).  Its error against expf is tested
 * (tests/kernel/test-exp.c).  The row movers (copy_rows, transpose_rows,
 * add_bias) are the portable loops at this level.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels-portable.h"

#ifdef SATTN_HAVE_X86
#include <immintrin.h>

#define AVX2 __attribute__ ((target ("avx2,fma")))

/* exp256_k: the exponentials of the k vectors x[0, k) (k a constant), in
 * place, each step applied to all k before the next (see exp512_k): the
 * same operations per element in the same order as for one vector. */
AVX2 static inline __attribute__ ((always_inline)) void
exp256_k (__m256 *x, int k)
{
  /* Inputs are <= 0 (x - max): no upper clamp.  Below -104 every result
   * rounds to 0 exactly (2^-150 e^r with r = -104 + 150 ln2 ~ -0.028 is
   * under half the smallest subnormal).  The clamp at -176 makes n =
   * -254, both factors 2^n1 and 2^n2 below exactly +0 and the result +0
   * without a product that underflows (a microcode assist per vector on
   * Intel cores): rows of widely spread scores, most entries far below,
   * take no assists for them.  Between -176 and -104 the products
   * underflow to 0, as the clamp at -104 made them do. */
  const __m256 lo = _mm256_set1_ps (-176.0f);
  /* n = round (x log2 e): adding 1.5 * 2^23 leaves no fraction bits, and
   * the low bits of that sum are n as an integer (0x4b400000 + n). */
  const __m256 magic = _mm256_set1_ps (12582912.0f);
  __m256 t[4], n[4], p[4];
  /* NaN stays NaN (vmaxps returns its second operand then). */
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    x[j] = _mm256_max_ps (lo, x[j]);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    t[j] = _mm256_fmadd_ps (x[j], _mm256_set1_ps (1.44269504088896341f), magic);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    n[j] = _mm256_sub_ps (t[j], magic);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    x[j] = _mm256_fnmadd_ps (n[j], _mm256_set1_ps (0.693359375f), x[j]);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    x[j] = _mm256_fnmadd_ps (n[j], _mm256_set1_ps (-2.12194440e-4f), x[j]);
    /* e^r ~ 1 + r (1 + r P(r)), P of degree 4 minimax over |r| <= ln2/2
   * (relative error 3e-9, 0.05 ulp, before rounding), by Horner. */
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (_mm256_set1_ps (1.3814612757e-3f), x[j],
                            _mm256_set1_ps (8.3687100559e-3f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (4.1668388993e-2f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (1.6666521132e-1f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (4.9999994040e-1f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (1.0f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (1.0f));
  /* 2^n = 2^n1 · 2^n2 with n1 = n >> 1, each factor a normal float. */
  const __m256i bias = _mm256_set1_epi32 (127);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++) {
    __m256i ni = _mm256_sub_epi32 (_mm256_castps_si256 (t[j]),
                                   _mm256_set1_epi32 (0x4b400000));
    __m256i n1 = _mm256_srai_epi32 (ni, 1);
    __m256i n2 = _mm256_sub_epi32 (ni, n1);
    __m256 f1 = _mm256_castsi256_ps (
        _mm256_slli_epi32 (_mm256_add_epi32 (n1, bias), 23));
    __m256 f2 = _mm256_castsi256_ps (
        _mm256_slli_epi32 (_mm256_add_epi32 (n2, bias), 23));
    x[j] = _mm256_mul_ps (_mm256_mul_ps (p[j], f1), f2);
  }
}

AVX2 static inline __m256
exp256 (__m256 x)
{
  exp256_k (&x, 1);
  return x;
}

/* The exp pass (see exp_sum_body_portable).  The row sum is accumulated
 * in double: it normalises the whole row; the entropy term in float.  The
 * tail goes through the vector code too, padded with -inf (exp = 0). */
AVX2 static inline __attribute__ ((always_inline)) double
exp_sum_body_avx2 (float *y, size_t n, float scale, float mx, double *ex,
                   float *xmin)
{
  const __m256 vmx = _mm256_set1_ps (mx), vsc = _mm256_set1_ps (scale);
  const __m256 ninf = _mm256_set1_ps (-INFINITY);
  const __m256 pinf = _mm256_set1_ps (INFINITY);
  __m256d acc0 = _mm256_setzero_pd (), acc1 = _mm256_setzero_pd ();
  __m256 exa = _mm256_setzero_ps (), mn = pinf;
  float tmp[8];
  /* The sum: float partials of four vectors (see exp_part_avx512). */
  for (size_t i0 = 0; i0 < n; i0 += 32) {
    size_t i1 = n - i0 < 32 ? n : i0 + 32;
    __m256 fs = _mm256_setzero_ps ();
    if (i1 - i0 == 32) {
      /* A whole chunk: the four vectors interleaved (see exp512_k), the
     * same operations per element and the same sum, 0 + e0 + ... + e3. */
      __m256 x[4], e[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        __m256 xs = _mm256_mul_ps (_mm256_loadu_ps (y + i0 + 8 * j), vsc);
        __asm__("" : "+x"(xs));
        x[j] = _mm256_sub_ps (xs, vmx);
        e[j] = x[j];
      }
      exp256_k (e, 4);
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        _mm256_storeu_ps (y + i0 + 8 * j, e[j]);
        fs = _mm256_add_ps (fs, e[j]);
        if (ex != NULL) {
          __m256 live = _mm256_cmp_ps (x[j], ninf, _CMP_GT_OQ);
          exa = _mm256_add_ps (exa, _mm256_and_ps (live,
                                                   _mm256_mul_ps (x[j], e[j])));
          mn = _mm256_min_ps (mn, _mm256_blendv_ps (pinf, x[j], live));
        }
      }
      i1 = i0; /* nothing left for the loop below */
    }
    for (size_t i = i0; i < i1; i += 8) {
      size_t r = n - i < 8 ? n - i : 8;
      float *src = y + i;
      if (r < 8) {
        for (size_t l = 0; l < 8; l++)
          tmp[l] = l < r ? y[i + l] : -INFINITY;
        src = tmp;
      }
      /* Rounded before the subtraction (the compiler must not fuse them:
     * the max entry gives exactly 0). */
      __m256 xs = _mm256_mul_ps (_mm256_loadu_ps (src), vsc);
      __asm__("" : "+x"(xs));
      __m256 x = _mm256_sub_ps (xs, vmx);
      __m256 e = exp256 (x);
      _mm256_storeu_ps (src, e);
      fs = _mm256_add_ps (fs, e);
      if (ex != NULL) {
        __m256 live = _mm256_cmp_ps (x, ninf, _CMP_GT_OQ);
        exa = _mm256_add_ps (exa, _mm256_and_ps (live, _mm256_mul_ps (x, e)));
        mn = _mm256_min_ps (mn, _mm256_blendv_ps (pinf, x, live));
      }
      if (r < 8)
        memcpy (y + i, tmp, r * sizeof (float));
    }
    acc0 = _mm256_add_pd (acc0, _mm256_cvtps_pd (_mm256_castps256_ps128 (fs)));
    acc1 = _mm256_add_pd (acc1,
                          _mm256_cvtps_pd (_mm256_extractf128_ps (fs, 1)));
  }
  double l1[4];
  _mm256_storeu_pd (l1, _mm256_add_pd (acc0, acc1));
  if (ex != NULL) {
    float lm[8], l2[8];
    _mm256_storeu_ps (l2, exa);
    _mm256_storeu_ps (lm, mn);
    float m = INFINITY;
    double sx = 0.0;
    for (int l = 0; l < 8; l++) {
      m = lm[l] < m ? lm[l] : m;
      sx += l2[l];
    }
    *ex = sx;
    *xmin = m;
  }
  return l1[0] + l1[1] + l1[2] + l1[3];
}

AVX2 static double
exp_sum_avx2 (float *y, size_t n, float scale, float mx)
{
  return exp_sum_body_avx2 (y, n, scale, mx, NULL, NULL);
}

AVX2 static double
exp_sum_stats_avx2 (float *y, size_t n, float scale, float mx, double *ex,
                    float *xmin)
{
  return exp_sum_body_avx2 (y, n, scale, mx, ex, xmin);
}

/* max_avx2's tail: whole vectors; the floats after them are left to
 * max_avx2_finish. */
AVX2 static inline __attribute__ ((always_inline)) size_t
max_avx2_tail (const float *restrict s, size_t n, size_t j, __m256 *m0,
               __m256 *d0)
{
  const __m256 zero = _mm256_setzero_ps ();
  for (; j + 8 <= n; j += 8) {
    __m256 v0 = _mm256_loadu_ps (s + j);
    *m0 = _mm256_max_ps (*m0, v0);
    *d0 = _mm256_fmadd_ps (v0, zero, *d0);
  }
  return j;
}

AVX2 static inline __attribute__ ((always_inline)) float
max_avx2_finish (const float *restrict s, size_t n, size_t j, __m256 m0,
                 __m256 d0, int *finite)
{
  float lm[8], ld[8];
  _mm256_storeu_ps (lm, m0);
  _mm256_storeu_ps (ld, d0);
  float m = -INFINITY, det = 0.0f;
  for (int l = 0; l < 8; l++) {
    m = lm[l] > m ? lm[l] : m;
    det += ld[l];
  }
  int fin;
  float t = max_portable (s + j, n - j, &fin);
  *finite = fin && det == det;
  return t > m ? t : m;
}

MAX_CHAINS (max_avx2, AVX2, __m256, 8, _mm256_set1_ps, _mm256_loadu_ps,
            _mm256_max_ps, _mm256_fmadd_ps, _mm256_add_ps, max_avx2_tail,
            max_avx2_finish)

/* Two query rows × 16 keys per step.  Which columns a row gets from the
 * vector tiles and which from the scalar loops depends on the row count
 * and on the columns asked for (a stream projects in 32-column blocks or
 * one head's columns at a time), so the scalar loops must give the same
 * bytes as the tiles: the same chain of fused multiply-adds from 0, by
 * fmaf.  Written as a += x * y they relied on the compiler's contraction,
 * and at -O3 GCC vectorises that loop as an in-order sum of separately
 * rounded products (vmulps, then vaddss), which breaks the identity
 * (tests/core/test-batch.c). */
AVX2 static void
qk_avx2 (const float *restrict q, size_t ldq, const float *restrict kt,
         size_t ldkt, size_t m, size_t nk, size_t dh, float *restrict S,
         size_t lds)
{
  size_t i = 0;
  for (; i + 4 <= m && nk >= 16; i += 4) {
    const float *q0 = q + i * ldq, *q1 = q0 + ldq, *q2 = q1 + ldq,
                *q3 = q2 + ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 b0 = _mm256_setzero_ps (), b1 = _mm256_setzero_ps ();
      __m256 c0 = _mm256_setzero_ps (), c1 = _mm256_setzero_ps ();
      __m256 d0 = _mm256_setzero_ps (), d1 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m256 k0 = _mm256_loadu_ps (kr), k1 = _mm256_loadu_ps (kr + 8);
        __m256 x = _mm256_broadcast_ss (q0 + t);
        a0 = _mm256_fmadd_ps (x, k0, a0);
        a1 = _mm256_fmadd_ps (x, k1, a1);
        x = _mm256_broadcast_ss (q1 + t);
        b0 = _mm256_fmadd_ps (x, k0, b0);
        b1 = _mm256_fmadd_ps (x, k1, b1);
        x = _mm256_broadcast_ss (q2 + t);
        c0 = _mm256_fmadd_ps (x, k0, c0);
        c1 = _mm256_fmadd_ps (x, k1, c1);
        x = _mm256_broadcast_ss (q3 + t);
        d0 = _mm256_fmadd_ps (x, k0, d0);
        d1 = _mm256_fmadd_ps (x, k1, d1);
      }
      _mm256_storeu_ps (s0 + j, a0);
      _mm256_storeu_ps (s0 + j + 8, a1);
      _mm256_storeu_ps (s0 + lds + j, b0);
      _mm256_storeu_ps (s0 + lds + j + 8, b1);
      _mm256_storeu_ps (s0 + 2 * lds + j, c0);
      _mm256_storeu_ps (s0 + 2 * lds + j + 8, c1);
      _mm256_storeu_ps (s0 + 3 * lds + j, d0);
      _mm256_storeu_ps (s0 + 3 * lds + j + 8, d1);
    }
    for (; j < nk; j++)
      for (size_t r = 0; r < 4; r++) {
        const float *qr = q0 + r * ldq;
        float a = 0.0f;
        for (size_t t = 0; t < dh; t++)
          a = fmaf (qr[t], kt[t * ldkt + j], a);
        s0[r * lds + j] = a;
      }
  }
  for (; i + 2 <= m; i += 2) {
    const float *q0 = q + i * ldq, *q1 = q0 + ldq;
    float *s0 = S + i * lds, *s1 = s0 + lds;
    size_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 b0 = _mm256_setzero_ps (), b1 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m256 k0 = _mm256_loadu_ps (kr), k1 = _mm256_loadu_ps (kr + 8);
        __m256 x0 = _mm256_broadcast_ss (q0 + t);
        __m256 x1 = _mm256_broadcast_ss (q1 + t);
        a0 = _mm256_fmadd_ps (x0, k0, a0);
        a1 = _mm256_fmadd_ps (x0, k1, a1);
        b0 = _mm256_fmadd_ps (x1, k0, b0);
        b1 = _mm256_fmadd_ps (x1, k1, b1);
      }
      _mm256_storeu_ps (s0 + j, a0);
      _mm256_storeu_ps (s0 + j + 8, a1);
      _mm256_storeu_ps (s1 + j, b0);
      _mm256_storeu_ps (s1 + j + 8, b1);
    }
    for (; j < nk; j++) {
      float a = 0.0f, b = 0.0f;
      for (size_t t = 0; t < dh; t++) {
        a = fmaf (q0[t], kt[t * ldkt + j], a);
        b = fmaf (q1[t], kt[t * ldkt + j], b);
      }
      s0[j] = a;
      s1[j] = b;
    }
  }
  if (i < m) {
    const float *q0 = q + i * ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    for (; j + 32 <= nk; j += 32) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 a2 = _mm256_setzero_ps (), a3 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m256 x0 = _mm256_broadcast_ss (q0 + t);
        a0 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr), a0);
        a1 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr + 8), a1);
        a2 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr + 16), a2);
        a3 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr + 24), a3);
      }
      _mm256_storeu_ps (s0 + j, a0);
      _mm256_storeu_ps (s0 + j + 8, a1);
      _mm256_storeu_ps (s0 + j + 16, a2);
      _mm256_storeu_ps (s0 + j + 24, a3);
    }
    for (; j + 8 <= nk; j += 8) {
      __m256 a0 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++)
        a0 = _mm256_fmadd_ps (_mm256_broadcast_ss (q0 + t),
                              _mm256_loadu_ps (kt + t * ldkt + j), a0);
      _mm256_storeu_ps (s0 + j, a0);
    }
    for (; j < nk; j++) {
      float a = 0.0f;
      for (size_t t = 0; t < dh; t++)
        a = fmaf (q0[t], kt[t * ldkt + j], a);
      s0[j] = a;
    }
  }
}

/* V rows of unusable keys are zero and every V row is finite, so zero
 * weights can be multiplied without a branch. */
AVX2 static void
pv_avx2 (const float *restrict P, size_t ldp, size_t m, size_t nk,
         const float *restrict v, size_t ldv, size_t dv, float *restrict O,
         size_t ldo)
{
  size_t i = 0;
  /* Four rows × 16 columns per step: eight independent FMA chains. */
  if (dv % 16 == 0)
    for (; i + 4 <= m; i += 4) {
      const float *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp,
                  *p3 = p2 + ldp;
      for (size_t t = 0; t < dv; t += 16) {
        __m256 a00 = _mm256_setzero_ps (), a01 = _mm256_setzero_ps ();
        __m256 a10 = _mm256_setzero_ps (), a11 = _mm256_setzero_ps ();
        __m256 a20 = _mm256_setzero_ps (), a21 = _mm256_setzero_ps ();
        __m256 a30 = _mm256_setzero_ps (), a31 = _mm256_setzero_ps ();
        for (size_t j = 0; j < nk; j++) {
          const float *vj = v + j * ldv + t;
          __m256 v0 = _mm256_loadu_ps (vj), v1 = _mm256_loadu_ps (vj + 8);
          __m256 b = _mm256_broadcast_ss (p0 + j);
          a00 = _mm256_fmadd_ps (b, v0, a00);
          a01 = _mm256_fmadd_ps (b, v1, a01);
          b = _mm256_broadcast_ss (p1 + j);
          a10 = _mm256_fmadd_ps (b, v0, a10);
          a11 = _mm256_fmadd_ps (b, v1, a11);
          b = _mm256_broadcast_ss (p2 + j);
          a20 = _mm256_fmadd_ps (b, v0, a20);
          a21 = _mm256_fmadd_ps (b, v1, a21);
          b = _mm256_broadcast_ss (p3 + j);
          a30 = _mm256_fmadd_ps (b, v0, a30);
          a31 = _mm256_fmadd_ps (b, v1, a31);
        }
        float *o0 = O + i * ldo + t;
        _mm256_storeu_ps (o0, a00);
        _mm256_storeu_ps (o0 + 8, a01);
        _mm256_storeu_ps (o0 + ldo, a10);
        _mm256_storeu_ps (o0 + ldo + 8, a11);
        _mm256_storeu_ps (o0 + 2 * ldo, a20);
        _mm256_storeu_ps (o0 + 2 * ldo + 8, a21);
        _mm256_storeu_ps (o0 + 3 * ldo, a30);
        _mm256_storeu_ps (o0 + 3 * ldo + 8, a31);
      }
    }
  for (; i < m; i++) {
    const float *pi = P + i * ldp;
    float *oi = O + i * ldo;
    size_t t = 0;
    for (; t + 32 <= dv; t += 32) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 a2 = _mm256_setzero_ps (), a3 = _mm256_setzero_ps ();
      for (size_t j = 0; j < nk; j++) {
        __m256 p = _mm256_broadcast_ss (pi + j);
        const float *vj = v + j * ldv + t;
        a0 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj), a0);
        a1 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 8), a1);
        a2 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 16), a2);
        a3 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 24), a3);
      }
      _mm256_storeu_ps (oi + t, a0);
      _mm256_storeu_ps (oi + t + 8, a1);
      _mm256_storeu_ps (oi + t + 16, a2);
      _mm256_storeu_ps (oi + t + 24, a3);
    }
    for (; t + 16 <= dv; t += 16) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      for (size_t j = 0; j < nk; j++) {
        __m256 p = _mm256_broadcast_ss (pi + j);
        const float *vj = v + j * ldv + t;
        a0 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj), a0);
        a1 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 8), a1);
      }
      _mm256_storeu_ps (oi + t, a0);
      _mm256_storeu_ps (oi + t + 8, a1);
    }
    for (; t + 8 <= dv; t += 8) {
      __m256 a0 = _mm256_setzero_ps ();
      for (size_t j = 0; j < nk; j++)
        a0 = _mm256_fmadd_ps (_mm256_broadcast_ss (pi + j),
                              _mm256_loadu_ps (v + j * ldv + t), a0);
      _mm256_storeu_ps (oi + t, a0);
    }
    if (t < dv)
      pv_portable (pi, ldp, 1, nk, v + t, ldv, dv - t, oi + t, ldo);
  }
}

/* Pass 1 of the masked softmax over s[0, n) (see sattn_softmax_scan). */
AVX2 static float
scan_avx2 (float *restrict s, size_t n, const uint8_t *restrict ok, float scale,
           size_t counts[4])
{
  const __m256 vs = _mm256_set1_ps (scale);
  const __m256 ninf = _mm256_set1_ps (-INFINITY);
  const __m256 pinf = _mm256_set1_ps (INFINITY);
  const __m256 qnan = _mm256_set1_ps (NAN);
  const __m256i zero = _mm256_setzero_si256 ();
  __m256 mx = ninf;
  size_t n_valid = 0, n_nan = 0, n_pinf = 0, n_ninf = 0;
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps (_mm256_loadu_ps (s + j), vs);
    __m256 okm;
    if (ok != NULL) {
      __m128i b = _mm_loadl_epi64 ((const __m128i *) (ok + j));
      __m256i w = _mm256_cvtepu8_epi32 (b);
      okm = _mm256_castsi256_ps (_mm256_xor_si256 (_mm256_cmpeq_epi32 (w, zero),
                                                   _mm256_set1_epi32 (-1)));
    } else {
      okm = _mm256_castsi256_ps (_mm256_set1_epi32 (-1));
    }
    __m256 nanm = _mm256_cmp_ps (v, v, _CMP_UNORD_Q);
    __m256 valid = _mm256_andnot_ps (nanm, okm);
    __m256 out = _mm256_blendv_ps (ninf, v, valid);
    out = _mm256_blendv_ps (out, qnan, _mm256_and_ps (okm, nanm));
    _mm256_storeu_ps (s + j, out);
    mx = _mm256_max_ps (mx, _mm256_blendv_ps (ninf, v, valid));
    int mv = _mm256_movemask_ps (valid);
    n_valid += (size_t) __builtin_popcount (mv);
    /* NaN and +-inf scores are rare: |v| == inf or a NaN lane sends the
     * vector to the counts by kind (see scan_avx512). */
    __m256 inf = _mm256_cmp_ps (_mm256_andnot_ps (_mm256_set1_ps (-0.0f), v),
                                pinf, _CMP_EQ_OQ);
    if (__builtin_expect (_mm256_movemask_ps (_mm256_or_ps (nanm, inf)) != 0,
                          0)) {
      n_nan += (size_t) __builtin_popcount (
          _mm256_movemask_ps (_mm256_and_ps (okm, nanm)));
      n_pinf += (size_t) __builtin_popcount (_mm256_movemask_ps (
          _mm256_and_ps (valid, _mm256_cmp_ps (v, pinf, _CMP_EQ_OQ))));
      n_ninf += (size_t) __builtin_popcount (_mm256_movemask_ps (
          _mm256_and_ps (valid, _mm256_cmp_ps (v, ninf, _CMP_EQ_OQ))));
    }
  }
  counts[0] += n_valid;
  counts[1] += n_nan;
  counts[2] += n_pinf;
  counts[3] += n_ninf;
  float lanes[8];
  _mm256_storeu_ps (lanes, mx);
  float m = -INFINITY;
  for (int l = 0; l < 8; l++)
    m = lanes[l] > m ? lanes[l] : m;
  if (j < n) {
    float t = scan_portable (s + j, n - j, ok ? ok + j : NULL, scale, counts);
    m = t > m ? t : m;
  }
  return m;
}

/* Whether n floats are all finite: acc = x * 0 + acc stays 0 while every
 * x is finite (subnormals included) and turns NaN at the first NaN or
 * +-inf (inf * 0 is NaN): one FMA per vector, four chains. */
AVX2 static int
finite_avx2 (const float *restrict x, size_t n)
{
  const __m256 zero = _mm256_setzero_ps ();
  __m256 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i), zero, a0);
    a1 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i + 8), zero, a1);
    a2 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i + 16), zero, a2);
    a3 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i + 24), zero, a3);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i), zero, a0);
  __m256 a = _mm256_add_ps (_mm256_add_ps (a0, a1), _mm256_add_ps (a2, a3));
  return _mm256_movemask_ps (_mm256_cmp_ps (a, a, _CMP_UNORD_Q)) == 0 &&
         finite_portable (x + i, n - i);
}

AVX2 static void
mul_avx2 (float *restrict y, size_t n, float a)
{
  const __m256 va = _mm256_set1_ps (a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps (y + i, _mm256_mul_ps (_mm256_loadu_ps (y + i), va));
  for (; i < n; i++)
    y[i] *= a;
}

/* ------------------------------------------------ double linear loops */

#define INLINE static inline __attribute__ ((always_inline))

/* R rows × 12 columns from column j (three vectors of 4 doubles per
 * row); the column tail by the portable loop (the same chains). */
AVX2 INLINE void
tile256 (const void *restrict x, const int xf, size_t ldx,
         const double *restrict Wt, size_t ldw, const double *restrict b,
         size_t din, size_t j, void *restrict y, const int yf, size_t ldy,
         const int R)
{
  __m256d a[4][3];
  for (int v = 0; v < 3; v++) {
    __m256d bv = b != NULL ? _mm256_loadu_pd (b + j + 4 * v)
                           : _mm256_setzero_pd ();
    for (int r = 0; r < R; r++)
      a[r][v] = bv;
  }
  for (size_t t = 0; t < din; t++) {
    const double *wr = Wt + t * ldw + j;
    __m256d w[3];
    for (int v = 0; v < 3; v++)
      w[v] = _mm256_loadu_pd (wr + 4 * v);
    for (int r = 0; r < R; r++) {
      __m256d xv = _mm256_set1_pd (XAT (x, xf, r * ldx + t));
      for (int v = 0; v < 3; v++)
        a[r][v] = _mm256_fmadd_pd (xv, w[v], a[r][v]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 3; v++) {
      if (yf)
        _mm_storeu_ps ((float *) y + r * ldy + j + 4 * v,
                       _mm256_cvtpd_ps (a[r][v]));
      else
        _mm256_storeu_pd ((double *) y + r * ldy + j + 4 * v, a[r][v]);
    }
}

#define LIN256(name, xf, yf, XT, YT)                                        \
  AVX2 static void name (const XT *x, size_t ldx, size_t rows,              \
                         const double *Wt, size_t ldw, const double *b,     \
                         size_t din, size_t n, YT *y, size_t ldy)           \
  {                                                                         \
    const size_t jv = n / 12 * 12;                                          \
    size_t i = 0;                                                           \
    for (; i + 4 <= rows; i += 4)                                           \
      for (size_t j = 0; j < jv; j += 12)                                   \
        tile256 (x + i * ldx, xf, ldx, Wt, ldw, b, din, j, y + i * ldy, yf, \
                 ldy, 4);                                                   \
    for (; i < rows; i++)                                                   \
      for (size_t j = 0; j < jv; j += 12)                                   \
        tile256 (x + i * ldx, xf, ldx, Wt, ldw, b, din, j, y + i * ldy, yf, \
                 ldy, 1);                                                   \
    if (jv < n)                                                             \
      lin_portable (x, xf, ldx, rows, Wt, ldw, b, din, jv, n, y, yf, ldy);  \
  }

LIN256 (lin256_dd, 0, 0, double, double)
LIN256 (lin256_df, 0, 1, double, float)
LIN256 (lin256_ff, 1, 1, float, float)

AVX2 static void
cvt256 (const float *x, size_t ldx, size_t rows, size_t din, double *xb)
{
  for (size_t i = 0; i < rows; i++) {
    size_t t = 0;
    for (; t + 4 <= din; t += 4)
      _mm256_storeu_pd (xb + i * din + t,
                        _mm256_cvtps_pd (_mm_loadu_ps (x + i * ldx + t)));
    for (; t < din; t++)
      xb[i * din + t] = (double) x[i * ldx + t];
  }
}

/* ------------------------------------------------------ erf and GELU */

/* erf1_portable (kernels-portable.h) on 8 lanes: the segment's row of
 * each coefficient picked by a permutation (the 8 segments are one
 * vector), the same fused operations in the same order.  NaN and |x| >= 4
 * index some segment (the low 3 bits) and are replaced as there. */
AVX2 static inline __attribute__ ((always_inline)) __m256
erf256 (__m256 x)
{
  const __m256 sign = _mm256_set1_ps (-0.0f);
  const __m256 ax = _mm256_andnot_ps (sign, x);
  const __m256i i = _mm256_cvttps_epi32 (
      _mm256_mul_ps (ax, _mm256_set1_ps (2.0f)));
#define ERF_TAB(k) \
  _mm256_permutevar8x32_ps (_mm256_load_ps (sattn_erf_tab[k]), i)
  const __m256 t = _mm256_sub_ps (ax, ERF_TAB (SATTN_ERF_CTR));
  __m256 acc = ERF_TAB (SATTN_ERF_Q6);
  for (int k = SATTN_ERF_Q5; k >= SATTN_ERF_Q0; k--)
    acc = _mm256_fmadd_ps (acc, t, ERF_TAB (k));
  acc = _mm256_fmadd_ps (acc, t, ERF_TAB (SATTN_ERF_C1L));
  acc = _mm256_fmadd_ps (acc, t,
                         _mm256_fmadd_ps (ERF_TAB (SATTN_ERF_E), t,
                                          ERF_TAB (SATTN_ERF_C0L)));
  acc = _mm256_fmadd_ps (ERF_TAB (SATTN_ERF_C1H), t, acc);
  __m256 r = _mm256_add_ps (ERF_TAB (SATTN_ERF_C0H), acc);
#undef ERF_TAB
  r = _mm256_blendv_ps (r, _mm256_set1_ps (1.0f),
                        _mm256_cmp_ps (ax, _mm256_set1_ps (4.0f), _CMP_GE_OQ));
  return _mm256_or_ps (r, _mm256_and_ps (x, sign));
}

AVX2 static void
erf_avx2 (const float *restrict x, float *restrict y, size_t n)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps (y + i, erf256 (_mm256_loadu_ps (x + i)));
  for (; i < n; i++)
    y[i] = erf1_portable (x[i]);
}

/* gelu1_portable on 8 doubles at a time. */
AVX2 static void
gelu_avx2 (double *restrict h, size_t n)
{
  const __m256d s = _mm256_set1_pd (M_SQRT1_2), half = _mm256_set1_pd (0.5);
  const __m256d one = _mm256_set1_pd (1.0);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d v0 = _mm256_loadu_pd (h + i);
    const __m256d v1 = _mm256_loadu_pd (h + i + 4);
    const __m256 e = erf256 (
        _mm256_set_m128 (_mm256_cvtpd_ps (_mm256_mul_pd (v1, s)),
                         _mm256_cvtpd_ps (_mm256_mul_pd (v0, s))));
    const __m256d e0 = _mm256_cvtps_pd (_mm256_castps256_ps128 (e));
    const __m256d e1 = _mm256_cvtps_pd (_mm256_extractf128_ps (e, 1));
    const __m256d y0 = _mm256_mul_pd (_mm256_mul_pd (half, v0),
                                      _mm256_add_pd (one, e0));
    const __m256d y1 = _mm256_mul_pd (_mm256_mul_pd (half, v1),
                                      _mm256_add_pd (one, e1));
    _mm256_storeu_pd (h + i, _mm256_cvtps_pd (_mm256_cvtpd_ps (y0)));
    _mm256_storeu_pd (h + i + 4, _mm256_cvtps_pd (_mm256_cvtpd_ps (y1)));
  }
  for (; i < n; i++)
    h[i] = gelu1_portable (h[i]);
}

/* relu_portable (kernels-portable.h) on 4 doubles at a time: maxpd
 * returns its second operand (+0) for NaN and for -0. */
AVX2 static void
relu_avx2 (double *restrict h, size_t n)
{
  const __m256d zero = _mm256_setzero_pd ();
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    _mm256_storeu_pd (h + i, _mm256_max_pd (_mm256_cvtps_pd (_mm256_cvtpd_ps (
                                                _mm256_loadu_pd (h + i))),
                                            zero));
  if (i < n)
    relu_portable (h + i, n - i);
}

/* ------------------------------------------------------------- table */

static void
qk_max_avx2 (const float *q, size_t ldq, const float *kt, size_t ldkt, size_t m,
             size_t nk, size_t dh, float *S, size_t lds, float *rmax)
{
  sattn_qk_max_from (qk_avx2, q, ldq, kt, ldkt, m, nk, dh, S, lds, rmax);
}

static int
pv_norm_avx2 (const float *P, size_t ldp, size_t m, size_t nk, const float *v,
              size_t ldv, size_t dv, const float *norm, float *O, size_t ldo)
{
  return sattn_pv_norm_from (pv_avx2, mul_avx2, finite_avx2, P, ldp, m, nk, v,
                             ldv, dv, norm, O, ldo);
}

static void
softmax_rows_avx2 (float *S, size_t lds, size_t m, size_t n, const float *qmax,
                   float scale, uint8_t *rows, float *norm)
{
  sattn_softmax_rows_from (exp_sum_avx2, S, lds, m, n, qmax, scale, rows, norm);
}

const SattnKernels sattn_kernels_avx2 = {
  .name = "avx2",
  .qk = qk_avx2,
  .qk_max = qk_max_avx2,
  .softmax_rows = softmax_rows_avx2,
  .pv = pv_avx2,
  .pv_norm = pv_norm_avx2,
  .softmax_scan = scan_avx2,
  .softmax_max = max_avx2,
  .exp_sum = exp_sum_avx2,
  .exp_sum_stats = exp_sum_stats_avx2,
  .mul = mul_avx2,
  .finite = finite_avx2,
  .copy_rows = copy_rows_portable,
  .transpose_rows = transpose_rows_portable,
  .add_bias = add_bias_portable,
  .linear_dd = lin256_dd,
  .linear_df = lin256_df,
  .linear_ff = lin256_ff,
  .widen = cvt256,
  .erf = erf_avx2,
  .gelu = gelu_avx2,
  .relu = relu_avx2,
  .norm_f = norm_f_portable,
  .gelu_f = gelu_f_portable,
  .add_rows = add_rows_portable,
};
#endif /* SATTN_HAVE_X86 */
