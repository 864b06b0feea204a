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
 * Then swaps between files written here (random, seeded: RoPE, ALiBi,
 * encoder layers, heads from the metadata, the hf / bert / llama
 * layouts, whole models with output=classes), compared byte for byte
 * with fresh elements fed the same caps and buffers: the rows before the
 * boundary are fresh A's, the rows from it fresh B's.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "sattn/sattn-weights.h"
#include "st-builder.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

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
  fail_unless_equals_uint64 (next, gst_util_uint64_scale (T, GST_SECOND, RATE));
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
  msg = gst_bus_timed_pop_filtered (bus, 10 * GST_SECOND, GST_MESSAGE_WARNING);
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
  /* The property names the file in use again (a later caps event or
   * READY reads it). */
  g_object_get (h->element, "weights", &prop, NULL);
  fail_unless_equals_string (prop, a);
  g_free (prop);

  ref_a = fresh_rows (a, x, T, OUT_FRAMES, &T);
  got = pull_rows (h, T, T);
  sattn_assert_close ("refused swap: every row vs fresh A", got, ref_a, T * D);
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

/* ==================================================================
 * Swaps compared byte for byte with fresh elements.
 *
 * The weights files below are written here (random values from a fixed
 * seed) in the layouts the one loader reads.  A run records what it fed
 * (caps and buffers, in order); a fresh element with file A, and one
 * with file B, are then fed exactly the same, and the swapping element's
 * rows before the boundary must have the bytes of fresh A's, the rows
 * from the boundary on the bytes of fresh B's.  Each comparison first
 * checks that A and B give different rows on both sides, so that a swap
 * that did nothing, or happened at the wrong place, fails.
 * ================================================================== */

static gchar *tmp_dir;

static gchar *
tmp_path (const gchar * name)
{
  GError *err = NULL;

  if (tmp_dir == NULL) {
    tmp_dir = g_dir_make_tmp ("sattn-swap-XXXXXX", &err);
    fail_unless (tmp_dir != NULL, "%s", err ? err->message : "");
  }
  return g_build_filename (tmp_dir, name, NULL);
}

/* After each test (in its process): the files it wrote. */
static void
tmp_cleanup (void)
{
  GDir *d;
  const gchar *n;

  if (tmp_dir == NULL)
    return;
  d = g_dir_open (tmp_dir, 0, NULL);
  while (d != NULL && (n = g_dir_read_name (d)) != NULL) {
    gchar *p = g_build_filename (tmp_dir, n, NULL);

    g_unlink (p);
    g_free (p);
  }
  if (d != NULL)
    g_dir_close (d);
  g_rmdir (tmp_dir);
  g_clear_pointer (&tmp_dir, g_free);
}

/* ------------------------------------------------------ weights files */

/* The weights files of st-builder.c, named name in the test's directory
 * (g_free the path). */
static gchar *
write_layer (const gchar * name, guint32 seed, Layout layout, gsize e,
    gsize d_out, guint heads, const gchar * positions, gsize ff)
{
  gchar *path = tmp_path (name);
  gchar *r = st_write_layer (path, seed, layout, e, d_out, heads, positions,
      ff);

  g_free (path);
  return r;
}

static gchar *
write_whole (const gchar * name, guint32 seed, const WholeSpec * s)
{
  gchar *path = tmp_path (name);
  gchar *r = st_write_whole (path, seed, s);

  g_free (path);
  return r;
}

/* ---------------------------------------------------- feeding, replayed */

/* The element's settings in a comparison. */
typedef struct
{
  guint channels;               /* floats per frame (frame-size 1) */
  guint window, hop;
  guint heads;                  /* 0: not set (the file's metadata) */
  const gchar *output;          /* the output property's nick */
  gsize row_floats;             /* floats per output row */
  gboolean per_window;          /* a row per window (else per frame) */
} Setup;

static GstHarness *
setup_harness (const Setup * s, const gchar * weights)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstHarness *h;

  fail_unless (e != NULL, "the sattn element is not available");
  g_object_set (e, "weights", weights, "window", s->window, "hop", s->hop,
      NULL);
  if (s->heads != 0)
    g_object_set (e, "heads", s->heads, NULL);
  gst_util_set_object_arg (G_OBJECT (e), "output", s->output);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  return h;
}

/* What a run fed, in order: caps of a rate (rate > 0), or the next
 * `frames` frames as one buffer. */
typedef struct
{
  gint rate;
  gsize frames;
} FeedOp;

