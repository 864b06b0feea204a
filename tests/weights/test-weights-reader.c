/* The safetensors reader and the nn.MultiheadAttention mapping of libsattn:
 * well-formed files, dtype conversion, and every malformed case, each with
 * its status and the words of its message checked.  Files are built here,
 * byte by byte, in a temporary directory; each case goes through both
 * sattn_tensor_file_load (the file) and sattn_tensor_file_load_bytes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sattn/sattn.h>
#include <sattn/sattn-weights.h>

#include <glib.h>
#include <glib/gstdio.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static gchar *tmpdir;

/* ------------------------------------------------------------ builder */

/* Builds a safetensors image: header entries and data appended in order. */
typedef struct {
  GString *header; /* JSON members, without the braces */
  GByteArray *data;
} Builder;

static Builder *
builder_new (const char *metadata_json)
{
  Builder *b = g_new0 (Builder, 1);
  b->header = g_string_new (NULL);
  b->data = g_byte_array_new ();
  if (metadata_json != NULL)
    g_string_append_printf (b->header, "\"__metadata__\":%s", metadata_json);
  return b;
}

/* An entry with an explicit header fragment and raw bytes. */
static void
builder_raw (Builder *b, const char *name, const char *dtype,
             const char *shape_json, const void *bytes, size_t nbytes)
{
  size_t off = b->data->len;
  if (b->header->len > 0)
    g_string_append_c (b->header, ',');
  g_string_append_printf (b->header,
                          "\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_"
                          "offsets\":[%zu,%zu]}",
                          name, dtype, shape_json, off, off + nbytes);
  if (nbytes > 0)
    g_byte_array_append (b->data, bytes, (guint) nbytes);
}

static void
put_le (GByteArray *a, uint64_t v, int bytes)
{
  for (int i = 0; i < bytes; i++) {
    guint8 c = (guint8) (v >> (8 * i));
    g_byte_array_append (a, &c, 1);
  }
}

/* IEEE half from a float that is exactly representable as a normal half
 * (or zero): the test data is chosen so. */
static uint16_t
f32_to_f16_exact (float f)
{
  uint32_t u, sign, e, m;
  memcpy (&u, &f, 4);
  sign = (u >> 16) & 0x8000;
  if ((u & 0x7fffffff) == 0)
    return (uint16_t) sign;
  if (isinf (f))
    return (uint16_t) (sign | 0x7c00);
  e = (u >> 23) & 0xff;
  m = u & 0x7fffff;
  g_assert (e >= 127 - 14 && e <= 127 + 15 && (m & 0x1fff) == 0);
  return (uint16_t) (sign | (e - 127 + 15) << 10 | m >> 13);
}

/* An entry of floats stored as dtype (F32, F16, BF16, F64, I64). */
static void
builder_add (Builder *b, const char *name, const char *dtype,
             const char *shape_json, const float *v, size_t n)
{
  GByteArray *a = g_byte_array_new ();
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy (&u, &v[i], 4);
    if (strcmp (dtype, "F32") == 0) {
      put_le (a, u, 4);
    } else if (strcmp (dtype, "BF16") == 0) {
      g_assert ((u & 0xffff) == 0);
      put_le (a, u >> 16, 2);
    } else if (strcmp (dtype, "F16") == 0) {
      put_le (a, f32_to_f16_exact (v[i]), 2);
    } else if (strcmp (dtype, "F64") == 0) {
      double d = v[i];
      uint64_t q;
      memcpy (&q, &d, 8);
      put_le (a, q, 8);
    } else if (strcmp (dtype, "I64") == 0) {
      put_le (a, (uint64_t) (int64_t) v[i], 8);
    } else {
      g_assert_not_reached ();
    }
  }
  builder_raw (b, name, dtype, shape_json, a->data, a->len);
  g_byte_array_unref (a);
}

/* The file image: 8-byte length, "{...}", data.  Frees b. */
static GBytes *
builder_finish (Builder *b)
{
  GByteArray *out = g_byte_array_new ();
  gchar *json = g_strdup_printf ("{%s}", b->header->str);
  put_le (out, strlen (json), 8);
  g_byte_array_append (out, (const guint8 *) json, (guint) strlen (json));
  g_byte_array_append (out, b->data->data, b->data->len);
  g_free (json);
  g_string_free (b->header, TRUE);
  g_byte_array_unref (b->data);
  g_free (b);
  return g_byte_array_free_to_bytes (out);
}

/* A file from a header string and raw data, header length as given. */
static GBytes *
image (uint64_t hlen, const char *header, const void *data, size_t dlen)
{
  GByteArray *out = g_byte_array_new ();
  put_le (out, hlen, 8);
  g_byte_array_append (out, (const guint8 *) header, (guint) strlen (header));
  if (dlen > 0)
    g_byte_array_append (out, data, (guint) dlen);
  return g_byte_array_free_to_bytes (out);
}

static GBytes *
image_json (const char *header, const void *data, size_t dlen)
{
  return image (strlen (header), header, data, dlen);
}

static gchar *
write_tmp (GBytes *bytes, const char *name)
{
  gchar *path = g_build_filename (tmpdir, name, NULL);
  gsize len;
  const gchar *d = g_bytes_get_data (bytes, &len);
  GError *e = NULL;
  g_assert_true (g_file_set_contents (path, d ? d : "", (gssize) len, &e));
  return path;
}

/* ----------------------------------------------------------- checking */

static void
assert_msg (const char *err, const char *const *words)
{
  for (size_t i = 0; words != NULL && words[i] != NULL; i++)
    if (strstr (err, words[i]) == NULL)
      g_error ("message \"%s\" lacks \"%s\"", err, words[i]);
}

#define WORDS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Loading bytes (from memory and from a file) fails with st and a message
 * holding every word.  Takes bytes. */
static void
expect_load_fail (GBytes *bytes, SattnStatus st, const char *const *words)
{
  SattnTensorFile *f = (SattnTensorFile *) 0x1;
  char err[512];
  gsize len;
  const guint8 *d = g_bytes_get_data (bytes, &len);
  gchar *path = write_tmp (bytes, "case.safetensors");
  SattnStatus got;

  got = sattn_tensor_file_load_bytes (d, len, &f, err, sizeof err);
  g_test_message ("bytes: %s: %s", sattn_status_string (got), err);
  g_assert_cmpint (got, ==, st);
  g_assert_null (f);
  assert_msg (err, words);

  f = (SattnTensorFile *) 0x1;
  got = sattn_tensor_file_load (path, &f, err, sizeof err);
  g_assert_cmpint (got, ==, st);
  g_assert_null (f);
  assert_msg (err, words);
  g_unlink (path);
  g_free (path);
  g_bytes_unref (bytes);
}

static SattnTensorFile *
load_ok (GBytes *bytes)
{
  SattnTensorFile *f = NULL;
  char err[512];
  gsize len;
  const guint8 *d = g_bytes_get_data (bytes, &len);
  SattnStatus st = sattn_tensor_file_load_bytes (d, len, &f, err, sizeof err);
  if (st != SATTN_OK)
    g_error ("load failed: %s: %s", sattn_status_string (st), err);
  g_assert_cmpstr (err, ==, "");
  g_bytes_unref (bytes);
  return f;
}

/* --------------------------------------------- an attention state dict */

typedef struct {
  size_t e;
  int bias, bias_kv, separate, no_out;
  const char *dtype;          /* of every tensor; NULL = F32 */
  const char *prefix;         /* NULL = "" */
  const char *metadata;       /* JSON object or NULL */
  const char *override;       /* suffix of a tensor to replace ... */
  const char *override_shape; /* ... by this shape (JSON) ... */
  size_t override_n;          /* ... with this many values */
  const char *override_dtype; /* ... or this dtype */
  const char *skip;           /* suffix of a tensor to leave out */
  float poison; /* nonzero: store it at element 5 of "poison_in" */
  const char *poison_in;
} Mha;

