/* Runs one sattn configuration under a lowered address-space limit
 * (RLIMIT_AS set here, in this process only, after GStreamer and the
 * element are loaded) and prints what happened, for test-element-memory:
 *
 *   CORE_BYTES=<sattn_stream_bytes of the configuration>
 *   CAPS=<1 accepted | 0 refused>
 *   FLOW=<flow return of one pushed buffer>
 *   ERROR=<text of the first element error, if any>
 *
 * and exits 0.  An abort on allocation failure shows as a signal or exit
 * status 133 instead.  Scenarios (argv[1]):
 *   refuse  window=16384 of 1024-value frames (about 600 MiB of rings of
 *           projected Q/K/V) under 256 MiB of headroom:
 *           the check at caps time refuses it;
 *   caps    frames of 32768 values, window 64: the core's 64 MiB fit,
 *           the element's 16 MiB of frame scratch does not (check off);
 *   push    output=window hop=1 with 4 KiB frames: everything fits at caps
 *           time, the 64 MiB output buffer of the first push does not
 *           (check off).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <gst/gst.h>
#include <gst/check/gstharness.h>

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sattn/sattn.h"

static guint64
vm_bytes (void)
{
  unsigned long long size = 0;
  FILE *f = fopen ("/proc/self/statm", "r");

  if (f) {
    if (fscanf (f, "%llu", &size) != 1)
      size = 0;
    fclose (f);
  }
  return size * (guint64) sysconf (_SC_PAGESIZE);
}

int
main (int argc, char **argv)
{
  const gchar *scen = argc > 1 ? argv[1] : "";
  guint window = 64, hop = 16, channels = 1, frame_size = 1, rate = 1000;
  gint output = 0;
  guint64 margin, core;
  SattnConfig mc = { 0, };
  SattnStreamConfig sc = { 0, };
  SattnModel *m;
  GstElement *e;
  GstHarness *h;
  GstBus *bus;
  GstMessage *msg;
  GstBuffer *buf;
  GstFlowReturn flow = GST_FLOW_OK;
  gchar *caps;
  gsize n_frames = 16;
  gboolean caps_ok;
  struct rlimit rl, old;

  gst_init (&argc, &argv);
  if (strcmp (scen, "refuse") == 0) {
    window = 16384;
    channels = 1024;
  } else if (strcmp (scen, "caps") == 0) {
    hop = 64;
    frame_size = 32768;
    rate = 32768;
  } else if (strcmp (scen, "push") == 0) {
    hop = 1;
    channels = 1024;
    rate = 1024;
    output = 1;                 /* window */
    n_frames = 256;
  } else {
    g_printerr ("usage: %s refuse|caps|push\n", argv[0]);
    return 2;
  }

  /* What the core needs for this configuration (identity model). */
  mc.d_model = (size_t) channels *frame_size;
  mc.heads = 1;
  m = sattn_model_new (&mc, NULL, NULL);
  sc.threads = 1;               /* the element's default */
  sc.window = window;
  sc.hop = hop;
  sc.output = (SattnOutputMode) output;
  sc.saturation_threshold = SATTN_DEFAULT_SATURATION;
  core = sattn_stream_bytes (m, &sc);
  sattn_model_free (m);
  g_print ("CORE_BYTES=%" G_GUINT64_FORMAT "\n", core);

  e = gst_element_factory_make ("sattn", NULL);
  if (e == NULL) {
    g_printerr ("no sattn element\n");
    return 2;
  }
  g_object_set (e, "window", window, "hop", hop, "frame-size", frame_size,
      "output", output, NULL);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  bus = gst_bus_new ();
  gst_element_set_bus (h->element, bus);
  buf = gst_buffer_new_allocate (NULL, n_frames * channels * frame_size *
      sizeof (float), NULL);
  gst_buffer_memset (buf, 0, 0x3f, gst_buffer_get_size (buf));
  GST_BUFFER_PTS (buf) = 0;
  caps = g_strdup_printf ("audio/x-raw, format=(string)F32LE, "
      "layout=(string)interleaved, rate=(int)%u, channels=(int)%u", rate,
      channels);

  /* The limit: what is mapped now plus a margin. */
  if (strcmp (scen, "refuse") == 0)
    margin = 256u << 20;
  else if (strcmp (scen, "caps") == 0)
    margin = core + (12u << 20);
  else
    margin = core + (32u << 20);
  getrlimit (RLIMIT_AS, &old);
  rl = old;
  rl.rlim_cur = vm_bytes () + margin;
  if (old.rlim_max != RLIM_INFINITY && rl.rlim_cur > old.rlim_max)
    rl.rlim_cur = old.rlim_max;
  if (setrlimit (RLIMIT_AS, &rl) != 0) {
    perror ("setrlimit");
    return 2;
  }

  gst_harness_set_src_caps_str (h, caps);
  caps_ok = gst_pad_has_current_caps (h->element->srcpads->data);
  g_print ("CAPS=%d\n", caps_ok);
  flow = gst_harness_push (h, buf);
  g_print ("FLOW=%d\n", flow);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  if (msg) {
    GError *err = NULL;

    gst_message_parse_error (msg, &err, NULL);
    g_print ("ERROR=%s\n", err->message);
    g_clear_error (&err);
    gst_message_unref (msg);
  }
  /* Tearing down needs no more memory than there is. */
  setrlimit (RLIMIT_AS, &old);
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  g_free (caps);
  return 0;
}
