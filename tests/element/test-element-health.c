/* sattn element: the "sattn" health messages and the warnings.
 *
 * Every message field is compared with the shared float64 reference
 * (tests/common, through obs-ref.c): counts exactly, doubles within
 * 1e-5 × (1 + |ref|) (the core works in float32).  Known inputs check the
 * closed forms too: identical frames give uniform weights (max-weight =
 * 1 / valid keys, entropy = 1), one dominant key saturates every row,
 * NaN frames are invalid frames and masked keys, overflowing products are
 * non-finite scores.  Message timing: one message per window with
 * message-interval=0, whole windows per message otherwise, contiguous
 * timestamps, a last message at EOS, each message posted after the
 * features it describes.  The default interval is 100 ms
 * (test_message_interval_default).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "obs-ref.h"

#include <math.h>
#include <string.h>

typedef struct
{
  GstHarness *h;
  GstBus *bus;
  GMutex lock;
  GPtrArray *msgs;              /* "sattn" element messages */
  GArray *bufs_at;              /* buffers the harness had received when
                                   each message was posted */
  GPtrArray *warnings;
} Obs;

static GstBusSyncReply
obs_sync (GstBus * bus, GstMessage * msg, gpointer data)
{
  Obs *o = data;

  g_mutex_lock (&o->lock);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT &&
      gst_message_has_name (msg, "sattn")) {
    guint n = gst_harness_buffers_received (o->h);

    g_ptr_array_add (o->msgs, gst_message_ref (msg));
    g_array_append_val (o->bufs_at, n);
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
    g_ptr_array_add (o->warnings, gst_message_ref (msg));
  }
  g_mutex_unlock (&o->lock);
  return GST_BUS_DROP;
}

static void
obs_attach (Obs * o, GstHarness * h)
{
  o->h = h;
  g_mutex_init (&o->lock);
  o->msgs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_message_unref);
  o->warnings = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_message_unref);
  o->bufs_at = g_array_new (FALSE, FALSE, sizeof (guint));
  o->bus = gst_bus_new ();
  gst_bus_set_sync_handler (o->bus, obs_sync, o, NULL);
  gst_element_set_bus (h->element, o->bus);
}

static void
obs_detach (Obs * o)
{
  gst_element_set_bus (o->h->element, NULL);
  gst_bus_set_sync_handler (o->bus, NULL, NULL, NULL);
  gst_object_unref (o->bus);
  g_ptr_array_unref (o->msgs);
  g_ptr_array_unref (o->warnings);
  g_array_unref (o->bufs_at);
  g_mutex_clear (&o->lock);
}

static const GstStructure *
obs_msg (Obs * o, guint i)
{
  return gst_message_get_structure (g_ptr_array_index (o->msgs, i));
}

/* Text of warning i (g_free). */
static gchar *
obs_warning_text (Obs * o, guint i)
{
  GError *err = NULL;
  gchar *dbg = NULL, *text;

  gst_message_parse_warning (g_ptr_array_index (o->warnings, i), &err, &dbg);
  text = g_strdup (err->message);
  GST_INFO ("warning: %s (%s)", err->message, dbg);
  g_clear_error (&err);
  g_free (dbg);
  return text;
}

static GstClockTime
frame_time (guint64 f, guint fs, gint rate)
{
  return gst_util_uint64_scale (f * fs, GST_SECOND, rate);
}

/* Push T frames of d floats in buffers of per_buf frames (GAP-flagged
 * where gap[f] for the buffer's first frame), then EOS. */
static void
push_stream (GstHarness * h, const float *x, gsize T, gsize d,
    gsize per_buf, guint fs, gint rate)
{
  gsize f;

  for (f = 0; f < T; f += per_buf) {
    gsize k = MIN (per_buf, T - f);

    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + f * d,
                k * d * sizeof (float), frame_time (f, fs, rate), 0)),
        GST_FLOW_OK);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
}

static guint64
msg_u64 (const GstStructure * s, const char *field)
{
  guint64 v = 0;

  fail_unless (gst_structure_get_uint64 (s, field, &v), "no field %s", field);
  return v;
}

