/* The AVX-512 kernels (level 2: F, DQ, BW and VL), with the same
 * exp as kernels-avx2.c (see there) and 2^n by scalef, which rounds
 * subnormal results once.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels-portable.h"

#ifdef SATTN_HAVE_X86
#include <immintrin.h>

#define AVX512 \
  __attribute__ ((target ("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

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
                                                 _MM_FROUND_TO_NEAREST_INT |
                                                     _MM_FROUND_NO_EXC),
                            vmx);
    e[j] = x[j];
  }
  exp512_k (e, k);
#pragma GCC unroll 8
  for (int j = 0; j < k; j++) {
    _mm512_mask_storeu_ps (y + 16 * j, j == k - 1 ? m : 0xffff, e[j]);
    fs[j / 4] = j % 4 ? _mm512_add_ps (fs[j / 4], e[j]) : e[j];
    if (stats) {
      __mmask16 live = _mm512_cmp_ps_mask (x[j], ninf, _CMP_GT_OQ);
      *exa = _mm512_mask_add_ps (*exa, live, *exa, _mm512_mul_ps (x[j], e[j]));
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
        exp_steps_avx512 (y + i0, 4, tail_mask (r - 48), vsc, vmx, fused, stats,
                          &exa, &mn, fs);
      else
        exp_steps_avx512 (y + i0, 3, tail_mask (r - 32), vsc, vmx, fused, stats,
                          &exa, &mn, fs);
    } else if (r > 16)
      exp_steps_avx512 (y + i0, 2, tail_mask (r - 16), vsc, vmx, fused, stats,
                        &exa, &mn, fs);
    else
      exp_steps_avx512 (y + i0, 1, tail_mask (r), vsc, vmx, fused, stats, &exa,
                        &mn, fs);
    for (int k = 0; k < g; k++) {
      acc0 = _mm512_add_pd (acc0,
                            _mm512_cvtps_pd (_mm512_castps512_ps256 (fs[k])));
      acc1 = _mm512_add_pd (acc1, _mm512_cvtps_pd (
                                      _mm512_extractf32x8_ps (fs[k], 1)));
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
  return _mm512_reduce_add_pd (
      exp_part_avx512 (y, n, scale, mx, fused, ex, xmin));
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
      n_pinf += (size_t) __builtin_popcount (
          inf & _mm512_cmp_ps_mask (v, pinf, _CMP_EQ_OQ));
      n_ninf += (size_t) __builtin_popcount (
          inf & _mm512_cmp_ps_mask (v, ninf, _CMP_EQ_OQ));
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
                           _mm512_mul_ps (_mm512_maskz_loadu_ps (m, y + i),
                                          va));
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
                size_t ldkt, size_t m, size_t nk, size_t dh, float *restrict S,
                size_t lds, int acc, float *rmax, const int pf)
{
  size_t i = 0;
  /* Eight rows × 32 keys: sixteen independent FMA chains (the latency of
   * two FMA ports with room to spare), 10 loads per 16 FMAs.  Fewer than
   * 32 keys take these tiles too when the max is asked for (the masked
   * tail, eight chains): the rows below have none, and a row without one
   * takes the softmax's per-row path (a whole model's windows of 16
   * frames).  Every score is the same chain of FMAs whatever the tile. */
  for (; i + 8 <= m && (nk >= 32 || rmax != NULL); i += 8) {
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
                              _mm512_maskz_loadu_ps (tm, kt + t * ldkt + j),
                              a0);
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
                const float *restrict v, size_t ldv, __mmask16 c0, __mmask16 c1,
                int rows, float *restrict o, size_t ldo, const float *nrm,
                __mmask16 *bad)
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
      __asm__("" : "+r"(j8));
      __m512 vj = _mm512_maskz_loadu_ps (c0, v + j * ldv);
      for (int r = 0; r < 8; r++)
        a[r] = _mm512_fmadd_ps (_mm512_set1_ps (pr[r][j]), vj, a[r]);
      for (int r = 0; r < 8; r++)
        a[8 + r] = _mm512_fmadd_ps (_mm512_set1_ps (pr[r][j8]), vj, a[8 + r]);
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
                          tail_mask (dv - t2 - 16), 8, O + (i + 8) * ldo + t2,
                          ldo, NRM (i + 8), &bad);
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
                              _mm512_maskz_loadu_ps (tm, v + (j + 1) * ldv + t),
                              a1);
      }
      if (j < nk)
        a0 = _mm512_fmadd_ps (_mm512_set1_ps (pi[j]),
                              _mm512_maskz_loadu_ps (tm, v + j * ldv + t), a0);
      pv_store_avx512 (O + i * ldo + t, tm, _mm512_add_ps (a0, a1), NRM (i), 0,
                       &bad);
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

