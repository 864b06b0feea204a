/* The portable loops that every level's file may use: the AVX2 and
 * AVX-512 kernels finish their tails with them, and levels without a
 * vector loop for an entry name them in their table.  Static, so that
 * each file compiles (and inlines) them where they are used, for its own
 * target: a loop inlined into an AVX2 + FMA kernel is compiled as part
 * of it, as it always was (pv_avx2's column tail contracts into FMAs
 * there; the bytes depend on it).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_CPU_KERNELS_PORTABLE_H
#define SATTN_CPU_KERNELS_PORTABLE_H

#include "kernels.h"

#include <math.h>
#include <string.h>

/* Not every file uses every loop. */
#define SATTN_LOOP static __attribute__ ((unused))

SATTN_LOOP void
pv_portable (const float *restrict P, size_t ldp, size_t m, size_t nk,
             const float *restrict v, size_t ldv, size_t dv, float *restrict O,
             size_t ldo)
{
  for (size_t i = 0; i < m; i++) {
    float *restrict oi = O + i * ldo;
    const float *restrict pi = P + i * ldp;
    for (size_t t = 0; t < dv; t++)
      oi[t] = 0.0f;
    for (size_t j = 0; j < nk; j++) {
      const float p = pi[j];
      const float *restrict vj = v + j * ldv;
      for (size_t t = 0; t < dv; t++)
        oi[t] += p * vj[t];
    }
  }
}

SATTN_LOOP float
scan_portable (float *restrict s, size_t n, const uint8_t *restrict ok,
               float scale, size_t counts[4])
{
  float m = -INFINITY;
  for (size_t j = 0; j < n; j++) {
    float v = s[j] * scale;
    if (ok != NULL && !ok[j]) {
      s[j] = -INFINITY;
      continue;
    }
    if (v != v) {
      counts[1]++;
      s[j] = NAN;
      continue;
    }
    counts[0]++;
    counts[2] += v == INFINITY;
    counts[3] += v == -INFINITY;
    s[j] = v;
    m = v > m ? v : m;
  }
  return m;
}

/* The max of s[0, n); *finite = 0 when some entry is NaN or +-inf:
 * v * 0 is NaN exactly for those, and a NaN stays in the sum. */
SATTN_LOOP float
max_portable (const float *restrict s, size_t n, int *finite)
{
  float m = -INFINITY, det = 0.0f;
  for (size_t j = 0; j < n; j++) {
    m = s[j] > m ? s[j] : m;
    det += s[j] * 0.0f;
  }
  *finite = det == det;
  return m;
}

/* Rows x[i * ldx], i < cnt, columns [0, w), into rows i of dst (stride
 * ldd) and their mirrors mir floats further; zeros where ok[i] == 0
 * (ok NULL: none). */
SATTN_LOOP void
copy_rows_portable (const float *restrict x, size_t ldx,
                    const uint8_t *restrict ok, size_t cnt, size_t w,
                    float *restrict dst, size_t ldd, size_t mir)
{
  for (size_t i = 0; i < cnt; i++) {
    float *d = dst + i * ldd;
    for (size_t t = 0; t < w; t++)
      d[t] = d[t + mir] = ok == NULL || ok[i] ? x[i * ldx + t] : 0.0f;
  }
}

/* Rows y[i * ldy] (i < n), columns [0, k), plus b[0, k): one float
 * addition per entry, the same bytes at every level. */
SATTN_LOOP void
add_bias_portable (float *restrict y, size_t ldy, size_t n,
                   const float *restrict b, size_t k)
{
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++)
      y[i * ldy + j] += b[j];
}

/* y[i * ldy + t] += x[i * ldx + t] for rows i < rows, t < d: one float
 * addition per entry, the same bytes at every level (precision=fast's
 * residuals). */
SATTN_LOOP void
add_rows_portable (const float *restrict x, size_t ldx, float *restrict y,
                   size_t ldy, size_t rows, size_t d)
{
  for (size_t i = 0; i < rows; i++)
    for (size_t t = 0; t < d; t++)
      y[i * ldy + t] += x[i * ldx + t];
}

