/* sattn element: a seeded stream fuzzer.
 *
 * Every episode builds one harnessed element with random (small) settings
 * and feeds it a random sequence of hostile input: buffers of any size
 * (0 bytes, cut inside a sample or a frame, thousands of frames), PTS that
 * continue, jitter, jump by hours or are NONE, DISCONT and GAP flags, GAP
 * events of any duration, FLUSH_START/STOP, SEGMENT events (rate and
 * applied rate != 1, BYTES and DEFAULT formats), caps changes (rate,
 * channels) and READY cycles (frame-size, window, hop), EOS followed by a
 * flush and more data, samples that are NaN, +-Inf, +-1e38 or subnormal
 * (and whatever a sample cut between two buffers makes), trained weights
 * (tests/data, and files written at start-up by st-builder.c: attention
 * modules with RoPE or ALiBi, encoder layers post- and pre-norm, some in
 * a stack's geometry causal=true lookback=window-hop, whole models per
 * window with learned, RoPE or ALiBi positions and mean or last
 * pooling), as written with tame input (no special values, whole
 * samples: which frames are usable is known and checked) or scaled by
 * 1e-30 to 3e38 (overflowing projections; flags and key counts then
 * unchecked),
 * property changes while data flows and attn pad requests and releases.
 *
 * A reference model written here from the element's documented contract
 * (not from its code) follows every input: which timeline (the frames
 * between two resync points) each complete frame belongs to, where that
 * timeline starts in time and which of its frames are invalid.  Its rules:
 * a DISCONT flag, or a PTS more than max(half a frame, 40 ms) from the
 * sample counter, drains and starts a new timeline at that PTS (NONE, or
 * a PTS behind the counter: at the counter, time never goes back); a
 * SEGMENT that moves (format, rate, applied rate, start, base, offset, or
 * stop when the rate is negative, as sent) drains and the next data starts
 * a timeline (at the segment start, BYTES and DEFAULT converted with the
 * input rate, when untimed), one differing only in position changes
 * nothing; caps changes drain and continue at the counter; refused caps
 * change nothing (one error, not repeated for the same caps); FLUSH_STOP
 * and READY drop what is held; an incomplete frame is dropped at a drain;
 * GAP events add masked frames up to the gap's end (saturated at the end
 * of the clock) on the sample grid, only after the counter, and resync
 * only when not behind it; GAP buffers' bytes are masked (0 bytes mask
 * nothing); NaN/Inf frames follow invalid-frames (with weights, frames
 * whose projections overflow are invalid too: flags are not checked);
 * geometry set while running takes effect at the next READY with one
 * warning per property.  Near the end of the clock's range, where
 * timestamps saturate, only counts are checked (rows <= frames).  The
 * discontinuity rule is GstAudioStreamAlign's with discont-wait=0 (m_check_discont);
 * downstream takes audio/x-raw only.  Generated times stay clear of the 40 ms threshold
 * (jitter <= 5 ms, jumps >= 100 ms) so that the rules never hinge on a
 * rounding.  Every
 * output buffer or GAP event is checked against it as it arrives:
 *  - it continues the oldest timeline that still owes output: its PTS is
 *    exactly that timeline's start + first frame x frame-size / rate, its
 *    end is on the same grid, it never accounts for frames not received;
 *  - frames mode: one row per frame; pooled modes: one row per window on
 *    the hop schedule; window mode rows are window x d_out wide;
 *  - DISCONT exactly on the first buffer of a timeline; GAP exactly when
 *    every row is invalid; invalid frames give zero rows (frames mode);
 *  - every value is finite (finite output whatever the input);
 *  - PTS never decrease between two downstream SEGMENT/FLUSH_STOP events
 *    and PTS + DURATION never wraps;
 *  - its GstSattnMeta (docs/element.md "Window metadata") has one row per
 *    output
 *    row, each exact: the frames it accounts for (counted from the
 *    timeline's start), the running time (on the segment sent downstream)
 *    of its window's first key frame and of the window's end, the
 *    window's masked key positions (padding, GAP and invalid frames),
 *    no fully masked softmax row, and whether its query frames (pooled:
 *    the pooled frames) had a usable one; the window a frames-mode row
 *    was computed in is the first on the hop schedule ending after it;
 *  - the element runs with threads 1 to 4; one episode in five with
 *    threads > 1 runs a second time with threads=1, and everything that
 *    came out (values, times, flags, meta) must be byte-identical;
 *  - one episode in three draws precision=fast (from a generator of its
 *    own, so that its events are the same either way): with attention,
 *    encoder or whole-model weights (or without weights) it runs fast
 *    through every check above, and so does its threads twin (the output
 *    depends neither on buffer sizes nor on threads with fast either); a
 *    run of 1000 episodes or more fails
 *    without an episode with weights and fast, or without one of each of
 *    docs/models.md's front ends and poolings (conv stems, RMS
 *    normalisation, standardisation, CLS tokens, max and attention
 *    pooling: four of the written whole models);
 *  - swap episodes (one in ten: a written weights file, tame input)
 *    set `weights` while data flows, to a file of the same geometry or
 *    to a missing, truncated, other-geometry or other-kind one, then run
 *    again without the set (old model only) and with the new file from
 *    the start (new model only): the rows must match row for row, the
 *    old model's bytes up to a window boundary and the new model's from
 *    there on (none before the set; new rows only after a
 *    sattn-weights-swapped message naming the file, new caps or a
 *    READY), or for a refused file the old model's throughout, with one
 *    warning naming the file and `weights` naming the file in use again;
 * and after the episode (EOS): every timeline ended by a drain has all
 * its frames accounted for (frames in == frames out in frames mode,
 * counting frames of downstream GAP events), a timeline ended by a flush
 * held back at most a window, EOS went through, the bus carries exactly
 * the errors the model expects (invalid-frames=error) and nothing else,
 * no critical or warning was logged (gst-check makes them fatal).
 *
 * Episode e uses seed SATTN_FUZZ_SEED + e (default seed 1),
 * SATTN_FUZZ_EPISODES episodes (default SATTN_FUZZ_EPISODES_DEFAULT, set
 * by tests/element/meson.build for sanitizer builds, else 10000), or as
 * many as fit in SATTN_FUZZ_SECONDS when that is set (make fuzz-stream
 * SECONDS=...).  A failure, a crash or a hang
 * (SATTN_FUZZ_TIMEOUT seconds per episode, default 60) prints the seed,
 * a one-line reproducer and the episode's event list.
 * SATTN_FUZZ_VERBOSE=1 prints every episode's events, =2 also every input
 * float, assembled frame and output float.
 *
 * Every input class is generated, including those whose rules issue 9
 * set (GAPs of hours or to the end of the clock, +-1e38 with
 * output=mean, weights whose projections overflow, position-only
 * segments, late and overlapping times, attn pads requested mid-stream
 * and kept across flushes and READY, refused caps); the run's summary
 * counts each class.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "sattn-check.h"
#include "gstsattn-meta.h"
#include "st-builder.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ weights */

/* Weights files: fixtures of tests/data and files written at start-up
 * (st-builder.c, seeded): attention modules with RoPE / ALiBi recorded,
 * encoder layers (post- and pre-norm, relu / gelu, with and without
 * positions) and whole models per window (learned, RoPE, ALiBi positions,
 * one or two layers, mean or last pooling). */
enum
{ K_ATTN, K_LAYER, K_WHOLE, N_KINDS };

typedef struct
{
  const gchar *file;            /* in tests/data, or the written file's
                                   name */
  guint d_model, heads;         /* d_model: values per input frame */
  guint d_out;                  /* values per output row (one frame) */
  gint kind;
  const gchar *positions;       /* recorded, for the log */
  gboolean written;             /* by st_write_* (else tests/data) */
  gchar *path;
  guint parts;                  /* P_* bits: docs/models.md's front ends and
                                   poolings a whole model has */
} WFixture;

/* WFixture.parts */
enum
{
  P_CONV = 1 << 0, P_NORM = 1 << 1, P_STD = 1 << 2, P_CLS = 1 << 3,
  P_MAX = 1 << 4, P_ATTN = 1 << 5, N_PARTS = 6
};
static const gchar *part_names[N_PARTS] = { "a conv stem",
  "per-window RMS normalisation", "standardisation", "a CLS token",
  "max pooling", "attention pooling"
};

static WFixture wfixtures[] = {
  {"e8_h1_basic.safetensors", 8, 1, 8, K_ATTN, "none", FALSE, NULL, 0},
  {"e12_h3_separate_nobias_biaskv.safetensors", 12, 3, 12, K_ATTN, "none",
      FALSE, NULL, 0},
  {"whole_f8_c4.safetensors", 8, 2, 16, K_WHOLE, "learned", FALSE, NULL, 0},
  {"attn-rope.safetensors", 8, 2, 8, K_ATTN, "rope", TRUE, NULL, 0},
  {"attn-alibi-hf.safetensors", 8, 2, 8, K_ATTN, "alibi", TRUE, NULL, 0},
  {"attn-rope-interleaved-llama.safetensors", 8, 2, 8, K_ATTN,
      "rope-interleaved", TRUE, NULL, 0},
  {"layer-post-relu.safetensors", 8, 2, 8, K_LAYER, "none", TRUE, NULL, 0},
  {"layer-pre-gelu-rope.safetensors", 8, 2, 8, K_LAYER, "rope", TRUE, NULL, 0},
  {"layer-post-gelu-alibi.safetensors", 8, 2, 8, K_LAYER, "alibi", TRUE, NULL,
      0},
  {"whole-learned-2l.safetensors", 8, 2, 8, K_WHOLE, "learned", TRUE, NULL, 0},
  {"whole-rope-last.safetensors", 8, 2, 16, K_WHOLE, "rope", TRUE, NULL, 0},
  {"whole-alibi-mlp.safetensors", 8, 2, 8, K_WHOLE, "alibi", TRUE, NULL, 0},
  {"whole-conv-rms-max.safetensors", 8, 2, 8, K_WHOLE, "none", TRUE, NULL,
      P_CONV | P_NORM | P_MAX},
  {"whole-convf-std-attn.safetensors", 8, 2, 8, K_WHOLE, "alibi", TRUE, NULL,
      P_CONV | P_STD | P_ATTN},
  {"whole-cls-learned-std.safetensors", 8, 2, 16, K_WHOLE, "learned", TRUE,
      NULL, P_CLS | P_STD},
  {"whole-cls-rope-rms.safetensors", 8, 2, 16, K_WHOLE, "rope", TRUE, NULL,
      P_CLS | P_NORM},
};

/* Scales applied to every weight: harmless ones, and
 * ones that overflow the projections. */
static const gdouble wscales_ok[] = { 1.0, 1e-30, 1e-3, 10.0, 1e3 };
static const gdouble wscales_big[] = { 1e18, 1e30, 3e38 };

static gchar *tmp_dir;

static void
remove_tmp_dir (void)
{
  GDir *d;
  const gchar *name;

  if (tmp_dir == NULL)
    return;
  d = g_dir_open (tmp_dir, 0, NULL);
  while (d && (name = g_dir_read_name (d)) != NULL) {
    gchar *p = g_build_filename (tmp_dir, name, NULL);
    g_unlink (p);
    g_free (p);
  }
  if (d)
    g_dir_close (d);
  g_rmdir (tmp_dir);
  g_clear_pointer (&tmp_dir, g_free);
}

static gchar *
tmp_file (const gchar * name)
{
  GError *err = NULL;

  if (tmp_dir == NULL) {
    tmp_dir = g_dir_make_tmp ("sattn-fuzz-XXXXXX", &err);
    fail_unless (tmp_dir != NULL, "%s", err ? err->message : "");
  }
  return g_build_filename (tmp_dir, name, NULL);
}

/* An encoder layer for frames of 8 values, 2 heads, feed-forward 16. */
static void
write_layer (const gchar * path, guint32 seed, gboolean norm_first,
    const gchar * activation, const gchar * positions)
{
  StBuilder w;

  st_init (&w, seed);
  st_attn (&w, "self_attn.", LAYOUT_MHA, 8, 8);
  st_linear (&w, "", "linear1", 16, 8, TRUE);
  st_linear (&w, "", "linear2", 8, 16, TRUE);
  st_norm (&w, "", "norm1", 8);
  st_norm (&w, "", "norm2", 8);
  st_meta (&w, "self_attn.num_heads", "2");
  st_meta (&w, "norm_first", norm_first ? "1" : "0");
  st_meta (&w, "activation", activation);
  st_meta (&w, "positions", positions);
  st_write (&w, path);
}

/* Files a swap cannot use (docs/element.md "Swapping weights while
 * playing"):
 * missing, truncated, another d_out, another kind. */
enum
{ BAD_MISSING, BAD_TRUNCATED, BAD_GEOMETRY, BAD_KIND, N_BAD };
static const gchar *bad_names[N_BAD] = { "missing", "truncated",
  "other-geometry", "other-kind"
};

static gchar *bad_paths[N_BAD];

/* Every fixture's path; the written ones written. */
static void
fixtures_init (void)
{
  guint i;

  if (wfixtures[0].path != NULL)
    return;
  bad_paths[BAD_MISSING] = tmp_file ("missing.safetensors");
  bad_paths[BAD_TRUNCATED] = tmp_file ("truncated.safetensors");
  bad_paths[BAD_GEOMETRY] = tmp_file ("attn-dout12.safetensors");
  g_free (st_write_layer (bad_paths[BAD_GEOMETRY], 40, LAYOUT_MHA, 8, 12, 2,
          NULL, 0));
  for (i = 0; i < G_N_ELEMENTS (wfixtures); i++) {
    WFixture *f = &wfixtures[i];

    f->path = f->written ? tmp_file (f->file) :
        g_build_filename (g_getenv ("SATTN_SOURCE_ROOT"), "tests", "data",
        f->file, NULL);
  }
  g_free (st_write_layer (wfixtures[3].path, 31, LAYOUT_MHA, 8, 8, 2, "rope",
          0));
  g_free (st_write_layer (wfixtures[4].path, 32, LAYOUT_HF, 8, 8, 2,
          "alibi", 0));
  g_free (st_write_layer (wfixtures[5].path, 33, LAYOUT_LLAMA, 8, 8, 2,
          "rope-interleaved", 0));
  write_layer (wfixtures[6].path, 34, FALSE, "relu", "none");
  write_layer (wfixtures[7].path, 35, TRUE, "gelu", "rope");
  write_layer (wfixtures[8].path, 36, FALSE, "gelu", "alibi");
  {
    WholeSpec a = { .f = 8, .d = 8, .n_layers = 2, .ff = 16, .classes = 3,
      .max_window = 32, .heads = 2, .positions = "learned", .final_norm = TRUE
    };
    WholeSpec b = { .f = 8, .d = 16, .n_layers = 1, .ff = 32, .classes = 4,
      .heads = 2, .positions = "rope", .norm_first = TRUE, .last = TRUE
    };
    WholeSpec c = { .f = 8, .d = 8, .n_layers = 1, .ff = 16, .classes = 3,
      .heads = 2, .positions = "alibi", .mlp = TRUE, .final_norm = TRUE,
      .norm_first = TRUE
    };

    /* docs/models.md's front ends and poolings: a conv stem over samples
     * (4 steps of 2 values) with RMS normalisation and max pooling; one
     * over frames with standardisation and attention pooling; CLS tokens
     * with learned positions and with RoPE (d_out 16: as many classes as
     * b, the d_out 8 ones as a and c: swaps between them are compatible) */
    WholeSpec d = { .f = 8, .d = 8, .n_layers = 1, .ff = 16, .classes = 3,
      .heads = 2, .positions = "none", .pooling = "max", .conv_steps = 4,
      .conv_kernel = 6, .conv_padding = 2, .conv_act = "relu",
      .input_norm = "rms"
    };
    WholeSpec e = { .f = 8, .d = 8, .n_layers = 2, .ff = 16, .classes = 3,
      .heads = 2, .positions = "alibi", .final_norm = TRUE,
      .pooling = "attention", .conv_steps = 1, .conv_kernel = 3,
      .conv_padding = 1, .standardize = TRUE
    };
    WholeSpec f = { .f = 8, .d = 16, .n_layers = 1, .ff = 32, .classes = 4,
      .max_window = 32, .heads = 2, .positions = "learned", .pooling = "cls",
      .cls = TRUE, .standardize = TRUE
    };
    WholeSpec g = { .f = 8, .d = 16, .n_layers = 1, .ff = 32, .classes = 4,
      .heads = 2, .positions = "rope", .mlp = TRUE, .pooling = "mean",
      .cls = TRUE, .input_norm = "rms"
    };

    g_free (st_write_whole (wfixtures[9].path, 37, &a));
    g_free (st_write_whole (wfixtures[10].path, 38, &b));
    g_free (st_write_whole (wfixtures[11].path, 39, &c));
    g_free (st_write_whole (wfixtures[12].path, 41, &d));
    g_free (st_write_whole (wfixtures[13].path, 42, &e));
    g_free (st_write_whole (wfixtures[14].path, 43, &f));
    g_free (st_write_whole (wfixtures[15].path, 44, &g));
  }
  {
    /* the first 200 bytes of a good file: its header cut */
    gchar *buf = NULL;
    gsize len = 0;

    fail_unless (g_file_get_contents (wfixtures[3].path, &buf, &len, NULL));
    fail_unless (len > 200);
    fail_unless (g_file_set_contents (bad_paths[BAD_TRUNCATED], buf, 200,
            NULL));
    g_free (buf);
  }
}

