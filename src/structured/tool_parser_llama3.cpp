// llama3_json: Llama 3.x JSON tool calls. The output is a call when it starts (after whitespace)
// with <|python_tag|> or '{': then one or more {"name": N, "parameters": A} objects separated
// by ';' and no content; any other output is content (vLLM's rule).

#include <memory>
#include <string>
#include <string_view>

#include "structured/json_scan.h"
#include "structured/tool_call_parser.h"

namespace ls::grammar {

namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonParser : public ToolCallParser {
 public:
  ToolParse parse(std::string_view text, bool final) const override {
    ToolParse out;
    size_t pos = skip_json_ws(text, 0);
    const std::string_view rest = text.substr(pos);
    if (!final && (rest.empty() || (rest.size() < kPythonTag.size() &&
                                    kPythonTag.substr(0, rest.size()) == rest))) {
      return out;  // undecided: hold everything back
    }
    if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
      pos += kPythonTag.size();
    } else if (rest.empty() || rest[0] != '{') {
      out.content = std::string(text);
      return out;
    }
    bool valid = true;
    while (true) {
      const CallScan scan = scan_call_object(text, pos, {"parameters", "arguments"});
      if (scan.kind == ScanKind::kInvalid) {
        push_partial(scan, out);
        valid = false;
        break;
      }
      if (scan.kind == ScanKind::kIncomplete && skip_json_ws(text, pos) >= text.size() &&
          !out.calls.empty()) {
        break;  // nothing of the next call yet
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
      if (pos >= text.size()) break;
      if (text[pos] != ';') {
        valid = false;
        break;
      }
      ++pos;
    }
    if (final && (!valid || out.calls.empty() || !out.calls.back().complete)) {
      out.calls.clear();
      out.content = std::string(text);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_llama3_json_parser() {
  return std::make_unique<Llama3JsonParser>();
}

}  // namespace ls::grammar
