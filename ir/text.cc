#include "ir/text.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/status_macros.h"
#include "ir/verifier.h"

namespace ag::ir {
namespace {

char Sigil(ValueKind kind) {
  switch (kind) {
    case ValueKind::kParam:
      return '@';
    case ValueKind::kState:
      return '$';
    default:
      return '%';
  }
}

std::string Ref(const Graph& g, ValueId v) { return absl::StrCat(std::string(1, Sigil(g.value(v).kind)), g.value(v).name); }

std::string AttrsToString(const Attrs& attrs) {
  if (attrs.empty()) return "";
  return absl::StrCat(" {", absl::StrJoin(attrs, ", ", [](std::string* out, const auto& kv) {
                        absl::StrAppend(out, kv.first, "=", AttrValueToString(kv.second));
                      }),
                      "}");
}

}  // namespace

std::string PrintGraph(const Graph& g) {
  std::string out = absl::StrCat("graph ", g.name());
  if (!g.symbol_bounds().empty()) {
    std::vector<std::pair<std::string, int64_t>> bounds(g.symbol_bounds().begin(), g.symbol_bounds().end());
    std::sort(bounds.begin(), bounds.end());
    absl::StrAppend(&out, " (", absl::StrJoin(bounds, ", ", [](std::string* o, const auto& b) {
                      absl::StrAppend(o, b.first, "<=", b.second);
                    }),
                    ")");
  }
  if (g.tp() != 1) absl::StrAppend(&out, " tp=", g.tp());
  if (g.arena_bytes() >= 0) absl::StrAppend(&out, " arena=", g.arena_bytes());
  out += " {\n";
  for (ValueKind kind : {ValueKind::kParam, ValueKind::kInput, ValueKind::kState}) {
    for (ValueId v : g.ValuesOfKind(kind)) {
      const Value& value = g.value(v);
      const char* word = kind == ValueKind::kParam ? "param" : kind == ValueKind::kInput ? "input" : "state";
      absl::StrAppend(&out, "  ", word, " ", Ref(g, v), " : ", value.type.ToString());
      if (!value.concat_of.empty()) {
        absl::StrAppend(&out, " = concat(", absl::StrJoin(value.concat_of, ", ", [](std::string* o, const ParamPart& p) {
                          absl::StrAppend(o, "@", p.name);
                          if (p.shard.sharded()) absl::StrAppend(o, " ", p.shard.ToString());
                          if (p.quant.quantized()) absl::StrAppend(o, " as ", p.quant.ToString());
                        }),
                        ")");
      }
      out += "\n";
    }
  }
  for (const Node& node : g.nodes()) {
    out += "  ";
    if (!node.results.empty()) {
      absl::StrAppend(&out, absl::StrJoin(node.results, ", ", [&](std::string* o, ValueId v) { o->append(Ref(g, v)); }),
                      " = ");
    }
    absl::StrAppend(&out, OpName(node.op), "(",
                    absl::StrJoin(node.operands, ", ", [&](std::string* o, ValueId v) { o->append(Ref(g, v)); }), ")",
                    AttrsToString(node.attrs));
    if (!node.results.empty()) {
      absl::StrAppend(&out, " : ", absl::StrJoin(node.results, ", ", [&](std::string* o, ValueId v) {
                        absl::StrAppend(o, g.value(v).type.ToString());
                        if (g.value(v).arena_offset >= 0) absl::StrAppend(o, " at ", g.value(v).arena_offset);
                      }));
    }
    if (node.layer >= 0) absl::StrAppend(&out, " loc(", node.layer, ")");
    out += "\n";
  }
  if (!g.outputs().empty()) {
    absl::StrAppend(&out, "  output ",
                    absl::StrJoin(g.outputs(), ", ", [&](std::string* o, ValueId v) { o->append(Ref(g, v)); }), "\n");
  }
  out += "}\n";
  return out;
}

namespace {

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<Graph> Parse() {
    RETURN_IF_ERROR(ExpectWord("graph"));
    ASSIGN_OR_RETURN(std::string name, Identifier());
    Graph g(name);
    if (Consume('(')) {
      do {
        ASSIGN_OR_RETURN(std::string symbol, Identifier());
        RETURN_IF_ERROR(Expect('<'));
        RETURN_IF_ERROR(Expect('='));
        ASSIGN_OR_RETURN(int64_t bound, Integer());
        g.set_symbol_bound(symbol, bound);
      } while (Consume(','));
      RETURN_IF_ERROR(Expect(')'));
    }
    if (PeekWord("tp")) {
      RETURN_IF_ERROR(ExpectWord("tp"));
      RETURN_IF_ERROR(Expect('='));
      ASSIGN_OR_RETURN(int64_t tp, Integer());
      if (tp < 1 || tp > kMaxTensorParallel) return Error(absl::StrCat("tp must be in [1, ", kMaxTensorParallel, "]"));
      g.set_tp(static_cast<int32_t>(tp));
    }
    if (PeekWord("arena")) {
      RETURN_IF_ERROR(ExpectWord("arena"));
      RETURN_IF_ERROR(Expect('='));
      ASSIGN_OR_RETURN(int64_t bytes, Integer());
      g.set_arena_bytes(bytes);
    }
    RETURN_IF_ERROR(Expect('{'));
    while (!Consume('}')) {
      if (AtEnd()) return Error("unexpected end of text, expected '}'");
      RETURN_IF_ERROR(Statement(g));
    }
    SkipSpace();
    if (!AtEnd()) return Error("text after the closing '}'");
    absl::Status verified = Verify(g);
    if (!verified.ok()) return absl::InvalidArgumentError(std::string(verified.message()));
    return g;
  }

