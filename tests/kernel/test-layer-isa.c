/* The encoder layer's per-row parts (core/nn/encoder.c) and the linear layers
 * summed in double (core/cpu/linear.c) give the same bytes with the portable,
 * AVX2 and AVX-512 loops: their sums are double chains over float values
 * from the bias in the same order, and a product of two floats is exact in
 * double, so FMA or not cannot differ.
 *
 * For post-norm and pre-norm, relu and gelu, and widths that are and are
 * not multiples of the loops' column blocks (16 on AVX-512, 12 on AVX2)
 * and row tiles (12, 8 and 4), sattn_layer_rows runs on the same rows at
 * every level the CPU has; the outputs must be equal byte for byte and
 * finite.  A regression in a vector tail or a changed summation order
 * shows as a difference.  Attention-only models sum V and the output
 * projection with the same loops: with one key per query, their rows must
 * be those chains exactly on every projecting path (run_single_key).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include "rng.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static TestRng rng = { 0x9e3779b97f4a7c15ull };

/* Returns the number of failures. */
static int
run_case (size_t d, size_t dff, size_t rows, int gelu, int norm_first)
{
  float *w1 = test_rng_floats (&rng, dff * d, 1.0f / sqrtf ((float) d));
  float *b1 = test_rng_floats (&rng, dff, 0.1f);
  float *w2 = test_rng_floats (&rng, d * dff, 1.0f / sqrtf ((float) dff));
  float *b2 = test_rng_floats (&rng, d, 0.1f);
  float *n1w = test_rng_floats (&rng, d, 0.2f);
  float *n1b = test_rng_floats (&rng, d, 0.2f);
  float *n2w = test_rng_floats (&rng, d, 0.2f);
  float *n2b = test_rng_floats (&rng, d, 0.2f);
  for (size_t t = 0; t < d; t++) {
    n1w[t] += 1.0f;
    n2w[t] += 1.0f;
  }
  SattnConfig c = { .d_model = d,
                    .heads = 2,
                    .encoder = 1,
                    .d_ff = dff,
                    .activation = gelu ? SATTN_ACTIVATION_GELU
                                       : SATTN_ACTIVATION_RELU,
                    .norm_first = norm_first };
  SattnWeights w = { .w1 = w1,
                     .b1 = b1,
                     .w2 = w2,
                     .b2 = b2,
                     .norm1_w = n1w,
                     .norm1_b = n1b,
                     .norm2_w = n2w,
                     .norm2_b = n2b };
  SattnStatus st;
  SattnModel *m = sattn_model_new (&c, &w, &st);
  int fails = 0;
  if (m == NULL) {
    printf ("FAIL d %zu d_ff %zu: model refused (status %d)\n", d, dff,
            (int) st);
    fails = 1;
  } else {
    float *x = test_rng_floats (&rng, rows * d, 1.0f);
    float *sa = test_rng_floats (&rng, rows * d, 1.0f);
    float *out[3] = { NULL, NULL, NULL };
    float *scratch = malloc (sattn_layer_scratch (m) * sizeof (float));
    int native = sattn_simd_level ();
    for (int level = 0; level <= native && level <= 2; level++) {
      sattn_simd_force (level);
      out[level] = malloc (rows * d * sizeof (float));
      memcpy (out[level], sa, rows * d * sizeof (float));
      sattn_layer_rows (m, 0, x, d, out[level], d, rows, scratch, NULL);
      if (!sattn_finite (out[level], rows * d)) {
        printf ("FAIL d %zu d_ff %zu level %d: non-finite output\n", d, dff,
                level);
        fails++;
      }
      if (level > 0 &&
          memcmp (out[0], out[level], rows * d * sizeof (float)) != 0) {
        printf ("FAIL d %zu d_ff %zu rows %zu %s %s: level %d differs "
                "from the portable loops\n",
                d, dff, rows, norm_first ? "pre-norm" : "post-norm",
                gelu ? "gelu" : "relu", level);
        fails++;
      }
    }
    sattn_simd_force (native);
    printf ("%s d %zu d_ff %zu rows %zu %s %s: levels 0-%d\n",
            fails ? "FAIL" : "ok  ", d, dff, rows,
            norm_first ? "pre-norm" : "post-norm", gelu ? "gelu" : "relu",
            native > 2 ? 2 : native);
    for (int l = 0; l < 3; l++)
      free (out[l]);
    free (scratch);
    free (x);
    free (sa);
    sattn_model_free (m);
  }
  free (w1);
  free (b1);
  free (w2);
  free (b2);
  free (n1w);
  free (n1b);
  free (n2w);
  free (n2b);
  return fails;
}

/* The double linear loops (core/cpu/linear.c) over columns [c0, c1) of an
 * n-row block, float rows in (sattn_linear_f, rounded once) and double
 * rows in and out (sattn_linear_d), at every level: the same bytes at
 * every level, and every entry equal to the chain their rule defines,
 * written out here (from the bias, over t in order, in double; rounded
 * to float once for sattn_linear_f).  Returns the number of failures. */
