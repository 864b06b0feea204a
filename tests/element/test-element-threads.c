/* The element's `threads` property: the threads computing its stream.
 *
 *  - a process that set OpenBLAS to 2 threads still reads 2 after running
 *    sattn pipelines with threads=1, 2 and 0 (the library never changes
 *    process-wide state);
 *  - the same buffers through harnesses with threads=1, 2 and 0 give
 *    byte-identical output buffers (data, timestamps, flags), in every
 *    output mode, and match the float64 reference.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>

#include <cblas.h>

#include "sattn-check.h"

static const gint thread_values[] = { 1, 2, 0 };

GST_START_TEST (test_blas_threads_unchanged)
{
#ifdef OPENBLAS_VERSION
  gchar *line = g_strdup_printf ("audiotestsrc num-buffers=30 ! "
      "audio/x-raw,format=F32LE,channels=8,rate=16000 ! "
      "sattn threads=%d window=64 hop=16 ! fakesink",
      thread_values[__i__]);
  GError *err = NULL;
  GstElement *pipe;
  GstBus *bus;
  GstMessage *msg;

  openblas_set_num_threads (2);
  fail_unless_equals_int (openblas_get_num_threads (), 2);
  pipe = gst_parse_launch (line, &err);
  fail_unless (pipe != NULL && err == NULL, "%s", err ? err->message : "");
  bus = gst_element_get_bus (pipe);
  gst_element_set_state (pipe, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "timed out");
  fail_unless (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS, "pipeline error");
  gst_message_unref (msg);
  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (pipe);
  fail_unless_equals_int (openblas_get_num_threads (), 2);
  g_free (line);
#endif
}

GST_END_TEST;

/* Push the same signal through a harness; return everything pulled. */
static void
run_harness (gint threads, gint output, const float *x, gsize T,
    gint channels, SattnOutput * o)
{
  GstHarness *h = sattn_harness_new ("threads", threads, "window", 48,
      "hop", 12, "heads", 2, "output", output, NULL);
  gsize pos = 0, chunk = 7;

  sattn_set_caps (h, 12000, channels);
  while (pos < T) {
    gsize c = MIN (chunk, T - pos);
    GstClockTime pts = gst_util_uint64_scale (pos, GST_SECOND, 12000);
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x +
                pos * channels, c * channels * sizeof (float), pts, 0)),
        GST_FLOW_OK);
    pos += c;
    chunk = chunk * 3 % 41 + 1;
  }
  gst_harness_push_event (h, gst_event_new_eos ());
  sattn_output_pull_all (h, o);
  gst_harness_teardown (h);
}

GST_START_TEST (test_threads_identical)
{
  const gint channels = 6, output = __i__;
  const gsize T = 500;
  float *x = g_new (float, T * channels);
  SattnOutput base;

  sattn_fill_signal (x, T * channels, 0x5eed + __i__, 1.0f);
  sattn_output_init (&base);
  run_harness (1, output, x, T, channels, &base);
  fail_unless (base.floats->len > 0);
  for (guint k = 1; k < G_N_ELEMENTS (thread_values); k++) {
    SattnOutput o;
    sattn_output_init (&o);
    run_harness (thread_values[k], output, x, T, channels, &o);
    fail_unless_equals_int (o.floats->len, base.floats->len);
    fail_unless (memcmp (o.floats->data, base.floats->data,
            base.floats->len * sizeof (float)) == 0,
        "threads=%d: output differs from threads=1", thread_values[k]);
    fail_unless_equals_int (o.bufs->len, base.bufs->len);
    for (guint b = 0; b < base.bufs->len; b++) {
      SattnOutBuf *p = &g_array_index (base.bufs, SattnOutBuf, b);
      SattnOutBuf *q = &g_array_index (o.bufs, SattnOutBuf, b);
      fail_unless (p->pts == q->pts && p->duration == q->duration &&
          p->offset == q->offset && p->offset_end == q->offset_end &&
          p->n_floats == q->n_floats && p->discont == q->discont &&
          p->gap == q->gap, "threads=%d: buffer %u differs",
          thread_values[k], b);
    }
    sattn_output_clear (&o);
  }
  if (output == OUT_FRAMES) {
    /* and against the float64 reference (identity projections) */
    RefConfig c = { 48, 12, 2, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
    RefOut ref;
    ref_stream (&c, x, NULL, T, channels, TRUE, &ref);
    fail_unless_equals_int (ref.n_rows * ref.row_floats, base.floats->len);
    sattn_assert_close ("threads=1 vs reference",
        (const float *) base.floats->data, ref.rows, base.floats->len);
    ref_out_clear (&ref);
  }
  sattn_output_clear (&base);
  g_free (x);
}

GST_END_TEST;

static Suite *
sattn_threads_suite (void)
{
  Suite *s = suite_create ("sattn-threads");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_loop_test (tc, test_blas_threads_unchanged, 0,
      G_N_ELEMENTS (thread_values));
  tcase_add_loop_test (tc, test_threads_identical, OUT_FRAMES, OUT_LAST + 1);
  return s;
}

GST_CHECK_MAIN (sattn_threads);
