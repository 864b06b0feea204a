/* Streaming (sattn_stream_*) against one-shot (sattn_attend).
 *
 * For each model, geometry (window n, hop h), output mode and start policy,
 * frames are pushed in random chunk sizes - with frames flagged invalid,
 * frames containing NaN/Inf, a reset part-way and a drain at the end - and
 * every output row is compared with the row computed independently here:
 * each window is built explicitly (the last n frames; positions before the
 * stream start are padding with key_valid = query_valid = 0; invalid and
 * non-finite frames likewise, their data zeroed) and passed to
 * sattn_attend, whose model applies causal / lookback.
 *
 * The schedule simulated here is the one the header and DESIGN.md state:
 *   - pad: a window every h frames from the first hop (ends at h, 2h, ...);
 *     wait: the first window when n frames are in, then every h frames;
 *   - frames mode: a window emits one row per frame not yet accounted for
 *     (h rows; all n rows for the first window under wait);
 *     info = { frame index, 1, frame valid };
 *   - window / mean / last: one row per window, accounting for the frames
 *     since the previous window: info = { first such frame, their count,
 *     valid }, valid = some query row of the window valid (window, mean)
 *     or the last frame valid (last); mean = mean of the valid rows;
 *   - drain: if frames arrived since the last window, one window ending at
 *     the last frame, emitting as above;
 *   - reset: everything pending is dropped, the next frame is frame 0.
 *
 * Bounds: stream vs one-shot max |diff| <= 1e-5 * (1 + max |expected|);
 * both vs the float64 reference NMSE <= 1e-10.  Measured figures printed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "reference.h"
#include "testutil.h"

#define STREAM_REL_BOUND 1e-5
#define WEIGHT_BOUND 1e-5
#define NMSE_BOUND 1e-10

static const char *mode_names[] = { "frames", "window", "mean", "last" };
static const char *start_names[] = { "pad", "wait" };

static TuWorst worst_mode[4], worst_all, worst_ref;

/* ------------------------------------------------------------ simulator */

typedef struct {
  const Fixture *f;
  size_t n, h, d, d_out, nk, row_floats;
  SattnOutputMode mode;
  SattnStartPolicy start;
  const float *frames;  /* this segment's frames, from frame 0 */
  const uint8_t *valid; /* may be NULL */
  size_t t, last_end, next;
  /* expected rows */
  float *rows;
  SattnRowInfo *info;
  size_t n_rows, cap;
  /* counters */
  size_t windows, masked_keys;
  /* the last window: one-shot weights (heads × n × nk) */
  float *last_w;
  int have_last;
  /* scratch */
  float *blk, *out, *w;
  double *rout;
  uint8_t *ok;
  TuErr *ref_err;
} Sim;

static int
frame_ok (const Sim *s, size_t idx)
{
  if (s->valid && !s->valid[idx])
    return 0;
  for (size_t k = 0; k < s->d; k++)
    if (!isfinite (s->frames[idx * s->d + k]))
      return 0;
  return 1;
}

static void
sim_init (Sim *s, const Fixture *f, size_t n, size_t h, SattnOutputMode mode,
          SattnStartPolicy start, TuErr *ref_err)
{
  memset (s, 0, sizeof *s);
  s->f = f;
  s->n = n;
  s->h = h;
  s->d = f->ref.d_model;
  s->d_out = f->ref.d_out;
  s->nk = n + ref_extra_keys (&f->ref);
  s->mode = mode;
  s->start = start;
  s->row_floats = mode == SATTN_OUTPUT_WINDOW ? n * s->d_out : s->d_out;
  s->next = start == SATTN_START_PAD ? h : n;
  s->blk = malloc (n * s->d * sizeof (float));
  s->out = malloc (n * s->d_out * sizeof (float));
  s->w = malloc (f->ref.heads * n * s->nk * sizeof (float));
  s->last_w = malloc (f->ref.heads * n * s->nk * sizeof (float));
  s->rout = malloc (n * s->d_out * sizeof (double));
  s->ok = malloc (n);
  s->ref_err = ref_err;
  if (!s->blk || !s->out || !s->w || !s->last_w || !s->rout || !s->ok)
    abort ();
}

