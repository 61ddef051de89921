// longserve tokenize: text -> ids as JSON, or with --decode ids -> text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "tokenizer/tokenizer.h"
#include "tools/commands/commands.h"
#include "tools/engine_flags.h"
#include "tools/json_print.h"

namespace ls {

namespace {

struct TokenizeOptions {
  std::string model_dir;
  std::string text;
  std::vector<int32_t> ids;
  bool decode = false;
  bool no_special = false;
  bool skip_special = false;
};

int run_tokenize(TokenizeOptions& o) {
  if (o.model_dir.empty()) o.model_dir = default_model_dir();
  auto tok = Tokenizer::load(o.model_dir);
  if (!tok.ok()) {
    fmt::print(stderr, "error: {}\n", tok.status().message());
    return 1;
  }
  if (o.decode) {
    for (int32_t id : o.ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) {
        fmt::print(stderr, "error: token id {} is outside the vocabulary [0, {})\n", id,
                   (*tok)->vocab_size());
        return 1;
      }
    }
    fmt::print("{}\n", json_string((*tok)->decode(o.ids, o.skip_special)));
    return 0;
  }
  fmt::print("[{}]\n", fmt::join((*tok)->encode(o.text, !o.no_special), ", "));
  return 0;
}

}  // namespace

CommandRunner add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of --text as JSON (or --decode ids)");
  sub->add_option("--model", o->model_dir, "Model directory with tokenizer.json (default: bundled)");
  sub->add_option("--text,-t", o->text, "Text to tokenize");
  sub->add_flag("--decode", o->decode, "Decode --ids back to text (printed as a JSON string)");
  sub->add_option("--ids", o->ids, "Token ids to decode (comma-separated)")->delimiter(',');
  sub->add_flag("--no-special-tokens", o->no_special, "Encode without adding BOS/special tokens");
  sub->add_flag("--skip-special-tokens", o->skip_special, "Decode without special tokens");
  sub->callback([sub, o] {
    if (o->decode && o->ids.empty()) throw CLI::ValidationError("--decode needs --ids");
    if (!o->decode && sub->count("--text") == 0) throw CLI::ValidationError("--text is required");
  });
  return [o] { return run_tokenize(*o); };
}

}  // namespace ls
