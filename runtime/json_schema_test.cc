#include "runtime/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <regex>

#include "absl/container/flat_hash_set.h"
#include "nlohmann/json.hpp"
#include "runtime/cpu_backend.h"
#include "runtime/engine.h"
#include "runtime/regex_grammar.h"
#include "models/glm/tokenizer.h"
#include "tests/testing/byte_vocabulary.h"
#include "tests/testing/tiny_glm.h"
#include "tests/testing/vocab.h"

namespace ag::runtime {
namespace {

using Json = nlohmann::ordered_json;

// The reference: a validator written from the JSON Schema specification over parsed documents (not
// bytes), for the keywords the compiler takes. It follows the specification where the automaton is
// narrower (extra properties and any key order are valid here; oneOf means exactly one).
class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}
  bool Valid(const Json& v) const { return Valid(root_, v); }

 private:
  static size_t Characters(const std::string& s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; }));
  }
  static bool HasType(const std::string& t, const Json& v) {
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
    if (t == "number") return v.is_number();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "object") return v.is_object();
    return t == "array" && v.is_array();
  }
  bool Valid(const Json& s, const Json& v) const {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return Valid(root_.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))), v);
    if (s.contains("anyOf")) {
      return std::any_of(s["anyOf"].begin(), s["anyOf"].end(), [&](const Json& a) { return Valid(a, v); });
    }
    if (s.contains("oneOf")) {
      return std::count_if(s["oneOf"].begin(), s["oneOf"].end(), [&](const Json& a) { return Valid(a, v); }) == 1;
    }
    if (s.contains("allOf")) {
      return std::all_of(s["allOf"].begin(), s["allOf"].end(), [&](const Json& a) { return Valid(a, v); });
    }
    if (s.contains("const") && s["const"] != v) return false;
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
    if (s.contains("type")) {
      const Json types = s["type"].is_array() ? s["type"] : Json::array({s["type"]});
      if (std::none_of(types.begin(), types.end(), [&](const Json& t) { return HasType(t.get<std::string>(), v); })) return false;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("multipleOf")) {
        const double q = x / s["multipleOf"].get<double>();
        if (std::fabs(q - std::round(q)) > 1e-9 * std::max(1.0, std::fabs(q))) return false;
      }
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
    }
    if (v.is_string()) {
      if (s.contains("minLength") && Characters(v.get<std::string>()) < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && Characters(v.get<std::string>()) > s["maxLength"].get<size_t>()) return false;
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
      const bool old_tuple = s.contains("items") && s["items"].is_array();
      const Json prefix = old_tuple ? s["items"] : s.value("prefixItems", Json::array());
      const char* rest = old_tuple ? "additionalItems" : "items";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i < prefix.size() ? !Valid(prefix[i], v[i]) : s.contains(rest) && !Valid(s[rest], v[i])) return false;
        if (s.value("uniqueItems", false) && std::find(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v[i]) != v.begin() + static_cast<std::ptrdiff_t>(i)) return false;
      }
    }
    if (v.is_object()) {
      for (const Json& r : s.value("required", Json::array())) {
        if (!v.contains(r.get<std::string>())) return false;
      }
      const Json properties = s.value("properties", Json::object());
      for (const auto& [k, value] : v.items()) {
        if (properties.contains(k)) {
          if (!Valid(properties[k], value)) return false;
        } else if (s.contains("additionalProperties") && !Valid(s["additionalProperties"], value)) {
          return false;
        }
      }
    }
    return true;
  }
  const Json& root_;
};

std::shared_ptr<const JsonSchema> MustCompile(const std::string& text) {
  absl::StatusOr<std::shared_ptr<const JsonSchema>> schema = JsonSchema::Compile(text);
  EXPECT_TRUE(schema.ok()) << schema.status();
  return schema.ok() ? *schema : nullptr;
}

bool Whole(const JsonSchema& schema, absl::string_view text) {
  SchemaState s(&schema);
  return s.Feed(text) && s.Complete();
}

// Parses what the automaton wrote; an exponent past a double's range (valid JSON, which the
// reference parser refuses) is made 1 first.
std::optional<Json> Parse(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) j = Json::parse(std::regex_replace(text, std::regex("([eE][+-]?)[0-9]+"), "$011"), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// The schemas the tests walk: every keyword the compiler takes, recursion, a document that is not an object.
const std::vector<std::string>& Schemas() {
  static const auto* const kSchemas = new std::vector<std::string>{
      R"({"type": "object", "title": "person", "properties": {
           "name": {"type": "string", "minLength": 1, "maxLength": 6, "description": "a name"},
           "age": {"type": "integer"}, "site": {"type": ["string", "null"], "format": "uri"},
           "tags": {"type": "array", "items": {"enum": ["a", "b\u00e9", 1, null, true]}, "maxItems": 3},
           "score": {"type": "number"}, "ok": {"type": "boolean"}},
         "required": ["name", "age"], "additionalProperties": false})",
      R"({"type": "object", "properties": {"thought": {"type": "string", "maxLength": 12},
           "action": {"anyOf": [
             {"type": "object", "properties": {"type": {"const": "tap"}, "x": {"type": "integer"}, "y": {"type": "integer"}},
              "required": ["type", "x", "y"]},
             {"type": "object", "properties": {"type": {"const": "type"}, "text": {"type": "string", "maxLength": 5}},
              "required": ["type", "text"]},
             {"type": "object", "properties": {"type": {"const": "finish"}}, "required": ["type"]}]}},
         "required": ["thought", "action"]})",
      R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
           "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["value"]}},
         "$ref": "#/$defs/node"})",
      R"({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 2}})",
      R"({"oneOf": [{"type": "integer"}, {"type": "string", "minLength": 2, "maxLength": 3}, {"const": [1, {"a": null}]},
                    {"type": "array", "items": false, "maxItems": 0}]})",
      R"({"type": "array", "items": {}, "minItems": 1})",
      R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "maximum": 120},
           "p": {"type": "integer", "exclusiveMinimum": 0}, "neg": {"type": ["integer", "null"], "maximum": -10},
           "f": {"type": "integer", "minimum": 2.5, "exclusiveMaximum": 1e6}, "z": {"type": "integer", "minimum": 0, "maximum": 0},
           "big": {"type": "integer", "minimum": -1000000000000000, "exclusiveMaximum": -999999999999990}},
         "required": ["n", "p", "neg", "f", "z", "big"]})",
      // Ambiguous past kMaxPaths: 40 alternatives alike up to their last property's value.
      R"({"$defs": {"a": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 1}, "v": {"type": "integer"}},
           "required": ["k", "v"]}}, "anyOf": [)" + [] {
        std::string list;
        for (int i = 0; i < 40; ++i) list += std::string(i ? ", " : "") + R"({"$ref": "#/$defs/a"}, {"type": "object", "properties": {"k": {"type": "string"}, "v": {"const": )" + std::to_string(i) + "}}}";
        return list;
      }() + "]}",
      R"({"allOf": [{"$ref": "#/definitions/pair"}], "definitions": {"pair": {"type": "array", "minItems": 2, "maxItems": 2,
           "items": {"type": "string", "maxLength": 2}}}})",
      // Tuples: pydantic's Tuple[int, str] (prefixItems, then nothing), a prefix then items, the older items-as-a-list.
      R"({"type": "object", "properties": {
           "t": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 1080}, {"type": "string", "maxLength": 3}],
                 "minItems": 2, "maxItems": 2},
           "p": {"type": "array", "prefixItems": [{"const": "a"}, {"type": "boolean"}], "items": {"type": "integer"}, "maxItems": 4},
           "o": {"type": "array", "items": [{"type": "null"}, {"enum": ["x", "y"]}], "additionalItems": false},
           "u": {"type": "array", "items": {"enum": ["a", "ab", 1, 12, null]}, "uniqueItems": true, "minItems": 1}},
         "required": ["t", "p", "o", "u"]})",
      // Bounded numbers (pydantic's Field(ge=0, le=1) and PositiveFloat on floats), with decimals too.
      R"({"type": "object", "properties": {"t": {"type": "number", "minimum": 0, "maximum": 1},
           "p": {"type": "number", "exclusiveMinimum": 0}, "d": {"type": ["number", "null"], "minimum": -3, "exclusiveMaximum": 2},
           "r": {"type": "number", "exclusiveMinimum": 0.001, "maximum": 0.75},
           "q": {"type": ["number", "null"], "minimum": -2.5, "exclusiveMaximum": 10.25},
           "m": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100},
           "h": {"type": "number", "multipleOf": 0.25, "exclusiveMaximum": 10, "minimum": -3}},
         "required": ["t", "p", "d", "r", "q", "m", "h"]})",
  };
  return *kSchemas;
}

