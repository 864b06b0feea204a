/* GStreamer sattn element: GObject boilerplate, class_init / init /
 * finalize, state changes, and the element's state for a stream:
 * set_caps makes a model, a stream and buffers for new caps and takes
 * them over.  This file owns that state and calls the others, which
 * never call back into it: the properties in gstsattn-props.c, the caps
 * rules in gstsattn-caps.c, models in gstsattn-model.c, the memory budget
 * in gstsattn-memory.c, weights swaps in gstsattn-swap.c, the timeline
 * and the feeding of frames to the core in gstsattn-feed.c; the shared
 * private types are in gstsattn-priv.h.
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
 * The sink caps are `audio/x-raw`, native-endian F32, interleaved, read
 * with #GstAudioInfo.  The output, shaped by #GstSattn:output (d_out =
 * d_model here), has a row rate of input rate / frame-size, divided by
 * hop in the pooled modes:
 *
 * - `frames`: one row of d_out values per input frame;
 * - `window`: one row of window × d_out values per window;
 * - `mean`, `last`: one row of d_out values per window, the mean of the
 *   valid rows or the last frame's row;
 * - `classes`: a whole model's class probabilities, one row per window
 *   (`other/tensors` only).
 *
 * ## Whole models and decisions
 *
 * A weights file holding a whole model (an embedding, N encoder layers,
 * pooling and a head: python/sattn/nn.py's SignalTransformer, see
 * docs/weights.md) runs on every window as one sequence: output `classes`
 * (the head's softmax), `mean` / `last` (the pooled row) or `window` (the
 * last layer's rows); `frames` is refused.  With `classes` the element
 * posts a `sattn-class` element message (label, index, probability,
 * top-k-labels, top-k-probabilities, timestamp, duration, stream-time,
 * running-time, window-start) when the recognised class changes, and
 * otherwise at most once per #GstSattn:message-interval; labels come
 * from the file or from #GstSattn:labels.
 * |[
 * gst-launch-1.0 -m filesrc location=iq.f32 ! rawaudioparse format=pcm pcm-format=f32le num-channels=2 sample-rate=64000 ! sattn weights=recognizer.safetensors frame-size=16 window=64 hop=32 output=classes ! fakesink
 * ]|
 *
 * The source caps are `audio/x-raw` (native-endian F32, interleaved, one
 * row per sample period, unpositioned: `channel-mask=0`) when the row
 * rate is a whole number and downstream takes it; otherwise NNStreamer's
 * `other/tensors, format=static, num_tensors=1, types=float32,
 * dimensions=d_out:1` (`d_out:window` in window mode, innermost first)
 * with `framerate` the exact fraction, one row per buffer, stamped at its
 * first new frame and lasting its hop (e.g. hop 256 at 16 kHz: 125/2).
 * GStreamer's audio converter (audioconvert, audioresample) takes at most
 * 63 channels and crashes on more, so rows of 64 or more values go out as
 * `audio/x-raw` only to a downstream that asks for exactly that channel
 * count (a capsfilter) or takes any caps (fakesink, filesink, appsink);
 * to other audio elements they are refused with an error that says so,
 * at READY -> PAUSED when the rows' width is known then.
 *
 * A combination of properties that cannot work with the input (hop >
 * window, heads not dividing d_model, a weights file of another d_model,
 * or a row rate that is not whole when downstream takes no tensors, ...)
 * fails negotiation with one element error that names the property values
 * that would work: at READY -> PAUSED when nothing upstream offers can
 * work, otherwise when ACCEPT_CAPS refuses the caps (before the caps
 * event).  In PAUSED and PLAYING the sink CAPS query answers channel
 * counts that fill whole heads (or the weights file's d_model) and, in
 * this order, the common rates whose row rate is whole, every such rate,
 * then (when downstream takes other/tensors) any rate, so that a source
 * fixating to the rate nearest its default picks a common one that gives
 * audio/x-raw (frame-size=64 after audiotestsrc: 48 kHz); in NULL and
 * READY, while properties may still change, it answers the template.
 * Refused caps leave the element as it was: when the previous caps come
 * back, window and timeline continue.  When downstream refuses the output
 * caps, the error names them and what downstream accepts.
 *
 * Discontinuities are found by #GstAudioStreamAlign on the input's own
 * timestamps, with #GstSattn:alignment-threshold and #GstSattn:discont-wait
 * as in audiobuffersplit; the output timeline is the frame counter's.
 *
 * The weights file is read once per READY -> PAUSED and its model built
 * then (shared through the model cache); caps never read it again.
 *
 * Geometry properties (all but #GstSattn:invalid-frames,
 * #GstSattn:alignment-threshold, #GstSattn:discont-wait,
 * #GstSattn:message-interval, #GstSattn:map-head, #GstSattn:weights and
 * #GstSattn:weights-prefix) set while PAUSED or PLAYING take effect at the
 * next READY; the first such change of each property per run posts a
 * warning.
 *
 * #GstSattn:weights and #GstSattn:weights-prefix set while PAUSED or
 * PLAYING swap the model: the file is loaded and checked on a loader
 * thread and takes over at the next window boundary, its stream primed
 * with the frames the following windows hold, so that from there on the
 * output is the new model's on the same frames; the element then posts an
 * element message `sattn-weights-swapped` (`weights`, `frame`,
 * `timestamp`).  A file that cannot be read, or whose model has another
 * d_out, other extra keys or is of another kind (a whole model where one
 * layer runs, or other classes), posts a warning naming it and the
 * reason, and the running model stays; the weights properties then name
 * the file in use again (with a notify), so that new caps and the next
 * READY do not read the refused file.  New caps that arrive before the
 * file was looked at apply the same rule; so does the first caps event
 * for a file set between READY -> PAUSED and the first caps (the model
 * read at READY is the one in use).  Only when the model in use cannot
 * serve the new caps at all is the requested file the configuration,
 * failing with the error READY would post.  A refused swap never stops
 * the pipeline.
 *
 * Every output buffer carries a GstSattnMeta (installed header
 * <sattn/gstsattn-meta.h>): per output row, the input frames it accounts
 * for, the running-time span of its window, its usable and masked keys
 * and its fully masked softmax rows.
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
 * 10 s of stream time.  An output row that overflows after the attention
 * (in the output projection or, in an encoder layer, a LayerNorm, the
 * feed-forward's linear1 or linear2, or the residual sum) is zeros (a
 * buffer of only such rows is flagged GAP) under every
 * #GstSattn:invalid-frames policy, `error` included (that policy is about
 * input frames: the stream goes on), with the same kind of warning naming
 * the part that overflowed, so finite input never gives a non-finite
 * output.  At EOS the
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
 * |[
 * gst-launch-1.0 audiotestsrc num-buffers=5 ! audio/x-raw,format=F32LE,channels=2,rate=16000 ! sattn output=window window=64 hop=64 ! audio/x-raw,channels=128 ! level ! fakesink
 * ]| Whole windows of 64 rows × 2 features, 128 channels: wider than an
 * audio converter takes, so the capsfilter asks for them explicitly.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn.h"
#include "gstsattn-priv.h"
#include "gstsattn-cache.h"

#include <string.h>

GST_DEBUG_CATEGORY (gst_sattn_debug);

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK,
    GST_PAD_ALWAYS,
    GST_STATIC_CAPS ("audio/x-raw, format = (string) " GST_AUDIO_NE (F32)
        ", layout = (string) interleaved, rate = (int) [ 1, MAX ], "
        "channels = (int) [ 1, MAX ]"));

/* audio/x-raw when the output rate is a whole number (preferred), the
 * NNStreamer tensor form (one row per buffer, fractional framerate) at any
 * rate; see gst_sattn_src_caps_new. */
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC,
    GST_PAD_ALWAYS,
    GST_STATIC_CAPS ("audio/x-raw, format = (string) " GST_AUDIO_NE (F32)
        ", layout = (string) interleaved, rate = (int) [ 1, MAX ], "
        "channels = (int) [ 1, MAX ]; "
        "other/tensors, format = (string) static, num_tensors = (int) 1, "
        "types = (string) float32, framerate = (fraction) [ 0/1, MAX ]"));

