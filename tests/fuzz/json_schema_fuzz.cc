// Fuzz target: the JSON Schema compiler and its automaton (runtime/json_schema.h). The input is a
// schema, a NUL byte, then bytes fed to the compiled schema's automaton; a byte it refuses is
// skipped, so the walk goes deep. A schema compiles or is refused with a message. Whenever the
// text taken so far is whole, it is valid JSON (checked where it holds no e or E and no run of 300
// digits: a number past a double's range is JSON the reference refuses), and wherever the walk stops the automaton is not
// stuck: some byte continues it, or it is whole. The walk is also fed as a forced tool call's
// arguments, which must agree with it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "runtime/json_schema.h"
#include "runtime/tool_call_grammar.h"

namespace {

const std::vector<std::string>& Tokens() {
  static const auto* const kTokens = [] {
    auto* t = new std::vector<std::string>;
    for (int b = 0; b < 256; ++b) t->push_back(std::string(1, static_cast<char>(b)));
    for (const char* piece : {"\":", "\",\"", "true", "null", "12", "[{", "}]", "\\u00"}) t->push_back(piece);
    for (const char c : std::string("a 1,\"")) t->push_back(std::string(33 + c % 7, c));  // long runs
    t->push_back(std::string(40, 'a') + "\"");
    // Text tokens of several characters and near misses (JsonVocabulary::Walk's sets inside strings,
    // PatternTextTokens' tables inside a pattern's): first parts of characters, the line separator, DEL.
    for (const char* piece : {"\xC3\xA9\xC3\xA9", "ab\xE4\xB8", "x\x7F", "a\tb", "\xA9z", "\xED\xA0\x80", "bc\\n",
                              "\xC3", "\xF0\x9F\x98", "\xE2\x80\xA8", "\x7F"}) {
      t->push_back(piece);
    }
    t->push_back("\xE4\xB8\xAD" + std::string(34, 'q'));
    return t;
  }();
  return *kTokens;
}

std::shared_ptr<ag::runtime::JsonVocabulary> Vocabulary() {
  static const auto vocabulary = *ag::runtime::JsonVocabulary::Build(
      static_cast<int32_t>(Tokens().size()), static_cast<int32_t>(Tokens().size()), [](int32_t id, std::string* bytes) {
        *bytes = Tokens()[static_cast<size_t>(id)];
        return true;
      });
  return vocabulary;
}

bool InDoubleRange(const std::string& text) {
  size_t digits = 0;
  for (const char c : text) {
    if (c == 'e' || c == 'E') return false;
    digits = c >= '0' && c <= '9' ? digits + 1 : 0;
    if (digits >= 300) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const absl::StatusOr<std::shared_ptr<const ag::runtime::JsonSchema>> schema =
      ag::runtime::JsonSchema::Compile(input.substr(0, nul));
  if (!schema.ok()) {
    if (schema.status().message().empty()) __builtin_trap();
    return 0;
  }
  if (nul == absl::string_view::npos) return 0;
  ag::runtime::SchemaState state(schema->get());
  std::string written;
  for (const char c : input.substr(nul + 1)) {
    ag::runtime::SchemaState next = state;
    if (!next.Feed(static_cast<uint8_t>(c))) continue;
    state = next;
    written += c;
    if (state.Complete() && InDoubleRange(written) && !nlohmann::json::accept(written)) {
      __builtin_trap();
    }
  }
  absl::StatusOr<std::shared_ptr<ag::runtime::JsonSchemaGrammar>> grammar =
      ag::runtime::JsonSchemaGrammar::Create(*schema, Vocabulary());
  if (grammar.ok()) {
    const ag::runtime::Mask mask = (*grammar)->Allowed(state);
    for (int32_t id = 0; id < static_cast<int32_t>(Tokens().size()); ++id) {
      ag::runtime::SchemaState next = state;
      if (ag::runtime::MaskAllows(*mask, static_cast<int32_t>(Tokens().size()), id) != next.Feed(Tokens()[static_cast<size_t>(id)])) {
        __builtin_trap();
      }
    }
    // The same walk as a forced tool call's arguments (runtime/tool_call_grammar.h): after "fn\n" it
    // is the schema's state and mask; before, a mask is exactly the tokens the name's state takes.
    absl::StatusOr<std::shared_ptr<ag::runtime::ToolCallGrammar>> call =
        ag::runtime::ToolCallGrammar::Create({{"f", *grammar}, {"fn", *grammar}}, Vocabulary());
    if (!call.ok()) __builtin_trap();
    ag::runtime::ToolCallState named = (*call)->Start();
    if (!named.Feed("f")) __builtin_trap();
    const ag::runtime::Mask name_mask = (*call)->Allowed(named);
    for (int32_t id = 0; id < static_cast<int32_t>(Tokens().size()); ++id) {
      ag::runtime::ToolCallState next = named;
      if (ag::runtime::MaskAllows(*name_mask, static_cast<int32_t>(Tokens().size()), id) != next.Feed(Tokens()[static_cast<size_t>(id)])) {
        __builtin_trap();
      }
    }
    if (!named.Feed("n\n") || !named.Feed(written) || named.Complete() != state.Complete() ||
        *(*call)->Allowed(named) != *mask) {
      __builtin_trap();
    }
    // An optional call ("auto"): the same after " fn \n"; after a first line that is no name, the
    // text is free -- released, whole, every ordinary token allowed -- whatever follows.
    absl::StatusOr<std::shared_ptr<ag::runtime::ToolCallGrammar>> optional = ag::runtime::ToolCallGrammar::Create(
        {{"f", *grammar}, {"fn", *grammar}}, Vocabulary(), ag::runtime::ToolCallGrammar::Call::kOptional);
    if (!optional.ok()) __builtin_trap();
    ag::runtime::ToolCallState spaced = (*optional)->Start(), reply = (*optional)->Start();
    if (!spaced.Feed(" fn \n") || !spaced.Feed(written) || spaced.Released() || spaced.Complete() != state.Complete() ||
        *(*optional)->Allowed(spaced) != *mask) {
      __builtin_trap();
    }
    if (!reply.Feed("fx") || !reply.Feed(written) || !reply.Released() || !reply.Complete()) __builtin_trap();
    const ag::runtime::Mask free = (*optional)->Allowed(reply);
    for (int32_t id = 0; id < static_cast<int32_t>(Tokens().size()); ++id) {
      if (!ag::runtime::MaskAllows(*free, static_cast<int32_t>(Tokens().size()), id)) __builtin_trap();
    }
  }
  bool continues = state.Complete();
  for (int b = 0; b < 256 && !continues; ++b) {
    ag::runtime::SchemaState next = state;
    continues = next.Feed(static_cast<uint8_t>(b));
  }
  if (!continues) __builtin_trap();
  return 0;
}
