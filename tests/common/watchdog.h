/* The test programs' watchdog (watchdog.c, watchdog.sh): with
 * SATTN_TEST_WATCHDOG=S set, a program still running S seconds after it
 * started (or a check test case a few seconds before its timeout) gets
 * "HANG:", every thread's backtrace (gdb) and is aborted (killed).
 * Linked whole (link_whole): it arms itself from a constructor.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_TEST_WATCHDOG_H
#define SATTN_TEST_WATCHDOG_H

#ifdef __cplusplus
extern "C" {
#endif

/* The timeout (seconds, 0 = none) of the check test case about to run
 * in forked children, set from the process that forks them; or back to
 * check's default (CK_DEFAULT_TIMEOUT). */
void sattn_watchdog_case_timeout (double seconds);
void sattn_watchdog_case_default (void);

#ifdef __cplusplus
}
#endif

#endif
