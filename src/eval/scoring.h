#pragma once
// How a generation is scored (docs/training.md, "Scoring"; Python score_text): cut at the first
// newline (the engine already stopped at the end tokens and dropped them), strip whitespace, then
// exact match against the answer and RULER's string_match_all recall over the answer's items.

#include <string>
#include <string_view>
#include <vector>

namespace ls::eval {

struct PredictionScore {
  std::string cut;     // the prediction as compared: first line, whitespace-stripped
  bool exact = false;  // cut == answer
  double recall = 0;   // share of `answers` found as substrings of cut
};

std::string cut_prediction(std::string_view text);
PredictionScore score_prediction(std::string_view prediction, std::string_view answer,
                                 const std::vector<std::string>& answers);

}  // namespace ls::eval