static int
run_proj (size_t n, size_t d_in, size_t d_out, size_t c0, size_t c1)
{
  float *w = test_rng_floats (&rng, d_in * d_out, 1.0f / sqrtf ((float) d_in));
  float *b = test_rng_floats (&rng, d_out, 0.1f);
  float *x = test_rng_floats (&rng, n * d_in, 1.0f);
  double *wd = malloc (d_in * d_out * sizeof (double));
  double *bd = malloc (d_out * sizeof (double));
  double *xd = malloc (n * d_in * sizeof (double));
  float *y[3] = { NULL, NULL, NULL };
  double *yd[3] = { NULL, NULL, NULL };
  for (size_t i = 0; i < d_in * d_out; i++)
    wd[i] = w[i];
  for (size_t i = 0; i < d_out; i++)
    bd[i] = b[i];
  for (size_t i = 0; i < n * d_in; i++)
    xd[i] = x[i];
  int native = sattn_simd_level (), fails = 0, wrong = 0;
  for (int level = 0; level <= native && level <= 2; level++) {
    sattn_simd_force (level);
    y[level] = calloc (n * d_out, sizeof (float));
    yd[level] = calloc (n * d_out, sizeof (double));
    sattn_linear_f (x, d_in, n, wd + c0, d_out, bd + c0, d_in, c1 - c0,
                    y[level] + c0, d_out);
    sattn_linear_d (xd, d_in, n, wd + c0, d_out, bd + c0, d_in, c1 - c0,
                    yd[level] + c0, d_out);
    if (level > 0 && (memcmp (y[0], y[level], n * d_out * sizeof (float)) ||
                      memcmp (yd[0], yd[level], n * d_out * sizeof (double))))
      fails++;
  }
  sattn_simd_force (native);
  for (size_t i = 0; i < n; i++)
    for (size_t j = c0; j < c1; j++) {
      double ref = b[j];
      for (size_t t = 0; t < d_in; t++)
        ref += (double) x[i * d_in + t] * (double) w[t * d_out + j];
      wrong += y[0][i * d_out + j] != (float) ref ||
               yd[0][i * d_out + j] != ref;
    }
  fails += wrong;
  printf ("%s linear %zu rows, %zu -> %zu, columns %zu-%zu: %d entries "
          "off the chain\n",
          fails ? "FAIL" : "ok  ", n, d_in, d_out, c0, c1, wrong);
  for (int l = 0; l < 3; l++) {
    free (y[l]);
    free (yd[l]);
  }
  free (w);
  free (b);
  free (x);
  free (wd);
  free (bd);
  free (xd);
  return fails;
}

/* Attention-only models sum V and the output projection in double
 * (SattnModel).  A query whose only key is its own frame has an attention
 * weight of exactly 1, so its output row must be the chains written out
 * here: V's entries from bv over t in order in double, rounded to float
 * once, then the output projection's the same way over those V entries.
 * Checked on every path that projects: sattn_attend of one frame, and
 * streams (window 64, hop 16, one frame in 64 usable, the others flagged:
 * each usable frame is the only key of its window) with threads=1 (block
 * projections) and threads=2 (each head's task projects its V columns,
 * see project_head in core/stream/stream.c), at every level.  Returns the number
 * of failures. */
