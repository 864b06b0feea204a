/* The incremental executor's work of one window (see incremental-ops.c): the
 * projections of new frames (in tasks of rows × columns, or per head),
 * the mirrored rings, the attention tasks per (head, row block), the
 * output projection and the encoder layer's rows, and the frame rule as
 * frames are stored.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "stream/incremental.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  size_t col_blocks, first; /* first: index of its first task */
  size_t mirror;            /* 0, or floats from a row of y to its copy */
  float *kt;                /* NULL, or y transposed: row c, column i */
  size_t ldkt, kt_mirror;   /* kt's row stride; floats to its copy */
  /* NULL, or y's rows scattered into a head-major ring (see SattnInc):
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
  double fma;          /* multiply-adds of the tasks */
  int copies;          /* large identity copies among the tasks:
                                  * worth the workers whatever fma */
  const SattnModel *m; /* whose projections may sum in double */
  int fast;            /* precision=fast: none does */
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
proj_block (const ProjCtx *c, const ProjJob *p, size_t r0, size_t r1, size_t c0,
            size_t c1)
{
  sattn_project_cols_prec (c->m, c->fast, p->Wt, p->b, p->x + r0 * p->ldx,
                           r1 - r0, p->d_in, p->d_out, c0, c1, p->ldx,
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
  ProjJob pj = { Wt,
                 b,
                 x,
                 n,
                 d_in,
                 d_out,
                 ldx,
                 y,
                 ldy,
                 (d_out + PROJ_COLS - 1) / PROJ_COLS,
                 c->n_tasks,
                 mirror,
                 kt,
                 ldkt,
                 kt_mirror,
                 hm ? hm->ring : NULL,
                 hm ? hm->w : 0,
                 hm ? hm->hs : 0,
                 hm ? hm->slot : 0,
                 hm ? hm->n : 0 };
  if ((Wt == NULL && !copy_tasks) ||
      (sattn_project_uses_blas (Wt, n, d_in, d_out) &&
       !sattn_project_is_double (c->m, c->fast, Wt))) {
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
proj_add (ProjCtx *c, const float *Wt, const float *b, const float *x, size_t n,
          size_t d_in, size_t d_out, size_t ldx, float *y, size_t ldy)
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
workers_for (const SattnInc *s, double fma)
{
  return fma >= s->par_min ? s->workers : NULL;
}

static void
proj_run (SattnInc *s, ProjCtx *pc)
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
ring_put (SattnInc *s, size_t slot, size_t cnt, const float *q, size_t ldq,
          const float *v, size_t ldv)
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
        continue; /* V's rows are Q's */
      memcpy (vr + i * dvh, v + i * ldv + h * dvh, dvh * sizeof (float));
      memcpy (vr + (i + n) * dvh, v + i * ldv + h * dvh, dvh * sizeof (float));
    }
  }
}

/* Q and V of ring slot `slot` as rows (dq, dv floats) into q and v. */
static void
ring_get (const SattnInc *s, size_t slot, float *q, float *v)
{
  const SattnModel *m = s->m;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
  for (size_t h = 0; h < m->cfg.heads; h++) {
    memcpy (q + h * dh, s->qring + h * s->qhs + slot * dh, dh * sizeof (float));
    memcpy (v + h * dvh, s->vring + h * s->vhs + slot * dvh,
            dvh * sizeof (float));
  }
}

