#include "serve/openai.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "serve/json_fast.h"

namespace ag::serve {
namespace {

using nlohmann::json;

ApiError Invalid(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

// Reads one request object; the first problem found is kept and later reads are no-ops.
class Reader {
 public:
  explicit Reader(const json& object) : object_(object) {}

  bool Has(const char* key) const { return object_.contains(key) && !object_[key].is_null(); }
  bool ok() const { return !error_.has_value(); }
  const std::optional<ApiError>& error() const { return error_; }
  void Fail(std::string param, std::string message) {
    if (!error_) error_ = Invalid(std::move(param), std::move(message));
  }

  // Unknown fields are an error, as OpenAI's API answers them.
  void OnlyKnown(std::initializer_list<const char*> known) {
    for (const auto& [key, value] : object_.items()) {
      bool found = false;
      for (const char* k : known) found = found || key == k;
      if (!found) return Fail(key, absl::StrCat("Unrecognized request argument supplied: ", key));
    }
  }
  bool Bool(const char* key, bool fallback) {
    if (!ok() || !Has(key)) return fallback;
    if (!object_[key].is_boolean()) {
      Fail(key, absl::StrCat("'", key, "' must be a boolean"));
      return fallback;
    }
    return object_[key].get<bool>();
  }
  std::optional<int64_t> Int(const char* key, int64_t min, int64_t max) {
    if (!ok() || !Has(key)) return std::nullopt;
    const json& v = object_[key];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) ||
        v.get<int64_t>() < min || v.get<int64_t>() > max) {
      Fail(key, absl::StrCat("'", key, "' must be an integer in [", min, ", ", max, "]"));
      return std::nullopt;
    }
    return v.get<int64_t>();
  }
  std::optional<double> Number(const char* key, double min, double max, bool min_open = false) {
    if (!ok() || !Has(key)) return std::nullopt;
    const json& v = object_[key];
    const double d = v.is_number() ? v.get<double>() : NAN;
    if (!std::isfinite(d) || d < min || (min_open && d == min) || d > max) {
      Fail(key, absl::StrCat("'", key, "' must be a number in ", min_open ? "(" : "[", min, ", ", max, "]"));
      return std::nullopt;
    }
    return d;
  }
  std::string String(const char* key, bool required) {
    if (!ok()) return "";
    if (!Has(key)) {
      if (required) Fail(key, absl::StrCat("'", key, "' is required"));
      return "";
    }
    if (!object_[key].is_string()) {
      Fail(key, absl::StrCat("'", key, "' must be a string"));
      return "";
    }
    return object_[key].get<std::string>();
  }
  // A field we know but do not implement: allowed only at its neutral value.
  void Neutral(const char* key, const json& neutral) {
    if (ok() && Has(key) && object_[key] != neutral && !(object_[key].is_object() && object_[key].empty()) &&
        !(object_[key].is_array() && object_[key].empty())) {
      Fail(key, absl::StrCat("'", key, "' is not supported"));
    }
  }
  const json& operator[](const char* key) const { return object_[key]; }

 private:
  const json& object_;
  std::optional<ApiError> error_;
};

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100], ...}. Keys are decimal ids (no sign,
// no spaces); "7" and "007" are the same id, so naming one twice is refused rather than resolved
// by the parser's order. Whether an id is inside the vocabulary is the model's to say (App).
void ReadLogitBias(Reader& r, const RequestLimits& limits, std::vector<runtime::SamplingParams::Bias>& out) {
  if (!r.ok() || !r.Has("logit_bias")) return;
  const json& biases = r["logit_bias"];
  if (!biases.is_object()) return r.Fail("logit_bias", "'logit_bias' must be an object of token ids to numbers");
  if (biases.size() > limits.max_logit_bias) {
    return r.Fail("logit_bias", absl::StrCat("'logit_bias' takes at most ", limits.max_logit_bias, " token ids"));
  }
  absl::flat_hash_set<int32_t> seen;
  for (const auto& [key, value] : biases.items()) {
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || !absl::SimpleAtoi(key, &id) || id > INT32_MAX) {
      return r.Fail("logit_bias", absl::StrCat("'logit_bias' keys must be token ids; got '", key.substr(0, 40), "'"));
    }
    const double bias = value.is_number() ? value.get<double>() : NAN;
    if (!(bias >= -100.0 && bias <= 100.0)) {
      return r.Fail("logit_bias", absl::StrCat("'logit_bias' values must be numbers in [-100, 100]; token id ", id,
                                               "'s is not"));
    }
    if (!seen.insert(static_cast<int32_t>(id)).second) {
      return r.Fail("logit_bias", absl::StrCat("'logit_bias' names token id ", id, " twice"));
    }
    out.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  }
}