/* Deterministic values in [-0.5, 0.5), exact in F16 and BF16. */
static float
val (size_t tensor, size_t i)
{
  return (float) ((int) ((tensor * 7919 + i * 104729) % 64) - 32) / 64.0f;
}

static void
mha_tensor (Builder *b, const Mha *m, size_t id, const char *suffix,
            size_t rows, size_t cols, int lead1)
{
  gchar *name = g_strconcat (m->prefix ? m->prefix : "", suffix, NULL);
  gchar *shape;
  size_t n = rows * (cols ? cols : 1);
  const char *dtype = m->dtype ? m->dtype : "F32";
  float *v;

  if (m->skip && strcmp (m->skip, suffix) == 0) {
    g_free (name);
    return;
  }
  if (cols)
    shape = g_strdup_printf ("[%zu,%zu]", rows, cols);
  else if (lead1)
    shape = g_strdup_printf ("[1,1,%zu]", rows);
  else
    shape = g_strdup_printf ("[%zu]", rows);
  if (m->override && strcmp (m->override, suffix) == 0) {
    if (m->override_shape) {
      g_free (shape);
      shape = g_strdup (m->override_shape);
      n = m->override_n;
    }
    if (m->override_dtype)
      dtype = m->override_dtype;
  }
  v = g_new (float, n);
  for (size_t i = 0; i < n; i++)
    v[i] = val (id, i);
  if (m->poison != 0 && m->poison_in && strcmp (m->poison_in, suffix) == 0)
    v[5] = m->poison;
  builder_add (b, name, dtype, shape, v, n);
  g_free (v);
  g_free (shape);
  g_free (name);
}

static GBytes *
mha_file (const Mha *m)
{
  Builder *b = builder_new (m->metadata);
  size_t e = m->e;
  if (m->separate) {
    mha_tensor (b, m, 1, "q_proj_weight", e, e, 0);
    mha_tensor (b, m, 2, "k_proj_weight", e, e, 0);
    mha_tensor (b, m, 3, "v_proj_weight", e, e, 0);
  } else {
    mha_tensor (b, m, 0, "in_proj_weight", 3 * e, e, 0);
  }
  if (m->bias)
    mha_tensor (b, m, 4, "in_proj_bias", 3 * e, 0, 0);
  if (!m->no_out)
    mha_tensor (b, m, 5, "out_proj.weight", e, e, 0);
  if (m->bias)
    mha_tensor (b, m, 6, "out_proj.bias", e, 0, 0);
  if (m->bias_kv) {
    mha_tensor (b, m, 7, "bias_k", e, 0, 1);
    mha_tensor (b, m, 8, "bias_v", e, 0, 1);
  }
  return builder_finish (b);
}

/* Map a file, expecting failure with st and words. */
static void
expect_map_fail (GBytes *bytes, const char *prefix, size_t d_model,
                 size_t heads, int zero_attn, SattnStatus st,
                 const char *const *words)
{
  SattnTensorFile *f = load_ok (bytes);
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = (SattnMhaWeights *) 0x1;
  char err[512];
  SattnStatus got = sattn_mha_weights_from_file (f, prefix, d_model, heads,
                                                 zero_attn, &cfg, &w, &owner,
                                                 err, sizeof err);
  g_test_message ("%s: %s", sattn_status_string (got), err);
  g_assert_cmpint (got, ==, st);
  g_assert_null (owner);
  g_assert_cmpuint (cfg.d_model, ==, 0); /* untouched */
  assert_msg (err, words);
  sattn_tensor_file_free (f);
}

/* Map a file, expecting success (the weights themselves are checked
 * elsewhere). */
static void
expect_map_ok (GBytes *bytes, const char *prefix, size_t d_model, size_t heads,
               int zero_attn)
{
  SattnTensorFile *f = load_ok (bytes);
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  g_assert_cmpint (sattn_mha_weights_from_file (f, prefix, d_model, heads,
                                                zero_attn, &cfg, &w, &owner,
                                                NULL, 0),
                   ==, SATTN_OK);
  sattn_mha_weights_free (owner);
  sattn_tensor_file_free (f);
}

/* ---------------------------------------------------------- good files */

static void
test_basic_file (void)
{
  Builder *b = builder_new ("{\"format\":\"pt\",\"note\":\"x\"}");
  float a[6] = { 1, -2, 3.5f, 0, -0.0f, 1e-3f };
  float c[3] = { 7, 8, 9 };
  SattnTensorFile *f;
  size_t ndim = 99;
  const size_t *shape = NULL;
  const float *v;

  builder_add (b, "a.weight", "F32", "[2,3]", a, 6);
  builder_raw (b, "empty", "F32", "[0,4]", NULL, 0);
  builder_add (b, "steps", "I64", "[3]", c, 3);
  builder_add (b, "s", "F32", "[]", c, 1);
  f = load_ok (builder_finish (b));

  g_assert_cmpuint (sattn_tensor_file_n_tensors (f), ==, 4);
  g_assert_cmpstr (sattn_tensor_file_name (f, 0), ==, "a.weight");
  g_assert_null (sattn_tensor_file_name (f, 4));
  v = sattn_tensor_file_get (f, "a.weight", &ndim, &shape);
  g_assert_nonnull (v);
  g_assert_cmpuint (ndim, ==, 2);
  g_assert_cmpuint (shape[0], ==, 2);
  g_assert_cmpuint (shape[1], ==, 3);
  g_assert_cmpmem (v, sizeof a, a, sizeof a);
  g_assert_cmpuint (sattn_tensor_file_numel (f, "a.weight"), ==, 6);

  v = sattn_tensor_file_get (f, "empty", &ndim, &shape);
  g_assert_nonnull (v);
  g_assert_cmpuint (ndim, ==, 2);
  g_assert_cmpuint (shape[0], ==, 0);
  g_assert_cmpuint (sattn_tensor_file_numel (f, "empty"), ==, 0);

  /* an integer tensor is listed, typed, but has no float data */
  g_assert_cmpstr (sattn_tensor_file_dtype (f, "steps"), ==, "I64");
  ndim = 99;
  g_assert_null (sattn_tensor_file_get (f, "steps", &ndim, &shape));
  g_assert_cmpuint (ndim, ==, 99);

  v = sattn_tensor_file_get (f, "s", &ndim, NULL);
  g_assert_cmpuint (ndim, ==, 0);
  g_assert_cmpfloat (v[0], ==, 7.0f);

  g_assert_null (sattn_tensor_file_get (f, "nope", NULL, NULL));
  g_assert_null (sattn_tensor_file_dtype (f, "nope"));
  g_assert_cmpstr (sattn_tensor_file_metadata (f, "format"), ==, "pt");
  g_assert_null (sattn_tensor_file_metadata (f, "missing"));
  sattn_tensor_file_free (f);
  sattn_tensor_file_free (NULL);
}

static void
test_padded_header (void)
{
  /* writers pad the header with spaces to 8 bytes */
  float a[1] = { 2 };
  Builder *b = builder_new (NULL);
  builder_add (b, "x", "F32", "[1]", a, 1);
  GBytes *img = builder_finish (b);
  gsize len;
  const guint8 *d = g_bytes_get_data (img, &len);
  uint64_t hlen = len - 8 - 4;
  GByteArray *p = g_byte_array_new ();
  put_le (p, hlen + 5, 8);
  g_byte_array_append (p, d + 8, (guint) hlen);
  g_byte_array_append (p, (const guint8 *) "     ", 5);
  g_byte_array_append (p, d + 8 + hlen, 4);
  SattnTensorFile *f = load_ok (g_byte_array_free_to_bytes (p));
  g_assert_cmpfloat (sattn_tensor_file_get (f, "x", NULL, NULL)[0], ==, 2.0f);
  sattn_tensor_file_free (f);
  g_bytes_unref (img);
}

/* ----------------------------------------------------- dtype conversion */

/* Value of an IEEE-style binary pattern (sign, eb exponent bits, mb
 * mantissa bits; binary16: 5, 10, bfloat16: 8, 7), from the definition,
 * in double. */
