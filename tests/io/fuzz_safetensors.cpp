// libFuzzer target: arbitrary bytes as a safetensors file. Loading must never crash, hang or leak;
// on success every tensor's bytes are read (so ASan checks that each one lies inside the buffer)
// and the invariants the reader promises are re-checked.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  auto file = ls::SafetensorsFile::from_memory("fuzz.safetensors", std::move(bytes));
  if (!file.ok()) {
    if (file.status().message().empty()) std::abort();  // every error must say what is wrong
    return 0;
  }
  uint64_t checksum = 0;
  int64_t covered_bytes = 0;
  for (const ls::TensorInfo& t : (*file)->tensors()) {
    if (t.data == nullptr || t.nbytes < 0) std::abort();
    if (t.nbytes != t.numel() * ls::safetensors_dtype_size(t.file_dtype)) std::abort();
    if ((*file)->find(t.name) != &t) std::abort();
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (int64_t i = 0; i < t.nbytes; ++i) checksum += p[i];
    covered_bytes += t.nbytes;
  }
  // The tensors tile the data section exactly, so together they are never larger than the input.
  if (static_cast<uint64_t>(covered_bytes) > size) std::abort();
  volatile uint64_t sink = checksum;
  (void)sink;
  return 0;
}
