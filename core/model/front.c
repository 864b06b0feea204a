/* A whole model's front end (docs/models.md): the per-feature
 * standardisation, the per-window RMS / power normalisation, the Linear
 * per frame or the Conv1d stem, the CLS row and the learned positions,
 * from a window's frames to the rows its first layer takes.
 *
 * Precision: everything in double; each row rounded to float once where
 * it enters the first layer (as the embedding of net.c).  precision=fast:
 * the Linear or the conv and its activation in float (front_f32), the
 * normalisations as in exact mode.  A linear front
 * end without a per-window part is net.c's sattn_net_embed instead (its
 * standardisation folded into the weights by the loader), computed once
 * per frame.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include <math.h>
#include <string.h>

int
sattn_net_standardize (const SattnModel *m, const float *x, double *xs,
                       double *ss, double *raw)
{
  const SattnNet *net = m->net;
  const size_t F = net->d_frame;
  double s2 = 0.0, r2 = 0.0;
  for (size_t f = 0; f < F; f++) {
    const double v = (double) x[f];
    r2 += v * v;
    xs[f] = net->std_mean != NULL ? (v - net->std_mean[f]) / net->std_std[f]
                                  : v;
    s2 += xs[f] * xs[f];
  }
  *ss = s2;
  *raw = r2;
  return isfinite (s2) && isfinite (r2);
}

double
sattn_net_window_rms (const double *raw, const uint8_t *ok, size_t n,
                      size_t values)
{
  double sum = 0.0;
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (ok[i]) {
      sum += raw[i];
      u++;
    }
  return u > 0 ? sqrt (sum / ((double) u * (double) values)) : NAN;
}

size_t
sattn_net_front_scratch (const SattnModel *m, size_t n)
{
  const SattnNet *net = m->net;
  const size_t g = net->conv ? net->conv_c * net->conv_k : net->d_frame;
  /* e, g, and precision=fast's g as floats (half as many doubles, whole)
   * and a row of D floats */
  return sattn_size_add (sattn_size_mul (n + net->lead, net->d),
                         sattn_size_add (sattn_size_mul (n, g + (g + 1) / 2),
                                         net->d));
}

/* The per-window normalisation's divisor: 1 without one, 0 for a window
 * with nothing in it (its rows then see zeros). */
static double
divisor (const SattnNet *net, const double *ss, const uint8_t *ok, size_t n)
{
  if (net->input_norm == 0)
    return 1.0;
  double sum = 0.0;
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (ok[i]) {
      sum += ss[i];
      u++;
    }
  if (u == 0)
    return 0.0;
  return sqrt (net->in_gain * sum / ((double) u * (double) net->d_frame) +
               net->in_eps);
}

/* The conv stem's input rows: row i holds the C K values its output row
 * reads (time steps i S - P + k L, channel c, at c K + k), zeros outside
 * the window, each divided by r (inv = 1 / r, 0 when r is 0). */
static void
conv_gather (const SattnNet *net, const double *xs, size_t n, double inv,
             double *g)
{
  const size_t C = net->conv_c, S = net->conv_s, K = net->conv_k;
  const size_t F = net->d_frame, steps = n * S;
  for (size_t i = 0; i < n; i++) {
    double *gr = g + i * C * K;
    for (size_t k = 0; k < K; k++) {
      /* u = i S - P + k L, as a signed step index */
      const long long u = (long long) (i * S) - (long long) net->conv_p +
                          (long long) (k * net->conv_l);
      const int in = u >= 0 && (unsigned long long) u < steps;
      const size_t fr = in ? (size_t) u / S : 0, t = in ? (size_t) u % S : 0;
      for (size_t c = 0; c < C; c++)
        gr[c * K + k] = in ? xs[fr * F + t * C + c] * inv : 0.0;
    }
  }
}

static double
activate (int act, double v)
{
  if (act == 1)
    return v > 0.0 ? v : 0.0;
  if (act == 2)
    return 0.5 * v * (1.0 + erf (v * M_SQRT1_2));
  return v;
}