/* The attention of one window: task = (head, block of ATTN_ROWS rows). */
typedef struct {
  SattnInc *s;
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
project_head (SattnInc *s, size_t h, float *P)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value, cnt = s->dcnt;
  const size_t c0 = h * dh, e0 = h * dvh, w = 2 * dh + dvh;
  const float *x = s->dx;

  /* V summed in double (see SattnModel; never with precision=fast): the
   * block path's chains, from the bias.  wqkv holds V's columns only when
   * the model sums V in float: with V in double there and precision=fast,
   * Q, K and V come from wq, wk and wv, which give the same bytes. */
  const int vd = !s->fast && m->wvd != NULL;
  if (m->wqkv != NULL && (m->wvd == NULL || !s->fast)) {
    const size_t pw = sattn_wqkv_head_width (m);
    sattn_qk (x, d, m->wqkv + h * pw, m->cfg.heads * pw, cnt, pw, d, P, w);
  } else {
    head_cols (m->wq, dq, x, cnt, d, c0, dh, P, w);
    head_cols (m->wk, dq, x, cnt, d, c0, dh, P + dh, w);
    if (!vd)
      head_cols (m->wv, dv, x, cnt, d, e0, dvh, P + 2 * dh, w);
  }
  if (vd)
    sattn_linear_f (x, d, cnt, m->wvd + e0, dv, m->bvd ? m->bvd + e0 : NULL, d,
                    dvh, P + 2 * dh, w);
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
copy_deferred (SattnInc *s, size_t h, float *P)
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
  sattn_copy_rows (s->dx + h * dh, d, s->dcopy, s->dcnt, dh, qh + slot * ldq,
                   ldq, n * ldq);
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
  SattnInc *s = c->s;
  size_t h = task / c->row_blocks;
  /* Each thread's scratch holds min (ATTN_ROWS, window) rows. */
  float *S = s->scores + (size_t) worker * s->sstride;
  /* One task per head: it copies (or projects) its head's deferred frames
   * first. */
  if (c->row_blocks == 1 && s->dcnt > 0)
    copy_deferred (s, h, S);
  size_t r0 = (task % c->row_blocks) * ATTN_ROWS;
  size_t r1 = r0 + ATTN_ROWS < c->a->m ? r0 + ATTN_ROWS : c->a->m;

  if (!s->fe->sc.collect_stats) {
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
stage_at (const SattnInc *s, int j)
{
  return s->xstage + (size_t) j * s->xcap * s->m->dq;
}

/* The projections with weights of frames x[0, cnt) (cnt <= xcap) into
 * xstage, each as one block product: tasks of PROJ_ROWS × PROJ_COLS, the
 * same blocks and loop as store_frames uses for a few frames, so every
 * row gets the same bytes. */
void
sattn_inc_stage_projections (SattnInc *s, const float *x, size_t cnt)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model;
  ProjCtx pc = {
    .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m, .fast = s->fast
  };
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
size_t
sattn_inc_due_rows (const SattnInc *s, uint64_t end)
{
  switch (s->fe->sc.output) {
    case SATTN_OUTPUT_FRAMES:
      /* More than n cannot happen: windows come every <= n frames. */
      return end - s->fe->next_out > s->n ? s->n
                                          : (size_t) (end - s->fe->next_out);
    case SATTN_OUTPUT_LAST:
      return 1;
    default:
      return s->n;
  }
}

/* One store of frames (see sattn_inc_store_frames): where they go and how
 * they are written. */
typedef struct {
  const float *x;
  const uint8_t *valid;
  size_t cnt;
  uint64_t p0; /* virtual index of frame 0 */
  size_t slot; /* its ring slot */
  int hm;      /* head-major rings: rows go through the stages */
  int qv;      /* one ring for Q and V: V's rows are Q's */
  int rope;
  /* The tasks write the mirrors and the transposed K straight away
   * (not under SATTN_INVALID_ERROR, which may have to give the slots
   * their old frames back from the mirrors, nor with RoPE, which rotates
   * Q and K after the projection, on this thread). */
  int direct;
  float *q, *k, *v; /* the projected rows: in the ring, or staged */
  float *kt;        /* K's first column in the transposed ring */
} StoreJob;

/* Plain copies of the frames and a window due right after them, too few
 * for copy tasks of their own: the window's tasks copy each head's
 * columns themselves (see copy_deferred), in parallel instead of here.
 * Only the frame rule runs here; a frame written as zeros instead has
 * dcopy 0. */
static size_t
defer_copies (SattnInc *s, const StoreJob *j)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, n = s->n, slot = j->slot;
  const float *x = j->x;
  const uint8_t *valid = j->valid;
  /* The frames tested as one block first (the common push: all usable);
   * the rule per frame only when that fails. */
  const int usable = sattn_frames_ok (m, j->cnt, valid, x, x, x, x);
  if (usable) {
    memset (s->dcopy, 1, j->cnt);
    memset (s->vring_ok + slot, 1, j->cnt);
    memset (s->vring_ok + slot + n, 1, j->cnt);
  }
  for (size_t i = 0; !usable && i < j->cnt; i++) {
    SattnFrameFault f = sattn_frame_fault (m, valid != NULL && !valid[i],
                                           x + i * d, x + i * d, x + i * d,
                                           x + i * d);
    /* Zero policy: the projections of a zero frame are zeros here. */
    int ok = f == SATTN_FRAME_OK ||
             (s->fe->sc.invalid_policy == SATTN_INVALID_ZERO &&
              (f == SATTN_FRAME_NONFINITE || f == SATTN_FRAME_OVERFLOW));
    if (f != SATTN_FRAME_OK) {
      s->fe->stats.invalid_frames++;
      if (f == SATTN_FRAME_OVERFLOW)
        s->fe->stats.overflow_frames++;
    }
    s->dcopy[i] = f == SATTN_FRAME_OK;
    s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
  }
  s->dx = x;
  s->dcnt = j->cnt;
  s->dslot = slot;
  return j->cnt;
}

/* Projections with weights or biases and a window of at most ATTN_ROWS
 * query rows due right after the frames: the window's tasks (one per
 * head) project them too, each its head's columns, and go on to that
 * head's attention without waiting for the others: one synchronisation
 * per window instead of two.  The frame rule's test of the input runs
 * here; its test of the projections after the tasks (fix_projected),
 * only when a task found a non-finite value.  With weights for all three
 * projections, a non-finite sample makes every column of them non-finite
 * (NaN, or Inf: x Inf + finite), so the tasks find those frames too and
 * only the flag is tested here. */
static size_t
defer_projections (SattnInc *s, const StoreJob *j)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, n = s->n, slot = j->slot;
  const int test_x = m->wq == NULL || m->wk == NULL || m->wv == NULL;
  for (size_t i = 0; i < j->cnt; i++) {
    SattnFrameFault f = sattn_frame_fault (m, j->valid != NULL && !j->valid[i],
                                           test_x ? j->x + i * d : NULL, NULL,
                                           NULL, NULL);
    /* Zero policy: a frame with bad samples becomes a zero frame. */
    int zero = s->fe->sc.invalid_policy == SATTN_INVALID_ZERO &&
               f == SATTN_FRAME_NONFINITE;
    if (f != SATTN_FRAME_OK)
      s->fe->stats.invalid_frames++;
    s->dcopy[i] = f == SATTN_FRAME_OK ? 1 : zero ? 2 : 0;
    s->vring_ok[slot + i] = s->vring_ok[slot + i + n] =
        (uint8_t) (f == SATTN_FRAME_OK || zero);
  }
  s->dx = j->x;
  s->dcnt = j->cnt;
  s->dslot = slot;
  s->dproj = 1;
  s->dbad = 0;
  return j->cnt;
}

