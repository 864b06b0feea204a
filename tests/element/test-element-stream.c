/* sattn element: streaming, timestamps and events.
 *
 * Every output is checked against the float64 reference of
 * sattn-check.c (tolerance 1e-5 × (1 + max|ref|)), with exact PTS,
 * DURATION and OFFSET from the frame counter.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <math.h>
#include <string.h>

/* Push n_bytes of data in chunks of random size (1 byte to 64 KiB, mostly
 * odd), every few chunks misaligned in memory; only the first buffer has a
 * timestamp (t0). */
static void
push_random_chunks (GstHarness * h, const void *data, gsize n_bytes,
    guint32 seed, GstClockTime t0)
{
  GRand *r = g_rand_new_with_seed (seed);
  const guint8 *p = data;
  gsize off = 0;
  guint i = 0;

  while (off < n_bytes) {
    gsize len;
    gint kind = g_rand_int_range (r, 0, 3);

    if (kind == 0)
      len = g_rand_int_range (r, 1, 17);
    else if (kind == 1)
      len = g_rand_int_range (r, 17, 4097);
    else
      len = g_rand_int_range (r, 4097, 65537);
    len |= 1;
    len = MIN (len, n_bytes - off);
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (p + off,
                len, i == 0 ? t0 : GST_CLOCK_TIME_NONE, i % 5 == 4 ? 1 + i % 3
                : 0)), GST_FLOW_OK);
    off += len;
    i++;
  }
  g_rand_free (r);
}

static gboolean
pull_until_eos (GstHarness * h)
{
  GstEvent *ev;
  gboolean eos = FALSE;

  while ((ev = gst_harness_try_pull_event (h)) != NULL) {
    eos |= GST_EVENT_TYPE (ev) == GST_EVENT_EOS;
    gst_event_unref (ev);
  }
  return eos;
}

/* Run T frames through the element in random chunks, drain with EOS and
 * compare everything with the reference. */
