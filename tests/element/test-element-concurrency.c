/* The sattn element under concurrency: the `attn` pad requested and
 * released while data flows, flushing seeks racing the first maps, and
 * many pipelines in one process with properties changed while PLAYING.
 * Run in every build; in the ThreadSanitizer build (make test-tsan) any
 * race report fails the test (halt_on_error in TSAN_OPTIONS).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <glib/gstdio.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

static gboolean
have_elements (const gchar * test, const gchar * const *names)
{
  for (; *names; names++) {
    GstElementFactory *f = gst_element_factory_find (*names);

    if (f == NULL) {
      g_print ("SKIP %s: the '%s' element is missing "
          "(gstreamer1.0-plugins-base)\n", test, *names);
      return FALSE;
    }
    gst_object_unref (f);
  }
  return TRUE;
}

/* What the downstream side of one attn pad saw, checked as it goes:
 * stream-start, then caps, then segment before any buffer, after every
 * request and every flush (a flush drops the segment); never first caps
 * after a segment. */
typedef struct
{
  GMutex lock;
  GCond cond;
  gboolean stream_start, caps, segment;
  guint buffers, flushes, errors;
  gchar *first_error;
} OrderCheck;

static void
order_check_init (OrderCheck * oc)
{
  memset (oc, 0, sizeof (*oc));
  g_mutex_init (&oc->lock);
  g_cond_init (&oc->cond);
}

static void
order_check_clear (OrderCheck * oc)
{
  g_mutex_clear (&oc->lock);
  g_cond_clear (&oc->cond);
  g_free (oc->first_error);
}

/* A new pad: nothing seen yet. */
static void
order_check_reset (OrderCheck * oc)
{
  g_mutex_lock (&oc->lock);
  oc->stream_start = oc->caps = oc->segment = FALSE;
  oc->buffers = 0;
  g_mutex_unlock (&oc->lock);
}

static void
order_error (OrderCheck * oc, const gchar * what)
{
  oc->errors++;
  if (oc->first_error == NULL)
    oc->first_error = g_strdup (what);
}

static GstPadProbeReturn
order_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  OrderCheck *oc = user_data;

  g_mutex_lock (&oc->lock);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    if (!oc->stream_start || !oc->caps || !oc->segment)
      order_error (oc, "a map before stream-start, caps and segment");
    oc->buffers++;
    g_cond_broadcast (&oc->cond);
  } else if (info->type & GST_PAD_PROBE_TYPE_EVENT_BOTH) {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

    switch (GST_EVENT_TYPE (ev)) {
      case GST_EVENT_STREAM_START:
        oc->stream_start = TRUE;
        break;
      case GST_EVENT_CAPS:
        if (!oc->stream_start)
          order_error (oc, "caps before stream-start");
        /* New caps replace old ones after a segment; first caps after a
         * segment are misordered. */
        if (oc->segment && !oc->caps)
          order_error (oc, "first caps after the segment");
        oc->caps = TRUE;
        break;
      case GST_EVENT_SEGMENT:
        /* Caps may be missing: end of stream on a pad that never had a
         * map has stream-start and segment only. */
        if (!oc->stream_start)
          order_error (oc, "segment before stream-start");
        oc->segment = TRUE;
        break;
      case GST_EVENT_FLUSH_STOP:
        oc->segment = FALSE;
        oc->flushes++;
        break;
      default:
        break;
    }
  }
  g_mutex_unlock (&oc->lock);
  return GST_PAD_PROBE_OK;
}

/* Wait until the pad pushed at least n maps since the last reset. */
static gboolean
order_check_wait (OrderCheck * oc, guint n, gint64 timeout_us)
{
  gint64 end = g_get_monotonic_time () + timeout_us;
  gboolean ok = TRUE;

  g_mutex_lock (&oc->lock);
  while (oc->buffers < n && ok)
    ok = g_cond_wait_until (&oc->cond, &oc->lock, end);
  ok = oc->buffers >= n;
  g_mutex_unlock (&oc->lock);
  return ok;
}

/* GStreamer's own complaints about event order ("Got data flow before
 * stream-start event", "Sticky event misordering") are g_warning()s of
 * the "GStreamer" domain: gst-check fails on them already; counted here
 * too so that the test says which. */
static gint gst_order_warnings;