#define gst_sattn_parent_class parent_class
G_DEFINE_TYPE (GstSattn, gst_sattn, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (sattn, "sattn", GST_RANK_NONE, GST_TYPE_SATTN);

static void gst_sattn_finalize (GObject * object);
static gboolean gst_sattn_sink_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
static gboolean gst_sattn_src_query (GstPad * pad, GstObject * parent,
    GstQuery * query);
static GstStateChangeReturn gst_sattn_change_state (GstElement * element,
    GstStateChange transition);

static void
gst_sattn_class_init (GstSattnClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->finalize = gst_sattn_finalize;
  gst_sattn_props_install (gobject_class);

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);

  gst_element_class_set_static_metadata (element_class,
      "Sliding-window self-attention", "Filter/Analyzer/Audio",
      "Cuts an F32 signal into frames and sliding windows and runs masked "
      "multi-head self-attention on each window (identity projections, a "
      "trained attention module or encoder layer, or a whole trained "
      "model), pushing feature rows (audio/x-raw or other/tensors) or "
      "class probabilities", "sattn project");

  element_class->change_state = GST_DEBUG_FUNCPTR (gst_sattn_change_state);

  /* Window metadata on every output buffer (gstsattn-meta.h): registered
   * with the class, before any buffer can carry it. */
  gst_sattn_meta_get_info ();
  gst_sattn_meta_custom_get_info ();

  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_OUTPUT, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_START, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_PRECISION, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_CONTRACT, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_INVALID_FRAMES, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_POSITIONS, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_SATTN_ACTIVATION, 0);

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

  gst_sattn_props_init (self);
  gst_sattn_classes_reset (&self->classes);
  self->held_time = GST_CLOCK_TIME_NONE;
  self->resync_ts = GST_CLOCK_TIME_NONE;
  gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
  gst_segment_init (&self->in_segment, GST_FORMAT_UNDEFINED);
  gst_sattn_swap_init (&self->swap);
}

