/* The core's rules in words: sattn_model_check and
 * sattn_stream_config_check agree with sattn_model_new / sattn_stream_new
 * on every rule, and their messages name the offending values and values
 * that work; the named default saturation threshold; the window schedule
 * (sattn_stream_frames_to_window, sattn_stream_window_rows) against a
 * schedule written from the header; the statistics merge and means
 * against the whole run and the float64 reference.
 *
 * Every case states the status the header's rule gives and a phrase the
 * message must hold; the constructors are run on the same input so the
 * check and the constructor cannot drift apart.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

#include "fixture.h"
#include "reference.h"
#include "testutil.h"

/* The check says want with a message holding `phrase` (and `phrase2` when
 * not NULL); sattn_model_new fails with the same status.  The message also
 * survives a tiny buffer (cut, NUL-terminated) and err == NULL. */
static void
expect_model (const char *what, const SattnConfig *cfg, const SattnWeights *w,
              SattnStatus want, const char *phrase, const char *phrase2)
{
  char err[512], tiny[8];
  memset (err, 'x', sizeof err);
  tu_case_begin ("model_check: %s -> %s", what, sattn_status_string (want));
  SattnStatus st = sattn_model_check (cfg, w, err, sizeof err);
  TU_CHECK_STATUS (st, want, "sattn_model_check");
  tu_check (memchr (err, '\0', sizeof err) != NULL, "message not terminated");
  if (want == SATTN_OK) {
    tu_check (err[0] == '\0', "message for a good configuration: '%s'", err);
  } else {
    tu_check (strstr (err, phrase) != NULL, "'%s' lacks '%s'", err, phrase);
    tu_check (phrase2 == NULL || strstr (err, phrase2) != NULL,
              "'%s' lacks '%s'", err, phrase2);
  }
  SattnStatus st2 = SATTN_E_IO;
  SattnModel *m = sattn_model_new (cfg, w, &st2);
  TU_CHECK_STATUS (st2, want, "sattn_model_new (same input)");
  tu_check ((m != NULL) == (want == SATTN_OK), "model %p for status %s",
            (void *) m, sattn_status_string (want));
  sattn_model_free (m);
  memset (tiny, 'x', sizeof tiny);
  TU_CHECK_STATUS (sattn_model_check (cfg, w, tiny, sizeof tiny), want,
                   "check with an 8-byte message buffer");
  tu_check (memchr (tiny, '\0', sizeof tiny) != NULL,
            "cut message not terminated");
  TU_CHECK_STATUS (sattn_model_check (cfg, w, NULL, 0), want,
                   "check with err = NULL");
  tu_case_end ("%s", err);
}

