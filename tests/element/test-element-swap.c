/* sattn element: swapping the weights file while PLAYING.
 *
 * The element starts on fixture A (tests/data, written by PyTorch); the
 * weights property is set to fixture B while frames flow.  B is loaded
 * off the streaming thread and takes over at a window boundary, which the
 * element announces with a `sattn-weights-swapped` element message
 * naming the frame.  Checked: every input frame has exactly one output
 * frame (frames mode), timestamps continue across the swap, the rows
 * before the boundary equal a fresh core model of A on the same frames
 * and the rows from the boundary on equal a fresh core model of B on the
 * same frames (from stream start: the windows after the boundary see
 * frames from before it), within 1e-5 × (1 + max|ref|).  A file that
 * cannot be read and one of another d_model are refused with a warning
 * that names the file, and A stays in use for every row.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "sattn/sattn-weights.h"

#include <string.h>

#define RATE 1000
#define D 16
#define HEADS 2
#define WINDOW 16
#define HOP 5
#define FRAMES_PER_BUF 7

static gchar *
fixture (const gchar * name)
{
  const gchar *root = g_getenv ("SATTN_SOURCE_ROOT");

  fail_unless (root != NULL, "SATTN_SOURCE_ROOT is not set");
  return g_build_filename (root, "tests", "data", name, NULL);
}

/* The rows a fresh core stream of the weights at path gives for x (T
 * frames), drained at the end, as doubles. */
static double *
fresh_rows (const gchar * path, const float *x, gsize T, gint output,
    gsize * n_rows)
{
  SattnConfig mc = { 0, };
  SattnWeights w = { 0, };
  SattnMhaWeights *mw = NULL;
  SattnStreamConfig sc = { 0, };
  SattnModel *m;
  SattnStream *s;
  SattnStatus st;
  gchar err[512];
  float *out = g_new (float, (T + WINDOW) * D);
  double *rows = g_new (double, T * D);
  gsize n = 0, nr, i;

  mc.heads = HEADS;
  fail_unless_equals_int (sattn_mha_weights_load (path, "", D, HEADS, 0, &mc,
          &w, &mw, err, sizeof err), SATTN_OK);
  m = sattn_model_new (&mc, &w, &st);
  sattn_mha_weights_free (mw);
  fail_unless (m != NULL);
  sc.window = WINDOW;
  sc.hop = HOP;
  sc.output = (SattnOutputMode) output;
  sc.threads = 1;
  s = sattn_stream_new (m, &sc, &st);
  fail_unless (s != NULL);
  for (i = 0; i < T; i += FRAMES_PER_BUF) {
    gsize k = MIN (FRAMES_PER_BUF, T - i);
    fail_unless_equals_int (sattn_stream_push (s, x + i * D, k, NULL,
            out + n * D, T + WINDOW - n, NULL, &nr), SATTN_OK);
    n += nr;
  }
  fail_unless_equals_int (sattn_stream_drain (s, out + n * D, T + WINDOW - n,
          NULL, &nr), SATTN_OK);
  n += nr;
  if (output == OUT_FRAMES)
    fail_unless_equals_int (n, T);
  for (i = 0; i < n * D; i++)
    rows[i] = out[i];
  *n_rows = n;
  sattn_stream_free (s);
  sattn_model_free (m);
  g_free (out);
  return rows;
}

static void
push_frames (GstHarness * h, const float *x, gsize f, gsize n)
{
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + f * D,
              n * D * sizeof (float), gst_util_uint64_scale (f, GST_SECOND,
                  RATE), 0)), GST_FLOW_OK);
}

/* The swap message on bus, if any: its frame, or -1. */
static gint64
swapped_at (GstBus * bus, const gchar * want_path)
{
  GstMessage *msg;
  gint64 at = -1;

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ELEMENT)) != NULL) {
    const GstStructure *s = gst_message_get_structure (msg);
    guint64 frame;

    if (gst_structure_has_name (s, "sattn-weights-swapped")) {
      fail_unless_equals_string (gst_structure_get_string (s, "weights"),
          want_path);
      fail_unless (gst_structure_get_uint64 (s, "frame", &frame));
      at = (gint64) frame;
    }
    gst_message_unref (msg);
  }
  return at;
}

