#include "io/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace ls {

Result<FileBytes> FileBytes::map(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found("{}: no such file", name);
    return io_error("{}: cannot open: {}", name, std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("{}: cannot stat: {}", name, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("{}: not a regular file", name);
  }
  FileBytes file;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return io_error("{}: cannot mmap {} bytes: {}", name, file.size_, std::strerror(err));
    }
    file.mapping_ = p;
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return file;
}

FileBytes FileBytes::own(std::vector<uint8_t> bytes) {
  FileBytes file;
  file.memory_ = std::move(bytes);
  file.data_ = file.memory_.data();
  file.size_ = file.memory_.size();
  return file;
}

FileBytes FileBytes::own(std::unique_ptr<uint8_t[]> bytes, size_t size) {
  FileBytes file;
  file.buffer_ = std::move(bytes);
  file.data_ = file.buffer_.get();
  file.size_ = size;
  return file;
}

FileBytes::~FileBytes() { release(); }

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this != &other) {
    release();
    // A moved vector keeps its buffer, so data_ stays valid for owned bytes too.
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    memory_ = std::move(other.memory_);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

void FileBytes::release() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
  mapping_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  memory_.clear();
  buffer_.reset();
}

}  // namespace ls
