/* sattn element: segments, negotiation and property changes while
 * running.
 *
 * - A SEGMENT that only updates the position keeps the window: the output
 *   is the output of the same stream without that event (values, PTS,
 *   flags), timestamped or not; a SEGMENT that changes the timeline
 *   drains and restarts it.  Non-TIME segments go downstream as TIME.
 * - The sink CAPS query (in PAUSED/PLAYING) and ACCEPT_CAPS refuse caps
 *   that cannot work; a pipeline whose caps cannot work fails with exactly
 *   one error that says why (200 runs, bounded in time); a downstream
 *   refusal names the caps offered.
 * - Messages: scale below FLT_MIN, head-dim with and without weights, the
 *   weights file checked before caps and against the stream.
 * - Geometry set while running: one warning per property, applied at the
 *   next READY.
 *
 * Outputs are checked against the float64 reference of sattn-check.c.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <math.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

/* ------------------------------------------------------------ segments */

/* Push T frames of d values from x in buffers of the given frame counts
 * (cycled), timestamped from 0 (ts) or not; before buffer number
 * seg_at (if any) push the segment seg. */
static void
push_frames_split (GstHarness * h, const float *x, gsize T, gsize d,
    gint rate, gboolean ts, const guint * sizes, guint n_sizes, guint seg_at,
    const GstSegment * seg)
{
  gsize f = 0;
  guint i = 0;

  while (f < T) {
    gsize n = MIN (sizes[i % n_sizes], T - f);
    GstClockTime pts = ts ? gst_util_uint64_scale (f, GST_SECOND, rate) :
        GST_CLOCK_TIME_NONE;

    if (seg != NULL && i == seg_at)
      fail_unless (gst_harness_push_event (h, gst_event_new_segment (seg)));
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + f * d,
                n * d * sizeof (float), pts, 0)), GST_FLOW_OK);
    f += n;
    i++;
  }
}

static void
pull_everything (GstHarness * h, SattnOutput * o)
{
  GstEvent *ev;

  sattn_output_init (o);
  sattn_output_pull_all (h, o);
  while ((ev = gst_harness_try_pull_event (h)) != NULL)
    gst_event_unref (ev);
}

/* Position-only (and duration) segment updates mid-stream, in the middle
 * of a hop, in frames and pooled modes, timestamped and not: byte for
 * byte the output of the stream without them, one DISCONT, contiguous
 * PTS (so no span is emitted twice), equal to the reference. */
GST_START_TEST (test_segment_position_update)
{
  static const gint outputs[] = { OUT_FRAMES, OUT_MEAN };
  const gint rate = 1000;
  const gsize d = 2, T = 50;
  const gboolean ts = (__i__ & 1) == 0;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  static const guint sizes[] = { 7, 3, 11, 5 };
  float x[2 * 50];
  SattnOutput with, without;
  GstSegment seg;
  RefOut ref;
  guint run, k;

  c.output = outputs[__i__ >> 1];
  sattn_fill_signal (x, G_N_ELEMENTS (x), 71, 1.0f);
  for (run = 0; run < 2; run++) {
    GstHarness *h = sattn_harness_new ("window", c.window, "hop", c.hop,
        "output", c.output, NULL);

    sattn_set_caps (h, rate, (gint) d);
    gst_segment_init (&seg, GST_FORMAT_TIME);
    /* What basesrc sends after a flush / a position update. */
    seg.position = 17 * GST_MSECOND;
    seg.duration = 5 * GST_SECOND;
    push_frames_split (h, x, T, d, rate, ts, sizes, G_N_ELEMENTS (sizes),
        run == 0 ? 3 : G_MAXUINT, &seg);
    if (run == 0) {
      /* and another one, with a different position */
      seg.position = 41 * GST_MSECOND;
      fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
    }
    fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
    pull_everything (h, run == 0 ? &with : &without);
    gst_harness_teardown (h);
  }

  fail_unless_equals_int (with.bufs->len, without.bufs->len);
  fail_unless_equals_int (with.floats->len, without.floats->len);
  fail_unless (memcmp (with.floats->data, without.floats->data,
          with.floats->len * sizeof (float)) == 0,
      "a position update changed the output");
  for (k = 0; k < with.bufs->len; k++) {
    SattnOutBuf *a = &g_array_index (with.bufs, SattnOutBuf, k);
    SattnOutBuf *b = &g_array_index (without.bufs, SattnOutBuf, k);

    fail_unless_equals_uint64 (a->pts, b->pts);
    fail_unless_equals_uint64 (a->duration, b->duration);
    fail_unless_equals_uint64 (a->offset, b->offset);
    fail_unless_equals_int (a->discont, k == 0);
    fail_unless_equals_int (a->discont, b->discont);
  }
  ref_stream (&c, x, NULL, T, d, TRUE, &ref);
  fail_unless_equals_int (sattn_check_buffers ("position update", &with, 0,
          with.bufs->len, 0, &ref, 0, rate, 1, 0), ref.n_rows);
  ref_out_clear (&ref);
  sattn_output_clear (&with);
  sattn_output_clear (&without);
}

