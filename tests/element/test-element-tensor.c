/* sattn element: outputs at any hop (other/tensors with a fractional
 * framerate where audio/x-raw cannot carry the rate, audio/x-raw kept where
 * it can), exact row timestamps from the frame counter, a sink CAPS query
 * that steers upstream to a working rate, discontinuities found by
 * GstAudioStreamAlign (alignment-threshold, discont-wait), and the weights
 * file read once per READY -> PAUSED.
 *
 * Rows are compared with the float64 reference of sattn-check.c (max-abs
 * within 1e-5 × (1 + max |ref|)); timestamps are compared exactly.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "sattn/sattn-weights.h"
#include <gst/audio/audio.h>
#include "gstsattn-time.h"
#include "gstsattn-meta.h"

#include <glib/gstdio.h>
#include <string.h>

/* ------------------------------------------------------------ time */

/* t0 + f × fs × 1 s / rate, in 128-bit integers: an independent exact
 * value for gst_sattn_time_of_frame. */
static guint64
exact_time (guint64 t0, guint64 f, guint fs, gint rate)
{
  unsigned __int128 v = (unsigned __int128) f * fs * GST_SECOND;

  return t0 + (guint64) (v / (unsigned __int128) rate);
}

static void
check_row (guint64 t0, guint64 k, guint hop, guint fs, gint rate)
{
  const GstClockTime pts = gst_sattn_time_of_frame (t0, k * hop, fs, rate);
  const GstClockTime end = gst_sattn_time_of_frame (t0, (k + 1) * hop, fs,
      rate);

  fail_unless_equals_uint64 (pts, exact_time (t0, k * hop, fs, rate));
  fail_unless_equals_uint64 (end, exact_time (t0, (k + 1) * hop, fs, rate));
}

/* Row k of a pooled stream accounts for frames [k hop, (k + 1) hop): its
 * PTS is the time of its first new frame, its duration the hop's.  Over
 * 10^8 rows at 62.5 rows/s (hop 256 at 16 kHz) every PTS is exactly
 * k × 16 ms and the rows tile the timeline (PTS + duration = next PTS), so
 * nothing drifts; at 44.1 kHz / 512 and 48 kHz / (3 × 7), where a row is
 * not a whole number of ns, every PTS is the exact floor.  Checked on
 * the first and last 2 × 10^4 rows and 10^4 rows in between (the
 * function has no state: each row is computed from its own index). */
GST_START_TEST (test_row_time_exact)
{
  const struct
  {
    gint rate;
    guint fs, hop;
  } cases[] = { {16000, 1, 256}, {44100, 1, 512}, {48000, 3, 7} };
  const guint64 N = 100000000, edge = 20000;
  const guint64 t0s[] = { 0, 123456789 };
  guint c, t;
  guint64 k;
  GRand *r = g_rand_new_with_seed (11);

  for (c = 0; c < G_N_ELEMENTS (cases); c++) {
    for (t = 0; t < G_N_ELEMENTS (t0s); t++) {
      const guint64 t0 = t0s[t];
      const gint rate = cases[c].rate;
      const guint fs = cases[c].fs, hop = cases[c].hop;

      for (k = 0; k < edge; k++)
        check_row (t0, k, hop, fs, rate);
      for (k = N - edge; k < N; k++)
        check_row (t0, k, hop, fs, rate);
      for (k = 0; k < 10000; k++)
        check_row (t0, (guint64) g_rand_double_range (r, 0, (gdouble) N),
            hop, fs, rate);
      if (c == 0) {
        /* 62.5 rows/s: every row 16 ms, the last one ends at 1.6e6 s. */
        for (k = N - edge; k < N; k++) {
          fail_unless_equals_uint64 (gst_sattn_time_of_frame (t0, k * hop,
                  fs, rate), t0 + k * 16 * GST_MSECOND);
        }
        fail_unless_equals_uint64 (gst_sattn_time_of_frame (t0, N * hop, fs,
                rate), t0 + (guint64) 1600000 * GST_SECOND);
      }
    }
  }
  /* Saturation at the end of the clock's range, never a wrap. */
  fail_unless_equals_uint64 (gst_sattn_time_of_frame (GST_CLOCK_TIME_NONE -
          1 - GST_SECOND, 16000 * 2, 1, 16000), GST_CLOCK_TIME_NONE - 1);
  g_rand_free (r);
}

