// Test helper: tiny-glm4v's golden cases (make_glm4v_fixture.py) as the
// engine takes them: the prompt before expansion, the images decoded and
// preprocessed from their files, and transformers' answers.
#ifndef AUTOGLM_TESTS_TESTING_GLM4V_CASES_H_
#define AUTOGLM_TESTS_TESTING_GLM4V_CASES_H_

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "image/image.h"
#include "image/preprocess.h"
#include "runtime/engine.h"
#include "tests/testing/golden.h"
#include "tests/testing/golden_tensors.h"

namespace ag::testing {

inline constexpr int32_t kImageToken = 314;

inline std::string Glm4vDir() { return TestDataDir() + "/tiny-glm4v"; }

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string title;
  std::vector<int32_t> prompt;  // as the chat template renders it: one image token per image
  std::vector<std::shared_ptr<const image::Patches>> images;
  std::vector<int32_t> expanded, new_tokens;
  std::vector<std::vector<float>> logits;  // one row per position of expanded + new_tokens
};

inline const std::vector<Case>& Cases() {
  static const std::vector<Case>* cases = [] {
    auto* out = new std::vector<Case>;
    std::ifstream in(Glm4vDir() + "/golden.json");
    const nlohmann::json golden = nlohmann::json::parse(in);
    const auto tensors = LoadGoldenTensors(Glm4vDir() + "/golden.safetensors");
    absl::StatusOr<image::ProcessorConfig> processor =
        image::ParseProcessorConfig(ReadFile(Glm4vDir() + "/preprocessor_config.json"), "preprocessor_config.json");
    EXPECT_TRUE(processor.ok()) << processor.status();
    for (size_t i = 0; i < golden["cases"].size(); ++i) {
      const nlohmann::json& g = golden["cases"][i];
      Case c;
      c.title = g["title"];
      c.expanded = g["input_ids"].get<std::vector<int32_t>>();
      c.new_tokens = g["new_tokens"].get<std::vector<int32_t>>();
      for (size_t k = 0; k < c.expanded.size(); ++k) {  // a run of image tokens was one before the processor
        if (c.expanded[k] != kImageToken || k == 0 || c.expanded[k - 1] != kImageToken) c.prompt.push_back(c.expanded[k]);
      }
      for (const auto& name : g["images"]) {
        const std::string file = Glm4vDir() + "/" + name.get<std::string>();
        absl::StatusOr<image::RgbImage> rgb = image::Decode(ReadFile(file), file);
        EXPECT_TRUE(rgb.ok()) << rgb.status();
        absl::StatusOr<image::Patches> patches = image::Preprocess(*rgb, *processor, file);
        EXPECT_TRUE(patches.ok()) << patches.status();
        c.images.push_back(std::make_shared<const image::Patches>(std::move(*patches)));
      }
      const std::vector<float> flat = tensors.at("case" + std::to_string(i) + ".logits").f32();
      const size_t rows = c.expanded.size() + c.new_tokens.size(), vocab = flat.size() / rows;
      for (size_t r = 0; r < rows; ++r) c.logits.emplace_back(flat.begin() + r * vocab, flat.begin() + (r + 1) * vocab);
      out->push_back(std::move(c));
    }
    return out;
  }();
  return *cases;
}

// The case as an engine request that keeps every logits row (prompt and new tokens).
inline runtime::Request RequestFor(const Case& c) {
  runtime::Request r;
  r.prompt = c.prompt;
  r.images = c.images;
  r.max_new_tokens = static_cast<int64_t>(c.new_tokens.size());
  r.prompt_logits = r.keep_logits = true;
  r.stop_on_eos = false;
  return r;
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_GLM4V_CASES_H_
