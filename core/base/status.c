/* Status strings and small shared helpers of libsattn.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "base/base.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *
sattn_status_string (SattnStatus st)
{
  switch (st) {
    case SATTN_OK:
      return "success";
    case SATTN_E_INVAL:
      return "invalid argument (NULL pointer or value out of range)";
    case SATTN_E_SHAPE:
      return "dimensions do not fit together";
    case SATTN_E_NOMEM:
      return "out of memory";
    case SATTN_E_NONFINITE:
      return "NaN or Inf where a finite value is required";
    case SATTN_E_SPACE:
      return "output buffer too small";
    case SATTN_E_IO:
      return "file cannot be opened or read";
    case SATTN_E_FORMAT:
      return "malformed weights file";
    case SATTN_E_MISSING:
      return "required tensor missing from weights file";
    case SATTN_E_DTYPE:
      return "unsupported tensor dtype";
  }
  return "unknown status";
}

const char *
sattn_frame_fault_string (SattnFrameFault f)
{
  switch (f) {
    case SATTN_FRAME_OK:
      return "is usable";
    case SATTN_FRAME_FLAGGED:
      return "is flagged invalid (a gap)";
    case SATTN_FRAME_NONFINITE:
      return "has NaN or Inf samples";
    case SATTN_FRAME_OVERFLOW:
      return "has finite samples but its query/key/value projection "
             "overflows float32";
  }
  return "has an unknown fault";
}

const char *
sattn_part_string (SattnPart p)
{
  switch (p) {
    case SATTN_PART_UNKNOWN:
      return "a layer of the model";
    case SATTN_PART_OUT_PROJ:
      return "the output projection";
    case SATTN_PART_NORM1:
      return "LayerNorm norm1";
    case SATTN_PART_LINEAR1:
      return "the feed-forward's linear1";
    case SATTN_PART_LINEAR2:
      return "the feed-forward's linear2";
    case SATTN_PART_NORM2:
      return "LayerNorm norm2";
    case SATTN_PART_RESIDUAL:
      return "the residual sum";
    case SATTN_PART_COUNT:
      break;
  }
  return "an unknown part";
}

SattnStatus
sattn_fail (SattnStatus st, char *err, size_t err_len, const char *fmt, ...)
{
  if (err != NULL && err_len > 0) {
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (err, err_len, fmt, ap);
    va_end (ap);
  }
  return st;
}

SattnStatus
sattn_struct_in (const char *what, const char *type, const void *src, void *dst,
                 size_t size, size_t min_size, size_t max_size, char *err,
                 size_t err_len)
{
  size_t sz;
  memcpy (&sz, src, sizeof sz);
  if (sz == 0)
    sz = size;
  if (sz < min_size)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "%s.struct_size=%zu is smaller than any %s of "
                       "libsattn.so.%d (%zu bytes); set it to sizeof (%s), "
                       "or 0",
                       what, sz, type, SATTN_VERSION_MAJOR, min_size, type);
  if (sz > max_size)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "%s.struct_size=%zu is larger than the %zu bytes it "
                       "has here; set it to sizeof (%s), or 0",
                       what, sz, max_size, type);
  for (size_t i = size; i < sz; i++)
    if (((const unsigned char *) src)[i] != 0)
      return sattn_fail (SATTN_E_INVAL, err, err_len,
                         "%s.struct_size=%zu: the struct sets fields past "
                         "the %zu bytes this libsattn (%s) knows; they "
                         "need a later libsattn",
                         what, sz, size, SATTN_VERSION_STRING);
  memset (dst, 0, size);
  memcpy (dst, src, sz < size ? sz : size);
  memcpy (dst, &size, sizeof size);
  return SATTN_OK;
}

/* Keep d in best[] (at most 16) if it is among the 16 divisors nearest
 * to wanted; ties go to the smaller divisor. */
static void
divisor_offer (size_t *best, size_t *n, size_t d, size_t wanted)
{
  const size_t cap = 16;
  size_t dist = d > wanted ? d - wanted : wanted - d;
  if (*n < cap) {
    best[(*n)++] = d;
    return;
  }
  size_t far = 0, fard = 0;
  for (size_t i = 0; i < *n; i++) {
    size_t di = best[i] > wanted ? best[i] - wanted : wanted - best[i];
    if (di > fard || (di == fard && best[i] > best[far])) {
      fard = di;
      far = i;
    }
  }
  if (dist < fard || (dist == fard && d < best[far]))
    best[far] = d;
}

void
sattn_divisors (char *buf, size_t len, size_t value, size_t wanted)
{
  size_t best[16], n = 0;

  if (len == 0)
    return;
  buf[0] = '\0';
  /* Divisors come in pairs (d, value / d) with d <= sqrt (value): 2^20
   * steps at most for the values a model can have; beyond, no list. */
  if (value == 0 || value > ((size_t) 1 << 40))
    return;
  for (size_t d = 1; d <= value / d; d++) {
    if (value % d != 0)
      continue;
    divisor_offer (best, &n, d, wanted);
    if (value / d != d)
      divisor_offer (best, &n, value / d, wanted);
  }
  for (size_t i = 1; i < n; i++) /* ascending */
    for (size_t j = i; j > 0 && best[j - 1] > best[j]; j--) {
      size_t t = best[j];
      best[j] = best[j - 1];
      best[j - 1] = t;
    }
  for (size_t i = 0, used = 0; i < n && used < len; i++) {
    int k = snprintf (buf + used, len - used, i ? ", %zu" : "%zu", best[i]);
    if (k < 0)
      break;
    used += (size_t) k;
  }
}