static double
msg_double (const GstStructure * s, const char *field)
{
  double v = 0;

  fail_unless (gst_structure_get_double (s, field, &v), "no field %s", field);
  return v;
}

/* With message-interval=0: one message per window of the reference
 * schedule, each equal to the reference, timestamps on the frame grid. */
static void
check_per_window (const char *label, Obs * o, const RefConfig * c,
    const float *x, const guint8 * valid, gsize T, gsize d, guint fs,
    gint rate, float threshold, ObsStats * total)
{
  ObsWindow *w;
  gsize nw = obs_ref_schedule (c, T, &w), i;

  if (total)
    obs_stats_clear (total);
  fail_unless_equals_int (o->msgs->len, nw);
  for (i = 0; i < nw; i++) {
    const GstStructure *s = obs_msg (o, i);
    ObsStats ref;
    gchar *l = g_strdup_printf ("%s, window %" G_GSIZE_FORMAT " (frames %"
        G_GSIZE_FORMAT "-%" G_GSIZE_FORMAT ")", label, i, w[i].first,
        w[i].end);

    obs_ref_window_stats (c, x, valid, T, d, &w[i], threshold, &ref);
    obs_check_message (l, s, &ref, w[i].end - w[i].first);
    fail_unless_equals_uint64 (msg_u64 (s, "timestamp"),
        frame_time (w[i].first, fs, rate));
    fail_unless_equals_uint64 (msg_u64 (s, "duration"),
        frame_time (w[i].end, fs, rate) - frame_time (w[i].first, fs, rate));
    fail_unless_equals_uint64 (msg_u64 (s, "running-time"),
        msg_u64 (s, "timestamp"));
    fail_unless_equals_uint64 (msg_u64 (s, "stream-time"),
        msg_u64 (s, "timestamp"));
    if (total)
      obs_stats_merge (total, &ref);
    g_free (l);
  }
  g_free (w);
}

/* ------------------------------------------------------------ fields */

/* Identical frames: every visible key has the same score, so the weights
 * are uniform over the valid keys: max-weight = 1 / valid keys and the
 * normalised entropy is 1, whatever the scale or the number of heads. */
GST_START_TEST (test_identical_frames_uniform)
{
  const gint rate = 1000;
  const gsize d = 4, T = 30;
  const guint heads = (__i__ & 1) ? 2 : 1;
  RefConfig c = { 8, 3, heads, 0, (__i__ & 2) ? 1.0 : 0.0, FALSE,
    OUT_FRAMES, (__i__ & 4) ? START_WAIT : START_PAD
  };
  const float frame[4] = { 0.5f, -0.25f, 1.5f, 0.75f };
  float *x = g_new (float, T * d);
  ObsWindow *w;
  gsize nw, i, t;
  GstHarness *h;
  Obs o;

  for (i = 0; i < T; i++)
    for (t = 0; t < d; t++)
      x[i * d + t] = frame[t];
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", heads,
      "scale", c.scale, "start", c.start, "post-messages", TRUE,
      "message-interval", (guint64) 0, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, 7, 1, rate);

  nw = obs_ref_schedule (&c, T, &w);
  fail_unless_equals_int (o.msgs->len, nw);
  for (i = 0; i < nw; i++) {
    const GstStructure *s = obs_msg (&o, i);
    /* Keys are frames [end - window, end) that exist. */
    const gsize valid_keys = MIN (w[i].end, (gsize) c.window);
    const double want_w = 1.0 / (double) valid_keys;

    fail_unless (fabs (msg_double (s, "max-weight") - want_w) <= 1e-6,
        "window %" G_GSIZE_FORMAT ": max-weight %.9f, want 1/%" G_GSIZE_FORMAT
        " = %.9f", i, msg_double (s, "max-weight"), valid_keys, want_w);
    fail_unless (fabs (msg_double (s, "entropy") - 1.0) <= 1e-6,
        "window %" G_GSIZE_FORMAT ": entropy %.9f, want 1", i,
        msg_double (s, "entropy"));
    fail_unless_equals_uint64 (msg_u64 (s, "masked-keys"),
        c.window - valid_keys);
    fail_unless_equals_uint64 (msg_u64 (s, "rows"), heads * w[i].rows);
    fail_unless_equals_uint64 (msg_u64 (s, "saturated-rows"), 0);
  }
  check_per_window ("identical frames", &o, &c, x, NULL, T, d, 1, rate,
      0.99f, NULL);
  fail_unless_equals_int (o.warnings->len, 0);

  g_free (w);
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Random frames over output modes, causal / lookback, heads and start
 * policies: every field of every message against the reference. */