static void
run_chunked (const RefConfig * c, gint rate, gint channels, guint fs,
    gsize T, guint32 seed)
{
  const gsize d = (gsize) channels * fs;
  float *x = g_new (float, T * d);
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  gchar *label;

  sattn_fill_signal (x, T * d, seed, 1.0f);
  h = sattn_harness_new ("window", c->window, "hop", c->hop, "frame-size",
      fs, "heads", c->heads, "scale", c->scale, "causal", c->causal,
      "lookback", c->lookback, "output", c->output, "start", c->start, NULL);
  sattn_set_caps (h, rate, channels);
  push_random_chunks (h, x, T * d * sizeof (float), seed + 1, 0);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  fail_unless (pull_until_eos (h), "EOS was not forwarded");

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (c, x, NULL, T, d, TRUE, &ref);
  if (c->output == OUT_FRAMES)
    fail_unless_equals_int (ref.n_rows, T);
  fail_unless_equals_int (o.floats->len, ref.n_rows * ref.row_floats);

  label = g_strdup_printf ("chunked out=%d start=%d T=%" G_GSIZE_FORMAT,
      c->output, c->start, T);
  fail_unless_equals_int (sattn_check_buffers (label, &o, 0, o.bufs->len, 0,
          &ref, 0, rate, fs, 0), ref.n_rows);
  g_free (label);

  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

/* Frames in == frames out in frames mode, whatever the buffer sizes, with
 * either start policy; the last frame count is not a multiple of hop. */
GST_START_TEST (test_frames_random_chunks)
{
  RefConfig c = { 16, 5, 2, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };

  c.start = __i__ == 0 ? START_PAD : START_WAIT;
  run_chunked (&c, 16000, 3, 2, 12007, 11 + __i__);
}

GST_END_TEST;

/* Pooled modes: one row per window, the expected window count. */
GST_START_TEST (test_pooled_random_chunks)
{
  static const gint outs[] = { OUT_WINDOW, OUT_MEAN, OUT_LAST };
  RefConfig c = { 12, 4, 1, 0, 0.0, FALSE, OUT_WINDOW, START_PAD };
  gsize T = 3001, expected;

  c.output = outs[__i__ % 3];
  c.start = __i__ / 3 == 0 ? START_PAD : START_WAIT;
  /* pad: every hop, plus the drain of the rest; wait: from the window. */
  if (c.start == START_PAD)
    expected = (T + c.hop - 1) / c.hop;
  else
    expected = 1 + (T - c.window) / c.hop + ((T - c.window) % c.hop != 0);
  {
    RefOut ref;
    float *x = g_new0 (float, T * 2);

    ref_stream (&c, x, NULL, T, 2, TRUE, &ref);
    fail_unless_equals_int (ref.n_rows, expected);
    ref_out_clear (&ref);
    g_free (x);
  }
  run_chunked (&c, 8000, 2, 1, T, 21 + __i__);
}

GST_END_TEST;

/* A short stream (fewer frames than a window) still drains fully. */
GST_START_TEST (test_short_stream_drains)
{
  RefConfig c = { 64, 8, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };

  c.start = __i__ % 2 ? START_WAIT : START_PAD;
  c.output = __i__ / 2 ? OUT_MEAN : OUT_FRAMES;
  run_chunked (&c, 1000, 2, 1, 7, 5);
}

GST_END_TEST;

/* One input buffer larger than an output buffer holds: the rows are
 * split over several contiguous output buffers. */
GST_START_TEST (test_large_buffer)
{
  const gsize T = 40003;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float *x = g_new (float, T);
  GstHarness *h;
  SattnOutput o;
  RefOut ref;

  sattn_fill_signal (x, T, 31, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  sattn_set_caps (h, 48000, 1);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  fail_unless (o.bufs->len >= 3, "%u output buffers", o.bufs->len);
  ref_stream (&c, x, NULL, T, 1, TRUE, &ref);
  fail_unless_equals_int (sattn_check_buffers ("large buffer", &o, 0,
          o.bufs->len, 0, &ref, 0, 48000, 1, 0), T);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

/* Timestamps over a long stream: rate 44100 with 147-sample buffers
 * (3.33 ms, not a whole number of ns) and 3-sample frames; every output
 * PTS must equal the frame counter's time exactly, durations must be
 * contiguous, and no resync may happen. */
GST_START_TEST (test_timestamps_long)
{
  const gint rate = 44100;
  const guint fs = 3, per_buf = 147;
  const guint64 n_bufs = 20000; /* 2.94 M samples, 980000 frames */
  float data[147];
  GstHarness *h;
  guint64 b, sample = 0, rows = 0;
  GstClockTime expect_pts = 0;
  guint n_out = 0;

  h = sattn_harness_new ("window", 4, "hop", 2, "frame-size", fs, NULL);
  sattn_set_caps (h, rate, 1);
  sattn_fill_signal (data, per_buf, 3, 1.0f);

  for (b = 0; b <= n_bufs; b++) {
    GstBuffer *out;

    if (b < n_bufs) {
      GstClockTime pts = gst_util_uint64_scale (sample, GST_SECOND, rate);

      fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (data,
                  sizeof (data), pts, 0)), GST_FLOW_OK);
      sample += per_buf;
    } else {
      fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
    }
    while ((out = gst_harness_try_pull (h)) != NULL) {
      guint64 n = gst_buffer_get_size (out) / (fs * sizeof (float));
      GstClockTime end = gst_util_uint64_scale ((rows + n) * fs, GST_SECOND,
          rate);

      fail_unless_equals_uint64 (GST_BUFFER_PTS (out), expect_pts);
      fail_unless_equals_uint64 (GST_BUFFER_PTS (out) +
          GST_BUFFER_DURATION (out), end);
      fail_unless_equals_uint64 (GST_BUFFER_OFFSET (out), rows);
      fail_unless_equals_uint64 (GST_BUFFER_OFFSET_END (out), rows + n);
      fail_unless_equals_int (GST_BUFFER_IS_DISCONT (out), n_out == 0);
      expect_pts = end;
      rows += n;
      n_out++;
      gst_buffer_unref (out);
    }
  }
  fail_unless_equals_uint64 (rows, sample / fs);
  g_print ("long stream: %" G_GUINT64_FORMAT " frames, %u buffers, last "
      "end %" GST_TIME_FORMAT "\n", rows, n_out, GST_TIME_ARGS (expect_pts));
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Two blocks A and B of 10 frames; B carries DISCONT (0), jumps by 1 s
 * (1), jitters by 5 ms (2, below the threshold: no resync) or starts
 * exactly where A ended but is flagged DISCONT with no timestamp (3). */
GST_START_TEST (test_discont_and_jumps)
{
  const gint rate = 1000, ch = 2;
  const gsize T = 10, d = 2;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float x[40];
  GstHarness *h;
  GstBuffer *buf;
  SattnOutput o;
  RefOut ra, rb;
  GstClockTime tb;
  guint i, split;
  gsize fa;

  sattn_fill_signal (x, 2 * T * d, 41, 1.0f);
  /* A lone jump resyncs at once only without a discont-wait (the
   * default 1 s waits for the jump to persist: test-element-tensor.c). */
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "discont-wait",
      (guint64) 0, NULL);
  sattn_set_caps (h, rate, ch);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);

  switch (__i__) {
    case 0:
      tb = 5 * GST_SECOND;
      break;
    case 1:
      tb = 10 * GST_MSECOND + GST_SECOND;
      break;
    case 2:
      tb = 15 * GST_MSECOND;
      break;
    default:
      tb = GST_CLOCK_TIME_NONE;
      break;
  }
  buf = sattn_buffer_new (x + T * d, T * d * sizeof (float), tb, 0);
  if (__i__ == 0 || __i__ == 3)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);

  if (__i__ == 2) {
    /* One continuous stream of 2T frames; B's timestamp is ignored. */
    ref_stream (&c, x, NULL, 2 * T, d, TRUE, &ra);
    sattn_check_buffers ("jitter", &o, 0, o.bufs->len, 0, &ra, 0, rate, 1, 0);
    ref_out_clear (&ra);
  } else {
    /* A drained completely, then B as a new stream. */
    ref_stream (&c, x, NULL, T, d, TRUE, &ra);
    ref_stream (&c, x + T * d, NULL, T, d, TRUE, &rb);
    split = 0;
    fa = 0;
    for (i = 0; i < o.bufs->len; i++) {
      const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);
      if (i > 0 && b->discont) {
        split = i;
        break;
      }
      fa += b->n_floats;
    }
    fail_unless (split > 0, "no DISCONT output after the resync");
    fail_unless_equals_int (sattn_check_buffers ("before resync", &o, 0,
            split, 0, &ra, 0, rate, 1, 0), T);
    fail_unless_equals_int (sattn_check_buffers ("after resync", &o, split,
            o.bufs->len, fa, &rb, 0, rate, 1, GST_CLOCK_TIME_IS_VALID (tb) ?
            tb : 10 * GST_MSECOND), T);
    ref_out_clear (&ra);
    ref_out_clear (&rb);
  }
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Nothing from before a flush comes out after it; the stream restarts. */
GST_START_TEST (test_flush)
{
  const gint rate = 1000;
  const gsize d = 2;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float old[14], x[20];
  GstHarness *h;
  GstSegment seg;
  SattnOutput o;
  RefOut ref;

  sattn_fill_signal (old, 14, 51, 1.0f);
  sattn_fill_signal (x, 20, 52, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  sattn_set_caps (h, rate, 2);

  /* 6 frames: one hop out, 2 frames and half a frame held back. */
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (old,
              6 * d * sizeof (float) + 5, 0, 0)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_buffers_in_queue (h), 1);
  gst_buffer_unref (gst_harness_pull (h));

  fail_unless (gst_harness_push_event (h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_stop (TRUE)));
  gst_segment_init (&seg, GST_FORMAT_TIME);
  seg.base = 0;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_buffers_in_queue (h), 0);

  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, x, NULL, 10, d, TRUE, &ref);
  fail_unless_equals_int (o.floats->len, 10 * d);
  sattn_check_buffers ("after flush", &o, 0, o.bufs->len, 0, &ref, 0, rate,
      1, 0);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Records what reaches the harness sink pad, in order. */
