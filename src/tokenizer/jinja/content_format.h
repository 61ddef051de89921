#pragma once
// Whether a template reads message content as a string or as OpenAI's list of parts, decided
// the way vLLM decides it (vllm/entrypoints/chat_utils.py, _detect_content_format): a template
// that loops over `message['content']` (or `.content`, possibly through filters, tests or
// slices) of a loop over `messages` (or a variable assigned from it) wants the list of parts;
// any other template wants a string.

#include "tokenizer/jinja/ast.h"

namespace ls::jinja {

// True when the template iterates over a message's content parts.
bool iterates_over_content_parts(const TemplateAst& ast);

}  // namespace ls::jinja
