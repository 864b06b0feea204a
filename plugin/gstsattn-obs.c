/* Observability of the sattn element: numeric health on the bus, warnings
 * that say what to do, and the attention-map pad.
 *
 * The core computes the statistics in the softmax's own pass when the
 * stream is created with collect_stats, and keeps the last window's
 * weights with keep_weights; neither is asked for unless post-messages is
 * set or the attn pad exists, so an element that observes nothing pays
 * nothing.  When something is observed, the element hands the core at most
 * one window per call (gst_sattn_obs_split), so every window is seen on
 * its own: its statistics, its weights, its time span.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-obs.h"

#include <float.h>
#include <math.h>
#include <string.h>

GST_DEBUG_CATEGORY (gst_sattn_obs_debug);
#define GST_CAT_DEFAULT gst_sattn_obs_debug

#define DEFAULT_POST_MESSAGES FALSE
#define DEFAULT_MESSAGE_INTERVAL (100 * GST_MSECOND)
#define DEFAULT_SATURATION_THRESHOLD ((gdouble) SATTN_DEFAULT_SATURATION)
#define DEFAULT_MESSAGE_WEIGHTS FALSE
#define DEFAULT_MAP_HEAD -1
#define MAX_MAP_HEAD 4095

/* At most one warning of each kind per this much stream time. */
#define WARNING_INTERVAL (10 * GST_SECOND)

enum
{
  PROP_POST_MESSAGES = GST_SATTN_OBS_PROP_FIRST,
  PROP_MESSAGE_INTERVAL,
  PROP_SATURATION_THRESHOLD,
  PROP_MESSAGE_WEIGHTS,
  PROP_MAP_HEAD,
};

static GstStaticPadTemplate attn_template = GST_STATIC_PAD_TEMPLATE ("attn",
    GST_PAD_SRC,
    GST_PAD_REQUEST,
    GST_STATIC_CAPS ("video/x-raw, format = (string) GRAY8, "
        "width = (int) [ 1, MAX ], height = (int) [ 1, MAX ], "
        "framerate = (fraction) [ 0/1, MAX ]"));

/* Where the GstSattnObs lives inside the element instance. */
static glong obs_offset;
#define OBS(element) ((GstSattnObs *) G_STRUCT_MEMBER_P ((element), obs_offset))

/* ------------------------------------------------------------ class */

static GstPad *
obs_request_new_pad (GstElement * element, GstPadTemplate * templ,
    const gchar * name, const GstCaps * caps)
{
  return gst_sattn_map_request_pad (element, &OBS (element)->map, templ, name);
}

static void
obs_release_pad (GstElement * element, GstPad * pad)
{
  gst_sattn_map_release_pad (element, &OBS (element)->map, pad);
}

