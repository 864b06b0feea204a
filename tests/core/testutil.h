/* Shared helpers of the core tests: a fixed-seed PRNG, case bookkeeping,
 * error metrics.  No framework: every executable prints one line per case
 * and a closing "N passed, M failed" line, and exits nonzero on failure.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_TESTUTIL_H
#define SATTN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "sattn/sattn.h"

/* ------------------------------------------------------------------ PRNG */

/* splitmix64 (tests/common/rng.h) + Box-Muller: reproducible on every
 * platform. */
typedef struct {
  uint64_t state;
  int have_spare;
  double spare;
} TuRng;

void tu_rng_init (TuRng *r, uint64_t seed);
uint64_t tu_rng_u64 (TuRng *r);
/* Uniform in (0, 1]. */
double tu_rng_uniform (TuRng *r);
/* Standard normal. */
double tu_rng_normal (TuRng *r);
/* Uniform integer in [lo, hi] (inclusive). */
size_t tu_rng_range (TuRng *r, size_t lo, size_t hi);
/* n floats ~ N(0, sigma^2). */
void tu_fill_normal (TuRng *r, float *x, size_t n, double sigma);

/* ------------------------------------------------------------ bookkeeping */

/* A case is a named group of checks; it passes when none of them fails. */
void tu_case_begin (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));
/* Record a failed check (printed immediately, indented) unless cond. */
int tu_check (int cond, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));
/* Close the case and print "ok"/"FAIL" with an optional detail text. */
void tu_case_end (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
/* Print "N passed, M failed"; return the process exit code. */
int tu_summary (const char *what);

int tu_case_failed (void);

/* Status comparison with a readable message; got is evaluated once. */
int tu_check_status (SattnStatus got, SattnStatus want, const char *what);
#define TU_CHECK_STATUS(got, want, what) tu_check_status ((got), (want), (what))

/* Threads byte identity: run k of runs[0, n_runs) ran with k + 1 threads
 * and holds n floats; every run must equal run 0 byte for byte ("threads
 * K differ" otherwise).  Frees every run (free () of each). */
void tu_check_threads_identical (float *const *runs, size_t n_runs, size_t n);

/* --------------------------------------------------------------- metrics */

/* 1 when the n values of x are all finite. */
int tu_all_finite (const float *x, size_t n);

typedef struct {
  double err2;      /* sum (a - r)^2 */
  double ref2;      /* sum r^2 */
  double max_abs;   /* max |a - r| */
  double max_ref;   /* max |r| */
  size_t nonfinite; /* non-finite entries of a */
  size_t count;
} TuErr;

void tu_err_clear (TuErr *e);
void tu_err_add_f (TuErr *e, const float *a, const double *r, size_t n);
/* Float vs float (e.g. stream vs one-shot); the second argument is the
 * expected value. */
void tu_err_add_ff (TuErr *e, const float *a, const float *r, size_t n);
/* err2 / ref2, or err2 when the reference is all zeros. */
double tu_err_nmse (const TuErr *e);

/* Running worst case of a group of measurements. */
typedef struct {
  double nmse, max_abs, max_abs_rel; /* max_abs_rel = max_abs/(1+max_ref) */
  size_t cases;
} TuWorst;

void tu_worst_add (TuWorst *w, const TuErr *e);

#endif