/* See add_rows_portable. */
AVX512 static void
add_rows_avx512 (const float *restrict x, size_t ldx, float *restrict y,
                 size_t ldy, size_t rows, size_t d)
{
  for (size_t i = 0; i < rows; i++)
    for (size_t t = 0; t < d; t += 16) {
      const __mmask16 tm = tail_mask (d - t);
      float *r = y + i * ldy + t;
      _mm512_mask_storeu_ps (r, tm,
                             _mm512_add_ps (_mm512_maskz_loadu_ps (tm, r),
                                            _mm512_maskz_loadu_ps (tm,
                                                                   x + i * ldx +
                                                                       t)));
    }
}

/* One row of norm_f_avx512 of d <= 64 floats, kept in registers
 * between the passes (the same operations as the loop below). */
AVX512 static inline __attribute__ ((always_inline)) void
norm_f_row64 (const float *xr, float *yr, size_t d, const float *w,
              const float *b, float eps)
{
  __m512 v[4];
  __mmask16 tm[4];
  const size_t nv = (d + 15) / 16;
  __m512 s = _mm512_setzero_ps ();
  for (size_t k = 0; k < nv; k++) {
    tm[k] = tail_mask (d - 16 * k);
    v[k] = _mm512_maskz_loadu_ps (tm[k], xr + 16 * k);
    s = _mm512_add_ps (s, v[k]);
  }
  const __m512 mean = _mm512_set1_ps (_mm512_reduce_add_ps (s) / (float) d);
  __m512 q = _mm512_setzero_ps ();
  for (size_t k = 0; k < nv; k++) {
    v[k] = _mm512_maskz_sub_ps (tm[k], v[k], mean);
    q = _mm512_fmadd_ps (v[k], v[k], q);
  }
  const float var = _mm512_reduce_add_ps (q) / (float) d;
  const __m512 inv = _mm512_set1_ps (1.0f / sqrtf (var + eps));
  for (size_t k = 0; k < nv; k++) {
    __m512 o = _mm512_mul_ps (v[k], inv);
    if (w != NULL)
      o = _mm512_mul_ps (o, _mm512_maskz_loadu_ps (tm[k], w + 16 * k));
    if (b != NULL)
      o = _mm512_add_ps (o, _mm512_maskz_loadu_ps (tm[k], b + 16 * k));
    _mm512_mask_storeu_ps (yr + 16 * k, tm[k], o);
  }
}

/* See norm_f_portable: each pass in 16 float lanes (lane l takes the
 * entries l, l + 16, ...), the lanes added by the reduction's tree; rows
 * of up to 64 floats stay in registers between the passes. */
