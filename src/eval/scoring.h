#pragma once
// How a generation is scored (docs/training.md, "Scoring"; Python score_text): cut at the first
// newline (the engine already stopped at the end tokens and dropped them), strip whitespace, then
// exact match against the answer and recall over the answer's items in that line. `contained` is
// RULER's own metric (string_match_all): the share of the answer's items found, case-insensitively,
// anywhere in the whole prediction, so " 3633662." or "The number is 3633662" count as right.

#include <string>
#include <string_view>
#include <vector>

namespace ls::eval {

struct PredictionScore {
  std::string cut;     // the prediction as compared: first line, whitespace-stripped
  bool exact = false;  // cut == answer
  double recall = 0;   // share of `answers` found as substrings of cut
  double contained = 0;  // share of `answers` found in the whole prediction, ignoring ASCII case
};

std::string cut_prediction(std::string_view text);
PredictionScore score_prediction(std::string_view prediction, std::string_view answer,
                                 const std::vector<std::string>& answers);

}  // namespace ls::eval