static void
test_model_rules (void)
{
  SattnConfig c;
  float wq[8 * 8], b[8];
  SattnWeights w;

  c = fx_config (8, 2);
  expect_model ("d_model=8 heads=2", &c, NULL, SATTN_OK, NULL, NULL);
  expect_model ("cfg NULL", NULL, NULL, SATTN_E_INVAL, "cfg is NULL", NULL);
  c = fx_config (0, 1);
  expect_model ("d_model=0", &c, NULL, SATTN_E_INVAL, "d_model=0", NULL);
  c = fx_config (8, 0);
  expect_model ("heads=0", &c, NULL, SATTN_E_INVAL, "heads=0", NULL);
  c = fx_config (8, 1);
  c.struct_size = 4;
  expect_model ("struct_size=4", &c, NULL, SATTN_E_INVAL,
                "SattnConfig.struct_size=4", "set it to sizeof (SattnConfig)");
  c = fx_config (8, 1);
  c.scale = -1.0f;
  expect_model ("scale=-1", &c, NULL, SATTN_E_INVAL, "scale=-1",
                "use scale=0 for the default");
  c.scale = NAN;
  expect_model ("scale=NaN", &c, NULL, SATTN_E_INVAL, "scale=nan", NULL);
  c.scale = INFINITY;
  expect_model ("scale=Inf", &c, NULL, SATTN_E_INVAL, "scale=inf", NULL);
  c.scale = FLT_MIN / 4;
  expect_model ("scale subnormal", &c, NULL, SATTN_E_INVAL,
                "below the smallest normal float",
                "use scale=0 for the "
                "default");
  c.scale = FLT_MIN;
  expect_model ("scale=FLT_MIN", &c, NULL, SATTN_OK, NULL, NULL);
#ifdef __SSE__
  {
    /* Denormals treated as zero (MXCSR DAZ and FTZ, which libraries a
     * process loads may set): a subnormal scale still refused, with its
     * value, not taken for 0 (the default). */
    const unsigned csr = _mm_getcsr ();
    _mm_setcsr (csr | 0x8040);
    c.scale = FLT_MIN / 4;
    expect_model ("scale subnormal under DAZ", &c, NULL, SATTN_E_INVAL,
                  "scale=2.93874e-39 is below the smallest normal float", NULL);
    c.scale = -FLT_MIN / 4;
    expect_model ("scale negative subnormal under DAZ", &c, NULL, SATTN_E_INVAL,
                  "scale=-2.93874e-39 is not a finite number", NULL);
    _mm_setcsr (csr);
  }
#endif

  c = fx_config (12, 5);
  expect_model ("heads=5 d_model=12", &c, NULL, SATTN_E_SHAPE,
                "heads=5 does not divide d_model=12",
                "heads values that work: 1, 2, 3, 4, 6, 12");
  /* More than 16 divisors: the 16 nearest the wanted value. */
  c = fx_config (720720, 7919);
  expect_model ("heads=7919 d_model=720720", &c, NULL, SATTN_E_SHAPE,
                "heads values that work: ", "7920");
  c = fx_config (8, 2);
  c.d_head = 3;
  expect_model ("identity, heads x d_head != d_model", &c, NULL, SATTN_E_SHAPE,
                "heads=2 x d_head=3 = 6 is not d_model=8",
                "use d_head=0 with heads one of: 1, 2, 4, 8");
  c = fx_config (8, 2);
  c.d_value = 3;
  expect_model ("identity, heads x d_value != d_model", &c, NULL, SATTN_E_SHAPE,
                "heads=2 x d_value=3", "no wv given");
  c = fx_config (8, 2);
  c.d_out = 5;
  expect_model ("d_out without wo", &c, NULL, SATTN_E_SHAPE, "d_out=5",
                "use d_out=0 or 8");
  c = fx_config (8, 2);
  c.d_head = SIZE_MAX / 2;
  expect_model ("sizes overflow", &c, NULL, SATTN_E_NOMEM,
                "overflow the address space", NULL);

  for (size_t i = 0; i < 64; i++)
    wq[i] = (float) (i % 9) / 9.0f;
  for (size_t i = 0; i < 8; i++)
    b[i] = 0.5f;
  memset (&w, 0, sizeof w);
  w.wo = wq;
  c = fx_config (8, 2);
  expect_model ("wo without d_out", &c, &w, SATTN_E_SHAPE, "wo needs d_out",
                NULL);
  memset (&w, 0, sizeof w);
  w.bias_k = b;
  expect_model ("bias_k without bias_v", &c, &w, SATTN_E_INVAL,
                "give both or neither", NULL);
  memset (&w, 0, sizeof w);
  w.wq = wq;
  w.wk = wq;
  w.wv = wq;
  w.bv = b;
  expect_model ("finite weights", &c, &w, SATTN_OK, NULL, NULL);
  wq[2 * 8 + 5] = NAN;
  expect_model ("NaN in wq", &c, &w, SATTN_E_NONFINITE,
                "weight wq holds NaN at [2, 5]", NULL);
  wq[2 * 8 + 5] = 0.0f;
  b[6] = -INFINITY;
  expect_model ("Inf in bv", &c, &w, SATTN_E_NONFINITE,
                "weight bv holds Inf at element 6", NULL);
}