typedef struct
{
  GstHarness *h;
  GstBus *bus;
  const float *x;
  gsize d, x_frames;
  gsize pos;                    /* frames fed so far */
  gint rate;                    /* of the current caps (0: none yet) */
  GstClockTime t0;              /* PTS of frame f0 */
  gsize f0;                     /* first frame under the current caps */
  GArray *ops;                  /* FeedOp, recorded */
} Feeder;

static void
feeder_init (Feeder * fd, GstHarness * h, const float *x, gsize d,
    gsize x_frames)
{
  memset (fd, 0, sizeof (*fd));
  fd->h = h;
  fd->bus = sattn_attach_bus (h);
  fd->x = x;
  fd->d = d;
  fd->x_frames = x_frames;
  fd->ops = g_array_new (FALSE, FALSE, sizeof (FeedOp));
}

/* New caps: a new rate, the timeline continuing where it was. */
static void
feeder_caps (Feeder * fd, gint rate)
{
  FeedOp op = { rate, 0 };

  if (fd->rate != 0)
    fd->t0 += gst_util_uint64_scale (fd->pos - fd->f0, GST_SECOND, fd->rate);
  fd->f0 = fd->pos;
  fd->rate = rate;
  sattn_set_caps (fd->h, rate, (gint) fd->d);
  g_array_append_val (fd->ops, op);
}

/* One buffer of the next n frames; the element must take it. */
static void
feeder_push (Feeder * fd, gsize n)
{
  FeedOp op = { 0, n };
  GstClockTime pts = fd->t0 + gst_util_uint64_scale (fd->pos - fd->f0,
      GST_SECOND, fd->rate);

  fail_unless (fd->pos + n <= fd->x_frames);
  fail_unless_equals_int (gst_harness_push (fd->h,
          sattn_buffer_new (fd->x + fd->pos * fd->d,
              n * fd->d * sizeof (float), pts, 0)), GST_FLOW_OK);
  fd->pos += n;
  g_array_append_val (fd->ops, op);
}

/* n frames in buffers of FRAMES_PER_BUF (the last one shorter). */
static void
feeder_push_frames (Feeder * fd, gsize n)
{
  while (n > 0) {
    gsize k = MIN (n, FRAMES_PER_BUF);

    feeder_push (fd, k);
    n -= k;
  }
}

static void
feeder_replay (Feeder * fd, const GArray * ops)
{
  guint i;

  for (i = 0; i < ops->len; i++) {
    const FeedOp *op = &g_array_index (ops, FeedOp, i);

    if (op->rate > 0)
      feeder_caps (fd, op->rate);
    else
      feeder_push (fd, op->frames);
  }
}

/* Fails on an ERROR message; the number of WARNING messages popped (the
 * text of the first in *first when first is not NULL). */
static guint
pop_warnings (GstBus * bus, gchar ** first)
{
  GstMessage *msg;
  guint n = 0;

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING |
              GST_MESSAGE_ERROR)) != NULL) {
    GError *err = NULL;
    gchar *dbg = NULL;

    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      gst_message_parse_error (msg, &err, &dbg);
      fail ("an error was posted: %s (%s)", err->message, dbg ? dbg : "");
    }
    gst_message_parse_warning (msg, &err, &dbg);
    GST_INFO ("warning: %s", err->message);
    if (n == 0 && first != NULL)
      *first = g_strdup (err->message);
    n++;
    g_clear_error (&err);
    g_free (dbg);
    gst_message_unref (msg);
  }
  return n;
}

/* EOS, then every float that came out; no error posted.  The harness is
 * torn down. */
