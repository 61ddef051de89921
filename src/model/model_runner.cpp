#include "model/model_runner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/log.h"

namespace ls {

namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

ModelRunner::ModelRunner(const Model& model, const KvManager& kv, const KvPool& pool,
                         AttentionPolicy& policy, const RunnerConfig& config)
    : model_(model), kv_(kv), pool_(pool), policy_(policy), config_(config),
      backend_(model.backend()) {}

Result<std::unique_ptr<ModelRunner>> ModelRunner::create(const Model& model, const KvManager& kv,
                                                         const KvPool& pool,
                                                         AttentionPolicy& policy,
                                                         const RunnerConfig& config) {
  if (config.max_step_tokens <= 0 || config.max_seqs <= 0 || config.max_logit_rows <= 0) {
    return invalid_argument("runner limits must be positive");
  }
  std::unique_ptr<ModelRunner> r(new ModelRunner(model, kv, pool, policy, config));
  LS_RETURN_IF_ERROR(r->allocate());
  return r;
}

Status ModelRunner::allocate() {
  const ModelConfig& c = model_.config();
  const DType act = backend_.act_dtype();
  const int64_t t = config_.max_step_tokens;
  const int64_t r = config_.max_logit_rows;
  auto alloc = [&](Buffer& b, int64_t elems, DType dt) -> Status {
    LS_ASSIGN_OR_RETURN(b, backend_.allocate(std::max<int64_t>(kAlign, dtype_nbytes(dt, elems))));
    return {};
  };
  LS_RETURN_IF_ERROR(alloc(x_, t * c.hidden_size(), act));
  LS_RETURN_IF_ERROR(alloc(xn_, t * c.hidden_size(), act));
  LS_RETURN_IF_ERROR(alloc(delta_, t * c.hidden_size(), act));
  LS_RETURN_IF_ERROR(alloc(
      qkv_, t * (c.num_attention_heads() + 2 * c.num_key_value_heads()) * c.head_dim(), act));
  LS_RETURN_IF_ERROR(alloc(q_, t * c.num_attention_heads() * c.head_dim(), act));
  LS_RETURN_IF_ERROR(alloc(k_, t * c.num_key_value_heads() * c.head_dim(), act));
  LS_RETURN_IF_ERROR(alloc(v_, t * c.num_key_value_heads() * c.head_dim(), act));
  LS_RETURN_IF_ERROR(alloc(attn_, t * c.num_attention_heads() * c.head_dim(), act));
  LS_RETURN_IF_ERROR(alloc(gate_up_, t * 2 * c.intermediate_size(), act));
  LS_RETURN_IF_ERROR(alloc(mlp_, t * c.intermediate_size(), act));
  LS_RETURN_IF_ERROR(alloc(rows_, r * c.hidden_size(), act));
  LS_RETURN_IF_ERROR(alloc(logits_, r * c.vocab_size(), act));
  const int64_t parts = c.vocab_slice().parts;  // > 1: every rank's slices are gathered
  if (parts > 1) LS_RETURN_IF_ERROR(alloc(gathered_, parts * r * c.vocab_size(), act));
  if (act != DType::kF32) {
    LS_RETURN_IF_ERROR(alloc(logits_f32_, parts * r * c.vocab_size(), DType::kF32));
  }
  if (config_.layer_segment_rows > 0) {
    LS_RETURN_IF_ERROR(alloc(segment_x_, int64_t{config_.layer_segment_rows} * c.hidden_size(), act));
  }

  const KvGeometry& g = kv_.geometry();
  const auto retrieval_cols =
      static_cast<int32_t>((config_.max_model_len + g.page_tokens - 1) / g.page_tokens);
  max_retrieval_stride_ = std::max(1, retrieval_cols);
  const int64_t meta_bytes =
      layout_for(t, config_.max_seqs, r, max_retrieval_stride_,
                 std::max(1, g.streaming_table_stride()))
          .end;
  LS_ASSIGN_OR_RETURN(meta_, backend_.allocate(meta_bytes));
  staging_.resize(static_cast<size_t>(meta_bytes));

  SharedPrefixStepConfig sp;
  sp.enabled = config_.shared_prefix_attention;
  sp.max_seqs = config_.max_seqs;
  sp.max_model_len = config_.max_model_len;
  sp.num_q_heads = static_cast<int32_t>(c.num_attention_heads());
  sp.num_kv_heads = static_cast<int32_t>(c.num_key_value_heads());
  LS_ASSIGN_OR_RETURN(shared_prefix_, SharedPrefixStep::create(backend_, g,
                                                               policy_.decode_pages_per_head() == 0,
                                                               sp));
  return {};
}

Status ModelRunner::validate(const StepInput& step) const {
  const auto num_tokens = static_cast<int64_t>(step.tokens.size());
  if (num_tokens == 0 || num_tokens > config_.max_step_tokens) {
    return invalid_argument("step has {} tokens; the runner takes 1..{}", num_tokens,
                            config_.max_step_tokens);
  }
  if (step.seqs.empty() || static_cast<int32_t>(step.seqs.size()) > config_.max_seqs) {
    return invalid_argument("step has {} sequences; the runner takes 1..{}", step.seqs.size(),
                            config_.max_seqs);
  }
  if (static_cast<int32_t>(step.logit_rows.size()) > config_.max_logit_rows) {
    return invalid_argument("step asks for {} logit rows; the runner takes at most {}",
                            step.logit_rows.size(), config_.max_logit_rows);
  }
  int64_t sum = 0;
  for (const StepSequence& s : step.seqs) {
    // A slot outside the manager would read past its sequences (undefined, a crash at times).
    if (s.slot < 0 || s.slot >= kv_.max_seqs()) {
      return internal_error("step sequence slot {} is outside [0, {})", s.slot, kv_.max_seqs());
    }
    const SequenceKv& kv = kv_.sequence(s.slot);
    if (!kv.active || s.q_len <= 0 || s.kv_len < s.q_len || s.kv_len > kv.num_tokens ||
        s.kv_len > config_.max_model_len) {
      return internal_error("inconsistent step sequence (slot {}, q_len {}, kv_len {}, reserved {})",
                            s.slot, s.q_len, s.kv_len, kv.num_tokens);
    }
    sum += s.q_len;
  }
  if (sum != num_tokens) return internal_error("sequence lengths do not add up to the tokens");
  const int32_t vocab = vocab_size();
  for (int32_t id : step.tokens) {
    if (id < 0 || id >= vocab) return invalid_argument("token id {} is outside the vocabulary [0, {})", id, vocab);
  }
  for (int32_t row : step.logit_rows) {
    if (row < 0 || row >= num_tokens) return internal_error("logit row {} out of range", row);
  }
  return {};
}

ModelRunner::MetaLayout ModelRunner::layout_for(int64_t num_tokens, int64_t num_seqs,
                                                int64_t num_rows, int32_t retrieval_stride,
                                                int32_t streaming_stride) const {
  const int64_t half = model_.rope().rotary_dim() / 2;
  MetaLayout L;
  int64_t off = 0;
  auto place = [&](int64_t& field, int64_t bytes) {
    field = off;
    off = align_up(off + bytes);
  };
  place(L.tokens, num_tokens * 4);
  place(L.q_indptr, (num_seqs + 1) * 4);
  place(L.kv_lens, num_seqs * 4);
  place(L.ring_pages, num_seqs * 4);
  place(L.local_tokens, num_seqs * 4);
  place(L.selected_rows, num_seqs * 4);
  place(L.select_rows, num_seqs * 4);
  place(L.cache_rows, num_seqs * 4);
  place(L.retrieval_blocks, num_seqs * retrieval_stride * 4);
  place(L.streaming_blocks, num_seqs * streaming_stride * 4);
  place(L.logit_rows, std::max<int64_t>(1, num_rows) * 4);
  place(L.cos, num_tokens * half * 4);
  place(L.sin, num_tokens * half * 4);
  L.end = off;
  return L;
}

void ModelRunner::upload_metadata(const StepInput& step, const StepAttentionPlan& plan,
                                  bool fixed_shape) {
  const auto num_tokens = static_cast<int64_t>(step.tokens.size());
  const auto num_seqs = static_cast<int64_t>(step.seqs.size());
  const auto num_rows = static_cast<int64_t>(step.logit_rows.size());

  retrieval_stride_ = 1;
  for (const StepSequence& s : step.seqs) {
    retrieval_stride_ = std::max<int32_t>(
        retrieval_stride_, static_cast<int32_t>(kv_.sequence(s.slot).retrieval.size()));
  }
  if (fixed_shape) {
    retrieval_stride_ = std::min(max_retrieval_stride_,
                                 static_cast<int32_t>(std::bit_ceil(
                                     static_cast<uint32_t>(std::max(16, retrieval_stride_)))));
  }
  streaming_stride_ = std::max(1, kv_.geometry().streaming_table_stride());

  layout_ = layout_for(num_tokens, num_seqs, num_rows, retrieval_stride_, streaming_stride_);
  const MetaLayout& L = layout_;

  uint8_t* base = staging_.data();
  auto at = [&](int64_t field) { return reinterpret_cast<int32_t*>(base + field); };
  std::memcpy(at(L.tokens), step.tokens.data(), static_cast<size_t>(num_tokens) * 4);
  std::vector<int32_t>& positions = positions_;
  std::vector<int32_t>& seq_lens = seq_lens_;
  positions.resize(static_cast<size_t>(num_tokens));  // no allocation once a step was this large
  seq_lens.resize(static_cast<size_t>(num_tokens));
  int32_t* indptr = at(L.q_indptr);
  indptr[0] = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const StepSequence& seq = step.seqs[static_cast<size_t>(s)];
    const SequenceKv& kv = kv_.sequence(seq.slot);
    indptr[s + 1] = indptr[s] + seq.q_len;
    at(L.kv_lens)[s] = seq.kv_len;
    at(L.ring_pages)[s] = std::max(1, kv.ring_pages);
    at(L.local_tokens)[s] = plan.local_tokens[static_cast<size_t>(s)];
    at(L.selected_rows)[s] = plan.selected_rows[static_cast<size_t>(s)];
    at(L.select_rows)[s] = plan.select_rows[static_cast<size_t>(s)];
    at(L.cache_rows)[s] = seq.slot;
    int32_t* rrow = at(L.retrieval_blocks) + s * retrieval_stride_;
    std::fill(rrow, rrow + retrieval_stride_, -1);
    std::copy(kv.retrieval.begin(), kv.retrieval.end(), rrow);
    int32_t* srow = at(L.streaming_blocks) + s * streaming_stride_;
    std::fill(srow, srow + streaming_stride_, -1);
    std::copy(kv.streaming.begin(), kv.streaming.end(), srow);
    for (int32_t i = 0; i < seq.q_len; ++i) {
      positions[static_cast<size_t>(indptr[s] + i)] = seq.kv_len - seq.q_len + i;
      seq_lens[static_cast<size_t>(indptr[s] + i)] = seq.kv_len;
    }
  }
  if (num_rows > 0) {
    std::memcpy(at(L.logit_rows), step.logit_rows.data(), static_cast<size_t>(num_rows) * 4);
  }
  model_.rope().fill(positions, seq_lens, reinterpret_cast<float*>(base + L.cos),
                     reinterpret_cast<float*>(base + L.sin));
  backend_.copy_bytes(meta_.data(), staging_.data(), L.end);
}

