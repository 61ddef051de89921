#include "tools/bench_serve/random_dataset.h"

#include <cmath>
#include <random>

#include "tokenizer/tokenizer.h"

namespace ls {

namespace {

// Ids of the tokenizer's ordinary tokens (HF's tokenizer.vocab_size leaves the added special
// tokens out as well).
std::vector<int32_t> ordinary_token_ids(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  const int32_t vocab_size = tokenizer.vocab_size();
  ids.reserve(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (!tokenizer.is_special(id) && !tokenizer.id_to_token(id).empty()) ids.push_back(id);
  }
  return ids;
}

// Word tokens that start with a space marker ("Ġ" byte-level, "▁" SentencePiece) followed by
// ASCII letters: the pre-tokenizer starts a new piece at the space, so appending them does not
// re-merge with the text before. Padding with them lets the length adjustment converge; with
// vLLM's arbitrary padding tokens a small vocabulary often ends a few tokens off.
std::vector<int32_t> word_token_ids(const Tokenizer& tokenizer,
                                    const std::vector<int32_t>& ordinary) {
  std::vector<int32_t> words;
  for (int32_t id : ordinary) {
    const std::string raw = tokenizer.id_to_token(id);
    size_t marker = 0;
    if (raw.rfind("\xC4\xA0", 0) == 0) {
      marker = 2;  // "Ġ"
    } else if (raw.rfind("\xE2\x96\x81", 0) == 0) {
      marker = 3;  // "▁"
    }
    if (marker == 0 || raw.size() == marker) continue;
    bool letters = true;
    for (size_t i = marker; i < raw.size(); ++i) {
      const char c = raw[i];
      letters = letters && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
    }
    if (letters) words.push_back(id);
  }
  return words;
}

bool ends_with_replacement_char(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// vLLM's gen_prompt_decode_to_target_len: decode, re-encode, then pad or truncate the ids until
// the text encodes to exactly `target_len` tokens, within a bounded number of rounds. Returns
// the text and its real length (which may still differ from the target, as in vLLM).
std::pair<std::string, int32_t> decode_to_target_len(const Tokenizer& tokenizer,
                                                     std::vector<int32_t> ids, int32_t target_len,
                                                     const std::vector<int32_t>& padding,
                                                     std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, padding.size() - 1);
  std::string prompt;
  for (int retries_left = 20;; --retries_left) {
    prompt = tokenizer.decode(ids, /*skip_special_tokens=*/false);
    ids = tokenizer.encode(prompt, /*add_special_tokens=*/false);
    const auto len = static_cast<int32_t>(ids.size());
    if (retries_left <= 0 || len == target_len) break;
    if (len < target_len) {
      for (int32_t i = len; i < target_len; ++i) ids.push_back(padding[pick(rng)]);
    } else {
      // A cut inside a multi-byte character decodes to U+FFFD, which re-encodes longer than the
      // bytes it replaced; cut before that character and pad with word tokens instead.
      ids.resize(static_cast<size_t>(target_len));
      while (!ids.empty() && ends_with_replacement_char(tokenizer.decode(ids, false))) {
        ids.pop_back();
      }
      while (static_cast<int32_t>(ids.size()) < target_len) ids.push_back(padding[pick(rng)]);
    }
  }
  return {prompt, static_cast<int32_t>(ids.size())};
}

}  // namespace

Result<std::vector<BenchRequest>> sample_random_requests(const Tokenizer& tokenizer,
                                                         const RandomDatasetOptions& options) {
  if (options.num_prompts < 1) {
    return invalid_argument("--num-prompts must be at least 1, got {}", options.num_prompts);
  }
  if (options.input_len < 1 || options.output_len < 1) {
    return invalid_argument("--random-input-len and --random-output-len must be at least 1");
  }
  if (!(options.range_ratio >= 0.0 && options.range_ratio < 1.0)) {
    return invalid_argument("--random-range-ratio must be in [0, 1), got {}", options.range_ratio);
  }
  if (options.prefix_len < 0) {
    return invalid_argument("--random-prefix-len must be non-negative, got {}", options.prefix_len);
  }
  const std::vector<int32_t> ordinary = ordinary_token_ids(tokenizer);
  if (ordinary.empty()) return invalid_argument("the tokenizer has no ordinary tokens");
  const auto vocab = static_cast<int64_t>(ordinary.size());
  std::vector<int32_t> padding = word_token_ids(tokenizer, ordinary);
  if (padding.empty()) padding = ordinary;

  std::mt19937_64 rng(options.seed);
  auto range = [&](int32_t len, int32_t min_low) {
    const auto low = static_cast<int32_t>(std::floor(len * (1.0 - options.range_ratio)));
    const auto high = static_cast<int32_t>(std::floor(len * (1.0 + options.range_ratio)));
    return std::uniform_int_distribution<int32_t>(std::max(low, min_low), std::max(high, min_low));
  };
  auto input_dist = range(options.input_len, 1);
  auto output_dist = range(options.output_len, 1);
  std::uniform_int_distribution<int64_t> offset_dist(0, vocab - 1);

  std::vector<int32_t> prefix;  // [prefix_len]
  for (int32_t i = 0; i < options.prefix_len; ++i) {
    prefix.push_back(ordinary[static_cast<size_t>(offset_dist(rng))]);
  }
  const auto n = static_cast<size_t>(options.num_prompts);
  std::vector<int32_t> input_lens(n), output_lens(n);
  std::vector<int64_t> offsets(n);
  for (auto& len : input_lens) len = input_dist(rng);
  for (auto& len : output_lens) len = output_dist(rng);
  for (auto& offset : offsets) offset = offset_dist(rng);

  std::vector<BenchRequest> requests;
  requests.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids = prefix;  // [prefix_len + input_len_i]
    for (int32_t j = 0; j < input_lens[i]; ++j) {
      ids.push_back(
          ordinary[static_cast<size_t>((offsets[i] + static_cast<int64_t>(i) + j) % vocab)]);
    }
    const int32_t target = options.prefix_len + input_lens[i];
    auto [prompt, prompt_len] =
        decode_to_target_len(tokenizer, std::move(ids), target, padding, rng);
    requests.push_back(BenchRequest{std::move(prompt), prompt_len, output_lens[i]});
  }
  return requests;
}

}  // namespace ls
