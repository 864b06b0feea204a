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
 */
#include "internal.h"
#include "stream/window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATTN_ROWS 16
/* Batched projections: at most this many rows per block product (below
 * the BLAS threshold of sattn_project, so that every row is computed by
 * the register-tiled loop with the same summation order as one frame
 * alone: the bytes do not depend on how frames are grouped into pushes),
 * and about BATCH_BYTES of staging per stream. */
#define BATCH_FRAMES 255
#define BATCH_MIN 8
#define BATCH_BYTES (512u << 10)
#define PROJ_ROWS 64
#define PROJ_COLS 32
/* Below this many multiply-adds a run (a projection phase; a window's
 * attention tasks with their per-head projections and the output
 * projection after them; the encoder layer's rows) stays on the caller's
 * thread: handing it to the workers costs more than it saves (W2's
 * windows, one head of 8 values and 64 keys, ran at half the speed with
 * threads=2).  The same tasks run either way: the bytes do not depend on
 * it.  SATTN_PAR_MIN in the environment (read when a stream is created)
 * sets another bound; the tests set 0 so that the workers share every
 * run of their small geometries. */
#define PAR_MIN 100000.0

/* Buffers written by several threads are cache-line aligned, and parts
 * of different threads (score scratch, statistics, task sums) start on
 * lines of their own: no false sharing between workers. */
#define LINE 64
#define LINE_FLOATS (LINE / sizeof (float))
#define WSTATS_STRIDE ((sizeof (SattnStats) + LINE - 1) / LINE * LINE)
#define TSUMS_STRIDE (LINE / sizeof (double))   /* doubles per task */

struct SattnStream {
  SattnPw *pw;                    /* a whole model: the per-window
                                     executor (stream/window.c); the
                                     fields below are then unused */
  const SattnModel *m;
  SattnStreamConfig sc;
  size_t n, h, ncols;
  float *qring, *vring;           /* 2n × dq, 2n × dv (see qhs); one ring
                                     when Q = V (see qv_shared) */
  float *ktring;                  /* K transposed: dq rows of 2n keys,
                                     ldkt floats apart (see kt_stride) */
  size_t ldkt;
  float *kscratch;                /* n × dq: K rows before transposing */
  uint8_t *vring_ok;              /* 2n: frame usable as key / query */
  float *scores;                  /* threads × min (ATTN_ROWS, n) × ncols */
  float *o;                       /* n × dv */
  unsigned n_threads;             /* caller included */
  SattnPool *workers;             /* NULL with one thread */
  double par_min;                 /* see PAR_MIN */
  SattnStats *wstats;             /* threads: per-worker statistics parts,
                                     WSTATS_STRIDE bytes apart */
  double *tsums;                  /* 2 per attention task (TSUMS_STRIDE
                                     apart): the weight and entropy sums,
                                     merged in task order */
  size_t sstride;                 /* floats between threads' score scratch */
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
  /* Copies deferred to the window's tasks (see store_frames): frames
   * dx[0, dcnt) of the current push, at slot dslot; dcopy[i] = 1 copies
   * the frame, 0 writes zeros. */
  const float *dx;
  size_t dcnt, dslot;
  uint8_t *dcopy;                 /* n */
  /* dproj: the deferred frames are projected by the window's tasks, one
   * head's columns each (see project_head); dcopy[i] is then 1 to project
   * the frame, 0 to write zeros, 2 to write the projections of a zero
   * frame.  dbad: a task found a non-finite value in what it projected
   * (atomic; see fix_projected). */
  int dproj, dbad;
  /* Batched projections (see sattn_stream_push).  xstage: Q | K | V of up
   * to xcap frames of one push, each projection with weights computed for
   * all of them as one block product (NULL without Q/K/V weights).
   * ostage: the O rows of up to ocap query rows of the windows of one
   * push, output-projected as one block before the push returns (frames
   * mode with Wo only); ostage_ok their query flags; they belong to the
   * output rows from oout (info from oinfo, may be NULL). */
  float *xstage;
  size_t xcap;
  float *ostage;
  uint8_t *ostage_ok;
  size_t ocap, ocnt;
  int odefer;                     /* this push stages its O rows */
  float *oout;
  SattnRowInfo *oinfo;
  /* Encoder layer: the frames (mirrored ring, 2n × d_model) for the
   * residual, norm1 of the frames being stored (n × d_model, pre-norm
   * only) and the layer's scratch per thread (lstride floats apart). */
  float *xring, *xnorm, *lscratch;
  size_t lstride;
  /* Head-major rings (streams with workers): head h's 2n Q rows of
   * d_head floats start at qring + h * qhs, its V rows of d_value at
   * vring + h * vhs, each head on pages of its own, so that the threads'
   * heads never share a row, a cache line or a page (the hardware
   * prefetchers of one core then never pull the lines another core is
   * writing).  store_frames projects into the row-major qstage / vstage
   * (n × dq, n × dv) and scatters the rows into the rings; the O rows of a
   * window of at most ATTN_ROWS query rows go to ohm (head h from h *
   * ohs, rows of d_value) and are gathered into rows after the tasks.
   * qhs = 0: rows of all heads side by side (dq, dv floats), no stages. */
  size_t qhs, vhs, ohs;
  float *qstage, *vstage, *ohm;
  int have_error;                 /* a push stopped at err_frame */
  uint64_t err_frame;
  SattnFrameFault err_fault;
};

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
    free (s->vring);
  free (s->qring); free (s->ktring); free (s->kscratch); free (s->vring_ok);
  free (s->scores); free (s->o); free (s->pool); free (s->wkeep);
  free (s->wstats); free (s->tsums);
  sattn_pool_free (s->workers);
  free (s->row_ok);
  free (s->dcopy);
  free (s->xstage); free (s->ostage); free (s->ostage_ok);
  free (s->xring); free (s->xnorm); free (s->lscratch);
  free (s->qstage); free (s->vstage); free (s->ohm);
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
  memset (s->qring, 0, (s->qhs ? H * s->qhs : 2 * s->n * m->dq) *
          sizeof (float));
  memset (s->ktring, 0, s->ldkt * m->dq * sizeof (float));
  if (s->vring != s->qring)
    memset (s->vring, 0, (s->qhs ? H * s->vhs : 2 * s->n * m->dv) *
            sizeof (float));
  memset (s->vring_ok, 0, 2 * s->n);
  if (s->xring)
    memset (s->xring, 0, 2 * s->n * m->cfg.d_model * sizeof (float));
  s->total = 0;
  s->next_out = 0;
  s->last_end = 0;
  s->next_window = s->sc.start == SATTN_START_WAIT ? s->n : s->h;
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
      xstage, ostage, ostage_ok, xcap, ocap, pool,
      qhs, vhs, ohs, qstage, vstage, ohm,
      wkeep,
      wstats, tsums, threads_bytes, xring, xnorm, lscratch, total;
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

/* size bytes at a cache-line boundary, NULL on failure. */
static void *
alloc_lines (size_t size)
{
  void *p = NULL;
  if (posix_memalign (&p, LINE, size) != 0)
    return NULL;
  return p;
}

