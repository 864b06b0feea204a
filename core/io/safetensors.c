/* The safetensors reader of libsattn: a file (or its bytes) validated
 * and parsed into tensors converted to float32 and metadata.
 *
 * The only part of the core, with io/dtype.c and io/layouts.c, that uses
 * GLib (containers, file helpers) and json-glib (the JSON header).
 * Everything read from a file is validated before it is trusted: sizes
 * are checked against the bytes actually present, never allocated from
 * what the header claims.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "io/io.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* A safetensors header needs nesting depth 3 (root, tensor, shape).
 * json-glib's parser recurses once per level without a limit, so a header
 * of deeply nested brackets would exhaust the stack: refuse them first. */
#define MAX_JSON_DEPTH 32
/* json-glib needs about 80 bytes per JSON value; limiting the values keeps
 * a hostile 100 MB header of "[0,0,0,..." from costing gigabytes.  A
 * million values describe well over 100 000 tensors. */
#define MAX_JSON_VALUES 1000000
/* json-glib keeps an object's members in a GHashTable with g_str_hash,
 * which is easy to collide on purpose: 32 000 colliding keys already cost
 * 40 s of string comparisons, half a million would hang for hours.  The
 * keys are hashed beforehand and an object with more than MAX_SAME_HASH
 * keys of one hash value, or more than MAX_OBJECT_MEMBERS members, is
 * refused.  (Genuine names collide in 32 bits about never.) */
#define MAX_SAME_HASH 32
#define MAX_OBJECT_MEMBERS 65536

/* ------------------------------------------------------------- messages */

void sattn_io_set_err (char *err, size_t err_len, const char *fmt, ...)
    G_GNUC_PRINTF (3, 4);

void
sattn_io_set_err (char *err, size_t err_len, const char *fmt, ...)
{
  va_list ap;

  if (err == NULL || err_len == 0)
    return;
  va_start (ap, fmt);
  g_vsnprintf (err, err_len, fmt, ap);
  va_end (ap);
}

SattnStatus sattn_io_fail (SattnStatus st, char *err, size_t err_len,
                           const char *fmt, ...) G_GNUC_PRINTF (4, 5);

SattnStatus
sattn_io_fail (SattnStatus st, char *err, size_t err_len, const char *fmt, ...)
{
  va_list ap;

  if (err != NULL && err_len > 0) {
    va_start (ap, fmt);
    g_vsnprintf (err, err_len, fmt, ap);
    va_end (ap);
  }
  return st;
}

const char *
sattn_io_show (ShowBuf *b, const char *name)
{
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  const size_t cap = sizeof b->s - 4; /* room for "..." and NUL */

  for (const unsigned char *p = (const unsigned char *) name; *p; p++) {
    if (*p >= 0x20 && *p < 0x7f && *p != '\\') {
      if (o + 1 > cap)
        goto cut;
      b->s[o++] = (char) *p;
    } else {
      if (o + 4 > cap)
        goto cut;
      b->s[o++] = '\\';
      b->s[o++] = 'x';
      b->s[o++] = hex[*p >> 4];
      b->s[o++] = hex[*p & 15];
    }
  }
  b->s[o] = '\0';
  return b->s;
cut:
  memcpy (b->s + o, "...", 4);
  return b->s;
}

/* "[3, 4]" into buf. */
const char *
sattn_io_shape_str (char *buf, size_t len, const size_t *shape, size_t ndim)
{
  size_t o = 0;

  buf[0] = '\0';
  o += (size_t) g_snprintf (buf, len, "[");
  for (size_t i = 0; i < ndim && o < len; i++)
    o += (size_t) g_snprintf (buf + o, len - o, "%s%zu", i ? ", " : "",
                              shape[i]);
  if (o < len)
    g_snprintf (buf + o, len - o, "]");
  return buf;
}

/* ------------------------------------------------------ the file handle */

/* What get() returns for a tensor without elements. */
static const float empty_tensor[1];

