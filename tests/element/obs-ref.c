/* Float64 reference of the sattn element's per-window observations.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "obs-ref.h"

#include <float.h>
#include <math.h>
#include <string.h>

gsize
obs_ref_schedule (const RefConfig * c, gsize T, ObsWindow ** out)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (ObsWindow));
  gsize e = c->start == START_WAIT ? c->window : c->hop, last = 0, n;
  ObsWindow w;

  for (; e <= T; e += c->hop) {
    w.end = e;
    w.first = last;
    w.rows = c->output == OUT_FRAMES ? e - last :
        c->output == OUT_LAST ? 1 : c->window;
    g_array_append_val (a, w);
    last = e;
  }
  if (T > last) {
    /* The drain at EOS. */
    w.end = T;
    w.first = last;
    w.rows = c->output == OUT_FRAMES ? T - last :
        c->output == OUT_LAST ? 1 : c->window;
    g_array_append_val (a, w);
  }
  n = a->len;
  *out = (ObsWindow *) g_array_free (a, FALSE);
  return n;
}

void
obs_stats_clear (ObsStats * s)
{
  memset (s, 0, sizeof (*s));
  s->score_min = s->lse_min = INFINITY;
  s->score_max = s->lse_max = -INFINITY;
  s->max_weight_margin = INFINITY;
}

void
obs_stats_merge (ObsStats * acc, const ObsStats * w)
{
  acc->windows += w->windows;
  acc->frames += w->frames;
  acc->rows += w->rows;
  acc->masked_keys += w->masked_keys;
  acc->invalid_frames += w->invalid_frames;
  acc->fully_masked_rows += w->fully_masked_rows;
  acc->nonfinite_scores += w->nonfinite_scores;
  acc->saturated_rows += w->saturated_rows;
  acc->score_min = MIN (acc->score_min, w->score_min);
  acc->score_max = MAX (acc->score_max, w->score_max);
  acc->lse_min = MIN (acc->lse_min, w->lse_min);
  acc->lse_max = MAX (acc->lse_max, w->lse_max);
  acc->max_weight_sum += w->max_weight_sum;
  acc->entropy_sum += w->entropy_sum;
  acc->max_weight_margin = MIN (acc->max_weight_margin,
      w->max_weight_margin);
}

static gboolean
frame_ok (const float *x, const guint8 * valid, gsize T, gsize d, gssize f)
{
  gsize t;

  if (f < 0 || (gsize) f >= T)
    return FALSE;
  if (valid && !valid[f])
    return FALSE;
  for (t = 0; t < d; t++)
    if (!isfinite (x[(gsize) f * d + t]))
      return FALSE;
  return TRUE;
}

static gboolean
key_visible (const RefConfig * c, gssize qi, gssize kj)
{
  if (c->causal && kj > qi)
    return FALSE;
  if (c->lookback > 0 && kj < qi && (gsize) (qi - kj) > c->lookback)
    return FALSE;
  return TRUE;
}

/* Scaled scores of query frame qi, head h, over the window's keys:
 * s[j] = NAN for a hidden key, ±INFINITY where float32 would overflow.
 * Returns the number of visible keys; *n_inf counts the infinite ones. */
static gsize
row_scores (const RefConfig * c, const float *x, const guint8 * valid,
    gsize T, gsize d, const ObsWindow * w, gssize qi, gsize h, double *s,
    gsize * n_inf)
{
  const gsize n = c->window, H = c->heads, dh = d / H;
  const double scale = c->scale > 0 ? c->scale : 1.0 / sqrt ((double) dh);
  const double fscale = (double) (float) scale;
  gsize j, t, visible = 0;

  *n_inf = 0;
  for (j = 0; j < n; j++) {
    gssize kj = (gssize) w->end - (gssize) n + (gssize) j;
    double dot = 0.0;

    s[j] = NAN;
    if (!frame_ok (x, valid, T, d, kj) || !key_visible (c, qi, kj))
      continue;
    for (t = 0; t < dh; t++)
      dot += (double) x[(gsize) qi * d + h * dh + t] *
          (double) x[(gsize) kj * d + h * dh + t];
    visible++;
    if (fabs (dot) > FLT_MAX || fabs (dot * fscale) > FLT_MAX) {
      s[j] = dot > 0 ? INFINITY : -INFINITY;
      (*n_inf)++;
    } else {
      s[j] = dot * fscale;
    }
  }
  return visible;
}

