#pragma once
// Shared-prefix decode attention on the CPU (kernels/shared_prefix.h): every plan item is one
// tile of its rows (sequences x query heads of one kv head) against its key range, computed with
// the paged-attention tile arithmetic (kernels/cpu/attention_tile.h: online softmax in fp32, the
// lanes layout when the tile has 16 rows or more, so a prefix key block is read once for the
// whole group); its per-row result and log-sum-exp go to a partial slot, and a second pass
// merges each (sequence, query head)'s slots into out. Pools may be f32, bf16, f16 or quantized
// (pages dequantized per visit); q/out f32, bf16 or f16. Rows without a visible key are 0.

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/shared_prefix.h"

namespace ls::kernels::cpu {

Status shared_prefix_attention(const SharedPrefixParams& params, ThreadPool& pool);
Status shared_prefix_attention(const SharedPrefixParams& params, ThreadPool& pool, Isa isa);

}  // namespace ls::kernels::cpu
