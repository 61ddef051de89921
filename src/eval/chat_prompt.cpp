#include "eval/chat_prompt.h"

namespace ls::eval {

Result<std::string> answer_prefix(const EvalPrompt& p) {
  const std::string tail = " " + p.answer;
  if (p.chat_answer.size() <= tail.size() ||
      p.chat_answer.compare(p.chat_answer.size() - tail.size(), tail.size(), tail) != 0) {
    return invalid_argument("{}: chat_answer '{}' is not '<answer prefix> {}'", p.id,
                            p.chat_answer, p.answer);
  }
  return p.chat_answer.substr(0, p.chat_answer.size() - tail.size());
}

Result<std::string> chat_prompt_text(const ChatTemplate& chat, const EvalPrompt& p,
                                     const nlohmann::ordered_json& extra_context) {
  if (p.user_message.empty()) return invalid_argument("{}: the record has no user_message", p.id);
  LS_ASSIGN_OR_RETURN(std::string prefix, answer_prefix(p));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", p.user_message}});
  LS_ASSIGN_OR_RETURN(std::string text, chat.render(messages, true, extra_context));
  return text + prefix;
}

}  // namespace ls::eval
