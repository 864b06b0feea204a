/* A hang is reported as a hang: a watchdog for the test programs that
 * start pipelines (the element tests' shared harness, the soak runs).
 *
 * SATTN_TEST_WATCHDOG=S (seconds; meson sets it below each test's own
 * timeout, tests/meson.build) arms it when the program starts.  S seconds
 * later, a process of the program that is still running prints
 *
 *   HANG: <program> (pid N) still running after S s ...
 *
 * then every thread's backtrace (gdb -p, when gdb is installed) of itself
 * and of its child processes, kills those children and aborts: the test
 * fails with the stacks of the hang, before meson kills it without them.
 *
 * check's fork mode runs each test case in a child process: fork ()
 * arms a child for the same deadline and, when its test case has a
 * timeout of its own (CK_DEFAULT_TIMEOUT, or sattn_tcase_set_timeout),
 * for a few seconds before that timeout, so that the case that hangs
 * prints its stacks before check kills it without them.  The process
 * that forks keeps a few seconds more, so the child's report comes first.
 *
 * Timers, not threads: a thread in the test runner would make every fork
 * of check a fork of a multithreaded process (ThreadSanitizer then stops
 * the child at its first thread).  The report is written from a signal
 * handler with async-signal-safe calls only (write, _Fork, execve,
 * waitpid, abort); the work is done by a shell in the forked child.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Seconds the parent waits after the deadline its children share, when
 * it has any; the margin a test case keeps before check's own timeout
 * kills it. */
#define PARENT_GRACE 5.0
#define CASE_MARGIN 10.0

static int wd_signal;
static timer_t wd_timer;
static int wd_armed;
static volatile sig_atomic_t wd_graced;
static struct timespec wd_deadline; /* CLOCK_MONOTONIC, program-wide */
static struct timespec wd_start;    /* the program's, or the case's */
static double wd_case_timeout;      /* > 0: armed for a test case's timeout */
static double wd_seconds;
static double wd_ck_default = -1;            /* check's default case timeout */
static volatile double wd_case_seconds = -1; /* this tcase's, -1: default */
static char wd_prog[256] = "test";

/* The report, run by /bin/sh in a forked child: $1 is the hanging pid. */
static const char wd_script[] =
    "exec 1>&2\n"
    "dump () {\n"
    "  if command -v gdb >/dev/null 2>&1; then\n"
    "    timeout -k 2 20 gdb -p \"$1\" -batch -nx -q -ex 'set pagination off'"
    " -ex 'info threads' -ex 'thread apply all bt' 2>&1 </dev/null"
    " | grep -v '^\\[New LWP\\|^\\[Thread debugging\\|^Using host libthread'\n"
    "  else\n"
    "    echo \"(gdb is not installed: no backtraces)\"\n"
    "  fi\n"
    "}\n"
    "echo \"---- threads of pid $1\"\n"
    "dump \"$1\"\n"
    "for c in $(cat /proc/\"$1\"/task/*/children 2>/dev/null); do\n"
    "  [ \"$c\" = \"$$\" ] && continue\n"
    "  echo \"---- threads of its child process $c: $(tr '\\0' ' ' "
    "</proc/$c/cmdline 2>/dev/null | cut -c1-200)\"\n"
    "  dump \"$c\"\n"
    "  kill -KILL \"$c\" 2>/dev/null\n"
    "done\n"
    "echo \"---- end of the HANG report of pid $1\"\n";

static void
wd_write (const char *s)
{
  size_t n = strlen (s);

  while (n > 0) {
    ssize_t w = write (STDERR_FILENO, s, n);

    if (w <= 0) {
      if (w < 0 && errno == EINTR)
        continue;
      return;
    }
    s += w;
    n -= (size_t) w;
  }
}

/* Decimal of v into buf (async-signal-safe). */
static const char *
wd_itoa (long v, char *buf, size_t size)
{
  char *p = buf + size - 1;
  int neg = v < 0;
  unsigned long u = neg ? (unsigned long) -v : (unsigned long) v;

  *p = '\0';
  do {
    *--p = (char) ('0' + u % 10);
    u /= 10;
  } while (u != 0 && p > buf + 1);
  if (neg)
    *--p = '-';
  return p;
}

/* Seconds since t (CLOCK_MONOTONIC). */
static double
wd_since (const struct timespec *t)
{
  struct timespec now;

  clock_gettime (CLOCK_MONOTONIC, &now);
  return (double) (now.tv_sec - t->tv_sec) +
         (double) (now.tv_nsec - t->tv_nsec) / 1e9;
}

/* Whether the main thread has child processes (async-signal-safe). */
static int
wd_has_children (void)
{
  char path[64] = "/proc/self/task/", buf[16];
  char pbuf[24];
  int fd;
  ssize_t n;

  strcat (path, wd_itoa ((long) getpid (), pbuf, sizeof pbuf));
  strcat (path, "/children");
  fd = open (path, O_RDONLY);
  if (fd < 0)
    return 0;
  n = read (fd, buf, sizeof buf);
  close (fd);
  return n > 0;
}

