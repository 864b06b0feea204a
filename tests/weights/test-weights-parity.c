/* Parity of libsattn with torch.nn.MultiheadAttention.
 *
 * For every fixture of a manifest (default: tests/data/fixtures.json, made
 * by tests/data/make-fixtures.py): load the weights file through the public
 * weights API, run sattn_attend on the fixture's input and compare the
 * output and the per-head attention weights with PyTorch's float64
 * results.  The shared float64 reference (tests/common), fed with the
 * same loaded weights, is compared too: it separates a loader/mapping
 * fault (reference off) from a kernel fault (only the core off).
 *
 * Bound (issue 4): max-abs <= 1e-5 * (1 + max |torch|), for the output and
 * for the weights.  Every fixture's max-abs and NMSE are printed.
 *
 * Usage: test-weights-parity [MANIFEST]
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sattn/sattn.h>
#include <sattn/sattn-weights.h>

#include "reference.h"

#include <glib.h>
#include <json-glib/json-glib.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
diff_ok (const RefDiff *d)
{
  return d->max_abs <= ref_diff_bound (d);
}

/* ---------------------------------------------------------- reference */

/* The shared float64 reference (tests/common/reference.h), fed with the
 * loaded weights as PyTorch's F.multi_head_attention_forward uses them:
 * q, k, v projections, extra key rows bias_k / bias_v, then a zero row for
 * add_zero_attn; per head softmax(q k^T / sqrt(d) + mask) v; out =
 * concat(heads) Wo^T + bo. */
static void
reference (const SattnWeights *w, size_t e, size_t h, size_t n, const float *x,
           int causal, size_t lookback, const uint8_t *key_valid, double *out,
           double *attn)
{
  RefModel m = { 0 };

  m.d_model = m.d_out = e;
  m.heads = h;
  m.d_head = m.d_value = e / h;
  m.scale = 1.0 / sqrt ((double) m.d_head);
  m.causal = causal;
  m.lookback = lookback;
  m.wq = w->wq;
  m.bq = w->bq;
  m.wk = w->wk;
  m.bk = w->bk;
  m.wv = w->wv;
  m.bv = w->bv;
  m.wo = w->wo;
  m.bo = w->bo;
  m.bias_k = w->bias_k;
  m.bias_v = w->bias_v;
  m.add_zero_attn = w->add_zero_attn;
  ref_attend (&m, x, n, key_valid, NULL, NULL, out, attn, NULL);
}

/* ---------------------------------------------------------- fixtures */

static double *
read_f64 (const char *path, size_t count)
{
  gchar *buf = NULL;
  gsize len = 0;
  GError *e = NULL;
  double *v;

  if (!g_file_get_contents (path, &buf, &len, &e)) {
    fprintf (stderr, "%s\n", e->message);
    g_error_free (e);
    return NULL;
  }
  if (len != count * 8) {
    fprintf (stderr, "%s: %zu bytes, expected %zu\n", path, (size_t) len,
             count * 8);
    g_free (buf);
    return NULL;
  }
  v = g_new (double, count);
  for (size_t i = 0; i < count; i++) {
    guint64 b;
    memcpy (&b, buf + 8 * i, 8);
    b = GUINT64_FROM_LE (b);
    memcpy (&v[i], &b, 8);
  }
  g_free (buf);
  return v;
}

static size_t
get_uint (JsonObject *o, const char *k)
{
  return json_object_has_member (o, k)
             ? (size_t) json_object_get_int_member (o, k)
             : 0;
}

static gboolean
get_bool (JsonObject *o, const char *k)
{
  return json_object_has_member (o, k) && json_object_get_boolean_member (o, k);
}

/* The streaming path on a causal fixture: a stream with window = n (and
 * the fixture's lookback), frames output, fed frame by frame, then drained.
 * Frame t's row attends to frames 0..t, all inside its window, so the rows
 * equal PyTorch's causal output row by row, whatever the hop.  Returns the
 * max-abs error accumulated in *d, or -1 on an API failure. */
