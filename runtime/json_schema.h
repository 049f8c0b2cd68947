// Structured output by JSON Schema (OpenAI's response_format {"type": "json_schema"}): a schema
// compiled to a small grammar of nodes, and the byte automaton that walks it, so that the answer is
// one JSON document the schema validates -- enforced token by token like JSON mode.
//
// What it takes (and how it narrows what a validator would accept):
//   type (one or a list), properties, required, additionalProperties, items, prefixItems (and the
//   older items-as-a-list with additionalItems), minItems, maxItems, uniqueItems (on items that are an
//   enum or const of at most 32 values: pydantic's Set[Literal[...]]),
//   minLength, maxLength, pattern (runtime/json_pattern.h: an ECMA-262 subset), minimum, maximum,
//   exclusiveMinimum, exclusiveMaximum (bounds within
//   +-10^15; on an integer a fractional bound rounds inward; on a number up to 9 decimals, the bound
//   times 10^decimals within +-10^15 -- a bounded number is written without an exponent),
//   multipleOf on integers and numbers (at most 9 decimals; such a value is kept within +-10^15),
//   enum, const, anyOf, oneOf (as anyOf: alternatives are tried together),
//   allOf of one schema, $ref within the document (#, #/$defs/..., #/definitions/..., recursion too),
//   $defs/definitions, format on a string (date-time, time, date, duration, email, hostname, ipv4,
//   ipv6, uuid enforced as whole-match patterns, runtime/string_formats.h, beside a pattern too;
//   other formats are annotations), and annotations (title, description, default, examples, ...).
// Objects write their properties in the schema's order, each at most once, optional ones skippable;
// an object with properties takes no others (OpenAI's strict mode: additionalProperties false, and
// valid whatever else additionalProperties allows); an
// object without properties takes any keys, their values `additionalProperties` (any JSON by
// default). Whitespace between tokens is none, one space, or a newline and up to 20 spaces or tabs
// (a model that keeps writing whitespace still ends). Integers are written without fraction or exponent; strings escape no surrogate
// (\uD800-\uDFFF: a character past the BMP is written as UTF-8), so a character is one of
// minLength/maxLength's; enum and const values are written as compact JSON.
// A string with a pattern or format takes no \u escape (its characters are written as UTF-8, escapes of one
// character as usual).
// Anything else that asserts (not, if/then, uniqueItems on other items, ...) is an
// error naming where it is: refused, never ignored into an answer the schema does not validate.
#ifndef AUTOGLM_RUNTIME_JSON_SCHEMA_H_
#define AUTOGLM_RUNTIME_JSON_SCHEMA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/constraint.h"
#include "runtime/json_constraint.h"
#include "runtime/json_pattern.h"
#include "runtime/pattern_text_tokens.h"

namespace ag::runtime {

class JsonSchema {
 public:
  static constexpr uint32_t kUnbounded = UINT32_MAX;
  static constexpr int64_t kMaxBound = 1'000'000'000'000'000;  // |minimum| and the others, at most
  // (a number's bounds with decimals: at most kMaxScale of them, and each times 10^decimals within kMaxBound)
  static constexpr int kMaxScale = 9;
  static constexpr size_t kMaxUnique = 32;  // uniqueItems: the values an item may take (a bit each in the frame)
  static constexpr size_t kMaxDepth = 64;  // frames open at once: nested values, and the document's own
  static constexpr size_t kMaxNodes = 4096;
  static constexpr size_t kMaxTextNesting = 128;  // arrays and objects in the schema's text  // a bigger schema is refused (compiling costs nodes squared at worst)

