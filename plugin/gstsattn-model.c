/* The sattn element's models: the core's configurations from the
 * element's settings, the one loader's options, loading a weights file
 * (through the model cache) and the errors that name what is wrong with
 * it, the weights key a model is recorded with, the model's input
 * contract (the settings it gives, the streams it refuses or warns
 * about, its labels) and the weights file read at READY -> PAUSED.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-priv.h"
#include "gstsattn-cache.h"

#include <math.h>
#include <string.h>

/* The core's scale from the property (a double): a positive value that
 * float rounds to 0 must not turn into "0 = the default", so it goes to
 * the core as the smallest positive float, which the core refuses (below
 * the smallest normal float) in its own words. */
static float
gst_sattn_core_scale (gdouble scale)
{
  float f = (float) scale;

  return scale > 0.0 && f == 0.0f ? nextafterf (0.0f, 1.0f) : f;
}

/* The core's configurations from the properties, for d_model-value
 * frames: the one place the element maps its settings onto them.  The
 * invalid-frames policy and the observability fields of sc are filled by
 * the caller. */
void
gst_sattn_core_config (const GstSattnSettings * c, guint64 d_model,
    SattnConfig * mc, SattnStreamConfig * sc)
{
  mc->d_model = (size_t) d_model;
  mc->heads = c->heads;
  mc->d_head = c->head_dim;
  mc->d_value = c->value_dim;
  mc->scale = gst_sattn_core_scale (c->scale);
  mc->causal = c->causal;
  mc->lookback = c->lookback;
  sc->window = c->window;
  sc->hop = c->hop;
  sc->output = (SattnOutputMode) c->output;
  sc->start = (SattnStartPolicy) c->start;
  /* Threads are the stream's: one model serves elements of any count. */
  sc->threads = c->threads;
  sc->precision = (SattnPrecision) c->precision;
  gst_sattn_layer_config (c, mc);
}

/* The positions and encoder-layer options of c into mc. */
void
gst_sattn_layer_config (const GstSattnSettings * c, SattnConfig * mc)
{
  mc->positions = (SattnPositions) c->positions;
  mc->rope_base = c->rope_base;
  mc->activation = (SattnActivation) c->activation;
  mc->norm_first = c->norm_first;
  mc->norm_eps = c->norm_eps;
}

void
gst_sattn_load_options (const GstSattnSettings * c, guint64 d_model,
    gboolean zero_attn, SattnLoadOptions * o)
{
  SattnStreamConfig sc = { 0, };

  sattn_load_options_init (o);
  gst_sattn_core_config (c, d_model, &o->cfg, &sc);
  /* Sizes left at 0 come from the file: its metadata, then its shapes
   * (heads only from its metadata: the loader refuses to guess it). */
  o->cfg.heads = c->heads_set ? c->heads : 0;
  o->add_zero_attn = zero_attn;
  o->set = c->set_by_user;
}

SattnModel *
gst_sattn_model_from_file (const gchar * path, const gchar * prefix,
    const GstSattnSettings * c, guint64 d_model, gboolean zero_attn,
    SattnStatus * status, gchar * err, gsize err_len)
{
  SattnLoadOptions o;
  SattnLoadReport rep;

  memset (&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  gst_sattn_load_options (c, d_model, zero_attn, &o);
  return gst_sattn_cache_load (path, prefix, &o, &rep, status, err, err_len);
}

/* The element error for a weights file that could not be used. */
void
gst_sattn_weights_error (GstSattn * self, SattnStatus st,
    const gchar * path, guint64 d_model, const gchar * err)
{

  switch (st) {
    case SATTN_E_NOMEM:
      GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
          ("Not enough memory to load the weights file: %s", err),
          ("%s", sattn_status_string (st)));
      break;
    case SATTN_E_IO:
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ,
          ("Could not read the weights file: %s", err),
          ("%s", sattn_status_string (st)));
      break;
    case SATTN_E_SHAPE:
      if (d_model == 0) {
        /* Checked before caps: E is the file's, heads the property's. */
        GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
            ("The weights file does not fit the element's properties: %s",
                err), ("%s", sattn_status_string (st)));
      } else {
        GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
            ("The weights file does not fit the stream, whose frames have "
                "d_model=%" G_GUINT64_FORMAT " values (channels x "
                "frame-size): %s", d_model, err),
            ("%s", sattn_status_string (st)));
      }
      break;
    case SATTN_E_INVAL:
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
          ("The weights file cannot be used with these properties: %s",
              err), ("%s: %s", path, sattn_status_string (st)));
      break;
    default:
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
          ("The weights file is not a usable safetensors attention "
              "state dict: %s", err), ("%s", sattn_status_string (st)));
      break;
  }
}

