/* The sattn element's caps and negotiation: caps parsing, the
 * negotiation rules (explain / validate) in the properties' words, the
 * source caps downstream takes, the caps the sink pad allows (steered to
 * rates that work and to a model's input contract), the caps check
 * behind ACCEPT_CAPS and the checks of both peers at READY -> PAUSED,
 * and the sink pad's CAPS / ACCEPT_CAPS queries.  Nothing here changes
 * the element: gstsattn.c sets caps up with what these functions say.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-priv.h"
#include "gstsattn-cache.h"

#include <string.h>

/* Up to 16 divisors of value that are <= max_value, those nearest to
 * wanted, as "a, b, c".  The core's sattn_divisors (core/internal.h)
 * lists divisors too, but it is private to the core and has no bound,
 * which every list here needs (heads up to MAX_HEADS, frame-size up to
 * MAX_FRAME_SIZE, hop up to the window): this one stays until the core's
 * public API offers a bounded one. */
static gchar *
gst_sattn_divisors (guint64 value, guint64 max_value, guint64 wanted)
{
  guint64 best[16];
  guint n = 0, i, j;
  guint64 d;
  GString *s;

  max_value = MIN (max_value, value);
  for (d = 1; d <= max_value; d++) {
    if (value % d != 0)
      continue;
    if (n < G_N_ELEMENTS (best)) {
      best[n++] = d;
    } else {
      /* Replace the one farthest from wanted if d is nearer. */
      guint far = 0;
      guint64 fard = 0;
      for (i = 0; i < n; i++) {
        guint64 dist = best[i] > wanted ? best[i] - wanted : wanted - best[i];
        if (dist >= fard) {
          fard = dist;
          far = i;
        }
      }
      if ((d > wanted ? d - wanted : wanted - d) < fard) {
        for (j = far; j + 1 < n; j++)
          best[j] = best[j + 1];
        best[n - 1] = d;
      }
    }
  }
  s = g_string_new (NULL);
  for (i = 0; i < n; i++)
    g_string_append_printf (s, "%s%" G_GUINT64_FORMAT, i ? ", " : "", best[i]);
  if (n == 0)
    g_string_append (s, "none");
  return g_string_free (s, FALSE);
}

/* Whether the core takes identity projections (no weights) that split
 * d_model-value frames into heads of d_head query/key and d_value value
 * values (0 = its default): sattn_model_check asked about those sizes
 * alone, so that a refusal is its identity-projection rule (heads x size
 * = d_model; with d_head 0, heads dividing d_model) and not another. */
static gboolean
gst_sattn_identity_fits (guint64 d_model, guint heads, guint d_head,
    guint d_value)
{
  SattnConfig t = { 0, };

  t.d_model = (size_t) d_model;
  t.heads = heads;
  t.d_head = d_head;
  t.d_value = d_value;
  return sattn_model_check (&t, NULL, NULL, 0) != SATTN_E_SHAPE;
}

/* Why the settings cannot work with rate / channels (d_model = channels ×
 * frame-size): a message that says what would work (g_free it), or NULL
 * when they can.  weights: a weights file is set (its projections, not
 * identity ones, then fix the head size).  The caps event, the CAPS /
 * ACCEPT_CAPS queries and the READY -> PAUSED check all ask it.  The
 * core's rules (heads against d_model, scale, hop against window) are the
 * core's, in its words (sattn_model_check, sattn_stream_config_check);
 * the rules kept here are GStreamer's: caps sizes, the element's size
 * limit (whole rates: gst_sattn_explain_rate). */