AVX512 static void
norm_f_avx512 (const float *x, size_t ldx, float *y, size_t ldy, size_t rows,
               size_t d, const float *w, const float *b, float eps)
{
  for (size_t i = 0; i < rows && d <= 64; i++)
    norm_f_row64 (x + i * ldx, y + i * ldy, d, w, b, eps);
  for (size_t i = 0; i < rows && d > 64; i++) {
    const float *xr = x + i * ldx;
    float *yr = y + i * ldy;
    __m512 s = _mm512_setzero_ps ();
    for (size_t t = 0; t < d; t += 16)
      s = _mm512_add_ps (s, _mm512_maskz_loadu_ps (tail_mask (d - t), xr + t));
    const __m512 mean = _mm512_set1_ps (_mm512_reduce_add_ps (s) / (float) d);
    __m512 v = _mm512_setzero_ps ();
    for (size_t t = 0; t < d; t += 16) {
      const __mmask16 tm = tail_mask (d - t);
      __m512 e = _mm512_maskz_sub_ps (tm, _mm512_maskz_loadu_ps (tm, xr + t),
                                      mean);
      v = _mm512_fmadd_ps (e, e, v);
    }
    const float var = _mm512_reduce_add_ps (v) / (float) d;
    const __m512 inv = _mm512_set1_ps (1.0f / sqrtf (var + eps));
    for (size_t t = 0; t < d; t += 16) {
      const __mmask16 tm = tail_mask (d - t);
      __m512 o =
          _mm512_mul_ps (_mm512_sub_ps (_mm512_maskz_loadu_ps (tm, xr + t),
                                        mean),
                         inv);
      if (w != NULL)
        o = _mm512_mul_ps (o, _mm512_maskz_loadu_ps (tm, w + t));
      if (b != NULL)
        o = _mm512_add_ps (o, _mm512_maskz_loadu_ps (tm, b + t));
      _mm512_mask_storeu_ps (yr + t, tm, o);
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
      if (cnt - i0 >= 16 &&
          (ok == NULL ||
           _mm_cmpeq_epi8_mask (_mm_loadu_si128 ((const __m128i *) (ok + i0)),
                                _mm_setzero_si128 ()) == 0))
        for (size_t i = 0; i < 16; i++)
          r[i] = _mm512_maskz_loadu_ps (tm, x + (i0 + i) * ldx + t0);
      else
        for (size_t i = 0; i < 16; i++)
          r[i] = _mm512_maskz_loadu_ps (i0 + i < cnt &&
                                                (ok == NULL || ok[i0 + i])
                                            ? tm
                                            : 0,
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

/* The exp passes of sattn_softmax_rows: the body of exp_sum_avx512
 * inlined, one dispatch for all rows.  Each row's eight partial sums are
 * added (as exp_sum_body_avx512 does) after all the passes: no pass waits
 * for the previous row's additions.  Then the normalisers, eight rows at
 * a time: 1 / sum in double rounded to float, as the scalar loop of
 * sattn_softmax_rows computes them (the same bytes); rows[i] = 2 where
 * the sum is NaN. */
AVX512 static void
softmax_rows_avx512 (float *S, size_t lds, size_t m, size_t n,
                     const float *qmax, float scale, uint8_t *rows, float *norm)
{
  const int fused = pow2_scale (scale);
  double part[64][8], sums[64];
  for (size_t i = 0; i < m; i++)
    if (rows[i] == 1)
      _mm512_storeu_pd (part[i],
                        fused
                            ? exp_part_avx512 (S + i * lds, n, scale,
                                               qmax[i] * scale, 1, NULL, NULL)
                            : exp_part_avx512 (S + i * lds, n, scale,
                                               qmax[i] * scale, 0, NULL, NULL));
  for (size_t i = 0; i < m; i++)
    sums[i] = rows[i] == 1 ? _mm512_reduce_add_pd (_mm512_loadu_pd (part[i]))
                           : 1.0;
  for (size_t i = 0; i < m; i += 8) {
    __mmask8 in = m - i >= 8 ? (__mmask8) 0xff
                             : (__mmask8) ((1u << (m - i)) - 1u);
    __mmask8 live =
        _mm_mask_cmpeq_epi8_mask (in, _mm_maskz_loadu_epi8 (in, rows + i),
                                  _mm_set1_epi8 (1));
    __m512d sum = _mm512_maskz_loadu_pd (in, sums + i);
    __mmask8 nan = _mm512_mask_cmp_pd_mask (live, sum, sum, _CMP_UNORD_Q);
    __mmask8 ok = live & (__mmask8) ~nan;
    __m256 nr = _mm512_cvtpd_ps (
        _mm512_maskz_div_pd (ok, _mm512_set1_pd (1.0), sum));
    _mm256_mask_storeu_ps (norm + i, ok, nr);
    _mm_mask_storeu_epi8 (rows + i, nan, _mm_set1_epi8 (2));
  }
}

/* ------------------------------------------------ double linear loops */

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
#define LIN512_ROWS(R, cond, xf, yf)                                         \
  for (; i + (R) <= rows && (cond); i += (R)) {                              \
    size_t j = 0;                                                            \
    for (; j + 16 <= n; j += 16)                                             \
      tile512 (x + i * ldx, xf, ldx, Wt, ldw, b, din, n, j, y + i * ldy, yf, \
               ldy, (R), 1);                                                 \
    if (j < n)                                                               \
      tile512 (x + i * ldx, xf, ldx, Wt, ldw, b, din, n, j, y + i * ldy, yf, \
               ldy, (R), 0);                                                 \
  }

/* Blocks of 12 rows, but 16 rows left go as 8 + 8 (not 12 + 4). */
#define LIN512(name, xf, yf, XT, YT)                                      \
  AVX512 static void name (const XT *x, size_t ldx, size_t rows,          \
                           const double *Wt, size_t ldw, const double *b, \
                           size_t din, size_t n, YT *y, size_t ldy)       \
  {                                                                       \
    size_t i = 0;                                                         \
    LIN512_ROWS (12, rows - i != 16, xf, yf)                              \
    LIN512_ROWS (8, 1, xf, yf)                                            \
    LIN512_ROWS (4, 1, xf, yf)                                            \
    LIN512_ROWS (1, 1, xf, yf)                                            \
  }

LIN512 (lin512_dd, 0, 0, double, double)
LIN512 (lin512_df, 0, 1, double, float)
LIN512 (lin512_ff, 1, 1, float, float)

/* rows × din floats (row stride ldx) into doubles (row stride din). */
AVX512 static void
cvt512 (const float *x, size_t ldx, size_t rows, size_t din, double *xb)
{
  for (size_t i = 0; i < rows; i++)
    for (size_t t = 0; t < din; t += 8) {
      const __mmask8 m = din - t >= 8 ? 0xff
                                      : (__mmask8) ((1u << (din - t)) - 1u);
      _mm512_mask_storeu_pd (xb + i * din + t, m,
                             _mm512_cvtps_pd (
                                 _mm256_maskz_loadu_ps (m, x + i * ldx + t)));
    }
}

/* ------------------------------------------------------ erf and GELU */

/* erf256 (kernels-avx2.c) on 16 lanes: the 8 segments' coefficients
 * twice in a vector, picked by the low 4 bits of the index. */
AVX512 static inline __attribute__ ((always_inline)) __m512
erf512 (__m512 x)
{
  const __m512 ax = _mm512_abs_ps (x);
  const __m512i i = _mm512_cvttps_epi32 (
      _mm512_mul_ps (ax, _mm512_set1_ps (2.0f)));
#define ERF_TAB(k)                                   \
  _mm512_permutexvar_ps (i, _mm512_broadcast_f32x8 ( \
                                _mm256_load_ps (sattn_erf_tab[k])))
  const __m512 t = _mm512_sub_ps (ax, ERF_TAB (SATTN_ERF_CTR));
  __m512 acc = ERF_TAB (SATTN_ERF_Q6);
  for (int k = SATTN_ERF_Q5; k >= SATTN_ERF_Q0; k--)
    acc = _mm512_fmadd_ps (acc, t, ERF_TAB (k));
  acc = _mm512_fmadd_ps (acc, t, ERF_TAB (SATTN_ERF_C1L));
  acc = _mm512_fmadd_ps (acc, t,
                         _mm512_fmadd_ps (ERF_TAB (SATTN_ERF_E), t,
                                          ERF_TAB (SATTN_ERF_C0L)));
  acc = _mm512_fmadd_ps (ERF_TAB (SATTN_ERF_C1H), t, acc);
  __m512 r = _mm512_add_ps (ERF_TAB (SATTN_ERF_C0H), acc);
#undef ERF_TAB
  r = _mm512_mask_mov_ps (r,
                          _mm512_cmp_ps_mask (ax, _mm512_set1_ps (4.0f),
                                              _CMP_GE_OQ),
                          _mm512_set1_ps (1.0f));
  /* r | (x & sign) */
  return _mm512_castsi512_ps (
      _mm512_ternarylogic_epi32 (_mm512_castps_si512 (r),
                                 _mm512_castps_si512 (x),
                                 _mm512_set1_epi32 (INT32_MIN), 0xf8));
}

AVX512 static void
erf_avx512 (const float *restrict x, float *restrict y, size_t n)
{
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff
                                    : (__mmask16) ((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps (y + i, m, erf512 (_mm512_maskz_loadu_ps (m, x + i)));
  }
}

/* gelu_f_portable on 16 floats at a time, the tail masked. */
AVX512 static void
gelu_f_avx512 (float *restrict h, size_t n)
{
  const __m512 s = _mm512_set1_ps ((float) M_SQRT1_2);
  const __m512 half = _mm512_set1_ps (0.5f), one = _mm512_set1_ps (1.0f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff
                                    : (__mmask16) ((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps (m, h + i);
    const __m512 e = erf512 (_mm512_mul_ps (v, s));
    _mm512_mask_storeu_ps (h + i, m,
                           _mm512_mul_ps (_mm512_mul_ps (half, v),
                                          _mm512_add_ps (one, e)));
  }
}

/* gelu1_portable (kernels-portable.h) on 16 doubles at a time, the tail
 * masked. */
AVX512 static void
gelu_avx512 (double *restrict h, size_t n)
{
  const __m512d s = _mm512_set1_pd (M_SQRT1_2), half = _mm512_set1_pd (0.5);
  const __m512d one = _mm512_set1_pd (1.0);
  for (size_t i = 0; i < n; i += 16) {
    const size_t left = n - i;
    const __mmask8 m0 = left >= 8 ? 0xff : (__mmask8) ((1u << left) - 1u);
    const __mmask8 m1 = left >= 16  ? 0xff
                        : left <= 8 ? 0
                                    : (__mmask8) ((1u << (left - 8)) - 1u);
    const __m512d v0 = _mm512_maskz_loadu_pd (m0, h + i);
    const __m512d v1 = _mm512_maskz_loadu_pd (m1, h + i + 8);
    const __m512 e = erf512 (
        _mm512_insertf32x8 (_mm512_castps256_ps512 (
                                _mm512_cvtpd_ps (_mm512_mul_pd (v0, s))),
                            _mm512_cvtpd_ps (_mm512_mul_pd (v1, s)), 1));
    const __m512d e0 = _mm512_cvtps_pd (_mm512_castps512_ps256 (e));
    const __m512d e1 = _mm512_cvtps_pd (_mm512_extractf32x8_ps (e, 1));
    const __m512d y0 = _mm512_mul_pd (_mm512_mul_pd (half, v0),
                                      _mm512_add_pd (one, e0));
    const __m512d y1 = _mm512_mul_pd (_mm512_mul_pd (half, v1),
                                      _mm512_add_pd (one, e1));
    _mm512_mask_storeu_pd (h + i, m0, _mm512_cvtps_pd (_mm512_cvtpd_ps (y0)));
    _mm512_mask_storeu_pd (h + i + 8, m1,
                           _mm512_cvtps_pd (_mm512_cvtpd_ps (y1)));
  }
}

/* relu_avx2 (kernels-avx2.c) on 8 doubles at a time, the tail masked. */
AVX512 static void
relu_avx512 (double *restrict h, size_t n)
{
  const __m512d zero = _mm512_setzero_pd ();
  for (size_t i = 0; i < n; i += 8) {
    const __mmask8 m = n - i >= 8 ? 0xff : (__mmask8) ((1u << (n - i)) - 1u);
    _mm512_mask_storeu_pd (h + i, m,
                           _mm512_max_pd (_mm512_cvtps_pd (_mm512_cvtpd_ps (
                                              _mm512_maskz_loadu_pd (m,
                                                                     h + i))),
                                          zero));
  }
}

/* ------------------------------------------------------------- table */

/* The entries over the kernels above, in the default target (as the
 * run-time dispatch that called them was: none of the kernels is inlined
 * into them). */
static void
qk_max_entry_avx512 (const float *q, size_t ldq, const float *kt, size_t ldkt,
                     size_t m, size_t nk, size_t dh, float *S, size_t lds,
                     float *rmax)
{
  if (dh <= QK_KBLOCK) {
    qk_max_avx512 (q, ldq, kt, ldkt, m, nk, dh, S, lds, rmax);
    return;
  }
  sattn_qk_max_from (qk_avx512, q, ldq, kt, ldkt, m, nk, dh, S, lds, rmax);
}

static void
pv_entry_avx512 (const float *P, size_t ldp, size_t m, size_t nk,
                 const float *v, size_t ldv, size_t dv, float *O, size_t ldo)
{
  pv_avx512 (P, ldp, m, nk, v, ldv, dv, O, ldo, NULL);
}

static int
pv_norm_entry_avx512 (const float *P, size_t ldp, size_t m, size_t nk,
                      const float *v, size_t ldv, size_t dv, const float *norm,
                      float *O, size_t ldo)
{
  return pv_avx512 (P, ldp, m, nk, v, ldv, dv, O, ldo, norm);
}

/* softmax_rows_avx512 on blocks of at most 64 rows. */
static void
softmax_rows_entry_avx512 (float *S, size_t lds, size_t m, size_t n,
                           const float *qmax, float scale, uint8_t *rows,
                           float *norm)
{
  for (size_t i0 = 0; i0 < m; i0 += 64) {
    size_t i1 = m - i0 < 64 ? m : i0 + 64;
    softmax_rows_avx512 (S + i0 * lds, lds, i1 - i0, n, qmax + i0, scale,
                         rows + i0, norm + i0);
  }
}

const SattnKernels sattn_kernels_avx512 = {
  .name = "avx512",
  .qk = qk_avx512,
  .qk_max = qk_max_entry_avx512,
  .softmax_rows = softmax_rows_entry_avx512,
  .pv = pv_entry_avx512,
  .pv_norm = pv_norm_entry_avx512,
  .softmax_scan = scan_avx512,
  .softmax_max = max_avx512,
  .exp_sum = exp_sum_avx512,
  .exp_sum_stats = exp_sum_stats_avx512,
  .mul = mul_avx512,
  .finite = finite_avx512,
  .copy_rows = copy_rows_avx512,
  .transpose_rows = transpose_rows_avx512,
  .add_bias = add_bias_avx512,
  .linear_dd = lin512_dd,
  .linear_df = lin512_df,
  .linear_ff = lin512_ff,
  .widen = cvt512,
  .erf = erf_avx512,
  .gelu = gelu_avx512,
  .relu = relu_avx512,
  .norm_f = norm_f_avx512,
  .gelu_f = gelu_f_avx512,
  .add_rows = add_rows_avx512,
};
#endif /* SATTN_HAVE_X86 */
