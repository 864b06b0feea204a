/* The per-window executor: a stream over a whole model
 * (SATTN_MODEL_WHOLE).  Each window is one sequence through the model.
 * The schedule (stream/schedule.h), the row descriptions, the
 * invalid-frames policies, the drain, reset and skip follow the
 * incremental executor's contract in sattn.h exactly; what differs is the
 * work per window.
 *
 * Frames are kept in a ring of `cap` slots (slot = frame index mod cap),
 * room for the frames of max_windows windows due together.  The frames
 * of a push are embedded as they are stored, STAGE rows in one product (e
 * = x W^T + b in double).  With learned positions the embedded rows are
 * kept in double (emb): a window adds its position to each row (window
 * index 0 = the oldest) and rounds once.  Without learned positions a
 * frame's first-layer input row does not depend on the window: it is
 * rounded to float once (xf), its first-layer Q, K and V projections are
 * computed then too, one product over the stored rows (RoPE at the
 * frame's absolute index, as the incremental executor rotates: the scores
 * depend on offsets only), and every window the frame is in reuses them.
 *
 * The windows due in one push run together as blocks of up to
 * max_windows windows (model/net.c): their rows gathered oldest first,
 * the layers, the final norm and the pooling over all of them at once,
 * worker threads (SattnStreamConfig.threads) sharing rows and windows.
 * Every value is summed in an order of its own, so the bytes depend
 * neither on how frames come in pushes nor on the thread count.  Masked
 * frames (padding before the stream, GAPs, unusable frames under
 * SATTN_INVALID_MASK) are key padding and left out of the pooling.
 * Nothing is allocated after pw_create.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "stream/stream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a block (windows × window) at most, and windows per block at
 * most: enough rows for the products' row tiles, bounded memory. */
#define BLOCK_ROWS 1024
#define BLOCK_WINDOWS 64
/* Frames embedded (and, without learned positions, projected) in one
 * product. */
#define STAGE 64

typedef struct SattnPw {
  SattnStream *fe; /* the front end: schedule, errors, statistics */
  const SattnModel *m;
  const SattnNet *net;
  size_t n, h, cap, max_windows; /* fe's window and hop; ring slots */
  uint8_t *ok;                   /* cap: slot usable */
  double *emb; /* cap × D: embedded frames (learned positions) */
  /* Without learned positions (reuse): each frame's first-layer input row
   * (xf, float) and its first-layer projections (q0, k0: dq, v0: dv
   * floats per slot). */
  int reuse;
  float *xf, *q0, *k0, *v0, *xn;
  /* A front end that depends on the window (net->per_window): each
   * slot's standardised frame (xs, F doubles; zeros when unusable) and
   * its sum of squares (ss); one window gathered (wxs, wss, wok) and the
   * front end's scratch (fscr). */
  double *xs, *ss, *wxs, *wss, *wraw, *fscr;
  uint8_t *wok;
  /* ... with one gathered window and scratch per thread (the front ends
   * of a block's windows run as the pool's tasks): wxs, wss, fok (n
   * each) and fscr (fscr_len) at thread t's offset; each window's frames
   * the front end found overflowing (fovf, max_windows). */
  uint8_t *fok;
  size_t fscr_len;
  uint64_t *fovf;
  double *raw;   /* cap: each slot's sum of x^2, the contract's input RMS */
  size_t bn;     /* block rows per window: the model's lead rows + n */
  double *stage; /* STAGE × D: the embedding of stored frames */
  double *ezero; /* D: the embedding of a zero frame */
  float *zero;   /* F zeros */
  SattnPool *pool;
  SattnNetBlock *blk;
  uint64_t *ends;      /* max_windows: the ends of a block's windows */
  uint32_t *usable_in; /* max_windows */
  size_t *bidx;        /* max_windows: a window's index in the block */
} SattnPw;

