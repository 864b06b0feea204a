/* Status strings and small shared helpers of libsattn. */
#include "internal.h"

#include <math.h>

const char *
sattn_status_string (SattnStatus st)
{
  switch (st) {
    case SATTN_OK: return "success";
    case SATTN_E_INVAL: return "invalid argument (NULL pointer or value out of range)";
    case SATTN_E_SHAPE: return "dimensions do not fit together";
    case SATTN_E_NOMEM: return "out of memory";
    case SATTN_E_NONFINITE: return "NaN or Inf where a finite value is required";
    case SATTN_E_SPACE: return "output buffer too small";
    case SATTN_E_IO: return "file cannot be opened or read";
    case SATTN_E_FORMAT: return "malformed weights file";
    case SATTN_E_MISSING: return "required tensor missing from weights file";
    case SATTN_E_DTYPE: return "unsupported tensor dtype";
  }
  return "unknown status";
}

const char *
sattn_frame_fault_string (SattnFrameFault f)
{
  switch (f) {
    case SATTN_FRAME_OK: return "is usable";
    case SATTN_FRAME_FLAGGED: return "is flagged invalid (a gap)";
    case SATTN_FRAME_NONFINITE: return "has NaN or Inf samples";
    case SATTN_FRAME_OVERFLOW:
      return "has finite samples but its query/key/value projection "
          "overflows float32";
  }
  return "has an unknown fault";
}

void
sattn_stats_clear (SattnStats *st)
{
  if (st == NULL)
    return;
  *st = (SattnStats) { 0 };
  st->score_min = INFINITY;
  st->score_max = -INFINITY;
  st->lse_min = INFINITY;
  st->lse_max = -INFINITY;
}

int
sattn_all_finite (const float *x, size_t n)
{
  /* x - x is 0 for finite x and NaN for NaN/Inf: one branch per block. */
  float acc = 0.0f;
  for (size_t i = 0; i < n; i++)
    acc += x[i] - x[i];
  return acc == 0.0f;
}

void
sattn_stats_merge (SattnStats *d, const SattnStats *s)
{
  d->windows += s->windows;
  d->frames += s->frames;
  d->rows += s->rows;
  d->masked_keys += s->masked_keys;
  d->invalid_frames += s->invalid_frames;
  d->overflow_frames += s->overflow_frames;
  d->overflow_rows += s->overflow_rows;
  d->fully_masked_rows += s->fully_masked_rows;
  d->nonfinite_scores += s->nonfinite_scores;
  d->saturated_rows += s->saturated_rows;
  if (s->score_min < d->score_min) d->score_min = s->score_min;
  if (s->score_max > d->score_max) d->score_max = s->score_max;
  if (s->lse_min < d->lse_min) d->lse_min = s->lse_min;
  if (s->lse_max > d->lse_max) d->lse_max = s->lse_max;
  d->max_weight_sum += s->max_weight_sum;
  d->entropy_sum += s->entropy_sum;
}
