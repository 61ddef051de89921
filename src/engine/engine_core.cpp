#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/log.h"

namespace ls {

namespace {

// Rows of logits one step may return: every sampling sequence, and chunks of `score`.
int32_t max_logit_rows(const EngineConfig& c) {
  return std::max(c.max_num_seqs, std::min(c.max_num_batched_tokens, 512));
}

SchedulerConfig scheduler_config(const EngineConfig& c) {
  SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.max_chunk_tokens = c.max_num_batched_tokens;
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
  o.max_logit_rows = max_logit_rows(config);
  o.kv_offload = config.kv_offload;
  o.host_kv_cache_bytes = config.host_kv_cache_bytes;
  o.device_kv_cache_bytes = config.device_kv_cache_bytes;
  o.offload_buffer_ratio = config.offload_buffer_ratio;
  o.kv_plain_lru = config.kv_cache_replacement == "lru";
  o.quantization = config.quantization;
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
      scheduler_(scheduler_config(config), *kv_),
      seed_rng_(config.seed) {
  model_name_ = config.served_model_name.empty() ? config.model_dir.filename().string()
                                                 : config.served_model_name;
  if (model_name_.empty()) model_name_ = config.model_dir.parent_path().filename().string();
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
      scheduler_(scheduler_config(config), *kv_),
      seed_rng_(config.seed) {}

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
    return out_of_range(
        "the request needs {} tokens of KV cache, more than the cache holds; raise "
        "--kv-cache-bytes or shorten the request",
        n + r.stop.max_tokens);
  }
  return {};
}

Status EngineCore::add_request(GenerateRequest request, OutputSink sink) {
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
  }
  for (auto& s : seqs) scheduler_.add(s.get());
  prompt_tokens_total_ += static_cast<int64_t>(state->prompt_ids.size()) * request.n;
  return {};
}

void EngineCore::finish(Sequence* seq, RequestOutput& out) {
  out.finished = true;
  out.prompt_tokens = seq->prompt_len();
  out.completion_tokens = static_cast<int32_t>(seq->output_ids.size());
  scheduler_.remove(seq);
  RequestState& req = *seq->request;
  --req.num_unfinished;
  req.sink(out);
  if (req.num_unfinished == 0) requests_.erase(req.request_id);  // destroys the sequences
}

void EngineCore::abort(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  std::vector<Sequence*> live;
  for (auto& s : it->second)
    if (s->status != SequenceStatus::kFinished) live.push_back(s.get());
  for (Sequence* seq : live) {
    RequestOutput out;
    out.index = seq->index;
    out.finish_reason = FinishReason::kAbort;
    finish(seq, out);
  }
}

void EngineCore::abort_all() {
  std::vector<std::string> ids;
  for (const auto& [id, seqs] : requests_) ids.push_back(id);
  for (const std::string& id : ids) abort(id);
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
  const int32_t token = sample(logits, req.sampling, seq->sampling, want_logprobs ? &sample_out : nullptr);
  seq->sampling.append(token);
  seq->output_ids.push_back(token);
  ++generation_tokens_total_;

  std::string text = seq->detokenizer ? seq->detokenizer->push(token) : std::string();
  StopResult stop = seq->stop.on_token(token, text);
  RequestOutput out;
  out.index = seq->index;
  out.token_ids.push_back(token);
  out.text = std::move(stop.emit);
  if (want_logprobs) {
    out.logprobs.push_back({token, sample_out.logprob});
    out.top_logprobs.push_back(std::move(sample_out.top_logprobs));
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

Status EngineCore::step() {
  SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) return {};
  StepInput input;
  input.tokens.reserve(static_cast<size_t>(out.num_tokens));
  for (const ScheduledChunk& c : out.chunks) {
    Sequence* seq = c.seq;
    for (int32_t i = 0; i < c.num_tokens; ++i) input.tokens.push_back(seq->token_at(seq->num_computed + i));
    StepSequence s;
    s.slot = seq->slot;
    s.q_len = c.num_tokens;
    s.kv_len = seq->num_computed + c.num_tokens;
    s.prefilling = c.prefilling;
    input.seqs.push_back(s);
    if (c.samples) input.logit_rows.push_back(static_cast<int32_t>(input.tokens.size()) - 1);
  }
  Status st = executor_->forward(input, logits_);
  if (!st.ok()) {
    fail_sequences(out, st);
    return st;
  }
  scheduler_.on_step_done(out);
  const auto vocab = static_cast<size_t>(vocab_size());
  size_t row = 0;
  for (const ScheduledChunk& c : out.chunks) {
    if (!c.samples) continue;
    std::span<float> logits(logits_.data() + row * vocab, vocab);
    ++row;
    if (!std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); })) {
      RequestOutput ro;
      ro.index = c.seq->index;
      ro.finish_reason = FinishReason::kError;
      ro.error = "the model produced non-finite logits";
      LS_LOG_ERROR("request {}: {}", c.seq->request->request_id, ro.error);
      finish(c.seq, ro);
      continue;
    }
    process_sample(c.seq, logits);
  }
  return {};
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.kv_usage = kv_->usage();
  s.kv_bytes_in_use = kv_->bytes_in_use();
  s.num_preemptions = scheduler_.num_preemptions();
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  const KvTierStats t = executor_->kv_tier_stats();
  s.kv_offload = t.enabled;
  s.kv_host_bytes = t.host_bytes;
  s.host_pinned_bytes = t.host_pinned_bytes;
  s.kv_device_cache_bytes = t.device_cache_bytes;
  s.kv_offload_hits_total = t.hits;
  s.kv_offload_misses_total = t.misses;
  s.kv_offload_bytes_total = t.bytes_retrieved;
  return s;
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
