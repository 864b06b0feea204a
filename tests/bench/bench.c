/* sattn-bench: throughput, latency, memory and allocations of the sattn
 * core and element on the reference workloads W1-W4.
 *
 * For each workload, with identity weights and with random full weights
 * (Wq, Wk, Wv, Wo with biases), single BLAS thread:
 *   - core streaming: frames/s, x real time, useful GFLOP/s, per-hop
 *     p50/p99 of sattn_stream_push of exactly one hop, peak RSS, heap
 *     allocations per push in steady state;
 *   - side by side in the same repeats: the per-window recomputation path
 *     (sattn_attend on every window, re-projecting all n frames) and a
 *     single-thread cblas_sgemm at 1024^3, reported as ratios;
 *   - through a real pipeline (appsrc ! sattn ! fakesink), frames/s and
 *     the element overhead = pipeline time / core time for the same
 *     frames in the same buffer sizes, interleaved repeat by repeat.
 * Every figure is the median over repeats; ratios are medians of per-repeat
 * ratios of measurements taken back to back, so a noisy neighbour on a
 * shared machine affects both sides alike.
 *
 * Each workload runs in a child process (fork) so that its peak RSS
 * (getrusage ru_maxrss) is its own; the parent prints the tables and
 * optionally writes one JSON object per line (--json) for other tools
 * (torch_baseline.py).  --dump DIR writes, per workload, the inputs, the
 * weights (safetensors, the nn.MultiheadAttention state-dict names) and the
 * core's first output rows, so another implementation can check agreement.
 *
 * --threads-scaling measures instead W1 and W3 with threads=1 and
 * threads=2 side by side (core and pipeline, wall clock, not pinned).
 *
 * Nothing here asserts timings.  The exit status is nonzero only when a
 * result is wrong: non-finite output, streaming rows that disagree with
 * the one-shot path, a pipeline error, or frames lost in the pipeline.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include "sattn/sattn.h"
#include "rng.h"
#include "st-writer.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#ifdef SATTN_BENCH_HAVE_GST
#include <gst/gst.h>
#include <gst/app/gstappsrc.h>
#endif

/* ------------------------------------------------ allocation counting */

/* malloc and friends are interposed in this executable and forwarded to
 * glibc's own entry points; calls are counted only while `alloc_counting`
 * is set (between the end of warm-up and the end of a measurement).  Not
 * available under AddressSanitizer, which interposes them itself. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BENCH_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BENCH_COUNT_ALLOCS 0
#endif
#endif
#if !defined(BENCH_COUNT_ALLOCS) && defined(__GLIBC__)
#define BENCH_COUNT_ALLOCS 1
#endif
#ifndef BENCH_COUNT_ALLOCS
#define BENCH_COUNT_ALLOCS 0
#endif

static atomic_int alloc_counting;
static atomic_ullong alloc_count;

#if BENCH_COUNT_ALLOCS
extern void *__libc_malloc (size_t size);
extern void *__libc_calloc (size_t n, size_t size);
extern void *__libc_realloc (void *p, size_t size);
extern void __libc_free (void *p);
extern void *__libc_memalign (size_t align, size_t size);
extern void *__libc_valloc (size_t size);
extern void *__libc_pvalloc (size_t size);

static inline void
count_alloc (void)
{
  if (atomic_load_explicit (&alloc_counting, memory_order_relaxed))
    atomic_fetch_add_explicit (&alloc_count, 1, memory_order_relaxed);
}

void *
malloc (size_t size)
{
  count_alloc ();
  return __libc_malloc (size);
}

void *
calloc (size_t n, size_t size)
{
  count_alloc ();
  return __libc_calloc (n, size);
}

void *
realloc (void *p, size_t size)
{
  count_alloc ();
  return __libc_realloc (p, size);
}

void
free (void *p)
{
  __libc_free (p);
}

void *
memalign (size_t align, size_t size)
{
  count_alloc ();
  return __libc_memalign (align, size);
}

void *
aligned_alloc (size_t align, size_t size)
{
  count_alloc ();
  return __libc_memalign (align, size);
}

int
posix_memalign (void **out, size_t align, size_t size)
{
  count_alloc ();
  if (align < sizeof (void *) || (align & (align - 1)) != 0)
    return EINVAL;
  void *p = __libc_memalign (align, size);
  if (p == NULL)
    return ENOMEM;
  *out = p;
  return 0;
}

void *
valloc (size_t size)
{
  count_alloc ();
  return __libc_valloc (size);
}

void *
pvalloc (size_t size)
{
  count_alloc ();
  return __libc_pvalloc (size);
}
#endif

static void
alloc_count_start (void)
{
  atomic_store (&alloc_count, 0);
  atomic_store (&alloc_counting, 1);
}

static uint64_t
alloc_count_stop (void)
{
  atomic_store (&alloc_counting, 0);
  return atomic_load (&alloc_count);
}

/* Nonzero when the interposed allocator really counts (a heap allocation
 * made through libc's own strdup, between start and stop, is seen). */
static int
alloc_count_works (void)
{
  alloc_count_start ();
  char *volatile p = strdup ("sattn");
  uint64_t n = alloc_count_stop ();
  free (p);
  return n >= 1;
}

/* ---------------------------------------------------------- utilities */

