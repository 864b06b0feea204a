/* The sattn element's `attn` request pad: a live attention map.
 *
 * The streaming thread renders each window's weights into a GRAY8 frame
 * and queues it as a sample, with the caps and segment it belongs to, in
 * a GstDataQueue (end of stream is a sample without a buffer); a task on
 * the pad pushes them.  The task is the only thread that sends data on
 * the pad: before each map it sends what the pad lacks of stream-start,
 * caps and segment, in that order, reading the pad's own sticky events.
 * A flush (which drops the segment), a deactivation (which drops them
 * all), a new request or a sample dropped by a flushing queue therefore
 * never leaves a map without its events, whichever thread caused it.  With
 * its own thread the map branch prerolls even when the features branch
 * blocks in its sink's preroll, so launch lines need no queue elements.
 * Until the features pad has pushed once the queue grows as needed; after
 * that it holds GST_SATTN_MAP_QUEUE_FRAMES frames and the streaming thread
 * waits for the map branch (back-pressure, no frame is dropped).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-map.h"

#include <string.h>

GST_DEBUG_CATEGORY_EXTERN (gst_sattn_obs_debug);
#define GST_CAT_DEFAULT gst_sattn_obs_debug

/* ------------------------------------------------------------ rendering */

void
gst_sattn_map_render (const float *weights, gsize rows, gsize cols,
    guint8 * image, gsize stride, gsize height)
{
  gsize i, j, k;

  for (i = 0; i < height; i++) {
    guint8 *dst = image + i * stride;
    const float *w;
    float mx = 0.0f, inv, m8[8];

    memset (dst, 0, stride);
    /* Image row i is weight row rows - height + i. */
    if (rows + i < height)
      continue;
    w = weights + (rows + i - height) * cols;
    /* Eight independent maxima, so the loop vectorises. */
    for (k = 0; k < 8; k++)
      m8[k] = 0.0f;
    for (j = 0; j + 8 <= cols; j += 8)
      for (k = 0; k < 8; k++)
        m8[k] = w[j + k] > m8[k] ? w[j + k] : m8[k];
    for (; j < cols; j++)
      mx = w[j] > mx ? w[j] : mx;
    for (k = 0; k < 8; k++)
      mx = m8[k] > mx ? m8[k] : mx;
    if (!(mx > 0.0f))
      continue;
    /* One division per row; the loop vectorises.  Weights are >= 0 and
     * <= mx, the clamps only keep the conversion defined. */
    inv = 255.0f / mx;
    for (j = 0; j < cols; j++) {
      float v = w[j] * inv + 0.5f;

      v = v > 0.0f ? v : 0.0f;
      v = v < 255.0f ? v : 255.0f;
      dst[j] = (guint8) (gint) v;
    }
  }
}

/* ------------------------------------------------------------ queue */

static void
item_destroy (gpointer data)
{
  GstDataQueueItem *item = data;

  if (item->object)
    gst_mini_object_unref (item->object);
  g_free (item);
}

static gboolean
queue_check_full (GstDataQueue * queue, guint visible, guint bytes,
    guint64 time, gpointer checkdata)
{
  GstSattnMap *map = checkdata;

  return visible >= GST_SATTN_MAP_QUEUE_FRAMES &&
      g_atomic_int_get (&map->main_pushed);
}

/* Queue a sample: a map (visible) or, without a buffer, end of stream;
 * takes sample. */
static void
map_queue (GstSattnMap * map, GstSample * sample)
{
  GstDataQueueItem *item = g_new0 (GstDataQueueItem, 1);
  GstBuffer *buf = gst_sample_get_buffer (sample);
  gboolean ok;

  item->object = GST_MINI_OBJECT (sample);
  item->visible = buf != NULL;
  item->size = buf ? (guint) gst_buffer_get_size (buf) : 0;
  item->duration = buf ? GST_BUFFER_DURATION (buf) : 0;
  if (!GST_CLOCK_TIME_IS_VALID (item->duration))
    item->duration = 0;
  item->destroy = item_destroy;
  if (item->visible && g_atomic_int_get (&map->main_pushed))
    ok = gst_data_queue_push (map->queue, item);
  else
    ok = gst_data_queue_push_force (map->queue, item);
  if (!ok) {
    GST_LOG ("map queue flushing, dropping %" GST_PTR_FORMAT, sample);
    item_destroy (item);
  }
}

