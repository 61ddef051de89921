#pragma once
// A GGUF byte builder for tests, independent of the reader: it lays the file out by hand from the
// GGUF specification, and every count and offset can be overridden so that damaged files can be
// written exactly as a test needs them.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ls::io_test {

class GgufBuilder {
 public:
  // Value type codes of the GGUF specification.
  enum : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors_override;
  std::optional<uint64_t> n_kv_override;
  uint64_t alignment = 32;  // the padding used when laying out (set general.alignment to match)

  // A key with a raw value (the value bytes after the type code).
  void kv_raw(std::string_view key, uint32_t type, const std::vector<uint8_t>& value) {
    put_string(kv_, key);
    put(kv_, type);
    kv_.insert(kv_.end(), value.begin(), value.end());
    ++n_kv_;
  }
  void kv_u32(std::string_view key, uint32_t v) { kv_raw(key, U32, bytes_of(v)); }
  void kv_i32(std::string_view key, int32_t v) { kv_raw(key, I32, bytes_of(v)); }
  void kv_u64(std::string_view key, uint64_t v) { kv_raw(key, U64, bytes_of(v)); }
  void kv_f32(std::string_view key, float v) { kv_raw(key, F32, bytes_of(v)); }
  void kv_bool(std::string_view key, bool v) { kv_raw(key, BOOL, {static_cast<uint8_t>(v)}); }
  void kv_str(std::string_view key, std::string_view v) {
    std::vector<uint8_t> b;
    put_string(b, v);
    kv_raw(key, STRING, b);
  }
  void kv_str_array(std::string_view key, const std::vector<std::string>& v) {
    std::vector<uint8_t> b;
    put(b, static_cast<uint32_t>(STRING));
    put(b, static_cast<uint64_t>(v.size()));
    for (const std::string& s : v) put_string(b, s);
    kv_raw(key, ARRAY, b);
  }
  void kv_i32_array(std::string_view key, const std::vector<int32_t>& v) {
    std::vector<uint8_t> b;
    put(b, static_cast<uint32_t>(I32));
    put(b, static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(b, x);
    kv_raw(key, ARRAY, b);
  }
  void kv_f32_array(std::string_view key, const std::vector<float>& v) {
    std::vector<uint8_t> b;
    put(b, static_cast<uint32_t>(F32));
    put(b, static_cast<uint64_t>(v.size()));
    for (float x : v) put(b, x);
    kv_raw(key, ARRAY, b);
  }

  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset_override;
  };
  // Tensors are laid out in the order added, each aligned.
  Tensor& tensor(std::string name, std::vector<uint64_t> ne, uint32_t type,
                 std::vector<uint8_t> data) {
    tensors_.push_back({std::move(name), std::move(ne), type, std::move(data), std::nullopt});
    return tensors_.back();
  }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out;
    put(out, magic);
    put(out, version);
    put(out, n_tensors_override.value_or(tensors_.size()));
    put(out, n_kv_override.value_or(n_kv_));
    out.insert(out.end(), kv_.begin(), kv_.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const Tensor& t : tensors_) {
      put_string(out, t.name);
      put(out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) put(out, d);
      put(out, t.type);
      put(out, t.offset_override.value_or(offset));
      offsets.push_back(offset);
      offset = pad(offset + t.data.size());
    }
    if (!tensors_.empty()) out.resize(pad(out.size()), 0);
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data_start + offsets[i], 0);
      out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    }
    return out;
  }

  template <typename T>
  static std::vector<uint8_t> bytes_of(const T& v) {
    std::vector<uint8_t> b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  template <typename T>
  static std::vector<uint8_t> bytes_of_vec(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  }

 private:
  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    const auto b = bytes_of(v);
    out.insert(out.end(), b.begin(), b.end());
  }
  static void put_string(std::vector<uint8_t>& out, std::string_view s) {
    put(out, static_cast<uint64_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  uint64_t pad(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace ls::io_test
