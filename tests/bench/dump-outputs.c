/* sattn-dump-outputs: every output byte of a fixed, seeded set of
 * workloads, written to one file, so that two builds of libsattn can be
 * compared byte for byte (cmp) -- a refactoring of the core must keep
 * them identical.
 *
 *   sattn-dump-outputs OUT [--index FILE] [--only SUBSTRING] [--list]
 *                      [--verbose]
 *
 * Links libsattn.so through its public API only (sattn.h, and nothing
 * added to it after 580feba: sattn_model_new with weight arrays, streams,
 * sattn_attend), so the same binary runs against an older or newer
 * libsattn.so.<major> through LD_LIBRARY_PATH.  Across the soname change
 * (0 to 1: threads moved from SattnConfig to SattnStreamConfig, and the
 * caller-filled structs gained struct_size, left 0 here) the same source
 * builds against either sattn.h, and both builds write the same bytes
 * for the same outputs (byte-identity.sh builds one per side then).  The
 * SIMD level is the
 * library's choice, read once per process: run the tool once per level
 * with SATTN_SIMD=0, 1, 2 in the environment (tests/bench/byte-identity.sh
 * does).
 *
 * The workloads:
 *  - the bench geometries W1-W4 (tests/bench/bench.c), identity and
 *    random weights, every output mode, threads 1, 2 and 3, frames with
 *    NaN / Inf / huge samples and GAP flags in the middle of the stream,
 *    pushes of one hop, many hops and single frames, a drain;
 *  - on small geometries: positions (RoPE, interleaved RoPE, ALiBi),
 *    causal / lookback, encoder layers (post / pre norm, relu / gelu),
 *    extra keys (bias_k / bias_v, add_zero_attn), the invalid policies
 *    (mask, zero, error), start pad / wait, odd head sizes, explicit
 *    scales, spread and overflowing scores, sattn_stream_skip over long
 *    GAPs, reset and reset_at, set_invalid_policy, threads 1 to 3 with
 *    the workers sharing every run (SATTN_PAR_MIN=0) or not;
 *  - sattn_attend on one window of every model, with key / query / allow
 *    masks, its weights and statistics.
 * What is written, per push: the status, the row count, the rows, every
 * field of the row infos (not their padding), the stream's schedule
 * (frames, pending, frames to the next window, window rows, skip lead),
 * the statistics (every field) and, with keep_weights, the last
 * window's weights (the mean over heads and each head).  Nothing that
 * may change without an output changing (sattn_stream_bytes) is written.
 *
 * --index FILE writes one line per workload: its name, its first byte's
 * offset in OUT, its byte count and an FNV-1a hash of its bytes; the
 * index of two runs tells which workload a difference is in.  Prints the
 * workload and byte counts.  Exit status 0, 1 when a call failed where
 * it must not (a refused model or stream), 2 on a usage error.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE
#include <sattn/sattn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"

/* ------------------------------------------------------------ output */

static FILE *g_out, *g_index;
static uint64_t g_bytes, g_case_start, g_hash;
static int g_failed;

static void
put (const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    g_hash = (g_hash ^ b[i]) * 0x100000001b3ull;
  if (n > 0 && fwrite (p, 1, n, g_out) != n) {
    perror ("sattn-dump-outputs: write");
    exit (1);
  }
  g_bytes += n;
}

static void
put_u64 (uint64_t v)
{
  put (&v, sizeof v);
}

static void
put_u32 (uint32_t v)
{
  put (&v, sizeof v);
}

static void
put_u8 (uint8_t v)
{
  put (&v, sizeof v);
}

static void
put_f64 (double v)
{
  put (&v, sizeof v);
}

static void
put_infos (const SattnRowInfo *ri, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    put_u64 (ri[i].first);
    put_u32 (ri[i].n_frames);
    put_u8 (ri[i].valid);
    put_u64 (ri[i].window_end);
    put_u32 (ri[i].valid_keys);
    put_u32 (ri[i].masked_keys);
    put_u32 (ri[i].fully_masked);
  }
}

static void
put_stats (const SattnStats *s)
{
  put_u64 (s->windows);
  put_u64 (s->frames);
  put_u64 (s->rows);
  put_u64 (s->masked_keys);
  put_u64 (s->invalid_frames);
  put_u64 (s->overflow_frames);
  put_u64 (s->overflow_rows);
  put_u64 (s->fully_masked_rows);
  put_u64 (s->nonfinite_scores);
  put_u64 (s->saturated_rows);
  put_f64 (s->score_min);
  put_f64 (s->score_max);
  put_f64 (s->lse_min);
  put_f64 (s->lse_max);
  put_f64 (s->max_weight_sum);
  put_f64 (s->entropy_sum);
}

static void
case_begin (void)
{
  g_case_start = g_bytes;
  g_hash = 0xcbf29ce484222325ull;
}

static void
case_end (const char *name)
{
  if (g_index != NULL)
    fprintf (g_index, "%s %llu %llu %016llx\n", name,
             (unsigned long long) g_case_start,
             (unsigned long long) (g_bytes - g_case_start),
             (unsigned long long) g_hash);
}

