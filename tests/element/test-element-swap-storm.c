/* sattn element: a weights swap storm.
 *
 * Three threads on one element: a streaming thread pushes buffers of
 * random frames without pause; a storm thread sets `weights` hundreds of
 * times (SATTN_STORM_SETS, default 400) to good files (attention modules
 * with RoPE / ALiBi in three layouts, an encoder layer: all of the same
 * d_model and d_out), missing files, truncated files, files of another
 * geometry (another d_out) and of another kind (a whole model), and now
 * and then `weights-prefix`; the main thread meanwhile sends flushes and
 * EOS and cycles the state through READY (a READY -> PAUSED that meets a
 * file it cannot use fails with an error, as documented; the main thread
 * then names a good file and starts again).
 *
 * Checked: no crash, hang, leak (AddressSanitizer with leak detection;
 * valgrind in `make soak`) or data race (ThreadSanitizer); every output
 * value finite and every output buffer a whole number of rows; swaps
 * both took over (sattn-weights-swapped) and were refused (a warning);
 * every error is one the documentation gives (a weights file that cannot
 * be used at READY -> PAUSED, data before caps after a state cycle); and
 * after the storm the element still gives one row per frame.  The counts
 * of each event are printed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "st-builder.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#define RATE 8000
#define CHANNELS 8
#define D 8

enum
{ F_GOOD0, F_GOOD1, F_GOOD2, F_GOOD3, F_MISSING, F_TRUNCATED, F_GEOMETRY,
  F_KIND, N_FILES
};
#define N_GOOD 4

static gchar *tmp_dir;
static gchar *files[N_FILES];

typedef struct
{
  GstHarness *h;
  GMutex lock;                  /* guards need_sticky */
  gboolean need_sticky;
  gint stop;
  gint sets, prefix_sets;
  gint out_buffers, out_rows, bad_values, bad_sizes;
  gint swaps, warnings, errors, unexpected_errors, pushes, push_fails;
  gint flushes, eoses, cycles, cycle_fails;
  gchar *unexpected;            /* the first unexpected error (lock) */
} Storm;

static gchar *
tmp_path (const gchar * name)
{
  return g_build_filename (tmp_dir, name, NULL);
}

static void
write_files (void)
{
  StBuilder w;
  gchar *buf = NULL;
  gsize len = 0;
  WholeSpec whole = { .f = D, .d = 8, .n_layers = 1, .ff = 16, .classes = 3,
    .heads = 2, .positions = "alibi", .final_norm = TRUE
  };

  tmp_dir = g_dir_make_tmp ("sattn-storm-XXXXXX", NULL);
  fail_unless (tmp_dir != NULL);
  files[F_GOOD0] = tmp_path ("mha-rope.safetensors");
  g_free (st_write_layer (files[F_GOOD0], 1, LAYOUT_MHA, D, D, 2, "rope", 0));
  files[F_GOOD1] = tmp_path ("hf-alibi.safetensors");
  g_free (st_write_layer (files[F_GOOD1], 2, LAYOUT_HF, D, D, 2, "alibi", 0));
  files[F_GOOD2] = tmp_path ("llama.safetensors");
  g_free (st_write_layer (files[F_GOOD2], 3, LAYOUT_LLAMA, D, D, 2, NULL, 0));
  /* an encoder layer (relu, post-norm: the loader's defaults) */
  files[F_GOOD3] = tmp_path ("layer.safetensors");
  st_init (&w, 4);
  st_attn (&w, "self_attn.", LAYOUT_MHA, D, D);
  st_linear (&w, "", "linear1", 16, D, TRUE);
  st_linear (&w, "", "linear2", D, 16, TRUE);
  st_norm (&w, "", "norm1", D);
  st_norm (&w, "", "norm2", D);
  st_meta (&w, "self_attn.num_heads", "2");
  st_write (&w, files[F_GOOD3]);
  files[F_MISSING] = tmp_path ("missing.safetensors");
  files[F_TRUNCATED] = tmp_path ("truncated.safetensors");
  fail_unless (g_file_get_contents (files[F_GOOD1], &buf, &len, NULL));
  fail_unless (len > 300);
  /* the header whole, the data cut */
  fail_unless (g_file_set_contents (files[F_TRUNCATED], buf, len - 100, NULL));
  g_free (buf);
  files[F_GEOMETRY] = tmp_path ("dout12.safetensors");
  g_free (st_write_layer (files[F_GEOMETRY], 5, LAYOUT_MHA, D, 12, 2, NULL, 0));
  files[F_KIND] = tmp_path ("whole.safetensors");
  g_free (st_write_whole (files[F_KIND], 6, &whole));
}