/* size bytes at a page boundary, NULL on failure. */
static void *
alloc_pages (size_t size)
{
  void *p = NULL;
  if (posix_memalign (&p, PAGE, size) != 0)
    return NULL;
  return p;
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

static SattnStats *
wstats_at (SattnStream *s, unsigned w)
{
  return (SattnStats *) (void *) ((char *) s->wstats + w * WSTATS_STRIDE);
}

static size_t
attn_tasks (size_t heads, size_t rows)
{
  return heads * ((rows + ATTN_ROWS - 1) / ATTN_ROWS);
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
stream_sizes (const SattnModel *m, const SattnStreamConfig *sc,
              StreamSizes *z)
{
  const size_t n = sc->window, ncols = n + m->n_extra, H = m->cfg.heads;
  const size_t fs = sizeof (float);

  *z = (StreamSizes) { 0 };
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
  z->row_ok = n;
  z->dcopy = n;
  /* Batched projections: not for an encoder layer (pre-norm projects
   * norm1 of the frames; the layer runs on each window's projected rows). */
  if (!m->cfg.encoder && (m->wq != NULL || m->wk != NULL || m->wv != NULL)) {
    z->xcap = batch_rows (2 * m->dq + m->dv);
    if ((z->xstage = mul3 (z->xcap, 2 * m->dq + m->dv, fs)) == 0)
      return 0;
  }
  if (!m->cfg.encoder && m->wo != NULL &&
      sc->output == SATTN_OUTPUT_FRAMES) {
    z->ocap = batch_rows (m->dv);
    if ((z->ostage = mul3 (z->ocap, m->dv, fs)) == 0)
      return 0;
    z->ostage_ok = z->ocap;
  }
  if (sc->output == SATTN_OUTPUT_MEAN && (z->pool = mul3 (n, m->d_out, fs)) == 0)
    return 0;
  if (sc->output == SATTN_OUTPUT_WINDOW && mul3 (n, m->d_out, fs) == 0)
    return 0;
  if (sc->keep_weights && (mul3 (H, n, 1) == 0 ||
          (z->wkeep = mul3 (H * n, ncols, fs)) == 0))
    return 0;
  if (sc->collect_stats) {
    z->wstats = z->n_threads * WSTATS_STRIDE;
    if ((z->tsums = mul3 (attn_tasks (H, n), TSUMS_STRIDE,
                sizeof (double))) == 0)
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
  size_t parts[] = { sizeof (SattnStream), z->qring, z->ktring, z->kscratch,
    z->vring, z->vring_ok, z->row_ok, z->dcopy, z->xstage, z->ostage,
    z->ostage_ok, z->scores, z->o, z->pool, z->wkeep, z->wstats,
    z->tsums, z->threads_bytes, z->xring, z->xnorm, z->lscratch, z->qstage,
    z->vstage, z->ohm };
  size_t total = 0;
  for (size_t k = 0; k < sizeof (parts) / sizeof (parts[0]); k++) {
    if (parts[k] > SIZE_MAX - total)
      return 0;
    total += parts[k];
  }
  z->total = total;
  return 1;
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
  if ((st = sattn_struct_in ("SattnStreamConfig", "SattnStreamConfig",
                             sc_in, sc, sizeof *sc,
                             SATTN_STREAM_CONFIG_MIN_SIZE, SIZE_MAX, err,
                             err_len)) != SATTN_OK)
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
                       "%zu)", sc->hop, sc->window, sc->hop);
  if ((unsigned) sc->output > SATTN_OUTPUT_CLASSES)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=%d is not an output mode (0 frames, 1 window, "
                       "2 mean, 3 last, 4 classes)", (int) sc->output);
  if ((unsigned) sc->start > SATTN_START_WAIT)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "start=%d is not a start policy (0 pad, 1 wait)",
                       (int) sc->start);
  if ((unsigned) sc->invalid_policy > SATTN_INVALID_ERROR)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "invalid_policy=%d is not an invalid-frames policy "
                       "(0 mask, 1 zero, 2 error)", (int) sc->invalid_policy);
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
  SattnStatus st = stream_check (m, sc_in, &scl, err, err_len);
  if (st != SATTN_OK || m == NULL)
    return st;
  if (m->net != NULL)
    return sattn_pw_bytes (m, sc) == SIZE_MAX
        ? sattn_fail (SATTN_E_NOMEM, err, err_len, "window=%zu needs more "
                      "memory than the address space holds; use a smaller "
                      "window", sc->window) : SATTN_OK;
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
  if (!stream_config_ok (m, sc_in, &scl))
    return 0;
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
      (z.ostage && (!s->ostage || !s->ostage_ok)) || !s->scores || !s->o || (z.pool && !s->pool) || (z.wkeep && !s->wkeep) ||
      (z.wstats && !s->wstats) || (z.tsums && !s->tsums) ||
      (z.xring && !s->xring) || (z.xnorm && !s->xnorm) ||
      (z.lscratch && !s->lscratch) ||
      (z.qstage && (!s->qstage || !s->vstage || !s->ohm))) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if (s->n_threads > 1 && (s->workers = sattn_pool_new (s->n_threads)) == NULL) {
    st = SATTN_E_NOMEM;         /* a thread could not be created */
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
  return s->sc.output == SATTN_OUTPUT_WINDOW ? s->n * s->m->d_out
      : s->m->d_out;
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
    case SATTN_OUTPUT_FRAMES: return sc->hop;
    case SATTN_OUTPUT_LAST: return 1;
    default: return sc->window;
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
    case SATTN_OUTPUT_LAST: return 1;
    default: return s->n;
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
        ? (s->sc.output == SATTN_OUTPUT_FRAMES ? sattn_stream_pending (s) : 1)
        : 0;
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return sattn_stream_pending (s) + n_frames;
  uint64_t end = s->total + n_frames;
  if (end < s->next_window)
    return 0;
  return (size_t) ((end - s->next_window) / s->h + 1);
}

/* ------------------------------------------------------------- tasks */

/* One projection y = x W^T + b (see sattn_project), cut into blocks of
 * PROJ_ROWS rows × PROJ_COLS columns.  A block can also be copied where
 * the ring needs it (see proj_copies), so that this work runs in the
 * tasks too. */
typedef struct {
  const float *Wt, *b, *x;
  size_t n, d_in, d_out, ldx;
  float *y;
  size_t ldy;
  size_t col_blocks, first;      /* first: index of its first task */
  size_t mirror;                 /* 0, or floats from a row of y to its copy */
  float *kt;                     /* NULL, or y transposed: row c, column i */
  size_t ldkt, kt_mirror;        /* kt's row stride; floats to its copy */
  /* NULL, or y's rows scattered into a head-major ring (see SattnStream):
   * column c of row i goes to hm + (c / hw) * hs + (slot + i) * hw + c % hw
   * and to its copy hn rows further. */
  float *hm;
  size_t hw, hs, hslot, hn;
} ProjJob;

/* Where proj_add_copies scatters a projection (ProjJob.hm). */
typedef struct {
  float *ring;
  size_t w, hs, slot, n;
} RingDst;

typedef struct {
  ProjJob job[3];
  size_t n_jobs, n_tasks;
  double fma;                    /* multiply-adds of the tasks */
  int copies;                    /* large identity copies among the tasks:
                                  * worth the workers whatever fma */
  const SattnModel *m;           /* whose projections may sum in double */
} ProjCtx;

/* The copies of rows [r0, r1) × columns [c0, c1) of y that p asks for. */
static void
proj_copies (const ProjJob *p, size_t r0, size_t r1, size_t c0, size_t c1)
{
  if (p->mirror)
    for (size_t i = r0; i < r1; i++)
      memcpy (p->y + i * p->ldy + c0 + p->mirror, p->y + i * p->ldy + c0,
              (c1 - c0) * sizeof (float));
  if (p->hm) {
    const size_t w = p->hw;
    for (size_t c = c0; c < c1;) {
      const size_t h = c / w, e = (h + 1) * w < c1 ? (h + 1) * w : c1;
      float *dst = p->hm + h * p->hs + p->hslot * w + c % w;
      for (size_t i = r0; i < r1; i++) {
        const float *src = p->y + i * p->ldy + c;
        memcpy (dst + i * w, src, (e - c) * sizeof (float));
        memcpy (dst + (i + p->hn) * w, src, (e - c) * sizeof (float));
      }
      c = e;
    }
  }
  if (p->kt) {
    /* Every row copied (the frame rule rewrites unusable frames later). */
    sattn_transpose_rows (p->y + r0 * p->ldy + c0, p->ldy, NULL, r1 - r0,
                          c1 - c0, p->kt + c0 * p->ldkt + r0, p->ldkt,
                          p->kt_mirror);
  }
}

