/* sattn element: a whole model's input contract (docs/models.md).
 *
 * A written model records sample_rate 8000, channels 2, frame_size 4,
 * window 12 and hop 6 (and, for the statistics cases, the range of a
 * window's input RMS seen in training).  The element must:
 *  - take frame-size, window and hop from it when they are not set, and
 *    read them back so; keep the ones set;
 *  - answer the sink CAPS query with the model's rate and channels, so
 *    that audiotestsrc ! sattn negotiates them;
 *  - refuse other caps naming both values (contract=enforce), or run them
 *    with a warning naming both (contract=warn);
 *  - refuse a frame-size set against the contract at READY -> PAUSED;
 *  - flag each window against the RMS range: the window meta's checks,
 *    sattn-class's in-contract / input-rms / rejected and the label
 *    "unknown", and one rate-limited warning;
 *  - apply min-probability (the property, else the file's).
 * The input RMS each check reports is compared with the RMS computed here
 * in double from the frames pushed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "gstsattn-meta.h"
#include "st-builder.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#define RATE 8000
#define CH 2
#define FS 4
#define F (CH * FS)
#define WINDOW 12
#define HOP 6
#define OUT_CLASSES 4

static gchar *
write_model (const gchar * name, const gchar * extra, guint32 seed)
{
  gchar *meta = g_strdup_printf ("sample_rate=%d;channels=%d;frame_size=%d;"
      "window=%d;hop=%d%s%s", RATE, CH, FS, WINDOW, HOP, extra ? ";" : "",
      extra ? extra : "");
  WholeSpec s = { .f = F, .d = 8, .n_layers = 1, .ff = 16, .classes = 3,
    .heads = 2, .positions = "none", .final_norm = TRUE, .meta = meta
  };
  gchar *path = st_write_whole_tmp (name, seed, &s);

  g_free (meta);
  return path;
}

/* The harness of a sattn with weights path and more properties, not
 * started yet (gst_harness_play later). */
static GstHarness *
harness (const gchar * path, const gchar * first, ...)
{
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstHarness *h;
  va_list args;

  fail_unless (e != NULL);
  g_object_set (e, "weights", path, NULL);
  va_start (args, first);
  if (first != NULL)
    g_object_set_valist (G_OBJECT (e), first, args);
  va_end (args);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_object_unref (e);
  return h;
}

GST_START_TEST (test_unset_from_file)
{
  gchar *path = write_model ("m.safetensors", NULL, 1);
  GstHarness *h = harness (path, "output", OUT_CLASSES, NULL);
  guint window = 0, hop = 0, fs = 0;
  GstCaps *caps;
  GstStructure *s;
  gint rate = 0, ch = 0;

  gst_harness_play (h);
  g_object_get (h->element, "window", &window, "hop", &hop, "frame-size", &fs,
      NULL);
  fail_unless_equals_int (window, WINDOW);
  fail_unless_equals_int (hop, HOP);
  fail_unless_equals_int (fs, FS);
  /* the sink CAPS query: the model's rate and channels */
  caps = gst_pad_peer_query_caps (h->srcpad, NULL);
  fail_unless (caps != NULL && !gst_caps_is_empty (caps));
  caps = gst_caps_fixate (caps);
  s = gst_caps_get_structure (caps, 0);
  fail_unless (gst_structure_get_int (s, "rate", &rate));
  fail_unless (gst_structure_get_int (s, "channels", &ch));
  fail_unless_equals_int (rate, RATE);
  fail_unless_equals_int (ch, CH);
  gst_caps_unref (caps);
  gst_harness_teardown (h);

  /* what is set stays set */
  h = harness (path, "output", OUT_CLASSES, "window", 8, "hop", 2, NULL);
  gst_harness_play (h);
  g_object_get (h->element, "window", &window, "hop", &hop, "frame-size", &fs,
      NULL);
  fail_unless_equals_int (window, 8);
  fail_unless_equals_int (hop, 2);
  fail_unless_equals_int (fs, FS);
  gst_harness_teardown (h);
  st_remove_tmp (path);
}

