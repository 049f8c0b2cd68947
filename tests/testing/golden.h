// Test helpers: the fixtures' golden.json, and running a fixture through the engine.
#ifndef AUTOGLM_TESTS_TESTING_GOLDEN_H_
#define AUTOGLM_TESTS_TESTING_GOLDEN_H_

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ag::testing {

inline std::string TestDataDir() {
  const char* dir = std::getenv("AUTOGLM_TEST_DATA");
  return dir != nullptr ? dir : "tests/data";
}

struct GoldenCase {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> new_tokens;
  std::vector<std::vector<float>> logits;  // P + N rows
  std::vector<float> top1_top2_gap;
};

inline std::vector<GoldenCase> LoadGolden(const std::string& fixture_dir, const std::string& file = "golden.json") {
  std::ifstream in(fixture_dir + "/" + file);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : j.at("cases")) {
    GoldenCase g;
    g.input_ids = c.at("input_ids").get<std::vector<int32_t>>();
    g.new_tokens = c.at("new_tokens").get<std::vector<int32_t>>();
    g.logits = c.at("logits").get<std::vector<std::vector<float>>>();
    g.top1_top2_gap = c.at("top1_top2_gap").get<std::vector<float>>();
    cases.push_back(std::move(g));
  }
  return cases;
}

// The shared fixtures, and tiny-glm-mqa (multi-query: 8 heads over 1 KV head; made here by
// tests/data/make_mqa_fixture.py with transformers, in the same format).
inline const char* const kFixtures[] = {"tiny-glm", "tiny-glm4", "tiny-chatglm", "tiny-glm-mqa"};

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_GOLDEN_H_
