/* sattn_stream_skip against pushing the same invalid frames.
 *
 * For every output mode, hop, start policy and model (identity; trained
 * projections with an output projection, bias and extra keys, causal),
 * two streams get the same random frames (some flagged invalid, some with
 * NaN), then a run of G invalid frames - stream A as frames flagged
 * invalid through sattn_stream_push in random chunks, stream B through
 * sattn_stream_skip (in one call or in several) - then more random frames
 * and a drain.  B's rows, with the rows it skipped expanded as zero rows
 * with valid = 0 (frames mode: one per frame; pooled: one per window,
 * hop frames apart), must equal A's bit for bit, with the same row info;
 * the statistics, the last window's weights, the pending count and the
 * frame schedule must be equal afterwards.  G ranges over 0, 1, the lead,
 * around the window, and runs of thousands of frames.  A separate case
 * checks that a skip of 10^12 frames returns at once with the count and
 * span the schedule says, and that a skip past UINT64_MAX is refused.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "testutil.h"

static const char *mode_names[] = { "frames", "window", "mean", "last" };

typedef struct {
  float *rows;
  SattnRowInfo *info;
  size_t n, cap, rf;
} Rows;

static void
rows_reserve (Rows *r, size_t more)
{
  if (r->n + more <= r->cap)
    return;
  r->cap = (r->n + more) * 2;
  r->rows = realloc (r->rows, r->cap * r->rf * sizeof (float));
  r->info = realloc (r->info, r->cap * sizeof (SattnRowInfo));
  if (r->rows == NULL || r->info == NULL)
    abort ();
}

/* Push frames into s in random chunks, appending the rows to r. */
static void
push_rows (SattnStream *s, Rows *r, const float *x, const uint8_t *valid,
           size_t n, size_t d, TuRng *rng)
{
  while (n > 0) {
    size_t k = tu_rng_range (rng, 1, n < 37 ? n : 37);
    size_t need = sattn_stream_max_rows (s, k), got = 0;
    rows_reserve (r, need);
    SattnStatus st = sattn_stream_push (s, x, k, valid, r->rows + r->n * r->rf,
                                        need, r->info + r->n, &got);
    tu_check (st == SATTN_OK, "push: %s", sattn_status_string (st));
    r->n += got;
    x += k * d;
    if (valid)
      valid += k;
    n -= k;
  }
}

static void
drain_rows (SattnStream *s, Rows *r)
{
  size_t need = sattn_stream_max_rows (s, 0), got = 0;
  rows_reserve (r, need + 1);
  SattnStatus st = sattn_stream_drain (s, r->rows + r->n * r->rf, need,
                                       r->info + r->n, &got);
  tu_check (st == SATTN_OK, "drain: %s", sattn_status_string (st));
  r->n += got;
}

/* Skip g invalid frames in `parts` calls, expanding the skipped rows. */
static void
skip_rows (SattnStream *s, Rows *r, uint64_t g, int parts,
           const SattnStreamConfig *sc, uint64_t *total_skipped)
{
  while (g > 0) {
    uint64_t k = parts > 1 ? g / (uint64_t) parts + 1 : g;
    if (k > g)
      k = g;
    parts--;
    uint64_t lead = sattn_stream_skip_lead (s);
    size_t kl = (size_t) (k < lead ? k : lead);
    /* No lead frames: nothing is written, out may be NULL (even with
     * frames pending since the last window). */
    size_t need = kl > 0 ? sattn_stream_max_rows (s, kl) : 0;
    size_t got = 0;
    SattnSkipped sk;
    rows_reserve (r, need);
    SattnStatus st = sattn_stream_skip (s, k,
                                        need ? r->rows + r->n * r->rf : NULL,
                                        need, need ? r->info + r->n : NULL,
                                        &got, &sk);
    tu_check (st == SATTN_OK, "skip: %s", sattn_status_string (st));
    r->n += got;
    *total_skipped += sk.rows;
    rows_reserve (r, (size_t) sk.rows);
    for (uint64_t i = 0; i < sk.rows; i++) {
      SattnRowInfo *inf = r->info + r->n;
      memset (r->rows + r->n * r->rf, 0, r->rf * sizeof (float));
      if (sc->output == SATTN_OUTPUT_FRAMES) {
        inf->first = sk.first + i;
        inf->n_frames = 1;
      } else {
        uint64_t e = sk.end - (sk.rows - 1 - i) * sc->hop;
        inf->first = i == 0 ? sk.first : e - sc->hop;
        inf->n_frames = (uint32_t) (e - inf->first);
      }
      inf->valid = 0;
      r->n++;
    }
    if (sk.rows > 0)
      tu_check (r->info[r->n - 1].first + r->info[r->n - 1].n_frames == sk.end,
                "skipped rows end at %llu", (unsigned long long) sk.end);
    g -= k;
  }
}

