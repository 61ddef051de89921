#pragma once
// A Hugging Face checkpoint directory (Llama, Mistral, Qwen2, Qwen3) as one GGUF file with its
// 2-D weights quantized (`longserve quantize`): the metadata convert_hf_to_gguf.py writes for
// these architectures (the inverse of io/gguf_model's mapping, q/k rows permuted for llama and
// mistral as llama.cpp's converter does), the tokenizer (io/gguf_tokenizer), norm weights and
// biases in f32. Weights whose row length is not a whole number of the type's blocks (a K type
// needs 256) fall back: Q4_K -> Q4_1, Q6_K -> Q8_0 (llama.cpp uses Q5_0 / Q8_0 there; the
// CPU kernels read Q4_1, not Q5_0).

#include <filesystem>
#include <string_view>

#include "core/status.h"
#include "io/gguf.h"

namespace ls {

// "q8_0", "q4_0", "q4_1", "q4_k", "q6_k" (case-insensitive) -> the type.
Result<GgmlType> parse_quant_type(std::string_view name);

// Writes `out`. A tokenizer.json the GGUF tokenizer cannot state (not byte-level BPE) is left out
// with a warning. Returns the number of tensors that took the fallback type.
Result<int64_t> convert_to_gguf(const std::filesystem::path& hf_dir,
                                const std::filesystem::path& out, GgmlType type);

}  // namespace ls
