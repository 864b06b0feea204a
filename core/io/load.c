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
#include "model/model.h"
#include "io/io.h"

#include <glib.h>
#include <json-glib/json-glib.h>

#include <float.h>
#include <stdarg.h>
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

/* One whole model being loaded: the file, its prefix, the caller's
 * options, the one metadata parser, the model so far. */
typedef struct {
  const SattnTensorFile *f;
  const char *p;
  const SattnLoadOptions *o;
  SattnMeta mp;
  SattnNet *net;
  SattnConfig lc;       /* the layers' configuration */
  int learned;          /* learned positions (pos_embed) */
  int had_std;          /* standardisation (kept or folded) */
  SattnLayout *layouts; /* each layer's attention layout */
  SattnAttnReport ar0;  /* the first layer's attention */
  char *err;
  size_t err_len;
} Whole;

#define MAX_LAYERS 4096
/* The most classes a whole model's head may have. */
#define SATTN_MAX_CLASSES 65536

static SattnStatus whole_fail (Whole *W, SattnStatus st, const char *fmt, ...)
    G_GNUC_PRINTF (3, 4);

static SattnStatus
whole_fail (Whole *W, SattnStatus st, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  gchar *m = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  sattn_fail (st, W->err, W->err_len, "%s", m);
  g_free (m);
  return st;
}

/* A float tensor of any shape whose sizes, leading 1s left out, are
 * `dims` (e.g. (1, 1, D) for D), copied into doubles; absent: NULL with
 * SATTN_OK unless required. */
static SattnStatus
take_squeezed (Whole *W, const char *name, size_t nd, const size_t *dims,
               int required, double **dst)
{
  char *k = join (W->p, name);
  size_t ndim = 0, i, lead;
  const size_t *shape = NULL;
  *dst = NULL;
  const float *x = sattn_tensor_file_get (W->f, k, &ndim, &shape);
  g_free (k);
  if (x == NULL)
    return take (W->f, W->p, name, 1, 0, 0, required, dst, W->err, W->err_len);
  for (lead = 0; lead < ndim && ndim - lead > nd && shape[lead] == 1; lead++)
    ;
  int ok = ndim - lead == nd;
  size_t numel = 1;
  for (i = 0; ok && i < nd; i++) {
    ok = shape[lead + i] == dims[i];
    numel *= dims[i];
  }
  if (!ok) {
    char want[64] = "", got[96];
    for (i = 0; i < nd; i++)
      g_snprintf (want + strlen (want), sizeof want - strlen (want), "%s%zu",
                  i ? " x " : "", dims[i]);
    return whole_fail (W, SATTN_E_SHAPE,
                       "tensor '%s%s' has shape %s where %s is expected", W->p,
                       name, sattn_io_shape_str (got, sizeof got, shape, ndim),
                       want);
  }
  return take (W->f, W->p, name, numel, 0, 0, 1, dst, W->err, W->err_len);
}

/* ---- the input contract (docs/models.md) */

static SattnStatus
whole_contract (Whole *W)
{
  static const SattnMetaRange prob = { 0.0, 1.0, 0, 0 };
  static const SattnMetaRange nonneg = { 0.0, INFINITY, 0, 1 };
  static const SattnMetaRange pos = { 0.0, INFINITY, 1, 1 };
  SattnModelContract *k = &W->net->contract;
  const size_t F = W->net->d_frame;
  static const struct {
    const char *key;
    uint64_t hi;
    uint32_t bit;
    size_t off;
  } u[] = {
    { "sample_rate", G_MAXINT32, SATTN_CONTRACT_SAMPLE_RATE,
      offsetof (SattnModelContract, sample_rate) },
    { "channels", 65535, SATTN_CONTRACT_CHANNELS,
      offsetof (SattnModelContract, channels) },
    { "frame_size", 65535, SATTN_CONTRACT_FRAME_SIZE,
      offsetof (SattnModelContract, frame_size) },
    { "window", 1u << 24, SATTN_CONTRACT_WINDOW,
      offsetof (SattnModelContract, window) },
    { "hop", 1u << 24, SATTN_CONTRACT_HOP, offsetof (SattnModelContract, hop) },
  };
  SattnStatus st;
  int found;
  for (size_t i = 0; i < G_N_ELEMENTS (u); i++) {
    uint64_t v = 0;
    if ((st = sattn_meta_uint (&W->mp, u[i].key, 1, u[i].hi, &v, &found)) !=
        SATTN_OK)
      return st;
    if (found) {
      *(uint32_t *) ((char *) k + u[i].off) = (uint32_t) v;
      k->recorded |= u[i].bit;
    }
  }
  const int ch = (k->recorded & SATTN_CONTRACT_CHANNELS) != 0;
  const int fs = (k->recorded & SATTN_CONTRACT_FRAME_SIZE) != 0;
  if (ch && fs && (uint64_t) k->channels * k->frame_size != F)
    return whole_fail (W, SATTN_E_SHAPE,
                       "metadata '%schannels' (%u) x '%sframe_size' (%u) is "
                       "%" G_GUINT64_FORMAT " values per frame, but the "
                       "model's front end takes frames of %zu",
                       W->p, k->channels, W->p, k->frame_size,
                       (guint64) k->channels * k->frame_size, F);
  if ((ch && F % k->channels != 0) || (fs && F % k->frame_size != 0))
    return whole_fail (W, SATTN_E_SHAPE,
                       "metadata '%s%s' is %u, which does not divide the %zu "
                       "values of the model's frames",
                       W->p, ch ? "channels" : "frame_size",
                       ch ? k->channels : k->frame_size, F);
  if ((k->recorded & SATTN_CONTRACT_WINDOW) &&
      (k->recorded & SATTN_CONTRACT_HOP) && k->hop > k->window)
    return whole_fail (W, SATTN_E_INVAL,
                       "metadata '%shop' (%u) is longer than '%swindow' (%u); "
                       "a hop is 1 ... window frames",
                       W->p, k->hop, W->p, k->window);
  if ((st = sattn_meta_double (&W->mp, "min_probability", &prob,
                               &k->min_probability, &found)) != SATTN_OK)
    return st;
  k->recorded |= found ? SATTN_CONTRACT_MIN_PROBABILITY : 0;
  double r[2];
  if ((st = sattn_meta_pair (&W->mp, "contract_input_rms", &nonneg, r,
                             &found)) != SATTN_OK)
    return st;
  if (found) {
    k->input_rms_lo = r[0];
    k->input_rms_hi = r[1];
    k->recorded |= SATTN_CONTRACT_INPUT_RMS;
  }
  if ((st = sattn_meta_double (&W->mp, "contract_pooled_z", &pos,
                               &k->pooled_z_max, &found)) != SATTN_OK)
    return st;
  k->recorded |= found ? SATTN_CONTRACT_POOLED_Z : 0;
  return SATTN_OK;
}