static void *
xmalloc (size_t n)
{
  void *p = malloc (n > 0 ? n : 1);
  if (p == NULL) {
    fprintf (stderr, "sattn-dump-outputs: out of memory\n");
    exit (1);
  }
  return p;
}

/* ---------------------------------------------------------- workloads */

enum {
  WT_IDENTITY, /* no weights: identity projections */
  WT_FULL,     /* wq, wk, wv, wo and all four biases */
  WT_BARE,     /* wq, wk, wv only: no biases, no output projection */
  WT_MIXED,    /* wq and wv, K identity, wo with d_out != d_model */
};

enum {
  PUSH_HOP,   /* one hop per push */
  PUSH_ONE,   /* one frame per push */
  PUSH_MANY,  /* several hops and a remainder per push */
  PUSH_MIXED, /* a cycle of sizes: 1, hop, 3 hops + 1, 2, window */
};

enum {
  ENC_NONE,
  ENC_POST_RELU,
  ENC_PRE_GELU,
  ENC_POST_GELU,
  ENC_PRE_RELU,
};

typedef struct {
  char name[96];
  /* model */
  size_t E, H, dh, dv, d_out;
  float scale;
  int causal;
  size_t lookback;
  SattnPositions pos;
  int weights; /* WT_* */
  int bias_kv, zero_attn;
  int encoder; /* ENC_* */
  size_t d_ff;
  int threads;
  int par0; /* SATTN_PAR_MIN=0 for the stream */
  /* stream */
  size_t window, hop;
  SattnOutputMode out;
  SattnStartPolicy start;
  SattnInvalidPolicy inv;
  float sat;
  int keep_weights;
  /* feed */
  size_t frames; /* frames of each of the two segments */
  int push;      /* PUSH_* */
  int faults;    /* NaN / Inf / huge samples and GAPs in segment 2 */
  float amp;     /* frame amplitude */
  int skip;      /* a long GAP skipped between the segments */
  int reset_at;  /* reset_at (a large index) and a third segment */
  int attend;    /* sattn_attend on one window of the model */
} Case;

#define MAX_CASES 1024
static Case cases[MAX_CASES];
static size_t n_cases;

static const char *out_names[] = { "frames", "window", "mean", "last" };
static const char *wt_names[] = { "identity", "full", "bare", "mixed" };
static const char *push_names[] = { "hop", "one", "many", "mixed" };
static const char *pos_names[] = { "none", "rope", "rope-il", "alibi" };
static const char *enc_names[] = { "none", "post-relu", "pre-gelu", "post-gelu",
                                   "pre-relu" };
static const char *inv_names[] = { "mask", "zero", "error" };

static Case
case_base (size_t E, size_t H, size_t window, size_t hop)
{
  Case c;
  memset (&c, 0, sizeof c);
  c.E = E;
  c.H = H;
  c.window = window;
  c.hop = hop;
  c.threads = 1;
  c.frames = window + 3 * hop;
  c.push = PUSH_HOP;
  c.amp = 1.0f;
  c.attend = 1;
  c.d_ff = 2 * E;
  return c;
}

static void
add_case (Case c, const char *group)
{
  if (n_cases == MAX_CASES) {
    fprintf (stderr, "sattn-dump-outputs: too many cases\n");
    exit (2);
  }
  snprintf (c.name, sizeof c.name,
            "%s/E%zu-H%zu-n%zu-h%zu%s/%s/%s/%s/%s/%s/t%d%s/%s%s%s%s", group,
            c.E, c.H, c.window, c.hop, c.causal ? "-causal" : "",
            wt_names[c.weights], pos_names[c.pos], enc_names[c.encoder],
            out_names[c.out], inv_names[c.inv], c.threads, c.par0 ? "p0" : "",
            push_names[c.push], c.start == SATTN_START_WAIT ? "/wait" : "",
            c.skip ? "/skip" : "", c.reset_at ? "/reset" : "");
  cases[n_cases++] = c;
}

/* The bench geometries (tests/bench/bench.c): channels x frame size,
 * heads, window, hop, causal. */
typedef struct {
  const char *name;
  size_t E, H, window, hop;
  int causal;
  int short_pooled; /* window and mean output: fewer streams and frames
                         (every window computes every row: seconds each
                         with the portable kernels) */
} Geometry;

static const Geometry geometries[] = {
  { "W1", 64, 4, 256, 16, 0, 0 },
  { "W2", 8, 1, 64, 1, 1, 0 },
  { "W3", 256, 8, 1024, 64, 0, 1 },
  { "W4", 480, 4, 100, 1, 0, 1 },
};

