/* sattn element: error paths, LATENCY, properties (defaults, READY-only
 * changes, stress from other threads) and a real pipeline.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <math.h>
#include <string.h>

/* A buffer before any caps: NOT_NEGOTIATED and an element error saying so. */
GST_START_TEST (test_buffer_before_caps)
{
  GstHarness *h = sattn_harness_new ("window", 64, NULL);
  GstBus *bus = sattn_attach_bus (h);
  float x[16] = { 0, };
  GstMessage *msg;
  GError *err = NULL;
  GstSegment seg;

  /* stream-start (from the harness) and a segment, but no caps. */
  gst_segment_init (&seg, GST_FORMAT_TIME);
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));

  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 0, 0)), GST_FLOW_NOT_NEGOTIATED);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (msg != NULL);
  gst_message_parse_error (msg, &err, NULL);
  fail_unless (g_error_matches (err, GST_CORE_ERROR,
          GST_CORE_ERROR_NEGOTIATION));
  fail_unless (strstr (err->message, "caps") != NULL, "%s", err->message);
  g_clear_error (&err);
  gst_message_unref (msg);
  fail_unless (gst_harness_try_pull (h) == NULL);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

typedef struct
{
  const gchar *props;           /* name=value pairs, space separated */
  gint rate, channels;
  const gchar *expect;          /* substring of the error message */
  gboolean audio_only;          /* downstream takes audio/x-raw only */
} Impossible;

/* A rate that does not give a whole output rate is only impossible when
 * downstream takes no other/tensors (test-element-tensor.c has the same
 * settings working with tensor output). */
static const Impossible impossible[] = {
  {"frame-size=3", 16000, 2, "frame-size values that work: ", TRUE},
  {"output=mean hop=3 window=8", 1000, 2, "hop values that work with "
        "window=8: 1, 2, 4, 5, 8", TRUE},
  {"output=window hop=7 frame-size=2 window=16", 1000, 1,
      "hop values that work with window=16: ", TRUE},
  {"heads=3", 1000, 4, "heads values that work: 1, 2, 4", FALSE},
  {"heads=2 head-dim=3", 1000, 8, "use head-dim=0", FALSE},
  {"heads=2 value-dim=3", 1000, 8, "use value-dim=0", FALSE},
};

/* Impossible combinations fail negotiation with an error naming values
 * that work; data after that is NOT_NEGOTIATED. */
GST_START_TEST (test_impossible_properties)
{
  const Impossible *t = &impossible[__i__];
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  gchar **kv = g_strsplit (t->props, " ", -1), **p, *text;
  GstHarness *h;
  GstBus *bus;
  float x[64] = { 0, };

  for (p = kv; *p; p++) {
    gchar **nv = g_strsplit (*p, "=", 2);
    gst_util_set_object_arg (G_OBJECT (e), nv[0], nv[1]);
    g_strfreev (nv);
  }
  g_strfreev (kv);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  if (t->audio_only)
    gst_harness_set_sink_caps_str (h, "audio/x-raw");
  bus = sattn_attach_bus (h);

  /* The caps event is refused (a sticky event's push still reports
   * success upstream); the error tells what would work. */
  sattn_set_caps (h, t->rate, t->channels);
  fail_if (gst_pad_has_current_caps (h->sinkpad));
  text = sattn_pop_error (bus);
  fail_unless (strstr (text, t->expect) != NULL, "'%s' does not contain "
      "'%s'", text, t->expect);
  g_free (text);

  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 0, 0)), GST_FLOW_NOT_NEGOTIATED);
  fail_unless (gst_harness_try_pull (h) == NULL);
  /* The refused caps are re-sent with the buffer: refused again, but the
   * error is posted only once. */
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR) == NULL,
      "the same refusal was posted twice");

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* A caps change to a format the properties cannot handle is refused
 * (by ACCEPT_CAPS, before the caps event) with one error that names values
 * that work, and data in that format is NOT_NEGOTIATED.  The stream stays
 * as it was: when the old caps come back, window and timeline continue,
 * so the output equals that of the stream without the refused caps (one
 * DISCONT at the start, contiguous PTS), timestamped (0) or not (1). */
