/* Unusable frames and float32 overflow: the invalid-frames policy of a
 * stream (mask / zero / error), projections that overflow with trained
 * weights, and pooled outputs of inputs at the edge of the float range.
 *
 * Each case pushes frames in random chunks through a stream and compares
 * every output row and its SattnRowInfo with rows computed here in double:
 * the windows are built by the schedule of test-stream.c (pad start, a
 * window every h frames, a drain at the end) and each is passed to the
 * float64 reference (reference.c).  The test classifies every frame with
 * its own rule: flagged (valid == 0), non-finite samples, or a Q/K/V
 * projection whose double value exceeds FLT_MAX (ref_projection_overflows),
 * and applies the policy itself:
 *   - mask:  such a frame is a masked key and its query row is zeros;
 *   - zero:  a frame with bad data is replaced by zeros (valid); flagged
 *            frames are masked under every policy;
 *   - error: the stream stops at the first frame with bad data, which
 *            sattn_stream_error_frame names with its cause; the rows before
 *            it come out, and the drain after it covers exactly the frames
 *            consumed (so a ring left inconsistent by the stop would show).
 * An output row whose double value rounds to float infinity (an overflowing output
 * projection) must come out as zeros, flagged not valid, counted in
 * overflow_rows; means are means of the valid rows.
 *
 * Checks per case: every output finite; rows and infos equal in number and
 * value; |got - expected| <= 1e-5 * (1 + max |expected|) per d_out row;
 * stats.invalid_frames / overflow_frames / overflow_rows equal to the
 * counts of the frames consumed and the rows computed.  The one-shot
 * sattn_attend is held to the same frame rule and counts.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "reference.h"
#include "testutil.h"

#define REL_BOUND 1e-5
/* The smallest magnitude a double rounds to float infinity from:
 * FLT_MAX + half an ulp. */
#define F32_INF_FROM 0x1.ffffffp+127

enum { CL_OK, CL_FLAGGED, CL_NONFINITE, CL_OVERFLOW };

static const char *mode_names[] = { "frames", "window", "mean", "last" };
static const char *policy_names[] = { "mask", "zero", "error" };

static int
frame_class (const Fixture *f, const float *x, const uint8_t *valid, size_t i)
{
  const size_t d = f->ref.d_model;
  if (valid && !valid[i])
    return CL_FLAGGED;
  if (!tu_all_finite (x + i * d, d))
    return CL_NONFINITE;
  if (ref_projection_overflows (&f->ref, x + i * d))
    return CL_OVERFLOW;
  return CL_OK;
}

/* ------------------------------------------------------------ expected */

typedef struct {
  const Fixture *f;
  const float *x;
  const int *cls;
  size_t n, h, d, d_out, rf;
  SattnOutputMode mode;
  SattnInvalidPolicy policy;
  double *rows;
  SattnRowInfo *info;
  size_t n_rows, cap;
  size_t overflow_rows;
  size_t naive_overflows; /* mean windows whose float32 row sum overflows */
  /* scratch */
  float *blk;
  double *rout;
  uint8_t *ok, *row_ok;
} Exp;

static double *
exp_new_row (Exp *e, uint64_t first, uint32_t count, int valid)
{
  if (e->n_rows == e->cap) {
    e->cap = e->cap ? 2 * e->cap : 64;
    e->rows = realloc (e->rows, e->cap * e->rf * sizeof (double));
    e->info = realloc (e->info, e->cap * sizeof (SattnRowInfo));
    if (!e->rows || !e->info)
      abort ();
  }
  SattnRowInfo *in = &e->info[e->n_rows];
  memset (in, 0, sizeof *in);
  in->first = first;
  in->n_frames = count;
  in->valid = (uint8_t) (valid != 0);
  return e->rows + e->n_rows++ * e->rf;
}