/* Can a swap go from fixture a to fixture b (docs/element.md "Swapping
 * weights while playing": the same d_model and d_out, the same kind (a whole
 * model, or one attention layer with or without its encoder parts), as
 * many classes, no extra keys; heads as set)? */
static gboolean
swap_compatible (const WFixture * a, const WFixture * b)
{
  gboolean wa = a->kind == K_WHOLE, wb = b->kind == K_WHOLE;

  if (a == b || !a->written || !b->written || wa != wb)
    return FALSE;
  if (a->d_model != b->d_model || a->d_out != b->d_out || a->heads != b->heads)
    return FALSE;
  /* whole models: as many classes (the written ones: same d_out, same
   * classes) */
  return TRUE;
}

/* The fixture with every F32 tensor multiplied by scale, written once
 * into the temporary directory (parsed here with json-glib, not with the
 * reader under test); scale 1: the fixture itself. */
static gchar *
scaled_weights (const WFixture * f, gdouble scale)
{
  gchar *name, *dst, *buf = NULL;
  gsize len = 0;
  guint64 hlen;
  JsonParser *p;
  JsonObject *root;
  GList *members, *l;
  GError *err = NULL;

  if (scale == 1.0)
    return g_strdup (f->path);
  name = g_strdup_printf ("%s-%g.safetensors", f->file, scale);
  dst = tmp_file (name);
  g_free (name);
  if (g_file_test (dst, G_FILE_TEST_EXISTS))
    return dst;

  fail_unless (g_file_get_contents (f->path, &buf, &len, &err), "%s",
      err ? err->message : "");
  fail_unless (len >= 8);
  memcpy (&hlen, buf, 8);
  hlen = GUINT64_FROM_LE (hlen);
  fail_unless (hlen <= len - 8);
  p = json_parser_new ();
  fail_unless (json_parser_load_from_data (p, buf + 8, (gssize) hlen, &err),
      "%s", err ? err->message : "");
  root = json_node_get_object (json_parser_get_root (p));
  members = json_object_get_members (root);
  for (l = members; l; l = l->next) {
    JsonObject *t;
    JsonArray *off;
    guint64 b, e, i;

    if (strcmp (l->data, "__metadata__") == 0)
      continue;
    t = json_object_get_object_member (root, l->data);
    if (g_strcmp0 (json_object_get_string_member (t, "dtype"), "F32") != 0)
      continue;
    off = json_object_get_array_member (t, "data_offsets");
    b = (guint64) json_array_get_int_element (off, 0);
    e = (guint64) json_array_get_int_element (off, 1);
    fail_unless (b <= e && 8 + hlen + e <= len);
    for (i = b; i + 4 <= e; i += 4) {
      float v;

      memcpy (&v, buf + 8 + hlen + i, 4);
      /* finite: a file with Inf is refused (the largest float instead) */
      v = (float) CLAMP (v * scale, -3.4e38, 3.4e38);
      memcpy (buf + 8 + hlen + i, &v, 4);
    }
  }
  g_list_free (members);
  g_object_unref (p);
  fail_unless (g_file_set_contents (dst, buf, (gssize) len, &err), "%s",
      err ? err->message : "");
  g_free (buf);
  return dst;
}

/* ------------------------------------------------------------ model */

/* Frames between two resync points: what the element received and what
 * it has accounted for downstream. */
typedef struct
{
  guint id;
  GstClockTime t0;              /* PTS of frame 0 */
  gint rate;
  guint fs;
  gsize d;
  guint64 frames;               /* complete frames received */
  GArray *invalid;              /* guint64 pairs [a, b) of invalid frames */
  gboolean closed;              /* no more frames will come */
  gboolean flushed;             /* closed by a flush: held frames dropped */
  guint64 out_next;             /* frames accounted for by outputs */
  guint64 rows;                 /* rows pushed */
  guint64 wend;                 /* frames mode: end of the window of the
                                   last row checked (0: none yet) */
  gboolean saw_buffer, after_gap;
} Timeline;

/* One thing that came out of the src pad, in order. */
typedef enum
{ IT_BUFFER, IT_GAP, IT_CAPS, IT_SEGMENT, IT_FLUSH_STOP, IT_EOS } ItemType;

typedef struct
{
  ItemType type;
  GstClockTime pts, dur;
  gboolean discont, gap;
  gsize n_floats, f0;           /* floats at f0 in Episode.floats */
  gint channels;                /* IT_CAPS */
  GstSegment seg;               /* IT_SEGMENT */
  /* IT_BUFFER: its GstSattnMeta (meta_rows G_MAXUINT: none), rows at
   * meta_r0 in Episode.meta */
  guint meta_rows, meta_window, meta_r0;
  gsize meta_row_bytes;
} Item;

typedef struct
{
  guint64 seed;
  GRand *r;
  GString *log;
  GstHarness *h;
  GstBus *bus;

  /* settings (frozen while running) */
  guint window, hop, fs, heads, lookback;
  gboolean causal, post_messages;
  gint output, start, policy;
  gint threads;                 /* the element's threads (1..4) */
  gint precision;               /* PREC_EXACT, PREC_FAST */
  gdouble scale;
  const WFixture *wf;
  gdouble wscale;

  /* negotiated */
  gboolean configured;
  gint rate, channels;
  gsize d, fb, bpf;

  /* input timeline */
  GstClockTime t0;
  guint64 bytes;
  /* the element's discontinuity detector (GstAudioStreamAlign), which
   * follows the input's own timestamps: where it expects the next
   * sample, as a sample offset (G_MAXUINT64: not started) and a time */
  guint64 a_off;
  GstClockTime a_base;
  guint64 a_samples;
  guint8 *carry;
  gsize carry_len;
  gboolean carry_invalid;
  GPtrArray *tl;                /* Timeline*, in order */
  Timeline *cur;                /* open timeline or NULL */
  guint ocur;                   /* first timeline that may still output */
  GstSegment seg;               /* the last segment pushed */
  GstSegment tseg;              /* the TIME segment it is for the element */
  gboolean eos;
  gboolean stopped;             /* an expected error ended the episode */
  gboolean inexact;             /* hostile times: structural checks only */
  guint64 inexact_rows;         /* rows pushed, counted once inexact */
  gboolean validity_unknown;    /* overflowing projections (item 4) make
                                   frames invalid: flags not checked */
  gboolean tame;                /* no special values, whole samples only:
                                   trained weights never overflow, so
                                   which frames are usable is known */
  guint errors_expected;

  /* output side */
  GArray *items;
  GArray *floats;
  GArray *meta;                 /* GstSattnMetaRow of the items */
  GstSegment oseg;              /* the last segment downstream */
  GChecksum *digest;            /* of everything that came out */
  gint out_channels;
  gboolean scope_any;
  GstClockTime scope_last;
  gboolean eos_seen;

  /* attn pad */
  GstPad *attn, *attn_sink;
  gint attn_caps, attn_bad;
  guint ops;

  /* geometry set while running: deferred to the next READY, one warning
   * per property and run */
  guint deferred[4];            /* window, hop, heads, lookback; 0: none */
  guint defer_warned;           /* bit per property */
  guint warnings_expected;

  /* the last refused caps whose error was posted in this run: the same
   * caps refused again do not post it again */
  gint refused_rate, refused_channels;

  /* weights swap (swap episodes): at op swap_at */
  guint swap_at;
  gboolean swap_set;            /* the property was set (SW_RUN) */
  gboolean force_data;          /* op_buffer: at least one frame */
  guint rec_base;               /* recorded row of the buffer's row 0 */
  guint swap_warnings, swap_msgs;
  guint64 swap_frame;
  gchar *swap_msg_path;
  gboolean ready_after_swap, caps_after_swap;
} Episode;

/* The element's precision property (GstSattnPrecision). */
enum
{ PREC_EXACT, PREC_FAST };

/* A swap episode runs up to three times (docs/element.md "Swapping weights while
 * playing"): SW_RUN sets `weights` to another file at op swap_at while
 * data flows; SW_A is the same episode without the set (the old model
 * only), SW_B the same with the new file from the start (the new model
 * only).  Every output row is recorded in each run. */
enum
{ SW_NONE, SW_RUN, SW_A, SW_B };

typedef struct
{
  gsize f0, n;                  /* floats in SwapRec.floats */
  guint tl;                     /* the model's timeline of the row */
  guint64 wend;                 /* and the frame its window ends at
                                   (G_MAXUINT64: not known) */
} RecRow;

typedef struct
{
  GArray *floats, *rows;
} SwapRec;

static struct
{
  gint mode;
  gboolean done;                /* SW_RUN set the property */
  gboolean bad;                 /* to a file it cannot use */
  gint bad_kind;
  gchar *path;                  /* the file set */
  gchar *old_path;              /* the file in use */
  guint rows_at_set;            /* rows out before the set */
  gchar *log;                   /* the swap run's events */
  guint swap_msgs;
  guint64 swap_frame;
  gboolean ready_after;
  gboolean swap_seen;           /* a takeover message, or a READY after
                                   the set */
  SwapRec rec[4];               /* by mode */
} plan;

static const gchar *geometry_props[4] = { "window", "hop", "heads",
  "lookback"
};

/* What the run covered, printed at the end. */
enum
{
  ST_BUFFER, ST_BUF_ODD, ST_BUF_EMPTY, ST_BUF_LARGE, ST_SPECIAL, ST_DISCONT,
  ST_GAP_FLAG, ST_PTS_NONE, ST_JUMP, ST_JUMP_HOURS, ST_GAP, ST_FLUSH,
  ST_SEGMENT, ST_SEG_NONTIME, ST_CAPS, ST_EOS, ST_PROP, ST_READY, ST_ATTN,
  ST_WEIGHTS, ST_ERROR_POLICY, ST_OUT_BUFFERS, ST_RESYNCS, ST_HUGE_GAP,
  ST_MEAN_BIG, ST_PROJ_BIG, ST_POS_SEGMENT, ST_LATE, ST_CLOCK_END,
  ST_GAP_NOTHING, ST_ATTN_LATE, ST_REFUSED, ST_DEFERRED, ST_THREADS,
  ST_TWIN, ST_META_ROWS, ST_KIND_ATTN, ST_KIND_LAYER, ST_KIND_WHOLE,
  ST_POS_ROPE, ST_POS_ALIBI, ST_STACK, ST_TAME, ST_SWAP_GOOD,
  ST_SWAP_TAKEN, ST_SWAP_READY, ST_SWAP_NEW_ROWS, ST_SWAP_BAD,
  ST_SWAP_BAD_LAST = ST_SWAP_BAD + N_BAD - 1, ST_SWAP_ROWS,
  ST_FAST, ST_FAST_NO_WEIGHTS, ST_TWIN_FAST, ST_WHOLE_FAST,
  ST_PART, ST_PART_LAST = ST_PART + N_PARTS - 1,
  N_ST
};
static const gchar *st_names[N_ST] = {
  "buffers", "odd-sized", "empty", "large", "with special values",
  "DISCONT", "GAP-flagged", "PTS NONE", "PTS jumps", "jumps of hours",
  "GAP events", "flushes", "segments", "non-TIME segments", "caps changes",
  "EOS", "property sets", "READY cycles", "attn requests",
  "episodes with weights", "invalid-frames=error stops", "output buffers",
  "timelines", "GAPs of hours or to the clock's end",
  "special-valued buffers with output=mean",
  "episodes with overflowing weights",
  "position-only segments", "late or overlapping times",
  "times near the clock's end", "no-sample GAPs on a half frame",
  "attn requests after caps", "refused caps", "deferred geometry sets",
  "episodes with threads > 1", "threads twins (byte-identical to threads=1)",
  "meta rows checked", "episodes with attention weights",
  "episodes with encoder layers", "episodes with whole models",
  "episodes with RoPE", "episodes with ALiBi",
  "encoder layers in a stack's geometry",
  "weights episodes with exact validity", "swaps to a good file",
  "swaps taken over while flowing (sattn-weights-swapped)",
  "swaps taken over by a READY", "rows of the new model after a swap",
  "swaps refused: missing file", "swaps refused: truncated file",
  "swaps refused: other geometry", "swaps refused: other kind",
  "rows compared with old-only and new-only runs",
  "episodes with precision=fast and weights",
  "episodes with precision=fast without weights",
  "threads twins with precision=fast",
  "episodes with a whole model and precision=fast",
  "episodes with a conv stem", "episodes with RMS normalisation",
  "episodes with standardisation", "episodes with a CLS token",
  "episodes with max pooling", "episodes with attention pooling"
};

static guint64 stats[N_ST];

static Episode *current;        /* for the crash, exit and alarm reports */
static gchar *self_exe;

static void
ep_log (Episode * e, const gchar * fmt, ...)
G_GNUC_PRINTF (2, 3);

     static void ep_log (Episode * e, const gchar * fmt, ...)
{
  va_list ap;

  if (e->log->len > 0)
    g_string_append (e->log, "; ");
  va_start (ap, fmt);
  g_string_append_vprintf (e->log, fmt, ap);
  va_end (ap);
}

