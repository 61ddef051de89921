#pragma once
// Evaluation prompts in an instruct model's chat form, as RULER runs chat models: the task text
// (context, question) becomes the user message, the template's generation prompt follows, and
// the answer prefix ("The special magic number for X is") is appended after it, so the reply
// continues the prefix as the base-model prompt does.

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/eval_prompt.h"
#include "tokenizer/chat_template.h"

namespace ls::eval {

// The answer prefix a prompt's chat answer starts with: chat_answer = prefix + " " + answer.
// kInvalidArgument when the record's chat_answer does not have that form.
Result<std::string> answer_prefix(const EvalPrompt& prompt);

// The text to tokenize WITHOUT adding special tokens (the template writes its own BOS, if any):
// template([{role: user, content: user_message}], add_generation_prompt) + answer prefix.
// extra_context: bos_token / eos_token, as transformers passes them (may be null).
Result<std::string> chat_prompt_text(const ChatTemplate& chat, const EvalPrompt& prompt,
                                     const nlohmann::ordered_json& extra_context);

}  // namespace ls::eval
