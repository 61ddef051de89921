#pragma once
// Numerical choices a backend is created with and keeps for its lifetime (ModelStackOptions fills
// them from EngineConfig). The CPU backend has none of these to make and ignores them.

namespace ls {

struct BackendOptions {
  // CUDA, FP8 weights (docs/fp8-weights.md): the FP8 GEMM accumulates the whole k in the tensor
  // cores' own accumulator (about 14 significant bits on Hopper) instead of promoting partial
  // sums into f32 every few k-steps; faster, with an error that grows with k.
  bool fp8_fast_accum = false;
};

}  // namespace ls
