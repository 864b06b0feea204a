/* The stream front end: the stream API of sattn.h over one executor (see
 * stream.h).  It checks every configuration and argument, keeps the
 * schedule, the errors, the statistics and the last window's weights
 * (SattnStream), and calls the executor chosen when the stream is
 * created through its ops table: the incremental executor for an
 * attention or encoder layer (incremental-ops.c), the per-window one for
 * a whole model (whole.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "stream/stream.h"

#include <stdlib.h>
#include <string.h>

/* The executor of a model: the one place the front end looks at its
 * kind. */
static const SattnExecOps *
exec_for (const SattnModel *m)
{
  return m->net != NULL ? &sattn_exec_whole : &sattn_exec_incremental;
}

/* Every rule a stream configuration must follow, the one place they are
 * written (the executor's own after the common ones); m NULL checks
 * sc_in alone.  The caller's struct is read into *sc (this version's
 * struct, see sattn_struct_in), which the checks and the caller then
 * use. */
static SattnStatus
stream_check (const SattnModel *m, const SattnStreamConfig *sc_in,
              SattnStreamConfig *sc, char *err, size_t err_len)
{
  SattnStatus st;

  if (err != NULL && err_len > 0)
    err[0] = '\0';
  if (sc_in == NULL)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "no stream configuration (sc is NULL)");
  if ((st = sattn_struct_in ("SattnStreamConfig", "SattnStreamConfig", sc_in,
                             sc, sizeof *sc, SATTN_STREAM_CONFIG_MIN_SIZE,
                             SIZE_MAX, err, err_len)) != SATTN_OK)
    return st;
  if (sc->window == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "window=0: a window holds at least one frame");
  if (sc->hop == 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "hop=0: hop must be between 1 and the window (%zu)",
                       sc->window);
  if (sc->hop > sc->window)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "hop=%zu is larger than window=%zu; hop must be "
                       "between 1 and the window (or the window at least "
                       "%zu)",
                       sc->hop, sc->window, sc->hop);
  if ((unsigned) sc->output > SATTN_OUTPUT_CLASSES)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "output=%d is not an output mode (0 frames, 1 window, "
                       "2 mean, 3 last, 4 classes)",
                       (int) sc->output);
  if ((unsigned) sc->start > SATTN_START_WAIT)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "start=%d is not a start policy (0 pad, 1 wait)",
                       (int) sc->start);
  if ((unsigned) sc->invalid_policy > SATTN_INVALID_ERROR)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "invalid_policy=%d is not an invalid-frames policy "
                       "(0 mask, 1 zero, 2 error)",
                       (int) sc->invalid_policy);
  if (!(sc->saturation_threshold >= 0.0f && sc->saturation_threshold <= 1.0f))
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "saturation_threshold=%g is not within [0, 1] (0 "
                       "means the default %g)",
                       (double) sc->saturation_threshold,
                       (double) SATTN_DEFAULT_SATURATION);
  if (sc->threads < 0)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "threads=%d is negative; use 1 (the calling thread "
                       "only), a count N > 1, or 0 for one per CPU",
                       sc->threads);
  if ((unsigned) sc->precision > SATTN_PRECISION_FAST)
    return sattn_fail (SATTN_E_INVAL, err, err_len,
                       "precision=%d is not a precision (0 exact, 1 fast)",
                       (int) sc->precision);
  if (m != NULL)
    return exec_for (m)->check (m, sc, err, err_len);
  return SATTN_OK;
}

static int
stream_config_ok (const SattnModel *m, const SattnStreamConfig *sc_in,
                  SattnStreamConfig *sc)
{
  return m != NULL && stream_check (m, sc_in, sc, NULL, 0) == SATTN_OK;
}

SattnStatus
sattn_stream_config_check (const SattnModel *m, const SattnStreamConfig *sc_in,
                           char *err, size_t err_len)
{
  SattnStreamConfig sc;
  SattnStatus st = stream_check (m, sc_in, &sc, err, err_len);
  if (st != SATTN_OK || m == NULL)
    return st;
  return exec_for (m)->fits (m, &sc, err, err_len);
}

