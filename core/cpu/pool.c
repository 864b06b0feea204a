/* SattnPool: the worker threads of one stream.
 *
 * sattn_pool_run (p, n, fn, ctx) runs fn (ctx, task, worker) for every
 * task in [0, n) on the calling thread and the pool's workers, and returns
 * when all of them are done.  Which thread runs which task is not fixed;
 * callers make every task write its own disjoint output (and per-task or
 * per-worker scratch), so results never depend on it.
 *
 * Affinity: the tasks are cut into one contiguous range per thread
 * (thread t's range is [t n / T, (t + 1) n / T)); each thread runs its own
 * range first, then takes what is left of the others' (a late or
 * descheduled thread's work is not lost, only moved).  Callers number
 * tasks so that a range keeps the same data from run to run (the heads of
 * a window), so each thread finds its heads' key/value rings in its own
 * cache hop after hop.
 *
 * Claiming: each range has a word (generation << 32 | next task) on a
 * cache line of its own.  A run publishes its job (fn, ctx, n) in the slot
 * of its generation's parity, resets every range word to (gen, start)
 * and every done counter to 0, then stores gen in the generation word.
 * A thread claims task i of a range by a compare-and-swap (gen, i) ->
 * (gen, i + 1); the swap only
 * succeeds while the generation is current, so a thread that read a stale
 * job slot can never run a task with it (the slot of gen + 2 is written
 * only after every task of gen + 1 was done).  Each thread counts the
 * tasks it finished in a counter on its own range's line, so finishing a
 * task moves no line between threads; the caller waits for the sum of
 * the counters only, never for a worker that is still asleep: such a
 * worker finds nothing to claim.
 *
 * Two phases (sattn_pool_run2): each range word and counter exists once
 * per phase; a thread claims tasks of phase 1 only after it has seen every
 * task of phase 0 done (the counters, acquired), so phase 1 reads what
 * phase 0 wrote.  A worker waits for that at most SPIN_NS and then leaves
 * phase 1 to the caller, which always runs both phases to the end: no
 * thread ever waits for a task that nobody has claimed.
 *
 * Idle workers spin for a short bounded time, then sleep on a condition
 * variable; the caller broadcasts only when a worker sleeps.  The words
 * written by different threads (generation, range words and counters)
 * sit on separate cache lines.  Nothing is allocated by sattn_pool_run.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include "cpu/cpu.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause ()
#else
#define cpu_relax() ((void) 0)
#endif

/* At most 50 us of polling before an idle worker sleeps: long enough to
 * span the gaps between the phases of one window, short enough not to
 * burn a CPU between pushes of a live stream. */
#define SPIN_NS 50000
/* Workers need little stack: the hot loops use a few KiB. */
#define WORKER_STACK (256 * 1024)

#define LINE 64

/* A run's two phases (see sattn_pool_run2): phase 1 only once every task
 * of phase 0 is done. */
typedef struct {
  SattnTaskFn fn[2]; /* accessed with __atomic: see the header comment */
  void *ctx[2];
  size_t n[2];
} Job;

typedef struct {
  SattnPool *p;
  unsigned id;
} Worker;

/* One thread's range of tasks of each phase: gen << 32 | next task
 * (atomic), and the tasks of that phase the thread finished in this run,
 * whichever range they came from (atomic). */
typedef struct {
  _Alignas(LINE) uint64_t word[2];
  size_t done[2];
} Range;

struct SattnPool {
  /* Read by every thread, written by the caller once per run. */
  unsigned n_threads; /* caller included */
  unsigned n_started; /* workers created */
  pthread_t *tid;
  Worker *wk;
  Range *range; /* n_threads */
  /* The line a waiting worker polls: the generation and the jobs it
   * needs next come with one miss. */
  _Alignas(LINE) uint32_t gen; /* current generation (atomic) */
  Job job[2];
  _Alignas(LINE) int stop; /* atomic */
  int sleeping;            /* atomic: workers in cond_wait */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

unsigned
sattn_available_cpus (void)
{
  long n = 0;
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity (0, sizeof (set), &set) == 0)
    n = CPU_COUNT (&set);
#endif
  if (n <= 0)
    n = sysconf (_SC_NPROCESSORS_ONLN);
  if (n <= 0)
    n = 1;
  if (n > SATTN_MAX_THREADS)
    n = SATTN_MAX_THREADS;
  return (unsigned) n;
}

unsigned
sattn_resolve_threads (int threads)
{
  if (threads <= 0)
    return sattn_available_cpus ();
  return threads > SATTN_MAX_THREADS ? SATTN_MAX_THREADS : (unsigned) threads;
}

size_t
sattn_pool_bytes (unsigned n_threads)
{
  if (n_threads <= 1)
    return 0;
  size_t w = n_threads - 1;
  return sizeof (SattnPool) + n_threads * sizeof (Range) +
         w * (sizeof (pthread_t) + sizeof (Worker) + WORKER_STACK);
}

/* First task of thread t's range (t = n_threads: n). */
static inline size_t
range_start (const SattnPool *p, unsigned t, size_t n)
{
  return (size_t) ((uint64_t) t * n / p->n_threads);
}

