/* The sattn element's weights swap while running, and the same rule for
 * caps that arrive before the loader took a request up: see
 * gstsattn-swap.h.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-priv.h"
#include "gstsattn-cache.h"

#include <string.h>

/* A request to load, with a snapshot of what the running stream is. */
typedef struct
{
  GstSattn *self;
  guint64 generation;
  gchar *path, *prefix;
  gchar *labels;                /* the labels property (a file) or NULL */
  GstSattnSettings c;           /* the settings set_caps used */
  guint64 d_model;
  SattnStreamConfig sc;
  gboolean zero_attn;
  GstSattnModelShape running;   /* what the new model must keep */
  gchar *in_use;                /* the running model's weights key */
} GstSattnSwapJob;

void
gst_sattn_model_shape (const SattnModel * m, GstSattnModelShape * shape)
{
  shape->kind = sattn_model_kind (m);
  shape->classes = sattn_model_classes (m);
  shape->d_out = sattn_model_d_out (m);
  shape->extra_keys = sattn_model_extra_keys (m);
}

gchar *
gst_sattn_swap_misfit (const GstSattnModelShape * running, const SattnModel * m)
{
  GstSattnModelShape s;

  gst_sattn_model_shape (m, &s);
  if (s.kind != running->kind) {
    return g_strdup_printf ("it is %s where the running model is %s; a swap "
        "keeps what the element outputs (a change of model kind needs "
        "READY)", s.kind == SATTN_MODEL_WHOLE ? "a whole model" :
        "one attention layer", running->kind == SATTN_MODEL_WHOLE ?
        "a whole model" : "one attention layer");
  }
  if (s.classes != running->classes) {
    return g_strdup_printf ("its head has %" G_GSIZE_FORMAT " classes where "
        "the running model's has %" G_GSIZE_FORMAT "; a swap keeps the "
        "output rows (a change of classes needs READY)", s.classes,
        running->classes);
  }
  if (s.d_out != running->d_out) {
    return g_strdup_printf ("its output rows have %" G_GSIZE_FORMAT " values "
        "where the running model's have %" G_GSIZE_FORMAT "; a swap keeps "
        "d_model and d_out (a change of geometry needs READY)", s.d_out,
        running->d_out);
  }
  if (s.extra_keys != running->extra_keys) {
    return g_strdup_printf ("it has %" G_GSIZE_FORMAT " extra keys (bias_k, "
        "zero attention) where the running model has %" G_GSIZE_FORMAT "; a "
        "swap keeps the window's key count (the attention map's width)",
        s.extra_keys, running->extra_keys);
  }
  return NULL;
}

void
gst_sattn_swap_warn (GstSattn * self, const gchar * path,
    const gchar * prefix, const gchar * why)
{
  GST_DEBUG_OBJECT (self, "swap refused: %s", why);
  GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS,
      ("The weights file %s (prefix \"%s\") cannot replace the running "
          "model, which stays in use: %s", path ? path :
          "(none: identity projections)", prefix ? prefix : "", why), (NULL));
}

/* The model in use (weights key in_use, NULL = identity projections) for
 * d_model-value frames, a new reference: the running one when it has
 * these frames, the one read at READY, or the file read again; NULL when
 * it cannot serve them. */
