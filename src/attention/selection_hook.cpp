#include "attention/selection_hook.h"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace ls {

std::vector<RecordedSelection> read_selections(Backend& backend, int32_t layer,
                                               const kernels::PageSelectParams& p) {
  std::vector<RecordedSelection> out;
  if (p.num_seqs <= 0 || p.out_rows == nullptr) return out;
  backend.synchronize();
  const auto n = static_cast<size_t>(p.num_seqs);
  std::vector<int32_t> rows(n), kv_lens(n);  // [num_seqs] i32 each
  backend.copy_bytes(rows.data(), p.out_rows, static_cast<int64_t>(n * sizeof(int32_t)));
  backend.copy_bytes(kv_lens.data(), p.kv_lens, static_cast<int64_t>(n * sizeof(int32_t)));
  const auto heads = static_cast<size_t>(p.num_kv_heads);
  const auto width = static_cast<size_t>(p.max_selected);
  std::vector<int32_t> sel(heads * width), count(heads);  // [heads, max_selected], [heads] i32
  for (size_t s = 0; s < n; ++s) {
    if (rows[s] < 0) continue;
    const int64_t row = rows[s];
    backend.copy_bytes(sel.data(), p.selected + row * p.num_kv_heads * p.max_selected,
                       static_cast<int64_t>(sel.size() * sizeof(int32_t)));
    backend.copy_bytes(count.data(), p.num_selected + row * p.num_kv_heads,
                       static_cast<int64_t>(count.size() * sizeof(int32_t)));
    backend.synchronize();
    RecordedSelection r;
    r.layer = layer;
    r.seq = static_cast<int32_t>(s);
    r.row = rows[s];
    r.kv_len = kv_lens[s];
    r.pages.resize(heads);
    for (size_t h = 0; h < heads; ++h) {
      const size_t c = static_cast<size_t>(std::clamp(count[h], 0, p.max_selected));
      r.pages[h].assign(sel.begin() + static_cast<ptrdiff_t>(h * width),
                        sel.begin() + static_cast<ptrdiff_t>(h * width + c));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ls
