// JSON grammars against independent oracles: nlohmann's parser over every short string (any
// object), random walks through a schema's grammar validated by a hand-written checker of that
// schema, and documents built from the schema accepted or rejected as they should be.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_schema_grammar.h"
#include "structured/matcher.h"

namespace ls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  return m.accept(s) && m.can_end();
}

std::shared_ptr<const Grammar> compile(const ojson& schema) {
  Result<Grammar> g = json_schema_grammar(schema);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return std::make_shared<const Grammar>(std::move(g).value());
}

bool object_oracle(const std::string& s) {
  if (s.empty() || s.front() != '{') return false;  // the grammar has no leading whitespace
  if (!nlohmann::json::accept(s)) return false;
  return nlohmann::json::parse(s).is_object() && s.back() == '}';
}

TEST(JsonObjectGrammar, EveryShortStringAgreesWithTheParser) {
  Result<Grammar> g = json_object_grammar();
  ASSERT_TRUE(g.ok());
  auto shared = std::make_shared<const Grammar>(std::move(g).value());
  const std::string alphabet = "{}\":a1, [";
  std::vector<std::string> level = {""};
  int accepted = 0;
  for (int len = 1; len <= 6; ++len) {
    std::vector<std::string> next;
    for (const std::string& p : level) {
      for (char c : alphabet) next.push_back(p + c);
    }
    for (const std::string& s : next) {
      const bool a = accepts(shared, s);
      accepted += a;
      ASSERT_EQ(a, object_oracle(s)) << "'" << s << "'";
    }
    level = std::move(next);
  }
  EXPECT_GT(accepted, 3);
  EXPECT_TRUE(accepts(shared, R"({"a": [1, {"b": null}], "c": "\u00e9x\n"})"));
  EXPECT_TRUE(accepts(shared, "{\n  \"k\": -0.5e+3\n}"));
  EXPECT_FALSE(accepts(shared, R"({"a": 01})"));
  EXPECT_FALSE(accepts(shared, R"({"a": "\x"})"));
}

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 3},
    "age": {"type": "integer"},
    "color": {"enum": ["red", "green", 7]},
    "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
    "ref": {"$ref": "#/$defs/point"}
  },
  "required": ["name", "color", "ref"],
  "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}},
                      "required": ["x"]}}
})";

// A hand-written validator of kSchema, independent of the grammar.
bool schema_oracle(const std::string& text) {
  if (!nlohmann::json::accept(text)) return false;
  const nlohmann::json v = nlohmann::json::parse(text);
  if (!v.is_object()) return false;
  for (const char* key : {"name", "color", "ref"}) {
    if (!v.contains(key)) return false;
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& x = it.value();
    if (k == "name") {
      if (!x.is_string()) return false;
      // maxLength counts code points.
      size_t cps = 0;
      for (unsigned char c : x.get<std::string>()) cps += (c & 0xC0) != 0x80;
      if (cps > 3) return false;
    } else if (k == "age") {
      if (!x.is_number_integer()) return false;
    } else if (k == "color") {
      if (!(x == "red" || x == "green" || x == 7)) return false;
    } else if (k == "ok") {
      if (!x.is_boolean()) return false;
    } else if (k == "tags") {
      if (!x.is_array() || x.empty() || x.size() > 2) return false;
      for (const auto& t : x) {
        if (!t.is_number_integer()) return false;
      }
    } else if (k == "ref") {
      if (!x.is_object() || !x.contains("x") || !x["x"].is_number()) return false;
      for (auto p = x.begin(); p != x.end(); ++p) {
        if (p.key() != "x") return false;
      }
    } else {
      return false;
    }
  }
  return true;
}