static int
stats_equal (const SattnStats *a, const SattnStats *b)
{
  return a->windows == b->windows && a->frames == b->frames &&
         a->rows == b->rows && a->masked_keys == b->masked_keys &&
         a->invalid_frames == b->invalid_frames &&
         a->fully_masked_rows == b->fully_masked_rows &&
         a->nonfinite_scores == b->nonfinite_scores &&
         a->saturated_rows == b->saturated_rows &&
         memcmp (&a->score_min, &b->score_min, sizeof (double)) == 0 &&
         memcmp (&a->score_max, &b->score_max, sizeof (double)) == 0 &&
         memcmp (&a->lse_min, &b->lse_min, sizeof (double)) == 0 &&
         memcmp (&a->lse_max, &b->lse_max, sizeof (double)) == 0 &&
         memcmp (&a->max_weight_sum, &b->max_weight_sum, sizeof (double)) ==
             0 &&
         memcmp (&a->entropy_sum, &b->entropy_sum, sizeof (double)) == 0;
}

static void
check_weights (SattnStream *a, SattnStream *b, const char *when)
{
  size_t wr_a = 0, wc_a = 0, wr_b = 0, wc_b = 0;
  SattnStatus wa = sattn_stream_last_weights (a, -1, NULL, &wr_a, &wc_a);
  SattnStatus wb = sattn_stream_last_weights (b, -1, NULL, &wr_b, &wc_b);
  tu_check (wa == wb && wr_a == wr_b && wc_a == wc_b,
            "last weights shape %s: %zux%zu vs %zux%zu", when, wr_a, wc_a, wr_b,
            wc_b);
  if (wa == SATTN_OK && wa == wb && wr_a == wr_b && wc_a == wc_b) {
    float *wga = malloc (wr_a * wc_a * sizeof (float) + 1);
    float *wgb = malloc (wr_a * wc_a * sizeof (float) + 1);
    sattn_stream_last_weights (a, -1, wga, NULL, NULL);
    sattn_stream_last_weights (b, -1, wgb, NULL, NULL);
    tu_check (memcmp (wga, wgb, wr_a * wc_a * sizeof (float)) == 0,
              "last weights differ %s", when);
    free (wga);
    free (wgb);
  }
}

