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
             const float *restrict v, size_t ldv, size_t dv,
             float *restrict O, size_t ldo)
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
#define XAT(x, xf, i) ((xf) ? (double) ((const float *) (x))[i] \
                       : ((const double *) (x))[i])


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

#endif