static gchar *
gst_sattn_explain (const GstSattnSettings * c, gint rate, gint channels,
    guint64 d_model, gboolean weights)
{
  gchar *ok, *msg;
  gchar err[512];
  SattnConfig mc = { 0, };
  SattnStreamConfig sc = { 0, };
  SattnStatus st;

  if ((msg = gst_sattn_explain_contract (c, rate, channels)) != NULL)
    return msg;
  if (d_model > MAX_D_MODEL) {
    return g_strdup_printf ("Frames of %d channels x frame-size=%u = %"
        G_GUINT64_FORMAT " values are too large (at most %u)", channels,
        c->frame_size, d_model, MAX_D_MODEL);
  }
  /* Identity projections (no weights file) split the frame itself into
   * heads: whether head-dim and value-dim fit it is the core's rule
   * (gst_sattn_identity_fits), said here in the properties' words; with
   * weights the file's shapes settle them (any size; checked against the
   * file when it is read). */
  if (!weights && c->head_dim != 0 &&
      !gst_sattn_identity_fits (d_model, c->heads, c->head_dim, 0)) {
    ok = gst_sattn_divisors (d_model, MAX_HEADS, c->heads);
    msg = g_strdup_printf ("heads=%u x head-dim=%u does not equal d_model="
        "%" G_GUINT64_FORMAT " (%d channels x frame-size=%u), which "
        "identity projections (no weights file) need; use head-dim=0 or "
        "head-dim=d_model/heads with heads one of: %s (a head-dim of any "
        "size needs a weights file with projections of that size)",
        c->heads, c->head_dim, d_model, channels, c->frame_size, ok);
    g_free (ok);
    return msg;
  }
  if (!weights && c->value_dim != 0 &&
      !gst_sattn_identity_fits (d_model, c->heads, 0, c->value_dim)) {
    msg = g_strdup_printf ("heads=%u x value-dim=%u does not equal d_model="
        "%" G_GUINT64_FORMAT " (%d channels x frame-size=%u), which "
        "identity projections (no weights file) need; use value-dim=0 (a "
        "value-dim of any size needs a weights file with value "
        "projections of that size)", c->heads, c->value_dim, d_model,
        channels, c->frame_size);
    return msg;
  }
  /* The core's rules.  head-dim is settled above (and by the weights file
   * when there is one), so the core checks the default head split. */
  gst_sattn_core_config (c, d_model, &mc, &sc);
  mc.d_head = 0;
  mc.d_value = 0;
  if (weights)
    mc.heads = 1;               /* the file's shapes settle the head split */
  st = sattn_model_check (&mc, NULL, err, sizeof err);
  if (st == SATTN_E_SHAPE)
    return g_strdup_printf ("%s (d_model = %d channels x frame-size=%u)",
        err, channels, c->frame_size);
  if (st != SATTN_OK && g_str_has_prefix (err, "scale=")
      && (gdouble) mc.scale != c->scale)
    /* The core saw the property's double as a float (the core's message
     * gives that float's value; a thread that treats denormals as zero
     * would convert it here as 0). */
    return g_strdup_printf ("%s (scale=%g was set)", err, c->scale);
  if (st != SATTN_OK)
    return g_strdup (err);
  if (sattn_stream_config_check (NULL, &sc, err, sizeof err) != SATTN_OK)
    return g_strdup (err);

  /* Whole frame and output rates are a rule of audio/x-raw only
   * (gst_sattn_explain_rate): other/tensors carry any rate. */
  if (c->output == GST_SATTN_OUTPUT_WINDOW &&
      (guint64) c->window * d_model > G_MAXINT) {
    return g_strdup_printf ("output=window would need window=%u x %"
        G_GUINT64_FORMAT " = more than %d channels; use a smaller window or "
        "another output mode", c->window, d_model, G_MAXINT);
  }
  return NULL;
}

/* Why audio/x-raw cannot carry the output of rate Hz input (its rate is
 * a whole number of rows per second), saying which values would make it
 * one; NULL when it can.  Only a constraint when downstream takes no
 * other/tensors, which carry any rate. */
static gchar *
gst_sattn_explain_rate (const GstSattnSettings * c, gint rate)
{
  guint64 frame_rate;
  gchar *ok, *msg;

  if (rate % c->frame_size != 0) {
    ok = gst_sattn_divisors (rate, MAX_FRAME_SIZE, c->frame_size);
    msg = g_strdup_printf ("frame-size=%u does not divide the input rate of "
        "%d Hz, so the frame rate would not be a whole number, which "
        "audio/x-raw needs (downstream takes no other/tensors); frame-size "
        "values that work: %s", c->frame_size, rate, ok);
    g_free (ok);
    return msg;
  }
  frame_rate = rate / c->frame_size;
  if (c->output != GST_SATTN_OUTPUT_FRAMES && frame_rate % c->hop != 0) {
    ok = gst_sattn_divisors (frame_rate, c->window, c->hop);
    msg = g_strdup_printf ("hop=%u does not divide the frame rate of %"
        G_GUINT64_FORMAT " Hz (rate %d / frame-size %u), so output=%s would "
        "not have a whole output rate, which audio/x-raw needs (downstream "
        "takes no other/tensors); hop values that work with window=%u: "
        "%s (or output=frames)", c->hop, frame_rate, rate, c->frame_size,
        gst_sattn_output_nick (c->output), c->window, ok);
    g_free (ok);
    return msg;
  }
  return NULL;
}

/* Rows per second of the output, as a reduced fraction *num / *den:
 * rate / frame-size, divided by hop in the pooled modes.  FALSE when it
 * does not fit a GstFraction. */
static gboolean
gst_sattn_out_rate (const GstSattnSettings * c, gint rate, gint * num,
    gint * den)
{
  guint64 d = (guint64) c->frame_size *
      (c->output == GST_SATTN_OUTPUT_FRAMES ? 1 : c->hop);
  guint64 g = gst_util_greatest_common_divisor_int64 (rate, d);

  d /= g;
  if (d > G_MAXINT)
    return FALSE;
  *num = (gint) (rate / g);
  *den = (gint) d;
  return TRUE;
}