// A random document the schema validates, written as the automaton writes it (properties in the
// schema's order, compact enum values), or nullopt where a choice led nowhere (items: false).
std::optional<Json> Generate(const Json& root, const Json& s, std::mt19937& rng, int depth) {
  if (s.is_boolean()) return s.get<bool>() ? std::optional<Json>(Json(static_cast<int>(rng() % 10))) : std::nullopt;
  if (s.contains("$ref")) return Generate(root, root.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))), rng, depth);
  for (const char* list : {"anyOf", "oneOf", "allOf"}) {
    if (s.contains(list)) return Generate(root, s[list][rng() % s[list].size()], rng, depth);
  }
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()];
  const Json types = !s.contains("type") ? Json::array({"object", "array", "string", "number", "integer", "boolean", "null"})
                     : s["type"].is_array() ? s["type"] : Json::array({s["type"]});
  std::string type = types[rng() % types.size()].get<std::string>();
  if (depth > 3 && (type == "object" || type == "array") && !s.contains("properties") && !s.contains("items")) type = "null";
  const size_t min = s.value("minItems", s.value("minLength", 0u)), max = s.value("maxItems", s.value("maxLength", 4u));
  const size_t count = min + rng() % (std::min<size_t>(max, min + 3) - min + 1);
  if ((type == "integer" || type == "number") && s.contains("multipleOf")) {  // a multiple within the bounds (in ten-thousandths)
    const int64_t k = std::llround(s["multipleOf"].get<double>() * 10000);
    const auto units = [&](const char* key) { return std::llround(s[key].get<double>() * 10000); };
    const int64_t lo = s.contains("minimum") ? units("minimum") : s.contains("exclusiveMinimum") ? units("exclusiveMinimum") + 1 : -10000000;
    const int64_t hi = s.contains("maximum") ? units("maximum") : s.contains("exclusiveMaximum") ? units("exclusiveMaximum") - 1 : lo + 10000000;
    const int64_t step = type == "integer" ? std::lcm(k, int64_t{10000}) : k;
    const int64_t first = (lo >= 0 ? (lo + step - 1) / step : -(-lo / step)), last = hi >= 0 ? hi / step : -((-hi + step - 1) / step);
    const int64_t v = (first + static_cast<int64_t>(rng() % static_cast<uint64_t>(last - first + 1))) * step;
    return v % 10000 == 0 ? Json(v / 10000) : Json(static_cast<double>(v) / 10000);
  }
  if (type == "integer") {  // within the bounds, or -1000 .. 1000 where there are none
    std::optional<int64_t> lo, hi;
    if (s.contains("minimum")) lo = static_cast<int64_t>(std::ceil(s["minimum"].get<double>()));
    if (s.contains("exclusiveMinimum")) lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::floor(s["exclusiveMinimum"].get<double>())) + 1);
    if (s.contains("maximum")) hi = static_cast<int64_t>(std::floor(s["maximum"].get<double>()));
    if (s.contains("exclusiveMaximum")) hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::ceil(s["exclusiveMaximum"].get<double>())) - 1);
    const int64_t from = lo.value_or(hi ? *hi - 2000 : -1000), to = std::min(hi.value_or(from + 2000), from + 2000);
    return Json(from + static_cast<int64_t>(rng() % static_cast<uint64_t>(to - from + 1)));
  }
  if (type == "number" && (s.contains("minimum") || s.contains("exclusiveMinimum") || s.contains("maximum") ||
                           s.contains("exclusiveMaximum"))) {  // a value on a grid of ten-thousandths within them
    const auto units = [&](const char* key) { return std::llround(s[key].get<double>() * 10000); };
    const int64_t lo = s.contains("minimum") ? units("minimum") : s.contains("exclusiveMinimum") ? units("exclusiveMinimum") + 1 : -10000000;
    const int64_t hi = s.contains("maximum") ? units("maximum") : s.contains("exclusiveMaximum") ? units("exclusiveMaximum") - 1 : lo + 10000000;
    const int64_t v = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    return v % 10000 == 0 && rng() % 2 ? Json(v / 10000) : Json(static_cast<double>(v) / 10000);
  }
  if (type == "number") return rng() % 2 ? Json(static_cast<int64_t>(rng() % 100)) : Json(std::ldexp(static_cast<double>(rng() % 1000) - 500, static_cast<int>(rng() % 60) - 30));
  if (type == "boolean") return Json(rng() % 2 == 0);
  if (type == "null") return Json(nullptr);
  if (type == "string") {
    static const std::vector<std::string> kCharacters = {"a", "Z", " ", "\"", "\\", "\n", "/", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\x01"};
    std::string text;
    for (size_t i = 0; i < count; ++i) text += kCharacters[rng() % kCharacters.size()];
    return Json(text);
  }
  if (type == "array" && s.value("uniqueItems", false)) {  // distinct values of the items' enum
    Json values = s["items"].contains("enum") ? s["items"]["enum"] : Json::array({s["items"]["const"]});
    Json a = Json::array();
    for (size_t i = 0; i < std::min(count, values.size()); ++i) {
      const size_t k = i + rng() % (values.size() - i);
      std::swap(values[i], values[k]);
      a.push_back(values[i]);
    }
    return a;
  }
  if (type == "array") {
    Json a = Json::array();
    const bool old_tuple = s.contains("items") && s["items"].is_array();
    const Json prefix = old_tuple ? s["items"] : s.value("prefixItems", Json::array());
    const char* rest = old_tuple ? "additionalItems" : "items";
    for (size_t i = 0; i < count; ++i) {
      std::optional<Json> item =
          Generate(root, i < prefix.size() ? prefix[i] : s.contains(rest) ? s[rest] : Json::object(), rng, depth + 1);
      if (!item) return std::nullopt;
      a.push_back(*item);
    }
    return a;
  }
  Json o = Json::object();
  const Json required = s.value("required", Json::array());
  if (s.contains("properties")) {
    for (const auto& [k, sub] : s["properties"].items()) {
      if (std::find(required.begin(), required.end(), Json(k)) == required.end() && (rng() % 2 == 0 || depth > 3)) continue;
      std::optional<Json> value = Generate(root, sub, rng, depth + 1);
      if (!value) return std::nullopt;
      o[k] = *value;
    }
  } else if (s.value("additionalProperties", Json(true)) != false) {
    for (size_t i = rng() % 3; i > 0; --i) {
      std::optional<Json> value = Generate(root, s.value("additionalProperties", Json::object()), rng, depth + 1);
      if (!value) return std::nullopt;
      o["k\xC3\xA9" + std::to_string(rng() % 5)] = *value;
    }
  }
  return o;
}

