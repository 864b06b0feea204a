/* THE loader: (file, prefix, options) -> an immutable model, or an error
 * in words (sattn_model_load in sattn-weights.h).  Every place that turns
 * a weights file into a model calls it: the element at READY and in a
 * swap, its cache, the Python package, the bench and the tools.
 *
 * A prefix holds one of: a whole model (embed.weight, encoder.layers.*,
 * ...), an nn.TransformerEncoderLayer (linear1 / linear2 around
 * self_attn), or an attention module in any layout the mappers of
 * io/layouts.c read.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn/sattn-weights.h"
#include "internal.h"
#include "io/io.h"

#include <glib.h>
#include <json-glib/json-glib.h>

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_OPTIONS_SIZE (offsetof (SattnLoadOptions, set) + sizeof (unsigned))

void
sattn_load_options_init (SattnLoadOptions *opt)
{
  if (opt == NULL)
    return;
  memset (opt, 0, sizeof (*opt));
  opt->struct_size = sizeof (*opt);
  opt->cfg.struct_size = sizeof (opt->cfg);
}

static const char *const activation_words[] = { "relu", "gelu" };

/* The tensor names directly under a prefix that mark an attention module
 * or an encoder layer (one per layout of io/layouts.c, and linear1). */
static const char *const module_marks[] = {
  "in_proj_weight",
  "q_proj_weight",
  "q_proj.weight",
  "query.weight",
  "self.query.weight",
  "to_q.weight",
  "wq.weight",
  "W_q.weight",
  "qkv.weight",
  "linear1.weight",
  "self_attn.in_proj_weight",
};

static char *
join (const char *p, const char *name)
{
  return g_strconcat (p, name, NULL);
}

static int
has (const SattnTensorFile *f, const char *p, const char *name)
{
  char *k = join (p, name);
  int r = sattn_tensor_file_dtype (f, k) != NULL;
  g_free (k);
  return r;
}

static const char *
meta (const SattnTensorFile *f, const char *p, const char *key)
{
  char *k = join (p, key);
  const char *v = sattn_tensor_file_metadata (f, k);
  g_free (k);
  return v;
}

/* The report's fields this version knows, into the caller's struct. */
static void
give_report (SattnLoadReport *out, const SattnLoadReport *r)
{
  if (out == NULL)
    return;
  size_t sz = out->struct_size == 0 || out->struct_size > sizeof (*r)
                  ? sizeof (*r)
                  : out->struct_size;
  SattnLoadReport t = *r;
  t.struct_size = sz;
  memcpy (out, &t, sz);
}

/* ------------------------------------------------------------- a layer */

static SattnStatus
heads_refused (const char *p, size_t dq, char *err, size_t err_len)
{
  char ok[256];
  sattn_divisors (ok, sizeof ok, dq, 1);
  return sattn_fail (SATTN_E_MISSING, err, err_len,
                     "the file does not record how many heads its attention "
                     "has (no metadata '%snum_heads'), and a state dict "
                     "does not say how its %zu projection rows are split: "
                     "set heads to the module's num_heads (values that "
                     "divide %zu: %s), or head-dim",
                     p, dq, dq, ok);
}

