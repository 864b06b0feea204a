/* Whole models (SATTN_MODEL_WHOLE): [embed] -> layers[N] -> [final norm]
 * -> [pooling] -> [head], each window one sequence.  The model's parts
 * and the computation of blocks of windows; the loader (io/load.c) builds
 * them and the per-window executor (stream/whole.c) runs them.
 *
 * A block is up to max_windows windows of n rows each, stacked: the
 * per-row parts of each layer (norm1 of pre-norm layers, the Q, K and V
 * projections, the output projection, the residuals, LayerNorms and
 * feed-forward, the final norm) run as products over all rows of the
 * block, the attention per window and head.  Worker threads take groups
 * of whole windows (about 64 rows each, as many groups for every thread),
 * each through every layer.
 * Every entry is one chain in a fixed order (cpu/linear.c), so a window's
 * bytes do not depend on the block it is in, its place there, or the
 * thread that computed it.
 *
 * Precision: the embedding, the final LayerNorm, the pooling and the head
 * sum in double; the embedded row plus its learned position is rounded to
 * float once where it enters the first layer; each layer is an encoder
 * layer model (its own double sums, each output rounded once); the final
 * norm's rows are rounded to float once; pooling reads them and the
 * head's logits and softmax stay in double until the probabilities are
 * rounded once.  The embedding and the head are cpu/linear.c's loops; the
 * final norm is the encoder layer's LayerNorm (nn/encoder.c).
 *
 * precision=fast (SattnNetBlock.fast): every linear sums in float as
 * PyTorch float32 does -- the embedding or conv stem (front.c), each
 * layer's Q, K, V and output projections (from its float weights) and
 * feed-forward (its float copy, built at load by sattn_net_fast_init),
 * the head -- by the register-tiled float product (sattn_qk: one FMA chain per
 * entry in index order, so a window's bytes still do not depend on its
 * block or thread); residuals, activations and LayerNorms in float too.
 * The pooling and the head's softmax stay in double (a few hundred
 * operations per window).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
sattn_net_free (SattnNet *net)
{
  if (net == NULL)
    return;
  for (size_t i = 0; net->layer != NULL && i < net->n_layers; i++)
    sattn_model_free (net->layer[i]);
  free (net->layer);
  free (net->embed_wf);
  free (net->embed_bf);
  free (net->conv_wf);
  free (net->conv_bf);
  free (net->head1_wf);
  free (net->head1_bf);
  free (net->head2_wf);
  free (net->head2_bf);
  free (net->embed_wt);
  free (net->embed_b);
  free (net->std_mean);
  free (net->std_std);
  free (net->conv_wt);
  free (net->conv_b);
  free (net->cls);
  free (net->pool_w);
  free (net->pooled_mean);
  free (net->pooled_std);
  free (net->pos);
  free (net->norm_w);
  free (net->norm_b);
  free (net->head1_wt);
  free (net->head1_b);
  free (net->head2_wt);
  free (net->head2_b);
  for (size_t i = 0; net->labels != NULL && i < net->classes; i++)
    free (net->labels[i]);
  free (net->labels);
  for (size_t i = 0; net->meta != NULL && net->meta[i] != NULL; i++)
    free (net->meta[i]);
  free (net->meta);
  free (net);
}

/* ------------------------------------------------------- float copies */

/* n doubles as floats (NULL for NULL); *ok cleared when out of memory. */
static float *
floats_of (const double *d, size_t n, int *ok)
{
  if (d == NULL)
    return NULL;
  float *f = malloc ((n > 0 ? n : 1) * sizeof (float));
  if (f == NULL) {
    *ok = 0;
    return NULL;
  }
  for (size_t i = 0; i < n; i++)
    f[i] = (float) d[i];
  return f;
}

/* Layer ml's feed-forward as floats (w1f ...), which its rows read at
 * precision=fast (sattn_layer_rows' fast); its projections then sum in
 * float from the float weights it has anyway (sattn_project_cols_prec's
 * fast). */
static void
layer_floats (SattnModel *ml, int *ok)
{
  const size_t d = ml->cfg.d_model, dff = ml->cfg.d_ff;
  ml->w1f = floats_of (ml->w1, d * dff, ok);
  ml->b1f = floats_of (ml->b1, dff, ok);
  ml->w2f = floats_of (ml->w2, dff * d, ok);
  ml->b2f = floats_of (ml->b2, d, ok);
}

SattnStatus
sattn_net_fast_init (SattnNet *net)
{
  const size_t D = net->d, H = net->hidden > 0 ? net->hidden : net->classes;
  int ok = 1;
  for (size_t l = 0; l < net->n_layers; l++)
    layer_floats (net->layer[l], &ok);
  net->embed_wf = floats_of (net->embed_wt, net->d_frame * D, &ok);
  net->embed_bf = floats_of (net->embed_b, D, &ok);
  net->conv_wf = floats_of (net->conv_wt, net->conv_c * net->conv_k * D, &ok);
  net->conv_bf = floats_of (net->conv_b, D, &ok);
  net->head1_wf = floats_of (net->head1_wt, D * H, &ok);
  net->head1_bf = floats_of (net->head1_b, H, &ok);
  if (net->hidden > 0) {
    net->head2_wf = floats_of (net->head2_wt, net->hidden * net->classes, &ok);
    net->head2_bf = floats_of (net->head2_b, net->classes, &ok);
  }
  return ok ? SATTN_OK : SATTN_E_NOMEM;
}