/* LayerNorm of rows (i < rows) of d floats in float, as PyTorch float32
 * (precision=fast): y = (x - mean) / sqrt (var + eps) * w + b (w, b
 * NULL: 1, 0), mean and the biased variance by two passes; y may be x.
 * This loop sums in double; a level's own loop sums in float lanes.  Each
 * row's bytes do not depend on the rows around it. */
SATTN_LOOP void
norm_f_portable (const float *x, size_t ldx, float *y, size_t ldy, size_t rows,
                 size_t d, const float *w, const float *b, float eps)
{
  for (size_t i = 0; i < rows; i++) {
    const float *xr = x + i * ldx;
    float *yr = y + i * ldy;
    double s = 0.0, v = 0.0;
    for (size_t t = 0; t < d; t++)
      s += (double) xr[t];
    const float mean = (float) (s / (double) d);
    for (size_t t = 0; t < d; t++) {
      const float e = xr[t] - mean;
      v += (double) e * (double) e;
    }
    const float inv = 1.0f / sqrtf ((float) (v / (double) d) + eps);
    for (size_t t = 0; t < d; t++) {
      float o = (xr[t] - mean) * inv;
      if (w != NULL)
        o *= w[t];
      if (b != NULL)
        o += b[t];
      yr[t] = o;
    }
  }
}

/* copy_rows_portable transposed: dst[t * ldd + i] (and its mirror) =
 * x[i * ldx + t]. */
SATTN_LOOP void
transpose_rows_portable (const float *restrict x, size_t ldx,
                         const uint8_t *restrict ok, size_t cnt, size_t w,
                         float *restrict dst, size_t ldd, size_t mir)
{
  for (size_t t = 0; t < w; t++) {
    float *restrict d = dst + t * ldd;
    for (size_t i = 0; i < cnt; i++)
      d[i] = d[i + mir] = ok == NULL || ok[i] ? x[i * ldx + t] : 0.0f;
  }
}

/* A float is finite unless its exponent field is all ones: adding 1 to
 * the field carries into bit 31 exactly then.  Integer OR, so the loop
 * vectorises without reassociating any float arithmetic. */
SATTN_LOOP int
finite_portable (const float *restrict x, size_t n)
{
  uint32_t acc = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy (&u, x + i, sizeof (u));
    acc |= (u & 0x7f800000u) + 0x00800000u;
  }
  return (acc & 0x80000000u) == 0;
}

/* The input row entry (r, t) as a double: from float or double rows. */
#define XAT(x, xf, i) \
  ((xf) ? (double) ((const float *) (x))[i] : ((const double *) (x))[i])

/* Columns [j0, n) of rows of y = b + x Wt (Wt: din × n at row stride
 * ldw), one double row of 64 columns at a time; xf / yf: x / y are float
 * (y rounded once) rather than double.  Never inlined: the AVX2 loops
 * call it for their column tails, as they did when it had more callers
 * in one file (every product is exact, so the bytes would not change
 * either way; their code does not either). */
SATTN_LOOP __attribute__ ((noinline)) void
lin_portable (const void *restrict x, int xf, size_t ldx, size_t rows,
              const double *restrict Wt, size_t ldw, const double *restrict b,
              size_t din, size_t j0, size_t n, void *restrict y, int yf,
              size_t ldy)
{
  double acc[64];
  for (size_t i = 0; i < rows; i++) {
    for (size_t c0 = j0; c0 < n; c0 += 64) {
      const size_t nb = n - c0 < 64 ? n - c0 : 64;
      for (size_t j = 0; j < nb; j++)
        acc[j] = b != NULL ? b[c0 + j] : 0.0;
      for (size_t t = 0; t < din; t++) {
        const double a = XAT (x, xf, i * ldx + t);
        const double *restrict wr = Wt + t * ldw + c0;
        for (size_t j = 0; j < nb; j++)
          acc[j] += a * wr[j];
      }
      for (size_t j = 0; j < nb; j++) {
        if (yf)
          ((float *) y)[i * ldy + c0 + j] = (float) acc[j];
        else
          ((double *) y)[i * ldy + c0 + j] = acc[j];
      }
    }
  }
}

