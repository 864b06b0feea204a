/* The weights layer of libsattn: a safetensors reader and the mapping of a
 * torch.nn.MultiheadAttention state dict onto SattnConfig / SattnWeights.
 *
 * The only file of the core that uses GLib (containers, file helpers) and
 * json-glib (the JSON header).  Everything read from a file is validated
 * before it is trusted: sizes are checked against the bytes actually
 * present, never allocated from what the header claims.
 */
#include "sattn/sattn-weights.h"
#include "internal.h"

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

static void set_err (char *err, size_t err_len, const char *fmt, ...)
  G_GNUC_PRINTF (3, 4);

static void
set_err (char *err, size_t err_len, const char *fmt, ...)
{
  va_list ap;

  if (err == NULL || err_len == 0)
    return;
  va_start (ap, fmt);
  g_vsnprintf (err, err_len, fmt, ap);
  va_end (ap);
}

static SattnStatus fail (SattnStatus st, char *err, size_t err_len,
                         const char *fmt, ...) G_GNUC_PRINTF (4, 5);

static SattnStatus
fail (SattnStatus st, char *err, size_t err_len, const char *fmt, ...)
{
  va_list ap;

  if (err != NULL && err_len > 0) {
    va_start (ap, fmt);
    g_vsnprintf (err, err_len, fmt, ap);
    va_end (ap);
  }
  return st;
}

/* A printable, bounded rendering of a name taken from a file, for
 * messages: control and non-ASCII bytes escaped, long names cut. */
typedef struct {
  char s[200];
} ShowBuf;