/* The window and hop against the learned positions, and the pooled-row
 * statistics (after the layers: D is known). */
static SattnStatus
whole_contract_check (Whole *W)
{
  SattnNet *net = W->net;
  SattnModelContract *k = &net->contract;
  const size_t D = net->d;
  SattnStatus st;
  if ((k->recorded & SATTN_CONTRACT_WINDOW) && net->pos != NULL &&
      k->window > net->max_window)
    return whole_fail (W, SATTN_E_SHAPE,
                       "metadata '%swindow' is %u frames but the model's "
                       "learned positions ('%spos_embed') cover %zu",
                       W->p, k->window, W->p, net->max_window);
  if ((k->recorded & SATTN_CONTRACT_HOP) &&
      !(k->recorded & SATTN_CONTRACT_WINDOW) && net->pos != NULL &&
      k->hop > net->max_window)
    return whole_fail (W, SATTN_E_SHAPE,
                       "metadata '%shop' is %u frames, longer than any window "
                       "the model's learned positions allow (%zu)",
                       W->p, k->hop, net->max_window);
  const size_t dims[1] = { D };
  if ((st = take_squeezed (W, "contract.pooled_mean", 1, dims, 0,
                           &net->pooled_mean)) != SATTN_OK ||
      (st = take_squeezed (W, "contract.pooled_std", 1, dims, 0,
                           &net->pooled_std)) != SATTN_OK)
    return st;
  const int z = (k->recorded & SATTN_CONTRACT_POOLED_Z) != 0;
  if ((net->pooled_mean != NULL) != (net->pooled_std != NULL) ||
      (net->pooled_mean != NULL) != z)
    return whole_fail (W, SATTN_E_MISSING,
                       "the contract's pooled-row statistics need all three "
                       "of '%scontract.pooled_mean', '%scontract.pooled_std' "
                       "(tensors of d_model=%zu) and metadata "
                       "'%scontract_pooled_z'; the file has %s%s%s",
                       W->p, W->p, D, W->p, net->pooled_mean ? "the mean " : "",
                       net->pooled_std ? "the std " : "", z ? "the bound" : "");
  for (size_t t = 0; net->pooled_std != NULL && t < D; t++)
    if (!(net->pooled_std[t] > 0.0))
      return whole_fail (W, SATTN_E_INVAL,
                         "tensor '%scontract.pooled_std' has %g at %zu; every "
                         "std must be > 0",
                         W->p, net->pooled_std[t], t);
  return SATTN_OK;
}

/* ---- the front end */

