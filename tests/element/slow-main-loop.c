/* An LD_PRELOAD module that widens gst-launch-1.0's race window: its
 * g_main_loop_run sleeps SATTN_SLOW_MAIN_LOOP_MS milliseconds (default
 * 200) before running the loop, and says so on stderr.
 *
 * gst-launch-1.0 1.22 sets the pipeline to PAUSED, then runs its main
 * loop; its sync bus handler calls g_main_loop_quit from the thread that
 * posts an ERROR.  A quit before g_main_loop_run is lost, and after an
 * ERROR GstBin ignores every later async-done, so an error posted from a
 * streaming thread during preroll, before the main thread enters the
 * loop, hangs gst-launch-1.0 for good (about 1 run in 100 with stock
 * elements).  With this module nearly every such error comes before the
 * loop: a launch line whose refusal is not synchronous (returned by
 * set_state) hangs on every run instead of now and then, so one run
 * tells (tests/element/launch-loop.sh --widen).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>

void
g_main_loop_run (GMainLoop * loop)
{
  static void (*real) (GMainLoop *) = NULL;
  const char *env = getenv ("SATTN_SLOW_MAIN_LOOP_MS");
  long ms = env != NULL ? strtol (env, NULL, 10) : 200;

  if (real == NULL)
    real = (void (*)(GMainLoop *)) dlsym (RTLD_NEXT, "g_main_loop_run");
  if (real == NULL)
    abort ();
  fprintf (stderr, "slow-main-loop: g_main_loop_run waits %ld ms\n", ms);
  g_usleep ((gulong) ms * 1000);
  real (loop);
}
