/* sattn element: GAP events of any duration and events whose times
 * contradict the timeline.
 *
 * A GAP of 10^6 s at 48 kHz (4.8e10 frames) goes through in closed form:
 * the rows of the frames that follow the last usable one by a window come
 * out as one GAP event whose span is exact, frames in == frames out when
 * GAP durations are counted on the frame grid, and the rows and timestamps
 * after it are those of a stream that restarted at the GAP's end (the
 * float64 reference of sattn-check.c).  GAPs near the end of the clock's
 * range, GAPs without a duration, GAPs in the past or overlapping the
 * counter, buffers stamped behind the counter and timestamps near
 * G_MAXUINT64 never add frames, shift later timestamps or wrap.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <math.h>
#include <string.h>

/* One output item: a buffer or a GAP event. */
typedef struct
{
  GstClockTime pts, dur;
  gboolean is_event;
  guint64 offset, rows;
  gboolean discont;
} Item;

static gint
item_cmp (gconstpointer a, gconstpointer b)
{
  const Item *x = a, *y = b;

  if (x->pts != y->pts)
    return x->pts < y->pts ? -1 : 1;
  /* A zero-length item first. */
  return x->dur < y->dur ? -1 : x->dur > y->dur;
}

/* Every GAP event (after the sticky ones) and every buffer, by time. */
static GArray *
pull_items (GstHarness * h, gsize row_floats, SattnOutput * o)
{
  GArray *items = g_array_new (FALSE, TRUE, sizeof (Item));
  GstEvent *ev;
  guint i;

  sattn_output_pull_all (h, o);
  for (i = 0; i < o->bufs->len; i++) {
    const SattnOutBuf *b = &g_array_index (o->bufs, SattnOutBuf, i);
    Item it = { b->pts, b->duration, FALSE, b->offset,
      b->n_floats / row_floats, b->discont
    };
    fail_unless (GST_CLOCK_TIME_IS_VALID (b->pts));
    fail_unless (GST_CLOCK_TIME_IS_VALID (b->duration));
    fail_unless (b->duration <= GST_CLOCK_TIME_NONE - 1 - b->pts,
        "buffer %u at %" G_GUINT64_FORMAT " + %" G_GUINT64_FORMAT " wraps",
        i, b->pts, b->duration);
    fail_unless_equals_uint64 (b->offset_end - b->offset, it.rows);
    g_array_append_val (items, it);
  }
  while ((ev = gst_harness_try_pull_event (h)) != NULL) {
    if (GST_EVENT_TYPE (ev) == GST_EVENT_GAP) {
      Item it = { 0, };

      gst_event_parse_gap (ev, &it.pts, &it.dur);
      it.is_event = TRUE;
      fail_unless (GST_CLOCK_TIME_IS_VALID (it.pts));
      fail_unless (GST_CLOCK_TIME_IS_VALID (it.dur));
      fail_unless (it.dur <= GST_CLOCK_TIME_NONE - 1 - it.pts,
          "GAP event wraps");
      g_array_append_val (items, it);
    }
    gst_event_unref (ev);
  }
  g_array_sort (items, item_cmp);
  return items;
}

/* Frame index whose timestamp (t0 + f / frame_rate, floored) is ts, for a
 * frame period longer than 1 ns; fails when ts is not on the grid. */
static guint64
frame_at (GstClockTime ts, GstClockTime t0, gint frame_rate)
{
  guint64 f = gst_util_uint64_scale_ceil (ts - t0, frame_rate, GST_SECOND);

  fail_unless_equals_uint64 (t0 + gst_util_uint64_scale (f, GST_SECOND,
          frame_rate), ts);
  return f;
}

/* Items must tile the time line from t0 without holes or overlaps;
 * returns the frames they account for (frames mode: buffer rows and GAP
 * spans on the frame grid must agree). */
static guint64
check_tiling (GArray * items, GstClockTime t0, gint frame_rate,
    gboolean frames_mode, guint hop)
{
  GstClockTime at = t0;
  guint64 frames = 0, offset = 0;
  guint i;

  for (i = 0; i < items->len; i++) {
    const Item *it = &g_array_index (items, Item, i);
    guint64 f0 = frame_at (it->pts, t0, frame_rate);
    guint64 f1 = frame_at (it->pts + it->dur, t0, frame_rate);

    fail_unless_equals_uint64 (it->pts, at);
    fail_unless_equals_int (it->discont, i == 0);
    if (!it->is_event) {
      /* Offsets count rows since the resync, GAP rows included. */
      fail_unless_equals_uint64 (it->offset, offset);
      offset += it->rows;
      if (frames_mode)
        fail_unless_equals_uint64 (it->rows, f1 - f0);
    } else {
      /* The GAP's rows: one per frame, or one per window of hop frames. */
      offset += frames_mode ? f1 - f0 : (f1 - f0) / hop;
    }
    frames += f1 - f0;
    at = it->pts + it->dur;
  }
  return frames;
}

