/* SattnModel: resolved configuration plus owned copies of the weights.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

/* The weight matrices of a model share one region when together they
 * take at least this many bytes; the region is laid out on 2 MiB
 * boundaries and offered to the kernel as transparent huge pages.  The
 * projection loops read a matrix a row at a time, rows up to pages apart
 * (d_model 480 in double: 3840 bytes), and with 4 KiB pages nearly every
 * row costs a TLB miss: a 160-frame block of 480 x 480 products in double
 * ran at 63 % of the FMA peak in a hot loop, 74 % on huge pages.  One
 * region for all matrices rounds up once, not per copy.  Only advice,
 * and only for this memory: where the kernel does not follow it nothing
 * changes but the alignment. */
#define HUGE_WEIGHTS ((size_t) 256 << 10)
#define HUGE_PAGE ((size_t) 2 << 20)

/* Bytes of n elements of size sz in a region: whole cache lines. */
static size_t
region_bytes (size_t n, size_t sz)
{
  if (n > (SIZE_MAX - 64) / sz)
    return SIZE_MAX;
  return (n * sz + 63) / 64 * 64;
}

/* A region of at least bytes, released with sattn_mem_free (); NULL on
 * failure. */
static void *
region_alloc (size_t bytes)
{
  if (bytes > SIZE_MAX - HUGE_PAGE)
    return NULL;
  const size_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  void *p = sattn_mem_alloc (size, HUGE_PAGE);
  if (p == NULL)
    return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void) madvise (p, size, MADV_HUGEPAGE);
#endif
  return p;
}

/* One weight matrix of the model: src (rows × cols floats, NULL: none)
 * copied transposed, cols × rows (the layout the projection loops read:
 * y = x W^T as rows of x times W^T), into *f (float) or *d (double),
 * exactly one of the two set. */
typedef struct {
  float **f;
  double **d;
  const float *src;
  size_t rows, cols;
} MatCopy;

/* Every matrix of plan, all in m->region when they take HUGE_WEIGHTS
 * bytes or more together (and the region could be had), else each on
 * its own; 0 when out of memory. */
static int
copy_matrices (SattnModel *m, const MatCopy *plan, size_t n)
{
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    if (plan[i].src != NULL) {
      size_t b = region_bytes (plan[i].rows * plan[i].cols,
                               plan[i].f ? sizeof (float) : sizeof (double));
      total = b > SIZE_MAX - total ? SIZE_MAX : total + b;
    }
  char *next = NULL;
  if (total >= HUGE_WEIGHTS && total != SIZE_MAX) {
    m->region = region_alloc (total);
    next = m->region;
  }
  for (size_t i = 0; i < n; i++) {
    const MatCopy *c = &plan[i];
    if (c->src == NULL)
      continue;
    const size_t sz = c->f ? sizeof (float) : sizeof (double);
    void *p = next ? (void *) next : malloc (c->rows * c->cols * sz);
    if (p == NULL)
      return 0;
    if (next)
      next += region_bytes (c->rows * c->cols, sz);
    for (size_t r = 0; r < c->rows; r++)
      for (size_t k = 0; k < c->cols; k++) {
        if (c->f)
          ((float *) p)[k * c->rows + r] = c->src[r * c->cols + k];
        else
          ((double *) p)[k * c->rows + r] = c->src[r * c->cols + k];
      }
    if (c->f)
      *c->f = p;
    else
      *c->d = p;
  }
  return 1;
}

/* Frees a weight matrix: with a region, every matrix lies in it (see
 * copy_matrices) and goes with it. */
static void
free_matrix (const SattnModel *m, void *p)
{
  if (m->region == NULL)
    free (p);
}

/* Copy of the vector src (n floats; the biases, the LayerNorm
 * parameters) as floats or, for the sums in double, as doubles.  NULL
 * for src NULL; *ok = 0 when out of memory.  The weight matrices are
 * copied by copy_matrices. */
#define DEFINE_DUP_VECTOR(name, T)                     \
  static T *name (const float *src, size_t n, int *ok) \
  {                                                    \
    if (src == NULL)                                   \
      return NULL;                                     \
    T *d = malloc (n * sizeof (T));                    \
    if (d == NULL) {                                   \
      *ok = 0;                                         \
      return NULL;                                     \
    }                                                  \
    for (size_t i = 0; i < n; i++)                     \
      d[i] = src[i];                                   \
    return d;                                          \
  }