GST_END_TEST;

/* audiotestsrc ! sattn weights=... ! fakesink negotiates the model's rate
 * and channels by itself. */
GST_START_TEST (test_audiotestsrc_negotiates)
{
  gchar *path = write_model ("m.safetensors", NULL, 2);
  gchar *desc = g_strdup_printf ("audiotestsrc num-buffers=4 ! sattn "
      "name=a weights=%s output=classes ! fakesink", path);
  GstElement *pipe = gst_parse_launch (desc, NULL);
  GstElement *a;
  GstPad *pad;
  GstCaps *caps;
  GstMessage *msg;
  GstStructure *s;
  gint rate = 0, ch = 0;

  fail_unless (pipe != NULL);
  fail_unless (gst_element_set_state (pipe, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
  msg = gst_bus_timed_pop_filtered (GST_ELEMENT_BUS (pipe), 10 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL && GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS,
      "the pipeline did not end with EOS");
  gst_message_unref (msg);
  a = gst_bin_get_by_name (GST_BIN (pipe), "a");
  pad = gst_element_get_static_pad (a, "sink");
  caps = gst_pad_get_current_caps (pad);
  fail_unless (caps != NULL);
  s = gst_caps_get_structure (caps, 0);
  fail_unless (gst_structure_get_int (s, "rate", &rate));
  fail_unless (gst_structure_get_int (s, "channels", &ch));
  fail_unless_equals_int (rate, RATE);
  fail_unless_equals_int (ch, CH);
  gst_caps_unref (caps);
  gst_object_unref (pad);
  gst_object_unref (a);
  gst_element_set_state (pipe, GST_STATE_NULL);
  gst_object_unref (pipe);
  g_free (desc);
  st_remove_tmp (path);
}

GST_END_TEST;

/* Caps that contradict the contract: refused naming both (enforce), run
 * with a warning naming both (warn). */
GST_START_TEST (test_refused_or_warned)
{
  gchar *path = write_model ("m.safetensors", NULL, 3);
  GstHarness *h = harness (path, "output", OUT_CLASSES, NULL);
  GstBus *bus = sattn_attach_bus (h);
  gchar *caps = sattn_caps_string (16000, CH), *msg;
  GstMessage *m;
  float x[F * WINDOW];

  gst_harness_play (h);
  gst_harness_set_src_caps_str (h, caps);
  sattn_fill_signal (x, G_N_ELEMENTS (x), 7, 1.0f);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, 0, 0)), GST_FLOW_NOT_NEGOTIATED);
  msg = sattn_pop_error (bus);
  fail_unless (strstr (msg, "rate 16000 Hz contradicts the model's input "
          "contract: it was trained on 8000 Hz streams") != NULL, "%s", msg);
  fail_unless (strstr (msg, "contract=warn") != NULL, "%s", msg);
  g_free (msg);
  g_free (caps);
  caps = sattn_caps_string (RATE, 4);
  gst_harness_set_src_caps_str (h, caps);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, 0, 0)), GST_FLOW_NOT_NEGOTIATED);
  msg = sattn_pop_error (bus);
  fail_unless (strstr (msg, "4 channels contradict the model's input "
          "contract: it was trained on 2-channel streams") != NULL, "%s", msg);
  g_free (msg);
  g_free (caps);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);

  /* contract=warn: runs, with the warning */
  h = harness (path, "output", OUT_CLASSES, "contract", 1, NULL);
  bus = sattn_attach_bus (h);
  gst_harness_play (h);
  sattn_set_caps (h, 16000, CH);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, 0, 0)), GST_FLOW_OK);
  fail_unless (gst_harness_buffers_received (h) > 0);
  m = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING);
  fail_unless (m != NULL, "no warning");
  {
    GError *err = NULL;

    gst_message_parse_warning (m, &err, NULL);
    fail_unless (strstr (err->message, "trained on 8000 Hz streams") &&
        strstr (err->message, "this stream is 16000 Hz"), "%s", err->message);
    g_clear_error (&err);
  }
  gst_message_unref (m);
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR) == NULL);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  st_remove_tmp (path);
}