/* The window of frames [end - n, end), accounting for [first, end). */
static void
exp_window (Exp *e, size_t first, size_t end)
{
  const size_t n = e->n, d = e->d, d_out = e->d_out;
  for (size_t p = 0; p < n; p++) {
    int ok = 0;
    memset (e->blk + p * d, 0, d * sizeof (float));
    if (end + p >= n) {
      size_t idx = end + p - n;
      int c = e->cls[idx];
      if (c == CL_OK) {
        memcpy (e->blk + p * d, e->x + idx * d, d * sizeof (float));
        ok = 1;
      } else if ((c == CL_NONFINITE || c == CL_OVERFLOW) &&
                 e->policy == SATTN_INVALID_ZERO) {
        ok = 1; /* an all-zero frame */
      }
    }
    e->ok[p] = (uint8_t) ok;
  }
  ref_attend (&e->f->ref, e->blk, n, e->ok, e->ok, NULL, e->rout, NULL, NULL);
  /* The rows this mode computes; those beyond float32 are zeros. */
  size_t q0 = e->mode == SATTN_OUTPUT_FRAMES ? n - (end - first)
              : e->mode == SATTN_OUTPUT_LAST ? n - 1
                                             : 0;
  for (size_t p = 0; p < n; p++) {
    e->row_ok[p] = e->ok[p];
    if (p < q0 || !e->ok[p])
      continue;
    double mx = 0.0;
    for (size_t o = 0; o < d_out; o++)
      mx = fmax (mx, fabs (e->rout[p * d_out + o]));
    if (mx >= F32_INF_FROM) {
      e->row_ok[p] = 0;
      memset (e->rout + p * d_out, 0, d_out * sizeof (double));
      e->overflow_rows++;
    }
  }
  int any = 0;
  for (size_t p = q0; p < n; p++)
    any |= e->row_ok[p];
  switch (e->mode) {
    case SATTN_OUTPUT_CLASSES:
      /* Whole models only: not simulated here (tests/python). */
      break;
    case SATTN_OUTPUT_FRAMES:
      for (size_t i = first; i < end; i++) {
        size_t p = i + n - end;
        double *r = exp_new_row (e, i, 1, e->row_ok[p]);
        memcpy (r, e->rout + p * d_out, d_out * sizeof (double));
      }
      break;
    case SATTN_OUTPUT_WINDOW: {
      double *r = exp_new_row (e, first, (uint32_t) (end - first), any);
      memcpy (r, e->rout, n * d_out * sizeof (double));
      break;
    }
    case SATTN_OUTPUT_MEAN: {
      double *r = exp_new_row (e, first, (uint32_t) (end - first), any);
      size_t cnt = 0;
      int naive_over = 0;
      for (size_t p = 0; p < n; p++)
        cnt += e->row_ok[p];
      for (size_t o = 0; o < d_out; o++) {
        double acc = 0.0;
        float naive = 0.0f;
        for (size_t p = 0; p < n; p++)
          if (e->row_ok[p]) {
            acc += e->rout[p * d_out + o];
            naive += (float) e->rout[p * d_out + o];
          }
        naive_over |= !isfinite (naive);
        r[o] = cnt ? acc / (double) cnt : 0.0;
      }
      e->naive_overflows += (size_t) naive_over;
      break;
    }
    case SATTN_OUTPUT_LAST: {
      double *r = exp_new_row (e, first, (uint32_t) (end - first),
                               e->row_ok[n - 1]);
      memcpy (r, e->rout + (n - 1) * d_out, d_out * sizeof (double));
      break;
    }
  }
}

/* Every row of a stream fed frames [0, total) then drained. */
static void
exp_run (Exp *e, size_t total)
{
  size_t last = 0;
  for (size_t end = e->h; end <= total; end += e->h) {
    exp_window (e, last, end);
    last = end;
  }
  if (total > last)
    exp_window (e, last, total);
}

/* ------------------------------------------------------------ one case */

typedef struct {
  const char *what;
  const Fixture *f;
  const float *x;
  const uint8_t *valid;
  size_t T, n, h;
  int want_naive_overflow; /* the case must overflow a float32 mean */
  int want_overflow_rows;  /* the case must overflow the output proj. */
} Case;

