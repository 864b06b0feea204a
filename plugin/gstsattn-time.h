/* The sattn element's time arithmetic: every output timestamp is computed
 * here from the frame counter, never accumulated, so there is no drift.
 * Header-only (static inline) so that tests can check it directly.  Not
 * installed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_TIME_H
#define GST_SATTN_TIME_H

#include <gst/gst.h>

G_BEGIN_DECLS

/* The last valid clock time: timestamps saturate there, never wrap. */
#define GST_SATTN_TS_END (GST_CLOCK_TIME_NONE - 1)

/* ts + d (ts valid), saturated at the end of the clock's range. */
static inline GstClockTime
gst_sattn_ts_add (GstClockTime ts, guint64 d)
{
  return d > GST_SATTN_TS_END - ts ? GST_SATTN_TS_END : ts + d;
}

/* Time of input frame f of a timeline that started at t0 (valid), with
 * frames of frame_size samples at rate Hz: t0 + floor (f × frame_size ×
 * 1 s / rate), exact (gst_util_uint64_scale works in 128 bits), saturated
 * at the end of the clock's range.  A row accounting for frames [first,
 * first + n) lasts from the time of first to the time of first + n, so
 * consecutive rows tile the timeline to the nanosecond whatever the rate
 * of rows (62.5 rows/s: 256-frame hops at 16 kHz). */
static inline GstClockTime
gst_sattn_time_of_frame (GstClockTime t0, guint64 f, guint frame_size,
    gint rate)
{
  /* frame-size x GST_SECOND fits in 64 bits; the scale saturates at
   * G_MAXUINT64 rather than overflow. */
  return gst_sattn_ts_add (t0, gst_util_uint64_scale (f,
          (guint64) frame_size * GST_SECOND, (guint64) rate));
}

G_END_DECLS

#endif /* GST_SATTN_TIME_H */
