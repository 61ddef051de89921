#pragma once
// How a model is split over the ranks of tensor parallelism (docs/tensor-parallel.md), and the
// weight slicing that makes one rank's checkpoint out of the Hugging Face one at load time.
//
// Megatron-style split, as vLLM's Llama: q/k/v and gate/up are column-parallel (each rank keeps
// the output rows of its q heads, its kv heads, its slice of the MLP width), o_proj and down_proj
// row-parallel (each rank keeps the matching input columns; the partial outputs are summed by one
// all-reduce after attention and one after the MLP; their biases stay on rank 0 only, so the sum
// adds them once). Norms, q_norm / k_norm (one [head_dim] vector shared by every head), the
// embedding and the LM head are replicated on every rank.
//
// Heads: rank r owns q heads [r * Hq / N, (r + 1) * Hq / N). KV heads are partitioned (Hkv / N
// per rank) when Hkv >= N, and replicated when Hkv < N: each rank then holds one kv head,
// Hkv r / (N / Hkv), shared by the N / Hkv ranks whose q heads belong to its group, so a rank's
// q heads still map to its kv heads by the usual GQA rule (local q head j -> local kv head
// j / (q heads per rank / kv heads per rank)).

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/architecture.h"

namespace ls {

// Which slice of the model one rank holds; size 1 is the whole model.
struct TpShard {
  int32_t rank = 0;
  int32_t size = 1;
};

struct TpLayout {
  int32_t size = 1;
  int64_t q_heads_per_rank = 0;
  int64_t kv_heads_per_rank = 0;  // 1 when replicated
  int64_t kv_replicas = 1;        // ranks holding a copy of one kv head (N / Hkv when replicated)
  int64_t inter_per_rank = 0;     // intermediate_size / N

  int64_t first_q_head(int32_t rank) const { return rank * q_heads_per_rank; }
  int64_t first_kv_head(int32_t rank) const {
    return kv_replicas > 1 ? rank / kv_replicas : rank * kv_heads_per_rank;
  }
  // The global ids of rank's kv heads, in local order.
  std::vector<int32_t> kv_heads_of(int32_t rank) const;
};

// N must be 1, 2, 4 or 8 and divide the q heads and the MLP width; the kv heads must be a
// multiple of N or divide N. Errors name the sizes.
Result<TpLayout> make_tp_layout(const ModelConfig& config, int32_t size);

// The config one rank's Model sees (its head counts and MLP width).
ModelConfig shard_config(const ModelConfig& config, const TpLayout& layout);

// A checkpoint holding rank's slices of `full`'s tensors, named and shaped as a Hugging Face
// checkpoint of shard_config(config) would be (every tensor copied into memory; dtypes kept).
// The unquantized (safetensors) kind only.
Result<Checkpoint> shard_checkpoint(const Checkpoint& full, const ModelConfig& config,
                                    const TpLayout& layout, int32_t rank);

}  // namespace ls
