/* The per-window executor: a stream over a whole model
 * (SATTN_MODEL_WHOLE).  Each window is one sequence through the model.
 * The schedule, the row descriptions, the invalid-frames policies, the
 * drain, reset and skip follow the incremental executor's contract in
 * sattn.h exactly; what differs is the work per window.
 *
 * Each frame is embedded once, when it arrives (e = x W^T + b in double,
 * kept in a ring of n rows, slot = frame index mod n): overlapping
 * windows reuse it.  Without learned positions the first layer's input
 * row and its Q, K and V projections do not depend on the window either:
 * they are computed once per frame too (RoPE at the frame's absolute
 * index, as the incremental executor rotates: the scores depend on
 * offsets only) and gathered for each window.  A due window gathers its n rows oldest first, adds
 * the learned position of each row (window index 0 = the oldest), rounds
 * to float once and runs the layers, the final norm, the pooling and the
 * head (model/net.c).  Masked frames (padding before the stream, GAPs,
 * unusable frames under SATTN_INVALID_MASK) are key padding and left out
 * of the pooling.  Nothing is allocated after sattn_pw_new.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "internal.h"
#include "stream/window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct SattnPw {
  const SattnModel *m;
  const SattnNet *net;
  SattnStreamConfig sc;
  size_t n, h;
  double *emb;              /* n × D: the ring of embedded frames */
  uint8_t *ok;              /* n: slot usable */
  float *x;                 /* n × D: the window's rows */
  uint8_t *kok;             /* n */
  double *pooled;           /* D */
  float *wkeep;             /* heads × n × n (keep_weights) */
  size_t wkeep_rows;
  float *zero;              /* F zeros (the zero policy's frame) */
  /* Without learned positions a frame's first-layer input is its
   * embedding alone: its rows (xf, float), its first-layer projections
   * (q0, k0: dq, v0: dv floats per slot) are computed once, when it
   * arrives, and every window it is in reuses them. */
  int reuse;
  float *xf, *q0, *k0, *v0, *xn;
  SattnNetScratch *w;
  uint64_t total, last_end, next_window;
  int have_window, have_error;
  uint64_t err_frame;
  SattnFrameFault err_fault;
  SattnStats stats;
};

SattnStatus
sattn_pw_check (const SattnModel *m, const SattnStreamConfig *sc, char *err,
                size_t err_len)
{
  const SattnNet *net = m->net;
  if (sc->output == SATTN_OUTPUT_FRAMES)
    return sattn_fail (SATTN_E_INVAL, err, err_len, "output=frames needs "
                       "one output row per input frame, but this is a whole "
                       "model (%zu layers) that computes each window as one "
                       "sequence: every row depends on the whole window; "
                       "use output=classes%s, mean, last or window",
                       net->n_layers, net->classes ? "" : " (with a head)");
  if (sc->output == SATTN_OUTPUT_CLASSES && net->classes == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len, "output=classes needs a "
                       "classification head, and this whole model has none "
                       "(no 'head.weight' or 'head.0.weight' in the file; "
                       "it ends with the pooled %zu-value row): use "
                       "output=mean, last or window", net->d);
  if (net->pos != NULL && sc->window > net->max_window)
    return sattn_fail (SATTN_E_SHAPE, err, err_len, "window=%zu is longer "
                       "than the model's learned positions (pos_embed has "
                       "%zu rows): use a window of at most %zu frames",
                       sc->window, net->max_window, net->max_window);
  return SATTN_OK;
}

