/* The layout mappers of libsattn: the state dict of an attention module
 * (nn.MultiheadAttention and the other layouts of sattn-weights.h), an
 * nn.TransformerEncoderLayer's other parts and the options its metadata
 * records, onto SattnConfig / SattnWeights.  The loader (io/load.c)
 * calls them.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "io/io.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ------------------------------------------ nn.MultiheadAttention mapping */

struct SattnMhaWeights {
  float *block; /* every array below lives in this one allocation */
};

void
sattn_mha_weights_free (SattnMhaWeights *mw)
{
  if (mw == NULL)
    return;
  sattn_mem_free (mw->block);
  g_free (mw);
}

/* The state needed while mapping one module. */
typedef struct {
  const SattnTensorFile *f;
  const char *prefix;
  size_t e;
  char *err;
  size_t err_len;
} Mapper;

/* A tensor prefix + suffix, or NULL. */
static const Tensor *
find (const Mapper *m, const char *suffix)
{
  char *full = g_strconcat (m->prefix, suffix, NULL);
  const Tensor *t = sattn_io_lookup (m->f, full);
  g_free (full);
  return t;
}

/* Appends to s the label of a prefix that list_prefixes found holding
 * keys[k]: `shown` is the prefix as printable (sattn_io_show ()), p as it is. */
typedef void (*PrefixLabel) (GString *s, const char *shown, const char *p,
                             size_t k);

/* The prefixes under which the file holds a tensor named prefix + keys[k]
 * (the prefix empty or ending in '.'), for the message of a missing
 * module: the first 8 as label gives them, separated by ", ", then
 * " (N in all)" when there are more; "none" when there is none. */
static void
list_prefixes (const SattnTensorFile *f, const char *const *keys, size_t n_keys,
               PrefixLabel label, GString *s)
{
  size_t found = 0;

  for (size_t i = 0; i < f->n; i++) {
    const char *nm = f->t[i].name;
    size_t len = strlen (nm);
    for (size_t k = 0; k < n_keys; k++) {
      size_t kl = strlen (keys[k]);
      if (len >= kl && strcmp (nm + len - kl, keys[k]) == 0 &&
          (len == kl || nm[len - kl - 1] == '.')) {
        if (found < 8) {
          ShowBuf sb;
          char *p = g_strndup (nm, len - kl);
          if (found)
            g_string_append (s, ", ");
          label (s, sattn_io_show (&sb, p), p, k);
          g_free (p);
        }
        found++;
      }
    }
  }
  if (found == 0)
    g_string_append (s, "none");
  else if (found > 8)
    g_string_append_printf (s, " (%zu in all)", found);
}

static void
label_module (GString *s, const char *shown, const char *p, size_t k)
{
  g_string_append_printf (s, "'%s'%s", shown, p[0] ? "" : " (top level)");
}

/* The prefixes under which the file holds attention weights, for the
 * message of a missing module. */
static void
list_modules (const SattnTensorFile *f, GString *s)
{
  static const char *const keys[] = { "in_proj_weight", "q_proj_weight" };

  list_prefixes (f, keys, G_N_ELEMENTS (keys), label_module, s);
}

static SattnStatus
missing (const Mapper *m, const char *what)
{
  GString *s = g_string_new (NULL);
  ShowBuf sb;
  SattnStatus st;

  list_modules (m->f, s);
  st = sattn_io_fail (SATTN_E_MISSING, m->err, m->err_len,
                      "no tensor %s under prefix '%s'; prefixes in the file "
                      "with "
                      "MultiheadAttention weights: %s",
                      what, sattn_io_show (&sb, m->prefix), s->str);
  g_string_free (s, TRUE);
  return st;
}

/* Check that tensor t (named prefix+suffix) is float, has `rows` x `cols`
 * elements laid out as expected and holds finite values only.
 * cols == 0: a vector of `rows`, given either as (rows) or with leading
 * dimensions of 1 when lead1 is set.  sym is the symbolic expected shape. */
static SattnStatus
check (const Mapper *m, const Tensor *t, size_t rows, size_t cols, int lead1,
       const char *sym)
{
  ShowBuf sb;
  char got[96], want[96];
  int ok;
  size_t want_shape[2] = { rows, cols };

  if (t->data == NULL)
    return sattn_io_fail (SATTN_E_DTYPE, m->err, m->err_len,
                          "tensor '%s' has dtype %s; supported: F32, F16, "
                          "BF16, F64",
                          sattn_io_show (&sb, t->name), t->dtype->name);
  if (cols > 0) {
    ok = t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols;
  } else {
    ok = t->ndim >= 1 && t->shape[t->ndim - 1] == rows &&
         (t->ndim == 1 || lead1);
    for (size_t i = 0; ok && i + 1 < t->ndim; i++)
      ok = t->shape[i] == 1;
  }
  if (!ok) {
    if (cols == 0 && lead1) {
      size_t w3[3] = { 1, 1, rows };
      sattn_io_shape_str (want, sizeof want, w3, 3);
    } else {
      sattn_io_shape_str (want, sizeof want, want_shape, cols > 0 ? 2 : 1);
    }
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "tensor '%s' has shape %s; expected %s, i.e. %s (E = "
                          "d_model = %zu)",
                          sattn_io_show (&sb, t->name),
                          sattn_io_shape_str (got, sizeof got, t->shape,
                                              t->ndim),
                          want, sym, m->e);
  }
  size_t i = sattn_first_nonfinite (t->data, t->numel);
  if (i < t->numel) {
    if (t->ndim == 2 && t->shape[1] > 0)
      return sattn_io_fail (SATTN_E_NONFINITE, m->err, m->err_len,
                            "tensor '%s' holds %s at [%zu, %zu]",
                            sattn_io_show (&sb, t->name),
                            isnan (t->data[i]) ? "NaN" : "Inf", i / t->shape[1],
                            i % t->shape[1]);
    return sattn_io_fail (SATTN_E_NONFINITE, m->err, m->err_len,
                          "tensor '%s' holds %s at element %zu",
                          sattn_io_show (&sb, t->name),
                          isnan (t->data[i]) ? "NaN" : "Inf", i);
  }
  return SATTN_OK;
}

/* A metadata value "<prefix>key", or NULL. */
static const char *
meta_str (const Mapper *m, const char *key)
{
  char *full = g_strconcat (m->prefix, key, NULL);
  const char *v = sattn_tensor_file_metadata (m->f, full);
  g_free (full);
  return v;
}

/* A metadata value "<prefix>key" parsed as an unsigned integer; -1 when
 * absent or not a number. */
static gint64
meta_uint (const Mapper *m, const char *key)
{
  const char *v = meta_str (m, key);
  guint64 u;

  if (v == NULL || !g_ascii_string_to_unsigned (v, 10, 0, G_MAXINT64, &u, NULL))
    return -1;
  return (gint64) u;
}

/* A size the metadata records as "<prefix>key" (num_heads, head_dim,
 * value_dim); 0 when it is absent, 0 or not a number.  The one rule of
 * every mapper for a size in the metadata: 0 or missing means "not
 * given", as 0 does in SattnConfig. */
static size_t
meta_size (const Mapper *m, const char *key)
{
  gint64 v = meta_uint (m, key);
  return v > 0 ? (size_t) v : 0;
}