static double
ieee_value (unsigned h, int eb, int mb)
{
  int s = (h >> (eb + mb)) & 1, e = (h >> mb) & ((1 << eb) - 1);
  int bias = (1 << (eb - 1)) - 1;
  double frac = (h & ((1u << mb) - 1)) / (double) (1 << mb), v;
  if (e == (1 << eb) - 1)
    return frac != 0 ? NAN : (s ? -INFINITY : INFINITY);
  v = e == 0 ? frac * pow (2, 1 - bias) : (1 + frac) * pow (2, e - bias);
  return s ? -v : v;
}

static double
half_value (unsigned h)
{
  return ieee_value (h, 5, 10);
}

static double
bf16_value (unsigned h)
{
  return ieee_value (h, 8, 7);
}

static void
check_all_patterns (const char *dtype, double (*value) (unsigned))
{
  GByteArray *raw = g_byte_array_new ();
  Builder *b = builder_new (NULL);
  SattnTensorFile *f;
  const float *v;
  size_t bad = 0;

  for (unsigned h = 0; h < 65536; h++)
    put_le (raw, h, 2);
  builder_raw (b, "all", dtype, "[65536]", raw->data, raw->len);
  g_byte_array_unref (raw);
  f = load_ok (builder_finish (b));
  v = sattn_tensor_file_get (f, "all", NULL, NULL);
  for (unsigned h = 0; h < 65536; h++) {
    double want = value (h);
    int same = isnan (want) ? isnan (v[h])
                            : ((double) v[h] == want &&
                               !signbit (v[h]) == !signbit (want));
    if (!same && bad++ < 5)
      g_printerr ("%s 0x%04x: got %.9g want %.9g\n", dtype, h, v[h], want);
  }
  g_assert_cmpuint (bad, ==, 0);
  sattn_tensor_file_free (f);
}

static void
test_f16 (void)
{
  static const struct {
    unsigned bits;
    double v;
  } known[] = {
    { 0x3c00, 1.0 },
    { 0xc000, -2.0 },
    { 0x7bff, 65504.0 },
    { 0x0001, 5.9604644775390625e-08 },
    { 0x03ff, 6.097555160522461e-05 },
    { 0x0400, 6.103515625e-05 },
    { 0x3555, 0.333251953125 },
    { 0x8000, -0.0 },
    { 0x7c00, INFINITY },
    { 0xfc00, -INFINITY },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (known); i++)
    g_assert_cmpfloat (half_value (known[i].bits), ==, known[i].v);
  g_assert_true (isnan (half_value (0x7e00)));
  check_all_patterns ("F16", half_value);
}

static void
test_bf16 (void)
{
  g_assert_cmpfloat (bf16_value (0x3f80), ==, 1.0);
  g_assert_cmpfloat (bf16_value (0xc040), ==, -3.0);
  g_assert_cmpfloat (bf16_value (0x7f7f), ==, 3.3895313892515355e38);
  g_assert_cmpfloat (bf16_value (0x0001), ==, pow (2, -133));
  check_all_patterns ("BF16", bf16_value);
}

static void
test_f64 (void)
{
  const double max = FLT_MAX, hulp = ldexp (1, 103);
  const double in[] = { 1.0,   0.1,    -1e-50,  1e-40,          max,
                        -max,  3.5e38, -3.5e38, max + hulp / 2, max + hulp,
                        1e300, NAN,    -0.0,    16777217.0 };
  const float want[] = { 1.0f,     0.1f,     -0.0f,     1e-40f,     FLT_MAX,
                         -FLT_MAX, INFINITY, -INFINITY, FLT_MAX,    INFINITY,
                         INFINITY, NAN,      -0.0f,     16777216.0f };
  GByteArray *raw = g_byte_array_new ();
  Builder *b = builder_new (NULL);
  gchar *shape = g_strdup_printf ("[%zu]", G_N_ELEMENTS (in));
  SattnTensorFile *f;
  const float *v;

  for (size_t i = 0; i < G_N_ELEMENTS (in); i++) {
    uint64_t q;
    memcpy (&q, &in[i], 8);
    put_le (raw, q, 8);
  }
  builder_raw (b, "d", "F64", shape, raw->data, raw->len);
  g_byte_array_unref (raw);
  f = load_ok (builder_finish (b));
  v = sattn_tensor_file_get (f, "d", NULL, NULL);
  for (size_t i = 0; i < G_N_ELEMENTS (in); i++) {
    if (isnan (want[i])) {
      g_assert_true (isnan (v[i]));
      continue;
    }
    if (v[i] != want[i] || !signbit (v[i]) != !signbit (want[i]))
      g_error ("F64 %.17g -> %.9g, want %.9g", in[i], v[i], want[i]);
  }
  sattn_tensor_file_free (f);
  g_free (shape);
}

/* The same module stored in F32, F16, BF16 and F64 maps to the same
 * floats (the values are exact in every dtype). */
static void
test_dtypes_map_alike (void)
{
  static const char *const dts[] = { "F32", "F16", "BF16", "F64" };
  float *first = NULL;
  size_t count = 0;

  for (size_t k = 0; k < G_N_ELEMENTS (dts); k++) {
    Mha m = { .e = 8, .bias = 1, .bias_kv = 1, .dtype = dts[k] };
    SattnTensorFile *f = load_ok (mha_file (&m));
    SattnConfig cfg = { 0 };
    SattnWeights w;
    SattnMhaWeights *owner = NULL;
    char err[256];
    g_assert_cmpint (sattn_mha_weights_from_file (f, NULL, 8, 2, 0, &cfg, &w,
                                                  &owner, err, sizeof err),
                     ==, SATTN_OK);
    const float *parts[] = { w.wq, w.wk, w.wv, w.wo,     w.bq,
                             w.bk, w.bv, w.bo, w.bias_k, w.bias_v };
    const size_t sizes[] = { 64, 64, 64, 64, 8, 8, 8, 8, 8, 8 };
    if (first == NULL) {
      for (size_t i = 0; i < G_N_ELEMENTS (sizes); i++)
        count += sizes[i];
      first = g_new (float, count);
    }
    for (size_t i = 0, o = 0; i < G_N_ELEMENTS (parts); o += sizes[i], i++) {
      if (k == 0)
        memcpy (first + o, parts[i], sizes[i] * sizeof (float));
      else
        g_assert_cmpmem (first + o, sizes[i] * sizeof (float), parts[i],
                         sizes[i] * sizeof (float));
    }
    sattn_mha_weights_free (owner);
    sattn_tensor_file_free (f);
  }
  g_free (first);
}

/* -------------------------------------------------------- the mapping */

static void
test_map_layout (void)
{
  /* Every field points at the right rows of the right tensor. */
  Mha m = { .e = 4, .bias = 1, .bias_kv = 1 };
  SattnTensorFile *f = load_ok (mha_file (&m));
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  char err[256];

  cfg.causal = 1;
  cfg.lookback = 3;
  cfg.scale = 0.5f;
  g_assert_cmpint (sattn_mha_weights_from_file (f, "", 0, 2, 1, &cfg, &w,
                                                &owner, err, sizeof err),
                   ==, SATTN_OK);
  g_assert_cmpstr (err, ==, "");
  g_assert_cmpuint (cfg.d_model, ==, 4);
  g_assert_cmpuint (cfg.heads, ==, 2);
  g_assert_cmpuint (cfg.d_head, ==, 2);
  g_assert_cmpuint (cfg.d_value, ==, 2);
  g_assert_cmpuint (cfg.d_out, ==, 4);
  g_assert_cmpint (cfg.causal, ==, 1); /* left alone */
  g_assert_cmpuint (cfg.lookback, ==, 3);
  g_assert_cmpfloat (cfg.scale, ==, 0.5f);
  g_assert_cmpint (w.add_zero_attn, ==, 1);
  for (size_t i = 0; i < 16; i++) {
    g_assert_cmpfloat (w.wq[i], ==, val (0, i));
    g_assert_cmpfloat (w.wk[i], ==, val (0, 16 + i));
    g_assert_cmpfloat (w.wv[i], ==, val (0, 32 + i));
    g_assert_cmpfloat (w.wo[i], ==, val (5, i));
  }
  for (size_t i = 0; i < 4; i++) {
    g_assert_cmpfloat (w.bq[i], ==, val (4, i));
    g_assert_cmpfloat (w.bk[i], ==, val (4, 4 + i));
    g_assert_cmpfloat (w.bv[i], ==, val (4, 8 + i));
    g_assert_cmpfloat (w.bo[i], ==, val (6, i));
    g_assert_cmpfloat (w.bias_k[i], ==, val (7, i));
    g_assert_cmpfloat (w.bias_v[i], ==, val (8, i));
  }
  /* the owner outlives the file */
  sattn_tensor_file_free (f);
  SattnStatus st;
  SattnModel *model = sattn_model_new (&cfg, &w, &st);
  g_assert_nonnull (model);
  g_assert_cmpuint (sattn_model_extra_keys (model), ==, 2);
  sattn_model_free (model);
  sattn_mha_weights_free (owner);
  sattn_mha_weights_free (NULL);
}

