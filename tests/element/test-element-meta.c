/* sattn element: the window metadata (GstSattnMeta) on every output
 * buffer, read the way an application reads it: through the installed
 * header's inline accessors (the API type found by name), no plugin
 * symbol.  Every field is checked against values worked out here from
 * the frames pushed (which are GAP, which have NaN samples), the window
 * schedule (one window every hop frames, the rest at the drain) and the
 * segment (running time = base + PTS).
 *
 * The element runs with meta-structure=true, and wherever a buffer's
 * struct is read (get_meta), its Python-readable twin, the GstCustomMeta
 * with a GstStructure, must be there exactly when the struct is and hold
 * the same values, through every copy, adapter and split below.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "gstsattn-meta.h"

#include <gst/base/gstadapter.h>

#include <math.h>
#include <string.h>

#define RATE 1000
#define CHANNELS 2
#define BASE (5 * GST_SECOND)

/* The structure's array name: one value of type t per row of m, equal
 * to the row member at byte offset off. */
static void
check_array (const GstStructure * s, const gchar * name, GType t,
    const GstSattnMeta * m, gsize off)
{
  const GValue *arr = gst_structure_get_value (s, name);
  guint i;

  fail_unless (arr != NULL && GST_VALUE_HOLDS_ARRAY (arr),
      "the structure has no array '%s'", name);
  fail_unless_equals_int (gst_value_array_get_size (arr), m->n_rows);
  for (i = 0; i < m->n_rows; i++) {
    const GValue *v = gst_value_array_get_value (arr, i);
    const guint8 *p = (const guint8 *) &m->rows[i] + off;

    fail_unless (G_VALUE_HOLDS (v, t), "'%s'[%u] is a %s", name, i,
        G_VALUE_TYPE_NAME (v));
    if (t == G_TYPE_UINT64) {
      fail_unless_equals_uint64 (g_value_get_uint64 (v), *(guint64 *) p);
    } else if (t == G_TYPE_UINT) {
      fail_unless_equals_uint64 (g_value_get_uint (v), *(guint32 *) p);
    } else {
      fail_unless_equals_int (g_value_get_boolean (v), *(gboolean *) p);
    }
  }
}

/* The checks' arrays of the structure against m->checks: in-contract
 * equal, input-rms and pooled-z equal or both NaN.  The stream here runs
 * no whole model with a contract: every row is in contract, NaN
 * figures. */
static void
check_checks (const GstStructure * s, const GstSattnMeta * m)
{
  const GValue *in = gst_structure_get_value (s, "in-contract");
  const GValue *rms = gst_structure_get_value (s, "input-rms");
  const GValue *z = gst_structure_get_value (s, "pooled-z");
  guint i;

  fail_unless (in && rms && z && GST_VALUE_HOLDS_ARRAY (in));
  fail_unless_equals_int (gst_value_array_get_size (in), m->n_rows);
  fail_unless_equals_int (gst_value_array_get_size (rms), m->n_rows);
  fail_unless_equals_int (gst_value_array_get_size (z), m->n_rows);
  for (i = 0; i < m->n_rows; i++) {
    gdouble r = g_value_get_double (gst_value_array_get_value (rms, i));
    gdouble zz = g_value_get_double (gst_value_array_get_value (z, i));

    fail_unless_equals_int (g_value_get_boolean (gst_value_array_get_value
            (in, i)), m->checks[i].in_contract);
    fail_unless (m->checks[i].in_contract);
    fail_unless (isnan (r) && isnan (m->checks[i].input_rms));
    fail_unless (isnan (zz) && isnan (m->checks[i].pooled_z));
  }
}

/* buf's window metadata (NULL if none), after checking that its
 * GstCustomMeta is present exactly when the struct is and holds the same
 * values. */
