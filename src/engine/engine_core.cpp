#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>

#include "core/clock.h"
#include "core/log.h"
#include "kv/prefix_key.h"

namespace ls {

namespace {

// Rows of logits one step may return: every sampling sequence, and chunks of `score`.
int32_t max_logit_rows(const EngineConfig& c) {
  return std::max(c.max_num_seqs, std::min(c.max_num_batched_tokens, 512));
}

SchedulerConfig scheduler_config(const EngineConfig& c, const StepExecutor& executor) {
  SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_chunk_tokens = c.max_num_batched_tokens;
  s.decode_reserve_ratio = c.decode_reserve_ratio;
  // Layer-segmented prefill where asked for and the executor can (its arena exists).
  if (c.layer_segmented_prefill() && executor.num_layers() > 0) {
    s.layer_segment_min_tokens = c.layer_segmented_min_tokens;
    s.segment_tokens = c.prefill_segment_tokens > 0 ? c.prefill_segment_tokens
                                                    : c.max_num_batched_tokens;
    s.num_layers = executor.num_layers();
    s.max_layer_segment_tokens = executor.max_layer_segment_tokens();
  }
  return s;
}

// Sampling and stop defaults from generation_config.json (eos falls back to config.json's and
// then the tokenizer's), as vLLM takes missing request fields from it.
void read_generation_defaults(const GenerationConfig& gen, const ModelConfig& model,
                              const Tokenizer* tok, StopParams& stop, SamplingParams& sampling) {
  for (int64_t id : gen.eos_token_ids) stop.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (stop.eos_token_ids.empty()) {
    for (int64_t id : model.eos_token_ids()) stop.eos_token_ids.push_back(static_cast<int32_t>(id));
  }
  if (stop.eos_token_ids.empty() && tok && tok->eos_token_id()) {
    stop.eos_token_ids.push_back(*tok->eos_token_id());
  }
  if (gen.temperature) sampling.temperature = static_cast<float>(*gen.temperature);
  if (gen.top_p) sampling.top_p = static_cast<float>(*gen.top_p);
  if (gen.top_k) sampling.top_k = static_cast<int32_t>(*gen.top_k);
  if (gen.min_p) sampling.min_p = static_cast<float>(*gen.min_p);
  if (gen.repetition_penalty) sampling.repetition_penalty = static_cast<float>(*gen.repetition_penalty);
  if (gen.do_sample && !*gen.do_sample) sampling.temperature = 0.0f;
}

}  // namespace

PrefixKey prefix_cache_seed(const EngineConfig& c, const KvGeometry& g) {
  const AttentionConfig& a = c.attention;
  // The weights: the directory, and whether they are read from it or generated (from which
  // seed): dummy weights of another seed, or the checkpoint's, give other K/V for the same tokens.
  const std::string weights =
      c.load_format == "dummy" ? fmt::format("dummy/{}", c.dummy_seed) : c.load_format;
  return prefix_seed(fmt::format(
      "model={}|load={}|quant={}|policy={}|pattern={}|ratio={}|page={}/{}|sink={}|local={}/{}|"
      "kv={}|roles={}",
      std::filesystem::absolute(c.model_dir).string(), weights, c.quantization, a.policy,
      a.head_pattern_path, a.streaming_ratio, g.page_tokens, g.logical_page_tokens, g.sink_tokens,
      g.prefill_local_tokens, g.decode_local_tokens, g.page_format_name(), g.roles.describe()));
}

Result<std::unique_ptr<EngineCore>> EngineCore::create(const EngineConfig& config) {
  LS_RETURN_IF_ERROR(config.validate());
  ModelStackOptions o;
  o.model_dir = config.model_dir;
  o.device = config.device;
  o.num_threads = config.num_threads;
  o.attention = config.attention;
  o.max_num_seqs = config.max_num_seqs;
  o.max_step_tokens = config.max_num_batched_tokens;
  o.max_model_len = config.max_model_len;
  o.kv_cache_bytes = config.kv_cache_bytes;
  o.gpu_memory_utilization = config.gpu_memory_utilization;
  o.record_decode_steps = !config.enforce_eager;
  o.shared_prefix_attention = config.shared_prefix_attention;
  o.max_logit_rows = max_logit_rows(config);
  o.kv_offload = config.kv_offload;
  o.host_kv_cache_bytes = config.host_kv_cache_bytes;
  o.device_kv_cache_bytes = config.device_kv_cache_bytes;
  o.offload_buffer_ratio = config.offload_buffer_ratio;
  o.kv_plain_lru = config.kv_cache_replacement == "lru";
  o.elastic_device_budgets = config.device_cache_budget == "elastic";
  o.layer_segmented_prefill = config.layer_segmented_prefill();
  LS_ASSIGN_OR_RETURN(o.kv_cache_dtype, parse_kv_cache_dtype(config.kv_cache_dtype));
  o.quantization = config.quantization;
  o.load_format = config.load_format;
  o.dummy_seed = config.dummy_seed;
  o.tensor_parallel_size = config.tensor_parallel_size;
  o.tp_all_reduce = config.tp_all_reduce;
  o.tp_fault = config.tp_fault;
  if (config.tensor_parallel_size > 1 && config.device == "cpu") {
    LS_LOG_WARN("--tensor-parallel-size {} on --device cpu: the ranks are threads sharing the same "
                "cores, which only tests the split (it is slower than one rank)",
                config.tensor_parallel_size);
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<EngineModel> model, EngineModel::load(o));

  std::shared_ptr<const Tokenizer> tokenizer;
  if (std::filesystem::exists(config.model_dir / "tokenizer.json") ||
      Tokenizer::in_gguf(config.model_dir)) {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::load(config.model_dir));
    tokenizer = std::move(tok);
  } else {
    LS_LOG_WARN("{} has no tokenizer.json: only token ids can be used",
                config.model_dir.string());
  }
  StopParams stop;
  SamplingParams sampling;
  read_generation_defaults(model->generation(), model->config(), tokenizer.get(), stop, sampling);
  return std::unique_ptr<EngineCore>(
      new EngineCore(config, std::move(model), std::move(tokenizer), stop, sampling));
}

