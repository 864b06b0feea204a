/* The safetensors dtypes and their conversion to float32 (F16, BF16 and
 * F64 rounded once, as PyTorch's .float() does).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "io/io.h"

#include <math.h>
#include <string.h>

/* --------------------------------------------------------------- dtypes */

/* The dtypes of the safetensors specification. */
static const Dtype dtypes[] = {
  { "F32", 4, KIND_F32 },       { "F16", 2, KIND_F16 },
  { "BF16", 2, KIND_BF16 },     { "F64", 8, KIND_F64 },
  { "BOOL", 1, KIND_OTHER },    { "U8", 1, KIND_OTHER },
  { "I8", 1, KIND_OTHER },      { "F8_E4M3", 1, KIND_OTHER },
  { "F8_E5M2", 1, KIND_OTHER }, { "I16", 2, KIND_OTHER },
  { "U16", 2, KIND_OTHER },     { "I32", 4, KIND_OTHER },
  { "U32", 4, KIND_OTHER },     { "I64", 8, KIND_OTHER },
  { "U64", 8, KIND_OTHER },
};

const Dtype *
sattn_io_find_dtype (const char *name)
{
  for (size_t i = 0; i < G_N_ELEMENTS (dtypes); i++)
    if (strcmp (dtypes[i].name, name) == 0)
      return &dtypes[i];
  return NULL;
}

static float
f16_to_f32 (uint16_t h)
{
  unsigned e = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;

  if (e == 0)
    v = ldexpf ((float) mant, -24); /* zero, subnormal */
  else if (e == 31)
    v = mant ? NAN : INFINITY;
  else
    v = ldexpf ((float) (mant | 0x400), (int) e - 25);
  return (h & 0x8000) ? -v : v;
}

static float
bf16_to_f32 (uint16_t h)
{
  uint32_t bits = (uint32_t) h << 16;
  float v;

  memcpy (&v, &bits, sizeof v);
  return v;
}

/* Round to nearest float; beyond the float range +-Inf (IEEE overflow),
 * written out because C leaves out-of-range conversions undefined. */
static float
f64_to_f32 (double d)
{
  /* FLT_MAX plus half its ulp (2^103): from there on the rounding is Inf. */
  const double limit = (double) FLT_MAX + 0x1p103;

  if (isnan (d))
    return NAN;
  if (fabs (d) <= (double) FLT_MAX)
    return (float) d;
  if (d >= limit)
    return INFINITY;
  if (d <= -limit)
    return -INFINITY;
  return d > 0 ? FLT_MAX : -FLT_MAX;
}

uint64_t
sattn_io_read_le64 (const uint8_t *p)
{
  uint64_t v = 0;

  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

void
sattn_io_convert (DtypeKind kind, const uint8_t *src, size_t n, float *dst)
{
  switch (kind) {
    case KIND_F32:
      for (size_t i = 0; i < n; i++) {
        const uint8_t *p = src + 4 * i;
        uint32_t b = (uint32_t) p[0] | (uint32_t) p[1] << 8 |
                     (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
        memcpy (&dst[i], &b, sizeof b);
      }
      break;
    case KIND_F16:
      for (size_t i = 0; i < n; i++)
        dst[i] = f16_to_f32 ((uint16_t) (src[2 * i] | src[2 * i + 1] << 8));
      break;
    case KIND_BF16:
      for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32 ((uint16_t) (src[2 * i] | src[2 * i + 1] << 8));
      break;
    case KIND_F64:
      for (size_t i = 0; i < n; i++) {
        uint64_t b = sattn_io_read_le64 (src + 8 * i);
        double d;
        memcpy (&d, &b, sizeof d);
        dst[i] = f64_to_f32 (d);
      }
      break;
    case KIND_OTHER:
      break;
  }
}