static void
count_gst_warnings (const gchar * domain, GLogLevelFlags level,
    const gchar * message, gpointer user_data)
{
  if (strstr (message, "before stream-start") ||
      strstr (message, "before segment") ||
      strstr (message, "Sticky event misordering")) {
    g_atomic_int_inc (&gst_order_warnings);
    g_printerr ("GStreamer warning: %s\n", message);
  }
  g_log_default_handler (domain, level, message, user_data);
}

static guint
watch_gst_warnings (void)
{
  g_atomic_int_set (&gst_order_warnings, 0);
  return g_log_set_handler ("GStreamer", G_LOG_LEVEL_WARNING |
      G_LOG_LEVEL_CRITICAL, count_gst_warnings, NULL);
}

/* A fakesink for the attn pad, added to the running bin, with the order
 * check on its sink pad: it sees what crosses the link, from the first
 * event on (the attn pad's task may push before the application gets the
 * pad; what it sends while unlinked is sent again once linked). */
static GstElement *
attach_map_sink (GstElement * pipe, GstPad * attn, OrderCheck * oc)
{
  GstElement *sink = gst_element_factory_make ("fakesink", NULL);
  GstPad *sinkpad;

  fail_unless (sink != NULL);
  g_object_set (sink, "sync", FALSE, "async", FALSE, NULL);
  gst_bin_add (GST_BIN (pipe), sink);
  sinkpad = gst_element_get_static_pad (sink, "sink");
  order_check_reset (oc);
  gst_pad_add_probe (sinkpad, GST_PAD_PROBE_TYPE_DATA_DOWNSTREAM |
      GST_PAD_PROBE_TYPE_EVENT_FLUSH, order_probe, oc, NULL);
  fail_unless_equals_int (gst_pad_link (attn, sinkpad), GST_PAD_LINK_OK);
  gst_object_unref (sinkpad);
  fail_unless (gst_element_sync_state_with_parent (sink));
  return sink;
}

static void
detach_map_sink (GstElement * pipe, GstElement * s, GstPad * attn,
    GstElement * sink)
{
  GstPad *sinkpad = gst_element_get_static_pad (sink, "sink");

  gst_pad_unlink (attn, sinkpad);
  gst_object_unref (sinkpad);
  gst_element_release_request_pad (s, attn);
  gst_element_set_state (sink, GST_STATE_NULL);
  gst_bin_remove (GST_BIN (pipe), sink);
}

static void
fail_on_bus_error (GstElement * pipe)
{
  GstBus *bus = gst_element_get_bus (pipe);
  GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);

  if (msg != NULL) {
    GError *err = NULL;
    gchar *dbg = NULL;

    gst_message_parse_error (msg, &err, &dbg);
    fail ("pipeline error: %s (%s)", err->message, dbg);
  }
  gst_object_unref (bus);
}

/* ------------------------------------------------------------ request */

#define REQUEST_CYCLES 60

/* The attn pad requested and released again and again while PLAYING,
 * with a flushing seek every few cycles: every pad sends stream-start,
 * caps and segment, in order, before its first map and again segment
 * before the first map after each flush; GStreamer never complains. */