static double
clock_s (clockid_t clk)
{
  struct timespec ts;
  clock_gettime (clk, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static double
now_s (void)
{
  return clock_s (CLOCK_MONOTONIC);
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double
median (const double *v, size_t n)
{
  if (n == 0)
    return NAN;
  double *t = malloc (n * sizeof (double));
  if (t == NULL)
    return NAN;
  memcpy (t, v, n * sizeof (double));
  qsort (t, n, sizeof (double), cmp_double);
  double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  free (t);
  return m;
}

/* splitmix64 (tests/common/rng.h) + Box-Muller: the same stream on every
 * platform. */
typedef struct {
  uint64_t s;
} Rng;

static void
fill_normal (Rng *r, float *x, size_t n, double sigma)
{
  for (size_t i = 0; i < n; i += 2) {
    double u1 = test_splitmix_uniform (&r->s);
    double u2 = test_splitmix_uniform (&r->s);
    double rad = sqrt (-2.0 * log (u1));
    x[i] = (float) (sigma * rad * cos (2.0 * M_PI * u2));
    if (i + 1 < n)
      x[i + 1] = (float) (sigma * rad * sin (2.0 * M_PI * u2));
  }
}

static double
peak_rss_mib (void)
{
  struct rusage ru;
  if (getrusage (RUSAGE_SELF, &ru) != 0)
    return NAN;
  return (double) ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB */
}

/* Latency histogram: logarithmic buckets 1% wide from 1 ns, enough for any
 * push; fixed memory, so recording allocates nothing. */
#define HIST_PER_OCTAVE 70
#define HIST_BUCKETS (HIST_PER_OCTAVE * 40)

typedef struct {
  uint64_t count[HIST_BUCKETS];
  uint64_t total;
  double max_s;
} Hist;

static void
hist_add (Hist *h, double seconds)
{
  double ns = seconds * 1e9;
  int b = ns <= 1.0 ? 0 : (int) (log2 (ns) * HIST_PER_OCTAVE);
  if (b >= HIST_BUCKETS)
    b = HIST_BUCKETS - 1;
  h->count[b]++;
  h->total++;
  if (seconds > h->max_s)
    h->max_s = seconds;
}

/* The q-quantile in seconds (bucket centre). */
static double
hist_quantile (const Hist *h, double q)
{
  if (h->total == 0)
    return NAN;
  uint64_t want = (uint64_t) ceil (q * (double) h->total);
  if (want == 0)
    want = 1;
  uint64_t acc = 0;
  for (int b = 0; b < HIST_BUCKETS; b++) {
    acc += h->count[b];
    if (acc >= want)
      return exp2 (((double) b + 0.5) / HIST_PER_OCTAVE) * 1e-9;
  }
  return h->max_s;
}

/* ---------------------------------------------------------- workloads */

typedef struct {
  const char *name;
  const char *what;
  size_t channels, rate, frame_size, heads, window, hop;
  int causal;
} Workload;

static const Workload workloads[] = {
  { "W1", "sensor array", 64, 16000, 1, 4, 256, 16, 0 },
  { "W2", "low latency", 8, 1000, 1, 1, 64, 1, 1 },
  { "W3", "wide context", 256, 2000, 1, 8, 1024, 64, 0 },
  { "W4", "audio patches", 1, 48000, 480, 4, 100, 1, 0 },
};
#define N_WORKLOADS (sizeof workloads / sizeof workloads[0])

static size_t
wl_d_model (const Workload *w)
{
  return w->channels * w->frame_size;
}

static double
wl_frame_rate (const Workload *w)
{
  return (double) w->rate / (double) w->frame_size;
}

/* Frames per pipeline buffer: about 10 ms of signal (a usual audio buffer
 * duration), a whole number of hops, at least one hop. */
static size_t
wl_buffer_frames (const Workload *w)
{
  double ten_ms = 0.010 * wl_frame_rate (w);
  size_t hops = (size_t) floor (ten_ms / (double) w->hop + 0.5);
  if (hops < 1)
    hops = 1;
  return hops * w->hop;
}

/* Useful floating-point operations per output frame in `frames` mode
 * (one query row per frame).  A multiply-add counts 2.  With E = d_model,
 * H heads, dk = d_head, dv = d_value, n = window, d_out:
 *   projections of the new frame: 2*E*H*dk (Q) + 2*E*H*dk (K)
 *                                 + 2*E*H*dv (V), each only when that
 *                                 weight is given (identity costs nothing)
 *   scores  Q K^T for its row:    2*n*H*dk
 *   weights x V:                  2*n*H*dv
 *   output projection:            2*H*dv*d_out when Wo is given.
 * Biases, masking and the softmax exponentials are not counted.  The
 * per-window recomputation path performs far more operations for the same
 * output (all n rows, all n projections per window); this count is the
 * work the output needs, so GFLOP/s figures of both paths compare the
 * same useful work. */
static double
flops_per_frame (const Workload *w, int random_weights)
{
  double E = (double) wl_d_model (w), H = (double) w->heads;
  double dk = E / H, dv = E / H, n = (double) w->window, dout = E;
  double f = 2.0 * n * H * dk + 2.0 * n * H * dv;
  if (random_weights)
    f += 2.0 * E * H * dk * 2.0 + 2.0 * E * H * dv + 2.0 * H * dv * dout;
  return f;
}

/* ------------------------------------------------------------ options */

typedef struct {
  double core_time;   /* seconds of streaming measurement per config */
  double recomp_time; /* seconds of recomputation measurement */
  double pipe_time;   /* seconds of pipeline measurement per config */
  int repeats;
  int pipe_repeats;
  int quick;
  int do_pipeline;
  int do_fork;
  int throughput_only; /* core and pipeline frames/s only */
  int weights_filter;  /* -1 both, 0 identity, 1 random */
  const char *json;
  const char *dump;
  const char *only;
  int sgemm_size;
} Opts;

/* ------------------------------------------------------------- result */

enum {
  PIPE_NOT_RUN = 0,
  PIPE_OK,
  PIPE_NO_GST,
  PIPE_NO_ELEMENT,
  PIPE_NO_WEIGHTS,
  PIPE_ERROR,
};

typedef struct {
  int done;   /* the child finished */
  int failed; /* a result is wrong (see message) */
  char message[1024];

  /* agreement of streaming rows with the one-shot path */
  double check_maxabs, check_refmax;
  int check_finite;

  /* core streaming, one hop per push; frames per CPU second of the
   * computing thread (lo/hi: range over repeats), and per wall second */
  double core_fps, core_fps_lo, core_fps_hi, core_fps_wall;
  double gflops;
  double p50_us, p99_us, max_us; /* wall clock per push */
  double cpu_p50_us, cpu_p99_us; /* thread CPU time per push */
  double peak_rss_mib;
  uint64_t allocs, pushes;

  /* side by side */
  double recomp_fps, recomp_ratio;
  double sgemm_gflops, sgemm_ratio;

  /* pipeline */
  int pipe_state;
  size_t buffer_frames;
  double pipe_fps, chunk_fps; /* frames per CPU second */
  double pipe_fps_wall;       /* frames per wall-clock second */
  double overhead;            /* pipeline / core, wall clock */
  double elem_overhead;       /* (pipeline - appsrc!fakesink) / core */
  double cpu_overhead, cpu_elem_overhead; /* the same in CPU time */
  uint64_t pipe_frames_in, pipe_frames_out;
  int msg_state;                  /* PIPE_* for post-messages=true */
  double msg_fps, msg_cost;       /* a message per window */
  double msg100_fps, msg100_cost; /* message-interval 100 ms */
  double stats_cost;              /* core with collect_stats vs without */

  char dump_dir[512];
} Result;

/* ------------------------------------------------------ sgemm roofline */

typedef struct {
  float *a, *b, *c;
  int n;
} Sgemm;

static int
sgemm_init (Sgemm *g, int n)
{
  size_t nn = (size_t) n * (size_t) n;
  g->n = n;
  g->a = malloc (nn * sizeof (float));
  g->b = malloc (nn * sizeof (float));
  g->c = malloc (nn * sizeof (float));
  if (!g->a || !g->b || !g->c)
    return -1;
  Rng r = { 12345 };
  fill_normal (&r, g->a, nn, 1.0);
  fill_normal (&r, g->b, nn, 1.0);
  memset (g->c, 0, nn * sizeof (float));
  return 0;
}

static void
sgemm_clear (Sgemm *g)
{
  free (g->a);
  free (g->b);
  free (g->c);
  memset (g, 0, sizeof (*g));
}

/* GFLOP/s of one single-thread n^3 sgemm, per wall-clock second; per
 * second of the thread's CPU time in *cpu_gflops. */
static double
sgemm_run (Sgemm *g, double *cpu_gflops)
{
  int n = g->n;
  double flop = 2.0 * (double) n * (double) n * (double) n;
  openblas_set_num_threads (1);
  double t0 = now_s (), c0 = clock_s (CLOCK_THREAD_CPUTIME_ID);
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, g->a,
               n, g->b, n, 0.0f, g->c, n);
  double c = clock_s (CLOCK_THREAD_CPUTIME_ID) - c0, t = now_s () - t0;
  *cpu_gflops = flop / c * 1e-9;
  return flop / t * 1e-9;
}

/* ---------------------------------------------------- model and input */

typedef struct {
  SattnModel *model;
  float *inproj_w, *inproj_b, *out_w, *out_b; /* random weights or NULL */
} Model;

static void
model_clear (Model *m)
{
  sattn_model_free (m->model);
  free (m->inproj_w);
  free (m->inproj_b);
  free (m->out_w);
  free (m->out_b);
  memset (m, 0, sizeof (*m));
}

/* SattnStreamConfig.threads of the streams stream_new_full builds (1 but
 * in the threads section). */
static int bench_threads = 1;
/* SattnStreamConfig.precision of those streams and the element's
 * precision property in the pipelines (--precision). */
static SattnPrecision bench_precision = SATTN_PRECISION_EXACT;

static int
model_init (Model *m, const Workload *w, int random_weights, char *err,
            size_t err_len)
{
  const size_t E = wl_d_model (w);
  SattnConfig cfg;
  SattnStatus st;

  memset (m, 0, sizeof (*m));
  memset (&cfg, 0, sizeof (cfg));
  cfg.d_model = E;
  cfg.heads = w->heads;
  cfg.causal = w->causal;
  if (!random_weights) {
    m->model = sattn_model_new (&cfg, NULL, &st);
  } else {
    /* nn.MultiheadAttention layout: in_proj_weight rows [Wq; Wk; Wv]. */
    Rng r = { 0x5a77a11ull + E * 131 + w->window };
    m->inproj_w = malloc (3 * E * E * sizeof (float));
    m->inproj_b = malloc (3 * E * sizeof (float));
    m->out_w = malloc (E * E * sizeof (float));
    m->out_b = malloc (E * sizeof (float));
    if (!m->inproj_w || !m->inproj_b || !m->out_w || !m->out_b) {
      snprintf (err, err_len, "out of memory for weights");
      return -1;
    }
    fill_normal (&r, m->inproj_w, 3 * E * E, 1.0 / sqrt ((double) E));
    fill_normal (&r, m->inproj_b, 3 * E, 0.1);
    fill_normal (&r, m->out_w, E * E, 1.0 / sqrt ((double) E));
    fill_normal (&r, m->out_b, E, 0.1);
    SattnWeights wt;
    memset (&wt, 0, sizeof (wt));
    wt.wq = m->inproj_w;
    wt.wk = m->inproj_w + E * E;
    wt.wv = m->inproj_w + 2 * E * E;
    wt.bq = m->inproj_b;
    wt.bk = m->inproj_b + E;
    wt.bv = m->inproj_b + 2 * E;
    wt.wo = m->out_w;
    wt.bo = m->out_b;
    cfg.d_out = E;
    m->model = sattn_model_new (&cfg, &wt, &st);
  }
  if (m->model == NULL) {
    snprintf (err, err_len, "sattn_model_new: %s", sattn_status_string (st));
    return -1;
  }
  return 0;
}

static SattnStream *
stream_new_full (const Model *m, const Workload *w, int collect_stats,
                 char *err, size_t err_len)
{
  SattnStreamConfig sc;
  SattnStatus st;
  memset (&sc, 0, sizeof (sc));
  sc.collect_stats = collect_stats;
  sc.threads = bench_threads;
  sc.precision = bench_precision;
  sc.window = w->window;
  sc.hop = w->hop;
  sc.output = SATTN_OUTPUT_FRAMES;
  sc.start = SATTN_START_PAD;
  SattnStream *s = sattn_stream_new (m->model, &sc, &st);
  if (s == NULL)
    snprintf (err, err_len, "sattn_stream_new: %s", sattn_status_string (st));
  return s;
}

static SattnStream *
stream_new (const Model *m, const Workload *w, char *err, size_t err_len)
{
  return stream_new_full (m, w, 0, err, err_len);
}

/* The models and streams of w with threads = 1 (m[0], s[0]) and 2 (m[1],
 * s[1]), for the side-by-side sections; -1 with err set when one fails. */
static int
pair_init (Model m[2], SattnStream *s[2], const Workload *w, int rw, char *err,
           size_t err_len)
{
  int ok = 1;
  for (int t = 0; t < 2 && ok; t++) {
    bench_threads = t + 1;
    ok = model_init (&m[t], w, rw, err, err_len) == 0 &&
         (s[t] = stream_new (&m[t], w, err, err_len)) != NULL;
  }
  bench_threads = 1;
  return ok ? 0 : -1;
}

/* Frames of such a pair's input pool: four windows, at least 4096, a
 * whole number of pushes of `push` frames. */
static size_t
pair_pool_frames (const Workload *w, size_t push)
{
  size_t frames = 4 * w->window > 4096 ? 4 * w->window : 4096;
  return (frames + push - 1) / push * push;
}

/* ---------------------------------------------------------- file dump */

static int
write_file (const char *dir, const char *name, const void *data, size_t len)
{
  char path[1024];
  snprintf (path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen (path, "wb");
  if (f == NULL)
    return -1;
  size_t wr = fwrite (data, 1, len, f);
  int rc = fclose (f);
  return wr == len && rc == 0 ? 0 : -1;
}

/* A safetensors file with the nn.MultiheadAttention state-dict names
 * (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias), through
 * the tests' writer (tests/common/st-writer.h). */
static int
write_safetensors (const char *path, const Model *m, size_t E)
{
  StWriter *st = st_writer_new ();
  if (st == NULL)
    return -1;
  st_writer_f32_2d (st, "in_proj_weight", m->inproj_w, 3 * E, E);
  st_writer_f32_2d (st, "in_proj_bias", m->inproj_b, 3 * E, 0);
  st_writer_f32_2d (st, "out_proj.weight", m->out_w, E, E);
  st_writer_f32_2d (st, "out_proj.bias", m->out_b, E, 0);
  int rc = st_writer_save (st, path);
  st_writer_free (st);
  return rc;
}

/* ------------------------------------------- agreement with one-shot */

/* Push frames 0..F-1 hop by hop (F = window + 4 hops) into a fresh stream
 * and compare the rows of each hop whose window is full with the last hop
 * rows of sattn_attend on that window.  Optionally dump inputs, outputs
 * and weights. */
static int
check_and_dump (const Workload *w, const Model *m, const float *pool,
                int random_weights, const Opts *o, Result *r)
{
  const size_t E = wl_d_model (w), n = w->window, h = w->hop;
  const size_t F = n + 4 * h;
  char err[256];
  int rc = -1;
  float *out = malloc (F * E * sizeof (float));
  float *ref = malloc (n * E * sizeof (float));
  SattnStream *s = stream_new (m, w, err, sizeof err);

  r->check_maxabs = 0.0;
  r->check_refmax = 0.0;
  r->check_finite = 1;
  if (!out || !ref || !s) {
    snprintf (r->message, sizeof r->message, "check: %s",
              s ? "out of memory" : err);
    goto done;
  }
  size_t rows = 0;
  for (size_t f0 = 0; f0 < F; f0 += h) {
    size_t got = 0;
    SattnStatus st = sattn_stream_push (s, pool + f0 * E, h, NULL,
                                        out + rows * E, F - rows, NULL, &got);
    if (st != SATTN_OK) {
      snprintf (r->message, sizeof r->message, "check: push: %s",
                sattn_status_string (st));
      goto done;
    }
    rows += got;
  }
  if (rows != F) {
    snprintf (r->message, sizeof r->message,
              "check: %zu rows for %zu frames in frames mode", rows, F);
    goto done;
  }
  for (size_t i = 0; i < F * E; i++)
    if (!isfinite (out[i]))
      r->check_finite = 0;
  for (size_t end = n; end <= F; end += h) {
    SattnStatus st = sattn_attend (m->model, pool + (end - n) * E, n, NULL, ref,
                                   NULL, NULL);
    if (st != SATTN_OK) {
      snprintf (r->message, sizeof r->message, "check: attend: %s",
                sattn_status_string (st));
      goto done;
    }
    for (size_t i = 0; i < h; i++)
      for (size_t t = 0; t < E; t++) {
        double a = out[(end - h + i) * E + t], b = ref[(n - h + i) * E + t];
        double d = fabs (a - b);
        if (!(d <= r->check_maxabs))
          r->check_maxabs = d;
        if (fabs (b) > r->check_refmax)
          r->check_refmax = fabs (b);
      }
  }
  if (o->dump) {
    char dir[512];
    snprintf (dir, sizeof dir, "%s/%s-%s", o->dump, w->name,
              random_weights ? "random" : "identity");
    if (mkdir (dir, 0755) != 0 && errno != EEXIST) {
      snprintf (r->message, sizeof r->message, "cannot create %s: %s", dir,
                strerror (errno));
      goto done;
    }
    char meta[512];
    int len = snprintf (meta, sizeof meta,
                        "{\"frames\": %zu, \"d_model\": %zu, \"heads\": %zu, "
                        "\"window\": %zu, \"hop\": %zu, \"causal\": %s, "
                        "\"weights\": %s}\n",
                        F, E, w->heads, n, h, w->causal ? "true" : "false",
                        random_weights ? "\"weights.safetensors\"" : "null");
    char wpath[600];
    snprintf (wpath, sizeof wpath, "%s/weights.safetensors", dir);
    if (write_file (dir, "input.f32", pool, F * E * sizeof (float)) != 0 ||
        write_file (dir, "output.f32", out, F * E * sizeof (float)) != 0 ||
        write_file (dir, "meta.json", meta, (size_t) len) != 0 ||
        (random_weights && write_safetensors (wpath, m, E) != 0)) {
      snprintf (r->message, sizeof r->message, "cannot write into %s", dir);
      goto done;
    }
    snprintf (r->dump_dir, sizeof r->dump_dir, "%s", dir);
  }
  rc = 0;
done:
  sattn_stream_free (s);
  free (out);
  free (ref);
  return rc;
}

/* ------------------------------------------------- core measurements */

/* Throughput: push one hop at a time, untimed, for `budget` seconds.
 * Returns frames per wall-clock second; *cpu_fps receives frames per
 * second of this thread's CPU time (immune to preemption by other
 * processes on a shared machine). */
static double
measure_throughput (SattnStream *s, const float *pool, size_t pool_frames,
                    size_t *pos, size_t E, size_t h, float *out,
                    size_t out_rows, double budget, double *cpu_fps,
                    uint64_t *pushes, int *fail)
{
  double t0 = now_s (), c0 = clock_s (CLOCK_THREAD_CPUTIME_ID), t;
  uint64_t frames = 0, k = 0;
  do {
    for (int rep = 0; rep < 32; rep++) {
      size_t got;
      SattnStatus st = sattn_stream_push (s, pool + *pos * E, h, NULL, out,
                                          out_rows, NULL, &got);
      if (st != SATTN_OK || got != h)
        *fail = 1;
      frames += h;
      k++;
      *pos += h;
      if (*pos + h > pool_frames)
        *pos = 0;
    }
    t = now_s ();
  } while (t < t0 + budget);
  *cpu_fps = (double) frames / (clock_s (CLOCK_THREAD_CPUTIME_ID) - c0);
  *pushes += k;
  return (double) frames / (t - t0);
}

/* Latency: push one hop at a time for `budget` seconds (wall clock),
 * timing each push with clock `clk`: CLOCK_MONOTONIC (wall time, includes
 * preemption by other processes) or CLOCK_THREAD_CPUTIME_ID (the compute
 * itself). */
static void
measure_latency (SattnStream *s, const float *pool, size_t pool_frames,
                 size_t *pos, size_t E, size_t h, float *out, size_t out_rows,
                 double budget, clockid_t clk, Hist *hist, uint64_t *pushes,
                 int *fail)
{
  double t_end = now_s () + budget;
  uint64_t k = 0;
  do {
    for (int rep = 0; rep < 16; rep++) {
      size_t got;
      const float *x = pool + *pos * E;
      double t0 = clock_s (clk);
      SattnStatus st = sattn_stream_push (s, x, h, NULL, out, out_rows, NULL,
                                          &got);
      double t1 = clock_s (clk);
      if (st != SATTN_OK || got != h)
        *fail = 1;
      hist_add (hist, t1 - t0);
      k++;
      *pos += h;
      if (*pos + h > pool_frames)
        *pos = 0;
    }
  } while (now_s () < t_end);
  *pushes += k;
}

/* sattn_attend on successive windows (sliding by one hop) for `budget`
 * seconds, at least 2 calls.  Each call yields `hop` new output rows.
 * Returns frames per wall-clock second, *cpu_fps per CPU second. */
static double
measure_recompute (const Model *m, const float *pool, size_t pool_frames,
                   size_t *pos, size_t E, size_t n, size_t h, float *out,
                   double budget, double *cpu_fps, int *fail)
{
  double t_start = now_s (), t_end = t_start + budget, t;
  double c0 = clock_s (CLOCK_THREAD_CPUTIME_ID);
  uint64_t calls = 0;
  do {
    if (*pos + n > pool_frames)
      *pos = 0;
    if (sattn_attend (m->model, pool + *pos * E, n, NULL, out, NULL, NULL) !=
        SATTN_OK)
      *fail = 1;
    *pos += h;
    calls++;
    t = now_s ();
  } while (t < t_end || calls < 2);
  *cpu_fps = (double) (calls * h) / (clock_s (CLOCK_THREAD_CPUTIME_ID) - c0);
  return (double) (calls * h) / (t - t_start);
}

/* Push `nbuf` chunks of `bf` frames (as the element would), after `warm`
 * chunks that are not timed.  Returns seconds (wall clock) for the timed
 * chunks, and in *cpu the thread CPU time they took. */
static double
measure_chunks (SattnStream *s, const float *pool, size_t pool_frames, size_t E,
                size_t bf, uint64_t warm, uint64_t nbuf, float *out,
                size_t out_rows, double *cpu, int *fail)
{
  size_t pos = 0;
  double t0 = 0.0, c0 = 0.0;
  sattn_stream_reset (s);
  for (uint64_t i = 0; i < warm + nbuf; i++) {
    if (i == warm) {
      t0 = now_s ();
      c0 = clock_s (CLOCK_THREAD_CPUTIME_ID);
    }
    size_t got;
    if (sattn_stream_push (s, pool + pos * E, bf, NULL, out, out_rows, NULL,
                           &got) != SATTN_OK)
      *fail = 1;
    pos += bf;
    if (pos + bf > pool_frames)
      pos = 0;
  }
  *cpu = clock_s (CLOCK_THREAD_CPUTIME_ID) - c0;
  return now_s () - t0;
}

/* ------------------------------------------------------------ pipeline */

#ifdef SATTN_BENCH_HAVE_GST
typedef struct {
  const float *pool;
  size_t pool_frames, bf, E, frame_size, rate;
  uint64_t nbuf, warm, next;
  double t_start, t_end;
  double cpu_start, cpu_end; /* streaming thread CPU time */
  uint64_t out_bytes;
  int eos_sent;
} PipeCtx;

static void
pipe_need_data (GstAppSrc *src, guint length, gpointer user)
{
  PipeCtx *c = user;
  (void) length;
  if (c->next >= c->nbuf) {
    if (!c->eos_sent) {
      c->eos_sent = 1;
      gst_app_src_end_of_stream (src);
    }
    return;
  }
  if (c->next == c->warm) {
    c->t_start = now_s ();
    c->cpu_start = clock_s (CLOCK_THREAD_CPUTIME_ID);
  }
  size_t pos = (size_t) ((c->next * c->bf) % c->pool_frames);
  gsize bytes = c->bf * c->E * sizeof (float);
  GstBuffer *buf = gst_buffer_new_wrapped_full (GST_MEMORY_FLAG_READONLY,
                                                (gpointer) (c->pool +
                                                            pos * c->E),
                                                bytes, 0, bytes, NULL, NULL);
  guint64 s0 = c->next * c->bf * c->frame_size;
  guint64 s1 = s0 + c->bf * c->frame_size;
  GstClockTime t0 = gst_util_uint64_scale (s0, GST_SECOND, c->rate);
  GstClockTime t1 = gst_util_uint64_scale (s1, GST_SECOND, c->rate);
  GST_BUFFER_PTS (buf) = t0;
  GST_BUFFER_DURATION (buf) = t1 - t0;
  GST_BUFFER_OFFSET (buf) = s0;
  GST_BUFFER_OFFSET_END (buf) = s1;
  if (c->next == 0)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  c->next++;
  gst_app_src_push_buffer (src, buf);
}

static GstPadProbeReturn
pipe_sink_probe (GstPad *pad, GstPadProbeInfo *info, gpointer user)
{
  PipeCtx *c = user;
  (void) pad;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    c->out_bytes += gst_buffer_get_size (GST_PAD_PROBE_INFO_BUFFER (info));
  } else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    GstBufferList *l = GST_PAD_PROBE_INFO_BUFFER_LIST (info);
    for (guint i = 0; i < gst_buffer_list_length (l); i++)
      c->out_bytes += gst_buffer_get_size (gst_buffer_list_get (l, i));
  } else if (info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_EOS) {
      c->t_end = now_s ();
      c->cpu_end = clock_s (CLOCK_THREAD_CPUTIME_ID);
    }
  }
  return GST_PAD_PROBE_OK;
}

/* Does the sattn element exist, and has it a property of that name? */
static int
element_has_property (const char *prop)
{
  GstElementFactory *f = gst_element_factory_find ("sattn");
  if (f == NULL)
    return 0;
  int has = 1;
  if (prop) {
    GstElement *e = gst_element_factory_create (f, NULL);
    has = e && g_object_class_find_property (G_OBJECT_GET_CLASS (e), prop);
    if (e)
      gst_object_unref (e);
  }
  gst_object_unref (f);
  return has;
}

/* Run appsrc ! sattn ! fakesink over nbuf buffers of bf frames; the time
 * from the push of buffer `warm` to EOS at the sink is returned in *secs,
 * the streaming thread's CPU time over the same span in *cpu_secs (the
 * source callback and the sink probe both run in that thread).
 * extra: more element properties (launch syntax).  with_element 0 runs
 * appsrc ! fakesink alone: what the source and sink cost by themselves. */