/* The reproducer is repro_pre + seed + repro_post (made at start-up, so
 * that the crash handler only writes). */
static gchar *repro_pre, *repro_post;

static gchar *
reproducer (guint64 seed)
{
  return g_strdup_printf ("%s%" G_GUINT64_FORMAT "%s", repro_pre, seed,
      repro_post);
}

static void
ep_report (Episode * e, const gchar * what)
{
  gchar *rep = reproducer (e->seed);

  fprintf (stderr, "\nsattn-fuzz: episode with seed %" G_GUINT64_FORMAT
      " FAILED: %s\nreproduce: %s\nevents: %s\n", e->seed, what, rep,
      e->log->str);
  fflush (stderr);
  g_free (rep);
}

#define ep_check(e, cond, ...) G_STMT_START {                         \
  if (G_UNLIKELY (!(cond))) {                                         \
    gchar *what_ = g_strdup_printf (__VA_ARGS__);                     \
    ep_report ((e), what_);                                           \
    current = NULL;                                                   \
    fail ("%s (seed %" G_GUINT64_FORMAT ")", what_, (e)->seed);       \
    g_free (what_);                                                   \
  }                                                                   \
} G_STMT_END

/* Crashes, aborts (g_error, g_assert) and check's exit on failure. */
static void
crash_handler (int sig)
{
  Episode *e = current;

  if (e) {
    static const char msg[] = "\nsattn-fuzz: crashed or timed out in the "
        "episode below\n";
    gchar line[128];
    int n;
    ssize_t unused G_GNUC_UNUSED;

    unused = write (2, msg, sizeof msg - 1);
    n = g_snprintf (line, sizeof line, "seed %" G_GUINT64_FORMAT
        "\nreproduce: ", e->seed);
    unused = write (2, line, n);
    unused = write (2, repro_pre, strlen (repro_pre));
    n = g_snprintf (line, sizeof line, "%" G_GUINT64_FORMAT, e->seed);
    unused = write (2, line, n);
    unused = write (2, repro_post, strlen (repro_post));
    unused = write (2, "\nevents: ", 9);
    unused = write (2, e->log->str, e->log->len);
    unused = write (2, "\n", 1);
    current = NULL;
  }
  signal (sig, SIG_DFL);
  raise (sig);
}

static void
exit_report (void)
{
  if (current)
    ep_report (current, "the test stopped inside this episode (a failed "
        "check of gst-check, e.g. a critical warning)");
}

/* Timeline bookkeeping. */

static GstClockTime
tl_ts (const Timeline * t, guint64 f)
{
  return t->t0 + gst_util_uint64_scale (f * t->fs, GST_SECOND, t->rate);
}

static gboolean
tl_complete (const Timeline * t)
{
  return t->closed && (t->flushed || t->out_next >= t->frames);
}

static void
tl_add_frames (Timeline * t, guint64 n, gboolean invalid)
{
  if (n == 0)
    return;
  if (invalid) {
    guint len = t->invalid->len;
    guint64 *last = len ? &g_array_index (t->invalid, guint64, len - 1) : NULL;

    if (last && *last == t->frames) {
      *last += n;
    } else {
      guint64 ab[2] = { t->frames, t->frames + n };
      g_array_append_vals (t->invalid, ab, 2);
    }
  }
  t->frames += n;
}

/* The first invalid range [s, e) of t with e > f (the ranges are
 * disjoint, in order and merged when they touch), as a pair index, or
 * the number of pairs. */
static guint
tl_range_after (const Timeline * t, guint64 f)
{
  guint lo = 0, hi = t->invalid->len / 2;

  while (lo < hi) {
    guint mid = (lo + hi) / 2;

    if (g_array_index (t->invalid, guint64, 2 * mid + 1) > f)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Are all frames of [a, b) invalid (frames < 0 count as invalid)? */
static gboolean
tl_all_invalid (const Timeline * t, gint64 a, gint64 b)
{
  guint i;

  if (a < 0)
    a = 0;
  if (a >= b)
    return TRUE;
  i = tl_range_after (t, (guint64) a);
  return i < t->invalid->len / 2 &&
      g_array_index (t->invalid, guint64, 2 * i) <= (guint64) a &&
      (guint64) b <= g_array_index (t->invalid, guint64, 2 * i + 1);
}

static gboolean
tl_frame_invalid (const Timeline * t, guint64 f)
{
  return tl_all_invalid (t, (gint64) f, (gint64) f + 1);
}

static void
tl_free (gpointer p)
{
  Timeline *t = p;

  g_array_unref (t->invalid);
  g_free (t);
}

static GstClockTime
m_expected (Episode * e)
{
  guint64 d;

  if (!GST_CLOCK_TIME_IS_VALID (e->t0))
    return GST_CLOCK_TIME_NONE;
  /* saturates at the last valid clock time, never wraps */
  d = gst_util_uint64_scale (e->bytes, GST_SECOND, (guint64) e->rate * e->bpf);
  return d > G_MAXUINT64 - 1 - e->t0 ? G_MAXUINT64 - 1 : e->t0 + d;
}

static void
m_start_timeline (Episode * e, GstClockTime ts)
{
  Timeline *t = g_new0 (Timeline, 1);

  if (!GST_CLOCK_TIME_IS_VALID (ts))
    ts = e->tseg.start;
  t->id = e->tl->len;
  stats[ST_RESYNCS]++;
  t->t0 = ts;
  t->rate = e->rate;
  t->fs = e->fs;
  t->d = e->d;
  t->invalid = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_ptr_array_add (e->tl, t);
  e->cur = t;
  e->t0 = ts;
  e->bytes = 0;
  e->carry_len = 0;
  e->carry_invalid = FALSE;
}

/* What is held goes out (EOS, resync, new segment, caps): the timeline
 * ends, an incomplete frame is dropped. */
static void
m_drain (Episode * e)
{
  if (e->cur)
    e->cur->closed = TRUE;
  e->cur = NULL;
  e->carry_len = 0;
  e->carry_invalid = FALSE;
}

/* What is held is dropped (flush, READY). */
static void
m_flush (Episode * e)
{
  if (e->cur) {
    e->cur->closed = TRUE;
    e->cur->flushed = TRUE;
  }
  e->cur = NULL;
  e->t0 = GST_CLOCK_TIME_NONE;
  e->bytes = 0;
  e->carry_len = 0;
  e->carry_invalid = FALSE;
}

/* The detector restarted at ts (valid) for n samples. */
static void
a_restart (Episode * e, GstClockTime ts, guint64 n)
{
  e->a_base = ts;
  e->a_samples = n;
  e->a_off = gst_util_uint64_scale (ts, e->rate, GST_SECOND) + n;
}

/* Where the detector expects the next sample, in time. */
static GstClockTime
a_next (Episode * e)
{
  guint64 d = gst_util_uint64_scale_int (e->a_samples, GST_SECOND, e->rate);

  return d > G_MAXUINT64 - 1 - e->a_base ? G_MAXUINT64 - 1 : e->a_base + d;
}

/* Within a segment time never goes back: a resync at a time behind the
 * counter restarts the window but continues the counter's time line. */
static void
m_resync (Episode * e, GstClockTime ts)
{
  GstClockTime exp = m_expected (e);

  m_drain (e);
  m_start_timeline (e, GST_CLOCK_TIME_IS_VALID (ts) &&
      (!GST_CLOCK_TIME_IS_VALID (exp) || ts >= exp) ? ts : exp);
}

/* The documented resync rule before n samples of data at ts: a DISCONT
 * flag, or a PTS at least alignment-threshold (40 ms, at least two
 * samples) from where the detector, which counts the input's own samples
 * since its last restart, expects it (discont-wait=0 here).  The detector
 * restarts at the timeline's start and at a DISCONT, rebases itself at a
 * detected jump, and follows the counter after a GAP. */
static void
m_check_discont (Episode * e, GstClockTime ts, gboolean discont, guint64 n)
{
  GstClockTime exp, thr, ats;
  guint64 off, diff, max_diff;

  if (!GST_CLOCK_TIME_IS_VALID (e->t0)) {
    m_start_timeline (e, ts);
    a_restart (e, e->t0, n);
    return;
  }
  if (e->cur == NULL) {
    /* drained at EOS: the timeline goes on in time */
    exp = m_expected (e);
    m_start_timeline (e, exp);
    e->bytes = 0;
  }
  if (discont) {
    m_resync (e, ts);
    a_restart (e, GST_CLOCK_TIME_IS_VALID (ts) ? ts : e->t0, n);
    return;
  }
  ats = GST_CLOCK_TIME_IS_VALID (ts) ? ts : a_next (e);
  thr = MAX (40 * GST_MSECOND, gst_util_uint64_scale_int_ceil (2,
          GST_SECOND, e->rate));
  max_diff = gst_util_uint64_scale_int (thr, e->rate, GST_SECOND);
  off = gst_util_uint64_scale (ats, e->rate, GST_SECOND);
  diff = off > e->a_off ? off - e->a_off : e->a_off - off;
  if (diff >= max_diff) {
    a_restart (e, ats, n);
    if (GST_CLOCK_TIME_IS_VALID (ts) && !(ts == G_MAXUINT64 - 1 &&
            m_expected (e) == G_MAXUINT64 - 1))
      m_resync (e, ts);
  } else {
    e->a_off += n;
    e->a_samples += n;
  }
}

/* size bytes (data NULL: zeros) reach the frame assembler.  Returns FALSE
 * when a frame stops the stream (invalid-frames=error). */
static gboolean
m_feed (Episode * e, const guint8 * data, guint64 size, gboolean invalid)
{
  float *frame = g_alloca (e->fb);

  e->bytes += size;
  while (size > 0) {
    gsize take = (gsize) MIN ((guint64) (e->fb - e->carry_len), size);
    gboolean inv;

    if (e->carry_len == 0 && size >= e->fb && data == NULL) {
      /* whole frames of zeros at once (long GAPs) */
      guint64 n = size / e->fb;

      tl_add_frames (e->cur, n, invalid);
      size -= n * e->fb;
      continue;
    }
    if (data) {
      memcpy (e->carry + e->carry_len, data, take);
      data += take;
    } else {
      memset (e->carry + e->carry_len, 0, take);
    }
    e->carry_len += take;
    e->carry_invalid |= invalid;
    size -= take;
    if (e->carry_len < e->fb)
      break;
    memcpy (frame, e->carry, e->fb);
    inv = e->carry_invalid;
    e->carry_len = 0;
    e->carry_invalid = FALSE;
    if (!inv && !sattn_all_finite (frame, e->d)) {
      if (e->policy == INV_ERROR) {
        e->bytes -= size;
        return FALSE;
      }
      inv = e->policy == INV_MASK;
    }
    if (g_strcmp0 (g_getenv ("SATTN_FUZZ_VERBOSE"), "2") == 0) {
      gsize j;

      fprintf (stderr, "frame %" G_GUINT64_FORMAT " inv %d:", e->cur->frames,
          inv);
      for (j = 0; j < e->d; j++)
        fprintf (stderr, " %g", (double) frame[j]);
      fprintf (stderr, "\n");
    }
    tl_add_frames (e->cur, 1, inv);
  }
  return TRUE;
}

/* ------------------------------------------------------------ output */

static GstPadProbeReturn
out_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Episode *e = user_data;
  Item it = { 0, };

  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
    GstSattnMeta *meta = gst_buffer_get_sattn_meta (buf);
    GstMapInfo map;

    it.type = IT_BUFFER;
    it.meta_rows = G_MAXUINT;
    if (meta) {
      it.meta_rows = meta->n_rows;
      it.meta_window = meta->window;
      it.meta_row_bytes = meta->row_bytes;
      it.meta_r0 = e->meta->len;
      g_array_append_vals (e->meta, meta->rows, meta->n_rows);
    }
    it.pts = GST_BUFFER_PTS (buf);
    it.dur = GST_BUFFER_DURATION (buf);
    it.discont = GST_BUFFER_IS_DISCONT (buf);
    it.gap = GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_GAP);
    fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
    it.f0 = e->floats->len;
    it.n_floats = map.size / sizeof (float);
    if (map.size % sizeof (float) != 0)
      it.n_floats = G_MAXSIZE;
    else
      g_array_append_vals (e->floats, map.data, (guint) it.n_floats);
    gst_buffer_unmap (buf, &map);
    g_array_append_val (e->items, it);
    return GST_PAD_PROBE_DROP;
  }
  if (info->type & (GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM |
          GST_PAD_PROBE_TYPE_EVENT_FLUSH)) {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

    switch (GST_EVENT_TYPE (ev)) {
      case GST_EVENT_CAPS:{
        GstCaps *caps;

        gst_event_parse_caps (ev, &caps);
        it.type = IT_CAPS;
        it.channels = 0;
        gst_structure_get_int (gst_caps_get_structure (caps, 0), "channels",
            &it.channels);
        break;
      }
      case GST_EVENT_GAP:
        it.type = IT_GAP;
        gst_event_parse_gap (ev, &it.pts, &it.dur);
        break;
      case GST_EVENT_SEGMENT:{
        const GstSegment *seg;

        it.type = IT_SEGMENT;
        gst_event_parse_segment (ev, &seg);
        it.seg = *seg;
        break;
      }
      case GST_EVENT_FLUSH_STOP:
        it.type = IT_FLUSH_STOP;
        break;
      case GST_EVENT_EOS:
        it.type = IT_EOS;
        break;
      default:
        return GST_PAD_PROBE_OK;
    }
    g_array_append_val (e->items, it);
  }
  return GST_PAD_PROBE_OK;
}

/* The timeline the next output must belong to. */
static Timeline *
out_target (Episode * e)
{
  while (e->ocur < e->tl->len &&
      tl_complete (g_ptr_array_index (e->tl, e->ocur)))
    e->ocur++;
  return e->ocur < e->tl->len ? g_ptr_array_index (e->tl, e->ocur) : NULL;
}

/* Frame index of time t on timeline tl, or -1 if t is not on its grid. */
static gint64
tl_index (const Timeline * t, GstClockTime ts)
{
  guint64 f;

  if (!GST_CLOCK_TIME_IS_VALID (ts) || ts < t->t0)
    return -1;
  f = gst_util_uint64_scale_round (ts - t->t0, t->rate,
      GST_SECOND * (guint64) t->fs);
  if (tl_ts (t, f) == ts)
    return (gint64) f;
  if (f > 0 && tl_ts (t, f - 1) == ts)
    return (gint64) f - 1;
  if (tl_ts (t, f + 1) == ts)
    return (gint64) f + 1;
  return -1;
}

/* Running time of ts on the segment the element sent last. */
static GstClockTime
out_rt (Episode * e, GstClockTime ts)
{
  return gst_segment_to_running_time (&e->oseg, GST_FORMAT_TIME, ts);
}

/* Masked key positions of the window [end - window, end) of timeline t
 * (positions before the timeline's start are padding). */
