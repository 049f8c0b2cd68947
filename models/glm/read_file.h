// Reads a whole file into a string; errors name the path.
#ifndef AUTOGLM_MODELS_GLM_READ_FILE_H_
#define AUTOGLM_MODELS_GLM_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ag::glm {

// The files read whole (configs, indexes, tokenizers, plans) are at most a few
// tens of MB; anything larger is refused rather than allocated.
inline constexpr int64_t kMaxWholeFileBytes = int64_t{1} << 30;

// A regular file of at most kMaxWholeFileBytes; a directory, a device or a
// larger file is an error naming the path.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_READ_FILE_H_