static GstSattnMeta *
get_meta (GstBuffer * buf)
{
  GstSattnMeta *m = gst_buffer_get_sattn_meta (buf);
  GstCustomMeta *cm = gst_buffer_get_custom_meta (buf,
      GST_SATTN_META_CUSTOM_NAME);
  const GstStructure *s;
  guint u = 0;
  guint64 rb = 0;

  if (m == NULL) {
    fail_unless (cm == NULL, "a custom meta where the struct was dropped");
    return NULL;
  }
  fail_unless (cm != NULL, "the struct without its custom meta");
  s = gst_custom_meta_get_structure (cm);
  fail_unless (gst_structure_has_name (s, GST_SATTN_META_CUSTOM_NAME));
  fail_unless (gst_structure_get_uint (s, "version", &u));
  fail_unless_equals_int (u, m->version);
  fail_unless (gst_structure_get_uint (s, "window", &u));
  fail_unless_equals_int (u, m->window);
  fail_unless (gst_structure_get_uint (s, "n-rows", &u));
  fail_unless_equals_int (u, m->n_rows);
  fail_unless (gst_structure_get_uint64 (s, "row-bytes", &rb));
  fail_unless_equals_uint64 (rb, m->row_bytes);
  fail_unless_equals_int (gst_structure_n_fields (s), 15);
  check_checks (s, m);
  check_array (s, "first-frame", G_TYPE_UINT64, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, first_frame));
  check_array (s, "n-frames", G_TYPE_UINT, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, n_frames));
  check_array (s, "valid-keys", G_TYPE_UINT, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, valid_keys));
  check_array (s, "masked-keys", G_TYPE_UINT, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, masked_keys));
  check_array (s, "fully-masked-rows", G_TYPE_UINT, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, fully_masked_rows));
  check_array (s, "valid", G_TYPE_BOOLEAN, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, valid));
  check_array (s, "window-start", G_TYPE_UINT64, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, window_start));
  check_array (s, "window-end", G_TYPE_UINT64, m,
      G_STRUCT_OFFSET (GstSattnMetaRow, window_end));
  return m;
}

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
      "meta-structure", TRUE, NULL);
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
    GstSattnMeta *m = get_meta (buf);
    gsize row_bytes;

    fail_unless (m != NULL, "buffer %u has no window metadata", b);
    fail_unless_equals_int (m->version, GST_SATTN_META_VERSION);
    fail_unless_equals_int (m->window, window);
    row_bytes = CHANNELS * sizeof (float) * (output == OUT_WINDOW ? window : 1);
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

/* Whether buf's meta, if any, is exact for a buffer holding the stream's
 * output bytes [at, at + size): row i of the meta is the stream's row
 * at / row_bytes + i (all the stream's rows: rows[0..n)).  Returns
 * whether the buffer has the meta. */
static gboolean
meta_exact (GstBuffer * buf, gsize at, const GstSattnMetaRow * rows,
    gsize n, gsize row_bytes)
{
  GstSattnMeta *m = get_meta (buf);
  gsize size = gst_buffer_get_size (buf);

  if (m == NULL)
    return FALSE;
  fail_unless_equals_uint64 (m->row_bytes, row_bytes);
  fail_unless (at % row_bytes == 0, "a meta on bytes that start mid-row");
  fail_unless_equals_uint64 ((gsize) m->n_rows * row_bytes, size);
  fail_unless (at / row_bytes + m->n_rows <= n);
  fail_unless (memcmp (m->rows, rows + at / row_bytes, m->n_rows *
          sizeof (GstSattnMetaRow)) == 0, "the meta describes other rows");
  return TRUE;
}

/* The rows of all of bufs' metas, in stream order (g_free it). */
static GstSattnMetaRow *
all_rows (GPtrArray * bufs, gsize * n, gsize * row_bytes)
{
  GstSattnMetaRow *rows = NULL;
  guint b;

  *n = 0;
  for (b = 0; b < bufs->len; b++) {
    GstSattnMeta *m = get_meta (g_ptr_array_index (bufs,
            b));

    rows = g_renew (GstSattnMetaRow, rows, *n + m->n_rows);
    memcpy (rows + *n, m->rows, m->n_rows * sizeof (GstSattnMetaRow));
    *n += m->n_rows;
    *row_bytes = m->row_bytes;
  }
  return rows;
}