static const char *
show (ShowBuf *b, const char *name)
{
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  const size_t cap = sizeof b->s - 4;  /* room for "..." and NUL */

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
static const char *
shape_str (char *buf, size_t len, const size_t *shape, size_t ndim)
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

/* --------------------------------------------------------------- dtypes */

typedef enum {
  KIND_OTHER = 0,  /* valid safetensors dtype, not converted */
  KIND_F32,
  KIND_F16,
  KIND_BF16,
  KIND_F64,
} DtypeKind;

typedef struct {
  const char *name;
  unsigned size;
  DtypeKind kind;
} Dtype;

/* The dtypes of the safetensors specification. */
static const Dtype dtypes[] = {
  { "F32", 4, KIND_F32 },   { "F16", 2, KIND_F16 },
  { "BF16", 2, KIND_BF16 }, { "F64", 8, KIND_F64 },
  { "BOOL", 1, KIND_OTHER }, { "U8", 1, KIND_OTHER },
  { "I8", 1, KIND_OTHER },  { "F8_E4M3", 1, KIND_OTHER },
  { "F8_E5M2", 1, KIND_OTHER }, { "I16", 2, KIND_OTHER },
  { "U16", 2, KIND_OTHER }, { "I32", 4, KIND_OTHER },
  { "U32", 4, KIND_OTHER }, { "I64", 8, KIND_OTHER },
  { "U64", 8, KIND_OTHER },
};

static const Dtype *
find_dtype (const char *name)
{
  for (size_t i = 0; i < G_N_ELEMENTS (dtypes); i++)
    if (strcmp (dtypes[i].name, name) == 0)
      return &dtypes[i];
  return NULL;
}

static float
f16_to_f32 (uint16_t h)
{
  unsigned e = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;

  if (e == 0)
    v = ldexpf ((float) mant, -24);                 /* zero, subnormal */
  else if (e == 31)
    v = mant ? NAN : INFINITY;
  else
    v = ldexpf ((float) (mant | 0x400), (int) e - 25);
  return (h & 0x8000) ? -v : v;
}

static float
bf16_to_f32 (uint16_t h)
{
  uint32_t bits = (uint32_t) h << 16;
  float v;

  memcpy (&v, &bits, sizeof v);
  return v;
}

/* Round to nearest float; beyond the float range +-Inf (IEEE overflow),
 * written out because C leaves out-of-range conversions undefined. */
static float
f64_to_f32 (double d)
{
  /* FLT_MAX plus half its ulp (2^103): from there on the rounding is Inf. */
  const double limit = (double) FLT_MAX + 0x1p103;

  if (isnan (d))
    return NAN;
  if (fabs (d) <= (double) FLT_MAX)
    return (float) d;
  if (d >= limit)
    return INFINITY;
  if (d <= -limit)
    return -INFINITY;
  return d > 0 ? FLT_MAX : -FLT_MAX;
}

static uint64_t
read_le64 (const uint8_t *p)
{
  uint64_t v = 0;

  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static void
convert (DtypeKind kind, const uint8_t *src, size_t n, float *dst)
{
  switch (kind) {
    case KIND_F32:
      for (size_t i = 0; i < n; i++) {
        const uint8_t *p = src + 4 * i;
        uint32_t b = (uint32_t) p[0] | (uint32_t) p[1] << 8 |
                     (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
        memcpy (&dst[i], &b, sizeof b);
      }
      break;
    case KIND_F16:
      for (size_t i = 0; i < n; i++)
        dst[i] = f16_to_f32 ((uint16_t) (src[2 * i] | src[2 * i + 1] << 8));
      break;
    case KIND_BF16:
      for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32 ((uint16_t) (src[2 * i] | src[2 * i + 1] << 8));
      break;
    case KIND_F64:
      for (size_t i = 0; i < n; i++) {
        uint64_t b = read_le64 (src + 8 * i);
        double d;
        memcpy (&d, &b, sizeof d);
        dst[i] = f64_to_f32 (d);
      }
      break;
    case KIND_OTHER:
      break;
  }
}

/* ------------------------------------------------------ the file handle */

typedef struct {
  char *name;
  const Dtype *dtype;
  size_t ndim;
  size_t *shape;      /* ndim sizes (NULL when ndim == 0) */
  size_t numel;
  uint64_t begin, end;
  float *data;        /* float kinds: numel floats; NULL otherwise */
} Tensor;

struct SattnTensorFile {
  size_t n;
  Tensor *t;          /* sorted by data offsets */
  GHashTable *index;  /* name -> Tensor * (borrowed) */
  GHashTable *meta;   /* key -> value (owned strings) */
};

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
      g_free (f->t[i].data);
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
  guint32 object;   /* ordinal of the object holding the key */
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
        break;            /* unterminated: json-glib reports it */
      for (k = j + 1; k < n && (h[k] == ' ' || h[k] == '\t' ||
                                h[k] == '\n' || h[k] == '\r'); k++)
        ;
      if (k < n && h[k] == ':' && depth > 0 && open[depth - 1] == '{') {
        KeyHash kh = { object[depth - 1], key_hash (h + i, j + 1 - i,
                                                    escaped) };
        if (++members[depth - 1] > MAX_OBJECT_MEMBERS)
          st = fail (SATTN_E_FORMAT, err, err_len,
                     "invalid header: an object with more than %d members",
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
          st = fail (SATTN_E_FORMAT, err, err_len,
                     "invalid header: JSON nested deeper than %d levels",
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
          st = fail (SATTN_E_FORMAT, err, err_len,
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
        st = fail (SATTN_E_FORMAT, err, err_len,
                   "invalid header: more than %d keys of one object share "
                   "a hash value (a crafted file?)", MAX_SAME_HASH);
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
  GHashTable *counts;  /* JsonObject * -> members seen */
  char *dup;           /* first duplicate key */
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
    return fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: entry '%s' is not an object", show (&sb, name));
  o = json_node_get_object (node);
  dn = json_object_get_member (o, "dtype");
  sn = json_object_get_member (o, "shape");
  on = json_object_get_member (o, "data_offsets");
  if (dn == NULL || sn == NULL || on == NULL)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: tensor '%s' lacks \"%s\"", show (&sb, name),
                 dn == NULL ? "dtype" : sn == NULL ? "shape" : "data_offsets");
  if (!JSON_NODE_HOLDS_VALUE (dn) ||
      json_node_get_value_type (dn) != G_TYPE_STRING)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: dtype of tensor '%s' is not a string",
                 show (&sb, name));
  dt = json_node_get_string (dn);
  t->dtype = find_dtype (dt);
  if (t->dtype == NULL) {
    ShowBuf sd;
    return fail (SATTN_E_DTYPE, err, err_len,
                 "tensor '%s' has unknown dtype '%s' (supported: F32, F16, "
                 "BF16, F64)", show (&sb, name), show (&sd, dt));
  }

  if (!JSON_NODE_HOLDS_ARRAY (sn))
    return fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: shape of tensor '%s' is not an array",
                 show (&sb, name));
  sa = json_node_get_array (sn);
  t->ndim = json_array_get_length (sa);
  if (t->ndim > 0)
    t->shape = g_new (size_t, t->ndim);
  t->numel = 1;
  for (size_t i = 0; i < t->ndim; i++) {
    uint64_t d;
    if (!json_uint (json_array_get_element (sa, (guint) i), &d) ||
        d > SIZE_MAX)
      return fail (SATTN_E_FORMAT, err, err_len,
                   "invalid header: shape of tensor '%s' has an entry that "
                   "is not a non-negative integer", show (&sb, name));
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
    return fail (SATTN_E_FORMAT, err, err_len,
                 "tensor '%s': element count of its shape overflows",
                 show (&sb, name));
  nbytes = (uint64_t) t->numel * t->dtype->size;

  if (!JSON_NODE_HOLDS_ARRAY (on) ||
      json_array_get_length (oa = json_node_get_array (on)) != 2 ||
      !json_uint (json_array_get_element (oa, 0), &t->begin) ||
      !json_uint (json_array_get_element (oa, 1), &t->end))
    return fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: data_offsets of tensor '%s' is not a pair "
                 "of non-negative integers", show (&sb, name));
  if (t->begin > t->end)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %"
                 G_GUINT64_FORMAT "] end before they begin", show (&sb, name),
                 t->begin, t->end);
  if (t->end > data_len)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %"
                 G_GUINT64_FORMAT "] run past the end of the data (%"
                 G_GUINT64_FORMAT " bytes): the file is truncated or corrupt",
                 show (&sb, name), t->begin, t->end, data_len);
  if (t->end - t->begin != nbytes) {
    char s[96];
    return fail (SATTN_E_FORMAT, err, err_len,
                 "tensor '%s': shape %s of %s needs %" G_GUINT64_FORMAT
                 " bytes but data_offsets [%" G_GUINT64_FORMAT ", %"
                 G_GUINT64_FORMAT "] hold %" G_GUINT64_FORMAT,
                 show (&sb, name), shape_str (s, sizeof s, t->shape, t->ndim),
                 t->dtype->name, nbytes, t->begin, t->end, t->end - t->begin);
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

SattnStatus
sattn_tensor_file_load_bytes (const uint8_t *data, size_t len,
                              SattnTensorFile **out, char *err, size_t err_len)
{
  SattnTensorFile *f = NULL;
  JsonParser *parser = NULL;
  JsonObject *root;
  JsonObjectIter it;
  const gchar *name;
  JsonNode *node;
  GError *gerr = NULL;
  const char *header;
  const uint8_t *buf;
  uint64_t hlen, data_len, pos;
  size_t n_members, k;
  SattnStatus st = SATTN_OK;
  DupCheck dc = { NULL, NULL };
  ShowBuf sb;

  set_err (err, err_len, "%s", "");
  if (out == NULL || (data == NULL && len > 0))
    return fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  *out = NULL;

  if (len < 8)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "file too short (%zu bytes) for the 8-byte header length: "
                 "not a safetensors file", len);
  hlen = read_le64 (data);
  if (hlen > SATTN_TENSOR_MAX_HEADER)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "header length %" G_GUINT64_FORMAT " exceeds the limit of %"
                 G_GUINT64_FORMAT " bytes: not a safetensors file", hlen,
                 SATTN_TENSOR_MAX_HEADER);
  if (hlen > len - 8)
    return fail (SATTN_E_FORMAT, err, err_len,
                 "header length %" G_GUINT64_FORMAT " runs past the end of "
                 "the file (%zu bytes): truncated or not a safetensors file",
                 hlen, len);
  header = (const char *) data + 8;
  if (hlen < 2 || header[0] != '{')
    return fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: does not start with a JSON object");
  st = check_json_shape (header, (size_t) hlen, err, err_len);
  if (st != SATTN_OK)
    return st;

  parser = json_parser_new_immutable ();
  dc.counts = g_hash_table_new (g_direct_hash, g_direct_equal);
  g_signal_connect (parser, "object-member", G_CALLBACK (on_object_member),
                    &dc);
  if (!json_parser_load_from_data (parser, header, (gssize) hlen, &gerr)) {
    st = fail (SATTN_E_FORMAT, err, err_len, "invalid JSON header: %s",
               gerr != NULL ? gerr->message : "parse error");
    g_clear_error (&gerr);
    goto out;
  }
  if (dc.dup != NULL) {
    st = fail (SATTN_E_FORMAT, err, err_len,
               "invalid header: key '%s' appears twice", show (&sb, dc.dup));
    goto out;
  }
  node = json_parser_get_root (parser);
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT (node)) {
    st = fail (SATTN_E_FORMAT, err, err_len,
               "invalid header: the JSON is not an object");
    goto out;
  }
  root = json_node_get_object (node);
  data_len = (uint64_t) len - 8 - hlen;
  buf = data + 8 + hlen;

  f = g_new0 (SattnTensorFile, 1);
  f->index = g_hash_table_new (g_str_hash, g_str_equal);
  f->meta = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  n_members = json_object_get_size (root);
  f->t = g_new0 (Tensor, n_members > 0 ? n_members : 1);

  json_object_iter_init (&it, root);
  while (json_object_iter_next (&it, &name, &node)) {
    if (strcmp (name, "__metadata__") == 0) {
      JsonObjectIter mi;
      const gchar *key;
      JsonNode *val;
      if (!JSON_NODE_HOLDS_OBJECT (node)) {
        st = fail (SATTN_E_FORMAT, err, err_len,
                   "invalid header: __metadata__ is not an object");
        goto out;
      }
      json_object_iter_init (&mi, json_node_get_object (node));
      while (json_object_iter_next (&mi, &key, &val)) {
        if (!JSON_NODE_HOLDS_VALUE (val) ||
            json_node_get_value_type (val) != G_TYPE_STRING) {
          st = fail (SATTN_E_FORMAT, err, err_len,
                     "invalid header: __metadata__ value of '%s' is not a "
                     "string", show (&sb, key));
          goto out;
        }
        g_hash_table_replace (f->meta, g_strdup (key),
                              g_strdup (json_node_get_string (val)));
      }
      continue;
    }
    st = parse_tensor (&f->t[f->n], name, node, data_len, err, err_len);
    if (st != SATTN_OK) {
      /* keep the partial entry so that free() releases its shape */
      f->n++;
      goto out;
    }
    /* Already excluded by DupCheck; kept as the index's own guard. */
    if (g_hash_table_contains (f->index, f->t[f->n].name)) {
      st = fail (SATTN_E_FORMAT, err, err_len,
                 "invalid header: tensor name '%s' appears twice",
                 show (&sb, f->t[f->n].name));
      f->n++;
      goto out;
    }
    g_hash_table_insert (f->index, f->t[f->n].name, NULL);
    f->n++;
  }

  /* The data buffer must be covered exactly: no overlap (two tensors
   * sharing bytes), no gap, nothing after the last tensor. */
  qsort (f->t, f->n, sizeof (Tensor), cmp_offsets);
  pos = 0;
  for (k = 0; k < f->n; k++) {
    const Tensor *t = &f->t[k];
    if (t->begin < pos) {
      ShowBuf sa2;
      st = fail (SATTN_E_FORMAT, err, err_len,
                 "tensors '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 "] and '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 "] overlap", show (&sb, f->t[k - 1].name), f->t[k - 1].begin,
                 f->t[k - 1].end, show (&sa2, t->name), t->begin, t->end);
      goto out;
    }
    if (t->begin > pos) {
      st = fail (SATTN_E_FORMAT, err, err_len,
                 "data bytes [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 ") belong to no tensor (before '%s')", pos, t->begin,
                 show (&sb, t->name));
      goto out;
    }
    pos = t->end;
  }
  if (pos != data_len) {
    st = fail (SATTN_E_FORMAT, err, err_len,
               "%" G_GUINT64_FORMAT " bytes after the last tensor belong to "
               "no tensor", data_len - pos);
    goto out;
  }

  /* Index by name, convert the float tensors.  Every element takes at
   * least 2 bytes of data, so the floats take at most twice the data. */
  g_hash_table_remove_all (f->index);
  for (k = 0; k < f->n; k++) {
    Tensor *t = &f->t[k];
    g_hash_table_insert (f->index, t->name, t);
    if (t->dtype->kind == KIND_OTHER)
      continue;
    if (t->numel == 0) {
      t->data = (float *) empty_tensor;
      continue;
    }
    t->data = g_try_new (float, t->numel);
    if (t->data == NULL) {
      st = fail (SATTN_E_NOMEM, err, err_len,
                 "out of memory converting tensor '%s' (%zu elements)",
                 show (&sb, t->name), t->numel);
      goto out;
    }
    convert (t->dtype->kind, buf + t->begin, t->numel, t->data);
  }

