/* The incremental executor (an attention or encoder layer) behind its
 * ops table: creation and sizes, push, drain, the emission of a window
 * and its row descriptions.  The front end (stream.c) holds the schedule,
 * the errors and the statistics (SattnStream); the state below is
 * SattnInc (incremental.h).
 *
 * Each frame is projected to Q, K and V exactly once, into mirrored rings
 * of 2n rows: frame with virtual index p = frames_since_reset + n lives in
 * slots p % n and p % n + n, so the n keys of any window are contiguous
 * (rows [F % n, F % n + n) for the window that ends after frame F - 1).
 * Virtual indices below n are the padding before the stream starts: their
 * slots are zero and invalid.  Nothing is allocated after inc_create.
 *
 * Threads: the work of a window is cut into a fixed set of tasks that does
 * not depend on the thread count: the projections of the new frames and
 * the output projection in blocks of PROJ_ROWS rows × PROJ_COLS columns,
 * the attention in (head, block of ATTN_ROWS query rows) pairs; with
 * workers, a window of at most ATTN_ROWS query rows due right after the
 * frames of a push runs one task per head that first projects that head's columns of the
 * new frames (project_head): one synchronisation per window.  Each task
 * writes its own rows / columns; statistics go to per-worker parts (counts
 * and extrema, whose merge order does not matter) and per-task sums merged
 * in task order.  The caller's thread runs tasks too, and with threads = 1
 * it runs all of them, in the same blocks: the bytes are the same for every
 * thread count.  Projections large enough for BLAS run as one cblas_sgemm
 * call on the caller's thread.  With workers the Q and V rings are head
 * major, each head on pages of its own (see SattnInc.qhs): the threads
 * write and read different heads, and lines of different heads side by
 * side in one row made each core's prefetchers pull the lines the other
 * core was writing (docs/performance.md, "threads=2 on W1").
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "stream/incremental.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
inc_destroy (void *e)
{
  SattnInc *s = e;
  if (s == NULL)
    return;
  if (s->vring != s->qring)
    sattn_mem_free (s->vring);
  sattn_mem_free (s->qring);
  sattn_mem_free (s->ktring);
  sattn_mem_free (s->kscratch);
  free (s->vring_ok);
  sattn_mem_free (s->scores);
  sattn_mem_free (s->o);
  sattn_mem_free (s->pool);
  sattn_mem_free (s->fe->wkeep);
  s->fe->wkeep = NULL;
  sattn_mem_free (s->wstats);
  sattn_mem_free (s->tsums);
  sattn_pool_free (s->workers);
  free (s->row_ok);
  free (s->dcopy);
  sattn_mem_free (s->xstage);
  sattn_mem_free (s->ostage);
  free (s->ostage_ok);
  sattn_mem_free (s->xring);
  sattn_mem_free (s->xnorm);
  sattn_mem_free (s->lscratch);
  sattn_mem_free (s->qstage);
  sattn_mem_free (s->vstage);
  sattn_mem_free (s->ohm);
  free (s);
}

static void
inc_reset (void *e)
{
  SattnInc *s = e;
  const SattnModel *m = s->m;
  const size_t H = m->cfg.heads;
  memset (s->qring, 0,
          (s->qhs ? H * s->qhs : 2 * s->n * m->dq) * sizeof (float));
  memset (s->ktring, 0, s->ldkt * m->dq * sizeof (float));
  if (s->vring != s->qring)
    memset (s->vring, 0,
            (s->qhs ? H * s->vhs : 2 * s->n * m->dv) * sizeof (float));
  memset (s->vring_ok, 0, 2 * s->n);
  if (s->xring)
    memset (s->xring, 0, 2 * s->n * m->cfg.d_model * sizeof (float));
  s->dcnt = 0;
  s->dproj = 0;
  s->ocnt = 0;
  s->odefer = 0;
}

/* Every allocation of the executor, in bytes: the one table inc_create
 * allocates from and inc_bytes adds up. */
typedef struct {
  size_t qring, ktring, kscratch, vring, vring_ok, row_ok, dcopy, scores, o,
      xstage, ostage, ostage_ok, xcap, ocap, pool, qhs, vhs, ohs, qstage,
      vstage, ohm, wkeep, wstats, tsums, threads_bytes, xring, xnorm, lscratch,
      total;
  unsigned n_threads;
  int qv_shared;
} StreamSizes;