size_t
sattn_stream_bytes (const SattnModel *m, const SattnStreamConfig *sc_in)
{
  SattnStreamConfig sc;
  if (!stream_config_ok (m, sc_in, &sc))
    return 0;
  size_t b = exec_for (m)->bytes (m, &sc);
  return b == 0 || b > SIZE_MAX - sizeof (SattnStream)
             ? 0
             : b + sizeof (SattnStream);
}

void
sattn_stream_free (SattnStream *s)
{
  if (s == NULL)
    return;
  s->ops->destroy (s->ex);
  free (s);
}

void
sattn_stream_reset (SattnStream *s)
{
  if (s == NULL)
    return;
  s->ops->reset (s->ex);
  s->total = 0;
  s->pos0 = 0;
  s->next_out = 0;
  s->last_end = 0;
  s->next_window = sattn_schedule_first (&s->sc, 0);
  s->have_window = 0;
  s->wkeep_rows = 0;
  s->have_error = 0;
}

SattnStream *
sattn_stream_new (const SattnModel *m, const SattnStreamConfig *sc_in,
                  SattnStatus *status)
{
  SattnStatus st = SATTN_E_INVAL;
  SattnStream *s = NULL;
  SattnStreamConfig sc;

  if (!stream_config_ok (m, sc_in, &sc))
    goto fail;
  st = SATTN_E_NOMEM;
  if ((s = calloc (1, sizeof (*s))) == NULL)
    goto fail;
  s->ops = exec_for (m);
  s->sc = sc;
  if (s->sc.saturation_threshold == 0.0f)
    s->sc.saturation_threshold = SATTN_DEFAULT_SATURATION;
  s->n = sc.window;
  s->h = sc.hop;
  s->heads = m->cfg.heads;
  sattn_stats_clear (&s->stats);
  if ((s->ex = s->ops->create (s, m, &st)) == NULL) {
    free (s);
    s = NULL;
    goto fail;
  }
  sattn_stream_reset (s);
  if (status)
    *status = SATTN_OK;
  return s;

fail:
  if (status)
    *status = st;
  return NULL;
}

size_t
sattn_stream_row_floats (const SattnStream *s)
{
  return s != NULL ? s->row_floats : 0;
}

size_t
sattn_stream_pending (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return (size_t) (s->total - s->next_out);
  return (size_t) (s->total - s->last_end);
}

uint64_t
sattn_stream_frames_to_window (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  return s->next_window - s->total;
}

size_t
sattn_stream_config_window_rows (const SattnStreamConfig *sc_in)
{
  SattnStreamConfig scl;
  const SattnStreamConfig *sc = &scl;
  if (stream_check (NULL, sc_in, &scl, NULL, 0) != SATTN_OK)
    return 0;
  switch (sc->output) {
    case SATTN_OUTPUT_FRAMES:
      return sc->hop;
    case SATTN_OUTPUT_LAST:
      return 1;
    default:
      return sc->window;
  }
}

size_t
sattn_stream_window_rows (const SattnStream *s, int drain)
{
  if (s == NULL)
    return 0;
  return s->ops->window_rows (s->ex, drain);
}

size_t
sattn_stream_max_rows (const SattnStream *s, size_t n_frames)
{
  if (s == NULL)
    return 0;
  if (n_frames == 0)
    return sattn_stream_pending (s) > 0
               ? (s->sc.output == SATTN_OUTPUT_FRAMES ? sattn_stream_pending (s)
                                                      : 1)
               : 0;
  if (s->sc.output == SATTN_OUTPUT_FRAMES)
    return sattn_stream_pending (s) + n_frames;
  return (size_t) sattn_schedule_due (s->next_window, s->h,
                                      s->total + n_frames);
}

SattnStatus
sattn_stream_push (SattnStream *s, const float *frames, size_t n_frames,
                   const uint8_t *valid, float *out, size_t out_rows,
                   SattnRowInfo *info, size_t *n_rows)
{
  return sattn_stream_push_checked (s, frames, n_frames, valid, out, out_rows,
                                    info, NULL, n_rows);
}