GST_START_TEST (test_random_fields)
{
  const gint rate = 2000, outs[] = { OUT_FRAMES, OUT_WINDOW, OUT_MEAN,
    OUT_LAST
  };
  const gsize d = 6, T = 47;
  const guint fs = 2;
  gint i = __i__;
  RefConfig c = { 10, 4, (i & 1) ? 3 : 1, (i & 2) ? 3 : 0, 0.0, (i & 4) != 0,
    outs[(i >> 3) & 3], (i & 32) ? START_WAIT : START_PAD
  };
  float *x = g_new (float, T * d);
  GstHarness *h;
  Obs o;
  gchar *label;

  /* Small enough that no row of two or more keys saturates (scores within
   * +-1.6): the single-key rows of causal windows are counted as
   * saturated, but do not warn. */
  sattn_fill_signal (x, T * d, 700 + i, 0.8f);
  /* channels = 3, frame-size = 2: d_model = 6. */
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", c.heads,
      "lookback", c.lookback, "causal", c.causal, "output", c.output,
      "start", c.start, "frame-size", fs, "post-messages", TRUE,
      "message-interval", (guint64) 0, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, 3);
  push_stream (h, x, T, d, 9, fs, rate);
  label = g_strdup_printf ("H=%u lb=%u causal=%d out=%d start=%d", c.heads,
      c.lookback, c.causal, c.output, c.start);
  check_per_window (label, &o, &c, x, NULL, T, d, fs, rate, 0.99f, NULL);
  if (c.causal && c.start == START_PAD && c.output != OUT_LAST)
    /* Frame 0 sees itself only, in every head: weight 1 with no choice,
     * which is not saturation. */
    fail_unless (msg_u64 (obs_msg (&o, 0), "rows") >= c.heads);
  fail_unless_equals_int (o.warnings->len, 0);
  g_free (label);
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* One key far larger than the others takes almost all the weight of
 * every row that sees it: saturated-rows = rows, and a warning says to
 * reduce the amplitude (the scale is already the default). */