/* Project the frames into j->q, j->k, j->v (with j->direct, into the
 * mirrors and the transposed K as well): each projection from the frames
 * (norm1 of them for a pre-norm encoder layer), or copied from its staged
 * rows from row pre (bias included) as an identity of the projected
 * width. */
static void
project_frames (SattnInc *s, const StoreJob *j, size_t pre, int copy_tasks)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  const size_t cnt = j->cnt;
  const RingDst qdst = { s->qring, m->cfg.d_head, s->qhs, j->slot, n };
  const RingDst vdst = { s->vring, m->cfg.d_value, s->vhs, j->slot, n };
  const float *xp = j->x;
  if (s->xnorm != NULL) {
    sattn_layer_norm1 (m, s->fast, j->x, d, s->xnorm, d, cnt);
    xp = s->xnorm;
  }
  ProjSrc ps[3] = { { m->wq, m->bq, xp, d, d },
                    { m->wk, m->bk, xp, d, d },
                    { m->wv, m->bv, xp, d, d } };
  if (pre != SIZE_MAX)
    for (int p = 0; p < 3; p++)
      if (ps[p].Wt != NULL) {
        size_t w = p < 2 ? dq : dv;
        ps[p] = (ProjSrc){ NULL, NULL, stage_at (s, p) + pre * w, w, w };
      }
  ProjCtx pc = {
    .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m, .fast = s->fast
  };
  if (j->direct) {
    proj_add_copies (&pc, ps[0].Wt, ps[0].b, ps[0].x, cnt, ps[0].d_in, dq,
                     ps[0].ldx, j->q, dq, j->hm ? 0 : n * dq, NULL, 0, 0,
                     j->hm ? &qdst : NULL, copy_tasks);
    proj_add_copies (&pc, ps[1].Wt, ps[1].b, ps[1].x, cnt, ps[1].d_in, dq,
                     ps[1].ldx, j->k, dq, 0, j->kt, s->ldkt, n, NULL,
                     copy_tasks);
    if (!j->qv)
      proj_add_copies (&pc, ps[2].Wt, ps[2].b, ps[2].x, cnt, ps[2].d_in, dv,
                       ps[2].ldx, j->v, dv, j->hm ? 0 : n * dv, NULL, 0, 0,
                       j->hm ? &vdst : NULL, copy_tasks);
  } else {
    proj_add (&pc, ps[0].Wt, ps[0].b, ps[0].x, cnt, ps[0].d_in, dq, ps[0].ldx,
              j->q, dq);
    proj_add (&pc, ps[1].Wt, ps[1].b, ps[1].x, cnt, ps[1].d_in, dq, ps[1].ldx,
              j->k, dq);
    if (!j->qv)
      proj_add (&pc, ps[2].Wt, ps[2].b, ps[2].x, cnt, ps[2].d_in, dv, ps[2].ldx,
                j->v, dv);
  }
  pc.copies = copy_tasks;
  proj_run (s, &pc);
}

