/* The core's worker threads (SattnStreamConfig.threads).
 *
 *  - byte identity: the same random event sequence (pushes of random
 *    sizes, invalid and non-finite frames, a drain and a reset part-way, a
 *    final drain) through streams of one model that differ only in threads
 *    (1, 2, 3, 4, 0 = one per CPU; SATTN_PAR_MIN=0, so that the workers share
 *    every run, and threads=2 once more with the core's own bound) gives
 *    memcmp-identical output rows, row
 *    infos, statistics and kept weights; geometries W1 (d_model 64, 4
 *    heads, window 256, hop 16), W3 (256, 8, 1024, 64), odd sizes,
 *    causal / lookback, extra keys, every output mode, random weights and
 *    identity projections, statistics on;
 *  - accuracy: with threads = 2, full windows of W1 and W3 against the
 *    float64 reference (tests/common/reference.c), NMSE <= 1e-10 (the bound
 *    of test-stream);
 *  - process state: a process that set OpenBLAS to 2 threads still reads 2
 *    after creating, pushing to and freeing streams with threads 1, 2 and
 *    0, BLAS-sized projections included;
 *  - failures: a stream too large for memory, and a stream whose worker
 *    threads cannot all be created, fail with SATTN_E_NOMEM;
 *  - sattn_stream_bytes: nonzero for valid configurations, growing
 *    linearly (not quadratically) with the window without keep_weights,
 *    0 for invalid or overflowing ones.
 * The same executable runs under ThreadSanitizer in the TSan build.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>

#include "fixture.h"
#include "reference.h"
#include "testutil.h"

#define NMSE_BOUND 1e-10

static const char *mode_names[] = { "frames", "window", "mean", "last" };

typedef struct {
  const char *name;
  size_t d, heads, n, h;
  unsigned flags;
  size_t lookback;
  unsigned modes; /* bit per SattnOutputMode */
  size_t frames;  /* frames per run */
} Geo;

#define ALL_MODES 0xfu
#define CHEAP_MODES ((1u << SATTN_OUTPUT_FRAMES) | (1u << SATTN_OUTPUT_LAST))

static const Geo geos[] = {
  { "W1", 64, 4, 256, 16, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 0, ALL_MODES,
    700 },
  { "W1-identity", 64, 4, 256, 16, 0, 0, ALL_MODES, 700 },
  { "W3", 256, 8, 1024, 64, FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_CAUSAL, 0,
    CHEAP_MODES, 1400 },
  { "W3-identity-lookback", 256, 8, 1024, 64, FX_CAUSAL | FX_LOOKBACK, 300,
    CHEAP_MODES, 1300 },
  { "odd", 30, 3, 37, 5,
    FX_PROJ | FX_BIAS | FX_OUT | FX_BIASKV | FX_ZERO | FX_DIMS | FX_CAUSAL |
        FX_LOOKBACK,
    9, ALL_MODES, 200 },
  { "tiny-window", 8, 2, 5, 2, FX_PROJ | FX_BIAS | FX_OUT | FX_CAUSAL, 0,
    ALL_MODES, 60 },
  { "odd-big-hop", 18, 2, 300, 290, FX_PROJ | FX_OUT | FX_ZERO | FX_UNIT, 0,
    ALL_MODES, 900 },
  { "blas-sized", 256, 4, 512, 300, FX_PROJ | FX_BIAS | FX_OUT, 0, CHEAP_MODES,
    1000 },
  /* heads x d_head != d_model */
  { "dk-wide", 16, 2, 40, 7,
    FX_PROJ | FX_BIAS | FX_DK_WIDE | FX_CAUSAL | FX_BIASKV, 0, ALL_MODES, 200 },
  { "dk-narrow", 32, 4, 64, 8, FX_PROJ | FX_OUT | FX_BO | FX_DK_NARROW, 0,
    ALL_MODES, 240 },
};

/* Everything one run produced, to be compared byte for byte. */
typedef struct {
  float *rows;
  SattnRowInfo *info;
  size_t n_rows, cap, row_floats;
  SattnStats stats_mid, stats_end;
  float *weights;
  size_t w_rows, w_cols;
} Run;