static SattnModel *
gst_sattn_in_use_model (GstSattn * self, const GstSattnSettings * c,
    guint64 d_model, const gchar * in_use, gboolean zero_attn)
{
  SattnModel *m = NULL;
  SattnConfig mc = { 0, };
  SattnStreamConfig sc = { 0, };
  SattnWeights w = { 0, };
  SattnStatus st;
  gchar err[16], *path, *prefix;

  if (self->stream != NULL && self->d_model == d_model &&
      gst_sattn_cache_ref (self->model))
    return self->model;
  GST_OBJECT_LOCK (self);
  if (self->wmodel != NULL && g_strcmp0 (self->wkey, in_use) == 0 &&
      self->wcfg.d_model == d_model && gst_sattn_cache_ref (self->wmodel))
    m = self->wmodel;
  GST_OBJECT_UNLOCK (self);
  if (m != NULL)
    return m;
  if (in_use == NULL) {
    gst_sattn_core_config (c, d_model, &mc, &sc);
    w.add_zero_attn = zero_attn;
    return gst_sattn_cache_acquire (NULL, NULL, &mc, zero_attn ? &w : NULL,
        &st);
  }
  gst_sattn_weights_key_split (in_use, &path, &prefix);
  m = gst_sattn_model_from_file (path, prefix, c, d_model, zero_attn, &st,
      err, sizeof err);
  g_free (path);
  g_free (prefix);
  return m;
}

/* Caps while the weights properties ask for another file (wpath, wprefix)
 * than the one of the model in use (in_use), set while running and not
 * yet seen by the swap's loader thread (or set before the first caps):
 * the rule of a swap.  When the model in use serves these frames, the
 * requested one replaces it only if it can be loaded and keeps what the
 * element outputs; else a warning, the properties name the file in use
 * again (*reverted) and the model in use goes on.  When the model in use
 * cannot serve these frames, the requested file is the configuration and
 * fails as at READY.  prepared: the requested file's model read at READY
 * (a reference taken over), or NULL.  Returns a reference, or NULL after
 * posting an error. */
SattnModel *
gst_sattn_swap_caps_request (GstSattn * self, const GstSattnSettings * c,
    guint64 d_model, const gchar * wpath, const gchar * wprefix,
    gboolean zero_attn, SattnModel * prepared, const gchar * in_use,
    gboolean * reverted)
{
  SattnModel *cur, *m = prepared;
  SattnConfig mc = { 0, };
  SattnStreamConfig sc = { 0, };
  SattnWeights w = { 0, };
  SattnStatus st = SATTN_OK;
  GstSattnModelShape shape;
  gchar err[1024] = "", *why;

  *reverted = FALSE;
  cur = gst_sattn_in_use_model (self, c, d_model, in_use, zero_attn);
  if (m == NULL && wpath != NULL) {
    m = gst_sattn_model_from_file (wpath, wprefix, c, d_model, zero_attn,
        &st, err, sizeof err);
  } else if (m == NULL) {
    gst_sattn_core_config (c, d_model, &mc, &sc);
    w.add_zero_attn = zero_attn;
    m = gst_sattn_cache_acquire (NULL, NULL, &mc, zero_attn ? &w : NULL, &st);
    if (m == NULL)
      g_strlcpy (err, "the model cannot be built", sizeof err);
  }
  if (cur == NULL) {
    if (m == NULL && wpath != NULL)
      gst_sattn_weights_error (self, st, wpath, d_model, err);
    else if (m == NULL)
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
          ("Could not set up attention with identity projections for %"
              G_GUINT64_FORMAT "-value frames: %s", d_model,
              sattn_status_string (st)), (NULL));
    return m;
  }
  if (m == NULL) {
    why = g_strdup_printf ("%s (%s)", err[0] ? err : sattn_status_string (st),
        sattn_status_string (st));
  } else {
    gst_sattn_model_shape (cur, &shape);
    why = gst_sattn_swap_misfit (&shape, m);
  }
  if (why == NULL) {
    gst_sattn_cache_release (cur);
    return m;
  }
  gst_sattn_swap_revert (self, wpath, wprefix, in_use);
  gst_sattn_swap_warn (self, wpath, wprefix, why);
  g_free (why);
  gst_sattn_cache_release (m);
  *reverted = TRUE;
  return cur;
}