Status ModelRunner::forward(const StepInput& step, std::vector<float>& logits) {
  // The calling thread may have another device current (several stacks in one process, e.g.
  // tensor parallelism): lazily grown scratch must land on this backend's device.
  backend_.bind_thread();
  LS_RETURN_IF_ERROR(validate(step));
  const auto num_tokens = static_cast<int32_t>(step.tokens.size());
  const auto num_seqs = static_cast<int32_t>(step.seqs.size());
  num_logit_rows_ = static_cast<int32_t>(step.logit_rows.size());

  if (pool_.tiered()) sync_tier(step);
  StepAttentionPlan plan;
  policy_.plan_step(step.seqs, plan);
  // A decode step (one token per sequence) has the same ops and pointers every time for a given
  // shape: record it once and replay it (no per-op launch cost). Prefill chunks vary too much.
  const bool record =
      config_.record_decode_steps && num_tokens == num_seqs && backend_.can_record();
  upload_metadata(step, plan, record);
  if (pool_.summaries().group_pages > 0) start_coarse_rows(step);
  shared_prefix_.plan_step(backend_, step, kv_, plan, pool_.tiered());
  Status enqueued;
  if (record) {
    enqueued = enqueue_recorded(num_tokens, num_seqs, plan.any_select);
  } else {
    enqueue_step(num_tokens, num_seqs, plan.any_select);
  }
  shared_prefix_.clear();
  LS_RETURN_IF_ERROR(enqueued);

  logits.clear();
  if (pool_.tiered()) LS_RETURN_IF_ERROR(pool_.tier().finish_step(backend_, tier_counters_));
  if (num_logit_rows_ == 0) {
    backend_.synchronize();
    return take_step_error();
  }
  read_logits(num_logit_rows_, logits);
  backend_.synchronize();
  // Non-finite rows are the caller's to judge per sequence (one bad row must not fail a batch).
  return take_step_error();
}