static void
build_cases (void)
{
  /* The bench geometries: identity and random weights, every output
   * mode, threads 1, 2 and 3 (fewer for W3 and W4 pooled: see
   * short_pooled). */
  for (size_t g = 0; g < 4; g++) {
    const Geometry *G = &geometries[g];
    for (int wt = WT_IDENTITY; wt <= WT_FULL; wt++)
      for (int out = 0; out < 4; out++)
        for (int th = 1; th <= 3; th++) {
          Case c = case_base (G->E, G->H, G->window, G->hop);
          c.causal = G->causal;
          c.weights = wt;
          c.out = (SattnOutputMode) out;
          c.threads = th;
          c.faults = 1;
          c.keep_weights = G->window <= 256;
          c.push = G->hop == 1 ? PUSH_ONE : th == 3 ? PUSH_MANY : PUSH_HOP;
          c.frames = G->hop == 1 ? G->window / 2 + 8
                                 : G->window / 2 + 2 * G->hop;
          if (G->short_pooled &&
              (out == SATTN_OUTPUT_WINDOW || out == SATTN_OUTPUT_MEAN)) {
            /* every query row of a large window per window: one thread
             * count, window output with identity weights and mean output
             * with random ones, the first window when it is full */
            if (th != 2 || (out == SATTN_OUTPUT_WINDOW) != (wt == WT_IDENTITY))
              continue;
            c.start = SATTN_START_WAIT;
            c.frames = G->window / 2 + 1;
          }
          c.attend = th == 1 && out == SATTN_OUTPUT_FRAMES;
          add_case (c, G->name);
        }
  }

  /* Positions, causal / lookback, threads. */
  for (int pos = SATTN_POSITIONS_ROPE; pos <= SATTN_POSITIONS_ALIBI; pos++)
    for (int wt = WT_IDENTITY; wt <= WT_FULL; wt++)
      for (int cl = 0; cl < 3; cl++) {
        Case c = case_base (32, 4, 40, 6);
        c.pos = (SattnPositions) pos;
        c.weights = wt;
        c.causal = cl != 0;
        c.lookback = cl == 2 ? 10 : 0;
        if (cl == 2 && wt == WT_IDENTITY)
          c.causal = 0; /* lookback alone */
        c.out = (SattnOutputMode) ((pos + wt + cl) % 4);
        c.threads = 1 + (pos + cl) % 3;
        c.par0 = c.threads > 1;
        c.faults = 1;
        c.keep_weights = 1;
        c.reset_at = 1;
        c.push = (pos + wt + cl) % 4;
        add_case (c, "pos");
      }
  /* ALiBi on three heads (slopes of a non power of two), RoPE with
   * d_head != d_model / heads. */
  for (int th = 1; th <= 3; th += 2) {
    Case c = case_base (24, 3, 33, 5);
    c.pos = SATTN_POSITIONS_ALIBI;
    c.weights = WT_FULL;
    c.causal = 1;
    c.threads = th;
    c.par0 = 1;
    c.keep_weights = 1;
    c.faults = 1;
    add_case (c, "pos");
    c = case_base (24, 3, 33, 5);
    c.pos = SATTN_POSITIONS_ROPE;
    c.weights = WT_FULL;
    c.dh = 6;
    c.dv = 10;
    c.d_out = 24;
    c.threads = th;
    c.par0 = 1;
    c.out = SATTN_OUTPUT_WINDOW;
    c.reset_at = 1;
    add_case (c, "pos");
  }

  /* Encoder layers. */
  for (int enc = ENC_POST_RELU; enc <= ENC_PRE_RELU; enc++)
    for (int v = 0; v < 3; v++) {
      Case c = case_base (32, 4, 40, 8);
      c.weights = WT_FULL;
      c.encoder = enc;
      c.d_ff = 48;
      c.causal = v == 1;
      c.lookback = v == 1 ? 12 : 0;
      c.pos = v == 2 ? SATTN_POSITIONS_ROPE : SATTN_POSITIONS_NONE;
      c.out = (SattnOutputMode) ((enc + v) % 4);
      c.threads = 1 + (enc + v) % 3;
      c.par0 = v != 0;
      c.faults = 1;
      c.keep_weights = 1;
      c.push = (enc + 2 * v) % 4;
      c.inv = v == 2 ? SATTN_INVALID_ZERO : SATTN_INVALID_MASK;
      add_case (c, "enc");
    }
  /* An encoder layer on W1 (the bench's --encoder geometry). */
  for (int th = 1; th <= 2; th++) {
    Case c = case_base (64, 4, 256, 16);
    c.weights = WT_FULL;
    c.encoder = th == 1 ? ENC_POST_RELU : ENC_PRE_GELU;
    c.d_ff = 256;
    c.threads = th;
    c.frames = 160;
    c.faults = 1;
    add_case (c, "enc");
  }

  /* Extra keys. */
  for (int wt = WT_IDENTITY; wt <= WT_FULL; wt++)
    for (int ek = 1; ek <= 3; ek++)
      for (int cl = 0; cl < 2; cl++) {
        Case c = case_base (32, 4, 40, 6);
        c.weights = wt;
        c.bias_kv = ek & 1;
        c.zero_attn = (ek >> 1) & 1;
        c.causal = cl;
        c.lookback = cl ? 7 : 0;
        c.out = (SattnOutputMode) ((wt + ek + cl) % 4);
        c.threads = 1 + (ek + cl) % 3;
        c.par0 = 1;
        c.faults = 1;
        c.keep_weights = 1;
        c.start = cl ? SATTN_START_WAIT : SATTN_START_PAD;
        add_case (c, "extra");
      }

  /* Invalid policies, start policies, push patterns, skip. */
  for (int inv = 0; inv < 3; inv++)
    for (int st = 0; st < 2; st++)
      for (int out = 0; out < 4; out++) {
        Case c = case_base (16, 2, 24, 4);
        c.weights = (inv + out) % 2 ? WT_FULL : WT_IDENTITY;
        c.inv = (SattnInvalidPolicy) inv;
        c.start = (SattnStartPolicy) st;
        c.out = (SattnOutputMode) out;
        c.threads = 1 + (inv + st + out) % 3;
        c.par0 = 1;
        c.faults = 1;
        c.keep_weights = 1;
        c.push = (inv + out) % 4;
        c.skip = inv != SATTN_INVALID_ERROR;
        c.reset_at = st;
        c.frames = 60;
        c.attend = inv == 0 && st == 0 && out == 0;
        add_case (c, "policy");
      }
  for (int p = 0; p < 4; p++)
    for (int out = 0; out < 4; out++) {
      Case c = case_base (64, 4, 256, 16);
      c.weights = WT_FULL;
      c.out = (SattnOutputMode) out;
      c.push = p;
      c.threads = p % 2 ? 2 : 1;
      c.frames = p == PUSH_ONE ? 40 : 200;
      c.skip = 1;
      c.faults = 1;
      c.attend = 0;
      add_case (c, "push");
    }

  /* Shapes: d_head != d_model / heads, d_value != d_head, d_out !=
   * d_model, explicit scales (a power of two, and not), K identity. */
  for (int v = 0; v < 6; v++) {
    Case c = case_base (24, 3, 30, 7);
    c.weights = v < 2 ? WT_MIXED : v < 4 ? WT_BARE : WT_FULL;
    c.dh = v == 0 || v == 1 ? 8 : 5;
    c.dv = v == 0 ? 8 : v == 1 ? 8 : 9;
    c.d_out = c.weights == WT_BARE ? 0 : 17;
    if (c.weights == WT_MIXED)
      c.dv = 11;
    c.scale = v == 2 ? 1.0f : v == 3 ? 0.125f : v == 4 ? 0.3f : 0.0f;
    c.causal = v % 2;
    c.out = (SattnOutputMode) (v % 4);
    c.threads = 1 + v % 3;
    c.par0 = 1;
    c.faults = 1;
    c.keep_weights = 1;
    c.push = v % 4;
    add_case (c, "shape");
  }

  /* Spread scores (saturated rows, exponentials far below the max) and
   * scores that overflow (+-inf, NaN from inf - inf), saturation
   * thresholds. */
  for (int v = 0; v < 6; v++) {
    Case c = case_base (32, 4, 48, 8);
    c.weights = v % 2 ? WT_FULL : WT_IDENTITY;
    c.amp = v < 2 ? 12.0f : v < 4 ? 3e18f : 60.0f;
    c.sat = v == 4 ? 0.5f : v == 5 ? SATTN_SATURATION_EVERY_ROW : 0.0f;
    c.scale = v == 5 ? 1.0f : 0.0f;
    c.out = (SattnOutputMode) (v % 4);
    c.threads = 1 + v % 3;
    c.par0 = 1;
    c.faults = v >= 4;
    c.keep_weights = 1;
    add_case (c, "extreme");
  }
}

