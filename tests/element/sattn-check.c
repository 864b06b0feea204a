/* Shared helpers of the sattn element tests.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "reference.h"
#include "watchdog.h"

#include <math.h>
#include <string.h>

GstHarness *
sattn_harness_new_valist (GstElement * e, const gchar * first_property,
    va_list args)
{
  GstHarness *h;

  if (first_property)
    g_object_set_valist (G_OBJECT (e), first_property, args);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  return h;
}

GstHarness *
sattn_harness_new (const gchar * first_property, ...)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstHarness *h;
  va_list args;

  fail_unless (e != NULL, "the sattn element is not available");
  va_start (args, first_property);
  h = sattn_harness_new_valist (e, first_property, args);
  va_end (args);
  return h;
}

/* check's unchecked fixtures run in the process that forks the test
 * cases, before and after a tcase's: one setup per tcase that has a
 * timeout of its own tells the watchdog that timeout (fixtures take no
 * argument: one function per slot). */
#define TCASE_SLOTS 4
static double tcase_seconds[TCASE_SLOTS];
static guint tcase_slots;

static void
tcase_slot_0 (void)
{
  sattn_watchdog_case_timeout (tcase_seconds[0]);
}

static void
tcase_slot_1 (void)
{
  sattn_watchdog_case_timeout (tcase_seconds[1]);
}

static void
tcase_slot_2 (void)
{
  sattn_watchdog_case_timeout (tcase_seconds[2]);
}

static void
tcase_slot_3 (void)
{
  sattn_watchdog_case_timeout (tcase_seconds[3]);
}

static void (*const tcase_slot[TCASE_SLOTS]) (void) = {
  tcase_slot_0, tcase_slot_1, tcase_slot_2, tcase_slot_3
};

static void
tcase_slot_done (void)
{
  sattn_watchdog_case_default ();
}

void
sattn_tcase_set_timeout (TCase * tc, double seconds)
{
  g_assert (tcase_slots < TCASE_SLOTS);
  tcase_seconds[tcase_slots] = seconds;
  tcase_set_timeout (tc, seconds);
  tcase_add_unchecked_fixture (tc, tcase_slot[tcase_slots], tcase_slot_done);
  tcase_slots++;
}

GstBus *
sattn_attach_bus (GstHarness * h)
{
  GstBus *bus = gst_bus_new ();

  gst_element_set_bus (h->element, bus);
  return bus;
}

gchar *
sattn_pop_error (GstBus * bus)
{
  GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  GError *err = NULL;
  gchar *dbg = NULL, *text;

  fail_unless (msg != NULL, "no error message was posted");
  gst_message_parse_error (msg, &err, &dbg);
  GST_INFO ("error: %s (%s)", err->message, dbg);
  text = g_strdup (err->message);
  g_clear_error (&err);
  g_free (dbg);
  gst_message_unref (msg);
  return text;
}

void
sattn_detach_bus (GstHarness * h, GstBus * bus)
{
  gst_element_set_bus (h->element, NULL);
  gst_bus_set_flushing (bus, TRUE);
  gst_object_unref (bus);
}

gchar *
sattn_caps_string (gint rate, gint channels)
{
  return g_strdup_printf ("audio/x-raw, format=(string)F32LE, "
      "layout=(string)interleaved, rate=(int)%d, channels=(int)%d", rate,
      channels);
}

void
sattn_set_caps (GstHarness * h, gint rate, gint channels)
{
  gchar *s = sattn_caps_string (rate, channels);

  gst_harness_set_src_caps_str (h, s);
  g_free (s);
}

GstBuffer *
sattn_buffer_new (const void *data, gsize n_bytes, GstClockTime pts,
    guint misalign)
{
  GstBuffer *buf;

  if (misalign == 0) {
    buf = gst_buffer_new_memdup (data, n_bytes);
    if (buf == NULL)
      buf = gst_buffer_new ();
  } else {
    guint8 *mem = g_malloc (n_bytes + misalign);

    memcpy (mem + misalign, data, n_bytes);
    buf = gst_buffer_new_wrapped_full (0, mem, n_bytes + misalign, misalign,
        n_bytes, mem, g_free);
  }
  GST_BUFFER_PTS (buf) = pts;
  return buf;
}