static int
run_single_key (size_t d, size_t heads, size_t frames)
{
  const size_t win = 64, hop = 16, every = 64, at = 7;
  float *wq = test_rng_floats (&rng, d * d, 1.0f / sqrtf ((float) d));
  float *wk = test_rng_floats (&rng, d * d, 1.0f / sqrtf ((float) d));
  float *wv = test_rng_floats (&rng, d * d, 1.0f / sqrtf ((float) d));
  float *wo = test_rng_floats (&rng, d * d, 1.0f / sqrtf ((float) d));
  float *bq = test_rng_floats (&rng, d, 0.1f);
  float *bk = test_rng_floats (&rng, d, 0.1f);
  float *bv = test_rng_floats (&rng, d, 0.1f);
  float *bo = test_rng_floats (&rng, d, 0.1f);
  float *x = test_rng_floats (&rng, frames * d, 1.0f);
  float *ref = malloc (frames * d * sizeof (float));
  float *got = malloc (frames * d * sizeof (float));
  float *rows_out = malloc (hop * d * sizeof (float));
  float *v = malloc (d * sizeof (float));
  uint8_t *valid = malloc (frames);
  SattnRowInfo info[16];
  SattnWeights w = { .wq = wq,
                     .bq = bq,
                     .wk = wk,
                     .bk = bk,
                     .wv = wv,
                     .bv = bv,
                     .wo = wo,
                     .bo = bo };
  for (size_t i = 0; i < frames; i++) {
    valid[i] = i % every == at;
    for (size_t j = 0; j < d; j++) {
      double acc = bv[j];
      for (size_t t = 0; t < d; t++)
        acc += (double) x[i * d + t] * (double) wv[j * d + t];
      v[j] = (float) acc;
    }
    for (size_t j = 0; j < d; j++) {
      double acc = bo[j];
      for (size_t t = 0; t < d; t++)
        acc += (double) v[t] * (double) wo[j * d + t];
      ref[i * d + j] = (float) acc;
    }
  }
  int native = sattn_simd_level (), fails = 0;
  size_t checked = 0;
  for (int level = 0; level <= native && level <= 2; level++) {
    sattn_simd_force (level);
    for (int path = 0; path < 3; path++) {
      static const char *names[] = { "sattn_attend", "stream threads=1",
                                     "stream threads=2" };
      SattnConfig c = { .d_model = d, .heads = heads, .d_out = d };
      SattnStreamConfig sc = { .window = win,
                               .hop = hop,
                               .output = SATTN_OUTPUT_FRAMES,
                               .threads = path == 2 ? 2 : 1 };
      SattnStatus st;
      SattnModel *m = sattn_model_new (&c, &w, &st);
      SattnStream *ss = m != NULL && path > 0 ? sattn_stream_new (m, &sc, &st)
                                              : NULL;
      int ok = m != NULL && (path == 0 || ss != NULL);
      size_t wrong = 0, seen = 0;
      for (size_t i = 0; ok && path == 0 && i < frames; i += every) {
        ok = sattn_attend (m, x + (i + at) * d, 1, NULL, got, NULL, NULL) ==
             SATTN_OK;
        seen++;
        for (size_t j = 0; ok && j < d; j++)
          wrong += got[j] != ref[(i + at) * d + j];
      }
      for (size_t i = 0; ok && path > 0 && i < frames; i += hop) {
        size_t rows = 0;
        ok = sattn_stream_push (ss, x + i * d, hop, valid + i, rows_out, hop,
                                info, &rows) == SATTN_OK;
        for (size_t r = 0; ok && r < rows; r++) {
          const size_t f = (size_t) info[r].first;
          if (f >= frames || !valid[f])
            continue;
          seen++;
          for (size_t j = 0; j < d; j++)
            wrong += rows_out[r * d + j] != ref[f * d + j];
        }
      }
      ok = ok && seen == frames / every;
      checked += seen;
      if (!ok || wrong) {
        printf ("FAIL single key, d %zu, %zu heads, level %d, %s: %s, %zu "
                "entries off the double chains\n",
                d, heads, level, names[path], ok ? "ran" : "failed", wrong);
        fails++;
      }
      sattn_stream_free (ss);
      sattn_model_free (m);
    }
  }
  sattn_simd_force (native);
  printf ("%s single key, d %zu, %zu heads: %zu rows on the V and output "
          "projection chains, 3 paths, levels 0-%d\n",
          fails ? "FAIL" : "ok  ", d, heads, checked, native > 2 ? 2 : native);
  free (wq);
  free (wk);
  free (wv);
  free (wo);
  free (bq);
  free (bk);
  free (bv);
  free (bo);
  free (x);
  free (ref);
  free (got);
  free (rows_out);
  free (v);
  free (valid);
  return fails;
}

int
main (void)
{
  static const size_t geo[][3] = {
    { 16, 64, 16 },  { 20, 80, 13 }, { 36, 52, 7 },
    { 64, 256, 16 }, { 10, 30, 3 },
  };
  int fails = 0, cases = 0;
  for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++)
    for (int v = 0; v < 4; v++) {
      fails += run_case (geo[g][0], geo[g][1], geo[g][2], v & 1, v >> 1) != 0;
      cases++;
    }
  static const size_t pgeo[][5] = {
    { 16, 64, 192, 0, 192 },
    { 13, 20, 60, 32, 60 },
    { 7, 36, 37, 5, 37 },
    { 3, 10, 30, 0, 30 },
    { 64, 64, 64, 0, 32 },
    { 16, 64, 64, 16, 40 },
    /* Row blocks of 12, the last 16 rows as 8 + 8, row tails of 4 and
     * 1, conversion steps of 12 rows (d_in 500). */
    { 40, 48, 50, 0, 50 },
    { 28, 64, 64, 0, 64 },
    { 29, 500, 33, 3, 33 },
    /* Rows wider than the conversion buffer (6144): read as floats. */
    { 9, 6200, 20, 0, 20 },
  };
  for (size_t g = 0; g < sizeof pgeo / sizeof pgeo[0]; g++) {
    fails += run_proj (pgeo[g][0], pgeo[g][1], pgeo[g][2], pgeo[g][3],
                       pgeo[g][4]) != 0;
    cases++;
  }
  /* W1's geometry (narrow heads: the packed per-head projection) and
   * wider heads with odd widths. */
  static const size_t sgeo[][3] = { { 64, 4, 256 },
                                    { 40, 2, 128 },
                                    { 96, 3, 128 } };
  for (size_t g = 0; g < sizeof sgeo / sizeof sgeo[0]; g++) {
    fails += run_single_key (sgeo[g][0], sgeo[g][1], sgeo[g][2]) != 0;
    cases++;
  }
  printf ("test-layer-isa: %d passed, %d failed\n", cases - fails, fails);
  return fails ? 1 : 0;
}
