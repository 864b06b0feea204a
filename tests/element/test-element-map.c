/* sattn element: the attn request pad (live attention map).
 *
 * Caps (GRAY8, width = window + extra keys, height = query rows per
 * window, framerate = windows per second), events in order (stream-start,
 * caps, segment, ..., EOS), one frame per window with the features'
 * timestamps, and pixels equal to the documented mapping of the float64
 * reference weights: row i of the image is the window's query row
 * rows - height + i, pixel = floor (255 w / max_row w + 1/2), within 1 for
 * float32 rounding; rows are 4-byte aligned with zero padding.  Without
 * the pad no weights are kept; with it a launch line writing PNGs runs
 * to EOS.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "obs-ref.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static GstClockTime
frame_time (guint64 f, guint fs, gint rate)
{
  return gst_util_uint64_scale (f * fs, GST_SECOND, rate);
}

/* Pull events from the map harness until EOS; returns their types in
 * order as a string ("stream-start caps segment eos"). */
static gchar *
pull_events_until_eos (GstHarness * hm)
{
  GString *log = g_string_new (NULL);
  GstEvent *ev;
  gboolean eos = FALSE;

  while (!eos && (ev = gst_harness_pull_event (hm)) != NULL) {
    eos = GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
    g_string_append_printf (log, "%s%s", log->len ? " " : "",
        GST_EVENT_TYPE_NAME (ev));
    gst_event_unref (ev);
  }
  fail_unless (eos, "no EOS on the attn pad (events: %s)", log->str);
  return g_string_free (log, FALSE);
}

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

GST_START_TEST (test_map_caps_and_events)
{
  const gint rate = 8000, channels = 3;
  const guint fs = 2;
  const gsize d = 6, T = 40;
  float *x = g_new (float, T * d);
  GstHarness *h, *hm;
  GstCaps *caps;
  GstStructure *s;
  gint width = 0, height = 0, fps_n = 0, fps_d = 0;
  gchar *events;

  sattn_fill_signal (x, T * d, 3, 1.0f);
  h = sattn_harness_new ("window", 10, "hop", 4, "frame-size", fs, NULL);
  hm = gst_harness_new_with_element (h->element, NULL, "attn");
  sattn_set_caps (h, rate, channels);
  push_stream (h, x, T, d, 7, fs, rate);

  events = pull_events_until_eos (hm);
  fail_unless_equals_string (events, "stream-start caps segment eos");
  g_free (events);

  caps = gst_pad_get_current_caps (hm->sinkpad);
  fail_unless (caps != NULL);
  s = gst_caps_get_structure (caps, 0);
  GST_INFO ("map caps %" GST_PTR_FORMAT, caps);
  fail_unless (gst_structure_has_name (s, "video/x-raw"));
  fail_unless_equals_string (gst_structure_get_string (s, "format"), "GRAY8");
  fail_unless (gst_structure_get_int (s, "width", &width));
  fail_unless (gst_structure_get_int (s, "height", &height));
  fail_unless (gst_structure_get_fraction (s, "framerate", &fps_n, &fps_d));
  fail_unless_equals_int (width, 10);   /* window */
  fail_unless_equals_int (height, 4);   /* hop: the rows of a window */
  /* 8000 Hz / frame-size 2 / hop 4 = 1000 windows per second. */
  fail_unless_equals_int (fps_n, 1000);
  fail_unless_equals_int (fps_d, 1);
  gst_caps_unref (caps);
  /* 40 frames, a window every 4: 10 maps. */
  fail_unless_equals_int (gst_harness_buffers_in_queue (hm), 10);
  fail_unless_equals_int (gst_harness_buffers_in_queue (h), 6);

  gst_harness_teardown (hm);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Every map against the reference, over output modes, heads and the head
 * shown; window = 10 keys, so rows are padded to 12 bytes. */
GST_START_TEST (test_map_pixels)
{
  const gint rate = 1000, outs[] = { OUT_FRAMES, OUT_WINDOW, OUT_MEAN,
    OUT_LAST
  };
  const gsize d = 4, T = 33;
  gint i = __i__;
  const guint heads = (i & 1) ? 2 : 1;
  const gint head = (i & 2) ? (gint) heads - 1 : -1;
  RefConfig c = { 10, 4, heads, 0, 0.0, (i & 4) != 0, outs[(i >> 3) & 3],
    (i & 32) ? START_WAIT : START_PAD
  };
  const guint height = c.output == OUT_FRAMES ? c.hop :
      c.output == OUT_LAST ? 1 : c.window;
  const gsize stride = GST_ROUND_UP_4 (c.window);
  float *x = g_new (float, T * d);
  double *ref = g_new (double, c.window * c.window);
  ObsWindow *w;
  gsize nw, k, r, j, off_by_one = 0, pixels = 0;
  GstHarness *h, *hm;
  gchar *events;

  /* Amplitude 3: weights from near-uniform to near one-hot. */
  sattn_fill_signal (x, T * d, 500 + i, 3.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", heads,
      "causal", c.causal, "output", c.output, "start", c.start, "map-head",
      head, NULL);
  hm = gst_harness_new_with_element (h->element, NULL, "attn");
  sattn_set_caps (h, rate, (gint) d);
  push_stream (h, x, T, d, 5, 1, rate);
  events = pull_events_until_eos (hm);
  g_free (events);

  nw = obs_ref_schedule (&c, T, &w);
  fail_unless_equals_int (gst_harness_buffers_in_queue (hm), nw);
  for (k = 0; k < nw; k++) {
    GstBuffer *buf = gst_harness_pull (hm);
    GstMapInfo map;

    fail_unless_equals_uint64 (GST_BUFFER_PTS (buf),
        frame_time (w[k].first, 1, rate));
    fail_unless_equals_uint64 (GST_BUFFER_DURATION (buf),
        frame_time (w[k].end, 1, rate) - frame_time (w[k].first, 1, rate));
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (buf), k);
    fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (buf,
            GST_BUFFER_FLAG_DISCONT), k == 0);
    fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
    fail_unless_equals_int (map.size, stride * height);

    obs_ref_window_weights (&c, x, NULL, T, d, &w[k], head, ref);
    for (r = 0; r < height; r++) {
      const guint8 *row = map.data + r * stride;
      gboolean have = w[k].rows + r >= height;
      const double *wr = have ? ref + (w[k].rows + r - height) * c.window :
          NULL;
      double mx = 0.0;

      for (j = 0; have && j < c.window; j++)
        mx = MAX (mx, wr[j]);
      for (j = 0; j < stride; j++) {
        gint want = 0, diff;

        if (j < c.window && have && mx > 0.0)
          want = (gint) floor (255.0 * wr[j] / mx + 0.5);
        diff = ABS ((gint) row[j] - want);
        pixels++;
        off_by_one += diff == 1;
        fail_unless (diff == 0 || (diff == 1 && j < c.window),
            "map %" G_GSIZE_FORMAT " pixel (%" G_GSIZE_FORMAT ", %"
            G_GSIZE_FORMAT ") = %d, want %d", k, r, j, row[j], want);
      }
    }
    gst_buffer_unmap (buf, &map);
    gst_buffer_unref (buf);
  }
  GST_INFO ("%" G_GSIZE_FORMAT " pixels, %" G_GSIZE_FORMAT " off by one",
      pixels, off_by_one);
  fail_unless (off_by_one * 100 <= pixels, "too many pixels off by one");

  g_free (w);
  g_free (ref);
  gst_harness_teardown (hm);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* ------------------------------------------------------------ cost */