/* Frame i of the store under the frame rule and the invalid policy, its
 * projections at q, k, v (RoPE not yet applied): 0 when the policy ERROR
 * refuses it (recorded, and the slots from i on given their old frames
 * back), else 1 with the frame written (zeros, or a zero frame's
 * projections) and flagged in every copy. */
static int
rule_frame (SattnInc *s, const StoreJob *j, size_t i, int usable)
{
  const SattnModel *m = s->m;
  const size_t d = m->cfg.d_model, dq = m->dq, dv = m->dv, n = s->n;
  const size_t slot = j->slot;
  float *q = j->q + i * dq, *k = j->k + i * dq, *v = j->v + i * dv;
  const float *x = j->x + i * d;
  /* Absolute frame index p0 - n + i (p0 is n ahead), from the position
   * origin. */
  const uint64_t pos = j->p0 - n + i - s->fe->pos0;
  if (j->rope)
    sattn_rope_qk (m, q, k, pos);
  SattnFrameFault f =
      usable
          ? SATTN_FRAME_OK
          : sattn_frame_fault (m, j->valid != NULL && !j->valid[i], x, q, k, v);
  int ok = f == SATTN_FRAME_OK;
  int bad_data = f == SATTN_FRAME_NONFINITE || f == SATTN_FRAME_OVERFLOW;
  if (bad_data && s->fe->sc.invalid_policy == SATTN_INVALID_ERROR) {
    /* Not consumed: the lower copies of slots [i, cnt) get back the
     * frames still in the window from their mirrors (K is only written
     * after the rule; head-major rings were not written at all). */
    if (!j->hm) {
      memcpy (q, s->qring + (slot + i + n) * dq,
              (j->cnt - i) * dq * sizeof (float));
      memcpy (v, s->vring + (slot + i + n) * dv,
              (j->cnt - i) * dv * sizeof (float));
    }
    s->fe->have_error = 1;
    s->fe->err_frame = j->p0 - n + i;
    s->fe->err_fault = f;
    return 0;
  }
  if (!ok) {
    s->fe->stats.invalid_frames++;
    if (f == SATTN_FRAME_OVERFLOW)
      s->fe->stats.overflow_frames++;
  }
  if (bad_data && s->fe->sc.invalid_policy == SATTN_INVALID_ZERO) {
    zero_frame (m, q, k, v);
    if (j->rope)
      sattn_rope_qk (m, q, k, pos);
    ok = 1;
  } else if (!ok) {
    memset (q, 0, dq * sizeof (float));
    memset (k, 0, dq * sizeof (float));
    memset (v, 0, dv * sizeof (float));
  }
  if (!(f == SATTN_FRAME_OK) && j->direct) {
    /* Rewritten: its mirrors and transposed K follow. */
    if (j->hm) {
      ring_put (s, slot + i, 1, q, dq, v, dv);
    } else {
      memcpy (q + n * dq, q, dq * sizeof (float));
      memcpy (v + n * dv, v, dv * sizeof (float));
    }
    sattn_transpose_rows (k, dq, NULL, 1, dq, j->kt + i, s->ldkt, n);
  }
  s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
  if (s->xring != NULL) {
    /* The residual's input: the frame, or zeros for a zero-policy or
     * unusable frame. */
    float *xr = s->xring + (slot + i) * d;
    if (f == SATTN_FRAME_OK)
      memcpy (xr, x, d * sizeof (float));
    else
      memset (xr, 0, d * sizeof (float));
    memcpy (xr + n * d, xr, d * sizeof (float));
  }
  return 1;
}