SattnModel *
gst_sattn_load_model (GstSattn * self, const gchar * path,
    const gchar * prefix, guint64 d_model, const GstSattnSettings * c,
    gboolean zero_attn)
{
  gchar err[1024] = "";
  SattnStatus st = SATTN_OK;
  SattnModel *model;

  model = gst_sattn_model_from_file (path, prefix, c, d_model, zero_attn,
      &st, err, sizeof err);
  if (model == NULL) {
    gst_sattn_weights_error (self, st, path, d_model, err);
    return NULL;
  }
  GST_DEBUG_OBJECT (self, "weights '%s': %s model, %" G_GSIZE_FORMAT
      "-value frames, heads %" G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT
      " layer(s), output %" G_GSIZE_FORMAT " values", path,
      sattn_model_kind (model) == SATTN_MODEL_WHOLE ? "whole" : "layer",
      sattn_model_config (model)->d_model, sattn_model_config (model)->heads,
      sattn_model_layers (model), sattn_model_d_out (model));
  return model;
}

gchar *
gst_sattn_weights_key (const gchar * path, const gchar * prefix)
{
  return path ? g_strdup_printf ("%s\n%s", path, prefix ? prefix : "") : NULL;
}

/* The file and prefix of key (NULL, NULL for identity projections). */
void
gst_sattn_weights_key_split (const gchar * key, gchar ** path, gchar ** prefix)
{
  const gchar *nl = key ? strchr (key, '\n') : NULL;

  *path = nl ? g_strndup (key, nl - key) : NULL;
  *prefix = nl ? g_strdup (nl + 1) : NULL;
}

void
gst_sattn_settings_take (GstSattnSettings * c, const SattnModelContract * k)
{
  c->model_contract = *k;
  if (!(c->geom_set & GST_SATTN_SET_FRAME_SIZE) &&
      (k->recorded & SATTN_CONTRACT_FRAME_SIZE))
    c->frame_size = k->frame_size;
  if (!(c->geom_set & GST_SATTN_SET_WINDOW) &&
      (k->recorded & SATTN_CONTRACT_WINDOW))
    c->window = k->window;
  if (!(c->geom_set & GST_SATTN_SET_HOP)) {
    if (k->recorded & SATTN_CONTRACT_HOP)
      c->hop = k->hop;
    /* the default hop never longer than a window the file gave */
    if (c->hop > c->window)
      c->hop = c->window;
  }
}

/* What a model is built from, read with the object lock held: the
 * settings, the weights file and prefix (copies to g_free) and
 * add-zero-attn.  Returns the key of those weights, "path\nprefix" (NULL
 * without a file): gst_sattn_prepare_weights records it with the model it
 * builds, and set_caps takes that model over only when its own key is the
 * same. */
gchar *
gst_sattn_model_inputs (GstSattn * self, GstSattnSettings * c,
    gchar ** wpath, gchar ** wprefix, gboolean * zero_attn)
{
  *c = self->props;
  gst_sattn_settings_take (c, &self->contract);
  *wpath = g_strdup (self->weights);
  *wprefix = g_strdup (self->weights_prefix);
  *zero_attn = self->add_zero_attn;
  return gst_sattn_weights_key (*wpath, *wprefix);
}

/* Why a stream of rate / channels contradicts the model's input contract
 * (contract=enforce), naming both values and the way out; NULL when it
 * does not. */
