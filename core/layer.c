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
 * float32's. */
#include "internal.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define LAYER_HAVE_X86 1
#include <immintrin.h>
#endif

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
  /* Hidden rows in float (padded to a line) and in double, then two
   * double arrays (the feed-forward output and the residual), each of
   * SATTN_LAYER_ROWS rows; a double is two floats. */
  size_t h = (SATTN_LAYER_ROWS * m->cfg.d_ff + 15) / 16 * 16;
  return h + 2 * SATTN_LAYER_ROWS * m->cfg.d_ff
      + 2 * 2 * SATTN_LAYER_ROWS * dstride (m->cfg.d_model);
}

/* ------------------------------------------------- double linear layer */

/* y (rows × dout doubles, stride ldy) = b + x (rows × din floats, stride
 * ldx) · Wt (din × dout floats), every entry one chain over t in order
 * from the bias (0 without).  The products of floats are exact in double,
 * so every version below gives the same bytes. */
static void
lin_portable (const float *restrict x, size_t ldx, size_t rows,
              const float *restrict Wt, const float *restrict b, size_t din,
              size_t dout, double *restrict y, size_t ldy)
{
  for (size_t i = 0; i < rows; i++) {
    double *restrict yi = y + i * ldy;
    const float *restrict xi = x + i * ldx;
    for (size_t j = 0; j < dout; j++)
      yi[j] = b != NULL ? (double) b[j] : 0.0;
    for (size_t t = 0; t < din; t++) {
      const double a = xi[t];
      const float *restrict wr = Wt + t * dout;
      for (size_t j = 0; j < dout; j++)
        yi[j] += a * (double) wr[j];
    }
  }
}

#ifdef LAYER_HAVE_X86
/* Columns [j0, dout) of one row of lin_portable. */
static void
lin_cols (const float *restrict xi, const float *restrict Wt,
          const float *restrict b, size_t din, size_t dout, size_t j0,
          double *restrict yi)
{
  for (size_t j = j0; j < dout; j++)
    yi[j] = b != NULL ? (double) b[j] : 0.0;
  for (size_t t = 0; t < din; t++) {
    const double a = xi[t];
    const float *restrict wr = Wt + t * dout;
    for (size_t j = j0; j < dout; j++)
      yi[j] += a * (double) wr[j];
  }
}

#define AVX2 __attribute__ ((target ("avx2,fma")))
#define AVX512 __attribute__ ((target ("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

/* Four rows × 8 columns (two vectors of 4 doubles per row); column tail
 * and row tail by the portable loop (the same chains). */
AVX2 static void
lin_avx2 (const float *restrict x, size_t ldx, size_t rows,
          const float *restrict Wt, const float *restrict b, size_t din,
          size_t dout, double *restrict y, size_t ldy)
{
  size_t i = 0;
  const size_t jv = dout / 8 * 8;
  for (; i + 4 <= rows; i += 4) {
    const float *x0 = x + i * ldx;
    for (size_t j = 0; j < jv; j += 8) {
      __m256d a[4][2];
      __m256d b0 = _mm256_setzero_pd (), b1 = _mm256_setzero_pd ();
      if (b != NULL) {
        __m256 bb = _mm256_loadu_ps (b + j);
        b0 = _mm256_cvtps_pd (_mm256_castps256_ps128 (bb));
        b1 = _mm256_cvtps_pd (_mm256_extractf128_ps (bb, 1));
      }
      for (int r = 0; r < 4; r++) {
        a[r][0] = b0;
        a[r][1] = b1;
      }
      for (size_t t = 0; t < din; t++) {
        __m256 w = _mm256_loadu_ps (Wt + t * dout + j);
        __m256d w0 = _mm256_cvtps_pd (_mm256_castps256_ps128 (w));
        __m256d w1 = _mm256_cvtps_pd (_mm256_extractf128_ps (w, 1));
        for (int r = 0; r < 4; r++) {
          __m256d xv = _mm256_set1_pd ((double) x0[r * ldx + t]);
          a[r][0] = _mm256_fmadd_pd (xv, w0, a[r][0]);
          a[r][1] = _mm256_fmadd_pd (xv, w1, a[r][1]);
        }
      }
      for (int r = 0; r < 4; r++) {
        _mm256_storeu_pd (y + (i + r) * ldy + j, a[r][0]);
        _mm256_storeu_pd (y + (i + r) * ldy + j + 4, a[r][1]);
      }
    }
    if (jv < dout)
      for (int r = 0; r < 4; r++)
        lin_cols (x0 + r * ldx, Wt, b, din, dout, jv, y + (i + r) * ldy);
  }
  if (i < rows)
    lin_portable (x + i * ldx, ldx, rows - i, Wt, b, din, dout, y + i * ldy,
                  ldy);
}