GST_START_TEST (test_caps_refused_then_accepted)
{
  const gint rate = 1000;
  RefConfig c = { 8, 4, 2, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  GstHarness *h = sattn_harness_new ("window", c.window, "hop", c.hop,
      "heads", c.heads, NULL);
  GstBus *bus = sattn_attach_bus (h);
  const gboolean ts = __i__ == 0;
  float x[2 * 20];
  gchar *text;
  SattnOutput o;
  RefOut ref;

  sattn_fill_signal (x, G_N_ELEMENTS (x), 5, 1.0f);
  sattn_set_caps (h, rate, 2);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              6 * 2 * sizeof (float), 0, 0)), GST_FLOW_OK);
  /* heads=2 cannot split 3 channels. */
  sattn_set_caps (h, rate, 3);
  text = sattn_pop_error (bus);
  fail_unless (strstr (text, "heads values that work: 1, 3") != NULL, "%s",
      text);
  g_free (text);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              3 * 3 * sizeof (float), ts ? 6 * GST_MSECOND :
              GST_CLOCK_TIME_NONE, 0)), GST_FLOW_NOT_NEGOTIATED);
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR) == NULL,
      "the same refusal was posted twice");

  /* The old caps again: the stream goes on from frame 6. */
  sattn_set_caps (h, rate, 2);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + 12,
              14 * 2 * sizeof (float), ts ? 6 * GST_MSECOND :
              GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR) == NULL);

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, x, NULL, 20, 2, TRUE, &ref);
  fail_unless_equals_int (o.floats->len, 20 * 2);
  fail_unless_equals_int (sattn_check_buffers ("refused, then accepted", &o,
          0, o.bufs->len, 0, &ref, 0, rate, 1, 0), 20);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* invalid-frames=error: GST_FLOW_ERROR and an error naming the frame's
 * timestamp; the frames before it still come out. */
GST_START_TEST (test_invalid_frames_error)
{
  GstHarness *h = sattn_harness_new ("window", 4, "hop", 2,
      "invalid-frames", INV_ERROR, NULL);
  GstBus *bus = sattn_attach_bus (h);
  float x[2 * 12];
  gchar *text;
  guint n_rows = 0;
  GstBuffer *out;

  sattn_set_caps (h, 1000, 2);
  sattn_fill_signal (x, G_N_ELEMENTS (x), 3, 1.0f);
  x[2 * 5 + 1] = NAN;
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 0, 0)), GST_FLOW_ERROR);
  text = sattn_pop_error (bus);
  fail_unless (strstr (text, "0:00:00.005000000") != NULL, "%s", text);
  fail_unless (strstr (text, "NaN") != NULL, "%s", text);
  g_free (text);
  while ((out = gst_harness_try_pull (h)) != NULL) {
    n_rows += gst_buffer_get_size (out) / (2 * sizeof (float));
    fail_unless (GST_BUFFER_PTS (out) < 5 * GST_MSECOND);
    gst_buffer_unref (out);
  }
  /* Frames 0-3 complete two hops before the bad frame. */
  fail_unless_equals_int (n_rows, 4);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* LATENCY = upstream + held back: hop frames, or the window with
 * start=wait, in frames and pooled modes. */
