/* sattn-soak: endurance and life-cycle checks of the sattn element.
 *
 *   sattn-soak stream [FRAMES]      a W1-like stream (64 channels at
 *       16 kHz, frame-size 1, heads 4, window 256, hop 16) of FRAMES frames
 *       (default 10^8) through appsrc ! sattn ! fakesink with health
 *       messages (one per second of signal) and the attn map pad linked to
 *       a fakesink.  Checks: frames out == frames in; output timestamps
 *       contiguous and the last PTS + duration exactly FRAMES / rate; RSS
 *       at the end within 1 MiB of RSS after the first second of signal;
 *       health messages and maps arrive; no error or warning.  Prints the
 *       figures.
 *   sattn-soak state-cycles [N]     N NULL -> PLAYING -> NULL cycles (default
 *       200) of audiotestsrc ! sattn ! fakesink with the attn pad linked;
 *       every other cycle runs to EOS and checks frames out == frames in,
 *       the others go back to NULL as soon as PLAYING is reached.
 *   sattn-soak attn-cycles [N]      N request / release cycles (default
 *       1000) of the attn pad while a live pipeline plays; every other
 *       cycle holds the pad linked while one more input buffer goes
 *       through the element, the others release it at once, still linked.
 *       Prints how many cycles saw a map (a pad requested after caps shows
 *       maps from the next caps on: see gstsattn-map.c).
 *   sattn-soak attn-release-flowing [N]   N times (default 100): the attn
 *       pad requested before the stream starts, PLAYING until a map
 *       arrives, the pad released while its maps flow, back to NULL.
 *   sattn-soak leak-selftest        leaks a pad on purpose: must fail (the
 *       leak check is a gate that can fire).
 *
 * The cycle modes run under GStreamer's leaks tracer (set up here,
 * before gst_init) and fail unless it reports 0 live objects once the
 * pipeline is gone.  Exit status 0 when every check holds, 1 otherwise.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <gst/gst.h>
#include <gst/app/gstappsrc.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE 16000
#define CHANNELS 64
#define HOP 16
#define WINDOW 256
#define HEADS 4
#define BUF_FRAMES 1000         /* frames per input buffer; divides RATE */

static gboolean failed;

#define CHECK(cond, ...) G_STMT_START {                                 \
    if (!(cond)) {                                                      \
      failed = TRUE;                                                    \
      g_printerr ("FAIL: " __VA_ARGS__);                                \
      g_printerr ("\n");                                                \
    }                                                                   \
  } G_STMT_END

/* Every GLib warning or critical (GStreamer's "Sticky event misordering",
 * "Got data flow before stream-start event", ...) fails the run. */
static gint log_warnings;

static void
log_handler (const gchar * domain, GLogLevelFlags level, const gchar * msg,
    gpointer data)
{
  if (level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING))
    g_atomic_int_inc (&log_warnings);
  g_log_default_handler (domain, level, msg, data);
}

/* VmRSS of this process in KiB. */
static guint64
rss_kib (void)
{
  gchar *text = NULL, *line;
  guint64 kib = 0;

  if (!g_file_get_contents ("/proc/self/status", &text, NULL, NULL))
    return 0;
  line = strstr (text, "\nVmRSS:");
  if (line)
    kib = g_ascii_strtoull (line + 8, NULL, 10);
  g_free (text);
  return kib;
}

/* ------------------------------------------------------------ counters */

typedef struct
{
  GMutex lock;
  GCond cond;
  /* Output branch (streaming thread). */
  guint64 out_frames;
  GstClockTime out_end;         /* PTS + duration of the last buffer */
  guint64 ts_breaks;            /* PTS != previous end */
  guint64 out_bufs, discont_bufs;
  guint64 rss_1s;               /* RSS once 1 s of signal is out */
  /* Map branch. */
  guint64 maps;
  /* Bus. */
  guint64 health, errors, warnings;
  gboolean eos;
} Counters;

