/* The per-window executor (stream/whole.c): the stream API of sattn.h
 * for whole models.  stream.c checks the arguments and dispatches here
 * when the model is a whole model.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_STREAM_WHOLE_H
#define SATTN_STREAM_WHOLE_H

#include "model/model.h"

typedef struct SattnPw SattnPw;

/* The rules for sc (after the common ones of stream.c). */
SattnStatus sattn_pw_check (const SattnModel *m, const SattnStreamConfig *sc,
                            char *err, size_t err_len);
size_t sattn_pw_bytes (const SattnModel *m, const SattnStreamConfig *sc);
SattnPw *sattn_pw_new (const SattnModel *m, const SattnStreamConfig *sc);
void sattn_pw_free (SattnPw *s);
void sattn_pw_reset (SattnPw *s);
void sattn_pw_reset_at (SattnPw *s, uint64_t first_frame);
size_t sattn_pw_row_floats (const SattnPw *s);
size_t sattn_pw_pending (const SattnPw *s);
uint64_t sattn_pw_frames_to_window (const SattnPw *s);
size_t sattn_pw_window_rows (const SattnPw *s, int drain);
size_t sattn_pw_max_rows (const SattnPw *s, size_t n_frames);
/* out / info have room (checked by the caller). */
SattnStatus sattn_pw_push (SattnPw *s, const float *frames, size_t n_frames,
                           const uint8_t *valid, float *out, SattnRowInfo *info,
                           SattnRowCheck *checks, size_t *n_rows);
SattnStatus sattn_pw_drain (SattnPw *s, float *out, SattnRowInfo *info,
                            SattnRowCheck *checks, size_t *n_rows);
uint64_t sattn_pw_frames (const SattnPw *s);
void sattn_pw_set_invalid_policy (SattnPw *s, SattnInvalidPolicy policy);
SattnStatus sattn_pw_error_frame (const SattnPw *s, uint64_t *index,
                                  SattnFrameFault *fault);
void sattn_pw_get_stats (SattnPw *s, SattnStats *out, int clear);
SattnStatus sattn_pw_last_weights (const SattnPw *s, int head, float *out,
                                   size_t *rows, size_t *cols);
void sattn_pw_weights_size (const SattnPw *s, size_t *rows, size_t *cols);
uint64_t sattn_pw_skip_lead (const SattnPw *s);
SattnStatus sattn_pw_skip (SattnPw *s, uint64_t n_frames, float *out,
                           SattnRowInfo *info, size_t *n_rows,
                           SattnSkipped *skipped);

#endif
