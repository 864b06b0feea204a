/* The stream's front end and its executors (the stream folder's private
 * header).  stream.c is the front end of the stream API of sattn.h: it
 * checks the configuration and the arguments, and holds what every
 * executor shares (SattnStream: the schedule, the error state, the
 * statistics, the row geometry and the last window's weights).  An
 * executor does the work of the windows behind one ops table
 * (SattnExecOps), chosen once when the stream is created:
 *
 *   incremental (incremental.h, incremental-ops.c, incremental.c,
 *     skip.c)  an attention or encoder layer, each frame projected once
 *              into rings the windows share;
 *   whole (whole.c)  a whole model (SATTN_MODEL_WHOLE), each window one
 *              sequence through the model.
 *
 * The front end calls an executor through its table only; an executor
 * reads and advances the shared state through its back pointer
 * (SattnStream *fe) and never calls the front end back.
 *
 * The kernel table (cpu/isa.c) is not a field here: it is chosen once
 * per process, at the first kernel call, from the CPU's features capped
 * by SATTN_SIMD, and stays the same after (only tests switch it, with
 * sattn_simd_force), so every window of every stream runs on one table
 * from creation to free -- what a pointer taken when the stream is
 * created would guarantee.  Holding it here would mean passing it to
 * every function of nn/ and of cpu/ that calls a kernel.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_STREAM_STREAM_H
#define SATTN_STREAM_STREAM_H

#include "model/model.h"
#include "stream/schedule.h"

typedef struct SattnExecOps SattnExecOps;

struct SattnStream {
  const SattnExecOps *ops; /* the executor, chosen once */
  void *ex;                /* its state */
  SattnStreamConfig sc;    /* as checked; saturation_threshold resolved */
  size_t n, h;             /* window, hop */
  size_t heads;            /* the model's */
  size_t row_floats;       /* floats of one output row */
  /* The schedule (schedule.h): frames since reset, RoPE's position
   * origin (frame f turns by f - pos0, see sattn_pos_rebase), the first
   * frame without a row (frames mode), the frame count at the last window
   * and the one at which the next is due. */
  uint64_t total, pos0, next_out, last_end, next_window;
  int have_window;
  /* A push stopped at err_frame. */
  int have_error;
  uint64_t err_frame;
  SattnFrameFault err_fault;
  SattnStats stats;
  uint64_t overflow_parts[SATTN_PART_COUNT]; /* stats.overflow_rows by
                                     part (the incremental executor's
                                     encoder rows); cleared with stats */
  /* keep_weights: the last window's weights, heads × wkeep_rows ×
   * wkeep_cols, allocated and written by the executor: rows for at most
   * wkeep_max_rows queries, wkeep_win_rows of them for a window outside
   * frames mode. */
  float *wkeep;
  size_t wkeep_rows, wkeep_cols, wkeep_max_rows, wkeep_win_rows;
};

/* An executor's operations.  `e` is the executor's state (SattnStream.ex);
 * the front end has checked the arguments and the output room
 * (sattn_stream_max_rows) before calling. */
struct SattnExecOps {
  const char *name;
  /* The executor's rules for sc, after the front end's. */
  SattnStatus (*check) (const SattnModel *m, const SattnStreamConfig *sc,
                        char *err, size_t err_len);
  /* SATTN_OK when the executor's memory can be counted (else
   * SATTN_E_NOMEM with a message); its bytes, 0 when they cannot. */
  SattnStatus (*fits) (const SattnModel *m, const SattnStreamConfig *sc,
                       char *err, size_t err_len);
  size_t (*bytes) (const SattnModel *m, const SattnStreamConfig *sc);
  /* The executor's state for fe (whose sc, n and h are set); sets
   * fe->row_floats and the weights' geometry.  NULL with *st set on
   * failure. */
  void *(*create) (SattnStream *fe, const SattnModel *m, SattnStatus *st);
  void (*destroy) (void *e);
  /* Forget every frame (the front end resets the schedule). */
  void (*reset) (void *e);
  /* Store n_frames frames and emit the windows they complete; a frame
   * the policy ERROR refuses stops the push (SATTN_E_NONFINITE). */
  SattnStatus (*push) (void *e, const float *frames, size_t n_frames,
                       const uint8_t *valid, float *out, SattnRowInfo *info,
                       SattnRowCheck *checks, size_t *n_rows);
  /* Emit the partial window (frames pending); returns the rows. */
  size_t (*drain) (void *e, float *out, SattnRowInfo *info,
                   SattnRowCheck *checks);
  /* Rows of the next window (of a drain). */
  size_t (*window_rows) (const void *e, int drain);
  /* Skipping (sattn_stream_skip): frames after which every window holds
   * only masked frames; cnt masked frames stored and their windows
   * emitted; the frames [end - cnt, end) forgotten, cnt <= any. */
  uint64_t (*skip_lead) (const void *e);
  size_t (*push_masked) (void *e, size_t cnt, float *out, SattnRowInfo *info);
  void (*forget) (void *e, uint64_t end, uint64_t cnt);
  /* The mean over heads of the last window's weights (fe->wkeep). */
  void (*weights_mean) (const void *e, float *out);
};

extern const SattnExecOps sattn_exec_incremental;
extern const SattnExecOps sattn_exec_whole;

#endif
