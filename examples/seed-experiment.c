/* seed-experiment — why attention scores are scaled, and why the softmax
 * subtracts the row maximum, reproduced with libsattn.
 *
 * One query attends to 64 keys, all entries ~ N(0,1).  With identity
 * projections (heads = 1, d_model = d_k) the score of key j is q·k_j, whose
 * variance is d_k: unscaled (scale = 1) the softmax saturates towards
 * one-hot as d_k grows, scaled (scale = 1/sqrt(d_k)) it stays spread out.
 *
 * Part 1 prints, for d_k in {32, 128, 512}, the mean over random trials of
 * the largest weight, the smallest weight and the entropy of the weights
 * divided by log(64) (1 = uniform, 0 = one-hot).
 *
 * Part 2 multiplies the inputs by 3 and counts the rows that a naive float32
 * softmax (exp without subtracting the maximum) turns into inf/NaN, against
 * the rows of sattn's output that are not finite (always zero).
 *
 * The program checks its own claims and exits with status 1 if one fails:
 * sattn's weights and outputs are finite, each weight row sums to 1 and
 * matches a float64 softmax computed here; the unscaled rows at d_k = 512
 * are saturated while the scaled ones are not; the naive softmax breaks on
 * some rows.
 *
 * Usage: seed-experiment [TRIALS [SEED]]   (defaults: 200 trials, seed 1)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sattn/sattn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_KEYS 64
#define N_ROWS (N_KEYS + 1) /* row 0 is the query, rows 1..64 the keys */
#define AMPLITUDE 3.0f

/* ------------------------------------------------------ random numbers */

static uint64_t rng_state;

