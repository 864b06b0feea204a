/* Prints, as JSON, the size and the field offsets of every public struct
 * the Python package mirrors with ctypes (python/sattn/_lib.py), and of
 * the float64 reference's structs the Python tests mirror
 * (tests/python/common.py), and the values of the enums the package
 * names, as this compiler lays them out from the headers.
 * tests/python/test_layout.py compares them with the mirrors: a field
 * added, removed, retyped or moved in sattn.h or reference.h without the
 * same change in the mirror fails there (a renamed one fails here, at
 * compile time).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <sattn/sattn.h>
#include <sattn/sattn-weights.h>

#include "reference.h"

#include <stddef.h>
#include <stdio.h>

#define FIELD(T, f) \
  printf ("%s\"%s\": [%zu, %zu]", first ? "" : ", ", #f, offsetof (T, f), \
          sizeof (((T *) 0)->f)), first = 0
#define BEGIN(T) \
  printf ("%s\"%s\": {\"size\": %zu, \"fields\": {", nstruct++ ? ",\n" : "", \
          #T, sizeof (T)), first = 1
#define END() printf ("}}")
#define ENUM(e) printf ("%s\"%s\": %d", first ? "" : ", ", #e, (int) (e)), \
  first = 0

int
main (void)
{
  int first, nstruct = 0;

  printf ("{\"structs\": {\n");
  BEGIN (SattnConfig);
  FIELD (SattnConfig, struct_size);
  FIELD (SattnConfig, d_model);
  FIELD (SattnConfig, heads);
  FIELD (SattnConfig, d_head);
  FIELD (SattnConfig, d_value);
  FIELD (SattnConfig, d_out);
  FIELD (SattnConfig, scale);
  FIELD (SattnConfig, causal);
  FIELD (SattnConfig, lookback);
  FIELD (SattnConfig, positions);
  FIELD (SattnConfig, rope_base);
  FIELD (SattnConfig, encoder);
  FIELD (SattnConfig, d_ff);
  FIELD (SattnConfig, activation);
  FIELD (SattnConfig, norm_first);
  FIELD (SattnConfig, norm_eps);
  END ();
  BEGIN (SattnWeights);
  FIELD (SattnWeights, struct_size);
  FIELD (SattnWeights, wq);
  FIELD (SattnWeights, bq);
  FIELD (SattnWeights, wk);
  FIELD (SattnWeights, bk);
  FIELD (SattnWeights, wv);
  FIELD (SattnWeights, bv);
  FIELD (SattnWeights, wo);
  FIELD (SattnWeights, bo);
  FIELD (SattnWeights, bias_k);
  FIELD (SattnWeights, bias_v);
  FIELD (SattnWeights, add_zero_attn);
  FIELD (SattnWeights, w1);
  FIELD (SattnWeights, b1);
  FIELD (SattnWeights, w2);
  FIELD (SattnWeights, b2);
  FIELD (SattnWeights, norm1_w);
  FIELD (SattnWeights, norm1_b);
  FIELD (SattnWeights, norm2_w);
  FIELD (SattnWeights, norm2_b);
  END ();
  BEGIN (SattnStats);
  FIELD (SattnStats, windows);
  FIELD (SattnStats, frames);
  FIELD (SattnStats, rows);
  FIELD (SattnStats, masked_keys);
  FIELD (SattnStats, invalid_frames);
  FIELD (SattnStats, overflow_frames);
  FIELD (SattnStats, overflow_rows);
  FIELD (SattnStats, fully_masked_rows);
  FIELD (SattnStats, nonfinite_scores);
  FIELD (SattnStats, saturated_rows);
  FIELD (SattnStats, score_min);
  FIELD (SattnStats, score_max);
  FIELD (SattnStats, lse_min);
  FIELD (SattnStats, lse_max);
  FIELD (SattnStats, max_weight_sum);
  FIELD (SattnStats, entropy_sum);
  END ();
  BEGIN (SattnMask);
  FIELD (SattnMask, key_valid);
  FIELD (SattnMask, query_valid);
  FIELD (SattnMask, allow);
  END ();
  BEGIN (SattnStreamConfig);
  FIELD (SattnStreamConfig, struct_size);
  FIELD (SattnStreamConfig, window);
  FIELD (SattnStreamConfig, hop);
  FIELD (SattnStreamConfig, output);
  FIELD (SattnStreamConfig, start);
  FIELD (SattnStreamConfig, collect_stats);
  FIELD (SattnStreamConfig, saturation_threshold);
  FIELD (SattnStreamConfig, keep_weights);
  FIELD (SattnStreamConfig, invalid_policy);
  FIELD (SattnStreamConfig, threads);
  FIELD (SattnStreamConfig, precision);
  END ();
  BEGIN (SattnRowInfo);
  FIELD (SattnRowInfo, first);
  FIELD (SattnRowInfo, n_frames);
  FIELD (SattnRowInfo, valid);
  FIELD (SattnRowInfo, window_end);
  FIELD (SattnRowInfo, valid_keys);
  FIELD (SattnRowInfo, masked_keys);
  FIELD (SattnRowInfo, fully_masked);
  END ();
  BEGIN (SattnModelContract);
  FIELD (SattnModelContract, recorded);
  FIELD (SattnModelContract, sample_rate);
  FIELD (SattnModelContract, channels);
  FIELD (SattnModelContract, frame_size);
  FIELD (SattnModelContract, window);
  FIELD (SattnModelContract, hop);
  FIELD (SattnModelContract, min_probability);
  FIELD (SattnModelContract, input_rms_lo);
  FIELD (SattnModelContract, input_rms_hi);
  FIELD (SattnModelContract, pooled_z_max);
  END ();
  BEGIN (SattnRowCheck);
  FIELD (SattnRowCheck, in_contract);
  FIELD (SattnRowCheck, outside);
  FIELD (SattnRowCheck, reserved);
  FIELD (SattnRowCheck, input_rms);
  FIELD (SattnRowCheck, pooled_z);
  END ();
  BEGIN (SattnAttnReport);
  FIELD (SattnAttnReport, layout);
  FIELD (SattnAttnReport, heads_from);
  FIELD (SattnAttnReport, d_head_from);
  FIELD (SattnAttnReport, d_value_from);
  FIELD (SattnAttnReport, q_bias);
  FIELD (SattnAttnReport, k_bias);
  FIELD (SattnAttnReport, v_bias);
  FIELD (SattnAttnReport, out_proj);
  FIELD (SattnAttnReport, out_bias);
  FIELD (SattnAttnReport, bias_kv);
  END ();
  BEGIN (SattnLoadOptions);
  FIELD (SattnLoadOptions, struct_size);
  FIELD (SattnLoadOptions, cfg);
  FIELD (SattnLoadOptions, add_zero_attn);
  FIELD (SattnLoadOptions, set);
  END ();
  BEGIN (SattnLoadReport);
  FIELD (SattnLoadReport, struct_size);
  FIELD (SattnLoadReport, kind);
  FIELD (SattnLoadReport, layout);
  FIELD (SattnLoadReport, heads_from);
  FIELD (SattnLoadReport, layers);
  FIELD (SattnLoadReport, encoder);
  FIELD (SattnLoadReport, out_proj);
  FIELD (SattnLoadReport, classes);
  END ();
  BEGIN (RefModel);
  FIELD (RefModel, d_model);
  FIELD (RefModel, heads);
  FIELD (RefModel, d_head);
  FIELD (RefModel, d_value);
  FIELD (RefModel, d_out);
  FIELD (RefModel, scale);
  FIELD (RefModel, causal);
  FIELD (RefModel, lookback);
  FIELD (RefModel, wq);
  FIELD (RefModel, bq);
  FIELD (RefModel, wk);
  FIELD (RefModel, bk);
  FIELD (RefModel, wv);
  FIELD (RefModel, bv);
  FIELD (RefModel, wo);
  FIELD (RefModel, bo);
  FIELD (RefModel, bias_k);
  FIELD (RefModel, bias_v);
  FIELD (RefModel, add_zero_attn);
  FIELD (RefModel, f32_scores);
  FIELD (RefModel, positions);
  FIELD (RefModel, rope_base);
  FIELD (RefModel, pos0);
  END ();
  BEGIN (RefStats);
  FIELD (RefStats, rows);
  FIELD (RefStats, fully_masked);
  FIELD (RefStats, nonfinite);
  FIELD (RefStats, score_min);
  FIELD (RefStats, score_max);
  FIELD (RefStats, lse_min);
  FIELD (RefStats, lse_max);
  FIELD (RefStats, max_weight_sum);
  FIELD (RefStats, entropy_sum);
  FIELD (RefStats, saturated);
  FIELD (RefStats, sat_lo);
  FIELD (RefStats, sat_hi);
  FIELD (RefStats, sat_margin);
  FIELD (RefStats, sat_threshold);
  END ();
  printf ("},\n\"enums\": {");
  first = 1;
  ENUM (SATTN_OK);
  ENUM (SATTN_E_INVAL);
  ENUM (SATTN_E_SHAPE);
  ENUM (SATTN_E_NOMEM);
  ENUM (SATTN_E_NONFINITE);
  ENUM (SATTN_E_SPACE);
  ENUM (SATTN_E_IO);
  ENUM (SATTN_E_FORMAT);
  ENUM (SATTN_E_MISSING);
  ENUM (SATTN_E_DTYPE);
  ENUM (SATTN_OUTPUT_FRAMES);
  ENUM (SATTN_OUTPUT_WINDOW);
  ENUM (SATTN_OUTPUT_MEAN);
  ENUM (SATTN_OUTPUT_LAST);
  ENUM (SATTN_OUTPUT_CLASSES);
  ENUM (SATTN_START_PAD);
  ENUM (SATTN_START_WAIT);
  ENUM (SATTN_INVALID_MASK);
  ENUM (SATTN_INVALID_ZERO);
  ENUM (SATTN_INVALID_ERROR);
  ENUM (SATTN_PRECISION_EXACT);
  ENUM (SATTN_PRECISION_FAST);
  ENUM (SATTN_FRAME_OK);
  ENUM (SATTN_FRAME_FLAGGED);
  ENUM (SATTN_FRAME_NONFINITE);
  ENUM (SATTN_FRAME_OVERFLOW);
  ENUM (SATTN_FROM_CALLER);
  ENUM (SATTN_FROM_METADATA);
  ENUM (SATTN_FROM_SHAPES);
  ENUM (SATTN_FROM_DEFAULT);
  ENUM (SATTN_POSITIONS_NONE);
  ENUM (SATTN_POSITIONS_ROPE);
  ENUM (SATTN_POSITIONS_ROPE_INTERLEAVED);
  ENUM (SATTN_POSITIONS_ALIBI);
  ENUM (SATTN_ACTIVATION_RELU);
  ENUM (SATTN_ACTIVATION_GELU);
  ENUM (SATTN_MODEL_LAYER);
  ENUM (SATTN_MODEL_WHOLE);
  ENUM (SATTN_POOLING_MEAN);
  ENUM (SATTN_POOLING_LAST);
  ENUM (SATTN_POOLING_MAX);
  ENUM (SATTN_POOLING_CLS);
  ENUM (SATTN_POOLING_ATTENTION);
  ENUM (SATTN_CONTRACT_SAMPLE_RATE);
  ENUM (SATTN_CONTRACT_CHANNELS);
  ENUM (SATTN_CONTRACT_FRAME_SIZE);
  ENUM (SATTN_CONTRACT_WINDOW);
  ENUM (SATTN_CONTRACT_HOP);
  ENUM (SATTN_CONTRACT_MIN_PROBABILITY);
  ENUM (SATTN_CONTRACT_INPUT_RMS);
  ENUM (SATTN_CONTRACT_POOLED_Z);
  ENUM (SATTN_OUTSIDE_RMS_LOW);
  ENUM (SATTN_OUTSIDE_RMS_HIGH);
  ENUM (SATTN_OUTSIDE_FEATURES);
  ENUM (SATTN_SET_ACTIVATION);
  ENUM (SATTN_SET_NORM_FIRST);
  ENUM (SATTN_SET_NORM_EPS);
  ENUM (SATTN_SET_POSITIONS);
  ENUM (SATTN_SET_ROPE_BASE);
  ENUM (SATTN_SET_CAUSAL);
  printf ("},\n\"enum_size\": %zu,\n\"version_major\": %d}\n",
      sizeof (SattnStatus), SATTN_VERSION_MAJOR);
  return 0;
}
