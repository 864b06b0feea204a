/* Accuracy of the vectorised exp used by the softmax against libm expf.
 *
 * Domain: the softmax only exponentiates x - max <= 0, so every float in
 * [-104, 0] matters (below about -103.97 expf is 0).  We walk all floats of
 * [-87.33, 0] (the normal range of the result) with a stride of 7 in the bit
 * pattern, plus every float of the subnormal-result range [-104, -87.33]
 * with a stride of 61, and -inf.  Bound: 2 ulp for normal results; for
 * subnormal results an absolute error of 2 subnormal steps (2^-149 each);
 * the returned sum within 2.4e-7 relative of the sum of expf (2 ulp of
 * float; the vector code adds four vectors in float, each lane at most 4
 * terms in [0, 1], then in double: at most 3 * 2^-24 = 1.8e-7 from the
 * partials on top of the elements' errors, in practice far less).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int64_t
ordered (float f)
{
  int32_t i;
  memcpy (&i, &f, sizeof i);
  return i < 0 ? (int64_t) INT32_MIN - i : i;
}

static int
run (int level)
{
  enum { CHUNK = 4096 };
  float buf[CHUNK], xs[CHUNK];
  int64_t worst_ulp = 0, worst_sub = 0;
  float worst_x = 0.0f;
  size_t tested = 0, fill = 0;
  double sum_err = 0.0;

  sattn_simd_force (level);
  uint32_t start, stop;
  float a = -0.0f, b = -87.33f, c = -104.0f;
  memcpy (&start, &a, 4);
  memcpy (&stop, &c, 4);
  (void) b;
  for (uint64_t bits = start; bits <= stop;) {
    float x;
    uint32_t u = (uint32_t) bits;
    memcpy (&x, &u, 4);
    xs[fill++] = x;
    bits += x > -87.33f ? 7 : 61;
    if (fill == CHUNK || bits > stop) {
      memcpy (buf, xs, fill * sizeof (float));
      double s = sattn_exp_sum (buf, fill, 1.0f, 0.0f);
      double ref_sum = 0.0;
      for (size_t i = 0; i < fill; i++) {
        float r = expf (xs[i]);
        ref_sum += r;
        if (!(buf[i] >= 0.0f) || isinf (buf[i])) {
          printf ("FAIL level %d: exp(%.9g) = %g\n", level, xs[i], buf[i]);
          return 1;
        }
        if (r >= 1.17549435e-38f) {
          int64_t d = llabs (ordered (buf[i]) - ordered (r));
          if (d > worst_ulp) {
            worst_ulp = d;
            worst_x = xs[i];
          }
        } else {
          int64_t d = llabs (ordered (buf[i]) - ordered (r));
          if (d > worst_sub)
            worst_sub = d;
        }
      }
      double rel = fabs (s - ref_sum) / (ref_sum > 0 ? ref_sum : 1.0);
      if (rel > sum_err)
        sum_err = rel;
      tested += fill;
      fill = 0;
    }
  }
  float minf[3] = { -INFINITY, -1e30f, 0.0f };
  sattn_exp_sum (minf, 3, 1.0f, 0.0f);
  /* A NaN input makes the sum NaN (the softmax relies on it when it skips
   * the NaN test of the scores, see sattn_qk_max), at every position of
   * a vector body, a tail, with a power-of-two scale and another. */
  int nan_ok = 1;
  for (size_t len = 1; len <= 150 && nan_ok; len += 7)
    for (size_t at = 0; at < len && nan_ok; at++)
      for (int sc = 0; sc < 2; sc++) {
        float row[150];
        for (size_t j = 0; j < len; j++)
          row[j] = -(float) j;
        row[at] = NAN;
        double s = sattn_exp_sum (row, len, sc ? 0.25f : 0.3f, 0.0f);
        nan_ok &= s != s;
      }
  if (!nan_ok)
    printf ("FAIL level %d: a NaN input did not make the sum NaN\n", level);
  int ok = worst_ulp <= 2 && worst_sub <= 2 && minf[0] == 0.0f &&
           minf[1] == 0.0f && minf[2] == 1.0f && sum_err < 2.4e-7 && nan_ok;
  printf ("%s exp level %d (%s): %zu inputs, max %lld ulp (at x=%.9g), "
          "subnormal max %lld steps, exp(-inf)=%g, sum rel err %.3g\n",
          ok ? "PASS" : "FAIL", level,
          level == 0   ? "portable"
          : level == 1 ? "AVX2+FMA"
                       : "AVX-512",
          tested, (long long) worst_ulp, worst_x, (long long) worst_sub,
          minf[0], sum_err);
  return ok ? 0 : 1;
}

