/* Private to the sattn element: the instance struct and the types and
 * functions that its files share: gstsattn.c (GObject, state changes,
 * the stream set up for caps), gstsattn-props.c (properties),
 * gstsattn-caps.c (caps, negotiation, the sink queries),
 * gstsattn-model.c (models and their input contract), gstsattn-memory.c
 * (the memory budget, the element's buffers), gstsattn-swap.c (weights
 * swaps) and gstsattn-feed.c (timeline, output, chain, events).  Not
 * installed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef GST_SATTN_PRIV_H
#define GST_SATTN_PRIV_H

#include <gst/gst.h>
#include <gst/audio/audio.h>

#include "gstsattn-enums.h"
#include "gstsattn-obs.h"
#include "gstsattn-meta-priv.h"
#include "gstsattn-swap.h"
#include "gstsattn-classes.h"
#include "gstsattn-time.h"
#include "sattn/sattn-weights.h"

G_BEGIN_DECLS

#define GST_TYPE_SATTN (gst_sattn_get_type ())
G_DECLARE_FINAL_TYPE (GstSattn, gst_sattn, GST, SATTN, GstElement)

G_GNUC_INTERNAL GST_DEBUG_CATEGORY_EXTERN (gst_sattn_debug);
#define GST_CAT_DEFAULT gst_sattn_debug

#define MAX_WINDOW 65536
#define MAX_FRAME_SIZE 65536
#define MAX_HEADS 4096
#define MAX_THREADS 256
/* Largest frame (channels × frame-size floats) the element accepts. */
#define MAX_D_MODEL (1u << 20)

/* Output buffers are sized for at most this many input frames. */
#define GST_SATTN_OUT_FRAMES 16384

/* Settings copied from the properties when caps arrive. */
typedef struct
{
  guint window, hop, frame_size, heads, head_dim, lookback;
  guint value_dim;              /* per-head value size; 0 = head-dim */
  gboolean heads_set;           /* heads set explicitly; else the weights
                                   file's metadata says (or 1) */
  gdouble scale;
  gboolean causal;
  GstSattnOutput output;
  GstSattnStart start;
  gint threads;
  GstSattnPrecision precision;
  GstSattnPositions positions;
  gdouble rope_base;
  GstSattnActivation activation;
  gboolean norm_first;
  gdouble norm_eps;
  guint set_by_user;            /* SATTN_SET_* bits (sattn-weights.h) of
                                   the options set explicitly */
  guint geom_set;               /* GST_SATTN_SET_* bits: geometry set
                                   explicitly (else the model's contract
                                   gives it, when it records one) */
  GstSattnContract contract;
  gdouble min_probability;      /* < 0: the model's (else 0) */
  SattnModelContract model_contract;    /* the model's, all 0 when none:
                                           set by gst_sattn_settings_take */
} GstSattnSettings;

/* GstSattnSettings.geom_set bits. */
enum
{
  GST_SATTN_SET_WINDOW = 1 << 0,
  GST_SATTN_SET_HOP = 1 << 1,
  GST_SATTN_SET_FRAME_SIZE = 1 << 2,
};

struct _GstSattn
{
  GstElement parent;

  GstPad *sinkpad;
  GstPad *srcpad;
  /* Health messages, warnings and the attn request pad (attention map);
   * see gstsattn-obs.h for which lock guards what. */
  GstSattnObs obs;

