// Test helper: the tensors of a golden.safetensors (F32, U8, I64), read whole.
// Goldens are test data, not checkpoints, so they have their own small
// reader rather than the engine's (which takes model weights only).
#ifndef AUTOGLM_TESTS_TESTING_GOLDEN_TENSORS_H_
#define AUTOGLM_TESTS_TESTING_GOLDEN_TENSORS_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ag::testing {

struct GoldenTensor {
  std::string dtype;  // "F32", "U8", "I64"
  std::vector<int64_t> shape;
  std::string bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<float> f32() const {
    if (dtype != "F32") throw std::runtime_error("not F32: " + dtype);
    std::vector<float> v(static_cast<size_t>(numel()));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  }
  std::vector<uint8_t> u8() const {
    if (dtype != "U8") throw std::runtime_error("not U8: " + dtype);
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  }
};

inline std::map<std::string, GoldenTensor> LoadGoldenTensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string file = s.str();
  if (file.size() < 8) throw std::runtime_error("cannot read " + path);
  uint64_t header_size;
  std::memcpy(&header_size, file.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, header_size));
  std::map<std::string, GoldenTensor> out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    GoldenTensor t;
    t.dtype = entry.at("dtype").get<std::string>();
    t.shape = entry.at("shape").get<std::vector<int64_t>>();
    const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
    t.bytes = file.substr(8 + header_size + offsets[0], offsets[1] - offsets[0]);
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_GOLDEN_TENSORS_H_