/* Store frames [0, cnt) (all landing in ring slots without wrap) at
 * virtual index p0, applying the frame rule and the invalid policy.
 * pre: row of xstage holding the projections with weights of frame 0
 * (see stage_projections), or SIZE_MAX to project here.
 * Returns how many were stored: cnt, or under SATTN_INVALID_ERROR the
 * index of the first frame with bad data (recorded in s->fe->err_*). */
size_t
sattn_inc_store_frames (SattnInc *s, const float *x, const uint8_t *valid,
                        size_t cnt, uint64_t p0, size_t pre)
{
  const SattnModel *m = s->m;
  const size_t dq = m->dq, dv = m->dv, n = s->n;
  StoreJob j = { .x = x, .valid = valid, .cnt = cnt, .p0 = p0 };
  j.slot = (size_t) (p0 % n);
  j.hm = s->qhs != 0;
  j.qv = s->vring == s->qring;
  j.rope = sattn_model_rope (m);
  j.direct = s->fe->sc.invalid_policy != SATTN_INVALID_ERROR && !j.rope;
  j.q = j.hm ? s->qstage : s->qring + j.slot * dq;
  j.k = s->kscratch;
  j.v = j.qv ? j.q : j.hm ? s->vstage : s->vring + j.slot * dv;
  j.kt = s->ktring + j.slot;

  const int due = s->fe->total + cnt == s->fe->next_window;
  const int copy_tasks = j.direct && cnt * (3 * dq + 2 * dv) >= COPY_PAR_FLOATS;
  if (j.direct && !copy_tasks && !m->cfg.encoder && m->wq == NULL &&
      m->bq == NULL && m->wk == NULL && m->bk == NULL && m->wv == NULL &&
      m->bv == NULL && due)
    return defer_copies (s, &j);
  /* Without workers (threads = 1) there is no synchronisation to save,
   * and the block products of project_frames are faster than the
   * per-head ones (whole 32-column tiles, no scratch, one finiteness test
   * per frame): they run instead, with the same bytes. */
  if (j.direct && pre == SIZE_MAX && !m->cfg.encoder && s->workers != NULL &&
      due && sattn_inc_due_rows (s, s->fe->total + cnt) <= ATTN_ROWS &&
      cnt * (2 * m->cfg.d_head + m->cfg.d_value) <= s->sstride)
    return defer_projections (s, &j);
  project_frames (s, &j, pre, copy_tasks);

  /* Without RoPE (which rotates each frame's Q and K first), all frames
   * tested as one block (the common push: all usable); the rule per
   * frame only when that fails. */
  const int usable = !j.rope &&
                     sattn_frames_ok (m, cnt, valid, x, j.q, j.k, j.v);
  for (size_t i = 0; i < cnt; i++)
    if (!rule_frame (s, &j, i, usable)) {
      cnt = i;
      break;
    }
  if (!j.direct) {
    if (j.hm) {
      ring_put (s, j.slot, cnt, j.q, dq, j.v, dv);
    } else {
      memcpy (s->qring + (j.slot + n) * dq, j.q, cnt * dq * sizeof (float));
      memcpy (s->vring + (j.slot + n) * dv, j.v, cnt * dv * sizeof (float));
    }
    sattn_transpose_rows (j.k, dq, NULL, cnt, dq, s->ktring + j.slot, s->ldkt,
                          n);
  }
  return cnt;
}

/* After the tasks of project_head found a non-finite value: the frame
 * rule on each deferred frame and its whole projections, as store_frames
 * applies it (the flag, and perhaps the input, were tested before the
 * tasks). */
static void
fix_projected (SattnInc *s)
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
    s->fe->stats.invalid_frames++;
    if (f == SATTN_FRAME_OVERFLOW)
      s->fe->stats.overflow_frames++;
    int ok = s->fe->sc.invalid_policy == SATTN_INVALID_ZERO;
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
    sattn_transpose_rows (k, dq, NULL, 1, dq, s->ktring + slot + i, s->ldkt, n);
    s->vring_ok[slot + i] = s->vring_ok[slot + i + n] = (uint8_t) ok;
  }
}