/* ------------------------------------------------------------ queries */

SattnModelKind
sattn_model_kind (const SattnModel *m)
{
  return m != NULL && m->net != NULL ? SATTN_MODEL_WHOLE : SATTN_MODEL_LAYER;
}

size_t
sattn_model_layers (const SattnModel *m)
{
  if (m == NULL)
    return 0;
  return m->net != NULL ? m->net->n_layers : 1;
}

size_t
sattn_model_classes (const SattnModel *m)
{
  return m != NULL && m->net != NULL ? m->net->classes : 0;
}

const char *
sattn_model_label (const SattnModel *m, size_t i)
{
  if (m == NULL || m->net == NULL || m->net->labels == NULL ||
      i >= m->net->classes)
    return NULL;
  return m->net->labels[i];
}

size_t
sattn_model_max_window (const SattnModel *m)
{
  return m != NULL && m->net != NULL && m->net->pos != NULL ? m->net->max_window
                                                            : 0;
}

SattnPooling
sattn_model_pooling (const SattnModel *m)
{
  return m != NULL && m->net != NULL ? m->net->pooling : SATTN_POOLING_MEAN;
}

void
sattn_model_contract (const SattnModel *m, SattnModelContract *out)
{
  if (out == NULL)
    return;
  if (m == NULL || m->net == NULL)
    memset (out, 0, sizeof (*out));
  else
    *out = m->net->contract;
}

double
sattn_net_pooled_z (const SattnModel *m, const double *p)
{
  const SattnNet *net = m->net;
  if (net->pooled_mean == NULL)
    return NAN;
  double sum = 0.0;
  for (size_t t = 0; t < net->d; t++) {
    const double u = (p[t] - net->pooled_mean[t]) / net->pooled_std[t];
    sum += u * u;
  }
  return sqrt (sum / (double) net->d);
}

const char *
sattn_model_metadata (const SattnModel *m, const char *key)
{
  if (m == NULL || m->net == NULL || m->net->meta == NULL || key == NULL)
    return NULL;
  for (size_t i = 0; m->net->meta[i] != NULL; i += 2)
    if (strcmp (m->net->meta[i], key) == 0)
      return m->net->meta[i + 1];
  return NULL;
}

/* ------------------------------------------------------------ blocks */

/* Rows per task at least (whole windows). */
#define BLOCK_TASK_ROWS 64
/* Multiply-adds below which a block runs on the caller's thread alone. */
#define BLOCK_PAR_MIN 1e5
/* Rows per thread at least when a window's rows are shared, and the
 * multiple of rows (from the window's first) where ranges are cut. */
#define SPLIT_MIN_ROWS 8
#define SPLIT_ALIGN 8

void
sattn_net_block_free (SattnNetBlock *b)
{
  if (b == NULL)
    return;
  free (b->x);
  free (b->y);
  free (b->kok);
  free (b->qok);
  free (b->q);
  free (b->k);
  free (b->v);
  free (b->o);
  free (b->xn);
  free (b->kt);
  free (b->S);
  free (b->lscr);
  free (b->stats);
  free (b->pooled);
  free (b->hidden);
  free (b->logits);
  free (b->headf);
  free (b->usable);
  free (b->z);
  free (b);
}

/* The widest layer's dimensions: projections, extra keys, row scratch. */
static void
widest (const SattnNet *net, size_t *dq, size_t *dv, size_t *extra,
        size_t *lscr)
{
  *dq = *dv = *extra = *lscr = 0;
  for (size_t l = 0; l < net->n_layers; l++) {
    const SattnModel *ml = net->layer[l];
    *dq = ml->dq > *dq ? ml->dq : *dq;
    *dv = ml->dv > *dv ? ml->dv : *dv;
    *extra = ml->n_extra > *extra ? ml->n_extra : *extra;
    size_t ls = sattn_layer_scratch (ml);
    *lscr = ls > *lscr ? ls : *lscr;
  }
}

size_t
sattn_net_block_bytes (const SattnModel *m, size_t n, size_t max_windows,
                       unsigned threads)
{
  const SattnNet *net = m->net;
  const size_t D = net->d, R = sattn_size_mul (n, max_windows);
  size_t dq, dv, extra, ls;
  widest (net, &dq, &dv, &extra, &ls);
  size_t f = sattn_size_mul (R, 3 * D + 3 * dq + 2 * dv);
  f = sattn_size_add (
      f, sattn_size_mul (threads,
                         sattn_size_add (sattn_size_mul (n, n + extra), ls)));
  size_t b = sattn_size_mul (f, sizeof (float));
  b = sattn_size_add (b, sizeof (SattnNetBlock) + 2 * R);
  b = sattn_size_add (b, sattn_size_mul (max_windows,
                                         sizeof (SattnStats) + sizeof (size_t) +
                                             (D + 1) * sizeof (double)));
  b = sattn_size_add (b, (D + net->hidden + 1) * sizeof (float));
  return sattn_size_add (b, (net->hidden + net->classes + 2) * sizeof (double));
}