EngineCore::EngineCore(const EngineConfig& config, std::unique_ptr<EngineModel> model,
                       std::shared_ptr<const Tokenizer> tokenizer, StopParams default_stop,
                       SamplingParams default_sampling)
    : config_(config),
      model_(std::move(model)),
      executor_(&model_->executor()),
      kv_(&model_->kv()),
      tokenizer_(std::move(tokenizer)),
      max_model_len_(model_->max_model_len()),
      default_stop_(std::move(default_stop)),
      default_sampling_(default_sampling),
      scheduler_(scheduler_config(config, *executor_), *kv_),
      seed_rng_(config.seed) {
  model_name_ = config.served_model_name.empty() ? config.model_dir.filename().string()
                                                 : config.served_model_name;
  if (model_name_.empty()) model_name_ = config.model_dir.parent_path().filename().string();
  init_working_sets();
  init_prefix_caching();
}

void EngineCore::init_prefix_caching() {
  if (!config_.enable_prefix_caching) return;
  // With the host KV tier a retrieval page is shared only through the cache, never by two live
  // sequences at once (KvManager::enable_prefix_caching).
  // Pages filled by decode steps are keyed while decode attends what prefill would.
  kv_->enable_prefix_caching(prefix_cache_seed(config_, kv_->geometry()), config_.kv_offload,
                             model_ ? model_->exact_decode_len() : 0);
  LS_LOG_INFO("prefix caching on: full {}-token pages are shared and kept after their requests",
              kv_->geometry().page_tokens);
}

void EngineCore::init_working_sets() {
  const KvTierStats t = executor_->kv_tier_stats();
  if (!t.enabled) return;
  working_sets_ = std::make_unique<WorkingSetTracker>(kv_->geometry(), config_.working_set_window,
                                                      t.cache_pages, t.decode_pages_per_head,
                                                      kv_->max_seqs());
  if (config_.working_set_admission) scheduler_.set_working_set_model(working_sets_.get());
  if (t.elastic_budgets) {
    budgets_ = std::make_unique<DeviceBudgetPlanner>(
        kv_->geometry(), t.cache_pages, kv_->max_seqs(), max_model_len_, t.decode_pages_per_head,
        config_.device_budget_interval);
  }
}