void
gst_sattn_obs_class_init (GObjectClass * gobject_class,
    GstElementClass * element_class, glong offset)
{
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS;

  obs_offset = offset;
  /* The element's category, so that GST_DEBUG=sattn:6 shows everything. */
  GST_DEBUG_CATEGORY_GET (gst_sattn_obs_debug, "sattn");
  if (gst_sattn_obs_debug == NULL)
    GST_DEBUG_CATEGORY_INIT (gst_sattn_obs_debug, "sattn", 0,
        "sliding-window self-attention");

  g_object_class_install_property (gobject_class, PROP_POST_MESSAGES,
      g_param_spec_boolean ("post-messages", "Post messages",
          "Compute the numeric health of the attention, post it as 'sattn' "
          "element messages (see message-interval) and warn when the "
          "softmax saturates or scores overflow; nothing is computed when "
          "false", DEFAULT_POST_MESSAGES, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_MESSAGE_INTERVAL,
      g_param_spec_uint64 ("message-interval", "Message interval",
          "Stream time covered by one message, in nanoseconds; a message "
          "covers whole windows, posted at the first window end at least "
          "this long after the message's start (0 = one message per "
          "window)", 0, G_MAXUINT64, DEFAULT_MESSAGE_INTERVAL,
          rw | GST_PARAM_MUTABLE_PLAYING));
  g_object_class_install_property (gobject_class, PROP_SATURATION_THRESHOLD,
      g_param_spec_double ("saturation-threshold", "Saturation threshold",
          "A softmax row whose largest weight exceeds this is counted as "
          "saturated (saturated-rows)", 0.0, 1.0,
          DEFAULT_SATURATION_THRESHOLD, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_MESSAGE_WEIGHTS,
      g_param_spec_boolean ("message-weights", "Message weights",
          "Add the head-averaged attention weights of each message's last "
          "window to the message ('weights', an array of rows, each an "
          "array of doubles)", DEFAULT_MESSAGE_WEIGHTS,
          rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_MAP_HEAD,
      g_param_spec_int ("map-head", "Map head",
          "Head shown on the attn pad (-1 = the average of all heads)",
          -1, MAX_MAP_HEAD, DEFAULT_MAP_HEAD, rw | GST_PARAM_MUTABLE_PLAYING));

  gst_element_class_add_static_pad_template (element_class, &attn_template);
  element_class->request_new_pad = GST_DEBUG_FUNCPTR (obs_request_new_pad);
  element_class->release_pad = GST_DEBUG_FUNCPTR (obs_release_pad);
}

/* Events and queries arriving on the sink pad go to the features pad only:
 * the attn pad gets its own, in order with its maps. */
static GstIterator *
obs_sink_internal_links (GstPad * pad, GstObject * parent)
{
  GstPad *src = gst_element_get_static_pad (GST_ELEMENT (parent), "src");
  GValue v = G_VALUE_INIT;
  GstIterator *it;

  if (src == NULL)
    return NULL;
  g_value_init (&v, GST_TYPE_PAD);
  g_value_take_object (&v, src);
  it = gst_iterator_new_single (GST_TYPE_PAD, &v);
  g_value_unset (&v);
  return it;
}

void
gst_sattn_obs_init (GstSattnObs * obs, GstElement * element, GstPad * sinkpad)
{
  obs->post_messages = DEFAULT_POST_MESSAGES;
  obs->interval = DEFAULT_MESSAGE_INTERVAL;
  obs->sat_threshold = DEFAULT_SATURATION_THRESHOLD;
  obs->message_weights = DEFAULT_MESSAGE_WEIGHTS;
  obs->map_head = DEFAULT_MAP_HEAD;
  gst_sattn_map_init (&obs->map);
  g_queue_init (&obs->pending);
  sattn_stats_clear (&obs->acc);
  obs->acc_ts = obs->acc_end_ts = GST_CLOCK_TIME_NONE;
  obs->sat_warned_at = obs->nf_warned_at = GST_CLOCK_TIME_NONE;
  obs->pov_warned_at = obs->oov_warned_at = GST_CLOCK_TIME_NONE;
  gst_pad_set_iterate_internal_links_function (sinkpad,
      GST_DEBUG_FUNCPTR (obs_sink_internal_links));
}

static void
obs_drop_pending (GstSattnObs * obs)
{
  GstMessage *msg;

  while ((msg = g_queue_pop_head (&obs->pending)) != NULL)
    gst_message_unref (msg);
}

void
gst_sattn_obs_finalize (GstSattnObs * obs)
{
  obs_drop_pending (obs);
  g_clear_pointer (&obs->wbuf, g_free);
  g_clear_pointer (&obs->wtmp, g_free);
  obs->wbuf_floats = 0;
  gst_sattn_map_finalize (&obs->map);
}

/* ------------------------------------------------------------ properties */

gboolean
gst_sattn_obs_set_property (GstSattnObs * obs, guint prop_id,
    const GValue * value)
{
  switch (prop_id) {
    case PROP_POST_MESSAGES:
      obs->post_messages = g_value_get_boolean (value);
      return TRUE;
    case PROP_MESSAGE_INTERVAL:
      obs->interval = g_value_get_uint64 (value);
      return TRUE;
    case PROP_SATURATION_THRESHOLD:
      obs->sat_threshold = g_value_get_double (value);
      return TRUE;
    case PROP_MESSAGE_WEIGHTS:
      obs->message_weights = g_value_get_boolean (value);
      return TRUE;
    case PROP_MAP_HEAD:
      obs->map_head = g_value_get_int (value);
      return TRUE;
    default:
      return FALSE;
  }
}

gboolean
gst_sattn_obs_get_property (GstSattnObs * obs, guint prop_id, GValue * value)
{
  switch (prop_id) {
    case PROP_POST_MESSAGES:
      g_value_set_boolean (value, obs->post_messages);
      return TRUE;
    case PROP_MESSAGE_INTERVAL:
      g_value_set_uint64 (value, obs->interval);
      return TRUE;
    case PROP_SATURATION_THRESHOLD:
      g_value_set_double (value, obs->sat_threshold);
      return TRUE;
    case PROP_MESSAGE_WEIGHTS:
      g_value_set_boolean (value, obs->message_weights);
      return TRUE;
    case PROP_MAP_HEAD:
      g_value_set_int (value, obs->map_head);
      return TRUE;
    default:
      return FALSE;
  }
}

/* ------------------------------------------------------------ set-up */

void
gst_sattn_obs_stream_config (GstSattnObs * obs, GstElement * element,
    SattnStreamConfig * sc)
{
  gboolean post, weights, map;
  gdouble thr;
  float f;

  GST_OBJECT_LOCK (element);
  post = obs->post_messages;
  weights = obs->message_weights;
  thr = obs->sat_threshold;
  GST_OBJECT_UNLOCK (element);
  map = gst_sattn_map_requested (element, &obs->map);

  sc->collect_stats = post;
  /* The core reads 0 as SATTN_DEFAULT_SATURATION; the property's 0 (and a
   * value float rounds to 0) means "every row with a choice", which the
   * core spells SATTN_SATURATION_EVERY_ROW. */
  f = (float) thr;
  sc->saturation_threshold = f > 0.0f ? f : SATTN_SATURATION_EVERY_ROW;
  sc->keep_weights = map || (post && weights);
}

static void
obs_clear_acc (GstSattnObs * obs)
{
  sattn_stats_clear (&obs->acc);
  obs->acc_first = obs->acc_end = 0;
  obs->acc_ts = obs->acc_end_ts = GST_CLOCK_TIME_NONE;
}

/* The buffers for the stream's largest weights (*rows x *cols, as the
 * core gives them), grown when too small; on no memory, a warning and
 * weights off (FALSE). */
static gboolean
obs_weights_buffers (GstSattnObs * obs, GstElement * element,
    const SattnStream * s, gsize * rows, gsize * cols)
{
  sattn_stream_weights_size (s, rows, cols);
  if (obs->wbuf_floats >= *rows * *cols)
    return TRUE;
  g_free (obs->wbuf);
  g_free (obs->wtmp);
  obs->wbuf_floats = *rows * *cols;
  obs->wbuf = g_try_new (float, obs->wbuf_floats);
  obs->wtmp = g_try_new (float, obs->wbuf_floats);
  if (obs->wbuf != NULL && obs->wtmp != NULL)
    return TRUE;
  GST_ELEMENT_WARNING (element, RESOURCE, NO_SPACE_LEFT,
      ("No memory for the attention weights of a %" G_GSIZE_FORMAT
          " x %" G_GSIZE_FORMAT " window: no attention map and no message "
          "weights", *rows, *cols), (NULL));
  g_clear_pointer (&obs->wbuf, g_free);
  g_clear_pointer (&obs->wtmp, g_free);
  obs->wbuf_floats = 0;
  obs->weights_on = FALSE;
  return FALSE;
}

void
gst_sattn_obs_configure (GstSattnObs * obs, GstElement * element,
    const SattnModel * model, const SattnStream * s,
    const SattnStreamConfig * sc, gint rate, guint frame_size,
    gdouble user_scale)
{
  const SattnConfig *mc = sattn_model_config (model);
  gsize rows = 0, cols = 0;
  guint height;
  guint64 fps_n, fps_d, a, b;

  obs->stats_on = sc->collect_stats != 0;
  obs->weights_on = sc->keep_weights != 0;
  obs->active = obs->stats_on || obs->weights_on;
  obs->window = sc->window;
  obs->heads = mc->heads;
  obs->d_head = mc->d_head;
  obs->scale = mc->scale;
  obs->user_scale = user_scale;
  obs->map_head_warned = FALSE;
  obs->windows_total = 0;
  obs_clear_acc (obs);
  gst_sattn_map_reset (&obs->map);
  g_atomic_int_set (&obs->map.stream_set_up, 1);

  GST_DEBUG_OBJECT (element, "observing: statistics %d, weights %d",
      obs->stats_on, obs->weights_on);
  if (!obs->weights_on)
    return;

  /* the core's largest weights for this stream (a CLS row and column
   * more for a whole model with a CLS token) */
  if (!obs_weights_buffers (obs, element, s, &rows, &cols))
    return;

  /* The query rows a window computes, as the core says (a whole model's
   * rows are its weights' rows: a CLS row with the frames'). */
  height = sattn_model_kind (model) == SATTN_MODEL_WHOLE ? (guint) rows :
      (guint) sattn_stream_config_window_rows (sc);
  /* One map per window: (rate / frame-size) / hop per second. */
  fps_n = (guint64) rate;
  fps_d = (guint64) frame_size *sc->hop;
  for (a = fps_n, b = fps_d; b != 0;) {
    guint64 t = a % b;

    a = b;
    b = t;
  }
  fps_n /= a;
  fps_d /= a;
  if (fps_d > G_MAXINT) {
    gint n, d;

    gst_util_double_to_fraction ((gdouble) fps_n / (gdouble) fps_d, &n, &d);
    fps_n = (guint64) n;
    fps_d = (guint64) d;
  }
  gst_sattn_map_configure (&obs->map, (guint) cols, height, (gint) fps_n,
      (gint) fps_d);
}

gsize
gst_sattn_obs_split (GstSattnObs * obs, const SattnStream * s, gsize n)
{
  guint64 due;

  if (!obs->active)
    return n;
  /* Up to the next window's end, which the core knows. */
  due = sattn_stream_frames_to_window (s);
  return (gsize) MIN ((guint64) n, MAX (due, 1));
}

/* ------------------------------------------------------------ messages */

void
gst_sattn_obs_swapped (GstSattnObs * obs, GstElement * element,
    const SattnModel * model, const SattnStream * s)
{
  gsize rows = 0, cols = 0;
  guint height;

  obs->heads = sattn_model_config (model)->heads;
  if (!obs->weights_on)
    return;
  if (!obs_weights_buffers (obs, element, s, &rows, &cols))
    return;
  height = sattn_model_kind (model) == SATTN_MODEL_WHOLE ? (guint) rows :
      obs->map.height;
  if (cols != obs->map.width || height != obs->map.height)
    gst_sattn_map_configure (&obs->map, (guint) cols, height,
        obs->map.info.fps_n, obs->map.info.fps_d);
}

/* The weights (rows × cols) as an array of rows, each an array of
 * doubles. */
static void
take_weights_value (GstStructure * st, const float *w, gsize rows, gsize cols)
{
  GValue outer = G_VALUE_INIT;
  gsize i, j;

  g_value_init (&outer, GST_TYPE_ARRAY);
  for (i = 0; i < rows; i++) {
    GValue row = G_VALUE_INIT;

    g_value_init (&row, GST_TYPE_ARRAY);
    for (j = 0; j < cols; j++) {
      GValue v = G_VALUE_INIT;

      g_value_init (&v, G_TYPE_DOUBLE);
      g_value_set_double (&v, w[i * cols + j]);
      gst_value_array_append_and_take_value (&row, &v);
    }
    gst_value_array_append_and_take_value (&outer, &row);
  }
  gst_structure_take_value (st, "weights", &outer);
}

/* Queue the message for what was accumulated, and start anew. */
static void
obs_queue_message (GstSattnObs * obs, GstElement * element, SattnStream * s,
    const GstSegment * segment, gboolean with_weights)
{
  const SattnStats *a = &obs->acc;
  GstClockTime ts = obs->acc_ts, dur = obs->acc_end_ts - obs->acc_ts;
  GstClockTime stream_time = GST_CLOCK_TIME_NONE, running_time =
      GST_CLOCK_TIME_NONE;
  GstStructure *st;

  if (segment && segment->format == GST_FORMAT_TIME) {
    stream_time = gst_segment_to_stream_time (segment, GST_FORMAT_TIME, ts);
    running_time = gst_segment_to_running_time (segment, GST_FORMAT_TIME, ts);
  }
  st = gst_structure_new ("sattn",
      "timestamp", G_TYPE_UINT64, ts,
      "stream-time", G_TYPE_UINT64, stream_time,
      "running-time", G_TYPE_UINT64, running_time,
      "duration", G_TYPE_UINT64, dur,
      "windows", G_TYPE_UINT64, a->windows,
      "frames", G_TYPE_UINT64, obs->acc_end - obs->acc_first,
      "rows", G_TYPE_UINT64, a->rows,
      "masked-keys", G_TYPE_UINT64, a->masked_keys,
      "invalid-frames", G_TYPE_UINT64, a->invalid_frames,
      "overflow-frames", G_TYPE_UINT64, a->overflow_frames,
      "overflow-rows", G_TYPE_UINT64, a->overflow_rows,
      "fully-masked-rows", G_TYPE_UINT64, a->fully_masked_rows,
      "nonfinite-scores", G_TYPE_UINT64, a->nonfinite_scores,
      "score-min", G_TYPE_DOUBLE, a->score_min,
      "score-max", G_TYPE_DOUBLE, a->score_max,
      "lse-min", G_TYPE_DOUBLE, a->lse_min,
      "lse-max", G_TYPE_DOUBLE, a->lse_max,
      "max-weight", G_TYPE_DOUBLE, sattn_stats_mean_max_weight (a),
      "entropy", G_TYPE_DOUBLE, sattn_stats_mean_entropy (a),
      "saturated-rows", G_TYPE_UINT64, a->saturated_rows, NULL);
  if (with_weights && obs->wbuf) {
    gsize rows = 0, cols = 0;

    if (sattn_stream_last_weights (s, -1, obs->wbuf, &rows, &cols) == SATTN_OK)
      take_weights_value (st, obs->wbuf, rows, cols);
  }
  g_queue_push_tail (&obs->pending,
      gst_message_new_element (GST_OBJECT (element), st));
  obs_clear_acc (obs);
}

/* ------------------------------------------------------------ warnings */

static gboolean
warning_due (GstClockTime last, GstClockTime now)
{
  if (!GST_CLOCK_TIME_IS_VALID (last) || !GST_CLOCK_TIME_IS_VALID (now))
    return TRUE;
  /* Time going backwards: a new timeline after a seek or a resync. */
  return now < last || now - last >= WARNING_INTERVAL;
}

static void
queue_warning (GstSattnObs * obs, GstElement * element, gchar * text,
    gchar * debug)
{
  GError *err = g_error_new_literal (GST_STREAM_ERROR,
      GST_STREAM_ERROR_FAILED, text);
  gchar *path = gst_object_get_path_string (GST_OBJECT (element));
  gchar *full = g_strdup_printf ("%s (%s)", debug, path);

  GST_WARNING_OBJECT (element, "%s: %s", text, debug);
  g_queue_push_tail (&obs->pending, gst_message_new_warning (GST_OBJECT
          (element), err, full));
  g_error_free (err);
  g_free (path);
  g_free (full);
  g_free (text);
  g_free (debug);
}

/* The stream's statistics since the last call, cleared in the stream;
 * the parts its overflowed rows overflowed in are added to
 * obs->oov_parts (the core clears them with the statistics). */
static void
obs_take_stats (GstSattnObs * obs, SattnStream * s, SattnStats * w)
{
  uint64_t parts[SATTN_PART_COUNT];
  gsize p;

  if (sattn_stream_overflow_parts (s, parts, SATTN_PART_COUNT) == SATTN_OK)
    for (p = 0; p < SATTN_PART_COUNT; p++)
      obs->oov_parts[p] += parts[p];
  sattn_stream_get_stats (s, w, 1);
}

/* What to check when a part of the layer overflows. */
static const gchar *
part_advice (SattnPart part)
{
  switch (part) {
    case SATTN_PART_OUT_PROJ:
      return "the output projection weights";
    case SATTN_PART_NORM1:
      return "norm1's weight and bias";
    case SATTN_PART_NORM2:
      return "norm2's weight and bias";
    case SATTN_PART_LINEAR1:
      return "the feed-forward's linear1 weights";
    case SATTN_PART_LINEAR2:
      return "the feed-forward's linear2 weights";
    case SATTN_PART_RESIDUAL:
      return "the weights (each term of the residual sum fits float32, "
          "their sum does not)";
    default:
      return "the model's weights";
  }
}

/* Finite frames whose Q/K/V projection overflowed (the invalid-frames
 * policy was applied to them) and output rows that overflowed after the
 * attention (written as zeros under every policy), named by the part of
 * the layer that overflowed (the one with the most rows first): the cause
 * is the weights' scale against the input's. */
static void
obs_check_overflow (GstSattnObs * obs, GstElement * element,
    const SattnStats * w, GstClockTime ts)
{
  gchar *text, *debug;

  obs->pov_frames += w->overflow_frames;
  obs->oov_rows += w->overflow_rows;
  if (w->overflow_frames > 0 && warning_due (obs->pov_warned_at, ts)) {
    text = g_strdup_printf ("Input frames at %" GST_TIME_FORMAT " have "
        "finite samples but their query/key/value projection overflows "
        "float32 with the loaded weights: they were treated as invalid "
        "frames (see invalid-frames); reduce the input amplitude or check "
        "the scale of the weights", GST_TIME_ARGS (ts));
    debug = g_strdup_printf ("%" G_GUINT64_FORMAT " such frame(s) since the "
        "last such warning; at most one such warning per %u s of stream "
        "time", obs->pov_frames, (guint) (WARNING_INTERVAL / GST_SECOND));
    queue_warning (obs, element, text, debug);
    obs->pov_warned_at = ts;
    obs->pov_frames = 0;
  }
  if (w->overflow_rows > 0 && warning_due (obs->oov_warned_at, ts)) {
    SattnPart worst = SATTN_PART_UNKNOWN;
    guint64 most = 0;
    GString *by_part = g_string_new (NULL);
    const gchar *name;
    gsize p;

    for (p = 0; p < SATTN_PART_COUNT; p++) {
      if (obs->oov_parts[p] == 0)
        continue;
      g_string_append_printf (by_part, "%s%s: %" G_GUINT64_FORMAT,
          by_part->len ? ", " : "", sattn_part_string ((SattnPart) p),
          obs->oov_parts[p]);
      if (obs->oov_parts[p] > most) {
        most = obs->oov_parts[p];
        worst = (SattnPart) p;
      }
    }
    name = sattn_part_string (worst);
    text = g_strdup_printf ("%c%s overflows float32 at %" GST_TIME_FORMAT
        " with the loaded weights: those output rows were written as zeros "
        "and flagged invalid (under every invalid-frames policy); reduce "
        "the input amplitude or check the scale of %s",
        g_ascii_toupper (name[0]), name + 1, GST_TIME_ARGS (ts),
        part_advice (worst));
    debug = g_strdup_printf ("%" G_GUINT64_FORMAT " such row(s) since the "
        "last such warning (by part: %s); at most one such warning per %u s "
        "of stream time", obs->oov_rows, by_part->str,
        (guint) (WARNING_INTERVAL / GST_SECOND));
    g_string_free (by_part, TRUE);
    queue_warning (obs, element, text, debug);
    obs->oov_warned_at = ts;
    obs->oov_rows = 0;
    memset (obs->oov_parts, 0, sizeof (obs->oov_parts));
  }
}

void
gst_sattn_obs_frames (GstSattnObs * obs, GstElement * element,
    SattnStream * s, GstClockTime ts)
{
  SattnStats w;

  if (obs->stats_on)
    return;
  /* Without statistics the stream still counts these; nothing else in
   * its statistics is read. */
  obs_take_stats (obs, s, &w);
  if (w.overflow_frames > 0 || w.overflow_rows > 0)
    obs_check_overflow (obs, element, &w, ts);
}

static void
obs_check_warnings (GstSattnObs * obs, GstElement * element,
    const SattnStats * w, GstClockTime ts)
{
  const gdouble def_scale = 1.0 / sqrt ((gdouble) MAX (obs->d_head, 1));
  const gdouble thr = obs->sat_threshold;
  gboolean saturated;

  obs_check_overflow (obs, element, w, ts);

  /* The core counts only rows with two or more visible keys (a single
   * visible key has weight 1 with nothing wrong).  Such a row saturates only
   * when its best score leads the others by log (t / (1 - t)) or more; the
   * check on the window's score spread is kept as a guard. */
  saturated = w->saturated_rows > 0 && (thr >= 1.0 || thr <= 0.0 ||
      w->score_max - w->score_min >= log (thr / (1.0 - thr)));
  if (saturated)
    obs->sat_windows++;
  if (saturated && warning_due (obs->sat_warned_at, ts)) {
    gchar *text, *cause, *debug;

    if (obs->user_scale > 1.5 * def_scale && obs->d_head > 1) {
      cause = g_strdup_printf ("scale=%g with head-dim %" G_GSIZE_FORMAT
          " saturates the softmax (scaled scores up to %.3g; dot products "
          "grow with head-dim): use scale=0 (1/sqrt(head-dim) = %.3g) or "
          "reduce the input amplitude", obs->user_scale, obs->d_head,
          w->score_max, def_scale);
    } else {
      cause = g_strdup_printf ("the input amplitude saturates the softmax "
          "(scaled scores from %.3g to %.3g with scale %.3g): reduce the "
          "input amplitude (normalise the signal before sattn) or set a "
          "smaller scale", w->score_min, w->score_max, obs->scale);
    }
    text = g_strdup_printf ("Attention is saturated at %" GST_TIME_FORMAT
        ": %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " softmax rows put "
        "more than %.3g of their weight on one key; %s",
        GST_TIME_ARGS (ts), w->saturated_rows, w->rows,
        obs->sat_threshold, cause);
    debug = g_strdup_printf ("window %" G_GUINT64_FORMAT ", lse %.4g to "
        "%.4g, mean max-weight %.4f, mean entropy %.4f; %" G_GUINT64_FORMAT
        " window(s) with saturated rows since the last such warning; at "
        "most one such warning per %u s of stream time",
        obs->windows_total, w->lse_min, w->lse_max,
        sattn_stats_mean_max_weight (w), sattn_stats_mean_entropy (w),
        obs->sat_windows, (guint) (WARNING_INTERVAL / GST_SECOND));
    queue_warning (obs, element, text, debug);
    g_free (cause);
    obs->sat_warned_at = ts;
    obs->sat_windows = 0;
  }

  if (w->nonfinite_scores > 0)
    obs->nf_windows++;
  if (w->nonfinite_scores > 0 && warning_due (obs->nf_warned_at, ts)) {
    /* A dot product of head-dim terms overflows float32 once the frame
     * values reach about sqrt (FLT_MAX / head-dim). */
    const gdouble big = sqrt (FLT_MAX / (gdouble) MAX (obs->d_head, 1));
    gchar *text, *debug;

    text = g_strdup_printf ("Attention scores overflowed at %"
        GST_TIME_FORMAT ": %" G_GUINT64_FORMAT " scores were NaN or "
        "infinite; NaN scores were masked and infinite ones took all the "
        "weight, so the features of this window are degenerate: reduce the "
        "input amplitude (frame values around %.1e overflow float32 dot "
        "products with head-dim %" G_GSIZE_FORMAT ") or set a smaller scale",
        GST_TIME_ARGS (ts), w->nonfinite_scores, big, obs->d_head);
    debug = g_strdup_printf ("window %" G_GUINT64_FORMAT ", finite scaled "
        "scores from %.4g to %.4g, scale %.4g, %" G_GUINT64_FORMAT " fully "
        "masked rows; %" G_GUINT64_FORMAT " window(s) with non-finite "
        "scores since the last such warning; at most one such warning per "
        "%u s of stream time", obs->windows_total, w->score_min,
        w->score_max, obs->scale, w->fully_masked_rows, obs->nf_windows,
        (guint) (WARNING_INTERVAL / GST_SECOND));
    queue_warning (obs, element, text, debug);
    obs->nf_warned_at = ts;
    obs->nf_windows = 0;
  }
}

/* ------------------------------------------------------------ per window */

/* The weights the map shows, in wbuf: one head, or for head -1 the sum of
 * the heads (the map scales each row to its maximum, so the sum draws the
 * same picture as the mean); summed here head by head, which vectorises,
 * rather than averaged element by element. */
static gboolean
obs_map_weights (GstSattnObs * obs, SattnStream * s, gint head, gsize * rows,
    gsize * cols)
{
  gsize h, i, n;

  if (head >= 0 || obs->heads == 1)
    return sattn_stream_last_weights (s, MAX (head, 0), obs->wbuf, rows,
        cols) == SATTN_OK;
  if (sattn_stream_last_weights (s, 0, obs->wbuf, rows, cols) != SATTN_OK)
    return FALSE;
  n = *rows * *cols;
  for (h = 1; h < obs->heads; h++) {
    if (sattn_stream_last_weights (s, (int) h, obs->wtmp, NULL, NULL) !=
        SATTN_OK)
      return FALSE;
    for (i = 0; i < n; i++)
      obs->wbuf[i] += obs->wtmp[i];
  }
  return TRUE;
}

void
gst_sattn_obs_window (GstSattnObs * obs, GstElement * element,
    SattnStream * s, guint64 first, guint64 end, GstClockTime ts,
    GstClockTime end_ts, const GstSegment * segment)
{
  GstClockTime interval;
  gboolean with_weights;
  gint head;
  SattnStats w;

  if (!obs->active)
    return;
  obs->windows_total++;

  GST_OBJECT_LOCK (element);
  interval = obs->interval;
  head = obs->map_head;
  with_weights = obs->message_weights;
  GST_OBJECT_UNLOCK (element);

  if (obs->weights_on && gst_sattn_map_requested (element, &obs->map)) {
    gsize rows = 0, cols = 0;

    if (head >= (gint) obs->heads) {
      if (!obs->map_head_warned)
        GST_WARNING_OBJECT (element, "map-head=%d but there are %"
            G_GSIZE_FORMAT " heads: showing their average", head, obs->heads);
      obs->map_head_warned = TRUE;
      head = -1;
    }
    if (obs_map_weights (obs, s, head, &rows, &cols))
      gst_sattn_map_push (element, &obs->map, obs->wbuf, rows, cols, ts,
          end_ts - ts, segment);
  }

  if (!obs->stats_on)
    return;
  obs_take_stats (obs, s, &w);
  GST_LOG_OBJECT (element, "window %" G_GUINT64_FORMAT " at %"
      GST_TIME_FORMAT ": frames %" G_GUINT64_FORMAT "-%" G_GUINT64_FORMAT
      ", rows %" G_GUINT64_FORMAT ", masked-keys %" G_GUINT64_FORMAT
      ", invalid-frames %" G_GUINT64_FORMAT ", fully-masked-rows %"
      G_GUINT64_FORMAT ", nonfinite-scores %" G_GUINT64_FORMAT
      ", saturated-rows %" G_GUINT64_FORMAT ", score %g to %g, lse %g to "
      "%g, max-weight %.4f, entropy %.4f", obs->windows_total,
      GST_TIME_ARGS (ts), first, end, w.rows, w.masked_keys,
      w.invalid_frames, w.fully_masked_rows, w.nonfinite_scores,
      w.saturated_rows, w.score_min, w.score_max, w.lse_min, w.lse_max,
      sattn_stats_mean_max_weight (&w), sattn_stats_mean_entropy (&w));
  obs_check_warnings (obs, element, &w, ts);

  if (!GST_CLOCK_TIME_IS_VALID (obs->acc_ts)) {
    obs->acc_first = first;
    obs->acc_ts = ts;
  }
  obs->acc_end = end;
  obs->acc_end_ts = end_ts;
  sattn_stats_merge (&obs->acc, &w);
  if (interval == 0 || obs->acc_end_ts - obs->acc_ts >= interval)
    obs_queue_message (obs, element, s, segment, with_weights);
}

static void
obs_post_pending (GstSattnObs * obs, GstElement * element)
{
  GstMessage *msg;

  while ((msg = g_queue_pop_head (&obs->pending)) != NULL)
    gst_element_post_message (element, msg);
}

void
gst_sattn_obs_pushed (GstSattnObs * obs, GstElement * element)
{
  gst_sattn_map_main_pushed (&obs->map);
  obs_post_pending (obs, element);
}

void
gst_sattn_obs_end_timeline (GstSattnObs * obs, GstElement * element,
    SattnStream * s, const GstSegment * segment)
{
  gboolean with_weights;

  if (obs->stats_on && GST_CLOCK_TIME_IS_VALID (obs->acc_ts)) {
    GST_OBJECT_LOCK (element);
    with_weights = obs->message_weights;
    GST_OBJECT_UNLOCK (element);
    obs_queue_message (obs, element, s, segment, with_weights);
  }
  obs_post_pending (obs, element);
}

/* ------------------------------------------------------------ flushing */

void
gst_sattn_obs_reset (GstSattnObs * obs, SattnStream * s)
{
  obs_drop_pending (obs);
  obs_clear_acc (obs);
  if (s && obs->stats_on)
    sattn_stream_get_stats (s, NULL, 1);
  gst_sattn_map_reset (&obs->map);
}

void
gst_sattn_obs_flush_start (GstSattnObs * obs, GstElement * element)
{
  gst_sattn_map_flush_start (element, &obs->map);
}

void
gst_sattn_obs_flush_stop (GstSattnObs * obs, GstElement * element)
{
  gst_sattn_map_flush_stop (element, &obs->map);
}

void
gst_sattn_obs_eos (GstSattnObs * obs, GstElement * element,
    const GstSegment * segment)
{
  gst_sattn_map_eos (element, &obs->map, segment);
}
