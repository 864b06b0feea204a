/* Runs the fuzz target's entry point over files and directories (the seed
 * corpus): a regression test that needs neither clang nor libFuzzer, and
 * that the sanitizer build runs under ASan/UBSan.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib.h>

#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static int
run_file (const char *path)
{
  gchar *buf = NULL;
  gsize len = 0;
  GError *e = NULL;

  if (!g_file_get_contents (path, &buf, &len, &e)) {
    fprintf (stderr, "%s\n", e->message);
    g_error_free (e);
    return 0;
  }
  LLVMFuzzerTestOneInput ((const uint8_t *) buf, len);
  g_free (buf);
  return 1;
}

int
main (int argc, char **argv)
{
  unsigned count = 0;

  for (int i = 1; i < argc; i++) {
    GDir *dir = g_dir_open (argv[i], 0, NULL);
    if (dir == NULL) {
      if (!run_file (argv[i]))
        return 1;
      count++;
      continue;
    }
    const gchar *name;
    while ((name = g_dir_read_name (dir)) != NULL) {
      gchar *p = g_build_filename (argv[i], name, NULL);
      if (g_file_test (p, G_FILE_TEST_IS_REGULAR)) {
        if (!run_file (p))
          return 1;
        count++;
      }
      g_free (p);
    }
    g_dir_close (dir);
  }
  printf ("replayed %u inputs\n", count);
  return count > 0 ? 0 : 1;
}
