// The host's share of a phone-agent step with a screenshot, which the GPU waits on:
//   ParseRequest    the phone agent's request body (its system prompt, a text turn and the screenshot
//                   as a base64 data URL) parsed as JSON: the server's fast parser (serve/json_fast.h)
//                   and, for comparison, nlohmann's; then the whole chat request read from it, and the
//                   data URL's base64 decoded (DataUrl);
//   DecodePng       the request's PNG decoded to RGB: the fast path (image/png_fast.h) and, for
//                   comparison, libpng alone; a 1080x2400 RGBA screenshot-like image encoded by libpng
//                   (every filter, level 6), or the file AUTOGLM_BENCH_PNG names (a real screenshot);
//   Preprocess      a 1080x2400 screenshot resized, normalised and cut into patches (and hashed);
//   StagePatches    its patches rounded to bf16 into the (reused) upload buffer, as the CUDA
//                   backend stages the vision program's input;
//   WidenRows       the vision program's bf16 rows widened into a fresh float buffer, as the backend
//                   reads them back for the engine (a fresh buffer: its first touch is part of the cost).
//   TopKFloor       a host-sampled row's top-k floor, and the whole draw with top_k (SampleFilteredTopK).
// Run: build/bench/host_bench (it uses every core, as the server does).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "bench/screenshot.h"
#include "image/png_fast.h"
#include "image/preprocess.h"
#include "kernels/ref/half.h"
#include "kernels/ref/parallel.h"
#include "kernels/ref/ref.h"
#include "runtime/backend.h"
#include "serve/base64_fast.h"
#include "serve/json_fast.h"
#include "serve/media.h"
#include "serve/openai.h"

namespace ag::bench {
namespace {

image::ProcessorConfig Glm4vProcessor() { return image::ProcessorConfig{}; }  // GLM-4.1V's defaults

// The screenshot as the phone sends it (bench::ScreenshotPng), or the file AUTOGLM_BENCH_PNG names.
std::string ScreenshotPngOrFile() {
  if (const char* path = std::getenv("AUTOGLM_BENCH_PNG"); path != nullptr && *path != '\0') {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  return ScreenshotPng(1080, 2400, 1);
}

// The body Open-AutoGLM's client sends for a step (its shape: scripts/sample_messages_en.json of
// zai-org/Open-AutoGLM): a system prompt, the task, the screen as a data URL.
// What the phone agent's client sends each step; with `extra` (response_format, tools) merged in.
std::string AgentRequestBody(const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json body = {
      {"model", "autoglm-phone-9b"},
      {"max_tokens", 3000},
      {"temperature", 0.0},
      {"top_p", 0.85},
      {"frequency_penalty", 0.2},
      {"stream", true},
      {"messages",
       {{{"role", "system"}, {"content", std::string(2400, 'r')}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Open the settings.\n\n** Screen Info **\n\n{\"current_app\": \"System Home\"}"}},
           {{"type", "image_url"},
            {"image_url", {{"url", "data:image/png;base64," + absl::Base64Escape(ScreenshotPngOrFile())}}}}}}}}}};
  body.update(extra);
  return body.dump();
}

// range(0): 1 the server's parser (the fast path where it takes the body), 0 nlohmann's.
void BM_ParseRequest(benchmark::State& state) {
  const std::string body = AgentRequestBody();
  for (auto _ : state) {
    nlohmann::json j = state.range(0) == 1 ? *serve::ParseJsonFast(body, serve::kMaxJsonDepth)
                                           : nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
    benchmark::DoNotOptimize(j);
  }
  state.SetLabel(absl::StrCat(body.size(), " bytes"));
}
BENCHMARK(BM_ParseRequest)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// range(0): 0 the agent's body, 1 with a response_format json_schema, 2 with two tools (both read
// again in the client's key order).
void BM_ParseChatRequest(benchmark::State& state) {
  const nlohmann::json action = {{"type", "object"},
                                 {"properties", {{"x", {{"type", "integer"}}}, {"y", {{"type", "integer"}}}}},
                                 {"required", {"x", "y"}}};
  const nlohmann::json extras[] = {
      nlohmann::json::object(),
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "tap"}, {"schema", action}}}}}},
      {{"tools", {{{"type", "function"}, {"function", {{"name", "tap"}, {"parameters", action}}}},
                  {{"type", "function"}, {"function", {{"name", "back"}}}}}}}};
  const std::string body = AgentRequestBody(extras[state.range(0)]);
  for (auto _ : state) {
    serve::ChatResult request = serve::ParseChatRequest(body);
    if (std::holds_alternative<serve::ApiError>(request)) state.SkipWithError("the body was refused");
    benchmark::DoNotOptimize(request);
  }
}
BENCHMARK(BM_ParseChatRequest)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DataUrl(benchmark::State& state) {
  const std::string url = "data:image/png;base64," + absl::Base64Escape(ScreenshotPngOrFile());
  for (auto _ : state) {
    absl::StatusOr<std::string> bytes = serve::FetchImageBytes(url, {}, "image_url");
    if (!bytes.ok()) state.SkipWithError(bytes.status().ToString().c_str());
    benchmark::DoNotOptimize(bytes);
  }
  state.SetLabel(absl::StrCat(url.size(), " bytes"));
}
BENCHMARK(BM_DataUrl)->Unit(benchmark::kMillisecond)->UseRealTime();