GST_START_TEST (test_request_release_playing)
{
  static const gchar *needed[] = { "audiotestsrc", "fakesink", NULL };
  GstElement *pipe, *s, *sink;
  GstPad *attn;
  GError *err = NULL;
  OrderCheck oc;
  guint handler, i, seeks = 0;

  if (!have_elements ("test_request_release_playing", needed))
    return;
  handler = watch_gst_warnings ();
  order_check_init (&oc);
  pipe = gst_parse_launch ("audiotestsrc wave=pink-noise samplesperbuffer=64 "
      "! audio/x-raw,format=F32LE,channels=4,rate=16000 ! sattn name=s "
      "window=32 hop=8 heads=2 post-messages=true ! fakesink sync=false", &err);
  fail_unless (pipe != NULL && err == NULL, "%s", err ? err->message : "?");
  s = gst_bin_get_by_name (GST_BIN (pipe), "s");

  /* Requested once before the stream is set up, so the stream keeps the
   * weights the maps need; released and requested again below. */
  attn = gst_element_request_pad_simple (s, "attn");
  fail_unless (attn != NULL);
  sink = attach_map_sink (pipe, attn, &oc);
  fail_unless (gst_element_set_state (pipe, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);

  for (i = 0; i < REQUEST_CYCLES; i++) {
    fail_unless (order_check_wait (&oc, 2, 20 * G_USEC_PER_SEC),
        "HANG: cycle %u: no map within 20 s", i);
    if (i % 4 == 3) {
      /* A flushing seek: the pad keeps stream-start and caps, loses the
       * segment, and must send it again before the next map. */
      guint before;

      g_mutex_lock (&oc.lock);
      before = oc.buffers;
      g_mutex_unlock (&oc.lock);
      fail_unless (gst_element_seek_simple (pipe, GST_FORMAT_TIME,
              GST_SEEK_FLAG_FLUSH, 0));
      seeks++;
      fail_unless (order_check_wait (&oc, before + 2, 20 * G_USEC_PER_SEC),
          "HANG: cycle %u: no map within 20 s of a seek", i);
    }
    detach_map_sink (pipe, s, attn, sink);
    gst_object_unref (attn);
    fail_on_bus_error (pipe);

    attn = gst_element_request_pad_simple (s, "attn");
    fail_unless (attn != NULL, "cycle %u: no attn pad", i);
    sink = attach_map_sink (pipe, attn, &oc);
  }
  fail_unless (order_check_wait (&oc, 2, 20 * G_USEC_PER_SEC));
  fail_on_bus_error (pipe);

  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  g_mutex_lock (&oc.lock);
  fail_unless (oc.errors == 0, "%u event-order errors, first: %s",
      oc.errors, oc.first_error);
  g_mutex_unlock (&oc.lock);
  fail_unless (oc.flushes > 0 || seeks == 0);
  fail_unless_equals_int (g_atomic_int_get (&gst_order_warnings), 0);

  gst_element_release_request_pad (s, attn);
  gst_object_unref (attn);
  gst_object_unref (s);
  gst_object_unref (pipe);
  order_check_clear (&oc);
  g_log_remove_handler ("GStreamer", handler);
}

GST_END_TEST;

/* ------------------------------------------------------------ seek */

#ifndef SEEK_RUNS
#define SEEK_RUNS 200
#endif

/* A flushing seek 1 ms after PAUSED, racing the first maps of a branch
 * without queues: the attn branch must still get its stream-start and
 * caps (a flush drops what was queued and not sent), so no run may end
 * in not-negotiated. */
GST_START_TEST (test_seek_after_paused)
{
  static const gchar *needed[] = { "filesrc", "rawaudioparse", "fakesink",
    "videoconvert", NULL
  };
  const gsize frames = 4000, channels = 4;
  gchar *dir, *path, *desc;
  float *x;
  GError *err = NULL;
  guint run, failures = 0, handler;
  gint64 start = g_get_monotonic_time ();

  if (!have_elements ("test_seek_after_paused", needed))
    return;
  handler = watch_gst_warnings ();
  dir = g_dir_make_tmp ("sattn-seek-XXXXXX", &err);
  fail_unless (dir != NULL, "%s", err ? err->message : "?");
  path = g_build_filename (dir, "signal.f32", NULL);
  x = g_new (float, frames * channels);
  sattn_fill_signal (x, frames * channels, 7, 1.0f);
  fail_unless (g_file_set_contents (path, (const gchar *) x,
          (gssize) (frames * channels * sizeof (float)), &err), "%s",
      err ? err->message : "?");
  g_free (x);
  desc = g_strdup_printf ("filesrc location=\"%s\" ! rawaudioparse "
      "use-sink-caps=false format=pcm pcm-format=f32le sample-rate=16000 "
      "num-channels=4 ! sattn name=s window=32 hop=8 ! fakesink "
      "s.attn ! videoconvert ! fakesink", path);

  for (run = 0; run < SEEK_RUNS; run++) {
    GstElement *pipe = gst_parse_launch (desc, &err);
    GstBus *bus;
    GstMessage *msg, *m2;

    fail_unless (pipe != NULL && err == NULL, "%s: %s", desc,
        err ? err->message : "?");
    bus = gst_element_get_bus (pipe);
    /* The seek goes out while the pipeline prerolls, 1 ms after the
     * state change to PAUSED was asked for (and, every fourth run, right
     * after it completed). */
    fail_unless (gst_element_set_state (pipe, GST_STATE_PAUSED) !=
        GST_STATE_CHANGE_FAILURE);
    if (run % 4 == 3)
      fail_unless (gst_element_get_state (pipe, NULL, NULL, 10 * GST_SECOND)
          == GST_STATE_CHANGE_SUCCESS, "HANG: run %u: no preroll within 10 s",
          run);
    g_usleep (1000);
    gst_element_seek_simple (pipe, GST_FORMAT_TIME,
        GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE, 50 * GST_MSECOND);
    /* An error (not-negotiated) fails the preroll; either way the bus
     * says how the run ended. */
    if (gst_element_get_state (pipe, NULL, NULL, 10 * GST_SECOND) !=
        GST_STATE_CHANGE_FAILURE)
      gst_element_set_state (pipe, GST_STATE_PLAYING);
    msg = gst_bus_timed_pop_filtered (bus, 20 * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
    fail_unless (msg != NULL, "HANG: run %u: neither EOS nor an error within "
        "20 s", run);
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      gchar *dbg = NULL;

      gst_message_parse_error (msg, &err, &dbg);
      g_printerr ("run %u: %s (%s)\n", run, err->message, dbg);
      g_clear_error (&err);
      g_free (dbg);
      failures++;
      /* And whatever else was posted about it. */
      while ((m2 = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR |
                  GST_MESSAGE_WARNING)) != NULL) {
        gst_message_parse_error (m2, &err, &dbg);
        g_printerr ("  then: %s (%s)\n", err->message, dbg);
        g_clear_error (&err);
        g_free (dbg);
        gst_message_unref (m2);
      }
    }
    gst_message_unref (msg);
    gst_element_set_state (pipe, GST_STATE_NULL);
    gst_object_unref (bus);
    gst_object_unref (pipe);
  }
  g_print ("%u flushing seeks right after PAUSED: %u failed (%.1f s)\n",
      SEEK_RUNS, failures,
      (g_get_monotonic_time () - start) / (gdouble) G_USEC_PER_SEC);
  fail_unless_equals_int (failures, 0);
  fail_unless_equals_int (g_atomic_int_get (&gst_order_warnings), 0);

  g_unlink (path);
  g_rmdir (dir);
  g_free (path);
  g_free (dir);
  g_free (desc);
  g_log_remove_handler ("GStreamer", handler);
}

