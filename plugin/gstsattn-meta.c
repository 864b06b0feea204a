/* Registration of GstSattnMeta (see gstsattn-meta.h for the layout and
 * how applications find it): init, free and the copy transform.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-meta-priv.h"

#include <string.h>

GType
gst_sattn_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = { NULL };

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register (GST_SATTN_META_API_NAME, tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
gst_sattn_meta_init (GstMeta * meta, gpointer params, GstBuffer * buffer)
{
  GstSattnMeta *m = (GstSattnMeta *) meta;

  (void) params;
  (void) buffer;
  m->version = GST_SATTN_META_VERSION;
  m->window = 0;
  m->row_bytes = 0;
  m->n_rows = 0;
  m->rows = NULL;
  return TRUE;
}

static void
gst_sattn_meta_free (GstMeta * meta, GstBuffer * buffer)
{
  (void) buffer;
  g_free (((GstSattnMeta *) meta)->rows);
}

/* The meta stays exact or goes.  It describes its buffer's bytes as
 * n_rows rows of row_bytes, row i at byte i * row_bytes; a copy keeps it
 * only where that still holds:
 *  - a copy of the whole buffer (gst_buffer_copy, make_writable, a
 *    GstBaseTransform output of the same size: row i stays row i) keeps
 *    every row;
 *  - a region copy keeps the rows of the region when it starts and ends
 *    on row boundaries (a GstAdapter taking whole rows out of one buffer,
 *    as audiobuffersplit does); a region that cuts a row drops the meta;
 *  - a copy into a buffer of another size drops it: that is a merge (a
 *    GstAdapter assembling rows of several buffers copies every source
 *    buffer's metas into the result) or a conversion of the rows, and
 *    nothing says which rows the result holds;
 *  - a second sattn meta copied into the same buffer (rows of two
 *    buffers merged) removes the first and is not added;
 *  - a meta that no longer covers its own buffer exactly (memory appended
 *    or resized after it was attached) is not copied.
 * Other transforms drop the meta. */
static gboolean
gst_sattn_meta_transform (GstBuffer * dest, GstMeta * meta,
    GstBuffer * buffer, GQuark type, gpointer data)
{
  GstSattnMeta *src = (GstSattnMeta *) meta, *dst;
  GstMeta *had;
  GstMetaTransformCopy *copy = data;
  gsize rb = src->row_bytes, described, first = 0, end = src->n_rows;

  if (!GST_META_TRANSFORM_IS_COPY (type) || rb == 0)
    return FALSE;
  described = (gsize) src->n_rows * rb;
  if (gst_buffer_get_size (buffer) != described)
    return TRUE;
  had = gst_buffer_get_meta (dest, gst_sattn_meta_api_get_type ());
  if (had != NULL) {
    gst_buffer_remove_meta (dest, had);
    return TRUE;
  }
  if (copy->region) {
    gsize stop = copy->size == (gsize) - 1 ? described :
        copy->offset + copy->size;

    if (copy->offset % rb != 0 || stop % rb != 0 || stop > described ||
        stop <= copy->offset)
      return TRUE;
    first = copy->offset / rb;
    end = stop / rb;
  } else if (gst_buffer_get_size (dest) != described) {
    return TRUE;
  }
  dst = gst_sattn_meta_add (dest, (guint) (end - first));
  if (dst == NULL)
    return FALSE;
  dst->version = src->version;
  dst->window = src->window;
  dst->row_bytes = src->row_bytes;
  dst->n_rows = (guint) (end - first);
  memcpy (dst->rows, src->rows + first, (end - first) *
      sizeof (GstSattnMetaRow));
  return TRUE;
}

const GstMetaInfo *
gst_sattn_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **) & info)) {
    const GstMetaInfo *i = gst_meta_register (gst_sattn_meta_api_get_type (),
        GST_SATTN_META_IMPL_NAME, sizeof (GstSattnMeta), gst_sattn_meta_init,
        gst_sattn_meta_free, gst_sattn_meta_transform);
    g_once_init_leave ((GstMetaInfo **) & info, (GstMetaInfo *) i);
  }
  return info;
}

GstSattnMeta *
gst_sattn_meta_add (GstBuffer * buffer, guint cap_rows)
{
  GstSattnMeta *m;
  GstSattnMetaRow *rows = g_try_new0 (GstSattnMetaRow, MAX (cap_rows, 1));

  if (rows == NULL)
    return NULL;
  m = (GstSattnMeta *) gst_buffer_add_meta (buffer,
      gst_sattn_meta_get_info (), NULL);
  if (m == NULL) {
    g_free (rows);
    return NULL;
  }
  m->rows = rows;
  return m;
}