/* 1024 frames, a GAP of 10^6 s (0) or 10^4 s (1), 1024 frames, EOS, in
 * frames (loop 0, 1) or mean (2) mode.  The frames after the GAP must
 * equal the reference of a stream that starts there (its window holds
 * only masked frames, as padding is), at the GAP's end. */
GST_START_TEST (test_gap_huge)
{
  const gint rate = 48000;
  const gsize T = 1024, d = 2;
  const gboolean mean = __i__ == 2;
  RefConfig c = { 64, 16, 1, 0, 0.0, FALSE, mean ? OUT_MEAN : OUT_FRAMES,
    START_PAD
  };
  const GstClockTime gap = (__i__ == 1 ? 10000 : 1000000) * GST_SECOND;
  const guint64 gap_frames = gst_util_uint64_scale (gap, rate, GST_SECOND);
  GstClockTime t_gap, t_after;
  float *x = g_new (float, 2 * T * d);
  GstHarness *h;
  SattnOutput o;
  GArray *items;
  RefOut ref;
  guint i, n_events = 0, first_after = 0;
  gsize f_after = 0;

  sattn_fill_signal (x, 2 * T * d, 7, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "output",
      c.output, NULL);
  sattn_set_caps (h, rate, d);
  t_gap = gst_util_uint64_scale (T, GST_SECOND, rate);
  t_after = gst_util_uint64_scale (T + gap_frames, GST_SECOND, rate);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_gap (t_gap,
              t_after - t_gap)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + T * d,
              T * d * sizeof (float), t_after, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  items = pull_items (h, d, &o);
  /* Frames in == frames out, GAP spans counted on the frame grid. */
  fail_unless_equals_uint64 (check_tiling (items, 0, rate, !mean, c.hop),
      2 * T + gap_frames);
  for (i = 0; i < items->len; i++) {
    const Item *it = &g_array_index (items, Item, i);
    n_events += it->is_event;
    if (!first_after && !it->is_event && it->pts >= t_after)
      first_after = i;
  }
  /* The GAP's rows were not materialised: one event, a few buffers. */
  fail_unless_equals_int (n_events, 1);
  fail_unless (items->len < 16, "%u output items", items->len);
  fail_unless (first_after > 0);

  /* The rows after the GAP (those at or after t_after). */
  ref_stream (&c, x + T * d, NULL, T, d, TRUE, &ref);
  for (i = 0; i < o.bufs->len; i++) {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);
    if (b->pts < t_after)
      f_after += b->n_floats;
  }
  fail_unless_equals_int (o.floats->len - f_after, ref.n_rows * d);
  sattn_assert_close ("after the gap", &g_array_index (o.floats, float,
          f_after), ref.rows, ref.n_rows * d);
  {
    const Item *it = &g_array_index (items, Item, first_after);
    fail_unless_equals_uint64 (it->pts, t_after);
    fail_unless_equals_uint64 (it->offset, mean ? (T + gap_frames) / c.hop
        : T + gap_frames);
  }

  ref_out_clear (&ref);
  g_array_unref (items);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* GAPs at the end of the clock's range: a duration of G_MAXUINT64 - 1
 * (0), a duration to just before the end followed by a GAP near
 * G_MAXUINT64 (1), a duration of GST_CLOCK_TIME_NONE (2: adds nothing), a
 * GAP at the last valid time with a duration of G_MAXUINT64 - 1 (3: a
 * resync there that adds nothing).  Then more data without
 * timestamps and EOS: nothing wraps, timestamps never decrease, every
 * input frame of the buffers has its row. */
