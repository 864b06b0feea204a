/* Linear layers summed in double: y = b + x Wt with every entry one chain
 * over the inner index in order, from the bias (0 without), with double
 * weights.  One family of loops serves every such sum: the encoder
 * layer's feed-forward (double rows in, double rows out, core/nn/layer.c)
 * and the projections summed in double (float rows in, each entry
 * rounded to float once; see SattnModel for which).
 *
 * The inputs hold float values (float rows, or double rows of values
 * rounded to float, and weights copied from floats), so every product is
 * exact in double and FMA or not gives the same bytes: the AVX-512, AVX2
 * and portable loops agree, whatever the tiling. */
#include "internal.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define LIN_HAVE_X86 1
#include <immintrin.h>
#endif

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

/* The input row entry (r, t) as a double: from float or double rows. */
#define XAT(x, xf, i) ((xf) ? (double) ((const float *) (x))[i] \
                       : ((const double *) (x))[i])

/* Columns [j0, n) of rows of y = b + x Wt (Wt: din × n at row stride
 * ldw), one double row of 64 columns at a time; xf / yf: x / y are float
 * (y rounded once) rather than double. */
static void
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

#ifdef LIN_HAVE_X86
#define AVX2 __attribute__ ((target ("avx2,fma")))
#define AVX512 __attribute__ ((target ("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define INLINE static inline __attribute__ ((always_inline))
#define LIN_PF 16

/* R rows × 16 columns from column j (two vectors of 8 doubles per row: 2 R
 * independent chains).  A tile of 16 whole columns (full) loads and
 * stores whole vectors; the column tail masks them (masked loads cost
 * about 5 % of the loop).  Twelve rows per weight load: the weights
 * (d_in × n doubles, a 480-wide matrix's column strip 61 KB per tile)
 * come from L2, and fewer rows made the loop wait for them (12 rows:
 * 24 accumulators, two weight vectors and the broadcast in 27 of the 32
 * registers).  Each step prefetches the weight row LIN_PF rows ahead:
 * rows are d_out doubles apart (another page), where the hardware
 * prefetchers do not follow, and between pushes the matrix has left L2. */