GST_END_TEST;

/* ------------------------------------------------------------ caps */

static const GstStructure *
src_structure (GstHarness * h, GstCaps ** caps)
{
  *caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (*caps != NULL, "no source caps");
  return gst_caps_get_structure (*caps, 0);
}

static void
check_tensor_caps (GstHarness * h, const gchar * dims, gint num, gint den)
{
  GstCaps *caps;
  const GstStructure *s = src_structure (h, &caps);
  gint n = 0, d = 0, v = 0;

  fail_unless (gst_structure_has_name (s, "other/tensors"), "%"
      GST_PTR_FORMAT, caps);
  fail_unless_equals_string (gst_structure_get_string (s, "format"), "static");
  fail_unless (gst_structure_get_int (s, "num_tensors", &v));
  fail_unless_equals_int (v, 1);
  fail_unless_equals_string (gst_structure_get_string (s, "types"), "float32");
  fail_unless_equals_string (gst_structure_get_string (s, "dimensions"), dims);
  fail_unless (gst_structure_get_fraction (s, "framerate", &n, &d));
  fail_unless_equals_int (n, num);
  fail_unless_equals_int (d, den);
  gst_caps_unref (caps);
}

static void
check_audio_caps (GstHarness * h, gint rate, gint channels)
{
  GstCaps *caps;
  const GstStructure *s = src_structure (h, &caps);
  gint v = 0;

  fail_unless (gst_structure_has_name (s, "audio/x-raw"), "%"
      GST_PTR_FORMAT, caps);
  fail_unless_equals_string (gst_structure_get_string (s, "format"),
      GST_AUDIO_NE (F32));
  fail_unless (gst_structure_get_int (s, "rate", &v));
  fail_unless_equals_int (v, rate);
  fail_unless (gst_structure_get_int (s, "channels", &v));
  fail_unless_equals_int (v, channels);
  gst_caps_unref (caps);
}

/* Pushes T frames of d values at rate in buffers of `per` frames, EOS,
 * pulls everything. */
static void
push_all (GstHarness * h, const float *x, gsize T, gsize d, gsize per,
    gint rate, SattnOutput * o)
{
  gsize f;

  for (f = 0; f < T; f += per) {
    gsize n = MIN (per, T - f);

    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + f * d,
                n * d * sizeof (float), gst_util_uint64_scale (f,
                    GST_SECOND, rate), 0)), GST_FLOW_OK);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (o);
  sattn_output_pull_all (h, o);
}

/* The case: mean over 512-frame windows every 256 frames at
 * 16 kHz is 62.5 rows/s: other/tensors "1:1" at 125/2, one row per buffer,
 * row k at exactly k × 16 ms for 16 ms; rows equal the reference. */
GST_START_TEST (test_tensor_mean_16k)
{
  const gint rate = 16000;
  const gsize T = 16000, d = 1;
  RefConfig c = { 512, 256, 1, 0, 0.0, FALSE, OUT_MEAN, START_PAD };
  float *x = g_new (float, T * d);
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  guint i;

  sattn_fill_signal (x, T * d, 5, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "output",
      OUT_MEAN, NULL);
  sattn_set_caps (h, rate, (gint) d);
  check_tensor_caps (h, "1:1", 125, 2);
  push_all (h, x, T, d, 1000, rate, &o);

  ref_stream (&c, x, NULL, T, d, TRUE, &ref);
  fail_unless_equals_int (o.bufs->len, ref.n_rows);
  for (i = 0; i < o.bufs->len; i++) {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);

    fail_unless_equals_int (b->n_floats, 1);
    if (i + 1 < o.bufs->len) {
      fail_unless_equals_uint64 (b->pts, (guint64) i * 16 * GST_MSECOND);
      fail_unless_equals_uint64 (b->duration, 16 * GST_MSECOND);
    }
  }
  fail_unless_equals_int (sattn_check_buffers ("mean 16 kHz hop 256", &o, 0,
          o.bufs->len, 0, &ref, 0, rate, 1, 0), ref.n_rows);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Window mode at 1000/3 rows/s: dimensions "d_out:window" (innermost
 * first) let a consumer reshape from the caps alone; frames mode with a
 * frame-size that does not divide the rate: "d_model:1" at rate /
 * frame-size.  Both against the reference, exact timestamps. */