out:
  if (parser != NULL)
    g_object_unref (parser);
  if (dc.counts != NULL)
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

  set_err (err, err_len, "%s", "");
  if (out == NULL)
    return fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  *out = NULL;
  if (path == NULL)
    return fail (SATTN_E_INVAL, err, err_len, "no weights file given");

  /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
  fd = g_open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    return fail (SATTN_E_IO, err, err_len, "cannot open '%s': %s",
                 show (&sb, path), g_strerror (e));
  }
  /* Only regular files: a FIFO or a device could block or never end. */
  if (fstat (fd, &sbuf) != 0 || !S_ISREG (sbuf.st_mode)) {
    close (fd);
    return fail (SATTN_E_IO, err, err_len, "'%s' is not a regular file",
                 show (&sb, path));
  }
  if ((uint64_t) sbuf.st_size > SIZE_MAX) {
    close (fd);
    return fail (SATTN_E_IO, err, err_len, "'%s' is too large",
                 show (&sb, path));
  }
  len = (size_t) sbuf.st_size;
  data = g_try_malloc (len > 0 ? len : 1);
  if (data == NULL) {
    close (fd);
    return fail (SATTN_E_NOMEM, err, err_len,
                 "out of memory reading '%s' (%zu bytes)", show (&sb, path),
                 len);
  }
  while (got < len) {
    ssize_t r = read (fd, data + got, len - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int e = errno;
      close (fd);
      g_free (data);
      return fail (SATTN_E_IO, err, err_len, "cannot read '%s': %s",
                   show (&sb, path), g_strerror (e));
    }
    if (r == 0)
      break;       /* shrank while reading: parse what is there */
    got += (size_t) r;
  }
  close (fd);
  st = sattn_tensor_file_load_bytes (data, got, out, err, err_len);
  g_free (data);
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

static const Tensor *
lookup (const SattnTensorFile *f, const char *name)
{
  if (f == NULL || name == NULL)
    return NULL;
  return g_hash_table_lookup (f->index, name);
}

const char *
sattn_tensor_file_dtype (const SattnTensorFile *f, const char *name)
{
  const Tensor *t = lookup (f, name);
  return t != NULL ? t->dtype->name : NULL;
}

size_t
sattn_tensor_file_numel (const SattnTensorFile *f, const char *name)
{
  const Tensor *t = lookup (f, name);
  return t != NULL ? t->numel : 0;
}

const float *
sattn_tensor_file_get (const SattnTensorFile *f, const char *name,
                       size_t *ndim, const size_t **shape)
{
  const Tensor *t = lookup (f, name);

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

/* ------------------------------------------ nn.MultiheadAttention mapping */

struct SattnMhaWeights {
  float *block;   /* every array below lives in this one allocation */
};

void
sattn_mha_weights_free (SattnMhaWeights *mw)
{
  if (mw == NULL)
    return;
  g_free (mw->block);
  g_free (mw);
}

/* The state needed while mapping one module. */
typedef struct {
  const SattnTensorFile *f;
  const char *prefix;
  size_t e;
  char *err;
  size_t err_len;
} Mapper;

/* A tensor prefix + suffix, or NULL. */
static const Tensor *
find (const Mapper *m, const char *suffix)
{
  char *full = g_strconcat (m->prefix, suffix, NULL);
  const Tensor *t = lookup (m->f, full);
  g_free (full);
  return t;
}

/* Appends to s the label of a prefix that list_prefixes found holding
 * keys[k]: `shown` is the prefix as printable (show ()), p as it is. */
typedef void (*PrefixLabel) (GString *s, const char *shown, const char *p,
                             size_t k);

/* The prefixes under which the file holds a tensor named prefix + keys[k]
 * (the prefix empty or ending in '.'), for the message of a missing
 * module: the first 8 as label gives them, separated by ", ", then
 * " (N in all)" when there are more; "none" when there is none. */
static void
list_prefixes (const SattnTensorFile *f, const char *const *keys,
               size_t n_keys, PrefixLabel label, GString *s)
{
  size_t found = 0;

  for (size_t i = 0; i < f->n; i++) {
    const char *nm = f->t[i].name;
    size_t len = strlen (nm);
    for (size_t k = 0; k < n_keys; k++) {
      size_t kl = strlen (keys[k]);
      if (len >= kl && strcmp (nm + len - kl, keys[k]) == 0 &&
          (len == kl || nm[len - kl - 1] == '.')) {
        if (found < 8) {
          ShowBuf sb;
          char *p = g_strndup (nm, len - kl);
          if (found)
            g_string_append (s, ", ");
          label (s, show (&sb, p), p, k);
          g_free (p);
        }
        found++;
      }
    }
  }
  if (found == 0)
    g_string_append (s, "none");
  else if (found > 8)
    g_string_append_printf (s, " (%zu in all)", found);
}

static void
label_module (GString *s, const char *shown, const char *p, size_t k)
{
  g_string_append_printf (s, "'%s'%s", shown, p[0] ? "" : " (top level)");
}

/* The prefixes under which the file holds attention weights, for the
 * message of a missing module. */
static void
list_modules (const SattnTensorFile *f, GString *s)
{
  static const char *const keys[] = { "in_proj_weight", "q_proj_weight" };

  list_prefixes (f, keys, G_N_ELEMENTS (keys), label_module, s);
}

static SattnStatus
missing (const Mapper *m, const char *what)
{
  GString *s = g_string_new (NULL);
  ShowBuf sb;
  SattnStatus st;

  list_modules (m->f, s);
  st = fail (SATTN_E_MISSING, m->err, m->err_len,
             "no tensor %s under prefix '%s'; prefixes in the file with "
             "MultiheadAttention weights: %s", what, show (&sb, m->prefix),
             s->str);
  g_string_free (s, TRUE);
  return st;
}

/* Check that tensor t (named prefix+suffix) is float, has `rows` x `cols`
 * elements laid out as expected and holds finite values only.
 * cols == 0: a vector of `rows`, given either as (rows) or with leading
 * dimensions of 1 when lead1 is set.  sym is the symbolic expected shape. */
static SattnStatus
check (const Mapper *m, const Tensor *t, size_t rows, size_t cols,
       int lead1, const char *sym)
{
  ShowBuf sb;
  char got[96], want[96];
  int ok;
  size_t want_shape[2] = { rows, cols };

  if (t->data == NULL)
    return fail (SATTN_E_DTYPE, m->err, m->err_len,
                 "tensor '%s' has dtype %s; supported: F32, F16, BF16, F64",
                 show (&sb, t->name), t->dtype->name);
  if (cols > 0) {
    ok = t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols;
  } else {
    ok = t->ndim >= 1 && t->shape[t->ndim - 1] == rows &&
         (t->ndim == 1 || lead1);
    for (size_t i = 0; ok && i + 1 < t->ndim; i++)
      ok = t->shape[i] == 1;
  }
  if (!ok) {
    if (cols == 0 && lead1) {
      size_t w3[3] = { 1, 1, rows };
      shape_str (want, sizeof want, w3, 3);
    } else {
      shape_str (want, sizeof want, want_shape, cols > 0 ? 2 : 1);
    }
    return fail (SATTN_E_SHAPE, m->err, m->err_len,
                 "tensor '%s' has shape %s; expected %s, i.e. %s (E = "
                 "d_model = %zu)", show (&sb, t->name),
                 shape_str (got, sizeof got, t->shape, t->ndim), want, sym,
                 m->e);
  }
  size_t i = sattn_first_nonfinite (t->data, t->numel);
  if (i < t->numel) {
    if (t->ndim == 2 && t->shape[1] > 0)
      return fail (SATTN_E_NONFINITE, m->err, m->err_len,
                   "tensor '%s' holds %s at [%zu, %zu]", show (&sb, t->name),
                   isnan (t->data[i]) ? "NaN" : "Inf", i / t->shape[1],
                   i % t->shape[1]);
    return fail (SATTN_E_NONFINITE, m->err, m->err_len,
                 "tensor '%s' holds %s at element %zu", show (&sb, t->name),
                 isnan (t->data[i]) ? "NaN" : "Inf", i);
  }
  return SATTN_OK;
}

/* A metadata value "<prefix>key", or NULL. */
static const char *
meta_str (const Mapper *m, const char *key)
{
  char *full = g_strconcat (m->prefix, key, NULL);
  const char *v = sattn_tensor_file_metadata (m->f, full);
  g_free (full);
  return v;
}

/* A metadata value "<prefix>key" parsed as an unsigned integer; -1 when
 * absent or not a number. */
static gint64
meta_uint (const Mapper *m, const char *key)
{
  const char *v = meta_str (m, key);
  guint64 u;

  if (v == NULL || !g_ascii_string_to_unsigned (v, 10, 0, G_MAXINT64, &u,
                                                NULL))
    return -1;
  return (gint64) u;
}

/* A size the metadata records as "<prefix>key" (num_heads, head_dim,
 * value_dim); 0 when it is absent, 0 or not a number.  The one rule of
 * every mapper for a size in the metadata: 0 or missing means "not
 * given", as 0 does in SattnConfig. */
static size_t
meta_size (const Mapper *m, const char *key)
{
  gint64 v = meta_uint (m, key);
  return v > 0 ? (size_t) v : 0;
}

/* ------------------------------------- nn.TransformerEncoderLayer mapping */

struct SattnLayerWeights {
  float *block;   /* every array below lives in this one allocation */
};

void
sattn_layer_weights_free (SattnLayerWeights *lw)
{
  if (lw == NULL)
    return;
  g_free (lw->block);
  g_free (lw);
}

/* prefix with a '.' appended unless empty or ending in one (g_free it). */
static char *
dotted (const char *prefix)
{
  if (prefix == NULL)
    prefix = "";
  return (prefix[0] != '\0' && prefix[strlen (prefix) - 1] != '.') ?
      g_strconcat (prefix, ".", NULL) : g_strdup (prefix);
}

int
sattn_encoder_layer_present (const SattnTensorFile *f, const char *prefix)
{
  if (f == NULL)
    return 0;
  char *pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx };
  int yes = find (&m, "linear1.weight") != NULL &&
      find (&m, "linear2.weight") != NULL;
  g_free (pfx);
  return yes;
}