static guint
tl_masked (const Timeline * t, gint64 end, guint window)
{
  gint64 p0 = end - (gint64) window;
  guint64 a;
  guint n = 0, i;

  if (p0 < 0) {
    n = (guint) MIN (-p0, (gint64) window);
    p0 = 0;
  }
  if (end <= p0)
    return n;
  a = (guint64) p0;
  for (i = tl_range_after (t, a); i < t->invalid->len / 2; i++) {
    guint64 s = g_array_index (t->invalid, guint64, 2 * i);
    guint64 e = g_array_index (t->invalid, guint64, 2 * i + 1);

    if (s >= (guint64) end)
      break;
    n += (guint) (MIN (e, (guint64) end) - MAX (s, a));
  }
  return n;
}

/* Row r of a buffer's GstSattnMeta against the model (docs/element.md "Window
 * metadata"): the row accounts for frames [first, first + n) of timeline t and
 * was computed in the window ending at frame wend; valid_row says whether its
 * query frames (pooled: the frames it pools) had a usable one.  Exact: frames,
 * key counts, the window's running-time span; with validity_unknown
 * (overflowing projections make frames invalid) only what does not depend on
 * which frames are usable. */
static void
check_meta_row (Episode * e, const Item * it, const Timeline * t, guint r,
    guint64 first, guint64 n, guint64 wend, gboolean valid_row)
{
  const GstSattnMetaRow *m = &g_array_index (e->meta, GstSattnMetaRow,
      it->meta_r0 + r);
  guint64 ws = wend > e->window ? wend - e->window : 0;

  stats[ST_META_ROWS]++;
  if (plan.mode != SW_NONE && e->rec_base + r < plan.rec[plan.mode].rows->len) {
    RecRow *rr = &g_array_index (plan.rec[plan.mode].rows, RecRow,
        e->rec_base + r);

    rr->tl = t->id;
    rr->wend = wend;
  }
  ep_check (e, m->first_frame == first && m->n_frames == n, "meta row %u: "
      "frames %" G_GUINT64_FORMAT "+%u, expected %" G_GUINT64_FORMAT "+%"
      G_GUINT64_FORMAT " (timeline %u)", r, m->first_frame, m->n_frames,
      first, n, t->id);
  ep_check (e, (guint64) m->valid_keys + m->masked_keys == e->window,
      "meta row %u: %u valid + %u masked keys in a window of %u", r,
      m->valid_keys, m->masked_keys, e->window);
  ep_check (e, m->window_end == out_rt (e, tl_ts (t, wend)) &&
      m->window_start == out_rt (e, tl_ts (t, ws)), "meta row %u: window "
      "%" GST_TIME_FORMAT " - %" GST_TIME_FORMAT ", expected frames %"
      G_GUINT64_FORMAT "-%" G_GUINT64_FORMAT " at %" GST_TIME_FORMAT " - %"
      GST_TIME_FORMAT, r, GST_TIME_ARGS (m->window_start),
      GST_TIME_ARGS (m->window_end), ws, wend,
      GST_TIME_ARGS (out_rt (e, tl_ts (t, ws))),
      GST_TIME_ARGS (out_rt (e, tl_ts (t, wend))));
  if (e->validity_unknown)
    return;
  {
    guint masked = tl_masked (t, (gint64) wend, e->window);

    ep_check (e, m->masked_keys == masked, "meta row %u: %u masked keys, "
        "expected %u (window ending at frame %" G_GUINT64_FORMAT " of "
        "timeline %u)", r, m->masked_keys, masked, wend, t->id);
  }
  ep_check (e, m->fully_masked_rows == 0, "meta row %u: %u fully masked "
      "softmax rows", r, m->fully_masked_rows);
  ep_check (e, m->valid == valid_row, "meta row %u: valid %d, expected %d "
      "(frames %" G_GUINT64_FORMAT "+%" G_GUINT64_FORMAT ")", r, m->valid,
      valid_row, first, n);
}

/* The buffer has a meta of rows rows as wide as its rows. */
static void
check_meta_shape (Episode * e, const Item * it, gsize rows, gsize row_floats)
{
  ep_check (e, it->meta_rows != G_MAXUINT, "output buffer at %"
      GST_TIME_FORMAT " without GstSattnMeta", GST_TIME_ARGS (it->pts));
  ep_check (e, it->meta_rows == rows && it->meta_row_bytes == row_floats *
      sizeof (float) && it->meta_window == e->window, "meta of %u rows of %"
      G_GSIZE_FORMAT " bytes, window %u, on a buffer of %" G_GSIZE_FORMAT
      " rows of %" G_GSIZE_FORMAT " bytes, window %u", it->meta_rows,
      it->meta_row_bytes, it->meta_window, rows, row_floats * sizeof (float),
      e->window);
}

static void
check_span (Episode * e, const Item * it)
{
  const gchar *what = it->type == IT_GAP ? "GAP event" : "buffer";
  gsize row_floats = e->out_channels > 0 ? (gsize) e->out_channels : 1;
  gsize rows = 0, i;
  Timeline *t;
  gint64 b;
  guint64 a;

  /* Structural: time never wraps nor goes back inside a segment. */
  ep_check (e, GST_CLOCK_TIME_IS_VALID (it->pts) &&
      GST_CLOCK_TIME_IS_VALID (it->dur), "%s without PTS or DURATION: %"
      GST_TIME_FORMAT " + %" GST_TIME_FORMAT, what, GST_TIME_ARGS (it->pts),
      GST_TIME_ARGS (it->dur));
  ep_check (e, it->pts + it->dur >= it->pts && it->pts + it->dur !=
      GST_CLOCK_TIME_NONE, "%s time wraps: %" G_GUINT64_FORMAT " + %"
      G_GUINT64_FORMAT, what, it->pts, it->dur);
  ep_check (e, !e->scope_any || it->pts >= e->scope_last,
      "%s PTS %" GST_TIME_FORMAT " goes back (previous %" GST_TIME_FORMAT
      ") within a segment", what, GST_TIME_ARGS (it->pts),
      GST_TIME_ARGS (e->scope_last));
  e->scope_any = TRUE;
  e->scope_last = it->pts;

  if (it->type == IT_BUFFER) {
    stats[ST_OUT_BUFFERS]++;
    ep_check (e, it->n_floats != G_MAXSIZE, "buffer size not a multiple "
        "of 4 bytes");
    ep_check (e, it->n_floats > 0 && it->n_floats % row_floats == 0,
        "buffer of %" G_GSIZE_FORMAT " floats for rows of %" G_GSIZE_FORMAT,
        it->n_floats, row_floats);
    rows = it->n_floats / row_floats;
    if (g_strcmp0 (g_getenv ("SATTN_FUZZ_VERBOSE"), "2") == 0)
      for (i = 0; i < it->n_floats; i++)
        fprintf (stderr, "out[%" G_GSIZE_FORMAT "] = %g\n", i,
            (double) g_array_index (e->floats, float, it->f0 + i));
    for (i = 0; i < it->n_floats; i++)
      ep_check (e, isfinite (g_array_index (e->floats, float, it->f0 + i)),
          "non-finite output value %g at float %" G_GSIZE_FORMAT " of a "
          "buffer at %" GST_TIME_FORMAT,
          (double) g_array_index (e->floats, float, it->f0 + i), i,
          GST_TIME_ARGS (it->pts));
  }

  if (e->inexact) {
    /* Hostile times (near the end of the clock's range, where timestamps
     * saturate): which timeline an output belongs to cannot be told from
     * its time, so only the count: in frames mode the buffer rows of the
     * episode never exceed the frames received. */
    if (it->type == IT_BUFFER)
      check_meta_shape (e, it, rows, row_floats);
    if (e->output == OUT_FRAMES && it->type == IT_BUFFER) {
      guint64 frames = 0;
      guint k;

      for (k = 0; k < e->tl->len; k++)
        frames += ((Timeline *) g_ptr_array_index (e->tl, k))->frames;
      e->inexact_rows += rows;
      ep_check (e, e->inexact_rows <= frames, "more rows than frames (%"
          G_GUINT64_FORMAT " > %" G_GUINT64_FORMAT ")", e->inexact_rows,
          frames);
    }
    return;
  }
  t = out_target (e);
  ep_check (e, t != NULL, "%s at %" GST_TIME_FORMAT " that no input frame "
      "accounts for", what, GST_TIME_ARGS (it->pts));

  a = t->out_next;
  ep_check (e, it->pts == tl_ts (t, a), "%s PTS %" GST_TIME_FORMAT " is "
      "not where frame %" G_GUINT64_FORMAT " of timeline %u lies (%"
      GST_TIME_FORMAT ", start %" GST_TIME_FORMAT ")", what,
      GST_TIME_ARGS (it->pts), a, t->id, GST_TIME_ARGS (tl_ts (t, a)),
      GST_TIME_ARGS (t->t0));
  b = tl_index (t, it->pts + it->dur);
  ep_check (e, b >= 0, "%s end %" GST_TIME_FORMAT " is not on the frame "
      "grid of timeline %u", what, GST_TIME_ARGS (it->pts + it->dur), t->id);
  ep_check (e, (guint64) b > a && (guint64) b <= t->frames, "%s accounts "
      "for frames %" G_GUINT64_FORMAT "-%" G_GINT64_FORMAT " of timeline %u "
      "which has received %" G_GUINT64_FORMAT, what, a, b, t->id, t->frames);

  if (it->type == IT_GAP) {
    /* (frames whose projections overflow are invalid too: with
     * validity_unknown the model cannot tell) */
    ep_check (e, e->validity_unknown || tl_all_invalid (t, (gint64) a, b),
        "GAP event over frames "
        "%" G_GUINT64_FORMAT "-%" G_GINT64_FORMAT " that are not all "
        "invalid", a, b);
    t->after_gap = TRUE;
    t->out_next = (guint64) b;
    return;
  }

  /* DISCONT on the first buffer of a timeline only. */
  if (!(t->after_gap && it->discont))
    ep_check (e, it->discont == !t->saw_buffer, "DISCONT %s on buffer at "
        "%" GST_TIME_FORMAT " (frame %" G_GUINT64_FORMAT " of timeline %u)",
        it->discont ? "set" : "missing", GST_TIME_ARGS (it->pts), a, t->id);
  t->saw_buffer = TRUE;
  t->after_gap = FALSE;
  check_meta_shape (e, it, rows, row_floats);

  if (e->output == OUT_FRAMES) {
    gboolean all_inv = TRUE;
    guint64 f;

    ep_check (e, rows == (guint64) b - a, "buffer of %" G_GSIZE_FORMAT
        " rows spans %" G_GUINT64_FORMAT " frames", rows, (guint64) b - a);
    for (f = a; f < (guint64) b; f++) {
      const float *row = &g_array_index (e->floats, float,
          it->f0 + (f - a) * row_floats);

      /* the row's window: the first one (on the hop schedule of the
       * timeline, the first at window with start=wait) ending after f,
       * cut by a drain */
      while (f >= t->wend) {
        t->wend = (e->start == START_WAIT && t->wend == 0) ? e->window :
            t->wend + e->hop;
        if (t->closed && t->wend > t->frames)
          t->wend = t->frames;
      }
      check_meta_row (e, it, t, (guint) (f - a), f, 1, t->wend,
          !tl_frame_invalid (t, f));
      if (e->validity_unknown)
        continue;
      if (!tl_frame_invalid (t, f)) {
        all_inv = FALSE;
        continue;
      }
      for (i = 0; i < row_floats; i++)
        ep_check (e, row[i] == 0.0f, "row of invalid frame %"
            G_GUINT64_FORMAT " is not zero (%g)", f, (double) row[i]);
    }
    ep_check (e, e->validity_unknown || it->gap == all_inv, "GAP flag %s "
        "on a buffer whose rows "
        "(frames %" G_GUINT64_FORMAT "-%" G_GINT64_FORMAT " of timeline %u) "
        "are %s invalid", it->gap ? "set" : "missing", a, b, t->id,
        all_inv ? "all" : "not all");
  } else {
    /* one row per window: window ends at hop, 2 hop, ... (start=wait:
     * window, window + hop, ...), the last one possibly cut by a drain */
    guint64 pos = a, end = a;
    gboolean any_valid = FALSE;
    gsize r;

    if (e->output == OUT_WINDOW)
      ep_check (e, row_floats == e->window * (e->wf ? e->wf->d_out : t->d),
          "window row of %" G_GSIZE_FORMAT " floats", row_floats);
    for (r = 0; r < rows; r++) {
      gint64 q0;

      end = (e->start == START_WAIT && pos == 0) ? e->window : pos + e->hop;
      if (t->closed && end > t->frames && t->frames > pos)
        end = t->frames;
      /* a whole model's last pools the last usable frame */
      q0 = e->output == OUT_LAST && !(e->wf && e->wf->kind == K_WHOLE) ?
          (gint64) end - 1 : (gint64) end - (gint64) e->window;
      any_valid |= !tl_all_invalid (t, q0, (gint64) end);
      if (end <= t->frames)
        check_meta_row (e, it, t, (guint) r, pos, end - pos, end,
            !tl_all_invalid (t, q0, (gint64) end));
      pos = end;
    }
    ep_check (e, end == (guint64) b, "%" G_GSIZE_FORMAT " pooled rows "
        "account for frames %" G_GUINT64_FORMAT "-%" G_GINT64_FORMAT
        " instead of %" G_GUINT64_FORMAT "-%" G_GUINT64_FORMAT " (window "
        "%u, hop %u, start %d)", rows, a, b, a, end, e->window, e->hop,
        e->start);
    ep_check (e, e->validity_unknown
        || it->gap == !any_valid,
        "GAP flag %s on pooled rows " "ending at frame %" G_GINT64_FORMAT,
        it->gap ? "set" : "missing", b);
  }
  t->rows += rows;
  t->out_next = (guint64) b;
}

