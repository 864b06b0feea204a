/* The per-row parts of an encoder layer (PyTorch nn.TransformerEncoderLayer)
 * around the attention: residual, LayerNorm, feed-forward.  Each row is
 * computed on its own with the same loops whatever block it falls in, so
 * the bytes do not depend on how rows are handed to threads.
 *
 * Precision: the parts are computed in double and rounded to float only
 * where the next step needs float (the hidden feed-forward row and the
 * LayerNorm output that feeds a projection) and at the layer's output.  The
 * feed-forward sums run in double from the bias (a float product is exact
 * in double, so FMA or not gives the same bytes on every ISA), the
 * residual sums are never rounded, and a LayerNorm output is rounded once.
 * Measured by ablation (tests/layers/error-ablation.py), the float
 * residual adds, the three roundings of each LayerNorm output and the
 * float feed-forward sums were what put the layer's error above PyTorch
 * float32's.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "nn/nn.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Doubles per row of the double scratch arrays, rounded up to whole
 * 64-byte lines. */
static size_t
dstride (size_t d)
{
  return (d + 7) / 8 * 8;
}

size_t
sattn_layer_scratch (const SattnModel *m)
{
  if (!m->cfg.encoder)
    return 0;
  /* Four double arrays of SATTN_LAYER_ROWS rows (a double is two floats):
   * the hidden rows, the LayerNorm output that enters linear1, the
   * feed-forward output and the residual. */
  return 2 * SATTN_LAYER_ROWS * (m->cfg.d_ff + 3 * dstride (m->cfg.d_model));
}

/* --------------------------------------------------------- LayerNorm */

/* See nn/nn.h: mean and variance by two passes (no cancellation) in
 * double, each output rounded to float once.  Each row's sums are chains
 * in index order.  Eight rows are taken together (then four, then one),
 * their chains side by side in registers (independent: they overlap in
 * the pipeline instead of waiting for each other; eight keep both adders
 * busy where four left them waiting on the adds' latency), each row
 * computed by the same operations as alone.  LN_ROWS defines the
 * version for an input type XT (float or double); LN_BLOCK is its block
 * of K rows. */
#define LN_BLOCK(XT, K)                                               \
  for (; i + (K) <= rows; i += (K)) {                                 \
    const XT *xr[K];                                                  \
    double s[K], mean[K], v[K], inv[K];                               \
    _Pragma ("GCC unroll 8") for (size_t k = 0; k < (K); k++)         \
    {                                                                 \
      xr[k] = x + (i + k) * ldx;                                      \
      s[k] = 0.0;                                                     \
      v[k] = 0.0;                                                     \
    }                                                                 \
    for (size_t t = 0; t < d; t++) {                                  \
      _Pragma ("GCC unroll 8") for (size_t k = 0; k < (K); k++)       \
          s[k] += (double) xr[k][t];                                  \
    }                                                                 \
    _Pragma ("GCC unroll 8") for (size_t k = 0; k < (K); k++)         \
        mean[k] = s[k] / (double) d;                                  \
    for (size_t t = 0; t < d; t++) {                                  \
      _Pragma ("GCC unroll 8") for (size_t k = 0; k < (K); k++)       \
      {                                                               \
        double e = (double) xr[k][t] - mean[k];                       \
        v[k] += e * e;                                                \
      }                                                               \
    }                                                                 \
    _Pragma ("GCC unroll 8") for (size_t k = 0; k < (K); k++)         \
        inv[k] = 1.0 / sqrt (v[k] / (double) d + eps);                \
    for (size_t k = 0; k < (K); k++) {                                \
      float *yr = y + (i + k) * ldy;                                  \
      double *restrict ydr = yd != NULL ? yd + (i + k) * ldyd : NULL; \
      for (size_t t = 0; t < d; t++) {                                \
        double o = ((double) xr[k][t] - mean[k]) * inv[k];            \
        if (w != NULL)                                                \
          o *= (double) w[t];                                         \
        if (b != NULL)                                                \
          o += (double) b[t];                                         \
        yr[t] = (float) o;                                            \
        if (ydr != NULL)                                              \
          ydr[t] = (double) yr[t];                                    \
      }                                                               \
    }                                                                 \
  }

#define LN_ROWS(name, XT)                                                      \
  static void name (const XT *x, size_t ldx, float *y, size_t ldy, double *yd, \
                    size_t ldyd, size_t rows, size_t d, const float *w,        \
                    const float *b, double eps)                                \
  {                                                                            \
    size_t i = 0;                                                              \
    LN_BLOCK (XT, 8)                                                           \
    LN_BLOCK (XT, 4)                                                           \
    LN_BLOCK (XT, 1)                                                           \
  }