/* Frees the model, the stream and every buffer sized by them. */
void
gst_sattn_free_stream (GstSattn * self)
{
  /* A model loading or loaded for a swap was made for this stream. */
  gst_sattn_swap_discard (&self->swap);
  sattn_stream_free (self->stream);
  self->stream = NULL;
  gst_sattn_cache_release (self->model);
  self->model = NULL;
  g_clear_pointer (&self->carry, g_free);
  g_clear_pointer (&self->scratch, g_free);
  g_clear_pointer (&self->zeros, g_free);
  g_clear_pointer (&self->invalid_flags, g_free);
  g_clear_pointer (&self->info, g_free);
  g_clear_pointer (&self->checks, g_free);
  self->info_cap = 0;
  g_clear_pointer (&self->out_info, g_free);
  self->out_info_cap = 0;
  g_clear_pointer (&self->align, gst_audio_stream_align_free);
  self->carry_len = 0;
  self->carry_invalid = FALSE;
  gst_clear_caps (&self->sink_caps);
}

/* ------------------------------------------------------------ caps */

/* A stream configuration being made for new caps: all that set_caps
 * makes before the element takes it over, released in one place
 * (gst_sattn_setup_clear) whatever step fails. */
typedef struct
{
  GstSattnSettings c;           /* the settings of the new model */
  gint rate, channels;
  guint64 d_model;
  gchar *key;                   /* the weights key the properties ask for */
  gchar *in_use;                /* the model in use's key */
  gchar *wpath, *wprefix;
  gboolean zero_attn;
  gboolean changed;             /* the properties ask for another file
                                   than the one in use (set while running) */
  gboolean reverted;            /* that request was refused */
  SattnModel *prepared;         /* the file's model read at READY, taken
                                   over from wmodel */
  SattnModel *model;
  SattnStreamConfig sc;
  SattnStream *stream;
  gsize chunk;
  GstSattnScratch scratch;
  gchar **labels;               /* output=classes */
  GstCaps *srccaps;
  gboolean tensors;             /* srccaps are other/tensors */
  GstAudioStreamAlign *align;
} GstSattnSetup;

static void
gst_sattn_setup_clear (GstSattnSetup * s)
{
  g_free (s->key);
  g_free (s->in_use);
  g_free (s->wpath);
  g_free (s->wprefix);
  gst_sattn_cache_release (s->prepared);
  gst_sattn_cache_release (s->model);
  sattn_stream_free (s->stream);
  gst_sattn_scratch_clear (&s->scratch);
  g_strfreev (s->labels);
  gst_clear_caps (&s->srccaps);
  g_clear_pointer (&s->align, gst_audio_stream_align_free);
}