void
sattn_tensor_file_free (SattnTensorFile *f)
{
  if (f == NULL)
    return;
  for (size_t i = 0; i < f->n; i++) {
    g_free (f->t[i].name);
    g_free (f->t[i].shape);
    if (f->t[i].data != empty_tensor)
      sattn_mem_free (f->t[i].data);
  }
  g_free (f->t);
  if (f->index != NULL)
    g_hash_table_unref (f->index);
  if (f->meta != NULL)
    g_hash_table_unref (f->meta);
  g_free (f);
}

/* g_str_hash of a JSON key as json-glib will store it: raw is the key
 * with its quotes; escaped keys are decoded by json-glib itself. */
static guint32
key_hash (const char *raw, size_t len, gboolean escaped)
{
  char *text = g_strndup (raw, len);
  guint32 h = 0;

  if (!escaped) {
    text[len - 1] = '\0';
    h = g_str_hash (text + 1);
  } else {
    JsonNode *node = json_from_string (text, NULL);
    if (node != NULL && JSON_NODE_HOLDS_VALUE (node) &&
        json_node_get_value_type (node) == G_TYPE_STRING)
      h = g_str_hash (json_node_get_string (node));
    if (node != NULL)
      json_node_unref (node);
  }
  g_free (text);
  return h;
}

typedef struct {
  guint32 object; /* ordinal of the object holding the key */
  guint32 hash;
} KeyHash;

static int
cmp_key_hash (const void *a, const void *b)
{
  const KeyHash *x = a, *y = b;

  if (x->object != y->object)
    return x->object < y->object ? -1 : 1;
  if (x->hash != y->hash)
    return x->hash < y->hash ? -1 : 1;
  return 0;
}

/* Guards run on the raw header before json-glib sees it: nesting depth
 * (MAX_JSON_DEPTH), value count (MAX_JSON_VALUES), members per object and
 * colliding keys (MAX_OBJECT_MEMBERS, MAX_SAME_HASH).  This only finds
 * strings, brackets and separators; json-glib does the parsing. */
static SattnStatus
check_json_shape (const char *h, size_t n, char *err, size_t err_len)
{
  char open[MAX_JSON_DEPTH];
  guint32 object[MAX_JSON_DEPTH], members[MAX_JSON_DEPTH];
  size_t depth = 0, values = 1, run = 0;
  guint32 objects = 0;
  GArray *keys = g_array_new (FALSE, FALSE, sizeof (KeyHash));
  SattnStatus st = SATTN_OK;

  for (size_t i = 0; i < n && st == SATTN_OK; i++) {
    char c = h[i];

    if (c == '"') {
      size_t j = i + 1, k;
      gboolean escaped = FALSE;
      while (j < n && h[j] != '"') {
        if (h[j] == '\\') {
          escaped = TRUE;
          j++;
        }
        j++;
      }
      if (j >= n)
        break; /* unterminated: json-glib reports it */
      for (k = j + 1; k < n && (h[k] == ' ' || h[k] == '\t' || h[k] == '\n' ||
                                h[k] == '\r');
           k++)
        ;
      if (k < n && h[k] == ':' && depth > 0 && open[depth - 1] == '{') {
        KeyHash kh = { object[depth - 1],
                       key_hash (h + i, j + 1 - i, escaped) };
        if (++members[depth - 1] > MAX_OBJECT_MEMBERS)
          st = sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                              "invalid header: an object with more than %d "
                              "members",
                              MAX_OBJECT_MEMBERS);
        g_array_append_val (keys, kh);
      }
      i = j;
      continue;
    }
    switch (c) {
      case '[':
      case '{':
        if (depth == MAX_JSON_DEPTH) {
          st = sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                              "invalid header: JSON nested deeper than %d "
                              "levels",
                              MAX_JSON_DEPTH);
          break;
        }
        open[depth] = c;
        object[depth] = objects++;
        members[depth] = 0;
        depth++;
        break;
      case ']':
      case '}':
        if (depth > 0)
          depth--;
        break;
      case ',':
      case ':':
        if (++values > MAX_JSON_VALUES)
          st = sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                              "invalid header: more than %d JSON values",
                              MAX_JSON_VALUES);
        break;
      default:
        break;
    }
  }

  if (st == SATTN_OK && keys->len > 1) {
    KeyHash *kh = (KeyHash *) (void *) keys->data;
    qsort (kh, keys->len, sizeof (KeyHash), cmp_key_hash);
    for (guint k = 1; k < keys->len; k++) {
      run = cmp_key_hash (&kh[k - 1], &kh[k]) == 0 ? run + 1 : 0;
      if (run + 1 > MAX_SAME_HASH) {
        st = sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                            "invalid header: more than %d keys of one object "
                            "share "
                            "a hash value (a crafted file?)",
                            MAX_SAME_HASH);
        break;
      }
    }
  }
  g_array_unref (keys);
  return st;
}

