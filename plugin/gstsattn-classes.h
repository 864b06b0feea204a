/* The sattn element's decisions: labels and `sattn-class` messages for a
 * whole model's output=classes (see gstsattn-classes.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_CLASSES_H
#define GST_SATTN_CLASSES_H

#include <gst/gst.h>

#include "sattn/sattn.h"

G_BEGIN_DECLS

#define GST_SATTN_CLASS_MESSAGE "sattn-class"
#define GST_SATTN_DEFAULT_TOP_K 3
/* The largest labels file read (the labels property): 1 MiB. */
#define GST_SATTN_LABELS_MAX_BYTES (1 << 20)
/* The decision of a window the model's contract or min-probability
 * rejects (its label). */
#define GST_SATTN_CLASS_UNKNOWN_LABEL "unknown"
#define GST_SATTN_CLASS_UNKNOWN (-2)

typedef struct
{
  /* Streaming thread (set up by set_caps). */
  gchar **labels;               /* classes strings (NULL-terminated) */
  guint classes;
  gint last_index;              /* -1: no decision posted since a reset;
                                   GST_SATTN_CLASS_UNKNOWN: "unknown" */
  GstClockTime last_post;       /* running time of the last message */
} GstSattnClasses;

/* The labels for model: the file named by labels_path (one label per
 * line, as NNStreamer's decoders read; blank lines at the end ignored)
 * when set, else the model's own (metadata), else "0", "1", ...  FALSE
 * with *why (g_free) when the file cannot be read, is not a regular file
 * or is larger than GST_SATTN_LABELS_MAX_BYTES, holds a NUL byte (its
 * line named), or its count differs from the model's classes (both counts
 * named; counted before any label is allocated). */
G_GNUC_INTERNAL
gboolean gst_sattn_classes_labels (const SattnModel * model,
    const gchar * labels_path, gchar *** labels, gchar ** why);

/* Take labels over for a new stream (frees the old ones). */
G_GNUC_INTERNAL
void gst_sattn_classes_setup (GstSattnClasses * c, gchar ** labels,
    guint classes);
G_GNUC_INTERNAL
void gst_sattn_classes_reset (GstSattnClasses * c);
G_GNUC_INTERNAL
void gst_sattn_classes_clear (GstSattnClasses * c);

/* One window's probabilities (c->classes floats), valid or not: posts a
 * `sattn-class` element message when the decision changes, or when
 * interval (ns; 0 = every window) has passed since the last one.  The
 * decision is the most probable class, or "unknown" when the window is
 * outside the model's input contract (check) or that class's probability
 * is below min_probability.  ts and duration: the row's timestamps;
 * segment converts them. */
G_GNUC_INTERNAL
void gst_sattn_classes_window (GstSattnClasses * c, GstElement * element,
    const float *probs, gboolean valid, const SattnRowCheck * check,
    gdouble min_probability, guint top_k, GstClockTime interval,
    GstClockTime ts, GstClockTime duration, GstClockTime window_start,
    const GstSegment * segment);

G_END_DECLS

#endif /* GST_SATTN_CLASSES_H */
