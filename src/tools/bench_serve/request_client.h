#pragma once
// One benchmark request: a streaming POST to an OpenAI-compatible server, timed as vLLM's
// bench client times it. TTFT is the first SSE message whose "choices" is non-empty (even with
// empty text); every later such message adds one ITL gap; latency ends at the last of them.
// The output token count comes from the usage message (include_usage).

#include <cstdint>
#include <string>
#include <vector>

namespace ls {

struct Endpoint {
  std::string base_url;  // "http://host:port"
  std::string path;      // "/v1/completions" or "/v1/chat/completions"
  bool chat = false;
  std::string api_key;  // sent as a bearer token when not empty
  double timeout_s = 6 * 3600.0;
};

struct RequestSpec {
  std::string model;
  std::string prompt;
  int32_t prompt_len = 0;
  int32_t max_tokens = 0;
  bool ignore_eos = true;
  double temperature = 0.0;
  // Earlier turns of a conversation (--multi-turn), oldest first: user, assistant, user, ...
  // Chat sends them as messages before `prompt`; completions sends their concatenation + prompt.
  std::vector<std::string> history;
};

struct RequestOutcome {
  bool success = false;
  std::string error;
  std::string generated_text;
  int32_t prompt_len = 0;
  int32_t output_tokens = 0;  // usage.completion_tokens; 0 when the server sent no usage
  int32_t usage_prompt_tokens = -1;  // usage.prompt_tokens; -1 when absent
  // usage.prompt_tokens_details.cached_tokens; -1 when absent (prefix caching off)
  int32_t cached_tokens = -1;
  double start_s = 0.0;       // monotonic send time
  // Monotonic time the request was due (its arrival offset); start_s - dispatch_s is the time it
  // waited in the client for a free sender under --max-concurrency.
  double dispatch_s = 0.0;
  double ttft_s = 0.0;
  double latency_s = 0.0;
  std::vector<double> itl_s;  // [num_token_messages - 1]
};

// The JSON body vLLM's openai / openai-chat backends send.
std::string make_request_body(const Endpoint& endpoint, const RequestSpec& spec);

// Sends the request and reads the whole stream; never throws.
RequestOutcome send_streaming_request(const Endpoint& endpoint, const RequestSpec& spec);

// Feeds raw response bytes to the SSE parser used by send_streaming_request (exposed for tests).
class SseTimer {
 public:
  SseTimer(RequestOutcome* outcome, bool chat) : outcome_(outcome), chat_(chat) {}
  // Consumes bytes; `now_s` is the arrival time of this piece.
  void feed(const char* data, size_t size, double now_s);
  // Call after the stream ended: sets success, error and latency.
  void finish();

 private:
  void handle_line(const std::string& line, double now_s);

  RequestOutcome* outcome_;
  bool chat_;
  std::string pending_;  // bytes after the last newline
  bool first_received_ = false;
  double last_s_ = 0.0;
  bool done_ = false;
};

}  // namespace ls
