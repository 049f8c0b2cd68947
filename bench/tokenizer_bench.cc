// Tokenizer speed: loading the GLM-4 vocabulary, encoding several MB of
// mixed English and Chinese text on one core, and encoding a phone agent's
// chat step after step. Targets: load < 100 ms, encode >= 5 MB/s. Reads
// ../shared/tokenizers/glm4 (set AUTOGLM_GLM4_TOKENIZER).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "runtime/json_constraint.h"
#include "runtime/json_pattern.h"
#include "runtime/json_schema.h"
#include "runtime/pattern_text_tokens.h"
#include "runtime/tool_call_grammar.h"

namespace {

std::string TokenizerDir() {
  const char* dir = std::getenv("AUTOGLM_GLM4_TOKENIZER");
  return dir != nullptr ? dir : "../shared/tokenizers/glm4";
}

// About `bytes` of text: English and Chinese sentences, numbers, punctuation, newlines.
std::string MixedText(size_t bytes) {
  static const char* kEnglish[] = {"the", "model", "compiles", "a", "graph", "into", "fused", "kernels", "and",
                                   "runs", "them", "on", "GPU", "memory", "bandwidth", "is", "what", "limits",
                                   "decode", "speed", "when", "batch", "size", "small", "tokens", "per", "second",
                                   "we", "measure", "latency", "throughput", "under", "load", "users", "serving",
                                   "GLM-4", "don't", "it's", "attention", "cache", "pages", "blocks", "scheduler"};
  static const char* kChinese[] = {"我们", "模型", "编译", "推理", "引擎", "内存", "带宽", "速度", "延迟", "吞吐量",
                                   "用户", "服务", "注意力", "缓存", "调度", "你好", "很高兴", "见到你", "今天",
                                   "天气", "不错", "中文", "文本", "分词", "测试", "性能", "目标", "每秒"};
  std::mt19937 rng(7);
  std::string text;
  while (text.size() < bytes) {
    const bool chinese = rng() % 2 == 0;
    const int words = 5 + static_cast<int>(rng() % 15);
    for (int w = 0; w < words; ++w) {
      if (chinese) {
        text += kChinese[rng() % (sizeof(kChinese) / sizeof(*kChinese))];
      } else {
        if (w > 0) text += ' ';
        text += kEnglish[rng() % (sizeof(kEnglish) / sizeof(*kEnglish))];
      }
      if (rng() % 10 == 0) text += std::to_string(rng() % 100000);
    }
    text += chinese ? "。" : ". ";
    if (rng() % 5 == 0) text += "\n\n";
  }
  return text;
}

void BM_LoadVocabulary(benchmark::State& state) {
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<ag::glm::Tokenizer>> t = ag::glm::Tokenizer::Load(TokenizerDir());
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(t->get());
  }
}
BENCHMARK(BM_LoadVocabulary)->Unit(benchmark::kMillisecond);

void BM_EncodeMixedText(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<ag::glm::Tokenizer>> t = ag::glm::Tokenizer::Load(TokenizerDir());
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  const std::string text = MixedText(static_cast<size_t>(state.range(0)) << 20);
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = (*t)->Encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeMixedText)->Arg(4)->Unit(benchmark::kMillisecond);

