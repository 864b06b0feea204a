/* SattnStream: sliding-window state over a frame stream.
 *
 * Each frame is projected to Q, K and V exactly once, into mirrored rings
 * of 2n rows: frame with virtual index p = frames_since_reset + n lives in
 * slots p % n and p % n + n, so the n keys of any window are contiguous
 * (rows [F % n, F % n + n) for the window that ends after frame F - 1).
 * Virtual indices below n are the padding before the stream starts: their
 * slots are zero and invalid.  Nothing is allocated after sattn_stream_new.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct SattnStream {
  const SattnModel *m;
  SattnStreamConfig sc;
  size_t n, h, ncols;
  float *qring, *vring;           /* 2n × dq, 2n × dv */
  float *ktring;                  /* K transposed: dq × 2n */
  float *kscratch;                /* n × dq: K rows before transposing */
  uint8_t *vring_ok;              /* 2n: frame usable as key / query */
  float *scores;                  /* n × ncols */
  float *o;                       /* n × dv */
  float *pool;                    /* n × d_out (mean mode) */
  float *wkeep;                   /* heads × n × ncols (keep_weights) */
  size_t wkeep_rows;
  int have_window;
  uint64_t total;                 /* frames since reset */
  uint64_t next_out;              /* frames mode: first frame without row */
  uint64_t last_end;              /* frame count at the last window */
  uint64_t next_window;           /* frame count at which the next window is due */
  SattnStats stats;
  uint8_t *row_ok;                /* n: the last window's output rows that
                                     are valid (query usable, finite) */
  int have_error;                 /* a push stopped at err_frame */
  uint64_t err_frame;
  SattnFrameFault err_fault;
};

void
sattn_stream_free (SattnStream *s)
{
  if (s == NULL)
    return;
  free (s->qring); free (s->ktring); free (s->kscratch); free (s->vring); free (s->vring_ok);
  free (s->scores); free (s->o); free (s->pool); free (s->wkeep);
  free (s->row_ok);
  free (s);
}

void
sattn_stream_reset (SattnStream *s)
{
  if (s == NULL)
    return;
  const SattnModel *m = s->m;
  memset (s->qring, 0, 2 * s->n * m->dq * sizeof (float));
  memset (s->ktring, 0, 2 * s->n * m->dq * sizeof (float));
  memset (s->vring, 0, 2 * s->n * m->dv * sizeof (float));
  memset (s->vring_ok, 0, 2 * s->n);
  s->total = 0;
  s->next_out = 0;
  s->last_end = 0;
  s->next_window = s->sc.start == SATTN_START_WAIT ? s->n : s->h;
  s->have_window = 0;
  s->wkeep_rows = 0;
  s->have_error = 0;
}

SattnStream *
sattn_stream_new (const SattnModel *m, const SattnStreamConfig *sc,
                  SattnStatus *status)
{
  SattnStatus st = SATTN_OK;
  SattnStream *s = NULL;

  if (m == NULL || sc == NULL || sc->window == 0 || sc->hop == 0 ||
      sc->hop > sc->window || sc->output > SATTN_OUTPUT_LAST ||
      sc->start > SATTN_START_WAIT || sc->invalid_policy > SATTN_INVALID_ERROR ||
      !(sc->saturation_threshold >= 0.0f && sc->saturation_threshold <= 1.0f)) {
    st = SATTN_E_INVAL;
    goto fail;
  }
  size_t n = sc->window;
  size_t ncols = n + m->n_extra;
  if (n > (size_t) INT32_MAX / 2 || ncols > SIZE_MAX / sizeof (float) / n ||
      2 * n > SIZE_MAX / sizeof (float) / (m->dq + m->dv) ||
      (sc->output == SATTN_OUTPUT_WINDOW && n > SIZE_MAX / 4 / m->d_out)) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  s = calloc (1, sizeof (*s));
  if (s == NULL) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  s->m = m;
  s->sc = *sc;
  if (s->sc.saturation_threshold == 0.0f)
    s->sc.saturation_threshold = 0.99f;
  s->n = n;
  s->h = sc->hop;
  s->ncols = ncols;
  s->qring = malloc (2 * n * m->dq * sizeof (float));
  s->ktring = malloc (2 * n * m->dq * sizeof (float));
  s->kscratch = malloc (n * m->dq * sizeof (float));
  s->vring = malloc (2 * n * m->dv * sizeof (float));
  s->vring_ok = malloc (2 * n);
  s->scores = malloc (n * ncols * sizeof (float));
  s->o = malloc (n * m->dv * sizeof (float));
  s->row_ok = malloc (n);
  if (sc->output == SATTN_OUTPUT_MEAN)
    s->pool = malloc (n * m->d_out * sizeof (float));
  if (sc->keep_weights)
    s->wkeep = malloc (m->cfg.heads * n * ncols * sizeof (float));
  if (!s->qring || !s->ktring || !s->kscratch || !s->vring || !s->vring_ok || !s->scores ||
      !s->o || !s->row_ok || (sc->output == SATTN_OUTPUT_MEAN && !s->pool) ||
      (sc->keep_weights && !s->wkeep)) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  sattn_stats_clear (&s->stats);
  sattn_stream_reset (s);
  if (status)
    *status = SATTN_OK;
  return s;

fail:
  sattn_stream_free (s);
  if (status)
    *status = st;
  return NULL;
}

