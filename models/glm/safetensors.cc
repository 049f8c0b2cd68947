#include "models/glm/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/ref/half.h"
#include "ir/status_macros.h"
#include "models/glm/read_file.h"

namespace ag::glm {
namespace {

using nlohmann::json;

// Header JSON larger than this is treated as corrupt (real headers are < 1 MB).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::optional<ir::DType> SafetensorsDType(const std::string& name) {
  if (name == "F32") return ir::DType::kF32;
  if (name == "BF16") return ir::DType::kBF16;
  if (name == "F16") return ir::DType::kF16;
  if (name == "I32") return ir::DType::kI32;  // packed codes of quantized checkpoints
  if (name == "F8_E4M3") return ir::DType::kF8E4M3;
  if (name == "I8") return ir::DType::kI8;  // int-quantized (W8A8 int8) codes
  if (name == "I64") return ir::DType::kI64;
  return std::nullopt;
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), static_cast<size_t>(size_));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  file->size_ = st.st_size;
  if (file->size_ < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated safetensors file (", file->size_, " bytes)"));
  }
  void* map = mmap(nullptr, static_cast<size_t>(file->size_), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed"));
  file->map_ = static_cast<const uint8_t*>(map);
  RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

absl::Status SafetensorsFile::ParseHeader() {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  };
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(map_[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes || header_len > static_cast<uint64_t>(size_ - 8)) {
    return fail(absl::StrCat("header length ", header_len, " runs past the end of the file (", size_, " bytes)"));
  }
  const char* begin = reinterpret_cast<const char*>(map_ + 8);
  const json header = json::parse(begin, begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return fail("header is not a JSON object");
  const uint8_t* data = map_ + 8 + header_len;
  const int64_t data_size = size_ - 8 - static_cast<int64_t>(header_len);

  struct Range {
    int64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return fail(absl::StrCat(where, ": entry needs dtype, shape and data_offsets"));
    }
    if (!entry["dtype"].is_string()) return fail(absl::StrCat(where, ": dtype must be a string"));
    const std::string dtype_name = entry["dtype"].get<std::string>();
    std::optional<ir::DType> dtype = SafetensorsDType(dtype_name);
    if (!dtype) return fail(absl::StrCat(where, ": unsupported dtype ", dtype_name, " (F32, BF16, F16; I8, I32, I64, F8_E4M3 in quantized checkpoints)"));
    const json& shape = entry["shape"];
    const json& offsets = entry["data_offsets"];
    if (!shape.is_array()) return fail(absl::StrCat(where, ": shape must be a list"));
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return fail(absl::StrCat(where, ": data_offsets must be two non-negative integers"));
    }
    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    int64_t elements = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned()) return fail(absl::StrCat(where, ": shape entries must be non-negative integers"));
      const uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40) || (v != 0 && static_cast<uint64_t>(elements) > (1ull << 42) / v)) {
        return fail(absl::StrCat(where, ": shape is implausibly large"));
      }
      elements *= static_cast<int64_t>(v);
      view.shape.push_back(static_cast<int64_t>(v));
    }
    const uint64_t b = offsets[0].get<uint64_t>(), e = offsets[1].get<uint64_t>();
    if (b > e || e > static_cast<uint64_t>(data_size)) {
      return fail(absl::StrCat(where, ": data_offsets [", b, ", ", e, ") out of range (data section is ", data_size,
                               " bytes)"));
    }
    view.bytes = static_cast<int64_t>(e - b);
    if (view.bytes != elements * ir::DTypeSize(*dtype)) {
      return fail(absl::StrCat(where, ": ", view.bytes, " bytes of data for ", elements, " elements of ", dtype_name));
    }
    view.data = data + b;
    view.file = &path_;
    tensors_.emplace(name, std::move(view));
    ranges.push_back({static_cast<int64_t>(b), static_cast<int64_t>(e), name});
  }
  // The tensors must cover the data section exactly, as the format requires:
  // a gap or an overlap means a wrong header length or corrupt offsets, and
  // reading on would give every tensor shifted bytes.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  int64_t covered = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin < covered) {
      return fail(absl::StrCat("tensors '", ranges[i - 1].name, "' and '", ranges[i].name, "' overlap"));
    }
    if (ranges[i].begin > covered) {
      return fail(absl::StrCat("bytes [", covered, ", ", ranges[i].begin, ") of the data section before tensor '",
                               ranges[i].name, "' belong to no tensor (wrong header length or offsets?)"));
    }
    covered = ranges[i].end;
  }
  if (covered != data_size) {
    return fail(absl::StrCat("the tensors cover ", covered, " of the ", data_size,
                             " data bytes (wrong header length or truncated file?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  std::vector<std::string> shard_names;
  absl::flat_hash_map<std::string, std::string> expected_file;  // tensor -> shard, from the index
  if (fs::exists(index_path, ec)) {
    ASSIGN_OR_RETURN(const std::string s, ReadWholeFile(index_path.string()));
    const json index = json::parse(s.begin(), s.end(), nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": needs a 'weight_map' object"));
    }
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map entry for '", tensor,
                                                       "' must be a file name"));
      }
      const std::string name = file.get<std::string>();
      const bool control = std::any_of(name.begin(), name.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      });
      if (name.empty() || control || name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
          name == "." || name == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path.string(), ": shard name '", name, "' must be a plain file name"));
      }
      if (std::find(shard_names.begin(), shard_names.end(), name) == shard_names.end()) shard_names.push_back(name);
      expected_file[tensor] = name;
    }
  } else if (fs::exists(single_path, ec)) {
    shard_names.push_back("model.safetensors");
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no model.safetensors or model.safetensors.index.json"));
  }
  for (const std::string& shard : shard_names) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open((fs::path(dir) / shard).string()));
    std::shared_ptr<SafetensorsFile> shared(std::move(file));
    for (const auto& [name, view] : shared->tensors()) {
      if (!expected_file.empty()) {
        auto it = expected_file.find(name);
        if (it == expected_file.end() || it->second != shard) continue;  // the index decides
      }
      if (!ckpt.by_name_.emplace(name, &view).second) {
        return absl::InvalidArgumentError(absl::StrCat(shared->path(), ": tensor '", name, "' appears twice"));
      }
    }
    ckpt.files_.push_back(std::move(shared));
  }
  for (const auto& [tensor, shard] : expected_file) {
    if (!ckpt.by_name_.contains(tensor)) {
      return absl::InvalidArgumentError(
          absl::StrCat((fs::path(dir) / shard).string(), ": tensor '", tensor, "' listed in the index is missing"));
    }
  }
  return ckpt;
}

absl::StatusOr<const TensorView*> Checkpoint::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return absl::NotFoundError(absl::StrCat(dir_, ": tensor '", name, "' is missing"));
  return it->second;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : by_name_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void ConvertToFloat(ir::DType dtype, const uint8_t* data, int64_t count, float* out) {
  switch (dtype) {
    case ir::DType::kF32:
      std::memcpy(out, data, static_cast<size_t>(count) * 4);
      return;
    case ir::DType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = BF16ToFloat(h);
      }
      return;
    case ir::DType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = HalfToFloat(h);
      }
      return;
    default:
      return;  // callers convert float tensors only (FindSourceTensor refuses the others)
  }
}

}  // namespace ag::glm