/* Rows [r0, r1) × columns [c0, c1) of projection p, and their copies.
 * Every entry is one chain over the inner index whatever the block, so
 * the bytes do not depend on the blocks. */
static void
proj_block (const ProjCtx *c, const ProjJob *p, size_t r0, size_t r1,
            size_t c0, size_t c1)
{
  sattn_project_cols_prec (c->m, p->Wt, p->b, p->x + r0 * p->ldx, r1 - r0,
                           p->d_in, p->d_out, c0, c1, p->ldx,
                           p->y + r0 * p->ldy, p->ldy);
  proj_copies (p, r0, r1, c0, c1);
}

static void
proj_task (void *ctx, size_t task, unsigned worker)
{
  const ProjCtx *c = ctx;
  size_t j = 0;
  while (j + 1 < c->n_jobs && task >= c->job[j + 1].first)
    j++;
  const ProjJob *p = &c->job[j];
  size_t local = task - p->first;
  size_t r0 = (local / p->col_blocks) * PROJ_ROWS;
  size_t c0 = (local % p->col_blocks) * PROJ_COLS;
  size_t r1 = r0 + PROJ_ROWS < p->n ? r0 + PROJ_ROWS : p->n;
  size_t c1 = c0 + PROJ_COLS < p->d_out ? c0 + PROJ_COLS : p->d_out;
  (void) worker;
  proj_block (c, p, r0, r1, c0, c1);
}

/* Add a projection: BLAS-sized products run here on the caller's thread
 * (copies included), the rest becomes tasks of c.  Identity projections
 * become tasks too when `copy_tasks`, else they run here. */
static void
proj_add_copies (ProjCtx *c, const float *Wt, const float *b, const float *x,
                 size_t n, size_t d_in, size_t d_out, size_t ldx, float *y,
                 size_t ldy, size_t mirror, float *kt, size_t ldkt,
                 size_t kt_mirror, const RingDst *hm, int copy_tasks)
{
  if (n == 0)
    return;
  ProjJob pj = { Wt, b, x, n, d_in, d_out, ldx, y, ldy,
    (d_out + PROJ_COLS - 1) / PROJ_COLS, c->n_tasks, mirror, kt, ldkt,
    kt_mirror, hm ? hm->ring : NULL, hm ? hm->w : 0, hm ? hm->hs : 0,
    hm ? hm->slot : 0, hm ? hm->n : 0 };
  if ((Wt == NULL && !copy_tasks) ||
      (sattn_project_uses_blas (Wt, n, d_in, d_out) &&
       !sattn_project_is_double (c->m, Wt))) {
    sattn_project (Wt, b, x, n, d_in, d_out, ldx, y, ldy);
    proj_copies (&pj, 0, n, 0, d_out);
    return;
  }
  c->job[c->n_jobs++] = pj;
  c->n_tasks += pj.col_blocks * ((n + PROJ_ROWS - 1) / PROJ_ROWS);
  if (Wt != NULL)
    c->fma += (double) n * d_in * d_out;
}

static void
proj_add (ProjCtx *c, const float *Wt, const float *b, const float *x,
          size_t n, size_t d_in, size_t d_out, size_t ldx, float *y,
          size_t ldy)
{
  proj_add_copies (c, Wt, b, x, n, d_in, d_out, ldx, y, ldy, 0, NULL, 0, 0,
                   NULL, 0);
}

/* Below this many floats written, the copies of identity projections run
 * on the caller's thread. */
#define COPY_PAR_FLOATS 8192

/* The pool for a run of fma multiply-adds: s's workers, or NULL (the
 * caller's thread alone) below s->par_min (see PAR_MIN). */
static SattnPool *
workers_for (const SattnStream *s, double fma)
{
  return fma >= s->par_min ? s->workers : NULL;
}

static void
proj_run (SattnStream *s, ProjCtx *pc)
{
  SattnPool *pool = pc->copies ? s->workers : workers_for (s, pc->fma);
  if (pool != NULL) {
    sattn_pool_run (pool, pc->n_tasks, proj_task, pc);
    return;
  }
  /* On this thread alone: each projection in one call (the same bytes),
   * so that rows summed in double are widened once per projection rather
   * than once per PROJ_COLS columns, and the loops' own blocks read the
   * weights once per push from beyond L2. */
  for (size_t j = 0; j < pc->n_jobs; j++) {
    const ProjJob *p = &pc->job[j];
    proj_block (pc, p, 0, p->n, 0, p->d_out);
  }
}

/* Rows [0, cnt) of Q (q, row stride ldq) and V (v, stride ldv) into the
 * head-major rings at slot and at their copies n rows further. */
static void
ring_put (SattnStream *s, size_t slot, size_t cnt, const float *q,
          size_t ldq, const float *v, size_t ldv)
{
  const SattnModel *m = s->m;
  const size_t n = s->n, dh = m->cfg.d_head, dvh = m->cfg.d_value;
  for (size_t h = 0; h < m->cfg.heads; h++) {
    float *qr = s->qring + h * s->qhs + slot * dh;
    float *vr = s->vring + h * s->vhs + slot * dvh;
    for (size_t i = 0; i < cnt; i++) {
      memcpy (qr + i * dh, q + i * ldq + h * dh, dh * sizeof (float));
      memcpy (qr + (i + n) * dh, q + i * ldq + h * dh, dh * sizeof (float));
      if (s->vring == s->qring)
        continue;               /* V's rows are Q's */
      memcpy (vr + i * dvh, v + i * ldv + h * dvh, dvh * sizeof (float));
      memcpy (vr + (i + n) * dvh, v + i * ldv + h * dvh,
              dvh * sizeof (float));
    }
  }
}

/* Q and V of ring slot `slot` as rows (dq, dv floats) into q and v. */
static void
ring_get (const SattnStream *s, size_t slot, float *q, float *v)
{
  const SattnModel *m = s->m;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
  for (size_t h = 0; h < m->cfg.heads; h++) {
    memcpy (q + h * dh, s->qring + h * s->qhs + slot * dh,
            dh * sizeof (float));
    memcpy (v + h * dvh, s->vring + h * s->vhs + slot * dvh,
            dvh * sizeof (float));
  }
}

/* The attention of one window: task = (head, block of ATTN_ROWS rows). */
typedef struct {
  SattnStream *s;
  const SattnAttnArgs *a;
  size_t row_blocks;
} AttnCtx;

/* Columns [c0, c0 + k) of x Wt (Wt: d × ld, NULL = identity), without
 * bias, into y (row stride ldy): what sattn_project_cols computes. */
static void
head_cols (const float *Wt, size_t ld, const float *x, size_t cnt, size_t d,
           size_t c0, size_t k, float *y, size_t ldy)
{
  if (Wt == NULL)
    for (size_t i = 0; i < cnt; i++)
      memcpy (y + i * ldy, x + i * d + c0, k * sizeof (float));
  else
    sattn_qk (x, d, Wt + c0, ld, cnt, k, d, y, ldy);
}

static void
add_bias (const float *b, size_t cnt, size_t k, float *y, size_t ldy)
{
  if (b != NULL)
    sattn_add_bias (y, ldy, cnt, b, k);
}

