#pragma once
// A deterministic Engine for server and bench tests: its own thread emits one token per step for
// every live choice, by a rule simple enough for tests to predict independently:
//   choice c, step k (0-based) emits prompt_ids[(k + c) % num_prompt_tokens]
// with text token_text(token). It honours max_tokens and the context length (finish "length"),
// eos ids unless ignore_eos, stop_token_ids and min_tokens (finish "stop"), stop strings (held
// back like vLLM, cut unless include_stop_str_in_output), logprobs, and abort (final output
// with kAbort). It records every submitted request and every abort for the tests to inspect.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_api.h"

namespace ls::testing {

struct FakeEngineOptions {
  std::string model_name = "fake-model";
  int32_t max_model_len = 256;
  int32_t vocab_size = 1024;
  std::chrono::microseconds step_interval{200};
  std::function<std::string(int32_t)> token_text;  // required
  SamplingParams default_sampling;
  StopParams default_stop;
  // A request whose first prompt token is fail_token fails (kError) after fail_after_tokens
  // tokens; -1 disables this.
  int32_t fail_token = -1;
  int32_t fail_after_tokens = 2;
  // submit() refuses (resource_exhausted) a request whose first prompt token is refuse_token.
  int32_t refuse_token = -1;
  // > 0: a stand-in prefix cache reports cached_tokens on final outputs: the longest common
  // prefix of the prompt with an earlier request's prompt, in whole pages of this many tokens,
  // short of the last prompt token. 0: no cached_tokens (prefix caching off).
  int32_t cache_page_tokens = 0;
};

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(FakeEngineOptions options);
  ~FakeEngine() override;

  Status submit(GenerateRequest request, OutputSink sink) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override;
  int32_t max_model_len() const override { return options_.max_model_len; }
  int32_t vocab_size() const override { return options_.vocab_size; }
  const std::string& model_name() const override { return options_.model_name; }
  const StopParams& default_stop() const override { return options_.default_stop; }
  const SamplingParams& default_sampling() const override { return options_.default_sampling; }

  // Test controls and observations.
  void set_paused(bool paused);
  std::vector<GenerateRequest> submitted() const;
  std::vector<std::string> aborted() const;  // ids that were live when abort() was called
  int32_t num_live() const;
  int32_t max_live() const;  // most requests live at once so far
  bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) const;

 private:
  struct Choice {
    int32_t index = 0;
    int32_t num_generated = 0;
    std::string full_text;  // everything decoded so far
    size_t sent_bytes = 0;  // prefix of full_text already delivered
    bool finished = false;
  };
  struct Live {
    GenerateRequest request;
    OutputSink sink;
    std::vector<Choice> choices;
    bool aborted = false;
    bool prefilled = false;
    int32_t cached_tokens = -1;
  };
  void loop();
  // One step of one choice; fills `out`.
  void step_choice(Live& live, Choice& choice, RequestOutput& out);

  FakeEngineOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Live> live_;
  std::vector<GenerateRequest> submitted_;
  std::vector<std::string> aborted_;
  int32_t max_live_ = 0;
  bool paused_ = false;
  bool shutdown_ = false;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  std::thread thread_;
};

}  // namespace ls::testing