/* ------------------------------------------------------------ running */

typedef struct {
  float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *bias_k, *bias_v;
  float *w1, *b1, *w2, *b2, *n1w, *n1b, *n2w, *n2b;
} WeightArrays;

static float *
rnd (TestRng *r, size_t n, float scale)
{
  float *p = test_rng_floats (r, n, scale);
  if (p == NULL) {
    fprintf (stderr, "sattn-dump-outputs: out of memory\n");
    exit (1);
  }
  return p;
}

static float *
rnd_around_one (TestRng *r, size_t n)
{
  float *p = rnd (r, n, 0.2f);
  for (size_t i = 0; i < n; i++)
    p[i] += 1.0f;
  return p;
}

static void
weights_free (WeightArrays *a)
{
  float **f = (float **) a;
  for (size_t i = 0; i < sizeof *a / sizeof (float *); i++)
    free (f[i]);
  memset (a, 0, sizeof *a);
}

/* The seed of a model's weights: from what shapes them, so that the
 * thread counts, output modes and push patterns of one model get the
 * same weights. */
static uint64_t
model_seed (const Case *c)
{
  const uint64_t v[] = { c->E,
                         c->H,
                         c->dh,
                         c->dv,
                         c->d_out,
                         (uint64_t) c->weights,
                         (uint64_t) c->bias_kv,
                         (uint64_t) c->encoder,
                         c->d_ff };
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    h = (h ^ v[i]) * 0x100000001b3ull;
  return h | 1;
}

