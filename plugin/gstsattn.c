/* GStreamer sattn element
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */

/**
 * SECTION:element-sattn
 * @title: sattn
 *
 * Sliding-window multi-head self-attention on a live signal.  The element
 * cuts the incoming interleaved float samples into frames, gathers the
 * frames into windows of #GstSattn:window frames, one every #GstSattn:hop
 * frames, runs masked scaled-dot-product self-attention over each window
 * and pushes the resulting feature rows downstream as float audio.
 *
 * A frame is #GstSattn:frame-size consecutive sample periods of all
 * channels, taken in memory order, so d_model = channels × frame-size.
 * Without a weights file the projections are the identity (Q = K = V = the
 * frames split into #GstSattn:heads heads): every output row is then a
 * similarity-weighted average of the frames of its window, a non-local
 * means smoother that is meaningful on any signal.
 *
 * ## Output
 *
 * The source caps are `audio/x-raw, format=F32LE, layout=interleaved` with
 * an unpositioned channel layout (`channel-mask=0`), shaped by
 * #GstSattn:output (d_out = d_model here, rates in Hz):
 *
 * - `frames`: one output frame of d_out channels per input frame,
 *   rate = input rate / frame-size.
 * - `window`: one output frame of window × d_out channels per window,
 *   rate = input rate / (frame-size × hop).
 * - `mean`, `last`: one output frame of d_out channels per window, the
 *   mean of the valid rows or the last frame's row,
 *   rate = input rate / (frame-size × hop).
 *
 * An output rate that is not a whole number, or a combination of
 * properties that cannot work with the input (hop > window, heads not
 * dividing d_model, a weights file of another d_model, ...), fails
 * negotiation with one element error that names the property values that
 * would work: at READY -> PAUSED when nothing upstream offers can work,
 * otherwise when ACCEPT_CAPS refuses the caps (before the caps event).
 * In PAUSED and PLAYING the sink CAPS query answers rates that are
 * multiples of frame-size (× hop in the pooled modes) and channel counts
 * that fill whole heads (or the weights file's d_model); in NULL and
 * READY, while properties may still change, it answers the template.
 * Refused caps leave the element as it was: when the previous caps come
 * back, window and timeline continue.  When downstream refuses the output
 * caps, the error names them and what downstream accepts.
 *
 * Geometry properties (all but #GstSattn:invalid-frames,
 * #GstSattn:message-interval and #GstSattn:map-head) set while PAUSED or
 * PLAYING take effect at the next READY; the first such change of each
 * property per run posts a warning.
 *
 * Memory is sized when caps arrive: the core's stream
 * (sattn_stream_bytes) plus the element's own buffers.  A configuration
 * that needs more than the process can have (the headroom below
 * RLIMIT_AS / RLIMIT_DATA, or the machine's physical memory) is refused
 * with a `RESOURCE / NO_SPACE_LEFT` error that gives the sizes
 * (`SATTN_MEMORY_CHECK=0` in the environment turns the check off).  Every
 * allocation is fallible: a failure posts the same error with the size
 * that could not be had and fails negotiation or the push
 * (`GST_FLOW_ERROR`), never aborts the process.
 *
 * ## Timing
 *
 * Output timestamps come from a frame counter since the last resync point:
 * PTS = T0 + first_frame × frame-size / rate, where T0 is the timestamp of
 * the first buffer after start, a flush, a discontinuity or a caps change,
 * and first_frame is the first input frame the output accounts for.
 * DURATION reaches exactly to the next buffer's PTS, OFFSET / OFFSET_END
 * count output frames since the resync point.  A buffer flagged DISCONT or
 * whose timestamp is more than half a frame or 40 ms (whichever is larger)
 * away from the counter makes the element drain what it holds, restart
 * the window and flag its next output DISCONT.  A FLUSH_STOP drops what
 * is held instead; a caps change drains it under the old caps.  An
 * incomplete frame left at a drain is dropped.
 *
 * Within a segment output time never goes back and never wraps: a buffer
 * stamped behind the counter by more than the threshold restarts the
 * window (DISCONT) but its frames keep the counter's timestamps, and
 * every input frame still gets its output; timestamps saturate at the
 * last valid clock time (G_MAXUINT64 - 1) instead of wrapping.
 * A SEGMENT that changes the timeline (format, rate, applied rate, start,
 * base or offset, or stop when the rate is negative, compared as received
 * in its own format) drains what is held
 * before the segment goes downstream and restarts the window at the next
 * buffer.  A SEGMENT that changes only position, duration, time or flags
 * (what sources send after a flush, or as position updates) is forwarded
 * and changes nothing: the window, the timeline and the PTS of
 * untimestamped input continue.  Output segments are always TIME, like
 * the output timestamps: BYTES and DEFAULT (sample) segments are
 * converted with the input rate, other formats become a TIME segment
 * from 0; input buffer timestamps are TIME in every case.
 *
 * The LATENCY query adds what the element holds back:
 * held × frame-size / rate, with held = #GstSattn:hop frames, or
 * #GstSattn:window frames when #GstSattn:start is `wait`, in every output
 * mode.
 *
 * ## Gaps and invalid samples
 *
 * GAP events and buffers flagged GAP become frames that are masked keys;
 * their output rows are still produced (as zeros in `frames` mode) and an
 * output buffer whose rows are all invalid is flagged GAP.  Of a GAP event
 * only the part after the counter counts: one that ends before it adds
 * nothing, one without a duration adds nothing, one ahead of it by more
 * than the threshold resyncs as a buffer would.  Once a GAP has pushed
 * every usable frame out of the window, the rest of it is not computed:
 * its rows (all zeros) go downstream as one GAP event whose span is
 * exactly the frames they account for, and offsets and timestamps after
 * it continue as if the rows had been pushed, so a GAP of any length
 * costs O(window).  Frames with NaN
 * or Inf samples, and finite frames whose query/key/value projection
 * overflows float32 with the loaded weights, are handled by
 * #GstSattn:invalid-frames (`error` names the frame, its time and the
 * cause); overflowed projections also post a warning, at most one per
 * 10 s of stream time.  An output row whose output projection overflows
 * is zeros (a buffer of only such rows is flagged GAP), with the same kind
 * of warning, so finite input never gives a non-finite output.  At EOS the
 * element drains, so that in `frames` mode every input frame gets exactly
 * one output frame.
 *
 * ## Numeric health and the attention map
 *
 * With #GstSattn:post-messages the element computes, in the softmax's own
 * pass, statistics of every window and posts them as an element message
 * named `sattn` (one per window, or per #GstSattn:message-interval of
 * stream time, always whole windows, after the features they describe;
 * the remainder at EOS).  Fields: `timestamp`, `stream-time`,
 * `running-time`, `duration` (contiguous from message to message),
 * `windows`, `frames`, `rows` (one per head and computed query frame),
 * `masked-keys`, `invalid-frames`, `fully-masked-rows`,
 * `nonfinite-scores`, `score-min` / `score-max` (finite scaled scores),
 * `lse-min` / `lse-max` (log-sum-exp of each row's scaled scores),
 * `max-weight` (mean of each row's largest weight), `entropy` (mean row
 * entropy / log of the row's visible keys), `saturated-rows` (largest
 * weight above #GstSattn:saturation-threshold; a row with one visible key
 * counts), and `weights` with #GstSattn:message-weights.  Saturated rows
 * and non-finite scores also post a warning, at most one of each kind per
 * 10 s of stream time, that names the cause and the fix.  Per-window
 * details are logged at LOG level (`GST_DEBUG=sattn:6`).
 *
 * The `attn` request pad pushes one `video/x-raw, format=GRAY8` frame per
 * window, width = window (+ extra keys), height = the query rows of a
 * window (hop in `frames` mode, window in `window` / `mean`, 1 in `last`),
 * framerate = windows per second, with the features' timestamps; it shows
 * #GstSattn:map-head or the average of the heads.  Image row i is query
 * row rows - height + i of the window, pixel (i, j) =
 * floor (255 w[j] / max_k w[k] + 1/2): each row scaled to its own largest
 * weight.  The pad pushes from its own thread, so no queue is needed
 * after it; request it before the element receives caps.  Nothing is
 * computed for messages or maps that were not asked for.
 *
 * ## Example launch lines
 * |[
 * gst-launch-1.0 audiotestsrc num-buffers=100 ! audio/x-raw,format=F32LE,channels=8,rate=16000 ! sattn ! fakesink
 * ]| Attention over 8 sensor channels, one output frame of 8 features per
 * input sample period (64-frame windows, hop 16).
 * |[
 * gst-launch-1.0 audiotestsrc wave=pink-noise num-buffers=50 ! audio/x-raw,format=F32LE,channels=4,rate=16000 ! sattn frame-size=16 window=32 hop=8 heads=4 causal=true output=mean ! fakesink silent=false -v
 * ]| Frames of 16 sample periods × 4 channels (d_model = 64), 4 heads,
 * causal, one mean-pooled row of 64 features every 8 frames (125 Hz).
 * |[
 * gst-launch-1.0 audiotestsrc num-buffers=20 ! audio/x-raw,format=F32LE,channels=2,rate=8000 ! sattn window=16 hop=4 output=window start=wait ! fakesink
 * ]| Whole windows: 16 rows × 2 features = 32 channels at 500 Hz, starting
 * once the first window is full.
 * |[
 * gst-launch-1.0 -m audiotestsrc num-buffers=50 ! audio/x-raw,format=F32LE,channels=8,rate=16000 ! sattn post-messages=true message-interval=100000000 ! fakesink
 * ]| Prints a `sattn` health message every 100 ms of signal.
 * |[
 * gst-launch-1.0 audiotestsrc num-buffers=20 ! audio/x-raw,format=F32LE,channels=4,rate=16000 ! sattn name=s window=64 hop=16 ! fakesink s.attn ! videoconvert ! pngenc ! multifilesink location=map-%05d.png
 * ]| Writes the attention map of every window as a 64 × 16 PNG.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn.h"
#include "gstsattn-cache.h"
#include "gstsattn-obs.h"
#include "sattn/sattn-weights.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef G_OS_UNIX
#include <sys/resource.h>
#include <unistd.h>
#endif

GST_DEBUG_CATEGORY_STATIC (gst_sattn_debug);
#define GST_CAT_DEFAULT gst_sattn_debug

#define DEFAULT_WINDOW 64
#define DEFAULT_HOP 16
#define DEFAULT_FRAME_SIZE 1
#define DEFAULT_HEADS 1
#define DEFAULT_HEAD_DIM 0
#define DEFAULT_SCALE 0.0
#define DEFAULT_CAUSAL FALSE
#define DEFAULT_LOOKBACK 0
#define DEFAULT_OUTPUT GST_SATTN_OUTPUT_FRAMES
#define DEFAULT_START GST_SATTN_START_PAD
#define DEFAULT_INVALID_FRAMES GST_SATTN_INVALID_FRAMES_MASK
#define DEFAULT_THREADS 1

#define MAX_WINDOW 65536
#define MAX_FRAME_SIZE 65536
#define MAX_HEADS 4096
#define MAX_THREADS 256
/* Largest frame (channels × frame-size floats) the element accepts. */
#define MAX_D_MODEL (1u << 20)

/* Frames handed to the core per call; bounds the scratch memory. */
#define MIN_CHUNK_FRAMES 256
#define MAX_CHUNK_FRAMES 4096
/* Output buffers are sized for at most this many input frames, and at
 * most this many bytes unless one core call needs more. */
#define OUT_FRAMES_PER_BUFFER 16384
#define OUT_MAX_BYTES ((gsize) 64 << 20)
/* Smallest timestamp deviation treated as a discontinuity. */
#define MIN_RESYNC_THRESHOLD (GST_SECOND / 25)

enum
{
  PROP_0,
  PROP_WINDOW,
  PROP_HOP,
  PROP_FRAME_SIZE,
  PROP_HEADS,
  PROP_HEAD_DIM,
  PROP_SCALE,
  PROP_CAUSAL,
  PROP_LOOKBACK,
  PROP_OUTPUT,
  PROP_START,
  PROP_INVALID_FRAMES,
  PROP_THREADS,
  PROP_WEIGHTS,
  PROP_WEIGHTS_PREFIX,
  PROP_ADD_ZERO_ATTN,
  /* reserved for weights, weights-prefix, add-zero-attn, post-messages */
};

/* Settings copied from the properties when caps arrive. */
typedef struct
{
  guint window, hop, frame_size, heads, head_dim, lookback;
  gdouble scale;
  gboolean causal;
  GstSattnOutput output;
  GstSattnStart start;
  gint threads;
} GstSattnSettings;

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
  gboolean add_zero_attn;
  gboolean running;             /* PAUSED or PLAYING: geometry frozen */
  guint64 weights_d_model;      /* E of the weights file checked at
                                   READY->PAUSED; 0 = not known */
  GstCaps *posted_caps;         /* last caps refused with an error posted */
  GArray *pending_props;        /* GstSattnPendingProp set while running */
  GstClockTime held_time;       /* latency added; NONE before caps */

  /* Streaming state; streaming thread (or state change with pads off). */
  GstSattnSettings cfg;         /* settings of the current model */
  SattnModel *model;
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
  gsize info_cap;

  GstSegment segment;
  GstSegment in_segment;        /* as received, before the TIME conversion */
  GstEvent *pending_segment;    /* held until the source caps are set */
  GstClockTime resync_ts;       /* T0; NONE = taken from the next input */
  guint64 bytes_since_resync;
  guint64 frames_since_resync;
  guint64 out_offset;
  gboolean discont_pending;
};

