#pragma once
// `--load-format dummy` (vLLM's flag and meaning): every weight is drawn from a deterministic
// generator instead of being read, so a model directory needs only config.json (+ tokenizer
// files). Benchmarks of large shapes (a 70B-shaped model over 4 GPUs) then need no checkpoint.
//
// The value of a weight is a pure function of (seed, tensor name, element index in the FULL
// tensor): a counter-based hash (splitmix64) of those, mapped to a uniform value whose standard
// deviation follows scripts/model/make_bundled_model.py's InitScales, so activations stay finite
// and not degenerate over many layers: q/k 2 / sqrt(fan_in), other linear weights
// 1 / sqrt(fan_in), the embedding 1, the LM head 4 / sqrt(hidden), norm weights exactly 1, biases
// 0.3. A tensor-parallel rank generates exactly its slice (the rows and columns of the full
// tensor the slicing rules of model/tensor_parallel.h give it, vocabulary slices zero-padded), so
// TP = N equals TP = 1 up to the order of the reductions.
//
// Dummy weights are random: attention over them selects nearly at random, so numbers that depend
// on the locality of selection (hit rates of the device page cache, sparse attention's accuracy)
// are not representative; timing of dense work is.

#include <cstdint>
#include <functional>
#include <string_view>
#include <thread>

#include "core/status.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/architecture.h"
#include "model/tensor_parallel.h"

namespace ls {

// The load formats Model::load accepts: "auto" reads the checkpoint; "dummy" generates.
enum class LoadFormat : uint8_t { kAuto, kDummy };

// "auto" or "dummy"; anything else is an error naming both.
Result<LoadFormat> parse_load_format(std::string_view name);

// The value (before rounding to bf16) of element `index` (row-major in the full tensor) of the
// tensor `name` whose full shape is [rows, cols] (cols = 1 for a vector).
float dummy_weight_value(uint64_t seed, std::string_view name, int64_t rows, int64_t cols,
                         int64_t index);

// A checkpoint (bf16 tensors in memory) with every tensor load_weights reads for `config`, each
// holding rank's slice under `layout` (size 1: the whole tensor). Generation runs on this
// process's CPU threads, which write every byte of the tensors (zero rows included) into memory
// that is not zeroed first. An FP8 checkpoint's config (quantization_config) is refused; a
// generation thread that cannot be started is an error (resource_exhausted).
Result<Checkpoint> dummy_checkpoint(const ModelConfig& config, const ArchitectureSpec& arch,
                                    const TpLayout& layout, int32_t rank, uint64_t seed);

// Runs work(0) .. work(n - 1), work(0) on the calling thread and the others on threads made by
// `spawn` (std::thread when empty; tests pass one that fails). A thread that cannot be made
// (std::system_error) is an error naming it, returned once the threads already running are done
// (so nothing is left running and nothing calls std::terminate); work of indices not started
// is then not done.
using ThreadSpawner = std::function<std::thread(std::function<void()>)>;
Status run_on_threads(unsigned n, const std::function<void(unsigned)>& work,
                      const ThreadSpawner& spawn = {});

}  // namespace ls
