/* embed-appsrc — using the sattn element from a C application.
 *
 *   appsrc ! sattn ! appsink
 *
 * The application generates frames from a few simulated sensors (a sine per
 * sensor, noise, and a short burst on some sensors part way through), pushes
 * them in chunks of varying size with timestamps, and collects the feature
 * frames in the appsink callback.  At the end it prints per-sensor
 * statistics of input and features and where the feature energy peaks.
 *
 * It checks what an application relies on, and exits with status 1 if any
 * check fails:
 *  - output=frames: as many feature frames come out as frames went in;
 *    pooled modes: one row per window (every hop frames, see below), plus
 *    one at the end of stream for frames that arrived after the last one;
 *  - every feature value is finite;
 *  - output timestamps start at 0 and are contiguous (pts + duration of a
 *    buffer == pts of the next);
 *  - the pipeline reaches EOS without an error.
 *
 * Usage: embed-appsrc [--frames N] [--channels C] [--rate HZ] [--window N]
 *                     [--hop H] [--output frames|window|mean|last]
 *                     [--start pad|wait] [--seed S] [--quiet]
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <gst/gst.h>
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/audio/audio.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct
{
  /* options */
  guint frames, channels, rate, window, hop;
  const gchar *output, *start;
  guint64 seed;
  gboolean quiet;

  /* input statistics */
  gdouble *in_sum, *in_sq;
  guint burst_first, burst_len;

  /* collected by the appsink callback (streaming thread) */
  GMutex lock;
  guint out_channels;
  guint64 out_rows;
  guint64 out_buffers;
  guint64 nonfinite;
  guint64 ts_errors;
  GstClockTime next_pts;
  gdouble *out_sum, *out_sq;
  GArray *row_energy;           /* one gdouble per output row */
} App;

/* ---------------------------------------------------------- generator */

static guint64 rng_state;

static gdouble
rng_uniform (void)
{
  guint64 z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return ((gdouble) (z >> 11) + 0.5) / 9007199254740992.0;
}

static gdouble
rng_gauss (void)
{
  gdouble u = rng_uniform (), v = rng_uniform ();
  return sqrt (-2.0 * log (u)) * cos (2.0 * G_PI * v);
}

/* Sensor c at frame i: a sine of its own frequency, Gaussian noise, and a
 * decaying 40 Hz burst on sensors 1..3 (when present) during the burst. */
static gfloat
sensor_sample (const App * app, guint c, guint64 i)
{
  gdouble t = (gdouble) i / app->rate;
  gdouble f = 2.0 + 1.5 * c;
  gdouble x = sin (2.0 * G_PI * f * t + 0.7 * c) + 0.2 * rng_gauss ();
  if (c >= 1 && c <= 3 && i >= app->burst_first
      && i < (guint64) app->burst_first + app->burst_len) {
    gdouble tb = (gdouble) (i - app->burst_first) / app->rate;
    x += 6.0 * exp (-tb * 40.0) * sin (2.0 * G_PI * 40.0 * tb);
  }
  return (gfloat) x;
}

/* ------------------------------------------------------------- appsink */