/* Whether Q and V are the same rows of every frame: identity projections
 * without biases of the same width, nothing rotating Q (RoPE) or feeding
 * norm1 of the frames (an encoder layer).  Every path then writes the
 * same values into both rings (the frames, or zeros), so the stream keeps
 * one ring for both: the per-hop copies write half as many lines, and the
 * window's keys and values sit in half the cache. */
static int
qv_shared (const SattnModel *m)
{
  return m->wq == NULL && m->wv == NULL && m->bq == NULL && m->bv == NULL &&
         !sattn_model_rope (m) && !m->cfg.encoder && m->dq == m->dv &&
         m->cfg.d_head == m->cfg.d_value;
}

/* a * b * c without wrapping; 0 on overflow (no factor is 0 here). */
static size_t
mul3 (size_t a, size_t b, size_t c)
{
  if (a == 0 || b == 0 || c == 0)
    return 0;
  if (b > SIZE_MAX / a || c > SIZE_MAX / (a * b))
    return 0;
  return a * b * c;
}

#define PAGE 4096
#define PAGE_FLOATS (PAGE / sizeof (float))

/* f floats rounded up to whole pages (0 on overflow). */
static size_t
page_floats (size_t f)
{
  if (f > SIZE_MAX - PAGE_FLOATS)
    return 0;
  return (f + PAGE_FLOATS - 1) / PAGE_FLOATS * PAGE_FLOATS;
}

/* Floats between the rows of the transposed K ring: 2n rounded up to
 * whole cache lines, plus one line when that is an even number of lines.
 * Rows 2n floats apart (2 KiB at n = 256) all fall in two of the L1
 * cache's 64 sets: the 16 rows of a head that Q·Kᵀ and the ring copies
 * read and write together then evict each other; an odd number of lines
 * between rows spreads them over every set. */
static size_t
kt_stride (size_t n)
{
  size_t l = (2 * n + LINE_FLOATS - 1) / LINE_FLOATS;
  return (l % 2 == 0 ? l + 1 : l) * LINE_FLOATS;
}

/* Floats of one thread's score scratch: min (ATTN_ROWS, window) rows,
 * rounded up to whole cache lines, or to whole pages with workers (the
 * threads' scratch then never shares a page). */
static size_t
score_stride (size_t n, size_t ncols, unsigned n_threads)
{
  const size_t arows = n < ATTN_ROWS ? n : ATTN_ROWS;
  if (ncols > (SIZE_MAX - PAGE_FLOATS) / arows)
    return 0;
  if (n_threads > 1)
    return page_floats (arows * ncols);
  return (arows * ncols + LINE_FLOATS - 1) / LINE_FLOATS * LINE_FLOATS;
}

/* size bytes at a cache-line boundary, NULL on failure; released with
 * sattn_mem_free (large ones go back to the system). */
static void *
alloc_lines (size_t size)
{
  return sattn_mem_alloc (size, LINE);
}

/* size bytes at a page boundary, NULL on failure; the same. */
static void *
alloc_pages (size_t size)
{
  return sattn_mem_alloc (size, PAGE);
}

/* Rows of a batch (xstage, ostage) of rows of row_floats floats: up to
 * BATCH_BYTES, at least BATCH_MIN, at most BATCH_FRAMES, whole blocks
 * of PROJ_ROWS when there is room for one.  Every stream holds these
 * buffers (16 elements of d_model 1792 would hold 64 MiB at 2 MiB each). */
static size_t
batch_rows (size_t row_floats)
{
  size_t r = BATCH_BYTES / (row_floats * sizeof (float));
  if (r > BATCH_FRAMES)
    r = BATCH_FRAMES;
  if (r >= PROJ_ROWS)
    r = r / PROJ_ROWS * PROJ_ROWS;
  return r < BATCH_MIN ? BATCH_MIN : r;
}

/* Floats of one thread's layer scratch, in whole cache lines. */
static size_t
layer_stride (const SattnModel *m)
{
  size_t f = sattn_layer_scratch (m);
  if (f > SIZE_MAX - LINE_FLOATS)
    return 0;
  return (f + LINE_FLOATS - 1) / LINE_FLOATS * LINE_FLOATS;
}