GST_END_TEST;

/* ------------------------------------------------------------ many */

#define N_PIPES 8

/* Eight different configurations, four fed by audiotestsrc, four by
 * appsrc from threads of their own; health messages on everywhere. */
static const gchar *pipe_desc[N_PIPES] = {
  "audiotestsrc num-buffers=60 wave=pink-noise samplesperbuffer=256 ! "
      "audio/x-raw,format=F32LE,channels=4,rate=16000 ! sattn name=s "
      "window=32 hop=8 heads=2 threads=2 post-messages=true ! "
      "fakesink sync=false",
  "audiotestsrc num-buffers=60 samplesperbuffer=200 ! "
      "audio/x-raw,format=F32LE,channels=2,rate=8000 ! sattn name=s "
      "window=48 hop=16 frame-size=2 causal=true threads=2 "
      "post-messages=true message-weights=true ! fakesink sync=false",
  "audiotestsrc num-buffers=40 wave=white-noise samplesperbuffer=512 ! "
      "audio/x-raw,format=F32LE,channels=8,rate=16000 ! sattn name=s "
      "window=64 hop=16 heads=4 output=mean threads=2 post-messages=true ! "
      "fakesink sync=false",
  "audiotestsrc num-buffers=60 wave=sine samplesperbuffer=100 ! "
      "audio/x-raw,format=F32LE,channels=1,rate=16000 ! sattn name=s "
      "window=16 hop=4 output=window start=wait post-messages=true ! "
      "fakesink sync=false",
  "appsrc name=src format=time caps=audio/x-raw,format=F32LE,"
      "layout=interleaved,channels=4,rate=16000 ! sattn name=s window=32 "
      "hop=8 threads=2 post-messages=true lookback=8 causal=true ! "
      "fakesink sync=false",
  "appsrc name=src format=time caps=audio/x-raw,format=F32LE,"
      "layout=interleaved,channels=2,rate=16000 ! sattn name=s window=24 "
      "hop=8 output=last threads=2 post-messages=true ! fakesink sync=false",
  "appsrc name=src format=time caps=audio/x-raw,format=F32LE,"
      "layout=interleaved,channels=6,rate=16000 ! sattn name=s window=32 "
      "hop=32 heads=3 threads=2 post-messages=true "
      "invalid-frames=zero ! fakesink sync=false",
  "appsrc name=src format=time caps=audio/x-raw,format=F32LE,"
      "layout=interleaved,channels=4,rate=8000 ! sattn name=s window=40 "
      "hop=10 frame-size=4 post-messages=true ! fakesink sync=false",
};