SattnNetBlock *
sattn_net_block_new (const SattnModel *m, size_t n, size_t max_windows,
                     SattnPool *pool)
{
  const SattnNet *net = m->net;
  const size_t D = net->d;
  const unsigned T = pool != NULL ? sattn_pool_threads (pool) : 1;
  if (n == 0 || max_windows == 0 ||
      sattn_net_block_bytes (m, n, max_windows, T) == SIZE_MAX)
    return NULL;
  SattnNetBlock *b = calloc (1, sizeof (*b));
  if (b == NULL)
    return NULL;
  size_t dq, dv, extra, ls;
  widest (net, &dq, &dv, &extra, &ls);
  const size_t R = n * max_windows;
  b->n = n;
  b->lead = net->lead;
  b->max_windows = max_windows;
  b->rows = R;
  b->pool = pool;
  b->threads = T;
  b->s_stride = (n * (n + extra) + 15) / 16 * 16;
  b->l_stride = (ls + 15) / 16 * 16;
  b->x = malloc (R * D * sizeof (float));
  b->y = malloc (R * D * sizeof (float));
  b->kok = malloc (R);
  b->qok = malloc (R);
  b->q = malloc (R * dq * sizeof (float));
  b->k = malloc (R * dq * sizeof (float));
  b->v = malloc (R * dv * sizeof (float));
  b->o = malloc (R * dv * sizeof (float));
  b->xn = malloc (R * D * sizeof (float));
  b->kt = malloc (R * dq * sizeof (float));
  b->S = malloc (T * b->s_stride * sizeof (float));
  b->lscr = malloc ((T * b->l_stride + 1) * sizeof (float));
  b->stats = calloc (max_windows, sizeof (SattnStats));
  b->pooled = malloc (max_windows * D * sizeof (double));
  b->usable = calloc (max_windows, sizeof (size_t));
  b->z = malloc (max_windows * sizeof (double));
  b->hidden = malloc ((net->hidden + 1) * sizeof (double));
  b->logits = malloc ((net->classes + 1) * sizeof (double));
  b->headf = malloc ((D + net->hidden + 1) * sizeof (float));
  if (!b->x || !b->y || !b->kok || !b->qok || !b->q || !b->k || !b->v ||
      !b->o || !b->xn || !b->kt || !b->S || !b->lscr || !b->stats ||
      !b->pooled || !b->usable || !b->z || !b->hidden || !b->logits ||
      !b->headf) {
    sattn_net_block_free (b);
    return NULL;
  }
  return b;
}

int
sattn_net_frame_reuse (const SattnModel *m)
{
  return m->net != NULL && m->net->pos == NULL && !m->net->per_window;
}

/* The windows [w0, w1) of a block through every layer, on one thread
 * (worker: its scores and row scratch). */
typedef struct {
  const SattnModel *m;
  SattnNetBlock *b;
  size_t nw, tasks;
  int l0_ready, stats;
  float *weights;
  size_t wwin;
} BlockJob;

/* Rows [r0, r1) of layer ml: norm1 (pre-norm), the Q, K and V projections
 * (RoPE at the row's window position) unless kept, and the frame rule. */
static void
rows_in (const SattnModel *ml, SattnNetBlock *b, const float *in, size_t r0,
         size_t r1, int project)
{
  const size_t D = ml->cfg.d_model, dq = ml->dq, dv = ml->dv, n = b->n;
  const size_t cnt = r1 - r0;

  if (project) {
    const float *xp = in + r0 * D;
    if (ml->cfg.norm_first) {
      sattn_layer_norm1 (ml, b->fast, xp, D, b->xn + r0 * D, D, cnt);
      xp = b->xn + r0 * D;
    }
    sattn_project_cols_prec (ml, b->fast, ml->wq, ml->bq, xp, cnt, D, dq, 0, dq,
                             D, b->q + r0 * dq, dq);
    sattn_project_cols_prec (ml, b->fast, ml->wk, ml->bk, xp, cnt, D, dq, 0, dq,
                             D, b->k + r0 * dq, dq);
    sattn_project_cols_prec (ml, b->fast, ml->wv, ml->bv, xp, cnt, D, dv, 0, dv,
                             D, b->v + r0 * dv, dv);
    for (size_t r = r0; r < r1 && sattn_model_rope (ml); r++)
      sattn_rope_qk (ml, b->q + r * dq, b->k + r * dq, r % n);
  }
  /* The frame rule (as sattn_attend_finish with key and query validity
   * both kok): a row with bad data is neither key nor query; unusable
   * rows get zero Q / K / V so nothing can leak.  Rows whose data are all
   * usable (the common block) need one test, not one per row. */
  if (sattn_frames_ok (ml, cnt, NULL, in + r0 * D, b->q + r0 * dq,
                       b->k + r0 * dq, b->v + r0 * dv)) {
    for (size_t r = r0; r < r1; r++)
      if (!b->kok[r]) {
        memset (b->k + r * dq, 0, dq * sizeof (float));
        memset (b->v + r * dv, 0, dv * sizeof (float));
      }
    return;
  }
  for (size_t r = r0; r < r1; r++) {
    SattnFrameFault data = sattn_frame_fault (ml, 0, in + r * D, b->q + r * dq,
                                              b->k + r * dq, b->v + r * dv);
    b->kok[r] = (uint8_t) (b->kok[r] && data == SATTN_FRAME_OK);
    if (data != SATTN_FRAME_OK)
      memset (b->q + r * dq, 0, dq * sizeof (float));
    if (!b->kok[r]) {
      memset (b->k + r * dq, 0, dq * sizeof (float));
      memset (b->v + r * dv, 0, dv * sizeof (float));
    }
  }
}