GST_END_TEST;

/* A DEFAULT (0) or BYTES (1) segment, 10 frames, a caps change to twice
 * the rate (drains; continues at the counter), 6 frames, the same segment
 * with only its position moved, 6 frames, EOS, untimestamped.  The
 * position update must change nothing although the segment's TIME
 * conversion differs at the new rate: 22 rows, DISCONT only on the first
 * buffer and the first after the caps change, PTS contiguous from the
 * caps change on. */
GST_START_TEST (test_segment_position_after_rate_change)
{
  const GstFormat fmt = __i__ == 0 ? GST_FORMAT_DEFAULT : GST_FORMAT_BYTES;
  float x[10];
  GstHarness *h;
  GstSegment seg;
  SattnOutput o;
  guint k, n_discont = 0;
  gsize rows = 0;

  sattn_fill_signal (x, G_N_ELEMENTS (x), 93, 1.0f);
  h = sattn_harness_new ("window", 8, "hop", 4, NULL);
  sattn_set_caps (h, 1000, 1);
  gst_segment_init (&seg, fmt);
  seg.start = seg.time = seg.position = fmt == GST_FORMAT_DEFAULT ? 250 : 1000;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  {
    /* caps only (sattn_set_caps would send a TIME segment too) */
    gchar *cs = sattn_caps_string (2000, 1);
    GstCaps *caps = gst_caps_from_string (cs);

    fail_unless (gst_harness_push_event (h, gst_event_new_caps (caps)));
    gst_caps_unref (caps);
    g_free (cs);
  }
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              6 * sizeof (float), GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  seg.position += 40;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              6 * sizeof (float), GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  for (k = 0; k < o.bufs->len; k++) {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, k);

    rows += b->n_floats;
    n_discont += b->discont;
    if (k == 0)
      fail_unless_equals_uint64 (b->pts, 250 * GST_MSECOND);
    if (k > 0 && !b->discont) {
      const SattnOutBuf *p = &g_array_index (o.bufs, SattnOutBuf, k - 1);

      fail_unless_equals_uint64 (b->pts, p->pts + p->duration);
    }
  }
  fail_unless_equals_int (rows, 22);
  fail_unless_equals_int (n_discont, 2);
  /* the last row: frame 6 + 6 - 1 after the caps change at 260 ms */
  {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf,
        o.bufs->len - 1);

    fail_unless_equals_uint64 (b->pts + b->duration, 266 * GST_MSECOND);
  }
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Segments that change the timeline (base, rate, applied rate, start):
 * what is held is drained before the new segment goes downstream, the
 * window restarts (the rest equals a fresh stream's output, DISCONT on
 * its first buffer), and untimestamped input restarts at the new
 * segment's start. */
