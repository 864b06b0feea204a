/* sattn element: a drain right after a weights swap took over.
 *
 * Found by the stream fuzzer (test-element-fuzz-stream.c): the new
 * model's stream was primed with only the frames the next full window
 * needs (window - hop), so this test failed on that element.
 *
 * docs/element.md "Swapping weights while playing": from the boundary on
 * "the output is exactly the new model's on the same frames", and
 * docs/element.md "Window metadata": masked_keys counts the window's
 * masked key positions (padding, GAP, NaN/Inf frames).  A window cut short by a
 * drain (EOS, a resync) right after the takeover starts up to window - 1
 * frames before the boundary; the new stream must have those frames as
 * usable ones, or its meta counts them as masked and (when a query can
 * see them) its values differ from the new model's on the same frames.
 *
 * Here: output=mean, window 8, hop 4, a frame per buffer, every frame
 * finite; a swap between two attention files of the same geometry; one
 * frame after the takeover, EOS.  Every row after the takeover must have
 * masked_keys = the window's positions before frame 0 (0 here).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "gstsattn-meta.h"
#include "st-builder.h"

#include <glib/gstdio.h>
#include <string.h>

#define RATE 800
#define D 8
#define WINDOW 8
#define HOP 4

static void
push_frame (GstHarness * h, const float *x, guint64 f)
{
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x + (f %
                  64) * D, D * sizeof (float), gst_util_uint64_scale (f,
                  GST_SECOND, RATE), 0)), GST_FLOW_OK);
}

GST_START_TEST (test_swap_then_drain)
{
  gchar *dir = g_dir_make_tmp ("sattn-swap-drain-XXXXXX", NULL);
  gchar *a = g_build_filename (dir, "a.safetensors", NULL);
  gchar *b = g_build_filename (dir, "b.safetensors", NULL);
  float x[64 * D];
  GstHarness *h;
  GstBus *bus;
  GstMessage *msg;
  GstBuffer *buf;
  guint64 frame = 0, swapped_at = G_MAXUINT64, rows_after = 0;
  guint wrong = 0, first_masked = 0;
  guint64 first_frame = 0;

  g_free (st_write_layer (a, 1, LAYOUT_MHA, D, D, 2, NULL, 0));
  g_free (st_write_layer (b, 2, LAYOUT_HF, D, D, 2, NULL, 0));
  h = sattn_harness_new ("weights", a, "heads", 2, "window", WINDOW, "hop",
      HOP, "output", OUT_MEAN, NULL);
  bus = sattn_attach_bus (h);
  sattn_set_caps (h, RATE, D);
  sattn_fill_signal (x, G_N_ELEMENTS (x), 3, 1.0f);
  for (; frame < 2 * WINDOW; frame++)
    push_frame (h, x, frame);

  /* A frame per buffer until b takes over at a window boundary. */
  g_object_set (h->element, "weights", b, NULL);
  while (frame < 4000 && swapped_at == G_MAXUINT64) {
    push_frame (h, x, frame++);
    while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ELEMENT))) {
      const GstStructure *s = gst_message_get_structure (msg);

      if (gst_structure_has_name (s, "sattn-weights-swapped"))
        fail_unless (gst_structure_get_uint64 (s, "frame", &swapped_at));
      gst_message_unref (msg);
    }
    if (swapped_at == G_MAXUINT64)
      g_usleep (1000);
  }
  fail_unless (swapped_at != G_MAXUINT64, "the swap never took over");
  /* the drained window ends before the next full one */
  fail_unless (frame - swapped_at < HOP);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));

  while ((buf = gst_harness_try_pull (h)) != NULL) {
    GstSattnMeta *m = gst_buffer_get_sattn_meta (buf);
    guint i;

    fail_unless (m != NULL);
    for (i = 0; i < m->n_rows; i++) {
      const GstSattnMetaRow *r = &m->rows[i];

      if (r->first_frame + r->n_frames <= swapped_at)
        continue;
      rows_after++;
      /* every window here is past frame WINDOW: nothing to mask */
      if (r->masked_keys != 0 && wrong++ == 0) {
        first_frame = r->first_frame;
        first_masked = r->masked_keys;
      }
    }
    gst_buffer_unref (buf);
  }
  fail_unless (rows_after >= 1, "no row after the takeover");
  fail_unless (wrong == 0, "%u of %" G_GUINT64_FORMAT " rows after the "
      "takeover at frame %" G_GUINT64_FORMAT " (drained at %"
      G_GUINT64_FORMAT ") count masked keys; the first, from frame %"
      G_GUINT64_FORMAT ": %u masked, every frame usable", wrong, rows_after,
      swapped_at, frame, first_frame, first_masked);

  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_unlink (a);
  g_unlink (b);
  g_rmdir (dir);
  g_free (a);
  g_free (b);
  g_free (dir);
}

GST_END_TEST;

static Suite *
sattn_swap_drain_suite (void)
{
  Suite *s = suite_create ("sattn-swap-drain");
  TCase *tc = tcase_create ("swap-drain");

  tcase_add_test (tc, test_swap_then_drain);
  suite_add_tcase (s, tc);
  return s;
}

GST_CHECK_MAIN (sattn_swap_drain);
