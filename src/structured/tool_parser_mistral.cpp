// mistral: content, then [TOOL_CALLS] followed either by a JSON list of
// {"name": N, "arguments": A} (tokenizers before v11) or by N[ARGS]A / N A, repeated with
// another [TOOL_CALLS] for each further call (v11 and later).

#include <memory>
#include <string>
#include <string_view>

#include "structured/json_scan.h"
#include "structured/tool_call_parser.h"
#include "structured/tool_parser_json_list.h"

namespace ls::grammar {

namespace {

constexpr std::string_view kMarker = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";

class MistralParser : public ToolCallParser {
 public:
  ToolParse parse(std::string_view text, bool final) const override {
    ToolParse out;
    const size_t start = text.find(kMarker);
    if (start == std::string_view::npos) {
      const size_t hold = final ? 0 : partial_marker_suffix(text, kMarker);
      out.content = std::string(text.substr(0, text.size() - hold));
      return out;
    }
    out.content = std::string(text.substr(0, start));
    size_t pos = skip_json_ws(text, start + kMarker.size());
    bool valid = true;
    bool complete = false;
    if (pos < text.size() && text[pos] == '[') {
      valid = scan_call_list(text, pos, out, &complete);
    } else {
      valid = scan_named_calls(text, start + kMarker.size(), out, &complete);
    }
    if (final && (!valid || !complete)) {
      out.calls.clear();
      out.content = std::string(text);
    }
    return out;
  }

 private:
  // N[ARGS]A or N A (A a JSON value), then optionally [TOOL_CALLS] and another call.
  static bool scan_named_calls(std::string_view text, size_t pos, ToolParse& out,
                               bool* complete) {
    *complete = false;
    while (true) {
      pos = skip_json_ws(text, pos);
      // The name runs to '[ARGS]' or to the '{' that starts the arguments.
      size_t name_end = pos;
      while (name_end < text.size() && text[name_end] != '[' && text[name_end] != '{' &&
             text[name_end] != ' ' && text[name_end] != '\n') {
        ++name_end;
      }
      ParsedToolCall call;
      if (name_end >= text.size()) {
        if (name_end > pos) out.calls.push_back(call);  // name still growing
        return true;
      }
      if (name_end == pos) return false;
      call.name = std::string(text.substr(pos, name_end - pos));
      call.name_complete = true;
      size_t args = name_end;
      if (text[args] == '[') {
        const std::string_view rest = text.substr(args);
        if (rest.size() < kArgs.size()) {
          out.calls.push_back(call);
          return kArgs.substr(0, rest.size()) == rest;
        }
        if (rest.substr(0, kArgs.size()) != kArgs) {
          out.calls.push_back(call);
          return false;
        }
        args += kArgs.size();
      }
      const ScanResult value = scan_json_value(text, args);
      call.arguments = std::string(text.substr(value.begin, value.end - value.begin));
      if (value.kind == ScanKind::kInvalid) {
        out.calls.push_back(std::move(call));
        return false;
      }
      call.complete = value.kind == ScanKind::kComplete;
      out.calls.push_back(std::move(call));
      if (value.kind == ScanKind::kIncomplete) return true;
      pos = skip_json_ws(text, value.end);
      if (pos >= text.size()) {
        *complete = true;
        return true;
      }
      const std::string_view rest = text.substr(pos);
      if (rest.size() < kMarker.size()) {
        *complete = true;  // a marker may be starting; the calls so far are whole
        return kMarker.substr(0, rest.size()) == rest;
      }
      if (rest.substr(0, kMarker.size()) != kMarker) return false;
      pos += kMarker.size();
    }
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_mistral_parser() { return std::make_unique<MistralParser>(); }

}  // namespace ls::grammar