GST_START_TEST (test_segment_real_change)
{
  const gint rate = 1000;
  const gsize d = 2, T1 = 10, T2 = 14;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  GstHarness *h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  float a[2 * 10], b[2 * 14];
  GstSegment seg;
  GstEvent *ev;
  SattnOutput o;
  RefOut ra, rb;
  guint k, split = 0, n_before = 0;
  gsize fa = 0;
  GstClockTime t0 = 0;

  sattn_fill_signal (a, G_N_ELEMENTS (a), 81, 1.0f);
  sattn_fill_signal (b, G_N_ELEMENTS (b), 82, 1.0f);
  sattn_set_caps (h, rate, (gint) d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (a,
              sizeof a, GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  n_before = gst_harness_buffers_in_queue (h);

  gst_segment_init (&seg, GST_FORMAT_TIME);
  switch (__i__) {
    case 0:
      seg.base = 3 * GST_SECOND;
      break;
    case 1:
      seg.rate = 2.0;
      break;
    case 2:
      seg.applied_rate = 0.5;
      break;
    default:
      seg.start = seg.time = 2 * GST_SECOND;
      t0 = 2 * GST_SECOND;
      break;
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  /* The 2 held frames came out before the new segment. */
  fail_unless_equals_int (gst_harness_buffers_in_queue (h), n_before + 1);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (b,
              sizeof b, GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  for (k = 0; k < o.bufs->len; k++) {
    SattnOutBuf *ob = &g_array_index (o.bufs, SattnOutBuf, k);
    if (k > 0 && ob->discont) {
      split = k;
      break;
    }
    fa += ob->n_floats;
  }
  fail_unless_equals_int (split, n_before + 1);
  ref_stream (&c, a, NULL, T1, d, TRUE, &ra);
  ref_stream (&c, b, NULL, T2, d, TRUE, &rb);
  fail_unless_equals_int (sattn_check_buffers ("old timeline", &o, 0, split,
          0, &ra, 0, rate, 1, 0), T1);
  fail_unless_equals_int (sattn_check_buffers ("new timeline", &o, split,
          o.bufs->len, fa, &rb, 0, rate, 1, t0), T2);
  /* Downstream got the new segment as it was. */
  ev = gst_pad_get_sticky_event (h->sinkpad, GST_EVENT_SEGMENT, 0);
  fail_unless (ev != NULL);
  {
    const GstSegment *got;
    gst_event_parse_segment (ev, &got);
    fail_unless (gst_segment_is_equal (got, &seg));
  }
  gst_event_unref (ev);
  ref_out_clear (&ra);
  ref_out_clear (&rb);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Non-TIME segments go downstream as the TIME segment the output
 * timestamps are in: BYTES and DEFAULT converted with the input rate
 * (start 4000 bytes = 500 periods of 2 floats at 1 kHz = 0.5 s), other
 * formats from 0; untimestamped output starts at that segment's start. */
GST_START_TEST (test_segment_non_time)
{
  static const struct
  {
    GstFormat format;
    guint64 start;
    GstClockTime expect;
  } cases[] = {
    {GST_FORMAT_BYTES, 4000, 500 * GST_MSECOND},
    {GST_FORMAT_DEFAULT, 250, 250 * GST_MSECOND},
    {GST_FORMAT_BUFFERS, 7, 0},
  };
  const gint rate = 1000;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  GstHarness *h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  float x[2 * 12];
  GstSegment seg;
  const GstSegment *got;
  GstEvent *ev;
  SattnOutput o;
  RefOut ref;

  sattn_fill_signal (x, G_N_ELEMENTS (x), 91, 1.0f);
  sattn_set_caps (h, rate, 2);
  gst_segment_init (&seg, cases[__i__].format);
  seg.start = seg.time = seg.position = cases[__i__].start;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  ev = gst_pad_get_sticky_event (h->sinkpad, GST_EVENT_SEGMENT, 0);
  fail_unless (ev != NULL);
  gst_event_parse_segment (ev, &got);
  fail_unless_equals_int (got->format, GST_FORMAT_TIME);
  fail_unless_equals_uint64 (got->start, cases[__i__].expect);
  fail_unless_equals_uint64 (got->time, cases[__i__].expect);
  gst_event_unref (ev);

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, x, NULL, 12, 2, TRUE, &ref);
  fail_unless_equals_int (sattn_check_buffers ("non-TIME segment", &o, 0,
          o.bufs->len, 0, &ref, 0, rate, 1, cases[__i__].expect), 12);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------ caps */

static GstCaps *
audio_caps (gint rate, gint channels)
{
  gchar *s = sattn_caps_string (rate, channels);
  GstCaps *caps = gst_caps_from_string (s);

  g_free (s);
  return caps;
}

/* Whether the sink CAPS query, with these caps as filter, answers
 * anything. */
static gboolean
caps_query_allows (GstPad * sinkpad, gint rate, gint channels)
{
  GstCaps *filter = audio_caps (rate, channels);
  GstCaps *res = gst_pad_query_caps (sinkpad, filter);
  gboolean ok = !gst_caps_is_empty (res);

  gst_caps_unref (res);
  gst_caps_unref (filter);
  return ok;
}

static gboolean
accept_caps (GstPad * sinkpad, gint rate, gint channels)
{
  GstCaps *caps = audio_caps (rate, channels);
  gboolean ok = gst_pad_query_accept_caps (sinkpad, caps);

  gst_caps_unref (caps);
  return ok;
}

static guint
count_errors (GstBus * bus, gchar ** first_text)
{
  GstMessage *msg;
  guint n = 0;

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR)) != NULL) {
    if (n == 0 && first_text != NULL) {
      GError *err = NULL;
      gst_message_parse_error (msg, &err, NULL);
      *first_text = g_strdup (err->message);
      g_clear_error (&err);
    }
    n++;
    gst_message_unref (msg);
  }
  return n;
}

/* In PAUSED/PLAYING the CAPS query and ACCEPT_CAPS refuse what cannot
 * work (with a downstream that takes audio/x-raw only, rates: multiples
 * of frame-size, × hop when pooled; channels filling whole heads) and
 * take what can; a refusal posts one error, with the reason, once for the
 * same caps.  In READY the CAPS query answers the template (properties
 * may still change).  (With a downstream that takes other/tensors every
 * rate works: test-element-tensor.c.) */
GST_START_TEST (test_caps_query)
{
  GstHarness *h = sattn_harness_new ("frame-size", 3, "heads", 2,
      "output", OUT_MEAN, "hop", 4, "window", 8, NULL);
  GstPad *sinkpad = GST_PAD_PEER (h->srcpad);

  gst_harness_set_sink_caps_str (h, "audio/x-raw");
  GstBus *bus = sattn_attach_bus (h);
  GstElement *e;
  gchar *text = NULL;
  GstCaps *all;

  /* rate: multiple of 3 × 4 = 12; channels × 3 a multiple of 2 */
  fail_unless (caps_query_allows (sinkpad, 12000, 2));
  fail_unless (caps_query_allows (sinkpad, 48000, 4));
  fail_if (caps_query_allows (sinkpad, 16000, 2));
  fail_if (caps_query_allows (sinkpad, 12006, 2));
  fail_if (caps_query_allows (sinkpad, 12000, 3));
  all = gst_pad_query_caps (sinkpad, NULL);
  fail_if (gst_caps_is_empty (all));
  gst_caps_unref (all);
  fail_unless_equals_int (count_errors (bus, NULL), 0);

  fail_unless (accept_caps (sinkpad, 12000, 2));
  fail_unless_equals_int (count_errors (bus, NULL), 0);
  fail_if (accept_caps (sinkpad, 16000, 2));
  fail_if (accept_caps (sinkpad, 16000, 2));
  fail_unless_equals_int (count_errors (bus, &text), 1);
  fail_unless (strstr (text, "frame-size=3 does not divide the input rate "
          "of 16000 Hz") != NULL, "%s", text);
  g_free (text);
  text = NULL;
  fail_if (accept_caps (sinkpad, 12000, 3));
  fail_unless_equals_int (count_errors (bus, &text), 1);
  fail_unless (strstr (text, "heads values that work: 1, 3, 9") != NULL,
      "%s", text);
  g_free (text);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);

  /* READY: the template, whatever the properties. */
  e = gst_element_factory_make ("sattn", NULL);
  g_object_set (e, "frame-size", 3, NULL);
  fail_unless_equals_int (gst_element_set_state (e, GST_STATE_READY),
      GST_STATE_CHANGE_SUCCESS);
  sinkpad = gst_element_get_static_pad (e, "sink");
  fail_unless (caps_query_allows (sinkpad, 16000, 1));
  gst_object_unref (sinkpad);
  gst_element_set_state (e, GST_STATE_NULL);
  gst_object_unref (e);
}

GST_END_TEST;

/* Runs desc to the first error or EOS (at most 20 s); returns the
 * number of ERROR messages on the bus once the pipeline is back in NULL,
 * the first one's text and the name of the element that posted it. */
static guint
run_pipeline (const gchar * desc, gchar ** first_text, gchar ** source)
{
  GError *err = NULL;
  GstElement *pipe = gst_parse_launch (desc, &err);
  GstBus *bus;
  GstMessage *msg;
  guint n = 0;

  fail_unless (pipe != NULL && err == NULL, "%s: %s", desc,
      err ? err->message : "");
  bus = gst_element_get_bus (pipe);
  gst_element_set_state (pipe, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 20 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "HANG: %s: no error and no EOS within 20 s", desc);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *e = NULL;

    gst_message_parse_error (msg, &e, NULL);
    *first_text = g_strdup (e->message);
    *source = gst_object_get_name (GST_MESSAGE_SRC (msg));
    g_clear_error (&e);
    n = 1;
  }
  gst_message_unref (msg);
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  n += count_errors (bus, NULL);
  gst_object_unref (bus);
  gst_object_unref (pipe);
  return n;
}

