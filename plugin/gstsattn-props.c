/* The sattn element's properties: their ids, defaults and specs,
 * installed by concern (geometry, attention, model, decisions, stream;
 * the observability ones are gstsattn-obs.c's), read and written under
 * the object lock, and those that cannot change while PAUSED or PLAYING
 * deferred to the next READY.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-priv.h"

#include <string.h>

#define DEFAULT_WINDOW 64
#define DEFAULT_HOP 16
#define DEFAULT_FRAME_SIZE 1
/* The heads property's 0 (unset): one head without weights; with weights
 * the loader takes the file's num_heads metadata (props.heads_set). */
#define DEFAULT_HEADS 1
#define DEFAULT_HEAD_DIM 0
#define DEFAULT_VALUE_DIM 0
#define DEFAULT_SCALE 0.0
#define DEFAULT_CAUSAL FALSE
#define DEFAULT_LOOKBACK 0
#define DEFAULT_OUTPUT GST_SATTN_OUTPUT_FRAMES
#define DEFAULT_START GST_SATTN_START_PAD
#define DEFAULT_PRECISION GST_SATTN_PRECISION_EXACT
#define DEFAULT_INVALID_FRAMES GST_SATTN_INVALID_FRAMES_MASK
#define DEFAULT_THREADS 1
/* As audiobuffersplit's. */
#define DEFAULT_ALIGNMENT_THRESHOLD (40 * GST_MSECOND)
#define DEFAULT_DISCONT_WAIT (1 * GST_SECOND)
#define DEFAULT_POSITIONS GST_SATTN_POSITIONS_NONE
#define DEFAULT_ROPE_BASE 10000.0
#define DEFAULT_ACTIVATION GST_SATTN_ACTIVATION_RELU
#define DEFAULT_NORM_FIRST FALSE
#define DEFAULT_NORM_EPS 1e-5
#define DEFAULT_CONTRACT GST_SATTN_CONTRACT_ENFORCE
#define DEFAULT_MIN_PROBABILITY -1.0

enum
{
  PROP_0,
  PROP_WINDOW,
  PROP_HOP,
  PROP_FRAME_SIZE,
  PROP_HEADS,
  PROP_HEAD_DIM,
  PROP_VALUE_DIM,
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
  PROP_POSITIONS,
  PROP_ROPE_BASE,
  PROP_ACTIVATION,
  PROP_NORM_FIRST,
  PROP_NORM_EPS,
  PROP_ALIGNMENT_THRESHOLD,
  PROP_DISCONT_WAIT,
  PROP_LABELS,
  PROP_TOP_K,
  PROP_META_STRUCTURE,
  PROP_PRECISION,
  PROP_CONTRACT,
  PROP_MIN_PROBABILITY,
  /* gstsattn-obs.c's start at GST_SATTN_OBS_PROP_FIRST */
};

/* Properties change in READY only (the model and its stream are built
 * from them at caps time), or also while PAUSED and PLAYING. */
#define PARAM_READY (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_READY)
#define PARAM_PLAYING (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_PLAYING)

/* The frames and windows (geometry: READY only; the model's input
 * contract gives what is not set). */
