/* What the sattn element observes per window: the window schedule, the
 * softmax statistics of the health messages and the attention weights
 * shown on the attn pad (identity projections), from the shared float64
 * reference of tests/common/reference.h, independent of the core.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_OBS_REF_H
#define SATTN_OBS_REF_H

#include "sattn-check.h"

G_BEGIN_DECLS

/* One window of a stream of T frames: it ends after frame end - 1, its
 * keys are frames [end - window, end) (negative ones are padding), its
 * query rows are the last `rows` frames, and it accounts for input frames
 * [first, end). */
typedef struct
{
  gsize end, rows, first;
} ObsWindow;

/* The windows of a stream of T frames up to and including the drain at
 * its end; returns the count, *out (g_free) the windows. */
gsize obs_ref_schedule (const RefConfig * c, gsize T, ObsWindow ** out);

/* Statistics as SattnStats defines them, accumulated over windows. */
typedef struct
{
  guint64 windows, frames, rows, masked_keys, invalid_frames;
  guint64 fully_masked_rows, nonfinite_scores, saturated_rows;
  double score_min, score_max, lse_min, lse_max;
  double max_weight_sum, entropy_sum;
  double max_weight_margin;     /* min |row max weight - threshold| */
} ObsStats;

void obs_stats_clear (ObsStats * s);
void obs_stats_merge (ObsStats * acc, const ObsStats * w);

/* Statistics of window w over x (T × d, valid NULL = all; frames with
 * NaN/Inf are invalid).  Scores are computed in float64; a scaled score
 * beyond the float32 range counts as non-finite (±inf), as float32
 * arithmetic would make it.  invalid_frames counts the invalid frames in
 * [w->first, w->end).  threshold: the saturation threshold as a float. */
void obs_ref_window_stats (const RefConfig * c, const float *x,
    const guint8 * valid, gsize T, gsize d, const ObsWindow * w,
    float threshold, ObsStats * out);

/* Attention weights of window w (rows × (window) doubles, row-major):
 * head >= 0 one head, -1 the mean over heads.  Rows of invalid queries
 * are zero. */
void obs_ref_window_weights (const RefConfig * c, const float *x,
    const guint8 * valid, gsize T, gsize d, const ObsWindow * w, gint head,
    double *weights);

/* Check the fields of a "sattn" message against ref (exact for counts,
 * 1e-5 × (1 + |ref|) for the doubles); prints the largest deviation. */
void obs_check_message (const char *label, const GstStructure * s,
    const ObsStats * ref, guint64 frames);

G_END_DECLS

#endif
