/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "reference.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t
ref_extra_keys (const RefModel *m)
{
  return (m->bias_k ? 1u : 0u) + (m->add_zero_attn ? 1u : 0u);
}

static void *
xcalloc (size_t n, size_t sz)
{
  void *p = calloc (n ? n : 1, sz);
  if (!p)
    abort ();
  return p;
}

/* y (n × d_out) = x (n × d_in) W^T + b, in double; W NULL = identity. */
static void
project (const float *W, const float *b, const double *x, size_t n, size_t d_in,
         size_t d_out, double *y)
{
  for (size_t i = 0; i < n; i++) {
    const double *xi = x + i * d_in;
    for (size_t o = 0; o < d_out; o++) {
      double acc = 0.0;
      if (W) {
        const float *w = W + o * d_in;
        for (size_t k = 0; k < d_in; k++)
          acc += (double) w[k] * xi[k];
      } else {
        acc = xi[o];
      }
      if (b)
        acc += b[o];
      y[i * d_out + o] = acc;
    }
  }
}

static void
project_d (const float *W, const float *b, const double *x, size_t d_in,
           size_t d_out, double *y)
{
  for (size_t o = 0; o < d_out; o++) {
    double acc = 0.0;
    if (W) {
      const float *w = W + o * d_in;
      for (size_t k = 0; k < d_in; k++)
        acc += (double) w[k] * x[k];
    } else {
      acc = x[o];
    }
    if (b)
      acc += b[o];
    y[o] = acc;
  }
}

/* Press et al.'s get_slopes: power of two n: start = 2^(-8/n), slope_i =
 * start^(i+1); otherwise the slopes of the closest lower power of two p,
 * then get_slopes (2p)[0::2][:n - p]. */
static void
slopes_pow2 (size_t n, double *out)
{
  double start = pow (2.0, -(pow (2.0, -(log2 ((double) n) - 3.0))));
  for (size_t i = 0; i < n; i++)
    out[i] = start * pow (start, (double) i);
}

void
ref_alibi_slopes (size_t heads, double *slopes)
{
  size_t p = 1;
  while (p * 2 <= heads)
    p *= 2;
  slopes_pow2 (p, slopes);
  if (p == heads)
    return;
  double *two = xcalloc (2 * p, sizeof *two);
  slopes_pow2 (2 * p, two);
  for (size_t i = 0; i < heads - p; i++)
    slopes[p + i] = two[2 * i];
  free (two);
}

/* Rotate the rows of Y (n × heads*d_head) by the model's RoPE. */
static void
rope_rows (const RefModel *m, double *Y, size_t n)
{
  const size_t dh = m->d_head, half = dh / 2, dq = m->heads * dh;
  const int inter = m->positions == 2;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < half; k++) {
      long double th = powl ((long double) m->rope_base,
                             -(long double) (2 * k) / (long double) dh);
      long double ang = (long double) (m->pos0 + i) * th;
      double c = (double) cosl (ang), s = (double) sinl (ang);
      size_t ia = inter ? 2 * k : k, ib = inter ? 2 * k + 1 : k + half;
      for (size_t h = 0; h < m->heads; h++) {
        double *y = Y + i * dq + h * dh;
        double a = y[ia], b = y[ib];
        y[ia] = a * c - b * s;
        y[ib] = b * c + a * s;
      }
    }
}

static int
row_finite (const double *x, size_t d)
{
  for (size_t k = 0; k < d; k++)
    if (!isfinite (x[k]))
      return 0;
  return 1;
}

static void attend_d (const RefModel *m, const double *x, size_t n,
                      const uint8_t *key_valid, const uint8_t *query_valid,
                      const uint8_t *allow, double *out, double *weights,
                      RefStats *st);

static double *
to_double (const float *x, size_t n)
{
  double *y = xcalloc (n, sizeof *y);
  for (size_t i = 0; i < n; i++)
    y[i] = x[i];
  return y;
}

