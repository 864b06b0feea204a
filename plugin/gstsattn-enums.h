/* The sattn element's enum types (the values of its enum properties,
 * which match the core's where the core has them) and the nicks its
 * messages name values by (gstsattn-enums.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_ENUMS_H
#define GST_SATTN_ENUMS_H

#include <gst/gst.h>

#include "sattn/sattn.h"

G_BEGIN_DECLS

/**
 * GstSattnOutput:
 * @GST_SATTN_OUTPUT_FRAMES: one output frame per input frame
 * @GST_SATTN_OUTPUT_WINDOW: all rows of each window in one output frame
 * @GST_SATTN_OUTPUT_MEAN: the mean of the valid rows of each window
 * @GST_SATTN_OUTPUT_LAST: the row of the last frame of each window
 * @GST_SATTN_OUTPUT_CLASSES: a whole model's class probabilities, one row
 *   per window
 */
typedef enum {
  GST_SATTN_OUTPUT_FRAMES = SATTN_OUTPUT_FRAMES,
  GST_SATTN_OUTPUT_WINDOW = SATTN_OUTPUT_WINDOW,
  GST_SATTN_OUTPUT_MEAN = SATTN_OUTPUT_MEAN,
  GST_SATTN_OUTPUT_LAST = SATTN_OUTPUT_LAST,
  GST_SATTN_OUTPUT_CLASSES = SATTN_OUTPUT_CLASSES,
} GstSattnOutput;

/**
 * GstSattnStart:
 * @GST_SATTN_START_PAD: compute from the first hop, missing frames masked
 * @GST_SATTN_START_WAIT: compute the first window once it is full
 */
typedef enum {
  GST_SATTN_START_PAD = SATTN_START_PAD,
  GST_SATTN_START_WAIT = SATTN_START_WAIT,
} GstSattnStart;

/**
 * GstSattnPrecision:
 * @GST_SATTN_PRECISION_EXACT: V and the output projection (and Q and K in
 *   encoder layers and with RoPE) summed in double: error at or below
 *   PyTorch float32's
 * @GST_SATTN_PRECISION_FAST: every projection summed in float, as PyTorch
 *   float32 does: faster, error about PyTorch float32's
 */
typedef enum {
  GST_SATTN_PRECISION_EXACT = SATTN_PRECISION_EXACT,
  GST_SATTN_PRECISION_FAST = SATTN_PRECISION_FAST,
} GstSattnPrecision;

/**
 * GstSattnInvalidFrames:
 * @GST_SATTN_INVALID_FRAMES_MASK: never a key; its own output row is zeros
 * @GST_SATTN_INVALID_FRAMES_ZERO: replaced by an all-zero (valid) frame
 * @GST_SATTN_INVALID_FRAMES_ERROR: stop with an element error
 *
 * What happens to an input frame that contains NaN or Inf samples, or
 * whose query/key/value projection overflows float32 with the loaded
 * weights.  Frames of GAP buffers and events are always masked.  An
 * output row that overflows later (the output projection, or an encoder
 * layer's LayerNorm, feed-forward or residual sum) is zeros under every
 * policy, error included.  The values match the core's
 * #SattnInvalidPolicy.
 */
typedef enum {
  GST_SATTN_INVALID_FRAMES_MASK = 0,
  GST_SATTN_INVALID_FRAMES_ZERO,
  GST_SATTN_INVALID_FRAMES_ERROR,
} GstSattnInvalidFrames;

/**
 * GstSattnPositions:
 * @GST_SATTN_POSITIONS_NONE: no positional encoding
 * @GST_SATTN_POSITIONS_ROPE: rotary, half-split pairs (GPT-NeoX, LLaMA)
 * @GST_SATTN_POSITIONS_ROPE_INTERLEAVED: rotary, pairs 2k, 2k+1 (RoFormer,
 *   GPT-J)
 * @GST_SATTN_POSITIONS_ALIBI: linear biases of Press et al.
 *
 * Positional encoding at the absolute frame index (frames since stream
 * start or the last reset).  The values match the core's #SattnPositions.
 */
typedef enum {
  GST_SATTN_POSITIONS_NONE = SATTN_POSITIONS_NONE,
  GST_SATTN_POSITIONS_ROPE = SATTN_POSITIONS_ROPE,
  GST_SATTN_POSITIONS_ROPE_INTERLEAVED = SATTN_POSITIONS_ROPE_INTERLEAVED,
  GST_SATTN_POSITIONS_ALIBI = SATTN_POSITIONS_ALIBI,
} GstSattnPositions;

/**
 * GstSattnActivation:
 * @GST_SATTN_ACTIVATION_RELU: max (x, 0)
 * @GST_SATTN_ACTIVATION_GELU: exact GELU, x/2 (1 + erf (x / sqrt 2))
 *
 * Feed-forward activation of an encoder layer.
 */
typedef enum {
  GST_SATTN_ACTIVATION_RELU = SATTN_ACTIVATION_RELU,
  GST_SATTN_ACTIVATION_GELU = SATTN_ACTIVATION_GELU,
} GstSattnActivation;

/**
 * GstSattnContract:
 * @GST_SATTN_CONTRACT_ENFORCE: a stream whose rate, channel count or frame
 *   size contradicts the model's input contract is refused, naming both
 * @GST_SATTN_CONTRACT_WARN: such a stream runs, with a warning that names
 *   both (the model then sees a signal it was not trained on)
 *
 * What the element does with a whole model's input contract (the
 * sample_rate, channels and frame_size its file records; docs/models.md).
 * Windows outside the contract's statistics are flagged either way.
 */
typedef enum {
  GST_SATTN_CONTRACT_ENFORCE = 0,
  GST_SATTN_CONTRACT_WARN,
} GstSattnContract;

#define GST_TYPE_SATTN_CONTRACT (gst_sattn_contract_get_type ())
GType gst_sattn_contract_get_type (void);
#define GST_TYPE_SATTN_POSITIONS (gst_sattn_positions_get_type ())
GType gst_sattn_positions_get_type (void);
#define GST_TYPE_SATTN_ACTIVATION (gst_sattn_activation_get_type ())
GType gst_sattn_activation_get_type (void);
#define GST_TYPE_SATTN_OUTPUT (gst_sattn_output_get_type ())
GType gst_sattn_output_get_type (void);
#define GST_TYPE_SATTN_START (gst_sattn_start_get_type ())
GType gst_sattn_start_get_type (void);
#define GST_TYPE_SATTN_PRECISION (gst_sattn_precision_get_type ())
GType gst_sattn_precision_get_type (void);
#define GST_TYPE_SATTN_INVALID_FRAMES (gst_sattn_invalid_frames_get_type ())
GType gst_sattn_invalid_frames_get_type (void);

/* The nick of a value, for messages ("?" for none). */
G_GNUC_INTERNAL
const gchar *gst_sattn_positions_nick (GstSattnPositions p);
G_GNUC_INTERNAL
const gchar *gst_sattn_output_nick (GstSattnOutput o);

G_END_DECLS

#endif /* GST_SATTN_ENUMS_H */
