/* The element tests' weights files (st-builder.c), seeded, written
 * through the tests' one writer (tests/common/st-writer.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef ST_BUILDER_H
#define ST_BUILDER_H

#include <gst/check/gstcheck.h>

#include "st-writer.h"

G_BEGIN_DECLS

typedef struct
{
  StWriter *st;                 /* the file being built */
  GRand *rng;                   /* its values */
} StBuilder;

typedef enum
{
  LAYOUT_MHA,                   /* nn.MultiheadAttention, packed */
  LAYOUT_HF,                    /* q_proj, k_proj, v_proj, out_proj */
  LAYOUT_BERT,                  /* query, key, value, output.dense */
  LAYOUT_LLAMA,                 /* wq, wk, wv, wo (no biases) */
} Layout;

void st_init (StBuilder * w, guint32 seed);
void st_meta (StBuilder * w, const gchar * key, const gchar * value);
/* An F32 tensor of rows x cols values (cols 0: a vector of rows). */
void st_tensor (StBuilder * w, const gchar * name, gsize rows, gsize cols,
    const float *v);
/* Uniform values in centre +- amp. */
void st_rand (StBuilder * w, const gchar * name, gsize rows, gsize cols,
    gdouble centre, gdouble amp);
void st_linear (StBuilder * w, const gchar * p, const gchar * name,
    gsize out_f, gsize in_f, gboolean bias);
void st_norm (StBuilder * w, const gchar * p, const gchar * name, gsize d);
/* Writes the file and frees the writer (fails the test on an error). */
void st_write (StBuilder * w, const gchar * path);
void st_attn (StBuilder * w, const gchar * p, Layout layout, gsize e,
    gsize d_out);

/* An attention module (ff == 0) or an nn.TransformerEncoderLayer with a
 * feed-forward of ff (its attention, packed, under "self_attn."), for
 * frames of e values, written to path (returned, g_free it).  heads:
 * metadata num_heads (0: not recorded); positions: metadata positions
 * (NULL: not recorded). */
gchar *st_write_layer (const gchar * path, guint32 seed, Layout layout,
    gsize e, gsize d_out, guint heads, const gchar * positions, gsize ff);

/* A whole model (python/sattn/nn.py's SignalTransformer, docs/models.md):
 * frames of f values embedded into d, n_layers encoder layers
 * (feed-forward ff), mean pooling and a head of `classes`.  positions:
 * "learned" (a pos_embed of max_window rows, + 1 with a CLS token) or a
 * metadata word; mlp: a two-layer head (head.0, ReLU, head.2) rather than
 * a Linear one; final_norm: encoder.norm; norm_first: the layers'
 * metadata; last: pooling "last" (else "mean").  The rest may be left 0:
 * pooling: a pooling word (NULL: by last); conv_kernel > 0: a conv stem
 * of conv_steps time steps per frame (stride), that kernel, padding and
 * dilation (0: 1), conv_act (NULL: none); standardize: standardize.*
 * tensors; input_norm: "rms" or "power" (NULL: none); cls: a CLS token
 * (with pooling "cls"); meta: more metadata, "key=value" pairs separated
 * by ';' (the input contract, e.g. "sample_rate=8000;channels=2");
 * labels: the labels' JSON array.
 * st_write_whole writes one to path (returned, g_free it). */
typedef struct
{
  gsize f, d, n_layers, ff, classes, max_window;
  guint heads;
  const gchar *positions;
  gboolean mlp, final_norm, norm_first, last;
  const gchar *pooling;
  gsize conv_steps, conv_kernel, conv_padding, conv_dilation;
  const gchar *conv_act;
  gboolean standardize;
  const gchar *input_norm;
  gboolean cls;
  const gchar *meta;
  const gchar *labels;          /* a JSON array (NULL: "class-0", ...) */
} WholeSpec;

gchar *st_write_whole (const gchar * path, guint32 seed,
    const WholeSpec * s);

/* st_write_whole into a new temporary directory, as `name` there;
 * returns the path (st_remove_tmp removes the file, the directory and
 * frees the path). */
gchar *st_write_whole_tmp (const gchar * name, guint32 seed,
    const WholeSpec * s);
void st_remove_tmp (gchar * path);

G_END_DECLS

#endif /* ST_BUILDER_H */