/* An output buffer being filled by one or more core calls. */
typedef struct
{
  GstBuffer *buf;
  GstMapInfo map;
  gsize cap_rows, rows;
  guint64 first_frame, end_frame;
  gboolean any_valid;
} GstSattnOut;

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK,
    GST_PAD_ALWAYS,
    GST_STATIC_CAPS ("audio/x-raw, format = (string) F32LE, "
        "layout = (string) interleaved, rate = (int) [ 1, MAX ], "
        "channels = (int) [ 1, MAX ]"));

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC,
    GST_PAD_ALWAYS,
    GST_STATIC_CAPS ("audio/x-raw, format = (string) F32LE, "
        "layout = (string) interleaved, rate = (int) [ 1, MAX ], "
        "channels = (int) [ 1, MAX ]"));

#define gst_sattn_parent_class parent_class
G_DEFINE_TYPE (GstSattn, gst_sattn, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (sattn, "sattn", GST_RANK_NONE, GST_TYPE_SATTN);

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
    {0, NULL, NULL}
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstSattnOutput", values);
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

static void gst_sattn_finalize (GObject * object);
static void gst_sattn_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec);
static void gst_sattn_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec);
static GstStateChangeReturn gst_sattn_change_state (GstElement * element,
    GstStateChange transition);
static GstFlowReturn gst_sattn_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buffer);
static gboolean gst_sattn_sink_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
static gboolean gst_sattn_src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);
static gboolean gst_sattn_sink_query (GstPad * pad, GstObject * parent,
    GstQuery * query);

static void
gst_sattn_class_init (GstSattnClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS;
  const GParamFlags geom = rw | GST_PARAM_MUTABLE_READY;

  gobject_class->set_property = gst_sattn_set_property;
  gobject_class->get_property = gst_sattn_get_property;
  gobject_class->finalize = gst_sattn_finalize;

  g_object_class_install_property (gobject_class, PROP_WINDOW,
      g_param_spec_uint ("window", "Window",
          "Frames per attention window (n); keys and queries of one "
          "computation", 1, MAX_WINDOW, DEFAULT_WINDOW, geom));
  g_object_class_install_property (gobject_class, PROP_HOP,
      g_param_spec_uint ("hop", "Hop",
          "New frames between two windows (h, 1 <= hop <= window); in "
          "pooled output modes the output rate is the frame rate / hop",
          1, MAX_WINDOW, DEFAULT_HOP, geom));
  g_object_class_install_property (gobject_class, PROP_FRAME_SIZE,
      g_param_spec_uint ("frame-size", "Frame size",
          "Sample periods per frame; a frame is frame-size periods of all "
          "channels (d_model = channels x frame-size); must divide the "
          "input rate", 1, MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE, geom));
  g_object_class_install_property (gobject_class, PROP_HEADS,
      g_param_spec_uint ("heads", "Heads",
          "Attention heads; must divide d_model when head-dim is 0",
          1, MAX_HEADS, DEFAULT_HEADS, geom));
  g_object_class_install_property (gobject_class, PROP_HEAD_DIM,
      g_param_spec_uint ("head-dim", "Head dimension",
          "Per-head query/key size (0 = d_model / heads; without weights "
          "heads x head-dim must equal d_model)", 0, MAX_D_MODEL,
          DEFAULT_HEAD_DIM, geom));
  g_object_class_install_property (gobject_class, PROP_SCALE,
      g_param_spec_double ("scale", "Scale",
          "Score scale applied before the softmax (0 = 1/sqrt(head-dim), "
          "1 = unscaled); scores are float32, so a positive value below "
          "the smallest normal float (1.18e-38) is refused at negotiation",
          0.0, G_MAXFLOAT, DEFAULT_SCALE, geom));
  g_object_class_install_property (gobject_class, PROP_CAUSAL,
      g_param_spec_boolean ("causal", "Causal",
          "A query sees only keys at or before its own frame",
          DEFAULT_CAUSAL, geom));
  g_object_class_install_property (gobject_class, PROP_LOOKBACK,
      g_param_spec_uint ("lookback", "Lookback",
          "A query sees keys at most this many frames back (0 = the whole "
          "window)", 0, MAX_WINDOW, DEFAULT_LOOKBACK, geom));
  g_object_class_install_property (gobject_class, PROP_OUTPUT,
      g_param_spec_enum ("output", "Output",
          "What is pushed downstream: one row per input frame, whole "
          "windows, or one pooled row per window", GST_TYPE_SATTN_OUTPUT,
          DEFAULT_OUTPUT, geom));
  g_object_class_install_property (gobject_class, PROP_START,
      g_param_spec_enum ("start", "Start",
          "Before the first window is full: compute with the missing "
          "frames masked, or wait for a full window", GST_TYPE_SATTN_START,
          DEFAULT_START, geom));
  g_object_class_install_property (gobject_class, PROP_INVALID_FRAMES,
      g_param_spec_enum ("invalid-frames", "Invalid frames",
          "What a frame with NaN or Inf samples, or whose projection "
          "overflows float32 with the loaded weights, gets (can change "
          "while playing; GAP frames are always masked)",
          GST_TYPE_SATTN_INVALID_FRAMES, DEFAULT_INVALID_FRAMES,
          rw | GST_PARAM_MUTABLE_PLAYING));
  g_object_class_install_property (gobject_class, PROP_THREADS,
      g_param_spec_int ("threads", "Threads",
          "worker threads of the core (1 = none; 0 = one per available "
          "CPU)", 0, MAX_THREADS, DEFAULT_THREADS, geom));
  g_object_class_install_property (gobject_class, PROP_WEIGHTS,
      g_param_spec_string ("weights", "Weights",
          "safetensors file with a torch.nn.MultiheadAttention state dict "
          "(in_proj_weight or q/k/v_proj_weight, out_proj, bias_k/bias_v); "
          "NULL = identity projections.  Read and checked on READY->PAUSED "
          "and when caps arrive", NULL, geom));
  g_object_class_install_property (gobject_class, PROP_WEIGHTS_PREFIX,
      g_param_spec_string ("weights-prefix", "Weights prefix",
          "Prefix of the attention module's tensors inside a larger state "
          "dict, e.g. \"encoder.layers.0.self_attn.\"", "", geom));
  g_object_class_install_property (gobject_class, PROP_ADD_ZERO_ATTN,
      g_param_spec_boolean ("add-zero-attn", "Add zero attention",
          "Append an all-zero key and value to every window, as "
          "torch.nn.MultiheadAttention(add_zero_attn=True) does", FALSE,
          geom));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);

  gst_element_class_set_static_metadata (element_class,
      "Sliding-window self-attention", "Filter/Analyzer/Audio",
      "Masked multi-head self-attention over sliding windows of signal "
      "frames, pushing attention features",
      "sattn developers <sattn@localhost>");

  element_class->change_state = GST_DEBUG_FUNCPTR (gst_sattn_change_state);

  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_OUTPUT, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_START, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_INVALID_FRAMES, 0);

  GST_DEBUG_CATEGORY_INIT (gst_sattn_debug, "sattn", 0,
      "sliding-window self-attention");

  /* post-messages, message-interval, saturation-threshold,
   * message-weights, map-head and the attn pad template. */
  gst_sattn_obs_class_init (gobject_class, element_class,
      G_STRUCT_OFFSET (GstSattn, obs));
}

static void
gst_sattn_init (GstSattn * self)
{
  self->sinkpad = gst_pad_new_from_static_template (&sink_template, "sink");
  gst_pad_set_chain_function (self->sinkpad,
      GST_DEBUG_FUNCPTR (gst_sattn_chain));
  gst_pad_set_event_function (self->sinkpad,
      GST_DEBUG_FUNCPTR (gst_sattn_sink_event));
  gst_pad_set_query_function (self->sinkpad,
      GST_DEBUG_FUNCPTR (gst_sattn_sink_query));
  gst_element_add_pad (GST_ELEMENT (self), self->sinkpad);

  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_query_function (self->srcpad,
      GST_DEBUG_FUNCPTR (gst_sattn_src_query));
  gst_pad_use_fixed_caps (self->srcpad);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);
  gst_sattn_obs_init (&self->obs, GST_ELEMENT (self), self->sinkpad);

  self->props.window = DEFAULT_WINDOW;
  self->props.hop = DEFAULT_HOP;
  self->props.frame_size = DEFAULT_FRAME_SIZE;
  self->props.heads = DEFAULT_HEADS;
  self->props.head_dim = DEFAULT_HEAD_DIM;
  self->props.scale = DEFAULT_SCALE;
  self->props.causal = DEFAULT_CAUSAL;
  self->props.lookback = DEFAULT_LOOKBACK;
  self->props.output = DEFAULT_OUTPUT;
  self->props.start = DEFAULT_START;
  self->props.threads = DEFAULT_THREADS;
  self->invalid_frames = DEFAULT_INVALID_FRAMES;
  self->held_time = GST_CLOCK_TIME_NONE;
  self->resync_ts = GST_CLOCK_TIME_NONE;
  gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
  gst_segment_init (&self->in_segment, GST_FORMAT_UNDEFINED);
}

/* Frees the model, the stream and every buffer sized by them. */
static void
gst_sattn_free_stream (GstSattn * self)
{
  sattn_stream_free (self->stream);
  self->stream = NULL;
  gst_sattn_cache_release (self->model);
  self->model = NULL;
  g_clear_pointer (&self->carry, g_free);
  g_clear_pointer (&self->scratch, g_free);
  g_clear_pointer (&self->zeros, g_free);
  g_clear_pointer (&self->invalid_flags, g_free);
  g_clear_pointer (&self->info, g_free);
  self->info_cap = 0;
  self->carry_len = 0;
  self->carry_invalid = FALSE;
  gst_clear_caps (&self->sink_caps);
}

static void
gst_sattn_finalize (GObject * object)
{
  GstSattn *self = GST_SATTN (object);

  gst_sattn_free_stream (self);
  gst_clear_event (&self->pending_segment);
  g_free (self->weights);
  g_free (self->weights_prefix);
  gst_clear_caps (&self->refused_caps);
  gst_clear_caps (&self->posted_caps);
  if (self->pending_props)
    g_array_unref (self->pending_props);
  gst_sattn_obs_finalize (&self->obs);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* A property set while PAUSED or PLAYING, applied at the next READY. */
typedef struct
{
  guint prop_id;
  GParamSpec *pspec;
  GValue value;
  gboolean warned;
} GstSattnPendingProp;

static void
gst_sattn_pending_prop_clear (gpointer p)
{
  g_value_unset (&((GstSattnPendingProp *) p)->value);
}

/* Remember value for prop_id (object lock held).  TRUE the first time
 * this property is deferred in this run: the caller warns then. */
static gboolean
gst_sattn_defer_property (GstSattn * self, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstSattnPendingProp *p = NULL, np = { 0, };
  guint i;

  if (self->pending_props == NULL) {
    self->pending_props = g_array_new (FALSE, TRUE,
        sizeof (GstSattnPendingProp));
    g_array_set_clear_func (self->pending_props, gst_sattn_pending_prop_clear);
  }
  for (i = 0; i < self->pending_props->len && p == NULL; i++) {
    GstSattnPendingProp *q = &g_array_index (self->pending_props,
        GstSattnPendingProp, i);
    if (q->prop_id == prop_id)
      p = q;
  }
  if (p == NULL) {
    np.prop_id = prop_id;
    np.pspec = pspec;
    g_array_append_val (self->pending_props, np);
    p = &g_array_index (self->pending_props, GstSattnPendingProp,
        self->pending_props->len - 1);
  }
  if (G_IS_VALUE (&p->value))
    g_value_unset (&p->value);
  g_value_init (&p->value, G_VALUE_TYPE (value));
  g_value_copy (value, &p->value);
  if (p->warned)
    return FALSE;
  p->warned = TRUE;
  return TRUE;
}

static void gst_sattn_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec);

/* At PAUSED -> READY (running cleared): apply the deferred values. */
static void
gst_sattn_apply_deferred (GstSattn * self)
{
  GArray *pending;
  guint i;

  GST_OBJECT_LOCK (self);
  pending = self->pending_props;
  self->pending_props = NULL;
  GST_OBJECT_UNLOCK (self);
  if (pending == NULL)
    return;
  for (i = 0; i < pending->len; i++) {
    GstSattnPendingProp *p = &g_array_index (pending, GstSattnPendingProp, i);

    GST_DEBUG_OBJECT (self, "applying the deferred '%s'", p->pspec->name);
    gst_sattn_set_property (G_OBJECT (self), p->prop_id, &p->value, p->pspec);
  }
  g_array_unref (pending);
}

