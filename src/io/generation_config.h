#pragma once
// GenerationConfig: the defaults a checkpoint's generation_config.json suggests (stop ids and
// sampling settings). Every field is optional: absent or null in the file -> nullopt, and a
// directory without the file yields an empty config. Values are read as stated, type-checked but
// not range-checked: whoever applies them (the engine's sampling parameters) validates them.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ls {

struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // eos_token_id, an int or a list (stop on any); may be empty
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::optional<double> min_p;
  std::optional<int64_t> max_new_tokens;
};

// Parses generation_config.json text; `source_name` names it in errors.
Result<GenerationConfig> parse_generation_config(std::string_view json,
                                                 std::string_view source_name);
// Reads <model_dir>/generation_config.json; an absent file gives an empty config.
Result<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir);

}  // namespace ls