KvTierStats ModelRunner::kv_tier_stats() const {
  KvTierStats s;
  s.host_pinned_bytes = backend_.host_memory_stats().pinned_bytes;
  if (!pool_.tiered()) return s;
  const KvCacheTier& t = pool_.tier();
  s.enabled = true;
  s.host_bytes = pool_.host_bytes();
  s.device_cache_bytes = int64_t{t.config().num_cache_slots()} * 2 * t.page_bytes();
  s.hits = tier_counters_.hits;
  s.misses = tier_counters_.misses;
  s.bytes_retrieved = tier_counters_.misses * 2 * t.page_bytes();
  s.cache_pages = t.config().num_cache_slots();
  s.slots_per_row = t.config().slots_per_row;
  s.decode_pages_per_head = policy_.decode_pages_per_head();
  s.row_counters = tier_counters_.rows;
  s.elastic_budgets = t.config().budget == KvBudgetMode::kElastic;
  s.row_budgets = t.row_budgets();
  return s;
}

Status ModelRunner::set_device_budgets(const std::vector<int32_t>& slots) {
  if (!pool_.tiered()) return failed_precondition("device budgets need --kv-offload on");
  // Rows whose request ended give their slots up first, so nothing of theirs is moved.
  release_finished_rows();
  return pool_.tier().set_row_budgets(backend_, slots);
}

