/* The float erf of the kernel table (GELU's, core/cpu/kernels-portable.h)
 * against libm's double erf, and GELU on doubles against the formula in
 * double, at every SIMD level this CPU has.
 *
 *   test-erf [STRIDE]
 *
 * erf is odd and 1 from |x| = 3.92 on, so the floats that matter are
 * those of [0, 4): every STRIDE-th bit pattern of them (default 61; 1
 * walks all 1.08e9 of them, about a minute per level), plus every 65521st
 * pattern from 4 to +inf, and +-0, +-inf, NaN.  For each:
 *   - the error against erf in double is at most 0.7 ulp of the result
 *     (the ulp of a float of that magnitude; 2^-149 below the normal
 *     range);
 *   - erf (-x) is -erf (x) bit for bit, erf (+-0) = +-0, erf (+-inf) =
 *     +-1, |x| >= 4 gives +-1, NaN gives NaN;
 *   - every level gives the bytes of the portable loop.
 * GELU (the table's gelu: doubles in, rounded to float, kept as double)
 * on 100003 values v = +-(0 to 12) and tails of every length up to 40
 * (the vector loops' remainders): within ulp (r) + 2^-24 |v| of
 * r = 0.5 v (1 + erf (v / sqrt 2)) in double (the float rounding of the
 * result, of erf near +-1 and of its argument), the same bytes at every
 * level.  ReLU (the table's relu: rounded to float, then max (v, 0))
 * against that formula bit for bit at every level, NaN, -0, +-inf,
 * doubles beyond the float range and below its subnormals included, at
 * every tail length.  Prints the largest errors seen.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include "rng.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x5851f42d4c957f2dull;

/* The spacing of floats at the magnitude of r (2^-149 below the normal
 * range). */
static double
ulp_of (double r)
{
  int k;
  frexp (r, &k);
  if (k - 1 < -126)
    k = -125;
  return ldexp (1.0, k - 1 - 23);
}

static float
from_bits (uint32_t u)
{
  float f;
  memcpy (&f, &u, sizeof f);
  return f;
}

static uint32_t
bits_of (float f)
{
  uint32_t u;
  memcpy (&u, &f, sizeof u);
  return u;
}

enum { CHUNK = 8192 };

typedef struct {
  double worst_ulp;
  float worst_x;
  uint64_t tested, fails;
} ErfStats;

/* One chunk of inputs x[0, n) at every level: checks and statistics. */
static void
check_chunk (const float *x, size_t n, int native, ErfStats *st)
{
  static float y[3][CHUNK], yn[CHUNK], xn[CHUNK];
  for (int level = 0; level <= native; level++) {
    sattn_simd_force (level);
    sattn_kernels ()->erf (x, y[level], n);
    if (level > 0 && memcmp (y[0], y[level], n * sizeof (float)) != 0) {
      for (size_t i = 0; i < n; i++)
        if (bits_of (y[0][i]) != bits_of (y[level][i])) {
          if (st->fails++ < 10)
            printf ("FAIL erf (%a): level %d gives %a, portable %a\n",
                    (double) x[i], level, (double) y[level][i],
                    (double) y[0][i]);
        }
    }
  }
  /* erf (-x) = -erf (x) bit for bit (at the native level). */
  for (size_t i = 0; i < n; i++)
    xn[i] = -x[i];
  sattn_kernels ()->erf (xn, yn, n);
  for (size_t i = 0; i < n; i++) {
    const double r = erf ((double) x[i]);
    const float got = y[0][i];
    if (isnan (x[i])) {
      if (!isnan (got) || !isnan (yn[i])) {
        if (st->fails++ < 10)
          printf ("FAIL erf (NaN) = %a, erf (-NaN) = %a\n", (double) got,
                  (double) yn[i]);
      }
      continue;
    }
    if (bits_of (yn[i]) != (bits_of (got) ^ 0x80000000u)) {
      if (st->fails++ < 10)
        printf ("FAIL erf (-%a) = %a, not -erf (%a) = %a\n", (double) x[i],
                (double) yn[i], (double) x[i], (double) got);
    }
    if (fabsf (x[i]) >= 4.0f && got != copysignf (1.0f, x[i])) {
      if (st->fails++ < 10)
        printf ("FAIL erf (%a) = %a, not +-1\n", (double) x[i], (double) got);
    }
    if (x[i] == 0.0f && bits_of (got) != bits_of (x[i])) {
      if (st->fails++ < 10)
        printf ("FAIL erf (%a) = %a, not %a\n", (double) x[i], (double) got,
                (double) x[i]);
    }
    const double e = fabs ((double) got - r) / ulp_of (r);
    if (e > st->worst_ulp) {
      st->worst_ulp = e;
      st->worst_x = x[i];
    }
    if (!(e <= 0.7)) {
      if (st->fails++ < 10)
        printf ("FAIL erf (%a) = %a: %.3f ulp from %.17g\n", (double) x[i],
                (double) got, e, r);
    }
    st->tested++;
  }
}

static int
test_erf (unsigned stride, int native)
{
  static float x[CHUNK];
  size_t fill = 0;
  ErfStats st = { 0.0, 0.0f, 0, 0 };
  const uint32_t four = bits_of (4.0f), inf = bits_of (INFINITY);

  for (uint64_t u = 0; u < inf; u += u < four ? stride : 65521) {
    x[fill++] = from_bits ((uint32_t) u);
    if (fill == CHUNK) {
      check_chunk (x, fill, native, &st);
      fill = 0;
    }
  }
  x[fill++] = INFINITY;
  x[fill++] = NAN;
  x[fill++] = -0.0f;
  x[fill++] = 3.9999998f;
  check_chunk (x, fill, native, &st);
  printf ("erf: %llu inputs (stride %u below 4), levels 0 to %d: largest "
          "error %.3f ulp at %a; %llu failures\n",
          (unsigned long long) st.tested, stride, native, st.worst_ulp,
          (double) st.worst_x, (unsigned long long) st.fails);
  return st.fails != 0 || st.tested == 0;
}