static void
gst_sattn_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstSattn *self = GST_SATTN (object);

  GST_OBJECT_LOCK (self);
  if (self->running && prop_id != PROP_INVALID_FRAMES &&
      !gst_sattn_obs_prop_mutable_playing (prop_id)) {
    /* Not applied half-way: the model is built from these at caps time. */
    gboolean first = gst_sattn_defer_property (self, prop_id, value, pspec);

    GST_OBJECT_UNLOCK (self);
    GST_DEBUG_OBJECT (self, "property '%s' set while running: deferred to "
        "the next READY", pspec->name);
    if (first) {
      GST_ELEMENT_WARNING (self, CORE, STATE_CHANGE,
          ("Property '%s' cannot change while PAUSED or PLAYING; the new "
              "value takes effect at the next READY", pspec->name),
          ("later changes of '%s' in this run are not reported again",
              pspec->name));
    }
    return;
  }

  switch (prop_id) {
    case PROP_WINDOW:
      self->props.window = g_value_get_uint (value);
      break;
    case PROP_HOP:
      self->props.hop = g_value_get_uint (value);
      break;
    case PROP_FRAME_SIZE:
      self->props.frame_size = g_value_get_uint (value);
      break;
    case PROP_HEADS:
      self->props.heads = g_value_get_uint (value);
      break;
    case PROP_HEAD_DIM:
      self->props.head_dim = g_value_get_uint (value);
      break;
    case PROP_SCALE:
      self->props.scale = g_value_get_double (value);
      break;
    case PROP_CAUSAL:
      self->props.causal = g_value_get_boolean (value);
      break;
    case PROP_LOOKBACK:
      self->props.lookback = g_value_get_uint (value);
      break;
    case PROP_OUTPUT:
      self->props.output = g_value_get_enum (value);
      break;
    case PROP_START:
      self->props.start = g_value_get_enum (value);
      break;
    case PROP_INVALID_FRAMES:
      self->invalid_frames = g_value_get_enum (value);
      break;
    case PROP_THREADS:
      self->props.threads = g_value_get_int (value);
      break;
    case PROP_WEIGHTS:
      g_free (self->weights);
      self->weights = g_value_dup_string (value);
      if (self->weights != NULL && self->weights[0] == '\0')
        g_clear_pointer (&self->weights, g_free);
      break;
    case PROP_WEIGHTS_PREFIX:
      g_free (self->weights_prefix);
      self->weights_prefix = g_value_dup_string (value);
      break;
    case PROP_ADD_ZERO_ATTN:
      self->add_zero_attn = g_value_get_boolean (value);
      break;
    default:
      if (!gst_sattn_obs_set_property (&self->obs, prop_id, value))
        G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
}

static void
gst_sattn_get_property (GObject * object, guint prop_id, GValue * value,
    GParamSpec * pspec)
{
  GstSattn *self = GST_SATTN (object);

  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_WINDOW:
      g_value_set_uint (value, self->props.window);
      break;
    case PROP_HOP:
      g_value_set_uint (value, self->props.hop);
      break;
    case PROP_FRAME_SIZE:
      g_value_set_uint (value, self->props.frame_size);
      break;
    case PROP_HEADS:
      g_value_set_uint (value, self->props.heads);
      break;
    case PROP_HEAD_DIM:
      g_value_set_uint (value, self->props.head_dim);
      break;
    case PROP_SCALE:
      g_value_set_double (value, self->props.scale);
      break;
    case PROP_CAUSAL:
      g_value_set_boolean (value, self->props.causal);
      break;
    case PROP_LOOKBACK:
      g_value_set_uint (value, self->props.lookback);
      break;
    case PROP_OUTPUT:
      g_value_set_enum (value, self->props.output);
      break;
    case PROP_START:
      g_value_set_enum (value, self->props.start);
      break;
    case PROP_INVALID_FRAMES:
      g_value_set_enum (value, self->invalid_frames);
      break;
    case PROP_THREADS:
      g_value_set_int (value, self->props.threads);
      break;
    case PROP_WEIGHTS:
      g_value_set_string (value, self->weights);
      break;
    case PROP_WEIGHTS_PREFIX:
      g_value_set_string (value, self->weights_prefix ? self->weights_prefix
          : "");
      break;
    case PROP_ADD_ZERO_ATTN:
      g_value_set_boolean (value, self->add_zero_attn);
      break;
    default:
      if (!gst_sattn_obs_get_property (&self->obs, prop_id, value))
        G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
}

/* ------------------------------------------------------------ timing */

/* The last valid clock time: timestamps saturate there, never wrap. */
#define GST_SATTN_TS_END (GST_CLOCK_TIME_NONE - 1)

/* ts + d (ts valid), saturated at the end of the clock's range. */
static GstClockTime
gst_sattn_ts_add (GstClockTime ts, guint64 d)
{
  return d > GST_SATTN_TS_END - ts ? GST_SATTN_TS_END : ts + d;
}

/* Timestamp of input frame f (counted since the last resync). */
static GstClockTime
gst_sattn_frame_ts (GstSattn * self, guint64 f)
{
  /* frame-size x GST_SECOND fits in 64 bits; the scale saturates at
   * G_MAXUINT64 rather than overflow. */
  return gst_sattn_ts_add (self->resync_ts, gst_util_uint64_scale (f,
          (guint64) self->cfg.frame_size * GST_SECOND, self->rate));
}

/* Where the sample counter says the next input byte lies in time. */
static GstClockTime
gst_sattn_expected_ts (GstSattn * self)
{
  if (!GST_CLOCK_TIME_IS_VALID (self->resync_ts))
    return GST_CLOCK_TIME_NONE;
  return gst_sattn_ts_add (self->resync_ts,
      gst_util_uint64_scale (self->bytes_since_resync, GST_SECOND,
          (guint64) self->rate * self->bpf));
}

/* Start a new timeline at ts (NONE: the segment start, else 0). */
static void
gst_sattn_start_timeline (GstSattn * self, GstClockTime ts)
{
  if (!GST_CLOCK_TIME_IS_VALID (ts)) {
    if (self->segment.format == GST_FORMAT_TIME)
      ts = self->segment.start;
    else
      ts = 0;
  }
  self->resync_ts = ts;
  self->bytes_since_resync = 0;
  self->frames_since_resync = 0;
  self->out_offset = 0;
  self->discont_pending = TRUE;
}

/* ------------------------------------------------------------ output */

static GstFlowReturn
gst_sattn_out_finish (GstSattn * self, GstSattnOut * out)
{
  GstBuffer *buf = out->buf;
  GstClockTime pts, end;
  gsize rows = out->rows;
  GstFlowReturn ret;

  if (buf == NULL)
    return GST_FLOW_OK;
  gst_buffer_unmap (buf, &out->map);
  out->buf = NULL;
  out->rows = 0;
  out->cap_rows = 0;

  if (rows == 0) {
    gst_buffer_unref (buf);
    return GST_FLOW_OK;
  }

  gst_buffer_set_size (buf, rows * self->row_floats * sizeof (float));
  pts = gst_sattn_frame_ts (self, out->first_frame);
  end = gst_sattn_frame_ts (self, out->end_frame);
  GST_BUFFER_PTS (buf) = pts;
  GST_BUFFER_DTS (buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION (buf) = end - pts;
  GST_BUFFER_OFFSET (buf) = self->out_offset;
  GST_BUFFER_OFFSET_END (buf) = self->out_offset + rows;
  self->out_offset += rows;
  if (self->discont_pending) {
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
    self->discont_pending = FALSE;
  }
  if (!out->any_valid)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);

  GST_LOG_OBJECT (self, "pushing %" G_GSIZE_FORMAT " rows, frames %"
      G_GUINT64_FORMAT "-%" G_GUINT64_FORMAT ", pts %" GST_TIME_FORMAT, rows,
      out->first_frame, out->end_frame, GST_TIME_ARGS (pts));
  ret = gst_pad_push (self->srcpad, buf);
  /* Health messages follow the features they describe. */
  gst_sattn_obs_pushed (&self->obs, GST_ELEMENT (self));
  return ret;
}

/* Make room for need more rows in out, pushing what it holds if full.
 * hint_frames: input frames still to come in this call, to size a new
 * output buffer. */
/* A buffer of size bytes, or NULL when there is no memory for it
 * (gst_buffer_new_allocate would abort the process). */
static GstBuffer *
gst_sattn_try_buffer_new (gsize size)
{
  gpointer mem = g_try_malloc (MAX (size, 1));

  return mem ? gst_buffer_new_wrapped (mem, size) : NULL;
}

static GstFlowReturn
gst_sattn_out_reserve (GstSattn * self, GstSattnOut * out, gsize need,
    guint64 hint_frames)
{
  GstFlowReturn ret;
  gsize cap;

  if (out->buf && out->cap_rows - out->rows >= need)
    return GST_FLOW_OK;
  ret = gst_sattn_out_finish (self, out);
  if (ret != GST_FLOW_OK)
    return ret;

  cap = sattn_stream_max_rows (self->stream,
      (gsize) MIN (hint_frames, OUT_FRAMES_PER_BUFFER));
  cap = MIN (cap, OUT_MAX_BYTES / (self->row_floats * sizeof (float)));
  cap = MAX (cap, need);
  out->buf = gst_sattn_try_buffer_new (cap * self->row_floats *
      sizeof (float));
  if (out->buf == NULL || !gst_buffer_map (out->buf, &out->map,
          GST_MAP_WRITE)) {
    gst_clear_buffer (&out->buf);
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate an output buffer of %" G_GSIZE_FORMAT " rows "
            "(%" G_GSIZE_FORMAT " bytes)", cap,
            cap * self->row_floats * sizeof (float)), (NULL));
    return GST_FLOW_ERROR;
  }
  out->cap_rows = cap;
  out->rows = 0;
  out->any_valid = FALSE;
  return GST_FLOW_OK;
}

/* Room for need row infos (sized at caps time for the largest core
 * call, so this does not allocate on the push path in practice).  Posts
 * an element error when there is no memory. */
static gboolean
gst_sattn_ensure_info (GstSattn * self, gsize need)
{
  SattnRowInfo *info;

  if (need <= self->info_cap)
    return TRUE;
  info = g_try_renew (SattnRowInfo, self->info, need);
  if (info == NULL) {
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate the descriptions of %" G_GSIZE_FORMAT
            " output rows (%" G_GSIZE_FORMAT " bytes)", need,
            need * sizeof (SattnRowInfo)), (NULL));
    return FALSE;
  }
  self->info = info;
  self->info_cap = need;
  return TRUE;
}

static void
gst_sattn_out_account (GstSattn * self, GstSattnOut * out, gsize n_rows)
{
  guint64 first, end;
  gsize i;

  if (n_rows == 0)
    return;
  if (out->rows == 0)
    out->first_frame = self->info[0].first;
  out->end_frame = self->info[n_rows - 1].first +
      self->info[n_rows - 1].n_frames;
  for (i = 0; i < n_rows && !out->any_valid; i++)
    out->any_valid = self->info[i].valid != 0;
  out->rows += n_rows;

  /* When anything is observed a core call computes at most one window
   * (gst_sattn_obs_split), so these rows are that window's. */
  first = self->info[0].first;
  end = self->info[n_rows - 1].first + self->info[n_rows - 1].n_frames;
  gst_sattn_obs_window (&self->obs, GST_ELEMENT (self), self->stream, first,
      end, gst_sattn_frame_ts (self, first), gst_sattn_frame_ts (self, end),
      &self->segment);
}

static GstFlowReturn
gst_sattn_core_error (GstSattn * self, const gchar * what, SattnStatus st)
{
  GST_ELEMENT_ERROR (self, STREAM, FAILED,
      ("The attention core failed: %s", sattn_status_string (st)),
      ("%s returned status %d", what, (int) st));
  return GST_FLOW_ERROR;
}

/* invalid-frames=error: the core stopped at a frame with bad data, having
 * consumed the frames before it (n_rows rows, the stream's frame count was
 * `before` when the call started).  Push those rows, then post the error
 * naming the frame and the core's reason. */
static GstFlowReturn
gst_sattn_bad_frame (GstSattn * self, GstSattnOut * out, guint64 before,
    gsize n_rows)
{
  guint64 idx = before, frame;
  SattnFrameFault fault = SATTN_FRAME_NONFINITE;
  GstClockTime ts;

  sattn_stream_error_frame (self->stream, &idx, &fault);
  self->frames_since_resync += idx - before;
  frame = self->frames_since_resync;
  gst_sattn_out_account (self, out, n_rows);
  gst_sattn_out_finish (self, out);

  ts = gst_sattn_frame_ts (self, frame);
  GST_ELEMENT_ERROR (self, STREAM, FORMAT,
      ("Input frame %" G_GUINT64_FORMAT " (at %" GST_TIME_FORMAT ") %s%s",
          frame, GST_TIME_ARGS (ts), sattn_frame_fault_string (fault),
          fault == SATTN_FRAME_OVERFLOW ? " with the loaded weights" : ""),
      ("invalid-frames=error; frames are counted from the last resync "
          "(start, flush, discontinuity or caps change); invalid-frames="
          "mask or zero would mask the frame or replace it by zeros"));
  return GST_FLOW_ERROR;
}

