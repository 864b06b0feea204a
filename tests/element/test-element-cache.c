/* The model cache through the element: elements whose weights file (same
 * file, same tensors), prefix and model configuration match share one
 * model, whatever their `threads` (each stream's own); any difference,
 * or a file rewritten in place, gets its own.
 * The cache is observed through the custom query every sattn element
 * answers (GST_SATTN_CACHE_QUERY_NAME in plugin/gstsattn-cache.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "st-writer.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

#define RATE 16000
#define E 16                    /* d_model: channels, frame-size 1 */
#define T 96                    /* frames pushed per comparison */

static gchar *tmpdir;

/* ---------------------------------------------- safetensors writing */

/* The whole state dict of an nn.MultiheadAttention(e, ...) under prefix,
 * values from seed. */
static void
st_add_mha (StWriter * w, const gchar * prefix, gsize e, guint32 seed)
{
  float *v = g_new (float, 3 * e * e);
  gchar *name;

  sattn_fill_signal (v, 3 * e * e, seed, 0.5f);
  name = g_strconcat (prefix, "in_proj_weight", NULL);
  st_writer_f32_2d (w, name, v, 3 * e, e);
  g_free (name);

  sattn_fill_signal (v, 3 * e, seed + 1, 0.1f);
  name = g_strconcat (prefix, "in_proj_bias", NULL);
  st_writer_f32_2d (w, name, v, 3 * e, 0);
  g_free (name);

  sattn_fill_signal (v, e * e, seed + 2, 0.5f);
  name = g_strconcat (prefix, "out_proj.weight", NULL);
  st_writer_f32_2d (w, name, v, e, e);
  g_free (name);

  sattn_fill_signal (v, e, seed + 3, 0.1f);
  name = g_strconcat (prefix, "out_proj.bias", NULL);
  st_writer_f32_2d (w, name, v, e, 0);
  g_free (name);
  g_free (v);
}

/* A writer (fails the test when out of memory). */
static StWriter *
st_new (void)
{
  StWriter *w = st_writer_new ();

  fail_unless (w != NULL);
  return w;
}

/* Writes w at path and frees it (fails the test on an error). */
static void
st_save (StWriter * w, const gchar * path)
{
  fail_unless (st_writer_save (w, path) == 0, "%s: %s", path,
      g_strerror (errno));
  st_writer_free (w);
}

/* A file with the modules "a." and "b." (values from seed), written at
 * tmpdir/name; returns the path. */
static gchar *
write_weights (const gchar * name, guint32 seed)
{
  StWriter *w = st_new ();
  gchar *path = g_build_filename (tmpdir, name, NULL);

  st_add_mha (w, "a.", E, seed);
  st_add_mha (w, "b.", E, seed + 100);
  st_save (w, path);
  return path;
}

/* ------------------------------------------------------- cache state */

/* The cache's counters as element e answers its query; builds may be
 * NULL. */
static void
cache_query (GstElement * e, guint * models, guint * users, guint64 * builds)
{
  GstPad *src = gst_element_get_static_pad (e, "src");
  GstQuery *q = gst_query_new_custom (GST_QUERY_CUSTOM,
      gst_structure_new_empty ("GstSattnModelCache"));
  const GstStructure *s;

  fail_unless (gst_pad_query (src, q), "the cache query was not answered");
  s = gst_query_get_structure (q);
  fail_unless (gst_structure_get_uint (s, "models", models));
  fail_unless (gst_structure_get_uint (s, "users", users));
  fail_unless (builds == NULL || gst_structure_get_uint64 (s, "builds",
          builds));
  gst_query_unref (q);
  gst_object_unref (src);
}

static void
cache_counts (GstElement * e, guint * models, guint * users)
{
  cache_query (e, models, users, NULL);
}

/* Counters seen from an element that holds no model (builds may be
 * NULL). */
static void
cache_query_idle (guint * models, guint * users, guint64 * builds)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);

  fail_unless (e != NULL);
  cache_query (e, models, users, builds);
  gst_object_unref (e);
}

static void
cache_counts_idle (guint * models, guint * users)
{
  cache_query_idle (models, users, NULL);
}

