#pragma once
// The RULER-style retrieval tasks' text: the fixed sentences, the word lists, the filler grammar
// and the random content of one task instance (keys, values, needles with their depths). Mirrors
// scripts/model/retrieval_tasks.py (the contract: docs/training.md, part 1) draw for draw, so that
// with the same NumpyRng stream it produces the same strings.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "eval/numpy_rng.h"

namespace ls::eval {

// The order is the Python TASKS tuple: a task's index seeds its prompts' RNG streams.
enum class Task { kNiahSingle = 0, kNiahMultikey = 1, kNiahMultivalue = 2, kVt = 3 };
inline constexpr std::array<Task, 4> kAllTasks = {Task::kNiahSingle, Task::kNiahMultikey,
                                                  Task::kNiahMultivalue, Task::kVt};

std::string_view task_name(Task task);
Result<Task> parse_task(std::string_view name);
// "a, b" for values, "A B" for variable names (Python ITEM_SEP).
std::string_view item_separator(Task task);

inline constexpr std::string_view kHeaderNiah =
    "Some special magic numbers are hidden within the following text. Make sure to memorize "
    "them. I will quiz you about the numbers afterwards.";
inline constexpr std::string_view kHeaderVt =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.";
inline constexpr std::string_view kAnswerCue = "Answer:";

// One inserted item (a needle or a variable statement) before filler is placed around it.
struct TaskItem {
  std::string text;
  double depth = 0;   // in [0, 1]: inserted before filler sentence round(depth * m)
  int64_t order = 0;  // tie-break among items at the same insertion point
};

struct TaskContent {
  std::string_view header;
  std::vector<TaskItem> items;  // in generation order
  std::string question;
  std::string answer_prefix;         // ends the raw prompt; the model continues " {answer}"
  std::vector<std::string> answers;  // the answer's items, in answer order
  double first_depth = 0;            // depth of the first answer item
};

// One sentence of the filler grammar (Python filler_sentence).
std::string filler_sentence(NumpyRng& rng);

// Evaluation keys: zlib.crc32(key) % 10 == 0 (training never saw them).
bool is_eval_key(std::string_view key);
uint32_t crc32(std::string_view bytes);

// The content of one evaluation instance with the evaluation sizes (4 keys, 4 values, 2 chains of
// 3 hops); `depth` places the first answer item, none draws it (Python _task_content with
// split="eval" and EVAL_PARAMS).
TaskContent make_task_content(Task task, NumpyRng& rng, std::optional<double> depth);

}  // namespace ls::eval