/* The softmax's fast pass 1 (sattn_softmax_max): the max of n floats and
 * whether all are finite, for every length up to 200 (vector bodies and
 * tails) with a NaN, +inf or -inf at every position; and the exp pass's
 * scale: exp (y * scale - mx) gives the same bytes as scaling y first
 * (what the masked scan does) and exp (y - mx). */
static int
run_max_scale (int level)
{
  enum { N = 200 };
  float s[N], a[N], b[N];
  int bad = 0;
  uint32_t seed = 12345u;
  sattn_simd_force (level);
  for (size_t n = 1; n <= N && !bad; n++) {
    float ref = -INFINITY;
    for (size_t j = 0; j < n; j++) {
      seed = seed * 1664525u + 1013904223u;
      s[j] = ((float) (seed >> 8) / 16777216.0f - 0.5f) * 1e4f;
      ref = s[j] > ref ? s[j] : ref;
    }
    int fin = 0;
    float m = sattn_softmax_max (s, n, &fin);
    if (m != ref || !fin) {
      printf ("FAIL level %d: max of %zu floats %g (want %g), finite %d\n",
              level, n, m, ref, fin);
      bad = 1;
    }
    static const float odd[3] = { NAN, INFINITY, -INFINITY };
    for (size_t j = 0; j < n && !bad; j++)
      for (int k = 0; k < 3; k++) {
        float keep = s[j];
        s[j] = odd[k];
        fin = 1;
        sattn_softmax_max (s, n, &fin);
        s[j] = keep;
        if (fin) {
          printf ("FAIL level %d: %g at %zu of %zu not detected\n", level,
                  odd[k], j, n);
          bad = 1;
          break;
        }
      }
    /* Scale inside the exp pass vs before it: same bytes, with a scale
     * that rounds the products and with a power of two (d_head 16, where
     * the AVX-512 pass fuses the product and the subtraction). */
    static const float scales[2] = { 0.35355339f, 0.25f };
    for (int sc = 0; sc < 2 && !bad; sc++) {
      const float scale = scales[sc];
      float mx = ref * scale;
      for (size_t j = 0; j < n; j++) {
        a[j] = s[j];
        b[j] = s[j] * scale;
      }
      if (s[n / 2] != ref)
        a[n / 2] = b[n / 2] = -INFINITY;
      double sa = sattn_exp_sum (a, n, scale, mx);
      double sb = sattn_exp_sum (b, n, 1.0f, mx);
      if (sa != sb || memcmp (a, b, n * sizeof (float)) != 0 || !(sa >= 1.0)) {
        printf ("FAIL level %d: exp pass with scale %g differs from scaled "
                "input (n %zu, sums %.17g %.17g)\n",
                level, scale, n, sa, sb);
        bad = 1;
      }
    }
  }
  printf ("%s softmax max and exp scale level %d: lengths 1..%d\n",
          bad ? "FAIL" : "PASS", level, N);
  return bad;
}

int
main (void)
{
  static const char *names[] = { "portable", "AVX2+FMA", "AVX-512" };
  int native = sattn_simd_level ();
  int fails = 0, runs = 0;
  for (int level = 0; level <= 2; level++) {
    if (level > native) {
      printf ("SKIP %s exp: not supported by this CPU\n", names[level]);
      continue;
    }
    fails += run (level);
    fails += run_max_scale (level);
    runs += 2;
  }
  sattn_simd_force (native);
  printf ("%d passed, %d failed\n", runs - fails, fails);
  return fails ? 1 : 0;
}
