/* Skipping a GAP in closed form (sattn_stream_skip): the lead frames
 * pushed as invalid, then every window of invalid frames accounted for
 * without computing it.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "stream/incremental.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ skipping */

/* Store cnt invalid frames (no wrap) at virtual index p0: what
 * store_frames does for frames flagged invalid, without projecting. */
static void
store_invalid (SattnStream *s, size_t cnt, uint64_t p0)
{
  const SattnModel *m = s->m;
  const size_t dq = m->dq, dv = m->dv, n = s->n;
  size_t slot = (size_t) (p0 % n);

  for (size_t copy = 0; copy < 2; copy++) {
    size_t sl = slot + copy * n;
    if (s->qhs) {
      const size_t dh = m->cfg.d_head, dvh = m->cfg.d_value;
      for (size_t h = 0; h < m->cfg.heads; h++) {
        memset (s->qring + h * s->qhs + sl * dh, 0, cnt * dh * sizeof (float));
        memset (s->vring + h * s->vhs + sl * dvh, 0,
                cnt * dvh * sizeof (float));
      }
    } else {
      memset (s->qring + sl * dq, 0, cnt * dq * sizeof (float));
      memset (s->vring + sl * dv, 0, cnt * dv * sizeof (float));
    }
    memset (s->vring_ok + sl, 0, cnt);
    for (size_t t = 0; t < dq; t++)
      memset (s->ktring + t * s->ldkt + sl, 0, cnt * sizeof (float));
  }
}

/* Zero the slots of the frames [f0, f0 + cnt), cnt <= n, with wrap. */
static void
clear_frames (SattnStream *s, uint64_t f0, size_t cnt)
{
  const size_t n = s->n;
  uint64_t p = f0 + n;

  while (cnt > 0) {
    size_t room = n - (size_t) (p % n);
    size_t k = cnt < room ? cnt : room;
    store_invalid (s, k, p);
    p += k;
    cnt -= k;
  }
}

uint64_t
sattn_stream_skip_lead (const SattnStream *s)
{
  if (s == NULL)
    return 0;
  if (s->pw != NULL)
    return sattn_pw_skip_lead (s->pw);
  const size_t n = s->n;
  const uint8_t *ok = s->vring_ok + (size_t) (s->total % n);

  /* After the last usable frame of the window, n more frames bring a
   * window that ends after it (windows come at most n frames apart), and
   * every later window holds only invalid frames. */
  for (size_t i = n; i > 0; i--)
    if (ok[i - 1])
      return i;
  return 0;
}

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
  if (s->pw != NULL) {
    const uint64_t t = sattn_pw_frames (s->pw);
    if (t > UINT64_MAX - s->sc.window ||
        n_frames > UINT64_MAX - s->sc.window - t)
      return SATTN_E_INVAL;
    uint64_t lead = sattn_pw_skip_lead (s->pw);
    size_t k = (size_t) (n_frames < lead ? n_frames : lead);
    size_t need = k > 0 ? sattn_pw_max_rows (s->pw, k) : 0;
    if (need > 0 && out == NULL)
      return SATTN_E_INVAL;
    if (out_rows < need)
      return SATTN_E_SPACE;
    size_t got = 0;
    SattnStatus pst = sattn_pw_skip (s->pw, n_frames, out, info, &got, skipped);
    if (n_rows)
      *n_rows = got;
    return pst;
  }
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

  const size_t n = s->n, rf = sattn_stream_row_floats (s);
  size_t produced = 0;

  /* The lead: frames whose windows still hold usable frames, as push
   * computes them. */
  n_frames -= k;
  while (k > 0) {
    size_t cnt = sattn_inc_next_chunk (s, k);
    store_invalid (s, cnt, s->total + n);
    s->stats.invalid_frames += cnt;
    s->total += cnt;
    if (s->sc.collect_stats)
      s->stats.frames += cnt;
    k -= cnt;
    if (s->total == s->next_window)
      produced += sattn_inc_emit_window (s, out + produced * rf,
                                         info ? info + produced : NULL);
  }
  if (n_rows)
    *n_rows = produced;
  if (n_frames == 0)
    return SATTN_OK;

  /* The rest in closed form: every window ending in it holds only
   * invalid frames, so its rows are zeros with valid = 0, its weights
   * zeros, and it counts n masked keys. */
  const uint64_t t = s->total, end = t + n_frames;
  const uint64_t w = sattn_schedule_due (s->next_window, s->h, end);
  const uint64_t last = w > 0 ? sattn_schedule_last (s->next_window, s->h, w)
                              : 0;
  if (w > 0) {
    size_t rows; /* query rows of the last window */
    if (s->sc.output == SATTN_OUTPUT_FRAMES) {
      rows = (size_t) (w > 1 ? s->h : last - s->next_out);
      skipped->first = s->next_out;
      skipped->rows = last - s->next_out;
      s->next_out = last;
    } else {
      rows = s->sc.output == SATTN_OUTPUT_LAST ? 1 : n;
      skipped->first = s->last_end;
      skipped->rows = w;
    }
    skipped->end = last;
    s->last_end = last;
    s->next_window = sattn_schedule_next (last, s->h);
    s->have_window = 1;
    if (s->wkeep) {
      memset (s->wkeep, 0, s->m->cfg.heads * rows * s->ncols * sizeof (float));
      s->wkeep_rows = rows;
    }
    if (s->sc.collect_stats) {
      s->stats.windows += w;
      s->stats.masked_keys += w * n;
    }
  }
  clear_frames (s, end - (n_frames < n ? n_frames : n),
                (size_t) (n_frames < n ? n_frames : n));
  s->total = end;
  s->pos0 = sattn_pos_rebase (s->pos0, end);
  s->stats.invalid_frames += n_frames;
  if (s->sc.collect_stats)
    s->stats.frames += n_frames;
  return SATTN_OK;
}
