/* sattn plugin registration
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <gst/gst.h>

#include "gstsattn.h"

static gboolean
plugin_init (GstPlugin * plugin)
{
  return GST_ELEMENT_REGISTER (sattn, plugin);
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, sattn,
    "Numerically stable masked multi-head self-attention on live streams",
    plugin_init, SATTN_PLUGIN_VERSION, "LGPL", SATTN_PACKAGE_NAME,
    SATTN_PACKAGE_ORIGIN)
