#pragma once
// One /v1/completions or /v1/chat/completions call while the engine runs it: every prompt is one
// engine request ("<response id>-<prompt index>") with n choices, choice i of prompt p being
// response choice p * n + i (vLLM's numbering). The session collects outputs for a full
// response, or turns them into SSE events exactly as vLLM streams them:
//   - one event per engine output that carries tokens or text, or finishes a choice;
//   - chat: {"role":"assistant","content":""} for every choice once the first output arrives;
//   - include_usage: one "choices":[] event with the usage right before [DONE];
//   - an engine error: the error in-band, then [DONE].
// A session that is destroyed before it completed aborts its engine requests, so no path can
// leave work running for a client that is gone.

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_api.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/output_channel.h"
#include "server/server_metrics.h"
#include "structured/tool_call_parser.h"

namespace ls {

// Engine request ids of every live session, so Server::stop() can abort them all.
class LiveRequests {
 public:
  void add(const std::vector<std::string>& ids);
  void remove(const std::vector<std::string>& ids);
  std::vector<std::string> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::multiset<std::string> ids_;
};

class GenerationSession {
 public:
  GenerationSession(ParsedRequest request, ResponseMeta meta, Engine& engine,
                    const Tokenizer& tokenizer, std::shared_ptr<ServerMetrics> metrics,
                    LiveRequests& live);
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Submits every prompt. On an error, the prompts already submitted are aborted.
  Status start();

  // Non-streaming: waits for every choice and returns the response body. An engine error is
  // returned as its Status (internal → 500). `client_gone` is polled every `poll`; once it says
  // true the engine requests are aborted and kCancelled is returned.
  Result<std::string> wait_for_response(std::chrono::milliseconds poll,
                                        const std::function<bool()>& client_gone);

  // Streaming: waits up to `wait` for outputs and appends their events to `events`. Returns true
  // once the stream is complete ([DONE] included); later calls append nothing.
  bool next_events(std::chrono::milliseconds wait, std::vector<std::string>* events);

  // Aborts every engine request of the session (the client went away).
  void abort();

  bool complete() const { return complete_; }
  const std::vector<std::string>& engine_request_ids() const { return engine_ids_; }

 private:
  struct ChoiceState {
    ChoiceResult result;
    bool finished = false;
    bool echoed = false;          // the prompt text went out ahead of the first delta
    int64_t text_sent_chars = 0;  // code points streamed so far (completions text_offset)
    int32_t completion_tokens = 0;
    int32_t cached_tokens = -1;  // the engine request's prompt tokens found in the prefix cache
    // Chat with tool parsing: the text so far as content and tool-call deltas, and the ids of
    // the calls streamed.
    std::unique_ptr<grammar::ToolCallStreamer> tools;
    std::vector<std::string> tool_call_ids;
  };
  // A chat stream event of a choice whose text goes through the tool-call parser; nothing when
  // the parser holds the text back.
  void apply_tool_stream(int32_t index, ChoiceState& choice, const RequestOutput& out,
                         std::vector<std::string>* events);

  // Applies one output to its choice; appends stream events when `events` is given.
  void apply(const ChannelItem& item, std::vector<std::string>* events);
  // The part of apply() after prompt logprobs were taken: text, tokens, finish, events.
  void apply_output(int32_t index, const PromptInput& prompt, const RequestOutput& out,
                    std::vector<std::string>* events);
  void finish_stream(std::vector<std::string>* events);
  Usage usage() const;

  ParsedRequest request_;
  Engine& engine_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<ServerMetrics> metrics_;
  LiveRequests& live_;
  ResponseWriter writer_;
  std::shared_ptr<OutputChannel> channel_ = std::make_shared<OutputChannel>();
  std::vector<std::string> engine_ids_;  // [num_prompts], submitted so far
  std::vector<ChoiceState> choices_;     // [num_prompts * n]
  int32_t num_finished_ = 0;
  bool role_sent_ = false;
  bool complete_ = false;
  std::string error_;  // first engine error
  StatusCode error_code_ = StatusCode::kInternal;  // its kind (RequestOutput::error_code)
};

}  // namespace ls