  /* Properties; object lock. */
  GstSattnSettings props;
  GstSattnInvalidFrames invalid_frames;
  gchar *weights;               /* safetensors path; NULL = identity */
  gchar *weights_prefix;        /* module prefix inside the state dict */
  gchar *labels;                /* labels file (output=classes); NULL =
                                   the model's own */
  guint top_k;                  /* labels and probabilities per message */
  gboolean meta_structure;      /* also attach the window metadata as a
                                   GstCustomMeta (gstsattn-meta.h) */
  gboolean add_zero_attn;
  gboolean running;             /* PAUSED or PLAYING: geometry frozen */
  guint64 weights_d_model;      /* E of the weights file checked at
                                   READY->PAUSED; 0 = not known */
  GstCaps *posted_caps;         /* last caps refused with an error posted */
  GArray *pending_props;        /* GstSattnPendingProp set while running */
  GstClockTime held_time;       /* latency added; NONE before caps */
  GstClockTime alignment_threshold;     /* as audiobuffersplit's */
  GstClockTime discont_wait;    /* as audiobuffersplit's */
  SattnModelContract contract;  /* the input contract of the weights file
                                   read at READY -> PAUSED (all 0 when
                                   none); object lock */
  SattnModel *wmodel;           /* the model of the weights file, built
                                   (through the cache) when the file is
                                   read at READY -> PAUSED; caps with the
                                   file's d_model take a reference on it.
                                   Released at PAUSED -> READY */
  SattnConfig wcfg;             /* its configuration */
  gchar *wkey;                  /* its file and prefix, "path\nprefix" */

  /* Streaming state; streaming thread (or state change with pads off). */
  GstSattnSettings cfg;         /* settings of the current model */
  SattnModel *model;
  gchar *model_key;             /* file and prefix it was built from as
                                   set_caps saw them (NULL: identity) */
  SattnStream *stream;
  GstCaps *sink_caps;
  gboolean caps_refused;        /* last caps event could not be used */
  GstCaps *refused_caps;        /* those caps: refused once, posted once */
  gint rate, channels;
  gsize bpf;                    /* bytes per sample period */
  gsize d_model, frame_bytes, row_floats;
  gsize chunk;                  /* frames per core call */

  guint8 *carry;                /* < one frame of bytes, float aligned */
  gsize carry_len;
  gboolean carry_invalid;
  float *scratch;               /* chunk × d_model: realigned input */
  float *zeros;                 /* chunk × d_model zeros */
  guint8 *invalid_flags;        /* chunk zeros */
  SattnRowInfo *info;
  SattnRowCheck *checks;        /* info_cap: each row's contract check */
  gsize info_cap;
  /* Windows outside the model's input contract since the last warning
   * (rate-limited, gstsattn-feed.c). */
  guint64 outside_windows, outside_total;
  GstClockTime outside_warned;  /* running time of the last warning */
  SattnRowCheck outside_last;   /* the last such window's check */

  GstSegment segment;
  GstSegment in_segment;        /* as received, before the TIME conversion */
  GstEvent *pending_segment;    /* held until the source caps are set */
  GstClockTime resync_ts;       /* T0; NONE = taken from the next input */
  guint64 bytes_since_resync;
  guint64 frames_since_resync;
  guint64 out_offset;
  gboolean discont_pending;
  /* Discontinuity detection on the input's own timestamps; the output
   * timeline stays the frame counter's. */
  GstAudioStreamAlign *align;
  /* Source caps other/tensors: one row per buffer, each with the
   * timestamps of its own input frames (kept in out_info). */
  gboolean tensor_out;
  SattnRowInfo *out_info;
  gsize out_info_cap;
  SattnStreamConfig stream_config;      /* what the stream was made with */

  /* output=classes: labels and sattn-class messages (streaming). */
  GstSattnClasses classes;

  /* Weights swap while running; see gstsattn-swap.h. */
  GstSattnSwap swap;
};

/* The element's buffers for one stream configuration. */
typedef struct
{
  guint8 *carry;
  float *scratch, *zeros;
  guint8 *invalid_flags;
  SattnRowInfo *info;
  SattnRowCheck *checks;
  gsize info_cap;
  SattnRowInfo *out_info;       /* tensor output: rows of one buffer */
  gsize out_info_cap;
} GstSattnScratch;

/* gstsattn-props.c */

