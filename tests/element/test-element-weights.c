/* sattn element with trained weights (weights=, weights-prefix=,
 * add-zero-attn=): parity with torch.nn.MultiheadAttention through the
 * element, and every malformed weights file through the element.
 *
 * Parity: every fixture of tests/data/fixtures.json (written by
 * tests/data/make-fixtures.py with PyTorch) goes through a harness with
 * output=window, window=hop=n, start=wait and the fixture's heads, prefix,
 * add_zero_attn, causal and lookback.  Each output window is compared with
 * PyTorch's float64 output stored in the fixture; bound:
 * max-abs <= 1e-5 * (1 + max|torch|), printed per fixture and window.
 * The causal fixtures also go through output=frames, window by window.
 *
 * Malformed files: each case fails the READY -> PAUSED state change (or,
 * for a shape that disagrees with the caps, the caps event) with an
 * element error whose message names the file and the problem; the same
 * element then works with a good file.
 *
 * Needs SATTN_SOURCE_ROOT (set by the test environment) to find
 * tests/data and tests/fuzz/corpus.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "reference.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* ------------------------------------------------------------ fixtures */

typedef struct
{
  gchar *name, *weights, *prefix, *dtype;
  guint e, heads, n, lookback, extra;
  gboolean causal, add_zero_attn;
  guint8 *key_valid;            /* n flags; NULL = every key valid */
  float *x;                     /* n × e, the fixture's input (exact) */
  double *out;                  /* n × e, PyTorch's output */
} Fixture;

static GPtrArray *fixtures;     /* Fixture*, in manifest order */
static GArray *causal_idx;      /* guint: causal fixtures without key mask */
static gchar *data_dir, *corpus_dir;

static guint
member_uint (JsonObject * o, const gchar * k)
{
  return json_object_has_member (o, k) ?
      (guint) json_object_get_int_member (o, k) : 0;
}

static gboolean
member_bool (JsonObject * o, const gchar * k)
{
  return json_object_has_member (o, k) && json_object_get_boolean_member (o, k);
}

static gdouble
le_f64 (const guint8 * p)
{
  guint64 b;
  gdouble v;

  memcpy (&b, p, 8);
  b = GUINT64_FROM_LE (b);
  memcpy (&v, &b, 8);
  return v;
}

/* Reads the manifest and every fixture's data; aborts on a broken
 * manifest (the suite cannot run without it). */
static void
load_fixtures (void)
{
  const gchar *root = g_getenv ("SATTN_SOURCE_ROOT");
  gchar *manifest;
  JsonParser *parser = json_parser_new ();
  GError *err = NULL;
  JsonArray *arr;
  guint i, k;

  if (root == NULL)
    g_error ("SATTN_SOURCE_ROOT is not set (run through meson test)");
  data_dir = g_build_filename (root, "tests", "data", NULL);
  corpus_dir = g_build_filename (root, "tests", "fuzz", "corpus", NULL);
  manifest = g_build_filename (data_dir, "fixtures.json", NULL);
  if (!json_parser_load_from_file (parser, manifest, &err))
    g_error ("cannot read %s: %s", manifest, err->message);
  arr = json_object_get_array_member (json_node_get_object
      (json_parser_get_root (parser)), "fixtures");
  g_assert (arr != NULL && json_array_get_length (arr) > 0);

  fixtures = g_ptr_array_new ();
  causal_idx = g_array_new (FALSE, FALSE, sizeof (guint));
  for (i = 0; i < json_array_get_length (arr); i++) {
    JsonObject *o = json_array_get_object_element (arr, i);
    Fixture *f = g_new0 (Fixture, 1);
    gchar *dpath, *buf = NULL;
    gsize len = 0, ne;

    f->name = g_strdup (json_object_get_string_member (o, "name"));
    f->weights = g_build_filename (data_dir,
        json_object_get_string_member (o, "weights"), NULL);
    f->prefix = g_strdup (json_object_get_string_member (o, "prefix"));
    f->dtype = g_strdup (json_object_get_string_member (o, "dtype"));
    f->e = member_uint (o, "d_model");
    f->heads = member_uint (o, "heads");
    f->n = member_uint (o, "n");
    f->lookback = member_uint (o, "lookback");
    f->extra = member_uint (o, "extra_keys");
    f->causal = member_bool (o, "causal");
    f->add_zero_attn = member_bool (o, "add_zero_attn");
    if (json_object_has_member (o, "key_valid") &&
        !json_object_get_null_member (o, "key_valid")) {
      JsonArray *kv = json_object_get_array_member (o, "key_valid");

      g_assert_cmpuint (json_array_get_length (kv), ==, f->n);
      f->key_valid = g_new (guint8, f->n);
      for (k = 0; k < f->n; k++)
        f->key_valid[k] = json_array_get_int_element (kv, k) != 0;
    }

    /* x (n, E), out (n, E), attn (H, n, n + extra): float64 LE */
    ne = (gsize) f->n * f->e;
    dpath = g_build_filename (data_dir,
        json_object_get_string_member (o, "data"), NULL);
    if (!g_file_get_contents (dpath, &buf, &len, &err))
      g_error ("%s", err->message);
    g_assert_cmpuint (len, ==, 8 * (2 * ne + (gsize) f->heads * f->n *
            (f->n + f->extra)));
    f->x = g_new (float, ne);
    f->out = g_new (double, ne);
    for (k = 0; k < ne; k++) {
      gdouble v = le_f64 ((const guint8 *) buf + 8 * k);

      f->x[k] = (float) v;
      g_assert (f->x[k] == v);  /* the inputs are float32 values */
      f->out[k] = le_f64 ((const guint8 *) buf + 8 * (ne + k));
    }
    g_free (buf);
    g_free (dpath);
    g_ptr_array_add (fixtures, f);
    if (f->causal && f->key_valid == NULL)
      g_array_append_val (causal_idx, i);
  }
  g_object_unref (parser);
  g_free (manifest);
}

static const Fixture *
fixture_by_name (const gchar * name)
{
  guint i;

  for (i = 0; i < fixtures->len; i++) {
    const Fixture *f = g_ptr_array_index (fixtures, i);

    if (strcmp (f->name, name) == 0)
      return f;
  }
  fail ("no fixture named %s in the manifest", name);
  return NULL;
}

/* ------------------------------------------------------------- helpers */