/* The output rows of a window: those of unusable queries are zeros; those
 * that overflowed (output projection, layer parts) too, counted by part.
 * row_ok[q0 + i] says which rows are valid. */
static void
finish_rows (SattnInc *s, const uint8_t *query_ok, size_t rows, size_t q0,
             float *out, size_t ldo)
{
  const SattnModel *m = s->m;
  uint8_t *ok = s->row_ok + q0;
  for (size_t i = 0; i < rows; i++) {
    ok[i] = query_ok[i];
    if (!ok[i])
      memset (out + i * ldo, 0, m->d_out * sizeof (float));
  }
  s->fe->stats.overflow_rows +=
      sattn_zero_overflowed_rows (m, out, rows, ldo, ok,
                                  m->cfg.encoder ? s->row_part + q0 : NULL,
                                  s->fe->overflow_parts);
}

/* The encoder layer over the output rows of a window: task = block of
 * SATTN_LAYER_ROWS rows, with the worker's scratch. */
typedef struct {
  SattnInc *s;
  const float *x; /* the rows' query frames, d_model apart */
  float *out;
  size_t ldo, rows;
  uint8_t *part; /* rows: the part each row overflowed in */
} LayerCtx;

static void
layer_task (void *ctx, size_t task, unsigned worker)
{
  const LayerCtx *c = ctx;
  const SattnModel *m = c->s->m;
  size_t r0 = task * SATTN_LAYER_ROWS;
  size_t r = c->rows - r0 < SATTN_LAYER_ROWS ? c->rows - r0 : SATTN_LAYER_ROWS;
  sattn_layer_rows (m, c->s->fast, c->x + r0 * m->cfg.d_model, m->cfg.d_model,
                    c->out + r0 * c->ldo, c->ldo, r,
                    c->s->lscratch + (size_t) worker * c->s->lstride,
                    c->part + r0);
}

/* The output projection of the staged O rows (see inc_push) as
 * one block product, then what finish_rows does for each window's rows. */
void
sattn_inc_flush_rows (SattnInc *s)
{
  const SattnModel *m = s->m;
  const size_t cnt = s->ocnt, d_out = m->d_out;
  if (cnt == 0)
    return;
  ProjCtx pc = {
    .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m, .fast = s->fast
  };
  proj_add (&pc, m->wo, m->bo, s->ostage, cnt, m->dv, d_out, m->dv, s->oout,
            d_out);
  proj_run (s, &pc);
  for (size_t i = 0; i < cnt; i++)
    if (!s->ostage_ok[i])
      memset (s->oout + i * d_out, 0, d_out * sizeof (float));
  s->fe->stats.overflow_rows +=
      sattn_zero_overflowed_rows (m, s->oout, cnt, d_out, s->ostage_ok, NULL,
                                  s->fe->overflow_parts);
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
  SattnInc *s;
  size_t rows;
  float *out;
  size_t ldo;
} OProjCtx;

static void
oproj_task (void *ctx, size_t task, unsigned worker)
{
  const OProjCtx *c = ctx;
  SattnInc *s = c->s;
  const SattnModel *m = s->m;
  const size_t dvh = m->cfg.d_value;
  float *X = s->scores + (size_t) worker * s->sstride;
  const size_t r0 = task * OPROJ_ROWS;
  const size_t r = c->rows - r0 < OPROJ_ROWS ? c->rows - r0 : OPROJ_ROWS;
  for (size_t h = 0; h < m->cfg.heads; h++)
    sattn_copy_rows (s->ohm + h * s->ohs + r0 * dvh, dvh, NULL, r, dvh,
                     X + h * dvh, m->dv, 0);
  /* Every column in one call: rows summed in double are widened once. */
  sattn_project_cols_prec (m, s->fast, m->wo, m->bo, X, r, m->dv, m->d_out, 0,
                           m->d_out, m->dv, c->out + r0 * c->ldo, c->ldo);
}

/* Compute the window ending after frame count F = s->fe->total, for the last
 * `rows` query rows of it (rows <= n), writing rows of output.  When the
 * push stages O rows (s->odefer) and they fit, the rows are staged
 * instead: out and info (may be NULL) receive them at flush_rows, and the
 * return value is 1 (0 when out is final). */