static SattnStatus
load_layer (const SattnTensorFile *f, const char *prefix,
            const SattnLoadOptions *o, SattnModel **out, SattnLoadReport *rep,
            char *err, size_t err_len)
{
  SattnConfig mc = o->cfg;
  SattnWeights w = { 0 };
  SattnMhaWeights *mw = NULL;
  SattnLayerWeights *lw = NULL;
  SattnAttnReport ar = { 0 };
  SattnStatus st;

  mc.d_out = 0;
  mc.encoder = 0;
  mc.d_ff = 0;
  const int encoder = sattn_encoder_layer_present (f, prefix);
  char *attn = sattn_attn_prefix (f, prefix);
  if (attn == NULL)
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
  st = sattn_attn_weights_from_file (f, attn, o->add_zero_attn, &mc, &w, &mw,
                                     &ar, err, err_len);
  if (st == SATTN_OK && ar.heads_from == SATTN_FROM_DEFAULT)
    st = heads_refused (attn, mc.heads * mc.d_head, err, err_len);
  if (st == SATTN_OK)
    st = sattn_options_from_file (f, prefix, o->set, &mc, err, err_len);
  if (st == SATTN_OK && encoder)
    st = sattn_encoder_weights_from_file (f, prefix, &mc, &w, &lw, err,
                                          err_len);
  if (st == SATTN_OK) {
    w.add_zero_attn = o->add_zero_attn;
    st = sattn_model_check (&mc, &w, err, err_len);
  }
  if (st == SATTN_OK && (*out = sattn_model_new (&mc, &w, &st)) == NULL)
    sattn_fail (st, err, err_len, "the model cannot be built: %s",
                sattn_status_string (st));
  if (st == SATTN_OK) {
    rep->kind = SATTN_MODEL_LAYER;
    rep->layout = ar.layout;
    rep->heads_from = ar.heads_from;
    rep->layers = 1;
    rep->encoder = encoder;
    rep->out_proj = ar.out_proj;
  }
  sattn_mha_weights_free (mw);
  sattn_layer_weights_free (lw);
  free (attn);
  return st;
}

/* ------------------------------------------------------ a whole model */

/* A float tensor p + name of rows × cols (cols 0: a vector of rows),
 * checked and copied into doubles (transposed when tr: cols × rows).
 * Absent: NULL with SATTN_OK unless required. */
static SattnStatus
take (const SattnTensorFile *f, const char *p, const char *name, size_t rows,
      size_t cols, int tr, int required, double **dst, char *err,
      size_t err_len)
{
  char *k = join (p, name);
  size_t ndim = 0;
  const size_t *shape = NULL;
  SattnStatus st = SATTN_OK;
  *dst = NULL;
  const float *x = sattn_tensor_file_get (f, k, &ndim, &shape);
  if (x == NULL) {
    if (sattn_tensor_file_dtype (f, k) != NULL)
      st = sattn_fail (SATTN_E_DTYPE, err, err_len,
                       "tensor '%s' has dtype "
                       "%s; a model needs float tensors",
                       k, sattn_tensor_file_dtype (f, k));
    else if (required)
      st = sattn_fail (SATTN_E_MISSING, err, err_len, "no tensor '%s'", k);
    goto out;
  }
  size_t n = sattn_tensor_file_numel (f, k);
  int shape_ok = cols == 0 ? n == rows
                           : ndim == 2 && shape[0] == rows && shape[1] == cols;
  if (!shape_ok) {
    if (cols == 0)
      st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "tensor '%s' has %zu "
                       "values where %zu are expected",
                       k, n, rows);
    else
      st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "tensor '%s' has shape "
                       "%s%zu x %zu where %zu x %zu is expected",
                       k, ndim == 2 ? "" : "(not 2-D) ",
                       ndim >= 1 ? shape[0] : 0, ndim >= 2 ? shape[1] : 0, rows,
                       cols);
    goto out;
  }
  size_t bad = sattn_first_nonfinite (x, n);
  if (bad < n) {
    st = sattn_fail (SATTN_E_NONFINITE, err, err_len,
                     "tensor '%s' has a "
                     "non-finite value at index %zu",
                     k, bad);
    goto out;
  }
  *dst = malloc ((n ? n : 1) * sizeof (double));
  if (*dst == NULL) {
    st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }
  if (tr && cols > 0) {
    for (size_t i = 0; i < rows; i++)
      for (size_t j = 0; j < cols; j++)
        (*dst)[j * rows + i] = (double) x[i * cols + j];
  } else {
    for (size_t i = 0; i < n; i++)
      (*dst)[i] = (double) x[i];
  }
out:
  g_free (k);
  return st;
}

/* take for a vector of rows values kept as floats (exact: the file's
 * values are floats). */
