/* SattnStream: sliding-window state over a frame stream.
 *
 * Each frame is projected to Q, K and V exactly once, into mirrored rings
 * of 2n rows: frame with virtual index p = frames_since_reset + n lives in
 * slots p % n and p % n + n, so the n keys of any window are contiguous
 * (rows [F % n, F % n + n) for the window that ends after frame F - 1).
 * Virtual indices below n are the padding before the stream starts: their
 * slots are zero and invalid.  Nothing is allocated after sattn_stream_new.
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
 * major, each head on pages of its own (see SattnStream.qhs): the threads
 * write and read different heads, and lines of different heads side by
 * side in one row made each core's prefetchers pull the lines the other
 * core was writing (tests/bench/PERFORMANCE.md, "threads=2 on W1").
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "stream/incremental.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
sattn_stream_free (SattnStream *s)
{
  if (s == NULL)
    return;
  if (s->pw != NULL) {
    sattn_pw_free (s->pw);
    free (s);
    return;
  }
  if (s->vring != s->qring)
    sattn_mem_free (s->vring);
  sattn_mem_free (s->qring);
  sattn_mem_free (s->ktring);
  sattn_mem_free (s->kscratch);
  free (s->vring_ok);
  sattn_mem_free (s->scores);
  sattn_mem_free (s->o);
  sattn_mem_free (s->pool);
  sattn_mem_free (s->wkeep);
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

void
sattn_stream_reset (SattnStream *s)
{
  if (s == NULL)
    return;
  if (s->pw != NULL) {
    sattn_pw_reset (s->pw);
    return;
  }
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
  s->total = 0;
  s->pos0 = 0;
  s->next_out = 0;
  s->last_end = 0;
  s->next_window = sattn_schedule_first (&s->sc, 0);
  s->have_window = 0;
  s->wkeep_rows = 0;
  s->have_error = 0;
  s->dcnt = 0;
  s->dproj = 0;
  s->ocnt = 0;
  s->odefer = 0;
}

/* Every allocation of a stream, in bytes: the one table sattn_stream_new
 * allocates from and sattn_stream_bytes adds up. */
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
    /* Head-major rings and O rows (see SattnStream). */
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
  size_t parts[] = { sizeof (SattnStream),
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

/* The model a stream with config sc computes with: m itself, or with
 * SATTN_PRECISION_FAST *view filled as m without its double copies, so
 * that every projection sums in float from m's float weights
 * (cpu/linear.c reads a projection's double copy when there is one).  The
 * view shares m's arrays and is never freed.  m's packed Q | K | V weights
 * (wqkv) leave V's columns out when V sums in double: the view then has
 * none, and the per-head tasks project from wq, wk and wv, which give the
 * same bytes. */
static const SattnModel *
stream_model (const SattnModel *m, const SattnStreamConfig *sc,
              SattnModel *view)
{
  if (m == NULL || m->net != NULL || sc->precision != SATTN_PRECISION_FAST)
    return m;
  *view = *m;
  view->wqd = view->bqd = view->wkd = view->bkd = NULL;
  view->wvd = view->bvd = view->wod = view->bod = NULL;
  if (m->wvd != NULL)
    view->wqkv = NULL;
  return view;
}

/* Every rule a stream configuration must follow, the one place they are
 * written; m NULL checks sc_in alone.  The caller's struct is read into
 * *sc (this version's struct, see sattn_struct_in), which the checks and
 * the caller then use. */
static SattnStatus
stream_check (const SattnModel *m, const SattnStreamConfig *sc_in,
              SattnStreamConfig *sc, char *err, size_t err_len)
{
  SattnStatus st;

  if (err != NULL && err_len > 0)
    err[0] = '\0';
  if (sc_in == NULL)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "no stream configuration (sc is NULL)");
  if ((st = sattn_struct_in ("SattnStreamConfig", "SattnStreamConfig", sc_in,
                             sc, sizeof *sc, SATTN_STREAM_CONFIG_MIN_SIZE,
                             SIZE_MAX, err, err_len)) != SATTN_OK)
    return st;
  if (sc->window == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "window=0: a window holds at least one frame");
  if (sc->hop == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "hop=0: hop must be between 1 and the window (%zu)",
                       sc->window);
  if (sc->hop > sc->window)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "hop=%zu is larger than window=%zu; hop must be "
                       "between 1 and the window (or the window at least "
                       "%zu)",
                       sc->hop, sc->window, sc->hop);
  if ((unsigned) sc->output > SATTN_OUTPUT_CLASSES)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=%d is not an output mode (0 frames, 1 window, "
                       "2 mean, 3 last, 4 classes)",
                       (int) sc->output);
  if ((unsigned) sc->start > SATTN_START_WAIT)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "start=%d is not a start policy (0 pad, 1 wait)",
                       (int) sc->start);
  if ((unsigned) sc->invalid_policy > SATTN_INVALID_ERROR)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "invalid_policy=%d is not an invalid-frames policy "
                       "(0 mask, 1 zero, 2 error)",
                       (int) sc->invalid_policy);
  if (!(sc->saturation_threshold >= 0.0f && sc->saturation_threshold <= 1.0f))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "saturation_threshold=%g is not within [0, 1] (0 "
                       "means the default %g)",
                       (double) sc->saturation_threshold,
                       (double) SATTN_DEFAULT_SATURATION);
  if (sc->threads < 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "threads=%d is negative; use 1 (the calling thread "
                       "only), a count N > 1, or 0 for one per CPU",
                       sc->threads);
  if ((unsigned) sc->precision > SATTN_PRECISION_FAST)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "precision=%d is not a precision (0 exact, 1 fast)",
                       (int) sc->precision);
  if (m != NULL && m->net != NULL)
    return sattn_pw_check (m, sc, err, err_len);
  if (m != NULL && sc->output == SATTN_OUTPUT_CLASSES)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=classes needs a whole model with a "
                       "classification head; this model is one attention "
                       "layer (use frames, window, mean or last)");
  return SATTN_OK;
}

