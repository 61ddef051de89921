#include "eval/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace ls::eval {

namespace {

void add(CellStats& s, const PromptResult& r) {
  // Running means, so the cell stays exact for any count.
  ++s.num_prompts;
  s.exact += ((r.exact ? 1.0 : 0.0) - s.exact) / s.num_prompts;
  s.recall += (r.recall - s.recall) / s.num_prompts;
  s.contained += (r.contained - s.contained) / s.num_prompts;
}

// Red (0) through yellow (0.5) to green (1), the palette of LServe's Figure 9.
std::string score_colour(double v) {
  v = std::clamp(v, 0.0, 1.0);
  auto lerp = [](double a, double b, double t) {
    return static_cast<int>(std::lround(a + (b - a) * t));
  };
  int r, g, b;
  if (v < 0.5) {
    const double t = v / 0.5;
    r = lerp(215, 250, t), g = lerp(48, 220, t), b = lerp(39, 90, t);
  } else {
    const double t = (v - 0.5) / 0.5;
    r = lerp(250, 26, t), g = lerp(220, 152, t), b = lerp(90, 80, t);
  }
  return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

std::string length_label(int32_t n) {
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n / 1024);
  return std::to_string(n);
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

AccuracyTable summarize(const std::vector<PromptResult>& results) {
  AccuracyTable t;
  for (const PromptResult& r : results) {
    if (std::find(t.tasks.begin(), t.tasks.end(), r.prompt.task) == t.tasks.end()) {
      t.tasks.push_back(r.prompt.task);
    }
    if (std::find(t.lengths.begin(), t.lengths.end(), r.prompt.context_tokens) == t.lengths.end()) {
      t.lengths.push_back(r.prompt.context_tokens);
    }
    add(t.cells[{r.prompt.task, r.prompt.context_tokens}], r);
  }
  std::sort(t.lengths.begin(), t.lengths.end());
  return t;
}

DepthGrid niah_depth_grid(const std::vector<PromptResult>& results) {
  DepthGrid g;
  for (const PromptResult& r : results) {
    if (r.prompt.task != "niah_single" || !r.prompt.depth_on_grid) continue;
    const int32_t L = r.prompt.context_tokens;
    const double d = r.prompt.depth;
    if (std::find(g.lengths.begin(), g.lengths.end(), L) == g.lengths.end()) g.lengths.push_back(L);
    if (std::find(g.depths.begin(), g.depths.end(), d) == g.depths.end()) g.depths.push_back(d);
    add(g.cells[{L, d}], r);
  }
  std::sort(g.lengths.begin(), g.lengths.end());
  std::sort(g.depths.begin(), g.depths.end());
  return g;
}

double metric_of(const CellStats& c, TableMetric m) {
  switch (m) {
    case TableMetric::kContained:
      return c.contained;
    case TableMetric::kExact:
      return c.exact;
    case TableMetric::kRecall:
      return c.recall;
  }
  return 0;
}

std::string format_table(const AccuracyTable& t, TableMetric metric) {
  const char* title = metric == TableMetric::kContained ? "answer contained"
                      : metric == TableMetric::kExact   ? "exact match"
                                                        : "recall";
  std::string out = fmt::format("{:<17}", title);
  for (int32_t L : t.lengths) out += fmt::format("{:>8}", length_label(L));
  out += "   prompts/cell\n";
  for (const std::string& task : t.tasks) {
    out += fmt::format("{:<17}", task);
    std::vector<int32_t> counts;
    for (int32_t L : t.lengths) {
      auto it = t.cells.find({task, L});
      if (it == t.cells.end()) {
        out += fmt::format("{:>8}", "-");
        continue;
      }
      out += fmt::format("{:>8.2f}", metric_of(it->second, metric));
      if (std::find(counts.begin(), counts.end(), it->second.num_prompts) == counts.end()) {
        counts.push_back(it->second.num_prompts);
      }
    }
    out += fmt::format("   {}\n", fmt::join(counts, "/"));
  }
  return out;
}

std::string format_markdown_table(const AccuracyTable& t) {
  std::string out = "| task |";
  for (int32_t L : t.lengths) out += fmt::format(" {} |", length_label(L));
  out += "\n|---|";
  for (size_t i = 0; i < t.lengths.size(); ++i) out += "---|";
  out += "\n";
  for (const std::string& task : t.tasks) {
    out += fmt::format("| {} |", task);
    for (int32_t L : t.lengths) {
      auto it = t.cells.find({task, L});
      out += it == t.cells.end()
                 ? std::string(" - |")
                 : fmt::format(" {:.2f} / {:.2f} ({}) |", it->second.contained,
                               it->second.exact, it->second.num_prompts);
    }
    out += "\n";
  }
  return out;
}

std::string heatmap_svg(const DepthGrid& g, std::string_view title) {
  // Layout in px: a left margin for the depth labels, one cell per (length, depth), a colour bar.
  const int cell_w = 64, cell_h = 26, left = 70, top = 46, bar_w = 16;
  const int nx = static_cast<int>(g.lengths.size());
  const int ny = static_cast<int>(g.depths.size());
  // Wide enough for the title at about 7 px per character.
  const int width = std::max(left + nx * cell_w + 90, 40 + 7 * static_cast<int>(title.size()));
  const int height = top + ny * cell_h + 60;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"14\" text-anchor=\"middle\">{}</text>\n",
      width, height, width, height, width / 2, xml_escape(title));
  for (int y = 0; y < ny; ++y) {
    const double d = g.depths[static_cast<size_t>(y)];
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0f}%</text>\n", left - 6,
                     top + y * cell_h + cell_h / 2 + 4, d * 100);
    for (int x = 0; x < nx; ++x) {
      auto it = g.cells.find({g.lengths[static_cast<size_t>(x)], d});
      const int px = left + x * cell_w, py = top + y * cell_h;
      if (it == g.cells.end()) {
        s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#dddddd\"/>\n",
                         px, py, cell_w, cell_h);
        continue;
      }
      const CellStats& c = it->second;
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\">"
          "<title>{} tokens, depth {:.0f}%: {:.2f} answer contained ({} prompts)</title></rect>\n"
          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{:.2f}</text>\n",
          px, py, cell_w, cell_h, score_colour(c.contained), g.lengths[static_cast<size_t>(x)],
          d * 100, c.contained, c.num_prompts, px + cell_w / 2, py + cell_h / 2 + 4, c.contained);
    }
  }
  for (int x = 0; x < nx; ++x) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     left + x * cell_w + cell_w / 2, top + ny * cell_h + 16,
                     length_label(g.lengths[static_cast<size_t>(x)]));
  }
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">Context length (tokens)</text>\n"
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">Needle "
      "depth</text>\n",
      left + nx * cell_w / 2, top + ny * cell_h + 36, top + ny * cell_h / 2);
  // Colour bar: 0 at the bottom, 1 at the top.
  const int bx = left + nx * cell_w + 24, steps = 20, bh = ny * cell_h;
  for (int i = 0; i < steps; ++i) {
    const double v = 1.0 - (i + 0.5) / steps;
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
                     bx, top + i * static_cast<double>(bh) / steps, bar_w,
                     static_cast<double>(bh) / steps + 0.5, score_colour(v));
  }
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\">1.0</text>\n<text x=\"{}\" y=\"{}\">0.0</text>\n"
      "<text x=\"{}\" y=\"{}\">score</text>\n</svg>\n",
      bx + bar_w + 4, top + 10, bx + bar_w + 4, top + bh, bx - 4, top - 6);
  return s;
}

