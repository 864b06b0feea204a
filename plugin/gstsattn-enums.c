/* The sattn element's enum types (registered once, marked as plugin API
 * by class_init) and the nicks its messages name values by.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-enums.h"

GType
gst_sattn_output_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_OUTPUT_FRAMES, "One output frame per input frame", "frames"},
    {GST_SATTN_OUTPUT_WINDOW,
        "All rows of each window flattened into one output frame", "window"},
    {GST_SATTN_OUTPUT_MEAN, "Mean of the valid rows of each window", "mean"},
    {GST_SATTN_OUTPUT_LAST, "Row of the last frame of each window", "last"},
    {GST_SATTN_OUTPUT_CLASSES,
          "Class probabilities of each window (a whole model with a head)",
        "classes"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnOutput", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_sattn_positions_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_POSITIONS_NONE, "No positional encoding", "none"},
    {GST_SATTN_POSITIONS_ROPE,
        "Rotary, half-split pairs (GPT-NeoX, LLaMA rotate_half)", "rope"},
    {GST_SATTN_POSITIONS_ROPE_INTERLEAVED,
          "Rotary, interleaved pairs 2k, 2k+1 (RoFormer, GPT-J)",
        "rope-interleaved"},
    {GST_SATTN_POSITIONS_ALIBI, "Linear biases (ALiBi, Press et al.)",
        "alibi"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnPositions", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

const gchar *
gst_sattn_positions_nick (GstSattnPositions p)
{
  GEnumValue *v = g_enum_get_value (g_type_class_peek
      (GST_TYPE_SATTN_POSITIONS), p);
  return v ? v->value_nick : "?";
}

const gchar *
gst_sattn_output_nick (GstSattnOutput o)
{
  static const gchar *nicks[] = { "frames", "window", "mean", "last",
    "classes"
  };

  return (guint) o < G_N_ELEMENTS (nicks) ? nicks[o] : "?";
}

GType
gst_sattn_activation_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_ACTIVATION_RELU, "ReLU", "relu"},
    {GST_SATTN_ACTIVATION_GELU, "GELU, exact (erf) form", "gelu"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnActivation", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_sattn_start_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_START_PAD,
        "Compute from the first hop, frames before the start masked", "pad"},
    {GST_SATTN_START_WAIT, "Compute the first window once it is full",
        "wait"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnStart", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_sattn_precision_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_PRECISION_EXACT,
          "V and the output projection (and Q and K in encoder layers and with "
          "RoPE) summed in double: error at or below PyTorch float32's",
        "exact"},
    {GST_SATTN_PRECISION_FAST,
        "Every projection summed in float, as PyTorch float32 does: faster, "
          "error about PyTorch float32's", "fast"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnPrecision", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_sattn_contract_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_CONTRACT_ENFORCE,
        "A stream whose rate, channels or frame size contradicts the "
          "model's input contract is refused, naming both", "enforce"},
    {GST_SATTN_CONTRACT_WARN,
        "Such a stream runs, with a warning naming both", "warn"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnContract", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

GType
gst_sattn_invalid_frames_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_SATTN_INVALID_FRAMES_MASK,
        "Masked: never a key, its own output row is zeros", "mask"},
    {GST_SATTN_INVALID_FRAMES_ZERO,
        "Replaced by an all-zero frame that takes part normally", "zero"},
    {GST_SATTN_INVALID_FRAMES_ERROR, "Stop with an element error", "error"},
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnInvalidFrames", values);
    g_once_init_leave (&type, t);
  }
  return type;
}
