/* The key side of SattnRowInfo (window_end, valid_keys, masked_keys,
 * fully_masked) against counts made here from the frames' validity alone,
 * written straight from the definitions in sattn.h, and against the
 * statistics the kernel counts (SattnStats.masked_keys and
 * fully_masked_rows sum over the same rows).
 *
 * Streams of random frames with random runs of invalid frames (flagged
 * and NaN), in every output mode, causal / lookback / extra keys, start
 * pad / wait, pushed in random chunks, drained at the end.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  size_t n, h, lookback;
  int causal, zero_attn;
  SattnOutputMode mode;
  SattnStartPolicy start;
} Case;

/* Usable: inside the stream and neither flagged nor NaN. */
static int
usable (const uint8_t *ok, int64_t f)
{
  return f >= 0 && ok[f];
}

static void
run_case (const Case *c, uint64_t seed)
{
  const size_t d = 4, heads = 2, total = 7 * c->n + 5;
  TuRng rng;
  tu_rng_init (&rng, seed);
  tu_case_begin ("row info: n=%zu h=%zu mode=%d causal=%d lookback=%zu "
                 "zero-attn=%d start=%d",
                 c->n, c->h, (int) c->mode, c->causal, c->lookback,
                 c->zero_attn, (int) c->start);

  SattnConfig cfg = { 0 };
  cfg.d_model = d;
  cfg.heads = heads;
  cfg.causal = c->causal;
  cfg.lookback = c->lookback;
  SattnWeights w = { 0 };
  w.add_zero_attn = c->zero_attn;
  SattnStatus st;
  SattnModel *m = sattn_model_new (&cfg, c->zero_attn ? &w : NULL, &st);
  SattnStreamConfig sc = { .window = c->n,
                           .hop = c->h,
                           .output = c->mode,
                           .start = c->start,
                           .collect_stats = 1,
                           .invalid_policy = SATTN_INVALID_MASK,
                           .threads = 1 };
  SattnStream *s = m ? sattn_stream_new (m, &sc, &st) : NULL;
  if (!tu_check (s != NULL, "stream: %s", sattn_status_string (st))) {
    sattn_model_free (m);
    tu_case_end (NULL);
    return;
  }

  float *x = malloc (total * d * sizeof (float));
  uint8_t *flag = malloc (total), *ok = malloc (total);
  tu_fill_normal (&rng, x, total * d, 1.0);
  /* Runs of good and bad frames; bad = flagged or a NaN sample. */
  for (size_t f = 0; f < total;) {
    size_t len = tu_rng_range (&rng, 1, c->n);
    int bad = tu_rng_range (&rng, 0, 3) == 0;
    for (size_t i = 0; i < len && f < total; i++, f++) {
      flag[f] = 1;
      ok[f] = !bad;
      if (bad && (f & 1))
        x[f * d + 1] = NAN;
      else if (bad)
        flag[f] = 0;
    }
  }

  size_t rf = sattn_stream_row_floats (s);
  size_t cap = total + c->n + 2;
  float *out = malloc (cap * rf * sizeof (float));
  SattnRowInfo *info = calloc (cap, sizeof (SattnRowInfo));
  size_t rows = 0, nr;
  for (size_t f = 0; f < total;) {
    size_t k = tu_rng_range (&rng, 1, 2 * c->h + 1);
    if (k > total - f)
      k = total - f;
    st = sattn_stream_push (s, x + f * d, k, flag + f, out + rows * rf,
                            cap - rows, info + rows, &nr);
    tu_check (st == SATTN_OK, "push: %s", sattn_status_string (st));
    rows += nr;
    f += k;
  }
  st = sattn_stream_drain (s, out + rows * rf, cap - rows, info + rows, &nr);
  tu_check (st == SATTN_OK, "drain: %s", sattn_status_string (st));
  rows += nr;

  uint64_t sum_masked = 0, sum_fm = 0, prev_end = 0;
  for (size_t r = 0; r < rows && !tu_case_failed (); r++) {
    const SattnRowInfo *in = &info[r];
    int64_t e = (int64_t) in->window_end, w0 = e - (int64_t) c->n;
    uint32_t masked = 0, fm = 0;
    for (int64_t p = w0; p < e; p++)
      masked += !usable (ok, p);
    /* The queries this row accounts for: its own frame (frames mode), the
     * last window position (last), every position (window, mean). */
    size_t q0 = c->mode == SATTN_OUTPUT_FRAMES
                    ? (size_t) ((int64_t) in->first - w0)
                : c->mode == SATTN_OUTPUT_LAST ? c->n - 1
                                               : 0;
    size_t q1 = c->mode == SATTN_OUTPUT_FRAMES ? q0 + 1 : c->n;
    for (size_t q = q0; q < q1; q++) {
      int seen = c->zero_attn;
      for (size_t j = 0; j < c->n; j++) {
        if (c->causal && j > q)
          continue;
        if (c->lookback > 0 && q > j && q - j > c->lookback)
          continue;
        seen |= usable (ok, w0 + (int64_t) j);
      }
      if (usable (ok, w0 + (int64_t) q) && !seen)
        fm += (uint32_t) heads;
    }
    tu_check (in->window_end <= total && in->window_end >= prev_end,
              "row %zu: window_end %llu (previous %llu, %zu frames)", r,
              (unsigned long long) in->window_end,
              (unsigned long long) prev_end, total);
    tu_check (in->first >= (uint64_t) (w0 > 0 ? w0 : 0) &&
                  in->first + in->n_frames <= in->window_end,
              "row %zu: frames [%llu, +%u) outside its window ending at %llu",
              r, (unsigned long long) in->first, in->n_frames,
              (unsigned long long) in->window_end);
    tu_check (in->masked_keys == masked && in->valid_keys == c->n - masked,
              "row %zu: valid/masked keys %u/%u, want %zu/%u", r,
              in->valid_keys, in->masked_keys, c->n - masked, masked);
    tu_check (in->fully_masked == fm, "row %zu: fully masked %u, want %u", r,
              in->fully_masked, fm);
    prev_end = in->window_end;
    sum_fm += in->fully_masked;
    /* Frames mode: a window's rows share its keys; count them once. */
    if (c->mode != SATTN_OUTPUT_FRAMES || r == 0 ||
        info[r - 1].window_end != in->window_end)
      sum_masked += in->masked_keys;
  }
  SattnStats stats;
  sattn_stream_get_stats (s, &stats, 0);
  tu_check (sum_masked == stats.masked_keys,
            "masked keys: rows %llu, "
            "stats %llu",
            (unsigned long long) sum_masked,
            (unsigned long long) stats.masked_keys);
  tu_check (sum_fm == stats.fully_masked_rows,
            "fully masked: rows %llu, "
            "stats %llu",
            (unsigned long long) sum_fm,
            (unsigned long long) stats.fully_masked_rows);
  tu_case_end ("%zu rows, %llu masked keys, %llu fully masked", rows,
               (unsigned long long) sum_masked, (unsigned long long) sum_fm);
  free (x);
  free (flag);
  free (ok);
  free (out);
  free (info);
  sattn_stream_free (s);
  sattn_model_free (m);
}