// Random documents each schema validates are taken whole, every prefix on the way; the same mutated
// by a byte inserted, dropped or replaced are taken only if the reference validates them.
TEST(SchemaState, AgreesWithAValidator) {
  std::mt19937 rng(7);
  const std::string alphabet = "{}[],:\"\\ \n-.0123456789trufalsn\xC3\xA9";
  for (const std::string& text : Schemas()) {
    const Json root = Json::parse(text);
    std::shared_ptr<const JsonSchema> schema = MustCompile(text);
    ASSERT_NE(schema, nullptr);
    const Validator validator(root);
    int taken = 0, refused = 0;
    for (int trial = 0; trial < 1500; ++trial) {
      const std::optional<Json> document = Generate(root, root, rng, 0);
      if (!document) continue;
      ASSERT_TRUE(validator.Valid(*document)) << document->dump();
      const bool has_literal_containers = text.find("\"const\": [") != std::string::npos;
      std::string doc = document->dump(trial % 3 == 0 && !has_literal_containers ? 2 : -1, ' ', false);
      // The ambiguous schema is followed along its first kMaxPaths readings: narrower there.
      const bool narrowed = text.find(R"("v": {"const": 39})") != std::string::npos;
      if (!narrowed) {
        ASSERT_TRUE(Whole(*schema, doc)) << text << "\n" << doc;
      }
      const size_t at = rng() % (doc.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: doc.insert(doc.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        case 1: if (at < doc.size()) doc.erase(at, 1); break;
        default: if (at < doc.size()) doc[at] = c; break;
      }
      if (Whole(*schema, doc)) {
        const std::optional<Json> parsed = Parse(doc);
        ASSERT_TRUE(parsed && validator.Valid(*parsed)) << text << "\n" << doc;
        ++taken;
      } else {
        ++refused;
      }
    }
    EXPECT_GT(taken, 20) << text;
    EXPECT_GT(refused, 300) << text;
  }
}

// Random walks, a byte at a time among those the state takes: the automaton is never stuck (some
// byte continues it or it is whole), and every time it is whole the reference validates the text.
TEST(SchemaState, NeverStuckAndWholeOnlyWhenValid) {
  std::mt19937 rng(11);
  const std::string structural = "\"{}[],:0123456789-tfn";
  for (const std::string& text : Schemas()) {
    const Json root = Json::parse(text);
    std::shared_ptr<const JsonSchema> schema = MustCompile(text);
    ASSERT_NE(schema, nullptr);
    const Validator validator(root);
    int whole = 0;
    for (int walk = 0; walk < 200; ++walk) {
      SchemaState s(schema.get());
      std::string written;
      for (int step = 0; step < 600; ++step) {
        if (s.Complete()) {
          const std::optional<Json> parsed = Parse(written);
          ASSERT_TRUE(parsed && validator.Valid(*parsed)) << text << "\n" << written;
          ++whole;
          if (rng() % 2 == 0) break;
        }
        std::vector<uint8_t> next, preferred;
        for (int b = 0; b < 256; ++b) {
          SchemaState t = s;
          if (!t.Feed(static_cast<uint8_t>(b))) continue;
          next.push_back(static_cast<uint8_t>(b));
          if (structural.find(static_cast<char>(b)) != std::string::npos) preferred.push_back(static_cast<uint8_t>(b));
        }
        if (next.empty()) {
          ASSERT_TRUE(s.Complete()) << "stuck: " << text << "\n" << written;
          break;
        }
        const std::vector<uint8_t>& pool = !preferred.empty() && rng() % 4 != 0 ? preferred : next;
        const uint8_t b = pool[rng() % pool.size()];
        ASSERT_TRUE(s.Feed(b));
        written += static_cast<char>(b);
      }
    }
    EXPECT_GT(whole, 50) << text;
  }
}

TEST(SchemaState, WritesPropertiesInOrderAndNothingElse) {
  std::shared_ptr<const JsonSchema> schema = MustCompile(Schemas()[0]);
  EXPECT_TRUE(Whole(*schema, R"({"name":"ab","age":-3})"));
  EXPECT_TRUE(Whole(*schema, "{ \"name\" : \"\xC3\xA9\\u00e9\" ,\n \"age\": 0, \"ok\": true}"));
  EXPECT_TRUE(Whole(*schema, "{\"name\":\"a\",\"age\":1,\"site\":null,\"tags\":[\"b\xC3\xA9\",1,null],\"score\":-2.5e+3}"));
  EXPECT_FALSE(Whole(*schema, R"({"name":"a","age":1,"tags":["b\u00e9"]})")) << "enum values are written as compact JSON";
  for (const char* refused : {
           R"({"age":1,"name":"a"})",                     // out of order
           R"({"name":"a"})",                             // age is required
           R"({"name":"","age":1})",                      // minLength
           R"({"name":"abcdefg","age":1})",               // maxLength, in characters
           R"({"name":"a","age":1.5})",                   // an integer
           R"({"name":"a","age":1e3})",                   // integers are written plainly
           R"({"name":"a","age":1,"extra":1})",           // no other properties
           R"({"name":"a","age":1,"name":"b"})",          // once each
           R"({"name":"a","age":1,"tags":["c"]})",        // enum
           R"({"name":"a","age":1,"tags":["a","a","a","a"]})",  // maxItems
           R"({"name":"\ud83d\ude00","age":1})",          // no surrogate escapes
           R"( {"name":"a","age":1})",                    // nothing around the document
           R"({"name":"a","age":1,})",
           "{\"name\":\"a\",  \"age\":1}",             // one space, or a newline and indentation
           "{\"name\":\"a\",\n\n\"age\":1}",
           "{\"name\":\"a\", \n\"age\":1}",
       }) {
    EXPECT_FALSE(Whole(*schema, refused)) << refused;
  }
  EXPECT_TRUE(Whole(*schema, "{\n\t\"name\": \"a\",\n" + std::string(20, ' ') + "\"age\": 1\n}"));
  EXPECT_FALSE(Whole(*schema, "{\n\t\"name\": \"a\",\n" + std::string(21, ' ') + "\"age\": 1\n}"));
  std::shared_ptr<const JsonSchema> scalar = MustCompile(Schemas()[4]);
  for (const char* taken : {"12", "-0", R"("abc")", R"([1,{"a":null}])", "[]"}) EXPECT_TRUE(Whole(*scalar, taken)) << taken;
  for (const char* refused : {"1.5", R"("a")", R"([1, {"a":null}])", "[1]", "12 "}) EXPECT_FALSE(Whole(*scalar, refused)) << refused;
  SchemaState s(scalar.get());
  ASSERT_TRUE(s.Feed("12"));
  EXPECT_TRUE(s.Complete());  // a number at the top ends where the text does
  EXPECT_TRUE(s.Feed("3"));
}

// vLLM's guided_choice: exactly one of the strings, as text; one that is a prefix of another may end
// there or go on; repeats are one.
// A bounded integer at the top: every integer text from -1,100 to 1,100 is whole exactly when its
// value is within the bounds, and a prefix is taken exactly when some integer it begins is.
TEST(SchemaState, BoundedIntegersStayWithinTheirBounds) {
  struct Case {
    std::string schema;
    int64_t lo, hi;
    int64_t multiple = 1;
  };
  constexpr int64_t kBound = JsonSchema::kMaxBound;
  for (const Case& c : std::vector<Case>{{R"({"type": "integer", "minimum": -12, "maximum": 345})", -12, 345},
                                         {R"({"type": "integer", "exclusiveMinimum": 0})", 1, INT64_MAX},
                                         {R"({"type": "integer", "maximum": -7.5})", INT64_MIN, -8},
                                         {R"({"type": "integer", "minimum": 0, "exclusiveMaximum": 1})", 0, 0},
                                         {R"({"type": "integer", "minimum": 90, "maximum": 110})", 90, 110},
                                         // multipleOf (pydantic's conint(multiple_of=5)), unbounded: within 10^15
                                         {R"({"type": "integer", "multipleOf": 5})", -kBound, kBound, 5},
                                         {R"({"type": "integer", "multipleOf": 7, "minimum": -30, "maximum": 40})", -30, 40, 7},
                                         {R"({"type": "integer", "multipleOf": 1.5, "exclusiveMinimum": 2})", 3, kBound, 3},
                                         {R"({"type": "integer", "multipleOf": 0.25, "maximum": 3})", -kBound, 3, 1},
                                         {R"({"type": "integer", "multipleOf": 100, "minimum": 150, "maximum": 1050})", 150, 1050, 100}}) {
    std::shared_ptr<const JsonSchema> schema = MustCompile(c.schema);
    ASSERT_NE(schema, nullptr);
    // Every prefix of an integer in range (those within +-20,000 suffice for texts up to +-1,100).
    absl::flat_hash_set<std::string> prefixes;
    for (int64_t v = std::max<int64_t>(c.lo, -20000); v <= std::min<int64_t>(c.hi, 20000); ++v) {
      if (v % c.multiple != 0) continue;
      const std::string t = std::to_string(v);
      for (size_t k = 1; k <= t.size(); ++k) prefixes.insert(t.substr(0, k));
    }
    if (c.lo <= 0) prefixes.insert("-");                   // -0, or a negative integer
    if (c.lo <= 0 && c.hi >= 0) prefixes.insert("-0");     // 0, written so
    for (int64_t v = -1100; v <= 1100; ++v) {
      const std::string text = std::to_string(v);
      EXPECT_EQ(Whole(*schema, text), v >= c.lo && v <= c.hi && v % c.multiple == 0) << c.schema << " " << text;
      for (size_t k = 1; k <= text.size(); ++k) {
        SchemaState s(schema.get());
        EXPECT_EQ(s.Feed(text.substr(0, k)), prefixes.contains(text.substr(0, k))) << c.schema << " " << text.substr(0, k);
      }
    }
    EXPECT_EQ(Whole(*schema, "-0"), c.lo <= 0 && c.hi >= 0) << c.schema;
    EXPECT_FALSE(Whole(*schema, "1.0")) << "integers have no fraction";
  }
  // Near the largest bounds: digits count past what 32 bits hold.
  std::shared_ptr<const JsonSchema> big = MustCompile(R"({"type": "integer", "minimum": 999999999999999})");
  EXPECT_FALSE(Whole(*big, "99999999999999"));
  EXPECT_TRUE(Whole(*big, "999999999999999"));
  EXPECT_TRUE(Whole(*big, "123456789012345678901234567890"));
  SchemaState small(big.get());
  EXPECT_TRUE(small.Feed("99999999999999"));  // 14 digits: one more makes it
  EXPECT_FALSE(SchemaState(big.get()).Feed("-"));
}

// Numbers within bounds, whole or with decimals: every text of a grid of values (integer parts
// 0-130, either sign, fractions of up to four digits) is whole exactly when its exact value is
// within the bounds (compared in ten-thousandths), and every prefix of such a text is taken.
TEST(SchemaState, BoundedNumbersStayWithinTheirBounds) {
  struct Case {
    std::string schema;
    int64_t lo, hi;  // in ten-thousandths; INT64_MIN/MAX: none
    bool lo_open, hi_open;
    int64_t multiple = 1;  // in ten-thousandths
  };
  constexpr int64_t kNone = INT64_MAX;
  for (const Case& c : std::vector<Case>{
           {R"({"type": "number", "minimum": 0, "maximum": 1})", 0, 10000, false, false},
           {R"({"type": "number", "exclusiveMinimum": 0})", 0, kNone, true, false},
           {R"({"type": "number", "minimum": -3, "exclusiveMaximum": 2.0})", -30000, 20000, false, true},
           {R"({"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1})", -10000, 10000, true, true},
           {R"({"type": "number", "minimum": 5, "maximum": 5})", 50000, 50000, false, false},
           {R"({"type": "number", "maximum": -10, "exclusiveMaximum": -10})", INT64_MIN, -100000, false, true},
           {R"({"type": "number", "minimum": 100, "maximum": 120})", 1000000, 1200000, false, false},
           // Decimals (pydantic's confloat(ge=0.5, le=2.25), Field(gt=0.001, lt=0.999), ...).
           {R"({"type": "number", "minimum": 0.5, "maximum": 2.25})", 5000, 22500, false, false},
           {R"({"type": "number", "exclusiveMinimum": 0.001, "exclusiveMaximum": 0.999})", 10, 9990, true, true},
           {R"({"type": "number", "minimum": -1.5, "exclusiveMaximum": -0.05})", -15000, -500, false, true},
           {R"({"type": "number", "maximum": 99.99, "minimum": 0.0005})", 5, 999900, false, false},
           {R"({"type": "number", "exclusiveMinimum": 120.5})", 1205000, kNone, true, false},
           {R"({"type": "number", "minimum": 0.1, "maximum": 0.1})", 1000, 1000, false, false},
           // multipleOf (pydantic's confloat(multiple_of=0.25)): no digit but 0 past its decimals.
           {R"({"type": "number", "multipleOf": 0.25, "minimum": -2, "exclusiveMaximum": 100})", -20000, 1000000, false, true, 2500},
           {R"({"type": "number", "multipleOf": 0.05, "exclusiveMinimum": 0.1, "maximum": 1.001})", 1000, 10010, true, false, 500},
           {R"({"type": "number", "multipleOf": 5})", INT64_MIN, kNone, false, false, 50000}}) {  // (within 10^15: off the grid)
    std::shared_ptr<const JsonSchema> schema = MustCompile(c.schema);
    ASSERT_NE(schema, nullptr);
    auto within = [&](int64_t v) {
      return (c.lo == INT64_MIN || v > c.lo || (v == c.lo && !c.lo_open)) &&
             (c.hi == kNone || v < c.hi || (v == c.hi && !c.hi_open)) && v % c.multiple == 0;
    };
    std::vector<std::pair<std::string, int64_t>> texts;  // text, value in ten-thousandths
    for (const char* sign : {"", "-"}) {
      for (int64_t whole = 0; whole <= 130; ++whole) {
        for (const auto& [fraction, units] : std::vector<std::pair<std::string, int64_t>>{
                 {"", 0}, {".0", 0}, {".000", 0}, {".5", 5000}, {".05", 500}, {".50", 5000}, {".001", 10}, {".9", 9000},
                 {".999", 9990}, {".0005", 5}, {".0004", 4}, {".25", 2500}, {".2501", 2501}, {".1", 1000}, {".9999", 9999},
                 {".75", 7500}, {".15", 1500}, {".2500", 2500}}) {
          const int64_t magnitude = whole * 10000 + units;
          texts.emplace_back(sign + std::to_string(whole) + fraction, *sign == '-' ? -magnitude : magnitude);
        }
      }
    }
    absl::flat_hash_set<std::string> prefixes;
    for (const auto& [text, value] : texts) {
      if (!within(value)) continue;
      for (size_t k = 1; k <= text.size(); ++k) prefixes.insert(text.substr(0, k));
    }
    for (const auto& [text, value] : texts) {
      EXPECT_EQ(Whole(*schema, text), within(value)) << c.schema << " " << text;
      if (prefixes.contains(text)) {
        SchemaState s(schema.get());
        EXPECT_TRUE(s.Feed(text)) << c.schema << " " << text;
      }
    }
    EXPECT_FALSE(Whole(*schema, "1e0")) << "bounded numbers are written plainly";
  }
  // Prefixes that can no longer land within the bounds are refused at once.
  std::shared_ptr<const JsonSchema> unit = MustCompile(R"({"type": "number", "minimum": 0, "maximum": 1})");
  for (const char* refused : {"2", "1.5", "1.01", "-0.1", "-1", "10", "01"}) {
    EXPECT_FALSE(SchemaState(unit.get()).Feed(refused)) << refused;
  }
  for (const char* taken : {"-", "-0.", "-0.000", "1.", "1.000", "0.999999999"}) {
    EXPECT_TRUE(SchemaState(unit.get()).Feed(taken)) << taken;
  }
  // With decimals: a prefix is refused as soon as no value it begins is within them.
  std::shared_ptr<const JsonSchema> band = MustCompile(R"({"type": "number", "minimum": 0.5, "maximum": 0.75})");
  for (const char* refused : {"1", "0.4", "0.8", "0.76", "0.7500001", "0.49", "-"}) {
    EXPECT_FALSE(SchemaState(band.get()).Feed(refused)) << refused;
  }
  for (const char* taken : {"0", "0.", "0.7", "0.75", "0.75000", "0.5", "0.5000001"}) {
    EXPECT_TRUE(SchemaState(band.get()).Feed(taken)) << taken;
  }
  std::shared_ptr<const JsonSchema> positive = MustCompile(R"({"type": "number", "exclusiveMinimum": 0})");
  EXPECT_FALSE(SchemaState(positive.get()).Feed("-"));
  EXPECT_FALSE(Whole(*positive, "0.000"));
  EXPECT_TRUE(Whole(*positive, "0.0001"));
  EXPECT_TRUE(Whole(*positive, "123456789012345678901234567890.5")) << "no upper bound";
  std::shared_ptr<const JsonSchema> hundreds = MustCompile(R"({"type": "number", "minimum": 100, "maximum": 120})");
  EXPECT_TRUE(SchemaState(hundreds.get()).Feed("1"));    // 100-120 begin so
  EXPECT_FALSE(SchemaState(hundreds.get()).Feed("1."));  // but 1.x is below them
  EXPECT_FALSE(SchemaState(hundreds.get()).Feed("13"));
}