G_GNUC_INTERNAL
void gst_sattn_props_install (GObjectClass * gobject_class);
G_GNUC_INTERNAL
void gst_sattn_props_init (GstSattn * self);
G_GNUC_INTERNAL
void gst_sattn_props_clear (GstSattn * self);
/* At PAUSED -> READY (running cleared): the values set while running
 * that had to wait for READY are applied. */
G_GNUC_INTERNAL
void gst_sattn_apply_deferred (GstSattn * self);

/* gstsattn.c */

G_GNUC_INTERNAL
void gst_sattn_free_stream (GstSattn * self);

/* gstsattn-caps.c */

#define GST_SATTN_UNSUPPORTED_CAPS "Unsupported input caps; sattn takes " \
    "audio/x-raw, format=" GST_AUDIO_NE (F32) ", layout=interleaved with " \
    "a rate and a channel count"

/* Rate and channels of input caps the element can read at all (fixed
 * audio/x-raw, native-endian F32, interleaved); FALSE otherwise. */
G_GNUC_INTERNAL
gboolean gst_sattn_parse_caps (GstCaps * caps, gint * rate, gint * channels);
/* Checks the settings c against a stream of rate / channels (d_model =
 * channels x frame-size; weights: a weights file is set); on failure
 * posts an element error that says what would work. */
G_GNUC_INTERNAL
gboolean gst_sattn_validate (GstSattn * self, const GstSattnSettings * c,
    gint rate, gint channels, guint64 d_model, gboolean weights);
/* The source caps downstream takes for stream (of the settings c, for
 * input caps sinkcaps of rate / channels) and whether they are
 * other/tensors; NULL after posting the error that says why. */
G_GNUC_INTERNAL
GstCaps *gst_sattn_pick_src_caps (GstSattn * self, const GstSattnSettings * c,
    gint rate, gint channels, const SattnStream * stream, GstCaps * sinkcaps,
    gboolean * tensors);
G_GNUC_INTERNAL
gboolean gst_sattn_check_upstream (GstSattn * self);
G_GNUC_INTERNAL
gboolean gst_sattn_check_downstream (GstSattn * self);
G_GNUC_INTERNAL
gboolean gst_sattn_sink_query (GstPad * pad, GstObject * parent,
    GstQuery * query);

/* gstsattn-model.c */

/* The settings c with the model's input contract k: frame-size, window
 * and hop the user did not set taken from it (hop at most the window),
 * k kept in c->model_contract. */
G_GNUC_INTERNAL
void gst_sattn_settings_take (GstSattnSettings * c,
    const SattnModelContract * k);
/* What a model is built from, read with the object lock held: the
 * settings (with the contract of the file read at READY), the weights
 * file and prefix (copies to g_free) and add-zero-attn; returns their
 * weights key (NULL without a file). */
G_GNUC_INTERNAL
gchar *gst_sattn_model_inputs (GstSattn * self, GstSattnSettings * c,
    gchar ** wpath, gchar ** wprefix, gboolean * zero_attn);
/* Why a stream of rate / channels contradicts the input contract in
 * c->model_contract under contract=enforce (a sentence to g_free, naming
 * both values and the way out), or NULL. */
G_GNUC_INTERNAL
gchar *gst_sattn_explain_contract (const GstSattnSettings * c, gint rate,
    gint channels);
/* Why a stream of rate, channels and c's frame-size contradicts the input
 * contract k under c's contract mode (a sentence to g_free), or NULL. */
G_GNUC_INTERNAL
gchar *gst_sattn_contract_misfit (const GstSattnSettings * c,
    const SattnModelContract * k, gint rate, gint channels);
/* contract=warn: the warnings for a stream that contradicts the model's
 * input contract (which enforce refuses). */
G_GNUC_INTERNAL
void gst_sattn_check_trained_for (GstSattn * self,
    const GstSattnSettings * c, gint rate, gint channels);
/* output=classes: the labels of model's classes into *labels (g_strfreev
 * them); FALSE after posting the error that says why. */
G_GNUC_INTERNAL
gboolean gst_sattn_take_labels (GstSattn * self, const SattnModel * model,
    gchar *** labels);