int
main (void)
{
  static const Case cases[] = {
    { 8, 2, 0, 0, 0, SATTN_OUTPUT_FRAMES, SATTN_START_PAD },
    { 8, 3, 0, 1, 0, SATTN_OUTPUT_FRAMES, SATTN_START_PAD },
    { 8, 2, 2, 1, 0, SATTN_OUTPUT_FRAMES, SATTN_START_PAD },
    { 8, 2, 3, 0, 0, SATTN_OUTPUT_FRAMES, SATTN_START_WAIT },
    { 8, 2, 0, 1, 1, SATTN_OUTPUT_FRAMES, SATTN_START_PAD },
    { 6, 2, 0, 1, 0, SATTN_OUTPUT_WINDOW, SATTN_START_PAD },
    { 6, 3, 2, 1, 0, SATTN_OUTPUT_MEAN, SATTN_START_PAD },
    { 6, 3, 1, 0, 0, SATTN_OUTPUT_LAST, SATTN_START_WAIT },
    { 5, 5, 0, 1, 0, SATTN_OUTPUT_MEAN, SATTN_START_PAD },
    { 1, 1, 0, 0, 0, SATTN_OUTPUT_FRAMES, SATTN_START_PAD },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (uint64_t seed = 1; seed <= 4; seed++)
      run_case (&cases[i], 1000 * i + seed);
  return tu_summary ("row info");
}