/* ------------------------------------- nn.TransformerEncoderLayer mapping */

struct SattnLayerWeights {
  float *block; /* every array below lives in this one allocation */
};

void
sattn_layer_weights_free (SattnLayerWeights *lw)
{
  if (lw == NULL)
    return;
  sattn_mem_free (lw->block);
  g_free (lw);
}

/* prefix with a '.' appended unless empty or ending in one (g_free it). */
static char *
dotted (const char *prefix)
{
  if (prefix == NULL)
    prefix = "";
  return (prefix[0] != '\0' && prefix[strlen (prefix) - 1] != '.')
             ? g_strconcat (prefix, ".", NULL)
             : g_strdup (prefix);
}

int
sattn_encoder_layer_present (const SattnTensorFile *f, const char *prefix)
{
  if (f == NULL)
    return 0;
  char *pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx };
  int yes = find (&m, "linear1.weight") != NULL &&
            find (&m, "linear2.weight") != NULL;
  g_free (pfx);
  return yes;
}

char *
sattn_attn_prefix (const SattnTensorFile *f, const char *prefix)
{
  char *pfx = dotted (prefix);
  const char *sub = sattn_encoder_layer_present (f, pfx) ? "self_attn." : "";
  size_t a = strlen (pfx), b = strlen (sub);
  char *r = malloc (a + b + 1);

  if (r != NULL) {
    memcpy (r, pfx, a);
    memcpy (r + a, sub, b + 1);
  }
  g_free (pfx);
  return r;
}

SattnStatus
sattn_encoder_weights_from_file (const SattnTensorFile *f, const char *prefix,
                                 SattnConfig *cfg_inout, SattnWeights *w_inout,
                                 SattnLayerWeights **owner, char *err,
                                 size_t err_len)
{
  static const char *const names[] = { "linear1.weight", "linear1.bias",
                                       "linear2.weight", "linear2.bias",
                                       "norm1.weight",   "norm1.bias",
                                       "norm2.weight",   "norm2.bias" };
  const Tensor *t[8];
  SattnLayerWeights *lw = NULL;
  SattnStatus st = SATTN_OK;
  ShowBuf sb;
  char *pfx;

  sattn_io_set_err (err, err_len, "%s", "");
  if (owner != NULL)
    *owner = NULL;
  if (f == NULL || cfg_inout == NULL || w_inout == NULL || owner == NULL ||
      cfg_inout->d_model == 0)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  pfx = dotted (prefix);
  Mapper m = { .f = f,
               .prefix = pfx,
               .e = cfg_inout->d_model,
               .err = err,
               .err_len = err_len };
  const size_t e = m.e;
  for (size_t i = 0; i < 8; i++)
    t[i] = find (&m, names[i]);
  if (t[0] == NULL || t[2] == NULL) {
    st = sattn_io_fail (SATTN_E_MISSING, err, err_len,
                        "no tensor '%s%s' under prefix '%s': not an "
                        "nn.TransformerEncoderLayer",
                        sattn_io_show (&sb, pfx), names[t[0] == NULL ? 0 : 2],
                        pfx);
    goto out;
  }
  /* The feed-forward width: the rows of linear1. */
  size_t dff = t[0]->ndim == 2 ? t[0]->shape[0] : 0;
  if (dff == 0 || dff > SIZE_MAX / 8 / e) {
    char got[96];
    st = sattn_io_fail (
        SATTN_E_SHAPE, err, err_len,
        "tensor '%s' has shape %s; expected (F, E) with F > 0 (E = "
        "d_model = %zu)",
        sattn_io_show (&sb, t[0]->name),
        sattn_io_shape_str (got, sizeof got, t[0]->shape, t[0]->ndim), e);
    goto out;
  }
  if ((st = check (&m, t[0], dff, e, 0, "(F, E)")) != SATTN_OK ||
      (t[1] && (st = check (&m, t[1], dff, 0, 0, "(F)")) != SATTN_OK) ||
      (st = check (&m, t[2], e, dff, 0, "(E, F)")) != SATTN_OK ||
      (t[3] && (st = check (&m, t[3], e, 0, 0, "(E)")) != SATTN_OK))
    goto out;
  for (size_t i = 4; i < 8; i++)
    if (t[i] && (st = check (&m, t[i], e, 0, 0, "(E)")) != SATTN_OK)
      goto out;

  size_t total = 2 * dff * e + dff + 5 * e;
  lw = g_new0 (SattnLayerWeights, 1);
  lw->block = sattn_mem_calloc (total, sizeof (float), 64);
  if (lw->block == NULL) {
    st = sattn_io_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }
  const size_t sizes[8] = { dff * e, dff, e * dff, e, e, e, e, e };
  const float **dst[8] = { &w_inout->w1,      &w_inout->b1,
                           &w_inout->w2,      &w_inout->b2,
                           &w_inout->norm1_w, &w_inout->norm1_b,
                           &w_inout->norm2_w, &w_inout->norm2_b };
  size_t off = 0;
  for (size_t i = 0; i < 8; i++) {
    *dst[i] = NULL;
    if (t[i] == NULL)
      continue;
    memcpy (lw->block + off, t[i]->data, sizes[i] * sizeof (float));
    *dst[i] = lw->block + off;
    off += sizes[i];
  }
  g_assert (off <= total);
  cfg_inout->encoder = 1;
  cfg_inout->d_ff = dff;
  *owner = lw;
  lw = NULL;

out:
  sattn_layer_weights_free (lw);
  g_free (pfx);
  return st;
}

static const char *const positions_names[] = { "none", "rope",
                                               "rope-interleaved", "alibi" };
static const char *const activation_names[] = { "relu", "gelu" };

/* A caller's choice (bit set in `set`) against the file's word. */
static SattnStatus
agree_word (const Mapper *m, int set, const char *prop, const char *key,
            const char *const *words, size_t n, int caller, int file)
{
  ShowBuf sb;
  if (!set || caller == file)
    return SATTN_OK;
  return sattn_io_fail (SATTN_E_INVAL, m->err, m->err_len,
                        "%s=%s but the model was exported with %s=%s "
                        "(metadata '%s%s')",
                        prop,
                        caller >= 0 && (size_t) caller < n ? words[caller]
                                                           : "?",
                        key, words[file], sattn_io_show (&sb, m->prefix), key);
}