size_t
sattn_stream_row_floats (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  return s->sc.output == SATTN_OUTPUT_WINDOW ? s->n * s->m->d_out
      : s->m->d_out;
}

size_t
sattn_stream_pending (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return (size_t) (s->total - s->next_out);
  return (size_t) (s->total - s->last_end);
}

size_t
sattn_stream_max_rows (const SattnStream *s, size_t n_frames)
{
  if (s == NULL)
    return 0;
  if (n_frames == 0)
    return sattn_stream_pending (s) > 0
        ? (s->sc.output == SATTN_OUTPUT_FRAMES ? sattn_stream_pending (s) : 1)
        : 0;
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return sattn_stream_pending (s) + n_frames;
  uint64_t end = s->total + n_frames;
  if (end < s->next_window)
    return 0;
  return (size_t) ((end - s->next_window) / s->h + 1);
}

/* The projections of an all-zero frame: the biases (zero without). */
static void
zero_frame (const SattnModel *m, float *q, float *k, float *v)
{
  if (m->bq)
    memcpy (q, m->bq, m->dq * sizeof (float));
  else
    memset (q, 0, m->dq * sizeof (float));
  if (m->bk)
    memcpy (k, m->bk, m->dq * sizeof (float));
  else
    memset (k, 0, m->dq * sizeof (float));
  if (m->bv)
    memcpy (v, m->bv, m->dv * sizeof (float));
  else
    memset (v, 0, m->dv * sizeof (float));
}

/* Store frames [0, cnt) (all landing in ring slots without wrap) at
 * virtual index p0, applying the frame rule and the invalid policy.
 * Returns how many were stored: cnt, or under SATTN_INVALID_ERROR the
 * index of the first frame with bad data (recorded in s->err_*). */
static size_t
store_frames (SattnStream *s, const float *x, const uint8_t *valid,
              size_t cnt, uint64_t p0)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  size_t slot = (size_t) (p0 % n);
  float *q = s->qring + slot * dq;
  float *k = s->kscratch;
  float *v = s->vring + slot * dv;

  sattn_project (m->wq, m->bq, x, cnt, d, dq, d, q, dq);
  sattn_project (m->wk, m->bk, x, cnt, d, dq, d, k, dq);
  sattn_project (m->wv, m->bv, x, cnt, d, dv, d, v, dv);

  for (size_t i = 0; i < cnt; i++) {
    SattnFrameFault f = sattn_frame_fault (m, valid != NULL && !valid[i],
                                           x + i * d, q + i * dq, k + i * dq,
                                           v + i * dv);
    int ok = f == SATTN_FRAME_OK;
    int bad_data = f == SATTN_FRAME_NONFINITE || f == SATTN_FRAME_OVERFLOW;
    if (bad_data && s->sc.invalid_policy == SATTN_INVALID_ERROR) {
      /* Not consumed: the lower copies of slots [i, cnt) get back the
       * frames still in the window from their mirrors (K is only written
       * below). */
      memcpy (q + i * dq, s->qring + (slot + i + n) * dq,
              (cnt - i) * dq * sizeof (float));
      memcpy (v + i * dv, s->vring + (slot + i + n) * dv,
              (cnt - i) * dv * sizeof (float));
      s->have_error = 1;
      s->err_frame = p0 - n + i;
      s->err_fault = f;
      cnt = i;
      break;
    }
    if (!ok) {
      s->stats.invalid_frames++;
      if (f == SATTN_FRAME_OVERFLOW)
        s->stats.overflow_frames++;
    }
    if (bad_data && s->sc.invalid_policy == SATTN_INVALID_ZERO) {
      zero_frame (m, q + i * dq, k + i * dq, v + i * dv);
      ok = 1;
    } else if (!ok) {
      memset (q + i * dq, 0, dq * sizeof (float));
      memset (k + i * dq, 0, dq * sizeof (float));
      memset (v + i * dv, 0, dv * sizeof (float));
    }
    s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
  }
  memcpy (s->qring + (slot + n) * dq, q, cnt * dq * sizeof (float));
  for (size_t t = 0; t < dq; t++) {
    float *restrict dst = s->ktring + t * 2 * n + slot;
    for (size_t i = 0; i < cnt; i++)
      dst[i] = dst[i + n] = k[i * dq + t];
  }
  memcpy (s->vring + (slot + n) * dv, v, cnt * dv * sizeof (float));
  return cnt;
}