/* Which output forms downstream takes (both when it cannot tell yet). */
static void
gst_sattn_downstream_takes (GstSattn * self, gboolean * audio,
    gboolean * tensors)
{
  GstCaps *peer = gst_pad_peer_query_caps (self->srcpad, NULL);

  *audio = *tensors = TRUE;
  if (peer == NULL || gst_caps_is_any (peer)) {
    gst_clear_caps (&peer);
    return;
  }
  *audio = FALSE;
  *tensors = FALSE;
  for (guint i = 0; i < gst_caps_get_size (peer); i++) {
    GstStructure *s = gst_caps_get_structure (peer, i);

    if (gst_structure_has_name (s, "audio/x-raw"))
      *audio = TRUE;
    else if (gst_structure_has_name (s, "other/tensors"))
      *tensors = TRUE;
  }
  gst_caps_unref (peer);
}

/* Checks the settings against the input; on failure posts an element
 * error that says what would work. */
gboolean
gst_sattn_validate (GstSattn * self, const GstSattnSettings * c, gint rate,
    gint channels, guint64 d_model, gboolean weights)
{
  gchar *why = gst_sattn_explain (c, rate, channels, d_model, weights);

  if (why == NULL)
    return TRUE;
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", why), (NULL));
  g_free (why);
  return FALSE;
}

/* The source caps for rows of row_floats values at num/den rows per
 * second: audio/x-raw (one row = one sample period of row_floats
 * unpositioned channels) when tensors is FALSE, which needs den == 1;
 * otherwise NNStreamer's tensor stream, one row per buffer, dimensions
 * innermost first: "d_out:1", or "d_out:window" in window mode. */
static GstCaps *
gst_sattn_src_caps_new (const GstSattnSettings * c, gsize row_floats,
    gint num, gint den, gboolean tensors)
{
  gchar *dims;
  GstCaps *caps;

  if (!tensors) {
    /* Feature values have no speaker positions: channel-mask 0. */
    return gst_caps_new_simple ("audio/x-raw",
        "format", G_TYPE_STRING, GST_AUDIO_NE (F32),
        "layout", G_TYPE_STRING, "interleaved",
        "rate", G_TYPE_INT, num,
        "channels", G_TYPE_INT, (gint) row_floats,
        "channel-mask", GST_TYPE_BITMASK, (guint64) 0, NULL);
  }
  if (c->output == GST_SATTN_OUTPUT_WINDOW)
    dims = g_strdup_printf ("%" G_GSIZE_FORMAT ":%u", row_floats / c->window,
        c->window);
  else
    dims = g_strdup_printf ("%" G_GSIZE_FORMAT ":1", row_floats);
  caps = gst_caps_new_simple ("other/tensors",
      "format", G_TYPE_STRING, "static",
      "num_tensors", G_TYPE_INT, 1,
      "types", G_TYPE_STRING, "float32",
      "dimensions", G_TYPE_STRING, dims,
      "framerate", GST_TYPE_FRACTION, num, den, NULL);
  g_free (dims);
  return caps;
}

/* The widest audio/x-raw the element offers to any downstream: GStreamer's
 * audio converter (audioconvert, audioresample and every element built on
 * GstAudioConverter) asserts on 64 or more channels (its channel mixer
 * takes fewer than 64) and then crashes, so wider rows go out as
 * audio/x-raw only to a downstream that asks for exactly that channel
 * count (a capsfilter) or takes any caps (fakesink, filesink, appsink
 * without caps). */
#define GST_SATTN_AUDIO_SAFE_CHANNELS 63

/* Whether downstream takes audio/x-raw of channels channels wider than
 * GST_SATTN_AUDIO_SAFE_CHANNELS knowingly: its caps are ANY, or one of its
 * audio/x-raw structures fixes channels to exactly that count. */
static gboolean
gst_sattn_downstream_asks_channels (GstSattn * self, gint channels)
{
  GstCaps *peer = gst_pad_peer_query_caps (self->srcpad, NULL);
  gboolean asks = FALSE;

  if (peer == NULL)
    return FALSE;
  if (gst_caps_is_any (peer)) {
    gst_caps_unref (peer);
    return TRUE;
  }
  for (guint i = 0; i < gst_caps_get_size (peer) && !asks; i++) {
    GstStructure *s = gst_caps_get_structure (peer, i);
    const GValue *v = gst_structure_get_value (s, "channels");

    asks = gst_structure_has_name (s, "audio/x-raw") && v != NULL &&
        G_VALUE_HOLDS_INT (v) && g_value_get_int (v) == channels;
  }
  gst_caps_unref (peer);
  return asks;
}

/* Why rows of row_floats values are not offered as audio/x-raw to a
 * downstream whose caps (takes, as text) are those of audio elements of
 * any channel count, and the ways out. */