/* Check everything that came out since the last call, then the bus. */
static void
ep_consume (Episode * e)
{
  GstMessage *msg;
  GstEvent *ev;
  guint i;

  for (i = 0; i < e->items->len; i++) {
    const Item *it = &g_array_index (e->items, Item, i);

    /* everything that came out, for the threads twin */
    g_checksum_update (e->digest, (const guchar *) &it->type, sizeof it->type);
    if (it->type == IT_BUFFER || it->type == IT_GAP) {
      guint64 v[4] = { it->pts, it->dur, (guint64) it->discont,
        (guint64) it->gap
      };

      g_checksum_update (e->digest, (const guchar *) v, sizeof v);
    }
    if (it->type == IT_BUFFER && it->n_floats != G_MAXSIZE)
      g_checksum_update (e->digest, (const guchar *) &g_array_index
          (e->floats, float, it->f0), it->n_floats * sizeof (float));
    if (it->type == IT_BUFFER && it->meta_rows != G_MAXUINT)
      g_checksum_update (e->digest, (const guchar *) &g_array_index
          (e->meta, GstSattnMetaRow, it->meta_r0),
          it->meta_rows * sizeof (GstSattnMetaRow));
    if (plan.mode != SW_NONE && it->type == IT_BUFFER &&
        it->n_floats != G_MAXSIZE && e->out_channels > 0) {
      SwapRec *rec = &plan.rec[plan.mode];
      gsize rf = (gsize) e->out_channels, r;

      e->rec_base = rec->rows->len;
      for (r = 0; r < it->n_floats / rf; r++) {
        RecRow row = { rec->floats->len + r * rf, rf, 0, G_MAXUINT64 };

        g_array_append_val (rec->rows, row);
      }
      g_array_append_vals (rec->floats, &g_array_index (e->floats, float,
              it->f0), (guint) it->n_floats);
    }
    switch (it->type) {
      case IT_BUFFER:
      case IT_GAP:
        check_span (e, it);
        break;
      case IT_CAPS:
        e->out_channels = it->channels;
        break;
      case IT_SEGMENT:
        e->oseg = it->seg;
        e->scope_any = FALSE;
        break;
      case IT_FLUSH_STOP:
        e->scope_any = FALSE;
        break;
      case IT_EOS:
        e->eos_seen = TRUE;
        break;
    }
  }
  g_array_set_size (e->items, 0);
  g_array_set_size (e->floats, 0);
  g_array_set_size (e->meta, 0);
  while ((ev = gst_harness_try_pull_event (e->h)) != NULL)
    gst_event_unref (ev);

  while ((msg = gst_bus_pop (e->bus)) != NULL) {
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      GError *err = NULL;
      gchar *dbg = NULL;

      gst_message_parse_error (msg, &err, &dbg);
      ep_check (e, e->errors_expected > 0, "unexpected error: %s (%s)",
          err->message, dbg ? dbg : "");
      e->errors_expected--;
      g_clear_error (&err);
      g_free (dbg);
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
      GError *err = NULL;

      gst_message_parse_warning (msg, &err, NULL);
      if (strstr (err->message, "cannot replace the running model")) {
        ep_check (e, e->swap_set && plan.bad && strstr (err->message,
                plan.path) != NULL, "unexpected swap warning: %s",
            err->message);
        e->swap_warnings++;
      }
      if (strstr (err->message, "cannot change while PAUSED or PLAYING")) {
        ep_check (e, e->warnings_expected > 0, "unexpected warning: %s",
            err->message);
        e->warnings_expected--;
      }
      g_clear_error (&err);
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT &&
        gst_message_has_name (msg, "sattn-weights-swapped")) {
      const GstStructure *st = gst_message_get_structure (msg);

      e->swap_msgs++;
      gst_structure_get_uint64 (st, "frame", &e->swap_frame);
      g_free (e->swap_msg_path);
      e->swap_msg_path = g_strdup (gst_structure_get_string (st, "weights"));
    }
    gst_message_unref (msg);
  }
}

/* ------------------------------------------------------------ attn pad */

static GstFlowReturn
attn_chain (GstPad * pad, GstObject * parent, GstBuffer * buf)
{
  Episode *e = gst_pad_get_element_private (pad);

  if (!g_atomic_int_get (&e->attn_caps))
    g_atomic_int_set (&e->attn_bad, 1);
  gst_buffer_unref (buf);
  return GST_FLOW_OK;
}

static gboolean
attn_event (GstPad * pad, GstObject * parent, GstEvent * ev)
{
  Episode *e = gst_pad_get_element_private (pad);

  if (GST_EVENT_TYPE (ev) == GST_EVENT_CAPS)
    g_atomic_int_set (&e->attn_caps, 1);
  gst_event_unref (ev);
  return TRUE;
}

/* Takes any caps, including new ones mid-stream. */
static gboolean
attn_query (GstPad * pad, GstObject * parent, GstQuery * q)
{
  switch (GST_QUERY_TYPE (q)) {
    case GST_QUERY_ACCEPT_CAPS:
      gst_query_set_accept_caps_result (q, TRUE);
      return TRUE;
    case GST_QUERY_CAPS:
      gst_query_set_caps_result (q, GST_CAPS_ANY);
      return TRUE;
    default:
      return gst_pad_query_default (pad, parent, q);
  }
}

static void
attn_request (Episode * e)
{
  GstPadLinkReturn lr;

  stats[ST_ATTN]++;
  e->attn = gst_element_request_pad_simple (e->h->element, "attn");
  ep_check (e, e->attn != NULL, "the attn pad could not be requested");
  e->attn_sink = gst_pad_new ("attnsink", GST_PAD_SINK);
  gst_pad_set_element_private (e->attn_sink, e);
  gst_pad_set_chain_function (e->attn_sink, attn_chain);
  gst_pad_set_event_function (e->attn_sink, attn_event);
  gst_pad_set_query_function (e->attn_sink, attn_query);
  g_atomic_int_set (&e->attn_caps, 0);
  gst_pad_set_active (e->attn_sink, TRUE);
  lr = gst_pad_link (e->attn, e->attn_sink);
  ep_check (e, lr == GST_PAD_LINK_OK, "attn pad link failed: %d", lr);
}

static void
attn_release (Episode * e)
{
  gst_element_release_request_pad (e->h->element, e->attn);
  gst_object_unref (e->attn);
  e->attn = NULL;
  gst_pad_set_active (e->attn_sink, FALSE);
  gst_object_unref (e->attn_sink);
  e->attn_sink = NULL;
  ep_check (e, !g_atomic_int_get (&e->attn_bad), "attn pad pushed a "
      "buffer before caps");
}

/* ------------------------------------------------------------ inputs */

static guint
rint_range (Episode * e, guint lo, guint hi_incl)
{
  return (guint) g_rand_int_range (e->r, (gint32) lo, (gint32) hi_incl + 1);
}

static gboolean
chance (Episode * e, gdouble p)
{
  return g_rand_double (e->r) < p;
}

static gchar *
caps_str (gint rate, gint channels)
{
  return sattn_caps_string (rate, channels);
}

/* Push caps; returns whether the element's sink pad took them (a pad
 * reports sticky events pushed as handled even when refused). */
static gboolean
push_caps (Episode * e, gint rate, gint channels)
{
  gchar *s = caps_str (rate, channels);
  GstCaps *caps = gst_caps_from_string (s), *cur;
  GstPad *sink = gst_element_get_static_pad (e->h->element, "sink");
  gboolean res;
  /* Output rows of 64 or more values go out as audio/x-raw only to a
   * downstream that asks for their width (audio converters crash on
   * them; test-element-events.c): ask for it, as a capsfilter would. */
  guint64 width = (guint64) (e->wf ? e->wf->d_out : (guint) channels *
      e->fs) * (e->output == OUT_WINDOW ? e->window : 1);

  g_free (s);
  if (width > 63) {
    s = g_strdup_printf ("audio/x-raw, channels=(int)%" G_GUINT64_FORMAT,
        width);
    gst_harness_set_sink_caps_str (e->h, s);
    g_free (s);
  } else {
    gst_harness_set_sink_caps_str (e->h, "audio/x-raw");
  }
  gst_harness_push_event (e->h, gst_event_new_caps (gst_caps_ref (caps)));
  cur = gst_pad_get_current_caps (sink);
  res = cur != NULL && gst_caps_is_equal (cur, caps);
  gst_clear_caps (&cur);
  gst_object_unref (sink);
  gst_caps_unref (caps);
  return res;
}

/* A rate that frame-size divides and whose frame rate every hop up to 12
 * (except 9 and 11) divides. */
static gint
pick_rate (Episode * e)
{
  static const gint mult[] = { 1, 2, 3, 5, 10, 20, 50 };

  return (gint) (e->fs * 840 * mult[rint_range (e, 0, 6)]);
}

static gint
pick_channels (Episode * e)
{
  gint c;

  if (e->wf)
    return (gint) (e->wf->d_model / e->fs);
  /* a channel count whose d_model the heads divide */
  do
    c = (gint) rint_range (e, 1, 4);
  while (((guint) c * e->fs) % e->heads != 0);
  return c;
}

/* Valid caps (a change, or the same again). */
static void
op_caps (Episode * e, gboolean first)
{
  gint rate = e->rate, channels = e->channels;
  gboolean res;

  if (first || chance (e, 0.8)) {
    rate = chance (e, 0.5) || first ? pick_rate (e) : e->rate;
    channels = chance (e, 0.5) || first ? pick_channels (e) : e->channels;
  }
  ep_log (e, "caps %d Hz %d ch", rate, channels);
  e->caps_after_swap |= e->swap_set && !first;
  stats[ST_CAPS] += !first;
  if (!e->configured || rate != e->rate || channels != e->channels) {
    GstClockTime next = GST_CLOCK_TIME_NONE;

    if (e->configured) {
      next = m_expected (e);
      m_drain (e);
    }
    e->configured = TRUE;
    e->rate = rate;
    e->channels = channels;
    e->d = (gsize) channels *e->fs;
    e->fb = e->d * sizeof (float);
    e->bpf = (gsize) channels *sizeof (float);
    e->carry = g_realloc (e->carry, e->fb);
    e->carry_len = 0;
    e->t0 = GST_CLOCK_TIME_NONE;
    e->bytes = 0;
    if (GST_CLOCK_TIME_IS_VALID (next)) {
      m_start_timeline (e, next);
      a_restart (e, next, 0);
    }
  }
  res = push_caps (e, rate, channels);
  ep_check (e, res, "caps %d Hz, %d channels refused", rate, channels);
  ep_consume (e);
}

/* Caps the properties cannot work with: refused with one
 * error; then the previous caps again, which must not restart anything. */
static void
op_refused_caps (Episode * e)
{
  gint rate = e->rate, channels = e->channels;
  gboolean res;

  if (e->fs > 1 && chance (e, 0.5))
    rate = e->rate + 1;         /* frame-size does not divide it */
  else if (e->heads > 1 && !e->wf)
    channels = e->channels + 1 == (gint) e->heads ? e->channels + 2 :
        e->channels + 1;
  else
    rate = (gint) (e->fs * 840 * 11 * 13 + e->fs);
  if (((guint) channels * e->fs) % e->heads == 0 && rate % e->fs == 0 &&
      (e->output == OUT_FRAMES || (rate / e->fs) % e->hop == 0))
    return;                     /* happens to work: nothing to refuse */
  ep_log (e, "refused caps %d Hz %d ch", rate, channels);
  e->caps_after_swap |= e->swap_set;
  stats[ST_REFUSED]++;
  if (rate != e->refused_rate || channels != e->refused_channels)
    e->errors_expected++;
  e->refused_rate = rate;
  e->refused_channels = channels;
  res = push_caps (e, rate, channels);
  ep_check (e, !res, "impossible caps %d Hz, %d channels accepted", rate,
      channels);
  /* one error (none for the same caps again), whatever comes next */
  ep_consume (e);
  ep_check (e, e->errors_expected == 0, "refused caps posted no error");
  ep_log (e, "caps %d Hz %d ch again", e->rate, e->channels);
  res = push_caps (e, e->rate, e->channels);
  ep_check (e, res, "the previous caps were refused after a refusal");
  ep_consume (e);
  ep_check (e, e->errors_expected == 0, "errors left");
}

/* The documented segment rules.  The element works in the TIME segment
 * of a segment: TIME as it is, BYTES and DEFAULT (sample periods)
 * converted with the input rate, any other format TIME from 0. */
static void
m_time_segment (Episode * e, const GstSegment * in, GstSegment * out)
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
  if (in->format == GST_FORMAT_BYTES)
    units = (guint64) e->rate * e->bpf;
  else if (in->format == GST_FORMAT_DEFAULT)
    units = (guint64) e->rate;
  if (units == 0)
    return;
  out->start = gst_util_uint64_scale (in->start, GST_SECOND, units);
  out->base = gst_util_uint64_scale (in->base, GST_SECOND, units);
  out->offset = gst_util_uint64_scale (in->offset, GST_SECOND, units);
  out->stop = in->stop == (guint64) - 1 ? (guint64) - 1 :
      gst_util_uint64_scale (in->stop, GST_SECOND, units);
}

/* A segment changes the timeline (drains, restarts the window) when it
 * differs (as sent) in format, rate, applied rate, start, base or offset,
 * or in stop when the rate is negative; position, duration, time and
 * flags are updates that change nothing. */
static gboolean
m_segment_moves (const GstSegment * a, const GstSegment * b)
{
  if (a->format != b->format || a->rate != b->rate ||
      a->applied_rate != b->applied_rate || a->start != b->start ||
      a->base != b->base || a->offset != b->offset)
    return TRUE;
  return a->rate < 0.0 && a->stop != b->stop;
}

static void
push_segment (Episode * e, const GstSegment * seg)
{
  stats[ST_SEGMENT]++;
  stats[ST_SEG_NONTIME] += seg->format != GST_FORMAT_TIME;
  gboolean res = gst_harness_push_event (e->h, gst_event_new_segment (seg));

  ep_check (e, res, "segment refused");
  ep_consume (e);
}

static void
op_segment (Episode * e, gboolean first)
{
  GstSegment seg, tseg;
  gint k = (gint) rint_range (e, 0, 9);

  if (!first && k == 0) {
    seg = e->seg;
    ep_log (e, "same segment");
  } else if (!first && k == 1) {
    /* issue 9 item 5: only the position moves */
    seg = e->seg;
    seg.position = (seg.position == GST_CLOCK_TIME_NONE ? 0 : seg.position)
        + rint_range (e, 1, 1000000);
    ep_log (e, "position-only segment %" G_GUINT64_FORMAT, seg.position);
    stats[ST_POS_SEGMENT]++;
    push_segment (e, &seg);
    e->seg = seg;
    m_time_segment (e, &seg, &e->tseg);
    return;
  } else {
    static const gdouble rates[] = { 1.0, 1.0, 2.0, 0.5, -1.0 };
    static const gdouble arates[] = { 1.0, 1.0, 0.5, 2.0 };
    GstFormat fmt = k < 8 ? GST_FORMAT_TIME : k == 8 ? GST_FORMAT_BYTES :
        GST_FORMAT_DEFAULT;

    gst_segment_init (&seg, fmt);
    seg.rate = rates[rint_range (e, 0, 4)];
    seg.applied_rate = arates[rint_range (e, 0, 3)];
    if (chance (e, 0.5))
      seg.start = fmt == GST_FORMAT_TIME ?
          (guint64) rint_range (e, 0, 5000) * GST_MSECOND :
          rint_range (e, 0, 100000);
    if (seg.rate < 0)
      seg.stop = seg.start + 100 * GST_SECOND;
    seg.time = seg.start;
    seg.position = seg.start;
    ep_log (e, "segment %s start %" G_GUINT64_FORMAT " rate %g arate %g",
        gst_format_get_name (fmt), seg.start, seg.rate, seg.applied_rate);
  }
  m_time_segment (e, &seg, &tseg);
  if (m_segment_moves (&seg, &e->seg) && e->configured &&
      GST_CLOCK_TIME_IS_VALID (e->t0)) {
    /* a new segment: drained, the next data starts a new timeline */
    m_drain (e);
    e->t0 = GST_CLOCK_TIME_NONE;
    e->bytes = 0;
  }
  e->seg = seg;
  e->tseg = tseg;
  push_segment (e, &seg);
}