// min_tokens within max_tokens (once the endpoint's default is in).
void CheckMinTokens(Reader& r, const GenerationOptions& o) {
  if (r.ok() && o.max_tokens && o.min_tokens > *o.max_tokens) {
    r.Fail("min_tokens", absl::StrCat("'min_tokens' (", o.min_tokens, ") must be at most 'max_tokens' (", *o.max_tokens, ")"));
  }
}

// The value at `path` in the body, its objects' keys in the order the client wrote them (the
// request's parsed JSON sorts them), or nullopt. Only the top-level member's text is parsed again
// (a body's screenshot is skipped, not read twice). A schema's properties are written in that
// order; tools are rendered in it.
std::optional<nlohmann::ordered_json> OrderedValue(std::string_view body, const std::vector<const char*>& path) {
  const std::optional<std::string_view> member = path.empty() ? std::nullopt : FindMemberText(body, path[0]);
  const std::string_view text = member ? *member : body;
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (ordered.is_discarded()) return std::nullopt;
  nlohmann::ordered_json* at = &ordered;
  for (size_t i = member ? 1 : 0; i < path.size(); ++i) {
    if (!at->is_object() || !at->contains(path[i])) return std::nullopt;
    at = &(*at)[path[i]];
  }
  return std::move(*at);
}

// The same as compact JSON text.
std::optional<std::string> OrderedText(std::string_view body, const std::vector<const char*>& path) {
  const std::optional<nlohmann::ordered_json> value = OrderedValue(body, path);
  if (!value) return std::nullopt;
  return value->dump(-1, ' ', false, json::error_handler_t::replace);
}

