/* The sattn element's memory budget, the part that needs no element:
 * what this process can still get, and whether a weights file can be
 * read within it (the model cache asks before it reads one).  The checks
 * of a stream configuration and the element's buffers are declared in
 * gstsattn-priv.h.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_MEMORY_H
#define GST_SATTN_MEMORY_H

#include <gst/gst.h>

G_BEGIN_DECLS

/* Bytes the loader may hold at once while it reads a weights file of
 * file_bytes: the file, a float32 copy of its tensors (up to twice the
 * file for F16 / BF16), and the model's float and double copies. */
#define GST_SATTN_LOAD_FACTOR 6

/* Memory this process can still get: the least of the headroom below
 * RLIMIT_AS, RLIMIT_DATA and the machine's physical memory (G_MAXUINT64:
 * none known); *what names it. */
G_GNUC_INTERNAL
guint64 gst_sattn_memory_headroom (const gchar ** what);

/* Whether the weights file at path fits: its size times
 * GST_SATTN_LOAD_FACTOR within the headroom (TRUE too when the check is
 * off, SATTN_MEMORY_CHECK=0, or path is no regular file); FALSE with
 * the sizes in err (err_len bytes, may be 0). */
G_GNUC_INTERNAL
gboolean gst_sattn_memory_check_load (const gchar * path, gchar * err,
    gsize err_len);

G_END_DECLS

#endif /* GST_SATTN_MEMORY_H */
