/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "testutil.h"

#include "rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ PRNG */

void
tu_rng_init (TuRng *r, uint64_t seed)
{
  r->state = seed;
  r->have_spare = 0;
  r->spare = 0.0;
}

uint64_t
tu_rng_u64 (TuRng *r)
{
  return test_splitmix (&r->state);
}

double
tu_rng_uniform (TuRng *r)
{
  return test_splitmix_uniform (&r->state);
}

double
tu_rng_normal (TuRng *r)
{
  if (r->have_spare) {
    r->have_spare = 0;
    return r->spare;
  }
  double u1 = tu_rng_uniform (r), u2 = tu_rng_uniform (r);
  double rad = sqrt (-2.0 * log (u1));
  double th = 2.0 * M_PI * u2;
  r->spare = rad * sin (th);
  r->have_spare = 1;
  return rad * cos (th);
}

size_t
tu_rng_range (TuRng *r, size_t lo, size_t hi)
{
  if (hi <= lo)
    return lo;
  return lo + (size_t) (tu_rng_u64 (r) % (uint64_t) (hi - lo + 1));
}

void
tu_fill_normal (TuRng *r, float *x, size_t n, double sigma)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float) (sigma * tu_rng_normal (r));
}

/* ------------------------------------------------------------ bookkeeping */

static unsigned tu_passed, tu_failed;
static int tu_in_case, tu_cur_failed;
static char tu_cur_name[256];

void
tu_case_begin (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (tu_cur_name, sizeof tu_cur_name, fmt, ap);
  va_end (ap);
  tu_in_case = 1;
  tu_cur_failed = 0;
  fflush (stdout);
}

int
tu_check (int cond, const char *fmt, ...)
{
  if (cond)
    return 1;
  if (!tu_cur_failed)
    printf ("  in %s:\n", tu_cur_name);
  tu_cur_failed++;
  if (tu_cur_failed <= 10) {
    va_list ap;
    va_start (ap, fmt);
    printf ("    FAILED: ");
    vprintf (fmt, ap);
    printf ("\n");
    va_end (ap);
  } else if (tu_cur_failed == 11) {
    printf ("    (further failures of this case not shown)\n");
  }
  fflush (stdout);
  return 0;
}

int
tu_check_status (SattnStatus got, SattnStatus want, const char *what)
{
  return tu_check (got == want, "%s: got %d (%s), want %d (%s)", what,
                   (int) got, sattn_status_string (got), (int) want,
                   sattn_status_string (want));
}

void
tu_check_threads_identical (float *const *runs, size_t n_runs, size_t n)
{
  for (size_t k = 1; k < n_runs; k++)
    tu_check (memcmp (runs[0], runs[k], n * sizeof (float)) == 0,
              "threads %zu differ", k + 1);
  for (size_t k = 0; k < n_runs; k++)
    free (runs[k]);
}

int
tu_case_failed (void)
{
  return tu_cur_failed != 0;
}

void
tu_case_end (const char *fmt, ...)
{
  char detail[512] = "";
  if (fmt) {
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (detail, sizeof detail, fmt, ap);
    va_end (ap);
  }
  if (tu_cur_failed)
    tu_failed++;
  else
    tu_passed++;
  printf ("%-4s %s%s%s\n", tu_cur_failed ? "FAIL" : "ok", tu_cur_name,
          detail[0] ? "  " : "", detail);
  fflush (stdout);
  tu_in_case = 0;
}

int
tu_summary (const char *what)
{
  printf ("%s: %u passed, %u failed\n", what, tu_passed, tu_failed);
  return tu_failed ? 1 : 0;
}

/* --------------------------------------------------------------- metrics */

int
tu_all_finite (const float *x, size_t n)
{
  for (size_t k = 0; k < n; k++)
    if (!isfinite (x[k]))
      return 0;
  return 1;
}

void
tu_err_clear (TuErr *e)
{
  memset (e, 0, sizeof *e);
}

static void
tu_err_add1 (TuErr *e, double a, double r)
{
  e->count++;
  if (!isfinite (a)) {
    e->nonfinite++;
    e->max_abs = INFINITY;
    e->err2 = INFINITY;
    return;
  }
  double d = a - r;
  e->err2 += d * d;
  e->ref2 += r * r;
  if (fabs (d) > e->max_abs)
    e->max_abs = fabs (d);
  if (fabs (r) > e->max_ref)
    e->max_ref = fabs (r);
}

void
tu_err_add_f (TuErr *e, const float *a, const double *r, size_t n)
{
  for (size_t i = 0; i < n; i++)
    tu_err_add1 (e, a[i], r[i]);
}

void
tu_err_add_ff (TuErr *e, const float *a, const float *r, size_t n)
{
  for (size_t i = 0; i < n; i++)
    tu_err_add1 (e, a[i], r[i]);
}

double
tu_err_nmse (const TuErr *e)
{
  if (e->ref2 > 0.0)
    return e->err2 / e->ref2;
  return e->err2;
}

void
tu_worst_add (TuWorst *w, const TuErr *e)
{
  double nmse = tu_err_nmse (e);
  double rel = e->max_abs / (1.0 + e->max_ref);
  if (w->cases == 0 || nmse > w->nmse || isnan (nmse))
    w->nmse = nmse;
  if (w->cases == 0 || e->max_abs > w->max_abs || isnan (e->max_abs))
    w->max_abs = e->max_abs;
  if (w->cases == 0 || rel > w->max_abs_rel || isnan (rel))
    w->max_abs_rel = rel;
  w->cases++;
}