/* Softmax of one row of scores (NAN = hidden) into p, the way the core
 * defines its limits: +inf entries share the mass. */
static void
row_softmax (const double *s, gsize n, double *p, double *lse,
    double *wmax, double *ent, gsize * n_valid)
{
  gsize j, n_pinf = 0, nv = 0;
  double mx = -INFINITY, sum = 0.0, ex = 0.0;

  for (j = 0; j < n; j++) {
    p[j] = 0.0;
    if (isnan (s[j]))
      continue;
    nv++;
    if (s[j] == INFINITY)
      n_pinf++;
    if (s[j] > mx)
      mx = s[j];
  }
  *n_valid = nv;
  if (nv == 0) {
    *lse = NAN;
    *wmax = 0.0;
    *ent = 0.0;
    return;
  }
  if (n_pinf > 0 || mx == -INFINITY) {
    gsize cnt = n_pinf > 0 ? n_pinf : nv;

    for (j = 0; j < n; j++)
      if (!isnan (s[j]) && (n_pinf == 0 || s[j] == INFINITY))
        p[j] = 1.0 / (double) cnt;
    *lse = n_pinf > 0 ? INFINITY : -INFINITY;
    *wmax = 1.0 / (double) cnt;
    *ent = log ((double) cnt);
    return;
  }
  for (j = 0; j < n; j++)
    if (!isnan (s[j]) && s[j] != -INFINITY) {
      double e = exp (s[j] - mx);

      sum += e;
      ex += e * (s[j] - mx);
    }
  for (j = 0; j < n; j++)
    if (!isnan (s[j]) && s[j] != -INFINITY)
      p[j] = exp (s[j] - mx) / sum;
  *lse = mx + log (sum);
  *wmax = 1.0 / sum;
  *ent = log (sum) - ex / sum;
}

void
obs_ref_window_stats (const RefConfig * c, const float *x,
    const guint8 * valid, gsize T, gsize d, const ObsWindow * w,
    float threshold, ObsStats * out)
{
  const gsize n = c->window, H = c->heads;
  double *s = g_new (double, n), *p = g_new (double, n);
  gsize i, j, h;

  obs_stats_clear (out);
  out->windows = 1;
  out->frames = w->end - w->first;
  for (j = 0; j < n; j++)
    if (!frame_ok (x, valid, T, d, (gssize) w->end - (gssize) n +
            (gssize) j))
      out->masked_keys++;
  for (i = w->first; i < w->end; i++)
    if (!frame_ok (x, valid, T, d, (gssize) i))
      out->invalid_frames++;

  for (i = 0; i < w->rows; i++) {
    gssize qi = (gssize) w->end - (gssize) w->rows + (gssize) i;

    if (!frame_ok (x, valid, T, d, qi))
      continue;                 /* an invalid query: zeros, not a row */
    for (h = 0; h < H; h++) {
      gsize n_inf, nv;
      double lse, wmax, ent;

      row_scores (c, x, valid, T, d, w, qi, h, s, &n_inf);
      out->nonfinite_scores += n_inf;
      row_softmax (s, n, p, &lse, &wmax, &ent, &nv);
      out->rows++;
      if (nv == 0) {
        out->fully_masked_rows++;
        continue;
      }
      for (j = 0; j < n; j++)
        if (!isnan (s[j]) && isfinite (s[j])) {
          out->score_min = MIN (out->score_min, s[j]);
          out->score_max = MAX (out->score_max, s[j]);
        }
      if (isfinite (lse)) {
        out->lse_min = MIN (out->lse_min, lse);
        out->lse_max = MAX (out->lse_max, lse);
      }
      out->max_weight_sum += wmax;
      if (nv > 1)
        out->entropy_sum += ent / log ((double) nv);
      /* Rows with one visible key have no choice: not saturated. */
      if (nv > 1 && wmax > (double) threshold)
        out->saturated_rows++;
      out->max_weight_margin = MIN (out->max_weight_margin,
          fabs (wmax - (double) threshold));
    }
  }
  g_free (s);
  g_free (p);
}