static void
sim_segment (Sim *s, const float *frames, const uint8_t *valid)
{
  s->frames = frames;
  s->valid = valid;
  s->t = 0;
  s->last_end = 0;
  s->next = s->start == SATTN_START_PAD ? s->h : s->n;
  s->have_last = 0;
}

static void
sim_free (Sim *s)
{
  free (s->rows);
  free (s->info);
  free (s->blk);
  free (s->out);
  free (s->w);
  free (s->last_w);
  free (s->rout);
  free (s->ok);
}

static float *
sim_new_row (Sim *s, uint64_t first, uint32_t count, int valid)
{
  if (s->n_rows == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->rows = realloc (s->rows, s->cap * s->row_floats * sizeof (float));
    s->info = realloc (s->info, s->cap * sizeof (SattnRowInfo));
    if (!s->rows || !s->info)
      abort ();
  }
  SattnRowInfo *in = &s->info[s->n_rows];
  memset (in, 0, sizeof *in);
  in->first = first;
  in->n_frames = count;
  in->valid = (uint8_t) (valid != 0);
  return s->rows + s->n_rows++ * s->row_floats;
}

/* Compute the window of frames [e - n, e) and emit its rows. */
static void
sim_window (Sim *s, size_t e)
{
  const size_t n = s->n, d = s->d, d_out = s->d_out;
  size_t nvalid = 0;
  for (size_t p = 0; p < n; p++) {
    int ok = 0;
    if (e + p >= n) {
      size_t idx = e + p - n;
      ok = frame_ok (s, idx);
      if (ok)
        memcpy (s->blk + p * d, s->frames + idx * d, d * sizeof (float));
    }
    if (!ok)
      memset (s->blk + p * d, 0, d * sizeof (float));
    s->ok[p] = (uint8_t) ok;
    nvalid += (size_t) ok;
    s->masked_keys += (size_t) !ok;
  }
  SattnMask mask = { s->ok, s->ok, NULL };
  SattnStatus st = sattn_attend (s->f->model, s->blk, n, &mask, s->out, s->w,
                                 NULL);
  tu_check (st == SATTN_OK, "expected window: sattn_attend failed (%s)",
            sattn_status_string (st));
  ref_attend (&s->f->ref, s->blk, n, s->ok, s->ok, NULL, s->rout, NULL, NULL);
  tu_err_add_f (s->ref_err, s->out, s->rout, n * d_out);
  memcpy (s->last_w, s->w, s->f->ref.heads * n * s->nk * sizeof (float));
  s->have_last = 1;
  s->windows++;

  const size_t first = s->last_end, count = e - s->last_end;
  if (!tu_check (count <= n || s->mode != SATTN_OUTPUT_FRAMES,
                 "simulator: %zu frames to account for in one window", count))
    return;
  switch (s->mode) {
    case SATTN_OUTPUT_CLASSES:
      /* Whole models only: not simulated here (tests/python). */
      break;
    case SATTN_OUTPUT_FRAMES:
      for (size_t i = first; i < e; i++) {
        size_t p = i + n - e;
        float *r = sim_new_row (s, i, 1, s->ok[p]);
        memcpy (r, s->out + p * d_out, d_out * sizeof (float));
      }
      break;
    case SATTN_OUTPUT_WINDOW: {
      float *r = sim_new_row (s, first, (uint32_t) count, nvalid > 0);
      memcpy (r, s->out, n * d_out * sizeof (float));
      break;
    }
    case SATTN_OUTPUT_MEAN: {
      float *r = sim_new_row (s, first, (uint32_t) count, nvalid > 0);
      for (size_t o = 0; o < d_out; o++) {
        double acc = 0.0;
        for (size_t p = 0; p < n; p++)
          if (s->ok[p])
            acc += s->out[p * d_out + o];
        r[o] = nvalid ? (float) (acc / (double) nvalid) : 0.0f;
      }
      break;
    }
    case SATTN_OUTPUT_LAST: {
      float *r = sim_new_row (s, first, (uint32_t) count, s->ok[n - 1]);
      memcpy (r, s->out + (n - 1) * d_out, d_out * sizeof (float));
      break;
    }
  }
  s->last_end = e;
  s->next = e + s->h;
}

