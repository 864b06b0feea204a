/* libsattn from an installed prefix (docs/api.md, "Use the library"):
 *   cc use-library.c $(pkg-config --cflags --libs sattn) -o use-library
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdio.h>
#include <sattn/sattn.h>

int
main (void)
{
  enum { N = 8, D = 2 }; /* 8 frames of 2 floats; identity projections */
  /* struct_size left 0: this version's struct (see sattn.h). */
  SattnConfig cfg = { .d_model = D, .heads = 1, .causal = 1 };
  SattnStreamConfig sc = { .window = 4, .hop = 2, .threads = 1 };
  float in[N * D], out[N * D];
  size_t rows = 0, more = 0;
  SattnStatus st = SATTN_OK;
  for (int i = 0; i < N * D; i++)
    in[i] = (float) ((i * 7) % 5) - 2.0f;
  SattnModel *m = sattn_model_new (&cfg, NULL, &st); /* NULL: identity */
  SattnStream *s = m ? sattn_stream_new (m, &sc, &st) : NULL;
  if (!s || (st = sattn_stream_push (s, in, N, NULL, out, N, NULL, &rows)) ||
      (st = sattn_stream_drain (s, out + rows * D, N - rows, NULL, &more))) {
    fprintf (stderr, "sattn: %s\n", sattn_status_string (st));
    return 1;
  }
  for (size_t i = 0; i < rows + more; i++)
    printf ("frame %zu: in %5.1f %5.1f  out %9.6f %9.6f\n", i, in[D * i],
            in[D * i + 1], out[D * i], out[D * i + 1]);
  sattn_stream_free (s);
  sattn_model_free (m);
  return 0;
}