static gchar *
gst_sattn_explain_width (const GstSattnSettings * c, gsize row_floats,
    const gchar * takes)
{
  return g_strdup_printf ("output=%s gives rows of %" G_GSIZE_FORMAT
      " values, which audio/x-raw carries as %" G_GSIZE_FORMAT " channels: "
      "more than the %d that GStreamer's audio converter (audioconvert, "
      "audioresample) takes, so sattn offers them as audio/x-raw only to a "
      "downstream that asks for exactly %" G_GSIZE_FORMAT " channels or "
      "takes any caps. Put a capsfilter 'audio/x-raw,channels=%"
      G_GSIZE_FORMAT "' after sattn for an element that handles that many "
      "channels (level, wavenc), send the rows to an element that takes "
      "other/tensors or any caps (tensor_sink, appsink, filesink), or make "
      "rows of at most %d values (fewer channels, a smaller frame-size%s); "
      "downstream accepts %s", gst_sattn_output_nick (c->output), row_floats,
      row_floats, GST_SATTN_AUDIO_SAFE_CHANNELS, row_floats, row_floats,
      GST_SATTN_AUDIO_SAFE_CHANNELS,
      c->output == GST_SATTN_OUTPUT_WINDOW ? ", a smaller window" : "", takes);
}

/* The source caps for the input caps and the settings c (stream built for
 * them) that downstream accepts: audio/x-raw when the output rate is a
 * whole number, the rows are narrow enough for any audio element (or
 * downstream asks for their width, gst_sattn_downstream_asks_channels)
 * and downstream takes it, else other/tensors.  When downstream takes
 * neither, posts one error that names the caps offered, says how they
 * follow from the input and the properties (and, when only audio/x-raw
 * would do, which values make its rate whole, or the channel limit and
 * its ways out), and what downstream takes; returns NULL. */
GstCaps *
gst_sattn_pick_src_caps (GstSattn * self, const GstSattnSettings * c,
    gint rate, gint channels, const SattnStream * stream, GstCaps * sinkcaps,
    gboolean * tensors)
{
  const gsize row_floats = sattn_stream_row_floats (stream);
  GstCaps *srccaps, *audio = NULL, *peer;
  gchar *offered, *takes, *rows, *why;
  gint num = 0, den = 1;
  gboolean too_wide = FALSE;

  if (!gst_sattn_out_rate (c, rate, &num, &den)) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("The output rate %d / (frame-size=%u x hop=%u) rows per second "
            "does not fit a fraction of 32-bit integers", rate,
            c->frame_size, c->hop), (NULL));
    return NULL;
  }
  /* Class probabilities are a tensor, not a signal: other/tensors only. */
  if (den == 1 && row_floats <= G_MAXINT &&
      c->output != GST_SATTN_OUTPUT_CLASSES) {
    audio = gst_sattn_src_caps_new (c, row_floats, num, 1, FALSE);
    too_wide = row_floats > GST_SATTN_AUDIO_SAFE_CHANNELS &&
        !gst_sattn_downstream_asks_channels (self, (gint) row_floats);
    if (!too_wide && gst_pad_peer_query_accept_caps (self->srcpad, audio)) {
      *tensors = FALSE;
      return audio;
    }
  }
  srccaps = gst_sattn_src_caps_new (c, row_floats, num, den, TRUE);
  if (gst_pad_peer_query_accept_caps (self->srcpad, srccaps)) {
    gst_clear_caps (&audio);
    *tensors = TRUE;
    return srccaps;
  }
  peer = gst_pad_peer_query_caps (self->srcpad, NULL);
  takes = peer ? gst_caps_to_string (peer) : g_strdup ("nothing");
  if (too_wide && gst_pad_peer_query_accept_caps (self->srcpad, audio)) {
    /* Downstream would take the wide audio/x-raw, but it may be (or lead
     * to) an audio converter, which crashes on it. */
    why = gst_sattn_explain_width (c, row_floats, takes);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", why),
        ("input caps %" GST_PTR_FORMAT, sinkcaps));
    g_free (why);
    g_free (takes);
    gst_clear_caps (&peer);
    gst_caps_unref (audio);
    gst_caps_unref (srccaps);
    return NULL;
  }
  if (audio != NULL)
    gst_caps_append (srccaps, audio);
  offered = gst_caps_to_string (srccaps);
  why = den != 1 ? gst_sattn_explain_rate (c, rate) : NULL;
  if (c->output == GST_SATTN_OUTPUT_FRAMES)
    rows = g_strdup_printf ("one row per frame, at the frame rate %d Hz / "
        "frame-size=%u", rate, c->frame_size);
  else
    rows = g_strdup_printf ("one row per window, every hop=%u frames of "
        "frame-size=%u at %d Hz", c->hop, c->frame_size, rate);
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
      ("Downstream refused the output caps %s: output=%s gives rows of %"
          G_GSIZE_FORMAT " values (d_model=%" G_GUINT64_FORMAT " = %d "
          "channels x frame-size=%u), %s; downstream accepts %s%s%s", offered,
          gst_sattn_output_nick (c->output), row_floats,
          (guint64) channels * c->frame_size, channels, c->frame_size, rows,
          takes, why ? ". " : "", why ? why : ""),
      ("input caps %" GST_PTR_FORMAT, sinkcaps));
  g_free (why);
  g_free (rows);
  g_free (offered);
  g_free (takes);
  gst_clear_caps (&peer);
  gst_caps_unref (srccaps);
  return NULL;
}