SattnStatus
sattn_options_from_file (const SattnTensorFile *f, const char *prefix,
                         unsigned set, SattnConfig *cfg_inout, char *err,
                         size_t err_len)
{
  static const char *const bools[] = { "false", "true" };
  static const SattnMetaRange eps_range = { 0.0, INFINITY, 0, 1 };
  static const SattnMetaRange base_range = { 1.0, INFINITY, 1, 1 };
  SattnStatus st = SATTN_OK;
  SattnConfig c;
  ShowBuf sb;
  int act, nf, pos, found;

  sattn_io_set_err (err, err_len, "%s", "");
  if (f == NULL || cfg_inout == NULL)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  c = *cfg_inout;
  char *pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx, .err = err, .err_len = err_len };
  const SattnMeta mp = { f, pfx, err, err_len };

  act = (int) c.activation;
  if ((st = sattn_meta_word (&mp, "activation", activation_names,
                             G_N_ELEMENTS (activation_names), &act, &found)) !=
          SATTN_OK ||
      (found && (st = agree_word (&m, set & SATTN_SET_ACTIVATION, "activation",
                                  "activation", activation_names,
                                  G_N_ELEMENTS (activation_names),
                                  (int) c.activation, act)) != SATTN_OK))
    goto out;
  c.activation = (SattnActivation) act;
  nf = c.norm_first != 0;
  if ((st = sattn_meta_bool (&mp, "norm_first", &nf, &found)) != SATTN_OK ||
      (found && (st = agree_word (&m, set & SATTN_SET_NORM_FIRST, "norm-first",
                                  "norm_first", bools, 2, c.norm_first != 0,
                                  nf)) != SATTN_OK))
    goto out;
  c.norm_first = nf;
  double eps = c.norm_eps;
  if ((st = sattn_meta_double (&mp, "norm_eps", &eps_range, &eps, &found)) !=
      SATTN_OK)
    goto out;
  if (found) {
    double mine = c.norm_eps == 0.0 ? 1e-5 : c.norm_eps;
    if ((set & SATTN_SET_NORM_EPS) &&
        fabs (mine - eps) > 1e-9 * fmax (fabs (mine), fabs (eps))) {
      st = sattn_io_fail (SATTN_E_INVAL, err, err_len,
                          "norm-eps=%g but the model was exported with "
                          "norm_eps=%g (metadata '%snorm_eps')",
                          mine, eps, sattn_io_show (&sb, pfx));
      goto out;
    }
    c.norm_eps = eps;
  }
  pos = (int) c.positions;
  if ((st = sattn_meta_word (&mp, "positions", positions_names,
                             G_N_ELEMENTS (positions_names), &pos, &found)) !=
          SATTN_OK ||
      (found && (st = agree_word (&m, set & SATTN_SET_POSITIONS, "positions",
                                  "positions", positions_names,
                                  G_N_ELEMENTS (positions_names),
                                  (int) c.positions, pos)) != SATTN_OK))
    goto out;
  c.positions = (SattnPositions) pos;
  double b = c.rope_base;
  if ((st = sattn_meta_double (&mp, "rope_base", &base_range, &b, &found)) !=
      SATTN_OK)
    goto out;
  if (found) {
    double mine = c.rope_base == 0.0 ? 10000.0 : c.rope_base;
    if ((set & SATTN_SET_ROPE_BASE) && mine != b) {
      st = sattn_io_fail (SATTN_E_INVAL, err, err_len,
                          "rope-base=%g but the model was exported with "
                          "rope_base=%g (metadata '%srope_base')",
                          mine, b, sattn_io_show (&sb, pfx));
      goto out;
    }
    c.rope_base = b;
  }
  /* The options only: the caller's struct may be of another size (its
   * struct_size). */
  cfg_inout->activation = c.activation;
  cfg_inout->norm_first = c.norm_first;
  cfg_inout->norm_eps = c.norm_eps;
  cfg_inout->positions = c.positions;
  cfg_inout->rope_base = c.rope_base;

out:
  g_free (pfx);
  return st;
}

/* The sizes and flags an attention module's metadata may record
 * (num_heads, head_dim, value_dim: 0 = not given; add_zero_attn), read
 * with the one parser before any mapper uses them: a value it refuses
 * (" 2", "-1", "two") is an error, never "not given". */
static SattnStatus
check_module_meta (const Mapper *m)
{
  static const char *const sizes[] = { "num_heads", "head_dim", "value_dim",
                                       "embed_dim", "kdim",     "vdim" };
  const SattnMeta mp = { m->f, m->prefix, m->err, m->err_len };
  SattnStatus st;
  uint64_t u;
  int b;
  for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
    if ((st = sattn_meta_uint (&mp, sizes[i], 0, 1u << 20, &u, NULL)) !=
        SATTN_OK)
      return st;
  if ((st = sattn_meta_bool (&mp, "add_zero_attn", &b, NULL)) != SATTN_OK)
    return st;
  return sattn_meta_bool (&mp, "batch_first", &b, NULL);
}

/* add_zero_attn against the module's metadata, when it records one. */
static SattnStatus
check_zero_attn (const Mapper *m, int add_zero_attn)
{
  gint64 meta = meta_uint (m, "add_zero_attn");
  ShowBuf sb;

  if (meta >= 0 && (meta != 0) != (add_zero_attn != 0))
    return sattn_io_fail (SATTN_E_INVAL, m->err, m->err_len,
                          "add_zero_attn = %d but the module was exported with "
                          "add_zero_attn = %d (metadata '%sadd_zero_attn')",
                          add_zero_attn != 0, meta != 0,
                          sattn_io_show (&sb, m->prefix));
  return SATTN_OK;
}

/* The arrays of one attention module, found and checked: the Q/K/V
 * weights fused (fw) or apart, their biases fused (fb) or apart, each
 * present one; the output projection, bias_k / bias_v optional. */
typedef struct {
  const Tensor *fw, *fb, *qw, *qb, *kw, *kb, *vw, *vb, *ow, *ob, *bk, *bv;
} ModuleTensors;

/* A new handle owning one block with the module's arrays: Wq Wk Wv (E
 * inputs e, Dq = dq rows for queries and keys, Dv = dv for values), Wo
 * (d_out x Dv), then the biases; *w_out points into it (NULL where the
 * file has none).  NULL when out of memory. */
static SattnMhaWeights *
pack_module (const ModuleTensors *t, size_t e, size_t dq, size_t dv,
             size_t d_out, int add_zero_attn, SattnWeights *w_out)
{
  size_t total = (2 * dq + dv) * e + (t->ow ? d_out * dv : 0) + 2 * dq + dv +
                 (t->ob ? d_out : 0) + (t->bk ? dq + dv : 0);
  SattnMhaWeights *mw = g_new0 (SattnMhaWeights, 1);
  size_t off;
  float *p;

  mw->block = sattn_mem_calloc (total, sizeof (float), 64);
  if (mw->block == NULL) {
    g_free (mw);
    return NULL;
  }
  p = mw->block;
  *w_out = (SattnWeights){ .struct_size = sizeof (SattnWeights) };
  if (t->fw != NULL) {
    memcpy (p, t->fw->data, (2 * dq + dv) * e * sizeof (float));
  } else {
    memcpy (p, t->qw->data, dq * e * sizeof (float));
    memcpy (p + dq * e, t->kw->data, dq * e * sizeof (float));
    memcpy (p + 2 * dq * e, t->vw->data, dv * e * sizeof (float));
  }
  w_out->wq = p;
  w_out->wk = p + dq * e;
  w_out->wv = p + 2 * dq * e;
  off = (2 * dq + dv) * e;
  if (t->ow != NULL) {
    memcpy (p + off, t->ow->data, d_out * dv * sizeof (float));
    w_out->wo = p + off;
    off += d_out * dv;
  }
  /* Biases: the fused vector, or each one present (absent = NULL). */
  if (t->fb != NULL) {
    memcpy (p + off, t->fb->data, (2 * dq + dv) * sizeof (float));
    w_out->bq = p + off;
    w_out->bk = p + off + dq;
    w_out->bv = p + off + 2 * dq;
  } else {
    if (t->qb != NULL) {
      memcpy (p + off, t->qb->data, dq * sizeof (float));
      w_out->bq = p + off;
    }
    if (t->kb != NULL) {
      memcpy (p + off + dq, t->kb->data, dq * sizeof (float));
      w_out->bk = p + off + dq;
    }
    if (t->vb != NULL) {
      memcpy (p + off + 2 * dq, t->vb->data, dv * sizeof (float));
      w_out->bv = p + off + 2 * dq;
    }
  }
  off += 2 * dq + dv;
  if (t->ob != NULL) {
    memcpy (p + off, t->ob->data, d_out * sizeof (float));
    w_out->bo = p + off;
    off += d_out;
  }
  if (t->bk != NULL) {
    memcpy (p + off, t->bk->data, dq * sizeof (float));
    memcpy (p + off + dq, t->bv->data, dv * sizeof (float));
    w_out->bias_k = p + off;
    w_out->bias_v = p + off + dq;
    off += dq + dv;
  }
  g_assert (off == total);
  w_out->add_zero_attn = add_zero_attn != 0;
  return mw;
}