static void
test_map_separate_nobias_prefix (void)
{
  Mha m = { .e = 6, .separate = 1, .prefix = "enc.layers.0.attn." };
  SattnTensorFile *f = load_ok (mha_file (&m));
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  char err[256];

  /* the trailing '.' of the prefix is optional */
  g_assert_cmpint (sattn_mha_weights_from_file (f, "enc.layers.0.attn", 6, 3, 0,
                                                &cfg, &w, &owner, err,
                                                sizeof err),
                   ==, SATTN_OK);
  g_assert_null (w.bq);
  g_assert_null (w.bk);
  g_assert_null (w.bv);
  g_assert_null (w.bo);
  g_assert_null (w.bias_k);
  g_assert_cmpint (w.add_zero_attn, ==, 0);
  for (size_t i = 0; i < 36; i++) {
    g_assert_cmpfloat (w.wq[i], ==, val (1, i));
    g_assert_cmpfloat (w.wk[i], ==, val (2, i));
    g_assert_cmpfloat (w.wv[i], ==, val (3, i));
  }
  sattn_mha_weights_free (owner);
  sattn_tensor_file_free (f);
}

static void
test_map_load_path (void)
{
  Mha m = { .e = 4, .bias = 1 };
  gchar *path = write_tmp (mha_file (&m), "ok.safetensors");
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  char err[512];

  g_assert_cmpint (sattn_mha_weights_load (path, NULL, 4, 4, 0, &cfg, &w,
                                           &owner, err, sizeof err),
                   ==, SATTN_OK);
  g_assert_cmpstr (err, ==, "");
  sattn_mha_weights_free (owner);

  /* a mapping error names the file */
  g_assert_cmpint (sattn_mha_weights_load (path, NULL, 8, 4, 0, &cfg, &w,
                                           &owner, err, sizeof err),
                   ==, SATTN_E_SHAPE);
  g_assert_null (owner);
  assert_msg (err, WORDS (path, "in_proj_weight", "[12, 4]", "[24, 8]"));
  g_unlink (path);
  g_free (path);

  g_assert_cmpint (sattn_mha_weights_load (NULL, NULL, 8, 4, 0, &cfg, &w,
                                           &owner, err, sizeof err),
                   ==, SATTN_E_INVAL);
}

/* --------------------------------------------------- malformed: reader */

static void
test_missing_file (void)
{
  gchar *path = g_build_filename (tmpdir, "does-not-exist.safetensors", NULL);
  SattnTensorFile *f = NULL;
  char err[512];
  g_assert_cmpint (sattn_tensor_file_load (path, &f, err, sizeof err), ==,
                   SATTN_E_IO);
  g_assert_null (f);
  assert_msg (err, WORDS ("cannot open", "does-not-exist.safetensors",
                          "No such file"));
  g_free (path);

  g_assert_cmpint (sattn_tensor_file_load (tmpdir, &f, err, sizeof err), ==,
                   SATTN_E_IO);
  assert_msg (err, WORDS ("not a regular file"));

  /* a FIFO would block a reader that does not check */
  path = g_build_filename (tmpdir, "fifo", NULL);
  if (mkfifo (path, 0600) == 0) {
    g_assert_cmpint (sattn_tensor_file_load (path, &f, err, sizeof err), ==,
                     SATTN_E_IO);
    assert_msg (err, WORDS ("not a regular file"));
    g_unlink (path);
  }
  g_free (path);

  g_assert_cmpint (sattn_tensor_file_load (NULL, &f, err, sizeof err), ==,
                   SATTN_E_INVAL);
  g_assert_cmpint (sattn_tensor_file_load ("x", NULL, NULL, 0), ==,
                   SATTN_E_INVAL);
}

static void
test_short_and_header_length (void)
{
  expect_load_fail (g_bytes_new ("", 0), SATTN_E_FORMAT,
                    WORDS ("too short", "0 bytes"));
  expect_load_fail (g_bytes_new ("\x10\0\0\0", 4), SATTN_E_FORMAT,
                    WORDS ("too short", "4 bytes"));
  /* header length past the end */
  expect_load_fail (image (1000, "{}", NULL, 0), SATTN_E_FORMAT,
                    WORDS ("header length 1000", "past the end", "10 bytes"));
  /* absurd header length: refused before any allocation */
  expect_load_fail (image (G_GUINT64_CONSTANT (0xffffffffffffffff), "{}", NULL,
                           0),
                    SATTN_E_FORMAT, WORDS ("exceeds the limit"));
  expect_load_fail (image (SATTN_TENSOR_MAX_HEADER + 1, "{}", NULL, 0),
                    SATTN_E_FORMAT, WORDS ("exceeds the limit of 100000000"));
}

static void
test_truncated (void)
{
  Mha m = { .e = 8, .bias = 1 };
  GBytes *full = mha_file (&m);
  gsize len;
  const guint8 *d = g_bytes_get_data (full, &len);

  /* cut in the data: the last tensor runs past the end */
  expect_load_fail (g_bytes_new (d, len - 3), SATTN_E_FORMAT,
                    WORDS ("out_proj.bias", "run past the end", "truncated"));
  /* cut in the header */
  expect_load_fail (g_bytes_new (d, 40), SATTN_E_FORMAT,
                    WORDS ("past the end of the file (40 bytes)"));
  /* every prefix of the file fails cleanly */
  for (gsize cut = 0; cut < len; cut++) {
    SattnTensorFile *f = NULL;
    char err[256];
    g_assert_cmpint (sattn_tensor_file_load_bytes (d, cut, &f, err, sizeof err),
                     !=, SATTN_OK);
    g_assert_null (f);
    g_assert_cmpuint (strlen (err), >, 0);
  }
  g_bytes_unref (full);
}