static void
remove_files (void)
{
  guint i;

  for (i = 0; i < N_FILES; i++) {
    g_unlink (files[i]);
    g_clear_pointer (&files[i], g_free);
  }
  g_rmdir (tmp_dir);
  g_clear_pointer (&tmp_dir, g_free);
}

/* Every message, counted where it is posted. */
static GstBusSyncReply
on_message (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  Storm *s = user_data;

  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT &&
      gst_message_has_name (msg, "sattn-weights-swapped")) {
    g_atomic_int_inc (&s->swaps);
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
    GError *err = NULL;

    gst_message_parse_warning (msg, &err, NULL);
    if (strstr (err->message, "cannot replace the running model"))
      g_atomic_int_inc (&s->warnings);
    g_clear_error (&err);
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *err = NULL;

    gst_message_parse_error (msg, &err, NULL);
    g_atomic_int_inc (&s->errors);
    /* documented: a weights file that cannot be used at READY -> PAUSED
     * (an error naming it, or the refusal of output=frames for a whole
     * model), data before caps after a state cycle */
    if (!strstr (err->message, "weights") && !strstr (err->message,
            "caps") && !strstr (err->message, "whole model")) {
      g_atomic_int_inc (&s->unexpected_errors);
      g_mutex_lock (&s->lock);
      if (s->unexpected == NULL)
        s->unexpected = g_strdup (err->message);
      g_mutex_unlock (&s->lock);
    }
    g_clear_error (&err);
  }
  /* a handler that drops a message unrefs it */
  gst_message_unref (msg);
  return GST_BUS_DROP;
}

/* Every output buffer: whole rows, finite values; then dropped. */
static GstPadProbeReturn
on_output (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Storm *s = user_data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstMapInfo map;
  gsize i, n;
  gint bad = 0;

  if (!gst_buffer_map (buf, &map, GST_MAP_READ))
    return GST_PAD_PROBE_DROP;
  n = map.size / sizeof (float);
  /* d_out is 8, or 12 while a file of another geometry runs */
  if (map.size == 0 || map.size % sizeof (float) != 0 ||
      (n % D != 0 && n % 12 != 0))
    g_atomic_int_inc (&s->bad_sizes);
  for (i = 0; i < n; i++) {
    float v;

    memcpy (&v, map.data + i * sizeof (float), sizeof v);
    bad += !isfinite (v);
  }
  gst_buffer_unmap (buf, &map);
  g_atomic_int_add (&s->bad_values, bad);
  g_atomic_int_inc (&s->out_buffers);
  g_atomic_int_add (&s->out_rows, (gint) (n % D == 0 ? n / D : n / 12));
  return GST_PAD_PROBE_DROP;
}

static void
push_sticky (GstHarness * h)
{
  GstSegment seg;
  gchar *str = sattn_caps_string (RATE, CHANNELS);
  GstCaps *caps = gst_caps_from_string (str);

  gst_segment_init (&seg, GST_FORMAT_TIME);
  gst_harness_push_event (h, gst_event_new_stream_start ("storm"));
  gst_harness_push_event (h, gst_event_new_caps (caps));
  gst_harness_push_event (h, gst_event_new_segment (&seg));
  gst_caps_unref (caps);
  g_free (str);
}

/* The streaming thread: buffers of 1 to 40 frames, without pause; after
 * a failed push (flushing, EOS, a state cycle) the stream starts again. */
