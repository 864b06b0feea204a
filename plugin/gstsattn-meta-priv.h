/* The plugin's side of GstSattnMeta: registration and adding.  Not
 * installed (applications use gstsattn-meta.h alone).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_META_PRIV_H
#define GST_SATTN_META_PRIV_H

#include "gstsattn-meta.h"

G_BEGIN_DECLS

/* Registers the API type (once) and returns it. */
G_GNUC_INTERNAL GType gst_sattn_meta_api_get_type (void);
/* Registers the implementation (once) and returns it. */
G_GNUC_INTERNAL const GstMetaInfo *gst_sattn_meta_get_info (void);
/* A meta on buffer with room for cap_rows rows (n_rows = 0), or NULL when
 * there is no memory for them. */
G_GNUC_INTERNAL GstSattnMeta *gst_sattn_meta_add (GstBuffer * buffer,
    guint cap_rows);
/* Registers the GstCustomMeta GST_SATTN_META_CUSTOM_NAME (once). */
G_GNUC_INTERNAL const GstMetaInfo *gst_sattn_meta_custom_get_info (void);
/* Attaches meta's rows to buffer as that custom meta (its structure). */
G_GNUC_INTERNAL void gst_sattn_meta_add_custom (GstBuffer * buffer,
    const GstSattnMeta * meta);

G_END_DECLS

#endif /* GST_SATTN_META_PRIV_H */
