/* The incremental executor's private parts, shared by its files:
 * incremental-ops.c (its ops table: creation, push, drain, a window's
 * emission and row descriptions), incremental.c (a window's work:
 * projections, rings, per-head tasks, the output projection and the
 * layer's rows) and skip.c (GAPs).  See incremental-ops.c for the
 * design.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_STREAM_INCREMENTAL_H
#define SATTN_STREAM_INCREMENTAL_H

#include "model/model.h"
#include "stream/stream.h"

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
#define TSUMS_STRIDE (LINE / sizeof (double)) /* doubles per task */

typedef struct SattnInc {
  SattnStream *fe;      /* the front end: schedule, errors, statistics */
  const SattnModel *m;  /* the model, at either precision */
  int fast;             /* SATTN_PRECISION_FAST: every projection sums in
                           float from m's float weights, its double copies
                           unused (nn/project.c) */
  size_t n, h, ncols;   /* fe's window and hop; n + extra keys */
  float *qring, *vring; /* 2n × dq, 2n × dv (see qhs); one ring
                                     when Q = V (see qv_shared) */
  float *ktring;        /* K transposed: dq rows of 2n keys,
                                     ldkt floats apart (see kt_stride) */
  size_t ldkt;
  float *kscratch;    /* n × dq: K rows before transposing */
  uint8_t *vring_ok;  /* 2n: frame usable as key / query */
  float *scores;      /* threads × min (ATTN_ROWS, n) × ncols */
  float *o;           /* n × dv */
  unsigned n_threads; /* caller included */
  SattnPool *workers; /* NULL with one thread */
  double par_min;     /* see PAR_MIN */
  SattnStats *wstats; /* threads: per-worker statistics parts,
                                     WSTATS_STRIDE bytes apart */
  double *tsums;      /* 2 per attention task (TSUMS_STRIDE
                                     apart): the weight and entropy sums,
                                     merged in task order */
  size_t sstride;     /* floats between threads' score scratch */
  float *pool;        /* n × d_out (mean mode) */
  uint8_t *row_ok;    /* n: the last window's output rows that
                                     are valid (query usable, finite) */
  uint8_t *row_part;  /* n (after row_ok's n, in its block): the
                                     SattnPart each encoder row overflowed
                                     in (see sattn_layer_rows) */
  /* Copies deferred to the window's tasks (see store_frames): frames
   * dx[0, dcnt) of the current push, at slot dslot; dcopy[i] = 1 copies
   * the frame, 0 writes zeros. */
  const float *dx;
  size_t dcnt, dslot;
  uint8_t *dcopy; /* n */
  /* dproj: the deferred frames are projected by the window's tasks, one
   * head's columns each (see project_head); dcopy[i] is then 1 to project
   * the frame, 0 to write zeros, 2 to write the projections of a zero
   * frame.  dbad: a task found a non-finite value in what it projected
   * (atomic; see fix_projected). */
  int dproj, dbad;
  /* Batched projections (see inc_push).  xstage: Q | K | V of up
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
  int odefer; /* this push stages its O rows */
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
} SattnInc;

static inline SattnStats *
wstats_at (SattnInc *s, unsigned w)
{
  return (SattnStats *) (void *) ((char *) s->wstats + w * WSTATS_STRIDE);
}

static inline size_t
attn_tasks (size_t heads, size_t rows)
{
  return heads * ((rows + ATTN_ROWS - 1) / ATTN_ROWS);
}

/* incremental-ops.c */
size_t sattn_inc_emit_window (SattnInc *s, float *out, SattnRowInfo *info);
size_t sattn_inc_next_chunk (const SattnInc *s, uint64_t left);

/* incremental.c */
int sattn_inc_compute_window (SattnInc *s, size_t rows, float *out, size_t ldo,
                              SattnRowInfo *info);
size_t sattn_inc_due_rows (const SattnInc *s, uint64_t end);
void sattn_inc_flush_rows (SattnInc *s);
void sattn_inc_stage_projections (SattnInc *s, const float *x, size_t cnt);
size_t sattn_inc_store_frames (SattnInc *s, const float *x,
                               const uint8_t *valid, size_t cnt, uint64_t p0,
                               size_t pre);

/* skip.c (the ops table's skipping entries, see SattnExecOps) */
uint64_t sattn_inc_skip_lead (const void *e);
size_t sattn_inc_push_masked (void *e, size_t k, float *out,
                              SattnRowInfo *info);
void sattn_inc_forget (void *e, uint64_t end, uint64_t cnt);

#endif
