#pragma once
// AsyncEngine: the thread-safe Engine (engine_api.h) over an EngineCore. One engine thread owns
// the core and loops: take new requests and aborts from the inbox, run a step, repeat; it sleeps
// when there is no work. Outputs reach sinks on that thread, after the step that made them has
// updated stats(): a client that has seen its last token and then reads the metrics sees its
// tokens counted and its KV pages freed.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_api.h"
#include "engine/engine_core.h"

namespace ls {

class AsyncEngine final : public Engine {
 public:
  explicit AsyncEngine(std::unique_ptr<EngineCore> core);
  ~AsyncEngine() override;  // stops the thread; every unfinished request ends as aborted

  Status submit(GenerateRequest request, OutputSink sink) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override;
  int32_t max_model_len() const override { return core_->max_model_len(); }
  int32_t vocab_size() const override { return core_->vocab_size(); }
  const std::string& model_name() const override { return core_->model_name(); }
  const StopParams& default_stop() const override { return core_->default_stop(); }
  const SamplingParams& default_sampling() const override { return core_->default_sampling(); }

 private:
  void loop();
  // Publishes the core's stats, then hands the outputs collected since the last call to their
  // sinks (engine thread only).
  void publish();

  std::unique_ptr<EngineCore> core_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<GenerateRequest, OutputSink>> inbox_;
  std::vector<std::string> aborts_;
  EngineStats stats_;  // snapshot after each step
  // Outputs the core emitted during this loop iteration, delivered by publish(). Engine thread
  // only: no lock.
  std::vector<std::pair<std::shared_ptr<OutputSink>, RequestOutput>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ls