static int
stream_config_ok (const SattnModel *m, const SattnStreamConfig *sc_in,
                  SattnStreamConfig *sc)
{
  return m != NULL && stream_check (m, sc_in, sc, NULL, 0) == SATTN_OK;
}

SattnStatus
sattn_stream_config_check (const SattnModel *m, const SattnStreamConfig *sc_in,
                           char *err, size_t err_len)
{
  StreamSizes z;
  SattnStreamConfig scl;
  const SattnStreamConfig *sc = &scl;
  SattnModel view;
  SattnStatus st = stream_check (m, sc_in, &scl, err, err_len);
  if (st != SATTN_OK || m == NULL)
    return st;
  m = stream_model (m, sc, &view);
  if (m->net != NULL)
    return sattn_pw_bytes (m, sc) == SIZE_MAX
               ? sattn_fail (SATTN_E_NOMEM, err, err_len,
                             "window=%zu needs more "
                             "memory than the address space holds; use a "
                             "smaller "
                             "window",
                             sc->window)
               : SATTN_OK;
  if (!stream_sizes (m, sc, &z))
    return sattn_fail (SATTN_E_NOMEM, err, err_len,
                       "window=%zu of %zu-value frames (heads=%zu, %zu "
                       "extra keys) needs more memory than the address "
                       "space holds; use a smaller window",
                       sc->window, m->cfg.d_model, m->cfg.heads, m->n_extra);
  return SATTN_OK;
}

size_t
sattn_stream_bytes (const SattnModel *m, const SattnStreamConfig *sc_in)
{
  StreamSizes z;
  SattnStreamConfig scl;
  const SattnStreamConfig *sc = &scl;
  SattnModel view;
  if (!stream_config_ok (m, sc_in, &scl))
    return 0;
  m = stream_model (m, sc, &view);
  if (m->net != NULL) {
    size_t b = sattn_pw_bytes (m, sc);
    return b == SIZE_MAX ? 0 : b + sizeof (SattnStream);
  }
  if (!stream_sizes (m, sc, &z))
    return 0;
  return z.total;
}