char *
sattn_attn_prefix (const SattnTensorFile *f, const char *prefix)
{
  char *pfx = dotted (prefix);
  const char *sub = sattn_encoder_layer_present (f, pfx) ? "self_attn." : "";
  size_t a = strlen (pfx), b = strlen (sub);
  char *r = malloc (a + b + 1);

  if (r != NULL) {
    memcpy (r, pfx, a);
    memcpy (r + a, sub, b + 1);
  }
  g_free (pfx);
  return r;
}

SattnStatus
sattn_encoder_weights_from_file (const SattnTensorFile *f, const char *prefix,
                                 SattnConfig *cfg_inout,
                                 SattnWeights *w_inout,
                                 SattnLayerWeights **owner, char *err,
                                 size_t err_len)
{
  static const char *const names[] = { "linear1.weight", "linear1.bias",
    "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
    "norm2.weight", "norm2.bias" };
  const Tensor *t[8];
  SattnLayerWeights *lw = NULL;
  SattnStatus st = SATTN_OK;
  ShowBuf sb;
  char *pfx;

  set_err (err, err_len, "%s", "");
  if (owner != NULL)
    *owner = NULL;
  if (f == NULL || cfg_inout == NULL || w_inout == NULL || owner == NULL ||
      cfg_inout->d_model == 0)
    return fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx, .e = cfg_inout->d_model, .err = err,
    .err_len = err_len };
  const size_t e = m.e;
  for (size_t i = 0; i < 8; i++)
    t[i] = find (&m, names[i]);
  if (t[0] == NULL || t[2] == NULL) {
    st = fail (SATTN_E_MISSING, err, err_len,
               "no tensor '%s%s' under prefix '%s': not an "
               "nn.TransformerEncoderLayer", show (&sb, pfx),
               names[t[0] == NULL ? 0 : 2], pfx);
    goto out;
  }
  /* The feed-forward width: the rows of linear1. */
  size_t dff = t[0]->ndim == 2 ? t[0]->shape[0] : 0;
  if (dff == 0 || dff > SIZE_MAX / 8 / e) {
    char got[96];
    st = fail (SATTN_E_SHAPE, err, err_len,
               "tensor '%s' has shape %s; expected (F, E) with F > 0 (E = "
               "d_model = %zu)", show (&sb, t[0]->name),
               shape_str (got, sizeof got, t[0]->shape, t[0]->ndim), e);
    goto out;
  }
  if ((st = check (&m, t[0], dff, e, 0, "(F, E)")) != SATTN_OK ||
      (t[1] && (st = check (&m, t[1], dff, 0, 0, "(F)")) != SATTN_OK) ||
      (st = check (&m, t[2], e, dff, 0, "(E, F)")) != SATTN_OK ||
      (t[3] && (st = check (&m, t[3], e, 0, 0, "(E)")) != SATTN_OK))
    goto out;
  for (size_t i = 4; i < 8; i++)
    if (t[i] && (st = check (&m, t[i], e, 0, 0, "(E)")) != SATTN_OK)
      goto out;

  size_t total = 2 * dff * e + dff + 5 * e;
  lw = g_new0 (SattnLayerWeights, 1);
  lw->block = g_try_new (float, total);
  if (lw->block == NULL) {
    st = fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }
  const size_t sizes[8] = { dff * e, dff, e * dff, e, e, e, e, e };
  const float **dst[8] = { &w_inout->w1, &w_inout->b1, &w_inout->w2,
    &w_inout->b2, &w_inout->norm1_w, &w_inout->norm1_b, &w_inout->norm2_w,
    &w_inout->norm2_b };
  size_t off = 0;
  for (size_t i = 0; i < 8; i++) {
    *dst[i] = NULL;
    if (t[i] == NULL)
      continue;
    memcpy (lw->block + off, t[i]->data, sizes[i] * sizeof (float));
    *dst[i] = lw->block + off;
    off += sizes[i];
  }
  g_assert (off <= total);
  cfg_inout->encoder = 1;
  cfg_inout->d_ff = dff;
  *owner = lw;
  lw = NULL;

out:
  sattn_layer_weights_free (lw);
  g_free (pfx);
  return st;
}

static const char *const positions_names[] = { "none", "rope",
  "rope-interleaved", "alibi" };
static const char *const activation_names[] = { "relu", "gelu" };

SattnStatus
sattn_options_from_file (const SattnTensorFile *f, const char *prefix,
                         unsigned set, SattnConfig *cfg_inout, char *err,
                         size_t err_len)
{
  SattnStatus st = SATTN_OK;
  SattnConfig c;
  ShowBuf sb;
  const char *v;

  set_err (err, err_len, "%s", "");
  if (f == NULL || cfg_inout == NULL)
    return fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  c = *cfg_inout;
  char *pfx = dotted (prefix);
  Mapper m = { .f = f, .prefix = pfx, .err = err, .err_len = err_len };

  if ((v = meta_str (&m, "activation")) != NULL) {
    size_t k = 0;
    while (k < G_N_ELEMENTS (activation_names) &&
           g_ascii_strcasecmp (v, activation_names[k]) != 0)
      k++;
    if (k == G_N_ELEMENTS (activation_names)) {
      st = fail (SATTN_E_INVAL, err, err_len, "the layer was exported with "
                 "activation '%s' (metadata '%sactivation'); sattn runs relu "
                 "and gelu", show (&sb, v), pfx);
      goto out;
    }
    if ((set & SATTN_SET_ACTIVATION) && (size_t) c.activation != k) {
      st = fail (SATTN_E_INVAL, err, err_len, "activation=%s but the layer "
                 "was exported with activation=%s (metadata '%sactivation')",
                 c.activation <= SATTN_ACTIVATION_GELU ?
                 activation_names[c.activation] : "?", activation_names[k],
                 pfx);
      goto out;
    }
    c.activation = (SattnActivation) k;
  }
  if ((v = meta_str (&m, "norm_first")) != NULL) {
    int nf = strcmp (v, "1") == 0 || g_ascii_strcasecmp (v, "true") == 0;
    if (!nf && strcmp (v, "0") != 0 && g_ascii_strcasecmp (v, "false") != 0) {
      st = fail (SATTN_E_INVAL, err, err_len, "metadata '%snorm_first' is "
                 "'%s'; expected 0 or 1", pfx, show (&sb, v));
      goto out;
    }
    if ((set & SATTN_SET_NORM_FIRST) && (c.norm_first != 0) != nf) {
      st = fail (SATTN_E_INVAL, err, err_len, "norm-first=%s but the layer "
                 "was exported with norm_first=%s (metadata '%snorm_first')",
                 c.norm_first ? "true" : "false", nf ? "true" : "false", pfx);
      goto out;
    }
    c.norm_first = nf;
  }
  if ((v = meta_str (&m, "norm_eps")) != NULL) {
    char *end = NULL;
    double eps = g_ascii_strtod (v, &end);
    if (end == v || *end != '\0' || !(eps >= 0.0) || isinf (eps)) {
      st = fail (SATTN_E_INVAL, err, err_len, "metadata '%snorm_eps' is "
                 "'%s'; expected a finite number >= 0", pfx, show (&sb, v));
      goto out;
    }
    double mine = c.norm_eps == 0.0 ? 1e-5 : c.norm_eps;
    if ((set & SATTN_SET_NORM_EPS) &&
        fabs (mine - eps) > 1e-9 * fmax (fabs (mine), fabs (eps))) {
      st = fail (SATTN_E_INVAL, err, err_len, "norm-eps=%g but the layer was "
                 "exported with norm_eps=%g (metadata '%snorm_eps')", mine,
                 eps, pfx);
      goto out;
    }
    c.norm_eps = eps;
  }
  if ((v = meta_str (&m, "positions")) != NULL) {
    size_t k = 0;
    while (k < G_N_ELEMENTS (positions_names) &&
           g_ascii_strcasecmp (v, positions_names[k]) != 0)
      k++;
    if (k == G_N_ELEMENTS (positions_names)) {
      st = fail (SATTN_E_INVAL, err, err_len, "metadata '%spositions' is "
                 "'%s'; sattn knows none, rope, rope-interleaved, alibi", pfx,
                 show (&sb, v));
      goto out;
    }
    if ((set & SATTN_SET_POSITIONS) && (size_t) c.positions != k) {
      st = fail (SATTN_E_INVAL, err, err_len, "positions=%s but the model "
                 "was exported with positions=%s (metadata '%spositions')",
                 c.positions <= SATTN_POSITIONS_ALIBI ?
                 positions_names[c.positions] : "?", positions_names[k], pfx);
      goto out;
    }
    c.positions = (SattnPositions) k;
  }
  if ((v = meta_str (&m, "rope_base")) != NULL) {
    char *end = NULL;
    double b = g_ascii_strtod (v, &end);
    if (end == v || *end != '\0' || !(b > 1.0) || isinf (b)) {
      st = fail (SATTN_E_INVAL, err, err_len, "metadata '%srope_base' is "
                 "'%s'; expected a number > 1", pfx, show (&sb, v));
      goto out;
    }
    double mine = c.rope_base == 0.0 ? 10000.0 : c.rope_base;
    if ((set & SATTN_SET_ROPE_BASE) && mine != b) {
      st = fail (SATTN_E_INVAL, err, err_len, "rope-base=%g but the model "
                 "was exported with rope_base=%g (metadata '%srope_base')",
                 mine, b, pfx);
      goto out;
    }
    c.rope_base = b;
  }
  *cfg_inout = c;

out:
  g_free (pfx);
  return st;
}