gchar *
gst_sattn_explain_contract (const GstSattnSettings * c, gint rate,
    gint channels)
{
  const SattnModelContract *k = &c->model_contract;

  if (c->contract != GST_SATTN_CONTRACT_ENFORCE)
    return NULL;
  if ((k->recorded & SATTN_CONTRACT_SAMPLE_RATE) &&
      (guint) rate != k->sample_rate)
    return g_strdup_printf ("The stream's rate %d Hz contradicts the model's "
        "input contract: it was trained on %u Hz streams (metadata "
        "'sample_rate'), and at %d Hz it would see every frequency scaled "
        "by %.4g. Resample upstream (audioresample ! "
        "audio/x-raw,rate=%u), or set contract=warn to run it anyway",
        rate, k->sample_rate, rate, (double) k->sample_rate / rate,
        k->sample_rate);
  if ((k->recorded & SATTN_CONTRACT_CHANNELS) &&
      (guint) channels != k->channels)
    return g_strdup_printf ("The stream's %d channels contradict the "
        "model's input contract: it was trained on %u-channel streams "
        "(metadata 'channels'). Convert upstream (audioconvert ! "
        "audio/x-raw,channels=%u), or set contract=warn to run it anyway",
        channels, k->channels, k->channels);
  return NULL;
}

gchar *
gst_sattn_contract_misfit (const GstSattnSettings * c,
    const SattnModelContract * k, gint rate, gint channels)
{
  GstSattnSettings t = *c;

  t.model_contract = *k;
  if (c->contract == GST_SATTN_CONTRACT_ENFORCE &&
      (k->recorded & SATTN_CONTRACT_FRAME_SIZE) &&
      k->frame_size != c->frame_size)
    return g_strdup_printf ("it was trained on frames of %u samples per "
        "channel (metadata 'frame_size') and the running stream's are %u",
        k->frame_size, c->frame_size);
  return gst_sattn_explain_contract (&t, rate, channels);
}

/* output=classes: the labels of model's classes (the labels property's
 * file, else the file's metadata) into *labels (g_strfreev them);
 * FALSE after posting the error that says why (a count that differs from
 * the head's classes, an unreadable file). */
gboolean
gst_sattn_take_labels (GstSattn * self, const SattnModel * model,
    gchar *** labels)
{
  gchar *lpath, *why = NULL;
  gboolean ok;

  GST_OBJECT_LOCK (self);
  lpath = g_strdup (self->labels);
  GST_OBJECT_UNLOCK (self);
  ok = gst_sattn_classes_labels (model, lpath, labels, &why);
  if (!ok)
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", why), (NULL));
  g_free (why);
  g_free (lpath);
  return ok;
}

/* A frame-size set on purpose that contradicts the one the model was
 * trained with (contract=enforce): one error naming both; TRUE when
 * there is none. */
static gboolean
gst_sattn_contract_frame_size (GstSattn * self, const GstSattnSettings * c,
    const gchar * path)
{
  const SattnModelContract *k = &c->model_contract;

  if (c->contract != GST_SATTN_CONTRACT_ENFORCE ||
      !(k->recorded & SATTN_CONTRACT_FRAME_SIZE) ||
      c->frame_size == k->frame_size)
    return TRUE;
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
      ("frame-size=%u contradicts the model's input contract: %s was "
          "trained on frames of %u samples per channel (metadata "
          "'frame_size'). Leave frame-size unset to take the model's, or "
          "set contract=warn to run it on frames it was not trained on",
          c->frame_size, path, k->frame_size), (NULL));
  return FALSE;
}

/* At READY -> PAUSED: reads the weights file (if any) once, checks it for
 * its own d_model (the only one it can serve) and builds its model through
 * the cache; the first caps with that d_model take the model over, later
 * caps with the same d_model share the running one, so the file is not
 * read again while PAUSED or PLAYING.  Posts an element error and returns
 * FALSE when the file cannot be used. */
