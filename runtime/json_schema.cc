// The schema compiler: JSON Schema text to JsonSchema's nodes (the automaton is json_schema_state.cc).
#include "runtime/json_schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/json_schema_numbers.h"
#include "runtime/string_formats.h"

namespace ag::runtime {

using Json = nlohmann::ordered_json;  // the properties' order is the answer's

namespace {

// Keywords that only annotate: a validator asserts nothing with them ("format" too, by default).
const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* const kSet = new absl::flat_hash_set<std::string>{
      "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
      "writeOnly", "format", "discriminator", "contentMediaType", "contentEncoding", "$defs", "definitions", "strict"};
  return *kSet;
}

const absl::flat_hash_set<std::string>& Handled() {
  static const auto* const kSet = new absl::flat_hash_set<std::string>{
      "type",      "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength",
      "maxLength", "enum",       "const",    "anyOf",                "oneOf", "allOf",    "$ref",
      "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum", "pattern", "multipleOf", "uniqueItems"};
  return *kSet;
}

std::string Compact(const Json& j) { return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::strict); }

bool HasType(const Json& value, const std::string& type) {
  if (type == "integer") return value.is_number_integer() || (value.is_number_float() && value == std::floor(value.get<double>()));
  if (type == "number") return value.is_number();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "object") return value.is_object();
  return type == "array" && value.is_array();
}

}  // namespace

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& document) : document_(document) {}

  absl::StatusOr<std::shared_ptr<const JsonSchema>> Run() {
    auto schema = std::make_shared<JsonSchema>();
    nodes_ = &schema->nodes_;
    patterns_ = &schema->patterns_;
    const int32_t root = Compile(document_, "", 0);
    schema->key_node_ = Add({.kind = JsonSchema::Node::kString});
    if (!status_.ok()) return status_;
    if (!ResolveReferences(root, &schema->root_)) return status_;
    if (!CheckUnique()) return status_;
    ComputeDepths();
    const uint32_t depth = nodes_->at(static_cast<size_t>(schema->root_)).depth;
    if (depth == kInfinite) {
      Fail("", "the schema admits no finite document (every document nests itself)");
      return status_;
    }
    if (depth + 1 > JsonSchema::kMaxDepth) {
      Fail("", absl::StrCat("the schema's shortest document nests ", depth, " values; at most ",
                            JsonSchema::kMaxDepth - 1, " may be open"));
      return status_;
    }
    return std::shared_ptr<const JsonSchema>(std::move(schema));
  }

 private:
  static constexpr uint32_t kInfinite = UINT32_MAX;
  static constexpr int kMaxNesting = 64;  // subschemas within subschemas
  static constexpr size_t kMaxPatternTransitions = 1 << 21;  // 8 MB of pattern automata a schema
  // Work the patterns may take to compile together (PatternDfa::Compile's budget): one pattern's most,
  // ~0.3 s of one core at worst here, ~3 s under ASan (a schema of 2,000 costly patterns took 84 s without it).
  static constexpr size_t kMaxPatternWork = 4'000'000;

  // Keeps the first error; -1 stands for the node that failed.
  int32_t Fail(const std::string& where, const std::string& what) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat("schema at '#", where, "': ", what));
    return -1;
  }
  int32_t Add(JsonSchema::Node node) {
    if (nodes_->size() >= JsonSchema::kMaxNodes) {
      return Fail("", absl::StrCat("the schema has more than ", JsonSchema::kMaxNodes, " subschemas"));
    }
    nodes_->push_back(std::move(node));
    return static_cast<int32_t>(nodes_->size() - 1);
  }
  // A node for any JSON value: anyOf an open object, an array, a string, a number, true/false/null.
  int32_t Any() {
    if (any_ >= 0) return any_;
    any_ = Add({.kind = JsonSchema::Node::kAnyOf});
    const int32_t object = Add({.kind = JsonSchema::Node::kObject, .values = any_});
    const int32_t array = Add({.kind = JsonSchema::Node::kArray, .items = any_});
    const int32_t string = Add({.kind = JsonSchema::Node::kString});
    const int32_t number = Add({.kind = JsonSchema::Node::kNumber});
    const int32_t literals = Add({.kind = JsonSchema::Node::kLiterals, .literals = {"true", "false", "null"}});
    if (!status_.ok()) return -1;
    (*nodes_)[static_cast<size_t>(any_)].alternatives = {object, array, string, number, literals};
    return any_;
  }

  std::optional<uint32_t> Count(const Json& s, const char* key, const std::string& where) {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s[key];
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= JsonSchema::kUnbounded) {
      Fail(where, absl::StrCat("'", key, "' must be a non-negative integer"));
      return std::nullopt;
    }
    return static_cast<uint32_t>(v.get<uint64_t>());
  }

  int32_t Compile(const Json& s, const std::string& where, int nesting) {
    if (!status_.ok()) return -1;
    if (nesting > kMaxNesting) return Fail(where, "subschemas nest too deep");
    if (s.is_boolean()) {
      if (s.get<bool>()) return Any();
      return Fail(where, "the schema false admits nothing");
    }
    if (!s.is_object()) return Fail(where, "a schema must be an object or a boolean");
    std::vector<std::string> constraining;
    for (const auto& [key, value] : s.items()) {
      if (Annotations().contains(key) || absl::StartsWith(key, "x-")) continue;
      if (!Handled().contains(key)) return Fail(where, absl::StrCat("'", key, "' is not supported"));
      constraining.push_back(key);
    }
    auto only = [&](const char* keyword) {
      for (const std::string& k : constraining) {
        if (k != keyword) return Fail(where, absl::StrCat("'", k, "' beside '", keyword, "' is not supported")) >= 0;
      }
      return true;
    };
    if (s.contains("$ref")) {
      if (!only("$ref")) return -1;
      if (!s["$ref"].is_string()) return Fail(where, "'$ref' must be a string");
      return Reference(s["$ref"].get<std::string>(), where, nesting);
    }
    for (const char* combinator : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(combinator)) continue;
      if (!only(combinator)) return -1;
      const Json& list = s[combinator];
      if (!list.is_array() || list.empty()) return Fail(where, absl::StrCat("'", combinator, "' must be a non-empty array"));
      if (std::string(combinator) == "allOf") {
        if (list.size() != 1) return Fail(where, "'allOf' of more than one schema is not supported");
        return Compile(list[0], absl::StrCat(where, "/allOf/0"), nesting + 1);
      }
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < list.size(); ++i) {
        alternatives.push_back(Compile(list[i], absl::StrCat(where, "/", combinator, "/", i), nesting + 1));
      }
      return Add({.kind = JsonSchema::Node::kAnyOf, .alternatives = std::move(alternatives)});
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      for (const Json& one : t.is_array() ? t : Json::array({t})) {
        static const absl::flat_hash_set<std::string> kTypes = {"object", "array",   "string", "number",
                                                                "integer", "boolean", "null"};
        if (!one.is_string() || !kTypes.contains(one.get<std::string>())) {
          return Fail(where, "'type' must be one of object, array, string, number, integer, boolean, null, or a list of them");
        }
        if (std::find(types.begin(), types.end(), one.get<std::string>()) == types.end()) types.push_back(one.get<std::string>());
      }
      if (types.empty()) return Fail(where, "'type' must name a type");
    }
    if ((s.contains("enum") || s.contains("const")) && HasNumericBounds(s)) {
      return Fail(where, "bounds ('minimum', ...) beside 'enum' or 'const' are not supported");
    }
    if (s.contains("enum") || s.contains("const")) return Literals(s, types, where);
    if (types.empty()) {  // the type follows from its keywords, or it is any value
      for (const auto& [type, keywords] : std::vector<std::pair<std::string, std::vector<std::string>>>{
               {"object", {"properties", "required", "additionalProperties"}},
               {"array", {"items", "prefixItems", "minItems", "maxItems"}},
               {"string", {"minLength", "maxLength", "pattern"}}}) {
        for (const std::string& k : keywords) {
          if (s.contains(k)) {
            if (!types.empty() && types.back() != type) return Fail(where, "keywords of several types need a 'type'");
            if (types.empty()) types.push_back(type);
          }
        }
      }
      if (types.empty() && HasNumericBounds(s)) return Fail(where, "bounds ('minimum', ...) need \"type\": \"integer\" or \"number\"");
      if (types.empty()) return Any();
    }
    std::vector<int32_t> alternatives;
    for (const std::string& type : types) alternatives.push_back(Typed(s, type, where, nesting));
    if (alternatives.size() == 1) return alternatives[0];
    return Add({.kind = JsonSchema::Node::kAnyOf, .alternatives = std::move(alternatives)});
  }

  int32_t Literals(const Json& s, const std::vector<std::string>& types, const std::string& where) {
    if (s.contains("enum") && s.contains("const")) return Fail(where, "'enum' beside 'const' is not supported");
    const Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
    if (!values.is_array()) return Fail(where, "'enum' must be an array");
    JsonSchema::Node node{.kind = JsonSchema::Node::kLiterals};
    for (const Json& v : values) {
      const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](const auto& t) { return HasType(v, t); });
      std::string text = Compact(v);
      if (typed && std::find(node.literals.begin(), node.literals.end(), text) == node.literals.end()) {
        node.literals.push_back(std::move(text));
      }
    }
    if (node.literals.empty()) return Fail(where, "'enum' has no value of the schema's 'type'");
    return Add(std::move(node));
  }

  // An integer or a number within its bounds (json_schema_numbers.h).
  int32_t Integer(const Json& s, const std::string& where) {
    JsonSchema::Node node{.kind = JsonSchema::Node::kInteger};
    if (absl::Status st = CompileIntegerBounds(s, node); !st.ok()) return Fail(where, std::string(st.message()));
    return Add(std::move(node));
  }
  int32_t Number(const Json& s, const std::string& where) {
    JsonSchema::Node node{.kind = JsonSchema::Node::kNumber};
    if (absl::Status st = CompileNumberBounds(s, node); !st.ok()) return Fail(where, std::string(st.message()));
    return Add(std::move(node));
  }

  // uniqueItems: each array's items one literals node of at most kMaxUnique values (the frame keeps
  // a bit each), and minItems no more than them; checked once references are resolved.
  bool CheckUnique() {
    for (const auto& [array, where] : unique_) {
      const JsonSchema::Node& n = (*nodes_)[static_cast<size_t>(array)];
      const JsonSchema::Node& items = (*nodes_)[static_cast<size_t>(n.items)];
      if (!n.prefix.empty() || items.kind != JsonSchema::Node::kLiterals || items.literals.size() > JsonSchema::kMaxUnique) {
        return Fail(where, absl::StrCat("'uniqueItems' is supported on items that are an enum or const of at most ",
                                        JsonSchema::kMaxUnique, " values (no prefixItems)")) >= 0;
      }
      if (n.min > items.literals.size()) return Fail(where, "'minItems' with 'uniqueItems' admits nothing") >= 0;
    }
    return true;
  }

  // An array: its first items each of its own schema (prefixItems, or the older items as a list),
  // the rest of `items` (additionalItems in the older form); false there ends the array after them.
  int32_t Array(const Json& s, JsonSchema::Node node, const std::string& where, int nesting) {
    if (s.contains("uniqueItems")) {
      if (!s["uniqueItems"].is_boolean()) return Fail(where, "'uniqueItems' must be a boolean");
      node.unique = s["uniqueItems"].get<bool>();
    }
    const bool old_tuple = s.contains("items") && s["items"].is_array();
    const char* prefix_key = old_tuple ? "items" : "prefixItems";
    const char* rest_key = old_tuple ? "additionalItems" : "items";
    if (s.contains(prefix_key)) {
      const Json& prefix = s[prefix_key];
      if (!prefix.is_array()) return Fail(where, absl::StrCat("'", prefix_key, "' must be a list of schemas"));
      for (size_t i = 0; i < prefix.size(); ++i) {
        node.prefix.push_back(Compile(prefix[i], absl::StrCat(where, "/", prefix_key, "/", i), nesting + 1));
      }
    }
    if (s.contains(rest_key) && s[rest_key] == false) {  // no items past the prefix
      if (node.min > node.prefix.size()) {
        return Fail(where, absl::StrCat("'minItems' with '", rest_key, "': false admits nothing"));
      }
      node.max = std::min<uint32_t>(node.max, static_cast<uint32_t>(node.prefix.size()));
      node.items = Any();
    } else {
      node.items = s.contains(rest_key) ? Compile(s[rest_key], where + "/" + rest_key, nesting + 1) : Any();
    }
    const bool unique = node.unique;
    const int32_t array = Add(std::move(node));
    if (unique && array >= 0) unique_.emplace_back(array, where);
    return array;
  }

  // A string with a pattern (searched) or an enforced format (matched whole): the DFA takes its
  // lengths too (the node's own bounds are then none).
  // A string with a pattern (searched) and/or an enforced format (matched whole; both: the strings
  // both take): its DFA takes the lengths too (the node's own bounds are then none). The same
  // expressions and lengths again (a format or pattern on many properties) are the same DFA: compiled
  // once (a hostile schema of a thousand ipv6 strings was 0.6 s), one text-token table at mask time.
  int32_t Pattern(const std::optional<std::string>& pattern, const std::optional<std::string>& format, JsonSchema::Node node,
                  const std::string& where) {
    const std::string key = absl::StrCat(node.min, ",", node.max, ",", pattern ? static_cast<int64_t>(pattern->size()) : -1,
                                         ":", pattern.value_or(""), format.value_or(""));
    auto [seen, added] = pattern_index_.try_emplace(key, static_cast<int32_t>(patterns_->size()));
    if (added) {
      const uint32_t max = node.max == JsonSchema::kUnbounded ? PatternDfa::kUnbounded : node.max;
      absl::StatusOr<std::shared_ptr<const PatternDfa>> dfa;
      if (pattern) {
        dfa = PatternDfa::Compile(*pattern, node.min, max, /*search=*/true, &pattern_work_);
        if (!dfa.ok()) return Fail(where, absl::StrCat("'pattern': ", dfa.status().message()));
      }
      if (format) {
        absl::StatusOr<std::shared_ptr<const PatternDfa>> f =
            PatternDfa::Compile(*format, node.min, max, /*search=*/false, &pattern_work_);
        if (f.ok() && pattern) f = PatternDfa::Intersect(**dfa, **f, &pattern_work_);
        if (!f.ok()) return Fail(where, absl::StrCat(pattern ? "'pattern' and 'format'" : "'format'", ": ", f.status().message()));
        dfa = std::move(f);
      }
      pattern_transitions_ += (*dfa)->transitions();
      if (pattern_transitions_ > kMaxPatternTransitions) {
        return Fail(where, absl::StrCat("the patterns' automata together pass ", kMaxPatternTransitions, " transitions"));
      }
      patterns_->push_back(*std::move(dfa));
    }
    node.pattern = seen->second;
    node.min = 0;
    node.max = JsonSchema::kUnbounded;
    return Add(std::move(node));
  }

  int32_t Typed(const Json& s, const std::string& type, const std::string& where, int nesting) {
    using Node = JsonSchema::Node;
    if (type == "boolean") return Add({.kind = Node::kLiterals, .literals = {"true", "false"}});
    if (type == "null") return Add({.kind = Node::kLiterals, .literals = {"null"}});
    if (type == "number") return HasNumericBounds(s) ? Number(s, where) : Add({.kind = Node::kNumber});
    if (type == "integer") return Integer(s, where);
    if (type == "string" || type == "array") {
      const char* min_key = type == "string" ? "minLength" : "minItems";
      const char* max_key = type == "string" ? "maxLength" : "maxItems";
      Node node{.kind = type == "string" ? Node::kString : Node::kArray};
      node.min = Count(s, min_key, where).value_or(0);
      node.max = Count(s, max_key, where).value_or(JsonSchema::kUnbounded);
      if (status_.ok() && node.min > node.max) Fail(where, absl::StrCat("'", min_key, "' is more than '", max_key, "'"));
      if (type == "string" && status_.ok()) {
        std::optional<std::string> pattern, format;
        if (s.contains("pattern")) {
          if (!s["pattern"].is_string()) return Fail(where, "'pattern' must be a string");
          pattern = s["pattern"].get<std::string>();
        }
        if (s.contains("format") && s["format"].is_string()) format = FormatExpression(s["format"].get<std::string>());
        if (pattern || format) return Pattern(pattern, format, std::move(node), where);
      }
      if (type == "array" && status_.ok()) return Array(s, std::move(node), where, nesting);
      return Add(std::move(node));
    }
    // An object.
    Node node{.kind = Node::kObject};
    const Json empty = Json::object();
    const Json& properties = s.contains("properties") ? s["properties"] : empty;
    if (!properties.is_object()) return Fail(where, "'properties' must be an object");
    for (const auto& [name, sub] : properties.items()) {
      node.properties.push_back({.key = Compact(Json(name)),
                                 .node = Compile(sub, absl::StrCat(where, "/properties/", Pointer(name)), nesting + 1)});
    }
    if (s.contains("required")) {
      const Json& required = s["required"];
      if (!required.is_array()) return Fail(where, "'required' must be an array of names");
      for (const Json& name : required) {
        if (!name.is_string()) return Fail(where, "'required' must be an array of names");
        const std::string key = Compact(name);
        const auto p = std::find_if(node.properties.begin(), node.properties.end(), [&](const auto& q) { return q.key == key; });
        if (p == node.properties.end()) {
          return Fail(where, absl::StrCat("'required' names ", key, ", which 'properties' does not"));
        }
        p->required = true;
      }
    }
    const Json& additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(nullptr);
    if (!node.properties.empty()) {  // an object writes only its properties: valid whatever else it would allow
      if (!additional.is_null() && !additional.is_boolean() && !additional.is_object()) {
        return Fail(where, "'additionalProperties' must be a boolean or a schema");
      }
    } else if (additional.is_null() || additional == true) {
      node.values = Any();
    } else if (additional != false) {
      node.values = Compile(additional, where + "/additionalProperties", nesting + 1);
    }
    return Add(std::move(node));
  }

  static std::string Pointer(const std::string& name) {
    std::string out;
    for (const char c : name) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
    return out;
  }

  // A $ref within the document: a kRef node now, its target once every schema is compiled.
  int32_t Reference(const std::string& ref, const std::string& where, int nesting) {
    if (ref.empty() || ref[0] != '#') return Fail(where, absl::StrCat("'$ref' ", ref, " is not within the document"));
    if (const auto it = by_pointer_.find(ref); it != by_pointer_.end()) return it->second;
    const int32_t slot = Add({.kind = JsonSchema::Node::kRef});
    by_pointer_[ref] = slot;
    const Json* target = &document_;
    if (ref.size() > 1) {
      try {
        target = &document_.at(Json::json_pointer(ref.substr(1)));
      } catch (const Json::exception&) {
        return Fail(where, absl::StrCat("'$ref' ", ref, " names nothing in the document"));
      }
    }
    const int32_t compiled = Compile(*target, ref.substr(1), nesting + 1);
    (*nodes_)[static_cast<size_t>(slot)].target = compiled;
    return slot;
  }

  // Every reference to a kRef node made a reference to what it names; anyOf lists flattened.
  bool ResolveReferences(int32_t root, int32_t* resolved_root) {
    auto resolve = [&](int32_t i) {
      for (size_t hops = 0; i >= 0 && (*nodes_)[static_cast<size_t>(i)].kind == JsonSchema::Node::kRef; ++hops) {
        if (hops > nodes_->size()) return -1;
        i = (*nodes_)[static_cast<size_t>(i)].target;
      }
      return i;
    };
    *resolved_root = resolve(root);
    if (*resolved_root < 0) return Fail("", "'$ref' names only itself") >= 0;
    for (JsonSchema::Node& n : *nodes_) {
      for (JsonSchema::Property& p : n.properties) p.node = resolve(p.node);
      if (n.values >= 0) n.values = resolve(n.values);
      if (n.items >= 0) n.items = resolve(n.items);
      for (int32_t& a : n.alternatives) a = resolve(a);
      for (int32_t& i : n.prefix) i = resolve(i);
      if (std::any_of(n.properties.begin(), n.properties.end(), [](const auto& p) { return p.node < 0; }) ||
          (n.kind == JsonSchema::Node::kArray && n.items < 0) ||
          std::find(n.prefix.begin(), n.prefix.end(), -1) != n.prefix.end() ||
          std::find(n.alternatives.begin(), n.alternatives.end(), -1) != n.alternatives.end()) {
        return Fail("", "'$ref' names only itself") >= 0;
      }
    }
    // anyOf within anyOf: one list of the alternatives that are not (an anyOf that reaches itself adds nothing).
    for (size_t i = 0; i < nodes_->size(); ++i) {
      if ((*nodes_)[i].kind != JsonSchema::Node::kAnyOf) continue;
      std::vector<int32_t> flat;
      absl::flat_hash_set<int32_t> seen = {static_cast<int32_t>(i)};
      std::vector<int32_t> todo((*nodes_)[i].alternatives.rbegin(), (*nodes_)[i].alternatives.rend());
      while (!todo.empty()) {
        const int32_t a = todo.back();
        todo.pop_back();
        if (!seen.insert(a).second) continue;
        const JsonSchema::Node& n = (*nodes_)[static_cast<size_t>(a)];
        if (n.kind == JsonSchema::Node::kAnyOf) {
          todo.insert(todo.end(), n.alternatives.rbegin(), n.alternatives.rend());
        } else {
          flat.push_back(a);
        }
      }
      if (flat.empty()) return Fail("", "an 'anyOf' names only itself") >= 0;
      (*nodes_)[i].alternatives = std::move(flat);
    }
    return true;
  }

  // Each node's shortest document's depth in frames, to a fixed point (recursion through required
  // properties or minItems may leave a node without a finite one).
  void ComputeDepths() {
    for (JsonSchema::Node& n : *nodes_) n.depth = kInfinite;
    auto depth = [&](int32_t i) { return (*nodes_)[static_cast<size_t>(i)].depth; };
    auto plus_one = [](uint32_t d) { return d == kInfinite ? kInfinite : d + 1; };
    for (bool changed = true; changed;) {
      changed = false;
      for (JsonSchema::Node& n : *nodes_) {
        uint32_t d = 1;
        switch (n.kind) {
          case JsonSchema::Node::kObject:
            for (const JsonSchema::Property& p : n.properties) {
              if (p.required) d = std::max(d, plus_one(depth(p.node)));
            }
            break;
          case JsonSchema::Node::kArray:  // its first minItems items
            for (uint32_t i = 0; i < std::min<size_t>(n.min, n.prefix.size()); ++i) d = std::max(d, plus_one(depth(n.prefix[i])));
            if (n.min > n.prefix.size()) d = std::max(d, plus_one(depth(n.items)));
            break;
          case JsonSchema::Node::kAnyOf:
            d = kInfinite;
            for (const int32_t a : n.alternatives) d = std::min(d, depth(a));
            break;
          case JsonSchema::Node::kRef:
            d = kInfinite;
            break;
          default:
            break;
        }
        if (d < n.depth) {
          n.depth = d;
          changed = true;
        }
      }
    }
  }

  const Json& document_;
  std::vector<JsonSchema::Node>* nodes_ = nullptr;
  std::vector<std::shared_ptr<const PatternDfa>>* patterns_ = nullptr;
  size_t pattern_transitions_ = 0;
  absl::flat_hash_map<std::string, int32_t> pattern_index_;  // Pattern's key: the DFA's place in patterns_
  size_t pattern_work_ = kMaxPatternWork;                    // what the patterns may still take to compile
  std::vector<std::pair<int32_t, std::string>> unique_;      // arrays with uniqueItems, and where they are
  absl::Status status_;
  int32_t any_ = -1;
  absl::flat_hash_map<std::string, int32_t> by_pointer_;
};