/* Window w's keys [i0, i1) of layer ml transposed (kt: dq rows of n). */
static void
transpose_keys (const SattnModel *ml, SattnNetBlock *b, size_t w, size_t i0,
                size_t i1)
{
  const size_t n = b->n, dq = ml->dq;
  const float *k = b->k + w * n * dq;
  float *kt = b->kt + w * n * dq;

  for (size_t t = 0; t < dq; t++)
    for (size_t r = i0; r < i1; r++)
      kt[t * n + r] = k[r * dq + t];
}

/* Window w's queries [q0, q1) of layer ml against all its keys (already
 * transposed), every head in order (its statistics, when kept, summed
 * head after head as for the window alone).  A query row's result does
 * not depend on the rows computed with it. */
static void
attend_rows (const SattnModel *ml, SattnNetBlock *b, const uint8_t *ok,
             size_t w, size_t q0, size_t q1, float *weights, SattnStats *stats,
             unsigned worker)
{
  const size_t H = ml->cfg.heads, n = b->n, dq = ml->dq, dv = ml->dv;
  SattnAttnArgs a = {
    .q = b->q + w * n * dq,
    .ldq = dq,
    .kt = b->kt + w * n * dq,
    .ldkt = n,
    .v = b->v + w * n * dv,
    .ldv = dv,
    .key_ok = ok + w * n,
    .query_ok = ok + w * n,
    .m = n,
    .nk = n,
    .q0 = 0,
    .o = b->o + w * n * dv,
    .weights = weights,
    .sat_threshold = SATTN_DEFAULT_SATURATION,
  };
  for (size_t h = 0; h < H; h++)
    sattn_attend_rows (ml, &a, h, q0, q1, b->S + worker * b->s_stride, stats);
}

/* Window w of layer ml, every row. */
static void
attend (const SattnModel *ml, SattnNetBlock *b, size_t w, float *weights,
        SattnStats *stats, unsigned worker)
{
  transpose_keys (ml, b, w, 0, b->n);
  attend_rows (ml, b, b->kok, w, 0, b->n, weights, stats, worker);
}

/* Rows [r0, r1) of layer ml: the output projection, the layer's per-row
 * parts, the rows that are no longer usable, and after the last layer
 * the final norm. */
static void
rows_out (const SattnModel *ml, const SattnNet *net, SattnNetBlock *b,
          const float *in, float *y, size_t r0, size_t r1, int last,
          unsigned worker)
{
  const size_t D = ml->cfg.d_model, dv = ml->dv;

  sattn_output_project (ml, b->fast, b->o + r0 * dv, r1 - r0, y + r0 * D, D);
  for (size_t i0 = r0; ml->cfg.encoder && i0 < r1; i0 += SATTN_LAYER_ROWS) {
    size_t r = r1 - i0 < SATTN_LAYER_ROWS ? r1 - i0 : SATTN_LAYER_ROWS;
    sattn_layer_rows (ml, b->fast, in + i0 * D, D, y + i0 * D, D, r,
                      b->lscr + worker * b->l_stride, NULL);
  }
  for (size_t r = r0; r < r1; r++)
    if (!b->kok[r])
      memset (y + r * D, 0, D * sizeof (float));
  /* The rows whose output overflowed are no longer usable either. */
  sattn_zero_overflowed_rows (ml, y + r0 * D, r1 - r0, D, b->kok + r0, NULL,
                              NULL);
  /* The final norm of the usable rows (the others stay zeros). */
  if (last && net->final_norm) {
    if (b->fast)
      sattn_norm_rows_f32 (y + r0 * D, D, y + r0 * D, D, r1 - r0, D,
                           net->norm_w, net->norm_b, (float) net->norm_eps);
    else
      sattn_layer_norm_rows (y + r0 * D, D, NULL, 0, y + r0 * D, D, NULL, 0,
                             r1 - r0, D, net->norm_w, net->norm_b,
                             net->norm_eps);
    for (size_t r = r0; r < r1; r++)
      if (!b->kok[r])
        memset (y + r * D, 0, D * sizeof (float));
  }
}