static size_t
add_ok (size_t a, size_t b)
{
  return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t
mul_ok (size_t a, size_t b)
{
  return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

size_t
sattn_pw_bytes (const SattnModel *m, const SattnStreamConfig *sc)
{
  const SattnNet *net = m->net;
  const size_t n = sc->window, D = net->d;
  size_t b = sizeof (SattnPw);
  b = add_ok (b, mul_ok (mul_ok (n, D), sizeof (double) + sizeof (float)));
  b = add_ok (b, 2 * n + D * sizeof (double) + net->d_frame * sizeof (float));
  if (sc->keep_weights)
    b = add_ok (b, mul_ok (mul_ok (m->cfg.heads, n), n * sizeof (float)));
  b = add_ok (b, sattn_net_scratch_bytes (m, n));
  if (sattn_net_frame_reuse (m))
    b = add_ok (b, mul_ok (mul_ok (n, 2 * D + 2 * m->dq + m->dv),
                           sizeof (float)));
  return b;
}

void
sattn_pw_free (SattnPw *s)
{
  if (s == NULL)
    return;
  free (s->emb); free (s->ok); free (s->x); free (s->kok); free (s->pooled);
  free (s->wkeep); free (s->zero);
  free (s->xf); free (s->q0); free (s->k0); free (s->v0); free (s->xn);
  sattn_net_scratch_free (s->w);
  free (s);
}

void
sattn_pw_reset (SattnPw *s)
{
  memset (s->ok, 0, s->n);
  s->total = 0;
  s->last_end = 0;
  s->next_window = s->sc.start == SATTN_START_WAIT ? s->n : s->h;
  s->have_window = 0;
  s->have_error = 0;
  s->wkeep_rows = 0;
}

SattnPw *
sattn_pw_new (const SattnModel *m, const SattnStreamConfig *sc)
{
  const SattnNet *net = m->net;
  const size_t n = sc->window, D = net->d;
  if (mul_ok (n, D) > SIZE_MAX / sizeof (double))
    return NULL;
  SattnPw *s = calloc (1, sizeof (*s));
  if (s == NULL)
    return NULL;
  s->m = m;
  s->net = net;
  s->sc = *sc;
  s->n = n;
  s->h = sc->hop;
  if (s->sc.saturation_threshold == 0.0f)
    s->sc.saturation_threshold = SATTN_DEFAULT_SATURATION;
  s->emb = malloc (n * D * sizeof (double));
  s->ok = malloc (n);
  s->x = malloc (n * D * sizeof (float));
  s->kok = malloc (n);
  s->pooled = malloc (D * sizeof (double));
  s->zero = calloc (net->d_frame, sizeof (float));
  s->w = sattn_net_scratch_new (m, n);
  if (sc->keep_weights)
    s->wkeep = calloc (m->cfg.heads * n * n, sizeof (float));
  s->reuse = sattn_net_frame_reuse (m);
  if (s->reuse) {
    s->xf = calloc (n * D, sizeof (float));
    s->q0 = calloc (n * m->dq, sizeof (float));
    s->k0 = calloc (n * m->dq, sizeof (float));
    s->v0 = calloc (n * m->dv, sizeof (float));
    s->xn = malloc (D * sizeof (float));
  }
  if (!s->emb || !s->ok || !s->x || !s->kok || !s->pooled || !s->zero ||
      !s->w || (sc->keep_weights && !s->wkeep) ||
      (s->reuse && (!s->xf || !s->q0 || !s->k0 || !s->v0 || !s->xn))) {
    sattn_pw_free (s);
    return NULL;
  }
  sattn_stats_clear (&s->stats);
  sattn_pw_reset (s);
  return s;
}

size_t
sattn_pw_row_floats (const SattnPw *s)
{
  switch (s->sc.output) {
    case SATTN_OUTPUT_WINDOW: return s->n * s->net->d;
    case SATTN_OUTPUT_CLASSES: return s->net->classes;
    default: return s->net->d;
  }
}

size_t
sattn_pw_pending (const SattnPw *s)
{
  return (size_t) (s->total - s->last_end);
}

uint64_t
sattn_pw_frames_to_window (const SattnPw *s)
{
  return s->next_window - s->total;
}

size_t
sattn_pw_window_rows (const SattnPw *s, int drain)
{
  if (drain && sattn_pw_pending (s) == 0)
    return 0;
  return s->n;
}

size_t
sattn_pw_max_rows (const SattnPw *s, size_t n_frames)
{
  if (n_frames == 0)
    return sattn_pw_pending (s) > 0 ? 1 : 0;
  uint64_t end = s->total + n_frames;
  if (end < s->next_window)
    return 0;
  return (size_t) ((end - s->next_window) / s->h + 1);
}

/* Store one frame (index s->total): the frame rule and the policy.  0
 * when the policy is ERROR and the frame has bad data (recorded). */
static int
store_frame (SattnPw *s, const float *x, int flagged)
{
  const SattnNet *net = s->net;
  const size_t D = net->d, slot = (size_t) (s->total % s->n);
  double *e = s->emb + slot * D;
  SattnFrameFault f = SATTN_FRAME_FLAGGED;

  if (!flagged) {
    f = SATTN_FRAME_OK;
    if (!sattn_finite (x, net->d_frame)) {
      f = SATTN_FRAME_NONFINITE;
    } else {
      sattn_net_embed (s->m, x, 1, e);
      for (size_t t = 0; t < D && f == SATTN_FRAME_OK; t++)
        if (!isfinite (e[t]) || fabs (e[t]) > 3.4028234663852886e38)
          f = SATTN_FRAME_OVERFLOW;
    }
    if (f != SATTN_FRAME_OK) {
      if (s->sc.invalid_policy == SATTN_INVALID_ERROR) {
        s->have_error = 1;
        s->err_frame = s->total;
        s->err_fault = f;
        return 0;
      }
      s->stats.invalid_frames++;
      if (f == SATTN_FRAME_OVERFLOW)
        s->stats.overflow_frames++;
      if (s->sc.invalid_policy == SATTN_INVALID_ZERO) {
        sattn_net_embed (s->m, s->zero, 1, e);
        f = SATTN_FRAME_OK;
      }
    }
  } else {
    s->stats.invalid_frames++;
  }
  s->ok[slot] = f == SATTN_FRAME_OK;
  if (!s->ok[slot])
    memset (e, 0, D * sizeof (double));
  if (s->reuse) {
    /* The first layer's part of this frame, once (RoPE at its absolute
     * index). */
    const SattnModel *l0 = net->layer[0];
    float *xr = s->xf + slot * D, *q = s->q0 + slot * l0->dq;
    float *k = s->k0 + slot * l0->dq, *v = s->v0 + slot * l0->dv;
    for (size_t t = 0; t < D; t++)
      xr[t] = (float) e[t];
    if (s->ok[slot]) {
      sattn_attend_project (l0, xr, 1, s->xn, q, k, v, s->total);
    } else {
      memset (q, 0, l0->dq * sizeof (float));
      memset (k, 0, l0->dq * sizeof (float));
      memset (v, 0, l0->dv * sizeof (float));
    }
  }
  s->total++;
  if (s->sc.collect_stats)
    s->stats.frames++;
  return 1;
}

/* The window ending at s->total: one output row. */
static void
emit_window (SattnPw *s, float *out, SattnRowInfo *info)
{
  const SattnNet *net = s->net;
  const size_t n = s->n, D = net->d;
  SattnStats *stats = s->sc.collect_stats ? &s->stats : NULL;
  uint32_t usable_in = 0;

  for (size_t i = 0; i < n; i++) {
    size_t slot = (size_t) ((s->total + i) % n);
    const double *e = s->emb + slot * D;
    float *xr = s->x + i * D;
    s->kok[i] = s->ok[slot];
    usable_in += s->kok[i];
    if (!s->kok[i]) {
      memset (xr, 0, D * sizeof (float));
      continue;
    }
    const double *p = net->pos != NULL ? net->pos + i * D : NULL;
    if (s->reuse)
      memcpy (xr, s->xf + slot * D, D * sizeof (float));
    else
      for (size_t t = 0; t < D; t++)
        xr[t] = (float) (p != NULL ? e[t] + p[t] : e[t]);
    if (!sattn_finite (xr, D)) {
      /* A position that overflows the row: the row is unusable. */
      memset (xr, 0, D * sizeof (float));
      s->kok[i] = 0;
      usable_in--;
      s->stats.overflow_frames++;
    }
  }
  size_t usable = 0;
  int valid = 0;
  if (usable_in > 0 && s->reuse) {
    /* The first layer's projections of the window's frames, kept. */
    int *ready;
    SattnAttendScratch *l0 = sattn_net_layer0 (s->w, &ready);
    const size_t dq = net->layer[0]->dq, dv = net->layer[0]->dv;
    for (size_t i = 0; i < n; i++) {
      size_t slot = (size_t) ((s->total + i) % n);
      memcpy (l0->q + i * dq, s->q0 + slot * dq, dq * sizeof (float));
      memcpy (l0->k + i * dq, s->k0 + slot * dq, dq * sizeof (float));
      memcpy (l0->v + i * dv, s->v0 + slot * dv, dv * sizeof (float));
    }
    *ready = 1;
  }
  if (usable_in > 0) {
    SattnStats ws;
    if (stats)
      sattn_stats_clear (&ws);
    /* classes: the pooling the head was trained with; mean / last: the
     * one asked for. */
    SattnPooling pool = s->sc.output == SATTN_OUTPUT_MEAN ? SATTN_POOLING_MEAN
        : s->sc.output == SATTN_OUTPUT_LAST ? SATTN_POOLING_LAST
        : net->pooling;
    usable = sattn_net_window (s->m, s->w, s->x, s->kok, s->wkeep,
                               stats ? &ws : NULL, pool, s->pooled);
    if (stats)
      sattn_stats_merge (stats, &ws);
    if (usable < usable_in)
      s->stats.overflow_rows += usable_in - usable;
  } else if (s->wkeep) {
    memset (s->wkeep, 0, s->m->cfg.heads * n * n * sizeof (float));
  }
  switch (s->sc.output) {
    case SATTN_OUTPUT_WINDOW:
      if (usable_in > 0)
        memcpy (out, s->x, n * D * sizeof (float));
      else
        memset (out, 0, n * D * sizeof (float));
      valid = usable > 0;
      break;
    case SATTN_OUTPUT_CLASSES:
      if (usable > 0)
        valid = sattn_net_classify (s->m, s->w, s->pooled, out);
      else
        memset (out, 0, net->classes * sizeof (float));
      if (usable > 0 && !valid)
        s->stats.overflow_rows++;
      break;
    default:
      for (size_t t = 0; t < D; t++)
        out[t] = usable > 0 ? (float) s->pooled[t] : 0.0f;
      valid = usable > 0;
      break;
  }
  if (info) {
    memset (info, 0, sizeof (*info));
    info->first = s->last_end;
    info->n_frames = (uint32_t) (s->total - s->last_end);
    info->valid = (uint8_t) valid;
    info->window_end = s->total;
    info->valid_keys = usable_in;
    info->masked_keys = (uint32_t) n - usable_in;
  }
  if (stats) {
    stats->windows++;
    stats->masked_keys += n - usable_in;
  }
  s->wkeep_rows = n;
  s->have_window = 1;
  s->last_end = s->total;
  s->next_window = s->total + s->h;
}

SattnStatus
sattn_pw_push (SattnPw *s, const float *frames, size_t n_frames,
               const uint8_t *valid, float *out, SattnRowInfo *info,
               size_t *n_rows)
{
  const size_t F = s->net->d_frame, rf = sattn_pw_row_floats (s);
  size_t produced = 0;
  for (size_t i = 0; i < n_frames; i++) {
    if (!store_frame (s, frames + i * F, valid != NULL && !valid[i])) {
      *n_rows = produced;
      return SATTN_E_NONFINITE;
    }
    if (s->total == s->next_window) {
      emit_window (s, out + produced * rf, info ? info + produced : NULL);
      produced++;
    }
  }
  *n_rows = produced;
  return SATTN_OK;
}

SattnStatus
sattn_pw_drain (SattnPw *s, float *out, SattnRowInfo *info, size_t *n_rows)
{
  *n_rows = 0;
  if (sattn_pw_pending (s) == 0)
    return SATTN_OK;
  emit_window (s, out, info);
  *n_rows = 1;
  return SATTN_OK;
}

void
sattn_pw_reset_at (SattnPw *s, uint64_t first_frame)
{
  sattn_pw_reset (s);
  s->total = first_frame;
  s->last_end = first_frame;
  s->next_window += first_frame;
}

uint64_t
sattn_pw_frames (const SattnPw *s)
{
  return s->total;
}

void
sattn_pw_set_invalid_policy (SattnPw *s, SattnInvalidPolicy policy)
{
  s->sc.invalid_policy = policy;
}

SattnStatus
sattn_pw_error_frame (const SattnPw *s, uint64_t *index,
                      SattnFrameFault *fault)
{
  if (!s->have_error)
    return SATTN_E_INVAL;
  if (index)
    *index = s->err_frame;
  if (fault)
    *fault = s->err_fault;
  return SATTN_OK;
}

void
sattn_pw_get_stats (SattnPw *s, SattnStats *out, int clear)
{
  if (out)
    *out = s->stats;
  if (clear)
    sattn_stats_clear (&s->stats);
}

SattnStatus
sattn_pw_last_weights (const SattnPw *s, int head, float *out, size_t *rows,
                       size_t *cols)
{
  const size_t n = s->n, H = s->m->cfg.heads;
  if (s->wkeep == NULL || !s->have_window || head < -1 || head >= (int) H)
    return SATTN_E_INVAL;
  if (rows)
    *rows = n;
  if (cols)
    *cols = n;
  if (out == NULL)
    return SATTN_OK;
  if (head >= 0) {
    memcpy (out, s->wkeep + (size_t) head * n * n, n * n * sizeof (float));
    return SATTN_OK;
  }
  for (size_t i = 0; i < n * n; i++) {
    double acc = 0.0;
    for (size_t h = 0; h < H; h++)
      acc += s->wkeep[h * n * n + i];
    out[i] = (float) (acc / (double) H);
  }
  return SATTN_OK;
}

uint64_t
sattn_pw_skip_lead (const SattnPw *s)
{
  for (size_t i = s->n; i > 0; i--)
    if (s->ok[(size_t) ((s->total + i - 1) % s->n)])
      return i;
  return 0;
}

SattnStatus
sattn_pw_skip (SattnPw *s, uint64_t n_frames, float *out, SattnRowInfo *info,
               size_t *n_rows, SattnSkipped *skipped)
{
  const size_t n = s->n, rf = sattn_pw_row_floats (s);
  uint64_t lead = sattn_pw_skip_lead (s);
  uint64_t k = n_frames < lead ? n_frames : lead;
  size_t produced = 0;

  n_frames -= k;
  for (; k > 0; k--) {
    store_frame (s, NULL, 1);
    if (s->total == s->next_window) {
      emit_window (s, out + produced * rf, info ? info + produced : NULL);
      produced++;
    }
  }
  *n_rows = produced;
  if (n_frames == 0)
    return SATTN_OK;
  /* Every later window holds only masked frames: zero rows, valid 0. */
  const uint64_t end = s->total + n_frames;
  if (end >= s->next_window) {
    uint64_t w = (end - s->next_window) / s->h + 1;
    uint64_t last = s->next_window + (w - 1) * s->h;
    skipped->first = s->last_end;
    skipped->rows = w;
    skipped->end = last;
    s->last_end = last;
    s->next_window = last + s->h;
    s->have_window = 1;
    if (s->wkeep) {
      memset (s->wkeep, 0, s->m->cfg.heads * n * n * sizeof (float));
      s->wkeep_rows = n;
    }
    if (s->sc.collect_stats) {
      s->stats.windows += w;
      s->stats.masked_keys += w * n;
    }
  }
  memset (s->ok, 0, n);
  s->total = end;
  s->stats.invalid_frames += n_frames;
  if (s->sc.collect_stats)
    s->stats.frames += n_frames;
  return SATTN_OK;
}