/* Rate and channels of input caps the element can read at all (fixed
 * audio/x-raw, native-endian F32, interleaved), read with GstAudioInfo;
 * FALSE otherwise.  Channel positions do not matter to the element: caps
 * of more than two channels without a channel-mask are read as
 * unpositioned. */
gboolean
gst_sattn_parse_caps (GstCaps * caps, gint * rate, gint * channels)
{
  GstAudioInfo info;
  GstStructure *s;
  gboolean ok;
  gint ch = 0;

  if (caps == NULL || !gst_caps_is_fixed (caps))
    return FALSE;
  s = gst_caps_get_structure (caps, 0);
  if (!gst_structure_has_name (s, "audio/x-raw"))
    return FALSE;
  if (gst_structure_get_int (s, "channels", &ch) && ch > 2 &&
      !gst_structure_has_field (s, "channel-mask")) {
    caps = gst_caps_copy (caps);
    gst_caps_set_simple (caps, "channel-mask", GST_TYPE_BITMASK,
        (guint64) 0, NULL);
    ok = gst_audio_info_from_caps (&info, caps);
    gst_caps_unref (caps);
  } else {
    ok = gst_audio_info_from_caps (&info, caps);
  }
  if (!ok || GST_AUDIO_INFO_FORMAT (&info) != GST_AUDIO_FORMAT_F32 ||
      GST_AUDIO_INFO_LAYOUT (&info) != GST_AUDIO_LAYOUT_INTERLEAVED ||
      GST_AUDIO_INFO_RATE (&info) <= 0 || GST_AUDIO_INFO_CHANNELS (&info) <= 0)
    return FALSE;
  *rate = GST_AUDIO_INFO_RATE (&info);
  *channels = GST_AUDIO_INFO_CHANNELS (&info);
  return TRUE;
}

/* The settings, whether a weights file is set and its embedding size
 * (0 = not read yet), under the object lock. */
static void
gst_sattn_snapshot (GstSattn * self, GstSattnSettings * c,
    gboolean * weights, guint64 * file_d_model)
{
  GST_OBJECT_LOCK (self);
  *c = self->props;
  gst_sattn_settings_take (c, &self->contract);
  *weights = self->weights != NULL;
  *file_d_model = self->weights != NULL ? self->weights_d_model : 0;
  GST_OBJECT_UNLOCK (self);
}

/* v = the multiples of step in [step, max] (an int, or a stepped range);
 * FALSE when there is none. */
static gboolean
gst_sattn_multiples (GValue * v, guint64 step, guint64 max)
{
  max = MIN (max, (guint64) G_MAXINT);
  if (step == 0 || step > max)
    return FALSE;
  max -= max % step;
  if (max == step) {
    g_value_init (v, G_TYPE_INT);
    g_value_set_int (v, (gint) step);
  } else {
    g_value_init (v, GST_TYPE_INT_RANGE);
    gst_value_set_int_range_step (v, (gint) step, (gint) max, (gint) step);
  }
  return TRUE;
}

/* Common audio rates, tried first when steering upstream. */
static const gint gst_sattn_common_rates[] = {
  8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000,
  176400, 192000
};

/* caps steered to the model's input contract: its rate and channels
 * first (contract=warn: then the rest; enforce: only those, and when no
 * caps of them can work, they alone, so that upstream picks them and the
 * caps event says why). */
static GstCaps *
gst_sattn_contract_caps (const GstSattnSettings * c, GstCaps * caps)
{
  const SattnModelContract *k = &c->model_contract;
  GstStructure *want;
  GstCaps *pref, *wanted;

  if (!(k->recorded & (SATTN_CONTRACT_SAMPLE_RATE | SATTN_CONTRACT_CHANNELS)))
    return caps;
  want = gst_structure_new ("audio/x-raw", "format", G_TYPE_STRING,
      GST_AUDIO_NE (F32), "layout", G_TYPE_STRING, "interleaved", NULL);
  if (k->recorded & SATTN_CONTRACT_SAMPLE_RATE)
    gst_structure_set (want, "rate", G_TYPE_INT, (gint) k->sample_rate, NULL);
  if (k->recorded & SATTN_CONTRACT_CHANNELS)
    gst_structure_set (want, "channels", G_TYPE_INT, (gint) k->channels, NULL);
  wanted = gst_caps_new_full (want, NULL);
  pref = gst_caps_intersect_full (caps, wanted, GST_CAPS_INTERSECT_FIRST);
  if (c->contract == GST_SATTN_CONTRACT_ENFORCE) {
    gst_caps_unref (caps);
    if (gst_caps_is_empty (pref)) {
      gst_caps_unref (pref);
      return wanted;
    }
    gst_caps_unref (wanted);
    return pref;
  }
  gst_caps_unref (wanted);
  return gst_caps_merge (pref, caps);
}

