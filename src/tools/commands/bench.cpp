// longserve bench: benchmarks against a running server (`bench serve`, following vllm bench serve).
#include <map>
#include <memory>

#include "tools/bench_serve/bench_serve.h"
#include "tools/commands/commands.h"

namespace ls {

CommandRunner add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto serve = std::make_shared<std::function<int()>>(add_bench_serve_command(*bench));
  return [bench, serve] {
    if (bench->got_subcommand("serve")) return (*serve)();
    return 1;
  };
}

}  // namespace ls