EngineCore::EngineCore(const EngineConfig& config, std::unique_ptr<StepExecutor> executor,
                       std::unique_ptr<KvManager> kv, std::shared_ptr<const Tokenizer> tokenizer,
                       int32_t max_model_len, StopParams default_stop,
                       SamplingParams default_sampling)
    : config_(config),
      owned_executor_(std::move(executor)),
      owned_kv_(std::move(kv)),
      executor_(owned_executor_.get()),
      kv_(owned_kv_.get()),
      tokenizer_(std::move(tokenizer)),
      max_model_len_(max_model_len),
      default_stop_(std::move(default_stop)),
      default_sampling_(default_sampling),
      model_name_(config.served_model_name.empty() ? "test" : config.served_model_name),
      scheduler_(scheduler_config(config, *executor_), *kv_),
      seed_rng_(config.seed) {
  init_working_sets();
  init_prefix_caching();
}

EngineCore::~EngineCore() = default;

std::string EngineCore::attention_policy_name() const {
  return model_ ? model_->policy_name() : std::string();
}

Status EngineCore::validate_request(const GenerateRequest& r) const {
  const auto n = static_cast<int64_t>(r.prompt_ids.size());
  if (n == 0) return invalid_argument("the prompt is empty");
  if (n >= max_model_len_) {
    return out_of_range(
        "This model's maximum context length is {} tokens. However, your request has {} input "
        "tokens. Please reduce the length of the input messages.",
        max_model_len_, n);
  }
  if (n + r.stop.max_tokens > max_model_len_) {
    return out_of_range(
        "'max_tokens' or 'max_completion_tokens' is too large: {}. This model's maximum context "
        "length is {} tokens and your request has {} input tokens ({} > {} - {}).",
        r.stop.max_tokens, max_model_len_, n, r.stop.max_tokens, max_model_len_, n);
  }
  const int32_t vocab = vocab_size();
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("prompt token id {} is outside the vocabulary [0, {})", id, vocab);
    }
  }
  if (r.n < 1 || r.n > config_.max_num_seqs) {
    return invalid_argument("n must be between 1 and {} (--max-num-seqs), got {}",
                            config_.max_num_seqs, r.n);
  }
  LS_RETURN_IF_ERROR(r.sampling.validate(vocab));
  LS_RETURN_IF_ERROR(r.stop.validate());
  // A sequence must fit the KV cache on its own, or it would wait forever.
  const BlockCount need = kv_->blocks_for_new_sequence(static_cast<int32_t>(n) + r.stop.max_tokens);
  if (need.retrieval > kv_->num_retrieval_blocks() || need.streaming > kv_->num_streaming_blocks()) {
    // With the host tier on, retrieval blocks are homes in the host pool.
    return out_of_range(
        "the request needs {} tokens of KV cache, more than the {} holds; raise {} or shorten "
        "the request",
        n + r.stop.max_tokens, config_.kv_offload ? "host KV pool" : "cache",
        config_.kv_offload ? "--host-kv-cache-bytes" : "--kv-cache-bytes");
  }
  return {};
}

Status EngineCore::add_request(GenerateRequest request, OutputSink sink) {
  if (!fatal_.ok()) return fatal_;
  LS_RETURN_IF_ERROR(validate_request(request));
  if (requests_.count(request.request_id)) {
    return invalid_argument("request id '{}' is already in use", request.request_id);
  }
  auto state = std::make_shared<RequestState>();
  state->request_id = request.request_id;
  state->prompt_ids = std::move(request.prompt_ids);
  state->sampling = request.sampling;
  state->stop = request.stop;
  state->sink = std::move(sink);
  state->arrival_ns = now_ns();
  state->num_unfinished = request.n;
  auto& seqs = requests_[state->request_id];
  const int32_t max_out = max_model_len_ - static_cast<int32_t>(state->prompt_ids.size());
  for (int32_t i = 0; i < request.n; ++i) {
    const uint64_t seed = sequence_seed(state->sampling, i, seed_rng_());
    seqs.push_back(std::make_unique<Sequence>(state, i, seed, tokenizer_.get(), max_out));
    if (request.constraint) seqs.back()->constraint = request.constraint();
  }
  for (auto& s : seqs) scheduler_.add(s.get());
  prompt_tokens_total_ += static_cast<int64_t>(state->prompt_ids.size()) * request.n;
  return {};
}

