#include "server/chat_messages.h"

#include <string_view>
#include <utility>

#include "tokenizer/chat_template.h"

namespace ls {

namespace {

// Python's str.strip() over ASCII whitespace (what chat text trims in practice).
std::string_view strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const size_t last = s.find_last_not_of(kSpace);
  return s.substr(first, last - first + 1);
}

std::string_view lstrip(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\n\r\f\v");
  return first == std::string_view::npos ? std::string_view() : s.substr(first);
}

// The text parts of `content` (null: none; a string: one).
Result<std::vector<std::string>> text_parts(const Json& content, size_t index) {
  std::vector<std::string> texts;
  if (content.is_null()) return texts;
  if (content.is_string()) {
    texts.push_back(content.get<std::string>());
    return texts;
  }
  if (!content.is_array()) {
    return invalid_argument("messages[{}].content must be a string or a list of content parts",
                            index);
  }
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    if (part.is_string()) {  // vLLM accepts a bare string as a text part
      texts.push_back(part.get<std::string>());
      continue;
    }
    const Json* type = part.is_object() ? find_field(part, "type") : nullptr;
    const Json* text = part.is_object() ? find_field(part, "text") : nullptr;
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text" ||
        text == nullptr || !text->is_string()) {
      return invalid_argument(
          "messages[{}].content[{}]: only {{\"type\": \"text\", \"text\": ...}} parts are "
          "supported (this server serves text models)",
          index, j);
    }
    texts.push_back(text->get<std::string>());
  }
  return texts;
}

// Parses string arguments into objects, in place.
Status parse_tool_call_arguments(Json& tool_calls, size_t index) {
  if (!tool_calls.is_array()) {
    return invalid_argument("messages[{}].tool_calls must be a list", index);
  }
  for (size_t k = 0; k < tool_calls.size(); ++k) {
    Json& call = tool_calls[k];
    if (!call.is_object()) {
      return invalid_argument("messages[{}].tool_calls[{}] must be an object", index, k);
    }
    const auto function = call.find("function");
    if (function == call.end() || !function->is_object()) {
      return invalid_argument("messages[{}].tool_calls[{}] needs a 'function' object", index, k);
    }
    auto arguments = function->find("arguments");
    if (arguments == function->end() || arguments->is_null() ||
        (arguments->is_string() && arguments->get_ref<const std::string&>().empty())) {
      (*function)["arguments"] = Json::object();
      continue;
    }
    if (arguments->is_object() || arguments->is_array()) continue;
    if (!arguments->is_string()) {
      return invalid_argument("messages[{}].tool_calls[{}].function.arguments must be a string",
                              index, k);
    }
    Json parsed = Json::parse(arguments->get_ref<const std::string&>(), nullptr,
                              /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return invalid_argument(
          "messages[{}].tool_calls[{}].function.arguments is not valid JSON", index, k);
    }
    *arguments = std::move(parsed);
  }
  return Status::ok_status();
}

}  // namespace

Result<Json> prepare_chat_messages(const Json& messages, const ChatTemplate& chat_template) {
  if (!messages.is_array()) return invalid_argument("'messages' must be a list of messages");
  if (messages.empty()) return invalid_argument("'messages' must not be empty");
  const bool parts_as_list = chat_template.content_format() == ChatContentFormat::kOpenAi;
  const bool knows_developer = chat_template.source().find("developer") != std::string::npos;
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& message = messages[i];
    if (!message.is_object()) return invalid_argument("messages[{}] must be an object", i);
    const Json* role_field = find_field(message, "role");
    if (role_field == nullptr || !role_field->is_string()) {
      return invalid_argument("messages[{}] needs a string 'role'", i);
    }
    std::string role = role_field->get<std::string>();
    if (role == "developer" && !knows_developer) role = "system";

    const auto content_it = message.find("content");
    LS_ASSIGN_OR_RETURN(
        std::vector<std::string> texts,
        text_parts(content_it == message.end() ? Json(nullptr) : *content_it, i));
    Json prepared = Json::object();
    prepared["role"] = role;
    if (parts_as_list) {
      Json parts = Json::array();
      for (std::string& text : texts) {
        parts.push_back(Json{{"type", "text"}, {"text", std::move(text)}});
      }
      prepared["content"] = std::move(parts);
    } else {
      std::string joined;
      for (size_t j = 0; j < texts.size(); ++j) {
        if (j > 0) joined += '\n';
        joined += texts[j];
      }
      prepared["content"] = std::move(joined);
    }
    if (role == "assistant") {
      if (const Json* calls = find_field(message, "tool_calls")) {
        Json copy = *calls;
        LS_RETURN_IF_ERROR(parse_tool_call_arguments(copy, i));
        prepared["tool_calls"] = std::move(copy);
      }
      const Json* reasoning = find_field(message, "reasoning");
      if (reasoning == nullptr) reasoning = find_field(message, "reasoning_content");
      if (reasoning != nullptr && reasoning->is_string()) {
        prepared["reasoning"] = *reasoning;
        prepared["reasoning_content"] = *reasoning;
      }
    } else if (role == "tool") {
      if (const Json* id = find_field(message, "tool_call_id")) prepared["tool_call_id"] = *id;
    }
    if (const Json* name = find_field(message, "name"); name != nullptr && name->is_string()) {
      prepared["name"] = *name;
    }
    out.push_back(std::move(prepared));
  }
  return out;
}

Result<std::string> cut_after_final_message(const std::string& rendered, const Json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return invalid_argument("continue_final_message needs at least one message");
  }
  const Json& last = messages.back();
  std::string final_text;
  const Json* content = last.is_object() ? find_field(last, "content") : nullptr;
  if (content != nullptr && content->is_string()) {
    final_text = content->get<std::string>();
  } else if (content != nullptr && content->is_array()) {
    bool found = false;
    for (auto it = content->rbegin(); it != content->rend() && !found; ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        final_text = (*it)["text"].get<std::string>();
        found = true;
      }
    }
    if (!found) {
      return invalid_argument(
          "continue_final_message is set but we could not find any text to continue in the "
          "final message!");
    }
  }
  const std::string_view stripped = strip(final_text);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos) {
    return invalid_argument(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template!");
  }
  // As transformers: keep the message's own trailing spacing when the template kept it.
  const std::string_view left = lstrip(final_text);
  if (std::string_view(rendered).substr(at, left.size()) == final_text) {
    return rendered.substr(0, at + left.size());
  }
  return rendered.substr(0, at + stripped.size());
}

}  // namespace ls
