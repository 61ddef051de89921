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
  if (page_summary_levels != 1 && page_summary_levels != 2) {
    return invalid_argument("--page-summary-levels must be 1 or 2 (got {})", page_summary_levels);
  }
  if (summary_group_pages != -1 && summary_group_pages <= 0) {
    return invalid_argument("--summary-group-pages must be positive (got {})",
                            summary_group_pages);
  }
  if (fine_summary_memory != "auto" && fine_summary_memory != "device" &&
      fine_summary_memory != "host") {
    return invalid_argument("--fine-summary-memory must be auto, device or host (got '{}')",
                            fine_summary_memory);
  }
  if (fine_summary_memory == "host" && page_summary_levels != 2) {
    return invalid_argument(
        "--fine-summary-memory host needs --page-summary-levels 2 (one level scores every fine "
        "summary each selection)");
  }
  if (sink_tokens < 0) return invalid_argument("--sink-tokens must be >= 0 (got {})", sink_tokens);
  if (prefill_local_tokens <= 0 || decode_local_tokens <= 0) {
    return invalid_argument("--prefill-local-tokens and --decode-local-tokens must be positive");
  }
  return {};
}

}  // namespace ls
