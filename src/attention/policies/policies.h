#pragma once
// Factories of the built-in policies, one per file in this folder; policy_registry.cpp lists
// them by name.

#include <memory>

#include "attention/attention_config.h"
#include "attention/attention_policy.h"

namespace ls {

Result<std::unique_ptr<AttentionPolicy>> make_dense_policy(const AttentionConfig&,
                                                           const PolicyModelInfo&);
Result<std::unique_ptr<AttentionPolicy>> make_streaming_policy(const AttentionConfig&,
                                                               const PolicyModelInfo&);
Result<std::unique_ptr<AttentionPolicy>> make_quest_policy(const AttentionConfig&,
                                                           const PolicyModelInfo&);
Result<std::unique_ptr<AttentionPolicy>> make_lserve_policy(const AttentionConfig&,
                                                            const PolicyModelInfo&);

}  // namespace ls