GST_START_TEST (test_latency)
{
  static const struct
  {
    gint output, start;
    guint held;                 /* frames */
  } cases[] = {
    {OUT_FRAMES, START_PAD, 4}, {OUT_FRAMES, START_WAIT, 16},
    {OUT_MEAN, START_PAD, 4}, {OUT_WINDOW, START_WAIT, 16},
    {OUT_LAST, START_PAD, 4},
  };
  GstHarness *h;
  GstQuery *q;
  gboolean live;
  GstClockTime min, max, expect;

  /* rate 16000, frame-size 4: a frame is 250 us. */
  h = sattn_harness_new ("window", 16, "hop", 4, "frame-size", 4, "output",
      cases[__i__].output, "start", cases[__i__].start, NULL);
  gst_harness_set_upstream_latency (h, 10 * GST_MSECOND);
  sattn_set_caps (h, 16000, 2);
  expect = 10 * GST_MSECOND + gst_util_uint64_scale (cases[__i__].held * 4,
      GST_SECOND, 16000);

  fail_unless_equals_uint64 (gst_harness_query_latency (h), expect);
  q = gst_query_new_latency ();
  fail_unless (gst_pad_peer_query (h->sinkpad, q));
  gst_query_parse_latency (q, &live, &min, &max);
  fail_unless (live);
  fail_unless_equals_uint64 (min, expect);
  fail_unless_equals_uint64 (max, GST_CLOCK_TIME_NONE);
  gst_query_unref (q);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Properties exist with the documented ranges and defaults. */
GST_START_TEST (test_property_defaults)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GObjectClass *k;
  static const struct
  {
    const gchar *name;
    guint def, min;
  } uints[] = {
    {"window", 64, 1}, {"hop", 16, 1}, {"frame-size", 1, 1},
    {"heads", 0, 0}, {"head-dim", 0, 0}, {"lookback", 0, 0},
  };
  static const struct
  {
    const gchar *name, *def;
    const gchar *nicks[5];
  } enums[] = {
    {"output", "frames", {"frames", "window", "mean", "last", NULL}},
    {"start", "pad", {"pad", "wait", NULL}},
    {"invalid-frames", "mask", {"mask", "zero", "error", NULL}},
  };
  GParamSpec *ps;
  guint i, j;

  fail_unless (e != NULL, "the sattn element is not available");
  k = G_OBJECT_GET_CLASS (e);
  for (i = 0; i < G_N_ELEMENTS (uints); i++) {
    GParamSpecUInt *pu;

    ps = g_object_class_find_property (k, uints[i].name);
    fail_unless (ps != NULL && G_IS_PARAM_SPEC_UINT (ps), "%s", uints[i].name);
    pu = G_PARAM_SPEC_UINT (ps);
    fail_unless_equals_int (pu->default_value, uints[i].def);
    fail_unless_equals_int (pu->minimum, uints[i].min);
    fail_unless (ps->flags & GST_PARAM_MUTABLE_READY);
    fail_unless (g_param_spec_get_blurb (ps) != NULL
        && strlen (g_param_spec_get_blurb (ps)) > 20);
  }
  for (i = 0; i < G_N_ELEMENTS (enums); i++) {
    GParamSpecEnum *pe;

    ps = g_object_class_find_property (k, enums[i].name);
    fail_unless (ps != NULL && G_IS_PARAM_SPEC_ENUM (ps), "%s", enums[i].name);
    pe = G_PARAM_SPEC_ENUM (ps);
    fail_unless_equals_string (g_enum_get_value (pe->enum_class,
            pe->default_value)->value_nick, enums[i].def);
    for (j = 0; enums[i].nicks[j]; j++) {
      GEnumValue *v = g_enum_get_value_by_nick (pe->enum_class,
          enums[i].nicks[j]);
      fail_unless (v != NULL, "%s", enums[i].nicks[j]);
      fail_unless_equals_int (v->value, j);
    }
  }
  ps = g_object_class_find_property (k, "scale");
  fail_unless (ps != NULL && G_IS_PARAM_SPEC_DOUBLE (ps));
  fail_unless (G_PARAM_SPEC_DOUBLE (ps)->default_value == 0.0);
  fail_unless (G_PARAM_SPEC_DOUBLE (ps)->minimum == 0.0);
  ps = g_object_class_find_property (k, "causal");
  fail_unless (ps != NULL && G_IS_PARAM_SPEC_BOOLEAN (ps));
  fail_unless (!G_PARAM_SPEC_BOOLEAN (ps)->default_value);
  ps = g_object_class_find_property (k, "threads");
  fail_unless (ps != NULL && G_IS_PARAM_SPEC_INT (ps));
  fail_unless_equals_int (G_PARAM_SPEC_INT (ps)->default_value, 1);
  ps = g_object_class_find_property (k, "invalid-frames");
  fail_unless (ps->flags & GST_PARAM_MUTABLE_PLAYING);
  gst_object_unref (e);
}

GST_END_TEST;

/* Geometry applies in READY and is refused (not applied) while playing;
 * invalid-frames changes while playing. */