/* add_zero_attn against the module's metadata, when it records one. */
static SattnStatus
check_zero_attn (const Mapper *m, int add_zero_attn)
{
  gint64 meta = meta_uint (m, "add_zero_attn");
  ShowBuf sb;

  if (meta >= 0 && (meta != 0) != (add_zero_attn != 0))
    return fail (SATTN_E_INVAL, m->err, m->err_len,
                 "add_zero_attn = %d but the module was exported with "
                 "add_zero_attn = %d (metadata '%sadd_zero_attn')",
                 add_zero_attn != 0, meta != 0, show (&sb, m->prefix));
  return SATTN_OK;
}

/* The arrays of one attention module, found and checked: the Q/K/V
 * weights fused (fw) or apart, their biases fused (fb) or apart, each
 * present one; the output projection, bias_k / bias_v optional. */
typedef struct {
  const Tensor *fw, *fb, *qw, *qb, *kw, *kb, *vw, *vb, *ow, *ob, *bk, *bv;
} ModuleTensors;

/* A new handle owning one block with the module's arrays: Wq Wk Wv (E
 * inputs e, Dq = dq rows for queries and keys, Dv = dv for values), Wo
 * (d_out x Dv), then the biases; *w_out points into it (NULL where the
 * file has none).  NULL when out of memory. */
static SattnMhaWeights *
pack_module (const ModuleTensors *t, size_t e, size_t dq, size_t dv,
             size_t d_out, int add_zero_attn, SattnWeights *w_out)
{
  size_t total = (2 * dq + dv) * e + (t->ow ? d_out * dv : 0) + 2 * dq + dv +
      (t->ob ? d_out : 0) + (t->bk ? dq + dv : 0);
  SattnMhaWeights *mw = g_new0 (SattnMhaWeights, 1);
  size_t off;
  float *p;

  mw->block = g_try_new (float, total);
  if (mw->block == NULL) {
    g_free (mw);
    return NULL;
  }
  p = mw->block;
  *w_out = (SattnWeights) { 0 };
  if (t->fw != NULL) {
    memcpy (p, t->fw->data, (2 * dq + dv) * e * sizeof (float));
  } else {
    memcpy (p, t->qw->data, dq * e * sizeof (float));
    memcpy (p + dq * e, t->kw->data, dq * e * sizeof (float));
    memcpy (p + 2 * dq * e, t->vw->data, dv * e * sizeof (float));
  }
  w_out->wq = p;
  w_out->wk = p + dq * e;
  w_out->wv = p + 2 * dq * e;
  off = (2 * dq + dv) * e;
  if (t->ow != NULL) {
    memcpy (p + off, t->ow->data, d_out * dv * sizeof (float));
    w_out->wo = p + off;
    off += d_out * dv;
  }
  /* Biases: the fused vector, or each one present (absent = NULL). */
  if (t->fb != NULL) {
    memcpy (p + off, t->fb->data, (2 * dq + dv) * sizeof (float));
    w_out->bq = p + off;
    w_out->bk = p + off + dq;
    w_out->bv = p + off + 2 * dq;
  } else {
    if (t->qb != NULL) {
      memcpy (p + off, t->qb->data, dq * sizeof (float));
      w_out->bq = p + off;
    }
    if (t->kb != NULL) {
      memcpy (p + off + dq, t->kb->data, dq * sizeof (float));
      w_out->bk = p + off + dq;
    }
    if (t->vb != NULL) {
      memcpy (p + off + 2 * dq, t->vb->data, dv * sizeof (float));
      w_out->bv = p + off + 2 * dq;
    }
  }
  off += 2 * dq + dv;
  if (t->ob != NULL) {
    memcpy (p + off, t->ob->data, d_out * sizeof (float));
    w_out->bo = p + off;
    off += d_out;
  }
  if (t->bk != NULL) {
    memcpy (p + off, t->bk->data, dq * sizeof (float));
    memcpy (p + off + dq, t->bv->data, dv * sizeof (float));
    w_out->bias_k = p + off;
    w_out->bias_v = p + off + dq;
    off += dq + dv;
  }
  g_assert (off == total);
  w_out->add_zero_attn = add_zero_attn != 0;
  return mw;
}

SattnStatus
sattn_mha_weights_from_file (const SattnTensorFile *f, const char *prefix,
                             size_t d_model, size_t heads, int add_zero_attn,
                             SattnConfig *cfg_inout, SattnWeights *w_out,
                             SattnMhaWeights **owner, char *err,
                             size_t err_len)
{
  Mapper m = { 0 };
  const Tensor *in_w, *q_w, *k_w, *v_w, *in_b, *o_w, *o_b, *bk, *bv;
  SattnMhaWeights *mw = NULL;
  SattnStatus st = SATTN_OK;
  char *pfx = NULL;
  ShowBuf sb;
  size_t e, meta;

  set_err (err, err_len, "%s", "");
  if (owner != NULL)
    *owner = NULL;
  if (f == NULL || cfg_inout == NULL || w_out == NULL || owner == NULL)
    return fail (SATTN_E_INVAL, err, err_len, "invalid argument");
  if (heads == 0)
    return fail (SATTN_E_INVAL, err, err_len, "heads must be at least 1");

  pfx = dotted (prefix);
  m.f = f;
  m.prefix = pfx;
  m.err = err;
  m.err_len = err_len;

  in_w = find (&m, "in_proj_weight");
  q_w = find (&m, "q_proj_weight");
  k_w = find (&m, "k_proj_weight");
  v_w = find (&m, "v_proj_weight");
  in_b = find (&m, "in_proj_bias");
  o_w = find (&m, "out_proj.weight");
  o_b = find (&m, "out_proj.bias");
  bk = find (&m, "bias_k");
  bv = find (&m, "bias_v");

  if (in_w != NULL && (q_w != NULL || k_w != NULL || v_w != NULL)) {
    st = fail (SATTN_E_FORMAT, err, err_len,
               "both in_proj_weight and separate q/k/v_proj_weight under "
               "prefix '%s': ambiguous", show (&sb, pfx));
    goto out;
  }
  if (in_w == NULL && q_w == NULL && k_w == NULL && v_w == NULL) {
    st = missing (&m, "'in_proj_weight' (or q/k/v_proj_weight)");
    goto out;
  }
  if (in_w == NULL && (q_w == NULL || k_w == NULL || v_w == NULL)) {
    st = missing (&m, q_w == NULL ? "'q_proj_weight'" :
                  k_w == NULL ? "'k_proj_weight'" : "'v_proj_weight'");
    goto out;
  }
  if (o_w == NULL) {
    st = missing (&m, "'out_proj.weight'");
    goto out;
  }
  if ((bk == NULL) != (bv == NULL)) {
    st = missing (&m, bk == NULL ? "'bias_k' (bias_v is present)" :
                  "'bias_v' (bias_k is present)");
    goto out;
  }

  /* The embedding size: given, or the input width of the projection. */
  e = d_model;
  if (e == 0) {
    const Tensor *t = in_w != NULL ? in_w : q_w;
    if (t->ndim == 2)
      e = t->shape[1];
    if (e == 0) {
      char got[96];
      st = fail (SATTN_E_SHAPE, err, err_len,
                 "tensor '%s' has shape %s; expected a 2-D tensor %s with "
                 "E > 0", show (&sb, t->name),
                 shape_str (got, sizeof got, t->shape, t->ndim),
                 in_w != NULL ? "(3E, E)" : "(E, E)");
      goto out;
    }
  }
  m.e = e;
  if (e > SIZE_MAX / 8 / e) {
    st = fail (SATTN_E_SHAPE, err, err_len, "embedding size %zu too large",
               e);
    goto out;
  }

  if (in_w != NULL) {
    st = check (&m, in_w, 3 * e, e, 0, "(3E, E)");
  } else {
    /* kdim / vdim other than E cannot be fed from the same frame. */
    if ((st = check (&m, q_w, e, e, 0, "(E, E)")) != SATTN_OK ||
        (st = check (&m, k_w, e, e, 0,
                     "(E, kdim) with kdim = E for self-attention"))
        != SATTN_OK)
      goto out;
    st = check (&m, v_w, e, e, 0,
                "(E, vdim) with vdim = E for self-attention");
  }
  if (st != SATTN_OK)
    goto out;
  if (in_b != NULL && (st = check (&m, in_b, 3 * e, 0, 0, "(3E)")) != SATTN_OK)
    goto out;
  if ((st = check (&m, o_w, e, e, 0, "(E, E)")) != SATTN_OK)
    goto out;
  if (o_b != NULL && (st = check (&m, o_b, e, 0, 0, "(E)")) != SATTN_OK)
    goto out;
  if (bk != NULL &&
      ((st = check (&m, bk, e, 0, 1, "(1, 1, E)")) != SATTN_OK ||
       (st = check (&m, bv, e, 0, 1, "(1, 1, E)")) != SATTN_OK))
    goto out;

  if (e % heads != 0) {
    st = fail (SATTN_E_SHAPE, err, err_len,
               "heads = %zu does not divide the embedding size E = %zu",
               heads, e);
    goto out;
  }
  meta = meta_size (&m, "num_heads");
  if (meta != 0 && meta != heads) {
    st = fail (SATTN_E_SHAPE, err, err_len,
               "heads = %zu but the module was exported with num_heads = "
               "%zu (metadata '%snum_heads')", heads, meta, show (&sb, pfx));
    goto out;
  }
  if ((st = check_zero_attn (&m, add_zero_attn)) != SATTN_OK)
    goto out;

  /* Copy what is used into one block owned by the handle. */
  {
    const ModuleTensors t = { in_w, in_b, q_w, NULL, k_w, NULL, v_w, NULL,
      o_w, o_b, bk, bv };
    mw = pack_module (&t, e, e, e, e, add_zero_attn, w_out);
  }
  if (mw == NULL) {
    st = fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }

  cfg_inout->d_model = e;
  cfg_inout->heads = heads;
  cfg_inout->d_head = e / heads;
  cfg_inout->d_value = e / heads;
  cfg_inout->d_out = e;
  *owner = mw;
  mw = NULL;

out:
  sattn_mha_weights_free (mw);
  g_free (pfx);
  return st;
}