static void
expect_stream (const char *what, const SattnModel *m,
               const SattnStreamConfig *sc, SattnStatus want,
               const char *phrase)
{
  char err[512];
  tu_case_begin ("stream_config_check: %s -> %s", what,
                 sattn_status_string (want));
  SattnStatus st = sattn_stream_config_check (m, sc, err, sizeof err);
  TU_CHECK_STATUS (st, want, "sattn_stream_config_check");
  if (want != SATTN_OK)
    tu_check (strstr (err, phrase) != NULL, "'%s' lacks '%s'", err, phrase);
  else
    tu_check (err[0] == '\0', "message for a good configuration: '%s'", err);
  /* Without a model: the same verdict on the configuration's own rules. */
  if (want != SATTN_E_NOMEM)
    TU_CHECK_STATUS (sattn_stream_config_check (NULL, sc, NULL, 0), want,
                     "the check without a model");
  SattnStatus st2 = SATTN_E_IO;
  SattnStream *s = sattn_stream_new (m, sc, &st2);
  TU_CHECK_STATUS (st2, want, "sattn_stream_new (same input)");
  tu_check ((s != NULL) == (want == SATTN_OK), "stream for status %s",
            sattn_status_string (want));
  sattn_stream_free (s);
  tu_case_end ("%s", want == SATTN_OK ? "" : err);
}

static void
test_stream_rules (void)
{
  SattnConfig c = fx_config (4, 1);
  SattnModel *m = sattn_model_new (&c, NULL, NULL);
  SattnStreamConfig sc;

  memset (&sc, 0, sizeof sc);
  sc.threads = 1;
  sc.window = 8;
  sc.hop = 4;
  expect_stream ("window=8 hop=4", m, &sc, SATTN_OK, NULL);
  sc.threads = -2;
  expect_stream ("threads=-2", m, &sc, SATTN_E_INVAL,
                 "threads=-2 is negative; use 1 (the calling thread only), "
                 "a count N > 1, or 0 for one per CPU");
  sc.threads = 1;
  expect_stream ("sc NULL", m, NULL, SATTN_E_INVAL, "sc is NULL");
  sc.window = 0;
  expect_stream ("window=0", m, &sc, SATTN_E_INVAL, "window=0");
  sc.window = 8;
  sc.hop = 0;
  expect_stream ("hop=0", m, &sc, SATTN_E_INVAL,
                 "hop must be between 1 and the window");
  sc.hop = 20;
  expect_stream ("hop=20 window=8", m, &sc, SATTN_E_INVAL,
                 "hop=20 is larger than window=8; hop must be between 1 "
                 "and the window (or the window at least 20)");
  sc.hop = 4;
  sc.output = (SattnOutputMode) 7;
  expect_stream ("output=7", m, &sc, SATTN_E_INVAL, "output=7 is not");
  sc.output = SATTN_OUTPUT_MEAN;
  sc.start = (SattnStartPolicy) 2;
  expect_stream ("start=2", m, &sc, SATTN_E_INVAL, "start=2 is not");
  sc.start = SATTN_START_WAIT;
  sc.invalid_policy = (SattnInvalidPolicy) 3;
  expect_stream ("invalid_policy=3", m, &sc, SATTN_E_INVAL,
                 "invalid_policy=3 is not");
  sc.invalid_policy = SATTN_INVALID_ZERO;
  sc.saturation_threshold = 1.5f;
  expect_stream ("saturation_threshold=1.5", m, &sc, SATTN_E_INVAL,
                 "saturation_threshold=1.5 is not within [0, 1]");
  sc.saturation_threshold = NAN;
  expect_stream ("saturation_threshold=NaN", m, &sc, SATTN_E_INVAL,
                 "is not within [0, 1]");
  sc.saturation_threshold = 1.0f;
  expect_stream ("saturation_threshold=1", m, &sc, SATTN_OK, NULL);
  sc.saturation_threshold = 0.0f;
  sc.window = SIZE_MAX / 4;
  sc.hop = 1;
  expect_stream ("window too large for the address space", m, &sc,
                 SATTN_E_NOMEM, "use a smaller window");
  sattn_model_free (m);
}

