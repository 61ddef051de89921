// IncrementalDetokenizer against Tokenizer::decode (itself checked against HF in
// fixture_test.cpp): on random id sequences for every fixture tokenizer, the streamed pieces
// concatenate to the full decode, and no piece ever ends inside a UTF-8 character.

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ls {
namespace {

// A from-scratch UTF-8 validity check (shortest form, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      n = 0;
      cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      n = 1;
      cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2;
      cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size() + (n == 0 ? 1 : 0) && n > 0 && i + n > s.size() - 1) return false;
    for (int k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

std::string strip_trailing_replacement(std::string s) {
  const std::string r = "\xEF\xBF\xBD";
  while (s.size() >= 3 && s.compare(s.size() - 3, 3, r) == 0) s.resize(s.size() - 3);
  return s;
}

class DetokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto t = Tokenizer::load(test::fixture_dir(GetParam()));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
    for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
      const std::string s = tok_->id_to_token(id);
      // Tokens that stand for single bytes: "<0xNN>" (SentencePiece style) or one byte-level
      // character (U+0080.. stand for bytes >= 0x80 that split characters).
      if (tok_->is_byte_token(id) || (s.size() == 2 && static_cast<unsigned char>(s[0]) >= 0xC2)) {
        byte_ids_.push_back(id);
      }
      if (tok_->is_special(id)) special_ids_.push_back(id);
    }
    ASSERT_FALSE(byte_ids_.empty());
  }

  // Random ids, rich in byte tokens (so characters get split) and special tokens.
  std::vector<int32_t> random_ids(std::mt19937& rng, size_t n) {
    std::vector<int32_t> ids;
    for (size_t k = 0; k < n; ++k) {
      const uint32_t r = rng() % 10;
      if (r < 4) {
        ids.push_back(byte_ids_[rng() % byte_ids_.size()]);
      } else if (r == 4 && !special_ids_.empty()) {
        ids.push_back(special_ids_[rng() % special_ids_.size()]);
      } else {
        ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(tok_->vocab_size())));
      }
    }
    return ids;
  }

  // Streams ids and returns the concatenated output, checking every piece is valid UTF-8.
  std::string stream(const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids,
                     bool skip) {
    IncrementalDetokenizer detok(*tok_, skip, prompt);
    std::string out;
    for (int32_t id : ids) {
      const std::string piece = detok.push(id);
      EXPECT_TRUE(valid_utf8(piece)) << test::show(piece);
      out += piece;
    }
    const std::string rest = detok.flush();
    EXPECT_TRUE(valid_utf8(rest)) << test::show(rest);
    return out + rest;
  }

  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> byte_ids_;
  std::vector<int32_t> special_ids_;
};

TEST_P(DetokenizerTest, RandomSequencesConcatenateToDecode) {
  std::mt19937 rng(1234);
  for (int n = 0; n < 300; ++n) {
    const auto ids = random_ids(rng, 1 + rng() % 40);
    for (bool skip : {true, false}) {
      ASSERT_EQ(stream({}, ids, skip), tok_->decode(ids, skip))
          << "skip=" << skip << " ids=" << testing::PrintToString(ids);
    }
  }
}

TEST_P(DetokenizerTest, EncodedTextStreamsBackWhole) {
  const std::vector<std::string> texts = {
      "Hello world, DON'T stop", "日本語のテキスト 🙂🚀 👨‍👩‍👧",
      "  two  spaces\n\nand newlines ", "Café naïve — ½ ² Ⅻ 🇺🇸", "def f(x):\n    return x"};
  for (const auto& text : texts) {
    for (bool add_special : {true, false}) {
      const auto ids = tok_->encode(text, add_special);
      for (bool skip : {true, false}) {
        ASSERT_EQ(stream({}, ids, skip), tok_->decode(ids, skip)) << text;
      }
    }
  }
}