static void
run_free (Run *r)
{
  free (r->rows);
  free (r->info);
  free (r->weights);
  memset (r, 0, sizeof *r);
}

static void
run_append (Run *r, const float *rows, const SattnRowInfo *info, size_t nr)
{
  if (nr == 0)
    return;
  if (r->n_rows + nr > r->cap) {
    size_t cap = (r->n_rows + nr) * 2 + 16;
    r->rows = realloc (r->rows, cap * r->row_floats * sizeof (float));
    r->info = realloc (r->info, cap * sizeof (SattnRowInfo));
    if (r->rows == NULL || r->info == NULL)
      abort ();
    r->cap = cap;
  }
  memcpy (r->rows + r->n_rows * r->row_floats, rows,
          nr * r->row_floats * sizeof (float));
  memcpy (r->info + r->n_rows, info, nr * sizeof (SattnRowInfo));
  r->n_rows += nr;
}

/* The input of one episode, and its schedule. */
typedef struct {
  float *x;
  uint8_t *valid;
  size_t T;
  size_t *chunks, n_chunks;
  size_t drain_at, reset_at; /* chunk indices */
} Episode;

static void
episode_make (Episode *e, TuRng *rng, const Geo *g)
{
  e->T = g->frames;
  e->x = malloc (e->T * g->d * sizeof (float));
  e->valid = malloc (e->T);
  e->chunks = malloc (e->T * sizeof (size_t));
  if (!e->x || !e->valid || !e->chunks)
    abort ();
  tu_fill_normal (rng, e->x, e->T * g->d, 1.0);
  for (size_t i = 0; i < e->T; i++) {
    e->valid[i] = tu_rng_u64 (rng) % 23 != 0;
    if (tu_rng_u64 (rng) % 31 == 0)
      e->x[i * g->d + tu_rng_range (rng, 0, g->d - 1)] = (tu_rng_u64 (rng) & 1)
                                                             ? NAN
                                                             : INFINITY;
  }
  e->n_chunks = 0;
  for (size_t pos = 0; pos < e->T;) {
    size_t c = tu_rng_u64 (rng) % 4 == 0 ? 1
                                         : tu_rng_range (rng, 1, 2 * g->n + 3);
    if (c > e->T - pos)
      c = e->T - pos;
    e->chunks[e->n_chunks++] = c;
    pos += c;
  }
  e->drain_at = e->n_chunks / 3;
  e->reset_at = (2 * e->n_chunks) / 3;
}

static void
episode_free (Episode *e)
{
  free (e->x);
  free (e->valid);
  free (e->chunks);
}

static int
push_rows (SattnStream *s, const float *x, size_t c, const uint8_t *v, Run *r)
{
  size_t maxr = sattn_stream_max_rows (s, c);
  float *out = malloc ((maxr ? maxr : 1) * r->row_floats * sizeof (float));
  /* zeroed: SattnRowInfo has padding bytes, compared with memcmp */
  SattnRowInfo *info = calloc (maxr ? maxr : 1, sizeof *info);
  if (!out || !info)
    abort ();
  size_t nr = 0;
  SattnStatus st = c > 0 ? sattn_stream_push (s, x, c, v, out, maxr, info, &nr)
                         : sattn_stream_drain (s, out, maxr, info, &nr);
  int ok = TU_CHECK_STATUS (st, SATTN_OK, c > 0 ? "push" : "drain");
  if (ok)
    run_append (r, out, info, nr);
  free (out);
  free (info);
  return ok;
}