  struct Property {
    std::string key;  // the name as JSON text, quotes included
    int32_t node = -1;
    bool required = false;
  };
  struct Node {
    enum Kind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiterals, kAnyOf, kRef };
    Kind kind = kLiterals;
    std::vector<Property> properties;   // kObject
    int32_t values = -1;                // kObject without properties: every value's node (-1: no keys at all)
    int32_t items = -1;                 // kArray: the items' node (after `prefix`)
    std::vector<int32_t> prefix;        // kArray: the first items' nodes, one each (prefixItems: a tuple)
    bool unique = false;                // kArray: uniqueItems (its items one literals node, at most kMaxUnique values)
    int32_t Item(uint32_t index) const { return index < prefix.size() ? prefix[index] : items; }
    uint32_t min = 0, max = kUnbounded;  // kArray: items; kString: characters
    std::vector<std::string> literals;  // kLiterals: each value as compact JSON
    std::vector<int32_t> alternatives;  // kAnyOf: none of them an anyOf
    int32_t target = -1;                // kRef, while compiling only
    uint32_t depth = 0;                 // frames the node's shortest document opens
    int64_t lo = INT64_MIN, hi = INT64_MAX;  // kInteger: the values allowed (from minimum, maximum, ...);
                                             // kNumber: the bounds times 10^scale,
    bool lo_open = false, hi_open = false;   // kNumber: exclusive ones
    uint8_t scale = 0;                       // kNumber: the bounds' decimals (at most kMaxScale)
    int64_t multiple = 0;                    // kInteger, kNumber: values are its multiples (in the bounds'
                                             // units; then bounded within +-kMaxBound); 0: any
    int32_t pattern = -1;  // kString: its pattern's DFA in patterns() (its lengths folded in: min 0, max kUnbounded here)
    bool bounded() const { return lo != INT64_MIN || hi != INT64_MAX; }
  };

  // The schema as JSON text (its properties' order is the answer's). An unsupported or unsatisfiable
  // schema is an InvalidArgument naming the place, as a JSON pointer, and the keyword.
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Compile(absl::string_view text);
  // The answer is exactly one of `choices`, as text (vLLM's guided_choice): a grammar of one
  // literals node, its strings taken as they are. Each must be non-empty.
  static absl::StatusOr<std::shared_ptr<const JsonSchema>> Choice(const std::vector<std::string>& choices);

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }
  int32_t key_node() const { return key_node_; }  // a plain string: the keys of an object without properties
  const PatternDfa& pattern(int32_t i) const { return *patterns_[static_cast<size_t>(i)]; }
  size_t patterns() const { return patterns_.size(); }

 private:
  friend class SchemaCompiler;
  std::vector<Node> nodes_;
  std::vector<std::shared_ptr<const PatternDfa>> patterns_;
  int32_t root_ = -1;
  int32_t key_node_ = -1;
};

// Where a byte stream is in the documents a schema validates: the set of paths still open (anyOf's
// alternatives and an object's candidate keys are followed side by side), each a stack of frames.
class SchemaState {
 public:
  explicit SchemaState(const JsonSchema* schema);  // the schema outlives the state
  SchemaState() = default;                         // for arrays of states; Feed fails until assigned

  bool Feed(uint8_t c);
  bool Feed(absl::string_view bytes);
  // A document is whole: the sequence may end here.
  bool Complete() const;
  // Everything that decides which tokens of up to `horizon` bytes may follow, as bytes (the mask
  // cache's key): a length or item count enters as its distances to minLength/maxLength or
  // minItems/maxItems, each capped past the horizon, so that a long bounded string is a few keys,
  // not one a character. `*counted`: some count was so merged (tokens longer than the horizon then
  // need their bits afresh: JsonVocabulary::RedoLongTokens).
  std::string Key(uint32_t horizon, bool* counted) const;
  // Where a path is inside a string's text at a character boundary: a plain string's room (how many
  // characters may still come, UINT32_MAX: no maxLength), or a pattern's and its DFA state.
  struct TextPlace {
    int32_t pattern = -1;  // JsonSchema::pattern(i); -1: none
    uint32_t state = 0;    // the pattern's DFA state
    uint32_t room = 0;     // no pattern: the characters that may still come
  };
  using TextPlaces = absl::InlinedVector<TextPlace, 2>;
  // Every path's place when each is inside a string's text at a character boundary (then a mask takes
  // the text tokens from sets and pattern tables instead of feeding them: JsonSchemaGrammar::Compute).
  // Empty otherwise.
  std::optional<TextPlaces> InText() const;

  // Readings of the text followed at once. A schema whose alternatives stay ambiguous for longer (a
  // hostile one's) is followed along the first of them: narrower, never stuck, and a mask never
  // costs more than this many times a plain one's.
  static constexpr size_t kMaxPaths = 32;