/* What the model is built from (the properties, and the weights file
 * read at READY -> PAUSED when it is the one they ask for, for these
 * frames: its model is taken over), read under the object lock. */
static void
gst_sattn_setup_inputs (GstSattn * self, GstSattnSetup * s)
{
  GST_OBJECT_LOCK (self);
  /* The weights the model was built from: file and prefix (a swap while
   * running changes them). */
  s->key = gst_sattn_model_inputs (self, &s->c, &s->wpath, &s->wprefix,
      &s->zero_attn);
  s->d_model = (guint64) s->channels * s->c.frame_size;
  /* Weights set while running that no loader has taken up yet: the file
   * in use is the running model's, or before the first caps the one read
   * at READY. */
  s->in_use = g_strdup (self->stream != NULL ? self->model_key : self->wkey);
  s->changed = self->running && g_strcmp0 (s->key, s->in_use) != 0;
  if (self->wmodel != NULL && s->key != NULL &&
      g_strcmp0 (self->wkey, s->key) == 0 && self->wcfg.d_model == s->d_model)
    s->prepared = g_steal_pointer (&self->wmodel);
  GST_OBJECT_UNLOCK (self);
}

/* Caps that cannot be used leave the element as it was: the file's model
 * read at READY goes back for the next caps. */
static void
gst_sattn_setup_unprepare (GstSattn * self, GstSattnSetup * s)
{
  if (s->prepared == NULL)
    return;
  GST_OBJECT_LOCK (self);
  self->wmodel = g_steal_pointer (&s->prepared);
  GST_OBJECT_UNLOCK (self);
}

/* The model for the new caps into s->model, and s->sc as the settings
 * make it; FALSE after posting the error that says why. */
static gboolean
gst_sattn_setup_model (GstSattn * self, GstSattnSetup * s)
{
  SattnConfig mc = { 0, };
  SattnWeights weights = { 0, };
  SattnStatus st = SATTN_OK;
  gchar err[512] = "";

  gst_sattn_core_config (&s->c, s->d_model, &mc, &s->sc);
  weights.add_zero_attn = s->zero_attn;
  if (s->changed) {
    /* Weights set while running and not yet seen by a loader: the rule
     * of a swap. */
    s->model = gst_sattn_swap_caps_request (self, &s->c, s->d_model,
        s->wpath, s->wprefix, s->zero_attn, g_steal_pointer (&s->prepared),
        s->in_use, &s->reverted);
    return s->model != NULL;
  }
  if (s->prepared != NULL) {
    /* The weights file's model, built when the file was read at READY ->
     * PAUSED: its reference is this stream's now. */
    s->model = g_steal_pointer (&s->prepared);
    return TRUE;
  }
  if (s->key != NULL && self->model != NULL && self->d_model == s->d_model &&
      g_strcmp0 (self->model_key, s->key) == 0 &&
      gst_sattn_cache_ref (self->model)) {
    /* New caps, same frames (the settings are frozen while running): the
     * running model serves them. */
    s->model = self->model;
    return TRUE;
  }
  /* Read here only when nothing was prepared (caps without a state
   * change, or a model built outside the cache): the one loader, its
   * model shared with every element whose file, prefix and options
   * match. */
  if (s->wpath != NULL) {
    s->model = gst_sattn_load_model (self, s->wpath, s->wprefix, s->d_model,
        &s->c, s->zero_attn);
    return s->model != NULL;
  }
  s->model = gst_sattn_cache_acquire (NULL, NULL, &mc,
      s->zero_attn ? &weights : NULL, &st);
  if (s->model != NULL)
    return TRUE;
  /* The core's words for what is wrong (the model was refused before
   * anything was allocated unless st is SATTN_E_NOMEM). */
  if (st == SATTN_E_NOMEM || sattn_model_check (&mc, s->zero_attn ?
          &weights : NULL, err, sizeof err) == SATTN_OK)
    g_strlcpy (err, sattn_status_string (st), sizeof err);
  GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
      ("Could not set up attention for %" G_GUINT64_FORMAT "-value frames "
          "with heads=%u head-dim=%u positions=%s: %s", s->d_model,
          (guint) mc.heads, s->c.head_dim,
          gst_sattn_positions_nick (s->c.positions), err),
      ("%s", sattn_status_string (st)));
  return FALSE;
}

