// libFuzzer target: arbitrary bytes as tokenizer.json must never crash, hang or leak. When the
// bytes load, encoding, decoding and streaming a few strings (and arbitrary ids) must not
// either, and every decoded text must be valid UTF-8.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

void check_utf8(const std::string& s) {
  if (!ls::tok::is_valid_utf8(s)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto loaded = ls::Tokenizer::from_json(input);
  if (!loaded.ok()) return 0;
  const ls::Tokenizer& t = **loaded;
  const std::string texts[] = {
      "Hello world, DON'T stop 12345", " \t\n\r\n  日本語 🙂👨‍👩‍👧 Café\u0301",
      "\xff\xfe invalid \xe2\x82",
      std::string(input.substr(0, 200)),  // the file's own bytes, often token contents
  };
  for (const std::string& text : texts) {
    for (bool add_special : {true, false}) {
      const std::vector<int32_t> ids = t.encode(text, add_special);
      for (int32_t id : ids) {
        if (id < 0 || id >= t.vocab_size()) std::abort();
      }
      for (bool skip : {true, false}) {
        check_utf8(t.decode(ids, skip));
        ls::IncrementalDetokenizer detok(t, skip);
        std::string streamed;
        for (int32_t id : ids) streamed += detok.push(id);
        streamed += detok.flush();
        check_utf8(streamed);
        if (streamed != t.decode(ids, skip)) std::abort();
      }
    }
  }
  const int32_t n = t.vocab_size();
  const std::vector<int32_t> odd = {-1, 0, 1, n - 1, n, n + 1, INT32_MAX, INT32_MIN};
  check_utf8(t.decode(odd, false));
  for (int32_t id : odd) {
    (void)t.id_to_token(id);
    (void)t.is_special(id);
  }
  return 0;
}
