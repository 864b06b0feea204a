/* Positions at absolute frame indices: RoPE's rotation of a frame's Q
 * and K rows, ALiBi's slopes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "nn/nn.h"

#include <math.h>

/* Press et al.: for H a power of two, slope_h = 2^(-8(h+1)/H); else the
 * slopes of the largest power of two P < H, then slopes 0, 2, 4, ... of
 * 2P until there are H. */
double
sattn_alibi_slope (size_t h, size_t heads)
{
  if (heads == 0 || h >= heads)
    return 0.0;
  size_t p = 1;
  while (p * 2 <= heads)
    p *= 2;
  if (h < p)
    return exp2 (-8.0 * (double) (h + 1) / (double) p);
  return exp2 (-8.0 * (double) (2 * (h - p) + 1) / (double) (2 * p));
}

int
sattn_model_rope (const SattnModel *m)
{
  return m->theta_hi != NULL;
}

/* x_a, x_b <- (x_a cos - x_b sin, x_b cos + x_a sin), angle = pos * theta
 * formed exactly: hi + lo with hi = fl (pos * theta_hi), lo its error
 * (fma) plus pos * theta_lo; sin / cos of hi are correctly reduced by the
 * C library, and |lo| < 2^-20 rad for pos < 2^53 lets cos (hi + lo) = cos hi
 * - lo sin hi to double precision.  The Q and K rows of one frame share
 * the angles: each sin / cos is computed once for both. */
void
sattn_rope_qk (const SattnModel *m, float *q, float *k, uint64_t pos)
{
  if (m->theta_hi == NULL)
    return;
  const size_t dh = m->cfg.d_head, half = dh / 2, H = m->cfg.heads;
  const int inter = m->cfg.positions == SATTN_POSITIONS_ROPE_INTERLEAVED;
  const double p = (double) pos;
  for (size_t j = 0; j < half; j++) {
    double hi = p * m->theta_hi[j];
    double lo = fma (p, m->theta_hi[j], -hi) + p * m->theta_lo[j];
    double sh = sin (hi), ch = cos (hi);
    double cs = ch - lo * sh, sn = sh + lo * ch;
    size_t ia = inter ? 2 * j : j, ib = inter ? 2 * j + 1 : j + half;
    float *const rows[2] = { q, k };
    for (size_t r = 0; r < 2; r++)
      for (size_t h = 0; h < H; h++) {
        float *xh = rows[r] + h * dh;
        double a = xh[ia], b = xh[ib];
        xh[ia] = (float) (a * cs - b * sn);
        xh[ib] = (float) (b * cs + a * sn);
      }
  }
}