 private:
  absl::Status Statement(Graph& g) {
    if (PeekWord("param") || PeekWord("input") || PeekWord("state")) return Declaration(g);
    if (PeekWord("output")) {
      RETURN_IF_ERROR(ExpectWord("output"));
      do {
        ASSIGN_OR_RETURN(ValueId v, Reference(g));
        g.AddOutput(v);
      } while (Consume(','));
      return absl::OkStatus();
    }
    return NodeStatement(g);
  }

  absl::Status Declaration(Graph& g) {
    ASSIGN_OR_RETURN(std::string word, Identifier());
    const char sigil = word == "param" ? '@' : word == "input" ? '%' : '$';
    RETURN_IF_ERROR(Expect(sigil));
    ASSIGN_OR_RETURN(std::string name, ValueName());
    RETURN_IF_ERROR(Expect(':'));
    ASSIGN_OR_RETURN(TensorType type, Type());
    absl::StatusOr<ValueId> id;
    if (word == "param") {
      std::vector<ParamPart> parts;
      if (Consume('=')) {
        RETURN_IF_ERROR(ExpectWord("concat"));
        RETURN_IF_ERROR(Expect('('));
        do {
          RETURN_IF_ERROR(Expect('@'));
          ParamPart part;
          ASSIGN_OR_RETURN(part.name, ValueName());
          if (PeekWord("rows") || PeekWord("cols")) {
            ASSIGN_OR_RETURN(std::string axis, Identifier());
            RETURN_IF_ERROR(Expect('/'));
            ASSIGN_OR_RETURN(int64_t n, Integer());
            if (n < 1 || n > kMaxTensorParallel) {
              return Error(absl::StrCat("shard parts must be in [1, ", kMaxTensorParallel, "]"));
            }
            part.shard = {axis == "rows" ? 0 : 1, static_cast<int32_t>(n)};
          }
          if (PeekWord("as")) {
            RETURN_IF_ERROR(ExpectWord("as"));
            ASSIGN_OR_RETURN(std::string format, QuantWord());
            absl::StatusOr<QuantFormat> quant = ParseQuantFormat(format);
            if (!quant.ok()) return Error(quant.status().message());
            part.quant = *quant;
          }
          parts.push_back(std::move(part));
        } while (Consume(','));
        RETURN_IF_ERROR(Expect(')'));
      }
      id = g.AddParam(name, type, std::move(parts));
    } else if (word == "input") {
      id = g.AddInput(name, type);
    } else {
      id = g.AddState(name, type);
    }
    if (!id.ok()) return Error(id.status().message());
    return absl::OkStatus();
  }

