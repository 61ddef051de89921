#pragma once
// Fixed strings of the OpenAI / vLLM wire format shared by the request, response and metrics
// code, and the response ids vLLM hands out ("cmpl-<32 hex>", "chatcmpl-<32 hex>").

#include <string>

#include "engine/sampling_params.h"

namespace ls {

// vLLM's finish_reason strings ("stop", "length", "abort", "error"); "" for kNone, which the
// JSON writers turn into null.
inline const char* finish_reason_text(FinishReason reason) {
  return reason == FinishReason::kNone ? "" : finish_reason_name(reason);
}

// prefix + 32 random hex digits, e.g. "cmpl-9f0c…". Unique with overwhelming probability.
std::string make_response_id(const char* prefix);

}  // namespace ls