static GstPadProbeReturn
record_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  GString *log = user_data;

  if (GST_PAD_PROBE_INFO_TYPE (info) & GST_PAD_PROBE_TYPE_BUFFER) {
    g_string_append_printf (log, "buffer:%" G_GSIZE_FORMAT " ",
        gst_buffer_get_size (GST_PAD_PROBE_INFO_BUFFER (info)) /
        sizeof (float));
  } else if (GST_PAD_PROBE_INFO_TYPE (info) & GST_PAD_PROBE_TYPE_EVENT_BOTH) {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

    if (GST_EVENT_TYPE (ev) == GST_EVENT_CAPS) {
      GstCaps *caps;
      gint ch = 0;

      gst_event_parse_caps (ev, &caps);
      gst_structure_get_int (gst_caps_get_structure (caps, 0), "channels", &ch);
      g_string_append_printf (log, "caps:%d ", ch);
    } else {
      g_string_append_printf (log, "%s ", GST_EVENT_TYPE_NAME (ev));
    }
  }
  return GST_PAD_PROBE_OK;
}

/* A different segment mid-stream drains what is held (before the new
 * segment goes downstream) and restarts the window at the next buffer. */
GST_START_TEST (test_new_segment)
{
  const gint rate = 1000;
  const gsize d = 2;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float a[12], b[20];
  GstHarness *h;
  GstSegment seg;
  GString *log = g_string_new (NULL);
  SattnOutput o;
  RefOut ra, rb;

  sattn_fill_signal (a, 12, 53, 1.0f);
  sattn_fill_signal (b, 20, 54, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  gst_pad_add_probe (h->sinkpad, GST_PAD_PROBE_TYPE_DATA_DOWNSTREAM,
      record_probe, log, NULL);
  sattn_set_caps (h, rate, 2);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (a,
              sizeof (a), 0, 0)), GST_FLOW_OK);

  gst_segment_init (&seg, GST_FORMAT_TIME);
  seg.start = seg.time = GST_SECOND;
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&seg)));
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (b,
              sizeof (b), GST_SECOND, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  /* A's last 2 rows come out before the new segment. */
  fail_unless_equals_string (log->str, "stream-start caps:2 segment "
      "buffer:8 buffer:4 segment buffer:16 buffer:4 eos ");

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, a, NULL, 6, d, TRUE, &ra);
  ref_stream (&c, b, NULL, 10, d, TRUE, &rb);
  fail_unless_equals_int (sattn_check_buffers ("old segment", &o, 0, 2, 0,
          &ra, 0, rate, 1, 0), 6);
  fail_unless_equals_int (sattn_check_buffers ("new segment", &o, 2,
          o.bufs->len, 12, &rb, 0, rate, 1, GST_SECOND), 10);
  ref_out_clear (&ra);
  ref_out_clear (&rb);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_string_free (log, TRUE);
}