/* Hand n frames (n <= chunk) to the core and collect the rows in out.
 * When health messages or the attention map are on, the frames go in
 * pieces that end at window ends, one window per core call. */
static GstFlowReturn
gst_sattn_core_push (GstSattn * self, const float *frames, gsize n,
    const guint8 * valid, GstSattnOut * out, guint64 hint_frames)
{
  GstFlowReturn ret;
  SattnStatus st;
  gsize need, k, n_rows = 0;
  float dummy[1];
  float *dst;
  gsize room;

  need = sattn_stream_max_rows (self->stream, n);
  if (need > 0) {
    ret = gst_sattn_out_reserve (self, out, need, hint_frames);
    if (ret != GST_FLOW_OK)
      return ret;
    if (!gst_sattn_ensure_info (self, need))
      return GST_FLOW_ERROR;
  }

  while (n > 0) {
    guint64 before = sattn_stream_frames (self->stream);
    GstClockTime ts = gst_sattn_frame_ts (self, self->frames_since_resync);

    k = gst_sattn_obs_split (&self->obs, self->stream, n);
    dst = dummy;
    room = 0;
    if (need > 0) {
      dst = (float *) out->map.data + out->rows * self->row_floats;
      room = out->cap_rows - out->rows;
    }
    st = sattn_stream_push (self->stream, frames, k, valid, dst, room,
        need > 0 ? self->info : NULL, &n_rows);
    if (st == SATTN_E_NONFINITE)
      return gst_sattn_bad_frame (self, out, before, n_rows);
    if (st != SATTN_OK)
      return gst_sattn_core_error (self, "sattn_stream_push", st);
    g_assert (n_rows <= room);
    self->frames_since_resync += k;
    gst_sattn_out_account (self, out, n_rows);
    gst_sattn_obs_frames (&self->obs, GST_ELEMENT (self), self->stream, ts);
    frames += k * self->d_model;
    if (valid)
      valid += k;
    n -= k;
  }
  return GST_FLOW_OK;
}

/* Push n whole frames (NULL: zeros) that are all invalid (GAP: masked
 * under every policy), or subject to the invalid-frames policy, which the
 * core applies (set by gst_sattn_process). */
static GstFlowReturn
gst_sattn_push_frames (GstSattn * self, const float *frames, guint64 n,
    gboolean invalid, GstSattnOut * out)
{
  const gsize d = self->d_model;
  GstFlowReturn ret = GST_FLOW_OK;

  while (n > 0) {
    gsize k = (gsize) MIN (n, (guint64) self->chunk);
    const float *src = frames ? frames : self->zeros;

    ret = gst_sattn_core_push (self, src, k,
        invalid ? self->invalid_flags : NULL, out, n);
    if (ret != GST_FLOW_OK)
      return ret;
    if (frames)
      frames += k * d;
    n -= k;
  }
  return ret;
}

/* n whole masked frames of a GAP.  The first ones go through the window
 * computation while the window still holds usable frames; the core skips
 * the rest in closed form (sattn_stream_skip): their rows would all be
 * zeros flagged invalid, so they go downstream as one GAP event spanning
 * exactly the frames they account for, and the output offsets and
 * timestamps after it continue as if the rows had been pushed. */
static GstFlowReturn
gst_sattn_gap_frames (GstSattn * self, guint64 n, GstSattnOut * out)
{
  GstFlowReturn ret;
  SattnSkipped sk;
  SattnStatus st;
  guint64 lead, k;
  GstClockTime ts, end;

  lead = sattn_stream_skip_lead (self->stream);
  k = MIN (n, lead);
  if (k > 0) {
    ret = gst_sattn_push_frames (self, NULL, k, TRUE, out);
    if (ret != GST_FLOW_OK)
      return ret;
    n -= k;
  }
  if (n == 0)
    return GST_FLOW_OK;

  /* What is computed goes out first. */
  ret = gst_sattn_out_finish (self, out);
  if (ret != GST_FLOW_OK)
    return ret;
  st = sattn_stream_skip (self->stream, n, NULL, 0, NULL, NULL, &sk);
  if (st != SATTN_OK)
    return gst_sattn_core_error (self, "sattn_stream_skip", st);
  self->frames_since_resync += n;
  if (sk.rows == 0)
    return GST_FLOW_OK;

  ts = gst_sattn_frame_ts (self, sk.first);
  end = gst_sattn_frame_ts (self, sk.end);
  GST_DEBUG_OBJECT (self, "gap: %" G_GUINT64_FORMAT " masked frames "
      "skipped, %" G_GUINT64_FORMAT " rows as a GAP event at %"
      GST_TIME_FORMAT " + %" GST_TIME_FORMAT, n, sk.rows,
      GST_TIME_ARGS (ts), GST_TIME_ARGS (end - ts));
  self->out_offset += sk.rows;
  /* The skipped windows are observed as one: their statistics, one
   * attention map (all zeros) spanning them. */
  gst_sattn_obs_window (&self->obs, GST_ELEMENT (self), self->stream,
      sk.first, sk.end, ts, end, &self->segment);
  if (!gst_pad_push_event (self->srcpad, gst_event_new_gap (ts, end - ts)))
    GST_DEBUG_OBJECT (self, "downstream refused the GAP event");
  gst_sattn_obs_pushed (&self->obs, GST_ELEMENT (self));
  return GST_FLOW_OK;
}

static GstSattnInvalidFrames
gst_sattn_get_policy (GstSattn * self)
{
  GstSattnInvalidFrames policy;

  GST_OBJECT_LOCK (self);
  policy = self->invalid_frames;
  GST_OBJECT_UNLOCK (self);
  return policy;
}

/* Feed size bytes of interleaved samples (data NULL: zeros).  invalid:
 * every frame touched by these bytes is masked. */
static GstFlowReturn
gst_sattn_process (GstSattn * self, const guint8 * data, guint64 size,
    gboolean invalid, GstSattnOut * out)
{
  const gsize fb = self->frame_bytes;
  GstFlowReturn ret = GST_FLOW_OK;
  guint64 n, rest;

  G_STATIC_ASSERT ((int) GST_SATTN_INVALID_FRAMES_MASK ==
      (int) SATTN_INVALID_MASK);
  G_STATIC_ASSERT ((int) GST_SATTN_INVALID_FRAMES_ZERO ==
      (int) SATTN_INVALID_ZERO);
  G_STATIC_ASSERT ((int) GST_SATTN_INVALID_FRAMES_ERROR ==
      (int) SATTN_INVALID_ERROR);
  /* The property may change while PLAYING: the streaming thread hands it
   * to the core here, once per buffer or GAP. */
  sattn_stream_set_invalid_policy (self->stream,
      (SattnInvalidPolicy) gst_sattn_get_policy (self));

  self->bytes_since_resync += size;

  if (self->carry_len > 0) {
    gsize take = (gsize) MIN ((guint64) (fb - self->carry_len), size);

    if (data) {
      memcpy (self->carry + self->carry_len, data, take);
      data += take;
    } else {
      memset (self->carry + self->carry_len, 0, take);
    }
    self->carry_len += take;
    /* Only bytes taken in mark the frame: a 0-byte GAP buffer adds
     * nothing to it. */
    if (take > 0)
      self->carry_invalid |= invalid;
    size -= take;
    if (self->carry_len < fb)
      return GST_FLOW_OK;
    self->carry_len = 0;
    ret = gst_sattn_push_frames (self, (const float *) self->carry, 1,
        self->carry_invalid, out);
    self->carry_invalid = FALSE;
    if (ret != GST_FLOW_OK)
      return ret;
  }

  n = size / fb;
  rest = size - n * fb;
  if (n > 0 && data == NULL && invalid) {
    /* A GAP's frames: closed form once the window holds only them. */
    ret = gst_sattn_gap_frames (self, n, out);
    if (ret != GST_FLOW_OK)
      return ret;
  } else if (n > 0) {
    if (data == NULL || ((guintptr) data) % G_ALIGNOF (float) == 0) {
      ret = gst_sattn_push_frames (self, (const float *) data, n, invalid,
          out);
      if (data)
        data += n * fb;
    } else {
      /* Frames split across buffers left the data misaligned. */
      while (n > 0 && ret == GST_FLOW_OK) {
        gsize k = (gsize) MIN (n, (guint64) self->chunk);

        memcpy (self->scratch, data, k * fb);
        ret = gst_sattn_push_frames (self, self->scratch, k, invalid, out);
        data += k * fb;
        n -= k;
      }
    }
    if (ret != GST_FLOW_OK)
      return ret;
  }

  if (rest > 0) {
    if (data)
      memcpy (self->carry, data, (gsize) rest);
    else
      memset (self->carry, 0, (gsize) rest);
    self->carry_len = (gsize) rest;
    self->carry_invalid = invalid;
  }
  return GST_FLOW_OK;
}

/* Emit rows for every frame the stream holds and push them. */
static GstFlowReturn
gst_sattn_drain_rows (GstSattn * self)
{
  GstSattnOut out = { 0, };
  GstFlowReturn ret;
  SattnStatus st;
  gsize need, n_rows = 0;

  if (self->stream == NULL)
    return GST_FLOW_OK;
  if (self->carry_len > 0) {
    GST_WARNING_OBJECT (self, "dropping an incomplete frame of %"
        G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT " bytes", self->carry_len,
        self->frame_bytes);
    self->carry_len = 0;
    self->carry_invalid = FALSE;
  }
  need = sattn_stream_max_rows (self->stream, 0);
  if (need == 0)
    return GST_FLOW_OK;
  ret = gst_sattn_out_reserve (self, &out, need, 0);
  if (ret != GST_FLOW_OK)
    return ret;
  if (!gst_sattn_ensure_info (self, need)) {
    gst_buffer_unmap (out.buf, &out.map);
    gst_buffer_unref (out.buf);
    return GST_FLOW_ERROR;
  }
  st = sattn_stream_drain (self->stream, (float *) out.map.data, out.cap_rows,
      self->info, &n_rows);
  if (st != SATTN_OK) {
    gst_buffer_unmap (out.buf, &out.map);
    gst_buffer_unref (out.buf);
    return gst_sattn_core_error (self, "sattn_stream_drain", st);
  }
  GST_DEBUG_OBJECT (self, "drained %" G_GSIZE_FORMAT " rows", n_rows);
  gst_sattn_out_account (self, &out, n_rows);
  return gst_sattn_out_finish (self, &out);
}

/* Drain, then end the health messages' timeline: one more message for
 * the windows not reported yet (at EOS, a resync, a new segment, caps). */
static GstFlowReturn
gst_sattn_drain (GstSattn * self)
{
  GstFlowReturn ret = gst_sattn_drain_rows (self);

  if (self->stream)
    gst_sattn_obs_end_timeline (&self->obs, GST_ELEMENT (self), self->stream,
        &self->segment);
  return ret;
}

/* Drain, forget the window and start a new timeline at ts. */
static GstFlowReturn
gst_sattn_resync (GstSattn * self, GstClockTime ts)
{
  GstFlowReturn ret;

  ret = gst_sattn_drain (self);
  /* Within a segment time never goes back: data stamped behind the
   * timeline continues it. */
  if (!GST_CLOCK_TIME_IS_VALID (ts) || ts < gst_sattn_expected_ts (self))
    ts = gst_sattn_expected_ts (self);
  sattn_stream_reset (self->stream);
  gst_sattn_start_timeline (self, ts);
  return ret;
}

/* Called before data that starts at ts: starts the timeline or resyncs on
 * a discontinuity (DISCONT, or ts more than the threshold away from the
 * counter).  A resync behind the counter restarts the window but keeps
 * the timeline going from the counter (gst_sattn_resync). */
static GstFlowReturn
gst_sattn_check_discont (GstSattn * self, GstClockTime ts, gboolean discont)
{
  GstClockTime expected, threshold, diff;

  if (!GST_CLOCK_TIME_IS_VALID (self->resync_ts)) {
    gst_sattn_start_timeline (self, ts);
    return GST_FLOW_OK;
  }
  if (discont) {
    GST_DEBUG_OBJECT (self, "discontinuity flagged, resyncing at %"
        GST_TIME_FORMAT, GST_TIME_ARGS (ts));
    return gst_sattn_resync (self, ts);
  }
  if (!GST_CLOCK_TIME_IS_VALID (ts))
    return GST_FLOW_OK;

  expected = gst_sattn_expected_ts (self);
  threshold = gst_util_uint64_scale (self->cfg.frame_size, GST_SECOND,
      2 * (guint64) self->rate);
  threshold = MAX (threshold, MIN_RESYNC_THRESHOLD);
  diff = ts > expected ? ts - expected : expected - ts;
  if (diff > threshold) {
    GST_DEBUG_OBJECT (self, "timestamp %" GST_TIME_FORMAT " is %"
        GST_TIME_FORMAT " away from the expected %" GST_TIME_FORMAT
        ", resyncing", GST_TIME_ARGS (ts), GST_TIME_ARGS (diff),
        GST_TIME_ARGS (expected));
    return gst_sattn_resync (self, ts);
  }
  return GST_FLOW_OK;
}

