#pragma once
// Parsing of the grid flags shared by `eval niah` and `calibrate`: context lengths ("2048,4K"),
// depths (a count of grid points, "11", or a list, "0,0.25,0.5") and task names.

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "eval/task_text.h"

namespace ls::eval {

// Comma-separated positive token counts; a K suffix multiplies by 1024.
Result<std::vector<int32_t>> parse_lengths(std::string_view text);
// A bare integer n is the grid depth_grid(n); anything else is a list of depths in [0, 1].
Result<std::vector<double>> parse_depths(std::string_view text);
// Comma-separated task names; "all" is every task.
Result<std::vector<Task>> parse_tasks(std::string_view text);

}  // namespace ls::eval