/* nn.MultiheadAttention's tensors under m's prefix into *t: the fused
 * in_proj_weight or all three q/k/v_proj_weight, the output projection,
 * bias_k and bias_v together. */
static SattnStatus
mha_find (const Mapper *m, ModuleTensors *t)
{
  ShowBuf sb;
  *t = (ModuleTensors){ .fw = find (m, "in_proj_weight"),
                        .qw = find (m, "q_proj_weight"),
                        .kw = find (m, "k_proj_weight"),
                        .vw = find (m, "v_proj_weight"),
                        .fb = find (m, "in_proj_bias"),
                        .ow = find (m, "out_proj.weight"),
                        .ob = find (m, "out_proj.bias"),
                        .bk = find (m, "bias_k"),
                        .bv = find (m, "bias_v") };
  if (t->fw != NULL && (t->qw != NULL || t->kw != NULL || t->vw != NULL))
    return sattn_io_fail (SATTN_E_FORMAT, m->err, m->err_len,
                          "both in_proj_weight and separate q/k/v_proj_weight "
                          "under prefix '%s': ambiguous",
                          sattn_io_show (&sb, m->prefix));
  if (t->fw == NULL && t->qw == NULL && t->kw == NULL && t->vw == NULL)
    return missing (m, "'in_proj_weight' (or q/k/v_proj_weight)");
  if (t->fw == NULL && (t->qw == NULL || t->kw == NULL || t->vw == NULL))
    return missing (m, t->qw == NULL   ? "'q_proj_weight'"
                       : t->kw == NULL ? "'k_proj_weight'"
                                       : "'v_proj_weight'");
  if (t->ow == NULL)
    return missing (m, "'out_proj.weight'");
  if ((t->bk == NULL) != (t->bv == NULL))
    return missing (m, t->bk == NULL ? "'bias_k' (bias_v is present)"
                                     : "'bias_v' (bias_k is present)");
  return SATTN_OK;
}

/* The embedding size: d_model, or (0) the input width of the
 * projection. */
static SattnStatus
mha_embed_size (const Mapper *m, const ModuleTensors *t, size_t d_model,
                size_t *e)
{
  ShowBuf sb;
  *e = d_model;
  if (*e == 0) {
    const Tensor *w = t->fw != NULL ? t->fw : t->qw;
    if (w->ndim == 2)
      *e = w->shape[1];
    if (*e == 0) {
      char got[96];
      return sattn_io_fail (
          SATTN_E_SHAPE, m->err, m->err_len,
          "tensor '%s' has shape %s; expected a 2-D tensor %s with E > 0",
          sattn_io_show (&sb, w->name),
          sattn_io_shape_str (got, sizeof got, w->shape, w->ndim),
          t->fw != NULL ? "(3E, E)" : "(E, E)");
    }
  }
  if (*e > SIZE_MAX / 8 / *e)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "embedding size %zu too large", *e);
  return SATTN_OK;
}

/* Every tensor's exact shape (embedding size m->e), dtype and
 * finiteness, then the heads against E and the metadata. */
static SattnStatus
mha_check (const Mapper *m, const ModuleTensors *t, size_t heads,
           int add_zero_attn)
{
  const size_t e = m->e;
  SattnStatus st;
  ShowBuf sb;
  if (t->fw != NULL) {
    st = check (m, t->fw, 3 * e, e, 0, "(3E, E)");
  } else {
    /* kdim / vdim other than E cannot be fed from the same frame. */
    if ((st = check (m, t->qw, e, e, 0, "(E, E)")) != SATTN_OK ||
        (st = check (m, t->kw, e, e, 0,
                     "(E, kdim) with kdim = E for self-attention")) != SATTN_OK)
      return st;
    st = check (m, t->vw, e, e, 0,
                "(E, vdim) with vdim = E for self-attention");
  }
  if (st != SATTN_OK)
    return st;
  if (t->fb != NULL && (st = check (m, t->fb, 3 * e, 0, 0, "(3E)")) != SATTN_OK)
    return st;
  if ((st = check (m, t->ow, e, e, 0, "(E, E)")) != SATTN_OK)
    return st;
  if (t->ob != NULL && (st = check (m, t->ob, e, 0, 0, "(E)")) != SATTN_OK)
    return st;
  if (t->bk != NULL &&
      ((st = check (m, t->bk, e, 0, 1, "(1, 1, E)")) != SATTN_OK ||
       (st = check (m, t->bv, e, 0, 1, "(1, 1, E)")) != SATTN_OK))
    return st;
  if (e % heads != 0)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "heads = %zu does not divide the embedding size E = "
                          "%zu",
                          heads, e);
  const size_t meta = meta_size (m, "num_heads");
  if (meta != 0 && meta != heads)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "heads = %zu but the module was exported with "
                          "num_heads = %zu (metadata '%snum_heads')",
                          heads, meta, sattn_io_show (&sb, m->prefix));
  return check_zero_attn (m, add_zero_attn);
}

SattnStatus
sattn_mha_weights_from_file (const SattnTensorFile *f, const char *prefix,
                             size_t d_model, size_t heads, int add_zero_attn,
                             SattnConfig *cfg_inout, SattnWeights *w_out,
                             SattnMhaWeights **owner, char *err, size_t err_len)
{
  ModuleTensors t;
  SattnMhaWeights *mw;
  SattnStatus st;
  size_t e = 0;

  sattn_io_set_err (err, err_len, "%s", "");
  if (owner != NULL)
    *owner = NULL;
  if (f == NULL || cfg_inout == NULL || w_out == NULL || owner == NULL)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  if (heads == 0)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len,
                          "heads must be at least 1");

  char *pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx, .err = err, .err_len = err_len };
  if ((st = check_module_meta (&m)) != SATTN_OK ||
      (st = mha_find (&m, &t)) != SATTN_OK ||
      (st = mha_embed_size (&m, &t, d_model, &e)) != SATTN_OK)
    goto out;
  m.e = e;
  if ((st = mha_check (&m, &t, heads, add_zero_attn)) != SATTN_OK)
    goto out;

  /* Copy what is used into one block owned by the handle. */
  mw = pack_module (&t, e, e, e, e, add_zero_attn, w_out);
  if (mw == NULL) {
    st = sattn_io_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }
  cfg_inout->d_model = e;
  cfg_inout->heads = heads;
  cfg_inout->d_head = e / heads;
  cfg_inout->d_value = e / heads;
  cfg_inout->d_out = e;
  *owner = mw;