/* Check the output: T rows, PTS from the frame counter, contiguous. */
static float *
pull_rows (GstHarness * h, gsize T, gsize n_rows)
{
  SattnOutput o;
  float *rows;
  guint b;
  GstClockTime next = 0;

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  fail_unless_equals_int (o.floats->len, n_rows * D);
  for (b = 0; b < o.bufs->len; b++) {
    SattnOutBuf *ob = &g_array_index (o.bufs, SattnOutBuf, b);

    fail_unless_equals_uint64 (ob->pts, next);
    if (n_rows == T)
      fail_unless_equals_uint64 (ob->pts, gst_util_uint64_scale (ob->offset,
              GST_SECOND, RATE));
    fail_unless (ob->discont == (b == 0), "DISCONT on buffer %u", b);
    next = ob->pts + ob->duration;
  }
  fail_unless_equals_uint64 (next, gst_util_uint64_scale (T, GST_SECOND,
          RATE));
  rows = g_memdup2 (o.floats->data, n_rows * D * sizeof (float));
  sattn_output_clear (&o);
  return rows;
}

/* output: frames (one row per frame) or mean (one per window). */
static void
swap_while_playing (gint output)
{
  const gsize T1 = 203, T_MAX = 20000, T_AFTER = 301;
  gchar *a = fixture ("e16_h2_nobias.safetensors");
  gchar *b = fixture ("e16_h2_f64.safetensors");
  float *x = g_new (float, T_MAX * D), *got;
  double *ref_a, *ref_b;
  GstHarness *h;
  GstBus *bus;
  gint64 at = -1;
  gsize T = 0, end, n_a, n_b, r_at;
  gchar *label;

  sattn_fill_signal (x, T_MAX * D, 31, 1.0f);
  h = sattn_harness_new ("weights", a, "heads", HEADS, "window", WINDOW,
      "hop", HOP, "output", output, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, RATE, D);
  for (; T < T1; T += FRAMES_PER_BUF)
    push_frames (h, x, T, MIN (FRAMES_PER_BUF, T1 - T));
  T = T1;

  g_object_set (h->element, "weights", b, NULL);
  /* Frames keep flowing while B loads; it takes over at a boundary. */
  while (at < 0 && T + FRAMES_PER_BUF <= T_MAX - T_AFTER) {
    push_frames (h, x, T, FRAMES_PER_BUF);
    T += FRAMES_PER_BUF;
    at = swapped_at (bus, b);
    if (at < 0)
      g_usleep (1000);
  }
  fail_unless (at >= 0, "no swap after %" G_GSIZE_FORMAT " frames", T);
  fail_unless (at >= (gint64) T1 && at <= (gint64) T);
  /* A boundary: a whole number of hops since the start. */
  fail_unless_equals_int (at % HOP, 0);
  end = T + T_AFTER;
  for (; T < end; T += FRAMES_PER_BUF)
    push_frames (h, x, T, MIN (FRAMES_PER_BUF, end - T));
  T = end;
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING |
          GST_MESSAGE_ERROR) == NULL, "a warning or error was posted");

  ref_a = fresh_rows (a, x, T, output, &n_a);
  ref_b = fresh_rows (b, x, T, output, &n_b);
  fail_unless_equals_int (n_a, n_b);
  got = pull_rows (h, T, n_a);
  /* The rows before the boundary: one per frame, or one per window (a
   * window every hop frames from the start). */
  r_at = output == OUT_FRAMES ? (gsize) at : (gsize) at / HOP;
  g_print ("swap output=%d: %" G_GSIZE_FORMAT " frames in, %" G_GSIZE_FORMAT
      " rows out, boundary at frame %" G_GINT64_FORMAT " (row %" G_GSIZE_FORMAT
      ")\n", output, T, n_a, at, r_at);
  label = g_strdup_printf ("output=%d rows [0, %" G_GSIZE_FORMAT
      ") vs fresh A", output, r_at);
  sattn_assert_close (label, got, ref_a, r_at * D);
  g_free (label);
  label = g_strdup_printf ("output=%d rows [%" G_GSIZE_FORMAT ", %"
      G_GSIZE_FORMAT ") vs fresh B", output, r_at, n_a);
  sattn_assert_close (label, got + r_at * D, ref_b + r_at * D,
      (n_a - r_at) * D);
  g_free (label);

  g_free (got);
  g_free (ref_a);
  g_free (ref_b);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_free (a);
  g_free (b);
  g_free (x);
}

GST_START_TEST (test_swap_while_playing)
{
  swap_while_playing (OUT_FRAMES);
}

GST_END_TEST;

GST_START_TEST (test_swap_while_playing_mean)
{
  swap_while_playing (OUT_MEAN);
}

