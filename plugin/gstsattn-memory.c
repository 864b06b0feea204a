/* The sattn element's memory budget: what the process can still get
 * (the headroom below RLIMIT_AS / RLIMIT_DATA and the machine's physical
 * memory), the check of a stream and the element's own buffers against
 * it before they are allocated, the check of a weights file's size
 * before it is read, and the element's buffers for one stream
 * configuration (fallible allocation).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-priv.h"
#include "gstsattn-memory.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#ifdef G_OS_UNIX
#include <sys/resource.h>
#include <unistd.h>
#endif

/* Frames handed to the core per call; bounds the scratch memory. */
#define MIN_CHUNK_FRAMES 256
#define MAX_CHUNK_FRAMES 4096

/* Frames handed to the core per call: scratch stays O(window × d_model),
 * at most max(window, 1 MiB). */
gsize
gst_sattn_chunk_frames (const GstSattnSettings * c, guint64 d_model)
{
  gsize chunk = CLAMP (c->hop, MIN_CHUNK_FRAMES, MAX_CHUNK_FRAMES);

  chunk = MIN (chunk, MAX ((gsize) c->window,
          (gsize) (1u << 20) / (d_model * sizeof (float))));
  return MAX (chunk, 1);
}

/* Row descriptions one core call can need: a push of chunk frames with
 * up to a window pending (frames mode), or its windows. */
static gsize
gst_sattn_info_rows (const GstSattnSettings * c, gsize chunk)
{
  return c->output == GST_SATTN_OUTPUT_FRAMES ? c->window + chunk :
      chunk / c->hop + 2;
}

void
gst_sattn_scratch_clear (GstSattnScratch * sc)
{
  g_free (sc->out_info);
  g_free (sc->carry);
  g_free (sc->scratch);
  g_free (sc->zeros);
  g_free (sc->invalid_flags);
  g_free (sc->info);
  g_free (sc->checks);
  memset (sc, 0, sizeof (*sc));
}

/* Fallible: posts an element error naming the size that could not be
 * had and returns FALSE (nothing allocated then). */
gboolean
gst_sattn_alloc_scratch (GstSattn * self, GstSattnScratch * sc,
    const GstSattnSettings * c, guint64 d_model, gsize chunk)
{
  const gsize fb = (gsize) d_model * sizeof (float);
  const gchar *what = NULL;
  gsize size = 0;

  memset (sc, 0, sizeof (*sc));
  sc->info_cap = gst_sattn_info_rows (c, chunk);
  if ((sc->carry = g_try_malloc (size = fb)) == NULL)
    what = "a partial frame";
  else if ((sc->scratch = g_try_malloc (size = chunk * fb)) == NULL)
    what = "realigned input frames";
  else if ((sc->zeros = g_try_malloc0 (size = chunk * fb)) == NULL)
    what = "zero frames";
  else if ((sc->invalid_flags = g_try_malloc0 (size = chunk)) == NULL)
    what = "frame flags";
  else if ((sc->info = g_try_new (SattnRowInfo, sc->info_cap)) == NULL) {
    size = sc->info_cap * sizeof (SattnRowInfo);
    what = "row descriptions";
  } else if ((sc->checks = g_try_new (SattnRowCheck, sc->info_cap)) == NULL) {
    size = sc->info_cap * sizeof (SattnRowCheck);
    what = "row contract checks";
  } else if ((sc->out_info = g_try_new (SattnRowInfo, sc->out_info_cap =
              gst_sattn_info_rows (c, chunk + GST_SATTN_OUT_FRAMES))) == NULL) {
    size = sc->out_info_cap * sizeof (SattnRowInfo);
    what = "row descriptions of an output buffer";
  }
  if (what == NULL)
    return TRUE;
  GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
      ("Could not allocate %" G_GSIZE_FORMAT " bytes for %s (%" G_GSIZE_FORMAT
          " frames of %" G_GUINT64_FORMAT " values per core call)", size,
          what, chunk, d_model), (NULL));
  gst_sattn_scratch_clear (sc);
  return FALSE;
}