GST_START_TEST (test_dominant_key_saturates)
{
  const gint rate = 1000;
  const gsize d = 2, T = 16;
  const guint heads = (__i__ & 1) ? 2 : 1;
  RefConfig c = { 8, 8, heads, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float x[32];
  gsize i;
  GstHarness *h;
  Obs o;
  ObsStats total;
  gchar *text;

  for (i = 0; i < T * d; i++)
    x[i] = 1.0f;
  /* Frame 3 of each window dominates: the least gap between its score and
   * another one is 9 (heads=2) or 12.7 (heads=1): weight > 0.999. */
  x[3 * d] = x[3 * d + 1] = 10.0f;
  x[11 * d] = x[11 * d + 1] = 10.0f;
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", heads,
      "post-messages", TRUE, "message-interval", (guint64) 0, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, T, 1, rate);

  check_per_window ("dominant key", &o, &c, x, NULL, T, d, 1, rate, 0.99f,
      &total);
  fail_unless (total.max_weight_margin > 1e-3);
  fail_unless_equals_int (o.msgs->len, 2);
  for (i = 0; i < o.msgs->len; i++) {
    fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, i), "saturated-rows"),
        msg_u64 (obs_msg (&o, i), "rows"));
    fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, i), "rows"), 8 * heads);
  }
  /* Both windows saturate, 8 ms apart: one warning (rate-limited). */
  fail_unless_equals_int (o.warnings->len, 1);
  text = obs_warning_text (&o, 0);
  fail_unless (strstr (text, "saturated") != NULL, "%s", text);
  fail_unless (strstr (text, "reduce the input amplitude") != NULL, "%s", text);
  g_free (text);

  obs_detach (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* The seed documents' contrast: d_k = 512 with unit scale saturates the
 * softmax, 1/sqrt(d_k) does not.  The warning names the cause (scale=1,
 * head-dim 512) and the fix (scale=0). */
GST_START_TEST (test_unit_scale_warning)
{
  const gint rate = 16000, channels = 8;
  const guint fs = 64;
  const gsize d = 512, T = 48;
  const gboolean unit = __i__ == 1;
  RefConfig c = { 16, 8, 1, 0, unit ? 1.0 : 0.0, FALSE, OUT_FRAMES,
    START_PAD
  };
  float *x = g_new (float, T * d);
  GstHarness *h;
  Obs o;
  ObsStats total;
  double mw = 0;
  guint i;

  sattn_fill_signal (x, T * d, 4242, 0.5f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "frame-size", fs,
      "scale", c.scale, "post-messages", TRUE,
      "message-interval", (guint64) 0, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, channels);
  push_stream (h, x, T, d, 5, fs, rate);

  check_per_window (unit ? "scale=1" : "scale=0", &o, &c, x, NULL, T, d, fs,
      rate, 0.99f, &total);
  fail_unless (total.max_weight_margin > 1e-4);
  for (i = 0; i < o.msgs->len; i++)
    mw += msg_double (obs_msg (&o, i), "max-weight") / o.msgs->len;
  GST_INFO ("scale=%g: mean max-weight %.4f, saturated rows %" G_GUINT64_FORMAT
      " of %" G_GUINT64_FORMAT, c.scale, mw, total.saturated_rows, total.rows);
  if (unit) {
    gchar *text;

    fail_unless (total.saturated_rows * 2 > total.rows);
    fail_unless_equals_int (o.warnings->len, 1);
    text = obs_warning_text (&o, 0);
    fail_unless (strstr (text, "scale=1 with head-dim 512") != NULL, "%s",
        text);
    fail_unless (strstr (text, "use scale=0") != NULL, "%s", text);
    g_free (text);
  } else {
    fail_unless_equals_uint64 (total.saturated_rows, 0);
    fail_unless (mw < 0.5, "mean max-weight %.3f with the default scale", mw);
    fail_unless_equals_int (o.warnings->len, 0);
  }
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* NaN frames and GAP buffers are invalid frames: never keys (masked-keys
 * in every window that holds them), their query rows are not softmax
 * rows, and no score is non-finite. */
GST_START_TEST (test_nan_and_gap_frames)
{
  const gint rate = 1000;
  const gsize d = 3, T = 40;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float *x = g_new (float, T * d);
  guint8 valid[40];
  GstHarness *h;
  Obs o;
  ObsStats total;
  gsize f;

  sattn_fill_signal (x, T * d, 99, 1.0f);
  memset (valid, 1, sizeof (valid));
  x[5 * d + 1] = NAN;
  x[6 * d] = INFINITY;
  x[21 * d + 2] = NAN;
  /* Frames 28-31 arrive in a GAP buffer. */
  for (f = 28; f < 32; f++)
    valid[f] = 0;

  h = sattn_harness_new ("window", c.window, "hop", c.hop, "post-messages",
      TRUE, "message-interval", (guint64) 0, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  for (f = 0; f < T; f += 4) {
    GstBuffer *b = sattn_buffer_new (x + f * d, 4 * d * sizeof (float),
        frame_time (f, 1, rate), 0);

    if (!valid[f])
      GST_BUFFER_FLAG_SET (b, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, b), GST_FLOW_OK);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  check_per_window ("NaN and GAP frames", &o, &c, x, valid, T, d, 1, rate,
      0.99f, &total);
  fail_unless_equals_uint64 (total.invalid_frames, 3 + 4);
  fail_unless_equals_uint64 (total.nonfinite_scores, 0);
  fail_unless_equals_uint64 (total.rows, T - 7);
  fail_unless (total.masked_keys > 4 + 7);
  fail_unless_equals_int (o.warnings->len, 0);
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Finite frames whose products overflow float32 give infinite scores:
 * counted in nonfinite-scores, with a warning that says to reduce the
 * amplitude; at most one such warning per 10 s of stream time. */
GST_START_TEST (test_overflow_scores)
{
  const gint rate = 100;
  const gsize d = 2, T = 2000;  /* 20 s */
  const gsize big[] = { 100, 205, 1210 };       /* 1 s, 2.05 s, 12.1 s */
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float *x = g_new (float, T * d);
  GstHarness *h;
  Obs o;
  ObsStats total;
  guint i;

  sattn_fill_signal (x, T * d, 5, 1.0f);
  for (i = 0; i < G_N_ELEMENTS (big); i++) {
    /* Its own score is 2e40 (> FLT_MAX); with the others about 1e20. */
    x[big[i] * d] = 1e20f;
    x[big[i] * d + 1] = 1e20f;
  }
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "post-messages",
      TRUE, "message-interval", (guint64) 0, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, 64, 1, rate);

  check_per_window ("overflow", &o, &c, x, NULL, T, d, 1, rate, 0.99f, &total);
  /* Each big frame's own query row scores itself +inf, once. */
  fail_unless_equals_uint64 (total.nonfinite_scores, G_N_ELEMENTS (big));
  fail_unless_equals_uint64 (total.invalid_frames, 0);
  /* Warnings at 1 s and 12.1 s; 2.05 s is within 10 s of the first.  The
   * big frames also saturate rows that see them: a saturation warning at
   * 1 s and at 12.1 s too. */
  {
    guint n_over = 0, n_sat = 0;

    for (i = 0; i < o.warnings->len; i++) {
      gchar *text = obs_warning_text (&o, i);

      if (strstr (text, "overflowed") != NULL) {
        n_over++;
        fail_unless (strstr (text, "reduce the input amplitude") != NULL,
            "%s", text);
      } else if (strstr (text, "saturated") != NULL) {
        n_sat++;
      } else {
        fail ("unexpected warning: %s", text);
      }
      g_free (text);
    }
    fail_unless_equals_int (n_over, 2);
    fail_unless_equals_int (n_sat, 2);
  }
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* ------------------------------------------------------------ timing */

/* message-interval: each message covers whole windows and is posted at
 * the first window end at least the interval after its start; the
 * remainder goes out at EOS.  Timestamps are contiguous from the first
 * frame to the last, the fields add up to the per-window reference, and
 * every message is posted after the features it covers were pushed. */
GST_START_TEST (test_message_interval)
{
  const gint rate = 1000;
  const gsize d = 2, T = 53;
  /* The last one is the default, left unset: 100 ms as in level and
   * spectrum. */
  const GstClockTime intervals[] = { 0, 10 * GST_MSECOND, 7 * GST_MSECOND,
    GST_SECOND, 1, 100 * GST_MSECOND
  };
  const guint n_iv = G_N_ELEMENTS (intervals);
  const GstClockTime interval = intervals[(guint) __i__ % n_iv];
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES,
    (guint) __i__ >= n_iv ? START_WAIT : START_PAD
  };
  guint64 iv_get = 0;
  float *x = g_new (float, T * d);
  ObsWindow *w;
  gsize nw, i, m = 0, start = 0;
  guint64 out_frames_before;
  GstHarness *h;
  SattnOutput out;
  Obs o;
  GArray *cum = g_array_new (FALSE, TRUE, sizeof (guint64));

  sattn_fill_signal (x, T * d, 31 + __i__, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "start", c.start,
      "post-messages", TRUE, NULL);
  if ((guint) __i__ % n_iv != n_iv - 1)
    g_object_set (h->element, "message-interval", (guint64) interval, NULL);
  g_object_get (h->element, "message-interval", &iv_get, NULL);
  fail_unless_equals_uint64 (iv_get, interval);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, 6, 1, rate);

  /* Output frames in the first k buffers, for "posted after pushing". */
  sattn_output_init (&out);
  sattn_output_pull_all (h, &out);
  g_array_append_val (cum, m);
  for (i = 0; i < out.bufs->len; i++) {
    m += g_array_index (out.bufs, SattnOutBuf, i).n_floats / d;
    g_array_append_val (cum, m);
  }

  nw = obs_ref_schedule (&c, T, &w);
  m = 0;
  for (i = 0; i < nw; i++) {
    GstClockTime span = frame_time (w[i].end, 1, rate) -
        frame_time (w[start].first, 1, rate);

    if (interval == 0 || span >= interval || i == nw - 1) {
      ObsStats ref, wr;
      const GstStructure *s;
      gsize k;
      gchar *label;

      fail_unless (m < o.msgs->len, "only %u messages", o.msgs->len);
      s = obs_msg (&o, (guint) m);
      obs_stats_clear (&ref);
      for (k = start; k <= i; k++) {
        obs_ref_window_stats (&c, x, NULL, T, d, &w[k], 0.99f, &wr);
        obs_stats_merge (&ref, &wr);
      }
      label = g_strdup_printf ("interval %" GST_TIME_FORMAT ", message %"
          G_GSIZE_FORMAT, GST_TIME_ARGS (interval), m);
      obs_check_message (label, s, &ref, w[i].end - w[start].first);
      fail_unless_equals_uint64 (msg_u64 (s, "timestamp"),
          frame_time (w[start].first, 1, rate));
      fail_unless_equals_uint64 (msg_u64 (s, "timestamp") + msg_u64 (s,
              "duration"), frame_time (w[i].end, 1, rate));
      /* Posted after the buffers holding its frames were pushed. */
      out_frames_before = g_array_index (cum, guint64,
          g_array_index (o.bufs_at, guint, m));
      fail_unless (out_frames_before >= w[i].end,
          "%s: posted when %" G_GUINT64_FORMAT " output frames were out, "
          "it covers up to frame %" G_GSIZE_FORMAT, label, out_frames_before,
          w[i].end);
      g_free (label);
      m++;
      start = i + 1;
    }
  }
  fail_unless_equals_int (o.msgs->len, m);
  /* Contiguous: each message starts where the previous one ended, the
   * last ends with the stream. */
  for (i = 0; i + 1 < o.msgs->len; i++)
    fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, i), "timestamp") +
        msg_u64 (obs_msg (&o, i), "duration"),
        msg_u64 (obs_msg (&o, i + 1), "timestamp"));
  fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, 0), "timestamp"), 0);
  fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, o.msgs->len - 1),
          "timestamp") + msg_u64 (obs_msg (&o, o.msgs->len - 1), "duration"),
      frame_time (T, 1, rate));
  if (interval >= GST_SECOND)
    fail_unless_equals_int (o.msgs->len, 1);    /* only the one at EOS */

  g_free (w);
  g_array_unref (cum);
  sattn_output_clear (&out);
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* message-weights: the head-averaged weights of the message's last
 * window, an array of rows of doubles. */
