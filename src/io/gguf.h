#pragma once
// GGUF reader (llama.cpp's single-file checkpoint format, versions 2 and 3).
//
// File layout (all little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count;
// the metadata key/value pairs (string key, u32 value type, value); the tensor directory (string
// name, u32 n_dims, u64 ne[n_dims] with the fastest-varying dimension first, u32 ggml type, u64
// offset into the data section); padding to `general.alignment` (default 32); the data section.
// A string is a u64 byte count and that many bytes (no terminator).
//
// The reader validates everything before it exposes a single pointer: every count and length
// against the bytes that remain (so a hostile count never allocates), value types, no nested
// arrays, no duplicate keys or tensor names, `general.alignment` a power of two, at most 4 dims,
// element-count and byte-count overflow, rows a whole number of quantization blocks, tensor types
// whose block layout is known, every offset aligned and tensors laid out in directory order as
// llama.cpp requires (each at the previous one's end padded to the alignment), and the data
// inside the file. Every failure is one Status whose message names the file and, where there is
// one, the key or tensor.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/file_bytes.h"

namespace ls {

// ggml tensor element types (values as in ggml.h). Only the ones whose block layout this reader
// knows are listed; a file naming another type is rejected as unimplemented.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

// "F32", "Q4_K", ...; "type <n>" for a number the reader does not know.
std::string ggml_type_name(GgmlType type);
// Elements per block (1 for plain types, 32 or 256 for quantized ones) and bytes per block;
// nullopt for a value that is not one of GgmlType's enumerators.
std::optional<int64_t> ggml_block_elems(GgmlType type);
std::optional<int64_t> ggml_block_bytes(GgmlType type);

// Metadata value types (values as in the GGUF specification).
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType type);

// One metadata value. Scalars fill one of the scalar fields; an array fills the vector that
// matches its element type (integers and bools in `ints`, floats in `floats`, strings in
// `strings`). A u64 above INT64_MAX is stored in `u64` only (and `is_big_u64` is set).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType elem_type = GgufValueType::kU8;  // arrays only
  int64_t i = 0;                                 // integer and bool scalars
  uint64_t u64 = 0;                              // u64 scalars, as stored
  bool is_big_u64 = false;
  double f = 0;  // f32 / f64 scalars
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_array() const { return type == GgufValueType::kArray; }
  bool is_integer() const;  // an integer or bool scalar
  bool is_float() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }
  size_t array_size() const;
};

// One tensor of a validated file.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the fastest-varying (the row length)
  // Row-major shape (ne reversed): a linear weight [out, in] has ne = {in, out}.
  std::vector<int64_t> shape() const;
  int64_t numel = 0;
  int64_t row_elems = 0;  // ne[0]
  int64_t rows = 0;       // numel / ne[0] (0 when empty)
  uint64_t offset = 0;    // inside the data section
  // Points into the file's mapping (aligned to the file's alignment relative to the mapping's
  // start, which is page-aligned); never null; valid as long as the GgufFile.
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;  // numel / block elems x block bytes
};

// A validated, read-only GGUF file. Not copyable or movable (pointers point into it).
class GgufFile {
 public:
  // Maps the file read-only (mmap).
  static Result<std::unique_ptr<GgufFile>> open(const std::filesystem::path& path);
  // Takes ownership of `bytes`; `name` is used in messages.
  static Result<std::unique_ptr<GgufFile>> from_memory(std::string name,
                                                       std::vector<uint8_t> bytes);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile() = default;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& name() const { return name_; }
  // In directory order (which is also data order).
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed metadata access. Absent -> nullopt; present with another type -> kDataLoss naming the
  // file and key. Integers accept every integer type (and a bool for opt_bool); floats accept
  // f32/f64 and integers.
  Result<std::optional<int64_t>> opt_int(std::string_view key) const;
  Result<std::optional<double>> opt_float(std::string_view key) const;
  Result<std::optional<bool>> opt_bool(std::string_view key) const;
  Result<std::optional<std::string>> opt_string(std::string_view key) const;
  // Present -> the value; absent -> kNotFound "<file>: metadata key <key> is missing".
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  // Arrays: absent -> nullptr; present but not an array of the wanted kind -> kDataLoss.
  Result<const std::vector<std::string>*> opt_string_array(std::string_view key) const;
  Result<const std::vector<int64_t>*> opt_int_array(std::string_view key) const;
  Result<const std::vector<double>*> opt_float_array(std::string_view key) const;

 private:
  GgufFile() = default;
  // open and from_memory end here: takes the bytes, then validates them (parse).
  static Result<std::unique_ptr<GgufFile>> from_storage(std::string name, FileBytes storage);
  Status parse();

  std::string name_;
  FileBytes storage_;               // the mapped or owned file
  const uint8_t* bytes_ = nullptr;  // [size_bytes_] the whole file (storage_'s bytes)
  size_t size_bytes_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, GgufValue, std::less<>> metadata_;
};

}  // namespace ls
