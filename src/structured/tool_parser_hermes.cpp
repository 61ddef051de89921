// hermes: content, then <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks (Hermes 2/3,
// Qwen2.5, Qwen3). Content is the text before the first <tool_call>, as in vLLM.

#include <memory>
#include <string>
#include <string_view>

#include "structured/json_scan.h"
#include "structured/tool_call_parser.h"

namespace ls::grammar {

namespace {

constexpr std::string_view kStart = "<tool_call>";
constexpr std::string_view kEnd = "</tool_call>";

class HermesParser : public ToolCallParser {
 public:
  ToolParse parse(std::string_view text, bool final) const override {
    ToolParse out;
    const size_t start = text.find(kStart);
    if (start == std::string_view::npos) {
      const size_t hold = final ? 0 : partial_marker_suffix(text, kStart);
      out.content = std::string(text.substr(0, text.size() - hold));
      return out;
    }
    out.content = std::string(text.substr(0, start));
    size_t pos = start;
    bool valid = true;
    bool finished = false;
    while (true) {
      pos += kStart.size();
      const CallScan scan = scan_call_object(text, pos, {"arguments", "parameters"});
      if (scan.kind == ScanKind::kInvalid) {
        push_partial(scan, out);
        valid = false;
        break;
      }
      ParsedToolCall call;
      if (scan.name) {
        call.name = *scan.name;
        call.name_complete = true;
      }
      if (scan.arguments) call.arguments = *scan.arguments;
      call.complete = scan.kind == ScanKind::kComplete;
      if (call.complete && !scan.name) {
        out.calls.push_back(std::move(call));  // kept for non-final parses (see push_partial)
        valid = false;
        break;
      }
      if (call.complete && !scan.arguments) call.arguments = "{}";
      out.calls.push_back(std::move(call));
      if (scan.kind == ScanKind::kIncomplete) break;
      pos = skip_json_ws(text, scan.end);
      const std::string_view rest = text.substr(pos);
      if (rest.size() < kEnd.size()) {
        // The closing tag may still be coming (or was never written: accepted when final, as
        // vLLM's regex also accepts a call the model did not close).
        if (kEnd.substr(0, rest.size()) != rest) valid = false;
        finished = rest.empty();
        break;
      }
      if (rest.substr(0, kEnd.size()) != kEnd) {
        valid = false;
        break;
      }
      pos = skip_json_ws(text, pos + kEnd.size());
      if (text.substr(pos, kStart.size()) != kStart) {
        finished = true;  // whatever follows the last call is dropped, as in vLLM
        break;
      }
    }
    if (final && (!valid || (!finished && !out.calls.empty() && !out.calls.back().complete))) {
      out.content = std::string(text);
      out.calls.clear();
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_hermes_parser() { return std::make_unique<HermesParser>(); }

}  // namespace ls::grammar
