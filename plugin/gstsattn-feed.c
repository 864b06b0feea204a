/* The sattn element's data path: the timeline (frame timestamps,
 * discontinuities and resyncs), output buffers (building, accounting,
 * pushing), feeding frames to the core (process, push, GAP frames,
 * drain), the chain function and the sink events of the data path
 * (segment, gap, flush, EOS; gstsattn.c sets caps up).  It calls the
 * weights swap and the observers, never the element's own file.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstsattn-priv.h"
#include "gstsattn-time.h"

#include <string.h>

/* Output buffers are sized for at most GST_SATTN_OUT_FRAMES input
 * frames, and at most this many bytes unless one core call needs more. */
#define OUT_MAX_BYTES ((gsize) 64 << 20)

/* An output buffer being filled by one or more core calls. */
typedef struct
{
  GstBuffer *buf;
  GstMapInfo map;
  gsize cap_rows, rows;
  guint64 first_frame, end_frame;
  gboolean any_valid;
  GstSattnMeta *meta;           /* on buf: the rows' window metadata */
} GstSattnOut;

/* ------------------------------------------------------------ timing */

/* Where the sample counter says the next input byte lies in time. */
GstClockTime
gst_sattn_expected_ts (GstSattn * self)
{
  if (!GST_CLOCK_TIME_IS_VALID (self->resync_ts))
    return GST_CLOCK_TIME_NONE;
  return gst_sattn_ts_add (self->resync_ts,
      gst_util_uint64_scale (self->bytes_since_resync, GST_SECOND,
          (guint64) self->rate * self->bpf));
}

/* Start a new timeline at ts (NONE: the segment start, else 0). */
void
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
  gst_sattn_classes_reset (&self->classes);
}

/* Where the discontinuity detector expects the next sample: the time of
 * its last restart plus the samples it counted since. */
static GstClockTime
gst_sattn_align_next (GstSattn * self)
{
  GstClockTime t = gst_audio_stream_align_get_timestamp_at_discont
      (self->align);

  if (!GST_CLOCK_TIME_IS_VALID (t))
    return GST_CLOCK_TIME_NONE;
  return gst_sattn_time_of_frame (t,
      gst_audio_stream_align_get_samples_since_discont (self->align), 1,
      self->rate);
}

/* Make the discontinuity detector take ts as where the next n_samples
 * samples lie, with no discontinuity pending (a new timeline, or one that
 * continues across new caps). */
void
gst_sattn_align_restart (GstSattn * self, GstClockTime ts, guint64 n_samples)
{
  GstClockTime out_ts, out_dur;
  guint64 pos;

  if (self->align == NULL || !GST_CLOCK_TIME_IS_VALID (ts))
    return;
  gst_audio_stream_align_mark_discont (self->align);
  gst_audio_stream_align_process (self->align, TRUE, ts,
      (guint) MIN (n_samples, G_MAXUINT), &out_ts, &out_dur, &pos);
}

/* ------------------------------------------------------------ output */

/* Tensor output (NNStreamer: one frame per buffer): buf's rows go out as
 * one buffer each (sharing buf's memory), row k stamped with the time of
 * its first new input frame and lasting until its last one ends (in the
 * pooled modes, the hop's duration). */
