#pragma once
// Writes GGUF version 3 files (little-endian, general.alignment 32): metadata in insertion
// order, then the tensor directory, then each tensor's data at the previous one's padded end, as
// io/gguf.cpp requires and llama.cpp writes them. Used by `longserve quantize`.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"

namespace ls {

class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& value);
  void add_u32(const std::string& key, uint32_t value);
  void add_i32(const std::string& key, int32_t value);
  void add_f32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_strings(const std::string& key, const std::vector<std::string>& values);
  void add_i32s(const std::string& key, const std::vector<int32_t>& values);
  void add_f32s(const std::string& key, const std::vector<float>& values);

  // `shape` row-major ([out, in] for a linear weight; written as ggml's reversed ne); `data`
  // holds the tensor's bytes in `type` (rows of whole blocks).
  Status add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                    std::vector<uint8_t> data);

  // The whole file.
  std::vector<uint8_t> bytes() const;
  // Writes bytes() to `path` (through a temporary file renamed into place).
  Status write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<uint8_t> kv_;  // encoded metadata
  uint64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace ls