out:
  g_free (pfx);
  return st;
}

/* The message of a _load function whose file (path) loaded and mapped
 * with status st and message msg: empty on success, msg alone when the
 * loader's I/O message names the path already, else the path in front. */
static void
load_message (SattnStatus st, const char *path, const char *msg, char *err,
              size_t err_len)
{
  ShowBuf sb;

  if (st == SATTN_OK)
    sattn_io_set_err (err, err_len, "%s", "");
  else if (st == SATTN_E_IO || path == NULL)
    sattn_io_set_err (err, err_len, "%s", msg);
  else
    sattn_io_set_err (err, err_len, "'%s': %s", sattn_io_show (&sb, path), msg);
}

SattnStatus
sattn_mha_weights_load (const char *path, const char *prefix, size_t d_model,
                        size_t heads, int add_zero_attn, SattnConfig *cfg_inout,
                        SattnWeights *w_out, SattnMhaWeights **owner, char *err,
                        size_t err_len)
{
  SattnTensorFile *f = NULL;
  SattnStatus st;
  char msg[1024];

  if (owner != NULL)
    *owner = NULL;
  st = sattn_tensor_file_load (path, &f, msg, sizeof msg);
  if (st == SATTN_OK) {
    st = sattn_mha_weights_from_file (f, prefix, d_model, heads, add_zero_attn,
                                      cfg_inout, w_out, owner, msg, sizeof msg);
    sattn_tensor_file_free (f);
  }
  load_message (st, path, msg, err, err_len);
  return st;
}

/* ------------------------------------------- attention modules, any layout */

/* One way of naming an attention module's tensors.  Linear layers are
 * given by their module name (tensors name.weight / name.bias); the
 * nn.MultiheadAttention layouts name their tensors directly. */
typedef struct {
  SattnLayout layout;
  const char *fused_w, *fused_b; /* [Wq; Wk; Wv] and its bias */
  const char *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;
  const char *o_w[2], *o_b[2]; /* output projection names */
  int out_required;            /* nn.MultiheadAttention */
  int bias_kv;                 /* bias_k / bias_v allowed */
} LayoutDef;

static const LayoutDef layouts[] = {
  { SATTN_LAYOUT_MHA,
    "in_proj_weight",
    "in_proj_bias",
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    { "out_proj.weight" },
    { "out_proj.bias" },
    1,
    1 },
  { SATTN_LAYOUT_MHA_SEPARATE,
    NULL,
    "in_proj_bias",
    "q_proj_weight",
    NULL,
    "k_proj_weight",
    NULL,
    "v_proj_weight",
    NULL,
    { "out_proj.weight" },
    { "out_proj.bias" },
    1,
    1 },
  { SATTN_LAYOUT_HF,
    NULL,
    NULL,
    "q_proj.weight",
    "q_proj.bias",
    "k_proj.weight",
    "k_proj.bias",
    "v_proj.weight",
    "v_proj.bias",
    { "out_proj.weight", "o_proj.weight" },
    { "out_proj.bias", "o_proj.bias" },
    0,
    0 },
  { SATTN_LAYOUT_BERT,
    NULL,
    NULL,
    "query.weight",
    "query.bias",
    "key.weight",
    "key.bias",
    "value.weight",
    "value.bias",
    { "output.dense.weight" },
    { "output.dense.bias" },
    0,
    0 },
  { SATTN_LAYOUT_BERT,
    NULL,
    NULL,
    "self.query.weight",
    "self.query.bias",
    "self.key.weight",
    "self.key.bias",
    "self.value.weight",
    "self.value.bias",
    { "output.dense.weight" },
    { "output.dense.bias" },
    0,
    0 },
  { SATTN_LAYOUT_DIFFUSERS,
    NULL,
    NULL,
    "to_q.weight",
    "to_q.bias",
    "to_k.weight",
    "to_k.bias",
    "to_v.weight",
    "to_v.bias",
    { "to_out.0.weight" },
    { "to_out.0.bias" },
    0,
    0 },
  { SATTN_LAYOUT_LLAMA,
    NULL,
    NULL,
    "wq.weight",
    "wq.bias",
    "wk.weight",
    "wk.bias",
    "wv.weight",
    "wv.bias",
    { "wo.weight" },
    { "wo.bias" },
    0,
    0 },
  { SATTN_LAYOUT_SEEDS,
    NULL,
    NULL,
    "W_q.weight",
    "W_q.bias",
    "W_k.weight",
    "W_k.bias",
    "W_v.weight",
    "W_v.bias",
    { "W_o.weight" },
    { "W_o.bias" },
    0,
    0 },
  { SATTN_LAYOUT_FUSED,
    "qkv.weight",
    "qkv.bias",
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    { "proj.weight" },
    { "proj.bias" },
    0,
    0 },
};

/* Whether an attention module of this layout reads the tensor called
 * prefix + suffix (any of the layout's names, bias_k / bias_v where it
 * allows them). */
int
sattn_io_layout_reads (SattnLayout layout, const char *suffix)
{
  for (size_t k = 0; k < G_N_ELEMENTS (layouts); k++) {
    const LayoutDef *c = &layouts[k];
    const char *names[] = { c->fused_w, c->fused_b, c->q_w,    c->q_b,
                            c->k_w,     c->k_b,     c->v_w,    c->v_b,
                            c->o_w[0],  c->o_w[1],  c->o_b[0], c->o_b[1] };
    if (c->layout != layout)
      continue;
    for (size_t i = 0; i < G_N_ELEMENTS (names); i++)
      if (names[i] != NULL && strcmp (names[i], suffix) == 0)
        return 1;
    if (c->bias_kv &&
        (strcmp (suffix, "bias_k") == 0 || strcmp (suffix, "bias_v") == 0))
      return 1;
  }
  return 0;
}

const char *
sattn_layout_name (SattnLayout layout)
{
  switch (layout) {
    case SATTN_LAYOUT_MHA:
      return "mha";
    case SATTN_LAYOUT_MHA_SEPARATE:
      return "mha-separate";
    case SATTN_LAYOUT_HF:
      return "hf";
    case SATTN_LAYOUT_BERT:
      return "bert";
    case SATTN_LAYOUT_DIFFUSERS:
      return "diffusers";
    case SATTN_LAYOUT_LLAMA:
      return "llama";
    case SATTN_LAYOUT_SEEDS:
      return "seeds";
    case SATTN_LAYOUT_FUSED:
      return "fused";
    case SATTN_LAYOUT_NONE:
      break;
  }
  return "none";
}

/* The tensor that tells a layout is there. */
static const char *
layout_key (const LayoutDef *l)
{
  return l->fused_w != NULL ? l->fused_w : l->q_w;
}

