/* The kernel table (core/cpu): one per SIMD level, chosen once and
 * switched by sattn_simd_force.
 *
 * For every level the machine has: sattn_simd_force (level) makes
 * sattn_kernels () that level's table (its name, every entry set, and
 * the best this build has at or below the level), and the sattn_* entry
 * points call through it (the same bytes as the table's own entries).
 * The row movers (copy_rows, transpose_rows, add_bias) and sattn_mul,
 * which promise the same bytes at every level, are compared with the
 * portable table's on random shapes, masks and strides.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "cpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

static int failures;

#define CHECK(cond, ...)      \
  do {                        \
    if (!(cond)) {            \
      if (failures < 30) {    \
        printf ("FAIL: ");    \
        printf (__VA_ARGS__); \
        printf ("\n");        \
      }                       \
      failures++;             \
    }                         \
  } while (0)

static const SattnKernels *
table_of_level (int level)
{
#ifdef SATTN_HAVE_X86
  if (level >= 2)
    return &sattn_kernels_avx512;
  if (level == 1)
    return &sattn_kernels_avx2;
#endif
  (void) level;
  return &sattn_kernels_portable;
}

static void
check_entries (int level, const SattnKernels *k)
{
  CHECK (k->name != NULL && k->qk && k->qk_max && k->softmax_rows && k->pv &&
             k->pv_norm && k->softmax_scan && k->softmax_max && k->exp_sum &&
             k->exp_sum_stats && k->mul && k->finite && k->copy_rows &&
             k->transpose_rows && k->add_bias && k->linear_dd && k->linear_df &&
             k->linear_ff && k->widen && k->erf && k->gelu && k->relu,
         "level %d: an entry of %s is not set", level,
         k->name ? k->name : "(unnamed)");
}

static float *
floats (TestRng *r, size_t n)
{
  float *p = test_rng_floats (r, n, 4.0f);
  if (p == NULL) {
    printf ("FAIL: out of memory\n");
    exit (1);
  }
  return p;
}

/* sattn_qk, sattn_pv, sattn_exp_sum and sattn_softmax_scan against the
 * entries of table k on the same inputs. */
static void
check_dispatch (int level, const SattnKernels *k, TestRng *r)
{
  enum { M = 9, NK = 37, DH = 13 };
  float *q = floats (r, M * DH), *kt = floats (r, DH * NK);
  float *s1 = floats (r, M * NK), *s2 = floats (r, M * NK);
  sattn_qk (q, DH, kt, NK, M, NK, DH, s1, NK);
  k->qk (q, DH, kt, NK, M, NK, DH, s2, NK);
  CHECK (memcmp (s1, s2, sizeof (float) * M * NK) == 0,
         "level %d: sattn_qk is not %s's qk", level, k->name);
  float *o1 = floats (r, M * DH), *o2 = floats (r, M * DH);
  sattn_pv (s1, NK, M, NK, kt, DH, DH, o1, DH); /* any finite V */
  k->pv (s1, NK, M, NK, kt, DH, DH, o2, DH);
  CHECK (memcmp (o1, o2, sizeof (float) * M * DH) == 0,
         "level %d: sattn_pv is not %s's pv", level, k->name);
  for (size_t i = 0; i < M * NK; i++)
    s1[i] = s2[i] = -test_rng_uniform (r) * 30.0f;
  double a = sattn_exp_sum (s1, NK, 0.7f, 0.0f);
  double b = k->exp_sum (s2, NK, 0.7f, 0.0f);
  CHECK (a == b && memcmp (s1, s2, sizeof (float) * NK) == 0,
         "level %d: sattn_exp_sum is not %s's exp_sum", level, k->name);
  size_t c1[4] = { 0 }, c2[4] = { 0 };
  float m1 = sattn_softmax_scan (s1, NK, NULL, 1.5f, c1);
  float m2 = k->softmax_scan (s2, NK, NULL, 1.5f, c2);
  CHECK (m1 == m2 && memcmp (c1, c2, sizeof c1) == 0 &&
             memcmp (s1, s2, sizeof (float) * NK) == 0,
         "level %d: sattn_softmax_scan is not %s's softmax_scan", level,
         k->name);
  free (q);
  free (kt);
  free (s1);
  free (s2);
  free (o1);
  free (o2);
}

/* The entries that promise the same bytes at every level, against the
 * portable table's. */