static GstFlowReturn
gst_sattn_not_negotiated (GstSattn * self)
{
  if (self->caps_refused) {
    /* The refusal posted its error already. */
    GST_DEBUG_OBJECT (self, "data after refused caps");
  } else {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("No caps were received before the first buffer"),
        ("sattn needs audio/x-raw, format=F32LE, layout=interleaved caps "
            "before any data"));
  }
  return GST_FLOW_NOT_NEGOTIATED;
}

static GstFlowReturn
gst_sattn_chain (GstPad * pad, GstObject * parent, GstBuffer * buffer)
{
  GstSattn *self = GST_SATTN (parent);
  GstSattnOut out = { 0, };
  GstFlowReturn ret, ret2;
  GstMapInfo map;
  gboolean gap;

  if (G_UNLIKELY (self->stream == NULL || self->caps_refused)) {
    gst_buffer_unref (buffer);
    return gst_sattn_not_negotiated (self);
  }

  ret = gst_sattn_check_discont (self, GST_BUFFER_PTS (buffer),
      GST_BUFFER_IS_DISCONT (buffer));
  if (ret != GST_FLOW_OK) {
    gst_buffer_unref (buffer);
    return ret;
  }

  if (!gst_buffer_map (buffer, &map, GST_MAP_READ)) {
    gst_buffer_unref (buffer);
    GST_ELEMENT_ERROR (self, RESOURCE, READ, ("Could not map an input "
            "buffer"), (NULL));
    return GST_FLOW_ERROR;
  }
  gap = GST_BUFFER_FLAG_IS_SET (buffer, GST_BUFFER_FLAG_GAP);
  ret = gst_sattn_process (self, map.data, map.size, gap, &out);
  gst_buffer_unmap (buffer, &map);
  gst_buffer_unref (buffer);

  ret2 = gst_sattn_out_finish (self, &out);
  return ret != GST_FLOW_OK ? ret : ret2;
}

/* A GAP event: the part of its time span after the timeline's counter
 * becomes masked frames.  A GAP without a duration adds nothing; one
 * ahead of the counter by more than the threshold resyncs there, as a
 * buffer would; one that starts behind the counter never resyncs and
 * adds only what lies after the counter (nothing when it ends before).
 * Its end saturates at the end of the clock's range. */
static GstFlowReturn
gst_sattn_handle_gap (GstSattn * self, GstEvent * event)
{
  GstSattnOut out = { 0, };
  GstClockTime ts, dur, end, expected;
  GstFlowReturn ret, ret2;
  guint64 bytes, samples, have;

  gst_event_parse_gap (event, &ts, &dur);
  if (!GST_CLOCK_TIME_IS_VALID (dur)) {
    GST_DEBUG_OBJECT (self, "gap without a duration, ignored");
    return GST_FLOW_OK;
  }
  expected = gst_sattn_expected_ts (self);
  if (!GST_CLOCK_TIME_IS_VALID (ts) || !GST_CLOCK_TIME_IS_VALID (expected)
      || ts >= expected) {
    ret = gst_sattn_check_discont (self, ts, FALSE);
    if (ret != GST_FLOW_OK)
      return ret;
  }

  if (GST_CLOCK_TIME_IS_VALID (ts)) {
    /* Up to the gap's end, on the sample grid of the timeline. */
    end = gst_sattn_ts_add (ts, dur);
    samples = end > self->resync_ts ? gst_util_uint64_scale_round (end -
        self->resync_ts, self->rate, GST_SECOND) : 0;
    have = self->bytes_since_resync;
  } else {
    samples = gst_util_uint64_scale_round (dur, self->rate, GST_SECOND);
    have = 0;
  }
  /* The byte counter must not wrap either. */
  samples = MIN (samples, (G_MAXUINT64 - self->bytes_since_resync + have) /
      self->bpf);
  bytes = samples * self->bpf > have ? samples * self->bpf - have : 0;
  GST_DEBUG_OBJECT (self, "gap %" GST_TIME_FORMAT " + %" GST_TIME_FORMAT
      ": %" G_GUINT64_FORMAT " masked bytes", GST_TIME_ARGS (ts),
      GST_TIME_ARGS (dur), bytes);
  if (bytes == 0)
    return GST_FLOW_OK;

  ret = gst_sattn_process (self, NULL, bytes, TRUE, &out);
  ret2 = gst_sattn_out_finish (self, &out);
  return ret != GST_FLOW_OK ? ret : ret2;
}

/* ------------------------------------------------------------ caps */

/* Up to 16 divisors of value that are <= max_value, those nearest to
 * wanted, as "a, b, c". */
static gchar *
gst_sattn_divisors (guint64 value, guint64 max_value, guint64 wanted)
{
  guint64 best[16];
  guint n = 0, i, j;
  guint64 d;
  GString *s;

  max_value = MIN (max_value, value);
  for (d = 1; d <= max_value; d++) {
    if (value % d != 0)
      continue;
    if (n < G_N_ELEMENTS (best)) {
      best[n++] = d;
    } else {
      /* Replace the one farthest from wanted if d is nearer. */
      guint far = 0;
      guint64 fard = 0;
      for (i = 0; i < n; i++) {
        guint64 dist = best[i] > wanted ? best[i] - wanted : wanted - best[i];
        if (dist >= fard) {
          fard = dist;
          far = i;
        }
      }
      if ((d > wanted ? d - wanted : wanted - d) < fard) {
        for (j = far; j + 1 < n; j++)
          best[j] = best[j + 1];
        best[n - 1] = d;
      }
    }
  }
  s = g_string_new (NULL);
  for (i = 0; i < n; i++)
    g_string_append_printf (s, "%s%" G_GUINT64_FORMAT, i ? ", " : "",
        best[i]);
  if (n == 0)
    g_string_append (s, "none");
  return g_string_free (s, FALSE);
}

static const gchar *
gst_sattn_output_nick (GstSattnOutput o)
{
  static const gchar *nicks[] = { "frames", "window", "mean", "last" };

  return (guint) o < G_N_ELEMENTS (nicks) ? nicks[o] : "?";
}

/* Why the settings cannot work with rate / channels (d_model = channels ×
 * frame-size): a message that says what would work (g_free it), or NULL
 * when they can.  weights: a weights file is set (its projections, not
 * identity ones, then fix the head size).  The one home of the element's
 * negotiation rules: the caps event, the CAPS / ACCEPT_CAPS queries and
 * the READY -> PAUSED check all ask it. */
static gchar *
gst_sattn_explain (const GstSattnSettings * c, gint rate, gint channels,
    guint64 d_model, gboolean weights)
{
  guint64 frame_rate;
  gchar *ok, *msg;

  if (c->scale > 0.0 && c->scale < FLT_MIN) {
    return g_strdup_printf ("scale=%g is below the smallest normal float "
        "(%g), the precision the scores are computed in; use scale=0 for "
        "the default 1/sqrt(head-dim) or a value of at least %g", c->scale,
        (double) FLT_MIN, (double) FLT_MIN);
  }
  if (d_model > MAX_D_MODEL) {
    return g_strdup_printf ("Frames of %d channels x frame-size=%u = %"
        G_GUINT64_FORMAT " values are too large (at most %u)", channels,
        c->frame_size, d_model, MAX_D_MODEL);
  }
  if (rate % c->frame_size != 0) {
    ok = gst_sattn_divisors (rate, MAX_FRAME_SIZE, c->frame_size);
    msg = g_strdup_printf ("frame-size=%u does not divide the input rate of "
        "%d Hz, so the frame rate would not be a whole number; frame-size "
        "values that work: %s", c->frame_size, rate, ok);
    g_free (ok);
    return msg;
  }
  frame_rate = rate / c->frame_size;
  if (c->hop > c->window) {
    return g_strdup_printf ("hop=%u is larger than window=%u; hop must be "
        "between 1 and the window (or the window at least %u)", c->hop,
        c->window, c->hop);
  }
  if (c->output != GST_SATTN_OUTPUT_FRAMES && frame_rate % c->hop != 0) {
    ok = gst_sattn_divisors (frame_rate, c->window, c->hop);
    msg = g_strdup_printf ("hop=%u does not divide the frame rate of %"
        G_GUINT64_FORMAT " Hz (rate %d / frame-size %u), so output=%s would "
        "not have a whole output rate; hop values that work with window=%u: "
        "%s (or output=frames)", c->hop, frame_rate, rate, c->frame_size,
        gst_sattn_output_nick (c->output), c->window, ok);
    g_free (ok);
    return msg;
  }
  if (c->head_dim == 0 && d_model % c->heads != 0) {
    ok = gst_sattn_divisors (d_model, MAX_HEADS, c->heads);
    msg = g_strdup_printf ("heads=%u does not divide d_model=%"
        G_GUINT64_FORMAT " (%d channels x frame-size=%u); heads values that "
        "work: %s", c->heads, d_model, channels, c->frame_size, ok);
    g_free (ok);
    return msg;
  }
  if (c->head_dim != 0 && (guint64) c->heads * c->head_dim != d_model) {
    ok = gst_sattn_divisors (d_model, MAX_HEADS, c->heads);
    if (weights) {
      /* nn.MultiheadAttention splits E into heads of E / heads. */
      msg = g_strdup_printf ("heads=%u x head-dim=%u does not equal d_model="
          "%" G_GUINT64_FORMAT " (%d channels x frame-size=%u), and the "
          "weights file's projections give every head d_model / heads "
          "values; use head-dim=0 or head-dim=d_model/heads with heads one "
          "of: %s", c->heads, c->head_dim, d_model, channels, c->frame_size,
          ok);
    } else {
      msg = g_strdup_printf ("heads=%u x head-dim=%u does not equal d_model="
          "%" G_GUINT64_FORMAT " (%d channels x frame-size=%u), which "
          "identity projections (no weights file) need; use head-dim=0 or "
          "head-dim=d_model/heads with heads one of: %s", c->heads,
          c->head_dim, d_model, channels, c->frame_size, ok);
    }
    g_free (ok);
    return msg;
  }
  if (c->output == GST_SATTN_OUTPUT_WINDOW &&
      (guint64) c->window * d_model > G_MAXINT) {
    return g_strdup_printf ("output=window would need window=%u x %"
        G_GUINT64_FORMAT " = more than %d channels; use a smaller window or "
        "another output mode", c->window, d_model, G_MAXINT);
  }
  return NULL;
}

/* Checks the settings against the input; on failure posts an element
 * error that says what would work. */
static gboolean
gst_sattn_validate (GstSattn * self, const GstSattnSettings * c, gint rate,
    gint channels, guint64 d_model, gboolean weights)
{
  gchar *why = gst_sattn_explain (c, rate, channels, d_model, weights);

  if (why == NULL)
    return TRUE;
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", why), (NULL));
  g_free (why);
  return FALSE;
}

/* Reads the weights file (path) for d_model-value frames (0 = whatever the
 * file has: a check of the file alone) and fills mc / w.  Posts an element
 * error naming the file and what is wrong with it on failure. */
static gboolean
gst_sattn_load_weights (GstSattn * self, const gchar * path,
    const gchar * prefix, guint64 d_model, guint heads, gboolean zero_attn,
    SattnConfig * mc, SattnWeights * w, SattnMhaWeights ** mw)
{
  gchar err[1024] = "";
  SattnStatus st;

  st = sattn_mha_weights_load (path, prefix ? prefix : "", (size_t) d_model,
      heads, zero_attn, mc, w, mw, err, sizeof err);
  if (st == SATTN_OK)
    return TRUE;

  switch (st) {
    case SATTN_E_IO:
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ,
          ("Could not read the weights file: %s", err),
          ("%s", sattn_status_string (st)));
      break;
    case SATTN_E_SHAPE:
      if (d_model == 0) {
        /* Checked before caps: E is the file's, heads the property's. */
        GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
            ("The weights file does not fit the element's properties: %s",
                err), ("%s", sattn_status_string (st)));
      } else {
        GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
            ("The weights file does not fit the stream, whose frames have "
                "d_model=%" G_GUINT64_FORMAT " values (channels x "
                "frame-size): %s", d_model, err),
            ("%s", sattn_status_string (st)));
      }
      break;
    case SATTN_E_INVAL:
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
          ("The weights file cannot be used with these properties: %s",
              err), ("%s: %s", path, sattn_status_string (st)));
      break;
    default:
      GST_ELEMENT_ERROR (self, STREAM, FORMAT,
          ("The weights file is not a usable safetensors "
              "MultiheadAttention state dict: %s", err),
          ("%s", sattn_status_string (st)));
      break;
  }
  return FALSE;
}