int
sattn_inc_compute_window (SattnInc *s, size_t rows, float *out, size_t ldo,
                          SattnRowInfo *info)
{
  const SattnModel *m = s->m;
  const size_t n = s->n;
  size_t base = (size_t) (s->fe->total % n); /* first key slot */
  size_t q0 = n - rows;
  SattnStats *stats = s->fe->sc.collect_stats ? &s->fe->stats : NULL;
  /* Without an output projection the tasks write their rows of O straight
   * into out: no serial copy after them. */
  float *o = m->wo == NULL && m->bo == NULL && ldo == m->dv ? out : s->o;
  int staged = 0;
  if (s->odefer) {
    if (s->ocnt + rows > s->ocap ||
        (s->ocnt > 0 && out != s->oout + s->ocnt * ldo))
      sattn_inc_flush_rows (s);
    if (rows <= s->ocap) {
      if (s->ocnt == 0) {
        s->oout = out;
        s->oinfo = info;
      }
      o = s->ostage + s->ocnt * m->dv;
      staged = 1;
    }
  }

  /* Head-major rings (see SattnInc); O rows head-major too when the
   * window has at most ATTN_ROWS rows, gathered after the tasks. */
  const int hm = s->qhs != 0;
  const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
  const int ohm = hm && rows <= ATTN_ROWS;
  SattnAttnArgs a = {
    .q = s->qring + (base + q0) * (hm ? dh : m->dq),
    .ldq = hm ? dh : m->dq,
    .q_head = s->qhs,
    .kt = s->ktring + base,
    .ldkt = s->ldkt,
    .v = s->vring + base * (hm ? dvh : m->dv),
    .ldv = hm ? dvh : m->dv,
    .v_head = s->vhs,
    .key_ok = s->vring_ok + base,
    .query_ok = s->vring_ok + base + q0,
    .allow = NULL,
    .ld_allow = 0,
    .m = rows,
    .nk = n,
    .q0 = q0,
    .scores = NULL,
    .o = ohm ? s->ohm : o,
    .o_head = ohm ? s->ohs : 0,
    .ldo = ohm ? dvh : 0,
    .weights = s->fe->wkeep,
    .stats = NULL,
    .sat_threshold = s->fe->sc.saturation_threshold,
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
  const size_t n_op =
      !staged && ohm && m->wo != NULL && OPROJ_ROWS * m->dv <= s->sstride &&
              !(sattn_project_uses_blas (m->wo, rows, m->dv, m->d_out) &&
                !sattn_project_is_double (m, s->fast, m->wo))
          ? (rows + OPROJ_ROWS - 1) / OPROJ_ROWS
          : 0;
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
      sattn_copy_rows (s->ohm + h * s->ohs, dvh, NULL, rows, dvh, o + h * dvh,
                       m->dv, 0);
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
    sattn_output_project (m, s->fast, o, rows, out, ldo);
  } else if (n_op == 0) {
    ProjCtx pc = {
      .n_jobs = 0, .n_tasks = 0, .fma = 0.0, .m = m, .fast = s->fast
    };
    proj_add (&pc, m->wo, m->bo, s->o, rows, m->dv, m->d_out, m->dv, out, ldo);
    proj_run (s, &pc);
  }
  if (m->cfg.encoder) {
    LayerCtx lc = { s,    s->xring + (base + q0) * m->cfg.d_model,
                    out,  ldo,
                    rows, s->row_part + q0 };
    size_t n_lt = (rows + SATTN_LAYER_ROWS - 1) / SATTN_LAYER_ROWS;
    double fma = 2.0 * (double) rows * m->cfg.d_ff * m->cfg.d_model;
    sattn_pool_run (workers_for (s, fma), n_lt, layer_task, &lc);
  }
  /* On the calling thread, after the workers: it counts into s->fe->stats. */
  if (!staged)
    finish_rows (s, a.query_ok, rows, q0, out, ldo);

  if (s->fe->wkeep)
    s->fe->wkeep_rows = rows;
  s->fe->have_window = 1;
  if (stats) {
    stats->windows++;
    for (size_t j = 0; j < n; j++)
      if (!a.key_ok[j])
        stats->masked_keys++;
  }
  return staged;
}
