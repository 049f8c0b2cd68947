// Safetensors checkpoints: memory-mapped, validated before any byte is used.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// (`name -> {dtype, shape, data_offsets}` plus optional `__metadata__`), then
// the data. Every entry is checked against the file: known dtype, offsets
// inside the data section, size = product(shape) * dtype size, and no two
// tensors overlapping. A sharded checkpoint has model.safetensors.index.json
// mapping tensor names to files.
#ifndef AUTOGLM_MODELS_GLM_SAFETENSORS_H_
#define AUTOGLM_MODELS_GLM_SAFETENSORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/types.h"

namespace ag::glm {

struct TensorView {
  std::string name;
  ir::DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping, valid while the file is open
  int64_t bytes = 0;
  const std::string* file = nullptr;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const absl::flat_hash_map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  absl::Status ParseHeader();

  std::string path_;
  const uint8_t* map_ = nullptr;
  int64_t size_ = 0;
  absl::flat_hash_map<std::string, TensorView> tensors_;
};

// All tensors of a checkpoint directory (one file or an index of shards).
class Checkpoint {
 public:
  static absl::StatusOr<Checkpoint> Open(const std::string& dir);

  // Error (naming the tensor and the directory) when absent.
  absl::StatusOr<const TensorView*> Find(absl::string_view name) const;
  bool Contains(absl::string_view name) const { return by_name_.contains(name); }
  const std::string& dir() const { return dir_; }
  std::vector<std::string> Names() const;

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  absl::flat_hash_map<std::string, const TensorView*> by_name_;
};

// Converts `count` elements of F32/BF16/F16 data to float.
void ConvertToFloat(ir::DType dtype, const uint8_t* data, int64_t count, float* out);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_SAFETENSORS_H_
