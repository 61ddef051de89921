#pragma once
// vLLM's "random" dataset for `bench serve`: prompts of exact token lengths made from runs of
// consecutive token ids, decoded to text, then re-encoded and adjusted until the text encodes to
// exactly the target length (vLLM's gen_prompt_decode_to_target_len). One deviation: padding
// uses space-led word tokens rather than arbitrary ones, so the adjustment converges even with
// a small vocabulary; prompt_len is always the real encoded length.
//
//   input_len_i  ~ U[floor(L_in (1 - r)), floor(L_in (1 + r))]
//   output_len_i ~ U[max(1, floor(L_out (1 - r))), floor(L_out (1 + r))]
//   ids_i        = prefix + ((offset_i + i + arange(input_len_i)) % V)
// where V counts the tokenizer's non-special tokens (HF's tokenizer.vocab_size leaves the added
// special tokens out too) and offset_i ~ U[0, V).

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ls {

class Tokenizer;

struct BenchRequest {
  std::string prompt;
  int32_t prompt_len = 0;           // tokens of `prompt` encoded without special tokens
  int32_t expected_output_len = 0;  // max_tokens to ask for (ignore_eos makes it exact)
};

struct RandomDatasetOptions {
  int32_t num_prompts = 1000;
  int32_t input_len = 1024;
  int32_t output_len = 128;
  double range_ratio = 0.0;  // [0, 1)
  int32_t prefix_len = 0;    // tokens shared by every prompt
  uint64_t seed = 0;
};

Result<std::vector<BenchRequest>> sample_random_requests(const Tokenizer& tokenizer,
                                                         const RandomDatasetOptions& options);

}  // namespace ls