void EngineCore::finish(Sequence* seq, RequestOutput& out) {
  out.finished = true;
  if (out.scheduled_ns == 0) out.scheduled_ns = seq->first_scheduled_ns;
  out.prompt_tokens = seq->prompt_len();
  out.completion_tokens = static_cast<int32_t>(seq->output_ids.size());
  out.num_preemptions = seq->num_preemptions;
  out.cached_tokens = cached_tokens(*seq);
  if (working_sets_ && seq->slot >= 0 && spdlog::should_log(spdlog::level::debug)) {
    const SelectionLocality& l = working_sets_->row(seq->slot);
    spdlog::debug("request {}: {} decode steps, selection overlap {:.3f}, hit ratio {:.3f}, {} "
                 "preemptions", seq->request->request_id, l.decode_steps, l.overlap(),
                 l.hit_ratio(), seq->num_preemptions);
  }
  scheduler_.remove(seq);
  RequestState& req = *seq->request;
  --req.num_unfinished;
  req.sink(out);
  if (req.num_unfinished == 0) requests_.erase(req.request_id);  // destroys the sequences
}

void EngineCore::abort(const std::string& request_id) { end_request(request_id, {}); }

void EngineCore::end_request(const std::string& request_id, const Status& error) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::vector<Sequence*> live;
  for (auto& s : it->second)
    if (s->status != SequenceStatus::kFinished) live.push_back(s.get());
  for (Sequence* seq : live) {
    RequestOutput out;
    out.index = seq->index;
    out.finish_reason = error.ok() ? FinishReason::kAbort : FinishReason::kError;
    out.error = error.message();
    if (!error.ok()) out.error_code = error.code();
    finish(seq, out);
  }
}

void EngineCore::abort_all() {
  std::vector<std::string> ids;
  for (const auto& [id, seqs] : requests_) ids.push_back(id);
  for (const std::string& id : ids) abort(id);
}

bool EngineCore::went_down(const Status& threw) {
  if (!fatal_.ok()) return true;
  Status f = threw.ok() ? executor_->fatal_error() : threw;
  if (f.ok()) return false;
  fatal_ = Status(StatusCode::kFailedPrecondition,
                  fmt::format("the engine is down: {}", f.message()));
  LS_LOG_ERROR("{}; every request in flight fails, new ones are refused and /health reports 503 "
               "(restart the server)",
               fatal_.message());
  std::vector<std::string> ids;
  for (const auto& [id, seqs] : requests_) ids.push_back(id);
  for (const std::string& id : ids) end_request(id, fatal_);
  return true;
}

void EngineCore::fail_sequences(const SchedulerOutput& out, const Status& error) {
  LS_LOG_ERROR("step failed: {}", error.to_string());
  for (const ScheduledChunk& c : out.chunks) {
    if (c.seq->status == SequenceStatus::kFinished) continue;
    RequestOutput ro;
    ro.index = c.seq->index;
    ro.finish_reason = FinishReason::kError;
    ro.error = error.message();
    finish(c.seq, ro);
  }
}