static void
run_case (TuRng *rng, const Case *c, SattnOutputMode mode,
          SattnInvalidPolicy policy)
{
  const Fixture *f = c->f;
  const size_t d = f->ref.d_model, d_out = f->ref.d_out, T = c->T;
  tu_case_begin ("%s: output=%s invalid=%s window=%zu hop=%zu", c->what,
                 mode_names[mode], policy_names[policy], c->n, c->h);

  int *cls = malloc (T * sizeof *cls);
  if (!cls)
    abort ();
  size_t stop = T, n_invalid = 0, n_overflow = 0;
  for (size_t i = 0; i < T; i++) {
    cls[i] = frame_class (f, c->x, c->valid, i);
    if (stop == T && policy == SATTN_INVALID_ERROR &&
        (cls[i] == CL_NONFINITE || cls[i] == CL_OVERFLOW))
      stop = i;
  }
  for (size_t i = 0; i < stop; i++) {
    n_invalid += cls[i] != CL_OK;
    n_overflow += cls[i] == CL_OVERFLOW;
  }

  Exp e;
  memset (&e, 0, sizeof e);
  e.f = f;
  e.x = c->x;
  e.cls = cls;
  e.n = c->n;
  e.h = c->h;
  e.d = d;
  e.d_out = d_out;
  e.mode = mode;
  e.policy = policy;
  e.rf = mode == SATTN_OUTPUT_WINDOW ? c->n * d_out : d_out;
  e.blk = malloc (c->n * d * sizeof (float));
  e.rout = malloc (c->n * d_out * sizeof (double));
  e.ok = malloc (c->n);
  e.row_ok = malloc (c->n);
  if (!e.blk || !e.rout || !e.ok || !e.row_ok)
    abort ();
  exp_run (&e, stop);

  SattnStreamConfig sc = { 0 };
  sc.threads = fx_threads ();
  sc.window = c->n;
  sc.hop = c->h;
  sc.output = mode;
  sc.start = SATTN_START_PAD;
  sc.invalid_policy = policy;
  SattnStatus st;
  SattnStream *s = sattn_stream_new (f->model, &sc, &st);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_new") || !s) {
    tu_case_end (NULL);
    free (cls);
    return;
  }
  const size_t rf = sattn_stream_row_floats (s);
  size_t cap = T + 2; /* more rows than any push can give */
  float *got = malloc (cap * rf * sizeof (float));
  SattnRowInfo *ginfo = malloc (cap * sizeof *ginfo);
  if (!got || !ginfo)
    abort ();
  size_t n_got = 0, pos = 0;
  int stopped = 0;
  while (pos < T && !stopped) {
    size_t k = tu_rng_range (rng, 1, 2 * c->h + 1);
    if (k > T - pos)
      k = T - pos;
    size_t nr = 0;
    st = sattn_stream_push (s, c->x + pos * d, k,
                            c->valid ? c->valid + pos : NULL, got + n_got * rf,
                            cap - n_got, ginfo + n_got, &nr);
    n_got += nr;
    if (st == SATTN_E_NONFINITE) {
      stopped = 1;
      tu_check (policy == SATTN_INVALID_ERROR,
                "push returned "
                "SATTN_E_NONFINITE under invalid=%s",
                policy_names[policy]);
      uint64_t idx = 0;
      SattnFrameFault fault = SATTN_FRAME_OK;
      TU_CHECK_STATUS (sattn_stream_error_frame (s, &idx, &fault), SATTN_OK,
                       "sattn_stream_error_frame");
      tu_check (idx == stop, "error frame %llu, want %zu",
                (unsigned long long) idx, stop);
      tu_check (sattn_stream_frames (s) == stop,
                "stream holds %llu frames "
                "after the stop, want %zu",
                (unsigned long long) sattn_stream_frames (s), stop);
      if (stop < T)
        tu_check ((int) fault == (cls[stop] == CL_NONFINITE
                                      ? SATTN_FRAME_NONFINITE
                                      : SATTN_FRAME_OVERFLOW),
                  "error cause %d for a frame of class %d", (int) fault,
                  cls[stop]);
    } else if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_push")) {
      break;
    }
    pos += k;
  }
  tu_check (stopped == (stop < T), "push %s, want %s",
            stopped ? "stopped" : "did not stop", stop < T ? "a stop" : "none");
  if (!stopped)
    tu_check (sattn_stream_error_frame (s, NULL, NULL) == SATTN_E_INVAL,
              "sattn_stream_error_frame reports an error without a stop");
  size_t nr = 0;
  st = sattn_stream_drain (s, got + n_got * rf, cap - n_got, ginfo + n_got,
                           &nr);
  TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_drain");
  n_got += nr;

  size_t nonfinite = 0;
  for (size_t i = 0; i < n_got * rf; i++)
    nonfinite += !isfinite (got[i]);
  tu_check (nonfinite == 0, "%zu non-finite output values", nonfinite);
  tu_check (n_got == e.n_rows, "%zu rows, want %zu", n_got, e.n_rows);

  double worst = 0.0;
  size_t bad_rows = 0;
  for (size_t r = 0; r < n_got && r < e.n_rows; r++) {
    const SattnRowInfo *a = &ginfo[r], *b = &e.info[r];
    if (a->first != b->first || a->n_frames != b->n_frames ||
        a->valid != b->valid) {
      if (bad_rows++ < 5)
        tu_check (0, "row %zu: info {%llu, %u, %u}, want {%llu, %u, %u}", r,
                  (unsigned long long) a->first, a->n_frames, a->valid,
                  (unsigned long long) b->first, b->n_frames, b->valid);
      continue;
    }
    for (size_t sub = 0; sub < rf / d_out; sub++) {
      const float *g = got + r * rf + sub * d_out;
      const double *w = e.rows + r * rf + sub * d_out;
      double mx = 0.0, err = 0.0;
      for (size_t o = 0; o < d_out; o++) {
        mx = fmax (mx, fabs (w[o]));
        err = fmax (err, fabs ((double) g[o] - w[o]));
      }
      double rel = err / (1.0 + mx);
      worst = fmax (worst, rel);
      if (rel > REL_BOUND && bad_rows++ < 5)
        tu_check (0, "row %zu.%zu: max-abs %.3e, relative %.3e > %.0e", r, sub,
                  err, rel, REL_BOUND);
    }
  }

  SattnStats stats;
  sattn_stream_get_stats (s, &stats, 0);
  tu_check (stats.invalid_frames == n_invalid,
            "stats.invalid_frames %llu, "
            "want %zu",
            (unsigned long long) stats.invalid_frames, n_invalid);
  tu_check (stats.overflow_frames == n_overflow,
            "stats.overflow_frames "
            "%llu, want %zu",
            (unsigned long long) stats.overflow_frames, n_overflow);
  tu_check (stats.overflow_rows == e.overflow_rows,
            "stats.overflow_rows "
            "%llu, want %zu",
            (unsigned long long) stats.overflow_rows, e.overflow_rows);
  if (c->want_naive_overflow && mode == SATTN_OUTPUT_MEAN)
    tu_check (e.naive_overflows > 0,
              "no window whose float32 sum of rows "
              "overflows: the case does not test what it should");
  if (c->want_overflow_rows)
    tu_check (e.overflow_rows > 0, "no output projection overflows: the "
                                   "case does not test what it should");
  tu_case_end ("%zu rows, worst relative error %.2e, invalid %zu "
               "(overflow %zu), overflowed rows %zu, float32 mean sums "
               "overflowing %zu",
               n_got, worst, n_invalid, n_overflow, e.overflow_rows,
               e.naive_overflows);

  sattn_stream_free (s);
  free (got);
  free (ginfo);
  free (e.rows);
  free (e.info);
  free (e.blk);
  free (e.rout);
  free (e.ok);
  free (e.row_ok);
  free (cls);
}