/* What the sink CAPS query answers in PAUSED and PLAYING: the template
 * narrowed to channel counts that fill whole heads (or the weights file's
 * d_model), within the size limits, in this order of preference:
 *  1. when downstream takes audio/x-raw: the common rates whose output
 *     rate is a whole number (rate a multiple of frame-size, x hop in the
 *     pooled modes), so that a source that fixates to the rate nearest
 *     its default picks one of them;
 *  2. then every such rate;
 *  3. when downstream takes other/tensors: any rate (the output then goes
 *     out as tensors when its rate is not whole).
 * Every caps that can work is in it; ACCEPT_CAPS decides the rest.  Empty
 * when nothing can work. */
static GstCaps *
gst_sattn_allowed_caps (GstSattn * self)
{
  GstSattnSettings c;
  gboolean weights, audio, tensors;
  guint64 file_d, rate_step, max_ch, ch_step, d;
  GValue rates = G_VALUE_INIT, chans = G_VALUE_INIT, common = G_VALUE_INIT;
  GstStructure *s;
  GstCaps *caps;
  guint i, n_common = 0;

  gst_sattn_snapshot (self, &c, &weights, &file_d);
  gst_sattn_downstream_takes (self, &audio, &tensors);

  rate_step = c.frame_size;
  if (c.output != GST_SATTN_OUTPUT_FRAMES)
    rate_step *= c.hop;
  max_ch = MAX_D_MODEL / c.frame_size;
  if (c.output == GST_SATTN_OUTPUT_WINDOW)
    max_ch = MIN (max_ch, (guint64) G_MAXINT / ((guint64) c.window *
            c.frame_size));
  /* Identity projections with head-dim or value-dim set: heads x that
   * size is d_model (head-dim first; a value-dim that disagrees is refused
   * by gst_sattn_explain for every d_model). */
  d = weights ? file_d : c.head_dim != 0 ?
      (guint64) c.heads * c.head_dim : (guint64) c.heads * c.value_dim;
  if (d != 0) {
    /* d_model is fixed: one channel count, if any. */
    if (d % c.frame_size != 0 || d / c.frame_size > max_ch)
      return gst_caps_new_empty ();
    ch_step = d / c.frame_size;
    max_ch = ch_step;
  } else if (weights) {
    ch_step = 1;                /* the file's d_model is not known yet */
  } else {
    /* channels × frame-size must be a multiple of heads. */
    ch_step = c.heads / gst_util_greatest_common_divisor (c.heads,
        c.frame_size);
  }
  if (!gst_sattn_multiples (&chans, ch_step, max_ch))
    return gst_caps_new_empty ();

  caps = gst_caps_new_empty ();
  if (audio && gst_sattn_multiples (&rates, rate_step, G_MAXINT)) {
    g_value_init (&common, GST_TYPE_LIST);
    for (i = 0; i < G_N_ELEMENTS (gst_sattn_common_rates); i++) {
      GValue r = G_VALUE_INIT;

      if (gst_sattn_common_rates[i] % rate_step != 0)
        continue;
      g_value_init (&r, G_TYPE_INT);
      g_value_set_int (&r, gst_sattn_common_rates[i]);
      gst_value_list_append_and_take_value (&common, &r);
      n_common++;
    }
    if (n_common > 0) {
      s = gst_structure_new ("audio/x-raw", "format", G_TYPE_STRING,
          GST_AUDIO_NE (F32), "layout", G_TYPE_STRING, "interleaved", NULL);
      if (n_common == 1)
        gst_structure_set_value (s, "rate",
            gst_value_list_get_value (&common, 0));
      else
        gst_structure_set_value (s, "rate", &common);
      gst_structure_set_value (s, "channels", &chans);
      gst_caps_append_structure (caps, s);
    }
    g_value_unset (&common);
    s = gst_structure_new ("audio/x-raw", "format", G_TYPE_STRING,
        GST_AUDIO_NE (F32), "layout", G_TYPE_STRING, "interleaved", NULL);
    gst_structure_take_value (s, "rate", &rates);
    gst_structure_set_value (s, "channels", &chans);
    gst_caps_append_structure (caps, s);
  }
  if (tensors) {
    s = gst_structure_new ("audio/x-raw", "format", G_TYPE_STRING,
        GST_AUDIO_NE (F32), "layout", G_TYPE_STRING, "interleaved",
        "rate", GST_TYPE_INT_RANGE, 1, G_MAXINT, NULL);
    gst_structure_set_value (s, "channels", &chans);
    gst_caps_append_structure (caps, s);
  }
  g_value_unset (&chans);
  return gst_sattn_contract_caps (&c, caps);
}