/* json-glib keeps the last of duplicate keys silently (and a key with an
 * escaped NUL collides with its C-string prefix).  A header whose keys
 * repeat is ambiguous -- readers may pick different tensors -- so the
 * members are counted as they are parsed: a member that does not grow its
 * object is a duplicate. */
typedef struct {
  GHashTable *counts; /* JsonObject * -> members seen */
  char *dup;          /* first duplicate key */
} DupCheck;

static void
on_object_member (JsonParser *parser, JsonObject *object, gchar *name,
                  gpointer user_data)
{
  DupCheck *dc = user_data;
  guint n = GPOINTER_TO_UINT (g_hash_table_lookup (dc->counts, object)) + 1;

  g_hash_table_insert (dc->counts, object, GUINT_TO_POINTER (n));
  if (json_object_get_size (object) < n && dc->dup == NULL)
    dc->dup = g_strdup (name);
}

/* A JSON integer >= 0 (json-glib wraps integers beyond int64 to negative
 * values, so those fail too). */
static gboolean
json_uint (JsonNode *node, uint64_t *out)
{
  gint64 v;

  if (node == NULL || !JSON_NODE_HOLDS_VALUE (node) ||
      json_node_get_value_type (node) != G_TYPE_INT64)
    return FALSE;
  v = json_node_get_int (node);
  if (v < 0)
    return FALSE;
  *out = (uint64_t) v;
  return TRUE;
}