typedef struct
{
  const gchar *props;
  gint rate, channels;
  const gchar *expect;
} ImpossiblePipe;

static const ImpossiblePipe impossible_pipes[] = {
  {"frame-size=3", 16000, 1, "frame-size values that work: 1, 2, 4, 5, 8"},
  {"heads=2", 16000, 3, "heads values that work: 1, 3"},
  {"window=8 hop=20", 16000, 1, "hop must be between 1 and the window"},
  {"output=mean window=8 hop=3", 1000, 1, "hop values that work with "
        "window=8: 1, 2, 4, 5, 8"},
  {"scale=1e-50", 16000, 1, "below the smallest normal float"},
  {"heads=2 head-dim=3", 16000, 8, "which identity projections (no "
        "weights file) need"},
  {"heads=2 value-dim=3", 16000, 8, "use value-dim=0"},
  {"heads=3 value-dim=2", 16000, 8, "heads=3 x value-dim=2 does not equal "
        "d_model=8"},
};

/* Caps that cannot work fail the pipeline with exactly one ERROR message,
 * from sattn, saying why; 200 runs, each bounded in time. */
GST_START_TEST (test_impossible_pipelines)
{
  const guint runs = 200;
  guint r;

  for (r = 0; r < runs; r++) {
    const ImpossiblePipe *t =
        &impossible_pipes[r % G_N_ELEMENTS (impossible_pipes)];
    /* Downstream takes audio/x-raw only: with other/tensors any rate
     * works (test-element-tensor.c). */
    gchar *desc = g_strdup_printf ("audiotestsrc num-buffers=10 ! "
        "audio/x-raw,format=F32LE,channels=%d,rate=%d ! sattn name=s %s ! "
        "audio/x-raw ! fakesink", t->channels, t->rate, t->props);
    gchar *text = NULL, *source = NULL;
    guint n = run_pipeline (desc, &text, &source);

    fail_unless (text != NULL, "%s: no error", desc);
    fail_unless_equals_int (n, 1);
    fail_unless_equals_string (source, "s");
    fail_unless (strstr (text, t->expect) != NULL, "%s: '%s' lacks '%s'",
        desc, text, t->expect);
    if (r < G_N_ELEMENTS (impossible_pipes))
      g_print ("%s\n  -> %s\n", t->props, text);
    g_free (text);
    g_free (source);
    g_free (desc);
  }
}

