/* What sattn_model_new stores (core/model.c), read through
 * core/internal.h:
 *  - the weight matrices transposed (in × out), as floats for the
 *    attention's projections and as doubles for the feed-forward, and the
 *    bias vectors copied (floats) or widened (doubles): every element is
 *    compared with the caller's, at its transposed index, for shapes that
 *    are not square (a swapped row / column index fails);
 *  - the packed per-head Q | K | V copy (wqkv): present exactly when the
 *    model's streams run with worker threads (threads >= 2; with
 *    threads = 1 nothing would read it), and then every element is at its
 *    packed place. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      printf ("FAIL %s:%d: ", __FILE__, __LINE__);                      \
      printf (__VA_ARGS__);                                             \
      printf ("\n");                                                    \
      fails++;                                                          \
    }                                                                   \
  } while (0)

static float *
counting (size_t n, float base)
{
  float *p = malloc (n * sizeof (float));
  for (size_t i = 0; i < n; i++)
    p[i] = base + (float) i / 1024.0f;    /* exact in float and double */
  return p;
}

/* rows × cols weights W against the model's copy Wt (cols × rows). */
static void
check_transposed_f (const char *name, const float *w, const float *wt,
                    size_t rows, size_t cols)
{
  size_t bad = 0;
  CHECK (wt != NULL, "%s: no copy", name);
  for (size_t r = 0; wt && r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      bad += wt[c * rows + r] != w[r * cols + c];
  CHECK (bad == 0, "%s: %zu elements not at their transposed place", name,
         bad);
}

static void
check_transposed_d (const char *name, const float *w, const double *wt,
                    size_t rows, size_t cols)
{
  size_t bad = 0;
  CHECK (wt != NULL, "%s: no copy", name);
  for (size_t r = 0; wt && r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      bad += wt[c * rows + r] != (double) w[r * cols + c];
  CHECK (bad == 0, "%s: %zu elements not at their transposed place", name,
         bad);
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
  SattnConfig c = { .d_model = d, .heads = H, .d_head = dh, .d_value = dvh,
    .d_out = dout, .threads = 1 };
  SattnWeights w = { .wq = wq, .wk = wk, .wv = wv, .wo = wo, .bq = bq,
    .bo = bo };
  SattnStatus st;
  SattnModel *m = sattn_model_new (&c, &w, &st);
  CHECK (m != NULL, "attention model refused (status %d)", (int) st);
  if (m != NULL) {
    check_transposed_f ("wq", wq, m->wq, dq, d);
    check_transposed_f ("wk", wk, m->wk, dq, d);
    check_transposed_f ("wv", wv, m->wv, dv, d);
    check_transposed_f ("wo", wo, m->wo, dout, dv);
    check_transposed_f ("bq", bq, m->bq, 1, dq);
    check_transposed_f ("bo", bo, m->bo, 1, dout);
    CHECK (m->bk == NULL && m->bv == NULL, "absent biases copied");
    sattn_model_free (m);
  }

  /* An encoder layer: d_model 6, d_ff 7. */
  const size_t e = 6;
  float *w1 = counting (dff * e, 7.0f), *b1 = counting (dff, 8.0f);
  float *w2 = counting (e * dff, 9.0f), *b2 = counting (e, 10.0f);
  float *n1 = counting (e, 11.0f);
  SattnConfig ce = { .d_model = e, .heads = 2, .threads = 1, .encoder = 1,
    .d_ff = dff };
  SattnWeights we = { .w1 = w1, .b1 = b1, .w2 = w2, .b2 = b2,
    .norm1_w = n1 };
  m = sattn_model_new (&ce, &we, &st);
  CHECK (m != NULL, "encoder model refused (status %d)", (int) st);
  if (m != NULL) {
    check_transposed_d ("w1", w1, m->w1, dff, e);
    check_transposed_d ("w2", w2, m->w2, e, dff);
    check_transposed_d ("b1", b1, m->b1, 1, dff);
    check_transposed_d ("b2", b2, m->b2, 1, e);
    check_transposed_f ("norm1_w", n1, m->n1w, 1, e);
    CHECK (m->n1b == NULL && m->n2w == NULL, "absent norm parameters "
           "copied");
    sattn_model_free (m);
  }
  free (wq); free (wk); free (wv); free (wo); free (bq); free (bo);
  free (w1); free (b1); free (w2); free (b2); free (n1);
  printf ("%s stored copies\n", fails ? "FAIL" : "ok  ");
}

int
main (void)
{
  test_copies ();
  printf ("%d failure(s)\n", fails);
  return fails ? 1 : 0;
}
