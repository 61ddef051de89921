#include "engine/async_engine.h"

#include <algorithm>

#include "core/log.h"

namespace ls {

AsyncEngine::AsyncEngine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {
  stats_ = core_->stats();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status AsyncEngine::submit(GenerateRequest request, OutputSink sink) {
  LS_RETURN_IF_ERROR(core_->validate_request(request));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return cancelled("the engine is shutting down");
    // An engine that went down refuses at once (a request already queued gets the error from
    // add_request on the engine thread).
    if (!stats_.engine_error.empty()) return failed_precondition("{}", stats_.engine_error);
    inbox_.emplace_back(std::move(request), std::move(sink));
  }
  cv_.notify_one();
  return {};
}

void AsyncEngine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(request_id);
  }
  cv_.notify_one();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void AsyncEngine::publish() {
  EngineStats s = core_->stats();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = s;
  }
  std::vector<std::pair<std::shared_ptr<OutputSink>, RequestOutput>> outputs;
  outputs.swap(pending_);
  for (const auto& [sink, out] : outputs) (*sink)(out);
}

void AsyncEngine::loop() {
  while (true) {
    std::vector<std::pair<GenerateRequest, OutputSink>> inbox;
    std::vector<std::string> aborts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || core_->has_work(); });
      if (stop_) break;
      inbox.swap(inbox_);
      aborts.swap(aborts_);
    }
    for (auto& [request, sink] : inbox) {
      auto shared = std::make_shared<OutputSink>(std::move(sink));
      Status st = core_->add_request(std::move(request), [this, shared](const RequestOutput& out) {
        pending_.emplace_back(shared, out);
      });
      if (!st.ok()) {  // e.g. a duplicate id: the request ends at once with the error
        RequestOutput out;
        out.finished = true;
        out.finish_reason = FinishReason::kError;
        out.error = st.message();
        // An engine that went down while the request sat here refuses it as submit() would.
        out.error_code = st.code();
        pending_.emplace_back(shared, std::move(out));
      }
    }
    for (const std::string& id : aborts) core_->abort(id);
    Status st = core_->step();
    if (!st.ok() && core_->fatal_error().ok()) LS_LOG_WARN("engine step: {}", st.to_string());
    publish();
  }
  // Shutdown: everything running ends as aborted, and so does every choice still queued.
  core_->abort_all();
  publish();
  std::vector<std::pair<GenerateRequest, OutputSink>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);  // submit() refuses new work once stop_ is set
    queued.swap(inbox_);
  }
  for (auto& [request, sink] : queued) {
    for (int32_t i = 0; i < std::max(1, request.n); ++i) {
      RequestOutput out;
      out.index = i;
      out.finished = true;
      out.finish_reason = FinishReason::kAbort;
      out.prompt_tokens = static_cast<int32_t>(request.prompt_ids.size());
      sink(out);
    }
  }
}

}  // namespace ls