static void
sim_push (Sim *s, size_t count)
{
  for (size_t k = 0; k < count; k++) {
    s->t++;
    if (s->t == s->next)
      sim_window (s, s->t);
  }
}

static void
sim_drain (Sim *s)
{
  if (s->t > s->last_end)
    sim_window (s, s->t);
}

/* ------------------------------------------------------------ test data */

typedef struct {
  float *x;
  uint8_t *valid; /* NULL when every frame is flagged valid */
  size_t T;
} Segment;

static void
make_segment (TuRng *rng, Segment *g, size_t T, size_t d, size_t n,
              int flags_invalid, int nonfinite)
{
  g->T = T;
  g->x = malloc ((T ? T : 1) * d * sizeof (float));
  g->valid = NULL;
  if (!g->x)
    abort ();
  tu_fill_normal (rng, g->x, T * d, 1.0);
  if (flags_invalid) {
    g->valid = malloc (T ? T : 1);
    if (!g->valid)
      abort ();
    for (size_t i = 0; i < T; i++)
      g->valid[i] = tu_rng_uniform (rng) >= 0.12;
    /* a run longer than a window: whole windows without a valid frame */
    if (T > 2 * n + 8)
      for (size_t i = T / 3; i < T / 3 + n + 2 && i < T; i++)
        g->valid[i] = 0;
  }
  if (nonfinite) {
    for (size_t i = 0; i < T; i++) {
      double u = tu_rng_uniform (rng);
      if (u < 0.03)
        for (size_t k = 0; k < d; k++)
          g->x[i * d + k] = NAN;
      else if (u < 0.05)
        g->x[i * d + tu_rng_range (rng, 0, d - 1)] = NAN;
      else if (u < 0.07)
        g->x[i * d + tu_rng_range (rng, 0, d - 1)] = (tu_rng_u64 (rng) & 1)
                                                         ? INFINITY
                                                         : -INFINITY;
    }
  }
}

static void
free_segment (Segment *g)
{
  free (g->x);
  free (g->valid);
}

/* ------------------------------------------------------------- the runs */

typedef struct {
  const char *name;
  size_t d_model, heads;
  unsigned flags;
  size_t lookback;
} ModelSpec;

typedef struct {
  float *rows;
  SattnRowInfo *info;
  size_t n_rows, cap, row_floats;
} Got;

static void
got_append (Got *g, const float *rows, const SattnRowInfo *info, size_t nr)
{
  if (nr == 0)
    return;
  if (g->n_rows + nr > g->cap) {
    while (g->n_rows + nr > g->cap)
      g->cap = g->cap ? 2 * g->cap : 64;
    g->rows = realloc (g->rows, g->cap * g->row_floats * sizeof (float));
    g->info = realloc (g->info, g->cap * sizeof (SattnRowInfo));
    if (!g->rows || !g->info)
      abort ();
  }
  memcpy (g->rows + g->n_rows * g->row_floats, rows,
          nr * g->row_floats * sizeof (float));
  memcpy (g->info + g->n_rows, info, nr * sizeof (SattnRowInfo));
  g->n_rows += nr;
}

