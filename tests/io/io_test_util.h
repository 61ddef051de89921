#pragma once
// Helpers shared by the io tests: a scratch directory per test, and a safetensors byte builder
// that is independent of write_safetensors (it lays out the bytes by hand from a header string),
// so damaged files can be written exactly as a test needs them.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace ls::io_test {

// A fresh directory under the system temp dir, removed (with its contents) at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "t";
    path_ = std::filesystem::temp_directory_path() /
            ("ls_io_" + test + "_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_text(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

// u64 LE `header_len` (default: the header's size), the header bytes verbatim, then `data`.
inline std::vector<uint8_t> raw_safetensors(std::string_view header,
                                            const std::vector<uint8_t>& data = {},
                                            std::optional<uint64_t> header_len = std::nullopt) {
  // Sized once and filled with memcpy (GCC 12 warns falsely about vector::insert here).
  std::vector<uint8_t> out(8 + header.size() + data.size());
  const uint64_t n = header_len.value_or(header.size());
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

inline std::vector<uint8_t> zeros(size_t n) {
  return std::vector<uint8_t>(n, 0);
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace ls::io_test
