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
  m->checks = NULL;
  return TRUE;
}

static void
gst_sattn_meta_free (GstMeta * meta, GstBuffer * buffer)
{
  (void) buffer;
  g_free (((GstSattnMeta *) meta)->rows);
  g_free (((GstSattnMeta *) meta)->checks);
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
 * Other transforms drop the meta.  Both forms (the struct and the custom
 * meta) follow these rules through this one function: TRUE and the rows
 * [*first, *end) of the source that the copy into dest keeps, or FALSE
 * when it keeps none (api: the form's API type, for the merge rule). */
static gboolean
gst_sattn_meta_kept_rows (GstBuffer * dest, GstBuffer * buffer, GType api,
    const GstMetaTransformCopy * copy, gsize rb, guint n_rows, guint * first,
    guint * end)
{
  gsize described = (gsize) n_rows * rb;
  GstMeta *had;

  if (gst_buffer_get_size (buffer) != described)
    return FALSE;
  had = gst_buffer_get_meta (dest, api);
  if (had != NULL) {
    gst_buffer_remove_meta (dest, had);
    return FALSE;
  }
  *first = 0;
  *end = n_rows;
  if (copy->region) {
    gsize stop = copy->size == (gsize) - 1 ? described :
        copy->offset + copy->size;

    if (copy->offset % rb != 0 || stop % rb != 0 || stop > described ||
        stop <= copy->offset)
      return FALSE;
    *first = (guint) (copy->offset / rb);
    *end = (guint) (stop / rb);
  } else if (gst_buffer_get_size (dest) != described) {
    return FALSE;
  }
  return TRUE;
}

static gboolean
gst_sattn_meta_transform (GstBuffer * dest, GstMeta * meta,
    GstBuffer * buffer, GQuark type, gpointer data)
{
  GstSattnMeta *src = (GstSattnMeta *) meta, *dst;
  guint first, end;

  if (!GST_META_TRANSFORM_IS_COPY (type) || src->row_bytes == 0)
    return FALSE;
  if (!gst_sattn_meta_kept_rows (dest, buffer, gst_sattn_meta_api_get_type (),
          data, src->row_bytes, src->n_rows, &first, &end))
    return TRUE;
  dst = gst_sattn_meta_add (dest, end - first);
  if (dst == NULL)
    return FALSE;
  dst->version = src->version;
  dst->window = src->window;
  dst->row_bytes = src->row_bytes;
  dst->n_rows = end - first;
  memcpy (dst->rows, src->rows + first, (end - first) *
      sizeof (GstSattnMetaRow));
  memcpy (dst->checks, src->checks + first, (end - first) *
      sizeof (GstSattnMetaCheck));
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
  GstSattnMetaCheck *checks = g_try_new0 (GstSattnMetaCheck,
      MAX (cap_rows, 1));

  if (rows == NULL || checks == NULL) {
    g_free (rows);
    g_free (checks);
    return NULL;
  }
  m = (GstSattnMeta *) gst_buffer_add_meta (buffer,
      gst_sattn_meta_get_info (), NULL);
  if (m == NULL) {
    g_free (rows);
    g_free (checks);
    return NULL;
  }
  m->rows = rows;
  m->checks = checks;
  return m;
}

/* ------------------------------------------------------------ custom meta */

/* The structure's fields (gstsattn-meta.h), as quarks. */
enum
{
  F_VERSION, F_WINDOW, F_ROW_BYTES, F_N_ROWS,
  /* one array each, n-rows entries */
  F_FIRST_FRAME, F_N_FRAMES, F_VALID_KEYS, F_MASKED_KEYS,
  F_FULLY_MASKED_ROWS, F_VALID, F_WINDOW_START, F_WINDOW_END,
  F_IN_CONTRACT, F_INPUT_RMS, F_POOLED_Z,
  N_FIELDS
};
#define FIRST_ARRAY F_FIRST_FRAME

static const gchar *const field_names[N_FIELDS] = {
  "version", "window", "row-bytes", "n-rows",
  "first-frame", "n-frames", "valid-keys", "masked-keys",
  "fully-masked-rows", "valid", "window-start", "window-end",
  "in-contract", "input-rms", "pooled-z",
};

static GQuark field_quarks[N_FIELDS];

/* A copy of rows [first, end) of the custom meta src into dest (whose
 * structure is empty). */
static void
gst_sattn_meta_custom_copy_rows (GstStructure * dst, const GstStructure * src,
    guint first, guint end)
{
  guint f, i;

  gst_structure_id_set (dst, field_quarks[F_N_ROWS], G_TYPE_UINT, end - first,
      NULL);
  for (f = 0; f < N_FIELDS; f++) {
    const GValue *v = gst_structure_id_get_value (src, field_quarks[f]);
    GValue arr = G_VALUE_INIT;

    if (v == NULL || f == F_N_ROWS)
      continue;
    if (f < FIRST_ARRAY) {
      gst_structure_id_set_value (dst, field_quarks[f], v);
      continue;
    }
    gst_value_array_init (&arr, end - first);
    for (i = first; i < end; i++)
      gst_value_array_append_value (&arr, gst_value_array_get_value (v, i));
    gst_structure_id_take_value (dst, field_quarks[f], &arr);
  }
}

/* The copy transform of the custom meta: the struct's rules, on the
 * row-bytes and n-rows the structure records. */
static gboolean
gst_sattn_meta_custom_transform (GstBuffer * dest, GstCustomMeta * meta,
    GstBuffer * buffer, GQuark type, gpointer data, gpointer user_data)
{
  const GstStructure *src = gst_custom_meta_get_structure (meta);
  const GstMetaInfo *info = ((GstMeta *) meta)->info;
  GstCustomMeta *dst;
  guint64 rb = 0;
  guint n_rows = 0, first, end;

  (void) user_data;
  if (!GST_META_TRANSFORM_IS_COPY (type) ||
      !gst_structure_id_get (src, field_quarks[F_ROW_BYTES], G_TYPE_UINT64,
          &rb, field_quarks[F_N_ROWS], G_TYPE_UINT, &n_rows, NULL) || rb == 0)
    return FALSE;
  if (!gst_sattn_meta_kept_rows (dest, buffer, info->api, data, (gsize) rb,
          n_rows, &first, &end))
    return TRUE;
  dst = (GstCustomMeta *) gst_buffer_add_meta (dest, info, NULL);
  if (dst == NULL)
    return FALSE;
  gst_sattn_meta_custom_copy_rows (gst_custom_meta_get_structure (dst), src,
      first, end);
  return TRUE;
}

const GstMetaInfo *
gst_sattn_meta_custom_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **) & info)) {
    static const gchar *tags[] = { NULL };
    const GstMetaInfo *i;
    guint f;

    for (f = 0; f < N_FIELDS; f++)
      field_quarks[f] = g_quark_from_static_string (field_names[f]);
    i = gst_meta_register_custom (GST_SATTN_META_CUSTOM_NAME, tags,
        gst_sattn_meta_custom_transform, NULL, NULL);
    g_once_init_leave ((GstMetaInfo **) & info, (GstMetaInfo *) i);
  }
  return info;
}