static int
test_gelu (int native)
{
  enum { N = 100003 };
  double *v = malloc (N * sizeof (double));
  double *h[3] = { NULL, NULL, NULL };
  int fails = 0;
  double worst = 0.0, worst_v = 0.0;

  for (size_t i = 0; i < N; i++) {
    /* Uniform in [-12, 12], every tenth a small one near 0. */
    double u = test_splitmix_uniform (&rng_state);
    v[i] = (i % 10 == 0 ? 1e-3 : 12.0) * (2.0 * u - 1.0);
  }
  for (int level = 0; level <= native; level++) {
    sattn_simd_force (level);
    h[level] = malloc (N * sizeof (double));
    memcpy (h[level], v, N * sizeof (double));
    sattn_kernels ()->gelu (h[level], N);
    /* Every tail length: runs of 1 to 40 from various offsets. */
    for (size_t len = 1, off = 7; len <= 40; off += len, len++) {
      double tmp[40];
      memcpy (tmp, v + off, len * sizeof (double));
      sattn_kernels ()->gelu (tmp, len);
      if (memcmp (tmp, h[level] + off, len * sizeof (double)) != 0) {
        printf ("FAIL gelu level %d: a run of %zu differs from the whole "
                "array's\n",
                level, len);
        fails++;
      }
    }
    if (level > 0 && memcmp (h[0], h[level], N * sizeof (double)) != 0) {
      printf ("FAIL gelu: level %d differs from the portable loop\n", level);
      fails++;
    }
  }
  for (size_t i = 0; i < N; i++) {
    const double r = 0.5 * v[i] * (1.0 + erf (v[i] / sqrt (2.0)));
    const double err = fabs (h[0][i] - r);
    const double tol = ulp_of (r) + 0x1p-24 * fabs (v[i]);
    if (h[0][i] != (double) (float) h[0][i]) {
      if (fails++ < 10)
        printf ("FAIL gelu (%.17g) = %.17g: not a float\n", v[i], h[0][i]);
    }
    if (!(err <= tol)) {
      if (fails++ < 10)
        printf ("FAIL gelu (%.17g) = %.17g, want %.17g (error %.3g, "
                "tolerance %.3g)\n",
                v[i], h[0][i], r, err, tol);
    }
    if (err / tol > worst) {
      worst = err / tol;
      worst_v = v[i];
    }
  }
  printf ("gelu: %d values, levels 0 to %d: largest error %.3f of the "
          "tolerance (at v = %.9g); %d failures\n",
          (int) N, native, worst, worst_v, fails);
  for (int level = 0; level <= native; level++)
    free (h[level]);
  free (v);
  return fails != 0;
}

static int
test_relu (int native)
{
  enum { N = 1000 };
  static const double special[] = { NAN,
                                    -NAN,
                                    0.0,
                                    -0.0,
                                    INFINITY,
                                    -INFINITY,
                                    1e300,
                                    -1e300,
                                    1e-320,
                                    -1e-320,
                                    3.4028235677973366e38,
                                    -3.4028235677973366e38,
                                    0x1p-150,
                                    -0x1p-150,
                                    1.0000000000000002 };
  const size_t ns = sizeof (special) / sizeof (special[0]);
  double v[N], h[N], want[N];
  int fails = 0;
  for (size_t i = 0; i < N; i++)
    v[i] = i < ns ? special[i]
                  : 4.0 * (test_splitmix_uniform (&rng_state) - 0.5);
  for (size_t i = 0; i < N; i++) {
    double r = (double) (float) v[i];
    want[i] = r > 0.0 ? r : 0.0;
  }
  for (int level = 0; level <= native; level++) {
    sattn_simd_force (level);
    for (size_t len = 1; len <= 40; len++) {
      /* The specials at every position of a short run. */
      memcpy (h, v, len * sizeof (double));
      sattn_kernels ()->relu (h, len);
      if (memcmp (h, want, len * sizeof (double)) != 0) {
        printf ("FAIL relu level %d: a run of %zu differs\n", level, len);
        fails++;
      }
    }
    memcpy (h, v, sizeof (h));
    sattn_kernels ()->relu (h, N);
    for (size_t i = 0; i < N; i++)
      if (memcmp (&h[i], &want[i], sizeof (double)) != 0 && fails++ < 10)
        printf ("FAIL relu level %d (%.17g) = %.17g, want %.17g\n", level, v[i],
                h[i], want[i]);
  }
  printf ("relu: %d values at levels 0 to %d; %d failures\n", (int) N, native,
          fails);
  return fails != 0;
}

int
main (int argc, char **argv)
{
  unsigned stride = 61;
  if (argc > 1) {
    char *end;
    unsigned long s = strtoul (argv[1], &end, 10);
    if (*end != '\0' || s == 0 || s > 1000000) {
      fprintf (stderr, "usage: test-erf [STRIDE], 1 <= STRIDE <= 1000000\n");
      return 2;
    }
    stride = (unsigned) s;
  }
  int native = sattn_simd_level ();
  if (native > 2)
    native = 2;
  int fails = test_erf (stride, native);
  fails += test_gelu (native);
  fails += test_relu (native);
  sattn_simd_force (native);
  printf ("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