static GArray *
feeder_finish (Feeder * fd)
{
  SattnOutput o;
  GArray *floats;

  fail_unless (gst_harness_push_event (fd->h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (fd->h, &o);
  pop_warnings (fd->bus, NULL);
  floats = g_array_ref (o.floats);
  sattn_output_clear (&o);
  g_array_unref (fd->ops);
  sattn_detach_bus (fd->h, fd->bus);
  gst_harness_teardown (fd->h);
  return floats;
}

/* The output of a fresh element with weights fed ops. */
static GArray *
fresh_run (const Setup * s, const gchar * weights, const float *x,
    gsize x_frames, const GArray * ops)
{
  Feeder fd;

  feeder_init (&fd, setup_harness (s, weights), x, s->channels, x_frames);
  feeder_replay (&fd, ops);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  return feeder_finish (&fd);
}

/* The floats [from, to) of got have the bytes of ref's. */
static void
assert_same_bytes (const gchar * label, const GArray * got,
    const GArray * ref, gsize from, gsize to, gsize row_floats)
{
  const float *g = (const float *) got->data, *r = (const float *) ref->data;
  gsize i;

  fail_unless (to <= got->len && to <= ref->len, "%s: %u and %u floats, "
      "[%" G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT ") asked for", label,
      got->len, ref->len, from, to);
  for (i = from; i < to; i++)
    if (memcmp (&g[i], &r[i], sizeof (float)) != 0)
      break;
  GST_INFO ("%s: floats [%" G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT ") %s", label,
      from, to, i == to ? "equal" : "differ");
  fail_unless (i == to, "%s: row %" G_GSIZE_FORMAT " value %" G_GSIZE_FORMAT
      " is %.9g where the fresh element gives %.9g", label, i / row_floats,
      i % row_floats, g[i], r[i]);
}

/* The floats [from, to) of a and b differ somewhere. */
static void
assert_differ (const gchar * label, const GArray * a, const GArray * b,
    gsize from, gsize to)
{
  fail_unless (to > from && to <= a->len && to <= b->len);
  fail_if (memcmp ((const float *) a->data + from,
          (const float *) b->data + from, (to - from) * sizeof (float)) == 0,
      "%s: the two files give the same rows, so this comparison cannot "
      "tell them apart", label);
}

/* Runs the element on A, asks for B after t1 frames, feeds until the
 * swap message and t_after frames more; then compares against fresh A
 * and fresh B fed the same.  Returns the boundary's frame. */
static guint64
swap_exact (const Setup * s, const gchar * a, const gchar * b)
{
  const gsize t1 = 4 * s->window + 3, t_after = 5 * s->window + 11;
  const gsize t_max = 20000;
  float *x = g_new (float, t_max * s->channels);
  Feeder fd;
  GArray *ops, *got, *ref_a, *ref_b;
  gint64 at = -1;
  gsize r_at, n;
  gchar *prop = NULL;

  sattn_fill_signal (x, t_max * s->channels, 77, 1.0f);
  feeder_init (&fd, setup_harness (s, a), x, s->channels, t_max);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, t1);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);

  g_object_set (fd.h->element, "weights", b, NULL);
  /* Frames keep flowing while B loads; it takes over at a boundary. */
  while (at < 0 && fd.pos + FRAMES_PER_BUF <= t_max - t_after) {
    feeder_push (&fd, FRAMES_PER_BUF);
    at = swapped_at (fd.bus, b);
    if (at < 0)
      g_usleep (1000);
  }
  fail_unless (at >= 0, "no swap after %" G_GSIZE_FORMAT " frames: %s",
      fd.pos, "B was refused or never taken over");
  fail_unless (at >= (gint64) t1 && at <= (gint64) fd.pos);
  fail_unless_equals_int (at % s->hop, 0);
  feeder_push_frames (&fd, t_after);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  g_object_get (fd.h->element, "weights", &prop, NULL);
  fail_unless_equals_string (prop, b);
  g_free (prop);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref_a = fresh_run (s, a, x, t_max, ops);
  ref_b = fresh_run (s, b, x, t_max, ops);
  fail_unless_equals_int (got->len, ref_a->len);
  fail_unless_equals_int (got->len, ref_b->len);
  fail_unless_equals_int (got->len % s->row_floats, 0);
  n = got->len;
  r_at = (s->per_window ? (gsize) at / s->hop : (gsize) at) * s->row_floats;
  GST_INFO ("swap at frame %" G_GINT64_FORMAT ": %" G_GSIZE_FORMAT " rows "
      "before it, %" G_GSIZE_FORMAT " from it", at, r_at / s->row_floats,
      (n - r_at) / s->row_floats);
  fail_unless (r_at > 0 && r_at < n);
  assert_differ ("before the boundary", ref_a, ref_b, 0, r_at);
  assert_differ ("from the boundary", ref_a, ref_b, r_at, n);
  assert_same_bytes ("rows before the boundary vs fresh A", got, ref_a, 0,
      r_at, s->row_floats);
  assert_same_bytes ("rows from the boundary vs fresh B", got, ref_b, r_at,
      n, s->row_floats);

  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref_a);
  g_array_unref (ref_b);
  g_free (x);
  return (guint64) at;
}

static const Setup layer_setup = {
  .channels = 16, .window = 16, .hop = 5, .heads = 2, .output = "frames",
  .row_floats = 16, .per_window = FALSE
};

/* Two RoPE files of the same geometry: the positions go on across the
 * boundary (the new model's frames keep their absolute indices). */
