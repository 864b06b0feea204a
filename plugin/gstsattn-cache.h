/* The sattn element's model cache: elements whose weights (the same file,
 * the same tensors), prefix and model configuration match share one
 * immutable SattnModel, counted by reference, from a process-wide,
 * thread-safe table.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_CACHE_H
#define GST_SATTN_CACHE_H

#include <gst/gst.h>

#include "sattn/sattn.h"
#include "sattn/sattn-weights.h"

G_BEGIN_DECLS

/* The name of the custom query (GST_QUERY_CUSTOM) every sattn element
 * answers with the cache's counters: "models" (G_TYPE_UINT, models in the
 * cache), "users" (G_TYPE_UINT, references held on them) and "builds"
 * (G_TYPE_UINT64, models built (files read) since the process started;
 * concurrent requests for one key wait for one build).  For tests
 * and debugging; not part of the element's documented interface.
 *
 * The functions below are internal to the plugin (hidden symbols). */
#define GST_SATTN_CACHE_QUERY_NAME "GstSattnModelCache"

/* A model for cfg and w (as sattn_model_new takes them), shared with
 * every other caller whose request matches: the file at path (NULL = no
 * file, w then holds no tensors) with the same device, inode, size and
 * modification time, a SHA-256 over every tensor of w (the values the
 * model is built from, so a file rewritten in place is never served the
 * old model), the same prefix (NULL = ""; "a" and "a." are the same, as
 * sattn_attn_prefix reads them), and a byte-equal cfg (callers
 * zero-initialise it, padding included, so that every field present or
 * future takes part; a difference in padding only costs sharing).
 *
 * w's arrays are read here and not kept: the caller frees them after the
 * call.  Returns NULL and sets *status (may be NULL) when sattn_model_new
 * fails.  Release the model with gst_sattn_cache_release, never with
 * sattn_model_free. */
G_GNUC_INTERNAL
SattnModel *gst_sattn_cache_acquire (const gchar * path, const gchar * prefix,
    const SattnConfig * cfg, const SattnWeights * w, SattnStatus * status);

/* A model from the weights file at path through the one loader
 * (sattn_model_load with prefix and opt), shared with every caller whose
 * request matches: the same file (device, inode, size, modification
 * and status-change times), prefix ("a" and "a." alike) and options.  On a miss the file is
 * read once, by this caller.  NULL on failure: *status and err (the
 * loader's words, naming the file) say why; report as the loader fills
 * it (on a hit, left as it was).  Release with gst_sattn_cache_release. */
G_GNUC_INTERNAL
SattnModel *gst_sattn_cache_load (const gchar * path, const gchar * prefix,
    const SattnLoadOptions * opt, SattnLoadReport * report,
    SattnStatus * status, gchar * err, gsize err_len);

/* One more reference on a model that gst_sattn_cache_acquire returned
 * and that is still held; FALSE (nothing done) for a model built outside
 * the cache, which has a single user. */
G_GNUC_INTERNAL
gboolean gst_sattn_cache_ref (SattnModel * model);

/* Drop one reference; the model is freed with its last user.  NULL is
 * accepted. */
G_GNUC_INTERNAL
void gst_sattn_cache_release (SattnModel * model);

/* Counters: models held by the cache, references on them and builds
 * started since the process started (each may be NULL). */
G_GNUC_INTERNAL
void gst_sattn_cache_stats (guint * models, guint * users, guint64 * builds);

/* Answer query if it is the custom query GST_SATTN_CACHE_QUERY_NAME;
 * FALSE for any other query. */
G_GNUC_INTERNAL
gboolean gst_sattn_cache_handle_query (GstQuery * query);

G_END_DECLS

#endif /* GST_SATTN_CACHE_H */