/* The checks' three arrays (in-contract, input-rms, pooled-z). */
static void
gst_sattn_meta_take_checks (GstStructure * s, const GstSattnMetaCheck * c,
    guint n)
{
  GValue in = G_VALUE_INIT, rms = G_VALUE_INIT, z = G_VALUE_INIT;
  guint i;

  gst_value_array_init (&in, n);
  gst_value_array_init (&rms, n);
  gst_value_array_init (&z, n);
  for (i = 0; i < n; i++) {
    GValue v = G_VALUE_INIT;

    g_value_init (&v, G_TYPE_BOOLEAN);
    g_value_set_boolean (&v, c[i].in_contract);
    gst_value_array_append_and_take_value (&in, &v);
    g_value_init (&v, G_TYPE_DOUBLE);
    g_value_set_double (&v, c[i].input_rms);
    gst_value_array_append_and_take_value (&rms, &v);
    g_value_init (&v, G_TYPE_DOUBLE);
    g_value_set_double (&v, c[i].pooled_z);
    gst_value_array_append_and_take_value (&z, &v);
  }
  gst_structure_id_take_value (s, field_quarks[F_IN_CONTRACT], &in);
  gst_structure_id_take_value (s, field_quarks[F_INPUT_RMS], &rms);
  gst_structure_id_take_value (s, field_quarks[F_POOLED_Z], &z);
}