static GstPadProbeReturn
out_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Counters *c = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  guint64 frames = gst_buffer_get_size (buf) / (CHANNELS * sizeof (float));
  GstClockTime pts = GST_BUFFER_PTS (buf), dur = GST_BUFFER_DURATION (buf);

  g_mutex_lock (&c->lock);
  if (c->out_bufs > 0 && pts != c->out_end)
    c->ts_breaks++;
  if (GST_BUFFER_IS_DISCONT (buf))
    c->discont_bufs++;
  c->out_bufs++;
  if (GST_CLOCK_TIME_IS_VALID (pts) && GST_CLOCK_TIME_IS_VALID (dur))
    c->out_end = pts + dur;
  else
    c->ts_breaks++;
  if (c->out_frames < RATE && c->out_frames + frames >= RATE)
    c->rss_1s = rss_kib ();
  c->out_frames += frames;
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn
map_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Counters *c = data;

  g_mutex_lock (&c->lock);
  c->maps++;
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
  return GST_PAD_PROBE_OK;
}

/* Every message is handled here, in the posting thread, and dropped: a
 * soak must not accumulate messages nobody pops. */
static GstBusSyncReply
bus_sync (GstBus * bus, GstMessage * msg, gpointer data)
{
  Counters *c = data;
  GError *err = NULL;
  gchar *dbg = NULL;

  g_mutex_lock (&c->lock);
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ELEMENT:
      if (gst_message_has_name (msg, "sattn"))
        c->health++;
      break;
    case GST_MESSAGE_ERROR:
      gst_message_parse_error (msg, &err, &dbg);
      g_printerr ("ERROR from %s: %s (%s)\n", GST_OBJECT_NAME (msg->src),
          err->message, dbg ? dbg : "");
      c->errors++;
      break;
    case GST_MESSAGE_WARNING:
      gst_message_parse_warning (msg, &err, &dbg);
      g_printerr ("WARNING from %s: %s (%s)\n", GST_OBJECT_NAME (msg->src),
          err->message, dbg ? dbg : "");
      c->warnings++;
      break;
    case GST_MESSAGE_EOS:
      c->eos = TRUE;
      break;
    default:
      break;
  }
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
  g_clear_error (&err);
  g_free (dbg);
  gst_message_unref (msg);
  return GST_BUS_DROP;
}

static void
counters_reset (Counters * c)
{
  g_mutex_lock (&c->lock);
  c->out_frames = c->out_bufs = c->discont_bufs = c->ts_breaks = 0;
  c->out_end = GST_CLOCK_TIME_NONE;
  c->maps = c->health = 0;
  c->eos = FALSE;
  g_mutex_unlock (&c->lock);
}

/* Wait until EOS, an error, or timeout; TRUE on EOS. */
static gboolean
wait_eos (Counters * c, gint64 timeout_us)
{
  gint64 end = g_get_monotonic_time () + timeout_us;
  gboolean eos;

  g_mutex_lock (&c->lock);
  while (!c->eos && c->errors == 0)
    if (!g_cond_wait_until (&c->cond, &c->lock, end))
      break;
  eos = c->eos;
  g_mutex_unlock (&c->lock);
  return eos;
}

/* Wait until *field (under c->lock) exceeds value; FALSE on timeout. */
static gboolean
wait_above (Counters * c, const guint64 * field, guint64 value,
    gint64 timeout_us)
{
  gint64 end = g_get_monotonic_time () + timeout_us;
  gboolean ok;

  g_mutex_lock (&c->lock);
  while (*field <= value && c->errors == 0)
    if (!g_cond_wait_until (&c->cond, &c->lock, end))
      break;
  ok = *field > value;
  g_mutex_unlock (&c->lock);
  return ok;
}

static void
add_probe (GstElement * e, const gchar * pad_name, GstPadProbeCallback cb,
    Counters * c)
{
  GstPad *pad = gst_element_get_static_pad (e, pad_name);

  g_assert (pad != NULL);
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, cb, c, NULL);
  gst_object_unref (pad);
}

static GstElement *
make (const gchar * factory, const gchar * name)
{
  GstElement *e = gst_element_factory_make (factory, name);

  if (e == NULL) {
    g_printerr ("the '%s' element is not available\n", factory);
    exit (1);
  }
  return e;
}

