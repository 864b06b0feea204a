/* Hot loops of the attention kernel, with an AVX2+FMA version chosen at
 * run time and a portable version used everywhere else.
 *
 *   sattn_qk:      S (m × nk) = Q (m × dh) · Kt (dh × nk)   (K transposed)
 *   sattn_pv:      O (m × dv) = P (m × nk) · V (nk × dv)
 *   sattn_exp_sum: y = exp (y * scale - mx), returns the sum (inputs <= mx)
 *   sattn_softmax_max: max of a row and whether it is all finite
 *
 * The vectorised exp is a Cephes-style range reduction (x = n ln2 + r,
 * |r| <= ln2/2) with a degree-6 minimax polynomial for e^r and 2^n applied
 * so that results in the subnormal range round once, like expf (scalef, or
 * in two halves with AVX2).
 * Its error against expf is tested (tests/kernel/test-exp.c).
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define SATTN_HAVE_X86 1
#include <immintrin.h>
#endif

static int g_isa = -1;   /* -1 unknown, 0 portable, 1 AVX2+FMA, 2 AVX-512 */

int
sattn_simd_level (void)
{
  int v = __atomic_load_n (&g_isa, __ATOMIC_RELAXED);
  if (v < 0) {
    v = 0;
#ifdef SATTN_HAVE_X86
    __builtin_cpu_init ();
    v = __builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma");
    if (v && __builtin_cpu_supports ("avx512f") &&
        __builtin_cpu_supports ("avx512dq") &&
        __builtin_cpu_supports ("avx512bw") &&
        __builtin_cpu_supports ("avx512vl"))
      v = 2;
#endif
    /* SATTN_SIMD=0 / 1 caps the level (portable / AVX2). */
    const char *env = getenv ("SATTN_SIMD");
    if (env != NULL && env[0] >= '0' && env[0] <= '2' && env[0] - '0' < v)
      v = env[0] - '0';
    __atomic_store_n (&g_isa, v, __ATOMIC_RELAXED);
  }
  return v;
}