static void
test_bad_json (void)
{
  expect_load_fail (image_json ("{\"a\":", NULL, 0), SATTN_E_FORMAT,
                    WORDS ("invalid JSON header"));
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",}}", NULL, 0),
                    SATTN_E_FORMAT, WORDS ("invalid JSON header"));
  expect_load_fail (image_json ("[1,2]", NULL, 0), SATTN_E_FORMAT,
                    WORDS ("does not start with a JSON object"));
  expect_load_fail (image_json ("PK\x03\x04", NULL, 0), SATTN_E_FORMAT,
                    WORDS ("does not start with a JSON object"));
  expect_load_fail (image_json ("{\"\xff\xfe\":1}", NULL, 0), SATTN_E_FORMAT,
                    WORDS ("invalid JSON header", "UTF-8"));
  /* a NUL inside the header */
  expect_load_fail (g_bytes_new ("\x04\0\0\0\0\0\0\0{\0}\n", 12),
                    SATTN_E_FORMAT, WORDS ("invalid JSON header"));
  {
    /* deep nesting would overflow the parser's stack */
    GString *s = g_string_new ("{\"a\":");
    for (int i = 0; i < 200000; i++)
      g_string_append_c (s, '[');
    g_string_append_c (s, '}');
    expect_load_fail (image_json (s->str, NULL, 0), SATTN_E_FORMAT,
                      WORDS ("nested deeper than 32"));
    g_string_free (s, TRUE);
  }
  {
    /* keys made to collide in g_str_hash ("AB" and "B!" hash alike):
     * json-glib's member table would compare them pairwise */
    GString *s = g_string_new ("{");
    for (int i = 0; i < 40; i++) {
      g_string_append (s, i ? ",\"" : "\"");
      for (int b = 0; b < 6; b++)
        g_string_append (s, (i >> b) & 1 ? "AB" : "B!");
      g_string_append (s, "\":0");
    }
    g_string_append_c (s, '}');
    expect_load_fail (image_json (s->str, NULL, 0), SATTN_E_FORMAT,
                      WORDS ("more than 32 keys", "share a hash value"));
    /* the same through escapes: "\u0041B" is "AB" */
    g_string_assign (s, "{");
    for (int i = 0; i < 40; i++) {
      g_string_append (s, i ? ",\"" : "\"");
      for (int b = 0; b < 6; b++)
        g_string_append (s, (i >> b) & 1 ? "\\u0041B" : "B!");
      g_string_append (s, "\":0");
    }
    g_string_append_c (s, '}');
    expect_load_fail (image_json (s->str, NULL, 0), SATTN_E_FORMAT,
                      WORDS ("share a hash value"));
    g_string_free (s, TRUE);
  }
  {
    /* too many members in one object */
    GString *s = g_string_new ("{\"__metadata__\":{");
    for (int i = 0; i <= 65536; i++)
      g_string_append_printf (s, "%s\"k%d\":\"\"", i ? "," : "", i);
    g_string_append (s, "}}");
    expect_load_fail (image_json (s->str, NULL, 0), SATTN_E_FORMAT,
                      WORDS ("more than 65536 members"));
    g_string_free (s, TRUE);
  }
  {
    /* many small values: refused before json-glib builds its tree */
    GString *s = g_string_new ("{\"a\":[");
    for (int i = 0; i < 1100000; i++)
      g_string_append (s, "0,");
    g_string_append (s, "0]}");
    expect_load_fail (image_json (s->str, NULL, 0), SATTN_E_FORMAT,
                      WORDS ("more than 1000000 JSON values"));
    g_string_free (s, TRUE);
  }
}

static void
test_bad_entries (void)
{
  static const struct {
    const char *json;
    SattnStatus st;
    const char *w1, *w2;
  } cases[] = {
    { "{\"t\":5}", SATTN_E_FORMAT, "'t'", "not an object" },
    { "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", SATTN_E_FORMAT, "'t'",
      "lacks \"dtype\"" },
    { "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", SATTN_E_FORMAT,
      "'t'", "lacks \"shape\"" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", SATTN_E_FORMAT, "'t'",
      "lacks \"data_offsets\"" },
    { "{\"t\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "dtype of tensor 't'", "not a string" },
    { "{\"t\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      SATTN_E_DTYPE, "unknown dtype 'F128'", "'t'" },
    { "{\"t\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      SATTN_E_DTYPE, "unknown dtype 'f32'", "F32, F16, BF16, F64" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "shape of tensor 't'", "not an array" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "shape of tensor 't'", "non-negative integer" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "shape of tensor 't'", "non-negative integer" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "shape of tensor 't'", "non-negative integer" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[18446744073709551615],"
      "\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "shape of tensor 't'", "non-negative integer" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
      "\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "'t'", "overflows" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
      SATTN_E_FORMAT, "data_offsets of tensor 't'", "pair" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
      SATTN_E_FORMAT, "data_offsets of tensor 't'", "pair" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
      SATTN_E_FORMAT, "data_offsets of tensor 't'", "non-negative" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",
      SATTN_E_FORMAT, "[4, 0]", "end before they begin" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
      SATTN_E_FORMAT, "[0, 4]", "run past the end of the data (0 bytes)" },
    { "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":"
      "[0,9223372036854775807]}}",
      SATTN_E_FORMAT, "'t'", "run past the end" },
    { "{\"__metadata__\":[1]}", SATTN_E_FORMAT, "__metadata__",
      "not an object" },
    { "{\"__metadata__\":{\"k\":1}}", SATTN_E_FORMAT, "value of 'k'",
      "not a string" },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_test_message ("case %zu: %s", i, cases[i].json);
    expect_load_fail (image_json (cases[i].json, NULL, 0), cases[i].st,
                      WORDS (cases[i].w1, cases[i].w2));
  }
}

static void
test_bad_layout (void)
{
  static const guint8 d16[16] = { 0 };
  /* wrong element count */
  expect_load_fail (image_json ("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                                "\"data_offsets\":[0,12]}}",
                                d16, 12),
                    SATTN_E_FORMAT,
                    WORDS ("'t'", "[2, 2] of F32 needs 16 bytes",
                           "[0, 12] hold 12"));
  expect_load_fail (image_json ("{\"t\":{\"dtype\":\"F16\",\"shape\":[3],"
                                "\"data_offsets\":[0,8]}}",
                                d16, 8),
                    SATTN_E_FORMAT, WORDS ("needs 6 bytes", "hold 8"));
  /* overlapping tensors */
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],"
                                "\"data_offsets\":[0,12]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                                "\"data_offsets\":[8,16]}}",
                                d16, 16),
                    SATTN_E_FORMAT,
                    WORDS ("'a' [0, 12]", "'b' [8, 16]", "overlap"));
  /* the same bytes twice */
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
                                "\"data_offsets\":[0,16]},"
                                "\"b\":{\"dtype\":\"I32\",\"shape\":[4],"
                                "\"data_offsets\":[0,16]}}",
                                d16, 16),
                    SATTN_E_FORMAT, WORDS ("overlap"));
  /* a gap between tensors */
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"data_offsets\":[0,4]},"
                                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                                "\"data_offsets\":[8,16]}}",
                                d16, 16),
                    SATTN_E_FORMAT,
                    WORDS ("bytes [4, 8)", "belong to no tensor", "'b'"));
  /* bytes after the last tensor */
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                                "\"data_offsets\":[0,8]}}",
                                d16, 16),
                    SATTN_E_FORMAT, WORDS ("8 bytes after the last tensor"));
  /* no tensors but data */
  expect_load_fail (image_json ("{}", d16, 4), SATTN_E_FORMAT,
                    WORDS ("4 bytes after the last tensor"));
  /* a name aliasing another one through an escaped NUL */
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"data_offsets\":[0,4]},"
                                "\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1]"
                                ","
                                "\"data_offsets\":[4,8]}}",
                                d16, 8),
                    SATTN_E_FORMAT, WORDS ("key 'a'", "appears twice"));
  /* plain duplicate keys, at the top or inside an entry */
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"data_offsets\":[0,4]},"
                                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"data_offsets\":[0,4]}}",
                                d16, 4),
                    SATTN_E_FORMAT, WORDS ("key 'a'", "appears twice"));
  expect_load_fail (image_json ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                                "\"dtype\":\"I32\",\"data_offsets\":[0,4]}}",
                                d16, 4),
                    SATTN_E_FORMAT, WORDS ("key 'dtype'", "appears twice"));
  /* an empty but valid file */
  sattn_tensor_file_free (load_ok (image_json ("{}", NULL, 0)));
}

/* -------------------------------------------------- malformed: mapping */