static void
op_flush (Episode * e)
{
  Timeline *t = e->cur;

  ep_log (e, "flush");
  stats[ST_FLUSH]++;
  if (t && !e->inexact)
    ep_check (e, t->frames - t->out_next <= e->window, "timeline %u holds "
        "%" G_GUINT64_FORMAT " frames without output (window %u)", t->id,
        t->frames - t->out_next, e->window);
  fail_unless (gst_harness_push_event (e->h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (e->h, gst_event_new_flush_stop (TRUE)));
  m_flush (e);
  e->eos = FALSE;
  ep_consume (e);
  /* after a flush the segment must be sent again */
  op_segment (e, FALSE);
}

static void
op_eos (Episode * e)
{
  ep_log (e, "EOS");
  stats[ST_EOS]++;
  e->eos_seen = FALSE;
  fail_unless (gst_harness_push_event (e->h, gst_event_new_eos ()));
  if (e->configured)
    m_drain (e);
  e->eos = TRUE;
  ep_consume (e);
  ep_check (e, e->eos_seen, "EOS was not forwarded");
}

/* One sample value of a buffer. */
static float
sample (Episode * e, gint special, gfloat amp)
{
  static const float specials[] = { NAN, INFINITY, -INFINITY, 1e-40f,
    -1e-45f, 1e38f, -1e38f, 3.4e38f
  };

  if (special >= 0 && chance (e, 0.2)) {
    gint k = (gint) rint_range (e, 0, (guint) special);

    return specials[k];
  }
  return (float) g_rand_double_range (e->r, -amp, amp);
}

static GstClockTime
pick_pts (Episode * e, gboolean * discont, gchar * desc, gsize desc_len)
{
  GstClockTime exp = m_expected (e), pts;
  guint k = rint_range (e, 0, 99);

  if (!GST_CLOCK_TIME_IS_VALID (exp) || e->cur == NULL) {
    if (k < 40) {
      g_strlcpy (desc, "none", desc_len);
      return GST_CLOCK_TIME_NONE;
    }
    if (k < 50) {
      g_strlcpy (desc, "near-clock-end", desc_len);
      stats[ST_CLOCK_END]++;
      e->inexact = TRUE;
      return G_MAXUINT64 - 1 - rint_range (e, 0, 1000000000);
    }
    pts = k < 95 ? (GstClockTime) rint_range (e, 0, 10000) * GST_MSECOND :
        (GstClockTime) rint_range (e, 1, 5) * 3600 * GST_SECOND;
    g_strlcpy (desc, "start", desc_len);
    return pts;
  }
  if (k < 40) {
    g_strlcpy (desc, "cont", desc_len);
    return exp;
  }
  if (k < 65) {
    g_strlcpy (desc, "none", desc_len);
    return GST_CLOCK_TIME_NONE;
  }
  if (k < 75) {
    /* jitter well inside the 40 ms threshold */
    GstClockTime j = rint_range (e, 0, 5000) * GST_USECOND;

    g_strlcpy (desc, "jitter", desc_len);
    if (!*discont && chance (e, 0.5) && exp >= j)
      return exp - j;
    return exp + j;
  }
  if (k < 85) {
    g_strlcpy (desc, "jump", desc_len);
    return exp + rint_range (e, 100, 2000) * GST_MSECOND;
  }
  if (k < 90) {
    g_strlcpy (desc, "jump-hours", desc_len);
    return exp + rint_range (e, 1, 5) * 3600 * GST_SECOND;
  }
  {
    if (k < 95 && e->carry_len == 0 && exp >= 100 * GST_MSECOND) {
      g_strlcpy (desc, "backwards", desc_len);
      stats[ST_LATE]++;
      return exp - rint_range (e, 100, (guint) MIN (exp / GST_MSECOND,
              100000)) * GST_MSECOND;
    }
    if (k < 97 && exp >= 5 * GST_MSECOND) {
      g_strlcpy (desc, "overlap-discont", desc_len);
      stats[ST_LATE]++;
      *discont = TRUE;
      return exp - rint_range (e, 1, 5000) * GST_USECOND;
    }
    if (k < 99) {
      g_strlcpy (desc, "near-clock-end", desc_len);
      stats[ST_CLOCK_END]++;
      e->inexact = TRUE;
      return G_MAXUINT64 - 1 - rint_range (e, 0, 1000000000);
    }
  }
  g_strlcpy (desc, "cont", desc_len);
  return exp;
}

static void
op_buffer (Episode * e)
{
  gsize size, n_floats, i;
  guint k = rint_range (e, 0, 99);
  gboolean discont = chance (e, 0.08), gap = chance (e, 0.05);
  gboolean special_ok, ok;
  gint special = -1;
  float *data;
  gfloat amp;
  GstClockTime pts;
  GstBuffer *buf;
  GstFlowReturn ret, want;
  gchar desc[32];

  if (k < 5)
    size = 0;
  else if (k < 10)
    size = rint_range (e, 1, 3);
  else if (k < 50)
    size = rint_range (e, 1, (guint) (8 * e->fb));
  else if (k < 95)
    size = rint_range (e, 1, 16) * e->fb;
  else if (k < 98)
    size = rint_range (e, 1000, 5000) * e->fb + rint_range (e, 0,
        (guint) e->fb);
  else if (e->wf && e->wf->kind != K_ATTN)
    /* (a whole model on every window of 40000 frames costs seconds) */
    size = rint_range (e, 2000, 4000) * e->fb;
  else
    size = rint_range (e, 20000, 40000) * e->fb;
  if (e->tame)
    size -= size % sizeof (float);
  if (e->force_data && size < e->fb)
    size = e->fb;
  /* A sample cut between two buffers is put together from the bytes of
   * two random floats: any value up to 3.4e38. */
  n_floats = (size + 3) / 4;
  data = g_new (float, MAX (n_floats, 1));
  amp = chance (e, 0.1) ? 1e-3f : chance (e, 0.1) ? 30.0f : 1.0f;
  /* which special values this episode may carry */
  special_ok = chance (e, 0.3) && !e->tame;
  if (special_ok) {
    special = 7;
    stats[ST_MEAN_BIG] += e->output == OUT_MEAN;
  }
  stats[ST_GAP_NOTHING] += size == 0 && gap && e->carry_len > 0;
  for (i = 0; i < n_floats; i++)
    data[i] = sample (e, special, amp);

  pts = pick_pts (e, &discont, desc, sizeof desc);
  if (size == 0) {
    buf = gst_buffer_new ();
    GST_BUFFER_PTS (buf) = pts;
  } else {
    buf = sattn_buffer_new (data, size, pts, chance (e, 0.2) ?
        rint_range (e, 1, 3) : 0);
  }
  if (discont)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  if (gap)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_GAP);
  stats[ST_BUFFER]++;
  stats[ST_BUF_ODD] += size % e->fb != 0;
  stats[ST_BUF_EMPTY] += size == 0;
  stats[ST_BUF_LARGE] += size >= 1000 * e->fb;
  stats[ST_SPECIAL] += special >= 0;
  stats[ST_DISCONT] += discont;
  stats[ST_GAP_FLAG] += gap;
  stats[ST_PTS_NONE] += !GST_CLOCK_TIME_IS_VALID (pts);
  stats[ST_JUMP] += g_str_has_prefix (desc, "jump");
  stats[ST_JUMP_HOURS] += g_str_equal (desc, "jump-hours");
  ep_log (e, "buf %" G_GSIZE_FORMAT "B pts %s %" GST_TIME_FORMAT "%s%s%s",
      size, desc, GST_TIME_ARGS (pts), discont ? " discont" : "",
      gap ? " gap" : "", special >= 0 ? " special" : "");

  /* The model: the resync rule, then the bytes.  A buffer stamped behind
   * the counter by more than the threshold, or an overlapping DISCONT
   * one, restarts the window at the counter, not before it (m_resync). */
  m_check_discont (e, pts, discont, size / e->bpf);
  ok = m_feed (e, (const guint8 *) data, size, gap);
  want = ok ? GST_FLOW_OK : GST_FLOW_ERROR;
  if (!ok)
    e->errors_expected++;

  if (g_strcmp0 (g_getenv ("SATTN_FUZZ_VERBOSE"), "2") == 0)
    for (i = 0; i < n_floats; i++)
      fprintf (stderr, "in[%" G_GSIZE_FORMAT "] = %g\n", i, data[i]);
  ret = gst_harness_push (e->h, buf);
  g_free (data);
  ep_check (e, ret == want, "buffer push returned %s, expected %s",
      gst_flow_get_name (ret), gst_flow_get_name (want));
  ep_consume (e);
  if (!ok) {
    ep_check (e, e->errors_expected == 0, "invalid-frames=error posted no "
        "error");
    e->stopped = TRUE;
    stats[ST_ERROR_POLICY]++;
  }
}

static void
op_gap (Episode * e)
{
  GstClockTime exp = m_expected (e), ts, dur;
  guint k = rint_range (e, 0, 99), kd = rint_range (e, 0, 99);
  guint64 samples, bytes;
  gboolean late = FALSE, huge = FALSE;
  const gchar *desc;

  if (!GST_CLOCK_TIME_IS_VALID (exp) || e->cur == NULL) {
    ts = (GstClockTime) rint_range (e, 0, 5000) * GST_MSECOND;
    desc = "start";
  } else if (k < 60) {
    ts = exp;
    desc = "cont";
  } else if (k < 80) {
    GstClockTime j = rint_range (e, 0, 5000) * GST_USECOND;

    ts = chance (e, 0.5) && exp >= j ? exp - j : exp + j;
    desc = "jitter";
  } else if (k < 90) {
    ts = exp + rint_range (e, 100, 2000) * GST_MSECOND;
    desc = "jump";
  } else {
    /* issue 9 item 6: late or overlapping */
    GstClockTime back = rint_range (e, 41, 3000) * GST_MSECOND;

    ts = exp > back ? exp - back : 0;
    late = TRUE;
    desc = "late";
    stats[ST_LATE]++;
  }

  if (kd < 10) {
    dur = GST_CLOCK_TIME_NONE;
  } else if (kd < 15) {
    dur = 0;
  } else if (kd < 80) {
    dur = gst_util_uint64_scale (rint_range (e, 1, 10 * e->fs), GST_SECOND,
        e->rate);
  } else if (kd < 92) {
    dur = rint_range (e, 1, 50000) * GST_USECOND;
  } else if (kd < 97) {
    dur = rint_range (e, 1, 3) * 3600 * GST_SECOND + rint_range (e, 0, 1000000);
    huge = TRUE;
  } else {
    dur = G_MAXUINT64 - 1 - rint_range (e, 0, 1000000000);
    huge = TRUE;
    e->inexact = TRUE;
  }
  if (late && dur != GST_CLOCK_TIME_NONE)
    dur = MIN (dur, 6 * GST_SECOND);
  stats[ST_GAP]++;
  stats[ST_HUGE_GAP] += huge;
  ep_log (e, "gap %s %" GST_TIME_FORMAT " + %" GST_TIME_FORMAT "%s", desc,
      GST_TIME_ARGS (ts), GST_TIME_ARGS (dur), huge ? " (huge)" : "");

  /* The model: GAP frames are masked frames up to the gap's end on the
   * sample grid of the timeline; one without a duration adds nothing. */
  if (e->configured && GST_CLOCK_TIME_IS_VALID (dur)) {
    /* a GAP that starts behind the counter never resyncs; one ahead by
     * the threshold or more resyncs at once (no discont-wait) */
    GstClockTime thr = MAX (40 * GST_MSECOND,
        gst_util_uint64_scale_int_ceil (2, GST_SECOND, e->rate));

    exp = m_expected (e);
    if (!GST_CLOCK_TIME_IS_VALID (exp)) {
      m_start_timeline (e, ts);
      a_restart (e, e->t0, 0);
    } else {
      if (e->cur == NULL) {
        /* drained at EOS: the timeline goes on in time */
        m_start_timeline (e, exp);
        e->bytes = 0;
      }
      if (ts >= exp && ts - exp >= thr) {
        m_resync (e, ts);
        a_restart (e, e->t0, 0);
      }
    }
    /* the end saturates at the last valid clock time */
    GstClockTime end = dur > G_MAXUINT64 - 1 - ts ? G_MAXUINT64 - 1 : ts + dur;

    if (end >= e->t0) {
      samples = gst_util_uint64_scale_round (end - e->t0, e->rate, GST_SECOND);
      bytes = samples * e->bpf;
      bytes = bytes > e->bytes ? bytes - e->bytes : 0;
    } else {
      /* ends before the timeline starts: only the part after the
       * counter counts, and there is none */
      bytes = 0;
    }
    m_feed (e, NULL, bytes, TRUE);
    /* the detector then expects data where the counter is */
    if (bytes > 0)
      a_restart (e, m_expected (e), 0);
  }
  fail_unless (gst_harness_push_event (e->h, gst_event_new_gap (ts, dur)));
  ep_consume (e);
}

static void
op_property (Episode * e)
{
  guint k = rint_range (e, 0, 3);

  stats[ST_PROP]++;
  if (k == 0) {
    e->policy = (gint) rint_range (e, 0, e->validity_unknown ? 1 : 2);
    ep_log (e, "invalid-frames=%d", e->policy);
    g_object_set (e->h->element, "invalid-frames", e->policy, NULL);
  } else if (k == 1) {
    guint64 iv = rint_range (e, 0, 200) * GST_MSECOND;

    ep_log (e, "message-interval=%" G_GUINT64_FORMAT, iv);
    g_object_set (e->h->element, "message-interval", iv, NULL);
  } else if (k == 2) {
    gint head = (gint) rint_range (e, 0, e->heads) - 1;

    ep_log (e, "map-head=%d", head);
    g_object_set (e->h->element, "map-head", head, NULL);
  } else {
    /* geometry while running: deferred to the next READY, the first
     * change of each property per run posts a warning */
    guint pi = rint_range (e, 0, 3);
    guint v = rint_range (e, 1, 8);

    ep_log (e, "%s=%u (running: deferred)", geometry_props[pi], v);
    stats[ST_DEFERRED]++;
    e->deferred[pi] = v;
    if (!(e->defer_warned & (1u << pi)))
      e->warnings_expected++;
    e->defer_warned |= 1u << pi;
    g_object_set (e->h->element, geometry_props[pi], v, NULL);
    ep_consume (e);
    ep_check (e, e->warnings_expected == 0, "no warning for %s set while "
        "running", geometry_props[pi]);
  }
}

static void
op_attn (Episode * e)
{
  if (e->attn) {
    ep_log (e, "release attn");
    attn_release (e);
    return;
  }
  ep_log (e, "request attn");
  stats[ST_ATTN_LATE] += e->configured;
  attn_request (e);
}

/* The element starts loading a file set while running when data next
 * reaches it: after a set, data (in every run of a swap episode). */
static void
swap_feed (Episode * e)
{
  if (e->eos)
    op_flush (e);
  e->force_data = TRUE;
  op_buffer (e);
  e->force_data = FALSE;
}

/* Set `weights` to another file while data flows (swap episodes): a
 * good one (same d_model, d_out, kind, heads), or one the documented
 * policy refuses: one warning naming the file, the running model stays
 * and the property names its file again. */