/* Check sattn_stream_last_weights against the simulated last window. */
static void
check_last_weights (SattnStream *st, const Sim *sim, const Fixture *f)
{
  const size_t H = f->ref.heads, n = sim->n, nk = sim->nk;
  size_t rows = 0, cols = 0;
  SattnStatus s = sattn_stream_last_weights (st, 0, NULL, &rows, &cols);
  if (!sim->have_last) {
    tu_check (s == SATTN_E_INVAL,
              "last_weights before any window: %s, want "
              "SATTN_E_INVAL",
              sattn_status_string (s));
    return;
  }
  if (!TU_CHECK_STATUS (s, SATTN_OK, "sattn_stream_last_weights (size)"))
    return;
  tu_check (cols == nk, "last_weights cols %zu, want %zu", cols, nk);
  tu_check (rows >= 1 && rows <= n, "last_weights rows %zu, want 1..%zu", rows,
            n);
  if (cols != nk || rows < 1 || rows > n)
    return;
  float *w = malloc (rows * cols * sizeof *w);
  if (!w)
    abort ();
  double maxd = 0.0;
  for (int head = -1; head < (int) H; head++) {
    size_t r2 = 0, c2 = 0;
    s = sattn_stream_last_weights (st, head, w, &r2, &c2);
    if (!TU_CHECK_STATUS (s, SATTN_OK, "sattn_stream_last_weights"))
      break;
    tu_check (r2 == rows && c2 == cols, "last_weights shape changed");
    /* the computed query rows are the window's last `rows` rows */
    for (size_t i = 0; i < rows; i++) {
      size_t p = n - rows + i;
      for (size_t j = 0; j < nk; j++) {
        double want = 0.0;
        if (head < 0) {
          for (size_t h = 0; h < H; h++)
            want += sim->last_w[(h * n + p) * nk + j];
          want /= (double) H;
        } else {
          want = sim->last_w[((size_t) head * n + p) * nk + j];
        }
        double dd = fabs (w[i * nk + j] - want);
        if (!(dd <= maxd))
          maxd = dd;
      }
    }
  }
  tu_check (maxd <= WEIGHT_BOUND,
            "last_weights differ from the one-shot "
            "weights by %.3e",
            maxd);
  free (w);
}

