/* core/cpu: the arithmetic on plain arrays -- the kernel table chosen
 * once for the CPU (isa.c), the float projections (BLAS for large blocks,
 * register-tiled loops otherwise), the linear layers summed in double, the
 * worker pool.  Sees arrays and descriptors only, never a model.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_CPU_H
#define SATTN_CPU_H

#include "base/base.h"

/* Project n rows: y (n × d_out, row stride ldy) = x (n × d_in, stride ldx)
 * W^T + b, given Wt = W^T (d_in × d_out).  Wt NULL = identity (d_in ==
 * d_out); b NULL = no bias. */
void sattn_project (const float *Wt, const float *b, const float *x, size_t n,
                    size_t d_in, size_t d_out, size_t ldx, float *y,
                    size_t ldy);

/* Nonzero when sattn_project would use cblas_sgemm for this shape (large
 * blocks only; the caller's thread runs those). */
int sattn_project_uses_blas (const float *Wt, size_t n, size_t d_in,
                             size_t d_out);

/* Columns [c0, c1) of sattn_project (y's other columns untouched), with
 * the register-tiled loop (never BLAS). */
void sattn_project_cols (const float *Wt, const float *b, const float *x,
                         size_t n, size_t d_in, size_t d_out, size_t c0,
                         size_t c1, size_t ldx, float *y, size_t ldy);

/* linear.c: linear layers summed in double, one chain per entry over the
 * inner index in order from the bias (NULL: 0), weights Wt (din × n at
 * row stride ldw) and bias as doubles.  The inputs must hold float values
 * (then every product is exact and every ISA gives the same bytes).
 * sattn_linear_d: double rows in and out (the feed-forward, a whole
 * model's head);
 * sattn_linear_f: float rows in, each entry rounded to float once. */
void sattn_linear_d (const double *x, size_t ldx, size_t rows, const double *Wt,
                     size_t ldw, const double *b, size_t din, size_t n,
                     double *y, size_t ldy);
void sattn_linear_f (const float *x, size_t ldx, size_t rows, const double *Wt,
                     size_t ldw, const double *b, size_t din, size_t n,
                     float *y, size_t ldy);
/* Float rows in, double rows out (a whole model's embedding). */
void sattn_linear_fd (const float *x, size_t ldx, size_t rows, const double *Wt,
                      size_t ldw, const double *b, size_t din, size_t n,
                      double *y, size_t ldy);

/* pool.c: the worker threads of one stream. */
#define SATTN_MAX_THREADS 256
typedef struct SattnPool SattnPool;
typedef void (*SattnTaskFn) (void *ctx, size_t task, unsigned worker);
/* CPUs this process may run on (affinity mask), at least 1. */
unsigned sattn_available_cpus (void);
/* SattnStreamConfig.threads -> total threads (caller included), >= 1. */
unsigned sattn_resolve_threads (int threads);
/* n_threads total threads, caller included: n_threads - 1 workers.
 * Returns NULL for n_threads <= 1 and on failure (tell them apart by
 * n_threads). */
SattnPool *sattn_pool_new (unsigned n_threads);
void sattn_pool_free (SattnPool *p);
/* Bytes sattn_pool_new allocates, worker stacks included. */
size_t sattn_pool_bytes (unsigned n_threads);
unsigned sattn_pool_threads (const SattnPool *p);
/* fn (ctx, i, worker) for every i in [0, n), worker in [0, threads): the
 * caller is worker 0.  Returns when all are done.  p NULL: serial. */
void sattn_pool_run (SattnPool *p, size_t n, SattnTaskFn fn, void *ctx);
/* The same, then fn2 (ctx2, i, worker) for every i in [0, n2) once all of
 * the first n are done, in the same run: one publication, each thread
 * goes on to the second phase as soon as the first is complete (no
 * second wake-up).  n2 = 0: sattn_pool_run. */
void sattn_pool_run2 (SattnPool *p, size_t n, SattnTaskFn fn, void *ctx,
                      size_t n2, SattnTaskFn fn2, void *ctx2);

/* The index of the first NaN / Inf among n floats, n when all are finite
 * (sattn_finite first: the vectorised test, then the scan only on
 * failure).  The one finite check of the library: the model's weights,
 * the weights reader's tensors and the frame rule all go through it or
 * through sattn_finite. */
size_t sattn_first_nonfinite (const float *x, size_t n);

/* core/cpu: the kernels, one table per SIMD level (kernels-portable.c,
 * kernels-avx2.c, kernels-avx512.c), the CPU's chosen once (isa.c); the
 * functions below call through it.  Every level gives each function's
 * result to the byte that level always gave.  SATTN_SIMD=0 / 1 in the
 * environment caps the level (portable / AVX2). */
int sattn_simd_level (void); /* 0 portable, 1 AVX2+FMA, 2 AVX-512 */
/* Tests only: the level (and its table) from now on, in every thread. */
void sattn_simd_force (int level);
void sattn_qk (const float *q, size_t ldq, const float *kt, size_t ldkt,
               size_t m, size_t nk, size_t dh, float *S, size_t lds);