/* Task: send what the pad lacks of stream-start, caps and segment, in
 * that order.  The pad's sticky events say what downstream has (or will
 * get before the next data: GStreamer re-sends sticky events that were not
 * taken).  On a flushing pad the push of the map that follows fails, and
 * the next map checks the pad's events again. */
static void
map_send_sticky (GstElement * element, GstPad * pad, GstCaps * caps,
    const GstSegment * segment, gboolean * sent_segment)
{
  GstEvent *ev;
  GstCaps *cur;

  *sent_segment = FALSE;
  ev = gst_pad_get_sticky_event (pad, GST_EVENT_STREAM_START, 0);
  if (ev == NULL) {
    GstPad *sink = gst_element_get_static_pad (element, "sink");
    GstEvent *up = sink ? gst_pad_get_sticky_event (sink,
        GST_EVENT_STREAM_START, 0) : NULL;
    guint group;
    gchar *id;

    id = gst_pad_create_stream_id (pad, element, "attn");
    ev = gst_event_new_stream_start (id);
    if (up == NULL || !gst_event_parse_group_id (up, &group))
      group = gst_util_group_id_next ();
    gst_event_set_group_id (ev, group);
    g_free (id);
    gst_clear_event (&up);
    gst_clear_object (&sink);
    GST_DEBUG_OBJECT (pad, "stream-start");
    gst_pad_push_event (pad, ev);
  } else {
    gst_event_unref (ev);
  }

  if (caps != NULL) {
    cur = gst_pad_get_current_caps (pad);
    if (cur == NULL || (cur != caps && !gst_caps_is_equal (cur, caps))) {
      GST_DEBUG_OBJECT (pad, "map caps %" GST_PTR_FORMAT, caps);
      gst_pad_push_event (pad, gst_event_new_caps (caps));
    }
    gst_clear_caps (&cur);
  }

  if (segment != NULL && segment->format != GST_FORMAT_UNDEFINED) {
    gboolean same = FALSE;

    ev = gst_pad_get_sticky_event (pad, GST_EVENT_SEGMENT, 0);
    if (ev != NULL) {
      GstSegment seg;

      gst_event_copy_segment (ev, &seg);
      same = gst_segment_is_equal (&seg, segment);
      gst_event_unref (ev);
    }
    if (!same) {
      GST_DEBUG_OBJECT (pad, "segment %" GST_SEGMENT_FORMAT, segment);
      *sent_segment = TRUE;
      gst_pad_push_event (pad, gst_event_new_segment (segment));
    }
  }
}