/* The core's configurations from the settings c for d_model-value frames
 * (the one place the element maps its settings onto them). */
G_GNUC_INTERNAL
void gst_sattn_core_config (const GstSattnSettings * c, guint64 d_model,
    SattnConfig * mc, SattnStreamConfig * sc);
/* The one loader's options for the settings c and frames of d_model
 * values (0 = the file's). */
G_GNUC_INTERNAL
void gst_sattn_load_options (const GstSattnSettings * c, guint64 d_model,
    gboolean zero_attn, SattnLoadOptions * o);
/* The model of the weights file (path, prefix) for the settings c, through
 * the one loader and the cache (release with gst_sattn_cache_release);
 * NULL with *status and err (the loader's words) on failure.  Thread-safe:
 * the swap's loader thread calls it too. */
G_GNUC_INTERNAL
SattnModel *gst_sattn_model_from_file (const gchar * path,
    const gchar * prefix, const GstSattnSettings * c, guint64 d_model,
    gboolean zero_attn, SattnStatus * status, gchar * err, gsize err_len);
/* The element error for a weights file (path) that could not be used for
 * d_model-value frames (0: before caps), with the loader's status and
 * words. */
G_GNUC_INTERNAL
void gst_sattn_weights_error (GstSattn * self, SattnStatus st,
    const gchar * path, guint64 d_model, const gchar * err);
/* gst_sattn_model_from_file, posting the element error that names the
 * file and what is wrong with it on failure. */
G_GNUC_INTERNAL
SattnModel *gst_sattn_load_model (GstSattn * self, const gchar * path,
    const gchar * prefix, guint64 d_model, const GstSattnSettings * c,
    gboolean zero_attn);
/* The positions and encoder-layer options of c into mc. */
G_GNUC_INTERNAL
void gst_sattn_layer_config (const GstSattnSettings * c, SattnConfig * mc);
G_GNUC_INTERNAL
gboolean gst_sattn_prepare_weights (GstSattn * self);
/* The key of the weights file path under prefix ("path\nprefix"; NULL
 * for identity projections, path NULL), as the element records it with
 * the model built from it; a new string. */
G_GNUC_INTERNAL
gchar *gst_sattn_weights_key (const gchar * path, const gchar * prefix);
/* The file and prefix of key (NULL, NULL for identity projections). */
G_GNUC_INTERNAL
void gst_sattn_weights_key_split (const gchar * key, gchar ** path,
    gchar ** prefix);

/* gstsattn-memory.c (and gstsattn-memory.h) */

/* Frames handed to the core per call for the settings c and
 * d_model-value frames. */
G_GNUC_INTERNAL
gsize gst_sattn_chunk_frames (const GstSattnSettings * c, guint64 d_model);
/* Before allocating a stream of model with sc: whether it and the
 * element's own buffers fit in what the process can have; posts the
 * element error that gives the sizes when not. */
G_GNUC_INTERNAL
gboolean gst_sattn_check_memory (GstSattn * self, const SattnModel * model,
    const SattnStreamConfig * sc, const GstSattnSettings * c,
    guint64 d_model, gsize chunk);
/* The element's buffers for chunk frames of d_model values per core call
 * into sc; FALSE (nothing allocated) after posting an error naming the
 * size that could not be had. */
G_GNUC_INTERNAL
gboolean gst_sattn_alloc_scratch (GstSattn * self, GstSattnScratch * sc,
    const GstSattnSettings * c, guint64 d_model, gsize chunk);
G_GNUC_INTERNAL
void gst_sattn_scratch_clear (GstSattnScratch * sc);

/* gstsattn-swap.c (streaming thread) */

/* Start loading the weights set while running, if they were. */
G_GNUC_INTERNAL
void gst_sattn_swap_poll (GstSattn * self);
/* Before a core call of n frames: hand over to a loaded model at a window
 * boundary; returns how many frames the call may take (up to the next
 * window while a model waits for the boundary). */