void
sattn_fill_signal (float *x, gsize n, guint32 seed, float amp)
{
  GRand *r = g_rand_new_with_seed (seed);
  gsize i;

  for (i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (r, -amp, amp);
  g_rand_free (r);
}

void
sattn_output_init (SattnOutput * o)
{
  o->floats = g_array_new (FALSE, FALSE, sizeof (float));
  o->bufs = g_array_new (FALSE, FALSE, sizeof (SattnOutBuf));
}

void
sattn_output_clear (SattnOutput * o)
{
  g_array_unref (o->floats);
  g_array_unref (o->bufs);
  o->floats = o->bufs = NULL;
}

void
sattn_output_pull_all (GstHarness * h, SattnOutput * o)
{
  GstBuffer *buf;

  while ((buf = gst_harness_try_pull (h)) != NULL) {
    GstMapInfo map;
    SattnOutBuf b;

    fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
    fail_unless_equals_int (map.size % sizeof (float), 0);
    g_array_append_vals (o->floats, map.data, map.size / sizeof (float));
    b.pts = GST_BUFFER_PTS (buf);
    b.duration = GST_BUFFER_DURATION (buf);
    b.offset = GST_BUFFER_OFFSET (buf);
    b.offset_end = GST_BUFFER_OFFSET_END (buf);
    b.n_floats = map.size / sizeof (float);
    b.discont = GST_BUFFER_IS_DISCONT (buf);
    b.gap = GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_GAP);
    g_array_append_val (o->bufs, b);
    gst_buffer_unmap (buf, &map);
    gst_buffer_unref (buf);
  }
}

/* ------------------------------------------------------------ reference */

/* One window of the shared float64 reference (tests/common): x (n × d,
 * values of float frames, so exact as floats) with key validity, identity
 * projections; writes n × d rows (invalid query rows zero). */
static void
ref_window (const RefConfig * c, const double *x, const guint8 * valid,
    gsize n, gsize d, double *out)
{
  RefModel m = { 0 };
  float *xf = g_new (float, n * d);
  gsize i;

  m.d_model = m.d_out = d;
  m.heads = c->heads;
  m.d_head = m.d_value = d / c->heads;
  m.scale = c->scale > 0 ? c->scale : 1.0 / sqrt ((double) m.d_head);
  m.causal = c->causal;
  m.lookback = c->lookback;
  for (i = 0; i < n * d; i++)
    xf[i] = (float) x[i];
  ref_attend (&m, xf, n, valid, valid, NULL, out, NULL, NULL);
  g_free (xf);
}

gboolean
sattn_all_finite (const float *x, gsize n)
{
  gsize i;

  for (i = 0; i < n; i++)
    if (!isfinite (x[i]))
      return FALSE;
  return TRUE;
}

static void
core_attend (const SattnModel * m, const double *xw, const guint8 * vw,
    gsize n, gsize d, double *out)
{
  float *xf = g_new (float, n * d), *of = g_new (float, n * d);
  SattnMask mask = { vw, vw, NULL };
  SattnStatus st;
  gsize i;

  for (i = 0; i < n * d; i++)
    xf[i] = (float) xw[i];
  st = sattn_attend (m, xf, n, &mask, of, NULL, NULL);
  fail_unless_equals_int (st, SATTN_OK);
  for (i = 0; i < n * d; i++)
    out[i] = of[i];
  g_free (xf);
  g_free (of);
}

static void
stream_schedule (const RefConfig * c, const SattnModel * m, const float *x,
    const guint8 * valid, gsize T, gsize d, gboolean drain, RefOut * out);

