/* GStreamer sattn element: sliding-window multi-head self-attention on
 * live signal frames.  What the plugin needs of the element: its
 * registration.  The element's type, instance struct and enum types are
 * private to plugin/ (gstsattn-priv.h, gstsattn-enums.h).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_H
#define GST_SATTN_H

#include <gst/gst.h>

G_BEGIN_DECLS

GST_ELEMENT_REGISTER_DECLARE (sattn);

G_END_DECLS

#endif /* GST_SATTN_H */