static SattnStatus
parse_tensor (Tensor *t, const char *name, JsonNode *node, uint64_t data_len,
              char *err, size_t err_len)
{
  ShowBuf sb;
  JsonObject *o;
  JsonNode *dn, *sn, *on;
  JsonArray *sa, *oa;
  const char *dt;
  uint64_t nbytes = 0;
  int overflow = 0, has_zero = 0;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: entry '%s' is not an object",
                          sattn_io_show (&sb, name));
  o = json_node_get_object (node);
  dn = json_object_get_member (o, "dtype");
  sn = json_object_get_member (o, "shape");
  on = json_object_get_member (o, "data_offsets");
  if (dn == NULL || sn == NULL || on == NULL)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: tensor '%s' lacks \"%s\"",
                          sattn_io_show (&sb, name),
                          dn == NULL   ? "dtype"
                          : sn == NULL ? "shape"
                                       : "data_offsets");
  if (!JSON_NODE_HOLDS_VALUE (dn) ||
      json_node_get_value_type (dn) != G_TYPE_STRING)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: dtype of tensor '%s' is not a "
                          "string",
                          sattn_io_show (&sb, name));
  dt = json_node_get_string (dn);
  t->dtype = sattn_io_find_dtype (dt);
  if (t->dtype == NULL) {
    ShowBuf sd;
    return sattn_io_fail (SATTN_E_DTYPE, err, err_len,
                          "tensor '%s' has unknown dtype '%s' (supported: F32, "
                          "F16, "
                          "BF16, F64)",
                          sattn_io_show (&sb, name), sattn_io_show (&sd, dt));
  }

  if (!JSON_NODE_HOLDS_ARRAY (sn))
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: shape of tensor '%s' is not an "
                          "array",
                          sattn_io_show (&sb, name));
  sa = json_node_get_array (sn);
  t->ndim = json_array_get_length (sa);
  if (t->ndim > 0)
    t->shape = g_new (size_t, t->ndim);
  t->numel = 1;
  for (size_t i = 0; i < t->ndim; i++) {
    uint64_t d;
    if (!json_uint (json_array_get_element (sa, (guint) i), &d) || d > SIZE_MAX)
      return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                            "invalid header: shape of tensor '%s' has an entry "
                            "that "
                            "is not a non-negative integer",
                            sattn_io_show (&sb, name));
    t->shape[i] = (size_t) d;
    if (d == 0)
      has_zero = 1;
    else if (!overflow && t->numel > SIZE_MAX / d)
      overflow = 1;
    else if (!overflow)
      t->numel *= (size_t) d;
  }
  if (has_zero)
    t->numel = 0;
  else if (overflow || t->numel > UINT64_MAX / t->dtype->size)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "tensor '%s': element count of its shape overflows",
                          sattn_io_show (&sb, name));
  nbytes = (uint64_t) t->numel * t->dtype->size;

  if (!JSON_NODE_HOLDS_ARRAY (on) ||
      json_array_get_length (oa = json_node_get_array (on)) != 2 ||
      !json_uint (json_array_get_element (oa, 0), &t->begin) ||
      !json_uint (json_array_get_element (oa, 1), &t->end))
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: data_offsets of tensor '%s' is not "
                          "a pair "
                          "of non-negative integers",
                          sattn_io_show (&sb, name));
  if (t->begin > t->end)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "tensor '%s': data_offsets [%" G_GUINT64_FORMAT
                          ", %" G_GUINT64_FORMAT "] end before they begin",
                          sattn_io_show (&sb, name), t->begin, t->end);
  if (t->end > data_len)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "tensor '%s': data_offsets [%" G_GUINT64_FORMAT
                          ", %" G_GUINT64_FORMAT
                          "] run past the end of the data (%" G_GUINT64_FORMAT
                          " bytes): the file is truncated or corrupt",
                          sattn_io_show (&sb, name), t->begin, t->end,
                          data_len);
  if (t->end - t->begin != nbytes) {
    char s[96];
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "tensor '%s': shape %s of %s needs %" G_GUINT64_FORMAT
                          " bytes but data_offsets [%" G_GUINT64_FORMAT
                          ", %" G_GUINT64_FORMAT "] hold %" G_GUINT64_FORMAT,
                          sattn_io_show (&sb, name),
                          sattn_io_shape_str (s, sizeof s, t->shape, t->ndim),
                          t->dtype->name, nbytes, t->begin, t->end,
                          t->end - t->begin);
  }
  t->name = g_strdup (name);
  return SATTN_OK;
}

static int
cmp_offsets (const void *a, const void *b)
{
  const Tensor *x = a, *y = b;

  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

/* The header's length from the file's first 8 bytes (*hlen), checked
 * against the file's len bytes, and the header's JSON shape. */
static SattnStatus
check_header (const uint8_t *data, size_t len, uint64_t *hlen, char *err,
              size_t err_len)
{
  if (len < 8)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "file too short (%zu bytes) for the 8-byte header "
                          "length: not a safetensors file",
                          len);
  *hlen = sattn_io_read_le64 (data);
  if (*hlen > SATTN_TENSOR_MAX_HEADER)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "header length %" G_GUINT64_FORMAT
                          " exceeds the limit of %" G_GUINT64_FORMAT
                          " bytes: not a safetensors file",
                          *hlen, SATTN_TENSOR_MAX_HEADER);
  if (*hlen > len - 8)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "header length %" G_GUINT64_FORMAT
                          " runs past the end of the file (%zu bytes): "
                          "truncated or not a safetensors file",
                          *hlen, len);
  const char *header = (const char *) data + 8;
  if (*hlen < 2 || header[0] != '{')
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: does not start with a JSON object");
  return check_json_shape (header, (size_t) *hlen, err, err_len);
}