/* ------------------------------------------------------ erf and GELU */

/* erf in float on 8 segments of [0, 4) (width 0.5, segment i = (int) 2|x|):
 * around the segment's centre c (0 for the first), t = |x| - c (exact:
 * Sterbenz) and
 *
 *   erf (c + t) ~ c0 + c1 t + t^2 Q (t),   Q of degree 6,
 *
 * with c0 = erf (c) and c1 = erf' (c) each as a float pair (hi + lo),
 * evaluated as c0h + fma (c1h, t, fma (fma (Q (t), t, c1l), t, c0l)): the
 * two leading terms keep their rounding to the last two operations.  On
 * the first segment (c0 = 0) that would round c1 t's small correction on
 * its own, which for subnormal t costs half an ulp more; there the same
 * operations compute fma (fma (Q (t), t, c1 - 1), t, t) instead (c0h =
 * c1h = 0, c1l = c1 - 1, and the addend of the middle fma is
 * fma (e, t, c0l) with e = 1 there, 0 elsewhere: t or c0l, exactly).  The
 * result is within 0.68 ulp of erf (0.671 measured over every float of
 * [0, 4) by `test-erf 1`, tests/kernel/test-erf.c).  Q is a least-squares fit on 300 Chebyshev nodes of
 * (erf (c + t) - c0 - c1 t) / t^2 (on the first segment of erf (t) / t,
 * whose constant term is c1), coefficients rounded to float.  |x| >= 4
 * gives 1 (erf rounds to 1 from 3.92 on), NaN stays NaN, erf (-x) =
 * -erf (x).
 *
 * Every level computes exactly these operations in this order with
 * fused multiply-adds (fmaf here, the FMA instructions in the vector
 * loops): the same bytes everywhere. */
enum {
  SATTN_ERF_CTR,
  SATTN_ERF_E,
  SATTN_ERF_C0H,
  SATTN_ERF_C0L,
  SATTN_ERF_C1H,
  SATTN_ERF_C1L,
  SATTN_ERF_Q0,
  SATTN_ERF_Q1,
  SATTN_ERF_Q2,
  SATTN_ERF_Q3,
  SATTN_ERF_Q4,
  SATTN_ERF_Q5,
  SATTN_ERF_Q6,
  SATTN_ERF_ROWS
};

static const float sattn_erf_tab[SATTN_ERF_ROWS][8]
    __attribute__ ((aligned (32), unused)) = {
      /* ctr */
      { 0.0f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f, 3.75f },
      /* e */
      { 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f },
      /* c0h */
      { 0.0f, 0.711155653f, 0.92290014f, 0.986671686f, 0.998537302f,
        0.999899387f, 0.999995708f, 0.999999881f },
      /* c0l */
      { 0.0f, -1.93463627e-08f, -1.20290338e-08f, -1.49533026e-08f,
        -1.86038935e-08f, -9.28173893e-09f, -1.12450396e-08f, 5.48203305e-09f },
      /* c1h */
      { 0.0f, 0.642931044f, 0.236521125f, 0.0527749956f, 0.00714231888f,
        0.000586277223f, 2.91890246e-05f, 8.81432186e-07f },
      /* c1l */
      { 0.128379166f, 2.50934917e-08f, -2.39249198e-09f, 3.64735936e-10f,
        1.43695139e-10f, 2.39016376e-11f, 7.39143501e-13f, 5.32549816e-15f },
      /* q0 */
      { 9.87855628e-08f, -0.482198298f, -0.295651406f, -0.0923562422f,
        -0.0160702169f, -0.00161226245f, -9.48643356e-05f, -3.30537046e-06f },
      /* q1 */
      { -0.376130611f, 0.0267886911f, 0.167535812f, 0.0901573077f,
        0.0217245445f, 0.00276038679f, 0.000195810397f, 7.96978202e-06f },
      /* q2 */
      { 6.95017588e-05f, 0.150686979f, -0.00615935633f, -0.0481022373f,
        -0.0190833844f, -0.00325811026f, -0.00028656947f, -1.38413998e-05f },
      /* q3 */
      { 0.112273179f, -0.0532293916f, -0.0471839197f, 0.00662130769f,
        0.0106589179f, 0.00275605754f, 0.000313709723f, 1.83498123e-05f },
      /* q4 */
      { 0.00252250023f, -0.0268733576f, 0.0212974288f, 0.00896516815f,
        -0.00290428824f, -0.00165759528f, -0.000263518217f, -1.925996e-05f },
      /* q5 */
      { -0.0332356989f, 0.0180066433f, 0.00371916173f, -0.0059610093f,
        -0.000710285327f, 0.000638113357f, 0.000172800224f, 1.695024e-05f },
      /* q6 */
      { 0.00869289506f, 0.00232389406f, -0.00559907081f, 0.000675457995f,
        0.000997814001f, -8.21494759e-05f, -8.19178167e-05f, -1.14545956e-05f },
    };