/* The rules for sc of a whole model (after the front end's). */
static SattnStatus
pw_check (const SattnModel *m, const SattnStreamConfig *sc, char *err,
          size_t err_len)
{
  const SattnNet *net = m->net;
  if (sc->output == SATTN_OUTPUT_FRAMES)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=frames needs "
                       "one output row per input frame, but this is a whole "
                       "model (%zu layers) that computes each window as one "
                       "sequence: every row depends on the whole window; "
                       "use output=classes%s, mean, last or window",
                       net->n_layers, net->classes ? "" : " (with a head)");
  if (sc->output == SATTN_OUTPUT_CLASSES && net->classes == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=classes needs a "
                       "classification head, and this whole model has none "
                       "(no 'head.weight' or 'head.0.weight' in the file; "
                       "it ends with the pooled %zu-value row): use "
                       "output=mean, last or window",
                       net->d);
  if (net->pos != NULL && sc->window > net->max_window)
    return sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "window=%zu is longer "
                       "than the model's learned positions (pos_embed has "
                       "%zu rows): use a window of at most %zu frames",
                       sc->window, net->max_window, net->max_window);
  return SATTN_OK;
}

/* Windows per block and ring slots for a window of n frames, hop h. */
static size_t
block_windows (size_t n)
{
  size_t w = n < BLOCK_ROWS ? BLOCK_ROWS / n : 1;
  return w < BLOCK_WINDOWS ? w : BLOCK_WINDOWS;
}

static size_t
ring_slots (size_t n, size_t h)
{
  return sattn_size_add (n, sattn_size_mul (block_windows (n) - 1, h));
}

/* The executor's bytes, SIZE_MAX when they overflow. */
static size_t
pw_bytes (const SattnModel *m, const SattnStreamConfig *sc)
{
  const SattnNet *net = m->net;
  const size_t n = sc->window, D = net->d, B = block_windows (n);
  const size_t cap = ring_slots (n, sc->hop), F = net->d_frame;
  const size_t bn = n + net->lead;
  const unsigned T = sattn_resolve_threads (sc->threads);
  size_t b = sizeof (SattnPw) + cap + n;
  const SattnModel *l0 = net->layer[0];
  b = sattn_size_add (b, sattn_size_mul (cap, sizeof (double)));
  if (net->per_window) {
    /* xs, ss; per thread wxs, wss, fscr; wraw */
    const size_t per_thread = sattn_size_add (sattn_size_mul (n, F + 1),
                                              sattn_net_front_scratch (m, n));
    b = sattn_size_add (
        b,
        sattn_size_mul (sattn_size_add (sattn_size_add (sattn_size_mul (cap,
                                                                        F + 1),
                                                        n),
                                        sattn_size_mul (T, per_thread)),
                        sizeof (double)));
    b = sattn_size_add (b,
                        sattn_size_add (sattn_size_mul (T, n),
                                        sattn_size_mul (B, sizeof (uint64_t))));
  } else if (sattn_net_frame_reuse (m))
    b = sattn_size_add (b, sattn_size_mul (sattn_size_mul (cap, D + 2 * l0->dq +
                                                                    l0->dv),
                                           sizeof (float)));
  else
    b = sattn_size_add (b, sattn_size_mul (sattn_size_mul (cap, D),
                                           sizeof (double)));
  b = sattn_size_add (b, (STAGE + 1) * D * sizeof (double) +
                             STAGE * D * sizeof (float) +
                             net->d_frame * sizeof (float));
  b = sattn_size_add (b,
                      sattn_size_mul (B, sizeof (uint64_t) + sizeof (uint32_t) +
                                             sizeof (size_t)));
  if (sc->keep_weights)
    b = sattn_size_add (b, sattn_size_mul (sattn_size_mul (m->cfg.heads, bn),
                                           bn * sizeof (float)));
  b = sattn_size_add (b, sattn_net_block_bytes (m, bn, B, T));
  return T > 1 ? sattn_size_add (b, sattn_pool_bytes (T)) : b;
}

static SattnStatus
pw_fits (const SattnModel *m, const SattnStreamConfig *sc, char *err,
         size_t err_len)
{
  if (pw_bytes (m, sc) == SIZE_MAX)
    return sattn_fail (SATTN_E_NOMEM, err, err_len,
                       "window=%zu needs more memory than the address space "
                       "holds; use a smaller window",
                       sc->window);
  return SATTN_OK;
}

static size_t
pw_bytes_or_0 (const SattnModel *m, const SattnStreamConfig *sc)
{
  size_t b = pw_bytes (m, sc);
  return b == SIZE_MAX ? 0 : b;
}