void
ref_attend (const RefModel *m, const float *x, size_t n,
            const uint8_t *key_valid, const uint8_t *query_valid,
            const uint8_t *allow, double *out, double *weights, RefStats *st)
{
  double *xd = to_double (x, n * m->d_model);
  attend_d (m, xd, n, key_valid, query_valid, allow, out, weights, st);
  free (xd);
}

/* LayerNorm of d values, in place. */
static void
layer_norm (double *y, size_t d, const float *w, const float *b, double eps)
{
  double mean = 0.0, var = 0.0;
  for (size_t t = 0; t < d; t++)
    mean += y[t];
  mean /= (double) d;
  for (size_t t = 0; t < d; t++)
    var += (y[t] - mean) * (y[t] - mean);
  var /= (double) d;
  for (size_t t = 0; t < d; t++)
    y[t] = (y[t] - mean) / sqrt (var + eps) * (w ? w[t] : 1.0) +
           (b ? b[t] : 0.0);
}

/* out (d) = linear2 (act (linear1 (u))). */
static void
feed_forward (const RefLayer *l, size_t d, const double *u, double *out)
{
  double *h = xcalloc (l->d_ff, sizeof *h);
  project_d (l->w1, l->b1, u, d, l->d_ff, h);
  for (size_t t = 0; t < l->d_ff; t++)
    h[t] = l->gelu ? 0.5 * h[t] * (1.0 + erf (h[t] / sqrt (2.0)))
                   : (h[t] > 0.0 ? h[t] : 0.0);
  project_d (l->w2, l->b2, h, l->d_ff, d, out);
  free (h);
}

void
ref_encoder (const RefModel *m, const RefLayer *l, const double *x, size_t n,
             double *out)
{
  const size_t d = m->d_model;
  double *u = xcalloc (n * d, sizeof *u);
  double *a = xcalloc (n * d, sizeof *a);
  double *f = xcalloc (d, sizeof *f);
  memcpy (u, x, n * d * sizeof *u);
  if (l->norm_first)
    for (size_t i = 0; i < n; i++)
      layer_norm (u + i * d, d, l->n1w, l->n1b, l->eps);
  attend_d (m, u, n, NULL, NULL, NULL, a, NULL, NULL);
  for (size_t i = 0; i < n; i++) {
    double *y = out + i * d;
    for (size_t t = 0; t < d; t++)
      y[t] = x[i * d + t] + a[i * d + t];
    if (!l->norm_first) {
      layer_norm (y, d, l->n1w, l->n1b, l->eps);
      feed_forward (l, d, y, f);
      for (size_t t = 0; t < d; t++)
        y[t] += f[t];
      layer_norm (y, d, l->n2w, l->n2b, l->eps);
    } else {
      memcpy (u + i * d, y, d * sizeof *u);
      layer_norm (u + i * d, d, l->n2w, l->n2b, l->eps);
      feed_forward (l, d, u + i * d, f);
      for (size_t t = 0; t < d; t++)
        y[t] += f[t];
    }
  }
  free (u);
  free (a);
  free (f);
}