static void
run_case (const Fixture *f, const char *model_name, SattnOutputMode mode,
          SattnStartPolicy start, size_t n, size_t h, size_t prefix,
          uint64_t gap, int parts, size_t suffix, uint64_t seed)
{
  const size_t d = f->cfg.d_model;
  SattnStreamConfig sc = { .window = n,
                           .hop = h,
                           .output = mode,
                           .start = start,
                           .collect_stats = 1,
                           .keep_weights = 1,
                           .threads = fx_threads () };
  SattnStatus st;
  TuRng rng;
  tu_rng_init (&rng, seed);

  tu_case_begin ("%s %s n=%zu h=%zu %s prefix=%zu gap=%llu/%d suffix=%zu",
                 model_name, mode_names[mode], n, h,
                 start == SATTN_START_WAIT ? "wait" : "pad", prefix,
                 (unsigned long long) gap, parts, suffix);
  SattnStream *a = sattn_stream_new (f->model, &sc, &st);
  SattnStream *b = sattn_stream_new (f->model, &sc, &st);
  tu_check (a && b, "stream_new: %s", sattn_status_string (st));
  if (!a || !b) {
    sattn_stream_free (a);
    sattn_stream_free (b);
    tu_case_end ("no stream");
    return;
  }
  const size_t rf = sattn_stream_row_floats (a);
  size_t xn = prefix > suffix ? prefix : suffix;
  float *x = malloc ((xn + 1) * d * sizeof (float));
  uint8_t *valid = malloc (xn + 1);
  Rows ra = { .rf = rf }, rb = { .rf = rf };
  uint64_t skipped = 0;

  /* Prefix: random frames, ~1/5 flagged invalid, ~1/10 with a NaN. */
  tu_fill_normal (&rng, x, prefix * d, 1.0);
  for (size_t i = 0; i < prefix; i++) {
    valid[i] = tu_rng_range (&rng, 0, 4) != 0;
    if (tu_rng_range (&rng, 0, 9) == 0)
      x[i * d + tu_rng_range (&rng, 0, d - 1)] = NAN;
  }
  TuRng ra_rng = rng, rb_rng = rng;
  push_rows (a, &ra, x, valid, prefix, d, &ra_rng);
  push_rows (b, &rb, x, valid, prefix, d, &rb_rng);

  /* The gap: A pushes zero frames flagged invalid (NaN data would do as
   * well), B skips. */
  {
    const size_t blk = 512;
    float *z = calloc (blk * d, sizeof (float));
    uint8_t *zv = calloc (blk, 1);
    uint64_t left = gap;
    while (left > 0) {
      size_t k = (size_t) (left < blk ? left : blk);
      push_rows (a, &ra, z, zv, k, d, &ra_rng);
      left -= k;
    }
    free (z);
    free (zv);
  }
  skip_rows (b, &rb, gap, parts, &sc, &skipped);
  tu_check (sattn_stream_pending (a) == sattn_stream_pending (b),
            "pending %zu vs %zu", sattn_stream_pending (a),
            sattn_stream_pending (b));
  check_weights (a, b, "after the gap");
  tu_check (sattn_stream_max_rows (a, 2 * n) ==
                sattn_stream_max_rows (b, 2 * n),
            "schedule differs");

  tu_fill_normal (&rng, x, suffix * d, 1.0);
  for (size_t i = 0; i < suffix; i++)
    valid[i] = tu_rng_range (&rng, 0, 6) != 0;
  ra_rng = rng;
  rb_rng = rng;
  push_rows (a, &ra, x, valid, suffix, d, &ra_rng);
  push_rows (b, &rb, x, valid, suffix, d, &rb_rng);
  drain_rows (a, &ra);
  drain_rows (b, &rb);

  tu_check (ra.n == rb.n,
            "rows: pushed %zu, skipped path %zu (%llu "
            "skipped)",
            ra.n, rb.n, (unsigned long long) skipped);
  size_t bad_row = SIZE_MAX, bad_info = SIZE_MAX;
  for (size_t i = 0; i < ra.n && i < rb.n; i++) {
    if (bad_row == SIZE_MAX &&
        memcmp (ra.rows + i * rf, rb.rows + i * rf, rf * sizeof (float)))
      bad_row = i;
    if (bad_info == SIZE_MAX && (ra.info[i].first != rb.info[i].first ||
                                 ra.info[i].n_frames != rb.info[i].n_frames ||
                                 ra.info[i].valid != rb.info[i].valid))
      bad_info = i;
  }
  tu_check (bad_row == SIZE_MAX, "row %zu differs", bad_row);
  if (bad_info != SIZE_MAX)
    tu_check (0, "row %zu info {%llu,%u,%u} vs {%llu,%u,%u}", bad_info,
              (unsigned long long) ra.info[bad_info].first,
              ra.info[bad_info].n_frames, ra.info[bad_info].valid,
              (unsigned long long) rb.info[bad_info].first,
              rb.info[bad_info].n_frames, rb.info[bad_info].valid);

  SattnStats sa, sb;
  sattn_stream_get_stats (a, &sa, 0);
  sattn_stream_get_stats (b, &sb, 0);
  tu_check (stats_equal (&sa, &sb),
            "statistics differ (windows %llu vs "
            "%llu, masked keys %llu vs %llu, invalid %llu vs %llu)",
            (unsigned long long) sa.windows, (unsigned long long) sb.windows,
            (unsigned long long) sa.masked_keys,
            (unsigned long long) sb.masked_keys,
            (unsigned long long) sa.invalid_frames,
            (unsigned long long) sb.invalid_frames);

  check_weights (a, b, "at the end");
  tu_case_end ("%zu rows, %llu of them skipped", ra.n,
               (unsigned long long) skipped);

  free (ra.rows);
  free (ra.info);
  free (rb.rows);
  free (rb.info);
  free (x);
  free (valid);
  sattn_stream_free (a);
  sattn_stream_free (b);
}