/* Frames handed to the core per call: scratch stays O(window × d_model),
 * at most max(window, 1 MiB). */
static gsize
gst_sattn_chunk_frames (const GstSattnSettings * c, guint64 d_model)
{
  gsize chunk = CLAMP (c->hop, MIN_CHUNK_FRAMES, MAX_CHUNK_FRAMES);

  chunk = MIN (chunk, MAX ((gsize) c->window,
          (gsize) (1u << 20) / (d_model * sizeof (float))));
  return MAX (chunk, 1);
}

/* Row descriptions one core call can need: a push of chunk frames with
 * up to a window pending (frames mode), or its windows. */
static gsize
gst_sattn_info_rows (const GstSattnSettings * c, gsize chunk)
{
  return c->output == GST_SATTN_OUTPUT_FRAMES ? c->window + chunk :
      chunk / c->hop + 2;
}

/* The element's buffers for one stream configuration. */
typedef struct
{
  guint8 *carry;
  float *scratch, *zeros;
  guint8 *invalid_flags;
  SattnRowInfo *info;
  gsize info_cap;
} GstSattnScratch;

static void
gst_sattn_scratch_clear (GstSattnScratch * sc)
{
  g_free (sc->carry);
  g_free (sc->scratch);
  g_free (sc->zeros);
  g_free (sc->invalid_flags);
  g_free (sc->info);
  memset (sc, 0, sizeof (*sc));
}

/* Fallible: posts an element error naming the size that could not be
 * had and returns FALSE (nothing allocated then). */
static gboolean
gst_sattn_alloc_scratch (GstSattn * self, GstSattnScratch * sc,
    const GstSattnSettings * c, guint64 d_model, gsize chunk)
{
  const gsize fb = (gsize) d_model * sizeof (float);
  const gchar *what = NULL;
  gsize size = 0;

  memset (sc, 0, sizeof (*sc));
  sc->info_cap = gst_sattn_info_rows (c, chunk);
  if ((sc->carry = g_try_malloc (size = fb)) == NULL)
    what = "a partial frame";
  else if ((sc->scratch = g_try_malloc (size = chunk * fb)) == NULL)
    what = "realigned input frames";
  else if ((sc->zeros = g_try_malloc0 (size = chunk * fb)) == NULL)
    what = "zero frames";
  else if ((sc->invalid_flags = g_try_malloc0 (size = chunk)) == NULL)
    what = "frame flags";
  else if ((sc->info = g_try_new (SattnRowInfo, sc->info_cap)) == NULL) {
    size = sc->info_cap * sizeof (SattnRowInfo);
    what = "row descriptions";
  }
  if (what == NULL)
    return TRUE;
  GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
      ("Could not allocate %" G_GSIZE_FORMAT " bytes for %s (%" G_GSIZE_FORMAT
          " frames of %" G_GUINT64_FORMAT " values per core call)", size,
          what, chunk, d_model), (NULL));
  gst_sattn_scratch_clear (sc);
  return FALSE;
}

/* a + b, saturating (sizes of memory that may not exist). */
static guint64
gst_sattn_size_add (guint64 a, guint64 b)
{
  return b > G_MAXUINT64 - a ? G_MAXUINT64 : a + b;
}

static guint64
gst_sattn_size_mul (guint64 a, guint64 b)
{
  return a != 0 && b > G_MAXUINT64 / a ? G_MAXUINT64 : a * b;
}

/* Memory this process can still get: the headroom below RLIMIT_AS and
 * RLIMIT_DATA and the machine's physical memory, whichever is least
 * (G_MAXUINT64 when none is known); *what names it. */
static guint64
gst_sattn_memory_headroom (const gchar ** what)
{
  guint64 avail = G_MAXUINT64;

  *what = "no known limit";
#ifdef G_OS_UNIX
  {
    long page = sysconf (_SC_PAGESIZE), phys = sysconf (_SC_PHYS_PAGES);
    unsigned long long size = 0, rss, shared, text, lib, data = 0;
    struct rlimit rl;
    FILE *f;

    if (page > 0 && phys > 0) {
      avail = gst_sattn_size_mul ((guint64) phys, (guint64) page);
      *what = "the machine's physical memory";
    }
    /* Address space and data segment in use now (Linux). */
    f = fopen ("/proc/self/statm", "r");
    if (f != NULL) {
      if (fscanf (f, "%llu %llu %llu %llu %llu %llu", &size, &rss, &shared,
              &text, &lib, &data) != 6)
        size = data = 0;
      fclose (f);
    }
    if (page > 0) {
      size *= (unsigned long long) page;
      data *= (unsigned long long) page;
    }
    if (getrlimit (RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      guint64 h = rl.rlim_cur > size ? rl.rlim_cur - size : 0;
      if (h < avail) {
        avail = h;
        *what = "the headroom below the address-space limit (RLIMIT_AS)";
      }
    }
    if (getrlimit (RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      guint64 h = rl.rlim_cur > data ? rl.rlim_cur - data : 0;
      if (h < avail) {
        avail = h;
        *what = "the headroom below the data-segment limit (RLIMIT_DATA)";
      }
    }
  }
#endif
  return avail;
}

/* Before allocating a stream: what it and the element's own buffers need,
 * against what the process can have.  Posts an element error that gives
 * the sizes and returns FALSE when it cannot fit.  SATTN_MEMORY_CHECK=0 in
 * the environment turns the check off (allocation failures are still
 * reported as errors). */
static gboolean
gst_sattn_check_memory (GstSattn * self, const SattnModel * model,
    const SattnStreamConfig * sc, const GstSattnSettings * c,
    guint64 d_model, gsize chunk)
{
  const gchar *env = g_getenv ("SATTN_MEMORY_CHECK");
  guint64 core, own, fb, row_bytes, total, avail;
  const gchar *what;
  gchar *s_total, *s_avail;

  if (env != NULL && strcmp (env, "0") == 0)
    return TRUE;
  core = sattn_stream_bytes (model, sc);
  if (core == 0)                /* the size does not fit in size_t */
    core = G_MAXUINT64;
  fb = d_model * sizeof (float);
  row_bytes = gst_sattn_size_mul (sattn_model_d_out (model) *
      sizeof (float), c->output == GST_SATTN_OUTPUT_WINDOW ? c->window : 1);
  /* carry, realigned input, zeros, invalid flags, row descriptions, one
   * output buffer of the rows of one core call, the weights the health
   * messages and the attention map read. */
  own = fb;
  own = gst_sattn_size_add (own, gst_sattn_size_mul (2 * chunk, fb));
  own = gst_sattn_size_add (own, chunk);
  own = gst_sattn_size_add (own, gst_sattn_info_rows (c, chunk) *
      sizeof (SattnRowInfo));
  own = gst_sattn_size_add (own, gst_sattn_size_mul (gst_sattn_info_rows (c,
              chunk), row_bytes));
  if (sc->keep_weights) {
    guint64 cells = gst_sattn_size_mul (c->window, c->window +
        sattn_model_extra_keys (model));
    /* Two float copies and one GRAY8 map frame; a message's weights as
     * GValues when statistics are on too. */
    own = gst_sattn_size_add (own, gst_sattn_size_mul (cells,
            2 * sizeof (float) + 1 + (sc->collect_stats ? sizeof (GValue) :
                0)));
  }
  total = gst_sattn_size_add (core, own);
  avail = gst_sattn_memory_headroom (&what);
  GST_DEBUG_OBJECT (self, "memory: stream %" G_GUINT64_FORMAT ", element %"
      G_GUINT64_FORMAT ", available %" G_GUINT64_FORMAT " (%s)", core, own,
      avail, what);
  if (core != SIZE_MAX && total <= avail && total <= G_MAXSIZE)
    return TRUE;

  s_total = g_format_size_full (total, G_FORMAT_SIZE_IEC_UNITS);
  s_avail = g_format_size_full (avail, G_FORMAT_SIZE_IEC_UNITS);
  GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
      ("window=%u with %" G_GUINT64_FORMAT "-value frames (output=%s, "
          "heads=%u) needs %s (%" G_GUINT64_FORMAT " bytes: %"
          G_GUINT64_FORMAT " for the attention stream, %" G_GUINT64_FORMAT
          " for the element's buffers), more than this process can have: "
          "%s (%s); use a smaller window or smaller frames", c->window,
          d_model, gst_sattn_output_nick (c->output), c->heads, s_total,
          total, core == SIZE_MAX ? G_MAXUINT64 : core, own, s_avail,
          what), ("SATTN_MEMORY_CHECK=0 turns this check off"));
  g_free (s_total);
  g_free (s_avail);
  return FALSE;
}

/* The output caps of rows of row_floats values at out_rate rows/s. */
static GstCaps *
gst_sattn_src_caps_new (gsize row_floats, guint64 out_rate)
{
  return gst_caps_new_simple ("audio/x-raw",
      "format", G_TYPE_STRING, "F32LE",
      "layout", G_TYPE_STRING, "interleaved",
      "rate", G_TYPE_INT, (gint) out_rate,
      "channels", G_TYPE_INT, (gint) row_floats,
      "channel-mask", GST_TYPE_BITMASK, (guint64) 0, NULL);
}

/* Whether downstream accepts the output caps that the input caps and the
 * settings c give (stream built for them).  If not, posts one error that
 * names those caps, says how they follow from the input and the
 * properties, and what downstream takes. */
static gboolean
gst_sattn_output_accepted (GstSattn * self, const GstSattnSettings * c,
    gint rate, gint channels, const SattnStream * stream, GstCaps * sinkcaps)
{
  const gsize row_floats = sattn_stream_row_floats (stream);
  const guint64 frame_rate = rate / c->frame_size;
  GstCaps *srccaps, *peer;
  gchar *offered, *takes, *rows;

  srccaps = gst_sattn_src_caps_new (row_floats,
      c->output == GST_SATTN_OUTPUT_FRAMES ? frame_rate : frame_rate / c->hop);
  if (gst_pad_peer_query_accept_caps (self->srcpad, srccaps)) {
    gst_caps_unref (srccaps);
    return TRUE;
  }
  peer = gst_pad_peer_query_caps (self->srcpad, NULL);
  offered = gst_caps_to_string (srccaps);
  takes = peer ? gst_caps_to_string (peer) : g_strdup ("nothing");
  if (c->output == GST_SATTN_OUTPUT_FRAMES)
    rows = g_strdup_printf ("one row per frame, at the frame rate %d Hz / "
        "frame-size=%u", rate, c->frame_size);
  else
    rows = g_strdup_printf ("one row per window, every hop=%u frames of "
        "frame-size=%u at %d Hz", c->hop, c->frame_size, rate);
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
      ("Downstream refused the output caps %s: output=%s gives rows of %"
          G_GSIZE_FORMAT " values (d_model=%" G_GUINT64_FORMAT " = %d "
          "channels x frame-size=%u), %s; downstream accepts %s", offered,
          gst_sattn_output_nick (c->output), row_floats,
          (guint64) channels * c->frame_size, channels, c->frame_size, rows,
          takes), ("input caps %" GST_PTR_FORMAT, sinkcaps));
  g_free (rows);
  g_free (offered);
  g_free (takes);
  gst_clear_caps (&peer);
  gst_caps_unref (srccaps);
  return FALSE;
}

/* Rate and channels of input caps the element can read at all (fixed
 * audio/x-raw F32LE interleaved); FALSE otherwise. */
static gboolean
gst_sattn_parse_caps (GstCaps * caps, gint * rate, gint * channels)
{
  GstStructure *s;
  const gchar *format, *layout;

  if (caps == NULL || !gst_caps_is_fixed (caps))
    return FALSE;
  s = gst_caps_get_structure (caps, 0);
  format = gst_structure_get_string (s, "format");
  layout = gst_structure_get_string (s, "layout");
  return gst_structure_has_name (s, "audio/x-raw")
      && g_strcmp0 (format, "F32LE") == 0
      && (layout == NULL || strcmp (layout, "interleaved") == 0)
      && gst_structure_get_int (s, "rate", rate)
      && gst_structure_get_int (s, "channels", channels)
      && *rate > 0 && *channels > 0;
}

#define GST_SATTN_UNSUPPORTED_CAPS "Unsupported input caps; sattn takes " \
    "audio/x-raw, format=F32LE, layout=interleaved with a rate and a " \
    "channel count"

