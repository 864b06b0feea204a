/* SattnStreamConfig.precision: SATTN_PRECISION_FAST sums the projections
 * in float.  For random attention layers (W1's geometry, other head
 * widths, causal, extra keys, Q/K/V without Wo), frames streamed with
 * start=wait in hops, every output row against the float64 reference of
 * its window (ref_attend on the window's frames, the hop's last rows):
 *   - FAST within the float32 parity bound of the weights suites,
 *     max-abs <= 1e-5 (1 + max |reference|) per draw;
 *   - FAST differs from EXACT (the option takes effect), and its bytes do
 *     not depend on the thread count (threads 1 and 2) or on how frames
 *     come in pushes (one hop per push, and pushes of 5 hops);
 *   - FAST's max-abs error at most 4 times EXACT's in each draw, the
 *     ratios over the draws printed (what the option costs in accuracy);
 *   - a precision value that is not one is refused with words, and a
 *     struct_size that ends before the field gives EXACT.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "testutil.h"

typedef struct {
  const char *name;
  size_t d, heads, n, h;
  unsigned flags;
} Geo;

static const Geo geos[] = {
  { "W1-like", 64, 4, 64, 16, FX_PROJ | FX_BIAS | FX_OUT | FX_BO },
  { "narrow-heads", 48, 6, 24, 4, FX_PROJ | FX_BIAS | FX_OUT | FX_BO },
  { "dims-causal", 40, 2, 20, 5, FX_PROJ | FX_OUT | FX_DIMS | FX_CAUSAL },
  { "bias-kv", 32, 4, 16, 4, FX_PROJ | FX_BIAS | FX_OUT | FX_BIASKV },
  { "qkv-only", 48, 3, 16, 2, FX_PROJ | FX_BIAS },
  { "wide-d256", 256, 8, 32, 8, FX_PROJ | FX_BIAS | FX_OUT | FX_BO },
};

#define DRAWS 4
#define HOPS 12

/* Every output row of frames x[0, total) through a stream of m, start
 * wait, output frames, in pushes of `push` hops; NULL on failure. */
static float *
stream_rows (const Fixture *f, const Geo *g, SattnPrecision prec, int threads,
             size_t push, const float *x, size_t total, size_t *n_rows)
{
  SattnStreamConfig sc;
  memset (&sc, 0, sizeof sc);
  sc.window = g->n;
  sc.hop = g->h;
  sc.output = SATTN_OUTPUT_FRAMES;
  sc.start = SATTN_START_WAIT;
  sc.threads = threads;
  sc.precision = prec;
  SattnStatus st;
  SattnStream *s = sattn_stream_new (f->model, &sc, &st);
  if (!tu_check (s != NULL, "stream (precision %d, threads %d): %s", prec,
                 threads, sattn_status_string (st)))
    return NULL;
  const size_t d_out = f->ref.d_out;
  float *rows = calloc (total * d_out, sizeof (float));
  size_t have = 0;
  for (size_t at = 0; rows && at < total;) {
    size_t cnt = push * g->h;
    if (cnt > total - at)
      cnt = total - at;
    size_t got = 0;
    st = sattn_stream_push (s, x + at * g->d, cnt, NULL, rows + have * d_out,
                            total - have, NULL, &got);
    if (!tu_check (st == SATTN_OK, "push: %s", sattn_status_string (st))) {
      free (rows);
      rows = NULL;
      break;
    }
    have += got;
    at += cnt;
  }
  sattn_stream_free (s);
  *n_rows = have;
  return rows;
}

/* rows (n_rows × d_out: row r is frame r's; start wait: the first window,
 * frames [0, n), gives rows 0 to n - 1, each later window the rows of its
 * last h frames) against the float64 reference of each window. */