gboolean
gst_sattn_prepare_weights (GstSattn * self)
{
  GstSattnSettings c;
  gchar *wpath, *wprefix;
  gboolean zero_attn, ok;
  SattnConfig mc = { 0, };
  SattnStreamConfig sc = { 0, };
  SattnModel *model = NULL, *old;
  SattnModelContract contract = { 0, };
  gchar *key;

  GST_OBJECT_LOCK (self);
  /* the previous file's contract no longer holds */
  memset (&self->contract, 0, sizeof (self->contract));
  key = gst_sattn_model_inputs (self, &c, &wpath, &wprefix, &zero_attn);
  GST_OBJECT_UNLOCK (self);

  ok = TRUE;
  if (wpath != NULL) {
    model = gst_sattn_load_model (self, wpath, wprefix, 0, &c, zero_attn);
    ok = model != NULL;
    if (model != NULL) {
      mc = *sattn_model_config (model);
      sattn_model_contract (model, &contract);
      gst_sattn_settings_take (&c, &contract);
    }
  }
  /* As set_caps configures it, for the file's own d_model. */
  {
    SattnConfig unused = { 0, };

    gst_sattn_core_config (&c, 0, model != NULL ? &unused : &mc, &sc);
  }
  if (model != NULL && !gst_sattn_contract_frame_size (self, &c, wpath)) {
    gst_sattn_cache_release (model);
    model = NULL;
    ok = FALSE;
  }
  if (model != NULL) {
    /* What the file holds against the stream settings (a whole model
     * with output=frames, a window longer than its learned positions,
     * output=classes without a head): said now, in the core's words. */
    gchar err[512] = "";

    if (sattn_stream_config_check (model, &sc, err, sizeof err) != SATTN_OK) {
      GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
          ("The weights file %s cannot run with these properties: %s", wpath,
              err), (NULL));
      gst_sattn_cache_release (model);
      model = NULL;
      ok = FALSE;
    } else if (c.output == GST_SATTN_OUTPUT_CLASSES) {
      gchar **labels = NULL;

      if (!gst_sattn_take_labels (self, model, &labels)) {
        gst_sattn_cache_release (model);
        model = NULL;
        ok = FALSE;
      }
      g_strfreev (labels);
    }
  }
  g_free (wpath);
  g_free (wprefix);

  GST_OBJECT_LOCK (self);
  self->weights_d_model = model ? mc.d_model : 0;
  if (model != NULL)
    self->contract = contract;
  old = self->wmodel;
  self->wmodel = model;
  self->wcfg = mc;
  g_free (self->wkey);
  self->wkey = key;
  GST_OBJECT_UNLOCK (self);
  gst_sattn_cache_release (old);
  return ok;
}

/* contract=warn: a stream that contradicts the model's input contract
 * (rate, channels, frame size; enforce refuses it in
 * gst_sattn_explain_contract) still runs, but the model then sees the
 * signal at another time scale or frame layout than it learned: a warning
 * says so and what to do. */
void
gst_sattn_check_trained_for (GstSattn * self, const GstSattnSettings * c,
    gint rate, gint channels)
{
  const SattnModelContract *k = &c->model_contract;
  static const gchar *const what[] = { "channels", "frame-size" };
  static const gchar *const keys[] = { "channels", "frame_size" };
  const guint64 have[] = { (guint64) channels, c->frame_size };
  const guint64 want[] = { k->channels, k->frame_size };
  const guint32 bits[] = { SATTN_CONTRACT_CHANNELS, SATTN_CONTRACT_FRAME_SIZE };
  guint i;

  if (c->contract != GST_SATTN_CONTRACT_WARN)
    return;
  if ((k->recorded & SATTN_CONTRACT_SAMPLE_RATE) &&
      k->sample_rate != (guint) rate) {
    GST_ELEMENT_WARNING (self, STREAM, FORMAT,
        ("The model was trained on %u Hz streams (metadata 'sample_rate') "
            "and this stream is %d Hz: it runs (contract=warn), but a frame "
            "of %u samples now spans %.3g ms instead of %.3g ms, so the "
            "model sees every frequency scaled by %.4g and every duration "
            "by %.4g; its outputs are not the decisions it was trained to "
            "make. Resample to %u Hz upstream (audioresample) to use it as "
            "trained.", k->sample_rate, rate, c->frame_size,
            1e3 * c->frame_size / rate,
            1e3 * c->frame_size / (double) k->sample_rate,
            (double) k->sample_rate / rate, (double) rate / k->sample_rate,
            k->sample_rate), (NULL));
  }
  for (i = 0; i < G_N_ELEMENTS (keys); i++)
    if ((k->recorded & bits[i]) && want[i] != have[i])
      GST_ELEMENT_WARNING (self, STREAM, FORMAT,
          ("The model was trained with %s=%" G_GUINT64_FORMAT " (metadata "
              "'%s') but this stream has %s=%" G_GUINT64_FORMAT " (%d "
              "channels, frame-size=%u): it runs (contract=warn), but the "
              "frames are not laid out as the model learned.", what[i],
              want[i], keys[i], what[i], have[i], channels, c->frame_size),
          (NULL));
}