TEST(JsonSchemaGrammar, RandomWalksProduceValidDocuments) {
  auto g = compile(ojson::parse(kSchema));
  std::mt19937 rng(7);
  int finished = 0;
  for (int walk = 0; walk < 400; ++walk) {
    MatchState state = initial_state(*g);
    std::string text;
    MatchState next;
    for (int steps = 0; steps < 400; ++steps) {
      if (state.can_end && (state.n == 0 || rng() % 4 == 0)) break;
      std::vector<uint8_t> allowed;
      for (int b = 0; b < 256; ++b) {
        if (step(*g, state, static_cast<uint8_t>(b), next)) allowed.push_back(static_cast<uint8_t>(b));
      }
      ASSERT_FALSE(allowed.empty()) << "a live state with no byte: '" << text << "'";
      // Prefer structure over whitespace so walks finish.
      uint8_t b = allowed[rng() % allowed.size()];
      if ((b == ' ' || b == '\n' || b == '\t' || b == '\r') && rng() % 3 != 0) {
        b = allowed[rng() % allowed.size()];
      }
      ASSERT_TRUE(step(*g, state, b, next));
      text.push_back(static_cast<char>(b));
      std::swap(state, next);
    }
    if (!state.can_end) continue;
    ++finished;
    EXPECT_TRUE(schema_oracle(text)) << text;
  }
  EXPECT_GT(finished, 100);
}

TEST(JsonSchemaGrammar, AcceptsValidAndRejectsInvalidDocuments) {
  auto g = compile(ojson::parse(kSchema));
  const std::vector<std::string> docs = {
      R"({"name": "abc", "color": "red", "ref": {"x": 1.5}})",
      R"({"name":"","age":-12,"color":7,"ok":true,"tags":[1,2],"ref":{"x":0}})",
      R"({ "name" : "é" , "color" : "green" , "ref" : { "x" : -3e2 } })",
      R"({"name": "abcd", "color": "red", "ref": {"x": 1}})",    // too long
      R"({"name": "a", "color": "blue", "ref": {"x": 1}})",      // not in enum
      R"({"name": "a", "color": "red"})",                        // ref missing
      R"({"name": "a", "color": "red", "ref": {"x": 1}, "z": 1})",  // extra key
      R"({"name": "a", "color": "red", "tags": [], "ref": {"x": 1}})",  // minItems
      R"({"name": "a", "color": "red", "tags": [1,2,3], "ref": {"x": 1}})",  // maxItems
      R"({"name": "a", "age": 1.5, "color": "red", "ref": {"x": 1}})",  // not an integer
  };
  for (const std::string& d : docs) EXPECT_EQ(accepts(g, d), schema_oracle(d)) << d;
}

TEST(JsonSchemaGrammar, RecursionAnyOfAndPatterns) {
  auto g = compile(ojson::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": ["integer", "null"]},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "string", "pattern": "^[a-z]{2}\\d$"}]})"));
  EXPECT_TRUE(accepts(g, R"({"v": 1, "kids": [{"v": null, "kids": [{"v": 2}]}]})"));
  EXPECT_TRUE(accepts(g, R"("ab3")"));
  EXPECT_FALSE(accepts(g, R"("ab")"));
  EXPECT_FALSE(accepts(g, R"({"kids": []})"));
}

TEST(JsonSchemaGrammar, CompactSeparatorsWithoutAnyWhitespace) {
  Result<Grammar> g = json_schema_grammar(
      ojson::parse(R"({"type": "object", "properties": {"a": {"type": "array"}, "b": {}}})"),
      /*any_whitespace=*/false);
  ASSERT_TRUE(g.ok());
  auto shared = std::make_shared<const Grammar>(std::move(g).value());
  EXPECT_TRUE(accepts(shared, R"({"a": [1, {"x": null}], "b": "c"})"));
  EXPECT_FALSE(accepts(shared, R"({"a":[1]})"));
  EXPECT_FALSE(accepts(shared, R"({ "a": [1]})"));
}

TEST(JsonSchemaGrammar, RefusesUnsupportedOrBrokenSchemas) {
  for (const char* s : {R"({"type": "strnig"})", R"({"$ref": "http://x/y"})",
                        R"({"not": {"type": "string"}})", R"({"enum": []})",
                        R"({"type": "object", "required": ["a"]})",
                        R"({"type": "string", "maxLength": 100000})",
                        R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})"}) {
    EXPECT_FALSE(json_schema_grammar(ojson::parse(s)).ok()) << s;
  }
}

}  // namespace
}  // namespace ls::grammar
