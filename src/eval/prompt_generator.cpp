#include "eval/prompt_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace ls::eval {

namespace {

constexpr uint64_t kPoolStream = 0xF111E4;        // FillerPool's second seed word
constexpr uint64_t kEvalStream = 0xE7A1;          // eval_docs' second seed word
constexpr uint64_t kRandomDepthStream = 0xCA11B;  // random_depth_prompts (C++ only)

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace

double round_digits(double x, int digits) {
  // glibc's printf rounds the exact binary value correctly (ties to even), as Python's round.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return std::strtod(buf, nullptr);
}

std::vector<double> depth_grid(int32_t num_points) {
  std::vector<double> out;
  if (num_points <= 0) return out;
  if (num_points == 1) return {0.0};
  const double step = 1.0 / static_cast<double>(num_points - 1);
  for (int32_t i = 0; i < num_points; ++i) {
    out.push_back(round_digits(i + 1 == num_points ? 1.0 : static_cast<double>(i) * step, 2));
  }
  return out;
}

FillerPool FillerPool::build(const Tokenizer& tokenizer, int32_t num_sentences, uint64_t seed) {
  FillerPool pool;
  const uint64_t seed_words[] = {seed, kPoolStream};
  NumpyRng rng(seed_words);
  int64_t total = 0;
  for (int32_t i = 0; i < num_sentences; ++i) {
    pool.texts.push_back(filler_sentence(rng));
    const auto n = static_cast<int64_t>(tokenizer.encode(" " + pool.texts.back(), false).size());
    pool.lens.push_back(n);
    total += n;
  }
  pool.mean_len = num_sentences > 0 ? static_cast<double>(total) / num_sentences : 0.0;
  return pool;
}

std::vector<int64_t> FillerPool::sample(NumpyRng& rng, int64_t budget_tokens) const {
  std::vector<int64_t> idx;
  if (budget_tokens <= 0 || texts.empty()) return idx;
  const auto n = static_cast<int64_t>(static_cast<double>(budget_tokens) / mean_len * 1.2) + 8;
  const auto size = static_cast<int64_t>(texts.size());
  int64_t total = 0;
  // Python draws n indices at a time until their total passes the budget, then keeps the prefix
  // whose running total stays within it.
  do {
    for (int64_t i = 0; i < n; ++i) {
      idx.push_back(rng.integers(0, size));
      total += lens[static_cast<size_t>(idx.back())];
    }
  } while (total <= budget_tokens);
  int64_t running = 0;
  size_t keep = 0;
  while (keep < idx.size() && running + lens[static_cast<size_t>(idx[keep])] <= budget_tokens) {
    running += lens[static_cast<size_t>(idx[keep])];
    ++keep;
  }
  idx.resize(keep);
  return idx;
}

Result<PromptGenerator> PromptGenerator::create(std::shared_ptr<const Tokenizer> tokenizer,
                                                uint64_t seed, int32_t pool_sentences) {
  if (!tokenizer) return invalid_argument("the prompt generator needs the model's tokenizer");
  if (pool_sentences <= 0) return invalid_argument("the filler pool needs sentences");
  FillerPool pool = FillerPool::build(*tokenizer, pool_sentences, seed + 1);
  return PromptGenerator(std::move(tokenizer), std::move(pool));
}

int64_t PromptGenerator::num_tokens(const std::string& text, bool add_special) const {
  return static_cast<int64_t>(tokenizer_->encode(text, add_special).size());
}

Result<EvalPrompt> PromptGenerator::build(Task task, NumpyRng& rng, int32_t max_prompt_tokens,
                                          std::optional<double> depth) const {
  const TaskContent c = make_task_content(task, rng, depth);
  const std::string answer = join(c.answers, item_separator(task));
  const std::string head = std::string(c.header) + "\n";
  const std::string tail_suffix =
      "\n" + c.question + "\n" + std::string(kAnswerCue) + " " + c.answer_prefix;
  // Token counts of the pieces the Python generator assembles token by token: the head (with
  // BOS), each item with its leading space, and the tail. The last element is tokenized together
  // with the tail because "." + "\n" merges.
  const int64_t head_len = num_tokens(head, true);
  std::vector<int64_t> item_lens;
  int64_t items_total = 0;
  for (const TaskItem& it : c.items) {
    item_lens.push_back(num_tokens(" " + it.text));
    items_total += item_lens.back();
  }
  const int64_t fixed = head_len + items_total + num_tokens(tail_suffix);
  std::vector<int64_t> idx = pool_.sample(rng, max_prompt_tokens - fixed);  // [m] sentence ids

  // Elements in text order: a filler position in idx (is_item false) or an item index.
  struct Element {
    bool is_item;
    size_t index;
  };
  std::vector<Element> elements;
  std::vector<int32_t> positions;
  std::string text;
  int64_t text_tokens = 0;
  while (true) {
    const size_t m = idx.size();
    std::vector<size_t> slots;
    for (const TaskItem& it : c.items) {
      // Python int(round(depth * m)): ties to even, as nearbyint in the default rounding mode.
      slots.push_back(
          std::min(m, static_cast<size_t>(std::nearbyint(it.depth * static_cast<double>(m)))));
    }
    std::vector<size_t> order(c.items.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return slots[a] != slots[b] ? slots[a] < slots[b] : c.items[a].order < c.items[b].order;
    });
    elements.clear();
    size_t next = 0;
    for (size_t k : order) {
      for (size_t p = next; p < slots[k]; ++p) elements.push_back({false, p});
      next = std::max(next, slots[k]);
      elements.push_back({true, k});
    }
    for (size_t p = next; p < m; ++p) elements.push_back({false, p});

    positions.clear();
    int64_t cur = head_len;
    for (size_t e = 0; e < elements.size(); ++e) {
      const Element& el = elements[e];
      if (el.is_item) positions.push_back(static_cast<int32_t>(cur));
      if (e + 1 == elements.size()) {
        const std::string& last =
            el.is_item ? c.items[el.index].text : pool_.texts[static_cast<size_t>(idx[el.index])];
        cur += num_tokens(" " + last + tail_suffix);
      } else {
        cur += el.is_item ? item_lens[el.index] : pool_.lens[static_cast<size_t>(idx[el.index])];
      }
    }
    text = head;
    for (const Element& el : elements) {
      text += ' ';
      text += el.is_item ? c.items[el.index].text : pool_.texts[static_cast<size_t>(idx[el.index])];
    }
    text += tail_suffix;
    // The assembled count equals the tokenization of the joined text for the task tokenizer
    // (retrieval_tasks.py checks it); the second test keeps other tokenizers within the limit.
    text_tokens = num_tokens(text, true);
    if (m == 0 || (cur <= max_prompt_tokens && text_tokens <= max_prompt_tokens)) break;
    idx.pop_back();  // boundary merges made it a token or two too long
  }