/* The model of case c (with its weights in a). */
static SattnModel *
make_model (const Case *c, WeightArrays *a, uint64_t seed)
{
  SattnConfig cfg;
  memset (&cfg, 0, sizeof cfg);
  cfg.d_model = c->E;
  cfg.heads = c->H;
  cfg.d_head = c->dh;
  cfg.d_value = c->dv;
  cfg.scale = c->scale;
  cfg.causal = c->causal;
  cfg.lookback = c->lookback;
#if SATTN_VERSION_MAJOR < 1
  cfg.threads = c->threads; /* the model's in soname 0 */
#endif
  cfg.positions = c->pos;
  const size_t dh = c->dh ? c->dh : c->E / c->H;
  const size_t dv = c->dv ? c->dv : dh;
  const size_t dq = c->H * dh, dvv = c->H * dv;
  TestRng r = { seed };
  SattnWeights w;
  memset (&w, 0, sizeof w);
  memset (a, 0, sizeof *a);
  const float ws = (float) sqrt (3.0 / (double) c->E);
  if (c->weights == WT_FULL || c->weights == WT_BARE ||
      c->weights == WT_MIXED) {
    a->wq = rnd (&r, dq * c->E, ws);
    if (c->weights != WT_MIXED)
      a->wk = rnd (&r, dq * c->E, ws);
    a->wv = rnd (&r, dvv * c->E, ws);
    if (c->weights != WT_BARE) {
      cfg.d_out = c->d_out ? c->d_out : c->E;
      a->wo = rnd (&r, cfg.d_out * dvv, (float) sqrt (3.0 / (double) dvv));
    }
    if (c->weights == WT_FULL) {
      a->bq = rnd (&r, dq, 0.1f);
      a->bk = rnd (&r, dq, 0.1f);
      a->bv = rnd (&r, dvv, 0.1f);
      a->bo = rnd (&r, cfg.d_out, 0.1f);
    }
  }
  if (c->bias_kv) {
    a->bias_k = rnd (&r, dq, 1.0f);
    a->bias_v = rnd (&r, dvv, 1.0f);
  }
  if (c->encoder != ENC_NONE) {
    cfg.encoder = 1;
    cfg.d_ff = c->d_ff;
    cfg.activation = c->encoder == ENC_PRE_GELU || c->encoder == ENC_POST_GELU
                         ? SATTN_ACTIVATION_GELU
                         : SATTN_ACTIVATION_RELU;
    cfg.norm_first = c->encoder == ENC_PRE_GELU || c->encoder == ENC_PRE_RELU;
    cfg.norm_eps = c->encoder == ENC_POST_GELU ? 1e-6 : 0.0;
    a->w1 = rnd (&r, c->d_ff * c->E, ws);
    a->b1 = rnd (&r, c->d_ff, 0.1f);
    a->w2 = rnd (&r, c->E * c->d_ff, (float) sqrt (3.0 / (double) c->d_ff));
    a->b2 = rnd (&r, c->E, 0.1f);
    if (c->encoder != ENC_PRE_RELU) { /* pre-relu: default norms */
      a->n1w = rnd_around_one (&r, c->E);
      a->n1b = rnd (&r, c->E, 0.1f);
      a->n2w = rnd_around_one (&r, c->E);
      a->n2b = rnd (&r, c->E, 0.1f);
    }
  }
  w.wq = a->wq;
  w.bq = a->bq;
  w.wk = a->wk;
  w.bk = a->bk;
  w.wv = a->wv;
  w.bv = a->bv;
  w.wo = a->wo;
  w.bo = a->bo;
  w.bias_k = a->bias_k;
  w.bias_v = a->bias_v;
  w.add_zero_attn = c->zero_attn;
  w.w1 = a->w1;
  w.b1 = a->b1;
  w.w2 = a->w2;
  w.b2 = a->b2;
  w.norm1_w = a->n1w;
  w.norm1_b = a->n1b;
  w.norm2_w = a->n2w;
  w.norm2_b = a->n2b;
  const int any = c->weights != WT_IDENTITY || c->bias_kv || c->zero_attn ||
                  c->encoder != ENC_NONE;
  SattnStatus st = SATTN_OK;
  SattnModel *m = sattn_model_new (&cfg, any ? &w : NULL, &st);
  if (m == NULL) {
    char err[256];
    sattn_model_check (&cfg, any ? &w : NULL, err, sizeof err);
    fprintf (stderr, "sattn-dump-outputs: %s: model refused: %s\n", c->name,
             err);
    g_failed = 1;
  }
  return m;
}

/* Frames of one segment: count frames of E floats (amplitude amp) and
 * their flags; with faults, GAPs, NaN, +-Inf and huge samples at fixed
 * places. */