/* A huge skip is O(window) and lands where the schedule says. */
static void
huge_case (const Fixture *f, SattnOutputMode mode)
{
  const size_t n = 16, h = 5, d = f->cfg.d_model;
  SattnStreamConfig sc = { .window = n,
                           .hop = h,
                           .output = mode,
                           .collect_stats = 1,
                           .threads = fx_threads () };
  SattnStatus st;
  SattnStream *s = sattn_stream_new (f->model, &sc, &st);
  float x[3 * 8];
  size_t got = 0;
  SattnSkipped sk;
  const uint64_t G = 1000000000000ull;

  tu_case_begin ("huge skip %s: 3 frames then 10^12 invalid", mode_names[mode]);
  memset (x, 0, sizeof x);
  for (size_t i = 0; i < 3 * d && i < 24; i++)
    x[i] = (float) i;
  size_t cap = 2 * n + 8;
  float *out = malloc (cap * sattn_stream_row_floats (s) * sizeof (float));
  SattnRowInfo *info = malloc (cap * sizeof (SattnRowInfo));
  st = sattn_stream_push (s, x, 3, NULL, out, cap, info, &got);
  tu_check (st == SATTN_OK && got == 0, "push");
  st = sattn_stream_skip (s, G, out, cap, info, &got, &sk);
  tu_check (st == SATTN_OK, "skip: %s", sattn_status_string (st));
  /* Windows end at 5, 10, ...: the lead is 16 frames (the third frame
   * sits at the window's last position), bringing the windows at 5, 10
   * and 15; every window up to 3 + G follows in closed form. */
  uint64_t end = 3 + G, last = end / h * h;
  tu_check (sk.end == last, "skipped span ends at %llu, want %llu",
            (unsigned long long) sk.end, (unsigned long long) last);
  if (mode == SATTN_OUTPUT_FRAMES)
    tu_check (got == 15 && sk.first == 15 && sk.rows == last - 15,
              "frames: %zu rows written, skipped [%llu, %llu) %llu rows", got,
              (unsigned long long) sk.first, (unsigned long long) sk.end,
              (unsigned long long) sk.rows);
  else
    tu_check (got == 3 && sk.first == 15 && sk.rows == (last - 15) / h,
              "pooled: %zu rows written, %llu skipped", got,
              (unsigned long long) sk.rows);
  tu_check (sattn_stream_pending (s) == (size_t) (end - last), "pending %zu",
            sattn_stream_pending (s));
  SattnStats stt;
  sattn_stream_get_stats (s, &stt, 0);
  tu_check (stt.frames == end && stt.invalid_frames == G &&
                stt.windows == last / h,
            "stats frames %llu invalid %llu "
            "windows %llu",
            (unsigned long long) stt.frames,
            (unsigned long long) stt.invalid_frames,
            (unsigned long long) stt.windows);
  /* The counter must not wrap. */
  st = sattn_stream_skip (s, UINT64_MAX - 5, out, cap, info, &got, &sk);
  tu_check (st == SATTN_E_INVAL &&
                sattn_stream_pending (s) == (size_t) (end - last),
            "skip past UINT64_MAX: %s", sattn_status_string (st));
  tu_case_end (" ");
  free (out);
  free (info);
  sattn_stream_free (s);
}

/* A RoPE stream after a skip that carries the frame count past 2^52
 * (beyond 2^53 a double no longer holds every frame index, and the
 * angles lost all precision): its rows after the GAP must be those of a
 * fresh stream given the same frames at index 0, bit for bit (the GAP's
 * frames and the start padding are both masked keys, and RoPE scores
 * depend on offsets only).  Skips of 2^52, 2^53 + 2^10 and 2^60 frames,
 * every output mode. */