static int
run_pipeline (const Workload *w, const float *pool, size_t pool_frames,
              size_t bf, uint64_t warm, uint64_t nbuf, int with_element,
              const char *extra, double *secs, double *cpu_secs,
              uint64_t *frames_out, char *err, size_t err_len)
{
  char desc[1024], elem[768] = "";
  GError *gerr = NULL;
  int rc = -1;
  if (with_element)
    snprintf (elem, sizeof elem,
              "sattn name=attn window=%zu hop=%zu heads=%zu frame-size=%zu "
              "causal=%s output=frames threads=1%s %s ! ",
              w->window, w->hop, w->heads, w->frame_size,
              w->causal ? "true" : "false",
              bench_precision == SATTN_PRECISION_FAST ? " precision=fast" : "",
              extra ? extra : "");
  snprintf (desc, sizeof desc,
            "appsrc name=src format=time stream-type=stream "
            "caps=\"audio/x-raw,format=F32LE,layout=interleaved,rate=%zu,"
            "channels=%zu\" ! %s"
            "fakesink name=sink sync=false async=false",
            w->rate, w->channels, elem);
  GstElement *pipe = gst_parse_launch_full (desc, NULL,
                                            GST_PARSE_FLAG_FATAL_ERRORS, &gerr);
  if (pipe == NULL || gerr != NULL) {
    snprintf (err, err_len, "gst_parse_launch: %s",
              gerr ? gerr->message : "failed");
    g_clear_error (&gerr);
    if (pipe)
      gst_object_unref (pipe);
    return -1;
  }
  GstElement *src = gst_bin_get_by_name (GST_BIN (pipe), "src");
  GstElement *sink = gst_bin_get_by_name (GST_BIN (pipe), "sink");
  GstPad *sinkpad = gst_element_get_static_pad (sink, "sink");
  PipeCtx c;
  memset (&c, 0, sizeof (c));
  c.pool = pool;
  c.pool_frames = pool_frames;
  c.bf = bf;
  c.E = wl_d_model (w);
  c.frame_size = w->frame_size;
  c.rate = w->rate;
  c.nbuf = nbuf;
  c.warm = warm;
  GstAppSrcCallbacks cb;
  memset (&cb, 0, sizeof (cb));
  cb.need_data = pipe_need_data;
  gst_app_src_set_callbacks (GST_APP_SRC (src), &cb, &c, NULL);
  gst_pad_add_probe (sinkpad,
                     GST_PAD_PROBE_TYPE_BUFFER |
                         GST_PAD_PROBE_TYPE_BUFFER_LIST |
                         GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM,
                     pipe_sink_probe, &c, NULL);

  GstBus *bus = gst_element_get_bus (pipe);
  if (gst_element_set_state (pipe, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE) {
    snprintf (err, err_len, "cannot set the pipeline to PLAYING");
  }
  GstMessage *msg = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
                                                GST_MESSAGE_EOS |
                                                    GST_MESSAGE_ERROR);
  if (msg == NULL) {
    snprintf (err, err_len, "no EOS within 120 s");
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *e = NULL;
    gchar *dbg = NULL;
    gst_message_parse_error (msg, &e, &dbg);
    snprintf (err, err_len, "%s (%s)", e ? e->message : "error",
              dbg ? dbg : "");
    g_clear_error (&e);
    g_free (dbg);
  } else {
    *secs = c.t_end - c.t_start;
    *cpu_secs = c.cpu_end - c.cpu_start;
    *frames_out = c.out_bytes / (wl_d_model (w) * sizeof (float));
    rc = 0;
  }
  if (msg)
    gst_message_unref (msg);
  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (sinkpad);
  gst_object_unref (sink);
  gst_object_unref (src);
  gst_object_unref (pipe);
  return rc;
}
#endif

/* --------------------------------------------------- one configuration */

static void
run_config (const Workload *w, int random_weights, const Opts *o, Result *r)
{
  const size_t E = wl_d_model (w), n = w->window, h = w->hop;
  const size_t bf = wl_buffer_frames (w);
  char err[256];
  Model m;
  SattnStream *s = NULL;
  float *pool = NULL, *out = NULL, *rout = NULL;
  SattnStream *ss = NULL; /* with collect_stats (W1) */
  size_t spos = 0;
  double *scost = NULL;
  Sgemm g;
  Hist *hist = calloc (1, sizeof (Hist));
  Hist *cpu_hist = calloc (1, sizeof (Hist));
  memset (&g, 0, sizeof (g));
  memset (r, 0, sizeof (*r));
  r->buffer_frames = bf;
  r->pipe_state = PIPE_NOT_RUN;
  r->msg_state = PIPE_NOT_RUN;

  if (model_init (&m, w, random_weights, err, sizeof err) != 0) {
    snprintf (r->message, sizeof r->message, "%s", err);
    r->failed = 1;
    goto done;
  }
  /* Input pool: N(0,1) frames, a whole number of buffers, several windows
   * long; streaming cycles through it. */
  size_t pool_frames = 4 * n > 4096 ? 4 * n : 4096;
  if (pool_frames * E > ((size_t) 8 << 20))
    pool_frames = (size_t) (((size_t) 8 << 20) / E);
  if (pool_frames < 2 * n + 8 * bf)
    pool_frames = 2 * n + 8 * bf;
  pool_frames = (pool_frames + bf - 1) / bf * bf;
  pool = malloc (pool_frames * E * sizeof (float));
  out = malloc ((n + bf) * E * sizeof (float));
  rout = malloc (n * E * sizeof (float));
  if (!pool || !out || !rout || !hist || !cpu_hist) {
    snprintf (r->message, sizeof r->message, "out of memory");
    r->failed = 1;
    goto done;
  }
  Rng rng = { 0xbe7c4ull + E * 7 + n };
  fill_normal (&rng, pool, pool_frames * E, 1.0);

  if (!o->throughput_only &&
      check_and_dump (w, &m, pool, random_weights, o, r) != 0) {
    r->failed = 1;
    goto done;
  }
  double tol = 1e-4 * (1.0 + r->check_refmax);
  if (!o->throughput_only && (!r->check_finite || !(r->check_maxabs <= tol))) {
    snprintf (r->message, sizeof r->message,
              "streaming rows disagree with sattn_attend: max-abs %.3g > "
              "%.3g%s",
              r->check_maxabs, tol,
              r->check_finite ? "" : " (non-finite output)");
    r->failed = 1;
  }

  s = stream_new (&m, w, err, sizeof err);
  if (s == NULL) {
    snprintf (r->message, sizeof r->message, "%s", err);
    r->failed = 1;
    goto done;
  }

  /* Warm-up: fill the window and run a little. */
  size_t pos = 0;
  uint64_t warm_pushes = 0;
  int fail = 0;
  double dummy;
  for (size_t f = 0; f < n + h; f += h) {
    size_t got;
    sattn_stream_push (s, pool + pos * E, h, NULL, out, n + bf, NULL, &got);
    pos += h;
  }
  measure_throughput (s, pool, pool_frames, &pos, E, h, out, n + bf,
                      o->quick ? 0.01 : 0.1, &dummy, &warm_pushes, &fail);

  /* Per repeat: throughput (untimed pushes), wall-clock latency, CPU-time
   * latency, then the recomputation path and sgemm right after. */
  const int R = o->repeats;
  const double tr = o->throughput_only ? o->core_time / R
                                       : 0.55 * o->core_time / R;
  double *fps = calloc ((size_t) R, sizeof (double));
  double *cfps = calloc ((size_t) R, sizeof (double));
  double *rfps = calloc ((size_t) R, sizeof (double));
  double *rratio = calloc ((size_t) R, sizeof (double));
  double *gf = calloc ((size_t) R, sizeof (double));
  double *gratio = calloc ((size_t) R, sizeof (double));
  if (!fps || !cfps || !rfps || !rratio || !gf || !gratio) {
    r->failed = 1;
    goto free_arrays;
  }
  /* On W1, also the cost of the numeric-health statistics in the core
   * (collect_stats), measured back to back with the plain stream. */
  scost = calloc ((size_t) R, sizeof (double));
  if (strcmp (w->name, "W1") == 0 && !o->throughput_only && scost &&
      (ss = stream_new_full (&m, w, 1, err, sizeof err)) != NULL)
    measure_throughput (ss, pool, pool_frames, &spos, E, h, out, n + bf,
                        o->quick ? 0.01 : 0.05, &dummy, &warm_pushes, &fail);
  size_t rpos = 0;
  const double fpf = flops_per_frame (w, random_weights);
  for (int k = 0; k < R; k++) {
    alloc_count_start ();
    fps[k] = measure_throughput (s, pool, pool_frames, &pos, E, h, out, n + bf,
                                 tr, &cfps[k], &r->pushes, &fail);
    if (!o->throughput_only) {
      measure_latency (s, pool, pool_frames, &pos, E, h, out, n + bf,
                       0.3 * o->core_time / R, CLOCK_MONOTONIC, hist,
                       &r->pushes, &fail);
      measure_latency (s, pool, pool_frames, &pos, E, h, out, n + bf,
                       0.15 * o->core_time / R, CLOCK_THREAD_CPUTIME_ID,
                       cpu_hist, &r->pushes, &fail);
    }
    r->allocs += alloc_count_stop ();
    if (ss) {
      double sc_fps;
      uint64_t sp = 0;
      measure_throughput (ss, pool, pool_frames, &spos, E, h, out, n + bf,
                          0.5 * tr, &sc_fps, &sp, &fail);
      scost[k] = cfps[k] / sc_fps - 1.0;
    }
    if (o->throughput_only) {
      rfps[k] = gf[k] = rratio[k] = gratio[k] = NAN;
      continue;
    }
    if (k == 0) {
      /* Before the recomputation path and the sgemm buffers exist. */
      r->peak_rss_mib = peak_rss_mib ();
      if (sgemm_init (&g, o->sgemm_size) != 0) {
        r->failed = 1;
        snprintf (r->message, sizeof r->message, "out of memory (sgemm)");
        goto free_arrays;
      }
    }
    double rcpu, gcpu;
    rfps[k] = measure_recompute (&m, pool, pool_frames, &rpos, E, n, h, rout,
                                 o->recomp_time / R, &rcpu, &fail);
    (void) sgemm_run (&g, &gcpu);
    rfps[k] = rcpu;
    gf[k] = gcpu;
    rratio[k] = cfps[k] / rcpu;
    gratio[k] = cfps[k] * fpf * 1e-9 / gcpu;
  }
  if (fail) {
    r->failed = 1;
    snprintf (r->message, sizeof r->message, "a push or attend call failed");
  }
  r->core_fps = median (cfps, (size_t) R);
  r->core_fps_wall = median (fps, (size_t) R);
  r->core_fps_lo = r->core_fps_hi = cfps[0];
  for (int k = 0; k < R; k++) {
    r->core_fps_lo = fmin (r->core_fps_lo, cfps[k]);
    r->core_fps_hi = fmax (r->core_fps_hi, cfps[k]);
  }
  r->gflops = r->core_fps * fpf * 1e-9;
  r->stats_cost = ss ? median (scost, (size_t) R) : NAN;
  r->recomp_fps = median (rfps, (size_t) R);
  r->recomp_ratio = median (rratio, (size_t) R);
  r->sgemm_gflops = median (gf, (size_t) R);
  r->sgemm_ratio = median (gratio, (size_t) R);
  r->p50_us = hist_quantile (hist, 0.50) * 1e6;
  r->p99_us = hist_quantile (hist, 0.99) * 1e6;
  r->max_us = hist->max_s * 1e6;
  r->cpu_p50_us = hist_quantile (cpu_hist, 0.50) * 1e6;
  r->cpu_p99_us = hist_quantile (cpu_hist, 0.99) * 1e6;
  sgemm_clear (&g);

#ifdef SATTN_BENCH_HAVE_GST
  if (o->do_pipeline) {
    char wfile[600] = "";
    char extra[700] = "";
    gst_init (NULL, NULL);
    if (!element_has_property (NULL)) {
      r->pipe_state = PIPE_NO_ELEMENT;
    } else if (random_weights && !element_has_property ("weights")) {
      r->pipe_state = PIPE_NO_WEIGHTS;
    } else {
      if (random_weights) {
        char tmpl[] = "/tmp/sattn-bench-XXXXXX";
        if (o->dump && r->dump_dir[0]) {
          snprintf (wfile, sizeof wfile, "%s/weights.safetensors", r->dump_dir);
        } else if (mkdtemp (tmpl) != NULL) {
          snprintf (wfile, sizeof wfile, "%s/weights.safetensors", tmpl);
          if (write_safetensors (wfile, &m, E) != 0)
            wfile[0] = '\0';
        }
        snprintf (extra, sizeof extra, "weights=\"%s\"", wfile);
      }
      /* Buffers per run: about pipe_time / pipe_repeats of core work. */
      const int PR = o->pipe_repeats;
      uint64_t warm = (n + bf - 1) / bf + 2;
      double want = o->pipe_time / PR * r->core_fps / (double) bf;
      uint64_t nbuf = (uint64_t) want;
      if (nbuf < 20)
        nbuf = 20;
      int do_msg = strcmp (w->name, "W1") == 0 && !random_weights &&
                   element_has_property ("post-messages");
      double *pf = calloc ((size_t) PR, sizeof (double));
      double *cf = calloc ((size_t) PR, sizeof (double));
      double *pw = calloc ((size_t) PR, sizeof (double));
      double *ov = calloc ((size_t) PR, sizeof (double));
      double *mf = calloc ((size_t) PR, sizeof (double));
      double *mc = calloc ((size_t) PR, sizeof (double));
      double *mf100 = calloc ((size_t) PR, sizeof (double));
      double *mc100 = calloc ((size_t) PR, sizeof (double));
      double *eo = calloc ((size_t) PR, sizeof (double));
      double *co = calloc ((size_t) PR, sizeof (double));
      double *ceo = calloc ((size_t) PR, sizeof (double));
      r->pipe_state = PIPE_OK;
      r->msg_state = do_msg ? PIPE_OK : PIPE_NOT_RUN;
      for (int k = 0; k < PR && pf && pw && cf && ov && mf && mc && mf100 &&
                      mc100 && eo && co && ceo;
           k++) {
        double tp = 0.0, tm = 0.0, te = 0.0, cc = 0.0, cp = 0.0, ce = 0.0,
               cm = 0.0;
        uint64_t fout = 0, mout = 0, eout = 0;
        double tc = 0.0;
        /* Alternate which side runs first, so that a drift of the machine's
         * speed within a repeat does not favour one side. */
        if (k % 2 == 0)
          tc = measure_chunks (s, pool, pool_frames, E, bf, warm, nbuf, out,
                               n + bf, &cc, &fail);
        if (!o->throughput_only &&
            run_pipeline (w, pool, pool_frames, bf, warm, warm + nbuf, 0, NULL,
                          &te, &ce, &eout, err, sizeof err) != 0) {
          r->pipe_state = PIPE_ERROR;
          snprintf (r->message, sizeof r->message, "appsrc ! fakesink: %s",
                    err);
          r->failed = 1;
          break;
        }
        if (run_pipeline (w, pool, pool_frames, bf, warm, warm + nbuf, 1, extra,
                          &tp, &cp, &fout, err, sizeof err) != 0) {
          r->pipe_state = PIPE_ERROR;
          snprintf (r->message, sizeof r->message, "pipeline: %s", err);
          r->failed = 1;
          break;
        }
        if (k % 2 == 1)
          tc = measure_chunks (s, pool, pool_frames, E, bf, warm, nbuf, out,
                               n + bf, &cc, &fail);
        r->pipe_frames_in = (warm + nbuf) * bf;
        r->pipe_frames_out = fout;
        if (fout != r->pipe_frames_in) {
          snprintf (r->message, sizeof r->message,
                    "pipeline: %" PRIu64 " frames out for %" PRIu64 " in", fout,
                    r->pipe_frames_in);
          r->failed = 1;
        }
        double frames = (double) (nbuf * bf);
        pf[k] = frames / cp;
        pw[k] = frames / tp;
        cf[k] = frames / cc;
        ov[k] = tp / tc;
        eo[k] = o->throughput_only ? NAN : (tp - te) / tc;
        co[k] = cp / cc;
        ceo[k] = o->throughput_only ? NAN : (cp - ce) / cc;
        if (do_msg && !o->throughput_only) {
          if (run_pipeline (w, pool, pool_frames, bf, warm, warm + nbuf, 1,
                            "post-messages=true message-interval=0", &tm, &cm,
                            &mout, err, sizeof err) != 0) {
            r->msg_state = PIPE_ERROR;
            do_msg = 0;
          } else {
            mf[k] = frames / cm;
            mc[k] = cm / cp - 1.0;
            if (run_pipeline (w, pool, pool_frames, bf, warm, warm + nbuf, 1,
                              "post-messages=true message-interval=100000000",
                              &tm, &cm, &mout, err, sizeof err) != 0) {
              r->msg_state = PIPE_ERROR;
              do_msg = 0;
            } else {
              mf100[k] = frames / cm;
              mc100[k] = cm / cp - 1.0;
            }
          }
        }
      }
      if (r->pipe_state == PIPE_OK) {
        r->pipe_fps = median (pf, (size_t) PR);
        r->pipe_fps_wall = median (pw, (size_t) PR);
        r->chunk_fps = median (cf, (size_t) PR);
        r->overhead = median (ov, (size_t) PR);
        r->elem_overhead = median (eo, (size_t) PR);
        r->cpu_overhead = median (co, (size_t) PR);
        r->cpu_elem_overhead = median (ceo, (size_t) PR);
      }
      if (r->msg_state == PIPE_OK) {
        r->msg_fps = median (mf, (size_t) PR);
        r->msg_cost = median (mc, (size_t) PR);
        r->msg100_fps = median (mf100, (size_t) PR);
        r->msg100_cost = median (mc100, (size_t) PR);
      }
      free (pf);
      free (pw);
      free (cf);
      free (ov);
      free (mf);
      free (mc);
      free (mf100);
      free (mc100);
      free (eo);
      free (co);
      free (ceo);
      if (random_weights && !(o->dump && r->dump_dir[0]) && wfile[0]) {
        unlink (wfile);
        char *slash = strrchr (wfile, '/');
        if (slash) {
          *slash = '\0';
          rmdir (wfile);
        }
      }
    }
  }
#else
  if (o->do_pipeline)
    r->pipe_state = PIPE_NO_GST;
#endif

free_arrays:
  sattn_stream_free (ss);
  free (scost);
  free (fps);
  free (cfps);
  free (rfps);
  free (rratio);
  free (gf);
  free (gratio);
done:
  sgemm_clear (&g);
  sattn_stream_free (s);
  model_clear (&m);
  free (pool);
  free (out);
  free (rout);
  free (hist);
  free (cpu_hist);
  r->done = 1;
}