static void
label_layout (GString *s, const char *shown, const char *p, size_t k)
{
  g_string_append_printf (s, "'%s' (%s)", shown,
                          sattn_layout_name (layouts[k].layout));
}

/* Every "prefix (layout)" of the file, for the message of a missing
 * module. */
static void
list_layouts (const SattnTensorFile *f, GString *s)
{
  const char *keys[G_N_ELEMENTS (layouts)];

  for (size_t k = 0; k < G_N_ELEMENTS (layouts); k++)
    keys[k] = layout_key (&layouts[k]);
  list_prefixes (f, keys, G_N_ELEMENTS (keys), label_layout, s);
}

/* A tensor of the module: float, 2-D (rows, cols) or 1-D (rows) when cols
 * is 0, finite.  rows or cols 0 in `want` are not checked (they are read
 * from the tensor by the caller first). */
static SattnStatus
check_linear (const Mapper *m, const Tensor *t, size_t rows, size_t cols,
              const char *sym)
{
  ShowBuf sb;
  char got[96];
  int ok = cols > 0
               ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols)
               : (t->ndim == 1 && t->shape[0] == rows);

  if (t->data == NULL)
    return sattn_io_fail (SATTN_E_DTYPE, m->err, m->err_len,
                          "tensor '%s' has dtype %s; supported: F32, F16, "
                          "BF16, F64",
                          sattn_io_show (&sb, t->name), t->dtype->name);
  if (!ok) {
    if (cols > 0)
      return sattn_io_fail (
          SATTN_E_SHAPE, m->err, m->err_len,
          "tensor '%s' has shape %s; expected [%zu, %zu], i.e. %s",
          sattn_io_show (&sb, t->name),
          sattn_io_shape_str (got, sizeof got, t->shape, t->ndim), rows, cols,
          sym);
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "tensor '%s' has shape %s; expected [%zu], i.e. %s",
                          sattn_io_show (&sb, t->name),
                          sattn_io_shape_str (got, sizeof got, t->shape,
                                              t->ndim),
                          rows, sym);
  }
  return check (m, t, rows, cols, 0, sym); /* dtype, finiteness */
}

/* A 2-D float tensor's rows and columns; an error when it is not one. */
static SattnStatus
matrix_dims (const Mapper *m, const Tensor *t, size_t *rows, size_t *cols)
{
  ShowBuf sb;
  char got[96];

  if (t->ndim != 2 || t->shape[0] == 0 || t->shape[1] == 0)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "tensor '%s' has shape %s; expected a 2-D (out, in) "
                          "weight with both sizes > 0",
                          sattn_io_show (&sb, t->name),
                          sattn_io_shape_str (got, sizeof got, t->shape,
                                              t->ndim));
  *rows = t->shape[0];
  *cols = t->shape[1];
  return SATTN_OK;
}

/* A requested size (caller or metadata) against the one the shapes give. */
static SattnStatus
resolve_dim (const Mapper *m, const char *what, const char *noun, size_t caller,
             size_t total, size_t heads, size_t *out, SattnSource *from)
{
  ShowBuf sb;
  const char *key = what;
  size_t meta = meta_size (m, key);

  if (caller != 0 && meta != 0 && meta != caller)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "%s = %zu but the module was exported with %s = %zu "
                          "(metadata '%s%s')",
                          what, caller, key, meta,
                          sattn_io_show (&sb, m->prefix), key);
  if (caller != 0) {
    *out = caller;
    *from = SATTN_FROM_CALLER;
  } else if (meta != 0) {
    *out = meta;
    *from = SATTN_FROM_METADATA;
  } else {
    if (total % heads != 0)
      return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                            "heads = %zu does not divide the %zu %s values of "
                            "the "
                            "projections under prefix '%s'",
                            heads, total, noun, sattn_io_show (&sb, m->prefix));
    *out = total / heads;
    *from = SATTN_FROM_SHAPES;
    return SATTN_OK;
  }
  if (*out > total || total % *out != 0 || total / *out != heads)
    return sattn_io_fail (
        SATTN_E_SHAPE, m->err, m->err_len,
        "heads = %zu x %s = %zu %s values, but the projections "
        "under prefix '%s' have %zu%s (%s = 0 takes it from the "
        "file)",
        heads, what, *out, noun, sattn_io_show (&sb, m->prefix), total,
        total % heads == 0 ? ""
                           : ", which heads does not "
                             "divide",
        what);
  return SATTN_OK;
}

/* The one attention layout under m's prefix (*l), with the tensor that
 * shows it; SATTN_E_MISSING when none is there, SATTN_E_FORMAT when
 * several are. */
static SattnStatus
find_layout (const Mapper *m, const LayoutDef **l)
{
  ShowBuf sb;
  size_t found = 0;
  GString *names = g_string_new (NULL);
  SattnStatus st = SATTN_OK;

  for (size_t k = 0; k < G_N_ELEMENTS (layouts); k++) {
    const LayoutDef *c = &layouts[k];
    const char *qkv[3] = { c->q_w, c->k_w, c->v_w };
    const Tensor *any = c->fused_w ? find (m, c->fused_w) : NULL;
    for (size_t j = 0; any == NULL && c->fused_w == NULL && j < 3; j++)
      any = find (m, qkv[j]);
    if (any == NULL)
      continue;
    g_string_append_printf (names, "%s%s ('%s')", found ? ", " : "",
                            sattn_layout_name (c->layout),
                            sattn_io_show (&sb, any->name));
    found++;
    *l = c;
  }
  if (found == 0) {
    GString *s = g_string_new (NULL);
    list_layouts (m->f, s);
    st = sattn_io_fail (
        SATTN_E_MISSING, m->err, m->err_len,
        "no attention weights under prefix '%s' (looked for "
        "in_proj_weight, q_proj_weight, q_proj.weight, query.weight, "
        "self.query.weight, to_q.weight, wq.weight, W_q.weight, "
        "qkv.weight); prefixes in the file holding a known layout: %s",
        sattn_io_show (&sb, m->prefix), s->str);
    g_string_free (s, TRUE);
  } else if (found > 1) {
    st =
        sattn_io_fail (SATTN_E_FORMAT, m->err, m->err_len,
                       "%zu attention layouts under prefix '%s': %s; ambiguous "
                       "(choose a longer weights prefix or remove one)",
                       found, sattn_io_show (&sb, m->prefix), names->str);
  }
  g_string_free (names, TRUE);
  return st;
}

/* The output projection of layout l (t->ow, t->ob): at most one of its
 * names, required where the layout says so, no bias without weights. */