// response_format: {"type": "text"} (the default), {"type": "json_object"}, or {"type": "json_schema",
// "json_schema": {"name", "schema", "description", "strict"}}. The schema is compiled where the model
// is (its vocabulary makes the grammar); here it is taken as text in the order the client wrote it
// (`body` parsed again keeping the order: an object's properties are written in it). A constrained
// answer ends where its document does: ignore_eos and min_tokens would keep it going.
void ReadResponseFormat(Reader& r, std::string_view body, GenerationOptions& o) {
  if (!r.ok() || !r.Has("response_format")) return;
  const json& f = r["response_format"];
  const auto type = f.is_object() ? f.find("type") : f.end();
  const bool known = f.is_object() && type != f.end() && type->is_string() &&
                     (*type == "text" || *type == "json_object" || *type == "json_schema") &&
                     (*type == "json_schema" ? f.size() == 2 && f.contains("json_schema") : f.size() == 1);
  if (!known) {
    return r.Fail("response_format", "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                                     "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}");
  }
  if (*type == "text") return;
  o.structured_param = "response_format";
  if (*type == "json_schema") {
    const json& js = f["json_schema"];
    const bool fields_known = js.is_object() && std::all_of(js.items().begin(), js.items().end(), [](const auto& item) {
      return item.key() == "name" || item.key() == "schema" || item.key() == "description" || item.key() == "strict";
    });
    if (!fields_known || !js.contains("name") || !js["name"].is_string() || js["name"].get<std::string>().empty() ||
        js["name"].get<std::string>().size() > 64 || (js.contains("description") && !js["description"].is_string()) ||
        (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())) {
      return r.Fail("response_format.json_schema",
                    "'response_format.json_schema' must be {\"name\": a name of 1-64 characters, \"schema\": a JSON Schema, "
                    "\"description\": optional text, \"strict\": optional boolean}");
    }
    if (js.contains("schema") && !js["schema"].is_object() && !js["schema"].is_boolean()) {
      return r.Fail("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
    }
    // OpenAI's schema is optional: any JSON.
    o.json_schema = js.contains("schema") ? OrderedText(body, {"response_format", "json_schema", "schema"}) : "true";
    o.structured_param = "response_format.json_schema.schema";
    if (!o.json_schema) return r.Fail("response_format", "the body could not be read again in order");
  } else {
    o.json_object = true;
  }
  if (o.ignore_eos) {
    r.Fail("ignore_eos", absl::StrCat("'ignore_eos' cannot go with 'response_format' ", type->get<std::string>(),
                                      ": the answer ends with its JSON"));
  } else if (o.min_tokens > 0) {
    r.Fail("min_tokens", absl::StrCat("'min_tokens' cannot go with 'response_format' ", type->get<std::string>(),
                                      ": the answer ends with its JSON"));
  }
}

// vLLM's structured output fields (extra_body): guided_json (a schema: an object, or its text),
// guided_choice (the answer is one of the strings), guided_regex (the whole answer matches the
// expression), or the same as structured_outputs {"json": ...}, {"choice": [...]} or {"regex": ...}.
// One structured output a request; grammars are refused.
void ReadGuided(Reader& r, std::string_view body, GenerationOptions& o) {
  if (!r.ok()) return;
  const char* present = nullptr;
  const json* schema = nullptr;
  const json* choice = nullptr;
  const json* regex = nullptr;
  std::vector<const char*> schema_path;  // where the schema is, for OrderedText
  if (r.Has("guided_grammar")) {
    return r.Fail("guided_grammar", "'guided_grammar' is not supported here; guided_json, guided_choice and guided_regex are");
  }
  for (const auto& [field, value] : {std::pair{"guided_json", &schema}, {"guided_choice", &choice}, {"guided_regex", &regex}}) {
    if (!r.Has(field)) continue;
    if (present != nullptr) {
      return r.Fail(field, absl::StrCat("one structured output a request: '", field, "' beside '", present, "'"));
    }
    present = field;
    *value = &r[field];
  }
  if (schema != nullptr) schema_path = {"guided_json"};
  if (r.Has("structured_outputs")) {
    const json& so = r["structured_outputs"];
    if (present != nullptr) return r.Fail("structured_outputs", absl::StrCat("one structured output a request: 'structured_outputs' beside '", present, "'"));
    if (!so.is_object() || so.size() != 1 || (!so.contains("json") && !so.contains("choice") && !so.contains("regex"))) {
      return r.Fail("structured_outputs", "'structured_outputs' must be {\"json\": a JSON Schema}, {\"choice\": [strings]} "
                                          "or {\"regex\": an expression} (grammar and structural_tag are not supported here)");
    }
    present = "structured_outputs";
    schema = so.contains("json") ? &so["json"] : nullptr;
    choice = so.contains("choice") ? &so["choice"] : nullptr;
    regex = so.contains("regex") ? &so["regex"] : nullptr;
    schema_path = {"structured_outputs", "json"};
  }
  if (present == nullptr) return;
  if (o.json_object || o.json_schema) {
    return r.Fail(present, absl::StrCat("one structured output a request: '", present, "' beside 'response_format'"));
  }
  o.structured_param = present;
  if (regex != nullptr) {
    if (!regex->is_string() || regex->get<std::string>().empty() || regex->get<std::string>().size() > 65536) {
      return r.Fail(present, absl::StrCat("'", present, "' must be a regular expression of 1-65,536 bytes"));
    }
    o.regex = regex->get<std::string>();
  } else if (schema != nullptr) {
    if (schema->is_string()) {  // the schema's text
      const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(schema->get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) return r.Fail(present, absl::StrCat("'", present, "' is not valid JSON"));
      o.json_schema = parsed.dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (schema->is_object() || schema->is_boolean()) {
      o.json_schema = OrderedText(body, schema_path);
      if (!o.json_schema) return r.Fail(present, "the body could not be read again in order");
    } else {
      return r.Fail(present, absl::StrCat("'", present, "' must be a JSON Schema (an object or its text)"));
    }
  } else {
    const bool strings = choice->is_array() && !choice->empty() && choice->size() <= 1024 &&
                         std::all_of(choice->begin(), choice->end(), [](const json& c) {
                           return c.is_string() && !c.get<std::string>().empty() && c.get<std::string>().size() <= 4096;
                         });
    if (!strings) return r.Fail(present, absl::StrCat("'", present, "' choices must be 1-1,024 non-empty strings"));
    for (const json& c : *choice) o.choice.push_back(c.get<std::string>());
  }
  if (o.ignore_eos) {
    r.Fail("ignore_eos", absl::StrCat("'ignore_eos' cannot go with '", present, "': the answer ends where it is whole"));
  } else if (o.min_tokens > 0) {
    r.Fail("min_tokens", absl::StrCat("'min_tokens' cannot go with '", present, "': the answer ends where it is whole"));
  }
}

void ReadOptions(Reader& r, std::string_view body, const RequestLimits& limits, GenerationOptions& o) {
  o.model = r.String("model", /*required=*/true);
  o.stream = r.Bool("stream", false);
  if (r.ok() && r.Has("stream_options")) {
    const json& so = r["stream_options"];
    const bool only_known = so.is_object() && std::all_of(so.items().begin(), so.items().end(), [](const auto& item) {
      return item.key() == "include_usage" || item.key() == "continuous_usage_stats";
    });
    if (!only_known || (so.contains("include_usage") && !so["include_usage"].is_boolean()) ||
        (so.contains("continuous_usage_stats") && so["continuous_usage_stats"] != false)) {
      r.Fail("stream_options", "'stream_options' must be {\"include_usage\": boolean}");
    } else if (!o.stream) {
      r.Fail("stream_options", "'stream_options' is only allowed with 'stream': true");
    } else {
      o.include_usage = so.value("include_usage", false);
    }
  }
  o.max_tokens = r.Int("max_tokens", 1, limits.max_tokens);
  if (const std::optional<int64_t> m = r.Int("max_completion_tokens", 1, limits.max_tokens)) o.max_tokens = m;
  o.sampling.temperature = static_cast<float>(r.Number("temperature", 0, 2).value_or(1.0));
  o.sampling.top_p = static_cast<float>(r.Number("top_p", 0, 1, /*min_open=*/true).value_or(1.0));
  o.sampling.min_p = static_cast<float>(r.Number("min_p", 0, 1).value_or(0.0));  // vLLM's
  // vLLM's top_k: -1 or 0 is off.
  const int64_t top_k = r.Int("top_k", -1, 1 << 30).value_or(0);
  o.sampling.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);
  o.sampling.repetition_penalty = static_cast<float>(r.Number("repetition_penalty", 0, 10, true).value_or(1.0));
  o.sampling.seed = static_cast<uint64_t>(r.Int("seed", INT64_MIN, INT64_MAX).value_or(0));
  o.n = static_cast<int>(r.Int("n", 1, limits.max_choices).value_or(1));
  o.ignore_eos = r.Bool("ignore_eos", false);
  if (r.ok() && r.Has("stop")) {
    const json& stop = r["stop"];
    std::vector<json> items = stop.is_array() ? std::vector<json>(stop.begin(), stop.end()) : std::vector<json>{stop};
    if (static_cast<int>(items.size()) > limits.max_stop_strings) {
      r.Fail("stop", absl::StrCat("'stop' takes at most ", limits.max_stop_strings, " strings"));
    }
    for (const json& s : items) {
      if (!s.is_string() || s.get<std::string>().empty()) {
        r.Fail("stop", "'stop' must be a non-empty string or a list of them");
        break;
      }
      o.stop.push_back(s.get<std::string>());
    }
  }
  // OpenAI's penalties, over the generated tokens.
  o.sampling.frequency_penalty = static_cast<float>(r.Number("frequency_penalty", -2, 2).value_or(0.0));
  o.sampling.presence_penalty = static_cast<float>(r.Number("presence_penalty", -2, 2).value_or(0.0));
  ReadLogitBias(r, limits, o.sampling.logit_bias);
  // vLLM's extensions (extra_body): stop ids, whether stop text and special tokens are shown, min_tokens.
  if (r.ok() && r.Has("stop_token_ids")) {
    const json& ids = r["stop_token_ids"];
    const bool valid = ids.is_array() && ids.size() <= limits.max_stop_token_ids &&
                       std::all_of(ids.begin(), ids.end(), [](const json& id) {
                         return id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX &&
                                !(id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX);
                       });
    if (!valid) {
      r.Fail("stop_token_ids", absl::StrCat("'stop_token_ids' must be a list of at most ", limits.max_stop_token_ids,
                                            " token ids"));
    } else {
      for (const json& id : ids) o.stop_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  o.include_stop_str_in_output = r.Bool("include_stop_str_in_output", false);
  o.skip_special_tokens = r.Bool("skip_special_tokens", true);
  r.Neutral("spaces_between_special_tokens", true);
  o.min_tokens = r.Int("min_tokens", 0, limits.max_tokens).value_or(0);
  ReadResponseFormat(r, body, o);
  ReadGuided(r, body, o);
}

// Whether `name` is a function name OpenAI takes: 1-64 of a-z, A-Z, 0-9, '_' and '-'.
bool ValidFunctionName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}],
// read in the client's key order (the prompt shows them so).
void ReadToolList(Reader& r, std::string_view body, const RequestLimits& limits, std::vector<glm::ToolFunction>* out) {
  if (!r.ok()) return;
  if (r.Has("tools")) {
    const json& tools = r["tools"];
    if (!tools.is_array() || tools.size() > limits.max_tools) {
      return r.Fail("tools", absl::StrCat("'tools' must be a list of at most ", limits.max_tools, " functions"));
    }
    const std::optional<nlohmann::ordered_json> ordered =
        tools.empty() ? nlohmann::ordered_json::array() : OrderedValue(body, {"tools"});
    if (!ordered || !ordered->is_array() || ordered->size() != tools.size()) {
      return r.Fail("tools", "the body could not be read again in order");
    }
    absl::flat_hash_set<std::string> names;
    for (size_t i = 0; i < ordered->size(); ++i) {
      const nlohmann::ordered_json& t = (*ordered)[i];
      const std::string where = absl::StrCat("tools[", i, "]");
      const bool shaped = t.is_object() && t.size() == 2 && t.contains("type") && t["type"] == "function" &&
                          t.contains("function") && t["function"].is_object();
      if (!shaped) return r.Fail(where, absl::StrCat("'", where, "' must be {\"type\": \"function\", \"function\": {...}}"));
      const nlohmann::ordered_json& f = t["function"];
      for (const auto& [key, value] : f.items()) {
        const bool known = (key == "name" && value.is_string()) || (key == "description" && value.is_string()) ||
                           (key == "parameters" && value.is_object()) || (key == "strict" && (value.is_boolean() || value.is_null()));
        if (!known) {
          return r.Fail(where + ".function." + key,
                        absl::StrCat("'", where, ".function' takes name, description (a string), parameters (a JSON "
                                     "Schema object) and strict (a boolean); '", key.substr(0, 64), "' is not one of them"));
        }
      }
      const std::string name = f.contains("name") ? f["name"].get<std::string>() : "";
      if (!ValidFunctionName(name)) {
        return r.Fail(where + ".function.name", absl::StrCat("'", where, ".function.name' must be 1-64 characters of "
                                                             "a-z, A-Z, 0-9, '_' and '-'"));
      }
      if (!names.insert(name).second) {
        return r.Fail(where + ".function.name", absl::StrCat("'tools' names the function '", name, "' twice"));
      }
      out->push_back({name, f});
    }
  }
}

// tools (ReadToolList); tool_choice: "none", "auto" (the default when there are tools), "required",
// or {"type": "function", "function": {"name": ...}}; parallel_tool_calls: a boolean (GLM-4 writes
// one call a turn, which either value allows).
void ReadTools(Reader& r, std::string_view body, const RequestLimits& limits, ChatRequest& req) {
  r.Bool("parallel_tool_calls", true);
  ReadToolList(r, body, limits, &req.tools);
  if (!r.ok()) return;
  req.tool_choice = req.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (r.Has("tool_choice")) {
    const json& choice = r["tool_choice"];
    std::string named;
    if (choice == "none") {
      req.tool_choice = ToolChoice::kNone;
    } else if (choice == "auto") {
      req.tool_choice = ToolChoice::kAuto;
    } else if (choice == "required") {
      req.tool_choice = ToolChoice::kRequired;
    } else if (choice.is_object() && choice.size() == 2 && choice.contains("type") && choice["type"] == "function" &&
               choice.contains("function") && choice["function"].is_object() && choice["function"].size() == 1 &&
               choice["function"].contains("name") && choice["function"]["name"].is_string()) {
      req.tool_choice = ToolChoice::kFunction;
      named = choice["function"]["name"].get<std::string>();
    } else {
      return r.Fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                   "\"function\": {\"name\": ...}}");
    }
    if (req.tool_choice != ToolChoice::kNone && req.tools.empty()) {
      return r.Fail("tool_choice", "'tool_choice' asks for a call, but the request has no 'tools'");
    }
    if (req.tool_choice == ToolChoice::kFunction) {
      const auto it = std::find_if(req.tools.begin(), req.tools.end(), [&](const glm::ToolFunction& f) { return f.name == named; });
      if (it == req.tools.end()) {
        return r.Fail("tool_choice", absl::StrCat("'tool_choice' names the function '", named.substr(0, 64),
                                                  "', which 'tools' does not have"));
      }
      glm::ToolFunction only = std::move(*it);
      req.tools = {std::move(only)};  // GLM-4's server shows the model only the function it must call
    }
  }
  if (req.tool_choice == ToolChoice::kNone) req.tools.clear();  // nothing to call: nothing shown
  const GenerationOptions& o = req.options;
  const bool forced = ForcesACall(req.tool_choice);
  if (forced && o.structured()) {
    return r.Fail("tool_choice", absl::StrCat("a forced tool call cannot go with '", o.structured_param,
                                              "': the answer is the call"));
  }
  if (forced && (o.ignore_eos || o.min_tokens > 0)) {
    return r.Fail("tool_choice", absl::StrCat("a forced tool call cannot go with '", o.ignore_eos ? "ignore_eos" : "min_tokens",
                                              "': the answer ends with the call"));
  }
}

