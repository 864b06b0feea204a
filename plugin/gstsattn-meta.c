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

/* Copies: every row, or, for a region copy, the whole rows inside the
 * region.  Other transforms drop the meta (nothing says what a row would
 * become). */
static gboolean
gst_sattn_meta_transform (GstBuffer * dest, GstMeta * meta,
    GstBuffer * buffer, GQuark type, gpointer data)
{
  GstSattnMeta *src = (GstSattnMeta *) meta, *dst;
  guint first = 0, end = src->n_rows;

  (void) buffer;
  if (!GST_META_TRANSFORM_IS_COPY (type))
    return FALSE;
  if (((GstMetaTransformCopy *) data)->region) {
    GstMetaTransformCopy *copy = data;
    gsize rb = src->row_bytes, stop;

    if (rb == 0)
      return FALSE;
    stop = copy->size == (gsize) - 1 ? (gsize) src->n_rows * rb :
        copy->offset + copy->size;
    first = (guint) MIN ((copy->offset + rb - 1) / rb, (gsize) src->n_rows);
    end = (guint) MIN (stop / rb, (gsize) src->n_rows);
    if (end <= first)
      return TRUE;
  }
  dst = gst_sattn_meta_add (dest, end - first);
  if (dst == NULL)
    return FALSE;
  dst->version = src->version;
  dst->window = src->window;
  dst->row_bytes = src->row_bytes;
  dst->n_rows = end - first;
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
