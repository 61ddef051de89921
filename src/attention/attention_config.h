#pragma once
// User knobs of the attention policy (EngineConfig's attention part). Immutable after
// validation. A value of -1 means "the policy's default" (LServe's defaults for lserve, Quest's
// 16-token pages for quest), so one set of CLI flags serves every policy.

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ls {

struct AttentionConfig {
  std::string policy = "dense";      // dense | streaming | quest | lserve
  std::string head_pattern_path;     // DuoAttention full_attention_heads.tsv (lserve)
  double streaming_ratio = 0.5;      // share of kv heads made streaming heads (lserve)
  int32_t token_budget = 4096;       // tokens a selecting head attends to in decode
  int32_t page_tokens = -1;          // physical page; lserve 64, quest 16, dense/streaming 64
  int32_t logical_page_tokens = -1;  // summary granularity; lserve 16 (quest: = page)
  int32_t select_interval = 4;       // decode steps a selection is reused for
  // Selecting heads always keep page 0 (the attention sink) besides the last page; the other
  // budget pages come from the bound (docs/smollm2-selection.md says why).
  bool keep_first_page = false;
  // Page summaries in two levels (docs/two-level-summaries.md): 1 = one level (every logical
  // page scored each selection); 2 = a coarse level per group of pages on the device, refined
  // only where it can matter (the same pages are chosen).
  int32_t page_summary_levels = 1;
  int32_t summary_group_pages = -1;         // pages per coarse group; -1: 1024 tokens' worth
  std::string fine_summary_memory = "auto";  // auto | device | host (auto: host with --kv-offload
                                             //   on and two levels, else device)
  int32_t sink_tokens = 128;
  int32_t prefill_local_tokens = 8192;
  int32_t decode_local_tokens = 256;

  Status validate() const;
};

}  // namespace ls