/* The message of a _load function whose file (path) loaded and mapped
 * with status st and message msg: empty on success, msg alone when the
 * loader's I/O message names the path already, else the path in front. */
static void
load_message (SattnStatus st, const char *path, const char *msg, char *err,
              size_t err_len)
{
  ShowBuf sb;

  if (st == SATTN_OK)
    set_err (err, err_len, "%s", "");
  else if (st == SATTN_E_IO || path == NULL)
    set_err (err, err_len, "%s", msg);
  else
    set_err (err, err_len, "'%s': %s", show (&sb, path), msg);
}

SattnStatus
sattn_mha_weights_load (const char *path, const char *prefix, size_t d_model,
                        size_t heads, int add_zero_attn,
                        SattnConfig *cfg_inout, SattnWeights *w_out,
                        SattnMhaWeights **owner, char *err, size_t err_len)
{
  SattnTensorFile *f = NULL;
  SattnStatus st;
  char msg[1024];

  if (owner != NULL)
    *owner = NULL;
  st = sattn_tensor_file_load (path, &f, msg, sizeof msg);
  if (st == SATTN_OK) {
    st = sattn_mha_weights_from_file (f, prefix, d_model, heads,
                                      add_zero_attn, cfg_inout, w_out, owner,
                                      msg, sizeof msg);
    sattn_tensor_file_free (f);
  }
  load_message (st, path, msg, err, err_len);
  return st;
}

/* ------------------------------------------- attention modules, any layout */

/* One way of naming an attention module's tensors.  Linear layers are
 * given by their module name (tensors name.weight / name.bias); the
 * nn.MultiheadAttention layouts name their tensors directly. */
typedef struct {
  SattnLayout layout;
  const char *fused_w, *fused_b;          /* [Wq; Wk; Wv] and its bias */
  const char *q_w, *q_b, *k_w, *k_b, *v_w, *v_b;
  const char *o_w[2], *o_b[2];            /* output projection names */
  int out_required;                       /* nn.MultiheadAttention */
  int bias_kv;                            /* bias_k / bias_v allowed */
} LayoutDef;

static const LayoutDef layouts[] = {
  { SATTN_LAYOUT_MHA, "in_proj_weight", "in_proj_bias",
    NULL, NULL, NULL, NULL, NULL, NULL,
    { "out_proj.weight" }, { "out_proj.bias" }, 1, 1 },
  { SATTN_LAYOUT_MHA_SEPARATE, NULL, "in_proj_bias",
    "q_proj_weight", NULL, "k_proj_weight", NULL, "v_proj_weight", NULL,
    { "out_proj.weight" }, { "out_proj.bias" }, 1, 1 },
  { SATTN_LAYOUT_HF, NULL, NULL,
    "q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
    "v_proj.weight", "v_proj.bias",
    { "out_proj.weight", "o_proj.weight" }, { "out_proj.bias", "o_proj.bias" },
    0, 0 },
  { SATTN_LAYOUT_BERT, NULL, NULL,
    "query.weight", "query.bias", "key.weight", "key.bias",
    "value.weight", "value.bias",
    { "output.dense.weight" }, { "output.dense.bias" }, 0, 0 },
  { SATTN_LAYOUT_BERT, NULL, NULL,
    "self.query.weight", "self.query.bias", "self.key.weight",
    "self.key.bias", "self.value.weight", "self.value.bias",
    { "output.dense.weight" }, { "output.dense.bias" }, 0, 0 },
  { SATTN_LAYOUT_DIFFUSERS, NULL, NULL,
    "to_q.weight", "to_q.bias", "to_k.weight", "to_k.bias",
    "to_v.weight", "to_v.bias",
    { "to_out.0.weight" }, { "to_out.0.bias" }, 0, 0 },
  { SATTN_LAYOUT_LLAMA, NULL, NULL,
    "wq.weight", "wq.bias", "wk.weight", "wk.bias", "wv.weight", "wv.bias",
    { "wo.weight" }, { "wo.bias" }, 0, 0 },
  { SATTN_LAYOUT_SEEDS, NULL, NULL,
    "W_q.weight", "W_q.bias", "W_k.weight", "W_k.bias",
    "W_v.weight", "W_v.bias",
    { "W_o.weight" }, { "W_o.bias" }, 0, 0 },
  { SATTN_LAYOUT_FUSED, "qkv.weight", "qkv.bias",
    NULL, NULL, NULL, NULL, NULL, NULL,
    { "proj.weight" }, { "proj.bias" }, 0, 0 },
};

const char *
sattn_layout_name (SattnLayout layout)
{
  switch (layout) {
    case SATTN_LAYOUT_MHA: return "mha";
    case SATTN_LAYOUT_MHA_SEPARATE: return "mha-separate";
    case SATTN_LAYOUT_HF: return "hf";
    case SATTN_LAYOUT_BERT: return "bert";
    case SATTN_LAYOUT_DIFFUSERS: return "diffusers";
    case SATTN_LAYOUT_LLAMA: return "llama";
    case SATTN_LAYOUT_SEEDS: return "seeds";
    case SATTN_LAYOUT_FUSED: return "fused";
    case SATTN_LAYOUT_NONE: break;
  }
  return "none";
}

/* The tensor that tells a layout is there. */
static const char *
layout_key (const LayoutDef *l)
{
  return l->fused_w != NULL ? l->fused_w : l->q_w;
}

static void
label_layout (GString *s, const char *shown, const char *p, size_t k)
{
  g_string_append_printf (s, "'%s' (%s)", shown,
                          sattn_layout_name (layouts[k].layout));
}

/* Every "prefix (layout)" of the file, for the message of a missing
 * module. */
static void
list_layouts (const SattnTensorFile *f, GString *s)
{
  const char *keys[G_N_ELEMENTS (layouts)];

  for (size_t k = 0; k < G_N_ELEMENTS (layouts); k++)
    keys[k] = layout_key (&layouts[k]);
  list_prefixes (f, keys, G_N_ELEMENTS (keys), label_layout, s);
}

/* A tensor of the module: float, 2-D (rows, cols) or 1-D (rows) when cols
 * is 0, finite.  rows or cols 0 in `want` are not checked (they are read
 * from the tensor by the caller first). */
