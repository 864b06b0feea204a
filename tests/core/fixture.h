/* Random models for the core tests: one description builds both the
 * libsattn model and the float64 reference model over the same weights.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_FIXTURE_H
#define SATTN_FIXTURE_H

#include "reference.h"
#include "testutil.h"

enum {
  FX_PROJ = 1 << 0, /* wq, wk, wv given (else identity) */
  FX_BIAS = 1 << 1, /* bq, bk, bv */
  FX_OUT = 1 << 2,  /* wo */
  FX_BO = 1 << 3,   /* bo */
  FX_UNIT = 1 << 4, /* scale = 1 (else default 1/sqrt(d_head)) */
  FX_CAUSAL = 1 << 5,
  FX_LOOKBACK = 1 << 6,
  FX_PAD = 1 << 7,        /* key_valid / query_valid masks (one-shot) */
  FX_ALLOW = 1 << 8,      /* arbitrary n × n mask (one-shot) */
  FX_BIASKV = 1 << 9,     /* bias_k / bias_v */
  FX_ZERO = 1 << 10,      /* add_zero_attn */
  FX_DIMS = 1 << 11,      /* d_head, d_value, d_out not the defaults */
  FX_DK_WIDE = 1 << 12,   /* d_head = 2 d_model / heads (heads x d_head =
                           2 d_model, as the seeds' d_model 8 -> d_k 16) */
  FX_DK_NARROW = 1 << 13, /* d_head = d_model / (2 heads), d_value =
                             3 d_model / heads */
};

typedef struct {
  SattnConfig cfg;
  SattnWeights w;
  RefModel ref;
  SattnModel *model;
  float *bufs[10];
} Fixture;

/* A configuration of d_model and heads, every other field zero (its
 * default). */
SattnConfig fx_config (size_t d_model, size_t heads);

/* The threads a suite's streams use: SATTN_TEST_THREADS, else 1. */
int fx_threads (void);
/* The precision a suite's streams use: SATTN_TEST_PRECISION=fast, else
 * SATTN_PRECISION_EXACT. */
SattnPrecision fx_precision (void);

/* Weights ~ N(0, 1/fan_in) (the scale of PyTorch's default init), biases
 * ~ N(0, 0.25), bias_k / bias_v ~ N(0, 1).  Returns the sattn_model_new
 * status; on success f->model is set.  lookback is used with FX_LOOKBACK. */
SattnStatus fx_build (Fixture *f, TuRng *r, size_t d_model, size_t heads,
                      unsigned flags, size_t lookback);
void fx_free (Fixture *f);

/* "proj+bias+out+causal..." for messages. */
const char *fx_flags_string (unsigned flags, char *buf, size_t len);

#endif