/* An array of n values of type t taken from rows[i] at byte offset off. */
static void
gst_sattn_meta_take_array (GstStructure * s, GQuark field, GType t,
    const GstSattnMetaRow * rows, guint n, gsize off)
{
  GValue arr = G_VALUE_INIT;
  guint i;

  gst_value_array_init (&arr, n);
  for (i = 0; i < n; i++) {
    const guint8 *p = (const guint8 *) &rows[i] + off;
    GValue v = G_VALUE_INIT;

    g_value_init (&v, t);
    if (t == G_TYPE_UINT64)
      g_value_set_uint64 (&v, *(const guint64 *) p);
    else if (t == G_TYPE_UINT)
      g_value_set_uint (&v, *(const guint32 *) p);
    else
      g_value_set_boolean (&v, *(const gboolean *) p);
    gst_value_array_append_and_take_value (&arr, &v);
  }
  gst_structure_id_take_value (s, field, &arr);
}

void
gst_sattn_meta_add_custom (GstBuffer * buffer, const GstSattnMeta * meta)
{
  GstCustomMeta *cm = (GstCustomMeta *) gst_buffer_add_meta (buffer,
      gst_sattn_meta_custom_get_info (), NULL);
  GstStructure *s;
  guint n = meta->n_rows;

  if (cm == NULL)
    return;
  s = gst_custom_meta_get_structure (cm);
  gst_structure_id_set (s, field_quarks[F_VERSION], G_TYPE_UINT,
      meta->version, field_quarks[F_WINDOW], G_TYPE_UINT, meta->window,
      field_quarks[F_ROW_BYTES], G_TYPE_UINT64, (guint64) meta->row_bytes,
      field_quarks[F_N_ROWS], G_TYPE_UINT, n, NULL);
  gst_sattn_meta_take_array (s, field_quarks[F_FIRST_FRAME], G_TYPE_UINT64,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, first_frame));
  gst_sattn_meta_take_array (s, field_quarks[F_N_FRAMES], G_TYPE_UINT,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, n_frames));
  gst_sattn_meta_take_array (s, field_quarks[F_VALID_KEYS], G_TYPE_UINT,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, valid_keys));
  gst_sattn_meta_take_array (s, field_quarks[F_MASKED_KEYS], G_TYPE_UINT,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, masked_keys));
  gst_sattn_meta_take_array (s, field_quarks[F_FULLY_MASKED_ROWS],
      G_TYPE_UINT, meta->rows, n,
      G_STRUCT_OFFSET (GstSattnMetaRow, fully_masked_rows));
  gst_sattn_meta_take_array (s, field_quarks[F_VALID], G_TYPE_BOOLEAN,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, valid));
  gst_sattn_meta_take_array (s, field_quarks[F_WINDOW_START], G_TYPE_UINT64,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, window_start));
  gst_sattn_meta_take_array (s, field_quarks[F_WINDOW_END], G_TYPE_UINT64,
      meta->rows, n, G_STRUCT_OFFSET (GstSattnMetaRow, window_end));
  gst_sattn_meta_take_checks (s, meta->checks, n);
}