GST_END_TEST;

/* Downstream refusing the output caps: sattn's error comes first and
 * names the caps it offered, why, and what downstream accepts; sattn
 * posts it once. */
GST_START_TEST (test_downstream_refuses)
{
  const gchar *desc = "audiotestsrc num-buffers=10 ! audio/x-raw,format=F32LE,"
      "channels=2,rate=8000 ! sattn name=s output=window window=4 hop=2 ! "
      "audio/x-raw,channels=3 ! fakesink";
  gchar *text = NULL, *source = NULL;
  guint n = run_pipeline (desc, &text, &source);

  fail_unless (text != NULL);
  g_print ("downstream refuses:\n  -> %s\n", text);
  fail_unless_equals_string (source, "s");
  fail_unless (strstr (text, "Downstream refused the output caps") != NULL,
      "%s", text);
  fail_unless (strstr (text, "rate=(int)4000, channels=(int)8") != NULL,
      "%s", text);
  fail_unless (strstr (text, "output=window") != NULL, "%s", text);
  fail_unless (strstr (text, "downstream accepts audio/x-raw, "
          "channels=(int)3") != NULL, "%s", text);
  /* Upstream's own not-negotiated error may follow; sattn's is one. */
  fail_unless (n >= 1 && n <= 2, "%u errors", n);
  g_free (text);
  g_free (source);
}

GST_END_TEST;