/* Four rows × 16 columns (two vectors of 8 doubles per row), masked
 * column tails. */
AVX512 static void
lin_avx512 (const float *restrict x, size_t ldx, size_t rows,
            const float *restrict Wt, const float *restrict b, size_t din,
            size_t dout, double *restrict y, size_t ldy)
{
  size_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float *x0 = x + i * ldx;
    for (size_t j = 0; j < dout; j += 16) {
      const size_t rem = dout - j;
      const __mmask16 m = rem >= 16 ? (__mmask16) 0xffff
          : (__mmask16) ((1u << rem) - 1u);
      const __mmask8 m0 = (__mmask8) (m & 0xff), m1 = (__mmask8) (m >> 8);
      __m512d a[4][2];
      __m512d b0 = _mm512_setzero_pd (), b1 = _mm512_setzero_pd ();
      if (b != NULL) {
        __m512 bb = _mm512_maskz_loadu_ps (m, b + j);
        b0 = _mm512_cvtps_pd (_mm512_castps512_ps256 (bb));
        b1 = _mm512_cvtps_pd (_mm512_extractf32x8_ps (bb, 1));
      }
      for (int r = 0; r < 4; r++) {
        a[r][0] = b0;
        a[r][1] = b1;
      }
      for (size_t t = 0; t < din; t++) {
        __m512 w = _mm512_maskz_loadu_ps (m, Wt + t * dout + j);
        __m512d w0 = _mm512_cvtps_pd (_mm512_castps512_ps256 (w));
        __m512d w1 = _mm512_cvtps_pd (_mm512_extractf32x8_ps (w, 1));
        for (int r = 0; r < 4; r++) {
          __m512d xv = _mm512_set1_pd ((double) x0[r * ldx + t]);
          a[r][0] = _mm512_fmadd_pd (xv, w0, a[r][0]);
          a[r][1] = _mm512_fmadd_pd (xv, w1, a[r][1]);
        }
      }
      for (int r = 0; r < 4; r++) {
        _mm512_mask_storeu_pd (y + (i + r) * ldy + j, m0, a[r][0]);
        _mm512_mask_storeu_pd (y + (i + r) * ldy + j + 8, m1, a[r][1]);
      }
    }
  }
  if (i < rows)
    lin_portable (x + i * ldx, ldx, rows - i, Wt, b, din, dout, y + i * ldy,
                  ldy);
}
#endif

/* Wt NULL is never passed: encoder layers always have linear1 / linear2
 * weights. */
static void
linear_d (const float *x, size_t ldx, size_t rows, const float *Wt,
          const float *b, size_t din, size_t dout, double *y, size_t ldy)
{
#ifdef LAYER_HAVE_X86
  int lvl = sattn_simd_level ();
  if (lvl >= 2) {
    lin_avx512 (x, ldx, rows, Wt, b, din, dout, y, ldy);
    return;
  }
  if (lvl == 1) {
    lin_avx2 (x, ldx, rows, Wt, b, din, dout, y, ldy);
    return;
  }
#endif
  lin_portable (x, ldx, rows, Wt, b, din, dout, y, ldy);
}

/* --------------------------------------------------------- LayerNorm */

/* y = LayerNorm (r) * w + b over d doubles, mean and variance by two
 * passes (no cancellation), each output rounded to float once. */
static void
layer_norm_d (const double *restrict r, float *restrict y, size_t d,
              const float *w, const float *b, double eps)
{
  double sum = 0.0;
  for (size_t t = 0; t < d; t++)
    sum += r[t];
  const double mean = sum / (double) d;
  double var = 0.0;
  for (size_t t = 0; t < d; t++) {
    double e = r[t] - mean;
    var += e * e;
  }
  const double inv = 1.0 / sqrt (var / (double) d + eps);
  for (size_t t = 0; t < d; t++) {
    double v = (r[t] - mean) * inv;
    if (w != NULL)
      v *= (double) w[t];
    if (b != NULL)
      v += (double) b[t];
    y[t] = (float) v;
  }
}