/* The Conv1d stem: conv.weight (D, C, K), its bias, its metadata. */
static SattnStatus
whole_conv (Whole *W, size_t *D, size_t *F)
{
  static const char *const acts[] = { "none", "relu", "gelu" };
  SattnNet *net = W->net;
  char *k = join (W->p, "conv.weight");
  size_t ndim = 0;
  const size_t *sh = NULL;
  const float *x = sattn_tensor_file_get (W->f, k, &ndim, &sh);
  g_free (k);
  if (x == NULL || ndim != 3 || sh[0] == 0 || sh[1] == 0 || sh[2] == 0)
    return whole_fail (W, SATTN_E_SHAPE,
                       "tensor '%sconv.weight' must be a 3-D float tensor "
                       "(d_model, in_channels, kernel) of nn.Conv1d",
                       W->p);
  uint64_t S = 0, P = 0, L = 1;
  int found, act = 0;
  SattnStatus st;
  if ((st = sattn_meta_uint (&W->mp, "conv_stride", 1, 65535, &S, &found)) !=
      SATTN_OK)
    return st;
  if (!found)
    return whole_fail (W, SATTN_E_MISSING,
                       "the model's conv stem ('%sconv.weight') needs metadata "
                       "'%sconv_stride': its stride, the time steps of a "
                       "frame",
                       W->p, W->p);
  if ((st = sattn_meta_uint (&W->mp, "conv_padding", 0, 65535, &P, NULL)) !=
          SATTN_OK ||
      (st = sattn_meta_uint (&W->mp, "conv_dilation", 1, 65535, &L, NULL)) !=
          SATTN_OK ||
      (st = sattn_meta_word (&W->mp, "conv_activation", acts, 3, &act, NULL)) !=
          SATTN_OK)
    return st;
  const size_t C = sh[1], K = sh[2];
  const uint64_t span = L * (K - 1);
  if (span + 1 > 2 * P + S || 2 * P > span)
    return whole_fail (
        W, SATTN_E_SHAPE,
        "the conv stem (kernel %zu, stride %" G_GUINT64_FORMAT
        ", padding %" G_GUINT64_FORMAT ", dilation %" G_GUINT64_FORMAT
        ") does not give one row per frame for every window: sattn runs a "
        "conv stem whose stride is the time steps of a frame and whose "
        "padding P keeps the length, dilation x (kernel - 1) + 1 - stride <= "
        "2P <= dilation x (kernel - 1) (here %" G_GUINT64_FORMAT
        " ... %" G_GUINT64_FORMAT ")",
        K, S, P, L, span + 1 > S ? span + 1 - S : 0, span);
  *D = sh[0];
  *F = C * (size_t) S;
  net->conv = 1;
  net->conv_c = C;
  net->conv_s = (size_t) S;
  net->conv_k = K;
  net->conv_p = (size_t) P;
  net->conv_l = (size_t) L;
  net->conv_act = act;
  /* (D, C, K) in memory is (D, C K): transposed to (C K) x D */
  double *d = NULL;
  if ((st = take (W->f, W->p, "conv.weight", *D * C * K, 0, 0, 1, &d, W->err,
                  W->err_len)) != SATTN_OK)
    return st;
  net->conv_wt = malloc (*D * C * K * sizeof (double));
  if (net->conv_wt == NULL) {
    free (d);
    return whole_fail (W, SATTN_E_NOMEM, "out of memory");
  }
  for (size_t o = 0; o < *D; o++)
    for (size_t j = 0; j < C * K; j++)
      net->conv_wt[j * *D + o] = d[o * C * K + j];
  free (d);
  return take (W->f, W->p, "conv.bias", *D, 0, 0, 0, &net->conv_b, W->err,
               W->err_len);
}

/* The standardisation, the per-window normalisation and the CLS token. */
static SattnStatus
whole_inputs (Whole *W)
{
  static const char *const norms[] = { "none", "rms", "power" };
  static const SattnMetaRange nonneg = { 0.0, INFINITY, 0, 1 };
  SattnNet *net = W->net;
  const size_t F = net->d_frame, D = net->d;
  const size_t fd[1] = { F }, dd[1] = { D };
  SattnStatus st;
  if ((st = take_squeezed (W, "standardize.mean", 1, fd, 0, &net->std_mean)) !=
          SATTN_OK ||
      (st = take_squeezed (W, "standardize.std", 1, fd, 0, &net->std_std)) !=
          SATTN_OK)
    return st;
  if ((net->std_mean != NULL) != (net->std_std != NULL))
    return whole_fail (W, SATTN_E_MISSING,
                       "the standardisation needs both '%sstandardize.mean' "
                       "and '%sstandardize.std' (%zu values each)",
                       W->p, W->p, F);
  for (size_t f = 0; net->std_std != NULL && f < F; f++)
    if (!(net->std_std[f] > 0.0))
      return whole_fail (W, SATTN_E_INVAL,
                         "tensor '%sstandardize.std' has %g at %zu; every std "
                         "must be > 0",
                         W->p, net->std_std[f], f);
  W->had_std = net->std_mean != NULL;
  net->input_norm = 0;
  net->in_eps = 1e-8;
  if ((st = sattn_meta_word (&W->mp, "input_norm", norms, 3, &net->input_norm,
                             NULL)) != SATTN_OK ||
      (st = sattn_meta_double (&W->mp, "input_norm_eps", &nonneg, &net->in_eps,
                               NULL)) != SATTN_OK)
    return st;
  net->in_gain = 1.0;
  if (net->input_norm == 2) {
    if (!(net->contract.recorded & SATTN_CONTRACT_CHANNELS))
      return whole_fail (W, SATTN_E_MISSING,
                         "input_norm=power is the mean power per time step "
                         "summed over channels: it needs metadata "
                         "'%schannels'",
                         W->p);
    net->in_gain = (double) net->contract.channels;
  }
  if ((st = take_squeezed (W, "cls_token", 1, dd, 0, &net->cls)) != SATTN_OK)
    return st;
  net->lead = net->cls != NULL;
  net->per_window = net->conv || net->input_norm != 0 || net->cls != NULL;
  if (!net->per_window && net->std_mean != NULL) {
    /* Folded into the embedding: W' = W / std, b' = b - W (mean / std). */
    double *b = calloc (D, sizeof (double));
    if (b == NULL)
      return whole_fail (W, SATTN_E_NOMEM, "out of memory");
    for (size_t t = 0; t < D; t++) {
      double acc = net->embed_b ? net->embed_b[t] : 0.0;
      for (size_t f = 0; f < F; f++) {
        double wv = net->embed_wt[f * D + t] / net->std_std[f];
        net->embed_wt[f * D + t] = wv;
        acc -= wv * net->std_mean[f];
      }
      b[t] = acc;
    }
    free (net->embed_b);
    net->embed_b = b;
    free (net->std_mean);
    free (net->std_std);
    net->std_mean = net->std_std = NULL;
  }
  return SATTN_OK;
}