static void
run_stream (TuRng *rng, const ModelSpec *ms, size_t n, size_t h,
            SattnOutputMode mode, SattnStartPolicy start)
{
  tu_case_begin ("stream %s n=%zu hop=%zu %s %s", ms->name, n, h,
                 mode_names[mode], start_names[start]);
  Fixture f;
  if (!TU_CHECK_STATUS (fx_build (&f, rng, ms->d_model, ms->heads, ms->flags,
                                  ms->lookback),
                        SATTN_OK, "sattn_model_new")) {
    tu_case_end (NULL);
    return;
  }
  const size_t d = ms->d_model;
  int keep_w = (int) (tu_rng_u64 (rng) & 1);
  SattnStreamConfig sc = { .window = n,
                           .hop = h,
                           .output = mode,
                           .start = start,
                           .collect_stats = 1,
                           .keep_weights = keep_w,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = fx_threads (),
                           .precision = fx_precision () };
  SattnStatus st = SATTN_E_INVAL;
  SattnStream *s = sattn_stream_new (f.model, &sc, &st);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_new") || !s) {
    sattn_stream_free (s);
    fx_free (&f);
    tu_case_end (NULL);
    return;
  }
  const size_t row_floats = sattn_stream_row_floats (s);
  tu_check (row_floats == (mode == SATTN_OUTPUT_WINDOW ? n : 1) * f.ref.d_out,
            "row_floats %zu", row_floats);

  /* segment A, reset, segment B, drain */
  int with_flags = (int) (tu_rng_u64 (rng) % 3 != 0);
  int with_nan = (int) (tu_rng_u64 (rng) % 3 != 0);
  int drain_before_reset = (int) (tu_rng_u64 (rng) & 1);
  Segment seg[2];
  make_segment (rng, &seg[0], tu_rng_range (rng, 0, 2 * n + 7), d, n,
                with_flags, with_nan);
  make_segment (rng, &seg[1], tu_rng_range (rng, 1, 4 * n + 40), d, n,
                with_flags, with_nan);

  TuErr ref_err, diff;
  tu_err_clear (&ref_err);
  tu_err_clear (&diff);
  Sim sim;
  sim_init (&sim, &f, n, h, mode, start, &ref_err);
  Got got = { NULL, NULL, 0, 0, row_floats };
  size_t total_frames = 0, invalid_frames = 0, space_checks = 0;
  size_t max_chunk = 2 * n + 3;

  for (int sgi = 0; sgi < 2; sgi++) {
    Segment *g = &seg[sgi];
    sim_segment (&sim, g->x, g->valid);
    for (size_t i = 0; i < g->T; i++)
      invalid_frames += !frame_ok (&sim, i);
    total_frames += g->T;
    size_t pos = 0;
    while (pos < g->T) {
      size_t c;
      uint64_t u = tu_rng_u64 (rng) % 10;
      if (u == 0)
        c = 1;
      else if (u == 1)
        c = g->T - pos;
      else
        c = tu_rng_range (rng, 1, max_chunk);
      if (c > g->T - pos)
        c = g->T - pos;
      size_t maxr = sattn_stream_max_rows (s, c);
      float *out = malloc ((maxr ? maxr : 1) * row_floats * sizeof *out);
      SattnRowInfo *info = malloc ((maxr ? maxr : 1) * sizeof *info);
      if (!out || !info)
        abort ();
      size_t nr = 12345;
      const uint8_t *vp = g->valid ? g->valid + pos : NULL;
      if (maxr > 0 && (tu_rng_u64 (rng) & 3) == 0) {
        size_t pend = sattn_stream_pending (s);
        st = sattn_stream_push (s, g->x + pos * d, c, vp, out, maxr - 1, info,
                                &nr);
        TU_CHECK_STATUS (st, SATTN_E_SPACE, "push with out_rows too small");
        tu_check (sattn_stream_pending (s) == pend,
                  "a push failing with SATTN_E_SPACE consumed frames");
        space_checks++;
      }
      st = sattn_stream_push (s, g->x + pos * d, c, vp, out, maxr, info, &nr);
      TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_push");
      if (st == SATTN_OK) {
        tu_check (nr <= maxr, "push wrote %zu rows, max_rows said %zu", nr,
                  maxr);
        if (nr <= maxr)
          got_append (&got, out, info, nr);
      }
      free (out);
      free (info);
      sim_push (&sim, c);
      pos += c;
      tu_check (sattn_stream_pending (s) == sim.t - sim.last_end,
                "pending %zu after frame %zu, want %zu",
                sattn_stream_pending (s), sim.t, sim.t - sim.last_end);
      if (keep_w)
        check_last_weights (s, &sim, &f);
      if (tu_case_failed ())
        break;
    }
    if (sgi == 0 && !drain_before_reset) {
      sattn_stream_reset (s);
      continue;
    }
    /* drain (segment B always; segment A sometimes, then reset) */
    size_t maxr = sattn_stream_max_rows (s, 0);
    float *out = malloc ((maxr ? maxr : 1) * row_floats * sizeof *out);
    SattnRowInfo *info = malloc ((maxr ? maxr : 1) * sizeof *info);
    if (!out || !info)
      abort ();
    size_t nr = 12345;
    if (maxr > 0) {
      st = sattn_stream_drain (s, out, maxr - 1, info, &nr);
      TU_CHECK_STATUS (st, SATTN_E_SPACE, "drain with out_rows too small");
      space_checks++;
    }
    st = sattn_stream_drain (s, out, maxr, info, &nr);
    TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_drain");
    if (st == SATTN_OK) {
      tu_check (nr <= maxr, "drain wrote %zu rows, max_rows said %zu", nr,
                maxr);
      if (nr <= maxr)
        got_append (&got, out, info, nr);
    }
    free (out);
    free (info);
    sim_drain (&sim);
    tu_check (sattn_stream_pending (s) == 0, "pending %zu after drain",
              sattn_stream_pending (s));
    if (keep_w)
      check_last_weights (s, &sim, &f);
    if (sgi == 0)
      sattn_stream_reset (s);
  }

  /* rows and infos */
  tu_check (got.n_rows == sim.n_rows, "stream gave %zu rows, want %zu",
            got.n_rows, sim.n_rows);
  size_t nr = got.n_rows < sim.n_rows ? got.n_rows : sim.n_rows;
  size_t bad_info = 0;
  for (size_t r = 0; r < nr; r++) {
    const SattnRowInfo *a = &got.info[r], *b = &sim.info[r];
    if (a->first != b->first || a->n_frames != b->n_frames ||
        a->valid != b->valid) {
      if (bad_info++ < 3)
        tu_check (0,
                  "row %zu info {first %llu, n_frames %u, valid %u}, "
                  "want {%llu, %u, %u}",
                  r, (unsigned long long) a->first, a->n_frames, a->valid,
                  (unsigned long long) b->first, b->n_frames, b->valid);
    }
    if (!b->valid) {
      int z = 1;
      for (size_t k = 0; k < row_floats; k++)
        z &= got.rows[r * row_floats + k] == 0.0f;
      if (!z && bad_info++ < 3)
        tu_check (0, "row %zu is marked invalid but is not zero", r);
    }
  }
  tu_check (bad_info == 0, "%zu rows with wrong info", bad_info);
  tu_err_add_ff (&diff, got.rows, sim.rows, nr * row_floats);
  double bound = STREAM_REL_BOUND * (1.0 + diff.max_ref);
  tu_check (diff.nonfinite == 0, "%zu non-finite stream outputs",
            diff.nonfinite);
  tu_check (diff.max_abs <= bound, "stream vs one-shot max-abs %.3e > %.3e",
            diff.max_abs, bound);
  double ref_nmse = tu_err_nmse (&ref_err);
  tu_check (ref_nmse <= NMSE_BOUND,
            "one-shot windows vs float64 reference "
            "NMSE %.3e",
            ref_nmse);
  if (mode == SATTN_OUTPUT_FRAMES) {
    /* each frame of segment B exactly once, in order, after the drain */
    size_t tail = got.n_rows >= seg[1].T ? got.n_rows - seg[1].T : 0;
    int once = got.n_rows >= seg[1].T;
    for (size_t i = 0; once && i < seg[1].T; i++)
      once = got.info[tail + i].first == i && got.info[tail + i].n_frames == 1;
    tu_check (once, "frames mode: segment B frames not each given exactly "
                    "one row");
  }

  SattnStats stats;
  sattn_stream_get_stats (s, &stats, 1);
  tu_check (stats.frames == total_frames, "stats.frames %llu, want %zu",
            (unsigned long long) stats.frames, total_frames);
  tu_check (stats.invalid_frames == invalid_frames,
            "stats.invalid_frames %llu, want %zu",
            (unsigned long long) stats.invalid_frames, invalid_frames);
  tu_check (stats.windows == sim.windows, "stats.windows %llu, want %zu",
            (unsigned long long) stats.windows, sim.windows);
  tu_check (stats.masked_keys == sim.masked_keys,
            "stats.masked_keys %llu, want %zu",
            (unsigned long long) stats.masked_keys, sim.masked_keys);
  SattnStats after;
  sattn_stream_get_stats (s, &after, 0);
  tu_check (after.frames == 0 && after.windows == 0,
            "get_stats with clear did not clear");

  TuErr *dp = &diff;
  tu_worst_add (&worst_mode[mode], dp);
  tu_worst_add (&worst_all, dp);
  tu_worst_add (&worst_ref, &ref_err);
  tu_case_end ("frames=%zu+%zu rows=%zu windows=%zu max|diff|=%.2e "
               "rel=%.2e E_SPACE checks=%zu",
               seg[0].T, seg[1].T, got.n_rows, sim.windows, diff.max_abs,
               diff.max_abs / (1.0 + diff.max_ref), space_checks);

  free (got.rows);
  free (got.info);
  sim_free (&sim);
  free_segment (&seg[0]);
  free_segment (&seg[1]);
  sattn_stream_free (s);
  fx_free (&f);
}

