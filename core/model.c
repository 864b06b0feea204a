/* SattnModel: resolved configuration plus owned copies of the weights. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* Copy of W (rows × cols) transposed to cols × rows, the layout the
 * projection kernel reads (y = x W^T as rows of x times W^T). */
static float *
dup_transposed (const float *src, size_t rows, size_t cols, int *ok)
{
  if (src == NULL)
    return NULL;
  float *d = malloc (rows * cols * sizeof (float));
  if (d == NULL) {
    *ok = 0;
    return NULL;
  }
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      d[c * rows + r] = src[r * cols + c];
  return d;
}

static float *
dup_floats (const float *src, size_t n, int *ok)
{
  if (src == NULL)
    return NULL;
  float *d = malloc (n * sizeof (float));
  if (d == NULL) {
    *ok = 0;
    return NULL;
  }
  memcpy (d, src, n * sizeof (float));
  return d;
}

static int
finite_or_null (const float *x, size_t n)
{
  return x == NULL || sattn_all_finite (x, n);
}

/* a * b without wrapping; 0 on overflow. */
static size_t
mul_ok (size_t a, size_t b)
{
  if (a != 0 && b > SIZE_MAX / a)
    return 0;
  return a * b;
}

void
sattn_model_free (SattnModel *m)
{
  if (m == NULL)
    return;
  free (m->wq); free (m->bq);
  free (m->wk); free (m->bk);
  free (m->wv); free (m->bv);
  free (m->wo); free (m->bo);
  free (m->k_extra); free (m->v_extra);
  free (m->theta_hi); free (m->theta_lo); free (m->alibi);
  free (m->w1); free (m->b1); free (m->w2); free (m->b2);
  free (m->n1w); free (m->n1b); free (m->n2w); free (m->n2b);
  free (m->zq); free (m->zk); free (m->zv);
  free (m);
}

/* Press et al.: for H a power of two, slope_h = 2^(-8(h+1)/H); else the
 * slopes of the largest power of two P < H, then slopes 0, 2, 4, ... of
 * 2P until there are H. */
double
sattn_alibi_slope (size_t h, size_t heads)
{
  if (heads == 0 || h >= heads)
    return 0.0;
  size_t p = 1;
  while (p * 2 <= heads)
    p *= 2;
  if (h < p)
    return exp2 (-8.0 * (double) (h + 1) / (double) p);
  return exp2 (-8.0 * (double) (2 * (h - p) + 1) / (double) (2 * p));
}

const char *
sattn_model_explain (const SattnConfig *c, const SattnWeights *w)
{
  if (c == NULL)
    return "no configuration";
  if (c->positions > SATTN_POSITIONS_ALIBI)
    return "unknown positional encoding";
  if (c->encoder) {
    if (w == NULL || w->w1 == NULL || w->w2 == NULL)
      return "an encoder layer needs its feed-forward weights (linear1 and "
          "linear2)";
    if (c->d_ff == 0)
      return "an encoder layer needs the feed-forward width (d_ff)";
    if (c->activation > SATTN_ACTIVATION_GELU)
      return "unknown activation";
    if (!(c->norm_eps >= 0.0) || isinf (c->norm_eps))
      return "norm_eps must be finite and >= 0";
    if (c->d_out != 0 && c->d_out != c->d_model)
      return "an encoder layer adds the attention's output to its input: "
          "the output size (d_out) must equal d_model";
  }
  if (c->positions == SATTN_POSITIONS_NONE)
    return NULL;
  if (w != NULL && (w->bias_k != NULL || w->add_zero_attn))
    return "positional encodings cannot be combined with add_bias_kv or "
        "add_zero_attn: their extra keys have no frame position";
  if (c->positions != SATTN_POSITIONS_ALIBI) {
    size_t dh = c->d_head;
    if (dh == 0 && c->heads > 0)
      dh = c->d_model / c->heads;
    if (dh % 2 != 0)
      return "RoPE rotates pairs of values: the head size (d_head) must be "
          "even";
    if (!(c->rope_base == 0.0 || (c->rope_base > 1.0 && isfinite (c->rope_base))))
      return "rope_base must be greater than 1 (or 0 for 10000)";
  }
  return NULL;
}

int
sattn_model_rope (const SattnModel *m)
{
  return m->theta_hi != NULL;
}

/* x_a, x_b <- (x_a cos - x_b sin, x_b cos + x_a sin), angle = pos * theta
 * formed exactly: hi + lo with hi = fl (pos * theta_hi), lo its error
 * (fma) plus pos * theta_lo; sin / cos of hi are correctly reduced by the
 * C library, and |lo| < 2^-20 rad for pos < 2^53 lets cos (hi + lo) = cos hi
 * - lo sin hi to double precision. */
