/* precision=fast on the shipped recogniser (examples/recognizer), without
 * PyTorch (tests/python/test_whole_models.py's TestFastParity measures
 * fast's error against float64 where PyTorch is at hand).  Frames of
 * noise with a NaN frame (invalid_policy MASK) and a GAP run longer than
 * a window, output classes and mean, start pad:
 *   - fast's bytes are the same for threads 1 and 2 and for pushes of
 *     192, 64, 7 and all frames at once, and differ from exact's;
 *   - every row description is exact's (window ends, valid flags, valid
 *     and masked keys): the masks behave as in exact;
 *   - the rows of windows without a usable frame are zeros;
 *   - |fast - exact| <= 1e-5 in every value (exact is within PyTorch
 *     float32's error of float64; fast about that error), and both give
 *     the same most likely class on every window whose top two
 *     probabilities are 1e-3 or more apart.
 *
 *   weights-test-whole-fast RECOGNISER.safetensors
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sattn/sattn-weights.h"

#define FRAMES (64 * 40 + 17)

static int failures;

static void
check (int cond, const char *what)
{
  if (!cond) {
    printf ("FAIL: %s\n", what);
    failures++;
  }
}

typedef struct {
  float *rows;
  SattnRowInfo *info;
  size_t n_rows, row_floats;
} Run;

/* Every row of the frames through a stream of m, push frames at a time. */
static int
run (const SattnModel *m, SattnOutputMode output, SattnPrecision prec,
     int threads, size_t push, const float *x, const uint8_t *valid, size_t F,
     Run *r)
{
  SattnStreamConfig sc;
  memset (&sc, 0, sizeof sc);
  sc.window = 64;
  sc.hop = 64;
  sc.output = output;
  sc.threads = threads;
  sc.precision = prec;
  SattnStatus st;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  if (s == NULL) {
    printf ("stream: %s\n", sattn_status_string (st));
    return 0;
  }
  const size_t cap = FRAMES / 64 + 2;
  r->row_floats = sattn_stream_row_floats (s);
  r->rows = calloc (cap * r->row_floats, sizeof (float));
  r->info = calloc (cap, sizeof (SattnRowInfo));
  r->n_rows = 0;
  for (size_t i = 0; i < FRAMES && r->rows && r->info; i += push) {
    const size_t k = FRAMES - i < push ? FRAMES - i : push;
    size_t got = 0;
    st = sattn_stream_push (s, x + i * F, k, valid + i,
                            r->rows + r->n_rows * r->row_floats,
                            cap - r->n_rows, r->info + r->n_rows, &got);
    if (st != SATTN_OK)
      break;
    r->n_rows += got;
  }
  sattn_stream_free (s);
  return st == SATTN_OK && r->rows && r->info;
}

static void
compare (const SattnModel *m, SattnOutputMode output, const float *x,
         const uint8_t *valid, size_t F)
{
  static const struct {
    int threads;
    size_t push;
  } ways[] = { { 1, 192 }, { 2, 64 }, { 1, 7 }, { 2, FRAMES } };
  Run ex, fa[4];
  if (!run (m, output, SATTN_PRECISION_EXACT, 1, 192, x, valid, F, &ex)) {
    check (0, "the exact stream ran");
    return;
  }
  for (size_t w = 0; w < 4; w++)
    if (!run (m, output, SATTN_PRECISION_FAST, ways[w].threads, ways[w].push, x,
              valid, F, &fa[w])) {
      check (0, "the fast stream ran");
      return;
    }
  const size_t n = ex.n_rows, rf = ex.row_floats;
  check (n == FRAMES / 64, "a row per window");
  for (size_t w = 0; w < 4; w++) {
    check (fa[w].n_rows == n, "fast: a row per window");
    check (memcmp (fa[w].rows, fa[0].rows, n * rf * sizeof (float)) == 0,
           "fast: the same bytes for threads 1 and 2 and any pushes");
    check (memcmp (fa[w].info, ex.info, n * sizeof (SattnRowInfo)) == 0,
           "fast: exact's row descriptions");
  }
  check (memcmp (fa[0].rows, ex.rows, n * rf * sizeof (float)) != 0,
         "fast differs from exact");
  double dmax = 0.0;
  size_t invalid = 0, clear = 0, agree = 0;
  for (size_t i = 0; i < n; i++) {
    const float *e = ex.rows + i * rf, *f = fa[0].rows + i * rf;
    size_t be = 0, bf = 0;
    double top = -1.0, second = -1.0;
    for (size_t c = 0; c < rf; c++) {
      const double d = fabs ((double) e[c] - (double) f[c]);
      dmax = d > dmax ? d : dmax;
      if (!ex.info[i].valid)
        check (f[c] == 0.0f, "fast: a window without a usable frame is zeros");
      be = e[c] > e[be] ? c : be;
      bf = f[c] > f[bf] ? c : bf;
      if (e[c] > top) {
        second = top;
        top = e[c];
      } else if (e[c] > second) {
        second = e[c];
      }
    }
    invalid += !ex.info[i].valid;
    if (output == SATTN_OUTPUT_CLASSES && ex.info[i].valid &&
        top - second >= 1e-3) {
      clear++;
      agree += be == bf;
    }
  }
  check (invalid > 0, "a window without a usable frame (the GAP run)");
  check (dmax <= 1e-5, "|fast - exact| <= 1e-5");
  check (agree == clear, "the same most likely class");
  printf ("output %s: %zu windows (%zu without a usable frame), max |fast - "
          "exact| %.3g, most likely class agreeing on %zu of %zu clear "
          "windows\n",
          output == SATTN_OUTPUT_CLASSES ? "classes" : "mean", n, invalid, dmax,
          agree, clear);
  free (ex.rows);
  free (ex.info);
  for (size_t w = 0; w < 4; w++) {
    free (fa[w].rows);
    free (fa[w].info);
  }
}

int
main (int argc, char **argv)
{
  if (argc != 2) {
    fprintf (stderr, "usage: %s RECOGNISER.safetensors\n", argv[0]);
    return 2;
  }
  SattnLoadOptions opt;
  SattnLoadReport rep = { sizeof rep, 0, 0, 0, 0, 0, 0, 0 };
  SattnModel *m = NULL;
  char err[512] = "";
  sattn_load_options_init (&opt);
  if (sattn_model_load (argv[1], "", &opt, &m, &rep, err, sizeof err) !=
      SATTN_OK) {
    fprintf (stderr, "%s: %s\n", argv[1], err);
    return 1;
  }
  const size_t F = sattn_model_config (m)->d_model;
  float *x = malloc (FRAMES * F * sizeof (float));
  uint8_t *valid = malloc (FRAMES);
  uint64_t z = 0x5eedu;
  for (size_t i = 0; i < FRAMES * F; i++) {
    /* uniform noise in [-0.5, 0.5) (a xorshift) */
    z ^= z << 13;
    z ^= z >> 7;
    z ^= z << 17;
    x[i] = (float) ((double) (z >> 11) / 9007199254740992.0 - 0.5);
  }
  memset (valid, 1, FRAMES);
  memset (valid + 64 * 10 + 5, 0, 64 + 70); /* a GAP run > a window */
  x[(64 * 3 + 7) * F + 1] = NAN;            /* masked (invalid_policy MASK) */
  compare (m, SATTN_OUTPUT_CLASSES, x, valid, F);
  compare (m, SATTN_OUTPUT_MEAN, x, valid, F);
  free (x);
  free (valid);
  sattn_model_free (m);
  printf ("%s: %d failure(s)\n", argv[0], failures);
  return failures ? 1 : 0;
}