void
gst_sattn_swap_revert (GstSattn * self, const gchar * path,
    const gchar * prefix, const gchar * in_use)
{
  gchar *ipath, *iprefix;
  gboolean reverted = FALSE;

  gst_sattn_weights_key_split (in_use, &ipath, &iprefix);
  GST_OBJECT_LOCK (self);
  /* Only while they still ask for the refused file: a request made since
   * is its own. */
  if (g_strcmp0 (self->weights, path) == 0 &&
      g_strcmp0 (self->weights_prefix ? self->weights_prefix : "",
          prefix ? prefix : "") == 0) {
    g_free (self->weights);
    self->weights = g_steal_pointer (&ipath);
    if (in_use != NULL) {
      g_free (self->weights_prefix);
      self->weights_prefix = g_steal_pointer (&iprefix);
    }
    reverted = TRUE;
  }
  GST_OBJECT_UNLOCK (self);
  g_free (ipath);
  g_free (iprefix);
  if (reverted) {
    GST_DEBUG_OBJECT (self, "weights back to the file in use");
    g_object_notify (G_OBJECT (self), "weights");
    if (in_use != NULL)
      g_object_notify (G_OBJECT (self), "weights-prefix");
  }
}

void
gst_sattn_swap_init (GstSattnSwap * sw)
{
  memset (sw, 0, sizeof (*sw));
  g_mutex_init (&sw->lock);
}

static void
gst_sattn_swap_job_free (GstSattnSwapJob * job)
{
  g_free (job->path);
  g_free (job->prefix);
  g_free (job->labels);
  g_free (job->in_use);
  g_free (job);
}

/* Drop the ready model (lock held). */
static void
gst_sattn_swap_drop_ready (GstSattnSwap * sw)
{
  sattn_stream_free (sw->ready_stream);
  sw->ready_stream = NULL;
  gst_sattn_cache_release (sw->ready_model);
  sw->ready_model = NULL;
  g_clear_pointer (&sw->ready_path, g_free);
  g_clear_pointer (&sw->ready_key, g_free);
  g_clear_pointer (&sw->ready_labels, g_strfreev);
  g_atomic_int_set (&sw->ready, 0);
}

void
gst_sattn_swap_discard (GstSattnSwap * sw)
{
  g_mutex_lock (&sw->lock);
  sw->generation++;
  gst_sattn_swap_drop_ready (sw);
  g_mutex_unlock (&sw->lock);
  sw->recording = FALSE;
  sw->hist_len = sw->hist_head = 0;
}

void
gst_sattn_swap_stop (GstSattnSwap * sw)
{
  g_mutex_lock (&sw->lock);
  sw->cancelled = TRUE;
  g_mutex_unlock (&sw->lock);
  /* Every job runs to its end, which frees it: the queued ones return at
   * once (cancelled), a running one ends its load and drops the result.
   * (Freeing the pool immediately would drop the queued jobs unfreed.) */
  if (sw->pool)
    g_thread_pool_free (sw->pool, FALSE, TRUE);
  sw->pool = NULL;
  gst_sattn_swap_discard (sw);
  g_clear_pointer (&sw->hist, g_free);
  g_clear_pointer (&sw->hist_ok, g_free);
  g_clear_pointer (&sw->prime_out, g_free);
  g_clear_pointer (&sw->prime_info, g_free);
  sw->hist_cap = sw->prime_rows = 0;
  g_mutex_lock (&sw->lock);
  sw->cancelled = FALSE;
  g_mutex_unlock (&sw->lock);
}

void
gst_sattn_swap_clear (GstSattnSwap * sw)
{
  gst_sattn_swap_stop (sw);
  g_mutex_clear (&sw->lock);
}

/* Whether job is still the one wanted. */
static gboolean
gst_sattn_swap_job_current (GstSattnSwap * sw, GstSattnSwapJob * job)
{
  gboolean cur;

  g_mutex_lock (&sw->lock);
  cur = !sw->cancelled && job->generation == sw->generation;
  g_mutex_unlock (&sw->lock);
  return cur;
}