  struct Frame {
    int32_t node = -1;  // -1: the document itself
    uint8_t phase = 0;
    uint8_t left = 0;   // string: UTF-8 continuation bytes or hex digits owed; object, array: whitespace so far
    uint8_t lo = 0x80, hi = 0xBF;  // string: the next continuation byte's range
    uint32_t count = 0;  // object: the property; array: items, string: characters (both saturated); literals: which
    uint32_t pos = 0;    // a key's or literal's next byte; string: in \uD, the escape may be a surrogate
                         // (a bounded integer or number: its integer part's value in count and pos, its
                         // sign in left; a bounded number's hi: 1 once its fraction has a digit not 0)
    // (a string with a pattern: pos is its DFA's state, count the bits of the UTF-8 character
    // being written)
    bool operator==(const Frame&) const = default;
  };
  using Path = absl::InlinedVector<Frame, 8>;
  using Paths = absl::InlinedVector<Path, 2>;

 private:
  void Step(Path& p, uint8_t c, Paths& out) const;
  void StepObject(Path& p, uint8_t c, Paths& out) const;
  void StepArray(Path& p, uint8_t c, Paths& out) const;
  void StepString(Path& p, uint8_t c, Paths& out) const;
  void StepPatternString(Path& p, uint8_t c, Paths& out) const;
  void StepNumber(Path& p, uint8_t c, Paths& out) const;
  void Enter(Path& p, int32_t node, uint8_t c, Paths& out) const;
  void Finish(Path& p, Paths& out) const;
  bool Fits(const Path& p, int32_t node) const;
  static void ChildDone(Path& p, const JsonSchema& schema);
  bool PathComplete(const Path& p) const;

  const JsonSchema* schema_ = nullptr;
  Paths paths_;
};

// A compiled schema over a vocabulary, with the masks of the states met so far. Thread-safe.
class JsonSchemaGrammar : public std::enable_shared_from_this<JsonSchemaGrammar> {
 public:
  // Fails when the vocabulary cannot write some byte the schema's keys or literals need.
  static absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> Create(std::shared_ptr<const JsonSchema> schema,
                                                                   std::shared_ptr<JsonVocabulary> vocabulary);
  Mask Allowed(const SchemaState& state);
  // A state's mask computed afresh (what Allowed caches).
  std::vector<uint64_t> Compute(const SchemaState& state);
  SchemaState Start() const { return SchemaState(schema_.get()); }
  const JsonVocabulary& vocabulary() const { return *vocabulary_; }
  // A fresh constraint (a request's n choices: one each).
  std::unique_ptr<TokenConstraint> NewConstraint();

  JsonSchemaGrammar(std::shared_ptr<const JsonSchema> schema, std::shared_ptr<JsonVocabulary> vocabulary)
      : schema_(std::move(schema)), vocabulary_(std::move(vocabulary)), pattern_tokens_(schema_->patterns()) {}

 private:
  std::shared_ptr<const JsonSchema> schema_;
  std::shared_ptr<JsonVocabulary> vocabulary_;
  MaskCache masks_{JsonVocabulary::kMaxCachedMasks};
  PatternTextTokenTables pattern_tokens_;
};

// The grammars of the schemas met so far, by schema text, over one vocabulary (a client sends the
// same schema with every request: it is compiled, and its masks computed, once). Thread-safe.
// Each grammar keeps up to kMaxCachedMasks masks of vocab/8 bytes (19 KB at GLM-4's vocabulary):
// 16 grammars hold at most ~80 MB, however many schemas clients send.
class JsonSchemaGrammars {
 public:
  explicit JsonSchemaGrammars(std::shared_ptr<JsonVocabulary> vocabulary, size_t capacity = 16);
  // The schema's grammar, compiled now if it is not cached; a schema that does not compile is an error each time.
  absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> Get(const std::string& schema_text);
  // The grammar of JsonSchema::Choice, cached the same way.
  absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> GetChoice(const std::vector<std::string>& choices);

 private:
  absl::StatusOr<std::shared_ptr<JsonSchemaGrammar>> Build(absl::StatusOr<std::shared_ptr<const JsonSchema>> schema) const;

  std::shared_ptr<JsonVocabulary> vocabulary_;
  LruCache<std::shared_ptr<JsonSchemaGrammar>> grammars_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_JSON_SCHEMA_H_
