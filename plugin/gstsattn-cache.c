/* The sattn element's model cache; see gstsattn-cache.h.
 *
 * One GMutex guards two tables: key -> entry (lookup) and model -> entry
 * (release).  Hashing the tensors and building a model, the slow parts,
 * run outside the lock, and one at a time per key: the first caller to
 * miss enters the key as being built and builds; callers that ask for
 * the same key meanwhile wait for that build (GCond) and share its model,
 * or its error (copied), instead of reading the file again.  So N
 * elements started at once on one file read it once and hold one model.
 * A failed build leaves nothing in the table: the next request tries
 * again.  The tables are freed with their last entry, so nothing is left
 * allocated once no element holds a model.
 *
 * Identity models (no weights file) go through the same path, keyed by
 * configuration and add-zero-attn alone: they hold almost nothing, but one
 * path means one set of rules and one test, and a model is immutable
 * whatever it holds.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-cache.h"
#include "gstsattn-memory.h"

#include "sattn/sattn-weights.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define DIGEST_LEN 32           /* SHA-256 */

typedef struct
{
  /* File identity (all 0 without a file). */
  gboolean has_file;
  guint64 dev, ino, size;
  gint64 mtime_sec, mtime_nsec;
  /* The status change time too: a rewrite in place that keeps the
   * modification time (futimens) cannot keep it. */
  gint64 ctime_sec, ctime_nsec;
  gchar *prefix;                /* never NULL */
  SattnConfig cfg;              /* byte copy of the caller's, struct_size
                                   set (a model holds no thread count:
                                   elements of any threads share it) */
  guint8 digest[DIGEST_LEN];    /* over the tensors (and their presence) */
  guint hash;
} CacheKey;

typedef struct
{
  CacheKey key;
  SattnModel *model;            /* NULL while building or after failing */
  guint users;
  /* A build in flight: others wait on cache_built; after a failure the
   * entry has left the tables and the last waiter frees it. */
  gboolean building, failed;
  guint waiters;
  SattnStatus status;
  gchar *err;
} CacheEntry;

static GMutex cache_lock;
static GCond cache_built;
static guint64 cache_builds;    /* builds started, ever (the query's) */
static GHashTable *by_key;      /* CacheKey * -> CacheEntry * */
static GHashTable *by_model;    /* SattnModel * -> CacheEntry * */

static guint
cache_key_hash (gconstpointer p)
{
  return ((const CacheKey *) p)->hash;
}

static gboolean
cache_key_equal (gconstpointer pa, gconstpointer pb)
{
  const CacheKey *a = pa, *b = pb;

  return a->hash == b->hash && a->has_file == b->has_file
      && a->dev == b->dev && a->ino == b->ino && a->size == b->size
      && a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec
      && a->ctime_sec == b->ctime_sec && a->ctime_nsec == b->ctime_nsec
      && strcmp (a->prefix, b->prefix) == 0
      && memcmp (&a->cfg, &b->cfg, sizeof (SattnConfig)) == 0
      && memcmp (a->digest, b->digest, DIGEST_LEN) == 0;
}

static void
cache_digest_array (GChecksum * cs, const float *x, gsize n)
{
  guint8 present = x != NULL;
  guint64 len = x != NULL ? (guint64) n : 0;

  g_checksum_update (cs, &present, 1);
  g_checksum_update (cs, (const guchar *) &len, sizeof len);
  if (x != NULL && n > 0)
    g_checksum_update (cs, (const guchar *) x, n * sizeof (float));
}

/* The key of a request; FALSE when cfg does not describe a model (the
 * sizes of w's arrays cannot be known): the caller then builds without
 * the cache and sattn_model_new says what is wrong. */
