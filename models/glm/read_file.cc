#include "models/glm/read_file.h"

#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ag::glm {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  if (!fs::is_regular_file(status)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  if (size > static_cast<uintmax_t>(kMaxWholeFileBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes is too large (at most ", kMaxWholeFileBytes, ")"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return text;
}

}  // namespace ag::glm