/* saturation_threshold = 0 means SATTN_DEFAULT_SATURATION: the same count
 * as the named value, and the count the float64 reference gives at that
 * threshold (within its 1e-6 band). */
static void
test_default_saturation (void)
{
  const size_t d = 8, n = 16;
  TuRng r;
  tu_rng_init (&r, 77);
  tu_case_begin ("saturation_threshold 0 = SATTN_DEFAULT_SATURATION (%g)",
                 (double) SATTN_DEFAULT_SATURATION);
  SattnConfig c = fx_config (d, 1);
  c.scale = 1.0f;
  SattnModel *m = sattn_model_new (&c, NULL, NULL);
  float x[16 * 8];
  /* Loud frames: many rows saturate, some do not. */
  tu_fill_normal (&r, x, n * d, 2.0);
  uint64_t counts[3];
  SattnStats st[3];
  for (int k = 0; k < 3; k++) {
    SattnStreamConfig sc;
    memset (&sc, 0, sizeof sc);
    sc.threads = 1;
    sc.window = n;
    sc.hop = n;
    sc.output = SATTN_OUTPUT_WINDOW;
    sc.collect_stats = 1;
    sc.saturation_threshold = k == 0   ? 0.0f
                              : k == 1 ? SATTN_DEFAULT_SATURATION
                                       : SATTN_SATURATION_EVERY_ROW;
    SattnStream *s = sattn_stream_new (m, &sc, NULL);
    float *out = malloc (sattn_stream_max_rows (s, n) *
                         sattn_stream_row_floats (s) * sizeof (float));
    size_t rows;
    tu_check (sattn_stream_push (s, x, n, NULL, out,
                                 sattn_stream_max_rows (s, n), NULL,
                                 &rows) == SATTN_OK &&
                  rows == 1,
              "push");
    sattn_stream_get_stats (s, &st[k], 0);
    counts[k] = st[k].saturated_rows;
    free (out);
    sattn_stream_free (s);
  }
  RefModel rm = { 0 };
  rm.d_model = rm.d_out = d;
  rm.heads = 1;
  rm.d_head = rm.d_value = d;
  rm.scale = 1.0;
  RefStats rs = { 0 };
  rs.sat_threshold = SATTN_DEFAULT_SATURATION;
  double *ro = malloc (n * d * sizeof *ro);
  ref_attend (&rm, x, n, NULL, NULL, NULL, ro, NULL, &rs);
  free (ro);
  tu_check (counts[0] == counts[1],
            "threshold 0 counts %llu, the named "
            "default %llu",
            (unsigned long long) counts[0], (unsigned long long) counts[1]);
  tu_check (counts[0] >= rs.sat_lo && counts[0] <= rs.sat_hi,
            "saturated_rows %llu, reference [%zu, %zu]",
            (unsigned long long) counts[0], rs.sat_lo, rs.sat_hi);
  /* A threshold of zero: every row with two or more visible keys (all
   * of them here); the reference at a threshold of 1e-300. */
  RefStats rz = { 0 };
  rz.sat_threshold = 1e-300;
  ro = malloc (n * d * sizeof *ro);
  ref_attend (&rm, x, n, NULL, NULL, NULL, ro, NULL, &rz);
  free (ro);
  tu_check (SATTN_SATURATION_EVERY_ROW == FLT_MIN,
            "SATTN_SATURATION_EVERY_ROW is not FLT_MIN");
  tu_check (counts[2] == rz.saturated && rz.saturated == n,
            "threshold zero counts %llu, reference %zu of %zu rows",
            (unsigned long long) counts[2], rz.saturated, n);
  tu_check (rs.saturated > 0 && rs.saturated < n,
            "the input should saturate some rows but not all (%zu of %zu)",
            rs.saturated, n);
  sattn_model_free (m);
  tu_case_end ("%llu of %zu rows saturated (reference %zu)",
               (unsigned long long) counts[0], n, rs.saturated);
}

/* ------------------------------------------------------------ schedule */

