/* The per-row parts of an encoder layer (PyTorch nn.TransformerEncoderLayer)
 * around the attention: residual, LayerNorm, feed-forward.  Each row is
 * computed on its own with the same loops whatever block it falls in, so
 * the bytes do not depend on how rows are handed to threads. */
#include "internal.h"

#include <math.h>
#include <string.h>

size_t
sattn_layer_scratch (const SattnModel *m)
{
  if (!m->cfg.encoder)
    return 0;
  return SATTN_LAYER_ROWS * (m->cfg.d_ff + m->cfg.d_model);
}

/* y = LayerNorm (x) * w + b over d floats; mean and variance in double
 * (two passes: no cancellation).  x and y may be the same. */
static void
layer_norm (const float *restrict x, float *y, size_t d, const float *w,
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
    float v = (float) ((x[t] - mean) * inv);
    if (w != NULL)
      v *= w[t];
    if (b != NULL)
      v += b[t];
    y[t] = v;
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

static void
activate (const SattnModel *m, float *restrict h, size_t n)
{
  if (m->cfg.activation == SATTN_ACTIVATION_GELU) {
    for (size_t t = 0; t < n; t++)
      h[t] = 0.5f * h[t] * (1.0f + erff (h[t] * (float) M_SQRT1_2));
  } else {
    for (size_t t = 0; t < n; t++)
      h[t] = h[t] > 0.0f ? h[t] : 0.0f;
  }
}

/* f (rows × d, stride d) = linear2 (act (linear1 (u))) for rows of u
 * (stride ldu); hbuf: rows × d_ff. */
static void
feed_forward (const SattnModel *m, const float *u, size_t ldu, size_t rows,
              float *hbuf, float *f)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff;
  /* The register-tiled loop, never BLAS: the same sums for every block. */
  sattn_project_cols (m->w1, m->b1, u, rows, d, dff, 0, dff, ldu, hbuf, dff);
  activate (m, hbuf, rows * dff);
  sattn_project_cols (m->w2, m->b2, hbuf, rows, dff, d, 0, d, dff, f, d);
}

void
sattn_layer_rows (const SattnModel *m, const float *x, size_t ldx, float *y,
                  size_t ldy, size_t rows, float *scratch)
{
  const size_t d = m->cfg.d_model, dff = m->cfg.d_ff;
  const double eps = m->cfg.norm_eps;
  float *hbuf = scratch, *f = scratch + SATTN_LAYER_ROWS * dff;

  if (rows == 0)
    return;
  /* Residual around the attention: y = x + SA. */
  for (size_t i = 0; i < rows; i++) {
    float *restrict yi = y + i * ldy;
    const float *restrict xi = x + i * ldx;
    for (size_t t = 0; t < d; t++)
      yi[t] += xi[t];
  }
  if (!m->cfg.norm_first) {
    for (size_t i = 0; i < rows; i++)
      layer_norm (y + i * ldy, y + i * ldy, d, m->n1w, m->n1b, eps);
    feed_forward (m, y, ldy, rows, hbuf, f);
    for (size_t i = 0; i < rows; i++) {
      float *restrict yi = y + i * ldy;
      const float *restrict fi = f + i * d;
      for (size_t t = 0; t < d; t++)
        yi[t] += fi[t];
      layer_norm (yi, yi, d, m->n2w, m->n2b, eps);
    }
  } else {
    for (size_t i = 0; i < rows; i++)
      layer_norm (y + i * ldy, f + i * d, d, m->n2w, m->n2b, eps);
    feed_forward (m, f, d, rows, hbuf, f);
    for (size_t i = 0; i < rows; i++) {
      float *restrict yi = y + i * ldy;
      const float *restrict fi = f + i * d;
      for (size_t t = 0; t < d; t++)
        yi[t] += fi[t];
    }
  }
}
