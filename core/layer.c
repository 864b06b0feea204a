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
  /* Four double arrays of SATTN_LAYER_ROWS rows (a double is two floats):
   * the hidden rows, the LayerNorm output that enters linear1, the
   * feed-forward output and the residual. */
  return 2 * SATTN_LAYER_ROWS * (m->cfg.d_ff + 3 * dstride (m->cfg.d_model));
}

/* ------------------------------------------------- double linear layer */

/* y (rows × dout, stride ldy) = b + x (rows × din, stride ldx) · Wt (din ×
 * dout), every entry one chain over t in order from the bias (0 without).
 * x and Wt hold float values, so every product is exact in double and
 * FMA or not gives the same bytes: every version below agrees. */
static void
lin_portable (const double *restrict x, size_t ldx, size_t rows,
              const double *restrict Wt, const double *restrict b,
              size_t din, size_t dout, double *restrict y, size_t ldy)
{
  for (size_t i = 0; i < rows; i++) {
    double *restrict yi = y + i * ldy;
    const double *restrict xi = x + i * ldx;
    for (size_t j = 0; j < dout; j++)
      yi[j] = b != NULL ? b[j] : 0.0;
    for (size_t t = 0; t < din; t++) {
      const double a = xi[t];
      const double *restrict wr = Wt + t * dout;
      for (size_t j = 0; j < dout; j++)
        yi[j] += a * wr[j];
    }
  }
}

#ifdef LAYER_HAVE_X86
#define AVX2 __attribute__ ((target ("avx2,fma")))
#define AVX512 __attribute__ ((target ("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define INLINE static inline __attribute__ ((always_inline))

/* R rows × 16 columns (two vectors of 8 doubles per row: 2 R independent
 * chains), column tails masked.  Eight rows per weight load: the weights
 * (d_model × d_ff doubles) come from L2, and fewer rows made the loop wait
 * for them. */