/* Fills z; returns 0 when a size overflows (or the geometry is too large
 * for 32-bit frame counts). */
static int
stream_sizes (const SattnModel *m, const SattnStreamConfig *sc, StreamSizes *z)
{
  const size_t n = sc->window, ncols = n + m->n_extra, H = m->cfg.heads;
  const size_t fs = sizeof (float);

  *z = (StreamSizes){ 0 };
  if (n > (size_t) INT32_MAX / 2)
    return 0;
  z->n_threads = sattn_resolve_threads (sc->threads);
  z->qv_shared = qv_shared (m);
  if (z->n_threads > 1) {
    /* Head-major rings and O rows (see SattnInc). */
    const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
    const size_t arows = n < ATTN_ROWS ? n : ATTN_ROWS;
    if ((z->qhs = page_floats (mul3 (2 * n, dh, 1))) == 0 ||
        (z->vhs = page_floats (mul3 (2 * n, dvh, 1))) == 0 ||
        (z->ohs = page_floats (arows * dvh)) == 0 ||
        (z->qring = mul3 (H, z->qhs, fs)) == 0 ||
        (!z->qv_shared && (z->vring = mul3 (H, z->vhs, fs)) == 0) ||
        (z->ohm = mul3 (H, z->ohs, fs)) == 0 ||
        (z->qstage = mul3 (n, m->dq, fs)) == 0 ||
        (z->vstage = mul3 (n, m->dv, fs)) == 0)
      return 0;
  } else if ((z->qring = mul3 (2 * n, m->dq, fs)) == 0 ||
             (!z->qv_shared && (z->vring = mul3 (2 * n, m->dv, fs)) == 0)) {
    return 0;
  }
  if ((z->ktring = mul3 (kt_stride (n), m->dq, fs)) == 0 ||
      (z->kscratch = mul3 (n, m->dq, fs)) == 0 ||
      (z->scores = mul3 (z->n_threads, score_stride (n, ncols, z->n_threads),
                         fs)) == 0 ||
      (z->o = mul3 (n, m->dv, fs)) == 0)
    return 0;
  z->vring_ok = 2 * n;
  z->row_ok = 2 * n; /* row_ok, then row_part */
  z->dcopy = n;
  /* Batched projections: not for an encoder layer (pre-norm projects
   * norm1 of the frames; the layer runs on each window's projected rows). */
  if (!m->cfg.encoder && (m->wq != NULL || m->wk != NULL || m->wv != NULL)) {
    z->xcap = batch_rows (2 * m->dq + m->dv);
    if ((z->xstage = mul3 (z->xcap, 2 * m->dq + m->dv, fs)) == 0)
      return 0;
  }
  if (!m->cfg.encoder && m->wo != NULL && sc->output == SATTN_OUTPUT_FRAMES) {
    z->ocap = batch_rows (m->dv);
    if ((z->ostage = mul3 (z->ocap, m->dv, fs)) == 0)
      return 0;
    z->ostage_ok = z->ocap;
  }
  if (sc->output == SATTN_OUTPUT_MEAN &&
      (z->pool = mul3 (n, m->d_out, fs)) == 0)
    return 0;
  if (sc->output == SATTN_OUTPUT_WINDOW && mul3 (n, m->d_out, fs) == 0)
    return 0;
  if (sc->keep_weights &&
      (mul3 (H, n, 1) == 0 || (z->wkeep = mul3 (H * n, ncols, fs)) == 0))
    return 0;
  if (sc->collect_stats) {
    z->wstats = z->n_threads * WSTATS_STRIDE;
    if ((z->tsums = mul3 (attn_tasks (H, n), TSUMS_STRIDE, sizeof (double))) ==
        0)
      return 0;
  }
  if (m->cfg.encoder) {
    const size_t lst = layer_stride (m);
    if ((z->xring = mul3 (2 * n, m->cfg.d_model, fs)) == 0 || lst == 0 ||
        (z->lscratch = mul3 (z->n_threads, lst, fs)) == 0)
      return 0;
    if (m->cfg.norm_first && (z->xnorm = mul3 (n, m->cfg.d_model, fs)) == 0)
      return 0;
  }
  z->threads_bytes = sattn_pool_bytes (z->n_threads);
  size_t parts[] = { sizeof (SattnInc),
                     z->qring,
                     z->ktring,
                     z->kscratch,
                     z->vring,
                     z->vring_ok,
                     z->row_ok,
                     z->dcopy,
                     z->xstage,
                     z->ostage,
                     z->ostage_ok,
                     z->scores,
                     z->o,
                     z->pool,
                     z->wkeep,
                     z->wstats,
                     z->tsums,
                     z->threads_bytes,
                     z->xring,
                     z->xnorm,
                     z->lscratch,
                     z->qstage,
                     z->vstage,
                     z->ohm };
  size_t total = 0;
  for (size_t k = 0; k < sizeof (parts) / sizeof (parts[0]); k++) {
    if (parts[k] > SIZE_MAX - total)
      return 0;
    total += parts[k];
  }
  z->total = total;
  return 1;
}