GST_START_TEST (test_tensor_window_and_frames)
{
  const gint rate = 1000;
  const gsize T = 200, ch = 2;
  RefConfig cw = { 16, 3, 1, 0, 0.0, FALSE, OUT_WINDOW, START_PAD };
  RefConfig cf = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float *x = g_new (float, T * ch * 3);
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  guint i;

  sattn_fill_signal (x, T * ch * 3, 9, 1.0f);
  if (__i__ == 0) {
    h = sattn_harness_new ("window", cw.window, "hop", cw.hop, "output",
        OUT_WINDOW, NULL);
    sattn_set_caps (h, rate, (gint) ch);
    check_tensor_caps (h, "2:16", 1000, 3);
    push_all (h, x, T, ch, 37, rate, &o);
    ref_stream (&cw, x, NULL, T, ch, TRUE, &ref);
    for (i = 0; i < o.bufs->len; i++)
      fail_unless_equals_int (g_array_index (o.bufs, SattnOutBuf,
              i).n_floats, 2 * 16);
    fail_unless_equals_int (sattn_check_buffers ("window 1000/3", &o, 0,
            o.bufs->len, 0, &ref, 0, rate, 1, 0), ref.n_rows);
  } else {
    /* frame-size 3 at 1000 Hz: 1000/3 frames of 6 values per second */
    h = sattn_harness_new ("window", cf.window, "hop", cf.hop, "frame-size",
        3, NULL);
    sattn_set_caps (h, rate, (gint) ch);
    check_tensor_caps (h, "6:1", 1000, 3);
    push_all (h, x, T, 3 * ch, 50, rate / 3, &o);
    ref_stream (&cf, x, NULL, T, 3 * ch, TRUE, &ref);
    fail_unless_equals_int (o.bufs->len, T);
    fail_unless_equals_int (sattn_check_buffers ("frames fs 3", &o, 0,
            o.bufs->len, 0, &ref, 0, rate, 3, 0), T);
  }
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* audio/x-raw stays the output wherever its whole rate can express the
 * stream (hop 250 at 16 kHz: 64 rows/s), so existing launch lines keep
 * working; a downstream that takes only tensors gets them at 64/1; one
 * that takes only audio/x-raw at a rate it cannot carry refuses with the
 * hop values that would work. */
GST_START_TEST (test_audio_preferred)
{
  GstHarness *h;
  GstBus *bus;
  gchar *text;

  h = sattn_harness_new ("window", 512, "hop", 250, "output", OUT_MEAN, NULL);
  sattn_set_caps (h, 16000, 1);
  check_audio_caps (h, 64, 1);
  gst_harness_teardown (h);

  h = sattn_harness_new ("window", 512, "hop", 250, "output", OUT_MEAN, NULL);
  gst_harness_set_sink_caps_str (h, "other/tensors");
  sattn_set_caps (h, 16000, 1);
  check_tensor_caps (h, "1:1", 64, 1);
  gst_harness_teardown (h);

  h = sattn_harness_new ("window", 512, "hop", 256, "output", OUT_MEAN, NULL);
  gst_harness_set_sink_caps_str (h, "audio/x-raw");
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, 16000, 1);
  fail_if (gst_pad_has_current_caps (h->sinkpad));
  text = sattn_pop_error (bus);
  fail_unless (strstr (text, "hop values that work with window=512: ") !=
      NULL, "%s", text);
  g_free (text);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------ pipelines */

typedef struct
{
  GArray *pts, *dur, *meta_first;
} Stamps;

static GstPadProbeReturn
stamp_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Stamps *st = data;
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
  guint64 p = GST_BUFFER_PTS (b), d = GST_BUFFER_DURATION (b);

  GstSattnMeta *m = gst_buffer_get_sattn_meta (b);
  /* The window metadata of a one-row buffer: that row (G_MAXUINT64: no
   * meta or not one row). */
  guint64 f = m != NULL && m->n_rows == 1 ? m->rows[0].first_frame :
      G_MAXUINT64;

  g_array_append_val (st->pts, p);
  g_array_append_val (st->dur, d);
  g_array_append_val (st->meta_first, f);
  return GST_PAD_PROBE_OK;
}