// A phone agent's request at step `steps`, as Open-AutoGLM's client builds it: a 7.9 KB system
// prompt (its Chinese one's size), then a user turn and an answer a step -- older user turns lose
// their screenshot, the newest keeps it -- all encoded again every step (GLM-4.1V's template).
// Arg 0: runs not remembered (every step encodes the whole history); 1: remembered (the
// tokenizer's default), so a step encodes its newest turn. Each iteration's newest turn is new text.
void BM_EncodeAgentChat(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<ag::glm::Tokenizer>> t = ag::glm::Tokenizer::Load(TokenizerDir());
  if (!t.ok()) {
    state.SkipWithError(std::string(t.status().message()).c_str());
    return;
  }
  if (state.range(0) == 0) (*t)->KeepEncodedRuns(0);
  const int steps = static_cast<int>(state.range(1));
  const std::string history = MixedText(size_t{1} << 20);
  size_t at = 0;
  auto next_text = [&](size_t bytes) {  // consecutive slices of the mixed text, cut at a character
    size_t end = at + bytes;
    while ((static_cast<unsigned char>(history[end]) & 0xC0) == 0x80) ++end;
    std::string s = history.substr(at, end - at);
    at = end;
    return s;
  };
  using ag::glm::ChatMessage;
  using ag::glm::ContentPart;
  auto user = [&](bool image) {
    ChatMessage m{"user", "", {}, true};
    if (image) m.parts.push_back({ContentPart::Type::kImage, ""});
    m.parts.push_back({ContentPart::Type::kText, next_text(120) + "\n\n** Screen Info **\n\n{\"current_app\": \"WeChat\"}"});
    return m;
  };
  std::vector<ChatMessage> chat = {{"system", next_text(7900), {}, false}};
  for (int s = 0; s + 1 < steps; ++s) {
    chat.push_back(user(false));
    chat.push_back({"assistant", "<think>" + next_text(300) + "</think><answer>do(action=\"Tap\", element=[512,873])</answer>", {}, false});
  }
  chat.push_back(user(true));
  ag::glm::ChatOptions options;
  options.chat_template = ag::glm::ChatTemplate::kGlm4v;
  options.content_format = ag::glm::ContentFormat::kOpenai;
  if (!ag::glm::EncodeChat(**t, chat, options).ok()) {  // the history seen once, as the previous steps did
    state.SkipWithError("the chat does not encode");
    return;
  }
  size_t bytes = 0, tokens = 0;
  for (const ChatMessage& m : chat) bytes += m.content.size() + (m.parts.empty() ? 0 : m.parts.back().text.size());
  for (auto _ : state) {
    chat.back().parts.back().text = next_text(120);  // this step's new screen description
    if (at > history.size() - 8192) at = 0;
    const absl::StatusOr<std::vector<int32_t>> ids = ag::glm::EncodeChat(**t, chat, options);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.counters["text_bytes"] = static_cast<double>(bytes);
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeAgentChat)
    ->ArgsProduct({{0, 1}, {1, 10, 30}})
    ->ArgNames({"remembered", "step"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

// GLM-4's vocabulary for JSON mode and schemas, or null (the benchmark skipped) without the tokenizer.
std::shared_ptr<ag::runtime::JsonVocabulary> Glm4JsonVocabulary(benchmark::State& state) {
  auto tokenizer = ag::glm::Tokenizer::Load(TokenizerDir());
  if (!tokenizer.ok()) {
    state.SkipWithError(std::string(tokenizer.status().message()).c_str());
    return nullptr;
  }
  return *ag::runtime::JsonVocabulary::Build(**tokenizer);
}

int64_t Allowed(const std::vector<uint64_t>& mask) {
  int64_t n = 0;
  for (const uint64_t w : mask) n += __builtin_popcountll(w);
  return n;
}

// JSON mode over GLM-4's 151,329 ordinary tokens: building the sorted vocabulary (once a server),
// and one mask computed afresh (once per state a request meets; cached after) for a state: /0 the
// answer's start, /1 inside a string value, /2 a value expected after a key, /3 inside a number;
// the second argument 1 feeds every token (JsonVocabulary::WalkEveryToken), as masks were made before
// the text tokens' sets.
void BM_JsonVocabularyBuild(benchmark::State& state) {
  auto tokenizer = ag::glm::Tokenizer::Load(TokenizerDir());
  if (!tokenizer.ok()) {
    state.SkipWithError(std::string(tokenizer.status().message()).c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(ag::runtime::JsonVocabulary::Build(**tokenizer));
}
BENCHMARK(BM_JsonVocabularyBuild)->Unit(benchmark::kMillisecond);

void BM_JsonMask(benchmark::State& state) {
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  const char* prefixes[] = {"", "{\"name\": \"GLM", "{\"name\": ", "{\"n\": 12"};
  ag::runtime::JsonState s;
  if (!s.Feed(prefixes[state.range(0)])) {
    state.SkipWithError("bad prefix");
    return;
  }
  int64_t allowed = 0;
  const bool every = state.range(1) == 1;  // /x/1: every token fed, without the text tokens' sets
  for (auto _ : state) allowed = Allowed(every ? vocabulary->WalkEveryToken(s) : vocabulary->Compute(s));
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_JsonMask)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Unit(benchmark::kMillisecond);

// A JSON Schema's mask computed afresh, GLM-4's vocabulary, the phone agent's kind of answer (a
// thought, then one of three actions): /0 the start, /1 inside the thought, /2 the action's value
// (three alternatives side by side), /3 inside the tap's x.
void BM_JsonSchemaMask(benchmark::State& state) {
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  const auto schema = ag::runtime::JsonSchema::Compile(R"({"type": "object", "properties": {
      "thought": {"type": "string"}, "action": {"anyOf": [
        {"type": "object", "properties": {"type": {"const": "tap"}, "x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["type", "x", "y"]},
        {"type": "object", "properties": {"type": {"const": "type"}, "text": {"type": "string"}}, "required": ["type", "text"]},
        {"type": "object", "properties": {"type": {"const": "finish"}}, "required": ["type"]}]}},
      "required": ["thought", "action"]})");
  const auto grammar = ag::runtime::JsonSchemaGrammar::Create(*schema, vocabulary);
  const char* prefixes[] = {"", "{\"thought\": \"The", "{\"thought\": \"ok\", \"action\": ",
                            "{\"thought\": \"ok\", \"action\": {\"type\": \"tap\", \"x\": 12"};
  ag::runtime::SchemaState s = (*grammar)->Start();
  if (!s.Feed(prefixes[state.range(0)])) {
    state.SkipWithError("bad prefix");
    return;
  }
  int64_t allowed = 0;
  const auto& v = (*grammar)->vocabulary();
  const bool every = state.range(1) == 1;  // /x/1: every token fed, without the text tokens' sets
  for (auto _ : state) allowed = Allowed(every ? v.WalkEveryToken(s) : (*grammar)->Compute(s));
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_JsonSchemaMask)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Unit(benchmark::kMillisecond);

// Strings with a pattern, GLM-4's vocabulary: a state's mask computed afresh (once a state, cached
// after) at /0 inside an anchored date ("^\d{4}-\d{2}-\d{2}$", 4 digits in: few tokens allowed),
// /1 inside a search ("ok", before it: nearly every token allowed), /2 the same search after its
// match, /3 inside an email-like pattern's local part; the second argument 1 feeds every token, as
// masks were made before the patterns' text-token tables (JsonSchemaGrammar::Compute takes them).
constexpr const char* kEmailPattern = R"(^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$)";

void BM_JsonSchemaPatternMask(benchmark::State& state) {
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  const auto schema = ag::runtime::JsonSchema::Compile(absl::StrCat(R"({"type": "object", "properties": {
      "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}, "note": {"type": "string", "pattern": "ok"},
      "email": {"type": "string", "pattern": ")", absl::CEscape(kEmailPattern), R"("}}, "required": ["date", "note", "email"]})"));
  if (!schema.ok()) {
    state.SkipWithError(std::string(schema.status().message()).c_str());
    return;
  }
  const auto grammar = ag::runtime::JsonSchemaGrammar::Create(*schema, vocabulary);
  const char* prefixes[] = {"{\"date\": \"2026", "{\"date\": \"2026-12-07\", \"note\": \"fine, o",
                            "{\"date\": \"2026-12-07\", \"note\": \"fine, ok, an",
                            "{\"date\": \"2026-12-07\", \"note\": \"ok\", \"email\": \"john.do"};
  ag::runtime::SchemaState s = (*grammar)->Start();
  if (!s.Feed(prefixes[state.range(0)])) {
    state.SkipWithError("bad prefix");
    return;
  }
  const bool every = state.range(1) == 1;
  (*grammar)->Compute(s);  // the pattern's table, built once a grammar (BM_PatternTextTokensBuild)
  int64_t allowed = 0;
  for (auto _ : state) allowed = Allowed(every ? (*grammar)->vocabulary().WalkEveryToken(s) : (*grammar)->Compute(s));
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_JsonSchemaPatternMask)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Unit(benchmark::kMillisecond);

// Compiling a schema whose strings have formats (a request's first use of it; cached by text after):
// /0 pydantic's kind (date-time, date, uuid, ipv4, email, a pattern beside a format), /1 a hostile one,
// 1,000 properties each an ipv6 string (one DFA, compiled once).
void BM_JsonSchemaCompileFormats(benchmark::State& state) {
  std::string text;
  if (state.range(0) == 0) {
    text = R"({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"},
        "host": {"type": "string", "format": "ipv4"}, "mail": {"type": "string", "format": "email"},
        "code": {"type": "string", "format": "date", "pattern": "^20"}}, "required": ["when", "day", "id"]})";
  } else {
    text = R"({"type": "object", "properties": {)";
    for (int i = 0; i < 1000; ++i) text += absl::StrCat(i ? ", " : "", "\"p", i, "\": {\"type\": \"string\", \"format\": \"ipv6\"}");
    text += "}}";
  }
  for (auto _ : state) {
    const auto schema = ag::runtime::JsonSchema::Compile(text);
    if (!schema.ok()) {
      state.SkipWithError(std::string(schema.status().message()).c_str());
      return;
    }
    state.counters["dfas"] = static_cast<double>((*schema)->patterns());
  }
}
BENCHMARK(BM_JsonSchemaCompileFormats)->DenseRange(0, 1)->Unit(benchmark::kMillisecond);