static SattnStatus
whole_front (Whole *W)
{
  SattnNet *net = W->net;
  const int lin = has (W->f, W->p, "embed.weight");
  const int conv = has (W->f, W->p, "conv.weight");
  size_t D = 0, F = 0;
  SattnStatus st;
  if (lin && conv)
    return whole_fail (W, SATTN_E_FORMAT,
                       "the model has two front ends, '%sembed.weight' (a "
                       "Linear per frame) and '%sconv.weight' (a conv stem); "
                       "a whole model has one",
                       W->p, W->p);
  if (conv) {
    if ((st = whole_conv (W, &D, &F)) != SATTN_OK)
      return st;
  } else if (!dims2 (W->f, W->p, "embed.weight", &D, &F) || D == 0 || F == 0) {
    return whole_fail (W, SATTN_E_SHAPE,
                       "tensor '%sembed.weight' must be a 2-D float matrix "
                       "(d_model x frame values)",
                       W->p);
  }
  if (W->o->cfg.d_model != 0 && W->o->cfg.d_model != F)
    return whole_fail (W, SATTN_E_SHAPE,
                       "the frames have %zu values but the model's front end "
                       "'%s%s' takes frames of %zu (channels x frame-size "
                       "must be %zu)",
                       W->o->cfg.d_model, W->p,
                       conv ? "conv.weight" : "embed.weight", F, F);
  net->d_frame = F;
  net->d = D;
  if (!conv && ((st = take (W->f, W->p, "embed.weight", D, F, 1, 1,
                            &net->embed_wt, W->err, W->err_len)) != SATTN_OK ||
                (st = take (W->f, W->p, "embed.bias", D, 0, 0, 0, &net->embed_b,
                            W->err, W->err_len)) != SATTN_OK))
    return st;
  if ((st = whole_contract (W)) != SATTN_OK)
    return st;
  return whole_inputs (W);
}

/* ---- the layers */

/* The index i of a name "encoder.layers.<i>.<rest>" (canonical decimal),
 * or -1. */
static gint64
layer_index (const char *rest)
{
  static const char pre[] = "encoder.layers.";
  if (strncmp (rest, pre, sizeof pre - 1) != 0)
    return -1;
  const char *d = rest + sizeof pre - 1, *e = d;
  while (g_ascii_isdigit (*e))
    e++;
  if (e == d || *e != '.' || e - d > 9 || (e - d > 1 && *d == '0'))
    return -1;
  return g_ascii_strtoll (d, NULL, 10);
}

/* The layer count from the file's names: layers 0 ... N-1, no gap, at
 * most MAX_LAYERS. */
static SattnStatus
whole_count_layers (Whole *W)
{
  const size_t lp = strlen (W->p);
  gint64 top = -1;
  for (size_t i = 0; i < W->f->n; i++)
    if (strncmp (W->f->t[i].name, W->p, lp) == 0) {
      gint64 k = layer_index (W->f->t[i].name + lp);
      top = k > top ? k : top;
    }
  if (top < 0)
    return whole_fail (W, SATTN_E_MISSING,
                       "'%s%s' names a whole model but it has 0 encoder "
                       "layers (no '%sencoder.layers.0.*'); a model needs at "
                       "least one",
                       W->p, W->net->conv ? "conv.weight" : "embed.weight",
                       W->p);
  if (top >= MAX_LAYERS)
    return whole_fail (W, SATTN_E_FORMAT,
                       "the model has %" G_GINT64_FORMAT " encoder layers "
                       "('%sencoder.layers.%" G_GINT64_FORMAT ".*' is the "
                       "last); sattn runs at most %d",
                       top + 1, W->p, top, MAX_LAYERS);
  uint8_t *seen = calloc ((size_t) top + 1, 1);
  if (seen == NULL)
    return whole_fail (W, SATTN_E_NOMEM, "out of memory");
  for (size_t i = 0; i < W->f->n; i++)
    if (strncmp (W->f->t[i].name, W->p, lp) == 0) {
      gint64 k = layer_index (W->f->t[i].name + lp);
      if (k >= 0)
        seen[k] = 1;
    }
  gint64 gap = -1;
  for (gint64 k = 0; k <= top && gap < 0; k++)
    if (!seen[k])
      gap = k;
  free (seen);
  if (gap >= 0)
    return whole_fail (W, SATTN_E_FORMAT,
                       "the model's encoder layers are numbered up to "
                       "%" G_GINT64_FORMAT
                       " but there is no layer %" G_GINT64_FORMAT " (no "
                       "'%sencoder.layers.%" G_GINT64_FORMAT ".*'): layers "
                       "must be numbered 0 ... N-1 without gaps",
                       top, gap, W->p, gap);
  W->net->n_layers = (size_t) top + 1;
  return SATTN_OK;
}

