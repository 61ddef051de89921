// libFuzzer target: arbitrary bytes as a GGUF file. Parsing must never crash, hang or leak; on
// success every tensor's bytes are read (so ASan checks that each one lies inside the buffer),
// the invariants the reader promises are re-checked, and the file is also taken through the
// model-config mapping and dequantization, and through the tokenizer metadata reader (byte-level
// and SentencePiece vocabularies), which must fail cleanly or succeed.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  auto file = ls::GgufFile::from_memory("fuzz.gguf", std::move(bytes));
  if (!file.ok()) {
    if (file.status().message().empty()) std::abort();  // every error must say what is wrong
    return 0;
  }
  uint64_t checksum = 0;
  for (const ls::GgufTensor& t : (*file)->tensors()) {
    if (t.data == nullptr || t.nbytes < 0) std::abort();
    if (t.numel % *ls::ggml_block_elems(t.type) != 0) std::abort();
    if ((*file)->find_tensor(t.name) != &t) std::abort();
    if (t.offset % (*file)->alignment() != 0) std::abort();
    for (int64_t i = 0; i < t.nbytes; ++i) checksum += t.data[i];
  }
  auto config = ls::gguf_model_config(**file);
  if (!config.ok()) {
    if (config.status().message().empty()) std::abort();
  } else {
    // Dequantized bytes are at most 8x the quantized ones, so this stays small.
    auto ckpt = ls::gguf_checkpoint(**file, *config, ls::DType::kF32);
    if (!ckpt.ok() && ckpt.status().message().empty()) std::abort();
  }
  auto tokenizer = ls::gguf_tokenizer_json(**file);
  if (!tokenizer.ok() && tokenizer.status().message().empty()) std::abort();
  if (tokenizer.ok()) checksum += tokenizer->tokenizer_json.size();
  volatile uint64_t sink = checksum;
  (void)sink;
  return 0;
}