static void
gst_sattn_swap_refuse (GstSattnSwapJob * job, const gchar * why)
{
  GstSattn *self = job->self;

  if (!gst_sattn_swap_job_current (&self->swap, job))
    return;
  /* The properties first: whoever reads them on the warning reads the
   * file in use. */
  gst_sattn_swap_revert (self, job->path, job->prefix, job->in_use);
  gst_sattn_swap_warn (self, job->path, job->prefix, why);
}

/* The loader thread: read and check the file, build the model (shared
 * through the cache) and a stream for it. */
static void
gst_sattn_swap_run (gpointer data, gpointer user_data)
{
  GstSattnSwapJob *job = data;
  GstSattn *self = job->self;
  GstSattnSwap *sw = &self->swap;
  SattnConfig mc = { 0, };
  SattnStreamConfig sc0 = { 0, };
  SattnWeights w = { 0, };
  SattnModel *model = NULL;
  SattnStream *stream = NULL;
  SattnStatus st = SATTN_OK;
  gchar err[1024] = "";
  gchar *why = NULL;
  gchar **labels = NULL;

  (void) user_data;
  if (!gst_sattn_swap_job_current (sw, job))
    goto done;
  GST_DEBUG_OBJECT (self, "loading %s for a swap", job->path ? job->path :
      "identity projections");
  if (job->path != NULL) {
    /* The one loader, exactly as set_caps calls it: a swap accepts the
     * files READY accepts and builds the same model from them. */
    model = gst_sattn_model_from_file (job->path, job->prefix, &job->c,
        job->d_model, job->zero_attn, &st, err, sizeof err);
    if (model == NULL) {
      why = g_strdup_printf ("%s (%s)", err[0] ? err :
          sattn_status_string (st), sattn_status_string (st));
      goto done;
    }
  } else {
    gst_sattn_core_config (&job->c, job->d_model, &mc, &sc0);
    w.add_zero_attn = job->zero_attn;
    model = gst_sattn_cache_acquire (NULL, NULL, &mc,
        job->zero_attn ? &w : NULL, &st);
    if (model == NULL) {
      why = g_strdup_printf ("the model cannot be built: %s",
          sattn_status_string (st));
      goto done;
    }
  }
  if ((why = gst_sattn_swap_misfit (&job->running, model)) != NULL)
    goto done;
  {
    SattnModelContract k;

    /* the running stream against the new model's input contract, as
     * caps are checked against it */
    sattn_model_contract (model, &k);
    if ((why = gst_sattn_contract_misfit (&job->c, &k, job->running.rate,
                job->running.channels)) != NULL)
      goto done;
  }
  if (sattn_stream_config_check (model, &job->sc, err, sizeof err) != SATTN_OK) {
    /* the core's words (a window longer than its learned positions) */
    why = g_strdup (err);
    goto done;
  }
  if (job->sc.output == SATTN_OUTPUT_CLASSES &&
      !gst_sattn_classes_labels (model, job->labels, &labels, &why))
    goto done;
  stream = sattn_stream_new (model, &job->sc, &st);
  if (stream == NULL) {
    why = g_strdup_printf ("no stream for it: %s", sattn_status_string (st));
    goto done;
  }

  g_mutex_lock (&sw->lock);
  if (!sw->cancelled && job->generation == sw->generation) {
    gst_sattn_swap_drop_ready (sw);
    sw->ready_model = model;
    sw->ready_stream = stream;
    sw->ready_path = g_strdup (job->path);
    sw->ready_key = gst_sattn_weights_key (job->path, job->prefix);
    sw->ready_labels = g_steal_pointer (&labels);
    model = NULL;
    stream = NULL;
    g_atomic_int_set (&sw->ready, 1);
  }
  g_mutex_unlock (&sw->lock);
  GST_DEBUG_OBJECT (self, "%s ready for a swap", job->path ? job->path :
      "identity projections");

done:
  if (why != NULL) {
    gst_sattn_swap_refuse (job, why);
    g_free (why);
  }
  sattn_stream_free (stream);
  gst_sattn_cache_release (model);
  g_strfreev (labels);
  gst_sattn_swap_job_free (job);
  g_atomic_int_add (&sw->jobs, -1);
}