/* Frames mode keeps "one row per frame" across drains in mid-stream. */
static void
run_drain_midstream (TuRng *rng, SattnStartPolicy start)
{
  tu_case_begin ("frames mode: drain mid-stream, every frame once (%s)",
                 start_names[start]);
  Fixture f;
  fx_build (&f, rng, 4, 2, FX_PROJ | FX_CAUSAL, 0);
  SattnStreamConfig sc = { .window = 6,
                           .hop = 4,
                           .output = SATTN_OUTPUT_FRAMES,
                           .start = start,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = fx_threads (),
                           .precision = fx_precision () };
  SattnStatus st;
  SattnStream *s = sattn_stream_new (f.model, &sc, &st);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_new") || !s) {
    fx_free (&f);
    tu_case_end (NULL);
    return;
  }
  const size_t chunks[] = { 3, 0, 7, 0, 1, 0, 0, 9, 2, 0 }; /* 0 = drain */
  float x[9 * 4];
  float out[64 * 4];
  SattnRowInfo info[64];
  uint64_t expect = 0;
  size_t total = 0;
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
    size_t nr = 0, maxr = sattn_stream_max_rows (s, chunks[c]);
    tu_check (maxr <= 64, "max_rows %zu", maxr);
    if (chunks[c]) {
      tu_fill_normal (rng, x, chunks[c] * 4, 1.0);
      st = sattn_stream_push (s, x, chunks[c], NULL, out, 64, info, &nr);
      total += chunks[c];
    } else {
      st = sattn_stream_drain (s, out, 64, info, &nr);
    }
    TU_CHECK_STATUS (st, SATTN_OK, chunks[c] ? "push" : "drain");
    tu_check (nr <= maxr, "%zu rows, max_rows said %zu", nr, maxr);
    for (size_t r = 0; r < nr; r++) {
      tu_check (info[r].first == expect && info[r].n_frames == 1,
                "row for frame %llu, want %llu",
                (unsigned long long) info[r].first,
                (unsigned long long) expect);
      expect++;
    }
    if (!chunks[c])
      tu_check (expect == total && sattn_stream_pending (s) == 0,
                "after drain: %llu rows for %zu frames, pending %zu",
                (unsigned long long) expect, total, sattn_stream_pending (s));
  }
  tu_case_end ("%zu frames, %llu rows", total, (unsigned long long) expect);
  sattn_stream_free (s);
  fx_free (&f);
}