void
sattn_simd_force (int level)
{
  __atomic_store_n (&g_isa, level, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ portable */

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

static void
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

static float
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
static float
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

/* Rows x[i * ldx], i < cnt, columns [0, w), into rows i of dst (stride
 * ldd) and their mirrors mir floats further; zeros where ok[i] == 0
 * (ok NULL: none). */
static void
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
static void
add_bias_portable (float *restrict y, size_t ldy, size_t n,
                   const float *restrict b, size_t k)
{
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < k; j++)
      y[i * ldy + j] += b[j];
}

/* The same transposed: dst[t * ldd + i] (and its mirror) = x[i * ldx + t]. */
static void
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

/* ---------------------------------------------------------------- AVX2 */

/* A float is finite unless its exponent field is all ones: adding 1 to
 * the field carries into bit 31 exactly then.  Integer OR, so the loop
 * vectorises without reassociating any float arithmetic. */
static int
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

#ifdef SATTN_HAVE_X86
#define AVX2 __attribute__ ((target ("avx2,fma")))

/* exp256_k: the exponentials of the k vectors x[0, k) (k a constant), in
 * place, each step applied to all k before the next (see exp512_k): the
 * same operations per element in the same order as for one vector. */
AVX2 static inline __attribute__ ((always_inline)) void
exp256_k (__m256 *x, int k)
{
  /* Inputs are <= 0 (x - max): no upper clamp.  Below -104 every result
   * rounds to 0 exactly (2^-150 e^r with r = -104 + 150 ln2 ~ -0.028 is
   * under half the smallest subnormal).  The clamp at -176 makes n =
   * -254, both factors 2^n1 and 2^n2 below exactly +0 and the result +0
   * without a product that underflows (a microcode assist per vector on
   * Intel cores): rows of widely spread scores, most entries far below,
   * take no assists for them.  Between -176 and -104 the products
   * underflow to 0, as the clamp at -104 made them do. */
  const __m256 lo = _mm256_set1_ps (-176.0f);
  /* n = round (x log2 e): adding 1.5 * 2^23 leaves no fraction bits, and
   * the low bits of that sum are n as an integer (0x4b400000 + n). */
  const __m256 magic = _mm256_set1_ps (12582912.0f);
  __m256 t[4], n[4], p[4];
  /* NaN stays NaN (vmaxps returns its second operand then). */
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    x[j] = _mm256_max_ps (lo, x[j]);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    t[j] = _mm256_fmadd_ps (x[j], _mm256_set1_ps (1.44269504088896341f),
                            magic);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    n[j] = _mm256_sub_ps (t[j], magic);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    x[j] = _mm256_fnmadd_ps (n[j], _mm256_set1_ps (0.693359375f), x[j]);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    x[j] = _mm256_fnmadd_ps (n[j], _mm256_set1_ps (-2.12194440e-4f), x[j]);
  /* e^r ~ 1 + r (1 + r P(r)), P of degree 4 minimax over |r| <= ln2/2
   * (relative error 3e-9, 0.05 ulp, before rounding), by Horner. */
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (_mm256_set1_ps (1.3814612757e-3f), x[j],
                            _mm256_set1_ps (8.3687100559e-3f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (4.1668388993e-2f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (1.6666521132e-1f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (4.9999994040e-1f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (1.0f));
#pragma GCC unroll 4
  for (int j = 0; j < k; j++)
    p[j] = _mm256_fmadd_ps (p[j], x[j], _mm256_set1_ps (1.0f));
  /* 2^n = 2^n1 · 2^n2 with n1 = n >> 1, each factor a normal float. */
  const __m256i bias = _mm256_set1_epi32 (127);
#pragma GCC unroll 4
  for (int j = 0; j < k; j++) {
    __m256i ni = _mm256_sub_epi32 (_mm256_castps_si256 (t[j]),
                                   _mm256_set1_epi32 (0x4b400000));
    __m256i n1 = _mm256_srai_epi32 (ni, 1);
    __m256i n2 = _mm256_sub_epi32 (ni, n1);
    __m256 f1 = _mm256_castsi256_ps (_mm256_slli_epi32 (
        _mm256_add_epi32 (n1, bias), 23));
    __m256 f2 = _mm256_castsi256_ps (_mm256_slli_epi32 (
        _mm256_add_epi32 (n2, bias), 23));
    x[j] = _mm256_mul_ps (_mm256_mul_ps (p[j], f1), f2);
  }
}

AVX2 static inline __m256
exp256 (__m256 x)
{
  exp256_k (&x, 1);
  return x;
}

/* The exp pass (see exp_sum_body_portable).  The row sum is accumulated
 * in double: it normalises the whole row; the entropy term in float.  The
 * tail goes through the vector code too, padded with -inf (exp = 0). */
AVX2 static inline __attribute__ ((always_inline)) double
exp_sum_body_avx2 (float *y, size_t n, float scale, float mx, double *ex,
                   float *xmin)
{
  const __m256 vmx = _mm256_set1_ps (mx), vsc = _mm256_set1_ps (scale);
  const __m256 ninf = _mm256_set1_ps (-INFINITY);
  const __m256 pinf = _mm256_set1_ps (INFINITY);
  __m256d acc0 = _mm256_setzero_pd (), acc1 = _mm256_setzero_pd ();
  __m256 exa = _mm256_setzero_ps (), mn = pinf;
  float tmp[8];
  /* The sum: float partials of four vectors (see exp_part_avx512). */
  for (size_t i0 = 0; i0 < n; i0 += 32) {
   size_t i1 = n - i0 < 32 ? n : i0 + 32;
   __m256 fs = _mm256_setzero_ps ();
   if (i1 - i0 == 32) {
    /* A whole chunk: the four vectors interleaved (see exp512_k), the
     * same operations per element and the same sum, 0 + e0 + ... + e3. */
    __m256 x[4], e[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      __m256 xs = _mm256_mul_ps (_mm256_loadu_ps (y + i0 + 8 * j), vsc);
      __asm__ ("" : "+x" (xs));
      x[j] = _mm256_sub_ps (xs, vmx);
      e[j] = x[j];
    }
    exp256_k (e, 4);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      _mm256_storeu_ps (y + i0 + 8 * j, e[j]);
      fs = _mm256_add_ps (fs, e[j]);
      if (ex != NULL) {
        __m256 live = _mm256_cmp_ps (x[j], ninf, _CMP_GT_OQ);
        exa = _mm256_add_ps (exa, _mm256_and_ps (live,
                                                 _mm256_mul_ps (x[j], e[j])));
        mn = _mm256_min_ps (mn, _mm256_blendv_ps (pinf, x[j], live));
      }
    }
    i1 = i0;                    /* nothing left for the loop below */
   }
   for (size_t i = i0; i < i1; i += 8) {
    size_t r = n - i < 8 ? n - i : 8;
    float *src = y + i;
    if (r < 8) {
      for (size_t l = 0; l < 8; l++)
        tmp[l] = l < r ? y[i + l] : -INFINITY;
      src = tmp;
    }
    /* Rounded before the subtraction (the compiler must not fuse them:
     * the max entry gives exactly 0). */
    __m256 xs = _mm256_mul_ps (_mm256_loadu_ps (src), vsc);
    __asm__ ("" : "+x" (xs));
    __m256 x = _mm256_sub_ps (xs, vmx);
    __m256 e = exp256 (x);
    _mm256_storeu_ps (src, e);
    fs = _mm256_add_ps (fs, e);
    if (ex != NULL) {
      __m256 live = _mm256_cmp_ps (x, ninf, _CMP_GT_OQ);
      exa = _mm256_add_ps (exa, _mm256_and_ps (live, _mm256_mul_ps (x, e)));
      mn = _mm256_min_ps (mn, _mm256_blendv_ps (pinf, x, live));
    }
    if (r < 8)
      memcpy (y + i, tmp, r * sizeof (float));
   }
   acc0 = _mm256_add_pd (acc0, _mm256_cvtps_pd (_mm256_castps256_ps128 (fs)));
   acc1 = _mm256_add_pd (acc1, _mm256_cvtps_pd (_mm256_extractf128_ps (fs, 1)));
  }
  double l1[4];
  _mm256_storeu_pd (l1, _mm256_add_pd (acc0, acc1));
  if (ex != NULL) {
    float lm[8], l2[8];
    _mm256_storeu_ps (l2, exa);
    _mm256_storeu_ps (lm, mn);
    float m = INFINITY;
    double sx = 0.0;
    for (int l = 0; l < 8; l++) {
      m = lm[l] < m ? lm[l] : m;
      sx += l2[l];
    }
    *ex = sx;
    *xmin = m;
  }
  return l1[0] + l1[1] + l1[2] + l1[3];
}

AVX2 static double
exp_sum_avx2 (float *y, size_t n, float scale, float mx)
{
  return exp_sum_body_avx2 (y, n, scale, mx, NULL, NULL);
}

AVX2 static double
exp_sum_stats_avx2 (float *y, size_t n, float scale, float mx, double *ex,
                    float *xmin)
{
  return exp_sum_body_avx2 (y, n, scale, mx, ex, xmin);
}

/* max_avx2 and max_avx512 (see max_portable): four independent max and
 * NaN chains over vectors of W floats (each link has the latency of four
 * vector instructions), then tail (the vectors left, one at a time;
 * returns the first entry not read), the chains combined, and finish
 * (the horizontal max and the detector's test, and what is left). */
#define MAX_CHAINS(name, attr, T, W, set1, loadu, vmax, fmadd, add, tail,  \
                   finish)                                                 \
  attr static float                                                        \
  name (const float *restrict s, size_t n, int *finite)                    \
  {                                                                        \
    const T zero = set1 (0.0f);                                            \
    T m0 = set1 (-INFINITY), m1 = m0, m2 = m0, m3 = m0;                    \
    T d0 = zero, d1 = zero, d2 = zero, d3 = zero;                          \
    size_t j = 0;                                                          \
    for (; j + 4 * (W) <= n; j += 4 * (W)) {                               \
      T v0 = loadu (s + j), v1 = loadu (s + j + (W));                      \
      T v2 = loadu (s + j + 2 * (W)), v3 = loadu (s + j + 3 * (W));        \
      m0 = vmax (m0, v0);                                                  \
      m1 = vmax (m1, v1);                                                  \
      m2 = vmax (m2, v2);                                                  \
      m3 = vmax (m3, v3);                                                  \
      d0 = fmadd (v0, zero, d0);                                           \
      d1 = fmadd (v1, zero, d1);                                           \
      d2 = fmadd (v2, zero, d2);                                           \
      d3 = fmadd (v3, zero, d3);                                           \
    }                                                                      \
    j = tail (s, n, j, &m0, &d0);                                          \
    m0 = vmax (vmax (m0, m1), vmax (m2, m3));                              \
    d0 = add (add (d0, d1), add (d2, d3));                                 \
    return finish (s, n, j, m0, d0, finite);                               \
  }

/* max_avx2's tail: whole vectors; the floats after them are left to
 * max_avx2_finish. */
AVX2 static inline __attribute__ ((always_inline)) size_t
max_avx2_tail (const float *restrict s, size_t n, size_t j, __m256 *m0,
               __m256 *d0)
{
  const __m256 zero = _mm256_setzero_ps ();
  for (; j + 8 <= n; j += 8) {
    __m256 v0 = _mm256_loadu_ps (s + j);
    *m0 = _mm256_max_ps (*m0, v0);
    *d0 = _mm256_fmadd_ps (v0, zero, *d0);
  }
  return j;
}

AVX2 static inline __attribute__ ((always_inline)) float
max_avx2_finish (const float *restrict s, size_t n, size_t j, __m256 m0,
                 __m256 d0, int *finite)
{
  float lm[8], ld[8];
  _mm256_storeu_ps (lm, m0);
  _mm256_storeu_ps (ld, d0);
  float m = -INFINITY, det = 0.0f;
  for (int l = 0; l < 8; l++) {
    m = lm[l] > m ? lm[l] : m;
    det += ld[l];
  }
  int fin;
  float t = max_portable (s + j, n - j, &fin);
  *finite = fin && det == det;
  return t > m ? t : m;
}

MAX_CHAINS (max_avx2, AVX2, __m256, 8, _mm256_set1_ps, _mm256_loadu_ps,
            _mm256_max_ps, _mm256_fmadd_ps, _mm256_add_ps, max_avx2_tail,
            max_avx2_finish)

/* Two query rows × 16 keys per step.  Which columns a row gets from the
 * vector tiles and which from the scalar loops depends on the row count
 * and on the columns asked for (a stream projects in 32-column blocks or
 * one head's columns at a time), so the scalar loops must give the same
 * bytes as the tiles: the same chain of fused multiply-adds from 0, by
 * fmaf.  Written as a += x * y they relied on the compiler's contraction,
 * and at -O3 GCC vectorises that loop as an in-order sum of separately
 * rounded products (vmulps, then vaddss), which breaks the identity
 * (tests/core/test-batch.c). */
AVX2 static void
qk_avx2 (const float *restrict q, size_t ldq, const float *restrict kt,
         size_t ldkt, size_t m, size_t nk, size_t dh, float *restrict S,
         size_t lds)
{
  size_t i = 0;
  for (; i + 4 <= m && nk >= 16; i += 4) {
    const float *q0 = q + i * ldq, *q1 = q0 + ldq, *q2 = q1 + ldq,
        *q3 = q2 + ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 b0 = _mm256_setzero_ps (), b1 = _mm256_setzero_ps ();
      __m256 c0 = _mm256_setzero_ps (), c1 = _mm256_setzero_ps ();
      __m256 d0 = _mm256_setzero_ps (), d1 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m256 k0 = _mm256_loadu_ps (kr), k1 = _mm256_loadu_ps (kr + 8);
        __m256 x = _mm256_broadcast_ss (q0 + t);
        a0 = _mm256_fmadd_ps (x, k0, a0);
        a1 = _mm256_fmadd_ps (x, k1, a1);
        x = _mm256_broadcast_ss (q1 + t);
        b0 = _mm256_fmadd_ps (x, k0, b0);
        b1 = _mm256_fmadd_ps (x, k1, b1);
        x = _mm256_broadcast_ss (q2 + t);
        c0 = _mm256_fmadd_ps (x, k0, c0);
        c1 = _mm256_fmadd_ps (x, k1, c1);
        x = _mm256_broadcast_ss (q3 + t);
        d0 = _mm256_fmadd_ps (x, k0, d0);
        d1 = _mm256_fmadd_ps (x, k1, d1);
      }
      _mm256_storeu_ps (s0 + j, a0);
      _mm256_storeu_ps (s0 + j + 8, a1);
      _mm256_storeu_ps (s0 + lds + j, b0);
      _mm256_storeu_ps (s0 + lds + j + 8, b1);
      _mm256_storeu_ps (s0 + 2 * lds + j, c0);
      _mm256_storeu_ps (s0 + 2 * lds + j + 8, c1);
      _mm256_storeu_ps (s0 + 3 * lds + j, d0);
      _mm256_storeu_ps (s0 + 3 * lds + j + 8, d1);
    }
    for (; j < nk; j++)
      for (size_t r = 0; r < 4; r++) {
        const float *qr = q0 + r * ldq;
        float a = 0.0f;
        for (size_t t = 0; t < dh; t++)
          a = fmaf (qr[t], kt[t * ldkt + j], a);
        s0[r * lds + j] = a;
      }
  }
  for (; i + 2 <= m; i += 2) {
    const float *q0 = q + i * ldq, *q1 = q0 + ldq;
    float *s0 = S + i * lds, *s1 = s0 + lds;
    size_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 b0 = _mm256_setzero_ps (), b1 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m256 k0 = _mm256_loadu_ps (kr), k1 = _mm256_loadu_ps (kr + 8);
        __m256 x0 = _mm256_broadcast_ss (q0 + t);
        __m256 x1 = _mm256_broadcast_ss (q1 + t);
        a0 = _mm256_fmadd_ps (x0, k0, a0);
        a1 = _mm256_fmadd_ps (x0, k1, a1);
        b0 = _mm256_fmadd_ps (x1, k0, b0);
        b1 = _mm256_fmadd_ps (x1, k1, b1);
      }
      _mm256_storeu_ps (s0 + j, a0);
      _mm256_storeu_ps (s0 + j + 8, a1);
      _mm256_storeu_ps (s1 + j, b0);
      _mm256_storeu_ps (s1 + j + 8, b1);
    }
    for (; j < nk; j++) {
      float a = 0.0f, b = 0.0f;
      for (size_t t = 0; t < dh; t++) {
        a = fmaf (q0[t], kt[t * ldkt + j], a);
        b = fmaf (q1[t], kt[t * ldkt + j], b);
      }
      s0[j] = a;
      s1[j] = b;
    }
  }
  if (i < m) {
    const float *q0 = q + i * ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    for (; j + 32 <= nk; j += 32) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 a2 = _mm256_setzero_ps (), a3 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m256 x0 = _mm256_broadcast_ss (q0 + t);
        a0 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr), a0);
        a1 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr + 8), a1);
        a2 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr + 16), a2);
        a3 = _mm256_fmadd_ps (x0, _mm256_loadu_ps (kr + 24), a3);
      }
      _mm256_storeu_ps (s0 + j, a0);
      _mm256_storeu_ps (s0 + j + 8, a1);
      _mm256_storeu_ps (s0 + j + 16, a2);
      _mm256_storeu_ps (s0 + j + 24, a3);
    }
    for (; j + 8 <= nk; j += 8) {
      __m256 a0 = _mm256_setzero_ps ();
      for (size_t t = 0; t < dh; t++)
        a0 = _mm256_fmadd_ps (_mm256_broadcast_ss (q0 + t),
                              _mm256_loadu_ps (kt + t * ldkt + j), a0);
      _mm256_storeu_ps (s0 + j, a0);
    }
    for (; j < nk; j++) {
      float a = 0.0f;
      for (size_t t = 0; t < dh; t++)
        a = fmaf (q0[t], kt[t * ldkt + j], a);
      s0[j] = a;
    }
  }
}

