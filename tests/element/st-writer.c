/* Small safetensors files written by the tests (seeded random weights):
 * attention modules in four layouts, nn.TransformerEncoderLayer and
 * whole models (python/sattn/nn.py's SignalTransformer), with PyTorch's
 * names and the loader's metadata.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "st-writer.h"

#include <math.h>
#include <string.h>

void
st_init (StWriter * w, guint32 seed)
{
  w->tensors = g_string_new (NULL);
  w->meta = g_string_new (NULL);
  w->data = g_byte_array_new ();
  w->rng = g_rand_new_with_seed (seed);
}

static void
st_json_string (GString * s, const gchar * v)
{
  g_string_append_c (s, '"');
  for (; *v; v++) {
    if (*v == '"' || *v == '\\')
      g_string_append_c (s, '\\');
    g_string_append_c (s, *v);
  }
  g_string_append_c (s, '"');
}

void
st_meta (StWriter * w, const gchar * key, const gchar * value)
{
  if (w->meta->len > 0)
    g_string_append_c (w->meta, ',');
  st_json_string (w->meta, key);
  g_string_append_c (w->meta, ':');
  st_json_string (w->meta, value);
}

/* An F32 tensor of rows × cols values (cols 0: a vector of rows). */
void
st_tensor (StWriter * w, const gchar * name, gsize rows, gsize cols,
    const float *v)
{
  gsize off = w->data->len, n = rows * (cols ? cols : 1), i;

  for (i = 0; i < n; i++) {
    guint32 u;

    memcpy (&u, &v[i], 4);
    u = GUINT32_TO_LE (u);
    g_byte_array_append (w->data, (const guint8 *) &u, 4);
  }
  if (w->tensors->len > 0)
    g_string_append_c (w->tensors, ',');
  st_json_string (w->tensors, name);
  if (cols)
    g_string_append_printf (w->tensors, ":{\"dtype\":\"F32\",\"shape\":[%"
        G_GSIZE_FORMAT ",%" G_GSIZE_FORMAT "],", rows, cols);
  else
    g_string_append_printf (w->tensors, ":{\"dtype\":\"F32\",\"shape\":[%"
        G_GSIZE_FORMAT "],", rows);
  g_string_append_printf (w->tensors, "\"data_offsets\":[%" G_GSIZE_FORMAT
      ",%u]}", off, w->data->len);
}

/* A tensor of a x b x c uniform values in centre ± amp (3-D: a conv's
 * weight). */
static void
st_rand3 (StWriter * w, const gchar * name, gsize a, gsize b, gsize c,
    gdouble centre, gdouble amp)
{
  gsize off = w->data->len, n = a * b * c, i;

  for (i = 0; i < n; i++) {
    float v = (float) (centre + g_rand_double_range (w->rng, -amp, amp));
    guint32 u;

    memcpy (&u, &v, 4);
    u = GUINT32_TO_LE (u);
    g_byte_array_append (w->data, (const guint8 *) &u, 4);
  }
  if (w->tensors->len > 0)
    g_string_append_c (w->tensors, ',');
  st_json_string (w->tensors, name);
  g_string_append_printf (w->tensors, ":{\"dtype\":\"F32\",\"shape\":[%"
      G_GSIZE_FORMAT ",%" G_GSIZE_FORMAT ",%" G_GSIZE_FORMAT "],"
      "\"data_offsets\":[%" G_GSIZE_FORMAT ",%u]}", a, b, c, off, w->data->len);
}

/* Uniform values in centre ± amp. */
void
st_rand (StWriter * w, const gchar * name, gsize rows, gsize cols,
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
st_linear (StWriter * w, const gchar * p, const gchar * name, gsize out_f,
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
st_norm (StWriter * w, const gchar * p, const gchar * name, gsize d)
{
  gchar *n = g_strdup_printf ("%s%s.weight", p, name);

  st_rand (w, n, d, 0, 1.0, 0.3);
  g_free (n);
  n = g_strdup_printf ("%s%s.bias", p, name);
  st_rand (w, n, d, 0, 0.0, 0.2);
  g_free (n);
}

/* Writes the file (header padded to 8 bytes, as safetensors writes it)
 * and frees the writer. */
void
st_write (StWriter * w, const gchar * path)
{
  GString *h = g_string_new ("{");
  GByteArray *b = g_byte_array_new ();
  guint64 le;
  GError *err = NULL;

  if (w->meta->len > 0)
    g_string_append_printf (h, "\"__metadata__\":{%s}%s", w->meta->str,
        w->tensors->len > 0 ? "," : "");
  g_string_append (h, w->tensors->str);
  g_string_append_c (h, '}');
  while (h->len % 8 != 0)
    g_string_append_c (h, ' ');
  le = GUINT64_TO_LE ((guint64) h->len);
  g_byte_array_append (b, (const guint8 *) &le, 8);
  g_byte_array_append (b, (const guint8 *) h->str, (guint) h->len);
  g_byte_array_append (b, w->data->data, w->data->len);
  fail_unless (g_file_set_contents (path, (const gchar *) b->data, b->len,
          &err), "%s", err ? err->message : "");
  g_byte_array_unref (b);
  g_string_free (h, TRUE);
  g_string_free (w->tensors, TRUE);
  g_string_free (w->meta, TRUE);
  g_byte_array_unref (w->data);
  g_rand_free (w->rng);
}

/* ------------------------------------------------------ weights files */

/* The attention module under p: frames of e values, d_out values out. */
void
st_attn (StWriter * w, const gchar * p, Layout layout, gsize e, gsize d_out)
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
  StWriter w;

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
  StWriter w;
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