static void
make_frames (TestRng *r, size_t count, size_t E, float amp, int faults,
             float *x, uint8_t *valid)
{
  const float a = amp * (float) sqrt (3.0);
  for (size_t f = 0; f < count; f++) {
    for (size_t t = 0; t < E; t++)
      x[f * E + t] = test_rng_uniform (r) * a;
    valid[f] = 1;
    if (!faults)
      continue;
    if (f % 23 == 5 || (f >= 40 && f < 40 + 13))
      valid[f] = 0; /* a GAP, a run of them */
    if (f % 29 == 11)
      x[f * E + (f % E)] = NAN;
    if (f % 31 == 17)
      x[f * E + (f * 7 % E)] = f % 2 ? INFINITY : -INFINITY;
    if (f % 37 == 20)
      for (size_t t = 0; t < E; t++)
        x[f * E + t] *= 4e37f; /* overflowing projections */
  }
}

typedef struct {
  const Case *c;
  SattnStream *s;
  size_t rf; /* floats per row */
  size_t E;
  float *out;
  SattnRowInfo *info;
  size_t cap; /* rows of out / info */
} Run;

static void
run_room (Run *R, size_t rows)
{
  if (rows <= R->cap)
    return;
  free (R->out);
  free (R->info);
  R->cap = rows;
  R->out = xmalloc (rows * R->rf * sizeof (float));
  R->info = xmalloc (rows * sizeof (SattnRowInfo));
}

/* The stream's schedule and state. */
static void
put_schedule (const Run *R)
{
  put_u64 (sattn_stream_frames (R->s));
  put_u64 (sattn_stream_pending (R->s));
  put_u64 (sattn_stream_frames_to_window (R->s));
  put_u64 (sattn_stream_window_rows (R->s, 0));
  put_u64 (sattn_stream_window_rows (R->s, 1));
  put_u64 (sattn_stream_skip_lead (R->s));
  put_u64 (sattn_stream_max_rows (R->s, 0));
  put_u64 (sattn_stream_max_rows (R->s, 5));
}

/* The last window's weights: after every push when they are small
 * (at most LW_EVERY floats for all heads and their mean), else only when
 * final is set (at the end of a stream). */
#define LW_EVERY 16384
static void
put_last_weights (const Run *R, int final)
{
  if (!R->c->keep_weights)
    return;
  size_t rows = 0, cols = 0;
  SattnStatus st = sattn_stream_last_weights (R->s, -1, NULL, &rows, &cols);
  put_u32 ((uint32_t) st);
  if (st != SATTN_OK)
    return;
  put_u64 (rows);
  put_u64 (cols);
  if (!final && rows * cols * (R->c->H + 1) > LW_EVERY)
    return;
  float *w = xmalloc (rows * cols * sizeof (float));
  for (int h = -1; h < (int) R->c->H; h++) {
    st = sattn_stream_last_weights (R->s, h, w, &rows, &cols);
    put_u32 ((uint32_t) st);
    put (w, rows * cols * sizeof (float));
  }
  free (w);
}

static void
put_rows (const Run *R, SattnStatus st, size_t got)
{
  put_u32 ((uint32_t) st);
  put_u64 (got);
  put (R->out, got * R->rf * sizeof (float));
  put_infos (R->info, got);
}

/* One push of cnt frames (the error policy's stop handled: the bad frame
 * pushed again under the mask policy, then the rest). */
static void
run_push (Run *R, const float *x, const uint8_t *valid, size_t cnt)
{
  while (cnt > 0) {
    const uint64_t base = sattn_stream_frames (R->s);
    run_room (R, sattn_stream_max_rows (R->s, cnt));
    size_t got = 0;
    SattnStatus st = sattn_stream_push (R->s, x, cnt, valid, R->out, R->cap,
                                        R->info, &got);
    put_rows (R, st, got);
    put_schedule (R);
    if (got > 0)
      put_last_weights (R, 0);
    if (st != SATTN_E_NONFINITE)
      return;
    uint64_t idx = 0;
    SattnFrameFault fault = SATTN_FRAME_OK;
    st = sattn_stream_error_frame (R->s, &idx, &fault);
    put_u32 ((uint32_t) st);
    put_u64 (idx);
    put_u32 ((uint32_t) fault);
    if (st != SATTN_OK || idx < base || idx - base >= cnt) {
      fprintf (stderr,
               "sattn-dump-outputs: %s: no error frame after a "
               "stopped push\n",
               R->c->name);
      g_failed = 1;
      return;
    }
    const size_t k = (size_t) (idx - base);
    sattn_stream_set_invalid_policy (R->s, SATTN_INVALID_MASK);
    run_room (R, sattn_stream_max_rows (R->s, 1));
    st = sattn_stream_push (R->s, x + k * R->E, 1,
                            valid != NULL ? valid + k : NULL, R->out, R->cap,
                            R->info, &got);
    put_rows (R, st, got);
    sattn_stream_set_invalid_policy (R->s, SATTN_INVALID_ERROR);
    x += (k + 1) * R->E;
    if (valid != NULL)
      valid += k + 1;
    cnt -= k + 1;
  }
}