static SattnStatus
check_linear (const Mapper *m, const Tensor *t, size_t rows, size_t cols,
              const char *sym)
{
  ShowBuf sb;
  char got[96];
  int ok = cols > 0 ? (t->ndim == 2 && t->shape[0] == rows &&
                       t->shape[1] == cols)
                    : (t->ndim == 1 && t->shape[0] == rows);

  if (t->data == NULL)
    return fail (SATTN_E_DTYPE, m->err, m->err_len,
                 "tensor '%s' has dtype %s; supported: F32, F16, BF16, F64",
                 show (&sb, t->name), t->dtype->name);
  if (!ok) {
    if (cols > 0)
      return fail (SATTN_E_SHAPE, m->err, m->err_len,
                   "tensor '%s' has shape %s; expected [%zu, %zu], i.e. %s",
                   show (&sb, t->name),
                   shape_str (got, sizeof got, t->shape, t->ndim), rows, cols,
                   sym);
    return fail (SATTN_E_SHAPE, m->err, m->err_len,
                 "tensor '%s' has shape %s; expected [%zu], i.e. %s",
                 show (&sb, t->name),
                 shape_str (got, sizeof got, t->shape, t->ndim), rows, sym);
  }
  return check (m, t, rows, cols, 0, sym);   /* dtype, finiteness */
}

/* A 2-D float tensor's rows and columns; an error when it is not one. */
static SattnStatus
matrix_dims (const Mapper *m, const Tensor *t, size_t *rows, size_t *cols)
{
  ShowBuf sb;
  char got[96];

  if (t->ndim != 2 || t->shape[0] == 0 || t->shape[1] == 0)
    return fail (SATTN_E_SHAPE, m->err, m->err_len,
                 "tensor '%s' has shape %s; expected a 2-D (out, in) "
                 "weight with both sizes > 0", show (&sb, t->name),
                 shape_str (got, sizeof got, t->shape, t->ndim));
  *rows = t->shape[0];
  *cols = t->shape[1];
  return SATTN_OK;
}

/* A requested size (caller or metadata) against the one the shapes give. */
static SattnStatus
resolve_dim (const Mapper *m, const char *what, const char *noun,
             size_t caller, size_t total, size_t heads, size_t *out,
             SattnSource *from)
{
  ShowBuf sb;
  const char *key = what;
  size_t meta = meta_size (m, key);

  if (caller != 0 && meta != 0 && meta != caller)
    return fail (SATTN_E_SHAPE, m->err, m->err_len,
                 "%s = %zu but the module was exported with %s = %zu "
                 "(metadata '%s%s')", what, caller, key, meta,
                 show (&sb, m->prefix), key);
  if (caller != 0) {
    *out = caller;
    *from = SATTN_FROM_CALLER;
  } else if (meta != 0) {
    *out = meta;
    *from = SATTN_FROM_METADATA;
  } else {
    if (total % heads != 0)
      return fail (SATTN_E_SHAPE, m->err, m->err_len,
                   "heads = %zu does not divide the %zu %s values of the "
                   "projections under prefix '%s'", heads, total, noun,
                   show (&sb, m->prefix));
    *out = total / heads;
    *from = SATTN_FROM_SHAPES;
    return SATTN_OK;
  }
  if (*out > total || total % *out != 0 || total / *out != heads)
    return fail (SATTN_E_SHAPE, m->err, m->err_len,
                 "heads = %zu x %s = %zu %s values, but the projections "
                 "under prefix '%s' have %zu%s (%s = 0 takes it from the "
                 "file)", heads, what, *out, noun, show (&sb, m->prefix),
                 total, total % heads == 0 ? "" : ", which heads does not "
                 "divide", what);
  return SATTN_OK;
}

