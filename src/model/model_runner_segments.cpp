// ModelRunner's layer-segmented prefill (docs/layer-segmented-prefill.md): a long prompt runs
// layer by layer, each layer over the same segments chunked prefill would cut, with the prompt's
// residual stream kept in an arena between units. Unit (layer l, segment s) issues exactly the ops
// that segment's chunk issues in layer l under chunked prefill run alone, on the same rows, so the
// K/V it writes and the last token's logits are bitwise the same; only the order of the units
// differs (layer-major instead of chunk-major), which no unit can observe: unit (l, s) reads the
// K/V of layer l for segments <= s, all written by earlier units.
#include <algorithm>

#include "model/model_runner.h"

namespace ls {

Status ModelRunner::validate_segments(const LayerSegmentInput& in) const {
  if (config_.layer_segment_rows <= 0) {
    return failed_precondition("layer-segmented prefill is off in this runner");
  }
  if (in.num_tokens <= 0 || in.num_tokens > config_.layer_segment_rows) {
    return invalid_argument("a layer-segmented prefill of {} tokens; the runner holds 1..{}",
                            in.num_tokens, config_.layer_segment_rows);
  }
  if (in.segment_tokens <= 0 || in.segment_tokens > config_.max_step_tokens) {
    return invalid_argument("segment of {} tokens; the runner takes 1..{}", in.segment_tokens,
                            config_.max_step_tokens);
  }
  if (in.slot < 0 || in.slot >= kv_.max_seqs()) {
    return internal_error("layer-segmented prefill on KV row {}", in.slot);
  }
  const SequenceKv& kv = kv_.sequence(in.slot);
  if (!kv.active || !kv.prefilling || kv.num_tokens < in.num_tokens) {
    return internal_error("layer-segmented prefill of {} tokens on KV row {} ({}, {} reserved)",
                          in.num_tokens, in.slot, kv.active ? "prefilling" : "inactive",
                          kv.num_tokens);
  }
  const int32_t num_units = in.num_segments() * static_cast<int32_t>(model_.config().num_hidden_layers());
  if (in.unit_begin < 0 || in.unit_end <= in.unit_begin || in.unit_end > num_units) {
    return internal_error("units [{}, {}) of a {}-unit prefill", in.unit_begin, in.unit_end,
                          num_units);
  }
  if (in.unit_begin > 0) {
    const SegmentProgress& p = segment_progress_;
    if (p.slot != in.slot || p.num_tokens != in.num_tokens ||
        p.segment_tokens != in.segment_tokens || p.next_unit != in.unit_begin) {
      return internal_error(
          "layer-segmented prefill of row {} continues at unit {}, but the arena holds row {} at "
          "unit {}",
          in.slot, in.unit_begin, p.slot, p.next_unit);
    }
  }
  if (in.unit_begin < in.num_segments()) {  // layer-0 units embed the tokens
    if (static_cast<int32_t>(in.tokens.size()) != in.num_tokens) {
      return internal_error("layer-0 units need the {} tokens, got {}", in.num_tokens,
                            in.tokens.size());
    }
    const int32_t vocab = vocab_size();  // the whole vocabulary (a rank may hold a slice)
    for (int32_t id : in.tokens) {
      if (id < 0 || id >= vocab) {
        return invalid_argument("token id {} is outside the vocabulary [0, {})", id, vocab);
      }
    }
  }
  return {};
}

Status ModelRunner::forward_layer_segments(const LayerSegmentInput& in,
                                           std::vector<float>& logits) {
  backend_.bind_thread();  // as forward(): scratch lands on this backend's device
  logits.clear();
  LS_RETURN_IF_ERROR(validate_segments(in));
  SegmentProgress& progress = segment_progress_;
  if (in.unit_begin == 0) {
    progress = {in.slot, in.num_tokens, in.segment_tokens, 0};
    // A sequence starts in this row: its coarse summaries (two levels) begin empty, as
    // forward() does for a chunked prefill's first chunk.
    if (pool_.summaries().group_pages > 0) {
      pool_.reset_coarse_row(backend_, in.slot);
      coarse_admission_.resize(static_cast<size_t>(kv_.max_seqs()), 0);
      coarse_admission_[static_cast<size_t>(in.slot)] = kv_.sequence(in.slot).admission;
    }
  }
  if (pool_.tiered()) {
    // As sync_tier() does for a chunked prefill's first chunk: a row that starts over may hold a
    // previous sequence's pages. Later units keep the row's pages (the layer being built).
    release_finished_rows();
    const auto row = static_cast<size_t>(in.slot);
    if (in.unit_begin == 0 && row_dirty_[row]) pool_.tier().reset_row(backend_, in.slot);
    row_dirty_[row] = true;
  }
  const int32_t num_segments = in.num_segments();
  const int32_t num_units = num_segments * static_cast<int32_t>(model_.config().num_hidden_layers());
  StepInput& step = unit_step_;
  StepAttentionPlan plan;
  for (int32_t u = in.unit_begin; u < in.unit_end; ++u) {
    const int32_t layer = u / num_segments;
    const int32_t begin = (u % num_segments) * in.segment_tokens;
    const int32_t len = std::min(in.segment_tokens, in.num_tokens - begin);
    // The unit as the one-sequence step its chunk would be: same positions, kv_len, tables.
    step.tokens.assign(static_cast<size_t>(len), 0);
    if (layer == 0) {
      std::copy_n(in.tokens.begin() + begin, len, step.tokens.begin());
    }
    step.seqs.assign(1, StepSequence{in.slot, len, begin + len, true});
    step.logit_rows.clear();
    if (u + 1 == num_units) step.logit_rows.push_back(len - 1);
    num_logit_rows_ = static_cast<int32_t>(step.logit_rows.size());
    policy_.plan_step(step.seqs, plan);  // a prefilling sequence: no selection, no state
    upload_metadata(step, plan, false);
    enqueue_unit(layer, begin, len, plan.any_select);
  }
  progress.next_unit = in.unit_end;
  if (in.unit_end == num_units) progress = {};  // the arena is free for the next prompt

  Status st;
  if (pool_.tiered()) st = pool_.tier().finish_step(backend_, tier_counters_);
  if (st.ok() && num_logit_rows_ > 0) {
    read_logits(1, logits);
  }
  backend_.synchronize();
  if (st.ok()) st = take_step_error();
  if (!st.ok()) {
    progress = {};  // the engine fails the sequence; a retry starts from unit 0
    logits.clear();
  }
  return st;
}

void ModelRunner::enqueue_unit(int32_t layer, int32_t begin, int32_t len, bool any_select) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const DType act = backend_.act_dtype();
  const auto hidden = c.hidden_size();
  const auto eps = static_cast<float>(c.rms_norm_eps());
  auto* rows = static_cast<uint8_t*>(segment_x_.data()) + dtype_nbytes(act, int64_t{begin} * hidden);
  TensorView x(rows, act, {len, hidden}, backend_.device());
  TensorView xn = xn_.view(act, {len, hidden});
  TensorView delta = delta_.view(act, {len, hidden});
  const LayerWeights& lw = w.layers[static_cast<size_t>(layer)];
  if (layer == 0) {
    auto* meta = static_cast<uint8_t*>(meta_.data());
    TensorView tokens(meta + layout_.tokens, DType::kI32, {len}, backend_.device());
    enqueue_embedding(tokens, x);
  }
  // Chunked prefill fuses the previous layer's residual add with this norm (add_rmsnorm); both
  // backends' fused op norms the sum exactly as stored, so add_inplace (end of the previous
  // unit) followed by rmsnorm gives the same bits.
  backend_.rmsnorm(x, lw.input_norm, eps, xn);
  run_layer(layer, x, len, 1, any_select);
  backend_.add_inplace(x, delta);
  enqueue_logits(x);
}

}  // namespace ls