DEFINE_DUP_VECTOR (dup_floats, float)
DEFINE_DUP_VECTOR (dup_doubles, double)

/* A weight tensor of rows × cols floats (cols 0: a vector) must be finite:
 * names the first NaN / Inf. */
static SattnStatus
check_finite (const char *name, const float *x, size_t rows, size_t cols,
              char *err, size_t err_len)
{
  size_t n = cols ? rows * cols : rows;
  size_t i = x ? sattn_first_nonfinite (x, n) : n;
  if (i == n)
    return SATTN_OK;
  if (cols)
    return sattn_fail (SATTN_E_NONFINITE, err, err_len,
                       "weight %s holds %s at [%zu, %zu]; every weight "
                       "must be finite",
                       name, isnan (x[i]) ? "NaN" : "Inf", i / cols, i % cols);
  return sattn_fail (SATTN_E_NONFINITE, err, err_len,
                     "weight %s holds %s at element %zu; every weight must "
                     "be finite",
                     name, isnan (x[i]) ? "NaN" : "Inf", i);
}

/* model_resolve's steps, in the order it runs them: each checks one
 * concern of the configuration c (already read into this version's
 * struct) and its weights w, and may fill c's 0-defaults. */

/* The scale's class and value from its bits: in a thread that treats
 * denormals as zero (the DAZ and FTZ bits of MXCSR, which libraries a
 * process loads may set: GStreamer's soundtouch plugin does when it is
 * loaded), float comparisons and conversions see a subnormal scale as 0,
 * the default. */
static SattnStatus
check_scale (const SattnConfig *c, char *err, size_t err_len)
{
  uint32_t sb;
  memcpy (&sb, &c->scale, sizeof sb);
  const int sub = (sb & 0x7f800000u) == 0 && (sb & 0x007fffffu) != 0;
  const double sval = sub ? ldexp ((double) (sb & 0x007fffffu), -149) *
                                (sb >> 31 ? -1.0 : 1.0)
                          : (double) c->scale;
  if ((sb >> 31 && (sb & 0x7fffffffu) != 0) || isnan (c->scale) ||
      isinf (c->scale))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "scale=%g is not a finite number >= 0; use scale=0 "
                       "for the default 1/sqrt(d_head) or a positive value",
                       sval);
  if (sub)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "scale=%g is below the smallest normal float (%g), "
                       "the precision the scores are computed in; use "
                       "scale=0 for the default 1/sqrt(d_head) or a value "
                       "of at least %g",
                       sval, (double) FLT_MIN, (double) FLT_MIN);
  return SATTN_OK;
}

/* d_head and d_value (0: from d_model and heads) and the projected sizes
 * heads x d_head (*dq) and heads x d_value (*dv). */
static SattnStatus
resolve_sizes (SattnConfig *c, size_t *dq, size_t *dv, char *err,
               size_t err_len)
{
  char ok[160];

  if (c->d_head == 0) {
    if (c->d_model % c->heads != 0) {
      sattn_divisors (ok, sizeof ok, c->d_model, c->heads);
      return sattn_fail (SATTN_E_SHAPE, err, err_len,
                         "heads=%zu does not divide d_model=%zu; heads "
                         "values that work: %s",
                         c->heads, c->d_model, ok);
    }
    c->d_head = c->d_model / c->heads;
  }
  if (c->d_value == 0)
    c->d_value = c->d_head;
  *dq = sattn_size_mul (c->heads, c->d_head);
  *dv = sattn_size_mul (c->heads, c->d_value);
  if (*dq == 0 || *dv == 0 || *dq == SIZE_MAX || *dv == SIZE_MAX ||
      sattn_size_mul (*dq, c->d_model) == SIZE_MAX ||
      sattn_size_mul (*dv, c->d_model) == SIZE_MAX)
    return sattn_fail (SATTN_E_NOMEM, err, err_len,
                       "heads=%zu x d_head=%zu (d_value=%zu) x d_model=%zu "
                       "floats of projection weights overflow the address "
                       "space",
                       c->heads, c->d_head, c->d_value, c->d_model);
  return SATTN_OK;
}

