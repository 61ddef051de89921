#include "structured/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include "structured/json_scan.h"

namespace ls::grammar {

std::unique_ptr<ToolCallParser> make_hermes_parser();
std::unique_ptr<ToolCallParser> make_llama3_json_parser();
std::unique_ptr<ToolCallParser> make_mistral_parser();

Result<std::unique_ptr<ToolCallParser>> make_tool_call_parser(std::string_view name) {
  if (name == "hermes") return make_hermes_parser();
  if (name == "llama3_json") return make_llama3_json_parser();
  if (name == "mistral") return make_mistral_parser();
  return invalid_argument("unknown tool call parser '{}' (known: hermes, llama3_json, mistral)",
                          name);
}

void push_partial(const CallScan& scan, ToolParse& out) {
  ParsedToolCall call;
  if (scan.name) {
    call.name = *scan.name;
    call.name_complete = true;
  }
  if (scan.arguments) call.arguments = *scan.arguments;
  out.calls.push_back(std::move(call));
}

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  const size_t max = std::min(text.size(), marker.size() - 1);
  for (size_t k = max; k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

namespace {

class NamedParser : public ToolCallParser {
 public:
  explicit NamedParser(std::string name) : name_(std::move(name)) {}
  ToolParse parse(std::string_view text, bool final) const override {
    ToolParse out;
    ParsedToolCall call;
    call.name = name_;
    call.name_complete = true;
    call.arguments = std::string(text);
    call.complete = final;
    out.calls.push_back(std::move(call));
    return out;
  }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_named_tool_parser(std::string function_name) {
  return std::make_unique<NamedParser>(std::move(function_name));
}

ToolCallStreamer::Delta ToolCallStreamer::push(std::string_view new_text, bool final) {
  text_.append(new_text);
  const ToolParse parse = parser_.parse(text_, final);
  Delta d;
  if (parse.content.size() > content_sent_ && parse.calls.empty()) {
    d.content = parse.content.substr(content_sent_);
    content_sent_ = parse.content.size();
  } else if (parse.content.size() > content_sent_) {
    d.content = parse.content.substr(content_sent_);
    content_sent_ = parse.content.size();
  }
  for (size_t i = 0; i < parse.calls.size(); ++i) {
    const ParsedToolCall& call = parse.calls[i];
    if (!call.name_complete) break;  // later calls wait for this one's name
    CallDelta cd;
    cd.index = static_cast<int32_t>(i);
    if (i >= args_sent_.size()) {
      cd.first = true;
      cd.name = call.name;
      args_sent_.push_back(0);
    }
    size_t& sent = args_sent_[i];
    if (call.arguments.size() > sent) {
      cd.arguments = call.arguments.substr(sent);
      sent = call.arguments.size();
    }
    if (cd.first || !cd.arguments.empty()) d.calls.push_back(std::move(cd));
  }
  return d;
}

}  // namespace ls::grammar
