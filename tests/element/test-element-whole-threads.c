/* sattn element: a whole model computes the same bytes with threads=1, 2
 * and 3, however the frames come in buffers.
 *
 * The model has a front end that depends on the window (a conv stem over
 * the samples, power normalisation, a CLS token), two pre-norm layers and
 * an MLP head, window 40 frames (41 rows), hop 10.  Pushes of one hop
 * complete one window each (a window's rows are shared between the
 * threads), pushes of 120 frames complete 12 (whole windows per thread,
 * their front ends as the pool's tasks), and random sizes mix both.  A
 * GAP buffer and a NaN sample are in the stream.  The rows of threads=2
 * and 3 must equal threads=1's byte for byte, and every window due must
 * have a row.  This runs under ThreadSanitizer too (make test-tsan), where
 * it checks that those tasks share nothing they write.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "st-builder.h"

#include <math.h>
#include <string.h>

#define RATE 8000
#define CH 2
#define FS 4                    /* samples per frame */
#define F (CH * FS)             /* values per frame */
#define WINDOW 40
#define HOP 10
#define CLASSES 5
#define FRAMES 1200

static gchar *
write_model (void)
{
  WholeSpec s = { .f = F, .d = 16, .n_layers = 2, .ff = 32, .classes = CLASSES,
    .max_window = WINDOW, .heads = 2, .positions = "learned", .mlp = TRUE,
    .final_norm = TRUE, .norm_first = TRUE, .conv_steps = FS, .conv_kernel = 8,
    .conv_padding = 2, .conv_act = "gelu", .input_norm = "power", .cls = TRUE,
    .meta = "sample_rate=8000;channels=2;frame_size=4;window=40;hop=10"
  };

  return st_write_whole_tmp ("m.safetensors", 71, &s);
}

/* The frames: a signal, a NaN sample in frame 333, frames 500 ... 539 a
 * GAP buffer wherever the cut falls (the buffers that overlap it are
 * flagged GAP as a whole: the same cut for every thread count). */
static float *
frames (void)
{
  float *x = g_new (float, FRAMES * F);

  sattn_fill_signal (x, FRAMES * F, 5, 1.0f);
  x[333 * F + 3] = NAN;
  return x;
}

/* Every output float of a sattn (threads t) fed x in buffers of sizes[]
 * frames (cycled), then EOS, in o (sattn_output_init first); the GAP flag
 * on buffers that start in [500, 540). */
static void
run (const gchar * path, gint t, const guint * sizes, guint n_sizes,
    const float *x, SattnOutput * o)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstHarness *h;
  GstBuffer *b;
  guint at = 0, k = 0;

  fail_unless (e != NULL);
  g_object_set (e, "weights", path, "output", 4 /* classes */ ,
      "threads", t, NULL);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  gst_harness_play (h);
  sattn_set_caps (h, RATE, CH);
  while (at < FRAMES) {
    guint n = MIN (sizes[k++ % n_sizes], FRAMES - at);

    b = sattn_buffer_new (x + at * F, n * F * sizeof (float),
        gst_util_uint64_scale (at * FS, GST_SECOND, RATE), 0);
    if (at >= 500 && at < 540)
      GST_BUFFER_FLAG_SET (b, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, b), GST_FLOW_OK);
    at += n;
    sattn_output_pull_all (h, o);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_pull_all (h, o);
  gst_harness_teardown (h);
}

static void
check_cut (const gchar * what, const guint * sizes, guint n_sizes)
{
  gchar *path = write_model ();
  float *x = frames ();
  SattnOutput one;
  gint t;

  sattn_output_init (&one);
  run (path, 1, sizes, n_sizes, x, &one);
  /* a row of CLASSES floats for every hop of frames (the last one at EOS
   * too): nothing lost */
  fail_unless_equals_int (one.floats->len, FRAMES / HOP * CLASSES);
  for (t = 2; t <= 3; t++) {
    SattnOutput other;

    sattn_output_init (&other);
    run (path, t, sizes, n_sizes, x, &other);
    fail_unless (other.floats->len == one.floats->len &&
        memcmp (other.floats->data, one.floats->data,
            one.floats->len * sizeof (float)) == 0,
        "%s: threads=%d differs from threads=1", what, t);
    sattn_output_clear (&other);
  }
  sattn_output_clear (&one);
  g_free (x);
  st_remove_tmp (path);
}

GST_START_TEST (test_one_window_per_push)
{
  const guint sizes[] = { HOP };

  check_cut ("pushes of one hop", sizes, 1);
}

GST_END_TEST;

GST_START_TEST (test_many_windows_per_push)
{
  const guint sizes[] = { 12 * HOP };

  check_cut ("pushes of 12 hops", sizes, 1);
}

GST_END_TEST;

GST_START_TEST (test_mixed_pushes)
{
  const guint sizes[] = { 1, 7, 33, 10, 95, 3, 20, 41 };

  check_cut ("pushes of 1 ... 95 frames", sizes, G_N_ELEMENTS (sizes));
}

GST_END_TEST;

static Suite *
whole_threads_suite (void)
{
  Suite *s = suite_create ("sattn-whole-threads");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  tcase_add_test (tc, test_one_window_per_push);
  tcase_add_test (tc, test_many_windows_per_push);
  tcase_add_test (tc, test_mixed_pushes);
  suite_add_tcase (s, tc);
  return s;
}

GST_CHECK_MAIN (whole_threads);