void EngineCore::process_sample(Sequence* seq, std::span<float> logits) {
  const RequestState& req = *seq->request;
  SampleOutput sample_out;
  const bool want_logprobs = req.sampling.logprobs >= 0;
  // As in vLLM, the grammar mask is applied to the logits before sampling, so logprobs too see
  // disallowed tokens as -inf.
  if (seq->constraint) seq->constraint->mask_logits(logits);
  const int32_t token = sample(logits, req.sampling, seq->sampling, want_logprobs ? &sample_out : nullptr);
  if (seq->constraint && !seq->constraint->accept(token)) {
    RequestOutput ro;
    ro.index = seq->index;
    ro.finish_reason = FinishReason::kError;
    ro.error = "constrained decoding: the grammar allows no token here";
    finish(seq, ro);
    return;
  }
  seq->sampling.append(token);
  seq->output_ids.push_back(token);
  ++generation_tokens_total_;

  std::string text = seq->detokenizer ? seq->detokenizer->push(token) : std::string();
  StopResult stop = seq->stop.on_token(token, text);
  RequestOutput out;
  out.index = seq->index;
  out.scheduled_ns = seq->first_scheduled_ns;
  out.cached_tokens = cached_tokens(*seq);
  out.token_ids.push_back(token);
  out.text = std::move(stop.emit);
  if (want_logprobs) {
    out.logprobs.push_back({token, sample_out.logprob});
    out.top_logprobs.push_back(std::move(sample_out.top_logprobs));
  }
  if (req.sampling.prompt_logprobs >= 0 && !seq->prompt_logprobs_sent) {
    out.prompt_logprobs = std::move(seq->prompt_logprobs);
    out.prompt_top_logprobs = std::move(seq->prompt_top_logprobs);
    out.prompt_ranks = std::move(seq->prompt_ranks);
    seq->prompt_logprobs.clear();
    seq->prompt_top_logprobs.clear();
    seq->prompt_ranks.clear();
    seq->prompt_logprobs_sent = true;
  }
  if (!stop.finished) {
    req.sink(out);
    return;
  }
  if (seq->detokenizer && stop.reason == FinishReason::kLength) {
    // Bytes the detokenizer still holds (an incomplete character) end the text, as U+FFFD.
    out.text += seq->detokenizer->flush();
  }
  out.finish_reason = stop.reason;
  out.stop_reason = stop.stop_reason;
  out.stop_token_id = stop.stop_token_id;
  finish(seq, out);
}

void EngineCore::cap_prompt_logprob_chunks() {
  // Every step returns at most max_logit_rows(config_) rows: one per sampling sequence (at most
  // max_num_seqs) plus the prompt positions of sequences that asked for prompt logprobs. Those
  // share what is left (each chunk gives at most its length in rows); with less left than such
  // sequences, each takes one-token chunks, and all rows then fit under max_num_seqs.
  std::vector<Sequence*> wanting;
  for (auto& [id, seqs] : requests_) {
    for (auto& seq : seqs) {
      seq->max_chunk_tokens = 0;
      if (seq->status != SequenceStatus::kFinished && seq->wants_prompt_logprobs()) {
        wanting.push_back(seq.get());
      }
    }
  }
  if (wanting.empty()) return;
  const int32_t spare = max_logit_rows(config_) - config_.max_num_seqs;
  const auto k = static_cast<int32_t>(wanting.size());
  const int32_t cap = spare >= k ? spare / k : 1;
  for (Sequence* seq : wanting) seq->max_chunk_tokens = cap;
}

void EngineCore::collect_prompt_logprobs(Sequence* seq, int32_t first_position,
                                         int32_t num_positions, const float* rows) {
  const int32_t num_top = seq->request->sampling.prompt_logprobs;
  const auto vocab = static_cast<size_t>(vocab_size());
  for (int32_t i = 0; i < num_positions; ++i) {
    const int32_t next = seq->request->prompt_ids[static_cast<size_t>(first_position + i + 1)];
    SampleOutput lp;
    const std::span<const float> row(rows + static_cast<size_t>(i) * vocab, vocab);
    raw_logprobs(row, next, num_top, &lp);
    const float value = row[static_cast<size_t>(next)];
    seq->prompt_ranks.push_back(
        1 + static_cast<int32_t>(std::count_if(row.begin(), row.end(),
                                               [value](float x) { return x > value; })));
    seq->prompt_logprobs.push_back({next, lp.logprob});
    seq->prompt_top_logprobs.push_back(std::move(lp.top_logprobs));
  }
}

Status EngineCore::step() {
  if (!fatal_.ok()) return fatal_;
  // An exception from the step (e.g. bad_alloc in a kernel's ThreadPool::parallel_for, which
  // rethrows it here) must not end the engine's thread: the step's state is unknown after it,
  // so the engine goes down as when the executor does (docs/tensor-parallel.md, "Failures").
  Status st;
  Status threw;
  try {
    st = step_once();
  } catch (const std::exception& e) {
    threw = internal_error("the step threw an exception: {}", e.what());
  } catch (...) {
    threw = internal_error("the step threw an exception of an unknown type");
  }
  if (!threw.ok()) {
    went_down(threw);
    return fatal_;
  }
  // A failure the executor cannot recover from ends every request (went_down).
  if (!st.ok() && went_down()) return fatal_;
  return st;
}

