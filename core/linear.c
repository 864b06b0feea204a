/* Projections of encoder layers summed in double: columns [c0, c1) of
 * y = x Wt + b with every entry one chain over the inner index from the
 * bias, rounded to float once.  Float products are exact in double, so
 * FMA or not gives the same bytes: the AVX-512, AVX2 and portable loops
 * agree.  Attention-only models keep the float loop of sattn_qk (see
 * sattn_project_prec in internal.h for why). */
#include "internal.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define LIN_HAVE_X86 1
#include <immintrin.h>
#endif

/* Rows of x times columns [0, n) of Wt (row stride ldw), bias b (NULL: 0)
 * into y, 64 columns at a time through a double row. */
static void
lin_portable (const float *restrict x, size_t ldx, size_t rows,
              const float *restrict Wt, size_t ldw, const float *restrict b,
              size_t din, size_t n, float *restrict y, size_t ldy)
{
  double acc[64];
  for (size_t i = 0; i < rows; i++) {
    const float *restrict xi = x + i * ldx;
    for (size_t j0 = 0; j0 < n; j0 += 64) {
      const size_t nb = n - j0 < 64 ? n - j0 : 64;
      for (size_t j = 0; j < nb; j++)
        acc[j] = b != NULL ? (double) b[j0 + j] : 0.0;
      for (size_t t = 0; t < din; t++) {
        const double a = xi[t];
        const float *restrict wr = Wt + t * ldw + j0;
        for (size_t j = 0; j < nb; j++)
          acc[j] += a * (double) wr[j];
      }
      for (size_t j = 0; j < nb; j++)
        y[i * ldy + j0 + j] = (float) acc[j];
    }
  }
}

#ifdef LIN_HAVE_X86
#define AVX2 __attribute__ ((target ("avx2,fma")))
#define AVX512 __attribute__ ((target ("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define INLINE static inline __attribute__ ((always_inline))

/* R rows × 16 columns (two vectors of 8 doubles per row), masked column
 * tail. */
