#include "io/generation_config.h"

#include <memory>
#include <new>
#include <optional>

#include "io/gguf_model.h"
#include "io/json_util.h"

namespace ls {

Result<GenerationConfig> parse_generation_config(std::string_view json,
                                                 std::string_view source_name) {
  const std::string source(source_name);
  try {
    auto parsed = io_json::parse(json, {});
    if (!parsed.ok()) {
      return Status(parsed.status().code(),
                    fmt::format("{}: {}", source, parsed.status().message()));
    }
    const io_json::Json& root = *parsed;
    if (!root.is_object()) {
      return invalid_argument("{}: must be a JSON object, got {}", source,
                              io_json::type_name(root));
    }
    GenerationConfig g;
    LS_ASSIGN_OR_RETURN(auto bos,
                        io_json::int_or_int_list(root, "bos_token_id", source, "bos_token_id"));
    if (bos.size() > 1) {
      return invalid_argument("{}: field \"bos_token_id\" lists {} ids; one is expected", source,
                              bos.size());
    }
    if (!bos.empty()) g.bos_token_id = bos[0];
    LS_ASSIGN_OR_RETURN(g.eos_token_ids,
                        io_json::int_or_int_list(root, "eos_token_id", source, "eos_token_id"));
    LS_ASSIGN_OR_RETURN(g.pad_token_id,
                        io_json::opt_int(root, "pad_token_id", source, "pad_token_id"));
    LS_ASSIGN_OR_RETURN(g.do_sample, io_json::opt_bool(root, "do_sample", source, "do_sample"));
    LS_ASSIGN_OR_RETURN(g.temperature,
                        io_json::opt_number(root, "temperature", source, "temperature"));
    LS_ASSIGN_OR_RETURN(g.top_p, io_json::opt_number(root, "top_p", source, "top_p"));
    LS_ASSIGN_OR_RETURN(g.top_k, io_json::opt_int(root, "top_k", source, "top_k"));
    LS_ASSIGN_OR_RETURN(g.repetition_penalty, io_json::opt_number(root, "repetition_penalty",
                                                                  source, "repetition_penalty"));
    LS_ASSIGN_OR_RETURN(g.min_p, io_json::opt_number(root, "min_p", source, "min_p"));
    LS_ASSIGN_OR_RETURN(g.max_new_tokens,
                        io_json::opt_int(root, "max_new_tokens", source, "max_new_tokens"));
    return g;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory", source);
  } catch (const std::exception& e) {
    return internal_error("{}: {}", source, e.what());
  }
}

Result<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir) {
  LS_ASSIGN_OR_RETURN(std::optional<std::filesystem::path> gguf, find_gguf_model(model_dir));
  if (gguf) {
    LS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(*gguf));
    return gguf_generation_config(*file);
  }
  const auto path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  LS_ASSIGN_OR_RETURN(std::string text, io_json::read_file(path));
  return parse_generation_config(text, path.string());
}

}  // namespace ls
