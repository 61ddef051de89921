// libFuzzer: the grammar compiler and matcher. Input: a mode byte, then a JSON schema or regex,
// then (after a NUL) text to match. Checks: compiling never crashes and ends with a grammar or
// an error; matching the text byte by byte agrees with matching it whole; the token mask over a
// small vocabulary equals matching each token on its own.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_schema_grammar.h"
#include "structured/matcher.h"
#include "structured/regex_grammar.h"
#include "structured/token_mask.h"

using namespace ls::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = input.find('\0');
  const std::string_view spec = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  ls::Result<Grammar> g = ls::invalid_argument("unset");
  if (data[0] % 2 == 0) {
    auto schema = nlohmann::ordered_json::parse(spec, nullptr, false);
    if (schema.is_discarded()) return 0;
    g = json_schema_grammar(schema);
  } else {
    g = regex_grammar(spec);
  }
  if (!g.ok()) return 0;
  auto grammar = std::make_shared<const Grammar>(std::move(g).value());

  Matcher whole(grammar);
  const bool ok_whole = whole.accept(text);
  Matcher bytewise(grammar);
  bool ok_bytes = true;
  for (char c : text) {
    if (!bytewise.accept(std::string_view(&c, 1))) {
      ok_bytes = false;
      break;
    }
  }
  if (ok_whole != ok_bytes) __builtin_trap();
  if (ok_whole && whole.can_end() != bytewise.can_end()) __builtin_trap();

  // Tokens: every 1-3 byte slice of the text, plus a few fixed ones.
  std::vector<std::string> tokens = {"{", "}", "\"", "a", "1", " ", "\":", "null"};
  for (size_t i = 0; i < text.size() && tokens.size() < 64; ++i) {
    tokens.emplace_back(text.substr(i, 1 + i % 3));
  }
  auto vocab = std::make_shared<const TokenVocab>(tokens, std::vector<bool>(tokens.size(), false));
  const MatchState& state = ok_whole ? whole.state() : initial_state(*grammar);
  std::vector<uint32_t> mask(mask_words(vocab->vocab_size()));
  compute_token_mask(*grammar, state, *vocab, mask);
  for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
    MatchState cur = state;
    MatchState next;
    bool ok = !vocab->bytes(id).empty();
    for (char c : vocab->bytes(id)) {
      if (!ok) break;
      ok = step(*grammar, cur, static_cast<uint8_t>(c), next);
      std::swap(cur, next);
    }
    if (ok != mask_has(mask, id)) __builtin_trap();
  }
  return 0;
}