// With a prompt, the output continues the prompt's text: decode(prompt + generated) minus
// decode(prompt) (SentencePiece keeps the space before the first generated word).
TEST_P(DetokenizerTest, WithPromptContinuesThePromptText) {
  std::mt19937 rng(99);
  const auto prompt_base = tok_->encode("Once upon a time, in a land far away", true);
  int checked = 0;
  for (int n = 0; n < 300; ++n) {
    std::vector<int32_t> prompt = random_ids(rng, rng() % 12);
    prompt.insert(prompt.begin(), prompt_base.begin(), prompt_base.end());
    const auto generated = random_ids(rng, 1 + rng() % 30);
    for (bool skip : {true, false}) {
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), generated.begin(), generated.end());
      const std::string full = tok_->decode(all, skip);
      const std::string prefix = strip_trailing_replacement(tok_->decode(prompt, skip));
      if (full.compare(0, prefix.size(), prefix) != 0) {
        // The prompt ends inside a byte run that the generated bytes change as a whole (HF's
        // ByteFallback turns an invalid run into one U+FFFD per byte, valid bytes included):
        // the prompt's own text changes, so there is no continuation to compare with.
        continue;
      }
      ASSERT_EQ(stream(prompt, generated, skip), full.substr(prefix.size()))
          << "skip=" << skip << " prompt=" << testing::PrintToString(prompt)
          << " generated=" << testing::PrintToString(generated);
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DetokenizerTest, ::testing::ValuesIn(test::fixture_names()),
                         [](const auto& info) { return info.param; });

// Concrete cases: a character split over byte tokens is held back until complete, and the
// SentencePiece space before a word survives streaming.
TEST(Detokenizer, HoldsSplitCharactersAndKeepsSentencePieceSpaces) {
  auto spm = Tokenizer::load(test::fixture_dir("spm"));
  ASSERT_TRUE(spm.ok());
  const Tokenizer& t = **spm;
  // "🙂" is not in the 2000-token vocabulary: byte fallback gives <0xF0><0x9F><0x99><0x82>.
  const auto ids = t.encode("a🙂 world", false);
  std::vector<std::string> pieces;
  IncrementalDetokenizer detok(t, true);
  for (int32_t id : ids) pieces.push_back(detok.push(id));
  pieces.push_back(detok.flush());
  std::string joined;
  for (const auto& p : pieces) {
    EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "emitted a replacement character";
    joined += p;
  }
  EXPECT_EQ(joined, "a🙂 world");
  EXPECT_EQ(pieces.back(), "");

  // Generation after a prompt: "▁world" streams as " world".
  const auto prompt = t.encode("Hello", true);
  const auto world = t.encode("world", false);
  IncrementalDetokenizer cont(t, true, prompt);
  std::string out;
  for (int32_t id : world) out += cont.push(id);
  out += cont.flush();
  EXPECT_EQ(out, " world");

  // Byte-level: a lone lead byte of a 3-byte character is held, then released whole.
  auto llama = Tokenizer::load(test::fixture_dir("llama3"));
  ASSERT_TRUE(llama.ok());
  // 日 is E6 97 A5; the byte-level alphabet writes those bytes as U+00E6, U+0139, U+00A5.
  const auto e6 = (*llama)->token_to_id("\xC3\xA6");
  const auto x97 = (*llama)->token_to_id("\xC4\xB9");
  const auto a5 = (*llama)->token_to_id("\xC2\xA5");
  ASSERT_TRUE(e6 && x97 && a5);
  IncrementalDetokenizer bytes(**llama, true);
  EXPECT_EQ(bytes.push(*e6), "");
  EXPECT_EQ(bytes.push(*x97), "");
  EXPECT_EQ(bytes.push(*a5), "日");
  EXPECT_EQ(bytes.push(*e6), "");
  EXPECT_EQ(bytes.flush(), "\xEF\xBF\xBD");  // an unfinished character ends as U+FFFD
}

}  // namespace
}  // namespace ls
