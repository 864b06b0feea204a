/* API contract of libsattn: status values for bad arguments, NULL-safe
 * destructors, status strings, resolved configuration, ownership of the
 * weights, size overflow, and the accessors' error cases.
 *
 * Expected statuses (from the header's enum comments):
 *   NULL pointer, zero / negative / NaN / infinite value  -> SATTN_E_INVAL
 *   dimensions that do not fit together                    -> SATTN_E_SHAPE
 *   non-finite weights                                     -> SATTN_E_NONFINITE
 *   sizes that overflow                                    -> SATTN_E_NOMEM
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "testutil.h"

/* Under AddressSanitizer, let an impossible allocation return NULL (as the
 * C library does) instead of aborting: the overflow cases below must fail
 * cleanly whichever way the core detects them. */
const char *__asan_default_options (void);
const char *
__asan_default_options (void)
{
  return "allocator_may_return_null=1";
}

/* sattn_model_new must fail with want, return NULL and set *status; and
 * must not crash with status == NULL. */
static void
expect_model_fail (const char *what, const SattnConfig *cfg,
                   const SattnWeights *w, SattnStatus want)
{
  tu_case_begin ("model_new: %s -> %s", what, sattn_status_string (want));
  SattnStatus st = SATTN_OK;
  SattnModel *m = sattn_model_new (cfg, w, &st);
  tu_check (m == NULL, "returned a model");
  TU_CHECK_STATUS (st, want, "status");
  sattn_model_free (m);
  m = sattn_model_new (cfg, w, NULL);
  tu_check (m == NULL, "returned a model (status NULL)");
  sattn_model_free (m);
  tu_case_end (NULL);
}

static void
expect_stream_fail (const char *what, const SattnModel *m,
                    const SattnStreamConfig *sc, SattnStatus want)
{
  tu_case_begin ("stream_new: %s -> %s", what, sattn_status_string (want));
  SattnStatus st = SATTN_OK;
  SattnStream *s = sattn_stream_new (m, sc, &st);
  tu_check (s == NULL, "returned a stream");
  TU_CHECK_STATUS (st, want, "status");
  sattn_stream_free (s);
  s = sattn_stream_new (m, sc, NULL);
  tu_check (s == NULL, "returned a stream (status NULL)");
  sattn_stream_free (s);
  tu_case_end (NULL);
}

static void
test_status_strings (void)
{
  tu_case_begin ("sattn_status_string for every value");
  const SattnStatus all[] = { SATTN_OK,      SATTN_E_INVAL,     SATTN_E_SHAPE,
                              SATTN_E_NOMEM, SATTN_E_NONFINITE, SATTN_E_SPACE,
                              SATTN_E_IO,    SATTN_E_FORMAT,    SATTN_E_MISSING,
                              SATTN_E_DTYPE };
  const size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; i++) {
    const char *s = sattn_status_string (all[i]);
    if (!tu_check (s != NULL && s[0] != '\0', "status %d: NULL or empty",
                   (int) all[i]))
      continue;
    for (size_t j = 0; j < i; j++)
      tu_check (strcmp (s, sattn_status_string (all[j])) != 0,
                "statuses %d and %d share the text \"%s\"", (int) all[i],
                (int) all[j], s);
  }
  const int odd[] = { -1, (int) SATTN_E_DTYPE + 1, 1000 };
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    const char *s = sattn_status_string ((SattnStatus) odd[i]);
    tu_check (s != NULL && s[0] != '\0',
              "out-of-range status %d: NULL or "
              "empty",
              odd[i]);
  }
  tu_case_end (NULL);
}

