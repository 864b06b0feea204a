/* sattn element: the window metadata (GstSattnMeta) on every output
 * buffer, read the way an application reads it: through the installed
 * header's inline accessors (the API type found by name), no plugin
 * symbol.  Every field is checked against values worked out here from
 * the frames pushed (which are GAP, which have NaN samples), the window
 * schedule (one window every hop frames, the rest at the drain) and the
 * segment (running time = base + PTS).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "gstsattn-meta.h"

#include <math.h>
#include <string.h>

#define RATE 1000
#define CHANNELS 2
#define BASE (5 * GST_SECOND)

/* Frame f of the pushed stream is usable (inside it, not GAP, no NaN). */
static gboolean
usable (const guint8 * ok, gint64 f)
{
  return f >= 0 && ok[f];
}

static GstClockTime
frame_rt (gint64 f)
{
  return BASE + gst_util_uint64_scale (MAX (f, 0), GST_SECOND, RATE);
}

/* T frames in buffers of 7 frames: frames [gap0, gap1) in GAP buffers,
 * frame nan_at with a NaN sample; a segment with base BASE; EOS. */
static GstHarness *
run_stream (gint output, guint window, guint hop, gsize T, gsize gap0,
    gsize gap1, gsize nan_at, guint8 * ok, GPtrArray * bufs)
{
  const gsize d = CHANNELS;
  float *x = g_new (float, T * d);
  GstHarness *h;
  GstSegment seg;
  GstBuffer *buf;
  gsize f;

  sattn_fill_signal (x, T * d, 7, 1.0f);
  for (f = 0; f < T; f++)
    ok[f] = !(f >= gap0 && f < gap1) && f != nan_at;
  x[nan_at * d + 1] = NAN;

  h = sattn_harness_new ("window", window, "hop", hop, "output", output,
      NULL);
  sattn_set_caps (h, RATE, CHANNELS);
  gst_segment_init (&seg, GST_FORMAT_TIME);
  seg.base = BASE;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  for (f = 0; f < T; f += 7) {
    gsize n = MIN (7, T - f);
    gboolean gap = f >= gap0 && f < gap1;

    /* Buffers are either all GAP or none. */
    g_assert (!gap || f + n <= gap1);
    g_assert (gap || f >= gap1 || f + n <= gap0);
    buf = sattn_buffer_new (x + f * d, n * d * sizeof (float),
        gst_util_uint64_scale (f, GST_SECOND, RATE), 0);
    if (gap)
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  while ((buf = gst_harness_try_pull (h)) != NULL)
    g_ptr_array_add (bufs, buf);
  g_free (x);
  return h;
}

/* The metadata of one row against the frames: its window ends at
 * window_end, n key positions before it. */
static void
check_row (const GstSattnMetaRow * r, guint window, const guint8 * ok,
    gboolean frames_mode, guint hop, gsize T)
{
  gint64 e = (gint64) r->window_end, w0;
  guint32 masked = 0;
  gint64 p, ws;
  gboolean any = FALSE;
  guint64 i;
  GstClockTime rt_end;

  (void) T;
  /* window_end is a running time; turn it back into a frame count. */
  rt_end = r->window_end;
  fail_unless (rt_end >= BASE);
  e = (gint64) gst_util_uint64_scale_round (rt_end - BASE, RATE, GST_SECOND);
  fail_unless_equals_uint64 (frame_rt (e), rt_end);
  w0 = e - window;
  ws = MAX (w0, 0);
  fail_unless_equals_uint64 (r->window_start, frame_rt (ws));
  /* Windows end every hop frames, or at the drain (the last frame). */
  fail_unless (e % hop == 0 || e == (gint64) T, "window end %" G_GINT64_FORMAT
      " is neither a hop boundary nor the stream end", e);
  for (p = w0; p < e; p++)
    masked += !usable (ok, p);
  fail_unless_equals_int (r->masked_keys, masked);
  fail_unless_equals_int (r->valid_keys, window - masked);
  /* Every query sees at least its own frame: never fully masked. */
  fail_unless_equals_int (r->fully_masked_rows, 0);
  fail_unless (r->first_frame >= (guint64) ws &&
      (gint64) (r->first_frame + r->n_frames) <= e);
  if (frames_mode)
    fail_unless_equals_int (r->n_frames, 1);
  for (i = 0; i < r->n_frames; i++)
    any |= usable (ok, (gint64) (r->first_frame + i));
  /* mean: usable frames in the window count (all its rows are pooled). */
  if (!frames_mode)
    any = window > masked;
  fail_unless_equals_int (r->valid, any);
}

/* Every output buffer has the meta, one row per output frame, the rows
 * accounting for every input frame exactly once and in order. */
static void
check_stream (gint output, guint window, guint hop)
{
  const gsize T = 200, gap0 = 70, gap1 = 70 + 7 * 6, nan_at = 150;
  guint8 *ok = g_new (guint8, T);
  GPtrArray *bufs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  GstHarness *h = run_stream (output, window, hop, T, gap0, gap1, nan_at,
      ok, bufs);
  guint64 next = 0, total_masked = 0;
  guint b, i;

  fail_unless (bufs->len > 0);
  for (b = 0; b < bufs->len; b++) {
    GstBuffer *buf = g_ptr_array_index (bufs, b);
    GstSattnMeta *m = gst_buffer_get_sattn_meta (buf);
    gsize row_bytes;

    fail_unless (m != NULL, "buffer %u has no window metadata", b);
    fail_unless_equals_int (m->version, GST_SATTN_META_VERSION);
    fail_unless_equals_int (m->window, window);
    row_bytes = CHANNELS * sizeof (float) * (output == OUT_WINDOW ? window :
        1);
    fail_unless_equals_uint64 (m->row_bytes, row_bytes);
    fail_unless_equals_uint64 (m->n_rows * row_bytes,
        gst_buffer_get_size (buf));
    fail_unless_equals_uint64 (m->n_rows,
        GST_BUFFER_OFFSET_END (buf) - GST_BUFFER_OFFSET (buf));
    for (i = 0; i < m->n_rows; i++) {
      const GstSattnMetaRow *r = &m->rows[i];

      fail_unless_equals_uint64 (r->first_frame, next);
      check_row (r, window, ok, output == OUT_FRAMES, hop, T);
      next += r->n_frames;
      total_masked += r->masked_keys;
    }
    /* The first row's frame is the buffer's PTS. */
    fail_unless_equals_uint64 (GST_BUFFER_PTS (buf),
        gst_util_uint64_scale (m->rows[0].first_frame, GST_SECOND, RATE));
  }
  fail_unless_equals_uint64 (next, T);
  GST_INFO ("output=%d: %u buffers, %" G_GUINT64_FORMAT " frames, %"
      G_GUINT64_FORMAT " masked keys over the rows", output, bufs->len, next,
      total_masked);
  fail_unless (total_masked > 0);
  g_ptr_array_unref (bufs);
  gst_harness_teardown (h);
  g_free (ok);
}

GST_START_TEST (test_meta_frames)
{
  check_stream (OUT_FRAMES, 16, 5);
}

GST_END_TEST;

GST_START_TEST (test_meta_mean)
{
  check_stream (OUT_MEAN, 12, 4);
}

GST_END_TEST;

GST_START_TEST (test_meta_window)
{
  check_stream (OUT_WINDOW, 10, 10);
}

GST_END_TEST;

/* Copies keep the rows; a region copy keeps the whole rows inside it. */
GST_START_TEST (test_meta_copies)
{
  const gsize T = 60;
  guint8 ok[60];
  GPtrArray *bufs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  GstHarness *h = run_stream (OUT_FRAMES, 8, 4, T, 14, 28, 40, ok, bufs);
  GstBuffer *buf = NULL, *copy;
  GstSattnMeta *m, *c;
  guint b;

  for (b = 0; b < bufs->len && buf == NULL; b++) {
    GstBuffer *x = g_ptr_array_index (bufs, b);
    if (gst_buffer_get_sattn_meta (x)->n_rows >= 4)
      buf = x;
  }
  fail_unless (buf != NULL, "no output buffer of 4 rows or more");
  m = gst_buffer_get_sattn_meta (buf);

  copy = gst_buffer_copy (buf);
  c = gst_buffer_get_sattn_meta (copy);
  fail_unless (c != NULL && c != m);
  fail_unless_equals_int (c->n_rows, m->n_rows);
  fail_unless (memcmp (c->rows, m->rows, m->n_rows *
          sizeof (GstSattnMetaRow)) == 0);
  gst_buffer_unref (copy);

  /* Rows 1 and 2, then a region that starts half-way into row 1. */
  copy = gst_buffer_copy_region (buf, GST_BUFFER_COPY_ALL, m->row_bytes,
      2 * m->row_bytes);
  c = gst_buffer_get_sattn_meta (copy);
  fail_unless (c != NULL);
  fail_unless_equals_int (c->n_rows, 2);
  fail_unless (memcmp (c->rows, m->rows + 1, 2 *
          sizeof (GstSattnMetaRow)) == 0);
  gst_buffer_unref (copy);
  copy = gst_buffer_copy_region (buf, GST_BUFFER_COPY_ALL,
      m->row_bytes + m->row_bytes / 2, -1);
  c = gst_buffer_get_sattn_meta (copy);
  fail_unless (c != NULL);
  fail_unless_equals_int (c->n_rows, m->n_rows - 2);
  fail_unless_equals_uint64 (c->rows[0].first_frame, m->rows[2].first_frame);
  gst_buffer_unref (copy);

  g_ptr_array_unref (bufs);
  gst_harness_teardown (h);
}

GST_END_TEST;

static Suite *
sattn_meta_suite (void)
{
  Suite *s = suite_create ("sattn-meta");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_meta_frames);
  tcase_add_test (tc, test_meta_mean);
  tcase_add_test (tc, test_meta_window);
  tcase_add_test (tc, test_meta_copies);
  return s;
}

GST_CHECK_MAIN (sattn_meta);
