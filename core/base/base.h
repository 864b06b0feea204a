/* core/base: what every folder of libsattn may use -- memory blocks that
 * outlive a call, saturating sizes, the error words of the configuration
 * checks, callers' structs that carry their size, divisors for messages.
 * Depends on nothing else of the core (the layering: base <- cpu <- nn <-
 * model <- stream, io -> model; tests/lib/check-layering.py).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_BASE_H
#define SATTN_BASE_H

#include "sattn/sattn.h"

#include <stddef.h>
#include <stdint.h>

/* Blocks that outlive a call (models, weights, stream state), base/mem.c:
 * at least `align` aligned (a power of two), blocks of SATTN_MEM_MAP_MIN
 * bytes or more mapped from the system and returned to it by
 * sattn_mem_free (and only by it; NULL is ignored).  NULL when out of
 * memory or align is not a power of two. */
#define SATTN_MEM_MAP_MIN ((size_t) 128 << 10)
void *sattn_mem_alloc (size_t size, size_t align);
void *sattn_mem_calloc (size_t n, size_t size, size_t align);
void sattn_mem_free (void *p);

/* Sizes without wrapping: a * b and a + b, SIZE_MAX when they do not fit
 * (so a sum of saturated terms stays saturated). */
static inline size_t
sattn_size_mul (size_t a, size_t b)
{
  return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

static inline size_t
sattn_size_add (size_t a, size_t b)
{
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* Writes the message (printf format) into err (err_len bytes, may be NULL
 * / 0) and returns st: the error words of the configuration checks. */
SattnStatus sattn_fail (SattnStatus st, char *err, size_t err_len,
                        const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

/* A caller's struct that carries its size (size_t struct_size first,
 * sattn.h at SattnConfig) read into dst, a struct of this version of size
 * bytes: zeroed, then the min (struct_size, size) bytes of src (0 =
 * size), then dst's struct_size set to size.  SATTN_E_INVAL with words
 * naming the argument (what, e.g. "SattnConfig" or
 * "SattnLoadOptions.cfg") and its type when struct_size is below
 * min_size (the end of the last field of soname 1) or above max_size
 * (SIZE_MAX: no bound; a struct held within another has one), or when it
 * is above size and the bytes past size are not all zero (fields of a
 * later version, which this one cannot honour). */
SattnStatus sattn_struct_in (const char *what, const char *type,
                             const void *src, void *dst, size_t size,
                             size_t min_size, size_t max_size, char *err,
                             size_t err_len);
/* min_size of the caller-filled structs of soname 1. */
#define SATTN_CONFIG_MIN_SIZE \
  (offsetof (SattnConfig, norm_eps) + sizeof (double))
#define SATTN_WEIGHTS_MIN_SIZE \
  (offsetof (SattnWeights, norm2_b) + sizeof (const float *))
#define SATTN_STREAM_CONFIG_MIN_SIZE \
  (offsetof (SattnStreamConfig, threads) + sizeof (int))

/* Up to 16 divisors of value, those nearest to wanted, ascending, as
 * "a, b, c" in buf (len bytes): the values that work, for messages. */
void sattn_divisors (char *buf, size_t len, size_t value, size_t wanted);

#endif
