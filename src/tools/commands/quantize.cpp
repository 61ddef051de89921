// longserve quantize: a Hugging Face checkpoint directory -> one GGUF file with its linear weights
// and embeddings in a ggml block type (io/gguf_convert.h), which `--model FILE.gguf` then runs
// with the quantized CPU kernels.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "io/gguf_convert.h"
#include "tools/commands/commands.h"

namespace ls {

namespace {

struct QuantizeOptions {
  std::string in;
  std::string out;
  std::string type;
};

int run_quantize(const QuantizeOptions& o) {
  auto type = parse_quant_type(o.type);
  if (!type.ok()) {
    fmt::print(stderr, "error: {}\n", type.status().message());
    return 1;
  }
  auto fallbacks = convert_to_gguf(o.in, o.out, *type);
  if (!fallbacks.ok()) {
    fmt::print(stderr, "error: {}\n", fallbacks.status().message());
    return 1;
  }
  fmt::print("wrote {} ({}", o.out, ggml_type_name(*type));
  if (*fallbacks > 0) {
    fmt::print("; {} tensor(s) whose rows are not whole 256-blocks in the fallback type", *fallbacks);
  }
  fmt::print(")\n");
  return 0;
}

}  // namespace

CommandRunner add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* sub = app.add_subcommand(
      "quantize", "Write a Hugging Face checkpoint as a quantized GGUF file");
  sub->add_option("--in", o->in, "Hugging Face checkpoint directory")->required();
  sub->add_option("--out", o->out, "GGUF file to write")->required();
  sub->add_option("--type", o->type, "q8_0, q4_0, q4_1, q4_k or q6_k")->required();
  return [o] { return run_quantize(*o); };
}

}  // namespace ls