/* Head h's columns of the deferred frames projected (s->dproj), in P
 * (the task's scratch: cnt rows of Q | K | V, 2 d_head + d_value floats),
 * then copied out: Q and V into the rings and their mirrors, K transposed
 * into both copies.  Each entry is the same multiply-add chain as in the
 * blocks of proj_task (the same loop, only other columns beside it), so
 * the bytes do not depend on the tiling.  A non-finite value among the
 * projected frames sets s->dbad: the frame rule is then applied to whole
 * frames after the tasks (fix_projected). */
static void
project_head (SattnStream *s, size_t h, float *P)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value, cnt = s->dcnt;
  const size_t c0 = h * dh, e0 = h * dvh, w = 2 * dh + dvh;
  const float *x = s->dx;

  /* V summed in double (see SattnModel): the block path's chains, from
   * the bias. */
  const int vd = m->wvd != NULL;
  if (m->wqkv != NULL) {
    const size_t pw = sattn_wqkv_head_width (m);
    sattn_qk (x, d, m->wqkv + h * pw, m->cfg.heads * pw, cnt, pw, d, P, w);
  } else {
    head_cols (m->wq, dq, x, cnt, d, c0, dh, P, w);
    head_cols (m->wk, dq, x, cnt, d, c0, dh, P + dh, w);
    if (!vd)
      head_cols (m->wv, dv, x, cnt, d, e0, dvh, P + 2 * dh, w);
  }
  if (vd)
    sattn_linear_f (x, d, cnt, m->wvd + e0, dv, m->bvd ? m->bvd + e0 : NULL,
                    d, dvh, P + 2 * dh, w);
  add_bias (m->bq ? m->bq + c0 : NULL, cnt, dh, P, w);
  add_bias (m->bk ? m->bk + c0 : NULL, cnt, dh, P + dh, w);
  add_bias (m->bv && !vd ? m->bv + e0 : NULL, cnt, dvh, P + 2 * dh, w);
  int bad = !sattn_finite (P, cnt * w);
  if (bad) {
    /* Frames with bad samples or flagged do not count: they are
     * rewritten below. */
    bad = 0;
    for (size_t i = 0; i < cnt; i++)
      bad |= s->dcopy[i] == 1 && !sattn_finite (P + i * w, w);
  }
  for (size_t i = 0; i < cnt; i++) {
    if (s->dcopy[i] == 1)
      continue;
    /* What zero_frame writes (no encoder here), or zeros. */
    const int z = s->dcopy[i] == 2;
    float *r = P + i * w;
    for (size_t t = 0; t < dh; t++) {
      r[t] = z && m->bq ? m->bq[c0 + t] : 0.0f;
      r[dh + t] = z && m->bk ? m->bk[c0 + t] : 0.0f;
    }
    for (size_t t = 0; t < dvh; t++)
      r[2 * dh + t] = z && m->bv ? m->bv[e0 + t] : 0.0f;
  }
  /* Head h's rows: one row of a head-major ring, or its columns of a
   * row of all heads. */
  const size_t ldq = s->qhs ? dh : dq, ldv = s->qhs ? dvh : dv;
  float *qh = s->qhs ? s->qring + h * s->qhs : s->qring + c0;
  float *vh = s->qhs ? s->vring + h * s->vhs : s->vring + e0;
  /* Every row of P is copied (unusable frames were rewritten above). */
  sattn_copy_rows (P, w, NULL, cnt, dh, qh + s->dslot * ldq, ldq, n * ldq);
  sattn_copy_rows (P + 2 * dh, w, NULL, cnt, dvh, vh + s->dslot * ldv, ldv,
                   n * ldv);
  sattn_transpose_rows (P + dh, w, NULL, cnt, dh,
                        s->ktring + c0 * s->ldkt + s->dslot, s->ldkt, n);
  if (bad)
    __atomic_store_n (&s->dbad, 1, __ATOMIC_RELAXED);
}

/* Head h's columns of the deferred frames (see store_frames) into the
 * rings: Q and V rows and their mirrors, K transposed in both copies
 * (projected first when s->dproj, with P as scratch).  Only head h's
 * attention reads them. */
static void
copy_deferred (SattnStream *s, size_t h, float *P)
{
  if (s->dproj) {
    project_head (s, h, P);
    return;
  }
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value, slot = s->dslot;

  const size_t ldq = s->qhs ? dh : dq, ldv = s->qhs ? dvh : dv;
  float *qh = s->qhs ? s->qring + h * s->qhs : s->qring + h * dh;
  float *vh = s->qhs ? s->vring + h * s->vhs : s->vring + h * dvh;
  sattn_copy_rows (s->dx + h * dh, d, s->dcopy, s->dcnt, dh,
                   qh + slot * ldq, ldq, n * ldq);
  if (s->vring != s->qring)
    sattn_copy_rows (s->dx + h * dvh, d, s->dcopy, s->dcnt, dvh,
                     vh + slot * ldv, ldv, n * ldv);
  sattn_transpose_rows (s->dx + h * dh, d, s->dcopy, s->dcnt, dh,
                        s->ktring + h * dh * s->ldkt + slot, s->ldkt, n);
}

static void
attn_task (void *ctx, size_t task, unsigned worker)
{
  const AttnCtx *c = ctx;
  SattnStream *s = c->s;
  size_t h = task / c->row_blocks;
  /* Each thread's scratch holds min (ATTN_ROWS, window) rows. */
  float *S = s->scores + (size_t) worker * s->sstride;
  /* One task per head: it copies (or projects) its head's deferred frames
   * first. */
  if (c->row_blocks == 1 && s->dcnt > 0)
    copy_deferred (s, h, S);
  size_t r0 = (task % c->row_blocks) * ATTN_ROWS;
  size_t r1 = r0 + ATTN_ROWS < c->a->m ? r0 + ATTN_ROWS : c->a->m;

  if (!s->sc.collect_stats) {
    sattn_attend_rows (s->m, c->a, h, r0, r1, S, NULL);
    return;
  }
  /* Counts and extrema go to the worker's part (any merge order gives the
   * same values); the two sums are kept per task and added in task order. */
  SattnStats part;
  sattn_stats_clear (&part);
  sattn_attend_rows (s->m, c->a, h, r0, r1, S, &part);
  s->tsums[TSUMS_STRIDE * task] = part.max_weight_sum;
  s->tsums[TSUMS_STRIDE * task + 1] = part.entropy_sum;
  part.max_weight_sum = 0.0;
  part.entropy_sum = 0.0;
  sattn_stats_merge (wstats_at (s, worker), &part);
}

/* Where a projection of store_frames takes its input from. */
typedef struct {
  const float *Wt, *b, *x;
  size_t ldx, d_in;
} ProjSrc;

/* Projection j (0 Q, 1 K, 2 V) of the staged frames: xcap rows. */
static float *
stage_at (const SattnStream *s, int j)
{
  return s->xstage + (size_t) j * s->xcap * s->m->dq;
}

/* The projections with weights of frames x[0, cnt) (cnt <= xcap) into
 * xstage, each as one block product: tasks of PROJ_ROWS × PROJ_COLS, the
 * same blocks and loop as store_frames uses for a few frames, so every
 * row gets the same bytes. */
static void
stage_projections (SattnStream *s, const float *x, size_t cnt)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model;
  ProjCtx pc = { .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m };
  if (m->wq != NULL)
    proj_add (&pc, m->wq, m->bq, x, cnt, d, m->dq, d, stage_at (s, 0), m->dq);
  if (m->wk != NULL)
    proj_add (&pc, m->wk, m->bk, x, cnt, d, m->dq, d, stage_at (s, 1), m->dq);
  if (m->wv != NULL)
    proj_add (&pc, m->wv, m->bv, x, cnt, d, m->dv, d, stage_at (s, 2), m->dv);
  proj_run (s, &pc);
}