/* sattn_qk, also giving rmax[i] = the max of row i's nk scores, NaN scores
 * skipped, or NaN where it was not taken (only the AVX-512 tiles of eight
 * rows take it, as they store the scores).  A caller that skips the NaN
 * test on the strength of rmax tests the row sum instead: the exp pass
 * turns a NaN input into a NaN sum. */
void sattn_qk_max (const float *q, size_t ldq, const float *kt, size_t ldkt,
                   size_t m, size_t nk, size_t dh, float *S, size_t lds,
                   float *rmax);
/* The exp pass of the rows i < m of S (stride lds, n scores each) with
 * rows[i] == 1, x = S * scale - qmax[i] * scale (qmax from sattn_qk_max,
 * finite): norm[i] = 1 / the row sum; rows[i] = 2 instead where the sum is
 * NaN (a NaN score; the row's scores are then overwritten). */
void sattn_softmax_rows (float *S, size_t lds, size_t m, size_t n,
                         const float *qmax, float scale, uint8_t *rows,
                         float *norm);
void sattn_pv (const float *P, size_t ldp, size_t m, size_t nk, const float *v,
               size_t ldv, size_t dv, float *O, size_t ldo);
/* sattn_pv, each row i of O then multiplied by norm[i] (as sattn_mul
 * would: the same bytes); nonzero when every value of O is finite. */
int sattn_pv_norm (const float *P, size_t ldp, size_t m, size_t nk,
                   const float *v, size_t ldv, size_t dv, const float *norm,
                   float *O, size_t ldo);
/* Softmax pass 1 over s[0, n): scale; entries with ok[j] == 0 (ok may be
 * NULL) become -inf; NaN scores become NaN markers.  counts[] += {valid,
 * NaN, +inf, -inf}.  Returns the max over valid entries (-inf if none). */
float sattn_softmax_scan (float *s, size_t n, const uint8_t *ok, float scale,
                          size_t counts[4]);
void sattn_mul (float *y, size_t n, float a);
/* Nonzero when every one of n floats is finite (tested on the bits:
 * vectorised, exact). */
int sattn_finite (const float *x, size_t n);
/* Softmax pass 1 when nothing is masked: the max of s[0, n) (-inf when
 * n = 0); *finite = 0 when some entry is NaN or +-inf (the caller then
 * takes sattn_softmax_scan). */
float sattn_softmax_max (const float *s, size_t n, int *finite);
/* y[i] = exp (y[i] * scale - mx) with x_i = y[i] * scale rounded first
 * (all x_i <= mx, -inf allowed; scale > 0); returns the sum. */
double sattn_exp_sum (float *y, size_t n, float scale, float mx);
/* The same, also returning *ex = sum of e_i x_i over entries with
 * x_i > -inf and *xmin = min x_i over those (for statistics), where
 * x_i = y_i * scale - mx. */
double sattn_exp_sum_stats (float *y, size_t n, float scale, float mx,
                            double *ex, float *xmin);
/* Rows x[i * ldx] (i < cnt), columns [0, w), into rows i of dst (stride
 * ldd) and again mir floats further (the ring's mirror), zeros where
 * ok[i] == 0 (ok NULL: every row copied); sattn_transpose_rows writes
 * them transposed: dst[t * ldd + i] and dst[t * ldd + i + mir]. */
void sattn_copy_rows (const float *x, size_t ldx, const uint8_t *ok, size_t cnt,
                      size_t w, float *dst, size_t ldd, size_t mir);
void sattn_transpose_rows (const float *x, size_t ldx, const uint8_t *ok,
                           size_t cnt, size_t w, float *dst, size_t ldd,
                           size_t mir);
/* LayerNorm of rows (stride ldx) of d floats into y (stride ldy; may be
 * x) in float, as PyTorch float32 computes it (w, b NULL: 1, 0): the
 * LayerNorms of precision=fast.  Each row's bytes do not depend on the
 * rows around it (they do on the SIMD level). */
void sattn_norm_rows_f32 (const float *x, size_t ldx, float *y, size_t ldy,
                          size_t rows, size_t d, const float *w, const float *b,
                          float eps);
/* h[i] = GELU (h[i]) = 0.5 h (1 + erf (h / sqrt 2)) in float, each step
 * rounded to float (the kernel table's erf), as PyTorch float32. */
void sattn_gelu_f32 (float *h, size_t n);
/* y[i * ldy + t] += x[i * ldx + t] for rows i < rows and t < d, one
 * float addition per entry (the same bytes at every level; y must not
 * overlap x). */
void sattn_add_rows (const float *x, size_t ldx, float *y, size_t ldy,
                     size_t rows, size_t d);
/* y[i * ldy + j] += b[j] for rows i < n and columns j < k. */
void sattn_add_bias (float *y, size_t ldy, size_t n, const float *b, size_t k);