GST_END_TEST;

/* stream-start, caps, segment reach the src side in order, and a caps
 * change drains the old frames under the old caps first. */
GST_START_TEST (test_event_order_and_caps_change)
{
  const gint rate = 1000;
  RefConfig c = { 8, 4, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float a[20], b[18];
  GstHarness *h;
  GString *log = g_string_new (NULL);
  SattnOutput o;
  RefOut ra, rb;
  GstCaps *caps;
  GstStructure *s;
  gint v;
  guint64 mask;

  sattn_fill_signal (a, 20, 61, 1.0f);
  sattn_fill_signal (b, 18, 62, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  gst_pad_add_probe (h->sinkpad, GST_PAD_PROBE_TYPE_DATA_DOWNSTREAM,
      record_probe, log, NULL);

  sattn_set_caps (h, rate, 2);
  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (caps != NULL);
  s = gst_caps_get_structure (caps, 0);
  fail_unless_equals_string (gst_structure_get_string (s, "format"), "F32LE");
  fail_unless_equals_string (gst_structure_get_string (s, "layout"),
      "interleaved");
  fail_unless (gst_structure_get_int (s, "rate", &v));
  fail_unless_equals_int (v, 1000);
  fail_unless (gst_structure_get_int (s, "channels", &v));
  fail_unless_equals_int (v, 2);
  fail_unless (gst_structure_get (s, "channel-mask", GST_TYPE_BITMASK, &mask,
          NULL));
  fail_unless_equals_uint64 (mask, 0);
  gst_caps_unref (caps);

  /* 10 frames of 2 channels: 8 out at once, 2 drained by the caps change. */
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (a,
              sizeof (a), 0, 0)), GST_FLOW_OK);
  sattn_set_caps (h, rate, 3);
  /* 6 frames of 3 channels, continuing at 10 ms. */
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (b,
              sizeof (b), 10 * GST_MSECOND, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  fail_unless_equals_string (log->str, "stream-start caps:2 segment "
      "buffer:16 buffer:4 caps:3 segment buffer:12 buffer:6 eos ");

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, a, NULL, 10, 2, TRUE, &ra);
  ref_stream (&c, b, NULL, 6, 3, TRUE, &rb);
  fail_unless_equals_int (sattn_check_buffers ("before caps change", &o, 0,
          2, 0, &ra, 0, rate, 1, 0), 10);
  fail_unless_equals_int (sattn_check_buffers ("after caps change", &o, 2,
          4, 20, &rb, 0, rate, 1, 10 * GST_MSECOND), 6);

  ref_out_clear (&ra);
  ref_out_clear (&rb);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_string_free (log, TRUE);
}