// A string member of `j`, or null when absent or of another type (never an exception).
const std::string* StringMember(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

// One part of a content list: {"type": "text", "text": ...} or
// {"type": "image_url", "image_url": {"url": ..., "detail": ...}} (the URL as
// a plain string is accepted too, as vLLM does). An error names the part.
std::optional<glm::ContentPart> Part(const json& part, const std::string& where, std::string* error) {
  const std::string* type = StringMember(part, "type");
  if (type != nullptr && *type == "text") {
    if (const std::string* text = StringMember(part, "text")) return glm::ContentPart{glm::ContentPart::Type::kText, *text};
    *error = absl::StrCat("'", where, ".text' must be a string");
    return std::nullopt;
  }
  if (type != nullptr && *type == "image_url" && part.contains("image_url")) {
    const json& image = part["image_url"];
    const std::string* url = image.is_string() ? image.get_ptr<const std::string*>() : StringMember(image, "url");
    const std::string* detail = StringMember(image, "detail");
    if (url == nullptr) {
      *error = absl::StrCat("'", where, ".image_url' must be {\"url\": string}");
    } else if (image.is_object() && image.contains("detail") &&
               (detail == nullptr || (*detail != "auto" && *detail != "low" && *detail != "high"))) {
      *error = absl::StrCat("'", where, ".image_url.detail' must be auto, low or high");
    } else {
      return glm::ContentPart{glm::ContentPart::Type::kImage, *url};
    }
    return std::nullopt;
  }
  *error = absl::StrCat("'", where, "' must be a text part or an image_url part");
  return std::nullopt;
}

// 'messages': a non-empty list of {role, content}; content a string or a list of parts.
// An assistant message's tool_calls: [{"id"?, "type": "function", "function": {"name", "arguments": JSON text}}].
bool ReadToolCalls(const json& calls, const std::string& where, std::vector<glm::ToolCall>* out, std::string* error) {
  if (!calls.is_array()) {
    *error = absl::StrCat("'", where, "' must be a list of calls");
    return false;
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    const json* f = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    const bool valid = f != nullptr && (!c.contains("type") || c["type"] == "function") &&
                       (!c.contains("id") || c["id"].is_string()) && StringMember(*f, "name") != nullptr &&
                       StringMember(*f, "arguments") != nullptr;
    if (!valid) {
      *error = absl::StrCat("'", where, "[", i, "]' must be {\"id\": ..., \"type\": \"function\", \"function\": {\"name\": "
                            "a string, \"arguments\": JSON text}}");
      return false;
    }
    out->push_back({*StringMember(*f, "name"), *StringMember(*f, "arguments")});
  }
  return true;
}

void ReadMessages(Reader& r, std::vector<glm::ChatMessage>* out) {
  if (!r.ok()) return;
  if (!r.Has("messages") || !r["messages"].is_array() || r["messages"].empty()) {
    return r.Fail("messages", "'messages' must be a non-empty list");
  }
  const json& messages = r["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    const std::string* role = StringMember(m, "role");
    if (role == nullptr) return r.Fail(where + ".role", absl::StrCat("'", where, ".role' must be a string"));
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool" && *role != "observation") {
      return r.Fail(where + ".role", absl::StrCat("'", where, ".role' must be system, user, assistant, tool or observation"));
    }
    const json* content = m.is_object() && m.contains("content") ? &m["content"] : nullptr;
    // A function's result is GLM's observation turn (the call it answers is the assistant turn before it).
    glm::ChatMessage message{*role == "tool" ? "observation" : *role, "", {}, false};
    if (*role == "tool" && m.contains("tool_call_id") && !m["tool_call_id"].is_string()) {
      return r.Fail(where + ".tool_call_id", absl::StrCat("'", where, ".tool_call_id' must be a string"));
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      std::string error;
      const std::string calls_where = where + ".tool_calls";
      if (*role != "assistant" || !ReadToolCalls(m["tool_calls"], calls_where, &message.tool_calls, &error)) {
        return r.Fail(calls_where, *role != "assistant" ? absl::StrCat("'", calls_where, "' belongs to an assistant message")
                                                        : error);
      }
      // An assistant message that made calls may have no content (OpenAI sends null).
      if (content == nullptr || content->is_null()) {
        out->push_back(std::move(message));
        continue;
      }
    }
    if (content != nullptr && content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content != nullptr && content->is_array()) {
      message.has_parts = true;
      for (size_t j = 0; j < content->size(); ++j) {
        const std::string part_where = absl::StrCat(where, ".content[", j, "]");
        std::string error;
        std::optional<glm::ContentPart> part = Part((*content)[j], part_where, &error);
        if (!part) return r.Fail(part_where, error);
        message.parts.push_back(std::move(*part));
      }
    } else {
      return r.Fail(where + ".content", absl::StrCat("'", where, ".content' must be a string or a list of parts"));
    }
    out->push_back(std::move(message));
  }
}