static void
op_swap (Episode * e)
{
  const WFixture *cand[G_N_ELEMENTS (wfixtures)], *pick = NULL;
  gint bad = chance (e, 0.5) ? -1 : (gint) rint_range (e, 0, N_BAD - 1);
  gboolean whole = e->wf->kind == K_WHOLE;
  const gchar *path;
  guint n = 0, i;

  for (i = 0; i < G_N_ELEMENTS (wfixtures); i++)
    if (swap_compatible (e->wf, &wfixtures[i]))
      cand[n++] = &wfixtures[i];
  if (n > 0)
    pick = cand[rint_range (e, 0, n - 1)];
  if (bad < 0 && pick == NULL)
    bad = BAD_MISSING;
  if (bad < 0)
    path = pick->path;
  else if (bad == BAD_GEOMETRY && whole)
    path = wfixtures[e->wf->d_out == 8 ? 10 : 9].path;
  else if (bad == BAD_KIND)
    path = wfixtures[whole ? 6 : 9].path;
  else
    path = bad_paths[bad];
  ep_log (e, "swap to %s%s%s", path, bad >= 0 ? ": " : "",
      bad >= 0 ? bad_names[bad] : "");
  if (plan.mode != SW_RUN) {
    swap_feed (e);
    return;
  }

  ep_consume (e);
  plan.done = TRUE;
  plan.bad = bad >= 0;
  plan.bad_kind = bad;
  g_free (plan.path);
  plan.path = g_strdup (path);
  g_free (plan.old_path);
  g_object_get (e->h->element, "weights", &plan.old_path, NULL);
  plan.rows_at_set = plan.rec[SW_RUN].rows->len;
  e->swap_set = TRUE;
  g_object_set (e->h->element, "weights", path, NULL);
  swap_feed (e);
  if (bad >= 0) {
    gchar *now = NULL;
    gint64 until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;

    stats[ST_SWAP_BAD + bad]++;
    /* the loader refuses it off the streaming thread */
    while (e->swap_warnings == 0 && g_get_monotonic_time () < until) {
      g_usleep (1000);
      ep_consume (e);
    }
    ep_check (e, e->swap_warnings == 1, "%u warnings for a swap to a %s "
        "file", e->swap_warnings, bad_names[bad]);
    g_object_get (e->h->element, "weights", &now, NULL);
    ep_check (e, g_strcmp0 (now, plan.old_path) == 0, "weights reads %s "
        "after a refused swap, not the file in use %s", now, plan.old_path);
    g_free (now);
  } else {
    stats[ST_SWAP_GOOD]++;
    /* most often ready before the next buffer */
    g_usleep (3000);
  }
}

static void
push_stream_start (Episode * e)
{
  gchar *sid = g_strdup_printf ("fuzz-%" G_GUINT64_FORMAT "-%u", e->seed,
      e->ops);

  fail_unless (gst_harness_push_event (e->h, gst_event_new_stream_start (sid)));
  g_free (sid);
}

/* Back to READY for a new frame-size, window and hop (geometry changes
 * in READY only), then a new stream: what was held is dropped. */
