/* The stream schedule, the one home of its arithmetic: when a window is
 * due and which frames it covers.  The front end (stream.c) keeps the
 * frame count `total` and the count `next_window` at which the next window
 * is due (SattnStream), which both executors advance; these functions are
 * all any of them computes from them.
 *
 * A window covers the last `window` frames and is due every `hop` new
 * frames.  After a start or reset at frame `first`, the first window is
 * due after `hop` frames (start=pad: the frames before the start are
 * padding, masked) or after a whole window (start=wait).  After a window
 * due at frame count e, the next is due at e + hop.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_STREAM_SCHEDULE_H
#define SATTN_STREAM_SCHEDULE_H

#include "model/model.h"

/* The frame count at which the first window after a start (or reset) at
 * frame `first` is due. */
static inline uint64_t
sattn_schedule_first (const SattnStreamConfig *sc, uint64_t first)
{
  return first + (sc->start == SATTN_START_WAIT ? sc->window : sc->hop);
}

/* How many windows are due by the frame count `end`, the next of them at
 * next_window. */
static inline uint64_t
sattn_schedule_due (uint64_t next_window, size_t hop, uint64_t end)
{
  return end < next_window ? 0 : (end - next_window) / hop + 1;
}

/* The frame count at which the last of w >= 1 due windows, the first at
 * next_window, ends. */
static inline uint64_t
sattn_schedule_last (uint64_t next_window, size_t hop, uint64_t w)
{
  return next_window + (w - 1) * hop;
}

/* The frame count at which the window after one ending at `end` is
 * due. */
static inline uint64_t
sattn_schedule_next (uint64_t end, size_t hop)
{
  return end + hop;
}

/* RoPE's position origin after a GAP skipped in closed form, the stream
 * now at frame count `end` with every key before it masked.  RoPE
 * scores depend on offsets only, so any origin gives the same scores;
 * angles are exact for positions below 2^53 (sattn_rope_qk).  While the
 * count stays below 2^52 the origin stays (positions are the frame
 * indices, as a push of the same frames would give); at or beyond it, the
 * origin moves to `end`: the next frame turns as frame 0 does, and the
 * rows after the GAP are those of the same frames at the stream start. */
#define SATTN_POS_REBASE (UINT64_C (1) << 52)

static inline uint64_t
sattn_pos_rebase (uint64_t pos0, uint64_t end)
{
  return end - pos0 >= SATTN_POS_REBASE ? end : pos0;
}

#endif
