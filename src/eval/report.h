#pragma once
// Summaries of an evaluation run: the accuracy table (task x context length), the niah_single
// depth grid and its heatmap (LServe Figure 9: context length on x, needle depth on y, colour =
// accuracy) as a self-contained SVG, and the JSON record of every result.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eval/niah_runner.h"

namespace ls::eval {

struct CellStats {
  int32_t num_prompts = 0;
  double exact = 0;   // share of exact answers
  double recall = 0;  // mean recall
  double contained = 0;  // mean share of answers contained in the prediction (RULER's score)
};

struct AccuracyTable {
  std::vector<std::string> tasks;                              // rows, in first-seen order
  std::vector<int32_t> lengths;                                // columns, ascending
  std::map<std::pair<std::string, int32_t>, CellStats> cells;  // (task, length) -> stats
};

struct DepthGrid {
  std::vector<int32_t> lengths;                           // x, ascending
  std::vector<double> depths;                             // y, ascending
  std::map<std::pair<int32_t, double>, CellStats> cells;  // (length, depth) -> stats
  bool empty() const { return cells.empty(); }
};

AccuracyTable summarize(const std::vector<PromptResult>& results);
// niah_single prompts whose depth is a grid point.
DepthGrid niah_depth_grid(const std::vector<PromptResult>& results);

enum class TableMetric { kContained, kExact, kRecall };
// A fixed-width text table of one metric. Every row ends with its prompt count per cell.
std::string format_table(const AccuracyTable& table, TableMetric metric);
// Markdown version (for the README and bench/results): each cell is "contained / exact (prompts)",
// answer-contained (RULER's string match) first.
std::string format_markdown_table(const AccuracyTable& table);
std::string heatmap_svg(const DepthGrid& grid, std::string_view title);

// {"config": <config_json>, "summary": [...], "depth_grid": [...], "results": [...]}.
// config_json must be a JSON value (the caller's description of the model and policy).
std::string results_json(const std::vector<PromptResult>& results, std::string_view config_json);

}  // namespace ls::eval
