/* print-window-meta — reading the window metadata (GstSattnMeta) of the
 * sattn element's output buffers from an application.
 *
 *   audiotestsrc ! audio/x-raw,format=F32LE,channels=2,rate=8000
 *     ! sattn window=32 hop=8 output=mean ! fakesink
 *
 * A probe on fakesink's sink pad prints, for the first buffers, every row
 * of their metadata: which input frames the row accounts for, the running
 * time span of its window, how many of the window's keys were usable or
 * masked and how many softmax rows were fully masked.  The audio is
 * interrupted by GAP buffers part-way (an identity element drops every
 * buffer's data into a GAP between 0.5 s and 0.75 s), so masked keys show.
 *
 * The element is a plugin (it exports no functions), so the application
 * includes only <sattn/gstsattn-meta.h>: the meta's API type is found by
 * its registered name and the struct is read as laid out there.  Python
 * cannot read it: the meta is not introspectable (no GObject-Introspection
 * data describes GstSattnMeta), so PyGObject only sees a bare Gst.Meta.
 *
 * Checks: every buffer carries the meta, its rows account for every input
 * frame once and in order, and some rows have masked keys.  Exits 1 if a
 * check fails.
 *
 * Usage: print-window-meta [--buffers N] (how many buffers to print, their
 * first three rows and the last)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <gst/gst.h>
#include <stdio.h>
#include <stdlib.h>

#include <sattn/gstsattn-meta.h>

typedef struct
{
  guint printed, to_print;
  guint64 next_frame, buffers, missing, masked_rows;
  gboolean order_ok;
} State;

static GstPadProbeReturn
on_buffer (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  State *st = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstSattnMeta *m = gst_buffer_get_sattn_meta (buf);

  (void) pad;
  st->buffers++;
  if (m == NULL) {
    st->missing++;
    return GST_PAD_PROBE_OK;
  }
  if (st->printed < st->to_print)
    printf ("buffer pts %" GST_TIME_FORMAT ": %u rows (window %u)\n",
        GST_TIME_ARGS (GST_BUFFER_PTS (buf)), m->n_rows, m->window);
  for (guint i = 0; i < m->n_rows; i++) {
    const GstSattnMetaRow *r = &m->rows[i];
    if (r->first_frame != st->next_frame)
      st->order_ok = FALSE;
    st->next_frame = r->first_frame + r->n_frames;
    st->masked_rows += r->masked_keys > 0;
    if (st->printed < st->to_print && (i < 3 || i + 1 == m->n_rows))
      printf ("  row %u: frames %" G_GUINT64_FORMAT "+%u, window %"
          GST_TIME_FORMAT " - %" GST_TIME_FORMAT ", keys %u usable / %u "
          "masked, %u fully masked, %s\n", i, r->first_frame, r->n_frames,
          GST_TIME_ARGS (r->window_start), GST_TIME_ARGS (r->window_end),
          r->valid_keys, r->masked_keys, r->fully_masked_rows,
          r->valid ? "valid" : "zeros");
  }
  st->printed++;
  return GST_PAD_PROBE_OK;
}

/* Turns the buffers between 0.5 s and 0.75 s into GAP buffers. */
static void
on_handoff (GstElement * identity, GstBuffer * buf, gpointer data)
{
  GstClockTime pts = GST_BUFFER_PTS (buf);

  (void) identity;
  (void) data;
  if (pts >= GST_SECOND / 2 && pts < 3 * GST_SECOND / 4)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
}

int
main (int argc, char **argv)
{
  State st = { 0, 3, 0, 0, 0, 0, TRUE };
  GstElement *pipe, *sink, *id;
  GstPad *pad;
  GstBus *bus;
  GstMessage *msg;
  GError *err = NULL;
  int ok;

  gst_init (&argc, &argv);
  for (int i = 1; i + 1 < argc; i++)
    if (g_str_equal (argv[i], "--buffers"))
      st.to_print = (guint) atoi (argv[++i]);

  pipe = gst_parse_launch ("audiotestsrc num-buffers=40 samplesperbuffer=256 "
      "wave=pink-noise ! audio/x-raw,format=F32LE,channels=2,rate=8000 ! "
      "identity name=gaps signal-handoffs=true ! "
      "sattn window=32 hop=8 output=mean ! fakesink name=sink", &err);
  if (pipe == NULL) {
    fprintf (stderr, "could not build the pipeline: %s\n", err->message);
    return 1;
  }
  id = gst_bin_get_by_name (GST_BIN (pipe), "gaps");
  g_signal_connect (id, "handoff", G_CALLBACK (on_handoff), NULL);
  sink = gst_bin_get_by_name (GST_BIN (pipe), "sink");
  pad = gst_element_get_static_pad (sink, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, on_buffer, &st, NULL);
  gst_object_unref (pad);

  gst_element_set_state (pipe, GST_STATE_PLAYING);
  bus = gst_element_get_bus (pipe);
  msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  ok = msg != NULL && GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS;
  if (!ok)
    fprintf (stderr, "the pipeline stopped with an error\n");
  gst_clear_message (&msg);
  gst_element_set_state (pipe, GST_STATE_NULL);

  /* 40 buffers of 256 samples = 10240 frames. */
  printf ("%" G_GUINT64_FORMAT " buffers, %" G_GUINT64_FORMAT " frames "
      "accounted for, %" G_GUINT64_FORMAT " rows with masked keys\n",
      st.buffers, st.next_frame, st.masked_rows);
  if (st.missing > 0 || !st.order_ok || st.next_frame != 40 * 256 ||
      st.masked_rows == 0) {
    fprintf (stderr, "FAIL: %" G_GUINT64_FORMAT " buffers without the meta, "
        "rows %s, %" G_GUINT64_FORMAT " frames (want 10240), %"
        G_GUINT64_FORMAT " rows with masked keys\n", st.missing,
        st.order_ok ? "in order" : "out of order", st.next_frame,
        st.masked_rows);
    ok = 0;
  }
  gst_object_unref (bus);
  gst_object_unref (id);
  gst_object_unref (sink);
  gst_object_unref (pipe);
  return ok ? 0 : 1;
}