/* precision=fast's front end: the n rows g (G doubles each, values the
 * front end's Linear or conv reads) rounded to float into gf (n G
 * floats), the product summed in float (sattn_qk, the bias added once)
 * and the conv's activation in float, into the frames' rows x (n × D
 * floats), as PyTorch float32. */
static void
front_f32 (const SattnNet *net, const double *g, size_t n, size_t G, float *gf,
           float *x)
{
  const size_t D = net->d;
  const float *w = net->conv ? net->conv_wf : net->embed_wf;
  const float *b = net->conv ? net->conv_bf : net->embed_bf;
  for (size_t i = 0; i < n * G; i++)
    gf[i] = (float) g[i];
  sattn_qk (gf, G, w, D, n, D, G, x, D);
  if (b != NULL)
    sattn_add_bias (x, D, n, b, D);
  if (net->conv && net->conv_act == 2)
    sattn_gelu_f32 (x, n * D);
  for (size_t i = 0; i < n * D && net->conv && net->conv_act == 1; i++)
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* The window's rows x (lead + n of D floats) finished: the CLS row, each
 * frame's row (from e, D doubles per row after the lead's, or with e
 * NULL x's own float row) plus its learned position, rounded once;
 * unusable rows (and rows that overflow float32 here) zeros, kok set.
 * Returns the usable frame rows. */
static size_t
finish_rows (const SattnNet *net, const double *e, const uint8_t *ok, size_t n,
             float *x, uint8_t *kok, uint64_t *overflow)
{
  const size_t D = net->d, L = net->lead;
  size_t usable = 0;
  for (size_t i = 0; i < n + L; i++) {
    float *xr = x + i * D;
    const double *p = net->pos ? net->pos + i * D : NULL;
    const double *er = i < L ? net->cls : e != NULL ? e + (i - L) * D : NULL;
    int use = i < L || ok[i - L];
    for (size_t t = 0; use && er != NULL && t < D; t++)
      xr[t] = (float) (p ? er[t] + p[t] : er[t]);
    for (size_t t = 0; use && er == NULL && p != NULL && t < D; t++)
      xr[t] = (float) ((double) xr[t] + p[t]);
    if (use && !sattn_finite (xr, D)) {
      /* A row that overflows float32 here is unusable. */
      use = 0;
      if (overflow)
        (*overflow)++;
    }
    if (!use)
      memset (xr, 0, D * sizeof (float));
    kok[i] = (uint8_t) use;
    usable += use && i >= L;
  }
  return usable;
}

size_t
sattn_net_front_window (const SattnModel *m, const double *xs, const double *ss,
                        const uint8_t *ok, size_t n, float *x, uint8_t *kok,
                        double *scratch, uint64_t *overflow, int fast)
{
  const SattnNet *net = m->net;
  const size_t D = net->d, F = net->d_frame, L = net->lead;
  double *e = scratch, *g = scratch + (n + L) * D;
  const double r = divisor (net, ss, ok, n);
  const double inv = r > 0.0 ? 1.0 / r : 0.0;

  const size_t G = net->conv ? net->conv_c * net->conv_k : F;
  if (net->conv)
    conv_gather (net, xs, n, inv, g);
  else
    for (size_t i = 0; i < n * F; i++)
      g[i] = xs[i] * inv;
  if (fast) {
    front_f32 (net, g, n, G, (float *) (void *) (g + n * G), x + L * D);
    return finish_rows (net, NULL, ok, n, x, kok, overflow);
  }
  if (net->conv)
    sattn_linear_d (g, G, n, net->conv_wt, D, net->conv_b, G, D, e, D);
  else
    sattn_linear_d (g, F, n, net->embed_wt, D, net->embed_b, F, D, e, D);
  for (size_t i = 0; i < n * D && net->conv && net->conv_act != 0; i++)
    e[i] = activate (net->conv_act, e[i]);
  return finish_rows (net, e, ok, n, x, kok, overflow);
}
