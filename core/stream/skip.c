/* The incremental executor's part of skipping a GAP in closed form
 * (sattn_stream_skip in stream.c): the lead frames stored as invalid and
 * their windows emitted, then the slots of the frames skipped cleared.
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
store_invalid (SattnInc *s, size_t cnt, uint64_t p0)
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
clear_frames (SattnInc *s, uint64_t f0, size_t cnt)
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
sattn_inc_skip_lead (const void *e)
{
  const SattnInc *s = e;
  const size_t n = s->n;
  const uint8_t *ok = s->vring_ok + (size_t) (s->fe->total % n);

  /* After the last usable frame of the window, n more frames bring a
   * window that ends after it (windows come at most n frames apart), and
   * every later window holds only invalid frames. */
  for (size_t i = n; i > 0; i--)
    if (ok[i - 1])
      return i;
  return 0;
}

/* The lead: frames whose windows still hold usable frames, as push
 * computes them. */
size_t
sattn_inc_push_masked (void *e, size_t k, float *out, SattnRowInfo *info)
{
  SattnInc *s = e;
  SattnStream *fe = s->fe;
  const size_t n = s->n, rf = fe->row_floats;
  size_t produced = 0;
  while (k > 0) {
    size_t cnt = sattn_inc_next_chunk (s, k);
    store_invalid (s, cnt, fe->total + n);
    fe->stats.invalid_frames += cnt;
    fe->total += cnt;
    if (fe->sc.collect_stats)
      fe->stats.frames += cnt;
    k -= cnt;
    if (fe->total == fe->next_window)
      produced += sattn_inc_emit_window (s, out + produced * rf,
                                         info ? info + produced : NULL);
  }
  return produced;
}

void
sattn_inc_forget (void *e, uint64_t end, uint64_t cnt)
{
  SattnInc *s = e;
  const size_t k = (size_t) (cnt < s->n ? cnt : s->n);
  clear_frames (s, end - k, k);
}