typedef struct
{
  GstElement *pipe, *s, *src;
  GstBus *bus;
  GThread *feeder;
  gint channels, rate;
  guint seed;
  gboolean eos;
  guint messages;
  /* The attn pad while it exists (main thread only). */
  GstPad *attn;
  GstElement *attn_sink;
  OrderCheck oc;
} Pipe;

static gpointer
feed (gpointer data)
{
  Pipe *p = data;
  const gsize n = 160;
  GstFlowReturn ret = GST_FLOW_OK;
  guint i;

  for (i = 0; i < 50; i++) {
    gsize samples = n * (gsize) p->channels;
    GstBuffer *buf = gst_buffer_new_allocate (NULL, samples * sizeof (float),
        NULL);
    GstMapInfo info;

    fail_unless (buf != NULL && gst_buffer_map (buf, &info, GST_MAP_WRITE));
    sattn_fill_signal ((float *) info.data, samples, p->seed + i, 1.0f);
    gst_buffer_unmap (buf, &info);
    GST_BUFFER_PTS (buf) = gst_util_uint64_scale (i * n, GST_SECOND,
        (guint64) p->rate);
    GST_BUFFER_DURATION (buf) = gst_util_uint64_scale (n, GST_SECOND,
        (guint64) p->rate);
    g_signal_emit_by_name (p->src, "push-buffer", buf, &ret);
    gst_buffer_unref (buf);
    if (ret != GST_FLOW_OK)
      break;
  }
  g_signal_emit_by_name (p->src, "end-of-stream", &ret);
  return NULL;
}

/* Pop what the bus has: count health messages, fail on errors, note
 * EOS. */
static void
drain_bus (Pipe * p)
{
  GstMessage *msg;

  while ((msg = gst_bus_pop (p->bus)) != NULL) {
    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ELEMENT:
        if (gst_message_has_name (msg, "sattn"))
          p->messages++;
        break;
      case GST_MESSAGE_EOS:
        p->eos = TRUE;
        break;
      case GST_MESSAGE_ERROR:{
        GError *err = NULL;
        gchar *dbg = NULL;

        gst_message_parse_error (msg, &err, &dbg);
        fail ("%s: error: %s (%s)", GST_OBJECT_NAME (p->pipe), err->message,
            dbg);
        break;
      }
      default:
        break;
    }
    gst_message_unref (msg);
  }
}

/* Eight pipelines at once; while they run, the main thread changes the
 * properties that may change while PLAYING (message-interval, map-head,
 * invalid-frames), reads others, and requests and releases attn pads. */
