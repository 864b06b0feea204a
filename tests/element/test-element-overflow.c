/* sattn element: float32 overflow from finite input.
 *
 * - output=mean on samples of +-1e38, +-3e38 and +-FLT_MAX mixed with
 *   small ones: every pooled row finite and equal to the float64 mean of
 *   the core's one-shot rows of the same windows (tolerance 1e-5 × (1 +
 *   max|ref|)), although a float32 sum of those rows overflows.
 * - Trained weights whose Q/K/V projections overflow for some finite
 *   frames, under invalid-frames = mask, zero and error, with and without
 *   health messages: those frames count as invalid frames (and in
 *   overflow-frames) in the health messages, a warning names the cause,
 *   error stops at the first of them with an error naming the frame, its
 *   time and the cause, after pushing the rows before it.
 * - An output projection with entries of 1e30: rows that overflow are
 *   zeros (never Inf/NaN), counted in overflow-rows, with a warning, under
 *   every policy.
 * - A pre-norm encoder layer whose linear2 has entries of 3e38: its rows
 *   are zeros, counted in overflow-rows, with a warning that names the
 *   feed-forward's linear2 (not the output projection, which is fine),
 *   under every policy: invalid-frames=error does not stop the stream
 *   (it is about input frames).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "st-writer.h"

#include <errno.h>
#include <float.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static gboolean
all_finite (const SattnOutput * o, gsize * bad)
{
  gsize i;

  *bad = 0;
  for (i = 0; i < o->floats->len; i++)
    *bad += !isfinite (g_array_index (o->floats, float, i));
  return *bad == 0;
}

GST_START_TEST (test_mean_edge_of_range)
{
  static const float edge[] = { 1e38f, -1e38f, 3e38f, -3e38f, FLT_MAX,
    -FLT_MAX
  };
  const gint rate = 1000, channels = 2;
  const gsize d = 2, T = 96;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_MEAN, START_PAD };
  SattnConfig mc = { 0, };
  SattnModel *m;
  SattnStatus st;
  float *x = g_new (float, T * d);
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  gsize i, bad, naive_inf = 0;

  for (i = 0; i < T * d; i++)
    x[i] = (i % 3 == 0) ? edge[(i / 3) % G_N_ELEMENTS (edge)]
        : (float) ((gint) (i % 7) - 3);
  /* Runs of one sign: the float32 sum of a window's rows overflows. */
  for (i = 16; i < 48; i++)
    x[i * d] = FLT_MAX;
  for (i = 48; i < 64; i++)
    x[i * d + 1] = -3e38f;

  h = sattn_harness_new ("window", c.window, "hop", c.hop, "output",
      OUT_MEAN, NULL);
  sattn_set_caps (h, rate, channels);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  fail_unless (all_finite (&o, &bad), "%" G_GSIZE_FORMAT " non-finite "
      "values in output=mean", bad);

  mc.d_model = d;
  mc.heads = 1;
  m = sattn_model_new (&mc, NULL, &st);
  fail_unless (m != NULL);
  oneshot_stream (&c, m, x, NULL, T, d, TRUE, &ref);
  fail_unless_equals_int (o.floats->len, ref.n_rows * d);
  sattn_assert_close ("mean at the edge of the float range",
      (const float *) o.floats->data, ref.rows, ref.n_rows * d);
  /* The case is one where summing in float32 overflows. */
  for (i = 0; i < ref.n_rows * d; i++)
    naive_inf += fabs (ref.rows[i] * c.window) > FLT_MAX;
  fail_unless (naive_inf > 0, "no window whose row sum exceeds FLT_MAX");

  ref_out_clear (&ref);
  sattn_model_free (m);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* ------------------------------------------------------ trained weights */

/* Push T frames of d values (d = 2 channels, rate 1000) through h as one
 * buffer, then EOS; every output row into o (every value finite, T
 * rows); returns how many rows are zeros (overflowed rows are). */
static gsize
push_count_zero_rows (GstHarness * h, const float *x, gsize T, gsize d,
    SattnOutput * o)
{
  gsize i, bad, zero_rows = 0;

  sattn_set_caps (h, 1000, 2);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (o);
  sattn_output_pull_all (h, o);
  fail_unless_equals_int (o->floats->len, T * d);
  fail_unless (all_finite (o, &bad), "%" G_GSIZE_FORMAT " non-finite "
      "values", bad);
  for (i = 0; i < T; i++) {
    const float *r = &g_array_index (o->floats, float, i * d);

    zero_rows += r[0] == 0.0f && r[1] == 0.0f;
  }
  return zero_rows;
}

