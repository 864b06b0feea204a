/* sattn element: every output row against the float64 reference and
 * against the core's one-shot sattn_attend on the same window, for the
 * identity projections over head / scale / causal / lookback / output /
 * start combinations.  Tolerance 1e-5 × (1 + max|ref|); max-abs and NMSE
 * are printed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <string.h>

static const guint heads_opts[] = { 1, 2, 4 };
static const gdouble scale_opts[] = { 0.0, 0.35 };
static const guint lookback_opts[] = { 0, 3 };

#define N_COMBOS (3 * 2 * 2 * 2 * 4 * 2)

static void
decode_combo (gint i, RefConfig * c)
{
  c->window = 12;
  c->hop = 4;
  c->heads = heads_opts[i % 3];
  i /= 3;
  c->scale = scale_opts[i % 2];
  i /= 2;
  c->causal = i % 2;
  i /= 2;
  c->lookback = lookback_opts[i % 2];
  i /= 2;
  c->output = i % 4;
  i /= 4;
  c->start = i % 2;
}

GST_START_TEST (test_rows_match_reference)
{
  const gint rate = 8000, channels = 4;
  const guint fs = 2;
  const gsize d = 8, T = 203;
  /* Three buffers; the first ends 7 bytes into a frame. */
  const gsize cut1 = 100 * d * sizeof (float) + 7;
  const gsize cut2 = 150 * d * sizeof (float);
  RefConfig c;
  SattnConfig mc = { 0, };
  SattnModel *m;
  SattnStatus st;
  float *x = g_new (float, T * d);
  GstHarness *h;
  SattnOutput o;
  RefOut ref, one;
  gchar *label;

  decode_combo (__i__, &c);
  sattn_fill_signal (x, T * d, 1000 + __i__, 2.0f);

  h = sattn_harness_new ("window", c.window, "hop", c.hop, "frame-size", fs,
      "heads", c.heads, "scale", c.scale, "causal", c.causal, "lookback",
      c.lookback, "output", c.output, "start", c.start, NULL);
  sattn_set_caps (h, rate, channels);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x, cut1, 0,
              0)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new ((guint8 *) x
              + cut1, cut2 - cut1, GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new ((guint8 *) x
              + cut2, T * d * sizeof (float) - cut2, GST_CLOCK_TIME_NONE, 3)),
      GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);

  label = g_strdup_printf ("H=%u s=%.2f c=%d lb=%u out=%d start=%d",
      c.heads, c.scale, c.causal, c.lookback, c.output, c.start);

  /* Against the independent float64 reference (values and timing). */
  ref_stream (&c, x, NULL, T, d, TRUE, &ref);
  fail_unless_equals_int (o.floats->len, ref.n_rows * ref.row_floats);
  fail_unless_equals_int (sattn_check_buffers (label, &o, 0, o.bufs->len, 0,
          &ref, 0, rate, fs, 0), ref.n_rows);

  /* Against the core's one-shot path on the same windows. */
  mc.d_model = d;
  mc.heads = c.heads;
  mc.scale = (float) c.scale;
  mc.causal = c.causal;
  mc.lookback = c.lookback;
  m = sattn_model_new (&mc, NULL, &st);
  fail_unless (m != NULL, "sattn_model_new: %s", sattn_status_string (st));
  oneshot_stream (&c, m, x, NULL, T, d, TRUE, &one);
  fail_unless_equals_int (one.n_rows, ref.n_rows);
  {
    gchar *l2 = g_strdup_printf ("one-shot %s", label);
    sattn_assert_close (l2, (const float *) o.floats->data, one.rows,
        one.n_rows * one.row_floats);
    g_free (l2);
  }
  sattn_model_free (m);

  g_free (label);
  ref_out_clear (&ref);
  ref_out_clear (&one);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* A stream pushed one byte at a time (every frame split across buffers,
 * most of them misaligned) gives the reference rows. */
GST_START_TEST (test_byte_by_byte)
{
  const gsize d = 6, T = 37;
  RefConfig c = { 8, 3, 3, 0, 0.0, TRUE, OUT_FRAMES, START_PAD };
  float *x = g_new (float, T * d);
  const guint8 *p = (const guint8 *) x;
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  gsize i;

  sattn_fill_signal (x, T * d, 7, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", c.heads,
      "causal", c.causal, NULL);
  sattn_set_caps (h, 1000, 6);
  for (i = 0; i < T * d * sizeof (float); i++)
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (p + i, 1,
                i == 0 ? 0 : GST_CLOCK_TIME_NONE, i % 4)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);

  ref_stream (&c, x, NULL, T, d, TRUE, &ref);
  fail_unless_equals_int (o.floats->len, T * d);
  fail_unless_equals_int (sattn_check_buffers ("byte by byte", &o, 0,
          o.bufs->len, 0, &ref, 0, 1000, 1, 0), T);

  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

static Suite *
sattn_numeric_suite (void)
{
  Suite *s = suite_create ("sattn-numeric");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_loop_test (tc, test_rows_match_reference, 0, N_COMBOS);
  tcase_add_test (tc, test_byte_by_byte);
  return s;
}

GST_CHECK_MAIN (sattn_numeric);
