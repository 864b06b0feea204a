/* libFuzzer target for the weights layer: the safetensors reader, the
 * layout mappers and the one loader (sattn_model_load_tensors: layers and
 * whole models, each then run on a few frames).  Any input must either load, with every
 * tensor readable in full, or fail with a status and a message; never
 * crash, hang, leak or allocate beyond what the input implies.
 *
 * Built by tests/fuzz/run-fuzz.sh (clang -fsanitize=fuzzer,address,
 * undefined); tests/fuzz/replay.c runs the same entry point over the seed
 * corpus in the regular test suite.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sattn/sattn.h>
#include <sattn/sattn-weights.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define CHECK(c)                                                             \
  do {                                                                       \
    if (!(c)) {                                                              \
      fprintf (stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort ();                                                              \
    }                                                                        \
  } while (0)

static volatile float sink;

/* Read every float so that the sanitizers see any bad extent. */
static void
touch (const float *v, size_t n)
{
  float acc = 0;
  for (size_t i = 0; i < n; i++)
    acc += v[i];
  sink = acc;
}

/* A mapping that failed: no owner, a message that fits its buffer. */
static void
check_failed (const SattnMhaWeights *owner, const char *err, size_t err_len)
{
  CHECK (owner == NULL);
  CHECK (err[0] != '\0');
  CHECK (strlen (err) < err_len);
}

/* Every array of a mapping readable in full, at the sizes cfg gives. */
static void
touch_weights (const SattnConfig *cfg, const SattnWeights *w)
{
  size_t e = cfg->d_model, dq = cfg->heads * cfg->d_head;
  size_t dv = cfg->heads * cfg->d_value;
  touch (w->wq, dq * e);
  touch (w->wk, dq * e);
  touch (w->wv, dv * e);
  if (w->wo)
    touch (w->wo, cfg->d_out * dv);
  if (w->bq)
    touch (w->bq, dq);
  if (w->bk)
    touch (w->bk, dq);
  if (w->bv)
    touch (w->bv, dv);
  if (w->bo)
    touch (w->bo, cfg->d_out);
  CHECK ((w->bias_k == NULL) == (w->bias_v == NULL));
  if (w->bias_k) {
    touch (w->bias_k, dq);
    touch (w->bias_v, dv);
  }
}

/* The any-layout mapping: sizes resolved, every array readable in full. */
static void
try_attn (const SattnTensorFile *f, const char *prefix, size_t d_model,
          size_t heads, size_t d_head, size_t d_value, int zero_attn)
{
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  SattnAttnReport rep;
  char err[256];
  SattnStatus st;

  cfg.d_model = d_model;
  cfg.heads = heads;
  cfg.d_head = d_head;
  cfg.d_value = d_value;
  st = sattn_attn_weights_from_file (f, prefix, zero_attn, &cfg, &w, &owner,
                                     &rep, err, sizeof err);
  if (st != SATTN_OK) {
    check_failed (owner, err, sizeof err);
    return;
  }
  CHECK (owner != NULL);
  CHECK (rep.layout != SATTN_LAYOUT_NONE);
  CHECK (cfg.d_model > 0 && cfg.heads > 0 && cfg.d_head > 0 &&
         cfg.d_value > 0 && cfg.d_out > 0);
  CHECK (d_model == 0 || cfg.d_model == d_model);
  CHECK (heads == 0 || cfg.heads == heads);
  CHECK (d_head == 0 || cfg.d_head == d_head);
  CHECK (d_value == 0 || cfg.d_value == d_value);
  CHECK ((w.wo != NULL) == (rep.out_proj != 0));
  CHECK (w.wo != NULL || cfg.d_out == cfg.heads * cfg.d_value);
  touch_weights (&cfg, &w);
  sattn_mha_weights_free (owner);
}

static void
try_map (const SattnTensorFile *f, const char *prefix, size_t d_model,
         size_t heads, int zero_attn)
{
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  char err[256];
  SattnStatus st = sattn_mha_weights_from_file (f, prefix, d_model, heads,
                                                zero_attn, &cfg, &w, &owner,
                                                err, sizeof err);

  if (st != SATTN_OK) {
    check_failed (owner, err, sizeof err);
    return;
  }
  CHECK (owner != NULL);
  CHECK (cfg.d_model > 0 && cfg.heads == heads);
  CHECK (cfg.d_head * cfg.heads == cfg.d_model);
  CHECK (d_model == 0 || cfg.d_model == d_model);
  /* nn.MultiheadAttention: square projections, an output projection,
   * the three input biases together or none. */
  CHECK (cfg.d_value == cfg.d_head && cfg.d_out == cfg.d_model);
  CHECK (w.wo != NULL);
  CHECK ((w.bq == NULL) == (w.bk == NULL) && (w.bq == NULL) == (w.bv == NULL));
  touch_weights (&cfg, &w);
  sattn_mha_weights_free (owner);
}

/* The one loader under prefix; a model it returns runs a few frames
 * (a whole model through its per-window stream, a layer through
 * sattn_attend), whose outputs must be finite. */
