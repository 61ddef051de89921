#pragma once
// How a model is split over the ranks of tensor parallelism (docs/tensor-parallel.md), and the
// weight slicing that makes one rank's checkpoint out of the Hugging Face one at load time.
//
// Megatron-style split, as vLLM's Llama: q/k/v and gate/up are column-parallel (each rank keeps
// the output rows of its q heads, its kv heads, its slice of the MLP width), o_proj and down_proj
// row-parallel (each rank keeps the matching input columns; the partial outputs are summed by one
// all-reduce after attention and one after the MLP; their biases stay on rank 0 only, so the sum
// adds them once). Norms and q_norm / k_norm (one [head_dim] vector shared by every head) are
// replicated on every rank.
//
// Vocabulary. The embedding table and the LM head are vocabulary-parallel (as vLLM's
// VocabParallelEmbedding / ParallelLMHead): rank r holds rows [r S, (r + 1) S) of each, S =
// ceil(vocab / N) rounded up to a multiple of kVocabAlign; rows past the vocabulary (the last
// slices when N S > vocab) are zero padding. The embedding gives zero rows for ids outside the
// rank's slice and the ranks' rows are summed by an all-reduce; the LM head gives each rank the
// logits of its slice, all-gathered and reassembled into full rows (model_runner.cpp). Tied
// embeddings slice the one table for both.
//
// Heads. KV heads are partitioned (Hkv / N per rank) when Hkv >= N: by default rank r owns kv
// heads [r Hkv / N, (r + 1) Hkv / N); a balanced layout (balance_roles) instead picks, layer by
// layer, which kv heads each rank owns so every rank gets an even share of the retrieval heads
// (streaming and retrieval heads cost differently). Each rank owns the q heads of its kv heads'
// GQA groups, in the order of its kv heads, so a rank's q heads map to its kv heads by the usual
// rule (local q head j -> local kv head j / (Hq / Hkv)). When Hkv < N the kv heads are
// replicated: rank r owns q heads [r Hq / N, (r + 1) Hq / N) and the one kv head r / (N / Hkv)
// of their group, shared by the N / Hkv ranks of that group.

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/architecture.h"

namespace ls {

// Which slice of the model one rank holds; size 1 is the whole model. kv_order: the balanced
// layout's TpLayout::kv_order (empty: the default layout).
struct TpShard {
  int32_t rank = 0;
  int32_t size = 1;
  std::vector<int32_t> kv_order;
};

struct TpLayout {
  int32_t size = 1;
  int64_t q_heads_per_rank = 0;
  int64_t kv_heads_per_rank = 0;  // 1 when replicated
  int64_t kv_replicas = 1;        // ranks holding a copy of one kv head (N / Hkv when replicated)
  int64_t inter_per_rank = 0;     // intermediate_size / N
  int64_t vocab_size = 0;         // the model's
  int64_t vocab_per_rank = 0;     // S: rank r holds vocabulary rows [r S, (r + 1) S), padded
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;       // the model's
  int64_t group = 1;              // q heads per kv head (Hq / Hkv)
  // Balanced layout: [num_layers * num_kv_heads], layer l's kv heads in rank order (rank r owns
  // entries [r * kv_heads_per_rank, (r + 1) * kv_heads_per_rank) of layer l's row). Empty: the
  // default layout.
  std::vector<int32_t> kv_order;

  // Global id of rank's j-th kv head in `layer`.
  int64_t kv_head(int64_t layer, int32_t rank, int64_t j) const;
  // Global id of rank's j-th q head in `layer`.
  int64_t q_head(int64_t layer, int32_t rank, int64_t j) const;
  // The global ids of rank's kv heads, [num_layers * kv_heads_per_rank], layer by layer.
  std::vector<int32_t> kv_heads_of(int32_t rank) const;
  // Sets kv_order so that, in every layer, the ranks' retrieval heads differ by at most one,
  // and the layer's extra ones go to different ranks from layer to layer. streaming:
  // [num_layers * num_kv_heads]. Nothing to balance (replicated kv heads, or every layer's heads
  // of one role) leaves the default layout.
  void balance_roles(const std::vector<bool>& streaming);
};

// A rank's vocabulary slice is a multiple of this many rows (GEMM tiles, as vLLM pads to 64).
inline constexpr int64_t kVocabAlign = 64;

// The layer index of a checkpoint tensor named "model.layers.<l>.*", or -1 for any other name.
int64_t tensor_layer_index(std::string_view name);

// N must be 1, 2, 4 or 8 and divide the q heads and the MLP width; the kv heads must be a
// multiple of N or divide N. Errors name the sizes.
Result<TpLayout> make_tp_layout(const ModelConfig& config, int32_t size);

// The layout of `shard` (its kv_order checked against the model).
Result<TpLayout> make_tp_layout(const ModelConfig& config, const TpShard& shard);

// How a rank's shard holds an FP8 checkpoint's e4m3 weights (model/fp8_weights.h). Block
// scales cover rows and columns that need not line up with a rank's heads or MLP slice, so the
// weights are first put in a form that slices exactly:
// - kE4m3Rows: the per-row e4m3 form the CUDA loader reads at TP = 1 (read_fp8_rows), sliced:
//   a column-parallel slice keeps its rows' codes and scales, a row-parallel slice keeps each
//   row's scale with the rank's columns (one scale per whole row). A rank's weights are then bit
//   for bit the slice of TP = 1's, whatever the checkpoint's scale layout. The shard stores them
//   as a channel-scaled checkpoint (shard_config says so).
// - kDequantize: dequantized to f32 (exact: code x scale) and sliced like float weights, as the
//   CPU (and --quantization none) computes with them at TP = 1. The shard has no FP8 weights.
// The form is chosen for the whole model (Model::load: whether the backend reads FP8 at the
// hidden width); a row-parallel slice whose width the backend does not read in FP8 (CUDA: not a
// multiple of 16) is then dequantized by the loader from the per-row form, not from the
// checkpoint's scales as at TP = 1.
enum class Fp8Shard : uint8_t { kE4m3Rows, kDequantize };

// The config rank's Model sees (its head counts, MLP width and vocabulary slice; an FP8
// checkpoint's weight format as `fp8` leaves it in the shard).
ModelConfig shard_config(const ModelConfig& config, const TpLayout& layout, int32_t rank,
                         Fp8Shard fp8);

// A checkpoint holding rank's slices of `full`'s tensors, named and shaped as a Hugging Face
// checkpoint of shard_config(config, layout, rank, fp8) would be (float dtypes kept; an FP8
// checkpoint's weights and scales as `fp8` says). A slice that is one span of its tensor (whole
// tensors, a rank's contiguous rows) points into `full`'s memory, so `full` must outlive the
// result; column slices and converted weights are copies the result owns. Safetensors
// checkpoints only (a GGUF model's ggml blocks are not sliced).
Result<Checkpoint> shard_checkpoint(const Checkpoint& full, const ModelConfig& config,
                                    const TpLayout& layout, int32_t rank, Fp8Shard fp8);

}  // namespace ls
