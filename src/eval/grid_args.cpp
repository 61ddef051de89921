#include "eval/grid_args.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "eval/prompt_generator.h"

namespace ls::eval {

namespace {

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string item(text.substr(begin, end - begin));
    const size_t a = item.find_first_not_of(" \t");
    const size_t b = item.find_last_not_of(" \t");
    item = a == std::string::npos ? std::string() : item.substr(a, b - a + 1);
    if (!item.empty()) out.push_back(item);
    begin = end + 1;
  }
  return out;
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || errno == ERANGE) return false;
  out = v;
  return true;
}

}  // namespace

Result<std::vector<int32_t>> parse_lengths(std::string_view text) {
  std::vector<int32_t> out;
  for (std::string item : split_list(text)) {
    int64_t scale = 1;
    if (item.back() == 'K' || item.back() == 'k') {
      scale = 1024;
      item.pop_back();
    }
    int64_t v = 0;
    if (!parse_int(item, v) || v <= 0 || v * scale > (int64_t{1} << 30)) {
      return invalid_argument("--lengths: '{}' is not a positive token count", item);
    }
    out.push_back(static_cast<int32_t>(v * scale));
  }
  if (out.empty()) return invalid_argument("--lengths: no lengths given");
  return out;
}

Result<std::vector<double>> parse_depths(std::string_view text) {
  const std::vector<std::string> items = split_list(text);
  int64_t count = 0;
  if (items.size() == 1 && parse_int(items[0], count)) {
    if (count < 1 || count > 1000)
      return invalid_argument("--depths: {} grid points is not in [1, 1000]", count);
    return depth_grid(static_cast<int32_t>(count));
  }
  std::vector<double> out;
  for (const std::string& item : items) {
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || errno == ERANGE || !(v >= 0.0 && v <= 1.0)) {
      return invalid_argument("--depths: '{}' is not a depth in [0, 1]", item);
    }
    out.push_back(v);
  }
  if (out.empty()) return invalid_argument("--depths: no depths given");
  return out;
}

Result<std::vector<Task>> parse_tasks(std::string_view text) {
  std::vector<Task> out;
  for (const std::string& item : split_list(text)) {
    if (item == "all") {
      out.assign(kAllTasks.begin(), kAllTasks.end());
      continue;
    }
    LS_ASSIGN_OR_RETURN(Task t, parse_task(item));
    out.push_back(t);
  }
  if (out.empty()) return invalid_argument("--tasks: no tasks given");
  return out;
}

}  // namespace ls::eval