static GstFlowReturn
gst_sattn_out_finish_rows (GstSattn * self, GstBuffer * buf, gsize rows)
{
  const gsize row_bytes = self->row_floats * sizeof (float);
  GstFlowReturn ret = GST_FLOW_OK;
  gsize i;

  for (i = 0; i < rows && ret == GST_FLOW_OK; i++) {
    const SattnRowInfo *ri = &self->out_info[i];
    GstBuffer *row;
    GstClockTime pts, end;

    /* The window metadata goes along: the row's own entry. */
    row = gst_buffer_copy_region (buf, GST_BUFFER_COPY_MEMORY |
        GST_BUFFER_COPY_META, i * row_bytes, row_bytes);
    /* Shared, unchanged memory: no tag to drop downstream. */
    GST_BUFFER_FLAG_UNSET (row, GST_BUFFER_FLAG_TAG_MEMORY);
    pts = gst_sattn_frame_ts (self, ri->first);
    end = gst_sattn_frame_ts (self, ri->first + ri->n_frames);
    GST_BUFFER_PTS (row) = pts;
    GST_BUFFER_DTS (row) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION (row) = end - pts;
    GST_BUFFER_OFFSET (row) = self->out_offset;
    GST_BUFFER_OFFSET_END (row) = self->out_offset + 1;
    self->out_offset++;
    if (self->discont_pending) {
      GST_BUFFER_FLAG_SET (row, GST_BUFFER_FLAG_DISCONT);
      self->discont_pending = FALSE;
    }
    if (!ri->valid)
      GST_BUFFER_FLAG_SET (row, GST_BUFFER_FLAG_GAP);
    ret = gst_pad_push (self->srcpad, row);
  }
  gst_buffer_unref (buf);
  gst_sattn_obs_pushed (&self->obs, GST_ELEMENT (self));
  return ret;
}

static GstFlowReturn
gst_sattn_out_finish (GstSattn * self, GstSattnOut * out)
{
  GstBuffer *buf = out->buf;
  GstSattnMeta *meta = out->meta;
  GstClockTime pts, end;
  gsize rows = out->rows;
  GstFlowReturn ret;
  gboolean meta_structure;

  if (buf == NULL)
    return GST_FLOW_OK;
  gst_buffer_unmap (buf, &out->map);
  out->buf = NULL;
  out->rows = 0;
  out->cap_rows = 0;
  if (out->meta)
    out->meta->n_rows = (guint) rows;
  out->meta = NULL;

  if (rows == 0) {
    gst_buffer_unref (buf);
    return GST_FLOW_OK;
  }

  GST_OBJECT_LOCK (self);
  meta_structure = self->meta_structure;
  GST_OBJECT_UNLOCK (self);
  /* The buffer holds the rows written, as its meta describes: a buffer
   * cut short (an error, a drain) keeps its meta in the tensor rows too
   * (a region copy keeps the meta only of a buffer of the described
   * size). */
  gst_buffer_set_size (buf, rows * self->row_floats * sizeof (float));
  if (meta != NULL && meta_structure)
    gst_sattn_meta_add_custom (buf, meta);

  if (self->tensor_out)
    return gst_sattn_out_finish_rows (self, buf, rows);

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

/* A buffer of size bytes, or NULL when there is no memory for it
 * (gst_buffer_new_allocate would abort the process). */
static GstBuffer *
gst_sattn_try_buffer_new (gsize size)
{
  gpointer mem = g_try_malloc (MAX (size, 1));

  return mem ? gst_buffer_new_wrapped (mem, size) : NULL;
}

/* Make room for need more rows in out, pushing what it holds if full.
 * hint_frames: input frames still to come in this call, to size a new
 * output buffer. */
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
      (gsize) MIN (hint_frames, GST_SATTN_OUT_FRAMES));
  cap = MIN (cap, OUT_MAX_BYTES / (self->row_floats * sizeof (float)));
  if (self->tensor_out)
    cap = MIN (cap, self->out_info_cap);
  cap = MAX (cap, need);
  out->buf = gst_sattn_try_buffer_new (cap * self->row_floats * sizeof (float));
  if (out->buf == NULL || !gst_buffer_map (out->buf, &out->map, GST_MAP_WRITE)) {
    gst_clear_buffer (&out->buf);
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate an output buffer of %" G_GSIZE_FORMAT " rows "
            "(%" G_GSIZE_FORMAT " bytes)", cap,
            cap * self->row_floats * sizeof (float)), (NULL));
    return GST_FLOW_ERROR;
  }
  out->meta = gst_sattn_meta_add (out->buf, (guint) cap);
  if (out->meta == NULL) {
    gst_buffer_unmap (out->buf, &out->map);
    gst_clear_buffer (&out->buf);
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate the window metadata of %" G_GSIZE_FORMAT
            " output rows", cap), (NULL));
    return GST_FLOW_ERROR;
  }
  out->meta->window = self->cfg.window;
  out->meta->row_bytes = self->row_floats * sizeof (float);
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
  SattnRowCheck *checks;

  if (need <= self->info_cap)
    return TRUE;
  info = g_try_renew (SattnRowInfo, self->info, need);
  if (info != NULL)
    self->info = info;
  checks = info ? g_try_renew (SattnRowCheck, self->checks, need) : NULL;
  if (checks == NULL) {
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Could not allocate the descriptions of %" G_GSIZE_FORMAT
            " output rows (%" G_GSIZE_FORMAT " bytes)", need,
            need * (sizeof (SattnRowInfo) + sizeof (SattnRowCheck))), (NULL));
    return FALSE;
  }
  self->checks = checks;
  self->info_cap = need;
  return TRUE;
}

