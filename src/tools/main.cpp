// longserve: the command line. Each subcommand lives in commands/; this file only dispatches.
#include <CLI/CLI.hpp>

#include <map>

#include "core/log.h"
#include "tools/commands/commands.h"

int main(int argc, char** argv) {
  ls::init_logging();
  CLI::App app{"longserve: serve long-context LLMs with unified sparse attention"};
  app.require_subcommand(1);
  std::map<std::string, ls::CommandRunner> runners;
  runners["generate"] = ls::add_generate_command(app);
  runners["tokenize"] = ls::add_tokenize_command(app);
  runners["score"] = ls::add_score_command(app);
  runners["eval"] = ls::add_eval_command(app);
  runners["calibrate"] = ls::add_calibrate_command(app);
  runners["serve"] = ls::add_serve_command(app);
  runners["bench"] = ls::add_bench_command(app);
  runners["quantize"] = ls::add_quantize_command(app);
  CLI11_PARSE(app, argc, argv);
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = runners.find(sub->get_name());
    if (it != runners.end()) return it->second();
  }
  return 1;
}
