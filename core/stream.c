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
};

void
sattn_stream_free (SattnStream *s)
{
  if (s == NULL)
    return;
  free (s->qring); free (s->ktring); free (s->kscratch); free (s->vring); free (s->vring_ok);
  free (s->scores); free (s->o); free (s->pool); free (s->wkeep);
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
}

SattnStream *
sattn_stream_new (const SattnModel *m, const SattnStreamConfig *sc,
                  SattnStatus *status)
{
  SattnStatus st = SATTN_OK;
  SattnStream *s = NULL;

  if (m == NULL || sc == NULL || sc->window == 0 || sc->hop == 0 ||
      sc->hop > sc->window || sc->output > SATTN_OUTPUT_LAST ||
      sc->start > SATTN_START_WAIT ||
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
  if (sc->output == SATTN_OUTPUT_MEAN)
    s->pool = malloc (n * m->d_out * sizeof (float));
  if (sc->keep_weights)
    s->wkeep = malloc (m->cfg.heads * n * ncols * sizeof (float));
  if (!s->qring || !s->ktring || !s->kscratch || !s->vring || !s->vring_ok || !s->scores ||
      !s->o || (sc->output == SATTN_OUTPUT_MEAN && !s->pool) ||
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

/* Store frames [0, cnt) (all landing in ring slots without wrap) at
 * virtual index p0. */
static void
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
    int fin = sattn_all_finite (x + i * d, d);
    int ok = fin && (valid == NULL || valid[i]) &&
        sattn_all_finite (q + i * dq, dq) &&
        sattn_all_finite (k + i * dq, dq) && sattn_all_finite (v + i * dv, dv);
    if (!fin || (valid != NULL && !valid[i]))
      s->stats.invalid_frames++;
    if (!ok) {
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
  for (size_t i = 0; i < rows; i++)
    if (!a.query_ok[i])
      memset (out + i * ldo, 0, m->d_out * sizeof (float));

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
  size_t base = (size_t) (s->total % n);
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
          info[i].valid = s->vring_ok[base + n - rows + i];
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
      compute_window (s, n, s->pool, d_out);
      memset (out, 0, d_out * sizeof (float));
      size_t cnt = 0;
      for (size_t i = 0; i < n; i++) {
        if (!s->vring_ok[base + i])
          continue;
        const float *r = s->pool + i * d_out;
        for (size_t t = 0; t < d_out; t++)
          out[t] += r[t];
        cnt++;
      }
      if (cnt > 0) {
        float inv = 1.0f / (float) cnt;
        for (size_t t = 0; t < d_out; t++)
          out[t] *= inv;
      }
      produced = 1;
      break;
    }
  }
  if (s->sc.output != SATTN_OUTPUT_FRAMES && info) {
    int any = 0;
    size_t first_q = s->sc.output == SATTN_OUTPUT_LAST ? n - 1 : 0;
    for (size_t i = first_q; i < n; i++)
      any |= s->vring_ok[base + i];
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
    store_frames (s, frames, valid, cnt, p);
    s->total += cnt;
    if (s->sc.collect_stats)
      s->stats.frames += cnt;
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

/* ------------------------------------------------------------ sizes */

/* Adds b to *acc; SIZE_MAX once anything overflowed. */
static void
bytes_add (size_t *acc, size_t a, size_t b, size_t c)
{
  if (*acc == SIZE_MAX)
    return;
  if ((b != 0 && a > SIZE_MAX / b) || (c != 0 && a * b > SIZE_MAX / c) ||
      a * b * c > SIZE_MAX - *acc) {
    *acc = SIZE_MAX;
    return;
  }
  *acc += a * b * c;
}

size_t
sattn_stream_bytes (const SattnModel *m, const SattnStreamConfig *sc)
{
  if (m == NULL || sc == NULL || sc->window == 0)
    return 0;
  const size_t n = sc->window, ncols = n + m->n_extra;
  size_t b = sizeof (SattnStream);

  if (ncols < n)
    return SIZE_MAX;
  /* The allocations of sattn_stream_new, in its order. */
  bytes_add (&b, 2 * (n > SIZE_MAX / 2 ? SIZE_MAX : n), m->dq,
             sizeof (float));                               /* qring */
  bytes_add (&b, 2 * (n > SIZE_MAX / 2 ? SIZE_MAX : n), m->dq,
             sizeof (float));                               /* ktring */
  bytes_add (&b, n, m->dq, sizeof (float));                 /* kscratch */
  bytes_add (&b, 2 * (n > SIZE_MAX / 2 ? SIZE_MAX : n), m->dv,
             sizeof (float));                               /* vring */
  bytes_add (&b, 2 * (n > SIZE_MAX / 2 ? SIZE_MAX : n), 1, 1); /* vring_ok */
  bytes_add (&b, n, ncols, sizeof (float));                 /* scores */
  bytes_add (&b, n, m->dv, sizeof (float));                 /* o */
  if (sc->output == SATTN_OUTPUT_MEAN)
    bytes_add (&b, n, m->d_out, sizeof (float));            /* pool */
  if (sc->keep_weights) {
    size_t hn = SIZE_MAX;
    if (n <= SIZE_MAX / m->cfg.heads)
      hn = m->cfg.heads * n;
    bytes_add (&b, hn, ncols, sizeof (float));              /* wkeep */
  }
  return b;
}

/* ------------------------------------------------------------ skipping */

/* Store cnt invalid frames (no wrap) at virtual index p0: what
 * store_frames does for frames flagged invalid, without projecting. */
static void
store_invalid (SattnStream *s, size_t cnt, uint64_t p0)
{
  const SattnModel *m = s->m;
  const size_t dq = m->dq, dv = m->dv, n = s->n;
  size_t slot = (size_t) (p0 % n);

  for (size_t copy = 0; copy < 2; copy++) {
    size_t sl = slot + copy * n;
    memset (s->qring + sl * dq, 0, cnt * dq * sizeof (float));
    memset (s->vring + sl * dv, 0, cnt * dv * sizeof (float));
    memset (s->vring_ok + sl, 0, cnt);
    for (size_t t = 0; t < dq; t++)
      memset (s->ktring + t * 2 * n + sl, 0, cnt * sizeof (float));
  }
}

/* Zero the slots of the frames [f0, f0 + cnt), cnt <= n, with wrap. */
static void
clear_frames (SattnStream *s, uint64_t f0, size_t cnt)
{
  const size_t n = s->n;
  uint64_t p = f0 + n;

  while (cnt > 0) {
    size_t room = n - (size_t) (p % n);
    size_t k = cnt < room ? cnt : room;
    store_invalid (s, k, p);
    p += k;
    cnt -= k;
  }
}

uint64_t
sattn_stream_skip_lead (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  const size_t n = s->n;
  const uint8_t *ok = s->vring_ok + (size_t) (s->total % n);

  /* After the last usable frame of the window, n more frames bring a
   * window that ends after it (windows come at most n frames apart), and
   * every later window holds only invalid frames. */
  for (size_t i = n; i > 0; i--)
    if (ok[i - 1])
      return i;
  return 0;
}

SattnStatus
sattn_stream_skip (SattnStream *s, uint64_t n_frames, float *out,
                   size_t out_rows, SattnRowInfo *info, size_t *n_rows,
                   SattnSkipped *skipped)
{
  if (n_rows)
    *n_rows = 0;
  if (skipped)
    memset (skipped, 0, sizeof (*skipped));
  /* The frame counter (and the ring's virtual index, n ahead) must not
   * wrap. */
  if (s == NULL || skipped == NULL || s->total > UINT64_MAX - s->n ||
      n_frames > UINT64_MAX - s->n - s->total)
    return SATTN_E_INVAL;

  uint64_t lead = sattn_stream_skip_lead (s);
  size_t k = (size_t) (n_frames < lead ? n_frames : lead);
  size_t need = sattn_stream_max_rows (s, k);
  if (need > 0 && out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;

  const size_t n = s->n, rf = sattn_stream_row_floats (s);
  size_t produced = 0;

  /* The lead: frames whose windows still hold usable frames, as push
   * computes them. */
  if (k > 0)
    sattn_blas_threads (s->m);
  n_frames -= k;
  while (k > 0) {
    uint64_t p = s->total + n;
    size_t until = (size_t) (s->next_window - s->total);
    size_t cnt = k < until ? k : until;
    size_t room = n - (size_t) (p % n);
    if (cnt > room)
      cnt = room;
    store_invalid (s, cnt, p);
    s->stats.invalid_frames += cnt;
    s->total += cnt;
    if (s->sc.collect_stats)
      s->stats.frames += cnt;
    k -= cnt;
    if (s->total == s->next_window)
      produced += emit_window (s, out + produced * rf,
                               info ? info + produced : NULL);
  }
  if (n_rows)
    *n_rows = produced;
  if (n_frames == 0)
    return SATTN_OK;

  /* The rest in closed form: every window ending in it holds only
   * invalid frames, so its rows are zeros with valid = 0, its weights
   * zeros, and it counts n masked keys. */
  const uint64_t t = s->total, end = t + n_frames;
  uint64_t w = 0, last = 0;
  if (end >= s->next_window) {
    w = (end - s->next_window) / s->h + 1;
    last = s->next_window + (w - 1) * s->h;
  }
  if (w > 0) {
    size_t rows;                /* query rows of the last window */
    if (s->sc.output == SATTN_OUTPUT_FRAMES) {
      rows = (size_t) (w > 1 ? s->h : last - s->next_out);
      skipped->first = s->next_out;
      skipped->rows = last - s->next_out;
      s->next_out = last;
    } else {
      rows = s->sc.output == SATTN_OUTPUT_LAST ? 1 : n;
      skipped->first = s->last_end;
      skipped->rows = w;
    }
    skipped->end = last;
    s->last_end = last;
    s->next_window = last + s->h;
    s->have_window = 1;
    if (s->wkeep) {
      memset (s->wkeep, 0,
              s->m->cfg.heads * rows * s->ncols * sizeof (float));
      s->wkeep_rows = rows;
    }
    if (s->sc.collect_stats) {
      s->stats.windows += w;
      s->stats.masked_keys += w * n;
    }
  }
  clear_frames (s, end - (n_frames < n ? n_frames : n),
                (size_t) (n_frames < n ? n_frames : n));
  s->total = end;
  s->stats.invalid_frames += n_frames;
  if (s->sc.collect_stats)
    s->stats.frames += n_frames;
  return SATTN_OK;
}