static gpointer
pusher (gpointer data)
{
  Storm *s = data;
  GRand *r = g_rand_new_with_seed (11);
  float *x = g_new (float, 40 * CHANNELS);
  gboolean restart = FALSE;

  while (!g_atomic_int_get (&s->stop)) {
    guint n = (guint) g_rand_int_range (r, 1, 41), i;
    GstFlowReturn ret;

    g_mutex_lock (&s->lock);
    if (s->need_sticky || restart) {
      if (restart && !s->need_sticky) {
        /* EOS or a flush: flushed, then a new segment */
        gst_harness_push_event (s->h, gst_event_new_flush_start ());
        gst_harness_push_event (s->h, gst_event_new_flush_stop (TRUE));
      }
      push_sticky (s->h);
      s->need_sticky = FALSE;
      restart = FALSE;
    }
    for (i = 0; i < n * CHANNELS; i++)
      x[i] = (float) g_rand_double_range (r, -1.0, 1.0);
    /* (the harness's source pad must not see data between another
     * thread's FLUSH_STOP and its new segment: the lock; FLUSH_START and
     * EOS still race with the element's chain) */
    ret = gst_harness_push (s->h, sattn_buffer_new (x, n * CHANNELS *
            sizeof (float), GST_CLOCK_TIME_NONE, 0));
    g_mutex_unlock (&s->lock);
    g_atomic_int_inc (&s->pushes);
    if (ret != GST_FLOW_OK) {
      g_atomic_int_inc (&s->push_fails);
      restart = TRUE;
      g_usleep (200);
    }
  }
  g_free (x);
  g_rand_free (r);
  return NULL;
}

/* The storm thread: sets of weights (and now and then weights-prefix). */
static gpointer
stormer (gpointer data)
{
  Storm *s = data;
  GRand *r = g_rand_new_with_seed (12);
  const gchar *env = g_getenv ("SATTN_STORM_SETS");
  gint n = env ? atoi (env) : 400, i;

  for (i = 0; i < n; i++) {
    guint k = (guint) g_rand_int_range (r, 0, 100);
    /* half good files, half each kind of bad one */
    guint f = k < 50 ? (guint) g_rand_int_range (r, 0, N_GOOD) :
        (guint) g_rand_int_range (r, N_GOOD, N_FILES);

    if (k % 10 == 0) {
      g_object_set (s->h->element, "weights-prefix", k % 20 ? "" :
          "nothing.", NULL);
      g_atomic_int_inc (&s->prefix_sets);
    } else {
      g_object_set (s->h->element, "weights", files[f], NULL);
    }
    g_atomic_int_inc (&s->sets);
    g_usleep ((gulong) g_rand_int_range (r, 0, 2000));
    /* data between two sets (a slow build pushes less often): a few
     * pushes, or 50 ms */
    {
      gint p0 = g_atomic_int_get (&s->pushes), w = 0;

      while (g_atomic_int_get (&s->pushes) < p0 + 3 && w++ < 50)
        g_usleep (1000);
    }
  }
  g_rand_free (r);
  return NULL;
}

/* A good configuration again (after a failed READY -> PAUSED). */
static void
settle (Storm * s)
{
  g_object_set (s->h->element, "weights-prefix", "", "weights",
      files[F_GOOD0], NULL);
}

