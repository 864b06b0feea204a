/* The numeric health statistics (SattnStats): clearing, merging and the
 * means of their sums.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "base/base.h"

#include <math.h>

void
sattn_stats_clear (SattnStats *st)
{
  if (st == NULL)
    return;
  *st = (SattnStats){ 0 };
  st->score_min = INFINITY;
  st->score_max = -INFINITY;
  st->lse_min = INFINITY;
  st->lse_max = -INFINITY;
}

void
sattn_stats_merge (SattnStats *d, const SattnStats *s)
{
  if (d == NULL || s == NULL)
    return;
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
  if (s->score_min < d->score_min)
    d->score_min = s->score_min;
  if (s->score_max > d->score_max)
    d->score_max = s->score_max;
  if (s->lse_min < d->lse_min)
    d->lse_min = s->lse_min;
  if (s->lse_max > d->lse_max)
    d->lse_max = s->lse_max;
  d->max_weight_sum += s->max_weight_sum;
  d->entropy_sum += s->entropy_sum;
}

double
sattn_stats_mean_max_weight (const SattnStats *st)
{
  return st != NULL && st->rows > 0 ? st->max_weight_sum / (double) st->rows
                                    : 0.0;
}

double
sattn_stats_mean_entropy (const SattnStats *st)
{
  return st != NULL && st->rows > 0 ? st->entropy_sum / (double) st->rows : 0.0;
}
