/* Linear layers summed in double: y = b + x Wt with every entry one chain
 * over the inner index in order, from the bias (0 without), with double
 * weights.  One family of loops serves every such sum: the encoder
 * layer's feed-forward (double rows in, double rows out, core/nn/encoder.c),
 * the projections summed in double (float rows in, each entry rounded to
 * float once; see SattnModel for which), and a whole model's embedding
 * (float rows in, double rows out) and head (model/net.c).
 *
 * The inputs hold float values (float rows, or double rows of values
 * rounded to float, and weights copied from floats), so every product is
 * exact in double and FMA or not gives the same bytes: the AVX-512, AVX2
 * and portable loops agree, whatever the tiling.  (A whole model's head
 * reads the pooled row, a mean in double: there the fused and unfused
 * loops may differ in a logit's last double bit.)  The loops are the
 * kernel table's (linear_dd, linear_df, linear_ff, widen: the
 * kernels-*.c files); this file cuts the work into the blocks they
 * take.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "cpu/cpu.h"

#include <string.h>

/* Float rows are converted to double once, LIN_XBUF doubles at a time,
 * on the stack (48 KiB: no allocation on the push path; pool workers
 * have 256 KiB of stack).  Wider rows are read as floats by the loops. */
#define LIN_XBUF 6144
/* Bytes of double weights per column strip of sattn_linear_f: a strip
 * is read once per LIN_XBUF doubles of rows, from L2 when it fits, and
 * each strip converts the rows again (a 480-wide matrix: 4 strips of 128
 * columns; 256 KiB strips converted them 8 times, 1 MiB strips no longer
 * stayed in L2). */
#define LIN_WSTRIP (512u << 10)

/* Rows of din values converted per block, 0 < din <= LIN_XBUF: whole
 * row blocks of the loops where there is room (12, 8 or 4). */
static size_t
row_step (size_t din)
{
  size_t step = LIN_XBUF / din;
  return step >= 12 ? step / 12 * 12 : step >= 8 ? 8 : step >= 4 ? 4 : step;
}

void
sattn_linear_d (const double *x, size_t ldx, size_t rows, const double *Wt,
                size_t ldw, const double *b, size_t din, size_t n, double *y,
                size_t ldy)
{
  if (rows == 0 || n == 0)
    return;
  sattn_kernels ()->linear_dd (x, ldx, rows, Wt, ldw, b, din, n, y, ldy);
}

void
sattn_linear_f (const float *x, size_t ldx, size_t rows, const double *Wt,
                size_t ldw, const double *b, size_t din, size_t n, float *y,
                size_t ldy)
{
  if (rows == 0 || n == 0)
    return;
  const SattnKernels *k = sattn_kernels ();
  if (din == 0 || din > LIN_XBUF) {
    k->linear_ff (x, ldx, rows, Wt, ldw, b, din, n, y, ldy);
    return;
  }
  /* Rows converted LIN_XBUF doubles at a time; the columns in strips
   * whose weights stay in L2 across those rows (each strip converts the
   * rows again: a small cost next to din products per entry).  The
   * entries' chains do not depend on either. */
  double xb[LIN_XBUF];
  const size_t step = row_step (din);
  size_t strip = LIN_WSTRIP / (din * sizeof (double)) / 16 * 16;
  if (strip < 16)
    strip = 16;
  for (size_t c0 = 0; c0 < n; c0 += strip) {
    const size_t nc = n - c0 < strip ? n - c0 : strip;
    for (size_t i0 = 0; i0 < rows; i0 += step) {
      const size_t r = rows - i0 < step ? rows - i0 : step;
      k->widen (x + i0 * ldx, ldx, r, din, xb);
      k->linear_df (xb, din, r, Wt + c0, ldw, b != NULL ? b + c0 : NULL, din,
                    nc, y + i0 * ldy + c0, ldy);
    }
  }
}

void
sattn_linear_fd (const float *x, size_t ldx, size_t rows, const double *Wt,
                 size_t ldw, const double *b, size_t din, size_t n, double *y,
                 size_t ldy)
{
  if (rows == 0 || n == 0)
    return;
  const SattnKernels *k = sattn_kernels ();
  double xb[LIN_XBUF];
  if (din > 0 && din <= LIN_XBUF) {
    const size_t step = row_step (din);
    for (size_t i0 = 0; i0 < rows; i0 += step) {
      const size_t r = rows - i0 < step ? rows - i0 : step;
      k->widen (x + i0 * ldx, ldx, r, din, xb);
      k->linear_dd (xb, din, r, Wt, ldw, b, din, n, y + i0 * ldy, ldy);
    }
    return;
  }
  if (din == 0) {
    k->linear_dd (xb, 0, rows, Wt, ldw, b, 0, n, y, ldy);
    return;
  }
  /* Rows wider than the buffer: one row at a time, its inner index in
   * pieces of LIN_XBUF, each piece's chain continued from the sums so far
   * (the bias of the next piece; two buffers of LIN_COLS columns, taken in
   * turn): the same chain per entry as one pass. */
  enum { LIN_COLS = 256 };
  double acc[2][LIN_COLS];
  for (size_t i = 0; i < rows; i++) {
    for (size_t c0 = 0; c0 < n; c0 += LIN_COLS) {
      const size_t nc = n - c0 < LIN_COLS ? n - c0 : LIN_COLS;
      int cur = 0;
      for (size_t t0 = 0; t0 < din; t0 += LIN_XBUF) {
        const size_t dc = din - t0 < LIN_XBUF ? din - t0 : LIN_XBUF;
        const double *bias = t0 == 0 ? (b != NULL ? b + c0 : NULL) : acc[cur];
        k->widen (x + i * ldx + t0, ldx, 1, dc, xb);
        k->linear_dd (xb, dc, 1, Wt + t0 * ldw + c0, ldw, bias, dc, nc,
                      acc[1 - cur], nc);
        cur = 1 - cur;
      }
      memcpy (y + i * ldy + c0, acc[cur], nc * sizeof (double));
    }
  }
}
