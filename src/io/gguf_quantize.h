#pragma once
// Quantization of f32 rows into ggml blocks (the inverse of io/gguf_dequant): used by
// `longserve quantize` (a GGUF file from a Hugging Face checkpoint) and by `--quantization` on
// load. Q8_0, Q4_0 and Q4_1 follow ggml's reference rounding (round to nearest on the block's
// absolute maximum or min/max range); Q4_K and Q6_K choose each sub-block's scale (and Q4_K's
// minimum) by a small search for the least squared error, then store the sub-block scales in 6
// (Q4_K) or 8 (Q6_K) bits under one f16 super-block scale, as the formats require.

#include <cstdint>

#include "core/status.h"
#include "io/gguf.h"

namespace ls {

// True for Q8_0, Q4_0, Q4_1, Q4_K, Q6_K.
bool ggml_type_quantizable(GgmlType type);

// Quantizes x[n] (n a whole number of blocks) into n / block elems blocks at dst (any
// alignment). kUnimplemented for a type ggml_type_quantizable rejects; kInvalidArgument when n
// is not a whole number of blocks.
Status quantize_row(GgmlType type, const float* x, int64_t n, uint8_t* dst);

}  // namespace ls
