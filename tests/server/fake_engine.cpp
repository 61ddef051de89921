#include "fake_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ls::testing {

namespace {

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

FakeEngine::FakeEngine(FakeEngineOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { loop(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status FakeEngine::submit(GenerateRequest request, OutputSink sink) {
  if (request.prompt_ids.empty()) return invalid_argument("empty prompt");
  if (request.n < 1) return invalid_argument("n must be at least 1");
  if (request.prompt_ids.front() == options_.refuse_token) {
    return resource_exhausted("the engine is full");
  }
  LS_RETURN_IF_ERROR(request.sampling.validate(options_.vocab_size));
  LS_RETURN_IF_ERROR(request.stop.validate());
  const int64_t total = static_cast<int64_t>(request.prompt_ids.size()) + request.stop.max_tokens;
  if (total > options_.max_model_len) {
    return out_of_range("prompt + max_tokens = {} exceeds the context {}", total,
                        options_.max_model_len);
  }
  std::lock_guard lock(mu_);
  if (live_.count(request.request_id) != 0) {
    return invalid_argument("duplicate request id {}", request.request_id);
  }
  Live live;
  if (options_.cache_page_tokens > 0) {
    const auto& ids = request.prompt_ids;
    size_t best = 0;
    for (const GenerateRequest& earlier : submitted_) {
      size_t n = 0;
      while (n < ids.size() && n < earlier.prompt_ids.size() && ids[n] == earlier.prompt_ids[n]) ++n;
      best = std::max(best, n);
    }
    const auto page = static_cast<size_t>(options_.cache_page_tokens);
    live.cached_tokens = static_cast<int32_t>(std::min(best, ids.size() - 1) / page * page);
  }
  submitted_.push_back(request);
  for (int32_t i = 0; i < request.n; ++i) live.choices.push_back(Choice{i});
  live.request = std::move(request);
  live.sink = std::move(sink);
  const std::string id = live.request.request_id;
  live_.emplace(id, std::move(live));
  max_live_ = std::max(max_live_, static_cast<int32_t>(live_.size()));
  cv_.notify_all();
  return Status::ok_status();
}

void FakeEngine::abort(const std::string& request_id) {
  std::lock_guard lock(mu_);
  auto it = live_.find(request_id);
  if (it == live_.end() || it->second.aborted) return;
  it->second.aborted = true;
  aborted_.push_back(request_id);
  cv_.notify_all();
}

EngineStats FakeEngine::stats() const {
  std::lock_guard lock(mu_);
  EngineStats stats;
  stats.num_running = paused_ ? 0 : static_cast<int32_t>(live_.size());
  stats.num_waiting = paused_ ? static_cast<int32_t>(live_.size()) : 0;
  stats.kv_usage = std::min(1.0, static_cast<double>(live_.size()) / 16.0);
  stats.prompt_tokens_total = prompt_tokens_total_;
  stats.generation_tokens_total = generation_tokens_total_;
  return stats;
}

void FakeEngine::set_paused(bool paused) {
  std::lock_guard lock(mu_);
  paused_ = paused;
  cv_.notify_all();
}

std::vector<GenerateRequest> FakeEngine::submitted() const {
  std::lock_guard lock(mu_);
  return submitted_;
}

std::vector<std::string> FakeEngine::aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

int32_t FakeEngine::num_live() const {
  std::lock_guard lock(mu_);
  return static_cast<int32_t>(live_.size());
}

int32_t FakeEngine::max_live() const {
  std::lock_guard lock(mu_);
  return max_live_;
}

bool FakeEngine::wait_until(const std::function<bool()>& predicate,
                            std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return predicate();
}

void FakeEngine::step_choice(Live& live, Choice& choice, RequestOutput& out) {
  const GenerateRequest& request = live.request;
  const StopParams& stop = request.stop;
  const auto& prompt = request.prompt_ids;
  if (prompt.front() == options_.fail_token && choice.num_generated >= options_.fail_after_tokens) {
    out.finished = true;
    out.finish_reason = FinishReason::kError;
    out.error = "injected failure";
    return;
  }
  const int32_t token =
      prompt[static_cast<size_t>(choice.num_generated + choice.index) % prompt.size()];
  ++choice.num_generated;
  ++generation_tokens_total_;
  out.token_ids = {token};
  if (request.sampling.logprobs >= 0) {
    const float chosen = -0.25f * static_cast<float>(choice.num_generated);
    out.logprobs.push_back({token, chosen});
    std::vector<TokenLogprob> top;
    const int32_t n = request.sampling.logprobs;
    for (int32_t j = 0; j < n; ++j) {
      const bool last = n >= 2 && j == n - 1;
      top.push_back(
          {(token + j + 1) % options_.vocab_size,
           last ? -std::numeric_limits<float>::infinity() : chosen - static_cast<float>(j + 1)});
    }
    out.top_logprobs.push_back(std::move(top));
  }

  const bool may_stop = choice.num_generated >= stop.min_tokens;
  const bool is_eos = !stop.ignore_eos && contains(stop.eos_token_ids, token);
  if (may_stop && (is_eos || contains(stop.stop_token_ids, token))) {
    out.text = choice.full_text.substr(choice.sent_bytes);
    choice.sent_bytes = choice.full_text.size();
    out.finished = true;
    out.finish_reason = FinishReason::kStop;
    out.stop_reason = std::to_string(token);
    return;
  }
  choice.full_text += options_.token_text(token);

  // The earliest stop string that now appears in the text.
  size_t stop_pos = std::string::npos;
  const std::string* matched = nullptr;
  size_t longest_stop = 0;
  for (const std::string& s : stop.stop) {
    longest_stop = std::max(longest_stop, s.size());
    const size_t pos = choice.full_text.find(s);
    if (pos != std::string::npos && pos < stop_pos) {
      stop_pos = pos;
      matched = &s;
    }
  }
  if (matched != nullptr && may_stop) {
    const size_t end = stop.include_stop_str_in_output ? stop_pos + matched->size() : stop_pos;
    out.text = end > choice.sent_bytes
                   ? choice.full_text.substr(choice.sent_bytes, end - choice.sent_bytes)
                   : std::string();
    choice.sent_bytes = std::max(choice.sent_bytes, end);
    out.finished = true;
    out.finish_reason = FinishReason::kStop;
    out.stop_reason = *matched;
    return;
  }
  const int64_t context_used = static_cast<int64_t>(prompt.size()) + choice.num_generated;
  if (choice.num_generated >= stop.max_tokens || context_used >= options_.max_model_len) {
    out.text = choice.full_text.substr(choice.sent_bytes);
    choice.sent_bytes = choice.full_text.size();
    out.finished = true;
    out.finish_reason = FinishReason::kLength;
    return;
  }
  // Hold back what could still become a stop string.
  const size_t holdback = longest_stop > 0 ? longest_stop - 1 : 0;
  if (choice.full_text.size() > choice.sent_bytes + holdback) {
    const size_t upto = choice.full_text.size() - holdback;
    out.text = choice.full_text.substr(choice.sent_bytes, upto - choice.sent_bytes);
    choice.sent_bytes = upto;
  }
}

void FakeEngine::loop() {
  for (;;) {
    std::vector<std::pair<OutputSink, RequestOutput>> deliveries;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.step_interval, [&] { return shutdown_; });
      if (shutdown_) return;
      for (auto it = live_.begin(); it != live_.end();) {
        Live& live = it->second;
        if (paused_ && !live.aborted) {
          ++it;
          continue;
        }
        if (!live.prefilled) {
          prompt_tokens_total_ += static_cast<int64_t>(live.request.prompt_ids.size());
          live.prefilled = true;
        }
        bool all_finished = true;
        for (Choice& choice : live.choices) {
          if (choice.finished) continue;
          RequestOutput out;
          out.index = choice.index;
          if (live.aborted) {
            out.finished = true;
            out.finish_reason = FinishReason::kAbort;
          } else {
            step_choice(live, choice, out);
          }
          if (out.finished) {
            choice.finished = true;
            out.prompt_tokens = static_cast<int32_t>(live.request.prompt_ids.size());
            out.completion_tokens = choice.num_generated;
            out.cached_tokens = live.cached_tokens;
          } else {
            all_finished = false;
          }
          deliveries.emplace_back(live.sink, std::move(out));
        }
        it = all_finished ? live_.erase(it) : std::next(it);
      }
    }
    for (auto& [sink, output] : deliveries) sink(output);
  }
}

}  // namespace ls::testing
