// --chat prompts: the task's user message inside the model's chat template, then the answer
// prefix (as RULER's chat templates place it), checked against the text transformers'
// apply_chat_template renders for SmolLM2-135M-Instruct's template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "eval/chat_prompt.h"
#include "eval/eval_prompt.h"
#include "tokenizer/chat_template.h"

namespace ls::eval {
namespace {

// SmolLM2-135M-Instruct's tokenizer.chat_template (ChatML with a default system message).
constexpr const char* kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

EvalPrompt needle_prompt() {
  EvalPrompt p;
  p.id = "niah_single-2048-0.50-0";
  p.user_message = "Some text. One of the special magic numbers for river is: 3633662. More text.\n"
                   "What is the special magic number for river mentioned in the provided text?";
  p.answer = "3633662";
  p.answers = {"3633662"};
  p.chat_answer = "The special magic number for river is 3633662";
  return p;
}

TEST(ChatPrompt, UserMessageGenerationPromptThenAnswerPrefix) {
  auto chat = ChatTemplate::parse(kSmolLm2Template);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  const EvalPrompt p = needle_prompt();
  auto prefix = answer_prefix(p);
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(*prefix, "The special magic number for river is");
  auto text = chat_prompt_text(*chat, p, nlohmann::ordered_json::object());
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\n" +
                p.user_message +
                "<|im_end|>\n<|im_start|>assistant\nThe special magic number for river is");
}

TEST(ChatPrompt, RecordsWithoutAChatFormAreRefused) {
  auto chat = ChatTemplate::parse(kSmolLm2Template);
  ASSERT_TRUE(chat.ok());
  EvalPrompt p = needle_prompt();
  p.chat_answer = "3633662";  // no prefix before the answer
  EXPECT_FALSE(answer_prefix(p).ok());
  p.chat_answer = "The number is 1234567";  // ends with another answer
  EXPECT_FALSE(chat_prompt_text(*chat, p, nullptr).ok());
  p = needle_prompt();
  p.user_message.clear();
  EXPECT_FALSE(chat_prompt_text(*chat, p, nullptr).ok());
}

}  // namespace
}  // namespace ls::eval