static SattnStatus
whole_layers (Whole *W)
{
  SattnNet *net = W->net;
  char lp[64 + 512];
  SattnStatus st = SATTN_OK;
  net->layer = calloc (net->n_layers, sizeof (SattnModel *));
  W->layouts = calloc (net->n_layers, sizeof (SattnLayout));
  if (net->layer == NULL || W->layouts == NULL)
    return whole_fail (W, SATTN_E_NOMEM, "out of memory");
  for (size_t i = 0; i < net->n_layers && st == SATTN_OK; i++) {
    SattnConfig mc = W->lc;
    SattnWeights w = { 0 };
    SattnMhaWeights *mw = NULL;
    SattnLayerWeights *lw = NULL;
    SattnAttnReport ar = { 0 };
    mc.d_model = net->d;
    mc.d_out = 0;
    mc.encoder = 0;
    mc.d_ff = 0;
    g_snprintf (lp, sizeof lp, "%sencoder.layers.%zu.", W->p, i);
    char *ap = join (lp, "self_attn.");
    st = sattn_attn_weights_from_file (W->f, ap, 0, &mc, &w, &mw, &ar, W->err,
                                       W->err_len);
    if (st == SATTN_OK)
      st = sattn_encoder_weights_from_file (W->f, lp, &mc, &w, &lw, W->err,
                                            W->err_len);
    if (st == SATTN_OK)
      st = sattn_model_check (&mc, &w, W->err, W->err_len);
    if (st == SATTN_OK &&
        (net->layer[i] = sattn_model_new (&mc, &w, &st)) == NULL)
      sattn_fail (st, W->err, W->err_len, "layer %zu cannot be built: %s", i,
                  sattn_status_string (st));
    W->layouts[i] = ar.layout;
    if (i == 0)
      W->ar0 = ar;
    sattn_mha_weights_free (mw);
    sattn_layer_weights_free (lw);
    g_free (ap);
  }
  return st;
}

/* ---- the layers' options (heads, sizes, scale, positions, ...) */

/* A caller's choice against the file's value (bit in o->set). */
static SattnStatus
agree (Whole *W, unsigned bit, const char *prop, const char *key,
       const char *const *words, int caller, int file)
{
  if (!(W->o->set & bit) || caller == file || caller < 0)
    return SATTN_OK;
  return whole_fail (W, SATTN_E_INVAL,
                     "%s=%s but the model was exported with %s=%s (metadata "
                     "'%s%s')",
                     prop, words[caller], key, words[file], W->p, key);
}

static SattnStatus
whole_sizes (Whole *W)
{
  static const char *const keys[] = { "num_heads", "head_dim", "value_dim" };
  static const char *const props[] = { "heads", "head-dim", "value-dim" };
  static const SattnMetaRange scale = { FLT_MIN, FLT_MAX, 0, 0 };
  size_t *vals[] = { &W->lc.heads, &W->lc.d_head, &W->lc.d_value };
  SattnStatus st;
  int found;
  for (size_t i = 0; i < 3; i++) {
    uint64_t v = 0;
    if ((st = sattn_meta_uint (&W->mp, keys[i], 1, 65536, &v, &found)) !=
        SATTN_OK)
      return st;
    if (!found)
      continue;
    if (*vals[i] != 0 && *vals[i] != v)
      return whole_fail (W, SATTN_E_SHAPE,
                         "%s=%zu but the model was exported with "
                         "%s=%" G_GUINT64_FORMAT " (metadata '%s%s')",
                         props[i], *vals[i], keys[i], (guint64) v, W->p,
                         keys[i]);
    *vals[i] = (size_t) v;
  }
  /* scale: a model trained with another score scale than 1/sqrt(d_head)
   * (scale=1: unscaled) records it; a caller's nonzero scale must
   * agree. */
  double d = 0.0;
  if ((st = sattn_meta_double (&W->mp, "scale", &scale, &d, &found)) !=
      SATTN_OK)
    return st;
  if (found) {
    if (W->lc.scale != 0.0f && W->lc.scale != (float) d)
      return whole_fail (W, SATTN_E_INVAL,
                         "scale=%g but the model was trained with scale=%g "
                         "(metadata '%sscale'); use scale=0 to take the "
                         "model's",
                         (double) W->lc.scale, d, W->p);
    W->lc.scale = (float) d;
  }
  if (W->lc.heads == 0 && W->lc.d_head == 0)
    return heads_refused (W->p, W->net->d, W->err, W->err_len);
  return SATTN_OK;
}