/* The header's JSON object (*root, owned by parser) without a key twice
 * (dc counts them while parsing). */
static SattnStatus
parse_header (JsonParser *parser, DupCheck *dc, const char *header,
              uint64_t hlen, JsonObject **root, char *err, size_t err_len)
{
  GError *gerr = NULL;
  ShowBuf sb;
  g_signal_connect (parser, "object-member", G_CALLBACK (on_object_member), dc);
  if (!json_parser_load_from_data (parser, header, (gssize) hlen, &gerr)) {
    SattnStatus st =
        sattn_io_fail (SATTN_E_FORMAT, err, err_len, "invalid JSON header: %s",
                       gerr != NULL ? gerr->message : "parse error");
    g_clear_error (&gerr);
    return st;
  }
  if (dc->dup != NULL)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: key '%s' appears twice",
                          sattn_io_show (&sb, dc->dup));
  JsonNode *node = json_parser_get_root (parser);
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT (node))
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: the JSON is not an object");
  *root = json_node_get_object (node);
  return SATTN_OK;
}

/* __metadata__ (node) into f->meta: an object of strings. */
static SattnStatus
read_metadata (SattnTensorFile *f, JsonNode *node, char *err, size_t err_len)
{
  JsonObjectIter mi;
  const gchar *key;
  JsonNode *val;
  ShowBuf sb;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "invalid header: __metadata__ is not an object");
  json_object_iter_init (&mi, json_node_get_object (node));
  while (json_object_iter_next (&mi, &key, &val)) {
    if (!JSON_NODE_HOLDS_VALUE (val) ||
        json_node_get_value_type (val) != G_TYPE_STRING)
      return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                            "invalid header: __metadata__ value of '%s' is "
                            "not a string",
                            sattn_io_show (&sb, key));
    g_hash_table_replace (f->meta, g_strdup (key),
                          g_strdup (json_node_get_string (val)));
  }
  return SATTN_OK;
}

/* Every member of the header's object: the metadata, and each tensor's
 * entry into f->t (f->n counts them, a partial one included so that
 * sattn_tensor_file_free releases its shape). */
static SattnStatus
read_entries (SattnTensorFile *f, JsonObject *root, uint64_t data_len,
              char *err, size_t err_len)
{
  JsonObjectIter it;
  const gchar *name;
  JsonNode *node;
  SattnStatus st;
  ShowBuf sb;
  json_object_iter_init (&it, root);
  while (json_object_iter_next (&it, &name, &node)) {
    if (strcmp (name, "__metadata__") == 0) {
      if ((st = read_metadata (f, node, err, err_len)) != SATTN_OK)
        return st;
      continue;
    }
    st = parse_tensor (&f->t[f->n], name, node, data_len, err, err_len);
    f->n++;
    if (st != SATTN_OK)
      return st;
    /* Already excluded by DupCheck; kept as the index's own guard. */
    if (g_hash_table_contains (f->index, f->t[f->n - 1].name))
      return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                            "invalid header: tensor name '%s' appears twice",
                            sattn_io_show (&sb, f->t[f->n - 1].name));
    g_hash_table_insert (f->index, f->t[f->n - 1].name, NULL);
  }
  return SATTN_OK;
}

/* The data buffer (data_len bytes) must be covered exactly: no overlap
 * (two tensors sharing bytes), no gap, nothing after the last tensor.
 * Sorts f->t by offsets. */