void ModelRunner::start_coarse_rows(const StepInput& step) {
  // Two-level summaries: a sequence that starts in a row (new, recomputing after preemption, or
  // from a prefix-cache hit) finds the row's coarse level empty (the previous sequence's groups
  // would bound nothing); the pages of a hit, summarized by the sequence that computed them, are
  // folded in from their stored fine summaries (kernels::CoarseFoldParams).
  coarse_admission_.resize(static_cast<size_t>(kv_.max_seqs()), 0);
  const auto* meta = static_cast<const uint8_t*>(meta_.data());
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const StepSequence& s = step.seqs[i];
    const int64_t admission = kv_.sequence(s.slot).admission;
    int64_t& built = coarse_admission_[static_cast<size_t>(s.slot)];
    if (built == admission) continue;
    built = admission;
    pool_.reset_coarse_row(backend_, s.slot);
    const int32_t cached = s.kv_len - s.q_len;  // whole pages: a hit
    if (cached <= 0) continue;
    kernels::CoarseFoldParams f;
    f.summaries = pool_.summaries();
    f.row = s.slot;
    // The rank's geometry, not the shared KvManager's: under tensor parallelism the manager
    // holds the whole model's heads while this pool's summaries hold only the rank's.
    const KvGeometry& g = policy_.kv_geometry();
    f.heads_per_block = g.roles.num_retrieval();
    f.head_dim = g.head_dim;
    f.page_tokens = g.page_tokens;
    f.blocks = reinterpret_cast<const int32_t*>(meta + layout_.retrieval_blocks) +
               static_cast<int64_t>(i) * retrieval_stride_;
    f.num_pages = cached / f.page_tokens;
    backend_.coarse_fold_pages(f);
  }
}