/* V rows of unusable keys are zero and every V row is finite, so zero
 * weights can be multiplied without a branch. */
AVX2 static void
pv_avx2 (const float *restrict P, size_t ldp, size_t m, size_t nk,
         const float *restrict v, size_t ldv, size_t dv, float *restrict O,
         size_t ldo)
{
  size_t i = 0;
  /* Four rows × 16 columns per step: eight independent FMA chains. */
  if (dv % 16 == 0)
    for (; i + 4 <= m; i += 4) {
      const float *p0 = P + i * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp,
          *p3 = p2 + ldp;
      for (size_t t = 0; t < dv; t += 16) {
        __m256 a00 = _mm256_setzero_ps (), a01 = _mm256_setzero_ps ();
        __m256 a10 = _mm256_setzero_ps (), a11 = _mm256_setzero_ps ();
        __m256 a20 = _mm256_setzero_ps (), a21 = _mm256_setzero_ps ();
        __m256 a30 = _mm256_setzero_ps (), a31 = _mm256_setzero_ps ();
        for (size_t j = 0; j < nk; j++) {
          const float *vj = v + j * ldv + t;
          __m256 v0 = _mm256_loadu_ps (vj), v1 = _mm256_loadu_ps (vj + 8);
          __m256 b = _mm256_broadcast_ss (p0 + j);
          a00 = _mm256_fmadd_ps (b, v0, a00);
          a01 = _mm256_fmadd_ps (b, v1, a01);
          b = _mm256_broadcast_ss (p1 + j);
          a10 = _mm256_fmadd_ps (b, v0, a10);
          a11 = _mm256_fmadd_ps (b, v1, a11);
          b = _mm256_broadcast_ss (p2 + j);
          a20 = _mm256_fmadd_ps (b, v0, a20);
          a21 = _mm256_fmadd_ps (b, v1, a21);
          b = _mm256_broadcast_ss (p3 + j);
          a30 = _mm256_fmadd_ps (b, v0, a30);
          a31 = _mm256_fmadd_ps (b, v1, a31);
        }
        float *o0 = O + i * ldo + t;
        _mm256_storeu_ps (o0, a00);
        _mm256_storeu_ps (o0 + 8, a01);
        _mm256_storeu_ps (o0 + ldo, a10);
        _mm256_storeu_ps (o0 + ldo + 8, a11);
        _mm256_storeu_ps (o0 + 2 * ldo, a20);
        _mm256_storeu_ps (o0 + 2 * ldo + 8, a21);
        _mm256_storeu_ps (o0 + 3 * ldo, a30);
        _mm256_storeu_ps (o0 + 3 * ldo + 8, a31);
      }
    }
  for (; i < m; i++) {
    const float *pi = P + i * ldp;
    float *oi = O + i * ldo;
    size_t t = 0;
    for (; t + 32 <= dv; t += 32) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      __m256 a2 = _mm256_setzero_ps (), a3 = _mm256_setzero_ps ();
      for (size_t j = 0; j < nk; j++) {
        __m256 p = _mm256_broadcast_ss (pi + j);
        const float *vj = v + j * ldv + t;
        a0 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj), a0);
        a1 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 8), a1);
        a2 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 16), a2);
        a3 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 24), a3);
      }
      _mm256_storeu_ps (oi + t, a0);
      _mm256_storeu_ps (oi + t + 8, a1);
      _mm256_storeu_ps (oi + t + 16, a2);
      _mm256_storeu_ps (oi + t + 24, a3);
    }
    for (; t + 16 <= dv; t += 16) {
      __m256 a0 = _mm256_setzero_ps (), a1 = _mm256_setzero_ps ();
      for (size_t j = 0; j < nk; j++) {
        __m256 p = _mm256_broadcast_ss (pi + j);
        const float *vj = v + j * ldv + t;
        a0 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj), a0);
        a1 = _mm256_fmadd_ps (p, _mm256_loadu_ps (vj + 8), a1);
      }
      _mm256_storeu_ps (oi + t, a0);
      _mm256_storeu_ps (oi + t + 8, a1);
    }
    for (; t + 8 <= dv; t += 8) {
      __m256 a0 = _mm256_setzero_ps ();
      for (size_t j = 0; j < nk; j++)
        a0 = _mm256_fmadd_ps (_mm256_broadcast_ss (pi + j),
                              _mm256_loadu_ps (v + j * ldv + t), a0);
      _mm256_storeu_ps (oi + t, a0);
    }
    if (t < dv)
      pv_portable (pi, ldp, 1, nk, v + t, ldv, dv - t, oi + t, ldo);
  }
}

/* Pass 1 of the masked softmax over s[0, n) (see sattn_softmax_scan). */
AVX2 static float
scan_avx2 (float *restrict s, size_t n, const uint8_t *restrict ok,
           float scale, size_t counts[4])
{
  const __m256 vs = _mm256_set1_ps (scale);
  const __m256 ninf = _mm256_set1_ps (-INFINITY);
  const __m256 pinf = _mm256_set1_ps (INFINITY);
  const __m256 qnan = _mm256_set1_ps (NAN);
  const __m256i zero = _mm256_setzero_si256 ();
  __m256 mx = ninf;
  size_t n_valid = 0, n_nan = 0, n_pinf = 0, n_ninf = 0;
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps (_mm256_loadu_ps (s + j), vs);
    __m256 okm;
    if (ok != NULL) {
      __m128i b = _mm_loadl_epi64 ((const __m128i *) (ok + j));
      __m256i w = _mm256_cvtepu8_epi32 (b);
      okm = _mm256_castsi256_ps (_mm256_xor_si256 (_mm256_cmpeq_epi32 (w, zero),
                                                   _mm256_set1_epi32 (-1)));
    } else {
      okm = _mm256_castsi256_ps (_mm256_set1_epi32 (-1));
    }
    __m256 nanm = _mm256_cmp_ps (v, v, _CMP_UNORD_Q);
    __m256 valid = _mm256_andnot_ps (nanm, okm);
    __m256 out = _mm256_blendv_ps (ninf, v, valid);
    out = _mm256_blendv_ps (out, qnan, _mm256_and_ps (okm, nanm));
    _mm256_storeu_ps (s + j, out);
    mx = _mm256_max_ps (mx, _mm256_blendv_ps (ninf, v, valid));
    int mv = _mm256_movemask_ps (valid);
    n_valid += (size_t) __builtin_popcount (mv);
    /* NaN and +-inf scores are rare: |v| == inf or a NaN lane sends the
     * vector to the counts by kind (see scan_avx512). */
    __m256 inf = _mm256_cmp_ps (_mm256_andnot_ps (_mm256_set1_ps (-0.0f), v),
                                pinf, _CMP_EQ_OQ);
    if (__builtin_expect (_mm256_movemask_ps (_mm256_or_ps (nanm, inf)) != 0,
                          0)) {
      n_nan += (size_t) __builtin_popcount (_mm256_movemask_ps (
              _mm256_and_ps (okm, nanm)));
      n_pinf += (size_t) __builtin_popcount (_mm256_movemask_ps (
              _mm256_and_ps (valid, _mm256_cmp_ps (v, pinf, _CMP_EQ_OQ))));
      n_ninf += (size_t) __builtin_popcount (_mm256_movemask_ps (
              _mm256_and_ps (valid, _mm256_cmp_ps (v, ninf, _CMP_EQ_OQ))));
    }
  }
  counts[0] += n_valid;
  counts[1] += n_nan;
  counts[2] += n_pinf;
  counts[3] += n_ninf;
  float lanes[8];
  _mm256_storeu_ps (lanes, mx);
  float m = -INFINITY;
  for (int l = 0; l < 8; l++)
    m = lanes[l] > m ? lanes[l] : m;
  if (j < n) {
    float t = scan_portable (s + j, n - j, ok ? ok + j : NULL, scale, counts);
    m = t > m ? t : m;
  }
  return m;
}

/* Whether n floats are all finite: acc = x * 0 + acc stays 0 while every
 * x is finite (subnormals included) and turns NaN at the first NaN or
 * +-inf (inf * 0 is NaN): one FMA per vector, four chains. */
AVX2 static int
finite_avx2 (const float *restrict x, size_t n)
{
  const __m256 zero = _mm256_setzero_ps ();
  __m256 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i), zero, a0);
    a1 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i + 8), zero, a1);
    a2 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i + 16), zero, a2);
    a3 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i + 24), zero, a3);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps (_mm256_loadu_ps (x + i), zero, a0);
  __m256 a = _mm256_add_ps (_mm256_add_ps (a0, a1), _mm256_add_ps (a2, a3));
  return _mm256_movemask_ps (_mm256_cmp_ps (a, a, _CMP_UNORD_Q)) == 0 &&
      finite_portable (x + i, n - i);
}