static void
pw_destroy (void *e)
{
  SattnPw *s = e;
  if (s == NULL)
    return;
  free (s->ok);
  free (s->emb);
  free (s->xf);
  free (s->q0);
  free (s->k0);
  free (s->v0);
  free (s->xn);
  free (s->xs);
  free (s->ss);
  free (s->wxs);
  free (s->wss);
  free (s->wraw);
  free (s->wok);
  free (s->fok);
  free (s->fscr);
  free (s->fovf);
  free (s->raw);
  free (s->stage);
  free (s->ezero);
  free (s->zero);
  sattn_net_block_free (s->blk);
  sattn_pool_free (s->pool);
  free (s->ends);
  free (s->usable_in);
  free (s->bidx);
  free (s->fe->wkeep);
  s->fe->wkeep = NULL;
  free (s);
}

static void
pw_reset (void *e)
{
  SattnPw *s = e;
  memset (s->ok, 0, s->cap);
}

static size_t pw_row_floats (const SattnPw *s);

static void *
pw_create (SattnStream *fe, const SattnModel *m, SattnStatus *st)
{
  const SattnStreamConfig *sc = &fe->sc;
  const SattnNet *net = m->net;
  const size_t n = sc->window, D = net->d;
  *st = SATTN_E_NOMEM;
  if (pw_bytes (m, sc) == SIZE_MAX)
    return NULL;
  SattnPw *s = calloc (1, sizeof (*s));
  if (s == NULL)
    return NULL;
  s->fe = fe;
  s->m = m;
  s->net = net;
  s->n = n;
  s->bn = n + net->lead;
  s->h = sc->hop;
  s->max_windows = block_windows (n);
  s->cap = ring_slots (n, sc->hop);
  fe->row_floats = pw_row_floats (s);
  fe->wkeep_cols = fe->wkeep_max_rows = fe->wkeep_win_rows = s->bn;
  const unsigned T = sattn_resolve_threads (sc->threads);
  s->ok = malloc (s->cap);
  s->stage = malloc (STAGE * D * sizeof (double));
  s->ezero = malloc (D * sizeof (double));
  s->zero = calloc (net->d_frame, sizeof (float));
  s->ends = malloc (s->max_windows * sizeof (uint64_t));
  s->usable_in = malloc (s->max_windows * sizeof (uint32_t));
  s->bidx = malloc (s->max_windows * sizeof (size_t));
  if (sc->keep_weights)
    s->fe->wkeep = calloc (m->cfg.heads * s->bn * s->bn, sizeof (float));
  s->reuse = sattn_net_frame_reuse (m);
  s->raw = calloc (s->cap, sizeof (double));
  s->wraw = malloc (n * sizeof (double));
  s->wok = malloc (n);
  if (net->per_window) {
    const size_t F = net->d_frame;
    s->xs = calloc (s->cap * F, sizeof (double));
    s->ss = calloc (s->cap, sizeof (double));
    s->fscr_len = sattn_net_front_scratch (m, n);
    s->wxs = malloc (T * n * F * sizeof (double));
    s->wss = malloc (T * n * sizeof (double));
    s->fok = malloc (T * n);
    s->fscr = malloc (T * s->fscr_len * sizeof (double));
    s->fovf = calloc (s->max_windows, sizeof (uint64_t));
  } else if (s->reuse) {
    const SattnModel *l0 = net->layer[0];
    s->xf = calloc (s->cap * D, sizeof (float));
    s->q0 = calloc (s->cap * l0->dq, sizeof (float));
    s->k0 = calloc (s->cap * l0->dq, sizeof (float));
    s->v0 = calloc (s->cap * l0->dv, sizeof (float));
    s->xn = malloc (STAGE * D * sizeof (float));
  } else {
    s->emb = malloc (s->cap * D * sizeof (double));
  }
  if (T > 1)
    s->pool = sattn_pool_new (T);
  if (T <= 1 || s->pool != NULL)
    s->blk = sattn_net_block_new (m, s->bn, s->max_windows, s->pool);
  if (s->blk != NULL)
    s->blk->fast = sc->precision == SATTN_PRECISION_FAST;
  if (!s->ok || !s->stage || !s->ezero || !s->zero || !s->ends ||
      !s->usable_in || !s->bidx || !s->blk ||
      (sc->keep_weights && !s->fe->wkeep) || !s->raw || !s->wraw || !s->wok ||
      (net->per_window && (!s->xs || !s->ss || !s->wxs || !s->wss || !s->fok ||
                           !s->fscr || !s->fovf)) ||
      (!net->per_window && s->reuse &&
       (!s->xf || !s->q0 || !s->k0 || !s->v0 || !s->xn)) ||
      (!net->per_window && !s->reuse && !s->emb)) {
    pw_destroy (s);
    return NULL;
  }
  if (!net->per_window)
    sattn_net_embed (m, s->zero, 1, s->ezero, s->blk->fast);
  pw_reset (s);
  return s;
}