/* Run episode e through a stream of model m; 0 on an API failure. */
static int
run_episode (const SattnModel *m, int threads, const Geo *g,
             SattnOutputMode mode, int keep_w, const Episode *e, Run *r)
{
  SattnStreamConfig sc = { .window = g->n,
                           .hop = g->h,
                           .output = mode,
                           .start = SATTN_START_PAD,
                           .collect_stats = 1,
                           .keep_weights = keep_w,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = threads };
  SattnStatus st = SATTN_E_INVAL;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  memset (r, 0, sizeof *r);
  if (!TU_CHECK_STATUS (st, SATTN_OK, "sattn_stream_new") || s == NULL)
    return 0;
  r->row_floats = sattn_stream_row_floats (s);
  int ok = 1;
  size_t pos = 0;
  for (size_t k = 0; k < e->n_chunks && ok; k++) {
    size_t c = e->chunks[k];
    ok = push_rows (s, e->x + pos * g->d, c, e->valid + pos, r);
    pos += c;
    if (k == e->drain_at) {
      ok = ok && push_rows (s, NULL, 0, NULL, r);
      sattn_stream_get_stats (s, &r->stats_mid, 1);
    }
    if (k == e->reset_at)
      sattn_stream_reset (s);
  }
  ok = ok && push_rows (s, NULL, 0, NULL, r);
  sattn_stream_get_stats (s, &r->stats_end, 0);
  if (keep_w && sattn_stream_last_weights (s, -1, NULL, &r->w_rows,
                                           &r->w_cols) == SATTN_OK) {
    r->weights = malloc (r->w_rows * r->w_cols * sizeof (float) + 1);
    if (r->weights == NULL)
      abort ();
    ok = ok && TU_CHECK_STATUS (sattn_stream_last_weights (s, -1, r->weights,
                                                           NULL, NULL),
                                SATTN_OK, "last_weights");
  }
  sattn_stream_free (s);
  return ok;
}

static int
runs_identical (const Run *a, const Run *b, const char *what)
{
  int same = tu_check (a->n_rows == b->n_rows && a->row_floats == b->row_floats,
                       "%s: %zu rows of %zu, want %zu of %zu", what, b->n_rows,
                       b->row_floats, a->n_rows, a->row_floats);
  if (!same)
    return 0;
  same &= tu_check (memcmp (a->rows, b->rows,
                            a->n_rows * a->row_floats * sizeof (float)) == 0,
                    "%s: output rows differ", what);
  same &= tu_check (memcmp (a->info, b->info,
                            a->n_rows * sizeof (SattnRowInfo)) == 0,
                    "%s: row infos differ", what);
  same &= tu_check (memcmp (&a->stats_mid, &b->stats_mid,
                            sizeof (SattnStats)) == 0 &&
                        memcmp (&a->stats_end, &b->stats_end,
                                sizeof (SattnStats)) == 0,
                    "%s: statistics differ (weight sums %.17g / %.17g)", what,
                    b->stats_end.max_weight_sum, a->stats_end.max_weight_sum);
  same &= tu_check (a->w_rows == b->w_rows && a->w_cols == b->w_cols &&
                        (a->weights == NULL) == (b->weights == NULL) &&
                        (a->weights == NULL ||
                         memcmp (a->weights, b->weights,
                                 a->w_rows * a->w_cols * sizeof (float)) == 0),
                    "%s: kept weights differ", what);
  return same;
}

/* The thread counts compared with threads = 1, and SATTN_PAR_MIN for
 * each: "0" makes the workers share every run, NULL leaves the core's
 * bound (runs too small to share stay on the caller's thread). */
static const int variant_threads[] = { 2, 2, 3, 4, 0 };
static const char *const par_min[] = { NULL, "0", "0", "0", "0" };
#define N_VARIANTS 5

static void
test_identity (TuRng *rng, const Geo *g)
{
  Fixture f;
  tu_case_begin ("byte identity %s d=%zu heads=%zu n=%zu hop=%zu", g->name,
                 g->d, g->heads, g->n, g->h);
  if (!TU_CHECK_STATUS (fx_build (&f, rng, g->d, g->heads, g->flags,
                                  g->lookback),
                        SATTN_OK, "fx_build")) {
    tu_case_end (NULL);
    return;
  }
  /* One model serves every thread count. */
  const SattnModel *m = f.model;
  size_t runs = 0, rows = 0;
  const char *env = getenv ("SATTN_PAR_MIN");
  char *saved = env ? strdup (env) : NULL;
  for (int mode = 0; mode < 4; mode++) {
    if (!(g->modes & (1u << mode)))
      continue;
    Episode e;
    episode_make (&e, rng, g);
    int keep_w = mode != SATTN_OUTPUT_WINDOW || g->n < 512;
    Run base;
    if (run_episode (m, 1, g, mode, keep_w, &e, &base)) {
      tu_check (base.n_rows > 0, "%s: no output rows", mode_names[mode]);
      rows += base.n_rows;
      for (int t = 0; t < N_VARIANTS; t++) {
        Run other;
        char what[96];
        snprintf (what, sizeof what, "%s threads=%d SATTN_PAR_MIN=%s",
                  mode_names[mode], variant_threads[t],
                  par_min[t] ? par_min[t] : "(unset)");
        /* Read when the stream is created (in run_episode). */
        if (par_min[t])
          setenv ("SATTN_PAR_MIN", par_min[t], 1);
        else
          unsetenv ("SATTN_PAR_MIN");
        if (run_episode (m, variant_threads[t], g, mode, keep_w, &e, &other))
          runs_identical (&base, &other, what);
        if (saved)
          setenv ("SATTN_PAR_MIN", saved, 1);
        else
          unsetenv ("SATTN_PAR_MIN");
        run_free (&other);
        runs++;
      }
    }
    run_free (&base);
    episode_free (&e);
  }
  free (saved);
  fx_free (&f);
  tu_case_end ("%zu runs of %zu rows (all modes) compared with threads=1", runs,
               rows);
}

