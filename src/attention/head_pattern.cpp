#include "attention/head_pattern.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

namespace ls {

Result<HeadGates> parse_head_gates(std::string_view text, std::string_view source,
                                   int32_t num_layers, int32_t num_kv_heads) {
  HeadGates out;
  out.num_layers = num_layers;
  out.num_kv_heads = num_kv_heads;
  std::istringstream lines{std::string(text)};
  std::string line;
  int32_t row = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::istringstream cells(line);
    std::string cell;
    int32_t col = 0;
    while (std::getline(cells, cell, '\t')) {
      if (cell.empty()) continue;
      errno = 0;
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (end == cell.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
        return data_loss("{}: row {} column {}: '{}' is not a number", source, row + 1, col + 1,
                         cell);
      }
      out.gates.push_back(std::clamp(v, 0.0, 1.0));
      ++col;
    }
    if (col != num_kv_heads) {
      return data_loss("{}: row {} has {} values, the model has {} kv heads per layer", source,
                       row + 1, col, num_kv_heads);
    }
    ++row;
  }
  if (row != num_layers) {
    return data_loss("{}: {} rows, the model has {} layers", source, row, num_layers);
  }
  return out;
}

Result<HeadGates> load_head_gates(const std::filesystem::path& path, int32_t num_layers,
                                  int32_t num_kv_heads) {
  std::ifstream f(path);
  if (!f) return not_found("head pattern file {} cannot be opened", path.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_head_gates(ss.str(), path.string(), num_layers, num_kv_heads);
}

std::vector<bool> choose_streaming_heads(const HeadGates& gates, double streaming_ratio) {
  const size_t n = gates.gates.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // Stable sort on the gate keeps (layer, head) order among ties: deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return gates.gates[a] < gates.gates[b]; });
  const auto k = static_cast<size_t>(std::llround(streaming_ratio * static_cast<double>(n)));
  std::vector<bool> streaming(n, false);
  for (size_t i = 0; i < std::min(k, n); ++i) streaming[order[i]] = true;
  return streaming;
}

std::vector<bool> default_streaming_heads(int32_t num_layers, int32_t num_kv_heads,
                                          double streaming_ratio) {
  const auto per_layer = static_cast<int32_t>(std::llround(streaming_ratio * num_kv_heads));
  std::vector<bool> streaming(static_cast<size_t>(num_layers) * static_cast<size_t>(num_kv_heads));
  for (int32_t l = 0; l < num_layers; ++l) {
    for (int32_t h = num_kv_heads - per_layer; h < num_kv_heads; ++h) {
      streaming[static_cast<size_t>(l * num_kv_heads + h)] = true;
    }
  }
  return streaming;
}

Status write_head_gates(const std::filesystem::path& path, const HeadGates& gates) {
  std::ofstream f(path);
  if (!f) return io_error("cannot write {}", path.string());
  for (int32_t l = 0; l < gates.num_layers; ++l) {
    for (int32_t h = 0; h < gates.num_kv_heads; ++h) {
      if (h) f << '\t';
      f << fmt::format("{:.6e}", gates.gates[static_cast<size_t>(l * gates.num_kv_heads + h)]);
    }
    f << '\n';
  }
  return f ? Status{} : io_error("writing {} failed", path.string());
}

}  // namespace ls
