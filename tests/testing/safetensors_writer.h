// Test helper: writes safetensors files, well-formed or deliberately broken.
#ifndef AUTOGLM_TESTS_TESTING_SAFETENSORS_WRITER_H_
#define AUTOGLM_TESTS_TESTING_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/ref/half.h"
#include "kernels/ref/quant.h"

namespace ag::testing {

struct FakeTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::vector<float> values;  // written as F32, or rounded to BF16 / F16 / F8_E4M3
};

inline int64_t DTypeBytes(const std::string& dtype) { return dtype == "F32" ? 4 : dtype == "F8_E4M3" ? 1 : 2; }

// Header JSON and data for `tensors`, packed in order.
inline nlohmann::json HeaderFor(const std::vector<FakeTensor>& tensors, std::string* data) {
  nlohmann::json header = nlohmann::json::object();
  for (const FakeTensor& t : tensors) {
    const size_t begin = data->size();
    for (float v : t.values) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (t.dtype == "F32") {
        data->append(reinterpret_cast<const char*>(&bits), 4);
      } else if (t.dtype == "F8_E4M3") {
        data->push_back(static_cast<char>(ref::FloatToE4M3(v)));
      } else {
        const uint16_t half = t.dtype == "F16" ? FloatToHalf(v) : FloatToBF16(v);
        data->append(reinterpret_cast<const char*>(&half), 2);
      }
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data->size()}}};
  }
  return header;
}

// Writes `header_text` with a length prefix of `declared_len` (the real length when negative), then `data`.
inline void WriteRaw(const std::string& path, const std::string& header_text, const std::string& data,
                     int64_t declared_len = -1) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t len = declared_len < 0 ? header_text.size() : static_cast<uint64_t>(declared_len);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  out << header_text << data;
}

inline void WriteSafetensors(const std::string& path, const std::vector<FakeTensor>& tensors) {
  std::string data;
  const nlohmann::json header = HeaderFor(tensors, &data);
  WriteRaw(path, header.dump(), data);
}

}  // namespace ag::testing

#endif  // AUTOGLM_TESTS_TESTING_SAFETENSORS_WRITER_H_