  EvalPrompt p;
  p.task = std::string(task_name(task));
  p.context_tokens = max_prompt_tokens;
  p.num_prompt_tokens = static_cast<int32_t>(text_tokens);
  p.depth = round_digits(c.first_depth, 4);
  p.depth_on_grid = task == Task::kNiahSingle && depth.has_value();
  p.prompt = text;
  p.user_message =
      text.substr(0, text.size() - (std::string(kAnswerCue).size() + 2 + c.answer_prefix.size()));
  p.answer = answer;
  p.answers = c.answers;
  p.chat_answer = c.answer_prefix + " " + answer;
  for (const TaskItem& it : c.items) p.needle_depths.push_back(round_digits(it.depth, 4));
  p.needle_positions = std::move(positions);
  return p;
}

Result<std::vector<EvalPrompt>> PromptGenerator::grid(const GridSpec& spec) const {
  if (spec.samples_per_cell <= 0) return invalid_argument("--samples must be at least 1");
  if (spec.depths.empty()) return invalid_argument("the depth grid is empty");
  std::vector<EvalPrompt> out;
  for (Task task : spec.tasks) {
    for (int32_t length : spec.lengths) {
      if (length <= 0) return invalid_argument("context length {} must be positive", length);
      const bool on_grid = task == Task::kNiahSingle;
      const size_t num_depths = on_grid ? spec.depths.size() : 1;
      const int32_t per_depth = (spec.samples_per_cell + static_cast<int32_t>(num_depths) - 1) /
                                static_cast<int32_t>(num_depths);
      for (size_t d = 0; d < num_depths; ++d) {
        for (int32_t s = 0; s < per_depth; ++s) {
          const uint64_t seed_words[] = {spec.seed,
                                         kEvalStream,
                                         static_cast<uint64_t>(task),
                                         static_cast<uint64_t>(length),
                                         d,
                                         static_cast<uint64_t>(s),
                                         0};
          NumpyRng rng(seed_words);
          std::optional<double> depth;
          if (on_grid) depth = spec.depths[d];
          LS_ASSIGN_OR_RETURN(EvalPrompt p, build(task, rng, length, depth));
          std::string tag = "rand";
          if (depth) {  // Python f"{depth:.2f}"
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%.2f", *depth);
            tag = buf;
          }
          p.id = fmt::format("{}-{}-{}-{}", task_name(task), length, tag, s);
          out.push_back(std::move(p));
        }
      }
    }
  }
  return out;
}

Result<std::vector<EvalPrompt>> PromptGenerator::random_depth_prompts(const GridSpec& spec) const {
  std::vector<EvalPrompt> out;
  for (Task task : spec.tasks) {
    for (int32_t length : spec.lengths) {
      if (length <= 0) return invalid_argument("context length {} must be positive", length);
      for (int32_t s = 0; s < spec.samples_per_cell; ++s) {
        const uint64_t seed_words[] = {spec.seed, kRandomDepthStream, static_cast<uint64_t>(task),
                                       static_cast<uint64_t>(length), static_cast<uint64_t>(s)};
        NumpyRng rng(seed_words);
        LS_ASSIGN_OR_RETURN(EvalPrompt p, build(task, rng, length, std::nullopt));
        p.id = fmt::format("{}-{}-rand-{}", task_name(task), length, s);
        out.push_back(std::move(p));
      }
    }
  }
  return out;
}

}  // namespace ls::eval