// The screenshot's base64 alone: range(0) 1 the server's decoder (serve/base64_fast.h), 0 absl's.
void BM_Base64(benchmark::State& state) {
  const std::string text = absl::Base64Escape(ScreenshotPngOrFile());
  std::string bytes;
  for (auto _ : state) {
    const bool ok = state.range(0) == 1 ? serve::DecodeBase64Fast(text, &bytes) : absl::Base64Unescape(text, &bytes);
    if (!ok) state.SkipWithError("not base64");
    benchmark::DoNotOptimize(bytes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Base64)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond)->UseRealTime();

// range(0): 1 the decoder the engine uses (the fast path where it takes the file), 0 libpng alone.
void BM_DecodePng(benchmark::State& state) {
  const std::string png = ScreenshotPngOrFile();
  for (auto _ : state) {
    absl::StatusOr<image::RgbImage> rgb =
        state.range(0) == 1 ? image::Decode(png, "screenshot") : image::DecodePngLibpng(png, "screenshot", {});
    if (!rgb.ok()) state.SkipWithError(rgb.status().ToString().c_str());
    benchmark::DoNotOptimize(rgb);
  }
  state.SetLabel(absl::StrCat(png.size(), " bytes", state.range(0) == 1 && !image::DecodeCommonPng(png, {})
                                                         ? " (not a file the fast path takes)"
                                                         : ""));
}
BENCHMARK(BM_DecodePng)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Preprocess(benchmark::State& state) {
  const image::RgbImage rgb = Screenshot(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 1);
  for (auto _ : state) {
    absl::StatusOr<image::Patches> p = image::Preprocess(rgb, Glm4vProcessor(), "screenshot");
    if (!p.ok()) state.SkipWithError(p.status().ToString().c_str());
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_Preprocess)->Args({1080, 2400})->Args({720, 1600})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StagePatches(benchmark::State& state) {
  absl::StatusOr<image::Patches> p = image::Preprocess(Screenshot(1080, 2400, 1), Glm4vProcessor(), "screenshot");
  if (!p.ok()) {
    state.SkipWithError(p.status().ToString().c_str());
    return;
  }
  runtime::FloatParts parts;
  parts.Append(p->pixels.data(), static_cast<int64_t>(p->pixels.size()));
  std::vector<uint16_t> staging(p->pixels.size());
  for (auto _ : state) {
    parts.CopyToBF16(staging.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(p->pixels.size()) * 6);
}
BENCHMARK(BM_StagePatches)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_WidenRows(benchmark::State& state) {
  absl::StatusOr<image::Patches> p = image::Preprocess(Screenshot(1080, 2400, 1), Glm4vProcessor(), "screenshot");
  if (!p.ok()) {
    state.SkipWithError(p.status().ToString().c_str());
    return;
  }
  const int64_t elements = p->rows() / 4 * 4096;  // the screenshot's merged rows x GLM-4.1V's hidden size
  std::vector<uint16_t> bits(static_cast<size_t>(elements));
  for (int64_t i = 0; i < elements; ++i) bits[static_cast<size_t>(i)] = FloatToBF16(static_cast<float>(i % 977) * 0.01f);
  for (auto _ : state) {
    UninitializedVector<float> out(static_cast<size_t>(elements));
    float* values = out.data();
    ParallelFor(elements, kMinCopyPerThread,
                [&](int64_t begin, int64_t end) { BF16sToFloats(bits.data() + begin, end - begin, values + begin); });
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * elements * 6);
}
BENCHMARK(BM_WidenRows)->Unit(benchmark::kMillisecond)->UseRealTime();

// A host-sampled row's top-k floor (k = 50) over GLM-4's 151,552 ids of normally distributed logits:
// range(0) 0 a copy of the row partially sorted (the sampler's way before), 1 ref::KthLargest; and
// the whole draw (ref::SampleFiltered, temperature 1, top_k 50).
std::vector<float> NormalLogits() {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> row(151552);
  for (float& v : row) v = normal(rng);
  return row;
}

void BM_TopKFloor(benchmark::State& state) {
  const std::vector<float> row = NormalLogits();
  const int64_t n = static_cast<int64_t>(row.size()), k = 50;
  for (auto _ : state) {
    float floor = 0;
    if (state.range(0) == 0) {
      std::vector<float> sorted(row);
      std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
      floor = sorted[k - 1];
    } else {
      floor = ref::KthLargest(row.data(), n, k);
    }
    benchmark::DoNotOptimize(floor);
  }
}
BENCHMARK(BM_TopKFloor)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_SampleFilteredTopK(benchmark::State& state) {
  const std::vector<float> row = NormalLogits();
  float u = 0.0f;
  for (auto _ : state) {
    u = u + 0.618034f - (u + 0.618034f >= 1.0f ? 1.0f : 0.0f);
    benchmark::DoNotOptimize(ref::SampleFiltered(row.data(), static_cast<int64_t>(row.size()), {1.0f, 50, 1.0f, 0, u}));
  }
}
BENCHMARK(BM_SampleFilteredTopK)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ag::bench

BENCHMARK_MAIN();
