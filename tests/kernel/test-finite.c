/* sattn_finite (the frame rule's test: every float finite) at every SIMD
 * level the machine has, against isfinite over each element.
 *
 * For every length 0..300: arrays of finite values of every kind (±0,
 * subnormals, ±FLT_MIN, ±FLT_MAX, ordinary values), then the same with one
 * NaN, +inf or -inf at every position (the vector bodies, their unrolled
 * blocks and the tails), then with two.  Also with the FPU's flush-to-zero
 * and denormals-are-zero modes on (a subnormal is still finite), which
 * GStreamer plugins in the same process may set.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif

#define MAXN 300

static int
reference (const float *x, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (!isfinite (x[i]))
      return 0;
  return 1;
}

static int failures;

static void
check (int level, const char *what, const float *x, size_t n, size_t at)
{
  int got = sattn_finite (x, n), want = reference (x, n);
  if (got != want) {
    if (failures < 20)
      printf ("FAIL level %d: %s, n %zu, at %zu: got %d, want %d\n", level,
              what, n, at, got, want);
    failures++;
  }
}

static void
run (int level, TestRng *rng)
{
  static const float kinds[] = { 0.0f,     -0.0f,   1e-45f,   -1e-45f,
                                 1e-40f,   FLT_MIN, -FLT_MIN, FLT_MAX,
                                 -FLT_MAX, 1.0f,    -3.5f,    1e38f };
  const size_t nk = sizeof kinds / sizeof kinds[0];
  const float bad[] = { NAN, INFINITY, -INFINITY };
  static const char *bad_name[] = { "NaN", "+inf", "-inf" };
  /* One spare float past the end: it must never be read as part of x. */
  float *x = malloc ((MAXN + 1) * sizeof (float));
  if (x == NULL) {
    printf ("FAIL: out of memory\n");
    failures++;
    return;
  }
  sattn_simd_force (level);
  for (size_t n = 0; n <= MAXN; n++) {
    for (size_t i = 0; i < n; i++) {
      float u = test_rng_uniform (rng);
      x[i] = i % 3 == 0 ? kinds[(size_t) ((u + 1.0f) * 0.5f * nk) % nk]
                        : u * 100.0f;
    }
    x[n] = NAN; /* past the end */
    check (level, "all finite", x, n, n);
    for (int b = 0; b < 3; b++)
      for (size_t at = 0; at < n; at++) {
        float keep = x[at];
        x[at] = bad[b];
        check (level, bad_name[b], x, n, at);
        if (at + 7 < n) {
          float keep2 = x[n - 1];
          x[n - 1] = bad[(b + 1) % 3];
          check (level, "two non-finite", x, n, at);
          x[n - 1] = keep2;
        }
        x[at] = keep;
      }
  }
  free (x);
}

int
main (void)
{
  TestRng rng = { 0xf1f1f1f1ull };
  const int top = sattn_simd_level ();
  for (int level = 0; level <= top; level++)
    run (level, &rng);
#ifdef HAVE_MXCSR
  /* Flush-to-zero and denormals-are-zero: subnormal inputs read as 0. */
  const unsigned csr = _mm_getcsr ();
  _mm_setcsr (csr | 0x8040);
  for (int level = 0; level <= top; level++)
    run (level, &rng);
  _mm_setcsr (csr);
#endif
  sattn_simd_force (top);
  if (failures) {
    printf ("%d failure(s)\n", failures);
    return 1;
  }
  printf ("sattn_finite agrees with isfinite at SIMD levels 0..%d, lengths "
          "0..%d, every position of a NaN/+inf/-inf, FTZ/DAZ off and on\n",
          top, MAXN);
  return 0;
}