static gboolean
gst_sattn_set_caps (GstSattn * self, GstCaps * caps)
{
  GstSattnSettings c;
  gint rate = 0, channels = 0;
  guint64 d_model, frame_rate, out_rate;
  SattnConfig mc = { 0, };
  SattnStreamConfig sc = { 0, };
  SattnModel *model;
  SattnStream *stream;
  SattnStatus st = SATTN_OK;
  SattnWeights weights = { 0, };
  SattnMhaWeights *mw = NULL;
  gchar *wpath, *wprefix;
  gboolean zero_attn;
  GstCaps *srccaps;
  gsize row_floats, chunk;
  GstClockTime next_ts, held;
  gboolean res;
  GstSattnScratch scratch;

  if (self->sink_caps && gst_caps_is_equal (caps, self->sink_caps))
    return TRUE;
  GST_DEBUG_OBJECT (self, "sink caps %" GST_PTR_FORMAT, caps);

  if (!gst_sattn_parse_caps (caps, &rate, &channels)) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (GST_SATTN_UNSUPPORTED_CAPS),
        ("caps: %" GST_PTR_FORMAT, caps));
    return FALSE;
  }

  GST_OBJECT_LOCK (self);
  c = self->props;
  wpath = g_strdup (self->weights);
  wprefix = g_strdup (self->weights_prefix);
  zero_attn = self->add_zero_attn;
  GST_OBJECT_UNLOCK (self);

  d_model = (guint64) channels * c.frame_size;
  if (!gst_sattn_validate (self, &c, rate, channels, d_model,
          wpath != NULL)) {
    g_free (wpath);
    g_free (wprefix);
    return FALSE;
  }

  mc.d_model = (size_t) d_model;
  mc.heads = c.heads;
  mc.d_head = c.head_dim;
  mc.scale = (float) c.scale;
  mc.causal = c.causal;
  mc.lookback = c.lookback;
  mc.threads = c.threads;
  weights.add_zero_attn = zero_attn;
  if (wpath != NULL && !gst_sattn_load_weights (self, wpath, wprefix,
          d_model, c.heads, zero_attn, &mc, &weights, &mw)) {
    g_free (wpath);
    g_free (wprefix);
    return FALSE;
  }
  /* The model keeps its own copy of the weights, shared with every
   * element whose file, prefix and configuration match. */
  model = gst_sattn_cache_acquire (wpath, wprefix, &mc,
      (wpath != NULL || zero_attn) ? &weights : NULL, &st);
  sattn_mha_weights_free (mw);
  g_free (wpath);
  g_free (wprefix);
  if (model == NULL) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("Could not set up attention for %" G_GUINT64_FORMAT "-value frames "
            "with heads=%u head-dim=%u: %s", d_model, c.heads, c.head_dim,
            sattn_status_string (st)), (NULL));
    return FALSE;
  }
  sc.window = c.window;
  sc.hop = c.hop;
  sc.output = (SattnOutputMode) c.output;
  sc.start = (SattnStartPolicy) c.start;
  sc.invalid_policy = (SattnInvalidPolicy) gst_sattn_get_policy (self);
  gst_sattn_obs_stream_config (&self->obs, GST_ELEMENT (self), &sc);
  chunk = gst_sattn_chunk_frames (&c, d_model);
  if (!gst_sattn_check_memory (self, model, &sc, &c, d_model, chunk)) {
    gst_sattn_cache_release (model);
    return FALSE;
  }
  stream = sattn_stream_new (model, &sc, &st);
  if (stream == NULL && st == SATTN_E_NOMEM) {
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate the attention stream for window=%u with %"
            G_GUINT64_FORMAT "-value frames: %" G_GSIZE_FORMAT " bytes",
            c.window, d_model, sattn_stream_bytes (model, &sc)),
        ("%s", sattn_status_string (st)));
    gst_sattn_cache_release (model);
    return FALSE;
  }
  if (stream == NULL) {
    gst_sattn_cache_release (model);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("Could not set up a stream with window=%u hop=%u: %s", c.window,
            c.hop, sattn_status_string (st)), (NULL));
    return FALSE;
  }
  /* The element's own buffers, before the old stream is let go. */
  if (!gst_sattn_alloc_scratch (self, &scratch, &c, d_model, chunk)) {
    sattn_stream_free (stream);
    gst_sattn_cache_release (model);
    return FALSE;
  }

  /* Downstream must take the output before anything changes. */
  if (!gst_sattn_output_accepted (self, &c, rate, channels, stream, caps)) {
    gst_sattn_scratch_clear (&scratch);
    sattn_stream_free (stream);
    gst_sattn_cache_release (model);
    return FALSE;
  }

  /* The old configuration's frames go out under the old caps. */
  next_ts = GST_CLOCK_TIME_NONE;
  if (self->stream) {
    gst_sattn_drain (self);
    next_ts = gst_sattn_expected_ts (self);
  }
  gst_sattn_free_stream (self);

  row_floats = sattn_stream_row_floats (stream);
  frame_rate = rate / c.frame_size;
  out_rate = c.output == GST_SATTN_OUTPUT_FRAMES ? frame_rate :
      frame_rate / c.hop;

  self->cfg = c;
  self->model = model;
  self->stream = stream;
  self->sink_caps = gst_caps_ref (caps);
  self->rate = rate;
  self->channels = channels;
  self->bpf = (gsize) channels * sizeof (float);
  self->d_model = (gsize) d_model;
  self->frame_bytes = (gsize) d_model * sizeof (float);
  self->row_floats = row_floats;
  self->chunk = chunk;
  self->carry = scratch.carry;
  self->scratch = scratch.scratch;
  self->zeros = scratch.zeros;
  self->invalid_flags = scratch.invalid_flags;
  self->info = scratch.info;
  self->info_cap = scratch.info_cap;
  gst_sattn_obs_configure (&self->obs, GST_ELEMENT (self), model, &sc, rate,
      c.frame_size, c.scale);

  /* A new timeline, continuing where the old one ended (if any). */
  self->resync_ts = GST_CLOCK_TIME_NONE;
  if (GST_CLOCK_TIME_IS_VALID (next_ts))
    gst_sattn_start_timeline (self, next_ts);

  held = gst_util_uint64_scale ((guint64) (c.start == GST_SATTN_START_WAIT ?
          c.window : c.hop) * c.frame_size, GST_SECOND, rate);
  GST_OBJECT_LOCK (self);
  self->held_time = held;
  GST_OBJECT_UNLOCK (self);

  srccaps = gst_sattn_src_caps_new (row_floats, out_rate);
  GST_DEBUG_OBJECT (self, "d_model %" G_GUINT64_FORMAT ", src caps %"
      GST_PTR_FORMAT, d_model, srccaps);
  res = gst_pad_set_caps (self->srcpad, srccaps);
  gst_caps_unref (srccaps);

  if (self->pending_segment) {
    gst_pad_push_event (self->srcpad, self->pending_segment);
    self->pending_segment = NULL;
  }
  return res;
}

/* ------------------------------------------------------------ queries */

/* The settings, whether a weights file is set and its embedding size
 * (0 = not read yet), under the object lock. */
static void
gst_sattn_snapshot (GstSattn * self, GstSattnSettings * c,
    gboolean * weights, guint64 * file_d_model)
{
  GST_OBJECT_LOCK (self);
  *c = self->props;
  *weights = self->weights != NULL;
  *file_d_model = self->weights != NULL ? self->weights_d_model : 0;
  GST_OBJECT_UNLOCK (self);
}

/* v = the multiples of step in [step, max] (an int, or a stepped range);
 * FALSE when there is none. */
static gboolean
gst_sattn_multiples (GValue * v, guint64 step, guint64 max)
{
  max = MIN (max, (guint64) G_MAXINT);
  if (step == 0 || step > max)
    return FALSE;
  max -= max % step;
  if (max == step) {
    g_value_init (v, G_TYPE_INT);
    g_value_set_int (v, (gint) step);
  } else {
    g_value_init (v, GST_TYPE_INT_RANGE);
    gst_value_set_int_range_step (v, (gint) step, (gint) max, (gint) step);
  }
  return TRUE;
}

/* What the sink CAPS query answers in PAUSED and PLAYING: the template
 * narrowed by what can be stated cheaply: rates that are multiples of frame-size (× hop in the
 * pooled modes), channel counts that fill whole heads (or the weights
 * file's d_model), within the size limits.  Every caps that can work is
 * in it; ACCEPT_CAPS decides the rest.  Empty when nothing can work. */
static GstCaps *
gst_sattn_allowed_caps (GstSattn * self)
{
  GstSattnSettings c;
  gboolean weights;
  guint64 file_d, rate_step, max_ch, ch_step, d;
  GValue rates = G_VALUE_INIT, chans = G_VALUE_INIT;
  GstStructure *s;

  gst_sattn_snapshot (self, &c, &weights, &file_d);

  rate_step = c.frame_size;
  if (c.output != GST_SATTN_OUTPUT_FRAMES)
    rate_step *= c.hop;
  max_ch = MAX_D_MODEL / c.frame_size;
  if (c.output == GST_SATTN_OUTPUT_WINDOW)
    max_ch = MIN (max_ch, (guint64) G_MAXINT / ((guint64) c.window *
            c.frame_size));
  d = file_d != 0 ? file_d : (c.head_dim != 0 ?
      (guint64) c.heads * c.head_dim : 0);
  if (d != 0) {
    /* d_model is fixed: one channel count, if any. */
    if (d % c.frame_size != 0 || d / c.frame_size > max_ch)
      return gst_caps_new_empty ();
    ch_step = d / c.frame_size;
    max_ch = ch_step;
  } else {
    /* channels × frame-size must be a multiple of heads. */
    ch_step = c.heads / gst_util_greatest_common_divisor (c.heads,
        c.frame_size);
  }
  if (!gst_sattn_multiples (&rates, rate_step, G_MAXINT))
    return gst_caps_new_empty ();
  if (!gst_sattn_multiples (&chans, ch_step, max_ch)) {
    g_value_unset (&rates);
    return gst_caps_new_empty ();
  }
  s = gst_structure_new ("audio/x-raw", "format", G_TYPE_STRING, "F32LE",
      "layout", G_TYPE_STRING, "interleaved", NULL);
  gst_structure_take_value (s, "rate", &rates);
  gst_structure_take_value (s, "channels", &chans);
  return gst_caps_new_full (s, NULL);
}

/* Whether caps can be used; if not and post, posts one element error that
 * says why (once for the same caps). */
static gboolean
gst_sattn_check_caps (GstSattn * self, GstCaps * caps, gboolean post)
{
  GstSattnSettings c;
  gboolean weights, posted;
  guint64 file_d, d_model;
  gint rate = 0, channels = 0;
  gchar *why = NULL;
  gboolean shape = FALSE;

  gst_sattn_snapshot (self, &c, &weights, &file_d);
  if (!gst_sattn_parse_caps (caps, &rate, &channels)) {
    why = g_strdup (GST_SATTN_UNSUPPORTED_CAPS);
  } else {
    d_model = (guint64) channels * c.frame_size;
    why = gst_sattn_explain (&c, rate, channels, d_model, weights);
    shape = why == NULL && file_d != 0 && d_model != file_d;
  }
  if (why == NULL && !shape)
    return TRUE;

  GST_DEBUG_OBJECT (self, "refusing %" GST_PTR_FORMAT ": %s", caps,
      why ? why : "d_model differs from the weights file");
  GST_OBJECT_LOCK (self);
  posted = !post || (self->posted_caps != NULL &&
      gst_caps_is_equal (caps, self->posted_caps));
  if (!posted)
    gst_caps_replace (&self->posted_caps, caps);
  GST_OBJECT_UNLOCK (self);
  if (!posted && why != NULL) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", why),
        ("caps: %" GST_PTR_FORMAT, caps));
  } else if (!posted) {
    gchar *wpath, *wprefix;
    gboolean zero_attn;
    SattnConfig mc = { 0, };
    SattnWeights w = { 0, };
    SattnMhaWeights *mw = NULL;

    /* The core's own words: which tensor has which shape, and what the
     * stream's d_model would need. */
    GST_OBJECT_LOCK (self);
    wpath = g_strdup (self->weights);
    wprefix = g_strdup (self->weights_prefix);
    zero_attn = self->add_zero_attn;
    GST_OBJECT_UNLOCK (self);
    mc.heads = c.heads;
    if (wpath != NULL && gst_sattn_load_weights (self, wpath, wprefix,
            (guint64) channels * c.frame_size, c.heads, zero_attn, &mc, &w,
            &mw)) {
      /* The file changed since READY->PAUSED and now fits. */
      shape = FALSE;
    }
    sattn_mha_weights_free (mw);
    g_free (wpath);
    g_free (wprefix);
  }
  g_free (why);
  return !shape && why == NULL;
}

/* At READY -> PAUSED: when nothing the upstream peer can produce would
 * work, fail now with one error that says why (for the caps upstream
 * would pick), instead of a refused caps event and upstream's own
 * not-negotiated error later.  TRUE when negotiation may succeed (or
 * upstream cannot tell yet). */
