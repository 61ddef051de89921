#pragma once
// Creates a policy by name (AttentionConfig::policy).

#include <memory>
#include <string>
#include <vector>

#include "attention/attention_config.h"
#include "attention/attention_policy.h"

namespace ls {

Result<std::unique_ptr<AttentionPolicy>> make_attention_policy(const AttentionConfig& config,
                                                               const PolicyModelInfo& model);
std::vector<std::string> attention_policy_names();

}  // namespace ls
