/* The element tests' weights files (seeded random weights), written
 * through the tests' one writer (tests/common/st-writer.c): attention
 * modules in four layouts, nn.TransformerEncoderLayer and
 * whole models (python/sattn/nn.py's SignalTransformer), with PyTorch's
 * names and the loader's metadata.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "st-builder.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

void
st_init (StBuilder * w, guint32 seed)
{
  w->st = st_writer_new ();
  fail_unless (w->st != NULL);
  w->rng = g_rand_new_with_seed (seed);
}

void
st_meta (StBuilder * w, const gchar * key, const gchar * value)
{
  st_writer_meta (w->st, key, value);
}

/* An F32 tensor of rows × cols values (cols 0: a vector of rows). */
void
st_tensor (StBuilder * w, const gchar * name, gsize rows, gsize cols,
    const float *v)
{
  st_writer_f32_2d (w->st, name, v, rows, cols);
}

/* A tensor of a x b x c uniform values in centre ± amp (3-D: a conv's
 * weight). */
static void
st_rand3 (StBuilder * w, const gchar * name, gsize a, gsize b, gsize c,
    gdouble centre, gdouble amp)
{
  const gsize shape[3] = { a, b, c };
  gsize n = a * b * c, i;
  float *v = g_new (float, n);

  for (i = 0; i < n; i++)
    v[i] = (float) (centre + g_rand_double_range (w->rng, -amp, amp));
  st_writer_f32 (w->st, name, v, 3, shape);
  g_free (v);
}

/* Uniform values in centre ± amp. */
void
st_rand (StBuilder * w, const gchar * name, gsize rows, gsize cols,
    gdouble centre, gdouble amp)
{
  gsize n = rows * (cols ? cols : 1), i;
  float *v = g_new (float, n);

  for (i = 0; i < n; i++)
    v[i] = (float) (centre + g_rand_double_range (w->rng, -amp, amp));
  st_tensor (w, name, rows, cols, v);
  g_free (v);
}

/* A Linear(in_f, out_f) as PyTorch names it: p + name + ".weight" (and
 * ".bias" when bias), initialised at PyTorch's scale, a little larger
 * so that the attention is far from uniform. */
void
st_linear (StBuilder * w, const gchar * p, const gchar * name, gsize out_f,
    gsize in_f, gboolean bias)
{
  gchar *n = g_strdup_printf ("%s%s.weight", p, name);
  gdouble amp = 2.0 / sqrt ((gdouble) in_f);

  st_rand (w, n, out_f, in_f, 0.0, amp);
  g_free (n);
  if (bias) {
    n = g_strdup_printf ("%s%s.bias", p, name);
    st_rand (w, n, out_f, 0, 0.0, 0.2);
    g_free (n);
  }
}

/* A LayerNorm(d): weight near 1, bias near 0. */
void
st_norm (StBuilder * w, const gchar * p, const gchar * name, gsize d)
{
  gchar *n = g_strdup_printf ("%s%s.weight", p, name);

  st_rand (w, n, d, 0, 1.0, 0.3);
  g_free (n);
  n = g_strdup_printf ("%s%s.bias", p, name);
  st_rand (w, n, d, 0, 0.0, 0.2);
  g_free (n);
}

/* Writes the file and frees the builder (fails the test on an
 * error). */
void
st_write (StBuilder * w, const gchar * path)
{
  fail_unless (st_writer_save (w->st, path) == 0, "%s: %s", path,
      g_strerror (errno));
  st_writer_free (w->st);
  g_rand_free (w->rng);
}

/* ------------------------------------------------------ weights files */

/* The attention module under p: frames of e values, d_out values out. */
void
st_attn (StBuilder * w, const gchar * p, Layout layout, gsize e, gsize d_out)
{
  gchar *n;

  switch (layout) {
    case LAYOUT_MHA:
      n = g_strdup_printf ("%sin_proj_weight", p);
      st_rand (w, n, 3 * e, e, 0.0, 2.0 / sqrt ((gdouble) e));
      g_free (n);
      n = g_strdup_printf ("%sin_proj_bias", p);
      st_rand (w, n, 3 * e, 0, 0.0, 0.2);
      g_free (n);
      st_linear (w, p, "out_proj", d_out, e, TRUE);
      break;
    case LAYOUT_HF:
      st_linear (w, p, "q_proj", e, e, TRUE);
      st_linear (w, p, "k_proj", e, e, TRUE);
      st_linear (w, p, "v_proj", e, e, TRUE);
      st_linear (w, p, "out_proj", d_out, e, TRUE);
      break;
    case LAYOUT_BERT:
      st_linear (w, p, "query", e, e, TRUE);
      st_linear (w, p, "key", e, e, TRUE);
      st_linear (w, p, "value", e, e, TRUE);
      st_linear (w, p, "output.dense", d_out, e, TRUE);
      break;
    case LAYOUT_LLAMA:
      st_linear (w, p, "wq", e, e, FALSE);
      st_linear (w, p, "wk", e, e, FALSE);
      st_linear (w, p, "wv", e, e, FALSE);
      st_linear (w, p, "wo", d_out, e, FALSE);
      break;
  }
}

/* An attention module (ff == 0) or an nn.TransformerEncoderLayer with a
 * feed-forward of ff (its attention, packed, under "self_attn."), for
 * frames of e values.  heads: metadata num_heads (0: not recorded);
 * positions: metadata positions (NULL: not recorded). */