SattnStatus
sattn_stream_drain (SattnStream *s, float *out, size_t out_rows,
                    SattnRowInfo *info, size_t *n_rows)
{
  return sattn_stream_drain_checked (s, out, out_rows, info, NULL, n_rows);
}

SattnStatus
sattn_stream_push_checked (SattnStream *s, const float *frames, size_t n_frames,
                           const uint8_t *valid, float *out, size_t out_rows,
                           SattnRowInfo *info, SattnRowCheck *checks,
                           size_t *n_rows)
{
  size_t k = 0;
  if (n_rows)
    *n_rows = 0;
  if (s == NULL || (frames == NULL && n_frames > 0))
    return SATTN_E_INVAL;
  size_t need = sattn_stream_max_rows (s, n_frames);
  if (need > 0 && out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;
  SattnStatus st = s->ops->push (s->ex, frames, n_frames, valid, out, info,
                                 checks, &k);
  if (n_rows)
    *n_rows = k;
  return st;
}

SattnStatus
sattn_stream_drain_checked (SattnStream *s, float *out, size_t out_rows,
                            SattnRowInfo *info, SattnRowCheck *checks,
                            size_t *n_rows)
{
  if (n_rows)
    *n_rows = 0;
  if (s == NULL)
    return SATTN_E_INVAL;
  size_t need = sattn_stream_max_rows (s, 0);
  if (need == 0)
    return SATTN_OK;
  if (out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;
  size_t k = s->ops->drain (s->ex, out, info, checks);
  if (n_rows)
    *n_rows = k;
  return SATTN_OK;
}

void
sattn_stream_get_stats (SattnStream *s, SattnStats *out, int clear)
{
  if (s == NULL)
    return;
  if (out)
    *out = s->stats;
  if (clear) {
    sattn_stats_clear (&s->stats);
    memset (s->overflow_parts, 0, sizeof (s->overflow_parts));
  }
}

/* A whole model's rows are not told apart: all of them count as
 * SATTN_PART_UNKNOWN. */
SattnStatus
sattn_stream_overflow_parts (const SattnStream *s, uint64_t *counts,
                             size_t n_counts)
{
  if (s == NULL || counts == NULL)
    return SATTN_E_INVAL;
  uint64_t known[SATTN_PART_COUNT], rows = s->stats.overflow_rows, sum = 0;
  memcpy (known, s->overflow_parts, sizeof (known));
  for (size_t p = 1; p < SATTN_PART_COUNT; p++)
    sum += known[p];
  known[SATTN_PART_UNKNOWN] = rows > sum ? rows - sum : 0;
  for (size_t p = 0; p < n_counts; p++)
    counts[p] = p < SATTN_PART_COUNT ? known[p] : 0;
  return SATTN_OK;
}

void
sattn_stream_weights_size (const SattnStream *s, size_t *rows, size_t *cols)
{
  size_t r = 0, c = 0;
  if (s != NULL && s->wkeep != NULL) {
    r = s->wkeep_max_rows;
    c = s->wkeep_cols;
  }
  if (rows)
    *rows = r;
  if (cols)
    *cols = c;
}

SattnStatus
sattn_stream_last_weights (const SattnStream *s, int head, float *out,
                           size_t *rows, size_t *cols)
{
  if (s == NULL || s->wkeep == NULL || !s->have_window || head < -1 ||
      (head >= 0 && (size_t) head >= s->heads))
    return SATTN_E_INVAL;
  const size_t r = s->wkeep_rows, c = s->wkeep_cols;
  if (rows)
    *rows = r;
  if (cols)
    *cols = c;
  if (out == NULL)
    return SATTN_OK;
  if (head >= 0)
    memcpy (out, s->wkeep + (size_t) head * r * c, r * c * sizeof (float));
  else
    s->ops->weights_mean (s->ex, out);
  return SATTN_OK;
}

SattnStatus
sattn_stream_reset_at (SattnStream *s, uint64_t first_frame)
{
  if (s == NULL || first_frame >= (UINT64_C (1) << 53))
    return SATTN_E_INVAL;
  sattn_stream_reset (s);
  /* The ring's slots follow the frame count modulo n: with the ring
   * cleared, any origin works. */
  s->total = first_frame;
  s->next_out = first_frame;
  s->last_end = first_frame;
  s->next_window = sattn_schedule_first (&s->sc, first_frame);
  return SATTN_OK;
}

uint64_t
sattn_stream_frames (const SattnStream *s)
{
  return s ? s->total : 0;
}

SattnStatus
sattn_stream_set_invalid_policy (SattnStream *s, SattnInvalidPolicy policy)
{
  if (s == NULL || policy > SATTN_INVALID_ERROR)
    return SATTN_E_INVAL;
  s->sc.invalid_policy = policy;
  return SATTN_OK;
}

SattnStatus
sattn_stream_error_frame (const SattnStream *s, uint64_t *index,
                          SattnFrameFault *fault)
{
  if (s == NULL || !s->have_error)
    return SATTN_E_INVAL;
  if (index)
    *index = s->err_frame;
  if (fault)
    *fault = s->err_fault;
  return SATTN_OK;
}

uint64_t
sattn_stream_skip_lead (const SattnStream *s)
{
  return s != NULL ? s->ops->skip_lead (s->ex) : 0;
}

/* Skipping a GAP in closed form: the lead frames stored as masked (the
 * executor computes their windows), then every window of masked frames
 * accounted for without computing it: its rows are zeros with valid = 0,
 * its weights zeros, and it counts n masked keys. */
SattnStatus
sattn_stream_skip (SattnStream *s, uint64_t n_frames, float *out,
                   size_t out_rows, SattnRowInfo *info, size_t *n_rows,
                   SattnSkipped *skipped)
{
  if (n_rows)
    *n_rows = 0;
  if (skipped)
    memset (skipped, 0, sizeof (*skipped));
  /* The frame counter (and the ring's virtual index, n ahead) must not
   * wrap. */
  if (s == NULL || skipped == NULL)
    return SATTN_E_INVAL;
  if (s->total > UINT64_MAX - s->n || n_frames > UINT64_MAX - s->n - s->total)
    return SATTN_E_INVAL;

  uint64_t lead = sattn_stream_skip_lead (s);
  size_t k = (size_t) (n_frames < lead ? n_frames : lead);
  /* max_rows (s, 0) counts what a drain would emit: with no lead frames
   * the call writes nothing. */
  size_t need = k > 0 ? sattn_stream_max_rows (s, k) : 0;
  if (need > 0 && out == NULL)
    return SATTN_E_INVAL;
  if (out_rows < need)
    return SATTN_E_SPACE;

  const size_t n = s->n;
  n_frames -= k;
  size_t produced = k > 0 ? s->ops->push_masked (s->ex, k, out, info) : 0;
  if (n_rows)
    *n_rows = produced;
  if (n_frames == 0)
    return SATTN_OK;

  const uint64_t t = s->total, end = t + n_frames;
  const uint64_t w = sattn_schedule_due (s->next_window, s->h, end);
  if (w > 0) {
    const uint64_t last = sattn_schedule_last (s->next_window, s->h, w);
    size_t rows = s->wkeep_win_rows; /* query rows of the last window */
    if (s->sc.output == SATTN_OUTPUT_FRAMES) {
      rows = (size_t) (w > 1 ? s->h : last - s->next_out);
      skipped->first = s->next_out;
      skipped->rows = last - s->next_out;
      s->next_out = last;
    } else {
      skipped->first = s->last_end;
      skipped->rows = w;
    }
    skipped->end = last;
    s->last_end = last;
    s->next_window = sattn_schedule_next (last, s->h);
    s->have_window = 1;
    if (s->wkeep) {
      memset (s->wkeep, 0, s->heads * rows * s->wkeep_cols * sizeof (float));
      s->wkeep_rows = rows;
    }
    if (s->sc.collect_stats) {
      s->stats.windows += w;
      s->stats.masked_keys += w * n;
    }
  }
  s->ops->forget (s->ex, end, n_frames);
  s->total = end;
  s->pos0 = sattn_pos_rebase (s->pos0, end);
  s->stats.invalid_frames += n_frames;
  if (s->sc.collect_stats)
    s->stats.frames += n_frames;
  return SATTN_OK;
}