static GMutex log_lock;
static GString *log_lines;

static void
capture_log (GstDebugCategory * category, GstDebugLevel level,
    const gchar * file, const gchar * function, gint line, GObject * object,
    GstDebugMessage * message, gpointer user_data)
{
  const gchar *text = gst_debug_message_get (message);

  if (text && g_str_has_prefix (text, "observing:")) {
    g_mutex_lock (&log_lock);
    g_string_append_printf (log_lines, "%s\n", text);
    g_mutex_unlock (&log_lock);
  }
}

/* What the element asks the core for, by configuration: statistics only
 * with post-messages, weights only with the attn pad or message-weights.
 * Read from the element's DEBUG log of the stream set-up. */
GST_START_TEST (test_costs_nothing_unless_asked)
{
  static const struct
  {
    gboolean pad, post, weights;
    const gchar *want;
  } cases[] = {
    {FALSE, FALSE, FALSE, "observing: statistics 0, weights 0\n"},
    {FALSE, FALSE, TRUE, "observing: statistics 0, weights 0\n"},
    {TRUE, FALSE, FALSE, "observing: statistics 0, weights 1\n"},
    {FALSE, TRUE, FALSE, "observing: statistics 1, weights 0\n"},
    {FALSE, TRUE, TRUE, "observing: statistics 1, weights 1\n"},
  };
  const gint i = __i__;
  const gsize d = 2, T = 16;
  float x[32];
  GstHarness *h, *hm = NULL;

  sattn_fill_signal (x, T * d, 8, 1.0f);
  log_lines = g_string_new (NULL);
  gst_debug_set_active (TRUE);
  gst_debug_set_threshold_for_name ("sattn", GST_LEVEL_DEBUG);
  gst_debug_add_log_function (capture_log, NULL, NULL);

  h = sattn_harness_new ("window", 8, "hop", 4, "post-messages",
      cases[i].post, "message-weights", cases[i].weights, NULL);
  if (cases[i].pad)
    hm = gst_harness_new_with_element (h->element, NULL, "attn");
  sattn_set_caps (h, 1000, (gint) d);
  push_stream (h, x, T, d, 16, 1, 1000);
  fail_unless_equals_int (gst_harness_buffers_in_queue (h), 1);
  /* Only the pads asked for. */
  fail_unless_equals_int (h->element->numsrcpads, cases[i].pad ? 2 : 1);
  if (hm) {
    g_free (pull_events_until_eos (hm));
    fail_unless_equals_int (gst_harness_buffers_in_queue (hm), 4);
  }

  gst_debug_remove_log_function (capture_log);
  gst_debug_set_threshold_for_name ("sattn", GST_LEVEL_NONE);
  g_mutex_lock (&log_lock);
  fail_unless_equals_string (log_lines->str, cases[i].want);
  g_string_free (log_lines, TRUE);
  log_lines = NULL;
  g_mutex_unlock (&log_lock);

  if (hm)
    gst_harness_teardown (hm);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------ flushing */

/* A flush goes through to the attn pad; maps resume after it, flagged
 * DISCONT, with offsets from 0, after a new segment. */
GST_START_TEST (test_map_flush)
{
  const gint rate = 1000;
  const gsize d = 2;
  float x[64];
  GstHarness *h, *hm;
  GstSegment seg;
  GstBuffer *buf;
  GstEvent *ev;
  gchar *events;
  guint n;

  sattn_fill_signal (x, 64, 9, 1.0f);
  h = sattn_harness_new ("window", 8, "hop", 4, NULL);
  hm = gst_harness_new_with_element (h->element, NULL, "attn");
  sattn_set_caps (h, rate, (gint) d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              12 * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  /* stream-start, caps, segment and 3 maps. */
  for (n = 0; n < 3; n++)
    gst_event_unref (gst_harness_pull_event (hm));
  for (n = 0; n < 3; n++)
    gst_buffer_unref (gst_harness_pull (hm));

  fail_unless (gst_harness_push_event (h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_stop (TRUE)));
  gst_segment_init (&seg, GST_FORMAT_TIME);
  seg.start = seg.time = 2 * GST_SECOND;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              20 * d * sizeof (float), 2 * GST_SECOND, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  events = pull_events_until_eos (hm);
  fail_unless_equals_string (events, "flush-start flush-stop segment eos");
  g_free (events);
  fail_unless_equals_int (gst_harness_buffers_in_queue (hm), 5);
  for (n = 0; n < 5; n++) {
    buf = gst_harness_pull (hm);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (buf), 2 * GST_SECOND +
        frame_time (4 * n, 1, rate));
    fail_unless_equals_uint64 (GST_BUFFER_OFFSET (buf), n);
    fail_unless_equals_int (GST_BUFFER_IS_DISCONT (buf), n == 0);
    gst_buffer_unref (buf);
  }
  /* The map's segment is the features' one. */
  ev = gst_pad_get_sticky_event (hm->sinkpad, GST_EVENT_SEGMENT, 0);
  fail_unless (ev != NULL);
  {
    const GstSegment *got;

    gst_event_parse_segment (ev, &got);
    fail_unless_equals_uint64 (got->start, 2 * GST_SECOND);
  }
  gst_event_unref (ev);
  gst_harness_teardown (hm);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* After PLAYING -> READY -> PLAYING the pad sends its stream-start, caps
 * and segment again before the new maps. */
GST_START_TEST (test_map_restart)
{
  const gint rate = 1000;
  const gsize d = 2;
  float x[40];
  GstHarness *h, *hm;
  GstSegment seg;
  gchar *events, *caps_str;
  gint run;

  sattn_fill_signal (x, 40, 11, 1.0f);
  h = sattn_harness_new ("window", 8, "hop", 4, NULL);
  hm = gst_harness_new_with_element (h->element, NULL, "attn");
  caps_str = sattn_caps_string (rate, (gint) d);
  for (run = 0; run < 2; run++) {
    if (run == 1) {
      fail_unless_equals_int (gst_element_set_state (h->element,
              GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
      fail_unless_equals_int (gst_element_set_state (h->element,
              GST_STATE_PLAYING), GST_STATE_CHANGE_SUCCESS);
      fail_unless (gst_harness_push_event (h,
              gst_event_new_stream_start ("again")));
      fail_unless (gst_harness_push_event (h,
              gst_event_new_caps (gst_caps_from_string (caps_str))));
      gst_segment_init (&seg, GST_FORMAT_TIME);
      fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
    } else {
      sattn_set_caps (h, rate, (gint) d);
    }
    push_stream (h, x, 20, d, 20, 1, rate);
    events = pull_events_until_eos (hm);
    fail_unless_equals_string (events, "stream-start caps segment eos");
    g_free (events);
    fail_unless_equals_int (gst_harness_buffers_in_queue (hm), 5);
    while (gst_harness_buffers_in_queue (hm) > 0)
      gst_buffer_unref (gst_harness_pull (hm));
  }
  g_free (caps_str);
  gst_harness_teardown (hm);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------ pipeline */

/* The launch line of the documentation, without any queue, writes one PNG
 * per window and reaches EOS. */
GST_START_TEST (test_png_pipeline)
{
  static const gchar *needed[] = { "audiotestsrc", "videoconvert", "pngenc",
    "multifilesink", "fakesink"
  };
  gchar *dir, *desc, *png, *contents = NULL;
  GstElement *pipe;
  GstBus *bus;
  GstMessage *msg;
  GError *err = NULL;
  gsize len = 0;
  guint i, files = 0;
  GDir *gd;

  for (i = 0; i < G_N_ELEMENTS (needed); i++) {
    GstElementFactory *f = gst_element_factory_find (needed[i]);

    if (f == NULL) {
      g_print ("SKIP test_png_pipeline: the '%s' element is missing "
          "(gstreamer1.0-plugins-base / -good)\n", needed[i]);
      return;
    }
    gst_object_unref (f);
  }

  dir = g_dir_make_tmp ("sattn-map-XXXXXX", &err);
  fail_unless (dir != NULL, "%s", err ? err->message : "?");
  /* 4 × 256 frames, a window every 16 frames: 64 maps of 32 × 16. */
  desc = g_strdup_printf ("audiotestsrc num-buffers=4 samplesperbuffer=256 "
      "wave=pink-noise ! audio/x-raw,format=F32LE,channels=4,rate=16000 ! "
      "sattn name=s window=32 hop=16 ! fakesink s.attn ! videoconvert ! "
      "pngenc ! multifilesink location=%s/map-%%05d.png", dir);
  pipe = gst_parse_launch (desc, &err);
  fail_unless (pipe != NULL && err == NULL, "%s: %s", desc,
      err ? err->message : "?");
  fail_unless (gst_element_set_state (pipe, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  bus = gst_element_get_bus (pipe);
  msg = gst_bus_timed_pop_filtered (bus, 30 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "HANG: no EOS within 30 s");
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    gst_message_parse_error (msg, &err, NULL);
    fail ("pipeline error: %s", err->message);
  }
  gst_message_unref (msg);
  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (pipe);

  /* The first map is a 32 × 16 8-bit greyscale PNG. */
  png = g_build_filename (dir, "map-00000.png", NULL);
  fail_unless (g_file_get_contents (png, &contents, &len, NULL),
      "%s was not written", png);
  fail_unless (len > 33 && memcmp (contents, "\x89PNG\r\n\x1a\n", 8) == 0
      && memcmp (contents + 12, "IHDR", 4) == 0, "%s is not a PNG", png);
  fail_unless_equals_int (GST_READ_UINT32_BE (contents + 16), 32);
  fail_unless_equals_int (GST_READ_UINT32_BE (contents + 20), 16);
  fail_unless_equals_int (contents[24], 8);     /* bit depth */
  fail_unless_equals_int (contents[25], 0);     /* greyscale */
  g_free (contents);
  g_free (png);

  gd = g_dir_open (dir, 0, NULL);
  fail_unless (gd != NULL);
  {
    const gchar *name;

    while ((name = g_dir_read_name (gd)) != NULL) {
      gchar *p = g_build_filename (dir, name, NULL);

      files++;
      g_unlink (p);
      g_free (p);
    }
  }
  g_dir_close (gd);
  fail_unless_equals_int (files, 64);
  g_rmdir (dir);
  g_free (dir);
  g_free (desc);
}

GST_END_TEST;

static Suite *
sattn_map_suite (void)
{
  Suite *s = suite_create ("sattn-map");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_map_caps_and_events);
  tcase_add_loop_test (tc, test_map_pixels, 0, 64);
  tcase_add_loop_test (tc, test_costs_nothing_unless_asked, 0, 5);
  tcase_add_test (tc, test_map_flush);
  tcase_add_test (tc, test_map_restart);
  tcase_add_test (tc, test_png_pipeline);
  return s;
}

GST_CHECK_MAIN (sattn_map);
