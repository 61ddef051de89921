#include "eval/eval_prompt.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ls::eval {

namespace {

// The id's third dash-separated field from the end is the depth tag ("0.10" or "rand").
bool id_has_grid_depth(std::string_view id) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t dash = id.find('-', begin);
    parts.push_back(id.substr(begin, dash == std::string_view::npos ? dash : dash - begin));
    if (dash == std::string_view::npos) break;
    begin = dash + 1;
  }
  // {task}-{L}-{tag}-{i}[-chat]
  const size_t tag =
      parts.size() >= 5 && parts.back() == "chat" ? parts.size() - 3 : parts.size() - 2;
  return parts.size() >= 4 && parts[tag] != "rand";
}

}  // namespace

Result<std::vector<EvalPrompt>> parse_prompts_jsonl(std::string_view text,
                                                    std::string_view source) {
  std::vector<EvalPrompt> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      EvalPrompt p;
      p.id = j.at("id").get<std::string>();
      p.task = j.at("task").get<std::string>();
      p.context_tokens = j.at("context_tokens").get<int32_t>();
      p.num_prompt_tokens = j.value("num_prompt_tokens", 0);
      p.depth = j.value("depth", 0.0);
      p.prompt = j.at("prompt").get<std::string>();
      p.answer = j.at("answer").get<std::string>();
      p.answers = j.value("answers", std::vector<std::string>{p.answer});
      p.user_message = j.value("user_message", std::string());
      p.chat_answer = j.value("chat_answer", std::string());
      p.needle_depths = j.value("needle_depths", std::vector<double>{});
      p.needle_positions = j.value("needle_positions", std::vector<int32_t>{});
      p.depth_on_grid = id_has_grid_depth(p.id);
      out.push_back(std::move(p));
    } catch (const std::exception& e) {
      return data_loss("{}:{}: not an evaluation record: {}", source, line_no, e.what());
    }
  }
  if (out.empty()) return data_loss("{}: no prompts", source);
  return out;
}

Result<std::vector<EvalPrompt>> read_prompts_jsonl(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open {}", path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_prompts_jsonl(ss.str(), path.string());
}

std::string prompt_to_json_line(const EvalPrompt& p) {
  nlohmann::ordered_json j;
  j["id"] = p.id;
  j["task"] = p.task;
  j["context_tokens"] = p.context_tokens;
  j["num_prompt_tokens"] = p.num_prompt_tokens;
  j["depth"] = p.depth;
  j["prompt"] = p.prompt;
  j["answer"] = p.answer;
  j["answers"] = p.answers;
  j["user_message"] = p.user_message;
  j["chat_answer"] = p.chat_answer;
  j["needle_depths"] = p.needle_depths;
  j["needle_positions"] = p.needle_positions;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status write_prompts_jsonl(const std::filesystem::path& path,
                           const std::vector<EvalPrompt>& prompts) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return io_error("cannot write {}", path.string());
  for (const EvalPrompt& p : prompts) f << prompt_to_json_line(p) << '\n';
  return f ? Status{} : io_error("writing {} failed", path.string());
}

}  // namespace ls::eval
