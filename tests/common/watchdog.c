/* A hang is reported as a hang: a watchdog for the test programs that
 * start pipelines (the element tests' shared harness, the soak runs).
 *
 * SATTN_TEST_WATCHDOG=S (seconds; meson sets it below each test's own
 * timeout, tests/meson.build) arms it when the program starts: a
 * constructor starts a watcher process, tests/common/watchdog.sh, which
 * ends with the program.  If the program is still running S seconds
 * later, the watcher prints
 *
 *   HANG: <program> (pid N) still running after S s ...
 *
 * then every thread's backtrace (gdb -p, when gdb is installed) of the
 * program and of its child processes, kills the children and aborts the
 * program: the test fails with the stacks of the hang, before meson kills
 * it without them.
 *
 * check's fork mode runs each test case in a child process.  When a
 * process of the program forks, it tells the watcher (a line on a pipe)
 * the test case's own timeout (CK_DEFAULT_TIMEOUT, or the one given to
 * sattn_tcase_set_timeout): a child still running a few seconds before
 * that timeout gets the same report and is killed, before check would
 * kill it without a word; check then fails that case and goes on.
 *
 * A process apart, not a thread nor a signal handler: a process that
 * hangs may not take a signal (ThreadSanitizer holds a signal back until
 * the thread calls an instrumented function, which a thread stuck on a
 * futex in GLib never does), and a thread in check's runner would make
 * each of its forks the fork of a multithreaded process (ThreadSanitizer
 * stops such a child at its first thread).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include "watchdog.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

extern char **environ;

/* The margin a test case keeps before check's own timeout kills it
 * (at most a quarter of that timeout). */
#define CASE_MARGIN 10.0

static int wd_fd = -1;              /* the pipe to the watcher */
static double wd_ck_default = -1;   /* check's default case timeout */
static double wd_case_seconds = -1; /* this tcase's, -1: default */

static double
wd_env_seconds (const char *name, double def)
{
  const char *v = getenv (name);
  char *end;
  double s;

  if (v == NULL || *v == '\0')
    return def;
  s = strtod (v, &end);
  return end != v && s >= 0 ? s : def;
}

/* After a fork, in the process that forked: "C FORKER MS TIMEOUT" to
 * the watcher, when the test case has a timeout.  (A fork that is not a
 * test case's, say a helper a case runs, ends long before; the watcher
 * then finds no child.)  snprintf and write only. */
static void
wd_atfork_parent (void)
{
  double case_s = wd_case_seconds >= 0 ? wd_case_seconds : wd_ck_default;
  double margin = case_s / 4 < CASE_MARGIN ? case_s / 4 : CASE_MARGIN;
  char line[96];
  int n;

  if (wd_fd < 0 || case_s <= 0)
    return;
  n = snprintf (line, sizeof line, "C %ld %ld %ld\n", (long) getpid (),
                (long) ((case_s - margin) * 1000), (long) case_s);
  if (n > 0 && write (wd_fd, line, (size_t) n) < 0)
    return;
}

/* In the new child: under Yama's ptrace_scope=1 only an ancestor may
 * attach, and the watcher is not one of a test case's. */
static void
wd_atfork_child (void)
{
  if (wd_fd >= 0)
    prctl (PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

__attribute__ ((constructor)) static void
sattn_watchdog_init (void)
{
  double seconds = wd_env_seconds ("SATTN_TEST_WATCHDOG", 0);
  char prog[256] = "test", pid_s[24], sec_s[24];
  const char *name = prog;
  int fds[2];
  pid_t me = getpid (), w;
  ssize_t n;

  if (seconds <= 0)
    return;
  n = readlink ("/proc/self/exe", prog, sizeof prog - 1);
  if (n > 0) {
    prog[n] = '\0';
    if (strrchr (prog, '/') != NULL)
      name = strrchr (prog, '/') + 1;
  }
  /* check's default timeout of a test case, in its own units. */
  wd_ck_default = wd_env_seconds ("CK_DEFAULT_TIMEOUT", 4) *
                  wd_env_seconds ("CK_TIMEOUT_MULTIPLIER", 1);
  if (pipe2 (fds, O_CLOEXEC) != 0)
    return;
  snprintf (pid_s, sizeof pid_s, "%ld", (long) me);
  snprintf (sec_s, sizeof sec_s, "%.0f", seconds);
  w = fork ();
  if (w == 0) {
    char *argv[] = { (char *) "bash", (char *) SATTN_WATCHDOG_SCRIPT,
                     pid_s,           sec_s,
                     (char *) name,   NULL };

    /* Killed when the program ends; its end of the pipe as fd 3 (kept
     * across exec). */
    prctl (PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid () != me)
      _exit (0);
    if (fds[0] == 3 ? fcntl (3, F_SETFD, 0) < 0 : dup2 (fds[0], 3) < 0)
      _exit (0);
    execve ("/bin/bash", argv, environ);
    _exit (127);
  }
  close (fds[0]);
  if (w < 0) {
    close (fds[1]);
    return;
  }
  /* The watcher may attach gdb to this process (Yama), and a watcher
   * that ended (no bash) must not block a fork. */
  prctl (PR_SET_PTRACER, (unsigned long) w, 0, 0, 0);
  fcntl (fds[1], F_SETFL, O_NONBLOCK);
  wd_fd = fds[1];
  pthread_atfork (NULL, wd_atfork_parent, wd_atfork_child);
}

void
sattn_watchdog_case_timeout (double seconds)
{
  wd_case_seconds = seconds * wd_env_seconds ("CK_TIMEOUT_MULTIPLIER", 1);
}

void
sattn_watchdog_case_default (void)
{
  wd_case_seconds = -1;
}