AVX2 static void
mul_avx2 (float *restrict y, size_t n, float a)
{
  const __m256 va = _mm256_set1_ps (a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps (y + i, _mm256_mul_ps (_mm256_loadu_ps (y + i), va));
  for (; i < n; i++)
    y[i] *= a;
}

/* ------------------------------------------------------------- AVX-512 */

#define AVX512 __attribute__ ((target ("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

/* Same reduction and polynomial as exp256; 2^n by scalef, which rounds
 * subnormal results once.  exp512_k: the exponentials of the k vectors
 * x[0, k) (k a constant), in place, each step applied to all k before the
 * next: the k dependency chains (14 operations of latency 4 each) are
 * interleaved in program order, so the scheduler holds ready work from
 * k vectors instead of one chain's waiting operations.  The same
 * operations per element in the same order: the same bytes for any k. */
AVX512 static inline __attribute__ ((always_inline)) void
exp512_k (__m512 *x, int k)
{
  /* Below -104 (and -inf) the result is 0 (see exp256_k): those lanes
   * are masked off in the final scalef rather than clamped to -104 (the
   * same bytes: the exponential of -104 rounds to +0, and x >= -104 is
   * what the clamp left unchanged).  A clamped lane went through a scalef
   * that underflows, a microcode assist per vector on Intel cores: rows
   * of widely spread scores (most entries below -104) ran 4x slower.
   * What the masked lanes compute (inf, NaN) is discarded.  A NaN lane
   * stays live (unordered compare): a NaN score makes the row sum NaN
   * (see sattn_qk_max). */
  const __m512 lo = _mm512_set1_ps (-104.0f);
  /* n = round (x log2 e): adding 1.5 * 2^23 leaves no fraction bits (one
   * FMA and a subtraction instead of a product and a 2-uop round). */
  const __m512 magic = _mm512_set1_ps (12582912.0f);
  const __m512 l2e = _mm512_set1_ps (1.44269504088896341f);
  const __m512 ln2h = _mm512_set1_ps (0.693359375f);
  const __m512 ln2l = _mm512_set1_ps (-2.12194440e-4f);
  /* 1 + r (1 + r (c2 + ... + c6 r^4)) by Horner: six FMAs. */
  const __m512 c6 = _mm512_set1_ps (1.3814612757e-3f);
  const __m512 c5 = _mm512_set1_ps (8.3687100559e-3f);
  const __m512 c4 = _mm512_set1_ps (4.1668388993e-2f);
  const __m512 c3 = _mm512_set1_ps (1.6666521132e-1f);
  const __m512 c2 = _mm512_set1_ps (4.9999994040e-1f);
  const __m512 one = _mm512_set1_ps (1.0f);
  __m512 n[8], p[8];
  __mmask16 live[8];
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    live[j] = _mm512_cmp_ps_mask (x[j], lo, _CMP_NLT_UQ);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    n[j] = _mm512_fmadd_ps (x[j], l2e, magic);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    n[j] = _mm512_sub_ps (n[j], magic);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    x[j] = _mm512_fnmadd_ps (n[j], ln2h, x[j]);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    x[j] = _mm512_fnmadd_ps (n[j], ln2l, x[j]);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    p[j] = _mm512_fmadd_ps (c6, x[j], c5);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    p[j] = _mm512_fmadd_ps (p[j], x[j], c4);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    p[j] = _mm512_fmadd_ps (p[j], x[j], c3);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    p[j] = _mm512_fmadd_ps (p[j], x[j], c2);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    p[j] = _mm512_fmadd_ps (p[j], x[j], one);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    p[j] = _mm512_fmadd_ps (p[j], x[j], one);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++)
    x[j] = _mm512_maskz_scalef_ps (live[j], p[j], n[j]);
}

static inline __mmask16
tail_mask (size_t r)
{
  return r >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << r) - 1u);
}

/* finite_avx2 with 16 lanes, the tail under a mask (zeros are finite). */
AVX512 static int
finite_avx512 (const float *restrict x, size_t n)
{
  const __m512 zero = _mm512_setzero_ps ();
  __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_fmadd_ps (_mm512_loadu_ps (x + i), zero, a0);
    a1 = _mm512_fmadd_ps (_mm512_loadu_ps (x + i + 16), zero, a1);
    a2 = _mm512_fmadd_ps (_mm512_loadu_ps (x + i + 32), zero, a2);
    a3 = _mm512_fmadd_ps (_mm512_loadu_ps (x + i + 48), zero, a3);
  }
  for (; i < n; i += 16)
    a0 = _mm512_fmadd_ps (_mm512_maskz_loadu_ps (tail_mask (n - i), x + i),
                          zero, a0);
  __m512 a = _mm512_add_ps (_mm512_add_ps (a0, a1), _mm512_add_ps (a2, a3));
  return _mm512_cmp_ps_mask (a, a, _CMP_UNORD_Q) == 0;
}

/* The exp pass on k vectors y + 16 j (j < k, k a constant), the last
 * under mask m (a constant 0xffff in the main loop: no mask computed
 * there); fs[g] = the sum of the exponentials of vectors 4 g to 4 g + 3,
 * ((e0 + e1) + e2) + e3.  fused: x = y * scale - mx in one FMA, for a
 * scale that is a power of two (see exp_sum_avx512). */
AVX512 static inline __attribute__ ((always_inline)) void
exp_steps_avx512 (float *y, int k, __mmask16 m, __m512 vsc, __m512 vmx,
                  int fused, int stats, __m512 *exa, __m512 *mn, __m512 *fs)
{
  const __m512 ninf = _mm512_set1_ps (-INFINITY);
  __m512 x[8], e[8];
#pragma GCC unroll 8
  for (int j = 0; j < k; j++) {
    __m512 yv = _mm512_mask_loadu_ps (ninf, j == k - 1 ? m : 0xffff,
                                      y + 16 * j);
    if (fused)
      x[j] = _mm512_fmsub_ps (yv, vsc, vmx);
    else
      /* Rounded before the subtraction (an explicit rounding mode: never
       * fused into a multiply-add, so the max entry gives exactly 0). */
      x[j] = _mm512_sub_ps (_mm512_mul_round_ps (yv, vsc,
              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vmx);
    e[j] = x[j];
  }
  exp512_k (e, k);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++) {
    _mm512_mask_storeu_ps (y + 16 * j, j == k - 1 ? m : 0xffff, e[j]);
    fs[j / 4] = j % 4 ? _mm512_add_ps (fs[j / 4], e[j]) : e[j];
    if (stats) {
      __mmask16 live = _mm512_cmp_ps_mask (x[j], ninf, _CMP_GT_OQ);
      *exa = _mm512_mask_add_ps (*exa, live, *exa,
                                 _mm512_mul_ps (x[j], e[j]));
      *mn = _mm512_mask_min_ps (*mn, live, *mn, x[j]);
    }
  }
}

/* The exp pass (see exp_sum_body_portable and exp_sum_body_avx2); returns
 * the eight double partial sums of the row (exp_sum_body_avx512 adds
 * them). */
AVX512 static inline __attribute__ ((always_inline)) __m512d
exp_part_avx512 (float *y, size_t n, float scale, float mx, int fused,
                 double *ex, float *xmin)
{
  const __m512 vmx = _mm512_set1_ps (mx), vsc = _mm512_set1_ps (scale);
  const int stats = ex != NULL;
  __m512d acc0 = _mm512_setzero_pd (), acc1 = _mm512_setzero_pd ();
  __m512 exa = _mm512_setzero_ps (), mn = _mm512_set1_ps (INFINITY);
  /* The sum: float partials of four vectors (each lane at most 4 terms in
   * [0, 1], relative error <= 3 * 2^-24), then in double. */
  for (size_t i0 = 0; i0 < n; i0 += 64) {
    __m512 fs[2];
    size_t r = n - i0;
    int g = 1;
    /* ((e0 + e1) + e2) + e3: the same sums as from 0. */
    if (r >= 128) {
      /* Two groups of four at once (see exp512_k). */
      exp_steps_avx512 (y + i0, 8, 0xffff, vsc, vmx, fused, stats, &exa, &mn,
                        fs);
      g = 2;
    } else if (r >= 64)
      exp_steps_avx512 (y + i0, 4, 0xffff, vsc, vmx, fused, stats, &exa, &mn,
                        fs);
    else if (r > 32) {
      if (r > 48)
        exp_steps_avx512 (y + i0, 4, tail_mask (r - 48), vsc, vmx, fused,
                          stats, &exa, &mn, fs);
      else
        exp_steps_avx512 (y + i0, 3, tail_mask (r - 32), vsc, vmx, fused,
                          stats, &exa, &mn, fs);
    } else if (r > 16)
      exp_steps_avx512 (y + i0, 2, tail_mask (r - 16), vsc, vmx, fused, stats,
                        &exa, &mn, fs);
    else
      exp_steps_avx512 (y + i0, 1, tail_mask (r), vsc, vmx, fused, stats,
                        &exa, &mn, fs);
    for (int k = 0; k < g; k++) {
      acc0 = _mm512_add_pd (acc0,
          _mm512_cvtps_pd (_mm512_castps512_ps256 (fs[k])));
      acc1 = _mm512_add_pd (acc1,
          _mm512_cvtps_pd (_mm512_extractf32x8_ps (fs[k], 1)));
    }
    i0 += 64 * (g - 1);
  }
  if (stats) {
    *ex = _mm512_reduce_add_ps (exa);
    *xmin = _mm512_reduce_min_ps (mn);
  }
  return _mm512_add_pd (acc0, acc1);
}