/* A segment of count frames in the case's push pattern. */
static void
run_segment (Run *R, const float *x, const uint8_t *valid, size_t count)
{
  static const size_t mixed[] = { 1, 0, 0, 2, 0 };
  const Case *c = R->c;
  size_t f = 0, k = 0;
  while (f < count) {
    size_t n;
    switch (c->push) {
      case PUSH_ONE:
        n = 1;
        break;
      case PUSH_MANY:
        n = 5 * c->hop + 3;
        break;
      case PUSH_MIXED:
        n = mixed[k % 5];
        if (k % 5 == 1)
          n = c->hop;
        else if (k % 5 == 2)
          n = 3 * c->hop + 1;
        else if (k % 5 == 4)
          n = c->window;
        break;
      default:
        n = c->hop;
        break;
    }
    k++;
    if (n > count - f)
      n = count - f;
    run_push (R, x + f * R->E, valid + f, n);
    f += n;
  }
}

static void
run_drain (Run *R)
{
  run_room (R, sattn_stream_max_rows (R->s, 0));
  size_t got = 0;
  SattnStatus st = sattn_stream_drain (R->s, R->out, R->cap, R->info, &got);
  put_rows (R, st, got);
  put_schedule (R);
  put_last_weights (R, 0);
}

static void
run_skip (Run *R, uint64_t n)
{
  const uint64_t lead = sattn_stream_skip_lead (R->s);
  const size_t k = (size_t) (n < lead ? n : lead);
  run_room (R, k ? sattn_stream_max_rows (R->s, k) : 0);
  size_t got = 0;
  SattnSkipped sk;
  memset (&sk, 0, sizeof sk);
  SattnStatus st = sattn_stream_skip (R->s, n, k ? R->out : NULL,
                                      k ? R->cap : 0, R->info, &got, &sk);
  put_rows (R, st, got);
  put_u64 (sk.first);
  put_u64 (sk.end);
  put_u64 (sk.rows);
  put_schedule (R);
  put_last_weights (R, 0);
}

static void
put_stream_stats (Run *R, int clear)
{
  SattnStats st;
  sattn_stream_get_stats (R->s, &st, clear);
  put_stats (&st);
}

/* sattn_attend on one window of frames x (n rows) with masks. */
static void
run_attend (const Case *c, const SattnModel *m, const float *x, size_t n)
{
  const size_t d_out = sattn_model_d_out (m);
  const size_t cols = n + sattn_model_extra_keys (m);
  float *out = xmalloc (n * d_out * sizeof (float));
  float *w = xmalloc (c->H * n * cols * sizeof (float));
  uint8_t *kv = xmalloc (n), *qv = xmalloc (n), *allow = xmalloc (n * n);
  for (size_t i = 0; i < n; i++) {
    kv[i] = i % 7 != 3;
    qv[i] = i % 11 != 6;
    for (size_t j = 0; j < n; j++)
      allow[i * n + j] = (i * 31 + j * 17) % 13 != 0;
  }
  for (int v = 0; v < 3; v++) {
    SattnMask mask = { kv, qv, v == 2 ? allow : NULL };
    SattnStats st;
    sattn_stats_clear (&st);
    SattnStatus s = sattn_attend (m, x, n, v == 0 ? NULL : &mask, out,
                                  v == 1 ? NULL : w, &st);
    put_u32 ((uint32_t) s);
    put (out, n * d_out * sizeof (float));
    if (v != 1)
      put (w, c->H * n * cols * sizeof (float));
    put_stats (&st);
  }
  free (out);
  free (w);
  free (kv);
  free (qv);
  free (allow);
}