static SattnStatus
find_out_proj (const Mapper *m, const LayoutDef *l, ModuleTensors *t)
{
  ShowBuf sb;
  const char *pfx = m->prefix;
  for (size_t j = 0; j < 2 && l->o_w[j] != NULL; j++) {
    const Tensor *o = find (m, l->o_w[j]);
    if (o != NULL && t->ow != NULL) {
      ShowBuf s1, s2;
      return sattn_io_fail (SATTN_E_FORMAT, m->err, m->err_len,
                            "two output projections under prefix '%s': '%s' "
                            "and '%s'; ambiguous",
                            sattn_io_show (&sb, pfx),
                            sattn_io_show (&s1, t->ow->name),
                            sattn_io_show (&s2, o->name));
    }
    if (o != NULL) {
      t->ow = o;
      t->ob = find (m, l->o_b[j]);
    }
  }
  if (t->ow == NULL && l->out_required)
    return missing (m, "'out_proj.weight'");
  if (t->ow == NULL) {
    for (size_t j = 0; j < 2 && l->o_b[j] != NULL; j++)
      if (find (m, l->o_b[j]) != NULL)
        return sattn_io_fail (SATTN_E_MISSING, m->err, m->err_len,
                              "tensor '%s%s' without '%s%s' under prefix '%s'",
                              pfx, l->o_b[j], pfx, l->o_w[j],
                              sattn_io_show (&sb, pfx));
  }
  return SATTN_OK;
}

/* Layout l's tensors into *t: Q/K/V weights fused or all three apart,
 * their biases, the output projection, bias_k and bias_v together. */
static SattnStatus
find_tensors (const Mapper *m, const LayoutDef *l, ModuleTensors *t)
{
  ShowBuf sb;
  SattnStatus st;
  if (l->fused_w != NULL) {
    t->fw = find (m, l->fused_w);
  } else {
    t->qw = find (m, l->q_w);
    t->kw = find (m, l->k_w);
    t->vw = find (m, l->v_w);
    const char *miss = t->qw == NULL   ? l->q_w
                       : t->kw == NULL ? l->k_w
                       : t->vw == NULL ? l->v_w
                                       : NULL;
    if (miss != NULL)
      return sattn_io_fail (SATTN_E_MISSING, m->err, m->err_len,
                            "attention layout %s under prefix '%s' is "
                            "incomplete: no tensor '%s%s'",
                            sattn_layout_name (l->layout),
                            sattn_io_show (&sb, m->prefix), m->prefix, miss);
    t->qb = l->q_b ? find (m, l->q_b) : NULL;
    t->kb = l->k_b ? find (m, l->k_b) : NULL;
    t->vb = l->v_b ? find (m, l->v_b) : NULL;
  }
  t->fb = l->fused_b ? find (m, l->fused_b) : NULL;
  if ((st = find_out_proj (m, l, t)) != SATTN_OK)
    return st;
  if (l->bias_kv) {
    t->bk = find (m, "bias_k");
    t->bv = find (m, "bias_v");
    if ((t->bk == NULL) != (t->bv == NULL))
      return missing (m, t->bk == NULL ? "'bias_k' (bias_v is present)"
                                       : "'bias_v' (bias_k is present)");
  }
  return SATTN_OK;
}

/* The sizes the shapes give: the input size *e, the projections' rows
 * (*dq, *dv; 0 with fused weights) and *total (the fused rows, or dq),
 * checked against the caller's d_model. */
static SattnStatus
shape_sizes (const Mapper *m, const LayoutDef *l, const ModuleTensors *t,
             const SattnConfig *cfg, size_t *e, size_t *dq, size_t *dv,
             size_t *total)
{
  ShowBuf sb;
  SattnStatus st;
  char got[96];
  if (t->fw != NULL) {
    if ((st = matrix_dims (m, t->fw, total, e)) != SATTN_OK)
      return st;
    *dq = *dv = 0;
  } else {
    size_t ck = 0, cv = 0, dk = 0;
    if ((st = matrix_dims (m, t->qw, dq, e)) != SATTN_OK ||
        (st = matrix_dims (m, t->kw, &dk, &ck)) != SATTN_OK ||
        (st = matrix_dims (m, t->vw, dv, &cv)) != SATTN_OK)
      return st;
    if (ck != *e || cv != *e) {
      const Tensor *bad = ck != *e ? t->kw : t->vw;
      ShowBuf s2;
      return sattn_io_fail (
          SATTN_E_SHAPE, m->err, m->err_len,
          "tensor '%s' has shape %s; expected [%zu, %zu]: "
          "self-attention on frames needs the input size of '%s' "
          "(kdim = vdim = d_model = %zu)",
          sattn_io_show (&sb, bad->name),
          sattn_io_shape_str (got, sizeof got, bad->shape, bad->ndim),
          bad->shape[0], *e, sattn_io_show (&s2, t->qw->name), *e);
    }
    if (dk != *dq)
      return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                            "tensor '%s' has %zu rows but '%s' has %zu: "
                            "queries and keys of different sizes (fewer key "
                            "heads, as in grouped-query attention) are not "
                            "supported",
                            sattn_io_show (&sb, t->qw->name), *dq, t->kw->name,
                            dk);
    *total = *dq;
  }
  if (cfg->d_model != 0 && cfg->d_model != *e) {
    const Tensor *w = t->fw != NULL ? t->fw : t->qw;
    size_t d = cfg->d_model, rows = w->shape[0];
    /* nn.MultiheadAttention's projections are E wide whatever E is. */
    if ((l->layout == SATTN_LAYOUT_MHA ||
         l->layout == SATTN_LAYOUT_MHA_SEPARATE) &&
        rows % *e == 0 && rows / *e <= SIZE_MAX / d)
      rows = rows / *e * d;
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "tensor '%s' has shape %s; expected [%zu, %zu]: "
                          "the attention weights take frames of %zu values, "
                          "not d_model = %zu",
                          sattn_io_show (&sb, w->name),
                          sattn_io_shape_str (got, sizeof got, w->shape,
                                              w->ndim),
                          rows, d, *e, d);
  }
  return SATTN_OK;
}

/* Heads: the caller's, the metadata's, from the caller's head size (Q/K/V
 * apart, dq rows), or 1; where they came from into rep. */
static SattnStatus
resolve_heads (const Mapper *m, const SattnConfig *cfg, int fused, size_t dq,
               size_t *heads, SattnAttnReport *rep)
{
  ShowBuf sb;
  const size_t meta = meta_size (m, "num_heads");
  if (cfg->heads != 0 && meta != 0 && meta != cfg->heads)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "heads = %zu but the module was exported with "
                          "num_heads = %zu (metadata '%snum_heads')",
                          cfg->heads, meta, sattn_io_show (&sb, m->prefix));
  if (cfg->heads != 0) {
    *heads = cfg->heads;
    rep->heads_from = SATTN_FROM_CALLER;
  } else if (meta != 0) {
    *heads = meta;
    rep->heads_from = SATTN_FROM_METADATA;
  } else if (cfg->d_head != 0 && !fused && dq % cfg->d_head == 0) {
    *heads = dq / cfg->d_head;
    rep->heads_from = SATTN_FROM_SHAPES;
  } else {
    *heads = 1;
    rep->heads_from = SATTN_FROM_DEFAULT;
  }
  return SATTN_OK;
}

/* Fused [Wq; Wk; Wv] weights (fw) of `total` rows into dq and dv: 2 Dq +
 * Dv rows, thirds unless told otherwise by the head size
 * (nn.MultiheadAttention's in_proj_weight: always thirds). */
