/* The projections of a layer at a precision: summed in double
 * (cpu/linear.c) when the model keeps a double copy of the weights and
 * the caller computes exactly, in float (cpu/project.c) otherwise --
 * precision=fast is the callers' fast argument, not another model.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "nn/nn.h"

/* The double copy of projection weights Wt (and its bias) of m, or NULL
 * when that projection sums in float: always with fast (precision=fast
 * sums every projection in float from m's float weights). */
static const double *
double_weights (const SattnModel *m, int fast, const float *Wt,
                const double **bd)
{
  if (Wt == NULL || fast)
    return NULL;
  if (Wt == m->wq) {
    *bd = m->bqd;
    return m->wqd;
  }
  if (Wt == m->wk) {
    *bd = m->bkd;
    return m->wkd;
  }
  if (Wt == m->wv) {
    *bd = m->bvd;
    return m->wvd;
  }
  if (Wt == m->wo) {
    *bd = m->bod;
    return m->wod;
  }
  return NULL;
}

void
sattn_project_cols_prec (const SattnModel *m, int fast, const float *Wt,
                         const float *b, const float *x, size_t n, size_t d_in,
                         size_t d_out, size_t c0, size_t c1, size_t ldx,
                         float *y, size_t ldy)
{
  const double *bd = NULL, *wd = double_weights (m, fast, Wt, &bd);
  if (wd == NULL) {
    sattn_project_cols (Wt, b, x, n, d_in, d_out, c0, c1, ldx, y, ldy);
    return;
  }
  if (n == 0 || c1 <= c0)
    return;
  sattn_linear_f (x, ldx, n, wd + c0, d_out, bd != NULL ? bd + c0 : NULL, d_in,
                  c1 - c0, y + c0, ldy);
}

void
sattn_project_prec (const SattnModel *m, int fast, const float *Wt,
                    const float *b, const float *x, size_t n, size_t d_in,
                    size_t d_out, size_t ldx, float *y, size_t ldy)
{
  const double *bd = NULL;
  if (double_weights (m, fast, Wt, &bd) != NULL)
    sattn_project_cols_prec (m, fast, Wt, b, x, n, d_in, d_out, 0, d_out, ldx,
                             y, ldy);
  else
    sattn_project (Wt, b, x, n, d_in, d_out, ldx, y, ldy);
}

int
sattn_project_is_double (const SattnModel *m, int fast, const float *Wt)
{
  const double *bd = NULL;
  return double_weights (m, fast, Wt, &bd) != NULL;
}