static void
test_free_null (void)
{
  tu_case_begin ("sattn_model_free (NULL), sattn_stream_free (NULL)");
  sattn_model_free (NULL);
  sattn_stream_free (NULL);
  SattnStats st;
  memset (&st, 0xab, sizeof st);
  sattn_stats_clear (&st);
  tu_check (st.windows == 0 && st.frames == 0 && st.rows == 0 &&
                st.masked_keys == 0 && st.invalid_frames == 0 &&
                st.fully_masked_rows == 0 && st.nonfinite_scores == 0 &&
                st.saturated_rows == 0 && st.max_weight_sum == 0.0 &&
                st.entropy_sum == 0.0,
            "sattn_stats_clear left a counter set");
  tu_check (st.score_min == INFINITY && st.score_max == -INFINITY,
            "sattn_stats_clear: score range [%g, %g], want [+inf, -inf] "
            "(none seen)",
            st.score_min, st.score_max);
  tu_case_end (NULL);
}

static void
test_model_args (void)
{
  SattnConfig c;

  expect_model_fail ("cfg NULL", NULL, NULL, SATTN_E_INVAL);
  c = fx_config (0, 1);
  expect_model_fail ("d_model 0", &c, NULL, SATTN_E_INVAL);
  c = fx_config (8, 0);
  expect_model_fail ("heads 0", &c, NULL, SATTN_E_INVAL);
  c = fx_config (6, 4);
  expect_model_fail ("heads 4 do not divide d_model 6", &c, NULL,
                     SATTN_E_SHAPE);
  c = fx_config (2, 4);
  expect_model_fail ("heads 4 > d_model 2", &c, NULL, SATTN_E_SHAPE);
  c = fx_config (8, 1);
  c.scale = -1.0f;
  expect_model_fail ("scale -1", &c, NULL, SATTN_E_INVAL);
  c.scale = NAN;
  expect_model_fail ("scale NaN", &c, NULL, SATTN_E_INVAL);
  c.scale = INFINITY;
  expect_model_fail ("scale +inf", &c, NULL, SATTN_E_INVAL);

  /* identity projections need heads * d_head == d_model */
  c = fx_config (8, 2);
  c.d_head = 3;
  expect_model_fail ("identity, heads*d_head 6 != d_model 8", &c, NULL,
                     SATTN_E_SHAPE);
  c = fx_config (8, 2);
  c.d_value = 3;
  expect_model_fail ("identity V, heads*d_value 6 != d_model 8", &c, NULL,
                     SATTN_E_SHAPE);

  /* partial weights: wq/wk given for d_head 3, wv identity with d_value 3 */
  static float wq[6 * 8], wk[6 * 8], wv[6 * 8];
  for (size_t i = 0; i < 6 * 8; i++)
    wq[i] = wk[i] = wv[i] = 0.01f * (float) i;
  SattnWeights w;
  memset (&w, 0, sizeof w);
  w.wq = wq;
  w.wk = wk;
  c = fx_config (8, 2);
  c.d_head = 3;
  expect_model_fail ("wv NULL (identity) with d_value 3 (heads*3 != 8)", &c, &w,
                     SATTN_E_SHAPE);
  memset (&w, 0, sizeof w);
  w.wk = wk;
  w.wv = wv;
  expect_model_fail ("wq NULL (identity) with d_head 3 (heads*3 != 8)", &c, &w,
                     SATTN_E_SHAPE);
  /* no wo: d_out must equal heads * d_value */
  c = fx_config (8, 2);
  c.d_out = 5;
  expect_model_fail ("wo NULL with d_out 5 != heads*d_value 8", &c, NULL,
                     SATTN_E_SHAPE);

  /* non-finite weights */
  Fixture f;
  TuRng rng;
  tu_rng_init (&rng, 7);
  const unsigned all = FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_BIASKV;
  const char *names[] = { "wq", "bq", "wk", "bk",     "wv",
                          "bv", "wo", "bo", "bias_k", "bias_v" };
  for (int which = 0; which < 10; which++) {
    for (int kind = 0; kind < 3; kind++) {
      fx_build (&f, &rng, 8, 2, all, 0);
      sattn_model_free (f.model);
      f.model = NULL;
      const float *ptrs[10] = {
        f.w.wq, f.w.bq, f.w.wk, f.w.bk,     f.w.wv,
        f.w.bv, f.w.wo, f.w.bo, f.w.bias_k, f.w.bias_v
      };
      float *p = (float *) ptrs[which];
      const float bad = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
      p[which % 3] = bad;
      char what[64];
      snprintf (what, sizeof what, "%s contains %s", names[which],
                kind == 0   ? "NaN"
                : kind == 1 ? "+Inf"
                            : "-Inf");
      expect_model_fail (what, &f.cfg, &f.w, SATTN_E_NONFINITE);
      fx_free (&f);
    }
  }

  /* bias_k without bias_v (header: both or neither) */
  tu_case_begin ("model_new: bias_k without bias_v -> an error");
  {
    fx_build (&f, &rng, 8, 2, FX_PROJ | FX_BIASKV, 0);
    sattn_model_free (f.model);
    f.model = NULL;
    SattnWeights w2 = f.w;
    w2.bias_v = NULL;
    SattnStatus st = SATTN_OK;
    SattnModel *m = sattn_model_new (&f.cfg, &w2, &st);
    tu_check (m == NULL && (st == SATTN_E_INVAL || st == SATTN_E_SHAPE),
              "got %s, want SATTN_E_INVAL or SATTN_E_SHAPE",
              sattn_status_string (st));
    sattn_model_free (m);
    fx_free (&f);
  }
  tu_case_end (NULL);
}