GST_START_TEST (test_gap_end_of_time)
{
  const gint rate = 48000;
  const gsize T = 200, d = 1;
  float x[400];
  GstHarness *h;
  SattnOutput o;
  GArray *items;
  GstClockTime ts, dur, t_gap = gst_util_uint64_scale (T, GST_SECOND, rate);
  guint64 rows = 0, gap_frames = 0;
  guint i;

  sattn_fill_signal (x, 2 * T * d, 9, 1.0f);
  h = sattn_harness_new ("window", 32, "hop", 8, NULL);
  sattn_set_caps (h, rate, d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  switch (__i__) {
    case 0:
      ts = t_gap;
      dur = GST_CLOCK_TIME_NONE - 1;
      break;
    case 1:
      ts = t_gap;
      dur = GST_CLOCK_TIME_NONE - 1 - t_gap - 1000;
      break;
    case 2:
      ts = t_gap;
      dur = GST_CLOCK_TIME_NONE;
      break;
    default:
      ts = GST_CLOCK_TIME_NONE - 1;
      dur = GST_CLOCK_TIME_NONE - 1;
      break;
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_gap (ts, dur)));
  if (__i__ == 1)
    fail_unless (gst_harness_push_event (h, gst_event_new_gap
            (GST_CLOCK_TIME_NONE - 2, GST_CLOCK_TIME_NONE - 1)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + T * d,
              T * d * sizeof (float), GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  items = pull_items (h, d, &o);
  ts = 0;
  for (i = 0; i < items->len; i++) {
    const Item *it = &g_array_index (items, Item, i);
    /* Sorted by time; no item may start before the previous one ended. */
    fail_unless (it->pts >= ts, "item %u at %" G_GUINT64_FORMAT " starts "
        "before %" G_GUINT64_FORMAT, i, it->pts, ts);
    ts = it->pts + it->dur;
    if (it->is_event)
      gap_frames += 1;
    else
      rows += it->rows;
  }
  for (i = 0; i + 1 < o.bufs->len; i++)
    fail_unless (g_array_index (o.bufs, SattnOutBuf, i + 1).pts >=
        g_array_index (o.bufs, SattnOutBuf, i).pts);
  if (__i__ == 2) {
    /* No GAP: one continuous stream of 2T frames. */
    fail_unless_equals_int (gap_frames, 0);
    fail_unless_equals_uint64 (rows, 2 * T);
    fail_unless_equals_uint64 (check_tiling (items, 0, rate, TRUE, 8), 2 * T);
  } else if (__i__ == 3) {
    /* The GAP resyncs at the last valid time and ends there: no frames;
     * the data after it sits there, duration 0, its rows all there. */
    fail_unless_equals_int (gap_frames, 0);
    fail_unless_equals_uint64 (rows, 2 * T);
    fail_unless_equals_uint64 (g_array_index (o.bufs, SattnOutBuf,
            o.bufs->len - 1).pts, GST_CLOCK_TIME_NONE - 1);
  } else {
    /* Every buffer frame has its row; the GAP's rows went out as events
     * (the zero rows still pending at the end are rows too: fewer than a
     * window of them). */
    fail_unless (gap_frames >= 1);
    fail_unless (rows >= 2 * T && rows < 2 * T + 32 + 8, "%" G_GUINT64_FORMAT
        " rows", rows);
    /* The data after the GAP sits at the end of the clock's range. */
    fail_unless_equals_uint64 (g_array_index (o.bufs, SattnOutBuf,
            o.bufs->len - 1).pts, GST_CLOCK_TIME_NONE - 1);
  }
  g_array_unref (items);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* 100 frames at 0, a contradicting event, 100 frames, EOS (rate 1000,
 * window 64 > any gap here, so every row is a buffer row):
 *  0: a GAP entirely in the past (10-30 ms): adds nothing;
 *  1: a GAP overlapping the counter (50-150 ms): adds frames 100-149;
 *  2: the second buffer stamped 10 ms behind (within the threshold):
 *     continuous;
 *  3: the second buffer stamped at 0, 100 ms behind: a resync that keeps
 *     the timeline (its frames start at 100 ms, DISCONT, new window);
 *  4: the same flagged DISCONT. */
GST_START_TEST (test_contradicting_times)
{
  const gint rate = 1000;
  const gsize T = 100, d = 2;
  RefConfig c = { 64, 16, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float x[2 * 250];
  guint8 valid[250];
  GstHarness *h;
  GstBuffer *buf;
  SattnOutput o;
  RefOut ra, rb;
  GstClockTime tb = 100 * GST_MSECOND;
  gsize T2 = T, i, split = 0, fa = 0;

  sattn_fill_signal (x, 2 * T * d, 13, 1.0f);
  /* Lone contradicting buffers: resynced at once without a discont-wait
   * (the default 1 s waits for them to persist: test-element-tensor.c). */
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "discont-wait",
      (guint64) 0, NULL);
  sattn_set_caps (h, rate, d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  switch (__i__) {
    case 0:
      fail_unless (gst_harness_push_event (h, gst_event_new_gap (10 *
                  GST_MSECOND, 20 * GST_MSECOND)));
      break;
    case 1:
      fail_unless (gst_harness_push_event (h, gst_event_new_gap (50 *
                  GST_MSECOND, 100 * GST_MSECOND)));
      tb = 150 * GST_MSECOND;
      break;
    case 2:
      tb = 90 * GST_MSECOND;
      break;
    default:
      tb = 0;
      break;
  }
  buf = sattn_buffer_new (x + T * d, T * d * sizeof (float), tb, 0);
  if (__i__ == 4)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);

  if (__i__ <= 2) {
    /* One stream: 200 frames, or 250 with 50 masked in the middle. */
    float *xx = x;
    float y[2 * 250];

    for (i = 0; i < 250; i++)
      valid[i] = 1;
    if (__i__ == 1) {
      memcpy (y, x, T * d * sizeof (float));
      memset (y + T * d, 0, 50 * d * sizeof (float));
      memcpy (y + (T + 50) * d, x + T * d, T * d * sizeof (float));
      for (i = T; i < T + 50; i++)
        valid[i] = 0;
      xx = y;
      T2 = T + 50;
    }
    ref_stream (&c, xx, valid, T + T2, d, TRUE, &ra);
    fail_unless_equals_int (sattn_check_buffers ("continuous", &o, 0,
            o.bufs->len, 0, &ra, 0, rate, 1, 0), T + T2);
    ref_out_clear (&ra);
  } else {
    /* A drained, then B as a new stream at 100 ms (not at 0). */
    ref_stream (&c, x, NULL, T, d, TRUE, &ra);
    ref_stream (&c, x + T * d, NULL, T, d, TRUE, &rb);
    for (i = 0; i < o.bufs->len; i++) {
      const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);
      if (i > 0 && b->discont) {
        split = i;
        break;
      }
      fa += b->n_floats;
    }
    fail_unless (split > 0, "no DISCONT output after the resync");
    fail_unless_equals_int (sattn_check_buffers ("before", &o, 0, split, 0,
            &ra, 0, rate, 1, 0), T);
    fail_unless_equals_int (sattn_check_buffers ("after", &o, split,
            o.bufs->len, fa, &rb, 0, rate, 1, 100 * GST_MSECOND), T);
    ref_out_clear (&ra);
    ref_out_clear (&rb);
  }
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Timestamps near G_MAXUINT64: the first buffer 50 ms before the end of
 * the clock's range at 1 kHz (0), or a jump there mid-stream (1); 100
 * frames.  Output PTS saturate at the last valid time: they never wrap or
 * decrease, durations stay within the range, every frame has its row. */
GST_START_TEST (test_pts_end_of_clock)
{
  const gint rate = 1000;
  const gsize T = 100, d = 1;
  RefConfig c = { 16, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  const GstClockTime t0 = GST_CLOCK_TIME_NONE - 1 - 50 * GST_MSECOND;
  float x[2 * 100];
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  gsize rows = 0;
  guint i;

  sattn_fill_signal (x, 2 * T * d, 17, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "discont-wait",
      (guint64) 0, NULL);
  sattn_set_caps (h, rate, d);
  if (__i__ == 1)
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + T * d,
                T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), t0, 0)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + T * d,
              10 * d * sizeof (float), GST_CLOCK_TIME_NONE - 1, 0)),
      GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  for (i = 0; i < o.bufs->len; i++) {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);
    fail_unless (GST_CLOCK_TIME_IS_VALID (b->pts));
    fail_unless (b->duration <= GST_CLOCK_TIME_NONE - 1 - b->pts);
    if (i > 0)
      fail_unless (b->pts >= g_array_index (o.bufs, SattnOutBuf, i - 1).pts
          + g_array_index (o.bufs, SattnOutBuf, i - 1).duration,
          "buffer %u goes back in time", i);
    rows += b->n_floats / d;
  }
  fail_unless_equals_int (rows, (__i__ == 1 ? 2 : 1) * T + 10);
  /* The rows of the stream at the end of the clock are the reference's:
   * the last buffer, stamped at the end, continues it. */
  ref_stream (&c, x, NULL, T + 10, d, TRUE, &ref);
  sattn_assert_close ("end of clock", &g_array_index (o.floats, float,
          o.floats->len - (T + 10) * d), ref.rows, (T + 10) * d);
  fail_unless_equals_uint64 (g_array_index (o.bufs, SattnOutBuf,
          o.bufs->len - 1).pts + g_array_index (o.bufs, SattnOutBuf,
          o.bufs->len - 1).duration, GST_CLOCK_TIME_NONE - 1);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Health messages across a long GAP (one per window, message-interval
 * 0): the skipped windows are reported together in one message; over all
 * messages the windows, frames and invalid frames add up to the stream's,
 * and the messages tile the time line. */