void
obs_ref_window_weights (const RefConfig * c, const float *x,
    const guint8 * valid, gsize T, gsize d, const ObsWindow * w, gint head,
    double *weights)
{
  const gsize n = c->window, H = c->heads;
  double *s = g_new (double, n), *p = g_new (double, n);
  gsize i, j, h;

  memset (weights, 0, w->rows * n * sizeof (double));
  for (i = 0; i < w->rows; i++) {
    gssize qi = (gssize) w->end - (gssize) w->rows + (gssize) i;

    if (!frame_ok (x, valid, T, d, qi))
      continue;
    for (h = 0; h < H; h++) {
      gsize n_inf, nv;
      double lse, wmax, ent;

      if (head >= 0 && (gsize) head != h)
        continue;
      row_scores (c, x, valid, T, d, w, qi, h, s, &n_inf);
      row_softmax (s, n, p, &lse, &wmax, &ent, &nv);
      for (j = 0; j < n; j++)
        weights[i * n + j] += head >= 0 ? p[j] : p[j] / (double) H;
    }
  }
  g_free (s);
  g_free (p);
}

static guint64
get_u64 (const GstStructure * s, const char *field)
{
  guint64 v = 0;

  fail_unless (gst_structure_get_uint64 (s, field, &v),
      "message has no guint64 field '%s': %" GST_PTR_FORMAT, field, s);
  return v;
}

static double
get_double (const GstStructure * s, const char *field)
{
  double v = 0;

  fail_unless (gst_structure_get_double (s, field, &v),
      "message has no double field '%s': %" GST_PTR_FORMAT, field, s);
  return v;
}

static double
check_double (const char *label, const GstStructure * s, const char *field,
    double ref, double worst)
{
  double got = get_double (s, field), err;

  if (isinf (ref) || isinf (got)) {
    fail_unless (got == ref, "%s: %s = %g, want %g", label, field, got, ref);
    return worst;
  }
  err = fabs (got - ref);
  fail_unless (err <= 1e-5 * (1.0 + fabs (ref)),
      "%s: %s = %.9g, want %.9g (error %.3g)", label, field, got, ref, err);
  return MAX (worst, err / (1.0 + fabs (ref)));
}

void
obs_check_message (const char *label, const GstStructure * s,
    const ObsStats * ref, guint64 frames)
{
  const double rows = ref->rows > 0 ? (double) ref->rows : 1.0;
  double worst = 0.0;

  fail_unless (gst_structure_has_name (s, "sattn"));
  fail_unless (get_u64 (s, "windows") == ref->windows,
      "%s: windows %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT, label,
      get_u64 (s, "windows"), ref->windows);
  fail_unless (get_u64 (s, "frames") == frames,
      "%s: frames %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT, label,
      get_u64 (s, "frames"), frames);
  fail_unless (get_u64 (s, "rows") == ref->rows,
      "%s: rows %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT, label,
      get_u64 (s, "rows"), ref->rows);
  fail_unless (get_u64 (s, "masked-keys") == ref->masked_keys,
      "%s: masked-keys %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT,
      label, get_u64 (s, "masked-keys"), ref->masked_keys);
  fail_unless (get_u64 (s, "invalid-frames") == ref->invalid_frames,
      "%s: invalid-frames %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT,
      label, get_u64 (s, "invalid-frames"), ref->invalid_frames);
  fail_unless (get_u64 (s, "fully-masked-rows") == ref->fully_masked_rows,
      "%s: fully-masked-rows %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT,
      label, get_u64 (s, "fully-masked-rows"), ref->fully_masked_rows);
  fail_unless (get_u64 (s, "nonfinite-scores") == ref->nonfinite_scores,
      "%s: nonfinite-scores %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT,
      label, get_u64 (s, "nonfinite-scores"), ref->nonfinite_scores);
  fail_unless (get_u64 (s, "saturated-rows") == ref->saturated_rows,
      "%s: saturated-rows %" G_GUINT64_FORMAT ", want %" G_GUINT64_FORMAT,
      label, get_u64 (s, "saturated-rows"), ref->saturated_rows);
  worst = check_double (label, s, "score-min", ref->score_min, worst);
  worst = check_double (label, s, "score-max", ref->score_max, worst);
  worst = check_double (label, s, "lse-min", ref->lse_min, worst);
  worst = check_double (label, s, "lse-max", ref->lse_max, worst);
  worst = check_double (label, s, "max-weight", ref->rows ?
      ref->max_weight_sum / rows : 0.0, worst);
  worst = check_double (label, s, "entropy", ref->rows ?
      ref->entropy_sum / rows : 0.0, worst);
  GST_INFO ("%s: largest relative deviation %.3g", label, worst);
}
