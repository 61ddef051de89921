#pragma once
// Flags shared by every subcommand that runs a model (--model, --device, attention knobs, engine
// limits), bound to one EngineConfig. Keeping them in one place keeps the subcommands agreeing.

#include <CLI/CLI.hpp>

#include <string>

#include "engine/engine_config.h"

namespace ls {

// The bundled model (LONGSERVE_MODEL overrides), used when --model is not given.
std::string default_model_dir();

// Adds --model, --device, --threads, --max-model-len, --max-num-seqs,
// --max-num-batched-tokens, --kv-cache-bytes, --gpu-memory-utilization, --engine-seed and the attention
// flags (--attention, --head-pattern, --streaming-ratio, --token-budget, --page-tokens,
// --logical-page-tokens, --select-interval, --keep-first-page, --sink-tokens,
// --prefill-local-tokens, --decode-local-tokens) to `app`, writing into `config`.
void add_engine_flags(CLI::App& app, EngineConfig& config);

// Fills defaults that depend on other flags (the bundled model when --model is absent).
void finalize_engine_flags(EngineConfig& config);

}  // namespace ls