/* For a downstream that takes audio/x-raw only: why the rows of the
 * identity projections (d_out = heads x value-dim, else d_model; a
 * weights file's d_out is known once it is loaded, and the source caps
 * apply the same rule then) are too wide for it, or NULL. */
static gchar *
gst_sattn_check_width (GstSattn * self, const GstSattnSettings * c,
    guint64 d_model)
{
  guint64 rows = c->value_dim != 0 ? (guint64) c->heads * c->value_dim :
      d_model;
  GstCaps *peer;
  gchar *takes, *why;

  if (c->output == GST_SATTN_OUTPUT_WINDOW)
    rows *= c->window;
  if (rows <= GST_SATTN_AUDIO_SAFE_CHANNELS || rows > G_MAXINT ||
      c->output == GST_SATTN_OUTPUT_CLASSES ||
      gst_sattn_downstream_asks_channels (self, (gint) rows))
    return NULL;
  peer = gst_pad_peer_query_caps (self->srcpad, NULL);
  takes = peer ? gst_caps_to_string (peer) : g_strdup ("nothing");
  why = gst_sattn_explain_width (c, (gsize) rows, takes);
  g_free (takes);
  gst_clear_caps (&peer);
  return why;
}

/* Whether caps can be used; if not and post, posts one element error that
 * says why (once for the same caps). */
static gboolean
gst_sattn_check_caps (GstSattn * self, GstCaps * caps, gboolean post)
{
  GstSattnSettings c;
  gboolean weights, posted;
  guint64 file_d, d_model;
  gint rate = 0, channels = 0;
  gchar *why = NULL;
  gboolean shape = FALSE;

  gst_sattn_snapshot (self, &c, &weights, &file_d);
  if (!gst_sattn_parse_caps (caps, &rate, &channels)) {
    why = g_strdup (GST_SATTN_UNSUPPORTED_CAPS);
  } else {
    d_model = (guint64) channels *c.frame_size;
    why = gst_sattn_explain (&c, rate, channels, d_model, weights);
    if (why == NULL) {
      gboolean audio, tensors;

      gst_sattn_downstream_takes (self, &audio, &tensors);
      if (!tensors)
        why = gst_sattn_explain_rate (&c, rate);
      if (why == NULL && !tensors && !weights)
        why = gst_sattn_check_width (self, &c, d_model);
    }
    shape = why == NULL && file_d != 0 && d_model != file_d;
  }
  if (why == NULL && !shape)
    return TRUE;

  GST_DEBUG_OBJECT (self, "refusing %" GST_PTR_FORMAT ": %s", caps,
      why ? why : "d_model differs from the weights file");
  GST_OBJECT_LOCK (self);
  posted = !post || (self->posted_caps != NULL &&
      gst_caps_is_equal (caps, self->posted_caps));
  if (!posted)
    gst_caps_replace (&self->posted_caps, caps);
  GST_OBJECT_UNLOCK (self);
  if (!posted && why != NULL) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", why),
        ("caps: %" GST_PTR_FORMAT, caps));
  } else if (!posted) {
    gchar *wpath, *wprefix;
    gboolean zero_attn;
    SattnModel *m;
    SattnStatus lst;
    gchar lerr[16];

    /* The core's own words: which tensor has which shape, and what the
     * stream's d_model would need (the file is read again on this error
     * path only). */
    GST_OBJECT_LOCK (self);
    wpath = g_strdup (self->weights);
    wprefix = g_strdup (self->weights_prefix);
    zero_attn = self->add_zero_attn;
    GST_OBJECT_UNLOCK (self);
    m = NULL;
    if (wpath != NULL && (m = gst_sattn_model_from_file (wpath, wprefix, &c,
                (guint64) channels * c.frame_size, zero_attn, &lst, lerr,
                sizeof lerr)) != NULL) {
      /* The file changed since READY->PAUSED and now fits. */
      shape = FALSE;
    } else if (wpath != NULL) {
      /* The core's own words: which tensor has which shape. */
      gst_sattn_load_model (self, wpath, wprefix, (guint64) channels *
          c.frame_size, &c, zero_attn);
    }
    gst_sattn_cache_release (m);
    g_free (wpath);
    g_free (wprefix);
  }
  g_free (why);
  return !shape && why == NULL;
}

/* At READY -> PAUSED: when nothing the upstream peer can produce would
 * work, fail now with one error that says why (for the caps upstream
 * would pick), instead of a refused caps event and upstream's own
 * not-negotiated error later.  TRUE when negotiation may succeed (or
 * upstream cannot tell yet). */