Status EngineCore::step_once() {
  cap_prompt_logprob_chunks();
  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) return {};
  if (budgets_) {
    // Elastic device budgets: re-planned between steps, before the step's residency ops.
    Status st = budgets_->before_step(scheduler_.running(), *working_sets_, *executor_);
    if (!st.ok()) {
      fail_sequences(out, st);
      return st;
    }
  }
  const int64_t step_ns = now_ns();
  // A layer-segmented share counts as the tokens' worth of work it does.
  const int32_t step_tokens = out.num_tokens + out.segments.token_equivalents;
  const auto bucket = static_cast<size_t>(
      std::lower_bound(kIterationTokenBuckets.begin(), kIterationTokenBuckets.end(),
                       step_tokens) -
      kIterationTokenBuckets.begin());
  ++iteration_tokens_counts_[bucket];
  iteration_tokens_sum_ += step_tokens;
  // Per chunk: the prompt positions whose logits give prompt logprobs, [first, first + count).
  std::vector<std::pair<int32_t, int32_t>> prompt_rows(out.chunks.size(), {0, 0});
  if (!out.chunks.empty()) {
    Status st = forward_chunks(out, step_ns, prompt_rows);
    if (!st.ok()) {
      fail_sequences(out, st);
      return st;
    }
  } else {
    logits_.clear();
  }
  if (out.segments.seq != nullptr && out.segments.seq->first_scheduled_ns == 0) {
    out.segments.seq->first_scheduled_ns = step_ns;
  }
  // The layer-segmented prefill's share runs after the step's tokens (decodes first); if it
  // fails, only its sequence fails.
  Status segments_status = forward_segments(out.segments);
  if (segments_status.ok() && working_sets_ && out.segments.seq != nullptr) {
    // The share's residency counters belong to its row: a prefill, starting with unit 0.
    const Sequence* s = out.segments.seq;
    working_sets_->observe({{s->slot, out.segments.unit_begin == 0, false, &s->request->request_id}},
                           executor_->kv_tier_stats().row_counters);
  }
  if (!segments_status.ok()) {
    LS_LOG_ERROR("layer-segmented prefill failed: {}", segments_status.to_string());
    Sequence* seq = out.segments.seq;
    out.segments = {};
    RequestOutput ro;
    ro.index = seq->index;
    ro.finish_reason = FinishReason::kError;
    ro.error = segments_status.message();
    finish(seq, ro);
  }
  scheduler_.on_step_done(out);
  const auto vocab = static_cast<size_t>(vocab_size());
  size_t row = 0;
  for (size_t ci = 0; ci < out.chunks.size(); ++ci) {
    const ScheduledChunk& c = out.chunks[ci];
    if (prompt_rows[ci].second > 0) {
      collect_prompt_logprobs(c.seq, prompt_rows[ci].first, prompt_rows[ci].second,
                              logits_.data() + row * vocab);
      row += static_cast<size_t>(prompt_rows[ci].second);
    }
    if (!c.samples) continue;
    deliver_sample(c.seq, std::span<float>(logits_.data() + row * vocab, vocab));
    ++row;
  }
  if (out.segments.samples) deliver_sample(out.segments.seq, segment_logits_);
  return segments_status;
}

Status EngineCore::forward_segments(const LayerSegmentShare& share) {
  if (share.seq == nullptr) return {};
  LayerSegmentInput in;
  in.slot = share.seq->slot;
  in.num_tokens = share.num_tokens;
  in.segment_tokens = scheduler_.config().segment_tokens;
  in.unit_begin = share.unit_begin;
  in.unit_end = share.unit_end;
  if (share.unit_begin < in.num_segments()) {  // layer-0 units embed the tokens
    in.tokens.reserve(static_cast<size_t>(share.num_tokens));
    for (int32_t i = 0; i < share.num_tokens; ++i) in.tokens.push_back(share.seq->token_at(i));
  }
  LS_RETURN_IF_ERROR(executor_->forward_layer_segments(in, segment_logits_));
  if (share.samples && segment_logits_.size() != static_cast<size_t>(vocab_size())) {
    return internal_error("the last share of a layer-segmented prefill returned {} logits, not {}",
                          segment_logits_.size(), vocab_size());
  }
  return {};
}