GST_END_TEST;

/* GAP events (0) and GAP-flagged buffers holding garbage (1): their frames
 * are masked keys, their rows are produced, and an output buffer made only
 * of such rows is flagged GAP. */
GST_START_TEST (test_gap)
{
  const gint rate = 1000;
  const gsize d = 2;
  RefConfig c = { 8, 2, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float x[32];
  guint8 valid[16];
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  guint i, n_gap = 0;

  sattn_fill_signal (x, 32, 71, 1.0f);
  for (i = 0; i < 16; i++)
    valid[i] = i < 6 || i >= 10;
  for (i = 6 * d; i < 10 * d; i++)
    x[i] = i % 3 ? 1e30f : NAN;

  h = sattn_harness_new ("window", c.window, "hop", c.hop, NULL);
  sattn_set_caps (h, rate, 2);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              6 * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  if (__i__ == 0) {
    fail_unless (gst_harness_push_event (h, gst_event_new_gap (6 *
                GST_MSECOND, 4 * GST_MSECOND)));
  } else {
    GstBuffer *buf = sattn_buffer_new (x + 6 * d, 4 * d * sizeof (float),
        6 * GST_MSECOND, 0);
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  }
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + 10 * d,
              6 * d * sizeof (float), 10 * GST_MSECOND, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, x, valid, 16, d, TRUE, &ref);
  fail_unless_equals_int (sattn_check_buffers ("gap", &o, 0, o.bufs->len, 0,
          &ref, 0, rate, 1, 0), 16);
  for (i = 0; i < o.bufs->len; i++) {
    const SattnOutBuf *b = &g_array_index (o.bufs, SattnOutBuf, i);
    if (b->gap) {
      n_gap++;
      fail_unless_equals_uint64 (b->pts, 6 * GST_MSECOND);
      fail_unless_equals_uint64 (b->duration, 4 * GST_MSECOND);
    }
  }
  fail_unless_equals_int (n_gap, 1);
  for (i = 6 * d; i < 10 * d; i++)
    fail_unless (g_array_index (o.floats, float, i) == 0.0f);

  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Input that adds no sample while half a frame is held must not mask
 * that frame: a 0-byte buffer flagged GAP (0), a GAP event of duration 0
 * at the counter (1).  16 frames of 2 samples x 1 channel cut at 5.5
 * frames (a sample boundary) around it:
 * every row equals the reference's with every frame valid. */
GST_START_TEST (test_gap_adds_nothing)
{
  const gint rate = 1000;
  const gsize d = 2, cut = 11 * sizeof (float);
  RefConfig c = { 8, 2, 1, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  float x[32];
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  guint i;

  sattn_fill_signal (x, 32, 73, 1.0f);
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "frame-size", 2,
      NULL);
  sattn_set_caps (h, rate, 1);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x, cut, 0,
              0)), GST_FLOW_OK);
  if (__i__ == 0) {
    GstBuffer *buf = gst_buffer_new ();

    GST_BUFFER_PTS (buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  } else {
    fail_unless (gst_harness_push_event (h, gst_event_new_gap
            (11 * GST_MSECOND, 0)));
  }
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new ((guint8 *)
              x + cut, sizeof x - cut, GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, x, NULL, 16, d, TRUE, &ref);
  fail_unless_equals_int (sattn_check_buffers ("gap adds nothing", &o, 0,
          o.bufs->len, 0, &ref, 0, rate, 2, 0), 16);
  for (i = 0; i < o.bufs->len; i++)
    fail_if (g_array_index (o.bufs, SattnOutBuf, i).gap);

  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Frames with NaN / Inf under invalid-frames=mask (0) and =zero (1). */
GST_START_TEST (test_invalid_frames_policy)
{
  const gint rate = 1000;
  const gsize T = 40, d = 4;
  RefConfig c = { 8, 4, 2, 0, 0.0, TRUE, OUT_FRAMES, START_PAD };
  static const guint bad[] = { 0, 5, 6, 17, 39 };
  float x[160], xz[160];
  GstHarness *h;
  SattnOutput o;
  RefOut ref;
  guint i;

  sattn_fill_signal (x, T * d, 81, 1.0f);
  memcpy (xz, x, sizeof (x));
  for (i = 0; i < G_N_ELEMENTS (bad); i++) {
    x[bad[i] * d + i % d] = i % 2 ? INFINITY : NAN;
    if (i == 2)
      x[bad[i] * d] = -INFINITY;
    memset (xz + bad[i] * d, 0, d * sizeof (float));
  }

  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", 2,
      "causal", TRUE, "invalid-frames", __i__ == 0 ? INV_MASK : INV_ZERO, NULL);
  sattn_set_caps (h, rate, 4);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  /* mask: the reference masks non-finite frames; zero: zeros, valid. */
  ref_stream (&c, __i__ == 0 ? x : xz, NULL, T, d, TRUE, &ref);
  fail_unless_equals_int (sattn_check_buffers (__i__ == 0 ? "invalid mask" :
          "invalid zero", &o, 0, o.bufs->len, 0, &ref, 0, rate, 1, 0), T);
  for (i = 0; i < o.floats->len; i++)
    fail_unless (isfinite (g_array_index (o.floats, float, i)));
  if (__i__ == 0)
    for (i = 0; i < G_N_ELEMENTS (bad); i++)
      fail_unless (g_array_index (o.floats, float, bad[i] * d) == 0.0f);

  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* Source caps per output mode: channels and rate as documented. */
GST_START_TEST (test_src_caps_per_mode)
{
  static const gint outs[] = { OUT_FRAMES, OUT_WINDOW, OUT_MEAN, OUT_LAST };
  /* rate 16000, 4 channels, frame-size 4: d_model 16, frame rate 4000. */
  static const gint exp_ch[] = { 16, 8 * 16, 16, 16 };
  static const gint exp_rate[] = { 4000, 1000, 1000, 1000 };
  GstHarness *h;
  GstCaps *caps;
  GstStructure *s;
  gint v;
  float x[4 * 4 * 8];

  h = sattn_harness_new ("window", 8, "hop", 4, "frame-size", 4, "heads", 4,
      "output", outs[__i__], NULL);
  sattn_set_caps (h, 16000, 4);
  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (caps != NULL);
  s = gst_caps_get_structure (caps, 0);
  fail_unless (gst_structure_get_int (s, "channels", &v));
  fail_unless_equals_int (v, exp_ch[__i__]);
  fail_unless (gst_structure_get_int (s, "rate", &v));
  fail_unless_equals_int (v, exp_rate[__i__]);
  gst_caps_unref (caps);

  /* 8 frames: two hops. */
  sattn_fill_signal (x, G_N_ELEMENTS (x), 91, 1.0f);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof (x), 0, 0)), GST_FLOW_OK);
  fail_unless_equals_int (gst_harness_buffers_in_queue (h), 1);
  {
    GstBuffer *out = gst_harness_pull (h);
    gsize rows = outs[__i__] == OUT_FRAMES ? 8 : 2;

    fail_unless_equals_int (gst_buffer_get_size (out),
        rows * exp_ch[__i__] * sizeof (float));
    gst_buffer_unref (out);
  }
  gst_harness_teardown (h);
}