static gboolean
cache_key_init (CacheKey * k, const gchar * path, const gchar * prefix,
    const SattnConfig * cfg, const SattnWeights * w)
{
  static const SattnWeights none = { 0, };
  size_t d_head, d_value, dq, dv, d_out, e = cfg->d_model;
  GChecksum *cs;
  gsize len = DIGEST_LEN;
  guint8 zero_attn;
  struct stat st;
  char *dotted;

  memset (k, 0, sizeof *k);
  if (w == NULL)
    w = &none;
  if (cfg->heads == 0 || e == 0)
    return FALSE;
  d_head = cfg->d_head != 0 ? cfg->d_head : e / cfg->heads;
  d_value = cfg->d_value != 0 ? cfg->d_value : d_head;
  if (d_head == 0 || d_value == 0 || d_head > G_MAXSIZE / cfg->heads ||
      d_value > G_MAXSIZE / cfg->heads)
    return FALSE;
  dq = cfg->heads * d_head;
  dv = cfg->heads * d_value;
  d_out = cfg->d_out != 0 ? cfg->d_out : dv;
  if (dq > G_MAXSIZE / sizeof (float) / e ||
      dv > G_MAXSIZE / sizeof (float) / e ||
      d_out > G_MAXSIZE / sizeof (float) / dv ||
      (cfg->encoder && cfg->d_ff > G_MAXSIZE / sizeof (float) / e))
    return FALSE;

  if (path != NULL) {
    if (stat (path, &st) != 0)
      return FALSE;
    k->has_file = TRUE;
    k->dev = (guint64) st.st_dev;
    k->ino = (guint64) st.st_ino;
    k->size = (guint64) st.st_size;
    k->mtime_sec = (gint64) st.st_mtim.tv_sec;
    k->mtime_nsec = (gint64) st.st_mtim.tv_nsec;
    k->ctime_sec = (gint64) st.st_ctim.tv_sec;
    k->ctime_nsec = (gint64) st.st_ctim.tv_nsec;
  }
  /* The prefix as the core reads it ("a" and "a." name the same
   * tensors). */
  dotted = sattn_attn_prefix (NULL, prefix);
  if (dotted == NULL)
    return FALSE;
  k->prefix = g_strdup (dotted);
  free (dotted);
  memcpy (&k->cfg, cfg, sizeof (SattnConfig));
  k->cfg.struct_size = sizeof (SattnConfig);    /* 0 says the same */

  cs = g_checksum_new (G_CHECKSUM_SHA256);
  cache_digest_array (cs, w->wq, dq * e);
  cache_digest_array (cs, w->bq, dq);
  cache_digest_array (cs, w->wk, dq * e);
  cache_digest_array (cs, w->bk, dq);
  cache_digest_array (cs, w->wv, dv * e);
  cache_digest_array (cs, w->bv, dv);
  cache_digest_array (cs, w->wo, d_out * dv);
  cache_digest_array (cs, w->bo, d_out);
  cache_digest_array (cs, w->bias_k, dq);
  cache_digest_array (cs, w->bias_v, dv);
  if (cfg->encoder) {
    /* The encoder layer's parts (cfg->d_ff is in the key already). */
    cache_digest_array (cs, w->w1, cfg->d_ff * e);
    cache_digest_array (cs, w->b1, cfg->d_ff);
    cache_digest_array (cs, w->w2, cfg->d_ff * e);
    cache_digest_array (cs, w->b2, e);
    cache_digest_array (cs, w->norm1_w, e);
    cache_digest_array (cs, w->norm1_b, e);
    cache_digest_array (cs, w->norm2_w, e);
    cache_digest_array (cs, w->norm2_b, e);
  }
  zero_attn = w->add_zero_attn != 0;
  g_checksum_update (cs, &zero_attn, 1);
  g_checksum_get_digest (cs, k->digest, &len);
  g_checksum_free (cs);

  /* The digest is uniform already; fold in the rest cheaply. */
  memcpy (&k->hash, k->digest, sizeof k->hash);
  k->hash ^= g_str_hash (k->prefix) ^ (guint) (k->ino * 31 + k->dev)
      ^ (guint) cfg->heads * 7919u ^ (guint) cfg->d_model;
  return TRUE;
}

/* Once the cache holds nothing, give the freed model and load buffers
 * back to the system: glibc keeps large freed blocks in its arenas (the
 * threads that built models each have one), so without this an
 * application that ran many elements keeps their peak resident after all
 * of them went to NULL. */
static void
cache_trim (void)
{
#ifdef __GLIBC__
  malloc_trim (0);
#endif
}

static void
cache_entry_free (CacheEntry * e)
{
  g_free (e->key.prefix);
  g_free (e->err);
  g_free (e);
}

/* The model for key (taken over: its prefix is freed here), built by
 * build (data) on a miss, once per key however many callers ask at once;
 * NULL when the build fails (status, and err when given, say why, to
 * every caller that waited for that build). */
typedef SattnModel *(*CacheBuildFn) (gpointer data, SattnStatus * status);