GST_END_TEST;

/* A file that cannot be used: a warning naming it, A for every row. */
static void
refused (const gchar * bad_path, const gchar * expect_in_message)
{
  const gsize T1 = 105, T2 = 400;
  gchar *a = fixture ("e16_h2_nobias.safetensors");
  float *x = g_new (float, T2 * D), *got;
  double *ref_a;
  GstHarness *h;
  GstBus *bus;
  GstMessage *msg;
  GError *err = NULL;
  gchar *dbg = NULL, *prop = NULL;
  gsize T;

  sattn_fill_signal (x, T2 * D, 32, 1.0f);
  h = sattn_harness_new ("weights", a, "heads", HEADS, "window", WINDOW,
      "hop", HOP, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, RATE, D);
  for (T = 0; T < T1; T += FRAMES_PER_BUF)
    push_frames (h, x, T, FRAMES_PER_BUF);
  g_object_set (h->element, "weights", bad_path, NULL);
  /* The loader starts at the next buffer. */
  push_frames (h, x, T, FRAMES_PER_BUF);
  T += FRAMES_PER_BUF;
  msg = gst_bus_timed_pop_filtered (bus, 10 * GST_SECOND,
      GST_MESSAGE_WARNING);
  fail_unless (msg != NULL, "no warning for %s", bad_path);
  gst_message_parse_warning (msg, &err, &dbg);
  GST_INFO ("warning: %s", err->message);
  fail_unless (strstr (err->message, bad_path) != NULL,
      "the warning does not name the file: %s", err->message);
  fail_unless (strstr (err->message, expect_in_message) != NULL,
      "the warning does not say '%s': %s", expect_in_message, err->message);
  fail_unless (strstr (err->message, "stays in use") != NULL);
  g_clear_error (&err);
  g_free (dbg);
  gst_message_unref (msg);

  for (; T < T2; T += FRAMES_PER_BUF)
    push_frames (h, x, T, MIN (FRAMES_PER_BUF, T2 - T));
  T = T2;
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  fail_unless (swapped_at (bus, bad_path) < 0, "a refused file took over");
  /* The property says what was asked for. */
  g_object_get (h->element, "weights", &prop, NULL);
  fail_unless_equals_string (prop, bad_path);
  g_free (prop);

  ref_a = fresh_rows (a, x, T, OUT_FRAMES, &T);
  got = pull_rows (h, T, T);
  sattn_assert_close ("refused swap: every row vs fresh A", got, ref_a,
      T * D);
  g_free (got);
  g_free (ref_a);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_free (a);
  g_free (x);
}

GST_START_TEST (test_swap_missing_file)
{
  refused ("/nonexistent/sattn-swap.safetensors", "cannot replace");
}

GST_END_TEST;

GST_START_TEST (test_swap_other_geometry)
{
  gchar *c = fixture ("e24_h3_biaskv.safetensors");

  refused (c, "24");
  g_free (c);
}

GST_END_TEST;

/* Set and torn down while a load may be running: no leak, no race (TSan),
 * no hang. */
GST_START_TEST (test_swap_then_stop)
{
  gchar *a = fixture ("e16_h2_nobias.safetensors");
  gchar *b = fixture ("e16_h2_f64.safetensors");
  float x[FRAMES_PER_BUF * D];
  GstHarness *h;
  guint i;

  memset (x, 0, sizeof x);
  for (i = 0; i < 4; i++) {
    h = sattn_harness_new ("weights", a, "heads", HEADS, "window", WINDOW,
        "hop", HOP, NULL);
    sattn_set_caps (h, RATE, D);
    push_frames (h, x, 0, FRAMES_PER_BUF);
    g_object_set (h->element, "weights", b, NULL);
    g_object_set (h->element, "weights-prefix", "", NULL);
    push_frames (h, x, 0, FRAMES_PER_BUF);
    if (i % 2)
      g_usleep (2000);
    gst_harness_teardown (h);
  }
  g_free (a);
  g_free (b);
}

GST_END_TEST;

static Suite *
sattn_swap_suite (void)
{
  Suite *s = suite_create ("sattn-swap");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_swap_while_playing);
  tcase_add_test (tc, test_swap_while_playing_mean);
  tcase_add_test (tc, test_swap_missing_file);
  tcase_add_test (tc, test_swap_other_geometry);
  tcase_add_test (tc, test_swap_then_stop);
  return s;
}

GST_CHECK_MAIN (sattn_swap);