GST_START_TEST (test_swap_exact_rope)
{
  gchar *a = write_layer ("rope-a.safetensors", 1, LAYOUT_MHA, 16, 16, 2,
      "rope", 0);
  gchar *b = write_layer ("rope-b.safetensors", 2, LAYOUT_MHA, 16, 16, 2,
      "rope", 0);

  swap_exact (&layer_setup, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

GST_START_TEST (test_swap_exact_alibi)
{
  gchar *a = write_layer ("alibi-a.safetensors", 3, LAYOUT_MHA, 16, 16, 2,
      "alibi", 0);
  gchar *b = write_layer ("alibi-b.safetensors", 4, LAYOUT_MHA, 16, 16, 2,
      "alibi", 0);

  swap_exact (&layer_setup, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

/* nn.TransformerEncoderLayer files with RoPE, heads from their metadata. */
GST_START_TEST (test_swap_exact_encoder_rope)
{
  Setup s = layer_setup;
  gchar *a = write_layer ("enc-a.safetensors", 5, LAYOUT_MHA, 16, 16, 2,
      "rope", 32);
  gchar *b = write_layer ("enc-b.safetensors", 6, LAYOUT_MHA, 16, 16, 2,
      "rope", 32);

  s.heads = 0;
  swap_exact (&s, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

/* heads not set: both files say 4 heads in their metadata. */
GST_START_TEST (test_swap_exact_heads_from_metadata)
{
  Setup s = layer_setup;
  gchar *a = write_layer ("meta-a.safetensors", 7, LAYOUT_MHA, 16, 16, 4,
      NULL, 0);
  gchar *b = write_layer ("meta-b.safetensors", 8, LAYOUT_MHA, 16, 16, 4,
      NULL, 0);

  s.heads = 0;
  swap_exact (&s, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

GST_START_TEST (test_swap_exact_hf)
{
  gchar *a = write_layer ("hf-a.safetensors", 9, LAYOUT_HF, 16, 16, 2, NULL,
      0);
  gchar *b = write_layer ("hf-b.safetensors", 10, LAYOUT_HF, 16, 16, 2, NULL,
      0);

  swap_exact (&layer_setup, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

GST_START_TEST (test_swap_exact_bert)
{
  Setup s = layer_setup;
  gchar *a = write_layer ("bert-a.safetensors", 11, LAYOUT_BERT, 16, 16, 2,
      NULL, 0);
  gchar *b = write_layer ("bert-b.safetensors", 12, LAYOUT_BERT, 16, 16, 2,
      NULL, 0);

  s.heads = 0;
  swap_exact (&s, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

GST_START_TEST (test_swap_exact_llama)
{
  Setup s = layer_setup;
  gchar *a = write_layer ("llama-a.safetensors", 13, LAYOUT_LLAMA, 16, 16, 2,
      "rope", 0);
  gchar *b = write_layer ("llama-b.safetensors", 14, LAYOUT_LLAMA, 16, 16, 2,
      "rope", 0);

  s.heads = 0;
  swap_exact (&s, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

/* Whole models, output=classes: one row of class probabilities per
 * window.  A and B differ in everything a swap may change (positions,
 * head, final norm, norm placement) but their classes. */
GST_START_TEST (test_swap_exact_whole_classes)
{
  const Setup s = {
    .channels = 6, .window = 12, .hop = 4, .heads = 0, .output = "classes",
    .row_floats = 5, .per_window = TRUE
  };
  const WholeSpec wa = {
    .f = 6, .d = 16, .n_layers = 2, .ff = 24, .classes = 5, .max_window = 12,
    .heads = 2, .positions = "learned", .mlp = FALSE, .final_norm = TRUE,
    .norm_first = FALSE
  };
  const WholeSpec wb = {
    .f = 6, .d = 16, .n_layers = 3, .ff = 20, .classes = 5, .max_window = 0,
    .heads = 4, .positions = "rope", .mlp = TRUE, .final_norm = FALSE,
    .norm_first = TRUE
  };
  gchar *a = write_whole ("whole-a.safetensors", 15, &wa);
  gchar *b = write_whole ("whole-b.safetensors", 16, &wb);

  swap_exact (&s, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

/* The same whole model kind with ALiBi on both sides. */
GST_START_TEST (test_swap_exact_whole_alibi)
{
  const Setup s = {
    .channels = 6, .window = 12, .hop = 4, .heads = 0, .output = "classes",
    .row_floats = 3, .per_window = TRUE
  };
  WholeSpec w = {
    .f = 6, .d = 16, .n_layers = 2, .ff = 24, .classes = 3, .max_window = 0,
    .heads = 2, .positions = "alibi", .mlp = FALSE, .final_norm = TRUE,
    .norm_first = FALSE
  };
  gchar *a = write_whole ("whole-alibi-a.safetensors", 17, &w);
  gchar *b = write_whole ("whole-alibi-b.safetensors", 18, &w);

  swap_exact (&s, a, b);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

/* ------------------------------------------------------ refused swaps */

/* What the refusal tests run: file A (attention, E = 16, 2 heads in its
 * metadata, `heads` not set) in frames mode. */
static const Setup refuse_setup = {
  .channels = 16, .window = 16, .hop = 5, .heads = 0, .output = "frames",
  .row_floats = 16, .per_window = FALSE
};

static gchar *
write_a (void)
{
  return write_layer ("a.safetensors", 21, LAYOUT_MHA, 16, 16, 2, NULL, 0);
}

static gchar *
bad_missing (const gchar * a)
{
  (void) a;
  return tmp_path ("absent.safetensors");
}

/* The first half of A's bytes. */
static gchar *
bad_truncated (const gchar * a)
{
  gchar *p = tmp_path ("truncated.safetensors"), *buf = NULL;
  gsize len = 0;

  fail_unless (g_file_get_contents (a, &buf, &len, NULL));
  fail_unless (g_file_set_contents (p, buf, (gssize) (len / 2), NULL));
  g_free (buf);
  return p;
}

static gchar *
bad_not_safetensors (const gchar * a)
{
  gchar *p = tmp_path ("text.safetensors");

  (void) a;
  fail_unless (g_file_set_contents (p, "not a safetensors file\n", -1, NULL));
  return p;
}

/* Frames of 24 values: not the stream's 16. */
static gchar *
bad_geometry (const gchar * a)
{
  (void) a;
  return write_layer ("e24.safetensors", 22, LAYOUT_MHA, 24, 24, 3, NULL, 0);
}

/* Output rows of 8 values: downstream has caps for 16. */
static gchar *
bad_d_out (const gchar * a)
{
  (void) a;
  return write_layer ("dout8.safetensors", 23, LAYOUT_HF, 16, 8, 2, NULL, 0);
}

/* A whole model where one attention layer runs: other output. */
static gchar *
bad_whole (const gchar * a)
{
  const WholeSpec w = {
    .f = 16, .d = 16, .n_layers = 1, .ff = 16, .classes = 16, .max_window = 0,
    .heads = 2, .positions = "none", .mlp = FALSE, .final_norm = FALSE,
    .norm_first = FALSE
  };

  (void) a;
  return write_whole ("whole16.safetensors", 24, &w);
}

/* No num_heads in the metadata and `heads` not set: the loader refuses
 * to guess. */
static gchar *
bad_no_heads (const gchar * a)
{
  (void) a;
  return write_layer ("noheads.safetensors", 25, LAYOUT_MHA, 16, 16, 0, NULL,
      0);
}

typedef gchar *(*BadFile) (const gchar * a);

static const struct
{
  const gchar *what;
  BadFile make;
} bad_files[] = {
  {"missing file", bad_missing},
  {"truncated file", bad_truncated},
  {"not a safetensors file", bad_not_safetensors},
  {"other geometry (E = 24)", bad_geometry},
  {"other d_out (8)", bad_d_out},
  {"a whole model", bad_whole},
  {"no head count", bad_no_heads},
};

/* Pops the warning about bad (waiting up to 10 s for it); it names the
 * file and says the running model stays. */
static void
expect_refusal (GstBus * bus, const gchar * bad)
{
  GstMessage *msg;
  GError *err = NULL;
  gchar *dbg = NULL;

  msg = gst_bus_timed_pop_filtered (bus, 10 * GST_SECOND,
      GST_MESSAGE_WARNING | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "no warning for %s", bad);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    gst_message_parse_error (msg, &err, &dbg);
    fail ("an error was posted for %s: %s", bad, err->message);
  }
  gst_message_parse_warning (msg, &err, &dbg);
  GST_INFO ("warning: %s", err->message);
  fail_unless (strstr (err->message, bad) != NULL,
      "the warning does not name the file: %s", err->message);
  fail_unless (strstr (err->message, "stays in use") != NULL,
      "the warning does not say the model stays: %s", err->message);
  g_clear_error (&err);
  g_free (dbg);
  gst_message_unref (msg);
}

static void
expect_weights (GstHarness * h, const gchar * path)
{
  gchar *prop = NULL;

  g_object_get (h->element, "weights", &prop, NULL);
  fail_unless_equals_string (prop, path);
  g_free (prop);
}

/* A refused swap (loader thread), then a rate change: the element keeps
 * running on A, the property names A again, and every row has the bytes
 * of a fresh element on A fed the same. */
GST_START_TEST (test_refused_then_caps)
{
  const gsize t_max = 400;
  gchar *a = write_a (), *bad = bad_files[__i__].make (a);
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref;

  GST_INFO ("refused: %s", bad_files[__i__].what);
  sattn_fill_signal (x, t_max * 16, 78, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 105);
  g_object_set (fd.h->element, "weights", bad, NULL);
  feeder_push (&fd, FRAMES_PER_BUF);    /* the loader starts here */
  expect_refusal (fd.bus, bad);
  expect_weights (fd.h, a);
  feeder_push_frames (&fd, 30);
  /* New caps read the weights property again. */
  feeder_caps (&fd, 2 * RATE);
  feeder_push_frames (&fd, 100);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  expect_weights (fd.h, a);
  fail_unless (swapped_at (fd.bus, bad) < 0);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref = fresh_run (&refuse_setup, a, x, t_max, ops);
  fail_unless_equals_int (got->len, fd.pos * 16);
  fail_unless_equals_int (got->len, ref->len);
  assert_same_bytes ("every row vs fresh A", got, ref, 0, ref->len, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref);
  g_free (x);
  g_free (a);
  g_free (bad);
}

GST_END_TEST;

/* Caps that come before the loader has looked at the file (here: before
 * any buffer after the request) read the property themselves: the
 * request is refused there the same way, A stays. */
GST_START_TEST (test_refused_at_caps)
{
  const gsize t_max = 400;
  gchar *a = write_a (), *bad = bad_files[__i__].make (a);
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref;

  GST_INFO ("refused at caps: %s", bad_files[__i__].what);
  sattn_fill_signal (x, t_max * 16, 79, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 105);
  g_object_set (fd.h->element, "weights", bad, NULL);
  feeder_caps (&fd, 2 * RATE);
  expect_refusal (fd.bus, bad);
  expect_weights (fd.h, a);
  feeder_push_frames (&fd, 100);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 50);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  expect_weights (fd.h, a);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref = fresh_run (&refuse_setup, a, x, t_max, ops);
  fail_unless_equals_int (got->len, ref->len);
  assert_same_bytes ("every row vs fresh A", got, ref, 0, ref->len, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref);
  g_free (x);
  g_free (a);
  g_free (bad);
}

GST_END_TEST;

/* Set while PLAYING but before the first caps, weights is a swap request
 * like any other: the model read at READY is the one running, so a file
 * that cannot serve the stream is refused with a warning and A (which
 * fits) runs from the first frame.  (Set in READY, the same file is the
 * configured one and fails the state change as usual.) */
GST_START_TEST (test_refused_before_first_caps)
{
  const gsize t_max = 300;
  gchar *a = write_a (), *bad = bad_files[__i__].make (a);
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref;

  GST_INFO ("refused before caps: %s", bad_files[__i__].what);
  sattn_fill_signal (x, t_max * 16, 80, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  g_object_set (fd.h->element, "weights", bad, NULL);
  feeder_caps (&fd, RATE);
  expect_refusal (fd.bus, bad);
  expect_weights (fd.h, a);
  feeder_push_frames (&fd, 200);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref = fresh_run (&refuse_setup, a, x, t_max, ops);
  fail_unless_equals_int (got->len, 200 * 16);
  fail_unless_equals_int (got->len, ref->len);
  assert_same_bytes ("every row vs fresh A", got, ref, 0, ref->len, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref);
  g_free (x);
  g_free (a);
  g_free (bad);
}

GST_END_TEST;

/* weights-prefix changes the request too: a prefix under which the file
 * holds nothing is refused like a bad file, both properties name what is
 * in use again, and new caps run A. */
GST_START_TEST (test_refused_prefix)
{
  const gsize t_max = 400;
  gchar *a = write_a (), *prefix = NULL;
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref;

  sattn_fill_signal (x, t_max * 16, 84, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 70);
  g_object_set (fd.h->element, "weights-prefix", "encoder.layers.7.", NULL);
  feeder_push (&fd, FRAMES_PER_BUF);
  expect_refusal (fd.bus, a);
  expect_weights (fd.h, a);
  g_object_get (fd.h->element, "weights-prefix", &prefix, NULL);
  fail_unless_equals_string (prefix, "");
  g_free (prefix);
  feeder_push_frames (&fd, 30);
  feeder_caps (&fd, 2 * RATE);
  feeder_push_frames (&fd, 100);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref = fresh_run (&refuse_setup, a, x, t_max, ops);
  fail_unless_equals_int (got->len, fd.pos * 16);
  fail_unless_equals_int (got->len, ref->len);
  assert_same_bytes ("every row vs fresh A", got, ref, 0, ref->len, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref);
  g_free (x);
  g_free (a);
}

GST_END_TEST;

/* The complement: a file that fits, set before the first caps, runs
 * from the first frame (no warning). */
GST_START_TEST (test_swap_before_first_caps)
{
  const gsize t_max = 300;
  gchar *a = write_a ();
  gchar *b = write_layer ("b.safetensors", 26, LAYOUT_HF, 16, 16, 2, "rope",
      0);
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref_a, *ref_b;

  sattn_fill_signal (x, t_max * 16, 81, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  g_object_set (fd.h->element, "weights", b, NULL);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 200);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  expect_weights (fd.h, b);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref_a = fresh_run (&refuse_setup, a, x, t_max, ops);
  ref_b = fresh_run (&refuse_setup, b, x, t_max, ops);
  fail_unless_equals_int (got->len, ref_b->len);
  assert_differ ("A against B", ref_a, ref_b, 0, ref_b->len);
  assert_same_bytes ("every row vs fresh B", got, ref_b, 0, ref_b->len, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref_a);
  g_array_unref (ref_b);
  g_free (x);
  g_free (a);
  g_free (b);
}

GST_END_TEST;

/* A refused swap never stops the pipeline: every kind of refusal in one
 * run, each seen by the loader or by new caps, each followed by new
 * caps; every buffer is taken, no error, and every row is fresh A's. */
GST_START_TEST (test_refused_never_stops)
{
  const gsize t_max = 4000;
  gchar *a = write_a ();
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref;
  guint i;

  sattn_fill_signal (x, t_max * 16, 82, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 40);
  for (i = 0; i < 2 * G_N_ELEMENTS (bad_files); i++) {
    gchar *bad = bad_files[i / 2].make (a);

    GST_INFO ("refusal %u: %s, %s", i, bad_files[i / 2].what, i % 2 ?
        "at caps" : "by the loader");
    g_object_set (fd.h->element, "weights", bad, NULL);
    if (i % 2 == 0)
      feeder_push (&fd, FRAMES_PER_BUF);
    else
      feeder_caps (&fd, fd.rate == RATE ? 2 * RATE : RATE);
    expect_refusal (fd.bus, bad);
    feeder_push_frames (&fd, 33);
    feeder_caps (&fd, fd.rate == RATE ? 2 * RATE : RATE);
    feeder_push_frames (&fd, 41);
    fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
    expect_weights (fd.h, a);
    g_free (bad);
  }
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref = fresh_run (&refuse_setup, a, x, t_max, ops);
  fail_unless_equals_int (got->len, fd.pos * 16);
  fail_unless_equals_int (got->len, ref->len);
  assert_same_bytes ("every row vs fresh A", got, ref, 0, ref->len, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref);
  g_free (x);
  g_free (a);
}

GST_END_TEST;

/* When nothing in use can serve the caps (here identity projections
 * with heads=3 on 16-value frames), the file set while running is the
 * configuration: what is wrong with it is the element error READY would
 * post, in the core's words (a whole model cannot give output=frames),
 * not a refused swap and not a memory size. */
GST_START_TEST (test_configured_at_caps_error)
{
  const WholeSpec w = {
    .f = 16, .d = 18, .n_layers = 1, .ff = 16, .classes = 4, .max_window = 0,
    .heads = 3, .positions = "none", .mlp = FALSE, .final_norm = FALSE,
    .norm_first = FALSE
  };
  gchar *whole = write_whole ("whole-h3.safetensors", 28, &w);
  const Setup s = {
    .channels = 16, .window = 8, .hop = 4, .heads = 3, .output = "frames",
    .row_floats = 16, .per_window = FALSE
  };
  GstHarness *h = setup_harness (&s, NULL);
  GstBus *bus = sattn_attach_bus (h);
  gchar *msg;

  g_object_set (h->element, "weights", whole, NULL);
  sattn_set_caps (h, RATE, 16);
  msg = sattn_pop_error (bus);
  fail_unless (strstr (msg, whole) != NULL, "the error does not name the "
      "file: %s", msg);
  fail_unless (strstr (msg, "cannot run with these properties") != NULL,
      "not the error READY posts: %s", msg);
  fail_unless (strstr (msg, "frames") != NULL, "the error does not say "
      "what the model cannot give: %s", msg);
  fail_unless (strstr (msg, "EiB") == NULL && strstr (msg, "memory") == NULL,
      "a memory error for a model that cannot run: %s", msg);
  g_free (msg);
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING) == NULL,
      "a refused swap where the file is the configuration");
  expect_weights (h, whole);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_free (whole);
}

GST_END_TEST;

/* After a swap A -> B, weights set back to A and new caps at once (before
 * the loader saw the request): the caps run A, the file the property
 * names, not the one the stream was set up with; then B again through
 * new caps runs B. */
GST_START_TEST (test_swap_then_caps)
{
  const gsize t_max = 20000;
  gchar *a = write_a ();
  gchar *b = write_layer ("b.safetensors", 27, LAYOUT_MHA, 16, 16, 2, NULL,
      0);
  float *x = g_new (float, t_max * 16);
  Feeder fd;
  GArray *ops, *got, *ref_a, *ref_b;
  gint64 at = -1;
  gsize seg2, seg3, n;

  sattn_fill_signal (x, t_max * 16, 83, 1.0f);
  feeder_init (&fd, setup_harness (&refuse_setup, a), x, 16, t_max);
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 60);
  g_object_set (fd.h->element, "weights", b, NULL);
  while (at < 0 && fd.pos + FRAMES_PER_BUF <= t_max - 1000) {
    feeder_push (&fd, FRAMES_PER_BUF);
    at = swapped_at (fd.bus, b);
    if (at < 0)
      g_usleep (1000);
  }
  fail_unless (at >= 0, "B never took over");
  feeder_push_frames (&fd, 40);
  /* Frames mode: new caps drain the old stream, so rows and frames
   * line up. */
  g_object_set (fd.h->element, "weights", a, NULL);
  seg2 = fd.pos;
  feeder_caps (&fd, 2 * RATE);
  feeder_push_frames (&fd, 90);
  g_object_set (fd.h->element, "weights", b, NULL);
  seg3 = fd.pos;
  feeder_caps (&fd, RATE);
  feeder_push_frames (&fd, 90);
  fail_unless_equals_int (pop_warnings (fd.bus, NULL), 0);
  expect_weights (fd.h, b);
  ops = g_array_ref (fd.ops);
  got = feeder_finish (&fd);

  ref_a = fresh_run (&refuse_setup, a, x, t_max, ops);
  ref_b = fresh_run (&refuse_setup, b, x, t_max, ops);
  n = got->len;
  fail_unless_equals_int (n, ref_a->len);
  fail_unless_equals_int (n, ref_b->len);
  fail_unless_equals_int (n, fd.pos * 16);
  assert_differ ("A against B", ref_a, ref_b, 0, n);
  assert_same_bytes ("first caps, before the swap, vs fresh A", got, ref_a,
      0, (gsize) at * 16, 16);
  assert_same_bytes ("first caps, from the swap, vs fresh B", got, ref_b,
      (gsize) at * 16, seg2 * 16, 16);
  assert_same_bytes ("second caps (weights back to A) vs fresh A", got,
      ref_a, seg2 * 16, seg3 * 16, 16);
  assert_same_bytes ("third caps (B again) vs fresh B", got, ref_b,
      seg3 * 16, n, 16);
  g_array_unref (ops);
  g_array_unref (got);
  g_array_unref (ref_a);
  g_array_unref (ref_b);
  g_free (x);
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

  tc = tcase_create ("exact");
  suite_add_tcase (s, tc);
  tcase_add_checked_fixture (tc, NULL, tmp_cleanup);
  tcase_add_test (tc, test_swap_exact_rope);
  tcase_add_test (tc, test_swap_exact_alibi);
  tcase_add_test (tc, test_swap_exact_encoder_rope);
  tcase_add_test (tc, test_swap_exact_heads_from_metadata);
  tcase_add_test (tc, test_swap_exact_hf);
  tcase_add_test (tc, test_swap_exact_bert);
  tcase_add_test (tc, test_swap_exact_llama);
  tcase_add_test (tc, test_swap_exact_whole_classes);
  tcase_add_test (tc, test_swap_exact_whole_alibi);

  tc = tcase_create ("refused");
  suite_add_tcase (s, tc);
  tcase_add_checked_fixture (tc, NULL, tmp_cleanup);
  tcase_add_loop_test (tc, test_refused_then_caps, 0, G_N_ELEMENTS (bad_files));
  tcase_add_loop_test (tc, test_refused_at_caps, 0, G_N_ELEMENTS (bad_files));
  tcase_add_loop_test (tc, test_refused_before_first_caps, 0,
      G_N_ELEMENTS (bad_files));
  tcase_add_test (tc, test_refused_prefix);
  tcase_add_test (tc, test_swap_before_first_caps);
  tcase_add_test (tc, test_refused_never_stops);
  tcase_add_test (tc, test_swap_then_caps);
  tcase_add_test (tc, test_configured_at_caps_error);
  return s;
}

GST_CHECK_MAIN (sattn_swap);