static void
wd_fire (int sig, siginfo_t *si, void *uc)
{
  char pbuf[24], sbuf[24];
  const char *pid;
  pid_t child;
  int status;

  (void) uc;
  if (si == NULL || si->si_code != SI_TIMER)
    return;
  (void) sig;
  /* A test case forked before the deadline reports first: its own
   * timer fires at the same time. */
  if (!wd_graced && wd_has_children ()) {
    struct itimerspec its;

    wd_graced = 1;
    memset (&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t) PARENT_GRACE;
    timer_settime (wd_timer, 0, &its, NULL);
    return;
  }
  pid = wd_itoa ((long) getpid (), pbuf, sizeof pbuf);
  wd_write ("\nHANG: ");
  wd_write (wd_prog);
  wd_write (" (pid ");
  wd_write (pid);
  if (wd_case_timeout > 0) {
    wd_write ("): its check test case is still running after ");
    wd_write (wd_itoa ((long) (wd_since (&wd_start) + 0.5), sbuf, sizeof sbuf));
    wd_write (" s (the case's timeout: ");
    wd_write (wd_itoa ((long) wd_case_timeout, sbuf, sizeof sbuf));
  } else {
    wd_write (") still running after ");
    wd_write (wd_itoa ((long) (wd_since (&wd_start) + 0.5), sbuf, sizeof sbuf));
    wd_write (" s (SATTN_TEST_WATCHDOG=");
    wd_write (wd_itoa ((long) wd_seconds, sbuf, sizeof sbuf));
  }
  wd_write (" s); every thread's backtrace follows\n");
  /* Under Yama's ptrace_scope=1 only an ancestor may attach: allow gdb. */
  prctl (PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  child = _Fork ();
#else
  child = fork ();
#endif
  if (child == 0) {
    char *argv[] = { (char *) "sh",      (char *) "-c",
                     (char *) wd_script, (char *) "sattn-watchdog",
                     (char *) pid,       NULL };

    execve ("/bin/sh", argv, environ);
    _exit (127);
  }
  if (child > 0)
    while (waitpid (child, &status, 0) < 0 && errno == EINTR)
      ;
  wd_write ("HANG: ");
  wd_write (wd_prog);
  wd_write (" aborts\n");
  signal (SIGABRT, SIG_DFL);
  abort ();
}

static void
wd_add (struct timespec *t, double s)
{
  time_t whole = (time_t) s;

  t->tv_sec += whole;
  t->tv_nsec += (long) ((s - (double) whole) * 1e9);
  if (t->tv_nsec >= 1000000000L) {
    t->tv_sec++;
    t->tv_nsec -= 1000000000L;
  }
}

/* (Re)arm this process's timer for the absolute time at. */
static void
wd_arm_at (const struct timespec *at)
{
  struct sigevent ev;
  struct itimerspec its;

  memset (&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = wd_signal;
  if (timer_create (CLOCK_MONOTONIC, &ev, &wd_timer) != 0)
    return;
  memset (&its, 0, sizeof its);
  its.it_value = *at;
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
    its.it_value.tv_nsec = 1;
  timer_settime (wd_timer, TIMER_ABSTIME, &its, NULL);
}

static int
wd_before (const struct timespec *a, const struct timespec *b)
{
  return a->tv_sec < b->tv_sec ||
         (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* In a forked child: the program's deadline, or its test case's timeout
 * less a margin when that comes first.  Runs between fork and a possible
 * exec (which deletes the timer): system calls only. */
static void
wd_atfork_child (void)
{
  struct timespec now, at = wd_deadline;
  double case_s = wd_case_seconds >= 0 ? wd_case_seconds : wd_ck_default;

  if (!wd_armed)
    return;
  clock_gettime (CLOCK_MONOTONIC, &now);
  if (case_s > 0) {
    struct timespec c = now;
    double margin = case_s / 4 < CASE_MARGIN ? case_s / 4 : CASE_MARGIN;

    wd_add (&c, case_s - margin);
    if (wd_before (&c, &at)) {
      at = c;
      wd_start = now;
      wd_case_timeout = case_s;
    }
  }
  /* Forked past the deadline: the parent's own timer reports it. */
  if (wd_before (&at, &now))
    return;
  wd_arm_at (&at);
}

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

__attribute__ ((constructor)) static void
sattn_watchdog_init (void)
{
  struct sigaction sa;
  ssize_t n;

  wd_seconds = wd_env_seconds ("SATTN_TEST_WATCHDOG", 0);
  if (wd_seconds <= 0)
    return;
  n = readlink ("/proc/self/exe", wd_prog, sizeof wd_prog - 1);
  if (n > 0) {
    const char *slash;

    wd_prog[n] = '\0';
    slash = strrchr (wd_prog, '/');
    if (slash != NULL)
      memmove (wd_prog, slash + 1, strlen (slash));
  }
  /* check's default timeout of a test case, in its own units. */
  wd_ck_default = wd_env_seconds ("CK_DEFAULT_TIMEOUT", 4) *
                  wd_env_seconds ("CK_TIMEOUT_MULTIPLIER", 1);

  wd_signal = SIGRTMIN + 4;
  memset (&sa, 0, sizeof sa);
  sa.sa_sigaction = wd_fire;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset (&sa.sa_mask);
  /* check's SIGALRM kills a test case's processes at its timeout: not
   * while they are being reported. */
  sigaddset (&sa.sa_mask, SIGALRM);
  if (sigaction (wd_signal, &sa, NULL) != 0)
    return;
  clock_gettime (CLOCK_MONOTONIC, &wd_start);
  wd_deadline = wd_start;
  wd_add (&wd_deadline, wd_seconds);
  wd_arm_at (&wd_deadline);
  wd_armed = 1;
  pthread_atfork (NULL, NULL, wd_atfork_child);
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