/* Writes w at a new temporary path (returned, g_free it) and frees
 * it. */
static gchar *
save_tmp (StWriter * w)
{
  gchar *path = NULL;
  GError *err = NULL;
  gint fd;

  fd = g_file_open_tmp ("sattn-overflow-XXXXXX.safetensors", &path, &err);
  fail_unless (fd >= 0, "tmp file: %s", err ? err->message : "?");
  g_close (fd, NULL);
  fail_unless (st_writer_save (w, path) == 0, "%s: %s", path,
      g_strerror (errno));
  st_writer_free (w);
  return path;
}

/* A safetensors file of an nn.MultiheadAttention with E = 2, 1 head:
 * W_q = W_k = W_v = wqkv × I, W_o = wo × I, zero biases. */
static gchar *
write_weights (gfloat wqkv, gfloat wo)
{
  float data[24] = { 0, };
  StWriter *w = st_writer_new ();
  gint i;

  fail_unless (w != NULL);
  for (i = 0; i < 3; i++) {
    data[i * 4 + 0] = wqkv;     /* rows 2i, 2i + 1 of in_proj_weight */
    data[i * 4 + 3] = wqkv;
  }
  data[18] = wo;
  data[21] = wo;
  st_writer_meta (w, "format", "pt");
  st_writer_meta (w, "num_heads", "1");
  st_writer_f32_2d (w, "in_proj_weight", data, 6, 2);
  st_writer_f32_2d (w, "in_proj_bias", data + 12, 6, 0);
  st_writer_f32_2d (w, "out_proj.weight", data + 18, 2, 2);
  st_writer_f32_2d (w, "out_proj.bias", data + 22, 2, 0);
  return save_tmp (w);
}

static guint
count_in (const gchar * hay, const gchar * needle)
{
  guint n = 0;

  while ((hay = strstr (hay, needle)) != NULL) {
    n++;
    hay += strlen (needle);
  }
  return n;
}

/* Warnings and health messages of the bus: warning texts joined, sums of
 * invalid-frames / overflow-frames / overflow-rows. */
typedef struct
{
  GString *warnings;
  guint64 invalid, ovf_frames, ovf_rows;
  guint messages;
} BusSummary;

static void
drain_bus (GstBus * bus, BusSummary * b)
{
  GstMessage *msg;

  while ((msg = gst_bus_pop (bus)) != NULL) {
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
      GError *err = NULL;

      gst_message_parse_warning (msg, &err, NULL);
      g_string_append_printf (b->warnings, "%s\n", err->message);
      g_error_free (err);
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT &&
        gst_structure_has_name (gst_message_get_structure (msg), "sattn")) {
      const GstStructure *s = gst_message_get_structure (msg);
      guint64 v = 0;

      fail_unless (gst_structure_get_uint64 (s, "invalid-frames", &v));
      b->invalid += v;
      fail_unless (gst_structure_get_uint64 (s, "overflow-frames", &v));
      b->ovf_frames += v;
      fail_unless (gst_structure_get_uint64 (s, "overflow-rows", &v));
      b->ovf_rows += v;
      b->messages++;
    }
    gst_message_unref (msg);
  }
}

/* __i__: policy = i % 3, post-messages = i / 3.  Frames 10 and 25 have a
 * sample of 3e38: finite, but 2 × 3e38 overflows float32; frame 30 is
 * flagged by a GAP buffer. */