/* The one-shot path on a block of the same frames: the same frame rule
 * (mask policy), the same counts. */
static void
run_attend (const Case *c)
{
  const Fixture *f = c->f;
  const size_t d = f->ref.d_model, d_out = f->ref.d_out, n = c->T;
  tu_case_begin ("%s: sattn_attend over %zu frames", c->what, n);
  float *out = malloc (n * d_out * sizeof (float));
  float *blk = calloc (n * d, sizeof (float));
  double *ro = malloc (n * d_out * sizeof (double));
  uint8_t *ok = malloc (n), *kv = malloc (n);
  if (!out || !blk || !ro || !ok || !kv)
    abort ();
  size_t n_invalid = 0, n_overflow = 0, n_rows_over = 0;
  for (size_t i = 0; i < n; i++) {
    int cl = frame_class (f, c->x, c->valid, i);
    kv[i] = c->valid ? c->valid[i] : 1;
    ok[i] = cl == CL_OK;
    n_invalid += cl != CL_OK;
    n_overflow += cl == CL_OVERFLOW;
  }
  /* Flagged rows: masked keys, but their query rows are the caller's
   * (query_valid NULL: computed); rows with bad data: zeros. */
  uint8_t *qok = malloc (n);
  if (!qok)
    abort ();
  for (size_t i = 0; i < n; i++) {
    int cl = frame_class (f, c->x, NULL, i);
    qok[i] = cl == CL_OK;
    if (cl == CL_OK)
      memcpy (blk + i * d, c->x + i * d, d * sizeof (float));
  }
  SattnMask mask = { kv, NULL, NULL };
  SattnStats stats;
  sattn_stats_clear (&stats);
  SattnStatus st = sattn_attend (f->model, c->x, n, &mask, out, NULL, &stats);
  TU_CHECK_STATUS (st, SATTN_OK, "sattn_attend");
  ref_attend (&f->ref, blk, n, ok, qok, NULL, ro, NULL, NULL);
  size_t nonfinite = 0;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double mx = 0.0, err = 0.0;
    for (size_t o = 0; o < d_out; o++)
      mx = fmax (mx, fabs (ro[i * d_out + o]));
    if (mx >= F32_INF_FROM) {
      n_rows_over++;
      for (size_t o = 0; o < d_out; o++)
        ro[i * d_out + o] = 0.0;
      mx = 0.0;
    }
    for (size_t o = 0; o < d_out; o++) {
      nonfinite += !isfinite (out[i * d_out + o]);
      err = fmax (err, fabs ((double) out[i * d_out + o] - ro[i * d_out + o]));
    }
    worst = fmax (worst, err / (1.0 + mx));
  }
  tu_check (nonfinite == 0, "%zu non-finite outputs", nonfinite);
  tu_check (worst <= REL_BOUND, "relative error %.3e > %.0e", worst, REL_BOUND);
  tu_check (stats.invalid_frames == n_invalid,
            "stats.invalid_frames %llu, "
            "want %zu",
            (unsigned long long) stats.invalid_frames, n_invalid);
  tu_check (stats.overflow_frames == n_overflow,
            "stats.overflow_frames "
            "%llu, want %zu",
            (unsigned long long) stats.overflow_frames, n_overflow);
  tu_check (stats.overflow_rows == n_rows_over,
            "stats.overflow_rows %llu, "
            "want %zu",
            (unsigned long long) stats.overflow_rows, n_rows_over);
  tu_case_end ("worst relative error %.2e, invalid %zu (overflow %zu), "
               "overflowed rows %zu",
               worst, n_invalid, n_overflow, n_rows_over);
  free (out);
  free (blk);
  free (ro);
  free (ok);
  free (kv);
  free (qok);
}