TEST(JsonSchema, ChoiceIsOneOfTheStrings) {
  absl::StatusOr<std::shared_ptr<const JsonSchema>> choice = JsonSchema::Choice({"yes", "yes sir", "no", "\xC3\xA9t\xC3\xA9", "no"});
  ASSERT_TRUE(choice.ok()) << choice.status();
  for (const char* taken : {"yes", "yes sir", "no", "\xC3\xA9t\xC3\xA9"}) EXPECT_TRUE(Whole(**choice, taken)) << taken;
  for (const char* refused : {"ye", "yes si", "nos", "\"no\"", " no", "No", "yes sir "}) EXPECT_FALSE(Whole(**choice, refused)) << refused;
  SchemaState s(choice->get());
  ASSERT_TRUE(s.Feed("yes"));
  EXPECT_TRUE(s.Complete());
  EXPECT_TRUE(SchemaState(s).Feed(" sir"));
  EXPECT_FALSE(JsonSchema::Choice({}).ok());
  EXPECT_FALSE(JsonSchema::Choice({"a", ""}).ok());
}

// Nesting stops where the shortest document still fits: arrays of arrays take 63 '[' and then only ']'.
TEST(SchemaState, NestingStopsWhereTheDocumentStillFits) {
  std::shared_ptr<const JsonSchema> schema = MustCompile(R"({"type": "array", "items": {"$ref": "#"}})");
  SchemaState s(schema.get());
  for (size_t i = 1; i < JsonSchema::kMaxDepth; ++i) ASSERT_TRUE(s.Feed('[')) << i;
  SchemaState deeper = s;
  EXPECT_FALSE(deeper.Feed('['));
  for (size_t i = 1; i < JsonSchema::kMaxDepth; ++i) ASSERT_TRUE(s.Feed(']')) << i;
  EXPECT_TRUE(s.Complete());
  // A key promises its value: the 63rd object takes no key, whose value would be the 65th frame.
  std::shared_ptr<const JsonSchema> chain =
      MustCompile(R"({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}})");
  SchemaState c(chain.get());
  for (size_t i = 2; i < JsonSchema::kMaxDepth; ++i) ASSERT_TRUE(c.Feed("{\"next\":")) << i;
  SchemaState last = c;
  ASSERT_TRUE(last.Feed('{'));
  SchemaState key = last;
  EXPECT_FALSE(key.Feed('"'));
  EXPECT_TRUE(last.Feed('}'));
  EXPECT_TRUE(c.Feed("null"));
}

// uniqueItems over an enum (pydantic's Set[Literal[...]]): no value twice, a prefix refused as soon
// as it can only repeat one, no comma once every value is used.
TEST(SchemaState, UniqueItemsNeverRepeat) {
  std::shared_ptr<const JsonSchema> schema =
      MustCompile(R"({"type": "array", "items": {"enum": ["a", "ab", 1, 12]}, "uniqueItems": true, "minItems": 2})");
  ASSERT_NE(schema, nullptr);
  for (const char* taken : {R"(["a",1])", R"(["ab","a"])", R"([1,12])", R"([12,1,"ab","a"])", R"(["a", "ab", 12])"}) {
    EXPECT_TRUE(Whole(*schema, taken)) << taken;
  }
  for (const char* refused : {R"(["a","a"])", R"([1,1])", R"([12,12])", R"(["a"])", R"([12,1,"ab","a","a"])"}) {
    EXPECT_FALSE(Whole(*schema, refused)) << refused;
  }
  EXPECT_FALSE(SchemaState(schema.get()).Feed(R"(["a","a")")) << "the second \"a\" is refused at its closing quote";
  EXPECT_TRUE(SchemaState(schema.get()).Feed(R"(["a","a)")) << "it may still become \"ab\"";
  EXPECT_FALSE(SchemaState(schema.get()).Feed(R"([12,1,"ab","a",)")) << "no value left for another item";
}

TEST(JsonSchema, RefusesWhatItCannotEnforce) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"type": "string", "pattern": "(?=a)b"})", "'#': 'pattern': lookaround is not supported"},
      {R"({"type": "string", "pattern": "\\d{3}", "maxLength": 2})", "'#': 'pattern': no string of the allowed lengths"},
      {R"({"type": "object", "properties": {"n": {"type": "number", "minimum": 1e-10}}})",
       "'#/properties/n': 'minimum' on a number may have at most 9 decimals (1e-10 has more)"},
      {R"({"type": "number", "minimum": 0.5, "maximum": 1e15})", "with 1 decimals, 'maximum' times 10^1 must be within +-10^15"},
      {R"({"type": "number", "exclusiveMinimum": 1, "maximum": 1})", "the bounds admit no number"},
      {R"({"type": "number", "maximum": -1e16})", "'maximum' must be a number within +-10^15"},
      {R"({"minimum": 0})", "need \"type\": \"integer\" or \"number\""},
      {R"({"type": "integer", "minimum": 3, "exclusiveMaximum": 3})", "the bounds admit no integer"},
      {R"({"type": "integer", "maximum": 1e16})", "'maximum' must be a number within +-10^15"},
      {R"({"type": "integer", "exclusiveMinimum": true})", "'exclusiveMinimum' must be a number"},
      {R"({"type": "integer", "enum": [1, 2], "minimum": 2})", "beside 'enum' or 'const'"},
      {R"({"type": "integer", "multipleOf": 0})", "'multipleOf' must be a positive number"},
      {R"({"type": "integer", "multipleOf": 5, "minimum": 1, "maximum": 4})", "the bounds admit no multiple of 'multipleOf'"},
      {R"({"type": "number", "multipleOf": 1e-10})", "'multipleOf' may have at most 9 decimals"},
      {R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})", "'uniqueItems' is supported on items that are an enum"},
      {R"({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": true, "minItems": 3})", "'minItems' with 'uniqueItems' admits nothing"},
      {R"({"type": "array", "items": {"enum": [1]}, "uniqueItems": 1})", "'uniqueItems' must be a boolean"},
      {[] {  // many patterns, each costly within its own bounds: the schema's budget refuses them together
         std::string s = R"({"type": "object", "properties": {)";
         for (int i = 0; i < 100; ++i) {  // (distinct: the same expression twice is compiled once)
           s += (i ? ", \"p" : "\"p") + std::to_string(i) + R"(": {"pattern": "(?:a?){1000}(?:b?){1000})" + std::to_string(i) + "\"}";
         }
         return s + "}}";
       }(),
       "the schema's patterns together take too much work to compile"},
      {R"({"type": "object", "properties": {"a/b~": {"not": {}}}})", "'#/properties/a~1b~0': 'not' is not supported"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'required' names \"b\""},
      {R"({"type": "object", "properties": {"a": {}}, "additionalProperties": 3})", "must be a boolean or a schema"},
      {R"({"type": "array", "prefixItems": {"type": "string"}})", "'prefixItems' must be a list of schemas"},
      {R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})", "'minItems' with 'items': false admits nothing"},
      {R"({"type": "array", "items": [{}, {"not": {}}]})", "'#/items/1': 'not' is not supported"},
      {R"({"type": "string", "enum": [1, 2]})", "no value of the schema's 'type'"},
      {R"({"type": "string", "minLength": 3, "maxLength": 2})", "'minLength' is more than 'maxLength'"},
      {R"({"type": "array", "minItems": -1})", "'minItems' must be a non-negative integer"},
      {R"(false)", "admits nothing"},
      {R"({"$ref": "#/$defs/missing"})", "names nothing in the document"},
      {R"({"$ref": "http://example.com/s.json"})", "not within the document"},
      {R"({"$ref": "#"})", "names only itself"},
      {R"({"anyOf": [{"$ref": "#"}]})", "names only itself"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})", "no finite document"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})", "'allOf' of more than one"},
      {R"({"type": "object", "anyOf": [{}]})", "'type' beside 'anyOf'"},
      {R"({"type": "strin"})", "'type' must be one of"},
      {R"({"minLength": 1, "minItems": 1})", "keywords of several types"},
      {R"({"anyOf": []})", "'anyOf' must be a non-empty array"},
      {R"({"foo": 1})", "'foo' is not supported"},
      {R"({"type": "object")", "not valid JSON"},
      {"{\"anyOf\": [" + [] {
         std::string list = "{}";
         for (int i = 0; i < 5000; ++i) list += ", {\"type\": \"null\"}";
         return list;
       }() + "]}",
       "more than 4096 subschemas"},
      {R"({"enum": [)" + std::string(200000, '[') + std::string(200000, ']') + "]}", "nests deeper than 128"},
      {R"({"description": "[[[[", "enum": [[[1]]]})", ""},  // brackets in strings do not count: it compiles
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<std::shared_ptr<const JsonSchema>> schema = JsonSchema::Compile(text);
    if (want.empty()) {
      EXPECT_TRUE(schema.ok()) << text << ": " << schema.status();
      continue;
    }
    ASSERT_FALSE(schema.ok()) << text.substr(0, 200);
    EXPECT_NE(schema.status().message().find(want), std::string::npos) << text << ": " << schema.status();
  }
  // Annotations, x- keywords and true pass.
  EXPECT_TRUE(JsonSchema::Compile(R"({"x-order": 1, "examples": [], "$comment": "c", "properties": {"a": true}})").ok());
}

// A vocabulary of all 256 bytes and multi-byte pieces: the mask of every state along documents is
// exactly the set of tokens whose bytes the state takes, cached; the constraint takes a whole document.
TEST(JsonSchemaGrammar, MasksAreTheTokensAStateTakes) {
  const testing::ByteVocabulary voc(
      {"{\"", "\":", "\",\"", "\"name", "name\":", "age", "\"age\":", "true", "null", "12", "-1", "1.", "e+", "},", "}}", "]}",
       "[{", "\xC3\xA9", "\"b\xC3\xA9\"", "\"a\"", ",\n", "tap", "\"type\":\"", "\"}",
       // Tokens longer than JsonVocabulary::kShortToken, whose bits a bounded count's mask sets afresh.
       std::string(35, 'a'), std::string(40, ' '), std::string(33, 'b') + "\"", "1," + std::string(33, '2'),
       std::string(34, 'a') + "\",\"l\":[", std::string(45, 'a')},
      /*padding=*/3);
  const std::vector<std::string>& tokens = voc.tokens;
  const int32_t ordinary = voc.ordinary, vocab = voc.vocab;
  const std::shared_ptr<JsonVocabulary>& v = voc.v;
  int states = 0;
  for (const auto& [index, text] : std::vector<std::pair<int, std::string>>{
           {0, "{\"name\":\"ab\",\"age\":12,\"tags\":[\"b\xC3\xA9\",1,null]}"},
           {1, R"({"thought":"x","action":{"type":"tap","x":1,"y":-1}})"},
           {4, "12"},
           {6, R"({"n":120,"p":12,"neg":-12,"f":999999,"z":0,"big":-999999999999991})"},  // bounded integers
           {9, R"({"t":[1080,"abc"],"p":["a",true,5,-2],"o":[null,"y"],"u":[12,"a",1,null,"ab"]})"},  // tuples, a set
           {10, R"({"t":1.0,"p":12.25,"d":-2.75,"r":0.0015,"q":10.2499,"m":95,"h":-2.75})"},  // bounded numbers
           {-1, "{\"s\":\"" + std::string(44, 'a') + "\",\"l\":[1,22,333" + [] {
              std::string items;
              for (int i = 0; i < 36; ++i) items += ",4";
              return items;
            }() + "]}"},
           {-2, R"(["a","b","c")" + [] {
              std::string items;
              for (int i = 0; i < 50; ++i) items += "," + std::to_string(i);
              return items;
            }() + "]"}}) {
    // -1: lengths and item counts near their bounds, where the long tokens' bits change. -2: a
    // tuple's prefix far below minItems, where each item's node depends on its exact place.
    const std::string bounded = R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 45},
        "l": {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 40}}, "required": ["s", "l"]})";
    const std::string far_prefix =
        R"({"type": "array", "prefixItems": [{"const": "a"}, {"const": "b"}, {"const": "c"}], "items": {"type": "integer"}, "minItems": 50})";
    std::shared_ptr<JsonSchemaGrammar> g =
        *JsonSchemaGrammar::Create(MustCompile(index == -1 ? bounded : index == -2 ? far_prefix : Schemas()[index]), v);
    SchemaState s = g->Start();
    for (size_t i = 0; i <= text.size(); ++i) {
      const std::shared_ptr<const std::vector<uint64_t>> mask = g->Allowed(s);
      for (int32_t id = 0; id < vocab; ++id) {
        SchemaState t = s;
        const bool takes = id < ordinary && t.Feed(tokens[static_cast<size_t>(id)]);
        ASSERT_EQ(MaskAllows(*mask, vocab, id), takes) << "after " << i << " bytes of " << text << ", token " << id;
      }
      EXPECT_EQ(*g->Allowed(s), *mask) << "again";
      ++states;
      if (i < text.size()) {
        ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i])));
      }
    }
    EXPECT_TRUE(s.Complete());
    std::unique_ptr<TokenConstraint> c = g->NewConstraint();
    for (const char ch : text) ASSERT_TRUE(c->Accept(static_cast<uint8_t>(ch)));
    EXPECT_TRUE(c->Complete());
  }
  EXPECT_GT(states, 80);
  // A key the vocabulary cannot write.
  std::vector<std::string> ascii(tokens.begin(), tokens.begin() + 128);
  std::shared_ptr<JsonVocabulary> narrow = *JsonVocabulary::Build(128, 128, [&](int32_t id, std::string* out) {
    *out = ascii[static_cast<size_t>(id)];
    return true;
  });
  absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> g = JsonSchemaGrammar::Create(MustCompile(Schemas()[0]), narrow);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("0xC3"), std::string::npos) << g.status();
}