LN_ROWS (norm_rows_f, float)
LN_ROWS (norm_rows_d, double)

void
sattn_layer_norm_rows (const float *xf, size_t ldxf, const double *xd,
                       size_t ldxd, float *y, size_t ldy, double *yd,
                       size_t ldyd, size_t rows, size_t d, const float *w,
                       const float *b, double eps)
{
  if (xf != NULL)
    norm_rows_f (xf, ldxf, y, ldy, yd, ldyd, rows, d, w, b, eps);
  else
    norm_rows_d (xd, ldxd, y, ldy, yd, ldyd, rows, d, w, b, eps);
}

void
sattn_layer_norm1 (const SattnModel *m, int fast, const float *x, size_t ldx,
                   float *y, size_t ldy, size_t rows)
{
  if (fast && m->w1f != NULL)
    sattn_norm_rows_f32 (x, ldx, y, ldy, rows, m->cfg.d_model, m->n1w, m->n1b,
                         (float) m->cfg.norm_eps);
  else
    sattn_layer_norm_rows (x, ldx, NULL, 0, y, ldy, NULL, 0, rows,
                           m->cfg.d_model, m->n1w, m->n1b, m->cfg.norm_eps);
}

/* ------------------------------------------------------ feed-forward */

/* h <- act (h) rounded to float (kept as double: linear2 reads doubles),
 * by the kernel table's loops.  GELU's erf is a float one (a double erf
 * per hidden unit would cost more than the rest of the layer); its
 * argument and the products around it are double. */
static void
activate (const SattnModel *m, double *restrict h, size_t n)
{
  if (m->cfg.activation == SATTN_ACTIVATION_GELU)
    sattn_kernels ()->gelu (h, n);
  else
    sattn_kernels ()->relu (h, n);
}

/* f (rows × d, stride ld) = linear2 (act (linear1 (u))) for rows of u
 * (stride ld); hd: rows × d_ff. */
static void
feed_forward (const SattnModel *m, const double *u, size_t ld, size_t rows,
              double *hd, double *f)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff;
  sattn_linear_d (u, ld, rows, m->w1, dff, m->b1, d, dff, hd, dff);
  activate (m, hd, rows * dff);
  sattn_linear_d (hd, dff, rows, m->w2, d, m->b2, dff, d, f, ld);
}

/* Whether the d doubles at v all lie within the float range. */
static int
fits_float (const double *v, size_t d)
{
  for (size_t t = 0; t < d; t++)
    if (!(fabs (v[t]) <= (double) FLT_MAX))
      return 0;
  return 1;
}

/* The part that overflowed first in a row whose output is not finite,
 * from what its block left in the scratch: res (input + attention, exact
 * in double), u (the LayerNorm output that entered linear1, as rounded),
 * hd (the hidden row, rounded by activate), f (linear2's output; post-norm:
 * plus u).  Only called for such rows: a finite window pays one test per
 * row. */
static SattnPart
overflow_part (const SattnModel *m, const double *res, const double *u,
               const double *hd, const double *f)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff;
  if (!fits_float (res, d))
    /* x is a finite frame: the attention's row was not. */
    return SATTN_PART_OUT_PROJ;
  if (!fits_float (u, d))
    return m->cfg.norm_first ? SATTN_PART_NORM2 : SATTN_PART_NORM1;
  if (!fits_float (hd, dff))
    return SATTN_PART_LINEAR1;
  if (!m->cfg.norm_first)
    /* f + u went through norm2, whose output was rounded. */
    return fits_float (f, d) ? SATTN_PART_NORM2 : SATTN_PART_LINEAR2;
  /* Pre-norm: y = res + f, rounded: f is linear2's output. */
  return fits_float (f, d) ? SATTN_PART_RESIDUAL : SATTN_PART_LINEAR2;
}

/* ---------------------------------------------- precision=fast rows */

/* h <- act (h) in float, as PyTorch float32 (sattn_gelu_f32). */
static void
activate_f (const SattnModel *m, float *restrict h, size_t n)
{
  if (m->cfg.activation == SATTN_ACTIVATION_GELU) {
    sattn_gelu_f32 (h, n);
    return;
  }
  for (size_t i = 0; i < n; i++)
    h[i] = h[i] > 0.0f ? h[i] : 0.0f;
}

/* y (rows × n, stride ldy) = x (stride ldx) W + b in float: one FMA
 * chain per entry over the inner index (sattn_qk), the bias added
 * once; the same bytes whatever rows come together. */
static void
linear_f32 (const float *x, size_t ldx, size_t rows, const float *Wt,
            const float *b, size_t din, size_t n, float *y, size_t ldy)
{
  sattn_qk (x, ldx, Wt, n, rows, n, din, y, ldy);
  if (b != NULL)
    sattn_add_bias (y, ldy, rows, b, n);
}