static void
run_case (const Case *c)
{
  case_begin ();
  WeightArrays wa;
  SattnModel *m = make_model (c, &wa, model_seed (c));
  if (m == NULL) {
    case_end (c->name);
    return;
  }
  SattnStreamConfig sc;
  memset (&sc, 0, sizeof sc);
  sc.window = c->window;
  sc.hop = c->hop;
  sc.output = c->out;
  sc.start = c->start;
  sc.collect_stats = 1;
  sc.saturation_threshold = c->sat;
  sc.keep_weights = c->keep_weights;
  sc.invalid_policy = c->inv;
#if SATTN_VERSION_MAJOR >= 1
  sc.threads = c->threads; /* the stream's from soname 1 */
#endif
  if (c->par0)
    setenv ("SATTN_PAR_MIN", "0", 1);
  else
    unsetenv ("SATTN_PAR_MIN");
  SattnStatus st = SATTN_OK;
  SattnStream *s = sattn_stream_new (m, &sc, &st);
  unsetenv ("SATTN_PAR_MIN");
  if (s == NULL) {
    fprintf (stderr, "sattn-dump-outputs: %s: stream refused (status %d)\n",
             c->name, (int) st);
    g_failed = 1;
    sattn_model_free (m);
    weights_free (&wa);
    case_end (c->name);
    return;
  }
  Run R;
  memset (&R, 0, sizeof R);
  R.c = c;
  R.s = s;
  R.E = c->E;
  R.rf = sattn_stream_row_floats (s);
  put_u64 (R.rf);
  put_u64 (sattn_model_d_out (m));
  put_u64 (sattn_model_extra_keys (m));
  put_schedule (&R);

  /* Frames: segment 1 clean, segment 2 with the faults (if any), a
   * third after a reset.  The inputs are the same for every thread
   * count and push pattern of a geometry: seeded by the model's shape. */
  const size_t nf = c->frames;
  float *x = xmalloc (3 * nf * c->E * sizeof (float));
  uint8_t *valid = xmalloc (3 * nf);
  TestRng r = { 0x5eed0000ull + c->E * 131 + c->window * 7 + c->hop };
  make_frames (&r, nf, c->E, c->amp, 0, x, valid);
  make_frames (&r, nf, c->E, c->amp, c->faults, x + nf * c->E, valid + nf);
  make_frames (&r, nf, c->E, c->amp, c->faults, x + 2 * nf * c->E,
               valid + 2 * nf);

  run_segment (&R, x, valid, nf);
  put_stream_stats (&R, 0);
  if (c->skip) {
    run_skip (&R, 3 * c->window + 5);
    run_segment (&R, x, valid, c->hop + 1);
    run_skip (&R, 2);
  }
  run_segment (&R, x + nf * c->E, valid + nf, nf);
  put_stream_stats (&R, 1);
  run_drain (&R);
  run_segment (&R, x, valid, 2 * c->hop + 1);
  run_drain (&R);
  if (c->reset_at) {
    put_u32 ((uint32_t) sattn_stream_reset_at (s, 1000000007ull));
    put_schedule (&R);
    run_segment (&R, x + 2 * nf * c->E, valid + 2 * nf, nf);
    run_drain (&R);
    sattn_stream_reset (s);
    put_schedule (&R);
    run_segment (&R, x + nf * c->E, valid + nf, c->window / 2 + 1);
    run_drain (&R);
  }
  put_stream_stats (&R, 0);
  put_last_weights (&R, 1);

  if (c->attend) {
    /* One window (at most 256 rows) ending in segment 2, with its
     * faults. */
    size_t n = c->window < 2 * nf ? c->window : 2 * nf;
    n = n < 256 ? n : 256;
    run_attend (c, m, x + nf * c->E - (n > nf ? n - nf : 0) * c->E, n);
  }
  sattn_stream_free (s);
  sattn_model_free (m);
  weights_free (&wa);
  free (x);
  free (valid);
  free (R.out);
  free (R.info);
  case_end (c->name);
}

int
main (int argc, char **argv)
{
  const char *path = NULL, *index = NULL, *only = NULL;
  int list = 0, verbose = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp (argv[i], "--index") == 0 && i + 1 < argc)
      index = argv[++i];
    else if (strcmp (argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp (argv[i], "--list") == 0)
      list = 1;
    else if (strcmp (argv[i], "--verbose") == 0)
      verbose = 1;
    else if (argv[i][0] != '-' && path == NULL)
      path = argv[i];
    else {
      path = NULL;
      list = 0;
      break;
    }
  }
  build_cases ();
  if (list) {
    for (size_t i = 0; i < n_cases; i++)
      printf ("%s\n", cases[i].name);
    return 0;
  }
  if (path == NULL) {
    fprintf (stderr, "usage: sattn-dump-outputs OUT [--index FILE] "
                     "[--only SUBSTRING] [--list] [--verbose]\n");
    return 2;
  }
  g_out = fopen (path, "wb");
  if (g_out == NULL) {
    perror (path);
    return 2;
  }
  if (index != NULL && (g_index = fopen (index, "w")) == NULL) {
    perror (index);
    return 2;
  }
  size_t ran = 0;
  for (size_t i = 0; i < n_cases; i++) {
    if (only != NULL && strstr (cases[i].name, only) == NULL)
      continue;
    struct timespec t0, t1;
    clock_gettime (CLOCK_MONOTONIC, &t0);
    run_case (&cases[i]);
    clock_gettime (CLOCK_MONOTONIC, &t1);
    if (verbose)
      fprintf (stderr, "%8.3f s  %s\n",
               (double) (t1.tv_sec - t0.tv_sec) +
                   1e-9 * (double) (t1.tv_nsec - t0.tv_nsec),
               cases[i].name);
    ran++;
  }
  if (fclose (g_out) != 0 || (g_index != NULL && fclose (g_index) != 0)) {
    perror ("sattn-dump-outputs: close");
    return 1;
  }
  const char *lvl = getenv ("SATTN_SIMD");
  printf ("sattn-dump-outputs: %zu workloads, %llu bytes written to %s "
          "(SATTN_SIMD=%s)\n",
          ran, (unsigned long long) g_bytes, path, lvl != NULL ? lvl : "unset");
  return g_failed ? 1 : 0;
}