/* a + b and a * b, saturating (sizes of memory that may not exist).  The
 * core's sattn_size_add / sattn_size_mul (core/internal.h) are private to
 * it and work in size_t; the estimate is in guint64, so that it names
 * even sizes that a 32-bit process cannot have. */
static guint64
gst_sattn_size_add (guint64 a, guint64 b)
{
  return b > G_MAXUINT64 - a ? G_MAXUINT64 : a + b;
}

static guint64
gst_sattn_size_mul (guint64 a, guint64 b)
{
  return a != 0 && b > G_MAXUINT64 / a ? G_MAXUINT64 : a * b;
}

/* Memory this process can still get: the headroom below RLIMIT_AS and
 * RLIMIT_DATA and the machine's physical memory, whichever is least
 * (G_MAXUINT64 when none is known); *what names it. */
guint64
gst_sattn_memory_headroom (const gchar ** what)
{
  guint64 avail = G_MAXUINT64;

  *what = "no known limit";
#ifdef G_OS_UNIX
  {
    long page = sysconf (_SC_PAGESIZE), phys = sysconf (_SC_PHYS_PAGES);
    unsigned long long size = 0, rss, shared, text, lib, data = 0;
    struct rlimit rl;
    FILE *f;

    if (page > 0 && phys > 0) {
      avail = gst_sattn_size_mul ((guint64) phys, (guint64) page);
      *what = "the machine's physical memory";
    }
    /* Address space and data segment in use now (Linux). */
    f = fopen ("/proc/self/statm", "r");
    if (f != NULL) {
      if (fscanf (f, "%llu %llu %llu %llu %llu %llu", &size, &rss, &shared,
              &text, &lib, &data) != 6)
        size = data = 0;
      fclose (f);
    }
    if (page > 0) {
      size *= (unsigned long long) page;
      data *= (unsigned long long) page;
    }
    if (getrlimit (RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      guint64 h = rl.rlim_cur > size ? rl.rlim_cur - size : 0;
      if (h < avail) {
        avail = h;
        *what = "the headroom below the address-space limit (RLIMIT_AS)";
      }
    }
    if (getrlimit (RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      guint64 h = rl.rlim_cur > data ? rl.rlim_cur - data : 0;
      if (h < avail) {
        avail = h;
        *what = "the headroom below the data-segment limit (RLIMIT_DATA)";
      }
    }
  }
#endif
  return avail;
}

/* Whether the weights file at path can be read within the memory this
 * process can still get (gst_sattn_memory_headroom): a file larger than
 * that divided by GST_SATTN_LOAD_FACTOR is refused before anything is
 * read (a 2 GiB sparse file grew the process to 5 GB before "out of
 * memory"), with the sizes in err.  SATTN_MEMORY_CHECK=0 turns this off,
 * as it does the stream check; a path that is not a regular file is
 * left to the loader's words. */
gboolean
gst_sattn_memory_check_load (const gchar * path, gchar * err, gsize err_len)
{
  struct stat sb;
  const gchar *what;
  guint64 avail = gst_sattn_memory_headroom (&what);

  if (g_strcmp0 (g_getenv ("SATTN_MEMORY_CHECK"), "0") == 0 ||
      stat (path, &sb) != 0 || !S_ISREG (sb.st_mode) ||
      (guint64) sb.st_size <= avail / GST_SATTN_LOAD_FACTOR)
    return TRUE;
  if (err != NULL && err_len > 0)
    g_snprintf (err, err_len, "'%s' is %" G_GUINT64_FORMAT " bytes: "
        "loading it may hold up to %d times that (%" G_GUINT64_FORMAT
        " bytes: the file, float32 copies of its tensors and the model), "
        "and %" G_GUINT64_FORMAT " bytes are available (%s)", path,
        (guint64) sb.st_size, GST_SATTN_LOAD_FACTOR,
        (guint64) sb.st_size * GST_SATTN_LOAD_FACTOR, avail, what);
  return FALSE;
}

/* Before allocating a stream: what it and the element's own buffers need,
 * against what the process can have.  Posts an element error that gives
 * the sizes and returns FALSE when it cannot fit.  SATTN_MEMORY_CHECK=0 in
 * the environment turns the check off (allocation failures are still
 * reported as errors). */
gboolean
gst_sattn_check_memory (GstSattn * self, const SattnModel * model,
    const SattnStreamConfig * sc, const GstSattnSettings * c,
    guint64 d_model, gsize chunk)
{
  const gchar *env = g_getenv ("SATTN_MEMORY_CHECK");
  guint64 core, own, fb, row_bytes, total, avail;
  const gchar *what;
  gchar *s_total, *s_avail;

  if (env != NULL && strcmp (env, "0") == 0)
    return TRUE;
  core = sattn_stream_bytes (model, sc);
  if (core == 0)                /* the size does not fit in size_t */
    core = G_MAXUINT64;
  fb = d_model * sizeof (float);
  row_bytes = gst_sattn_size_mul (sattn_model_d_out (model) *
      sizeof (float), c->output == GST_SATTN_OUTPUT_WINDOW ? c->window : 1);
  /* carry, realigned input, zeros, invalid flags, row descriptions, one
   * output buffer of the rows of one core call, the weights the health
   * messages and the attention map read. */
  own = fb;
  own = gst_sattn_size_add (own, gst_sattn_size_mul (2 * chunk, fb));
  own = gst_sattn_size_add (own, chunk);
  own = gst_sattn_size_add (own, gst_sattn_info_rows (c, chunk) *
      sizeof (SattnRowInfo));
  own = gst_sattn_size_add (own, gst_sattn_size_mul (gst_sattn_info_rows (c,
              chunk), row_bytes));
  if (sc->keep_weights) {
    /* a whole model's CLS row and column: one more of each */
    guint64 cells = gst_sattn_size_mul (c->window + 1, c->window + 1 +
        sattn_model_extra_keys (model));
    /* Two float copies and one GRAY8 map frame; a message's weights as
     * GValues when statistics are on too. */
    own = gst_sattn_size_add (own, gst_sattn_size_mul (cells,
            2 * sizeof (float) + 1 + (sc->collect_stats ? sizeof (GValue) :
                0)));
  }
  total = gst_sattn_size_add (core, own);
  avail = gst_sattn_memory_headroom (&what);
  GST_DEBUG_OBJECT (self, "memory: stream %" G_GUINT64_FORMAT ", element %"
      G_GUINT64_FORMAT ", available %" G_GUINT64_FORMAT " (%s)", core, own,
      avail, what);
  if (core != SIZE_MAX && total <= avail && total <= G_MAXSIZE)
    return TRUE;

  s_total = g_format_size_full (total, G_FORMAT_SIZE_IEC_UNITS);
  s_avail = g_format_size_full (avail, G_FORMAT_SIZE_IEC_UNITS);
  {
    /* What to change: the window and frames, unless the model alone does
     * not fit (its width d_out, with a window of one frame). */
    SattnStreamConfig one = *sc;
    guint64 least;
    gchar *advice;

    one.window = one.hop = 1;
    one.keep_weights = 0;
    least = sattn_stream_bytes (model, &one);
    if (least == 0 || least > avail)
      advice = g_strdup_printf ("the model itself is the cause: with its "
          "rows of d_model=%" G_GSIZE_FORMAT " values a stream needs more "
          "than that even for a window of one frame; use a smaller model",
          sattn_model_d_out (model));
    else
      advice = g_strdup ("use a smaller window or smaller frames");
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("window=%u with %" G_GUINT64_FORMAT "-value frames (output=%s, "
            "heads=%u) needs %s (%" G_GUINT64_FORMAT " bytes: %"
            G_GUINT64_FORMAT " for the attention stream, %" G_GUINT64_FORMAT
            " for the element's buffers), more than this process can have: "
            "%s (%s); %s", c->window, d_model,
            gst_sattn_output_nick (c->output), c->heads, s_total, total,
            core == SIZE_MAX ? G_MAXUINT64 : core, own, s_avail, what,
            advice), ("SATTN_MEMORY_CHECK=0 turns this check off"));
    g_free (advice);
  }
  g_free (s_total);
  g_free (s_avail);
  return FALSE;
}
