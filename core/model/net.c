/* Whole models (SATTN_MODEL_WHOLE): [embed] -> layers[N] -> [final norm]
 * -> [pooling] -> [head], each window one sequence.  The model's parts
 * and the computation of one window; the loader (io/load.c) builds them
 * and the per-window executor (stream/window.c) runs them.
 *
 * Precision: the embedding, the final LayerNorm, the pooling and the head
 * sum in double; the embedded row plus its learned position is rounded to
 * float once where it enters the first layer; each layer is an encoder
 * layer model (sattn_attend_run: its own double sums, each output rounded
 * once); the final norm's rows are rounded to float once; pooling reads
 * them and the head's logits and softmax stay in double until the
 * probabilities are rounded once.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "internal.h"

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
  free (net->embed_wt); free (net->embed_b); free (net->pos);
  free (net->norm_w); free (net->norm_b);
  free (net->head1_wt); free (net->head1_b);
  free (net->head2_wt); free (net->head2_b);
  for (size_t i = 0; net->labels != NULL && i < net->classes; i++)
    free (net->labels[i]);
  free (net->labels);
  for (size_t i = 0; net->meta != NULL && net->meta[i] != NULL; i++)
    free (net->meta[i]);
  free (net->meta);
  free (net);
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
  return m != NULL && m->net != NULL && m->net->pos != NULL
      ? m->net->max_window : 0;
}

SattnPooling
sattn_model_pooling (const SattnModel *m)
{
  return m != NULL && m->net != NULL ? m->net->pooling : SATTN_POOLING_MEAN;
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

/* ------------------------------------------------------------ scratch */

struct SattnNetScratch {
  size_t n;
  int l0_ready;             /* scr[0] holds the first layer's q, k, v */
  SattnAttendScratch *scr;  /* one per layer (their d_ff may differ) */
  float *y;                 /* n × D */
  double *hidden, *logits;  /* head */
};

void
sattn_net_scratch_free (SattnNetScratch *w)
{
  if (w == NULL)
    return;
  for (size_t i = 0; w->scr != NULL && i < w->n; i++)
    sattn_attend_scratch_free (&w->scr[i]);
  free (w->scr);
  free (w->y);
  free (w->hidden);
  free (w->logits);
  free (w);
}

SattnNetScratch *
sattn_net_scratch_new (const SattnModel *m, size_t n)
{
  const SattnNet *net = m->net;
  SattnNetScratch *w = calloc (1, sizeof (*w));
  if (w == NULL || n == 0 || n > SIZE_MAX / sizeof (float) / net->d) {
    free (w);
    return NULL;
  }
  w->scr = calloc (net->n_layers, sizeof (*w->scr));
  w->y = malloc (n * net->d * sizeof (float));
  w->hidden = malloc ((net->hidden + 1) * sizeof (double));
  w->logits = malloc ((net->classes + 1) * sizeof (double));
  if (w->scr == NULL || w->y == NULL || w->hidden == NULL ||
      w->logits == NULL) {
    sattn_net_scratch_free (w);
    return NULL;
  }
  for (size_t i = 0; i < net->n_layers; i++) {
    if (sattn_attend_scratch_new (net->layer[i], n, &w->scr[i]) != SATTN_OK) {
      sattn_net_scratch_free (w);
      return NULL;
    }
    w->n = i + 1;
  }
  w->n = net->n_layers;
  return w;
}

size_t
sattn_net_scratch_bytes (const SattnModel *m, size_t n)
{
  const SattnNet *net = m->net;
  size_t b = sizeof (SattnNetScratch) + n * net->d * sizeof (float) +
      (net->hidden + net->classes + 2) * sizeof (double);
  for (size_t i = 0; i < net->n_layers; i++)
    b += sizeof (SattnAttendScratch) +
        sattn_attend_scratch_bytes (net->layer[i], n);
  return b;
}

SattnAttendScratch *
sattn_net_layer0 (SattnNetScratch *w, int **ready)
{
  *ready = &w->l0_ready;
  return &w->scr[0];
}

int
sattn_net_frame_reuse (const SattnModel *m)
{
  return m->net != NULL && m->net->pos == NULL;
}

/* ------------------------------------------------------------ compute */

/* y (n values) = x (din values, double) W^T + b with Wt din × n, summed
 * in order from the bias. */
static void
dense (const double *x, size_t din, const double *Wt, const double *b,
       size_t n, double *y)
{
  for (size_t j = 0; j < n; j++)
    y[j] = b != NULL ? b[j] : 0.0;
  for (size_t i = 0; i < din; i++) {
    const double xi = x[i];
    const double *restrict w = Wt + i * n;
    for (size_t j = 0; j < n; j++)
      y[j] += xi * w[j];
  }
}

void
sattn_net_embed (const SattnModel *m, const float *x, size_t rows, double *e)
{
  const SattnNet *net = m->net;
  const size_t F = net->d_frame, D = net->d;
  double xd[256];
  for (size_t r = 0; r < rows; r++) {
    double *er = e + r * D;
    for (size_t j = 0; j < D; j++)
      er[j] = net->embed_b != NULL ? net->embed_b[j] : 0.0;
    for (size_t i0 = 0; i0 < F; i0 += 256) {
      size_t c = F - i0 < 256 ? F - i0 : 256;
      for (size_t i = 0; i < c; i++)
        xd[i] = (double) x[r * F + i0 + i];
      for (size_t i = 0; i < c; i++) {
        const double xi = xd[i];
        const double *restrict w = net->embed_wt + (i0 + i) * D;
        for (size_t j = 0; j < D; j++)
          er[j] += xi * w[j];
      }
    }
  }
}