static SattnStatus
take_floats (const SattnTensorFile *f, const char *p, const char *name,
             size_t rows, float **dst, char *err, size_t err_len)
{
  double *d = NULL;
  *dst = NULL;
  SattnStatus st = take (f, p, name, rows, 0, 0, 0, &d, err, err_len);
  if (st != SATTN_OK || d == NULL)
    return st;
  *dst = malloc (rows * sizeof (float) + 1);
  if (*dst == NULL) {
    free (d);
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
  }
  for (size_t i = 0; i < rows; i++)
    (*dst)[i] = (float) d[i];
  free (d);
  return SATTN_OK;
}

/* The 2-D shape of tensor p + name, 0 when absent or not 2-D. */
static int
dims2 (const SattnTensorFile *f, const char *p, const char *name, size_t *rows,
       size_t *cols)
{
  char *k = join (p, name);
  size_t ndim = 0;
  const size_t *shape = NULL;
  const float *x = sattn_tensor_file_get (f, k, &ndim, &shape);
  g_free (k);
  if (x == NULL || ndim != 2)
    return 0;
  *rows = shape[0];
  *cols = shape[1];
  return 1;
}

/* Metadata word p + key among words[0..n) into *idx (left alone when
 * absent); the caller's value (bit set in o->set) must agree. */
static SattnStatus
meta_word (const SattnTensorFile *f, const char *p, const char *key,
           const char *const *words, size_t nw, int *idx, int caller_set,
           const char *prop, char *err, size_t err_len)
{
  const char *v = meta (f, p, key);
  if (v == NULL)
    return SATTN_OK;
  size_t k = 0;
  while (k < nw && g_ascii_strcasecmp (v, words[k]) != 0)
    k++;
  if (k == nw) {
    GString *s = g_string_new (NULL);
    for (size_t i = 0; i < nw; i++)
      g_string_append_printf (s, "%s%s", i ? ", " : "", words[i]);
    SattnStatus st = sattn_fail (SATTN_E_INVAL, err, err_len,
                                 "metadata '%s%s' is '%.64s'; sattn knows %s",
                                 p, key, v, s->str);
    g_string_free (s, TRUE);
    return st;
  }
  if (caller_set && *idx != (int) k && *idx >= 0 && (size_t) *idx < nw)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "%s=%s but the model was "
                       "exported with %s=%s (metadata '%s%s')",
                       prop, words[*idx], key, words[k], p, key);
  *idx = (int) k;
  return SATTN_OK;
}

static SattnStatus
meta_double (const SattnTensorFile *f, const char *p, const char *key,
             double *val, double dflt, double lo_excl, int caller_set,
             const char *prop, char *err, size_t err_len)
{
  const char *v = meta (f, p, key);
  if (v == NULL)
    return SATTN_OK;
  char *end = NULL;
  double d = g_ascii_strtod (v, &end);
  if (end == v || *end != '\0' || !(d > lo_excl) || isinf (d))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "metadata '%s%s' is "
                       "'%.64s'; expected a finite number > %g",
                       p, key, v, lo_excl);
  double mine = *val == 0.0 ? dflt : *val;
  if (caller_set && fabs (mine - d) > 1e-9 * fmax (fabs (mine), fabs (d)))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "%s=%g but the model was "
                       "exported with %s=%g (metadata '%s%s')",
                       prop, mine, key, d, p, key);
  *val = d;
  return SATTN_OK;
}

/* The file's metadata under prefix p (keys without it), kept by the model
 * for sattn_model_metadata: net->meta, key, value, ... NULL, by key. */