/* Runs desc (with elements named s and sink) to EOS; returns the caps
 * sattn's sink and source pads negotiated and the buffers' timestamps. */
static void
run_to_eos (const gchar * desc, gchar ** in_caps, gchar ** out_caps,
    Stamps * st)
{
  GError *err = NULL;
  GstElement *pipe = gst_parse_launch (desc, &err), *s, *sink;
  GstBus *bus;
  GstMessage *msg;
  GstPad *pad;
  GstCaps *caps;

  fail_unless (pipe != NULL && err == NULL, "%s: %s", desc,
      err ? err->message : "");
  s = gst_bin_get_by_name (GST_BIN (pipe), "s");
  sink = gst_bin_get_by_name (GST_BIN (pipe), "sink");
  pad = gst_element_get_static_pad (sink, "sink");
  st->pts = g_array_new (FALSE, FALSE, sizeof (guint64));
  st->dur = g_array_new (FALSE, FALSE, sizeof (guint64));
  st->meta_first = g_array_new (FALSE, FALSE, sizeof (guint64));
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, stamp_probe, st, NULL);
  gst_object_unref (pad);

  bus = gst_element_get_bus (pipe);
  gst_element_set_state (pipe, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 20 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "HANG: %s: no EOS within 20 s", desc);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *e = NULL;
    gst_message_parse_error (msg, &e, NULL);
    fail ("%s: %s", desc, e->message);
  }
  gst_message_unref (msg);

  pad = gst_element_get_static_pad (s, "sink");
  caps = gst_pad_get_current_caps (pad);
  *in_caps = gst_caps_to_string (caps);
  gst_caps_unref (caps);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (s, "src");
  caps = gst_pad_get_current_caps (pad);
  *out_caps = gst_caps_to_string (caps);
  gst_caps_unref (caps);
  gst_object_unref (pad);

  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (s);
  gst_object_unref (sink);
  gst_object_unref (pipe);
}

static void
stamps_clear (Stamps * st)
{
  g_array_unref (st->pts);
  g_array_unref (st->dur);
  g_array_unref (st->meta_first);
}

/* The launch line runs: tensor caps at 125/2 rows/s, row k at
 * k × 16 ms for 16 ms (20 buffers of 1024 samples: 80 rows, the last one
 * drained at EOS), each buffer with its row's window metadata. */
GST_START_TEST (test_pipeline_mean_16k)
{
  const gchar *desc = "audiotestsrc num-buffers=20 ! "
      "audio/x-raw,format=F32LE,channels=1,rate=16000 ! "
      "sattn name=s window=512 hop=256 output=mean ! fakesink name=sink";
  gchar *in_caps, *out_caps;
  Stamps st;
  guint i;

  run_to_eos (desc, &in_caps, &out_caps, &st);
  g_print ("%s\n  sattn sink caps: %s\n  sattn src caps:  %s\n  first PTS:",
      desc, in_caps, out_caps);
  for (i = 0; i < MIN (st.pts->len, 5); i++)
    g_print (" %" GST_TIME_FORMAT " (+%" GST_TIME_FORMAT ")",
        GST_TIME_ARGS (g_array_index (st.pts, guint64, i)),
        GST_TIME_ARGS (g_array_index (st.dur, guint64, i)));
  g_print ("\n  %u buffers\n", st.pts->len);
  fail_unless (g_str_has_prefix (out_caps, "other/tensors"), "%s", out_caps);
  fail_unless (strstr (out_caps, "dimensions=(string)1:1") != NULL, "%s",
      out_caps);
  fail_unless (strstr (out_caps, "framerate=(fraction)125/2") != NULL, "%s",
      out_caps);
  fail_unless_equals_int (st.pts->len, 20 * 1024 / 256);
  for (i = 0; i < st.pts->len; i++) {
    fail_unless_equals_uint64 (g_array_index (st.pts, guint64, i),
        (guint64) i * 16 * GST_MSECOND);
    fail_unless_equals_uint64 (g_array_index (st.dur, guint64, i),
        16 * GST_MSECOND);
    /* Each one-row tensor buffer carries its row's window metadata. */
    fail_unless_equals_uint64 (g_array_index (st.meta_first, guint64, i),
        (guint64) i * 256);
  }
  stamps_clear (&st);
  g_free (in_caps);
  g_free (out_caps);
}

