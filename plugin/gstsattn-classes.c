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

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The text of the labels file path into *text (*len bytes, NUL added):
 * a regular file (not a FIFO, a device or a directory, checked on the
 * open descriptor, which is opened without blocking) of at most
 * GST_SATTN_LABELS_MAX_BYTES.  FALSE with *why. */
static gboolean
gst_sattn_labels_read (const gchar * path, gchar ** text, gsize * len,
    gchar ** why)
{
  struct stat st;
  gchar *buf;
  gssize got;
  gsize have = 0;
  int fd = g_open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);

  if (fd < 0) {
    *why = g_strdup_printf ("cannot read the labels file %s: %s", path,
        g_strerror (errno));
    return FALSE;
  }
  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode)) {
    *why = g_strdup_printf ("the labels file %s is not a regular file (a "
        "FIFO, device or directory cannot be a labels file)", path);
    close (fd);
    return FALSE;
  }
  if (st.st_size > GST_SATTN_LABELS_MAX_BYTES) {
    *why = g_strdup_printf ("the labels file %s is %" G_GINT64_FORMAT " bytes; "
        "a labels file is at most %d bytes (one label per line)", path,
        (gint64) st.st_size, GST_SATTN_LABELS_MAX_BYTES);
    close (fd);
    return FALSE;
  }
  /* read to the end or the bound, whatever the size said */
  buf = g_malloc ((gsize) st.st_size + 2);
  while (have <= (gsize) st.st_size &&
      (got = read (fd, buf + have, (gsize) st.st_size + 1 - have)) > 0)
    have += (gsize) got;
  close (fd);
  if (have > (gsize) st.st_size) {
    *why = g_strdup_printf ("the labels file %s grew while it was read", path);
    g_free (buf);
    return FALSE;
  }
  buf[have] = '\0';
  *text = buf;
  *len = have;
  return TRUE;
}

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
    gchar *text = NULL, *nul, **lines;
    gsize len = 0, n = 0, line = 1, end, k;

    if (!gst_sattn_labels_read (path, &text, &len, why))
      return FALSE;
    if ((nul = memchr (text, '\0', len)) != NULL) {
      for (k = 0; text + k < nul; k++)
        line += text[k] == '\n';
      *why = g_strdup_printf ("the labels file %s has a NUL byte on line %"
          G_GSIZE_FORMAT "; labels are text, one per line", path, line);
      g_free (text);
      return FALSE;
    }
    /* The count first (trailing blank lines, the file's last newline,
     * are not labels), before any label is allocated. */
    end = len;
    while (end > 0 && g_ascii_isspace (text[end - 1]))
      end--;
    for (k = 0; k < end; k++)
      n += text[k] == '\n';
    n += end > 0;
    if (n != classes) {
      *why = g_strdup_printf ("the labels file %s has %" G_GSIZE_FORMAT
          " labels but the model's head has %u classes", path, n, classes);
      g_free (text);
      return FALSE;
    }
    text[end] = '\0';
    lines = g_strsplit (text, "\n", -1);
    g_free (text);
    for (i = 0; lines[i] != NULL; i++)
      g_strstrip (lines[i]);
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

/* a ranks below b: less probable, or as probable with a higher index */
static inline gboolean
gst_sattn_ranks_below (const float *p, guint a, guint b)
{
  return p[a] < p[b] || (p[a] == p[b] && a > b);
}

/* The k most probable of n classes into order[0, k), most probable first
 * (ties: the lower index), in O(n log k): a min-heap of the best k so far
 * (order[0] the worst of them), most classes rejected by one comparison
 * with it, then the k sorted. */
static void
gst_sattn_top_k (const float *p, guint n, guint * order, guint k)
{
  guint i, j, size = 0;

  if (k == 0)
    return;
  for (i = 0; i < n; i++) {
    guint at;

    if (size == k) {
      if (gst_sattn_ranks_below (p, i, order[0]))
        continue;
      /* replace the worst, sift it down */
      at = 0;
      order[0] = i;
      for (;;) {
        guint l = 2 * at + 1, r = l + 1, m = at;

        if (l < size && gst_sattn_ranks_below (p, order[l], order[m]))
          m = l;
        if (r < size && gst_sattn_ranks_below (p, order[r], order[m]))
          m = r;
        if (m == at)
          break;
        j = order[at];
        order[at] = order[m];
        order[m] = j;
        at = m;
      }
      continue;
    }
    /* sift up */
    at = size++;
    order[at] = i;
    while (at > 0 && gst_sattn_ranks_below (p, order[at], order[(at - 1) / 2])) {
      j = order[at];
      order[at] = order[(at - 1) / 2];
      order[(at - 1) / 2] = j;
      at = (at - 1) / 2;
    }
  }
  /* insertion sort of the k (k <= 64), best first */
  for (i = 1; i < size; i++) {
    guint v = order[i];

    for (j = i; j > 0 && gst_sattn_ranks_below (p, order[j - 1], v); j--)
      order[j] = order[j - 1];
    order[j] = v;
  }
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
  guint i, k, best;

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
  gst_sattn_top_k (probs, c->classes, order, k);
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
