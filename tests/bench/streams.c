/* sattn-streams: how many real-time streams of a whole model one core
 * sustains, and the decision latency.
 *
 *   sattn-streams --model FILE --streams N [--seconds S] [--branches]
 *                 [--rate R] [--channels C] [--buffer-ms B] [--smoke]
 *                 [--precision exact|fast] [--lockstep]
 *
 * N live streams (R Hz, C interleaved channels of white noise, default the
 * model's input contract; buffers of B ms, default 10) each run through
 *   appsrc ! sattn weights=FILE output=classes precision=P ! fakesink
 * as N pipelines in this process (default) or as one pipeline of N
 * branches (--branches).  One pacing thread pushes every stream's buffer
 * when its time comes (a live source: the clock, not the element, sets
 * the rate); stream i's buffers come i/N of a buffer period after stream
 * 0's, as independent sources do (--lockstep: all at once, so that every
 * stream's window is due at the same instant: the worst case).  Run it pinned to one CPU (taskset -c K) for "per core".
 *
 * Latency of a decision: from the moment the input buffer holding a
 * window's last frame enters sattn (a probe on its sink pad) to the moment
 * that window's row leaves (a probe on its src pad, after its sattn-class
 * message, if any, was posted: the element posts it before pushing the
 * row), in CLOCK_MONOTONIC.  Printed: windows computed against the
 * windows due (every frame pushed must have been used: none dropped),
 * latency p50, p99 and max over all windows, and p50 of the first and
 * last third (rising latency means the core does not keep up), the
 * process CPU time per second of stream.  At the end every appsrc sends
 * EOS and every pipeline's EOS is awaited before counting.  Exit status 1
 * when a stream lost a window, the pushes fell behind real time by more
 * than a buffer, or the last third's p50 exceeds the first's by more than
 * 2 ms; with --smoke (a check that it works on a busy machine) only a
 * lost window or a missing EOS fails.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sattn/sattn-weights.h"

#define MAX_STREAMS 1024
#define MAX_LAT (1 << 22)

typedef struct {
  GstElement *pipe, *src, *sattn;
  guint64 frames_in; /* samples per channel pushed */
  guint64 windows;   /* rows out */
  /* entry times of the input buffers, by their first sample (a ring) */
  guint64 *in_first;
  gint64 *in_time;
  guint in_head, in_cap;
  GMutex lock;
} Stream;

static Stream streams[MAX_STREAMS];
static gint64 *lat; /* latencies, ns */
static guint64 n_lat;
static GMutex lat_lock;
static guint rate, channels, frame_size, window_f, hop_f;

static gint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static GstPadProbeReturn
in_probe (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  Stream *s = data;
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
  guint i;

  (void) pad;
  g_mutex_lock (&s->lock);
  i = s->in_head++ % s->in_cap;
  s->in_first[i] = GST_BUFFER_OFFSET (b);
  s->in_time[i] = now_ns ();
  g_mutex_unlock (&s->lock);
  return GST_PAD_PROBE_OK;
}

/* The entry time of the input buffer holding sample `last` (the window's
 * last sample). */
static gint64
entry_of (Stream *s, guint64 last)
{
  gint64 t = -1;
  guint64 best = 0;
  guint k;

  g_mutex_lock (&s->lock);
  for (k = 0; k < MIN (s->in_head, s->in_cap); k++) {
    guint i = (s->in_head - 1 - k) % s->in_cap;

    if (s->in_first[i] <= last && s->in_first[i] >= best) {
      best = s->in_first[i];
      t = s->in_time[i];
      break;
    }
  }
  g_mutex_unlock (&s->lock);
  return t;
}

static GstPadProbeReturn
out_probe (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  Stream *s = data;
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
  gint64 t = now_ns ();

  (void) pad;
  if (GST_BUFFER_PTS_IS_VALID (b) && GST_BUFFER_DURATION_IS_VALID (b)) {
    /* the row accounts for frames up to its end: its window's last
     * sample is the one before */
    guint64 end = gst_util_uint64_scale_round (GST_BUFFER_PTS (b) +
                                                   GST_BUFFER_DURATION (b),
                                               rate, GST_SECOND);
    gint64 in = entry_of (s, end > 0 ? end - 1 : 0);

    if (in > 0) {
      g_mutex_lock (&lat_lock);
      if (n_lat < MAX_LAT)
        lat[n_lat++] = t - in;
      g_mutex_unlock (&lat_lock);
    }
  }
  s->windows++;
  return GST_PAD_PROBE_OK;
}