static void
test_map_missing (void)
{
  Mha m = { .e = 8, .bias = 1, .prefix = "encoder.layers.0.self_attn." };
  expect_map_fail (mha_file (&m), "decoder.", 8, 2, 0, SATTN_E_MISSING,
                   WORDS ("in_proj_weight", "prefix 'decoder.'",
                          "'encoder.layers.0.self_attn.'"));
  Mha m2 = { .e = 8, .bias = 1 };
  expect_map_fail (mha_file (&m2), "x", 8, 2, 0, SATTN_E_MISSING,
                   WORDS ("prefix 'x.'",
                          "with MultiheadAttention weights: ''"));

  Mha no_out = { .e = 8, .bias = 1, .no_out = 1 };
  expect_map_fail (mha_file (&no_out), NULL, 8, 2, 0, SATTN_E_MISSING,
                   WORDS ("'out_proj.weight'"));
  Mha no_k = { .e = 8, .separate = 1, .skip = "k_proj_weight" };
  expect_map_fail (mha_file (&no_k), NULL, 8, 2, 0, SATTN_E_MISSING,
                   WORDS ("'k_proj_weight'"));
  Mha no_bv = { .e = 8, .bias_kv = 1, .skip = "bias_v" };
  expect_map_fail (mha_file (&no_bv), NULL, 8, 2, 0, SATTN_E_MISSING,
                   WORDS ("'bias_v' (bias_k is present)"));

  /* a file without any attention module */
  float a[2] = { 1, 2 };
  Builder *b = builder_new (NULL);
  builder_add (b, "linear.weight", "F32", "[2]", a, 2);
  expect_map_fail (builder_finish (b), "", 8, 2, 0, SATTN_E_MISSING,
                   WORDS ("in_proj_weight", "weights: none"));
}

/* The prefixes a missing module's message lists, in the order of the
 * file: the first 8, then how many in all; the top level as ''. */
static void
test_missing_lists (void)
{
  float v[24] = { 0 };
  Builder *b = builder_new (NULL);
  builder_add (b, "blk.wq.weight", "F32", "[3,8]", v, 24);
  builder_add (b, "in_proj_weight", "F32", "[3,8]", v, 24);
  for (int i = 1; i < 10; i++) {
    gchar *name = g_strdup_printf ("m%d.in_proj_weight", i);
    builder_add (b, name, "F32", "[3,8]", v, 24);
    g_free (name);
  }
  SattnTensorFile *f = load_ok (builder_finish (b));
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  char err[512];

  g_assert_cmpint (sattn_mha_weights_from_file (f, "x", 8, 2, 0, &cfg, &w,
                                                &owner, err, sizeof err),
                   ==, SATTN_E_MISSING);
  g_test_message ("%s", err);
  assert_msg (err, WORDS ("with MultiheadAttention weights: '' (top level), "
                          "'m1.', 'm2.', 'm3.', 'm4.', 'm5.', 'm6.', 'm7.' "
                          "(10 in all)"));
  g_assert_null (strstr (err, "'m8.'"));
  g_assert_cmpint (sattn_attn_weights_from_file (f, "x", 0, &cfg, &w, &owner,
                                                 NULL, err, sizeof err),
                   ==, SATTN_E_MISSING);
  g_test_message ("%s", err);
  assert_msg (err, WORDS ("holding a known layout: 'blk.' (llama), '' (mha), "
                          "'m1.' (mha), 'm2.' (mha), 'm3.' (mha), "
                          "'m4.' (mha), 'm5.' (mha), 'm6.' (mha) "
                          "(11 in all)"));
  g_assert_null (strstr (err, "'m7.'"));
  g_assert_null (owner);
  sattn_tensor_file_free (f);
}

static void
test_map_shapes (void)
{
  Mha m = { .e = 8, .bias = 1 };
  /* caps that disagree with the file */
  expect_map_fail (mha_file (&m), NULL, 16, 2, 0, SATTN_E_SHAPE,
                   WORDS ("tensor 'in_proj_weight' has shape [24, 8]",
                          "expected [48, 16]", "(3E, E)", "E = d_model = 16"));
  Mha ob = { .e = 8,
             .bias = 1,
             .override = "out_proj.bias",
             .override_shape = "[7]",
             .override_n = 7 };
  expect_map_fail (mha_file (&ob), NULL, 0, 2, 0, SATTN_E_SHAPE,
                   WORDS ("'out_proj.bias' has shape [7]", "expected [8]"));
  Mha ib = { .e = 8,
             .bias = 1,
             .override = "in_proj_bias",
             .override_shape = "[1,24]",
             .override_n = 24 };
  expect_map_fail (mha_file (&ib), NULL, 0, 2, 0, SATTN_E_SHAPE,
                   WORDS ("'in_proj_bias' has shape [1, 24]", "expected [24]"));
  Mha ow = { .e = 8,
             .override = "out_proj.weight",
             .override_shape = "[8,8,1]",
             .override_n = 64 };
  expect_map_fail (mha_file (&ow), NULL, 0, 2, 0, SATTN_E_SHAPE,
                   WORDS ("'out_proj.weight' has shape [8, 8, 1]",
                          "expected [8, 8]"));
  Mha bk = { .e = 8,
             .bias_kv = 1,
             .override = "bias_k",
             .override_shape = "[2,1,8]",
             .override_n = 16 };
  expect_map_fail (mha_file (&bk), NULL, 0, 2, 0, SATTN_E_SHAPE,
                   WORDS ("'bias_k' has shape [2, 1, 8]",
                          "expected [1, 1, 8]"));
  /* bias_k given as a plain vector is accepted */
  Mha bk1 = { .e = 8,
              .bias_kv = 1,
              .override = "bias_k",
              .override_shape = "[8]",
              .override_n = 8 };
  expect_map_ok (mha_file (&bk1), NULL, 8, 2, 0);
  /* kdim / vdim other than E */
  Mha kd = { .e = 8,
             .separate = 1,
             .override = "k_proj_weight",
             .override_shape = "[8,10]",
             .override_n = 80 };
  expect_map_fail (mha_file (&kd), NULL, 0, 2, 0, SATTN_E_SHAPE,
                   WORDS ("'k_proj_weight' has shape [8, 10]",
                          "expected [8, 8]", "kdim = E"));
  /* the same from a genuine PyTorch module (tests/data/make-fixtures.py:
   * MultiheadAttention(8, 2, kdim=10, vdim=12)) */
  {
    const char *root = g_getenv ("SATTN_SOURCE_ROOT");
    gchar *path = g_build_filename (root ? root : ".", "tests", "data",
                                    "kdim.safetensors", NULL);
    SattnConfig cfg = { 0 };
    SattnWeights w;
    SattnMhaWeights *owner = NULL;
    char err[512];
    g_assert_cmpint (sattn_mha_weights_load (path, NULL, 0, 2, 0, &cfg, &w,
                                             &owner, err, sizeof err),
                     ==, SATTN_E_SHAPE);
    assert_msg (err, WORDS ("kdim.safetensors",
                            "'k_proj_weight' has shape "
                            "[8, 10]",
                            "expected [8, 8]", "kdim = E"));
    g_free (path);
  }
  /* the width of the weights cannot be inferred from a 1-D tensor */
  Mha one = { .e = 8,
              .override = "in_proj_weight",
              .override_shape = "[192]",
              .override_n = 192 };
  expect_map_fail (mha_file (&one), NULL, 0, 2, 0, SATTN_E_SHAPE,
                   WORDS ("'in_proj_weight' has shape [192]", "2-D"));
  /* heads must divide E */
  expect_map_fail (mha_file (&m), NULL, 8, 3, 0, SATTN_E_SHAPE,
                   WORDS ("heads = 3", "does not divide", "E = 8"));
  expect_map_fail (mha_file (&m), NULL, 8, 0, 0, SATTN_E_INVAL,
                   WORDS ("heads"));
  /* both layouts at once */
  {
    Builder *b = builder_new (NULL);
    float v[64] = { 0 };
    float *big = g_new0 (float, 192);
    builder_add (b, "in_proj_weight", "F32", "[24,8]", big, 192);
    builder_add (b, "q_proj_weight", "F32", "[8,8]", v, 64);
    builder_add (b, "out_proj.weight", "F32", "[8,8]", v, 64);
    expect_map_fail (builder_finish (b), NULL, 8, 2, 0, SATTN_E_FORMAT,
                     WORDS ("both in_proj_weight", "ambiguous"));
    g_free (big);
  }
}