static void
map_loop (gpointer user_data)
{
  GstPad *pad = user_data;
  GstObject *parent = gst_pad_get_parent (pad);
  GstElement *element;
  GstSattnMap *map;
  GstDataQueueItem *item = NULL;
  GstSample *sample;
  GstBuffer *buf;
  gboolean new_segment;

  if (parent == NULL) {
    gst_pad_pause_task (pad);
    return;
  }
  element = GST_ELEMENT (parent);
  map = gst_pad_get_element_private (pad);
  if (!gst_data_queue_pop (map->queue, &item)) {
    GST_DEBUG_OBJECT (pad, "flushing, pausing");
    gst_pad_pause_task (pad);
    gst_object_unref (element);
    return;
  }
  sample = GST_SAMPLE (item->object);
  item->object = NULL;
  item_destroy (item);

  buf = gst_sample_get_buffer (sample);
  if (g_atomic_int_get (&map->flow_error)) {
    /* The error sent EOS already: drop the rest. */
    gst_sample_unref (sample);
    gst_object_unref (element);
    return;
  }
  map_send_sticky (element, pad, gst_sample_get_caps (sample),
      gst_sample_get_segment (sample), &new_segment);

  if (buf != NULL) {
    GstFlowReturn ret;

    buf = gst_buffer_ref (buf);
    gst_sample_unref (sample);
    /* A map after a new segment (a flush, a new request, a new timeline)
     * starts a new run of maps. */
    if (new_segment && !GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_DISCONT)) {
      buf = gst_buffer_make_writable (buf);
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    }
    ret = gst_pad_push (pad, buf);
    if (ret == GST_FLOW_FLUSHING) {
      GST_DEBUG_OBJECT (pad, "downstream is flushing");
    } else if (ret == GST_FLOW_NOT_LINKED || ret == GST_FLOW_EOS) {
      /* Nobody wants the maps (any more): keep draining the queue so
       * the features never wait for them. */
      GST_LOG_OBJECT (pad, "map not taken: %s", gst_flow_get_name (ret));
    } else if (ret != GST_FLOW_OK) {
      g_atomic_int_set (&map->flow_error, 1);
      GST_ELEMENT_FLOW_ERROR (element, ret);
      gst_pad_push_event (pad, gst_event_new_eos ());
    }
  } else {
    gst_sample_unref (sample);
    gst_pad_push_event (pad, gst_event_new_eos ());
  }
  gst_object_unref (element);
}

/* ------------------------------------------------------------ pad */

static gboolean
map_activate_mode (GstPad * pad, GstObject * parent, GstPadMode mode,
    gboolean active)
{
  GstSattnMap *map = gst_pad_get_element_private (pad);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active) {
    gst_data_queue_flush (map->queue);
    gst_data_queue_set_flushing (map->queue, FALSE);
    g_atomic_int_set (&map->main_pushed, 0);
    g_atomic_int_set (&map->flow_error, 0);
    /* The pad has no sticky events yet (deactivation dropped them): the
     * task sends them before the first map. */
    return gst_pad_start_task (pad, map_loop, pad, NULL);
  }
  gst_data_queue_set_flushing (map->queue, TRUE);
  gst_data_queue_flush (map->queue);
  return gst_pad_stop_task (pad);
}

static gboolean
map_src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_QOS:
    case GST_EVENT_NAVIGATION:
    case GST_EVENT_RECONFIGURE:
      /* About the map branch only: nothing upstream can act on them. */
      gst_event_unref (event);
      return TRUE;
    default:
      return gst_pad_event_default (pad, parent, event);
  }
}

static gboolean
map_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  if (GST_QUERY_TYPE (query) == GST_QUERY_LATENCY) {
    /* The same latency as the features. */
    GstPad *src = gst_element_get_static_pad (GST_ELEMENT (parent), "src");
    gboolean res = src ? gst_pad_query (src, query) : FALSE;

    gst_clear_object (&src);
    return res;
  }
  return gst_pad_query_default (pad, parent, query);
}

gboolean
gst_sattn_map_requested (GstElement * element, GstSattnMap * map)
{
  gboolean res;

  GST_OBJECT_LOCK (element);
  res = map->pad != NULL;
  GST_OBJECT_UNLOCK (element);
  return res;
}