  absl::Status NodeStatement(Graph& g) {
    std::vector<std::string> result_names;
    if (Peek() == '%') {
      do {
        RETURN_IF_ERROR(Expect('%'));
        ASSIGN_OR_RETURN(std::string name, ValueName());
        result_names.push_back(std::move(name));
      } while (Consume(','));
      RETURN_IF_ERROR(Expect('='));
    }
    ASSIGN_OR_RETURN(std::string op_name, Identifier());
    std::optional<OpId> op = ParseOpName(op_name);
    if (!op) return Error(absl::StrCat("unknown op '", op_name, "'"));
    RETURN_IF_ERROR(Expect('('));
    std::vector<ValueId> operands;
    if (!Consume(')')) {
      do {
        ASSIGN_OR_RETURN(ValueId v, Reference(g));
        operands.push_back(v);
      } while (Consume(','));
      RETURN_IF_ERROR(Expect(')'));
    }
    Attrs attrs;
    if (Consume('{')) {
      do {
        ASSIGN_OR_RETURN(std::string key, Identifier());
        RETURN_IF_ERROR(Expect('='));
        ASSIGN_OR_RETURN(AttrValue value, AttributeValue());
        attrs[key] = std::move(value);
      } while (Consume(','));
      RETURN_IF_ERROR(Expect('}'));
    }
    std::vector<TensorType> types;
    std::vector<int64_t> offsets;
    if (Consume(':')) {
      do {
        ASSIGN_OR_RETURN(TensorType t, Type());
        types.push_back(std::move(t));
        int64_t offset = -1;
        if (PeekWord("at")) {
          RETURN_IF_ERROR(ExpectWord("at"));
          ASSIGN_OR_RETURN(offset, Integer());
        }
        offsets.push_back(offset);
      } while (Consume(','));
    }
    int32_t layer = -1;
    if (PeekWord("loc")) {
      RETURN_IF_ERROR(ExpectWord("loc"));
      RETURN_IF_ERROR(Expect('('));
      ASSIGN_OR_RETURN(int64_t l, Integer());
      layer = static_cast<int32_t>(l);
      RETURN_IF_ERROR(Expect(')'));
    }
    if (types.size() != result_names.size()) {
      return Error(absl::StrCat(op_name, ": ", result_names.size(), " results but ", types.size(), " types"));
    }
    absl::StatusOr<std::vector<ValueId>> results =
        g.AddNode(*op, std::move(operands), std::move(attrs), layer, std::move(result_names));
    if (!results.ok()) return Error(results.status().message());
    for (size_t i = 0; i < results->size(); ++i) {
      Value& v = g.mutable_value((*results)[i]);
      if (!(v.type == types[i])) {
        return Error(absl::StrCat("%", v.name, " is written ", types[i].ToString(), " but ", op_name, " gives ",
                                  v.type.ToString()));
      }
      v.arena_offset = offsets[i];
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ValueId> Reference(const Graph& g) {
    SkipSpace();
    const char sigil = Peek();
    if (sigil != '%' && sigil != '@' && sigil != '$') return Error("expected a value (%name, @name or $name)");
    ++pos_;
    ASSIGN_OR_RETURN(std::string name, ValueName());
    const ValueId v = g.FindValue(name);
    if (v == kNoValue) return Error(absl::StrCat("unknown value ", std::string(1, sigil), name));
    if (Sigil(g.value(v).kind) != sigil) return Error(absl::StrCat("wrong sigil for ", name));
    return v;
  }

  absl::StatusOr<TensorType> Type() {
    ASSIGN_OR_RETURN(std::string dtype_name, Identifier());
    std::optional<DType> dtype = ParseDType(dtype_name);
    if (!dtype) return Error(absl::StrCat("unknown dtype '", dtype_name, "'"));
    TensorType t{*dtype, {}};
    RETURN_IF_ERROR(Expect('['));
    if (Consume(']')) return t;
    do {
      SkipSpace();
      if (std::isdigit(static_cast<unsigned char>(Peek()))) {
        ASSIGN_OR_RETURN(int64_t v, Integer());
        t.shape.emplace_back(v);
      } else {
        ASSIGN_OR_RETURN(std::string symbol, Identifier());
        int64_t offset = 0;
        if (Peek() == '+' || Peek() == '-') {
          const bool negative = Peek() == '-';
          ++pos_;
          ASSIGN_OR_RETURN(offset, Integer());
          if (negative) offset = -offset;
        }
        t.shape.push_back(Dim::Sym(symbol, offset));
      }
    } while (Consume(','));
    RETURN_IF_ERROR(Expect(']'));
    return t;
  }

  absl::StatusOr<AttrValue> AttributeValue() {
    SkipSpace();
    if (Consume('"')) {
      const size_t end = text_.find('"', pos_);
      if (end == absl::string_view::npos) return Error("unterminated string");
      std::string s(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
      return AttrValue(std::move(s));
    }
    if (Consume('[')) {
      std::vector<int64_t> list;
      if (!Consume(']')) {
        do {
          ASSIGN_OR_RETURN(int64_t v, Integer());
          list.push_back(v);
        } while (Consume(','));
        RETURN_IF_ERROR(Expect(']'));
      }
      return AttrValue(std::move(list));
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
                                   text_[pos_] == '-' || text_[pos_] == '+')) {
      ++pos_;
    }
    const std::string token(text_.substr(start, pos_ - start));
    if (token.empty()) return Error("expected an attribute value");
    if (token.find_first_of(".eEni") == std::string::npos) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
      if (ec != std::errc() || end != token.data() + token.size()) return Error("bad integer '" + token + "'");
      return AttrValue(v);
    }
    char* end = nullptr;
    const double d = std::strtod(token.c_str(), &end);
    if (end != token.c_str() + token.size()) return Error("bad number '" + token + "'");
    return AttrValue(d);
  }

  absl::StatusOr<int64_t> Integer() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, v);
    if (start == pos_ || ec != std::errc()) return Error("expected an integer");
    return v;
  }

