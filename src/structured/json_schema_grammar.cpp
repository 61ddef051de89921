#include "structured/json_schema_grammar.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "structured/regex_grammar.h"

namespace ls::grammar {

namespace {

using json = nlohmann::ordered_json;

// Nesting of schemas (not of generated JSON) before we refuse: hostile inputs stay bounded.
constexpr int kMaxSchemaDepth = 64;

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, bool any_whitespace)
      : root_(root), any_whitespace_(any_whitespace) {}

  GrammarBuilder& builder() { return b_; }

  Result<Sym> value(const json& schema, int depth) {
    if (depth > kMaxSchemaDepth) return invalid_argument("JSON schema nests too deeply");
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return any_value();
      return invalid_argument("JSON schema 'false' accepts nothing");
    }
    if (!schema.is_object()) return invalid_argument("a JSON schema must be an object or boolean");
    if (auto it = schema.find("$ref"); it != schema.end()) return ref(*it, depth);
    if (auto it = schema.find("const"); it != schema.end()) return literal_value(*it);
    if (auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty()) return invalid_argument("'enum' must be a non-empty list");
      std::vector<Seq> alts;
      for (const json& v : *it) alts.push_back(b_.literal(v.dump()));
      return b_.rule(std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = schema.find(key); it != schema.end()) {
        if (!it->is_array() || it->empty()) {
          return invalid_argument("'{}' must be a non-empty list of schemas", key);
        }
        std::vector<Seq> alts;
        for (const json& sub : *it) {
          LS_ASSIGN_OR_RETURN(Sym s, value(merge_siblings(schema, sub, key), depth + 1));
          alts.push_back({s});
        }
        return b_.rule(std::move(alts));
      }
    }
    if (auto it = schema.find("allOf"); it != schema.end()) {
      if (!it->is_array() || it->size() != 1) {
        return invalid_argument("'allOf' is supported with exactly one schema");
      }
      return value(merge_siblings(schema, (*it)[0], "allOf"), depth + 1);
    }
    if (schema.contains("not") || schema.contains("if") || schema.contains("dependentSchemas") ||
        schema.contains("patternProperties") || schema.contains("propertyNames")) {
      return invalid_argument(
          "JSON schema keywords not, if, dependentSchemas, patternProperties and propertyNames "
          "are not supported");
    }
    std::vector<std::string> types;
    if (auto it = schema.find("type"); it != schema.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const json& t : *it) {
          if (!t.is_string()) return invalid_argument("'type' entries must be strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return invalid_argument("'type' must be a string or a non-empty list");
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
               schema.contains("required")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      types.push_back("array");
    } else if (schema.contains("pattern") || schema.contains("minLength") ||
               schema.contains("maxLength")) {
      types.push_back("string");
    } else {
      return any_value();
    }
    if (schema.value("nullable", false)) types.push_back("null");
    std::vector<Seq> alts;
    for (const std::string& t : types) {
      LS_ASSIGN_OR_RETURN(Sym s, typed(t, schema, depth));
      alts.push_back({s});
    }
    if (alts.size() == 1) return alts[0][0];
    return b_.rule(std::move(alts));
  }

  Sym any_value() {
    if (any_value_) return b_.ref(*any_value_);
    const uint32_t value_rule = b_.declare_rule();
    any_value_ = value_rule;
    const Sym v = b_.ref(value_rule);
    // object := "{" ws ( kv ("," ws kv)* )? "}" with kv := string ws ":" ws value ws
    Seq kv = {string_sym(0, -1), ws(), colon(), ws(), v, ws()};
    Seq more = {comma()};
    append(more, kv);
    Seq members = kv;
    members.push_back(b_.star(more));
    const Sym object = b_.rule({{b_.byte('{'), ws(), b_.optional(members), b_.byte('}')}});
    Seq item = {v, ws()};
    Seq more_items = {comma(), v, ws()};
    Seq items = item;
    items.push_back(b_.star(more_items));
    const Sym array = b_.rule({{b_.byte('['), ws(), b_.optional(items), b_.byte(']')}});
    b_.define_rule(value_rule, {{object},
                                {array},
                                {string_sym(0, -1)},
                                {number_sym(false)},
                                b_.literal("true"),
                                b_.literal("false"),
                                b_.literal("null")});
    return v;
  }

  Sym any_object() {
    // Forces the generic rules into existence and returns the object alternative.
    Sym v = any_value();
    (void)v;
    Seq kv = {string_sym(0, -1), ws(), colon(), ws(), b_.ref(*any_value_), ws()};
    Seq more = {comma()};
    append(more, kv);
    Seq members = kv;
    members.push_back(b_.star(more));
    return b_.rule({{b_.byte('{'), ws(), b_.optional(members), b_.byte('}')}});
  }

 private:
  // anyOf / oneOf / allOf branches inherit the other keywords of their parent (e.g. a shared
  // "type"), with the combinator itself removed.
  static json merge_siblings(const json& parent, const json& branch, const char* combinator) {
    if (!branch.is_object()) return branch;
    json merged = parent;
    merged.erase(combinator);
    for (auto it = branch.begin(); it != branch.end(); ++it) merged[it.key()] = it.value();
    return merged;
  }

  Result<Sym> ref(const json& target, int depth) {
    if (!target.is_string()) return invalid_argument("'$ref' must be a string");
    const std::string path = target.get<std::string>();
    if (auto it = refs_.find(path); it != refs_.end()) return b_.ref(it->second);
    if (path.empty() || path[0] != '#') {
      return invalid_argument("only local '$ref' (\"#...\") is supported, got '{}'", path);
    }
    const json* node = &root_;
    if (path.size() > 1) {
      if (path[1] != '/') return invalid_argument("bad '$ref' '{}'", path);
      try {
        node = &root_.at(json::json_pointer(path.substr(1)));
      } catch (const std::exception&) {
        return invalid_argument("'$ref' '{}' points at nothing", path);
      }
    }
    const uint32_t rule = b_.declare_rule();
    refs_.emplace(path, rule);
    LS_ASSIGN_OR_RETURN(Sym s, value(*node, depth + 1));
    b_.define_rule(rule, {{s}});
    return b_.ref(rule);
  }

  Result<Sym> literal_value(const json& v) { return b_.rule({b_.literal(v.dump())}); }

  Result<Sym> typed(const std::string& type, const json& schema, int depth) {
    if (type == "string") return string_of(schema);
    if (type == "integer") return number_sym(true);
    if (type == "number") return number_sym(false);
    if (type == "boolean") return b_.rule({b_.literal("true"), b_.literal("false")});
    if (type == "null") return b_.rule({b_.literal("null")});
    if (type == "array") return array_of(schema, depth);
    if (type == "object") return object_of(schema, depth);
    return invalid_argument("unknown JSON schema type '{}'", type);
  }

  static Result<int32_t> bound(const json& schema, const char* key, int32_t fallback) {
    auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return invalid_argument("'{}' must be a non-negative integer", key);
    }
    if (it->get<int64_t>() > kMaxBoundedRepeat) {
      return invalid_argument("'{}' above {} is not supported", key, kMaxBoundedRepeat);
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }

  Result<Sym> string_of(const json& schema) {
    if (auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) return invalid_argument("'pattern' must be a string");
      // Pattern output goes between the quotes unescaped, so it may not produce '"', '\' or
      // control characters.
      ByteSet forbidden{};
      byte_set_add_range(forbidden, 0, 0x1F);
      byte_set_add(forbidden, '"');
      byte_set_add(forbidden, '\\');
      LS_ASSIGN_OR_RETURN(Sym body, add_regex(b_, it->get<std::string>(), &forbidden));
      return b_.rule({{b_.byte('"'), body, b_.byte('"')}});
    }
    LS_ASSIGN_OR_RETURN(int32_t min_len, bound(schema, "minLength", 0));
    LS_ASSIGN_OR_RETURN(int32_t max_len, bound(schema, "maxLength", -1));
    if (max_len >= 0 && max_len < min_len) return invalid_argument("maxLength < minLength");
    return string_sym(min_len, max_len);
  }

  // '"' char{min,max} '"'; a char is one code point, written plainly or escaped.
  Sym string_sym(int32_t min_len, int32_t max_len) {
    if (min_len == 0 && max_len < 0 && plain_string_) return *plain_string_;
    if (!json_char_) {
      ByteSet plain{};
      byte_set_add_range(plain, 0x20, 0x7F);
      plain[0x22 >> 6] &= ~(uint64_t{1} << (0x22 & 63));
      plain[0x5C >> 6] &= ~(uint64_t{1} << (0x5C & 63));
      const Sym cont = b_.byte_range(0x80, 0xBF);
      ByteSet esc{};
      for (char c : std::string("\"\\/bfnrt")) byte_set_add(esc, static_cast<uint8_t>(c));
      ByteSet hex{};
      byte_set_add_range(hex, '0', '9');
      byte_set_add_range(hex, 'a', 'f');
      byte_set_add_range(hex, 'A', 'F');
      const Sym h = b_.bytes(hex);
      json_char_ = b_.rule({{b_.bytes(plain)},
                            {b_.byte_range(0xC2, 0xDF), cont},
                            {b_.byte(0xE0), b_.byte_range(0xA0, 0xBF), cont},
                            {b_.byte_range(0xE1, 0xEC), cont, cont},
                            {b_.byte(0xED), b_.byte_range(0x80, 0x9F), cont},
                            {b_.byte_range(0xEE, 0xEF), cont, cont},
                            {b_.byte(0xF0), b_.byte_range(0x90, 0xBF), cont, cont},
                            {b_.byte_range(0xF1, 0xF3), cont, cont, cont},
                            {b_.byte(0xF4), b_.byte_range(0x80, 0x8F), cont, cont},
                            {b_.byte('\\'), b_.bytes(esc)},
                            {b_.byte('\\'), b_.byte('u'), h, h, h, h}});
    }
    const Sym s = b_.rule({{b_.byte('"'), b_.repeat({*json_char_}, min_len, max_len),
                            b_.byte('"')}});
    if (min_len == 0 && max_len < 0) plain_string_ = s;
    return s;
  }

  Sym number_sym(bool integer) {
    std::optional<Sym>& cached = integer ? integer_ : number_;
    if (cached) return *cached;
    const Sym digit = b_.byte_range('0', '9');
    const Sym int_part =
        b_.rule({{b_.byte('0')}, {b_.byte_range('1', '9'), b_.repeat({digit}, 0, 15)}});
    Seq seq = {b_.optional({b_.byte('-')}), int_part};
    if (!integer) {
      ByteSet e{};
      byte_set_add(e, 'e');
      byte_set_add(e, 'E');
      ByteSet sign{};
      byte_set_add(sign, '+');
      byte_set_add(sign, '-');
      seq.push_back(b_.optional({b_.byte('.'), b_.repeat({digit}, 1, 16)}));
      seq.push_back(b_.optional({b_.bytes(e), b_.optional({b_.bytes(sign)}),
                                 b_.repeat({digit}, 1, 2)}));
    }
    cached = b_.rule({seq});
    return *cached;
  }

  // Separators: any whitespace (bounded) around them, or exactly ", " and ": ".
  Sym comma() {
    if (!any_whitespace_) return b_.rule({b_.literal(", ")});
    return b_.rule({{b_.byte(','), ws()}});
  }
  Sym colon() {
    if (!any_whitespace_) return b_.rule({b_.literal(": ")});
    return b_.byte(':');
  }

  Sym ws() {
    if (!ws_ && !any_whitespace_) ws_ = b_.rule({Seq{}});
    if (!ws_) {
      ByteSet w{};
      for (char c : std::string(" \t\n\r")) byte_set_add(w, static_cast<uint8_t>(c));
      ws_ = b_.repeat({b_.bytes(w)}, 0, kMaxJsonWhitespace);
    }
    return *ws_;
  }

  Result<Sym> array_of(const json& schema, int depth) {
    LS_ASSIGN_OR_RETURN(int32_t min_items, bound(schema, "minItems", 0));
    LS_ASSIGN_OR_RETURN(int32_t max_items, bound(schema, "maxItems", -1));
    if (max_items >= 0 && max_items < min_items) return invalid_argument("maxItems < minItems");
    std::vector<Sym> prefix;
    if (auto it = schema.find("prefixItems"); it != schema.end()) {
      if (!it->is_array()) return invalid_argument("'prefixItems' must be a list");
      for (const json& sub : *it) {
        LS_ASSIGN_OR_RETURN(Sym s, value(sub, depth + 1));
        prefix.push_back(s);
      }
    }
    Sym item = any_value();
    bool more_allowed = true;
    if (auto it = schema.find("items"); it != schema.end()) {
      if (it->is_boolean() && !it->get<bool>()) {
        more_allowed = false;
      } else {
        LS_ASSIGN_OR_RETURN(item, value(*it, depth + 1));
      }
    }
    // Items in order: the prefix ones, then `item` repeated; min/max count all of them.
    const auto n_prefix = static_cast<int32_t>(prefix.size());
    if (!more_allowed) max_items = max_items < 0 ? n_prefix : std::min(max_items, n_prefix);
    if (min_items > n_prefix && !more_allowed) return invalid_argument("minItems > prefixItems");
    // Alternatives by how many items appear: 0, or k >= 1 items "i1 , i2 , ...".
    const Sym sep = comma();
    auto element = [&](int32_t i) { return i < n_prefix ? prefix[static_cast<size_t>(i)] : item; };
    // Build from the end: tail(i) = items i.. with a leading comma each, each optional past
    // min_items (once one is skipped, the rest are too).
    // tail(i) := "," ws e_i ws tail(i+1) | ""  (i >= min_items);  mandatory otherwise.
    const int32_t explicit_end =
        max_items >= 0 ? max_items : std::max(n_prefix, min_items);
    Sym rest = b_.rule({Seq{}});
    if (max_items < 0) rest = b_.star({sep, item, ws()});
    for (int32_t i = explicit_end - 1; i >= 1; --i) {
      Seq take = {sep, element(i), ws(), rest};
      rest = i >= min_items ? b_.rule({take, Seq{}}) : b_.rule({take});
    }
    Seq first = {element(0), ws(), rest};
    std::vector<Seq> body;
    if (explicit_end == 0 && max_items < 0) {
      // No explicit positions: items repeat freely.
      body.push_back({item, ws(), b_.star({sep, item, ws()})});
      body.push_back(Seq{});
    } else if (explicit_end == 0) {
      body.push_back(Seq{});
    } else {
      body.push_back(first);
      if (min_items == 0) body.push_back(Seq{});
    }
    return b_.rule({{b_.byte('['), ws(), b_.rule(std::move(body)), b_.byte(']')}});
  }

  Result<Sym> object_of(const json& schema, int depth) {
    std::vector<std::pair<std::string, const json*>> props;
    if (auto it = schema.find("properties"); it != schema.end()) {
      if (!it->is_object()) return invalid_argument("'properties' must be an object");
      for (auto p = it->begin(); p != it->end(); ++p) props.emplace_back(p.key(), &p.value());
    }
    std::vector<std::string> required;
    if (auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) return invalid_argument("'required' must be a list");
      for (const json& r : *it) {
        if (!r.is_string()) return invalid_argument("'required' entries must be strings");
        required.push_back(r.get<std::string>());
      }
    }
    for (const std::string& r : required) {
      bool found = false;
      for (const auto& p : props) found = found || p.first == r;
      if (!found) {
        return invalid_argument("required property '{}' is not in 'properties'", r);
      }
    }
    // Extra keys: additionalProperties, when absent true only if no properties were listed.
    std::optional<Sym> extra_value;
    if (auto it = schema.find("additionalProperties"); it != schema.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) {
        LS_ASSIGN_OR_RETURN(Sym s, value(*it, depth + 1));
        extra_value = s;
      }
    } else if (props.empty()) {
      extra_value = any_value();
    }
    // Properties in the schema's order (ordered_json keeps it).
    std::vector<Seq> kvs;
    std::vector<bool> optional;
    for (const auto& [key, sub] : props) {
      LS_ASSIGN_OR_RETURN(Sym v, value(*sub, depth + 1));
      Seq kv = b_.literal(json(key).dump());
      kv.push_back(ws());
      kv.push_back(colon());
      kv.push_back(ws());
      kv.push_back(v);
      kv.push_back(ws());
      kvs.push_back(std::move(kv));
      bool req = false;
      for (const std::string& r : required) req = req || r == key;
      optional.push_back(!req);
    }
    const Sym sep = comma();
    // C(n) / F(n): extra members after the listed ones.
    Sym c_next = b_.rule({Seq{}});
    Sym f_next = c_next;
    if (extra_value) {
      Seq kv = {string_sym(0, -1), ws(), colon(), ws(), *extra_value, ws()};
      Seq more = {sep};
      append(more, kv);
      c_next = b_.star(more);
      Seq first = kv;
      first.push_back(c_next);
      f_next = b_.rule({first, Seq{}});
    }
    // C(i) = "," kv_i C(i+1) | [optional] C(i+1);  F(i) = kv_i C(i+1) | [optional] F(i+1).
    for (size_t i = kvs.size(); i-- > 0;) {
      Seq c_take = {sep};
      append(c_take, kvs[i]);
      c_take.push_back(c_next);
      Seq f_take = kvs[i];
      f_take.push_back(c_next);
      const Sym c_i = optional[i] ? b_.rule({c_take, {c_next}}) : b_.rule({c_take});
      const Sym f_i = optional[i] ? b_.rule({f_take, {f_next}}) : b_.rule({f_take});
      c_next = c_i;
      f_next = f_i;
    }
    return b_.rule({{b_.byte('{'), ws(), f_next, b_.byte('}')}});
  }

  const json& root_;
  bool any_whitespace_;
  GrammarBuilder b_;
  std::map<std::string, uint32_t> refs_;
  std::optional<uint32_t> any_value_;
  std::optional<Sym> json_char_;
  std::optional<Sym> plain_string_;
  std::optional<Sym> integer_;
  std::optional<Sym> number_;
  std::optional<Sym> ws_;
};

}  // namespace

Result<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, bool any_whitespace) {
  SchemaCompiler c(schema, any_whitespace);
  LS_ASSIGN_OR_RETURN(Sym root, c.value(schema, 0));
  return std::move(c.builder()).build(root);
}

Result<Grammar> json_object_grammar(bool any_whitespace) {
  const nlohmann::ordered_json schema = {{"type", "object"}};
  SchemaCompiler c(schema, any_whitespace);
  const Sym root = c.any_object();
  return std::move(c.builder()).build(root);
}

}  // namespace ls::grammar