void
sattn_rope_row (const SattnModel *m, float *x, uint64_t pos)
{
  if (m->theta_hi == NULL)
    return;
  const size_t dh = m->cfg.d_head, half = dh / 2, H = m->cfg.heads;
  const int inter = m->cfg.positions == SATTN_POSITIONS_ROPE_INTERLEAVED;
  const double p = (double) pos;
  for (size_t k = 0; k < half; k++) {
    double hi = p * m->theta_hi[k];
    double lo = fma (p, m->theta_hi[k], -hi) + p * m->theta_lo[k];
    double sh = sin (hi), ch = cos (hi);
    double cs = ch - lo * sh, sn = sh + lo * ch;
    size_t ia = inter ? 2 * k : k, ib = inter ? 2 * k + 1 : k + half;
    for (size_t h = 0; h < H; h++) {
      float *xh = x + h * dh;
      double a = xh[ia], b = xh[ib];
      xh[ia] = (float) (a * cs - b * sn);
      xh[ib] = (float) (b * cs + a * sn);
    }
  }
}

SattnModel *
sattn_model_new (const SattnConfig *cfg_in, const SattnWeights *w,
                 SattnStatus *status)
{
  SattnStatus st = SATTN_OK;
  SattnModel *m = NULL;
  SattnWeights none = { 0 };
  SattnConfig c;

  if (cfg_in == NULL) {
    st = SATTN_E_INVAL;
    goto fail;
  }
  if (w == NULL)
    w = &none;
  c = *cfg_in;

  /* --- check every argument before allocating --- */
  if (c.d_model == 0 || c.heads == 0 || c.threads < 0 ||
      !(c.scale >= 0.0f) || isinf (c.scale)) {
    st = SATTN_E_INVAL;
    goto fail;
  }
  if (c.d_head == 0) {
    if (c.d_model % c.heads != 0) {
      st = SATTN_E_SHAPE;
      goto fail;
    }
    c.d_head = c.d_model / c.heads;
  }
  if (c.d_value == 0)
    c.d_value = c.d_head;
  size_t dq = mul_ok (c.heads, c.d_head);
  size_t dv = mul_ok (c.heads, c.d_value);
  if (dq == 0 || dv == 0 || mul_ok (dq, c.d_model) == 0 ||
      mul_ok (dv, c.d_model) == 0) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if (w->wo != NULL) {
    if (c.d_out == 0) {
      st = SATTN_E_SHAPE;   /* rows of wo cannot be guessed */
      goto fail;
    }
  } else {
    if (c.d_out == 0)
      c.d_out = dv;
    if (c.d_out != dv) {
      st = SATTN_E_SHAPE;
      goto fail;
    }
  }
  if (mul_ok (c.d_out, dv) == 0) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if ((w->wq == NULL && dq != c.d_model) ||
      (w->wk == NULL && dq != c.d_model) ||
      (w->wv == NULL && dv != c.d_model)) {
    st = SATTN_E_SHAPE;
    goto fail;
  }
  if (sattn_model_explain (&c, w) != NULL) {
    /* An odd head size is a shape problem; the rest are bad values. */
    int rope = c.positions == SATTN_POSITIONS_ROPE ||
        c.positions == SATTN_POSITIONS_ROPE_INTERLEAVED;
    st = rope && c.d_head % 2 != 0 && w->bias_k == NULL && !w->add_zero_attn
        ? SATTN_E_SHAPE : SATTN_E_INVAL;
    if (c.encoder && (w->w1 == NULL || w->w2 == NULL))
      st = SATTN_E_MISSING;
    else if (c.encoder && c.d_out != 0 && c.d_out != c.d_model)
      st = SATTN_E_SHAPE;
    goto fail;
  }
  if (c.encoder && c.norm_eps == 0.0)
    c.norm_eps = 1e-5;
  if (c.encoder && (mul_ok (c.d_ff, c.d_model) == 0 ||
          c.d_ff > SIZE_MAX / 4 / (c.d_model + 1))) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if (c.encoder &&
      (!finite_or_null (w->w1, c.d_ff * c.d_model) ||
       !finite_or_null (w->b1, c.d_ff) ||
       !finite_or_null (w->w2, c.d_ff * c.d_model) ||
       !finite_or_null (w->b2, c.d_model) ||
       !finite_or_null (w->norm1_w, c.d_model) ||
       !finite_or_null (w->norm1_b, c.d_model) ||
       !finite_or_null (w->norm2_w, c.d_model) ||
       !finite_or_null (w->norm2_b, c.d_model))) {
    st = SATTN_E_NONFINITE;
    goto fail;
  }
  if (c.rope_base == 0.0)
    c.rope_base = 10000.0;
  if ((w->bias_k == NULL) != (w->bias_v == NULL)) {
    st = SATTN_E_INVAL;
    goto fail;
  }
  if (!finite_or_null (w->wq, dq * c.d_model) || !finite_or_null (w->bq, dq) ||
      !finite_or_null (w->wk, dq * c.d_model) || !finite_or_null (w->bk, dq) ||
      !finite_or_null (w->wv, dv * c.d_model) || !finite_or_null (w->bv, dv) ||
      !finite_or_null (w->wo, c.d_out * dv) || !finite_or_null (w->bo, c.d_out) ||
      !finite_or_null (w->bias_k, dq) || !finite_or_null (w->bias_v, dv)) {
    st = SATTN_E_NONFINITE;
    goto fail;
  }
  if (c.scale == 0.0f)
    c.scale = (float) (1.0 / sqrt ((double) c.d_head));

  /* --- allocate --- */
  m = calloc (1, sizeof (*m));
  if (m == NULL) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  m->cfg = c;
  m->dq = dq;
  m->dv = dv;
  m->d_out = c.d_out;
  int ok = 1;
  m->wq = dup_transposed (w->wq, dq, c.d_model, &ok);
  m->bq = dup_floats (w->bq, dq, &ok);
  m->wk = dup_transposed (w->wk, dq, c.d_model, &ok);
  m->bk = dup_floats (w->bk, dq, &ok);
  m->wv = dup_transposed (w->wv, dv, c.d_model, &ok);
  m->bv = dup_floats (w->bv, dv, &ok);
  m->wo = dup_transposed (w->wo, c.d_out, dv, &ok);
  m->bo = dup_floats (w->bo, c.d_out, &ok);
  m->n_extra = (w->bias_k != NULL ? 1 : 0) + (w->add_zero_attn ? 1 : 0);
  if (m->n_extra > 0) {
    m->k_extra = calloc (m->n_extra * dq, sizeof (float));
    m->v_extra = calloc (m->n_extra * dv, sizeof (float));
    if (m->k_extra == NULL || m->v_extra == NULL)
      ok = 0;
    else if (w->bias_k != NULL) {
      memcpy (m->k_extra, w->bias_k, dq * sizeof (float));
      memcpy (m->v_extra, w->bias_v, dv * sizeof (float));
    }
  }
  if (c.encoder) {
    m->w1 = dup_transposed (w->w1, c.d_ff, c.d_model, &ok);
    m->b1 = dup_floats (w->b1, c.d_ff, &ok);
    m->w2 = dup_transposed (w->w2, c.d_model, c.d_ff, &ok);
    m->b2 = dup_floats (w->b2, c.d_model, &ok);
    m->n1w = dup_floats (w->norm1_w, c.d_model, &ok);
    m->n1b = dup_floats (w->norm1_b, c.d_model, &ok);
    m->n2w = dup_floats (w->norm2_w, c.d_model, &ok);
    m->n2b = dup_floats (w->norm2_b, c.d_model, &ok);
    if (ok && c.norm_first && m->n1b != NULL) {
      /* A zero frame (invalid policy ZERO) enters the attention as
       * norm1 (0) = norm1's bias. */
      m->zq = malloc (dq * sizeof (float));
      m->zk = malloc (dq * sizeof (float));
      m->zv = malloc (dv * sizeof (float));
      if (m->zq == NULL || m->zk == NULL || m->zv == NULL)
        ok = 0;
      else {
        sattn_project (m->wq, m->bq, m->n1b, 1, c.d_model, dq, c.d_model,
                       m->zq, dq);
        sattn_project (m->wk, m->bk, m->n1b, 1, c.d_model, dq, c.d_model,
                       m->zk, dq);
        sattn_project (m->wv, m->bv, m->n1b, 1, c.d_model, dv, c.d_model,
                       m->zv, dv);
      }
    }
  }
  if (c.positions == SATTN_POSITIONS_ROPE ||
      c.positions == SATTN_POSITIONS_ROPE_INTERLEAVED) {
    const size_t half = c.d_head / 2;
    m->theta_hi = malloc ((half ? half : 1) * sizeof (double));
    m->theta_lo = malloc ((half ? half : 1) * sizeof (double));
    if (m->theta_hi == NULL || m->theta_lo == NULL)
      ok = 0;
    for (size_t k = 0; ok && k < half; k++) {
      /* In long double (64-bit significand on x86), split into two
       * doubles. */
      long double t = powl ((long double) c.rope_base,
                            -2.0L * (long double) k / (long double) c.d_head);
      m->theta_hi[k] = (double) t;
      m->theta_lo[k] = (double) (t - (long double) m->theta_hi[k]);
    }
  } else if (c.positions == SATTN_POSITIONS_ALIBI) {
    m->alibi = malloc (c.heads * sizeof (float));
    if (m->alibi == NULL)
      ok = 0;
    for (size_t h = 0; ok && h < c.heads; h++)
      m->alibi[h] = (float) sattn_alibi_slope (h, c.heads);
  }
  if (!ok) {
    st = SATTN_E_NOMEM;
    goto fail;
  }
  if (status)
    *status = SATTN_OK;
  return m;

fail:
  sattn_model_free (m);
  if (status)
    *status = st;
  return NULL;
}

const SattnConfig *
sattn_model_config (const SattnModel *m)
{
  return m ? &m->cfg : NULL;
}

size_t
sattn_model_d_out (const SattnModel *m)
{
  return m ? m->d_out : 0;
}

size_t
sattn_model_extra_keys (const SattnModel *m)
{
  return m ? m->n_extra : 0;
}
