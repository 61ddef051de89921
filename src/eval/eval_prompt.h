#pragma once
// One evaluation prompt, with the fields of the `--emit-eval-jsonl` records that
// scripts/model/train_tiny.py writes (docs/training.md, "--emit-eval-jsonl records"), so that
// prompts generated here and prompts emitted by Python are interchangeable.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls::eval {

struct EvalPrompt {
  std::string id;                     // "{task}-{L}-{depth:.2f or rand}-{i}"
  std::string task;                   // niah_single | niah_multikey | niah_multivalue | vt
  int32_t context_tokens = 0;         // the target length L
  int32_t num_prompt_tokens = 0;      // tokens of `prompt` with BOS (<= L)
  double depth = 0;                   // depth of the first answer item (rounded to 4 digits)
  bool depth_on_grid = false;         // niah_single: `depth` is a point of the depth grid (heatmap)
  std::string prompt;                 // raw text, no BOS; ends with the answer prefix
  std::string answer;                 // expected continuation, whitespace-stripped
  std::vector<std::string> answers;   // the answer's items
  std::string user_message;           // chat form of the prompt
  std::string chat_answer;            // expected assistant reply in chat form
  std::vector<double> needle_depths;  // every inserted item, in generation order
  std::vector<int32_t> needle_positions;  // token index (BOS = 0) of every item, in text order
};

// One JSON object per line (the Python record; depth_on_grid is derived from the id's depth tag).
Result<std::vector<EvalPrompt>> read_prompts_jsonl(const std::filesystem::path& path);
Result<std::vector<EvalPrompt>> parse_prompts_jsonl(std::string_view text, std::string_view source);
std::string prompt_to_json_line(const EvalPrompt& prompt);
Status write_prompts_jsonl(const std::filesystem::path& path,
                           const std::vector<EvalPrompt>& prompts);

}  // namespace ls::eval