/* erf (x), the scalar form of the vector loops (see above). */
SATTN_LOOP float
erf1_portable (float x)
{
  const float ax = fabsf (x);
  /* NaN and |x| >= 4 take segment 0 (their value is replaced below). */
  const int i = ax < 4.0f ? (int) (ax * 2.0f) : 0;
  const float t = ax - sattn_erf_tab[SATTN_ERF_CTR][i];
  float acc = sattn_erf_tab[SATTN_ERF_Q6][i];
  for (int k = SATTN_ERF_Q5; k >= SATTN_ERF_Q0; k--)
    acc = fmaf (acc, t, sattn_erf_tab[k][i]);
  acc = fmaf (acc, t, sattn_erf_tab[SATTN_ERF_C1L][i]);
  acc = fmaf (acc, t,
              fmaf (sattn_erf_tab[SATTN_ERF_E][i], t,
                    sattn_erf_tab[SATTN_ERF_C0L][i]));
  acc = fmaf (sattn_erf_tab[SATTN_ERF_C1H][i], t, acc);
  float r = sattn_erf_tab[SATTN_ERF_C0H][i] + acc;
  if (ax >= 4.0f)
    r = 1.0f;
  return copysignf (r, x);
}

/* GELU of a double, rounded to float: 0.5 v (1 + erf (v / sqrt 2)) with
 * the float erf above on the argument rounded to float; the products and
 * the sum around it in double. */
SATTN_LOOP double
gelu1_portable (double v)
{
  const double e = (double) erf1_portable ((float) (v * M_SQRT1_2));
  return (double) (float) (0.5 * v * (1.0 + e));
}

/* h[i] = GELU (h[i]) in float (sattn_gelu_f32): 0.5 h (1 + erf (h /
 * sqrt 2)), each step rounded to float, by the erf above. */
SATTN_LOOP void
gelu_f_portable (float *restrict h, size_t n)
{
  for (size_t i = 0; i < n; i++)
    h[i] = 0.5f * h[i] * (1.0f + erf1_portable (h[i] * (float) M_SQRT1_2));
}

SATTN_LOOP void
erf_portable (const float *restrict x, float *restrict y, size_t n)
{
  for (size_t i = 0; i < n; i++)
    y[i] = erf1_portable (x[i]);
}

SATTN_LOOP void
gelu_portable (double *restrict h, size_t n)
{
  for (size_t i = 0; i < n; i++)
    h[i] = gelu1_portable (h[i]);
}

/* ReLU of doubles rounded to float: rounded, then max (v, 0) in a loop
 * of its own (no branch on the signs of a hidden row); NaN and -0 give
 * +0, as the vector max (v, 0) does. */
SATTN_LOOP void
relu_portable (double *restrict h, size_t n)
{
  for (size_t i = 0; i < n; i++)
    h[i] = (float) h[i];
  for (size_t i = 0; i < n; i++)
    h[i] = h[i] > 0.0 ? h[i] : 0.0;
}

#endif