static void
test_model_resolved (void)
{
  tu_case_begin ("model_new: defaults resolved");
  SattnConfig c = fx_config (12, 3);
  SattnStatus st;
  SattnModel *m = sattn_model_new (&c, NULL, &st);
  if (TU_CHECK_STATUS (st, SATTN_OK, "identity 12/3") && m) {
    const SattnConfig *r = sattn_model_config (m);
    tu_check (r->d_model == 12 && r->heads == 3 && r->d_head == 4 &&
                  r->d_value == 4 && r->d_out == 12,
              "resolved d_model %zu heads %zu d_head %zu d_value %zu d_out "
              "%zu, want 12 3 4 4 12",
              r->d_model, r->heads, r->d_head, r->d_value, r->d_out);
    tu_check (fabs (r->scale - 0.5) <= 1e-7, "resolved scale %.9g, want 0.5",
              r->scale);
    tu_check (sattn_model_d_out (m) == 12, "d_out %zu", sattn_model_d_out (m));
    tu_check (sattn_model_extra_keys (m) == 0, "extra keys %zu",
              sattn_model_extra_keys (m));
  }
  sattn_model_free (m);

  Fixture f;
  TuRng rng;
  tu_rng_init (&rng, 11);
  const unsigned fl[] = { FX_PROJ | FX_BIASKV, FX_PROJ | FX_ZERO,
                          FX_PROJ | FX_BIASKV | FX_ZERO,
                          FX_PROJ | FX_OUT | FX_DIMS | FX_UNIT };
  const size_t want_extra[] = { 1, 1, 2, 0 };
  for (size_t i = 0; i < 4; i++) {
    st = fx_build (&f, &rng, 8, 2, fl[i], 0);
    if (TU_CHECK_STATUS (st, SATTN_OK, "fixture model")) {
      tu_check (sattn_model_extra_keys (f.model) == want_extra[i],
                "extra keys %zu, want %zu", sattn_model_extra_keys (f.model),
                want_extra[i]);
      const SattnConfig *r = sattn_model_config (f.model);
      tu_check (r->d_head == f.ref.d_head && r->d_value == f.ref.d_value &&
                    r->d_out == f.ref.d_out,
                "resolved dims");
      tu_check (fabs (r->scale - f.ref.scale) <= 1e-7 * f.ref.scale,
                "resolved scale %.9g, want %.9g", r->scale, f.ref.scale);
    }
    fx_free (&f);
  }
  tu_case_end (NULL);
}

