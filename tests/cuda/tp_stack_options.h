// The model stack the CUDA tensor-parallel tests build (one place for the knobs): small pools, a
// 128-token budget (2 of the first sequence's 4 pages, so selection matters), sinks and windows
// for the streaming heads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/model_stack_options.h"

namespace ls {

// `dir` a model directory; `tp` the tensor-parallel size.
inline ModelStackOptions cuda_tp_stack_options(const std::filesystem::path& dir,
                                               const std::string& policy, int32_t tp) {
  ModelStackOptions o;
  o.model_dir = dir;
  o.device = "cuda";
  o.max_num_seqs = 2;
  o.max_step_tokens = 128;
  o.max_logit_rows = 128;
  o.max_model_len = 512;
  o.kv_cache_bytes = int64_t{64} << 20;
  o.attention.policy = policy;
  o.attention.token_budget = 128;
  o.attention.sink_tokens = 16;
  o.attention.decode_local_tokens = 64;
  o.attention.prefill_local_tokens = 64;
  o.attention.streaming_ratio = 0.5;
  o.tensor_parallel_size = tp;
  return o;
}

}  // namespace ls