SattnStream *
sattn_stream_new (const SattnModel *m, const SattnStreamConfig *sc_in,
                  SattnStatus *status)
{
  SattnStatus st = SATTN_OK;
  SattnStream *s = NULL;
  StreamSizes z;
  SattnStreamConfig scl;
  const SattnStreamConfig *sc = &scl;

  if (!stream_config_ok (m, sc_in, &scl)) {
    st = SATTN_E_INVAL;
    goto fail;
  }
  if (m->net != NULL) {
    s = calloc (1, sizeof (*s));
    if (s == NULL || (s->pw = sattn_pw_new (m, sc)) == NULL) {
      free (s);
      s = NULL;
      st = SATTN_E_NOMEM;
      goto fail;
    }
    s->m = m;
    s->sc = *sc;
    if (status)
      *status = SATTN_OK;
    return s;
  }
  SattnModel view;
  m = stream_model (m, sc, &view);
  if (!stream_sizes (m, sc, &z)) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  size_t n = sc->window;
  s = calloc (1, sizeof (*s));
  if (s == NULL) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if (m == &view) {
    s->fast = view;
    m = &s->fast;
  }
  s->m = m;
  s->sc = *sc;
  if (s->sc.saturation_threshold == 0.0f)
    s->sc.saturation_threshold = SATTN_DEFAULT_SATURATION;
  s->n = n;
  s->h = sc->hop;
  s->ncols = n + m->n_extra;
  s->n_threads = z.n_threads;
  s->qhs = z.qhs;
  s->vhs = z.vhs;
  s->ohs = z.ohs;
  s->qring = alloc_pages (z.qring);
  s->ktring = alloc_pages (z.ktring);
  s->ldkt = kt_stride (s->n);
  s->kscratch = alloc_lines (z.kscratch);
  s->vring = z.qv_shared ? s->qring : alloc_pages (z.vring);
  if (z.qstage) {
    s->qstage = alloc_lines (z.qstage);
    s->vstage = alloc_lines (z.vstage);
    s->ohm = alloc_pages (z.ohm);
  }
  s->vring_ok = malloc (z.vring_ok);
  s->row_ok = malloc (z.row_ok);
  s->row_part = s->row_ok != NULL ? s->row_ok + n : NULL;
  s->dcopy = malloc (z.dcopy);
  s->xcap = z.xcap;
  s->ocap = z.ocap;
  if (z.xstage)
    s->xstage = alloc_lines (z.xstage);
  if (z.ostage) {
    s->ostage = alloc_lines (z.ostage);
    s->ostage_ok = malloc (z.ostage_ok);
  }
  s->scores = alloc_pages (z.scores);
  s->o = alloc_lines (z.o);
  if (z.pool)
    s->pool = alloc_lines (z.pool);
  if (z.wkeep)
    s->wkeep = alloc_lines (z.wkeep);
  if (z.wstats)
    s->wstats = alloc_lines (z.wstats);
  if (z.tsums)
    s->tsums = alloc_lines (z.tsums);
  if (z.xring)
    s->xring = alloc_lines (z.xring);
  if (z.xnorm)
    s->xnorm = alloc_lines (z.xnorm);
  if (z.lscratch)
    s->lscratch = alloc_lines (z.lscratch);
  s->lstride = m->cfg.encoder ? layer_stride (m) : 0;
  if (!s->qring || !s->ktring || !s->kscratch || !s->vring || !s->vring_ok ||
      !s->row_ok || !s->dcopy || (z.xstage && !s->xstage) ||
      (z.ostage && (!s->ostage || !s->ostage_ok)) || !s->scores || !s->o ||
      (z.pool && !s->pool) || (z.wkeep && !s->wkeep) ||
      (z.wstats && !s->wstats) || (z.tsums && !s->tsums) ||
      (z.xring && !s->xring) || (z.xnorm && !s->xnorm) ||
      (z.lscratch && !s->lscratch) ||
      (z.qstage && (!s->qstage || !s->vstage || !s->ohm))) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if (s->n_threads > 1 &&
      (s->workers = sattn_pool_new (s->n_threads)) == NULL) {
    st = SATTN_E_NOMEM; /* a thread could not be created */
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
  sattn_stats_clear (&s->stats);
  s->sstride = score_stride (n, s->ncols, s->n_threads);
  for (unsigned w = 0; s->wstats && w < s->n_threads; w++)
    sattn_stats_clear (wstats_at (s, w));
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
  if (s->pw != NULL)
    return sattn_pw_row_floats (s->pw);
  return s->sc.output == SATTN_OUTPUT_WINDOW ? s->n * s->m->d_out : s->m->d_out;
}

size_t
sattn_stream_pending (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  if (s->pw != NULL)
    return sattn_pw_pending (s->pw);
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return (size_t) (s->total - s->next_out);
  return (size_t) (s->total - s->last_end);
}

uint64_t
sattn_stream_frames_to_window (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  if (s->pw != NULL)
    return sattn_pw_frames_to_window (s->pw);
  return s->next_window - s->total;
}

size_t
sattn_stream_config_window_rows (const SattnStreamConfig *sc_in)
{
  SattnStreamConfig scl;
  const SattnStreamConfig *sc = &scl;
  if (stream_check (NULL, sc_in, &scl, NULL, 0) != SATTN_OK)
    return 0;
  switch (sc->output) {
    case SATTN_OUTPUT_FRAMES:
      return sc->hop;
    case SATTN_OUTPUT_LAST:
      return 1;
    default:
      return sc->window;
  }
}

size_t
sattn_stream_window_rows (const SattnStream *s, int drain)
{
  if (s == NULL)
    return 0;
  if (s->pw != NULL)
    return sattn_pw_window_rows (s->pw, drain);
  size_t pending = sattn_stream_pending (s);
  if (drain && pending == 0)
    return 0;
  switch (s->sc.output) {
    case SATTN_OUTPUT_FRAMES: {
      /* The frames without a row when the window comes (the hop's new
       * frames; the whole window for the first one under START_WAIT). */
      uint64_t rows = drain ? pending : s->next_window - s->next_out;
      return (size_t) (rows < s->n ? rows : s->n);
    }
    case SATTN_OUTPUT_LAST:
      return 1;
    default:
      return s->n;
  }
}

size_t
sattn_stream_max_rows (const SattnStream *s, size_t n_frames)
{
  if (s == NULL)
    return 0;
  if (s->pw != NULL)
    return sattn_pw_max_rows (s->pw, n_frames);
  if (n_frames == 0)
    return sattn_stream_pending (s) > 0
               ? (s->sc.output == SATTN_OUTPUT_FRAMES ? sattn_stream_pending (s)
                                                      : 1)
               : 0;
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return sattn_stream_pending (s) + n_frames;
  return (size_t) sattn_schedule_due (s->next_window, s->h,
                                      s->total + n_frames);
}

/* The key side of the window just computed, for the rows info[0..) that
 * account for its query rows [q0, n): frames mode one query per row
 * (n - q0 rows), pooled modes all of them in info[0].  See SattnRowInfo. */
static void
describe_window (const SattnStream *s, SattnRowInfo *info, size_t q0)
{
  const SattnModel *m = s->m;
  const size_t n = s->n;
  const uint8_t *key_ok = s->vring_ok + (size_t) (s->total % n);
  const int per_row = s->sc.output == SATTN_OUTPUT_FRAMES;
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
    info[i].window_end = s->total;
    info[i].valid_keys = (uint32_t) n - masked;
    info[i].masked_keys = masked;
    if (!per_row)
      info[i].fully_masked = fm_sum;
  }
}