/* The model keeps its own copy of the weights. */
static void
test_weights_copied (void)
{
  tu_case_begin ("model_new copies the weights");
  Fixture f;
  TuRng rng;
  tu_rng_init (&rng, 13);
  unsigned fl = FX_PROJ | FX_BIAS | FX_OUT | FX_BO | FX_BIASKV | FX_ZERO;
  if (TU_CHECK_STATUS (fx_build (&f, &rng, 8, 2, fl, 0), SATTN_OK, "model")) {
    float x[5 * 8], a[5 * 8], b[5 * 8];
    tu_fill_normal (&rng, x, 5 * 8, 1.0);
    SattnStatus s1 = sattn_attend (f.model, x, 5, NULL, a, NULL, NULL);
    for (size_t i = 0; i < sizeof f.bufs / sizeof f.bufs[0]; i++)
      if (f.bufs[i])
        f.bufs[i][0] = NAN, f.bufs[i][1] = 1e30f;
    SattnStatus s2 = sattn_attend (f.model, x, 5, NULL, b, NULL, NULL);
    TU_CHECK_STATUS (s1, SATTN_OK, "attend before");
    TU_CHECK_STATUS (s2, SATTN_OK,
                     "attend after changing the caller's "
                     "weights");
    tu_check (memcmp (a, b, sizeof a) == 0, "output changed with the "
                                            "caller's weights");
  }
  fx_free (&f);
  tu_case_end (NULL);
}

static void
test_attend_args (void)
{
  tu_case_begin ("attend: NULL arguments -> SATTN_E_INVAL");
  SattnConfig c = fx_config (4, 2);
  SattnModel *m = sattn_model_new (&c, NULL, NULL);
  tu_check (m != NULL, "identity model");
  float x[3 * 4] = { 0 }, out[3 * 4];
  TU_CHECK_STATUS (sattn_attend (NULL, x, 3, NULL, out, NULL, NULL),
                   SATTN_E_INVAL, "model NULL");
  if (m) {
    TU_CHECK_STATUS (sattn_attend (m, NULL, 3, NULL, out, NULL, NULL),
                     SATTN_E_INVAL, "x NULL");
    TU_CHECK_STATUS (sattn_attend (m, x, 3, NULL, NULL, NULL, NULL),
                     SATTN_E_INVAL, "out NULL");
    SattnMask mk = { NULL, NULL, NULL };
    TU_CHECK_STATUS (sattn_attend (m, x, 3, &mk, out, NULL, NULL), SATTN_OK,
                     "empty mask");
  }
  sattn_model_free (m);
  tu_case_end (NULL);
}