  absl::StatusOr<std::string> Identifier() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    if (start == pos_) return Error("expected a name");
    return std::string(text_.substr(start, pos_ - start));
  }

  // A weight format: int4:g128:asym.
  absl::StatusOr<std::string> QuantWord() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == ':')) {
      ++pos_;
    }
    if (start == pos_) return Error("expected a weight format");
    return std::string(text_.substr(start, pos_ - start));
  }

  // Value names may contain dots: model.layers.0.input_layernorm.weight.
  absl::StatusOr<std::string> ValueName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
                                   text_[pos_] == '.')) {
      ++pos_;
    }
    if (start == pos_) return Error("expected a value name");
    return std::string(text_.substr(start, pos_ - start));
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ >= text_.size();
  }
  char Peek() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  absl::Status Expect(char c) {
    if (Consume(c)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", std::string(1, c), "'"));
  }
  bool PeekWord(absl::string_view word) {
    SkipSpace();
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t after = pos_ + word.size();
    return after >= text_.size() || !(std::isalnum(static_cast<unsigned char>(text_[after])) || text_[after] == '_');
  }
  absl::Status ExpectWord(absl::string_view word) {
    if (!PeekWord(word)) return Error(absl::StrCat("expected '", word, "'"));
    pos_ += word.size();
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view message) const {
    const int line = 1 + static_cast<int>(std::count(text_.begin(), text_.begin() + static_cast<std::ptrdiff_t>(pos_), '\n'));
    return absl::InvalidArgumentError(absl::StrCat("IR text line ", line, ": ", message));
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Graph> ParseGraph(absl::string_view text) { return Parser(text).Parse(); }

}  // namespace ag::ir