GST_START_TEST (test_message_weights)
{
  const gint rate = 1200;
  const gsize d = 4, T = 21;
  RefConfig c = { 6, 3, 2, 0, 0.0, (__i__ & 1) != 0,
    (__i__ & 2) ? OUT_WINDOW : OUT_FRAMES, START_PAD
  };
  float *x = g_new (float, T * d);
  ObsWindow *w;
  gsize nw, i, r, k;
  GstHarness *h;
  Obs o;
  double *ref, worst = 0;

  sattn_fill_signal (x, T * d, 77 + __i__, 1.2f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", c.heads,
      "causal", c.causal, "output", c.output, "post-messages", TRUE,
      "message-weights", TRUE, "message-interval", (guint64) 5 * GST_MSECOND,
      NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, 4, 1, rate);

  nw = obs_ref_schedule (&c, T, &w);
  ref = g_new (double, c.window * c.window);
  fail_unless (o.msgs->len > 1);
  for (i = 0; i < o.msgs->len; i++) {
    const GstStructure *s = obs_msg (&o, i);
    guint64 end = msg_u64 (s, "timestamp") + msg_u64 (s, "duration");
    const ObsWindow *last = NULL;
    const GValue *wv = gst_structure_get_value (s, "weights");

    for (k = 0; k < nw; k++)
      if (frame_time (w[k].end, 1, rate) == end)
        last = &w[k];
    fail_unless (last != NULL);
    fail_unless (wv != NULL && GST_VALUE_HOLDS_ARRAY (wv));
    obs_ref_window_weights (&c, x, NULL, T, d, last, -1, ref);
    fail_unless_equals_int (gst_value_array_get_size (wv), last->rows);
    for (r = 0; r < last->rows; r++) {
      const GValue *row = gst_value_array_get_value (wv, (guint) r);

      fail_unless_equals_int (gst_value_array_get_size (row), c.window);
      for (k = 0; k < c.window; k++) {
        double got = g_value_get_double (gst_value_array_get_value (row,
                (guint) k));
        double want = ref[r * c.window + k];

        worst = MAX (worst, fabs (got - want));
        fail_unless (fabs (got - want) <= 1e-5, "message %" G_GSIZE_FORMAT
            " weight (%" G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT ") = %.8f, want "
            "%.8f", i, r, k, got, want);
      }
    }
  }
  GST_INFO ("weights: max-abs error %.3g", worst);
  g_free (ref);
  g_free (w);
  obs_detach (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Without post-messages nothing is posted, not even for a saturated or
 * overflowing stream (nothing is computed). */
GST_START_TEST (test_off_by_default)
{
  const gint rate = 1000;
  const gsize d = 2, T = 40;
  float x[80];
  GstHarness *h;
  Obs o;
  gboolean post;
  gsize i;

  for (i = 0; i < T * d; i++)
    x[i] = 1.0f;
  x[10] = x[11] = 1e20f;
  h = sattn_harness_new ("window", 8, "hop", 4, NULL);
  g_object_get (h->element, "post-messages", &post, NULL);
  fail_if (post);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, 8, 1, rate);
  fail_unless_equals_int (gst_harness_buffers_received (h), 5);
  fail_unless_equals_int (o.msgs->len, 0);
  fail_unless_equals_int (o.warnings->len, 0);
  obs_detach (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* A flush drops what was accumulated and not posted: the message at EOS
 * covers only the frames after the flush, from their timestamps. */
GST_START_TEST (test_flush_discards)
{
  const gint rate = 1000;
  const gsize d = 2, T = 20;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float old[24], x[40];
  GstHarness *h;
  GstSegment seg;
  Obs o;
  ObsWindow *w;
  ObsStats ref, wr;
  gsize nw, i;

  sattn_fill_signal (old, 24, 1, 1.0f);
  sattn_fill_signal (x, 40, 2, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "post-messages",
      TRUE, "message-interval", (guint64) GST_SECOND, NULL);
  obs_attach (&o, h);
  sattn_set_caps (h, rate, (gint) d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (old,
              sizeof (old), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_stop (TRUE)));
  gst_segment_init (&seg, GST_FORMAT_TIME);
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 5 * GST_SECOND, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  fail_unless_equals_int (o.msgs->len, 1);
  nw = obs_ref_schedule (&c, T, &w);
  obs_stats_clear (&ref);
  for (i = 0; i < nw; i++) {
    obs_ref_window_stats (&c, x, NULL, T, d, &w[i], 0.99f, &wr);
    obs_stats_merge (&ref, &wr);
  }
  obs_check_message ("after a flush", obs_msg (&o, 0), &ref, T);
  fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, 0), "timestamp"),
      5 * GST_SECOND);
  fail_unless_equals_uint64 (msg_u64 (obs_msg (&o, 0), "duration"),
      frame_time (T, 1, rate));
  g_free (w);
  obs_detach (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

static Suite *
sattn_health_suite (void)
{
  Suite *s = suite_create ("sattn-health");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_loop_test (tc, test_identical_frames_uniform, 0, 8);
  tcase_add_loop_test (tc, test_random_fields, 0, 64);
  tcase_add_loop_test (tc, test_dominant_key_saturates, 0, 2);
  tcase_add_loop_test (tc, test_unit_scale_warning, 0, 2);
  tcase_add_test (tc, test_nan_and_gap_frames);
  tcase_add_test (tc, test_overflow_scores);
  tcase_add_loop_test (tc, test_message_interval, 0, 12);
  tcase_add_loop_test (tc, test_message_weights, 0, 4);
  tcase_add_test (tc, test_off_by_default);
  tcase_add_test (tc, test_flush_discards);
  return s;
}

GST_CHECK_MAIN (sattn_health);