void ModelRunner::release_finished_rows() {
  if (!pool_.tiered()) return;
  row_dirty_.resize(static_cast<size_t>(kv_.max_seqs()), false);
  row_admission_.resize(static_cast<size_t>(kv_.max_seqs()), 0);
  for (int32_t row = 0; row < kv_.max_seqs(); ++row) {
    const SequenceKv& seq = kv_.sequence(row);
    const auto r = static_cast<size_t>(row);
    // A row whose sequence ended, or that another sequence took since it last ran (it may start
    // from a prefix-cache hit, so its first step need not start at token 0), drops its pages.
    if (row_dirty_[r] && (!seq.active || seq.admission != row_admission_[r])) {
      pool_.tier().reset_row(backend_, row);
      row_dirty_[r] = false;
    }
    if (seq.active) row_admission_[r] = seq.admission;
  }
}

void ModelRunner::sync_tier(const StepInput& step) {
  release_finished_rows();
  for (const StepSequence& s : step.seqs) {
    const auto row = static_cast<size_t>(s.slot);
    // A row that restarts (a new sequence, or a preempted one recomputing) may still hold the
    // previous sequence's pages, whose homes may now belong to someone else.
    if (row_dirty_[row] && s.prefilling && s.kv_len == s.q_len) {
      pool_.tier().reset_row(backend_, s.slot);
    }
    row_dirty_[row] = true;
  }
}

void ModelRunner::drop_recordings() {
  backend_.bind_thread();
  backend_.drop_graphs();
  recorded_.clear();
}

Status ModelRunner::enqueue_recorded(int32_t num_tokens, int32_t num_seqs, bool any_select) {
  constexpr size_t kMaxRecorded = 64;
  if (backend_.recording_epoch() != recorded_epoch_) {  // scratch moved: recordings are stale
    backend_.drop_graphs();
    recorded_.clear();
    recorded_epoch_ = backend_.recording_epoch();
  }
  const StepShape shape{num_seqs, num_logit_rows_, retrieval_stride_, any_select,
                        shared_prefix_.shape()};
  auto it = recorded_.find(shape);
  if (it == recorded_.end()) {
    if (recorded_.size() >= kMaxRecorded) {
      backend_.drop_graphs();
      recorded_.clear();
    }
    recorded_.emplace(shape, kSeen);
    enqueue_step(num_tokens, num_seqs, any_select);
    return {};
  }
  if (it->second == kSeen) {
    Status s = backend_.begin_capture();
    if (s.ok()) {
      // A throw (a tensor-parallel rank's fault) must not leave the stream capturing: NCCL's
      // abort waits for the captured collectives' graph to be destroyed.
      try {
        enqueue_step(num_tokens, num_seqs, any_select);
      } catch (...) {
        backend_.abort_capture();
        throw;
      }
      Result<int32_t> graph = backend_.end_capture();
      if (graph.ok()) {
        it->second = *graph;
      } else {
        s = graph.status();
      }
    }
    if (!s.ok()) {
      LS_LOG_WARN("decode steps of {} sequences are not recorded ({}); they run op by op",
                  num_seqs, s.message());
      it->second = kPlain;
      (void)backend_.take_error();  // the failed recording's; the plain run reports real ones
    }
  }
  if (it->second >= 0) {
    ++replayed_steps_;
    return backend_.replay(it->second);
  }
  enqueue_step(num_tokens, num_seqs, any_select);
  return {};
}