GST_START_TEST (test_property_states)
{
  GstHarness *h = sattn_harness_new ("window", 16, NULL);
  guint w;
  gint inv;

  /* The harness plays the element. */
  g_object_set (h->element, "window", 32, "invalid-frames", INV_ZERO, NULL);
  g_object_get (h->element, "window", &w, "invalid-frames", &inv, NULL);
  fail_unless_equals_int (w, 16);
  fail_unless_equals_int (inv, INV_ZERO);

  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  g_object_set (h->element, "window", 32, NULL);
  g_object_get (h->element, "window", &w, NULL);
  fail_unless_equals_int (w, 32);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Properties set from other threads while buffers flow: no crash, no
 * warning, geometry untouched, output finite. */
GST_START_TEST (test_property_stress)
{
  GstHarness *h = sattn_harness_new ("window", 16, "hop", 4, "heads", 2,
      NULL);
  GstHarnessThread *t[5];
  GValue v_window = G_VALUE_INIT, v_hop = G_VALUE_INIT;
  GValue v_zero = G_VALUE_INIT, v_mask = G_VALUE_INIT, v_causal = G_VALUE_INIT;
  float x[4 * 100];
  guint i, w, hop, rows = 0;
  GstBuffer *out;

  sattn_set_caps (h, 16000, 4);
  sattn_fill_signal (x, G_N_ELEMENTS (x), 9, 1.0f);
  x[4 * 10] = NAN;
  x[4 * 55 + 3] = INFINITY;

  g_value_init (&v_window, G_TYPE_UINT);
  g_value_set_uint (&v_window, 8);
  g_value_init (&v_hop, G_TYPE_UINT);
  g_value_set_uint (&v_hop, 2);
  g_value_init (&v_causal, G_TYPE_BOOLEAN);
  g_value_set_boolean (&v_causal, TRUE);
  g_value_init (&v_zero, G_TYPE_INT);
  g_value_set_int (&v_zero, INV_ZERO);
  g_value_init (&v_mask, G_TYPE_INT);
  g_value_set_int (&v_mask, INV_MASK);
  {
    /* Enum properties take enum-typed values. */
    GParamSpec *ps = g_object_class_find_property (G_OBJECT_GET_CLASS
        (h->element), "invalid-frames");
    g_value_unset (&v_zero);
    g_value_unset (&v_mask);
    g_value_init (&v_zero, ps->value_type);
    g_value_set_enum (&v_zero, INV_ZERO);
    g_value_init (&v_mask, ps->value_type);
    g_value_set_enum (&v_mask, INV_MASK);
  }

  t[0] = gst_harness_stress_property_start_full (h, "window", &v_window, 50);
  t[1] = gst_harness_stress_property_start_full (h, "hop", &v_hop, 50);
  t[2] = gst_harness_stress_property_start_full (h, "causal", &v_causal, 50);
  t[3] = gst_harness_stress_property_start_full (h, "invalid-frames",
      &v_zero, 50);
  t[4] = gst_harness_stress_property_start_full (h, "invalid-frames",
      &v_mask, 50);

  for (i = 0; i < 300; i++) {
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
                sizeof (x) - (i % 7) * 4, GST_CLOCK_TIME_NONE, 0)),
        GST_FLOW_OK);
    while ((out = gst_harness_try_pull (h)) != NULL) {
      GstMapInfo map;
      gsize j;

      gst_buffer_map (out, &map, GST_MAP_READ);
      for (j = 0; j < map.size / sizeof (float); j++)
        fail_unless (isfinite (((float *) map.data)[j]));
      rows += map.size / (4 * sizeof (float));
      gst_buffer_unmap (out, &map);
      gst_buffer_unref (out);
    }
  }
  for (i = 0; i < G_N_ELEMENTS (t); i++)
    fail_unless (gst_harness_stress_thread_stop (t[i]) > 0);

  g_object_get (h->element, "window", &w, "hop", &hop, NULL);
  fail_unless_equals_int (w, 16);
  fail_unless_equals_int (hop, 4);
  fail_unless (rows > 0);

  g_value_unset (&v_window);
  g_value_unset (&v_hop);
  g_value_unset (&v_causal);
  g_value_unset (&v_zero);
  g_value_unset (&v_mask);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* A real pipeline built by gst_parse_launch reaches EOS. */
GST_START_TEST (test_pipeline)
{
  static const gchar *lines[] = {
    "audiotestsrc num-buffers=40 ! audio/x-raw,format=F32LE,channels=8,"
        "rate=16000 ! sattn ! fakesink",
    "audiotestsrc wave=pink-noise num-buffers=20 ! audio/x-raw,format=F32LE,"
        "channels=4,rate=16000 ! sattn frame-size=16 window=32 hop=8 heads=4 "
        "causal=true output=mean ! fakesink",
    "audiotestsrc num-buffers=20 ! audio/x-raw,format=F32LE,channels=2,"
        "rate=8000 ! sattn window=16 hop=4 output=window start=wait ! "
        "audioconvert ! fakesink",
  };
  GError *err = NULL;
  GstElement *pipe = gst_parse_launch (lines[__i__], &err);
  GstBus *bus;
  GstMessage *msg;

  fail_unless (pipe != NULL && err == NULL, "%s", err ? err->message : "");
  bus = gst_element_get_bus (pipe);
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_PLAYING),
      GST_STATE_CHANGE_ASYNC);
  msg = gst_bus_timed_pop_filtered (bus, 30 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "HANG: neither EOS nor an error within 30 s");
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    gchar *dbg = NULL;
    gst_message_parse_error (msg, &err, &dbg);
    fail ("error: %s (%s)", err->message, dbg);
  }
  gst_message_unref (msg);
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
  gst_object_unref (pipe);
}

GST_END_TEST;

static Suite *
sattn_errors_suite (void)
{
  Suite *s = suite_create ("sattn-errors");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_buffer_before_caps);
  tcase_add_loop_test (tc, test_impossible_properties, 0,
      G_N_ELEMENTS (impossible));
  tcase_add_loop_test (tc, test_caps_refused_then_accepted, 0, 2);
  tcase_add_test (tc, test_invalid_frames_error);
  tcase_add_loop_test (tc, test_latency, 0, 5);
  tcase_add_test (tc, test_property_defaults);
  tcase_add_test (tc, test_property_states);
  tcase_add_test (tc, test_property_stress);
  tcase_add_loop_test (tc, test_pipeline, 0, 3);
  return s;
}

GST_CHECK_MAIN (sattn_errors);