/* Task i of k: the windows [i nw / k, (i + 1) nw / k) of the block,
 * every layer. */
static void
windows_task (void *ctx, size_t task, unsigned worker)
{
  const BlockJob *j = ctx;
  const SattnNet *net = j->m->net;
  SattnNetBlock *b = j->b;
  const size_t n = b->n;
  const size_t w0 = task * j->nw / j->tasks;
  const size_t w1 = (task + 1) * j->nw / j->tasks;
  const size_t r0 = w0 * n, r1 = w1 * n;
  float *a = b->x, *c = b->y;

  for (size_t l = 0; l < net->n_layers; l++) {
    const SattnModel *ml = net->layer[l];
    const int last = l + 1 == net->n_layers;
    rows_in (ml, b, a, r0, r1, !(l == 0 && j->l0_ready));
    for (size_t w = w0; w < w1; w++)
      attend (ml, b, w, last && w == j->wwin ? j->weights : NULL,
              j->stats ? &b->stats[w] : NULL, worker);
    rows_out (ml, net, b, a, c, r0, r1, last, worker);
    float *t = a;
    a = c;
    c = t;
  }
}

/* Few windows on several threads: each window's rows cut into `parts`
 * ranges (tasks = windows x parts), layer by layer, one pool run per
 * layer in two phases: layer l's rows_in of a range and its keys
 * transposed; then, once every key is ready, the range's queries against
 * the whole window and rows_out.  Each row's arithmetic is the same as
 * on one thread; statistics and kept weights are not asked for here
 * (they take the windows_task path). */
typedef struct {
  const BlockJob *j;
  size_t parts, layer;
  float *in, *out; /* the layer's input and output rows */
} SplitJob;

static void
split_range (const SplitJob *sj, size_t task, size_t *w, size_t *i0, size_t *i1)
{
  const size_t n = sj->j->b->n, p = task % sj->parts;
  *w = task / sj->parts;
  *i0 = p * n / sj->parts / SPLIT_ALIGN * SPLIT_ALIGN;
  *i1 = p + 1 == sj->parts
            ? n
            : (p + 1) * n / sj->parts / SPLIT_ALIGN * SPLIT_ALIGN;
}

static void
split_in_task (void *ctx, size_t task, unsigned worker)
{
  const SplitJob *sj = ctx;
  const SattnModel *ml = sj->j->m->net->layer[sj->layer];
  SattnNetBlock *b = sj->j->b;
  size_t w, i0, i1;
  (void) worker;
  split_range (sj, task, &w, &i0, &i1);
  if (i0 == i1)
    return;
  rows_in (ml, b, sj->in, w * b->n + i0, w * b->n + i1,
           !(sj->layer == 0 && sj->j->l0_ready));
  transpose_keys (ml, b, w, i0, i1);
  /* the rows' usability as this layer's keys and queries: rows_out may
   * clear a row's (an overflow) while other ranges still attend to it */
  memcpy (b->qok + w * b->n + i0, b->kok + w * b->n + i0, i1 - i0);
}

static void
split_out_task (void *ctx, size_t task, unsigned worker)
{
  const SplitJob *sj = ctx;
  const SattnNet *net = sj->j->m->net;
  SattnNetBlock *b = sj->j->b;
  size_t w, i0, i1;
  split_range (sj, task, &w, &i0, &i1);
  if (i0 == i1)
    return;
  attend_rows (net->layer[sj->layer], b, b->qok, w, i0, i1, NULL, NULL, worker);
  rows_out (net->layer[sj->layer], net, b, sj->in, sj->out, w * b->n + i0,
            w * b->n + i1, sj->layer + 1 == net->n_layers, worker);
}

static void
run_split (const BlockJob *j, size_t parts)
{
  SattnNetBlock *b = j->b;
  const size_t tasks = j->nw * parts;
  for (size_t l = 0; l < j->m->net->n_layers; l++) {
    SplitJob sj = {
      .j = j,
      .parts = parts,
      .layer = l,
      .in = l % 2 ? b->y : b->x,
      .out = l % 2 ? b->x : b->y,
    };
    sattn_pool_run2 (b->pool, tasks, split_in_task, &sj, tasks, split_out_task,
                     &sj);
  }
}

/* One window's pooled row (D doubles) from its rows x (n of D floats,
 * the first lead of them the CLS's), kok their usability; returns the
 * usable frame rows (0 when the pooled row is not valid: no usable frame
 * row, or a CLS row that is not usable).  Mean, max and attention pool
 * the CLS row with the frames' (as h.mean (1) of a module with a CLS
 * token does); last takes the last usable frame's row. */