/* The same from float rows (x and y may be the same). */
static void
layer_norm (const float *x, float *y, size_t d, const float *w,
            const float *b, double eps)
{
  double sum = 0.0;
  for (size_t t = 0; t < d; t++)
    sum += x[t];
  const double mean = sum / (double) d;
  double var = 0.0;
  for (size_t t = 0; t < d; t++) {
    double e = x[t] - mean;
    var += e * e;
  }
  const double inv = 1.0 / sqrt (var / (double) d + eps);
  for (size_t t = 0; t < d; t++) {
    double v = (x[t] - mean) * inv;
    if (w != NULL)
      v *= (double) w[t];
    if (b != NULL)
      v += (double) b[t];
    y[t] = (float) v;
  }
}

void
sattn_layer_norm1 (const SattnModel *m, const float *x, size_t ldx,
                   float *y, size_t ldy, size_t rows)
{
  for (size_t i = 0; i < rows; i++)
    layer_norm (x + i * ldx, y + i * ldy, m->cfg.d_model, m->n1w, m->n1b,
                m->cfg.norm_eps);
}

/* ------------------------------------------------------ feed-forward */

/* h (n doubles) -> act (h) rounded to float once.  GELU's erf is the
 * float one (a double erf per hidden unit would cost more than the rest
 * of the layer); its argument and the products around it are double. */
static void
activate (const SattnModel *m, const double *restrict h, float *restrict o,
          size_t n)
{
  if (m->cfg.activation == SATTN_ACTIVATION_GELU) {
    for (size_t t = 0; t < n; t++) {
      double v = h[t];
      o[t] = (float) (0.5 * v * (1.0 + (double) erff ((float) (v *
                                                       M_SQRT1_2))));
    }
  } else {
    for (size_t t = 0; t < n; t++)
      o[t] = h[t] > 0.0 ? (float) h[t] : 0.0f;
  }
}

/* f (rows × d doubles, stride ldf) = linear2 (act (linear1 (u))) for rows
 * of u (stride ldu); hd: rows × d_ff doubles, hbuf: rows × d_ff floats. */
static void
feed_forward (const SattnModel *m, const float *u, size_t ldu, size_t rows,
              double *hd, float *hbuf, double *f, size_t ldf)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff;
  linear_d (u, ldu, rows, m->w1, m->b1, d, dff, hd, dff);
  activate (m, hd, hbuf, rows * dff);
  linear_d (hbuf, dff, rows, m->w2, m->b2, dff, d, f, ldf);
}

void
sattn_layer_rows (const SattnModel *m, const float *x, size_t ldx, float *y,
                  size_t ldy, size_t rows, float *scratch)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff, ld = dstride (d);
  const double eps = m->cfg.norm_eps;
  /* The scratch is line-aligned (see sattn_layer_scratch). */
  float *hbuf = scratch;
  double *hd = (double *) (scratch + (SATTN_LAYER_ROWS * dff + 15) / 16 * 16);
  double *f = hd + SATTN_LAYER_ROWS * dff;
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
    /* y = norm1 (res); y = norm2 (y + FF (y)). */
    for (size_t i = 0; i < rows; i++)
      layer_norm_d (res + i * ld, y + i * ldy, d, m->n1w, m->n1b, eps);
    feed_forward (m, y, ldy, rows, hd, hbuf, f, ld);
    for (size_t i = 0; i < rows; i++) {
      const float *restrict yi = y + i * ldy;
      double *restrict fi = f + i * ld;
      for (size_t t = 0; t < d; t++)
        fi[t] += (double) yi[t];
      layer_norm_d (fi, y + i * ldy, d, m->n2w, m->n2b, eps);
    }
  } else {
    /* y = res + FF (norm2 (res)), the norm's rows in y for the while. */
    for (size_t i = 0; i < rows; i++)
      layer_norm_d (res + i * ld, y + i * ldy, d, m->n2w, m->n2b, eps);
    feed_forward (m, y, ldy, rows, hd, hbuf, f, ld);
    for (size_t i = 0; i < rows; i++) {
      float *restrict yi = y + i * ldy;
      const double *restrict fi = f + i * ld, *restrict ri = res + i * ld;
      for (size_t t = 0; t < d; t++)
        yi[t] = (float) (ri[t] + fi[t]);
    }
  }
}