#define assert_counts(e, m, u) G_STMT_START {                          \
    guint m_ = 0, u_ = 0;                                               \
    cache_counts ((e), &m_, &u_);                                       \
    fail_unless (m_ == (m) && u_ == (u),                                \
        "cache holds %u models with %u users, expected %u and %u",     \
        m_, u_, (guint) (m), (guint) (u));                              \
  } G_STMT_END

/* A playing harness with caps set (the model is built then). */
static GstHarness *
harness_with_caps (const gchar * first_property, ...)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstHarness *h;
  va_list args;

  fail_unless (e != NULL);
  g_object_set (e, "window", 8, "hop", 4, "heads", 2, NULL);
  va_start (args, first_property);
  h = sattn_harness_new_valist (e, first_property, args);
  va_end (args);
  sattn_set_caps (h, RATE, E);
  return h;
}

/* Push T frames of the same signal, drain with EOS, return every output
 * float. */
static GArray *
run_signal (GstHarness * h)
{
  float x[T * E];
  SattnOutput o;
  GArray *res;
  GstEvent *ev;

  sattn_fill_signal (x, T * E, 7, 1.0f);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  while ((ev = gst_harness_try_pull_event (h)) != NULL)
    gst_event_unref (ev);
  res = g_array_ref (o.floats);
  sattn_output_clear (&o);
  fail_unless_equals_int (res->len, T * E);
  return res;
}

static gboolean
same_floats (GArray * a, GArray * b)
{
  return a->len == b->len &&
      memcmp (a->data, b->data, a->len * sizeof (float)) == 0;
}

/* ------------------------------------------------------------- tests */

/* 16 elements on one file, prefix and configuration hold one model; the
 * last release frees it.  Stream settings (window, hop, output) are not
 * part of the model and do not prevent sharing, nor does the prefix's
 * '.' ("a" names the tensors "a." does). */
GST_START_TEST (test_share_16)
{
  gchar *path = write_weights ("share.safetensors", 1);
  GstHarness *h[16];
  GArray *ref_out = NULL;
  guint i, m, u;

  cache_counts_idle (&m, &u);
  fail_unless_equals_int (m, 0);
  fail_unless_equals_int (u, 0);
  for (i = 0; i < 16; i++) {
    h[i] = harness_with_caps ("weights", path, "weights-prefix",
        i % 4 == 3 ? "a" : "a.", "window", i % 2 ? 8 : 16, NULL);
    assert_counts (h[i]->element, 1, i + 1);
  }
  /* Every element computes with the shared model as with its own: the
   * same settings give the same bytes. */
  for (i = 0; i < 16; i += 2) {
    GArray *out = run_signal (h[i]);

    if (ref_out == NULL)
      ref_out = out;
    else {
      fail_unless (same_floats (ref_out, out), "element %u differs", i);
      g_array_unref (out);
    }
  }
  for (i = 0; i < 16; i++) {
    gst_harness_teardown (h[i]);
    cache_counts_idle (&m, &u);
    fail_unless_equals_int (m, i < 15 ? 1 : 0);
    fail_unless_equals_int (u, 15 - i);
  }
  g_array_unref (ref_out);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

/* Any difference in the file's tensors, the prefix or the model
 * configuration gets a model of its own; a repeat of an earlier request
 * shares. */
GST_START_TEST (test_no_share_when_different)
{
  gchar *path = write_weights ("diff.safetensors", 1);
  gchar *other = write_weights ("other.safetensors", 2);
  gchar *copy = g_build_filename (tmpdir, "copy.safetensors", NULL);
  GstHarness *base, *h[12];
  gchar *buf;
  gsize len;
  guint n = 0, i;

  /* A byte-identical copy is another file: identity is part of the key. */
  fail_unless (g_file_get_contents (path, &buf, &len, NULL));
  fail_unless (g_file_set_contents (copy, buf, (gssize) len, NULL));
  g_free (buf);

  base = harness_with_caps ("weights", path, "weights-prefix", "a.", NULL);
  assert_counts (base->element, 1, 1);

#define ADD(...) G_STMT_START {                                        \
    h[n] = harness_with_caps (__VA_ARGS__);                             \
    n++;                                                                \
    assert_counts (h[n - 1]->element, 1 + n, 1 + n);                    \
  } G_STMT_END
  ADD ("weights", path, "weights-prefix", "b.", NULL);
  ADD ("weights", path, "weights-prefix", "a.", "causal", TRUE, NULL);
  ADD ("weights", path, "weights-prefix", "a.", "lookback", 3, NULL);
  ADD ("weights", path, "weights-prefix", "a.", "scale", 0.5, NULL);
  ADD ("weights", path, "weights-prefix", "a.", "heads", 4, NULL);
  ADD ("weights", path, "weights-prefix", "a.", "add-zero-attn", TRUE, NULL);
  ADD ("weights", other, "weights-prefix", "a.", NULL);
  ADD ("weights", copy, "weights-prefix", "a.", NULL);
  ADD (NULL, NULL);
#undef ADD

  /* The same requests again share. */
  {
    GstHarness *again = harness_with_caps ("weights", path,
        "weights-prefix", "a.", "causal", TRUE, NULL);
    GstHarness *again_id = harness_with_caps (NULL, NULL);

    assert_counts (again->element, 1 + n, 3 + n);
    gst_harness_teardown (again);
    gst_harness_teardown (again_id);
  }

  /* Different model, different output. */
  {
    GArray *a = run_signal (base), *b = run_signal (h[0]);

    fail_if (same_floats (a, b));
    g_array_unref (a);
    g_array_unref (b);
  }

  for (i = 0; i < n; i++)
    gst_harness_teardown (h[i]);
  gst_harness_teardown (base);
  cache_counts_idle (&i, &n);
  fail_unless_equals_int (i, 0);
  fail_unless_equals_int (n, 0);
  g_unlink (path);
  g_unlink (other);
  g_unlink (copy);
  g_free (path);
  g_free (other);
  g_free (copy);
}

