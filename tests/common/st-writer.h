/* The tests' one safetensors writer (C; the Python side has
 * python/sattn/stfile.py): F32 tensors, little-endian, in the order
 * added, and an optional __metadata__ map of strings; the JSON header is
 * padded with spaces to a multiple of 8 bytes, as safetensors writes it.
 * Plain C (stdio, stdlib), so that sattn-bench, built without GLib, uses
 * it too.  Malformed files, the reader's refusals, are built by their
 * tests themselves.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_TEST_ST_WRITER_H
#define SATTN_TEST_ST_WRITER_H

#include <stddef.h>

typedef struct StWriter StWriter;

/* An empty file (no tensors, no metadata); NULL when out of memory. */
StWriter *st_writer_new (void);

/* Frees w (NULL: nothing). */
void st_writer_free (StWriter *w);

/* A __metadata__ entry key: value (both JSON-escaped here). */
void st_writer_meta (StWriter *w, const char *key, const char *value);

/* An F32 tensor of shape[0] x ... x shape[ndim - 1] values from v (ndim
 * 0: a scalar). */
void st_writer_f32 (StWriter *w, const char *name, const float *v, size_t ndim,
                    const size_t *shape);

/* The same for a matrix of rows x cols, or a vector of rows (cols 0). */
void st_writer_f32_2d (StWriter *w, const char *name, const float *v,
                       size_t rows, size_t cols);

/* Writes the file at path (into path + ".tmp", renamed over path, as
 * stfile.py does): 0, or -1 (errno set) when it cannot be written or an
 * earlier call ran out of memory.  w stays the caller's to free. */
int st_writer_save (const StWriter *w, const char *path);

#endif
