/* What sattn_model_new stores (core/model/model.c), read through
 * core/nn/nn.h:
 *  - the weight matrices transposed (in × out), as floats for the
 *    attention's projections and as doubles for the feed-forward and an
 *    encoder's projections, and the bias vectors copied (floats) or
 *    widened (doubles): every element is
 *    compared with the caller's, at its transposed index, for shapes that
 *    are not square (a swapped row / column index fails);
 *  - the packed per-head Q | K | V copy (wqkv): present exactly when the
 *    geometry qualifies (narrow heads: d_head and d_value below 32, wq /
 *    wk / wv given, no encoder, no RoPE), whatever thread counts the
 *    model's streams will use (a model holds none), and then every
 *    element is at its packed place, without V's float columns when V
 *    sums in double; streams of 1 and 2 threads of one model give the
 *    same bytes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"
#include "rng.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

#define CHECK(cond, ...)                           \
  do {                                             \
    if (!(cond)) {                                 \
      printf ("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf (__VA_ARGS__);                        \
      printf ("\n");                               \
      fails++;                                     \
    }                                              \
  } while (0)

static float *
counting (size_t n, float base)
{
  float *p = malloc (n * sizeof (float));
  for (size_t i = 0; i < n; i++)
    p[i] = base + (float) i / 1024.0f; /* exact in float and double */
  return p;
}

/* rows × cols weights W against the model's copy Wt (cols × rows), held
 * as floats (wtf) or as doubles (wtd): exactly one of them is set when
 * the model keeps a copy. */
static void
check_transposed (const char *name, const float *w, const float *wtf,
                  const double *wtd, size_t rows, size_t cols)
{
  size_t bad = 0;
  CHECK (wtf != NULL || wtd != NULL, "%s: no copy", name);
  for (size_t r = 0; (wtf || wtd) && r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      double got = wtf ? wtf[c * rows + r] : wtd[c * rows + r];
      bad += got != (double) w[r * cols + c];
    }
  CHECK (bad == 0, "%s: %zu elements not at their transposed place", name, bad);
}

static void
test_copies (void)
{
  /* d_model 12, 3 heads of d_head 2 (Dq 6) and d_value 3 (Dv 9), d_out 5,
   * d_ff 7: no matrix is square. */
  const size_t d = 12, H = 3, dh = 2, dvh = 3, dq = H * dh, dv = H * dvh;
  const size_t dout = 5, dff = 7;
  float *wq = counting (dq * d, 1.0f), *wk = counting (dq * d, 2.0f);
  float *wv = counting (dv * d, 3.0f), *wo = counting (dout * dv, 4.0f);
  float *bq = counting (dq, 5.0f), *bo = counting (dout, 6.0f);
  SattnConfig c = {
    .d_model = d, .heads = H, .d_head = dh, .d_value = dvh, .d_out = dout
  };
  SattnWeights w = {
    .wq = wq, .wk = wk, .wv = wv, .wo = wo, .bq = bq, .bo = bo
  };
  SattnStatus st;
  SattnModel *m = sattn_model_new (&c, &w, &st);
  CHECK (m != NULL, "attention model refused (status %d)", (int) st);
  if (m != NULL) {
    check_transposed ("wq", wq, m->wq, NULL, dq, d);
    check_transposed ("wk", wk, m->wk, NULL, dq, d);
    check_transposed ("wv", wv, m->wv, NULL, dv, d);
    check_transposed ("wo", wo, m->wo, NULL, dout, dv);
    check_transposed ("bq", bq, m->bq, NULL, 1, dq);
    check_transposed ("bo", bo, m->bo, NULL, 1, dout);
    CHECK (m->bk == NULL && m->bv == NULL, "absent biases copied");
    sattn_model_free (m);
  }

  /* An encoder layer: d_model 6, d_ff 7. */
  const size_t e = 6;
  float *w1 = counting (dff * e, 7.0f), *b1 = counting (dff, 8.0f);
  float *w2 = counting (e * dff, 9.0f), *b2 = counting (e, 10.0f);
  float *n1 = counting (e, 11.0f), *wq6 = counting (e * e, 12.0f);
  float *bq6 = counting (e, 13.0f);
  SattnConfig ce = { .d_model = e, .heads = 2, .encoder = 1, .d_ff = dff };
  SattnWeights we = {
    .wq = wq6, .bq = bq6, .w1 = w1, .b1 = b1, .w2 = w2, .b2 = b2, .norm1_w = n1
  };
  m = sattn_model_new (&ce, &we, &st);
  CHECK (m != NULL, "encoder model refused (status %d)", (int) st);
  if (m != NULL) {
    check_transposed ("w1", w1, NULL, m->w1, dff, e);
    check_transposed ("w2", w2, NULL, m->w2, e, dff);
    check_transposed ("b1", b1, NULL, m->b1, 1, dff);
    check_transposed ("b2", b2, NULL, m->b2, 1, e);
    check_transposed ("norm1_w", n1, m->n1w, NULL, 1, e);
    check_transposed ("wq (float)", wq6, m->wq, NULL, e, e);
    check_transposed ("wq (double)", wq6, NULL, m->wqd, e, e);
    check_transposed ("bq (double)", bq6, NULL, m->bqd, 1, e);
    CHECK (m->n1b == NULL && m->n2w == NULL, "absent norm parameters "
                                             "copied");
    CHECK (m->wqkv == NULL, "an encoder layer holds packed Q|K|V weights");
    sattn_model_free (m);
  }
  free (wq);
  free (wk);
  free (wv);
  free (wo);
  free (bq);
  free (bo);
  free (w1);
  free (b1);
  free (w2);
  free (b2);
  free (n1);
  free (wq6);
  free (bq6);
  printf ("%s stored copies\n", fails ? "FAIL" : "ok  ");
}

