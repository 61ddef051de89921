#include "structured/tool_parser_json_list.h"

#include <memory>
#include <string>

#include "structured/json_scan.h"

namespace ls::grammar {

bool scan_call_list(std::string_view text, size_t pos, ToolParse& out, bool* complete) {
  *complete = false;
  pos = skip_json_ws(text, pos);
  if (pos >= text.size()) return true;
  if (text[pos] != '[') return false;
  ++pos;
  while (true) {
    pos = skip_json_ws(text, pos);
    if (pos >= text.size()) return true;
    if (text[pos] == ']' && out.calls.empty()) {
      *complete = true;
      return true;
    }
    const CallScan scan = scan_call_object(text, pos, {"arguments", "parameters"});
    if (scan.kind == ScanKind::kInvalid) {
      push_partial(scan, out);
      return false;
    }
    ParsedToolCall call;
    if (scan.name) {
      call.name = *scan.name;
      call.name_complete = true;
    }
    if (scan.arguments) call.arguments = *scan.arguments;
    call.complete = scan.kind == ScanKind::kComplete;
    if (call.complete && !scan.name) {
      call.complete = false;
      out.calls.push_back(std::move(call));  // kept for non-final parses (see push_partial)
      return false;
    }
    if (call.complete && !scan.arguments) call.arguments = "{}";
    out.calls.push_back(std::move(call));
    if (scan.kind == ScanKind::kIncomplete) return true;
    pos = skip_json_ws(text, scan.end);
    if (pos >= text.size()) return true;
    if (text[pos] == ',') {
      ++pos;
      continue;
    }
    if (text[pos] == ']') {
      *complete = true;
      return true;
    }
    return false;
  }
}

namespace {

// tool_choice "required": the whole output is the list (constrained decoding makes it so).
class RequiredParser : public ToolCallParser {
 public:
  ToolParse parse(std::string_view text, bool final) const override {
    ToolParse out;
    bool complete = false;
    const bool valid = scan_call_list(text, 0, out, &complete);
    if (final && (!valid || !complete)) {
      out.calls.clear();
      out.content = std::string(text);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_required_tool_parser() {
  return std::make_unique<RequiredParser>();
}

}  // namespace ls::grammar