/* The rules for sc of an attention or encoder layer (after the front
 * end's). */
static SattnStatus
inc_check (const SattnModel *m, const SattnStreamConfig *sc, char *err,
           size_t err_len)
{
  if (sc->output == SATTN_OUTPUT_CLASSES)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=classes needs a whole model with a "
                       "classification head; this model is one attention "
                       "layer (use frames, window, mean or last)");
  (void) m;
  return SATTN_OK;
}

static SattnStatus
inc_fits (const SattnModel *m, const SattnStreamConfig *sc, char *err,
          size_t err_len)
{
  StreamSizes z;
  if (!stream_sizes (m, sc, &z))
    return sattn_fail (SATTN_E_NOMEM, err, err_len,
                       "window=%zu of %zu-value frames (heads=%zu, %zu "
                       "extra keys) needs more memory than the address "
                       "space holds; use a smaller window",
                       sc->window, m->cfg.d_model, m->cfg.heads, m->n_extra);
  return SATTN_OK;
}

static size_t
inc_bytes (const SattnModel *m, const SattnStreamConfig *sc)
{
  StreamSizes z;
  return stream_sizes (m, sc, &z) ? z.total : 0;
}

/* Every buffer of z (allocated where z has bytes for it); 0 when one
 * could not be. */
static int
inc_alloc (SattnInc *s, const StreamSizes *z)
{
  const size_t n = s->n;
  s->qring = alloc_pages (z->qring);
  s->ktring = alloc_pages (z->ktring);
  s->ldkt = kt_stride (s->n);
  s->kscratch = alloc_lines (z->kscratch);
  s->vring = z->qv_shared ? s->qring : alloc_pages (z->vring);
  if (z->qstage) {
    s->qstage = alloc_lines (z->qstage);
    s->vstage = alloc_lines (z->vstage);
    s->ohm = alloc_pages (z->ohm);
  }
  s->vring_ok = malloc (z->vring_ok);
  s->row_ok = malloc (z->row_ok);
  s->row_part = s->row_ok != NULL ? s->row_ok + n : NULL;
  s->dcopy = malloc (z->dcopy);
  if (z->xstage)
    s->xstage = alloc_lines (z->xstage);
  if (z->ostage) {
    s->ostage = alloc_lines (z->ostage);
    s->ostage_ok = malloc (z->ostage_ok);
  }
  s->scores = alloc_pages (z->scores);
  s->o = alloc_lines (z->o);
  if (z->pool)
    s->pool = alloc_lines (z->pool);
  if (z->wkeep)
    s->fe->wkeep = alloc_lines (z->wkeep);
  if (z->wstats)
    s->wstats = alloc_lines (z->wstats);
  if (z->tsums)
    s->tsums = alloc_lines (z->tsums);
  if (z->xring)
    s->xring = alloc_lines (z->xring);
  if (z->xnorm)
    s->xnorm = alloc_lines (z->xnorm);
  if (z->lscratch)
    s->lscratch = alloc_lines (z->lscratch);
  return s->qring && s->ktring && s->kscratch && s->vring && s->vring_ok &&
         s->row_ok && s->dcopy && (!z->xstage || s->xstage) &&
         (!z->ostage || (s->ostage && s->ostage_ok)) && s->scores && s->o &&
         (!z->pool || s->pool) && (!z->wkeep || s->fe->wkeep) &&
         (!z->wstats || s->wstats) && (!z->tsums || s->tsums) &&
         (!z->xring || s->xring) && (!z->xnorm || s->xnorm) &&
         (!z->lscratch || s->lscratch) &&
         (!z->qstage || (s->qstage && s->vstage && s->ohm));
}