/* sattn_layer_rows at precision=fast of a layer with float feed-forward
 * weights (m->w1f set): every step in float as
 * PyTorch float32 computes it (residuals float adds, the feed-forward
 * float products, the LayerNorms in float lanes). */
static void
layer_rows_f32 (const SattnModel *m, const float *x, size_t ldx, float *y,
                size_t ldy, size_t rows, float *scratch)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff, ld = (d + 15) / 16 * 16;
  const float eps = (float) m->cfg.norm_eps;
  float *h = scratch, *u = h + SATTN_LAYER_ROWS * dff;
  float *f = u + SATTN_LAYER_ROWS * ld;

  /* y = x + SA, in float. */
  sattn_add_rows (x, ldx, y, ldy, rows, d);
  if (!m->cfg.norm_first)
    /* y = norm1 (x + SA); then y = norm2 (y + FF (y)). */
    sattn_norm_rows_f32 (y, ldy, y, ldy, rows, d, m->n1w, m->n1b, eps);
  const float *in = y;
  size_t ldin = ldy;
  if (m->cfg.norm_first) {
    /* y = res + FF (norm2 (res)). */
    sattn_norm_rows_f32 (y, ldy, u, ld, rows, d, m->n2w, m->n2b, eps);
    in = u;
    ldin = ld;
  }
  linear_f32 (in, ldin, rows, m->w1f, m->b1f, d, dff, h, dff);
  activate_f (m, h, rows * dff);
  linear_f32 (h, dff, rows, m->w2f, m->b2f, dff, d, f, ld);
  sattn_add_rows (f, ld, y, ldy, rows, d);
  if (!m->cfg.norm_first)
    sattn_norm_rows_f32 (y, ldy, y, ldy, rows, d, m->n2w, m->n2b, eps);
}

void
sattn_layer_rows (const SattnModel *m, int fast, const float *x, size_t ldx,
                  float *y, size_t ldy, size_t rows, float *scratch,
                  uint8_t *part)
{
  if (fast && m->w1f != NULL && rows > 0) {
    layer_rows_f32 (m, x, ldx, y, ldy, rows, scratch);
    for (size_t i = 0; part != NULL && i < rows; i++)
      part[i] = SATTN_PART_UNKNOWN;
    return;
  }
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff, ld = dstride (d);
  const double eps = m->cfg.norm_eps;
  /* The scratch is aligned for doubles (see sattn_layer_scratch). */
  double *hd = (double *) (void *) scratch;
  double *u = hd + SATTN_LAYER_ROWS * dff;
  double *f = u + SATTN_LAYER_ROWS * ld;
  double *res = f + SATTN_LAYER_ROWS * ld;

  if (rows == 0)
    return;
  /* Residual around the attention, in double: res = x + SA. */
  for (size_t i = 0; i < rows; i++) {
    const float *restrict yi = y + i * ldy, *restrict xi = x + i * ldx;
    double *restrict ri = res + i * ld;
    for (size_t t = 0; t < d; t++)
      ri[t] = (double) xi[t] + (double) yi[t];
  }
  if (!m->cfg.norm_first) {
    /* u = norm1 (res); y = norm2 (u + FF (u)). */
    sattn_layer_norm_rows (NULL, 0, res, ld, y, ldy, u, ld, rows, d, m->n1w,
                           m->n1b, eps);
    feed_forward (m, u, ld, rows, hd, f);
    for (size_t i = 0; i < rows; i++) {
      const double *restrict ui = u + i * ld;
      double *restrict fi = f + i * ld;
      for (size_t t = 0; t < d; t++)
        fi[t] += ui[t];
    }
    sattn_layer_norm_rows (NULL, 0, f, ld, y, ldy, NULL, 0, rows, d, m->n2w,
                           m->n2b, eps);
  } else {
    /* y = res + FF (norm2 (res)). */
    sattn_layer_norm_rows (NULL, 0, res, ld, y, ldy, u, ld, rows, d, m->n2w,
                           m->n2b, eps);
    feed_forward (m, u, ld, rows, hd, f);
    for (size_t i = 0; i < rows; i++) {
      float *restrict yi = y + i * ldy;
      const double *restrict fi = f + i * ld, *restrict ri = res + i * ld;
      for (size_t t = 0; t < d; t++)
        yi[t] = (float) (ri[t] + fi[t]);
    }
  }
  for (size_t i = 0; part != NULL && i < rows; i++)
    part[i] = sattn_finite (y + i * ldy, d)
                  ? SATTN_PART_UNKNOWN
                  : (uint8_t) overflow_part (m, res + i * ld, u + i * ld,
                                             hd + i * dff, f + i * ld);
}
