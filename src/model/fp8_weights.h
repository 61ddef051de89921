#pragma once
// FP8 (e4m3) linear weights on the host, between the checkpoint and the backend: reading a
// published FP8 checkpoint's weights (io/fp8_format.h) either as e4m3 rows with one scale per
// output row (what the CUDA kernels read) or dequantized to f32 (what the CPU computes with),
// and quantizing float weights per output row at load (--quantization fp8).
//
// Scale layouts become per-row as follows: channel scales are already per row; a tensor scale is
// repeated for every row (exact); block scales ([128, 128] in published checkpoints) are
// dequantized and each row requantized with its own scale max|row| / 448. The last is not exact:
// a value moves by at most half an e4m3 step of its row's new scale, which the tests bound.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/fp8_format.h"

namespace ls {

struct Fp8Rows {
  std::vector<uint8_t> codes;  // [rows, cols] e4m3
  std::vector<float> scales;   // [rows] f32
};

// The name of the scale tensor beside a weight: "m.q_proj.weight" -> "m.q_proj.weight_scale".
std::string fp8_scale_name(const Fp8CheckpointFormat& format, std::string_view weight_name);

// Whether the checkpoint stores `weight_name` as e4m3 (safetensors F8_E4M3).
bool is_fp8_tensor(const Checkpoint& ckpt, std::string_view weight_name);

// The e4m3 weight `weight_name` [rows, cols] and its scale tensor as per-row e4m3 rows. Errors
// name the tensor and file: a shape or dtype that differs from `format`'s layout, a missing
// scale, a scale that is not finite and positive.
Result<Fp8Rows> read_fp8_rows(const Checkpoint& ckpt, const Fp8CheckpointFormat& format,
                              std::string_view weight_name, int64_t rows, int64_t cols);

// The same weight dequantized exactly (e4m3 code x its scale, in f32): [rows, cols].
Result<std::vector<float>> read_fp8_dequantized(const Checkpoint& ckpt,
                                                const Fp8CheckpointFormat& format,
                                                std::string_view weight_name, int64_t rows,
                                                int64_t cols);

// x: [rows, cols] f32 quantized row by row (core/fp8.h quantize_row_e4m3).
Fp8Rows quantize_fp8_rows(const float* x, int64_t rows, int64_t cols);

}  // namespace ls