static void
err_vs_ref (const Fixture *f, const Geo *g, const float *x, const float *rows,
            size_t n_rows, RefDiff *diff)
{
  const size_t n = g->n, h = g->h, d_out = f->ref.d_out;
  double *ref = malloc (n * d_out * sizeof (double));
  if (ref == NULL)
    abort ();
  for (size_t end = n; end <= n_rows; end += h) {
    const size_t first = end - n, r0 = end == n ? 0 : n - h;
    ref_attend (&f->ref, x + first * g->d, n, NULL, NULL, NULL, ref, NULL,
                NULL);
    for (size_t i = r0; i < n; i++)
      for (size_t t = 0; t < d_out; t++)
        ref_diff_add (diff, rows[(first + i) * d_out + t], ref[i * d_out + t]);
  }
  free (ref);
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

int
main (void)
{
  double ratios[sizeof geos / sizeof geos[0] * DRAWS];
  size_t n_ratios = 0;

  for (size_t gi = 0; gi < sizeof geos / sizeof geos[0]; gi++) {
    const Geo *g = &geos[gi];
    for (int draw = 0; draw < DRAWS; draw++) {
      TuRng r;
      tu_rng_init (&r, 0x9e3779b9u * (gi + 1) + (uint64_t) draw);
      Fixture f;
      tu_case_begin ("%s draw %d", g->name, draw);
      if (fx_build (&f, &r, g->d, g->heads, g->flags, 0) != SATTN_OK) {
        tu_check (0, "fx_build failed");
        tu_case_end ("%s", g->name);
        continue;
      }
      const size_t total = g->n + HOPS * g->h;
      float *x = malloc (total * g->d * sizeof (float));
      if (x == NULL)
        abort ();
      tu_fill_normal (&r, x, total * g->d, 1.0);
      size_t nr[4] = { 0, 0, 0, 0 };
      float *exact = stream_rows (&f, g, SATTN_PRECISION_EXACT, 1, 1, x, total,
                                  &nr[0]);
      float *fast = stream_rows (&f, g, SATTN_PRECISION_FAST, 1, 1, x, total,
                                 &nr[1]);
      float *fast2 = stream_rows (&f, g, SATTN_PRECISION_FAST, 2, 1, x, total,
                                  &nr[2]);
      float *fast5 = stream_rows (&f, g, SATTN_PRECISION_FAST, 1, 5, x, total,
                                  &nr[3]);
      const size_t want = total, d_out = f.ref.d_out;
      if (exact && fast && fast2 && fast5 &&
          tu_check (nr[0] == want && nr[1] == want && nr[2] == want &&
                        nr[3] == want,
                    "rows %zu %zu %zu %zu, want %zu", nr[0], nr[1], nr[2],
                    nr[3], want)) {
        const size_t bytes = want * d_out * sizeof (float);
        tu_check (memcmp (fast, fast2, bytes) == 0,
                  "FAST: threads=2 differs from threads=1");
        tu_check (memcmp (fast, fast5, bytes) == 0,
                  "FAST: pushes of 5 hops differ from pushes of one hop");
        tu_check (memcmp (fast, exact, bytes) != 0,
                  "FAST gives EXACT's bytes: the option did nothing");
        RefDiff de = { 0 }, df = { 0 };
        err_vs_ref (&f, g, x, exact, want, &de);
        err_vs_ref (&f, g, x, fast, want, &df);
        tu_check (tu_all_finite (fast, want * d_out), "FAST: non-finite row");
        tu_check (df.max_abs <= ref_diff_bound (&df),
                  "FAST max-abs %.3g above the float32 bound %.3g", df.max_abs,
                  ref_diff_bound (&df));
        tu_check (de.max_abs <= ref_diff_bound (&de),
                  "EXACT max-abs %.3g above the float32 bound %.3g", de.max_abs,
                  ref_diff_bound (&de));
        const double ratio = de.max_abs > 0.0 ? df.max_abs / de.max_abs : 1.0;
        ratios[n_ratios++] = ratio;
        /* What the option may cost: measured 0.7 to 2.5 times EXACT's
         * error over these draws and every code path. */
        tu_check (ratio <= 4.0,
                  "FAST max-abs %.3g is %.2f times EXACT's %.3g (at most 4)",
                  df.max_abs, ratio, de.max_abs);
        printf ("  %-12s draw %d: max-abs vs float64: exact %.3g, fast %.3g "
                "(fast / exact %.2f; bound %.3g)\n",
                g->name, draw, de.max_abs, df.max_abs, ratio,
                ref_diff_bound (&df));
      }
      free (exact);
      free (fast);
      free (fast2);
      free (fast5);
      free (x);
      fx_free (&f);
      tu_case_end ("%s draw %d", g->name, draw);
    }
  }
  if (n_ratios > 0) {
    qsort (ratios, n_ratios, sizeof ratios[0], cmp_double);
    printf ("fast / exact max-abs error over %zu draws: min %.2f, median "
            "%.2f, max %.2f\n",
            n_ratios, ratios[0], ratios[n_ratios / 2], ratios[n_ratios - 1]);
  }

  /* A value that is not a precision. */
  {
    tu_case_begin ("invalid precision");
    TuRng r;
    tu_rng_init (&r, 7);
    Fixture f;
    if (tu_check (fx_build (&f, &r, 16, 2, FX_PROJ, 0) == SATTN_OK,
                  "fx_build")) {
      SattnStreamConfig sc;
      memset (&sc, 0, sizeof sc);
      sc.window = 8;
      sc.hop = 2;
      sc.threads = 1;
      sc.precision = (SattnPrecision) 2;
      char err[256] = "";
      SattnStatus st = sattn_stream_config_check (f.model, &sc, err,
                                                  sizeof err);
      TU_CHECK_STATUS (st, SATTN_E_INVAL, "precision=2");
      tu_check (strstr (err, "precision") != NULL,
                "the message names the precision: '%s'", err);
      SattnStream *s = sattn_stream_new (f.model, &sc, &st);
      tu_check (s == NULL && st == SATTN_E_INVAL,
                "sattn_stream_new refuses precision=2");
      sattn_stream_free (s);
      /* A caller built against the header without the field passes the
       * smaller struct_size: what follows it is not read (EXACT). */
      sc.struct_size = offsetof (SattnStreamConfig, precision);
      st = sattn_stream_config_check (f.model, &sc, err, sizeof err);
      TU_CHECK_STATUS (st, SATTN_OK, "struct_size without precision");
      sc.precision = SATTN_PRECISION_FAST;
      s = sattn_stream_new (f.model, &sc, &st);
      SattnStreamConfig ex = sc;
      ex.struct_size = 0;
      ex.precision = SATTN_PRECISION_EXACT;
      SattnStream *e = sattn_stream_new (f.model, &ex, &st);
      if (tu_check (s != NULL && e != NULL, "streams")) {
        float x[16 * 16], ys[16 * 16], ye[16 * 16];
        size_t ns = 0, ne = 0;
        tu_fill_normal (&r, x, 16 * 16, 1.0);
        sattn_stream_push (s, x, 16, NULL, ys, 16, NULL, &ns);
        sattn_stream_push (e, x, 16, NULL, ye, 16, NULL, &ne);
        tu_check (ns == ne && ns > 0 &&
                      memcmp (ys, ye, ns * 16 * sizeof (float)) == 0,
                  "the older struct_size gives EXACT's bytes");
      }
      sattn_stream_free (s);
      sattn_stream_free (e);
      fx_free (&f);
    }
    tu_case_end ("invalid precision");
  }
  return tu_summary ("precision");
}