static void
diff_report (const gchar * name, const gchar * what, const RefDiff * d)
{
  gboolean ok = d->count > 0 && d->max_abs <= ref_diff_bound (d);

  g_print ("%s %-30s %-30s max-abs %.3e (bound %.3e, nmse %.2e, %"
      G_GSIZE_FORMAT " values)\n", ok ? "ok  " : "FAIL", name, what,
      d->max_abs, ref_diff_bound (d), ref_diff_nmse (d), d->count);
  fail_unless (d->count > 0, "%s %s: nothing compared", name, what);
  fail_unless (ok, "%s %s: max-abs %g exceeds %g", name, what, d->max_abs,
      ref_diff_bound (d));
}

/* Frame rate = rate / frame-size; output=window needs it divisible by
 * the hop.  1000 frames per hop's worth keeps every rate whole. */
static gint
fixture_rate (const Fixture * f, guint frame_size)
{
  return (gint) (1000 * f->n * frame_size);
}

static GstClockTime
frame_pts (guint64 frame, gint frame_rate)
{
  return gst_util_uint64_scale (frame, GST_SECOND, frame_rate);
}

/* Push frames [f0, f1) of x (e values each), stream frame index s0 at
 * f0, in buffers of at most `per` frames that never mix valid and
 * invalid frames (invalid ones are GAP-flagged buffers). */
static void
push_frames (GstHarness * h, const float *x, guint e, const guint8 * valid,
    guint f0, guint f1, guint per, guint64 s0, gint frame_rate)
{
  guint f = f0;

  while (f < f1) {
    gboolean ok = valid == NULL || valid[f];
    guint g = f + 1;
    GstBuffer *buf;

    while (g < f1 && g - f < per && (valid == NULL || valid[g] == ok))
      g++;
    buf = sattn_buffer_new (x + (gsize) f * e, (gsize) (g - f) * e *
        sizeof (float), frame_pts (s0 + (f - f0), frame_rate), 0);
    if (!ok)
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
    f = g;
  }
}

/* Pull everything queued; returns the floats (g_array_unref) and the
 * number of buffers in *n_bufs. */
static GArray *
pull_floats (GstHarness * h, guint * n_bufs)
{
  SattnOutput o;
  GArray *a;

  sattn_output_init (&o);
  sattn_output_pull_all (h, &o);
  a = g_array_ref (o.floats);
  if (n_bufs)
    *n_bufs = o.bufs->len;
  sattn_output_clear (&o);
  return a;
}

static void
assert_no_error (GstBus * bus, const gchar * name)
{
  GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);

  if (msg != NULL) {
    GError *err = NULL;

    gst_message_parse_error (msg, &err, NULL);
    fail ("%s: unexpected error: %s", name, err->message);
  }
}

static gint
caps_int (GstHarness * h, const gchar * field)
{
  GstCaps *caps = gst_pad_get_current_caps (h->sinkpad);
  gint v = -1;

  fail_unless (caps != NULL);
  fail_unless (gst_structure_get_int (gst_caps_get_structure (caps, 0),
          field, &v));
  gst_caps_unref (caps);
  return v;
}

/* A harness on a sattn configured for fixture f (weights, prefix,
 * add-zero-attn, heads, causal, lookback) plus the given properties. */
static GstHarness *
fixture_harness (const Fixture * f, const gchar * first, ...)
    G_GNUC_NULL_TERMINATED;

     static GstHarness *fixture_harness (const Fixture * f, const gchar * first,
    ...)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstHarness *h;
  va_list args;

  fail_unless (e != NULL, "the sattn element is not available");
  g_object_set (e, "weights", f->weights, "weights-prefix", f->prefix,
      "add-zero-attn", f->add_zero_attn, "heads", f->heads, "causal",
      f->causal, "lookback", f->lookback, NULL);
  va_start (args, first);
  h = sattn_harness_new_valist (e, first, args);
  va_end (args);
  return h;
}

/* ------------------------------------------------- window-mode parity */

/* Compare one output window (n × e floats) with PyTorch.  Rows of frames
 * that were pushed as GAP (masked) must be zeros: the element's policy
 * for a masked frame's own row; they are not compared with PyTorch. */
static void
check_window (const Fixture * f, const float *got, RefDiff * d)
{
  guint r, c;

  for (r = 0; r < f->n; r++)
    for (c = 0; c < f->e; c++) {
      gsize k = (gsize) r * f->e + c;

      if (f->key_valid && !f->key_valid[r])
        fail_unless (got[k] == 0.0f, "%s: row %u of a masked frame is %g, "
            "not 0", f->name, r, (double) got[k]);
      else
        ref_diff_add (d, got[k], f->out[k]);
    }
}

/* Every fixture through the element: output=window, window=hop=n,
 * start=wait.  Two windows: the fixture's frames in one buffer, then
 * again one frame per buffer (the second window must not see the first
 * one's keys: window = hop = n).
 *
 * A fixture with a key padding mask (key_valid): PyTorch's
 * key_padding_mask hides those keys from every query but still computes
 * their query rows.  The element expresses the hidden keys as GAP frames
 * (masked keys), but by design outputs zeros as a masked frame's own row,
 * so those rows are checked to be zero and only the other rows are
 * compared with PyTorch. */