gboolean
gst_sattn_check_upstream (GstSattn * self)
{
  GstCaps *tmpl, *peer, *ours, *both, *pick;
  gboolean ok;

  tmpl = gst_pad_get_pad_template_caps (self->sinkpad);
  peer = gst_pad_peer_query_caps (self->sinkpad, tmpl);
  gst_caps_unref (tmpl);
  if (peer == NULL || gst_caps_is_any (peer) || gst_caps_is_empty (peer)) {
    /* No peer yet, anything, or nothing we read at all (upstream's own
     * negotiation error says that). */
    gst_clear_caps (&peer);
    return TRUE;
  }
  ours = gst_sattn_allowed_caps (self);
  both = gst_caps_intersect (peer, ours);
  /* Inside ours only settings that fail whatever the caps (hop > window,
   * scale) can still refuse the pick; outside, its rate or channels. */
  pick = gst_caps_fixate (gst_caps_ref (gst_caps_is_empty (both) ? peer :
          both));
  GST_DEBUG_OBJECT (self, "upstream offers %" GST_PTR_FORMAT ", we take %"
      GST_PTR_FORMAT ", checking %" GST_PTR_FORMAT, peer, ours, pick);
  ok = gst_sattn_check_caps (self, pick, TRUE);
  if (ok && gst_caps_is_empty (both)) {
    /* Cannot happen (ours holds every caps that works); say it anyway. */
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("None of the input caps upstream offers works with these "
            "properties"), ("upstream: %" GST_PTR_FORMAT, peer));
    ok = FALSE;
  }
  gst_caps_unref (pick);
  gst_caps_unref (both);
  gst_caps_unref (ours);
  gst_caps_unref (peer);
  return ok;
}

/* At READY -> PAUSED, after gst_sattn_check_upstream: when downstream
 * takes none of the forms the output mode can give (output=classes gives
 * other/tensors only; the others audio/x-raw or other/tensors), fail the
 * state change now, with one error that names both.  Refused here, in
 * the thread that sets the state, the failure is synchronous: the
 * pipeline never starts streaming caps downstream cannot take, and an
 * application (gst-launch-1.0 among them) sees the failure as the state
 * change's result instead of an error posted from the streaming thread
 * while it is still starting its main loop.  TRUE when downstream may
 * take the output (or cannot tell yet: no peer, ANY, or nothing). */
gboolean
gst_sattn_check_downstream (GstSattn * self)
{
  GstSattnSettings c;
  gboolean weights, audio, tensors;
  guint64 file_d;
  GstCaps *peer;
  gchar *takes;

  gst_sattn_snapshot (self, &c, &weights, &file_d);
  peer = gst_pad_peer_query_caps (self->srcpad, NULL);
  if (peer == NULL || gst_caps_is_any (peer) || gst_caps_is_empty (peer)) {
    gst_clear_caps (&peer);
    return TRUE;
  }
  gst_sattn_downstream_takes (self, &audio, &tensors);
  if (tensors || (audio && c.output != GST_SATTN_OUTPUT_CLASSES)) {
    gst_caps_unref (peer);
    return TRUE;
  }
  takes = gst_caps_to_string (peer);
  if (c.output == GST_SATTN_OUTPUT_CLASSES)
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("Downstream takes none of the output: output=classes gives class "
            "probabilities as other/tensors only (a tensor, not a signal), "
            "and downstream accepts %s. Link the element to an element "
            "that takes other/tensors or any caps (tensor_sink, appsink, "
            "filesink, fakesink), or choose output=mean, last or window for "
            "feature rows as audio/x-raw", takes), (NULL));
  else
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("Downstream takes none of the output: output=%s gives rows as "
            "audio/x-raw (F32, interleaved) or other/tensors, and "
            "downstream accepts %s", gst_sattn_output_nick (c.output), takes),
        (NULL));
  g_free (takes);
  gst_caps_unref (peer);
  return FALSE;
}

gboolean
gst_sattn_sink_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstSattn *self = GST_SATTN (parent);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_CAPS:{
      GstCaps *filter, *caps, *res;
      gboolean running;

      gst_query_parse_caps (query, &filter);
      GST_OBJECT_LOCK (self);
      running = self->running;
      GST_OBJECT_UNLOCK (self);
      /* Properties are frozen from READY -> PAUSED on; before that (when
       * pipelines are built and linked) they may still change, so the
       * answer is the template and READY -> PAUSED checks what upstream
       * offers against the final properties. */
      caps = running ? gst_sattn_allowed_caps (self) :
          gst_pad_get_pad_template_caps (pad);
      if (filter) {
        res = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref (caps);
        caps = res;
      }
      GST_LOG_OBJECT (self, "caps query: %" GST_PTR_FORMAT, caps);
      gst_query_set_caps_result (query, caps);
      gst_caps_unref (caps);
      return TRUE;
    }
    case GST_QUERY_ACCEPT_CAPS:{
      GstCaps *caps;

      gst_query_parse_accept_caps (query, &caps);
      /* Refused here, the caps event never arrives: the error is posted
       * now, once, with the reason. */
      gst_query_set_accept_caps_result (query, gst_sattn_check_caps (self,
              caps, TRUE));
      return TRUE;
    }
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}
