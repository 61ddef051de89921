// Scoring rules (docs/training.md, "Scoring") on hand-checked examples, and the reports built
// from results: table cells, the depth grid, the heatmap SVG and the JSON record.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "eval/eval_prompt.h"
#include "eval/report.h"
#include "eval/scoring.h"

namespace ls::eval {
namespace {

TEST(Scoring, CutsAtNewlineAndStrips) {
  EXPECT_EQ(cut_prediction(" 4829137\nWhat is"), "4829137");
  EXPECT_EQ(cut_prediction("\t 12 34 \r"), "12 34");
  EXPECT_EQ(cut_prediction("\n4829137"), "");
  EXPECT_EQ(cut_prediction(""), "");
}

TEST(Scoring, ExactNeedsTheWholeLine) {
  const std::vector<std::string> one = {"4829137"};
  EXPECT_TRUE(score_prediction(" 4829137", "4829137", one).exact);
  EXPECT_TRUE(score_prediction(" 4829137\nThe special", "4829137", one).exact);
  // A trailing period or a second number is not exact, though recall finds the value.
  PredictionScore s = score_prediction(" 4829137.", "4829137", one);
  EXPECT_FALSE(s.exact);
  EXPECT_DOUBLE_EQ(s.recall, 1.0);
  s = score_prediction(" 482913", "4829137", one);
  EXPECT_FALSE(s.exact);
  EXPECT_DOUBLE_EQ(s.recall, 0.0);
  // The value on the second line does not count.
  EXPECT_DOUBLE_EQ(score_prediction("\n4829137", "4829137", one).recall, 0.0);
}

TEST(Scoring, ContainedIsRulersStringMatchOverTheWholePrediction) {
  const std::vector<std::string> one = {"3633662"};
  // The answers a chat model gives: a period, a sentence around it, a later line, another case.
  EXPECT_DOUBLE_EQ(score_prediction(" 3633662.", "3633662", one).contained, 1.0);
  EXPECT_DOUBLE_EQ(score_prediction("The special number is 3633662", "3633662", one).contained,
                   1.0);
  EXPECT_DOUBLE_EQ(score_prediction("Sure!\n3633662", "3633662", one).contained, 1.0);
  EXPECT_DOUBLE_EQ(score_prediction("Sure!\n3633662", "3633662", one).recall, 0.0);
  EXPECT_DOUBLE_EQ(score_prediction(" 363366", "3633662", one).contained, 0.0);
  const std::vector<std::string> names = {"AbcDE", "fghij"};
  EXPECT_DOUBLE_EQ(score_prediction("abcde and FGHIJ", "AbcDE fghij", names).contained, 1.0);
  EXPECT_DOUBLE_EQ(score_prediction("abcde only", "AbcDE fghij", names).contained, 0.5);
  EXPECT_DOUBLE_EQ(score_prediction("anything", "", {}).contained, 0.0);
}

TEST(Scoring, RecallIsTheShareOfItemsFound) {
  const std::vector<std::string> values = {"1111111", "2222222", "3333333", "4444444"};
  const std::string answer = "1111111, 2222222, 3333333, 4444444";
  PredictionScore s = score_prediction(" 1111111, 2222222, 3333333, 4444444", answer, values);
  EXPECT_TRUE(s.exact);
  EXPECT_DOUBLE_EQ(s.recall, 1.0);
  s = score_prediction(" 2222222, 1111111, 3333333, 4444444", answer,
                       values);  // order matters for exact
  EXPECT_FALSE(s.exact);
  EXPECT_DOUBLE_EQ(s.recall, 1.0);
  s = score_prediction(" 1111111, 3333333", answer, values);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  const std::vector<std::string> names = {"ABCDE", "FGHIJ", "KLMNO", "PQRST"};
  s = score_prediction(" ABCDE FGHIJ KLMNO", "ABCDE FGHIJ KLMNO PQRST", names);
  EXPECT_FALSE(s.exact);
  EXPECT_DOUBLE_EQ(s.recall, 0.75);
}

PromptResult result(const std::string& task, int32_t length, double depth, bool on_grid, bool exact,
                    double recall, double contained = -1) {
  PromptResult r;
  r.prompt.id = task + "-x";
  r.prompt.task = task;
  r.prompt.context_tokens = length;
  r.prompt.depth = depth;
  r.prompt.depth_on_grid = on_grid;
  r.prompt.answer = "1";
  r.exact = exact;
  r.recall = recall;
  r.contained = contained < 0 ? recall : contained;
  return r;
}

TEST(Report, TableGridHeatmapAndJson) {
  std::vector<PromptResult> rs = {
      result("niah_single", 2048, 0.0, true, true, 1.0),
      result("niah_single", 2048, 0.0, true, false, 0.0, 1.0),
      result("niah_single", 2048, 1.0, true, true, 1.0),
      result("niah_single", 1024, 0.5, true, true, 1.0),
      result("niah_multivalue", 1024, 0.3, false, false, 0.75),
      result("niah_multivalue", 1024, 0.6, false, true, 1.0),
  };
  const AccuracyTable t = summarize(rs);
  EXPECT_EQ(t.tasks, (std::vector<std::string>{"niah_single", "niah_multivalue"}));
  EXPECT_EQ(t.lengths, (std::vector<int32_t>{1024, 2048}));
  const CellStats& single2k = t.cells.at({"niah_single", 2048});
  EXPECT_EQ(single2k.num_prompts, 3);
  EXPECT_NEAR(single2k.exact, 2.0 / 3.0, 1e-12);
  const CellStats& mv = t.cells.at({"niah_multivalue", 1024});
  EXPECT_NEAR(mv.exact, 0.5, 1e-12);
  EXPECT_NEAR(mv.recall, 0.875, 1e-12);
  EXPECT_EQ(t.cells.count({"niah_multivalue", 2048}), 0u);
  EXPECT_NEAR(single2k.contained, 1.0, 1e-12);
  const std::string text = format_table(t, TableMetric::kExact);
  EXPECT_NE(text.find("exact match"), std::string::npos);
  EXPECT_NE(text.find("0.67"), std::string::npos);
  EXPECT_NE(format_table(t, TableMetric::kRecall).find("0.88"), std::string::npos);
  EXPECT_NE(format_table(t, TableMetric::kContained).find("answer contained"), std::string::npos);
  // Markdown cells: answer contained / exact (prompts).
  EXPECT_NE(format_markdown_table(t).find("| niah_single | 1.00 / 1.00 (1) | 1.00 / 0.67 (3) |"),
            std::string::npos)
      << format_markdown_table(t);

  const DepthGrid g = niah_depth_grid(rs);
  EXPECT_EQ(g.lengths, (std::vector<int32_t>{1024, 2048}));
  EXPECT_EQ(g.depths, (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_NEAR(g.cells.at({2048, 0.0}).exact, 0.5, 1e-12);
  EXPECT_NEAR(g.cells.at({2048, 0.0}).contained, 1.0, 1e-12);
  const std::string svg = heatmap_svg(g, "title <x>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("title &lt;x&gt;"), std::string::npos);
  // One coloured cell per measured (length, depth), and grey for the missing ones.
  size_t cells = 0;
  for (size_t p = svg.find("<title>"); p != std::string::npos; p = svg.find("<title>", p + 1))
    ++cells;
  EXPECT_EQ(cells, g.cells.size());
  EXPECT_NE(svg.find("#dddddd"), std::string::npos);

  const nlohmann::json j = nlohmann::json::parse(results_json(rs, R"({"attention": "dense"})"));
  EXPECT_EQ(j["config"]["attention"], "dense");
  EXPECT_EQ(j["results"].size(), rs.size());
  EXPECT_EQ(j["summary"].size(), 3u);
  EXPECT_EQ(j["depth_grid"].size(), 3u);
}

TEST(EvalPrompt, JsonlRoundTripAndBadInput) {
  EvalPrompt p;
  p.id = "niah_single-1024-0.50-0";
  p.task = "niah_single";
  p.context_tokens = 1024;
  p.num_prompt_tokens = 1017;
  p.depth = 0.5;
  p.prompt = "x\n y.\nq\nAnswer: The";
  p.answer = "1234567";
  p.answers = {"1234567"};
  p.needle_depths = {0.5};
  p.needle_positions = {40};
  auto back = parse_prompts_jsonl(prompt_to_json_line(p) + "\n", "mem");
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].prompt, p.prompt);
  EXPECT_EQ((*back)[0].needle_positions, p.needle_positions);
  EXPECT_TRUE((*back)[0].depth_on_grid);  // from the id's depth tag
  p.id = "vt-1024-rand-3";
  EXPECT_FALSE((*parse_prompts_jsonl(prompt_to_json_line(p), "mem"))[0].depth_on_grid);
  EXPECT_FALSE(parse_prompts_jsonl("{\"id\": 1}\n", "mem").ok());
  EXPECT_FALSE(parse_prompts_jsonl("not json\n", "mem").ok());
  EXPECT_FALSE(parse_prompts_jsonl("", "mem").ok());
}

}  // namespace
}  // namespace ls::eval