static int
cmp_key (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static SattnStatus
take_meta (const SattnTensorFile *f, const char *p, SattnNet *net, char *err,
           size_t err_len)
{
  GHashTableIter it;
  gpointer k, v;
  size_t n = 0, lp = strlen (p);
  char **keys = calloc (g_hash_table_size (f->meta) + 1, sizeof (char *));
  if (keys == NULL)
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
  g_hash_table_iter_init (&it, f->meta);
  while (g_hash_table_iter_next (&it, &k, &v))
    if (strncmp (k, p, lp) == 0 && ((const char *) k)[lp] != '\0')
      keys[n++] = (char *) k + lp;
  qsort (keys, n, sizeof (char *), cmp_key);
  net->meta = calloc (2 * n + 1, sizeof (char *));
  for (size_t i = 0; net->meta != NULL && i < n; i++) {
    char *full = g_strconcat (p, keys[i], NULL);
    net->meta[2 * i] = strdup (keys[i]);
    net->meta[2 * i + 1] = strdup (g_hash_table_lookup (f->meta, full));
    g_free (full);
    if (net->meta[2 * i] == NULL || net->meta[2 * i + 1] == NULL) {
      free (keys);
      return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    }
  }
  free (keys);
  if (net->meta == NULL)
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
  return SATTN_OK;
}

/* The labels (a JSON array of strings) into net->labels. */
static SattnStatus
take_labels (const SattnTensorFile *f, const char *p, SattnNet *net, char *err,
             size_t err_len)
{
  const char *v = meta (f, p, "labels");
  if (v == NULL)
    return SATTN_OK;
  JsonParser *jp = json_parser_new ();
  SattnStatus st = SATTN_OK;
  GError *ge = NULL;
  if (!json_parser_load_from_data (jp, v, -1, &ge)) {
    st = sattn_fail (SATTN_E_FORMAT, err, err_len,
                     "metadata '%slabels' is "
                     "not JSON: %s",
                     p, ge ? ge->message : "?");
    g_clear_error (&ge);
    goto out;
  }
  JsonNode *root = json_parser_get_root (jp);
  if (root == NULL || !JSON_NODE_HOLDS_ARRAY (root)) {
    st = sattn_fail (SATTN_E_FORMAT, err, err_len,
                     "metadata '%slabels' is "
                     "not a JSON array of strings",
                     p);
    goto out;
  }
  JsonArray *a = json_node_get_array (root);
  size_t n = json_array_get_length (a);
  if (net->classes == 0) {
    st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                     "metadata '%slabels' has "
                     "%zu labels but the model has no head (no classes)",
                     p, n);
    goto out;
  }
  if (n != net->classes) {
    st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                     "metadata '%slabels' has "
                     "%zu labels but the head has %zu classes",
                     p, n, net->classes);
    goto out;
  }
  net->labels = calloc (n, sizeof (char *));
  if (net->labels == NULL) {
    st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    JsonNode *e = json_array_get_element (a, (guint) i);
    if (e == NULL || !JSON_NODE_HOLDS_VALUE (e) ||
        json_node_get_value_type (e) != G_TYPE_STRING) {
      st = sattn_fail (SATTN_E_FORMAT, err, err_len,
                       "metadata '%slabels': "
                       "entry %zu is not a string",
                       p, i);
      goto out;
    }
    if ((net->labels[i] = strdup (json_node_get_string (e))) == NULL) {
      st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
      goto out;
    }
  }
out:
  g_object_unref (jp);
  return st;
}