GstPad *
gst_sattn_map_request_pad (GstElement * element, GstSattnMap * map,
    GstPadTemplate * templ, const gchar * name)
{
  GstPad *pad;
  gboolean running;

  if (name != NULL && strcmp (name, "attn") != 0) {
    GST_WARNING_OBJECT (element, "the attention map pad is called 'attn', "
        "not '%s'", name);
    return NULL;
  }
  GST_OBJECT_LOCK (element);
  if (map->pad != NULL) {
    GST_OBJECT_UNLOCK (element);
    GST_WARNING_OBJECT (element, "there is already an 'attn' pad");
    return NULL;
  }
  GST_OBJECT_UNLOCK (element);

  pad = gst_pad_new_from_template (templ, "attn");
  gst_pad_set_element_private (pad, map);
  gst_pad_set_activatemode_function (pad, map_activate_mode);
  gst_pad_set_event_function (pad, map_src_event);
  gst_pad_set_query_function (pad, map_src_query);
  gst_pad_use_fixed_caps (pad);

  GST_OBJECT_LOCK (element);
  map->pad = pad;
  running = GST_STATE (element) > GST_STATE_READY ||
      GST_STATE_PENDING (element) > GST_STATE_READY;
  GST_OBJECT_UNLOCK (element);

  /* Activates the pad (and starts its task) when the element runs. */
  if (!gst_element_add_pad (element, pad)) {
    GST_OBJECT_LOCK (element);
    map->pad = NULL;
    GST_OBJECT_UNLOCK (element);
    gst_object_unref (pad);
    return NULL;
  }
  /* The core keeps weights only for streams set up while the pad exists. */
  if (running && g_atomic_int_get (&map->stream_set_up))
    GST_WARNING_OBJECT (element, "'attn' requested after the stream was set "
        "up: maps start with the next caps or state change (request the pad "
        "before the element receives caps)");
  return pad;
}

void
gst_sattn_map_release_pad (GstElement * element, GstSattnMap * map,
    GstPad * pad)
{
  GST_OBJECT_LOCK (element);
  if (map->pad != pad) {
    GST_OBJECT_UNLOCK (element);
    return;
  }
  map->pad = NULL;
  GST_OBJECT_UNLOCK (element);

  gst_pad_set_active (pad, FALSE);
  gst_element_remove_pad (element, pad);
}

/* ------------------------------------------------------------ stream */

void
gst_sattn_map_init (GstSattnMap * map)
{
  memset (map, 0, sizeof (*map));
  map->queue = gst_data_queue_new (queue_check_full, NULL, NULL, map);
  gst_data_queue_set_flushing (map->queue, TRUE);
}

void
gst_sattn_map_finalize (GstSattnMap * map)
{
  if (map->queue) {
    gst_data_queue_set_flushing (map->queue, TRUE);
    gst_data_queue_flush (map->queue);
    g_object_unref (map->queue);
    map->queue = NULL;
  }
  gst_clear_caps (&map->caps);
}

void
gst_sattn_map_configure (GstSattnMap * map, guint width, guint height,
    gint fps_n, gint fps_d)
{
  gst_video_info_init (&map->info);
  gst_clear_caps (&map->caps);
  if (!gst_video_info_set_format (&map->info, GST_VIDEO_FORMAT_GRAY8, width,
          height)) {
    map->width = map->height = 0;
    return;
  }
  map->info.fps_n = fps_n;
  map->info.fps_d = fps_d;
  map->width = width;
  map->height = height;
  map->caps = gst_video_info_to_caps (&map->info);
  map->discont = TRUE;
}

/* The pad, reffed, if there is one. */
static GstPad *
map_get_pad (GstElement * element, GstSattnMap * map)
{
  GstPad *pad;

  GST_OBJECT_LOCK (element);
  pad = map->pad ? gst_object_ref (map->pad) : NULL;
  GST_OBJECT_UNLOCK (element);
  return pad;
}