/* Claim and run tasks of phase ph of generation gen until none is left:
 * the thread's own range first, then the others' in turn.  Returns 0 when
 * a later run has started. */
static int
run_phase (SattnPool *p, uint32_t gen, unsigned id, int ph)
{
  const Job *j = &p->job[gen & 1];
  const unsigned T = p->n_threads;
  for (unsigned k = 0; k < T; k++) {
    unsigned r = id + k < T ? id + k : id + k - T;
    uint64_t *w = &p->range[r].word[ph];
    uint64_t st = __atomic_load_n (w, __ATOMIC_ACQUIRE);
    for (;;) {
      if ((uint32_t) (st >> 32) != gen)
        return 0; /* a later run has started: nothing is ours */
      size_t n = __atomic_load_n (&j->n[ph], __ATOMIC_RELAXED);
      size_t i = (size_t) (uint32_t) st;
      if (i >= range_start (p, r + 1, n))
        break;
      SattnTaskFn fn = __atomic_load_n (&j->fn[ph], __ATOMIC_RELAXED);
      void *ctx = __atomic_load_n (&j->ctx[ph], __ATOMIC_RELAXED);
      if (__atomic_compare_exchange_n (w, &st, st + 1, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE)) {
        /* The swap succeeded: gen was current and task i unclaimed, so
         * fn, ctx and n were gen's (see the header comment). */
        fn (ctx, i, id);
        /* Only this thread writes its counter: a plain add, released. */
        size_t *dn = &p->range[id].done[ph];
        __atomic_store_n (dn, __atomic_load_n (dn, __ATOMIC_RELAXED) + 1,
                          __ATOMIC_RELEASE);
        st = __atomic_load_n (w, __ATOMIC_ACQUIRE);
      }
      /* On failure st holds the current value: retry with it. */
    }
  }
  return 1;
}

static int64_t
mono_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Tasks of phase ph finished in the current run. */
static size_t
pool_done (SattnPool *p, int ph)
{
  size_t d = 0;
  for (unsigned t = 0; t < p->n_threads; t++)
    d += __atomic_load_n (&p->range[t].done[ph], __ATOMIC_ACQUIRE);
  return d;
}

/* A worker's part of run gen: phase 0, then, once every task of phase 0
 * is done (the counters, acquired: their writes are visible), phase 1.
 * It waits for phase 0 at most SPIN_NS: the caller runs whatever is left
 * (a stale wait is harmless too: the claims of phase 1 check gen). */
static void
run_tasks (SattnPool *p, uint32_t gen, unsigned id)
{
  const Job *j = &p->job[gen & 1];
  if (!run_phase (p, gen, id, 0) ||
      __atomic_load_n (&j->n[1], __ATOMIC_RELAXED) == 0)
    return;
  const size_t n0 = __atomic_load_n (&j->n[0], __ATOMIC_RELAXED);
  int64_t t_end = 0;
  for (unsigned k = 1; pool_done (p, 0) < n0; k++) {
    if (k % 64 == 0) {
      if (__atomic_load_n (&p->gen, __ATOMIC_ACQUIRE) != gen)
        return;
      if (t_end == 0)
        t_end = mono_ns () + SPIN_NS;
      else if (mono_ns () > t_end)
        return;
    }
    cpu_relax ();
  }
  run_phase (p, gen, id, 1);
}

static void *
worker_main (void *arg)
{
  Worker *w = arg;
  SattnPool *p = w->p;
  uint32_t seen = 0;

  for (;;) {
    uint32_t gen = seen;
    int64_t t_end = mono_ns () + SPIN_NS;
    for (unsigned k = 1;; k++) {
      gen = __atomic_load_n (&p->gen, __ATOMIC_ACQUIRE);
      if (gen != seen)
        break;
      if (k % 64 == 0) {
        if (__atomic_load_n (&p->stop, __ATOMIC_ACQUIRE))
          return NULL;
        if (mono_ns () > t_end)
          break;
      }
      cpu_relax ();
    }
    if (gen == seen) {
      pthread_mutex_lock (&p->mu);
      __atomic_fetch_add (&p->sleeping, 1, __ATOMIC_SEQ_CST);
      while (!__atomic_load_n (&p->stop, __ATOMIC_SEQ_CST) &&
             (gen = __atomic_load_n (&p->gen, __ATOMIC_SEQ_CST)) == seen)
        pthread_cond_wait (&p->cv, &p->mu);
      __atomic_fetch_sub (&p->sleeping, 1, __ATOMIC_SEQ_CST);
      pthread_mutex_unlock (&p->mu);
      if (__atomic_load_n (&p->stop, __ATOMIC_ACQUIRE))
        return NULL;
    }
    seen = gen;
    run_tasks (p, gen, w->id);
  }
}