static SattnStatus
check_coverage (SattnTensorFile *f, uint64_t data_len, char *err,
                size_t err_len)
{
  uint64_t pos = 0;
  ShowBuf sb;
  qsort (f->t, f->n, sizeof (Tensor), cmp_offsets);
  for (size_t k = 0; k < f->n; k++) {
    const Tensor *t = &f->t[k];
    if (t->begin < pos) {
      ShowBuf sa2;
      return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                            "tensors '%s' [%" G_GUINT64_FORMAT
                            ", %" G_GUINT64_FORMAT
                            "] and '%s' [%" G_GUINT64_FORMAT
                            ", %" G_GUINT64_FORMAT "] overlap",
                            sattn_io_show (&sb, f->t[k - 1].name),
                            f->t[k - 1].begin, f->t[k - 1].end,
                            sattn_io_show (&sa2, t->name), t->begin, t->end);
    }
    if (t->begin > pos)
      return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                            "data bytes [%" G_GUINT64_FORMAT
                            ", %" G_GUINT64_FORMAT
                            ") belong to no tensor (before '%s')",
                            pos, t->begin, sattn_io_show (&sb, t->name));
    pos = t->end;
  }
  if (pos != data_len)
    return sattn_io_fail (SATTN_E_FORMAT, err, err_len,
                          "%" G_GUINT64_FORMAT
                          " bytes after the last tensor belong to no tensor",
                          data_len - pos);
  return SATTN_OK;
}

/* Index by name, convert the float tensors from the data buffer buf.
 * Every element takes at least 2 bytes of data, so the floats take at
 * most twice the data. */
static SattnStatus
convert_tensors (SattnTensorFile *f, const uint8_t *buf, char *err,
                 size_t err_len)
{
  ShowBuf sb;
  g_hash_table_remove_all (f->index);
  for (size_t k = 0; k < f->n; k++) {
    Tensor *t = &f->t[k];
    g_hash_table_insert (f->index, t->name, t);
    if (t->dtype->kind == KIND_OTHER)
      continue;
    if (t->numel == 0) {
      t->data = (float *) empty_tensor;
      continue;
    }
    t->data = sattn_mem_calloc (t->numel, sizeof (float), 64);
    if (t->data == NULL)
      return sattn_io_fail (SATTN_E_NOMEM, err, err_len,
                            "out of memory converting tensor '%s' (%zu "
                            "elements)",
                            sattn_io_show (&sb, t->name), t->numel);
    sattn_io_convert (t->dtype->kind, buf + t->begin, t->numel, t->data);
  }
  return SATTN_OK;
}

SattnStatus
sattn_tensor_file_load_bytes (const uint8_t *data, size_t len,
                              SattnTensorFile **out, char *err, size_t err_len)
{
  SattnTensorFile *f = NULL;
  JsonParser *parser = NULL;
  JsonObject *root = NULL;
  uint64_t hlen = 0;
  SattnStatus st;
  DupCheck dc = { NULL, NULL };

  sattn_io_set_err (err, err_len, "%s", "");
  if (out == NULL || (data == NULL && len > 0))
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  *out = NULL;
  if ((st = check_header (data, len, &hlen, err, err_len)) != SATTN_OK)
    return st;

  parser = json_parser_new_immutable ();
  dc.counts = g_hash_table_new (g_direct_hash, g_direct_equal);
  st = parse_header (parser, &dc, (const char *) data + 8, hlen, &root, err,
                     err_len);
  if (st == SATTN_OK) {
    const uint64_t data_len = (uint64_t) len - 8 - hlen;
    const size_t n_members = json_object_get_size (root);
    f = g_new0 (SattnTensorFile, 1);
    f->index = g_hash_table_new (g_str_hash, g_str_equal);
    f->meta = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
    f->t = g_new0 (Tensor, n_members > 0 ? n_members : 1);
    if ((st = read_entries (f, root, data_len, err, err_len)) == SATTN_OK &&
        (st = check_coverage (f, data_len, err, err_len)) == SATTN_OK)
      st = convert_tensors (f, data + 8 + hlen, err, err_len);
  }

  g_object_unref (parser);
  g_hash_table_unref (dc.counts);
  g_free (dc.dup);
  if (st != SATTN_OK) {
    sattn_tensor_file_free (f);
    return st;
  }
  *out = f;
  return SATTN_OK;
}