/* The projections of an all-zero frame: the biases (zero without). */
static void
zero_frame (const SattnModel *m, float *q, float *k, float *v)
{
  if (m->zq != NULL) {
    /* Pre-norm: the zero frame enters the attention as norm1 (0). */
    memcpy (q, m->zq, m->dq * sizeof (float));
    memcpy (k, m->zk, m->dq * sizeof (float));
    memcpy (v, m->zv, m->dv * sizeof (float));
    return;
  }
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

/* Query rows of the window that ends at frame count `end` (the next
 * one): frames mode the frames since the last output row, at most n. */
static size_t
due_rows (const SattnStream *s, uint64_t end)
{
  switch (s->sc.output) {
    case SATTN_OUTPUT_FRAMES:
      /* More than n cannot happen: windows come every <= n frames. */
      return end - s->next_out > s->n ? s->n : (size_t) (end - s->next_out);
    case SATTN_OUTPUT_LAST:
      return 1;
    default:
      return s->n;
  }
}

/* Store frames [0, cnt) (all landing in ring slots without wrap) at
 * virtual index p0, applying the frame rule and the invalid policy.
 * pre: row of xstage holding the projections with weights of frame 0
 * (see stage_projections), or SIZE_MAX to project here.
 * Returns how many were stored: cnt, or under SATTN_INVALID_ERROR the
 * index of the first frame with bad data (recorded in s->err_*). */
static size_t
store_frames (SattnStream *s, const float *x, const uint8_t *valid,
              size_t cnt, uint64_t p0, size_t pre)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  size_t slot = (size_t) (p0 % n);
  /* Head-major rings: the rows go through the stages (see SattnStream). */
  const int hm = s->qhs != 0;
  float *q = hm ? s->qstage : s->qring + slot * dq;
  float *k = s->kscratch;
  /* One ring for Q and V: V's rows are Q's (no copies of their own). */
  const int qv = s->vring == s->qring;
  float *v = qv ? q : hm ? s->vstage : s->vring + slot * dv;
  const RingDst qdst = { s->qring, m->cfg.d_head, s->qhs, slot, n };
  const RingDst vdst = { s->vring, m->cfg.d_value, s->vhs, slot, n };

  /* Except under SATTN_INVALID_ERROR (which may have to give the slots
   * their old frames back from the mirrors), the tasks write the mirrors
   * and the transposed K straight away; frames found unusable below are
   * rewritten in every copy. */
  const int rope = sattn_model_rope (m);
  /* RoPE rotates Q and K after the projection, on this thread: the
   * mirrors and the transposed K are then written below. */
  const int direct = s->sc.invalid_policy != SATTN_INVALID_ERROR && !rope;
  float *kt = s->ktring + slot;
  /* Q, K and V plain copies of the frames, and a window due right after
   * them (computed before this push returns, while x is valid), too few
   * for copy tasks of their own: the window's tasks copy each head's
   * columns themselves (see copy_deferred), in parallel instead of here.  A frame written as
   * zeros instead (the frame rule) has dcopy 0. */
  const size_t copies = cnt * (3 * dq + 2 * dv);
  int copy_tasks = direct && copies >= COPY_PAR_FLOATS;
  const int defer = direct && !copy_tasks && !m->cfg.encoder &&
      m->wq == NULL && m->bq == NULL && m->wk == NULL && m->bk == NULL &&
      m->wv == NULL && m->bv == NULL && s->total + cnt == s->next_window;
  if (defer) {
    /* The frames tested as one block first (the common push: all
     * usable); the rule per frame only when that fails. */
    const int usable = sattn_frames_ok (m, cnt, valid, x, x, x, x);
    if (usable) {
      memset (s->dcopy, 1, cnt);
      memset (s->vring_ok + slot, 1, cnt);
      memset (s->vring_ok + slot + n, 1, cnt);
    }
    for (size_t i = 0; !usable && i < cnt; i++) {
      SattnFrameFault f = sattn_frame_fault (m, valid != NULL && !valid[i],
                                             x + i * d, x + i * d, x + i * d,
                                             x + i * d);
      /* Zero policy: the projections of a zero frame are zeros here. */
      int ok = f == SATTN_FRAME_OK ||
          (s->sc.invalid_policy == SATTN_INVALID_ZERO &&
           (f == SATTN_FRAME_NONFINITE || f == SATTN_FRAME_OVERFLOW));
      if (f != SATTN_FRAME_OK) {
        s->stats.invalid_frames++;
        if (f == SATTN_FRAME_OVERFLOW)
          s->stats.overflow_frames++;
      }
      s->dcopy[i] = f == SATTN_FRAME_OK;
      s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
    }
    s->dx = x;
    s->dcnt = cnt;
    s->dslot = slot;
    return cnt;
  }
  /* Projections with weights or biases and a window of at most ATTN_ROWS
   * query rows due right after the frames: the window's tasks (one per
   * head) project them too, each its head's columns, and go on to that
   * head's attention without waiting for the others: one synchronisation
   * per window instead of two.  The frame rule's test of the input runs
   * here; its test of the projections after the tasks (fix_projected),
   * only when a task found a non-finite value.  With weights for all
   * three projections, a non-finite sample makes every column of them
   * non-finite (NaN, or Inf: x Inf + finite), so the tasks find those
   * frames too and only the flag is tested here.  Without workers
   * (threads = 1) there is no synchronisation to save, and the block
   * products below are faster than the per-head ones (whole 32-column
   * tiles, no scratch, one finiteness test per frame): they run instead,
   * with the same bytes. */
  if (direct && pre == SIZE_MAX && !m->cfg.encoder && s->workers != NULL &&
      s->total + cnt == s->next_window &&
      due_rows (s, s->total + cnt) <= ATTN_ROWS &&
      cnt * (2 * m->cfg.d_head + m->cfg.d_value) <= s->sstride) {
    const int test_x = m->wq == NULL || m->wk == NULL || m->wv == NULL;
    for (size_t i = 0; i < cnt; i++) {
      SattnFrameFault f = sattn_frame_fault (m, valid != NULL && !valid[i],
                                             test_x ? x + i * d : NULL,
                                             NULL, NULL, NULL);
      /* Zero policy: a frame with bad samples becomes a zero frame. */
      int zero = s->sc.invalid_policy == SATTN_INVALID_ZERO &&
          f == SATTN_FRAME_NONFINITE;
      if (f != SATTN_FRAME_OK)
        s->stats.invalid_frames++;
      s->dcopy[i] = f == SATTN_FRAME_OK ? 1 : zero ? 2 : 0;
      s->vring_ok[slot + i] = s->vring_ok[slot + i + n] =
          (uint8_t) (f == SATTN_FRAME_OK || zero);
    }
    s->dx = x;
    s->dcnt = cnt;
    s->dslot = slot;
    s->dproj = 1;
    s->dbad = 0;
    return cnt;
  }
  /* Each projection: from the frames, or copied from its staged rows
   * (bias included) as an identity of the projected width. */
  /* Pre-norm encoder layer: the attention sees norm1 of the frames. */
  const float *xp = x;
  if (s->xnorm != NULL) {
    sattn_layer_norm1 (m, x, d, s->xnorm, d, cnt);
    xp = s->xnorm;
  }
  ProjSrc ps[3] = {
    { m->wq, m->bq, xp, d, d }, { m->wk, m->bk, xp, d, d },
    { m->wv, m->bv, xp, d, d } };
  if (pre != SIZE_MAX)
    for (int j = 0; j < 3; j++)
      if (ps[j].Wt != NULL) {
        size_t w = j < 2 ? dq : dv;
        ps[j] = (ProjSrc) { NULL, NULL, stage_at (s, j) + pre * w, w, w };
      }
  ProjCtx pc = { .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m };
  if (direct) {
    proj_add_copies (&pc, ps[0].Wt, ps[0].b, ps[0].x, cnt, ps[0].d_in, dq,
                     ps[0].ldx, q, dq, hm ? 0 : n * dq, NULL, 0, 0,
                     hm ? &qdst : NULL, copy_tasks);
    proj_add_copies (&pc, ps[1].Wt, ps[1].b, ps[1].x, cnt, ps[1].d_in, dq,
                     ps[1].ldx, k, dq, 0, kt, s->ldkt, n, NULL, copy_tasks);
    if (!qv)
      proj_add_copies (&pc, ps[2].Wt, ps[2].b, ps[2].x, cnt, ps[2].d_in, dv,
                       ps[2].ldx, v, dv, hm ? 0 : n * dv, NULL, 0, 0,
                       hm ? &vdst : NULL, copy_tasks);
  } else {
    proj_add (&pc, ps[0].Wt, ps[0].b, ps[0].x, cnt, ps[0].d_in, dq,
              ps[0].ldx, q, dq);
    proj_add (&pc, ps[1].Wt, ps[1].b, ps[1].x, cnt, ps[1].d_in, dq,
              ps[1].ldx, k, dq);
    if (!qv)
      proj_add (&pc, ps[2].Wt, ps[2].b, ps[2].x, cnt, ps[2].d_in, dv,
                ps[2].ldx, v, dv);
  }
  pc.copies = copy_tasks;
  proj_run (s, &pc);

  /* Without RoPE (which rotates each frame's Q and K first), all frames
   * tested as one block (the common push: all usable); the rule per
   * frame only when that fails. */
  const int usable = !rope && sattn_frames_ok (m, cnt, valid, x, q, k, v);
  for (size_t i = 0; i < cnt; i++) {
    /* Absolute frame index p0 - n + i (p0 is n ahead). */
    if (rope) {
      sattn_rope_qk (m, q + i * dq, k + i * dq, p0 - n + i);
    }
    SattnFrameFault f = usable ? SATTN_FRAME_OK
        : sattn_frame_fault (m, valid != NULL && !valid[i], x + i * d,
                             q + i * dq, k + i * dq, v + i * dv);
    int ok = f == SATTN_FRAME_OK;
    int bad_data = f == SATTN_FRAME_NONFINITE || f == SATTN_FRAME_OVERFLOW;
    if (bad_data && s->sc.invalid_policy == SATTN_INVALID_ERROR) {
      /* Not consumed: the lower copies of slots [i, cnt) get back the
       * frames still in the window from their mirrors (K is only written
       * below; head-major rings were not written at all). */
      if (!hm) {
        memcpy (q + i * dq, s->qring + (slot + i + n) * dq,
                (cnt - i) * dq * sizeof (float));
        memcpy (v + i * dv, s->vring + (slot + i + n) * dv,
                (cnt - i) * dv * sizeof (float));
      }
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
      if (rope) {
        sattn_rope_qk (m, q + i * dq, k + i * dq, p0 - n + i);
      }
      ok = 1;
    } else if (!ok) {
      memset (q + i * dq, 0, dq * sizeof (float));
      memset (k + i * dq, 0, dq * sizeof (float));
      memset (v + i * dv, 0, dv * sizeof (float));
    }
    if (!(f == SATTN_FRAME_OK) && direct) {
      /* Rewritten: its mirrors and transposed K follow. */
      if (hm) {
        ring_put (s, slot + i, 1, q + i * dq, dq, v + i * dv, dv);
      } else {
        memcpy (q + (i + n) * dq, q + i * dq, dq * sizeof (float));
        memcpy (v + (i + n) * dv, v + i * dv, dv * sizeof (float));
      }
      sattn_transpose_rows (k + i * dq, dq, NULL, 1, dq, kt + i, s->ldkt, n);
    }
    s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
    if (s->xring != NULL) {
      /* The residual's input: the frame, or zeros for a zero-policy or
       * unusable frame. */
      float *xr = s->xring + (slot + i) * d;
      if (f == SATTN_FRAME_OK)
        memcpy (xr, x + i * d, d * sizeof (float));
      else
        memset (xr, 0, d * sizeof (float));
      memcpy (xr + n * d, xr, d * sizeof (float));
    }
  }
  if (!direct) {
    if (hm) {
      ring_put (s, slot, cnt, q, dq, v, dv);
    } else {
      memcpy (s->qring + (slot + n) * dq, q, cnt * dq * sizeof (float));
      memcpy (s->vring + (slot + n) * dv, v, cnt * dv * sizeof (float));
    }
    sattn_transpose_rows (k, dq, NULL, cnt, dq, s->ktring + slot, s->ldkt,
                          n);
  }
  return cnt;
}

