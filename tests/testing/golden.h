// Test helpers: the fixtures' golden.json, and running a fixture through the engine.
#ifndef AUTOGLM_TESTS_TESTING_GOLDEN_H_
#define AUTOGLM_TESTS_TESTING_GOLDEN_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ag::testing {

// ||got - want|| / ||want||.
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    num += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    den += double{want[i]} * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Flattened logits rows [0, rows) (fewer where `logits` has fewer).
inline std::vector<float> Rows(const std::vector<std::vector<float>>& logits, size_t rows) {
  std::vector<float> flat;
  for (size_t r = 0; r < rows && r < logits.size(); ++r) flat.insert(flat.end(), logits[r].begin(), logits[r].end());
  return flat;
}

// Number of new tokens equal to `want` before the first difference.
inline size_t CommonPrefix(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return i;
}

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

// How far apart golden's top two logits must be for a bf16 run to be held to golden's choice of
// token: five times the run's RMS logit error so far (its relative error over the first `rows` rows
// times those rows' RMS logit), 0.05 at least. Measured on the H200 (2026-12-04): bf16 runs of the
// tiny fixtures sit 1-2% from transformers' fp32 logits (RMS 1.5), the CPU's emulation as much as
// the GPU, so a gap of 0.12 can flip when a batch's composition changes the rounding.
inline double SureGap(double relative_err, const GoldenCase& c, size_t rows) {
  double sum = 0;
  size_t count = 0;
  for (size_t r = 0; r < rows && r < c.logits.size(); ++r) {
    for (const float v : c.logits[r]) sum += double{v} * v;
    count += c.logits[r].size();
  }
  const double rms = count > 0 ? std::sqrt(sum / count) : 0.0;
  return std::max(0.05, 5.0 * relative_err * rms);
}

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
