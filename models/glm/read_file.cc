#include "models/glm/read_file.h"

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::glm {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string text(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return text;
}

}  // namespace ag::glm