/* The executor of fe over m, at fe's precision: m as it is, and with
 * precision=fast every projection summed in float (SattnInc.fast). */
static void *
inc_create (SattnStream *fe, const SattnModel *m, SattnStatus *st)
{
  const SattnStreamConfig *sc = &fe->sc;
  StreamSizes z;
  if (!stream_sizes (m, sc, &z)) {
    *st = SATTN_E_NOMEM;
    return NULL;
  }
  const size_t n = fe->n;
  SattnInc *s = calloc (1, sizeof (*s));
  if (s == NULL) {
    *st = SATTN_E_NOMEM;
    return NULL;
  }
  s->fe = fe;
  s->m = m;
  s->fast = sc->precision == SATTN_PRECISION_FAST;
  s->n = n;
  s->h = fe->h;
  s->ncols = n + m->n_extra;
  s->n_threads = z.n_threads;
  s->qhs = z.qhs;
  s->vhs = z.vhs;
  s->ohs = z.ohs;
  s->xcap = z.xcap;
  s->ocap = z.ocap;
  s->lstride = m->cfg.encoder ? layer_stride (m) : 0;
  fe->row_floats = sc->output == SATTN_OUTPUT_WINDOW ? n * m->d_out : m->d_out;
  fe->wkeep_cols = s->ncols;
  fe->wkeep_max_rows = n;
  fe->wkeep_win_rows = sc->output == SATTN_OUTPUT_LAST ? 1 : n;
  if (!inc_alloc (s, &z)) {
    *st = SATTN_E_NOMEM;
    goto fail;
  }
  if (s->n_threads > 1 &&
      (s->workers = sattn_pool_new (s->n_threads)) == NULL) {
    *st = SATTN_E_NOMEM; /* a thread could not be created */
    goto fail;
  }
  s->par_min = PAR_MIN;
  const char *pm = getenv ("SATTN_PAR_MIN");
  if (pm != NULL && *pm != '\0') {
    char *end = NULL;
    double v = strtod (pm, &end);
    if (end != NULL && *end == '\0' && v >= 0.0)
      s->par_min = v;
  }
  s->sstride = score_stride (n, s->ncols, s->n_threads);
  for (unsigned w = 0; s->wstats && w < s->n_threads; w++)
    sattn_stats_clear (wstats_at (s, w));
  inc_reset (s);
  return s;

fail:
  inc_destroy (s);
  return NULL;
}

static size_t
inc_window_rows (const void *e, int drain)
{
  const SattnInc *s = e;
  const SattnStream *fe = s->fe;
  const uint64_t pending = fe->sc.output == SATTN_OUTPUT_FRAMES
                               ? fe->total - fe->next_out
                               : fe->total - fe->last_end;
  if (drain && pending == 0)
    return 0;
  switch (fe->sc.output) {
    case SATTN_OUTPUT_FRAMES: {
      /* The frames without a row when the window comes (the hop's new
       * frames; the whole window for the first one under START_WAIT). */
      uint64_t rows = drain ? pending : fe->next_window - fe->next_out;
      return (size_t) (rows < s->n ? rows : s->n);
    }
    case SATTN_OUTPUT_LAST:
      return 1;
    default:
      return s->n;
  }
}

/* The key side of the window just computed, for the rows info[0..) that
 * account for its query rows [q0, n): frames mode one query per row
 * (n - q0 rows), pooled modes all of them in info[0].  See SattnRowInfo. */