GST_START_TEST (test_swap_storm)
{
  Storm s = { 0, };
  GstBus *bus;
  GThread *tp, *ts;
  GRand *r = g_rand_new_with_seed (13);
  float x[100 * CHANNELS];
  guint i;
  gint rows0;

  write_files ();
  g_mutex_init (&s.lock);
  s.h = sattn_harness_new ("weights", files[F_GOOD0], "heads", 2, "window",
      16, "hop", 4, "frame-size", 1, NULL);
  bus = gst_bus_new ();
  gst_bus_set_sync_handler (bus, on_message, &s, NULL);
  gst_element_set_bus (s.h->element, bus);
  gst_pad_add_probe (s.h->sinkpad, GST_PAD_PROBE_TYPE_BUFFER, on_output, &s,
      NULL);
  sattn_set_caps (s.h, RATE, CHANNELS);
  s.need_sticky = TRUE;

  tp = g_thread_new ("storm-push", pusher, &s);
  ts = g_thread_new ("storm-set", stormer, &s);
  /* Flushes, EOS and state cycles while the storm lasts. */
  while (g_atomic_int_get (&s.sets) < (g_getenv ("SATTN_STORM_SETS") ?
          atoi (g_getenv ("SATTN_STORM_SETS")) : 400)) {
    guint k = (guint) g_rand_int_range (r, 0, 100);

    if (k < 40) {
      GstSegment seg;

      gst_segment_init (&seg, GST_FORMAT_TIME);
      gst_harness_push_event (s.h, gst_event_new_flush_start ());
      g_mutex_lock (&s.lock);
      gst_harness_push_event (s.h, gst_event_new_flush_stop (TRUE));
      gst_harness_push_event (s.h, gst_event_new_segment (&seg));
      g_mutex_unlock (&s.lock);
      g_atomic_int_inc (&s.flushes);
    } else if (k < 60) {
      gst_harness_push_event (s.h, gst_event_new_eos ());
      g_atomic_int_inc (&s.eoses);
    } else if (k < 80) {
      GstStateChangeReturn ret;

      g_mutex_lock (&s.lock);
      gst_element_set_state (s.h->element, GST_STATE_READY);
      ret = gst_element_set_state (s.h->element, GST_STATE_PLAYING);
      if (ret == GST_STATE_CHANGE_FAILURE) {
        /* a file READY cannot use: documented error; a good one */
        g_atomic_int_inc (&s.cycle_fails);
        gst_element_set_state (s.h->element, GST_STATE_READY);
        settle (&s);
        ret = gst_element_set_state (s.h->element, GST_STATE_PLAYING);
      }
      s.need_sticky = TRUE;
      g_mutex_unlock (&s.lock);
      g_atomic_int_inc (&s.cycles);
    }
    g_usleep ((gulong) g_rand_int_range (r, 500, 4000));
  }
  g_thread_join (ts);
  g_atomic_int_set (&s.stop, 1);
  g_thread_join (tp);

  printf ("swap storm: %d sets (%d of weights-prefix), %d pushes (%d "
      "failed: flushing, EOS, a state cycle), %d flushes, %d EOS, %d state "
      "cycles (%d READY -> PAUSED refused a file), %d swaps taken over, %d "
      "refused with a warning, %d errors, %d output buffers, %d rows\n",
      s.sets, s.prefix_sets, s.pushes, s.push_fails, s.flushes, s.eoses,
      s.cycles, s.cycle_fails, s.swaps, s.warnings, s.errors, s.out_buffers,
      s.out_rows);
  fail_unless (s.unexpected_errors == 0, "%d unexpected errors, the first: "
      "%s", s.unexpected_errors, s.unexpected);
  fail_unless_equals_int (s.bad_values, 0);
  fail_unless_equals_int (s.bad_sizes, 0);
  fail_unless (s.swaps > 0, "no swap took over");
  fail_unless (s.warnings > 0, "no swap was refused");
  fail_unless (s.out_rows > 0);

  /* After the storm: a good file, a new stream, one row per frame. */
  gst_element_set_state (s.h->element, GST_STATE_READY);
  settle (&s);
  fail_unless (gst_element_set_state (s.h->element, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  push_sticky (s.h);
  rows0 = g_atomic_int_get (&s.out_rows);
  sattn_fill_signal (x, G_N_ELEMENTS (x), 5, 1.0f);
  for (i = 0; i < 10; i++)
    fail_unless_equals_int (gst_harness_push (s.h, sattn_buffer_new (x +
                i * 10 * CHANNELS, 10 * CHANNELS * sizeof (float),
                GST_CLOCK_TIME_NONE, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (s.h, gst_event_new_eos ()));
  fail_unless_equals_int (g_atomic_int_get (&s.out_rows) - rows0, 100);
  fail_unless_equals_int (s.bad_values, 0);

  gst_element_set_bus (s.h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (s.h);
  g_free (s.unexpected);
  g_mutex_clear (&s.lock);
  g_rand_free (r);
  remove_files ();
}

GST_END_TEST;

static Suite *
sattn_storm_suite (void)
{
  Suite *s = suite_create ("sattn-swap-storm");
  TCase *tc = tcase_create ("storm");

  sattn_tcase_set_timeout (tc, 0);
  tcase_add_test (tc, test_swap_storm);
  suite_add_tcase (s, tc);
  return s;
}

GST_CHECK_MAIN (sattn_storm);
