#include "attention/attention_config.h"

namespace ls {

Status AttentionConfig::validate() const {
  if (!(streaming_ratio >= 0.0 && streaming_ratio <= 1.0)) {
    return invalid_argument("--streaming-ratio must be in [0, 1] (got {})", streaming_ratio);
  }
  if (token_budget <= 0) return invalid_argument("--token-budget must be positive (got {})", token_budget);
  if (page_tokens != -1 && page_tokens <= 0) {
    return invalid_argument("--page-tokens must be positive (got {})", page_tokens);
  }
  if (logical_page_tokens != -1 && logical_page_tokens <= 0) {
    return invalid_argument("--logical-page-tokens must be positive (got {})", logical_page_tokens);
  }
  if (page_tokens > 0 && logical_page_tokens > 0 && page_tokens % logical_page_tokens != 0) {
    return invalid_argument("--page-tokens ({}) must be a multiple of --logical-page-tokens ({})",
                            page_tokens, logical_page_tokens);
  }
  if (select_interval <= 0) {
    return invalid_argument("--select-interval must be >= 1 (got {})", select_interval);
  }
  if (sink_tokens < 0) return invalid_argument("--sink-tokens must be >= 0 (got {})", sink_tokens);
  if (prefill_local_tokens <= 0 || decode_local_tokens <= 0) {
    return invalid_argument("--prefill-local-tokens and --decode-local-tokens must be positive");
  }
  return {};
}

}  // namespace ls