GST_END_TEST;

/* The sink CAPS query steers: audiotestsrc (default 44.1 kHz) in front of
 * sattn frame-size=64 fixates to 48 kHz, the common rate nearest its
 * default whose frame rate is whole (44100 / 64 is not), and the output
 * is audio/x-raw at 750 Hz without any capsfilter.  Pooled: hop 3 needs a
 * multiple of 192 for audio/x-raw; 48 kHz is one. */
GST_START_TEST (test_caps_query_steers)
{
  const gchar *descs[] = {
    "audiotestsrc num-buffers=5 ! sattn name=s frame-size=64 ! "
        "fakesink name=sink",
    "audiotestsrc num-buffers=5 ! sattn name=s frame-size=64 hop=3 "
        "output=mean ! fakesink name=sink",
  };
  const gchar *want_in = "rate=(int)48000";
  const gchar *want_out[] = { "rate=(int)750, channels=(int)64",
    "rate=(int)250, channels=(int)64"
  };
  gchar *in_caps, *out_caps;
  Stamps st;

  run_to_eos (descs[__i__], &in_caps, &out_caps, &st);
  g_print ("%s\n  sattn sink caps: %s\n  sattn src caps:  %s\n",
      descs[__i__], in_caps, out_caps);
  fail_unless (strstr (in_caps, want_in) != NULL, "%s", in_caps);
  fail_unless (g_str_has_prefix (out_caps, "audio/x-raw"), "%s", out_caps);
  fail_unless (strstr (out_caps, want_out[__i__]) != NULL, "%s", out_caps);
  fail_unless (st.pts->len > 0);
  stamps_clear (&st);
  g_free (in_caps);
  g_free (out_caps);
}

GST_END_TEST;

/* The CAPS query in PAUSED: with a downstream that takes other/tensors
 * every rate works (44100 with frame-size=64), but the common rates that
 * give audio/x-raw come first (fixating to the rate nearest 44100 there
 * gives 48000); with an audio-only downstream only rates that give a
 * whole output rate are offered. */