int
main (void)
{
  TuRng rng;
  tu_rng_init (&rng, 0x57e4a3ull);
  const ModelSpec models[] = {
    { "identity d8h2", 8, 2, 0, 0 },
    { "proj+out causal lookback3 d16h4", 16, 4,
      FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_CAUSAL | FX_LOOKBACK, 3 },
    { "proj biaskv zeroattn unit lookback2 d6h2", 6, 2,
      FX_PROJ | FX_BIAS | FX_BIASKV | FX_ZERO | FX_UNIT | FX_LOOKBACK, 2 },
    { "identity causal d3h1", 3, 1, FX_CAUSAL, 0 },
    /* heads x d_head != d_model (the seeds' d_model 8 -> d_k 16) */
    { "seeds dk16 d8h1", 8, 1, FX_PROJ | FX_DK_WIDE, 0 },
    { "dk-wide out unit d12h3", 12, 3,
      FX_PROJ | FX_BIAS | FX_OUT | FX_DK_WIDE | FX_UNIT | FX_CAUSAL, 0 },
    { "dk-narrow dv-wide biaskv zeroattn lookback4 d16h2", 16, 2,
      FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_DK_NARROW | FX_BIASKV | FX_ZERO |
          FX_CAUSAL | FX_LOOKBACK,
      4 },
  };
  const size_t geo[][2] = {
    { 1, 1 }, { 5, 1 },  { 5, 2 },  { 5, 5 },
    { 7, 3 }, { 16, 1 }, { 16, 5 }, { 16, 16 },
  };
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
    for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++)
      for (int mode = 0; mode < 4; mode++)
        for (int start = 0; start < 2; start++)
          run_stream (&rng, &models[m], geo[g][0], geo[g][1],
                      (SattnOutputMode) mode, (SattnStartPolicy) start);
  run_drain_midstream (&rng, SATTN_START_PAD);
  run_drain_midstream (&rng, SATTN_START_WAIT);

  printf ("\nstream vs one-shot, worst case per output mode:\n");
  for (int mode = 0; mode < 4; mode++)
    printf ("  %-7s runs=%-4zu max-abs=%.3e  max-abs/(1+max|expected|)=%.3e\n",
            mode_names[mode], worst_mode[mode].cases, worst_mode[mode].max_abs,
            worst_mode[mode].max_abs_rel);
  printf ("  all     runs=%-4zu max-abs=%.3e  max-abs/(1+max|expected|)=%.3e "
          "(bound %.0e)\n",
          worst_all.cases, worst_all.max_abs, worst_all.max_abs_rel,
          STREAM_REL_BOUND);
  printf ("one-shot windows vs float64 reference: worst NMSE=%.3e max-abs="
          "%.3e\n",
          worst_ref.nmse, worst_ref.max_abs);
  return tu_summary ("test-stream");
}