/* Running time of input frame f (NONE outside the segment). */
static GstClockTime
gst_sattn_frame_running_time (GstSattn * self, guint64 f)
{
  if (self->segment.format != GST_FORMAT_TIME)
    return GST_CLOCK_TIME_NONE;
  return gst_segment_to_running_time (&self->segment, GST_FORMAT_TIME,
      gst_sattn_frame_ts (self, f));
}

/* The window metadata of the n_rows rows described by self->info, which
 * follow the out->rows rows out holds. */
static void
gst_sattn_out_meta (GstSattn * self, GstSattnOut * out, gsize n_rows)
{
  GstSattnMetaRow *r;
  gsize i;

  if (out->meta == NULL)
    return;
  r = out->meta->rows + out->rows;
  for (i = 0; i < n_rows; i++, r++) {
    const SattnRowInfo *in = &self->info[i];
    guint64 ws = in->window_end > self->cfg.window ?
        in->window_end - self->cfg.window : 0;

    r->first_frame = in->first;
    r->n_frames = in->n_frames;
    r->valid_keys = in->valid_keys;
    r->masked_keys = in->masked_keys;
    r->fully_masked_rows = in->fully_masked;
    r->valid = in->valid != 0;
    r->window_start = gst_sattn_frame_running_time (self, ws);
    r->window_end = gst_sattn_frame_running_time (self, in->window_end);
    out->meta->checks[out->rows + i].in_contract =
        self->checks[i].in_contract != 0;
    out->meta->checks[out->rows + i].input_rms = self->checks[i].input_rms;
    out->meta->checks[out->rows + i].pooled_z = self->checks[i].pooled_z;
  }
}

/* output=classes: the decisions of the n_rows rows described by
 * self->info, which follow the out->rows rows out holds. */
static void
gst_sattn_out_classes (GstSattn * self, GstSattnOut * out, gsize n_rows)
{
  const float *rows = (const float *) out->map.data +
      out->rows * self->row_floats;
  GstClockTime interval;
  guint top_k;
  gdouble min_p;
  gsize i;

  GST_OBJECT_LOCK (self);
  interval = self->obs.interval;
  top_k = self->top_k;
  min_p = self->props.min_probability;
  GST_OBJECT_UNLOCK (self);
  if (min_p < 0.0)
    min_p = (self->cfg.model_contract.recorded &
        SATTN_CONTRACT_MIN_PROBABILITY) ?
        self->cfg.model_contract.min_probability : 0.0;
  for (i = 0; i < n_rows; i++) {
    const SattnRowInfo *in = &self->info[i];
    GstClockTime ts = gst_sattn_frame_ts (self, in->first);
    GstClockTime end = gst_sattn_frame_ts (self, in->first + in->n_frames);
    guint64 ws = in->window_end > self->cfg.window ?
        in->window_end - self->cfg.window : 0;

    gst_sattn_classes_window (&self->classes, GST_ELEMENT (self),
        rows + i * self->row_floats, in->valid != 0, &self->checks[i], min_p,
        top_k, interval, ts, end - ts, gst_sattn_frame_ts (self, ws),
        &self->segment);
  }
}

