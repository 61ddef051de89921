#pragma once
// Test helper shared by the CPU (tests/kernels) and CUDA (tests/cuda) attention cases: packs each
// sequence's per-kv-head page lists into the plan's selection arrays.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ls::test_common {

struct SelectionRows {
  int32_t max_selected = 1;
  std::vector<int32_t> selected;      // [rows, num_kv, max_selected]
  std::vector<int32_t> num_selected;  // [rows, num_kv]
};

// Seq has `selected_row` (-1: none) and `selected` (one page list per kv head). Rows are
// [num_seqs + 1] (one spare); max_selected is one more than the longest list, and entries past a
// list's count are 0, a valid-looking page index, so a kernel must honour the count.
template <class Seq>
SelectionRows pack_selection_rows(const std::vector<Seq>& seqs, int32_t num_kv) {
  SelectionRows r;
  for (const Seq& s : seqs) {
    for (const auto& l : s.selected)
      r.max_selected = std::max<int32_t>(r.max_selected, static_cast<int32_t>(l.size()) + 1);
  }
  const size_t rows = seqs.size() + 1;
  r.selected.assign(rows * static_cast<size_t>(num_kv * r.max_selected), 0);
  r.num_selected.assign(rows * static_cast<size_t>(num_kv), 0);
  for (const Seq& s : seqs) {
    if (s.selected_row < 0) continue;
    for (int32_t g = 0; g < num_kv && g < static_cast<int32_t>(s.selected.size()); ++g) {
      const auto& l = s.selected[static_cast<size_t>(g)];
      const size_t head = static_cast<size_t>(s.selected_row) * num_kv + g;
      std::copy(l.begin(), l.end(), r.selected.begin() + head * r.max_selected);
      r.num_selected[head] = static_cast<int32_t>(l.size());
    }
  }
  return r;
}

}  // namespace ls::test_common