static gboolean
gst_sattn_check_upstream (GstSattn * self)
{
  GstCaps *tmpl, *peer, *ours, *both, *pick;
  gboolean ok;

  tmpl = gst_pad_get_pad_template_caps (self->sinkpad);
  peer = gst_pad_peer_query_caps (self->sinkpad, tmpl);
  gst_caps_unref (tmpl);
  if (peer == NULL || gst_caps_is_any (peer) || gst_caps_is_empty (peer)) {
    /* No peer yet, anything, or nothing we read at all (upstream's own
     * negotiation error says that). */
    gst_clear_caps (&peer);
    return TRUE;
  }
  ours = gst_sattn_allowed_caps (self);
  both = gst_caps_intersect (peer, ours);
  /* Inside ours only settings that fail whatever the caps (hop > window,
   * scale) can still refuse the pick; outside, its rate or channels. */
  pick = gst_caps_fixate (gst_caps_ref (gst_caps_is_empty (both) ? peer :
          both));
  GST_DEBUG_OBJECT (self, "upstream offers %" GST_PTR_FORMAT ", we take %"
      GST_PTR_FORMAT ", checking %" GST_PTR_FORMAT, peer, ours, pick);
  ok = gst_sattn_check_caps (self, pick, TRUE);
  if (ok && gst_caps_is_empty (both)) {
    /* Cannot happen (ours holds every caps that works); say it anyway. */
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("None of the input caps upstream offers works with these "
            "properties"), ("upstream: %" GST_PTR_FORMAT, peer));
    ok = FALSE;
  }
  gst_caps_unref (pick);
  gst_caps_unref (both);
  gst_caps_unref (ours);
  gst_caps_unref (peer);
  return ok;
}

static gboolean
gst_sattn_sink_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstSattn *self = GST_SATTN (parent);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_CAPS:{
      GstCaps *filter, *caps, *res;
      gboolean running;

      gst_query_parse_caps (query, &filter);
      GST_OBJECT_LOCK (self);
      running = self->running;
      GST_OBJECT_UNLOCK (self);
      /* Properties are frozen from READY -> PAUSED on; before that (when
       * pipelines are built and linked) they may still change, so the
       * answer is the template and READY -> PAUSED checks what upstream
       * offers against the final properties. */
      caps = running ? gst_sattn_allowed_caps (self) :
          gst_pad_get_pad_template_caps (pad);
      if (filter) {
        res = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref (caps);
        caps = res;
      }
      GST_LOG_OBJECT (self, "caps query: %" GST_PTR_FORMAT, caps);
      gst_query_set_caps_result (query, caps);
      gst_caps_unref (caps);
      return TRUE;
    }
    case GST_QUERY_ACCEPT_CAPS:{
      GstCaps *caps;

      gst_query_parse_accept_caps (query, &caps);
      /* Refused here, the caps event never arrives: the error is posted
       * now, once, with the reason. */
      gst_query_set_accept_caps_result (query, gst_sattn_check_caps (self,
              caps, TRUE));
      return TRUE;
    }
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

/* ------------------------------------------------------------ events */

/* Whether segment b maps buffer times to running time differently from a
 * (a real change of timeline, which drains and restarts the window):
 * another format, rate or applied rate, or another start, base or offset
 * (stop too when playing backwards).  Position, duration, time (stream
 * time only) and flags are updates that never reset. */
static gboolean
gst_sattn_segment_moves (const GstSegment * a, const GstSegment * b)
{
  if (a->format != b->format || a->rate != b->rate ||
      a->applied_rate != b->applied_rate)
    return TRUE;
  if (a->start != b->start || a->base != b->base || a->offset != b->offset)
    return TRUE;
  return a->rate < 0.0 && a->stop != b->stop;
}

/* The TIME segment the output is in.  TIME segments stay as they are;
 * BYTES and DEFAULT (sample periods) segments are converted with the
 * input rate; any other format (or a segment before caps) becomes a TIME
 * segment from 0 with the same rates and flags.  Buffer timestamps are
 * TIME in every case, and untimestamped input is counted from the
 * segment start. */
static void
gst_sattn_time_segment (GstSattn * self, const GstSegment * in,
    GstSegment * out)
{
  guint64 units = 0;

  if (in->format == GST_FORMAT_TIME) {
    *out = *in;
    return;
  }
  gst_segment_init (out, GST_FORMAT_TIME);
  out->rate = in->rate;
  out->applied_rate = in->applied_rate;
  out->flags = in->flags;
  if (self->rate > 0 && in->format == GST_FORMAT_BYTES)
    units = (guint64) self->rate * self->bpf;
  else if (self->rate > 0 && in->format == GST_FORMAT_DEFAULT)
    units = (guint64) self->rate;
  if (units == 0)
    return;
#define GST_SATTN_TO_TIME(v) ((v) == (guint64) -1 ? (guint64) -1 : \
    gst_util_uint64_scale ((v), GST_SECOND, units))
  out->start = GST_SATTN_TO_TIME (in->start);
  out->stop = GST_SATTN_TO_TIME (in->stop);
  out->time = GST_SATTN_TO_TIME (in->time);
  out->position = GST_SATTN_TO_TIME (in->position);
  out->duration = GST_SATTN_TO_TIME (in->duration);
  out->base = GST_SATTN_TO_TIME (in->base);
  out->offset = GST_SATTN_TO_TIME (in->offset);
#undef GST_SATTN_TO_TIME
}

static void
gst_sattn_flush (GstSattn * self)
{
  if (self->stream)
    sattn_stream_reset (self->stream);
  gst_sattn_obs_reset (&self->obs, self->stream);
  self->carry_len = 0;
  self->carry_invalid = FALSE;
  self->resync_ts = GST_CLOCK_TIME_NONE;
  self->bytes_since_resync = 0;
  self->frames_since_resync = 0;
  self->out_offset = 0;
  self->discont_pending = TRUE;
}

static gboolean
gst_sattn_sink_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstSattn *self = GST_SATTN (parent);
  gboolean res;

  GST_LOG_OBJECT (self, "event %" GST_PTR_FORMAT, event);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS:{
      GstCaps *caps;

      gst_event_parse_caps (event, &caps);
      if (self->refused_caps && gst_caps_is_equal (caps, self->refused_caps)) {
        /* The same caps again (sticky events are re-sent): the error was
         * posted already; refuse them quietly. */
        gst_event_unref (event);
        return FALSE;
      }
      res = gst_sattn_set_caps (self, caps);
      /* Refused caps leave the stream as it was (set_caps changes nothing
       * before it has a working model), and data is refused until caps
       * are accepted: the same caps as before continue the window and
       * the timeline where they were. */
      if (!res && self->stream && GST_PAD_IS_FLUSHING (self->srcpad) &&
          gst_pad_has_current_caps (self->srcpad)) {
        /* Set up, but a flushing seek reached the source pad first: the
         * pad keeps the caps and sends them after the flush.  Refusing
         * them here would refuse them again when they are re-sent. */
        GST_DEBUG_OBJECT (self, "source pad flushing, caps kept for later");
        res = TRUE;
      }
      self->caps_refused = !res;
      gst_caps_replace (&self->refused_caps, res ? NULL : caps);
      gst_event_unref (event);
      return res;
    }
    case GST_EVENT_SEGMENT:{
      GstSegment in, seg;

      gst_event_copy_segment (event, &in);
      gst_sattn_time_segment (self, &in, &seg);
      if (in.format != GST_FORMAT_TIME) {
        /* Downstream gets the TIME segment the output timestamps are in. */
        GstEvent *ev = gst_event_new_segment (&seg);

        gst_event_set_seqnum (ev, gst_event_get_seqnum (event));
        gst_event_unref (event);
        event = ev;
      }
      /* Compared as received: a BYTES or DEFAULT segment that differs
       * only in position is an update even when the input rate (and so
       * its TIME conversion) changed since the last one. */
      if (self->stream && GST_CLOCK_TIME_IS_VALID (self->resync_ts) &&
          gst_sattn_segment_moves (&self->in_segment, &in)) {
        /* A new timeline mid-stream: what is held belongs to the old one,
         * and the next data starts a new window and timeline. */
        GST_DEBUG_OBJECT (self, "new segment, draining");
        gst_sattn_drain (self);
        sattn_stream_reset (self->stream);
        self->resync_ts = GST_CLOCK_TIME_NONE;
      }
      self->segment = seg;
      self->in_segment = in;
      if (gst_pad_has_current_caps (self->srcpad)) {
        gst_clear_event (&self->pending_segment);
        return gst_pad_push_event (self->srcpad, event);
      }
      /* The segment follows the source caps. */
      gst_event_replace (&self->pending_segment, event);
      gst_event_unref (event);
      return TRUE;
    }
    case GST_EVENT_GAP:
      if (self->stream == NULL) {
        GST_DEBUG_OBJECT (self, "gap before caps, dropped");
        gst_event_unref (event);
        return TRUE;
      }
      res = gst_sattn_handle_gap (self, event) == GST_FLOW_OK;
      gst_event_unref (event);
      return res;
    case GST_EVENT_EOS:
      gst_sattn_drain (self);
      gst_sattn_obs_eos (&self->obs, GST_ELEMENT (self), &self->segment);
      return gst_pad_event_default (pad, parent, event);
    case GST_EVENT_FLUSH_START:
      gst_sattn_obs_flush_start (&self->obs, GST_ELEMENT (self));
      return gst_pad_event_default (pad, parent, event);
    case GST_EVENT_FLUSH_STOP:
      gst_sattn_flush (self);
      gst_sattn_obs_flush_stop (&self->obs, GST_ELEMENT (self));
      return gst_pad_event_default (pad, parent, event);
    default:
      return gst_pad_event_default (pad, parent, event);
  }
}

static gboolean
gst_sattn_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstSattn *self = GST_SATTN (parent);

  if (gst_sattn_cache_handle_query (query))
    return TRUE;
  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_LATENCY:{
      gboolean live;
      GstClockTime min, max, held;

      if (!gst_pad_peer_query (self->sinkpad, query))
        return FALSE;
      gst_query_parse_latency (query, &live, &min, &max);
      GST_OBJECT_LOCK (self);
      held = self->held_time;
      GST_OBJECT_UNLOCK (self);
      if (GST_CLOCK_TIME_IS_VALID (held)) {
        min += held;
        if (GST_CLOCK_TIME_IS_VALID (max))
          max += held;
      }
      GST_DEBUG_OBJECT (self, "latency: live %d, min %" GST_TIME_FORMAT
          ", max %" GST_TIME_FORMAT, live, GST_TIME_ARGS (min),
          GST_TIME_ARGS (max));
      gst_query_set_latency (query, live, min, max);
      return TRUE;
    }
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

/* ------------------------------------------------------------ state */

static GstStateChangeReturn
gst_sattn_change_state (GstElement * element, GstStateChange transition)
{
  GstSattn *self = GST_SATTN (element);
  GstStateChangeReturn ret;

  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:{
      gchar *wpath, *wprefix;

      gboolean zero_attn;

      GST_OBJECT_LOCK (self);
      wpath = g_strdup (self->weights);
      wprefix = g_strdup (self->weights_prefix);
      zero_attn = self->add_zero_attn;
      GST_OBJECT_UNLOCK (self);
      if (wpath != NULL) {
        /* Check the file now: a broken one fails the state change with a
         * message, not the first buffer.  d_model 0 = as the file says. */
        SattnConfig mc = { 0, };
        SattnWeights w = { 0, };
        SattnMhaWeights *mw = NULL;
        guint heads;
        gboolean ok;

        GST_OBJECT_LOCK (self);
        heads = self->props.heads;
        GST_OBJECT_UNLOCK (self);
        mc.heads = heads;
        ok = gst_sattn_load_weights (self, wpath, wprefix, 0, heads,
            zero_attn, &mc, &w, &mw);
        sattn_mha_weights_free (mw);
        GST_OBJECT_LOCK (self);
        self->weights_d_model = ok ? mc.d_model : 0;
        GST_OBJECT_UNLOCK (self);
        if (!ok) {
          g_free (wpath);
          g_free (wprefix);
          return GST_STATE_CHANGE_FAILURE;
        }
      }
      g_free (wpath);
      g_free (wprefix);
      GST_OBJECT_LOCK (self);
      gst_clear_caps (&self->posted_caps);
      GST_OBJECT_UNLOCK (self);
      if (!gst_sattn_check_upstream (self))
        return GST_STATE_CHANGE_FAILURE;
      GST_OBJECT_LOCK (self);
      self->running = TRUE;
      GST_OBJECT_UNLOCK (self);
      gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
  gst_segment_init (&self->in_segment, GST_FORMAT_UNDEFINED);
      self->caps_refused = FALSE;
      gst_clear_caps (&self->refused_caps);
      gst_sattn_flush (self);
      break;
    }
    default:
      break;
  }

  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE) {
    if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
      GST_OBJECT_LOCK (self);
      self->running = FALSE;
      GST_OBJECT_UNLOCK (self);
    }
    return ret;
  }

  switch (transition) {
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      gst_sattn_free_stream (self);
      gst_clear_event (&self->pending_segment);
      GST_OBJECT_LOCK (self);
      self->running = FALSE;
      self->held_time = GST_CLOCK_TIME_NONE;
      self->weights_d_model = 0;
      GST_OBJECT_UNLOCK (self);
      gst_sattn_apply_deferred (self);
      break;
    default:
      break;
  }
  return ret;
}