static size_t
pw_row_floats (const SattnPw *s)
{
  switch (s->fe->sc.output) {
    case SATTN_OUTPUT_WINDOW:
      return s->n * s->net->d;
    case SATTN_OUTPUT_CLASSES:
      return s->net->classes;
    default:
      return s->net->d;
  }
}

static size_t
pw_window_rows (const void *e, int drain)
{
  const SattnPw *s = e;
  if (drain && s->fe->total == s->fe->last_end)
    return 0;
  return s->n;
}

/* The slot of frame index f (f may be before the stream's first frame:
 * f + cap - n is taken for f - n, as windows ask). */
static inline size_t
slot_of (const SattnPw *s, uint64_t f)
{
  return (size_t) (f % s->cap);
}

/* A frame's fault under the frame rule, before any policy: flagged (or
 * no data), non-finite samples, or a front end that overflows (the
 * embedding er of D doubles, or the standardised sums). */
static SattnFrameFault
frame_fault (const SattnNet *net, const float *x, const uint8_t *valid,
             size_t i, const double *er, int sums_ok)
{
  const size_t F = net->d_frame, D = net->d;
  if (x == NULL || (valid != NULL && !valid[i]))
    return SATTN_FRAME_FLAGGED;
  if (!sattn_finite (x + i * F, F))
    return SATTN_FRAME_NONFINITE;
  if (!sums_ok)
    return SATTN_FRAME_OVERFLOW;
  for (size_t t = 0; er != NULL && t < D; t++)
    if (!isfinite (er[t]) || fabs (er[t]) > 3.4028234663852886e38)
      return SATTN_FRAME_OVERFLOW;
  return SATTN_FRAME_OK;
}

/* Slot `slot` of a per-window front end from frame x (NULL: unusable,
 * zeros); returns whether its sums are finite. */
static int
keep_frame (SattnPw *s, size_t slot, const float *x)
{
  const size_t F = s->net->d_frame;
  double *xs = s->xs + slot * F;
  if (x == NULL) {
    memset (xs, 0, F * sizeof (double));
    s->ss[slot] = 0.0;
    s->raw[slot] = 0.0;
    return 1;
  }
  return sattn_net_standardize (s->m, x, xs, &s->ss[slot], &s->raw[slot]);
}

/* The sum of squares of frame x (F floats), for the contract. */
static double
frame_raw (const float *x, size_t F)
{
  double r = 0.0;
  for (size_t f = 0; f < F; f++)
    r += (double) x[f] * (double) x[f];
  return r;
}

/* Store cnt frames (indices s->fe->total on, no wrap of the ring): the frame
 * rule and the policy, frames NULL = all flagged.  Returns the count
 * stored: fewer than cnt when the policy is ERROR and a frame has bad
 * data (recorded). */