static void
attend_d (const RefModel *m, const double *x, size_t n,
          const uint8_t *key_valid, const uint8_t *query_valid,
          const uint8_t *allow, double *out, double *weights, RefStats *st)
{
  const size_t H = m->heads, dh = m->d_head, dv = m->d_value;
  const size_t dq = H * dh, dvt = H * dv, E = m->d_model;
  const size_t ne = ref_extra_keys (m), nk = n + ne;
  const double thr = (st && st->sat_threshold > 0) ? st->sat_threshold : 0.99;

  double *Q = xcalloc (n * dq, sizeof *Q);
  double *K = xcalloc (nk * dq, sizeof *K);
  double *V = xcalloc (nk * dvt, sizeof *V);
  double *s = xcalloc (nk, sizeof *s);
  uint8_t *vis = xcalloc (nk, 1);
  double *O = xcalloc (dvt, sizeof *O);
  uint8_t *finite = xcalloc (n ? n : 1, 1);

  project (m->wq, m->bq, x, n, E, dq, Q);
  project (m->wk, m->bk, x, n, E, dq, K);
  project (m->wv, m->bv, x, n, E, dvt, V);
  if (m->positions == 1 || m->positions == 2) {
    rope_rows (m, Q, n);
    rope_rows (m, K, n);
  }
  double *slopes = xcalloc (H, sizeof *slopes);
  if (m->positions == 3)
    ref_alibi_slopes (H, slopes);
  size_t e = n;
  if (m->bias_k) {
    for (size_t c = 0; c < dq; c++)
      K[e * dq + c] = m->bias_k[c];
    for (size_t c = 0; c < dvt; c++)
      V[e * dvt + c] = m->bias_v[c];
    e++;
  }
  /* the zero key / value: already zero from calloc */
  for (size_t j = 0; j < n; j++)
    finite[j] = (uint8_t) row_finite (x + j * E, E);

  if (st) {
    double keep = st->sat_threshold;
    memset (st, 0, sizeof *st);
    st->sat_threshold = keep;
    st->score_min = st->lse_min = INFINITY;
    st->score_max = st->lse_max = -INFINITY;
    st->sat_margin = INFINITY;
  }
  if (weights)
    memset (weights, 0, H * n * nk * sizeof *weights);

  for (size_t i = 0; i < n; i++) {
    double *orow = out + i * m->d_out;
    if (query_valid && !query_valid[i]) {
      for (size_t o = 0; o < m->d_out; o++)
        orow[o] = 0.0;
      continue;
    }
    for (size_t h = 0; h < H; h++) {
      const double *q = Q + i * dq + h * dh;
      size_t nvis = 0, ninf = 0;
      double mx = -INFINITY;
      for (size_t j = 0; j < nk; j++) {
        int v = 1;
        if (j < n) {
          if (key_valid && !key_valid[j])
            v = 0;
          if (!finite[j])
            v = 0;
          if (allow && !allow[i * n + j])
            v = 0;
          if (m->causal && j > i)
            v = 0;
          if (m->lookback > 0 && j < i && i - j > m->lookback)
            v = 0;
        }
        s[j] = 0.0;
        vis[j] = 0;
        if (!v)
          continue;
        const double *k = K + j * dq + h * dh;
        double acc = 0.0;
        for (size_t c = 0; c < dh; c++)
          acc += q[c] * k[c];
        if (m->f32_scores &&
            (fabs (acc) > FLT_MAX || fabs (acc * m->scale) > FLT_MAX))
          acc = acc > 0 ? INFINITY : -INFINITY;
        else
          acc *= m->scale;
        if (m->positions == 3 && j < n)
          acc -= slopes[h] * (double) (j > i ? j - i : i - j);
        if (!isfinite (acc) && st)
          st->nonfinite++;
        if (isnan (acc))
          continue;
        s[j] = acc;
        vis[j] = 1;
        nvis++;
        if (acc == INFINITY)
          ninf++;
        if (acc > mx)
          mx = acc;
        if (st && isfinite (acc)) {
          if (acc < st->score_min)
            st->score_min = acc;
          if (acc > st->score_max)
            st->score_max = acc;
        }
      }
      double *wrow = weights ? weights + (h * n + i) * nk : NULL;
      double *p = s; /* reuse: probabilities in place */
      if (st)
        st->rows++;
      if (nvis == 0) {
        if (st)
          st->fully_masked++;
        for (size_t c = 0; c < dv; c++)
          O[h * dv + c] = 0.0;
        continue;
      }
      double sum = 0.0;
      if (ninf > 0) {
        for (size_t j = 0; j < nk; j++)
          p[j] = (vis[j] && s[j] == INFINITY) ? 1.0 : 0.0;
        sum = (double) ninf;
      } else if (mx == -INFINITY) {
        /* every visible score is -inf: the limit shares the mass */
        for (size_t j = 0; j < nk; j++)
          p[j] = vis[j] ? 1.0 : 0.0;
        sum = (double) nvis;
      } else {
        for (size_t j = 0; j < nk; j++) {
          p[j] = vis[j] ? exp (s[j] - mx) : 0.0;
          sum += p[j];
        }
      }
      double pmax = 0.0, ent = 0.0;
      for (size_t j = 0; j < nk; j++) {
        p[j] /= sum;
        if (p[j] > pmax)
          pmax = p[j];
        if (p[j] > 0.0)
          ent -= p[j] * log (p[j]);
        if (wrow)
          wrow[j] = p[j];
      }
      if (st) {
        double lse = ninf ? INFINITY : mx + log (sum);
        if (isfinite (lse) && lse < st->lse_min)
          st->lse_min = lse;
        if (isfinite (lse) && lse > st->lse_max)
          st->lse_max = lse;
        st->max_weight_sum += pmax;
        st->entropy_sum += nvis > 1 ? ent / log ((double) nvis) : 0.0;
        /* Saturation needs a choice: rows with one visible key are not
         * counted. */
        if (nvis > 1 && pmax > thr + 1e-6)
          st->sat_lo++;
        if (nvis > 1 && pmax > thr - 1e-6)
          st->sat_hi++;
        if (nvis > 1 && pmax > thr)
          st->saturated++;
        if (fabs (pmax - thr) < st->sat_margin)
          st->sat_margin = fabs (pmax - thr);
      }
      double *oh = O + h * dv;
      for (size_t c = 0; c < dv; c++)
        oh[c] = 0.0;
      for (size_t j = 0; j < nk; j++) {
        if (p[j] == 0.0)
          continue;
        const double *vj = V + j * dvt + h * dv;
        for (size_t c = 0; c < dv; c++)
          oh[c] += p[j] * vj[c];
      }
    }
    project_d (m->wo, m->bo, O, dvt, m->d_out, orow);
  }

  free (Q);
  free (K);
  free (V);
  free (s);
  free (vis);
  free (O);
  free (finite);
  free (slopes);
}