std::string results_json(const std::vector<PromptResult>& results, std::string_view config_json) {
  nlohmann::ordered_json j;
  j["config"] = nlohmann::ordered_json::parse(config_json, nullptr, false);
  const AccuracyTable t = summarize(results);
  nlohmann::ordered_json summary = nlohmann::ordered_json::array();
  for (const std::string& task : t.tasks) {
    for (int32_t L : t.lengths) {
      auto it = t.cells.find({task, L});
      if (it == t.cells.end()) continue;
      summary.push_back({{"task", task},
                         {"context_tokens", L},
                         {"num_prompts", it->second.num_prompts},
                         {"contained", it->second.contained},
                         {"exact", it->second.exact},
                         {"recall", it->second.recall}});
    }
  }
  j["summary"] = summary;
  const DepthGrid g = niah_depth_grid(results);
  nlohmann::ordered_json grid = nlohmann::ordered_json::array();
  for (const auto& [key, c] : g.cells) {
    grid.push_back({{"context_tokens", key.first},
                    {"depth", key.second},
                    {"num_prompts", c.num_prompts},
                    {"contained", c.contained},
                    {"exact", c.exact}});
  }
  j["depth_grid"] = grid;
  nlohmann::ordered_json rs = nlohmann::ordered_json::array();
  for (const PromptResult& r : results) {
    rs.push_back({{"id", r.prompt.id},
                  {"task", r.prompt.task},
                  {"context_tokens", r.prompt.context_tokens},
                  {"num_prompt_tokens", r.prompt_tokens},
                  {"depth", r.prompt.depth},
                  {"needle_positions", r.prompt.needle_positions},
                  {"answer", r.prompt.answer},
                  {"prediction", r.prediction},
                  {"contained", r.contained},
                  {"exact", r.exact},
                  {"recall", r.recall},
                  {"completion_tokens", r.completion_tokens},
                  {"finish_reason", r.finish_reason}});
  }
  j["results"] = rs;
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ls::eval