AVX512 static inline __attribute__ ((always_inline)) double
exp_sum_body_avx512 (float *y, size_t n, float scale, float mx, int fused,
                     double *ex, float *xmin)
{
  return _mm512_reduce_add_pd (exp_part_avx512 (y, n, scale, mx, fused, ex,
                                                xmin));
}

/* A scale that is a power of two (1 included) makes every product y *
 * scale exact (y <= 0 scaled down cannot overflow; a product in the
 * subnormal range that would round only matters against an mx below
 * 2^-100, where every exponential is 1 either way), so y * scale - mx in
 * one FMA is the subtraction of the rounded product: the same bytes, one
 * instruction less per vector. */
static inline int
pow2_scale (float scale)
{
  uint32_t u;
  memcpy (&u, &scale, sizeof u);
  return (u & 0x007fffffu) == 0 && (u >> 23) != 0 && (u >> 23) < 0xff;
}

AVX512 static double
exp_sum_avx512 (float *y, size_t n, float scale, float mx)
{
  if (pow2_scale (scale))
    return exp_sum_body_avx512 (y, n, scale, mx, 1, NULL, NULL);
  return exp_sum_body_avx512 (y, n, scale, mx, 0, NULL, NULL);
}

AVX512 static double
exp_sum_stats_avx512 (float *y, size_t n, float scale, float mx, double *ex,
                      float *xmin)
{
  return exp_sum_body_avx512 (y, n, scale, mx, 0, ex, xmin);
}

/* max_avx512's tail: masked vectors up to n. */
AVX512 static inline __attribute__ ((always_inline)) size_t
max_avx512_tail (const float *restrict s, size_t n, size_t j, __m512 *m0,
                 __m512 *d0)
{
  const __m512 zero = _mm512_setzero_ps ();
  for (; j < n; j += 16) {
    __mmask16 tm = tail_mask (n - j);
    __m512 v0 = _mm512_maskz_loadu_ps (tm, s + j);
    *m0 = _mm512_mask_max_ps (*m0, tm, *m0, v0);
    *d0 = _mm512_fmadd_ps (v0, zero, *d0);
  }
  return j;
}

AVX512 static inline __attribute__ ((always_inline)) float
max_avx512_finish (const float *restrict s, size_t n, size_t j, __m512 m0,
                   __m512 d0, int *finite)
{
  (void) s;
  (void) n;
  (void) j;
  *finite = _mm512_cmp_ps_mask (d0, d0, _CMP_UNORD_Q) == 0;
  return _mm512_reduce_max_ps (m0);
}

MAX_CHAINS (max_avx512, AVX512, __m512, 16, _mm512_set1_ps, _mm512_loadu_ps,
            _mm512_max_ps, _mm512_fmadd_ps, _mm512_add_ps, max_avx512_tail,
            max_avx512_finish)

AVX512 static float
scan_avx512 (float *restrict s, size_t n, const uint8_t *restrict ok,
             float scale, size_t counts[4])
{
  const __m512 vs = _mm512_set1_ps (scale);
  const __m512 ninf = _mm512_set1_ps (-INFINITY);
  const __m512 pinf = _mm512_set1_ps (INFINITY);
  const __m512 qnan = _mm512_set1_ps (NAN);
  __m512 mx = ninf;
  size_t n_valid = 0, n_nan = 0, n_pinf = 0, n_ninf = 0;
  for (size_t j = 0; j < n; j += 16) {
    __mmask16 tm = tail_mask (n - j);
    __m512 v = _mm512_mul_ps (_mm512_maskz_loadu_ps (tm, s + j), vs);
    __mmask16 okm = tm;
    if (ok != NULL)
      okm &= _mm_test_epi8_mask (_mm_maskz_loadu_epi8 (tm, ok + j),
          _mm_set1_epi8 ((char) 0xff));
    __mmask16 nanm = _mm512_cmp_ps_mask (v, v, _CMP_UNORD_Q);
    __mmask16 valid = okm & (__mmask16) ~nanm;
    __m512 out = _mm512_mask_blend_ps (valid, ninf, v);
    out = _mm512_mask_blend_ps (okm & nanm, out, qnan);
    _mm512_mask_storeu_ps (s + j, tm, out);
    mx = _mm512_mask_max_ps (mx, valid, mx, v);
    n_valid += (size_t) __builtin_popcount (valid);
    /* NaN and +-inf scores are rare: one class test finds them, the
     * counts by kind are taken only then. */
    __mmask16 inf = valid & _mm512_fpclass_ps_mask (v, 0x18);
    if (__builtin_expect ((okm & nanm) != 0 || inf != 0, 0)) {
      n_nan += (size_t) __builtin_popcount (okm & nanm);
      n_pinf += (size_t) __builtin_popcount (inf &
          _mm512_cmp_ps_mask (v, pinf, _CMP_EQ_OQ));
      n_ninf += (size_t) __builtin_popcount (inf &
          _mm512_cmp_ps_mask (v, ninf, _CMP_EQ_OQ));
    }
  }
  /* Counted in registers, added once: adding into counts[] inside the
   * loop made a chain through memory from one vector to the next. */
  counts[0] += n_valid;
  counts[1] += n_nan;
  counts[2] += n_pinf;
  counts[3] += n_ninf;
  return _mm512_reduce_max_ps (mx);
}

AVX512 static void
mul_avx512 (float *restrict y, size_t n, float a)
{
  const __m512 va = _mm512_set1_ps (a);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = tail_mask (n - i);
    _mm512_mask_storeu_ps (y + i, m,
        _mm512_mul_ps (_mm512_maskz_loadu_ps (m, y + i), va));
  }
}

#define INIT(p) (acc ? _mm512_loadu_ps (p) : _mm512_setzero_ps ())
#define INIT_M(m, p) (acc ? _mm512_maskz_loadu_ps (m, p) : _mm512_setzero_ps ())
/* Four query rows × 32 keys per step; tails with masked 16-lane steps.
 * acc: the sums start from S (a previous block of the inner dimension)
 * instead of 0; the chain of FMAs of each entry is then the same as in
 * one pass, so the bytes are too.  pf, in the 8-row tiles: 1 prefetches
 * the rows of kt QK_PF ahead (projections: rows of a weight matrix are
 * d_out floats apart, a page or half a page, where the hardware
 * prefetchers do not follow; the matrix comes from L3 once per push),
 * only for kt of at least QK_PF_FLOATS: a smaller one stays in L1/L2
 * (W1's Q|K weights, 32 KiB, measured 1.014 with the prefetches, d_model
 * 480 0.980).  2 prefetches the same row's next 32 keys (scores: each of
 * a head's dh rows of Kᵀ is another stream; W3 0.964, two tiles ahead
 * 1.011 against one). */
