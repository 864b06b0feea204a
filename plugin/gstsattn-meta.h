/* GstSattnMeta: the window metadata the sattn element attaches to every
 * output buffer.  Installed as <sattn/gstsattn-meta.h>.
 *
 * The element lives in a plugin module, which exports only its
 * registration symbols, so this header needs no library to link against:
 * the meta is registered by the element (its API type is named
 * GST_SATTN_META_API_NAME) and found the GStreamer way, by that name,
 * with gst_buffer_get_meta; its layout is the struct below, read with the
 * inline accessors here.  The meta API type exists once a sattn element
 * has been created in the process (before any of its buffers can be
 * seen); until then the accessors return 0 / NULL.
 *
 * The meta is exact or absent: row i of the meta is always the buffer's
 * bytes [i * row_bytes, (i + 1) * row_bytes).  It survives buffer copies
 * (gst_buffer_copy, make_writable, an output buffer of the same size) and
 * region copies that start and end on row boundaries (only the rows
 * copied are kept: a GstAdapter or audiobuffersplit taking whole rows out
 * of one buffer); it is dropped by a region that cuts a row and by copies
 * into a buffer of another size (a GstAdapter merging rows of several
 * buffers, a conversion), where nothing says which rows the result holds.
 *
 * For bindings (PyGObject cannot see a C struct), the element with
 * meta-structure=true also attaches the same metadata as a GstCustomMeta
 * named GST_SATTN_META_CUSTOM_NAME carrying a GstStructure (see below),
 * which follows the same exact-or-absent rules.  It is off by default:
 * its GValues cost about 0.15 us per output row, where the struct costs
 * one allocation per buffer (tests/bench/meta-cost.sh).  C code reads the struct.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_META_H
#define GST_SATTN_META_H

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_SATTN_META_API_NAME "GstSattnMetaAPI"
#define GST_SATTN_META_IMPL_NAME "GstSattnMeta"
/* The layout version below; GstSattnMeta.version holds the element's.
 * Version 2 added GstSattnMeta.checks at the end of the struct (a reader
 * of version 1 is unaffected). */
#define GST_SATTN_META_VERSION 2

/* What one output row (one output frame of the buffer) accounts for.
 * Frames are counted from the element's last resync point (start, flush,
 * discontinuity, caps change), as the buffer offsets are. */
typedef struct
{
  guint64 first_frame;          /* first input frame the row accounts for */
  guint32 n_frames;             /* input frames it accounts for (frames
                                   mode: 1; pooled modes: the hop, or fewer
                                   at a drain) */
  guint32 valid_keys;           /* usable frames among the window's key
                                   positions */
  guint32 masked_keys;          /* the window's key positions that were
                                   masked: padding before the stream
                                   start, GAP frames, frames with NaN/Inf
                                   or overflowing projections;
                                   valid_keys + masked_keys = window */
  guint32 fully_masked_rows;    /* (head, query frame) softmax rows of
                                   the row whose visible keys were all
                                   masked (their attention result is 0) */
  gboolean valid;               /* FALSE: the row is zeros (its query
                                   frames were all unusable) */
  GstClockTime window_start;    /* running time of the window's first key
                                   frame (the stream start when the window
                                   reaches before it) */
  GstClockTime window_end;      /* running time of the end of the window's
                                   last frame */
} GstSattnMetaRow;

/* Whether a row's window is within its model's input contract (version
 * 2 on; docs/models.md "The input contract"): a whole model that records
 * the input RMS or pooled-feature statistics of its training data says
 * whether each window is within them.  Rows of other models are always
 * in contract, with NaN figures. */
typedef struct
{
  gboolean in_contract;         /* every recorded statistic within range
                                   (a window without a usable frame is) */
  gfloat input_rms;             /* RMS of the window's usable frames' values
                                   before any normalisation; NaN: none */
  gfloat pooled_z;              /* z of the pooled row against the training
                                   statistics; NaN: not recorded / none */
} GstSattnMetaCheck;

typedef struct
{
  GstMeta meta;
  guint version;                /* GST_SATTN_META_VERSION of the element */
  guint window;                 /* key positions per window */
  gsize row_bytes;              /* bytes of one output row in the buffer */
  guint n_rows;                 /* rows of the buffer described */
  GstSattnMetaRow *rows;        /* n_rows, in buffer order */
  GstSattnMetaCheck *checks;    /* version >= 2: n_rows, in buffer order */
} GstSattnMeta;

/* The Python-readable form: a GstCustomMeta of this name whose structure
 * (of the same name) holds
 *   version, window (guint), row-bytes (guint64), n-rows (guint)
 * as in GstSattnMeta, and one GstValueArray per row field, n-rows entries
 * in buffer order:
 *   first-frame (guint64), n-frames, valid-keys, masked-keys,
 *   fully-masked-rows (guint), valid (gboolean),
 *   window-start, window-end (guint64 running times in nanoseconds,
 *   GST_CLOCK_TIME_NONE = 2^64 - 1 when there is none),
 *   in-contract (gboolean), input-rms, pooled-z (gdouble, NaN: none).
 * From Python:
 *   s = buf.get_custom_meta ("GstSattnWindowMeta").get_structure ()
 *   s["n-rows"], s["first-frame"][0], list (s["valid-keys"]) */
#define GST_SATTN_META_CUSTOM_NAME "GstSattnWindowMeta"

/* The registered API type, 0 while no sattn element exists. */
static inline GType
gst_sattn_meta_api_lookup (void)
{
  return g_type_from_name (GST_SATTN_META_API_NAME);
}

/* The window metadata of buffer, NULL if it has none. */
static inline GstSattnMeta *
gst_buffer_get_sattn_meta (GstBuffer * buffer)
{
  GType api = gst_sattn_meta_api_lookup ();

  return api != 0 ? (GstSattnMeta *) gst_buffer_get_meta (buffer, api) :
      NULL;
}

G_END_DECLS

#endif /* GST_SATTN_META_H */
