/* The sattn element's `attn` request pad: a live attention map, one
 * GRAY8 video frame per window, pushed from a task of its own so that a
 * launch line without queues (`sattn name=s ! fakesink s.attn ! ...`)
 * prerolls both branches.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_MAP_H
#define GST_SATTN_MAP_H

#include <gst/gst.h>
#include <gst/base/gstdataqueue.h>
#include <gst/video/video.h>

#include "sattn/sattn.h"

G_BEGIN_DECLS

/* Frames the map queue holds before the element's streaming thread waits
 * for the map branch (only once the feature branch has had data). */
#define GST_SATTN_MAP_QUEUE_FRAMES 32

typedef struct
{
  /* The request pad (NULL when not requested); object lock. */
  GstPad *pad;

  /* Between the streaming thread and the pad's task (both thread-safe).
   * The queue carries samples (a map with its caps and segment, or no
   * buffer for end of stream): the task, the only thread that pushes
   * data on the pad, sends stream-start, caps and segment before a map
   * whenever the pad lacks them (after a request, a flush or a caps or
   * segment change), so no flush, activation or release can leave the
   * branch without them or send them out of order. */
  GstDataQueue *queue;
  gint main_pushed;             /* atomic: the features pad has pushed */
  gint flow_error;              /* atomic: a fatal flow was reported */
  gint stream_set_up;           /* atomic: a stream exists (for a
                                   warning) */

  /* Streaming thread. */
  gboolean discont;
  GstCaps *caps;                /* of the maps; NULL when width is 0 */
  GstVideoInfo info;            /* valid when width > 0 */
  guint width, height;
  guint64 offset;               /* maps since the last reset */
} GstSattnMap;

void gst_sattn_map_init (GstSattnMap * map);
void gst_sattn_map_finalize (GstSattnMap * map);

/* Request / release (element vfuncs); obs_offset locates the map inside
 * the element instance. */
GstPad *gst_sattn_map_request_pad (GstElement * element, GstSattnMap * map,
    GstPadTemplate * templ, const gchar * name);
void gst_sattn_map_release_pad (GstElement * element, GstSattnMap * map,
    GstPad * pad);

/* Does the element have an attn pad right now?  Takes the object lock. */
gboolean gst_sattn_map_requested (GstElement * element, GstSattnMap * map);

/* New geometry: width = keys per window (window + extra keys), height =
 * query rows shown per window; frame rate fps_n / fps_d.  The caps go out
 * before the next map. */
void gst_sattn_map_configure (GstSattnMap * map, guint width, guint height,
    gint fps_n, gint fps_d);

/* Queue one map from weights (rows × cols, row-major; rows may differ
 * from the map height, see gst_sattn_map_render), at pts for duration. */
void gst_sattn_map_push (GstElement * element, GstSattnMap * map,
    const float *weights, gsize rows, gsize cols, GstClockTime pts,
    GstClockTime duration, const GstSegment * segment);

/* The features pad pushed a buffer: from now on the map queue may make the
 * streaming thread wait. */
void gst_sattn_map_main_pushed (GstSattnMap * map);

/* Flushing and end of stream, from the element's sink pad. */
void gst_sattn_map_flush_start (GstElement * element, GstSattnMap * map);
void gst_sattn_map_flush_stop (GstElement * element, GstSattnMap * map);
void gst_sattn_map_reset (GstSattnMap * map);
void gst_sattn_map_eos (GstElement * element, GstSattnMap * map,
    const GstSegment * segment);

/* The pixel mapping, exposed for documentation and tests: image row i
 * shows weight row rows - height + i (rows above the first weight row are
 * black), pixel (i, j) = floor (255 * w[j] / max_k w[k] + 0.5) over the
 * row's float32 weights, computed in float32 as w[j] * (255 / max) (so
 * within 1 of the exact value), 0 for a row whose weights are all 0.  Each
 * image row is stride bytes; the bytes after width are zero. */
void gst_sattn_map_render (const float *weights, gsize rows, gsize cols,
    guint8 * image, gsize stride, gsize height);

G_END_DECLS

#endif /* GST_SATTN_MAP_H */
