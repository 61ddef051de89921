#pragma once
// The bytes of a checkpoint file: memory-mapped read-only, or owned (a file built in memory).
// The loaders (safetensors, GGUF) validate these bytes; this only maps and frees them.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/status.h"

namespace ls {

class FileBytes {
 public:
  // Maps the whole file; errors name it (missing, not a regular file, open / stat / mmap fails).
  static Result<FileBytes> map(const std::filesystem::path& path);
  static FileBytes own(std::vector<uint8_t> bytes);
  // Owns `size` bytes at `bytes` (allocated without being zeroed: a writer that fills every byte
  // itself, on its own threads, does not pay a one-thread zero-fill first).
  static FileBytes own(std::unique_ptr<uint8_t[]> bytes, size_t size);

  FileBytes() = default;
  ~FileBytes();
  FileBytes(FileBytes&& other) noexcept;
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const uint8_t* data() const { return data_; }  // [size()] bytes
  size_t size() const { return size_; }

 private:
  void release();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;      // non-null when data_ comes from mmap
  std::vector<uint8_t> memory_;  // owns data_ for own(vector)
  std::unique_ptr<uint8_t[]> buffer_;  // owns data_ for own(buffer, size)
};

}  // namespace ls
