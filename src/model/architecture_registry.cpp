#include "model/architecture.h"

namespace ls {

namespace {
// One line per family.
const ArchitectureSpec* const kFamilies[] = {
    &llama_architecture(),
    &mistral_architecture(),
    &qwen2_architecture(),
    &qwen3_architecture(),
};
}  // namespace

const ArchitectureSpec* find_architecture(std::string_view name) {
  for (const ArchitectureSpec* spec : kFamilies)
    if (spec->name == name) return spec;
  return nullptr;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const ArchitectureSpec* spec : kFamilies) names.emplace_back(spec->name);
  return names;
}

}  // namespace ls