static void
test_stream_args (void)
{
  SattnConfig c = fx_config (4, 2);
  SattnModel *m = sattn_model_new (&c, NULL, NULL);
  SattnStreamConfig sc = { .window = 4,
                           .hop = 2,
                           .output = SATTN_OUTPUT_FRAMES,
                           .start = SATTN_START_PAD,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = 1 };
  SattnStreamConfig b;

  expect_stream_fail ("model NULL", NULL, &sc, SATTN_E_INVAL);
  expect_stream_fail ("config NULL", m, NULL, SATTN_E_INVAL);
  b = sc;
  b.window = 0;
  b.hop = 0;
  expect_stream_fail ("window 0", m, &b, SATTN_E_INVAL);
  b = sc;
  b.hop = 0;
  expect_stream_fail ("hop 0", m, &b, SATTN_E_INVAL);
  b = sc;
  b.hop = 5;
  expect_stream_fail ("hop 5 > window 4", m, &b, SATTN_E_INVAL);
  b = sc;
  b.output = (SattnOutputMode) 17;
  expect_stream_fail ("output mode 17", m, &b, SATTN_E_INVAL);
  b = sc;
  b.start = (SattnStartPolicy) 9;
  expect_stream_fail ("start policy 9", m, &b, SATTN_E_INVAL);
  b = sc;
  b.threads = -1;
  expect_stream_fail ("threads -1", m, &b, SATTN_E_INVAL);

  tu_case_begin ("stream: push / drain / last_weights argument errors");
  SattnStatus st;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  TU_CHECK_STATUS (st, SATTN_OK, "stream_new");
  if (s) {
    float x[8 * 4] = { 0 }, out[16 * 4];
    SattnRowInfo info[16];
    size_t nr = 0;
    TU_CHECK_STATUS (sattn_stream_push (NULL, x, 1, NULL, out, 16, info, &nr),
                     SATTN_E_INVAL, "push stream NULL");
    TU_CHECK_STATUS (sattn_stream_push (s, NULL, 2, NULL, out, 16, info, &nr),
                     SATTN_E_INVAL, "push frames NULL");
    TU_CHECK_STATUS (sattn_stream_drain (NULL, out, 16, info, &nr),
                     SATTN_E_INVAL, "drain stream NULL");
    size_t rows, cols;
    TU_CHECK_STATUS (sattn_stream_last_weights (s, 0, NULL, &rows, &cols),
                     SATTN_E_INVAL, "last_weights without keep_weights");
    TU_CHECK_STATUS (sattn_stream_last_weights (NULL, 0, NULL, &rows, &cols),
                     SATTN_E_INVAL, "last_weights stream NULL");
    /* a drain with nothing pending emits nothing */
    nr = 99;
    TU_CHECK_STATUS (sattn_stream_drain (s, out, 16, info, &nr), SATTN_OK,
                     "drain of an empty stream");
    tu_check (nr == 0, "drain of an empty stream gave %zu rows", nr);
    tu_check (sattn_stream_pending (s) == 0, "pending on an empty stream");
    /* pending counts frames not yet accounted for */
    TU_CHECK_STATUS (sattn_stream_push (s, x, 1, NULL, out, 16, info, &nr),
                     SATTN_OK, "push 1 frame");
    tu_check (nr == 0 && sattn_stream_pending (s) == 1,
              "after 1 frame (hop 2): %zu rows, pending %zu", nr,
              sattn_stream_pending (s));
    sattn_stream_reset (s);
    tu_check (sattn_stream_pending (s) == 0, "pending %zu after reset",
              sattn_stream_pending (s));
  }
  sattn_stream_free (s);

  sc.keep_weights = 1;
  s = sattn_stream_new (m, &sc, &st);
  if (s) {
    size_t rows, cols;
    TU_CHECK_STATUS (sattn_stream_last_weights (s, 0, NULL, &rows, &cols),
                     SATTN_E_INVAL, "last_weights before any window");
    TU_CHECK_STATUS (sattn_stream_last_weights (s, 2, NULL, &rows, &cols),
                     SATTN_E_INVAL, "last_weights head 2 of 2 (none yet)");
    float x[2 * 4] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out[16 * 4];
    SattnRowInfo info[16];
    size_t nr;
    TU_CHECK_STATUS (sattn_stream_push (s, x, 2, NULL, out, 16, info, &nr),
                     SATTN_OK, "push");
    TU_CHECK_STATUS (sattn_stream_last_weights (s, 0, NULL, &rows, &cols),
                     SATTN_OK, "last_weights after a window");
    TU_CHECK_STATUS (sattn_stream_last_weights (s, 2, NULL, &rows, &cols),
                     SATTN_E_INVAL, "last_weights head 2 of 2");
    TU_CHECK_STATUS (sattn_stream_last_weights (s, -2, NULL, &rows, &cols),
                     SATTN_E_INVAL, "last_weights head -2");
  }
  sattn_stream_free (s);
  sattn_model_free (m);
  tu_case_end (NULL);
}