static void
try_load (const SattnTensorFile *f, const char *prefix, size_t heads,
          size_t d_model)
{
  SattnLoadOptions opt;
  SattnLoadReport rep;
  SattnModel *m = NULL;
  char err[256];
  SattnStatus st;

  memset (&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  sattn_load_options_init (&opt);
  opt.cfg.heads = heads;
  opt.cfg.d_model = d_model;
  st = sattn_model_load_tensors (f, prefix, &opt, &m, &rep, err, sizeof err);
  if (st != SATTN_OK) {
    CHECK (m == NULL);
    CHECK (err[0] != '\0' && strlen (err) < sizeof err);
    return;
  }
  CHECK (m != NULL);
  const SattnConfig *c = sattn_model_config (m);
  const size_t d = c->d_model, d_out = sattn_model_d_out (m);
  CHECK (d > 0 && d_out > 0 && c->heads > 0);
  CHECK (rep.kind == sattn_model_kind (m));
  CHECK (rep.layers == sattn_model_layers (m));
  if (d <= 64 && d_out <= 64) {
    float x[4 * 64], out[4 * 64 * 4];
    for (size_t i = 0; i < 4 * d; i++)
      x[i] = (float) ((int) (i % 7) - 3) * 0.25f;
    if (sattn_model_kind (m) == SATTN_MODEL_WHOLE) {
      size_t win = sattn_model_max_window (m);
      SattnStreamConfig sc = { 0 };
      SattnStatus sst;
      sc.window = win == 0 || win > 3 ? 3 : win;
      sc.hop = 1;
      sc.output = sattn_model_classes (m) > 0 ? SATTN_OUTPUT_CLASSES
                                              : SATTN_OUTPUT_MEAN;
      sc.threads = 1;
      SattnStream *s = sattn_stream_new (m, &sc, &sst);
      CHECK (s != NULL);
      size_t rows = 0, rf = sattn_stream_row_floats (s);
      CHECK (rf <= 64);
      CHECK (sattn_stream_push (s, x, 4, NULL, out, 4, NULL, &rows) ==
             SATTN_OK);
      CHECK (rows == 4);
      for (size_t i = 0; i < rows * rf; i++)
        CHECK (out[i] == out[i] && out[i] - out[i] == 0.0f);
      sattn_stream_free (s);
    } else if (sattn_model_extra_keys (m) == 0) {
      CHECK (sattn_attend (m, x, 4, NULL, out, NULL, NULL) == SATTN_OK);
      for (size_t i = 0; i < 4 * d_out; i++)
        CHECK (out[i] == out[i] && out[i] - out[i] == 0.0f);
    }
  }
  sattn_model_free (m);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  SattnTensorFile *f = (SattnTensorFile *) 0x1;
  char err[256];
  SattnStatus st = sattn_tensor_file_load_bytes (data, size, &f, err,
                                                 sizeof err);
  size_t n;

  if (st != SATTN_OK) {
    CHECK (f == NULL);
    CHECK (err[0] != '\0');
    return 0;
  }
  CHECK (f != NULL && err[0] == '\0');

  n = sattn_tensor_file_n_tensors (f);
  CHECK (sattn_tensor_file_name (f, n) == NULL);
  for (size_t i = 0; i < n; i++) {
    const char *name = sattn_tensor_file_name (f, i);
    size_t ndim = 0, numel = 1;
    const size_t *shape = NULL;
    const float *v;
    CHECK (name != NULL);
    CHECK (sattn_tensor_file_dtype (f, name) != NULL);
    v = sattn_tensor_file_get (f, name, &ndim, &shape);
    if (v == NULL)
      continue;
    for (size_t k = 0; k < ndim; k++)
      numel *= shape[k];
    CHECK (numel == sattn_tensor_file_numel (f, name));
    touch (v, numel);
  }
  (void) sattn_tensor_file_metadata (f, "format");

  /* The mapping at the top level and under every prefix that looks like
   * an attention module; heads and the embedding size from the input. */
  {
    size_t heads = 1 + (size > 0 ? data[size - 1] % 4 : 0);
    try_map (f, "", 0, heads, 0);
    try_map (f, NULL, 4, 1, 1);
    try_attn (f, "", 0, 0, 0, 0, 0);
    try_attn (f, NULL, 0, heads, 0, 0, (int) (size & 1));
    try_attn (f, "", 8, 2, 4, 8, 0);
    try_load (f, "", 0, 0);
    try_load (f, "", heads, 0);
    try_load (f, "net", 0, 0);
    for (size_t i = 0; i < n && i < 16; i++) {
      const char *name = sattn_tensor_file_name (f, i);
      const char *dot = strrchr (name, '.');
      if (dot != NULL && strstr (name, "weight") != NULL) {
        /* Any Linear's module, and its parent: every layout's prefix. */
        char prefix[256];
        size_t len = (size_t) (dot - name);
        const char *up;
        if (len < sizeof prefix) {
          memcpy (prefix, name, len);
          prefix[len] = '\0';
          up = strrchr (prefix, '.');
          try_attn (f, prefix, 0, 0, 0, 0, 0);
          if (up != NULL) {
            prefix[up - prefix + 1] = '\0';
            try_attn (f, prefix, 0, heads, 0, 0, 0);
            try_attn (f, prefix, 0, 0, 2, 0, 0);
          }
        }
      }
      if (dot != NULL && strstr (name, "proj_weight") != NULL) {
        char prefix[256];
        size_t len = (size_t) (dot - name) + 1;
        if (len >= sizeof prefix)
          continue;
        memcpy (prefix, name, len);
        prefix[len] = '\0';
        try_map (f, prefix, 0, heads, (int) (size & 1));
        try_map (f, prefix, 8, 2, 0);
      }
    }
  }
  sattn_tensor_file_free (f);
  return 0;
}
