/* The sattn element's weights swap while PAUSED or PLAYING: setting
 * `weights` or `weights-prefix` then loads and checks the file on a
 * loader thread (never the streaming thread); the new model takes over
 * at the next window boundary, its stream primed with the frames the
 * windows after the boundary still need, so that from the boundary on
 * the output is the new model's on the same frames.  A file that cannot
 * be used posts a warning and leaves the running model in place; the
 * `weights` and `weights-prefix` properties then name the file in use
 * again (unless they were set once more meanwhile), so that new caps or
 * the next READY do not read the refused file.  Caps that arrive before
 * the loader has looked at a request apply the same rule
 * (gst_sattn_swap_caps_request, which set_caps calls): whichever sees it
 * first, a request is accepted or refused alike.
 *
 * Locking: `requested` is guarded by the object lock (set_property);
 * `lock` guards the job generation and the ready model; the history and
 * the takeover belong to the streaming thread; the pool is created by
 * the streaming thread and freed by state changes / finalize after the
 * pads are deactivated.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_SWAP_H
#define GST_SATTN_SWAP_H

#include <gst/gst.h>

#include "sattn/sattn.h"

G_BEGIN_DECLS

typedef struct
{
  /* Object lock. */
  gboolean requested;           /* weights / weights-prefix set running */

  /* lock. */
  GMutex lock;
  guint64 generation;           /* of the latest job; older results go */
  gboolean cancelled;           /* no more results (READY, finalize) */
  SattnModel *ready_model;      /* loaded, checked, not yet in use */
  SattnStream *ready_stream;
  gchar *ready_path;
  gchar *ready_key;             /* its weights key (gst_sattn_weights_key) */
  gchar **ready_labels;         /* output=classes: its labels (the labels
                                   property's file, else its own) */
  gint ready;                   /* atomic: ready_stream != NULL */
  gint jobs;                    /* atomic: jobs queued or running */

  /* Streaming thread. */
  GThreadPool *pool;            /* one loader thread, jobs in order */
  gboolean recording;           /* a job is out: keep the history */
  gsize d_model, hist_cap;      /* history: the last hist_cap frames */
  float *hist;
  guint8 *hist_ok;
  gsize hist_len, hist_head;    /* frames held, next slot */
  float *prime_out;             /* rows of the priming pushes, dropped */
  gsize prime_rows, row_floats;
  SattnRowInfo *prime_info;
} GstSattnSwap;

/* What a swap keeps: what the element outputs and the window's key
 * count. */
typedef struct
{
  SattnModelKind kind;
  gsize classes, d_out, extra_keys;
  gint rate, channels;          /* the running stream's (0: not known) */
} GstSattnModelShape;

G_GNUC_INTERNAL void gst_sattn_model_shape (const SattnModel * m,
    GstSattnModelShape * shape);
/* Why m cannot replace a running model of the given shape (a sentence to
 * g_free), or NULL when it can. */
G_GNUC_INTERNAL gchar *gst_sattn_swap_misfit (const GstSattnModelShape *
    running, const SattnModel * m);

G_GNUC_INTERNAL void gst_sattn_swap_init (GstSattnSwap * sw);
/* Cancel and join the loader, drop what it made and the history
 * (PAUSED -> READY, finalize with stop = TRUE). */
G_GNUC_INTERNAL void gst_sattn_swap_stop (GstSattnSwap * sw);
G_GNUC_INTERNAL void gst_sattn_swap_clear (GstSattnSwap * sw);
/* The stream the jobs were made for is gone (caps, READY): whatever is
 * loading or loaded is for the old one. */
G_GNUC_INTERNAL void gst_sattn_swap_discard (GstSattnSwap * sw);

G_END_DECLS

#endif /* GST_SATTN_SWAP_H */