static SattnStatus
whole_options (Whole *W)
{
  static const char *const pos_words[] = { "none", "rope", "rope-interleaved",
                                           "alibi", "learned" };
  static const char *const bools[] = { "false", "true" };
  static const char *const pool_words[] = { "mean", "last", "max", "cls",
                                            "attention" };
  static const SattnMetaRange eps = { 0.0, INFINITY, 0, 1 };
  static const SattnMetaRange base = { 1.0, INFINITY, 1, 1 };
  SattnConfig *lc = &W->lc;
  SattnNet *net = W->net;
  SattnStatus st;
  int found, v;
  const int set_pos = (W->o->set & SATTN_SET_POSITIONS) != 0;

  if ((st = whole_sizes (W)) != SATTN_OK)
    return st;
  v = (int) lc->positions;
  if ((st = sattn_meta_word (&W->mp, "positions", pos_words, 5, &v, &found)) !=
      SATTN_OK)
    return st;
  const int have_pos = has (W->f, W->p, "pos_embed");
  if (!found && have_pos)
    v = 4;
  if (found && set_pos && (int) lc->positions != v)
    return agree (W, SATTN_SET_POSITIONS, "positions", "positions", pos_words,
                  (int) lc->positions, v);
  if (v == 4 && !have_pos)
    return whole_fail (W, SATTN_E_MISSING,
                       "the model was exported with learned positions "
                       "(metadata '%spositions') but has no tensor "
                       "'%spos_embed'",
                       W->p, W->p);
  if (v != 4 && have_pos)
    return whole_fail (W, SATTN_E_FORMAT,
                       "the model has learned positions ('%spos_embed') but "
                       "positions=%s",
                       W->p, pos_words[v]);
  W->learned = v == 4;
  lc->positions = v == 4 ? SATTN_POSITIONS_NONE : (SattnPositions) v;
  v = (int) lc->activation;
  if ((st = sattn_meta_word (&W->mp, "activation", activation_words, 2, &v,
                             &found)) != SATTN_OK ||
      (found &&
       (st = agree (W, SATTN_SET_ACTIVATION, "activation", "activation",
                    activation_words, (int) lc->activation, v)) != SATTN_OK))
    return st;
  lc->activation = (SattnActivation) v;
  v = lc->norm_first != 0;
  if ((st = sattn_meta_bool (&W->mp, "norm_first", &v, &found)) != SATTN_OK ||
      (found &&
       (st = agree (W, SATTN_SET_NORM_FIRST, "norm-first", "norm_first", bools,
                    lc->norm_first != 0, v)) != SATTN_OK))
    return st;
  lc->norm_first = v;
  v = lc->causal != 0;
  if ((st = sattn_meta_bool (&W->mp, "causal", &v, &found)) != SATTN_OK ||
      (found && (st = agree (W, SATTN_SET_CAUSAL, "causal", "causal", bools,
                             lc->causal != 0, v)) != SATTN_OK))
    return st;
  lc->causal = v;
  double d = lc->norm_eps;
  if ((st = sattn_meta_double (&W->mp, "norm_eps", &eps, &d, &found)) !=
      SATTN_OK)
    return st;
  if (found) {
    double mine = lc->norm_eps == 0.0 ? 1e-5 : lc->norm_eps;
    if ((W->o->set & SATTN_SET_NORM_EPS) &&
        fabs (mine - d) > 1e-9 * fmax (fabs (mine), fabs (d)))
      return whole_fail (W, SATTN_E_INVAL,
                         "norm-eps=%g but the model was exported with "
                         "norm_eps=%g (metadata '%snorm_eps')",
                         mine, d, W->p);
    lc->norm_eps = d;
  }
  d = lc->rope_base;
  if ((st = sattn_meta_double (&W->mp, "rope_base", &base, &d, &found)) !=
      SATTN_OK)
    return st;
  if (found) {
    double mine = lc->rope_base == 0.0 ? 10000.0 : lc->rope_base;
    if ((W->o->set & SATTN_SET_ROPE_BASE) && mine != d)
      return whole_fail (W, SATTN_E_INVAL,
                         "rope-base=%g but the model was exported with "
                         "rope_base=%g (metadata '%srope_base')",
                         mine, d, W->p);
    lc->rope_base = d;
  }
  v = SATTN_POOLING_MEAN;
  if ((st = sattn_meta_word (&W->mp, "pooling", pool_words, 5, &v, NULL)) !=
      SATTN_OK)
    return st;
  net->pooling = (SattnPooling) v;
  if (net->cls == NULL && net->pooling == SATTN_POOLING_CLS)
    return whole_fail (W, SATTN_E_MISSING,
                       "pooling=cls needs a CLS token ('%scls_token'), and "
                       "the model has none",
                       W->p);
  v = SATTN_ACTIVATION_RELU;
  if ((st = sattn_meta_word (&W->mp, "head_activation", activation_words, 2, &v,
                             NULL)) != SATTN_OK)
    return st;
  net->head_act = (SattnActivation) v;
  return SATTN_OK;
}

static SattnStatus
whole_positions (Whole *W)
{
  SattnNet *net = W->net;
  const size_t D = net->d;
  if (!W->learned)
    return SATTN_OK;
  char *k = join (W->p, "pos_embed");
  size_t n = sattn_tensor_file_numel (W->f, k);
  g_free (k);
  if (n == 0 || n % D != 0 || n / D <= net->lead)
    return whole_fail (W, SATTN_E_SHAPE,
                       "tensor '%spos_embed' has %zu values, not a whole "
                       "number of rows of d_model=%zu%s",
                       W->p, n, D,
                       net->lead ? " past the CLS token's row" : "");
  const size_t dims[2] = { n / D, D };
  net->max_window = n / D - net->lead;
  return take_squeezed (W, "pos_embed", 2, dims, 1, &net->pos);
}

/* ---- after the layers: the final norm, the pooling, the head */