GST_START_TEST (test_caps_query_order)
{
  GstHarness *h = sattn_harness_new ("frame-size", 64, NULL);
  GstBus *bus = sattn_attach_bus (h);
  GstPad *sinkpad = GST_PAD_PEER (h->srcpad);
  GstCaps *all, *fixed;
  const GstStructure *s;
  gint rate = 0;

  all = gst_pad_query_caps (sinkpad, NULL);
  fail_unless (gst_caps_get_size (all) >= 2, "%" GST_PTR_FORMAT, all);
  fixed = gst_caps_copy_nth (all, 0);
  fixed = gst_caps_make_writable (fixed);
  gst_structure_fixate_field_nearest_int (gst_caps_get_structure (fixed, 0),
      "rate", 44100);
  s = gst_caps_get_structure (fixed, 0);
  fail_unless (gst_structure_get_int (s, "rate", &rate));
  fail_unless_equals_int (rate, 48000);
  gst_caps_unref (fixed);
  fixed = gst_caps_from_string ("audio/x-raw, format=" GST_AUDIO_NE (F32)
      ", layout=interleaved, rate=44100, channels=1");
  fail_unless (gst_caps_can_intersect (all, fixed));
  /* ACCEPT_CAPS agrees with the CAPS query. */
  fail_unless (gst_pad_query_accept_caps (sinkpad, fixed));
  gst_caps_unref (all);

  gst_harness_set_sink_caps_str (h, "audio/x-raw");
  all = gst_pad_query_caps (sinkpad, NULL);
  fail_if (gst_caps_can_intersect (all, fixed), "%" GST_PTR_FORMAT, all);
  fail_if (gst_pad_query_accept_caps (sinkpad, fixed));
  /* ... and its refusal says what works. */
  {
    gchar *text = sattn_pop_error (bus);

    fail_unless (strstr (text, "frame-size values that work: ") != NULL,
        "%s", text);
    g_free (text);
  }
  gst_caps_unref (fixed);
  gst_caps_unref (all);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------ discont */

/* 1000 Hz, buffers of 100 frames.  From buffer 5 on:
 *  0: every buffer stamped 300 ms late (a lasting jump), default
 *     discont-wait (1 s): no resync until the jump has lasted 1 s of
 *     input time, i.e. at buffer 15 (stamped 1.8 s);
 *  1: only buffer 5 stamped 300 ms late (a glitch): never a resync;
 *  2: the lasting jump with discont-wait=0: resync at buffer 5 (0.8 s);
 *  3: buffer 5 stamped 30 ms late, discont-wait=0: inside the default
 *     40 ms alignment-threshold, no resync;
 *  4: every buffer from 5 on stamped 30 ms late, alignment-threshold=20 ms
 *     and discont-wait=0: resync at 0.53 s (a lone late buffer would
 *     resync twice: there, and back).
 * Every input frame has its output row (EOS drains); before the resync
 * the timestamps come from the frame counter; the resync's output is
 * DISCONT and starts at the buffer's own timestamp. */
GST_START_TEST (test_discont_wait)
{
  const gint rate = 1000;
  const gsize per = 100, nb = 20, T = per * nb;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  const GstClockTime off[] = { 300, 300, 300, 30, 30 };
  const gboolean lasting[] = { TRUE, FALSE, TRUE, FALSE, TRUE };
  const gint resync_at[] = { 15, -1, 5, -1, 5 };
  float *x = g_new (float, T);
  GstHarness *h;
  SattnOutput o;
  RefOut ra, rb;
  guint i, split = 0;
  gsize fa = 0, rows = 0;
  guint64 v = 0;

  sattn_fill_signal (x, T, 3, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  g_object_get (h->element, "discont-wait", &v, NULL);
  fail_unless_equals_uint64 (v, GST_SECOND);
  g_object_get (h->element, "alignment-threshold", &v, NULL);
  fail_unless_equals_uint64 (v, 40 * GST_MSECOND);
  if (__i__ >= 2)
    g_object_set (h->element, "discont-wait", (guint64) 0, NULL);
  if (__i__ == 4)
    g_object_set (h->element, "alignment-threshold", 20 * GST_MSECOND, NULL);
  sattn_set_caps (h, rate, 1);
  for (i = 0; i < nb; i++) {
    GstClockTime ts = gst_util_uint64_scale (i * per, GST_SECOND, rate);

    if (i == 5 || (i > 5 && lasting[__i__]))
      ts += off[__i__] * GST_MSECOND;
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + i *
                per, per * sizeof (float), ts, 0)), GST_FLOW_OK);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);

  for (i = 0; i < o.bufs->len; i++) {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);

    rows += b->n_floats;
    if (i > 0 && b->discont && split == 0)
      split = i;
    if (split == 0)
      fa += b->n_floats;
  }
  fail_unless_equals_int (rows, T);
  if (resync_at[__i__] < 0) {
    fail_unless_equals_int (split, 0);
    ref_stream (&c, x, NULL, T, 1, TRUE, &ra);
    fail_unless_equals_int (sattn_check_buffers ("no resync", &o, 0,
            o.bufs->len, 0, &ra, 0, rate, 1, 0), T);
    ref_out_clear (&ra);
  } else {
    const gsize f = (gsize) resync_at[__i__] * per;
    const GstClockTime t1 = gst_util_uint64_scale (f, GST_SECOND, rate) +
        off[__i__] * GST_MSECOND;

    fail_unless (split > 0, "no resync");
    fail_unless_equals_int (fa, f);
    ref_stream (&c, x, NULL, f, 1, TRUE, &ra);
    ref_stream (&c, x + f, NULL, T - f, 1, TRUE, &rb);
    fail_unless_equals_int (sattn_check_buffers ("before the resync", &o, 0,
            split, 0, &ra, 0, rate, 1, 0), f);
    fail_unless_equals_int (sattn_check_buffers ("after the resync", &o,
            split, o.bufs->len, fa, &rb, 0, rate, 1, t1), T - f);
    ref_out_clear (&ra);
    ref_out_clear (&rb);
  }
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* ------------------------------------------------------------ weights */