/* Full windows of valid frames, frames mode, threads = 2: the rows of the
 * last hop against the float64 reference over the last n frames. */
static void
test_reference (TuRng *rng, const Geo *g)
{
  Fixture f;
  tu_case_begin ("reference %s threads=2", g->name);
  if (!TU_CHECK_STATUS (fx_build (&f, rng, g->d, g->heads, g->flags,
                                  g->lookback),
                        SATTN_OK, "fx_build")) {
    tu_case_end (NULL);
    return;
  }
  const SattnModel *m = f.model;
  SattnStreamConfig sc = { .window = g->n,
                           .hop = g->h,
                           .output = SATTN_OUTPUT_FRAMES,
                           .start = SATTN_START_PAD,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = 2 };
  SattnStream *s = sattn_stream_new (m, &sc, NULL);
  tu_check (s != NULL, "sattn_stream_new");
  const size_t T = g->n + 3 * g->h, d_out = f.ref.d_out;
  float *x = malloc (T * g->d * sizeof (float));
  float *out = malloc (T * d_out * sizeof (float));
  double *ref = malloc (g->n * d_out * sizeof (double));
  if (!x || !out || !ref)
    abort ();
  tu_fill_normal (rng, x, T * g->d, 1.0);
  TuErr err;
  tu_err_clear (&err);
  if (s) {
    size_t nr = 0;
    /* Every hop in its own push: the last push gives the last hop. */
    for (size_t pos = 0; pos < T; pos += g->h)
      TU_CHECK_STATUS (sattn_stream_push (s, x + pos * g->d, g->h, NULL, out, T,
                                          NULL, &nr),
                       SATTN_OK, "push");
    tu_check (nr == g->h, "last push gave %zu rows", nr);
    ref_attend (&f.ref, x + (T - g->n) * g->d, g->n, NULL, NULL, NULL, ref,
                NULL, NULL);
    tu_err_add_f (&err, out, ref + (g->n - g->h) * d_out, g->h * d_out);
    tu_check (err.nonfinite == 0, "non-finite output");
    tu_check (tu_err_nmse (&err) <= NMSE_BOUND, "NMSE %.3e > %.1e",
              tu_err_nmse (&err), NMSE_BOUND);
  }
  sattn_stream_free (s);
  free (x);
  free (out);
  free (ref);
  fx_free (&f);
  tu_case_end ("NMSE %.3e, max |diff| %.3e", tu_err_nmse (&err), err.max_abs);
}