static SattnStatus
whole_tail (Whole *W)
{
  SattnNet *net = W->net;
  const size_t D = net->d;
  size_t r, c;
  SattnStatus st;
  if (has (W->f, W->p, "encoder.norm.weight") ||
      has (W->f, W->p, "encoder.norm.bias")) {
    net->final_norm = 1;
    net->norm_eps = W->lc.norm_eps == 0.0 ? 1e-5 : W->lc.norm_eps;
    if ((st = take_floats (W->f, W->p, "encoder.norm.weight", D, &net->norm_w,
                           W->err, W->err_len)) != SATTN_OK ||
        (st = take_floats (W->f, W->p, "encoder.norm.bias", D, &net->norm_b,
                           W->err, W->err_len)) != SATTN_OK)
      return st;
  }
  if (net->pooling == SATTN_POOLING_ATTENTION) {
    const size_t dd[1] = { D }, one[1] = { 1 };
    double *b = NULL;
    if ((st = take_squeezed (W, "pool.weight", 1, dd, 1, &net->pool_w)) !=
            SATTN_OK ||
        (st = take_squeezed (W, "pool.bias", 1, one, 0, &b)) != SATTN_OK)
      return st;
    net->pool_b = b != NULL ? b[0] : 0.0;
    free (b);
  }
  /* The class count first, before the head's rows are copied. */
  size_t rows = 0;
  if ((dims2 (W->f, W->p, "head.weight", &rows, &c) ||
       dims2 (W->f, W->p, "head.2.weight", &rows, &c)) &&
      rows > SATTN_MAX_CLASSES)
    return whole_fail (W, SATTN_E_SHAPE,
                       "the model's head has %zu classes; sattn runs heads of "
                       "at most %d (a classifier's decision, not a "
                       "vocabulary)",
                       rows, SATTN_MAX_CLASSES);
  if (dims2 (W->f, W->p, "head.weight", &r, &c)) {
    net->classes = r;
    if ((st = take (W->f, W->p, "head.weight", r, D, 1, 1, &net->head1_wt,
                    W->err, W->err_len)) != SATTN_OK ||
        (st = take (W->f, W->p, "head.bias", r, 0, 0, 0, &net->head1_b, W->err,
                    W->err_len)) != SATTN_OK)
      return st;
  } else if (dims2 (W->f, W->p, "head.0.weight", &r, &c)) {
    size_t r2, c2;
    net->hidden = r;
    if (!dims2 (W->f, W->p, "head.2.weight", &r2, &c2))
      return whole_fail (W, SATTN_E_MISSING,
                         "the model's MLP head has '%shead.0.weight' but no "
                         "'%shead.2.weight'",
                         W->p, W->p);
    net->classes = r2;
    if ((st = take (W->f, W->p, "head.0.weight", r, D, 1, 1, &net->head1_wt,
                    W->err, W->err_len)) != SATTN_OK ||
        (st = take (W->f, W->p, "head.0.bias", r, 0, 0, 0, &net->head1_b,
                    W->err, W->err_len)) != SATTN_OK ||
        (st = take (W->f, W->p, "head.2.weight", r2, r, 1, 1, &net->head2_wt,
                    W->err, W->err_len)) != SATTN_OK ||
        (st = take (W->f, W->p, "head.2.bias", r2, 0, 0, 0, &net->head2_b,
                    W->err, W->err_len)) != SATTN_OK)
      return st;
  } else if (has (W->f, W->p, "head.weight") ||
             has (W->f, W->p, "head.0.weight")) {
    return whole_fail (W, SATTN_E_SHAPE,
                       "the model's head ('%shead.*') must be 2-D float "
                       "matrices",
                       W->p);
  }
  if (net->classes == 0 && net->head1_wt != NULL)
    return whole_fail (W, SATTN_E_SHAPE, "the model's head has 0 classes");

  if (net->classes == 0 && net->pooling != SATTN_POOLING_MEAN &&
      net->pooling != SATTN_POOLING_LAST)
    return whole_fail (W, SATTN_E_FORMAT,
                       "the model pools its rows by %s but has no head "
                       "('%shead.*'): the outputs of a model without a head "
                       "are its rows (output=window) and their mean or last "
                       "(output=mean, last), so its own pooling would never "
                       "run; export it with its head",
                       net->pooling == SATTN_POOLING_MAX   ? "max"
                       : net->pooling == SATTN_POOLING_CLS ? "its CLS row"
                                                           : "attention",
                       W->p);
  return SATTN_OK;
}

/* ---- every tensor used */

/* Whether the model just built reads the tensor called p + rest. */
static int
whole_reads (const Whole *W, const char *rest)
{
  static const char *const layer_names[] = { "linear1.weight", "linear1.bias",
                                             "linear2.weight", "linear2.bias",
                                             "norm1.weight",   "norm1.bias",
                                             "norm2.weight",   "norm2.bias" };
  const SattnNet *net = W->net;
  const struct {
    const char *name;
    int reads;
  } parts[] = {
    { "standardize.mean", W->had_std },
    { "standardize.std", W->had_std },
    { "embed.weight", !net->conv },
    { "embed.bias", !net->conv },
    { "conv.weight", net->conv },
    { "conv.bias", net->conv },
    { "cls_token", net->cls != NULL },
    { "pos_embed", net->pos != NULL },
    { "encoder.norm.weight", net->final_norm },
    { "encoder.norm.bias", net->final_norm },
    { "pool.weight", net->pooling == SATTN_POOLING_ATTENTION },
    { "pool.bias", net->pooling == SATTN_POOLING_ATTENTION },
    { "head.weight", net->classes > 0 && net->hidden == 0 },
    { "head.bias", net->classes > 0 && net->hidden == 0 },
    { "head.0.weight", net->hidden > 0 },
    { "head.0.bias", net->hidden > 0 },
    { "head.2.weight", net->hidden > 0 },
    { "head.2.bias", net->hidden > 0 },
    { "contract.pooled_mean", net->pooled_mean != NULL },
    { "contract.pooled_std", net->pooled_mean != NULL },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (parts); i++)
    if (strcmp (rest, parts[i].name) == 0)
      return parts[i].reads;
  gint64 k = layer_index (rest);
  if (k < 0 || (size_t) k >= net->n_layers)
    return 0;
  const char *in = strchr (rest + strlen ("encoder.layers."), '.') + 1;
  for (size_t i = 0; i < G_N_ELEMENTS (layer_names); i++)
    if (strcmp (in, layer_names[i]) == 0)
      return 1;
  return strncmp (in, "self_attn.", 10) == 0 &&
         sattn_io_layout_reads (W->layouts[k], in + 10);
}