GST_START_TEST (test_fixture_window)
{
  const Fixture *f = g_ptr_array_index (fixtures, __i__);
  const gint rate = fixture_rate (f, 1);
  GstHarness *h = fixture_harness (f, "output", OUT_WINDOW, "window", f->n,
      "hop", f->n, "start", START_WAIT, NULL);
  GstBus *bus = sattn_attach_bus (h);
  RefDiff d[2];
  GArray *got;
  guint w, nb;

  memset (d, 0, sizeof d);
  if (f->key_valid) {
    GString *rows = g_string_new (NULL);
    guint r;

    for (r = 0; r < f->n; r++)
      if (!f->key_valid[r])
        g_string_append_printf (rows, "%s%u", rows->len ? ", " : "", r);
    g_print ("note %-30s key padding mask sent as GAP frames; rows %s "
        "(queries at padded frames) are checked to be 0, the element's "
        "policy for masked frames, not compared with PyTorch's rows\n",
        f->name, rows->str);
    g_string_free (rows, TRUE);
  }

  sattn_set_caps (h, rate, (gint) f->e);
  for (w = 0; w < 2; w++) {
    push_frames (h, f->x, f->e, f->key_valid, 0, f->n, w == 0 ? f->n : 1,
        (guint64) w * f->n, rate);
    got = pull_floats (h, &nb);
    fail_unless_equals_int (nb, 1);
    fail_unless_equals_int (got->len, f->n * f->e);
    check_window (f, (const float *) got->data, &d[w]);
    g_array_unref (got);
  }
  fail_unless_equals_int (caps_int (h, "channels"), f->n * f->e);
  fail_unless_equals_int (caps_int (h, "rate"), 1000);
  /* window = hop: nothing is pending at EOS. */
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  fail_unless (gst_harness_try_pull (h) == NULL);
  assert_no_error (bus, f->name);

  diff_report (f->name, "window 1 (whole buffers)", &d[0]);
  diff_report (f->name, "window 2 (a frame per buffer)", &d[1]);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* d_model from channels × frame-size: the same bytes read as frames of
 * frame-size sample periods give the same windows. */
GST_START_TEST (test_fixture_frame_size)
{
  const Fixture *f = fixture_by_name ("e64_h4_n16");
  const guint fs = 8;
  const gint rate = fixture_rate (f, fs);
  GstHarness *h = fixture_harness (f, "output", OUT_WINDOW, "window", f->n,
      "hop", f->n, "start", START_WAIT, "frame-size", fs, NULL);
  GstBus *bus = sattn_attach_bus (h);
  RefDiff d = { 0, };
  GArray *got;
  GstBuffer *buf;

  fail_unless_equals_int (f->e % fs, 0);
  sattn_set_caps (h, rate, (gint) (f->e / fs));
  buf = sattn_buffer_new (f->x, (gsize) f->n * f->e * sizeof (float), 0, 0);
  fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  got = pull_floats (h, NULL);
  fail_unless_equals_int (got->len, f->n * f->e);
  check_window (f, (const float *) got->data, &d);
  g_array_unref (got);
  assert_no_error (bus, f->name);
  diff_report (f->name, "8 channels x frame-size 8", &d);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------- frames-mode parity */

/* output=frames, causal=true, window = n (the fixture's length), hop h,
 * against PyTorch's causal output, window by window.
 *
 * Why PyTorch's rows apply: in frames mode a window ending at frame F
 * (exclusive) emits the rows of its newest frames F-h .. F-1, and with
 * causal masking the row of frame f in that window attends to the keys
 * F-n .. f only.  PyTorch's causal row r attends to fixture frames
 * 0 .. r.  The two agree when every window that emits a fixture row
 * reaches back to the fixture's first frame, i.e. F - n <= start of the
 * fixture: the first window is aligned with the fixture.  The variants
 * below keep that true while exercising the stream differently:
 *
 *  0 aligned:  start=pad, the fixture from a fresh stream.  Windows end
 *              at F = h, 2h, ... and at the EOS drain (F = n); all
 *              F <= n, so F - n <= 0: keys before frame 0 are padding,
 *              masked.
 *  1 wait:     start=wait: the first window ends at F = n and emits all
 *              n rows.
 *  2 masked:   P = 2n + 1 GAP frames first (masked keys, zero rows; the
 *              window ring wraps around before the fixture starts), then
 *              the fixture.  Every window ends at F <= P + n (the last
 *              one at the EOS drain), so F - n <= P, and the frames
 *              before P it reaches are masked.
 *  3 reset:    n + 3 loud valid frames first, then the fixture with its
 *              first buffer flagged DISCONT: the element drains, resets
 *              the window and the fixture starts a fresh stream, so no
 *              key of the earlier frames may be seen.
 *
 * The fixture's frames are pushed one per buffer, so each push completes
 * at most one window: the rows out after each push are checked against
 * the hop schedule (h rows when a window completes, else none), which is
 * the window-by-window part. */
static const guint hop_opts[] = { 1, 2, 3, 0 /* = n */  };

#define N_VARIANTS 4
#define N_FRAMES_CASES(n_causal) ((n_causal) * G_N_ELEMENTS (hop_opts) * \
    N_VARIANTS)

GST_START_TEST (test_frames_causal)
{
  static const gchar *variant_names[N_VARIANTS] =
      { "aligned", "wait", "masked", "reset" };
  const guint fi = g_array_index (causal_idx, guint,
      __i__ / (G_N_ELEMENTS (hop_opts) * N_VARIANTS));
  const Fixture *f = g_ptr_array_index (fixtures, fi);
  const guint hop = hop_opts[(__i__ / N_VARIANTS) % G_N_ELEMENTS (hop_opts)]
      ? hop_opts[(__i__ / N_VARIANTS) % G_N_ELEMENTS (hop_opts)] : f->n;
  const gint variant = __i__ % N_VARIANTS;
  const gint rate = fixture_rate (f, 1);
  const guint P = variant == 2 ? 2 * f->n + 1 : variant == 3 ? f->n + 3 : 0;
  const gsize e = f->e;
  GstHarness *h;
  GstBus *bus;
  GArray *all = g_array_new (FALSE, FALSE, sizeof (float)), *got;
  float *pre = NULL;
  guint t, r, nb;
  guint64 frames_in, rows_out = 0;
  RefDiff d = { 0, };
  gchar *what;

  fail_unless (f->causal);
  h = fixture_harness (f, "output", OUT_FRAMES, "window", f->n, "hop", hop,
      "start", variant == 1 ? START_WAIT : START_PAD, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, rate, (gint) e);

  /* Frames before the fixture (variants 2, 3). */
  if (P > 0) {
    GstBuffer *buf;

    pre = g_new (float, (gsize) P * e);
    sattn_fill_signal (pre, (gsize) P * e, 77 + __i__, 5.0f);
    buf = sattn_buffer_new (pre, (gsize) P * e * sizeof (float), 0, 0);
    if (variant == 2)
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
    got = pull_floats (h, NULL);
    g_array_append_vals (all, got->data, got->len);
    rows_out += got->len / e;
    fail_unless_equals_int (got->len % e, 0);
    fail_unless_equals_int (rows_out, P / hop * hop);
    g_array_unref (got);
  }

  /* The fixture, one frame per buffer. */
  for (t = 0; t < f->n; t++) {
    GstBuffer *buf = sattn_buffer_new (f->x + t * e, e * sizeof (float),
        frame_pts (P + t, rate), 0);
    guint64 expect;

    if (variant == 3 && t == 0)
      GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
    got = pull_floats (h, &nb);
    fail_unless_equals_int (got->len % e, 0);
    rows_out += got->len / e;
    g_array_append_vals (all, got->data, got->len);
    g_array_unref (got);

    /* Rows expected by now from the hop schedule. */
    frames_in = P + t + 1;
    if (variant == 1)
      expect = t + 1 == f->n ? f->n : 0;
    else if (variant == 3)
      /* the reset drained all P frames, then a fresh stream */
      expect = P + (t + 1) / hop * hop;
    else
      expect = frames_in / hop * hop;
    fail_unless_equals_uint64 (rows_out, expect);
    /* One window per push at most: one buffer, or two when the reset
     * drain of the earlier frames comes first. */
    fail_unless (nb <= (variant == 3 && t == 0 ? 2u : 1u));
  }
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  got = pull_floats (h, &nb);
  g_array_append_vals (all, got->data, got->len);
  g_array_unref (got);
  fail_unless (nb <= 1);
  /* frames mode: exactly one row per input frame */
  fail_unless_equals_int (all->len, (P + f->n) * e);

  for (r = 0; r < P && variant == 2; r++)
    for (t = 0; t < e; t++)
      fail_unless (g_array_index (all, float, r * e + t) == 0.0f,
          "row %u of a GAP frame is not 0", r);
  for (r = 0; r < f->n; r++)
    for (t = 0; t < e; t++)
      ref_diff_add (&d, g_array_index (all, float, (P + r) * e + t),
          f->out[r * e + t]);
  assert_no_error (bus, f->name);

  what = g_strdup_printf ("frames hop %u %s", hop, variant_names[variant]);
  diff_report (f->name, what, &d);
  g_free (what);

  g_free (pre);
  g_array_unref (all);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* -------------------------------------------- safetensors file editing */

/* A safetensors file opened for editing: the JSON header as a tree and
 * the data buffer.  Parsed here with json-glib, independently of the
 * reader under test. */
typedef struct
{
  JsonParser *parser;
  JsonObject *root;
  GByteArray *data;
} StFile;

static void
st_open (StFile * s, const gchar * path)
{
  gchar *buf = NULL;
  gsize len = 0;
  guint64 hlen;
  GError *err = NULL;

  fail_unless (g_file_get_contents (path, &buf, &len, &err), "%s",
      err ? err->message : "");
  fail_unless (len >= 8);
  memcpy (&hlen, buf, 8);
  hlen = GUINT64_FROM_LE (hlen);
  fail_unless (hlen <= len - 8);
  s->parser = json_parser_new ();
  fail_unless (json_parser_load_from_data (s->parser, buf + 8, (gssize) hlen,
          &err), "%s", err ? err->message : "");
  s->root = json_node_get_object (json_parser_get_root (s->parser));
  s->data = g_byte_array_new ();
  g_byte_array_append (s->data, (const guint8 *) buf + 8 + hlen,
      (guint) (len - 8 - hlen));
  g_free (buf);
}

static void
st_close (StFile * s)
{
  g_object_unref (s->parser);
  g_byte_array_unref (s->data);
}

static gchar *
st_header (StFile * s)
{
  JsonGenerator *g = json_generator_new ();
  JsonNode *n = json_node_new (JSON_NODE_OBJECT);
  gchar *text;

  json_node_set_object (n, s->root);
  json_generator_set_root (g, n);
  text = json_generator_to_data (g, NULL);
  json_node_unref (n);
  g_object_unref (g);
  return text;
}

/* Write len_field as the header length, then header, then data. */
static void
write_raw (const gchar * path, guint64 len_field, const gchar * header,
    gsize hlen, const guint8 * data, gsize dlen)
{
  GByteArray *b = g_byte_array_new ();
  guint64 le = GUINT64_TO_LE (len_field);
  GError *err = NULL;

  g_byte_array_append (b, (const guint8 *) &le, 8);
  g_byte_array_append (b, (const guint8 *) header, (guint) hlen);
  if (dlen > 0)
    g_byte_array_append (b, data, (guint) dlen);
  fail_unless (g_file_set_contents (path, (const gchar *) b->data, b->len,
          &err), "%s", err ? err->message : "");
  g_byte_array_unref (b);
}

static void
st_write (StFile * s, const gchar * path)
{
  gchar *h = st_header (s);

  write_raw (path, strlen (h), h, strlen (h), s->data->data, s->data->len);
  g_free (h);
}

static JsonObject *
st_tensor (StFile * s, const gchar * name)
{
  fail_unless (json_object_has_member (s->root, name), "no tensor %s", name);
  return json_object_get_object_member (s->root, name);
}

static guint64
st_offset (StFile * s, const gchar * name, guint which)
{
  return (guint64) json_array_get_int_element (json_object_get_array_member
      (st_tensor (s, name), "data_offsets"), which);
}

static void
st_set_offsets (StFile * s, const gchar * name, gint64 begin, gint64 end)
{
  JsonArray *a = json_array_new ();

  json_array_add_int_element (a, begin);
  json_array_add_int_element (a, end);
  json_object_set_array_member (st_tensor (s, name), "data_offsets", a);
}

static void
st_rename (StFile * s, const gchar * from, const gchar * to)
{
  JsonNode *n = json_node_copy (json_object_get_member (s->root, from));

  json_object_remove_member (s->root, from);
  json_object_set_member (s->root, to, n);
}

/* Element i of an F32 tensor set to v. */
static void
st_set_f32 (StFile * s, const gchar * name, guint i, float v)
{
  guint64 off = st_offset (s, name, 0) + 4 * (guint64) i;
  guint32 b;

  fail_unless_equals_string (json_object_get_string_member (st_tensor (s,
              name), "dtype"), "F32");
  fail_unless (off + 4 <= st_offset (s, name, 1));
  memcpy (&b, &v, 4);
  b = GUINT32_TO_LE (b);
  memcpy (s->data->data + off, &b, 4);
}

/* ------------------------------------------------------ malformed files */

/* Each maker writes the case's file at dst (or not at all) from the good
 * file src.  dst's directory is a fresh temporary directory. */
typedef void (*MakeFile) (const gchar * src, const gchar * dst);

static void
mk_copy (const gchar * src, const gchar * dst)
{
  gchar *buf;
  gsize len;

  fail_unless (g_file_get_contents (src, &buf, &len, NULL), "%s", src);
  fail_unless (g_file_set_contents (dst, buf, (gssize) len, NULL));
  g_free (buf);
}

static void
mk_none (const gchar * src, const gchar * dst)
{
}

/* The path given to the element is the temporary directory itself. */
static void
mk_dir (const gchar * src, const gchar * dst)
{
}

static void
mk_fifo (const gchar * src, const gchar * dst)
{
  fail_unless (mkfifo (dst, 0600) == 0, "mkfifo: %s", g_strerror (errno));
}

static void
mk_empty (const gchar * src, const gchar * dst)
{
  fail_unless (g_file_set_contents (dst, "", 0, NULL));
}

/* Cut the file to keep bytes; keep < 0 counts from the end. */
static void
truncate_to (const gchar * src, const gchar * dst, gssize keep)
{
  gchar *buf;
  gsize len;

  fail_unless (g_file_get_contents (src, &buf, &len, NULL));
  if (keep < 0)
    keep += (gssize) len;
  fail_unless (keep >= 0 && (gsize) keep < len);
  fail_unless (g_file_set_contents (dst, buf, keep, NULL));
  g_free (buf);
}

static void
mk_trunc_len (const gchar * src, const gchar * dst)
{
  truncate_to (src, dst, 5);
}

static void
mk_trunc_header (const gchar * src, const gchar * dst)
{
  truncate_to (src, dst, 8 + 40);
}

static void
mk_trunc_data (const gchar * src, const gchar * dst)
{
  truncate_to (src, dst, -4);
}

static void
mk_header_past_end (const gchar * src, const gchar * dst)
{
  StFile s;
  gchar *h;

  st_open (&s, src);
  h = st_header (&s);
  write_raw (dst, strlen (h) + s.data->len + 1, h, strlen (h),
      s.data->data, s.data->len);
  g_free (h);
  st_close (&s);
}

static void
mk_header_huge (const gchar * src, const gchar * dst)
{
  StFile s;
  gchar *h;

  st_open (&s, src);
  h = st_header (&s);
  write_raw (dst, G_GUINT64_CONSTANT (1) << 62, h, strlen (h),
      s.data->data, s.data->len);
  g_free (h);
  st_close (&s);
}

static void
mk_bad_json (const gchar * src, const gchar * dst)
{
  StFile s;
  gchar *h;
  gsize n;

  st_open (&s, src);
  h = st_header (&s);
  n = strlen (h);
  h[n - 1] = ',';               /* the closing brace becomes a comma */
  write_raw (dst, n, h, n, s.data->data, s.data->len);
  g_free (h);
  st_close (&s);
}

static void
mk_not_object (const gchar * src, const gchar * dst)
{
  write_raw (dst, 8, "[1, 2]  ", 8, NULL, 0);
}

static void
mk_dup_key (const gchar * src, const gchar * dst)
{
  StFile s;
  JsonGenerator *g = json_generator_new ();
  gchar *h, *member, *text;

  /* '{"out_proj.bias":<its entry>,' + the rest of the header */
  st_open (&s, src);
  h = st_header (&s);
  json_generator_set_root (g, json_object_get_member (s.root, "out_proj.bias"));
  member = json_generator_to_data (g, NULL);
  text = g_strdup_printf ("{\"out_proj.bias\":%s,%s", member, h + 1);
  write_raw (dst, strlen (text), text, strlen (text), s.data->data,
      s.data->len);
  g_free (text);
  g_free (member);
  g_free (h);
  g_object_unref (g);
  st_close (&s);
}

static void
mk_unknown_dtype (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  json_object_set_string_member (st_tensor (&s, "in_proj_bias"), "dtype",
      "F12");
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_int_dtype (const gchar * src, const gchar * dst)
{
  StFile s;

  /* a valid safetensors dtype, 4 bytes per element, but not a float */
  st_open (&s, src);
  json_object_set_string_member (st_tensor (&s, "in_proj_weight"), "dtype",
      "I32");
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_offsets_out (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  st_set_offsets (&s, "out_proj.bias", st_offset (&s, "out_proj.bias", 0),
      st_offset (&s, "out_proj.bias", 1) + 4096);
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_offsets_reversed (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  st_set_offsets (&s, "out_proj.bias", st_offset (&s, "out_proj.bias", 1),
      st_offset (&s, "out_proj.bias", 0));
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_overlap (const gchar * src, const gchar * dst)
{
  StFile s;

  /* in_proj_bias moved 8 bytes back, into in_proj_weight's bytes (same
   * element count) */
  st_open (&s, src);
  fail_unless_equals_uint64 (st_offset (&s, "in_proj_bias", 0),
      st_offset (&s, "in_proj_weight", 1));
  st_set_offsets (&s, "in_proj_bias", st_offset (&s, "in_proj_bias", 0) - 8,
      st_offset (&s, "in_proj_bias", 1) - 8);
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_gap (const gchar * src, const gchar * dst)
{
  StFile s;
  guint8 pad[8] = { 0, };

  /* 8 bytes nobody owns at the end of the data */
  st_open (&s, src);
  g_byte_array_append (s.data, pad, sizeof pad);
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_wrong_count (const gchar * src, const gchar * dst)
{
  StFile s;
  JsonArray *a = json_array_new ();

  /* in_proj_bias of 3E = 24 values declared as 23 */
  st_open (&s, src);
  json_array_add_int_element (a, 23);
  json_object_set_array_member (st_tensor (&s, "in_proj_bias"), "shape", a);
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_missing_out (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  st_rename (&s, "out_proj.weight", "out_proj.weight_orig");
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_missing_in (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  st_rename (&s, "in_proj_weight", "proj_weight");
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_missing_bias_v (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  st_rename (&s, "bias_v", "bias_w");
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_nan (const gchar * src, const gchar * dst)
{
  StFile s;

  /* in_proj_weight is (3E, E) = (24, 8): element 1*8 + 2 is [1, 2] */
  st_open (&s, src);
  st_set_f32 (&s, "in_proj_weight", 1 * 8 + 2, NAN);
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_inf (const gchar * src, const gchar * dst)
{
  StFile s;

  st_open (&s, src);
  st_set_f32 (&s, "out_proj.bias", 3, -INFINITY);
  st_write (&s, dst);
  st_close (&s);
}

static void
mk_inf_f16 (const gchar * src, const gchar * dst)
{
  StFile s;
  guint64 off;
  guint16 b = GUINT16_TO_LE (0x7c00);   /* +Inf in binary16 */

  st_open (&s, src);
  fail_unless_equals_string (json_object_get_string_member (st_tensor (&s,
              "out_proj.weight"), "dtype"), "F16");
  off = st_offset (&s, "out_proj.weight", 0) + 2 * (16 + 5);
  memcpy (s.data->data + off, &b, 2);
  st_write (&s, dst);
  st_close (&s);
}

typedef struct
{
  const gchar *label;
  const gchar *src;             /* "data/NAME" or "corpus/NAME" */
  MakeFile make;                /* NULL: the source file itself */
  guint heads;
  const gchar *prefix;
  gboolean zero_attn;
    GQuark (*domain) (void);
  gint code;
  const gchar *expect[3];       /* substrings of the GError message */
} BadCase;

#define RES gst_resource_error_quark
#define STR gst_stream_error_quark
#define COR gst_core_error_quark

static const BadCase bad_cases[] = {
  /* the file itself */
  {"missing file", "data/e8_h1_basic.safetensors", mk_none, 1, "", FALSE,
      RES, GST_RESOURCE_ERROR_OPEN_READ, {"cannot open", "No such file"}},
  {"directory", "data/e8_h1_basic.safetensors", mk_dir, 1, "", FALSE,
      RES, GST_RESOURCE_ERROR_OPEN_READ, {"not a regular file"}},
  {"FIFO (must not block)", "data/e8_h1_basic.safetensors", mk_fifo, 1, "",
      FALSE, RES, GST_RESOURCE_ERROR_OPEN_READ, {"not a regular file"}},
  {"empty file", "data/e8_h1_basic.safetensors", mk_empty, 1, "", FALSE,
      STR, GST_STREAM_ERROR_FORMAT, {"file too short (0 bytes)"}},
  /* truncated */
  {"truncated in the length", "data/e8_h1_basic.safetensors", mk_trunc_len,
        1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"file too short (5 bytes)"}},
  {"truncated in the header", "data/e8_h1_basic.safetensors",
        mk_trunc_header, 1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"runs past the end of the file (48 bytes)", "truncated"}},
  {"truncated in the data", "data/e8_h1_basic.safetensors", mk_trunc_data,
        1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'out_proj.bias'", "run past the end of the data", "truncated"}},
  {"truncated (corpus)", "corpus/bad-truncated.safetensors", NULL, 1, "",
        FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"run past the end of the data", "truncated"}},
  /* header length */
  {"header length past the end", "data/e8_h1_basic.safetensors",
        mk_header_past_end, 1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"header length", "runs past the end of the file"}},
  {"header length past the end (corpus)",
        "corpus/bad-header-past-end.safetensors", NULL, 1, "", FALSE, STR,
      GST_STREAM_ERROR_FORMAT, {"header length 1288 runs past the end of "
              "the file (616 bytes)"}},
  {"header length 2^62", "data/e8_h1_basic.safetensors", mk_header_huge, 1,
        "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"header length 4611686018427387904 exceeds the limit"}},
  /* JSON */
  {"invalid JSON", "data/e8_h1_basic.safetensors", mk_bad_json, 1, "",
      FALSE, STR, GST_STREAM_ERROR_FORMAT, {"invalid JSON header"}},
  {"invalid JSON (corpus)", "corpus/bad-json.safetensors", NULL, 1, "",
      FALSE, STR, GST_STREAM_ERROR_FORMAT, {"invalid JSON header"}},
  {"JSON not an object", "data/e8_h1_basic.safetensors", mk_not_object, 1,
        "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"does not start with a JSON object"}},
  {"duplicate key", "data/e8_h1_basic.safetensors", mk_dup_key, 1, "",
        FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'out_proj.bias' appears twice"}},
  /* dtypes */
  {"unknown dtype", "data/e8_h1_basic.safetensors", mk_unknown_dtype, 1, "",
        FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'in_proj_bias'", "unknown dtype 'F12'"}},
  {"integer dtype for a weight", "data/e8_h1_basic.safetensors",
        mk_int_dtype, 1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'in_proj_weight' has dtype I32"}},
  /* offsets */
  {"offsets out of range", "data/e8_h1_basic.safetensors", mk_offsets_out,
        1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'out_proj.bias'", "run past the end of the data"}},
  {"offsets reversed", "data/e8_h1_basic.safetensors", mk_offsets_reversed,
        1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'out_proj.bias'", "end before they begin"}},
  {"overlapping tensors", "data/e8_h1_basic.safetensors", mk_overlap, 1, "",
        FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'in_proj_weight'", "'in_proj_bias'", "overlap"}},
  {"overlapping tensors (corpus)", "corpus/bad-overlap.safetensors", NULL,
        1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'a' [0, 8] and 'b' [4, 12] overlap"}},
  {"bytes owned by no tensor", "data/e8_h1_basic.safetensors", mk_gap, 1,
      "", FALSE, STR, GST_STREAM_ERROR_FORMAT, {"belong to no tensor"}},
  {"wrong element count", "data/e8_h1_basic.safetensors", mk_wrong_count, 1,
        "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"'in_proj_bias'", "shape [23] of F32 needs 92 bytes", "hold 96"}},
  /* missing tensors */
  {"missing out_proj.weight", "data/e8_h1_basic.safetensors",
        mk_missing_out, 1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"no tensor 'out_proj.weight'"}},
  {"missing in_proj_weight", "data/e8_h1_basic.safetensors", mk_missing_in,
        1, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"no attention weights under prefix", "in_proj_weight"}},
  {"bias_k without bias_v", "data/e24_h3_biaskv.safetensors",
        mk_missing_bias_v, 3, "", FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"no tensor 'bias_v' (bias_k is present)"}},
  {"wrong weights-prefix", "data/e16_h2_prefix.safetensors", NULL, 2,
        "encoder.layers.5.self_attn.", FALSE, STR, GST_STREAM_ERROR_FORMAT,
        {"under prefix 'encoder.layers.5.self_attn.'",
          "'encoder.layers.1.self_attn.'"}},
  /* non-finite weights */
  {"NaN in a weight", "data/e8_h1_basic.safetensors", mk_nan, 1, "", FALSE,
        STR, GST_STREAM_ERROR_FORMAT,
      {"tensor 'in_proj_weight' holds NaN at [1, 2]"}},
  {"Inf in a bias", "data/e8_h1_basic.safetensors", mk_inf, 1, "", FALSE,
      STR, GST_STREAM_ERROR_FORMAT, {"tensor 'out_proj.bias' holds Inf at "
              "element 3"}},
  {"Inf in an F16 weight", "data/e16_h2_f16.safetensors", mk_inf_f16, 2, "",
        FALSE, STR, GST_STREAM_ERROR_FORMAT,
      {"tensor 'out_proj.weight' holds Inf at [1, 5]"}},
  {"NaN (corpus)", "corpus/bad-nan.safetensors", NULL, 1, "", FALSE, STR,
      GST_STREAM_ERROR_FORMAT, {"'in_proj_weight' holds NaN at [0, 0]"}},
  /* a good file that does not fit the properties */
  {"kdim/vdim != embed_dim", "data/kdim.safetensors", NULL, 2, "", FALSE,
        COR, GST_CORE_ERROR_NEGOTIATION,
      {"'k_proj_weight' has shape [8, 10]", "expected [8, 8]"}},
  {"heads not dividing E", "data/e8_h1_basic.safetensors", mk_copy, 3, "",
        FALSE, COR, GST_CORE_ERROR_NEGOTIATION,
      {"heads = 3 but the module was exported with num_heads = 1"}},
  {"heads differing from the export", "data/e16_h2_nobias.safetensors",
        NULL, 4, "", FALSE, COR, GST_CORE_ERROR_NEGOTIATION,
      {"heads = 4 but the module was exported with num_heads = 2"}},
  {"add-zero-attn differing from the export",
        "data/e16_h2_zeroattn.safetensors", NULL, 2, "", FALSE, RES,
      GST_RESOURCE_ERROR_SETTINGS, {"add_zero_attn = 0 but the module "
              "was exported with add_zero_attn = 1"}},
};

static gchar *
bad_source_path (const BadCase * c)
{
  const gchar *base = strchr (c->src, '/') + 1;

  return g_build_filename (g_str_has_prefix (c->src, "corpus/") ?
      corpus_dir : data_dir, base, NULL);
}

static void
rm_tree (const gchar * dir)
{
  GDir *d = g_dir_open (dir, 0, NULL);
  const gchar *n;

  if (d == NULL)
    return;
  while ((n = g_dir_read_name (d)) != NULL) {
    gchar *p = g_build_filename (dir, n, NULL);

    g_unlink (p);
    g_free (p);
  }
  g_dir_close (d);
  g_rmdir (dir);
}

static void
check_error (GstBus * bus, const gchar * label, GQuark domain, gint code,
    const gchar * path, const gchar * const *expect, gsize n_expect,
    gboolean repeats_ok)
{
  GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  GError *err = NULL;
  gchar *dbg = NULL, *text;
  gsize k;

  fail_unless (msg != NULL, "%s: no error message was posted", label);
  gst_message_parse_error (msg, &err, &dbg);
  g_print ("%-40s %s\n", label, err->message);
  fail_unless (err->domain == domain && err->code == code,
      "%s: error %s:%d, expected %s:%d (%s)", label,
      g_quark_to_string (err->domain), err->code, g_quark_to_string (domain),
      code, err->message);
  fail_unless (strstr (err->message, path) != NULL,
      "%s: message does not name the file %s: %s", label, path, err->message);
  for (k = 0; k < n_expect && expect[k]; k++)
    fail_unless (strstr (err->message, expect[k]) != NULL,
        "%s: message lacks \"%s\": %s", label, expect[k], err->message);
  text = g_strdup (err->message);
  g_clear_error (&err);
  g_free (dbg);
  gst_message_unref (msg);
  /* One error, not a cascade.  A refused caps event stays pending on
   * the upstream pad and is sent again before the next event (the
   * harness's segment), so the same refusal may be posted again. */
  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR)) != NULL) {
    gst_message_parse_error (msg, &err, &dbg);
    fail_unless (repeats_ok && strcmp (err->message, text) == 0,
        "%s: more than one error; the next: %s (%s)", label, err->message, dbg);
    g_clear_error (&err);
    g_free (dbg);
    gst_message_unref (msg);
  }
  g_free (text);
}

/* After a failure, the same element set to a good file works: the
 * fixture e8_h1_basic through output=window, compared with PyTorch. */
static void
check_recovers (GstHarness * h, GstBus * bus, const gchar * label)
{
  const Fixture *f = fixture_by_name ("e8_h1_basic");
  const gint rate = fixture_rate (f, 1);
  RefDiff d = { 0, };
  GArray *got;
  gchar *what;

  g_object_set (h->element, "weights", f->weights, "weights-prefix", "",
      "add-zero-attn", FALSE, "heads", f->heads, "causal", FALSE,
      "lookback", 0, "output", OUT_WINDOW, "window", f->n, "hop", f->n,
      "start", START_WAIT, "frame-size", 1, NULL);
  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_PLAYING), GST_STATE_CHANGE_SUCCESS);
  fail_unless (gst_harness_push_event (h,
          gst_event_new_stream_start ("recovered")));
  sattn_set_caps (h, rate, (gint) f->e);
  push_frames (h, f->x, f->e, NULL, 0, f->n, f->n, 0, rate);
  got = pull_floats (h, NULL);
  fail_unless_equals_int (got->len, f->n * f->e);
  check_window (f, (const float *) got->data, &d);
  g_array_unref (got);
  assert_no_error (bus, label);
  what = g_strdup_printf ("after: %s", label);
  diff_report (f->name, what, &d);
  g_free (what);
}

/* Each malformed file fails READY -> PAUSED with an element error naming
 * the file and the problem; no crash, no hang (the FIFO), no huge
 * allocation (the 2^62 header length); then the element recovers. */
GST_START_TEST (test_bad_file_ready)
{
  const BadCase *c = &bad_cases[__i__];
  gchar *dir = g_dir_make_tmp ("sattn-weights-XXXXXX", NULL);
  gchar *src = bad_source_path (c), *path;
  GstHarness *h;
  GstBus *bus;

  fail_unless (dir != NULL);
  if (c->make == mk_dir)
    path = g_strdup (dir);
  else if (c->make == NULL)
    path = g_strdup (src);
  else {
    path = g_build_filename (dir, "weights.safetensors", NULL);
    c->make (src, path);
  }

  /* The harness plays the element (no weights yet); weights are set in
   * READY, checked on READY -> PAUSED. */
  h = sattn_harness_new ("heads", c->heads, NULL);
  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  bus = sattn_attach_bus (h);
  g_object_set (h->element, "weights", path, "weights-prefix", c->prefix,
      "add-zero-attn", c->zero_attn, NULL);
  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  check_error (bus, c->label, c->domain (), c->code, path, c->expect,
      G_N_ELEMENTS (c->expect), FALSE);

  check_recovers (h, bus, c->label);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  rm_tree (dir);
  g_free (dir);
  g_free (src);
  g_free (path);
}

GST_END_TEST;

/* ------------------------------------------------ shape vs caps (caps) */

typedef struct
{
  const gchar *fixture;
  gint channels;
  guint frame_size;
  const gchar *tensor;          /* the tensor named in the message */
  guint rows_per_e;             /* its rows: 3E (in_proj) or E */
} CapsCase;

static const CapsCase caps_cases[] = {
  {"e16_h2_nobias", 8, 1, "in_proj_weight", 3},
  {"e16_h2_nobias", 4, 2, "in_proj_weight", 3}, /* d_model = 4 × 2 */
  {"e16_h4_separate", 12, 1, "q_proj_weight", 1},
  {"e16_h2_prefix", 32, 1, "encoder.layers.1.self_attn.in_proj_weight", 3},
};

/* The file is fine on its own (READY -> PAUSED succeeds) but its
 * embedding size differs from d_model = channels × frame-size: the caps
 * are refused with an element error naming the file, the tensor, its
 * shape and the shape expected; data is then NOT_NEGOTIATED and nothing
 * comes out. */
GST_START_TEST (test_shape_vs_caps)
{
  const CapsCase *c = &caps_cases[__i__];
  const Fixture *f = fixture_by_name (c->fixture);
  const guint d = (guint) c->channels * c->frame_size;
  GstHarness *h = fixture_harness (f, "frame-size", c->frame_size, NULL);
  GstBus *bus = sattn_attach_bus (h);
  gchar *have = g_strdup_printf ("'%s' has shape [%u, %u]", c->tensor,
      c->rows_per_e * f->e, f->e);
  gchar *want = g_strdup_printf ("expected [%u, %u]", c->rows_per_e * d, d);
  gchar *label = g_strdup_printf ("%s on %d ch x frame-size %u", c->fixture,
      c->channels, c->frame_size);
  const gchar *expect[] = { have, want, "does not fit the stream" };
  float x[64] = { 0, };

  fail_unless (d != f->e);
  sattn_set_caps (h, 16000, c->channels);
  fail_if (gst_pad_has_current_caps (h->sinkpad));
  check_error (bus, label, COR (), GST_CORE_ERROR_NEGOTIATION, f->weights,
      expect, G_N_ELEMENTS (expect), TRUE);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, 0, 0)), GST_FLOW_NOT_NEGOTIATED);
  fail_unless (gst_harness_try_pull (h) == NULL);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_free (have);
  g_free (want);
  g_free (label);
}

GST_END_TEST;

/* A caps change mid-stream to a width the file does not fit: the new
 * caps are refused with the shape message, the frames held stay in the
 * window and are drained under the old caps at EOS (checked against
 * PyTorch). */
GST_START_TEST (test_shape_vs_caps_change)
{
  const Fixture *f = fixture_by_name ("e32_h4_causal");
  const gint rate = fixture_rate (f, 1);
  GstHarness *h = fixture_harness (f, "output", OUT_FRAMES, "window", f->n,
      "hop", f->n, NULL);
  GstBus *bus = sattn_attach_bus (h);
  const gchar *expect[] = { "'in_proj_weight' has shape [96, 32]",
    "expected [48, 16]"
  };
  RefDiff d = { 0, };
  GArray *got;
  gsize k;

  sattn_set_caps (h, rate, (gint) f->e);
  /* n - 1 frames: no window yet (hop = n), all held */
  push_frames (h, f->x, f->e, NULL, 0, f->n - 1, f->n, 0, rate);
  fail_unless (gst_harness_try_pull (h) == NULL);
  sattn_set_caps (h, rate, (gint) f->e / 2);
  check_error (bus, "caps change 32 -> 16 channels", COR (),
      GST_CORE_ERROR_NEGOTIATION, f->weights, expect, G_N_ELEMENTS (expect),
      TRUE);
  /* Refused caps leave the stream as it was: the frames held come out at
   * EOS, under the old caps. */
  fail_unless (gst_harness_try_pull (h) == NULL);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  /* causal: the drained rows are PyTorch's first n - 1 rows */
  got = pull_floats (h, NULL);
  fail_unless_equals_int (got->len, (f->n - 1) * f->e);
  for (k = 0; k < got->len; k++)
    ref_diff_add (&d, g_array_index (got, float, k), f->out[k]);
  g_array_unref (got);
  diff_report (f->name, "drained at a refused caps change", &d);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ------------------------------------------------------------ pipelines */

/* A real pipeline: a missing file makes the pipeline's state change fail
 * with the element's error on the pipeline bus; a good file plays to EOS
 * without error. */
GST_START_TEST (test_pipeline)
{
  const Fixture *f = fixture_by_name ("e8_h1_basic");
  gchar *dir = g_dir_make_tmp ("sattn-weights-XXXXXX", NULL);
  gchar *missing = g_build_filename (dir, "nothing.safetensors", NULL);
  const gchar *file = __i__ == 0 ? missing : f->weights;
  gchar *desc = g_strdup_printf ("audiotestsrc num-buffers=5 "
      "samplesperbuffer=160 ! audio/x-raw,format=F32LE,channels=8,"
      "rate=16000 ! sattn weights=\"%s\" window=8 hop=4 ! fakesink "
      "sync=false", file);
  const gchar *expect[] = { "cannot open" };
  GError *err = NULL;
  GstElement *pipe = gst_parse_launch (desc, &err);
  GstBus *bus;
  GstMessage *msg;

  fail_unless (pipe != NULL, "%s", err ? err->message : "");
  bus = gst_element_get_bus (pipe);
  if (__i__ == 0) {
    fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_PLAYING),
        GST_STATE_CHANGE_FAILURE);
    check_error (bus, "pipeline, missing file", RES (),
        GST_RESOURCE_ERROR_OPEN_READ, missing, expect, 1, FALSE);
  } else {
    fail_if (gst_element_set_state (pipe, GST_STATE_PLAYING) ==
        GST_STATE_CHANGE_FAILURE);
    msg = gst_bus_timed_pop_filtered (bus, 30 * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
    fail_unless (msg != NULL, "no EOS");
    fail_unless_equals_int (GST_MESSAGE_TYPE (msg), GST_MESSAGE_EOS);
    gst_message_unref (msg);
  }
  fail_unless_equals_int (gst_element_set_state (pipe, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
  gst_object_unref (pipe);
  g_rmdir (dir);
  g_free (dir);
  g_free (missing);
  g_free (desc);
}

GST_END_TEST;

static Suite *
sattn_weights_suite (void)
{
  Suite *s = suite_create ("sattn-weights");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_loop_test (tc, test_fixture_window, 0, (gint) fixtures->len);
  tcase_add_test (tc, test_fixture_frame_size);
  tcase_add_loop_test (tc, test_frames_causal, 0,
      (gint) N_FRAMES_CASES (causal_idx->len));
  tcase_add_loop_test (tc, test_bad_file_ready, 0, G_N_ELEMENTS (bad_cases));
  tcase_add_loop_test (tc, test_shape_vs_caps, 0, G_N_ELEMENTS (caps_cases));
  tcase_add_test (tc, test_shape_vs_caps_change);
  tcase_add_loop_test (tc, test_pipeline, 0, 2);
  return s;
}

int
main (int argc, char **argv)
{
  Suite *s;

  gst_check_init (&argc, &argv);
  load_fixtures ();
  g_print ("# %u fixtures (%u causal); bound: max-abs <= 1e-5 * "
      "(1 + max|torch|)\n", fixtures->len, causal_idx->len);
  s = sattn_weights_suite ();
  return gst_check_run_suite (s, "sattn_weights", __FILE__);
}
