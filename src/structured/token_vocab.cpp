#include "structured/token_vocab.h"

#include <algorithm>
#include <utility>


namespace ls::grammar {

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<bool> excluded)
    : bytes_(std::move(token_bytes)), excluded_(std::move(excluded)) {
  excluded_.resize(bytes_.size(), true);
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (excluded_[id] || bytes_[id].empty()) {
      excluded_[id] = true;
      continue;
    }
    sorted_.push_back(static_cast<int32_t>(id));
    max_len_ = std::max(max_len_, bytes_[id].size());
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const std::string& x = bytes_[static_cast<size_t>(a)];
    const std::string& y = bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& x = bytes_[static_cast<size_t>(sorted_[i - 1])];
    const std::string& y = bytes_[static_cast<size_t>(sorted_[i])];
    const size_t n = std::min(x.size(), y.size());
    size_t k = 0;
    while (k < n && x[k] == y[k]) ++k;
    lcp_[i] = static_cast<uint32_t>(k);
  }
}

}  // namespace ls::grammar