/* Rows of 64 or more values never reach an audio converter (audioconvert
 * and audioresample assert on 64 channels and crash): the pipeline fails
 * with one error from sattn that names the limit and the ways out, at
 * READY -> PAUSED for identity projections, at the caps event with a
 * weights file (whose d_out is known once it is loaded).  Narrower rows,
 * a capsfilter that asks for the width, and a downstream that takes any
 * caps still run to EOS. */
static const struct
{
  const gchar *props, *downstream;
  gint channels;
  gboolean works;
} wide_rows[] = {
  {"output=window window=64 hop=64", "audioconvert ! fakesink", 2, FALSE},
  {"output=window window=64 hop=64", "queue ! audioresample ! fakesink", 2,
      FALSE},
  {"output=frames", "audioconvert ! fakesink", 64, FALSE},
  {"weights=e16_h2_nobias.safetensors output=window window=4 hop=4",
      "audioconvert ! fakesink", 16, FALSE},
  {"output=window window=63 hop=1", "audioconvert ! fakesink", 1, TRUE},
  {"output=frames", "audioconvert ! fakesink", 63, TRUE},
  {"output=window window=64 hop=64", "audio/x-raw,channels=128 ! level ! "
        "fakesink", 2, TRUE},
  {"output=window window=64 hop=64", "fakesink", 2, TRUE},
};

GST_START_TEST (test_wide_rows_audioconvert)
{
  const gchar *root = g_getenv ("SATTN_SOURCE_ROOT");
  gchar *props, *desc, *text = NULL, *source = NULL;
  guint n;

  fail_unless (root != NULL, "SATTN_SOURCE_ROOT is not set");
  props = g_strdup (wide_rows[__i__].props);
  if (g_str_has_prefix (props, "weights=")) {
    gchar *p = g_strdup_printf ("weights=%s/tests/data/%s", root,
        props + strlen ("weights="));

    g_free (props);
    props = p;
  }
  desc = g_strdup_printf ("audiotestsrc num-buffers=5 ! audio/x-raw,"
      "format=F32LE,channels=%d,rate=16000 ! sattn name=s %s ! %s",
      wide_rows[__i__].channels, props, wide_rows[__i__].downstream);
  n = run_pipeline (desc, &text, &source);
  if (wide_rows[__i__].works) {
    fail_unless (text == NULL, "%s: %s", desc, text);
    fail_unless_equals_int (n, 0);
  } else {
    fail_unless (text != NULL, "%s: no error", desc);
    g_print ("%s\n  -> %s\n", desc, text);
    fail_unless_equals_int (n, 1);
    fail_unless_equals_string (source, "s");
    fail_unless (strstr (text, "more than the 63 that GStreamer's audio "
            "converter") != NULL, "%s", text);
    fail_unless (strstr (text, "other/tensors") != NULL, "%s", text);
    fail_unless (strstr (text, "capsfilter 'audio/x-raw,channels=") != NULL,
        "%s", text);
  }
  g_free (text);
  g_free (source);
  g_free (desc);
  g_free (props);
}

GST_END_TEST;

/* ------------------------------------------------------------ messages */

static gchar *
fixture_path (const gchar * name)
{
  const gchar *root = g_getenv ("SATTN_SOURCE_ROOT");

  fail_unless (root != NULL, "SATTN_SOURCE_ROOT is not set");
  return g_build_filename (root, "tests", "data", name, NULL);
}

/* The weights file's messages say where a number comes from: checked
 * before caps (heads vs the file's metadata), against the stream (d_model
 * from channels × frame-size), head-dim with weights (the file's
 * projection sizes, not identity projections). */