// Inside a string's text the text tokens' bits come from sets by how many characters each writes
// (JsonVocabulary::Walk): near maxLength, on anyOf's paths of different bounds, after a partial
// character or an escape, each state's mask is still exactly the tokens it takes.
TEST(JsonSchemaGrammar, TextTokensAreCountedAgainstMaxLength) {
  const testing::ByteVocabulary voc({"ab", "abc", "abcd", "\xC3\xA9\xC3\xA9", "a\xC3", "\xA9" "b", "b\"", "\\n", "c\\u00e9d",
                                     "\"}", "\xE4\xB8\xAD\xE6\x96\x87", "x\x01", std::string(33, 'a'),
                                     std::string(34, 'a') + "\"", std::string(36, 'a')},
                                    /*padding=*/2);
  const std::vector<std::string>& tokens = voc.tokens;
  const int32_t ordinary = voc.ordinary, vocab = voc.vocab;
  const std::shared_ptr<JsonVocabulary>& v = voc.v;
  const std::string schema = R"({"type": "object", "properties": {
      "s": {"type": "string", "minLength": 2, "maxLength": 5},
      "e": {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "string", "minLength": 3, "maxLength": 40}]},
      "f": {"type": "string"}}, "required": ["s", "e", "f"]})";
  std::shared_ptr<JsonSchemaGrammar> g = *JsonSchemaGrammar::Create(MustCompile(schema), v);
  int shortcut = 0, near_bound = 0;
  for (const std::string& text : {std::string("{\"s\":\"ab\xC3\xA9" "c\",\"e\":\"x\\ny\",\"f\":\"\xE4\xB8\xAD\\u00e9\"}"),
                                  "{\"s\":\"abcde\",\"e\":\"" + std::string(38, 'a') + "\",\"f\":\"\"}"}) {
    SchemaState s = g->Start();
    for (size_t i = 0; i <= text.size(); ++i) {
      const std::optional<SchemaState::TextPlaces> places = s.InText();
      shortcut += places.has_value();
      near_bound += places.has_value() && std::all_of(places->begin(), places->end(), [](const SchemaState::TextPlace& p) {
        return p.room <= JsonVocabulary::kShortToken;
      });
      const std::shared_ptr<const std::vector<uint64_t>> mask = g->Allowed(s);
      EXPECT_EQ(g->Compute(s), v->WalkEveryToken(s)) << "after " << i << " bytes of " << text;
      for (int32_t id = 0; id < vocab; ++id) {
        SchemaState t = s;
        const bool takes = id < ordinary && t.Feed(tokens[static_cast<size_t>(id)]);
        ASSERT_EQ(MaskAllows(*mask, vocab, id), takes) << "after " << i << " bytes of " << text << ", token " << id;
      }
      if (i < text.size()) {
        ASSERT_TRUE(s.Feed(static_cast<uint8_t>(text[i]))) << i << " of " << text;
      }
    }
    EXPECT_TRUE(s.Complete());
  }
  EXPECT_GE(shortcut, 20);
  EXPECT_GE(near_bound, 10);
}