// Once a schema: compiling the email-like pattern's DFA (/0), and grouping GLM-4's text tokens by
// its classes (/1, once a grammar, when a mask first meets the pattern).
void BM_PatternCompile(benchmark::State& state) {
  const auto dfa = ag::runtime::PatternDfa::Compile(kEmailPattern);
  if (state.range(0) == 0) {
    for (auto _ : state) benchmark::DoNotOptimize(ag::runtime::PatternDfa::Compile(kEmailPattern));
    return;
  }
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  for (auto _ : state) {
    const auto table = ag::runtime::PatternTextTokens::Build(**dfa, *vocabulary);
    state.counters["groups"] = static_cast<double>(table->groups());
  }
}
BENCHMARK(BM_PatternCompile)->DenseRange(0, 1)->Unit(benchmark::kMillisecond);

// A step's mask inside a string with maxLength 500, 100 characters in (its key merges every length
// more than 32 from the bound): the cached mask of the key with the long tokens' bits set afresh,
// what each such step costs once the key's mask is cached.
void BM_JsonSchemaBoundedStringStep(benchmark::State& state) {
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  const auto schema = ag::runtime::JsonSchema::Compile(
      R"({"type": "object", "properties": {"thought": {"type": "string", "maxLength": 500}}, "required": ["thought"]})");
  const auto grammar = ag::runtime::JsonSchemaGrammar::Create(*schema, vocabulary);
  ag::runtime::SchemaState s = (*grammar)->Start();
  if (!s.Feed("{\"thought\": \"" + std::string(100, 'x'))) {
    state.SkipWithError("bad prefix");
    return;
  }
  (*grammar)->Allowed(s);  // the key's mask, cached
  int64_t allowed = 0;
  for (auto _ : state) allowed = Allowed(*(*grammar)->Allowed(s));
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_JsonSchemaBoundedStringStep)->Unit(benchmark::kMillisecond);

