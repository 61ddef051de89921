#pragma once
// Chat messages as vLLM prepares them for a chat template (vllm/entrypoints/chat_utils.py), so a
// template sees what it would see under vLLM and transformers' apply_chat_template:
//   - content: a string, a list of {"type": "text", "text"} parts, or null. Templates that loop
//     over a message's parts get the list ([] for null, a string becomes one part); the others
//     get the text parts joined with "\n" ("" for null);
//   - role "developer" becomes "system" when the template never mentions "developer";
//   - each message keeps role, content and a string name; assistant messages their tool_calls
//     and reasoning (as both "reasoning" and "reasoning_content"); tool messages tool_call_id;
//   - tool_calls' function.arguments given as a JSON string are parsed into the object (empty
//     or null: {}), as transformers' templates expect.
// Errors are kInvalidArgument with the offending message's index.

#include <string>

#include "core/status.h"
#include "server/json_fields.h"

namespace ls {

class ChatTemplate;

Result<Json> prepare_chat_messages(const Json& messages, const ChatTemplate& chat_template);

// transformers' continue_final_message: `rendered` (rendered without a generation prompt) is cut
// right after the last message's text, so the model continues it. Errors when that text is not
// in the rendering.
Result<std::string> cut_after_final_message(const std::string& rendered, const Json& messages);

}  // namespace ls