void EngineCore::deliver_sample(Sequence* seq, std::span<float> logits) {
  if (!std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); })) {
    RequestOutput ro;
    ro.index = seq->index;
    ro.finish_reason = FinishReason::kError;
    ro.error = "the model produced non-finite logits";
    LS_LOG_ERROR("request {}: {}", seq->request->request_id, ro.error);
    finish(seq, ro);
    return;
  }
  process_sample(seq, logits);
}

Status EngineCore::forward_chunks(const SchedulerOutput& out, int64_t step_ns,
                                  std::vector<std::pair<int32_t, int32_t>>& prompt_rows) {
  StepInput input;
  input.tokens.reserve(static_cast<size_t>(out.num_tokens));
  std::vector<RowStep> rows;
  for (size_t ci = 0; ci < out.chunks.size(); ++ci) {
    const ScheduledChunk& c = out.chunks[ci];
    Sequence* seq = c.seq;
    if (seq->first_scheduled_ns == 0) seq->first_scheduled_ns = step_ns;
    if (working_sets_) {
      rows.push_back({seq->slot, seq->num_computed == 0, !c.prefilling, &seq->request->request_id});
    }
    const auto chunk_begin = static_cast<int32_t>(input.tokens.size());
    for (int32_t i = 0; i < c.num_tokens; ++i) input.tokens.push_back(seq->token_at(seq->num_computed + i));
    StepSequence s;
    s.slot = seq->slot;
    s.q_len = c.num_tokens;
    s.kv_len = seq->num_computed + c.num_tokens;
    s.prefilling = c.prefilling;
    input.seqs.push_back(s);
    if (c.prefilling && seq->wants_prompt_logprobs()) {
      // Position j's logits give prompt token j + 1: positions up to prompt_len - 2, from the
      // first not collected yet (a recompute after preemption skips those).
      const int32_t first =
          std::max(seq->num_computed, static_cast<int32_t>(seq->prompt_logprobs.size()));
      const int32_t end = std::min(seq->num_computed + c.num_tokens, seq->prompt_len() - 1);
      if (end > first) {
        prompt_rows[ci] = {first, end - first};
        for (int32_t j = first; j < end; ++j) {
          input.logit_rows.push_back(chunk_begin + (j - seq->num_computed));
        }
      }
    }
    if (c.samples) input.logit_rows.push_back(static_cast<int32_t>(input.tokens.size()) - 1);
  }
  LS_RETURN_IF_ERROR(executor_->forward(input, logits_));
  if (working_sets_) working_sets_->observe(rows, executor_->kv_tier_stats().row_counters);
  return {};
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.engine_error = fatal_.message();
  s.kv_usage = kv_->usage();
  s.kv_bytes_in_use = kv_->bytes_in_use();
  s.num_preemptions = scheduler_.num_preemptions();
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  s.iteration_tokens_counts = iteration_tokens_counts_;
  s.iteration_tokens_sum = iteration_tokens_sum_;
  s.shared_prefix_steps = executor_->shared_prefix_steps();
  s.shared_prefix_tokens = executor_->shared_prefix_tokens();
  const KvTierStats t = executor_->kv_tier_stats();
  s.kv_offload = t.enabled;
  s.kv_host_bytes = t.host_bytes;
  s.host_pinned_bytes = t.host_pinned_bytes;
  s.kv_device_cache_bytes = t.device_cache_bytes;
  s.kv_offload_hits_total = t.hits;
  s.kv_offload_misses_total = t.misses;
  s.kv_offload_bytes_total = t.bytes_retrieved;
  int64_t retrieval_total = 0, retrieval_most = 0;
  for (const TpRankStats& r : executor_->tp_rank_stats()) {
    EngineRankStats e;
    e.retrieval_kv_heads = r.retrieval_kv_heads;
    e.streaming_kv_heads = r.streaming_kv_heads;
    e.kv_host_bytes = r.tier.host_bytes;
    e.kv_device_cache_bytes = r.tier.device_cache_bytes;
    e.kv_offload_hits_total = r.tier.hits;
    e.kv_offload_misses_total = r.tier.misses;
    e.kv_offload_bytes_total = r.tier.bytes_retrieved;
    s.tp_ranks.push_back(e);
    retrieval_total += r.retrieval_kv_heads;
    retrieval_most = std::max<int64_t>(retrieval_most, r.retrieval_kv_heads);
  }
  if (!s.tp_ranks.empty()) {
    // As the start-up log: most / mean, 1 when no rank has a retrieval head.
    s.tp_retrieval_imbalance =
        retrieval_total > 0 ? static_cast<double>(retrieval_most) * static_cast<double>(s.tp_ranks.size()) /
                                  static_cast<double>(retrieval_total)
                            : 1.0;
  }
  s.num_recomputed_tokens = scheduler_.num_recomputed_tokens();
  s.prefix_caching = kv_->prefix_caching();
  s.prefix_cache_queries = scheduler_.prefix_cache_queries();
  s.prefix_cache_hits = scheduler_.prefix_cache_hits();
  s.prompt_tokens_cached = scheduler_.prompt_tokens_cached();
  if (working_sets_) {
    s.kv_cache_pages = t.cache_pages;
    s.kv_working_set_pages = scheduler_.working_set_pages();
    s.kv_selected_pages_total = working_sets_->total().selected_pages;
    s.kv_reused_pages_total = working_sets_->total().reused_pages;
    std::vector<int32_t> sizes;
    for (const Sequence* seq : scheduler_.running()) {
      const auto r = static_cast<size_t>(seq->slot);
      if (seq->slot >= 0 && r < t.row_budgets.size()) sizes.push_back(t.row_budgets[r]);
    }
    std::sort(sizes.begin(), sizes.end());
    if (!sizes.empty()) {
      s.kv_budget_min_pages = sizes.front();
      s.kv_budget_median_pages = sizes[sizes.size() / 2];
      s.kv_budget_max_pages = sizes.back();
    }
    s.kv_budget_elastic = budgets_ != nullptr;
    if (budgets_) {
      s.kv_budget_changes_total = budgets_->num_changes();
      s.kv_budget_moved_pages_total = budgets_->moved_slots();
    }
  }
  const KvGeometry& g = kv_->geometry();
  s.kv_cache_dtype = std::string(g.page_format_name());
  s.kv_bytes_per_token = g.retrieval_bytes_per_token();
  return s;
}