static void
run_all (TuRng *rng, const Case *c)
{
  for (int mode = 0; mode < 4; mode++)
    for (int pol = 0; pol < 3; pol++)
      run_case (rng, c, (SattnOutputMode) mode, (SattnInvalidPolicy) pol);
  run_attend (c);
}

/* ------------------------------------------------------------ models */

static float *
wbuf (const float *p)
{
  return (float *) p; /* the fixture's own buffers */
}

static void
rebuild (Fixture *f)
{
  SattnStatus st;
  sattn_model_free (f->model);
  f->model = sattn_model_new (&f->cfg, &f->w, &st);
  if (!f->model) {
    fprintf (stderr, "sattn_model_new: %s\n", sattn_status_string (st));
    abort ();
  }
}

/* c * I + noise (rows × cols, rows == cols). */
static void
set_diag (TuRng *rng, float *w, size_t d, double c, double noise)
{
  for (size_t r = 0; r < d; r++)
    for (size_t k = 0; k < d; k++)
      w[r * d + k] = (float) ((r == k ? c : 0.0) + noise * tu_rng_normal (rng));
}

static const float edge_values[] = { 1e38f,  -1e38f,  3e38f,
                                     -3e38f, FLT_MAX, -FLT_MAX };

/* Frames at the edge of the float range (V = x), Q and K scaled down by
 * the weights so that the scores stay finite and the reference is exact:
 * the sum of a window's rows overflows float32, their mean does not. */
