#include "eval/scoring.h"

namespace ls::eval {

namespace {

// Python str.strip() without arguments, for the ASCII whitespace a model emits here.
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

std::string cut_prediction(std::string_view text) {
  const size_t nl = text.find('\n');
  if (nl != std::string_view::npos) text = text.substr(0, nl);
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  return std::string(text.substr(begin, end - begin));
}

PredictionScore score_prediction(std::string_view prediction, std::string_view answer,
                                 const std::vector<std::string>& answers) {
  PredictionScore s;
  s.cut = cut_prediction(prediction);
  s.exact = s.cut == answer;
  int found = 0;
  for (const std::string& a : answers) found += s.cut.find(a) != std::string::npos ? 1 : 0;
  s.recall =
      answers.empty() ? 0.0 : static_cast<double>(found) / static_cast<double>(answers.size());
  // RULER: sum(r.lower() in pred.lower() for r in ref) / len(ref).
  const std::string pred = ascii_lower(prediction);
  int contained = 0;
  for (const std::string& a : answers) {
    contained += pred.find(ascii_lower(a)) != std::string::npos ? 1 : 0;
  }
  s.contained =
      answers.empty() ? 0.0 : static_cast<double>(contained) / static_cast<double>(answers.size());
  return s;
}

}  // namespace ls::eval
