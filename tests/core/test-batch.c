/* Batched projections: a push that carries several windows' frames
 * projects them (Q, K, V) as one block product and output-projects the
 * rows of its windows as one block (see sattn_stream_push); a push of one
 * hop projects frame by frame.  Both use the same register-tiled loop with
 * the same summation order per row, so the bytes must not depend on how
 * the frames are grouped into pushes.
 *
 * For each geometry and invalid policy, the same frames (random, some
 * flagged invalid, some with NaN/Inf samples, some near 1e19 whose scores
 * overflow, some of ±3e38 whose projections overflow) go through
 *   A: one push per hop (the live, unbatched path), threads = 1;
 *   B: pushes of random sizes up to 600 frames (several batches of up to
 *      255 frames per push), threads = 1;
 *   C: as B with threads = 2;
 *   D: as A with threads = 2 (the head tasks project their own columns,
 *      see project_head in core/stream/stream.c; threads = 1 projects in blocks);
 * and rows, row infos and statistics must be memcmp-identical.  Under
 * SATTN_INVALID_ERROR the one bad frame stops every variant at the same
 * frame with the same rows before it.  Geometries cover d_model >= 256
 * (where a 256-row block would go to BLAS: batches stay below it), hop 1
 * (the per-frame case the batching is for), Q/K/V weights without Wo,
 * Wo without Q/K/V weights, and RoPE (applied after the projection).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "testutil.h"

typedef struct {
  const char *name;
  size_t d, heads, n, h;
  unsigned flags;
  size_t frames;
  SattnPositions positions;
} Geo;

static const Geo geos[] = {
  { "hop1-d96", 96, 4, 20, 1, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 700,
    SATTN_POSITIONS_NONE },
  { "W1-like", 64, 4, 64, 16, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 900,
    SATTN_POSITIONS_NONE },
  { "d300-hop2", 300, 4, 16, 2, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 600,
    SATTN_POSITIONS_NONE },
  { "causal-odd", 40, 2, 9, 3, FX_PROJ | FX_OUT | FX_CAUSAL | FX_DIMS, 500,
    SATTN_POSITIONS_NONE },
  { "qkv-only", 48, 3, 12, 1, FX_PROJ | FX_BIAS, 500, SATTN_POSITIONS_NONE },
  { "out-only", 48, 3, 12, 2, FX_OUT | FX_BO, 500, SATTN_POSITIONS_NONE },
  /* RoPE rotates Q and K after the projection (a staged row too). */
  { "rope-hop1", 64, 4, 16, 1, FX_PROJ | FX_BIAS | FX_OUT | FX_BO, 500,
    SATTN_POSITIONS_ROPE },
};

typedef struct {
  float *rows;
  SattnRowInfo *info;
  size_t n_rows;
  SattnStats stats;
  SattnStatus last;
  uint64_t err_frame;
} Run;

/* Push frames x[0, total) in pushes of `fixed` frames (0: random sizes
 * from rng), stopping at the first error. */
static int
run_stream (SattnModel *model, int threads, const Geo *g,
            SattnInvalidPolicy pol, const float *x, const uint8_t *valid,
            size_t total, size_t fixed, TuRng *rng, Run *r)
{
  SattnStreamConfig sc;
  memset (&sc, 0, sizeof (sc));
  sc.threads = threads;
  sc.window = g->n;
  sc.hop = g->h;
  sc.output = SATTN_OUTPUT_FRAMES;
  sc.collect_stats = 1;
  sc.invalid_policy = pol;
  SattnStatus st;
  SattnStream *s = sattn_stream_new (model, &sc, &st);
  if (s == NULL)
    return tu_check (0, "sattn_stream_new: %s", sattn_status_string (st));
  const size_t d = g->d, d_out = sattn_stream_row_floats (s);
  size_t pos = 0;
  memset (r, 0, sizeof (*r));
  r->rows = calloc ((total + g->n) * d_out, sizeof (float));
  /* zeroed: SattnRowInfo has padding bytes, compared with memcmp */
  r->info = calloc (total + g->n, sizeof (SattnRowInfo));
  if (r->rows == NULL || r->info == NULL) {
    sattn_stream_free (s);
    return tu_check (0, "out of memory");
  }
  r->last = SATTN_OK;
  while (pos < total) {
    size_t k = fixed ? fixed : tu_rng_range (rng, 1, 600);
    if (k > total - pos)
      k = total - pos;
    size_t got = 0;
    st = sattn_stream_push (s, x + pos * d, k, valid + pos,
                            r->rows + r->n_rows * d_out,
                            total + g->n - r->n_rows, r->info + r->n_rows,
                            &got);
    r->n_rows += got;
    if (st != SATTN_OK) {
      r->last = st;
      sattn_stream_error_frame (s, &r->err_frame, NULL);
      break;
    }
    pos += k;
  }
  sattn_stream_get_stats (s, &r->stats, 0);
  sattn_stream_free (s);
  return 1;
}