namespace {

// How deep the text's arrays and objects nest (outside strings). Printing a value recurses (an
// enum's values are printed), so a schema file of a few hundred KB of '[' would end the process.
size_t Nesting(absl::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Compile(absl::string_view text) {
  if (Nesting(text) > kMaxTextNesting) {
    return absl::InvalidArgumentError(absl::StrCat("the schema nests deeper than ", kMaxTextNesting, " levels"));
  }
  const Json document = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return absl::InvalidArgumentError("the schema is not valid JSON");
  return SchemaCompiler(document).Run();
}

absl::StatusOr<std::shared_ptr<const JsonSchema>> JsonSchema::Choice(const std::vector<std::string>& choices) {
  if (choices.empty()) return absl::InvalidArgumentError("no choices");
  auto schema = std::make_shared<JsonSchema>();
  Node literals{.kind = Node::kLiterals, .depth = 1};
  for (const std::string& c : choices) {
    if (c.empty()) return absl::InvalidArgumentError("a choice is empty");
    if (std::find(literals.literals.begin(), literals.literals.end(), c) == literals.literals.end()) literals.literals.push_back(c);
  }
  schema->nodes_ = {std::move(literals), Node{.kind = Node::kString, .depth = 1}};
  schema->root_ = 0;
  schema->key_node_ = 1;
  return std::shared_ptr<const JsonSchema>(std::move(schema));
}

}  // namespace ag::runtime