static GstFlowReturn
on_new_sample (GstAppSink * sink, gpointer user_data)
{
  App *app = user_data;
  GstSample *sample = gst_app_sink_pull_sample (sink);
  if (sample == NULL)
    return GST_FLOW_EOS;

  GstBuffer *buf = gst_sample_get_buffer (sample);
  GstCaps *caps = gst_sample_get_caps (sample);
  GstAudioInfo info;
  GstMapInfo map;

  g_mutex_lock (&app->lock);
  if (caps == NULL || !gst_audio_info_from_caps (&info, caps)) {
    g_printerr ("appsink: sample without usable caps\n");
    app->ts_errors++;
    goto done;
  }
  if (app->out_channels == 0) {
    app->out_channels = GST_AUDIO_INFO_CHANNELS (&info);
    app->out_sum = g_new0 (gdouble, app->out_channels);
    app->out_sq = g_new0 (gdouble, app->out_channels);
  } else if (app->out_channels != (guint) GST_AUDIO_INFO_CHANNELS (&info)) {
    g_printerr ("appsink: output channel count changed\n");
    app->ts_errors++;
    goto done;
  }

  /* timestamps: start at 0, contiguous */
  GstClockTime pts = GST_BUFFER_PTS (buf), dur = GST_BUFFER_DURATION (buf);
  GstClockTime expect = app->out_buffers == 0 ? 0 : app->next_pts;
  if (!GST_CLOCK_TIME_IS_VALID (pts) || !GST_CLOCK_TIME_IS_VALID (dur)
      || pts != expect) {
    if (app->ts_errors < 5)
      g_printerr ("appsink: buffer %" G_GUINT64_FORMAT " pts %"
          GST_TIME_FORMAT " duration %" GST_TIME_FORMAT ", expected pts %"
          GST_TIME_FORMAT "\n", app->out_buffers, GST_TIME_ARGS (pts),
          GST_TIME_ARGS (dur), GST_TIME_ARGS (expect));
    app->ts_errors++;
  }
  if (GST_CLOCK_TIME_IS_VALID (pts) && GST_CLOCK_TIME_IS_VALID (dur))
    app->next_pts = pts + dur;
  app->out_buffers++;

  if (gst_buffer_map (buf, &map, GST_MAP_READ)) {
    const gfloat *x = (const gfloat *) map.data;
    gsize rows = map.size / (sizeof (gfloat) * app->out_channels);
    for (gsize r = 0; r < rows; r++) {
      gdouble e = 0.0;
      for (guint c = 0; c < app->out_channels; c++) {
        gdouble v = x[r * app->out_channels + c];
        if (!isfinite (v)) {
          app->nonfinite++;
          continue;
        }
        app->out_sum[c] += v;
        app->out_sq[c] += v * v;
        e += v * v;
      }
      g_array_append_val (app->row_energy, e);
    }
    app->out_rows += rows;
    if (map.size % (sizeof (gfloat) * app->out_channels) != 0) {
      g_printerr ("appsink: buffer of %" G_GSIZE_FORMAT " bytes is not a "
          "whole number of frames\n", map.size);
      app->ts_errors++;
    }
    gst_buffer_unmap (buf, &map);
  }

done:
  g_mutex_unlock (&app->lock);
  gst_sample_unref (sample);
  return GST_FLOW_OK;
}

/* -------------------------------------------------------------- options */