/* The schedule, written here from the header's words (independent of the
 * core): windows end at frame counts e = first, first + hop, ... with
 * first = hop (pad) or window (wait); a drain ends one at T when frames
 * are pending, and the next is due hop frames later.  Rows per window:
 * frames mode the frames since the last window (at most window), window
 * and mean modes window, last mode 1. */
typedef struct {
  size_t window, hop;
  SattnOutputMode output;
  SattnStartPolicy start;
  uint64_t total, next, last; /* frames pushed, next window, last end */
} Sched;

static size_t
sched_rows (const Sched *k, uint64_t end)
{
  if (k->output == SATTN_OUTPUT_FRAMES) {
    uint64_t r = end - k->last;
    return (size_t) (r < k->window ? r : k->window);
  }
  return k->output == SATTN_OUTPUT_LAST ? 1 : k->window;
}

static void
test_schedule (void)
{
  TuRng r;
  tu_rng_init (&r, 4242);
  SattnConfig c = fx_config (4, 2);
  SattnModel *m = sattn_model_new (&c, NULL, NULL);
  float x[64 * 4];
  size_t windows_checked = 0;

  tu_fill_normal (&r, x, 64 * 4, 1.0);
  tu_case_begin ("frames_to_window / window_rows against the schedule");
  for (int cfg = 0; cfg < 48 && !tu_case_failed (); cfg++) {
    SattnStreamConfig sc;
    memset (&sc, 0, sizeof sc);
    sc.threads = 1;
    sc.window = tu_rng_range (&r, 1, 12);
    sc.hop = tu_rng_range (&r, 1, sc.window);
    sc.output = (SattnOutputMode) (cfg % 4);
    sc.start = (SattnStartPolicy) ((cfg / 4) % 2);
    sc.keep_weights = 1;
    sc.collect_stats = 1;
    Sched k = { sc.window, sc.hop, sc.output, sc.start, 0, 0, 0 };
    k.next = sc.start == SATTN_START_WAIT ? sc.window : sc.hop;
    tu_check (sattn_stream_config_window_rows (&sc) ==
                  (sc.output == SATTN_OUTPUT_FRAMES ? sc.hop
                   : sc.output == SATTN_OUTPUT_LAST ? 1
                                                    : sc.window),
              "config_window_rows %zu (window %zu hop %zu output %d)",
              sattn_stream_config_window_rows (&sc), sc.window, sc.hop,
              (int) sc.output);
    SattnStream *s = sattn_stream_new (m, &sc, NULL);
    float *out = malloc (64 * sattn_stream_row_floats (s) * sizeof (float));
    for (int step = 0; step < 40 && !tu_case_failed (); step++) {
      uint64_t due = sattn_stream_frames_to_window (s);
      tu_check (due == k.next - k.total,
                "cfg %d step %d: frames_to_window "
                "%llu, want %llu",
                cfg, step, (unsigned long long) due,
                (unsigned long long) (k.next - k.total));
      size_t want_rows = sched_rows (&k, k.next);
      tu_check (sattn_stream_window_rows (s, 0) == want_rows,
                "cfg %d step %d: window_rows %zu, want %zu", cfg, step,
                sattn_stream_window_rows (s, 0), want_rows);
      uint64_t pend = k.total - k.last;
      size_t want_drain = pend == 0 ? 0 : sched_rows (&k, k.total);
      tu_check (sattn_stream_window_rows (s, 1) == want_drain,
                "cfg %d step %d: drain window_rows %zu, want %zu", cfg, step,
                sattn_stream_window_rows (s, 1), want_drain);
      SattnStats before, after;
      sattn_stream_get_stats (s, &before, 0);
      size_t rows = 0, wr = 0, wc = 0;
      int act = (int) tu_rng_range (&r, 0, 5);
      if (act == 0) {
        /* a drain */
        tu_check (sattn_stream_drain (s, out, 64, NULL, &rows) == SATTN_OK,
                  "drain");
        if (pend > 0) {
          tu_check (sattn_stream_last_weights (s, 0, NULL, &wr, &wc) ==
                            SATTN_OK &&
                        wr == want_drain,
                    "cfg %d step %d: the "
                    "drain's window has %zu rows, want %zu",
                    cfg, step, wr, want_drain);
          k.last = k.total;
          k.next = k.total + k.hop;
          windows_checked++;
        }
      } else if (act == 1 && due > 1) {
        /* fewer frames than due: no window */
        size_t cnt = tu_rng_range (&r, 1, (size_t) due - 1);
        tu_check (sattn_stream_push (s, x, cnt, NULL, out, 64, NULL, &rows) ==
                      SATTN_OK,
                  "push");
        sattn_stream_get_stats (s, &after, 0);
        tu_check (after.windows == before.windows,
                  "cfg %d step %d: %zu of "
                  "%llu frames computed a window",
                  cfg, step, cnt, (unsigned long long) due);
        k.total += cnt;
      } else {
        /* exactly the frames due: one window, with the rows said */
        tu_check (sattn_stream_push (s, x, (size_t) due, NULL, out, 64, NULL,
                                     &rows) == SATTN_OK,
                  "push");
        sattn_stream_get_stats (s, &after, 0);
        tu_check (after.windows == before.windows + 1,
                  "cfg %d step %d: "
                  "%llu frames computed %llu windows",
                  cfg, step, (unsigned long long) due,
                  (unsigned long long) (after.windows - before.windows));
        tu_check (sattn_stream_last_weights (s, 0, NULL, &wr, &wc) ==
                          SATTN_OK &&
                      wr == want_rows,
                  "cfg %d step %d: the window "
                  "has %zu rows, want %zu",
                  cfg, step, wr, want_rows);
        k.total += due;
        k.last = k.total;
        k.next = k.total + k.hop;
        windows_checked++;
      }
    }
    free (out);
    sattn_stream_free (s);
  }
  tu_check (sattn_stream_frames_to_window (NULL) == 0 &&
                sattn_stream_window_rows (NULL, 0) == 0 &&
                sattn_stream_config_window_rows (NULL) == 0,
            "NULL arguments");
  sattn_model_free (m);
  tu_case_end ("%zu windows", windows_checked);
}