static size_t
pool_window (const SattnNet *net, const float *x, const uint8_t *kok, size_t n,
             size_t lead, SattnPooling pooling, double *pooled)
{
  const size_t D = net->d;
  size_t usable = 0, last = 0, rows = 0;
  for (size_t i = lead; i < n; i++)
    if (kok[i]) {
      usable++;
      last = i;
    }
  memset (pooled, 0, D * sizeof (double));
  if (usable == 0 || (pooling == SATTN_POOLING_CLS && !kok[0]))
    return 0;
  for (size_t i = 0; i < n; i++)
    rows += kok[i] != 0;
  switch (pooling) {
    case SATTN_POOLING_LAST:
      for (size_t t = 0; t < D; t++)
        pooled[t] = (double) x[last * D + t];
      break;
    case SATTN_POOLING_CLS:
      for (size_t t = 0; t < D; t++)
        pooled[t] = (double) x[t];
      break;
    case SATTN_POOLING_MAX:
      for (size_t t = 0; t < D; t++)
        pooled[t] = -INFINITY;
      for (size_t i = 0; i < n; i++)
        for (size_t t = 0; kok[i] && t < D; t++)
          pooled[t] = fmax (pooled[t], (double) x[i * D + t]);
      break;
    case SATTN_POOLING_ATTENTION: {
      /* softmax over the usable rows of the learned query's scores, the
       * largest subtracted; weights and sums in double */
      double mx = -INFINITY, sum = 0.0;
      for (size_t i = 0; i < n; i++)
        if (kok[i]) {
          double sc = net->pool_b;
          for (size_t t = 0; t < D; t++)
            sc += net->pool_w[t] * (double) x[i * D + t];
          mx = sc > mx ? sc : mx;
        }
      for (size_t i = 0; i < n; i++) {
        if (!kok[i])
          continue;
        double sc = net->pool_b;
        for (size_t t = 0; t < D; t++)
          sc += net->pool_w[t] * (double) x[i * D + t];
        const double wgt = exp (sc - mx);
        sum += wgt;
        for (size_t t = 0; t < D; t++)
          pooled[t] += wgt * (double) x[i * D + t];
      }
      for (size_t t = 0; t < D; t++)
        pooled[t] /= sum;
      break;
    }
    default:
      for (size_t i = 0; i < n; i++)
        for (size_t t = 0; kok[i] && t < D; t++)
          pooled[t] += (double) x[i * D + t];
      for (size_t t = 0; t < D; t++)
        pooled[t] /= (double) rows;
      break;
  }
  return usable;
}

void
sattn_net_block_run (const SattnModel *m, SattnNetBlock *b, size_t nw,
                     int l0_ready, float *weights, size_t wwin, int stats,
                     SattnPooling pooling, float **out)
{
  const SattnNet *net = m->net;
  const size_t D = net->d, n = b->n, R = nw * n;
  /* Tasks of whole windows, each through every layer (one wake-up per
   * block), enough windows for BLOCK_TASK_ROWS rows: products over that
   * many rows, and tasks small enough that a worker that starts late
   * (a busy machine) still takes its share.  A block of less work than
   * waking the workers costs runs on the caller's thread (as a stream's
   * small runs do; the bytes are the same). */
  double macs = 0.0;
  for (size_t l = 0; l < net->n_layers; l++) {
    const SattnModel *ml = net->layer[l];
    macs += (double) R * ((double) D * (2 * ml->dq + 2 * ml->dv) +
                          2.0 * (double) D * (double) ml->cfg.d_ff +
                          (double) n * (double) (ml->dq + ml->dv));
  }
  /* The windows cut evenly into a multiple of the thread count of tasks
   * (the pool gives each thread an equal range of tasks first): 20
   * windows in groups of 4 would leave one thread 12 of them. */
  const size_t group = (BLOCK_TASK_ROWS + n - 1) / n;
  const int par = macs >= BLOCK_PAR_MIN && b->pool != NULL;
  const size_t T = par ? b->threads : 1;
  size_t tasks = T * ((nw + group * T - 1) / (group * T));
  if (tasks > nw)
    tasks = nw;
  BlockJob j = {
    .m = m,
    .b = b,
    .nw = nw,
    .tasks = tasks,
    .l0_ready = l0_ready,
    .stats = stats,
    .weights = weights,
    .wwin = wwin,
  };
  /* Fewer windows than two per thread: whole-window tasks would leave a
   * thread idle (one window per 10 ms push of a live stream is the
   * common case), so each window's rows are shared instead, when no
   * per-window statistics or weights are kept. */
  if (par && nw < 2 * T && !stats && weights == NULL &&
      b->n >= 2 * SPLIT_MIN_ROWS)
    run_split (&j, T);
  else
    sattn_pool_run (par ? b->pool : NULL, tasks, windows_task, &j);
  float *a = net->n_layers % 2 ? b->y : b->x;
  *out = a;

  /* Pooling per window, over its usable frame rows in order. */
  for (size_t w = 0; w < nw; w++) {
    b->usable[w] = pool_window (net, a + w * n * D, b->kok + w * n, n, b->lead,
                                pooling, b->pooled + w * D);
    b->z[w] = b->usable[w] > 0 ? sattn_net_pooled_z (m, b->pooled + w * D)
                               : NAN;
  }
}