/* Room for the history and the priming rows of the current stream
 * (allocated when a swap is asked for, not on every push). */
static gboolean
gst_sattn_swap_buffers (GstSattn * self)
{
  GstSattnSwap *sw = &self->swap;
  gsize cap = self->cfg.window, rows, rf = self->row_floats;

  rows = self->cfg.output == GST_SATTN_OUTPUT_FRAMES ?
      (gsize) self->cfg.window + self->cfg.hop : 2;
  if (sw->hist_cap == cap && sw->d_model == self->d_model &&
      sw->prime_rows == rows && sw->row_floats == rf)
    return TRUE;
  g_clear_pointer (&sw->hist, g_free);
  g_clear_pointer (&sw->hist_ok, g_free);
  g_clear_pointer (&sw->prime_out, g_free);
  g_clear_pointer (&sw->prime_info, g_free);
  sw->hist = g_try_new (float, cap * self->d_model);
  sw->hist_ok = g_try_new (guint8, cap);
  sw->prime_out = g_try_new (float, rows * rf);
  sw->prime_info = g_try_new (SattnRowInfo, rows);
  if (!sw->hist || !sw->hist_ok || !sw->prime_out || !sw->prime_info) {
    g_clear_pointer (&sw->hist, g_free);
    g_clear_pointer (&sw->hist_ok, g_free);
    g_clear_pointer (&sw->prime_out, g_free);
    g_clear_pointer (&sw->prime_info, g_free);
    sw->hist_cap = sw->prime_rows = 0;
    return FALSE;
  }
  sw->hist_cap = cap;
  sw->d_model = self->d_model;
  sw->prime_rows = rows;
  sw->row_floats = rf;
  return TRUE;
}

void
gst_sattn_swap_poll (GstSattn * self)
{
  GstSattnSwap *sw = &self->swap;
  GstSattnSwapJob *job;
  gboolean requested;
  GError *err = NULL;

  GST_OBJECT_LOCK (self);
  requested = sw->requested;
  sw->requested = FALSE;
  GST_OBJECT_UNLOCK (self);
  if (G_LIKELY (!requested) || self->stream == NULL)
    return;                     /* before caps, set_caps reads the file */

  if (!gst_sattn_swap_buffers (self)) {
    GST_ELEMENT_WARNING (self, RESOURCE, NO_SPACE_LEFT,
        ("No memory for the frames a weights swap needs; the running model "
            "stays in use"), (NULL));
    return;
  }
  if (sw->pool == NULL) {
    sw->pool = g_thread_pool_new (gst_sattn_swap_run, NULL, 1, FALSE, &err);
    if (sw->pool == NULL) {
      GST_ELEMENT_WARNING (self, RESOURCE, FAILED,
          ("Could not start the thread that loads new weights; the running "
              "model stays in use"), ("%s", err ? err->message : ""));
      g_clear_error (&err);
      return;
    }
  }

  job = g_new0 (GstSattnSwapJob, 1);
  job->self = self;
  GST_OBJECT_LOCK (self);
  job->path = g_strdup (self->weights);
  job->prefix = g_strdup (self->weights_prefix);
  job->labels = g_strdup (self->labels);
  job->zero_attn = self->add_zero_attn;
  GST_OBJECT_UNLOCK (self);
  /* The settings exactly as set_caps used them: the loader gets the same
   * options (and the cache the same key). */
  job->c = self->cfg;
  job->d_model = self->d_model;
  job->sc = self->stream_config;
  job->sc.invalid_policy = (SattnInvalidPolicy) gst_sattn_get_policy (self);
  gst_sattn_model_shape (self->model, &job->running);
  job->running.rate = self->rate;
  job->running.channels = self->channels;
  job->in_use = g_strdup (self->model_key);

  g_mutex_lock (&sw->lock);
  job->generation = ++sw->generation;
  gst_sattn_swap_drop_ready (sw);
  g_mutex_unlock (&sw->lock);
  if (!sw->recording) {
    sw->recording = TRUE;
    sw->hist_len = sw->hist_head = 0;
  }
  GST_DEBUG_OBJECT (self, "weights swap asked for: %s", job->path ?
      job->path : "identity projections");
  g_atomic_int_add (&sw->jobs, 1);
  if (!g_thread_pool_push (sw->pool, job, &err)) {
    g_atomic_int_add (&sw->jobs, -1);
    GST_ELEMENT_WARNING (self, RESOURCE, FAILED,
        ("Could not start loading the weights file %s; the running model "
            "stays in use", job->path ? job->path : "(none)"),
        ("%s", err ? err->message : ""));
    g_clear_error (&err);
    gst_sattn_swap_job_free (job);
  }
}