/* Copies keep every row; a region copy keeps the rows of a region that
 * starts and ends on row boundaries and drops the meta otherwise; a copy
 * into a buffer of another size drops it. */
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
    if (get_meta (x)->n_rows >= 4)
      buf = x;
  }
  fail_unless (buf != NULL, "no output buffer of 4 rows or more");
  m = get_meta (buf);

  copy = gst_buffer_copy (buf);
  c = get_meta (copy);
  fail_unless (c != NULL && c != m);
  fail_unless_equals_int (c->n_rows, m->n_rows);
  fail_unless (memcmp (c->rows, m->rows, m->n_rows *
          sizeof (GstSattnMetaRow)) == 0);
  gst_buffer_unref (copy);

  /* Rows 1 and 2; rows 1 to the end. */
  copy = gst_buffer_copy_region (buf, GST_BUFFER_COPY_ALL, m->row_bytes,
      2 * m->row_bytes);
  c = get_meta (copy);
  fail_unless (c != NULL);
  fail_unless_equals_int (c->n_rows, 2);
  fail_unless (memcmp (c->rows, m->rows + 1, 2 *
          sizeof (GstSattnMetaRow)) == 0);
  gst_buffer_unref (copy);
  copy = gst_buffer_copy_region (buf, GST_BUFFER_COPY_ALL, m->row_bytes, -1);
  c = get_meta (copy);
  fail_unless (c != NULL);
  fail_unless_equals_int (c->n_rows, m->n_rows - 1);
  fail_unless_equals_uint64 (c->rows[0].first_frame, m->rows[1].first_frame);
  gst_buffer_unref (copy);

  /* Regions that cut a row: its bytes would not be the meta's rows. */
  copy = gst_buffer_copy_region (buf, GST_BUFFER_COPY_ALL,
      m->row_bytes + m->row_bytes / 2, -1);
  fail_unless (get_meta (copy) == NULL);
  gst_buffer_unref (copy);
  copy = gst_buffer_copy_region (buf, GST_BUFFER_COPY_ALL, 0,
      2 * m->row_bytes + 4);
  fail_unless (get_meta (copy) == NULL);
  gst_buffer_unref (copy);

  /* The metadata copied into a buffer of another size (what a GstAdapter
   * does when it assembles rows of several buffers); of the same size, it
   * stays (an output buffer of a 1:1 transform). */
  copy = gst_buffer_new_allocate (NULL, 3 * m->row_bytes, NULL);
  fail_unless (gst_buffer_copy_into (copy, buf, GST_BUFFER_COPY_METADATA, 0,
          -1));
  fail_unless (get_meta (copy) == NULL);
  gst_buffer_unref (copy);
  copy = gst_buffer_new_allocate (NULL, gst_buffer_get_size (buf), NULL);
  fail_unless (gst_buffer_copy_into (copy, buf, GST_BUFFER_COPY_METADATA, 0,
          -1));
  c = get_meta (copy);
  fail_unless (c != NULL && c->n_rows == m->n_rows);
  /* A second buffer's meta into the same buffer: a merge, dropped. */
  fail_unless (gst_buffer_copy_into (copy, buf, GST_BUFFER_COPY_METADATA, 0,
          -1));
  fail_unless (get_meta (copy) == NULL);
  gst_buffer_unref (copy);

  g_ptr_array_unref (bufs);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* A GstAdapter taking every size out of the element's buffers: each
 * result's meta is exact or absent, and whole rows out of one buffer keep
 * it. */
