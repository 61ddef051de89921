#include "attention/policy_registry.h"

#include <fmt/format.h>

#include "attention/policies/policies.h"

namespace ls {

namespace {

using Factory = Result<std::unique_ptr<AttentionPolicy>> (*)(const AttentionConfig&,
                                                             const PolicyModelInfo&);
struct Entry {
  const char* name;
  Factory make;
};
// One line per policy.
constexpr Entry kPolicies[] = {
    {"dense", &make_dense_policy},
    {"streaming", &make_streaming_policy},
    {"quest", &make_quest_policy},
    {"lserve", &make_lserve_policy},
};

}  // namespace

std::vector<std::string> attention_policy_names() {
  std::vector<std::string> names;
  for (const Entry& e : kPolicies) names.emplace_back(e.name);
  return names;
}

Result<std::unique_ptr<AttentionPolicy>> make_attention_policy(const AttentionConfig& config,
                                                               const PolicyModelInfo& model) {
  for (const Entry& e : kPolicies) {
    if (config.policy == e.name) {
      LS_ASSIGN_OR_RETURN(auto policy, e.make(config, model));
      LS_RETURN_IF_ERROR(policy->kv_geometry().validate());
      return policy;
    }
  }
  return invalid_argument("unknown attention policy '{}' (choose from {})", config.policy,
                          fmt::join(attention_policy_names(), ", "));
}

}  // namespace ls