/* The output rows of a window: those of unusable queries are zeros; those
 * whose output projection overflowed too, counted.  row_ok[q0 + i] says
 * which rows are valid. */
static void
finish_rows (SattnStream *s, const uint8_t *query_ok, size_t rows, size_t q0,
             float *out, size_t ldo)
{
  const SattnModel *m = s->m;
  uint8_t *ok = s->row_ok + q0;
  for (size_t i = 0; i < rows; i++) {
    ok[i] = query_ok[i];
    if (!ok[i])
      memset (out + i * ldo, 0, m->d_out * sizeof (float));
  }
  s->stats.overflow_rows += sattn_zero_overflowed_rows (m, out, rows, ldo,
                                                        ok);
}

/* Compute the window ending after frame count F = s->total, for the last
 * `rows` query rows of it (rows <= n), writing rows of output. */
static void
compute_window (SattnStream *s, size_t rows, float *out, size_t ldo)
{
  const SattnModel *m = s->m;
  const size_t n = s->n;
  size_t base = (size_t) (s->total % n);     /* first key slot */
  size_t q0 = n - rows;
  SattnStats *stats = s->sc.collect_stats ? &s->stats : NULL;

  SattnAttnArgs a = {
    .q = s->qring + (base + q0) * m->dq, .ldq = m->dq,
    .kt = s->ktring + base, .ldkt = 2 * n,
    .v = s->vring + base * m->dv, .ldv = m->dv,
    .key_ok = s->vring_ok + base,
    .query_ok = s->vring_ok + base + q0,
    .allow = NULL, .ld_allow = 0,
    .m = rows, .nk = n, .q0 = q0,
    .scores = s->scores, .o = s->o,
    .weights = s->wkeep, .stats = stats,
    .sat_threshold = s->sc.saturation_threshold,
  };
  sattn_attend_window (m, &a);
  sattn_output_project (m, s->o, rows, out, ldo);
  finish_rows (s, a.query_ok, rows, q0, out, ldo);

  if (s->wkeep)
    s->wkeep_rows = rows;
  s->have_window = 1;
  if (stats) {
    stats->windows++;
    for (size_t j = 0; j < n; j++)
      if (!a.key_ok[j])
        stats->masked_keys++;
  }
}

/* Emit the output of the window ending now; `drain` for a partial one. */
static size_t
emit_window (SattnStream *s, float *out, SattnRowInfo *info)
{
  const SattnModel *m = s->m;
  const size_t n = s->n, d_out = m->d_out;
  size_t produced = 0;

  switch (s->sc.output) {
    case SATTN_OUTPUT_FRAMES: {
      size_t rows = (size_t) (s->total - s->next_out);
      if (rows > n)
        rows = n;               /* cannot happen: windows come every <= n */
      compute_window (s, rows, out, d_out);
      if (info)
        for (size_t i = 0; i < rows; i++) {
          info[i].first = s->next_out + i;
          info[i].n_frames = 1;
          info[i].valid = s->row_ok[n - rows + i];
        }
      s->next_out += rows;
      produced = rows;
      break;
    }
    case SATTN_OUTPUT_WINDOW:
      compute_window (s, n, out, d_out);
      produced = 1;
      break;
    case SATTN_OUTPUT_LAST:
      compute_window (s, 1, out, d_out);
      produced = 1;
      break;
    case SATTN_OUTPUT_MEAN: {
      /* In double, a block of columns at a time: a float sum of rows near
       * FLT_MAX overflows, the double one cannot, and the mean of finite
       * rows then rounds to a finite float. */
      compute_window (s, n, s->pool, d_out);
      size_t cnt = 0;
      for (size_t i = 0; i < n; i++)
        cnt += s->row_ok[i] != 0;
      for (size_t t0 = 0; t0 < d_out; t0 += 64) {
        double acc[64];
        size_t w = d_out - t0 < 64 ? d_out - t0 : 64;
        memset (acc, 0, sizeof (acc));
        for (size_t i = 0; i < n; i++) {
          if (!s->row_ok[i])
            continue;
          const float *restrict r = s->pool + i * d_out + t0;
          for (size_t t = 0; t < w; t++)
            acc[t] += r[t];
        }
        for (size_t t = 0; t < w; t++)
          out[t0 + t] = cnt > 0 ? (float) (acc[t] / (double) cnt) : 0.0f;
      }
      produced = 1;
      break;
    }
  }
  if (s->sc.output != SATTN_OUTPUT_FRAMES && info) {
    int any = 0;
    size_t first_q = s->sc.output == SATTN_OUTPUT_LAST ? n - 1 : 0;
    for (size_t i = first_q; i < n; i++)
      any |= s->row_ok[i];
    info[0].first = s->last_end;
    info[0].n_frames = (uint32_t) (s->total - s->last_end);
    info[0].valid = (uint8_t) any;
  }
  s->last_end = s->total;
  s->next_window = s->total + s->h;
  return produced;
}