SattnStatus
sattn_attn_weights_from_file (const SattnTensorFile *f, const char *prefix,
                              int add_zero_attn, SattnConfig *cfg_inout,
                              SattnWeights *w_out, SattnMhaWeights **owner,
                              SattnAttnReport *report, char *err,
                              size_t err_len)
{
  Mapper m = { 0 };
  const LayoutDef *l = NULL;
  const Tensor *fw = NULL, *fb = NULL, *qw = NULL, *qb = NULL, *kw = NULL;
  const Tensor *kb = NULL, *vw = NULL, *vb = NULL, *ow = NULL, *ob = NULL;
  const Tensor *bk = NULL, *bv = NULL;
  SattnAttnReport rep = { 0 };
  SattnMhaWeights *mw = NULL;
  SattnStatus st = SATTN_OK;
  char *pfx = NULL;
  ShowBuf sb;
  size_t e, dq, dv, dk, d_out, heads, d_head, d_value, total, cols;
  size_t found = 0, meta;
  GString *names = NULL;

  set_err (err, err_len, "%s", "");
  if (owner != NULL)
    *owner = NULL;
  if (f == NULL || cfg_inout == NULL || w_out == NULL || owner == NULL)
    return fail (SATTN_E_INVAL, err, err_len, "invalid argument");

  pfx = dotted (prefix);
  m.f = f;
  m.prefix = pfx;
  m.err = err;
  m.err_len = err_len;

  /* Which layouts are there: exactly one may be. */
  names = g_string_new (NULL);
  for (size_t k = 0; k < G_N_ELEMENTS (layouts); k++) {
    const LayoutDef *c = &layouts[k];
    const char *qkv[3] = { c->q_w, c->k_w, c->v_w };
    const Tensor *any = c->fused_w ? find (&m, c->fused_w) : NULL;
    for (size_t j = 0; any == NULL && c->fused_w == NULL && j < 3; j++)
      any = find (&m, qkv[j]);
    if (any == NULL)
      continue;
    g_string_append_printf (names, "%s%s ('%s')", found ? ", " : "",
                            sattn_layout_name (c->layout),
                            show (&sb, any->name));
    found++;
    l = c;
  }
  if (found == 0) {
    GString *s = g_string_new (NULL);
    list_layouts (f, s);
    st = fail (SATTN_E_MISSING, err, err_len,
               "no attention weights under prefix '%s' (looked for "
               "in_proj_weight, q_proj_weight, q_proj.weight, query.weight, "
               "self.query.weight, to_q.weight, wq.weight, W_q.weight, "
               "qkv.weight); prefixes in the file holding a known layout: %s",
               show (&sb, pfx), s->str);
    g_string_free (s, TRUE);
    goto out;
  }
  if (found > 1) {
    st = fail (SATTN_E_FORMAT, err, err_len,
               "%zu attention layouts under prefix '%s': %s; ambiguous "
               "(choose a longer weights prefix or remove one)", found,
               show (&sb, pfx), names->str);
    goto out;
  }
  rep.layout = l->layout;

  /* The layout's tensors. */
  if (l->fused_w != NULL) {
    fw = find (&m, l->fused_w);
  } else {
    const char *miss = NULL;
    qw = find (&m, l->q_w);
    kw = find (&m, l->k_w);
    vw = find (&m, l->v_w);
    miss = qw == NULL ? l->q_w : kw == NULL ? l->k_w : vw == NULL ? l->v_w
        : NULL;
    if (miss != NULL) {
      st = fail (SATTN_E_MISSING, err, err_len,
                 "attention layout %s under prefix '%s' is incomplete: no "
                 "tensor '%s%s'", sattn_layout_name (l->layout),
                 show (&sb, pfx), pfx, miss);
      goto out;
    }
    qb = l->q_b ? find (&m, l->q_b) : NULL;
    kb = l->k_b ? find (&m, l->k_b) : NULL;
    vb = l->v_b ? find (&m, l->v_b) : NULL;
  }
  fb = l->fused_b ? find (&m, l->fused_b) : NULL;
  for (size_t j = 0; j < 2 && l->o_w[j] != NULL; j++) {
    const Tensor *t = find (&m, l->o_w[j]);
    if (t != NULL && ow != NULL) {
      ShowBuf s1, s2;
      st = fail (SATTN_E_FORMAT, err, err_len,
                 "two output projections under prefix '%s': '%s' and '%s'; "
                 "ambiguous", show (&sb, pfx), show (&s1, ow->name),
                 show (&s2, t->name));
      goto out;
    }
    if (t != NULL) {
      ow = t;
      ob = find (&m, l->o_b[j]);
    }
  }
  if (ow == NULL && l->out_required) {
    st = missing (&m, "'out_proj.weight'");
    goto out;
  }
  if (ow == NULL) {
    for (size_t j = 0; j < 2 && l->o_b[j] != NULL; j++)
      if (find (&m, l->o_b[j]) != NULL) {
        st = fail (SATTN_E_MISSING, err, err_len,
                   "tensor '%s%s' without '%s%s' under prefix '%s'", pfx,
                   l->o_b[j], pfx, l->o_w[j], show (&sb, pfx));
        goto out;
      }
  }
  if (l->bias_kv) {
    bk = find (&m, "bias_k");
    bv = find (&m, "bias_v");
    if ((bk == NULL) != (bv == NULL)) {
      st = missing (&m, bk == NULL ? "'bias_k' (bias_v is present)" :
                    "'bias_v' (bias_k is present)");
      goto out;
    }
  }

  /* Sizes from the shapes. */
  if (fw != NULL) {
    size_t rows;
    if ((st = matrix_dims (&m, fw, &rows, &e)) != SATTN_OK)
      goto out;
    dq = dv = 0;
    total = rows;
  } else {
    size_t ck, cv;
    if ((st = matrix_dims (&m, qw, &dq, &e)) != SATTN_OK ||
        (st = matrix_dims (&m, kw, &dk, &ck)) != SATTN_OK ||
        (st = matrix_dims (&m, vw, &dv, &cv)) != SATTN_OK)
      goto out;
    if (ck != e || cv != e) {
      const Tensor *t = ck != e ? kw : vw;
      ShowBuf s2;
      char got[96];
      st = fail (SATTN_E_SHAPE, err, err_len,
                 "tensor '%s' has shape %s; expected [%zu, %zu]: "
                 "self-attention on frames needs the input size of '%s' "
                 "(kdim = vdim = d_model = %zu)", show (&sb, t->name),
                 shape_str (got, sizeof got, t->shape, t->ndim), t->shape[0],
                 e, show (&s2, qw->name), e);
      goto out;
    }
    if (dk != dq) {
      st = fail (SATTN_E_SHAPE, err, err_len,
                 "tensor '%s' has %zu rows but '%s' has %zu: queries and "
                 "keys of different sizes (fewer key heads, as in "
                 "grouped-query attention) are not supported",
                 show (&sb, qw->name), dq, kw->name, dk);
      goto out;
    }
    total = dq;
  }
  if (cfg_inout->d_model != 0 && cfg_inout->d_model != e) {
    const Tensor *t = fw != NULL ? fw : qw;
    size_t d = cfg_inout->d_model, rows = t->shape[0];
    char got[96];
    /* nn.MultiheadAttention's projections are E wide whatever E is. */
    if ((l->layout == SATTN_LAYOUT_MHA ||
         l->layout == SATTN_LAYOUT_MHA_SEPARATE) && rows % e == 0 &&
        rows / e <= SIZE_MAX / d)
      rows = rows / e * d;
    st = fail (SATTN_E_SHAPE, err, err_len,
               "tensor '%s' has shape %s; expected [%zu, %zu]: the attention "
               "weights take frames of %zu values, not d_model = %zu",
               show (&sb, t->name),
               shape_str (got, sizeof got, t->shape, t->ndim), rows, d, e, d);
    goto out;
  }
  m.e = e;

  /* Heads: caller, metadata, the caller's head size, or 1. */
  meta = meta_size (&m, "num_heads");
  if (cfg_inout->heads != 0 && meta != 0 && meta != cfg_inout->heads) {
    st = fail (SATTN_E_SHAPE, err, err_len,
               "heads = %zu but the module was exported with num_heads = "
               "%zu (metadata '%snum_heads')", cfg_inout->heads, meta,
               show (&sb, pfx));
    goto out;
  }
  if (cfg_inout->heads != 0) {
    heads = cfg_inout->heads;
    rep.heads_from = SATTN_FROM_CALLER;
  } else if (meta != 0) {
    heads = meta;
    rep.heads_from = SATTN_FROM_METADATA;
  } else if (cfg_inout->d_head != 0 && fw == NULL &&
             dq % cfg_inout->d_head == 0) {
    heads = dq / cfg_inout->d_head;
    rep.heads_from = SATTN_FROM_SHAPES;
  } else {
    heads = 1;
    rep.heads_from = SATTN_FROM_DEFAULT;
  }

  if (fw != NULL) {
    /* [Wq; Wk; Wv] with 2 Dq + Dv rows: thirds unless told otherwise
     * (nn.MultiheadAttention's in_proj_weight: always thirds). */
    size_t dh = cfg_inout->d_head != 0 ? cfg_inout->d_head
        : meta_size (&m, "head_dim");
    if (l->layout == SATTN_LAYOUT_MHA)
      dh = 0;
    if (dh != 0) {
      if (dh > total / 2 / heads || 2 * heads * dh >= total) {
        st = fail (SATTN_E_SHAPE, err, err_len,
                   "tensor '%s' has %zu rows: too few for 2 x heads (%zu) x "
                   "head_dim (%zu) plus values", show (&sb, fw->name), total,
                   heads, dh);
        goto out;
      }
      dq = heads * dh;
      dv = total - 2 * dq;
    } else {
      if (total % 3 != 0) {
        st = fail (SATTN_E_SHAPE, err, err_len,
                   "tensor '%s' has %zu rows, not a multiple of 3: give "
                   "the head size (head-dim) to split it", show (&sb,
                   fw->name), total);
        goto out;
      }
      dq = dv = total / 3;
    }
  }
  if ((st = resolve_dim (&m, "head_dim", "query/key", cfg_inout->d_head,
                         dq, heads, &d_head, &rep.d_head_from)) != SATTN_OK ||
      (st = resolve_dim (&m, "value_dim", "value", cfg_inout->d_value,
                         dv, heads, &d_value, &rep.d_value_from)) != SATTN_OK)
    goto out;

  if (dq > SIZE_MAX / 4 / e || dv > SIZE_MAX / 4 / e) {
    st = fail (SATTN_E_SHAPE, err, err_len, "projection sizes too large");
    goto out;
  }

  /* Every tensor's exact shape, dtype and finiteness. */
  if (fw != NULL) {
    if ((st = check_linear (&m, fw, 2 * dq + dv, e, "(2 Dq + Dv, E)"))
        != SATTN_OK)
      goto out;
  } else if ((st = check_linear (&m, qw, dq, e, "(Dq, E)")) != SATTN_OK ||
             (st = check_linear (&m, kw, dq, e, "(Dq, E)")) != SATTN_OK ||
             (st = check_linear (&m, vw, dv, e, "(Dv, E)")) != SATTN_OK) {
    goto out;
  }
  if (fb != NULL &&
      (st = check_linear (&m, fb, 2 * dq + dv, 0, "(2 Dq + Dv)")) != SATTN_OK)
    goto out;
  if ((qb != NULL && (st = check_linear (&m, qb, dq, 0, "(Dq)")) != SATTN_OK)
      || (kb != NULL && (st = check_linear (&m, kb, dq, 0, "(Dq)")) != SATTN_OK)
      || (vb != NULL && (st = check_linear (&m, vb, dv, 0, "(Dv)"))
          != SATTN_OK))
    goto out;
  d_out = dv;
  if (ow != NULL) {
    if ((st = matrix_dims (&m, ow, &d_out, &cols)) != SATTN_OK ||
        (st = check_linear (&m, ow, d_out, dv, "(d_out, Dv)")) != SATTN_OK)
      goto out;
    if (d_out > SIZE_MAX / 4 / dv) {
      st = fail (SATTN_E_SHAPE, err, err_len, "projection sizes too large");
      goto out;
    }
    if (ob != NULL &&
        (st = check_linear (&m, ob, d_out, 0, "(d_out)")) != SATTN_OK)
      goto out;
  }
  if (bk != NULL &&
      ((st = check (&m, bk, dq, 0, 1, "(1, 1, Dq)")) != SATTN_OK ||
       (st = check (&m, bv, dv, 0, 1, "(1, 1, Dv)")) != SATTN_OK))
    goto out;
  if ((st = check_zero_attn (&m, add_zero_attn)) != SATTN_OK)
    goto out;

  {
    const ModuleTensors t = { fw, fb, qw, qb, kw, kb, vw, vb, ow, ob, bk, bv };
    mw = pack_module (&t, e, dq, dv, d_out, add_zero_attn, w_out);
  }
  if (mw == NULL) {
    st = fail (SATTN_E_NOMEM, err, err_len, "out of memory");
    goto out;
  }

  rep.q_bias = fb != NULL || qb != NULL;
  rep.k_bias = fb != NULL || kb != NULL;
  rep.v_bias = fb != NULL || vb != NULL;
  rep.out_proj = ow != NULL;
  rep.out_bias = ob != NULL;
  rep.bias_kv = bk != NULL;
  cfg_inout->d_model = e;
  cfg_inout->heads = heads;
  cfg_inout->d_head = d_head;
  cfg_inout->d_value = d_value;
  cfg_inout->d_out = d_out;
  if (report != NULL)
    *report = rep;
  *owner = mw;
  mw = NULL;

out:
  if (names != NULL)
    g_string_free (names, TRUE);
  sattn_mha_weights_free (mw);
  g_free (pfx);
  return st;
}

SattnStatus
sattn_attn_weights_load (const char *path, const char *prefix,
                         int add_zero_attn, SattnConfig *cfg_inout,
                         SattnWeights *w_out, SattnMhaWeights **owner,
                         SattnAttnReport *report, char *err, size_t err_len)
{
  SattnTensorFile *f = NULL;
  SattnStatus st;
  char msg[1024];

  if (owner != NULL)
    *owner = NULL;
  st = sattn_tensor_file_load (path, &f, msg, sizeof msg);
  if (st == SATTN_OK) {
    st = sattn_attn_weights_from_file (f, prefix, add_zero_attn, cfg_inout,
                                       w_out, owner, report, msg, sizeof msg);
    sattn_tensor_file_free (f);
  }
  load_message (st, path, msg, err, err_len);
  return st;
}