GST_END_TEST;

/* More than 64 channels: unpositioned (channel-mask 0) or without a mask;
 * the window mode multiplies the count further. */
GST_START_TEST (test_many_channels)
{
  const gint ch = 80;
  const gsize T = 12, d = 80;
  RefConfig c = { 4, 2, 4, 0, 0.0, FALSE, OUT_FRAMES, START_PAD };
  gchar *str;
  GstHarness *h;
  GstCaps *caps;
  gint v;
  float *x = g_new (float, T * d);
  SattnOutput o;
  RefOut ref;

  c.output = __i__ == 2 ? OUT_WINDOW : OUT_FRAMES;
  h = sattn_harness_new ("window", c.window, "hop", c.hop, "heads", 4,
      "output", c.output, NULL);
  if (__i__ == 0)
    str = g_strdup_printf ("audio/x-raw, format=F32LE, layout=interleaved, "
        "rate=8000, channels=%d, channel-mask=(bitmask)0x0", ch);
  else
    str = g_strdup_printf ("audio/x-raw, format=F32LE, layout=interleaved, "
        "rate=8000, channels=%d", ch);
  gst_harness_set_src_caps_str (h, str);
  g_free (str);

  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (caps != NULL);
  fail_unless (gst_structure_get_int (gst_caps_get_structure (caps, 0),
          "channels", &v));
  fail_unless_equals_int (v, c.output == OUT_WINDOW ? 4 * 80 : 80);
  gst_caps_unref (caps);

  sattn_fill_signal (x, T * d, 101, 0.3f);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              T * d * sizeof (float), 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  ref_stream (&c, x, NULL, T, d, TRUE, &ref);
  sattn_check_buffers ("80 channels", &o, 0, o.bufs->len, 0, &ref, 0, 8000, 1,
      0);
  ref_out_clear (&ref);
  sattn_output_clear (&o);
  gst_harness_teardown (h);
  g_free (x);
}

GST_END_TEST;

static Suite *
sattn_stream_suite (void)
{
  Suite *s = suite_create ("sattn-stream");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_loop_test (tc, test_frames_random_chunks, 0, 2);
  tcase_add_loop_test (tc, test_pooled_random_chunks, 0, 6);
  tcase_add_loop_test (tc, test_short_stream_drains, 0, 4);
  tcase_add_test (tc, test_large_buffer);
  tcase_add_test (tc, test_timestamps_long);
  tcase_add_loop_test (tc, test_discont_and_jumps, 0, 4);
  tcase_add_test (tc, test_flush);
  tcase_add_test (tc, test_new_segment);
  tcase_add_test (tc, test_event_order_and_caps_change);
  tcase_add_loop_test (tc, test_gap, 0, 2);
  tcase_add_loop_test (tc, test_gap_adds_nothing, 0, 2);
  tcase_add_loop_test (tc, test_invalid_frames_policy, 0, 2);
  tcase_add_loop_test (tc, test_src_caps_per_mode, 0, 4);
  tcase_add_loop_test (tc, test_many_channels, 0, 3);
  return s;
}

GST_CHECK_MAIN (sattn_stream);