static GstElement *
make_sattn (void)
{
  GstElement *s = make ("sattn", "s");

  g_object_set (s, "window", WINDOW, "hop", HOP, "heads", HEADS,
      "post-messages", TRUE, "message-interval", (guint64) GST_SECOND, NULL);
  return s;
}

static GstCaps *
input_caps (void)
{
  return gst_caps_new_simple ("audio/x-raw", "format", G_TYPE_STRING,
      "F32LE", "layout", G_TYPE_STRING, "interleaved", "rate", G_TYPE_INT,
      RATE, "channels", G_TYPE_INT, CHANNELS, NULL);
}

/* -------------------------------------------------------------- stream */

static int
run_stream (guint64 frames)
{
  GstElement *pipe, *src, *s, *sink, *mapsink;
  GstPad *attn, *mapsink_pad;
  GstBus *bus;
  GstCaps *caps;
  Counters c = { 0, };
  float *block;
  guint64 sent = 0, expected_end, rss_end;
  /* Progress (with RSS) about 20 times per run, on buffer boundaries. */
  guint64 step = MAX (frames / 20 / BUF_FRAMES, 100) * BUF_FRAMES;
  gint64 t0, t1;
  gsize i;
  GRand *r;

  g_mutex_init (&c.lock);
  g_cond_init (&c.cond);
  counters_reset (&c);

  /* One second of a deterministic signal (a tone per channel plus noise),
   * wrapped, never copied, by every buffer. */
  block = g_new (float, (gsize) RATE * CHANNELS);
  r = g_rand_new_with_seed (9);
  for (i = 0; i < (gsize) RATE * CHANNELS; i++) {
    gsize f = i / CHANNELS, ch = i % CHANNELS;

    block[i] = (float) (0.5 * sin (2 * G_PI * (50.0 + 10.0 * ch) * f / RATE)
        + g_rand_double_range (r, -0.1, 0.1));
  }
  g_rand_free (r);

  pipe = gst_pipeline_new ("soak");
  src = make ("appsrc", "src");
  s = make_sattn ();
  sink = make ("fakesink", "out");
  mapsink = make ("fakesink", "map");
  caps = input_caps ();
  g_object_set (src, "caps", caps, "format", GST_FORMAT_TIME, "block", TRUE,
      "max-bytes", (guint64) 4 * BUF_FRAMES * CHANNELS * sizeof (float), NULL);
  gst_caps_unref (caps);
  g_object_set (sink, "sync", FALSE, NULL);
  g_object_set (mapsink, "sync", FALSE, NULL);
  gst_bin_add_many (GST_BIN (pipe), src, s, sink, mapsink, NULL);
  if (!gst_element_link_many (src, s, sink, NULL)) {
    g_printerr ("cannot link appsrc ! sattn ! fakesink\n");
    return 1;
  }
  attn = gst_element_request_pad_simple (s, "attn");
  mapsink_pad = gst_element_get_static_pad (mapsink, "sink");
  if (attn == NULL || gst_pad_link (attn, mapsink_pad) != GST_PAD_LINK_OK) {
    g_printerr ("cannot link the attn pad\n");
    return 1;
  }
  gst_object_unref (mapsink_pad);
  add_probe (sink, "sink", out_probe, &c);
  add_probe (mapsink, "sink", map_probe, &c);
  bus = gst_element_get_bus (pipe);
  gst_bus_set_sync_handler (bus, bus_sync, &c, NULL);

  if (gst_element_set_state (pipe, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE) {
    g_printerr ("cannot start the pipeline\n");
    return 1;
  }

  t0 = g_get_monotonic_time ();
  while (sent < frames) {
    guint64 n = MIN (BUF_FRAMES, frames - sent);
    gsize off = (gsize) (sent % RATE) * CHANNELS * sizeof (float);
    GstBuffer *buf = gst_buffer_new_wrapped_full (GST_MEMORY_FLAG_READONLY,
        block, (gsize) RATE * CHANNELS * sizeof (float), off,
        (gsize) n * CHANNELS * sizeof (float), NULL, NULL);
    GstClockTime pts = gst_util_uint64_scale_int (sent, GST_SECOND, RATE);

    GST_BUFFER_PTS (buf) = pts;
    GST_BUFFER_DURATION (buf) =
        gst_util_uint64_scale_int (sent + n, GST_SECOND, RATE) - pts;
    GST_BUFFER_OFFSET (buf) = sent;
    GST_BUFFER_OFFSET_END (buf) = sent + n;
    if (gst_app_src_push_buffer (GST_APP_SRC (src), buf) != GST_FLOW_OK) {
      g_printerr ("appsrc refused a buffer at frame %" G_GUINT64_FORMAT
          "\n", sent);
      break;
    }
    sent += n;
    if (sent % step == 0)
      g_printerr ("... %" G_GUINT64_FORMAT " frames in, %.0f s, RSS %"
          G_GUINT64_FORMAT " KiB\n", sent,
          (g_get_monotonic_time () - t0) / 1e6, rss_kib ());
    if (c.errors > 0)
      break;
  }
  gst_app_src_end_of_stream (GST_APP_SRC (src));
  CHECK (wait_eos (&c, (gint64) 600 * G_USEC_PER_SEC), "no EOS");
  t1 = g_get_monotonic_time ();
  rss_end = rss_kib ();

  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_element_release_request_pad (s, attn);
  gst_object_unref (attn);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  gst_object_unref (pipe);

  expected_end = gst_util_uint64_scale_int (frames, GST_SECOND, RATE);
  printf ("soak: W1-like stream: %d channels at %d Hz, frame-size 1, "
      "heads %d, window %d, hop %d, messages every 1 s, attn map on\n",
      CHANNELS, RATE, HEADS, WINDOW, HOP);
  printf ("soak: frames in %" G_GUINT64_FORMAT ", frames out %"
      G_GUINT64_FORMAT " (%" G_GUINT64_FORMAT " buffers, %" G_GUINT64_FORMAT
      " DISCONT, %" G_GUINT64_FORMAT " timestamp breaks)\n", sent,
      c.out_frames, c.out_bufs, c.discont_bufs, c.ts_breaks);
  printf ("soak: last PTS + duration %" G_GUINT64_FORMAT " ns, frames/rate "
      "%" G_GUINT64_FORMAT " ns (%+" G_GINT64_FORMAT " ns)\n", c.out_end,
      expected_end, (gint64) (c.out_end - expected_end));
  printf ("soak: maps %" G_GUINT64_FORMAT " (windows %" G_GUINT64_FORMAT
      "), health messages %" G_GUINT64_FORMAT ", errors %" G_GUINT64_FORMAT
      ", warnings %" G_GUINT64_FORMAT "\n", c.maps, frames / HOP, c.health,
      c.errors, c.warnings);
  printf ("soak: RSS after the first second of signal %" G_GUINT64_FORMAT
      " KiB, at the end %" G_GUINT64_FORMAT " KiB (%+" G_GINT64_FORMAT
      " KiB; limit 1024)\n", c.rss_1s, rss_end,
      (gint64) rss_end - (gint64) c.rss_1s);
  printf ("soak: %.1f s wall, %.3g frames/s (%.1fx real time)\n",
      (t1 - t0) / 1e6, sent / ((t1 - t0) / 1e6),
      sent / ((t1 - t0) / 1e6) / RATE);

  CHECK (sent == frames, "only %" G_GUINT64_FORMAT " frames were sent", sent);
  CHECK (c.out_frames == frames, "frames out != frames in");
  CHECK (c.out_end == expected_end, "last PTS + duration != frames / rate");
  CHECK (c.ts_breaks == 0, "output timestamps are not contiguous");
  CHECK (c.discont_bufs == 1, "%" G_GUINT64_FORMAT " DISCONT buffers, "
      "expected only the first", c.discont_bufs);
  CHECK (c.errors == 0 && c.warnings == 0, "errors or warnings posted");
  /* One map per window; the last windows may be cut by EOS. */
  CHECK (c.maps + 1 >= frames / HOP && c.maps <= frames / HOP + 1,
      "maps %" G_GUINT64_FORMAT " for %" G_GUINT64_FORMAT " windows", c.maps,
      frames / HOP);
  CHECK (c.health + 1 >= frames / RATE && c.health <= frames / RATE + 1,
      "health messages %" G_GUINT64_FORMAT " for %" G_GUINT64_FORMAT
      " s of signal", c.health, frames / RATE);
#ifdef __SANITIZE_ADDRESS__
  /* AddressSanitizer keeps freed memory in quarantine (256 MiB). */
  printf ("soak: RSS not checked under AddressSanitizer\n");
#else
  if (frames >= 2 * RATE)
    CHECK (c.rss_1s > 0 && rss_end <= c.rss_1s + 1024 &&
        c.rss_1s <= rss_end + 1024, "RSS moved by more than 1 MiB");
#endif

  g_free (block);
  g_mutex_clear (&c.lock);
  g_cond_clear (&c.cond);
  return failed ? 1 : 0;
}

/* ---------------------------------------------------------- leak check */

/* After everything is released: the leaks tracer must list nothing. */
static void
check_no_leaks (void)
{
  GList *tracers, *l;
  GstTracer *leaks = NULL;
  GstStructure *info = NULL;
  const GValue *list;
  guint n, i;

  gst_task_cleanup_all ();
  tracers = gst_tracing_get_active_tracers ();
  for (l = tracers; l; l = l->next)
    if (leaks == NULL &&
        strcmp (G_OBJECT_TYPE_NAME (l->data), "GstLeaksTracer") == 0)
      leaks = gst_object_ref (l->data);
  g_list_free_full (tracers, gst_object_unref);
  CHECK (leaks != NULL, "the leaks tracer is not active (GST_TRACERS)");
  if (leaks == NULL)
    return;
  g_signal_emit_by_name (leaks, "get-live-objects", &info);
  list = info ? gst_structure_get_value (info, "live-objects-list") : NULL;
  CHECK (list != NULL && GST_VALUE_HOLDS_LIST (list),
      "the leaks tracer gave no list");
  n = list ? gst_value_list_get_size (list) : 0;
  for (i = 0; i < n; i++) {
    const GstStructure *o =
        gst_value_get_structure (gst_value_list_get_value (list, i));
    const GValue *obj = gst_structure_get_value (o, "object");
    guint refs = 0;

    gst_structure_get_uint (o, "ref-count", &refs);
    g_printerr ("leaked: %s (ref-count %u)\n",
        obj ? G_VALUE_TYPE_NAME (obj) : "?", refs);
  }
  printf ("soak: leaks tracer: %u live objects\n", n);
  CHECK (n == 0, "%u objects leaked", n);
  if (info)
    gst_structure_free (info);
  gst_object_unref (leaks);
}

/* -------------------------------------------------------- state cycles */

#define CYCLE_BUFFERS 16
#define CYCLE_SAMPLES 256

static int
run_state_cycles (guint n)
{
  GstElement *pipe, *src, *filter, *s, *sink, *mapsink;
  GstPad *attn, *mapsink_pad;
  GstCaps *caps;
  GstBus *bus;
  Counters c = { 0, };
  guint i, to_eos = 0;

  g_mutex_init (&c.lock);
  g_cond_init (&c.cond);

  pipe = gst_pipeline_new ("cycles");
  src = make ("audiotestsrc", "src");
  filter = make ("capsfilter", "caps");
  s = make_sattn ();
  sink = make ("fakesink", "out");
  mapsink = make ("fakesink", "map");
  caps = input_caps ();
  g_object_set (src, "num-buffers", CYCLE_BUFFERS, "samplesperbuffer",
      CYCLE_SAMPLES, "wave", 5 /* white-noise */ , NULL);
  g_object_set (filter, "caps", caps, NULL);
  gst_caps_unref (caps);
  g_object_set (sink, "sync", FALSE, NULL);
  g_object_set (mapsink, "sync", FALSE, NULL);
  gst_bin_add_many (GST_BIN (pipe), src, filter, s, sink, mapsink, NULL);
  if (!gst_element_link_many (src, filter, s, sink, NULL)) {
    g_printerr ("cannot link the pipeline\n");
    return 1;
  }
  attn = gst_element_request_pad_simple (s, "attn");
  mapsink_pad = gst_element_get_static_pad (mapsink, "sink");
  if (attn == NULL || gst_pad_link (attn, mapsink_pad) != GST_PAD_LINK_OK) {
    g_printerr ("cannot link the attn pad\n");
    return 1;
  }
  gst_object_unref (mapsink_pad);
  add_probe (sink, "sink", out_probe, &c);
  add_probe (mapsink, "sink", map_probe, &c);
  bus = gst_element_get_bus (pipe);
  gst_bus_set_sync_handler (bus, bus_sync, &c, NULL);

  for (i = 0; i < n && !failed; i++) {
    counters_reset (&c);
    CHECK (gst_element_set_state (pipe, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE, "cycle %u: PLAYING failed", i);
    if (i % 2 == 0) {
      CHECK (wait_eos (&c, (gint64) 60 * G_USEC_PER_SEC),
          "cycle %u: no EOS", i);
      CHECK (c.out_frames == CYCLE_BUFFERS * CYCLE_SAMPLES,
          "cycle %u: %" G_GUINT64_FORMAT " frames out for %d in", i,
          c.out_frames, CYCLE_BUFFERS * CYCLE_SAMPLES);
      CHECK (c.maps > 0, "cycle %u: no map", i);
      to_eos++;
    } else {
      CHECK (gst_element_get_state (pipe, NULL, NULL, 60 * GST_SECOND) ==
          GST_STATE_CHANGE_SUCCESS, "cycle %u: PLAYING not reached", i);
    }
    CHECK (gst_element_set_state (pipe, GST_STATE_NULL) ==
        GST_STATE_CHANGE_SUCCESS, "cycle %u: NULL failed", i);
    CHECK (c.errors == 0 && c.warnings == 0,
        "cycle %u: errors or warnings posted", i);
  }
  printf ("soak: %u NULL->PLAYING->NULL cycles (%u to EOS), sattn with the "
      "attn pad and health messages\n", i, to_eos);

  gst_element_release_request_pad (s, attn);
  gst_object_unref (attn);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  gst_object_unref (pipe);
  check_no_leaks ();
  g_mutex_clear (&c.lock);
  g_cond_clear (&c.cond);
  return failed ? 1 : 0;
}

/* ------------------------------------------------- the attn pipeline */

/* The pipeline of the attn-pad soaks: live white noise -> capsfilter ->
 * sattn -> fakesink "out", and a fakesink "map" for the attn pad; the
 * sinks' probes and the bus count into c. */
typedef struct
{
  GstElement *pipe, *s;
  GstPad *mapsink_pad;
  GstBus *bus;
} AttnPipe;

static int
attn_pipe_new (AttnPipe * p, const gchar * name, Counters * c)
{
  GstElement *src, *filter, *sink, *mapsink;
  GstCaps *caps;

  p->pipe = gst_pipeline_new (name);
  src = make ("audiotestsrc", "src");
  filter = make ("capsfilter", "caps");
  p->s = make_sattn ();
  sink = make ("fakesink", "out");
  mapsink = make ("fakesink", "map");
  caps = input_caps ();
  g_object_set (src, "is-live", TRUE, "samplesperbuffer", CYCLE_SAMPLES,
      "wave", 5 /* white-noise */ , NULL);
  g_object_set (filter, "caps", caps, NULL);
  gst_caps_unref (caps);
  g_object_set (sink, "sync", FALSE, NULL);
  /* Not part of the pipeline's preroll: it has no input half the time. */
  g_object_set (mapsink, "sync", FALSE, "async", FALSE, NULL);
  gst_bin_add_many (GST_BIN (p->pipe), src, filter, p->s, sink, mapsink, NULL);
  if (!gst_element_link_many (src, filter, p->s, sink, NULL)) {
    g_printerr ("cannot link the pipeline\n");
    return 1;
  }
  p->mapsink_pad = gst_element_get_static_pad (mapsink, "sink");
  add_probe (sink, "sink", out_probe, c);
  add_probe (mapsink, "sink", map_probe, c);
  p->bus = gst_element_get_bus (p->pipe);
  gst_bus_set_sync_handler (p->bus, bus_sync, c, NULL);
  return 0;
}

static void
attn_pipe_free (AttnPipe * p)
{
  gst_object_unref (p->mapsink_pad);
  gst_bus_set_sync_handler (p->bus, NULL, NULL, NULL);
  gst_object_unref (p->bus);
  gst_object_unref (p->pipe);
}

/* --------------------------------------------------------- attn cycles */

static int
run_attn_cycles (guint n)
{
  AttnPipe p;
  Counters c = { 0, };
  guint i, waited = 0, with_maps = 0;

  g_mutex_init (&c.lock);
  g_cond_init (&c.cond);
  counters_reset (&c);

  if (attn_pipe_new (&p, "attn-cycles", &c) != 0)
    return 1;

  CHECK (gst_element_set_state (p.pipe, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE, "PLAYING failed");
  CHECK (wait_above (&c, &c.out_frames, 0, (gint64) 30 * G_USEC_PER_SEC),
      "no output before the cycles");

  for (i = 0; i < n && !failed; i++) {
    GstPad *attn = gst_element_request_pad_simple (p.s, "attn");
    guint64 maps;

    CHECK (attn != NULL, "cycle %u: no attn pad", i);
    if (attn == NULL)
      break;
    g_mutex_lock (&c.lock);
    maps = c.maps;
    g_mutex_unlock (&c.lock);
    CHECK (gst_pad_link (attn, p.mapsink_pad) == GST_PAD_LINK_OK,
        "cycle %u: cannot link the attn pad", i);
    if (i % 2 == 0) {
      guint64 frames;

      /* Let the streaming thread run with the pad there: one more input
       * buffer through the features branch. */
      g_mutex_lock (&c.lock);
      frames = c.out_frames;
      g_mutex_unlock (&c.lock);
      CHECK (wait_above (&c, &c.out_frames, frames + CYCLE_SAMPLES - 1,
              (gint64) 10 * G_USEC_PER_SEC),
          "cycle %u: the features branch stopped", i);
      g_mutex_lock (&c.lock);
      if (c.maps > maps)
        with_maps++;
      g_mutex_unlock (&c.lock);
      waited++;
      gst_pad_unlink (attn, p.mapsink_pad);
    }
    /* Odd cycles release the pad still linked, at once. */
    gst_element_release_request_pad (p.s, attn);
    gst_object_unref (attn);
    CHECK (c.errors == 0 && c.warnings == 0,
        "cycle %u: errors or warnings posted", i);
  }
  {
    guint64 before;

    g_mutex_lock (&c.lock);
    before = c.out_frames;
    g_mutex_unlock (&c.lock);
    CHECK (wait_above (&c, &c.out_frames, before,
            (gint64) 10 * G_USEC_PER_SEC),
        "the features branch stopped after the cycles");
  }
  printf ("soak: %u attn request/release cycles while PLAYING (%u held "
      "while a buffer went through, %u of those saw a map), %"
      G_GUINT64_FORMAT " maps, %" G_GUINT64_FORMAT " feature frames\n", i,
      waited, with_maps, c.maps, c.out_frames);

  CHECK (gst_element_set_state (p.pipe, GST_STATE_NULL) ==
      GST_STATE_CHANGE_SUCCESS, "NULL failed");
  attn_pipe_free (&p);
  check_no_leaks ();
  g_mutex_clear (&c.lock);
  g_cond_clear (&c.cond);
  return failed ? 1 : 0;
}

/* ------------------------------------------- attn release while flowing */

/* n times: request the pad before the stream starts (so maps flow), go to
 * PLAYING, wait for a map, release the pad while its task pushes, check
 * that the features keep flowing, back to NULL. */
static int
run_attn_release_flowing (guint n)
{
  AttnPipe p;
  Counters c = { 0, };
  guint i;
  guint64 maps = 0;

  g_mutex_init (&c.lock);
  g_cond_init (&c.cond);

  if (attn_pipe_new (&p, "attn-release", &c) != 0)
    return 1;

  for (i = 0; i < n && !failed; i++) {
    GstPad *attn = gst_element_request_pad_simple (p.s, "attn");
    guint64 frames;

    counters_reset (&c);
    CHECK (attn != NULL, "cycle %u: no attn pad", i);
    if (attn == NULL)
      break;
    CHECK (gst_pad_link (attn, p.mapsink_pad) == GST_PAD_LINK_OK,
        "cycle %u: cannot link the attn pad", i);
    CHECK (gst_element_set_state (p.pipe, GST_STATE_PLAYING) !=
        GST_STATE_CHANGE_FAILURE, "cycle %u: PLAYING failed", i);
    CHECK (wait_above (&c, &c.maps, 0, (gint64) 10 * G_USEC_PER_SEC),
        "cycle %u: no map within 10 s", i);
    /* Released while maps flow, still linked. */
    gst_element_release_request_pad (p.s, attn);
    gst_object_unref (attn);
    g_mutex_lock (&c.lock);
    frames = c.out_frames;
    maps += c.maps;
    g_mutex_unlock (&c.lock);
    CHECK (wait_above (&c, &c.out_frames, frames + CYCLE_SAMPLES - 1,
            (gint64) 10 * G_USEC_PER_SEC),
        "cycle %u: the features branch stopped after the release", i);
    CHECK (gst_element_set_state (p.pipe, GST_STATE_NULL) ==
        GST_STATE_CHANGE_SUCCESS, "cycle %u: NULL failed", i);
    CHECK (c.errors == 0 && c.warnings == 0,
        "cycle %u: errors or warnings posted", i);
  }
  printf ("soak: %u attn pads released while their maps flowed (%"
      G_GUINT64_FORMAT " maps before the releases)\n", i, maps);

  attn_pipe_free (&p);
  check_no_leaks ();
  g_mutex_clear (&c.lock);
  g_cond_clear (&c.cond);
  return failed ? 1 : 0;
}

/* ---------------------------------------------------------------- main */

static guint64
arg_count (int argc, char **argv, guint64 def)
{
  gchar *end = NULL;
  gdouble v;

  if (argc < 3)
    return def;
  /* 1e8 and 100000000 both work. */
  v = g_ascii_strtod (argv[2], &end);
  if (end == argv[2] || *end != '\0' || !(v >= 1) || v > 1e15) {
    g_printerr ("not a count: %s\n", argv[2]);
    exit (2);
  }
  return (guint64) v;
}

int
main (int argc, char **argv)
{
  const gchar *mode = argc > 1 ? argv[1] : "";
  int ret;

  if (strcmp (mode, "state-cycles") == 0 || strcmp (mode, "attn-cycles") == 0
      || strcmp (mode, "attn-release-flowing") == 0
      || strcmp (mode, "leak-selftest") == 0)
    g_setenv ("GST_TRACERS", "leaks", TRUE);
  g_log_set_default_handler (log_handler, NULL);
  gst_init (&argc, &argv);

  if (strcmp (mode, "stream") == 0)
    ret = run_stream (arg_count (argc, argv, 100000000));
  else if (strcmp (mode, "state-cycles") == 0)
    ret = run_state_cycles ((guint) arg_count (argc, argv, 200));
  else if (strcmp (mode, "attn-cycles") == 0)
    ret = run_attn_cycles ((guint) arg_count (argc, argv, 1000));
  else if (strcmp (mode, "attn-release-flowing") == 0)
    ret = run_attn_release_flowing ((guint) arg_count (argc, argv, 100));
  else if (strcmp (mode, "leak-selftest") == 0) {
    /* The leak check must be able to fail: a pad left behind. */
    GstPad *pad = gst_pad_new ("leaked", GST_PAD_SRC);

    check_no_leaks ();
    ret = failed ? 1 : 0;
    (void) pad;
  } else {
    g_printerr ("usage: %s stream [FRAMES] | state-cycles [N] | "
        "attn-cycles [N] | attn-release-flowing [N] | leak-selftest\n",
        argv[0]);
    return 2;
  }
  if (g_atomic_int_get (&log_warnings) > 0) {
    g_printerr ("FAIL: %d GLib warnings or criticals\n",
        g_atomic_int_get (&log_warnings));
    ret = 1;
  }
  printf ("soak: %s\n", ret == 0 ? "PASS" : "FAIL");
  return ret;
}