G_GNUC_INTERNAL
gsize gst_sattn_swap_step (GstSattn * self, gsize n);
/* n frames went to the core (frames NULL: zeros; valid NULL: all valid
 * when frames is given, all invalid when not). */
G_GNUC_INTERNAL
void gst_sattn_swap_record (GstSattn * self, const float *frames,
    const guint8 * valid, guint64 n);
/* The stream was reset. */
G_GNUC_INTERNAL
void gst_sattn_swap_reset (GstSattn * self);

/* gstsattn-swap.c (any thread) */

/* Caps while the weights properties ask for another file (wpath, wprefix)
 * than the one of the model in use (in_use): the rule of a swap applied
 * to caps (see gstsattn-swap.c).  prepared: the requested file's model
 * read at READY (a reference taken over), or NULL.  Returns a reference,
 * or NULL after posting an error; *reverted when the request was refused
 * and the model in use goes on. */
G_GNUC_INTERNAL
SattnModel *gst_sattn_swap_caps_request (GstSattn * self,
    const GstSattnSettings * c, guint64 d_model, const gchar * wpath,
    const gchar * wprefix, gboolean zero_attn, SattnModel * prepared,
    const gchar * in_use, gboolean * reverted);

/* The warning for weights (path, prefix) that cannot replace the running
 * model, saying why. */
G_GNUC_INTERNAL
void gst_sattn_swap_warn (GstSattn * self, const gchar * path,
    const gchar * prefix, const gchar * why);
/* After a refused request for (path, prefix): the weights properties
 * name the file in use again (in_use: its weights key, NULL = identity
 * projections), if they still ask for the refused one; notifies. */
G_GNUC_INTERNAL
void gst_sattn_swap_revert (GstSattn * self, const gchar * path,
    const gchar * prefix, const gchar * in_use);

/* gstsattn-feed.c */

/* Where the sample counter says the next input byte lies in time (NONE
 * before a timeline started). */
G_GNUC_INTERNAL
GstClockTime gst_sattn_expected_ts (GstSattn * self);
/* Start a new timeline at ts (NONE: the segment start, else 0). */
G_GNUC_INTERNAL
void gst_sattn_start_timeline (GstSattn * self, GstClockTime ts);
/* Make the discontinuity detector take ts as where the next n_samples
 * samples lie, with no discontinuity pending. */
G_GNUC_INTERNAL
void gst_sattn_align_restart (GstSattn * self, GstClockTime ts,
    guint64 n_samples);
/* Push rows for every frame the stream holds, then end the health
 * messages' timeline. */
G_GNUC_INTERNAL
GstFlowReturn gst_sattn_drain (GstSattn * self);
/* Forget what is held and the timeline (FLUSH_STOP, READY -> PAUSED). */
G_GNUC_INTERNAL
void gst_sattn_flush (GstSattn * self);
G_GNUC_INTERNAL
GstFlowReturn gst_sattn_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buffer);
/* The sink events of the data path: all but CAPS (gstsattn.c). */
G_GNUC_INTERNAL
gboolean gst_sattn_feed_event (GstPad * pad, GstObject * parent,
    GstEvent * event);

/* Read by every file that hands frames or a stream configuration to the
 * core. */

/* Timestamp of input frame f (counted since the last resync). */
static inline GstClockTime
gst_sattn_frame_ts (GstSattn * self, guint64 f)
{
  return gst_sattn_time_of_frame (self->resync_ts, f, self->cfg.frame_size,
      self->rate);
}

/* The invalid-frames property (it may change while PLAYING). */
static inline GstSattnInvalidFrames
gst_sattn_get_policy (GstSattn * self)
{
  GstSattnInvalidFrames policy;

  GST_OBJECT_LOCK (self);
  policy = self->invalid_frames;
  GST_OBJECT_UNLOCK (self);
  return policy;
}

G_END_DECLS

#endif /* GST_SATTN_PRIV_H */