GST_START_TEST (test_gap_health_messages)
{
  const gint rate = 48000;
  const gsize T = 1024, d = 2;
  const GstClockTime gap = 10000 * GST_SECOND;
  const guint64 gap_frames = gst_util_uint64_scale (gap, rate, GST_SECOND);
  const guint64 F = 2 * T + gap_frames;
  GstClockTime t_gap = gst_util_uint64_scale (T, GST_SECOND, rate);
  GstClockTime t_after = gst_util_uint64_scale (T + gap_frames, GST_SECOND,
      rate), at = 0;
  float *x = g_new (float, 2 * T * d);
  guint64 windows = 0, frames = 0, invalid = 0;
  guint n_msg = 0;
  GstHarness *h;
  GstBus *bus;
  GstMessage *msg;

  sattn_fill_signal (x, 2 * T * d, 5, 1.0f);
  h = sattn_harness_new ("window", 64, "hop", 16, "post-messages", TRUE,
      "message-interval", (guint64) 0, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, rate, d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_gap (t_gap,
              t_after - t_gap)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + T * d,
              T * d * sizeof (float), t_after, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ELEMENT)) != NULL) {
    const GstStructure *st = gst_message_get_structure (msg);
    guint64 v, ts, dur;

    if (gst_structure_has_name (st, "sattn")) {
      fail_unless (gst_structure_get_uint64 (st, "timestamp", &ts));
      fail_unless (gst_structure_get_uint64 (st, "duration", &dur));
      fail_unless_equals_uint64 (ts, at);
      at = ts + dur;
      fail_unless (gst_structure_get_uint64 (st, "windows", &v));
      windows += v;
      fail_unless (gst_structure_get_uint64 (st, "frames", &v));
      frames += v;
      fail_unless (gst_structure_get_uint64 (st, "invalid-frames", &v));
      invalid += v;
      n_msg++;
    }
    gst_message_unref (msg);
  }
  /* F is a multiple of the hop: every frame is in a window, none left to
   * drain. */
  fail_unless_equals_uint64 (windows, F / 16);
  fail_unless_equals_uint64 (frames, F);
  fail_unless_equals_uint64 (invalid, gap_frames);
  fail_unless_equals_uint64 (at, gst_util_uint64_scale (F, GST_SECOND, rate));
  fail_unless (n_msg < 2 * (2 * T / 16) + 8, "%u messages", n_msg);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Two GAP events in a row (window 8, hop 6, rate 1200): the first, of
 * 100 frames, is skipped in closed form and leaves frames that no window
 * has covered yet (100 is not a multiple of the hop); the second, of 10
 * frames, starts with a window that holds no usable frame and must be
 * skipped too, not refused.  Frames (0) and last (1) mode: both events
 * are taken, no error, and the output tiles the 20 + 110 + 20 frames. */