static SattnStatus
whole_strict (Whole *W)
{
  const size_t lp = strlen (W->p);
  GString *s = g_string_new (NULL);
  size_t unused = 0;
  ShowBuf sb;
  for (size_t i = 0; i < W->f->n; i++) {
    const char *name = W->f->t[i].name;
    if (strncmp (name, W->p, lp) != 0 || whole_reads (W, name + lp))
      continue;
    if (unused < 8)
      g_string_append_printf (s, "%s'%s'", unused ? ", " : "",
                              sattn_io_show (&sb, name));
    unused++;
  }
  SattnStatus st = SATTN_OK;
  if (unused > 0)
    st = whole_fail (W, SATTN_E_FORMAT,
                     "the file holds %zu tensor%s under prefix '%s' that this "
                     "model would not use: %s%s; sattn runs every tensor of a "
                     "whole model or refuses it (a model holds a front end, "
                     "encoder.layers.0 ... N-1, and optional standardize, "
                     "cls_token, pos_embed, encoder.norm, pool, head and "
                     "contract tensors: docs/models.md)",
                     unused, unused == 1 ? "" : "s", W->p, s->str,
                     unused > 8 ? " ..." : "");
  g_string_free (s, TRUE);
  return st;
}

static SattnStatus
load_whole (const SattnTensorFile *f, const char *p, const SattnLoadOptions *o,
            SattnModel **out, SattnLoadReport *rep, char *err, size_t err_len)
{
  Whole W = {
    .f = f, .p = p, .o = o, .lc = o->cfg, .err = err, .err_len = err_len
  };
  SattnStatus st = SATTN_OK;
  W.mp = (SattnMeta){ f, p, err, err_len };
  if ((W.net = calloc (1, sizeof (SattnNet))) == NULL)
    return sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
  SattnNet *net = W.net;

  /* The prefix holds a whole model and nothing else. */
  for (size_t i = 0; i < G_N_ELEMENTS (module_marks) && st == SATTN_OK; i++)
    if (has (f, p, module_marks[i]))
      st = whole_fail (&W, SATTN_E_FORMAT,
                       "prefix '%s' holds a whole model (%sembed.weight or "
                       "%sconv.weight, %sencoder.layers.*) and also '%s%s', "
                       "another module's tensor; a prefix must name one "
                       "module (pass the prefix of the one to run)",
                       p, p, p, p, p, module_marks[i]);
  if (st != SATTN_OK || (st = whole_front (&W)) != SATTN_OK ||
      (st = whole_count_layers (&W)) != SATTN_OK ||
      (st = whole_options (&W)) != SATTN_OK ||
      (st = whole_positions (&W)) != SATTN_OK ||
      (st = whole_layers (&W)) != SATTN_OK ||
      (st = whole_tail (&W)) != SATTN_OK ||
      (st = whole_contract_check (&W)) != SATTN_OK ||
      (st = take_meta (f, p, net, err, err_len)) != SATTN_OK ||
      (st = take_labels (f, p, net, err, err_len)) != SATTN_OK ||
      (st = whole_strict (&W)) != SATTN_OK)
    goto fail;
  if (sattn_net_fast_init (net) != SATTN_OK) {
    st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto fail;
  }

  SattnModel *m = calloc (1, sizeof (*m));
  if (m == NULL) {
    st = sattn_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto fail;
  }
  const SattnModel *l0 = net->layer[0];
  m->cfg = l0->cfg;
  m->cfg.d_model = net->d_frame;
  m->cfg.d_out = net->d;
  m->dq = l0->dq;
  m->dv = l0->dv;
  m->d_out = net->d;
  m->net = net;
  *out = m;
  rep->kind = SATTN_MODEL_WHOLE;
  rep->layout = W.ar0.layout;
  rep->heads_from = sattn_meta_value (&W.mp, "num_heads") != NULL &&
                            o->cfg.heads == 0
                        ? SATTN_FROM_METADATA
                        : W.ar0.heads_from;
  rep->layers = net->n_layers;
  rep->encoder = 1;
  rep->out_proj = W.ar0.out_proj;
  rep->classes = net->classes;
  free (W.layouts);
  return SATTN_OK;

fail:
  free (W.layouts);
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
  if (has (f, p, "embed.weight") || has (f, p, "conv.weight"))
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