GST_END_TEST;

/* frame-size set against the contract: refused at READY -> PAUSED. */
GST_START_TEST (test_frame_size_refused)
{
  gchar *path = write_model ("m.safetensors", NULL, 4);
  GstElement *e = gst_element_factory_make ("sattn", NULL);
  GstBus *bus = gst_bus_new ();
  GstMessage *m;
  GError *err = NULL;

  g_object_set (e, "weights", path, "frame-size", 2, NULL);
  gst_element_set_bus (e, bus);
  fail_unless_equals_int (gst_element_set_state (e, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (m != NULL);
  gst_message_parse_error (m, &err, NULL);
  fail_unless (strstr (err->message, "frame-size=2 contradicts the model's "
          "input contract") && strstr (err->message, "frames of 4 samples"),
      "%s", err->message);
  g_clear_error (&err);
  gst_message_unref (m);
  gst_element_set_state (e, GST_STATE_NULL);
  gst_element_set_bus (e, NULL);
  gst_object_unref (bus);
  gst_object_unref (e);
  st_remove_tmp (path);
}

GST_END_TEST;

/* Every sattn-class message on the bus, in order, and (warnings not
 * NULL) every warning's text; the rest is dropped. */
static GList *
class_messages (GstBus * bus, GList ** warnings)
{
  GList *l = NULL;
  GstMessage *m;

  while ((m = gst_bus_pop (bus)) != NULL) {
    if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT &&
        gst_message_has_name (m, "sattn-class")) {
      l = g_list_append (l, m);
      continue;
    }
    if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_WARNING && warnings != NULL) {
      GError *err = NULL;

      gst_message_parse_warning (m, &err, NULL);
      *warnings = g_list_append (*warnings, g_strdup (err->message));
      g_clear_error (&err);
    }
    gst_message_unref (m);
  }
  return l;
}

/* The RMS of frames [first, first + n) of x (all usable here). */
static gdouble
rms_of (const float *x, gsize first, gsize n)
{
  gdouble s = 0.0;
  gsize i;

  for (i = first * F; i < (first + n) * F; i++)
    s += (gdouble) x[i] * x[i];
  return sqrt (s / (gdouble) (n * F));
}

/* Windows of a stream whose loudness changes: amplitude 1 (RMS 0.577, in
 * the recorded range 0.3 ... 1), then 10 (above), then 0.01 (below): the
 * checks and decisions follow it; one warning for the first window
 * outside, none for the next ones within 10 s. */