// The same over GLM-4's 151,329 tokens (read from ../shared; skipped without it): inside strings of
// JSON mode and of a schema (unbounded, two characters from maxLength, after half a character) the
// sets' masks are the masks of feeding every token.
TEST(JsonSchemaGrammar, TextTokenSetsOverGlm4sVocabularyAreTheWalksOwn) {
  const std::string dir = testing::SharedGlm4Tokenizer();
  if (dir.empty()) GTEST_SKIP() << "../shared/tokenizers/glm4 absent";
  absl::StatusOr<std::unique_ptr<glm::Tokenizer>> tokenizer = glm::Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::shared_ptr<JsonVocabulary> v = *JsonVocabulary::Build(**tokenizer);
  int shortcut = 0;
  for (const char* prefix : {"{\"", "{\"a\": \"Tap the ", "{\"a\": \"\xE7\x82\xB9", "{\"a\": \"x\\"}) {
    JsonState s;
    ASSERT_TRUE(s.Feed(prefix)) << prefix;
    shortcut += s.PlainStringRoom().has_value();
    ASSERT_EQ(v->Walk(s), v->WalkEveryToken(s)) << prefix;
  }
  std::shared_ptr<JsonSchemaGrammar> g = *JsonSchemaGrammar::Create(MustCompile(R"({"type": "object", "properties": {
      "thought": {"type": "string"}, "label": {"type": "string", "maxLength": 6}}, "required": ["thought", "label"]})"), v);
  for (const char* prefix : {"{\"thought\": \"", "{\"thought\": \"The screen \xE6\x98\xBE", "{\"thought\": \"\xE6\x98",
                             "{\"thought\": \"a\", \"label\": \"Tap", "{\"thought\": \"a\", \"label\": \"\xE7\x82\xB9\xE5\x87\xBB\xE5\x8F"}) {
    SchemaState s = g->Start();
    ASSERT_TRUE(s.Feed(prefix)) << prefix;
    shortcut += s.InText().has_value();
    ASSERT_EQ(g->Compute(s), v->WalkEveryToken(s)) << prefix;
  }
  // Strings with patterns (their text tokens from PatternTextTokens' tables), and a guided_regex.
  std::shared_ptr<JsonSchemaGrammar> p = *JsonSchemaGrammar::Create(MustCompile(R"({"type": "object", "properties": {
      "note": {"type": "string", "pattern": "ok", "maxLength": 40},
      "email": {"type": "string", "pattern": "^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$"},
      "word": {"type": "string", "pattern": "^[\\u4e00-\\u9fff]{1,4}$"}}, "required": ["note", "email", "word"]})"), v);
  for (const char* prefix : {"{\"note\": \"fine, o", "{\"note\": \"fine, ok, an", "{\"note\": \"ok\", \"email\": \"john.do",
                             "{\"note\": \"ok\", \"email\": \"a@b.co\", \"word\": \"\xE7\x82\xB9"}) {
    SchemaState s = p->Start();
    ASSERT_TRUE(s.Feed(prefix)) << prefix;
    shortcut += s.InText().has_value();
    ASSERT_EQ(p->Compute(s), v->WalkEveryToken(s)) << prefix;
  }
  std::shared_ptr<RegexGrammar> r = *RegexGrammar::Create(R"(<answer>do\(action="Tap", element=\[\d{1,4}, \d{1,4}\]\)</answer>|[^<]{0,20}\n?)", v);
  for (const char* prefix : {"", "<answer>do(action=\"Tap\", element=[1", "Tap the \xE7\x82"}) {
    RegexState s = r->Start();
    ASSERT_TRUE(s.Feed(prefix)) << prefix;
    shortcut += s.AtBoundary().has_value();
    ASSERT_EQ(r->Compute(s), v->WalkEveryToken(s)) << prefix;
  }
  EXPECT_EQ(shortcut, 3 + 3 + 4 + 2);
}