GST_START_TEST (test_gap_after_gap)
{
  const gint rate = 1200;
  const gsize T = 20, d = 1;
  const gboolean last = __i__ == 1;
  float x[2 * 20];
  GstHarness *h;
  GstBus *bus;
  GstMessage *msg;
  SattnOutput o;
  GArray *items;

#define FT(f) gst_util_uint64_scale ((f), GST_SECOND, rate)
  sattn_fill_signal (x, 2 * T * d, 21, 1.0f);
  h = sattn_harness_new ("window", 8, "hop", 6, "output", last ? OUT_LAST :
      OUT_FRAMES, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, rate, d);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_gap (FT (20),
              FT (120) - FT (20))));
  fail_unless (gst_harness_push_event (h, gst_event_new_gap (FT (120),
              FT (130) - FT (120))));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + T * d,
              T * d * sizeof (float), FT (130), 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (msg == NULL, "error %" GST_PTR_FORMAT, msg);

  sattn_output_init (&o);
  items = pull_items (h, d, &o);
  fail_unless_equals_uint64 (check_tiling (items, 0, rate,
          !last, 6), 2 * T + 110);
#undef FT
  g_array_unref (items);
  sattn_output_clear (&o);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

static Suite *
sattn_timeline_suite (void)
{
  Suite *s = suite_create ("sattn-timeline");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_loop_test (tc, test_gap_huge, 0, 3);
  tcase_add_loop_test (tc, test_gap_end_of_time, 0, 4);
  tcase_add_test (tc, test_gap_health_messages);
  tcase_add_loop_test (tc, test_gap_after_gap, 0, 2);
  tcase_add_loop_test (tc, test_contradicting_times, 0, 5);
  tcase_add_loop_test (tc, test_pts_end_of_clock, 0, 2);
  return s;
}

GST_CHECK_MAIN (sattn_timeline);
