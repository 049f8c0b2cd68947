// autoglm-run: generate from a prompt with a GLM-4 checkpoint.
//
//   autoglm-run --model DIR --prompt-ids 5,17,42 --max-new-tokens 16 [--output-json FILE]
//   autoglm-run --model DIR --prompt "text" [--chat] [--temperature T] [--top-p P] [--top-k K] [--min-p P]
//               [--repetition-penalty R] [--logit-bias ID:BIAS,...] [--seed S] [--max-new-tokens N]
//   autoglm-run --model GLM4V_DIR --image FILE [--image FILE ...] (--prompt "text" --chat | --prompt-ids IDS)
//   ... [--tp N [--device cuda --devices 0,1,...] [--nnodes N --node-rank R --master ADDR:PORT]]
//
// Compiles the model (or loads --plan FILE), prefills the prompt once, then
// decodes one token per step through the KV cache. With --prompt-ids it
// prints the new ids and the time per token, and --output-json writes
// {"new_tokens": [...], "logits": [[...]]} with one logits row per position
// processed (P + N - 1 rows). With --prompt it streams the text to stdout as
// tokens come and stops at any of the model's end-of-sequence ids; timings
// go to stderr. --tp N splits the model over N ranks (threads on the CPU,
// GPUs with --device cuda) and gives the same answers.
//
// GLM-4.1V (AutoGLM-Phone-9B) takes images: with --prompt-ids each image token
// (the config's image_token_id) stands for the next --image, in order, and the
// engine expands it to the image's rows (--output-json rows cover the expanded
// prompt); with --prompt --chat the images go at the front of the user turn
// (vLLM's string content format, as the phone agent's server is run).
#include <cstdio>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/status_macros.h"
#include "models/glm/chat.h"
#include "models/glm/tokenizer.h"
#include "runtime/engine.h"
#include "runtime/json_constraint.h"
#include "runtime/json_schema.h"
#include "runtime/regex_grammar.h"
#include "runtime/speculative.h"
#include "runtime/weights.h"
#include "tools/common.h"
#include "tools/parallel_flags.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory (config.json, *.safetensors)");
ABSL_FLAG(std::string, config, "", "a config.json, for --random-weights runs without a checkpoint");
ABSL_FLAG(std::string, plan, "", "a compiled .agplan (default: compile the model now)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, prompt_ids, "", "comma-separated prompt token ids");
ABSL_FLAG(std::string, prompt, "", "prompt text (needs tokenizer.model or tokenizer.json in --model or --tokenizer)");
ABSL_FLAG(bool, chat, false, "with --prompt: wrap it as a user turn of the model's chat template");
// Only for --help: main() takes every --image out of the command line first (it may be repeated).
ABSL_FLAG(std::string, image, "", "an image file (PNG, JPEG, WebP) for GLM-4.1V; repeat for more images, in order");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer directory (default: --model)");
ABSL_FLAG(bool, ignore_eos, false, "with --prompt: do not stop at end-of-sequence ids");
ABSL_FLAG(bool, json_object, false,
          "with --prompt: the answer is one JSON object (OpenAI's JSON mode), ending where the object does");
ABSL_FLAG(std::string, json_schema, "",
          "with --prompt: a JSON Schema file; the answer is one document it validates (OpenAI's json_schema "
          "response format), ending where the document does");
ABSL_FLAG(std::string, regex, "",
          "with --prompt: a regular expression (JSON Schema's pattern subset); the whole answer matches it "
          "(vLLM's guided_regex), ending where it may");
ABSL_FLAG(int64_t, max_new_tokens, 32, "tokens to generate");
ABSL_FLAG(std::string, output_json, "", "write new tokens and every logits row to this file");
ABSL_FLAG(bool, stop_on_eos, false,
          "with --prompt-ids, stop at the model's end-of-sequence ids (off: exactly --max-new-tokens tokens)");
ABSL_FLAG(int64_t, random_weights, -1, "use seeded random weights (the seed) instead of the checkpoint's");
ABSL_FLAG(std::string, dtype, "", "when compiling: f32 or bf16 (default: f32 on cpu, bf16 on cuda)");
ABSL_FLAG(int64_t, max_batch_tokens, 256, "when compiling: tokens per step");
ABSL_FLAG(int64_t, max_seqs, 16, "when compiling: sequences per step");
ABSL_FLAG(int64_t, kv_block_size, 16, "when compiling: tokens per KV-cache block");
ABSL_FLAG(std::string, quantize, "", "when compiling: store the linear weights as fp8, int8 or int4 (autoglm-compile --help)");
ABSL_FLAG(std::string, quantize_policy, "", "when compiling: 'PATTERN: FORMAT' lines overriding --quantize per weight");
ABSL_FLAG(std::string, kv_cache_dtype, "auto", "when compiling: auto (the model's dtype), fp8 or int8 (8-bit, a scale per token and KV head)");
ABSL_FLAG(int64_t, max_context, 0, "maximum sequence length (default: the model's max_position_embeddings)");
ABSL_FLAG(int64_t, kv_cache_tokens, 0, "KV-cache capacity in tokens (default: see --help)");
ABSL_FLAG(bool, prefix_caching, true, "reuse cached K/V of full blocks with the same prefix (--noprefix-caching: off)");
ABSL_FLAG(std::string, speculative_config, "",
          "prompt-lookup drafts, vLLM's JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
          "\"prompt_lookup_max\": 4} (the same tokens, in fewer steps when drafts are kept)");
ABSL_FLAG(float, temperature, 0.0f, "sampling temperature; 0 is greedy");
ABSL_FLAG(int32_t, top_k, 0, "sample among the k most likely tokens; 0 is off");
ABSL_FLAG(float, top_p, 1.0f, "sample among the most likely tokens holding this much probability");
ABSL_FLAG(float, min_p, 0.0f, "sample among the tokens at least this many times as likely as the likeliest (0: off)");
ABSL_FLAG(float, repetition_penalty, 1.0f, "penalise tokens already in the sequence (transformers' rule)");
ABSL_FLAG(float, frequency_penalty, 0.0f, "OpenAI's: lower each token's logit by this times its count in the new tokens");
ABSL_FLAG(float, presence_penalty, 0.0f, "OpenAI's: lower each token's logit by this once it is in the new tokens");
ABSL_FLAG(std::string, logit_bias, "", "OpenAI's logit_bias as ID:BIAS,... (BIAS in [-100, 100], added to the logit)");
ABSL_FLAG(std::string, stop_ids, "", "comma-separated ids that also end the generation (kept as the last token)");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");

namespace ag::tools {
namespace {

std::vector<std::string>& ImagePaths() {
  static std::vector<std::string> paths;
  return paths;
}

// --logit-bias "ID:BIAS,...": the ids and biases; their ranges are SamplingParams::Validate's.
absl::StatusOr<std::vector<runtime::SamplingParams::Bias>> ParseLogitBias(absl::string_view text) {
  std::vector<runtime::SamplingParams::Bias> biases;
  if (absl::StripAsciiWhitespace(text).empty()) return biases;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> pair = absl::StrSplit(part, ':');
    runtime::SamplingParams::Bias b;
    if (pair.size() != 2 || !absl::SimpleAtoi(pair[0], &b.id) || !absl::SimpleAtof(pair[1], &b.bias)) {
      return absl::InvalidArgumentError(absl::StrCat("--logit-bias: '", part, "' is not ID:BIAS"));
    }
    biases.push_back(b);
  }
  return biases;
}

absl::Status Run() {
  const std::string device = absl::GetFlag(FLAGS_device);
  ASSIGN_OR_RETURN(Model model, OpenModel(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_config)));
  const bool random = absl::GetFlag(FLAGS_random_weights) >= 0;
  if (!model.checkpoint && !random) return absl::InvalidArgumentError("--config needs --random-weights SEED");

  ASSIGN_OR_RETURN(compiler::CompileOptions options,
                   BuildOptions(absl::GetFlag(FLAGS_dtype), device, absl::GetFlag(FLAGS_max_batch_tokens),
                                absl::GetFlag(FLAGS_max_seqs), absl::GetFlag(FLAGS_kv_block_size)));
  ASSIGN_OR_RETURN(options.quant, QuantPolicyFromFlags(absl::GetFlag(FLAGS_quantize), absl::GetFlag(FLAGS_quantize_policy)));
  ASSIGN_OR_RETURN(options.build.kv_dtype, ParseKvCacheDType(absl::GetFlag(FLAGS_kv_cache_dtype)));
  if ((!options.quant.empty() || options.build.kv_dtype) && !absl::GetFlag(FLAGS_plan).empty()) {
    return absl::InvalidArgumentError(
        "--quantize, --quantize-policy and --kv-cache-dtype apply when compiling; --plan is compiled already");
  }
  const ParallelOptions parallel = ParallelFlags();
  ASSIGN_OR_RETURN(compiler::Plan plan, PlanForModel(model, absl::GetFlag(FLAGS_plan), options, parallel.tp));

  runtime::Request request;
  if (!ImagePaths().empty()) {
    ASSIGN_OR_RETURN(const image::ProcessorConfig processor, LoadProcessorConfig(model));
    ASSIGN_OR_RETURN(request.images, LoadImageFiles(ImagePaths(), processor));
  }
  const std::string prompt_text = absl::GetFlag(FLAGS_prompt);
  const bool text_mode = !prompt_text.empty();
  if (text_mode && !absl::GetFlag(FLAGS_prompt_ids).empty()) {
    return absl::InvalidArgumentError("give only one of --prompt TEXT and --prompt-ids IDS");
  }
  std::unique_ptr<glm::Tokenizer> tokenizer;
  if (text_mode) {
    std::string dir = absl::GetFlag(FLAGS_tokenizer);
    if (dir.empty()) dir = absl::GetFlag(FLAGS_model);
    if (dir.empty()) return absl::InvalidArgumentError("--prompt needs --tokenizer DIR or --model DIR");
    ASSIGN_OR_RETURN(tokenizer, glm::Tokenizer::Load(dir));
    if (tokenizer->vocab_size() > plan.model.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tokenizer->vocab_size(),
                                                     " tokens, more than the model's vocabulary of ",
                                                     plan.model.vocab_size));
    }
    if (absl::GetFlag(FLAGS_chat)) {
      glm::ChatOptions chat;
      ASSIGN_OR_RETURN(chat.chat_template,
                       glm::DetectChatTemplate(dir, model.glm4v ? glm::ChatTemplate::kGlm4v : glm::ChatTemplate::kGlm4));
      glm::ChatMessage user{"user", prompt_text, {}, false};
      if (!ImagePaths().empty()) {  // the images at the front of the turn
        chat.content_format = glm::ContentFormat::kString;
        user.has_parts = true;
        for (size_t i = 0; i < ImagePaths().size(); ++i) user.parts.push_back({glm::ContentPart::Type::kImage, ""});
        user.parts.push_back({glm::ContentPart::Type::kText, prompt_text});
      }
      ASSIGN_OR_RETURN(request.prompt, glm::EncodeChat(*tokenizer, {user}, chat));
    } else {
      if (!ImagePaths().empty()) {
        return absl::InvalidArgumentError("--image needs --chat or --prompt-ids: plain --prompt text has no image tokens");
      }
      request.prompt = tokenizer->Encode(prompt_text);
    }
    request.stop_on_eos = !absl::GetFlag(FLAGS_ignore_eos);
  } else {
    ASSIGN_OR_RETURN(request.prompt, ParseIdList(absl::GetFlag(FLAGS_prompt_ids)));
    request.stop_on_eos = absl::GetFlag(FLAGS_stop_on_eos);
  }
  request.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  const std::string json_path = absl::GetFlag(FLAGS_output_json);
  request.prompt_logits = request.keep_logits = !json_path.empty();
  request.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  request.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  request.sampling.min_p = absl::GetFlag(FLAGS_min_p);
  request.sampling.repetition_penalty = absl::GetFlag(FLAGS_repetition_penalty);
  request.sampling.seed = absl::GetFlag(FLAGS_seed);
  request.sampling.frequency_penalty = absl::GetFlag(FLAGS_frequency_penalty);
  request.sampling.presence_penalty = absl::GetFlag(FLAGS_presence_penalty);
  if (!absl::GetFlag(FLAGS_stop_ids).empty()) {
    ASSIGN_OR_RETURN(request.stop_ids, ParseIdList(absl::GetFlag(FLAGS_stop_ids)));
  }
  if (text_mode) request.sampling.vocab_limit = tokenizer->vocab_size();
  if (absl::GetFlag(FLAGS_json_object)) {
    if (!text_mode) return absl::InvalidArgumentError("--json-object needs --prompt (the tokenizer gives tokens their bytes)");
    if (!request.stop_on_eos) return absl::InvalidArgumentError("--json-object ends at the object: not with --ignore-eos");
    ASSIGN_OR_RETURN(std::shared_ptr<runtime::JsonVocabulary> vocabulary, runtime::JsonVocabulary::Build(*tokenizer));
    request.constraint = [vocabulary] { return vocabulary->NewConstraint(); };
  }
  if (const std::string path = absl::GetFlag(FLAGS_json_schema); !path.empty()) {
    if (!text_mode) return absl::InvalidArgumentError("--json-schema needs --prompt (the tokenizer gives tokens their bytes)");
    if (!request.stop_on_eos) return absl::InvalidArgumentError("--json-schema ends at the document: not with --ignore-eos");
    if (request.constraint) return absl::InvalidArgumentError("--json-schema and --json-object: one or the other");
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    if (!file) return absl::NotFoundError(absl::StrCat("--json-schema ", path, ": cannot read"));
    absl::StatusOr<std::shared_ptr<const runtime::JsonSchema>> schema = runtime::JsonSchema::Compile(text.str());
    if (!schema.ok()) return absl::InvalidArgumentError(absl::StrCat("--json-schema ", path, ": ", schema.status().message()));
    ASSIGN_OR_RETURN(std::shared_ptr<runtime::JsonVocabulary> vocabulary, runtime::JsonVocabulary::Build(*tokenizer));
    ASSIGN_OR_RETURN(std::shared_ptr<runtime::JsonSchemaGrammar> grammar,
                     runtime::JsonSchemaGrammar::Create(*std::move(schema), vocabulary));
    request.constraint = [grammar] { return grammar->NewConstraint(); };
  }
  if (const std::string regex = absl::GetFlag(FLAGS_regex); !regex.empty()) {
    if (!text_mode) return absl::InvalidArgumentError("--regex needs --prompt (the tokenizer gives tokens their bytes)");
    if (!request.stop_on_eos) return absl::InvalidArgumentError("--regex ends where the text matches: not with --ignore-eos");
    if (request.constraint) return absl::InvalidArgumentError("--regex, --json-schema, --json-object: one of them");
    ASSIGN_OR_RETURN(std::shared_ptr<runtime::JsonVocabulary> vocabulary, runtime::JsonVocabulary::Build(*tokenizer));
    absl::StatusOr<std::shared_ptr<runtime::RegexGrammar>> grammar = runtime::RegexGrammar::Create(regex, vocabulary);
    if (!grammar.ok()) return absl::InvalidArgumentError(absl::StrCat("--regex: ", grammar.status().message()));
    request.constraint = [grammar = *std::move(grammar)] { return grammar->NewConstraint(); };
  }
  ASSIGN_OR_RETURN(request.sampling.logit_bias, ParseLogitBias(absl::GetFlag(FLAGS_logit_bias)));
  for (const runtime::SamplingParams::Bias& b : request.sampling.logit_bias) {
    if (b.id >= plan.model.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("--logit-bias: token id ", b.id, " is outside the model's vocabulary [0, ",
                                                     plan.model.vocab_size, ")"));
    }
  }

  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Backend> backend, MakeBackend(device, plan.tp, parallel));
  std::unique_ptr<runtime::WeightSource> weights;
  if (random) {
    weights = std::make_unique<runtime::RandomWeights>(static_cast<uint64_t>(absl::GetFlag(FLAGS_random_weights)));
  } else {
    weights = std::make_unique<runtime::CheckpointWeights>(*model.checkpoint);
  }
  runtime::EngineOptions engine_options;
  engine_options.max_context = absl::GetFlag(FLAGS_max_context);
  engine_options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  engine_options.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  ASSIGN_OR_RETURN(engine_options.speculative, runtime::ParseSpeculativeConfig(absl::GetFlag(FLAGS_speculative_config)));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                   runtime::Engine::Create(plan, *backend, *weights, engine_options));
  ASSIGN_OR_RETURN(int id, engine->Submit(std::move(request)));
  const size_t prompt_tokens = engine->prompt(id).size();  // image tokens expanded

  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0, decode_tokens = 0;
  std::optional<glm::StreamDecoder> stream;
  if (text_mode) stream.emplace(*tokenizer);
  const std::vector<int64_t>& eos = plan.model.eos_token_ids;
  while (engine->HasWork()) {
    ASSIGN_OR_RETURN(std::vector<runtime::TokenEvent> events, engine->Step());
    const runtime::StepStats& stats = engine->last_step();
    if (stats.prefill_tokens > 0) {
      prefill_seconds += stats.seconds;
    } else {
      decode_seconds += stats.seconds;
      ++decode_steps;
      decode_tokens += static_cast<int64_t>(events.size());  // more than one where drafts were kept
    }
    if (!stream) continue;
    for (const runtime::TokenEvent& e : events) {
      const bool is_eos = std::find(eos.begin(), eos.end(), e.token) != eos.end();
      if (is_eos && engine->finish_reason(id) == runtime::FinishReason::kEos) continue;  // the stop token is not text
      ASSIGN_OR_RETURN(std::string text, stream->Next(e.token));
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  }
  const std::vector<int32_t>& tokens = engine->new_tokens(id);
  std::string timing = absl::StrFormat(
      "time: prefill %.3f ms for %zu prompt tokens; decode %.3f ms/token over %lld steps (%s backend)",
      prefill_seconds * 1e3, prompt_tokens,
      decode_tokens > 0 ? decode_seconds * 1e3 / static_cast<double>(decode_tokens) : 0.0,
      static_cast<long long>(decode_steps), std::string(backend->name()));
  if (engine_options.speculative.enabled()) {
    absl::StrAppendFormat(&timing, "; drafts: %lld run, %lld kept", static_cast<long long>(engine->spec_draft_tokens()),
                          static_cast<long long>(engine->spec_accepted_tokens()));
  }
  timing += "\n";
  if (stream) {
    const std::string rest = stream->Finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
    std::fprintf(stderr, "[%zu tokens, finish: %s] %s", tokens.size(),
                 runtime::FinishReasonName(engine->finish_reason(id)), timing.c_str());
  } else {
    std::printf("new_tokens: [%s]\n", absl::StrJoin(tokens, ", ").c_str());
    std::printf("finish: %s\n", runtime::FinishReasonName(engine->finish_reason(id)));
    std::printf("%s", timing.c_str());
  }
  if (!json_path.empty()) {
    nlohmann::json out;
    out["new_tokens"] = tokens;
    out["logits"] = engine->logits(id);
    std::ofstream file(json_path);
    if (!file) return absl::PermissionDeniedError(absl::StrCat(json_path, ": cannot write"));
    file << out.dump() << "\n";
    if (!file) return absl::InternalError(absl::StrCat(json_path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ag::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "generate with a GLM-4 model.\n  autoglm-run --model DIR --prompt-ids 5,17,42 --max-new-tokens 16 "
      "[--output-json FILE]");
  absl::StatusOr<std::vector<std::string>> images = ag::tools::TakeRepeatedFlag(argc, argv, "image");
  if (!images.ok()) return ag::tools::ReportError("autoglm-run", images.status());
  ag::tools::ImagePaths() = std::move(*images);
  ag::tools::ParseFlagsOrExit(argc, argv, "autoglm-run");
  absl::Status status = ag::tools::Run();
  if (!status.ok()) return ag::tools::ReportError("autoglm-run", status);
  return 0;
}