static int
same_runs (const Run *a, const Run *b, size_t d_out, const char *what)
{
  int ok = tu_check (a->n_rows == b->n_rows, "%s: %zu vs %zu rows", what,
                     a->n_rows, b->n_rows);
  ok &= tu_check (a->last == b->last, "%s: status %s vs %s", what,
                  sattn_status_string (a->last), sattn_status_string (b->last));
  if (!ok)
    return 0;
  ok &= tu_check (memcmp (a->rows, b->rows,
                          a->n_rows * d_out * sizeof (float)) == 0,
                  "%s: rows differ", what);
  ok &= tu_check (memcmp (a->info, b->info,
                          a->n_rows * sizeof (SattnRowInfo)) == 0,
                  "%s: row infos differ", what);
  ok &= tu_check (memcmp (&a->stats, &b->stats, sizeof (SattnStats)) == 0,
                  "%s: statistics differ", what);
  if (a->last != SATTN_OK)
    ok &= tu_check (a->err_frame == b->err_frame,
                    "%s: error frame %llu vs %llu", what,
                    (unsigned long long) a->err_frame,
                    (unsigned long long) b->err_frame);
  return ok;
}

static void
run_geo (const Geo *g, SattnInvalidPolicy pol, uint64_t seed)
{
  static const char *pol_names[] = { "mask", "zero", "error" };
  char fl[128];
  TuRng rng;
  Fixture f;
  tu_rng_init (&rng, seed);
  tu_case_begin ("batched = per-hop bytes: %s (d %zu, n %zu, hop %zu, %s), "
                 "invalid %s",
                 g->name, g->d, g->n, g->h,
                 fx_flags_string (g->flags, fl, sizeof fl), pol_names[pol]);
  if (fx_build (&f, &rng, g->d, g->heads, g->flags, 0) != SATTN_OK) {
    tu_check (0, "fixture");
    tu_case_end ("%zu frames", g->frames);
    return;
  }
  /* One model for every run: its streams choose their threads. */
  SattnConfig c1 = f.cfg;
  c1.positions = g->positions;
  SattnStatus st;
  SattnModel *m1 = sattn_model_new (&c1, &f.w, &st);
  const size_t total = g->frames, d = g->d;
  float *x = malloc (total * d * sizeof (float));
  uint8_t *valid = malloc (total);
  if (m1 == NULL || x == NULL || valid == NULL) {
    tu_check (0, "setup: %s", sattn_status_string (st));
    goto done;
  }
  tu_fill_normal (&rng, x, total * d, 1.0);
  for (size_t i = 0; i < total; i++) {
    valid[i] = tu_rng_range (&rng, 0, 30) != 0;
    if (pol == SATTN_INVALID_ERROR) {
      if (i == total - total / 5)
        x[i * d + d / 2] = NAN; /* the one bad frame */
      continue;
    }
    size_t k = tu_rng_range (&rng, 0, 40);
    if (k == 0)
      x[i * d + tu_rng_range (&rng, 0, d - 1)] = NAN;
    else if (k == 1)
      x[i * d] = INFINITY;
    else if (k == 2)
      for (size_t t = 0; t < d; t++)
        x[i * d + t] *= 1e19f; /* scores overflow */
    else if (k == 3)
      for (size_t t = 0; t < d; t++) /* projections overflow */
        x[i * d + t] = x[i * d + t] < 0.0f ? -3e38f : 3e38f;
  }
  Run a, b, c, e;
  memset (&a, 0, sizeof a);
  memset (&b, 0, sizeof b);
  memset (&c, 0, sizeof c);
  memset (&e, 0, sizeof e);
  TuRng r1 = rng, r2 = rng;
  if (run_stream (m1, 1, g, pol, x, valid, total, g->h, NULL, &a) &&
      run_stream (m1, 1, g, pol, x, valid, total, 0, &r1, &b) &&
      run_stream (m1, 2, g, pol, x, valid, total, 0, &r2, &c) &&
      run_stream (m1, 2, g, pol, x, valid, total, g->h, NULL, &e)) {
    SattnStreamConfig sc = { .window = g->n, .hop = g->h, .threads = 1 };
    SattnStream *s = sattn_stream_new (m1, &sc, NULL);
    size_t rf = sattn_stream_row_floats (s);
    sattn_stream_free (s);
    tu_check (a.n_rows > total / 2 || pol == SATTN_INVALID_ERROR,
              "only %zu rows", a.n_rows);
    same_runs (&a, &b, rf, "per hop vs batched");
    same_runs (&a, &c, rf, "per hop vs batched, threads=2");
    same_runs (&a, &e, rf, "per hop, threads=1 vs 2");
  }
  free (e.rows);
  free (e.info);
  free (a.rows);
  free (a.info);
  free (b.rows);
  free (b.info);
  free (c.rows);
  free (c.info);
done:
  free (x);
  free (valid);
  sattn_model_free (m1);
  fx_free (&f);
  tu_case_end ("%zu frames", g->frames);
}

int
main (void)
{
  uint64_t seed = 20261201;
  for (size_t i = 0; i < sizeof geos / sizeof geos[0]; i++)
    for (int pol = 0; pol < 3; pol++)
      run_geo (&geos[i], (SattnInvalidPolicy) pol, seed++);
  return tu_summary ("batched projections");
}