// On the engine, tiny-glm's ids 0-255 read as bytes: every answer that ended on eos is a document
// the schema validates, every other one a prefix of one, on both sampling paths and with
// speculative drafts alike.
TEST(JsonSchemaGrammar, EngineAnswersValidate) {
  testing::TinyGlm tiny;
  std::shared_ptr<JsonVocabulary> v = *JsonVocabulary::Build(256, 300, [](int32_t id, std::string* b) {
    *b = std::string(1, static_cast<char>(id));
    return true;
  });
  const Json root = Json::parse(Schemas()[1]);
  const Validator validator(root);
  std::shared_ptr<JsonSchemaGrammar> grammar = *JsonSchemaGrammar::Create(MustCompile(Schemas()[1]), v);
  std::vector<std::vector<int32_t>> first;
  for (const auto& [device_like, drafts] : std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {true, true}}) {
    CpuBackend backend(device_like);
    EngineOptions options;
    if (drafts) options.speculative = {4, 1, 3, 0};
    std::unique_ptr<Engine> engine = *Engine::Create(tiny.plan, backend, *tiny.weights, options);
    std::vector<int> ids;
    for (uint64_t seed = 0; seed < 10; ++seed) {
      Request r;
      r.prompt = {15, 292, 121, 86, 283, 147, 287};
      r.max_new_tokens = 96;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = seed;
      r.sampling.logit_bias = {{1, 100.0f}, {'"', 4.0f}, {'}', 3.0f}};  // close strings and objects soon; eos when it may
      r.constraint = [grammar] { return grammar->NewConstraint(); };
      ids.push_back(*engine->Submit(r));
    }
    while (engine->HasWork()) ASSERT_TRUE(engine->Step().ok());
    int whole = 0;
    std::vector<std::vector<int32_t>> answers;
    for (const int id : ids) {
      std::vector<int32_t> tokens = engine->new_tokens(id);
      answers.push_back(tokens);
      const bool ended = engine->finish_reason(id) == FinishReason::kEos;
      if (ended) tokens.pop_back();
      std::string text;
      for (const int32_t t : tokens) text += static_cast<char>(t);
      SchemaState s = grammar->Start();
      ASSERT_TRUE(s.Feed(text)) << text;
      if (ended) {
        const std::optional<Json> parsed = Parse(text);
        ASSERT_TRUE(parsed && validator.Valid(*parsed)) << text;
        ++whole;
      }
    }
    EXPECT_GT(whole, 3);
    EXPECT_EQ(engine->spec_drafts() > 0, drafts);
    if (first.empty()) {
      first = answers;
    } else {
      EXPECT_EQ(answers, first);
    }
  }
}

}  // namespace
}  // namespace ag::runtime