static SattnModel *
cache_obtain (CacheKey * key, CacheBuildFn build, gpointer data,
    SattnStatus * status, gchar * err, gsize err_len)
{
  CacheEntry *e;
  SattnModel *model;
  SattnStatus st = SATTN_OK;
  gboolean empty;

  g_mutex_lock (&cache_lock);
  e = by_key ? g_hash_table_lookup (by_key, key) : NULL;
  if (e != NULL) {
    g_free (key->prefix);
    if (e->building) {
      e->waiters++;
      while (e->building)
        g_cond_wait (&cache_built, &cache_lock);
      e->waiters--;
      if (e->failed) {
        if (status)
          *status = e->status;
        if (err != NULL && err_len > 0)
          g_strlcpy (err, e->err ? e->err : "", err_len);
        if (e->waiters == 0)
          cache_entry_free (e);
        g_mutex_unlock (&cache_lock);
        return NULL;
      }
      /* The builder counted this caller among the users already (so
       * that a release before it woke up could not free the entry). */
    } else {
      e->users++;
    }
    model = e->model;
    g_mutex_unlock (&cache_lock);
    if (status)
      *status = SATTN_OK;
    return model;
  }
  if (by_key == NULL) {
    by_key = g_hash_table_new (cache_key_hash, cache_key_equal);
    by_model = g_hash_table_new (g_direct_hash, g_direct_equal);
  }
  e = g_new0 (CacheEntry, 1);
  e->key = *key;
  e->users = 1;
  e->building = TRUE;
  g_hash_table_insert (by_key, &e->key, e);
  cache_builds++;
  g_mutex_unlock (&cache_lock);

  model = build (data, &st);

  g_mutex_lock (&cache_lock);
  e->building = FALSE;
  if (model == NULL) {
    e->failed = TRUE;
    e->status = st;
    e->err = err != NULL ? g_strdup (err) : NULL;
    g_hash_table_remove (by_key, &e->key);
    if (g_hash_table_size (by_key) == 0) {
      g_clear_pointer (&by_key, g_hash_table_unref);
      g_clear_pointer (&by_model, g_hash_table_unref);
    }
    empty = by_key == NULL;
    if (e->waiters == 0)
      cache_entry_free (e);
    g_cond_broadcast (&cache_built);
    g_mutex_unlock (&cache_lock);
    if (empty)
      cache_trim ();
    if (status)
      *status = st;
    return NULL;
  }
  e->model = model;
  e->users += e->waiters;
  g_hash_table_insert (by_model, model, e);
  g_cond_broadcast (&cache_built);
  g_mutex_unlock (&cache_lock);
  if (status)
    *status = SATTN_OK;
  return model;
}

typedef struct
{
  const SattnConfig *cfg;
  const SattnWeights *w;
} NewArgs;

static SattnModel *
cache_build_new (gpointer data, SattnStatus * status)
{
  NewArgs *a = data;

  return sattn_model_new (a->cfg, a->w, status);
}

SattnModel *
gst_sattn_cache_acquire (const gchar * path, const gchar * prefix,
    const SattnConfig * cfg, const SattnWeights * w, SattnStatus * status)
{
  CacheKey key;
  NewArgs a = { cfg, w };

  g_return_val_if_fail (cfg != NULL, NULL);

  if (!cache_key_init (&key, path, prefix, cfg, w))
    return sattn_model_new (cfg, w, status);
  return cache_obtain (&key, cache_build_new, &a, status, NULL, 0);
}

typedef struct
{
  const gchar *path, *prefix;
  const SattnLoadOptions *opt;
  SattnLoadReport *report;
  gchar *err;
  gsize err_len;
} LoadArgs;

static SattnModel *
cache_build_load (gpointer data, SattnStatus * status)
{
  LoadArgs *a = data;
  SattnModel *model = NULL;
  SattnStatus st;

  /* Refused before anything is read when the load cannot fit (the memory
   * budget's words). */
  if (!gst_sattn_memory_check_load (a->path, a->err, a->err_len)) {
    if (status)
      *status = SATTN_E_NOMEM;
    return NULL;
  }
  st = sattn_model_load (a->path, a->prefix, a->opt, &model, a->report,
      a->err, a->err_len);
  if (status)
    *status = st;
  return model;
}