/* After the tasks of project_head found a non-finite value: the frame
 * rule on each deferred frame and its whole projections, as store_frames
 * applies it (the flag, and perhaps the input, were tested before the
 * tasks). */
static void
fix_projected (SattnStream *s)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  const size_t slot = s->dslot;
  float *k = s->kscratch;
  for (size_t i = 0; i < s->dcnt; i++) {
    float *q = s->qring + (slot + i) * dq, *v = s->vring + (slot + i) * dv;
    if (s->dcopy[i] != 1)
      continue;
    if (s->qhs) {
      q = s->qstage;
      v = s->vstage;
      ring_get (s, slot + i, q, v);
    }
    for (size_t t = 0; t < dq; t++)
      k[t] = s->ktring[t * s->ldkt + slot + i];
    SattnFrameFault f = sattn_frame_fault (m, 0, s->dx + i * d, q, k, v);
    if (f == SATTN_FRAME_OK)
      continue;
    s->stats.invalid_frames++;
    if (f == SATTN_FRAME_OVERFLOW)
      s->stats.overflow_frames++;
    int ok = s->sc.invalid_policy == SATTN_INVALID_ZERO;
    if (ok) {
      zero_frame (m, q, k, v);
    } else {
      memset (q, 0, dq * sizeof (float));
      memset (k, 0, dq * sizeof (float));
      memset (v, 0, dv * sizeof (float));
    }
    if (s->qhs) {
      ring_put (s, slot + i, 1, q, dq, v, dv);
    } else {
      memcpy (q + n * dq, q, dq * sizeof (float));
      memcpy (v + n * dv, v, dv * sizeof (float));
    }
    sattn_transpose_rows (k, dq, NULL, 1, dq, s->ktring + slot + i, s->ldkt,
                          n);
    s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
  }
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

/* The encoder layer over the output rows of a window: task = block of
 * SATTN_LAYER_ROWS rows, with the worker's scratch. */
typedef struct {
  SattnStream *s;
  const float *x;                /* the rows' query frames, d_model apart */
  float *out;
  size_t ldo, rows;
} LayerCtx;

static void
layer_task (void *ctx, size_t task, unsigned worker)
{
  const LayerCtx *c = ctx;
  const SattnModel *m = c->s->m;
  size_t r0 = task * SATTN_LAYER_ROWS;
  size_t r = c->rows - r0 < SATTN_LAYER_ROWS ? c->rows - r0
      : SATTN_LAYER_ROWS;
  sattn_layer_rows (m, c->x + r0 * m->cfg.d_model, m->cfg.d_model,
                    c->out + r0 * c->ldo, c->ldo, r,
                    c->s->lscratch + (size_t) worker * c->s->lstride);
}


/* The output projection of the staged O rows (see sattn_stream_push) as
 * one block product, then what finish_rows does for each window's rows. */