static void
test_map_dtype_and_values (void)
{
  Mha i64 = {
    .e = 8, .bias = 1, .override = "in_proj_bias", .override_dtype = "I64"
  };
  expect_map_fail (mha_file (&i64), NULL, 8, 2, 0, SATTN_E_DTYPE,
                   WORDS ("'in_proj_bias' has dtype I64", "F32, F16, BF16"));
  Mha nan = { .e = 8, .bias = 1, .poison = NAN, .poison_in = "in_proj_weight" };
  expect_map_fail (mha_file (&nan), NULL, 8, 2, 0, SATTN_E_NONFINITE,
                   WORDS ("'in_proj_weight' holds NaN at [0, 5]"));
  Mha inf = {
    .e = 8, .bias = 1, .poison = -INFINITY, .poison_in = "out_proj.bias"
  };
  expect_map_fail (mha_file (&inf), NULL, 8, 2, 0, SATTN_E_NONFINITE,
                   WORDS ("'out_proj.bias' holds Inf at element 5"));
  Mha bv = { .e = 8, .bias_kv = 1, .poison = INFINITY, .poison_in = "bias_v" };
  expect_map_fail (mha_file (&bv), NULL, 8, 2, 0, SATTN_E_NONFINITE,
                   WORDS ("'bias_v' holds Inf"));
  /* F16 infinity */
  Mha h = {
    .e = 8, .dtype = "F16", .poison = INFINITY, .poison_in = "out_proj.weight"
  };
  expect_map_fail (mha_file (&h), NULL, 8, 2, 0, SATTN_E_NONFINITE,
                   WORDS ("'out_proj.weight' holds Inf at [0, 5]"));
  {
    /* an F64 value beyond the float range becomes Inf: refused */
    Builder *b = builder_new (NULL);
    float *w = g_new0 (float, 192);
    GByteArray *raw = g_byte_array_new ();
    for (int i = 0; i < 64; i++) {
      double d = i == 9 ? 1e39 : 0.25;
      uint64_t q;
      memcpy (&q, &d, 8);
      put_le (raw, q, 8);
    }
    builder_add (b, "in_proj_weight", "F32", "[24,8]", w, 192);
    builder_raw (b, "out_proj.weight", "F64", "[8,8]", raw->data, raw->len);
    expect_map_fail (builder_finish (b), NULL, 8, 2, 0, SATTN_E_NONFINITE,
                     WORDS ("'out_proj.weight' holds Inf at [1, 1]"));
    g_byte_array_unref (raw);
    g_free (w);
  }
  /* NaN in a tensor that is not used does not matter */
  {
    Builder *b = builder_new (NULL);
    float *zw = g_new0 (float, 192);
    float bad[2] = { NAN, INFINITY };
    builder_add (b, "in_proj_weight", "F32", "[24,8]", zw, 192);
    builder_add (b, "out_proj.weight", "F32", "[8,8]", zw, 64);
    builder_add (b, "norm.weight", "F32", "[2]", bad, 2);
    g_free (zw);
    expect_map_ok (builder_finish (b), NULL, 8, 2, 0);
  }
}

static void
test_map_metadata (void)
{
  Mha m = { .e = 8,
            .bias = 1,
            .prefix = "a.",
            .metadata = "{\"a.num_heads\":\"4\",\"a.add_zero_attn\":\"1\"}" };
  expect_map_fail (mha_file (&m), "a.", 8, 2, 1, SATTN_E_SHAPE,
                   WORDS ("heads = 2", "num_heads = 4", "'a.num_heads'"));
  expect_map_fail (mha_file (&m), "a.", 8, 4, 0, SATTN_E_INVAL,
                   WORDS ("add_zero_attn = 0", "add_zero_attn = 1"));
  expect_map_ok (mha_file (&m), "a.", 8, 4, 1);
  /* metadata of another module is not consulted */
  Mha m2 = { .e = 8, .metadata = "{\"b.num_heads\":\"4\"}" };
  expect_map_ok (mha_file (&m2), NULL, 8, 2, 0);
  /* a value the one metadata parser refuses is an error with its words,
   * never "not given" (it was read as absent) */
  static const char *const bad[] = { "x", " 2", "-1", "2.0", "1e3", "" };
  for (size_t i = 0; i < G_N_ELEMENTS (bad); i++) {
    gchar *md = g_strdup_printf ("{\"num_heads\":\"%s\"}", bad[i]);
    Mha m3 = { .e = 8, .metadata = md };
    expect_map_fail (mha_file (&m3), NULL, 8, 2, 0, SATTN_E_INVAL,
                     WORDS ("metadata 'num_heads'", "expected a whole number",
                            "digits only"));
    g_free (md);
  }
}

/* A size of 0 in the metadata (num_heads, head_dim, value_dim) means "not
 * given" to both mappers, as 0 does in SattnConfig: the file maps as if
 * the key were absent; a nonzero size that contradicts the caller is
 * refused by both. */
static void
test_map_metadata_zero (void)
{
  Mha m = { .e = 8,
            .bias = 1,
            .metadata = "{\"num_heads\":\"0\","
                        "\"head_dim\":\"0\",\"value_dim\":\"0\"}" };
  SattnTensorFile *f = load_ok (mha_file (&m));
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  SattnAttnReport rep;
  char err[512];

  g_assert_cmpint (sattn_mha_weights_from_file (f, NULL, 8, 2, 0, &cfg, &w,
                                                &owner, err, sizeof err),
                   ==, SATTN_OK);
  g_assert_cmpuint (cfg.heads, ==, 2);
  g_assert_cmpuint (cfg.d_head, ==, 4);
  sattn_mha_weights_free (owner);
  owner = NULL;

  /* Any layout, heads given: the caller's, not contradicted. */
  memset (&cfg, 0, sizeof cfg);
  cfg.heads = 2;
  g_assert_cmpint (sattn_attn_weights_from_file (f, NULL, 0, &cfg, &w, &owner,
                                                 &rep, err, sizeof err),
                   ==, SATTN_OK);
  g_assert_cmpuint (cfg.heads, ==, 2);
  g_assert_cmpint (rep.heads_from, ==, SATTN_FROM_CALLER);
  g_assert_cmpint (rep.d_head_from, ==, SATTN_FROM_SHAPES);
  g_assert_cmpint (rep.d_value_from, ==, SATTN_FROM_SHAPES);
  g_assert_cmpuint (cfg.d_head, ==, 4);
  sattn_mha_weights_free (owner);
  owner = NULL;

  /* Any layout, nothing given: the default head count, sizes from the
   * shapes, as without the keys. */
  memset (&cfg, 0, sizeof cfg);
  g_assert_cmpint (sattn_attn_weights_from_file (f, NULL, 0, &cfg, &w, &owner,
                                                 &rep, err, sizeof err),
                   ==, SATTN_OK);
  g_assert_cmpuint (cfg.heads, ==, 1);
  g_assert_cmpint (rep.heads_from, ==, SATTN_FROM_DEFAULT);
  g_assert_cmpuint (cfg.d_head, ==, 8);
  g_assert_cmpint (rep.d_head_from, ==, SATTN_FROM_SHAPES);
  sattn_mha_weights_free (owner);
  owner = NULL;
  sattn_tensor_file_free (f);

  /* A nonzero num_heads against another caller's value: both refuse. */
  Mha m4 = { .e = 8, .bias = 1, .metadata = "{\"num_heads\":\"4\"}" };
  expect_map_fail (mha_file (&m4), NULL, 8, 2, 0, SATTN_E_SHAPE,
                   WORDS ("heads = 2", "num_heads = 4", "'num_heads'"));
  f = load_ok (mha_file (&m4));
  memset (&cfg, 0, sizeof cfg);
  cfg.heads = 2;
  g_assert_cmpint (sattn_attn_weights_from_file (f, NULL, 0, &cfg, &w, &owner,
                                                 &rep, err, sizeof err),
                   ==, SATTN_E_SHAPE);
  assert_msg (err, WORDS ("heads = 2", "num_heads = 4", "'num_heads'"));
  g_assert_null (owner);
  sattn_tensor_file_free (f);
}