SattnModel *
gst_sattn_cache_load (const gchar * path, const gchar * prefix,
    const SattnLoadOptions * opt, SattnLoadReport * report,
    SattnStatus * status, gchar * err, gsize err_len)
{
  CacheKey key;
  struct stat st;
  GChecksum *cs;
  gsize len = DIGEST_LEN;
  gchar *words, *dotted;
  const SattnConfig *c = &opt->cfg;
  LoadArgs a = { path, prefix, opt, report, err, err_len };

  g_return_val_if_fail (path != NULL && opt != NULL, NULL);
  if (err != NULL && err_len > 0)
    err[0] = '\0';
  memset (&key, 0, sizeof key);
  dotted = sattn_attn_prefix (NULL, prefix);
  if (stat (path, &st) != 0 || dotted == NULL) {
    free (dotted);
    return cache_build_load (&a, status);
  }
  key.has_file = TRUE;
  key.dev = (guint64) st.st_dev;
  key.ino = (guint64) st.st_ino;
  key.size = (guint64) st.st_size;
  key.mtime_sec = (gint64) st.st_mtim.tv_sec;
  key.mtime_nsec = (gint64) st.st_mtim.tv_nsec;
  key.ctime_sec = (gint64) st.st_ctim.tv_sec;
  key.ctime_nsec = (gint64) st.st_ctim.tv_nsec;
  key.prefix = g_strdup (dotted);
  free (dotted);
  /* The options, field by field (no padding), as words: the loader's
   * whole input besides the file (no thread count: that is each
   * stream's). */
  words = g_strdup_printf ("load\n%zu %zu %zu %zu %zu %a %d %zu %d %a %d "
      "%d %a %d %u", c->d_model, c->heads, c->d_head, c->d_value, c->d_out,
      (double) c->scale, c->causal, c->lookback, (int) c->positions,
      c->rope_base, (int) c->activation, c->norm_first, c->norm_eps,
      opt->add_zero_attn, opt->set);
  cs = g_checksum_new (G_CHECKSUM_SHA256);
  g_checksum_update (cs, (const guchar *) words, strlen (words));
  g_checksum_get_digest (cs, key.digest, &len);
  g_checksum_free (cs);
  g_free (words);
  memcpy (&key.hash, key.digest, sizeof key.hash);
  key.hash ^= g_str_hash (key.prefix) ^ (guint) (key.ino * 31 + key.dev);
  return cache_obtain (&key, cache_build_load, &a, status, err, err_len);
}

gboolean
gst_sattn_cache_ref (SattnModel * model)
{
  CacheEntry *e;

  g_mutex_lock (&cache_lock);
  e = by_model ? g_hash_table_lookup (by_model, model) : NULL;
  if (e != NULL)
    e->users++;
  g_mutex_unlock (&cache_lock);
  return e != NULL;
}

void
gst_sattn_cache_release (SattnModel * model)
{
  CacheEntry *e;
  gboolean empty;

  if (model == NULL)
    return;
  g_mutex_lock (&cache_lock);
  e = by_model ? g_hash_table_lookup (by_model, model) : NULL;
  if (e == NULL) {
    /* Built outside the cache (a request without a key). */
    g_mutex_unlock (&cache_lock);
    sattn_model_free (model);
    return;
  }
  g_assert (e->users > 0);
  if (--e->users > 0) {
    g_mutex_unlock (&cache_lock);
    return;
  }
  g_hash_table_remove (by_key, &e->key);
  g_hash_table_remove (by_model, model);
  if (g_hash_table_size (by_key) == 0) {
    g_clear_pointer (&by_key, g_hash_table_unref);
    g_clear_pointer (&by_model, g_hash_table_unref);
  }
  empty = by_key == NULL;
  g_mutex_unlock (&cache_lock);
  sattn_model_free (model);
  cache_entry_free (e);
  if (empty)
    cache_trim ();
}

void
gst_sattn_cache_stats (guint * models, guint * users, guint64 * builds)
{
  GHashTableIter it;
  gpointer v;
  guint m = 0, u = 0;

  g_mutex_lock (&cache_lock);
  if (by_key != NULL) {
    g_hash_table_iter_init (&it, by_key);
    while (g_hash_table_iter_next (&it, NULL, &v)) {
      if (((CacheEntry *) v)->model == NULL)
        continue;               /* being built */
      m++;
      u += ((CacheEntry *) v)->users;
    }
  }
  if (builds)
    *builds = cache_builds;
  g_mutex_unlock (&cache_lock);
  if (models)
    *models = m;
  if (users)
    *users = u;
}

gboolean
gst_sattn_cache_handle_query (GstQuery * query)
{
  const GstStructure *s;
  GstStructure *w;
  guint models, users;
  guint64 builds;

  if (GST_QUERY_TYPE (query) != GST_QUERY_CUSTOM)
    return FALSE;
  s = gst_query_get_structure (query);
  if (s == NULL || !gst_structure_has_name (s, GST_SATTN_CACHE_QUERY_NAME))
    return FALSE;
  w = gst_query_writable_structure (query);
  if (w == NULL)
    return FALSE;
  gst_sattn_cache_stats (&models, &users, &builds);
  gst_structure_set (w, "models", G_TYPE_UINT, models, "users", G_TYPE_UINT,
      users, "builds", G_TYPE_UINT64, builds, NULL);
  return TRUE;
}