#define QK_PF 16
#define QK_PF_FLOATS (64u << 10)
AVX512 static inline __attribute__ ((always_inline)) void
qk_avx512_body (const float *restrict q, size_t ldq, const float *restrict kt,
                size_t ldkt, size_t m, size_t nk, size_t dh,
                float *restrict S, size_t lds, int acc, float *rmax,
                const int pf)
{
  size_t i = 0;
  /* Eight rows × 32 keys: sixteen independent FMA chains (the latency of
   * two FMA ports with room to spare), 10 loads per 16 FMAs. */
  for (; i + 8 <= m && nk >= 32; i += 8) {
    const float *q0 = q + i * ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    /* rmax: each row's max in registers as the tile is stored (a NaN
     * score is skipped: vmaxps returns its second operand then). */
    __m512 mx[8];
    for (int r = 0; r < 8; r++)
      mx[r] = _mm512_set1_ps (-INFINITY);
    for (; j + 32 <= nk; j += 32) {
      __m512 a[8], b[8];
      for (int r = 0; r < 8; r++) {
        a[r] = INIT (s0 + r * lds + j);
        b[r] = INIT (s0 + r * lds + j + 16);
      }
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        if (pf == 1) {
          _mm_prefetch ((const char *) (kr + QK_PF * ldkt), _MM_HINT_T0);
          _mm_prefetch ((const char *) (kr + QK_PF * ldkt + 16), _MM_HINT_T0);
        } else if (pf == 2) {
          _mm_prefetch ((const char *) (kr + 32), _MM_HINT_T0);
          _mm_prefetch ((const char *) (kr + 48), _MM_HINT_T0);
        }
        __m512 k0 = _mm512_loadu_ps (kr), k1 = _mm512_loadu_ps (kr + 16);
        for (int r = 0; r < 8; r++) {
          __m512 x = _mm512_set1_ps (q0[r * ldq + t]);
          a[r] = _mm512_fmadd_ps (x, k0, a[r]);
          b[r] = _mm512_fmadd_ps (x, k1, b[r]);
        }
      }
      for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps (s0 + r * lds + j, a[r]);
        _mm512_storeu_ps (s0 + r * lds + j + 16, b[r]);
        if (rmax != NULL)
          mx[r] = _mm512_max_ps (b[r], _mm512_max_ps (a[r], mx[r]));
      }
    }
    for (; j < nk; j += 16) {
      __mmask16 tm = tail_mask (nk - j);
      __m512 a[8];
      for (int r = 0; r < 8; r++)
        a[r] = INIT_M (tm, s0 + r * lds + j);
      for (size_t t = 0; t < dh; t++) {
        __m512 k0 = _mm512_maskz_loadu_ps (tm, kt + t * ldkt + j);
        for (int r = 0; r < 8; r++)
          a[r] = _mm512_fmadd_ps (_mm512_set1_ps (q0[r * ldq + t]), k0, a[r]);
      }
      for (int r = 0; r < 8; r++) {
        _mm512_mask_storeu_ps (s0 + r * lds + j, tm, a[r]);
        if (rmax != NULL)
          mx[r] = _mm512_mask_max_ps (mx[r], tm, a[r], mx[r]);
      }
    }
    if (rmax != NULL)
      for (int r = 0; r < 8; r++)
        rmax[i + r] = _mm512_reduce_max_ps (mx[r]);
  }
  /* The other rows: no max (see sattn_qk_max). */
  for (size_t r = i; rmax != NULL && r < m; r++)
    rmax[r] = NAN;
  for (; i + 4 <= m; i += 4) {
    const float *q0 = q + i * ldq, *q1 = q0 + ldq, *q2 = q1 + ldq,
        *q3 = q2 + ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    for (; j + 32 <= nk; j += 32) {
      __m512 a0 = INIT (s0 + j), a1 = INIT (s0 + j + 16);
      __m512 b0 = INIT (s0 + lds + j), b1 = INIT (s0 + lds + j + 16);
      __m512 c0 = INIT (s0 + 2 * lds + j), c1 = INIT (s0 + 2 * lds + j + 16);
      __m512 d0 = INIT (s0 + 3 * lds + j), d1 = INIT (s0 + 3 * lds + j + 16);
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m512 k0 = _mm512_loadu_ps (kr), k1 = _mm512_loadu_ps (kr + 16);
        __m512 x = _mm512_set1_ps (q0[t]);
        a0 = _mm512_fmadd_ps (x, k0, a0);
        a1 = _mm512_fmadd_ps (x, k1, a1);
        x = _mm512_set1_ps (q1[t]);
        b0 = _mm512_fmadd_ps (x, k0, b0);
        b1 = _mm512_fmadd_ps (x, k1, b1);
        x = _mm512_set1_ps (q2[t]);
        c0 = _mm512_fmadd_ps (x, k0, c0);
        c1 = _mm512_fmadd_ps (x, k1, c1);
        x = _mm512_set1_ps (q3[t]);
        d0 = _mm512_fmadd_ps (x, k0, d0);
        d1 = _mm512_fmadd_ps (x, k1, d1);
      }
      _mm512_storeu_ps (s0 + j, a0);
      _mm512_storeu_ps (s0 + j + 16, a1);
      _mm512_storeu_ps (s0 + lds + j, b0);
      _mm512_storeu_ps (s0 + lds + j + 16, b1);
      _mm512_storeu_ps (s0 + 2 * lds + j, c0);
      _mm512_storeu_ps (s0 + 2 * lds + j + 16, c1);
      _mm512_storeu_ps (s0 + 3 * lds + j, d0);
      _mm512_storeu_ps (s0 + 3 * lds + j + 16, d1);
    }
    for (; j < nk; j += 16) {
      __mmask16 tm = tail_mask (nk - j);
      __m512 a0 = INIT_M (tm, s0 + j), b0 = INIT_M (tm, s0 + lds + j);
      __m512 c0 = INIT_M (tm, s0 + 2 * lds + j);
      __m512 d0 = INIT_M (tm, s0 + 3 * lds + j);
      for (size_t t = 0; t < dh; t++) {
        __m512 k0 = _mm512_maskz_loadu_ps (tm, kt + t * ldkt + j);
        a0 = _mm512_fmadd_ps (_mm512_set1_ps (q0[t]), k0, a0);
        b0 = _mm512_fmadd_ps (_mm512_set1_ps (q1[t]), k0, b0);
        c0 = _mm512_fmadd_ps (_mm512_set1_ps (q2[t]), k0, c0);
        d0 = _mm512_fmadd_ps (_mm512_set1_ps (q3[t]), k0, d0);
      }
      _mm512_mask_storeu_ps (s0 + j, tm, a0);
      _mm512_mask_storeu_ps (s0 + lds + j, tm, b0);
      _mm512_mask_storeu_ps (s0 + 2 * lds + j, tm, c0);
      _mm512_mask_storeu_ps (s0 + 3 * lds + j, tm, d0);
    }
  }
  for (; i < m; i++) {
    const float *q0 = q + i * ldq;
    float *s0 = S + i * lds;
    size_t j = 0;
    for (; j + 64 <= nk; j += 64) {
      __m512 a0 = INIT (s0 + j), a1 = INIT (s0 + j + 16);
      __m512 a2 = INIT (s0 + j + 32), a3 = INIT (s0 + j + 48);
      for (size_t t = 0; t < dh; t++) {
        const float *kr = kt + t * ldkt + j;
        __m512 x = _mm512_set1_ps (q0[t]);
        a0 = _mm512_fmadd_ps (x, _mm512_loadu_ps (kr), a0);
        a1 = _mm512_fmadd_ps (x, _mm512_loadu_ps (kr + 16), a1);
        a2 = _mm512_fmadd_ps (x, _mm512_loadu_ps (kr + 32), a2);
        a3 = _mm512_fmadd_ps (x, _mm512_loadu_ps (kr + 48), a3);
      }
      _mm512_storeu_ps (s0 + j, a0);
      _mm512_storeu_ps (s0 + j + 16, a1);
      _mm512_storeu_ps (s0 + j + 32, a2);
      _mm512_storeu_ps (s0 + j + 48, a3);
    }
    for (; j < nk; j += 16) {
      __mmask16 tm = tail_mask (nk - j);
      __m512 a0 = INIT_M (tm, s0 + j);
      for (size_t t = 0; t < dh; t++)
        a0 = _mm512_fmadd_ps (_mm512_set1_ps (q0[t]),
            _mm512_maskz_loadu_ps (tm, kt + t * ldkt + j), a0);
      _mm512_mask_storeu_ps (s0 + j, tm, a0);
    }
  }
}

#undef INIT
#undef INIT_M

/* Inner dimensions longer than this are cut into blocks (the rows of kt
 * of a block of columns stay in L1 while every row of q passes). */
#define QK_KBLOCK 128

AVX512 static void
qk_avx512 (const float *restrict q, size_t ldq, const float *restrict kt,
           size_t ldkt, size_t m, size_t nk, size_t dh, float *restrict S,
           size_t lds)
{
  if (dh <= QK_KBLOCK || m < 8) {
    if (dh * ldkt >= QK_PF_FLOATS)
      qk_avx512_body (q, ldq, kt, ldkt, m, nk, dh, S, lds, 0, NULL, 1);
    else
      qk_avx512_body (q, ldq, kt, ldkt, m, nk, dh, S, lds, 0, NULL, 0);
    return;
  }
  const int pf = dh * ldkt >= QK_PF_FLOATS;
  for (size_t t0 = 0; t0 < dh; t0 += QK_KBLOCK) {
    size_t kb = dh - t0 < QK_KBLOCK ? dh - t0 : QK_KBLOCK;
    if (pf)
      qk_avx512_body (q + t0, ldq, kt + t0 * ldkt, ldkt, m, nk, kb, S, lds,
                      t0 > 0, NULL, 1);
    else
      qk_avx512_body (q + t0, ldq, kt + t0 * ldkt, ldkt, m, nk, kb, S, lds,
                      t0 > 0, NULL, 0);
  }
}

/* One row vector of O stored: multiplied by nrm[r] first (nrm may be
 * NULL: as computed), the lanes that are NaN or +-inf added to *bad (the
 * same product as the normalisation pass it replaces: the same bytes). */
AVX512 static inline __attribute__ ((always_inline)) void
pv_store_avx512 (float *o, __mmask16 cm, __m512 a, const float *nrm, int r,
                 __mmask16 *bad)
{
  if (nrm != NULL)
    a = _mm512_mul_ps (a, _mm512_set1_ps (nrm[r]));
  *bad |= _mm512_mask_fpclass_ps_mask (cm, a, 0x99);
  _mm512_mask_storeu_ps (o, cm, a);
}

/* sattn_qk with the rows' max (see sattn_qk_max); inner dimensions up to
 * QK_KBLOCK (one block: the stored scores are final). */
AVX512 static void
qk_max_avx512 (const float *restrict q, size_t ldq, const float *restrict kt,
               size_t ldkt, size_t m, size_t nk, size_t dh, float *restrict S,
               size_t lds, float *rmax)
{
  qk_avx512_body (q, ldq, kt, ldkt, m, nk, dh, S, lds, 0, rmax, 2);
}

/* Eight rows × two column vectors (c1 masked) or sixteen rows × one:
 * sixteen independent FMA chains either way (eight were just the minimum
 * for two ports of latency 4); eight rows × one (c1 = 0) where neither
 * fits.  Every entry is one chain of
 * FMAs over j whatever the tile, so the bytes do not depend on it. */