/* The output projection's rows (d_out) and the identity projections
 * that the sizes must allow where a weight is not given. */
static SattnStatus
check_projections (SattnConfig *c, const SattnWeights *w, size_t dq, size_t dv,
                   char *err, size_t err_len)
{
  char ok[160];

  if (w->wo != NULL) {
    if (c->d_out == 0) /* rows of wo cannot be guessed */
      return sattn_fail (SATTN_E_SHAPE, err, err_len,
                         "an output projection wo needs d_out, its number "
                         "of rows (d_out=0 means \"no wo\")");
  } else {
    if (c->d_out == 0)
      c->d_out = dv;
    if (c->d_out != dv)
      return sattn_fail (SATTN_E_SHAPE, err, err_len,
                         "d_out=%zu without an output projection: the "
                         "output rows are heads x d_value = %zu values; use "
                         "d_out=0 or %zu, or give wo",
                         c->d_out, dv, dv);
  }
  if (sattn_size_mul (c->d_out, dv) == SIZE_MAX)
    return sattn_fail (SATTN_E_NOMEM, err, err_len,
                       "d_out=%zu x %zu floats of output projection "
                       "overflow the address space",
                       c->d_out, dv);
  if ((w->wq == NULL || w->wk == NULL) && dq != c->d_model) {
    sattn_divisors (ok, sizeof ok, c->d_model, c->heads);
    return sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "heads=%zu x d_head=%zu = %zu is not d_model=%zu, "
                       "which the identity %s projection (no %s given) "
                       "needs; use d_head=0 with heads one of: %s",
                       c->heads, c->d_head, dq, c->d_model,
                       w->wq == NULL ? "query" : "key",
                       w->wq == NULL ? "wq" : "wk", ok);
  }
  if (w->wv == NULL && dv != c->d_model) {
    sattn_divisors (ok, sizeof ok, c->d_model, c->heads);
    return sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "heads=%zu x d_value=%zu = %zu is not d_model=%zu, "
                       "which the identity value projection (no wv given) "
                       "needs; use d_value=0 and d_head=0 with heads one "
                       "of: %s",
                       c->heads, c->d_value, dv, c->d_model, ok);
  }
  return SATTN_OK;
}

/* add_bias_kv's pair, the positional encoding and RoPE's rules. */
static SattnStatus
check_positions (const SattnConfig *c, const SattnWeights *w, char *err,
                 size_t err_len)
{
  if ((w->bias_k == NULL) != (w->bias_v == NULL))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "bias_k and bias_v come together (PyTorch "
                       "add_bias_kv): give both or neither");
  if (c->positions > SATTN_POSITIONS_ALIBI)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "positions=%d is not a positional encoding (none, "
                       "rope, rope-interleaved, alibi)",
                       (int) c->positions);
  if (c->positions != SATTN_POSITIONS_NONE &&
      (w->bias_k != NULL || w->add_zero_attn))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "positional encodings cannot be combined with "
                       "add_bias_kv or add_zero_attn: their extra keys have "
                       "no frame position");
  if (c->positions == SATTN_POSITIONS_ROPE ||
      c->positions == SATTN_POSITIONS_ROPE_INTERLEAVED) {
    if (c->d_head % 2 != 0)
      return sattn_fail (SATTN_E_SHAPE, err, err_len,
                         "RoPE rotates pairs of values: d_head=%zu must be "
                         "even",
                         c->d_head);
    if (!(c->rope_base == 0.0 ||
          (c->rope_base > 1.0 && isfinite (c->rope_base))))
      return sattn_fail (SATTN_E_INVAL, err, err_len,
                         "rope_base=%g must be a finite number > 1 (or 0 "
                         "for 10000)",
                         c->rope_base);
  }
  return SATTN_OK;
}