GST_START_TEST (test_qkv_overflow)
{
  const gint policy = __i__ % 3;
  const gboolean post = __i__ / 3;
  const gsize d = 2, T = 40;
  gchar *path = write_weights (2.0f, 1.0f);
  float x[40 * 2];
  GstHarness *h;
  GstBus *bus;
  SattnOutput o;
  BusSummary b = { g_string_new (NULL), 0, 0, 0, 0 };
  GstFlowReturn ret;
  GstBuffer *gap;
  gsize i, bad;

  sattn_fill_signal (x, T * d, 7, 1.0f);
  x[10 * d + 1] = 3e38f;
  x[25 * d] = -3e38f;
  h = sattn_harness_new ("window", 8, "hop", 4, "weights", path,
      "invalid-frames", policy, "post-messages", post, "message-interval",
      (guint64) 0, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, 1000, 2);
  ret = gst_harness_push (h, sattn_buffer_new (x, 30 * d * sizeof (float),
          0, 0));
  if (policy == INV_ERROR) {
    gchar *text;
    gsize rows = 0;

    fail_unless_equals_int (ret, GST_FLOW_ERROR);
    text = sattn_pop_error (bus);
    fail_unless (strstr (text, "frame 10 ") != NULL, "%s", text);
    fail_unless (strstr (text, "0:00:00.010000000") != NULL, "%s", text);
    fail_unless (strstr (text, "projection overflows float32") != NULL,
        "%s", text);
    g_free (text);
    sattn_output_init (&o);
    sattn_output_pull_all (h, &o);
    /* Frames 0-7 complete two hops before frame 10. */
    rows = o.floats->len / d;
    fail_unless_equals_int (rows, 8);
    fail_unless (all_finite (&o, &bad));
    sattn_output_clear (&o);
    goto done;
  }
  fail_unless_equals_int (ret, GST_FLOW_OK);
  gap = sattn_buffer_new (x + 30 * d, d * sizeof (float), 30 * GST_MSECOND, 0);
  GST_BUFFER_FLAG_SET (gap, GST_BUFFER_FLAG_GAP);
  fail_unless_equals_int (gst_harness_push (h, gap), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + 31 * d,
              9 * d * sizeof (float), 31 * GST_MSECOND, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  fail_unless_equals_int (o.floats->len, T * d);
  fail_unless (all_finite (&o, &bad), "%" G_GSIZE_FORMAT " non-finite", bad);
  for (i = 0; i < T; i++) {
    const float *r = &g_array_index (o.floats, float, i * d);
    gboolean zero = r[0] == 0.0f && r[1] == 0.0f;

    if (i == 10 || i == 25)
      fail_unless (zero == (policy == INV_MASK), "frame %" G_GSIZE_FORMAT
          ": row (%g, %g) under policy %d", i, r[0], r[1], policy);
    if (i == 30)
      fail_unless (zero, "GAP frame: row (%g, %g)", r[0], r[1]);
  }
  drain_bus (bus, &b);
  fail_unless (strstr (b.warnings->str, "projection overflows float32")
      != NULL, "no overflow warning; warnings: %s", b.warnings->str);
  /* Both frames are within 10 s of stream time: one warning. */
  fail_unless_equals_int (count_in (b.warnings->str,
          "query/key/value projection overflows"), 1);
  if (post) {
    fail_unless (b.messages > 0);
    fail_unless_equals_uint64 (b.ovf_frames, 2);
    fail_unless_equals_uint64 (b.invalid, 3);   /* 2 overflows + 1 GAP */
    fail_unless_equals_uint64 (b.ovf_rows, 0);
  }
  sattn_output_clear (&o);

done:
  g_string_free (b.warnings, TRUE);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

/* W_o = 1e30 I: rows whose context reaches 1e10 (the loud frames 12-13)
 * overflow after the output projection; quiet rows (|out| <= 1e30) do
 * not.  __i__: policy = i % 3, post-messages = i / 3. */
GST_START_TEST (test_output_projection_overflow)
{
  const gint policy = __i__ % 3;
  const gboolean post = __i__ / 3;
  const gsize d = 2, T = 32;
  gchar *path = write_weights (1.0f, 1e30f);
  float x[32 * 2];
  GstHarness *h;
  GstBus *bus;
  SattnOutput o;
  BusSummary b = { g_string_new (NULL), 0, 0, 0, 0 };
  gsize i, zero_rows;

  sattn_fill_signal (x, T * d, 11, 1.0f);
  for (i = 12 * d; i < 14 * d; i++)
    x[i] = 1e10f;
  h = sattn_harness_new ("window", 8, "hop", 4, "weights", path,
      "invalid-frames", policy, "post-messages", post, "message-interval",
      (guint64) 0, NULL);
  bus = sattn_attach_bus (h);
  zero_rows = push_count_zero_rows (h, x, T, d, &o);
  /* At least the loud frames' own rows overflow (context ~1e10 × 1e30). */
  fail_unless (zero_rows >= 2, "%" G_GSIZE_FORMAT " zero rows", zero_rows);
  fail_unless (zero_rows < T, "every row zero");
  drain_bus (bus, &b);
  fail_unless (strstr (b.warnings->str, "output projection overflows")
      != NULL, "no output projection warning; warnings: %s", b.warnings->str);
  if (post)
    fail_unless_equals_uint64 (b.ovf_rows, zero_rows);

  sattn_output_clear (&o);
  g_string_free (b.warnings, TRUE);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

/* A safetensors file of a pre-norm nn.TransformerEncoderLayer with
 * d_model = 2, 1 head, d_ff = 4, ReLU: identity attention projections,
 * norm weights 1 and biases 0, linear1 = [I; -I] (the hidden row is
 * relu (n, -n) of norm2's output n = (+-1, -+1)), linear2 = w2 everywhere:
 * each output of linear2 is 2 × w2 for a row with two distinct values. */
static gchar *
write_prenorm_layer (gfloat w2)
{
  static const struct
  {
    const gchar *name;
    gsize rows, cols;           /* cols 0: a vector */
  } t[] = {
    {"self_attn.in_proj_weight", 6, 2},
    {"self_attn.in_proj_bias", 6, 0},
    {"self_attn.out_proj.weight", 2, 2},
    {"self_attn.out_proj.bias", 2, 0},
    {"linear1.weight", 4, 2},
    {"linear1.bias", 4, 0},
    {"linear2.weight", 2, 4},
    {"linear2.bias", 2, 0},
    {"norm1.weight", 2, 0},
    {"norm1.bias", 2, 0},
    {"norm2.weight", 2, 0},
    {"norm2.bias", 2, 0},
  };
  StWriter *w = st_writer_new ();
  float v[12];
  gsize i, j;

  fail_unless (w != NULL);
  st_writer_meta (w, "format", "pt");
  st_writer_meta (w, "norm_first", "true");
  st_writer_meta (w, "activation", "relu");
  for (i = 0; i < G_N_ELEMENTS (t); i++) {
    gsize n = t[i].rows * (t[i].cols ? t[i].cols : 1);

    for (j = 0; j < n; j++) {
      v[j] = 0.0f;
      if (i == 0 || i == 2)     /* identity rows: [I; I; I], I */
        v[j] = (j % 2) == (j / 2) % 2 ? 1.0f : 0.0f;
      else if (i == 4)          /* [I; -I] */
        v[j] = (j % 2) == (j / 2) % 2 ? (j < 4 ? 1.0f : -1.0f) : 0.0f;
      else if (i == 6)
        v[j] = w2;
      else if (i == 8 || i == 10)
        v[j] = 1.0f;
    }
    st_writer_f32_2d (w, t[i].name, v, t[i].rows, t[i].cols);
  }
  return save_tmp (w);
}

/* A pre-norm encoder whose feed-forward overflows (linear2 = 3e38: its
 * outputs are 6e38) while its output projection (the identity) does
 * not.  __i__: policy = i % 3, post-messages = i / 3.  Every row with
 * two distinct values overflows; the warning must name linear2, and
 * invalid-frames=error must not stop the stream: it applies to input
 * frames, and every frame here is finite with finite projections. */
GST_START_TEST (test_feed_forward_overflow)
{
  const gint policy = __i__ % 3;
  const gboolean post = __i__ / 3;
  const gsize d = 2, T = 32;
  gchar *path = write_prenorm_layer (3e38f);
  float x[32 * 2];
  GstHarness *h;
  GstBus *bus;
  SattnOutput o;
  BusSummary b = { g_string_new (NULL), 0, 0, 0, 0 };
  gsize zero_rows;

  sattn_fill_signal (x, T * d, 5, 1.0f);
  h = sattn_harness_new ("window", 8, "hop", 4, "heads", 1, "weights", path,
      "invalid-frames", policy, "post-messages", post, "message-interval",
      (guint64) 0, NULL);
  bus = sattn_attach_bus (h);
  zero_rows = push_count_zero_rows (h, x, T, d, &o);
  fail_unless (zero_rows >= T / 2, "%" G_GSIZE_FORMAT " zero rows", zero_rows);
  drain_bus (bus, &b);
  fail_unless (strstr (b.warnings->str, "The feed-forward's linear2 "
          "overflows float32") != NULL, "no linear2 warning; warnings: %s",
      b.warnings->str);
  fail_unless (strstr (b.warnings->str, "output projection") == NULL,
      "the output projection blamed; warnings: %s", b.warnings->str);
  fail_unless (strstr (b.warnings->str, "linear2 weights") != NULL,
      "warnings: %s", b.warnings->str);
  fail_unless_equals_int (count_in (b.warnings->str, "overflows float32"), 1);
  if (post) {
    fail_unless_equals_uint64 (b.ovf_rows, zero_rows);
    fail_unless_equals_uint64 (b.ovf_frames, 0);
    fail_unless_equals_uint64 (b.invalid, 0);
  }

  sattn_output_clear (&o);
  g_string_free (b.warnings, TRUE);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

static Suite *
sattn_overflow_suite (void)
{
  Suite *s = suite_create ("sattn-overflow");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_mean_edge_of_range);
  tcase_add_loop_test (tc, test_qkv_overflow, 0, 6);
  tcase_add_loop_test (tc, test_output_projection_overflow, 0, 6);
  tcase_add_loop_test (tc, test_feed_forward_overflow, 0, 6);
  return s;
}

GST_CHECK_MAIN (sattn_overflow);