GST_START_TEST (test_windows_flagged)
{
  gchar *path = write_model ("m.safetensors", "contract_input_rms=0.3 1", 5);
  GstHarness *h = harness (path, "output", OUT_CLASSES, "window", WINDOW,
      "hop", WINDOW, "message-interval", (guint64) 0, NULL);
  GstBus *bus = sattn_attach_bus (h);
  const gsize n = 6 * WINDOW;   /* six windows, two per loudness */
  float *x = g_new (float, n * F);
  const float amp[3] = { 1.0f, 10.0f, 0.01f };
  GList *msgs, *l, *warnings = NULL;
  GstBuffer *out;
  gsize i, w = 0;

  for (i = 0; i < 3; i++)
    sattn_fill_signal (x + i * 2 * WINDOW * F, 2 * WINDOW * F, 11 + i, amp[i]);
  gst_harness_play (h);
  sattn_set_caps (h, RATE, CH);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              n * F * sizeof (float), 0, 0)), GST_FLOW_OK);
  /* the rows' checks, against the RMS computed here */
  while ((out = gst_harness_try_pull (h)) != NULL) {
    GstSattnMeta *meta = gst_buffer_get_sattn_meta (out);
    guint r;

    fail_unless (meta != NULL && meta->version >= 2);
    for (r = 0; r < meta->n_rows; r++, w++) {
      gdouble want = rms_of (x, w * WINDOW, WINDOW);
      gboolean in = want >= 0.3 && want <= 1.0;

      fail_unless (fabs (meta->checks[r].input_rms - want) <= 1e-6 * want,
          "window %" G_GSIZE_FORMAT ": input RMS %g, want %g", w,
          meta->checks[r].input_rms, want);
      fail_unless_equals_int (meta->checks[r].in_contract, in);
      fail_unless_equals_int (in, w < 2);
      fail_unless (isnan (meta->checks[r].pooled_z));
    }
    gst_buffer_unref (out);
  }
  fail_unless_equals_int (w, 6);
  /* the decisions: a class, then "unknown" (out of contract) */
  msgs = class_messages (bus, &warnings);
  fail_unless_equals_int (g_list_length (msgs), 6);
  for (l = msgs, i = 0; l != NULL; l = l->next, i++) {
    const GstStructure *s = gst_message_get_structure (l->data);
    gboolean in = FALSE;
    const gchar *label = gst_structure_get_string (s, "label");
    const gchar *why = gst_structure_get_string (s, "rejected");
    gdouble rms = 0.0;

    fail_unless (gst_structure_get_boolean (s, "in-contract", &in));
    fail_unless (gst_structure_get_double (s, "input-rms", &rms));
    fail_unless (fabs (rms - rms_of (x, i * WINDOW, WINDOW)) <= 1e-6 * rms);
    fail_unless_equals_int (in, i < 2);
    if (i < 2) {
      fail_unless (g_str_has_prefix (label, "class-"), "%s", label);
      fail_unless_equals_string (why, "none");
    } else {
      fail_unless_equals_string (label, "unknown");
      fail_unless_equals_string (why, "out-of-contract");
    }
  }
  g_list_free_full (msgs, (GDestroyNotify) gst_message_unref);
  /* one warning for the four windows outside (one push computed them
   * all), describing the latest */
  fail_unless_equals_int (g_list_length (warnings), 1);
  fail_unless (strstr (warnings->data, "4 window(s) outside the model's "
          "input contract") && strstr (warnings->data, "below the range the "
          "model saw in training, 0.3 ... 1"), "%s", (gchar *) warnings->data);
  g_list_free_full (warnings, g_free);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_free (x);
  st_remove_tmp (path);
}

GST_END_TEST;

/* min-probability: the file's, and the property over it. */
GST_START_TEST (test_min_probability)
{
  gchar *path = write_model ("m.safetensors", "min_probability=0.999", 6);
  float x[F * WINDOW * 2];
  gint pass;

  sattn_fill_signal (x, G_N_ELEMENTS (x), 21, 1.0f);
  for (pass = 0; pass < 2; pass++) {
    GstHarness *h = harness (path, "output", OUT_CLASSES, "window", WINDOW,
        "hop", WINDOW, "message-interval", (guint64) 0, NULL);
    GstBus *bus = sattn_attach_bus (h);
    GList *msgs, *l;

    if (pass == 1)
      g_object_set (h->element, "min-probability", 0.0, NULL);
    gst_harness_play (h);
    sattn_set_caps (h, RATE, CH);
    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
                sizeof x, 0, 0)), GST_FLOW_OK);
    msgs = class_messages (bus, NULL);
    fail_unless_equals_int (g_list_length (msgs), 2);
    for (l = msgs; l != NULL; l = l->next) {
      const GstStructure *s = gst_message_get_structure (l->data);
      gdouble p = 0.0;

      fail_unless (gst_structure_get_double (s, "probability", &p));
      fail_unless (p < 0.999);  /* a random 3-class head is never that sure */
      if (pass == 0) {
        fail_unless_equals_string (gst_structure_get_string (s, "label"),
            "unknown");
        fail_unless_equals_string (gst_structure_get_string (s, "rejected"),
            "low-probability");
      } else {
        fail_unless_equals_string (gst_structure_get_string (s, "rejected"),
            "none");
      }
    }
    g_list_free_full (msgs, (GDestroyNotify) gst_message_unref);
    sattn_detach_bus (h, bus);
    gst_harness_teardown (h);
  }
  st_remove_tmp (path);
}