AVX512 INLINE void
tile512 (const float *restrict x, size_t ldx, const float *restrict Wt,
         size_t ldw, const float *restrict b, size_t din, size_t n, size_t j,
         float *restrict y, size_t ldy, const int R)
{
  const size_t r0 = n - j;
  const __mmask16 m = r0 >= 16 ? 0xffff : (__mmask16) ((1u << r0) - 1u);
  __m512d a0[8], a1[8];
  __m512d b0 = _mm512_setzero_pd (), b1 = _mm512_setzero_pd ();
  if (b != NULL) {
    __m512 bb = _mm512_maskz_loadu_ps (m, b + j);
    b0 = _mm512_cvtps_pd (_mm512_castps512_ps256 (bb));
    b1 = _mm512_cvtps_pd (_mm512_extractf32x8_ps (bb, 1));
  }
  for (int r = 0; r < R; r++) {
    a0[r] = b0;
    a1[r] = b1;
  }
  for (size_t t = 0; t < din; t++) {
    __m512 w = _mm512_maskz_loadu_ps (m, Wt + t * ldw + j);
    __m512d w0 = _mm512_cvtps_pd (_mm512_castps512_ps256 (w));
    __m512d w1 = _mm512_cvtps_pd (_mm512_extractf32x8_ps (w, 1));
    for (int r = 0; r < R; r++) {
      __m512d xv = _mm512_set1_pd ((double) x[r * ldx + t]);
      a0[r] = _mm512_fmadd_pd (xv, w0, a0[r]);
      a1[r] = _mm512_fmadd_pd (xv, w1, a1[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    __m256 lo = _mm512_cvtpd_ps (a0[r]), hi = _mm512_cvtpd_ps (a1[r]);
    _mm512_mask_storeu_ps (y + r * ldy + j, m,
        _mm512_insertf32x8 (_mm512_castps256_ps512 (lo), hi, 1));
  }
}

AVX512 static void
lin_avx512 (const float *x, size_t ldx, size_t rows, const float *Wt,
            size_t ldw, const float *b, size_t din, size_t n, float *y,
            size_t ldy)
{
  size_t i = 0;
  for (; i + 8 <= rows; i += 8)
    for (size_t j = 0; j < n; j += 16)
      tile512 (x + i * ldx, ldx, Wt, ldw, b, din, n, j, y + i * ldy, ldy, 8);
  for (; i + 4 <= rows; i += 4)
    for (size_t j = 0; j < n; j += 16)
      tile512 (x + i * ldx, ldx, Wt, ldw, b, din, n, j, y + i * ldy, ldy, 4);
  for (; i < rows; i++)
    for (size_t j = 0; j < n; j += 16)
      tile512 (x + i * ldx, ldx, Wt, ldw, b, din, n, j, y + i * ldy, ldy, 1);
}

/* R rows × 8 columns (two vectors of 4 doubles per row); the column tail
 * by the portable loop (the same chains). */
AVX2 INLINE void
tile256 (const float *restrict x, size_t ldx, const float *restrict Wt,
         size_t ldw, const float *restrict b, size_t din, size_t j,
         float *restrict y, size_t ldy, const int R)
{
  __m256d a0[4], a1[4];
  __m256d b0 = _mm256_setzero_pd (), b1 = _mm256_setzero_pd ();
  if (b != NULL) {
    b0 = _mm256_cvtps_pd (_mm_loadu_ps (b + j));
    b1 = _mm256_cvtps_pd (_mm_loadu_ps (b + j + 4));
  }
  for (int r = 0; r < R; r++) {
    a0[r] = b0;
    a1[r] = b1;
  }
  for (size_t t = 0; t < din; t++) {
    const float *wr = Wt + t * ldw + j;
    __m256d w0 = _mm256_cvtps_pd (_mm_loadu_ps (wr));
    __m256d w1 = _mm256_cvtps_pd (_mm_loadu_ps (wr + 4));
    for (int r = 0; r < R; r++) {
      __m256d xv = _mm256_set1_pd ((double) x[r * ldx + t]);
      a0[r] = _mm256_fmadd_pd (xv, w0, a0[r]);
      a1[r] = _mm256_fmadd_pd (xv, w1, a1[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    __m128 lo = _mm256_cvtpd_ps (a0[r]), hi = _mm256_cvtpd_ps (a1[r]);
    _mm_storeu_ps (y + r * ldy + j, lo);
    _mm_storeu_ps (y + r * ldy + j + 4, hi);
  }
}

AVX2 static void
lin_avx2 (const float *x, size_t ldx, size_t rows, const float *Wt,
          size_t ldw, const float *b, size_t din, size_t n, float *y,
          size_t ldy)
{
  const size_t jv = n / 8 * 8;
  size_t i = 0;
  for (; i + 4 <= rows; i += 4)
    for (size_t j = 0; j < jv; j += 8)
      tile256 (x + i * ldx, ldx, Wt, ldw, b, din, j, y + i * ldy, ldy, 4);
  for (; i < rows; i++)
    for (size_t j = 0; j < jv; j += 8)
      tile256 (x + i * ldx, ldx, Wt, ldw, b, din, j, y + i * ldy, ldy, 1);
  if (jv < n)
    lin_portable (x, ldx, rows, Wt + jv, ldw, b != NULL ? b + jv : NULL, din,
                  n - jv, y + jv, ldy);
}
#endif

void
sattn_project_cols_prec (const float *Wt, const float *b, const float *x,
                         size_t n, size_t d_in, size_t d_out, size_t c0,
                         size_t c1, size_t ldx, float *y, size_t ldy)
{
  if (Wt == NULL) {
    /* Identity: a copy (plus the bias), nothing to sum. */
    sattn_project_cols (Wt, b, x, n, d_in, d_out, c0, c1, ldx, y, ldy);
    return;
  }
  if (n == 0 || c1 <= c0)
    return;
  const float *bc = b != NULL ? b + c0 : NULL;
#ifdef LIN_HAVE_X86
  int lvl = sattn_simd_level ();
  if (lvl >= 2) {
    lin_avx512 (x, ldx, n, Wt + c0, d_out, bc, d_in, c1 - c0, y + c0, ldy);
    return;
  }
  if (lvl == 1) {
    lin_avx2 (x, ldx, n, Wt + c0, d_out, bc, d_in, c1 - c0, y + c0, ldy);
    return;
  }
#endif
  lin_portable (x, ldx, n, Wt + c0, d_out, bc, d_in, c1 - c0, y + c0, ldy);
}

void
sattn_project_prec (const SattnModel *m, const float *Wt, const float *b,
                    const float *x, size_t n, size_t d_in, size_t d_out,
                    size_t ldx, float *y, size_t ldy)
{
  if (m->cfg.encoder)
    sattn_project_cols_prec (Wt, b, x, n, d_in, d_out, 0, d_out, ldx, y,
                             ldy);
  else
    sattn_project (Wt, b, x, n, d_in, d_out, ldx, y, ldy);
}