static void
describe_window (const SattnInc *s, SattnRowInfo *info, size_t q0)
{
  const SattnModel *m = s->m;
  const size_t n = s->n;
  const uint8_t *key_ok = s->vring_ok + (size_t) (s->fe->total % n);
  const int per_row = s->fe->sc.output == SATTN_OUTPUT_FRAMES;
  uint32_t masked = 0, fm_sum = 0;
  size_t scan = 0, last1 = 0; /* last1: 1 + last usable key < scan */

  for (size_t j = 0; j < n; j++)
    masked += !key_ok[j];
  for (size_t q = q0; q < n; q++) {
    size_t lo, hi;
    sattn_visible_keys (&m->cfg, q, n, &lo, &hi);
    /* hi never decreases with q (causal: q + 1; else n). */
    for (; scan < hi; scan++)
      if (key_ok[scan])
        last1 = scan + 1;
    /* As the kernel counts: usable queries only; extra keys always seen. */
    uint32_t fm = key_ok[q] && m->n_extra == 0 && last1 <= lo
                      ? (uint32_t) m->cfg.heads
                      : 0;
    if (per_row)
      info[q - q0].fully_masked = fm;
    else
      fm_sum += fm;
  }
  for (size_t i = 0; i < (per_row ? n - q0 : 1); i++) {
    info[i].window_end = s->fe->total;
    info[i].valid_keys = (uint32_t) n - masked;
    info[i].masked_keys = masked;
    if (!per_row)
      info[i].fully_masked = fm_sum;
  }
}