// The nesting depth of JSON text goes past `max_depth` (brackets inside strings do not count).
bool NestedDeeperThan(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

std::optional<json> ParseObject(std::string_view body, ApiError* error) {
  std::variant<json, ApiError> parsed = ParseJsonObject(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    *error = std::move(*e);
    return std::nullopt;
  }
  return std::move(std::get<json>(parsed));
}

}  // namespace

std::variant<json, ApiError> ParseJsonObject(std::string_view body) {
  // The fast parser takes well-formed bodies within the depth bound (the phone's 1.2 MB
  // screenshot requests: ~15 ms -> ~1 ms here) and declines everything else to the checks below.
  if (std::optional<json> fast = ParseJsonFast(body, kMaxJsonDepth); fast && fast->is_object()) {
    return std::move(*fast);
  }
  if (NestedDeeperThan(body, kMaxJsonDepth)) {
    return Invalid("", absl::StrCat("the request body is nested deeper than ", kMaxJsonDepth, " levels"));
  }
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid("", "the request body is not valid JSON (or not UTF-8)");
  if (!j.is_object()) return Invalid("", "the request body must be a JSON object");
  return j;
}

std::variant<TokenizeRequest, ApiError> ParseTokenizeRequest(std::string_view body, const RequestLimits& limits) {
  ApiError error;
  const std::optional<json> j = ParseObject(body, &error);
  if (!j) return error;
  Reader r(*j);
  r.OnlyKnown({"model", "prompt", "messages", "tools"});
  TokenizeRequest req;
  if (r.ok() && r.Has("prompt")) {
    req.prompt = r.String("prompt", true);
    if (r.ok() && r.Has("tools")) r.Fail("tools", "'tools' goes with 'messages'");
  } else if (r.ok() && r.Has("messages")) {
    ReadMessages(r, &req.messages);
    ReadToolList(r, body, limits, &req.tools);
  } else {
    r.Fail("prompt", "give 'prompt' (a string) or 'messages'");
  }
  if (!r.ok()) return *r.error();
  return req;
}

