/* GLib's locks, made visible to ThreadSanitizer.
 *
 * On Linux GLib implements GMutex, GRecMutex, GRWLock and GCond directly
 * on futexes, not on pthreads, so ThreadSanitizer (which intercepts the
 * pthread functions) sees no happens-before edge across them and reports
 * every access that GStreamer's object locks, stream locks and data
 * queues order correctly.  Linked into the test programs of a
 * -Db_sanitize=thread build only, this file interposes the GLib lock
 * entry points that GStreamer and our plugin call through the PLT (GLib's
 * calls to itself are bound inside the library and stay invisible): each
 * wrapper calls the real function, found with dlsym (RTLD_NEXT), and
 * tells ThreadSanitizer what it means (an unlock releases the lock's
 * address, a lock acquires it; a condition wait does both).  Nothing
 * changes how the locks work, and no report is hidden: an access that no
 * lock orders is still a race.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>

void __tsan_acquire (void *addr);
void __tsan_release (void *addr);

static void *
real_fn (const char *name)
{
  void *f = dlsym (RTLD_NEXT, name);

  if (f == NULL) {
    fprintf (stderr, "glib-tsan: %s not found: %s\n", name, dlerror ());
    abort ();
  }
  return f;
}

/* REAL (type, name): the real GLib function, looked up once (atomically:
 * any thread may get there first). */
#define REAL(type, name) \
  static void *real_p = NULL; \
  type real; \
  void *real_f = __atomic_load_n (&real_p, __ATOMIC_ACQUIRE); \
  if (real_f == NULL) { \
    real_f = real_fn (name); \
    __atomic_store_n (&real_p, real_f, __ATOMIC_RELEASE); \
  } \
  real = (type) real_f

typedef void (*LockFn) (gpointer);
typedef gboolean (*TryFn) (gpointer);

#define WRAP_LOCK(name, T) \
  void name (T *m); \
  void name (T *m) \
  { \
    REAL (LockFn, #name); \
    real (m); \
    __tsan_acquire (m); \
  }

#define WRAP_UNLOCK(name, T) \
  void name (T *m); \
  void name (T *m) \
  { \
    REAL (LockFn, #name); \
    __tsan_release (m); \
    real (m); \
  }

#define WRAP_TRYLOCK(name, T) \
  gboolean name (T *m); \
  gboolean name (T *m) \
  { \
    gboolean ok; \
    REAL (TryFn, #name); \
    ok = real (m); \
    if (ok) \
      __tsan_acquire (m); \
    return ok; \
  }

/* The declarations repeat GLib's prototypes; the macros define them. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wredundant-decls"

WRAP_LOCK (g_mutex_lock, GMutex)
    WRAP_UNLOCK (g_mutex_unlock, GMutex)
    WRAP_TRYLOCK (g_mutex_trylock, GMutex)
    WRAP_LOCK (g_rec_mutex_lock, GRecMutex)
    WRAP_UNLOCK (g_rec_mutex_unlock, GRecMutex)
    WRAP_TRYLOCK (g_rec_mutex_trylock, GRecMutex)
    WRAP_LOCK (g_rw_lock_writer_lock, GRWLock)
    WRAP_UNLOCK (g_rw_lock_writer_unlock, GRWLock)
    WRAP_TRYLOCK (g_rw_lock_writer_trylock, GRWLock)
    WRAP_LOCK (g_rw_lock_reader_lock, GRWLock)
    WRAP_UNLOCK (g_rw_lock_reader_unlock, GRWLock)
    WRAP_TRYLOCK (g_rw_lock_reader_trylock, GRWLock)
#pragma GCC diagnostic pop
     typedef void (*WaitFn) (GCond *, GMutex *);
     typedef gboolean (*WaitUntilFn) (GCond *, GMutex *, gint64);

/* A wait unlocks the mutex and locks it again before it returns. */
     void g_cond_wait (GCond * cond, GMutex * mutex)
{
  REAL (WaitFn, "g_cond_wait");
  __tsan_release (mutex);
  real (cond, mutex);
  __tsan_acquire (mutex);
}

gboolean
g_cond_wait_until (GCond * cond, GMutex * mutex, gint64 end_time)
{
  gboolean res;

  REAL (WaitUntilFn, "g_cond_wait_until");
  __tsan_release (mutex);
  res = real (cond, mutex, end_time);
  __tsan_acquire (mutex);
  return res;
}

typedef void (*OnceLeaveFn) (volatile void *, gsize);

/* g_once_init_enter () is a macro that reads the location atomically
 * (an acquire ThreadSanitizer sees); the store that publishes it is inside
 * GLib. */
#undef g_once_init_leave
void g_once_init_leave (volatile void *location, gsize result);
void
g_once_init_leave (volatile void *location, gsize result)
{
  REAL (OnceLeaveFn, "g_once_init_leave");
  __tsan_release ((void *) location);
  real (location, result);
}

/* GThreadPool (under GstTaskPool, which runs every GstTask) hands each
 * job to a worker through a GLib-internal queue: the push releases the
 * job's address, the worker acquires it before it runs the job, through a
 * trampoline put in place of the pool's function. */
typedef struct
{
  GFunc func;
  gpointer user_data;
} PoolFunc;

static void
pool_trampoline (gpointer data, gpointer user_data)
{
  PoolFunc *pf = user_data;

  __tsan_acquire (data);
  pf->func (data, pf->user_data);
}

typedef GThreadPool *(*PoolNewFullFn) (GFunc, gpointer, GDestroyNotify,
    gint, gboolean, GError **);
typedef gboolean (*PoolPushFn) (GThreadPool *, gpointer, GError **);

/* The PoolFunc lives as long as the process (pools are few and long
 * lived: GStreamer's default task pool is one per process). */
GThreadPool *
g_thread_pool_new_full (GFunc func, gpointer user_data,
    GDestroyNotify item_free_func, gint max_threads, gboolean exclusive,
    GError ** error)
{
  PoolFunc *pf = malloc (sizeof (*pf));

  REAL (PoolNewFullFn, "g_thread_pool_new_full");
  if (pf == NULL)
    abort ();
  pf->func = func;
  pf->user_data = user_data;
  return real (pool_trampoline, pf, item_free_func, max_threads, exclusive,
      error);
}

GThreadPool *
g_thread_pool_new (GFunc func, gpointer user_data, gint max_threads,
    gboolean exclusive, GError ** error)
{
  return g_thread_pool_new_full (func, user_data, NULL, max_threads,
      exclusive, error);
}

gboolean
g_thread_pool_push (GThreadPool * pool, gpointer data, GError ** error)
{
  REAL (PoolPushFn, "g_thread_pool_push");
  __tsan_release (data);
  return real (pool, data, error);
}