/* An encoder layer's feed-forward and norms (c->encoder). */
static SattnStatus
check_encoder (SattnConfig *c, const SattnWeights *w, char *err, size_t err_len)
{
  SattnStatus st;

  if (w->w1 == NULL || w->w2 == NULL)
    return sattn_fail (SATTN_E_MISSING, err, err_len,
                       "an encoder layer needs its feed-forward weights: "
                       "%s is missing",
                       w->w1 == NULL ? "w1 (linear1)" : "w2 (linear2)");
  if (c->d_ff == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "d_ff=0: an encoder layer needs the feed-forward "
                       "width (the rows of linear1)");
  if (c->activation > SATTN_ACTIVATION_GELU)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "activation=%d is neither relu nor gelu",
                       (int) c->activation);
  if (!(c->norm_eps >= 0.0) || isinf (c->norm_eps))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "norm_eps=%g must be a finite number >= 0", c->norm_eps);
  if (c->d_out != c->d_model)
    return sattn_fail (SATTN_E_SHAPE, err, err_len,
                       "an encoder layer adds the attention's output to "
                       "its input: d_out=%zu must equal d_model=%zu",
                       c->d_out, c->d_model);
  if (c->d_ff == 0 || sattn_size_mul (c->d_ff, c->d_model) == SIZE_MAX ||
      c->d_ff > SIZE_MAX / 4 / (c->d_model + SATTN_LAYER_ROWS))
    return sattn_fail (SATTN_E_NOMEM, err, err_len,
                       "d_ff=%zu x d_model=%zu floats of feed-forward "
                       "weights overflow the address space",
                       c->d_ff, c->d_model);
  if ((st = check_finite ("w1", w->w1, c->d_ff, c->d_model, err, err_len)) ||
      (st = check_finite ("b1", w->b1, c->d_ff, 0, err, err_len)) ||
      (st = check_finite ("w2", w->w2, c->d_model, c->d_ff, err, err_len)) ||
      (st = check_finite ("b2", w->b2, c->d_model, 0, err, err_len)) ||
      (st = check_finite ("norm1_w", w->norm1_w, c->d_model, 0, err,
                          err_len)) ||
      (st = check_finite ("norm1_b", w->norm1_b, c->d_model, 0, err,
                          err_len)) ||
      (st = check_finite ("norm2_w", w->norm2_w, c->d_model, 0, err,
                          err_len)) ||
      (st = check_finite ("norm2_b", w->norm2_b, c->d_model, 0, err, err_len)))
    return st;
  if (c->norm_eps == 0.0)
    c->norm_eps = 1e-5;
  return SATTN_OK;
}

/* Every rule a model configuration and its weights must follow, the one
 * place they are written: resolves cfg into *c (0-defaults replaced), the
 * caller's weights into *wl (this version's struct; all NULL for w NULL)
 * and the projected sizes, or says in err what is wrong and what would
 * work. */
static SattnStatus
model_resolve (const SattnConfig *cfg, const SattnWeights *w_in, SattnConfig *c,
               SattnWeights *wl, size_t *dq_out, size_t *dv_out, char *err,
               size_t err_len)
{
  const SattnWeights *w = wl;
  size_t dq = 0, dv = 0;
  SattnStatus st;

  if (err != NULL && err_len > 0)
    err[0] = '\0';
  *wl = (SattnWeights){ .struct_size = sizeof (SattnWeights) };
  if (cfg == NULL)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "no model configuration (cfg is NULL)");
  if ((st = sattn_struct_in ("SattnConfig", "SattnConfig", cfg, c, sizeof *c,
                             SATTN_CONFIG_MIN_SIZE, SIZE_MAX, err, err_len)) !=
      SATTN_OK)
    return st;
  if (w_in != NULL &&
      (st = sattn_struct_in ("SattnWeights", "SattnWeights", w_in, wl,
                             sizeof *wl, SATTN_WEIGHTS_MIN_SIZE, SIZE_MAX, err,
                             err_len)) != SATTN_OK)
    return st;

  if (c->d_model == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "d_model=0: a frame needs at least one value");
  if (c->heads == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "heads=0: at least one head is needed");
  if ((st = check_scale (c, err, err_len)) ||
      (st = resolve_sizes (c, &dq, &dv, err, err_len)) ||
      (st = check_projections (c, w, dq, dv, err, err_len)) ||
      (st = check_positions (c, w, err, err_len)) ||
      (c->encoder && (st = check_encoder (c, w, err, err_len))))
    return st;
  if (c->rope_base == 0.0)
    c->rope_base = 10000.0;
  if ((st = check_finite ("wq", w->wq, dq, c->d_model, err, err_len)) ||
      (st = check_finite ("bq", w->bq, dq, 0, err, err_len)) ||
      (st = check_finite ("wk", w->wk, dq, c->d_model, err, err_len)) ||
      (st = check_finite ("bk", w->bk, dq, 0, err, err_len)) ||
      (st = check_finite ("wv", w->wv, dv, c->d_model, err, err_len)) ||
      (st = check_finite ("bv", w->bv, dv, 0, err, err_len)) ||
      (st = check_finite ("wo", w->wo, c->d_out, dv, err, err_len)) ||
      (st = check_finite ("bo", w->bo, c->d_out, 0, err, err_len)) ||
      (st = check_finite ("bias_k", w->bias_k, dq, 0, err, err_len)) ||
      (st = check_finite ("bias_v", w->bias_v, dv, 0, err, err_len)))
    return st;
  if (c->scale == 0.0f)
    c->scale = (float) (1.0 / sqrt ((double) c->d_head));
  *dq_out = dq;
  *dv_out = dv;
  return SATTN_OK;
}

