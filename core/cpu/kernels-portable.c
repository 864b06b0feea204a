/* The portable kernels (level 0): plain C for any CPU, and their table.
 *
 *   qk:      S (m × nk) = Q (m × dh) · Kt (dh × nk)   (K transposed)
 *   pv:      O (m × dv) = P (m × nk) · V (nk × dv)
 *   exp_sum: y = exp (y * scale - mx), returns the sum (inputs <= mx)
 *   softmax_max: max of a row and whether it is all finite
 *
 * The loops the vector levels share are in kernels-portable.h.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels-portable.h"

#include <math.h>

static void
qk_portable (const float *restrict q, size_t ldq, const float *restrict kt,
             size_t ldkt, size_t m, size_t nk, size_t dh, float *restrict S,
             size_t lds)
{
  for (size_t i = 0; i < m; i++) {
    float *restrict si = S + i * lds;
    const float *restrict qi = q + i * ldq;
    for (size_t j = 0; j < nk; j++)
      si[j] = 0.0f;
    for (size_t t = 0; t < dh; t++) {
      const float a = qi[t];
      const float *restrict kr = kt + t * ldkt;
      for (size_t j = 0; j < nk; j++)
        si[j] += a * kr[j];
    }
  }
}

/* The exp pass: y = exp (y * scale - mx), returning the sum.  With ex != NULL
 * also *ex = sum of e x and *xmin = min x over entries with x = y - mx >
 * -inf (for the statistics).  One body serves both uses, so the weights are
 * identical with and without statistics; callers pass NULL or not as a
 * constant and the body is inlined for each. */
static inline __attribute__ ((always_inline)) double
exp_sum_body_portable (float *y, size_t n, float scale, float mx, double *ex,
                       float *xmin)
{
  double sum = 0.0, sx = 0.0;
  float m = INFINITY;
  for (size_t i = 0; i < n; i++) {
    /* The product rounded before the subtraction (never one fused
     * multiply-add: the max entry must give exactly 0). */
    volatile float xs = y[i] * scale;
    float x = xs - mx;
    y[i] = expf (x);
    sum += y[i];
    if (ex != NULL && x > -INFINITY) {
      sx += (double) x * y[i];
      m = x < m ? x : m;
    }
  }
  if (ex != NULL) {
    *ex = sx;
    *xmin = m;
  }
  return sum;
}

static double
exp_sum_portable (float *y, size_t n, float scale, float mx)
{
  return exp_sum_body_portable (y, n, scale, mx, NULL, NULL);
}

static double
exp_sum_stats_portable (float *y, size_t n, float scale, float mx, double *ex,
                        float *xmin)
{
  return exp_sum_body_portable (y, n, scale, mx, ex, xmin);
}

static void
mul_portable (float *y, size_t n, float a)
{
  for (size_t i = 0; i < n; i++)
    y[i] *= a;
}

static void
qk_max_portable (const float *q, size_t ldq, const float *kt, size_t ldkt,
                 size_t m, size_t nk, size_t dh, float *S, size_t lds,
                 float *rmax)
{
  sattn_qk_max_from (qk_portable, q, ldq, kt, ldkt, m, nk, dh, S, lds, rmax);
}

static int
pv_norm_portable (const float *P, size_t ldp, size_t m, size_t nk,
                  const float *v, size_t ldv, size_t dv, const float *norm,
                  float *O, size_t ldo)
{
  return sattn_pv_norm_from (pv_portable, mul_portable, finite_portable, P, ldp,
                             m, nk, v, ldv, dv, norm, O, ldo);
}

static void
softmax_rows_portable (float *S, size_t lds, size_t m, size_t n,
                       const float *qmax, float scale, uint8_t *rows,
                       float *norm)
{
  sattn_softmax_rows_from (exp_sum_portable, S, lds, m, n, qmax, scale, rows,
                           norm);
}

/* The portable loops under the signatures of the vector ones. */
#define LINP(name, xf, yf, XT, YT)                                            \
  static void name (const XT *x, size_t ldx, size_t rows, const double *Wt,   \
                    size_t ldw, const double *b, size_t din, size_t n, YT *y, \
                    size_t ldy)                                               \
  {                                                                           \
    lin_portable (x, xf, ldx, rows, Wt, ldw, b, din, 0, n, y, yf, ldy);       \
  }

LINP (linp_dd, 0, 0, double, double)
LINP (linp_df, 0, 1, double, float)
LINP (linp_ff, 1, 1, float, float)

static void
cvtp (const float *x, size_t ldx, size_t rows, size_t din, double *xb)
{
  for (size_t i = 0; i < rows; i++)
    for (size_t t = 0; t < din; t++)
      xb[i * din + t] = (double) x[i * ldx + t];
}

const SattnKernels sattn_kernels_portable = {
  .name = "portable",
  .qk = qk_portable,
  .qk_max = qk_max_portable,
  .softmax_rows = softmax_rows_portable,
  .pv = pv_portable,
  .pv_norm = pv_norm_portable,
  .softmax_scan = scan_portable,
  .softmax_max = max_portable,
  .exp_sum = exp_sum_portable,
  .exp_sum_stats = exp_sum_stats_portable,
  .mul = mul_portable,
  .finite = finite_portable,
  .copy_rows = copy_rows_portable,
  .transpose_rows = transpose_rows_portable,
  .add_bias = add_bias_portable,
  .linear_dd = linp_dd,
  .linear_df = linp_df,
  .linear_ff = linp_ff,
  .widen = cvtp,
  .erf = erf_portable,
  .gelu = gelu_portable,
  .relu = relu_portable,
  .norm_f = norm_f_portable,
  .gelu_f = gelu_f_portable,
  .add_rows = add_rows_portable,
};