void
sattn_pool_free (SattnPool *p)
{
  if (p == NULL)
    return;
  pthread_mutex_lock (&p->mu);
  __atomic_store_n (&p->stop, 1, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast (&p->cv);
  pthread_mutex_unlock (&p->mu);
  for (unsigned i = 0; i < p->n_started; i++)
    pthread_join (p->tid[i], NULL);
  pthread_cond_destroy (&p->cv);
  pthread_mutex_destroy (&p->mu);
  free (p->tid);
  free (p->wk);
  free (p->range);
  free (p);
}

SattnPool *
sattn_pool_new (unsigned n_threads)
{
  if (n_threads <= 1)
    return NULL;
  SattnPool *p = aligned_alloc (LINE, sizeof (*p));
  if (p == NULL)
    return NULL;
  memset (p, 0, sizeof (*p));
  p->n_threads = n_threads;
  p->tid = calloc (n_threads - 1, sizeof (pthread_t));
  p->wk = calloc (n_threads - 1, sizeof (Worker));
  p->range = aligned_alloc (LINE, n_threads * sizeof (Range));
  if (p->tid == NULL || p->wk == NULL || p->range == NULL) {
    free (p->tid);
    free (p->wk);
    free (p->range);
    free (p);
    return NULL;
  }
  memset (p->range, 0, n_threads * sizeof (Range));
  if (pthread_mutex_init (&p->mu, NULL) != 0) {
    free (p->tid);
    free (p->wk);
    free (p->range);
    free (p);
    return NULL;
  }
  if (pthread_cond_init (&p->cv, NULL) != 0) {
    pthread_mutex_destroy (&p->mu);
    free (p->tid);
    free (p->wk);
    free (p->range);
    free (p);
    return NULL;
  }
  pthread_attr_t attr;
  int have_attr = pthread_attr_init (&attr) == 0;
  if (have_attr)
    pthread_attr_setstacksize (&attr, WORKER_STACK);
  for (unsigned i = 0; i + 1 < n_threads; i++) {
    p->wk[i].p = p;
    p->wk[i].id = i + 1;
    if (pthread_create (&p->tid[i], have_attr ? &attr : NULL, worker_main,
                        &p->wk[i]) != 0)
      break;
    p->n_started++;
  }
  if (have_attr)
    pthread_attr_destroy (&attr);
  if (p->n_started + 1 != n_threads) {
    sattn_pool_free (p);
    return NULL;
  }
  return p;
}

unsigned
sattn_pool_threads (const SattnPool *p)
{
  return p ? p->n_threads : 1;
}

/* The caller waits for the tasks of phase ph that workers claimed:
 * spinning for about a task's length, then yielding (on a busy machine
 * the worker may wait for a CPU, perhaps this one). */
static void
wait_phase (SattnPool *p, int ph, size_t n)
{
  int64_t t_end = 0;
  for (unsigned k = 1; pool_done (p, ph) < n; k++) {
    if (t_end == 0 || k % 64 != 0) {
      if (t_end == 0)
        t_end = mono_ns () + SPIN_NS;
      cpu_relax ();
    } else if (mono_ns () > t_end) {
      sched_yield ();
    }
  }
}

void
sattn_pool_run2 (SattnPool *p, size_t n, SattnTaskFn fn, void *ctx, size_t n2,
                 SattnTaskFn fn2, void *ctx2)
{
  if (n == 0 && n2 == 0)
    return;
  if (p == NULL || n + n2 == 1 || n > UINT32_MAX || n2 > UINT32_MAX) {
    for (size_t i = 0; i < n; i++)
      fn (ctx, i, 0);
    for (size_t i = 0; i < n2; i++)
      fn2 (ctx2, i, 0);
    return;
  }
  uint32_t gen = __atomic_load_n (&p->gen, __ATOMIC_RELAXED) + 1;
  Job *j = &p->job[gen & 1];
  __atomic_store_n (&j->fn[0], fn, __ATOMIC_RELAXED);
  __atomic_store_n (&j->ctx[0], ctx, __ATOMIC_RELAXED);
  __atomic_store_n (&j->n[0], n, __ATOMIC_RELAXED);
  __atomic_store_n (&j->fn[1], fn2, __ATOMIC_RELAXED);
  __atomic_store_n (&j->ctx[1], ctx2, __ATOMIC_RELAXED);
  __atomic_store_n (&j->n[1], n2, __ATOMIC_RELAXED);
  for (unsigned t = 0; t < p->n_threads; t++)
    for (int ph = 0; ph < 2; ph++) {
      __atomic_store_n (&p->range[t].done[ph], 0, __ATOMIC_RELAXED);
      __atomic_store_n (&p->range[t].word[ph],
                        (uint64_t) gen << 32 | range_start (p, t, ph ? n2 : n),
                        __ATOMIC_RELEASE);
    }
  __atomic_store_n (&p->gen, gen, __ATOMIC_SEQ_CST);
  if (__atomic_load_n (&p->sleeping, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock (&p->mu);
    pthread_cond_broadcast (&p->cv);
    pthread_mutex_unlock (&p->mu);
  }
  run_phase (p, gen, 0, 0);
  wait_phase (p, 0, n);
  if (n2 > 0) {
    run_phase (p, gen, 0, 1);
    wait_phase (p, 1, n2);
  }
}

void
sattn_pool_run (SattnPool *p, size_t n, SattnTaskFn fn, void *ctx)
{
  sattn_pool_run2 (p, n, fn, ctx, 0, NULL, NULL);
}