static size_t
store_frames (SattnPw *s, const float *x, const uint8_t *valid, size_t cnt)
{
  const SattnNet *net = s->net;
  const size_t D = net->d, F = net->d_frame, slot0 = slot_of (s, s->fe->total);
  const int pw = net->per_window;
  double *e = s->stage;
  size_t i;

  if (x != NULL && !pw)
    sattn_net_embed (s->m, x, cnt, e, s->blk->fast);
  for (i = 0; i < cnt; i++) {
    const size_t slot = slot0 + i;
    double *er = pw ? NULL : e + i * D;
    int sums = 1;
    if (pw && x != NULL && (valid == NULL || valid[i]) &&
        sattn_finite (x + i * F, F))
      sums = keep_frame (s, slot, x + i * F);
    SattnFrameFault f = frame_fault (net, x, valid, i, er, sums);
    const int as_is = f == SATTN_FRAME_OK;
    if (f != SATTN_FRAME_OK && f != SATTN_FRAME_FLAGGED) {
      if (s->fe->sc.invalid_policy == SATTN_INVALID_ERROR) {
        s->fe->have_error = 1;
        s->fe->err_frame = s->fe->total + i;
        s->fe->err_fault = f;
        break;
      }
      s->fe->stats.invalid_frames++;
      if (f == SATTN_FRAME_OVERFLOW)
        s->fe->stats.overflow_frames++;
      if (s->fe->sc.invalid_policy == SATTN_INVALID_ZERO) {
        if (pw)
          keep_frame (s, slot, s->zero);
        else
          memcpy (er, s->ezero, D * sizeof (double));
        f = SATTN_FRAME_OK;
      }
    } else if (f == SATTN_FRAME_FLAGGED) {
      s->fe->stats.invalid_frames++;
    }
    s->ok[slot] = f == SATTN_FRAME_OK;
    if (pw) {
      if (!s->ok[slot])
        keep_frame (s, slot, NULL);
      continue;
    }
    s->raw[slot] = as_is ? frame_raw (x + i * F, F) : 0.0;
    if (s->reuse) {
      float *xr = s->xf + slot * D;
      for (size_t t = 0; t < D; t++)
        xr[t] = s->ok[slot] ? (float) er[t] : 0.0f;
    } else if (s->ok[slot]) {
      memcpy (s->emb + slot * D, er, D * sizeof (double));
    } else {
      memset (s->emb + slot * D, 0, D * sizeof (double));
    }
  }
  if (s->reuse && i > 0) {
    /* The first layer's part of these frames, one product (RoPE at their
     * absolute indices); zeros for unusable frames. */
    const SattnModel *l0 = net->layer[0];
    const size_t dq = l0->dq, dv = l0->dv;
    sattn_attend_project (l0, s->blk->fast, s->xf + slot0 * D, i, s->xn,
                          s->q0 + slot0 * dq, s->k0 + slot0 * dq,
                          s->v0 + slot0 * dv, s->fe->total - s->fe->pos0);
    for (size_t r = slot0; r < slot0 + i; r++) {
      if (s->ok[r])
        continue;
      memset (s->q0 + r * dq, 0, dq * sizeof (float));
      memset (s->k0 + r * dq, 0, dq * sizeof (float));
      memset (s->v0 + r * dv, 0, dv * sizeof (float));
    }
  }
  s->fe->total += i;
  if (s->fe->sc.collect_stats)
    s->fe->stats.frames += i;
  return i;
}

/* Window w's rows from frames kept per frame (no per-window front end):
 * the embedded frames plus their positions, or the first layer's inputs
 * and projections kept (reuse), into block window nb.  Returns the usable
 * frames. */
static uint32_t
gather_kept (SattnPw *s, uint64_t first, size_t nb)
{
  const SattnNet *net = s->net;
  const size_t n = s->n, D = net->d;
  SattnNetBlock *b = s->blk;
  float *x = b->x + nb * n * D;
  uint8_t *kok = b->kok + nb * n;
  uint32_t usable_in = 0;
  for (size_t i = 0; i < n; i++) {
    const size_t slot = slot_of (s, first + i);
    float *xr = x + i * D;
    kok[i] = s->ok[slot];
    if (!kok[i]) {
      memset (xr, 0, D * sizeof (float));
      continue;
    }
    if (s->reuse) {
      memcpy (xr, s->xf + slot * D, D * sizeof (float));
    } else {
      const double *e = s->emb + slot * D, *p = net->pos + i * D;
      for (size_t t = 0; t < D; t++)
        xr[t] = (float) (e[t] + p[t]);
      if (!sattn_finite (xr, D)) {
        /* A position that overflows the row: the row is unusable. */
        memset (xr, 0, D * sizeof (float));
        kok[i] = 0;
        s->fe->stats.overflow_frames++;
        continue;
      }
    }
    usable_in++;
  }
  if (usable_in > 0 && s->reuse) {
    /* The first layer's projections of the window's frames, kept. */
    const SattnModel *l0 = net->layer[0];
    const size_t dq = l0->dq, dv = l0->dv;
    for (size_t i = 0; i < n; i++) {
      const size_t slot = slot_of (s, first + i), r = nb * n + i;
      memcpy (b->q + r * dq, s->q0 + slot * dq, dq * sizeof (float));
      memcpy (b->k + r * dq, s->k0 + slot * dq, dq * sizeof (float));
      memcpy (b->v + r * dv, s->v0 + slot * dv, dv * sizeof (float));
    }
  }
  return usable_in;
}

/* Window w's rows through a per-window front end (net->per_window) into
 * block window nb: its frames gathered oldest first, then
 * sattn_net_front_window.  Returns the usable frame rows. */
