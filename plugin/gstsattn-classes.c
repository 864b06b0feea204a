/* The sattn element's decisions for a whole model's output=classes:
 * labels (the `labels` property's file or the model's metadata) and the
 * `sattn-class` element message:
 *
 *   sattn-class, label=(string)QPSK, index=(uint)1,
 *     probability=(double)0.93, top-k-labels=(string)< QPSK, 8PSK, BPSK >,
 *     top-k-probabilities=(double)< 0.93, 0.04, 0.01 >,
 *     timestamp=(guint64), duration=(guint64), stream-time=(guint64),
 *     running-time=(guint64), window-start=(guint64),
 *     in-contract=(boolean)true, input-rms=(double)1.02,
 *     rejected=(string)none
 *
 * posted when the decision changes and otherwise at most once per
 * message-interval of running time.  The decision is the most probable
 * class (index, probability), or label "unknown" (index and probability
 * still the most probable class's) when the window is outside the
 * model's input contract (rejected=out-of-contract; in-contract false) or
 * that probability is below min-probability (rejected=low-probability).
 * A window without a usable frame has no decision: nothing is posted for
 * it, and the next decision counts as a change.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-classes.h"

#include <string.h>

gboolean
gst_sattn_classes_labels (const SattnModel * model, const gchar * path,
    gchar *** labels, gchar ** why)
{
  const guint classes = (guint) sattn_model_classes (model);
  gchar **out;
  guint i;

  *labels = NULL;
  *why = NULL;
  if (path != NULL && path[0] != '\0') {
    gchar *text = NULL;
    GError *err = NULL;
    gchar **lines;
    guint n;

    if (!g_file_get_contents (path, &text, NULL, &err)) {
      *why = g_strdup_printf ("cannot read the labels file: %s", err->message);
      g_clear_error (&err);
      return FALSE;
    }
    lines = g_strsplit (text, "\n", -1);
    g_free (text);
    n = g_strv_length (lines);
    /* Trailing blank lines (the file's last newline) are not labels. */
    while (n > 0 && g_strstrip (lines[n - 1])[0] == '\0') {
      g_free (lines[n - 1]);
      lines[--n] = NULL;
    }
    for (i = 0; i < n; i++)
      g_strstrip (lines[i]);
    if (n != classes) {
      *why = g_strdup_printf ("the labels file %s has %u labels but the "
          "model's head has %u classes", path, n, classes);
      g_strfreev (lines);
      return FALSE;
    }
    *labels = lines;
    return TRUE;
  }
  out = g_new0 (gchar *, classes + 1);
  for (i = 0; i < classes; i++) {
    const char *l = sattn_model_label (model, i);
    out[i] = l != NULL ? g_strdup (l) : g_strdup_printf ("%u", i);
  }
  *labels = out;
  return TRUE;
}

void
gst_sattn_classes_setup (GstSattnClasses * c, gchar ** labels, guint classes)
{
  g_strfreev (c->labels);
  c->labels = labels;
  c->classes = classes;
  gst_sattn_classes_reset (c);
}

void
gst_sattn_classes_reset (GstSattnClasses * c)
{
  c->last_index = -1;
  c->last_post = GST_CLOCK_TIME_NONE;
}

void
gst_sattn_classes_clear (GstSattnClasses * c)
{
  g_strfreev (c->labels);
  c->labels = NULL;
  c->classes = 0;
  gst_sattn_classes_reset (c);
}

void
gst_sattn_classes_window (GstSattnClasses * c, GstElement * element,
    const float *probs, gboolean valid, const SattnRowCheck * check,
    gdouble min_probability, guint top_k, GstClockTime interval,
    GstClockTime ts, GstClockTime duration, GstClockTime window_start,
    const GstSegment * segment)
{
  const gchar *rejected;
  gint decision;
  GValue labels = G_VALUE_INIT, ps = G_VALUE_INIT, v = G_VALUE_INIT;
  GstClockTime running, stream;
  GstStructure *st;
  guint order[64];
  guint i, j, k, best;

  if (c->classes == 0 || c->labels == NULL)
    return;
  if (!valid) {
    c->last_index = -1;
    return;
  }
  best = 0;
  for (i = 1; i < c->classes; i++)
    if (probs[i] > probs[best])
      best = i;
  rejected = !check->in_contract ? "out-of-contract" :
      probs[best] < min_probability ? "low-probability" : "none";
  decision = rejected[0] == 'n' ? (gint) best : GST_SATTN_CLASS_UNKNOWN;
  running = segment->format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID (ts)
      ? gst_segment_to_running_time (segment, GST_FORMAT_TIME, ts)
      : GST_CLOCK_TIME_NONE;
  if (decision == c->last_index && GST_CLOCK_TIME_IS_VALID (c->last_post)
      && GST_CLOCK_TIME_IS_VALID (running) && interval > 0
      && running < c->last_post + interval)
    return;
  if (decision == c->last_index && interval > 0
      && !GST_CLOCK_TIME_IS_VALID (running))
    return;
  stream = segment->format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID (ts)
      ? gst_segment_to_stream_time (segment, GST_FORMAT_TIME, ts)
      : GST_CLOCK_TIME_NONE;

  /* The top k, most probable first (ties: the lower index). */
  k = MIN (MIN (top_k, c->classes), G_N_ELEMENTS (order));
  for (i = 0; i < k; i++) {
    guint pick = G_MAXUINT;
    for (j = 0; j < c->classes; j++) {
      gboolean used = FALSE;
      guint u;
      for (u = 0; u < i && !used; u++)
        used = order[u] == j;
      if (!used && (pick == G_MAXUINT || probs[j] > probs[pick]))
        pick = j;
    }
    order[i] = pick;
  }
  g_value_init (&labels, GST_TYPE_ARRAY);
  g_value_init (&ps, GST_TYPE_ARRAY);
  for (i = 0; i < k; i++) {
    g_value_init (&v, G_TYPE_STRING);
    g_value_set_string (&v, c->labels[order[i]]);
    gst_value_array_append_and_take_value (&labels, &v);
    g_value_init (&v, G_TYPE_DOUBLE);
    g_value_set_double (&v, probs[order[i]]);
    gst_value_array_append_and_take_value (&ps, &v);
  }
  st = gst_structure_new (GST_SATTN_CLASS_MESSAGE,
      "label", G_TYPE_STRING, decision == GST_SATTN_CLASS_UNKNOWN ?
      GST_SATTN_CLASS_UNKNOWN_LABEL : c->labels[best],
      "index", G_TYPE_UINT, best,
      "probability", G_TYPE_DOUBLE, (gdouble) probs[best],
      "timestamp", G_TYPE_UINT64, (guint64) ts,
      "duration", G_TYPE_UINT64, (guint64) duration,
      "stream-time", G_TYPE_UINT64, (guint64) stream,
      "running-time", G_TYPE_UINT64, (guint64) running,
      "window-start", G_TYPE_UINT64, (guint64) window_start,
      "in-contract", G_TYPE_BOOLEAN, check->in_contract != 0,
      "input-rms", G_TYPE_DOUBLE, (gdouble) check->input_rms,
      "rejected", G_TYPE_STRING, rejected, NULL);
  gst_structure_take_value (st, "top-k-labels", &labels);
  gst_structure_take_value (st, "top-k-probabilities", &ps);
  c->last_index = decision;
  c->last_post = running;
  gst_element_post_message (element,
      gst_message_new_element (GST_OBJECT (element), st));
}