void ModelRunner::enqueue_step(int32_t num_tokens, int32_t num_seqs, bool any_select) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const DType act = backend_.act_dtype();
  auto* meta = static_cast<uint8_t*>(meta_.data());
  TensorView tokens(meta + layout_.tokens, DType::kI32, {num_tokens}, backend_.device());
  TensorView x = x_.view(act, {num_tokens, c.hidden_size()});
  enqueue_embedding(tokens, x);

  // Pre-norm blocks: each sublayer's output (delta) is added to x fused with the next norm.
  const auto num_layers = static_cast<int32_t>(c.num_hidden_layers());
  const auto eps = static_cast<float>(c.rms_norm_eps());
  TensorView xn = xn_.view(act, {num_tokens, c.hidden_size()});
  TensorView delta = delta_.view(act, {num_tokens, c.hidden_size()});
  backend_.rmsnorm(x, w.layers[0].input_norm, eps, xn);
  for (int32_t layer = 0; layer < num_layers; ++layer) {
    run_layer(layer, x, num_tokens, num_seqs, any_select);
    if (layer + 1 < num_layers) {
      backend_.add_rmsnorm(x, delta, w.layers[static_cast<size_t>(layer) + 1].input_norm, eps, xn);
    } else {
      backend_.add_inplace(x, delta);
    }
  }
  enqueue_logits(x);
}

void ModelRunner::enqueue_logits(const TensorView& x) {
  if (num_logit_rows_ == 0) return;
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const DType act = backend_.act_dtype();
  auto* meta = static_cast<uint8_t*>(meta_.data());
  const int32_t rows = num_logit_rows_;
  TensorView row_ids(meta + layout_.logit_rows, DType::kI32, {rows}, backend_.device());
  TensorView xr = rows_.view(act, {rows, c.hidden_size()});
  backend_.gather_rows(x, row_ids, xr);
  backend_.rmsnorm(xr, w.final_norm, static_cast<float>(c.rms_norm_eps()), xr);
  TensorView out = logits_.view(act, {rows, c.vocab_size()});
  backend_.linear(xr, w.lm_head, out);
  const int64_t parts = c.vocab_slice().parts;
  if (parts > 1) {
    // Vocabulary-parallel: rank p's [rows, slice] logits land at [p] of [parts, rows, slice].
    TensorView all = gathered_.view(act, {parts * rows, c.vocab_size()});
    if (comm_ == nullptr) {
      if (comm_status_.ok()) {
        comm_status_ = internal_error("a vocabulary-parallel model runs without a communicator");
      }
    } else if (comm_status_.ok()) {
      comm_status_ = comm_->all_gather(out, all);
      if (!comm_status_.ok()) comm_->abort(comm_status_.message());
    }
    out = all;
  }
  if (act != DType::kF32) {
    TensorView f32 = logits_f32_.view(DType::kF32, {parts * rows, c.vocab_size()});
    backend_.convert(out, f32);
  }
}

void ModelRunner::enqueue_embedding(const TensorView& tokens, const TensorView& x) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const ModelConfig::VocabSlice vocab = c.vocab_slice();
  if (vocab.parts == 1) {
    backend_.embedding(tokens, w.embed, x);
    return;
  }
  // Each rank writes its slice's rows (zeros for the others' ids); the sum is every row.
  backend_.embedding_slice(tokens, w.embed, vocab.begin, x);
  reduce_partial(x);
}