/* FLT_MAX + half an ulp: from there on a double rounds to float inf. */
int
ref_projection_overflows (const RefModel *m, const float *x)
{
  const size_t dq = m->heads * m->d_head, dvt = m->heads * m->d_value;
  double *y = xcalloc (dq > dvt ? dq : dvt, sizeof *y);
  double *xd = to_double (x, m->d_model);
  int over = 0;
  project (m->wq, m->bq, xd, 1, m->d_model, dq, y);
  for (size_t c = 0; c < dq; c++)
    over |= fabs (y[c]) >= 0x1.ffffffp+127;
  project (m->wk, m->bk, xd, 1, m->d_model, dq, y);
  for (size_t c = 0; c < dq; c++)
    over |= fabs (y[c]) >= 0x1.ffffffp+127;
  project (m->wv, m->bv, xd, 1, m->d_model, dvt, y);
  for (size_t c = 0; c < dvt; c++)
    over |= fabs (y[c]) >= 0x1.ffffffp+127;
  free (y);
  free (xd);
  return over;
}

void
ref_diff_add (RefDiff *d, double got, double want)
{
  double e = fabs (got - want);
  if (!(e <= d->max_abs)) /* NaN counts as the worst */
    d->max_abs = isnan (e) ? INFINITY : e;
  if (fabs (want) > d->max_ref)
    d->max_ref = fabs (want);
  d->err2 += (got - want) * (got - want);
  d->ref2 += want * want;
  d->count++;
}

double
ref_diff_nmse (const RefDiff *d)
{
  return d->ref2 > 0 ? d->err2 / d->ref2 : d->err2;
}

double
ref_diff_bound (const RefDiff *d)
{
  return 1e-5 * (1.0 + d->max_ref);
}