/* Run one configuration in a child process (its own peak RSS); the result
 * comes back through a pipe. */
static void
run_isolated (const Workload *w, int random_weights, const Opts *o, Result *r)
{
  if (!o->do_fork) {
    run_config (w, random_weights, o, r);
    return;
  }
  int fd[2];
  fflush (stdout);
  fflush (stderr);
  if (pipe (fd) != 0) {
    run_config (w, random_weights, o, r);
    return;
  }
  pid_t pid = fork ();
  if (pid < 0) {
    close (fd[0]);
    close (fd[1]);
    run_config (w, random_weights, o, r);
    return;
  }
  if (pid == 0) {
    close (fd[0]);
    Result *res = calloc (1, sizeof (Result));
    if (res == NULL)
      _exit (3);
    run_config (w, random_weights, o, res);
    const char *p = (const char *) res;
    size_t left = sizeof (Result);
    while (left > 0) {
      ssize_t k = write (fd[1], p, left);
      if (k <= 0)
        _exit (2);
      p += k;
      left -= (size_t) k;
    }
    close (fd[1]);
    fflush (stdout);
    _exit (0);
  }
  close (fd[1]);
  memset (r, 0, sizeof (*r));
  char *p = (char *) r;
  size_t left = sizeof (Result);
  while (left > 0) {
    ssize_t k = read (fd[0], p, left);
    if (k <= 0)
      break;
    p += k;
    left -= (size_t) k;
  }
  close (fd[0]);
  int status = 0;
  waitpid (pid, &status, 0);
  if (left != 0 || !r->done) {
    memset (r, 0, sizeof (*r));
    r->failed = 1;
    snprintf (r->message, sizeof r->message,
              "the measuring process died (%s %d)",
              WIFSIGNALED (status) ? "signal" : "status",
              WIFSIGNALED (status) ? WTERMSIG (status) : WEXITSTATUS (status));
  }
}

/* ------------------------------------------------------------ threads */

/* threads=1 against threads=2 (SattnStreamConfig.threads / the element's
 * `threads`), side by side: the core pushing one hop at a time (wall-clock
 * frames/s, and p99 of the wall time per push) and the pipeline appsrc !
 * sattn ! fakesink (wall-clock frames/s), repeat by repeat interleaved;
 * medians of the per-repeat ratios.  Wall clock: with workers the CPU time
 * of the calling thread says nothing.  Not pinned to one CPU. */
static int
run_threads_section (const Opts *o)
{
  static const char *names[] = { "W1", "W3" };
  int failures = 0;
  printf ("\n| workload | weights | core t=1 frames/s | core t=2 frames/s "
          "| ratio | p50/hop t=1 us | p50/hop t=2 us | p99/hop t=1 us "
          "| p99/hop t=2 us | sync us/hop | p10/hop t=1 us | p10/hop t=2 us "
          "| min/hop t=1 us | min/hop t=2 us | min ratio "
          "| pipeline t=1 frames/s | pipeline t=2 frames/s | ratio |\n");
  printf ("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|---:|---:|---:|\n");
  fflush (stdout);
  for (size_t k = 0; k < 2; k++) {
    const Workload *w = NULL;
    for (size_t i = 0; i < N_WORKLOADS; i++)
      if (strcmp (workloads[i].name, names[k]) == 0)
        w = &workloads[i];
    if (w == NULL || (o->only && strstr (o->only, w->name) == NULL))
      continue;
    for (int rw = 1; rw >= 0; rw--) {
      if (o->weights_filter >= 0 && rw != o->weights_filter)
        continue;
      const size_t E = wl_d_model (w), h = w->hop;
      const size_t bf = wl_buffer_frames (w);
      const size_t pool_frames = pair_pool_frames (w, bf);
      char err[256] = "";
      Model m[2];
      SattnStream *s[2] = { NULL, NULL };
      Hist *hist[2] = { calloc (1, sizeof (Hist)), calloc (1, sizeof (Hist)) };
      float *pool = malloc (pool_frames * E * sizeof (float));
      float *out = malloc (h * E * sizeof (float));
      double *ratio = calloc ((size_t) o->repeats, sizeof (double));
      double *fps[2] = { calloc ((size_t) o->repeats, sizeof (double)),
                         calloc ((size_t) o->repeats, sizeof (double)) };
      double *pfps[2] = { calloc ((size_t) o->repeats, sizeof (double)),
                          calloc ((size_t) o->repeats, sizeof (double)) };
      double *pratio = calloc ((size_t) o->repeats, sizeof (double));
      int fail = 0, npipe = 0;
      memset (m, 0, sizeof m);
      if (!hist[0] || !hist[1] || !pool || !out || !ratio || !fps[0] ||
          !fps[1] || !pfps[0] || !pfps[1] || !pratio) {
        fprintf (stderr, "out of memory\n");
        return 1;
      }
      Rng r = { 777 + E };
      fill_normal (&r, pool, pool_frames * E, 1.0);
      fail = pair_init (m, s, w, rw, err, sizeof err) != 0;
      size_t pos[2] = { 0, 0 };
      uint64_t pushes = 0;
      double cpu_fps;
      for (int rep = 0; rep < o->repeats && !fail; rep++) {
        for (int t = 0; t < 2; t++) {
          if (rep == 0) /* warm-up */
            measure_throughput (s[t], pool, pool_frames, &pos[t], E, h, out, h,
                                0.2 * o->core_time, &cpu_fps, &pushes, &fail);
          fps[t][rep] = measure_throughput (s[t], pool, pool_frames, &pos[t], E,
                                            h, out, h, 0.5 * o->core_time,
                                            &cpu_fps, &pushes, &fail);
          measure_latency (s[t], pool, pool_frames, &pos[t], E, h, out, h,
                           0.5 * o->core_time, CLOCK_MONOTONIC, hist[t],
                           &pushes, &fail);
        }
        ratio[rep] = fps[1][rep] / fps[0][rep];
      }
#ifdef SATTN_BENCH_HAVE_GST
      if (!fail && o->do_pipeline) {
        gst_init (NULL, NULL);
        char tmpl[] = "/tmp/sattn-bench-XXXXXX", wfile[600] = "";
        if (rw && element_has_property ("weights") && mkdtemp (tmpl)) {
          snprintf (wfile, sizeof wfile, "%s/weights.safetensors", tmpl);
          if (write_safetensors (wfile, &m[0], E) != 0)
            wfile[0] = '\0';
        }
        if (element_has_property ("threads") && (!rw || wfile[0])) {
          for (int rep = 0; rep < o->repeats && !fail; rep++) {
            for (int t = 0; t < 2 && !fail; t++) {
              /* about pipe_time seconds at the core's rate */
              double want = fps[t][rep] * o->pipe_time;
              uint64_t nbuf = (uint64_t) (want / (double) bf) + 4;
              double secs = 0.0, cpu = 0.0;
              uint64_t fo = 0;
              char extra[700];
              snprintf (extra, sizeof extra, "threads=%d%s%s%s", t + 1,
                        wfile[0] ? " weights=\"" : "", wfile,
                        wfile[0] ? "\"" : "");
              if (run_pipeline (w, pool, pool_frames, bf, 2, nbuf, 1, extra,
                                &secs, &cpu, &fo, err, sizeof err) != 0)
                fail = 1;
              else
                pfps[t][rep] = (double) ((nbuf - 2) * bf) / secs;
            }
            pratio[rep] = pfps[1][rep] / pfps[0][rep];
            npipe++;
          }
        }
        if (wfile[0]) {
          unlink (wfile);
          rmdir (tmpl);
        }
      }
#endif
      if (fail) {
        printf ("| %s | %s | FAILED: %s |\n", w->name,
                rw ? "random" : "identity", err[0] ? err : "push failed");
        failures++;
      } else {
        double p50[2], p99[2], p10[2], pmin[2];
        for (int t = 0; t < 2; t++) {
          p50[t] = hist_quantile (hist[t], 0.5) * 1e6;
          p99[t] = hist_quantile (hist[t], 0.99) * 1e6;
          p10[t] = hist_quantile (hist[t], 0.10) * 1e6;
          pmin[t] = hist_quantile (hist[t], 0.0) * 1e6;
        }
        printf ("| %s | %s | %.0f | %.0f | %.2fx | %.1f | %.1f | %.1f | %.1f "
                "| %.1f |",
                w->name, rw ? "random" : "identity",
                median (fps[0], (size_t) o->repeats),
                median (fps[1], (size_t) o->repeats),
                median (ratio, (size_t) o->repeats), p50[0], p50[1], p99[0],
                p99[1], p50[1] - 0.5 * p50[0]);
        printf (" %.1f | %.1f | %.1f | %.1f | %.2fx |", p10[0], p10[1], pmin[0],
                pmin[1], pmin[0] / pmin[1]);
        if (npipe > 0)
          printf (" %.0f | %.0f | %.2fx |\n", median (pfps[0], npipe),
                  median (pfps[1], npipe), median (pratio, npipe));
        else
          printf (" not run | | |\n");
      }
      fflush (stdout);
      for (int t = 0; t < 2; t++) {
        sattn_stream_free (s[t]);
        model_clear (&m[t]);
        free (hist[t]);
        free (fps[t]);
        free (pfps[t]);
      }
      free (pool);
      free (out);
      free (ratio);
      free (pratio);
    }
  }
  printf ("sync us/hop: p50 per hop with threads=2 minus half of it with "
          "threads=1 (the cost of sharing one hop between two threads).\n");
  printf ("p10 and min per hop: the figures a busy machine disturbs least "
          "(min: the fastest hop of all repeats, 1 %% buckets; min ratio: "
          "t=1 over t=2).\n");
  return failures;
}

/* ------------------------------------------------- FMA peak (issue 13) */

/* The honest ceiling: the FMA rate of the core this runs on, measured in
 * the same run by a register-only loop per ISA level (AVX-512: 16 lanes,
 * AVX2+FMA: 8 lanes), twelve independent accumulators (more than latency
 * 4 × 2 FMA ports needs), nothing but FMAs in the loop.  The accumulators
 * stay bounded (a = a * 0.999 + 1e-7) so no value ever turns subnormal or
 * infinite. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <pthread.h>
#define BENCH_HAVE_X86 1

#define FMA12(T, fma)    \
  a0 = fma (a0, x, y);   \
  a1 = fma (a1, x, y);   \
  a2 = fma (a2, x, y);   \
  a3 = fma (a3, x, y);   \
  a4 = fma (a4, x, y);   \
  a5 = fma (a5, x, y);   \
  a6 = fma (a6, x, y);   \
  a7 = fma (a7, x, y);   \
  a8 = fma (a8, x, y);   \
  a9 = fma (a9, x, y);   \
  a10 = fma (a10, x, y); \
  a11 = fma (a11, x, y)

/* The loop of one ISA level: vector type T with its set1, fma and add
 * intrinsics, `hsum` summing the lanes of a T; the sum of the accumulators
 * is returned so that the loop cannot be dropped. */
#define PEAK_LOOP(name, isa, T, set1, fma, add, hsum)                         \
  __attribute__ ((target (isa), noinline)) static float name (uint64_t iters) \
  {                                                                           \
    const T x = set1 (0.999f), y = set1 (1e-7f);                              \
    T a0 = set1 (0.f), a1 = set1 (1.f), a2 = set1 (2.f), a3 = set1 (3.f),     \
      a4 = set1 (4.f), a5 = set1 (5.f), a6 = set1 (6.f), a7 = set1 (7.f),     \
      a8 = set1 (8.f), a9 = set1 (9.f), a10 = set1 (10.f), a11 = set1 (11.f); \
    for (uint64_t k = 0; k < iters; k++) {                                    \
      FMA12 (T, fma);                                                         \
    }                                                                         \
    T s = add (add (add (a0, a1), add (a2, a3)),                              \
               add (add (a4, a5), add (a6, a7)));                             \
    s = add (s, add (add (a8, a9), add (a10, a11)));                          \
    return hsum (s);                                                          \
  }

