/* The fixed-seed generators of the tests and benchmarks, the same streams
 * on every platform, no state outside the caller's: xorshift64
 * (Marsaglia's 13, 7, 17) for the kernel tests and proj-cost, splitmix64
 * for the core tests (TuRng, tests/core/testutil.h) and sattn-bench.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_TEST_RNG_H
#define SATTN_TEST_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t s; /* nonzero */
} TestRng;

/* Uniform in [-1, 1) from the top 53 bits of the next state. */
float test_rng_uniform (TestRng *r);

/* n draws of test_rng_uniform times scale in a malloc'd array (free ()),
 * NULL when the allocation fails. */
float *test_rng_floats (TestRng *r, size_t n, float scale);

/* splitmix64: the next 64 bits of the stream whose state is *s. */
uint64_t test_splitmix (uint64_t *s);

/* Uniform in (0, 1] from the top 53 bits of test_splitmix. */
double test_splitmix_uniform (uint64_t *s);

#endif