static void
op_ready (Episode * e)
{
  static const guint hops[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
  Timeline *t = e->cur;
  guint fs, window, hop, pi;

  ep_consume (e);
  do
    fs = rint_range (e, 1, e->wf ? 4 : 3);
  while (e->wf && e->wf->d_model % fs != 0);
  window = rint_range (e, 1, 8);
  do
    hop = hops[rint_range (e, 0, G_N_ELEMENTS (hops) - 1)];
  while (hop > window);
  stats[ST_READY]++;
  e->ready_after_swap |= e->swap_set;
  if (t && !e->inexact)
    ep_check (e, t->frames - t->out_next <= e->window, "timeline %u holds "
        "%" G_GUINT64_FORMAT " frames without output (window %u)", t->id,
        t->frames - t->out_next, e->window);
  ep_check (e, gst_element_set_state (e->h->element, GST_STATE_READY) ==
      GST_STATE_CHANGE_SUCCESS, "PLAYING -> READY failed");
  /* The values set while running took effect at READY. */
  for (pi = 0; pi < 4; pi++) {
    guint v = 0;

    if (e->deferred[pi] == 0)
      continue;
    g_object_get (e->h->element, geometry_props[pi], &v, NULL);
    ep_check (e, v == e->deferred[pi], "%s=%u set while running reads %u "
        "after READY", geometry_props[pi], e->deferred[pi], v);
  }
  if (e->deferred[2] != 0) {
    /* heads: kept when some channel count of 1..4 fills whole heads (and
     * it is the weights file's), else set back */
    guint hd = e->deferred[2];

    if (!e->wf && (hd <= 4 || hd == 6 || hd == 8)) {
      e->heads = hd;
    } else {
      ep_log (e, "heads=%u back", e->heads);
      g_object_set (e->h->element, "heads", e->heads, NULL);
    }
  }
  /* A frame size that some channel count of 1..4 makes a whole number of
   * heads with (pick_channels looks for one); checked at every READY, not
   * only when heads changed: heads=8 and frame-size 3 have none. */
  if (!e->wf)
    while (fs * 4 % e->heads != 0 && fs * 3 % e->heads != 0 &&
        fs * 2 % e->heads != 0 && fs % e->heads != 0)
      fs = rint_range (e, 1, 3);
  ep_log (e, "READY, frame-size %u window %u hop %u, PLAYING", fs, window, hop);
  memset (e->deferred, 0, sizeof e->deferred);
  e->defer_warned = 0;
  e->refused_rate = e->refused_channels = 0;
  g_object_set (e->h->element, "frame-size", fs, "window", window, "hop",
      hop, "lookback", MIN (e->lookback, window), NULL);
  ep_check (e, gst_element_set_state (e->h->element, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE, "READY -> PLAYING failed");
  m_flush (e);
  e->configured = FALSE;
  e->eos = FALSE;
  e->fs = fs;
  e->window = window;
  e->hop = hop;
  e->lookback = MIN (e->lookback, window);
  gst_segment_init (&e->seg, GST_FORMAT_UNDEFINED);
  gst_segment_init (&e->tseg, GST_FORMAT_TIME);
  ep_consume (e);
  push_stream_start (e);
  op_caps (e, TRUE);
  op_segment (e, TRUE);
  ep_consume (e);
}

/* ------------------------------------------------------------ episodes */

static void
ep_setup (Episode * e, guint64 seed, gint threads)
{
  static const guint hops[] = { 1, 2, 3, 4, 5, 6, 7, 8, 10, 12 };
  static const gdouble scales[] = { 0.0, 0.0, 1.0, 0.25, 4.0 };
  gchar *wpath = NULL;

  memset (e, 0, sizeof *e);
  e->seed = seed;
  e->r = g_rand_new_with_seed_array ((const guint32 *) &seed, 2);
  e->log = g_string_new (NULL);
  e->tl = g_ptr_array_new_with_free_func (tl_free);
  e->items = g_array_new (FALSE, FALSE, sizeof (Item));
  e->floats = g_array_new (FALSE, FALSE, sizeof (float));
  e->meta = g_array_new (FALSE, FALSE, sizeof (GstSattnMetaRow));
  e->digest = g_checksum_new (G_CHECKSUM_SHA256);
  e->threads = threads;
  gst_segment_init (&e->oseg, GST_FORMAT_TIME);
  e->t0 = GST_CLOCK_TIME_NONE;
  gst_segment_init (&e->seg, GST_FORMAT_UNDEFINED);
  gst_segment_init (&e->tseg, GST_FORMAT_TIME);

  e->window = chance (e, 0.8) ? rint_range (e, 1, 8) : rint_range (e, 9, 24);
  do
    e->hop = hops[rint_range (e, 0, G_N_ELEMENTS (hops) - 1)];
  while (e->hop > e->window);
  e->output = chance (e, 0.5) ? OUT_FRAMES : (gint) rint_range (e, 1, 3);
  e->start = chance (e, 0.7) ? START_PAD : START_WAIT;
  e->causal = chance (e, 0.3);
  e->lookback = chance (e, 0.2) ? rint_range (e, 1, e->window) : 0;
  e->scale = scales[rint_range (e, 0, G_N_ELEMENTS (scales) - 1)];
  e->policy = chance (e, 0.6) ? INV_MASK : chance (e, 0.6) ? INV_ZERO :
      INV_ERROR;
  e->post_messages = chance (e, 0.15);
  if (plan.mode != SW_NONE || chance (e, 0.3)) {
    gboolean big = chance (e, 0.3);

    /* swap episodes: a written file (their pairs are known), tame */
    e->wf = &wfixtures[rint_range (e, plan.mode != SW_NONE ? 3 : 0,
            G_N_ELEMENTS (wfixtures) - 1)];
    e->tame = plan.mode != SW_NONE || chance (e, 0.5);
    if (e->tame) {
      /* no special values: the weights as written, and which frames are
       * usable is known exactly */
      e->wscale = 1.0;
      big = FALSE;
      stats[ST_TAME]++;
    } else {
      e->wscale = big ? wscales_big[rint_range (e, 0, 2)] :
          wscales_ok[rint_range (e, 0, G_N_ELEMENTS (wscales_ok) - 1)];
      /* issue 9 item 4: which frames overflow their projections (and so
       * count as invalid) is not modelled; outputs must still be finite */
      e->validity_unknown = TRUE;
      if (e->policy == INV_ERROR)
        e->policy = INV_MASK;
    }
    stats[ST_PROJ_BIG] += big;
    stats[ST_KIND_ATTN + e->wf->kind]++;
    stats[ST_POS_ROPE] += g_str_has_prefix (e->wf->positions, "rope");
    stats[ST_POS_ALIBI] += g_str_equal (e->wf->positions, "alibi");
    for (guint b = 0; b < N_PARTS; b++)
      stats[ST_PART + b] += (e->wf->parts >> b) & 1;
    if (e->wf->kind == K_WHOLE) {
      /* every row depends on the whole window: no frames output; the
       * model is bidirectional (its metadata records no causal) */
      if (e->output == OUT_FRAMES)
        e->output = (gint) rint_range (e, 1, 3);
      e->causal = FALSE;
      e->lookback = 0;
      e->scale = 0.0;
    } else if (e->wf->kind == K_LAYER && chance (e, 0.5)) {
      /* a stack's geometry: every frame sees exactly the lookback
       * frames before it (docs/models.md, "Stacks") */
      e->causal = TRUE;
      e->window = MAX (e->window, e->hop + 1);
      e->lookback = e->window - e->hop;
      stats[ST_STACK]++;
    }
    e->heads = e->wf->heads;
    /* a frame-size dividing d_model */
    do
      e->fs = rint_range (e, 1, 4);
    while (e->wf->d_model % e->fs != 0);
  } else {
    e->fs = rint_range (e, 1, 3);
    e->heads = rint_range (e, 1, 3);
    /* some channel count in 1..4 must work: heads | channels x fs */
    if (e->heads == 3 && e->fs != 3)
      e->heads = 1;
  }

  {
    /* precision=fast, one episode in three, from a generator of its own
     * (the episode's events, its threads twin's and its swap runs' are
     * the same either way) */
    guint32 s3[2] = { (guint32) seed ^ 0x70726563u, (guint32) (seed >> 32) };
    GRand *pr = g_rand_new_with_seed_array (s3, 2);
    gboolean fast = g_rand_int_range (pr, 0, 3) == 0;

    g_rand_free (pr);
    e->precision = fast ? PREC_FAST : PREC_EXACT;
    stats[ST_FAST] += fast && e->wf != NULL;
    stats[ST_FAST_NO_WEIGHTS] += fast && e->wf == NULL;
    stats[ST_WHOLE_FAST] += fast && e->wf && e->wf->kind == K_WHOLE;
  }
  ep_log (e, "window %u hop %u fs %u heads %u causal %d lookback %u "
      "output %d start %d scale %g policy %d messages %d threads %d "
      "precision %s", e->window, e->hop, e->fs, e->heads, e->causal,
      e->lookback, e->output, e->start, e->scale, e->policy,
      e->post_messages, e->threads,
      e->precision == PREC_FAST ? "fast" : "exact");
  e->swap_at = G_MAXUINT;
  if (plan.mode != SW_NONE && e->tame && e->wf->written)
    e->swap_at = rint_range (e, 1, 12);
  if (e->wf) {
    wpath = plan.mode == SW_B ? g_strdup (plan.path) :
        scaled_weights (e->wf, e->wscale);
    ep_log (e, "weights %s x %g%s%s", e->wf->file, e->wscale,
        e->tame ? " (tame)" : "", plan.mode == SW_RUN ? " (swap run)" :
        plan.mode == SW_A ? " (old model only)" : plan.mode == SW_B ?
        " (new model only)" : "");
    stats[ST_WEIGHTS]++;
  }
  e->h = sattn_harness_new ("window", e->window, "hop", e->hop,
      "frame-size", e->fs, "heads", e->heads, "causal", e->causal,
      "lookback", e->lookback, "output", e->output, "start", e->start,
      "scale", e->scale, "invalid-frames", e->policy, "post-messages",
      e->post_messages, "weights", wpath, "discont-wait", (guint64) 0,
      "message-interval", (guint64) 0, "threads", e->threads, "precision",
      e->precision, NULL);
  g_free (wpath);
  /* Downstream takes audio/x-raw only, so that the rate rules refuse caps
   * (other/tensors output: test-element-tensor.c). */
  gst_harness_set_sink_caps_str (e->h, "audio/x-raw");
  e->bus = sattn_attach_bus (e->h);
  gst_pad_add_probe (e->h->sinkpad, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM | GST_PAD_PROBE_TYPE_EVENT_FLUSH,
      out_probe, e, NULL);
}

static void
ep_teardown (Episode * e)
{
  if (e->attn)
    attn_release (e);
  sattn_detach_bus (e->h, e->bus);
  gst_harness_teardown (e->h);
  g_rand_free (e->r);
  g_string_free (e->log, TRUE);
  g_ptr_array_unref (e->tl);
  g_array_unref (e->items);
  g_array_unref (e->floats);
  g_array_unref (e->meta);
  g_checksum_free (e->digest);
  g_free (e->swap_msg_path);
  g_free (e->carry);
}

static void
ep_final_checks (Episode * e)
{
  guint i;

  if (e->stopped)
    return;
  if (!e->eos)
    op_eos (e);
  for (i = 0; i < e->tl->len && !e->inexact; i++) {
    const Timeline *t = g_ptr_array_index (e->tl, i);

    ep_check (e, t->closed, "timeline %u still open after EOS", t->id);
    if (t->flushed)
      continue;
    ep_check (e, t->out_next == t->frames, "timeline %u (start %"
        GST_TIME_FORMAT "): %" G_GUINT64_FORMAT " frames in, %"
        G_GUINT64_FORMAT " accounted for by the output (%" G_GUINT64_FORMAT
        " rows)", t->id, GST_TIME_ARGS (t->t0), t->frames, t->out_next,
        t->rows);
    if (e->output == OUT_FRAMES)
      ep_check (e, t->rows <= t->frames, "more rows than frames");
  }
  ep_check (e, e->errors_expected == 0, "%u expected errors not posted",
      e->errors_expected);
  ep_check (e, e->warnings_expected == 0, "%u expected warnings not posted",
      e->warnings_expected);
  if (e->swap_set) {
    ep_check (e, e->swap_warnings == (plan.bad ? 1u : 0u), "%u swap "
        "warnings", e->swap_warnings);
    ep_check (e, e->swap_msgs <= (plan.bad ? 0u : 1u), "%u "
        "sattn-weights-swapped messages", e->swap_msgs);
    ep_check (e, e->swap_msgs == 0 || g_strcmp0 (e->swap_msg_path,
            plan.path) == 0, "sattn-weights-swapped names %s, not %s",
        e->swap_msg_path, plan.path);
    stats[ST_SWAP_TAKEN] += e->swap_msgs;
    stats[ST_SWAP_READY] += e->swap_msgs == 0 && e->ready_after_swap &&
        !plan.bad;
  }
}

/* Static, so that the exit and crash reports can still read it after
 * check's failure path has left the episode. */
static Episode the_episode;

/* The precision the last run_episode_threads ran with. */
static gint last_precision;

/* One episode with the element's threads set to threads; returns the
 * digest of everything that came out (g_free it). */
static gchar *
run_episode_threads (guint64 seed, gint threads)
{
  Episode *e = &the_episode;
  guint n_ops, i;
  gboolean verbose = g_getenv ("SATTN_FUZZ_VERBOSE") != NULL;
  const gchar *tmo = g_getenv ("SATTN_FUZZ_TIMEOUT");
  gchar *digest;

  ep_setup (e, seed, threads);
  current = e;
  alarm (tmo ? (guint) atoi (tmo) : 60);
  {
    gint prec = -1;

    g_object_get (e->h->element, "precision", &prec, NULL);
    ep_check (e, prec == e->precision, "precision reads %d, set %d", prec,
        e->precision);
    last_precision = prec;
  }

  if (chance (e, 0.15)) {
    ep_log (e, "request attn");
    attn_request (e);
  }
  push_stream_start (e);
  op_caps (e, TRUE);
  op_segment (e, TRUE);

  n_ops = rint_range (e, 1, 24);
  if (e->swap_at != G_MAXUINT)
    n_ops = MAX (n_ops, e->swap_at + 6);
  for (i = 0; i < n_ops && !e->stopped; i++) {
    guint k = rint_range (e, 0, 99);

    e->ops++;
    if (e->ops == e->swap_at)
      op_swap (e);
    if (e->eos) {
      op_flush (e);
      continue;
    }
    if (k < 55)
      op_buffer (e);
    else if (k < 67)
      op_gap (e);
    else if (k < 72)
      op_flush (e);
    else if (k < 77)
      op_segment (e, FALSE);
    else if (k < 83)
      op_caps (e, FALSE);
    else if (k < 87)
      op_eos (e);
    else if (k < 92)
      op_property (e);
    else if (k < 94)
      op_ready (e);
    else if (k < 97)
      op_attn (e);
    else
      op_refused_caps (e);
  }
  ep_final_checks (e);
  if (verbose)
    fprintf (stderr, "seed %" G_GUINT64_FORMAT ": %s\n", seed, e->log->str);
  alarm (0);
  current = NULL;
  digest = g_strdup (g_checksum_get_string (e->digest));
  if (plan.mode == SW_RUN) {
    /* new caps read the property too (docs/models.md "Trained weights": caps
     * that arrive before the loader has looked at a request apply the
     * same rule) */
    plan.swap_seen = e->swap_msgs > 0 || e->ready_after_swap ||
        e->caps_after_swap;
    plan.swap_msgs = e->swap_msgs;
    plan.ready_after = e->ready_after_swap;
    plan.swap_frame = e->swap_frame;
    g_free (plan.log);
    plan.log = g_strdup (e->log->str);
  }
  ep_teardown (e);
  return digest;
}

static void
rec_reset (void)
{
  guint m;

  plan.done = FALSE;
  for (m = 0; m < G_N_ELEMENTS (plan.rec); m++) {
    if (plan.rec[m].floats == NULL) {
      plan.rec[m].floats = g_array_new (FALSE, FALSE, sizeof (float));
      plan.rec[m].rows = g_array_new (FALSE, FALSE, sizeof (RecRow));
    }
    g_array_set_size (plan.rec[m].floats, 0);
    g_array_set_size (plan.rec[m].rows, 0);
  }
}

static gboolean
rec_row_equal (gint m1, gint m2, guint k)
{
  const RecRow *a = &g_array_index (plan.rec[m1].rows, RecRow, k);
  const RecRow *b = &g_array_index (plan.rec[m2].rows, RecRow, k);

  return a->n == b->n && memcmp (&g_array_index (plan.rec[m1].floats, float,
          a->f0), &g_array_index (plan.rec[m2].floats, float, b->f0),
      a->n * sizeof (float)) == 0;
}

/* A failed check of a check run outside the episode loop (what names
 * it), with the seed's reproducer. */
#define seed_check(what, seed, cond, ...) G_STMT_START {               \
  if (G_UNLIKELY (!(cond))) {                                         \
    gchar *what_ = g_strdup_printf (__VA_ARGS__);                     \
    gchar *rep_ = reproducer (seed);                                  \
    fprintf (stderr, "\nsattn-fuzz: %s, seed %" G_GUINT64_FORMAT       \
        " FAILED: %s\nreproduce: %s\n", (what), (seed), what_, rep_);  \
    fail ("%s (seed %" G_GUINT64_FORMAT ")", what_, (seed));          \
    g_free (what_);                                                   \
    g_free (rep_);                                                    \
  }                                                                   \
} G_STMT_END

#define swap_check(seed, cond, ...) \
  seed_check ("swap episode", seed, cond, __VA_ARGS__)

/* A swap episode (only episodes with a written weights file and tame
 * input swap): the run with the swap, then the same events with the old
 * model only and, for a good file, with the new model only.  The runs
 * have the same rows (usable frames do not depend on the model); row
 * by row, the swapped run's are the old model's bytes up to a window
 * boundary and the new model's from there on (none before the set), or
 * the old model's throughout when the file is refused. */
static void
run_swap_episode (guint64 seed, gint threads)
{
  guint k, n, first_new = G_MAXUINT, last_old = G_MAXUINT, old_tl = 0;
  guint64 old_wend = G_MAXUINT64;

  rec_reset ();
  plan.mode = SW_RUN;
  g_free (run_episode_threads (seed, threads));
  if (!plan.done) {
    plan.mode = SW_NONE;
    return;
  }
  plan.mode = SW_A;
  g_free (run_episode_threads (seed, threads));
  if (!plan.bad) {
    plan.mode = SW_B;
    g_free (run_episode_threads (seed, threads));
  }
  plan.mode = SW_NONE;

  n = plan.rec[SW_RUN].rows->len;
  swap_check (seed, plan.rec[SW_A].rows->len == n && (plan.bad ||
          plan.rec[SW_B].rows->len == n), "%u rows with the swap, %u with "
      "the old model only, %u with the new one only", n,
      plan.rec[SW_A].rows->len, plan.bad ? n : plan.rec[SW_B].rows->len);
  stats[ST_SWAP_ROWS] += n;
  for (k = 0; k < n; k++) {
    gboolean a = rec_row_equal (SW_RUN, SW_A, k);
    gboolean b = !plan.bad && rec_row_equal (SW_RUN, SW_B, k);
    const RecRow *r = &g_array_index (plan.rec[SW_RUN].rows, RecRow, k);

    if (plan.bad) {
      swap_check (seed, a, "row %u of %u differs from the old model's "
          "after a refused swap to a %s file", k, n, bad_names[plan.bad_kind]);
      continue;
    }
    if (!a && !b) {
      const RecRow *ra = &g_array_index (plan.rec[SW_A].rows, RecRow, k);
      const RecRow *rb = &g_array_index (plan.rec[SW_B].rows, RecRow, k);
      const float *x = &g_array_index (plan.rec[SW_RUN].floats, float,
          r->f0);
      const float *xa = &g_array_index (plan.rec[SW_A].floats, float,
          ra->f0);
      const float *xb = &g_array_index (plan.rec[SW_B].floats, float,
          rb->f0);
      gdouble da = 0, db = 0;
      gsize j;

      for (j = 0; j < r->n && j < ra->n && j < rb->n; j++) {
        da = MAX (da, fabs ((gdouble) x[j] - xa[j]));
        db = MAX (db, fabs ((gdouble) x[j] - xb[j]));
      }
      swap_check (seed, FALSE, "row %u of %u (window ending at frame %"
          G_GUINT64_FORMAT " of timeline %u; first new row %u, last old "
          "row %u; %u takeover message(s) at frame %" G_GUINT64_FORMAT
          ", READY after the set %d) is neither the old model's (max-abs "
          "%g) nor the new model's (max-abs %g) (swap to %s, events: %s)",
          k, n, r->wend, r->tl, first_new, last_old, plan.swap_msgs,
          plan.swap_frame, plan.ready_after, da, db, plan.path, plan.log);
    }
    if (a && !b) {
      swap_check (seed, first_new == G_MAXUINT, "row %u is the old model's "
          "after row %u was the new one's", k, first_new);
      last_old = k;
      old_wend = r->wend;
      old_tl = r->tl;
    }
    if (b && !a && first_new == G_MAXUINT) {
      first_new = k;
      swap_check (seed, k >= plan.rows_at_set, "row %u is the new "
          "model's before the set (%u rows out then)", k, plan.rows_at_set);
      /* a window boundary: no window has rows of both models */
      swap_check (seed, last_old == G_MAXUINT || r->wend == G_MAXUINT64 ||
          r->wend != old_wend || r->tl != old_tl, "the window ending at "
          "frame %" G_GUINT64_FORMAT " of timeline %u has rows of both "
          "models (rows %u and %u)", r->wend, r->tl, last_old, k);
      stats[ST_SWAP_NEW_ROWS] += n - k;
    }
  }
  swap_check (seed, first_new == G_MAXUINT || plan.swap_seen,
      "rows of the new model without a sattn-weights-swapped message, "
      "new caps or a READY");
}

/* Episode seed: the element runs with 1 thread (half the episodes) or 2
 * to 4 (drawn from a generator of its own, so that the episode's events
 * are the same for every count); one episode in five with threads > 1
 * runs again with
 * threads=1 and everything that came out (values, times, flags, meta)
 * must be byte-identical (docs/element.md, property `threads`). */
static void
run_episode (guint64 seed)
{
  guint32 s2[2] = { (guint32) seed ^ 0x7468u, (guint32) (seed >> 32) };
  GRand *tr = g_rand_new_with_seed_array (s2, 2);
  gint threads = g_rand_int_range (tr, 0, 2) ? 1 : g_rand_int_range (tr, 2,
      5);
  gboolean twin = threads > 1 && g_rand_int_range (tr, 0, 5) == 0;
  gboolean swap = g_rand_int_range (tr, 0, 10) == 0;
  gboolean fast;
  gchar *d, *d1;

  g_rand_free (tr);
  stats[ST_THREADS] += threads > 1;
  if (swap) {
    run_swap_episode (seed, threads);
    return;
  }
  d = run_episode_threads (seed, threads);
  fast = last_precision == PREC_FAST;
  if (twin) {
    guint64 saved[N_ST];

    /* the twin's events are counted once */
    memcpy (saved, stats, sizeof stats);
    d1 = run_episode_threads (seed, 1);
    memcpy (stats, saved, sizeof stats);
    stats[ST_TWIN]++;
    /* the twin runs with the episode's precision: fast, threads 1 vs N */
    fail_unless (last_precision == (fast ? PREC_FAST : PREC_EXACT),
        "the threads twin of seed %" G_GUINT64_FORMAT " ran with precision "
        "%d", seed, last_precision);
    stats[ST_TWIN_FAST] += fast;
    if (g_strcmp0 (d, d1) != 0) {
      gchar *rep = reproducer (seed);

      fprintf (stderr, "\nsattn-fuzz: episode with seed %" G_GUINT64_FORMAT
          " FAILED: threads=%d and threads=1 gave different outputs "
          "(digest %s vs %s)\nreproduce: %s\n", seed, threads, d, d1, rep);
      g_free (rep);
      fail ("threads=%d and threads=1 differ (seed %" G_GUINT64_FORMAT ")",
          threads, seed);
    }
    g_free (d1);
  }
  g_free (d);
}

static guint64
env_u64 (const gchar * name, guint64 def)
{
  const gchar *v = g_getenv (name);

  return v && *v ? g_ascii_strtoull (v, NULL, 10) : def;
}

GST_START_TEST (test_fuzz_stream)
{
  guint64 seed0 = env_u64 ("SATTN_FUZZ_SEED", 1);
  guint64 episodes = env_u64 ("SATTN_FUZZ_EPISODES",
      env_u64 ("SATTN_FUZZ_EPISODES_DEFAULT", 10000));
  guint64 seconds = env_u64 ("SATTN_FUZZ_SECONDS", 0);
  gint64 t_end = seconds ? g_get_monotonic_time () +
      (gint64) seconds * G_USEC_PER_SEC : 0;
  guint64 n;
  gint c;

  fixtures_init ();
  signal (SIGSEGV, crash_handler);
  signal (SIGBUS, crash_handler);
  signal (SIGFPE, crash_handler);
  signal (SIGABRT, crash_handler);
  signal (SIGALRM, crash_handler);
  atexit (exit_report);

  for (n = 0; seconds ? g_get_monotonic_time () < t_end : n < episodes; n++)
    run_episode (seed0 + n);
  fprintf (stderr, "sattn-fuzz: %" G_GUINT64_FORMAT " episodes from seed %"
      G_GUINT64_FORMAT " passed (every input class generated)\n", n, seed0);
  for (c = 0; c < N_ST; c++)
    fprintf (stderr, "%s%s %" G_GUINT64_FORMAT, c ? ", " : "  covered: ",
        st_names[c], stats[c]);
  fprintf (stderr, "\n");
  remove_tmp_dir ();
  /* one episode in three draws fast; about one in thirteen has
   * attention or encoder weights and fast: a run this long without one
   * did not exercise precision=fast */
  fail_unless (n < 1000 || stats[ST_FAST] > 0, "%" G_GUINT64_FORMAT
      " episodes and none with precision=fast and weights", n);
  /* every front end and pooling of docs/models.md: each is in one of the
   * 16 weights files, drawn in about one episode in 60 */
  for (c = 0; c < N_PARTS; c++)
    fail_unless (n < 1000 || stats[ST_PART + c] > 0, "%" G_GUINT64_FORMAT
        " episodes and none with %s", n, part_names[c]);
}

GST_END_TEST;

static Suite *
sattn_fuzz_suite (void)
{
  Suite *s = suite_create ("sattn-fuzz-stream");
  TCase *tc = tcase_create ("fuzz");

  /* one long test: the per-episode alarm catches hangs */
  sattn_tcase_set_timeout (tc, 0);
  tcase_add_test (tc, test_fuzz_stream);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  self_exe = g_file_read_link ("/proc/self/exe", NULL);
  if (self_exe == NULL)
    self_exe = g_strdup (argv[0]);
  repro_pre = g_strdup ("SATTN_FUZZ_SEED=");
  if (g_getenv ("SATTN_BUILD_ROOT"))
    repro_post = g_strdup_printf (" SATTN_FUZZ_EPISODES=1 meson test -C %s "
        "element-fuzz-stream --print-errorlogs", g_getenv ("SATTN_BUILD_ROOT"));
  else
    repro_post = g_strdup_printf (" SATTN_FUZZ_EPISODES=1 %s", self_exe);

  /* No fork: check's failure path in a forked child is _exit (), which
   * would skip exit_report and lose the seed; in the same process a
   * failed check returns here and the report runs at exit. */
  g_setenv ("CK_FORK", "no", TRUE);
  gst_check_init (&argc, &argv);
  return gst_check_run_suite (sattn_fuzz_suite (), "sattn-fuzz-stream",
      __FILE__);
}