/* The library must not touch the process's BLAS setting. */
static void
test_blas_threads (TuRng *rng)
{
  tu_case_begin ("OpenBLAS thread count left alone");
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads (2);
  int before = openblas_get_num_threads ();
  static const int thread_counts[] = { 1, 2, 0 };
  /* W1-like and BLAS-sized (a hop of 300 frames of 256 floats). */
  static const Geo g[2] = {
    { "W1", 64, 4, 256, 16, FX_PROJ | FX_OUT, 0, 0, 600 },
    { "blas", 256, 4, 512, 300, FX_PROJ | FX_OUT, 0, 0, 900 },
  };
  for (int k = 0; k < 2; k++) {
    Fixture f;
    if (!TU_CHECK_STATUS (fx_build (&f, rng, g[k].d, g[k].heads, g[k].flags, 0),
                          SATTN_OK, "fx_build"))
      continue;
    float *x = malloc (g[k].frames * g[k].d * sizeof (float));
    float *out = malloc (g[k].frames * f.ref.d_out * sizeof (float));
    if (!x || !out)
      abort ();
    tu_fill_normal (rng, x, g[k].frames * g[k].d, 1.0);
    for (int t = 0; t < 3; t++) {
      const SattnModel *m = f.model;
      SattnStreamConfig sc = { .window = g[k].n,
                               .hop = g[k].h,
                               .output = SATTN_OUTPUT_FRAMES,
                               .start = SATTN_START_PAD,
                               .collect_stats = 1,
                               .invalid_policy = SATTN_INVALID_MASK,
                               .threads = thread_counts[t] };
      SattnStream *s = sattn_stream_new (m, &sc, NULL);
      size_t nr;
      if (s) {
        TU_CHECK_STATUS (sattn_stream_push (s, x, g[k].frames, NULL, out,
                                            g[k].frames, NULL, &nr),
                         SATTN_OK, "push");
        TU_CHECK_STATUS (sattn_stream_drain (s, out, g[k].frames, NULL, &nr),
                         SATTN_OK, "drain");
      }
      tu_check (s != NULL, "stream threads=%d", thread_counts[t]);
      float *one = malloc (g[k].frames * f.ref.d_out * sizeof (float));
      if (one == NULL)
        abort ();
      if (m)
        TU_CHECK_STATUS (sattn_attend (m, x, g[k].n, NULL, one, NULL, NULL),
                         SATTN_OK, "attend");
      free (one);
      int now = openblas_get_num_threads ();
      tu_check (now == before, "%s threads=%d: OpenBLAS threads %d, was %d",
                g[k].name, thread_counts[t], now, before);
      sattn_stream_free (s);
    }
    free (x);
    free (out);
    fx_free (&f);
  }
  tu_case_end ("openblas_get_num_threads () = %d after every run", before);
#else
  (void) rng;
  tu_case_end ("skipped: not built against OpenBLAS");
#endif
}

