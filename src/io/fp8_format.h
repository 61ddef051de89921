#pragma once
// How a published FP8 checkpoint stores its linear weights, from config.json's
// quantization_config (../shared/reference/quant_tp_anchor.md lists the formats):
// - compressed-tensors (`quant_method: compressed-tensors`, `format: float-quantized`): every
//   config group quantizes weights to 8-bit floats with strategy `channel` (a `weight_scale`
//   [out, 1]), `tensor` (one scale) or `block` (`block_structure` [r, c], scales
//   [ceil(out / r), ceil(in / c)]); activations absent or dynamic.
// - native fp8 (`quant_method: fp8`, transformers' "fine-grained FP8"): `weight_block_size`
//   [r, c] with `weight_scale_inv` [ceil(out / r), ceil(in / c)], `activation_scheme: dynamic`.
// In both, the real weight is e4m3 code x scale (the "_inv" is the historic name of the same
// multiplier). Anything else (another quant_method or format, static activation scales, a KV
// cache scheme, e5m2, integer types) is refused when config.json is parsed, with a message that
// names it.

#include <cstdint>
#include <string>
#include <vector>

namespace ls {

enum class Fp8ScaleLayout : uint8_t { kTensor, kChannel, kBlock };

struct Fp8CheckpointFormat {
  std::string method;  // "compressed-tensors" or "fp8", for messages
  Fp8ScaleLayout layout = Fp8ScaleLayout::kChannel;
  int64_t block_rows = 0;  // kBlock: rows and columns one scale covers
  int64_t block_cols = 0;
  std::string scale_suffix;  // the scale tensor beside `<module>.weight`: "weight_scale(_inv)"
  // Modules the config says stay unquantized (compressed-tensors `ignore`, fp8
  // `modules_to_not_convert`); informational: a weight stored in a float dtype loads as one.
  std::vector<std::string> ignore;
};

const char* fp8_layout_name(Fp8ScaleLayout layout);

}  // namespace ls