void
gst_sattn_map_push (GstElement * element, GstSattnMap * map,
    const float *weights, gsize rows, gsize cols, GstClockTime pts,
    GstClockTime duration, const GstSegment * segment)
{
  GstPad *pad = map_get_pad (element, map);
  GstSample *sample;
  GstBuffer *buf;
  GstMapInfo info;
  gpointer mem;

  if (pad == NULL)
    return;
  if (map->width == 0 || cols != map->width) {
    GST_WARNING_OBJECT (pad, "weights of %" G_GSIZE_FORMAT " columns for a "
        "map %u wide, not shown", cols, map->width);
    gst_object_unref (pad);
    return;
  }
  /* Fallible: gst_buffer_new_allocate aborts the process when there is
   * no memory; a map frame that cannot be had is skipped with a warning. */
  mem = g_try_malloc (MAX (GST_VIDEO_INFO_SIZE (&map->info), 1));
  buf = mem ? gst_buffer_new_wrapped (mem, GST_VIDEO_INFO_SIZE (&map->info))
      : NULL;
  if (buf == NULL || !gst_buffer_map (buf, &info, GST_MAP_WRITE)) {
    GST_ELEMENT_WARNING (element, RESOURCE, NO_SPACE_LEFT,
        ("No memory for an attention map frame of %" G_GSIZE_FORMAT
            " bytes; the frame is skipped",
            (gsize) GST_VIDEO_INFO_SIZE (&map->info)), (NULL));
    gst_clear_buffer (&buf);
    gst_object_unref (pad);
    return;
  }
  gst_sattn_map_render (weights, rows, cols, info.data,
      GST_VIDEO_INFO_PLANE_STRIDE (&map->info, 0), map->height);
  gst_buffer_unmap (buf, &info);
  GST_BUFFER_PTS (buf) = pts;
  GST_BUFFER_DTS (buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION (buf) = duration;
  GST_BUFFER_OFFSET (buf) = map->offset;
  GST_BUFFER_OFFSET_END (buf) = map->offset + 1;
  map->offset++;
  if (map->discont) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    map->discont = FALSE;
  }
  /* The sample holds the only reference from here on. */
  sample = gst_sample_new (buf, map->caps, segment, NULL);
  gst_buffer_unref (buf);
  map_queue (map, sample);
  gst_object_unref (pad);
}

void
gst_sattn_map_main_pushed (GstSattnMap * map)
{
  if (!g_atomic_int_get (&map->main_pushed))
    g_atomic_int_set (&map->main_pushed, 1);
}

void
gst_sattn_map_flush_start (GstElement * element, GstSattnMap * map)
{
  GstPad *pad = map_get_pad (element, map);

  /* Unblocks the streaming thread if it waits for room in the queue. */
  gst_data_queue_set_flushing (map->queue, TRUE);
  if (pad == NULL)
    return;
  gst_pad_push_event (pad, gst_event_new_flush_start ());
  gst_pad_pause_task (pad);
  gst_object_unref (pad);
}

void
gst_sattn_map_flush_stop (GstElement * element, GstSattnMap * map)
{
  GstPad *pad = map_get_pad (element, map);

  gst_data_queue_flush (map->queue);
  g_atomic_int_set (&map->main_pushed, 0);
  g_atomic_int_set (&map->flow_error, 0);
  map->discont = TRUE;
  if (pad == NULL) {
    gst_data_queue_set_flushing (map->queue, FALSE);
    return;
  }
  /* The task is paused (flush-start) or waiting on an empty queue. */
  gst_pad_push_event (pad, gst_event_new_flush_stop (TRUE));
  if (GST_PAD_IS_ACTIVE (pad)) {
    gst_data_queue_set_flushing (map->queue, FALSE);
    gst_pad_start_task (pad, map_loop, pad, NULL);
  }
  gst_object_unref (pad);
}

void
gst_sattn_map_reset (GstSattnMap * map)
{
  map->offset = 0;
  map->discont = TRUE;
}

void
gst_sattn_map_eos (GstElement * element, GstSattnMap * map,
    const GstSegment * segment)
{
  GstPad *pad = map_get_pad (element, map);

  if (pad == NULL)
    return;
  /* Stream-start and the segment go before EOS; caps only with a map. */
  map_queue (map, gst_sample_new (NULL, NULL, segment, NULL));
  gst_object_unref (pad);
}