/* Windows outside the model's input contract between two warnings (of
 * running time); the first one warns at once. */
#define GST_SATTN_CONTRACT_WARN_INTERVAL (10 * GST_SECOND)

/* The warning for the windows outside the contract, rate-limited: the
 * first at once, then at most one per GST_SATTN_CONTRACT_WARN_INTERVAL,
 * each counting the windows since the last and describing the latest. */
static void
gst_sattn_out_contract (GstSattn * self, gsize n_rows)
{
  const SattnModelContract *k = &self->cfg.model_contract;
  GstClockTime now = GST_CLOCK_TIME_NONE;
  gsize i;

  for (i = 0; i < n_rows; i++) {
    if (self->checks[i].in_contract || !self->info[i].valid)
      continue;
    self->outside_windows++;
    self->outside_total++;
    self->outside_last = self->checks[i];
    now = gst_sattn_frame_running_time (self, self->info[i].first);
  }
  if (self->outside_windows == 0 || (GST_CLOCK_TIME_IS_VALID
          (self->outside_warned) && GST_CLOCK_TIME_IS_VALID (now) &&
          now < self->outside_warned + GST_SATTN_CONTRACT_WARN_INTERVAL))
    return;
  {
    const SattnRowCheck *c = &self->outside_last;
    gchar *why;

    if (c->outside & (SATTN_OUTSIDE_RMS_LOW | SATTN_OUTSIDE_RMS_HIGH))
      why = g_strdup_printf ("its input RMS %.3g is %s the range the model "
          "saw in training, %.3g ... %.3g", c->input_rms,
          (c->outside & SATTN_OUTSIDE_RMS_LOW) ? "below" : "above",
          k->input_rms_lo, k->input_rms_hi);
    else
      why = g_strdup_printf ("its pooled features are %.3g standard "
          "deviations (RMS z) from the training data's mean, beyond the "
          "%.3g seen in training", c->pooled_z, k->pooled_z_max);
    GST_ELEMENT_WARNING (self, STREAM, FORMAT,
        ("%" G_GUINT64_FORMAT " window(s) outside the model's input "
            "contract (%" G_GUINT64_FORMAT " in all): the latest because "
            "%s. The model was not trained on such input: its rows are "
            "flagged in-contract=false and its decisions are 'unknown'",
            self->outside_windows, self->outside_total, why),
        ("at most one such warning per %u s of running time",
            (guint) (GST_SATTN_CONTRACT_WARN_INTERVAL / GST_SECOND)));
    g_free (why);
  }
  self->outside_windows = 0;
  self->outside_warned = GST_CLOCK_TIME_IS_VALID (now) ? now : 0;
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
  if (self->tensor_out) {
    g_assert (out->rows + n_rows <= self->out_info_cap);
    memcpy (self->out_info + out->rows, self->info,
        n_rows * sizeof (SattnRowInfo));
  }
  for (i = 0; i < n_rows && !out->any_valid; i++)
    out->any_valid = self->info[i].valid != 0;
  gst_sattn_out_meta (self, out, n_rows);
  gst_sattn_out_contract (self, n_rows);
  if (self->classes.classes > 0)
    gst_sattn_out_classes (self, out, n_rows);
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
    guint64 before;
    GstClockTime ts = gst_sattn_frame_ts (self, self->frames_since_resync);

    k = gst_sattn_obs_split (&self->obs, self->stream, n);
    k = gst_sattn_swap_step (self, k);
    before = sattn_stream_frames (self->stream);
    dst = dummy;
    room = 0;
    if (need > 0) {
      dst = (float *) out->map.data + out->rows * self->row_floats;
      room = out->cap_rows - out->rows;
    }
    st = sattn_stream_push_checked (self->stream, frames, k, valid, dst,
        room, need > 0 ? self->info : NULL, need > 0 ? self->checks : NULL,
        &n_rows);
    if (st == SATTN_E_NONFINITE)
      return gst_sattn_bad_frame (self, out, before, n_rows);
    if (st != SATTN_OK)
      return gst_sattn_core_error (self, "sattn_stream_push", st);
    g_assert (n_rows <= room);
    gst_sattn_swap_record (self, frames, valid, k);
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
  gst_sattn_swap_record (self, NULL, NULL, n);
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

/* The partial frame carried from one buffer (or GAP) to the next is the
 * element's own, in self->carry, and no input is clipped with
 * gst_audio_buffer_clip: clipping to the segment would drop frames, where
 * every input frame gets its output (in frames mode exactly one) stamped
 * by the frame counter.  A GstAdapter could hold the carried bytes but
 * none of what the carry needs beside them, so it would not make this
 * simpler and keep the semantics:
 * - a GAP event's bytes are in no buffer (data NULL), and its whole
 *   frames are skipped in closed form (gst_sattn_gap_frames): an adapter
 *   would need zero-filled buffers made for the partial frames at its
 *   ends;
 * - a frame is masked when any of its bytes came from a GAP or a
 *   GAP-flagged buffer (carry_invalid), a flag an adapter does not keep
 *   per byte;
 * - whole frames go to the core straight from the mapped input, realigned
 *   through self->scratch when a carry left them off float alignment;
 *   gst_adapter_map would hand out the same misaligned pointer.
 * What an adapter would replace is the copy of less than a frame below. */

/* Complete the carried partial frame with the first bytes of size (data
 * NULL: zeros) and push it once it is whole; *taken: the bytes it took. */
static GstFlowReturn
gst_sattn_carry_complete (GstSattn * self, const guint8 * data, guint64 size,
    gboolean invalid, GstSattnOut * out, gsize * taken)
{
  const gsize take = (gsize) MIN ((guint64) (self->frame_bytes -
          self->carry_len), size);
  GstFlowReturn ret;

  *taken = take;
  if (data)
    memcpy (self->carry + self->carry_len, data, take);
  else
    memset (self->carry + self->carry_len, 0, take);
  self->carry_len += take;
  /* Only bytes taken in mark the frame: a 0-byte GAP buffer adds nothing
   * to it. */
  if (take > 0)
    self->carry_invalid |= invalid;
  if (self->carry_len < self->frame_bytes)
    return GST_FLOW_OK;
  self->carry_len = 0;
  ret = gst_sattn_push_frames (self, (const float *) self->carry, 1,
      self->carry_invalid, out);
  self->carry_invalid = FALSE;
  return ret;
}

/* n whole frames of data (NULL: zeros; invalid: masked). */
static GstFlowReturn
gst_sattn_whole_frames (GstSattn * self, const guint8 * data, guint64 n,
    gboolean invalid, GstSattnOut * out)
{
  const gsize fb = self->frame_bytes;
  GstFlowReturn ret = GST_FLOW_OK;

  if (data == NULL && invalid) {
    /* A GAP's frames: closed form once the window holds only them. */
    return gst_sattn_gap_frames (self, n, out);
  }
  if (data == NULL || ((guintptr) data) % G_ALIGNOF (float) == 0)
    return gst_sattn_push_frames (self, (const float *) data, n, invalid, out);
  /* Frames split across buffers left the data misaligned. */
  while (n > 0 && ret == GST_FLOW_OK) {
    gsize k = (gsize) MIN (n, (guint64) self->chunk);

    memcpy (self->scratch, data, k * fb);
    ret = gst_sattn_push_frames (self, self->scratch, k, invalid, out);
    data += k * fb;
    n -= k;
  }
  return ret;
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
  gst_sattn_swap_poll (self);

  self->bytes_since_resync += size;

  if (self->carry_len > 0) {
    gsize taken;

    ret = gst_sattn_carry_complete (self, data, size, invalid, out, &taken);
    if (data)
      data += taken;
    size -= taken;
    if (ret != GST_FLOW_OK)
      return ret;
  }

  n = size / fb;
  rest = size - n * fb;
  if (n > 0) {
    ret = gst_sattn_whole_frames (self, data, n, invalid, out);
    if (ret != GST_FLOW_OK)
      return ret;
    if (data)
      data += n * fb;
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
  st = sattn_stream_drain_checked (self->stream, (float *) out.map.data,
      out.cap_rows, self->info, self->checks, &n_rows);
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
GstFlowReturn
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
  gst_sattn_swap_reset (self);
  gst_sattn_start_timeline (self, ts);
  return ret;
}

/* The alignment-threshold and discont-wait properties, handed to the
 * discontinuity detector (they may change while PLAYING). */
static GstClockTime
gst_sattn_align_configure (GstSattn * self)
{
  GstClockTime threshold, wait;

  GST_OBJECT_LOCK (self);
  threshold = self->alignment_threshold;
  wait = self->discont_wait;
  GST_OBJECT_UNLOCK (self);
  /* Never under two sample periods: timestamps rounded to the nanosecond
   * put a continuous stream up to one sample off the count, which a
   * threshold of one sample or less (40 ms at 25 Hz or less) would take
   * for a discontinuity at every buffer. */
  threshold = MAX (threshold, gst_util_uint64_scale_int_ceil (2, GST_SECOND,
          self->rate));
  gst_audio_stream_align_set_alignment_threshold (self->align, threshold);
  gst_audio_stream_align_set_discont_wait (self->align, wait);
  return threshold;
}

/* Called before n_samples samples of data that start at ts: starts the
 * timeline, or resyncs on a discontinuity: a DISCONT flag, or what
 * GstAudioStreamAlign detects on the input's own timestamps (as
 * audiobuffersplit does): ts at least alignment-threshold away from where
 * the input's sample count puts it, for discont-wait of stream time.  A
 * resync behind the counter restarts the window but keeps the timeline
 * going from the counter (gst_sattn_resync); the detector then follows
 * the input's timestamps, so an input that stays late resyncs once. */
static GstFlowReturn
gst_sattn_check_discont (GstSattn * self, GstClockTime ts, gboolean discont,
    guint64 n_samples)
{
  GstClockTime ats, out_ts, out_dur;
  GstFlowReturn ret;
  guint64 pos;
  gboolean jump;

  gst_sattn_align_configure (self);
  if (!GST_CLOCK_TIME_IS_VALID (self->resync_ts)) {
    gst_sattn_start_timeline (self, ts);
    gst_sattn_align_restart (self, self->resync_ts, n_samples);
    return GST_FLOW_OK;
  }
  if (discont) {
    GST_DEBUG_OBJECT (self, "discontinuity flagged, resyncing at %"
        GST_TIME_FORMAT, GST_TIME_ARGS (ts));
    ret = gst_sattn_resync (self, ts);
    gst_sattn_align_restart (self, GST_CLOCK_TIME_IS_VALID (ts) ? ts :
        self->resync_ts, n_samples);
    return ret;
  }
  /* Untimestamped data continues where the detector expects it. */
  ats = GST_CLOCK_TIME_IS_VALID (ts) ? ts : gst_sattn_align_next (self);
  if (!GST_CLOCK_TIME_IS_VALID (ats))
    ats = gst_sattn_expected_ts (self);
  jump = gst_audio_stream_align_process (self->align, FALSE, ats,
      (guint) MIN (n_samples, G_MAXUINT), &out_ts, &out_dur, &pos);
  GST_LOG_OBJECT (self, "input %" GST_TIME_FORMAT " + %" G_GUINT64_FORMAT
      " samples: jump %d (at %" GST_TIME_FORMAT " + %" GST_TIME_FORMAT ")",
      GST_TIME_ARGS (ats), n_samples, jump, GST_TIME_ARGS (out_ts),
      GST_TIME_ARGS (out_dur));
  /* At the end of the clock's range the counter saturates: data stamped
   * there continues the timeline, whatever the sample count says. */
  if (jump && ts == GST_SATTN_TS_END &&
      gst_sattn_expected_ts (self) == GST_SATTN_TS_END)
    jump = FALSE;
  if (jump && GST_CLOCK_TIME_IS_VALID (ts)) {
    GST_DEBUG_OBJECT (self, "timestamp %" GST_TIME_FORMAT " off the input's "
        "sample count (the output timeline expects %" GST_TIME_FORMAT
        "), resyncing", GST_TIME_ARGS (ts),
        GST_TIME_ARGS (gst_sattn_expected_ts (self)));
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

GstFlowReturn
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
      GST_BUFFER_IS_DISCONT (buffer), gst_buffer_get_size (buffer) / self->bpf);
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
 * ahead of the counter by alignment-threshold or more resyncs there at
 * once (a GAP states its time: no discont-wait); one that starts behind
 * the counter never resyncs and adds only what lies after the counter
 * (nothing when it ends before).  Its end saturates at the end of the
 * clock's range.  The discontinuity detector then expects data where the
 * counter is. */
static GstFlowReturn
gst_sattn_handle_gap (GstSattn * self, GstEvent * event)
{
  GstSattnOut out = { 0, };
  GstClockTime ts, dur, end, expected, threshold;
  GstFlowReturn ret, ret2;
  guint64 bytes, samples, have;

  gst_event_parse_gap (event, &ts, &dur);
  if (!GST_CLOCK_TIME_IS_VALID (dur)) {
    GST_DEBUG_OBJECT (self, "gap without a duration, ignored");
    return GST_FLOW_OK;
  }
  expected = gst_sattn_expected_ts (self);
  threshold = gst_sattn_align_configure (self);
  if (!GST_CLOCK_TIME_IS_VALID (expected)) {
    gst_sattn_start_timeline (self, ts);
    gst_sattn_align_restart (self, self->resync_ts, 0);
  } else if (GST_CLOCK_TIME_IS_VALID (ts) && ts >= expected &&
      ts - expected >= threshold) {
    GST_DEBUG_OBJECT (self, "gap at %" GST_TIME_FORMAT ", %" GST_TIME_FORMAT
        " after the expected %" GST_TIME_FORMAT ", resyncing",
        GST_TIME_ARGS (ts), GST_TIME_ARGS (ts - expected),
        GST_TIME_ARGS (expected));
    ret = gst_sattn_resync (self, ts);
    gst_sattn_align_restart (self, self->resync_ts, 0);
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
  gst_sattn_align_restart (self, gst_sattn_expected_ts (self), 0);
  return ret != GST_FLOW_OK ? ret : ret2;
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

void
gst_sattn_flush (GstSattn * self)
{
  if (self->stream)
    sattn_stream_reset (self->stream);
  gst_sattn_swap_reset (self);
  gst_sattn_obs_reset (&self->obs, self->stream);
  gst_sattn_classes_reset (&self->classes);
  self->carry_len = 0;
  self->carry_invalid = FALSE;
  self->resync_ts = GST_CLOCK_TIME_NONE;
  self->bytes_since_resync = 0;
  self->frames_since_resync = 0;
  self->out_offset = 0;
  self->discont_pending = TRUE;
}

gboolean
gst_sattn_feed_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstSattn *self = GST_SATTN (parent);
  gboolean res;

  GST_LOG_OBJECT (self, "event %" GST_PTR_FORMAT, event);

  switch (GST_EVENT_TYPE (event)) {
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
        gst_sattn_swap_reset (self);
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