static TestRng rng = { 0x9e3779b97f4a7c15ull };

/* Rows of a hop-1 stream of model m with `threads` threads over n frames
 * of x (one push per frame, so that the threads >= 2 streams take the
 * per-head path). */
static float *
stream_rows (const SattnModel *m, int threads, const float *x, size_t n,
             size_t d)
{
  SattnStreamConfig sc = { .window = 8, .hop = 1, .threads = threads };
  SattnStatus st;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  size_t dout = sattn_model_d_out (m);
  float *out = calloc (n * dout, sizeof (float));
  CHECK (s != NULL, "stream refused (status %d)", (int) st);
  for (size_t i = 0; s != NULL && i < n; i++) {
    size_t rows = 0;
    st = sattn_stream_push (s, x + i * d, 1, NULL, out + i * dout, 1, NULL,
                            &rows);
    CHECK (st == SATTN_OK && rows == 1, "push %zu: status %d, %zu rows", i,
           (int) st, rows);
  }
  sattn_stream_free (s);
  return out;
}

static void
test_wqkv (void)
{
  const size_t d = 16, H = 4, dh = 4, n = 40;
  float *wq = test_rng_floats (&rng, d * d, 0.25f);
  float *wk = test_rng_floats (&rng, d * d, 0.25f);
  float *wv = test_rng_floats (&rng, d * d, 0.25f);
  float *bq = test_rng_floats (&rng, d, 0.1f);
  float *x = test_rng_floats (&rng, n * d, 1.0f);
  SattnWeights w = { .wq = wq, .wk = wk, .wv = wv, .bq = bq };
  SattnStatus st;

  /* Wide heads (d_head 32): no packed copy, whatever the streams. */
  const size_t dw = 64;
  float *ww = test_rng_floats (&rng, dw * dw, 0.1f);
  SattnWeights wwide = { .wq = ww, .wk = ww, .wv = ww };
  SattnConfig cw = { .d_model = dw, .heads = 2 };
  SattnModel *mw = sattn_model_new (&cw, &wwide, &st);
  CHECK (mw != NULL && mw->wqkv == NULL, "d_head 32: packed Q|K|V weights "
                                         "built for wide heads");
  sattn_model_free (mw);
  free (ww);

  /* Narrow heads: packed head by head, whatever threads the streams will
   * use.  An attention-only model sums V in double (wvd), and the
   * per-head path then never reads V's float columns: only head h's
   * Q | K columns, from h (2 d_head), rows of 2 d_model floats. */
  SattnConfig c2 = { .d_model = d, .heads = H };
  SattnModel *m2 = sattn_model_new (&c2, &w, &st);
  CHECK (m2 != NULL && m2->wqkv != NULL, "d_head 4: no packed Q|K|V "
                                         "weights");
  CHECK (m2 == NULL || m2->wvd != NULL, "V not summed in double");
  if (m2 != NULL && m2->wqkv != NULL) {
    const size_t hw = 2 * dh, ld = 2 * d;
    CHECK (sattn_wqkv_head_width (m2) == hw,
           "packed head width %zu, want "
           "%zu (Q | K)",
           sattn_wqkv_head_width (m2), hw);
    size_t bad = 0;
    for (size_t t = 0; t < d; t++)
      for (size_t h = 0; h < H; h++)
        for (size_t j = 0; j < dh; j++) {
          const float *r = m2->wqkv + t * ld + h * hw;
          bad += r[j] != wq[(h * dh + j) * d + t];
          bad += r[dh + j] != wk[(h * dh + j) * d + t];
        }
    CHECK (bad == 0, "%zu packed weights out of place", bad);
  }

  /* One model, the same bytes from streams of threads 1 and 2, and of
   * threads 2 without the packed copy (the per-head products then read
   * wq / wk / wv). */
  if (m2 != NULL) {
    float *y1 = stream_rows (m2, 1, x, n, d);
    float *y2 = stream_rows (m2, 2, x, n, d);
    float *packed = m2->wqkv;
    m2->wqkv = NULL;
    float *y3 = stream_rows (m2, 2, x, n, d);
    m2->wqkv = packed;
    CHECK (memcmp (y1, y2, n * d * sizeof (float)) == 0,
           "threads 1 and 2 differ");
    CHECK (memcmp (y2, y3, n * d * sizeof (float)) == 0,
           "threads 2 with and without the packed weights differ");
    free (y1);
    free (y2);
    free (y3);
  }
  sattn_model_free (m2);
  free (wq);
  free (wk);
  free (wv);
  free (bq);
  free (x);
  printf ("%s packed Q|K|V weights\n", fails ? "FAIL" : "ok  ");
}

int
main (void)
{
  test_copies ();
  test_wqkv ();
  printf ("%d failure(s)\n", fails);
  return fails ? 1 : 0;
}