/* sattn_attn_prefix: the mappers' prefix rule (a '.' appended unless
 * empty or ending in one) and an encoder layer's attention under
 * "self_attn.", the one place the element takes them from. */
static void
test_attn_prefix (void)
{
  float v[12] = { 0 };
  Builder *b = builder_new (NULL);
  builder_add (b, "enc.0.linear1.weight", "F32", "[4,2]", v, 8);
  builder_add (b, "enc.0.linear2.weight", "F32", "[2,4]", v, 8);
  builder_add (b, "attn.in_proj_weight", "F32", "[6,2]", v, 12);
  SattnTensorFile *f = load_ok (builder_finish (b));
  static const struct {
    const char *in, *out;
  } cases[] = {
    { "enc.0", "enc.0.self_attn." },
    { "enc.0.", "enc.0.self_attn." },
    { "attn", "attn." },
    { "attn.", "attn." },
    { "", "" },
    { NULL, "" },
    { "enc", "enc." },
  };
  for (size_t i = 0; i < G_N_ELEMENTS (cases); i++) {
    char *p = sattn_attn_prefix (f, cases[i].in);
    g_assert_cmpstr (p, ==, cases[i].out);
    free (p);
  }
  char *p = sattn_attn_prefix (NULL, "x");
  g_assert_cmpstr (p, ==, "x.");
  free (p);
  sattn_tensor_file_free (f);
}

static void
test_err_buffer (void)
{
  /* messages are cut to the buffer and always terminated */
  char err[8];
  SattnTensorFile *f;
  memset (err, 'x', sizeof err);
  g_assert_cmpint (sattn_tensor_file_load_bytes ((const uint8_t *) "abc", 3, &f,
                                                 err, sizeof err),
                   ==, SATTN_E_FORMAT);
  g_assert_cmpuint (strlen (err), ==, 7);
  g_assert_cmpint (sattn_tensor_file_load_bytes ((const uint8_t *) "abc", 3, &f,
                                                 err, 1),
                   ==, SATTN_E_FORMAT);
  g_assert_cmpstr (err, ==, "");
  g_assert_cmpint (sattn_tensor_file_load_bytes ((const uint8_t *) "abc", 3, &f,
                                                 NULL, 0),
                   ==, SATTN_E_FORMAT);
  g_assert_cmpint (sattn_tensor_file_load_bytes (NULL, 0, &f, NULL, 0), ==,
                   SATTN_E_FORMAT);
  g_assert_cmpint (sattn_tensor_file_load_bytes (NULL, 5, &f, NULL, 0), ==,
                   SATTN_E_INVAL);
  /* names from the file are escaped and bounded in messages */
  GString *s = g_string_new ("{\"\\u0001");
  for (int i = 0; i < 1000; i++)
    g_string_append_c (s, 'n');
  g_string_append (s,
                   "\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}");
  char big[512];
  GBytes *img = image_json (s->str, NULL, 0);
  gsize len;
  const guint8 *d = g_bytes_get_data (img, &len);
  g_assert_cmpint (sattn_tensor_file_load_bytes (d, len, &f, big, sizeof big),
                   ==, SATTN_E_DTYPE);
  assert_msg (big, WORDS ("'\\x01nnn", "...'", "unknown dtype 'X'"));
  g_bytes_unref (img);
  g_string_free (s, TRUE);
}

/* The loader reads the SattnConfig within SattnLoadOptions as
 * sattn_model_new reads one: struct_size 0 or this version's is fine
 * (sattn_load_options_init sets the latter); a smaller one, or one larger
 * than the struct can be there, is refused with words.  The model holds
 * no thread count, and the mapped weights say their size. */
static void
test_load_options_size (void)
{
  Mha m = { .e = 8, .bias = 1, .metadata = "{\"num_heads\":\"2\"}" };
  SattnTensorFile *f = load_ok (mha_file (&m)); /* takes the bytes */
  SattnLoadOptions opt;
  SattnModel *model = NULL;
  char err[512];

  sattn_load_options_init (&opt);
  g_assert_cmpuint (opt.cfg.struct_size, ==, sizeof (SattnConfig));
  g_assert_cmpint (sattn_model_load_tensors (f, "", &opt, &model, NULL, err,
                                             sizeof err),
                   ==, SATTN_OK);
  g_assert_cmpuint (sattn_model_config (model)->struct_size, ==,
                    sizeof (SattnConfig));
  sattn_model_free (model);
  opt.cfg.struct_size = 0;
  g_assert_cmpint (sattn_model_load_tensors (f, "", &opt, &model, NULL, err,
                                             sizeof err),
                   ==, SATTN_OK);
  sattn_model_free (model);
  opt.cfg.struct_size = 16;
  g_assert_cmpint (sattn_model_load_tensors (f, "", &opt, &model, NULL, err,
                                             sizeof err),
                   ==, SATTN_E_INVAL);
  g_assert_null (model);
  assert_msg (err, WORDS ("SattnLoadOptions.cfg.struct_size=16",
                          "sizeof (SattnConfig)"));
  opt.cfg.struct_size = sizeof (SattnConfig) + 8;
  g_assert_cmpint (sattn_model_load_tensors (f, "", &opt, &model, NULL, err,
                                             sizeof err),
                   ==, SATTN_E_INVAL);
  g_assert_null (model);
  assert_msg (err, WORDS ("SattnLoadOptions.cfg.struct_size"));

  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  memset (&w, 0xa5, sizeof w);
  g_assert_cmpint (sattn_mha_weights_from_file (f, "", 8, 2, 0, &cfg, &w,
                                                &owner, NULL, 0),
                   ==, SATTN_OK);
  g_assert_cmpuint (w.struct_size, ==, sizeof (SattnWeights));
  sattn_mha_weights_free (owner);
  sattn_tensor_file_free (f);
}

int
main (int argc, char **argv)
{
  GError *e = NULL;
  int ret;

  g_test_init (&argc, &argv, NULL);
  tmpdir = g_dir_make_tmp ("sattn-weights-XXXXXX", &e);
  g_assert_no_error (e);

  g_test_add_func ("/weights/file/basic", test_basic_file);
  g_test_add_func ("/weights/file/padded-header", test_padded_header);
  g_test_add_func ("/weights/dtype/f16", test_f16);
  g_test_add_func ("/weights/dtype/bf16", test_bf16);
  g_test_add_func ("/weights/dtype/f64", test_f64);
  g_test_add_func ("/weights/dtype/map-alike", test_dtypes_map_alike);
  g_test_add_func ("/weights/map/layout", test_map_layout);
  g_test_add_func ("/weights/map/separate-nobias-prefix",
                   test_map_separate_nobias_prefix);
  g_test_add_func ("/weights/map/load-path", test_map_load_path);
  g_test_add_func ("/weights/bad/missing-file", test_missing_file);
  g_test_add_func ("/weights/bad/header-length", test_short_and_header_length);
  g_test_add_func ("/weights/bad/truncated", test_truncated);
  g_test_add_func ("/weights/bad/json", test_bad_json);
  g_test_add_func ("/weights/bad/entries", test_bad_entries);
  g_test_add_func ("/weights/bad/layout", test_bad_layout);
  g_test_add_func ("/weights/bad/map-missing", test_map_missing);
  g_test_add_func ("/weights/bad/missing-lists", test_missing_lists);
  g_test_add_func ("/weights/bad/map-shapes", test_map_shapes);
  g_test_add_func ("/weights/bad/map-values", test_map_dtype_and_values);
  g_test_add_func ("/weights/bad/map-metadata", test_map_metadata);
  g_test_add_func ("/weights/map/metadata-zero", test_map_metadata_zero);
  g_test_add_func ("/weights/map/attn-prefix", test_attn_prefix);
  g_test_add_func ("/weights/bad/err-buffer", test_err_buffer);
  g_test_add_func ("/weights/load/options-size", test_load_options_size);
  ret = g_test_run ();

  g_rmdir (tmpdir);
  g_free (tmpdir);
  return ret;
}
