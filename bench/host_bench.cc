// The host's share of a phone-agent step with a screenshot, which the GPU waits on:
//   DecodePng       the request's PNG decoded to RGB: the fast path (image/png_fast.h) and, for
//                   comparison, libpng alone; a 1080x2400 RGBA screenshot-like image encoded by libpng
//                   (every filter, level 6), or the file AUTOGLM_BENCH_PNG names (a real screenshot);
//   Preprocess      a 1080x2400 screenshot resized, normalised and cut into patches (and hashed);
//   StagePatches    its patches rounded to bf16 into the (reused) upload buffer, as the CUDA
//                   backend stages the vision program's input;
//   WidenRows       the vision program's bf16 rows widened into a fresh float buffer, as the backend
//                   reads them back for the engine (a fresh buffer: its first touch is part of the cost).
// Run: build/bench/host_bench (it uses every core, as the server does).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/screenshot.h"
#include "image/png_fast.h"
#include "image/preprocess.h"
#include "kernels/ref/half.h"
#include "kernels/ref/parallel.h"
#include "runtime/backend.h"

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

}  // namespace
}  // namespace ag::bench

BENCHMARK_MAIN();
