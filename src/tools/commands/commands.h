#pragma once
// Each subcommand registers itself on the root app and returns the function that runs it once
// CLI11 has parsed the arguments (an exit code).

#include <CLI/CLI.hpp>

#include <functional>

namespace ls {

using CommandRunner = std::function<int()>;

CommandRunner add_generate_command(CLI::App& app);
CommandRunner add_tokenize_command(CLI::App& app);
CommandRunner add_score_command(CLI::App& app);
CommandRunner add_eval_command(CLI::App& app);
CommandRunner add_calibrate_command(CLI::App& app);
CommandRunner add_serve_command(CLI::App& app);
CommandRunner add_quantize_command(CLI::App& app);
// `bench` with its subcommands (`bench serve`).
CommandRunner add_bench_command(CLI::App& app);

}  // namespace ls