static void
flush_rows (SattnStream *s)
{
  const SattnModel *m = s->m;
  const size_t cnt = s->ocnt, d_out = m->d_out;
  if (cnt == 0)
    return;
  ProjCtx pc = { .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m };
  proj_add (&pc, m->wo, m->bo, s->ostage, cnt, m->dv, d_out, m->dv, s->oout,
            d_out);
  proj_run (s, &pc);
  for (size_t i = 0; i < cnt; i++)
    if (!s->ostage_ok[i])
      memset (s->oout + i * d_out, 0, d_out * sizeof (float));
  s->stats.overflow_rows += sattn_zero_overflowed_rows (m, s->oout, cnt,
                                                        d_out, s->ostage_ok);
  if (s->oinfo)
    for (size_t i = 0; i < cnt; i++)
      s->oinfo[i].valid = s->ostage_ok[i];
  s->ocnt = 0;
}

/* The output projection of a window's O rows, head-major in s->ohm (at
 * most ATTN_ROWS rows): task = a block of OPROJ_ROWS rows, every column:
 * each entry is the same chain as in proj_task's blocks (the same loop,
 * only other rows beside it), so the bytes do not depend on the split.
 * Each task gathers its rows into its thread's score scratch first (the
 * attention, the run's first phase, is done with it).  Blocks of rows, not
 * of columns: each thread writes whole output rows (no cache line of out
 * written by both) and reads only its rows of O. */
#define OPROJ_ROWS 8
typedef struct {
  SattnStream *s;
  size_t rows;
  float *out;
  size_t ldo;
} OProjCtx;

static void
oproj_task (void *ctx, size_t task, unsigned worker)
{
  const OProjCtx *c = ctx;
  SattnStream *s = c->s;
  const SattnModel *m = s->m;
  const size_t dvh = m->cfg.d_value;
  float *X = s->scores + (size_t) worker * s->sstride;
  const size_t r0 = task * OPROJ_ROWS;
  const size_t r = c->rows - r0 < OPROJ_ROWS ? c->rows - r0 : OPROJ_ROWS;
  for (size_t h = 0; h < m->cfg.heads; h++)
    sattn_copy_rows (s->ohm + h * s->ohs + r0 * dvh, dvh, NULL, r, dvh,
                     X + h * dvh, m->dv, 0);
  /* Every column in one call: rows summed in double are widened once. */
  sattn_project_cols_prec (m, m->wo, m->bo, X, r, m->dv, m->d_out, 0,
                           m->d_out, m->dv, c->out + r0 * c->ldo, c->ldo);
}

/* Compute the window ending after frame count F = s->total, for the last
 * `rows` query rows of it (rows <= n), writing rows of output.  When the
 * push stages O rows (s->odefer) and they fit, the rows are staged
 * instead: out and info (may be NULL) receive them at flush_rows, and the
 * return value is 1 (0 when out is final). */