SattnStatus
sattn_stream_push (SattnStream *s, const float *frames, size_t n_frames,
                   const uint8_t *valid, float *out, size_t out_rows,
                   SattnRowInfo *info, size_t *n_rows)
{
  if (n_rows)
    *n_rows = 0;
  if (s == NULL || (frames == NULL && n_frames > 0))
    return SATTN_E_INVAL;
  size_t need = sattn_stream_max_rows (s, n_frames);
  if (need > 0 && out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;

  const size_t d = s->m->cfg.d_model, n = s->n;
  const size_t rf = sattn_stream_row_floats (s);
  size_t produced = 0;
  sattn_blas_threads (s->m);

  while (n_frames > 0) {
    /* Frames until the next window, then until the ring wraps. */
    uint64_t p = s->total + n;
    size_t until = (size_t) (s->next_window - s->total);
    size_t cnt = n_frames < until ? n_frames : until;
    size_t room = n - (size_t) (p % n);
    if (cnt > room)
      cnt = room;
    size_t stored = store_frames (s, frames, valid, cnt, p);
    s->total += stored;
    if (s->sc.collect_stats)
      s->stats.frames += stored;
    if (stored < cnt) {
      /* Invalid policy ERROR: no window can be due before that frame. */
      if (n_rows)
        *n_rows = produced;
      return SATTN_E_NONFINITE;
    }
    frames += cnt * d;
    if (valid)
      valid += cnt;
    n_frames -= cnt;
    if (s->total == s->next_window)
      produced += emit_window (s, out + produced * rf,
                               info ? info + produced : NULL);
  }
  if (n_rows)
    *n_rows = produced;
  return SATTN_OK;
}

SattnStatus
sattn_stream_drain (SattnStream *s, float *out, size_t out_rows,
                    SattnRowInfo *info, size_t *n_rows)
{
  if (n_rows)
    *n_rows = 0;
  if (s == NULL)
    return SATTN_E_INVAL;
  size_t need = sattn_stream_max_rows (s, 0);
  if (need == 0)
    return SATTN_OK;
  if (out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;
  sattn_blas_threads (s->m);
  size_t produced = emit_window (s, out, info);
  if (n_rows)
    *n_rows = produced;
  return SATTN_OK;
}

void
sattn_stream_get_stats (SattnStream *s, SattnStats *out, int clear)
{
  if (s == NULL)
    return;
  if (out)
    *out = s->stats;
  if (clear)
    sattn_stats_clear (&s->stats);
}

SattnStatus
sattn_stream_last_weights (const SattnStream *s, int head, float *out,
                           size_t *rows, size_t *cols)
{
  if (s == NULL || s->wkeep == NULL || !s->have_window ||
      head < -1 || (head >= 0 && (size_t) head >= s->m->cfg.heads))
    return SATTN_E_INVAL;
  const size_t r = s->wkeep_rows, c = s->ncols, H = s->m->cfg.heads;
  if (rows)
    *rows = r;
  if (cols)
    *cols = c;
  if (out == NULL)
    return SATTN_OK;
  if (head >= 0) {
    memcpy (out, s->wkeep + (size_t) head * r * c, r * c * sizeof (float));
    return SATTN_OK;
  }
  /* Head by head: contiguous, vectorisable passes. */
  const float inv = 1.0f / (float) H;
  memcpy (out, s->wkeep, r * c * sizeof (float));
  for (size_t h = 1; h < H; h++) {
    const float *restrict src = s->wkeep + h * r * c;
    for (size_t i = 0; i < r * c; i++)
      out[i] += src[i];
  }
  for (size_t i = 0; i < r * c; i++)
    out[i] *= inv;
  return SATTN_OK;
}

uint64_t
sattn_stream_frames (const SattnStream *s)
{
  return s ? s->total : 0;
}

SattnStatus
sattn_stream_set_invalid_policy (SattnStream *s, SattnInvalidPolicy policy)
{
  if (s == NULL || policy > SATTN_INVALID_ERROR)
    return SATTN_E_INVAL;
  s->sc.invalid_policy = policy;
  return SATTN_OK;
}

SattnStatus
sattn_stream_error_frame (const SattnStream *s, uint64_t *index,
                          SattnFrameFault *fault)
{
  if (s == NULL || !s->have_error)
    return SATTN_E_INVAL;
  if (index)
    *index = s->err_frame;
  if (fault)
    *fault = s->err_fault;
  return SATTN_OK;
}