static uint64_t
rng_next (void)
{
  /* splitmix64: small, good enough for Gaussian test data */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double
rng_uniform (void)
{
  /* in (0, 1): never 0, so log() below is finite */
  return ((double) (rng_next () >> 11) + 0.5) / 9007199254740992.0;
}

static double
rng_gauss (void)
{
  static int have_spare;
  static double spare;
  if (have_spare) {
    have_spare = 0;
    return spare;
  }
  double u = rng_uniform (), v = rng_uniform ();
  double r = sqrt (-2.0 * log (u));
  spare = r * sin (2.0 * M_PI * v);
  have_spare = 1;
  return r * cos (2.0 * M_PI * v);
}

/* ----------------------------------------------------- naive softmax */

/* The textbook formula as it is often first written: exp of the raw scores,
 * no max subtraction, all in float32.  Returns 1 if the row ended up with a
 * non-finite weight. */
static int
naive_softmax_row (const float *q, const float *keys, size_t d, float scale,
                   float *w)
{
  float sum = 0.0f;
  for (size_t j = 0; j < N_KEYS; j++) {
    float s = 0.0f;
    for (size_t t = 0; t < d; t++)
      s += q[t] * keys[j * d + t];
    w[j] = expf (s * scale);
    sum += w[j];
  }
  int bad = 0;
  for (size_t j = 0; j < N_KEYS; j++) {
    w[j] /= sum;
    if (!isfinite (w[j]))
      bad = 1;
  }
  return bad;
}

/* ------------------------------------------------- float64 reference */

/* softmax(scale * q·k_j) in double precision, with max subtraction.
 * Returns the tolerance for a float32 implementation of the same row:
 * a float32 dot product of length d is off by at most
 * gamma_d * sum_t |q_t k_t| with gamma_d = d u / (1 - d u), u = 2^-24;
 * if every score moves by at most delta, every weight moves by at most
 * exp(2 delta) - 1 (the row's log-sum-exp moves by at most delta too);
 * 1e-6 covers the rounding of exp and of the normalisation. */
static double
reference_softmax_row (const float *q, const float *keys, size_t d,
                       double scale, double *w)
{
  const double u = ldexp (1.0, -24);
  const double gamma = (double) d * u / (1.0 - (double) d * u);
  double mx = -INFINITY, delta = 0.0;
  for (size_t j = 0; j < N_KEYS; j++) {
    double s = 0.0, a = 0.0;
    for (size_t t = 0; t < d; t++) {
      double p = (double) q[t] * (double) keys[j * d + t];
      s += p;
      a += fabs (p);
    }
    w[j] = s * scale;
    /* the scaled score: one more rounding for the product by scale */
    double dj = (gamma * a + u * fabs (s)) * scale + u * fabs (w[j]);
    if (dj > delta)
      delta = dj;
    if (w[j] > mx)
      mx = w[j];
  }
  double sum = 0.0;
  for (size_t j = 0; j < N_KEYS; j++) {
    w[j] = exp (w[j] - mx);
    sum += w[j];
  }
  for (size_t j = 0; j < N_KEYS; j++)
    w[j] /= sum;
  return expm1 (2.0 * delta) + 1e-6;
}

/* ------------------------------------------------------- experiment */

typedef struct {
  double max_w, min_w, entropy; /* sums over trials */
  unsigned saturated;           /* rows with max weight > 0.99 */
  unsigned naive_bad;           /* naive float32 rows with inf/NaN */
  unsigned sattn_bad;           /* sattn rows with inf/NaN */
  double max_abs_err;           /* sattn vs float64 reference */
  unsigned beyond_bound;        /* weights off by more than the bound */
  double max_sum_err;           /* |sum of weights - 1| */
} Result;

/* Runs one configuration.  Returns 0 on success, -1 on an API failure. */
static int
run_config (size_t d, float scale, float amplitude, unsigned trials,
            Result *res)
{
  SattnConfig cfg = { 0 };
  cfg.d_model = d;
  cfg.heads = 1;
  cfg.scale = scale; /* 1 = unscaled; 1/sqrt(d) = scaled */
  SattnStatus st = SATTN_OK;
  SattnModel *m = sattn_model_new (&cfg, NULL, &st); /* identity */
  if (m == NULL) {
    fprintf (stderr, "sattn_model_new: %s\n", sattn_status_string (st));
    return -1;
  }
  size_t cols = N_ROWS + sattn_model_extra_keys (m);
  size_t d_out = sattn_model_d_out (m);

  float *x = malloc (sizeof (float) * N_ROWS * d);
  float *out = malloc (sizeof (float) * N_ROWS * d_out);
  float *weights = malloc (sizeof (float) * N_ROWS * cols);
  float *naive = malloc (sizeof (float) * N_KEYS);
  double *ref = malloc (sizeof (double) * N_KEYS);
  uint8_t allow[N_ROWS * N_ROWS];
  uint8_t query_valid[N_ROWS];
  int rc = 0;
  if (!x || !out || !weights || !naive || !ref) {
    fprintf (stderr, "out of memory\n");
    rc = -1;
    goto done;
  }

  /* Only row 0 is a query, and it sees keys 1..64 (not itself). */
  memset (allow, 0, sizeof (allow));
  for (size_t j = 1; j < N_ROWS; j++)
    allow[j] = 1;
  memset (query_valid, 0, sizeof (query_valid));
  query_valid[0] = 1;
  SattnMask mask = { NULL, query_valid, allow };

  memset (res, 0, sizeof (*res));
  for (unsigned t = 0; t < trials; t++) {
    for (size_t i = 0; i < N_ROWS * d; i++)
      x[i] = (float) rng_gauss () * amplitude;

    st = sattn_attend (m, x, N_ROWS, &mask, out, weights, NULL);
    if (st != SATTN_OK) {
      fprintf (stderr, "sattn_attend: %s\n", sattn_status_string (st));
      rc = -1;
      goto done;
    }

    /* sattn: the query row's output and weights must be finite */
    int bad = 0;
    for (size_t k = 0; k < d_out; k++)
      if (!isfinite (out[k]))
        bad = 1;
    for (size_t j = 0; j < cols; j++)
      if (!isfinite (weights[j]))
        bad = 1;
    res->sattn_bad += bad;

    const float *w = weights + 1; /* row 0, keys 1..64 */
    double bound = reference_softmax_row (x, x + d, d, (double) scale, ref);
    double mx = 0.0, mn = 1.0, h = 0.0, sum = 0.0;
    for (size_t j = 0; j < N_KEYS; j++) {
      double wj = w[j];
      sum += wj;
      if (wj > mx)
        mx = wj;
      if (wj < mn)
        mn = wj;
      if (wj > 0.0)
        h -= wj * log (wj);
      double e = fabs (wj - ref[j]);
      if (!(e <= res->max_abs_err))
        res->max_abs_err = e; /* also catches NaN */
      if (!(e <= bound))
        res->beyond_bound++;
    }
    /* key 0 (the query itself) is masked: its weight must be exactly 0 */
    if (weights[0] != 0.0f)
      res->beyond_bound++;
    double se = fabs (sum - 1.0);
    if (!(se <= res->max_sum_err))
      res->max_sum_err = se;
    res->max_w += mx;
    res->min_w += mn;
    res->entropy += h / log ((double) N_KEYS);
    if (mx > 0.99)
      res->saturated++;

    res->naive_bad += naive_softmax_row (x, x + d, d, scale, naive);
  }

done:
  free (x);
  free (out);
  free (weights);
  free (naive);
  free (ref);
  sattn_model_free (m);
  return rc;
}

int
main (int argc, char **argv)
{
  static const size_t dks[] = { 32, 128, 512 };
  const size_t n_dk = sizeof (dks) / sizeof (dks[0]);
  unsigned trials = 200;
  unsigned long long seed = 1;
  if (argc > 1)
    trials = (unsigned) strtoul (argv[1], NULL, 10);
  if (argc > 2)
    seed = strtoull (argv[2], NULL, 10);
  if (trials < 1 || trials > 1000000) {
    fprintf (stderr, "usage: %s [TRIALS (1..1000000) [SEED]]\n", argv[0]);
    return 2;
  }
  rng_state = seed;

  /* Weight rows must sum to 1 within this (64 float32 weights). */
  const double tol_sum = 1e-5;
  int failed = 0;

  Result unit[3], scaled[3], unit3[3], scaled3[3];
  for (size_t i = 0; i < n_dk; i++) {
    float s = (float) (1.0 / sqrt ((double) dks[i]));
    if (run_config (dks[i], s, 1.0f, trials, &scaled[i]) != 0 ||
        run_config (dks[i], 1.0f, 1.0f, trials, &unit[i]) != 0 ||
        run_config (dks[i], s, AMPLITUDE, trials, &scaled3[i]) != 0 ||
        run_config (dks[i], 1.0f, AMPLITUDE, trials, &unit3[i]) != 0)
      return 1;
  }

  printf ("sattn seed experiment: one query vs %d keys, N(0,1) inputs, "
          "%u trials per row (seed %llu)\n\n",
          N_KEYS, trials, seed);
  printf ("%5s  %-8s  %9s  %9s  %9s  %8s  %9s\n", "d_k", "scores", "scale",
          "max w", "min w", "entropy", "saturated");
  for (size_t i = 0; i < n_dk; i++) {
    for (int u = 0; u < 2; u++) {
      const Result *r = u ? &unit[i] : &scaled[i];
      double s = u ? 1.0 : 1.0 / sqrt ((double) dks[i]);
      printf ("%5zu  %-8s  %9.4f  %9.4f  %9.2e  %8.3f  %5u/%u\n", dks[i],
              u ? "unscaled" : "scaled", s, r->max_w / trials,
              r->min_w / trials, r->entropy / trials, r->saturated, trials);
    }
  }
  printf ("\nmax w / min w: mean largest / smallest weight of a row; "
          "entropy: mean H(w)/log(%d)\n(1 = uniform, 0 = one-hot); "
          "saturated: rows whose largest weight > 0.99.\n\n",
          N_KEYS);

  printf ("Inputs x %.0f: rows with inf/NaN weights, naive float32 softmax "
          "(no max subtraction) vs sattn\n\n",
          (double) AMPLITUDE);
  printf ("%5s  %-8s  %12s  %12s\n", "d_k", "scores", "naive", "sattn");
  unsigned naive_total = 0, sattn_total = 0;
  for (size_t i = 0; i < n_dk; i++) {
    for (int u = 0; u < 2; u++) {
      const Result *r = u ? &unit3[i] : &scaled3[i];
      printf ("%5zu  %-8s  %6u/%-5u  %6u/%-5u\n", dks[i],
              u ? "unscaled" : "scaled", r->naive_bad, trials, r->sattn_bad,
              trials);
      naive_total += r->naive_bad;
      sattn_total += r->sattn_bad;
    }
  }
  printf ("%5s  %-8s  %6u        %6u\n\n", "all", "", naive_total, sattn_total);

  /* ---------------------------------------------------- self-checks */
  double worst_err[2] = { 0.0, 0.0 }, worst_sum = 0.0;
  unsigned sattn_bad = 0, beyond = 0;
  const Result *all[] = { unit, scaled, unit3, scaled3 };
  for (size_t a = 0; a < 4; a++) {
    for (size_t i = 0; i < n_dk; i++) {
      const Result *r = &all[a][i];
      sattn_bad += r->sattn_bad;
      beyond += r->beyond_bound;
      if (!(r->max_abs_err <= worst_err[a / 2]))
        worst_err[a / 2] = r->max_abs_err;
      if (!(r->max_sum_err <= worst_sum))
        worst_sum = r->max_sum_err;
    }
  }
  printf ("sattn weights vs a float64 softmax: max abs error %.2e (inputs "
          "x 1), %.2e (inputs x %.0f);\n%u weights beyond the float32 rounding "
          "bound; |row sum - 1| <= %.2e (tolerance %.0e)\n",
          worst_err[0], worst_err[1], (double) AMPLITUDE, beyond, worst_sum,
          tol_sum);

  if (sattn_bad != 0) {
    fprintf (stderr,
             "FAIL: sattn produced %u rows with non-finite "
             "values\n",
             sattn_bad);
    failed = 1;
  }
  if (beyond != 0 || !(worst_sum <= tol_sum)) {
    fprintf (stderr, "FAIL: sattn weights differ from the float64 "
                     "reference\n");
    failed = 1;
  }
  /* The claims the table is there to show.  With a fixed seed these are
   * deterministic.  With other seeds they hold with overwhelming
   * probability: over 200 trials the mean largest weight has a standard
   * error near 0.01, and the thresholds sit many standard errors from the
   * expected values (about 0.92 / 0.05 unscaled, 0.11 / 0.88 scaled). */
  const Result *u512 = &unit[n_dk - 1], *s512 = &scaled[n_dk - 1];
  if (!(u512->max_w / trials > 0.8 && u512->entropy / trials < 0.15)) {
    fprintf (stderr,
             "FAIL: unscaled scores at d_k=512 are not "
             "saturated (max w %.3f, entropy %.3f)\n",
             u512->max_w / trials, u512->entropy / trials);
    failed = 1;
  }
  if (!(s512->max_w / trials < 0.5 && s512->entropy / trials > 0.5)) {
    fprintf (stderr,
             "FAIL: scaled scores at d_k=512 are saturated "
             "(max w %.3f, entropy %.3f)\n",
             s512->max_w / trials, s512->entropy / trials);
    failed = 1;
  }
  if (naive_total == 0) {
    fprintf (stderr, "FAIL: the naive softmax never overflowed\n");
    failed = 1;
  }
  printf ("%s\n", failed ? "self-check FAILED"
                         : "self-check passed: "
                           "saturation without scaling, naive overflow, sattn "
                           "always finite");
  return failed;
}