static int
compute_window (SattnStream *s, size_t rows, float *out, size_t ldo,
                SattnRowInfo *info)
{
  const SattnModel *m = s->m;
  const size_t n = s->n;
  size_t base = (size_t) (s->total % n);     /* first key slot */
  size_t q0 = n - rows;
  SattnStats *stats = s->sc.collect_stats ? &s->stats : NULL;
  /* Without an output projection the tasks write their rows of O straight
   * into out: no serial copy after them. */
  float *o = m->wo == NULL && m->bo == NULL && ldo == m->dv ? out : s->o;
  int staged = 0;
  if (s->odefer) {
    if (s->ocnt + rows > s->ocap || (s->ocnt > 0 &&
            out != s->oout + s->ocnt * ldo))
      flush_rows (s);
    if (rows <= s->ocap) {
      if (s->ocnt == 0) {
        s->oout = out;
        s->oinfo = info;
      }
      o = s->ostage + s->ocnt * m->dv;
      staged = 1;
    }
  }

  /* Head-major rings (see SattnStream); O rows head-major too when the
   * window has at most ATTN_ROWS rows, gathered after the tasks. */
  const int hm = s->qhs != 0;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
  const int ohm = hm && rows <= ATTN_ROWS;
  SattnAttnArgs a = {
    .q = s->qring + (base + q0) * (hm ? dh : m->dq), .ldq = hm ? dh : m->dq,
    .q_head = s->qhs,
    .kt = s->ktring + base, .ldkt = s->ldkt,
    .v = s->vring + base * (hm ? dvh : m->dv), .ldv = hm ? dvh : m->dv,
    .v_head = s->vhs,
    .key_ok = s->vring_ok + base,
    .query_ok = s->vring_ok + base + q0,
    .allow = NULL, .ld_allow = 0,
    .m = rows, .nk = n, .q0 = q0,
    .scores = NULL, .o = ohm ? s->ohm : o,
    .o_head = ohm ? s->ohs : 0, .ldo = ohm ? dvh : 0,
    .weights = s->wkeep, .stats = NULL,
    .sat_threshold = s->sc.saturation_threshold,
  };
  AttnCtx ac = { s, &a, (rows + ATTN_ROWS - 1) / ATTN_ROWS };
  size_t n_tasks = attn_tasks (m->cfg.heads, rows);
  /* Deferred copies: in the tasks with one task per head, else here. */
  if (s->dcnt > 0 && ac.row_blocks != 1)
    for (size_t h = 0; h < m->cfg.heads; h++)
      copy_deferred (s, h, s->scores);
  /* With workers and head-major O rows, the output projection's row
   * blocks run as the second phase of the attention's run (see
   * oproj_task): no serial tail, no second wake-up. */
  OProjCtx oc = { s, rows, out, ldo };
  const size_t n_op = !staged && ohm && m->wo != NULL &&
      OPROJ_ROWS * m->dv <= s->sstride &&
      !(sattn_project_uses_blas (m->wo, rows, m->dv, m->d_out) &&
        !sattn_project_is_double (m, m->wo))
      ? (rows + OPROJ_ROWS - 1) / OPROJ_ROWS : 0;
  /* A window too small to share: the tasks on this thread (the same
   * tasks, the same bytes). */
  double work = (double) m->cfg.heads * rows * n * (dh + dvh) +
      (double) n_op * OPROJ_ROWS * m->dv * m->d_out;
  if (s->dcnt > 0 && s->dproj)
    work += (double) s->dcnt * m->cfg.d_model * (m->dq * 2 + m->dv);
  SattnPool *pool = workers_for (s, work);
  sattn_pool_run2 (pool, n_tasks, attn_task, &ac, n_op, oproj_task, &oc);
  if (s->dproj && __atomic_load_n (&s->dbad, __ATOMIC_RELAXED)) {
    /* Some frames may be unusable after all: the attention again, with
     * the rule applied and what the first run counted dropped. */
    fix_projected (s);
    s->dcnt = 0;
    for (unsigned w = 0; stats && w < s->n_threads; w++)
      sattn_stats_clear (wstats_at (s, w));
    sattn_pool_run2 (pool, n_tasks, attn_task, &ac, n_op, oproj_task, &oc);
  }
  s->dcnt = 0;
  s->dproj = 0;
  if (ohm && n_op == 0)
    for (size_t h = 0; h < m->cfg.heads; h++)
      sattn_copy_rows (s->ohm + h * s->ohs, dvh, NULL, rows, dvh,
                       o + h * dvh, m->dv, 0);
  if (stats) {
    for (unsigned w = 0; w < s->n_threads; w++) {
      sattn_stats_merge (stats, wstats_at (s, w));
      sattn_stats_clear (wstats_at (s, w));
    }
    for (size_t t = 0; t < n_tasks; t++) {
      stats->max_weight_sum += s->tsums[TSUMS_STRIDE * t];
      stats->entropy_sum += s->tsums[TSUMS_STRIDE * t + 1];
    }
  }

  if (staged) {
    memcpy (s->ostage_ok + s->ocnt, a.query_ok, rows);
    s->ocnt += rows;
  } else if (m->wo == NULL && m->bo == NULL) {
    sattn_output_project (m, o, rows, out, ldo);
  } else if (n_op == 0) {
    ProjCtx pc = { .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m };
    proj_add (&pc, m->wo, m->bo, s->o, rows, m->dv, m->d_out, m->dv, out, ldo);
    proj_run (s, &pc);
  }
  if (m->cfg.encoder) {
    LayerCtx lc = { s, s->xring + (base + q0) * m->cfg.d_model, out, ldo,
      rows };
    size_t n_lt = (rows + SATTN_LAYER_ROWS - 1) / SATTN_LAYER_ROWS;
    double fma = 2.0 * (double) rows * m->cfg.d_ff * m->cfg.d_model;
    sattn_pool_run (workers_for (s, fma), n_lt, layer_task, &lc);
  }
  /* On the calling thread, after the workers: it counts into s->stats. */
  if (!staged)
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
  return staged;
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
  size_t scan = 0, last1 = 0;   /* last1: 1 + last usable key < scan */

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
    uint32_t fm = key_ok[q] && m->n_extra == 0 && last1 <= lo ?
        (uint32_t) m->cfg.heads : 0;
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
static size_t
emit_window (SattnStream *s, float *out, SattnRowInfo *info)
{
  const SattnModel *m = s->m;
  const size_t n = s->n, d_out = m->d_out;
  size_t produced = 0;

  switch (s->sc.output) {
    case SATTN_OUTPUT_FRAMES: {
      size_t rows = due_rows (s, s->total);
      int staged = compute_window (s, rows, out, d_out, info);
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
      compute_window (s, n, out, d_out, NULL);
      produced = 1;
      break;
    case SATTN_OUTPUT_LAST:
      compute_window (s, 1, out, d_out, NULL);
      produced = 1;
      break;
    case SATTN_OUTPUT_CLASSES:
      /* Whole models only (refused by stream_check for a layer). */
      return 0;
    case SATTN_OUTPUT_MEAN: {
      /* In double, a block of columns at a time: a float sum of rows near
       * FLT_MAX overflows, the double one cannot, and the mean of finite
       * rows then rounds to a finite float. */
      compute_window (s, n, s->pool, d_out, NULL);
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
  s->next_window = s->total + s->h;
  return produced;
}

/* Of `left` frames still to store, how many the next store may take: up
 * to the next window, and without wrapping the ring. */
static size_t
next_chunk (const SattnStream *s, uint64_t left)
{
  const size_t n = s->n;
  uint64_t until = s->next_window - s->total;
  uint64_t cnt = left < until ? left : until;
  size_t room = n - (size_t) ((s->total + n) % n);
  return (size_t) (cnt < room ? cnt : room);
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
  if (s->pw != NULL) {
    size_t k = 0;
    SattnStatus pst = sattn_pw_push (s->pw, frames, n_frames, valid, out,
                                     info, &k);
    if (n_rows)
      *n_rows = k;
    return pst;
  }

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
  const int batch = n_frames > next_chunk (s, n_frames);
  size_t xcnt = 0, xoff = 0;
  s->odefer = batch && s->ostage != NULL;

  while (n_frames > 0) {
    size_t cnt = next_chunk (s, n_frames);
    size_t pre = SIZE_MAX;
    if (batch && s->xstage != NULL) {
      if (xoff == xcnt) {
        xcnt = n_frames < s->xcap ? n_frames : s->xcap;
        xoff = 0;
        stage_projections (s, frames, xcnt);
      }
      if (cnt > xcnt - xoff)
        cnt = xcnt - xoff;
      pre = xoff;
    }
    size_t stored = store_frames (s, frames, valid, cnt, s->total + n, pre);
    xoff += stored;
    s->total += stored;
    if (s->sc.collect_stats)
      s->stats.frames += stored;
    if (stored < cnt) {
      /* Invalid policy ERROR: no window can be due before that frame. */
      flush_rows (s);
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
      produced += emit_window (s, out + produced * rf,
                               info ? info + produced : NULL);
  }
  flush_rows (s);
  s->odefer = 0;
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
  if (s->pw != NULL) {
    size_t k = 0;
    SattnStatus pst = sattn_pw_drain (s->pw, out, info, &k);
    if (n_rows)
      *n_rows = k;
    return pst;
  }
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
  if (s->pw != NULL) {
    sattn_pw_get_stats (s->pw, out, clear);
    return;
  }
  if (out)
    *out = s->stats;
  if (clear)
    sattn_stats_clear (&s->stats);
}

SattnStatus
sattn_stream_last_weights (const SattnStream *s, int head, float *out,
                           size_t *rows, size_t *cols)
{
  if (s != NULL && s->pw != NULL)
    return sattn_pw_last_weights (s->pw, head, out, rows, cols);
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
  s->next_window += first_frame;
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
    if (s->qhs) {
      const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
      for (size_t h = 0; h < m->cfg.heads; h++) {
        memset (s->qring + h * s->qhs + sl * dh, 0, cnt * dh * sizeof (float));
        memset (s->vring + h * s->vhs + sl * dvh, 0,
                cnt * dvh * sizeof (float));
      }
    } else {
      memset (s->qring + sl * dq, 0, cnt * dq * sizeof (float));
      memset (s->vring + sl * dv, 0, cnt * dv * sizeof (float));
    }
    memset (s->vring_ok + sl, 0, cnt);
    for (size_t t = 0; t < dq; t++)
      memset (s->ktring + t * s->ldkt + sl, 0, cnt * sizeof (float));
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
  if (s->pw != NULL)
    return sattn_pw_skip_lead (s->pw);
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
  if (s == NULL || skipped == NULL)
    return SATTN_E_INVAL;
  if (s->pw != NULL) {
    const uint64_t t = sattn_pw_frames (s->pw);
    if (t > UINT64_MAX - s->sc.window ||
        n_frames > UINT64_MAX - s->sc.window - t)
      return SATTN_E_INVAL;
    uint64_t lead = sattn_pw_skip_lead (s->pw);
    size_t k = (size_t) (n_frames < lead ? n_frames : lead);
    size_t need = k > 0 ? sattn_pw_max_rows (s->pw, k) : 0;
    if (need > 0 && out == NULL)
      return SATTN_E_INVAL;
    if (out_rows < need)
      return SATTN_E_SPACE;
    size_t got = 0;
    SattnStatus pst = sattn_pw_skip (s->pw, n_frames, out, info, &got,
                                     skipped);
    if (n_rows)
      *n_rows = got;
    return pst;
  }
  if (s->total > UINT64_MAX - s->n ||
      n_frames > UINT64_MAX - s->n - s->total)
    return SATTN_E_INVAL;

  uint64_t lead = sattn_stream_skip_lead (s);
  size_t k = (size_t) (n_frames < lead ? n_frames : lead);
  /* max_rows (s, 0) counts what a drain would emit: with no lead frames
   * the call writes nothing. */
  size_t need = k > 0 ? sattn_stream_max_rows (s, k) : 0;
  if (need > 0 && out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;

  const size_t n = s->n, rf = sattn_stream_row_floats (s);
  size_t produced = 0;

  /* The lead: frames whose windows still hold usable frames, as push
   * computes them. */
  n_frames -= k;
  while (k > 0) {
    size_t cnt = next_chunk (s, k);
    store_invalid (s, cnt, s->total + n);
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