void ModelRunner::read_logits(int32_t rows, std::vector<float>& logits) {
  const ModelConfig& c = model_.config();
  const ModelConfig::VocabSlice vocab = c.vocab_slice();
  const bool vp = vocab.parts > 1;
  const Buffer& src = backend_.act_dtype() != DType::kF32 ? logits_f32_ : (vp ? gathered_ : logits_);
  logits.clear();
  if (!vp) {
    logits.resize(static_cast<size_t>(rows) * static_cast<size_t>(vocab.full));
    backend_.copy_bytes(logits.data(), src.data(), static_cast<int64_t>(logits.size()) * 4);
    return;
  }
  if (comm_ != nullptr && comm_->rank() != 0) return;  // rank 0 returns the step's logits
  const int64_t slice = c.vocab_size();
  gathered_host_.resize(static_cast<size_t>(vocab.parts * rows * slice));
  backend_.copy_bytes(gathered_host_.data(), src.data(),
                      static_cast<int64_t>(gathered_host_.size()) * 4);
  backend_.synchronize();
  logits.resize(static_cast<size_t>(rows) * static_cast<size_t>(vocab.full));
  for (int64_t p = 0; p < vocab.parts; ++p) {
    const int64_t begin = p * slice;
    const int64_t n = std::clamp<int64_t>(vocab.full - begin, 0, slice);  // drops the padding
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(gathered_host_.data() + (p * rows + row) * slice, n,
                  logits.data() + row * vocab.full + begin);
    }
  }
}