/* The stream of s->model and the element's buffers for it, within the
 * memory budget; FALSE after posting the error that says why. */
static gboolean
gst_sattn_setup_stream (GstSattn * self, GstSattnSetup * s)
{
  SattnStatus st = SATTN_OK;
  gchar err[512] = "";

  s->sc.invalid_policy = (SattnInvalidPolicy) gst_sattn_get_policy (self);
  gst_sattn_obs_stream_config (&self->obs, GST_ELEMENT (self), &s->sc);
  /* What the file's model cannot run with (a whole model with
   * output=frames, say), in the core's words as at READY, before its
   * size is asked for: there is none. */
  if (sattn_stream_config_check (s->model, &s->sc, err, sizeof err) != SATTN_OK) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("The weights file %s cannot run with these properties: %s",
            s->wpath ? s->wpath : "(none: identity projections)", err), (NULL));
    return FALSE;
  }
  if (s->c.output == GST_SATTN_OUTPUT_CLASSES &&
      !gst_sattn_take_labels (self, s->model, &s->labels))
    return FALSE;
  gst_sattn_check_trained_for (self, &s->c, s->rate, s->channels);
  s->chunk = gst_sattn_chunk_frames (&s->c, s->d_model);
  if (!gst_sattn_check_memory (self, s->model, &s->sc, &s->c, s->d_model,
          s->chunk))
    return FALSE;
  s->stream = sattn_stream_new (s->model, &s->sc, &st);
  if (s->stream == NULL && st == SATTN_E_NOMEM) {
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate the attention stream for window=%u with %"
            G_GUINT64_FORMAT "-value frames: %" G_GSIZE_FORMAT " bytes",
            s->c.window, s->d_model, sattn_stream_bytes (s->model, &s->sc)),
        ("%s", sattn_status_string (st)));
    return FALSE;
  }
  if (s->stream == NULL) {
    if (sattn_stream_config_check (s->model, &s->sc, err, sizeof err) ==
        SATTN_OK)
      g_strlcpy (err, sattn_status_string (st), sizeof err);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("Could not set up a stream with window=%u hop=%u: %s", s->c.window,
            s->c.hop, err), ("%s", sattn_status_string (st)));
    return FALSE;
  }
  /* The element's own buffers, before the old stream is let go. */
  return gst_sattn_alloc_scratch (self, &s->scratch, &s->c, s->d_model,
      s->chunk);
}

/* The element takes the setup s over (what it takes is NULL in s): the
 * old configuration's frames go out under the old caps, the new model,
 * stream and buffers are the element's, and the timeline continues where
 * the old one ended. */