/* Emit the output of the window ending now; `drain` for a partial one. */
size_t
sattn_inc_emit_window (SattnStream *s, float *out, SattnRowInfo *info)
{
  const SattnModel *m = s->m;
  const size_t n = s->n, d_out = m->d_out;
  size_t produced = 0;

  switch (s->sc.output) {
    case SATTN_OUTPUT_FRAMES: {
      size_t rows = sattn_inc_due_rows (s, s->total);
      int staged = sattn_inc_compute_window (s, rows, out, d_out, info);
      if (info)
        for (size_t i = 0; i < rows; i++) {
          memset (&info[i], 0, sizeof (info[i]));
          info[i].first = s->next_out + i;
          info[i].n_frames = 1;
          /* Staged rows get theirs at flush_rows. */
          if (!staged)
            info[i].valid = s->row_ok[n - rows + i];
        }
      if (info)
        describe_window (s, info, n - rows);
      s->next_out += rows;
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
  if (s->sc.output != SATTN_OUTPUT_FRAMES && info) {
    int any = 0;
    size_t first_q = s->sc.output == SATTN_OUTPUT_LAST ? n - 1 : 0;
    for (size_t i = first_q; i < n; i++)
      any |= s->row_ok[i];
    memset (&info[0], 0, sizeof (info[0]));
    describe_window (s, info, first_q);
    info[0].first = s->last_end;
    info[0].n_frames = (uint32_t) (s->total - s->last_end);
    info[0].valid = (uint8_t) any;
  }
  s->last_end = s->total;
  s->next_window = sattn_schedule_next (s->total, s->h);
  return produced;
}

/* Of `left` frames still to store, how many the next store may take: up
 * to the next window, and without wrapping the ring. */
size_t
sattn_inc_next_chunk (const SattnStream *s, uint64_t left)
{
  const size_t n = s->n;
  uint64_t until = s->next_window - s->total;
  uint64_t cnt = left < until ? left : until;
  size_t room = n - (size_t) ((s->total + n) % n);
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

SattnStatus
sattn_stream_push (SattnStream *s, const float *frames, size_t n_frames,
                   const uint8_t *valid, float *out, size_t out_rows,
                   SattnRowInfo *info, size_t *n_rows)
{
  return sattn_stream_push_checked (s, frames, n_frames, valid, out, out_rows,
                                    info, NULL, n_rows);
}

SattnStatus
sattn_stream_drain (SattnStream *s, float *out, size_t out_rows,
                    SattnRowInfo *info, size_t *n_rows)
{
  return sattn_stream_drain_checked (s, out, out_rows, info, NULL, n_rows);
}

static SattnStatus inc_push (SattnStream *s, const float *frames,
                             size_t n_frames, const uint8_t *valid, float *out,
                             SattnRowInfo *info, size_t *n_rows);

SattnStatus
sattn_stream_push_checked (SattnStream *s, const float *frames, size_t n_frames,
                           const uint8_t *valid, float *out, size_t out_rows,
                           SattnRowInfo *info, SattnRowCheck *checks,
                           size_t *n_rows)
{
  size_t k = 0;
  if (n_rows)
    *n_rows = 0;
  if (s == NULL || (frames == NULL && n_frames > 0))
    return SATTN_E_INVAL;
  size_t need = sattn_stream_max_rows (s, n_frames);
  if (need > 0 && out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;
  SattnStatus st;
  if (s->pw != NULL) {
    st = sattn_pw_push (s->pw, frames, n_frames, valid, out, info, checks, &k);
  } else {
    st = inc_push (s, frames, n_frames, valid, out, info, &k);
    checks_none (checks, k);
  }
  if (n_rows)
    *n_rows = k;
  return st;
}

/* The incremental executor's push (arguments checked). */
static SattnStatus
inc_push (SattnStream *s, const float *frames, size_t n_frames,
          const uint8_t *valid, float *out, SattnRowInfo *info, size_t *n_rows)
{
  const size_t d = s->m->cfg.d_model, n = s->n;
  const size_t rf = sattn_stream_row_floats (s);
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
    size_t stored = sattn_inc_store_frames (s, frames, valid, cnt, s->total + n,
                                            pre);
    xoff += stored;
    s->total += stored;
    if (s->sc.collect_stats)
      s->stats.frames += stored;
    if (stored < cnt) {
      /* Invalid policy ERROR: no window can be due before that frame. */
      sattn_inc_flush_rows (s);
      s->odefer = 0;
      if (n_rows)
        *n_rows = produced;
      return SATTN_E_NONFINITE;
    }
    frames += cnt * d;
    if (valid)
      valid += cnt;
    n_frames -= cnt;
    if (s->total == s->next_window)
      produced += sattn_inc_emit_window (s, out + produced * rf,
                                         info ? info + produced : NULL);
  }
  sattn_inc_flush_rows (s);
  s->odefer = 0;
  if (n_rows)
    *n_rows = produced;
  return SATTN_OK;
}

SattnStatus
sattn_stream_drain_checked (SattnStream *s, float *out, size_t out_rows,
                            SattnRowInfo *info, SattnRowCheck *checks,
                            size_t *n_rows)
{
  size_t k = 0;
  SattnStatus st = SATTN_OK;
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
  if (s->pw != NULL) {
    st = sattn_pw_drain (s->pw, out, info, checks, &k);
  } else {
    k = sattn_inc_emit_window (s, out, info);
    checks_none (checks, k);
  }
  if (n_rows)
    *n_rows = k;
  return st;
}

void
sattn_stream_get_stats (SattnStream *s, SattnStats *out, int clear)
{
  if (s == NULL)
    return;
  if (s->pw != NULL) {
    sattn_pw_get_stats (s->pw, out, clear);
    return;
  }
  if (out)
    *out = s->stats;
  if (clear) {
    sattn_stats_clear (&s->stats);
    memset (s->overflow_parts, 0, sizeof (s->overflow_parts));
  }
}

SattnStatus
sattn_stream_overflow_parts (const SattnStream *s, uint64_t *counts,
                             size_t n_counts)
{
  if (s == NULL || counts == NULL)
    return SATTN_E_INVAL;
  uint64_t known[SATTN_PART_COUNT] = { 0 }, rows, sum = 0;
  if (s->pw != NULL) {
    /* A whole model per window: its rows are not told apart. */
    SattnStats st;
    sattn_pw_get_stats (s->pw, &st, 0);
    rows = st.overflow_rows;
  } else {
    memcpy (known, s->overflow_parts, sizeof (known));
    rows = s->stats.overflow_rows;
  }
  for (size_t p = 1; p < SATTN_PART_COUNT; p++)
    sum += known[p];
  known[SATTN_PART_UNKNOWN] = rows > sum ? rows - sum : 0;
  for (size_t p = 0; p < n_counts; p++)
    counts[p] = p < SATTN_PART_COUNT ? known[p] : 0;
  return SATTN_OK;
}

void
sattn_stream_weights_size (const SattnStream *s, size_t *rows, size_t *cols)
{
  size_t r = 0, c = 0;
  if (s != NULL && s->pw != NULL) {
    sattn_pw_weights_size (s->pw, &r, &c);
  } else if (s != NULL && s->wkeep != NULL) {
    r = s->n;
    c = s->ncols;
  }
  if (rows)
    *rows = r;
  if (cols)
    *cols = c;
}

SattnStatus
sattn_stream_last_weights (const SattnStream *s, int head, float *out,
                           size_t *rows, size_t *cols)
{
  if (s != NULL && s->pw != NULL)
    return sattn_pw_last_weights (s->pw, head, out, rows, cols);
  if (s == NULL || s->wkeep == NULL || !s->have_window || head < -1 ||
      (head >= 0 && (size_t) head >= s->m->cfg.heads))
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

SattnStatus
sattn_stream_reset_at (SattnStream *s, uint64_t first_frame)
{
  if (s == NULL || first_frame >= (UINT64_C (1) << 53))
    return SATTN_E_INVAL;
  if (s->pw != NULL) {
    sattn_pw_reset_at (s->pw, first_frame);
    return SATTN_OK;
  }
  sattn_stream_reset (s);
  /* The ring's slots follow the frame count modulo n: with the ring
   * cleared, any origin works. */
  s->total = first_frame;
  s->next_out = first_frame;
  s->last_end = first_frame;
  s->next_window = sattn_schedule_first (&s->sc, first_frame);
  return SATTN_OK;
}

uint64_t
sattn_stream_frames (const SattnStream *s)
{
  if (s != NULL && s->pw != NULL)
    return sattn_pw_frames (s->pw);
  return s ? s->total : 0;
}

SattnStatus
sattn_stream_set_invalid_policy (SattnStream *s, SattnInvalidPolicy policy)
{
  if (s == NULL || policy > SATTN_INVALID_ERROR)
    return SATTN_E_INVAL;
  if (s->pw != NULL)
    sattn_pw_set_invalid_policy (s->pw, policy);
  s->sc.invalid_policy = policy;
  return SATTN_OK;
}

SattnStatus
sattn_stream_error_frame (const SattnStream *s, uint64_t *index,
                          SattnFrameFault *fault)
{
  if (s != NULL && s->pw != NULL)
    return sattn_pw_error_frame (s->pw, index, fault);
  if (s == NULL || !s->have_error)
    return SATTN_E_INVAL;
  if (index)
    *index = s->err_frame;
  if (fault)
    *fault = s->err_fault;
  return SATTN_OK;
}