/* Emit the output of the window ending now; `drain` for a partial one. */
size_t
sattn_inc_emit_window (SattnInc *s, float *out, SattnRowInfo *info)
{
  const SattnModel *m = s->m;
  const size_t n = s->n, d_out = m->d_out;
  size_t produced = 0;

  switch (s->fe->sc.output) {
    case SATTN_OUTPUT_FRAMES: {
      size_t rows = sattn_inc_due_rows (s, s->fe->total);
      int staged = sattn_inc_compute_window (s, rows, out, d_out, info);
      if (info)
        for (size_t i = 0; i < rows; i++) {
          memset (&info[i], 0, sizeof (info[i]));
          info[i].first = s->fe->next_out + i;
          info[i].n_frames = 1;
          /* Staged rows get theirs at flush_rows. */
          if (!staged)
            info[i].valid = s->row_ok[n - rows + i];
        }
      if (info)
        describe_window (s, info, n - rows);
      s->fe->next_out += rows;
      produced = rows;
      break;
    }
    case SATTN_OUTPUT_WINDOW:
      sattn_inc_compute_window (s, n, out, d_out, NULL);
      produced = 1;
      break;
    case SATTN_OUTPUT_LAST:
      sattn_inc_compute_window (s, 1, out, d_out, NULL);
      produced = 1;
      break;
    case SATTN_OUTPUT_CLASSES:
      /* Whole models only (refused by stream_check for a layer). */
      return 0;
    case SATTN_OUTPUT_MEAN: {
      /* In double, a block of columns at a time: a float sum of rows near
       * FLT_MAX overflows, the double one cannot, and the mean of finite
       * rows then rounds to a finite float. */
      sattn_inc_compute_window (s, n, s->pool, d_out, NULL);
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
  if (s->fe->sc.output != SATTN_OUTPUT_FRAMES && info) {
    int any = 0;
    size_t first_q = s->fe->sc.output == SATTN_OUTPUT_LAST ? n - 1 : 0;
    for (size_t i = first_q; i < n; i++)
      any |= s->row_ok[i];
    memset (&info[0], 0, sizeof (info[0]));
    describe_window (s, info, first_q);
    info[0].first = s->fe->last_end;
    info[0].n_frames = (uint32_t) (s->fe->total - s->fe->last_end);
    info[0].valid = (uint8_t) any;
  }
  s->fe->last_end = s->fe->total;
  s->fe->next_window = sattn_schedule_next (s->fe->total, s->h);
  return produced;
}

/* Of `left` frames still to store, how many the next store may take: up
 * to the next window, and without wrapping the ring. */
size_t
sattn_inc_next_chunk (const SattnInc *s, uint64_t left)
{
  const size_t n = s->n;
  uint64_t until = s->fe->next_window - s->fe->total;
  uint64_t cnt = left < until ? left : until;
  size_t room = n - (size_t) ((s->fe->total + n) % n);
  return (size_t) (cnt < room ? cnt : room);
}

/* Rows of a stream whose windows have no contract: in it, no figures. */
static void
checks_none (SattnRowCheck *checks, size_t rows)
{
  for (size_t i = 0; checks != NULL && i < rows; i++) {
    memset (checks + i, 0, sizeof (*checks));
    checks[i].in_contract = 1;
    checks[i].input_rms = NAN;
    checks[i].pooled_z = NAN;
  }
}

static SattnStatus
inc_push (void *e, const float *frames, size_t n_frames, const uint8_t *valid,
          float *out, SattnRowInfo *info, SattnRowCheck *checks, size_t *n_rows)
{
  SattnInc *s = e;
  const size_t d = s->m->cfg.d_model, n = s->n;
  const size_t rf = s->fe->row_floats;
  size_t produced = 0;
  /* A push of more frames than the next window takes (a buffer of many
   * hops, a file processed offline) projects them in blocks of up to xcap
   * frames (xcnt staged, xoff of them stored), and output-projects the
   * rows of its windows in blocks of up to ocap rows, instead of one
   * matrix-vector product per frame and per row; a push of one hop takes
   * the direct path (live latency).  Same bytes either way: the same loop
   * computes every row (see BATCH_FRAMES). */
  const int batch = n_frames > sattn_inc_next_chunk (s, n_frames);
  size_t xcnt = 0, xoff = 0;
  s->odefer = batch && s->ostage != NULL;

  while (n_frames > 0) {
    size_t cnt = sattn_inc_next_chunk (s, n_frames);
    size_t pre = SIZE_MAX;
    if (batch && s->xstage != NULL) {
      if (xoff == xcnt) {
        xcnt = n_frames < s->xcap ? n_frames : s->xcap;
        xoff = 0;
        sattn_inc_stage_projections (s, frames, xcnt);
      }
      if (cnt > xcnt - xoff)
        cnt = xcnt - xoff;
      pre = xoff;
    }
    size_t stored = sattn_inc_store_frames (s, frames, valid, cnt,
                                            s->fe->total + n, pre);
    xoff += stored;
    s->fe->total += stored;
    if (s->fe->sc.collect_stats)
      s->fe->stats.frames += stored;
    if (stored < cnt) {
      /* Invalid policy ERROR: no window can be due before that frame. */
      sattn_inc_flush_rows (s);
      s->odefer = 0;
      checks_none (checks, produced);
      *n_rows = produced;
      return SATTN_E_NONFINITE;
    }
    frames += cnt * d;
    if (valid)
      valid += cnt;
    n_frames -= cnt;
    if (s->fe->total == s->fe->next_window)
      produced += sattn_inc_emit_window (s, out + produced * rf,
                                         info ? info + produced : NULL);
  }
  sattn_inc_flush_rows (s);
  s->odefer = 0;
  checks_none (checks, produced);
  *n_rows = produced;
  return SATTN_OK;
}

static size_t
inc_drain (void *e, float *out, SattnRowInfo *info, SattnRowCheck *checks)
{
  size_t k = sattn_inc_emit_window (e, out, info);
  checks_none (checks, k);
  return k;
}

/* Head by head: contiguous, vectorisable passes. */
static void
inc_weights_mean (const void *e, float *out)
{
  const SattnInc *s = e;
  const SattnStream *fe = s->fe;
  const size_t r = fe->wkeep_rows, c = fe->wkeep_cols, H = s->m->cfg.heads;
  const float inv = 1.0f / (float) H;
  memcpy (out, fe->wkeep, r * c * sizeof (float));
  for (size_t h = 1; h < H; h++) {
    const float *restrict src = fe->wkeep + h * r * c;
    for (size_t i = 0; i < r * c; i++)
      out[i] += src[i];
  }
  for (size_t i = 0; i < r * c; i++)
    out[i] *= inv;
}

const SattnExecOps sattn_exec_incremental = {
  .name = "incremental",
  .check = inc_check,
  .fits = inc_fits,
  .bytes = inc_bytes,
  .create = inc_create,
  .destroy = inc_destroy,
  .reset = inc_reset,
  .push = inc_push,
  .drain = inc_drain,
  .window_rows = inc_window_rows,
  .skip_lead = sattn_inc_skip_lead,
  .push_masked = sattn_inc_push_masked,
  .forget = sattn_inc_forget,
  .weights_mean = inc_weights_mean,
};