void
ref_stream (const RefConfig * c, const float *x, const guint8 * valid,
    gsize T, gsize d, gboolean drain, RefOut * out)
{
  stream_schedule (c, NULL, x, valid, T, d, drain, out);
}

void
oneshot_stream (const RefConfig * c, const SattnModel * m, const float *x,
    const guint8 * valid, gsize T, gsize d, gboolean drain, RefOut * out)
{
  stream_schedule (c, m, x, valid, T, d, drain, out);
}

static void
stream_schedule (const RefConfig * c, const SattnModel * m, const float *x,
    const guint8 * valid, gsize T, gsize d, gboolean drain, RefOut * out)
{
  const gsize n = c->window, h = c->hop;
  guint8 *ok = g_new (guint8, T + 1);
  GArray *ends = g_array_new (FALSE, FALSE, sizeof (guint64));
  double *xw = g_new (double, n * d), *rw = g_new (double, n * d);
  guint8 *vw = g_new (guint8, n);
  guint64 F, prev = 0, last = 0;
  gsize f, k, j, t, rows_cap, rf;

  for (f = 0; f < T; f++)
    ok[f] = (valid == NULL || valid[f]) && sattn_all_finite (x + f * d, d);

  for (F = c->start == START_WAIT ? n : h; F <= T; F += h) {
    g_array_append_val (ends, F);
    last = F;
  }
  if (drain && T > last) {
    F = T;
    g_array_append_val (ends, F);
  }

  rf = c->output == OUT_WINDOW ? n * d : d;
  rows_cap = c->output == OUT_FRAMES ? T : ends->len;
  out->row_floats = rf;
  out->n_rows = 0;
  out->rows = g_new0 (double, MAX (rows_cap, 1) * rf);
  out->first = g_new0 (guint64, MAX (rows_cap, 1));
  out->n_frames = g_new0 (guint32, MAX (rows_cap, 1));
  out->valid = g_new0 (guint8, MAX (rows_cap, 1));

  for (k = 0; k < ends->len; k++) {
    gboolean any = FALSE;

    F = g_array_index (ends, guint64, k);
    for (j = 0; j < n; j++) {
      gint64 fi = (gint64) F - (gint64) n + (gint64) j;

      if (fi < 0) {
        vw[j] = 0;
        memset (xw + j * d, 0, d * sizeof (double));
      } else {
        vw[j] = ok[fi];
        for (t = 0; t < d; t++)
          xw[j * d + t] = vw[j] ? x[fi * d + t] : 0.0;
      }
    }
    if (m)
      core_attend (m, xw, vw, n, d, rw);
    else
      ref_window (c, xw, vw, n, d, rw);

    switch (c->output) {
      case OUT_FRAMES:
        for (f = prev; f < F; f++) {
          gsize r = out->n_rows++;

          memcpy (out->rows + r * rf, rw + (f - (F - n)) * d,
              d * sizeof (double));
          out->first[r] = f;
          out->n_frames[r] = 1;
          out->valid[r] = ok[f];
        }
        break;
      case OUT_WINDOW:
        memcpy (out->rows + out->n_rows * rf, rw, n * d * sizeof (double));
        for (j = 0; j < n; j++)
          any |= vw[j];
        break;
      case OUT_MEAN:{
        double *o = out->rows + out->n_rows * rf;
        gsize cnt = 0;

        for (j = 0; j < n; j++) {
          if (!vw[j])
            continue;
          for (t = 0; t < d; t++)
            o[t] += rw[j * d + t];
          cnt++;
        }
        for (t = 0; t < d && cnt > 0; t++)
          o[t] /= (double) cnt;
        any = cnt > 0;
        break;
      }
      case OUT_LAST:
        memcpy (out->rows + out->n_rows * rf, rw + (n - 1) * d,
            d * sizeof (double));
        any = vw[n - 1];
        break;
      default:
        g_assert_not_reached ();
    }
    if (c->output != OUT_FRAMES) {
      gsize r = out->n_rows++;

      out->first[r] = prev;
      out->n_frames[r] = (guint32) (F - prev);
      out->valid[r] = any;
    }
    prev = F;
  }

  g_free (ok);
  g_free (xw);
  g_free (rw);
  g_free (vw);
  g_array_unref (ends);
}

