#pragma once
// ModelRunner: runs one engine step of a Model over a batch that mixes prefill chunks and decode
// tokens, on the paged two-way KV cache, under an attention policy. It owns the step's device
// buffers (activations sized for the largest step, and one metadata block uploaded per step),
// and is the only place where host-side plans (block tables, the policy's step plan) become
// device pointers.

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "attention/attention_policy.h"
#include "backend/backend.h"
#include "backend/communicator.h"
#include "core/status.h"
#include "kv/kv_manager.h"
#include "kv/kv_pool.h"
#include "model/model.h"
#include "model/shared_prefix_step.h"
#include "model/step_executor.h"

namespace ls {

struct RunnerConfig {
  int32_t max_step_tokens = 2048;  // tokens per step (prefill chunk + decode tokens)
  int32_t max_seqs = 16;           // sequences per step
  int32_t max_logit_rows = 2048;   // rows of logits per step
  int32_t max_model_len = 4096;    // longest sequence (sizes the block-table rows)
  // Decode steps (one token per sequence) are recorded once per shape and replayed (CUDA
  // graphs) on backends that can record; see forward().
  bool record_decode_steps = true;
  // Host KV tier: false stops kv_append's write-through to the homes (KvAppendParams::
  // write_homes). Benchmarks only: it measures what saving costs and makes later fetches wrong.
  // Quantized page formats (--kv-cache-dtype fp8|int8|int4) always write the homes.
  bool kv_save = true;
  // Layer-segmented prefill (docs/layer-segmented-prefill.md): rows of the hidden-state arena
  // ([rows, hidden] act dtype, one prompt at a time); 0 turns the mode off.
  int32_t layer_segment_rows = 0;
  // Shared-prefix decode attention (docs/shared-prefix-attention.md, model/shared_prefix_step.h):
  // decode steps whose sequences share prefix blocks attend the shared part once per group.
  bool shared_prefix_attention = true;
};

class ModelRunner final : public StepExecutor {
 public:
  static Result<std::unique_ptr<ModelRunner>> create(const Model& model, const KvManager& kv,
                                                     const KvPool& pool, AttentionPolicy& policy,
                                                     const RunnerConfig& config);

  // Runs the step; `logits` becomes [logit_rows.size(), vocab] f32 (host).
  Status forward(const StepInput& step, std::vector<float>& logits) override;
  // The whole vocabulary (a vocabulary-parallel rank holds a slice and gathers the rest).
  int32_t vocab_size() const override {
    return static_cast<int32_t>(model_.config().full_vocab_size());
  }
  // Runs a share of a layer-segmented prefill (step_input.h, LayerSegmentInput): each unit is one
  // layer over one segment, the same ops as that segment's chunk in that layer under chunked
  // prefill, with the segment's rows of the hidden-state arena as the residual stream.
  Status forward_layer_segments(const LayerSegmentInput& in, std::vector<float>& logits) override;
  int32_t num_layers() const override {
    return config_.layer_segment_rows > 0 ? static_cast<int32_t>(model_.config().num_hidden_layers())
                                          : 0;
  }
  int32_t max_layer_segment_tokens() const override { return config_.layer_segment_rows; }
  int64_t layer_segment_arena_bytes() const override {
    return config_.layer_segment_rows > 0 ? segment_x_.bytes() : 0;
  }
  const RunnerConfig& config() const { return config_; }
  // Steps that ran by replaying a recording (see forward()).
  int64_t replayed_steps() const { return replayed_steps_; }
  // Decode steps and layers that ran shared-prefix attention.
  const SharedPrefixStats& shared_prefix_stats() const { return shared_prefix_.stats(); }
  int64_t shared_prefix_steps() const override { return shared_prefix_.stats().steps; }
  int64_t shared_prefix_tokens() const override { return shared_prefix_.stats().prefix_tokens; }
  // Benchmarks: the same stack with shared-prefix attention off, then on again (A/B on one
  // cache); on only if the runner was made with it.
  void set_shared_prefix_attention(bool on) { shared_prefix_.set_enabled(on); }
  // Hierarchical KV tier: empties the device-cache partition of every row whose sequence has
  // ended since it last ran (forward() does this first; tests call it to check the pools).
  void release_finished_rows();
  // Tensor parallelism (docs/tensor-parallel.md): the partial outputs of o_proj and down_proj
  // (and of a vocabulary slice's embedding) are summed over the ranks through `comm`, and the
  // ranks' logit slices gathered (owned by the caller; null: one rank). With a vocabulary slice,
  // only rank 0's forward() returns logits (the whole rows); the other ranks' are empty.
  void set_communicator(Communicator* comm) { comm_ = comm; }
  // Drops the recorded decode steps (the backend's recordings; later decode steps record again),
  // binding this thread to the backend's device. A tensor-parallel group that was aborted can be
  // torn down only once no recording holds its collectives (docs/tensor-parallel.md).
  void drop_recordings();
  KvTierStats kv_tier_stats() const override;
  Status set_device_budgets(const std::vector<int32_t>& slots) override;