static void
gst_sattn_install_geometry_props (GObjectClass * gobject_class)
{
  g_object_class_install_property (gobject_class, PROP_WINDOW,
      g_param_spec_uint ("window", "Window",
          "Frames per attention window (n); keys and queries of one "
          "computation", 1, MAX_WINDOW, DEFAULT_WINDOW, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_HOP,
      g_param_spec_uint ("hop", "Hop",
          "New frames between two windows (h, 1 <= hop <= window); in "
          "pooled output modes the output rate is the frame rate / hop",
          1, MAX_WINDOW, DEFAULT_HOP, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_FRAME_SIZE,
      g_param_spec_uint ("frame-size", "Frame size",
          "Sample periods per frame; a frame is frame-size periods of all "
          "channels (d_model = channels x frame-size); must divide the "
          "input rate", 1, MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_OUTPUT,
      g_param_spec_enum ("output", "Output",
          "What is pushed downstream: one row per input frame, whole "
          "windows, or one pooled row per window", GST_TYPE_SATTN_OUTPUT,
          DEFAULT_OUTPUT, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_START,
      g_param_spec_enum ("start", "Start",
          "Before the first window is full: compute with the missing "
          "frames masked, or wait for a full window", GST_TYPE_SATTN_START,
          DEFAULT_START, PARAM_READY));
}

/* The attention's shape without weights and how a stream computes it
 * (READY only). */
static void
gst_sattn_install_attention_props (GObjectClass * gobject_class)
{
  g_object_class_install_property (gobject_class, PROP_HEADS,
      g_param_spec_uint ("heads", "Heads",
          "Attention heads; 0 = unset: 1 head without weights, the "
          "weights file's num_heads metadata with (a file without it is "
          "refused unless heads or head-dim is set or its layout has one "
          "head).  Set with weights, it must agree with that metadata; "
          "without weights it must divide d_model when head-dim is 0",
          0, MAX_HEADS, 0, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_HEAD_DIM,
      g_param_spec_uint ("head-dim", "Head dimension",
          "Per-head query/key size d_k: queries and keys have heads x "
          "head-dim values, any size with weights (0 = as the weights "
          "file's shapes say, or d_model / heads without weights); "
          "identity projections (no weights) need heads x head-dim = "
          "d_model", 0, MAX_D_MODEL, DEFAULT_HEAD_DIM, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_VALUE_DIM,
      g_param_spec_uint ("value-dim", "Value dimension",
          "Per-head value size d_v (0 = head-dim, or as the weights file "
          "says); without an output projection an output row has heads x "
          "value-dim values; identity projections need heads x value-dim "
          "= d_model", 0, MAX_D_MODEL, DEFAULT_VALUE_DIM, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_SCALE,
      g_param_spec_double ("scale", "Scale",
          "Score scale applied before the softmax (0 = 1/sqrt(head-dim), "
          "1 = unscaled); scores are float32, so a positive value below "
          "the smallest normal float (1.18e-38) is refused at negotiation",
          0.0, G_MAXFLOAT, DEFAULT_SCALE, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_CAUSAL,
      g_param_spec_boolean ("causal", "Causal",
          "A query sees only keys at or before its own frame",
          DEFAULT_CAUSAL, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_LOOKBACK,
      g_param_spec_uint ("lookback", "Lookback",
          "A query sees keys at most this many frames back (0 = the whole "
          "window)", 0, MAX_WINDOW, DEFAULT_LOOKBACK, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_THREADS,
      g_param_spec_int ("threads", "Threads",
          "threads computing this element's stream (1 = the streaming "
          "thread only; 0 = one per available CPU); the model is shared "
          "whatever the count", 0, MAX_THREADS, DEFAULT_THREADS, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_PRECISION,
      g_param_spec_enum ("precision", "Precision",
          "How the model sums its linears: exact (default; an attention "
          "layer's V and output projection, an encoder layer's and a whole "
          "model's linears in double, error at or below PyTorch "
          "float32's) or fast (in float as PyTorch float32 does, error "
          "about PyTorch float32's: an attention or encoder layer's "
          "projections, about 13% less time per hop on a 64-channel "
          "window; a whole model's every linear, feed-forward and "
          "LayerNorm, about 1.7 times the windows per CPU second)",
          GST_TYPE_SATTN_PRECISION, DEFAULT_PRECISION, PARAM_READY));
}

/* The weights file (swapped while running) and the settings its
 * metadata gives (READY only). */
static void
gst_sattn_install_model_props (GObjectClass * gobject_class)
{
  g_object_class_install_property (gobject_class, PROP_WEIGHTS,
      g_param_spec_string ("weights", "Weights",
          "safetensors file of trained weights (NULL = identity "
          "projections): an attention module in any of nine layouts "
          "(nn.MultiheadAttention packed or separate, Hugging Face q_proj, "
          "BERT query, to_q, wq, W_q, fused qkv), an "
          "nn.TransformerEncoderLayer, or a whole model (embedding, encoder "
          "layers, pooling, head) run on every window; its metadata gives "
          "heads, positions and the encoder settings.  Read "
          "and checked once, on READY->PAUSED (models are shared between "
          "elements), not again when caps arrive.  Set while PAUSED or "
          "PLAYING: loaded off "
          "the streaming thread, it takes over at a window boundary if it "
          "has the running model's d_model, d_out and kind (else a "
          "warning, the running model stays and this property names its "
          "file again).  A name without '/' that is no file here is an "
          "installed model: weights=recogniser is the first "
          "recogniser.safetensors in sattn/models of the user's data "
          "directory, in " SATTN_MODELS_DIR ", in sattn/models of "
          "$XDG_DATA_DIRS (the Debian package's: "
          "/usr/share/sattn/models); reading the property gives the file "
          "found", NULL, PARAM_PLAYING));
  g_object_class_install_property (gobject_class, PROP_WEIGHTS_PREFIX,
      g_param_spec_string ("weights-prefix", "Weights prefix",
          "Prefix of the module's tensors (attention module, encoder layer "
          "or whole model) inside a larger state dict, e.g. "
          "\"encoder.layers.0.self_attn.\"; may change while playing, as "
          "weights may", "", PARAM_PLAYING));
  g_object_class_install_property (gobject_class, PROP_ADD_ZERO_ATTN,
      g_param_spec_boolean ("add-zero-attn", "Add zero attention",
          "Append an all-zero key and value to every window, as "
          "torch.nn.MultiheadAttention(add_zero_attn=True) does", FALSE,
          PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_POSITIONS,
      g_param_spec_enum ("positions", "Positions",
          "Positional encoding at the absolute frame index (frames since "
          "stream start or the last reset): RoPE rotates each head's "
          "queries and keys after the projection, ALiBi biases scores by "
          "-slope x distance.  Defaults to the weights file's metadata "
          "when it records one; setting another value is an error",
          GST_TYPE_SATTN_POSITIONS, DEFAULT_POSITIONS, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_ROPE_BASE,
      g_param_spec_double ("rope-base", "RoPE base",
          "RoPE frequency base: pair k turns by frame x base^(-2k/head-dim) "
          "(must be > 1)", 1.0, G_MAXDOUBLE, DEFAULT_ROPE_BASE, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_ACTIVATION,
      g_param_spec_enum ("activation", "Activation",
          "Feed-forward activation of an encoder layer (a weights file "
          "with linear1/linear2/norm1/norm2 under weights-prefix).  "
          "Defaults to the file's metadata; setting another value is an "
          "error", GST_TYPE_SATTN_ACTIVATION, DEFAULT_ACTIVATION, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_NORM_FIRST,
      g_param_spec_boolean ("norm-first", "Norm first",
          "Encoder layer: pre-norm (x + SA (norm1 (x)), then x + FF (norm2 "
          "(x))) instead of PyTorch's default post-norm.  Defaults to the "
          "file's metadata; setting another value is an error",
          DEFAULT_NORM_FIRST, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_NORM_EPS,
      g_param_spec_double ("norm-eps", "Norm eps",
          "Encoder layer: LayerNorm epsilon.  Defaults to the file's "
          "metadata; setting another value is an error", 0.0, 1.0,
          DEFAULT_NORM_EPS, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_CONTRACT,
      g_param_spec_enum ("contract", "Contract",
          "A whole model's input contract (the sample_rate, channels and "
          "frame_size its file records): enforce refuses a stream that "
          "contradicts it, naming both values; warn runs it with a "
          "warning.  Unset frame-size, window and hop are taken from the "
          "file either way, and the sink caps steer upstream to its rate "
          "and channels", GST_TYPE_SATTN_CONTRACT, DEFAULT_CONTRACT,
          PARAM_READY));
}

/* output=classes: labels and sattn-class messages. */
static void
gst_sattn_install_decisions_props (GObjectClass * gobject_class)
{
  g_object_class_install_property (gobject_class, PROP_LABELS,
      g_param_spec_string ("labels", "Labels",
          "output=classes: a text file with one class label per line (as "
          "NNStreamer's decoders read them), in the head's class order; "
          "unset: the labels of the weights file's metadata (else the "
          "class indices).  A count other than the model's classes is an "
          "error naming both", NULL, PARAM_READY));
  g_object_class_install_property (gobject_class, PROP_TOP_K,
      g_param_spec_uint ("top-k", "Top k",
          "output=classes: how many labels and probabilities, most "
          "probable first, each 'sattn-class' message carries", 1, 64,
          GST_SATTN_DEFAULT_TOP_K, PARAM_PLAYING));
  g_object_class_install_property (gobject_class, PROP_MIN_PROBABILITY,
      g_param_spec_double ("min-probability", "Minimum probability",
          "output=classes: a window whose most probable class has a lower "
          "probability, or that is outside the model's input contract, "
          "gets the decision 'unknown' in sattn-class messages; -1 = the "
          "model's min_probability (0 when it records none)", -1.0, 1.0,
          DEFAULT_MIN_PROBABILITY, PARAM_PLAYING));
}

/* The data path: invalid frames, discontinuities, the window meta
 * (all may change while PLAYING). */
static void
gst_sattn_install_stream_props (GObjectClass * gobject_class)
{
  g_object_class_install_property (gobject_class, PROP_INVALID_FRAMES,
      g_param_spec_enum ("invalid-frames", "Invalid frames",
          "What a frame with NaN or Inf samples, or whose query/key/value "
          "projection overflows float32 with the loaded weights, gets (can "
          "change while playing; GAP frames are always masked; an output "
          "row that overflows later in a layer is zeros under every "
          "policy)",
          GST_TYPE_SATTN_INVALID_FRAMES, DEFAULT_INVALID_FRAMES,
          PARAM_PLAYING));
  g_object_class_install_property (gobject_class, PROP_ALIGNMENT_THRESHOLD,
      g_param_spec_uint64 ("alignment-threshold", "Alignment Threshold",
          "Timestamp alignment threshold in nanoseconds: an input timestamp "
          "this far from where the sample count says the data lies is a "
          "discontinuity (the window restarts); at least two sample "
          "periods are used", 0, G_MAXUINT64 - 1,
          DEFAULT_ALIGNMENT_THRESHOLD, PARAM_PLAYING));
  g_object_class_install_property (gobject_class, PROP_DISCONT_WAIT,
      g_param_spec_uint64 ("discont-wait", "Discont Wait",
          "Window of time in nanoseconds to wait before creating a "
          "discontinuity: timestamps must stay beyond alignment-threshold "
          "this long (0 = at once; a DISCONT flag always resyncs at once)",
          0, G_MAXUINT64 - 1, DEFAULT_DISCONT_WAIT, PARAM_PLAYING));
  g_object_class_install_property (gobject_class, PROP_META_STRUCTURE,
      g_param_spec_boolean ("meta-structure", "Meta Structure",
          "Also attach the window metadata as a GstCustomMeta '"
          GST_SATTN_META_CUSTOM_NAME "' carrying a GstStructure with the "
          "fields of the C struct GstSattnMeta (which every output buffer "
          "carries), so that Python (PyGObject) can read it.  Off by "
          "default: its GValues cost about 0.15 us per output row (+21 to "
          "29% of the element's CPU on 64 channels, window 256, hop 16)",
          FALSE, PARAM_PLAYING));
}

static void gst_sattn_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec);
static void gst_sattn_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec);

/* class_init: the element's properties (the observability ones are
 * gstsattn-obs.c's) and their accessors. */
void
gst_sattn_props_install (GObjectClass * gobject_class)
{
  gobject_class->set_property = gst_sattn_set_property;
  gobject_class->get_property = gst_sattn_get_property;
  gst_sattn_install_geometry_props (gobject_class);
  gst_sattn_install_attention_props (gobject_class);
  gst_sattn_install_model_props (gobject_class);
  gst_sattn_install_decisions_props (gobject_class);
  gst_sattn_install_stream_props (gobject_class);
}

/* The properties' defaults (instance init). */
void
gst_sattn_props_init (GstSattn * self)
{
  self->top_k = GST_SATTN_DEFAULT_TOP_K;
  self->meta_structure = FALSE;
  self->props.window = DEFAULT_WINDOW;
  self->props.hop = DEFAULT_HOP;
  self->props.frame_size = DEFAULT_FRAME_SIZE;
  self->props.heads = DEFAULT_HEADS;
  self->props.head_dim = DEFAULT_HEAD_DIM;
  self->props.value_dim = DEFAULT_VALUE_DIM;
  self->props.scale = DEFAULT_SCALE;
  self->props.causal = DEFAULT_CAUSAL;
  self->props.lookback = DEFAULT_LOOKBACK;
  self->props.output = DEFAULT_OUTPUT;
  self->props.start = DEFAULT_START;
  self->props.threads = DEFAULT_THREADS;
  self->props.precision = DEFAULT_PRECISION;
  self->props.positions = DEFAULT_POSITIONS;
  self->props.rope_base = DEFAULT_ROPE_BASE;
  self->props.activation = DEFAULT_ACTIVATION;
  self->props.norm_first = DEFAULT_NORM_FIRST;
  self->props.norm_eps = DEFAULT_NORM_EPS;
  self->props.contract = DEFAULT_CONTRACT;
  self->props.min_probability = DEFAULT_MIN_PROBABILITY;
  self->invalid_frames = DEFAULT_INVALID_FRAMES;
  self->alignment_threshold = DEFAULT_ALIGNMENT_THRESHOLD;
  self->discont_wait = DEFAULT_DISCONT_WAIT;
}

/* What the properties hold (finalize). */
void
gst_sattn_props_clear (GstSattn * self)
{
  g_free (self->weights);
  g_free (self->weights_prefix);
  g_free (self->labels);
  if (self->pending_props)
    g_array_unref (self->pending_props);
}

/* A property set while PAUSED or PLAYING, applied at the next READY. */
typedef struct
{
  guint prop_id;
  GParamSpec *pspec;
  GValue value;
  gboolean warned;
} GstSattnPendingProp;

/* weights=NAME: a file, or (a name without '/' that is no file here) an
 * installed model, NAME.safetensors under sattn/models/ of the user's data
 * directory, of this build's data directory (SATTN_MODELS_DIR) or of the
 * system's data directories ($XDG_DATA_DIRS: /usr/local/share and
 * /usr/share by default), the first that exists.  Returns the path to use
 * (NULL for NULL or ""); a name found nowhere stays as given, and the
 * loader's error names it. */
static gchar *
gst_sattn_model_path (const gchar * value)
{
  const gchar *const *sys;
  gchar *base, *path;

  if (value == NULL || value[0] == '\0')
    return NULL;
  if (strchr (value, G_DIR_SEPARATOR) != NULL ||
      g_file_test (value, G_FILE_TEST_EXISTS))
    return g_strdup (value);
  base = g_str_has_suffix (value, ".safetensors") ? g_strdup (value) :
      g_strconcat (value, ".safetensors", NULL);
  path = g_build_filename (g_get_user_data_dir (), "sattn", "models", base,
      NULL);
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_free (path);
    path = g_build_filename (SATTN_MODELS_DIR, base, NULL);
  }
  for (sys = g_get_system_data_dirs ();
      *sys != NULL && !g_file_test (path, G_FILE_TEST_IS_REGULAR); sys++) {
    g_free (path);
    path = g_build_filename (*sys, "sattn", "models", base, NULL);
  }
  g_free (base);
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_free (path);
    return g_strdup (value);
  }
  return path;
}

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

/* Property access by concern, with the object lock held: FALSE for a
 * property id of another concern. */

static gboolean
gst_sattn_set_geometry_prop (GstSattn * self, guint prop_id,
    const GValue * value)
{
  switch (prop_id) {
    case PROP_WINDOW:
      self->props.window = g_value_get_uint (value);
      self->props.geom_set |= GST_SATTN_SET_WINDOW;
      return TRUE;
    case PROP_HOP:
      self->props.hop = g_value_get_uint (value);
      self->props.geom_set |= GST_SATTN_SET_HOP;
      return TRUE;
    case PROP_FRAME_SIZE:
      self->props.frame_size = g_value_get_uint (value);
      self->props.geom_set |= GST_SATTN_SET_FRAME_SIZE;
      return TRUE;
    case PROP_OUTPUT:
      self->props.output = g_value_get_enum (value);
      return TRUE;
    case PROP_START:
      self->props.start = g_value_get_enum (value);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_set_attention_prop (GstSattn * self, guint prop_id,
    const GValue * value)
{
  switch (prop_id) {
    case PROP_HEADS:
      self->props.heads = g_value_get_uint (value);
      self->props.heads_set = self->props.heads != 0;
      if (!self->props.heads_set)
        self->props.heads = DEFAULT_HEADS;
      return TRUE;
    case PROP_HEAD_DIM:
      self->props.head_dim = g_value_get_uint (value);
      return TRUE;
    case PROP_VALUE_DIM:
      self->props.value_dim = g_value_get_uint (value);
      return TRUE;
    case PROP_SCALE:
      self->props.scale = g_value_get_double (value);
      return TRUE;
    case PROP_CAUSAL:
      self->props.causal = g_value_get_boolean (value);
      return TRUE;
    case PROP_LOOKBACK:
      self->props.lookback = g_value_get_uint (value);
      return TRUE;
    case PROP_THREADS:
      self->props.threads = g_value_get_int (value);
      return TRUE;
    case PROP_PRECISION:
      self->props.precision = g_value_get_enum (value);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_set_model_prop (GstSattn * self, guint prop_id, const GValue * value)
{
  switch (prop_id) {
    case PROP_WEIGHTS:
      g_free (self->weights);
      self->weights = gst_sattn_model_path (g_value_get_string (value));
      /* Running: loaded off the streaming thread (gstsattn-swap.c). */
      self->swap.requested |= self->running;
      return TRUE;
    case PROP_WEIGHTS_PREFIX:
      g_free (self->weights_prefix);
      self->weights_prefix = g_value_dup_string (value);
      self->swap.requested |= self->running;
      return TRUE;
    case PROP_ADD_ZERO_ATTN:
      self->add_zero_attn = g_value_get_boolean (value);
      return TRUE;
    case PROP_POSITIONS:
      self->props.positions = g_value_get_enum (value);
      self->props.set_by_user |= SATTN_SET_POSITIONS;
      return TRUE;
    case PROP_ROPE_BASE:
      self->props.rope_base = g_value_get_double (value);
      self->props.set_by_user |= SATTN_SET_ROPE_BASE;
      return TRUE;
    case PROP_ACTIVATION:
      self->props.activation = g_value_get_enum (value);
      self->props.set_by_user |= SATTN_SET_ACTIVATION;
      return TRUE;
    case PROP_NORM_FIRST:
      self->props.norm_first = g_value_get_boolean (value);
      self->props.set_by_user |= SATTN_SET_NORM_FIRST;
      return TRUE;
    case PROP_NORM_EPS:
      self->props.norm_eps = g_value_get_double (value);
      self->props.set_by_user |= SATTN_SET_NORM_EPS;
      return TRUE;
    case PROP_CONTRACT:
      self->props.contract = g_value_get_enum (value);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_set_decisions_prop (GstSattn * self, guint prop_id,
    const GValue * value)
{
  switch (prop_id) {
    case PROP_LABELS:
      g_free (self->labels);
      self->labels = g_value_dup_string (value);
      return TRUE;
    case PROP_TOP_K:
      self->top_k = g_value_get_uint (value);
      return TRUE;
    case PROP_MIN_PROBABILITY:
      self->props.min_probability = g_value_get_double (value);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_set_stream_prop (GstSattn * self, guint prop_id, const GValue * value)
{
  switch (prop_id) {
    case PROP_INVALID_FRAMES:
      self->invalid_frames = g_value_get_enum (value);
      return TRUE;
    case PROP_ALIGNMENT_THRESHOLD:
      self->alignment_threshold = g_value_get_uint64 (value);
      return TRUE;
    case PROP_DISCONT_WAIT:
      self->discont_wait = g_value_get_uint64 (value);
      return TRUE;
    case PROP_META_STRUCTURE:
      self->meta_structure = g_value_get_boolean (value);
      return TRUE;
    default:
      return FALSE;
  }
}

static void
gst_sattn_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstSattn *self = GST_SATTN (object);

  GST_OBJECT_LOCK (self);
  if (self->running && !(pspec->flags & GST_PARAM_MUTABLE_PLAYING)) {
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
  if (!gst_sattn_set_geometry_prop (self, prop_id, value) &&
      !gst_sattn_set_attention_prop (self, prop_id, value) &&
      !gst_sattn_set_model_prop (self, prop_id, value) &&
      !gst_sattn_set_decisions_prop (self, prop_id, value) &&
      !gst_sattn_set_stream_prop (self, prop_id, value) &&
      !gst_sattn_obs_set_property (&self->obs, prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

static gboolean
gst_sattn_get_geometry_prop (GstSattn * self, guint prop_id, GValue * value)
{
  switch (prop_id) {
    case PROP_WINDOW:
    case PROP_HOP:
    case PROP_FRAME_SIZE:{
      /* What is in effect: the model's contract gives what was not set. */
      GstSattnSettings c = self->props;

      gst_sattn_settings_take (&c, &self->contract);
      g_value_set_uint (value, prop_id == PROP_WINDOW ? c.window :
          prop_id == PROP_HOP ? c.hop : c.frame_size);
      return TRUE;
    }
    case PROP_OUTPUT:
      g_value_set_enum (value, self->props.output);
      return TRUE;
    case PROP_START:
      g_value_set_enum (value, self->props.start);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_get_attention_prop (GstSattn * self, guint prop_id, GValue * value)
{
  switch (prop_id) {
    case PROP_HEADS:
      g_value_set_uint (value, self->props.heads_set ? self->props.heads : 0);
      return TRUE;
    case PROP_HEAD_DIM:
      g_value_set_uint (value, self->props.head_dim);
      return TRUE;
    case PROP_VALUE_DIM:
      g_value_set_uint (value, self->props.value_dim);
      return TRUE;
    case PROP_SCALE:
      g_value_set_double (value, self->props.scale);
      return TRUE;
    case PROP_CAUSAL:
      g_value_set_boolean (value, self->props.causal);
      return TRUE;
    case PROP_LOOKBACK:
      g_value_set_uint (value, self->props.lookback);
      return TRUE;
    case PROP_THREADS:
      g_value_set_int (value, self->props.threads);
      return TRUE;
    case PROP_PRECISION:
      g_value_set_enum (value, self->props.precision);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_get_model_prop (GstSattn * self, guint prop_id, GValue * value)
{
  switch (prop_id) {
    case PROP_WEIGHTS:
      g_value_set_string (value, self->weights);
      return TRUE;
    case PROP_WEIGHTS_PREFIX:
      g_value_set_string (value, self->weights_prefix ? self->weights_prefix
          : "");
      return TRUE;
    case PROP_ADD_ZERO_ATTN:
      g_value_set_boolean (value, self->add_zero_attn);
      return TRUE;
    case PROP_POSITIONS:
      g_value_set_enum (value, self->props.positions);
      return TRUE;
    case PROP_ROPE_BASE:
      g_value_set_double (value, self->props.rope_base);
      return TRUE;
    case PROP_ACTIVATION:
      g_value_set_enum (value, self->props.activation);
      return TRUE;
    case PROP_NORM_FIRST:
      g_value_set_boolean (value, self->props.norm_first);
      return TRUE;
    case PROP_NORM_EPS:
      g_value_set_double (value, self->props.norm_eps);
      return TRUE;
    case PROP_CONTRACT:
      g_value_set_enum (value, self->props.contract);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_get_decisions_prop (GstSattn * self, guint prop_id, GValue * value)
{
  switch (prop_id) {
    case PROP_LABELS:
      g_value_set_string (value, self->labels);
      return TRUE;
    case PROP_TOP_K:
      g_value_set_uint (value, self->top_k);
      return TRUE;
    case PROP_MIN_PROBABILITY:
      g_value_set_double (value, self->props.min_probability);
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
gst_sattn_get_stream_prop (GstSattn * self, guint prop_id, GValue * value)
{
  switch (prop_id) {
    case PROP_INVALID_FRAMES:
      g_value_set_enum (value, self->invalid_frames);
      return TRUE;
    case PROP_ALIGNMENT_THRESHOLD:
      g_value_set_uint64 (value, self->alignment_threshold);
      return TRUE;
    case PROP_DISCONT_WAIT:
      g_value_set_uint64 (value, self->discont_wait);
      return TRUE;
    case PROP_META_STRUCTURE:
      g_value_set_boolean (value, self->meta_structure);
      return TRUE;
    default:
      return FALSE;
  }
}

static void
gst_sattn_get_property (GObject * object, guint prop_id, GValue * value,
    GParamSpec * pspec)
{
  GstSattn *self = GST_SATTN (object);

  GST_OBJECT_LOCK (self);
  if (!gst_sattn_get_geometry_prop (self, prop_id, value) &&
      !gst_sattn_get_attention_prop (self, prop_id, value) &&
      !gst_sattn_get_model_prop (self, prop_id, value) &&
      !gst_sattn_get_decisions_prop (self, prop_id, value) &&
      !gst_sattn_get_stream_prop (self, prop_id, value) &&
      !gst_sattn_obs_get_property (&self->obs, prop_id, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

/* At PAUSED -> READY (running cleared): apply the deferred values. */
void
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