void
ref_out_clear (RefOut * out)
{
  g_free (out->rows);
  g_free (out->first);
  g_free (out->n_frames);
  g_free (out->valid);
  memset (out, 0, sizeof (*out));
}

void
sattn_assert_close (const char *label, const float *got, const double *ref,
    gsize n)
{
  double maxref = 0, maxerr = 0, num = 0, den = 0, tol;
  gsize i, worst = 0;

  for (i = 0; i < n; i++) {
    double e = fabs ((double) got[i] - ref[i]);

    if (fabs (ref[i]) > maxref)
      maxref = fabs (ref[i]);
    if (!(e <= maxerr)) {
      maxerr = e;
      worst = i;
    }
    num += e * e;
    den += ref[i] * ref[i];
  }
  tol = 1e-5 * (1.0 + maxref);
  g_print ("%-40s n=%-8" G_GSIZE_FORMAT " max-abs %.3g (tol %.3g)  "
      "NMSE %.3g\n", label, n, maxerr, tol, den > 0 ? num / den : num);
  fail_unless (maxerr <= tol, "%s: |got - ref| = %g at %" G_GSIZE_FORMAT
      " (got %g, ref %g) exceeds %g", label, maxerr, worst,
      n ? (double) got[worst] : 0.0, n ? ref[worst] : 0.0, tol);
}

gsize
sattn_check_buffers (const char *label, const SattnOutput * o, guint b0,
    guint b1, gsize f0, const RefOut * ref, gsize r0, gint rate,
    guint frame_size, GstClockTime t0)
{
  const gsize rf = ref->row_floats;
  gsize f = f0, row = r0, k;
  guint i;
  GstClockTime prev_end = GST_CLOCK_TIME_NONE;

  fail_unless (b1 <= o->bufs->len);
  for (i = b0; i < b1; i++) {
    const SattnOutBuf *b = &g_array_index (o->bufs, SattnOutBuf, i);
    gsize rows = b->n_floats / rf;
    guint64 first_frame, end;
    gboolean all_invalid = TRUE;
    GstClockTime pts, stop;

    fail_unless_equals_int (b->n_floats % rf, 0);
    fail_unless (rows > 0, "%s: empty output buffer", label);
    fail_unless (row + rows <= ref->n_rows, "%s: more rows than expected "
        "(%" G_GSIZE_FORMAT " > %" G_GSIZE_FORMAT ")", label, row + rows,
        ref->n_rows);
    first_frame = ref->first[row];
    end = ref->first[row + rows - 1] + ref->n_frames[row + rows - 1];
    pts =
        t0 + gst_util_uint64_scale (first_frame * frame_size, GST_SECOND, rate);
    stop = t0 + gst_util_uint64_scale (end * frame_size, GST_SECOND, rate);
    fail_unless_equals_uint64 (b->pts, pts);
    fail_unless_equals_uint64 (b->duration, stop - pts);
    if (GST_CLOCK_TIME_IS_VALID (prev_end))
      fail_unless_equals_uint64 (prev_end, b->pts);
    prev_end = b->pts + b->duration;
    fail_unless_equals_uint64 (b->offset, row - r0);
    fail_unless_equals_uint64 (b->offset_end, row - r0 + rows);
    fail_unless_equals_int (b->discont, i == b0);
    for (k = 0; k < rows; k++)
      all_invalid &= !ref->valid[row + k];
    fail_unless_equals_int (b->gap, all_invalid);
    row += rows;
    f += b->n_floats;
  }
  fail_unless (f <= o->floats->len);
  sattn_assert_close (label, &g_array_index (o->floats, float, f0),
      ref->rows + r0 * rf, f - f0);
  return row - r0;
}