static int
cmp64 (const void *a, const void *b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;
  return x < y ? -1 : x > y;
}

static double
pct (gint64 *v, guint64 n, double p)
{
  if (n == 0)
    return NAN;
  qsort (v, n, sizeof (gint64), cmp64);
  return v[(guint64) fmin ((double) n - 1, p * (double) n)] / 1e3;
}

int
main (int argc, char **argv)
{
  const gchar *model = NULL, *precision = "exact";
  guint n = 1, buffer_ms = 10, i;
  gdouble seconds = 10.0;
  gboolean branches = FALSE, smoke = FALSE, lockstep = FALSE;
  GString *desc;
  gsize buf_samples, buf_bytes;
  float *noise;
  gint64 t0, next;
  guint64 k, pushes, behind_max = 0;
  struct rusage ru0, ru1;
  int fail = 0;

  for (i = 1; i < (guint) argc; i++) {
    if (!strcmp (argv[i], "--model") && i + 1 < (guint) argc)
      model = argv[++i];
    else if (!strcmp (argv[i], "--streams") && i + 1 < (guint) argc)
      n = (guint) atoi (argv[++i]);
    else if (!strcmp (argv[i], "--seconds") && i + 1 < (guint) argc)
      seconds = atof (argv[++i]);
    else if (!strcmp (argv[i], "--rate") && i + 1 < (guint) argc)
      rate = (guint) atoi (argv[++i]);
    else if (!strcmp (argv[i], "--channels") && i + 1 < (guint) argc)
      channels = (guint) atoi (argv[++i]);
    else if (!strcmp (argv[i], "--buffer-ms") && i + 1 < (guint) argc)
      buffer_ms = (guint) atoi (argv[++i]);
    else if (!strcmp (argv[i], "--branches"))
      branches = TRUE;
    else if (!strcmp (argv[i], "--lockstep"))
      lockstep = TRUE;
    else if (!strcmp (argv[i], "--smoke"))
      smoke = TRUE;
    else if (!strcmp (argv[i], "--precision") && i + 1 < (guint) argc &&
             (!strcmp (argv[i + 1], "exact") || !strcmp (argv[i + 1], "fast")))
      precision = argv[++i];
    else {
      fprintf (stderr,
               "usage: %s --model FILE --streams N [--seconds S] "
               "[--branches] [--lockstep] [--rate R] [--channels C] "
               "[--buffer-ms B] "
               "[--smoke] [--precision exact|fast]\n",
               argv[0]);
      return 2;
    }
  }
  if (model == NULL || n == 0 || n > MAX_STREAMS) {
    fprintf (stderr, "--model FILE and 1 <= --streams <= %d needed\n",
             MAX_STREAMS);
    return 2;
  }
  gst_init (&argc, &argv);
  {
    /* the model's contract gives the stream */
    SattnModel *m = NULL;
    SattnModelContract c;
    char err[512];

    if (sattn_model_load (model, "", NULL, &m, NULL, err, sizeof err) !=
        SATTN_OK) {
      fprintf (stderr, "%s\n", err);
      return 2;
    }
    sattn_model_contract (m, &c);
    if (rate == 0)
      rate = c.sample_rate ? c.sample_rate : 16000;
    if (channels == 0)
      channels = c.channels ? c.channels : 1;
    frame_size = c.frame_size ? c.frame_size : 1;
    window_f = c.window ? c.window : 64;
    /* the element's: the file's hop, else its default 16 */
    hop_f = MIN (c.hop ? c.hop : 16, window_f);
    sattn_model_free (m);
  }
  buf_samples = (gsize) rate * buffer_ms / 1000;
  buf_bytes = buf_samples * channels * sizeof (float);
  noise = g_new (float, buf_samples *channels * 64);
  {
    GRand *r = g_rand_new_with_seed (1);

    for (k = 0; k < buf_samples * channels * 64; k++)
      noise[k] = (float) g_rand_double_range (r, -1.0, 1.0);
    g_rand_free (r);
  }
  lat = g_new (gint64, MAX_LAT);

  desc = g_string_new (NULL);
  for (i = 0; i < n; i++) {
    Stream *s = &streams[i];
    gchar *one = g_strdup_printf (
        "appsrc name=src%u is-live=true "
        "format=time do-timestamp=false max-bytes=0 caps=audio/x-raw,"
        "format=F32LE,layout=interleaved,rate=%u,channels=%u ! sattn "
        "name=s%u weights=\"%s\" output=classes precision=%s ! fakesink "
        "sync=false async=false ",
        i, rate, channels, i, model, precision);
    GError *gerr = NULL;

    g_mutex_init (&s->lock);
    s->in_cap = 64;
    s->in_first = g_new0 (guint64, s->in_cap);
    s->in_time = g_new0 (gint64, s->in_cap);
    if (branches) {
      g_string_append (desc, one);
    } else {
      s->pipe = gst_parse_launch (one, &gerr);
      if (s->pipe == NULL || gerr) {
        fprintf (stderr, "%s\n", gerr ? gerr->message : "parse");
        return 2;
      }
    }
    g_free (one);
  }
  if (branches) {
    GError *gerr = NULL;
    GstElement *p = gst_parse_launch (desc->str, &gerr);

    if (p == NULL || gerr) {
      fprintf (stderr, "%s\n", gerr ? gerr->message : "parse");
      return 2;
    }
    for (i = 0; i < n; i++)
      streams[i].pipe = i == 0 ? p : NULL;
  }
  for (i = 0; i < n; i++) {
    Stream *s = &streams[i];
    GstElement *p = branches ? streams[0].pipe : s->pipe;
    gchar name[32];
    GstPad *pad;

    g_snprintf (name, sizeof name, "src%u", i);
    s->src = gst_bin_get_by_name (GST_BIN (p), name);
    g_snprintf (name, sizeof name, "s%u", i);
    s->sattn = gst_bin_get_by_name (GST_BIN (p), name);
    pad = gst_element_get_static_pad (s->sattn, "sink");
    gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, in_probe, s, NULL);
    gst_object_unref (pad);
    pad = gst_element_get_static_pad (s->sattn, "src");
    gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, out_probe, s, NULL);
    gst_object_unref (pad);
  }
  for (i = 0; i < n; i++)
    if (streams[i].pipe != NULL &&
        gst_element_set_state (streams[i].pipe, GST_STATE_PLAYING) ==
            GST_STATE_CHANGE_FAILURE) {
      fprintf (stderr, "pipeline %u does not start\n", i);
      return 2;
    }

  /* The pacing thread: every buffer period, one buffer to each stream.
   * Independent live sources do not run in step: stream i pushes at
   * i / N of the period (--lockstep: all at the period's start, every
   * stream's window due at the same instant, the worst case). */
  pushes = (guint64) (seconds * 1000.0 / buffer_ms);
  getrusage (RUSAGE_SELF, &ru0);
  t0 = now_ns ();
  for (k = 0; k < pushes * n; k++) {
    Stream *s = &streams[k % n];
    gint64 t = now_ns ();
    GstBuffer *b;

    next = t0 + (gint64) (k / n) * buffer_ms * G_GINT64_CONSTANT (1000000) +
           (lockstep ? 0
                     : (gint64) (k % n) * buffer_ms *
                           G_GINT64_CONSTANT (1000000) / n);
    if (t < next)
      g_usleep ((gulong) ((next - t) / 1000));
    else if ((guint64) (t - next) > behind_max)
      behind_max = (guint64) (t - next);
    b = gst_buffer_new_memdup (noise + ((k / n + k % n) % 64) * buf_samples *
                                           channels,
                               buf_bytes);
    GST_BUFFER_PTS (b) = gst_util_uint64_scale (s->frames_in, GST_SECOND, rate);
    GST_BUFFER_DURATION (b) = gst_util_uint64_scale (s->frames_in + buf_samples,
                                                     GST_SECOND, rate) -
                              GST_BUFFER_PTS (b);
    GST_BUFFER_OFFSET (b) = s->frames_in;
    s->frames_in += buf_samples;
    gst_app_src_push_buffer (GST_APP_SRC (s->src), b);
  }
  /* end every stream and wait for its EOS: by then every frame pushed
   * has been used (the element decides the last, partial hop at EOS) */
  for (i = 0; i < n; i++)
    gst_app_src_end_of_stream (GST_APP_SRC (streams[i].src));
  for (i = 0; i < n; i++) {
    GstBus *bus;
    GstMessage *msg;

    if (streams[i].pipe == NULL)
      continue;
    bus = gst_element_get_bus (streams[i].pipe);
    msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
                                      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
    if (msg == NULL || GST_MESSAGE_TYPE (msg) != GST_MESSAGE_EOS) {
      fprintf (stderr, "pipeline %u: %s\n", i,
               msg == NULL ? "no EOS within 60 s" : "error before EOS");
      fail = 1;
    }
    if (msg != NULL)
      gst_message_unref (msg);
    gst_object_unref (bus);
  }
  getrusage (RUSAGE_SELF, &ru1);
  {
    guint64 due = 0, done = 0, lost = 0;
    gdouble cpu = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                  (ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                  ((ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) +
                   (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) /
                      1e6;
    gdouble wall = (now_ns () - t0) / 1e9;
    guint64 third = n_lat / 3;
    gint64 *first = g_memdup2 (lat, third * sizeof (gint64));
    gint64 *last = g_memdup2 (lat + n_lat - third, third * sizeof (gint64));
    double f50 = pct (first, third, 0.5), l50 = pct (last, third, 0.5);

    for (i = 0; i < n; i++) {
      guint64 frames = streams[i].frames_in / frame_size;
      /* a row every hop frames, and one for a last, partial hop */
      guint64 want = frames / hop_f + (frames % hop_f != 0);

      due += want;
      done += streams[i].windows;
      lost += streams[i].windows < want ? want - streams[i].windows : 0;
    }
    printf (
        "%u stream(s) as %s%s, precision=%s, %u Hz x %u ch, window %u x %u, "
        "hop %u, %u ms buffers, %.1f s: windows %" G_GUINT64_FORMAT
        " of %" G_GUINT64_FORMAT " due (%" G_GUINT64_FORMAT
        " missing); CPU %.3f s "
        "per s (%.1f%% of one core); pacing behind at most %.2f ms; decision "
        "latency us: p50 %.0f p99 %.0f max %.0f (first third p50 %.0f, last "
        "third p50 %.0f)\n",
        n, branches ? "one pipeline of branches" : "pipelines",
        lockstep ? " in lock-step" : "", precision, rate, channels, window_f,
        frame_size, hop_f, buffer_ms, seconds, done, due, lost, cpu / wall,
        100.0 * cpu / wall, behind_max / 1e6, pct (lat, n_lat, 0.5),
        pct (lat, n_lat, 0.99), pct (lat, n_lat, 1.0), f50, l50);
    printf ("{\"streams\": %u, \"branches\": %s, \"lockstep\": %s, "
            "\"precision\": \"%s\", "
            "\"windows\": "
            "%" G_GUINT64_FORMAT ", \"due\": %" G_GUINT64_FORMAT
            ", \"missing\": %" G_GUINT64_FORMAT
            ", \"cpu_per_s\": %.4f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
            "\"max_us\": %.1f, \"first_p50_us\": %.1f, \"last_p50_us\": %.1f, "
            "\"behind_ms\": %.3f}\n",
            n, branches ? "true" : "false", lockstep ? "true" : "false",
            precision, done, due, lost, cpu / wall, pct (lat, n_lat, 0.5),
            pct (lat, n_lat, 0.99), pct (lat, n_lat, 1.0), f50, l50,
            behind_max / 1e6);
    if (smoke)
      fail |= lost > 0;
    else
      fail |= lost > 0 || behind_max > (guint64) buffer_ms * 1000000 ||
              (third > 0 && l50 > f50 + 2000.0);
    g_free (first);
    g_free (last);
  }
  for (i = 0; i < n; i++) {
    if (streams[i].pipe != NULL) {
      gst_element_set_state (streams[i].pipe, GST_STATE_NULL);
      gst_object_unref (streams[i].pipe);
    }
    gst_object_unref (streams[i].src);
    gst_object_unref (streams[i].sattn);
  }
  g_free (noise);
  g_free (lat);
  g_string_free (desc, TRUE);
  return fail;
}