gchar *
st_write_layer (const gchar * path, guint32 seed, Layout layout, gsize e,
    gsize d_out, guint heads, const gchar * positions, gsize ff)
{
  gchar num[16];
  StBuilder w;

  st_init (&w, seed);
  g_snprintf (num, sizeof num, "%u", heads);
  if (ff == 0) {
    st_attn (&w, "", layout, e, d_out);
    if (heads)
      st_meta (&w, "num_heads", num);
  } else {
    st_attn (&w, "self_attn.", LAYOUT_MHA, e, e);
    st_linear (&w, "", "linear1", ff, e, TRUE);
    st_linear (&w, "", "linear2", e, ff, TRUE);
    st_norm (&w, "", "norm1", e);
    st_norm (&w, "", "norm2", e);
    if (heads)
      st_meta (&w, "self_attn.num_heads", num);
  }
  if (positions)
    st_meta (&w, "positions", positions);
  st_write (&w, path);
  return g_strdup (path);
}

gchar *
st_write_whole (const gchar * path, guint32 seed, const WholeSpec * s)
{
  gchar num[16], p[64];
  GString *labels = g_string_new ("[");
  StBuilder w;
  gsize i;

  st_init (&w, seed);
  if (s->conv_kernel > 0) {
    gsize c = s->f / s->conv_steps;

    st_rand3 (&w, "conv.weight", s->d, c, s->conv_kernel, 0.0,
        2.0 / sqrt ((gdouble) (c * s->conv_kernel)));
    st_rand (&w, "conv.bias", s->d, 0, 0.0, 0.2);
  } else {
    st_linear (&w, "", "embed", s->d, s->f, TRUE);
  }
  if (s->standardize) {
    st_rand (&w, "standardize.mean", s->f, 0, 0.0, 0.5);
    st_rand (&w, "standardize.std", s->f, 0, 1.0, 0.5);
  }
  if (s->cls)
    st_rand (&w, "cls_token", s->d, 0, 0.0, 0.5);
  if (g_strcmp0 (s->positions, "learned") == 0)
    st_rand (&w, "pos_embed", s->max_window + (s->cls ? 1 : 0), s->d, 0.0, 0.5);
  for (i = 0; i < s->n_layers; i++) {
    gchar *a;

    g_snprintf (p, sizeof p, "encoder.layers.%" G_GSIZE_FORMAT ".", i);
    a = g_strdup_printf ("%sself_attn.", p);
    st_attn (&w, a, LAYOUT_MHA, s->d, s->d);
    g_free (a);
    st_linear (&w, p, "linear1", s->ff, s->d, TRUE);
    st_linear (&w, p, "linear2", s->d, s->ff, TRUE);
    st_norm (&w, p, "norm1", s->d);
    st_norm (&w, p, "norm2", s->d);
  }
  if (s->final_norm)
    st_norm (&w, "encoder.", "norm", s->d);
  if (g_strcmp0 (s->pooling, "attention") == 0) {
    st_rand (&w, "pool.weight", s->d, 0, 0.0, 1.0);
    st_rand (&w, "pool.bias", 1, 0, 0.0, 0.5);
  }
  if (s->mlp) {
    st_linear (&w, "", "head.0", 2 * s->d, s->d, TRUE);
    st_linear (&w, "", "head.2", s->classes, 2 * s->d, TRUE);
  } else {
    st_linear (&w, "", "head", s->classes, s->d, TRUE);
  }
  g_snprintf (num, sizeof num, "%u", s->heads);
  st_meta (&w, "num_heads", num);
  st_meta (&w, "positions", s->positions);
  st_meta (&w, "pooling", s->pooling ? s->pooling : s->last ? "last" : "mean");
  if (s->conv_kernel > 0) {
    g_snprintf (num, sizeof num, "%" G_GSIZE_FORMAT, s->conv_steps);
    st_meta (&w, "conv_stride", num);
    g_snprintf (num, sizeof num, "%" G_GSIZE_FORMAT, s->conv_padding);
    st_meta (&w, "conv_padding", num);
    g_snprintf (num, sizeof num, "%" G_GSIZE_FORMAT,
        s->conv_dilation ? s->conv_dilation : 1);
    st_meta (&w, "conv_dilation", num);
    st_meta (&w, "conv_activation", s->conv_act ? s->conv_act : "none");
  }
  if (s->input_norm)
    st_meta (&w, "input_norm", s->input_norm);
  if (s->meta) {
    gchar **kv = g_strsplit (s->meta, ";", -1);

    for (i = 0; kv[i] != NULL; i++) {
      gchar *eq = strchr (kv[i], '=');

      if (eq != NULL) {
        *eq = '\0';
        st_meta (&w, kv[i], eq + 1);
      }
    }
    g_strfreev (kv);
  }
  st_meta (&w, "norm_first", s->norm_first ? "1" : "0");
  for (i = 0; i < s->classes; i++)
    g_string_append_printf (labels, "%s\"class-%" G_GSIZE_FORMAT "\"",
        i ? "," : "", i);
  g_string_append_c (labels, ']');
  st_meta (&w, "labels", s->labels ? s->labels : labels->str);
  g_string_free (labels, TRUE);
  st_write (&w, path);
  return g_strdup (path);
}

gchar *
st_write_whole_tmp (const gchar * name, guint32 seed, const WholeSpec * s)
{
  gchar *dir = g_dir_make_tmp ("sattn-whole-XXXXXX", NULL);
  gchar *path;

  fail_unless (dir != NULL);
  path = g_build_filename (dir, name, NULL);
  g_free (st_write_whole (path, seed, s));
  g_free (dir);
  return path;
}

void
st_remove_tmp (gchar * path)
{
  gchar *dir = g_path_get_dirname (path);

  g_unlink (path);
  g_rmdir (dir);
  g_free (dir);
  g_free (path);
}