static void
gst_sattn_take_setup (GstSattn * self, GstSattnSetup * s, GstCaps * caps)
{
  GstClockTime next_ts = GST_CLOCK_TIME_NONE;
  gchar *now;

  if (self->stream) {
    gst_sattn_drain (self);
    next_ts = gst_sattn_expected_ts (self);
  }
  gst_sattn_free_stream (self);

  self->cfg = s->c;
  self->model = g_steal_pointer (&s->model);
  g_free (self->model_key);
  self->model_key = s->reverted ? g_steal_pointer (&s->in_use) :
      g_steal_pointer (&s->key);
  /* The weights properties as read here are served (or were refused and
   * name the model in use again): no swap to start for them. */
  GST_OBJECT_LOCK (self);
  now = gst_sattn_weights_key (self->weights, self->weights_prefix);
  if (g_strcmp0 (now, self->model_key) == 0)
    self->swap.requested = FALSE;
  GST_OBJECT_UNLOCK (self);
  g_free (now);
  self->stream = g_steal_pointer (&s->stream);
  self->stream_config = s->sc;
  if (s->c.output == GST_SATTN_OUTPUT_CLASSES)
    gst_sattn_classes_setup (&self->classes, g_steal_pointer (&s->labels),
        (guint) sattn_model_classes (self->model));
  else
    gst_sattn_classes_clear (&self->classes);
  self->sink_caps = gst_caps_ref (caps);
  self->rate = s->rate;
  self->channels = s->channels;
  self->bpf = (gsize) s->channels * sizeof (float);
  self->d_model = (gsize) s->d_model;
  self->frame_bytes = (gsize) s->d_model * sizeof (float);
  self->row_floats = sattn_stream_row_floats (self->stream);
  self->chunk = s->chunk;
  self->carry = s->scratch.carry;
  self->scratch = s->scratch.scratch;
  self->zeros = s->scratch.zeros;
  self->invalid_flags = s->scratch.invalid_flags;
  self->info = s->scratch.info;
  self->checks = s->scratch.checks;
  self->info_cap = s->scratch.info_cap;
  self->out_info = s->scratch.out_info;
  self->out_info_cap = s->scratch.out_info_cap;
  memset (&s->scratch, 0, sizeof (s->scratch));
  self->tensor_out = s->tensors;
  self->align = g_steal_pointer (&s->align);
  gst_sattn_obs_configure (&self->obs, GST_ELEMENT (self), self->model,
      self->stream, &s->sc, s->rate, s->c.frame_size, s->c.scale);

  /* A new timeline, continuing where the old one ended (if any). */
  self->resync_ts = GST_CLOCK_TIME_NONE;
  if (GST_CLOCK_TIME_IS_VALID (next_ts)) {
    gst_sattn_start_timeline (self, next_ts);
    gst_sattn_align_restart (self, next_ts, 0);
  }
}

/* New caps: a model, a stream and buffers for them, and source caps that
 * downstream takes, all made before anything changes; then the element
 * takes them over.  Refused caps leave the element as it was. */
static gboolean
gst_sattn_set_caps (GstSattn * self, GstCaps * caps)
{
  GstSattnSetup s = { 0, };
  GstClockTime held;
  gboolean res = FALSE;

  if (self->sink_caps && gst_caps_is_equal (caps, self->sink_caps))
    return TRUE;
  GST_DEBUG_OBJECT (self, "sink caps %" GST_PTR_FORMAT, caps);

  if (!gst_sattn_parse_caps (caps, &s.rate, &s.channels)) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (GST_SATTN_UNSUPPORTED_CAPS),
        ("caps: %" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  gst_sattn_setup_inputs (self, &s);
  if (!gst_sattn_validate (self, &s.c, s.rate, s.channels, s.d_model,
          s.wpath != NULL)) {
    gst_sattn_setup_unprepare (self, &s);
    goto done;
  }
  if (!gst_sattn_setup_model (self, &s) || !gst_sattn_setup_stream (self, &s))
    goto done;
  /* Downstream must take the output before anything changes. */
  s.srccaps = gst_sattn_pick_src_caps (self, &s.c, s.rate, s.channels,
      s.stream, caps, &s.tensors);
  if (s.srccaps == NULL)
    goto done;
  s.align = gst_audio_stream_align_new (s.rate, 0, 0);

  gst_sattn_take_setup (self, &s, caps);
  /* What the element holds back: the frames before the first window (the
   * stream is new, so the core's count from here). */
  held = gst_util_uint64_scale (sattn_stream_frames_to_window (self->stream)
      * self->cfg.frame_size, GST_SECOND, self->rate);
  GST_OBJECT_LOCK (self);
  self->held_time = held;
  GST_OBJECT_UNLOCK (self);

  GST_DEBUG_OBJECT (self, "d_model %" G_GUINT64_FORMAT ", src caps %"
      GST_PTR_FORMAT, s.d_model, s.srccaps);
  res = gst_pad_set_caps (self->srcpad, s.srccaps);
  if (self->pending_segment) {
    gst_pad_push_event (self->srcpad, self->pending_segment);
    self->pending_segment = NULL;
  }
done:
  gst_sattn_setup_clear (&s);
  return res;
}

/* Caps are set up here, the element's state; every other event is the
 * data path's (gstsattn-feed.c). */
static gboolean
gst_sattn_sink_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstSattn *self = GST_SATTN (parent);
  GstCaps *caps;
  gboolean res;

  if (GST_EVENT_TYPE (event) != GST_EVENT_CAPS)
    return gst_sattn_feed_event (pad, parent, event);
  GST_LOG_OBJECT (self, "event %" GST_PTR_FORMAT, event);
  gst_event_parse_caps (event, &caps);
  if (self->refused_caps && gst_caps_is_equal (caps, self->refused_caps)) {
    /* The same caps again (sticky events are re-sent): the error was
     * posted already; refuse them quietly. */
    gst_event_unref (event);
    return FALSE;
  }
  res = gst_sattn_set_caps (self, caps);
  /* Refused caps leave the stream as it was (set_caps changes nothing
   * before it has a working model), and data is refused until caps are
   * accepted: the same caps as before continue the window and the
   * timeline where they were. */
  if (!res && self->stream && GST_PAD_IS_FLUSHING (self->srcpad) &&
      gst_pad_has_current_caps (self->srcpad)) {
    /* Set up, but a flushing seek reached the source pad first: the pad
     * keeps the caps and sends them after the flush.  Refusing them here
     * would refuse them again when they are re-sent. */
    GST_DEBUG_OBJECT (self, "source pad flushing, caps kept for later");
    res = TRUE;
  }
  self->caps_refused = !res;
  gst_caps_replace (&self->refused_caps, res ? NULL : caps);
  gst_event_unref (event);
  return res;
}