static SattnStatus
load_whole (const SattnTensorFile *f, const char *p, const SattnLoadOptions *o,
            SattnModel **out, SattnLoadReport *rep, char *err, size_t err_len)
{
  SattnStatus st = SATTN_OK;
  SattnNet *net = calloc (1, sizeof (*net));
  SattnModel *m = NULL;
  SattnConfig lc = o->cfg;
  size_t F = 0, D = 0, r, c;
  char lp[64 + 512];

  if (net == NULL)
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");

  /* The prefix holds a whole model and nothing else. */
  for (size_t i = 0; i < G_N_ELEMENTS (module_marks); i++)
    if (has (f, p, module_marks[i])) {
      st = sattn_fail (SATTN_E_FORMAT, err, err_len,
                       "prefix '%s' holds a "
                       "whole model (%sembed.weight, %sencoder.layers.*) and "
                       "also '%s%s', another module's tensor; a prefix must "
                       "name one module (pass the prefix of the one to run)",
                       p, p, p, p, module_marks[i]);
      goto fail;
    }
  if (!dims2 (f, p, "embed.weight", &D, &F) || D == 0 || F == 0) {
    st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                     "tensor '%sembed.weight' "
                     "must be a 2-D float matrix (d_model x frame values)",
                     p);
    goto fail;
  }
  if (o->cfg.d_model != 0 && o->cfg.d_model != F) {
    st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                     "the frames have %zu "
                     "values but the model's embedding '%sembed.weight' "
                     "takes frames of %zu (channels x frame-size must be "
                     "%zu)",
                     o->cfg.d_model, p, F, F);
    goto fail;
  }
  net->d_frame = F;
  net->d = D;
  while (net->n_layers < 4096) {
    g_snprintf (lp, sizeof lp, "encoder.layers.%zu.linear1.weight",
                net->n_layers);
    if (!has (f, p, lp))
      break;
    net->n_layers++;
  }
  if (net->n_layers == 0) {
    st = sattn_fail (SATTN_E_MISSING, err, err_len,
                     "'%sembed.weight' names "
                     "a whole model but it has 0 encoder layers (no "
                     "'%sencoder.layers.0.linear1.weight'); a model needs at "
                     "least one",
                     p, p);
    goto fail;
  }

  /* Options: the caller's where the file is silent, checked where both
   * speak. */
  const char *v;
  if ((v = meta (f, p, "num_heads")) != NULL) {
    char *end = NULL;
    guint64 h = g_ascii_strtoull (v, &end, 10);
    if (end == v || *end != '\0' || h == 0 || h > 65536) {
      st = sattn_fail (SATTN_E_INVAL, err, err_len,
                       "metadata '%snum_heads' "
                       "is '%.64s'; expected a whole number >= 1",
                       p, v);
      goto fail;
    }
    if (lc.heads != 0 && lc.heads != h) {
      st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "heads=%zu but the model "
                       "was exported with num_heads=%" G_GUINT64_FORMAT
                       " (metadata '%snum_heads')",
                       lc.heads, h, p);
      goto fail;
    }
    lc.heads = (size_t) h;
  }
  /* head_dim and value_dim: a model whose attention projects to sizes
   * other than d_model / heads records them (every layer the same); the
   * layers' q/k/v tensors must then agree (checked by the mapper). */
  static const char *const dim_keys[] = { "head_dim", "value_dim" };
  static const char *const dim_props[] = { "head-dim", "value-dim" };
  size_t *dim_vals[] = { &lc.d_head, &lc.d_value };
  for (size_t i = 0; i < 2; i++) {
    if ((v = meta (f, p, dim_keys[i])) == NULL)
      continue;
    char *end = NULL;
    guint64 d = g_ascii_strtoull (v, &end, 10);
    if (end == v || *end != '\0' || d == 0 || d > 65536) {
      st = sattn_fail (SATTN_E_INVAL, err, err_len,
                       "metadata '%s%s' is "
                       "'%.64s'; expected a whole number >= 1",
                       p, dim_keys[i], v);
      goto fail;
    }
    if (*dim_vals[i] != 0 && *dim_vals[i] != d) {
      st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "%s=%zu but the model "
                       "was exported with %s=%" G_GUINT64_FORMAT
                       " (metadata '%s%s')",
                       dim_props[i], *dim_vals[i], dim_keys[i], d, p,
                       dim_keys[i]);
      goto fail;
    }
    *dim_vals[i] = (size_t) d;
  }
  /* scale: a model trained with another score scale than 1/sqrt(d_head)
   * (scale=1: unscaled) records it; a caller's nonzero scale must agree. */
  if ((v = meta (f, p, "scale")) != NULL) {
    char *end = NULL;
    double d = g_ascii_strtod (v, &end);
    if (end == v || *end != '\0' || !(d >= FLT_MIN) || d > FLT_MAX) {
      st = sattn_fail (SATTN_E_INVAL, err, err_len,
                       "metadata '%sscale' is "
                       "'%.64s'; expected a finite number > 0",
                       p, v);
      goto fail;
    }
    if (lc.scale != 0.0f && lc.scale != (float) d) {
      st = sattn_fail (SATTN_E_INVAL, err, err_len,
                       "scale=%g but the model "
                       "was trained with scale=%g (metadata '%sscale'); "
                       "use scale=0 to take the model's",
                       (double) lc.scale, d, p);
      goto fail;
    }
    lc.scale = (float) d;
  }
  if (lc.heads == 0 && lc.d_head == 0) {
    st = heads_refused (p, D, err, err_len);
    goto fail;
  }
  int pos = lc.positions, act = lc.activation, nf = lc.norm_first != 0;
  int causal = lc.causal != 0;
  static const char *const pos_words[] = { "none", "rope", "rope-interleaved",
                                           "alibi", "learned" };
  static const char *const bool_words[] = { "0", "1" };
  static const char *const pool_words[] = { "mean", "last" };
  int pool = SATTN_POOLING_MEAN, head_act = SATTN_ACTIVATION_RELU;
  if ((st = meta_word (f, p, "positions", pos_words, 5, &pos,
                       (o->set & SATTN_SET_POSITIONS) != 0, "positions", err,
                       err_len)) != SATTN_OK ||
      (st = meta_word (f, p, "activation", activation_words, 2, &act,
                       (o->set & SATTN_SET_ACTIVATION) != 0, "activation", err,
                       err_len)) != SATTN_OK ||
      (st = meta_word (f, p, "norm_first", bool_words, 2, &nf,
                       (o->set & SATTN_SET_NORM_FIRST) != 0, "norm-first", err,
                       err_len)) != SATTN_OK ||
      (st = meta_word (f, p, "causal", bool_words, 2, &causal,
                       (o->set & SATTN_SET_CAUSAL) != 0, "causal", err,
                       err_len)) != SATTN_OK ||
      (st = meta_word (f, p, "pooling", pool_words, 2, &pool, 0, "pooling", err,
                       err_len)) != SATTN_OK ||
      (st = meta_word (f, p, "head_activation", activation_words, 2, &head_act,
                       0, "head-activation", err, err_len)) != SATTN_OK ||
      (st = meta_double (f, p, "norm_eps", &lc.norm_eps, 1e-5, -1.0,
                         (o->set & SATTN_SET_NORM_EPS) != 0, "norm-eps", err,
                         err_len)) != SATTN_OK ||
      (st = meta_double (f, p, "rope_base", &lc.rope_base, 10000.0, 1.0,
                         (o->set & SATTN_SET_ROPE_BASE) != 0, "rope-base", err,
                         err_len)) != SATTN_OK)
    goto fail;
  const int have_pos = has (f, p, "pos_embed");
  if (meta (f, p, "positions") == NULL && have_pos)
    pos = 4;
  if (pos == 4 && !have_pos) {
    st = sattn_fail (SATTN_E_MISSING, err, err_len,
                     "the model was exported "
                     "with learned positions (metadata '%spositions') but "
                     "has no tensor '%spos_embed'",
                     p, p);
    goto fail;
  }
  if (pos != 4 && have_pos) {
    st = sattn_fail (SATTN_E_FORMAT, err, err_len,
                     "the model has learned "
                     "positions ('%spos_embed') but positions=%s",
                     p, pos_words[pos]);
    goto fail;
  }
  lc.activation = (SattnActivation) act;
  lc.norm_first = nf;
  lc.causal = causal;
  lc.positions = pos == 4 ? SATTN_POSITIONS_NONE : (SattnPositions) pos;
  net->pooling = (SattnPooling) pool;
  net->head_act = (SattnActivation) head_act;

  /* The embedding and the positions. */
  if ((st = take (f, p, "embed.weight", D, F, 1, 1, &net->embed_wt, err,
                  err_len)) != SATTN_OK ||
      (st = take (f, p, "embed.bias", D, 0, 0, 0, &net->embed_b, err,
                  err_len)) != SATTN_OK)
    goto fail;
  if (have_pos) {
    char *k = join (p, "pos_embed");
    size_t n = sattn_tensor_file_numel (f, k);
    g_free (k);
    if (n == 0 || n % D != 0) {
      st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "tensor '%spos_embed' "
                       "has %zu values, not a whole number of rows of "
                       "d_model=%zu",
                       p, n, D);
      goto fail;
    }
    net->max_window = n / D;
    if ((st = take (f, p, "pos_embed", n, 0, 0, 1, &net->pos, err, err_len)) !=
        SATTN_OK)
      goto fail;
  }

  /* The layers. */
  net->layer = calloc (net->n_layers, sizeof (SattnModel *));
  if (net->layer == NULL) {
    st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto fail;
  }
  SattnAttnReport ar0 = { 0 };
  for (size_t i = 0; i < net->n_layers; i++) {
    SattnConfig mc = lc;
    SattnWeights w = { 0 };
    SattnMhaWeights *mw = NULL;
    SattnLayerWeights *lw = NULL;
    SattnAttnReport ar = { 0 };
    mc.d_model = D;
    mc.d_out = 0;
    mc.encoder = 0;
    mc.d_ff = 0;
    g_snprintf (lp, sizeof lp, "%sencoder.layers.%zu.", p, i);
    char *ap = join (lp, "self_attn.");
    st = sattn_attn_weights_from_file (f, ap, 0, &mc, &w, &mw, &ar, err,
                                       err_len);
    if (st == SATTN_OK)
      st = sattn_encoder_weights_from_file (f, lp, &mc, &w, &lw, err, err_len);
    if (st == SATTN_OK)
      st = sattn_model_check (&mc, &w, err, err_len);
    if (st == SATTN_OK &&
        (net->layer[i] = sattn_model_new (&mc, &w, &st)) == NULL)
      sattn_fail (st, err, err_len, "layer %zu cannot be built: %s", i,
                  sattn_status_string (st));
    if (i == 0)
      ar0 = ar;
    sattn_mha_weights_free (mw);
    sattn_layer_weights_free (lw);
    g_free (ap);
    if (st != SATTN_OK)
      goto fail;
  }

  /* The final norm and the head. */
  if (has (f, p, "encoder.norm.weight") || has (f, p, "encoder.norm.bias")) {
    net->final_norm = 1;
    net->norm_eps = lc.norm_eps == 0.0 ? 1e-5 : lc.norm_eps;
    if ((st = take_floats (f, p, "encoder.norm.weight", D, &net->norm_w, err,
                           err_len)) != SATTN_OK ||
        (st = take_floats (f, p, "encoder.norm.bias", D, &net->norm_b, err,
                           err_len)) != SATTN_OK)
      goto fail;
  }
  if (dims2 (f, p, "head.weight", &r, &c)) {
    net->classes = r;
    if ((st = take (f, p, "head.weight", r, D, 1, 1, &net->head1_wt, err,
                    err_len)) != SATTN_OK ||
        (st = take (f, p, "head.bias", r, 0, 0, 0, &net->head1_b, err,
                    err_len)) != SATTN_OK)
      goto fail;
  } else if (dims2 (f, p, "head.0.weight", &r, &c)) {
    size_t r2, c2;
    net->hidden = r;
    if (!dims2 (f, p, "head.2.weight", &r2, &c2)) {
      st = sattn_fail (SATTN_E_MISSING, err, err_len,
                       "the model's MLP head "
                       "has '%shead.0.weight' but no '%shead.2.weight'",
                       p, p);
      goto fail;
    }
    net->classes = r2;
    if ((st = take (f, p, "head.0.weight", r, D, 1, 1, &net->head1_wt, err,
                    err_len)) != SATTN_OK ||
        (st = take (f, p, "head.0.bias", r, 0, 0, 0, &net->head1_b, err,
                    err_len)) != SATTN_OK ||
        (st = take (f, p, "head.2.weight", r2, r, 1, 1, &net->head2_wt, err,
                    err_len)) != SATTN_OK ||
        (st = take (f, p, "head.2.bias", r2, 0, 0, 0, &net->head2_b, err,
                    err_len)) != SATTN_OK)
      goto fail;
  } else if (has (f, p, "head.weight") || has (f, p, "head.0.weight")) {
    st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                     "the model's head "
                     "('%shead.*') must be 2-D float matrices",
                     p);
    goto fail;
  }
  if (net->classes == 0 && (net->head1_wt != NULL)) {
    st = sattn_fail (SATTN_E_SHAPE, err, err_len,
                     "the model's head has 0 "
                     "classes");
    goto fail;
  }
  if ((st = take_meta (f, p, net, err, err_len)) != SATTN_OK ||
      (st = take_labels (f, p, net, err, err_len)) != SATTN_OK)
    goto fail;

  m = calloc (1, sizeof (*m));
  if (m == NULL) {
    st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto fail;
  }
  const SattnModel *l0 = net->layer[0];
  m->cfg = l0->cfg;
  m->cfg.d_model = F;
  m->cfg.d_out = D;
  m->dq = l0->dq;
  m->dv = l0->dv;
  m->d_out = D;
  m->net = net;
  *out = m;
  rep->kind = SATTN_MODEL_WHOLE;
  rep->layout = ar0.layout;
  rep->heads_from = meta (f, p, "num_heads") != NULL && o->cfg.heads == 0
                        ? SATTN_FROM_METADATA
                        : ar0.heads_from;
  rep->layers = net->n_layers;
  rep->encoder = 1;
  rep->out_proj = ar0.out_proj;
  rep->classes = net->classes;
  return SATTN_OK;

