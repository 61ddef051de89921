#pragma once
// Shared helpers of the tokenizer tests: fixture paths and JSON reading. Tests run with the
// repository root as working directory.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ls::test {

inline const char* kFixtureRoot = "tests/fixtures/tokenizers";

// The fixture tokenizers made by scripts/fixtures/make_tokenizer_fixtures.py.
inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {
      "llama3", "qwen2", "spm", "spm_legacy_merges", "spm_metaspace", "qwen2_added"};
  return names;
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json read_json_file(const std::string& path) {
  return nlohmann::json::parse(read_text_file(path));
}

inline std::string fixture_dir(const std::string& name) {
  return std::string(kFixtureRoot) + "/" + name;
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

// A printable form of a test input for failure messages.
inline std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
    if (out.size() > 160) return out + "...";
  }
  return out;
}

}  // namespace ls::test