std::variant<DetokenizeRequest, ApiError> ParseDetokenizeRequest(std::string_view body, int64_t vocab_size) {
  ApiError error;
  const std::optional<json> j = ParseObject(body, &error);
  if (!j) return error;
  Reader r(*j);
  r.OnlyKnown({"model", "tokens"});
  DetokenizeRequest req;
  if (r.ok() && (!r.Has("tokens") || !r["tokens"].is_array())) r.Fail("tokens", "the body must be {\"tokens\": [ids]}");
  if (r.ok()) {
    for (const json& t : r["tokens"]) {
      if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX) ||
          t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size) {
        r.Fail("tokens", "'tokens' must hold ids of this tokenizer's vocabulary");
        break;
      }
      req.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (!r.ok()) return *r.error();
  return req;
}

std::string JsonText(const json& j) { return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace); }

std::string ApiError::ToJson() const {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return JsonText(json{{"error", e}});
}

ChatResult ParseChatRequest(std::string_view body, const RequestLimits& limits) {
  ApiError error;
  const std::optional<json> j = ParseObject(body, &error);
  if (!j) return error;
  Reader r(*j);
  r.OnlyKnown({"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
               "top_p", "top_k", "min_p", "repetition_penalty", "seed", "n", "stop", "logprobs", "top_logprobs", "ignore_eos",
               "user", "frequency_penalty", "presence_penalty", "logit_bias", "tools", "tool_choice",
               "response_format", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens",
               "spaces_between_special_tokens", "min_tokens", "guided_json", "guided_choice", "guided_regex",
               "guided_grammar", "structured_outputs", "parallel_tool_calls"});
  ChatRequest req;
  ReadOptions(r, body, limits, req.options);
  ReadTools(r, body, limits, req);
  CheckMinTokens(r, req.options);
  req.logprobs = r.Bool("logprobs", false);
  req.top_logprobs = static_cast<int>(r.Int("top_logprobs", 0, limits.max_top_logprobs).value_or(0));
  if (r.ok() && req.top_logprobs > 0 && !req.logprobs) r.Fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  ReadMessages(r, &req.messages);
  if (!r.ok()) return *r.error();
  return req;
}