/* --------------------------------------------------------------- stats */

/* Statistics taken window by window and merged equal the statistics of
 * the whole run (counts exactly, sums within 1e-12 relative: the order of
 * the additions differs), and their means agree with the float64
 * reference's (1e-5). */
static void
test_stats_merge (void)
{
  const size_t d = 8, n = 8, hop = 4, T = 40;
  TuRng r;
  tu_rng_init (&r, 99);
  tu_case_begin ("sattn_stats_merge / mean_max_weight / mean_entropy");
  SattnConfig c = fx_config (d, 2);
  SattnModel *m = sattn_model_new (&c, NULL, NULL);
  float x[40 * 8];
  tu_fill_normal (&r, x, T * d, 1.5);
  x[13 * d + 2] = NAN; /* one invalid frame: masked key */
  SattnStreamConfig sc;
  memset (&sc, 0, sizeof sc);
  sc.threads = 1;
  sc.window = n;
  sc.hop = hop;
  sc.output = SATTN_OUTPUT_WINDOW;
  sc.collect_stats = 1;
  SattnStream *whole = sattn_stream_new (m, &sc, NULL);
  SattnStream *parts = sattn_stream_new (m, &sc, NULL);
  float *out = malloc (T * n * d * sizeof (float));
  SattnStats acc, w, all, refsum;
  size_t rows;
  sattn_stats_clear (&acc);
  sattn_stats_clear (&refsum);
  memset (&refsum, 0, sizeof refsum);
  double ref_maxw = 0.0, ref_ent = 0.0;
  size_t ref_rows = 0;
  sattn_stream_push (whole, x, T, NULL, out, T, NULL, &rows);
  sattn_stream_get_stats (whole, &all, 0);
  for (size_t f = 0; f < T; f += hop) {
    sattn_stream_push (parts, x + f * d, hop, NULL, out, T, NULL, &rows);
    sattn_stream_get_stats (parts, &w, 1);
    sattn_stats_merge (&acc, &w);
    /* The reference over the same window: keys [f + hop - n, f + hop). */
    size_t end = f + hop, lo = end > n ? end - n : 0, nw = end - lo;
    RefModel rm = { 0 };
    rm.d_model = rm.d_out = d;
    rm.heads = 2;
    rm.d_head = rm.d_value = d / 2;
    rm.scale = (double) sattn_model_config (m)->scale;
    RefStats rs = { 0 };
    double *ro = malloc (nw * d * sizeof *ro);
    uint8_t qv[8];
    for (size_t j = 0; j < nw; j++) /* an unusable query: zeros, no row */
      qv[j] = lo + j != 13;
    ref_attend (&rm, x + lo * d, nw, NULL, qv, NULL, ro, NULL, &rs);
    free (ro);
    ref_maxw += rs.max_weight_sum;
    ref_ent += rs.entropy_sum;
    ref_rows += rs.rows;
  }
  tu_check (acc.windows == all.windows && acc.frames == all.frames &&
                acc.rows == all.rows && acc.masked_keys == all.masked_keys &&
                acc.invalid_frames == all.invalid_frames &&
                acc.fully_masked_rows == all.fully_masked_rows &&
                acc.nonfinite_scores == all.nonfinite_scores &&
                acc.saturated_rows == all.saturated_rows,
            "merged counts differ from the whole run's");
  tu_check (acc.invalid_frames == 1 && acc.masked_keys > 0,
            "the NaN frame is not counted (invalid %llu, masked %llu)",
            (unsigned long long) acc.invalid_frames,
            (unsigned long long) acc.masked_keys);
  tu_check (acc.score_min == all.score_min && acc.score_max == all.score_max &&
                acc.lse_min == all.lse_min && acc.lse_max == all.lse_max,
            "merged extremes differ");
  tu_check (fabs (acc.max_weight_sum - all.max_weight_sum) <=
                    1e-12 * all.max_weight_sum &&
                fabs (acc.entropy_sum - all.entropy_sum) <=
                    1e-12 * all.entropy_sum,
            "merged sums differ");
  tu_check (acc.rows == ref_rows, "rows %llu, reference %zu",
            (unsigned long long) acc.rows, ref_rows);
  double mw = sattn_stats_mean_max_weight (&acc);
  double me = sattn_stats_mean_entropy (&acc);
  tu_check (fabs (mw - ref_maxw / (double) ref_rows) <= 1e-5,
            "mean max weight %.9g, reference %.9g", mw,
            ref_maxw / (double) ref_rows);
  tu_check (fabs (me - ref_ent / (double) ref_rows) <= 1e-5,
            "mean entropy %.9g, reference %.9g", me,
            ref_ent / (double) ref_rows);
  SattnStats empty;
  sattn_stats_clear (&empty);
  tu_check (sattn_stats_mean_max_weight (&empty) == 0.0 &&
                sattn_stats_mean_entropy (&empty) == 0.0 &&
                sattn_stats_mean_entropy (NULL) == 0.0,
            "means without rows");
  SattnStats keep = acc;
  sattn_stats_merge (&acc, &empty);
  tu_check (memcmp (&keep, &acc, sizeof acc) == 0,
            "merging empty statistics changed the total");
  sattn_stats_merge (NULL, &acc);
  sattn_stats_merge (&acc, NULL);
  free (out);
  sattn_stream_free (whole);
  sattn_stream_free (parts);
  sattn_model_free (m);
  tu_case_end ("mean max weight %.6f (reference %.6f), mean entropy %.6f "
               "(reference %.6f)",
               mw, ref_maxw / (double) ref_rows, me,
               ref_ent / (double) ref_rows);
}

int
main (void)
{
  test_model_rules ();
  test_stream_rules ();
  test_default_saturation ();
  test_schedule ();
  test_stats_merge ();
  return tu_summary ("test-rules");
}