GST_START_TEST (test_weights_messages)
{
  static const struct
  {
    const gchar *props;
    gint channels;
    const gchar *expect[2];
    const gchar *absent;
  } cases[] = {
    {"heads=3", 16, {"does not fit the element's properties",
            "heads = 3 but the module was exported with num_heads = 2"},
        "stream"},
    {"heads=2", 8, {"does not fit the stream, whose frames have d_model=8 "
                "values", "has shape [48, 16]"}, NULL},
    {"heads=2 head-dim=4", 16, {"heads = 2 x head_dim = 4 query/key values",
            "have 16"}, "identity"},
    {"value-dim=3", 16, {"heads = 2 x value_dim = 3 value values",
            "have 16"}, "identity"},
  };
  gchar *path = fixture_path ("e16_h2_nobias.safetensors");
  gchar *desc = g_strdup_printf ("audiotestsrc num-buffers=5 ! audio/x-raw,"
      "format=F32LE,channels=%d,rate=16000 ! sattn name=s weights=\"%s\" %s ! "
      "fakesink", cases[__i__].channels, path, cases[__i__].props);
  gchar *text = NULL, *source = NULL;
  guint n = run_pipeline (desc, &text, &source), k;

  fail_unless (text != NULL);
  g_print ("%s\n  -> %s\n", cases[__i__].props, text);
  fail_unless_equals_int (n, 1);
  fail_unless_equals_string (source, "s");
  for (k = 0; k < 2; k++)
    fail_unless (strstr (text, cases[__i__].expect[k]) != NULL, "'%s' "
        "lacks '%s'", text, cases[__i__].expect[k]);
  if (cases[__i__].absent)
    fail_unless (strstr (text, cases[__i__].absent) == NULL, "%s", text);
  g_free (text);
  g_free (source);
  g_free (desc);
  g_free (path);
}

GST_END_TEST;

/* scale: below FLT_MIN (1e-50 rounds to 0, 1e-40 is subnormal) refused
 * with one error, also in a process whose threads treat denormals as zero
 * (MXCSR DAZ and FTZ: loading GStreamer's soundtouch plugin sets them;
 * float comparisons then see a subnormal scale as 0, the default); the
 * smallest normal values and above honoured (the output equals the
 * reference at that scale, not at the default). */
GST_START_TEST (test_scale_tiny)
{
  static const gdouble refused[] = { 1e-50, 1e-40, 1.1e-38 };
  static const gdouble honoured[] = { 1.2e-38, 1e-30 };
  const gint rate = 1000;
  const gsize d = 4, T = 16;
  float x[4 * 16];
  guint k;

  sattn_fill_signal (x, G_N_ELEMENTS (x), 95, 50.0f);
  for (k = 0; k < 2 * G_N_ELEMENTS (refused); k++) {
#ifdef __SSE__
    /* The second round with denormals treated as zero; threads the
     * pipeline creates inherit it. */
    const guint csr = _mm_getcsr ();
    if (k >= G_N_ELEMENTS (refused))
      _mm_setcsr (csr | 0x8040);
#else
    if (k >= G_N_ELEMENTS (refused))
      break;
#endif
    /* Whatever the caps: the state change fails, with one error. */
    gchar *desc = g_strdup_printf ("audiotestsrc num-buffers=5 ! audio/x-raw,"
        "format=F32LE,channels=4,rate=1000 ! sattn name=s scale=%g ! "
        "fakesink", refused[k % G_N_ELEMENTS (refused)]);
    gchar *text = NULL, *source = NULL;

    fail_unless_equals_int (run_pipeline (desc, &text, &source), 1);
    fail_unless (text != NULL);
    fail_unless_equals_string (source, "s");
    fail_unless (strstr (text, "below the smallest normal float") != NULL,
        "%s", text);
    fail_unless (strstr (text, "use scale=0 for the default") != NULL, "%s",
        text);
    /* the value the core saw, not 0 */
    fail_unless (strstr (text, "scale=0 is") == NULL, "%s", text);
    g_free (text);
    g_free (source);
    g_free (desc);
#ifdef __SSE__
    _mm_setcsr (csr);
#endif
  }
  for (k = 0; k < G_N_ELEMENTS (honoured); k++) {
    RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
    GstHarness *h;
    SattnOutput o;
    RefOut ref, def;
    gsize i;
    double diff = 0;

    c.scale = (gdouble) (float) honoured[k];
    h = sattn_harness_new ("window", c.window, "hop", c.hop, "scale",
        honoured[k], NULL);
    sattn_set_caps (h, rate, (gint) d);
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
                sizeof x, 0, 0)), GST_FLOW_OK);
    fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
    sattn_output_init (&o);
    sattn_output_pull_all (h, &o);
    ref_stream (&c, x, NULL, T, d, TRUE, &ref);
    fail_unless_equals_int (sattn_check_buffers ("tiny scale", &o, 0,
            o.bufs->len, 0, &ref, 0, rate, 1, 0), T);
    /* and it is not the default scale's output */
    c.scale = 0.0;
    ref_stream (&c, x, NULL, T, d, TRUE, &def);
    for (i = 0; i < ref.n_rows * ref.row_floats; i++)
      diff = MAX (diff, fabs (ref.rows[i] - def.rows[i]));
    fail_unless (diff > 1.0, "scale %g gives the default's output",
        honoured[k]);
    ref_out_clear (&ref);
    ref_out_clear (&def);
    sattn_output_clear (&o);
    gst_harness_teardown (h);
  }
}