static void
rope_far_case (const Fixture *f, SattnOutputMode mode, uint64_t G)
{
  const size_t n = 16, h = 4, d = f->cfg.d_model, T = 96;
  SattnConfig cfg = f->cfg;
  SattnStatus st;
  cfg.positions = SATTN_POSITIONS_ROPE;
  SattnModel *m = sattn_model_new (&cfg, &f->w, &st);
  SattnStreamConfig sc = { .window = n,
                           .hop = h,
                           .output = mode,
                           .start = SATTN_START_PAD,
                           .threads = fx_threads () };
  SattnStream *a = sattn_stream_new (m, &sc, &st);
  SattnStream *b = sattn_stream_new (m, &sc, &st);
  const size_t rf = sattn_stream_row_floats (a), cap = 2 * T + 4 * n;
  float *x = malloc (T * d * sizeof (float));
  float *oa = calloc (cap * rf, sizeof (float));
  float *ob = calloc (cap * rf, sizeof (float));
  size_t ga = 0, gb = 0;
  SattnSkipped sk;
  TuRng r;

  tu_case_begin ("RoPE after a skip of %llu frames, %s", (unsigned long long) G,
                 mode_names[mode]);
  tu_rng_init (&r, G ^ (uint64_t) mode);
  for (size_t i = 0; i < T * d; i++)
    x[i] = (float) tu_rng_normal (&r);
  st = sattn_stream_push (a, x, T, NULL, oa, cap, NULL, &ga);
  tu_check (st == SATTN_OK, "push A: %s", sattn_status_string (st));
  st = sattn_stream_skip (b, G, ob, cap, NULL, &gb, &sk);
  tu_check (st == SATTN_OK && gb == 0, "skip: %s, %zu rows",
            sattn_status_string (st), gb);
  st = sattn_stream_push (b, x, T, NULL, ob, cap, NULL, &gb);
  tu_check (st == SATTN_OK, "push B: %s", sattn_status_string (st));
  /* B's rows after the GAP: the windows ending at G + hop multiples, A's
   * at hop multiples (G is a multiple of the hop); frames mode: one row
   * per frame. */
  tu_check (ga == gb, "%zu rows vs %zu", ga, gb);
  double worst = 0.0;
  for (size_t i = 0; i < ga * rf && ga == gb; i++)
    worst = fmax (worst, fabs ((double) oa[i] - ob[i]));
  tu_check (ga == gb && memcmp (oa, ob, ga * rf * sizeof (float)) == 0,
            "rows differ from the same frames at index 0: max-abs %.3g", worst);
  tu_case_end (" ");
  free (x);
  free (oa);
  free (ob);
  sattn_stream_free (a);
  sattn_stream_free (b);
  sattn_model_free (m);
}

int
main (void)
{
  TuRng r;
  Fixture fid, ftr;

  tu_rng_init (&r, 20261130);
  if (fx_build (&fid, &r, 4, 2, 0, 0) != SATTN_OK ||
      fx_build (&ftr, &r, 6, 2,
                FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_BIASKV | FX_ZERO |
                    FX_CAUSAL,
                0) != SATTN_OK) {
    fprintf (stderr, "fixtures failed\n");
    return 1;
  }
  Fixture ftr_rope;
  if (fx_build (&ftr_rope, &r, 8, 2, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 0) !=
      SATTN_OK) {
    fprintf (stderr, "fixtures failed\n");
    return 1;
  }
  const Fixture *fx[2] = { &fid, &ftr };
  const char *fx_names[2] = { "identity", "trained+extra" };
  uint64_t seed = 1;

  for (int fi = 0; fi < 2; fi++)
    for (int mode = 0; mode < 4; mode++)
      for (int start = 0; start < 2; start++) {
        const size_t geo[][2] = { { 8, 1 }, { 8, 3 }, { 8, 8 }, { 5, 2 } };
        for (size_t gi = 0; gi < 4; gi++) {
          size_t n = geo[gi][0], h = geo[gi][1];
          const uint64_t gaps[] = { 0,         1,         n - 1,           n,
                                    n + h + 1, 3 * n + 2, 2000 + seed % 97 };
          const size_t prefixes[] = { 0, 2, n + 3, 4 * n + 1 };
          for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++)
            for (size_t p = 0; p < 4; p++) {
              int parts = (int) (1 + (seed % 3));
              run_case (fx[fi], fx_names[fi], (SattnOutputMode) mode,
                        (SattnStartPolicy) start, n, h, prefixes[p], gaps[g],
                        parts, 2 * n + 3, seed++);
            }
        }
      }
  for (int mode = 0; mode < 4; mode++)
    huge_case (&fid, (SattnOutputMode) mode);
  {
    const uint64_t far[] = { UINT64_C (1) << 52, (UINT64_C (1) << 53) + 1024,
                             UINT64_C (1) << 60 };
    for (size_t g = 0; g < sizeof far / sizeof far[0]; g++)
      for (int mode = 0; mode < 4; mode++)
        rope_far_case (&ftr_rope, (SattnOutputMode) mode, far[g]);
  }
  fx_free (&fid);
  fx_free (&ftr);
  fx_free (&ftr_rope);
  return tu_summary ("sattn_stream_skip");
}