/* The kernel table of one level: the functions above (sattn_qk is qk,
 * and so on) and linear.c's loops (see sattn_linear_d): double rows into
 * double (linear_dd) or float (linear_df) rows, float rows into float
 * rows (linear_ff), each with the signature of sattn_linear_d; widen:
 * rows × din floats (row stride ldx) into rows of din doubles; erf: y[i]
 * = erf (x[i]) in float, within 0.68 ulp (kernels-portable.h says how);
 * gelu: h[i] = GELU (h[i]) rounded to float, by that erf (see
 * core/nn/encoder.c); relu: h[i] = max (h[i] rounded to float, 0) (NaN and
 * -0 give +0); these three give the same bytes at every level; norm_f:
 * sattn_norm_rows_f32; gelu_f: sattn_gelu_f32; add_rows:
 * sattn_add_rows. */
typedef void (*SattnQkFn) (const float *q, size_t ldq, const float *kt,
                           size_t ldkt, size_t m, size_t nk, size_t dh,
                           float *S, size_t lds);
typedef void (*SattnQkMaxFn) (const float *q, size_t ldq, const float *kt,
                              size_t ldkt, size_t m, size_t nk, size_t dh,
                              float *S, size_t lds, float *rmax);
typedef void (*SattnSoftmaxRowsFn) (float *S, size_t lds, size_t m, size_t n,
                                    const float *qmax, float scale,
                                    uint8_t *rows, float *norm);
typedef void (*SattnPvFn) (const float *P, size_t ldp, size_t m, size_t nk,
                           const float *v, size_t ldv, size_t dv, float *O,
                           size_t ldo);
typedef int (*SattnPvNormFn) (const float *P, size_t ldp, size_t m, size_t nk,
                              const float *v, size_t ldv, size_t dv,
                              const float *norm, float *O, size_t ldo);
typedef float (*SattnScanFn) (float *s, size_t n, const uint8_t *ok,
                              float scale, size_t counts[4]);
typedef float (*SattnMaxFn) (const float *s, size_t n, int *finite);
typedef double (*SattnExpSumFn) (float *y, size_t n, float scale, float mx);
typedef double (*SattnExpSumStatsFn) (float *y, size_t n, float scale, float mx,
                                      double *ex, float *xmin);
typedef void (*SattnMulFn) (float *y, size_t n, float a);
typedef int (*SattnFiniteFn) (const float *x, size_t n);
typedef void (*SattnRowsFn) (const float *x, size_t ldx, const uint8_t *ok,
                             size_t cnt, size_t w, float *dst, size_t ldd,
                             size_t mir);
typedef void (*SattnAddBiasFn) (float *y, size_t ldy, size_t n, const float *b,
                                size_t k);
typedef void (*SattnLinearDDFn) (const double *x, size_t ldx, size_t rows,
                                 const double *Wt, size_t ldw, const double *b,
                                 size_t din, size_t n, double *y, size_t ldy);
typedef void (*SattnLinearDFFn) (const double *x, size_t ldx, size_t rows,
                                 const double *Wt, size_t ldw, const double *b,
                                 size_t din, size_t n, float *y, size_t ldy);
typedef void (*SattnLinearFFFn) (const float *x, size_t ldx, size_t rows,
                                 const double *Wt, size_t ldw, const double *b,
                                 size_t din, size_t n, float *y, size_t ldy);
typedef void (*SattnWidenFn) (const float *x, size_t ldx, size_t rows,
                              size_t din, double *xb);
typedef void (*SattnErfFn) (const float *x, float *y, size_t n);
typedef void (*SattnGeluFFn) (float *h, size_t n);
typedef void (*SattnAddRowsFn) (const float *x, size_t ldx, float *y,
                                size_t ldy, size_t rows, size_t d);
typedef void (*SattnNormFFn) (const float *x, size_t ldx, float *y, size_t ldy,
                              size_t rows, size_t d, const float *w,
                              const float *b, float eps);
typedef void (*SattnActFn) (double *h, size_t n);

typedef struct {
  const char *name; /* "portable", "avx2", "avx512" */
  SattnQkFn qk;
  SattnQkMaxFn qk_max;
  SattnSoftmaxRowsFn softmax_rows;
  SattnPvFn pv;
  SattnPvNormFn pv_norm;
  SattnScanFn softmax_scan;
  SattnMaxFn softmax_max;
  SattnExpSumFn exp_sum;
  SattnExpSumStatsFn exp_sum_stats;
  SattnMulFn mul;
  SattnFiniteFn finite;
  SattnRowsFn copy_rows, transpose_rows;
  SattnAddBiasFn add_bias;
  SattnLinearDDFn linear_dd;
  SattnLinearDFFn linear_df;
  SattnLinearFFFn linear_ff;
  SattnWidenFn widen;
  SattnErfFn erf;
  SattnActFn gelu, relu;
  SattnNormFFn norm_f;
  SattnGeluFFn gelu_f;
  SattnAddRowsFn add_rows;
} SattnKernels;

/* The table of the level sattn_simd_level () says (chosen at the first
 * call; sattn_simd_force switches it).  A caller that makes many calls
 * in a row may take it once. */
const SattnKernels *sattn_kernels (void);

#endif