GST_END_TEST;

/* Identity projections with head-dim or value-dim set fix d_model at heads
 * x that size: the caps query offers that channel count only, so an
 * upstream free to choose picks it and the pipeline runs to EOS. */
GST_START_TEST (test_dim_picks_channels)
{
  static const gchar *props[] = { "heads=2 head-dim=3", "heads=2 value-dim=3",
    "heads=3 head-dim=2 value-dim=2"
  };
  guint k;

  for (k = 0; k < G_N_ELEMENTS (props); k++) {
    gchar *desc = g_strdup_printf ("audiotestsrc num-buffers=3 ! "
        "audio/x-raw,format=F32LE ! sattn name=s %s ! fakesink", props[k]);
    gchar *text = NULL, *source = NULL;

    fail_unless_equals_int (run_pipeline (desc, &text, &source), 0);
    fail_unless (text == NULL, "%s: %s", desc, text);
    g_free (desc);
  }
}

GST_END_TEST;

/* ------------------------------------------------------------ properties */

static guint
count_warnings (GstBus * bus, const gchar * name)
{
  GstMessage *msg;
  guint n = 0;

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING)) != NULL) {
    GError *err = NULL;

    gst_message_parse_warning (msg, &err, NULL);
    fail_unless (strstr (err->message, "takes effect at the next READY") !=
        NULL, "%s", err->message);
    if (strstr (err->message, name) != NULL)
      n++;
    g_clear_error (&err);
    gst_message_unref (msg);
  }
  return n;
}

/* Geometry set while PLAYING: one warning per property and run (not per
 * set), the value in use unchanged until READY, where the last value
 * set takes effect; a new run warns again. */
GST_START_TEST (test_property_while_running)
{
  GstHarness *h = sattn_harness_new ("window", 16, "hop", 4, NULL);
  GstBus *bus = sattn_attach_bus (h);
  guint w, hop;
  gint i;

  for (i = 0; i < 5; i++)
    g_object_set (h->element, "window", 32 + i, NULL);
  g_object_set (h->element, "hop", 8, "invalid-frames", INV_ZERO, NULL);
  g_object_get (h->element, "window", &w, "hop", &hop, NULL);
  fail_unless_equals_int (w, 16);
  fail_unless_equals_int (hop, 4);
  fail_unless_equals_int (count_warnings (bus, "'window'"), 1);
  g_object_set (h->element, "hop", 2, NULL);
  fail_unless_equals_int (count_warnings (bus, "'hop'"), 0);

  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  g_object_get (h->element, "window", &w, "hop", &hop, NULL);
  fail_unless_equals_int (w, 36);
  fail_unless_equals_int (hop, 2);

  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_PLAYING), GST_STATE_CHANGE_SUCCESS);
  g_object_set (h->element, "window", 8, NULL);
  fail_unless_equals_int (count_warnings (bus, "'window'"), 1);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

static Suite *
sattn_events_suite (void)
{
  Suite *s = suite_create ("sattn-events");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  sattn_tcase_set_timeout (tc, 240);
  tcase_add_loop_test (tc, test_segment_position_update, 0, 4);
  tcase_add_loop_test (tc, test_segment_real_change, 0, 4);
  tcase_add_loop_test (tc, test_segment_position_after_rate_change, 0, 2);
  tcase_add_loop_test (tc, test_segment_non_time, 0, 3);
  tcase_add_test (tc, test_caps_query);
  tcase_add_test (tc, test_impossible_pipelines);
  tcase_add_test (tc, test_downstream_refuses);
  tcase_add_loop_test (tc, test_wide_rows_audioconvert, 0,
      G_N_ELEMENTS (wide_rows));
  tcase_add_loop_test (tc, test_weights_messages, 0, 4);
  tcase_add_test (tc, test_scale_tiny);
  tcase_add_test (tc, test_dim_picks_channels);
  tcase_add_test (tc, test_property_while_running);
  return s;
}

GST_CHECK_MAIN (sattn_events);