static uint32_t
gather_window (SattnPw *s, uint64_t first, size_t nb, unsigned t,
               uint64_t *overflow)
{
  const SattnNet *net = s->net;
  const size_t n = s->n, F = net->d_frame, bn = s->bn;
  SattnNetBlock *b = s->blk;
  double *wxs = s->wxs + t * n * F, *wss = s->wss + t * n;
  uint8_t *wok = s->fok + t * n;
  for (size_t i = 0; i < n; i++) {
    const size_t slot = slot_of (s, first + i);
    /* an unusable frame is zeros (a reset or a skip clears ok only) */
    wok[i] = s->ok[slot];
    if (wok[i])
      memcpy (wxs + i * F, s->xs + slot * F, F * sizeof (double));
    else
      memset (wxs + i * F, 0, F * sizeof (double));
    wss[i] = wok[i] ? s->ss[slot] : 0.0;
  }
  return (uint32_t) sattn_net_front_window (s->m, wxs, wss, wok, n,
                                            b->x + nb * bn * net->d,
                                            b->kok + nb * bn,
                                            s->fscr + t * s->fscr_len, overflow,
                                            b->fast);
}

/* The front ends of a block's windows, one task each (window w into
 * block slot w; emit_windows then closes the gaps windows without a
 * usable row leave). */
typedef struct {
  SattnPw *s;
} FrontJob;

static void
front_task (void *ctx, size_t w, unsigned worker)
{
  SattnPw *s = ((const FrontJob *) ctx)->s;
  s->fovf[w] = 0;
  s->usable_in[w] = gather_window (s, s->ends[w] + s->cap - s->n, w, worker,
                                   &s->fovf[w]);
}

/* A row's contract check from its window's input RMS and pooled z. */
static void
check_row (const SattnNet *net, double rms, double z, int valid,
           SattnRowCheck *c)
{
  const SattnModelContract *k = &net->contract;
  memset (c, 0, sizeof (*c));
  c->input_rms = (float) rms;
  c->pooled_z = valid ? (float) z : NAN;
  if (!isnan (rms) && (k->recorded & SATTN_CONTRACT_INPUT_RMS)) {
    if (rms < k->input_rms_lo)
      c->outside |= SATTN_OUTSIDE_RMS_LOW;
    if (rms > k->input_rms_hi)
      c->outside |= SATTN_OUTSIDE_RMS_HIGH;
  }
  if (valid && !isnan (z) && (k->recorded & SATTN_CONTRACT_POOLED_Z) &&
      z > k->pooled_z_max)
    c->outside |= SATTN_OUTSIDE_FEATURES;
  c->in_contract = c->outside == 0;
}

/* The input RMS of the window starting at frame first (the contract's). */
static double
window_rms (SattnPw *s, uint64_t first)
{
  for (size_t i = 0; i < s->n; i++) {
    const size_t slot = slot_of (s, first + i);
    s->wraw[i] = s->raw[slot];
    s->wok[i] = s->ok[slot];
  }
  return sattn_net_window_rms (s->wraw, s->wok, s->n, s->net->d_frame);
}

/* Output row o (row_floats) of block window k (SIZE_MAX: none) with
 * `usable` usable rows, in the stream's output mode; returns whether it
 * is valid. */
static int
write_row (SattnPw *s, const float *rows, size_t k, size_t usable, float *o)
{
  const SattnNet *net = s->net;
  const size_t n = s->n, D = net->d, bn = s->bn;
  SattnNetBlock *b = s->blk;
  int valid = 0;
  switch (s->fe->sc.output) {
    case SATTN_OUTPUT_WINDOW:
      /* the frames' rows (a CLS row is not a frame's) */
      if (k != SIZE_MAX)
        memcpy (o, rows + (k * bn + net->lead) * D, n * D * sizeof (float));
      else
        memset (o, 0, n * D * sizeof (float));
      valid = usable > 0;
      break;
    case SATTN_OUTPUT_CLASSES:
      if (usable > 0)
        valid = sattn_net_classify (s->m, b, b->pooled + k * D, o);
      else
        memset (o, 0, net->classes * sizeof (float));
      if (usable > 0 && !valid)
        s->fe->stats.overflow_rows++;
      break;
    default:
      for (size_t t = 0; t < D; t++)
        o[t] = usable > 0 ? (float) b->pooled[k * D + t] : 0.0f;
      valid = usable > 0;
      break;
  }
  return valid;
}