SattnStatus
sattn_tensor_file_load (const char *path, SattnTensorFile **out, char *err,
                        size_t err_len)
{
  struct stat sbuf;
  uint8_t *data = NULL;
  size_t len, got = 0;
  SattnStatus st;
  ShowBuf sb;
  int fd;

  sattn_io_set_err (err, err_len, "%s", "");
  if (out == NULL)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  *out = NULL;
  if (path == NULL)
    return sattn_io_fail (SATTN_E_INVAL, err, err_len, "no weights file given");

  /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
  fd = g_open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    return sattn_io_fail (SATTN_E_IO, err, err_len, "cannot open '%s': %s",
                          sattn_io_show (&sb, path), g_strerror (e));
  }
  /* Only regular files: a FIFO or a device could block or never end. */
  if (fstat (fd, &sbuf) != 0 || !S_ISREG (sbuf.st_mode)) {
    close (fd);
    return sattn_io_fail (SATTN_E_IO, err, err_len,
                          "'%s' is not a regular file",
                          sattn_io_show (&sb, path));
  }
  if ((uint64_t) sbuf.st_size > SIZE_MAX) {
    close (fd);
    return sattn_io_fail (SATTN_E_IO, err, err_len, "'%s' is too large",
                          sattn_io_show (&sb, path));
  }
  len = (size_t) sbuf.st_size;
  data = sattn_mem_alloc (len > 0 ? len : 1, 64);
  if (data == NULL) {
    close (fd);
    return sattn_io_fail (SATTN_E_NOMEM, err, err_len,
                          "out of memory reading '%s' (%zu bytes)",
                          sattn_io_show (&sb, path), len);
  }
  while (got < len) {
    ssize_t r = read (fd, data + got, len - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = errno;
      close (fd);
      sattn_mem_free (data);
      return sattn_io_fail (SATTN_E_IO, err, err_len, "cannot read '%s': %s",
                            sattn_io_show (&sb, path), g_strerror (e));
    }
    if (r == 0)
      break; /* shrank while reading: parse what is there */
    got += (size_t) r;
  }
  close (fd);
  st = sattn_tensor_file_load_bytes (data, got, out, err, err_len);
  sattn_mem_free (data);
  return st;
}

size_t
sattn_tensor_file_n_tensors (const SattnTensorFile *f)
{
  return f != NULL ? f->n : 0;
}

const char *
sattn_tensor_file_name (const SattnTensorFile *f, size_t i)
{
  return f != NULL && i < f->n ? f->t[i].name : NULL;
}

const Tensor *
sattn_io_lookup (const SattnTensorFile *f, const char *name)
{
  if (f == NULL || name == NULL)
    return NULL;
  return g_hash_table_lookup (f->index, name);
}

const char *
sattn_tensor_file_dtype (const SattnTensorFile *f, const char *name)
{
  const Tensor *t = sattn_io_lookup (f, name);
  return t != NULL ? t->dtype->name : NULL;
}

size_t
sattn_tensor_file_numel (const SattnTensorFile *f, const char *name)
{
  const Tensor *t = sattn_io_lookup (f, name);
  return t != NULL ? t->numel : 0;
}

const float *
sattn_tensor_file_get (const SattnTensorFile *f, const char *name, size_t *ndim,
                       const size_t **shape)
{
  const Tensor *t = sattn_io_lookup (f, name);

  if (t == NULL || t->data == NULL)
    return NULL;
  if (ndim != NULL)
    *ndim = t->ndim;
  if (shape != NULL)
    *shape = t->shape;
  return t->data;
}

const char *
sattn_tensor_file_metadata (const SattnTensorFile *f, const char *key)
{
  if (f == NULL || key == NULL)
    return NULL;
  return g_hash_table_lookup (f->meta, key);
}