void
gst_sattn_swap_record (GstSattn * self, const float *frames,
    const guint8 * valid, guint64 n)
{
  GstSattnSwap *sw = &self->swap;
  const gsize d = sw->d_model;
  guint64 skip;

  if (G_LIKELY (!sw->recording) || sw->hist_cap == 0)
    return;
  if (g_atomic_int_get (&sw->jobs) == 0 && !g_atomic_int_get (&sw->ready)) {
    /* Every job ended without a model to take over. */
    sw->recording = FALSE;
    return;
  }
  /* Only the last hist_cap frames can be needed. */
  skip = n > sw->hist_cap ? n - sw->hist_cap : 0;
  if (frames)
    frames += skip * d;
  if (valid)
    valid += skip;
  n -= skip;
  while (n > 0) {
    gsize k = MIN ((gsize) n, sw->hist_cap - sw->hist_head);

    if (frames)
      memcpy (sw->hist + sw->hist_head * d, frames, k * d * sizeof (float));
    else
      memset (sw->hist + sw->hist_head * d, 0, k * d * sizeof (float));
    if (valid)
      memcpy (sw->hist_ok + sw->hist_head, valid, k);
    else
      memset (sw->hist_ok + sw->hist_head, frames != NULL, k);
    sw->hist_head = (sw->hist_head + k) % sw->hist_cap;
    sw->hist_len = MIN (sw->hist_len + k, sw->hist_cap);
    if (frames)
      frames += k * d;
    if (valid)
      valid += k;
    n -= k;
  }
}

void
gst_sattn_swap_reset (GstSattn * self)
{
  self->swap.hist_len = 0;
  self->swap.hist_head = 0;
}

/* Push the last p frames of the history into stream (rows dropped). */
static SattnStatus
gst_sattn_swap_prime (GstSattnSwap * sw, SattnStream * stream, gsize p,
    gsize hop)
{
  gsize pos = (sw->hist_head + sw->hist_cap - p) % sw->hist_cap;
  SattnStatus st = SATTN_OK;

  while (p > 0 && st == SATTN_OK) {
    /* At most a hop at a time: the rows fit prime_out (window + hop rows
     * in frames mode, two windows in the pooled ones). */
    gsize k = MIN (MIN (p, sw->hist_cap - pos), hop), n_rows;

    st = sattn_stream_push (stream, sw->hist + pos * sw->d_model, k,
        sw->hist_ok + pos, sw->prime_out, sw->prime_rows, sw->prime_info,
        &n_rows);
    pos = (pos + k) % sw->hist_cap;
    p -= k;
  }
  return st;
}