__attribute__ ((target ("avx2,fma"))) static inline float
hsum_avx2 (__m256 s)
{
  float l[8];
  _mm256_storeu_ps (l, s);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

PEAK_LOOP (peak_loop_avx512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps,
           _mm512_add_ps, _mm512_reduce_add_ps)
PEAK_LOOP (peak_loop_avx2, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps,
           _mm256_add_ps, hsum_avx2)
#endif

/* ISA levels of the peak table: 2 = AVX-512 (the core's default on such
 * CPUs), 1 = AVX2+FMA (SATTN_SIMD=1). */
static int
peak_isa_supported (int isa)
{
#ifdef BENCH_HAVE_X86
  if (isa == 2)
    return __builtin_cpu_supports ("avx512f") &&
           __builtin_cpu_supports ("avx512dq") &&
           __builtin_cpu_supports ("avx512bw") &&
           __builtin_cpu_supports ("avx512vl");
  return isa == 1 && __builtin_cpu_supports ("avx2") &&
         __builtin_cpu_supports ("fma");
#else
  (void) isa;
  return 0;
#endif
}

static volatile float peak_sink;

/* FLOPs of the loop (a multiply-add counts 2). */
static double
peak_flops (int isa, uint64_t iters)
{
  return (double) iters * 12.0 * (isa == 2 ? 16.0 : 8.0) * 2.0;
}

static void
peak_loop (int isa, uint64_t iters)
{
#ifdef BENCH_HAVE_X86
  peak_sink = isa == 2 ? peak_loop_avx512 (iters) : peak_loop_avx2 (iters);
#else
  (void) isa;
  (void) iters;
#endif
}

typedef struct {
  int isa;
  uint64_t iters;
  double secs, cpu;
} PeakArg;

static void *
peak_thread (void *p)
{
  PeakArg *a = p;
  double t0 = now_s (), c0 = clock_s (CLOCK_THREAD_CPUTIME_ID);
  peak_loop (a->isa, a->iters);
  a->secs = now_s () - t0;
  a->cpu = clock_s (CLOCK_THREAD_CPUTIME_ID) - c0;
  return NULL;
}

/* The one-thread peak of the last peak_measure, per CPU second. */
static double peak_cpu_last = NAN;

/* Loop iterations that take about `secs` on one thread. */
static uint64_t
peak_calibrate (int isa, double secs)
{
  uint64_t it = 100000;
  for (;;) {
    double t0 = now_s ();
    peak_loop (isa, it);
    double t = now_s () - t0;
    if (t > 0.02 || it > (1ull << 40))
      return (uint64_t) ((double) it * secs / (t > 0 ? t : 1e-9)) + 1;
    it *= 4;
  }
}

/* GFLOP/s of `threads` copies of the loop running at once (1 or 2), per
 * wall-clock second of the slowest; NAN when it cannot run. */
static double
peak_measure (int isa, int threads, uint64_t iters)
{
#ifdef BENCH_HAVE_X86
  PeakArg a[2] = { { isa, iters, 0.0, 0.0 }, { isa, iters, 0.0, 0.0 } };
  if (threads == 1) {
    peak_thread (&a[0]);
    peak_cpu_last = peak_flops (isa, iters) / a[0].cpu * 1e-9;
    return peak_flops (isa, iters) / a[0].secs * 1e-9;
  }
  pthread_t tid;
  if (pthread_create (&tid, NULL, peak_thread, &a[1]) != 0)
    return NAN;
  peak_thread (&a[0]);
  pthread_join (tid, NULL);
  double t = a[0].secs > a[1].secs ? a[0].secs : a[1].secs;
  return 2.0 * peak_flops (isa, iters) / t * 1e-9;
#else
  (void) isa;
  (void) threads;
  (void) iters;
  return NAN;
#endif
}

/* One row of the peak table, measured in a child process (so that the
 * core's ISA choice, made once per process, follows SATTN_SIMD). */
typedef struct {
  int done, failed;
  char message[256];
  double peak[2];                /* GFLOP/s: 1 thread, 2 threads at once */
  double gflops[2];              /* useful GFLOP/s, threads=1 / threads=2 */
  double frac[2];                /* gflops / peak of the same repeat */
  double ratio;                  /* threads=2 / threads=1 frames/s */
  double p99_us[2];              /* wall time per push */
  double cpu_gflops1, cpu_frac1; /* threads=1 per CPU second */
  double quiet_frac1;            /* threads=1 at the p10 push time */
  double quiet_ratio;            /* p10 push time threads=1 / threads=2 */
} PeakRow;

static void
peak_row_measure (const Workload *w, int rw, size_t push, int isa,
                  const Opts *o, PeakRow *r)
{
  const size_t E = wl_d_model (w);
  const size_t pool_frames = pair_pool_frames (w, push);
  /* At most 3 repeats of 0.2 s per side (default --time): the table has
   * 18 rows and make bench other sections. */
  const int reps = o->repeats < 3 ? o->repeats : 3;
  const double T = o->quick ? 0.02 : 0.2 * o->core_time / 1.5;
  const double fpf = flops_per_frame (w, rw);
  Model m[2];
  SattnStream *s[2] = { NULL, NULL };
  Hist *hist[2] = { calloc (1, sizeof (Hist)), calloc (1, sizeof (Hist)) };
  float *pool = malloc (pool_frames * E * sizeof (float));
  float *out = malloc (push * E * sizeof (float));
  double *v[7];
  char err[256] = "";
  int fail = 0;
  for (int k = 0; k < 7; k++)
    v[k] = calloc ((size_t) reps, sizeof (double));
  memset (m, 0, sizeof m);
  memset (r, 0, sizeof (*r));
  if (!hist[0] || !hist[1] || !pool || !out || !v[0] || !v[1] || !v[2] ||
      !v[3] || !v[4] || !v[5] || !v[6]) {
    snprintf (r->message, sizeof r->message, "out of memory");
    r->failed = 1;
    goto done;
  }
  Rng rng = { 777 + E };
  fill_normal (&rng, pool, pool_frames * E, 1.0);
  fail = pair_init (m, s, w, rw, err, sizeof err) != 0;
  uint64_t it = peak_calibrate (isa, o->quick ? 0.01 : 0.1);
  size_t pos[2] = { 0, 0 };
  uint64_t pushes = 0;
  double cpu_fps;
  for (int rep = 0; rep < reps && !fail; rep++) {
    double fps[2], pk[2];
    pk[0] = peak_measure (isa, 1, it);
    for (int t = 0; t < 2; t++) {
      if (rep == 0)
        measure_throughput (s[t], pool, pool_frames, &pos[t], E, push, out,
                            push, 0.3 * T, &cpu_fps, &pushes, &fail);
      fps[t] = measure_throughput (s[t], pool, pool_frames, &pos[t], E, push,
                                   out, push, T, &cpu_fps, &pushes, &fail);
      if (t == 0)
        v[6][rep] = fpf * cpu_fps * 1e-9 / peak_cpu_last;
      measure_latency (s[t], pool, pool_frames, &pos[t], E, push, out, push,
                       0.5 * T, CLOCK_MONOTONIC, hist[t], &pushes, &fail);
    }
    pk[1] = peak_measure (isa, 2, it);
    for (int t = 0; t < 2; t++) {
      v[t][rep] = fpf * fps[t] * 1e-9;
      v[2 + t][rep] = v[t][rep] / pk[t];
      v[4 + t][rep] = pk[t];
    }
  }
  if (fail) {
    snprintf (r->message, sizeof r->message, "%s",
              err[0] ? err : "push failed");
    r->failed = 1;
    goto done;
  }
  {
    double *ratio = calloc ((size_t) reps, sizeof (double));
    if (ratio == NULL) {
      r->failed = 1;
      goto done;
    }
    for (int rep = 0; rep < reps; rep++)
      ratio[rep] = v[1][rep] / v[0][rep];
    r->ratio = median (ratio, (size_t) reps);
    free (ratio);
  }
  for (int t = 0; t < 2; t++) {
    r->gflops[t] = median (v[t], (size_t) reps);
    r->frac[t] = median (v[2 + t], (size_t) reps);
    r->peak[t] = median (v[4 + t], (size_t) reps);
    r->p99_us[t] = hist_quantile (hist[t], 0.99) * 1e6;
  }
  {
    const double p10[2] = { hist_quantile (hist[0], 0.10),
                            hist_quantile (hist[1], 0.10) };
    r->quiet_frac1 = fpf * (double) push / p10[0] * 1e-9 / r->peak[0];
    r->quiet_ratio = p10[0] / p10[1];
  }
  r->cpu_frac1 = median (v[6], (size_t) reps);
  r->cpu_gflops1 = r->cpu_frac1 * r->peak[0];
  r->done = 1;
done:
  for (int t = 0; t < 2; t++) {
    sattn_stream_free (s[t]);
    model_clear (&m[t]);
    free (hist[t]);
  }
  for (int k = 0; k < 7; k++)
    free (v[k]);
  free (pool);
  free (out);
}

/* peak_row_measure in a child process whose environment selects the ISA
 * before the core looks at it. */
static void
peak_row_isolated (const Workload *w, int rw, size_t push, int isa,
                   const Opts *o, PeakRow *r)
{
  int fd[2];
  memset (r, 0, sizeof (*r));
  fflush (stdout);
  fflush (stderr);
  if (pipe (fd) != 0) {
    r->failed = 1;
    snprintf (r->message, sizeof r->message, "pipe: %s", strerror (errno));
    return;
  }
  pid_t pid = fork ();
  if (pid < 0) {
    close (fd[0]);
    close (fd[1]);
    r->failed = 1;
    snprintf (r->message, sizeof r->message, "fork: %s", strerror (errno));
    return;
  }
  if (pid == 0) {
    close (fd[0]);
    setenv ("SATTN_SIMD", isa == 2 ? "2" : "1", 1);
    PeakRow res;
    peak_row_measure (w, rw, push, isa, o, &res);
    ssize_t k = write (fd[1], &res, sizeof res);
    _exit (k == (ssize_t) sizeof res ? 0 : 2);
  }
  close (fd[1]);
  ssize_t k = read (fd[0], r, sizeof (*r));
  close (fd[0]);
  int status = 0;
  waitpid (pid, &status, 0);
  if (k != (ssize_t) sizeof (*r)) {
    memset (r, 0, sizeof (*r));
    r->failed = 1;
    snprintf (r->message, sizeof r->message, "the measuring process died");
  }
}

/* The table of the performance issue: every workload's useful GFLOP/s as
 * a fraction of the FMA peak measured in the same repeat, threads=1 and
 * threads=2 (against the peak of two loops running at once), p99 per
 * push for both, for each ISA level; W4 with random weights also with
 * pushes of 160 frames (a buffer of a file processed offline), where the
 * projections are batched.  Wall clock throughout (threads=2 needs it);
 * threads=1 also per CPU second.  Not pinned. */
static int
run_peak_section (const Opts *o)
{
  int failures = 0;
  printf ("sattn-bench --peak: useful GFLOP/s (flops_per_frame) as a "
          "fraction of the measured FMA peak; medians of %d interleaved "
          "repeats; %ld CPU(s) online\n\n",
          o->repeats < 3 ? o->repeats : 3, sysconf (_SC_NPROCESSORS_ONLN));
  printf ("| workload | weights | frames/push | ISA | peak 1 core GFLOP/s "
          "| peak 2 cores GFLOP/s | t=1 GFLOP/s | t=1 %% of peak "
          "| t=1 %% of peak (CPU s) | t=1 p99 µs/push | t=2 GFLOP/s "
          "| t=2 %% of 2-core peak | t=2 p99 µs/push | t=2 / t=1 "
          "| t=1 %% of peak, p10 push | t=2 / t=1, p10 push |\n");
  printf ("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|---:|\n");
  fflush (stdout);
  for (size_t i = 0; i < N_WORKLOADS; i++) {
    const Workload *w = &workloads[i];
    if (o->only && strstr (o->only, w->name) == NULL)
      continue;
    for (int rw = 0; rw < 2; rw++) {
      if (o->weights_filter >= 0 && rw != o->weights_filter)
        continue;
      size_t pushes[2] = { w->hop, 0 };
      if (strcmp (w->name, "W4") == 0 && rw)
        pushes[1] = 160;
      for (int pk = 0; pk < 2 && pushes[pk]; pk++)
        for (int isa = 2; isa >= 1; isa--) {
          if (!peak_isa_supported (isa))
            continue;
          PeakRow r;
          peak_row_isolated (w, rw, pushes[pk], isa, o, &r);
          const char *isa_name = isa == 2 ? "AVX-512" : "AVX2 (SATTN_SIMD=1)";
          if (r.failed || !r.done) {
            printf ("| %s | %s | %zu | %s | FAILED: %s |\n", w->name,
                    rw ? "random" : "identity", pushes[pk], isa_name,
                    r.message);
            failures++;
          } else {
            printf ("| %s | %s | %zu | %s | %.1f | %.1f | %.2f | %.1f%% "
                    "| %.1f%% | %.1f | %.2f | %.1f%% | %.1f | %.2fx "
                    "| %.1f%% | %.2fx |\n",
                    w->name, rw ? "random" : "identity", pushes[pk], isa_name,
                    r.peak[0], r.peak[1], r.gflops[0], 100.0 * r.frac[0],
                    100.0 * r.cpu_frac1, r.p99_us[0], r.gflops[1],
                    100.0 * r.frac[1], r.p99_us[1], r.ratio,
                    100.0 * r.quiet_frac1, r.quiet_ratio);
          }
          fflush (stdout);
        }
    }
  }
  printf ("\npeak = a register-only FMA loop (12 independent accumulators) "
          "of that ISA, one thread resp. two at once, measured in the same "
          "repeat as the row; t=1 %% of peak uses wall-clock time on both "
          "sides, \"CPU s\" the thread's CPU time (immune to preemption); "
          "t=2 %% divides by the two-thread peak.\n");
  printf ("p10 push: the same from the push time that 10 %% of the "
          "latency pushes beat (wall clock): the pushes other tenants of "
          "the host disturbed least.  On this kind of machine the same "
          "binary alternates, for seconds at a time, between two speeds "
          "about 1.5x apart while the FMA loop keeps its rate "
          "(docs/performance.md); the median columns are read "
          "against the targets, this one says what the code does when "
          "the core is its own.\n");
  return failures;
}

/* ------------------------------------------------------- encoder layer */

/* --encoder: an nn.TransformerEncoderLayer on the W1 geometry (64 values
 * per frame, 4 heads, window 256, hop 16), feed-forward 4 x d_model, random
 * weights, RoPE: the layer's safetensors file is written here (the state
 * dict names of PyTorch and the metadata the element reads), then sattn's
 * core (pushes of one hop) and the pipeline appsrc ! sattn weights=FILE !
 * fakesink are measured in interleaved repeats.  torch_baseline.py
 * --encoder-json runs nn.TransformerEncoderLayer on the same file, per
 * window and batched. */
#ifdef SATTN_BENCH_HAVE_WEIGHTS
#include "sattn/sattn-weights.h"

typedef struct {
  const char *name;
  size_t rows, cols; /* cols 0: a vector */
  double sigma, mean;
} EncTensor;

static int
write_encoder_file (const char *path, size_t E, size_t F, Rng *r)
{
  const double se = 1.0 / sqrt ((double) E), sf = 1.0 / sqrt ((double) F);
  const EncTensor t[] = {
    { "self_attn.in_proj_weight", 3 * E, E, se, 0.0 },
    { "self_attn.in_proj_bias", 3 * E, 0, 0.1, 0.0 },
    { "self_attn.out_proj.weight", E, E, se, 0.0 },
    { "self_attn.out_proj.bias", E, 0, 0.1, 0.0 },
    { "linear1.weight", F, E, se, 0.0 },
    { "linear1.bias", F, 0, 0.1, 0.0 },
    { "linear2.weight", E, F, sf, 0.0 },
    { "linear2.bias", E, 0, 0.1, 0.0 },
    { "norm1.weight", E, 0, 0.2, 1.0 },
    { "norm1.bias", E, 0, 0.2, 0.0 },
    { "norm2.weight", E, 0, 0.2, 1.0 },
    { "norm2.bias", E, 0, 0.2, 0.0 },
  };
  const size_t nt = sizeof t / sizeof t[0];
  StWriter *st = st_writer_new ();
  if (st == NULL)
    return -1;
  st_writer_meta (st, "format", "pt");
  st_writer_meta (st, "self_attn.num_heads", "4");
  st_writer_meta (st, "positions", "rope");
  st_writer_meta (st, "activation", "relu");
  st_writer_meta (st, "norm_first", "0");
  st_writer_meta (st, "norm_eps", "1e-05");
  int ok = 1;
  for (size_t i = 0; ok && i < nt; i++) {
    size_t n = t[i].cols ? t[i].rows * t[i].cols : t[i].rows;
    float *x = malloc (n * sizeof (float));
    if (x == NULL) {
      ok = 0;
      break;
    }
    fill_normal (r, x, n, t[i].sigma);
    for (size_t k = 0; k < n; k++)
      x[k] += (float) t[i].mean;
    st_writer_f32_2d (st, t[i].name, x, t[i].rows, t[i].cols);
    free (x);
  }
  ok = ok && st_writer_save (st, path) == 0;
  st_writer_free (st);
  return ok ? 0 : -1;
}

/* The model the element builds from the file: the one loader
 * (sattn_model_load) with 4 heads on the caller's thread. */
static SattnModel *
encoder_model (const char *path, char *err, size_t err_len)
{
  SattnLoadOptions opt;
  SattnModel *m = NULL;

  sattn_load_options_init (&opt);
  opt.cfg.heads = 4;
  if (sattn_model_load (path, "", &opt, &m, NULL, err, err_len) != SATTN_OK)
    return NULL;
  return m;
}

static int
run_encoder (const Opts *o, FILE *json)
{
  const Workload *w = &workloads[0]; /* W1 */
  const size_t E = wl_d_model (w), F = 4 * E, n = w->window, h = w->hop;
  char path[4096], err[1024] = "";
  snprintf (path, sizeof path, "%s/encoder-w1.safetensors",
            o->dump ? o->dump
                    : (getenv ("TMPDIR") ? getenv ("TMPDIR") : "/tmp"));
  Rng r = { 0x5eed };
  if (write_encoder_file (path, E, F, &r) != 0) {
    fprintf (stderr, "cannot write %s\n", path);
    return 1;
  }
  SattnModel *m = encoder_model (path, err, sizeof err);
  if (m == NULL) {
    fprintf (stderr, "encoder model: %s\n", err);
    return 1;
  }
  SattnStreamConfig sc = { .window = n, .hop = h, .threads = 1 };
  SattnStatus st;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  /* Whole pipeline buffers (the source does not wrap inside one), and
   * several windows. */
  const size_t pool_frames = wl_buffer_frames (w) *
                             ((8 * n + wl_buffer_frames (w) - 1) /
                              wl_buffer_frames (w));
  float *pool = malloc (pool_frames * E * sizeof (float));
  float *out = malloc (2 * n * E * sizeof (float));
  if (s == NULL || pool == NULL || out == NULL) {
    fprintf (stderr, "encoder stream: %s\n", sattn_status_string (st));
    return 1;
  }
  fill_normal (&r, pool, pool_frames * E, 1.0);
  printf ("\nencoder layer on W1 (d_model %zu, 4 heads, window %zu, hop %zu, "
          "feed-forward %zu, relu, post-norm, RoPE, random weights, "
          "threads=1), frames/s per CPU second, medians of %d repeats:\n",
          E, n, h, F, o->repeats);
  double *core = calloc ((size_t) o->repeats, sizeof (double));
  double *pipe = calloc ((size_t) o->repeats, sizeof (double));
  int fail = 0;
  size_t pos = 0;
  uint64_t pushes = 0;
  for (int rep = 0; rep < o->repeats; rep++) {
    double cpu_fps = 0.0;
    measure_throughput (s, pool, pool_frames, &pos, E, h, out, 2 * n,
                        o->core_time, &cpu_fps, &pushes, &fail);
    core[rep] = cpu_fps;
    pipe[rep] = NAN;
#ifdef SATTN_BENCH_HAVE_GST
    if (o->do_pipeline) {
      char extra[4200];
      double secs = 0.0, cpu = 0.0;
      uint64_t frames_out = 0;
      size_t bf = wl_buffer_frames (w);
      uint64_t warm = 4,
               nbuf = warm + (uint64_t) fmax (20.0, cpu_fps * o->pipe_time /
                                                        (double) bf);
      snprintf (extra, sizeof extra, "weights=%s", path);
      if (run_pipeline (w, pool, pool_frames, bf, warm, nbuf, 1, extra, &secs,
                        &cpu, &frames_out, err, sizeof err) == 0)
        pipe[rep] = (double) ((nbuf - warm) * bf) / cpu;
      else {
        fprintf (stderr, "encoder pipeline: %s\n", err);
        fail = 1;
      }
    }
#endif
  }
  double cm = median (core, (size_t) o->repeats);
  double pm = median (pipe, (size_t) o->repeats);
  /* Useful work per output frame: the attention of flops_per_frame plus
   * the feed-forward 2 x (2 E F). */
  double fl = flops_per_frame (w, 1) + 4.0 * E * F;
  printf ("| | frames/s | x real time (%.0f frames/s) | GFLOP/s |\n"
          "|---|---:|---:|---:|\n",
          wl_frame_rate (w));
  printf ("| sattn core | %.0f | %.1f | %.2f |\n", cm, cm / wl_frame_rate (w),
          cm * fl * 1e-9);
  printf ("| sattn pipeline | %.0f | %.1f | %.2f |\n", pm,
          pm / wl_frame_rate (w), pm * fl * 1e-9);
  if (json)
    fprintf (json,
             "{\"encoder\": 1, \"workload\": \"W1\", \"weights\": "
             "\"%s\", \"d_model\": %zu, \"heads\": 4, \"d_ff\": %zu, "
             "\"window\": %zu, \"hop\": %zu, \"positions\": \"rope\", "
             "\"core_fps\": %.6g, \"pipeline_fps\": %.6g}\n",
             path, E, F, n, h, cm, isnan (pm) ? 0.0 : pm);
  free (core);
  free (pipe);
  free (pool);
  free (out);
  sattn_stream_free (s);
  sattn_model_free (m);
  return fail;
}
#endif

/* ------------------------------------------------------------- report */

static const char *
pipe_state_text (int st)
{
  switch (st) {
    case PIPE_NOT_RUN:
      return "not run";
    case PIPE_NO_GST:
      return "built without GStreamer";
    case PIPE_NO_ELEMENT:
      return "element not built";
    case PIPE_NO_WEIGHTS:
      return "element has no weights property";
    case PIPE_ERROR:
      return "error";
    default:
      return "ok";
  }
}

static void
json_string (FILE *f, const char *s)
{
  fputc ('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char) *s;
    if (ch == '"' || ch == '\\')
      fprintf (f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf (f, "\\u%04x", ch);
    else
      fputc (ch, f);
  }
  fputc ('"', f);
}

static void
json_num (FILE *f, const char *key, double v)
{
  if (isfinite (v))
    fprintf (f, ", \"%s\": %.6g", key, v);
  else
    fprintf (f, ", \"%s\": null", key);
}

static void
write_json (FILE *f, const Workload *w, int random_weights, const Result *r)
{
  fprintf (f, "{\"workload\": \"%s\", \"weights\": \"%s\"", w->name,
           random_weights ? "random" : "identity");
  fprintf (f,
           ", \"channels\": %zu, \"rate\": %zu, \"frame_size\": %zu"
           ", \"d_model\": %zu, \"heads\": %zu, \"window\": %zu"
           ", \"hop\": %zu, \"causal\": %s",
           w->channels, w->rate, w->frame_size, wl_d_model (w), w->heads,
           w->window, w->hop, w->causal ? "true" : "false");
  fprintf (f, ", \"precision\": \"%s\"",
           bench_precision == SATTN_PRECISION_FAST ? "fast" : "exact");
  json_num (f, "frame_rate", wl_frame_rate (w));
  json_num (f, "flops_per_frame", flops_per_frame (w, random_weights));
  fprintf (f, ", \"failed\": %s, \"message\": ", r->failed ? "true" : "false");
  json_string (f, r->message);
  json_num (f, "check_maxabs", r->check_maxabs);
  /* *_fps: frames per second of CPU time of the computing thread;
   * *_fps_wall: per wall-clock second. */
  json_num (f, "core_fps", r->core_fps);
  json_num (f, "core_fps_wall", r->core_fps_wall);
  json_num (f, "core_fps_min", r->core_fps_lo);
  json_num (f, "core_fps_max", r->core_fps_hi);
  json_num (f, "core_x_realtime", r->core_fps / wl_frame_rate (w));
  json_num (f, "gflops", r->gflops);
  json_num (f, "p50_us", r->p50_us);
  json_num (f, "p99_us", r->p99_us);
  json_num (f, "max_us", r->max_us);
  json_num (f, "cpu_p50_us", r->cpu_p50_us);
  json_num (f, "cpu_p99_us", r->cpu_p99_us);
  json_num (f, "hop_us", 1e6 * (double) w->hop / wl_frame_rate (w));
  json_num (f, "peak_rss_mib", r->peak_rss_mib);
  if (BENCH_COUNT_ALLOCS)
    json_num (f, "allocs_per_push",
              r->pushes ? (double) r->allocs / (double) r->pushes : NAN);
  json_num (f, "recompute_fps", r->recomp_fps);
  json_num (f, "ratio_vs_recompute", r->recomp_ratio);
  json_num (f, "sgemm_gflops", r->sgemm_gflops);
  json_num (f, "ratio_vs_sgemm", r->sgemm_ratio);
  fprintf (f, ", \"pipeline\": ");
  json_string (f, pipe_state_text (r->pipe_state));
  if (r->pipe_state == PIPE_OK) {
    fprintf (f, ", \"buffer_frames\": %zu", r->buffer_frames);
    json_num (f, "pipeline_fps", r->pipe_fps);
    json_num (f, "pipeline_fps_wall", r->pipe_fps_wall);
    json_num (f, "pipeline_x_realtime", r->pipe_fps / wl_frame_rate (w));
    json_num (f, "chunked_core_fps", r->chunk_fps);
    json_num (f, "element_overhead_wall", r->overhead);
    json_num (f, "element_only_overhead_wall", r->elem_overhead);
    json_num (f, "element_overhead_cpu", r->cpu_overhead);
    json_num (f, "element_only_overhead_cpu", r->cpu_elem_overhead);
  }
  if (r->msg_state == PIPE_OK) {
    json_num (f, "messages_fps", r->msg_fps);
    json_num (f, "messages_cost", r->msg_cost);
    json_num (f, "messages_100ms_fps", r->msg100_fps);
    json_num (f, "messages_100ms_cost", r->msg100_cost);
  }
  json_num (f, "core_stats_cost", r->stats_cost);
  if (r->dump_dir[0]) {
    fprintf (f, ", \"dump\": ");
    json_string (f, r->dump_dir);
  }
  fprintf (f, "}\n");
}

#ifdef SATTN_BENCH_HAVE_WEIGHTS
/* ------------------------------------------------------- whole models */

/* --whole FILE: a whole model per window (python/sattn/nn.py's
 * SignalTransformer saved with sattn.nn.save_safetensors), loaded with the
 * one loader, output=classes, threads=1, windows of --window frames every
 * --hop frames (16 and 8 by default).  Measured in interleaved repeats:
 *   - the core pushing one hop at a time (sattn_stream_push);
 *   - the core pushing the pipeline's buffers (10 ms of signal at the
 *     W1 rate, a whole number of hops);
 *   - the pipeline appsrc ! sattn weights=FILE output=classes ! fakesink
 *     with the same buffers;
 *   - the one-thread FMA peak (the loop of the --peak table, best ISA).
 * Each of the three with precision=exact and precision=fast, side by
 * side in every repeat (their order alternating), with the ratio fast /
 * exact.  Windows per CPU second of the computing thread; useful GFLOP/s
 * as a fraction of the peak per CPU second of the same repeat.
 *
 * Useful work per window (a multiply-add counts 2; biases, norms, softmax
 * exponentials and activations not counted), with d_frame F, d_model D,
 * d_ff Df, window n, hop h, N layers, C classes:
 *   embedding of the hop's new frames: 2 h F D (a frame's embedding does
 *     not depend on the window, so the other n - h are not useful again);
 *   per layer: Q, K, V projections 2 n D 3D, scores 2 n n D, weights x V
 *     2 n n D, output projection 2 n D D, feed-forward 2 (2 n D Df);
 *   pooling nothing, a Linear head 2 D C.
 * This is what any per-window implementation must compute for a
 * bidirectional model with learned positions; a batched peer that
 * re-embeds all n frames does more, and is credited with this count. */
static double
whole_flops_per_window (size_t F, size_t D, size_t Df, size_t n, size_t h,
                        size_t layers, size_t C)
{
  double fD = (double) D, fn = (double) n;
  double layer = 2.0 * fn * fD * 3.0 * fD + 4.0 * fn * fn * fD +
                 2.0 * fn * fD * fD + 4.0 * fn * fD * (double) Df;
  return 2.0 * (double) h * (double) F * fD + (double) layers * layer +
         2.0 * fD * (double) C;
}

/* Push `push` frames at a time (a multiple of the hop) for `budget`
 * seconds; windows per CPU second of this thread, or per wall-clock
 * second with `wall` (threads > 1). */
static double
whole_measure (SattnStream *s, const float *pool, size_t pool_frames,
               size_t *pos, size_t F, size_t push, size_t hop, float *out,
               size_t out_rows, double budget, int wall, int *fail)
{
  const clockid_t clk = wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
  double t0 = now_s (), c0 = clock_s (clk);
  uint64_t windows = 0;
  do {
    for (int rep = 0; rep < 16; rep++) {
      size_t got = 0;
      SattnStatus st = sattn_stream_push (s, pool + *pos * F, push, NULL, out,
                                          out_rows, NULL, &got);
      if (st != SATTN_OK || got != push / hop)
        *fail = 1;
      windows += got;
      *pos += push;
      if (*pos + push > pool_frames)
        *pos = 0;
    }
  } while (now_s () < t0 + budget);
  return (double) windows / (clock_s (clk) - c0);
}

/* --whole FILE --threads-scaling: the same model with threads=1 and
 * threads=2, wall clock (two threads need two CPUs: not pinned), pushes
 * of 10 ms and of 100 ms of signal, and the pipeline with 10 ms buffers;
 * interleaved repeats, ratios the medians of per-repeat ratios.  Before
 * timing, both thread counts take the same buffers from fresh streams and
 * their outputs are compared byte for byte. */
static int
run_whole_threads (const Opts *o, const char *path, size_t n, size_t h)
{
  SattnLoadOptions opt;
  SattnModel *m = NULL;
  char err[1024] = "";
  int fail = 0;

  sattn_load_options_init (&opt);
  if (sattn_model_load (path, "", &opt, &m, NULL, err, sizeof err) !=
      SATTN_OK) {
    fprintf (stderr, "%s: %s\n", path, err);
    return 1;
  }
  const SattnConfig *cfg = sattn_model_config (m);
  const size_t F = cfg->d_model, C = sattn_model_classes (m);
  const Workload w = {
    "whole", "whole model", F, 16000, 1, cfg->heads, n, h, 0
  };
  const size_t bf = wl_buffer_frames (&w), push[2] = { bf, 10 * bf };
  const size_t pool_frames = push[1] * (8 + (64 * n) / push[1]);
  const size_t out_rows = push[1] / h + 1;
  const int R = o->repeats;
  SattnStream *s[2][2] = { { NULL, NULL }, { NULL, NULL } };
  SattnStatus st = SATTN_OK;
  float *pool = malloc (pool_frames * F * sizeof (float));
  float *out[2] = { malloc (out_rows * C * sizeof (float)),
                    malloc (out_rows * C * sizeof (float)) };
  double *v = calloc ((size_t) (9 * R), sizeof (double));
  uint64_t compared = 0, differ = 0;
  if (C == 0) {
    fprintf (stderr, "%s: not a whole model with a head\n", path);
    fail = 1;
    goto done;
  }
  for (int t = 0; t < 2; t++)
    for (int p = 0; p < 2; p++) {
      SattnStreamConfig sc = {
        .window = n, .hop = h, .output = SATTN_OUTPUT_CLASSES, .threads = t + 1
      };
      s[t][p] = sattn_stream_new (m, &sc, &st);
      if (s[t][p] == NULL)
        fail = 1;
    }
  if (fail || !pool || !out[0] || !out[1] || !v) {
    fprintf (stderr, "whole model stream: %s\n",
             st != SATTN_OK ? sattn_status_string (st) : "out of memory");
    fail = 1;
    goto done;
  }
  Rng r = { 0x5eed };
  fill_normal (&r, pool, pool_frames * F, 1.0);
  /* Byte identity: every frame of the pool, in 10 ms and 100 ms pushes. */
  for (int p = 0; p < 2 && !fail; p++)
    for (size_t at = 0; at + push[p] <= pool_frames; at += push[p]) {
      size_t got[2] = { 0, 0 };
      for (int t = 0; t < 2; t++)
        if (sattn_stream_push (s[t][p], pool + at * F, push[p], NULL, out[t],
                               out_rows, NULL, &got[t]) != SATTN_OK)
          fail = 1;
      if (fail || got[0] != got[1]) {
        fprintf (stderr, "whole model threads: pushes disagree\n");
        fail = 1;
        break;
      }
      compared += got[0];
      if (memcmp (out[0], out[1], got[0] * C * sizeof (float)) != 0)
        differ += got[0];
    }
  if (fail)
    goto done;
  printf ("\nwhole model per window, threads=1 vs threads=2: %s (window "
          "%zu, hop %zu, output=classes); windows per wall-clock second, "
          "medians of %d interleaved repeats, %ld CPU(s) online\n",
          path, n, h, R, sysconf (_SC_NPROCESSORS_ONLN));
  printf ("outputs, threads=2 against threads=1 on the same pushes (%zu and "
          "%zu frames): %" PRIu64 " windows compared, %" PRIu64 " differ\n",
          push[0], push[1], compared, differ);
  fflush (stdout);
  size_t pos[2][2] = { { 0, 0 }, { 0, 0 } };
  for (int k = 0; k < R && !fail; k++) {
    for (int p = 0; p < 2; p++)
      for (int t = 0; t < 2; t++) {
        if (k == 0)
          whole_measure (s[t][p], pool, pool_frames, &pos[t][p], F, push[p], h,
                         out[t], out_rows, 0.2 * o->core_time, 1, &fail);
        v[(p * 2 + t) * R + k] = whole_measure (s[t][p], pool, pool_frames,
                                                &pos[t][p], F, push[p], h,
                                                out[t], out_rows,
                                                0.5 * o->core_time, 1, &fail);
      }
#ifdef SATTN_BENCH_HAVE_GST
    for (int t = 0; t < 2 && o->do_pipeline && !fail; t++) {
      char extra[4200];
      double secs = 0.0, cpu = 0.0;
      uint64_t frames_out = 0, warm = 4,
               nbuf = warm +
                      (uint64_t) fmax (20.0, v[t * R + k] * (double) h *
                                                 o->pipe_time / (double) bf);
      snprintf (extra, sizeof extra,
                "weights=\"%s\" output=classes contract=warn threads=%d", path,
                t + 1);
      if (run_pipeline (&w, pool, pool_frames, bf, warm, nbuf, 1, extra, &secs,
                        &cpu, &frames_out, err, sizeof err) == 0 &&
          frames_out > 0 && secs > 0.0) {
        v[(4 + t) * R + k] = (double) ((nbuf - warm) * (bf / h)) / secs;
      } else {
        fprintf (stderr, "whole model pipeline: %s\n",
                 err[0] ? err : "no output");
        fail = 1;
      }
    }
#endif
    /* per-repeat ratios: 10 ms, 100 ms, pipeline */
    v[6 * R + k] = v[1 * R + k] / v[0 * R + k];
    v[7 * R + k] = v[3 * R + k] / v[2 * R + k];
    v[8 * R + k] = v[4 * R + k] > 0.0 ? v[5 * R + k] / v[4 * R + k] : NAN;
  }
  if (fail)
    goto done;
  printf ("\n| pushes | t=1 windows/s | t=2 windows/s | t=2 / t=1 |\n"
          "|---|---:|---:|---:|\n");
  for (int p = 0; p < 2; p++) {
    double t1 = median (v + (p * 2) * R, (size_t) R);
    double t2 = median (v + (p * 2 + 1) * R, (size_t) R);
    printf ("| core, %zu frames (%zu windows) per push | %.0f | %.0f | "
            "%.2fx |\n",
            push[p], push[p] / h, t1, t2, median (v + (6 + p) * R, (size_t) R));
  }
  if (v[4 * R] > 0.0)
    printf ("| pipeline (appsrc ! sattn output=classes ! fakesink), %zu "
            "frames per buffer | %.0f | %.0f | %.2fx |\n",
            bf, median (v + 4 * R, (size_t) R), median (v + 5 * R, (size_t) R),
            median (v + 8 * R, (size_t) R));
  printf ("\n");
  fflush (stdout);
done:
  for (int t = 0; t < 2; t++)
    for (int p = 0; p < 2; p++)
      sattn_stream_free (s[t][p]);
  free (pool);
  free (out[0]);
  free (out[1]);
  free (v);
  sattn_model_free (m);
  return fail;
}

/* The two precisions --whole measures side by side, in each repeat. */
#define WHOLE_PRECS 2
static const char *const whole_prec[WHOLE_PRECS] = { "exact", "fast" };

/* What every measurement of --whole shares. */
typedef struct {
  const Opts *o;
  const char *path;
  const Workload *w;
  const float *pool;
  size_t pool_frames, bf, F, h;
  float *out;
  const char *shape; /* the model's JSON fields */
} WholeRun;

/* Repeat k of precision p (streams s: one hop per push, buffers per
 * push): v[0][k] core one hop per push, v[1][k] core buffers, v[2][k] the
 * pipeline (NaN without). */
static void
whole_repeat (const WholeRun *r, SattnStream *s[2], size_t pos[2], int p,
              double *v[3], int k, int *fail)
{
  const size_t F = r->F, h = r->h, bf = r->bf, rows = bf / h + 1;
  if (k == 0) {
    whole_measure (s[0], r->pool, r->pool_frames, &pos[0], F, h, h, r->out,
                   rows, 0.2 * r->o->core_time, 0, fail);
    whole_measure (s[1], r->pool, r->pool_frames, &pos[1], F, bf, h, r->out,
                   rows, 0.2 * r->o->core_time, 0, fail);
  }
  v[0][k] = whole_measure (s[0], r->pool, r->pool_frames, &pos[0], F, h, h,
                           r->out, rows, r->o->core_time, 0, fail);
  v[1][k] = whole_measure (s[1], r->pool, r->pool_frames, &pos[1], F, bf, h,
                           r->out, rows, r->o->core_time, 0, fail);
  v[2][k] = NAN;
#ifdef SATTN_BENCH_HAVE_GST
  if (r->o->do_pipeline && !*fail) {
    char extra[4200], err[1024] = "";
    double secs = 0.0, cpu = 0.0;
    uint64_t frames_out = 0;
    uint64_t warm = 4,
             nbuf = warm +
                    (uint64_t) fmax (20.0, v[1][k] * (double) h *
                                               r->o->pipe_time / (double) bf);
    snprintf (extra, sizeof extra,
              "weights=\"%s\" output=classes contract=warn precision=%s",
              r->path, whole_prec[p]);
    if (run_pipeline (r->w, r->pool, r->pool_frames, bf, warm, nbuf, 1, extra,
                      &secs, &cpu, &frames_out, err, sizeof err) == 0 &&
        frames_out > 0)
      v[2][k] = (double) ((nbuf - warm) * (bf / h)) / cpu;
    else {
      fprintf (stderr, "whole model pipeline (%s): %s\n", whole_prec[p],
               err[0] ? err : "no output");
      *fail = 1;
    }
  }
#else
  (void) p;
#endif
}

/* The table of --whole: medians of v[p][j] (p: precision, j: core one
 * hop, core buffers, pipeline) and of the peak; the JSON line. */
static void
whole_report (const WholeRun *r, double *v[WHOLE_PRECS][3], double *vpeak,
              double fpw, int isa, FILE *json)
{
  const int R = r->o->repeats;
  const char *isa_name = isa == 2 ? "AVX-512" : "AVX2";
  const double peak = median (vpeak, (size_t) R);
  double med[WHOLE_PRECS][3];
  for (int p = 0; p < WHOLE_PRECS; p++)
    for (int j = 0; j < 3; j++)
      med[p][j] = median (v[p][j], (size_t) R);
  printf ("| precision | | windows/s | GFLOP/s | %% of FMA peak (%s, %.1f "
          "GFLOP/s) |\n|---|---|---:|---:|---:|\n",
          isa_name, peak);
  for (int p = 0; p < WHOLE_PRECS; p++)
    for (int j = 0; j < 3; j++) {
      char what[96];
      const double wps = med[p][j];
      if (!isfinite (wps))
        continue;
      if (j == 0)
        snprintf (what, sizeof what,
                  "sattn core, one hop (%zu frames) per "
                  "push",
                  r->h);
      else
        snprintf (what, sizeof what, "sattn %s, %zu frames per %s",
                  j == 1 ? "core" : "pipeline", r->bf,
                  j == 1 ? "push" : "buffer");
      printf ("| %s | %s | %.0f | %.2f | %.1f%% |\n", whole_prec[p], what, wps,
              wps * fpw * 1e-9, 100.0 * wps * fpw * 1e-9 / peak);
    }
  printf ("fast / exact (medians): core one hop %.2fx, core buffers %.2fx",
          med[1][0] / med[0][0], med[1][1] / med[0][1]);
  if (isfinite (med[0][2]) && isfinite (med[1][2]))
    printf (", pipeline %.2fx", med[1][2] / med[0][2]);
  printf ("\n");
  if (json == NULL)
    return;
  fprintf (json, "{\"whole\": 1, \"weights\": ");
  json_string (json, r->path);
  fprintf (json,
           ", %s, \"window\": %zu, \"hop\": %zu, "
           "\"buffer_frames\": %zu, \"peak_isa\": \"%s\"",
           r->shape, r->w->window, r->h, r->bf, isa_name);
  json_num (json, "flops_per_window", fpw);
  json_num (json, "peak_gflops", peak);
  /* exact's keys as before; fast's with the prefix fast_ */
  static const char *const keys[3][2] = {
    { "core_wps", "core_peak_frac" },
    { "core_buffer_wps", "core_buffer_peak_frac" },
    { "pipeline_wps", "pipeline_peak_frac" },
  };
  for (int p = 0; p < WHOLE_PRECS; p++)
    for (int j = 0; j < 3; j++) {
      char key[64];
      snprintf (key, sizeof key, "%s%s", p ? "fast_" : "", keys[j][0]);
      json_num (json, key, med[p][j]);
      snprintf (key, sizeof key, "%s%s", p ? "fast_" : "", keys[j][1]);
      json_num (json, key, med[p][j] * fpw * 1e-9 / peak);
    }
  fprintf (json, "}\n");
}

static int
run_whole (const Opts *o, const char *path, size_t n, size_t h, FILE *json)
{
  SattnLoadOptions opt;
  SattnLoadReport rep = { sizeof rep, 0, 0, 0, 0, 0, 0, 0 };
  SattnModel *m = NULL;
  char err[1024] = "";
  int fail = 0;

  sattn_load_options_init (&opt);
  if (sattn_model_load (path, "", &opt, &m, &rep, err, sizeof err) !=
      SATTN_OK) {
    fprintf (stderr, "%s: %s\n", path, err);
    return 1;
  }
  if (rep.kind != SATTN_MODEL_WHOLE || rep.classes == 0) {
    fprintf (stderr, "%s: not a whole model with a head\n", path);
    sattn_model_free (m);
    return 1;
  }
  const SattnConfig *cfg = sattn_model_config (m);
  const size_t F = cfg->d_model, D = sattn_model_d_out (m);
  const size_t C = rep.classes, L = rep.layers;
  /* The pipeline's stream: F channels of one value per frame at the W1
   * rate; buffers of 10 ms (a whole number of hops). */
  const Workload w = {
    "whole", "whole model", F, 16000, 1, cfg->heads, n, h, 0
  };
  const size_t bf = wl_buffer_frames (&w);
  const size_t pool_frames = bf * ((64 * n + bf - 1) / bf);
  const double fpw = whole_flops_per_window (F, D, cfg->d_ff, n, h, L, C);
  SattnStream *s[WHOLE_PRECS][2] = { { NULL } };
  size_t pos[WHOLE_PRECS][2] = { { 0 } };
  SattnStatus st = SATTN_OK;
  for (int p = 0; p < WHOLE_PRECS; p++) {
    SattnStreamConfig sc = { .window = n,
                             .hop = h,
                             .output = SATTN_OUTPUT_CLASSES,
                             .threads = 1,
                             .precision = p ? SATTN_PRECISION_FAST
                                            : SATTN_PRECISION_EXACT };
    for (int i = 0; i < 2 && st == SATTN_OK; i++)
      s[p][i] = sattn_stream_new (m, &sc, &st);
  }
  float *pool = malloc (pool_frames * F * sizeof (float));
  float *out = malloc ((bf / h + 1) * C * sizeof (float));
  double *v[WHOLE_PRECS][3] = { { NULL } },
         *vpeak = calloc ((size_t) o->repeats, sizeof (double));
  int have = pool && out && vpeak && st == SATTN_OK;
  for (int p = 0; p < WHOLE_PRECS; p++)
    for (int j = 0; j < 3; j++)
      have &= (v[p][j] = calloc ((size_t) o->repeats, sizeof (double))) != NULL;
  if (!have) {
    fprintf (stderr, "whole model stream: %s\n",
             st != SATTN_OK ? sattn_status_string (st) : "out of memory");
    fail = 1;
    goto done;
  }
  Rng r = { 0x5eed };
  fill_normal (&r, pool, pool_frames * F, 1.0);
  const int isa = peak_isa_supported (2) ? 2 : 1;
  const uint64_t it = peak_calibrate (isa, o->quick ? 0.01 : 0.1);
  char shape[256];
  snprintf (shape, sizeof shape,
            "\"d_frame\": %zu, \"d_model\": %zu, \"heads\": %zu, "
            "\"d_ff\": %zu, \"layers\": %zu, \"classes\": %zu",
            F, D, cfg->heads, cfg->d_ff, L, C);
  const WholeRun run = { o, path, &w, pool, pool_frames, bf, F, h, out, shape };
  printf ("\nwhole model per window: %s\n(d_frame %zu, d_model %zu, %zu "
          "heads, d_ff %zu, %zu layers, %zu classes; window %zu, hop %zu, "
          "output=classes, threads=1); precision exact and fast side by "
          "side, windows per CPU second, medians of %d interleaved "
          "repeats; useful work %.0f FLOP per window\n",
          path, F, D, cfg->heads, cfg->d_ff, L, C, n, h, o->repeats, fpw);
  fflush (stdout);
  for (int k = 0; k < o->repeats && !fail; k++) {
    peak_measure (isa, 1, it);
    vpeak[k] = peak_cpu_last;
    /* the precisions' order alternates from repeat to repeat */
    for (int i = 0; i < WHOLE_PRECS && !fail; i++) {
      const int p = (i + k) % WHOLE_PRECS;
      whole_repeat (&run, s[p], pos[p], p, v[p], k, &fail);
    }
  }
  if (!fail)
    whole_report (&run, v, vpeak, fpw, isa, json);
done:
  for (int p = 0; p < WHOLE_PRECS; p++)
    for (int j = 0; j < 3; j++)
      free (v[p][j]);
  free (vpeak);
  free (pool);
  free (out);
  for (int p = 0; p < WHOLE_PRECS; p++)
    for (int i = 0; i < 2; i++)
      sattn_stream_free (s[p][i]);
  sattn_model_free (m);
  return fail;
}
#endif

static void
usage (FILE *f)
{
  fprintf (
      f,
      "usage: sattn-bench [options]\n"
      "  --quick         a few seconds in all (smoke run)\n"
      "  --time S        seconds of core streaming per configuration (1.5)\n"
      "  --repeats R     interleaved repeats, medians reported (5)\n"
      "  --only LIST     workloads to run, e.g. W1,W3\n"
      "  --weights W     identity or random only\n"
      "  --throughput-only  core and pipeline frames/s only (no latency,\n"
      "                  recomputation, sgemm, agreement check)\n"
      "  --no-pipeline   core only\n"
      "  --no-fork       run in this process (peak RSS is then cumulative)\n"
      "  --json FILE     one JSON object per configuration\n"
      "  --dump DIR      inputs, weights and first outputs for parity checks\n"
      "  --blas-info     print the OpenBLAS kernel set in use and exit\n"
      "  --precision P   exact (default) or fast: the streams' and the\n"
      "                  element's precision (SattnStreamConfig.precision)\n"
      "  --threads-scaling  only W1/W3 with threads=1 vs threads=2, side\n"
      "                  by side (core and pipeline, wall clock); with\n"
      "                  --whole FILE, that model with threads=1 and 2\n"
      "  --peak          only the FMA-peak table: useful GFLOP/s of every\n"
      "                  workload as a fraction of the measured FMA peak,\n"
      "                  threads=1 and 2, AVX-512 and AVX2 (SATTN_SIMD=1)\n"
      "  --encoder       only an encoder layer (feed-forward 4 d, RoPE) on\n"
      "                  the W1 geometry, core and pipeline; its weights\n"
      "                  file goes to --dump DIR (else $TMPDIR or /tmp)\n"
      "  --whole FILE    only a whole model per window (sattn.nn's\n"
      "                  SignalTransformer file, output=classes): windows/s\n"
      "                  in the core and the pipeline, and useful GFLOP/s\n"
      "                  against the FMA peak measured in the same repeats\n"
      "  --window N, --hop N  the whole model's window and hop (the\n"
      "                  file's input contract, else 16 and 8)\n"
      "  --fma-peak      print the one-thread FMA peak (GFLOP/s per CPU\n"
      "                  second) as one JSON line and exit\n");
}

/* --whole's window and hop where not given: the file's input contract
 * (window, hop), else 16 and 8 (no file, or a file the loader refuses:
 * run_whole reports its error). */
static void
whole_geometry (const char *path, long *n, long *h)
{
  SattnModel *m = NULL;
  SattnModelContract c;
  char err[256];
  long cn = 0, ch = 0;

  if (path != NULL && sattn_model_load (path, "", NULL, &m, NULL, err,
                                        sizeof err) == SATTN_OK) {
    sattn_model_contract (m, &c);
    cn = (long) c.window;
    ch = (long) c.hop;
    sattn_model_free (m);
  }
  if (*n == 0)
    *n = cn > 0 ? cn : 16;
  if (*h == 0)
    *h = ch > 0 && ch <= *n ? ch : (*n >= 16 ? 8 : *n);
}

int
main (int argc, char **argv)
{
  Opts o;
  memset (&o, 0, sizeof (o));
  o.core_time = 1.5;
  o.repeats = 5;
  o.pipe_repeats = 5;
  o.do_pipeline = 1;
  o.do_fork = 1;
  o.sgemm_size = 1024;
  o.weights_filter = -1;
  int have_time = 0, threads_scaling = 0, peak_table = 0, encoder = 0;
  const char *whole = NULL;
  int fma_peak = 0;
  long whole_n = 0, whole_h = 0; /* 0: the file's, else 16 and 8 */

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp (a, "--quick") == 0) {
      o.quick = 1;
    } else if (strcmp (a, "--time") == 0 && i + 1 < argc) {
      o.core_time = atof (argv[++i]);
      have_time = 1;
    } else if (strcmp (a, "--repeats") == 0 && i + 1 < argc) {
      o.repeats = atoi (argv[++i]);
    } else if (strcmp (a, "--only") == 0 && i + 1 < argc) {
      o.only = argv[++i];
    } else if (strcmp (a, "--no-pipeline") == 0) {
      o.do_pipeline = 0;
    } else if (strcmp (a, "--throughput-only") == 0) {
      o.throughput_only = 1;
    } else if (strcmp (a, "--weights") == 0 && i + 1 < argc) {
      const char *v = argv[++i];
      o.weights_filter = strcmp (v, "identity") == 0 ? 0
                         : strcmp (v, "random") == 0 ? 1
                                                     : -2;
      if (o.weights_filter == -2) {
        usage (stderr);
        return 2;
      }
    } else if (strcmp (a, "--no-fork") == 0) {
      o.do_fork = 0;
    } else if (strcmp (a, "--json") == 0 && i + 1 < argc) {
      o.json = argv[++i];
    } else if (strcmp (a, "--dump") == 0 && i + 1 < argc) {
      o.dump = argv[++i];
    } else if (strcmp (a, "--precision") == 0 && i + 1 < argc) {
      const char *p = argv[++i];
      if (strcmp (p, "fast") == 0)
        bench_precision = SATTN_PRECISION_FAST;
      else if (strcmp (p, "exact") == 0)
        bench_precision = SATTN_PRECISION_EXACT;
      else {
        fprintf (stderr, "--precision: exact or fast, not '%s'\n", p);
        return 2;
      }
    } else if (strcmp (a, "--threads-scaling") == 0) {
      threads_scaling = 1;
    } else if (strcmp (a, "--peak") == 0) {
      peak_table = 1;
    } else if (strcmp (a, "--encoder") == 0) {
      encoder = 1;
    } else if (strcmp (a, "--fma-peak") == 0) {
      fma_peak = 1;
    } else if (strcmp (a, "--whole") == 0 && i + 1 < argc) {
      whole = argv[++i];
    } else if (strcmp (a, "--window") == 0 && i + 1 < argc) {
      whole_n = atol (argv[++i]);
    } else if (strcmp (a, "--hop") == 0 && i + 1 < argc) {
      whole_h = atol (argv[++i]);
    } else if (strcmp (a, "--blas-info") == 0) {
      /* The OpenBLAS kernel set chosen for this CPU (run-bench.sh checks
       * it: OpenBLAS 0.3.21 falls back to "Prescott" on CPUs it does not
       * know, several times slower on AVX2/AVX-512 machines). */
      printf ("%s\n", openblas_get_corename ());
      return 0;
    } else if (strcmp (a, "--help") == 0 || strcmp (a, "-h") == 0) {
      usage (stdout);
      return 0;
    } else {
      usage (stderr);
      return 2;
    }
  }
  if (o.quick) {
    if (!have_time)
      o.core_time = 0.05;
    if (o.repeats == 5)
      o.repeats = 2;
    o.pipe_repeats = 1;
  }
  if (whole_n == 0 || whole_h == 0)
    whole_geometry (whole, &whole_n, &whole_h);
  if (o.repeats < 1 || !(o.core_time > 0.0) || whole_n < 1 || whole_h < 1 ||
      whole_h > whole_n) {
    usage (stderr);
    return 2;
  }
  if (o.throughput_only)
    o.pipe_repeats = o.repeats;
  o.recomp_time = 0.5 * o.core_time;
  o.pipe_time = o.core_time;

  FILE *json = NULL;
  if (o.json && (json = fopen (o.json, "w")) == NULL) {
    fprintf (stderr, "cannot write %s: %s\n", o.json, strerror (errno));
    return 2;
  }
  if (o.dump && mkdir (o.dump, 0755) != 0 && errno != EEXIST) {
    fprintf (stderr, "cannot create %s: %s\n", o.dump, strerror (errno));
    return 2;
  }

  if (peak_table)
    return run_peak_section (&o) ? 1 : 0;
  if (fma_peak) {
    /* The one-thread FMA peak alone, per CPU second (as the --peak table
     * measures it): one JSON line on stdout, for peers.py. */
    const int isa = peak_isa_supported (2) ? 2 : 1;
    if (!peak_isa_supported (isa)) {
      printf ("{\"peak_gflops\": null}\n");
      return 0;
    }
    uint64_t it = peak_calibrate (isa, o.quick ? 0.01 : 0.05);
    double v[3];
    for (int k = 0; k < 3; k++) {
      peak_measure (isa, 1, it);
      v[k] = peak_cpu_last;
    }
    printf ("{\"peak_gflops\": %.6g, \"peak_isa\": \"%s\"}\n", median (v, 3),
            isa == 2 ? "AVX-512" : "AVX2");
    return 0;
  }
  if (encoder) {
#ifdef SATTN_BENCH_HAVE_WEIGHTS
#ifdef SATTN_BENCH_HAVE_GST
    if (o.do_pipeline)
      gst_init (NULL, NULL);
#endif
    int rc = run_encoder (&o, json);
    if (json)
      fclose (json);
    return rc;
#else
    fprintf (stderr, "--encoder needs the weights layer (GLib, json-glib)\n");
    return 2;
#endif
  }
  if (whole) {
#ifdef SATTN_BENCH_HAVE_WEIGHTS
#ifdef SATTN_BENCH_HAVE_GST
    if (o.do_pipeline)
      gst_init (NULL, NULL);
#endif
    int rc = threads_scaling ? run_whole_threads (&o, whole, (size_t) whole_n,
                                                  (size_t) whole_h)
                             : run_whole (&o, whole, (size_t) whole_n,
                                          (size_t) whole_h, json);
    if (json)
      fclose (json);
    return rc;
#else
    fprintf (stderr, "--whole needs the weights layer (GLib, json-glib)\n");
    return 2;
#endif
  }
  if (threads_scaling) {
    printf ("sattn-bench --threads-scaling: threads=1 vs threads=2, "
            "output=frames, one hop per push; medians of %d interleaved "
            "repeats, %.2g s per side per repeat; %ld CPU(s) online\n",
            o.repeats, o.core_time, sysconf (_SC_NPROCESSORS_ONLN));
    return run_threads_section (&o) ? 1 : 0;
  }
  printf ("sattn-bench: single thread (threads=1), output=frames, "
          "start=pad; medians of %d interleaved repeats, %.2g s of core "
          "streaming per configuration\n",
          o.repeats, o.core_time);
  printf ("OpenBLAS: %s\n", openblas_get_config ());
  if (strcmp (openblas_get_corename (), "Prescott") == 0 &&
      __builtin_cpu_supports ("avx2"))
    printf ("note: OpenBLAS uses its generic Prescott kernels on this AVX2 "
            "CPU; OPENBLAS_CORETYPE=%s selects the right ones (run-bench.sh "
            "does)\n",
            __builtin_cpu_supports ("avx512f") ? "SkylakeX" : "Haswell");
  if (BENCH_COUNT_ALLOCS && !alloc_count_works ()) {
    fprintf (stderr, "allocation counting does not see libc's allocations\n");
    return 1;
  }
  printf ("allocation counting: %s\n",
          BENCH_COUNT_ALLOCS
              ? "on (malloc/calloc/realloc/memalign interposed, self-checked)"
              : "off (sanitizer build)");
  fflush (stdout);

  Result res[N_WORKLOADS][2];
  int ran[N_WORKLOADS][2];
  int failures = 0;
  memset (ran, 0, sizeof ran);
  for (size_t i = 0; i < N_WORKLOADS; i++) {
    const Workload *w = &workloads[i];
    if (o.only && strstr (o.only, w->name) == NULL)
      continue;
    for (int rw = 0; rw < 2; rw++) {
      if (o.weights_filter >= 0 && rw != o.weights_filter)
        continue;
      double t0 = now_s ();
      run_isolated (w, rw, &o, &res[i][rw]);
      ran[i][rw] = 1;
      Result *r = &res[i][rw];
      printf ("  %s %-8s %.1f s%s%s\n", w->name, rw ? "random" : "identity",
              now_s () - t0, r->failed ? "  FAILED: " : "",
              r->failed ? r->message : "");
      fflush (stdout);
      if (r->failed)
        failures++;
      if (json)
        write_json (json, w, rw, r);
    }
  }
  if (json)
    fclose (json);

  printf ("\nCore (libsattn), one hop per sattn_stream_push:\n\n");
  printf ("| workload | weights | frames/s | frames/s wall | x real time | "
          "GFLOP/s | hop µs | p50 µs | p99 µs | p99 CPU µs | p99 CPU / hop | "
          "peak RSS MiB | allocs/push | vs recompute | vs sgemm |\n");
  printf ("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|\n");
  double sg[2 * N_WORKLOADS];
  size_t nsg = 0;
  for (size_t i = 0; i < N_WORKLOADS; i++)
    for (int rw = 0; rw < 2; rw++) {
      if (!ran[i][rw])
        continue;
      const Workload *w = &workloads[i];
      const Result *r = &res[i][rw];
      double hop_us = 1e6 * (double) w->hop / wl_frame_rate (w);
      char allocs[32];
      if (BENCH_COUNT_ALLOCS && r->pushes)
        snprintf (allocs, sizeof allocs, "%.3g",
                  (double) r->allocs / (double) r->pushes);
      else
        snprintf (allocs, sizeof allocs, "n/a");
      printf ("| %s | %s | %.4g | %.4g | %.1f | %.2f | %.0f | %.1f | %.1f | "
              "%.1f | %.1f%% | %.1f | %s | %.1fx | %.1f%% |\n",
              w->name, rw ? "random" : "identity", r->core_fps,
              r->core_fps_wall, r->core_fps / wl_frame_rate (w), r->gflops,
              hop_us, r->p50_us, r->p99_us, r->cpu_p99_us,
              100.0 * r->cpu_p99_us / hop_us, r->peak_rss_mib, allocs,
              r->recomp_ratio, 100.0 * r->sgemm_ratio);
      if (isfinite (r->sgemm_gflops) && r->sgemm_gflops > 0)
        sg[nsg++] = r->sgemm_gflops;
    }
  printf ("\nsingle-thread cblas_sgemm %d^3: %.1f GFLOP/s (median over all "
          "configurations' medians); \"vs sgemm\" = achieved useful GFLOP/s "
          "/ sgemm GFLOP/s measured in the same repeat\n",
          o.sgemm_size, median (sg, nsg));
  printf ("frames/s = frames per second of CPU time of the computing "
          "thread (what the code does when it runs; immune to preemption "
          "on a shared machine), \"wall\" = per wall-clock second; x real "
          "time, GFLOP/s and the ratios use CPU time on both sides\n");
  printf ("p50/p99 = wall-clock time of one sattn_stream_push of one hop "
          "(includes preemption by other processes on a shared machine); "
          "p99 CPU = the same in thread CPU time (the compute itself)\n");
  printf ("\"vs recompute\" = frames/s of streaming / frames/s of "
          "sattn_attend on every window (re-projects all n frames), "
          "measured back to back\n");

  for (size_t i = 0; i < N_WORKLOADS; i++)
    for (int rw = 0; rw < 2; rw++)
      if (ran[i][rw] && isfinite (res[i][rw].stats_cost))
        printf ("%s %s: core with collect_stats (the numeric-health "
                "statistics behind post-messages): %+.1f%% CPU time\n",
                workloads[i].name, rw ? "random" : "identity",
                100.0 * res[i][rw].stats_cost);

  uint64_t tot_allocs = 0, tot_pushes = 0;
  for (size_t i = 0; i < N_WORKLOADS; i++)
    for (int rw = 0; rw < 2; rw++)
      if (ran[i][rw]) {
        tot_allocs += res[i][rw].allocs;
        tot_pushes += res[i][rw].pushes;
      }
  if (BENCH_COUNT_ALLOCS)
    printf ("allocations per push: %.3g (%" PRIu64
            " heap allocations in %" PRIu64
            " measured pushes, all workloads)\n",
            tot_pushes ? (double) tot_allocs / (double) tot_pushes : 0.0,
            tot_allocs, tot_pushes);
  else
    printf ("allocations per push: n/a (not counted in a sanitizer build)\n");

  if (o.do_pipeline) {
    printf ("\nPipeline: appsrc ! sattn ! fakesink (buffers of ~10 ms, "
            "sync=false), vs the core pushing the same buffers:\n\n");
    printf ("| workload | weights | frames/buffer | pipeline frames/s | "
            "frames/s wall | x real time | core frames/s (same buffers) | "
            "overhead | overhead wall | of which appsrc+fakesink |\n");
    printf ("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < N_WORKLOADS; i++)
      for (int rw = 0; rw < 2; rw++) {
        if (!ran[i][rw])
          continue;
        const Workload *w = &workloads[i];
        const Result *r = &res[i][rw];
        if (r->pipe_state != PIPE_OK) {
          printf ("| %s | %s | %zu | %s | | | | | | |\n", w->name,
                  rw ? "random" : "identity", r->buffer_frames,
                  pipe_state_text (r->pipe_state));
          continue;
        }
        printf ("| %s | %s | %zu | %.4g | %.4g | %.1f | %.4g | %+.1f%% | "
                "%+.1f%% | %.1f%% |\n",
                w->name, rw ? "random" : "identity", r->buffer_frames,
                r->pipe_fps, r->pipe_fps_wall, r->pipe_fps / wl_frame_rate (w),
                r->chunk_fps, 100.0 * (r->cpu_overhead - 1.0),
                100.0 * (r->overhead - 1.0),
                100.0 * (r->cpu_overhead - r->cpu_elem_overhead));
      }
    printf ("\noverhead = pipeline time / core time for the same frames in "
            "the same buffers, minus 1 (medians of interleaved repeats), in "
            "CPU time of the streaming thread resp. of the core's thread "
            "(\"wall\": in wall-clock time); the part of it that appsrc ! "
            "fakesink cost alone (no sattn) is shown last.\n");
    for (size_t i = 0; i < N_WORKLOADS; i++)
      if (ran[i][0] && res[i][0].msg_state == PIPE_OK)
        printf ("\n%s identity through the pipeline with post-messages=true: "
                "message-interval=0 (a message per window) %.4g frames/s, "
                "%+.1f%% CPU time vs without messages; message-interval=100 ms "
                "%.4g frames/s, %+.1f%%\n",
                workloads[i].name, res[i][0].msg_fps,
                100.0 * res[i][0].msg_cost, res[i][0].msg100_fps,
                100.0 * res[i][0].msg100_cost);
  }

  /* The performance targets that this program can judge on its own. */
  printf ("\n");
  for (size_t i = 0; i < N_WORKLOADS; i++) {
    const Workload *w = &workloads[i];
    if (strcmp (w->name, "W1") != 0)
      continue;
    for (int rw = 0; rw < 2; rw++) {
      if (!ran[i][rw])
        continue;
      const Result *r = &res[i][rw];
      const char *wt = rw ? "random" : "identity";
      double hop_us = 1e6 * (double) w->hop / wl_frame_rate (w);
      printf ("target W1 %s: %.1fx the per-window recomputation (>= 10x: "
              "%s)\n",
              wt, r->recomp_ratio, r->recomp_ratio >= 10.0 ? "met" : "NOT met");
      printf ("target W1 %s: p99 per-hop compute %.1f µs CPU = %.1f%% of "
              "the %.0f µs hop (<= 10%%: %s); wall clock p99 %.1f µs = "
              "%.1f%% (%s)\n",
              wt, r->cpu_p99_us, 100.0 * r->cpu_p99_us / hop_us, hop_us,
              r->cpu_p99_us <= 0.1 * hop_us ? "met" : "NOT met", r->p99_us,
              100.0 * r->p99_us / hop_us,
              r->p99_us <= 0.1 * hop_us ? "met" : "NOT met");
      if (r->pipe_state == PIPE_OK) {
        double fr = wl_frame_rate (w);
        printf ("target W1 %s: %.1fx real time through the pipeline (>= 10x: "
                "%s); %.1fx per wall-clock second (%s)\n",
                wt, r->pipe_fps / fr,
                r->pipe_fps >= 10.0 * fr ? "met" : "NOT met",
                r->pipe_fps_wall / fr,
                r->pipe_fps_wall >= 10.0 * fr ? "met" : "NOT met");
        printf ("target W1 %s: element overhead %+.1f%% over the core "
                "(<= 10%%: %s; %+.1f%% without the appsrc and fakesink "
                "cost); %+.1f%% in wall-clock time (%s)\n",
                wt, 100.0 * (r->cpu_overhead - 1.0),
                r->cpu_overhead <= 1.10 ? "met" : "NOT met",
                100.0 * (r->cpu_elem_overhead - 1.0),
                100.0 * (r->overhead - 1.0),
                r->overhead <= 1.10 ? "met" : "NOT met");
      } else {
        printf ("target W1 %s: pipeline targets not measured (%s)\n", wt,
                pipe_state_text (r->pipe_state));
      }
    }
  }
  if (BENCH_COUNT_ALLOCS)
    printf ("target: zero heap allocations per push in steady state: %s\n",
            tot_allocs == 0 ? "met" : "NOT met");

  printf ("\nworkloads: ");
  for (size_t i = 0; i < N_WORKLOADS; i++) {
    const Workload *w = &workloads[i];
    printf ("%s%s %s: %zu ch @ %zu Hz, frame-size %zu (d_model %zu), "
            "heads %zu, window %zu, hop %zu%s",
            i ? "; " : "", w->name, w->what, w->channels, w->rate,
            w->frame_size, wl_d_model (w), w->heads, w->window, w->hop,
            w->causal ? ", causal" : "");
  }
  printf ("\nagreement of streaming rows with sattn_attend (max-abs): ");
  for (size_t i = 0; i < N_WORKLOADS; i++)
    for (int rw = 0; rw < 2; rw++)
      if (ran[i][rw])
        printf ("%s/%s %.2g  ", workloads[i].name, rw ? "random" : "identity",
                res[i][rw].check_maxabs);
  printf ("\n%d configuration(s) failed\n", failures);
  return failures ? 1 : 0;
}