static void
test_bytes (TuRng *rng)
{
  tu_case_begin ("sattn_stream_bytes");
  Fixture f;
  if (!TU_CHECK_STATUS (fx_build (&f, rng, 64, 4, FX_PROJ, 0), SATTN_OK,
                        "fx_build")) {
    tu_case_end (NULL);
    return;
  }
  SattnStreamConfig sc = { .window = 1024,
                           .hop = 64,
                           .output = SATTN_OUTPUT_FRAMES,
                           .start = SATTN_START_PAD,
                           .collect_stats = 1,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = 1 };
  size_t b1 = sattn_stream_bytes (f.model, &sc);
  /* The stream's own threads: a worker's stack and scratch more. */
  sc.threads = 2;
  size_t b1t2 = sattn_stream_bytes (f.model, &sc);
  tu_check (b1t2 > b1, "threads=2: %zu bytes, threads=1: %zu", b1t2, b1);
  sc.threads = -1;
  tu_check (sattn_stream_bytes (f.model, &sc) == 0, "threads=-1 not 0");
  sc.threads = 1;
  sc.window = 2048;
  size_t b2 = sattn_stream_bytes (f.model, &sc);
  sc.window = 4096;
  size_t b4 = sattn_stream_bytes (f.model, &sc);
  tu_check (b1 > 0 && b2 > b1 && b4 > b2, "sizes %zu %zu %zu", b1, b2, b4);
  /* Linear: doubling the window at most doubles the growth. */
  tu_check (b4 - b2 <= 2 * (b2 - b1) + 4096, "not linear: %zu %zu %zu", b1, b2,
            b4);
  sc.keep_weights = 1;
  size_t bk = sattn_stream_bytes (f.model, &sc);
  tu_check (bk >= b4 + (size_t) 4 * 4096 * 4096 * sizeof (float),
            "keep_weights: %zu", bk);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* 4 heads × 2^20 × 2^20 kept weights: 16 TiB, refused by malloc (the
   * sanitizers' allocators abort instead, hence not there). */
  sc.window = (size_t) 1 << 20;
  sc.hop = 16;
  SattnStatus st = SATTN_OK;
  SattnStream *huge = sattn_stream_new (f.model, &sc, &st);
  tu_check (huge == NULL && st == SATTN_E_NOMEM, "16 TiB stream: %s",
            sattn_status_string (st));
  sattn_stream_free (huge);
#endif
  sc.window = SIZE_MAX / 4;
  tu_check (sattn_stream_bytes (f.model, &sc) == 0, "huge window not 0");
  sc.window = 16;
  sc.hop = 32;
  tu_check (sattn_stream_bytes (f.model, &sc) == 0, "hop > window not 0");
  tu_check (sattn_stream_bytes (NULL, &sc) == 0, "NULL model not 0");
  fx_free (&f);
  tu_case_end ("W=1024: %zu bytes, 2048: %zu, 4096: %zu, 4096 with weights "
               "kept: %zu",
               b1, b2, b4, bk);
}

/* A thread that cannot be created: sattn_stream_new fails with
 * SATTN_E_NOMEM, joining the workers it did start (run in a child whose
 * address space is capped a few MiB above its current size, so that the
 * workers' stacks run out; not under the sanitizers, whose shadow memory
 * needs the address space). */
static void
test_thread_create_fails (TuRng *rng)
{
  tu_case_begin ("thread creation failing");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  Fixture f;
  if (!TU_CHECK_STATUS (fx_build (&f, rng, 8, 2, 0, 0), SATTN_OK, "fx_build")) {
    tu_case_end (NULL);
    return;
  }
  const SattnModel *m = f.model;
  SattnStreamConfig sc = { .window = 8,
                           .hop = 4,
                           .output = SATTN_OUTPUT_FRAMES,
                           .start = SATTN_START_PAD,
                           .collect_stats = 1,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = 200 };
  fflush (stdout);
  pid_t pid = fork ();
  if (pid == 0) {
    long vm_kib = 0;
    char line[256];
    FILE *st = fopen ("/proc/self/status", "r");
    while (st && fgets (line, sizeof line, st))
      if (sscanf (line, "VmSize: %ld kB", &vm_kib) == 1)
        break;
    if (st)
      fclose (st);
    struct rlimit rl = { (rlim_t) vm_kib * 1024 + (4 << 20),
                         (rlim_t) vm_kib * 1024 + (4 << 20) };
    if (vm_kib <= 0 || setrlimit (RLIMIT_AS, &rl) != 0)
      _exit (3);
    SattnStatus status = SATTN_OK;
    SattnStream *s = sattn_stream_new (m, &sc, &status);
    _exit (s == NULL && status == SATTN_E_NOMEM ? 0 : s == NULL ? 2 : 1);
  }
  int wst = 0;
  tu_check (pid > 0 && waitpid (pid, &wst, 0) == pid, "fork / waitpid");
  tu_check (WIFEXITED (wst) && WEXITSTATUS (wst) == 0,
            "200 threads in 4 MiB of address space: %s",
            !WIFEXITED (wst)         ? "the child crashed"
            : WEXITSTATUS (wst) == 1 ? "the stream was created"
            : WEXITSTATUS (wst) == 2 ? "failed with another status"
                                     : "could not cap the address space");
  fx_free (&f);
  tu_case_end ("SATTN_E_NOMEM");
#else
  (void) rng;
  tu_case_end ("skipped under a sanitizer");
#endif
}

int
main (void)
{
  TuRng rng;
  tu_rng_init (&rng, 0x7468726561647321ull);
  printf ("available CPUs: threads=0 resolves to the affinity mask\n");
  test_blas_threads (&rng);
  test_bytes (&rng);
  test_thread_create_fails (&rng);
  for (size_t k = 0; k < sizeof geos / sizeof geos[0]; k++)
    test_identity (&rng, &geos[k]);
  test_reference (&rng, &geos[0]);
  test_reference (&rng, &geos[1]);
  test_reference (&rng, &geos[2]);
  test_reference (&rng, &geos[3]);
  return tu_summary ("test-threads");
}
