/* Shared helpers of the sattn element tests: harness set-up, buffer
 * making, output collection and what the element must output (identity
 * projections), window by window over the shared float64 reference of
 * tests/common/reference.h.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_CHECK_H
#define SATTN_CHECK_H

#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

#include "sattn/sattn.h"

G_BEGIN_DECLS

/* Enum values of the element's properties (as the element defines them). */
enum { OUT_FRAMES = 0, OUT_WINDOW, OUT_MEAN, OUT_LAST };
enum { START_PAD = 0, START_WAIT };
enum { INV_MASK = 0, INV_ZERO, INV_ERROR };

/* A sattn element configured with the given properties (NULL-terminated
 * name/value list, as for g_object_set), wrapped in a playing harness. */
GstHarness *sattn_harness_new (const gchar * first_property, ...)
    G_GNUC_NULL_TERMINATED;
/* The same around e, a sattn element the caller made and set up (the
 * harness takes it over): the listed properties are set after the
 * caller's. */
GstHarness *sattn_harness_new_valist (GstElement * e,
    const gchar * first_property, va_list args);

/* tcase_set_timeout (tc, seconds), told to the watchdog too
 * (tests/common/watchdog.c): a test case of tc that hangs in check's
 * forked child prints every thread's backtrace a few seconds before
 * check's timeout kills it.  Test cases without it have check's default
 * (CK_DEFAULT_TIMEOUT); at most 4 calls per program. */
void sattn_tcase_set_timeout (TCase * tc, double seconds);

/* Attach a fresh bus to the harnessed element (unref it when done). */
GstBus *sattn_attach_bus (GstHarness * h);
/* Pop an error message from bus; fails the test if there is none.
 * Returns its message text (g_free it). */
gchar *sattn_pop_error (GstBus * bus);
void sattn_detach_bus (GstHarness * h, GstBus * bus);

void sattn_set_caps (GstHarness * h, gint rate, gint channels);
gchar *sattn_caps_string (gint rate, gint channels);

/* A buffer with a copy of n_bytes from data, at pts; misalign > 0 puts the
 * data at that byte offset from an aligned address. */
GstBuffer *sattn_buffer_new (const void *data, gsize n_bytes,
    GstClockTime pts, guint misalign);

/* Deterministic test signal in [-amp, amp]. */
void sattn_fill_signal (float *x, gsize n, guint32 seed, float amp);

/* TRUE when the n floats of x are all finite. */
gboolean sattn_all_finite (const float *x, gsize n);

/* Everything pulled from a harness. */
typedef struct
{
  GArray *floats;               /* all output floats in order */
  GArray *bufs;                 /* SattnOutBuf */
} SattnOutput;

typedef struct
{
  GstClockTime pts, duration;
  guint64 offset, offset_end;
  gsize n_floats;
  gboolean discont, gap;
} SattnOutBuf;

void sattn_output_init (SattnOutput * o);
void sattn_output_clear (SattnOutput * o);
/* Pull every buffer currently queued into o. */
void sattn_output_pull_all (GstHarness * h, SattnOutput * o);

/* The element's model as the reference sees it. */
typedef struct
{
  guint window, hop, heads, lookback;
  gdouble scale;
  gboolean causal;
  gint output, start;
} RefConfig;

/* Expected output of a stream of T frames of d values since a reset, up
 * to and including the drain at its end (drain = FALSE: only what full
 * hops emit).  valid (NULL = all) marks masked frames; frames with NaN/Inf
 * are masked too. */
typedef struct
{
  double *rows;                 /* n_rows × row_floats */
  gsize n_rows, row_floats;
  guint64 *first;
  guint32 *n_frames;
  guint8 *valid;
} RefOut;

void ref_stream (const RefConfig * c, const float *x, const guint8 * valid,
    gsize T, gsize d, gboolean drain, RefOut * out);
/* The same schedule, but each window computed by the core's one-shot
 * sattn_attend with model m (built from the same settings). */
void oneshot_stream (const RefConfig * c, const SattnModel * m,
    const float *x, const guint8 * valid, gsize T, gsize d, gboolean drain,
    RefOut * out);

/* Check buffers [b0, b1) of o, whose floats start at float index f0,
 * against rows [r0, r0 + rows) of ref: values, PTS = t0 + frame time,
 * contiguous DURATION, OFFSET in rows since r0, DISCONT on the first
 * only, GAP exactly when all rows are invalid.  Returns the rows seen. */
gsize sattn_check_buffers (const char *label, const SattnOutput * o,
    guint b0, guint b1, gsize f0, const RefOut * ref, gsize r0, gint rate,
    guint frame_size, GstClockTime t0);
void ref_out_clear (RefOut * out);

/* Compare got (n floats) against ref with tolerance 1e-5 × (1 + max|ref|);
 * prints max-abs and NMSE under label; fails the test when exceeded. */
void sattn_assert_close (const char *label, const float *got,
    const double *ref, gsize n);

G_END_DECLS

#endif
