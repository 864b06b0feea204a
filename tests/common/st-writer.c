/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "st-writer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing byte buffer. */
typedef struct {
  char *p;
  size_t len, cap;
} Buf;

struct StWriter {
  Buf meta;    /* the __metadata__ members, without the braces */
  Buf tensors; /* the tensors' members */
  Buf data;
  int failed; /* an allocation failed: st_writer_save refuses */
};

static void
buf_add (StWriter *w, Buf *b, const void *p, size_t n)
{
  if (w->failed)
    return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
      cap *= 2;
    char *q = realloc (b->p, cap);
    if (q == NULL) {
      w->failed = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy (b->p + b->len, p, n);
  b->len += n;
}

static void
buf_str (StWriter *w, Buf *b, const char *s)
{
  buf_add (w, b, s, strlen (s));
}

static void
buf_printf (StWriter *w, Buf *b, const char *fmt, ...)
{
  char tmp[128];
  va_list ap;
  va_start (ap, fmt);
  int n = vsnprintf (tmp, sizeof tmp, fmt, ap);
  va_end (ap);
  if (n < 0 || (size_t) n >= sizeof tmp) {
    w->failed = 1;
    return;
  }
  buf_add (w, b, tmp, (size_t) n);
}

/* s as a JSON string: quotes, backslashes and control characters
 * escaped. */
static void
buf_json (StWriter *w, Buf *b, const char *s)
{
  buf_str (w, b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char) *s;
    if (c == '"' || c == '\\') {
      char e[2] = { '\\', (char) c };
      buf_add (w, b, e, 2);
    } else if (c < 0x20) {
      buf_printf (w, b, "\\u%04x", c);
    } else {
      buf_add (w, b, s, 1);
    }
  }
  buf_str (w, b, "\"");
}

StWriter *
st_writer_new (void)
{
  return calloc (1, sizeof (StWriter));
}

void
st_writer_free (StWriter *w)
{
  if (w == NULL)
    return;
  free (w->meta.p);
  free (w->tensors.p);
  free (w->data.p);
  free (w);
}

void
st_writer_meta (StWriter *w, const char *key, const char *value)
{
  if (w->meta.len > 0)
    buf_str (w, &w->meta, ",");
  buf_json (w, &w->meta, key);
  buf_str (w, &w->meta, ":");
  buf_json (w, &w->meta, value);
}

void
st_writer_f32 (StWriter *w, const char *name, const float *v, size_t ndim,
               const size_t *shape)
{
  size_t off = w->data.len, n = 1;

  if (w->tensors.len > 0)
    buf_str (w, &w->tensors, ",");
  buf_json (w, &w->tensors, name);
  buf_str (w, &w->tensors, ":{\"dtype\":\"F32\",\"shape\":[");
  for (size_t i = 0; i < ndim; i++) {
    buf_printf (w, &w->tensors, "%s%zu", i ? "," : "", shape[i]);
    n *= shape[i];
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    unsigned char le[4];
    memcpy (&u, &v[i], 4);
    for (int k = 0; k < 4; k++)
      le[k] = (unsigned char) (u >> (8 * k));
    buf_add (w, &w->data, le, 4);
  }
  buf_printf (w, &w->tensors, "],\"data_offsets\":[%zu,%zu]}", off,
              off + 4 * n);
}

void
st_writer_f32_2d (StWriter *w, const char *name, const float *v, size_t rows,
                  size_t cols)
{
  const size_t shape[2] = { rows, cols };
  st_writer_f32 (w, name, v, cols ? 2 : 1, shape);
}

int
st_writer_save (const StWriter *w, const char *path)
{
  static const char spaces[] = "       "; /* 7: the most padding */
  const int meta = w->meta.len > 0, tensors = w->tensors.len > 0;
  size_t hlen = 2 + w->tensors.len +
                (meta ? strlen ("\"__metadata__\":{}") + w->meta.len +
                            (tensors ? 1 : 0)
                      : 0);
  size_t pad = (8 - hlen % 8) % 8;
  uint64_t total = hlen + pad;
  unsigned char le[8];

  if (w->failed) {
    errno = ENOMEM;
    return -1;
  }
  for (int k = 0; k < 8; k++)
    le[k] = (unsigned char) (total >> (8 * k));
  /* Written beside path and renamed over it: a reader of the old file
   * (a model that maps it) never sees it half written. */
  size_t plen = strlen (path);
  char *tmp = malloc (plen + sizeof ".tmp");
  if (tmp == NULL)
    return -1;
  memcpy (tmp, path, plen);
  memcpy (tmp + plen, ".tmp", sizeof ".tmp");
  FILE *f = fopen (tmp, "wb");
  if (f == NULL) {
    free (tmp);
    return -1;
  }
  int ok = fwrite (le, 1, 8, f) == 8 && fputs ("{", f) >= 0;
  if (ok && meta)
    ok = fputs ("\"__metadata__\":{", f) >= 0 &&
         fwrite (w->meta.p, 1, w->meta.len, f) == w->meta.len &&
         fputs (tensors ? "}," : "}", f) >= 0;
  if (ok && tensors)
    ok = fwrite (w->tensors.p, 1, w->tensors.len, f) == w->tensors.len;
  ok = ok && fputs ("}", f) >= 0 && fwrite (spaces, 1, pad, f) == pad;
  if (ok && w->data.len > 0)
    ok = fwrite (w->data.p, 1, w->data.len, f) == w->data.len;
  int saved = ok ? 0 : errno;
  if (fclose (f) != 0 && ok) {
    ok = 0;
    saved = errno;
  }
  if (ok && rename (tmp, path) != 0) {
    ok = 0;
    saved = errno;
  }
  if (!ok)
    remove (tmp);
  free (tmp);
  if (!ok) {
    errno = saved ? saved : EIO;
    return -1;
  }
  return 0;
}