GST_START_TEST (test_many_pipelines)
{
  static const gchar *needed[] = { "audiotestsrc", "appsrc", "fakesink",
    NULL
  };
  Pipe pipes[N_PIPES];
  GRand *rand;
  guint i, done = 0, handler, rounds = 0, requests = 0;
  gint64 deadline;

  if (!have_elements ("test_many_pipelines", needed))
    return;
  handler = watch_gst_warnings ();
  rand = g_rand_new_with_seed (9);
  memset (pipes, 0, sizeof (pipes));
  for (i = 0; i < N_PIPES; i++) {
    Pipe *p = &pipes[i];
    GError *err = NULL;

    p->pipe = gst_parse_launch (pipe_desc[i], &err);
    fail_unless (p->pipe != NULL && err == NULL, "%s: %s", pipe_desc[i],
        err ? err->message : "?");
    p->s = gst_bin_get_by_name (GST_BIN (p->pipe), "s");
    p->src = gst_bin_get_by_name (GST_BIN (p->pipe), "src");
    p->bus = gst_element_get_bus (p->pipe);
    p->seed = 100 * i;
    order_check_init (&p->oc);
    if (p->src) {
      GstCaps *caps;
      GstStructure *st;

      g_object_get (p->src, "caps", &caps, NULL);
      st = gst_caps_get_structure (caps, 0);
      fail_unless (gst_structure_get_int (st, "channels", &p->channels));
      fail_unless (gst_structure_get_int (st, "rate", &p->rate));
      gst_caps_unref (caps);
    }
    /* Half of them have the attn pad from the start (the stream keeps
     * the weights the maps need); the others get it while PLAYING. */
    if (i % 2 == 0) {
      p->attn = gst_element_request_pad_simple (p->s, "attn");
      fail_unless (p->attn != NULL);
      p->attn_sink = attach_map_sink (p->pipe, p->attn, &p->oc);
    }
  }
  for (i = 0; i < N_PIPES; i++) {
    Pipe *p = &pipes[i];

    fail_unless (gst_element_set_state (p->pipe, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE);
    if (p->src)
      p->feeder = g_thread_new ("feeder", feed, p);
  }

  deadline = g_get_monotonic_time () + 240 * G_USEC_PER_SEC;
  while (done < N_PIPES) {
    fail_unless (g_get_monotonic_time () < deadline,
        "HANG: %u of %u pipelines reached EOS within 240 s", done, N_PIPES);
    for (i = 0; i < N_PIPES; i++) {
      Pipe *p = &pipes[i];
      guint64 interval;
      gint head;

      if (p->eos)
        continue;
      /* Properties that apply while PLAYING, and reads of others. */
      g_object_set (p->s, "message-interval",
          (guint64) g_rand_int_range (rand, 0, 20) * GST_MSECOND,
          "map-head", g_rand_int_range (rand, -1, 4),
          "invalid-frames", g_rand_int_range (rand, 0, 2), NULL);
      g_object_get (p->s, "message-interval", &interval, "map-head", &head,
          NULL);
      fail_unless (interval < 20 * GST_MSECOND && head >= -1 && head < 4);
      /* The attn pad comes and goes. */
      if (g_rand_int_range (rand, 0, 3) == 0) {
        if (p->attn) {
          detach_map_sink (p->pipe, p->s, p->attn, p->attn_sink);
          gst_clear_object (&p->attn);
        } else {
          p->attn = gst_element_request_pad_simple (p->s, "attn");
          fail_unless (p->attn != NULL);
          p->attn_sink = attach_map_sink (p->pipe, p->attn, &p->oc);
          requests++;
        }
      }
      drain_bus (p);
      if (p->eos)
        done++;
    }
    rounds++;
    g_usleep (2000);
  }

  for (i = 0; i < N_PIPES; i++) {
    Pipe *p = &pipes[i];

    if (p->feeder)
      g_thread_join (p->feeder);
    fail_unless_equals_int (gst_element_set_state (p->pipe, GST_STATE_NULL),
        GST_STATE_CHANGE_SUCCESS);
    drain_bus (p);
    fail_unless (p->messages > 0, "pipeline %u posted no health message", i);
    g_mutex_lock (&p->oc.lock);
    fail_unless (p->oc.errors == 0, "pipeline %u: %u event-order errors, "
        "first: %s", i, p->oc.errors, p->oc.first_error);
    g_mutex_unlock (&p->oc.lock);
    if (p->attn) {
      gst_element_release_request_pad (p->s, p->attn);
      gst_object_unref (p->attn);
    }
    gst_clear_object (&p->src);
    gst_object_unref (p->s);
    gst_object_unref (p->bus);
    gst_object_unref (p->pipe);
    order_check_clear (&p->oc);
  }
  GST_INFO ("%u rounds of property changes, %u attn requests", rounds,
      requests);
  fail_unless (requests > 0);
  fail_unless_equals_int (g_atomic_int_get (&gst_order_warnings), 0);
  g_rand_free (rand);
  g_log_remove_handler ("GStreamer", handler);
}

GST_END_TEST;

static Suite *
sattn_concurrency_suite (void)
{
  Suite *s = suite_create ("sattn-concurrency");
  TCase *tc = tcase_create ("general");

  sattn_tcase_set_timeout (tc, 600);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_request_release_playing);
  tcase_add_test (tc, test_seek_after_paused);
  tcase_add_test (tc, test_many_pipelines);
  return s;
}

GST_CHECK_MAIN (sattn_concurrency);
