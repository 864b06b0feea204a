/* The labels-file reader (plugin/gstsattn-classes.c), fuzzed: seeded
 * random files (random bytes, random lines of text, NUL bytes, CR LF,
 * long lines, trailing blank lines, files over the size bound, empty
 * files, files of the right count and of a count off by one), and the
 * special paths (a FIFO, /dev/zero, a directory, a missing file), each
 * read as the labels of a whole model of CLASSES classes.  Every file must
 * give either labels (then exactly CLASSES of them, none holding a newline
 * or a NUL) or a refusal in words naming the file; never a crash, a hang
 * or a read past the bound.  The count of each outcome is printed.
 *
 *   SATTN_LABELS_FUZZ_EPISODES (default 2000), SATTN_LABELS_FUZZ_SEED (1)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "st-builder.h"
#include "gstsattn-classes.h"

#include "sattn/sattn-weights.h"

#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define CLASSES 5

static SattnModel *
model_of (const gchar * dir)
{
  gchar *path = g_build_filename (dir, "m.safetensors", NULL);
  WholeSpec s = { .f = 4, .d = 8, .n_layers = 1, .ff = 8, .classes = CLASSES,
    .heads = 2, .positions = "none"
  };
  SattnModel *m = NULL;
  char err[512];

  g_free (st_write_whole (path, 1, &s));
  fail_unless (sattn_model_load (path, "", NULL, &m, NULL, err, sizeof err)
      == SATTN_OK, "%s", err);
  g_unlink (path);
  g_free (path);
  return m;
}

/* One random file's bytes into s. */
static void
random_file (GRand * r, GString * s)
{
  gint kind = g_rand_int_range (r, 0, 8), i, n;

  g_string_truncate (s, 0);
  switch (kind) {
    case 0:                    /* random bytes */
      n = g_rand_int_range (r, 0, 400);
      for (i = 0; i < n; i++)
        g_string_append_c (s, (gchar) g_rand_int_range (r, 0, 256));
      break;
    case 1:                    /* over the bound */
      for (i = 0; i <= GST_SATTN_LABELS_MAX_BYTES; i += 64)
        g_string_append (s, "0123456789012345678901234567890123456789012345"
            "678901234567890\n");
      break;
    default:{                  /* lines of text, the right count or not */
      gint lines = CLASSES + (kind == 2 ? g_rand_int_range (r, -2, 3) : 0);

      for (i = 0; i < lines; i++) {
        gint len = g_rand_int_range (r, 0, kind == 3 ? 3000 : 12), j;

        for (j = 0; j < len; j++)
          g_string_append_c (s, (gchar) g_rand_int_range (r, 32, 127));
        if (kind == 4 && g_rand_int_range (r, 0, 4) == 0)
          g_string_append_c (s, '\0');
        g_string_append (s, kind == 5 ? "\r\n" : "\n");
      }
      if (kind == 6)
        g_string_append (s, "\n\n  \n");
      if (kind == 7 && s->len > 0)
        g_string_truncate (s, s->len - 1);      /* no last newline */
      break;
    }
  }
}

GST_START_TEST (test_labels_fuzz)
{
  const gchar *e = g_getenv ("SATTN_LABELS_FUZZ_EPISODES");
  const gchar *sd = g_getenv ("SATTN_LABELS_FUZZ_SEED");
  guint episodes = e ? (guint) g_ascii_strtoull (e, NULL, 10) : 2000, ep;
  guint32 seed = sd ? (guint32) g_ascii_strtoull (sd, NULL, 10) : 1;
  gchar *dir = g_dir_make_tmp ("sattn-labels-XXXXXX", NULL);
  gchar *file = g_build_filename (dir, "labels.txt", NULL);
  gchar *fifo = g_build_filename (dir, "fifo", NULL);
  const gchar *special[] = { fifo, "/dev/zero", dir, "/nonexistent/labels" };
  SattnModel *m = model_of (dir);
  GRand *r = g_rand_new_with_seed (seed);
  GString *bytes = g_string_new (NULL);
  guint accepted = 0, refused = 0, i;

  fail_unless (mkfifo (fifo, 0600) == 0);
  for (ep = 0; ep < episodes + G_N_ELEMENTS (special); ep++) {
    const gchar *path = file;
    gchar **labels = NULL, *why = NULL;

    if (ep < G_N_ELEMENTS (special)) {
      path = special[ep];
    } else {
      random_file (r, bytes);
      fail_unless (g_file_set_contents (file, bytes->str, bytes->len, NULL));
    }
    if (gst_sattn_classes_labels (m, path, &labels, &why)) {
      fail_unless (why == NULL);
      fail_unless_equals_int (g_strv_length (labels), CLASSES);
      for (i = 0; i < CLASSES; i++)
        fail_unless (strchr (labels[i], '\n') == NULL);
      accepted++;
    } else {
      fail_unless (labels == NULL && why != NULL);
      fail_unless (strstr (why, "labels file") != NULL &&
          strstr (why, path) != NULL, "episode %u: %s", ep, why);
      refused++;
    }
    g_strfreev (labels);
    g_free (why);
  }
  fprintf (stderr, "labels fuzz: %u episodes from seed %u (and %u special "
      "paths): %u accepted with %d labels, %u refused in words\n", episodes,
      seed, (guint) G_N_ELEMENTS (special), accepted, CLASSES, refused);
  fail_unless (accepted > 0 && refused > 0);
  g_string_free (bytes, TRUE);
  g_rand_free (r);
  sattn_model_free (m);
  g_unlink (file);
  g_unlink (fifo);
  g_rmdir (dir);
  g_free (file);
  g_free (fifo);
  g_free (dir);
}

GST_END_TEST;

static Suite *
sattn_labels_fuzz_suite (void)
{
  Suite *s = suite_create ("sattn_labels_fuzz");
  TCase *tc = tcase_create ("labels");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_labels_fuzz);
  return s;
}

GST_CHECK_MAIN (sattn_labels_fuzz);