GST_START_TEST (test_meta_adapter)
{
  const gsize T = 120;
  guint8 ok[120];
  GPtrArray *bufs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  GstHarness *h = run_stream (OUT_FRAMES, 8, 4, T, 14, 28, 40, ok, bufs);
  static const gsize takes[] = { 1, 2, 3, 5, 7, 11 };   /* rows (+ half) */
  gsize n, rb = 0, t;
  GstSattnMetaRow *rows = all_rows (bufs, &n, &rb);

  fail_unless (rb > 0);

  for (t = 0; t < 2 * G_N_ELEMENTS (takes); t++) {
    GstAdapter *a = gst_adapter_new ();
    gsize at = 0, kept = 0, dropped = 0;
    gsize size = takes[t / 2] * rb + (t % 2 ? rb / 2 : 0);
    guint b;

    for (b = 0; b < bufs->len; b++)
      gst_adapter_push (a, gst_buffer_ref (g_ptr_array_index (bufs, b)));
    while (gst_adapter_available (a) >= size) {
      GstBuffer *out = gst_adapter_take_buffer (a, size);

      if (meta_exact (out, at, rows, n, rb))
        kept++;
      else
        dropped++;
      at += size;
      gst_buffer_unref (out);
    }
    GST_INFO ("takes of %" G_GSIZE_FORMAT " bytes: %" G_GSIZE_FORMAT
        " with the meta, %" G_GSIZE_FORMAT " without", size, kept, dropped);
    /* Whole rows out of the element's 7-row buffers: some keep it. */
    if (t % 2 == 0 && takes[t / 2] < 7)
      fail_unless (kept > 0, "no take of %" G_GSIZE_FORMAT " rows kept the "
          "meta", takes[t / 2]);
    g_object_unref (a);
  }
  g_free (rows);
  g_ptr_array_unref (bufs);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* sattn ! audiobuffersplit: output buffers of other sizes than the
 * element's, with and without GAP input: every meta exact. */
static void
check_split (const gchar * duration, gboolean gaps)
{
  const gsize T = 400;
  float *x = g_new (float, T * CHANNELS);
  gchar *line = g_strdup_printf ("sattn window=8 hop=4 output=mean "
      "meta-structure=true ! "
      "audiobuffersplit output-buffer-duration=%s", duration);
  GstHarness *h;
  GstElement *split = gst_element_factory_make ("audiobuffersplit", NULL);
  GstBuffer *buf;
  gsize f, kept = 0, dropped = 0;
  guint64 next_row_frame = G_MAXUINT64;

  if (split == NULL) {
    g_free (line);
    g_free (x);
    fail ("audiobuffersplit (gstreamer1.0-plugins-bad) is not installed");
    return;
  }
  gst_object_unref (split);
  h = gst_harness_new_parse (line);
  sattn_set_caps (h, RATE, CHANNELS);
  sattn_fill_signal (x, T * CHANNELS, 11, 1.0f);
  for (f = 0; f < T; f += 25) {
    buf = sattn_buffer_new (x + f * CHANNELS, 25 * CHANNELS * sizeof (float),
        gst_util_uint64_scale (f, GST_SECOND, RATE), 0);
    if (gaps && (f / 25) % 5 == 2) {
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
      gst_buffer_memset (buf, 0, 0, 25 * CHANNELS * sizeof (float));
    }
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  while ((buf = gst_harness_try_pull (h)) != NULL) {
    GstSattnMeta *m = get_meta (buf);

    if (m == NULL) {
      dropped++;
    } else {
      guint i;

      kept++;
      fail_unless_equals_uint64 ((gsize) m->n_rows * m->row_bytes,
          gst_buffer_get_size (buf));
      /* Row i is the buffer's i-th row: its frames start at the row's
       * time (one row per hop of 4 frames at 1000 frames/s). */
      for (i = 0; i < m->n_rows; i++) {
        GstClockTime t = GST_BUFFER_PTS (buf) + gst_util_uint64_scale (i,
            GST_SECOND, RATE / 4);
        fail_unless_equals_uint64 (m->rows[i].first_frame,
            gst_util_uint64_scale_round (t, RATE, GST_SECOND));
        fail_unless_equals_int (m->rows[i].n_frames, 4);
        if (i > 0)
          fail_unless_equals_uint64 (m->rows[i].first_frame,
              m->rows[i - 1].first_frame + 4);
      }
      if (next_row_frame != G_MAXUINT64 && m->rows[0].first_frame <
          next_row_frame)
        fail ("rows described twice");
      next_row_frame = m->rows[m->n_rows - 1].first_frame + 4;
    }
    gst_buffer_unref (buf);
  }
  GST_INFO ("audiobuffersplit %s%s: %" G_GSIZE_FORMAT " buffers with the "
      "meta, %" G_GSIZE_FORMAT " without", duration, gaps ? " (GAPs)" : "",
      kept, dropped);
  fail_unless (kept > 0, "no buffer kept the meta");
  gst_harness_teardown (h);
  g_free (line);
  g_free (x);
}

GST_START_TEST (test_meta_audiobuffersplit)
{
  check_split ("3/250", FALSE); /* 3 rows: cuts the 25-row buffers */
  check_split ("5/250", FALSE); /* 5 rows: divides them */
  check_split ("7/500", FALSE); /* 3.5 rows: cuts rows */
  check_split ("3/250", TRUE);
}

GST_END_TEST;

/* Off by default: the struct alone; meta-structure=true while playing
 * adds the custom meta from the next output buffer on. */
GST_START_TEST (test_meta_structure_property)
{
  float x[8 * CHANNELS];
  GstHarness *h = sattn_harness_new ("window", 4, "hop", 2, NULL);
  GstBuffer *buf;
  gboolean on = TRUE;
  gint i;

  g_object_get (h->element, "meta-structure", &on, NULL);
  fail_unless (!on, "meta-structure is on by default");
  sattn_set_caps (h, RATE, CHANNELS);
  sattn_fill_signal (x, 8 * CHANNELS, 3, 1.0f);
  for (i = 0; i < 2; i++) {
    if (i == 1)
      g_object_set (h->element, "meta-structure", TRUE, NULL);
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
                sizeof (x), gst_util_uint64_scale (8 * i, GST_SECOND, RATE),
                0)), GST_FLOW_OK);
    buf = gst_harness_pull (h);
    fail_unless (gst_buffer_get_sattn_meta (buf) != NULL);
    if (i == 0) {
      fail_unless (gst_buffer_get_custom_meta (buf,
              GST_SATTN_META_CUSTOM_NAME) == NULL);
    } else {
      fail_unless (get_meta (buf)->n_rows == 8);
    }
    gst_buffer_unref (buf);
  }
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
  tcase_add_test (tc, test_meta_adapter);
  tcase_add_test (tc, test_meta_audiobuffersplit);
  tcase_add_test (tc, test_meta_structure_property);
  return s;
}

GST_CHECK_MAIN (sattn_meta);