static void
case_edge (TuRng *rng)
{
  const size_t d = 8, T = 64;
  Fixture f;
  fx_build (&f, rng, d, 2, FX_PROJ | FX_CAUSAL, 0);
  set_diag (rng, wbuf (f.w.wq), d, 1e-38, 0.0);
  set_diag (rng, wbuf (f.w.wk), d, 1e-38, 0.0);
  f.w.wv = NULL;
  f.ref.wv = NULL;
  rebuild (&f);
  float *x = malloc (T * d * sizeof (float));
  uint8_t *valid = malloc (T);
  if (!x || !valid)
    abort ();
  for (size_t i = 0; i < T * d; i++) {
    double u = tu_rng_uniform (rng);
    x[i] = u < 0.4 ? edge_values[tu_rng_range (rng, 0, 5)]
                   : (float) tu_rng_normal (rng);
  }
  /* Stretches of one sign in column 0: FLT_MAX, then 3e38, then 1e38. */
  for (size_t i = 8; i < 24; i++)
    x[i * d] = FLT_MAX;
  for (size_t i = 24; i < 36; i++)
    x[i * d] = 3e38f;
  for (size_t i = 36; i < 48; i++)
    x[i * d + 1] = -1e38f;
  for (size_t i = 0; i < T; i++)
    valid[i] = i != 13 && i != 40;
  x[30 * d + 3] = NAN;
  x[50 * d + 5] = INFINITY;
  Case c = { "edge of the float range", &f, x, valid, T, 8, 4, 1, 0 };
  run_all (rng, &c);
  Case c2 = { "edge of the float range, window 5", &f, x, NULL, T, 5, 5, 1, 0 };
  run_case (rng, &c2, SATTN_OUTPUT_MEAN, SATTN_INVALID_MASK);
  run_case (rng, &c2, SATTN_OUTPUT_FRAMES, SATTN_INVALID_ZERO);
  free (x);
  free (valid);
  fx_free (&f);
}

/* Identity projections on rows all equal to +FLT_MAX: every score is +inf,
 * the weights 1/3 each round up, and the context must still be FLT_MAX. */
static void
case_flt_max_identity (TuRng *rng)
{
  const size_t d = 4, T = 12;
  Fixture f;
  fx_build (&f, rng, d, 1, 0, 0);
  float *x = malloc (T * d * sizeof (float));
  if (!x)
    abort ();
  for (size_t i = 0; i < T * d; i++)
    x[i] = FLT_MAX;
  Case c = { "identity, every sample +FLT_MAX", &f, x, NULL, T, 3, 3, 0, 0 };
  /* The reference's scores are finite (FLT_MAX^2 fits a double) and all
   * equal, as the core's +inf ones are: the same uniform weights. */
  run_case (rng, &c, SATTN_OUTPUT_FRAMES, SATTN_INVALID_MASK);
  run_case (rng, &c, SATTN_OUTPUT_MEAN, SATTN_INVALID_MASK);
  run_case (rng, &c, SATTN_OUTPUT_WINDOW, SATTN_INVALID_ERROR);
  run_attend (&c);
  free (x);
  fx_free (&f);
}

/* Trained-looking weights (2 I + noise) whose Q/K/V projections overflow
 * for frames with a sample of 3e38; NaN and flagged frames mixed in. */
static void
case_qkv_overflow (TuRng *rng)
{
  const size_t d = 8, T = 60;
  Fixture f;
  fx_build (&f, rng, d, 2, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 0);
  set_diag (rng, wbuf (f.w.wq), d, 2.0, 0.05);
  set_diag (rng, wbuf (f.w.wk), d, 2.0, 0.05);
  set_diag (rng, wbuf (f.w.wv), d, 2.0, 0.05);
  rebuild (&f);
  float *x = malloc (T * d * sizeof (float));
  uint8_t *valid = malloc (T);
  if (!x || !valid)
    abort ();
  tu_fill_normal (rng, x, T * d, 1.0);
  for (size_t i = 0; i < T; i++)
    valid[i] = 1;
  static const size_t hot[] = { 6, 7, 21, 33, 34, 35, 47 };
  for (size_t k = 0; k < sizeof hot / sizeof hot[0]; k++)
    x[hot[k] * d + (k % d)] = (k & 1) ? -3e38f : 3e38f;
  x[26 * d + 2] = NAN;
  valid[15] = valid[40] = 0;
  x[40 * d] = 3e38f; /* flagged: masked whatever its data */
  Case c = { "Q/K/V projections overflow", &f, x, valid, T, 8, 4, 0, 0 };
  run_all (rng, &c);
  free (x);
  free (valid);
  fx_free (&f);
}

/* An output projection with entries ~1e30: rows that attend to the loud
 * frames (|x| ~ 1e10) overflow float32 after W_o, the others do not. */