/* Sizes whose byte counts overflow size_t must fail, not wrap. */
static void
test_overflow (void)
{
  tu_case_begin ("sizes that overflow -> SATTN_E_NOMEM");
  SattnConfig c = fx_config (SIZE_MAX / 2 + 2, 1);
  SattnStatus st = SATTN_OK;
  SattnModel *m = sattn_model_new (&c, NULL, &st);
  tu_check (m != NULL || st == SATTN_E_NOMEM,
            "identity, d_model SIZE_MAX/2+2: %s, want a model (no storage "
            "needed) or SATTN_E_NOMEM",
            sattn_status_string (st));
  if (m) {
    SattnStreamConfig sc = { .window = 2,
                             .hop = 1,
                             .output = SATTN_OUTPUT_FRAMES,
                             .start = SATTN_START_PAD,
                             .invalid_policy = SATTN_INVALID_MASK,
                             .threads = 1 };
    SattnStream *s = sattn_stream_new (m, &sc, &st);
    tu_check (s == NULL, "stream over d_model SIZE_MAX/2+2 created");
    TU_CHECK_STATUS (st, SATTN_E_NOMEM, "stream over d_model SIZE_MAX/2+2");
    sattn_stream_free (s);
  }
  sattn_model_free (m);

  c = fx_config (8, 2);
  m = sattn_model_new (&c, NULL, &st);
  if (m) {
    SattnStreamConfig sc = { .window = SIZE_MAX / 4,
                             .hop = 1,
                             .output = SATTN_OUTPUT_WINDOW,
                             .start = SATTN_START_PAD,
                             .invalid_policy = SATTN_INVALID_MASK,
                             .threads = 1 };
    SattnStream *s = sattn_stream_new (m, &sc, &st);
    tu_check (s == NULL, "stream with window SIZE_MAX/4 created");
    TU_CHECK_STATUS (st, SATTN_E_NOMEM, "window SIZE_MAX/4");
    sattn_stream_free (s);
  }
  sattn_model_free (m);
  tu_case_end (NULL);
}

/* Structs the caller fills carry their size: 0 and this version's size
 * are this version's struct; a larger one (a later caller) is read when
 * its extra bytes are zero; anything smaller is refused with words. */
