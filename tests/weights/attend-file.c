/* Run sattn_attend on frames read from a file, with the attention module
 * of a safetensors file in any layout, for tests driven from Python.
 *
 * Usage: weights-attend-file WEIGHTS PREFIX HEADS HEAD_DIM VALUE_DIM
 *                             SCALE CAUSAL FRAMES_F32 OUT_F64
 *   HEADS, HEAD_DIM, VALUE_DIM: 0 = from the file (see
 *   sattn_attn_weights_from_file); SCALE 0 = 1/sqrt(head_dim).
 *   FRAMES_F32: n × d_model little-endian float32 frames.
 *   OUT_F64: written with the n × d_out output rows, then the
 *   heads × n × n attention weights, as little-endian float64.
 * Prints one JSON object: the layout found and the resolved sizes.
 * Exit status 1 with the library's message on stderr when loading fails.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sattn/sattn.h>
#include <sattn/sattn-weights.h>

#include <glib.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *
source (SattnSource s)
{
  switch (s) {
    case SATTN_FROM_CALLER:
      return "caller";
    case SATTN_FROM_METADATA:
      return "metadata";
    case SATTN_FROM_SHAPES:
      return "shapes";
    case SATTN_FROM_DEFAULT:
      return "default";
  }
  return "?";
}

int
main (int argc, char **argv)
{
  SattnConfig cfg = { 0 };
  SattnWeights w;
  SattnMhaWeights *owner = NULL;
  SattnAttnReport rep;
  SattnModel *m;
  SattnStatus st;
  char err[1024];
  gchar *buf = NULL;
  gsize len = 0;
  GError *e = NULL;
  size_t n, d, nk;
  float *x, *out, *attn;
  FILE *fo;

  if (argc != 10) {
    fprintf (stderr,
             "usage: %s WEIGHTS PREFIX HEADS HEAD_DIM VALUE_DIM "
             "SCALE CAUSAL FRAMES_F32 OUT_F64\n",
             argv[0]);
    return 2;
  }
  cfg.heads = strtoul (argv[3], NULL, 10);
  cfg.d_head = strtoul (argv[4], NULL, 10);
  cfg.d_value = strtoul (argv[5], NULL, 10);
  cfg.scale = strtof (argv[6], NULL);
  cfg.causal = atoi (argv[7]);
  st = sattn_attn_weights_load (argv[1], argv[2], 0, &cfg, &w, &owner, &rep,
                                err, sizeof err);
  if (st != SATTN_OK) {
    fprintf (stderr, "%s: %s\n", sattn_status_string (st), err);
    return 1;
  }
  m = sattn_model_new (&cfg, &w, &st);
  sattn_mha_weights_free (owner);
  if (m == NULL) {
    fprintf (stderr, "sattn_model_new: %s\n", sattn_status_string (st));
    return 1;
  }
  if (!g_file_get_contents (argv[8], &buf, &len, &e)) {
    fprintf (stderr, "%s\n", e->message);
    return 1;
  }
  d = cfg.d_model;
  if (len == 0 || len % (4 * d) != 0) {
    fprintf (stderr,
             "%s: %zu bytes is not a whole number of %zu-float "
             "frames\n",
             argv[8], (size_t) len, d);
    return 1;
  }
  n = len / (4 * d);
  nk = n + sattn_model_extra_keys (m);
  x = g_new (float, n *d);
  memcpy (x, buf, len); /* little-endian hosts only (tests) */
  out = g_new (float, n *sattn_model_d_out (m));
  attn = g_new (float, cfg.heads *n *nk);
  st = sattn_attend (m, x, n, NULL, out, attn, NULL);
  if (st != SATTN_OK) {
    fprintf (stderr, "sattn_attend: %s\n", sattn_status_string (st));
    return 1;
  }
  fo = fopen (argv[9], "wb");
  if (fo == NULL) {
    perror (argv[9]);
    return 1;
  }
  for (size_t i = 0; i < n * sattn_model_d_out (m); i++) {
    double v = out[i];
    fwrite (&v, sizeof v, 1, fo);
  }
  for (size_t i = 0; i < cfg.heads * n * nk; i++) {
    double v = attn[i];
    fwrite (&v, sizeof v, 1, fo);
  }
  if (fclose (fo) != 0) {
    perror (argv[9]);
    return 1;
  }
  printf ("{\"layout\": \"%s\", \"d_model\": %zu, \"heads\": %zu, "
          "\"head_dim\": %zu, \"value_dim\": %zu, \"d_out\": %zu, "
          "\"heads_from\": \"%s\", \"head_dim_from\": \"%s\", "
          "\"value_dim_from\": \"%s\", \"q_bias\": %d, \"k_bias\": %d, "
          "\"v_bias\": %d, \"out_proj\": %d, \"out_bias\": %d, "
          "\"bias_kv\": %d, \"n\": %zu}\n",
          sattn_layout_name (rep.layout), cfg.d_model, cfg.heads, cfg.d_head,
          cfg.d_value, cfg.d_out, source (rep.heads_from),
          source (rep.d_head_from), source (rep.d_value_from), rep.q_bias,
          rep.k_bias, rep.v_bias, rep.out_proj, rep.out_bias, rep.bias_kv, n);
  sattn_model_free (m);
  g_free (x);
  g_free (out);
  g_free (attn);
  g_free (buf);
  return 0;
}