static gboolean
parse_args (App * app, int argc, char **argv)
{
  gint frames = 4000, channels = 8, rate = 1000, window = 64, hop = 16;
  gint64 seed = 1;
  gchar *output = NULL, *start = NULL;
  gboolean quiet = FALSE;
  GOptionEntry entries[] = {
    {"frames", 0, 0, G_OPTION_ARG_INT, &frames, "Frames to push", "N"},
    {"channels", 0, 0, G_OPTION_ARG_INT, &channels, "Sensors", "C"},
    {"rate", 0, 0, G_OPTION_ARG_INT, &rate, "Frame rate (Hz)", "HZ"},
    {"window", 0, 0, G_OPTION_ARG_INT, &window, "sattn window", "N"},
    {"hop", 0, 0, G_OPTION_ARG_INT, &hop, "sattn hop", "H"},
    {"output", 0, 0, G_OPTION_ARG_STRING, &output,
        "sattn output: frames|window|mean|last", "MODE"},
    {"start", 0, 0, G_OPTION_ARG_STRING, &start, "sattn start: pad|wait",
        "POLICY"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Noise seed", "S"},
    {"quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "Only the summary line",
        NULL},
    {NULL}
  };
  GError *err = NULL;
  GOptionContext *ctx = g_option_context_new ("- appsrc ! sattn ! appsink");
  g_option_context_add_main_entries (ctx, entries, NULL);
  gboolean ok = g_option_context_parse (ctx, &argc, &argv, &err);
  g_option_context_free (ctx);
  if (!ok) {
    g_printerr ("%s\n", err->message);
    g_clear_error (&err);
    return FALSE;
  }
  if (frames < 1 || channels < 1 || rate < 1 || window < 1 || hop < 1
      || hop > window) {
    g_printerr ("need frames, channels, rate, window >= 1 and "
        "1 <= hop <= window\n");
    return FALSE;
  }
  app->frames = frames;
  app->channels = channels;
  app->rate = rate;
  app->window = window;
  app->hop = hop;
  app->output = output ? output : g_strdup ("frames");
  app->start = start ? start : g_strdup ("pad");
  app->seed = (guint64) seed;
  app->quiet = quiet;
  return TRUE;
}

/* ----------------------------------------------------------------- main */

int
main (int argc, char **argv)
{
  App app = { 0 };
  int failed = 0;

  gst_init (NULL, NULL);
  if (!parse_args (&app, argc, argv))
    return 2;
  g_mutex_init (&app.lock);
  app.row_energy = g_array_new (FALSE, FALSE, sizeof (gdouble));
  app.in_sum = g_new0 (gdouble, app.channels);
  app.in_sq = g_new0 (gdouble, app.channels);
  app.burst_first = app.frames * 5 / 8;
  app.burst_len = MAX (app.rate / 20, 1);       /* 50 ms */
  rng_state = app.seed;

  GstElementFactory *f = gst_element_factory_find ("sattn");
  if (f == NULL) {
    g_printerr ("The sattn element is not available: build the project "
        "and set GST_PLUGIN_PATH=<build>/plugin\n");
    return 1;
  }
  gst_object_unref (f);

  /* The pipeline, built element by element. */
  GstElement *pipeline = gst_pipeline_new ("embed");
  GstElement *src = gst_element_factory_make ("appsrc", "src");
  GstElement *att = gst_element_factory_make ("sattn", "att");
  GstElement *sink = gst_element_factory_make ("appsink", "sink");
  if (!pipeline || !src || !att || !sink) {
    g_printerr ("could not create appsrc / sattn / appsink\n");
    return 1;
  }
  gst_bin_add_many (GST_BIN (pipeline), src, att, sink, NULL);
  if (!gst_element_link_many (src, att, sink, NULL)) {
    g_printerr ("could not link appsrc ! sattn ! appsink\n");
    return 1;
  }

  g_object_set (att, "window", app.window, "hop", app.hop, NULL);
  /* enum properties take their nick as a string */
  gst_util_set_object_arg (G_OBJECT (att), "output", app.output);
  gst_util_set_object_arg (G_OBJECT (att), "start", app.start);

  /* F32LE interleaved, one frame = one sample of every sensor;
   * channel-mask 0: the sensors have no loudspeaker positions */
  GstCaps *caps = gst_caps_new_simple ("audio/x-raw",
      "format", G_TYPE_STRING, "F32LE",
      "layout", G_TYPE_STRING, "interleaved",
      "rate", G_TYPE_INT, (gint) app.rate,
      "channels", G_TYPE_INT, (gint) app.channels,
      "channel-mask", GST_TYPE_BITMASK, (guint64) 0, NULL);
  g_object_set (src, "caps", caps, "format", GST_FORMAT_TIME,
      "block", TRUE, "max-bytes", (guint64) 256 * 1024, NULL);
  gst_caps_unref (caps);

  g_object_set (sink, "sync", FALSE, NULL);
  GstAppSinkCallbacks cb = { 0 };
  cb.new_sample = on_new_sample;
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, &app, NULL);

  if (gst_element_set_state (pipeline, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE) {
    g_printerr ("the pipeline refused to start\n");
    return 1;
  }

  /* Push the frames in chunks of 1..257 frames. */
  guint64 pushed = 0;
  while (pushed < app.frames) {
    guint n = 1 + (guint) (rng_uniform () * 257.0);
    if (n > app.frames - pushed)
      n = (guint) (app.frames - pushed);
    GstBuffer *buf = gst_buffer_new_allocate (NULL,
        (gsize) n * app.channels * sizeof (gfloat), NULL);
    GstMapInfo map;
    gst_buffer_map (buf, &map, GST_MAP_WRITE);
    gfloat *x = (gfloat *) map.data;
    for (guint i = 0; i < n; i++) {
      for (guint c = 0; c < app.channels; c++) {
        gfloat v = sensor_sample (&app, c, pushed + i);
        x[i * app.channels + c] = v;
        app.in_sum[c] += v;
        app.in_sq[c] += (gdouble) v *v;
      }
    }
    gst_buffer_unmap (buf, &map);
    GST_BUFFER_PTS (buf) = gst_util_uint64_scale (pushed, GST_SECOND, app.rate);
    GST_BUFFER_DURATION (buf) = gst_util_uint64_scale (pushed + n,
        GST_SECOND, app.rate) - GST_BUFFER_PTS (buf);
    GST_BUFFER_OFFSET (buf) = pushed;
    GST_BUFFER_OFFSET_END (buf) = pushed + n;
    pushed += n;
    if (gst_app_src_push_buffer (GST_APP_SRC (src), buf) != GST_FLOW_OK)
      break;                    /* an error follows on the bus */
  }
  gst_app_src_end_of_stream (GST_APP_SRC (src));

  /* Wait for EOS (every frame drained) or an error. */
  GstBus *bus = gst_element_get_bus (pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  if (msg == NULL) {
    g_printerr ("FAIL: no EOS within 60 s\n");
    failed = 1;
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *err = NULL;
    gchar *dbg = NULL;
    gst_message_parse_error (msg, &err, &dbg);
    g_printerr ("FAIL: error from %s: %s\n%s\n", GST_OBJECT_NAME (msg->src),
        err->message, dbg ? dbg : "");
    g_clear_error (&err);
    g_free (dbg);
    failed = 1;
  }
  if (msg)
    gst_message_unref (msg);
  gst_object_unref (bus);
  gst_element_set_state (pipeline, GST_STATE_NULL);

  /* ------------------------------------------------------------ report */
  /* frames: one row per frame.  Pooled modes: one row per window; a
   * window is computed every hop frames (start=pad: from the first hop on;
   * start=wait: once window frames are in, then every hop), and the drain
   * at EOS computes one more if frames arrived since the last one. */
  guint64 expect_rows = app.frames;
  if (g_strcmp0 (app.output, "frames") != 0) {
    if (g_strcmp0 (app.start, "wait") == 0)
      expect_rows = app.frames < app.window ? 1
          : 1 + (app.frames - app.window + app.hop - 1) / app.hop;
    else
      expect_rows = (app.frames + app.hop - 1) / app.hop;
  }

  if (!app.quiet && app.out_channels > 0) {
    g_print ("appsrc ! sattn window=%u hop=%u output=%s start=%s ! appsink"
        "\n%u sensors at %u Hz, %u frames; burst on sensors 1-3 at frame "
        "%u (t = %.3f s)\n\n", app.window, app.hop, app.output, app.start,
        app.channels, app.rate, app.frames, app.burst_first,
        (gdouble) app.burst_first / app.rate);
    if (app.out_channels == app.channels) {
      g_print ("%6s  %10s  %10s  %10s  %10s\n", "sensor", "in mean",
          "in rms", "feat mean", "feat rms");
      for (guint c = 0; c < app.channels; c++) {
        gdouble n_in = app.frames, n_out = (gdouble) app.out_rows;
        g_print ("%6u  %10.4f  %10.4f  %10.4f  %10.4f\n", c,
            app.in_sum[c] / n_in, sqrt (app.in_sq[c] / n_in),
            app.out_sum[c] / n_out, sqrt (app.out_sq[c] / n_out));
      }
    }
    /* where the feature energy peaks */
    gdouble best = -1.0;
    guint best_i = 0;
    for (guint i = 0; i < app.row_energy->len; i++) {
      gdouble e = g_array_index (app.row_energy, gdouble, i);
      if (e > best) {
        best = e;
        best_i = i;
      }
    }
    guint64 frame = g_strcmp0 (app.output, "frames") == 0 ? best_i
        : (guint64) best_i * app.hop;
    g_print ("\nlargest feature energy: row %u (around frame %"
        G_GUINT64_FORMAT ", t = %.3f s)\n", best_i, frame,
        (gdouble) frame / app.rate);
  }

  g_print ("embed-appsrc: %u frames in, %" G_GUINT64_FORMAT " rows out "
      "(%s, expected %" G_GUINT64_FORMAT "), %" G_GUINT64_FORMAT
      " buffers, %" G_GUINT64_FORMAT " non-finite values, %"
      G_GUINT64_FORMAT " timestamp errors\n", app.frames, app.out_rows,
      app.output, expect_rows, app.out_buffers, app.nonfinite, app.ts_errors);

  if (app.out_rows != expect_rows) {
    g_printerr ("FAIL: %" G_GUINT64_FORMAT " rows out, expected %"
        G_GUINT64_FORMAT "\n", app.out_rows, expect_rows);
    failed = 1;
  }
  if (app.nonfinite != 0) {
    g_printerr ("FAIL: non-finite feature values\n");
    failed = 1;
  }
  if (app.ts_errors != 0) {
    g_printerr ("FAIL: timestamps or buffer sizes are wrong\n");
    failed = 1;
  }

  gst_object_unref (pipeline);
  g_array_unref (app.row_energy);
  g_free (app.in_sum);
  g_free (app.in_sq);
  g_free (app.out_sum);
  g_free (app.out_sq);
  g_free ((gchar *) app.output);
  g_free ((gchar *) app.start);
  g_mutex_clear (&app.lock);
  return failed;
}