static void
check_same_bytes (int level, const SattnKernels *k, TestRng *r)
{
  const SattnKernels *p = &sattn_kernels_portable;
  for (int trial = 0; trial < 200; trial++) {
    const size_t cnt = 1 + (size_t) ((test_rng_uniform (r) + 1.0f) * 20.0f);
    const size_t w = 1 + (size_t) ((test_rng_uniform (r) + 1.0f) * 40.0f);
    const size_t ldx = w + (size_t) trial % 5;
    const size_t ldd = (cnt > w ? cnt : w) + (size_t) trial % 3;
    const size_t mir = ldd * (cnt > w ? cnt : w) + 7;
    float *x = floats (r, cnt * ldx);
    uint8_t *ok = malloc (cnt);
    for (size_t i = 0; i < cnt; i++)
      ok[i] = test_rng_uniform (r) > -0.6f;
    const size_t nd = 2 * mir + 64;
    float *d1 = malloc (nd * sizeof (float)),
          *d2 = malloc (nd * sizeof (float));
    if (ok == NULL || d1 == NULL || d2 == NULL) {
      printf ("FAIL: out of memory\n");
      exit (1);
    }
    for (int use_ok = 0; use_ok < 2; use_ok++) {
      memset (d1, 0x5a, nd * sizeof (float));
      memset (d2, 0x5a, nd * sizeof (float));
      k->copy_rows (x, ldx, use_ok ? ok : NULL, cnt, w, d1, ldd, mir);
      p->copy_rows (x, ldx, use_ok ? ok : NULL, cnt, w, d2, ldd, mir);
      CHECK (memcmp (d1, d2, nd * sizeof (float)) == 0,
             "level %d: copy_rows (%zu x %zu) differs from portable", level,
             cnt, w);
      memset (d1, 0x5a, nd * sizeof (float));
      memset (d2, 0x5a, nd * sizeof (float));
      k->transpose_rows (x, ldx, use_ok ? ok : NULL, cnt, w, d1, ldd, mir);
      p->transpose_rows (x, ldx, use_ok ? ok : NULL, cnt, w, d2, ldd, mir);
      CHECK (memcmp (d1, d2, nd * sizeof (float)) == 0,
             "level %d: transpose_rows (%zu x %zu) differs from portable",
             level, cnt, w);
    }
    /* add_bias on cnt rows of w columns at stride ldx; sattn_mul. */
    float *b = floats (r, w);
    memcpy (d1, x, cnt * ldx * sizeof (float));
    memcpy (d2, x, cnt * ldx * sizeof (float));
    k->add_bias (d1, ldx, cnt, b, w);
    p->add_bias (d2, ldx, cnt, b, w);
    CHECK (memcmp (d1, d2, cnt * ldx * sizeof (float)) == 0,
           "level %d: add_bias (%zu x %zu) differs from portable", level, cnt,
           w);
    k->mul (d1, cnt * ldx, 0.37f);
    p->mul (d2, cnt * ldx, 0.37f);
    CHECK (memcmp (d1, d2, cnt * ldx * sizeof (float)) == 0,
           "level %d: mul (%zu) differs from portable", level, cnt * ldx);
    free (b);
    free (x);
    free (ok);
    free (d1);
    free (d2);
  }
}

int
main (void)
{
  static const char *names[] = { "portable", "avx2", "avx512" };
  const int native = sattn_simd_level ();
  TestRng r = { 0x7ab1e5ull };
  /* The table chosen without forcing: the native level's. */
  CHECK (sattn_kernels () == table_of_level (native),
         "the table chosen is %s, not that of level %d", sattn_kernels ()->name,
         native);
  for (int level = 0; level <= native; level++) {
    sattn_simd_force (level);
    const SattnKernels *k = sattn_kernels ();
    CHECK (sattn_simd_level () == level, "forced %d, level says %d", level,
           sattn_simd_level ());
    CHECK (k == table_of_level (level), "level %d: table %s", level, k->name);
#ifdef SATTN_HAVE_X86
    CHECK (strcmp (k->name, names[level]) == 0, "level %d: table named %s",
           level, k->name);
#else
    CHECK (strcmp (k->name, names[0]) == 0, "level %d: table named %s", level,
           k->name);
#endif
    check_entries (level, k);
    check_dispatch (level, k, &r);
    check_same_bytes (level, k, &r);
  }
  sattn_simd_force (native);
  CHECK (sattn_kernels () == table_of_level (native),
         "forcing the native level back did not restore its table");
  if (failures) {
    printf ("%d failures\n", failures);
    return 1;
  }
  printf ("kernel tables: levels 0 to %d (%s) checked\n", native,
          table_of_level (native)->name);
  return 0;
}