 private:
  ModelRunner(const Model& model, const KvManager& kv, const KvPool& pool,
              AttentionPolicy& policy, const RunnerConfig& config);
  Status allocate();
  Status validate(const StepInput& step) const;
  // Packs the step's host arrays into `staging_` and uploads them in one copy. `fixed_shape`
  // rounds the block-table stride up to a power of two, so recorded steps repeat.
  void upload_metadata(const StepInput& step, const StepAttentionPlan& plan, bool fixed_shape);
  // Enqueues the whole step on the device, up to the f32 logits in logits_f32_ (logits_ when
  // the act dtype is f32).
  void enqueue_step(int32_t num_tokens, int32_t num_seqs, bool any_select);
  // enqueue_step through a recording: the first step of a shape runs plainly (sizing scratch),
  // the second is recorded, later ones replay it.
  Status enqueue_recorded(int32_t num_tokens, int32_t num_seqs, bool any_select);
  // One layer over the step's rows: x [num_tokens, hidden] is the residual stream (x_ for a
  // step, a segment of the arena for a layer-segmented unit), xn_ holds rmsnorm(x) on entry;
  // the MLP's output is left in delta_.
  void run_layer(int32_t layer, const TensorView& x, int32_t num_tokens, int32_t num_seqs,
                 bool any_select);
  // Sums a row-parallel projection's partial output over the ranks (no-op without a
  // communicator); a failure is kept for take_step_error() and aborts the group.
  void reduce_partial(const TensorView& partial);
  // The step's first failure: the communicator's, else the backend's.
  Status take_step_error();
  // Final norm and lm_head over the num_logit_rows_ rows of x that layout_.logit_rows lists;
  // a vocabulary slice's logits are all-gathered from every rank.
  void enqueue_logits(const TensorView& x);
  // x [T, hidden] = the tokens' embeddings (a vocabulary slice: its rows, summed over the ranks).
  void enqueue_embedding(const TensorView& tokens, const TensorView& x);
  // Copies the step's `rows` rows of f32 logits to the host as [rows, vocab] (a vocabulary
  // slice: reassembled from the gathered [ranks, rows, slice] rows, past-vocabulary padding
  // dropped). Synchronizes when it reorders.
  void read_logits(int32_t rows, std::vector<float>& logits);
  // One layer-segmented unit: `layer` over the arena rows [begin, begin + len).
  void enqueue_unit(int32_t layer, int32_t begin, int32_t len, bool any_select);
  Status validate_segments(const LayerSegmentInput& in) const;
  // Tier: resets the partitions of ended rows and of rows a new sequence starts in this step.
  // Two-level summaries: starts the coarse row of each sequence new in its row (after
  // upload_metadata: a prefix-cache hit's pages are folded in through the step's block table).
  void start_coarse_rows(const StepInput& step);
  void sync_tier(const StepInput& step);

  const Model& model_;
  const KvManager& kv_;
  const KvPool& pool_;
  AttentionPolicy& policy_;
  RunnerConfig config_;
  Backend& backend_;
  Communicator* comm_ = nullptr;
  Status comm_status_;