AVX512 INLINE void
tile512 (const void *restrict x, const int xf, size_t ldx,
         const double *restrict Wt, size_t ldw, const double *restrict b,
         size_t din, size_t n, size_t j, void *restrict y, const int yf,
         size_t ldy, const int R, const int full)
{
  const size_t r0 = n - j, r1 = r0 > 8 ? r0 - 8 : 0;
  const __mmask8 m0 = full || r0 >= 8 ? 0xff : (__mmask8) ((1u << r0) - 1u);
  const __mmask8 m1 = full || r1 >= 8 ? 0xff : (__mmask8) ((1u << r1) - 1u);
  __m512d a0[12], a1[12];
  __m512d b0 = _mm512_setzero_pd (), b1 = _mm512_setzero_pd ();
  if (b != NULL) {
    b0 = full ? _mm512_loadu_pd (b + j) : _mm512_maskz_loadu_pd (m0, b + j);
    b1 = full ? _mm512_loadu_pd (b + j + 8)
        : _mm512_maskz_loadu_pd (m1, b + j + 8);
  }
  for (int r = 0; r < R; r++) {
    a0[r] = b0;
    a1[r] = b1;
  }
  for (size_t t = 0; t < din; t++) {
    const double *wr = Wt + t * ldw + j;
    _mm_prefetch ((const char *) (wr + LIN_PF * ldw), _MM_HINT_T0);
    _mm_prefetch ((const char *) (wr + LIN_PF * ldw + 8), _MM_HINT_T0);
    __m512d w0 = full ? _mm512_loadu_pd (wr) : _mm512_maskz_loadu_pd (m0, wr);
    __m512d w1 = full ? _mm512_loadu_pd (wr + 8)
        : _mm512_maskz_loadu_pd (m1, wr + 8);
    for (int r = 0; r < R; r++) {
      __m512d xv = _mm512_set1_pd (XAT (x, xf, r * ldx + t));
      a0[r] = _mm512_fmadd_pd (xv, w0, a0[r]);
      a1[r] = _mm512_fmadd_pd (xv, w1, a1[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    if (yf) {
      float *yr = (float *) y + r * ldy + j;
      _mm256_mask_storeu_ps (yr, m0, _mm512_cvtpd_ps (a0[r]));
      _mm256_mask_storeu_ps (yr + 8, m1, _mm512_cvtpd_ps (a1[r]));
    } else {
      double *yr = (double *) y + r * ldy + j;
      _mm512_mask_storeu_pd (yr, m0, a0[r]);
      _mm512_mask_storeu_pd (yr + 8, m1, a1[r]);
    }
  }
}

/* Rows [i, i + R) of every column while cond holds: whole tiles, then
 * the masked tail. */
#define LIN512_ROWS(R, cond, xf, yf)                                          \
  for (; i + (R) <= rows && (cond); i += (R)) {                             \
    size_t j = 0;                                                           \
    for (; j + 16 <= n; j += 16)                                            \
      tile512 (x + i * ldx, xf, ldx, Wt, ldw, b, din, n, j, y + i * ldy,    \
               yf, ldy, (R), 1);                                            \
    if (j < n)                                                              \
      tile512 (x + i * ldx, xf, ldx, Wt, ldw, b, din, n, j, y + i * ldy,    \
               yf, ldy, (R), 0);                                            \
  }

/* Blocks of 12 rows, but 16 rows left go as 8 + 8 (not 12 + 4). */
#define LIN512(name, xf, yf, XT, YT)                                          \
AVX512 static void                                                          \
name (const XT *x, size_t ldx, size_t rows, const double *Wt, size_t ldw,   \
      const double *b, size_t din, size_t n, YT *y, size_t ldy)             \
{                                                                           \
  size_t i = 0;                                                             \
  LIN512_ROWS (12, rows - i != 16, xf, yf)                                  \
  LIN512_ROWS (8, 1, xf, yf)                                                \
  LIN512_ROWS (4, 1, xf, yf)                                                \
  LIN512_ROWS (1, 1, xf, yf)                                                \
}

LIN512 (lin512_dd, 0, 0, double, double)
LIN512 (lin512_df, 0, 1, double, float)
LIN512 (lin512_ff, 1, 1, float, float)

/* R rows × 12 columns from column j (three vectors of 4 doubles per
 * row); the column tail by the portable loop (the same chains). */
AVX2 INLINE void
tile256 (const void *restrict x, const int xf, size_t ldx,
         const double *restrict Wt, size_t ldw, const double *restrict b,
         size_t din, size_t j, void *restrict y, const int yf, size_t ldy,
         const int R)
{
  __m256d a[4][3];
  for (int v = 0; v < 3; v++) {
    __m256d bv = b != NULL ? _mm256_loadu_pd (b + j + 4 * v)
        : _mm256_setzero_pd ();
    for (int r = 0; r < R; r++)
      a[r][v] = bv;
  }
  for (size_t t = 0; t < din; t++) {
    const double *wr = Wt + t * ldw + j;
    __m256d w[3];
    for (int v = 0; v < 3; v++)
      w[v] = _mm256_loadu_pd (wr + 4 * v);
    for (int r = 0; r < R; r++) {
      __m256d xv = _mm256_set1_pd (XAT (x, xf, r * ldx + t));
      for (int v = 0; v < 3; v++)
        a[r][v] = _mm256_fmadd_pd (xv, w[v], a[r][v]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 3; v++) {
      if (yf)
        _mm_storeu_ps ((float *) y + r * ldy + j + 4 * v,
                       _mm256_cvtpd_ps (a[r][v]));
      else
        _mm256_storeu_pd ((double *) y + r * ldy + j + 4 * v, a[r][v]);
    }
}

#define LIN256(name, xf, yf, XT, YT)                                          \
AVX2 static void                                                            \
name (const XT *x, size_t ldx, size_t rows, const double *Wt, size_t ldw,   \
      const double *b, size_t din, size_t n, YT *y, size_t ldy)             \
{                                                                           \
  const size_t jv = n / 12 * 12;                                            \
  size_t i = 0;                                                             \
  for (; i + 4 <= rows; i += 4)                                             \
    for (size_t j = 0; j < jv; j += 12)                                     \
      tile256 (x + i * ldx, xf, ldx, Wt, ldw, b, din, j, y + i * ldy, yf,   \
               ldy, 4);                                                     \
  for (; i < rows; i++)                                                     \
    for (size_t j = 0; j < jv; j += 12)                                     \
      tile256 (x + i * ldx, xf, ldx, Wt, ldw, b, din, j, y + i * ldy, yf,   \
               ldy, 1);                                                     \
  if (jv < n)                                                               \
    lin_portable (x, xf, ldx, rows, Wt, ldw, b, din, jv, n, y, yf, ldy);    \
}

LIN256 (lin256_dd, 0, 0, double, double)
LIN256 (lin256_df, 0, 1, double, float)
LIN256 (lin256_ff, 1, 1, float, float)

/* rows × din floats (row stride ldx) into doubles (row stride din). */
AVX512 static void
cvt512 (const float *x, size_t ldx, size_t rows, size_t din, double *xb)
{
  for (size_t i = 0; i < rows; i++)
    for (size_t t = 0; t < din; t += 8) {
      const __mmask8 m = din - t >= 8 ? 0xff
          : (__mmask8) ((1u << (din - t)) - 1u);
      _mm512_mask_storeu_pd (xb + i * din + t, m, _mm512_cvtps_pd (
          _mm256_maskz_loadu_ps (m, x + i * ldx + t)));
    }
}

AVX2 static void
cvt256 (const float *x, size_t ldx, size_t rows, size_t din, double *xb)
{
  for (size_t i = 0; i < rows; i++) {
    size_t t = 0;
    for (; t + 4 <= din; t += 4)
      _mm256_storeu_pd (xb + i * din + t,
                        _mm256_cvtps_pd (_mm_loadu_ps (x + i * ldx + t)));
    for (; t < din; t++)
      xb[i * din + t] = (double) x[i * ldx + t];
  }
}
#endif

/* The portable loops under the signatures of the vector ones. */
#define LINP(name, xf, yf, XT, YT)                                            \
static void                                                                 \
name (const XT *x, size_t ldx, size_t rows, const double *Wt, size_t ldw,   \
      const double *b, size_t din, size_t n, YT *y, size_t ldy)             \
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

/* The loops of one SIMD level: double rows into double (dd) or float (df)
 * rows, float rows into float rows (ff), float rows widened to double
 * (cvt, rows × din floats at row stride ldx into rows of din doubles). */
typedef struct {
  void (*dd) (const double *, size_t, size_t, const double *, size_t,
              const double *, size_t, size_t, double *, size_t);
  void (*df) (const double *, size_t, size_t, const double *, size_t,
              const double *, size_t, size_t, float *, size_t);
  void (*ff) (const float *, size_t, size_t, const double *, size_t,
              const double *, size_t, size_t, float *, size_t);
  void (*cvt) (const float *, size_t, size_t, size_t, double *);
} LinLoops;

/* Indexed by sattn_simd_level (): portable, AVX2, AVX-512. */
static const LinLoops lin_levels[] = {
  { linp_dd, linp_df, linp_ff, cvtp },
#ifdef LIN_HAVE_X86
  { lin256_dd, lin256_df, lin256_ff, cvt256 },
  { lin512_dd, lin512_df, lin512_ff, cvt512 },
#endif
};

/* The loops of the CPU's level (the best this file has at or below it),
 * looked up per call: sattn_simd_force may change the level. */
static const LinLoops *
lin_loops (void)
{
  const size_t top = sizeof lin_levels / sizeof lin_levels[0] - 1;
  const size_t lvl = (size_t) sattn_simd_level ();
  return &lin_levels[lvl < top ? lvl : top];
}

void
sattn_linear_d (const double *x, size_t ldx, size_t rows, const double *Wt,
                size_t ldw, const double *b, size_t din, size_t n, double *y,
                size_t ldy)
{
  if (rows == 0 || n == 0)
    return;
  lin_loops ()->dd (x, ldx, rows, Wt, ldw, b, din, n, y, ldy);
}

void
sattn_linear_f (const float *x, size_t ldx, size_t rows, const double *Wt,
                size_t ldw, const double *b, size_t din, size_t n, float *y,
                size_t ldy)
{
  if (rows == 0 || n == 0)
    return;
  const LinLoops *loops = lin_loops ();
  if (din == 0 || din > LIN_XBUF) {
    loops->ff (x, ldx, rows, Wt, ldw, b, din, n, y, ldy);
    return;
  }
  /* Rows converted LIN_XBUF doubles at a time; the columns in strips
   * whose weights stay in L2 across those rows (each strip converts the
   * rows again: a small cost next to din products per entry).  The
   * entries' chains do not depend on either. */
  double xb[LIN_XBUF];
  /* Whole row blocks of the loops where there is room (12, 8 or 4). */
  size_t step = LIN_XBUF / din;
  step = step >= 12 ? step / 12 * 12 : step >= 8 ? 8 : step >= 4 ? 4 : step;
  size_t strip = LIN_WSTRIP / (din * sizeof (double)) / 16 * 16;
  if (strip < 16)
    strip = 16;
  for (size_t c0 = 0; c0 < n; c0 += strip) {
    const size_t nc = n - c0 < strip ? n - c0 : strip;
    for (size_t i0 = 0; i0 < rows; i0 += step) {
      const size_t r = rows - i0 < step ? rows - i0 : step;
      loops->cvt (x + i0 * ldx, ldx, r, din, xb);
      loops->df (xb, din, r, Wt + c0, ldw, b != NULL ? b + c0 : NULL, din,
                 nc, y + i0 * ldy + c0, ldy);
    }
  }
}

/* The double copy of projection weights Wt (and its bias) of m, or NULL
 * when that projection sums in float. */
static const double *
double_weights (const SattnModel *m, const float *Wt, const double **bd)
{
  if (Wt == NULL)
    return NULL;
  if (Wt == m->wq) {
    *bd = m->bqd;
    return m->wqd;
  }
  if (Wt == m->wk) {
    *bd = m->bkd;
    return m->wkd;
  }
  if (Wt == m->wv) {
    *bd = m->bvd;
    return m->wvd;
  }
  if (Wt == m->wo) {
    *bd = m->bod;
    return m->wod;
  }
  return NULL;
}

void
sattn_project_cols_prec (const SattnModel *m, const float *Wt, const float *b,
                      const float *x, size_t n, size_t d_in, size_t d_out,
                      size_t c0, size_t c1, size_t ldx, float *y, size_t ldy)
{
  const double *bd = NULL, *wd = double_weights (m, Wt, &bd);
  if (wd == NULL) {
    sattn_project_cols (Wt, b, x, n, d_in, d_out, c0, c1, ldx, y, ldy);
    return;
  }
  if (n == 0 || c1 <= c0)
    return;
  sattn_linear_f (x, ldx, n, wd + c0, d_out, bd != NULL ? bd + c0 : NULL,
                  d_in, c1 - c0, y + c0, ldy);
}

void
sattn_project_prec (const SattnModel *m, const float *Wt, const float *b,
                 const float *x, size_t n, size_t d_in, size_t d_out,
                 size_t ldx, float *y, size_t ldy)
{
  const double *bd = NULL;
  if (double_weights (m, Wt, &bd) != NULL)
    sattn_project_cols_prec (m, Wt, b, x, n, d_in, d_out, 0, d_out, ldx, y,
                          ldy);
  else
    sattn_project (Wt, b, x, n, d_in, d_out, ldx, y, ldy);
}

int
sattn_project_is_double (const SattnModel *m, const float *Wt)
{
  const double *bd = NULL;
  return double_weights (m, Wt, &bd) != NULL;
}
