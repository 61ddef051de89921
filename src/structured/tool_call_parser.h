#pragma once
// Tool calls out of a model's text, in the formats vLLM's --tool-call-parser names:
//   hermes       content <tool_call>{"name": N, "arguments": A}</tool_call> ... (Hermes, Qwen)
//   llama3_json  [<|python_tag|>]{"name": N, "parameters": A}[; {...}]       (Llama 3.x)
//   mistral      content [TOOL_CALLS][{"name": N, "arguments": A}, ...]
//                or content [TOOL_CALLS]N[ARGS]A / [TOOL_CALLS]N A (tokenizer v11+)
// plus the two forms constrained decoding produces for tool_choice (as vLLM):
//   required     [{"name": N, "parameters": A}, ...]
//   named        A alone, for the one named function.
//
// parse(text, final) works on the whole text so far. While !final, every field it returns is a
// prefix of what it returns for any longer text (content stops before anything that could
// still become a tool-call marker; arguments are the raw bytes of the value so far), so a stream
// sends the difference each time (ToolCallStreamer). With final, a text whose calls are not
// valid JSON gives no calls and the whole text as content (vLLM's behaviour).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::grammar {

struct ParsedToolCall {
  std::string name;       // set once name_complete
  bool name_complete = false;
  std::string arguments;  // raw JSON text of the arguments so far
  bool complete = false;  // the call (and its arguments) ended
};

struct ToolParse {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ToolParse parse(std::string_view text, bool final) const = 0;
};

// "hermes", "llama3_json", "mistral"; errors name the known parsers.
Result<std::unique_ptr<ToolCallParser>> make_tool_call_parser(std::string_view name);
std::unique_ptr<ToolCallParser> make_required_tool_parser();
std::unique_ptr<ToolCallParser> make_named_tool_parser(std::string function_name);

// Turns the parses of a growing text into stream deltas.
class ToolCallStreamer {
 public:
  struct CallDelta {
    int32_t index = 0;
    bool first = false;      // the call's first delta: carries its id, type and name
    std::string name;
    std::string arguments;   // new argument text
  };
  struct Delta {
    std::string content;
    std::vector<CallDelta> calls;
    bool empty() const { return content.empty() && calls.empty(); }
  };

  explicit ToolCallStreamer(const ToolCallParser& parser) : parser_(parser) {}
  Delta push(std::string_view new_text, bool final);
  const std::string& text() const { return text_; }
  int32_t calls_started() const { return static_cast<int32_t>(args_sent_.size()); }

 private:
  const ToolCallParser& parser_;
  std::string text_;
  size_t content_sent_ = 0;
  std::vector<size_t> args_sent_;  // per call started
};

// Helpers the parsers share.
struct CallScan;
// Appends the fields an invalid call scan found before its fault as an unfinished call (a
// non-final parse must keep what earlier, shorter texts showed; a final one drops it).
void push_partial(const CallScan& scan, ToolParse& out);
// Length of text's longest suffix that is a proper prefix of marker (held back while streaming).
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

}  // namespace ls::grammar
