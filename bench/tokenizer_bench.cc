// Tokenizer speed: loading the GLM-4 vocabulary, and encoding several MB of
// mixed English and Chinese text on one core. Targets: load < 100 ms,
// encode >= 5 MB/s. Reads ../shared/tokenizers/glm4 (set AUTOGLM_GLM4_TOKENIZER).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>

#include "models/glm/tokenizer.h"

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

}  // namespace

BENCHMARK_MAIN();
