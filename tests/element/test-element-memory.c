/* sattn element: allocation failures and configurations too large for
 * the process end in an element error that gives the size, never in an
 * abort.
 *
 * Each case runs sattn-memlimit-helper in a child process (the test
 * itself is never limited): the helper lowers its own RLIMIT_AS after
 * loading the element and reports the caps outcome, the flow return and
 * the error text.  Cases:
 *  - refuse: the check at caps time refuses window=16384 of 1024-value
 *    frames (about 600 MiB of Q/K/V rings) under 256 MiB of headroom, naming the attention stream's
 *    size (sattn_stream_bytes, printed by the helper) in bytes;
 *  - caps: with the check off (SATTN_MEMORY_CHECK=0) the core's
 *    allocation fits and the element's frame scratch does not: the caps
 *    are refused with the size of the buffer that could not be had;
 *  - push: with the check off the caps are accepted and the output buffer
 *    of the first push cannot be had: GST_FLOW_ERROR and its size.
 * A child killed by a signal or exiting with 133 (GLib's abort on a
 * failed g_malloc) fails the case.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"

#include <string.h>
#include <sys/wait.h>

/* Run the helper; returns its stdout (g_free it), fails on a crash. */
static gchar *
run_helper (const gchar * scenario, gboolean check_off)
{
  const gchar *root = g_getenv ("SATTN_BUILD_ROOT");
  gchar *path, *out = NULL, *err = NULL;
  gchar *argv[3];
  gchar **envp;
  gint status = 0;
  GError *error = NULL;

  fail_unless (root != NULL, "SATTN_BUILD_ROOT is not set");
  path = g_build_filename (root, "tests", "element", "sattn-memlimit-helper",
      NULL);
  argv[0] = path;
  argv[1] = (gchar *) scenario;
  argv[2] = NULL;
  envp = g_get_environ ();
  envp = g_environ_setenv (envp, "SATTN_MEMORY_CHECK", check_off ? "0" : "1",
      TRUE);
  fail_unless (g_spawn_sync (NULL, argv, envp, G_SPAWN_DEFAULT, NULL, NULL,
          &out, &err, &status, &error), "spawn: %s",
      error ? error->message : "?");
  g_print ("%s: status %d\n%s%s", scenario, status, out, err);
  fail_unless (WIFEXITED (status), "%s: the helper died of signal %d",
      scenario, WIFSIGNALED (status) ? WTERMSIG (status) : -1);
  fail_unless (WEXITSTATUS (status) != 133, "%s: the helper aborted "
      "(GLib allocation failure)", scenario);
  fail_unless_equals_int (WEXITSTATUS (status), 0);
  g_strfreev (envp);
  g_free (err);
  g_free (path);
  return out;
}

/* The value of "KEY=" in the helper's output (g_free it), or NULL. */
static gchar *
field (const gchar * out, const gchar * key)
{
  gchar **lines = g_strsplit (out, "\n", -1), **l;
  gchar *v = NULL;
  gsize kl = strlen (key);

  for (l = lines; *l && v == NULL; l++)
    if (strncmp (*l, key, kl) == 0 && (*l)[kl] == '=')
      v = g_strdup (*l + kl + 1);
  g_strfreev (lines);
  return v;
}

GST_START_TEST (test_refused_up_front)
{
  gchar *out = run_helper ("refuse", FALSE);
  gchar *core = field (out, "CORE_BYTES"), *caps = field (out, "CAPS");
  gchar *msg = field (out, "ERROR"), *want;

  fail_unless (core != NULL && caps != NULL);
  fail_unless_equals_string (caps, "0");
  fail_unless (msg != NULL, "no error posted");
  want = g_strdup_printf ("%s for the attention stream", core);
  fail_unless (strstr (msg, want) != NULL, "'%s' does not say '%s'", msg, want);
  fail_unless (strstr (msg, "window=16384") != NULL);
  fail_unless (strstr (msg, "RLIMIT_AS") != NULL);
  g_free (want);
  g_free (msg);
  g_free (caps);
  g_free (core);
  g_free (out);
}

GST_END_TEST;

GST_START_TEST (test_scratch_fails_after_core)
{
  gchar *out = run_helper ("caps", TRUE);
  gchar *caps = field (out, "CAPS"), *flow = field (out, "FLOW");
  gchar *msg = field (out, "ERROR");

  fail_unless (caps != NULL && flow != NULL);
  fail_unless_equals_string (caps, "0");
  /* Data after refused caps is not negotiated. */
  fail_unless_equals_int (atoi (flow), GST_FLOW_NOT_NEGOTIATED);
  fail_unless (msg != NULL, "no error posted");
  /* 64 frames of 32768 floats: 8388608 bytes. */
  fail_unless (strstr (msg, "Could not allocate 8388608 bytes") != NULL,
      "'%s'", msg);
  g_free (msg);
  g_free (flow);
  g_free (caps);
  g_free (out);
}

GST_END_TEST;

GST_START_TEST (test_output_buffer_fails)
{
  gchar *out = run_helper ("push", TRUE);
  gchar *caps = field (out, "CAPS"), *flow = field (out, "FLOW");
  gchar *msg = field (out, "ERROR");

  fail_unless (caps != NULL && flow != NULL);
  fail_unless_equals_string (caps, "1");
  fail_unless_equals_int (atoi (flow), GST_FLOW_ERROR);
  fail_unless (msg != NULL, "no error posted");
  /* 256 rows of 64 x 1024 floats. */
  fail_unless (strstr (msg, "output buffer of 256 rows (67108864 bytes)")
      != NULL, "'%s'", msg);
  g_free (msg);
  g_free (flow);
  g_free (caps);
  g_free (out);
}

GST_END_TEST;

static Suite *
sattn_memory_suite (void)
{
  Suite *s = suite_create ("sattn-memory");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_refused_up_front);
  tcase_add_test (tc, test_scratch_fails_after_core);
  tcase_add_test (tc, test_output_buffer_fails);
  return s;
}

GST_CHECK_MAIN (sattn_memory);
