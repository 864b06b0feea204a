/* Observability of the sattn element: per-window numeric health as
 * element messages on the bus, warnings that say what to do, and the
 * `attn` attention-map pad (gstsattn-map.h).
 *
 * The element calls these hooks from its own code paths; everything here
 * runs in the element's streaming thread unless stated otherwise.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_OBS_H
#define GST_SATTN_OBS_H

#include <gst/gst.h>

#include "sattn/sattn.h"
#include "gstsattn-map.h"

G_BEGIN_DECLS

/* Property ids of the observability properties start here, far from the
 * element's own. */
#define GST_SATTN_OBS_PROP_FIRST 100

typedef struct
{
  /* Properties; object lock. */
  gboolean post_messages;
  GstClockTime interval;
  gdouble sat_threshold;
  gboolean message_weights;
  gint map_head;

  /* The attention map pad. */
  GstSattnMap map;

  /* Streaming thread: what the current stream does. */
  gboolean stats_on;            /* the stream collects statistics */
  gboolean weights_on;          /* the stream keeps the last weights */
  gboolean active;              /* core pushes end at window ends */
  gsize window, heads, d_head;
  gdouble scale, user_scale;
  gboolean map_head_warned;

  /* Since the last message. */
  SattnStats acc;
  guint64 acc_first, acc_end;   /* frames [first, end) since the reset */
  GstClockTime acc_ts, acc_end_ts;
  guint64 windows_total;        /* since the stream was set up, for logs */

  /* Rate limiting of warnings, in stream time of the windows. */
  GstClockTime sat_warned_at, nf_warned_at;
  guint64 sat_windows, nf_windows;      /* since the last such warning */
  /* Projections that overflowed: frames (Q/K/V), rows (output). */
  GstClockTime pov_warned_at, oov_warned_at;
  guint64 pov_frames, oov_rows;         /* since the last such warning */
  guint64 oov_parts[SATTN_PART_COUNT];  /* those rows by the part of the
                                           layer that overflowed */

  /* Messages and warnings to post after the next push. */
  GQueue pending;
  float *wbuf, *wtmp;            /* window × keys: weights, one head */
  gsize wbuf_floats;
} GstSattnObs;

/* class_init: installs the properties, the attn pad template and the
 * request / release vfuncs.  obs_offset = G_STRUCT_OFFSET of the
 * GstSattnObs inside the instance. */
void gst_sattn_obs_class_init (GObjectClass * gobject_class,
    GstElementClass * element_class, glong obs_offset);
void gst_sattn_obs_init (GstSattnObs * obs, GstElement * element,
    GstPad * sinkpad);
void gst_sattn_obs_finalize (GstSattnObs * obs);

/* Property access, called with the object lock held.  Return FALSE for a
 * property id that is not one of ours. */
gboolean gst_sattn_obs_set_property (GstSattnObs * obs, guint prop_id,
    const GValue * value);
gboolean gst_sattn_obs_get_property (GstSattnObs * obs, guint prop_id,
    GValue * value);

/* Fill in collect_stats, saturation_threshold and keep_weights of a new
 * stream's configuration. */
void gst_sattn_obs_stream_config (GstSattnObs * obs, GstElement * element,
    SattnStreamConfig * sc);
/* A new stream s was set up with sc (after the old one was drained). */
void gst_sattn_obs_configure (GstSattnObs * obs, GstElement * element,
    const SattnModel * model, const SattnStream * s,
    const SattnStreamConfig * sc, gint rate, guint frame_size,
    gdouble user_scale);

/* A weights swap replaced the stream by s (of model): the heads and the
 * weights' size follow it (the attention map keeps its rate). */
void gst_sattn_obs_swapped (GstSattnObs * obs, GstElement * element,
    const SattnModel * model, const SattnStream * s);

/* How many of n frames to hand to the core in one call: all of them when
 * nothing is observed, else at most up to the next window's end. */
gsize gst_sattn_obs_split (GstSattnObs * obs, const SattnStream * s,
    gsize n);

/* A core call returned the rows of one window, accounting for input
 * frames [first, end) since the reset, at timestamps [ts, end_ts). */
void gst_sattn_obs_window (GstSattnObs * obs, GstElement * element,
    SattnStream * s, guint64 first, guint64 end, GstClockTime ts,
    GstClockTime end_ts, const GstSegment * segment);

/* After a core push of frames starting at ts: with statistics off, takes
 * the stream's overflow counters (and the parts of the layer its
 * overflowed rows overflowed in) and queues the warnings they call for
 * (with statistics on, gst_sattn_obs_window does it per window). */
void gst_sattn_obs_frames (GstSattnObs * obs, GstElement * element,
    SattnStream * s, GstClockTime ts);

/* After a push on the features pad: posts what is pending. */
void gst_sattn_obs_pushed (GstSattnObs * obs, GstElement * element);

/* The timeline ends (drain at EOS, a resync, a new segment or caps): a
 * message for the windows not reported yet, then everything pending. */
void gst_sattn_obs_end_timeline (GstSattnObs * obs, GstElement * element,
    SattnStream * s, const GstSegment * segment);

/* Flushing: drops what was accumulated and not posted. */
void gst_sattn_obs_reset (GstSattnObs * obs, SattnStream * s);
void gst_sattn_obs_flush_start (GstSattnObs * obs, GstElement * element);
void gst_sattn_obs_flush_stop (GstSattnObs * obs, GstElement * element);
void gst_sattn_obs_eos (GstSattnObs * obs, GstElement * element,
    const GstSegment * segment);

G_END_DECLS

#endif /* GST_SATTN_OBS_H */
