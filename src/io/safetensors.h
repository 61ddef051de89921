#pragma once
// safetensors reader and writer.
//
// File layout: u64 little-endian N, an N-byte UTF-8 JSON header, then the data section. The header
// maps tensor names to {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the
// start of the data section) plus an optional "__metadata__" string -> string map.
//
// The reader validates everything before it exposes a single pointer: header bounds (at most
// 100 MB, as the reference reader), JSON syntax and UTF-8, no duplicate keys at any level, the
// type of every field, dtype names, dims, element-count overflow, offsets inside the data section,
// byte counts equal to numel x element size, and that the tensors tile the data section exactly
// (no overlaps, no holes, nothing after the last tensor). Every failure is one Status whose message
// names the file and, where there is one, the tensor.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "io/file_bytes.h"

namespace ls {

// Every element type a safetensors header may name. The packed sub-byte types (F4, F6_E2M3,
// F6_E3M2) are recognised but rejected as unsupported by the reader.
enum class SafetensorsDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kF64,
  kU64,
  kI64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kC64,
};

// The header spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view safetensors_dtype_name(SafetensorsDType dtype);
// Bytes per element (all supported safetensors dtypes are whole bytes).
int safetensors_dtype_size(SafetensorsDType dtype);
// The core element type with the same bytes, when core has one (F32, F16, BF16, I8, U8, I32, I64).
std::optional<DType> core_dtype(SafetensorsDType dtype);

// One tensor of a validated file.
struct TensorInfo {
  std::string name;
  // The core element type; nullopt when core has none for file_dtype (F64, F8_*, BOOL, U16, ...),
  // so such a tensor can never be mistaken for one core can compute with.
  std::optional<DType> dtype;
  SafetensorsDType file_dtype = SafetensorsDType::kF32;  // what the header says
  std::vector<int64_t> shape;                            // row-major; [] is a scalar
  // Points into the file's mapping (or the from_memory buffer) and lives as long as the
  // SafetensorsFile (a Checkpoint::from_tensors info: as long as that checkpoint). It may be unaligned: old writers do not pad, so read through memcpy or
  // byte-wise, never through a typed pointer that assumes alignment. Never null, even when
  // nbytes == 0.
  const void* data = nullptr;
  int64_t nbytes = 0;  // numel x element size
  std::string file;    // path (or from_memory name), for messages

  int64_t numel() const;
};

// A validated, read-only safetensors file. Not copyable or movable (TensorInfo::data points into
// it); hold it by unique_ptr.
class SafetensorsFile {
 public:
  // Maps the file read-only (mmap). Truncating the file while it is mapped is undefined (SIGBUS).
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::filesystem::path& path);
  // Takes ownership of `bytes`; `name` is used in messages and TensorInfo::file.
  static Result<std::unique_ptr<SafetensorsFile>> from_memory(std::string name,
                                                              std::vector<uint8_t> bytes);
  // The same over `size` bytes at `bytes` (need not have been zeroed: see FileBytes::own).
  static Result<std::unique_ptr<SafetensorsFile>> from_memory(std::string name,
                                                              std::unique_ptr<uint8_t[]> bytes,
                                                              size_t size);

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile() = default;

  // In data-section order (ascending data_offsets).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& name() const { return name_; }

 private:
  SafetensorsFile() = default;
  // open and from_memory end here: takes the bytes, then validates them (parse).
  static Result<std::unique_ptr<SafetensorsFile>> from_storage(std::string name,
                                                               FileBytes storage);
  // The one validation path behind open and from_memory: fills tensors_ and metadata_ from
  // [bytes_, bytes_ + size_bytes_).
  Status parse();

  std::string name_;
  FileBytes storage_;               // the mapped or owned file
  const uint8_t* bytes_ = nullptr;  // [size_bytes_] the whole file (storage_'s bytes)
  size_t size_bytes_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor for write_safetensors; `data` holds numel x dtype_size(dtype) bytes (any alignment).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes tensors in the given order, contiguous, header padded with spaces to a multiple of 8
// bytes (as the reference writer does). Rejects duplicate or reserved names, negative dims and
// dtypes safetensors cannot name (packed i4). Writes to a temporary file beside `path` and renames
// it, so a reader never sees a half-written file.
Status write_safetensors(const std::filesystem::path& path,
                         const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace ls