// A tool call's mask computed afresh, GLM-4's vocabulary, two functions (get_weather, tap): forced,
// /0 the start, /1 within the name ("get_w"), /2 right after the name's newline (the arguments'
// schema takes over; a token may cross); optional (tool_choice "auto"), /3 the start, /4 within
// the name -- every token allowed but those that would end the line on no name or cross into bad
// arguments. A request meets one name state a byte of the name written, each computed while the
// device runs the step before (TokenConstraint::Prepare); an auto reply that is no call, one or two.
void BM_ToolCallMask(benchmark::State& state) {
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  ag::runtime::JsonSchemaGrammars schemas(vocabulary);
  const auto weather = schemas.Get(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  const auto tap = schemas.Get(R"({"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 1080},
      "y": {"type": "integer", "minimum": 0, "maximum": 2400}}, "required": ["x", "y"]})");
  const bool optional = state.range(0) >= 3;
  const auto grammar = ag::runtime::ToolCallGrammar::Create(
      {{"get_weather", *weather}, {"tap", *tap}}, vocabulary,
      optional ? ag::runtime::ToolCallGrammar::Call::kOptional : ag::runtime::ToolCallGrammar::Call::kForced);
  const char* prefixes[] = {"", "get_w", "get_weather\n", "", "get_w"};
  ag::runtime::ToolCallState s = (*grammar)->Start();
  if (!s.Feed(prefixes[state.range(0)])) {
    state.SkipWithError("bad prefix");
    return;
  }
  int64_t allowed = 0;
  for (auto _ : state) allowed = Allowed(vocabulary->Walk(s));
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_ToolCallMask)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

// A request's tool call, its masks as the engine asks for them (GLM-4's vocabulary, two functions,
// the arguments' schema grammars cached as the server's are): a fresh grammar, then the call
// "get_weather\n{\"city\": \"Paris\"}" fed byte by byte with each state's mask. /0: the grammar's own
// name masks (every request walks its name states); /1: name masks kept for the tool set, as the
// server keeps them (ToolCallGrammar::NameMasksKey). Argument 2: forced (0) or auto (1).
void BM_ToolCallRequest(benchmark::State& state) {
  const auto vocabulary = Glm4JsonVocabulary(state);
  if (vocabulary == nullptr) return;
  ag::runtime::JsonSchemaGrammars schemas(vocabulary);
  const auto weather = schemas.Get(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  const auto tap = schemas.Get(R"({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}})");
  const auto call = state.range(1) == 1 ? ag::runtime::ToolCallGrammar::Call::kOptional : ag::runtime::ToolCallGrammar::Call::kForced;
  auto kept = std::make_shared<ag::runtime::MaskCache>(ag::runtime::JsonVocabulary::kMaxCachedMasks);
  const std::string text = "get_weather\n{\"city\": \"Paris\"}";
  int64_t masks = 0;
  for (auto _ : state) {
    const auto grammar = ag::runtime::ToolCallGrammar::Create({{"get_weather", *weather}, {"tap", *tap}}, vocabulary, call,
                                                              state.range(0) == 1 ? kept : nullptr);
    ag::runtime::ToolCallState s = (*grammar)->Start();
    masks = 0;
    for (const char c : text) {
      benchmark::DoNotOptimize((*grammar)->Allowed(s));
      ++masks;
      if (!s.Feed(static_cast<uint8_t>(c))) state.SkipWithError("refused");
    }
  }
  state.counters["masks"] = static_cast<double>(masks);
}
BENCHMARK(BM_ToolCallRequest)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