GST_END_TEST;

/* Threads are each element's stream's, not the model's: elements with
 * threads=1 and threads=2 on one file (and two identity elements) share
 * one model, and compute the same bytes with it. */
GST_START_TEST (test_share_across_threads)
{
  gchar *path = write_weights ("threads-share.safetensors", 4);
  GstHarness *one = harness_with_caps ("weights", path, "weights-prefix",
      "a.", "threads", 1, NULL);
  GstHarness *two = harness_with_caps ("weights", path, "weights-prefix",
      "a.", "threads", 2, NULL);
  GArray *a, *b;
  guint m, u;

  assert_counts (two->element, 1, 2);
  a = run_signal (one);
  b = run_signal (two);
  fail_unless (same_floats (a, b), "threads=1 and threads=2 differ");
  g_array_unref (a);
  g_array_unref (b);
  gst_harness_teardown (one);
  gst_harness_teardown (two);

  one = harness_with_caps ("threads", 1, NULL);
  two = harness_with_caps ("threads", 2, NULL);
  assert_counts (two->element, 1, 2);
  a = run_signal (one);
  b = run_signal (two);
  fail_unless (same_floats (a, b), "identity, threads=1 and threads=2 "
      "differ");
  g_array_unref (a);
  g_array_unref (b);
  gst_harness_teardown (one);
  gst_harness_teardown (two);

  cache_counts_idle (&m, &u);
  fail_unless_equals_int (m, 0);
  fail_unless_equals_int (u, 0);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

/* Identity models (no weights file) are shared too, per configuration. */
GST_START_TEST (test_identity_share)
{
  GstHarness *a = harness_with_caps (NULL, NULL);
  GstHarness *b = harness_with_caps ("window", 32, "hop", 8, NULL);
  GstHarness *c = harness_with_caps ("add-zero-attn", TRUE, NULL);

  assert_counts (c->element, 2, 3);
  gst_harness_teardown (a);
  gst_harness_teardown (b);
  gst_harness_teardown (c);
}

GST_END_TEST;

/* The file rewritten in place with other values, keeping its inode, size
 * and modification time: a new element must not get the old model, and
 * computes what a fresh load of the new file computes. */
GST_START_TEST (test_changed_file)
{
  gchar *path = write_weights ("changed.safetensors", 1);
  gchar *next = write_weights ("next.safetensors", 5);
  GstHarness *a, *b, *c;
  GArray *out_a, *out_b, *out_c;
  struct stat st0, st1;
  struct timespec times[2];
  gchar *buf;
  gsize len;
  int fd;

  a = harness_with_caps ("weights", path, "weights-prefix", "a.", NULL);
  assert_counts (a->element, 1, 1);

  fail_unless (stat (path, &st0) == 0);
  fail_unless (g_file_get_contents (next, &buf, &len, NULL));
  fail_unless_equals_uint64 ((guint64) len, (guint64) st0.st_size);
  fd = open (path, O_WRONLY);
  fail_unless (fd >= 0);
  fail_unless (write (fd, buf, len) == (ssize_t) len);
  times[0] = st0.st_atim;
  times[1] = st0.st_mtim;
  fail_unless (futimens (fd, times) == 0);
  fail_unless (close (fd) == 0);
  g_free (buf);
  fail_unless (stat (path, &st1) == 0);
  fail_unless (st1.st_ino == st0.st_ino && st1.st_size == st0.st_size &&
      st1.st_mtim.tv_sec == st0.st_mtim.tv_sec &&
      st1.st_mtim.tv_nsec == st0.st_mtim.tv_nsec);

  b = harness_with_caps ("weights", path, "weights-prefix", "a.", NULL);
  assert_counts (b->element, 2, 2);
  out_a = run_signal (a);
  out_b = run_signal (b);
  fail_if (same_floats (out_a, out_b), "the old model was served");
  gst_harness_teardown (a);
  gst_harness_teardown (b);

  /* Nothing cached now: c loads the file afresh. */
  c = harness_with_caps ("weights", path, "weights-prefix", "a.", NULL);
  assert_counts (c->element, 1, 1);
  out_c = run_signal (c);
  fail_unless (same_floats (out_b, out_c));
  gst_harness_teardown (c);

  g_array_unref (out_a);
  g_array_unref (out_b);
  g_array_unref (out_c);
  g_unlink (path);
  g_unlink (next);
  g_free (path);
  g_free (next);
}

GST_END_TEST;

/* Elements built and torn down from several threads at once: counts stay
 * exact and every model is released. */
typedef struct
{
  const gchar *path;
  guint id;
} ThreadArg;

static gpointer
churn (gpointer data)
{
  ThreadArg *t = data;
  guint i;

  for (i = 0; i < 20; i++) {
    GstHarness *h = harness_with_caps ("weights", t->path, "weights-prefix",
        (t->id + i) % 2 ? "a." : "b.", NULL);

    gst_harness_teardown (h);
  }
  return NULL;
}

GST_START_TEST (test_threads)
{
  gchar *path = write_weights ("threads.safetensors", 3);
  GThread *th[4];
  ThreadArg args[4];
  guint i, m, u;

  for (i = 0; i < 4; i++) {
    args[i].path = path;
    args[i].id = i;
    th[i] = g_thread_new ("churn", churn, &args[i]);
  }
  for (i = 0; i < 4; i++)
    g_thread_join (th[i]);
  cache_counts_idle (&m, &u);
  fail_unless_equals_int (m, 0);
  fail_unless_equals_int (u, 0);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

/* Every way set_caps can fail after the model was taken from the cache
 * gives it back: here downstream refuses the output caps.  The cache must
 * end empty (a model freed behind its back would stay listed). */
GST_START_TEST (test_released_on_refusal)
{
  GError *err = NULL;
  GstElement *p = gst_parse_launch ("audiotestsrc num-buffers=4 ! "
      "audio/x-raw,format=F32LE,channels=2,rate=8000 ! sattn output=window "
      "window=4 hop=2 ! audio/x-raw,channels=3 ! fakesink", &err);
  GstBus *bus;
  GstMessage *msg;
  guint m, u;

  fail_unless (p != NULL && err == NULL);
  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 20 * GST_SECOND,
      GST_MESSAGE_ERROR | GST_MESSAGE_EOS);
  fail_unless (msg != NULL, "HANG: neither an error nor EOS within 20 s");
  fail_unless (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR,
      "downstream did not refuse the output caps");
  gst_message_unref (msg);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (p);
  cache_counts_idle (&m, &u);
  fail_unless_equals_int (m, 0);
  fail_unless_equals_int (u, 0);
}

GST_END_TEST;

/* ------------------------------------------------------ measurement */

/* Resident memory means nothing under AddressSanitizer (shadow memory,
 * quarantine): the measurement exists only without it. */
#ifndef __SANITIZE_ADDRESS__

/* A /proc/self/status figure of this process ("VmRSS", "VmHWM"), KiB. */
static guint64
status_kib (const gchar * field)
{
  gchar *text = NULL, *line, *key = g_strdup_printf ("\n%s:", field);
  guint64 kib = 0;

  fail_unless (g_file_get_contents ("/proc/self/status", &text, NULL, NULL));
  line = strstr (text, key);
  fail_unless (line != NULL);
  kib = g_ascii_strtoull (line + strlen (key), NULL, 10);
  g_free (text);
  g_free (key);
  return kib;
}

/* VmRSS of this process, in KiB. */
static guint64
rss_kib (void)
{
  return status_kib ("VmRSS");
}

#define BIG_E 1792              /* 7 channels x frame-size 256 */
#define BIG_RATE (256 * 63)

static GstHarness *
big_harness (const gchar * path)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  gchar *caps = sattn_caps_string (BIG_RATE, 7);
  GstHarness *h;

  g_object_set (e, "weights", path, "frame-size", 256, "heads", 4,
      "window", 16, "hop", 4, NULL);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  gst_harness_set_src_caps_str (h, caps);
  g_free (caps);
  return h;
}

