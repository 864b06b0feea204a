/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *
fx_alloc (Fixture *f, size_t n)
{
  for (size_t i = 0; i < sizeof f->bufs / sizeof f->bufs[0]; i++) {
    if (!f->bufs[i]) {
      f->bufs[i] = malloc ((n ? n : 1) * sizeof (float));
      if (!f->bufs[i])
        abort ();
      return f->bufs[i];
    }
  }
  abort ();
}

static float *
fx_normal (Fixture *f, TuRng *r, size_t n, double sigma)
{
  float *p = fx_alloc (f, n);
  tu_fill_normal (r, p, n, sigma);
  return p;
}

SattnStatus
fx_build (Fixture *f, TuRng *r, size_t d_model, size_t heads, unsigned flags,
          size_t lookback)
{
  memset (f, 0, sizeof *f);
  size_t dh = d_model / heads, dv = dh, d_out = 0;
  f->cfg.d_model = d_model;
  f->cfg.heads = heads;
  if (flags & FX_DIMS) {
    dh = d_model / heads + 2;
    dv = (d_model / heads) / 2 + 1;
    f->cfg.d_head = dh;
    f->cfg.d_value = dv;
  }
  if (flags & FX_DK_WIDE) {
    dh = dv = 2 * d_model / heads;
    f->cfg.d_head = dh;
  }
  if (flags & FX_DK_NARROW) {
    dh = d_model / (2 * heads) > 0 ? d_model / (2 * heads) : 1;
    dv = 3 * d_model / heads;
    f->cfg.d_head = dh;
    f->cfg.d_value = dv;
  }
  if (flags & FX_OUT) {
    d_out = (flags & (FX_DIMS | FX_DK_WIDE | FX_DK_NARROW)) ? d_model + 3
                                                            : heads * dv;
    f->cfg.d_out = d_out;
  } else {
    d_out = heads * dv;
  }
  f->cfg.scale = (flags & FX_UNIT) ? 1.0f : 0.0f;
  f->cfg.causal = (flags & FX_CAUSAL) != 0;
  f->cfg.lookback = (flags & FX_LOOKBACK) ? lookback : 0;

  const size_t dq = heads * dh, dvt = heads * dv;
  if (flags & FX_PROJ) {
    f->w.wq = fx_normal (f, r, dq * d_model, 1.0 / sqrt ((double) d_model));
    f->w.wk = fx_normal (f, r, dq * d_model, 1.0 / sqrt ((double) d_model));
    f->w.wv = fx_normal (f, r, dvt * d_model, 1.0 / sqrt ((double) d_model));
  }
  if (flags & FX_BIAS) {
    f->w.bq = fx_normal (f, r, dq, 0.5);
    f->w.bk = fx_normal (f, r, dq, 0.5);
    f->w.bv = fx_normal (f, r, dvt, 0.5);
  }
  if (flags & FX_OUT)
    f->w.wo = fx_normal (f, r, d_out * dvt, 1.0 / sqrt ((double) dvt));
  if (flags & FX_BO)
    f->w.bo = fx_normal (f, r, d_out, 0.5);
  if (flags & FX_BIASKV) {
    f->w.bias_k = fx_normal (f, r, dq, 1.0);
    f->w.bias_v = fx_normal (f, r, dvt, 1.0);
  }
  f->w.add_zero_attn = (flags & FX_ZERO) != 0;

  RefModel *m = &f->ref;
  m->d_model = d_model;
  m->heads = heads;
  m->d_head = dh;
  m->d_value = dv;
  m->d_out = d_out;
  m->scale = (flags & FX_UNIT) ? 1.0 : 1.0 / sqrt ((double) dh);
  m->causal = f->cfg.causal;
  m->lookback = f->cfg.lookback;
  m->wq = f->w.wq;
  m->wk = f->w.wk;
  m->wv = f->w.wv;
  m->bq = f->w.bq;
  m->bk = f->w.bk;
  m->bv = f->w.bv;
  m->wo = f->w.wo;
  m->bo = f->w.bo;
  m->bias_k = f->w.bias_k;
  m->bias_v = f->w.bias_v;
  m->add_zero_attn = f->w.add_zero_attn;

  SattnStatus st = SATTN_E_INVAL;
  f->model = sattn_model_new (&f->cfg, &f->w, &st);
  return f->model ? SATTN_OK : st;
}

SattnConfig
fx_config (size_t d_model, size_t heads)
{
  SattnConfig c;
  memset (&c, 0, sizeof c);
  c.d_model = d_model;
  c.heads = heads;
  return c;
}

int
fx_threads (void)
{
  /* SATTN_TEST_THREADS runs a suite with the core's worker threads. */
  const char *thr = getenv ("SATTN_TEST_THREADS");
  return thr != NULL ? atoi (thr) : 1;
}

SattnPrecision
fx_precision (void)
{
  /* SATTN_TEST_PRECISION=fast runs a suite's streams with
   * SATTN_PRECISION_FAST. */
  const char *p = getenv ("SATTN_TEST_PRECISION");
  return p != NULL && strcmp (p, "fast") == 0 ? SATTN_PRECISION_FAST
                                              : SATTN_PRECISION_EXACT;
}

void
fx_free (Fixture *f)
{
  sattn_model_free (f->model);
  for (size_t i = 0; i < sizeof f->bufs / sizeof f->bufs[0]; i++)
    free (f->bufs[i]);
  memset (f, 0, sizeof *f);
}

const char *
fx_flags_string (unsigned flags, char *buf, size_t len)
{
  static const char *names[] = { "proj",    "bias",     "out",      "bo",
                                 "unit",    "causal",   "lookback", "pad",
                                 "allow",   "biaskv",   "zeroattn", "dims",
                                 "dk-wide", "dk-narrow" };
  size_t pos = 0;
  buf[0] = '\0';
  if (!(flags & FX_PROJ))
    pos += (size_t) snprintf (buf, len, "identity");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(flags & (1u << i)))
      continue;
    if (pos < len)
      pos += (size_t) snprintf (buf + pos, len - pos, "%s%s", pos ? "+" : "",
                                names[i]);
  }
  return buf;
}