static void
case_wo_overflow (TuRng *rng)
{
  const size_t d = 8, T = 48;
  Fixture f;
  fx_build (&f, rng, d, 2, FX_OUT | FX_BO, 0);
  float *wo = wbuf (f.w.wo);
  for (size_t i = 0; i < f.ref.d_out * d; i++)
    wo[i] *= 1e30f;
  rebuild (&f);
  float *x = malloc (T * d * sizeof (float));
  if (!x)
    abort ();
  tu_fill_normal (rng, x, T * d, 1.0);
  static const size_t loud[] = { 9, 10, 29, 38 };
  for (size_t k = 0; k < sizeof loud / sizeof loud[0]; k++)
    for (size_t j = 0; j < d; j++)
      x[loud[k] * d + j] *= 1e10f;
  x[20 * d + 1] = -INFINITY;
  Case c = { "output projection overflows", &f, x, NULL, T, 8, 4, 0, 1 };
  run_all (rng, &c);
  free (x);
  fx_free (&f);
}

/* A policy changed on a running stream applies from the next frame. */
static void
case_policy_switch (TuRng *rng)
{
  const size_t d = 4;
  tu_case_begin ("policy changed between pushes");
  Fixture f;
  fx_build (&f, rng, d, 1, 0, 0);
  SattnStreamConfig sc = { 0 };
  sc.threads = fx_threads ();
  sc.window = 4;
  sc.hop = 2;
  SattnStatus st;
  SattnStream *s = sattn_stream_new (f.model, &sc, &st);
  float x[2 * 4] = { 1, 2, 3, 4, NAN, 0, 0, 0 };
  float out[4 * 4];
  size_t nr = 9;
  TU_CHECK_STATUS (sattn_stream_set_invalid_policy (s, SATTN_INVALID_ERROR),
                   SATTN_OK, "set ERROR");
  TU_CHECK_STATUS (sattn_stream_set_invalid_policy (s, (SattnInvalidPolicy) 7),
                   SATTN_E_INVAL, "set policy 7");
  st = sattn_stream_push (s, x, 2, NULL, out, 4, NULL, &nr);
  TU_CHECK_STATUS (st, SATTN_E_NONFINITE, "push under ERROR");
  tu_check (nr == 0 && sattn_stream_frames (s) == 1,
            "consumed %llu frames, "
            "%zu rows; want 1, 0",
            (unsigned long long) sattn_stream_frames (s), nr);
  TU_CHECK_STATUS (sattn_stream_set_invalid_policy (s, SATTN_INVALID_ZERO),
                   SATTN_OK, "set ZERO");
  SattnRowInfo info[4];
  st = sattn_stream_push (s, x + d, 1, NULL, out, 4, info, &nr);
  TU_CHECK_STATUS (st, SATTN_OK, "push under ZERO");
  tu_check (nr == 2 && info[1].valid == 1,
            "%zu rows, second valid %d; "
            "want 2 rows, the zeroed frame valid",
            nr, nr == 2 ? info[1].valid : -1);
  /* Flagged frames are masked under every policy, even holding NaN. */
  float y[2 * 4] = { 1, 2, 3, 4, NAN, NAN, 0, 0 };
  uint8_t flags[2] = { 1, 0 };
  TU_CHECK_STATUS (sattn_stream_set_invalid_policy (s, SATTN_INVALID_ERROR),
                   SATTN_OK, "set ERROR again");
  st = sattn_stream_push (s, y, 2, flags, out, 4, info, &nr);
  TU_CHECK_STATUS (st, SATTN_OK, "push of a flagged NaN frame under ERROR");
  tu_check (nr == 2 && info[0].valid == 1 && info[1].valid == 0 &&
                tu_all_finite (out, 2 * d),
            "%zu rows, valid %d %d; want 2 "
            "finite rows, the flagged one not valid",
            nr, info[0].valid, info[1].valid);
  sc.invalid_policy = (SattnInvalidPolicy) 3;
  SattnStream *s2 = sattn_stream_new (f.model, &sc, &st);
  tu_check (s2 == NULL && st == SATTN_E_INVAL, "stream with policy 3: %s",
            sattn_status_string (st));
  sattn_stream_free (s2);
  sattn_stream_free (s);
  fx_free (&f);
  tu_case_end (NULL);
}

int
main (void)
{
  TuRng rng;
  tu_rng_init (&rng, 0x9e3779b97f4a7c15ull);
  case_edge (&rng);
  case_flt_max_identity (&rng);
  case_qkv_overflow (&rng);
  case_wo_overflow (&rng);
  case_policy_switch (&rng);
  return tu_summary ("test-invalid");
}