int32_t EngineCore::cached_tokens(const Sequence& seq) const {
  if (!kv_->prefix_caching()) return -1;
  return std::max(0, seq.request->num_cached_tokens);
}

Status EngineCore::score(std::span<const int32_t> ids, std::vector<float>& logits,
                         int64_t* kv_bytes) {
  if (scheduler_.has_work()) return failed_precondition("score needs an idle engine");
  if (ids.empty()) return invalid_argument("nothing to score: no tokens");
  if (static_cast<int64_t>(ids.size()) > max_model_len_) {
    return out_of_range("This model's maximum context length is {} tokens. However, your request has {} input tokens.",
                        max_model_len_, ids.size());
  }
  const int32_t vocab = vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) return invalid_argument("token id {} is outside the vocabulary [0, {})", id, vocab);
  }
  LS_ASSIGN_OR_RETURN(int32_t slot, kv_->add_sequence());
  const auto n = static_cast<int32_t>(ids.size());
  const int32_t chunk = std::min(config_.max_num_batched_tokens, max_logit_rows(config_));
  logits.assign(static_cast<size_t>(n) * static_cast<size_t>(vocab), 0.0f);
  Status st;
  std::vector<float> part;
  for (int32_t begin = 0; begin < n && st.ok(); begin += chunk) {
    const int32_t len = std::min(chunk, n - begin);
    st = kv_->grow(slot, begin + len);
    if (!st.ok()) break;
    StepInput input;
    input.tokens.assign(ids.begin() + begin, ids.begin() + begin + len);
    input.seqs.push_back({slot, len, begin + len, true});
    for (int32_t i = 0; i < len; ++i) input.logit_rows.push_back(i);
    st = executor_->forward(input, part);
    if (st.ok() && !std::all_of(part.begin(), part.end(), [](float v) { return std::isfinite(v); })) {
      st = internal_error("the model produced non-finite logits");
    }
    if (st.ok()) std::copy(part.begin(), part.end(), logits.begin() + static_cast<ptrdiff_t>(begin) * vocab);
  }
  if (kv_bytes != nullptr) *kv_bytes = kv_->sequence_bytes(slot);
  kv_->remove_sequence(slot);
  return st;
}

}  // namespace ls