/* ------------------------------------------------------------ compute */

/* Rows and columns of a float product computed at a time into a stack
 * buffer before they are widened. */
#define FAST_ROWS 16
#define FAST_COLS 256

void
sattn_net_linear_f32 (const float *x, size_t ldx, size_t rows, const float *Wt,
                      const float *b, size_t din, size_t n, double *y,
                      size_t ldy)
{
  float t[FAST_ROWS * FAST_COLS];
  for (size_t c0 = 0; c0 < n; c0 += FAST_COLS) {
    const size_t nc = n - c0 < FAST_COLS ? n - c0 : FAST_COLS;
    for (size_t i0 = 0; i0 < rows; i0 += FAST_ROWS) {
      const size_t r = rows - i0 < FAST_ROWS ? rows - i0 : FAST_ROWS;
      if (din > 0)
        sattn_qk (x + i0 * ldx, ldx, Wt + c0, n, r, nc, din, t, nc);
      else
        memset (t, 0, r * nc * sizeof (float));
      if (b != NULL)
        sattn_add_bias (t, nc, r, b + c0, nc);
      for (size_t i = 0; i < r; i++)
        for (size_t c = 0; c < nc; c++)
          y[(i0 + i) * ldy + c0 + c] = (double) t[i * nc + c];
    }
  }
}

void
sattn_net_embed (const SattnModel *m, const float *x, size_t rows, double *e,
                 int fast)
{
  const SattnNet *net = m->net;
  if (fast)
    sattn_net_linear_f32 (x, net->d_frame, rows, net->embed_wf, net->embed_bf,
                          net->d_frame, net->d, e, net->d);
  else
    sattn_linear_fd (x, net->d_frame, rows, net->embed_wt, net->d, net->embed_b,
                     net->d_frame, net->d, e, net->d);
}

/* The head of precision=fast: the logits z (C doubles) from the pooled
 * row rounded to float, each linear summed in float, the activation in
 * float (as PyTorch float32). */
static void
logits_f32 (const SattnNet *net, SattnNetBlock *b, const double *pooled,
            double *z)
{
  const size_t C = net->classes, D = net->d, Hd = net->hidden;
  float *p = b->headf, *h = p + D;
  for (size_t t = 0; t < D; t++)
    p[t] = (float) pooled[t];
  if (Hd == 0) {
    sattn_net_linear_f32 (p, D, 1, net->head1_wf, net->head1_bf, D, C, z, C);
    return;
  }
  double *hd = b->hidden;
  sattn_net_linear_f32 (p, D, 1, net->head1_wf, net->head1_bf, D, Hd, hd, Hd);
  for (size_t j = 0; j < Hd; j++)
    h[j] = (float) hd[j];
  if (net->head_act == SATTN_ACTIVATION_GELU)
    sattn_gelu_f32 (h, Hd);
  else
    for (size_t j = 0; j < Hd; j++)
      h[j] = h[j] > 0.0f ? h[j] : 0.0f;
  sattn_net_linear_f32 (h, Hd, 1, net->head2_wf, net->head2_bf, Hd, C, z, C);
}

int
sattn_net_classify (const SattnModel *m, SattnNetBlock *b, const double *pooled,
                    float *probs)
{
  const SattnNet *net = m->net;
  const size_t C = net->classes, D = net->d;
  double *z = b->logits;

  if (b->fast) {
    logits_f32 (net, b, pooled, z);
  } else if (net->hidden > 0) {
    double *h = b->hidden;
    sattn_linear_d (pooled, D, 1, net->head1_wt, net->hidden, net->head1_b, D,
                    net->hidden, h, net->hidden);
    for (size_t j = 0; j < net->hidden; j++) {
      double v = h[j];
      h[j] = net->head_act == SATTN_ACTIVATION_GELU
                 ? 0.5 * v * (1.0 + erf (v * M_SQRT1_2))
                 : (v > 0.0 ? v : 0.0);
    }
    sattn_linear_d (h, net->hidden, 1, net->head2_wt, C, net->head2_b,
                    net->hidden, C, z, C);
  } else {
    sattn_linear_d (pooled, D, 1, net->head1_wt, C, net->head1_b, D, C, z, C);
  }
  double mx = -INFINITY;
  for (size_t c = 0; c < C; c++) {
    if (!isfinite (z[c])) {
      memset (probs, 0, C * sizeof (float));
      return 0;
    }
    mx = z[c] > mx ? z[c] : mx;
  }
  double sum = 0.0;
  for (size_t c = 0; c < C; c++) {
    z[c] = exp (z[c] - mx);
    sum += z[c];
  }
  for (size_t c = 0; c < C; c++)
    probs[c] = (float) (z[c] / sum);
  return 1;
}