static int
stream_check (const SattnModel *m, const float *x, size_t n, size_t e,
              size_t hop, const double *want, RefDiff *d)
{
  SattnStreamConfig sc = { 0 };
  SattnStatus st;
  SattnStream *s;
  size_t rows = 0, got, cap;
  float *out;

  sc.window = n;
  sc.hop = hop;
  sc.output = SATTN_OUTPUT_FRAMES;
  sc.start = SATTN_START_PAD;
  s = sattn_stream_new (m, &sc, &st);
  if (s == NULL)
    return -1;
  cap = sattn_stream_max_rows (s, 1) > n ? sattn_stream_max_rows (s, 1) : n;
  out = g_new (float, (n + cap) * e);
  for (size_t t = 0; t < n; t++) {
    if (sattn_stream_push (s, x + t * e, 1, NULL, out + rows * e,
                           n + cap - rows, NULL, &got) != SATTN_OK)
      goto fail;
    rows += got;
  }
  if (sattn_stream_drain (s, out + rows * e, n + cap - rows, NULL, &got) !=
      SATTN_OK)
    goto fail;
  rows += got;
  if (rows != n)
    goto fail;
  for (size_t i = 0; i < n * e; i++)
    ref_diff_add (d, out[i], want[i]);
  g_free (out);
  sattn_stream_free (s);
  return 0;
fail:
  g_free (out);
  sattn_stream_free (s);
  return -1;
}

/* Returns 1 when the fixture passes. */
static int
run_fixture (const char *dir, JsonObject *fx)
{
  const char *name = json_object_get_string_member (fx, "name");
  size_t e = get_uint (fx, "d_model"), h = get_uint (fx, "heads");
  size_t n = get_uint (fx, "n"), extra = get_uint (fx, "extra_keys");
  size_t nk = n + extra;
  int causal = get_bool (fx, "causal");
  size_t lookback = get_uint (fx, "lookback");
  const char *prefix = json_object_get_string_member (fx, "prefix");
  gchar *wpath =
      g_build_filename (dir, json_object_get_string_member (fx, "weights"),
                        NULL);
  gchar *dpath =
      g_build_filename (dir, json_object_get_string_member (fx, "data"), NULL);
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  SattnModel *m = NULL;
  SattnStatus st;
  char err[1024];
  double *data = NULL, *xd, *tout, *tattn, *rout = NULL, *rattn = NULL;
  float *x = NULL, *out = NULL, *attn = NULL;
  uint8_t *kv = NULL;
  int pass = 0;
  RefDiff d_out = { 0 }, d_attn = { 0 }, r_out = { 0 }, r_attn = { 0 };

  if (json_object_has_member (fx, "key_valid") &&
      !json_object_get_null_member (fx, "key_valid")) {
    JsonArray *a = json_object_get_array_member (fx, "key_valid");
    g_assert (json_array_get_length (a) == n);
    kv = g_new (uint8_t, n);
    for (size_t i = 0; i < n; i++)
      kv[i] = json_array_get_int_element (a, (guint) i) != 0;
  }

  data = read_f64 (dpath, n * e * 2 + h * n * nk);
  if (data == NULL)
    goto done;
  xd = data;
  tout = data + n * e;
  tattn = data + 2 * n * e;

  cfg.causal = causal;
  cfg.lookback = lookback;
  st = sattn_mha_weights_load (wpath, prefix, e, h,
                               get_bool (fx, "add_zero_attn"), &cfg, &w, &owner,
                               err, sizeof err);
  if (st != SATTN_OK) {
    printf ("FAIL %-32s load: %s: %s\n", name, sattn_status_string (st), err);
    goto done;
  }
  m = sattn_model_new (&cfg, &w, &st);
  if (m == NULL) {
    printf ("FAIL %-32s sattn_model_new: %s\n", name, sattn_status_string (st));
    goto done;
  }
  if (sattn_model_extra_keys (m) != extra || sattn_model_d_out (m) != e) {
    printf ("FAIL %-32s extra keys %zu (want %zu), d_out %zu (want %zu)\n",
            name, sattn_model_extra_keys (m), extra, sattn_model_d_out (m), e);
    goto done;
  }

  x = g_new (float, n *e);
  for (size_t i = 0; i < n * e; i++)
    x[i] = (float) xd[i]; /* exact: the fixture's inputs are floats */
  out = g_new (float, n *e);
  attn = g_new (float, h *n *nk);
  {
    SattnMask mask = { .key_valid = kv };
    st = sattn_attend (m, x, n, kv ? &mask : NULL, out, attn, NULL);
  }
  if (st != SATTN_OK) {
    printf ("FAIL %-32s sattn_attend: %s\n", name, sattn_status_string (st));
    goto done;
  }

  rout = g_new (double, n *e);
  rattn = g_new (double, h *n *nk);
  reference (&w, e, h, n, x, causal, lookback, kv, rout, rattn);

  for (size_t i = 0; i < n * e; i++) {
    ref_diff_add (&d_out, out[i], tout[i]);
    ref_diff_add (&r_out, rout[i], tout[i]);
  }
  for (size_t i = 0; i < h * n * nk; i++) {
    ref_diff_add (&d_attn, attn[i], tattn[i]);
    ref_diff_add (&r_attn, rattn[i], tattn[i]);
  }
  pass = diff_ok (&d_out) && diff_ok (&d_attn) && diff_ok (&r_out) &&
         diff_ok (&r_attn);
  printf ("%s %-32s %-4s out max-abs %.3e (bound %.3e, nmse %.2e)  "
          "weights max-abs %.3e (nmse %.2e)  f64-ref max-abs %.2e / %.2e\n",
          pass ? "ok  " : "FAIL", name,
          json_object_get_string_member (fx, "dtype"), d_out.max_abs,
          ref_diff_bound (&d_out), ref_diff_nmse (&d_out), d_attn.max_abs,
          ref_diff_nmse (&d_attn), r_out.max_abs, r_attn.max_abs);
  if (causal && kv == NULL) {
    static const size_t hops[] = { 1, 3 };
    for (size_t k = 0; k < G_N_ELEMENTS (hops); k++) {
      RefDiff d_stream = { 0 };
      size_t hop = hops[k] < n ? hops[k] : n;
      if (stream_check (m, x, n, e, hop, tout, &d_stream) != 0) {
        printf ("FAIL %-32s stream (hop %zu) did not give %zu rows\n", name,
                hop, n);
        pass = 0;
        continue;
      }
      printf ("%s %-32s      stream frames mode, hop %zu: max-abs %.3e "
              "(nmse %.2e)\n",
              diff_ok (&d_stream) ? "ok  " : "FAIL", name, hop,
              d_stream.max_abs, ref_diff_nmse (&d_stream));
      pass = pass && diff_ok (&d_stream);
    }
  }

done:
  sattn_model_free (m);
  sattn_mha_weights_free (owner);
  g_free (data);
  g_free (x);
  g_free (out);
  g_free (attn);
  g_free (rout);
  g_free (rattn);
  g_free (kv);
  g_free (wpath);
  g_free (dpath);
  return pass;
}