AVX512 static inline __attribute__ ((always_inline)) void
pv_tile_avx512 (const float *restrict p0, size_t ldp, size_t nk,
                const float *restrict v, size_t ldv, __mmask16 c0,
                __mmask16 c1, int rows, float *restrict o, size_t ldo,
                const float *nrm, __mmask16 *bad)
{
  __m512 a[16];
  for (int r = 0; r < 16; r++)
    a[r] = _mm512_setzero_ps ();
  if (rows == 16) {
    /* Sixteen row pointers do not fit in the general registers (the
     * compiler kept some in vector registers, a move per use): rows 8-15
     * are addressed from the pointers of rows 0-7 with one more index,
     * opaque to the compiler so that it cannot fold it into eight more
     * pointers. */
    const float *pr[8];
    for (int r = 0; r < 8; r++)
      pr[r] = p0 + r * ldp;
#pragma GCC unroll 4
    for (size_t j = 0; j < nk; j++) {
      size_t j8 = j + 8 * ldp;
      __asm__ ("" : "+r" (j8));
      __m512 vj = _mm512_maskz_loadu_ps (c0, v + j * ldv);
      for (int r = 0; r < 8; r++)
        a[r] = _mm512_fmadd_ps (_mm512_set1_ps (pr[r][j]), vj, a[r]);
      for (int r = 0; r < 8; r++)
        a[8 + r] = _mm512_fmadd_ps (_mm512_set1_ps (pr[r][j8]), vj,
                                    a[8 + r]);
    }
    for (int r = 0; r < 16; r++)
      pv_store_avx512 (o + r * ldo, c0, a[r], nrm, r, bad);
  } else if (c1 == 0) {
    for (size_t j = 0; j < nk; j++) {
      __m512 vj = _mm512_maskz_loadu_ps (c0, v + j * ldv);
      for (int r = 0; r < 8; r++)
        a[r] = _mm512_fmadd_ps (_mm512_set1_ps (p0[r * ldp + j]), vj, a[r]);
    }
    for (int r = 0; r < 8; r++)
      pv_store_avx512 (o + r * ldo, c0, a[r], nrm, r, bad);
  } else {
    for (size_t j = 0; j < nk; j++) {
      __m512 v0 = _mm512_maskz_loadu_ps (c0, v + j * ldv);
      __m512 v1 = _mm512_maskz_loadu_ps (c1, v + j * ldv + 16);
      _mm_prefetch ((const char *) (v + (j + 16) * ldv), _MM_HINT_T0);
      _mm_prefetch ((const char *) (v + (j + 16) * ldv + 16), _MM_HINT_T0);
      for (int r = 0; r < 8; r++) {
        __m512 b = _mm512_set1_ps (p0[r * ldp + j]);
        a[r] = _mm512_fmadd_ps (b, v0, a[r]);
        a[8 + r] = _mm512_fmadd_ps (b, v1, a[8 + r]);
      }
    }
    for (int r = 0; r < 8; r++) {
      pv_store_avx512 (o + r * ldo, c0, a[r], nrm, r, bad);
      pv_store_avx512 (o + r * ldo + 16, c1, a[8 + r], nrm, r, bad);
    }
  }
}

/* O = P V with rows in blocks of 8 (tiles above), masked column tails;
 * rows past the last block of 8 one at a time.  Every V row is finite, so
 * no branch on zero weights. */
AVX512 static int
pv_avx512 (const float *restrict P, size_t ldp, size_t m, size_t nk,
           const float *restrict v, size_t ldv, size_t dv, float *restrict O,
           size_t ldo, const float *norm)
{
  size_t i = 0;
  __mmask16 bad = 0;
#define NRM(r) (norm != NULL ? norm + (r) : NULL)
  for (; i + 8 <= m; i += 8) {
    const float *p0 = P + i * ldp;
    size_t t = 0;
    for (; t + 16 < dv; t += 32)
      pv_tile_avx512 (p0, ldp, nk, v + t, ldv, 0xffff, tail_mask (dv - t - 16),
                      8, O + i * ldo + t, ldo, NRM (i), &bad);
    if (t < dv) {
      /* One column vector left: sixteen rows when there are. */
      if (i + 16 <= m) {
        pv_tile_avx512 (p0, ldp, nk, v + t, ldv, tail_mask (dv - t), 0, 16,
                        O + i * ldo + t, ldo, NRM (i), &bad);
        /* the next block of 8 rows has this column vector done */
        size_t t2 = 0;
        const float *p1 = p0 + 8 * ldp;
        for (; t2 + 16 < dv; t2 += 32)
          pv_tile_avx512 (p1, ldp, nk, v + t2, ldv, 0xffff,
                          tail_mask (dv - t2 - 16), 8,
                          O + (i + 8) * ldo + t2, ldo, NRM (i + 8), &bad);
        i += 8;
      } else {
        pv_tile_avx512 (p0, ldp, nk, v + t, ldv, tail_mask (dv - t), 0, 8,
                        O + i * ldo + t, ldo, NRM (i), &bad);
      }
    }
  }
  for (; i < m; i++) {
    const float *pi = P + i * ldp;
    for (size_t t = 0; t < dv; t += 16) {
      __mmask16 tm = tail_mask (dv - t);
      __m512 a0 = _mm512_setzero_ps (), a1 = _mm512_setzero_ps ();
      size_t j = 0;
      for (; j + 2 <= nk; j += 2) {
        a0 = _mm512_fmadd_ps (_mm512_set1_ps (pi[j]),
            _mm512_maskz_loadu_ps (tm, v + j * ldv + t), a0);
        a1 = _mm512_fmadd_ps (_mm512_set1_ps (pi[j + 1]),
            _mm512_maskz_loadu_ps (tm, v + (j + 1) * ldv + t), a1);
      }
      if (j < nk)
        a0 = _mm512_fmadd_ps (_mm512_set1_ps (pi[j]),
            _mm512_maskz_loadu_ps (tm, v + j * ldv + t), a0);
      pv_store_avx512 (O + i * ldo + t, tm, _mm512_add_ps (a0, a1), NRM (i),
                       0, &bad);
    }
  }
#undef NRM
  return bad == 0;
}

/* 16 × 16 floats transposed in registers (unpack by floats, by pairs,
 * then 128-bit blocks twice). */
AVX512 static inline __attribute__ ((always_inline)) void
transpose16_avx512 (__m512 r[16])
{
  __m512 t[16];
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm512_unpacklo_ps (r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps (r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {
    __m512d a = _mm512_castps_pd (t[k]), b = _mm512_castps_pd (t[k + 1]);
    __m512d c = _mm512_castps_pd (t[k + 2]), d = _mm512_castps_pd (t[k + 3]);
    r[k] = _mm512_castpd_ps (_mm512_unpacklo_pd (a, c));
    r[k + 1] = _mm512_castpd_ps (_mm512_unpackhi_pd (a, c));
    r[k + 2] = _mm512_castpd_ps (_mm512_unpacklo_pd (b, d));
    r[k + 3] = _mm512_castpd_ps (_mm512_unpackhi_pd (b, d));
  }
  for (int k = 0; k < 16; k += 8)
    for (int l = 0; l < 4; l++) {
      t[k + l] = _mm512_shuffle_f32x4 (r[k + l], r[k + 4 + l], 0x88);
      t[k + 4 + l] = _mm512_shuffle_f32x4 (r[k + l], r[k + 4 + l], 0xdd);
    }
  for (int l = 0; l < 8; l++) {
    r[l] = _mm512_shuffle_f32x4 (t[l], t[8 + l], 0x88);
    r[8 + l] = _mm512_shuffle_f32x4 (t[l], t[8 + l], 0xdd);
  }
}

/* See copy_rows_portable. */
AVX512 static void
copy_rows_avx512 (const float *restrict x, size_t ldx,
                  const uint8_t *restrict ok, size_t cnt, size_t w,
                  float *restrict dst, size_t ldd, size_t mir)
{
  for (size_t i = 0; i < cnt; i++)
    for (size_t t = 0; t < w; t += 16) {
      __mmask16 tm = tail_mask (w - t);
      __m512 v = _mm512_maskz_loadu_ps (ok == NULL || ok[i] ? tm : 0,
                                        x + i * ldx + t);
      _mm512_mask_storeu_ps (dst + i * ldd + t, tm, v);
      _mm512_mask_storeu_ps (dst + i * ldd + t + mir, tm, v);
    }
}

/* See add_bias_portable. */
AVX512 static void
add_bias_avx512 (float *restrict y, size_t ldy, size_t n,
                 const float *restrict b, size_t k)
{
  for (size_t j = 0; j < k; j += 16) {
    __mmask16 tm = tail_mask (k - j);
    __m512 bv = _mm512_maskz_loadu_ps (tm, b + j);
    for (size_t i = 0; i < n; i++) {
      float *r = y + i * ldy + j;
      _mm512_mask_storeu_ps (r, tm,
          _mm512_add_ps (_mm512_maskz_loadu_ps (tm, r), bv));
    }
  }
}

/* See transpose_rows_portable: blocks of 16 rows × 16 columns. */
AVX512 static void
transpose_rows_avx512 (const float *restrict x, size_t ldx,
                       const uint8_t *restrict ok, size_t cnt, size_t w,
                       float *restrict dst, size_t ldd, size_t mir)
{
  if (cnt == 1) {
    /* One row (hop 1): plain stores, one per destination line. */
    transpose_rows_portable (x, ldx, ok, cnt, w, dst, ldd, mir);
    return;
  }
  for (size_t i0 = 0; i0 < cnt; i0 += 16) {
    __mmask16 im = tail_mask (cnt - i0);
    for (size_t t0 = 0; t0 < w; t0 += 16) {
      __mmask16 tm = tail_mask (w - t0);
      __m512 r[16];
      /* Sixteen usable rows (the common case): no test per row. */
      if (cnt - i0 >= 16 && (ok == NULL || _mm_cmpeq_epi8_mask (
                  _mm_loadu_si128 ((const __m128i *) (ok + i0)),
                  _mm_setzero_si128 ()) == 0))
        for (size_t i = 0; i < 16; i++)
          r[i] = _mm512_maskz_loadu_ps (tm, x + (i0 + i) * ldx + t0);
      else
        for (size_t i = 0; i < 16; i++)
          r[i] = _mm512_maskz_loadu_ps (i0 + i < cnt &&
                                        (ok == NULL || ok[i0 + i]) ? tm : 0,
                                        x + (i0 + i) * ldx + t0);
      transpose16_avx512 (r);
      for (size_t t = 0; t < 16 && t0 + t < w; t++) {
        float *d = dst + (t0 + t) * ldd + i0;
        _mm512_mask_storeu_ps (d, im, r[t]);
        _mm512_mask_storeu_ps (d + mir, im, r[t]);
      }
    }
  }
}
#endif /* SATTN_HAVE_X86 */

/* ------------------------------------------------------------ dispatch */

void
sattn_qk (const float *q, size_t ldq, const float *kt, size_t ldkt, size_t m,
          size_t nk, size_t dh, float *S, size_t lds)
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1) {
    qk_avx512 (q, ldq, kt, ldkt, m, nk, dh, S, lds);
    return;
  }
  if (level > 0) {
    qk_avx2 (q, ldq, kt, ldkt, m, nk, dh, S, lds);
    return;
  }
#endif
  qk_portable (q, ldq, kt, ldkt, m, nk, dh, S, lds);
}

