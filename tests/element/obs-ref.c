/* Float64 reference of the sattn element's per-window observations.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "obs-ref.h"
#include "reference.h"

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
  acc->max_weight_margin = MIN (acc->max_weight_margin, w->max_weight_margin);
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

/* Window w as the shared float64 reference sees it (tests/common): keys
 * are its n frames (padding and unusable frames hidden), queries its last
 * w->rows usable frames; identity projections, the scale rounded to float
 * as the core holds it, scores overflowing as float32 scores do.  Runs
 * the reference with st (may be NULL) and weights (may be NULL: H × n × n). */
static void
window_attend (const RefConfig * c, const float *x, const guint8 * valid,
    gsize T, gsize d, const ObsWindow * w, double *weights, RefStats * st)
{
  const gsize n = c->window;
  RefModel m = { 0 };
  float *xw = g_new0 (float, n * d);
  guint8 *kv = g_new0 (guint8, n), *qv = g_new0 (guint8, n);
  double *out = g_new (double, n * d);
  gsize j;

  m.d_model = m.d_out = d;
  m.heads = c->heads;
  m.d_head = m.d_value = d / c->heads;
  m.scale = (double) (float) (c->scale > 0 ? c->scale :
      1.0 / sqrt ((double) m.d_head));
  m.causal = c->causal;
  m.lookback = c->lookback;
  m.f32_scores = 1;
  for (j = 0; j < n; j++) {
    gssize f = (gssize) w->end - (gssize) n + (gssize) j;

    kv[j] = frame_ok (x, valid, T, d, f);
    qv[j] = kv[j] && j >= n - w->rows;
    if (f >= 0)
      memcpy (xw + j * d, x + (gsize) f * d, d * sizeof (float));
  }
  ref_attend (&m, xw, n, kv, qv, NULL, out, weights, st);
  g_free (xw);
  g_free (kv);
  g_free (qv);
  g_free (out);
}

void
obs_ref_window_stats (const RefConfig * c, const float *x,
    const guint8 * valid, gsize T, gsize d, const ObsWindow * w,
    float threshold, ObsStats * out)
{
  const gsize n = c->window;
  RefStats st = { 0 };
  gsize i, j;

  obs_stats_clear (out);
  out->windows = 1;
  out->frames = w->end - w->first;
  for (j = 0; j < n; j++)
    if (!frame_ok (x, valid, T, d, (gssize) w->end - (gssize) n + (gssize) j))
      out->masked_keys++;
  for (i = w->first; i < w->end; i++)
    if (!frame_ok (x, valid, T, d, (gssize) i))
      out->invalid_frames++;

  /* Invalid queries give zeros, not rows; rows with one visible key have
   * no choice: not saturated. */
  st.sat_threshold = (double) threshold;
  window_attend (c, x, valid, T, d, w, NULL, &st);
  out->rows = st.rows;
  out->fully_masked_rows = st.fully_masked;
  out->nonfinite_scores = st.nonfinite;
  out->saturated_rows = st.saturated;
  out->score_min = st.score_min;
  out->score_max = st.score_max;
  out->lse_min = st.lse_min;
  out->lse_max = st.lse_max;
  out->max_weight_sum = st.max_weight_sum;
  out->entropy_sum = st.entropy_sum;
  out->max_weight_margin = st.sat_margin;
}

void
obs_ref_window_weights (const RefConfig * c, const float *x,
    const guint8 * valid, gsize T, gsize d, const ObsWindow * w, gint head,
    double *weights)
{
  const gsize n = c->window, H = c->heads;
  double *all = g_new (double, H * n * n);
  gsize i, j, h;

  window_attend (c, x, valid, T, d, w, all, NULL);
  memset (weights, 0, w->rows * n * sizeof (double));
  for (i = 0; i < w->rows; i++) {
    gsize r = n - w->rows + i;

    for (h = 0; h < H; h++) {
      const double *p = all + (h * n + r) * n;

      if (head >= 0 && (gsize) head != h)
        continue;
      for (j = 0; j < n; j++)
        weights[i * n + j] += head >= 0 ? p[j] : p[j] / (double) H;
    }
  }
  g_free (all);
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