/* A weights file at path: an nn.MultiheadAttention on BIG_E values per
 * frame with weights drawn from seed; returns its size in bytes. */
static gsize
write_big (const gchar * path, guint seed)
{
  StWriter *w = st_new ();
  GStatBuf st;

  st_add_mha (w, "", BIG_E, seed);
  st_save (w, path);
  fail_unless (g_stat (path, &st) == 0);
  return (gsize) st.st_size;
}

/* The model's copies of such a file: four E x E matrices and the
 * biases, KiB. */
#define BIG_MODEL_KIB (((guint64) 4 * BIG_E * BIG_E + 4 * BIG_E) * 4 / 1024)

/* Prints the resident memory of one element and of 16 elements on the
 * same ~50 MB weights file, and checks that the 15 extra elements add
 * less than half a model (one model each would add 15 copies). */
GST_START_TEST (test_rss_16)
{
  gchar *path = g_build_filename (tmpdir, "big.safetensors", NULL);
  GstHarness *h[16];
  guint64 rss0, rss1, rss16, rss1_held, rss16_held, rss_id0, rss_id16;
  guint64 model_kib, file_bytes;
  guint i;

  file_bytes = write_big (path, 11);
  model_kib = BIG_MODEL_KIB;

  rss0 = rss_kib ();
  for (i = 0; i < 16; i++) {
    h[i] = big_harness (path);
    if (i == 0) {
      rss1_held = rss_kib ();
      malloc_trim (0);
      rss1 = rss_kib ();
    }
  }
  rss16_held = rss_kib ();
  malloc_trim (0);
  rss16 = rss_kib ();
  assert_counts (h[0]->element, 1, 16);
  for (i = 0; i < 16; i++)
    gst_harness_teardown (h[i]);

  /* What 16 elements hold besides the model (stream state, scratch): the
   * same elements without weights (identity projections, no matrices). */
  malloc_trim (0);
  rss_id0 = rss_kib ();
  for (i = 0; i < 16; i++)
    h[i] = big_harness (NULL);
  malloc_trim (0);
  rss_id16 = rss_kib ();

  g_print ("model cache: weights file %.1f MiB (d_model %d), model %.1f "
      "MiB\n"
      "model cache: RSS before %.1f MiB, 1 element %.1f MiB (+%.1f), "
      "16 elements %.1f MiB (+%.1f)\n"
      "model cache: the same before malloc_trim (freed load buffers the "
      "allocator kept): 1 element %.1f MiB, 16 elements %.1f MiB\n"
      "model cache: 16 elements without weights add %.1f MiB (stream "
      "state and scratch, %.1f MiB each)\n",
      file_bytes / 1048576.0, BIG_E,
      model_kib / 1024.0, rss0 / 1024.0, rss1 / 1024.0,
      ((gdouble) rss1 - rss0) / 1024.0, rss16 / 1024.0,
      ((gdouble) rss16 - rss0) / 1024.0, rss1_held / 1024.0,
      rss16_held / 1024.0, ((gdouble) rss_id16 - rss_id0) / 1024.0,
      ((gdouble) rss_id16 - rss_id0) / 1024.0 / 16);
  fail_unless (rss1 >= rss0 + model_kib / 2, "one element holds no model?");
  /* Without sharing the 15 more elements would add 15 models. */
  fail_unless (rss16 < rss1 + 2 * model_kib,
      "15 more elements added %" G_GUINT64_FORMAT " KiB (a model: %"
      G_GUINT64_FORMAT " KiB)", rss16 - rss1, model_kib);

  for (i = 0; i < 16; i++)
    gst_harness_teardown (h[i]);
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

/* Elements started at once from as many threads on one big file: one
 * build (the file read once), one model, N users; the resident memory at
 * the peak is one element's peak plus the others' stream state (not one
 * build each), and after all go to NULL it is back near where it started
 * (the large blocks of models, weights and streams are returned to the
 * system when freed, whichever thread's arena would have kept them). */
typedef struct
{
  const gchar *path;
  GMutex *lock;
  GCond *go;
  gboolean *started;
  GstHarness *h;
} StartArgs;

static gpointer
start_one (gpointer data)
{
  StartArgs *a = data;

  g_mutex_lock (a->lock);
  while (!*a->started)
    g_cond_wait (a->go, a->lock);
  g_mutex_unlock (a->lock);
  a->h = big_harness (a->path);
  return NULL;
}

typedef struct
{
  guint64 builds, rss0, peak, with, after;      /* KiB but builds */
} StartFigures;

/* Starts n elements on path from n threads at once, then sets them all
 * to NULL; resident sizes (KiB) before, at the peak, with all playing
 * and after. */
static StartFigures
start_at_once (const gchar * path, guint n)
{
  StartArgs *a = g_new0 (StartArgs, n);
  GThread **t = g_new0 (GThread *, n);
  GMutex lock;
  GCond go;
  gboolean started = FALSE;
  guint64 builds0, builds1;
  StartFigures r;
  guint i, m, u;

  g_mutex_init (&lock);
  g_cond_init (&go);
  cache_query_idle (&m, &u, &builds0);
  malloc_trim (0);
  r.rss0 = rss_kib ();
  /* Reset the peak (VmHWM) to the present resident size. */
  g_file_set_contents ("/proc/self/clear_refs", "5", 1, NULL);
  for (i = 0; i < n; i++) {
    a[i] = (StartArgs) {
    path, &lock, &go, &started, NULL};
    t[i] = g_thread_new ("start", start_one, &a[i]);
  }
  g_mutex_lock (&lock);
  started = TRUE;
  g_cond_broadcast (&go);
  g_mutex_unlock (&lock);
  for (i = 0; i < n; i++)
    g_thread_join (t[i]);
  cache_query_idle (&m, &u, &builds1);
  r.builds = builds1 - builds0;
  r.with = rss_kib ();
  r.peak = status_kib ("VmHWM");
  assert_counts (a[0].h->element, 1, n);
  for (i = 0; i < n; i++)
    gst_harness_teardown (a[i].h);
  cache_counts_idle (&m, &u);
  fail_unless_equals_int (m, 0);
  /* No malloc_trim here: what the elements give back by themselves. */
  r.after = rss_kib ();
  g_cond_clear (&go);
  g_mutex_clear (&lock);
  g_free (t);
  g_free (a);
  return r;
}

GST_START_TEST (test_concurrent_start)
{
  enum
  { N = 48 };
  gchar *path = g_build_filename (tmpdir, "concurrent.safetensors", NULL);
  StartFigures one, all;
  guint64 model_kib = BIG_MODEL_KIB;

  write_big (path, 12);
  one = start_at_once (path, 1);
  all = start_at_once (path, N);
  g_print ("model cache: 1 element: %" G_GUINT64_FORMAT " build(s); RSS "
      "before %.1f MiB, peak %.1f MiB (+%.1f; a model is %.1f MiB), "
      "playing %.1f MiB, after NULL %.1f MiB (%+.1f)\n", one.builds,
      one.rss0 / 1024.0, one.peak / 1024.0,
      ((gdouble) one.peak - one.rss0) / 1024.0, model_kib / 1024.0,
      one.with / 1024.0, one.after / 1024.0,
      ((gdouble) one.after - one.rss0) / 1024.0);
  g_print ("model cache: %d elements started at once from %d threads: %"
      G_GUINT64_FORMAT " build(s); RSS before %.1f MiB, peak %.1f MiB "
      "(+%.1f), with all %d playing %.1f MiB, after all went to NULL "
      "%.1f MiB (%+.1f)\n", N, N, all.builds, all.rss0 / 1024.0,
      all.peak / 1024.0, ((gdouble) all.peak - all.rss0) / 1024.0, N,
      all.with / 1024.0, all.after / 1024.0,
      ((gdouble) all.after - all.rss0) / 1024.0);
  /* One build each time: concurrent misses on one key wait for it. */
  fail_unless_equals_uint64 (one.builds, 1);
  fail_unless_equals_uint64 (all.builds, 1);
  /* ThreadSanitizer's shadow memory and allocator make resident sizes
   * meaningless: there the test checks the builds and the counts. */
#ifndef __SANITIZE_THREAD__
  /* The peak is one element's (one build: the file read, its tensors
   * converted, the model with its packed copy) plus the other elements'
   * stream state (3.4 MiB each here; 4 MiB allowed), not one build per
   * element. */
  fail_unless (all.peak - all.rss0 < one.peak - one.rss0 + (N - 1) * 4096,
      "%d elements peaked at +%" G_GUINT64_FORMAT " KiB, one at +%"
      G_GUINT64_FORMAT " KiB", N, all.peak - all.rss0, one.peak - one.rss0);
  /* Back near the start once all went to NULL: within 8 MiB for one
   * element, 24 MiB for 48 (half a model: what the allocator keeps of
   * the small objects of 48 elements in its per-thread arenas). */
  fail_unless (one.after < one.rss0 + 8192 && all.after < all.rss0 + 24576,
      "after NULL: +%" G_GINT64_FORMAT " KiB (1 element), +%"
      G_GINT64_FORMAT " KiB (%d elements)",
      (gint64) one.after - (gint64) one.rss0,
      (gint64) all.after - (gint64) all.rss0, N);
#endif
  g_unlink (path);
  g_free (path);
}

GST_END_TEST;

#endif /* !__SANITIZE_ADDRESS__ */

static Suite *
cache_suite (void)
{
  Suite *s = suite_create ("sattn-cache");
  TCase *tc = tcase_create ("cache");

  tcase_add_test (tc, test_share_16);
  tcase_add_test (tc, test_no_share_when_different);
  tcase_add_test (tc, test_share_across_threads);
  tcase_add_test (tc, test_identity_share);
  tcase_add_test (tc, test_changed_file);
  tcase_add_test (tc, test_threads);
  tcase_add_test (tc, test_released_on_refusal);
  suite_add_tcase (s, tc);
  /* Resident memory means nothing under AddressSanitizer. */
#ifndef __SANITIZE_ADDRESS__
  tc = tcase_create ("rss");
  sattn_tcase_set_timeout (tc, 240);
  tcase_add_test (tc, test_rss_16);
  tcase_add_test (tc, test_concurrent_start);
  suite_add_tcase (s, tc);
#endif
  return s;
}

int
main (int argc, char **argv)
{
  Suite *s;
  int ret;

  gst_check_init (&argc, &argv);
  tmpdir = g_dir_make_tmp ("sattn-cache-XXXXXX", NULL);
  g_assert (tmpdir != NULL);
  s = cache_suite ();
  ret = gst_check_run_suite (s, "sattn_cache", __FILE__);
  g_rmdir (tmpdir);
  g_free (tmpdir);
  return ret;
}