/* The one-shot window's rows into block window 0 from frames x (n × F)
 * and the key mask, through the front end kept per frame (e: n × D
 * doubles scratch). */
static void
attend_rows_kept (const SattnModel *m, SattnNetBlock *b, const float *x,
                  size_t n, const SattnMask *mask, double *e)
{
  const SattnNet *net = m->net;
  const size_t F = net->d_frame, D = net->d;
  /* Every frame's embedding in one product (rows with non-finite samples
   * are not read). */
  sattn_net_embed (m, x, n, e, 0);
  for (size_t i = 0; i < n; i++) {
    int ok = (mask == NULL || mask->key_valid == NULL || mask->key_valid[i]) &&
             sattn_finite (x + i * F, F);
    float *xr = b->x + i * D;
    if (ok) {
      for (size_t t = 0; t < D; t++) {
        double v = e[i * D + t] +
                   (net->pos != NULL ? net->pos[i * D + t] : 0.0);
        xr[t] = (float) v;
      }
      ok = sattn_finite (xr, D);
    }
    if (!ok)
      memset (xr, 0, D * sizeof (float));
    b->kok[i] = (uint8_t) ok;
  }
}

/* The same through a per-window front end (scratch: n (F + 2) + the
 * front end's doubles, ok: n bytes). */
static void
attend_rows_window (const SattnModel *m, SattnNetBlock *b, const float *x,
                    size_t n, const SattnMask *mask, double *scratch,
                    uint8_t *ok)
{
  const size_t F = m->net->d_frame;
  double *xs = scratch, *ss = xs + n * F, *raw = ss + n;
  for (size_t i = 0; i < n; i++) {
    ok[i] = (mask == NULL || mask->key_valid == NULL || mask->key_valid[i]) &&
            sattn_finite (x + i * F, F) &&
            sattn_net_standardize (m, x + i * F, xs + i * F, ss + i, raw + i);
    if (!ok[i]) {
      memset (xs + i * F, 0, F * sizeof (double));
      ss[i] = 0.0;
    }
  }
  sattn_net_front_window (m, xs, ss, ok, n, b->x, b->kok, raw + n, NULL, 0);
}

SattnStatus
sattn_net_attend (const SattnModel *m, const float *x, size_t n,
                  const SattnMask *mask, float *out, float *weights,
                  SattnStats *stats)
{
  const SattnNet *net = m->net;
  const size_t F = net->d_frame, D = net->d, L = net->lead;
  if (net->pos != NULL && n > net->max_window)
    return SATTN_E_SHAPE;
  SattnNetBlock *b = sattn_net_block_new (m, n + L, 1, NULL);
  const size_t nscr = net->per_window
                          ? sattn_size_add (sattn_size_mul (n, F + 2),
                                            sattn_net_front_scratch (m, n))
                          : sattn_size_mul (n, D);
  double *e = nscr < SIZE_MAX / sizeof (double)
                  ? malloc (nscr * sizeof (double))
                  : NULL;
  uint8_t *ok = malloc (n + 1);
  /* With a CLS row the last layer's weights are (n + 1) x (n + 1) per
   * head; the caller's n x n are the frames' rows and columns. */
  const size_t H = m->cfg.heads;
  float *wl = weights != NULL && L > 0
                  ? malloc (
                        sattn_size_mul (H * (n + L), (n + L) * sizeof (float)))
                  : NULL;
  if (b == NULL || e == NULL || ok == NULL ||
      (weights != NULL && L > 0 && wl == NULL)) {
    sattn_net_block_free (b);
    free (e);
    free (ok);
    free (wl);
    return SATTN_E_NOMEM;
  }
  if (net->per_window)
    attend_rows_window (m, b, x, n, mask, e, ok);
  else
    attend_rows_kept (m, b, x, n, mask, e);
  for (size_t i = 0; stats && i < n; i++) {
    stats->masked_keys += !b->kok[L + i];
    stats->invalid_frames += !b->kok[L + i];
  }
  /* The attention's statistics summed into the caller's, row after row
   * (as for any window). */
  float *rows;
  if (stats)
    b->stats[0] = *stats;
  sattn_net_block_run (m, b, 1, 0, wl != NULL ? wl : weights, 0, stats != NULL,
                       net->pooling, &rows);
  if (stats)
    *stats = b->stats[0];
  for (size_t h = 0; wl != NULL && h < H; h++)
    for (size_t i = 0; i < n; i++)
      memcpy (weights + (h * n + i) * n,
              wl + (h * (n + L) + L + i) * (n + L) + L, n * sizeof (float));
  for (size_t i = 0; i < n; i++) {
    if (b->kok[L + i])
      memcpy (out + i * D, rows + (L + i) * D, D * sizeof (float));
    else
      memset (out + i * D, 0, D * sizeof (float));
  }
  if (stats) {
    stats->windows++;
    stats->frames += n;
  }
  sattn_net_block_free (b);
  free (e);
  free (ok);
  free (wl);
  return SATTN_OK;
}