void
sattn_pv (const float *P, size_t ldp, size_t m, size_t nk, const float *v,
          size_t ldv, size_t dv, float *O, size_t ldo)
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1) {
    pv_avx512 (P, ldp, m, nk, v, ldv, dv, O, ldo, NULL);
    return;
  }
  if (level > 0) {
    pv_avx2 (P, ldp, m, nk, v, ldv, dv, O, ldo);
    return;
  }
#endif
  pv_portable (P, ldp, m, nk, v, ldv, dv, O, ldo);
}

double
sattn_exp_sum (float *y, size_t n, float scale, float mx)
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1)
    return exp_sum_avx512 (y, n, scale, mx);
  if (level > 0)
    return exp_sum_avx2 (y, n, scale, mx);
#endif
  return exp_sum_body_portable (y, n, scale, mx, NULL, NULL);
}

float
sattn_softmax_max (const float *s, size_t n, int *finite)
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1)
    return max_avx512 (s, n, finite);
  if (level > 0)
    return max_avx2 (s, n, finite);
#endif
  return max_portable (s, n, finite);
}

float
sattn_softmax_scan (float *s, size_t n, const uint8_t *ok, float scale,
                    size_t counts[4])
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1)
    return scan_avx512 (s, n, ok, scale, counts);
  if (level > 0)
    return scan_avx2 (s, n, ok, scale, counts);
#endif
  return scan_portable (s, n, ok, scale, counts);
}

void
sattn_mul (float *y, size_t n, float a)
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1) {
    mul_avx512 (y, n, a);
    return;
  }
  if (level > 0) {
    mul_avx2 (y, n, a);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++)
    y[i] *= a;
}

double
sattn_exp_sum_stats (float *y, size_t n, float scale, float mx, double *ex,
                     float *xmin)
{
#ifdef SATTN_HAVE_X86
  int level = sattn_simd_level ();
  if (level > 1)
    return exp_sum_stats_avx512 (y, n, scale, mx, ex, xmin);
  if (level > 0)
    return exp_sum_stats_avx2 (y, n, scale, mx, ex, xmin);
#endif
  return exp_sum_body_portable (y, n, scale, mx, ex, xmin);
}

int
sattn_finite (const float *x, size_t n)
{
#ifdef SATTN_HAVE_X86
  if (sattn_simd_level () > 1)
    return finite_avx512 (x, n);
  if (sattn_simd_level () > 0)
    return finite_avx2 (x, n);
#endif
  return finite_portable (x, n);
}

/* The loop of a row mover (copy_rows, transpose_rows, add_bias) for this
 * CPU: the AVX-512 one from level 2, the portable one below (the same
 * bytes). */
#ifdef SATTN_HAVE_X86
#define ROWS_LOOP(name) \
  (sattn_simd_level () > 1 ? name##_avx512 : name##_portable)
#else
#define ROWS_LOOP(name) name##_portable
#endif

void
sattn_copy_rows (const float *x, size_t ldx, const uint8_t *ok, size_t cnt,
                 size_t w, float *dst, size_t ldd, size_t mir)
{
  ROWS_LOOP (copy_rows) (x, ldx, ok, cnt, w, dst, ldd, mir);
}

void
sattn_transpose_rows (const float *x, size_t ldx, const uint8_t *ok,
                      size_t cnt, size_t w, float *dst, size_t ldd, size_t mir)
{
  ROWS_LOOP (transpose_rows) (x, ldx, ok, cnt, w, dst, ldd, mir);
}

void
sattn_add_bias (float *y, size_t ldy, size_t n, const float *b, size_t k)
{
  ROWS_LOOP (add_bias) (y, ldy, n, b, k);
}

int
sattn_pv_norm (const float *P, size_t ldp, size_t m, size_t nk,
               const float *v, size_t ldv, size_t dv, const float *norm,
               float *O, size_t ldo)
{
#ifdef SATTN_HAVE_X86
  if (sattn_simd_level () > 1)
    return pv_avx512 (P, ldp, m, nk, v, ldv, dv, O, ldo, norm);
#endif
  sattn_pv (P, ldp, m, nk, v, ldv, dv, O, ldo);
  int fin = 1;
  for (size_t i = 0; i < m; i++) {
    if (norm[i] != 1.0f)
      sattn_mul (O + i * ldo, dv, norm[i]);
    fin &= sattn_finite (O + i * ldo, dv);
  }
  return fin;
}

void
sattn_qk_max (const float *q, size_t ldq, const float *kt, size_t ldkt,
              size_t m, size_t nk, size_t dh, float *S, size_t lds,
              float *rmax)
{
#ifdef SATTN_HAVE_X86
  if (sattn_simd_level () > 1 && dh <= QK_KBLOCK) {
    qk_max_avx512 (q, ldq, kt, ldkt, m, nk, dh, S, lds, rmax);
    return;
  }
#endif
  sattn_qk (q, ldq, kt, ldkt, m, nk, dh, S, lds);
  for (size_t i = 0; i < m; i++)
    rmax[i] = NAN;
}

#ifdef SATTN_HAVE_X86
/* The exp passes of sattn_softmax_rows: the body of exp_sum_avx512
 * inlined, one dispatch for all rows.  Each row's eight partial sums are
 * added (as exp_sum_body_avx512 does) after all the passes: no pass waits
 * for the previous row's additions.  Then the normalisers, eight rows at
 * a time: 1 / sum in double rounded to float, as the scalar loop of
 * sattn_softmax_rows computes them (the same bytes); rows[i] = 2 where
 * the sum is NaN. */
AVX512 static void
softmax_rows_avx512 (float *S, size_t lds, size_t m, size_t n,
                     const float *qmax, float scale, uint8_t *rows,
                     float *norm)
{
  const int fused = pow2_scale (scale);
  double part[64][8], sums[64];
  for (size_t i = 0; i < m; i++)
    if (rows[i] == 1)
      _mm512_storeu_pd (part[i], fused
          ? exp_part_avx512 (S + i * lds, n, scale, qmax[i] * scale, 1, NULL,
                             NULL)
          : exp_part_avx512 (S + i * lds, n, scale, qmax[i] * scale, 0, NULL,
                             NULL));
  for (size_t i = 0; i < m; i++)
    sums[i] = rows[i] == 1 ? _mm512_reduce_add_pd (_mm512_loadu_pd (part[i]))
        : 1.0;
  for (size_t i = 0; i < m; i += 8) {
    __mmask8 in = m - i >= 8 ? (__mmask8) 0xff
        : (__mmask8) ((1u << (m - i)) - 1u);
    __mmask8 live = _mm_mask_cmpeq_epi8_mask (in, _mm_maskz_loadu_epi8 (in,
            rows + i), _mm_set1_epi8 (1));
    __m512d sum = _mm512_maskz_loadu_pd (in, sums + i);
    __mmask8 nan = _mm512_mask_cmp_pd_mask (live, sum, sum, _CMP_UNORD_Q);
    __mmask8 ok = live & (__mmask8) ~nan;
    __m256 nr = _mm512_cvtpd_ps (_mm512_maskz_div_pd (ok, _mm512_set1_pd (1.0),
                                                      sum));
    _mm256_mask_storeu_ps (norm + i, ok, nr);
    _mm_mask_storeu_epi8 (rows + i, nan, _mm_set1_epi8 (2));
  }
}
#endif

void
sattn_softmax_rows (float *S, size_t lds, size_t m, size_t n,
                    const float *qmax, float scale, uint8_t *rows,
                    float *norm)
{
  double sums[64];
  for (size_t i0 = 0; i0 < m; i0 += 64) {
    size_t i1 = m - i0 < 64 ? m : i0 + 64;
#ifdef SATTN_HAVE_X86
    if (sattn_simd_level () > 1) {
      softmax_rows_avx512 (S + i0 * lds, lds, i1 - i0, n, qmax + i0, scale,
                           rows + i0, norm + i0);
      continue;
    }
#endif
    for (size_t i = i0; i < i1; i++)
      if (rows[i] == 1)
        sums[i - i0] = sattn_exp_sum (S + i * lds, n, scale,
                                      qmax[i] * scale);
    /* The divisions after the passes: nothing waits for them. */
    for (size_t i = i0; i < i1; i++) {
      if (rows[i] != 1)
        continue;
      double sum = sums[i - i0];
      if (sum != sum)
        rows[i] = 2;
      else
        norm[i] = (float) (1.0 / sum);
    }
  }
}