int
main (int argc, char **argv)
{
  const char *root = g_getenv ("SATTN_SOURCE_ROOT");
  gchar *manifest, *dir;
  JsonParser *parser;
  GError *e = NULL;
  JsonArray *fx;
  guint failed = 0, count;

  if (argc > 1)
    manifest = g_strdup (argv[1]);
  else
    manifest = g_build_filename (root ? root : ".", "tests", "data",
                                 "fixtures.json", NULL);
  dir = g_path_get_dirname (manifest);
  parser = json_parser_new ();
  if (!json_parser_load_from_file (parser, manifest, &e)) {
    fprintf (stderr, "cannot read %s: %s\n", manifest, e->message);
    return 1;
  }
  fx = json_object_get_array_member (json_node_get_object (
                                         json_parser_get_root (parser)),
                                     "fixtures");
  count = json_array_get_length (fx);
  if (count == 0) {
    fprintf (stderr, "%s: no fixtures\n", manifest);
    return 1;
  }
  printf ("# %u fixtures from %s; bound: max-abs <= 1e-5 * (1 + max|torch|)\n",
          count, manifest);
  for (guint i = 0; i < count; i++)
    if (!run_fixture (dir, json_array_get_object_element (fx, i)))
      failed++;
  printf ("# %u of %u fixtures within the bound\n", count - failed, count);
  g_object_unref (parser);
  g_free (manifest);
  g_free (dir);
  return failed ? 1 : 0;
}
