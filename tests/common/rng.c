/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "rng.h"

#include <stdlib.h>

float
test_rng_uniform (TestRng *r)
{
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return (float) ((double) (r->s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

float *
test_rng_floats (TestRng *r, size_t n, float scale)
{
  float *p = malloc (n * sizeof (float));
  for (size_t i = 0; p != NULL && i < n; i++)
    p[i] = test_rng_uniform (r) * scale;
  return p;
}

uint64_t
test_splitmix (uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double
test_splitmix_uniform (uint64_t *s)
{
  return ((double) (test_splitmix (s) >> 11) + 1.0) * 0x1.0p-53;
}