CompletionResult ParseCompletionRequest(std::string_view body, const RequestLimits& limits) {
  ApiError error;
  const std::optional<json> j = ParseObject(body, &error);
  if (!j) return error;
  Reader r(*j);
  r.OnlyKnown({"model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k", "min_p",
               "repetition_penalty", "seed", "n", "stop", "logprobs", "echo", "return_token_ids", "ignore_eos", "user",
               "frequency_penalty", "presence_penalty", "logit_bias", "suffix", "best_of", "stop_token_ids",
               "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "min_tokens",
               "response_format", "guided_json", "guided_choice", "guided_regex", "guided_grammar", "structured_outputs"});
  CompletionRequest req;
  ReadOptions(r, body, limits, req.options);
  if (!req.options.max_tokens) req.options.max_tokens = 16;  // OpenAI's default for completions
  CheckMinTokens(r, req.options);
  req.echo = r.Bool("echo", false);
  req.return_token_ids = r.Bool("return_token_ids", false);
  if (const std::optional<int64_t> lp = r.Int("logprobs", 0, 5)) req.logprobs = static_cast<int>(*lp);
  r.Neutral("suffix", "");
  r.Neutral("best_of", 1);
  if (r.ok()) {
    const json* prompt = r.Has("prompt") ? &r["prompt"] : nullptr;
    if (prompt != nullptr && prompt->is_string()) {
      req.prompt = prompt->get<std::string>();
    } else if (prompt != nullptr && prompt->is_array() && !prompt->empty() && prompt->size() <= limits.max_prompt_ids &&
               std::all_of(prompt->begin(), prompt->end(), [](const json& id) {
                 return id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX &&
                        !(id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX);
               })) {
      req.prompt = prompt->get<std::vector<int32_t>>();
    } else {
      r.Fail("prompt", "'prompt' must be a string or a non-empty list of token ids");
    }
  }
  if (!r.ok()) return *r.error();
  return req;
}

std::string ToolParametersSchema(const glm::ToolFunction& function) {
  if (!function.object.contains("parameters")) return R"({"type":"object","additionalProperties":false})";
  return function.object["parameters"].dump(-1, ' ', false, json::error_handler_t::replace);
}

bool IsStrict(const glm::ToolFunction& function) {
  const auto strict = function.object.find("strict");
  return strict != function.object.end() && strict->is_boolean() && strict->get<bool>();
}

}  // namespace ag::serve