void ModelRunner::run_layer(int32_t layer, const TensorView& x, int32_t num_tokens,
                            int32_t num_seqs, bool any_select) {
  const ModelConfig& c = model_.config();
  const LayerWeights& w = model_.weights().layers[static_cast<size_t>(layer)];
  const DType act = backend_.act_dtype();
  const Device dev = backend_.device();
  const auto hidden = c.hidden_size();
  const auto heads = c.num_attention_heads();
  const auto kv_heads = c.num_key_value_heads();
  const auto head_dim = c.head_dim();
  const auto eps = static_cast<float>(c.rms_norm_eps());
  auto* meta = static_cast<uint8_t*>(meta_.data());
  auto meta_i32 = [&](int64_t field) { return reinterpret_cast<const int32_t*>(meta + field); };

  TensorView xn = xn_.view(act, {num_tokens, hidden});
  TensorView delta = delta_.view(act, {num_tokens, hidden});
  TensorView q = q_.view(act, {num_tokens, heads, head_dim});
  TensorView k = k_.view(act, {num_tokens, kv_heads, head_dim});
  TensorView v = v_.view(act, {num_tokens, kv_heads, head_dim});
  TensorView attn = attn_.view(act, {num_tokens, heads * head_dim});

  // Attention block; xn holds rmsnorm(x) with this layer's input norm (forward() fused it).
  TensorView qkv = qkv_.view(act, {num_tokens, (heads + 2 * kv_heads) * head_dim});
  backend_.linear(xn, w.qkv, qkv);
  const int64_t half = model_.rope().rotary_dim() / 2;
  TensorView cos(meta + layout_.cos, DType::kF32, {num_tokens, half}, dev);
  TensorView sin(meta + layout_.sin, DType::kF32, {num_tokens, half}, dev);
  backend_.qkv_split_rope(qkv, w.q_norm, w.k_norm, eps, cos, sin, half * 2, q, k, v);

  kernels::KvAppendParams ap;
  ap.k = k.data;
  ap.v = v.data;
  ap.src_dtype = act;
  ap.num_tokens = num_tokens;
  ap.num_kv_heads = static_cast<int32_t>(kv_heads);
  ap.head_dim = static_cast<int32_t>(head_dim);
  ap.num_seqs = num_seqs;
  ap.q_indptr = meta_i32(layout_.q_indptr);
  ap.kv_lens = meta_i32(layout_.kv_lens);
  ap.retrieval = pool_.retrieval();
  ap.retrieval_blocks = meta_i32(layout_.retrieval_blocks);
  ap.retrieval_blocks_stride = retrieval_stride_;
  ap.streaming = pool_.streaming();
  ap.streaming_blocks = meta_i32(layout_.streaming_blocks);
  ap.streaming_blocks_stride = streaming_stride_;
  ap.ring_pages = meta_i32(layout_.ring_pages);
  ap.write_homes = config_.kv_save;
  // Two-level summaries keep their coarse level per sequence row: this step's rows.
  kernels::PageSummaries summaries = pool_.summaries();
  if (summaries.group_pages > 0) summaries.rows = meta_i32(layout_.cache_rows);
  policy_.fill_append(layer, summaries, ap);
  backend_.kv_append(ap);  // and the policy's index, if it placed one

  LayerAttentionContext ctx;
  ctx.layer = layer;
  ctx.num_seqs = num_seqs;
  ctx.num_tokens = num_tokens;
  ctx.num_q_heads = static_cast<int32_t>(heads);
  ctx.num_kv_heads = static_cast<int32_t>(kv_heads);
  ctx.head_dim = static_cast<int32_t>(head_dim);
  ctx.q = q.data;
  ctx.act_dtype = act;
  ctx.q_indptr = ap.q_indptr;
  ctx.kv_lens = ap.kv_lens;
  ctx.retrieval_blocks = ap.retrieval_blocks;
  ctx.retrieval_blocks_stride = retrieval_stride_;
  ctx.selected_rows = meta_i32(layout_.selected_rows);
  ctx.select_rows = meta_i32(layout_.select_rows);
  ctx.retrieval = pool_.retrieval();
  ctx.summaries = summaries;
  if (any_select) policy_.select(backend_, ctx);

  kernels::AttentionParams p;
  p.q = q.data;
  p.out = attn.data;
  p.q_dtype = act;
  p.num_tokens = num_tokens;
  p.num_q_heads = static_cast<int32_t>(heads);
  p.num_kv_heads = static_cast<int32_t>(kv_heads);
  p.head_dim = static_cast<int32_t>(head_dim);
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.num_seqs = num_seqs;
  p.q_indptr = ap.q_indptr;
  p.kv_lens = ap.kv_lens;
  p.retrieval = pool_.retrieval();
  p.retrieval_blocks = ap.retrieval_blocks;
  p.retrieval_blocks_stride = retrieval_stride_;
  p.streaming = pool_.streaming();
  p.streaming_blocks = ap.streaming_blocks;
  p.streaming_blocks_stride = streaming_stride_;
  p.ring_pages = ap.ring_pages;
  p.local_tokens = meta_i32(layout_.local_tokens);
  p.selected_rows = ctx.selected_rows;
  p.selection_just_written = any_select;  // else no kernel of this step writes the selection
  policy_.fill_attention(layer, p);
  // Hierarchical KV: the pages this attention reads become resident (misses copied in) first.
  if (pool_.tiered()) pool_.tier().retrieve(backend_, p, meta_i32(layout_.cache_rows));
  if (shared_prefix_.use_layer(layer)) {
    backend_.shared_prefix_attention(shared_prefix_.params(p));
  } else {
    backend_.attention(p);
  }

  backend_.linear(attn, w.o, delta);
  reduce_partial(delta);  // tensor parallelism: o_proj is row-parallel
  backend_.add_rmsnorm(x, delta, w.post_norm, eps, xn);

  // MLP block; its output stays in delta for forward() to add.
  const auto inter = c.intermediate_size();
  TensorView gate_up = gate_up_.view(act, {num_tokens, 2 * inter});
  TensorView mlp = mlp_.view(act, {num_tokens, inter});
  backend_.linear_silu_mul(xn, w.gate_up, gate_up, mlp);
  backend_.linear(mlp, w.down, delta);
  reduce_partial(delta);  // tensor parallelism: down_proj is row-parallel
}

void ModelRunner::reduce_partial(const TensorView& partial) {
  if (comm_ == nullptr || !comm_status_.ok()) return;
  comm_status_ = comm_->all_reduce_sum(partial);
  if (!comm_status_.ok()) comm_->abort(comm_status_.message());
}

Status ModelRunner::take_step_error() {
  Status s = backend_.take_error();
  if (s.ok() && comm_ != nullptr) s = comm_->device_error();
  if (!comm_status_.ok()) {
    s = comm_status_;
    comm_status_ = {};
  }
  return s;
}

}  // namespace ls