/* LayerNorm of x (d floats) into y (floats, rounded once), in double. */
static void
final_norm (const SattnNet *net, float *x)
{
  const size_t d = net->d;
  double sum = 0.0, var = 0.0;
  for (size_t t = 0; t < d; t++)
    sum += (double) x[t];
  const double mean = sum / (double) d;
  for (size_t t = 0; t < d; t++) {
    double e = (double) x[t] - mean;
    var += e * e;
  }
  const double inv = 1.0 / sqrt (var / (double) d + net->norm_eps);
  for (size_t t = 0; t < d; t++) {
    double v = ((double) x[t] - mean) * inv;
    if (net->norm_w != NULL)
      v *= net->norm_w[t];
    if (net->norm_b != NULL)
      v += net->norm_b[t];
    x[t] = (float) v;
  }
}

size_t
sattn_net_window (const SattnModel *m, SattnNetScratch *w, float *x,
                  uint8_t *kok, float *weights, SattnStats *stats,
                  SattnPooling pooling, double *pooled)
{
  const SattnNet *net = m->net;
  const size_t D = net->d, n = w->scr[0].n;
  float *a = x, *b = w->y;

  for (size_t l = 0; l < net->n_layers; l++) {
    SattnMask mask = { kok, kok, NULL };
    SattnAttendScratch *scr = &w->scr[l];
    float *wl = l + 1 == net->n_layers ? weights : NULL;
    if (l == 0 && w->l0_ready)
      sattn_attend_finish (net->layer[l], a, n, &mask, b, wl, stats, 0, scr);
    else
      sattn_attend_run (net->layer[l], a, n, &mask, b, wl, stats, 0, scr);
    memcpy (kok, scr->qok, n);
    float *t = a;
    a = b;
    b = t;
  }
  w->l0_ready = 0;
  if (a != x)
    memcpy (x, a, n * D * sizeof (float));
  size_t usable = 0;
  for (size_t i = 0; i < n; i++) {
    if (!kok[i])
      continue;
    if (net->final_norm)
      final_norm (net, x + i * D);
    usable++;
  }
  if (pooled == NULL)
    return usable;
  memset (pooled, 0, D * sizeof (double));
  if (usable == 0)
    return 0;
  if (pooling == SATTN_POOLING_LAST) {
    size_t i = n;
    while (!kok[i - 1])
      i--;
    for (size_t t = 0; t < D; t++)
      pooled[t] = (double) x[(i - 1) * D + t];
  } else {
    for (size_t i = 0; i < n; i++)
      if (kok[i])
        for (size_t t = 0; t < D; t++)
          pooled[t] += (double) x[i * D + t];
    for (size_t t = 0; t < D; t++)
      pooled[t] /= (double) usable;
  }
  return usable;
}

int
sattn_net_classify (const SattnModel *m, SattnNetScratch *w,
                    const double *pooled, float *probs)
{
  const SattnNet *net = m->net;
  const size_t C = net->classes;
  double *z = w->logits;

  if (net->hidden > 0) {
    double *h = w->hidden;
    dense (pooled, net->d, net->head1_wt, net->head1_b, net->hidden, h);
    for (size_t j = 0; j < net->hidden; j++) {
      double v = h[j];
      h[j] = net->head_act == SATTN_ACTIVATION_GELU
          ? 0.5 * v * (1.0 + erf (v * M_SQRT1_2)) : (v > 0.0 ? v : 0.0);
    }
    dense (h, net->hidden, net->head2_wt, net->head2_b, C, z);
  } else {
    dense (pooled, net->d, net->head1_wt, net->head1_b, C, z);
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

SattnStatus
sattn_net_attend (const SattnModel *m, const float *x, size_t n,
                  const SattnMask *mask, float *out, float *weights,
                  SattnStats *stats)
{
  const SattnNet *net = m->net;
  const size_t F = net->d_frame, D = net->d;
  if (net->pos != NULL && n > net->max_window)
    return SATTN_E_SHAPE;
  SattnNetScratch *w = sattn_net_scratch_new (m, n);
  double *e = malloc (D * sizeof (double));
  uint8_t *kok = malloc (n);
  if (w == NULL || e == NULL || kok == NULL) {
    sattn_net_scratch_free (w);
    free (e);
    free (kok);
    return SATTN_E_NOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    int ok = (mask == NULL || mask->key_valid == NULL || mask->key_valid[i])
        && sattn_finite (x + i * F, F);
    if (ok) {
      sattn_net_embed (m, x + i * F, 1, e);
      for (size_t t = 0; t < D; t++) {
        double v = e[t] + (net->pos != NULL ? net->pos[i * D + t] : 0.0);
        out[i * D + t] = (float) v;
      }
      ok = sattn_finite (out + i * D, D);
    }
    if (!ok)
      memset (out + i * D, 0, D * sizeof (float));
    kok[i] = (uint8_t) ok;
    if (stats) {
      stats->masked_keys += !ok;
      stats->invalid_frames += !ok;
    }
  }
  sattn_net_window (m, w, out, kok, weights, stats, net->pooling, NULL);
  for (size_t i = 0; i < n; i++)
    if (!kok[i])
      memset (out + i * D, 0, D * sizeof (float));
  if (stats) {
    stats->windows++;
    stats->frames += n;
  }
  sattn_net_scratch_free (w);
  free (e);
  free (kok);
  return SATTN_OK;
}
