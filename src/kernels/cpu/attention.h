#pragma once
// Paged attention over head-wise pages for a mixed batch (prefill chunks and decode tokens),
// following the plan in AttentionParams (kernels/paged_kv.h). Online softmax in fp32; visits
// only the pages a query block can see (causal bound, Λ window, selected list), so cost is
// proportional to the blocks actually computed.
//
// Work is split into (sequence, kv head, query tile) items; each item processes its GQA
// group's query heads together, so a page is read once per tile. Items are scheduled largest
// first over the pool; when a batch has too few items to fill the pool (decode of one or two
// sequences), long page lists are split into chunks whose partial softmax states are merged.
// Every output row is written; a row with no visible key is 0. Pool head_dim must equal
// params.head_dim; q/out and pools may be f32, bf16 or f16.
// Streaming rings must hold every window page a query of this call needs
// (ring_pages >= ceil((local + q_len - 1) / page_tokens) + 1 covers any chunk); a page
// whose slot was already reused is skipped rather than misread.

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/paged_kv.h"

namespace ls::kernels::cpu {

void paged_attention(const AttentionParams& params, ThreadPool& pool);
void paged_attention(const AttentionParams& params, ThreadPool& pool, Isa isa);

// How decode tiles read quantized (fp8 / int8 / int4) pages: kFused (the default) runs Q·K^T and
// P·V on the codes where the ISA and shape allow (kernels/cpu/attention_quant_*.h); kDequantize
// always dequantizes each visited page to f32 first. Benchmarks time one against the other.
enum class QuantKvDecode { kFused, kDequantize };
void paged_attention(const AttentionParams& params, ThreadPool& pool, Isa isa,
                     QuantKvDecode quant_decode);

}  // namespace ls::kernels::cpu