static SattnStatus
split_fused (const Mapper *m, const LayoutDef *l, const Tensor *fw,
             const SattnConfig *cfg, size_t heads, size_t total, size_t *dq,
             size_t *dv)
{
  ShowBuf sb;
  size_t dh = cfg->d_head != 0 ? cfg->d_head : meta_size (m, "head_dim");
  if (l->layout == SATTN_LAYOUT_MHA)
    dh = 0;
  if (dh != 0) {
    if (dh > total / 2 / heads || 2 * heads * dh >= total)
      return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                            "tensor '%s' has %zu rows: too few for 2 x heads "
                            "(%zu) x head_dim (%zu) plus values",
                            sattn_io_show (&sb, fw->name), total, heads, dh);
    *dq = heads * dh;
    *dv = total - 2 * *dq;
    return SATTN_OK;
  }
  if (total % 3 != 0)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "tensor '%s' has %zu rows, not a multiple of 3: "
                          "give the head size (head-dim) to split it",
                          sattn_io_show (&sb, fw->name), total);
  *dq = *dv = total / 3;
  return SATTN_OK;
}

/* Every tensor's exact shape, dtype and finiteness, for input size e and
 * projections of dq and dv rows; the output size into *d_out. */
static SattnStatus
check_tensors (const Mapper *m, const ModuleTensors *t, size_t e, size_t dq,
               size_t dv, int add_zero_attn, size_t *d_out)
{
  SattnStatus st;
  size_t cols;
  if (dq > SIZE_MAX / 4 / e || dv > SIZE_MAX / 4 / e)
    return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                          "projection sizes too large");
  if (t->fw != NULL) {
    if ((st = check_linear (m, t->fw, 2 * dq + dv, e, "(2 Dq + Dv, E)")) !=
        SATTN_OK)
      return st;
  } else if ((st = check_linear (m, t->qw, dq, e, "(Dq, E)")) != SATTN_OK ||
             (st = check_linear (m, t->kw, dq, e, "(Dq, E)")) != SATTN_OK ||
             (st = check_linear (m, t->vw, dv, e, "(Dv, E)")) != SATTN_OK) {
    return st;
  }
  if (t->fb != NULL &&
      (st = check_linear (m, t->fb, 2 * dq + dv, 0, "(2 Dq + Dv)")) != SATTN_OK)
    return st;
  if ((t->qb != NULL &&
       (st = check_linear (m, t->qb, dq, 0, "(Dq)")) != SATTN_OK) ||
      (t->kb != NULL &&
       (st = check_linear (m, t->kb, dq, 0, "(Dq)")) != SATTN_OK) ||
      (t->vb != NULL &&
       (st = check_linear (m, t->vb, dv, 0, "(Dv)")) != SATTN_OK))
    return st;
  *d_out = dv;
  if (t->ow != NULL) {
    if ((st = matrix_dims (m, t->ow, d_out, &cols)) != SATTN_OK ||
        (st = check_linear (m, t->ow, *d_out, dv, "(d_out, Dv)")) != SATTN_OK)
      return st;
    if (*d_out > SIZE_MAX / 4 / dv)
      return sattn_io_fail (SATTN_E_SHAPE, m->err, m->err_len,
                            "projection sizes too large");
    if (t->ob != NULL &&
        (st = check_linear (m, t->ob, *d_out, 0, "(d_out)")) != SATTN_OK)
      return st;
  }
  if (t->bk != NULL &&
      ((st = check (m, t->bk, dq, 0, 1, "(1, 1, Dq)")) != SATTN_OK ||
       (st = check (m, t->bv, dv, 0, 1, "(1, 1, Dv)")) != SATTN_OK))
    return st;
  return check_zero_attn (m, add_zero_attn);
}

SattnStatus
sattn_attn_weights_from_file (const SattnTensorFile *f, const char *prefix,
                              int add_zero_attn, SattnConfig *cfg_inout,
                              SattnWeights *w_out, SattnMhaWeights **owner,
                              SattnAttnReport *report, char *err,
                              size_t err_len)
{
  const LayoutDef *l = NULL;
  ModuleTensors t = { 0 };
  SattnAttnReport rep = { 0 };
  SattnMhaWeights *mw = NULL;
  SattnStatus st;
  size_t e = 0, dq = 0, dv = 0, total = 0, d_out = 0, heads = 0;
  size_t d_head = 0, d_value = 0;

  sattn_io_set_err (err, err_len, "%s", "");
  if (owner != NULL)
    *owner = NULL;
  if (f == NULL || cfg_inout == NULL || w_out == NULL || owner == NULL)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "invalid argument");

  char *pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx, .err = err, .err_len = err_len };
  if ((st = check_module_meta (&m)) != SATTN_OK ||
      (st = find_layout (&m, &l)) != SATTN_OK)
    goto out;
  rep.layout = l->layout;
  if ((st = find_tensors (&m, l, &t)) != SATTN_OK ||
      (st = shape_sizes (&m, l, &t, cfg_inout, &e, &dq, &dv, &total)) !=
          SATTN_OK)
    goto out;
  m.e = e;
  if ((st = resolve_heads (&m, cfg_inout, t.fw != NULL, dq, &heads, &rep)) !=
          SATTN_OK ||
      (t.fw != NULL && (st = split_fused (&m, l, t.fw, cfg_inout, heads, total,
                                          &dq, &dv)) != SATTN_OK) ||
      (st = resolve_dim (&m, "head_dim", "query/key", cfg_inout->d_head, dq,
                         heads, &d_head, &rep.d_head_from)) != SATTN_OK ||
      (st = resolve_dim (&m, "value_dim", "value", cfg_inout->d_value, dv,
                         heads, &d_value, &rep.d_value_from)) != SATTN_OK ||
      (st = check_tensors (&m, &t, e, dq, dv, add_zero_attn, &d_out)) !=
          SATTN_OK)
    goto out;

  mw = pack_module (&t, e, dq, dv, d_out, add_zero_attn, w_out);
  if (mw == NULL) {
    st = sattn_io_fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }

  rep.q_bias = t.fb != NULL || t.qb != NULL;
  rep.k_bias = t.fb != NULL || t.kb != NULL;
  rep.v_bias = t.fb != NULL || t.vb != NULL;
  rep.out_proj = t.ow != NULL;
  rep.out_bias = t.ob != NULL;
  rep.bias_kv = t.bk != NULL;
  cfg_inout->d_model = e;
  cfg_inout->heads = heads;
  cfg_inout->d_head = d_head;
  cfg_inout->d_value = d_value;
  cfg_inout->d_out = d_out;
  if (report != NULL)
    *report = rep;
  *owner = mw;

out:
  g_free (pfx);
  return st;
}

SattnStatus
sattn_attn_weights_load (const char *path, const char *prefix,
                         int add_zero_attn, SattnConfig *cfg_inout,
                         SattnWeights *w_out, SattnMhaWeights **owner,
                         SattnAttnReport *report, char *err, size_t err_len)
{
  SattnTensorFile *f = NULL;
  SattnStatus st;
  char msg[1024];

  if (owner != NULL)
    *owner = NULL;
  st = sattn_tensor_file_load (path, &f, msg, sizeof msg);
  if (st == SATTN_OK) {
    st = sattn_attn_weights_from_file (f, prefix, add_zero_attn, cfg_inout,
                                       w_out, owner, report, msg, sizeof msg);
    sattn_tensor_file_free (f);
  }
  load_message (st, path, msg, err, err_len);
  return st;
}