/* The source pad's queries: LATENCY adds what the element holds back;
 * the model cache's custom query (gstsattn-cache.h). */
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

static void
gst_sattn_finalize (GObject * object)
{
  GstSattn *self = GST_SATTN (object);

  gst_sattn_swap_stop (&self->swap);
  gst_sattn_free_stream (self);
  gst_sattn_cache_release (self->wmodel);
  self->wmodel = NULL;
  g_clear_pointer (&self->wkey, g_free);
  g_clear_pointer (&self->model_key, g_free);
  gst_sattn_swap_clear (&self->swap);
  gst_clear_event (&self->pending_segment);
  gst_sattn_props_clear (self);
  gst_sattn_classes_clear (&self->classes);
  gst_clear_caps (&self->refused_caps);
  gst_clear_caps (&self->posted_caps);
  gst_sattn_obs_finalize (&self->obs);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* ------------------------------------------------------------ state */

static GstStateChangeReturn
gst_sattn_change_state (GstElement * element, GstStateChange transition)
{
  GstSattn *self = GST_SATTN (element);
  GstStateChangeReturn ret;

  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:{
      /* Read and check the weights file now, once: a broken one fails
       * the state change with a message, not the first buffer. */
      if (!gst_sattn_prepare_weights (self))
        return GST_STATE_CHANGE_FAILURE;
      GST_OBJECT_LOCK (self);
      gst_clear_caps (&self->posted_caps);
      GST_OBJECT_UNLOCK (self);
      if (!gst_sattn_check_upstream (self)
          || !gst_sattn_check_downstream (self))
        return GST_STATE_CHANGE_FAILURE;
      GST_OBJECT_LOCK (self);
      self->running = TRUE;
      GST_OBJECT_UNLOCK (self);
      gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
      gst_segment_init (&self->in_segment, GST_FORMAT_UNDEFINED);
      self->caps_refused = FALSE;
      gst_clear_caps (&self->refused_caps);
      self->outside_windows = self->outside_total = 0;
      self->outside_warned = GST_CLOCK_TIME_NONE;
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
    case GST_STATE_CHANGE_PAUSED_TO_READY:{
      SattnModel *wmodel;

      /* Pads are deactivated: cancel and join a weights loader. */
      gst_sattn_swap_stop (&self->swap);
      gst_sattn_free_stream (self);
      gst_clear_event (&self->pending_segment);
      GST_OBJECT_LOCK (self);
      self->running = FALSE;
      self->held_time = GST_CLOCK_TIME_NONE;
      self->weights_d_model = 0;
      wmodel = self->wmodel;
      self->wmodel = NULL;
      GST_OBJECT_UNLOCK (self);
      gst_sattn_cache_release (wmodel);
      gst_sattn_apply_deferred (self);
      break;
    }
    default:
      break;
  }
  return ret;
}