AVX512 INLINE void
tile512 (const double *restrict x, size_t ldx, const double *restrict Wt,
         const double *restrict b, size_t din, size_t dout, size_t j,
         double *restrict y, size_t ldy, const int R)
{
  const size_t r0 = dout - j, r1 = r0 > 8 ? r0 - 8 : 0;
  const __mmask8 m0 = r0 >= 8 ? 0xff : (__mmask8) ((1u << r0) - 1u);
  const __mmask8 m1 = r1 >= 8 ? 0xff : (__mmask8) ((1u << r1) - 1u);
  __m512d a0[8], a1[8];
  __m512d b0 = _mm512_setzero_pd (), b1 = _mm512_setzero_pd ();
  if (b != NULL) {
    b0 = _mm512_maskz_loadu_pd (m0, b + j);
    b1 = _mm512_maskz_loadu_pd (m1, b + j + 8);
  }
  for (int r = 0; r < R; r++) {
    a0[r] = b0;
    a1[r] = b1;
  }
  for (size_t t = 0; t < din; t++) {
    const double *wr = Wt + t * dout + j;
    __m512d w0 = _mm512_maskz_loadu_pd (m0, wr);
    __m512d w1 = _mm512_maskz_loadu_pd (m1, wr + 8);
    for (int r = 0; r < R; r++) {
      __m512d xv = _mm512_set1_pd (x[r * ldx + t]);
      a0[r] = _mm512_fmadd_pd (xv, w0, a0[r]);
      a1[r] = _mm512_fmadd_pd (xv, w1, a1[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    _mm512_mask_storeu_pd (y + r * ldy + j, m0, a0[r]);
    _mm512_mask_storeu_pd (y + r * ldy + j + 8, m1, a1[r]);
  }
}

AVX512 static void
lin_avx512 (const double *x, size_t ldx, size_t rows, const double *Wt,
            const double *b, size_t din, size_t dout, double *y, size_t ldy)
{
  size_t i = 0;
  for (; i + 8 <= rows; i += 8)
    for (size_t j = 0; j < dout; j += 16)
      tile512 (x + i * ldx, ldx, Wt, b, din, dout, j, y + i * ldy, ldy, 8);
  for (; i + 4 <= rows; i += 4)
    for (size_t j = 0; j < dout; j += 16)
      tile512 (x + i * ldx, ldx, Wt, b, din, dout, j, y + i * ldy, ldy, 4);
  for (; i < rows; i++)
    for (size_t j = 0; j < dout; j += 16)
      tile512 (x + i * ldx, ldx, Wt, b, din, dout, j, y + i * ldy, ldy, 1);
}

/* R rows × 12 columns (three vectors of 4 doubles per row), the column
 * tail by the portable loop (the same chains). */
AVX2 INLINE void
tile256 (const double *restrict x, size_t ldx, const double *restrict Wt,
         const double *restrict b, size_t din, size_t dout, size_t j,
         double *restrict y, size_t ldy, const int R)
{
  __m256d a[4][3];
  for (int v = 0; v < 3; v++) {
    __m256d bv = b != NULL ? _mm256_loadu_pd (b + j + 4 * v)
        : _mm256_setzero_pd ();
    for (int r = 0; r < R; r++)
      a[r][v] = bv;
  }
  for (size_t t = 0; t < din; t++) {
    const double *wr = Wt + t * dout + j;
    __m256d w[3];
    for (int v = 0; v < 3; v++)
      w[v] = _mm256_loadu_pd (wr + 4 * v);
    for (int r = 0; r < R; r++) {
      __m256d xv = _mm256_set1_pd (x[r * ldx + t]);
      for (int v = 0; v < 3; v++)
        a[r][v] = _mm256_fmadd_pd (xv, w[v], a[r][v]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 3; v++)
      _mm256_storeu_pd (y + r * ldy + j + 4 * v, a[r][v]);
}

/* Columns [j0, dout) of rows of lin_portable. */
static void
lin_cols (const double *restrict x, size_t ldx, size_t rows,
          const double *restrict Wt, const double *restrict b, size_t din,
          size_t dout, size_t j0, double *restrict y, size_t ldy)
{
  for (size_t i = 0; i < rows; i++) {
    double *restrict yi = y + i * ldy;
    const double *restrict xi = x + i * ldx;
    for (size_t j = j0; j < dout; j++)
      yi[j] = b != NULL ? b[j] : 0.0;
    for (size_t t = 0; t < din; t++)
      for (size_t j = j0; j < dout; j++)
        yi[j] += xi[t] * Wt[t * dout + j];
  }
}

AVX2 static void
lin_avx2 (const double *x, size_t ldx, size_t rows, const double *Wt,
          const double *b, size_t din, size_t dout, double *y, size_t ldy)
{
  const size_t jv = dout / 12 * 12;
  size_t i = 0;
  for (; i + 4 <= rows; i += 4)
    for (size_t j = 0; j < jv; j += 12)
      tile256 (x + i * ldx, ldx, Wt, b, din, dout, j, y + i * ldy, ldy, 4);
  for (; i < rows; i++)
    for (size_t j = 0; j < jv; j += 12)
      tile256 (x + i * ldx, ldx, Wt, b, din, dout, j, y + i * ldy, ldy, 1);
  if (jv < dout)
    lin_cols (x, ldx, rows, Wt, b, din, dout, jv, y, ldy);
}
#endif

/* Encoder layers always have linear1 / linear2 weights (Wt not NULL). */
static void
linear_d (const double *x, size_t ldx, size_t rows, const double *Wt,
          const double *b, size_t din, size_t dout, double *y, size_t ldy)
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

/* y = LayerNorm (x) * w + b over d values, read from xf (floats) or, when
 * xf is NULL, from xd (doubles); mean and variance by two passes (no
 * cancellation) in double, each output rounded to float once; yd (may be
 * NULL) gets the same values as doubles.  y may be xf. */
static void
layer_norm (const float *xf, const double *restrict xd, float *y,
            double *restrict yd, size_t d, const float *w, const float *b,
            double eps)
{
#define X(t) (xf != NULL ? (double) xf[t] : xd[t])
  double sum = 0.0;
  for (size_t t = 0; t < d; t++)
    sum += X (t);
  const double mean = sum / (double) d;
  double var = 0.0;
  for (size_t t = 0; t < d; t++) {
    double e = X (t) - mean;
    var += e * e;
  }
  const double inv = 1.0 / sqrt (var / (double) d + eps);
  for (size_t t = 0; t < d; t++) {
    double v = (X (t) - mean) * inv;
    if (w != NULL)
      v *= (double) w[t];
    if (b != NULL)
      v += (double) b[t];
    y[t] = (float) v;
    if (yd != NULL)
      yd[t] = (double) y[t];
  }
#undef X
}

void
sattn_layer_norm1 (const SattnModel *m, const float *x, size_t ldx,
                   float *y, size_t ldy, size_t rows)
{
  for (size_t i = 0; i < rows; i++)
    layer_norm (x + i * ldx, NULL, y + i * ldy, NULL, m->cfg.d_model, m->n1w,
                m->n1b, m->cfg.norm_eps);
}

/* ------------------------------------------------------ feed-forward */

/* h <- act (h) rounded to float (kept as double: linear2 reads doubles).
 * GELU's erf is the float one (a double erf per hidden unit would cost
 * more than the rest of the layer); its argument and the products around
 * it are double. */
static void
activate (const SattnModel *m, double *restrict h, size_t n)
{
  if (m->cfg.activation == SATTN_ACTIVATION_GELU) {
    for (size_t t = 0; t < n; t++) {
      double v = h[t];
      h[t] = (float) (0.5 * v * (1.0 + (double) erff ((float) (v *
                                                       M_SQRT1_2))));
    }
  } else {
    /* Rounded, then max (v, 0) in a loop of its own: it compiles to
     * maxpd, with no branch on the (random) signs of a hidden row. */
    for (size_t t = 0; t < n; t++)
      h[t] = (float) h[t];
    for (size_t t = 0; t < n; t++)
      h[t] = h[t] > 0.0 ? h[t] : 0.0;
  }
}

/* f (rows × d, stride ld) = linear2 (act (linear1 (u))) for rows of u
 * (stride ld); hd: rows × d_ff. */
static void
feed_forward (const SattnModel *m, const double *u, size_t ld, size_t rows,
              double *hd, double *f)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff;
  linear_d (u, ld, rows, m->w1, m->b1, d, dff, hd, dff);
  activate (m, hd, rows * dff);
  linear_d (hd, dff, rows, m->w2, m->b2, dff, d, f, ld);
}

void
sattn_layer_rows (const SattnModel *m, const float *x, size_t ldx, float *y,
                  size_t ldy, size_t rows, float *scratch)
{
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
    for (size_t i = 0; i < rows; i++)
      layer_norm (NULL, res + i * ld, y + i * ldy, u + i * ld, d, m->n1w,
                  m->n1b, eps);
    feed_forward (m, u, ld, rows, hd, f);
    for (size_t i = 0; i < rows; i++) {
      const double *restrict ui = u + i * ld;
      double *restrict fi = f + i * ld;
      for (size_t t = 0; t < d; t++)
        fi[t] += ui[t];
      layer_norm (NULL, fi, y + i * ldy, NULL, d, m->n2w, m->n2b, eps);
    }
  } else {
    /* y = res + FF (norm2 (res)). */
    for (size_t i = 0; i < rows; i++)
      layer_norm (NULL, res + i * ld, y + i * ldy, u + i * ld, d, m->n2w,
                  m->n2b, eps);
    feed_forward (m, u, ld, rows, hd, f);
    for (size_t i = 0; i < rows; i++) {
      float *restrict yi = y + i * ldy;
      const double *restrict fi = f + i * ld, *restrict ri = res + i * ld;
      for (size_t t = 0; t < d; t++)
        yi[t] = (float) (ri[t] + fi[t]);
    }
  }
}