  // Activations, act dtype, sized for max_step_tokens rows.
  Buffer x_;        // [T, hidden] residual stream
  Buffer xn_;       // [T, hidden] normed input of the next sublayer
  Buffer delta_;    // [T, hidden] a sublayer's output, added to x
  Buffer qkv_;      // [T, (num_heads + 2 * num_kv_heads) * head_dim] fused projection
  Buffer q_;        // [T, num_heads, head_dim]
  Buffer k_;        // [T, num_kv_heads, head_dim]
  Buffer v_;        // [T, num_kv_heads, head_dim]
  Buffer attn_;     // [T, num_heads, head_dim]
  Buffer gate_up_;  // [T, 2 * intermediate]
  Buffer mlp_;      // [T, intermediate]
  Buffer rows_;     // [R, hidden] rows whose logits are wanted
  Buffer logits_;   // [R, vocab] act dtype (a vocabulary slice: [R, slice])
  // Vocabulary-parallel: [ranks, R, slice] act dtype, every rank's logit slices.
  Buffer gathered_;
  // [R, vocab] f32 (device), when act dtype is not f32 (vocabulary-parallel: [ranks, R, slice])
  Buffer logits_f32_;
  std::vector<float> gathered_host_;  // [ranks, R, slice] f32: rank 0's reorder scratch

  // Step metadata: one device block, filled from a host staging copy each step.
  Buffer meta_;
  std::vector<uint8_t> staging_;
  std::vector<int32_t> positions_;  // [T] scratch for the RoPE table, kept across steps
  std::vector<int32_t> seq_lens_;   // [T]
  struct MetaLayout {
    int64_t tokens = 0, q_indptr = 0, kv_lens = 0, ring_pages = 0, local_tokens = 0,
            selected_rows = 0, select_rows = 0, cache_rows = 0, retrieval_blocks = 0, streaming_blocks = 0,
            logit_rows = 0, cos = 0, sin = 0, end = 0;
  } layout_;
  // Byte offsets of every metadata array for a step of this size; allocate() sizes the buffers
  // with the largest step, upload_metadata() lays out each step, from the same function.
  MetaLayout layout_for(int64_t num_tokens, int64_t num_seqs, int64_t num_rows,
                        int32_t retrieval_stride, int32_t streaming_stride) const;
  int32_t retrieval_stride_ = 0;  // columns of this step's retrieval table rows
  int32_t max_retrieval_stride_ = 1;  // columns the metadata block was sized for
  int32_t streaming_stride_ = 0;
  int32_t num_logit_rows_ = 0;

  // Recorded decode steps by shape: (sequences, logit rows, table stride, any_select, the
  // shared-prefix plan's shape) -> graph id, or kSeen (ran once plainly, record next time) /
  // kPlain (could not be recorded).
  static constexpr int32_t kSeen = -1, kPlain = -2;
  using StepShape = std::tuple<int32_t, int32_t, int32_t, bool, int64_t>;
  std::map<StepShape, int32_t> recorded_;
  int64_t recorded_epoch_ = 0;
  int64_t replayed_steps_ = 0;
  KvTierCounters tier_counters_;  // as of the last step's end
  std::vector<bool> row_dirty_;  // [kv max_seqs] the row's cache partition may hold pages
  std::vector<int64_t> row_admission_;  // [kv max_seqs] SequenceKv::admission it last held
  // [kv max_seqs] the SequenceKv::admission each coarse summary row was started for
  std::vector<int64_t> coarse_admission_;
  SharedPrefixStep shared_prefix_;  // this decode step's shared-prefix plan, if any

  // Layer-segmented prefill: the prompt's residual stream between units, and whose it is.
  Buffer segment_x_;  // [layer_segment_rows, hidden] act dtype
  struct SegmentProgress {
    int32_t slot = -1;  // -1: the arena holds nobody's prefill
    int32_t num_tokens = 0, segment_tokens = 0, next_unit = 0;
  } segment_progress_;
  StepInput unit_step_;  // scratch: one unit as a one-sequence step (its metadata)
};

}  // namespace ls