static gchar *
fixture (const gchar * name)
{
  const gchar *root = g_getenv ("SATTN_SOURCE_ROOT");

  fail_unless (root != NULL, "SATTN_SOURCE_ROOT is not set");
  return g_build_filename (root, "tests", "data", name, NULL);
}

/* The weights file is read once, at READY -> PAUSED: replaced by garbage
 * after that, caps (and new caps with the same frames) still work and
 * give the file's attention (against the reference on a model built from
 * the original file); the next READY -> PAUSED reads the garbage and
 * fails with an error naming the file. */
GST_START_TEST (test_weights_read_once)
{
  const gsize T = 64, ch = 8;
  RefConfig c = { 16, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  gchar *src = fixture ("e8_h1_basic.safetensors"), *data = NULL;
  gchar *dir = g_dir_make_tmp ("sattn-tensor-XXXXXX", NULL);
  gchar *path = g_build_filename (dir, "w.safetensors", NULL), *text;
  gsize len = 0;
  SattnConfig mc = { 0, };
  SattnWeights w;
  SattnMhaWeights *mw = NULL;
  SattnModel *m;
  SattnStatus st;
  float *x = g_new (float, 2 * T * ch);
  GstHarness *h;
  GstBus *bus;
  SattnOutput o;
  RefOut ref;
  guint r;

  fail_unless (g_file_get_contents (src, &data, &len, NULL));
  fail_unless (g_file_set_contents (path, data, (gssize) len, NULL));
  mc.heads = 1;
  fail_unless_equals_int (sattn_mha_weights_load (path, "", 0, 1, 0, &mc, &w,
          &mw, NULL, 0), SATTN_OK);
  m = sattn_model_new (&mc, &w, &st);
  fail_unless (m != NULL);
  sattn_mha_weights_free (mw);

  h = sattn_harness_new ("window", c.window, "hop", c.hop, "weights", path,
      NULL);
  bus = sattn_attach_bus (h);
  /* PLAYING already: the file was read.  Now it is garbage. */
  fail_unless (g_file_set_contents (path, "not a safetensors file", -1, NULL));
  sattn_fill_signal (x, 2 * T * ch, 21, 1.0f);
  for (r = 0; r < 2; r++) {
    const gint rate = r == 0 ? 1000 : 2000;

    /* New caps with the same frames: the running model serves them. */
    sattn_set_caps (h, rate, (gint) ch);
    fail_unless (gst_pad_has_current_caps (h->sinkpad));
    push_all (h, x + r * T * ch, T, ch, 10, rate, &o);
    oneshot_stream (&c, m, x + r * T * ch, NULL, T, ch, TRUE, &ref);
    fail_unless_equals_int (sattn_check_buffers ("weights read once", &o, 0,
            o.bufs->len, 0, &ref, 0, rate, 1, 0), T);
    ref_out_clear (&ref);
    sattn_output_clear (&o);
    /* EOS ends the stream: a new stream-start for the next round. */
    gst_harness_push_event (h, gst_event_new_flush_start ());
    gst_harness_push_event (h, gst_event_new_flush_stop (TRUE));
  }
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR) == NULL);

  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  text = sattn_pop_error (bus);
  fail_unless (strstr (text, "w.safetensors") != NULL, "%s", text);
  g_free (text);
  gst_element_set_state (h->element, GST_STATE_NULL);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);

  sattn_model_free (m);
  g_unlink (path);
  g_rmdir (dir);
  g_free (path);
  g_free (dir);
  g_free (src);
  g_free (data);
  g_free (x);
}

GST_END_TEST;

static Suite *
sattn_tensor_suite (void)
{
  Suite *s = suite_create ("sattn_tensor");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_row_time_exact);
  tcase_add_test (tc, test_tensor_mean_16k);
  tcase_add_loop_test (tc, test_tensor_window_and_frames, 0, 2);
  tcase_add_test (tc, test_audio_preferred);
  tcase_add_test (tc, test_pipeline_mean_16k);
  tcase_add_loop_test (tc, test_caps_query_steers, 0, 2);
  tcase_add_test (tc, test_caps_query_order);
  tcase_add_loop_test (tc, test_discont_wait, 0, 5);
  tcase_add_test (tc, test_weights_read_once);
  return s;
}

GST_CHECK_MAIN (sattn_tensor);