SattnStatus
sattn_model_check (const SattnConfig *cfg, const SattnWeights *w, char *err,
                   size_t err_len)
{
  SattnConfig c;
  SattnWeights wl;
  size_t dq = 0, dv = 0;
  return model_resolve (cfg, w, &c, &wl, &dq, &dv, err, err_len);
}

void
sattn_model_free (SattnModel *m)
{
  if (m == NULL)
    return;
  sattn_net_free (m->net);
  free_matrix (m, m->wq);
  free (m->bq);
  free_matrix (m, m->wk);
  free (m->bk);
  free_matrix (m, m->wv);
  free (m->bv);
  free_matrix (m, m->wo);
  free (m->bo);
  sattn_mem_free (m->wqkv);
  free (m->k_extra);
  free (m->v_extra);
  free (m->theta_hi);
  free (m->theta_lo);
  free (m->alibi);
  free_matrix (m, m->w1);
  free (m->b1);
  free_matrix (m, m->w2);
  free (m->b2);
  free (m->w1f);
  free (m->b1f);
  free (m->w2f);
  free (m->b2f);
  free (m->n1w);
  free (m->n1b);
  free (m->n2w);
  free (m->n2b);
  free (m->zq);
  free (m->zk);
  free (m->zv);
  free_matrix (m, m->wqd);
  free (m->bqd);
  free_matrix (m, m->wkd);
  free (m->bkd);
  free_matrix (m, m->wvd);
  free (m->bvd);
  free_matrix (m, m->wod);
  free (m->bod);
  sattn_mem_free (m->region);
  free (m);
}