fail:
  sattn_net_free (net);
  return st;
}

/* --------------------------------------------------------------- entry */

SattnStatus
sattn_model_load_tensors (const SattnTensorFile *f, const char *prefix,
                          const SattnLoadOptions *opt, SattnModel **out,
                          SattnLoadReport *report, char *err, size_t err_len)
{
  SattnLoadOptions o;
  SattnLoadReport rep;

  memset (&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  SattnStatus st;

  if (err != NULL && err_len > 0)
    err[0] = '\0';
  if (out != NULL)
    *out = NULL;
  if (f == NULL || out == NULL)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "invalid argument (no "
                       "file or no place for the model)");
  sattn_load_options_init (&o);
  if (opt != NULL) {
    if (opt->struct_size < MIN_OPTIONS_SIZE)
      return sattn_fail (SATTN_E_INVAL, err, err_len,
                         "SattnLoadOptions."
                         "struct_size is %zu; initialise the options with "
                         "sattn_load_options_init",
                         opt->struct_size);
    memcpy (&o, opt, opt->struct_size < sizeof o ? opt->struct_size : sizeof o);
    /* The configuration within, as sattn_model_new reads one. */
    SattnConfig c;
    if ((st = sattn_struct_in ("SattnLoadOptions.cfg", "SattnConfig", &o.cfg,
                               &c, sizeof c, SATTN_CONFIG_MIN_SIZE, sizeof c,
                               err, err_len)) != SATTN_OK)
      return st;
    o.cfg = c;
  }
  char *p = sattn_attn_prefix (NULL, prefix);
  if (p == NULL)
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
  if (has (f, p, "embed.weight"))
    st = load_whole (f, p, &o, out, &rep, err, err_len);
  else
    st = load_layer (f, prefix, &o, out, &rep, err, err_len);
  free (p);
  if (st == SATTN_OK)
    give_report (report, &rep);
  return st;
}

SattnStatus
sattn_model_load (const char *path, const char *prefix,
                  const SattnLoadOptions *opt, SattnModel **out,
                  SattnLoadReport *report, char *err, size_t err_len)
{
  SattnTensorFile *f = NULL;
  char msg[1024] = "";
  SattnStatus st;

  if (out != NULL)
    *out = NULL;
  if (path == NULL)
    return sattn_fail (SATTN_E_INVAL, err, err_len, "no file name");
  st = sattn_tensor_file_load (path, &f, msg, sizeof msg);
  if (st == SATTN_OK)
    st = sattn_model_load_tensors (f, prefix, opt, out, report, msg,
                                   sizeof msg);
  sattn_tensor_file_free (f);
  if (st != SATTN_OK) {
    /* The reader's I/O messages name the path already. */
    if (st == SATTN_E_IO || strstr (msg, path) != NULL)
      sattn_fail (st, err, err_len, "%s", msg);
    else
      sattn_fail (st, err, err_len, "'%s': %s", path, msg);
  } else if (err != NULL && err_len > 0) {
    err[0] = '\0';
  }
  return st;
}