GST_END_TEST;

/* A swap while playing takes the new model's labels, and its contract,
 * at the window boundary where its weights take over (the decisions kept
 * the old model's labels before). */
GST_START_TEST (test_swap_labels)
{
  gchar *dir = g_dir_make_tmp ("sattn-contract-XXXXXX", NULL);
  gchar *pa = g_build_filename (dir, "a.safetensors", NULL);
  gchar *pb = g_build_filename (dir, "b.safetensors", NULL);
  WholeSpec a = { .f = F, .d = 8, .n_layers = 1, .ff = 16, .classes = 3,
    .heads = 2, .positions = "none", .labels = "[\"a\",\"b\",\"c\"]"
  };
  WholeSpec b = a;
  GstHarness *h;
  GstBus *bus;
  GList *msgs = NULL, *l;
  float x[F * WINDOW];
  gboolean swapped = FALSE, new_labels = FALSE;
  gint pushes = 0;

  b.labels = "[\"x\",\"y\",\"z\"]";
  g_free (st_write_whole (pa, 31, &a));
  g_free (st_write_whole (pb, 32, &b));
  h = harness (pa, "output", OUT_CLASSES, "window", WINDOW, "hop", WINDOW,
      "frame-size", FS, "message-interval", (guint64) 0, NULL);
  bus = sattn_attach_bus (h);
  gst_harness_play (h);
  sattn_set_caps (h, RATE, CH);
  sattn_fill_signal (x, G_N_ELEMENTS (x), 41, 1.0f);
  fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
              sizeof x, 0, 0)), GST_FLOW_OK);
  g_object_set (h->element, "weights", pb, NULL);
  /* windows until the new model has taken over, and one more */
  while (pushes++ < 2000 && !new_labels) {
    GList *more;
    GstMessage *m;

    fail_unless_equals_int (gst_harness_push (h, sattn_buffer_new (x,
                sizeof x, gst_util_uint64_scale (pushes * WINDOW, GST_SECOND,
                    RATE), 0)), GST_FLOW_OK);
    while ((m = gst_bus_pop (bus)) != NULL) {
      if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT &&
          gst_message_has_name (m, "sattn-weights-swapped"))
        swapped = TRUE;
      if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ELEMENT &&
          gst_message_has_name (m, "sattn-class")) {
        const gchar *label = gst_structure_get_string
            (gst_message_get_structure (m), "label");

        /* before the swap message only the old labels, after it only the
         * new ones */
        fail_unless (strchr (swapped ? "xyz" : "abc", label[0]) != NULL,
            "label %s %s the swap", label, swapped ? "after" : "before");
        new_labels |= swapped;
      }
      fail_if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_WARNING ||
          GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR);
      more = g_list_append (NULL, m);
      msgs = g_list_concat (msgs, more);
    }
    g_usleep (500);
  }
  fail_unless (swapped && new_labels, "no decision of the new model");
  for (l = msgs; l != NULL; l = l->next)
    gst_message_unref (l->data);
  g_list_free (msgs);
  sattn_detach_bus (h, bus);
  gst_harness_teardown (h);
  g_unlink (pa);
  g_unlink (pb);
  g_rmdir (dir);
  g_free (pa);
  g_free (pb);
  g_free (dir);
}

GST_END_TEST;

static Suite *
sattn_contract_suite (void)
{
  Suite *s = suite_create ("sattn_contract");
  TCase *tc = tcase_create ("contract");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_unset_from_file);
  tcase_add_test (tc, test_audiotestsrc_negotiates);
  tcase_add_test (tc, test_refused_or_warned);
  tcase_add_test (tc, test_frame_size_refused);
  tcase_add_test (tc, test_windows_flagged);
  tcase_add_test (tc, test_min_probability);
  tcase_add_test (tc, test_swap_labels);
  return s;
}

GST_CHECK_MAIN (sattn_contract);