gsize
gst_sattn_swap_step (GstSattn * self, gsize n)
{
  GstSattnSwap *sw = &self->swap;
  SattnModel *model;
  SattnStream *stream;
  gchar *path, *key;
  gchar **labels;
  guint64 frames, p, window = self->cfg.window, hop = self->cfg.hop;
  SattnStatus st;
  SattnSkipped sk;
  GstMessage *msg;

  if (G_LIKELY (!g_atomic_int_get (&sw->ready)))
    return n;
  /* A window boundary: every frame in has its row.  Until then the core
   * call ends at the next window, so that it ends at a boundary. */
  frames = sattn_stream_frames (self->stream);
  p = MIN (window - 1, frames);
  if (sattn_stream_pending (self->stream) != 0 || sw->hist_len < p)
    return (gsize) MIN ((guint64) n,
        MAX (sattn_stream_frames_to_window (self->stream), 1));

  g_mutex_lock (&sw->lock);
  model = sw->ready_model;
  stream = sw->ready_stream;
  path = sw->ready_path;
  key = sw->ready_key;
  labels = sw->ready_labels;
  sw->ready_model = NULL;
  sw->ready_stream = NULL;
  sw->ready_path = NULL;
  sw->ready_key = NULL;
  sw->ready_labels = NULL;
  g_atomic_int_set (&sw->ready, 0);
  g_mutex_unlock (&sw->lock);
  if (stream == NULL) {
    g_free (path);
    g_free (key);
    g_strfreev (labels);
    return n;
  }

  /* The windows after the boundary hold at most window - 1 frames from
   * before it: window - hop on the hop schedule, up to window - 1 for a
   * window cut short by a drain (EOS, a resync) a frame after the
   * boundary.  The new stream skips (in closed form) to where those
   * start, then takes them, so its frame count and window schedule are
   * the running stream's and every window after the boundary sees the
   * frames the running stream's would. */
  st = sattn_stream_skip (stream, frames - p, NULL, 0, NULL, NULL, &sk);
  if (st == SATTN_OK)
    st = gst_sattn_swap_prime (sw, stream, (gsize) p, (gsize) hop);
  if (st != SATTN_OK || sattn_stream_frames (stream) != frames ||
      sattn_stream_pending (stream) != 0) {
    gchar *why = g_strdup_printf ("the new model could not take the frames "
        "of the current window (%s)", sattn_status_string (st));
    const gchar *prefix = key ? strchr (key, '\n') + 1 : NULL;

    gst_sattn_swap_revert (self, path, prefix, self->model_key);
    gst_sattn_swap_warn (self, path, prefix, why);
    g_free (why);
    sattn_stream_free (stream);
    gst_sattn_cache_release (model);
    g_free (path);
    g_free (key);
    g_strfreev (labels);
    return n;
  }
  /* The priming's windows are not the stream's: no statistics from them. */
  sattn_stream_get_stats (stream, NULL, 1);
  sattn_stream_set_invalid_policy (stream,
      (SattnInvalidPolicy) gst_sattn_get_policy (self));
  sattn_stream_free (self->stream);
  gst_sattn_cache_release (self->model);
  self->stream = stream;
  self->model = model;
  /* What follows the model: its input contract (the windows' checks and
   * decisions), its labels (at the same window boundary as its weights),
   * and the attention map's size (a CLS row more or less). */
  sattn_model_contract (model, &self->cfg.model_contract);
  if (labels != NULL)
    gst_sattn_classes_setup (&self->classes, g_steal_pointer (&labels),
        (guint) sattn_model_classes (model));
  gst_sattn_obs_swapped (&self->obs, GST_ELEMENT (self), model, stream);
  /* New caps compare the weights properties with the running model's
   * file (gst_sattn_set_caps). */
  g_free (self->model_key);
  self->model_key = key;
  sw->recording = g_atomic_int_get (&sw->jobs) > 0;
  GST_INFO_OBJECT (self, "weights %s in use from frame %" G_GUINT64_FORMAT,
      path ? path : "(identity)", frames);

  msg = gst_message_new_element (GST_OBJECT (self),
      gst_structure_new ("sattn-weights-swapped",
          "weights", G_TYPE_STRING, path,
          "frame", G_TYPE_UINT64, frames,
          "timestamp", G_TYPE_UINT64, gst_sattn_frame_ts (self, frames), NULL));
  g_free (path);
  gst_element_post_message (GST_ELEMENT (self), msg);
  return n;
}