/* The windows ending at s->ends[0, nw) (ascending, each at most
 * s->fe->total, the window before each ending at s->fe->last_end or at the
 * previous one): one output row each, computed as one block. */
static void
emit_windows (SattnPw *s, size_t nw, float *out, SattnRowInfo *info,
              SattnRowCheck *checks)
{
  const SattnNet *net = s->net;
  const size_t n = s->n, bn = s->bn, rf = s->fe->row_floats;
  SattnNetBlock *b = s->blk;
  SattnStats *stats = s->fe->sc.collect_stats ? &s->fe->stats : NULL;
  double rms[BLOCK_WINDOWS];
  size_t nb = 0;

  /* Each window's rows, oldest first, into the block (windows without a
   * usable row stay out of it).  A front end that depends on the window
   * runs per window on the pool's threads, each window into its own
   * slot; the slots of windows without a usable row are then closed. */
  if (net->per_window) {
    FrontJob fj = { s };
    sattn_pool_run (nw > 1 ? s->pool : NULL, nw, front_task, &fj);
  }
  for (size_t w = 0; w < nw; w++) {
    const uint64_t first = s->ends[w] + s->cap - n;
    rms[w] = checks != NULL ? window_rms (s, first) : NAN;
    uint32_t usable_in;
    if (net->per_window) {
      usable_in = s->usable_in[w];
      s->fe->stats.overflow_frames += s->fovf[w];
      if (usable_in > 0 && nb != w) {
        memmove (b->x + nb * bn * net->d, b->x + w * bn * net->d,
                 bn * net->d * sizeof (float));
        memmove (b->kok + nb * bn, b->kok + w * bn, bn);
      }
    } else {
      usable_in = gather_kept (s, first, nb);
    }
    s->usable_in[w] = usable_in;
    s->bidx[w] = usable_in > 0 ? nb : SIZE_MAX;
    if (usable_in == 0)
      continue;
    if (stats)
      sattn_stats_clear (&b->stats[nb]);
    nb++;
  }

  /* classes: the pooling the head was trained with; mean / last: the one
   * asked for. */
  const SattnPooling pool = s->fe->sc.output == SATTN_OUTPUT_MEAN
                                ? SATTN_POOLING_MEAN
                            : s->fe->sc.output == SATTN_OUTPUT_LAST
                                ? SATTN_POOLING_LAST
                                : net->pooling;
  float *rows = NULL;
  if (nb > 0)
    sattn_net_block_run (s->m, b, nb, s->reuse, s->fe->wkeep, s->bidx[nw - 1],
                         stats != NULL, pool, &rows);
  if (s->fe->wkeep && s->bidx[nw - 1] == SIZE_MAX)
    memset (s->fe->wkeep, 0, s->m->cfg.heads * bn * bn * sizeof (float));

  for (size_t w = 0; w < nw; w++) {
    const size_t k = s->bidx[w];
    const uint32_t usable_in = s->usable_in[w];
    const size_t usable = k != SIZE_MAX ? b->usable[k] : 0;
    if (k != SIZE_MAX) {
      if (stats)
        sattn_stats_merge (stats, &b->stats[k]);
      if (usable < usable_in)
        s->fe->stats.overflow_rows += usable_in - usable;
    }
    const int valid = write_row (s, rows, k, usable, out + w * rf);
    if (checks)
      check_row (net, rms[w], k != SIZE_MAX ? b->z[k] : NAN,
                 valid && usable > 0, checks + w);
    if (info) {
      SattnRowInfo *r = info + w;
      memset (r, 0, sizeof (*r));
      r->first = s->fe->last_end;
      r->n_frames = (uint32_t) (s->ends[w] - s->fe->last_end);
      r->valid = (uint8_t) valid;
      r->window_end = s->ends[w];
      r->valid_keys = usable_in;
      r->masked_keys = (uint32_t) n - usable_in;
    }
    if (stats) {
      stats->windows++;
      stats->masked_keys += n - usable_in;
    }
    s->fe->last_end = s->ends[w];
    s->fe->next_window = sattn_schedule_next (s->ends[w], s->h);
  }
  s->fe->wkeep_rows = bn;
  s->fe->have_window = 1;
}

/* Store n_frames frames (frames NULL: all flagged) and emit the windows
 * they complete, block by block: each block's frames stored (STAGE at a
 * time), then its windows.  *produced counts the rows written to out. */