SattnModel *
sattn_model_new (const SattnConfig *cfg_in, const SattnWeights *w_in,
                 SattnStatus *status)
{
  SattnStatus st = SATTN_OK;
  SattnModel *m = NULL;
  SattnWeights wl;
  const SattnWeights *w = &wl;
  SattnConfig c;
  size_t dq = 0, dv = 0;

  /* --- check every argument before allocating --- */
  st = model_resolve (cfg_in, w_in, &c, &wl, &dq, &dv, NULL, 0);
  if (st != SATTN_OK)
    goto fail;

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
  /* The projections summed in double (see SattnModel): V and the output
   * projection always, Q and K in encoder layers and with RoPE. */
  const int qk_double = c.encoder || c.positions == SATTN_POSITIONS_ROPE ||
                        c.positions == SATTN_POSITIONS_ROPE_INTERLEAVED;
  const MatCopy plan[] = {
    { &m->wq, NULL, w->wq, dq, c.d_model },
    { &m->wk, NULL, w->wk, dq, c.d_model },
    { &m->wv, NULL, w->wv, dv, c.d_model },
    { &m->wo, NULL, w->wo, c.d_out, dv },
    { NULL, &m->wqd, qk_double ? w->wq : NULL, dq, c.d_model },
    { NULL, &m->wkd, qk_double ? w->wk : NULL, dq, c.d_model },
    { NULL, &m->wvd, w->wv, dv, c.d_model },
    { NULL, &m->wod, w->wo, c.d_out, dv },
    { NULL, &m->w1, c.encoder ? w->w1 : NULL, c.d_ff, c.d_model },
    { NULL, &m->w2, c.encoder ? w->w2 : NULL, c.d_model, c.d_ff },
  };
  int ok = copy_matrices (m, plan, sizeof plan / sizeof plan[0]);
  m->bq = dup_floats (w->bq, dq, &ok);
  m->bk = dup_floats (w->bk, dq, &ok);
  m->bv = dup_floats (w->bv, dv, &ok);
  m->bo = dup_floats (w->bo, c.d_out, &ok);
  m->bqd = m->wqd != NULL ? dup_doubles (w->bq, dq, &ok) : NULL;
  m->bkd = m->wkd != NULL ? dup_doubles (w->bk, dq, &ok) : NULL;
  m->bvd = m->wvd != NULL ? dup_doubles (w->bv, dv, &ok) : NULL;
  m->bod = m->wod != NULL ? dup_doubles (w->bo, c.d_out, &ok) : NULL;
  /* Only the tasks of streams with workers read wqkv (project_head in
   * stream.c), but a model does not know its streams' thread counts, so
   * every model whose geometry qualifies holds it: narrow heads only,
   * where it is 2 x d_model x heads x d_head floats (V sums in double, so
   * its columns are not packed), the size of the float wq and wk.  The
   * products from wq / wk / wv give the same bytes. */
  if (ok && m->wq && m->wk && m->wv && !c.encoder && c.d_head < 32 &&
      c.d_value < 32 && c.positions != SATTN_POSITIONS_ROPE &&
      c.positions != SATTN_POSITIONS_ROPE_INTERLEAVED) {
    /* V's columns only when V sums in float (m->wvd is set above). */
    const size_t dh = c.d_head, dvh = c.d_value;
    const size_t hw = sattn_wqkv_head_width (m), ld = c.heads * hw;
    m->wqkv = sattn_mem_alloc (c.d_model * ld * sizeof (float), 64);
    if (m->wqkv == NULL)
      ok = 0;
    for (size_t t = 0; ok && t < c.d_model; t++)
      for (size_t h = 0; h < c.heads; h++) {
        float *r = m->wqkv + t * ld + h * hw;
        memcpy (r, m->wq + t * dq + h * dh, dh * sizeof (float));
        memcpy (r + dh, m->wk + t * dq + h * dh, dh * sizeof (float));
        if (hw > 2 * dh)
          memcpy (r + 2 * dh, m->wv + t * dv + h * dvh, dvh * sizeof (float));
      }
  }
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
    m->b1 = dup_doubles (w->b1, c.d_ff, &ok);
    m->b2 = dup_doubles (w->b2, c.d_model, &ok);
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
        sattn_project_prec (m, 0, m->wq, m->bq, m->n1b, 1, c.d_model, dq,
                            c.d_model, m->zq, dq);
        sattn_project_prec (m, 0, m->wk, m->bk, m->n1b, 1, c.d_model, dq,
                            c.d_model, m->zk, dq);
        sattn_project_prec (m, 0, m->wv, m->bv, m->n1b, 1, c.d_model, dv,
                            c.d_model, m->zv, dv);
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

SattnStatus
sattn_attend (const SattnModel *m, const float *x, size_t n,
              const SattnMask *mask, float *out, float *weights,
              SattnStats *stats)
{
  if (m == NULL || x == NULL || out == NULL || n == 0)
    return SATTN_E_INVAL;
  if (m->net != NULL)
    return sattn_net_attend (m, x, n, mask, out, weights, stats);
  SattnAttendScratch scr;
  SattnStatus st = sattn_attend_scratch_new (m, n, &scr);
  if (st != SATTN_OK)
    return st;
  sattn_attend_run (m, x, n, mask, out, weights, stats, 1, &scr);
  if (stats) {
    stats->windows++;
    stats->frames += n;
  }
  sattn_attend_scratch_free (&scr);
  return SATTN_OK;
}