static void
test_struct_size (void)
{
  char err[256];
  SattnStatus st;

  tu_case_begin ("struct_size: SattnConfig");
  union {
    SattnConfig c;
    unsigned char b[sizeof (SattnConfig) + 16];
  } big;
  SattnConfig c = fx_config (8, 2);
  SattnModel *m;
  const size_t cfg_sizes[] = { 0, sizeof (SattnConfig) };
  for (size_t i = 0; i < 2; i++) {
    c.struct_size = cfg_sizes[i];
    m = sattn_model_new (&c, NULL, &st);
    tu_check (m != NULL, "struct_size %zu: %s", cfg_sizes[i],
              sattn_status_string (st));
    if (m != NULL)
      tu_check (sattn_model_config (m)->struct_size == sizeof (SattnConfig),
                "resolved struct_size %zu, want %zu",
                sattn_model_config (m)->struct_size, sizeof (SattnConfig));
    sattn_model_free (m);
  }
  c.struct_size = 8;
  TU_CHECK_STATUS (sattn_model_check (&c, NULL, err, sizeof err), SATTN_E_INVAL,
                   "struct_size 8");
  tu_check (strstr (err, "SattnConfig.struct_size=8") != NULL,
            "words for struct_size 8: \"%s\"", err);
  m = sattn_model_new (&c, NULL, &st);
  tu_check (m == NULL, "a model of struct_size 8");
  TU_CHECK_STATUS (st, SATTN_E_INVAL, "model_new, struct_size 8");
  sattn_model_free (m);
  memset (&big, 0, sizeof big);
  big.c = fx_config (8, 2);
  big.c.struct_size = sizeof big;
  m = sattn_model_new (&big.c, NULL, &st);
  tu_check (m != NULL, "a larger struct with zero extra bytes: %s",
            sattn_status_string (st));
  sattn_model_free (m);
  big.b[sizeof (SattnConfig) + 3] = 1;
  TU_CHECK_STATUS (sattn_model_check (&big.c, NULL, err, sizeof err),
                   SATTN_E_INVAL, "a larger struct with a field set");
  tu_check (strstr (err, "later libsattn") != NULL,
            "words for a later struct: \"%s\"", err);
  tu_case_end (NULL);

  tu_case_begin ("struct_size: SattnWeights");
  union {
    SattnWeights w;
    unsigned char b[sizeof (SattnWeights) + 16];
  } bigw;
  SattnWeights w = { .add_zero_attn = 1 };
  c = fx_config (8, 2);
  m = sattn_model_new (&c, &w, &st);
  tu_check (m != NULL && sattn_model_extra_keys (m) == 1, "struct_size 0: %s",
            sattn_status_string (st));
  sattn_model_free (m);
  w.struct_size = sizeof w;
  m = sattn_model_new (&c, &w, &st);
  tu_check (m != NULL && sattn_model_extra_keys (m) == 1,
            "struct_size sizeof: %s", sattn_status_string (st));
  sattn_model_free (m);
  w.struct_size = sizeof (void *);
  TU_CHECK_STATUS (sattn_model_check (&c, &w, err, sizeof err), SATTN_E_INVAL,
                   "SattnWeights.struct_size too small");
  tu_check (strstr (err, "SattnWeights.struct_size") != NULL, "words: \"%s\"",
            err);
  memset (&bigw, 0, sizeof bigw);
  bigw.w.struct_size = sizeof bigw;
  bigw.w.add_zero_attn = 1;
  m = sattn_model_new (&c, &bigw.w, &st);
  tu_check (m != NULL && sattn_model_extra_keys (m) == 1,
            "a larger SattnWeights with zero extra bytes: %s",
            sattn_status_string (st));
  sattn_model_free (m);
  bigw.b[sizeof (SattnWeights)] = 7;
  TU_CHECK_STATUS (sattn_model_check (&c, &bigw.w, NULL, 0), SATTN_E_INVAL,
                   "a larger SattnWeights with a field set");
  tu_case_end (NULL);

  tu_case_begin ("struct_size: SattnStreamConfig");
  union {
    SattnStreamConfig sc;
    unsigned char b[sizeof (SattnStreamConfig) + 16];
  } bigs;
  m = sattn_model_new (&c, NULL, &st);
  SattnStreamConfig sc = { .window = 4, .hop = 2, .threads = 1 };
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  tu_check (s != NULL, "struct_size 0: %s", sattn_status_string (st));
  sattn_stream_free (s);
  tu_check (sattn_stream_config_window_rows (&sc) == 2,
            "window rows with struct_size 0");
  sc.struct_size = sizeof sc;
  s = sattn_stream_new (m, &sc, &st);
  tu_check (s != NULL, "struct_size sizeof: %s", sattn_status_string (st));
  sattn_stream_free (s);
  sc.struct_size = 2 * sizeof (size_t);
  s = sattn_stream_new (m, &sc, &st);
  tu_check (s == NULL, "a stream of struct_size 16");
  TU_CHECK_STATUS (st, SATTN_E_INVAL, "stream_new, struct_size 16");
  sattn_stream_free (s);
  TU_CHECK_STATUS (sattn_stream_config_check (NULL, &sc, err, sizeof err),
                   SATTN_E_INVAL, "config_check, struct_size 16");
  tu_check (strstr (err, "SattnStreamConfig.struct_size=16") != NULL,
            "words: \"%s\"", err);
  tu_check (sattn_stream_bytes (m, &sc) == 0, "bytes of struct_size 16");
  tu_check (sattn_stream_config_window_rows (&sc) == 0,
            "window rows of struct_size 16");
  memset (&bigs, 0, sizeof bigs);
  bigs.sc.struct_size = sizeof bigs;
  bigs.sc.window = 4;
  bigs.sc.hop = 2;
  bigs.sc.threads = 1;
  s = sattn_stream_new (m, &bigs.sc, &st);
  tu_check (s != NULL,
            "a larger SattnStreamConfig with zero extra bytes: "
            "%s",
            sattn_status_string (st));
  sattn_stream_free (s);
  bigs.b[sizeof bigs - 1] = 1;
  s = sattn_stream_new (m, &bigs.sc, &st);
  tu_check (s == NULL, "a stream of a larger struct with a field set");
  TU_CHECK_STATUS (st, SATTN_E_INVAL,
                   "a larger SattnStreamConfig with a "
                   "field set");
  sattn_stream_free (s);
  sattn_model_free (m);
  tu_case_end (NULL);
}

int
main (void)
{
  test_status_strings ();
  test_free_null ();
  test_model_args ();
  test_model_resolved ();
  test_weights_copied ();
  test_attend_args ();
  test_stream_args ();
  test_overflow ();
  test_struct_size ();
  return tu_summary ("test-api");
}
