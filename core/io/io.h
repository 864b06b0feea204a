/* The weights layer's private parts, shared by its files (io/): the
 * parsed file's tensors, the dtypes, and the helpers that write messages.
 * Uses GLib; only io/ includes it.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_IO_H
#define SATTN_IO_H

#include "sattn/sattn-weights.h"
#include "model/model.h"

#include <glib.h>
#include <stdint.h>

/* ------------------------------------------------------------- dtypes */

typedef enum {
  KIND_OTHER = 0, /* valid safetensors dtype, not converted */
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

/* The safetensors dtype called name, or NULL (io/dtype.c). */
const Dtype *sattn_io_find_dtype (const char *name);
/* n values of kind (a float kind) at src, little-endian, into dst. */
void sattn_io_convert (DtypeKind kind, const uint8_t *src, size_t n,
                       float *dst);
uint64_t sattn_io_read_le64 (const uint8_t *p);

/* --------------------------------------------------------- the file */

typedef struct {
  char *name;
  const Dtype *dtype;
  size_t ndim;
  size_t *shape; /* ndim sizes (NULL when ndim == 0) */
  size_t numel;
  uint64_t begin, end;
  float *data; /* float kinds: numel floats; NULL otherwise */
} Tensor;

struct SattnTensorFile {
  size_t n;
  Tensor *t;         /* sorted by data offsets */
  GHashTable *index; /* name -> Tensor * (borrowed) */
  GHashTable *meta;  /* key -> value (owned strings) */
};

/* The tensor called name, or NULL (io/safetensors.c). */
const Tensor *sattn_io_lookup (const SattnTensorFile *f, const char *name);

/* ----------------------------------------------------------- messages */

/* The message (printf format) into err (err_len bytes, may be NULL / 0). */
void sattn_io_set_err (char *err, size_t err_len, const char *fmt, ...)
    G_GNUC_PRINTF (3, 4);
/* The same, returning st. */
SattnStatus sattn_io_fail (SattnStatus st, char *err, size_t err_len,
                           const char *fmt, ...) G_GNUC_PRINTF (4, 5);

/* A printable, bounded rendering of a name taken from a file, for
 * messages: control and non-ASCII bytes escaped, long names cut. */
typedef struct {
  char s[200];
} ShowBuf;

const char *sattn_io_show (ShowBuf *b, const char *name);
/* "[3, 4]" into buf. */
const char *sattn_io_shape_str (char *buf, size_t len, const size_t *shape,
                                size_t ndim);

/* ----------------------------------------------------------- metadata */

/* The one metadata parser (io/meta.c): keys prefix + key of f, errors
 * into err.  Each function leaves *out alone and sets *found (may be
 * NULL) to 0 when the key is absent; a present value outside the
 * vocabulary or the range is refused (SATTN_E_INVAL) with the key, the
 * value and what is accepted. */
typedef struct {
  const SattnTensorFile *f;
  const char *prefix; /* "" or ending in '.' */
  char *err;
  size_t err_len;
} SattnMeta;

/* A number's range: lo <= v <= hi, or < / > where open. */
typedef struct {
  double lo, hi;
  int lo_open, hi_open;
} SattnMetaRange;

const char *sattn_meta_value (const SattnMeta *m, const char *key);
SattnStatus sattn_meta_bool (const SattnMeta *m, const char *key, int *out,
                             int *found);
SattnStatus sattn_meta_uint (const SattnMeta *m, const char *key, uint64_t lo,
                             uint64_t hi, uint64_t *out, int *found);
SattnStatus sattn_meta_double (const SattnMeta *m, const char *key,
                               const SattnMetaRange *r, double *out,
                               int *found);
/* "lo hi": two numbers of the range, lo <= hi. */
SattnStatus sattn_meta_pair (const SattnMeta *m, const char *key,
                             const SattnMetaRange *r, double out[2],
                             int *found);
SattnStatus sattn_meta_word (const SattnMeta *m, const char *key,
                             const char *const *words, size_t n, int *out,
                             int *found);

/* Whether an attention module of this layout reads prefix + suffix
 * (io/layouts.c). */
int sattn_io_layout_reads (SattnLayout layout, const char *suffix);

#endif