static SattnStatus
feed (SattnPw *s, const float *frames, const uint8_t *valid, size_t n_frames,
      float *out, SattnRowInfo *info, SattnRowCheck *checks, size_t *produced)
{
  const size_t F = s->net->d_frame, rf = s->fe->row_floats;
  while (n_frames > 0) {
    /* Up to the end of the max_windows-th window due, or all frames.
     * The ring holds the frames of max_windows windows: frames past the
     * last of them would overwrite the first one's. */
    uint64_t w = sattn_schedule_due (s->fe->next_window, s->h,
                                     s->fe->total + n_frames);
    size_t cnt = n_frames;
    if (w >= s->max_windows)
      cnt = (size_t) (sattn_schedule_last (s->fe->next_window, s->h,
                                           s->max_windows) -
                      s->fe->total);
    size_t done = 0;
    int stopped = 0;
    while (done < cnt && !stopped) {
      size_t room = s->cap - slot_of (s, s->fe->total);
      size_t k = cnt - done < STAGE ? cnt - done : STAGE;
      k = k < room ? k : room;
      size_t got = store_frames (s, frames ? frames + done * F : NULL,
                                 valid ? valid + done : NULL, k);
      done += got;
      stopped = got < k;
    }
    size_t nw = (size_t) sattn_schedule_due (s->fe->next_window, s->h,
                                             s->fe->total);
    if (nw > 0) {
      for (size_t i = 0; i < nw; i++)
        s->ends[i] = sattn_schedule_last (s->fe->next_window, s->h, i + 1);
      emit_windows (s, nw, out + *produced * rf, info ? info + *produced : NULL,
                    checks ? checks + *produced : NULL);
      *produced += nw;
    }
    if (stopped)
      return SATTN_E_NONFINITE;
    if (frames)
      frames += cnt * F;
    if (valid)
      valid += cnt;
    n_frames -= cnt;
  }
  return SATTN_OK;
}

static SattnStatus
pw_push (void *e, const float *frames, size_t n_frames, const uint8_t *valid,
         float *out, SattnRowInfo *info, SattnRowCheck *checks, size_t *n_rows)
{
  size_t produced = 0;
  SattnStatus st = feed (e, frames, valid, n_frames, out, info, checks,
                         &produced);
  *n_rows = produced;
  return st;
}

static size_t
pw_drain (void *e, float *out, SattnRowInfo *info, SattnRowCheck *checks)
{
  SattnPw *s = e;
  if (s->fe->total == s->fe->last_end)
    return 0;
  s->ends[0] = s->fe->total;
  emit_windows (s, 1, out, info, checks);
  return 1;
}

/* Summed in double, head by head for each weight. */
static void
pw_weights_mean (const void *e, float *out)
{
  const SattnPw *s = e;
  const size_t n = s->bn, H = s->m->cfg.heads;
  const float *wkeep = s->fe->wkeep;
  for (size_t i = 0; i < n * n; i++) {
    double acc = 0.0;
    for (size_t h = 0; h < H; h++)
      acc += wkeep[h * n * n + i];
    out[i] = (float) (acc / (double) H);
  }
}

static uint64_t
pw_skip_lead (const void *e)
{
  const SattnPw *s = e;
  for (size_t i = s->n; i > 0; i--)
    if (s->ok[slot_of (s, s->fe->total + s->cap - s->n + i - 1)])
      return i;
  return 0;
}

/* cnt flagged frames, and the windows they complete. */
static size_t
pw_push_masked (void *e, size_t cnt, float *out, SattnRowInfo *info)
{
  size_t produced = 0;
  feed (e, NULL, NULL, cnt, out, info, NULL, &produced);
  return produced;
}

/* Every slot: after the lead no frame of a later window is usable, and
 * the ring holds no other. */
static void
pw_forget (void *e, uint64_t end, uint64_t cnt)
{
  SattnPw *s = e;
  (void) end;
  (void) cnt;
  memset (s->ok, 0, s->cap);
}

const SattnExecOps sattn_exec_whole = {
  .name = "whole",
  .check = pw_check,
  .fits = pw_fits,
  .bytes = pw_bytes_or_0,
  .create = pw_create,
  .destroy = pw_destroy,
  .reset = pw_reset,
  .push = pw_push,
  .drain = pw_drain,
  .window_rows = pw_window_rows,
  .skip_lead = pw_skip_lead,
  .push_masked = pw_push_masked,
  .forget = pw_forget,
  .weights_mean = pw_weights_mean,
};
